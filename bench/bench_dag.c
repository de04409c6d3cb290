/* bench_dag: the per-node cost of the schedulers on huge graphs of tiny ops.
 *
 * Four DAG families of rank-0 f32 values, traced through the public API
 * (graft_neg / graft_add / graft_sub / graft_mul of scalars), so that the
 * kernels do next to nothing and the time is the executor's:
 *   chain      x -> neg -> neg -> ... (n nodes, no parallelism)
 *   fanout     one source; blocks of W = 1000 independent negs of the source
 *              joined by a binary tree of adds and scaled back by -1/W (mul),
 *              whose result is the next block's source
 *   tree       L = 2^k leaves neg(x) / neg(y), summed by pairwise adds
 *              (built depth first, like a recursive reduction)
 *   wavefront  an s x s grid, node(i,j) = add(node(i-1,j), node(i,j-1)); the
 *              edges follow c(k) = cos(k pi / 3), the bounded solution of the
 *              recurrence, so every value is one of +-1, +-1/2 and exact
 * Each family runs at --nodes N (default 1,000,000) and N / 10.  For each
 * (family, size) one function per runtime traces the same host-side DAG
 * description once (the warm-up call, which also compiles), then every timed
 * rep calls each function once, rotating which goes first.  The runtimes are
 *   ws  x {1, 2} threads   work-stealing executor
 *   omp x {1, 2} threads   OpenMP tasks with depend clauses (the baseline)
 *                          (and both at --threads N, for a machine with more
 *                          cores)
 *   seq                    the sequential executor: a plain loop over the
 *                          same compiled nodes calling the same kernels
 * all in this process, with a grain far above one element so no node is
 * tiled.  The figure is ns per compute node (call time / compute nodes);
 * ratio_vs_seq and ratio_vs_omp divide it by seq's and by omp's at the same
 * thread count, and growth divides the cost per node at N by that at N / 10
 * (1 = the cost per node does not depend on the graph's size).
 * Every call's output is checked against the same DAG evaluated on the host.
 *
 * Usage: bench_dag [--json] [--nodes N] [--reps R] [--dag NAME]... [--threads N]
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROG "bench_dag"
#include "bench_common.h"
#include "graft.h"

#define DEFAULT_NODES 1000000
#define MIN_NODES 1000
#define MAX_NODES 20000000
#define MIN_REPS 5
#define DEFAULT_REPS 5
/* Reps at N / 10 are this many times --reps (those calls are 10x cheaper). */
#define SMALL_REPS_FACTOR 2
#define FANOUT_WIDTH 1000
/* A first call (trace and compile) slower than this is noted on stderr. */
#define SLOW_FIRST_CALL_S 5.0
/* Far above one element: every rank-0 node is one task. */
#define GRAIN ((int64_t)1 << 30)

/* ---- host-side DAG descriptions ---------------------------------------- */

typedef enum dag_op { DAG_NEG, DAG_ADD, DAG_SUB, DAG_MUL } dag_op;

/* The inputs every DAG receives; value ids 0..N_INPUTS-1 name them. */
enum { IN_X, IN_Y, IN_Z, N_INPUTS };
static const float INPUT_VALUES[N_INPUTS] = {1.0f, 0.5f, -1.0f / FANOUT_WIDTH};

typedef enum dag_kind { DAG_CHAIN, DAG_FANOUT, DAG_TREE, DAG_WAVEFRONT, N_DAGS } dag_kind;
static const char *const DAG_NAMES[N_DAGS] = {"chain", "fanout", "tree", "wavefront"};

/* Compute node k has value id N_INPUTS + k and reads value ids a[k] (and
 * b[k] unless op[k] is DAG_NEG), each smaller than its own. */
typedef struct dag {
  dag_kind kind;
  int64_t n, cap;
  uint8_t *op;
  int32_t *a, *b;
  int32_t out;     /* value id of the output */
  float expect;    /* the output, evaluated on the host */
} dag;

static void dag_free(dag *d) {
  free(d->op);
  free(d->a);
  free(d->b);
  memset(d, 0, sizeof *d);
}

