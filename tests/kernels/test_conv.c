/* conv2d, max_pool2d and avg_pool2d against naive loops in double: odd
 * sizes, stride, padding, dilation, groups (depthwise too), batch 1 and
 * more, f32 and f64; bitwise equal results on seq, ws x1 / x2 / x8 and omp
 * at the default grain and at a small one (many tiles); one trace with a
 * symbolic batch dim for every batch size; window ties and NaN in max
 * pooling; and the refusals with their messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>

#include "testutil.h"

TU_SUPPRESS_GOMP_TASK_LEAK();

enum { OP_CONV, OP_MAX, OP_AVG };

typedef struct conv_case {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
} conv_case;

/* Conv cases: odd sizes, strides, paddings, dilations, groups, batch 1. */
static const conv_case k_conv[] = {
    {1, 1, 5, 5, 1, 3, 3, 1, 1, 0, 0, 1, 1, 1},
    {2, 3, 7, 6, 4, 3, 2, 1, 1, 1, 0, 1, 1, 1},
    {3, 4, 9, 11, 6, 3, 3, 2, 3, 1, 2, 1, 1, 2},
    {2, 6, 10, 9, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6},   /* depthwise */
    {1, 2, 11, 13, 5, 3, 2, 2, 1, 2, 1, 2, 3, 1},  /* dilation */
    {4, 1, 28, 28, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},  /* the demo's first layer, narrower */
    {2, 8, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1}, /* ... its second */
    {2, 3, 4, 5, 2, 4, 5, 1, 1, 0, 0, 1, 1, 1},    /* kernel as large as the input */
    {5, 6, 3, 3, 9, 1, 1, 1, 1, 0, 0, 1, 1, 3},    /* 1x1, grouped */
};

/* Pool cases (o, dh, dw and groups unused). */
static const conv_case k_pool[] = {
    {1, 1, 4, 4, 0, 2, 2, 2, 2, 0, 0, 1, 1, 1},  {2, 3, 7, 9, 0, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {3, 2, 8, 5, 0, 2, 3, 1, 2, 0, 1, 1, 1, 1},  {2, 4, 28, 28, 0, 2, 2, 2, 2, 0, 0, 1, 1, 1},
    {1, 2, 6, 7, 0, 3, 2, 3, 1, 1, 0, 1, 1, 1},
};

typedef struct conv_param {
  int op;
  const conv_case *c;
} conv_param;

static graft_status trace_conv(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const conv_param *p = user;
  const conv_case *c = p->c;
  const int64_t k[2] = {c->kh, c->kw}, s[2] = {c->sh, c->sw}, pad[2] = {c->ph, c->pw},
                d[2] = {c->dh, c->dw};
  if (p->op == OP_CONV) out[0] = graft_conv2d(t, in[0], in[1], s, pad, d, c->groups);
  else if (p->op == OP_MAX) out[0] = graft_max_pool2d(t, in[0], k, s, pad);
  else out[0] = graft_avg_pool2d(t, in[0], k, s, pad);
  return GRAFT_OK;
}

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* The oracle: out (double, [N, O, OH, OW] or [N, C, OH, OW]) and the
 * magnitude sum |x| |w| of each element (the scale of its rounding). */
static void oracle(int op, const conv_case *c, const graft_tensor *x, const graft_tensor *w,
                   double *out, double *mag) {
  const int64_t OH = out_dim(c->h, c->kh, c->sh, c->ph, op == OP_CONV ? c->dh : 1);
  const int64_t OW = out_dim(c->w, c->kw, c->sw, c->pw, op == OP_CONV ? c->dw : 1);
  const int64_t O = op == OP_CONV ? c->o : c->c, cg = c->c / c->groups, og = O / c->groups;
  int64_t e = 0;
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++, e++) {
          double acc = op == OP_MAX ? -INFINITY : 0.0, m = 0.0;
          for (int64_t ci = 0; ci < (op == OP_CONV ? cg : 1); ci++)
            for (int64_t kh = 0; kh < c->kh; kh++)
              for (int64_t kw = 0; kw < c->kw; kw++) {
                const int64_t dil_h = op == OP_CONV ? c->dh : 1, dil_w = op == OP_CONV ? c->dw : 1;
                const int64_t ih = oh * c->sh - c->ph + kh * dil_h;
                const int64_t iw = ow * c->sw - c->pw + kw * dil_w;
                if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
                const int64_t ch = op == OP_CONV ? o / og * cg + ci : o;
                const double xv = tu_get(x, ((n * c->c + ch) * c->h + ih) * c->w + iw);
                if (op == OP_CONV) {
                  const double wv = tu_get(w, ((o * cg + ci) * c->kh + kh) * c->kw + kw);
                  acc += xv * wv;
                  m += fabs(xv * wv);
                } else if (op == OP_MAX) {
                  acc = xv > acc ? xv : acc;
                } else {
                  acc += xv;
                  m += fabs(xv);
                }
              }
          out[e] = op == OP_AVG ? acc / (double)(c->kh * c->kw) : acc;
          mag[e] = op == OP_AVG ? m / (double)(c->kh * c->kw) : m;
        }
}

