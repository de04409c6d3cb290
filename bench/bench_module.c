/* bench_module: the module walks on a 100-layer sequential model, against
 * plain C loops that produce the same result from arrays prepared ahead.
 *
 * The model: a root "model" holding --layers (default 100) modules created
 * under it ("dense", "dense_1", ...), each with two trainable f32
 * variables w [4,4] and b [4]: 200 variables, 101 modules.  Each rep runs
 * every experiment (order rotated from rep to rep), each many times in a
 * row (calls_per_rep, sized so a rep of the slowest walk lasts about 1 ms):
 *   variables   graft_module_variables into an array of 200 handles
 *   trainable   graft_module_trainable_variables into the same
 *   submodules  graft_module_submodules into an array of 100 handles
 *   flatten     graft_module_flatten with a visit that counts the paths and
 *               adds up their lengths (so every path is read)
 *   copy_vars   baseline: a C loop copying the 200 handles from an array
 *   copy_mods   baseline: the same for the 100 module handles
 *   build_paths baseline: a C loop building the 200 paths ("dense_7.w")
 *               from prepared prefixes and names into one buffer, calling
 *               the same visit
 * ratio = a walk's median / its baseline's median; target: each walk
 * <= 20 us (issue 15; TensorFlow's module walk took about 2 ms).  Check
 * rows confirm that the walks give what the baselines give.
 *
 * Usage: bench_module [--json] [--reps N] [--layers N]
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROG "bench_module"
#include "bench_common.h"
#include "graft.h"

#define DEFAULT_REPS 51
#define MIN_REPS 1
#define MAX_REPS 100000
#define TARGET_US 20.0
#define REP_US 1000.0

typedef struct options {
  int json, reps, layers;
} options;

enum { E_VARS, E_TRAINABLE, E_SUBMODULES, E_FLATTEN, E_COPY_VARS, E_COPY_MODS, E_BUILD_PATHS, N_EXP };
static const char *const NAMES[N_EXP] = {"variables", "trainable", "submodules", "flatten",
                                         "copy_vars", "copy_mods", "build_paths"};
/* The baseline of each walk (-1: it is a baseline). */
static const int BASE[N_EXP] = {E_COPY_VARS, E_COPY_VARS, E_COPY_MODS, E_BUILD_PATHS, -1, -1, -1};

typedef struct path_sum {
  int64_t paths, chars;
} path_sum;

typedef struct ctx {
  graft_module *root;
  int n_vars, n_mods, calls;
  graft_variable **vars, **vars_out; /* in walk order, as made; the walks' output */
  graft_module **mods, **mods_out;
  char **prefix;  /* per variable: its module's attribute + "." */
  const char **attr;
  path_sum sum;
  char path[256];
} ctx;

/* ---- the experiments ------------------------------------------------------------ */

static graft_status count_path(const char *path, graft_variable *v, void *user) {
  (void)v;
  path_sum *s = user;
  s->paths++;
  s->chars += (int64_t)strlen(path);
  return GRAFT_OK;
}

static int walk_failed(const char *what) {
  fprintf(stderr, BENCH_PROG ": %s failed: %s\n", what, graft_last_errmsg());
  return -1;
}

static int run_one(void *user, int e) {
  ctx *c = user;
  int64_t n = 0;
  for (int k = 0; k < c->calls; k++) {
    switch (e) {
    case E_VARS:
      if (graft_module_variables(c->root, c->n_vars, c->vars_out, &n)) return walk_failed(NAMES[e]);
      break;
    case E_TRAINABLE:
      if (graft_module_trainable_variables(c->root, c->n_vars, c->vars_out, &n))
        return walk_failed(NAMES[e]);
      break;
    case E_SUBMODULES:
      if (graft_module_submodules(c->root, c->n_mods, c->mods_out, &n)) return walk_failed(NAMES[e]);
      break;
    case E_FLATTEN:
      if (graft_module_flatten(c->root, count_path, &c->sum)) return walk_failed(NAMES[e]);
      break;
    case E_COPY_VARS:
      for (int i = 0; i < c->n_vars; i++) c->vars_out[i] = c->vars[i];
      break;
    case E_COPY_MODS:
      for (int i = 0; i < c->n_mods; i++) c->mods_out[i] = c->mods[i];
      break;
    default:
      for (int i = 0; i < c->n_vars; i++) {
        size_t p = strlen(c->prefix[i]), a = strlen(c->attr[i]);
        memcpy(c->path, c->prefix[i], p);
        memcpy(c->path + p, c->attr[i], a + 1);
        count_path(c->path, c->vars[i], &c->sum);
      }
    }
  }
  return c->calls;
}

/* ---- setup ------------------------------------------------------------------------- */