static int dag_alloc(dag *d, dag_kind kind, int64_t cap) {
  memset(d, 0, sizeof *d);
  d->kind = kind;
  d->cap = cap;
  d->op = malloc((size_t)cap);
  d->a = malloc((size_t)cap * sizeof *d->a);
  d->b = malloc((size_t)cap * sizeof *d->b);
  if (d->op && d->a && d->b) return 0;
  dag_free(d);
  return -1;
}

/* Appends a node; returns its value id. */
static int32_t dag_add(dag *d, dag_op op, int32_t a, int32_t b) {
  int64_t k = d->n++;
  d->op[k] = (uint8_t)op;
  d->a[k] = a;
  d->b[k] = b;
  return (int32_t)(N_INPUTS + k);
}

static void build_chain(dag *d, int64_t n) {
  int32_t v = IN_X;
  for (int64_t k = 0; k < n; k++) v = dag_add(d, DAG_NEG, v, 0);
  d->out = v;
}

/* Pairwise adds of ids[0..len), level by level; returns the sum's id. */
static int32_t join_tree(dag *d, int32_t *ids, int64_t len) {
  while (len > 1) {
    int64_t m = 0;
    for (int64_t i = 0; i + 1 < len; i += 2) ids[m++] = dag_add(d, DAG_ADD, ids[i], ids[i + 1]);
    if (len % 2) ids[m++] = ids[len - 1];
    len = m;
  }
  return ids[0];
}

static int64_t fanout_width(int64_t n) {
  int64_t w = (n - 1) / 2;
  return w < FANOUT_WIDTH ? w : FANOUT_WIDTH;
}

static int64_t fanout_blocks(int64_t n) {
  int64_t per = 2 * fanout_width(n); /* W negs + (W - 1) adds + 1 mul */
  int64_t b = ((n - 1) + per / 2) / per;
  return b > 0 ? b : 1;
}

static int build_fanout(dag *d, int64_t n) {
  int64_t w = fanout_width(n), blocks = fanout_blocks(n);
  int32_t *ids = malloc((size_t)w * sizeof *ids);
  if (!ids) return -1;
  int32_t s = dag_add(d, DAG_NEG, IN_X, 0);
  for (int64_t blk = 0; blk < blocks; blk++) {
    for (int64_t i = 0; i < w; i++) ids[i] = dag_add(d, DAG_NEG, s, 0);
    /* sum = -w * s; times z = -1/FANOUT_WIDTH keeps the values near 1. */
    s = dag_add(d, DAG_MUL, join_tree(d, ids, w), IN_Z);
  }
  d->out = s;
  free(ids);
  return 0;
}

/* Leaves: the power of two nearest (in log) to (n + 1) / 2. */
static int64_t tree_leaves(int64_t n) {
  double half = (double)(n + 1) / 2.0;
  int64_t l = 2;
  while ((double)(l * 2) <= half * M_SQRT2) l *= 2;
  return l;
}

static int build_tree(dag *d, int64_t n) {
  int64_t leaves = tree_leaves(n);
  /* A binary counter of partial sums: stack[i] covers 2^level[i] leaves. */
  int32_t stack[64];
  int level[64], top = 0;
  for (int64_t i = 0; i < leaves; i++) {
    int32_t v = dag_add(d, DAG_NEG, i % 2 ? IN_Y : IN_X, 0);
    int lv = 0;
    while (top > 0 && level[top - 1] == lv) {
      v = dag_add(d, DAG_ADD, stack[--top], v);
      lv++;
    }
    stack[top] = v;
    level[top++] = lv;
  }
  d->out = stack[0];
  return top == 1 ? 0 : -1;
}

static int64_t wavefront_side(int64_t n) {
  int64_t s = (int64_t)llround(sqrt((double)n));
  return s < 2 ? 2 : s;
}

/* With c(k) = cos(k pi / 3): c(k - 1) + c(k + 1) = c(k), so node (i, j) =
 * c(i - j) solves the recurrence, and the edges c(j) = c(j - 1) - c(j - 2)
 * start from c(0) = x = 1 and c(1) = c(-1) = y = 1/2. */
