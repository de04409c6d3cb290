/* bench_matmul: the cost of running a GEMM through graft.
 *
 * For each dtype and shape MxKxN ([M,K] @ [K,N]) this times
 *   (a) a graft function whose trace is one graft_matmul of its two inputs,
 *       on a runtime with one thread and the sequential scheduler, called
 *       with a preallocated output tensor, and
 *   (b) the same GEMM as one direct cblas_sgemm / cblas_dgemm call,
 * in the same process, on the same input memory, interleaved rep by rep.
 * The BLAS library is held to one thread so both sides do the same work;
 * the ratio (a)/(b) is graft's overhead and the figure that counts.
 *
 * Usage: bench_matmul [--json] [--reps N] [--dtype f32|f64] [--shape MxKxN]...
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT (bench_common.h) */

#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "graft.h"

#define MIN_REPS 7
#define DEFAULT_REPS 11
#define WARMUP_CALLS 2
#define MAX_SHAPES 32
/* Each timed rep repeats the call until it lasts about this long, so small
 * shapes are not measured at the clock's resolution. */
#define TARGET_REP_US 2000.0

typedef struct mm_shape {
  int64_t m, k, n;
} mm_shape;

static const mm_shape DEFAULT_SHAPES[] = {
    {128, 128, 128},   {512, 512, 512},   {1024, 1024, 1024}, /* square */
    {256, 784, 1024},  {256, 1024, 1024}, {256, 1024, 10},     /* MLP layers */
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

static void *alloc_aligned(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  return aligned_alloc(64, rounded ? rounded : 64);
}

static void print_header(const bench_info *info, const char *blas, const char *runtime,
                         const options *opt) {
  const bench_kv extra[] = {{"blas", blas}, {"runtime", runtime}};
  bench_header_print(info, "bench_matmul",
                     "graft_matmul in a one-op traced function vs a direct cblas_?gemm call",
                     extra, 2, opt->json);
  if (opt->json) return;
  printf("# shape MxKxN = [M,K] @ [K,N]; times are per call in microseconds (median of reps);\n"
         "# ratio = median_us / baseline_us; gflops = 2*M*N*K / median_us (graft)\n");
  printf("# %-6s %-5s %-15s %7s %4s %12s %12s %7s %8s\n", "name", "dtype", "shape",
         "threads", "reps", "median_us", "baseline_us", "ratio", "gflops");
}

/* ---- one experiment ----------------------------------------------------- */

static graft_status trace_matmul(graft_trace *t, int n_in, graft_value *const *in,
                                 int n_out, graft_value **out, void *user) {
  (void)user;
  if (n_in != 2 || n_out != 1)
    return graft_trace_fail(t, GRAFT_EINVAL, "bench_matmul: expected 2 inputs, 1 output");
  out[0] = graft_matmul(t, in[0], in[1], 0);
  return GRAFT_OK;
}

static int report(graft_status s, const char *what, const graft_function *f) {
  if (s == GRAFT_OK) return 0;
  fprintf(stderr, "bench_matmul: %s failed: %s (%s)%s%s\n", what, graft_status_name(s),
          graft_status_str(s), f ? ": " : "", f ? graft_function_errmsg(f) : "");
  return -1;
}

static void baseline_gemm(graft_dtype dt, const mm_shape *s, const void *a, const void *b,
                          void *c) {
  int m = (int)s->m, n = (int)s->n, k = (int)s->k;
  if (dt == GRAFT_F32)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f,
                c, n);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a, k, b, n, 0.0, c,
                n);
}

