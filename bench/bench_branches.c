/* bench_branches: parallel speedup on independent mid-sized branches.
 *
 * One traced function: 16 independent two-layer MLP branches over a shared
 * input x [64,256] f32,
 *   y_b = relu(x @ W1_b + b1_b) @ W2_b + b2_b     (W [256,256], b [256]),
 * weights held in graft variables, and the 16 outputs summed by a binary
 * tree of adds.  Each call is 32 GEMMs of 64x256x256 plus small elementwise
 * ops: 95 compute nodes, of which 16 chains can run at once.
 *
 * It runs on work-stealing (ws) and OpenMP-task (omp) runtimes at 1, 2 and 4
 * threads (4 even when fewer CPUs are available: such rows are marked
 * oversubscribed) and at 8 and 16 when the process may use that many CPUs,
 * on the sequential executor (seq), as a direct C loop of cblas_sgemm and
 * plain loops (direct, the reference every output is checked against), and
 * as that same code with the branches shared by a hand-written `omp for`
 * (ompfor, at the same thread counts as ws: what the machine gives a user
 * who writes the parallel loop by hand) and as streams (that loop run
 * STREAM_LAPS times per region, time per lap: the speedup the machine gives
 * this work when neither the region's start nor its slowest thread is paid
 * in every call, a ceiling for any scheduler), all in this process, with
 * the default grain.  --grain G adds ws at every thread count with grain G
 * (sched column "ws:G"): the same graph cut into smaller tiles, measured in
 * the same reps as the default, so the two can be compared pair by pair on a
 * noisy machine.  Every rep calls each config
 * (rotating which goes first) until about TARGET_REP_US has passed;
 * median_us is the median time per call.  speedup_vs_1t = ws at 1 thread /
 * this row; ratio_vs_omp = this row / omp at the same thread count;
 * ratio_vs_seq = this row / seq; self_speedup = the same sched at 1 thread
 * / this row.
 *
 * Usage: bench_branches [--json] [--reps N] [--grain G]
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROG "bench_branches"
#include "bench_common.h"
#include "graft.h"

#define BRANCHES 16
#define BATCH 64
#define WIDTH 256
#define MIN_REPS 9
#define DEFAULT_REPS 11
#define TARGET_REP_US 20000.0
#define MAX_INNER 1000
#define MAX_CONFIGS 40
/* streams: branch loops per region (its time per call is per lap) */
#define STREAM_LAPS 8

typedef enum sched_kind {
  SCHED_WS, SCHED_OMP, SCHED_SEQ, SCHED_DIRECT, SCHED_OMPFOR, SCHED_STREAMS
} sched_kind;
static const char *const SCHED_NAMES[] = {"ws", "omp", "seq", "direct", "ompfor", "streams"};

typedef struct config {
  sched_kind sched;
  int threads;
  int64_t grain;            /* 0: the default */
  graft_runtime *rt;        /* NULL for direct */
  graft_function *f;        /* NULL for direct */
  char describe[256];
  double median_us, min_us;
  double vs_default;        /* ws:G: median over reps of this rep's time / ws's */
  int inner;                /* calls per rep */
} config;

typedef struct model {
  float *x;                 /* [BATCH, WIDTH] */
  graft_variable *w1[BRANCHES], *b1[BRANCHES], *w2[BRANCHES], *b2[BRANCHES];
  float *h, *y, *ref;       /* direct-baseline scratch and result */
  float *hb, *yb;           /* ompfor scratch: [BRANCHES][BATCH * WIDTH] each */
} model;

typedef struct options {
  int json, reps;
  int64_t grain;            /* --grain: extra ws rows at this grain; 0: none */
} options;

/* ---- the model ------------------------------------------------------------ */

/* Variable <prefix>_<b>: [WIDTH, WIDTH] (matrix) or [WIDTH], uniform in
 * [-scale, scale) from seed; buf: scratch for its values. */
