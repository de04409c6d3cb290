/* bench_control: staged control flow (issue 17) against what it stands for.
 *
 * while: a graft_while_loop of ITERS iterations (100,000) of one scalar
 *   recurrence, x = x * 0.999999 + 1e-6 (f64), with an i32 counter i and
 *   the cond i < n, n an input: per iteration the cond body (one less) and
 *   the loop body (the counter's add, the recurrence's mul and add) run.
 *   ns per iteration = the call's time / ITERS, median over the reps, on seq/1,
 *   ws/1, ws/2 (and ws at --threads N).  c_loop: the same recurrence as a
 *   plain C loop, for reference (not the target).  Target (issue 17):
 *   <= 200 ns per iteration at 1 thread (ws/1).
 * rnn: one SGD training step of an RNN with a tanh cell,
 *   h' = tanh(x U + h W + b), hidden 256, batch 64, input 64, STEPS steps
 *   (200), f32, h0 = 0.  Each step's output is its loss term sum(h'^2);
 *   the loss is their sum / (STEPS * 64 * 256), the mean of the squares of
 *   every hidden state (the terms are summed inside the loop, as one writes
 *   a per-step loss in a scan, so no [STEPS, 64, 256] stack of states is
 *   kept for the loss).  graft_gradients gives dU, dW, db, and three
 *   graft_assign_sub apply v -= LR * dv to the variables U, W, b.  Three
 *   functions, each with its own three variables (same initial values):
 *     unrolled  the cell written STEPS times at trace time (slice of x,
 *               reshape, cell; the loss terms concatenated): the baseline;
 *     scan      graft_scan over the leading axis of x (U, W, b captured by
 *               the body from the function's trace);
 *     scan_ck   the same scan with graft_scan_opts.checkpoint = CKPT_K
 *               (14, about sqrt(200)): reverse mode keeps every 14th carry.
 *   on ws/1 and ws/2 (and ws at --threads N).  step_ms: median over the
 *   reps of one call (a step); body_runs: the bodies' runs in a step
 *   (graft_plan_stats); trace_ms: the trace callback's own time (the
 *   gradients included); compile_ms: the plan's compile_us after a first
 *   call (graft_function_stats; the bodies' plans are compiled inside it);
 *   first_ms: that whole first call; the three are medians over up to
 *   MAX_COMPILE_REPS first calls (the function's own, then fresh functions
 *   of the same trace on the same variables: one compile is too noisy to
 *   compare); arena_mib: the plan's arena_bytes (the bodies' arenas
 *   included).
 *   Targets (issue 17): scan's step <= 1.10x unrolled's, its compile time
 *   <= 1/20 of unrolled's, scan_ck's arena <= 1/5 of scan's for <= 1.4x
 *   scan's step time.
 * Every rep runs each configuration once, in an order rotated from rep to
 * rep, after one untimed warm-up call (the first call traces and compiles).
 * Besides the wall-clock medians, cpu_ns / cpu_ms give the calling
 * thread's CPU time at one thread (all the work there), which other
 * processes taking the core do not inflate: on a shared machine the
 * ratios of those are the steadier figures.
 * Checks: the while loop's result equals the C loop's bitwise; every
 * configuration ends with the same number of steps taken, so a variant's
 * variables are bitwise equal at every thread count, scan_ck's equal
 * scan's bitwise (remat changes no bits), and scan's are within a small
 * tolerance of unrolled's (bitwise where graft runs the same kernels on
 * the same tiles); the first step's loss agrees likewise.
 *
 * --quick: a short run for a smoke test (ITERS 10,000, STEPS 20, 3 reps);
 * its figures are not the issue's.
 *
 * Usage: bench_control [--json] [--reps N] [--threads N] [--quick]
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROG "bench_control"
#include "bench_common.h"
#include "graft.h"

#define DEFAULT_REPS 7
#define QUICK_REPS 3
#define MIN_REPS 1
#define ITERS 100000
#define QUICK_ITERS 10000
#define C_LOOP_CALLS 20 /* C loops per rep: one is over in a fraction of a ms */
#define STEPS 200
#define QUICK_STEPS 20
#define BATCH 64
#define HIDDEN 256
#define INPUT 64
#define CKPT_K 14
#define MAX_COMPILE_REPS 5 /* traces and compiles per rnn config (at most --reps) */
#define LR 0.1
#define DECAY 0.999999
#define NUDGE 1e-6
#define TARGET_NS_PER_ITER 200.0
#define TARGET_STEP_RATIO 1.10
#define TARGET_COMPILE_RATIO (1.0 / 20.0)
#define TARGET_ARENA_RATIO (1.0 / 5.0)
#define TARGET_CKPT_TIME_RATIO 1.4
/* scan vs unrolled: f32 sums over 200 steps, if the two differ in order */
#define CLOSE_RTOL 1e-4

typedef struct options {
  int json, reps, threads, quick;
} options;

/* ---- runtimes -------------------------------------------------------------------- */

#define MAX_RTS 4
typedef struct rt_conf {
  const char *sched;
  int threads;
  graft_runtime *rt;
  char desc[512];
} rt_conf;

/* ---- the while loop ------------------------------------------------------------------ */

