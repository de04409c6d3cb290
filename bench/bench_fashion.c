/* bench_fashion: the Fashion-MNIST demo's training step against its GEMM
 * bound (issue 16).
 *
 * The step is the one examples/fashion_mnist.c runs (examples/
 * fmnist_model.c): the MLP 784-256-128-10 (relu, softmax cross-entropy),
 * graft_gradients and Adam (graft_optimizer_apply) over its 235,146
 * parameters, one traced function, batch 64, on synthetic images (the
 * step's cost does not depend on the pixels; the benchmark needs no
 * dataset).  Configs, timed in the same process and run, rotated rep by
 * rep:
 *   step_ws1   the step on the work-stealing executor, 1 thread (the
 *              figure the issue sets: PyTorch 1.13 runs this step at about
 *              45,000 images/s here, 0.47x the GEMM bound; target 0.70x,
 *              1.5x PyTorch);
 *   step_ws2   the same on 2 threads (same bits), step_seq on the
 *              sequential executor;
 *   gemm8      the bound: the 8 GEMMs a step needs (forward: 3; backward:
 *              dW of the 3 layers, dX of layers 2 and 3), each one
 *              cblas_sgemm call with the backward's shapes and transposes,
 *              BLAS held to one thread;
 *   adam_c     a plain-C Adam update of the same 235,146 parameters (what
 *              the bound leaves out and every Adam step must do: reading
 *              w, g, m, v and writing w, m, v);
 *   fill       gathering and normalizing 64 images into a batch
 *              (fm_batch_fill, done by the demo between steps).
 * ratio: gemm8 / step (the fraction of the GEMM bound's throughput the step
 * reaches), the median over reps of each rep's own ratio (the two ran
 * next to each other: on a shared machine the load drifts between reps
 * more than within one); images_per_s = 64 / median.
 *
 * Usage: bench_fashion [--json] [--reps N]
 */
#define _GNU_SOURCE /* bench_common.h: sched_getaffinity, open_memstream */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROG "bench_fashion"
#include "bench_common.h"
#include "fmnist_model.h"
#include "graft.h"

#define BATCH 64
#define N_IMAGES 4096
#define MIN_REPS 5
#define DEFAULT_REPS 15
#define REP_US 30000.0
#define TARGET_RATIO 0.70
#define PYTORCH_IPS 45000.0

enum { C_STEP_WS1, C_STEP_WS2, C_STEP_SEQ, C_GEMM8, C_ADAM_C, C_FILL, N_CONFIGS };
static const char *const NAMES[N_CONFIGS] = {"step_ws1", "step_ws2", "step_seq",
                                             "gemm8",    "adam_c",   "fill"};
static const int THREADS[N_CONFIGS] = {1, 2, 1, 1, 1, 1};

static const int DIMS[4] = {FM_PIXELS, 256, 128, FM_CLASSES};

typedef struct ctx {
  idx_dataset data;
  int64_t idx[BATCH];
  float *x;
  int32_t labels[BATCH];
  graft_runtime *rt[3]; /* ws/1, ws/2, seq/1 */
  fm_model m[3];        /* one model per runtime, same seed */
  graft_tensor *in[2], *out[3][2];
  float *a[4], *w[3], *d[4], *gw[3]; /* gemm8: activations, weights, deltas, weight grads */
  float *aw, *ag, *am, *av;          /* adam_c state */
  int64_t n_params, adam_t;
  int calls[N_CONFIGS];
} ctx;

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_fashion [--json] [--reps N]\n"
          "  --json    one JSON object per line (a header, then one per row)\n"
          "  --reps N  timed repetitions (>= %d, default %d)\n",
          MIN_REPS, DEFAULT_REPS);
}

/* ---- the configs ----------------------------------------------------------------- */

static int step(ctx *c, int k) {
  graft_status s = graft_function_call(c->m[k].step, 2, c->in, 2, c->out[k]);
  return bench_report(s, "graft_function_call (step)", c->m[k].step);
}

static void gemm(int ta, int tb, int m, int n, int k, const float *a, const float *b, float *out) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, out, n);
}

/* The 8 GEMMs of a step: a[l+1] = a[l] w[l]; gw[l] = a[l]^T d[l+1];
 * d[l] = d[l+1] w[l]^T for l = 1, 2. */