static int branch_var(float *buf, const char *prefix, int b, int matrix, uint64_t seed,
                      float scale, graft_variable **v) {
  char name[32];
  snprintf(name, sizeof name, "%s_%d", prefix, b);
  bench_fill_f32(buf, matrix ? WIDTH * WIDTH : WIDTH, seed, scale);
  return bench_variable_f32(name, WIDTH, matrix ? WIDTH : 0, buf, 0, v);
}

static int model_create(model *m) {
  memset(m, 0, sizeof *m);
  float *w = malloc(WIDTH * WIDTH * sizeof *w);
  m->x = malloc(BATCH * WIDTH * sizeof *m->x);
  m->h = malloc(BATCH * WIDTH * sizeof *m->h);
  m->y = malloc(BATCH * WIDTH * sizeof *m->y);
  m->ref = malloc(BATCH * WIDTH * sizeof *m->ref);
  m->hb = malloc((size_t)BRANCHES * BATCH * WIDTH * sizeof *m->hb);
  m->yb = malloc((size_t)BRANCHES * BATCH * WIDTH * sizeof *m->yb);
  int rc = -1;
  if (!w || !m->x || !m->h || !m->y || !m->ref || !m->hb || !m->yb) {
    bench_oom();
    goto out;
  }
  bench_fill_f32(m->x, BATCH * WIDTH, 1, 1.0f);
  /* Scaled so activations stay near 1 through both layers. */
  const float ws = 1.0f / 16.0f; /* ~ sqrt(3 / WIDTH) */
  for (int b = 0; b < BRANCHES; b++) {
    uint64_t seed = 100 + 4 * (uint64_t)b;
    if (branch_var(w, "w1", b, 1, seed, ws, &m->w1[b]) ||
        branch_var(w, "b1", b, 0, seed + 1, 0.1f, &m->b1[b]) ||
        branch_var(w, "w2", b, 1, seed + 2, ws, &m->w2[b]) ||
        branch_var(w, "b2", b, 0, seed + 3, 0.1f, &m->b2[b]))
      goto out;
  }
  rc = 0;
out:
  free(w);
  return rc;
}

static void model_destroy(model *m) {
  for (int b = 0; b < BRANCHES; b++) {
    graft_variable_destroy(m->w1[b]);
    graft_variable_destroy(m->b1[b]);
    graft_variable_destroy(m->w2[b]);
    graft_variable_destroy(m->b2[b]);
  }
  free(m->x);
  free(m->h);
  free(m->y);
  free(m->ref);
  free(m->hb);
  free(m->yb);
}

static const float *var_data(const graft_variable *v) {
  return graft_tensor_data(graft_variable_value(v));
}

/* out = in @ W + bias, then relu if asked: one branch layer in plain C. */
static void direct_layer(const float *in, const graft_variable *w, const graft_variable *bias,
                         int relu, float *out) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BATCH, WIDTH, WIDTH, 1.0f, in, WIDTH,
              var_data(w), WIDTH, 0.0f, out, WIDTH);
  const float *bv = var_data(bias);
  for (int i = 0; i < BATCH; i++)
    for (int j = 0; j < WIDTH; j++) {
      float v = out[i * WIDTH + j] + bv[j];
      out[i * WIDTH + j] = relu && v < 0.0f ? 0.0f : v;
    }
}

/* The direct baseline: the branches one after another, summed in order. */
static void direct_call(model *m, float *out) {
  for (int b = 0; b < BRANCHES; b++) {
    direct_layer(m->x, m->w1[b], m->b1[b], 1, m->h);
    direct_layer(m->h, m->w2[b], m->b2[b], 0, b ? m->y : out);
    if (b)
      for (int i = 0; i < BATCH * WIDTH; i++) out[i] += m->y[i];
  }
}

/* The hand-written parallel baseline (what a user would write without
 * graft): one `omp parallel` region, the branches shared by `omp for`
 * (static), each into its own buffers, then the outputs summed elementwise
 * by a second `omp for`, pairwise in the tree order of the graph.  With
 * laps > 1 (streams) the branch loop runs laps times before the sum, with
 * no barrier between laps: a static schedule gives each thread the same
 * branches every lap, so it computes the same result, and the time per lap
 * is what the machine gives this work with neither the start of a
 * parallel region nor the wait for its slowest thread in every call. */
