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
 * the ratio (a)/(b) is graft's overhead and the figure that counts.
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
} options;

typedef struct result {
  double median_us, baseline_us;
  int reps, inner;
  double max_abs_diff;
} result;

static void print_header(const bench_info *info, const char *runtime, const options *opt) {
  const bench_kv extra[] = {{"blas", info->blas}, {"runtime", runtime}};
  bench_header_print(info, "bench_matmul",
                     "graft_matmul in a one-op traced function vs a direct cblas_?gemm call",
                     extra, 2, opt->json);
  if (opt->json) return;
  printf("# shape MxKxN = [M,K] @ [K,N] (:TN a stored transposed, :NT b); times are per call\n"
         "# in microseconds (median of reps);\n"
         "# ratio = median_us / baseline_us; gflops = 2*M*N*K / median_us (graft)\n");
  printf("# %-6s %-5s %-18s %7s %4s %12s %12s %7s %8s\n", "name", "dtype", "shape",
         "threads", "reps", "median_us", "baseline_us", "ratio", "gflops");
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

static void print_row(const options *opt, graft_dtype dt, const mm_shape *s, int threads,
                      const result *r) {
  char shape[96];
  snprintf(shape, sizeof shape, "%" PRId64 "x%" PRId64 "x%" PRId64 "%s", s->m, s->k, s->n,
           s->flags == GRAFT_TRANS_A ? ":TN" : s->flags == GRAFT_TRANS_B ? ":NT"
           : s->flags ? ":TT" : "");
  double ratio = r->baseline_us > 0.0 ? r->median_us / r->baseline_us : 0.0;
  double gflops = r->median_us > 0.0 ? 2.0 * (double)s->m * (double)s->n * (double)s->k /
                                           (r->median_us * 1e3)
                                     : 0.0;
  if (opt->json)
    printf("{\"type\":\"row\",\"name\":\"matmul\",\"dtype\":\"%s\",\"shape\":\"%s\","
           "\"m\":%" PRId64 ",\"k\":%" PRId64 ",\"n\":%" PRId64 ",\"threads\":%d,"
           "\"reps\":%d,\"calls_per_rep\":%d,\"median_us\":%.3f,\"baseline_us\":%.3f,"
           "\"ratio\":%.4f,\"gflops\":%.3f,\"max_abs_diff\":%g}\n",
           graft_dtype_name(dt), shape, s->m, s->k, s->n, threads, r->reps, r->inner,
           r->median_us, r->baseline_us, ratio, gflops, r->max_abs_diff);
  else
    printf("%-8s %-5s %-18s %7d %4d %12.2f %12.2f %7.3f %8.2f\n", "matmul",
           graft_dtype_name(dt), shape, threads, r->reps, r->median_us, r->baseline_us,
           ratio, gflops);
  fflush(stdout);
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
        print_row(&opt, dtypes[d], &opt.shapes[i], threads, &r);
      else
        failures++;
    }
  }

  graft_runtime_destroy(rt);
  bench_info_free(&info);
  if (failures) fprintf(stderr, "bench_matmul: %d experiment(s) failed\n", failures);
  return failures ? 1 : 0;
}