static void gemm8(ctx *c) {
  for (int l = 0; l < 3; l++)
    gemm(0, 0, BATCH, DIMS[l + 1], DIMS[l], c->a[l], c->w[l], c->a[l + 1]);
  for (int l = 2; l >= 0; l--) {
    gemm(1, 0, DIMS[l], DIMS[l + 1], BATCH, c->a[l], c->d[l + 1], c->gw[l]);
    if (l > 0) gemm(0, 1, BATCH, DIMS[l], DIMS[l + 1], c->d[l + 1], c->w[l], c->d[l]);
  }
}

/* PyTorch's Adam (lr 1e-3, betas 0.9 / 0.999, eps 1e-8), fused. */
static void adam_c(ctx *c) {
  c->adam_t++;
  const float b1 = 0.9f, b2 = 0.999f, lr = 1e-3f, eps = 1e-8f;
  const float c1 = lr / (1.0f - powf(b1, (float)c->adam_t)),
              c2 = 1.0f / sqrtf(1.0f - powf(b2, (float)c->adam_t));
  float *w = c->aw, *m = c->am, *v = c->av;
  const float *g = c->ag;
  for (int64_t i = 0; i < c->n_params; i++) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= c1 * m[i] / (sqrtf(v[i]) * c2 + eps);
  }
}

static int run_one(void *user, int cfg) {
  ctx *c = user;
  for (int i = 0; i < c->calls[cfg]; i++) {
    switch (cfg) {
    case C_STEP_WS1:
      if (step(c, 0)) return -1;
      break;
    case C_STEP_WS2:
      if (step(c, 1)) return -1;
      break;
    case C_STEP_SEQ:
      if (step(c, 2)) return -1;
      break;
    case C_GEMM8: gemm8(c); break;
    case C_ADAM_C: adam_c(c); break;
    case C_FILL: fm_batch_fill(&c->data, c->idx, BATCH, c->x, c->labels); break;
    }
  }
  return c->calls[cfg];
}

/* ---- set-up ----------------------------------------------------------------------- */

static int build(ctx *c) {
  uint64_t seed = bench_uniform_seed(7);
  c->data.n = N_IMAGES;
  c->data.rows = c->data.cols = FM_SIDE;
  c->data.images = malloc((size_t)N_IMAGES * FM_PIXELS);
  c->data.labels = malloc(N_IMAGES);
  c->x = bench_alloc_f32((int64_t)BATCH * FM_PIXELS);
  if (!c->data.images || !c->data.labels || !c->x) return bench_oom();
  for (int64_t i = 0; i < (int64_t)N_IMAGES * FM_PIXELS; i++)
    c->data.images[i] = (uint8_t)(bench_xorshift(&seed) >> 56);
  for (int i = 0; i < N_IMAGES; i++)
    c->data.labels[i] = (uint8_t)(bench_xorshift(&seed) % FM_CLASSES);
  for (int i = 0; i < BATCH; i++) c->idx[i] = (int64_t)(bench_xorshift(&seed) % N_IMAGES);
  fm_batch_fill(&c->data, c->idx, BATCH, c->x, c->labels);
  const int64_t xs[2] = {BATCH, FM_PIXELS}, ls[1] = {BATCH};
  if (bench_report(graft_tensor_wrap(GRAFT_F32, 2, xs, c->x, &c->in[0]), "graft_tensor_wrap",
                   NULL) ||
      bench_report(graft_tensor_wrap(GRAFT_I32, 1, ls, c->labels, &c->in[1]), "graft_tensor_wrap",
                   NULL))
    return -1;
  static const char *const sched[3] = {"ws", "ws", "seq"};
  static const int threads[3] = {1, 2, 1};
  for (int k = 0; k < 3; k++) {
    char err[1024];
    fm_config cfg = {.arch = FM_MLP, .optimizer = GRAFT_OPT_ADAM, .seed = 1};
    if (bench_runtime_create(sched[k], threads[k], 0, NULL, &c->rt[k], NULL, 0)) return -1;
    if (fm_model_create(c->rt[k], &cfg, &c->m[k], err, sizeof err)) {
      fprintf(stderr, BENCH_PROG ": %s\n", err);
      return -1;
    }
  }
  for (int l = 0; l < 4; l++) {
    c->a[l] = bench_alloc_f32((int64_t)BATCH * DIMS[l]);
    c->d[l] = bench_alloc_f32((int64_t)BATCH * DIMS[l]);
    if (!c->a[l] || !c->d[l]) return bench_oom();
    bench_fill_f32(c->a[l], (int64_t)BATCH * DIMS[l], 20 + (uint64_t)l, 1.0f);
    bench_fill_f32(c->d[l], (int64_t)BATCH * DIMS[l], 30 + (uint64_t)l, 0.01f);
  }
  for (int l = 0; l < 3; l++) {
    int64_t n = (int64_t)DIMS[l] * DIMS[l + 1];
    c->w[l] = bench_alloc_f32(n);
    c->gw[l] = bench_alloc_f32(n);
    if (!c->w[l] || !c->gw[l]) return bench_oom();
    bench_fill_f32(c->w[l], n, 40 + (uint64_t)l, 0.05f);
    c->n_params += n + DIMS[l + 1];
  }
  c->aw = bench_alloc_f32(c->n_params);
  c->ag = bench_alloc_f32(c->n_params);
  c->am = bench_alloc_f32(c->n_params);
  c->av = bench_alloc_f32(c->n_params);
  if (!c->aw || !c->ag || !c->am || !c->av) return bench_oom();
  bench_fill_f32(c->aw, c->n_params, 50, 0.05f);
  bench_fill_f32(c->ag, c->n_params, 51, 0.01f);
  return 0;
}

