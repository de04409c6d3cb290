/* bench_common.h: what the bench/bench_<topic>.c programs share.
 *
 * The run header (commit, compiler, CPU, topology, and the GRAFT_* / OMP_* /
 * OPENBLAS_* environment, as text lines under '#' or as one JSON object),
 * a monotonic clock, medians and JSON string output; the baselines several
 * benchmarks share (a list of GEMMs called directly, Adam in plain C); the
 * command line (--json, --help, --reps and a benchmark's own options); seeded data,
 * graft error reports, runtimes and functions; the timed rep loop (configs
 * rotated rep by rep); rows and checks; and, for the benchmarks that split
 * a call's time, the graph of a function read back from its DOT and the
 * per-tile medians of a Chrome trace (GRAFT_TRACE).  Header-only (static
 * inline) so each benchmark stays one executable built from one file.
 *
 * The includer defines _GNU_SOURCE before any system header (for
 * sched_getaffinity, CPU_COUNT and open_memstream), and BENCH_PROG (default
 * "bench"), the program name that prefixes its messages on stderr, before
 * including this header.
 */
#ifndef GRAFT_BENCH_COMMON_H
#define GRAFT_BENCH_COMMON_H

#include <cblas.h>
#include <ctype.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "graft.h"

#ifndef BENCH_PROG
#define BENCH_PROG "bench"
#endif

extern char **environ;

/* ---- small utilities -------------------------------------------------- */

static inline double bench_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n); sorts v in place. */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static inline int bench_cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static inline void bench_chomp(char *s) {
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
}