/* vars: i (i32), x (f64); user: the function's n. */
static graft_status while_cond(graft_trace *t, int n_in, graft_value *const *v, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = graft_less(t, v[0], *(graft_value **)user);
  return GRAFT_OK;
}

static graft_status while_body(graft_trace *t, int n_in, graft_value *const *v, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_add(t, v[0], graft_scalar(t, GRAFT_I32, 1));
  out[1] = graft_add(t, graft_mul(t, v[1], graft_scalar(t, GRAFT_F64, DECAY)),
                     graft_scalar(t, GRAFT_F64, NUDGE));
  return GRAFT_OK;
}

/* in: x0 (f64 scalar), n (i32 scalar); out: x after n steps. */
static graft_status trace_while(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *n = in[1], *vars[2];
  graft_value *init[2] = {graft_scalar(t, GRAFT_I32, 0), in[0]};
  graft_while_loop(t, while_cond, while_body, &n, 2, init, vars, NULL);
  out[0] = vars[1];
  return graft_trace_status(t);
}

/* The baseline: not inlined, and its arguments and result go through
 * volatiles (call_while), so each call runs the whole loop: GCC would
 * otherwise find it pure and call it once for the rep. */
__attribute__((noinline)) static double c_loop(double x, int32_t n) {
  for (int32_t i = 0; i < n; i++) x = x * DECAY + NUDGE;
  return x;
}

#define X0 0.5

/* ---- the RNN ------------------------------------------------------------------------- */

enum { V_UNROLLED, V_SCAN, V_CKPT, N_VARIANTS };
static const char *const VARIANT_NAMES[N_VARIANTS] = {"unrolled", "scan", "scan_ck"};
enum { VAR_U, VAR_W, VAR_B, N_VARS };

typedef struct rnn_conf {
  int variant, rt;
  int64_t steps;
  graft_function *f;
  graft_variable *var[N_VARS];
  graft_tensor *loss;
  char name[32];
  double first_loss;      /* of the first step */
  double last_trace_us;   /* the trace callback's last run */
  /* per compile sample, and their medians */
  double trace_us[MAX_COMPILE_REPS], compile_us[MAX_COMPILE_REPS];
  double first_call_us[MAX_COMPILE_REPS];
  double trace_med, compile_med, first_med;
  graft_plan_stats stats; /* of a call after the first (body runs) */
} rnn_conf;

/* What the cell reads from the function's trace (the body captures it). */
typedef struct cell_ctx {
  graft_value *U, *W, *b;
} cell_ctx;

static graft_value *cell(graft_trace *t, const cell_ctx *c, graft_value *h, graft_value *x) {
  graft_value *z = graft_add(t, graft_matmul(t, x, c->U, 0), graft_matmul(t, h, c->W, 0));
  return graft_tanh(t, graft_add(t, z, c->b));
}

static graft_value *loss_term(graft_trace *t, graft_value *h) {
  return graft_reduce_sum(t, graft_square(t, h), 0, NULL, 0);
}

/* in: h, x_t; out: h', its loss term. */
static graft_status rnn_body(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = cell(t, user, in[0], in[1]);
  out[1] = loss_term(t, out[0]);
  return GRAFT_OK;
}

/* The loss terms of the STEPS steps, [steps], the cell written out. */
static graft_value *unrolled_terms(graft_trace *t, const cell_ctx *c, int64_t steps,
                                   graft_value *h, graft_value *X) {
  graft_value **terms = malloc((size_t)steps * sizeof *terms);
  if (!terms) {
    graft_trace_fail(t, GRAFT_ENOMEM, BENCH_PROG ": out of memory");
    return NULL;
  }
  const int64_t size[3] = {1, BATCH, INPUT}, xshape[2] = {BATCH, INPUT}, one[1] = {1};
  for (int64_t s = 0; s < steps; s++) {
    const int64_t begin[3] = {s, 0, 0};
    graft_value *x = graft_reshape(t, graft_slice(t, X, begin, size), 2, xshape);
    h = cell(t, c, h, x);
    terms[s] = graft_reshape(t, loss_term(t, h), 1, one);
  }
  graft_value *all = graft_concat(t, (int)steps, terms, 0);
  free(terms);
  return all;
}

/* in: h0 [BATCH, HIDDEN], X [steps, BATCH, INPUT]; out: the loss before the
 * update.  The step: loss, its gradients, v -= LR * dv. */
