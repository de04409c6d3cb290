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
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */

#include <cblas.h>
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "graft.h"

extern char **environ;

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

/* ---- small utilities -------------------------------------------------- */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v in place. */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void *alloc_aligned(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  return aligned_alloc(64, rounded ? rounded : 64);
}

static void chomp(char *s) {
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
}

/* Writes s as a JSON string literal. */
static void json_str(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      printf("\\%c", *p);
    else if (*p < 0x20)
      printf("\\u%04x", *p);
    else
      putchar(*p);
  }
  putchar('"');
}

/* ---- the environment header -------------------------------------------- */

typedef struct run_info {
  char commit[64];
  char cpu[256];
  char blas[320];
  char runtime[256];
  long nproc, online;
  int n_env;
  char **env; /* GRAFT_*, OMP_*, OPENBLAS_* entries of environ, sorted */
} run_info;

static void get_commit(char *buf, size_t len) {
  char cmd[1200];
  const char *dir = NULL;
#ifdef GRAFT_SOURCE_DIR
  dir = GRAFT_SOURCE_DIR;
#endif
  if (dir && !strchr(dir, '\'') && strlen(dir) < 1000)
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse --short HEAD 2>/dev/null", dir);
  else
    snprintf(cmd, sizeof cmd, "git rev-parse --short HEAD 2>/dev/null");
  snprintf(buf, len, "unknown");
  FILE *p = popen(cmd, "r");
  if (!p) return;
  char line[128] = "";
  int got = fgets(line, sizeof line, p) != NULL;
  int status = pclose(p);
  chomp(line);
  if (got && status == 0 && line[0]) snprintf(buf, len, "%s", line);
}

static void get_cpu_model(char *buf, size_t len) {
  static const char *const keys[] = {"model name", "Hardware", "cpu model", "Processor"};
  snprintf(buf, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
      size_t kl = strlen(keys[i]);
      char *colon = strchr(line, ':');
      if (colon && strncmp(line, keys[i], kl) == 0 && isspace((unsigned char)line[kl])) {
        const char *v = colon + 1;
        while (isspace((unsigned char)*v)) v++;
        snprintf(buf, len, "%s", v);
        chomp(buf);
        found = 1;
        break;
      }
    }
  }
  fclose(f);
}

/* Holds the baseline BLAS to one thread (graft's kernels call it
 * single-threaded inside their tasks) and describes the library. */
static void setup_blas(char *buf, size_t len) {
#ifdef GRAFT_HAVE_OPENBLAS
  const char *variant = "unknown threading";
  switch (openblas_get_parallel()) {
  case 0:
    variant = "sequential";
    break;
  case 1:
    variant = "pthreads, held to 1 thread";
    openblas_set_num_threads(1);
    break;
  case 2:
    /* openblas_set_num_threads would change the caller's OpenMP thread
     * count in this variant; the OpenMP setting is what it follows. */
    variant = "OpenMP, held to 1 thread";
    omp_set_num_threads(1);
    break;
  }
  snprintf(buf, len, "%s (%s)", openblas_get_config(), variant);
#else
  snprintf(buf, len, "CBLAS (not OpenBLAS; threading as configured)");
#endif
}

static int collect_env(run_info *info) {
  static const char *const prefixes[] = {"GRAFT_", "OMP_", "OPENBLAS_"};
  int n = 0;
  for (char **e = environ; *e; e++) n++;
  info->env = malloc(((size_t)n + 1) * sizeof *info->env);
  if (!info->env) return -1;
  info->n_env = 0;
  for (char **e = environ; *e; e++)
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
      if (strncmp(*e, prefixes[i], strlen(prefixes[i])) == 0) {
        info->env[info->n_env++] = *e;
        break;
      }
  qsort(info->env, (size_t)info->n_env, sizeof *info->env, cmp_str);
  return 0;
}