/* Writes s as a JSON string literal to stdout. */
static inline void bench_json_str(const char *s) {
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

/* Prints "BENCH_PROG: out of memory" and returns -1. */
static inline int bench_oom(void) {
  fprintf(stderr, BENCH_PROG ": out of memory\n");
  return -1;
}

static inline double bench_mib(int64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* ---- seeded data -------------------------------------------------------------- */

/* One xorshift64 step of *x; returns the new state. */
static inline uint64_t bench_xorshift(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* The stream of values uniform in [-1, 1) from seed: bench_uniform_seed,
 * then bench_uniform per value. */
static inline uint64_t bench_uniform_seed(uint64_t seed) { return seed * 0x9E3779B97F4A7C15ull + 1; }

static inline double bench_uniform(uint64_t *x) {
  return (double)(bench_xorshift(x) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* count f32 values uniform in [-scale, scale) from seed. */
static inline void bench_fill_f32(float *p, int64_t count, uint64_t seed, float scale) {
  uint64_t x = bench_uniform_seed(seed);
  for (int64_t i = 0; i < count; i++) p[i] = scale * (float)bench_uniform(&x);
}

/* 64-byte aligned, not initialised; NULL when out of memory. */
static inline void *bench_alloc_aligned(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  return aligned_alloc(64, rounded ? rounded : 64);
}

/* count f32, 64-byte aligned and zeroed; NULL when out of memory. */
static inline float *bench_alloc_f32(int64_t count) {
  size_t bytes = ((size_t)count * sizeof(float) + 63) / 64 * 64;
  float *p = bench_alloc_aligned(bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

/* ---- BLAS ------------------------------------------------------------------ */

/* Holds a baseline BLAS to one thread (graft's kernels call it
 * single-threaded inside their tasks) and describes the library into buf. */
static inline void bench_setup_blas(char *buf, size_t len) {
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
     * count in this variant; the OpenMP setting is what it follows.  graft
     * runtimes name their thread count, so this does not shrink them. */
    variant = "OpenMP, held to 1 thread";
    omp_set_num_threads(1);
    break;
  }
  snprintf(buf, len, "%s (%s)", openblas_get_config(), variant);
#else
  snprintf(buf, len, "CBLAS (not OpenBLAS; threading as configured)");
#endif
}

/* ---- baselines: GEMMs called directly, Adam in plain C ------------------- */

/* One GEMM: C [m, n] = op(A) op(B), op(A) [m, k], row-major. */
typedef struct bench_gemm {
  int ta, tb, m, n, k;
} bench_gemm;

#define BENCH_MAX_GEMMS 16

/* A list of GEMMs with their operands (A uniform in [-1, 1), B in
 * [-0.05, 0.05), seeded per GEMM). */
typedef struct bench_gemm_set {
  int n;
  const bench_gemm *g;
  float *a[BENCH_MAX_GEMMS], *b[BENCH_MAX_GEMMS], *c[BENCH_MAX_GEMMS];
} bench_gemm_set;

static inline void bench_gemm_set_free(bench_gemm_set *s) {
  for (int i = 0; i < s->n; i++) free(s->a[i]), free(s->b[i]), free(s->c[i]);
  memset(s, 0, sizeof *s);
}

/* The n (<= BENCH_MAX_GEMMS) GEMMs g, which must outlive s.  0, or -1 after
 * a message (s freed). */
static inline int bench_gemm_set_init(bench_gemm_set *s, const bench_gemm *g, int n) {
  memset(s, 0, sizeof *s);
  if (n < 0 || n > BENCH_MAX_GEMMS) {
    fprintf(stderr, BENCH_PROG ": %d GEMMs (at most %d)\n", n, BENCH_MAX_GEMMS);
    return -1;
  }
  s->g = g;
  for (s->n = 0; s->n < n; s->n++) {
    const int i = s->n;
    const int64_t na = (int64_t)g[i].m * g[i].k, nb = (int64_t)g[i].k * g[i].n;
    s->a[i] = bench_alloc_f32(na);
    s->b[i] = bench_alloc_f32(nb);
    s->c[i] = bench_alloc_f32((int64_t)g[i].m * g[i].n);
    if (!s->a[i] || !s->b[i] || !s->c[i]) {
      s->n++;
      bench_gemm_set_free(s);
      return bench_oom();
    }
    bench_fill_f32(s->a[i], na, 20 + (uint64_t)i, 1.0f);
    bench_fill_f32(s->b[i], nb, 40 + (uint64_t)i, 0.05f);
  }
  return 0;
}

/* Each GEMM once, one cblas_sgemm call each (BLAS as bench_setup_blas
 * left it). */
static inline void bench_gemm_set_run(const bench_gemm_set *s) {
  for (int i = 0; i < s->n; i++) {
    const bench_gemm *g = &s->g[i];
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                g->tb ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, 1.0f, s->a[i],
                g->ta ? g->m : g->k, s->b[i], g->tb ? g->k : g->n, 0.0f, s->c[i], g->n);
  }
}

/* Adam over n f32 parameters in plain C: what an optimizer step cannot
 * avoid (read w, g, m, v; write w, m, v). */
typedef struct bench_adam {
  int64_t n, t; /* parameters, steps taken */
  float *w, *g, *m, *v;
} bench_adam;

static inline void bench_adam_free(bench_adam *a) {
  free(a->w), free(a->g), free(a->m), free(a->v);
  memset(a, 0, sizeof *a);
}

/* w and g seeded, m and v zero.  0, or -1 after a message (a freed). */
static inline int bench_adam_init(bench_adam *a, int64_t n) {
  memset(a, 0, sizeof *a);
  a->n = n;
  a->w = bench_alloc_f32(n), a->g = bench_alloc_f32(n);
  a->m = bench_alloc_f32(n), a->v = bench_alloc_f32(n);
  if (!a->w || !a->g || !a->m || !a->v) {
    bench_adam_free(a);
    return bench_oom();
  }
  bench_fill_f32(a->w, n, 31, 0.05f);
  bench_fill_f32(a->g, n, 32, 0.01f);
  return 0;
}

/* One step (betas 0.9 / 0.999, eps 1e-8): graft's UPDATE kernel's formula
 * and order of operations, the bias corrections in double. */
static inline void bench_adam_step(bench_adam *a, float lr) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  a->t++;
  const float c1 = (float)(1.0 - pow(0.9, (double)a->t));
  const float c2s = (float)sqrt(1.0 - pow(0.999, (double)a->t));
  const float step = lr / c1;
  float *restrict w = a->w, *restrict m = a->m, *restrict v = a->v;
  const float *restrict g = a->g;
  for (int64_t i = 0; i < a->n; i++) {
    float mn = b1 * m[i] + (1.0f - b1) * g[i];
    float vn = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    float denom = sqrtf(vn) / c2s + eps;
    m[i] = mn;
    v[i] = vn;
    w[i] = w[i] - step * (mn / denom);
  }
}

/* ---- the run header ----------------------------------------------------- */

typedef struct bench_info {
  char commit[64];
  char cpu[256];
  long nproc;  /* CPUs this process may run on (affinity mask) */
  long online; /* CPUs online */
  int n_env;
  char **env;  /* GRAFT_*, OMP_*, OPENBLAS_* entries of environ, sorted; free */
  char blas[320]; /* the BLAS library (bench_setup_blas), or "" */
} bench_info;

/* An extra header field: "# key: value" or "key":"value". */
typedef struct bench_kv {
  const char *key, *value;
} bench_kv;

static inline const char *bench_compiler(void) {
#if defined(__clang__) || !defined(__GNUC__)
  return __VERSION__;
#else
  return "gcc " __VERSION__;
#endif
}

static inline void bench_get_commit(char *buf, size_t len) {
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
  bench_chomp(line);
  if (got && status == 0 && line[0]) snprintf(buf, len, "%s", line);
}

static inline void bench_get_cpu_model(char *buf, size_t len) {
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
        bench_chomp(buf);
        found = 1;
        break;
      }
    }
  }
  fclose(f);
}

static inline int bench_collect_env(bench_info *info) {
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
  qsort(info->env, (size_t)info->n_env, sizeof *info->env, bench_cmp_str);
  return 0;
}

/* Fill info; with hold_blas, also hold BLAS to one thread and describe it
 * in info->blas (bench_setup_blas).  0, or -1 when out of memory (after
 * saying so).  Free with bench_info_free. */
static inline int bench_info_collect(bench_info *info, int hold_blas) {
  memset(info, 0, sizeof *info);
  bench_get_commit(info->commit, sizeof info->commit);
  bench_get_cpu_model(info->cpu, sizeof info->cpu);
  info->online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  info->nproc = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : info->online;
  if (bench_collect_env(info)) return bench_oom();
  if (hold_blas) bench_setup_blas(info->blas, sizeof info->blas);
  return 0;
}

static inline void bench_info_free(bench_info *info) {
  free(info->env);
  info->env = NULL;
  info->n_env = 0;
}

/* Print the header: with json, one object {"type":"header","bench":...};
 * otherwise "# bench: title" and one "# key: value" line per field.  extra
 * (n_extra entries) follows nproc; the environment comes last.  The caller
 * prints its own column legend after a text header. */
static inline void bench_header_print(const bench_info *info, const char *bench,
                                      const char *title, const bench_kv *extra, int n_extra,
                                      int json) {
  if (json) {
    printf("{\"type\":\"header\",\"bench\":");
    bench_json_str(bench);
    printf(",\"commit\":");
    bench_json_str(info->commit);
    printf(",\"compiler\":");
    bench_json_str(bench_compiler());
    printf(",\"cpu\":");
    bench_json_str(info->cpu);
    printf(",\"nproc\":%ld,\"online_cpus\":%ld", info->nproc, info->online);
    for (int i = 0; i < n_extra; i++) {
      putchar(',');
      bench_json_str(extra[i].key);
      putchar(':');
      bench_json_str(extra[i].value);
    }
    printf(",\"env\":{");
    for (int i = 0; i < info->n_env; i++) {
      const char *eq = strchr(info->env[i], '=');
      char name[256];
      size_t nl = eq ? (size_t)(eq - info->env[i]) : strlen(info->env[i]);
      if (nl >= sizeof name) nl = sizeof name - 1;
      memcpy(name, info->env[i], nl);
      name[nl] = '\0';
      printf("%s", i ? "," : "");
      bench_json_str(name);
      putchar(':');
      bench_json_str(eq ? eq + 1 : "");
    }
    printf("}}\n");
    return;
  }
  printf("# %s: %s\n", bench, title);
  printf("# commit: %s\n", info->commit);
  printf("# compiler: %s\n", bench_compiler());
  printf("# cpu: %s\n", info->cpu);
  printf("# nproc: %ld (online %ld)\n", info->nproc, info->online);
  for (int i = 0; i < n_extra; i++) printf("# %s: %s\n", extra[i].key, extra[i].value);
  if (info->n_env == 0) printf("# env: (no GRAFT_*, OMP_* or OPENBLAS_* variables)\n");
  for (int i = 0; i < info->n_env; i++) printf("# env: %s\n", info->env[i]);
}

/* CPUs the calling thread may run on now (its affinity mask), or -1. */
static inline long bench_thread_cpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
}

