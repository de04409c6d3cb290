/* bench_mpi: bench_mlp's training step, data parallel over MPI.
 *
 * Run under mpirun (make bench does: mpirun -np 2 bench_mpi --json).  The
 * model is bench_mlp's (bench_mlp_model.h): an MLP 784-1024-1024-10, relu,
 * softmax cross-entropy, f32, SGD with lr LR by six graft_assign_subs, on
 * one global batch of B = 256 seeded rows; its six variables (1.86 M
 * parameters, 7.1 MiB of gradients) live in a module here, so that the step
 * can all-reduce them with graft_module_allreduce_gradients.  Every rank
 * builds the same data and weights from the same seeds; rank r of p trains
 * on rows [r B / p, (r + 1) B / p).
 *
 * Configs, interleaved rep by rep (the first config of a rep rotates):
 *   step_1x2        rank 0 alone: the whole batch B on a ws runtime of 2
 *                   threads, no all-reduce (the other ranks sleep, polling
 *                   a barrier every 200 us, so the 2 threads have the
 *                   machine); the single-process baseline;
 *   step_dp         every rank: its B / p rows on 1 thread (a ws runtime
 *                   that does not bind: under mpirun --bind-to none graft
 *                   would bind every rank's worker to the same first PU),
 *                   the gradients all-reduced (mean) before the update, for
 *                   each bucket size of the sweep (BUCKET_MIB);
 *   compute         every rank at once: the same step without the
 *                   all-reduce (the compute alone, with the machine as
 *                   busy as in step_dp);
 *   allreduce       every rank: a function that only all-reduces six
 *                   gradient-shaped inputs (graft_module_allreduce_gradients,
 *                   the same buckets as step_dp, posted and waited) into six
 *                   outputs; it also copies its inputs in and its outputs
 *                   out, as graft's function calls do;
 *   mpi_buckets     every rank: the same buckets as plain MPI_Iallreduce
 *                   calls on buffers of their sizes, all posted, then
 *                   MPI_Waitall: the exchange alone, no graft;
 *   mpi_allreduce   every rank: one blocking MPI_Allreduce (sum, f32) of
 *                   RAW_BYTES bytes, for the alpha-beta fit below;
 *   reduce_c        every rank at once: y[i] += x[i] in plain C over as
 *                   many floats as the gradients (gamma, the reduction's
 *                   cost per byte, of the alpha-beta-gamma model).
 * A multi-rank unit starts after a barrier; its time is the slowest
 * rank's (max over the ranks, per rep); median, min and max over the reps.
 *
 * Derived rows: ratio step_dp / step_1x2 (target <= TARGET_RATIO), and per
 * bucket size the fraction of the all-reduce hidden behind the backward
 * pass, hidden = 1 - (step_dp - compute) / allreduce (target >=
 * TARGET_HIDDEN; "hidden" clamped to [0, 1], "hidden_raw" not; also
 * against mpi_buckets, the exchange without graft's copies).  Both are
 * medians over the reps of each rep's own ratio (the configs of one rep
 * run within a second: a shared machine's drift cancels), with the same
 * formulas on the medians beside them ("ratio_of_medians",
 * "hidden_of_medians"); and alpha
 * and beta of the ring all-reduce model T(n) = 2 (p - 1) alpha + 2 (p - 1)
 * / p n beta fitted to the smallest and largest mpi_allreduce sizes, with
 * gamma from reduce_c (docs/scaling.md uses them).
 *
 * Checks, before timing: one data-parallel step from the initial weights
 * updates every variable as one step of the whole batch does on rank 0
 * (max |difference| / max |update| <= 1e-4: only the order of the float
 * sums differs), and after 3 more data-parallel steps every rank holds the
 * same bytes (graft_module_replicas_equal); and rank 0 may run on 2 CPUs
 * at least (mpirun --bind-to none), which step_1x2 needs.
 *
 * Usage: mpirun -np 2 bench_mpi [--json] [--reps N]
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_PROG "bench_mpi" /* bench_common.h, bench_mlp_model.h: its messages */
#include "bench_common.h"
#include "bench_mlp_model.h"
#include "graft.h"
#include "graft/mpi.h"

#define LR 0.05 /* bench_mlp's */
#define MIN_REPS 5
#define DEFAULT_REPS 15
#define WARMUP_CALLS 2
#define TARGET_REP_US 20000.0 /* the short configs repeat their call for this long */
#define MAX_INNER 2000
#define CHECK_STEPS 3
#define TARGET_RATIO 1.15
#define TARGET_HIDDEN 0.5
#define IDLE_POLL_NS 200000L

/* The bucket sizes of the sweep; 25 MiB is graft's default. */
#define N_BUCKETS 4
static const double BUCKET_MIB[N_BUCKETS] = {0.25, 1, 4, 25};
/* Message sizes of the plain MPI_Allreduce rows; the last is every
 * gradient at once. */
#define N_RAW 6
static int64_t RAW_BYTES[N_RAW] = {4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 0};

static int64_t bucket_bytes(int b) { return (int64_t)(BUCKET_MIB[b] * 1048576.0); }

