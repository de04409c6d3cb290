/* bench_conv: conv2d and its two backward products through graft against
 * im2col + one sgemm written here.
 *
 * At the Fashion-MNIST CNN's shapes (batch 64 by default: conv1 1->32 and
 * conv2 32->64, 3x3, padding 1, on 28x28 and 14x14), f32, this times
 *   fwd    graft_conv2d(x, w)                         vs im2col(x), sgemm W @ cols
 *   bwd_w  the gradient in w of <g, conv2d(x, w)>     vs im2col(x), sgemm g @ cols^T
 *   bwd_x  the gradient in x of <g, conv2d(x, w)>     vs sgemm W^T @ g, col2im
 * (graft_gradients with the seed g: the traced function holds only the
 * backward product's nodes).  The direct side takes g already in the
 * layout its sgemm wants ([O, N*OH*OW]) and leaves its forward result in
 * that layout, so it does strictly less than graft, which also converts
 * between that layout and NCHW.  Both sides run in the same process on the
 * same inputs, rep by rep in rotation; the BLAS is held to one thread.
 * Rows at 1 thread compare like with like (ratio = graft / direct, target
 * <= 1.3); the 2-thread rows time graft on two workers against the same
 * one-thread direct code.  Each experiment first checks that graft's
 * result matches the direct one.
 *
 * Usage: bench_conv [--json] [--reps N] [--batch N]
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROG "bench_conv"
#include "bench_common.h"
#include "graft.h"

#define MIN_REPS 5
#define DEFAULT_REPS 11
#define TARGET_REP_US 20000.0

enum kind { FWD, BWD_W, BWD_X, N_KINDS };
static const char *const KIND_NAME[N_KINDS] = {"fwd", "bwd_w", "bwd_x"};

typedef struct layer {
  const char *name;
  int64_t c, h, o; /* in channels, square size, out channels; 3x3, pad 1, stride 1 */
} layer;

static const layer LAYERS[] = {{"conv1", 1, 28, 32}, {"conv2", 32, 14, 64}};

typedef struct exp_ {
  const layer *l;
  int kind;
  int64_t N, K, P; /* batch, C*9, H*W */
  float *x, *w, *g, *gt, *cols, *res; /* inputs, g in NCHW and [O, N*P], scratch, result */
  graft_tensor *in[3], *out;
  graft_function *f;
  int inner;
} exp_;

/* ---- the direct side ------------------------------------------------------ */

/* cols [K, N*P]: row (c, kh, kw), column (n, oh, ow); 3x3, pad 1, stride 1. */
static void im2col(const exp_ *e, const float *x, float *cols) {
  const int64_t H = e->l->h, NP = e->N * e->P;
  for (int64_t c = 0; c < e->l->c; c++)
    for (int64_t kh = 0; kh < 3; kh++)
      for (int64_t kw = 0; kw < 3; kw++) {
        float *row = cols + ((c * 3 + kh) * 3 + kw) * NP;
        for (int64_t n = 0; n < e->N; n++)
          for (int64_t oh = 0; oh < H; oh++) {
            float *o = row + n * e->P + oh * H;
            const int64_t ih = oh - 1 + kh;
            if (ih < 0 || ih >= H) {
              memset(o, 0, (size_t)H * sizeof *o);
              continue;
            }
            const float *src = x + ((n * e->l->c + c) * H + ih) * H + kw - 1;
            const int64_t lo = kw == 0 ? 1 : 0, hi = kw == 2 ? H - 1 : H;
            if (lo) o[0] = 0;
            memcpy(o + lo, src + lo, (size_t)(hi - lo) * sizeof *o);
            if (hi < H) o[H - 1] = 0;
          }
      }
}