static void build_wavefront(dag *d, int64_t n) {
  int64_t s = wavefront_side(n);
#define ID(i, j) ((int32_t)(N_INPUTS + (i) * s + (j)))
  for (int64_t i = 0; i < s; i++)
    for (int64_t j = 0; j < s; j++) {
      if (i == 0 && j == 0)
        dag_add(d, DAG_ADD, IN_Y, IN_Y);
      else if (i == 0 && j == 1)
        dag_add(d, DAG_SUB, ID(0, 0), IN_Y);
      else if (i == 1 && j == 0)
        dag_add(d, DAG_SUB, ID(0, 0), IN_Y);
      else if (i == 0)
        dag_add(d, DAG_SUB, ID(0, j - 1), ID(0, j - 2));
      else if (j == 0)
        dag_add(d, DAG_SUB, ID(i - 1, 0), ID(i - 2, 0));
      else
        dag_add(d, DAG_ADD, ID(i - 1, j), ID(i, j - 1));
    }
  d->out = ID(s - 1, s - 1);
#undef ID
}

static int64_t dag_capacity(dag_kind kind, int64_t n) {
  switch (kind) {
  case DAG_CHAIN: return n;
  case DAG_FANOUT: return 1 + fanout_blocks(n) * 2 * fanout_width(n);
  case DAG_TREE: return 2 * tree_leaves(n) - 1;
  case DAG_WAVEFRONT: return wavefront_side(n) * wavefront_side(n);
  case N_DAGS: break;
  }
  return 0;
}

/* The DAG evaluated in f32 in node order: the check of every call. */
static int dag_eval(dag *d) {
  float *v = malloc((size_t)(N_INPUTS + d->n) * sizeof *v);
  if (!v) return -1;
  memcpy(v, INPUT_VALUES, sizeof INPUT_VALUES);
  for (int64_t k = 0; k < d->n; k++) {
    float a = v[d->a[k]], b = d->op[k] == DAG_NEG ? 0.0f : v[d->b[k]], r = 0.0f;
    switch ((dag_op)d->op[k]) {
    case DAG_NEG: r = -a; break;
    case DAG_ADD: r = a + b; break;
    case DAG_SUB: r = a - b; break;
    case DAG_MUL: r = a * b; break;
    }
    v[N_INPUTS + k] = r;
  }
  d->expect = v[d->out];
  free(v);
  return 0;
}

static int dag_build(dag *d, dag_kind kind, int64_t n) {
  if (dag_alloc(d, kind, dag_capacity(kind, n))) return -1;
  int rc = 0;
  switch (kind) {
  case DAG_CHAIN: build_chain(d, n); break;
  case DAG_FANOUT: rc = build_fanout(d, n); break;
  case DAG_TREE: rc = build_tree(d, n); break;
  case DAG_WAVEFRONT: build_wavefront(d, n); break;
  case N_DAGS: rc = -1; break;
  }
  if (rc || d->n != d->cap || dag_eval(d) || !isfinite(d->expect)) {
    dag_free(d);
    return -1;
  }
  return 0;
}

/* The trace callback: replays the description through the public API. */
static graft_status trace_dag(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  const dag *d = user;
  if (n_in != N_INPUTS || n_out != 1)
    return graft_trace_fail(t, GRAFT_EINVAL, "bench_dag: expected %d inputs, 1 output",
                            N_INPUTS);
  graft_value **v = malloc((size_t)(N_INPUTS + d->n) * sizeof *v);
  if (!v) return graft_trace_fail(t, GRAFT_ENOMEM, "bench_dag: out of memory tracing");
  for (int i = 0; i < N_INPUTS; i++) v[i] = in[i];
  for (int64_t k = 0; k < d->n; k++) {
    graft_value *a = v[d->a[k]], *r = NULL;
    switch ((dag_op)d->op[k]) {
    case DAG_NEG: r = graft_neg(t, a); break;
    case DAG_ADD: r = graft_add(t, a, v[d->b[k]]); break;
    case DAG_SUB: r = graft_sub(t, a, v[d->b[k]]); break;
    case DAG_MUL: r = graft_mul(t, a, v[d->b[k]]); break;
    }
    v[N_INPUTS + k] = r;
  }
  out[0] = v[d->out];
  free(v);
  return GRAFT_OK;
}

