/* bench_matmul: the cost of running a GEMM through graft.
 *
 * For each dtype and shape MxKxN ([M,K] @ [K,N], optionally with a suffix
 * :TN, :NT or :TT for a stored transposed, b stored transposed, or both)
 * this times
 *   (a) a graft function whose trace is one graft_matmul of its two inputs,
 *       on a runtime with one thread and the sequential scheduler, called
 *       with a preallocated output tensor, and
 *   (b) the same GEMM as one direct cblas_sgemm / cblas_dgemm call,
 * in the same process, on the same input memory, interleaved rep by rep.
 * The BLAS library is held to one thread so both sides do the same work;
 * the ratio (a)/(b) is graft's overhead and the figure that counts.  Each
 * row also gives the tiles graft cut the product into.
 *
 * Then (f32, unless --shape or --dtype f64 is given) 2-D GEMM tiles:
 *   matmul_ws  the 1024^3 product on the work-stealing scheduler at 1 and
 *              2 threads, at the default grain (4 row tiles) and at 16384
 *              (4 x 4 tiles), against the same single direct call (at 2
 *              threads the ideal ratio is 0.5);
 *   split16    no timing: how a 1024-wide layer's product splits for 16
 *              workers at the default grain and at 16384, from its plan:
 *              its tiles, the largest tile's share of the multiply-adds,
 *              and the most 16 workers could gain from those tiles (the
 *              work over the longest worker's share when the tiles are
 *              dealt largest first to the least loaded worker).
 *
 * Usage: bench_matmul [--json] [--reps N] [--dtype f32|f64] [--shape MxKxN[:TN]]...
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROG "bench_matmul"
#include "bench_common.h"
#include "graft.h"
#include "kernels/kernels_int.h" /* the GEMM tile mapping (split16 rows) */
#include "sched/sched.h"         /* graft__function_plan, graft__tile_range */

#define MIN_REPS 7
#define DEFAULT_REPS 11
#define WARMUP_CALLS 2
#define MAX_SHAPES 32
/* Each timed rep repeats the call until it lasts about this long, so small
 * shapes are not measured at the clock's resolution. */
#define TARGET_REP_US 2000.0
#define MAX_INNER 10000

typedef struct mm_shape {
  int64_t m, k, n;
  unsigned flags; /* GRAFT_TRANS_A / GRAFT_TRANS_B */
} mm_shape;

static const mm_shape DEFAULT_SHAPES[] = {
    {128, 128, 128, 0},   {512, 512, 512, 0},   {1024, 1024, 1024, 0}, /* square */
    {256, 784, 1024, 0},  {256, 1024, 1024, 0}, {256, 1024, 10, 0},    /* MLP layers */
    {1024, 256, 1024, GRAFT_TRANS_A}, {784, 256, 1024, GRAFT_TRANS_A},  /* MLP weight grads */
    {256, 1024, 1024, GRAFT_TRANS_B},                                 /* MLP input grad */
    {4096, 4096, 1, 0},                                               /* matrix-vector */
};

typedef struct options {
  int json;
  int reps;
  int dtype_mask; /* bit 0: f32, bit 1: f64 */
  int n_shapes;
  mm_shape shapes[MAX_SHAPES];
  int run_2d; /* the 2-D tile rows (default shapes, f32) */
} options;

typedef struct result {
  double median_us, baseline_us;
  int reps, inner;
  double max_abs_diff;
  int64_t tiles, grain; /* graft's tiles for the product, at that grain */
} result;

/* The 2-D tile rows: a 1024-wide layer's product at a batch of 1024, at
 * bench_mlp's batch of 256 and that layer's weight gradient, and a 2048^3
 * product; split16 at the default grain and at 16384 (docs/guide.md: a
 * finer grain for many cores). */
static const mm_shape WS_SHAPE = {1024, 1024, 1024, 0};
static const int WS_THREADS[] = {1, 2};
static const int64_t WS_GRAINS[] = {0, 16384};
static const mm_shape SPLIT_SHAPES[] = {{1024, 1024, 1024, 0},
                                        {256, 1024, 1024, 0},
                                        {1024, 256, 1024, GRAFT_TRANS_A},
                                        {2048, 2048, 2048, 0}};
static const int64_t SPLIT_GRAINS[] = {0, 16384};
#define SPLIT_WORKERS 16