/* ---- the state ---------------------------------------------------------------- */

typedef enum kind { K_SINGLE, K_DP, K_COMPUTE, K_AR, K_MPI_BUCKETS, K_MPI, K_SUM } kind;
static const char *const KIND_NAMES[] = {"step_1x2",    "step_dp",       "compute", "allreduce",
                                         "mpi_buckets", "mpi_allreduce", "reduce_c"};

/* What a traced function needs: the bench, and its bucket size (0: no
 * all-reduce). */
typedef struct bench bench;
typedef struct fn_ctx {
  bench *b;
  int64_t bucket_bytes;
} fn_ctx;

/* The buckets graft makes of the gradients (graft/mpi.h: filled from the
 * last variable back; a value joins the bucket unless it would pass the
 * size, a larger one goes alone): their element counts. */
typedef struct layout {
  int n;
  int64_t count[N_VARS];
} layout;

typedef struct config {
  kind k;
  int bucket; /* K_DP, K_AR, K_MPI_BUCKETS: index into BUCKET_MIB */
  int raw;    /* K_MPI: index into RAW_BYTES */
  fn_ctx ctx;
  graft_function *f;
  int inner; /* calls per rep, the same on every rank */
  double *t; /* its reps' times in us, in rep order (bench.times) */
  double median_us, min_us, max_us;
} config;

#define MAX_CONFIGS (3 + 3 * N_BUCKETS + N_RAW)

struct bench {
  int rank, ranks, json, reps;
  long cpus0;    /* CPUs the calling thread may use at the start */
  MPI_Comm comm; /* graft's collectives: a duplicate of MPI_COMM_WORLD */
  model m;       /* its variables replaced by mod's */
  graft_module *mod;
  graft_tensor *init[N_VARS]; /* the initial values, to reset */
  graft_tensor *shard_x, *shard_labels;
  graft_tensor *grads[N_VARS], *reduced[N_VARS]; /* allreduce's inputs and outputs */
  graft_runtime *rt1, *rt2;                      /* ws at 1 thread; ws at 2 (rank 0) */
  char rt1_desc[256], rt2_desc[256];
  layout lay[N_BUCKETS];
  float *raw; /* the MPI rows' buffer (zeros: sums stay finite) */
  float *addend; /* reduce_c's */
  int64_t raw_floats;
  config cf[MAX_CONFIGS];
  int n_cf;
  double *times; /* every config's reps */
};

/* ---- the traced functions ------------------------------------------------------- */

/* x, labels -> loss; the update by SGD, the gradients averaged over the
 * ranks first unless bucket_bytes is 0. */
static graft_status trace_step(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  const fn_ctx *c = user;
  if (n_in != 2 || n_out != 1)
    return graft_trace_fail(t, GRAFT_EINVAL, "bench_mpi: expected 2 inputs, 1 output");
  graft_value *reads[N_VARS], *grads[N_VARS];
  graft_value *loss = trace_loss(t, &c->b->m, in[0], in[1], reads);
  graft_status st =
      graft_gradients(t, 1, &loss, NULL, N_VARS, reads, GRAFT_UNCONNECTED_ZERO, grads);
  if (st == GRAFT_OK && c->bucket_bytes) {
    const graft_allreduce_opts o = {.bucket_bytes = c->bucket_bytes};
    st = graft_module_allreduce_gradients(t, c->b->mod, c->b->comm, N_VARS, grads, grads, &o);
  }
  if (st == GRAFT_OK) {
    graft_value *lr = graft_scalar(t, GRAFT_F32, LR);
    for (int i = 0; i < N_VARS; i++)
      graft_assign_sub(t, c->b->m.var[i], graft_mul(t, lr, grads[i]));
  }
  out[0] = loss;
  return st;
}

/* Six gradient-shaped inputs -> their means over the ranks. */
static graft_status trace_allreduce(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                    graft_value **out, void *user) {
  const fn_ctx *c = user;
  if (n_in != N_VARS || n_out != N_VARS)
    return graft_trace_fail(t, GRAFT_EINVAL, "bench_mpi: expected %d inputs and outputs", N_VARS);
  const graft_allreduce_opts o = {.bucket_bytes = c->bucket_bytes};
  return graft_module_allreduce_gradients(t, c->b->mod, c->b->comm, N_VARS, in, out, &o);
}

/* ---- set-up ------------------------------------------------------------------- */

static void layout_make(int64_t cap, layout *l) {
  memset(l, 0, sizeof *l);
  int64_t held = 0;
  for (int i = N_VARS - 1; i >= 0; i--) {
    int64_t bytes = var_count(i) * (int64_t)sizeof(float);
    if (l->n && held + bytes > cap) held = 0;
    if (held == 0) l->n++;
    l->count[l->n - 1] += var_count(i);
    held += bytes;
  }
}

static int64_t all_grad_floats(void) {
  int64_t n = 0;
  for (int i = 0; i < N_VARS; i++) n += var_count(i);
  return n;
}

/* The model's variables move into the module mlp (the same names and
 * initial values), whose trainable variables are W1, b1, ..., b3 in order. */