static void ompfor_call(model *m, int threads, int laps, float *out) {
  const int n = BATCH * WIDTH;
#pragma omp parallel num_threads(threads)
  {
    for (int lap = 0; lap < laps; lap++) {
#pragma omp for schedule(static) nowait
      for (int b = 0; b < BRANCHES; b++) {
        float *h = m->hb + (size_t)b * n, *y = m->yb + (size_t)b * n;
        direct_layer(m->x, m->w1[b], m->b1[b], 1, h);
        direct_layer(h, m->w2[b], m->b2[b], 0, y);
      }
    }
#pragma omp barrier
#pragma omp for schedule(static)
    for (int i = 0; i < n; i++) {
      float v[BRANCHES];
      for (int b = 0; b < BRANCHES; b++) v[b] = m->yb[(size_t)b * n + i];
      for (int len = BRANCHES; len > 1; len /= 2)
        for (int k = 0; k < len / 2; k++) v[k] = v[2 * k] + v[2 * k + 1];
      out[i] = v[0];
    }
  }
}

static graft_status trace_branches(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  model *m = user;
  if (n_in != 1 || n_out != 1)
    return graft_trace_fail(t, GRAFT_EINVAL, "bench_branches: expected 1 input, 1 output");
  graft_value *y[BRANCHES];
  for (int b = 0; b < BRANCHES; b++) {
    graft_value *h = graft_relu(
        t, graft_add(t, graft_matmul(t, in[0], graft_read(t, m->w1[b]), 0), graft_read(t, m->b1[b])));
    y[b] = graft_add(t, graft_matmul(t, h, graft_read(t, m->w2[b]), 0), graft_read(t, m->b2[b]));
  }
  for (int len = BRANCHES; len > 1; len /= 2) /* BRANCHES is a power of two */
    for (int i = 0; i < len / 2; i++) y[i] = graft_add(t, y[2 * i], y[2 * i + 1]);
  out[0] = y[0];
  return GRAFT_OK;
}

/* ---- configs ---------------------------------------------------------------- */

static int n_configs;
static config CONFIGS[MAX_CONFIGS];

static void add_config(sched_kind s, int threads, int64_t grain) {
  CONFIGS[n_configs++] = (config){.sched = s, .threads = threads, .grain = grain};
}

/* s at 1, 2, 4 (always) and 8, 16 (when there are that many CPUs). */
static void add_scaled(sched_kind s, long cpus, int64_t grain) {
  static const int threads[] = {1, 2, 4, 8, 16};
  for (size_t i = 0; i < sizeof threads / sizeof threads[0]; i++)
    if (threads[i] <= 4 || threads[i] <= cpus) add_config(s, threads[i], grain);
}

/* ws, omp, ompfor, streams, and ws at grain (when not 0), scaled; then
 * seq and direct. */
static void plan_configs(long cpus, int64_t grain) {
  add_scaled(SCHED_WS, cpus, 0);
  add_scaled(SCHED_OMP, cpus, 0);
  add_scaled(SCHED_OMPFOR, cpus, 0);
  add_scaled(SCHED_STREAMS, cpus, 0);
  if (grain) add_scaled(SCHED_WS, cpus, grain);
  add_config(SCHED_SEQ, 1, 0);
  add_config(SCHED_DIRECT, 1, 0);
}

static int config_index(sched_kind s, int threads, int64_t grain) {
  for (int c = 0; c < n_configs; c++)
    if (CONFIGS[c].sched == s && CONFIGS[c].threads == threads && CONFIGS[c].grain == grain)
      return c;
  return -1;
}

/* "ws", or "ws:G" for a config at grain G. */
static const char *config_name(const config *cf, char *buf, size_t len) {
  if (!cf->grain) return SCHED_NAMES[cf->sched];
  snprintf(buf, len, "%s:%lld", SCHED_NAMES[cf->sched], (long long)cf->grain);
  return buf;
}