static void print_header(const bench_info *info, const char *runtime, const options *opt) {
  const bench_kv extra[] = {{"blas", info->blas}, {"runtime", runtime}};
  bench_header_print(info, "bench_matmul",
                     "graft_matmul in a one-op traced function vs a direct cblas_?gemm call",
                     extra, 2, opt->json);
  if (opt->json) return;
  printf("# shape MxKxN = [M,K] @ [K,N] (:TN a stored transposed, :NT b); times are per call\n"
         "# in microseconds (median of reps);\n"
         "# ratio = median_us / baseline_us; gflops = 2*M*N*K / median_us (graft)\n");
  printf("# %-7s %-5s %-18s %7s %4s %12s %12s %7s %8s %6s %6s\n", "name", "dtype", "shape",
         "threads", "reps", "median_us", "baseline_us", "ratio", "gflops", "grain", "tiles");
}

/* ---- one experiment ----------------------------------------------------- */

static graft_status trace_matmul(graft_trace *t, int n_in, graft_value *const *in,
                                 int n_out, graft_value **out, void *user) {
  if (n_in != 2 || n_out != 1)
    return graft_trace_fail(t, GRAFT_EINVAL, "bench_matmul: expected 2 inputs, 1 output");
  out[0] = graft_matmul(t, in[0], in[1], ((const mm_shape *)user)->flags);
  return GRAFT_OK;
}

