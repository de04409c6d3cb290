/* bench_memory: what the static memory planner saves, and what it costs.
 *
 * Each graph is traced and compiled by one call (seq, 1 thread: the plan
 * does not depend on the executor); the figures come from
 * graft_function_stats after that call:
 *   naive_MiB   one 64-byte-aligned buffer per intermediate value (no reuse)
 *   load_MiB    LOAD, the most bytes live at once along the compile order:
 *               no correct plan's arena is smaller
 *   bound_MiB   the largest total size of buffers no two of which the DAG
 *               orders (every touch of one before the other's writer): no
 *               parallel-safe arena with these buffers is smaller (>= LOAD);
 *               exact (a max flow) unless the graph is pathological
 *   arena_MiB   the planner's arena
 *   planner_us_per_node  the planner's time (median over --reps compiles of
 *               fresh functions) / live nodes
 * The graphs:
 *   mlp_infer      x [256,784] f32 -> 1024 -> 1024 -> 10, relu layers, softmax
 *   mlp_train_fwd  the same forward plus the softmax cross-entropy loss
 *                  (labels [256] i32)
 *   mlp_train_step the full training step: loss, graft_gradients of the six
 *                  variables, and the SGD update (graft_assign_sub)
 *   branches16     16 parallel 2-layer MLPs (x [64,256], 256 wide), summed
 *   chain1000      1,000 elementwise ops on [256,256] f32
 *   chain10000     10,000 of them (planner time per value at scale)
 *   rnn_bptt<T>    an RNN unrolled T steps, h = tanh(h W + x) over h [16, 64]
 *                  f32, the loss mean(h_T^2), its gradient by W (back-
 *                  propagation through time) and an SGD update: T = 2000
 *                  is above the exact planner's 16,384 values, so the
 *                  local planner (bounded ancestor search) plans it
 *   random<N>/s<S> seeded random DAGs of about N ops over [64, w] f32 values
 *                  (w in 64, 128, 256): elementwise unary and binary ops,
 *                  matmuls by weight variables, row reductions broadcast
 *                  back, softmax; operands mostly recent values, some from
 *                  far back (long lifetimes)
 * Weights are variables (outside the arena, like inputs and outputs).  A
 * second table reports the planner's time per value for the graphs of
 * 10,000 values and more against the target of 20 us per value; a third
 * runs the local planner (what plans above 16,384 values get) on the graphs
 * the exact planner plans, and gives its arena over the exact one's.
 *
 * Usage: bench_memory [--json] [--reps N]
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROG "bench_memory"
#include "bench_common.h"
#include "graft.h"
#include "sched/sched.h" /* graft__function_plan: compute values per plan */

#define DEFAULT_REPS 5
#define MIN_REPS 1
#define MAX_REPS 1000
#define TARGET_US_PER_VALUE 20.0

typedef bench_opts options;

/* ---- weights --------------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

/* Uniform in [0, 1). */
static double uniform(void) { return (double)(bench_xorshift(&g_rng) >> 11) / 9007199254740992.0; }

/* A tensor [rank, shape] of f32 uniform in [-scale, scale) (i32: [0, scale)). */
static graft_tensor *tensor_rand(graft_dtype dt, int rank, const int64_t *shape, double scale) {
  graft_tensor *t = NULL;
  if (graft_tensor_create(dt, rank, shape, &t)) return NULL;
  int64_t n = graft_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    if (dt == GRAFT_I32) ((int32_t *)graft_tensor_data(t))[i] = (int32_t)(uniform() * scale);
    else ((float *)graft_tensor_data(t))[i] = (float)(scale * (2 * uniform() - 1));
  }
  return t;
}

/* A weight variable [rows, cols] (cols 0: a vector [rows]). */
static graft_variable *weight(const char *name, int64_t rows, int64_t cols) {
  int64_t d[2] = {rows, cols};
  int rank = cols ? 2 : 1;
  graft_tensor *t = tensor_rand(GRAFT_F32, rank, d, 1.0 / sqrt((double)rows));
  graft_variable *v = NULL;
  if (t) bench_variable_f32(name, rows, cols, graft_tensor_data(t), 0, &v);
  graft_tensor_destroy(t);
  return v;
}