static void cleanup(ctx *c) {
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 2; i++) graft_tensor_destroy(c->out[k][i]);
    fm_model_destroy(&c->m[k]);
    graft_runtime_destroy(c->rt[k]);
  }
  for (int i = 0; i < 2; i++) graft_tensor_destroy(c->in[i]);
  for (int l = 0; l < 4; l++) free(c->a[l]), free(c->d[l]);
  for (int l = 0; l < 3; l++) free(c->w[l]), free(c->gw[l]);
  free(c->aw), free(c->ag), free(c->am), free(c->av);
  free(c->x);
  idx_dataset_free(&c->data);
}

/* The three executors must agree bit for bit after the same steps (the
 * calls they made so far are equal in number only during warm-up, which
 * is when this runs). */
static int check_same_bits(ctx *c, int json) {
  int same = 1;
  for (int k = 1; k < 3; k++)
    for (int i = 0; i < c->m[0].n_params; i++) {
      const graft_tensor *a = graft_variable_value(c->m[0].params[i]),
                         *b = graft_variable_value(c->m[k].params[i]);
      same &= !memcmp(graft_tensor_data(a), graft_tensor_data(b),
                      (size_t)graft_tensor_numel(a) * sizeof(float));
    }
  bench_print_check(json, "same_bits", same,
                    "ws/1, ws/2 and seq hold the same weights after the same 3 steps");
  return same ? 0 : -1;
}

/* ---- rows --------------------------------------------------------------------------- */

static void print_row(int json, int cfg, int reps, const double *med, const double *min,
                      const double *paired) {
  int is_step = cfg <= C_STEP_SEQ;
  double ratio = is_step ? paired[cfg] : NAN;
  double ips = cfg == C_ADAM_C ? NAN : BATCH / med[cfg] * 1e6;
  double target = cfg == C_STEP_WS1 ? TARGET_RATIO : NAN;
  const char *ok = cfg == C_STEP_WS1 ? (ratio >= TARGET_RATIO ? "yes" : "no") : "-";
  if (json) {
    printf("{\"type\":\"row\",\"name\":\"%s\",\"batch\":%d,\"threads\":%d,\"reps\":%d", NAMES[cfg],
           BATCH, THREADS[cfg], reps);
    bench_json_num("median_us", med[cfg], "%.2f");
    bench_json_num("min_us", min[cfg], "%.2f");
    bench_json_num("images_per_s", ips, "%.0f");
    printf(",\"baseline\":%s", is_step ? "\"gemm8\"" : "null");
    bench_json_num("ratio", ratio, "%.3f");
    bench_json_num("vs_pytorch", is_step ? ips / PYTORCH_IPS : NAN, "%.3f");
    bench_json_num("target", target, "%.2f");
    printf(",\"ok\":%s}\n",
           cfg == C_STEP_WS1 ? (ratio >= TARGET_RATIO ? "true" : "false") : "null");
    return;
  }
  char ib[32], rb[32], pb[32], tb[32];
  printf("  %-9s %5d %7d %4d %10.1f %10.1f %12s %-8s %6s %8s %6s %3s\n", NAMES[cfg], BATCH,
         THREADS[cfg], reps, med[cfg], min[cfg], bench_fmt_num(ib, sizeof ib, "%.0f", ips),
         is_step ? "gemm8" : "-", bench_fmt_num(rb, sizeof rb, "%.3f", ratio),
         bench_fmt_num(pb, sizeof pb, "%.2f", is_step ? ips / PYTORCH_IPS : NAN),
         bench_fmt_num(tb, sizeof tb, "%.2f", target), ok);
}