/* After the rows: the calling thread's CPU count before and after the
 * experiments, since an executor may bind the thread that calls it. */
static inline void bench_footer_print(long cpus_before, long cpus_after, int json) {
  if (json)
    printf("{\"type\":\"footer\",\"caller_cpus_before\":%ld,\"caller_cpus_after\":%ld}\n",
           cpus_before, cpus_after);
  else
    printf("# calling thread may run on %ld CPU(s) before the experiments, %ld after%s\n",
           cpus_before, cpus_after,
           cpus_after < cpus_before ? " (an executor bound it and left it bound)" : "");
}

/* ---- the command line ------------------------------------------------------- */

#define BENCH_MAX_REPS 100000

/* One of a benchmark's own options: arg, with val the argument after it
 * (NULL when arg is the last).  Returns how many arguments it takes (1, or
 * 2 with val), 0 when arg is none of its options, or -1 after a message
 * about a bad value. */
typedef int (*bench_opt_fn)(void *ctx, const char *arg, const char *val);

/* Parses argv: --json sets *json; --help or -h prints usage to stdout and
 * exits 0; --reps N sets *reps (min_reps..max_reps); own (may be NULL) takes
 * the benchmark's other options.  Anything else prints usage to stderr.
 * Returns 0, or -1 for a bad command line. */
