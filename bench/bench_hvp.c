/* bench_hvp: Hessian- and Jacobian-vector products of the MLP loss against
 * the loss with its gradient and the loss alone.
 *
 * The model is bench_mlp's (bench_mlp_model.h): an MLP 784-1024-1024-10,
 * relu, softmax cross-entropy, one batch of 256 rows, f32, with the six
 * variables W1, b1, W2, b2, W3, b3.  Four traced functions, each called
 * with preallocated outputs:
 *   forward    (x, labels)        -> loss
 *   loss_grad  (x, labels)        -> loss, graft_gradients w.r.t. the six
 *   hvp        (x, labels, v1..6) -> graft_hvp of the loss along v, w.r.t.
 *                                    the six (forward-over-reverse): six HVPs
 *   jvp        (x, labels, v1..6) -> graft_jvp of the loss along v (a scalar)
 * The tangents v are seeded, uniform in [-s, s) with s the scale of the
 * variable's own initialisation (0.1 for the biases).  All four run on ws
 * runtimes at 1 and at 2 threads.
 *
 * Timing: each config (function x runtime) is called WARMUP_CALLS times
 * (the first traces and compiles), then every rep calls each config once,
 * rotating which goes first; median_ms is the median over reps.  Ratios:
 * hvp / loss_grad (target <= TARGET_HVP) and jvp / forward (target <=
 * TARGET_JVP); loss_grad / forward is shown without a target.  gflop counts
 * 2*M*N*K over the matmul nodes live in the plan (from
 * graft_function_write_dot); flop_ratio is the same ratio of those counts,
 * the part of a ratio that the arithmetic alone explains.
 *
 * Where the cost goes: the nodes are split into parts, forward (the loss),
 * backward (graft_gradients' nodes), tangent_fwd and tangent_bwd (graft_jvp's
 * tangent nodes; tangent_bwd are those that read a backward value or another
 * tangent_bwd node, i.e. the forward sweep over the gradient), with their
 * matmul count and GFLOP per part; and each function runs BREAKDOWN_CALLS
 * more times on a 1-thread ws runtime writing a Chrome trace, each tile
 * counted with its median duration, summed by part and by op.
 *
 * Checks: every output of every call is finite; the JVP equals grad . v
 * (from loss_grad); the HVPs equal a central difference of the gradient,
 * (g(w + h v) - g(w - h v)) / 2h, from a traced gradient at shifted
 * weights with the relu masks frozen at w (see trace_shifted_grad); the
 * HVPs at 1 and 2 threads agree.
 *
 * Usage: bench_hvp [--json] [--reps N]
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROG "bench_hvp"
#include "bench_common.h"
#include "bench_mlp_model.h"
#include "graft.h"

#define MIN_REPS 7
#define DEFAULT_REPS 11
#define WARMUP_CALLS 2
#define BREAKDOWN_CALLS 7
#define TARGET_HVP 2.0
#define TARGET_JVP 1.5
#define FD_STEP 1e-2      /* h of the central difference (v is of the weights' scale) */
#define FD_TOL 1e-3       /* ||HVP - FD|| / ||FD|| (f32: about 5e-5 here) */
#define JVP_TOL 1e-3      /* |jvp - grad . v| <= JVP_TOL |grad . v| + 1e-6 sum |g v| */

static const char *const VAR_NAMES[N_VARS] = {"W1", "b1", "W2", "b2", "W3", "b3"};

/* ---- the traced functions --------------------------------------------------- */

typedef enum fkind { F_FWD, F_GRAD, F_HVP, F_JVP, N_FKINDS } fkind;
static const char *const FNAMES[N_FKINDS] = {"forward", "loss_grad", "hvp", "jvp"};
static const int N_IN[N_FKINDS] = {2, 2, 2 + N_VARS, 2 + N_VARS};
static const int N_OUT[N_FKINDS] = {1, 1 + N_VARS, N_VARS, 1};

static graft_status check_arity(graft_trace *t, fkind k, int n_in, int n_out) {
  if (n_in == N_IN[k] && n_out == N_OUT[k]) return GRAFT_OK;
  return graft_trace_fail(t, GRAFT_EINVAL, BENCH_PROG ": %s expects %d inputs, %d outputs",
                          FNAMES[k], N_IN[k], N_OUT[k]);
}

static graft_status trace_fwd(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  graft_value *reads[N_VARS];
  graft_status st = check_arity(t, F_FWD, n_in, n_out);
  if (st) return st;
  out[0] = trace_loss(t, user, in[0], in[1], reads);
  return GRAFT_OK;
}

static graft_status trace_grad(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  graft_value *reads[N_VARS];
  graft_status st = check_arity(t, F_GRAD, n_in, n_out);
  if (st) return st;
  out[0] = trace_loss(t, user, in[0], in[1], reads);
  return graft_gradients(t, 1, &out[0], NULL, N_VARS, reads, GRAFT_UNCONNECTED_ZERO, out + 1);
}