/* ---- the graphs ------------------------------------------------------------ */

enum { MLP_B = 256, MLP_I = 784, MLP_H = 1024, MLP_O = 10 };

typedef struct mlp {
  graft_variable *w[3], *b[3];
  int loss;  /* also the cross-entropy loss (input 1: labels) */
} mlp;

static graft_status mlp_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const mlp *m = user;
  graft_value *h = in[0];
  for (int l = 0; l < 3; l++) {
    h = graft_add(t, graft_matmul(t, h, graft_read(t, m->w[l]), 0), graft_read(t, m->b[l]));
    if (l < 2) h = graft_relu(t, h);
  }
  if (m->loss < 2) {
    out[0] = graft_softmax(t, h, -1);
    if (m->loss) out[1] = graft_softmax_cross_entropy(t, h, in[1]);
    return GRAFT_OK;
  }
  /* The training step: loss, gradients of the 6 variables, SGD update. */
  graft_value *loss = graft_softmax_cross_entropy(t, h, in[1]);
  graft_value *vars[6], *grads[6];
  for (int l = 0; l < 3; l++) {
    vars[2 * l] = graft_read(t, m->w[l]);
    vars[2 * l + 1] = graft_read(t, m->b[l]);
  }
  graft_status st = graft_gradients(t, 1, &loss, NULL, 6, vars, GRAFT_UNCONNECTED_ZERO, grads);
  if (st) return st;
  graft_value *lr = graft_scalar(t, GRAFT_F32, 0.05);
  for (int l = 0; l < 3; l++) {
    graft_assign_sub(t, m->w[l], graft_mul(t, lr, grads[2 * l]));
    graft_assign_sub(t, m->b[l], graft_mul(t, lr, grads[2 * l + 1]));
  }
  out[0] = loss;
  return GRAFT_OK;
}

enum { BR_N = 16, BR_B = 64, BR_W = 256 };

typedef struct branches {
  graft_variable *w1[BR_N], *b1[BR_N], *w2[BR_N], *b2[BR_N];
} branches;

static graft_status branches_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const branches *m = user;
  graft_value *y[BR_N];
  for (int b = 0; b < BR_N; b++) {
    graft_value *h = graft_relu(t, graft_add(t, graft_matmul(t, in[0], graft_read(t, m->w1[b]), 0),
                                             graft_read(t, m->b1[b])));
    y[b] = graft_add(t, graft_matmul(t, h, graft_read(t, m->w2[b]), 0), graft_read(t, m->b2[b]));
  }
  for (int n = BR_N; n > 1; n /= 2)
    for (int i = 0; i < n / 2; i++) y[i] = graft_add(t, y[2 * i], y[2 * i + 1]);
  out[0] = y[0];
  return GRAFT_OK;
}

static graft_status chain_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  int n = *(const int *)user;
  graft_value *v = in[0];
  for (int k = 0; k < n; k++) {
    switch (k % 5) {
    case 0: v = graft_tanh(t, v); break;
    case 1: v = graft_mul(t, v, in[0]); break;
    case 2: v = graft_sin(t, v); break;
    case 3: v = graft_add(t, in[0], v); break;
    default: v = graft_neg(t, v); break;
    }
  }
  out[0] = v;
  return GRAFT_OK;
}

typedef struct rnn {
  graft_variable *w;
  int steps;
} rnn;

static graft_status rnn_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const rnn *m = user;
  graft_value *w = graft_read(t, m->w), *h = in[0];
  for (int k = 0; k < m->steps; k++) h = graft_tanh(t, graft_add(t, graft_matmul(t, h, w, 0), in[0]));
  graft_value *loss = graft_reduce_mean(t, graft_mul(t, h, h), 0, NULL, 0), *g;
  graft_status st = graft_gradients(t, 1, &loss, NULL, 1, &w, GRAFT_UNCONNECTED_ZERO, &g);
  if (st) return st;
  graft_assign_sub(t, m->w, graft_mul(t, graft_scalar(t, GRAFT_F32, 0.01), g));
  out[0] = loss;
  return GRAFT_OK;
}