/* dx = the adjoint of im2col applied to dcols. */
static void col2im(const exp_ *e, const float *cols, float *dx) {
  const int64_t H = e->l->h, NP = e->N * e->P;
  memset(dx, 0, (size_t)(e->N * e->l->c * e->P) * sizeof *dx);
  for (int64_t c = 0; c < e->l->c; c++)
    for (int64_t kh = 0; kh < 3; kh++)
      for (int64_t kw = 0; kw < 3; kw++) {
        const float *row = cols + ((c * 3 + kh) * 3 + kw) * NP;
        for (int64_t n = 0; n < e->N; n++)
          for (int64_t oh = 0; oh < H; oh++) {
            const int64_t ih = oh - 1 + kh;
            if (ih < 0 || ih >= H) continue;
            const float *s = row + n * e->P + oh * H;
            float *d = dx + ((n * e->l->c + c) * H + ih) * H + kw - 1;
            const int64_t lo = kw == 0 ? 1 : 0, hi = kw == 2 ? H - 1 : H;
            for (int64_t ow = lo; ow < hi; ow++) d[ow] += s[ow];
          }
      }
}

static void direct(exp_ *e) {
  const int O = (int)e->l->o, K = (int)e->K, NP = (int)(e->N * e->P);
  switch (e->kind) {
  case FWD:
    im2col(e, e->x, e->cols);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, O, NP, K, 1, e->w, K, e->cols, NP, 0,
                e->res, NP);
    break;
  case BWD_W:
    im2col(e, e->x, e->cols);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, O, K, NP, 1, e->gt, NP, e->cols, NP, 0,
                e->res, K);
    break;
  default:
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, NP, O, 1, e->w, K, e->gt, NP, 0,
                e->cols, NP);
    col2im(e, e->cols, e->res);
    break;
  }
}

/* ---- the graft side --------------------------------------------------------- */

static graft_status trace_conv(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const int kind = *(const int *)user;
  const int64_t pad[2] = {1, 1};
  graft_value *y = graft_conv2d(t, in[0], in[1], NULL, pad, NULL, 1);
  if (kind == FWD) {
    out[0] = y;
    return GRAFT_OK;
  }
  return graft_gradients(t, 1, &y, &in[2], 1, &in[kind == BWD_W ? 1 : 0], GRAFT_UNCONNECTED_ZERO,
                         out);
}

static int call_graft(exp_ *e) {
  return bench_report(graft_function_call(e->f, e->kind == FWD ? 2 : 3, e->in, 1, &e->out),
                      "graft_function_call", e->f);
}

static int run_side(void *ctx, int side) {
  exp_ *e = ctx;
  for (int i = 0; i < e->inner; i++) {
    if (side == 0) {
      if (call_graft(e)) return -1;
    } else {
      direct(e);
    }
  }
  return e->inner;
}

/* graft's result against the direct one (graft's forward is NCHW, the
 * direct one [O, N*P]): the largest difference relative to the largest
 * magnitude. */
static double rel_diff(const exp_ *e) {
  const float *a = graft_tensor_data(e->out);
  const int64_t n = graft_tensor_numel(e->out);
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t j = i;
    if (e->kind == FWD) {
      const int64_t img = i / (e->l->o * e->P), o = i / e->P % e->l->o, p = i % e->P;
      j = o * e->N * e->P + img * e->P + p;
    }
    double diff = fabs((double)a[i] - (double)e->res[j]);
    if (!(diff <= d)) d = diff;
    if (fabs((double)e->res[j]) > m) m = fabs((double)e->res[j]);
  }
  return m > 0 ? d / m : d;
}

typedef struct result {
  double graft_us, direct_us, rel_diff;
  int reps;
} result;