/* ---- runtimes and experiments ------------------------------------------- */

typedef enum sched_kind { SCHED_WS, SCHED_OMP, SCHED_SEQ } sched_kind;
static const char *const SCHED_NAMES[] = {"ws", "omp", "seq"};

typedef struct config {
  sched_kind sched;
  int threads;
  graft_runtime *rt;
  char describe[256];
} config;

/* ws and omp at 1 and 2 threads, seq; --threads N adds ws and omp at N. */
#define MAX_CONFIGS 7
static config CONFIGS[MAX_CONFIGS] = {
    {SCHED_WS, 1, NULL, ""},  {SCHED_WS, 2, NULL, ""},  {SCHED_OMP, 1, NULL, ""},
    {SCHED_OMP, 2, NULL, ""}, {SCHED_SEQ, 1, NULL, ""},
};
static int n_configs = 5;

typedef struct options {
  int json;
  int64_t nodes;
  int reps;
  int threads;    /* --threads: ws and omp also at this count; 0: none */
  unsigned dag_mask;
} options;

/* One (family, size) measured on every config. */
typedef struct measurement {
  int64_t nodes; /* compute nodes */
  int reps;
  double ns_per_node[MAX_CONFIGS];
  double min_ns_per_node[MAX_CONFIGS]; /* fastest rep: the least disturbed */
  double compile_ms[MAX_CONFIGS], planner_ms[MAX_CONFIGS];
  int64_t arena_bytes[MAX_CONFIGS];
  int64_t live_nodes[MAX_CONFIGS], tiles[MAX_CONFIGS], steals[MAX_CONFIGS];
} measurement;

static int check_output(const dag *d, const graft_tensor *out, const char *sched, int threads) {
  float got = *(const float *)graft_tensor_data(out);
  float tol = 1e-5f * (fabsf(d->expect) > 1.0f ? fabsf(d->expect) : 1.0f);
  if (isfinite(got) && fabsf(got - d->expect) <= tol) return 0;
  fprintf(stderr, "bench_dag: %s (%" PRId64 " nodes) on %s/%d gave %.9g, expected %.9g\n",
          DAG_NAMES[d->kind], d->n, sched, threads, (double)got, (double)d->expect);
  return -1;
}

/* One (family, size) on every config: its functions and their operands. */
typedef struct measure_ctx {
  const dag *d;
  graft_tensor *const *in;
  graft_tensor *out;
  graft_function *f[MAX_CONFIGS];
} measure_ctx;

static int measure_call(void *ctx, int c) {
  measure_ctx *x = ctx;
  graft_tensor *out = x->out;
  return bench_report(graft_function_call(x->f[c], N_INPUTS, x->in, 1, &out),
                      "graft_function_call", x->f[c])
             ? -1
             : 1;
}

static int measure_check(void *ctx, int c) {
  measure_ctx *x = ctx;
  return check_output(x->d, x->out, SCHED_NAMES[CONFIGS[c].sched], CONFIGS[c].threads);
}