/* The executors every case runs on, at each grain; all must agree bitwise. */
static const struct {
  const char *sched;
  int threads;
} k_execs[] = {{"seq", 1}, {"ws", 1}, {"ws", 2}, {"ws", 8}, {"omp", 2}};
static const int64_t k_grains[] = {0, 256};

static void check_case(int op, const conv_case *c, graft_dtype dt, uint64_t seed) {
  tu_rng rng = {seed};
  const int64_t xs[4] = {c->n, c->c, c->h, c->w};
  const int64_t ws[4] = {c->o, c->groups ? c->c / c->groups : 0, c->kh, c->kw};
  graft_tensor *in[2] = {tu_tensor_rand(&rng, dt, 4, xs, -1, 1),
                         op == OP_CONV ? tu_tensor_rand(&rng, dt, 4, ws, -1, 1) : NULL};
  const int64_t OH = out_dim(c->h, c->kh, c->sh, c->ph, op == OP_CONV ? c->dh : 1);
  const int64_t OW = out_dim(c->w, c->kw, c->sw, c->pw, op == OP_CONV ? c->dw : 1);
  const int64_t os[4] = {c->n, op == OP_CONV ? c->o : c->c, OH, OW};
  const int64_t numel = tu_numel(4, os);
  double *want = malloc((size_t)numel * sizeof *want), *mag = malloc((size_t)numel * sizeof *mag);
  assert_non_null(want);
  assert_non_null(mag);
  oracle(op, c, in[0], in[1], want, mag);
  const double rtol = dt == GRAFT_F32 ? 1e-5 : 1e-12;
  conv_param p = {op, c};
  for (size_t gi = 0; gi < TU_N_OF(k_grains); gi++) {
    graft_tensor *first = NULL;
    for (size_t ei = 0; ei < TU_N_OF(k_execs); ei++) {
      char ctx[256], msg[512] = "";
      snprintf(ctx, sizeof ctx, "op %d [%lld,%lld,%lld,%lld] k %lldx%lld s %lldx%lld p %lldx%lld "
               "d %lldx%lld g %lld %s on %s x%d grain %lld", op, (long long)c->n, (long long)c->c,
               (long long)c->h, (long long)c->w, (long long)c->kh, (long long)c->kw,
               (long long)c->sh, (long long)c->sw, (long long)c->ph, (long long)c->pw,
               (long long)c->dh, (long long)c->dw, (long long)c->groups, graft_dtype_name(dt),
               k_execs[ei].sched, k_execs[ei].threads, (long long)k_grains[gi]);
      graft_runtime *rt = tu_runtime_of(k_execs[ei].sched, k_execs[ei].threads, k_grains[gi]);
      graft_tensor *out = NULL;
      tu_assert_run_ok(tu_run(rt, trace_conv, &p, op == OP_CONV ? 2 : 1, in, 1, &out, msg), ctx,
                       msg);
      graft_runtime_destroy(rt);
      tu_assert_tensor(out, dt, 4, os, ctx);
      for (int64_t e = 0; e < numel; e++) {
        double got = tu_get(out, e);
        double tol = op == OP_MAX ? 0.0 : rtol * (mag[e] + 1e-30);
        if (!(fabs(got - want[e]) <= tol))
          fail_msg("%s: element %lld is %.17g, want %.17g (tolerance %g)", ctx, (long long)e, got,
                   want[e], tol);
      }
      if (!first) {
        first = out;
      } else {
        if (!tu_bitwise_equal(out, first)) fail_msg("%s: differs bitwise from seq", ctx);
        graft_tensor_destroy(out);
      }
    }
    graft_tensor_destroy(first);
  }
  free(want);
  free(mag);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

static void test_conv2d__oracle(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_N_OF(k_conv); i++) {
    check_case(OP_CONV, &k_conv[i], GRAFT_F32, 100 + i);
    check_case(OP_CONV, &k_conv[i], GRAFT_F64, 200 + i);
  }
}