static void fill(graft_dtype dt, void *p, int64_t count, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < count; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    double v = (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0; /* [-1, 1) */
    if (dt == GRAFT_F32)
      ((float *)p)[i] = (float)v;
    else
      ((double *)p)[i] = v;
  }
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

/* Runs one dtype x shape experiment; 0 on success, -1 after printing why. */
static int run_one(graft_runtime *rt, graft_dtype dt, const mm_shape *s, int reps,
                   result *res) {
  size_t es = graft_dtype_size(dt);
  int64_t sa[2] = {s->m, s->k}, sb[2] = {s->k, s->n}, sc[2] = {s->m, s->n};
  void *a = alloc_aligned((size_t)(s->m * s->k) * es);
  void *b = alloc_aligned((size_t)(s->k * s->n) * es);
  void *cb = alloc_aligned((size_t)(s->m * s->n) * es);
  double *t_graft = malloc((size_t)reps * sizeof *t_graft);
  double *t_base = malloc((size_t)reps * sizeof *t_base);
  graft_tensor *in[2] = {NULL, NULL}, *out[1] = {NULL};
  graft_function *f = NULL;
  int rc = -1;

  if (!a || !b || !cb || !t_graft || !t_base) {
    fprintf(stderr, "bench_matmul: out of memory\n");
    goto done;
  }
  fill(dt, a, s->m * s->k, 1);
  fill(dt, b, s->k * s->n, 2);

  if (report(graft_tensor_wrap(dt, 2, sa, a, &in[0]), "graft_tensor_wrap(a)", NULL) ||
      report(graft_tensor_wrap(dt, 2, sb, b, &in[1]), "graft_tensor_wrap(b)", NULL) ||
      report(graft_tensor_create(dt, 2, sc, &out[0]), "graft_tensor_create(c)", NULL))
    goto done;

  graft_function_desc desc = {
      .name = "bench_matmul", .trace = trace_matmul, .n_inputs = 2, .n_outputs = 1};
  if (report(graft_function_create(rt, &desc, &f), "graft_function_create", NULL)) goto done;

  /* The first call traces and compiles; warm-up also pages in the buffers. */
  for (int i = 0; i < WARMUP_CALLS; i++) {
    if (report(graft_function_call(f, 2, in, 1, out), "graft_function_call", f)) goto done;
    baseline_gemm(dt, s, a, b, cb);
  }

  double my, tol = dt == GRAFT_F32 ? 1e-4 : 1e-10;
  res->max_abs_diff = max_abs_diff(dt, graft_tensor_data(out[0]), cb, s->m * s->n, &my);
  if (!(res->max_abs_diff <= tol * (my > 1.0 ? my : 1.0))) {
    fprintf(stderr, "bench_matmul: %s %" PRId64 "x%" PRId64 "x%" PRId64
            ": graft's result differs from cblas (max abs diff %g, max |c| %g)\n",
            graft_dtype_name(dt), s->m, s->k, s->n, res->max_abs_diff, my);
    goto done;
  }

  /* Calibrate the calls per rep from one call of each. */
  double t0 = bench_now_us();
  if (report(graft_function_call(f, 2, in, 1, out), "graft_function_call", f)) goto done;
  double t1 = bench_now_us();
  baseline_gemm(dt, s, a, b, cb);
  double t2 = bench_now_us();
  double one = t1 - t0 < t2 - t1 ? t1 - t0 : t2 - t1;
  int inner = one > 0.0 ? (int)ceil(TARGET_REP_US / one) : 1000;
  if (inner < 1) inner = 1;
  if (inner > 10000) inner = 10000;

  for (int r = 0; r < reps; r++) {
    /* Alternate which side goes first so neither always runs on a warm cache. */
    for (int side = 0; side < 2; side++) {
      int graft_side = (side == 0) == (r % 2 == 0);
      double start = bench_now_us();
      for (int i = 0; i < inner; i++) {
        if (graft_side) {
          if (report(graft_function_call(f, 2, in, 1, out), "graft_function_call", f))
            goto done;
        } else {
          baseline_gemm(dt, s, a, b, cb);
        }
      }
      double per_call = (bench_now_us() - start) / inner;
      if (graft_side)
        t_graft[r] = per_call;
      else
        t_base[r] = per_call;
    }
  }
  if (graft_function_trace_count(f) != 1)
    fprintf(stderr, "bench_matmul: warning: the function traced %d times (expected 1)\n",
            graft_function_trace_count(f));

  res->median_us = bench_median(t_graft, reps);
  res->baseline_us = bench_median(t_base, reps);
  res->reps = reps;
  res->inner = inner;
  rc = 0;

done:
  graft_function_destroy(f);
  graft_tensor_destroy(out[0]);
  graft_tensor_destroy(in[1]);
  graft_tensor_destroy(in[0]);
  free(t_base);
  free(t_graft);
  free(cb);
  free(b);
  free(a);
  return rc;
}

static void print_row(const options *opt, graft_dtype dt, const mm_shape *s, int threads,
                      const result *r) {
  char shape[96];
  snprintf(shape, sizeof shape, "%" PRId64 "x%" PRId64 "x%" PRId64, s->m, s->k, s->n);
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
    printf("%-8s %-5s %-15s %7d %4d %12.2f %12.2f %7.3f %8.2f\n", "matmul",
           graft_dtype_name(dt), shape, threads, r->reps, r->median_us, r->baseline_us,
           ratio, gflops);
  fflush(stdout);
}

/* ---- command line -------------------------------------------------------- */

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_matmul [--json] [--reps N] [--dtype f32|f64] [--shape MxKxN]...\n"
          "  --json         one JSON object per line (a header, then one per row)\n"
          "  --reps N       timed repetitions per experiment (>= %d, default %d)\n"
          "  --dtype D      only f32 or only f64 (default: both)\n"
          "  --shape MxKxN  [M,K] @ [K,N]; repeatable; replaces the default shapes\n",
          MIN_REPS, DEFAULT_REPS);
}