static graft_status trace_rnn(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  rnn_conf *c = user;
  double t0 = bench_now_us();
  graft_value *reads[N_VARS], *grads[N_VARS];
  for (int i = 0; i < N_VARS; i++) reads[i] = graft_read(t, c->var[i]);
  cell_ctx k = {reads[VAR_U], reads[VAR_W], reads[VAR_B]};
  graft_value *terms = NULL;
  if (c->variant == V_UNROLLED) {
    terms = unrolled_terms(t, &k, c->steps, in[0], in[1]);
  } else {
    graft_scan_opts o = {.checkpoint = c->variant == V_CKPT ? CKPT_K : 0};
    graft_value *res[2];
    graft_scan(t, rnn_body, &k, 1, &in[0], 1, &in[1], 1, res, &o);
    terms = res[1];
  }
  if (!terms) return graft_trace_status(t);
  double scale = 1.0 / ((double)c->steps * BATCH * HIDDEN);
  graft_value *loss =
      graft_mul(t, graft_reduce_sum(t, terms, 0, NULL, 0), graft_scalar(t, GRAFT_F32, scale));
  graft_gradients(t, 1, &loss, NULL, N_VARS, reads, GRAFT_UNCONNECTED_ZERO, grads);
  graft_value *lr = graft_scalar(t, GRAFT_F32, LR);
  for (int i = 0; i < N_VARS; i++) graft_assign_sub(t, c->var[i], graft_mul(t, lr, grads[i]));
  out[0] = loss;
  c->last_trace_us = bench_now_us() - t0;
  return graft_trace_status(t);
}

/* ---- the experiments --------------------------------------------------------------- */

typedef struct while_conf {
  int rt;          /* -1: the C loop */
  graft_function *f;
  graft_tensor *out;
  double result;
} while_conf;

typedef struct ctx {
  int n_rts;
  rt_conf rts[MAX_RTS];
  int64_t iters, steps;
  int compile_reps;
  /* while */
  int n_while;
  while_conf wh[MAX_RTS + 1];
  graft_tensor *x0, *n;
  /* rnn */
  int n_rnn;
  rnn_conf rnn[MAX_RTS * N_VARIANTS];
  float *init[N_VARS];
  graft_tensor *h0, *X;
} ctx;

static const int64_t VAR_ROWS[N_VARS] = {INPUT, HIDDEN, HIDDEN};
static const int64_t VAR_COLS[N_VARS] = {HIDDEN, HIDDEN, 0};
static const char *const VAR_NAMES[N_VARS] = {"U", "W", "b"};

static int64_t var_count(int i) { return VAR_ROWS[i] * (VAR_COLS[i] ? VAR_COLS[i] : 1); }

static int add_runtime(ctx *c, const char *sched, int threads) {
  rt_conf *r = &c->rts[c->n_rts];
  r->sched = sched;
  r->threads = threads;
  if (bench_runtime_create(sched, threads, 0, NULL, &r->rt, r->desc, sizeof r->desc)) return -1;
  c->n_rts++;
  return 0;
}

static int scalar_tensor(graft_dtype dt, graft_tensor **t) {
  return bench_report(graft_tensor_create(dt, 0, NULL, t), "graft_tensor_create", NULL);
}

static int setup_while(ctx *c) {
  if (scalar_tensor(GRAFT_F64, &c->x0) || scalar_tensor(GRAFT_I32, &c->n)) return -1;
  *(double *)graft_tensor_data(c->x0) = X0;
  *(int32_t *)graft_tensor_data(c->n) = (int32_t)c->iters;
  c->wh[c->n_while++] = (while_conf){.rt = -1};
  for (int r = 0; r < c->n_rts; r++) {
    while_conf *w = &c->wh[c->n_while++];
    *w = (while_conf){.rt = r};
    if (bench_function_create(c->rts[r].rt, "while_scalar", trace_while, NULL, 2, 1, &w->f) ||
        scalar_tensor(GRAFT_F64, &w->out))
      return -1;
  }
  return 0;
}

static int setup_rnn(ctx *c) {
  for (int i = 0; i < N_VARS; i++) {
    if (!(c->init[i] = bench_alloc_f32(var_count(i)))) return bench_oom();
    /* U, W: uniform in +-1/sqrt(fan in), b small: the states stay in tanh's
     * useful range over 200 steps */
    float scale = i == VAR_B ? 0.01f : (float)(1.0 / sqrt((double)VAR_ROWS[i]));
    bench_fill_f32(c->init[i], var_count(i), 70 + (uint64_t)i, scale);
  }
  const int64_t hs[2] = {BATCH, HIDDEN}, xs[3] = {c->steps, BATCH, INPUT};
  if (bench_report(graft_tensor_create(GRAFT_F32, 2, hs, &c->h0), "graft_tensor_create", NULL) ||
      bench_report(graft_tensor_create(GRAFT_F32, 3, xs, &c->X), "graft_tensor_create", NULL))
    return -1;
  memset(graft_tensor_data(c->h0), 0, (size_t)BATCH * HIDDEN * sizeof(float));
  bench_fill_f32(graft_tensor_data(c->X), c->steps * BATCH * INPUT, 80, 1.0f);
  for (int r = 0; r < c->n_rts; r++) {
    if (strcmp(c->rts[r].sched, "ws")) continue;
    for (int v = 0; v < N_VARIANTS; v++) {
      rnn_conf *q = &c->rnn[c->n_rnn++];
      *q = (rnn_conf){.variant = v, .rt = r, .steps = c->steps};
      char name[64];
      for (int i = 0; i < N_VARS; i++) {
        snprintf(name, sizeof name, "%s_%d_%s", VARIANT_NAMES[v], c->rts[r].threads, VAR_NAMES[i]);
        if (bench_variable_f32(name, VAR_ROWS[i], VAR_COLS[i], c->init[i], GRAFT_VAR_TRAINABLE,
                               &q->var[i]))
          return -1;
      }
      snprintf(q->name, sizeof q->name, "rnn_%s", VARIANT_NAMES[v]);
      if (bench_function_create(c->rts[r].rt, q->name, trace_rnn, q, 2, 1, &q->f) ||
          scalar_tensor(GRAFT_F32, &q->loss))
        return -1;
    }
  }
  return 0;
}

