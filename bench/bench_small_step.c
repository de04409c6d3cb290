/* bench_small_step: one small Adam training step at the arithmetic limit
 * (issue 18).
 *
 * The step is the demo's (examples/fmnist_model.c): the MLP 784-256-128-10
 * (relu, softmax cross-entropy) over its 235,146 parameters, f32, batch 32,
 * one thread, synthetic inputs (the step's cost does not depend on them).
 * Configs, timed in the same process and run, one step per config per
 * round, the order rotated round by round:
 *   update_on    graft's own Adam (graft_optimizer_apply: one UPDATE node
 *                per variable, one kernel), fusion on;
 *   update_off   the same, fusion off (graft_runtime_opts.fusion "off");
 *   ops_on       Adam written as plain graft ops, PyTorch's formula in
 *                PyTorch's order (what the UPDATE kernel computes):
 *                  m := b1 m + (1 - b1) g;  v := b2 v + ((1 - b2) g) g;
 *                  w := w - (lr / c1) (m / (sqrt(v) / c2s + eps))
 *                with c1 = 1 - b1^t, c2s = sqrt(1 - b2^t) from a step
 *                counter (f64, like graft's): 13 ops and 3 assigns per
 *                variable; fusion on: each variable's m, v and w groups
 *                merged into one node (sched/fuse.c) and compiled to one
 *                loop of machine code (kernels/fused_jit.c);
 *   ops_off      the same, fusion off;
 *   ops_interp   the same, fusion interp: the groups run by the
 *                interpreter (each member a pass over L1-sized chunks);
 *   gemm8        the baseline: the step's 8 GEMMs (forward: 3; backward:
 *                dW of the 3 layers, dX of layers 2 and 3; the first
 *                layer's dX is not needed), each one cblas_sgemm call at
 *                the backward's shapes and transposes, BLAS held to one
 *                thread (bench_fashion's bound, at batch 32);
 *   adam_c       a plain-C Adam loop (the UPDATE kernel's formula) over
 *                the same 235,146 parameters: the floor of the update's
 *                one memory pass (read w, g, m, v; write w, m, v).
 * Each graft config has its own copy of the model (same initial weights),
 * on one of three ws/1 runtimes (fusion on, off, interp).
 *
 * Rows: median_us and min_us per step over the rounds; x_gemm8 = the median
 * over rounds of step / gemm8 in the same round (the rounds drift with the
 * machine's load more than a round does); vs_pytorch = PyTorch's stated
 * time for this step / median_us (1,370 us: PyTorch 1.13 on this machine,
 * batch 32, 1 thread, with MALLOC_MMAP_THRESHOLD_ raised so glibc keeps its
 * temporaries; issue 18's figure, not measured here).  Target (issue 18):
 * the step as plain ops (ops_on) <= 600 us; update_on shown against it
 * too.  Stats rows: each graft config's plan (graft_function_stats: fused
 * groups, ops inside them, values no longer stored, arena bytes) and the
 * minor page faults per step over FAULT_STEPS more steps (graft allocates
 * nothing per call, so the figure does not depend on glibc's malloc
 * settings: the header names any MALLOC_* variable of the run).  Split rows:
 * where update_on's and ops_on's steps go, from a ws/1 runtime writing a
 * Chrome trace (fusion as the environment says, on by default): each
 * tile's median over TRACE_STEPS steps, summed by category (GEMMs, the
 * update: everything after the last backward node, softmax cross-entropy
 * and its gradient, the bias gradients' sum_to_shape, other ops); then
 * TRACE_STEPS untraced steps, gemm8 and adam_c calls in turn, whose
 * medians set the GEMM and update tiles against the baselines at the same
 * moment and give the gap: the untraced step less its tiles (dispatch and
 * the call's own work, without the trace's cost).  Op rows: the same by
 * op.  Check rows:
 * fusion changes no bit (update_on vs update_off, ops_on and ops_interp vs
 * ops_off after the same steps), and the plain-ops Adam agrees with graft's UPDATE (the
 * same operations in the same order: bitwise so far; the check allows
 * rounding, 1e-6).
 *
 * --profile NAME runs only config NAME's steps, --reps of them after the
 * warm-up, untimed and without rows: a run for perf record.
 *
 * Usage: bench_small_step [--json] [--reps N] [--profile NAME]
 */
#define _GNU_SOURCE /* bench_common.h: sched_getaffinity, open_memstream */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define BENCH_PROG "bench_small_step"
#include "bench_common.h"
#include "fmnist_model.h"
#include "graft.h"