static int module_create(bench *b) {
  if (bench_report(graft_module_create(NULL, "mlp", &b->mod), "graft_module_create", NULL))
    return -1;
  for (int i = 0; i < N_VARS; i++) {
    int l = i / 2;
    char name[8];
    snprintf(name, sizeof name, "%c%d", i % 2 ? 'b' : 'W', l + 1);
    const int64_t shape[2] = {i % 2 ? DIMS[l + 1] : DIMS[l], DIMS[l + 1]};
    graft_variable_destroy(b->m.var[i]);
    b->m.var[i] = NULL;
    if (bench_report(graft_variable_create(b->mod, name, GRAFT_F32, i % 2 ? 1 : 2, shape,
                                           b->m.init[i], GRAFT_VAR_TRAINABLE, &b->m.var[i]),
                     "graft_variable_create", NULL) ||
        bench_report(graft_tensor_wrap(GRAFT_F32, i % 2 ? 1 : 2, shape, b->m.init[i], &b->init[i]),
                     "graft_tensor_wrap", NULL) ||
        bench_report(graft_tensor_create(GRAFT_F32, i % 2 ? 1 : 2, shape, &b->grads[i]),
                     "graft_tensor_create", NULL) ||
        bench_report(graft_tensor_create(GRAFT_F32, i % 2 ? 1 : 2, shape, &b->reduced[i]),
                     "graft_tensor_create", NULL))
      return -1;
    bench_fill_f32(graft_tensor_data(b->grads[i]), var_count(i), 40 + (uint64_t)i, 0.01f);
  }
  const int64_t rows = BATCH / b->ranks;
  const int64_t xs[2] = {rows, DIMS[0]}, ls[1] = {rows};
  return bench_report(graft_tensor_wrap(GRAFT_F32, 2, xs, b->m.x + b->rank * rows * DIMS[0],
                                        &b->shard_x),
                      "graft_tensor_wrap", NULL) ||
                 bench_report(graft_tensor_wrap(GRAFT_I32, 1, ls, b->m.labels + b->rank * rows,
                                                &b->shard_labels),
                              "graft_tensor_wrap", NULL)
             ? -1
             : 0;
}

static config *config_add(bench *b, kind k, int bucket, int raw) {
  config *c = &b->cf[b->n_cf++];
  *c = (config){.k = k, .bucket = bucket, .raw = raw, .ctx = {.b = b}};
  if (k == K_DP || k == K_AR) c->ctx.bucket_bytes = bucket_bytes(bucket);
  return c;
}

static int configs_create(bench *b) {
  /* The ranks' 1-thread runtimes do not bind: under mpirun --bind-to none
   * (which step_1x2 needs: rank 0 runs 2 threads) every rank may use every
   * PU, and graft would bind each rank's worker to the first of them. */
  graft_runtime_opts ro;
  graft_runtime_opts_init(&ro);
  ro.num_threads = 1;
  ro.sched = "ws";
  ro.bind = -1;
  if (bench_runtime_create_opts(&ro, &b->rt1, b->rt1_desc, sizeof b->rt1_desc)) return -1;
  if (b->rank == 0 &&
      bench_runtime_create("ws", 2, 0, NULL, &b->rt2, b->rt2_desc, sizeof b->rt2_desc))
    return -1;
  config *c = config_add(b, K_SINGLE, 0, 0);
  if (b->rank == 0 && bench_function_create(b->rt2, "step_1x2", trace_step, &c->ctx, 2, 1, &c->f))
    return -1;
  c = config_add(b, K_COMPUTE, 0, 0);
  if (bench_function_create(b->rt1, "compute", trace_step, &c->ctx, 2, 1, &c->f)) return -1;
  for (int k = 0; k < N_BUCKETS; k++) {
    layout_make(bucket_bytes(k), &b->lay[k]);
    c = config_add(b, K_DP, k, 0);
    if (bench_function_create(b->rt1, "step_dp", trace_step, &c->ctx, 2, 1, &c->f)) return -1;
    c = config_add(b, K_AR, k, 0);
    if (bench_function_create(b->rt1, "allreduce", trace_allreduce, &c->ctx, N_VARS, N_VARS,
                              &c->f))
      return -1;
    config_add(b, K_MPI_BUCKETS, k, 0);
  }
  RAW_BYTES[N_RAW - 1] = all_grad_floats() * (int64_t)sizeof(float);
  for (int r = 0; r < N_RAW; r++) config_add(b, K_MPI, 0, r);
  config_add(b, K_SUM, 0, 0);
  b->raw_floats = all_grad_floats();
  b->raw = bench_alloc_f32(b->raw_floats);
  b->addend = bench_alloc_f32(b->raw_floats);
  return b->raw && b->addend ? 0 : bench_oom();
}

