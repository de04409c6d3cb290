/* bench_call: what one cached graft_function_call costs beyond its
 * arithmetic, on functions too small for the arithmetic to hide it.
 *
 * Functions (f32, x and y of n elements, n = 16 and 4096):
 *   add        out = x + y: one op
 *   add_alloc  the same, the output left NULL: graft allocates it each
 *              call and the caller destroys it (graft_tensor_destroy)
 *   chain10    ten elementwise ops in a row, each reading the last:
 *              + y, * x, neg, relu, - y, * y, + x, relu, neg, * x
 *   add_tiled  add on runtimes whose grain is n / 4: four tiles, so a
 *              team of two has work to share and the work-stealing
 *              executor starts its team (what a small parallel call costs)
 * each traced and compiled once (an untimed first call), then called with
 * the same inputs (and, but for add_alloc, the same output tensor), on
 *   seq/1   GRAFT_SCHED=seq, the sequential executor
 *   ws/1    the work-stealing executor, one thread (not for add_tiled)
 *   ws/2    the work-stealing executor, two threads
 *   omp/2   OpenMP tasks with depend clauses (the baseline), two threads
 *   (ws and omp at --threads N too, for a machine with more cores)
 * against the direct C loop doing the same arithmetic per element (one
 * loop over the n elements; chain10's ten steps in one loop body) into a
 * caller-owned array; and, for add, that loop run by the first thread of
 * an otherwise empty two-thread OpenMP parallel region (sched "region"):
 * the least any call that starts a team of two pays.  Every rep times each configuration's calls in a row
 * (sized so a rep lasts about REP_US), rotating which goes first;
 * median_us is the median over the reps of the time per call.
 * overhead_us = median_us - the direct loop's median; ratio = median_us /
 * the direct loop's.  Targets (issue 18): a one-op call on a small tensor
 * (add, n = 16) <= 2 us at one thread (seq, ws), <= 5 us at two (ws).  Check rows confirm
 * every configuration's output equals the direct loop's, bit for bit.
 *
 * Usage: bench_call [--json] [--reps N] [--threads N]
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROG "bench_call"
#include "bench_common.h"
#include "graft.h"

#define DEFAULT_REPS 31
#define MIN_REPS 3
#define REP_US 2000.0
#define MAX_CALLS 200000
#define TARGET_1_US 2.0
#define TARGET_2_US 5.0

/* ---- the functions ------------------------------------------------------------ */

enum { F_ADD, F_ADD_ALLOC, F_CHAIN, F_ADD_TILED, N_FUNS };
static const char *const FUN_NAMES[N_FUNS] = {"add", "add_alloc", "chain10", "add_tiled"};
#define TILES 4

typedef enum step { S_ADD_Y, S_MUL_X, S_NEG, S_RELU, S_SUB_Y, S_MUL_Y, S_ADD_X } step;
#define CHAIN_LEN 10
static const step CHAIN[CHAIN_LEN] = {S_ADD_Y, S_MUL_X, S_NEG,  S_RELU, S_SUB_Y,
                                      S_MUL_Y, S_ADD_X, S_RELU, S_NEG,  S_MUL_X};

static graft_status trace_add(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_add(t, in[0], in[1]);
  return GRAFT_OK;
}

static graft_status trace_chain(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *x = in[0], *y = in[1], *v = x;
  for (int k = 0; k < CHAIN_LEN; k++) {
    switch (CHAIN[k]) {
    case S_ADD_Y: v = graft_add(t, v, y); break;
    case S_MUL_X: v = graft_mul(t, v, x); break;
    case S_NEG: v = graft_neg(t, v); break;
    case S_RELU: v = graft_relu(t, v); break;
    case S_SUB_Y: v = graft_sub(t, v, y); break;
    case S_MUL_Y: v = graft_mul(t, v, y); break;
    case S_ADD_X: v = graft_add(t, v, x); break;
    }
  }
  out[0] = v;
  return GRAFT_OK;
}

/* The direct loops: what graft's kernels compute per element, in the same
 * order (relu as the kernel writes it: NaN passes, -0 becomes +0).  Not
 * inlined, so the timed loop calls them like it calls graft. */