static graft_status trace_hvp(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  graft_value *reads[N_VARS];
  graft_status st = check_arity(t, F_HVP, n_in, n_out);
  if (st) return st;
  graft_value *loss = trace_loss(t, user, in[0], in[1], reads);
  return graft_hvp(t, loss, N_VARS, reads, in + 2, out);
}

static graft_status trace_jvp(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  graft_value *reads[N_VARS];
  graft_status st = check_arity(t, F_JVP, n_in, n_out);
  if (st) return st;
  graft_value *loss = trace_loss(t, user, in[0], in[1], reads);
  return graft_jvp(t, N_VARS, reads, in + 2, 1, &loss, GRAFT_UNCONNECTED_ZERO, out);
}

static const graft_trace_fn TRACE_FNS[N_FKINDS] = {trace_fwd, trace_grad, trace_hvp, trace_jvp};

/* For the check: (x, labels, v1..6, h) -> the gradient at the weights
 * w + h v, with every relu's mask frozen at w (where(z(w) > 0, z, 0)): the
 * same function as long as no unit changes sign, so the same gradient and
 * Hessian at w, but without the kinks, whose jumps would dominate a
 * difference of gradients (of the order of 1/h each, and about h of the
 * units flip). */
static graft_status trace_shifted_grad(graft_trace *t, int n_in, graft_value *const *in,
                                       int n_out, graft_value **out, void *user) {
  model *m = user;
  if (n_in != 3 + N_VARS || n_out != N_VARS)
    return graft_trace_fail(t, GRAFT_EINVAL, BENCH_PROG ": shifted_grad: bad arity");
  graft_value *reads[N_VARS], *params[N_VARS];
  for (int i = 0; i < N_VARS; i++) {
    reads[i] = graft_read(t, m->var[i]);
    params[i] = graft_add(t, reads[i], graft_mul(t, in[2 + N_VARS], in[2 + i]));
  }
  graft_value *h0 = in[0], *h = in[0], *z = NULL;
  for (int l = 0; l < N_LAYERS; l++) {
    graft_value *z0 = graft_add(t, graft_matmul(t, h0, reads[2 * l], 0), reads[2 * l + 1]);
    z = graft_add(t, graft_matmul(t, h, params[2 * l], 0), params[2 * l + 1]);
    if (l + 1 == N_LAYERS) break;
    graft_value *mask = graft_greater(t, z0, graft_zeros_like(t, z0));
    h0 = graft_relu(t, z0);
    h = graft_where(t, mask, z, graft_zeros_like(t, z));
  }
  graft_value *loss = graft_softmax_cross_entropy(t, z, in[1]);
  return graft_gradients(t, 1, &loss, NULL, N_VARS, params, GRAFT_UNCONNECTED_ZERO, out);
}

/* ---- state ------------------------------------------------------------------ */

#define N_RUNTIMES 2
static const int RT_THREADS[N_RUNTIMES] = {1, 2};
static graft_runtime *RUNTIMES[N_RUNTIMES];
static char RT_DESCRIBE[N_RUNTIMES][256];

#define N_CONFIGS (N_RUNTIMES * N_FKINDS)

typedef struct config {
  fkind kind;
  int rt, threads;
  graft_function *f;
  graft_tensor *out[1 + N_VARS];
  double median_ms, min_ms;
  int64_t calls, bad_calls; /* calls checked, calls with a non-finite output */
} config;

static config CONFIGS[N_CONFIGS];

static model M;
static float *V[N_VARS];        /* the tangents */
static graft_tensor *TV[N_VARS];
static graft_tensor *IN[2 + N_VARS]; /* x, labels, v1..6 */

static int create_function(graft_runtime *rt, fkind k, graft_function **f) {
  return bench_function_create(rt, FNAMES[k], TRACE_FNS[k], &M, N_IN[k], N_OUT[k], f);
}

/* Output i of a function of kind k: the loss or a scalar (rank 0), or shaped
 * like variable j. */
static int create_output(fkind k, int i, graft_tensor **out) {
  int var = k == F_GRAD ? i - 1 : k == F_HVP ? i : -1;
  if (var < 0) return bench_report(graft_tensor_create(GRAFT_F32, 0, NULL, out), "graft_tensor_create", NULL);
  int l = var / 2;
  const int64_t wshape[2] = {DIMS[l], DIMS[l + 1]}, bshape[1] = {DIMS[l + 1]};
  return bench_report(graft_tensor_create(GRAFT_F32, var % 2 ? 1 : 2, var % 2 ? bshape : wshape, out),
                    "graft_tensor_create", NULL);
}