/* A random DAG, described on the host and replayed by the trace. */
enum { RD_ROWS = 64, RD_WIDTHS = 3, RD_OUTS = 4 };
static const int64_t RD_W[RD_WIDTHS] = {64, 128, 256};

typedef enum rd_op { RD_UNARY, RD_BINARY, RD_MATMUL, RD_ROWMEAN, RD_SOFTMAX } rd_op;

typedef struct rd_node {
  rd_op op;
  int kind;       /* which unary / binary op */
  int32_t a, b;   /* operand values (-1: the input) */
  int w;          /* width index of the result */
} rd_node;

typedef struct rdag {
  int n;
  rd_node *nodes;
  int32_t outs[RD_OUTS];
  graft_variable *w[RD_WIDTHS][RD_WIDTHS];
} rdag;

static uint64_t rd_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}
static int rd_int(uint64_t *s, int lo, int hi) { return lo + (int)(rd_next(s) % (uint64_t)(hi - lo + 1)); }

/* An operand of width w (or any width when w < 0): half of the time the
 * newest value nothing reads yet (so few values are dead ends and pruned),
 * else a recent one, now and then one from far back (a long lifetime); -1
 * (the input, width 0) when none fits. */
static int32_t rd_pick(const rdag *d, const uint8_t *used, int upto, int w, uint64_t *s) {
  if (upto > 0 && rd_int(s, 0, 99) < 50)
    for (int k = upto - 1; k >= 0 && k >= upto - 64; k--)
      if (!used[k] && (w < 0 || d->nodes[k].w == w)) return k;
  for (int tries = 0; tries < 16 && upto > 0; tries++) {
    int k = rd_int(s, 0, 99) < 75 ? rd_int(s, upto > 8 ? upto - 8 : 0, upto - 1) : rd_int(s, 0, upto - 1);
    if (w < 0 || d->nodes[k].w == w) return k;
  }
  return -1;
}

static void rd_describe(rdag *d, int n, uint64_t seed, uint8_t *used) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull | 1;
  memset(used, 0, (size_t)n);
  for (int i = 0; i < n; i++) {
    rd_node *nd = &d->nodes[i];
    int r = rd_int(&s, 0, 99);
    nd->b = -1;
    nd->a = rd_pick(d, used, i, -1, &s);
    int wa = nd->a < 0 ? 0 : d->nodes[nd->a].w;
    nd->w = wa;
    if (r < 40) {
      nd->op = RD_UNARY;
      nd->kind = rd_int(&s, 0, 4);
    } else if (r < 72) {
      nd->op = RD_BINARY;
      nd->kind = rd_int(&s, 0, 2);
      nd->b = rd_pick(d, used, i, wa, &s);
      if (nd->b < 0 && wa != 0) nd->b = nd->a; /* nothing else of that width: a op a */
    } else if (r < 85) {
      nd->op = RD_MATMUL;
      nd->w = rd_int(&s, 0, RD_WIDTHS - 1);
    } else if (r < 95) {
      nd->op = RD_ROWMEAN; /* mean over the row, added back to another value */
      nd->b = rd_pick(d, used, i, -1, &s);
      nd->w = nd->b < 0 ? 0 : d->nodes[nd->b].w;
    } else {
      nd->op = RD_SOFTMAX;
    }
    if (nd->a >= 0) used[nd->a] = 1;
    if (nd->b >= 0) used[nd->b] = 1;
  }
}

/* Outputs of the first n values: the newest and three from the second half. */
static void rd_outputs(rdag *d, int n, uint64_t seed) {
  uint64_t s = (seed + 0x51ed) * 0x2545F4914F6CDD1Dull | 1;
  d->n = n;
  d->outs[0] = n - 1;
  for (int k = 1; k < RD_OUTS; k++) d->outs[k] = rd_int(&s, n / 2, n - 1);
}