static inline int bench_parse_args(int argc, char **argv, int *json, int *reps, int min_reps,
                                   int max_reps, void (*usage)(FILE *), bench_opt_fn own,
                                   void *ctx) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    int took = 0;
    if (strcmp(arg, "--json") == 0) {
      *json = 1;
      took = 1;
    } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (strcmp(arg, "--reps") == 0 && val) {
      char *end;
      long r = strtol(val, &end, 10);
      if (*end || r < min_reps || r > max_reps) {
        if (max_reps == BENCH_MAX_REPS)
          fprintf(stderr, BENCH_PROG ": --reps needs an integer >= %d\n", min_reps);
        else
          fprintf(stderr, BENCH_PROG ": --reps needs an integer in %d..%d\n", min_reps, max_reps);
        return -1;
      }
      *reps = (int)r;
      took = 2;
    } else if (own) {
      took = own(ctx, arg, val);
      if (took < 0) return -1;
    }
    if (took == 0) {
      usage(stderr);
      return -1;
    }
    i += took - 1;
  }
  return 0;
}

/* The options of a benchmark that has none of its own. */
typedef struct bench_opts {
  int json;
  int reps;
} bench_opts;

/* The value of --threads (an extra thread count, 3..BENCH_MAX_THREADS,
 * beyond the 1 and 2 every benchmark runs): 2 (arguments taken) with
 * *threads set, or -1 after a message. */
#define BENCH_MAX_THREADS 1024
static inline int bench_opt_threads(const char *val, int *threads) {
  char *end;
  long n = strtol(val, &end, 10);
  if (*end || end == val || n < 3 || n > BENCH_MAX_THREADS) {
    fprintf(stderr, BENCH_PROG ": --threads needs an integer in 3..%d\n", BENCH_MAX_THREADS);
    return -1;
  }
  *threads = (int)n;
  return 2;
}

/* bench_parse_args into opt; reps is default_reps unless given. */
static inline int bench_opts_parse(int argc, char **argv, bench_opts *opt, int min_reps,
                                   int default_reps, int max_reps, void (*usage)(FILE *)) {
  opt->json = 0;
  opt->reps = default_reps;
  return bench_parse_args(argc, argv, &opt->json, &opt->reps, min_reps, max_reps, usage, NULL,
                          NULL);
}

/* ---- graft -------------------------------------------------------------------- */

/* 0 for GRAFT_OK; otherwise prints what failed (and f's message) and -1. */
static inline int bench_report(graft_status s, const char *what, const graft_function *f) {
  if (s == GRAFT_OK) return 0;
  fprintf(stderr, BENCH_PROG ": %s failed: %s (%s)%s%s\n", what, graft_status_name(s),
          graft_status_str(s), f ? ": " : "", f ? graft_function_errmsg(f) : "");
  return -1;
}

/* A runtime of the options ro; desc (may be NULL) receives
 * graft_runtime_describe.  0, or -1 after a message. */
static inline int bench_runtime_create_opts(const graft_runtime_opts *ro, graft_runtime **rt,
                                            char *desc, size_t desc_len) {
  char err[512] = "";
  graft_status st = graft_runtime_create_ex(ro, rt, err, sizeof err);
  if (st != GRAFT_OK) {
    fprintf(stderr, BENCH_PROG ": graft_runtime_create (%s, %d threads) failed: %s (%s): %s\n",
            ro->sched ? ro->sched : "default", ro->num_threads, graft_status_name(st),
            graft_status_str(st), err);
    return -1;
  }
  if (desc) graft_runtime_describe(*rt, desc, desc_len);
  return 0;
}

/* A runtime with the scheduler sched on threads threads; grain 0 keeps the
 * default, trace_path NULL writes no trace; desc (may be NULL) receives
 * graft_runtime_describe.  0, or -1 after a message. */