int main(int argc, char **argv) {
  bench_opts opt;
  if (bench_opts_parse(argc, argv, &opt, MIN_REPS, DEFAULT_REPS, BENCH_MAX_REPS, usage)) return 2;
  bench_info info;
  if (bench_info_collect(&info, 1)) return 1;
  ctx c = {0};
  int rc = build(&c);
  long cpus_before = bench_thread_cpus();
  /* Warm-up: 3 steps on each executor (then their weights must agree),
   * and calls per rep from one warm call of each config. */
  for (int cfg = 0; cfg < N_CONFIGS && !rc; cfg++) c.calls[cfg] = 1;
  for (int i = 0; i < 3 && !rc; i++)
    for (int k = 0; k < 3 && !rc; k++) rc = step(&c, k);
  if (!rc) {
    char model[200], reps[96];
    snprintf(model, sizeof model,
             "MLP 784-256-128-10, %lld parameters, Adam; batch %d of "
             "synthetic 28x28 images (fmnist_model.c, the demo's step)",
             (long long)c.n_params, BATCH);
    snprintf(reps, sizeof reps, "%d per config, order rotated, about %.0f ms each", opt.reps,
             REP_US / 1000);
    bench_kv extra[] = {{"model", model}, {"reps", reps}};
    bench_header_print(&info, "bench_fashion", "the demo's training step vs its 8 GEMMs", extra, 2,
                       opt.json);
    rc = check_same_bits(&c, opt.json);
  }
  for (int cfg = 0; cfg < N_CONFIGS && !rc; cfg++) {
    double t0 = bench_now_us();
    rc = run_one(&c, cfg) < 0;
    c.calls[cfg] = bench_calls_per_rep(bench_now_us() - t0, REP_US, 100, 1000000);
  }
  double *t = rc ? NULL : malloc(sizeof *t * N_CONFIGS * (size_t)opt.reps);
  if (!rc && !t) rc = bench_oom();
  if (!rc) rc = bench_timed_reps(N_CONFIGS, opt.reps, t, run_one, NULL, &c);
  if (!rc) {
    double med[N_CONFIGS], min[N_CONFIGS], paired[N_CONFIGS],
        *r = malloc(sizeof *r * (size_t)opt.reps);
    if (!r) {
      free(t);
      cleanup(&c);
      return bench_oom(), 1;
    }
    for (int k = 0; k <= C_STEP_SEQ; k++) {
      for (int i = 0; i < opt.reps; i++) r[i] = t[C_GEMM8 * opt.reps + i] / t[k * opt.reps + i];
      paired[k] = bench_median(r, opt.reps);
    }
    free(r);
    for (int k = 0; k < N_CONFIGS; k++)
      med[k] = bench_median_min(t + k * opt.reps, opt.reps, &min[k]);
    if (!opt.json) {
      printf("# median_us / min_us per call; images_per_s = %d / median; ratio = gemm8 / step "
             "(fraction of the GEMM bound),\n# the median of the reps' own ratios; vs_pytorch = "
             "images_per_s / %.0f (PyTorch 1.13, "
             "batch 64, 1 thread, this machine); target: step_ws1 ratio >= %.2f\n",
             BATCH, PYTORCH_IPS, TARGET_RATIO);
      printf("# %-9s %5s %7s %4s %10s %10s %12s %-8s %6s %8s %6s %3s\n", "name", "batch", "threads",
             "reps", "median_us", "min_us", "images_per_s", "baseline", "ratio", "vs_torch",
             "target", "ok");
    }
    for (int k = 0; k < N_CONFIGS; k++) print_row(opt.json, k, opt.reps, med, min, paired);
    bench_footer_print(cpus_before, bench_thread_cpus(), opt.json);
  }
  free(t);
  cleanup(&c);
  bench_info_free(&info);
  return rc ? 1 : 0;
}