/* Compute ops the outputs depend on (what survives pruning): matmuls
 * (with their tanh) and row means (with their add) are two. */
static int rd_live(const rdag *d, uint8_t *live) {
  memset(live, 0, (size_t)d->n);
  for (int k = 0; k < RD_OUTS; k++) live[d->outs[k]] = 1;
  int count = 0;
  for (int i = d->n - 1; i >= 0; i--) {
    if (!live[i]) continue;
    count += d->nodes[i].op == RD_MATMUL || d->nodes[i].op == RD_ROWMEAN ? 2 : 1;
    if (d->nodes[i].a >= 0) live[d->nodes[i].a] = 1;
    if (d->nodes[i].b >= 0) live[d->nodes[i].b] = 1;
  }
  return count;
}

/* A DAG of about `values` compute values that outputs depend on. */
static int rd_build(rdag *d, int values, uint64_t seed) {
  memset(d, 0, sizeof *d);
  /* Node i depends only on nodes before it: describe 4x the target once,
   * then keep the shortest prefix whose outputs depend on enough ops. */
  int cap = 4 * values;
  d->nodes = calloc((size_t)cap, sizeof *d->nodes);
  uint8_t *scratch = malloc((size_t)cap);
  if (!d->nodes || !scratch) {
    free(scratch);
    return -1;
  }
  rd_describe(d, cap, seed, scratch);
  int step = values / 200 > 0 ? values / 200 : 1, n = values / 2;
  for (; n < cap; n += step) {
    rd_outputs(d, n, seed);
    if (rd_live(d, scratch) >= values) break;
  }
  rd_outputs(d, n < cap ? n : cap, seed);
  free(scratch);
  char name[16];
  for (int a = 0; a < RD_WIDTHS; a++)
    for (int b = 0; b < RD_WIDTHS; b++) {
      snprintf(name, sizeof name, "w%d%d", a, b);
      d->w[a][b] = weight(name, RD_W[a], RD_W[b]);
      if (!d->w[a][b]) return -1;
    }
  return 0;
}

static void rd_free(rdag *d) {
  for (int a = 0; a < RD_WIDTHS; a++)
    for (int b = 0; b < RD_WIDTHS; b++) graft_variable_destroy(d->w[a][b]);
  free(d->nodes);
  memset(d, 0, sizeof *d);
}

static graft_status rd_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in;
  const rdag *d = user;
  graft_value **v = malloc((size_t)d->n * sizeof *v);
  if (!v) return GRAFT_ENOMEM;
#define RD_VAL(k) ((k) < 0 ? in[0] : v[k])
  for (int i = 0; i < d->n; i++) {
    const rd_node *nd = &d->nodes[i];
    graft_value *a = RD_VAL(nd->a);
    switch (nd->op) {
    case RD_UNARY: {
      graft_value *(*const f[5])(graft_trace *, graft_value *) = {graft_tanh, graft_sin, graft_relu,
                                                                 graft_neg, graft_sigmoid};
      v[i] = f[nd->kind](t, a);
      break;
    }
    case RD_BINARY: {
      graft_value *(*const f[3])(graft_trace *, graft_value *, graft_value *) = {graft_add, graft_mul,
                                                                                graft_maximum};
      v[i] = f[nd->kind](t, a, RD_VAL(nd->b));
      break;
    }
    case RD_MATMUL: {
      int wa = nd->a < 0 ? 0 : d->nodes[nd->a].w;
      v[i] = graft_tanh(t, graft_matmul(t, a, graft_read(t, d->w[wa][nd->w]), 0));
      break;
    }
    case RD_ROWMEAN: {
      const int ax[1] = {1};
      v[i] = graft_add(t, RD_VAL(nd->b), graft_reduce_mean(t, a, 1, ax, 1));
      break;
    }
    default: v[i] = graft_softmax(t, a, -1); break;
    }
  }
  for (int k = 0; k < n_out; k++) out[k] = v[d->outs[k]];