static inline int bench_runtime_create(const char *sched, int threads, int64_t grain,
                                       const char *trace_path, graft_runtime **rt, char *desc,
                                       size_t desc_len) {
  graft_runtime_opts ro;
  graft_runtime_opts_init(&ro);
  ro.num_threads = threads;
  ro.sched = sched;
  ro.trace_path = trace_path;
  if (grain > 0) ro.grain = grain;
  return bench_runtime_create_opts(&ro, rt, desc, desc_len);
}

/* A function on rt; 0, or -1 after a message. */
static inline int bench_function_create(graft_runtime *rt, const char *name, graft_trace_fn trace,
                                        void *user, int n_inputs, int n_outputs,
                                        graft_function **f) {
  graft_function_desc desc = {
      .name = name, .trace = trace, .user = user, .n_inputs = n_inputs, .n_outputs = n_outputs};
  return bench_report(graft_function_create(rt, &desc, f), "graft_function_create", NULL);
}

/* An f32 variable [rows, cols] (cols 0: a vector [rows]) holding data. */
static inline int bench_variable_f32(const char *name, int64_t rows, int64_t cols,
                                     const float *data, int flags, graft_variable **v) {
  const int64_t shape[2] = {rows, cols};
  return bench_report(
      graft_variable_create(NULL, name, GRAFT_F32, cols ? 2 : 1, shape, data, flags, v),
      "graft_variable_create", NULL);
}

/* A note on stderr when f (if any) traced other than once. */
static inline void bench_warn_traced(const graft_function *f, const char *what) {
  if (f && graft_function_trace_count(f) != 1)
    fprintf(stderr, BENCH_PROG ": warning: %s traced %d times (expected 1)\n", what,
            graft_function_trace_count(f));
}

/* ---- timing ------------------------------------------------------------------- */

/* Calls per rep so that a rep lasts about target_us, from one call of one_us
 * (fallback when that was too short to see), within 1..max. */
static inline int bench_calls_per_rep(double one_us, double target_us, int fallback, int max) {
  int n = one_us > 0.0 ? (int)ceil(target_us / one_us) : fallback;
  return n < 1 ? 1 : n > max ? max : n;
}

/* A timed unit of config c: runs its calls and returns how many (>= 1), or
 * -1 when one failed. */
typedef int (*bench_run_fn)(void *ctx, int c);
/* Untimed, after each timed unit of config c: 0, or -1 to stop. */
typedef int (*bench_check_fn)(void *ctx, int c);

/* reps rounds over the n configs, rotating which goes first (round r starts
 * at config r % n, so a config's neighbours in time are the same configs
 * but none is always first);
 * t[c * reps + r] receives config c's time per call in round r, in us.
 * prime (may be NULL) runs right before each timed unit, untimed: one call
 * of the same config, say, so that the unit finds the caches its own
 * previous call left (as a training loop does) rather than those of
 * whichever config ran before it.  check (may be NULL) follows each unit,
 * untimed.  0, or -1 at the first failure. */
static inline int bench_timed_reps_primed(int n, int reps, double *t, bench_run_fn run,
                                          bench_check_fn prime, bench_check_fn check, void *ctx) {
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < n; k++) {
      int c = (r + k) % n;
      if (prime && prime(ctx, c)) return -1;
      double t0 = bench_now_us();
      int calls = run(ctx, c);
      double us = bench_now_us() - t0;
      if (calls < 1) return -1;
      t[c * reps + r] = us / calls;
      if (check && check(ctx, c)) return -1;
    }
  return 0;
}

/* bench_timed_reps_primed without a prime: each unit runs on the caches the
 * config before it left. */
static inline int bench_timed_reps(int n, int reps, double *t, bench_run_fn run,
                                   bench_check_fn check, void *ctx) {
  return bench_timed_reps_primed(n, reps, t, run, NULL, check, ctx);
}

/* The median of v[0..n), *min its smallest; sorts v in place. */
static inline double bench_median_min(double *v, int n, double *min) {
  double med = bench_median(v, n);
  *min = v[0];
  return med;
}

/* ---- rows and checks ------------------------------------------------------------ */

/* ,"key":v in fmt, or ,"key":null when v is not finite. */
static inline void bench_json_num(const char *key, double v, const char *fmt) {
  printf(",\"%s\":", key);
  if (isfinite(v))
    printf(fmt, v);
  else
    printf("null");
}

/* v in fmt into buf, or "-" when v is NaN; returns buf. */
static inline const char *bench_fmt_num(char *buf, size_t len, const char *fmt, double v) {
  if (isnan(v))
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, fmt, v);
  return buf;
}