static int setup(void) {
  if (model_create(&M)) return -1;
  for (int i = 0; i < N_VARS; i++) {
    int l = i / 2;
    float scale = i % 2 ? 0.1f : (float)sqrt((l + 1 < N_LAYERS ? 6.0 : 3.0) / DIMS[l]);
    const int64_t wshape[2] = {DIMS[l], DIMS[l + 1]}, bshape[1] = {DIMS[l + 1]};
    if (!(V[i] = bench_alloc_f32(var_count(i)))) return bench_oom();
    bench_fill_f32(V[i], var_count(i), 40 + (uint64_t)i, scale);
    if (bench_report(graft_tensor_wrap(GRAFT_F32, i % 2 ? 1 : 2, i % 2 ? bshape : wshape, V[i], &TV[i]),
                   "graft_tensor_wrap", NULL))
      return -1;
  }
  IN[0] = M.tx;
  IN[1] = M.tlabels;
  for (int i = 0; i < N_VARS; i++) IN[2 + i] = TV[i];
  for (int r = 0; r < N_RUNTIMES; r++)
    if (bench_runtime_create("ws", RT_THREADS[r], 0, NULL, &RUNTIMES[r], RT_DESCRIBE[r],
                             sizeof RT_DESCRIBE[r]))
      return -1;
  for (int r = 0; r < N_RUNTIMES; r++)
    for (int k = 0; k < N_FKINDS; k++) {
      config *c = &CONFIGS[r * N_FKINDS + k];
      c->kind = (fkind)k, c->rt = r, c->threads = RT_THREADS[r];
      if (create_function(RUNTIMES[r], (fkind)k, &c->f)) return -1;
      for (int i = 0; i < N_OUT[k]; i++)
        if (create_output((fkind)k, i, &c->out[i])) return -1;
    }
  return 0;
}

static void teardown(void) {
  for (int c = 0; c < N_CONFIGS; c++) {
    graft_function_destroy(CONFIGS[c].f);
    for (int i = 0; i < 1 + N_VARS; i++) graft_tensor_destroy(CONFIGS[c].out[i]);
  }
  for (int r = 0; r < N_RUNTIMES; r++) graft_runtime_destroy(RUNTIMES[r]);
  for (int i = 0; i < N_VARS; i++) {
    graft_tensor_destroy(TV[i]);
    free(V[i]);
  }
  model_destroy(&M);
}

static config *find_config(fkind k, int threads) {
  for (int c = 0; c < N_CONFIGS; c++)
    if (CONFIGS[c].kind == k && CONFIGS[c].threads == threads) return &CONFIGS[c];
  return NULL;
}

/* ---- running ------------------------------------------------------------------ */

static int all_finite(const graft_tensor *t) {
  const float *p = graft_tensor_data(t);
  int64_t n = graft_tensor_numel(t);
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(p[i])) return 0;
  return 1;
}

/* One call of config c (timed by bench_timed_reps). */
static int call_config(void *ctx, int c) {
  (void)ctx;
  config *cf = &CONFIGS[c];
  graft_status st = graft_function_call(cf->f, N_IN[cf->kind], IN, N_OUT[cf->kind], cf->out);
  return bench_report(st, "graft_function_call", cf->f) ? -1 : 1;
}

/* After each call, untimed: are the outputs finite? */
static int check_config(void *ctx, int c) {
  (void)ctx;
  config *cf = &CONFIGS[c];
  int ok = 1;
  for (int i = 0; i < N_OUT[cf->kind]; i++) ok &= all_finite(cf->out[i]);
  cf->calls++;
  cf->bad_calls += !ok;
  return 0;
}

static int run(int reps) {
  double *t = malloc((size_t)N_CONFIGS * (size_t)reps * sizeof *t);
  if (!t) return bench_oom();
  int rc = -1;
  for (int c = 0; c < N_CONFIGS; c++)
    for (int w = 0; w < WARMUP_CALLS; w++)
      if (call_config(NULL, c) < 0 || check_config(NULL, c)) goto done;
  if (bench_timed_reps(N_CONFIGS, reps, t, call_config, check_config, NULL)) goto done;
  for (int c = 0; c < N_CONFIGS; c++) {
    config *cf = &CONFIGS[c];
    cf->median_ms = bench_median_min(&t[c * reps], reps, &cf->min_ms) * 1e-3;
    cf->min_ms *= 1e-3;
    bench_warn_traced(cf->f, FNAMES[cf->kind]);
  }
  rc = 0;
done:
  free(t);
  return rc;
}

/* ---- the graph: parts and matmuls, from the DOT ----------------------------- */

enum { P_FWD, P_BWD, P_TFWD, P_TBWD, N_PARTS };
static const char *const PART_NAMES[N_PARTS] = {"forward", "backward", "tangent_fwd",
                                                "tangent_bwd"};

typedef struct graph_info {
  bench_graph g;
  int matmuls[N_PARTS];
  double gflop[N_PARTS];
  int matmuls_all;
  double gflop_all;
} graph_info;

/* Each node's part, in id order (inputs come first): backward and forward
 * by colour; a tangent node is tangent_bwd when it reads a backward or a
 * tangent_bwd node. */