static int measure(const dag *d, int reps, graft_tensor *const *in, graft_tensor *out,
                   measurement *m) {
  measure_ctx x = {.d = d, .in = in, .out = out};
  double *t = malloc((size_t)(n_configs * reps) * sizeof *t);
  int rc = -1;
  if (!t) return bench_oom();
  memset(m, 0, sizeof *m);
  m->nodes = d->n;
  m->reps = reps;
  for (int c = 0; c < n_configs; c++) {
    const config *cf = &CONFIGS[c];
    if (bench_function_create(cf->rt, DAG_NAMES[d->kind], trace_dag, (void *)d, N_INPUTS, 1,
                              &x.f[c]))
      goto done;
    /* Warm-up: traces, compiles, and touches the arena. */
    double t0 = bench_now_us();
    if (measure_call(&x, c) < 0 || measure_check(&x, c)) goto done;
    double first_s = (bench_now_us() - t0) * 1e-6;
    if (first_s > SLOW_FIRST_CALL_S) /* so a long run does not look hung */
      fprintf(stderr, "bench_dag: note: the first call of %s (%" PRId64 " nodes) on %s/%d took "
              "%.1f s (trace and compile)\n",
              DAG_NAMES[d->kind], d->n, SCHED_NAMES[cf->sched], cf->threads, first_s);
    graft_plan_stats st;
    if (bench_report(graft_function_stats(x.f[c], &st), "graft_function_stats", x.f[c])) goto done;
    m->compile_ms[c] = st.compile_us * 1e-3;
    m->planner_ms[c] = st.planner_us * 1e-3;
    m->arena_bytes[c] = st.arena_bytes;
    m->live_nodes[c] = st.live_nodes;
    m->tiles[c] = st.tiles;
    if (st.tiles != d->n)
      fprintf(stderr, "bench_dag: warning: %s on %s/%d schedules %" PRId64
              " units for %" PRId64 " compute nodes\n",
              DAG_NAMES[d->kind], SCHED_NAMES[cf->sched], cf->threads, st.tiles, d->n);
  }
  if (bench_timed_reps(n_configs, reps, t, measure_call, measure_check, &x)) goto done;
  for (int c = 0; c < n_configs; c++) {
    graft_plan_stats st;
    if (bench_report(graft_function_stats(x.f[c], &st), "graft_function_stats", x.f[c])) goto done;
    m->steals[c] = st.steals;
    bench_warn_traced(x.f[c], DAG_NAMES[d->kind]);
    double min;
    m->ns_per_node[c] = bench_median_min(&t[c * reps], reps, &min) * 1e3 / (double)d->n;
    m->min_ns_per_node[c] = min * 1e3 / (double)d->n;
  }
  rc = 0;
done:
  for (int c = 0; c < n_configs; c++) graft_function_destroy(x.f[c]);
  free(t);
  return rc;
}

static int config_index(sched_kind s, int threads) {
  for (int c = 0; c < n_configs; c++)
    if (CONFIGS[c].sched == s && CONFIGS[c].threads == threads) return c;
  return -1;
}

/* Prints the rows of one (family, size); small is the N / 10 measurement
 * for the growth column, or NULL. */
static void print_rows(const options *opt, dag_kind kind, const measurement *m,
                       const measurement *small, long nproc) {
  int seq = config_index(SCHED_SEQ, 1);
  double seq_ns = m->ns_per_node[seq];
  for (int c = 0; c < n_configs; c++) {
    const config *cf = &CONFIGS[c];
    int omp = config_index(SCHED_OMP, cf->threads);
    double ns = m->ns_per_node[c];
    double vs_seq = ns / seq_ns;
    double vs_omp = cf->sched != SCHED_SEQ && omp >= 0 ? ns / m->ns_per_node[omp] : NAN;
    double growth = small ? ns / small->ns_per_node[c] : NAN;
    int over = cf->threads > nproc;
    if (opt->json) {
      printf("{\"type\":\"row\",\"name\":\"%s\",\"nodes\":%" PRId64 ",\"sched\":\"%s\","
             "\"threads\":%d,\"oversubscribed\":%s,\"reps\":%d,\"median_ns_per_node\":%.3f,"
             "\"min_ns_per_node\":%.3f,\"median_ms_per_call\":%.4f,\"seq_ns_per_node\":%.3f,"
             "\"ratio_vs_seq\":%.4f",
             DAG_NAMES[kind], m->nodes, SCHED_NAMES[cf->sched], cf->threads,
             over ? "true" : "false", m->reps, ns, m->min_ns_per_node[c],
             ns * (double)m->nodes * 1e-6, seq_ns, vs_seq);
      bench_json_num("ratio_vs_omp", vs_omp, "%.4f");
      bench_json_num("growth", growth, "%.4f");
      if (!isnan(growth)) printf(",\"growth_from_nodes\":%" PRId64, small->nodes);
      printf(",\"live_nodes\":%" PRId64 ",\"tiles\":%" PRId64 ",\"steals\":%" PRId64
             ",\"compile_ms\":%.2f,\"planner_ms\":%.2f,\"arena_bytes\":%" PRId64 "}\n",
             m->live_nodes[c], m->tiles[c], m->steals[c], m->compile_ms[c], m->planner_ms[c],
             m->arena_bytes[c]);
    } else {
      char thr[16], vo[16], gr[16];
      snprintf(thr, sizeof thr, "%d%s", cf->threads, over ? "*" : "");
      printf("%-10s %8" PRId64 " %-5s %7s %4d %18.2f %15.2f %12.3f %12s %7s %15.2f %9" PRId64
             " %10.0f %10.0f %9.0f\n",
             DAG_NAMES[kind], m->nodes, SCHED_NAMES[cf->sched], thr, m->reps, ns, seq_ns, vs_seq,
             bench_fmt_num(vo, sizeof vo, "%.3f", vs_omp),
             bench_fmt_num(gr, sizeof gr, "%.3f", growth), m->min_ns_per_node[c], m->steals[c],
             m->compile_ms[c], m->planner_ms[c], (double)m->arena_bytes[c] / 1024.0);
    }
  }
  fflush(stdout);
}