/* The header field "runtime <sched>/<threads>": desc; key (len bytes, at
 * least 32) holds the name and must outlive the field. */
static inline bench_kv bench_runtime_kv(char *key, size_t len, const char *sched, int threads,
                                        const char *desc) {
  snprintf(key, len, "runtime %s/%d", sched, threads);
  return (bench_kv){key, desc};
}

/* A check row: {"type":"check",...} or "check <name> ok|FAIL <detail>". */
static inline void bench_print_check(int json, const char *name, int ok, const char *detail) {
  if (json) {
    printf("{\"type\":\"check\",\"name\":\"%s\",\"ok\":%s,\"detail\":", name, ok ? "true" : "false");
    bench_json_str(detail);
    printf("}\n");
  } else {
    printf("check %-16s %-4s %s\n", name, ok ? "ok" : "FAIL", detail);
  }
}

/* ---- a function's graph, from its DOT ----------------------------------------- */

typedef struct bench_gnode {
  char op[32];
  int role;      /* 0 forward, 1 backward (firebrick), 2 tangent (royalblue) */
  int part;      /* the includer's, zero when read */
  int live;      /* not pruned */
  int rank, n_in;
  int64_t shape[GRAFT_MAX_RANK];
  uint32_t in[4]; /* the first four inputs */
} bench_gnode;

typedef struct bench_graph {
  int n;
  bench_gnode *nodes;
  long last_backward; /* highest backward node id, -1 if none */
} bench_graph;

static inline void bench_graph_shape(const char *s, bench_gnode *g) {
  s = strchr(s, '[');
  if (!s) return;
  s++;
  while (*s && *s != ']' && g->rank < GRAFT_MAX_RANK) {
    char *e;
    long long v = strtoll(s, &e, 10);
    if (e == s) break;
    g->shape[g->rank++] = v;
    s = *e == ',' ? e + 1 : e;
  }
}

static inline int bench_graph_grow(bench_graph *g, unsigned id) {
  if ((int)id < g->n) return 0;
  int n = (int)id + 1;
  bench_gnode *p = realloc(g->nodes, (size_t)n * sizeof *p);
  if (!p) return -1;
  memset(p + g->n, 0, (size_t)(n - g->n) * sizeof *p);
  g->nodes = p;
  g->n = n;
  return 0;
}

static inline void bench_graph_free(bench_graph *g) {
  free(g->nodes);
  g->nodes = NULL;
  g->n = 0;
}

/* Reads f's graph through graft_function_write_dot: per node its op, role,
 * liveness, shape and first inputs.  0, or -1 after a message. */
static inline int bench_graph_read(graft_function *f, bench_graph *g) {
  memset(g, 0, sizeof *g);
  g->last_backward = -1;
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  if (!mem) return bench_oom();
  graft_status st = graft_function_write_dot(f, mem);
  fclose(mem);
  if (bench_report(st, "graft_function_write_dot", f)) {
    free(buf);
    return -1;
  }
  int rc = 0;
  for (char *line = buf, *next; line && *line && rc == 0; line = next) {
    char *nl = strchr(line, '\n');
    next = nl ? nl + 1 : NULL;
    if (nl) *nl = '\0';
    unsigned src, dst, id;
    if (sscanf(line, " n%u -> n%u;", &src, &dst) == 2) {
      if ((int)dst >= g->n) continue;
      bench_gnode *d = &g->nodes[dst];
      if (d->n_in < 4) d->in[d->n_in] = src;
      d->n_in++;
      continue;
    }
    const char *label = strstr(line, "label=\"#");
    if (!label || sscanf(line, " n%u [", &id) != 1) continue;
    if (bench_graph_grow(g, id)) {
      rc = -1;
      break;
    }
    bench_gnode *d = &g->nodes[id];
    d->live = strstr(line, "style=\"filled\"") != NULL;
    d->role = strstr(line, ", color=firebrick") ? 1 : strstr(line, ", color=royalblue") ? 2 : 0;
    if (d->role == 1 && (long)id > g->last_backward) g->last_backward = id;
    const char *p = label + 8;
    while (isdigit((unsigned char)*p)) p++;
    while (*p == ' ') p++;
    size_t k = 0;
    while (*p && *p != ' ' && *p != '\\' && *p != '"' && k + 1 < sizeof d->op) d->op[k++] = *p++;
    d->op[k] = '\0';
    const char *dims = strstr(p, "\\n"); /* the label's second line: dtype and shape */
    if (dims) bench_graph_shape(dims, d);
  }
  free(buf);
  if (rc) {
    bench_graph_free(g);
    return bench_oom();
  }
  return 0;
}