static int run_one(graft_runtime *rt, exp_ *e, int reps, result *r) {
  const layer *l = e->l;
  const int64_t N = e->N, H = l->h;
  e->K = l->c * 9;
  e->P = H * H;
  const int64_t xs[4] = {N, l->c, H, H}, ws[4] = {l->o, l->c, 3, 3}, gs[4] = {N, l->o, H, H};
  const int64_t nx = N * l->c * e->P, nw = l->o * e->K, ng = N * l->o * e->P;
  e->x = bench_alloc_f32(nx);
  e->w = bench_alloc_f32(nw);
  e->g = bench_alloc_f32(ng);
  e->gt = bench_alloc_f32(ng);
  e->cols = bench_alloc_f32(e->K * N * e->P);
  e->res = bench_alloc_f32(e->kind == BWD_W ? nw : e->kind == BWD_X ? nx : ng);
  double *t = malloc(2 * (size_t)reps * sizeof *t);
  int rc = -1;
  if (!e->x || !e->w || !e->g || !e->gt || !e->cols || !e->res || !t) {
    bench_oom();
    goto done;
  }
  bench_fill_f32(e->x, nx, 1, 1.0f);
  bench_fill_f32(e->w, nw, 2, 0.3f);
  bench_fill_f32(e->g, ng, 3, 1.0f);
  for (int64_t n = 0; n < N; n++) /* g [N, O, P] -> gt [O, N*P] */
    for (int64_t o = 0; o < l->o; o++)
      memcpy(e->gt + (o * N + n) * e->P, e->g + (n * l->o + o) * e->P, (size_t)e->P * sizeof(float));
  if (bench_report(graft_tensor_wrap(GRAFT_F32, 4, xs, e->x, &e->in[0]), "wrap x", NULL) ||
      bench_report(graft_tensor_wrap(GRAFT_F32, 4, ws, e->w, &e->in[1]), "wrap w", NULL) ||
      bench_report(graft_tensor_wrap(GRAFT_F32, 4, gs, e->g, &e->in[2]), "wrap g", NULL) ||
      bench_function_create(rt, "bench_conv", trace_conv, &e->kind, e->kind == FWD ? 2 : 3, 1,
                            &e->f))
    goto done;
  for (int i = 0; i < 2; i++) {
    if (call_graft(e)) goto done;
    direct(e);
  }
  r->rel_diff = rel_diff(e);
  if (!(r->rel_diff <= 1e-4)) {
    fprintf(stderr, "bench_conv: %s %s: graft differs from im2col + sgemm (relative %g)\n",
            l->name, KIND_NAME[e->kind], r->rel_diff);
    goto done;
  }
  double t0 = bench_now_us();
  if (call_graft(e)) goto done;
  double t1 = bench_now_us();
  direct(e);
  double t2 = bench_now_us();
  e->inner = bench_calls_per_rep(t1 - t0 < t2 - t1 ? t1 - t0 : t2 - t1, TARGET_REP_US, 10, 1000);
  if (bench_timed_reps(2, reps, t, run_side, NULL, e)) goto done;
  bench_warn_traced(e->f, "the function");
  r->graft_us = bench_median(t, reps);
  r->direct_us = bench_median(t + reps, reps);
  r->reps = reps;
  rc = 0;
done:
  graft_function_destroy(e->f);
  graft_tensor_destroy(e->out);
  for (int i = 0; i < 3; i++) graft_tensor_destroy(e->in[i]);
  free(e->x), free(e->w), free(e->g), free(e->gt), free(e->cols), free(e->res);
  free(t);
  return rc;
}

static void print_row(int json, const exp_ *e, int threads, const result *r) {
  char shape[96];
  snprintf(shape, sizeof shape, "%lldx%lldx%lldx%lld->%lld", (long long)e->N,
           (long long)e->l->c, (long long)e->l->h, (long long)e->l->h, (long long)e->l->o);
  const double ratio = r->graft_us / r->direct_us;
  const double gflops = 2.0 * (double)e->l->o * (double)e->K * (double)(e->N * e->P) /
                        (r->graft_us * 1e3);
  if (json)
    printf("{\"type\":\"row\",\"name\":\"conv_%s\",\"layer\":\"%s\",\"dtype\":\"f32\","
           "\"shape\":\"%s\",\"threads\":%d,\"reps\":%d,\"calls_per_rep\":%d,"
           "\"median_us\":%.2f,\"baseline_us\":%.2f,\"ratio\":%.4f,\"gflops\":%.2f,"
           "\"rel_diff\":%g}\n",
           KIND_NAME[e->kind], e->l->name, shape, threads, r->reps, e->inner, r->graft_us,
           r->direct_us, ratio, gflops, r->rel_diff);
  else
    printf("%-10s %-6s %-5s %-18s %7d %4d %12.1f %12.1f %7.3f %8.2f\n", KIND_NAME[e->kind],
           e->l->name, "f32", shape, threads, r->reps, r->graft_us, r->direct_us, ratio, gflops);
  fflush(stdout);
}