#define BATCH 32
#define MIN_REPS 10
#define DEFAULT_REPS 400
#define CHECK_STEPS 3  /* each config, before the checks */
#define WARMUP_STEPS 20
#define FAULT_STEPS 100
#define TRACE_STEPS 51
#define N_GEMMS 8
#define LR 1e-3f /* fm_default_lr(GRAFT_OPT_ADAM) */
#define BETA1 0.9
#define BETA2 0.999
#define EPS 1e-8
#define TARGET_US 600.0
#define PYTORCH_US 1370.0

enum { C_UPDATE_ON, C_UPDATE_OFF, C_OPS_ON, C_OPS_OFF, C_OPS_INTERP, C_GEMM8, C_ADAM_C, N_CONFIGS };
#define N_STEPS 5 /* the graft configs come first */
static const char *const NAMES[N_CONFIGS] = {"update_on", "update_off", "ops_on", "ops_off",
                                             "ops_interp", "gemm8",     "adam_c"};
static const char *const WHAT[N_CONFIGS] = {
    "graft Adam (UPDATE), fusion on", "graft Adam (UPDATE), fusion off",
    "Adam as graft ops, fusion on",   "Adam as graft ops, fusion off",
    "Adam as ops, fusion interp",     "the 8 GEMMs, cblas_sgemm",
    "Adam in plain C"};
/* Each graft config's runtime: fusion on (groups compiled), off, interp. */
static const int RT_OF[N_STEPS] = {0, 1, 0, 1, 2};

/* Forward a[l+1] = a[l] w[l]; backward gw[l] = a[l]^T d[l+1] for the 3
 * layers and d[l] = d[l+1] w[l]^T for l = 1, 2. */
static const bench_gemm GEMMS[N_GEMMS] = {
    {0, 0, BATCH, 256, 784}, {0, 0, BATCH, 128, 256}, {0, 0, BATCH, 10, 128},
    {1, 0, 128, 10, BATCH},  {0, 1, BATCH, 128, 10},  {1, 0, 256, 128, BATCH},
    {0, 1, BATCH, 256, 128}, {1, 0, 784, 256, BATCH}};

/* Adam as plain ops: the model and its own state (the moments of each
 * parameter and the step count). */
typedef struct ops_adam {
  fm_model *m;
  graft_variable *mom[FM_MAX_PARAMS], *vel[FM_MAX_PARAMS], *t;
} ops_adam;

typedef struct ctx {
  float *x;
  int32_t labels[BATCH];
  graft_tensor *in[2], *out[N_STEPS][2];
  graft_runtime *rt[3];   /* ws/1, fusion on / off / interp */
  fm_model m[N_STEPS];    /* one model per graft config, same seed */
  ops_adam ops[3];        /* ops_on's, ops_off's and ops_interp's state */
  graft_function *f[N_STEPS];
  bench_gemm_set gemm8;
  bench_adam adam;
  int64_t n_params;
} ctx;

typedef struct opts {
  bench_opts b;
  int profile; /* a config, or -1 */
} opts;

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_small_step [--json] [--reps N] [--profile NAME]\n"
          "  --json          one JSON object per line (a header, then one per row)\n"
          "  --reps N        timed rounds, one step of each config per round (>= %d,\n"
          "                  default %d)\n"
          "  --profile NAME  after the warm-up, only N steps of config NAME (update_on,\n"
          "                  update_off, ops_on, ops_off, gemm8, adam_c), untimed, no rows:\n"
          "                  a run for perf record\n",
          MIN_REPS, DEFAULT_REPS);
}

/* --profile (bench_parse_args). */
static int own_opt(void *user, const char *arg, const char *val) {
  opts *o = user;
  if (strcmp(arg, "--profile") != 0) return 0;
  for (int k = 0; val && k < N_CONFIGS; k++)
    if (strcmp(val, NAMES[k]) == 0) {
      o->profile = k;
      return 2;
    }
  fprintf(stderr, BENCH_PROG ": --profile needs a config name (update_on, update_off, ops_on, "
                  "ops_off, gemm8, adam_c)\n");
  return -1;
}

/* ---- Adam as plain ops ------------------------------------------------------------ */

/* The demo's step with the update written as ops: (x, labels) -> (loss,
 * logits), like fmnist_model.c's step. */