static void print_header(const bench_info *info, const options *opt) {
  bench_kv extra[MAX_CONFIGS + 1];
  char keys[MAX_CONFIGS][32];
  char grain[32];
  snprintf(grain, sizeof grain, "%" PRId64, (int64_t)GRAIN);
  for (int c = 0; c < n_configs; c++)
    extra[c] = bench_runtime_kv(keys[c], sizeof keys[c], SCHED_NAMES[CONFIGS[c].sched],
                                CONFIGS[c].threads, CONFIGS[c].describe);
  extra[n_configs] = (bench_kv){"grain", grain};
  bench_header_print(info, "bench_dag",
                     "ns per node of ws, omp and seq on ~N-node DAGs of rank-0 f32 ops", extra,
                     n_configs + 1, opt->json);
  if (opt->json) return;
  printf("# median_ns_per_node = median call time / compute nodes (after a warm-up call that\n"
         "# traces and compiles); ratio_vs_seq, ratio_vs_omp: over seq and over omp at the same\n"
         "# thread count; growth: ns per node at this size / at the size 10x smaller;\n"
         "# threads marked * exceed the CPUs of this process; min_ns_per_node: fastest rep;\n"
         "# steals: ws, last call; compile_ms: plan compilation, planner_ms: of which the\n"
         "# memory planner (informational); arena_kib: the plan's arena (one thread packs\n"
         "# scalars 4 to a cache line, several give each its own line)\n");
  printf("# %-8s %8s %-5s %7s %4s %18s %15s %12s %12s %7s %15s %9s %10s %10s %9s\n", "name",
         "nodes", "sched", "threads", "reps", "median_ns_per_node", "seq_ns_per_node",
         "ratio_vs_seq", "ratio_vs_omp", "growth", "min_ns_per_node", "steals", "compile_ms",
         "planner_ms", "arena_kib");
}

/* ---- command line -------------------------------------------------------- */

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_dag [--json] [--nodes N] [--reps R] [--dag NAME]... [--threads N]\n"
          "  --json       one JSON object per line (a header, then one per row)\n"
          "  --nodes N    nodes of the large graphs (%d..%d, default %d); every family\n"
          "               also runs at N / 10 for the growth column\n"
          "  --reps R     timed calls per config at N (>= %d, default %d); N / 10 gets %dx\n"
          "  --dag NAME   chain, fanout, tree or wavefront; repeatable (default: all)\n"
          "  --threads N  also ws and omp at N threads (3..%d)\n",
          MIN_NODES, MAX_NODES, DEFAULT_NODES, MIN_REPS, DEFAULT_REPS, SMALL_REPS_FACTOR,
          BENCH_MAX_THREADS);
}