static void baseline_gemm(graft_dtype dt, const mm_shape *s, const void *a, const void *b,
                          void *c) {
  int m = (int)s->m, n = (int)s->n, k = (int)s->k;
  int ta = (s->flags & GRAFT_TRANS_A) != 0, tb = (s->flags & GRAFT_TRANS_B) != 0;
  enum CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
  int lda = ta ? m : k, ldb = tb ? k : n;
  if (dt == GRAFT_F32)
    cblas_sgemm(CblasRowMajor, oa, ob, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
  else
    cblas_dgemm(CblasRowMajor, oa, ob, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, n);
}

/* count values uniform in [-1, 1) from seed. */
static void fill(graft_dtype dt, void *p, int64_t count, uint64_t seed) {
  if (dt == GRAFT_F32) {
    bench_fill_f32(p, count, seed, 1.0f);
    return;
  }
  uint64_t x = bench_uniform_seed(seed);
  for (int64_t i = 0; i < count; i++) ((double *)p)[i] = bench_uniform(&x);
}

static double max_abs_diff(graft_dtype dt, const void *x, const void *y, int64_t count,
                           double *max_abs_y) {
  double d = 0.0, my = 0.0;
  for (int64_t i = 0; i < count; i++) {
    double a = dt == GRAFT_F32 ? ((const float *)x)[i] : ((const double *)x)[i];
    double b = dt == GRAFT_F32 ? ((const float *)y)[i] : ((const double *)y)[i];
    if (!(fabs(a - b) <= d)) d = fabs(a - b); /* NaN propagates as NaN */
    if (fabs(b) > my) my = fabs(b);
  }
  *max_abs_y = my;
  return d;
}

/* One experiment's operands; side 0 is graft, side 1 the direct call. */
typedef struct experiment {
  graft_dtype dt;
  const mm_shape *s;
  void *a, *b, *cb;
  graft_tensor *in[2], *out[1];
  graft_function *f;
  int inner;
} experiment;

static int call_graft(experiment *e) {
  return bench_report(graft_function_call(e->f, 2, e->in, 1, e->out), "graft_function_call", e->f);
}

/* A timed unit: inner calls of one side (bench_timed_reps). */
static int run_side(void *ctx, int side) {
  experiment *e = ctx;
  for (int i = 0; i < e->inner; i++) {
    if (side == 0) {
      if (call_graft(e)) return -1;
    } else {
      baseline_gemm(e->dt, e->s, e->a, e->b, e->cb);
    }
  }
  return e->inner;
}

/* Runs one dtype x shape experiment; 0 on success, -1 after printing why. */
static int run_one(graft_runtime *rt, graft_dtype dt, const mm_shape *s, int reps,
                   result *res) {
  size_t es = graft_dtype_size(dt);
  int64_t sa[2] = {s->m, s->k}, sb[2] = {s->k, s->n}, sc[2] = {s->m, s->n};
  if (s->flags & GRAFT_TRANS_A) sa[0] = s->k, sa[1] = s->m;
  if (s->flags & GRAFT_TRANS_B) sb[0] = s->n, sb[1] = s->k;
  experiment e = {.dt = dt, .s = s};
  e.a = bench_alloc_aligned((size_t)(s->m * s->k) * es);
  e.b = bench_alloc_aligned((size_t)(s->k * s->n) * es);
  e.cb = bench_alloc_aligned((size_t)(s->m * s->n) * es);
  /* t[0..reps): graft, t[reps..2 reps): the direct call. */
  double *t = malloc(2 * (size_t)reps * sizeof *t);
  int rc = -1;

  if (!e.a || !e.b || !e.cb || !t) {
    bench_oom();
    goto done;
  }
  fill(dt, e.a, s->m * s->k, 1);
  fill(dt, e.b, s->k * s->n, 2);

  if (bench_report(graft_tensor_wrap(dt, 2, sa, e.a, &e.in[0]), "graft_tensor_wrap(a)", NULL) ||
      bench_report(graft_tensor_wrap(dt, 2, sb, e.b, &e.in[1]), "graft_tensor_wrap(b)", NULL) ||
      bench_report(graft_tensor_create(dt, 2, sc, &e.out[0]), "graft_tensor_create(c)", NULL) ||
      bench_function_create(rt, "bench_matmul", trace_matmul, (void *)s, 2, 1, &e.f))
    goto done;

  /* The first call traces and compiles; warm-up also pages in the buffers. */
  for (int i = 0; i < WARMUP_CALLS; i++) {
    if (call_graft(&e)) goto done;
    baseline_gemm(dt, s, e.a, e.b, e.cb);
  }

  double my, tol = dt == GRAFT_F32 ? 1e-4 : 1e-10;
  res->max_abs_diff = max_abs_diff(dt, graft_tensor_data(e.out[0]), e.cb, s->m * s->n, &my);
  if (!(res->max_abs_diff <= tol * (my > 1.0 ? my : 1.0))) {
    fprintf(stderr, "bench_matmul: %s %" PRId64 "x%" PRId64 "x%" PRId64
            ": graft's result differs from cblas (max abs diff %g, max |c| %g)\n",
            graft_dtype_name(dt), s->m, s->k, s->n, res->max_abs_diff, my);
    goto done;
  }

  /* Calibrate the calls per rep from one call of each. */
  double t0 = bench_now_us();
  if (call_graft(&e)) goto done;
  double t1 = bench_now_us();
  baseline_gemm(dt, s, e.a, e.b, e.cb);
  double t2 = bench_now_us();
  e.inner = bench_calls_per_rep(t1 - t0 < t2 - t1 ? t1 - t0 : t2 - t1, TARGET_REP_US, 1000,
                                MAX_INNER);

  /* Alternate which side goes first so neither always runs on a warm cache. */
  if (bench_timed_reps(2, reps, t, run_side, NULL, &e)) goto done;
  bench_warn_traced(e.f, "the function");
  graft_plan_stats ps;
  if (bench_report(graft_function_stats(e.f, &ps), "graft_function_stats", e.f)) goto done;
  res->tiles = ps.tiles;
  res->grain = rt->cfg.grain;

  res->median_us = bench_median(t, reps);
  res->baseline_us = bench_median(t + reps, reps);
  res->reps = reps;
  res->inner = e.inner;
  rc = 0;

done:
  graft_function_destroy(e.f);
  graft_tensor_destroy(e.out[0]);
  graft_tensor_destroy(e.in[1]);
  graft_tensor_destroy(e.in[0]);
  free(t);
  free(e.cb);
  free(e.b);
  free(e.a);
  return rc;
}

/* "MxKxN" with its transpose suffix. */
static const char *shape_name(const mm_shape *s, char *buf, size_t len) {
  snprintf(buf, len, "%" PRId64 "x%" PRId64 "x%" PRId64 "%s", s->m, s->k, s->n,
           s->flags == GRAFT_TRANS_A ? ":TN" : s->flags == GRAFT_TRANS_B ? ":NT"
           : s->flags ? ":TT" : "");
  return buf;
}

static void print_row(const options *opt, const char *name, graft_dtype dt, const mm_shape *s,
                      int threads, const result *r) {
  char shape[96];
  shape_name(s, shape, sizeof shape);
  double ratio = r->baseline_us > 0.0 ? r->median_us / r->baseline_us : 0.0;
  double gflops = r->median_us > 0.0 ? 2.0 * (double)s->m * (double)s->n * (double)s->k /
                                           (r->median_us * 1e3)
                                     : 0.0;
  if (opt->json)
    printf("{\"type\":\"row\",\"name\":\"%s\",\"dtype\":\"%s\",\"shape\":\"%s\","
           "\"m\":%" PRId64 ",\"k\":%" PRId64 ",\"n\":%" PRId64 ",\"threads\":%d,"
           "\"reps\":%d,\"calls_per_rep\":%d,\"median_us\":%.3f,\"baseline_us\":%.3f,"
           "\"ratio\":%.4f,\"gflops\":%.3f,\"grain\":%" PRId64 ",\"tiles\":%" PRId64 ","
           "\"max_abs_diff\":%g}\n",
           name, graft_dtype_name(dt), shape, s->m, s->k, s->n, threads, r->reps, r->inner,
           r->median_us, r->baseline_us, ratio, gflops, r->grain, r->tiles, r->max_abs_diff);
  else
    printf("%-9s %-5s %-18s %7d %4d %12.2f %12.2f %7.3f %8.2f %6" PRId64 " %6" PRId64 "\n",
           name, graft_dtype_name(dt), shape, threads, r->reps, r->median_us, r->baseline_us,
           ratio, gflops, r->grain, r->tiles);
  fflush(stdout);
}

/* ---- 2-D tiles ------------------------------------------------------------ */

typedef struct split_result {
  int64_t tiles;
  double max_share; /* the largest tile's share of the multiply-adds */
  double bound;     /* work / the longest worker's share (SPLIT_WORKERS) */
} split_result;

static int cmp_desc_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Multiply-adds of tile t of a matmul's tiling tl (units: kernels_int.h). */
static int64_t tile_macs(const graft__tiling *tl, int64_t t, int64_t M, int64_t N, int64_t K,
                         int64_t rb) {
  int64_t b, e, macs = 0, h = graft__mm_block(M, rb);
  graft__tile_range(tl, t, &b, &e);
  for (int64_t s = b / N; s * N < e; s++) {
    int64_t i0, i1;
    graft__mm_segment(M, rb, h, s, &i0, &i1);
    int64_t j0 = b > s * N ? b - s * N : 0, j1 = e < (s + 1) * N ? e - s * N : N;
    macs += (i1 - i0) * (j1 - j0) * K;
  }
  return macs;
}

/* The tiles of the matmul f's last call planned, dealt largest first to the
 * least loaded of SPLIT_WORKERS workers. */
static int split_plan(graft_function *f, const mm_shape *s, split_result *r) {
  const graft__plan *p = graft__function_plan(f);
  for (uint32_t i = 0; p && i < p->n_order; i++) {
    if (p->kargs[i].node->op != GRAFT__OP_MATMUL) continue;
    const graft__tiling *tl = &p->tiling[i];
    int64_t *macs = malloc((size_t)tl->n * sizeof *macs), load[SPLIT_WORKERS] = {0}, total = 0;
    if (!macs) return bench_oom();
    for (int64_t t = 0; t < tl->n; t++) {
      macs[t] = tile_macs(tl, t, s->m, s->n, s->k, tl->units / s->n);
      total += macs[t];
    }
    qsort(macs, (size_t)tl->n, sizeof *macs, cmp_desc_i64);
    for (int64_t t = 0; t < tl->n; t++) {
      int w = 0;
      for (int v = 1; v < SPLIT_WORKERS; v++) w = load[v] < load[w] ? v : w;
      load[w] += macs[t];
    }
    int64_t span = 0;
    for (int v = 0; v < SPLIT_WORKERS; v++) span = load[v] > span ? load[v] : span;
    r->tiles = tl->n;
    r->max_share = (double)macs[0] / (double)total;
    r->bound = (double)total / (double)span;
    free(macs);
    return 0;
  }
  fprintf(stderr, "bench_matmul: split16: no matmul in the plan\n");
  return -1;
}

/* One split16 row: s (f32) planned at grain (0: the default). */
static int run_split(const options *opt, const mm_shape *s, int64_t grain) {
  int64_t sa[2] = {s->m, s->k}, sb[2] = {s->k, s->n};
  if (s->flags & GRAFT_TRANS_A) sa[0] = s->k, sa[1] = s->m;
  if (s->flags & GRAFT_TRANS_B) sb[0] = s->n, sb[1] = s->k;
  graft_runtime *rt = NULL;
  graft_function *f = NULL;
  graft_tensor *in[2] = {NULL, NULL}, *out[1] = {NULL};
  split_result r = {0, 0.0, 0.0};
  char desc[256], shape[96];
  int rc = -1;
  if (bench_runtime_create("seq", 1, grain, NULL, &rt, desc, sizeof desc) ||
      bench_report(graft_tensor_create(GRAFT_F32, 2, sa, &in[0]), "graft_tensor_create(a)", NULL) ||
      bench_report(graft_tensor_create(GRAFT_F32, 2, sb, &in[1]), "graft_tensor_create(b)", NULL) ||
      bench_function_create(rt, "bench_matmul", trace_matmul, (void *)s, 2, 1, &f))
    goto done;
  fill(GRAFT_F32, graft_tensor_data(in[0]), s->m * s->k, 1);
  fill(GRAFT_F32, graft_tensor_data(in[1]), s->k * s->n, 2);
  if (bench_report(graft_function_call(f, 2, in, 1, out), "graft_function_call", f) ||
      split_plan(f, s, &r))
    goto done;
  const int64_t g = rt->cfg.grain; /* the grain the plan was cut at */
  shape_name(s, shape, sizeof shape);
  if (opt->json)
    printf("{\"type\":\"split\",\"name\":\"split16\",\"dtype\":\"f32\",\"shape\":\"%s\","
           "\"m\":%" PRId64 ",\"k\":%" PRId64 ",\"n\":%" PRId64 ",\"grain\":%" PRId64 ","
           "\"workers\":%d,\"tiles\":%" PRId64 ",\"max_tile_share\":%.4f,\"bound\":%.2f}\n",
           shape, s->m, s->k, s->n, g, SPLIT_WORKERS, r.tiles, r.max_share, r.bound);
  else
    printf("%-9s %-5s %-18s %7" PRId64 " %7d %6" PRId64 " %9.4f %7.2f\n", "split16", "f32", shape,
           g, SPLIT_WORKERS, r.tiles, r.max_share, r.bound);
  fflush(stdout);
  rc = 0;
done:
  graft_function_destroy(f);
  graft_tensor_destroy(out[0]);
  graft_tensor_destroy(in[1]);
  graft_tensor_destroy(in[0]);
  graft_runtime_destroy(rt);
  return rc;
}

/* The 2-D tile rows: WS_SHAPE on ws at WS_THREADS, then the split16 rows;
 * returns the experiments that failed. */
static int run_2d(const options *opt) {
  int failures = 0;
  for (size_t g = 0; g < sizeof WS_GRAINS / sizeof WS_GRAINS[0]; g++)
    for (size_t i = 0; i < sizeof WS_THREADS / sizeof WS_THREADS[0]; i++) {
      graft_runtime *rt = NULL;
      result r;
      memset(&r, 0, sizeof r);
      if (bench_runtime_create("ws", WS_THREADS[i], WS_GRAINS[g], NULL, &rt, NULL, 0) ||
          run_one(rt, GRAFT_F32, &WS_SHAPE, opt->reps, &r))
        failures++;
      else
        print_row(opt, "matmul_ws", GRAFT_F32, &WS_SHAPE, graft_runtime_num_threads(rt), &r);
      graft_runtime_destroy(rt);
    }
  if (!opt->json)
    printf("# split16: tiles of one product at a grain (no timing); max_tile_share = the\n"
           "# largest tile's share of the multiply-adds; bound = the most %d workers gain\n"
           "# from these tiles (work / longest worker's share, tiles dealt largest first)\n"
           "# %-7s %-5s %-18s %7s %7s %6s %9s %7s\n",
           SPLIT_WORKERS, "name", "dtype", "shape", "grain", "workers", "tiles", "max_share",
           "bound");
  for (size_t i = 0; i < sizeof SPLIT_SHAPES / sizeof SPLIT_SHAPES[0]; i++)
    for (size_t g = 0; g < sizeof SPLIT_GRAINS / sizeof SPLIT_GRAINS[0]; g++)
      failures += run_split(opt, &SPLIT_SHAPES[i], SPLIT_GRAINS[g]) != 0;
  return failures;
}

/* ---- command line -------------------------------------------------------- */

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_matmul [--json] [--reps N] [--dtype f32|f64] [--shape MxKxN[:TN]]...\n"
          "  --json         one JSON object per line (a header, then one per row)\n"
          "  --reps N       timed repetitions per experiment (>= %d, default %d)\n"
          "  --dtype D      only f32 or only f64 (default: both)\n"
          "  --shape MxKxN  [M,K] @ [K,N]; repeatable; replaces the default shapes; a\n"
          "                 suffix :TN, :NT or :TT stores a, b or both transposed\n",
          MIN_REPS, DEFAULT_REPS);
}