#undef RD_VAL
  free(v);
  return GRAFT_OK;
}

/* ---- measuring -------------------------------------------------------------- */

typedef struct row {
  char graph[32];
  int64_t nodes, values;
  graft_plan_stats st;
  int64_t local_arena;  /* the local planner's arena on the same graph (exact plans) */
  double local_us;      /* ... and its time */
  double planner_us;  /* median */
  int reps;
} row;

/* Compile fn reps times (one call of a fresh function each) and keep the
 * stats of the first and the median planner time. */
static int measure(graft_runtime *rt, const char *name, graft_trace_fn fn, void *user, int n_in,
                   graft_tensor **in, int n_out, int reps, row *r) {
  memset(r, 0, sizeof *r);
  snprintf(r->graph, sizeof r->graph, "%s", name);
  double *us = calloc((size_t)reps, sizeof *us);
  if (!us) return -1;
  for (int k = 0; k < reps; k++) {
    graft_function *f = NULL;
    graft_tensor *out[RD_OUTS] = {NULL};
    graft_status st = GRAFT_OK;
    if (bench_function_create(rt, name, fn, user, n_in, n_out, &f) ||
        (st = graft_function_call(f, n_in, in, n_out, out)) != GRAFT_OK) {
      if (st != GRAFT_OK)
        fprintf(stderr, "bench_memory: %s: %s: %s\n", name, graft_status_name(st),
                graft_function_errmsg(f));
      graft_function_destroy(f);
      free(us);
      return -1;
    }
    graft_plan_stats ps;
    graft_function_stats(f, &ps);
    us[k] = ps.planner_us;
    if (k == 0) {
      r->st = ps;
      r->nodes = ps.live_nodes;
      r->values = graft__function_plan(f)->n_order;
    }
    for (int i = 0; i < n_out; i++) graft_tensor_destroy(out[i]);
    graft_function_destroy(f);
  }
  /* The local planner (the one for plans above 16,384 values) on the same
   * graph, forced by the planner's size limit (a test and bench knob). */
  r->local_arena = -1;
  if (r->st.planner_exact) {
    graft_function *f = NULL;
    graft_tensor *out[RD_OUTS] = {NULL};
    int saved = graft__memplan_max_exact;
    graft__memplan_max_exact = 0;
    if (bench_function_create(rt, name, fn, user, n_in, n_out, &f) == 0 &&
        graft_function_call(f, n_in, in, n_out, out) == GRAFT_OK) {
      graft_plan_stats ps;
      graft_function_stats(f, &ps);
      r->local_arena = ps.arena_bytes;
      r->local_us = ps.planner_us;
    }
    graft__memplan_max_exact = saved;
    for (int i = 0; i < n_out; i++) graft_tensor_destroy(out[i]);
    graft_function_destroy(f);
  }
  r->planner_us = bench_median(us, reps);
  r->reps = reps;
  free(us);
  return 0;
}

static double ratio(int64_t a, int64_t b) { return b ? (double)a / (double)b : 0.0; }