static int build(const options *opt, ctx *c) {
  c->n_mods = opt->layers;
  c->n_vars = 2 * opt->layers;
  c->vars = calloc((size_t)c->n_vars, sizeof *c->vars);
  c->vars_out = calloc((size_t)c->n_vars, sizeof *c->vars_out);
  c->mods = calloc((size_t)c->n_mods, sizeof *c->mods);
  c->mods_out = calloc((size_t)c->n_mods, sizeof *c->mods_out);
  c->prefix = calloc((size_t)c->n_vars, sizeof *c->prefix);
  c->attr = calloc((size_t)c->n_vars, sizeof *c->attr);
  if (!c->vars || !c->vars_out || !c->mods || !c->mods_out || !c->prefix || !c->attr)
    return bench_oom();
  if (graft_module_create(NULL, "model", &c->root)) return walk_failed("graft_module_create");
  static const char *const names[2] = {"w", "b"};
  for (int l = 0; l < opt->layers; l++) {
    if (graft_module_create(c->root, "dense", &c->mods[l])) return walk_failed("graft_module_create");
    for (int j = 0; j < 2; j++) {
      const int64_t shape[2] = {4, 4};
      int i = 2 * l + j;
      if (graft_variable_create(c->mods[l], names[j], GRAFT_F32, 2 - j, shape, NULL,
                                GRAFT_VAR_TRAINABLE, &c->vars[i]))
        return walk_failed("graft_variable_create");
      c->attr[i] = names[j];
      c->prefix[i] = malloc(strlen(graft_module_name(c->mods[l])) + 2);
      if (!c->prefix[i]) return bench_oom();
      sprintf(c->prefix[i], "%s.", graft_module_name(c->mods[l]));
    }
  }
  return 0;
}

static void cleanup(ctx *c) {
  graft_module_destroy(c->root);
  for (int i = 0; c->prefix && i < c->n_vars; i++) free(c->prefix[i]);
  free(c->prefix);
  free(c->attr);
  free(c->vars);
  free(c->vars_out);
  free(c->mods);
  free(c->mods_out);
}

/* Each walk once, compared with what the baselines give. */
static int check(const options *opt, ctx *c) {
  int ok = 1;
  char detail[256];
  static const int walks[3] = {E_VARS, E_TRAINABLE, E_SUBMODULES};
  for (int k = 0; k < 3; k++) {
    int e = walks[k];
    int calls = c->calls;
    c->calls = 1;
    memset(c->vars_out, 0, (size_t)c->n_vars * sizeof *c->vars_out);
    memset(c->mods_out, 0, (size_t)c->n_mods * sizeof *c->mods_out);
    if (run_one(c, e) < 0) return -1;
    c->calls = calls;
    int same = e == E_SUBMODULES
                   ? !memcmp(c->mods_out, c->mods, (size_t)c->n_mods * sizeof *c->mods)
                   : !memcmp(c->vars_out, c->vars, (size_t)c->n_vars * sizeof *c->vars);
    snprintf(detail, sizeof detail, "%s gives the %d handles in creation order: %s", NAMES[e],
             e == E_SUBMODULES ? c->n_mods : c->n_vars, same ? "yes" : "no");
    bench_print_check(opt->json, NAMES[e], same, detail);
    ok &= same;
  }
  path_sum walked = {0, 0}, built = {0, 0};
  if (graft_module_flatten(c->root, count_path, &walked)) return walk_failed("flatten");
  c->sum = (path_sum){0, 0};
  int calls = c->calls;
  c->calls = 1;
  run_one(c, E_BUILD_PATHS);
  c->calls = calls;
  built = c->sum;
  int same = walked.paths == built.paths && walked.chars == built.chars && walked.paths == c->n_vars;
  snprintf(detail, sizeof detail, "flatten visits %" PRId64 " paths of %" PRId64
           " characters, the baseline %" PRId64 " of %" PRId64, walked.paths, walked.chars,
           built.paths, built.chars);
  bench_print_check(opt->json, "flatten", same, detail);
  return ok && same ? 0 : -1;
}

/* ---- the command line and the output -------------------------------------------------- */

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_module [--json] [--reps N] [--layers N]\n"
          "  --json      one JSON object per line (a header, then one per row)\n"
          "  --reps N    timed repetitions per experiment (>= %d, default %d)\n"
          "  --layers N  layers of the sequential model, 2 variables each (1..100000, default 100)\n",
          MIN_REPS, DEFAULT_REPS);
}

static int own_opt(void *user, const char *arg, const char *val) {
  options *o = user;
  if (strcmp(arg, "--layers") || !val) return 0;
  char *end;
  long n = strtol(val, &end, 10);
  if (*end || end == val || n < 1 || n > 100000) {
    fprintf(stderr, BENCH_PROG ": --layers needs an integer in 1..100000\n");
    return -1;
  }
  o->layers = (int)n;
  return 2;
}