static graft_status ops_step_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  ops_adam *a = user;
  fm_model *m = a->m;
  graft_value *p[FM_MAX_PARAMS], *g[FM_MAX_PARAMS];
  graft_value *logits = fm_forward(t, m, in[0], p);
  graft_value *loss = graft_softmax_cross_entropy(t, logits, in[1]);
  graft_status s = graft_gradients(t, 1, &loss, NULL, m->n_params, p, GRAFT_UNCONNECTED_ZERO, g);
  if (s) return s;
  /* The step's scalars, as graft_optimizer_apply makes them: c1 and c2s in
   * f64, then f32; 1 - b1 and 1 - b2 in f32, as the kernel computes them. */
  graft_value *one = graft_scalar(t, GRAFT_F64, 1);
  graft_value *step = graft_add(t, graft_read(t, a->t), one);
  graft_assign(t, a->t, step);
  graft_value *c1 = graft_sub(t, one, graft_pow(t, graft_scalar(t, GRAFT_F64, BETA1), step));
  graft_value *c2s =
      graft_sqrt(t, graft_sub(t, one, graft_pow(t, graft_scalar(t, GRAFT_F64, BETA2), step)));
  graft_value *lr_c1 = graft_div(t, graft_read(t, m->lr), graft_cast(t, c1, GRAFT_F32));
  c2s = graft_cast(t, c2s, GRAFT_F32);
  graft_value *b1 = graft_scalar(t, GRAFT_F32, BETA1), *b2 = graft_scalar(t, GRAFT_F32, BETA2);
  graft_value *one32 = graft_scalar(t, GRAFT_F32, 1), *eps = graft_scalar(t, GRAFT_F32, EPS);
  graft_value *nb1 = graft_sub(t, one32, b1), *nb2 = graft_sub(t, one32, b2);
  for (int i = 0; i < m->n_params; i++) {
    graft_value *mn = graft_add(t, graft_mul(t, b1, graft_read(t, a->mom[i])),
                                graft_mul(t, nb1, g[i]));
    graft_value *vn = graft_add(t, graft_mul(t, b2, graft_read(t, a->vel[i])),
                                graft_mul(t, graft_mul(t, nb2, g[i]), g[i]));
    graft_value *denom = graft_add(t, graft_div(t, graft_sqrt(t, vn), c2s), eps);
    graft_assign(t, a->mom[i], mn);
    graft_assign(t, a->vel[i], vn);
    graft_assign(t, m->params[i], graft_sub(t, p[i], graft_mul(t, lr_c1, graft_div(t, mn, denom))));
  }
  out[0] = loss;
  out[1] = logits;
  return GRAFT_OK;
}

/* With the demo's signature (one trace, a plan per batch size), as
 * update_on's step. */
static int ops_function(graft_runtime *rt, ops_adam *a, graft_function **f) {
  graft_function_desc d = {.name = "adam_ops_step",
                           .trace = ops_step_trace,
                           .user = a,
                           .n_inputs = 2,
                           .n_outputs = 2,
                           .signature = &fm_signature};
  return bench_report(graft_function_create(rt, &d, f), "graft_function_create", NULL);
}

/* Zeroed moments of m's parameters and a step count of 0. */
static int ops_state_create(ops_adam *a, fm_model *m) {
  a->m = m;
  for (int i = 0; i < m->n_params; i++) {
    const graft_tensor *w = graft_variable_value(m->params[i]);
    int r = graft_tensor_rank(w);
    const int64_t *s = graft_tensor_shape(w);
    if (bench_report(graft_variable_create(NULL, "m", GRAFT_F32, r, s, NULL, 0, &a->mom[i]),
                     "graft_variable_create", NULL) ||
        bench_report(graft_variable_create(NULL, "v", GRAFT_F32, r, s, NULL, 0, &a->vel[i]),
                     "graft_variable_create", NULL))
      return -1;
  }
  return bench_report(graft_variable_create(NULL, "t", GRAFT_F64, 0, NULL, NULL, 0, &a->t),
                      "graft_variable_create", NULL);
}

static void ops_state_destroy(ops_adam *a) {
  for (int i = 0; i < FM_MAX_PARAMS; i++) {
    graft_variable_destroy(a->mom[i]);
    graft_variable_destroy(a->vel[i]);
  }
  graft_variable_destroy(a->t);
}

/* ---- the configs ------------------------------------------------------------------ */

static int step(ctx *c, int k) {
  graft_status s = graft_function_call(c->f[k], 2, c->in, 2, c->out[k]);
  return bench_report(s, "graft_function_call (step)", c->f[k]);
}