static void print_row(const options *opt, const row *r) {
  const graft_plan_stats *s = &r->st;
  double per_node = r->nodes ? r->planner_us / (double)r->nodes : 0.0;
  if (opt->json) {
    printf("{\"type\":\"row\",\"graph\":");
    bench_json_str(r->graph);
    printf(",\"nodes\":%" PRId64 ",\"values\":%" PRId64 ",\"naive_bytes\":%" PRId64
           ",\"load_bytes\":%" PRId64 ",\"bound_bytes\":%" PRId64 ",\"arena_bytes\":%" PRId64
           ",\"inplace\":%" PRId64 ",\"planner_exact\":%d,\"arena_over_load\":%.4f"
           ",\"arena_over_bound\":%.4f,\"planner_us\":%.1f,\"planner_us_per_node\":%.3f,\"reps\":%d}\n",
           r->nodes, r->values, s->naive_bytes, s->load_bytes, s->bound_bytes, s->arena_bytes,
           s->inplace, s->planner_exact, ratio(s->arena_bytes, s->load_bytes),
           ratio(s->arena_bytes, s->bound_bytes), r->planner_us, per_node, r->reps);
    return;
  }
  /* Without the exact planner the bound is weak (LOAD or one level): "-". */
  char bound[32] = "-", over[32] = "-";
  if (s->planner_exact) {
    snprintf(bound, sizeof bound, "%.3f", bench_mib(s->bound_bytes));
    snprintf(over, sizeof over, "%.3f", ratio(s->arena_bytes, s->bound_bytes));
  }
  printf("  %-14s %6" PRId64 " %10.3f %9.3f %9s %9.3f %10.3f %11s %19.3f\n", r->graph, r->nodes,
         bench_mib(s->naive_bytes), bench_mib(s->load_bytes), bound, bench_mib(s->arena_bytes),
         ratio(s->arena_bytes, s->load_bytes), over, per_node);
}

static void print_header(const bench_info *info, const options *opt, const char *rt_desc) {
  char reps[96];
  snprintf(reps, sizeof reps, "%d compiles per graph (median planner time)", opt->reps);
  bench_kv extra[] = {{"runtime", rt_desc}, {"reps", reps}};
  bench_header_print(info, "bench_memory",
                     "static memory planner: arena vs naive, LOAD and the parallel-safe bound",
                     extra, 2, opt->json);
  if (opt->json) return;
  printf("# note: mlp_train_fwd is the forward graph of a training step and its loss;\n"
         "# mlp_train_step adds graft_gradients of the 6 variables and the SGD update\n");
  printf("# MiB = 2^20 bytes; arena/load and arena/bound: 1 = the planner meets the bound;\n"
         "# bound '-': a plan above the exact planner's 16,384 values (planned by the local\n"
         "# planner; its stats bound is only the larger of LOAD and the heaviest topological\n"
         "# level); planner_us_per_node: median planner time / live nodes\n");
  printf("# %-14s %6s %10s %9s %9s %9s %10s %11s %19s\n", "graph", "nodes", "naive_MiB", "load_MiB",
         "bound_MiB", "arena_MiB", "arena/load", "arena/bound", "planner_us_per_node");
}

static void usage(FILE *to) { fprintf(to, "usage: bench_memory [--json] [--reps N]\n"); }


#define MAX_ROWS 20