static void cleanup(ctx *c) {
  for (int k = 0; k < c->n_while; k++) {
    graft_function_destroy(c->wh[k].f);
    graft_tensor_destroy(c->wh[k].out);
  }
  for (int k = 0; k < c->n_rnn; k++) {
    graft_function_destroy(c->rnn[k].f);
    graft_tensor_destroy(c->rnn[k].loss);
    for (int i = 0; i < N_VARS; i++) graft_variable_destroy(c->rnn[k].var[i]);
  }
  for (int i = 0; i < N_VARS; i++) free(c->init[i]);
  graft_tensor_destroy(c->x0);
  graft_tensor_destroy(c->n);
  graft_tensor_destroy(c->h0);
  graft_tensor_destroy(c->X);
  for (int r = 0; r < c->n_rts; r++) graft_runtime_destroy(c->rts[r].rt);
}

static int call_while(ctx *c, int k) {
  while_conf *w = &c->wh[k];
  if (w->rt < 0) {
    volatile double x0 = X0, sink = 0;
    volatile int32_t n = (int32_t)c->iters;
    for (int i = 0; i < C_LOOP_CALLS; i++) sink = c_loop(x0, n);
    w->result = sink;
    return C_LOOP_CALLS;
  }
  graft_tensor *in[2] = {c->x0, c->n};
  if (bench_report(graft_function_call(w->f, 2, in, 1, &w->out), "graft_function_call", w->f))
    return -1;
  w->result = *(const double *)graft_tensor_data(w->out);
  return 1;
}


static int call_rnn(ctx *c, int k) {
  rnn_conf *q = &c->rnn[k];
  graft_tensor *in[2] = {c->h0, c->X};
  return bench_report(graft_function_call(q->f, 2, in, 1, &q->loss), "graft_function_call", q->f)
             ? -1
             : 1;
}


/* One trace and compile of config k: a call of f (its first), timed
 * whole, into sample s of k's compile figures. */
static int compile_sample(ctx *c, int k, graft_function *f, int s) {
  rnn_conf *q = &c->rnn[k];
  graft_tensor *in[2] = {c->h0, c->X};
  graft_plan_stats st;
  double t0 = bench_now_us();
  if (bench_report(graft_function_call(f, 2, in, 1, &q->loss), "graft_function_call", f))
    return -1;
  q->first_call_us[s] = bench_now_us() - t0;
  if (bench_report(graft_function_stats(f, &st), "graft_function_stats", f)) return -1;
  q->trace_us[s] = q->last_trace_us;
  q->compile_us[s] = st.compile_us;
  if (s == 0) q->first_loss = *(const float *)graft_tensor_data(q->loss);
  return 0;
}

/* The first call of each while function, and compile_reps rounds over
 * the rnn configs (order rotated): its own function's first call, then
 * fresh functions of the same trace on the same variables (each also takes
 * a step: every config takes as many), traced and compiled anew; then one
 * warm-up call of each. */
static int warm_up(ctx *c) {
  for (int k = 0; k < c->n_while; k++)
    if (call_while(c, k) < 0) return -1;
  for (int s = 0; s < c->compile_reps; s++)
    for (int j = 0; j < c->n_rnn; j++) {
      int k = (s + j) % c->n_rnn;
      rnn_conf *q = &c->rnn[k];
      graft_function *f = q->f;
      if (s > 0 && bench_function_create(c->rts[q->rt].rt, q->name, trace_rnn,
                                         q, 2, 1, &f))
        return -1;
      int rc = compile_sample(c, k, f, s);
      if (f != q->f) {
        bench_warn_traced(f, VARIANT_NAMES[q->variant]);
        graft_function_destroy(f);
      }
      if (rc) return -1;
    }
  for (int k = 0; k < c->n_rnn; k++) { /* the stats of a call that did not compile */
    rnn_conf *q = &c->rnn[k];
    if (call_rnn(c, k) < 0 ||
        bench_report(graft_function_stats(q->f, &q->stats), "graft_function_stats", q->f))
      return -1;
    bench_warn_traced(q->f, VARIANT_NAMES[q->variant]);
  }
  for (int k = 0; k < c->n_rnn; k++) {
    rnn_conf *q = &c->rnn[k];
    q->trace_med = bench_median(q->trace_us, c->compile_reps);
    q->compile_med = bench_median(q->compile_us, c->compile_reps);
    q->first_med = bench_median(q->first_call_us, c->compile_reps);
  }
  return 0;
}

/* ---- results -------------------------------------------------------------------------- */

/* A configuration's time per unit (while: ns per iteration; rnn: ms per
 * step): the median and the least over the reps, and the median of the
 * calling thread's CPU time, which other processes taking the core do not
 * inflate: the whole work at one thread, only a part at more (not shown
 * there). */
typedef struct timing {
  double med, min, cpu;
} timing;