static void graph_parts(bench_graph *g) {
  for (int id = 0; id < g->n; id++) {
    bench_gnode *nd = &g->nodes[id];
    nd->part = nd->role == 1 ? P_BWD : nd->role == 0 ? P_FWD : P_TFWD;
    if (nd->role == 2)
      for (int j = 0; j < nd->n_in && j < 4; j++) {
        int p = (int)nd->in[j] < g->n ? g->nodes[nd->in[j]].part : P_FWD;
        if (p == P_BWD || p == P_TBWD) nd->part = P_TBWD;
      }
  }
}

/* Reads f's graph, splits it into parts and counts the live matmuls of
 * each: 2*M*N*K apiece. */
static int graph_info_read(graft_function *f, graph_info *gi) {
  memset(gi, 0, sizeof *gi);
  if (bench_graph_read(f, &gi->g)) return -1;
  graph_parts(&gi->g);
  bench_mm e;
  for (int id = 0; id < gi->g.n; id++) {
    if (!bench_graph_matmul(&gi->g, id, &e)) continue;
    double gf = 2e-9 * (double)e.batch * (double)e.M * (double)e.N * (double)e.K;
    int part = gi->g.nodes[id].part;
    gi->matmuls[part]++;
    gi->gflop[part] += gf;
    gi->matmuls_all++;
    gi->gflop_all += gf;
  }
  return 0;
}

/* ---- where the time goes: a traced 1-thread ws runtime ---------------------- */

typedef struct breakdown {
  int ok;
  double wall_us;          /* median call */
  double busy_us;          /* per-tile medians summed */
  double part_us[N_PARTS];
  bench_ops ops;           /* by (part, op), largest first */
} breakdown;

/* The function of kind k with its outputs, for bench_traced_run. */
typedef struct traced_fn {
  fkind k;
  graft_tensor *out[1 + N_VARS];
} traced_fn;

static int traced_make(void *ctx, graft_runtime *rt, graft_function **f) {
  traced_fn *tf = ctx;
  if (create_function(rt, tf->k, f)) return -1;
  for (int i = 0; i < N_OUT[tf->k]; i++)
    if (create_output(tf->k, i, &tf->out[i])) return -1;
  return 0;
}

static int traced_call(void *ctx, graft_function *f) {
  traced_fn *tf = ctx;
  return bench_report(graft_function_call(f, N_IN[tf->k], IN, N_OUT[tf->k], tf->out),
                      "graft_function_call", f);
}

/* Function k on a fresh 1-thread ws runtime writing a Chrome trace: one
 * call to trace and compile, then BREAKDOWN_CALLS calls; each tile counts
 * with its median duration over them, summed by part and by (part, op). */
static int run_breakdown(fkind k, breakdown *b) {
  memset(b, 0, sizeof *b);
  traced_fn tf = {.k = k};
  bench_traced tr;
  int rc = bench_traced_run(1, BREAKDOWN_CALLS, traced_make, traced_call, &tf, &tr);
  for (int i = 0; i < 1 + N_VARS; i++) graft_tensor_destroy(tf.out[i]);
  if (rc) return -1;
  const bench_graph *g = &tr.graph;
  graph_parts(&tr.graph);
  b->wall_us = tr.wall_us;
  for (int64_t i = 0; i < tr.n_tiles; i++) {
    uint32_t node = tr.tiles[i].node;
    double med = tr.tiles[i].us;
    int known = (int)node < g->n && g->nodes[node].op[0];
    int part = known ? g->nodes[node].part : P_FWD;
    b->busy_us += med;
    b->part_us[part] += med;
    bench_ops_add(&b->ops, part, known ? g->nodes[node].op : "?", known ? (int64_t)node : -1, med);
  }
  bench_ops_sort(&b->ops);
  bench_traced_free(&tr);
  b->ok = 1;
  return 0;
}

/* ---- checks ------------------------------------------------------------------- */

typedef struct checks {
  double jvp[N_RUNTIMES], gv[N_RUNTIMES], gv_mag[N_RUNTIMES], jvp_rel[N_RUNTIMES];
  int jvp_ok[N_RUNTIMES];
  double fd_rel, fd_worst_rel;
  int fd_worst_var, fd_ok_run;
  double hvp_threads_rel; /* max |hvp(1) - hvp(2)| / max |hvp(1)| */
  int hvp_threads_bitwise;
} checks;

static const float *out_data(fkind k, int threads, int i) {
  return graft_tensor_data(find_config(k, threads)->out[i]);
}