static void print_header(const bench_info *info, const options *opt, const ctx *c) {
  char model[160], reps[96];
  snprintf(model, sizeof model, "a root holding %d layers (created under it), %d f32 variables "
           "(w [4,4], b [4]), all trainable", opt->layers, c->n_vars);
  snprintf(reps, sizeof reps, "%d per experiment, order rotated, %d calls per rep", opt->reps,
           c->calls);
  bench_kv extra[] = {{"model", model}, {"reps", reps}};
  bench_header_print(info, "bench_module", "module walks vs plain C loops over the same handles",
                     extra, 2, opt->json);
  if (opt->json) return;
  printf("# median_us / min_us per call over the reps; ratio = median / the baseline's median;\n"
         "# target: each walk <= %.0f us\n", TARGET_US);
  printf("# %-11s %6s %5s %6s %10s %10s %-11s %10s %8s %6s %3s\n", "name", "items", "reps",
         "calls", "median_us", "min_us", "baseline", "base_us", "ratio", "target", "ok");
}

static void print_row(const options *opt, const ctx *c, int e, const double *med,
                      const double *min) {
  int b = BASE[e];
  int items = e == E_SUBMODULES || e == E_COPY_MODS ? c->n_mods : c->n_vars;
  double base_us = b >= 0 ? med[b] : NAN, ratio = b >= 0 ? med[e] / base_us : NAN;
  double target = b >= 0 ? TARGET_US : NAN;
  int ok = b >= 0 && med[e] <= TARGET_US;
  if (opt->json) {
    printf("{\"type\":\"row\",\"name\":\"%s\",\"items\":%d,\"reps\":%d,\"calls_per_rep\":%d",
           NAMES[e], items, opt->reps, c->calls);
    bench_json_num("median_us", med[e], "%.4f");
    bench_json_num("min_us", min[e], "%.4f");
    printf(",\"baseline\":%s%s%s", b >= 0 ? "\"" : "", b >= 0 ? NAMES[b] : "null", b >= 0 ? "\"" : "");
    bench_json_num("baseline_us", base_us, "%.4f");
    bench_json_num("ratio", ratio, "%.3f");
    bench_json_num("target_us", target, "%.1f");
    printf(",\"ok\":%s}\n", b >= 0 ? (ok ? "true" : "false") : "null");
    return;
  }
  char bu[32], ra[32], ta[32];
  printf("  %-11s %6d %5d %6d %10.3f %10.3f %-11s %10s %8s %6s %3s\n", NAMES[e], items, opt->reps,
         c->calls, med[e], min[e], b >= 0 ? NAMES[b] : "-",
         bench_fmt_num(bu, sizeof bu, "%.3f", base_us), bench_fmt_num(ra, sizeof ra, "%.2f", ratio),
         bench_fmt_num(ta, sizeof ta, "%.0f", target), b >= 0 ? (ok ? "yes" : "no") : "-");
}

/* ---- main ---------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  options opt = {.reps = DEFAULT_REPS, .layers = 100};
  if (bench_parse_args(argc, argv, &opt.json, &opt.reps, MIN_REPS, MAX_REPS, usage, own_opt, &opt))
    return 2;
  bench_info info;
  if (bench_info_collect(&info, 0)) return 1;
  ctx c = {0};
  int rc = build(&opt, &c);
  /* Calls per rep from the slowest walk (flatten), once warm. */
  if (!rc) {
    c.calls = 1;
    for (int i = 0; i < 10 && !rc; i++) rc = run_one(&c, E_FLATTEN) < 0;
    double t0 = bench_now_us();
    if (!rc) rc = run_one(&c, E_FLATTEN) < 0;
    c.calls = bench_calls_per_rep(bench_now_us() - t0, REP_US, 100, 1000000);
  }
  double *t = rc ? NULL : malloc(sizeof *t * N_EXP * (size_t)opt.reps);
  if (!rc && !t) rc = bench_oom();
  long cpus_before = bench_thread_cpus();
  if (!rc) {
    print_header(&info, &opt, &c);
    fflush(stdout);
    rc = bench_timed_reps(N_EXP, opt.reps, t, run_one, NULL, &c);
  }
  if (!rc) {
    double med[N_EXP], min[N_EXP];
    for (int e = 0; e < N_EXP; e++) med[e] = bench_median_min(t + e * opt.reps, opt.reps, &min[e]);
    for (int e = 0; e < N_EXP; e++) print_row(&opt, &c, e, med, min);
    rc = check(&opt, &c);
    bench_footer_print(cpus_before, bench_thread_cpus(), opt.json);
  }
  free(t);
  cleanup(&c);
  bench_info_free(&info);
  return rc ? 1 : 0;
}