typedef struct results {
  timing *wh;  /* per while config */
  timing *rnn; /* per rnn config */
} results;

/* The rnn config of variant v on runtime r, or -1. */
static int rnn_of(const ctx *c, int r, int v) {
  for (int k = 0; k < c->n_rnn; k++)
    if (c->rnn[k].rt == r && c->rnn[k].variant == v) return k;
  return -1;
}

static const char *ok_str(int has, int ok) { return has ? (ok ? "yes" : "no") : "-"; }
static const char *json_ok(int has, int ok) { return has ? (ok ? "true" : "false") : "null"; }

static void print_header(const bench_info *info, const options *opt, const ctx *c) {
  bench_kv extra[6 + MAX_RTS];
  int n = 0;
  char reps[96], wl[256], rnn[512];
  snprintf(reps, sizeof reps, "%d per configuration, order rotated, after a warm-up call%s",
           opt->reps, opt->quick ? " (--quick: not the issue's sizes)" : "");
  extra[n++] = (bench_kv){"reps", reps};
  snprintf(wl, sizeof wl, "graft_while_loop, %" PRId64 " iterations of x = x * %.6f + %g (f64) "
           "with an i32 counter, cond i < n (n an input); c_loop: the same as a C loop",
           c->iters, DECAY, NUDGE);
  extra[n++] = (bench_kv){"while", wl};
  snprintf(rnn, sizeof rnn, "SGD step (lr %.2f) of h' = tanh(x U + h W + b), hidden %d, batch "
           "%d, input %d, %" PRId64 " steps, f32; loss = mean of h'^2 over every step (per-step "
           "terms summed); unrolled at trace time vs graft_scan vs graft_scan with checkpoint "
           "%d", LR, HIDDEN, BATCH, INPUT, c->steps, CKPT_K);
  extra[n++] = (bench_kv){"rnn", rnn};
  char keys[MAX_RTS][48];
  for (int r = 0; r < c->n_rts; r++)
    extra[n++] = bench_runtime_kv(keys[r], sizeof keys[r], c->rts[r].sched, c->rts[r].threads,
                                  c->rts[r].desc);
  bench_header_print(info, "bench_control", "staged control flow vs a C loop and an unrolled graph",
                     extra, n, opt->json);
}

static void print_while(const options *opt, const ctx *c, const results *res) {
  double base = res->wh[0].med;
  if (!opt->json)
    printf("# while: ns per iteration (median / min over the reps, cpu_ns the calling thread's "
           "CPU time at 1 thread); ratio = median / c_loop's; target <= %.0f ns at 1 thread (ws)\n"
           "# %-8s %-6s %7s %9s %9s %9s %9s %6s %3s\n",
           TARGET_NS_PER_ITER, "name", "sched", "threads", "median_ns", "min_ns", "cpu_ns",
           "ratio", "target", "ok");
  for (int k = 0; k < c->n_while; k++) {
    const while_conf *w = &c->wh[k];
    const char *sched = w->rt < 0 ? "c" : c->rts[w->rt].sched;
    int threads = w->rt < 0 ? 1 : c->rts[w->rt].threads;
    int has = w->rt >= 0 && threads == 1 && !strcmp(sched, "ws");
    const timing *tm = &res->wh[k];
    double cpu = threads == 1 ? tm->cpu : NAN;
    int ok = has && tm->med <= TARGET_NS_PER_ITER;
    double ratio = tm->med / base;
    if (opt->json) {
      printf("{\"type\":\"while\",\"name\":\"%s\",\"sched\":\"%s\",\"threads\":%d,\"iters\":%"
             PRId64 ",\"reps\":%d", w->rt < 0 ? "c_loop" : "while_loop", sched, threads, c->iters,
             opt->reps);
      bench_json_num("median_ns_per_iter", tm->med, "%.2f");
      bench_json_num("min_ns_per_iter", tm->min, "%.2f");
      bench_json_num("cpu_ns_per_iter", cpu, "%.2f");
      bench_json_num("ratio_to_c_loop", ratio, "%.1f");
      bench_json_num("target_ns", has ? TARGET_NS_PER_ITER : NAN, "%.0f");
      printf(",\"ok\":%s}\n", json_ok(has, ok));
    } else {
      char cv[32];
      printf("  %-8s %-6s %7d %9.2f %9.2f %9s %9.1f %6s %3s\n", w->rt < 0 ? "c_loop" : "while",
             sched, threads, tm->med, tm->min, bench_fmt_num(cv, sizeof cv, "%.2f", cpu), ratio,
             has ? "200" : "-", ok_str(has, ok));
    }
  }
}