static int parse_shape(const char *s, mm_shape *out) {
  char tail, t[3] = "";
  long long m, k, n;
  int got = sscanf(s, "%lldx%lldx%lld:%2[NT]%c", &m, &k, &n, t, &tail);
  if (got != 3 && got != 4) return -1;
  if (got == 3 && strchr(s, ':')) return -1;
  if (got == 4 && strlen(t) != 2) return -1;
  if (m < 1 || k < 1 || n < 1 || m > INT32_MAX || k > INT32_MAX || n > INT32_MAX) return -1;
  out->m = m;
  out->k = k;
  out->n = n;
  out->flags = (t[0] == 'T' ? GRAFT_TRANS_A : 0u) | (t[1] == 'T' ? GRAFT_TRANS_B : 0u);
  return 0;
}

/* --dtype and --shape (bench_parse_args). */
static int own_option(void *ctx, const char *arg, const char *val) {
  options *opt = ctx;
  if (strcmp(arg, "--dtype") == 0 && val) {
    if (strcmp(val, "f32") == 0)
      opt->dtype_mask = 1;
    else if (strcmp(val, "f64") == 0)
      opt->dtype_mask = 2;
    else {
      fprintf(stderr, "bench_matmul: --dtype takes f32 or f64\n");
      return -1;
    }
    return 2;
  }
  if (strcmp(arg, "--shape") == 0 && val) {
    if (opt->n_shapes == MAX_SHAPES || parse_shape(val, &opt->shapes[opt->n_shapes])) {
      fprintf(stderr, "bench_matmul: bad --shape '%s' (want MxKxN, at most %d)\n", val,
              MAX_SHAPES);
      return -1;
    }
    opt->n_shapes++;
    return 2;
  }
  return 0;
}