int main(int argc, char **argv) {
  options opt;
  if (bench_opts_parse(argc, argv, &opt, MIN_REPS, DEFAULT_REPS, MAX_REPS, usage)) return 2;
  bench_info info;
  if (bench_info_collect(&info, 0)) return 1;
  graft_runtime *rt = NULL;
  char rt_desc[256];
  if (bench_runtime_create("seq", 1, 0, NULL, &rt, rt_desc, sizeof rt_desc)) {
    bench_info_free(&info);
    return 1;
  }
  print_header(&info, &opt, rt_desc);
  fflush(stdout);

  row rows[MAX_ROWS];
  int n_rows = 0, failures = 0;

  /* MLPs */
  mlp m = {{NULL}, {NULL}, 0};
  const int64_t dims[3][2] = {{MLP_I, MLP_H}, {MLP_H, MLP_H}, {MLP_H, MLP_O}};
  for (int l = 0; l < 3; l++) {
    m.w[l] = weight("w", dims[l][0], dims[l][1]);
    m.b[l] = weight("b", dims[l][1], 0);
  }
  const int64_t xs[2] = {MLP_B, MLP_I}, ls[1] = {MLP_B};
  graft_tensor *mlp_in[2] = {tensor_rand(GRAFT_F32, 2, xs, 1.0), tensor_rand(GRAFT_I32, 1, ls, MLP_O)};
  if (measure(rt, "mlp_infer", mlp_trace, &m, 1, mlp_in, 1, opt.reps, &rows[n_rows]) == 0)
    print_row(&opt, &rows[n_rows++]);
  else failures++;
  m.loss = 1;
  if (measure(rt, "mlp_train_fwd", mlp_trace, &m, 2, mlp_in, 2, opt.reps, &rows[n_rows]) == 0)
    print_row(&opt, &rows[n_rows++]);
  else failures++;
  m.loss = 2;
  if (measure(rt, "mlp_train_step", mlp_trace, &m, 2, mlp_in, 1, opt.reps, &rows[n_rows]) == 0)
    print_row(&opt, &rows[n_rows++]);
  else failures++;
  /* The same step with GRAFT_MEMORY=lanes:1: ordering edges along the plan
   * trade all parallelism for an arena at LOAD. */
  graft_runtime *rt_lanes = NULL;
  char lanes_desc[256];
  setenv("GRAFT_MEMORY", "lanes:1", 1);
  int lanes_rc = bench_runtime_create("seq", 1, 0, NULL, &rt_lanes, lanes_desc, sizeof lanes_desc);
  unsetenv("GRAFT_MEMORY");
  if (lanes_rc == 0 && measure(rt_lanes, "mlp_step_lanes1", mlp_trace, &m, 2, mlp_in, 1, opt.reps,
                               &rows[n_rows]) == 0)
    print_row(&opt, &rows[n_rows++]);
  else failures++;
  graft_runtime_destroy(rt_lanes);
  for (int l = 0; l < 3; l++) {
    graft_variable_destroy(m.w[l]);
    graft_variable_destroy(m.b[l]);
  }
  graft_tensor_destroy(mlp_in[0]);
  graft_tensor_destroy(mlp_in[1]);
  fflush(stdout);

  /* 16 branches */
  branches br;
  for (int b = 0; b < BR_N; b++) {
    br.w1[b] = weight("w1", BR_W, BR_W);
    br.b1[b] = weight("b1", BR_W, 0);
    br.w2[b] = weight("w2", BR_W, BR_W);
    br.b2[b] = weight("b2", BR_W, 0);
  }
  const int64_t bs[2] = {BR_B, BR_W};
  graft_tensor *bx = tensor_rand(GRAFT_F32, 2, bs, 1.0);
  if (measure(rt, "branches16", branches_trace, &br, 1, &bx, 1, opt.reps, &rows[n_rows]) == 0)
    print_row(&opt, &rows[n_rows++]);
  else failures++;
  for (int b = 0; b < BR_N; b++) {
    graft_variable_destroy(br.w1[b]);
    graft_variable_destroy(br.b1[b]);
    graft_variable_destroy(br.w2[b]);
    graft_variable_destroy(br.b2[b]);
  }
  graft_tensor_destroy(bx);
  fflush(stdout);

  /* chains */
  const int64_t cs[2] = {256, 256};
  graft_tensor *cx = tensor_rand(GRAFT_F32, 2, cs, 1.0);
  static const int chain_len[2] = {1000, 10000};
  for (int k = 0; k < 2; k++) {
    char name[32];
    snprintf(name, sizeof name, "chain%d", chain_len[k]);
    if (measure(rt, name, chain_trace, (void *)&chain_len[k], 1, &cx, 1, k ? (opt.reps + 1) / 2 : opt.reps,
                &rows[n_rows]) == 0)
      print_row(&opt, &rows[n_rows++]);
    else failures++;
    fflush(stdout);
  }
  graft_tensor_destroy(cx);

  /* an unrolled RNN's training step */
  rnn rn = {weight("w", 64, 64), 0};
  const int64_t hs[2] = {16, 64};
  graft_tensor *hx = tensor_rand(GRAFT_F32, 2, hs, 1.0);
  static const int rnn_steps[2] = {200, 2000};
  for (int k = 0; k < 2; k++) {
    char name[32];
    rn.steps = rnn_steps[k];
    snprintf(name, sizeof name, "rnn_bptt%d", rnn_steps[k]);
    if (measure(rt, name, rnn_trace, &rn, 1, &hx, 1, k ? (opt.reps + 1) / 2 : opt.reps, &rows[n_rows]) == 0)
      print_row(&opt, &rows[n_rows++]);
    else failures++;
    fflush(stdout);
  }
  graft_variable_destroy(rn.w);
  graft_tensor_destroy(hx);

  /* random DAGs */
  const int64_t rs[2] = {RD_ROWS, RD_W[0]};
  graft_tensor *rx = tensor_rand(GRAFT_F32, 2, rs, 1.0);
  static const int rd_sizes[2] = {500, 10000};
  for (int z = 0; z < 2; z++)
    for (uint64_t seed = 1; seed <= 3; seed++) {
      rdag d;
      char name[32];
      snprintf(name, sizeof name, "random%d/s%" PRIu64, rd_sizes[z], seed);
      if (rd_build(&d, rd_sizes[z], seed) ||
          measure(rt, name, rd_trace, &d, 1, &rx, RD_OUTS, z ? (opt.reps + 1) / 2 : opt.reps,
                  &rows[n_rows])) {
        failures++;
      } else {
        print_row(&opt, &rows[n_rows++]);
      }
      rd_free(&d);
      fflush(stdout);
    }
  graft_tensor_destroy(rx);

  /* Planner time per value from about 10,000 values on. */
  if (!opt.json)
    printf("#\n# planner time per value from ~10,000 values on (target <= %.0f us per value)\n"
           "# %-14s %6s %11s %12s %7s %s\n",
           TARGET_US_PER_VALUE, "graph", "values", "planner_us", "us_per_value", "exact", "target");
  for (int k = 0; k < n_rows; k++) {
    const row *r = &rows[k];
    if (r->values < 5000) continue;
    double per = r->planner_us / (double)r->values;
    if (opt.json)
      printf("{\"type\":\"planner_per_value\",\"graph\":\"%s\",\"values\":%" PRId64
             ",\"planner_us\":%.1f,\"us_per_value\":%.3f,\"planner_exact\":%d,\"target_us\":%.1f,"
             "\"meets_target\":%s}\n",
             r->graph, r->values, r->planner_us, per, r->st.planner_exact, TARGET_US_PER_VALUE,
             per <= TARGET_US_PER_VALUE ? "true" : "false");
    else
      printf("  %-14s %6" PRId64 " %11.0f %12.3f %7d %s\n", r->graph, r->values, r->planner_us, per,
             r->st.planner_exact, per <= TARGET_US_PER_VALUE ? "met" : "MISSED");
  }

  /* The local planner against the exact one on the same graphs. */
  if (!opt.json)
    printf("#\n# the local planner (bounded ancestor search; plans above 16,384 values get it) on\n"
           "# the graphs the exact planner plans: its arena over the exact planner's (1 = as good)\n"
           "# %-14s %10s %10s %10s %12s\n",
           "graph", "exact_MiB", "local_MiB", "local/exact", "local_us");
  for (int k = 0; k < n_rows; k++) {
    const row *r = &rows[k];
    if (r->local_arena < 0) continue;
    double q = ratio(r->local_arena, r->st.arena_bytes);
    if (opt.json)
      printf("{\"type\":\"local_planner\",\"graph\":\"%s\",\"exact_bytes\":%" PRId64
             ",\"local_bytes\":%" PRId64 ",\"local_over_exact\":%.4f,\"local_us\":%.1f}\n",
             r->graph, r->st.arena_bytes, r->local_arena, q, r->local_us);
    else
      printf("  %-14s %10.3f %10.3f %10.3f %12.0f\n", r->graph, bench_mib(r->st.arena_bytes),
             bench_mib(r->local_arena), q, r->local_us);
  }

  graft_runtime_destroy(rt);
  bench_info_free(&info);
  if (failures) fprintf(stderr, "bench_memory: %d experiment(s) failed\n", failures);
  return failures ? 1 : 0;
}