static void print_rnn(const options *opt, const ctx *c, const results *res) {
  if (!opt->json)
    printf("# rnn: step_ms median / min over the reps, cpu_ms the calling thread's (1 thread); vs "
           "= this variant / the baseline of its row (unrolled; scan_ck: scan) at the same "
           "thread count;\n# trace_ms = the trace "
           "callback, compile_ms = graft_function_stats' compile_us after a first call, first_ms "
           "= that whole first call: medians of %d traces and compiles; body_runs: per step\n"
           "# %-9s %7s %9s %9s %7s %9s %7s %9s %10s %9s %10s %10s %7s %9s\n",
           c->compile_reps, "variant", "threads", "step_ms", "min_ms", "vs", "cpu_ms", "vs",
           "trace_ms",
           "compile_ms", "vs", "first_ms", "arena_mib", "vs", "body_runs");
  for (int k = 0; k < c->n_rnn; k++) {
    const rnn_conf *q = &c->rnn[k];
    int b = q->variant == V_UNROLLED
                ? -1
                : rnn_of(c, q->rt, q->variant == V_CKPT ? V_SCAN : V_UNROLLED);
    const timing *tm = &res->rnn[k];
    double vs_step = b < 0 ? NAN : tm->med / res->rnn[b].med;
    int threads = c->rts[q->rt].threads;
    double cpu = threads == 1 ? tm->cpu : NAN;
    double vs_cpu = b < 0 ? NAN : cpu / res->rnn[b].cpu;
    double vs_compile = b < 0 ? NAN : q->compile_med / c->rnn[b].compile_med;
    double vs_arena =
        b < 0 ? NAN : (double)q->stats.arena_bytes / (double)c->rnn[b].stats.arena_bytes;
    if (opt->json) {
      printf("{\"type\":\"rnn\",\"variant\":\"%s\",\"baseline\":\"%s\",\"threads\":%d,\"steps\":%"
             PRId64 ",\"reps\":%d,\"compile_reps\":%d", VARIANT_NAMES[q->variant],
             b < 0 ? "" : VARIANT_NAMES[c->rnn[b].variant], threads, q->steps, opt->reps,
             c->compile_reps);
      bench_json_num("step_ms", tm->med, "%.3f");
      bench_json_num("min_ms", tm->min, "%.3f");
      bench_json_num("step_ratio", vs_step, "%.3f");
      bench_json_num("cpu_ms", cpu, "%.3f");
      bench_json_num("cpu_ratio", vs_cpu, "%.3f");
      bench_json_num("trace_ms", q->trace_med * 1e-3, "%.3f");
      bench_json_num("compile_ms", q->compile_med * 1e-3, "%.3f");
      bench_json_num("compile_ratio", vs_compile, "%.4f");
      bench_json_num("first_call_ms", q->first_med * 1e-3, "%.3f");
      printf(",\"live_nodes\":%" PRId64 ",\"control_nodes\":%" PRId64 ",\"body_runs\":%" PRId64
             ",\"body_ops\":%" PRId64 ",\"arena_bytes\":%" PRId64,
             q->stats.live_nodes, q->stats.control_nodes, q->stats.body_runs, q->stats.body_ops,
             q->stats.arena_bytes);
      bench_json_num("arena_ratio", vs_arena, "%.4f");
      printf("}\n");
    } else {
      char a[32], b2[32], c2[32], d[32];
      char e[32];
      printf("  %-9s %7d %9.2f %9.2f %7s %9s %7s %9.2f %10.2f %9s %10.2f %10.2f %7s %9" PRId64 "\n",
             VARIANT_NAMES[q->variant], threads, tm->med, tm->min,
             bench_fmt_num(a, sizeof a, "%.3f", vs_step), bench_fmt_num(e, sizeof e, "%.2f", cpu),
             bench_fmt_num(d, sizeof d, "%.3f", vs_cpu), q->trace_med * 1e-3,
             q->compile_med * 1e-3, bench_fmt_num(b2, sizeof b2, "%.4f", vs_compile),
             q->first_med * 1e-3, bench_mib(q->stats.arena_bytes),
             bench_fmt_num(c2, sizeof c2, "%.3f", vs_arena), q->stats.body_runs);
    }
  }
}

/* One target line: {"type":"target",...} or a row of the summary table.
 * value is met when <= target; cpu (NaN: none) is the same figure from the
 * CPU times, for a machine where other processes take the cores. */
static void print_target(const options *opt, const char *name, int threads, double value,
                         double cpu, double target, int *all) {
  int ok = isfinite(value) && value <= target;
  *all &= ok;
  if (opt->json) {
    printf("{\"type\":\"target\",\"name\":\"%s\",\"threads\":%d", name, threads);
    bench_json_num("value", value, "%.4f");
    bench_json_num("cpu_value", cpu, "%.4f");
    printf(",\"target\":\"<= %.4g\",\"ok\":%s}\n", target, ok ? "true" : "false");
  } else {
    char cv[32];
    printf("  %-30s %7d %10.4f %10s    <= %-8.4g %3s\n", name, threads, value,
           bench_fmt_num(cv, sizeof cv, "%.4f", cpu), target, ok ? "yes" : "no");
  }
}