/* The HVP against the central difference of the gradient along v. */
static int check_fd(checks *ck) {
  graft_function *f = NULL;
  graft_tensor *h = NULL, *gp[N_VARS] = {0}, *gm[N_VARS] = {0};
  graft_tensor *in[3 + N_VARS];
  int rc = -1;
  if (bench_function_create(RUNTIMES[0], "shifted_grad", trace_shifted_grad, &M, 3 + N_VARS,
                            N_VARS, &f) ||
      bench_report(graft_tensor_create(GRAFT_F32, 0, NULL, &h), "graft_tensor_create", NULL))
    goto out;
  for (int i = 0; i < 2 + N_VARS; i++) in[i] = IN[i];
  in[2 + N_VARS] = h;
  for (int i = 0; i < N_VARS; i++)
    if (create_output(F_HVP, i, &gp[i]) || create_output(F_HVP, i, &gm[i])) goto out;
  *(float *)graft_tensor_data(h) = (float)FD_STEP;
  if (bench_report(graft_function_call(f, 3 + N_VARS, in, N_VARS, gp), "graft_function_call", f))
    goto out;
  *(float *)graft_tensor_data(h) = (float)-FD_STEP;
  if (bench_report(graft_function_call(f, 3 + N_VARS, in, N_VARS, gm), "graft_function_call", f))
    goto out;
  double err2 = 0.0, ref2 = 0.0;
  ck->fd_worst_rel = 0.0;
  for (int i = 0; i < N_VARS; i++) {
    const float *p = graft_tensor_data(gp[i]), *m = graft_tensor_data(gm[i]);
    const float *hv = out_data(F_HVP, 1, i);
    double e2 = 0.0, r2 = 0.0;
    for (int64_t j = 0; j < var_count(i); j++) {
      double fd = ((double)p[j] - (double)m[j]) / (2.0 * FD_STEP);
      double e = (double)hv[j] - fd;
      e2 += e * e;
      r2 += fd * fd;
    }
    double rel = r2 > 0.0 ? sqrt(e2 / r2) : sqrt(e2);
    if (!(rel <= ck->fd_worst_rel)) ck->fd_worst_rel = rel, ck->fd_worst_var = i;
    err2 += e2;
    ref2 += r2;
  }
  ck->fd_rel = ref2 > 0.0 ? sqrt(err2 / ref2) : sqrt(err2);
  ck->fd_ok_run = 1;
  rc = 0;
out:
  graft_function_destroy(f);
  graft_tensor_destroy(h);
  for (int i = 0; i < N_VARS; i++) {
    graft_tensor_destroy(gp[i]);
    graft_tensor_destroy(gm[i]);
  }
  return rc;
}

static void compute_checks(checks *ck) {
  memset(ck, 0, sizeof *ck);
  for (int r = 0; r < N_RUNTIMES; r++) {
    int th = RT_THREADS[r];
    double gv = 0.0, mag = 0.0;
    for (int i = 0; i < N_VARS; i++) {
      const float *g = out_data(F_GRAD, th, 1 + i);
      for (int64_t j = 0; j < var_count(i); j++) {
        gv += (double)g[j] * V[i][j];
        mag += fabs((double)g[j] * V[i][j]);
      }
    }
    ck->jvp[r] = *out_data(F_JVP, th, 0);
    ck->gv[r] = gv;
    ck->gv_mag[r] = mag;
    ck->jvp_rel[r] = fabs(ck->jvp[r] - gv) / (fabs(gv) > 0.0 ? fabs(gv) : 1.0);
    ck->jvp_ok[r] = fabs(ck->jvp[r] - gv) <= JVP_TOL * fabs(gv) + 1e-6 * mag;
  }
  double d = 0.0, mx = 0.0;
  int bitwise = 1;
  for (int i = 0; i < N_VARS; i++) {
    const float *a = out_data(F_HVP, 1, i), *b = out_data(F_HVP, 2, i);
    for (int64_t j = 0; j < var_count(i); j++) {
      double e = fabs((double)a[j] - (double)b[j]);
      if (!(e <= d)) d = e;
      if (fabs((double)a[j]) > mx) mx = fabs((double)a[j]);
      bitwise &= memcmp(&a[j], &b[j], sizeof a[j]) == 0;
    }
  }
  ck->hvp_threads_rel = mx > 0.0 ? d / mx : d;
  ck->hvp_threads_bitwise = bitwise;
  if (check_fd(ck)) ck->fd_ok_run = 0;
}

/* ---- output ------------------------------------------------------------------- */

typedef bench_opts options;