static int parse_args(int argc, char **argv, options *opt) {
  memset(opt, 0, sizeof *opt);
  opt->reps = DEFAULT_REPS;
  opt->dtype_mask = 3;
  if (bench_parse_args(argc, argv, &opt->json, &opt->reps, MIN_REPS, BENCH_MAX_REPS, usage,
                       own_option, opt))
    return -1;
  if (opt->n_shapes == 0) {
    opt->run_2d = opt->dtype_mask & 1;
    opt->n_shapes = (int)(sizeof DEFAULT_SHAPES / sizeof DEFAULT_SHAPES[0]);
    memcpy(opt->shapes, DEFAULT_SHAPES, sizeof DEFAULT_SHAPES);
  }
  return 0;
}

int main(int argc, char **argv) {
  options opt;
  if (parse_args(argc, argv, &opt)) return 2;

  bench_info info;
  if (bench_info_collect(&info, 1)) return 1;
  char runtime[256];

  graft_runtime *rt = NULL;
  if (bench_runtime_create("seq", 1, 0, NULL, &rt, runtime, sizeof runtime)) {
    bench_info_free(&info);
    return 1;
  }
  int threads = graft_runtime_num_threads(rt);

  print_header(&info, runtime, &opt);
  fflush(stdout);

  int failures = 0;
  static const graft_dtype dtypes[] = {GRAFT_F32, GRAFT_F64};
  for (int d = 0; d < 2; d++) {
    if (!(opt.dtype_mask & (1 << d))) continue;
    for (int i = 0; i < opt.n_shapes; i++) {
      result r;
      memset(&r, 0, sizeof r);
      if (run_one(rt, dtypes[d], &opt.shapes[i], opt.reps, &r) == 0)
        print_row(&opt, "matmul", dtypes[d], &opt.shapes[i], threads, &r);
      else
        failures++;
    }
  }

  graft_runtime_destroy(rt);
  if (opt.run_2d) failures += run_2d(&opt);
  bench_info_free(&info);
  if (failures) fprintf(stderr, "bench_matmul: %d experiment(s) failed\n", failures);
  return failures ? 1 : 0;
}