static int run_one(void *user, int cfg) {
  ctx *c = user;
  if (cfg < N_STEPS) return step(c, cfg) ? -1 : 1;
  if (cfg == C_GEMM8) bench_gemm_set_run(&c->gemm8);
  else bench_adam_step(&c->adam, LR);
  return 1;
}

/* ---- set-up ----------------------------------------------------------------------- */

static int build(ctx *c) {
  uint64_t seed = bench_uniform_seed(7);
  c->x = bench_alloc_f32((int64_t)BATCH * FM_PIXELS);
  if (!c->x) return bench_oom();
  bench_fill_f32(c->x, (int64_t)BATCH * FM_PIXELS, 3, 2.0f);
  for (int i = 0; i < BATCH; i++) c->labels[i] = (int32_t)(bench_xorshift(&seed) % FM_CLASSES);
  const int64_t xs[2] = {BATCH, FM_PIXELS}, ls[1] = {BATCH};
  if (bench_report(graft_tensor_wrap(GRAFT_F32, 2, xs, c->x, &c->in[0]), "graft_tensor_wrap",
                   NULL) ||
      bench_report(graft_tensor_wrap(GRAFT_I32, 1, ls, c->labels, &c->in[1]), "graft_tensor_wrap",
                   NULL))
    return -1;
  for (int r = 0; r < 3; r++) {
    graft_runtime_opts ro;
    graft_runtime_opts_init(&ro);
    ro.num_threads = 1;
    ro.sched = "ws";
    ro.fusion = r == 0 ? "on" : r == 1 ? "off" : "interp";
    if (bench_runtime_create_opts(&ro, &c->rt[r], NULL, 0)) return -1;
  }
  for (int k = 0; k < N_STEPS; k++) {
    char err[1024];
    fm_config cfg = {.arch = FM_MLP, .optimizer = GRAFT_OPT_ADAM, .seed = 1};
    if (fm_model_create(c->rt[RT_OF[k]], &cfg, &c->m[k], err, sizeof err)) {
      fprintf(stderr, BENCH_PROG ": %s\n", err);
      return -1;
    }
    if (k < C_OPS_ON) {
      c->f[k] = c->m[k].step;
    } else {
      ops_adam *a = &c->ops[k - C_OPS_ON];
      if (ops_state_create(a, &c->m[k]) || ops_function(c->rt[RT_OF[k]], a, &c->f[k])) return -1;
    }
  }
  for (int i = 0; i < c->m[0].n_params; i++)
    c->n_params += graft_tensor_numel(graft_variable_value(c->m[0].params[i]));
  return bench_gemm_set_init(&c->gemm8, GEMMS, N_GEMMS) || bench_adam_init(&c->adam, c->n_params)
             ? -1
             : 0;
}

static void cleanup(ctx *c) {
  for (int k = 0; k < N_STEPS; k++) {
    for (int i = 0; i < 2; i++) graft_tensor_destroy(c->out[k][i]);
    if (k >= C_OPS_ON) graft_function_destroy(c->f[k]);
  }
  for (int k = 0; k < N_STEPS; k++) fm_model_destroy(&c->m[k]);
  for (int k = 0; k < 3; k++) ops_state_destroy(&c->ops[k]);
  for (int r = 0; r < 3; r++) graft_runtime_destroy(c->rt[r]);
  for (int i = 0; i < 2; i++) graft_tensor_destroy(c->in[i]);
  bench_gemm_set_free(&c->gemm8);
  bench_adam_free(&c->adam);
  free(c->x);
}

/* ---- checks ------------------------------------------------------------------------- */

/* The largest |a - b| over the parameters of models i and j; *same: every
 * bit equal. */
static double params_diff(const ctx *c, int i, int j, int *same) {
  double worst = 0.0;
  *same = 1;
  for (int p = 0; p < c->m[i].n_params; p++) {
    const graft_tensor *ta = graft_variable_value(c->m[i].params[p]),
                       *tb = graft_variable_value(c->m[j].params[p]);
    const float *a = graft_tensor_data(ta), *b = graft_tensor_data(tb);
    int64_t n = graft_tensor_numel(ta);
    *same &= !memcmp(a, b, (size_t)n * sizeof *a);
    for (int64_t e = 0; e < n; e++) {
      double d = fabs((double)a[e] - (double)b[e]);
      if (!(d <= worst)) worst = d; /* NaN sticks */
    }
  }
  return worst;
}