static void print_header(const bench_info *info, const options *opt) {
  char model_desc[256], data_desc[256], tangent_desc[256], fn_desc[512];
  snprintf(model_desc, sizeof model_desc,
           "MLP %d-%d-%d-%d, relu, softmax cross-entropy, batch %d, f32; variables W1 b1 W2 b2 W3 "
           "b3 (bench_mlp_model.h)",
           DIMS[0], DIMS[1], DIMS[2], DIMS[3], BATCH);
  snprintf(data_desc, sizeof data_desc,
           "x [%d,%d] f32 uniform [-1,1), labels [%d] i32 = argmax(x @ T), T random; seeded",
           BATCH, DIMS[0], BATCH);
  snprintf(tangent_desc, sizeof tangent_desc,
           "v1..v6 shaped like W1..b3, uniform [-s,s), s = the weight's init scale (biases 0.1); "
           "seeded");
  snprintf(fn_desc, sizeof fn_desc,
           "forward (x,labels)->loss; loss_grad (x,labels)->loss,graft_gradients[6]; hvp "
           "(x,labels,v[6])->graft_hvp[6]; jvp (x,labels,v[6])->graft_jvp of the loss; "
           "preallocated outputs");
  bench_kv extra[5 + N_RUNTIMES];
  char keys[N_RUNTIMES][32];
  int n = 0;
  extra[n++] = (bench_kv){"model", model_desc};
  extra[n++] = (bench_kv){"data", data_desc};
  extra[n++] = (bench_kv){"tangents", tangent_desc};
  extra[n++] = (bench_kv){"functions", fn_desc};
  extra[n++] = (bench_kv){"blas", info->blas};
  for (int r = 0; r < N_RUNTIMES; r++)
    extra[n++] = bench_runtime_kv(keys[r], sizeof keys[r], "ws", RT_THREADS[r], RT_DESCRIBE[r]);
  bench_header_print(info, "bench_hvp",
                     "HVP (forward-over-reverse) and JVP of the MLP loss vs loss+gradient and "
                     "forward",
                     extra, n, opt->json);
  if (opt->json) return;
  printf("# median_ms / min_ms: over the reps, one call each, after %d warm-up calls; ratio =\n"
         "# median_ms / the baseline row's median_ms (same threads): hvp / loss_grad (target <=\n"
         "# %.1f), jvp / forward (target <= %.1f), loss_grad / forward (no target); gflop: 2*M*N*K\n"
         "# over the live matmul nodes; gflops = gflop / median; flop_ratio: the same ratio of\n"
         "# gflop (what the arithmetic alone explains)\n",
         WARMUP_CALLS, TARGET_HVP, TARGET_JVP);
  printf("# %-10s %7s %4s %9s %7s %-9s %6s %3s %9s %7s %7s %10s\n", "name", "threads", "reps",
         "median_ms", "ratio", "baseline", "target", "ok", "min_ms", "gflop", "gflops",
         "flop_ratio");
}

static void print_rows(const options *opt, const graph_info *gi) {
  for (int r = 0; r < N_RUNTIMES; r++)
    for (int k = 0; k < N_FKINDS; k++) {
      const config *c = find_config((fkind)k, RT_THREADS[r]);
      int base_k = k == F_HVP ? F_GRAD : k == F_FWD ? -1 : F_FWD;
      double target = k == F_HVP ? TARGET_HVP : k == F_JVP ? TARGET_JVP : NAN;
      double ratio = NAN, fratio = NAN;
      if (base_k >= 0) {
        ratio = c->median_ms / find_config((fkind)base_k, c->threads)->median_ms;
        fratio = gi[k].gflop_all / gi[base_k].gflop_all;
      }
      int has_target = !isnan(target), ok = has_target && ratio <= target;
      double gflops = gi[k].gflop_all / (c->median_ms * 1e-3);
      if (opt->json) {
        printf("{\"type\":\"row\",\"name\":\"%s\",\"threads\":%d,\"reps\":%d", FNAMES[k],
               c->threads, opt->reps);
        bench_json_num("median_ms", c->median_ms, "%.4f");
        bench_json_num("min_ms", c->min_ms, "%.4f");
        bench_json_num("ratio", ratio, "%.4f");
        printf(",\"baseline\":%s%s%s", base_k >= 0 ? "\"" : "",
               base_k >= 0 ? FNAMES[base_k] : "null", base_k >= 0 ? "\"" : "");
        bench_json_num("target", target, "%.2f");
        printf(",\"ok\":%s", has_target ? (ok ? "true" : "false") : "null");
        bench_json_num("gflop", gi[k].gflop_all, "%.4f");
        bench_json_num("gflops", gflops, "%.2f");
        bench_json_num("flop_ratio", fratio, "%.4f");
        printf("}\n");
      } else {
        char ra[16], ta[16], fr[16];
        printf("%-12s %7d %4d %9.3f %7s %-9s %6s %3s %9.3f %7.3f %7.1f %10s\n", FNAMES[k],
               c->threads, opt->reps, c->median_ms, bench_fmt_num(ra, sizeof ra, "%.3f", ratio),
               base_k >= 0 ? FNAMES[base_k] : "-", bench_fmt_num(ta, sizeof ta, "%.2f", target),
               has_target ? (ok ? "yes" : "no") : "-", c->min_ms, gi[k].gflop_all, gflops,
               bench_fmt_num(fr, sizeof fr, "%.3f", fratio));
      }
    }
}