static void bench_free(bench *b) {
  for (int c = 0; c < b->n_cf; c++) graft_function_destroy(b->cf[c].f);
  graft_runtime_destroy(b->rt1);
  graft_runtime_destroy(b->rt2);
  for (int i = 0; i < N_VARS; i++) {
    graft_tensor_destroy(b->init[i]);
    graft_tensor_destroy(b->grads[i]);
    graft_tensor_destroy(b->reduced[i]);
    b->m.var[i] = NULL; /* the module's */
  }
  graft_tensor_destroy(b->shard_x);
  graft_tensor_destroy(b->shard_labels);
  graft_module_destroy(b->mod);
  model_destroy(&b->m);
  free(b->raw);
  free(b->addend);
  free(b->times);
}

/* ---- calls ---------------------------------------------------------------------- */

/* A barrier that sleeps between polls: the ranks that wait for rank 0 to
 * finish a step of its own leave it the machine. */
static void barrier_sleeping(void) {
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  for (int done = 0;;) {
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    nanosleep(&(struct timespec){0, IDLE_POLL_NS}, NULL);
  }
}

static int call_step(bench *b, graft_function *f, int whole) {
  graft_tensor *in[2] = {whole ? b->m.tx : b->shard_x, whole ? b->m.tlabels : b->shard_labels};
  return bench_report(graft_function_call(f, 2, in, 1, &b->m.tloss), "graft_function_call", f);
}

/* Every bucket of layout l posted (in order) on the raw buffer, then all
 * waited for. */
static int mpi_buckets(bench *b, const layout *l) {
  MPI_Request req[N_VARS];
  int64_t at = 0;
  for (int k = 0; k < l->n; k++) {
    MPI_Iallreduce(MPI_IN_PLACE, b->raw + at, (int)l->count[k], MPI_FLOAT, MPI_SUM, b->comm,
                   &req[k]);
    at += l->count[k];
  }
  return MPI_Waitall(l->n, req, MPI_STATUSES_IGNORE) == MPI_SUCCESS ? 0 : -1;
}

/* One call of config c on this rank: 0, or -1 after a message. */
static int call_config(bench *b, config *c) {
  switch (c->k) {
  case K_SINGLE: return b->rank == 0 ? call_step(b, c->f, 1) : 0;
  case K_DP:
  case K_COMPUTE: return call_step(b, c->f, 0);
  case K_AR:
    return bench_report(graft_function_call(c->f, N_VARS, b->grads, N_VARS, b->reduced),
                        "graft_function_call", c->f);
  case K_MPI_BUCKETS: return mpi_buckets(b, &b->lay[c->bucket]);
  case K_SUM: /* what a reduction does to each byte it receives */
    for (int64_t i = 0; i < b->raw_floats; i++) b->raw[i] += b->addend[i];
    return 0;
  case K_MPI:
    return MPI_Allreduce(MPI_IN_PLACE, b->raw, (int)(RAW_BYTES[c->raw] / (int64_t)sizeof(float)),
                         MPI_FLOAT, MPI_SUM, b->comm) == MPI_SUCCESS
               ? 0
               : -1;
  }
  return -1;
}

/* Every rank's status agreed: -1 on all when any failed. */
static int agree(int rc) {
  int mine = rc != 0, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any ? -1 : 0;
}

/* One timed unit of c: inner calls after a barrier; the slowest rank's
 * time per call in us (rank 0 alone for step_1x2), or a negative value
 * when a call failed on some rank. */