/* One matmul node: batch x [M,K] @ [K,N]; ta / tb are -1 where the shapes
 * cannot tell (a square operand). */
typedef struct bench_mm {
  uint32_t id;
  int backward;
  int64_t batch, M, N, K;
  int ta, tb;
} bench_mm;

/* 1 and *e when node id of g is a live matmul of operands of rank >= 2,
 * else 0.  K is exact even when a is square. */
static inline int bench_graph_matmul(const bench_graph *g, int id, bench_mm *e) {
  const bench_gnode *m = &g->nodes[id];
  if (!m->live || strcmp(m->op, "matmul") != 0 || m->rank < 2 || m->n_in < 2) return 0;
  if ((int)m->in[0] >= g->n || (int)m->in[1] >= g->n) return 0;
  const bench_gnode *a = &g->nodes[m->in[0]], *b = &g->nodes[m->in[1]];
  if (a->rank < 2 || b->rank < 2) return 0;
  *e = (bench_mm){.id = (uint32_t)id, .backward = m->role == 1, .batch = 1};
  for (int d = 0; d < m->rank - 2; d++) e->batch *= m->shape[d];
  e->M = m->shape[m->rank - 2];
  e->N = m->shape[m->rank - 1];
  int64_t a0 = a->shape[a->rank - 2], a1 = a->shape[a->rank - 1];
  int64_t b0 = b->shape[b->rank - 2], b1 = b->shape[b->rank - 1];
  e->K = a0 == e->M ? a1 : a0;
  e->ta = a0 == a1 ? -1 : a1 == e->M;
  e->tb = b0 == b1 ? -1 : b0 == e->N;
  return 1;
}

/* ---- where a call's time goes: a Chrome trace ------------------------------------ */

/* One kernel run of the trace: a tile of a node. */
typedef struct bench_tile {
  uint32_t node;
  int32_t tile;
  double us;
} bench_tile;

static inline int bench_cmp_tile(const void *a, const void *b) {
  const bench_tile *x = a, *y = b;
  if (x->node != y->node) return (x->node > y->node) - (x->node < y->node);
  if (x->tile != y->tile) return (x->tile > y->tile) - (x->tile < y->tile);
  return (x->us > y->us) - (x->us < y->us);
}

/* The kernel events of the Chrome trace at path from offset on, one entry
 * per (node, tile) in that order, with the median of its durations: a call
 * in which the thread was preempted (other load on the machine) does not
 * inflate it.  0 (*out: free), or -1 after a message. */
static inline int bench_trace_tiles(const char *path, long offset, bench_tile **out,
                                    int64_t *n_out) {
  *out = NULL;
  *n_out = 0;
  FILE *fp = fopen(path, "r");
  if (!fp || fseek(fp, offset, SEEK_SET) != 0) {
    fprintf(stderr, BENCH_PROG ": cannot read the trace %s\n", path);
    if (fp) fclose(fp);
    return -1;
  }
  bench_tile *ev = NULL;
  int64_t n = 0, cap = 0;
  char line[1024];
  while (fgets(line, sizeof line, fp)) {
    const char *p = strstr(line, "{\"name\":\"");
    if (!p || !strstr(p, "\"ph\":\"X\"")) continue;
    const char *hash = strstr(p, " #"), *dur = strstr(p, "\"dur\":"), *tile = strstr(p, "\"tile\":");
    if (!hash || !dur || !tile) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 1024;
      bench_tile *grown = realloc(ev, (size_t)cap * sizeof *ev);
      if (!grown) {
        fclose(fp);
        free(ev);
        return bench_oom();
      }
      ev = grown;
    }
    ev[n++] = (bench_tile){(uint32_t)strtoul(hash + 2, NULL, 10),
                           (int32_t)strtol(tile + 7, NULL, 10), strtod(dur + 6, NULL)};
  }
  fclose(fp);
  qsort(ev, (size_t)n, sizeof *ev, bench_cmp_tile);
  int64_t m = 0;
  for (int64_t i = 0, j; i < n; i = j) {
    for (j = i; j < n && ev[j].node == ev[i].node && ev[j].tile == ev[i].tile;) j++;
    int64_t c = j - i;
    double med = c % 2 ? ev[i + c / 2].us : 0.5 * (ev[i + c / 2 - 1].us + ev[i + c / 2].us);
    ev[m++] = (bench_tile){ev[i].node, ev[i].tile, med};
  }
  *out = ev;
  *n_out = m;
  return 0;
}