static void test_max_pool2d__oracle(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_N_OF(k_pool); i++) {
    check_case(OP_MAX, &k_pool[i], GRAFT_F32, 300 + i);
    check_case(OP_MAX, &k_pool[i], GRAFT_F64, 400 + i);
  }
}

static void test_avg_pool2d__oracle(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_N_OF(k_pool); i++) {
    check_case(OP_AVG, &k_pool[i], GRAFT_F32, 500 + i);
    check_case(OP_AVG, &k_pool[i], GRAFT_F64, 600 + i);
  }
}

/* One trace with the batch dim symbolic serves batches of 1, 3 and 2, each
 * matching the oracle (conv2d, then both pools on its output). */
static graft_status trace_cnn(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  const int64_t pad[2] = {1, 1}, k2[2] = {2, 2};
  graft_value *y = graft_conv2d(t, in[0], in[1], NULL, pad, NULL, 1);
  out[0] = y;
  out[1] = graft_max_pool2d(t, y, k2, NULL, NULL);
  out[2] = graft_avg_pool2d(t, y, k2, NULL, NULL);
  return GRAFT_OK;
}

static void test_conv2d__symbolic_batch(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime_of("ws", 2, 0);
  const int64_t sig_x[4] = {-1, 2, 6, 6}, ws[4] = {3, 2, 3, 3};
  static const graft_dtype dts[2] = {GRAFT_F64, GRAFT_F64};
  static const int ranks[2] = {4, 4};
  const int64_t *const shapes[2] = {sig_x, ws};
  const graft_signature sig = {2, dts, ranks, shapes};
  graft_function_desc d = {.name = "cnn", .trace = trace_cnn, .n_inputs = 2, .n_outputs = 3,
                           .signature = &sig};
  graft_function *f = tu_function_create(rt, &d);
  tu_rng rng = {7};
  graft_tensor *w = tu_tensor_rand(&rng, GRAFT_F64, 4, ws, -1, 1);
  const int64_t batches[] = {1, 3, 2};
  for (size_t b = 0; b < TU_N_OF(batches); b++) {
    const int64_t xs[4] = {batches[b], 2, 6, 6};
    graft_tensor *in[2] = {tu_tensor_rand(&rng, GRAFT_F64, 4, xs, -1, 1), w}, *out[3] = {0};
    tu_assert_call_ok(f, 2, in, 3, out);
    const conv_case conv = {batches[b], 2, 6, 6, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1};
    const conv_case pool = {batches[b], 3, 6, 6, 0, 2, 2, 2, 2, 0, 0, 1, 1, 1};
    double *cw = malloc(sizeof(double) * (size_t)(batches[b] * 108));
    double *cm = malloc(sizeof(double) * (size_t)(batches[b] * 108));
    assert_non_null(cw);
    assert_non_null(cm);
    oracle(OP_CONV, &conv, in[0], w, cw, cm);
    for (int64_t e = 0; e < batches[b] * 108; e++)
      if (fabs(tu_get(out[0], e) - cw[e]) > 1e-12 * (cm[e] + 1e-30))
        fail_msg("batch %lld: conv element %lld is %g, want %g", (long long)batches[b],
                 (long long)e, tu_get(out[0], e), cw[e]);
    for (int op = OP_MAX; op <= OP_AVG; op++) {
      oracle(op, &pool, out[0], NULL, cw, cm);
      for (int64_t e = 0; e < batches[b] * 27; e++)
        if (fabs(tu_get(out[op], e) - cw[e]) > 1e-12 * (cm[e] + 1e-30))
          fail_msg("batch %lld: pool %d element %lld is %g, want %g", (long long)batches[b], op,
                   (long long)e, tu_get(out[op], e), cw[e]);
    }
    free(cw);
    free(cm);
    tu_destroy_outs(out, 3);
    graft_tensor_destroy(in[0]);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
  graft_tensor_destroy(w);
  graft_runtime_destroy(rt);
}

/* A NaN anywhere in a window gives NaN; padding never wins, even over an
 * all-negative window; windows of 1, 2 and 4 elements.  (Which tie wins
 * shows in the gradient: tests/grad/test_conv_grad.c.) */
static void test_max_pool2d__nan_padding(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  const double xv[16] = {-5, -5, -1, 2, -5, -5, 2, 2, NAN, 0, 3, 3, 0, 1, 3, 3};
  const int64_t xs[4] = {1, 1, 4, 4};
  graft_tensor *x = tu_tensor_from(GRAFT_F64, 4, xs, xv);
  /* kernel 2, stride 2, padding 1: windows of 1, 2 or 4 elements */
  const conv_case c = {1, 1, 4, 4, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1};
  conv_param p = {OP_MAX, &c};
  graft_tensor *out = NULL;
  char msg[512];
  tu_assert_run_ok(tu_run(rt, trace_conv, &p, 1, &x, 1, &out, msg), "ties", msg);
  const double want[9] = {-5, -1, 2, NAN, 3, 3, 0, 3, 3};
  for (int i = 0; i < 9; i++)
    if (!tu_close(tu_get(out, i), want[i], 0, 0))
      fail_msg("element %d is %g, want %g", i, tu_get(out, i), want[i]);
  graft_tensor_destroy(out);
  graft_tensor_destroy(x);
  graft_runtime_destroy(rt);
}

/* ---- refusals ------------------------------------------------------------ */

typedef struct bad_case {
  const char *what;
  int op;
  int64_t xs[4], ws[4];
  int xr, wr;
  graft_dtype wdt;
  int64_t k[2], s[2], p[2], d[2], groups;
  graft_status want;
  const char *needle;
} bad_case;

static const bad_case k_bad[] = {
    {"rank 3 input", OP_CONV, {2, 3, 5}, {4, 3, 3, 3}, 3, 4, GRAFT_F32, {0}, {1, 1}, {0, 0}, {1, 1}, 1,
     GRAFT_ESHAPE, "rank 4"},
    {"rank 2 weight", OP_CONV, {2, 3, 5, 5}, {4, 27}, 4, 2, GRAFT_F32, {0}, {1, 1}, {0, 0}, {1, 1}, 1,
     GRAFT_ESHAPE, "weight [4,27]"},
    {"channel mismatch", OP_CONV, {2, 3, 5, 5}, {4, 2, 3, 3}, 4, 4, GRAFT_F32, {0}, {1, 1}, {0, 0},
     {1, 1}, 1, GRAFT_ESHAPE, "needs 3"},
    {"groups not dividing C", OP_CONV, {2, 3, 5, 5}, {4, 1, 3, 3}, 4, 4, GRAFT_F32, {0}, {1, 1},
     {0, 0}, {1, 1}, 2, GRAFT_EINVAL, "groups 2"},
    {"groups not dividing O", OP_CONV, {2, 4, 5, 5}, {3, 2, 3, 3}, 4, 4, GRAFT_F32, {0}, {1, 1},
     {0, 0}, {1, 1}, 2, GRAFT_EINVAL, "3 output channels"},
    {"zero groups", OP_CONV, {2, 4, 5, 5}, {3, 2, 3, 3}, 4, 4, GRAFT_F32, {0}, {1, 1}, {0, 0},
     {1, 1}, 0, GRAFT_EINVAL, "groups 0"},
    {"kernel past the padded input", OP_CONV, {2, 3, 4, 4}, {4, 3, 7, 3}, 4, 4, GRAFT_F32, {0},
     {1, 1}, {1, 1}, {1, 1}, 1, GRAFT_ESHAPE, "does not fit input [2,3,4,4]"},
    {"dilated kernel past the input", OP_CONV, {2, 3, 6, 6}, {4, 3, 3, 3}, 4, 4, GRAFT_F32, {0},
     {1, 1}, {0, 0}, {3, 1}, 1, GRAFT_ESHAPE, "dilation 3x1"},
    {"zero stride", OP_CONV, {2, 3, 5, 5}, {4, 3, 3, 3}, 4, 4, GRAFT_F32, {0}, {0, 1}, {0, 0},
     {1, 1}, 1, GRAFT_EINVAL, "stride 0x1"},
    {"negative dilation", OP_CONV, {2, 3, 5, 5}, {4, 3, 3, 3}, 4, 4, GRAFT_F32, {0}, {1, 1},
     {0, 0}, {1, -2}, 1, GRAFT_EINVAL, "dilation 1x-2"},
    {"negative padding", OP_CONV, {2, 3, 5, 5}, {4, 3, 3, 3}, 4, 4, GRAFT_F32, {0}, {1, 1},
     {-1, 0}, {1, 1}, 1, GRAFT_EINVAL, "padding -1x0"},
    {"dtype mismatch", OP_CONV, {2, 3, 5, 5}, {4, 3, 3, 3}, 4, 4, GRAFT_F64, {0}, {1, 1}, {0, 0},
     {1, 1}, 1, GRAFT_EDTYPE, "differ in dtype"},
    {"huge padding", OP_CONV, {1, 1, 5, 5}, {1, 1, 3, 3}, 4, 4, GRAFT_F32, {0}, {1, 1},
     {INT64_MAX / 2, 0}, {1, 1}, 1, GRAFT_ESHAPE, "does not fit"},
    {"huge dilation", OP_CONV, {1, 1, 5, 5}, {1, 1, 3, 3}, 4, 4, GRAFT_F32, {0}, {1, 1}, {0, 0},
     {INT64_MAX / 2, 1}, 1, GRAFT_ESHAPE, "does not fit"},
    {"huge output", OP_CONV, {1, 1, 1, 1}, {1, 1, 1, 1}, 4, 4, GRAFT_F32, {0}, {1, 1},
     {INT64_MAX / 8, INT64_MAX / 8}, {1, 1}, 1, GRAFT_ESHAPE, NULL},
    {"huge spatial output", OP_CONV, {1, 1, 1, 1}, {1, 1, 1, 1}, 4, 4, GRAFT_F32, {0}, {1, 1},
     {25000, 25000}, {1, 1}, 1, GRAFT_EUNSUPPORTED, "BLAS int range"},
    {"huge weight rows", OP_CONV, {1, 1, 65536, 65536}, {1, 1, 65536, 65536}, 4, 4, GRAFT_F32, {0},
     {1, 1}, {0, 0}, {1, 1}, 1, GRAFT_EUNSUPPORTED, "BLAS int range"},
    {"pool kernel 0", OP_MAX, {1, 1, 5, 5}, {0}, 4, 0, GRAFT_F32, {0, 2}, {1, 1}, {0, 0}, {1, 1},
     1, GRAFT_EINVAL, "kernel 0x2"},
    {"pool padding past half", OP_MAX, {1, 1, 5, 5}, {0}, 4, 0, GRAFT_F32, {2, 2}, {1, 1}, {0, 2},
     {1, 1}, 1, GRAFT_EINVAL, "more than half"},
    {"pool kernel past input", OP_AVG, {1, 1, 5, 5}, {0}, 4, 0, GRAFT_F32, {8, 2}, {1, 1}, {1, 1},
     {1, 1}, 1, GRAFT_ESHAPE, "does not fit"},
    {"pool rank 3", OP_AVG, {1, 5, 5}, {0}, 3, 0, GRAFT_F32, {2, 2}, {1, 1}, {0, 0}, {1, 1}, 1,
     GRAFT_ESHAPE, "rank 4"},
    {"pool zero stride", OP_MAX, {1, 1, 5, 5}, {0}, 4, 0, GRAFT_F32, {2, 2}, {1, 0}, {0, 0},
     {1, 1}, 1, GRAFT_EINVAL, "stride 1x0"},
};

static graft_status trace_bad(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const bad_case *b = user;
  graft_value *x = graft_fill(t, GRAFT_F32, b->xr, b->xs, 1.0);
  (void)in;
  if (b->op == OP_CONV) {
    graft_value *w = graft_fill(t, b->wdt, b->wr, b->ws, 1.0);
    out[0] = graft_conv2d(t, x, w, b->s, b->p, b->d, b->groups);
  } else if (b->op == OP_MAX) {
    out[0] = graft_max_pool2d(t, x, b->k, b->s, b->p);
  } else {
    out[0] = graft_avg_pool2d(t, x, b->k, b->s, b->p);
  }
  return GRAFT_OK;
}

static void test_conv2d__refusals(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  for (size_t i = 0; i < TU_N_OF(k_bad); i++) {
    graft_tensor *out = NULL;
    char msg[512] = "";
    graft_status st = tu_run(rt, trace_bad, (void *)&k_bad[i], 0, NULL, 1, &out, msg);
    const char *op = k_bad[i].op == OP_CONV ? "conv2d" : k_bad[i].op == OP_MAX ? "max_pool2d"
                                                                               : "avg_pool2d";
    tu_assert_run_fails(st, k_bad[i].want, out, msg, op, k_bad[i].what);
    if (k_bad[i].needle && !strstr(msg, k_bad[i].needle))
      fail_msg("%s: message \"%s\" lacks \"%s\"", k_bad[i].what, msg, k_bad[i].needle);
  }
  graft_runtime_destroy(rt);
}

/* Non-float operands, a NULL kernel and values of no trace are refused
 * too, naming the op. */
static graft_status trace_misuse(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)in;
  const int which = *(const int *)user;
  const int64_t s4[4] = {1, 1, 4, 4};
  graft_value *xi = graft_fill(t, GRAFT_I32, 4, s4, 1.0), *xf = graft_fill(t, GRAFT_F32, 4, s4, 1);
  const int64_t k[2] = {2, 2};
  switch (which) {
  case 0: out[0] = graft_conv2d(t, xi, xi, NULL, NULL, NULL, 1); break;
  case 1: out[0] = graft_max_pool2d(t, xf, NULL, NULL, NULL); break;
  case 2: out[0] = graft_conv2d(t, xf, NULL, NULL, NULL, NULL, 1); break;
  default: out[0] = graft_avg_pool2d(t, xi, k, NULL, NULL); break;
  }
  return GRAFT_OK;
}

static void test_conv2d__misuse(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  static const graft_status want[4] = {GRAFT_EDTYPE, GRAFT_EINVAL, GRAFT_EINVAL, GRAFT_EDTYPE};
  static const char *const op[4] = {"conv2d", "max_pool2d", "conv2d", "avg_pool2d"};
  for (int i = 0; i < 4; i++) {
    graft_tensor *out = NULL;
    char msg[512] = "";
    graft_status st = tu_run(rt, trace_misuse, &i, 0, NULL, 1, &out, msg);
    tu_assert_run_fails(st, want[i], out, msg, op[i], op[i]);
  }
  graft_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv2d__oracle),
      cmocka_unit_test(test_max_pool2d__oracle),
      cmocka_unit_test(test_avg_pool2d__oracle),
      cmocka_unit_test(test_conv2d__symbolic_batch),
      cmocka_unit_test(test_max_pool2d__nan_padding),
      cmocka_unit_test(test_conv2d__refusals),
      cmocka_unit_test(test_conv2d__misuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