static int create_configs(model *m) {
  for (int c = 0; c < n_configs; c++) {
    config *cf = &CONFIGS[c];
    if (cf->sched == SCHED_DIRECT) {
      snprintf(cf->describe, sizeof cf->describe,
               "cblas_sgemm + plain loops, branches in sequence, on the calling thread");
      continue;
    }
    if (cf->sched == SCHED_OMPFOR) {
      snprintf(cf->describe, sizeof cf->describe,
               "the same code as direct, branches shared by omp for num_threads(%d), then an "
               "omp for elementwise tree sum",
               cf->threads);
      continue;
    }
    if (cf->sched == SCHED_STREAMS) {
      snprintf(cf->describe, sizeof cf->describe,
               "ompfor's code with the branch loop run %d times per region (no barrier "
               "between), time per lap: the ceiling at %d threads",
               STREAM_LAPS, cf->threads);
      continue;
    }
    if (bench_runtime_create(SCHED_NAMES[cf->sched], cf->threads, cf->grain, NULL, &cf->rt,
                             cf->describe, sizeof cf->describe) ||
        bench_function_create(cf->rt, "branches", trace_branches, m, 1, 1, &cf->f))
      return -1;
  }
  return 0;
}

static void destroy_configs(void) {
  for (int c = 0; c < n_configs; c++) {
    graft_function_destroy(CONFIGS[c].f);
    graft_runtime_destroy(CONFIGS[c].rt);
  }
}

static int call_config(config *cf, model *m, graft_tensor *x, graft_tensor *out) {
  if (cf->sched == SCHED_DIRECT) {
    direct_call(m, graft_tensor_data(out));
    return 0;
  }
  if (cf->sched == SCHED_OMPFOR || cf->sched == SCHED_STREAMS) {
    ompfor_call(m, cf->threads, cf->sched == SCHED_STREAMS ? STREAM_LAPS : 1,
                graft_tensor_data(out));
    return 0;
  }
  return bench_report(graft_function_call(cf->f, 1, &x, 1, &out), "graft_function_call", cf->f);
}

static int check_output(const config *cf, const model *m, const graft_tensor *out) {
  const float *y = graft_tensor_data(out);
  double d = 0.0, my = 0.0;
  for (int i = 0; i < BATCH * WIDTH; i++) {
    double e = fabs((double)y[i] - (double)m->ref[i]);
    if (!(e <= d)) d = e; /* NaN propagates */
    if (fabs((double)m->ref[i]) > my) my = fabs((double)m->ref[i]);
  }
  if (d <= 1e-4 * (my > 1.0 ? my : 1.0)) return 0;
  char name[32];
  fprintf(stderr, "bench_branches: %s/%d differs from the direct result (max abs diff %g, max |y| %g)\n",
          config_name(cf, name, sizeof name), cf->threads, d, my);
  return -1;
}

/* What the timed units of run need. */
typedef struct run_ctx {
  model *m;
  graft_tensor *x, *out;
} run_ctx;

static int run_timed(void *ctx, int c) {
  run_ctx *r = ctx;
  config *cf = &CONFIGS[c];
  for (int i = 0; i < cf->inner; i++)
    if (call_config(cf, r->m, r->x, r->out)) return -1;
  return cf->sched == SCHED_STREAMS ? cf->inner * STREAM_LAPS : cf->inner;
}

static int run_check(void *ctx, int c) {
  run_ctx *r = ctx;
  return check_output(&CONFIGS[c], r->m, r->out);
}