static int parse_shape(const char *s, mm_shape *out) {
  char tail;
  long long m, k, n;
  if (sscanf(s, "%lldx%lldx%lld%c", &m, &k, &n, &tail) != 3) return -1;
  if (m < 1 || k < 1 || n < 1 || m > INT32_MAX || k > INT32_MAX || n > INT32_MAX) return -1;
  out->m = m;
  out->k = k;
  out->n = n;
  return 0;
}

static int parse_args(int argc, char **argv, options *opt) {
  memset(opt, 0, sizeof *opt);
  opt->reps = DEFAULT_REPS;
  opt->dtype_mask = 3;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(arg, "--json") == 0) {
      opt->json = 1;
    } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (strcmp(arg, "--reps") == 0 && val) {
      char *end;
      long r = strtol(val, &end, 10);
      if (*end || r < MIN_REPS || r > 100000) {
        fprintf(stderr, "bench_matmul: --reps needs an integer >= %d\n", MIN_REPS);
        return -1;
      }
      opt->reps = (int)r;
      i++;
    } else if (strcmp(arg, "--dtype") == 0 && val) {
      if (strcmp(val, "f32") == 0)
        opt->dtype_mask = 1;
      else if (strcmp(val, "f64") == 0)
        opt->dtype_mask = 2;
      else {
        fprintf(stderr, "bench_matmul: --dtype takes f32 or f64\n");
        return -1;
      }
      i++;
    } else if (strcmp(arg, "--shape") == 0 && val) {
      if (opt->n_shapes == MAX_SHAPES || parse_shape(val, &opt->shapes[opt->n_shapes])) {
        fprintf(stderr, "bench_matmul: bad --shape '%s' (want MxKxN, at most %d)\n", val,
                MAX_SHAPES);
        return -1;
      }
      opt->n_shapes++;
      i++;
    } else {
      usage(stderr);
      return -1;
    }
  }
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
  if (bench_info_collect(&info)) {
    fprintf(stderr, "bench_matmul: out of memory\n");
    return 1;
  }
  char blas[320], runtime[256];
  bench_setup_blas(blas, sizeof blas);

  graft_runtime_opts ro;
  graft_runtime_opts_init(&ro);
  ro.num_threads = 1;
  ro.sched = "seq";
  graft_runtime *rt = NULL;
  char err[512] = "";
  graft_status st = graft_runtime_create_ex(&ro, &rt, err, sizeof err);
  if (st != GRAFT_OK) {
    fprintf(stderr, "bench_matmul: graft_runtime_create failed: %s (%s): %s\n",
            graft_status_name(st), graft_status_str(st), err);
    bench_info_free(&info);
    return 1;
  }
  graft_runtime_describe(rt, runtime, sizeof runtime);
  int threads = graft_runtime_num_threads(rt);

  print_header(&info, blas, runtime, &opt);
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