/* ---- command line ------------------------------------------------------------ */

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_conv [--json] [--reps N] [--batch N]\n"
          "  --json     one JSON object per line (a header, then one per row)\n"
          "  --reps N   timed repetitions per experiment (>= %d, default %d)\n"
          "  --batch N  images per batch (default 64)\n",
          MIN_REPS, DEFAULT_REPS);
}

static int own_option(void *ctx, const char *arg, const char *val) {
  int64_t *batch = ctx;
  if (strcmp(arg, "--batch") == 0 && val) {
    char *end;
    long long b = strtoll(val, &end, 10);
    if (*end || b < 1 || b > 4096) {
      fprintf(stderr, "bench_conv: --batch takes 1..4096\n");
      return -1;
    }
    *batch = b;
    return 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  int json = 0, reps = DEFAULT_REPS;
  int64_t batch = 64;
  if (bench_parse_args(argc, argv, &json, &reps, MIN_REPS, BENCH_MAX_REPS, usage, own_option,
                       &batch))
    return 2;
  bench_info info;
  if (bench_info_collect(&info, 1)) return 1;
  graft_runtime *rt[2] = {NULL, NULL};
  char desc[2][256], key[2][48];
  for (int i = 0; i < 2; i++)
    if (bench_runtime_create("ws", i + 1, 0, NULL, &rt[i], desc[i], sizeof desc[i])) {
      graft_runtime_destroy(rt[0]);
      bench_info_free(&info);
      return 1;
    }
  const bench_kv extra[] = {{"blas", info.blas},
                            bench_runtime_kv(key[0], sizeof key[0], "ws", 1, desc[0]),
                            bench_runtime_kv(key[1], sizeof key[1], "ws", 2, desc[1])};
  bench_header_print(&info, "bench_conv",
                     "conv2d forward and backward products vs im2col + one sgemm written here",
                     extra, 3, json);
  if (!json) {
    printf("# shape NxCxHxW->O, 3x3 kernel, padding 1; times per call in microseconds\n"
           "# (median of reps); ratio = median_us / baseline_us (the direct code, 1 thread);\n"
           "# gflops = 2*O*C*9*N*H*W / median_us (graft)\n");
    printf("# %-8s %-6s %-5s %-18s %7s %4s %12s %12s %7s %8s\n", "name", "layer", "dtype",
           "shape", "threads", "reps", "median_us", "baseline_us", "ratio", "gflops");
    fflush(stdout);
  }
  int failures = 0;
  for (int th = 0; th < 2; th++)
    for (size_t li = 0; li < sizeof LAYERS / sizeof LAYERS[0]; li++)
      for (int k = 0; k < N_KINDS; k++) {
        exp_ e = {.l = &LAYERS[li], .kind = k, .N = batch};
        result r = {0};
        if (run_one(rt[th], &e, reps, &r) == 0)
          print_row(json, &e, th + 1, &r);
        else
          failures++;
      }
  for (int i = 0; i < 2; i++) graft_runtime_destroy(rt[i]);
  bench_info_free(&info);
  if (failures) fprintf(stderr, "bench_conv: %d experiment(s) failed\n", failures);
  return failures ? 1 : 0;
}