/* After CHECK_STEPS steps of each config from the same weights. */
static int check_steps(const ctx *c, int json) {
  char detail[256];
  int same_u, same_o, same_i, same_uo;
  params_diff(c, C_UPDATE_ON, C_UPDATE_OFF, &same_u);
  params_diff(c, C_OPS_ON, C_OPS_OFF, &same_o);
  params_diff(c, C_OPS_INTERP, C_OPS_OFF, &same_i);
  snprintf(detail, sizeof detail,
           "weights after %d steps: update_on = update_off %s, ops_on = ops_off %s, ops_interp = "
           "ops_off %s", CHECK_STEPS, same_u ? "bitwise" : "DIFFER", same_o ? "bitwise" : "DIFFER",
           same_i ? "bitwise" : "DIFFER");
  bench_print_check(json, "fusion_same_bits", same_u && same_o && same_i, detail);
  /* The ops compute the kernel's formula in its order; any difference can
   * only be rounding, far below the 3e-3 the weights moved. */
  double d = params_diff(c, C_UPDATE_ON, C_OPS_ON, &same_uo);
  int ok = d <= 1e-6;
  snprintf(detail, sizeof detail, "weights after %d steps: %s (largest |difference| %.3g)",
           CHECK_STEPS, same_uo ? "bitwise equal" : "not bitwise equal", d);
  bench_print_check(json, "ops_vs_update", ok, detail);
  return same_u && same_o && same_i && ok ? 0 : -1;
}

/* ---- plan statistics and page faults ------------------------------------------------ */

static long minor_faults(void) {
  struct rusage u;
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_minflt : -1;
}

static int print_stats(ctx *c, int json) {
  if (!json)
    printf("# plans (graft_function_stats): nodes traced / live, tiles, fused groups (compiled),\n"
           "# ops in them, values no longer stored, arena; minor page faults per step over %d steps\n"
           "# %-10s %6s %6s %6s %7s %8s %6s %8s %11s %12s\n",
           FAULT_STEPS, "name", "nodes", "live", "tiles", "groups", "compiled", "f_ops", "dropped",
           "arena_bytes", "faults/step");
  for (int k = 0; k < N_STEPS; k++) {
    graft_plan_stats st;
    if (bench_report(graft_function_stats(c->f[k], &st), "graft_function_stats", c->f[k]))
      return -1;
    long f0 = minor_faults();
    for (int i = 0; i < FAULT_STEPS; i++)
      if (step(c, k)) return -1;
    double faults = f0 < 0 ? NAN : (double)(minor_faults() - f0) / FAULT_STEPS;
    if (json) {
      printf("{\"type\":\"stats\",\"name\":\"%s\",\"nodes\":%lld,\"live_nodes\":%lld,"
             "\"tiles\":%lld,\"fused_groups\":%lld,\"fused_compiled\":%lld,\"fused_ops\":%lld,"
             "\"fused_dropped\":%lld,\"arena_bytes\":%lld,\"direct_assigns\":%lld",
             NAMES[k], (long long)st.nodes, (long long)st.live_nodes, (long long)st.tiles,
             (long long)st.fused_groups, (long long)st.fused_compiled, (long long)st.fused_ops,
             (long long)st.fused_dropped,
             (long long)st.arena_bytes, (long long)st.direct_assigns);
      bench_json_num("faults_per_step", faults, "%.2f");
      printf("}\n");
    } else {
      printf("  %-10s %6lld %6lld %6lld %7lld %8lld %6lld %8lld %11lld %12.2f\n", NAMES[k],
             (long long)st.nodes, (long long)st.live_nodes, (long long)st.tiles,
             (long long)st.fused_groups, (long long)st.fused_compiled, (long long)st.fused_ops,
             (long long)st.fused_dropped,
             (long long)st.arena_bytes, faults);
    }
  }
  return 0;
}

/* ---- where a step goes: a Chrome trace ---------------------------------------------- */

enum { K_GEMM, K_UPDATE, K_XENT, K_BIAS, K_OTHER, N_KINDS };
static const char *const KIND_NAMES[N_KINDS] = {"gemm", "update", "xent", "bias_grad", "other"};

typedef struct split {
  double wall_us, kind_us[N_KINDS], tiles_us;
  double step_us, gemm8_us, adam_c_us; /* medians right after the traced steps */
  double gap_us;                       /* step_us - tiles_us */
  bench_ops ops; /* by op, largest first */
} split;

/* The traced run's function: the config's step on the traced runtime, for
 * the config's own model (its weights move on; the timing is done). */
typedef struct split_ctx {
  ctx *c;
  int cfg;
} split_ctx;