__attribute__((noinline)) static void direct_add(const float *x, const float *y, float *o,
                                                 int64_t n) {
  for (int64_t i = 0; i < n; i++) o[i] = x[i] + y[i];
}

static inline float relu(float v) { return v > 0.0f || v != v ? v : 0.0f; }

__attribute__((noinline)) static void direct_chain(const float *x, const float *y, float *o,
                                                   int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    v = v + y[i];
    v = v * x[i];
    v = -v;
    v = relu(v);
    v = v - y[i];
    v = v * y[i];
    v = v + x[i];
    v = relu(v);
    v = -v;
    o[i] = v * x[i];
  }
}

/* ---- configurations ------------------------------------------------------------ */

#define MAX_RTS 16
typedef struct rt_conf {
  const char *sched;
  int threads;
  int64_t n;          /* add_tiled's runtime for size n (grain n / TILES), or 0 */
  graft_runtime *rt;
  char desc[512];
} rt_conf;

/* One timed experiment: a function on a runtime, or a direct loop (rt
 * DIRECT), or add's loop inside a two-thread region (rt REGION). */
enum { DIRECT = -1, REGION = -2 };
typedef struct experiment {
  int fun, rt;
  int64_t n;
  graft_function *f;
  graft_tensor *out;   /* the output tensor (add_alloc: none) */
  float *direct_out;   /* direct loops write here */
  int calls;
} experiment;

typedef struct ctx {
  int n_rts;
  rt_conf rts[MAX_RTS];
  int n_exps;
  experiment *exps;
  float *x, *y;        /* the largest n */
  graft_tensor *in[2][2]; /* per size: x, y wrapped */
  int64_t sizes[2];
} ctx;

static int size_index(const ctx *c, int64_t n) { return n == c->sizes[0] ? 0 : 1; }

static int call_once(ctx *c, experiment *e) {
  graft_tensor *const *in = c->in[size_index(c, e->n)];
  if (e->rt == REGION) {
#pragma omp parallel num_threads(2)
    if (omp_get_thread_num() == 0) direct_add(c->x, c->y, e->direct_out, e->n);
    return 0;
  }
  if (e->rt == DIRECT) {
    (e->fun == F_CHAIN ? direct_chain : direct_add)(c->x, c->y, e->direct_out, e->n);
    return 0;
  }
  graft_tensor *out[1] = {e->fun == F_ADD_ALLOC ? NULL : e->out};
  graft_status st = graft_function_call(e->f, 2, in, 1, out);
  if (bench_report(st, "graft_function_call", e->f)) return -1;
  if (e->fun == F_ADD_ALLOC) graft_tensor_destroy(out[0]);
  return 0;
}

static int run_exp(void *user, int k) {
  ctx *c = user;
  experiment *e = &c->exps[k];
  for (int i = 0; i < e->calls; i++)
    if (call_once(c, e)) return -1;
  /* Keeps the direct loop's stores (and the loop) in place. */
  __asm__ volatile("" ::: "memory");
  return e->calls;
}

/* A runtime of the default grain, or (n > 0) add_tiled's at size n. */
static int add_runtime(ctx *c, const char *sched, int threads, int64_t n) {
  rt_conf *r = &c->rts[c->n_rts];
  r->sched = sched;
  r->threads = threads;
  r->n = n;
  if (bench_runtime_create(sched, threads, n / TILES, NULL, &r->rt, r->desc, sizeof r->desc))
    return -1;
  c->n_rts++;
  return 0;
}

/* Does runtime r run function fn at size n? */
static int runs_on(const ctx *c, int r, int fn, int64_t n) {
  const rt_conf *rc = &c->rts[r];
  return fn == F_ADD_TILED ? rc->n == n : rc->n == 0;
}