/* --nodes, --dag and --threads (bench_parse_args). */
static int own_option(void *ctx, const char *arg, const char *val) {
  options *opt = ctx;
  if (strcmp(arg, "--threads") == 0 && val) return bench_opt_threads(val, &opt->threads);
  if (strcmp(arg, "--nodes") == 0 && val) {
    char *end;
    long long n = strtoll(val, &end, 10);
    if (*end || n < MIN_NODES || n > MAX_NODES) {
      fprintf(stderr, "bench_dag: --nodes needs an integer in %d..%d\n", MIN_NODES, MAX_NODES);
      return -1;
    }
    opt->nodes = n;
    return 2;
  }
  if (strcmp(arg, "--dag") == 0 && val) {
    int k = 0;
    while (k < N_DAGS && strcmp(val, DAG_NAMES[k]) != 0) k++;
    if (k == N_DAGS) {
      fprintf(stderr, "bench_dag: unknown --dag '%s' (chain, fanout, tree, wavefront)\n", val);
      return -1;
    }
    opt->dag_mask |= 1u << k;
    return 2;
  }
  return 0;
}

static int parse_args(int argc, char **argv, options *opt) {
  memset(opt, 0, sizeof *opt);
  opt->nodes = DEFAULT_NODES;
  opt->reps = DEFAULT_REPS;
  if (bench_parse_args(argc, argv, &opt->json, &opt->reps, MIN_REPS, BENCH_MAX_REPS, usage,
                       own_option, opt))
    return -1;
  if (!opt->dag_mask) opt->dag_mask = (1u << N_DAGS) - 1;
  if (opt->threads) {
    CONFIGS[n_configs++] = (config){SCHED_WS, opt->threads, NULL, ""};
    CONFIGS[n_configs++] = (config){SCHED_OMP, opt->threads, NULL, ""};
  }
  return 0;
}

static int create_runtimes(void) {
  for (int c = 0; c < n_configs; c++)
    if (bench_runtime_create(SCHED_NAMES[CONFIGS[c].sched], CONFIGS[c].threads, GRAIN, NULL,
                             &CONFIGS[c].rt, CONFIGS[c].describe, sizeof CONFIGS[c].describe))
      return -1;
  return 0;
}

int main(int argc, char **argv) {
  options opt;
  if (parse_args(argc, argv, &opt)) return 2;
  bench_info info;
  if (bench_info_collect(&info, 0)) return 1;
  int failures = 0;
  graft_tensor *in[N_INPUTS] = {NULL}, *out = NULL;
  if (create_runtimes()) {
    failures++;
    goto done;
  }
  for (int i = 0; i < N_INPUTS; i++)
    if (bench_report(graft_tensor_create(GRAFT_F32, 0, NULL, &in[i]), "graft_tensor_create", NULL)) {
      failures++;
      goto done;
    } else {
      *(float *)graft_tensor_data(in[i]) = INPUT_VALUES[i];
    }
  if (bench_report(graft_tensor_create(GRAFT_F32, 0, NULL, &out), "graft_tensor_create", NULL)) {
    failures++;
    goto done;
  }
  print_header(&info, &opt);
  fflush(stdout);
  long cpus_before = bench_thread_cpus();

  for (int k = 0; k < N_DAGS; k++) {
    if (!(opt.dag_mask & (1u << k))) continue;
    measurement ms[2];
    int64_t sizes[2] = {opt.nodes / 10, opt.nodes};
    int ok = 1;
    for (int s = 0; s < 2 && ok; s++) {
      dag d;
      if (dag_build(&d, (dag_kind)k, sizes[s])) {
        fprintf(stderr, "bench_dag: building %s (%" PRId64 " nodes) failed\n", DAG_NAMES[k],
                sizes[s]);
        ok = 0;
        break;
      }
      int reps = s == 0 ? SMALL_REPS_FACTOR * opt.reps : opt.reps;
      ok = measure(&d, reps, in, out, &ms[s]) == 0;
      dag_free(&d);
      if (ok) print_rows(&opt, (dag_kind)k, &ms[s], s ? &ms[0] : NULL, info.nproc);
    }
    if (!ok) failures++;
  }
  bench_footer_print(cpus_before, bench_thread_cpus(), opt.json);

done:
  graft_tensor_destroy(out);
  for (int i = 0; i < N_INPUTS; i++) graft_tensor_destroy(in[i]);
  for (int c = 0; c < n_configs; c++) graft_runtime_destroy(CONFIGS[c].rt);
  bench_info_free(&info);
  if (failures) fprintf(stderr, "bench_dag: %d experiment(s) failed\n", failures);
  return failures ? 1 : 0;
}