static int split_make(void *user, graft_runtime *rt, graft_function **f) {
  split_ctx *s = user;
  if (s->cfg == C_UPDATE_ON) {
    char err[1024];
    if (!fm_step_function(rt, &s->c->m[C_UPDATE_ON], f, err, sizeof err)) return 0;
    fprintf(stderr, BENCH_PROG ": %s\n", err);
    return -1;
  }
  return ops_function(rt, &s->c->ops[0], f);
}

static int split_call(void *user, graft_function *f) {
  split_ctx *s = user;
  return bench_report(graft_function_call(f, 2, s->c->in, 2, s->c->out[s->cfg]),
                      "graft_function_call (traced step)", f);
}

static int is_op(const bench_gnode *n, const char *op) { return strcmp(n->op, op) == 0; }

/* Softmax cross-entropy's nodes: the op, the softmax and one_hot of its
 * gradient, and the backward sub / mul reading them (fused or not, the
 * group's root is the last mul). */
static void mark_xent(const bench_graph *g, uint8_t *xent) {
  for (int id = 0; id < g->n; id++) {
    const bench_gnode *n = &g->nodes[id];
    xent[id] = is_op(n, "softmax_cross_entropy") || is_op(n, "softmax") || is_op(n, "one_hot");
    if (xent[id] || n->role != 1 || !(is_op(n, "sub") || is_op(n, "mul"))) continue;
    for (int j = 0; j < n->n_in && j < 4; j++)
      if ((int)n->in[j] < id && xent[n->in[j]]) xent[id] = 1;
  }
}

static int run_split(ctx *c, int cfg, split *sp) {
  memset(sp, 0, sizeof *sp);
  split_ctx s = {c, cfg};
  bench_traced tr;
  if (bench_traced_run(1, TRACE_STEPS, split_make, split_call, &s, &tr)) return -1;
  const bench_graph *g = &tr.graph;
  uint8_t *xent = calloc((size_t)(g->n ? g->n : 1), 1);
  if (!xent) {
    bench_traced_free(&tr);
    return bench_oom();
  }
  mark_xent(g, xent);
  sp->wall_us = tr.wall_us;
  for (int64_t i = 0; i < tr.n_tiles; i++) {
    uint32_t id = tr.tiles[i].node;
    double us = tr.tiles[i].us;
    int known = (int)id < g->n;
    const bench_gnode *n = known ? &g->nodes[id] : NULL;
    int kind = !known                                  ? K_OTHER
               : is_op(n, "matmul")                     ? K_GEMM
               : (long)id > g->last_backward            ? K_UPDATE
               : xent[id]                               ? K_XENT
               : is_op(n, "sum_to_shape") && n->role == 1 ? K_BIAS
                                                          : K_OTHER;
    sp->kind_us[kind] += us;
    sp->tiles_us += us;
    bench_ops_add(&sp->ops, kind, known && n->op[0] ? n->op : "?", known ? (int64_t)id : -1, us);
  }
  bench_ops_sort(&sp->ops);
  free(xent);
  bench_traced_free(&tr);
  /* The untraced step and the baselines at the same moment (the machine's
   * load drifts between phases of the run): the step less its tiles is
   * the gap without the trace's own cost; the GEMM and update tiles are
   * set against the baselines. */
  double st[TRACE_STEPS], gt[TRACE_STEPS], at[TRACE_STEPS];
  for (int i = 0; i < TRACE_STEPS; i++) {
    double t0 = bench_now_us();
    if (step(c, cfg)) return -1;
    double t1 = bench_now_us();
    bench_gemm_set_run(&c->gemm8);
    double t2 = bench_now_us();
    bench_adam_step(&c->adam, LR);
    st[i] = t1 - t0;
    gt[i] = t2 - t1;
    at[i] = bench_now_us() - t2;
  }
  sp->step_us = bench_median(st, TRACE_STEPS);
  sp->gemm8_us = bench_median(gt, TRACE_STEPS);
  sp->adam_c_us = bench_median(at, TRACE_STEPS);
  sp->gap_us = sp->step_us - sp->tiles_us;
  return 0;
}

