/* bench_common.h: what every bench/bench_<topic>.c shares.
 *
 * The run header (commit, compiler, CPU, topology, and the GRAFT_* / OMP_* /
 * OPENBLAS_* environment, as text lines under '#' or as one JSON object),
 * a monotonic clock, medians and JSON string output.  Header-only (static
 * inline) so each benchmark stays one executable built from one file.
 *
 * The includer defines _GNU_SOURCE before any system header (for
 * sched_getaffinity and CPU_COUNT).
 */
#ifndef GRAFT_BENCH_COMMON_H
#define GRAFT_BENCH_COMMON_H

#include <cblas.h>
#include <ctype.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* ---- the run header ----------------------------------------------------- */

typedef struct bench_info {
  char commit[64];
  char cpu[256];
  long nproc;  /* CPUs this process may run on (affinity mask) */
  long online; /* CPUs online */
  int n_env;
  char **env;  /* GRAFT_*, OMP_*, OPENBLAS_* entries of environ, sorted; free */
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

/* Fill info; 0, or -1 when out of memory.  Free with bench_info_free. */
static inline int bench_info_collect(bench_info *info) {
  memset(info, 0, sizeof *info);
  bench_get_commit(info->commit, sizeof info->commit);
  bench_get_cpu_model(info->cpu, sizeof info->cpu);
  info->online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  info->nproc = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : info->online;
  return bench_collect_env(info);
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

#endif /* GRAFT_BENCH_COMMON_H */