static int setup(ctx *c, int extra_threads) {
  c->sizes[0] = 16;
  c->sizes[1] = 4096;
  int64_t nmax = c->sizes[1];
  c->x = bench_alloc_f32(nmax);
  c->y = bench_alloc_f32(nmax);
  if (!c->x || !c->y) return bench_oom();
  bench_fill_f32(c->x, nmax, 1, 1.0f);
  bench_fill_f32(c->y, nmax, 2, 1.0f);
  for (int s = 0; s < 2; s++) {
    const int64_t shape[1] = {c->sizes[s]};
    if (bench_report(graft_tensor_wrap(GRAFT_F32, 1, shape, c->x, &c->in[s][0]), "graft_tensor_wrap",
                     NULL) ||
        bench_report(graft_tensor_wrap(GRAFT_F32, 1, shape, c->y, &c->in[s][1]), "graft_tensor_wrap",
                     NULL))
      return -1;
  }
  for (int s = -1; s < 2; s++) { /* the default grain, then add_tiled's per size */
    int64_t n = s < 0 ? 0 : c->sizes[s];
    if (add_runtime(c, "seq", 1, n) || (n == 0 && add_runtime(c, "ws", 1, n)) ||
        add_runtime(c, "ws", 2, n) || add_runtime(c, "omp", 2, n))
      return -1;
    if (extra_threads &&
        (add_runtime(c, "ws", extra_threads, n) || add_runtime(c, "omp", extra_threads, n)))
      return -1;
  }
  /* Per function and size: the direct loop (add's serves add_alloc and
   * add_tiled), then one experiment per runtime that runs it. */
  c->exps = calloc((size_t)N_FUNS * 2 * (size_t)(c->n_rts + 2), sizeof *c->exps);
  if (!c->exps) return bench_oom();
  for (int fn = 0; fn < N_FUNS; fn++)
    for (int s = 0; s < 2; s++)
      for (int q = -2; q < c->n_rts; q++) { /* the direct loop first, then the region */
        int r = q == -2 ? DIRECT : q == -1 ? REGION : q;
        if (r == DIRECT ? fn != F_ADD && fn != F_CHAIN
                        : r == REGION ? fn != F_ADD : !runs_on(c, r, fn, c->sizes[s]))
          continue;
        experiment *e = &c->exps[c->n_exps++];
        *e = (experiment){.fun = fn, .rt = r, .n = c->sizes[s]};
        const int64_t shape[1] = {e->n};
        if (r < 0) { /* DIRECT, REGION */
          if (!(e->direct_out = bench_alloc_f32(e->n))) return bench_oom();
          continue;
        }
        char name[64];
        snprintf(name, sizeof name, "%s_%lld", FUN_NAMES[fn], (long long)e->n);
        if (bench_function_create(c->rts[r].rt, name, fn == F_CHAIN ? trace_chain : trace_add, NULL,
                                  2, 1, &e->f) ||
            (fn != F_ADD_ALLOC &&
             bench_report(graft_tensor_create(GRAFT_F32, 1, shape, &e->out), "graft_tensor_create",
                          NULL)))
          return -1;
      }
  /* Warm up (the first call traces and compiles), then size each rep. */
  for (int k = 0; k < c->n_exps; k++) {
    experiment *e = &c->exps[k];
    e->calls = 1;
    for (int i = 0; i < 20; i++)
      if (run_exp(c, k) < 0) return -1;
    e->calls = 50;
    double t0 = bench_now_us();
    if (run_exp(c, k) < 0) return -1;
    e->calls = bench_calls_per_rep((bench_now_us() - t0) / 50, REP_US, 1000, MAX_CALLS);
  }
  return 0;
}

static void cleanup(ctx *c) {
  for (int k = 0; k < c->n_exps; k++) {
    graft_function_destroy(c->exps[k].f);
    graft_tensor_destroy(c->exps[k].out);
    free(c->exps[k].direct_out);
  }
  free(c->exps);
  for (int r = 0; r < c->n_rts; r++) graft_runtime_destroy(c->rts[r].rt);
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < 2; i++) graft_tensor_destroy(c->in[s][i]);
  free(c->x);
  free(c->y);
}

/* The direct loop of experiment k's function and size. */
static const experiment *direct_of(const ctx *c, int k) {
  const experiment *e = &c->exps[k];
  for (int j = 0; j < c->n_exps; j++)
    if (c->exps[j].rt == DIRECT && c->exps[j].n == e->n &&
        (c->exps[j].fun == F_CHAIN) == (e->fun == F_CHAIN))
      return &c->exps[j];
  return NULL;
}