static void print_split(const split *sp, int cfg, int json) {
  if (json) {
    printf("{\"type\":\"split\",\"name\":\"%s\",\"steps\":%d", NAMES[cfg], TRACE_STEPS);
    bench_json_num("step_us", sp->step_us, "%.1f");
    bench_json_num("tiles_us", sp->tiles_us, "%.1f");
    for (int k = 0; k < N_KINDS; k++) {
      char key[32];
      snprintf(key, sizeof key, "%s_us", KIND_NAMES[k]);
      bench_json_num(key, sp->kind_us[k], "%.1f");
    }
    bench_json_num("gap_us", sp->gap_us, "%.1f");
    bench_json_num("traced_us", sp->wall_us, "%.1f");
    bench_json_num("gemm8_us", sp->gemm8_us, "%.1f");
    bench_json_num("adam_c_us", sp->adam_c_us, "%.1f");
    printf("}\n");
    for (int i = 0; i < sp->ops.n; i++) {
      const bench_op_time *o = &sp->ops.v[i];
      printf("{\"type\":\"op_time\",\"name\":\"%s\",\"kind\":\"%s\",\"op\":\"%s\",\"nodes\":%d",
             NAMES[cfg], KIND_NAMES[o->part], o->op, o->nodes);
      bench_json_num("us", o->us, "%.1f");
      printf("}\n");
    }
    return;
  }
  printf("split %-10s step %.1f us = gemm %.1f + update %.1f + xent %.1f + bias_grad %.1f"
         " + other %.1f + gap %.1f; traced step %.1f; gemm8 %.1f, adam_c %.1f\n",
         NAMES[cfg], sp->step_us, sp->kind_us[K_GEMM], sp->kind_us[K_UPDATE], sp->kind_us[K_XENT],
         sp->kind_us[K_BIAS], sp->kind_us[K_OTHER], sp->gap_us, sp->wall_us, sp->gemm8_us,
         sp->adam_c_us);
  for (int i = 0; i < sp->ops.n; i++) {
    const bench_op_time *o = &sp->ops.v[i];
    printf("  op %-10s %-9s %-22s %3d node(s) %8.1f us\n", NAMES[cfg], KIND_NAMES[o->part], o->op,
           o->nodes, o->us);
  }
}

/* ---- rows --------------------------------------------------------------------------- */

static void print_row(int json, int cfg, int reps, const double *med, const double *min,
                      const double *x_gemm) {
  const int is_step = cfg < N_STEPS;
  const int has_target = cfg == C_UPDATE_ON || cfg == C_OPS_ON;
  double vs_torch = is_step ? PYTORCH_US / med[cfg] : NAN;
  double target = has_target ? TARGET_US : NAN;
  int met = has_target && med[cfg] <= TARGET_US;
  if (json) {
    printf("{\"type\":\"row\",\"name\":\"%s\",\"what\":\"%s\",\"batch\":%d,\"threads\":1,"
           "\"reps\":%d",
           NAMES[cfg], WHAT[cfg], BATCH, reps);
    bench_json_num("median_us", med[cfg], "%.1f");
    bench_json_num("min_us", min[cfg], "%.1f");
    bench_json_num("x_gemm8", cfg == C_GEMM8 ? 1.0 : x_gemm[cfg], "%.3f");
    bench_json_num("vs_pytorch", vs_torch, "%.2f");
    bench_json_num("target_us", target, "%.0f");
    printf(",\"ok\":%s}\n", has_target ? (met ? "true" : "false") : "null");
    return;
  }
  char vb[32], tb[32];
  printf("  %-10s %-32s %5d %5d %9.1f %9.1f %7.3f %8s %6s %3s\n", NAMES[cfg], WHAT[cfg], BATCH,
         reps, med[cfg], min[cfg], cfg == C_GEMM8 ? 1.0 : x_gemm[cfg],
         bench_fmt_num(vb, sizeof vb, "%.2f", vs_torch), bench_fmt_num(tb, sizeof tb, "%.0f", target),
         has_target ? (met ? "yes" : "no") : "-");
}

/* MALLOC_* variables of the environment ("none" without any), for the
 * header: glibc's settings that PyTorch's figure depends on. */
static void malloc_env(char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (char **e = environ; *e && at < len; e++)
    if (strncmp(*e, "MALLOC_", 7) == 0 || strncmp(*e, "GLIBC_TUNABLES=", 15) == 0)
      at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? " " : "", *e);
  if (!buf[0]) snprintf(buf, len, "none");
}