static int run(model *m, int reps) {
  const int64_t xshape[2] = {BATCH, WIDTH};
  run_ctx r = {m, NULL, NULL};
  double *t = malloc((size_t)(n_configs * reps) * sizeof *t);
  double *ratio = malloc((size_t)reps * sizeof *ratio);
  int rc = -1;
  if (!t || !ratio ||
      bench_report(graft_tensor_wrap(GRAFT_F32, 2, xshape, m->x, &r.x), "graft_tensor_wrap",
                   NULL) ||
      bench_report(graft_tensor_create(GRAFT_F32, 2, xshape, &r.out), "graft_tensor_create", NULL))
    goto done;
  direct_call(m, m->ref);
  /* Warm-up: the first call traces and compiles; then calibrate. */
  for (int c = 0; c < n_configs; c++) {
    config *cf = &CONFIGS[c];
    memset(graft_tensor_data(r.out), 0, BATCH * WIDTH * sizeof(float));
    if (call_config(cf, m, r.x, r.out) || check_output(cf, m, r.out)) goto done;
    double t0 = bench_now_us();
    if (call_config(cf, m, r.x, r.out)) goto done;
    cf->inner = bench_calls_per_rep(bench_now_us() - t0, TARGET_REP_US, 100, MAX_INNER);
  }
  if (bench_timed_reps(n_configs, reps, t, run_timed, run_check, &r)) goto done;
  /* Pairs first: the medians below sort each config's times. */
  for (int c = 0; c < n_configs; c++) {
    CONFIGS[c].vs_default = NAN;
    int d = CONFIGS[c].grain ? config_index(CONFIGS[c].sched, CONFIGS[c].threads, 0) : -1;
    if (d < 0) continue;
    for (int i = 0; i < reps; i++) ratio[i] = t[c * reps + i] / t[d * reps + i];
    CONFIGS[c].vs_default = bench_median(ratio, reps);
  }
  for (int c = 0; c < n_configs; c++) {
    char what[48], name[32];
    snprintf(what, sizeof what, "%s/%d", config_name(&CONFIGS[c], name, sizeof name),
             CONFIGS[c].threads);
    CONFIGS[c].median_us = bench_median_min(&t[c * reps], reps, &CONFIGS[c].min_us);
    bench_warn_traced(CONFIGS[c].f, what);
  }
  rc = 0;
done:
  graft_tensor_destroy(r.out);
  graft_tensor_destroy(r.x);
  free(t);
  free(ratio);
  return rc;
}

/* ---- output ----------------------------------------------------------------- */

static void print_header(const bench_info *info, const options *opt) {
  bench_kv extra[MAX_CONFIGS + 2];
  char keys[MAX_CONFIGS][64];
  char shape[128];
  snprintf(shape, sizeof shape,
           "%d branches of relu(x @ W1 + b1) @ W2 + b2, x [%d,%d] f32, W [%d,%d], tree sum",
           BRANCHES, BATCH, WIDTH, WIDTH, WIDTH);
  int n = 0;
  extra[n++] = (bench_kv){"model", shape};
  extra[n++] = (bench_kv){"blas", info->blas};
  for (int c = 0; c < n_configs; c++) {
    char name[32];
    extra[n++] = bench_runtime_kv(keys[c], sizeof keys[c],
                                  config_name(&CONFIGS[c], name, sizeof name), CONFIGS[c].threads,
                                  CONFIGS[c].describe);
  }
  bench_header_print(info, "bench_branches",
                     "16 independent MLP branches: ws and omp at 1..N threads, seq, direct",
                     extra, n, opt->json);
  if (opt->json) return;
  printf("# median_us: median time per call; speedup_vs_1t = ws at 1 thread / median_us;\n"
         "# ratio_vs_omp = median_us / omp's at the same threads; ratio_vs_seq = median_us /\n"
         "# seq's; self_speedup = the same sched at 1 thread / median_us; min_us: the fastest\n"
         "# rep; threads marked * exceed the CPUs of this process (oversubscribed);\n"
         "# ws:G = ws with grain G (--grain), vs_default: the median over reps of its time\n"
         "# / ws's at the same threads in the same rep\n");
  printf("# %-8s %7s %-9s %4s %12s %13s %12s %12s %12s %10s %10s\n", "name", "threads", "sched",
         "reps", "median_us", "speedup_vs_1t", "ratio_vs_omp", "ratio_vs_seq", "self_speedup",
         "min_us", "vs_default");
}