static void print_targets(const options *opt, const ctx *c, const results *res) {
  if (!opt->json)
    printf("# summary: issue 17's targets%s; value from the wall-clock medians, cpu from the "
           "calling thread's CPU times (1 thread)\n# %-30s %7s %10s %10s %12s %3s\n",
           opt->quick ? " (--quick: smaller than the issue's sizes)" : "", "target", "threads",
           "value", "cpu", "target", "ok");
  int all = 1;
  for (int k = 0; k < c->n_while; k++) {
    const while_conf *w = &c->wh[k];
    if (w->rt >= 0 && c->rts[w->rt].threads == 1 && !strcmp(c->rts[w->rt].sched, "ws"))
      print_target(opt, "while ns/iteration", 1, res->wh[k].med, res->wh[k].cpu,
                   TARGET_NS_PER_ITER, &all);
  }
  for (int r = 0; r < c->n_rts; r++) {
    int u = rnn_of(c, r, V_UNROLLED), s = rnn_of(c, r, V_SCAN), k = rnn_of(c, r, V_CKPT);
    if (u < 0 || s < 0 || k < 0) continue;
    int th = c->rts[r].threads;
    const timing *tu = &res->rnn[u], *ts = &res->rnn[s], *tk = &res->rnn[k];
    print_target(opt, "rnn step scan / unrolled", th, ts->med / tu->med,
                 th == 1 ? ts->cpu / tu->cpu : NAN, TARGET_STEP_RATIO, &all);
    print_target(opt, "rnn compile scan / unrolled", th,
                 c->rnn[s].compile_med / c->rnn[u].compile_med, NAN, TARGET_COMPILE_RATIO, &all);
    print_target(opt, "rnn arena scan_ck14 / scan", th,
                 (double)c->rnn[k].stats.arena_bytes / (double)c->rnn[s].stats.arena_bytes, NAN,
                 TARGET_ARENA_RATIO, &all);
    print_target(opt, "rnn step scan_ck14 / scan", th, tk->med / ts->med,
                 th == 1 ? tk->cpu / ts->cpu : NAN, TARGET_CKPT_TIME_RATIO, &all);
  }
  if (!opt->json) printf("# every target met: %s\n", all ? "yes" : "no");
}

/* ---- checks --------------------------------------------------------------------------- */

/* Largest |a - b| / max|b| over variable i of two configs; *same: bitwise. */
static double var_diff(const rnn_conf *a, const rnn_conf *b, int i, int *same) {
  const float *x = graft_tensor_data(graft_variable_value(a->var[i]));
  const float *y = graft_tensor_data(graft_variable_value(b->var[i]));
  int64_t n = var_count(i);
  *same = !memcmp(x, y, (size_t)n * sizeof *x);
  double scale = 0, d = 0;
  for (int64_t j = 0; j < n; j++) scale = fmax(scale, fabs((double)y[j]));
  for (int64_t j = 0; j < n; j++) d = fmax(d, fabs((double)x[j] - (double)y[j]));
  return scale > 0 ? d / scale : d;
}

/* a's variables and first loss against b's: bitwise, or (rtol > 0) within
 * rtol.  1 when they agree. */
static int check_pair(const options *opt, const ctx *c, int a, int b, double rtol) {
  const rnn_conf *x = &c->rnn[a], *y = &c->rnn[b];
  int same = x->first_loss == y->first_loss, ok;
  double worst = fabs(x->first_loss - y->first_loss) / fmax(fabs(y->first_loss), 1e-30);
  char detail[320];
  int n = snprintf(detail, sizeof detail, "first loss %.9g vs %.9g; after every step",
                   x->first_loss, y->first_loss);
  for (int i = 0; i < N_VARS; i++) {
    int s;
    double d = var_diff(x, y, i, &s);
    same &= s;
    worst = fmax(worst, d);
    n += snprintf(detail + n, sizeof detail - (size_t)n, " %s %s", VAR_NAMES[i],
                  s ? "bitwise" : "differs");
    if (n >= (int)sizeof detail) n = (int)sizeof detail - 1;
  }
  ok = same || (rtol > 0 && worst <= rtol);
  if (rtol > 0)
    snprintf(detail + n, sizeof detail - (size_t)n, "; max rel diff %.3g (tolerance %g)", worst,
             rtol);
  else
    snprintf(detail + n, sizeof detail - (size_t)n, "; max rel diff %.3g (bitwise required)",
             worst);
  char name[64];
  snprintf(name, sizeof name, "%s%d_vs_%s%d", VARIANT_NAMES[x->variant], c->rts[x->rt].threads,
           VARIANT_NAMES[y->variant], c->rts[y->rt].threads);
  bench_print_check(opt->json, name, ok, detail);
  return ok;
}

static int print_checks(const options *opt, const ctx *c) {
  int all = 1;
  char detail[160];
  for (int k = 1; k < c->n_while; k++) {
    const while_conf *w = &c->wh[k];
    int same = w->result == c->wh[0].result;
    snprintf(detail, sizeof detail, "x = %.17g, c_loop %.17g: %s", w->result, c->wh[0].result,
             same ? "bitwise equal" : "differ");
    char name[48];
    snprintf(name, sizeof name, "while_%s%d", c->rts[w->rt].sched, c->rts[w->rt].threads);
    bench_print_check(opt->json, name, same, detail);
    all &= same;
  }
  int first = -1; /* the first ws runtime with rnn configs: the reference */
  for (int r = 0; r < c->n_rts; r++) {
    int u = rnn_of(c, r, V_UNROLLED), s = rnn_of(c, r, V_SCAN), k = rnn_of(c, r, V_CKPT);
    if (u < 0) continue;
    all &= check_pair(opt, c, s, u, CLOSE_RTOL);
    all &= check_pair(opt, c, k, s, 0);
    if (first < 0) {
      first = r;
      continue;
    }
    for (int v = 0; v < N_VARIANTS; v++)
      all &= check_pair(opt, c, rnn_of(c, r, v), rnn_of(c, first, v), 0);
  }
  return all ? 0 : -1;
}