/* What a traced run gives: the median call, f's graph and the tiles. */
typedef struct bench_traced {
  double wall_us;
  bench_graph graph;
  bench_tile *tiles; /* bench_trace_tiles */
  int64_t n_tiles;
} bench_traced;

static inline void bench_traced_free(bench_traced *tr) {
  bench_graph_free(&tr->graph);
  free(tr->tiles);
  tr->tiles = NULL;
  tr->n_tiles = 0;
}

/* Makes the function of a traced run on rt: 0, or -1 after a message. */
typedef int (*bench_make_fn)(void *ctx, graft_runtime *rt, graft_function **f);
/* One call of it: 0, or -1 after a message. */
typedef int (*bench_call_fn)(void *ctx, graft_function *f);

/* A function (make) on a fresh ws runtime of threads threads that writes a
 * Chrome trace to a temporary file: one call to trace and compile, then
 * calls timed calls, whose tiles the trace gives.  0 (free *tr with
 * bench_traced_free), or -1 after a message. */
static inline int bench_traced_run(int threads, int calls, bench_make_fn make, bench_call_fn call,
                                   void *ctx, bench_traced *tr) {
  memset(tr, 0, sizeof *tr);
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  char path[1024];
  snprintf(path, sizeof path, "%s/" BENCH_PROG "_trace_XXXXXX", dir);
  int fd = mkstemp(path);
  if (fd < 0) {
    fprintf(stderr, BENCH_PROG ": cannot create a temporary trace file in %s\n", dir);
    return -1;
  }
  close(fd);
  graft_runtime *rt = NULL;
  graft_function *f = NULL;
  double *wall = malloc((size_t)(calls > 0 ? calls : 1) * sizeof *wall);
  struct stat sb;
  int rc = -1;
  if (!wall) {
    bench_oom();
    goto out;
  }
  if (bench_runtime_create("ws", threads, 0, path, &rt, NULL, 0) || make(ctx, rt, &f) ||
      call(ctx, f) || stat(path, &sb) != 0)
    goto out;
  for (int i = 0; i < calls; i++) {
    double t0 = bench_now_us();
    if (call(ctx, f)) goto out;
    wall[i] = bench_now_us() - t0;
  }
  tr->wall_us = bench_median(wall, calls);
  if (bench_graph_read(f, &tr->graph)) goto out;
  graft_function_destroy(f);
  f = NULL;
  graft_runtime_destroy(rt); /* closes the trace */
  rt = NULL;
  rc = bench_trace_tiles(path, (long)sb.st_size, &tr->tiles, &tr->n_tiles);
out:
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
  free(wall);
  unlink(path);
  if (rc) bench_traced_free(tr);
  return rc;
}

/* Time by (part, op): nodes and tiles counted, us summed. */
typedef struct bench_op_time {
  int part;
  char op[32];
  int nodes;
  int64_t tiles;
  double us;
  int64_t last_node; /* the node of the last tile counted, -1 if none */
} bench_op_time;

#define BENCH_MAX_OPS 64

typedef struct bench_ops {
  int n;
  bench_op_time v[BENCH_MAX_OPS];
} bench_ops;

/* Adds a tile of node (-1: a node not to count) taking us to (part, op);
 * NULL (and nothing added) when the table is full.  The tiles come in node
 * order (bench_trace_tiles), so a node counts once. */
static inline bench_op_time *bench_ops_add(bench_ops *t, int part, const char *op, int64_t node,
                                           double us) {
  bench_op_time *o = NULL;
  for (int i = 0; i < t->n && !o; i++)
    if (t->v[i].part == part && strcmp(t->v[i].op, op) == 0) o = &t->v[i];
  if (!o) {
    if (t->n == BENCH_MAX_OPS) return NULL;
    o = &t->v[t->n++];
    memset(o, 0, sizeof *o);
    o->part = part;
    o->last_node = -1;
    snprintf(o->op, sizeof o->op, "%s", op);
  }
  o->us += us;
  o->tiles++;
  if (node >= 0 && node != o->last_node) o->nodes++, o->last_node = node;
  return o;
}

static inline int bench_cmp_op_time(const void *a, const void *b) {
  double x = ((const bench_op_time *)a)->us, y = ((const bench_op_time *)b)->us;
  return (x < y) - (x > y);
}

/* Largest first. */
static inline void bench_ops_sort(bench_ops *t) {
  qsort(t->v, (size_t)t->n, sizeof t->v[0], bench_cmp_op_time);
}

#endif /* GRAFT_BENCH_COMMON_H */