static double unit(bench *b, config *c) {
  MPI_Barrier(MPI_COMM_WORLD);
  double us = 0.0;
  int rc = 0;
  if (c->k != K_SINGLE || b->rank == 0) {
    double t0 = bench_now_us();
    for (int i = 0; i < c->inner && !rc; i++) rc = call_config(b, c);
    us = (bench_now_us() - t0) / c->inner;
  }
  if (c->k == K_SINGLE) barrier_sleeping();
  if (agree(rc)) return -1.0;
  double slowest = 0.0;
  MPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

/* ---- checks ---------------------------------------------------------------------- */

static int reset_variables(bench *b) {
  for (int i = 0; i < N_VARS; i++)
    if (bench_report(graft_variable_set(b->m.var[i], b->init[i]), "graft_variable_set", NULL))
      return -1;
  return 0;
}

typedef struct checks {
  double worst_rel; /* data-parallel vs whole-batch update (rank 0) */
  int worst_var;
  int same_update, replicas_equal;
} checks;

/* One step of the whole batch on rank 0 and one data-parallel step from the
 * same initial weights; then CHECK_STEPS more data-parallel steps and the
 * replicas compared.  Every rank takes the same path (agree). */
static int run_checks(bench *b, const config *single, const config *dp, checks *ck) {
  memset(ck, 0, sizeof *ck);
  float *upd[N_VARS] = {0};
  int rc = -1, mine = reset_variables(b);
  if (b->rank == 0) {
    for (int i = 0; i < N_VARS && !mine; i++)
      if (!(upd[i] = bench_alloc_f32(var_count(i)))) mine = bench_oom();
    if (!mine) mine = call_step(b, single->f, 1);
    for (int i = 0; i < N_VARS && !mine; i++) {
      const float *v = graft_tensor_data(graft_variable_value(b->m.var[i]));
      for (int64_t k = 0; k < var_count(i); k++) upd[i][k] = b->m.init[i][k] - v[k];
    }
  }
  barrier_sleeping();
  if (agree(mine) || agree(reset_variables(b)) || agree(call_step(b, dp->f, 0))) goto out;
  if (b->rank == 0)
    for (int i = 0; i < N_VARS; i++) {
      const float *v = graft_tensor_data(graft_variable_value(b->m.var[i]));
      double d = 0.0, mu = 0.0;
      for (int64_t k = 0; k < var_count(i); k++) {
        double u = (double)b->m.init[i][k] - (double)v[k], e = fabs(u - (double)upd[i][k]);
        if (!(e <= d)) d = e;
        if (fabs((double)upd[i][k]) > mu) mu = fabs((double)upd[i][k]);
      }
      double rel = mu > 0.0 ? d / mu : d;
      if (!(rel <= ck->worst_rel)) ck->worst_rel = rel, ck->worst_var = i;
    }
  MPI_Bcast(&ck->worst_rel, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  ck->same_update = ck->worst_rel <= 1e-4;
  mine = 0;
  for (int s = 0; s < CHECK_STEPS && !mine; s++) mine = call_step(b, dp->f, 0);
  if (agree(mine)) goto out;
  mine = bench_report(graft_module_replicas_equal(b->mod, b->comm, &ck->replicas_equal),
                      "graft_module_replicas_equal", NULL);
  if (agree(mine) || agree(reset_variables(b))) goto out;
  rc = 0;
out:
  for (int i = 0; i < N_VARS; i++) free(upd[i]);
  return rc;
}

/* ---- timing ---------------------------------------------------------------------- */

static int run(bench *b) {
  b->times = malloc((size_t)(b->n_cf * b->reps) * sizeof *b->times);
  double *sorted = malloc((size_t)b->reps * sizeof *sorted);
  int rc = -1;
  if (agree(b->times && sorted ? 0 : bench_oom())) goto done;
  /* Warm-up: the first call traces and compiles; the second calibrates
   * the calls per rep, the most any rank needs. */
  for (int c = 0; c < b->n_cf; c++) {
    config *cf = &b->cf[c];
    cf->inner = 1;
    double one = 0.0;
    for (int w = 0; w < WARMUP_CALLS; w++)
      if ((one = unit(b, cf)) < 0.0) goto done;
    int inner = bench_calls_per_rep(one, TARGET_REP_US, MAX_INNER, MAX_INNER);
    MPI_Allreduce(&inner, &cf->inner, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  }
  for (int r = 0; r < b->reps; r++)
    for (int k = 0; k < b->n_cf; k++) {
      int c = (r + k) % b->n_cf;
      double us = unit(b, &b->cf[c]);
      if (us < 0.0) goto done;
      b->times[c * b->reps + r] = us;
    }
  for (int c = 0; c < b->n_cf; c++) {
    config *cf = &b->cf[c];
    cf->t = &b->times[c * b->reps];
    memcpy(sorted, cf->t, (size_t)b->reps * sizeof *sorted);
    cf->median_us = bench_median_min(sorted, b->reps, &cf->min_us);
    cf->max_us = sorted[b->reps - 1];
    if (cf->f && (cf->k != K_SINGLE || b->rank == 0)) bench_warn_traced(cf->f, KIND_NAMES[cf->k]);
  }
  rc = 0;
done:
  free(sorted);
  return rc;
}

/* The median over the reps of f(rep): configs measured within one rep ran
 * within a second of each other, so per-rep ratios cancel the drift of a
 * shared machine that the ratio of two medians keeps. */
typedef double (*per_rep_fn)(const config *const *c, int r);

static double paired_median(const bench *b, const config *const *c, per_rep_fn f) {
  double *v = malloc((size_t)b->reps * sizeof *v);
  if (!v) return NAN;
  for (int r = 0; r < b->reps; r++) v[r] = f(c, r);
  double m = bench_median(v, b->reps);
  free(v);
  return m;
}

static double rep_ratio(const config *const *c, int r) { return c[0]->t[r] / c[1]->t[r]; }

/* 1 - (step_dp - compute) / all-reduce, unclamped. */
static double rep_hidden(const config *const *c, int r) {
  return 1.0 - (c[0]->t[r] - c[1]->t[r]) / c[2]->t[r];
}

/* ---- output --------------------------------------------------------------------- */

static config *find(bench *b, kind k, int bucket, int raw) {
  for (int c = 0; c < b->n_cf; c++)
    if (b->cf[c].k == k && b->cf[c].bucket == bucket && b->cf[c].raw == raw) return &b->cf[c];
  return NULL;
}

static void print_header(const bench *b, const bench_info *info) {
  char model_desc[256], data_desc[256], mpi_desc[MPI_MAX_LIBRARY_VERSION_STRING + 64],
      ranks_desc[128], buckets_desc[512];
  snprintf(model_desc, sizeof model_desc,
           "MLP %d-%d-%d-%d (bench_mlp's), relu, softmax cross-entropy, f32; SGD lr %g; one traced "
           "step: forward, graft_gradients, graft_module_allreduce_gradients, graft_assign_sub",
           DIMS[0], DIMS[1], DIMS[2], DIMS[3], LR);
  snprintf(data_desc, sizeof data_desc,
           "global batch %d: x f32 uniform [-1,1), labels argmax(x @ T), seeded; rank r of p: rows "
           "[r %d/p, (r+1) %d/p)",
           BATCH, BATCH, BATCH);
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(lib, &len);
  lib[strcspn(lib, "\n,")] = '\0';
  snprintf(mpi_desc, sizeof mpi_desc, "%s", lib);
  snprintf(ranks_desc, sizeof ranks_desc, "%d ranks; the gradients: %.2f MiB", b->ranks,
           bench_mib(all_grad_floats() * (int64_t)sizeof(float)));
  int at = 0;
  for (int k = 0; k < N_BUCKETS; k++)
    at += snprintf(buckets_desc + at, sizeof buckets_desc - (size_t)at, "%s%g MiB: %d", k ? "; " : "",
                   BUCKET_MIB[k], b->lay[k].n);
  bench_kv extra[8];
  int n = 0;
  extra[n++] = (bench_kv){"model", model_desc};
  extra[n++] = (bench_kv){"data", data_desc};
  extra[n++] = (bench_kv){"mpi", mpi_desc};
  extra[n++] = (bench_kv){"ranks", ranks_desc};
  extra[n++] = (bench_kv){"buckets", buckets_desc};
  extra[n++] = (bench_kv){"blas", info->blas};
  extra[n++] = (bench_kv){"runtime ws/1 (each rank)", b->rt1_desc};
  extra[n++] = (bench_kv){"runtime ws/2 (rank 0)", b->rt2_desc};
  bench_header_print(info, "bench_mpi",
                     "bench_mlp's step data parallel over MPI: 2 ranks x 1 thread vs 1 rank x 2 "
                     "threads, and the all-reduce hidden behind the backward pass",
                     extra, n, b->json);
  if (b->json) return;
  printf("# step_1x2: rank 0 alone, batch %d, 2 threads; step_dp: every rank, batch %d/p, 1 "
         "thread, gradients all-reduced;\n"
         "# compute: step_dp without the all-reduce; allreduce: a graft function that only "
         "all-reduces\n"
         "# gradient-shaped inputs; mpi_buckets: the same buckets as plain MPI_Iallreduce; "
         "mpi_allreduce:\n"
         "# one MPI_Allreduce of `bytes`; reduce_c: y += x over `bytes` in C.  bytes: the message,\n"
         "# or the bucket size.  Times: the slowest rank per rep; median, min, max over reps\n",
         BATCH, BATCH);
  printf("# %-14s %5s %7s %6s %10s %7s %4s %11s %11s %11s %-10s %7s %6s %3s\n", "name", "ranks",
         "threads", "batch", "bytes", "buckets", "reps", "median_us", "min_us", "max_us",
         "baseline", "ratio", "target", "ok");
}

static void print_row(const bench *b, const config *c, const config *base, double target) {
  int ranks = c->k == K_SINGLE ? 1 : b->ranks, threads = c->k == K_SINGLE ? 2 : 1;
  int batch = c->k == K_SINGLE ? BATCH : c->k == K_DP || c->k == K_COMPUTE ? BATCH / b->ranks : 0;
  int bucketed = c->k == K_DP || c->k == K_AR || c->k == K_MPI_BUCKETS;
  int64_t bytes = c->k == K_MPI   ? RAW_BYTES[c->raw]
                  : c->k == K_SUM ? b->raw_floats * (int64_t)sizeof(float)
                                  : 0;
  int buckets = bucketed ? b->lay[c->bucket].n : 0;
  const config *pair[2] = {c, base};
  double ratio = base ? paired_median(b, pair, rep_ratio) : NAN;
  int has_target = !isnan(target), ok = has_target && ratio <= target;
  if (b->json) {
    printf("{\"type\":\"row\",\"name\":\"%s\",\"ranks\":%d,\"threads\":%d", KIND_NAMES[c->k], ranks,
           threads);
    bench_json_num("batch", batch ? batch : NAN, "%.0f");
    bench_json_num("bytes", bytes ? (double)bytes : NAN, "%.0f");
    bench_json_num("bucket_mib", bucketed ? BUCKET_MIB[c->bucket] : NAN, "%g");
    bench_json_num("buckets", buckets ? buckets : NAN, "%.0f");
    printf(",\"reps\":%d,\"median_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f", b->reps, c->median_us,
           c->min_us, c->max_us);
    if (base)
      printf(",\"baseline\":\"%s\",\"baseline_us\":%.3f,\"ratio\":%.4f,"
             "\"ratio_of_medians\":%.4f",
             KIND_NAMES[base->k], base->median_us, ratio, c->median_us / base->median_us);
    else
      printf(",\"baseline\":null,\"baseline_us\":null,\"ratio\":null,\"ratio_of_medians\":null");
    bench_json_num("target", target, "%.2f");
    printf(",\"ok\":%s}\n", has_target ? (ok ? "true" : "false") : "null");
    return;
  }
  char by[24], bu[8], ba[8], ra[16], ta[16];
  if (bytes)
    snprintf(by, sizeof by, "%" PRId64, bytes);
  else if (bucketed)
    snprintf(by, sizeof by, "%gMiB", BUCKET_MIB[c->bucket]);
  else
    snprintf(by, sizeof by, "-");
  snprintf(bu, sizeof bu, buckets ? "%d" : "-", buckets);
  snprintf(ba, sizeof ba, batch ? "%d" : "-", batch);
  printf("%-16s %5d %7d %6s %10s %7s %4d %11.1f %11.1f %11.1f %-10s %7s %6s %3s\n",
         KIND_NAMES[c->k], ranks, threads, ba, by, bu, b->reps, c->median_us, c->min_us, c->max_us,
         base ? KIND_NAMES[base->k] : "-", bench_fmt_num(ra, sizeof ra, "%.3f", ratio),
         bench_fmt_num(ta, sizeof ta, "%.2f", target), has_target ? (ok ? "yes" : "no") : "-");
}

/* The fraction of the all-reduce that the backward pass hides: the median
 * over the reps of 1 - (step_dp - compute) / allreduce, against graft's
 * allreduce function and against the plain MPI buckets; and the same
 * formula on the medians. */
static void print_overlap(bench *b, int k) {
  const config *dp = find(b, K_DP, k, 0), *cp = find(b, K_COMPUTE, 0, 0);
  const config *ar = find(b, K_AR, k, 0), *mb = find(b, K_MPI_BUCKETS, k, 0);
  const config *with_ar[3] = {dp, cp, ar}, *with_mpi[3] = {dp, cp, mb};
  double raw = paired_median(b, with_ar, rep_hidden), raw_mpi = paired_median(b, with_mpi, rep_hidden);
  double exposed = dp->median_us - cp->median_us, of_medians = 1.0 - exposed / ar->median_us;
  double hidden = raw < 0.0 ? 0.0 : raw > 1.0 ? 1.0 : raw;
  int ok = hidden >= TARGET_HIDDEN;
  if (b->json) {
    printf("{\"type\":\"overlap\",\"bucket_mib\":%g,\"buckets\":%d,\"step_dp_us\":%.3f,"
           "\"compute_us\":%.3f,\"exposed_us\":%.3f,\"allreduce_us\":%.3f,\"hidden_raw\":%.4f,"
           "\"hidden\":%.4f,\"hidden_of_medians\":%.4f,\"mpi_buckets_us\":%.3f,"
           "\"hidden_vs_mpi_raw\":%.4f,\"target\":%.2f,\"ok\":%s}\n",
           BUCKET_MIB[k], b->lay[k].n, dp->median_us, cp->median_us, exposed, ar->median_us, raw,
           hidden, of_medians, mb->median_us, raw_mpi, TARGET_HIDDEN, ok ? "true" : "false");
    return;
  }
  printf("overlap %5gMiB  %d buckets: step_dp %.1f - compute %.1f = exposed %.1f us; allreduce "
         "%.1f us: hidden %.3f (raw %.3f, of the medians %.3f; vs mpi_buckets %.1f us: %.3f)  "
         "target >= %.2f %s\n",
         BUCKET_MIB[k], b->lay[k].n, dp->median_us, cp->median_us, exposed, ar->median_us, hidden,
         raw, of_medians, mb->median_us, raw_mpi, TARGET_HIDDEN, ok ? "yes" : "no");
}

/* alpha and beta of T(n) = 2 (p - 1) alpha + 2 (p - 1) / p n beta through
 * the smallest and the largest mpi_allreduce (beta then includes the
 * reduction's cost), and gamma, reduce_c's time per byte. */
static void print_fit(bench *b) {
  const config *s = find(b, K_MPI, 0, 0), *l = find(b, K_MPI, 0, N_RAW - 1);
  const config *sum = find(b, K_SUM, 0, 0);
  double p = b->ranks, ns = (double)RAW_BYTES[0], nl = (double)RAW_BYTES[N_RAW - 1];
  double beta = (l->median_us - s->median_us) / (2.0 * (p - 1.0) / p * (nl - ns)); /* us/byte */
  double alpha = (s->median_us - 2.0 * (p - 1.0) / p * ns * beta) / (2.0 * (p - 1.0));
  double gamma = sum->median_us / (double)(b->raw_floats * (int64_t)sizeof(float));
  if (b->json) {
    printf("{\"type\":\"alpha_beta\",\"ranks\":%d,\"from_bytes\":[%" PRId64 ",%" PRId64
           "],\"alpha_us\":%.4f,\"beta_ns_per_byte\":%.5f,\"bandwidth_gb_s\":%.3f,"
           "\"gamma_ns_per_byte\":%.5f}\n",
           b->ranks, RAW_BYTES[0], RAW_BYTES[N_RAW - 1], alpha, beta * 1e3, 1e-3 / beta,
           gamma * 1e3);
    return;
  }
  printf("alpha_beta  ring model T(n) = 2(p-1) alpha + 2(p-1)/p n beta through %" PRId64
         " and %" PRId64 " bytes: alpha %.2f us, beta %.4f ns/byte (%.2f GB/s); reduce_c: gamma "
         "%.4f ns/byte\n",
         RAW_BYTES[0], RAW_BYTES[N_RAW - 1], alpha, beta * 1e3, 1e-3 / beta, gamma * 1e3);
}

static int print_results(bench *b, const checks *ck) {
  const config *single = find(b, K_SINGLE, 0, 0), *cp = find(b, K_COMPUTE, 0, 0);
  print_row(b, single, NULL, NAN);
  print_row(b, cp, single, NAN);
  for (int k = 0; k < N_BUCKETS; k++) print_row(b, find(b, K_DP, k, 0), single, TARGET_RATIO);
  for (int k = 0; k < N_BUCKETS; k++) print_row(b, find(b, K_AR, k, 0), NULL, NAN);
  for (int k = 0; k < N_BUCKETS; k++) print_row(b, find(b, K_MPI_BUCKETS, k, 0), NULL, NAN);
  for (int r = 0; r < N_RAW; r++) print_row(b, find(b, K_MPI, 0, r), NULL, NAN);
  print_row(b, find(b, K_SUM, 0, 0), NULL, NAN);
  for (int k = 0; k < N_BUCKETS; k++) print_overlap(b, k);
  print_fit(b);
  char buf[256];
  snprintf(buf, sizeof buf,
           "one data-parallel step vs one step of the whole batch from the same weights: max "
           "|update diff| / max |update| %.2e (worst: variable %d); <= 1e-4",
           ck->worst_rel, ck->worst_var);
  bench_print_check(b->json, "dp_vs_single", ck->same_update, buf);
  snprintf(buf, sizeof buf, "after %d more data-parallel steps: graft_module_replicas_equal = %d",
           CHECK_STEPS, ck->replicas_equal);
  bench_print_check(b->json, "replicas_equal", ck->replicas_equal, buf);
  long cpus = b->cpus0;
  snprintf(buf, sizeof buf,
           "rank 0 may run on %ld CPU(s): step_1x2's 2 threads need 2 (mpirun --bind-to none)",
           cpus);
  bench_print_check(b->json, "baseline_cpus", cpus >= 2, buf);
  return ck->same_update && ck->replicas_equal && cpus >= 2 ? 0 : -1;
}

/* ---- main ------------------------------------------------------------------------- */

static void usage_silent(FILE *to) { (void)to; }

static void usage(FILE *to) {
  fprintf(to,
          "usage: mpirun -np 2 bench_mpi [--json] [--reps N]\n"
          "  --json       one JSON object per line (a header, then rows, overlap, fit, checks),\n"
          "               from rank 0\n"
          "  --reps N     timed repetitions per config (>= %d, default %d)\n"
          "Needs at least 2 ranks, and a number of ranks that divides %d.\n",
          MIN_REPS, DEFAULT_REPS, BATCH);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) /* before MPI: every rank would print it */
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  static bench b;
  b.reps = DEFAULT_REPS;
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.ranks);
  b.cpus0 = bench_thread_cpus();
  int rc = bench_parse_args(argc, argv, &b.json, &b.reps, MIN_REPS, BENCH_MAX_REPS,
                            b.rank ? usage_silent : usage, NULL, NULL)
               ? 2
               : 0;
  if (!rc && (b.ranks < 2 || BATCH % b.ranks)) {
    if (b.rank == 0)
      fprintf(stderr, BENCH_PROG ": %d rank%s: needs 2 or more ranks that divide the batch of %d "
                      "(mpirun -np 2 %s)\n",
              b.ranks, b.ranks == 1 ? "" : "s", BATCH, argv[0]);
    rc = 2;
  }
  if (!rc && provided < MPI_THREAD_SERIALIZED) {
    if (b.rank == 0)
      fprintf(stderr, BENCH_PROG ": MPI gives thread level %d, below MPI_THREAD_SERIALIZED\n",
              provided);
    rc = 1;
  }
  if (rc) {
    MPI_Finalize();
    return rc;
  }
  rc = 1;
  MPI_Comm_dup(MPI_COMM_WORLD, &b.comm);
  bench_info info;
  memset(&info, 0, sizeof info);
  checks ck;
  int ok = agree(bench_info_collect(&info, 1)) == 0 && agree(model_create(&b.m)) == 0 &&
           agree(module_create(&b)) == 0 && agree(configs_create(&b)) == 0;
  if (ok && run_checks(&b, find(&b, K_SINGLE, 0, 0), find(&b, K_DP, N_BUCKETS - 1, 0), &ck) == 0) {
    if (b.rank == 0) {
      print_header(&b, &info);
      fflush(stdout);
    }
    if (run(&b) == 0) {
      if (b.rank == 0) {
        rc = print_results(&b, &ck) ? 1 : 0;
        bench_footer_print(b.cpus0, bench_thread_cpus(), b.json);
      } else {
        rc = 0;
      }
    }
  }
  bench_free(&b);
  bench_info_free(&info);
  MPI_Comm_free(&b.comm);
  MPI_Finalize();
  if (rc && b.rank == 0) fprintf(stderr, BENCH_PROG ": failed\n");
  return rc;
}