/* ---- the command line and main ----------------------------------------------------- */

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_control [--json] [--reps N] [--threads N] [--quick]\n"
          "  --json       one JSON object per line (a header, then one per row)\n"
          "  --reps N     timed repetitions per configuration (>= %d, default %d; --quick %d)\n"
          "  --threads N  also ws at N threads (3..%d)\n"
          "  --quick      a short smoke run: %d iterations, %d RNN steps (not the issue's "
          "sizes)\n",
          MIN_REPS, DEFAULT_REPS, QUICK_REPS, BENCH_MAX_THREADS, QUICK_ITERS, QUICK_STEPS);
}

static int own_opt(void *user, const char *arg, const char *val) {
  options *o = user;
  if (!strcmp(arg, "--quick")) {
    o->quick = 1;
    return 1;
  }
  if (strcmp(arg, "--threads") || !val) return 0;
  return bench_opt_threads(val, &o->threads);
}

static int setup(ctx *c, const options *opt) {
  c->iters = opt->quick ? QUICK_ITERS : ITERS;
  c->steps = opt->quick ? QUICK_STEPS : STEPS;
  c->compile_reps = opt->reps < MAX_COMPILE_REPS ? opt->reps : MAX_COMPILE_REPS;
  if (add_runtime(c, "seq", 1) || add_runtime(c, "ws", 1) || add_runtime(c, "ws", 2) ||
      (opt->threads && add_runtime(c, "ws", opt->threads)))
    return -1;
  return setup_while(c) || setup_rnn(c) ? -1 : 0;
}

/* The calling thread's CPU time: a process clock would also count the
 * pool threads of the other runtimes spinning after their calls. */
static double cpu_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* reps rounds over the n configs of one part, rotating which goes first
 * (as bench_timed_reps), each unit's wall-clock and CPU time per call
 * (run's count) times unit (from us) into out[0..n).  0, or -1 at the
 * first failure. */
static int timed_reps(ctx *c, int n, int reps, int (*run)(ctx *, int), double unit, timing *out) {
  double *wall = malloc(sizeof *wall * 2 * (size_t)n * (size_t)reps);
  if (!wall) return bench_oom();
  double *cpu = wall + (size_t)n * (size_t)reps;
  for (int r = 0; r < reps; r++)
    for (int j = 0; j < n; j++) {
      int k = (r + j) % n;
      double t0 = bench_now_us(), c0 = cpu_now_us();
      int calls = run(c, k);
      double us = bench_now_us() - t0, cus = cpu_now_us() - c0;
      if (calls < 1) {
        free(wall);
        return -1;
      }
      wall[(size_t)k * (size_t)reps + (size_t)r] = us / calls;
      cpu[(size_t)k * (size_t)reps + (size_t)r] = cus / calls;
    }
  for (int k = 0; k < n; k++) {
    double *w = wall + (size_t)k * (size_t)reps;
    out[k].med = unit * bench_median_min(w, reps, &out[k].min);
    out[k].min *= unit;
    out[k].cpu = unit * bench_median(cpu + (size_t)k * (size_t)reps, reps);
  }
  free(wall);
  return 0;
}

/* The timed reps of both parts into res. */
static int measure(ctx *c, int reps, results *res) {
  res->wh = calloc((size_t)(c->n_while + c->n_rnn), sizeof *res->wh);
  if (!res->wh) return bench_oom();
  res->rnn = res->wh + c->n_while;
  if (timed_reps(c, c->n_while, reps, call_while, 1e3 / (double)c->iters, res->wh)) return -1;
  return timed_reps(c, c->n_rnn, reps, call_rnn, 1e-3, res->rnn);
}

int main(int argc, char **argv) {
  options opt = {.reps = 0};
  if (bench_parse_args(argc, argv, &opt.json, &opt.reps, MIN_REPS, BENCH_MAX_REPS, usage, own_opt,
                       &opt))
    return 2;
  if (!opt.reps) opt.reps = opt.quick ? QUICK_REPS : DEFAULT_REPS;
  bench_info info;
  if (bench_info_collect(&info, 1)) return 1;
  long cpus_before = bench_thread_cpus();
  ctx c = {0};
  results res = {0};
  int rc = setup(&c, &opt);
  if (!rc) {
    print_header(&info, &opt, &c);
    fflush(stdout);
    rc = warm_up(&c);
  }
  if (!rc) rc = measure(&c, opt.reps, &res);
  if (!rc) {
    print_while(&opt, &c, &res);
    print_rnn(&opt, &c, &res);
    rc = print_checks(&opt, &c);
    print_targets(&opt, &c, &res);
    bench_footer_print(cpus_before, bench_thread_cpus(), opt.json);
  }
  free(res.wh);
  cleanup(&c);
  bench_info_free(&info);
  return rc ? 1 : 0;
}