static int print_stats(const options *opt) {
  if (!opt->json)
    printf("# plan statistics (graft_function_stats after the timed calls): nodes traced, live\n"
           "# after pruning, scheduled tiles, arena vs one buffer per value (naive), the\n"
           "# smallest correct arena (load), in-place values, compile time\n"
           "# %-14s %7s %6s %6s %6s %9s %9s %8s %7s %10s\n", "name", "threads", "nodes", "live",
           "tiles", "arena_MiB", "naive_MiB", "load_MiB", "inplace", "compile_ms");
  for (int c = 0; c < N_CONFIGS; c++) {
    const config *cf = &CONFIGS[c];
    graft_plan_stats st;
    if (bench_report(graft_function_stats(cf->f, &st), "graft_function_stats", cf->f)) return -1;
    char name[32];
    snprintf(name, sizeof name, "stats_%s", FNAMES[cf->kind]);
    if (opt->json)
      printf("{\"type\":\"stats\",\"name\":\"%s\",\"threads\":%d,\"nodes\":%" PRId64
             ",\"live_nodes\":%" PRId64 ",\"tiles\":%" PRId64 ",\"arena_bytes\":%" PRId64
             ",\"naive_bytes\":%" PRId64 ",\"load_bytes\":%" PRId64 ",\"inplace\":%" PRId64
             ",\"compile_us\":%.1f,\"planner_exact\":%d}\n",
             name, cf->threads, st.nodes, st.live_nodes, st.tiles, st.arena_bytes, st.naive_bytes,
             st.load_bytes, st.inplace, st.compile_us, st.planner_exact);
    else
      printf("%-16s %7d %6" PRId64 " %6" PRId64 " %6" PRId64 " %9.2f %9.2f %8.2f %7" PRId64
             " %10.2f\n",
             name, cf->threads, st.nodes, st.live_nodes, st.tiles, bench_mib(st.arena_bytes),
             bench_mib(st.naive_bytes), bench_mib(st.load_bytes), st.inplace, st.compile_us * 1e-3);
  }
  return 0;
}

static void print_parts(const options *opt, const graph_info *gi, const breakdown *bd) {
  if (!opt->json)
    printf("# where the cost goes, by part: forward (the loss), backward (graft_gradients),\n"
           "# tangent_fwd / tangent_bwd (graft_jvp's tangent nodes; _bwd: those reading a\n"
           "# backward value, the sweep over the gradient); live matmuls and their GFLOP (from\n"
           "# the DOT); us: a 1-thread ws runtime writing a Chrome trace, %d calls after one\n"
           "# warm-up, each tile at its median, summed; share = us / wall (the median call);\n"
           "# idle = wall - the parts (negative when other load slowed some of the calls)\n"
           "# %-12s %-11s %7s %7s %9s %7s\n", BREAKDOWN_CALLS, "name", "part", "matmuls", "gflop",
           "us", "share");
  for (int k = 0; k < N_FKINDS; k++) {
    const breakdown *b = &bd[k];
    for (int p = 0; p < N_PARTS; p++) {
      double us = b->ok ? b->part_us[p] : NAN;
      if (!gi[k].matmuls[p] && !(us > 0.0)) continue;
      if (opt->json) {
        printf("{\"type\":\"part\",\"name\":\"%s\",\"part\":\"%s\",\"matmuls\":%d", FNAMES[k],
               PART_NAMES[p], gi[k].matmuls[p]);
        bench_json_num("gflop", gi[k].gflop[p], "%.4f");
        bench_json_num("us", us, "%.1f");
        bench_json_num("share", b->ok ? us / b->wall_us : NAN, "%.4f");
        printf("}\n");
      } else {
        printf("part_%-9s %-11s %7d %7.3f %9.1f %7.3f\n", FNAMES[k], PART_NAMES[p],
               gi[k].matmuls[p], gi[k].gflop[p], us, b->ok ? us / b->wall_us : NAN);
      }
    }
    if (!b->ok) continue;
    double idle = b->wall_us - b->busy_us;
    if (opt->json) {
      printf("{\"type\":\"wall\",\"name\":\"%s\",\"threads\":1", FNAMES[k]);
      bench_json_num("wall_us", b->wall_us, "%.1f");
      bench_json_num("busy_us", b->busy_us, "%.1f");
      bench_json_num("idle_us", idle, "%.1f");
      printf("}\n");
    } else {
      printf("wall_%-9s %-11s %7d %7.3f %9.1f %7.3f\n", FNAMES[k], "(all)", gi[k].matmuls_all,
             gi[k].gflop_all, b->wall_us, 1.0);
      printf("idle_%-9s %-11s %7s %7s %9.1f %7.3f\n", FNAMES[k], "(between)", "-", "-", idle,
             idle / b->wall_us);
    }
  }
  if (!opt->json)
    printf("# the largest ops of each function (same trace): part, op, nodes, tiles, us, share\n"
           "# %-12s %-11s %-22s %5s %6s %9s %7s\n", "name", "part", "op", "nodes", "tiles", "us",
           "share");
  for (int k = 0; k < N_FKINDS; k++) {
    const breakdown *b = &bd[k];
    if (!b->ok) continue;
    for (int i = 0; i < b->ops.n; i++) {
      const bench_op_time *o = &b->ops.v[i];
      if (opt->json)
        printf("{\"type\":\"op_time\",\"name\":\"%s\",\"part\":\"%s\",\"op\":\"%s\",\"nodes\":%d,"
               "\"tiles\":%" PRId64 ",\"us\":%.1f,\"share\":%.4f}\n",
               FNAMES[k], PART_NAMES[o->part], o->op, o->nodes, o->tiles, o->us,
               o->us / b->wall_us);
      else if (i < 8)
        printf("op_%-11s %-11s %-22s %5d %6" PRId64 " %9.1f %7.3f\n", FNAMES[k],
               PART_NAMES[o->part], o->op, o->nodes, o->tiles, o->us, o->us / b->wall_us);
    }
  }
}