/* Each function's output, once more, against its direct loop's: bitwise. */
static int check(const ctx *c, int json) {
  int all = 1;
  for (int k = 0; k < c->n_exps; k++) {
    const experiment *e = &c->exps[k];
    if (e->rt < 0) continue;
    const experiment *d = direct_of(c, k);
    graft_tensor *in_out[1] = {NULL};
    graft_tensor *const *in = c->in[size_index(c, e->n)];
    if (bench_report(graft_function_call(e->f, 2, in, 1, in_out), "graft_function_call", e->f))
      return -1;
    int same = d && !memcmp(graft_tensor_data(in_out[0]), d->direct_out, (size_t)e->n * sizeof(float));
    if (e->out)
      same = same && !memcmp(graft_tensor_data(e->out), d->direct_out, (size_t)e->n * sizeof(float));
    graft_tensor_destroy(in_out[0]);
    char name[64], detail[160];
    snprintf(name, sizeof name, "%s_%lld_%s_%d", FUN_NAMES[e->fun], (long long)e->n,
             c->rts[e->rt].sched, c->rts[e->rt].threads);
    snprintf(detail, sizeof detail, "output equals the direct loop's bit for bit: %s",
             same ? "yes" : "no");
    bench_print_check(json, name, same, detail);
    all &= same;
  }
  return all ? 0 : -1;
}

/* ---- the command line and the output ------------------------------------------- */

typedef struct options {
  int json, reps, threads;
} options;

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_call [--json] [--reps N] [--threads N]\n"
          "  --json       one JSON object per line (a header, then one per row)\n"
          "  --reps N     timed repetitions per experiment (>= %d, default %d)\n"
          "  --threads N  also ws and omp at N threads (3..%d)\n",
          MIN_REPS, DEFAULT_REPS, BENCH_MAX_THREADS);
}

static int own_opt(void *user, const char *arg, const char *val) {
  options *o = user;
  if (strcmp(arg, "--threads") || !val) return 0;
  return bench_opt_threads(val, &o->threads);
}

static void print_header(const bench_info *info, const options *opt, const ctx *c) {
  bench_kv extra[3 + MAX_RTS];
  int n = 0;
  char reps[128];
  snprintf(reps, sizeof reps, "%d per experiment, order rotated, calls per rep sized to about "
           "%.0f us", opt->reps, REP_US);
  extra[n++] = (bench_kv){"reps", reps};
  extra[n++] = (bench_kv){"functions", "add: x + y; add_alloc: x + y into an output graft "
                          "allocates per call; chain10: + y, * x, neg, relu, - y, * y, + x, relu, "
                          "neg, * x; add_tiled: x + y at grain n / 4 (four tiles) (f32, x and y "
                          "of n elements)"};
  extra[n++] = (bench_kv){"baseline", "direct: one C loop over the n elements doing the same "
                          "arithmetic in the same order"};
  char keys[MAX_RTS][48];
  for (int r = 0; r < c->n_rts; r++) {
    extra[n++] = bench_runtime_kv(keys[r], sizeof keys[r], c->rts[r].sched, c->rts[r].threads,
                                  c->rts[r].desc);
    if (c->rts[r].n) /* add_tiled's: named apart */
      snprintf(keys[r] + strlen(keys[r]), sizeof keys[r] - strlen(keys[r]), " add_tiled n=%lld",
               (long long)c->rts[r].n);
  }
  bench_header_print(info, "bench_call", "cached calls of tiny functions vs the direct C loop",
                     extra, n, opt->json);
  if (opt->json) return;
  printf("# median_us / min_us per call over the reps; overhead_us = median_us - direct_us;\n"
         "# ratio = median_us / direct_us; target: add at n = 16 <= %.0f us at 1 thread, <= %.0f "
         "us at 2\n", TARGET_1_US, TARGET_2_US);
  printf("# %-10s %5s %-6s %7s %5s %7s %10s %10s %10s %11s %9s %6s %3s\n", "name", "n", "sched",
         "threads", "reps", "calls", "median_us", "min_us", "direct_us", "overhead_us", "ratio",
         "target", "ok");
}