int main(int argc, char **argv) {
  opts o = {.b = {.json = 0, .reps = DEFAULT_REPS}, .profile = -1};
  if (bench_parse_args(argc, argv, &o.b.json, &o.b.reps, MIN_REPS, BENCH_MAX_REPS, usage, own_opt,
                       &o))
    return 2;
  const bench_opts opt = o.b;
  bench_info info;
  if (bench_info_collect(&info, 1)) return 1;
  ctx c;
  memset(&c, 0, sizeof c);
  int rc = build(&c);
  long cpus_before = bench_thread_cpus();
  for (int i = 0; i < CHECK_STEPS && !rc; i++)
    for (int k = 0; k < N_STEPS && !rc; k++) rc = step(&c, k);
  if (!rc) {
    char model[200], reps[120], menv[512], runtime[512];
    snprintf(model, sizeof model,
             "%s, %lld parameters, Adam (lr 1e-3, betas 0.9 / 0.999, eps 1e-8); batch %d of "
             "synthetic inputs, f32, 1 thread (ws/1)",
             fm_arch_name(FM_MLP), (long long)c.n_params, BATCH);
    snprintf(reps, sizeof reps, "%d rounds of one step per config, order rotated, after %d "
             "warm-up steps", opt.reps, CHECK_STEPS + WARMUP_STEPS);
    malloc_env(menv, sizeof menv);
    graft_runtime_describe(c.rt[0], runtime, sizeof runtime);
    bench_kv extra[] = {{"model", model},
                        {"reps", reps},
                        {"runtime", runtime},
                        {"blas", info.blas},
                        {"malloc_env", menv}};
    bench_header_print(&info, "bench_small_step", "one Adam step of the demo's MLP, batch 32",
                       extra, 5, opt.json);
    rc = check_steps(&c, opt.json);
  }
  for (int i = 0; i < WARMUP_STEPS && !rc; i++)
    for (int k = 0; k < N_CONFIGS && !rc; k++)
      if (o.profile < 0 || k == o.profile) rc = run_one(&c, k) < 0;
  if (!rc && o.profile >= 0) {
    for (int i = 0; i < opt.reps && !rc; i++) rc = run_one(&c, o.profile) < 0;
    cleanup(&c);
    bench_info_free(&info);
    return rc ? 1 : 0;
  }
  double *t = rc ? NULL : malloc(sizeof *t * N_CONFIGS * (size_t)opt.reps);
  double *r = rc ? NULL : malloc(sizeof *r * (size_t)opt.reps);
  if (!rc && (!t || !r)) rc = bench_oom();
  if (!rc) rc = bench_timed_reps(N_CONFIGS, opt.reps, t, run_one, NULL, &c);
  if (!rc) {
    double med[N_CONFIGS], min[N_CONFIGS], x_gemm[N_CONFIGS];
    for (int k = 0; k < N_CONFIGS; k++) {
      for (int i = 0; i < opt.reps; i++) r[i] = t[k * opt.reps + i] / t[C_GEMM8 * opt.reps + i];
      x_gemm[k] = bench_median(r, opt.reps);
    }
    for (int k = 0; k < N_CONFIGS; k++)
      med[k] = bench_median_min(t + k * opt.reps, opt.reps, &min[k]);
    if (!opt.json)
      printf("# median_us / min_us per step over the rounds; x_gemm8: the median over rounds of\n"
             "# step / gemm8 in the same round; vs_pytorch = %.0f us (PyTorch 1.13, stated in\n"
             "# issue 18, not measured here) / median_us; target: median_us <= %.0f us\n"
             "# %-10s %-32s %5s %5s %9s %9s %7s %8s %6s %3s\n",
             PYTORCH_US, TARGET_US, "name", "what", "batch", "reps", "median_us", "min_us",
             "x_gemm8", "vs_torch", "target", "ok");
    for (int k = 0; k < N_CONFIGS; k++) print_row(opt.json, k, opt.reps, med, min, x_gemm);
    rc = print_stats(&c, opt.json);
  }
  static const int SPLIT_CFGS[2] = {C_UPDATE_ON, C_OPS_ON};
  if (!rc && !opt.json)
    printf("# where a step goes: a ws/1 runtime writing a Chrome trace, each tile's median over\n"
           "# %d steps summed by kind (update: every node after the last backward one); then\n"
           "# %d untraced steps, gemm8 and adam_c calls in turn: step (their median) = the\n"
           "# tiles + gap; traced step: the traced steps' median (the trace's cost included)\n",
           TRACE_STEPS, TRACE_STEPS);
  for (int i = 0; i < 2 && !rc; i++) {
    split sp;
    rc = run_split(&c, SPLIT_CFGS[i], &sp);
    if (!rc) print_split(&sp, SPLIT_CFGS[i], opt.json);
  }
  if (!rc) bench_footer_print(cpus_before, bench_thread_cpus(), opt.json);
  free(t);
  free(r);
  cleanup(&c);
  bench_info_free(&info);
  return rc ? 1 : 0;
}