static void print_header(const run_info *info, const options *opt) {
#if defined(__clang__) || !defined(__GNUC__)
  const char *compiler = __VERSION__;
#else
  const char *compiler = "gcc " __VERSION__;
#endif
  if (opt->json) {
    printf("{\"type\":\"header\",\"bench\":\"bench_matmul\",\"commit\":");
    json_str(info->commit);
    printf(",\"compiler\":");
    json_str(compiler);
    printf(",\"cpu\":");
    json_str(info->cpu);
    printf(",\"nproc\":%ld,\"online_cpus\":%ld,\"blas\":", info->nproc, info->online);
    json_str(info->blas);
    printf(",\"runtime\":");
    json_str(info->runtime);
    printf(",\"env\":{");
    for (int i = 0; i < info->n_env; i++) {
      const char *eq = strchr(info->env[i], '=');
      char name[256];
      size_t nl = eq ? (size_t)(eq - info->env[i]) : strlen(info->env[i]);
      if (nl >= sizeof name) nl = sizeof name - 1;
      memcpy(name, info->env[i], nl);
      name[nl] = '\0';
      printf("%s", i ? "," : "");
      json_str(name);
      putchar(':');
      json_str(eq ? eq + 1 : "");
    }
    printf("}}\n");
    return;
  }
  printf("# bench_matmul: graft_matmul in a one-op traced function vs a direct cblas_?gemm call\n");
  printf("# commit: %s\n", info->commit);
  printf("# compiler: %s\n", compiler);
  printf("# cpu: %s\n", info->cpu);
  printf("# nproc: %ld (online %ld)\n", info->nproc, info->online);
  printf("# blas: %s\n", info->blas);
  printf("# runtime: %s\n", info->runtime);
  if (info->n_env == 0) printf("# env: (no GRAFT_*, OMP_* or OPENBLAS_* variables)\n");
  for (int i = 0; i < info->n_env; i++) printf("# env: %s\n", info->env[i]);
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
  double t0 = now_us();
  if (report(graft_function_call(f, 2, in, 1, out), "graft_function_call", f)) goto done;
  double t1 = now_us();
  baseline_gemm(dt, s, a, b, cb);
  double t2 = now_us();
  double one = t1 - t0 < t2 - t1 ? t1 - t0 : t2 - t1;
  int inner = one > 0.0 ? (int)ceil(TARGET_REP_US / one) : 1000;
  if (inner < 1) inner = 1;
  if (inner > 10000) inner = 10000;

  for (int r = 0; r < reps; r++) {
    /* Alternate which side goes first so neither always runs on a warm cache. */
    for (int side = 0; side < 2; side++) {
      int graft_side = (side == 0) == (r % 2 == 0);
      double start = now_us();
      for (int i = 0; i < inner; i++) {
        if (graft_side) {
          if (report(graft_function_call(f, 2, in, 1, out), "graft_function_call", f))
            goto done;
        } else {
          baseline_gemm(dt, s, a, b, cb);
        }
      }
      double per_call = (now_us() - start) / inner;
      if (graft_side)
        t_graft[r] = per_call;
      else
        t_base[r] = per_call;
    }
  }
  if (graft_function_trace_count(f) != 1)
    fprintf(stderr, "bench_matmul: warning: the function traced %d times (expected 1)\n",
            graft_function_trace_count(f));

  res->median_us = median(t_graft, reps);
  res->baseline_us = median(t_base, reps);
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

  run_info info;
  memset(&info, 0, sizeof info);
  get_commit(info.commit, sizeof info.commit);
  get_cpu_model(info.cpu, sizeof info.cpu);
  info.online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  info.nproc = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : info.online;
  if (collect_env(&info)) {
    fprintf(stderr, "bench_matmul: out of memory\n");
    return 1;
  }
  setup_blas(info.blas, sizeof info.blas);

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
    free(info.env);
    return 1;
  }
  graft_runtime_describe(rt, info.runtime, sizeof info.runtime);
  int threads = graft_runtime_num_threads(rt);

  print_header(&info, &opt);
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
  free(info.env);
  if (failures) fprintf(stderr, "bench_matmul: %d experiment(s) failed\n", failures);
  return failures ? 1 : 0;
}