static void print_rows(const options *opt, int reps, long cpus) {
  double ws1 = CONFIGS[config_index(SCHED_WS, 1, 0)].median_us;
  double seq = CONFIGS[config_index(SCHED_SEQ, 1, 0)].median_us;
  for (int c = 0; c < n_configs; c++) {
    const config *cf = &CONFIGS[c];
    /* (seq and direct have no omp row at their thread count to compare with) */
    int omp = cf->sched != SCHED_SEQ && cf->sched != SCHED_DIRECT
                  ? config_index(SCHED_OMP, cf->threads, 0)
                  : -1;
    double vs_omp = omp >= 0 ? cf->median_us / CONFIGS[omp].median_us : NAN;
    double speedup = ws1 / cf->median_us, vs_seq = cf->median_us / seq;
    double self = CONFIGS[config_index(cf->sched, 1, cf->grain)].median_us / cf->median_us;
    int over = cf->threads > cpus;
    char buf[32];
    const char *name = config_name(cf, buf, sizeof buf);
    if (opt->json) {
      printf("{\"type\":\"row\",\"name\":\"branches\",\"threads\":%d,\"sched\":\"%s\","
             "\"grain\":%lld,\"oversubscribed\":%s,\"reps\":%d,\"calls_per_rep\":%d,"
             "\"median_us\":%.3f,\"min_us\":%.3f,\"speedup_vs_1t\":%.4f",
             cf->threads, SCHED_NAMES[cf->sched], (long long)cf->grain, over ? "true" : "false",
             reps, cf->inner, cf->median_us, cf->min_us, speedup);
      bench_json_num("ratio_vs_omp", vs_omp, "%.4f");
      printf(",\"ratio_vs_seq\":%.4f,\"self_speedup\":%.4f", vs_seq, self);
      bench_json_num("vs_default", cf->vs_default, "%.4f");
      printf("}\n");
    } else {
      char thr[16], vo[16], vd[16];
      snprintf(thr, sizeof thr, "%d%s", cf->threads, over ? "*" : "");
      printf("%-10s %7s %-9s %4d %12.1f %13.3f %12s %12.3f %12.3f %10.1f %10s\n", "branches", thr,
             name, reps, cf->median_us, speedup, bench_fmt_num(vo, sizeof vo, "%.3f", vs_omp),
             vs_seq, self, cf->min_us, bench_fmt_num(vd, sizeof vd, "%.3f", cf->vs_default));
    }
  }
  fflush(stdout);
}

/* ---- command line ------------------------------------------------------------ */

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_branches [--json] [--reps N] [--grain G]\n"
          "  --json     one JSON object per line (a header, then one per row)\n"
          "  --reps N   timed repetitions per config (>= %d, default %d)\n"
          "  --grain G  also ws at every thread count with GRAFT_GRAIN G (rows ws:G)\n",
          MIN_REPS, DEFAULT_REPS);
}

/* --grain (bench_parse_args). */
static int own_option(void *ctx, const char *arg, const char *val) {
  options *opt = ctx;
  if (strcmp(arg, "--grain") != 0 || !val) return 0;
  char *end;
  long long g = strtoll(val, &end, 10);
  if (*end || end == val || g < 1 || g > INT64_MAX / 2) {
    fprintf(stderr, "bench_branches: --grain needs a positive integer\n");
    return -1;
  }
  opt->grain = g;
  return 2;
}

int main(int argc, char **argv) {
  options opt = {.reps = DEFAULT_REPS};
  if (bench_parse_args(argc, argv, &opt.json, &opt.reps, MIN_REPS, BENCH_MAX_REPS, usage,
                       own_option, &opt))
    return 2;
  bench_info info;
  if (bench_info_collect(&info, 1)) return 1;
  /* The CPUs this process may use: the affinity mask, as OpenMP sees it. */
  long cpus = omp_get_num_procs();
  if (info.nproc > 0 && info.nproc < cpus) cpus = info.nproc;
  plan_configs(cpus, opt.grain);

  model m;
  int rc = 1;
  if (model_create(&m) == 0 && create_configs(&m) == 0) {
    print_header(&info, &opt);
    fflush(stdout);
    long cpus_before = bench_thread_cpus();
    if (run(&m, opt.reps) == 0) {
      print_rows(&opt, opt.reps, cpus);
      bench_footer_print(cpus_before, bench_thread_cpus(), opt.json);
      rc = 0;
    }
  }
  destroy_configs();
  model_destroy(&m);
  bench_info_free(&info);
  if (rc) fprintf(stderr, "bench_branches: failed\n");
  return rc;
}