/* Returns 0 when every check holds. */
static int print_checks(const options *opt, const checks *ck) {
  char buf[1024];
  int failed = 0;
  if (!opt->json) printf("# checks\n");

  int at = 0, ok = 1;
  for (int c = 0; c < N_CONFIGS && at < (int)sizeof buf - 64; c++) {
    const config *cf = &CONFIGS[c];
    ok &= cf->bad_calls == 0 && cf->calls > 0;
    at += snprintf(buf + at, sizeof buf - (size_t)at, "%s%s/%d %" PRId64 " of %" PRId64,
                   c ? "; " : "calls with a non-finite output: ", FNAMES[cf->kind], cf->threads,
                   cf->bad_calls, cf->calls);
  }
  bench_print_check(opt->json, "finite", ok, buf);
  failed |= !ok;

  ok = 1;
  at = snprintf(buf, sizeof buf,
                "jvp vs grad . v from loss_grad (tolerance %.0e relative, + 1e-6 sum |g v|):",
                JVP_TOL);
  for (int r = 0; r < N_RUNTIMES; r++) {
    ok &= ck->jvp_ok[r];
    at += snprintf(buf + at, sizeof buf - (size_t)at,
                   " %d thread%s: %.7g vs %.7g (rel %.1e, sum |g v| %.3g);", RT_THREADS[r],
                   RT_THREADS[r] == 1 ? "" : "s", ck->jvp[r], ck->gv[r], ck->jvp_rel[r],
                   ck->gv_mag[r]);
  }
  bench_print_check(opt->json, "jvp_vs_grad", ok, buf);
  failed |= !ok;

  ok = ck->fd_ok_run && ck->fd_rel <= FD_TOL;
  if (ck->fd_ok_run)
    snprintf(buf, sizeof buf,
             "hvp (1 thread) vs (g(w+hv) - g(w-hv))/2h, h = %.0e, relu masks frozen at w: "
             "||hvp - fd|| / ||fd|| = %.2e over the 6 (tolerance %.0e); worst: %s %.2e",
             FD_STEP, ck->fd_rel, FD_TOL, VAR_NAMES[ck->fd_worst_var], ck->fd_worst_rel);
  else
    snprintf(buf, sizeof buf, "the shifted gradient failed to run");
  bench_print_check(opt->json, "hvp_vs_fd", ok, buf);
  failed |= !ok;

  snprintf(buf, sizeof buf, "hvp at 1 and 2 threads: %s, max |diff| / max |hvp| = %.2e",
           ck->hvp_threads_bitwise ? "bitwise equal" : "not bitwise equal", ck->hvp_threads_rel);
  ok = ck->hvp_threads_rel <= 1e-5;
  bench_print_check(opt->json, "hvp_threads", ok, buf);
  failed |= !ok;
  return failed ? -1 : 0;
}

/* ---- command line ------------------------------------------------------------- */

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_hvp [--json] [--reps N]\n"
          "  --json    one JSON object per line (a header, then rows, stats, parts, checks)\n"
          "  --reps N  timed calls per config (>= %d, default %d)\n",
          MIN_REPS, DEFAULT_REPS);
}

int main(int argc, char **argv) {
  options opt;
  if (bench_opts_parse(argc, argv, &opt, MIN_REPS, DEFAULT_REPS, BENCH_MAX_REPS, usage)) return 2;
  bench_info info;
  if (bench_info_collect(&info, 1)) return 1;

  static graph_info gi[N_FKINDS];
  static breakdown bd[N_FKINDS];
  checks ck;
  int rc = 1;
  if (setup() == 0) {
    print_header(&info, &opt);
    fflush(stdout);
    long cpus_before = bench_thread_cpus();
    int ok = run(opt.reps) == 0;
    for (int k = 0; ok && k < N_FKINDS; k++) ok = graph_info_read(find_config((fkind)k, 1)->f, &gi[k]) == 0;
    if (ok) {
      compute_checks(&ck);
      for (int k = 0; k < N_FKINDS; k++) run_breakdown((fkind)k, &bd[k]);
      print_rows(&opt, gi);
      if (print_stats(&opt) == 0) {
        print_parts(&opt, gi, bd);
        rc = print_checks(&opt, &ck) == 0 ? 0 : 1;
      }
      bench_footer_print(cpus_before, bench_thread_cpus(), opt.json);
    }
  }
  for (int k = 0; k < N_FKINDS; k++) bench_graph_free(&gi[k].g);
  teardown();
  bench_info_free(&info);
  fflush(stdout);
  if (rc) fprintf(stderr, BENCH_PROG ": failed\n");
  return rc;
}