static void print_row(const options *opt, const ctx *c, int k, const double *med, const double *min) {
  const experiment *e = &c->exps[k];
  const experiment *d = direct_of(c, k);
  int is_direct = e->rt == DIRECT;
  int threads = e->rt == DIRECT ? 1 : e->rt == REGION ? 2 : c->rts[e->rt].threads;
  const char *sched = e->rt == DIRECT ? "direct" : e->rt == REGION ? "region" : c->rts[e->rt].sched;
  double direct = med[d - c->exps];
  double over = is_direct ? NAN : med[k] - direct, ratio = is_direct ? NAN : med[k] / direct;
  double target = e->rt >= 0 && strcmp(sched, "omp") && e->fun == F_ADD && e->n == c->sizes[0] &&
                          threads <= 2
                      ? (threads == 1 ? TARGET_1_US : TARGET_2_US)
                      : NAN;
  int has_target = !isnan(target), ok = has_target && med[k] <= target;
  if (opt->json) {
    printf("{\"type\":\"row\",\"name\":\"%s\",\"n\":%lld,\"sched\":\"%s\",\"threads\":%d,"
           "\"reps\":%d,\"calls_per_rep\":%d", FUN_NAMES[e->fun], (long long)e->n, sched, threads,
           opt->reps, e->calls);
    bench_json_num("median_us", med[k], "%.4f");
    bench_json_num("min_us", min[k], "%.4f");
    bench_json_num("direct_us", direct, "%.4f");
    bench_json_num("overhead_us", over, "%.4f");
    bench_json_num("ratio", ratio, "%.2f");
    bench_json_num("target_us", target, "%.1f");
    printf(",\"ok\":%s}\n", has_target ? (ok ? "true" : "false") : "null");
    return;
  }
  char ov[32], ra[32], ta[32];
  printf("  %-10s %5lld %-6s %7d %5d %7d %10.3f %10.3f %10.3f %11s %9s %6s %3s\n",
         FUN_NAMES[e->fun], (long long)e->n, sched, threads, opt->reps, e->calls, med[k], min[k],
         direct, bench_fmt_num(ov, sizeof ov, "%.3f", over),
         bench_fmt_num(ra, sizeof ra, "%.1f", ratio), bench_fmt_num(ta, sizeof ta, "%.0f", target),
         has_target ? (ok ? "yes" : "no") : "-");
}

/* ---- main ------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  options opt = {.reps = DEFAULT_REPS};
  if (bench_parse_args(argc, argv, &opt.json, &opt.reps, MIN_REPS, BENCH_MAX_REPS, usage, own_opt,
                       &opt))
    return 2;
  bench_info info;
  if (bench_info_collect(&info, 1)) return 1;
  long cpus_before = bench_thread_cpus();
  ctx c = {0};
  int rc = setup(&c, opt.threads);
  double *t = rc ? NULL : malloc(sizeof *t * (size_t)c.n_exps * (size_t)opt.reps);
  if (!rc && !t) rc = bench_oom();
  if (!rc) {
    print_header(&info, &opt, &c);
    fflush(stdout);
    rc = bench_timed_reps(c.n_exps, opt.reps, t, run_exp, NULL, &c);
  }
  if (!rc) {
    double *med = malloc(sizeof *med * 2 * (size_t)c.n_exps);
    if (!med) {
      rc = bench_oom();
    } else {
      double *min = med + c.n_exps;
      for (int k = 0; k < c.n_exps; k++)
        med[k] = bench_median_min(t + (size_t)k * (size_t)opt.reps, opt.reps, &min[k]);
      for (int k = 0; k < c.n_exps; k++) print_row(&opt, &c, k, med, min);
      free(med);
      rc = check(&c, opt.json);
      bench_footer_print(cpus_before, bench_thread_cpus(), opt.json);
    }
  }
  free(t);
  cleanup(&c);
  bench_info_free(&info);
  return rc ? 1 : 0;
}
