/* Control flow: cond, while_loop, scan and remat, their values, their
 * gradients in both modes against analytic results, unrolled graphs and
 * finite differences, and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <unistd.h>

#include "testutil.h"

TU_RUNTIME_GROUP();

#define F64 GRAFT_F64

static graft_value *sum(graft_trace *t, graft_value *x) { return graft_reduce_sum(t, x, 0, NULL, 0); }

/* ---- cond ------------------------------------------------------------------- */

/* f(x) = x^2 sin(x) where sum(x) > 0, else exp(x) - 1 (whole vector). */
static graft_status pos_branch(graft_trace *t, int n, graft_value *const *in, int no,
                               graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = graft_mul(t, graft_square(t, in[0]), graft_sin(t, in[0]));
  return GRAFT_OK;
}
static graft_status neg_branch(graft_trace *t, int n, graft_value *const *in, int no,
                               graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = graft_sub(t, graft_exp(t, in[0]), graft_scalar(t, F64, 1));
  return GRAFT_OK;
}

/* in: x, v.  out: f(x), d sum(f)/dx, the JVP of f along v. */
static graft_status piecewise(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *u) {
  (void)n_in, (void)n_out, (void)u;
  graft_value *x = in[0];
  graft_value *pred = graft_greater(t, sum(t, x), graft_scalar(t, F64, 0));
  graft_value *y;
  graft_cond(t, pred, 1, &x, pos_branch, neg_branch, NULL, 1, &y);
  out[0] = y;
  graft_value *loss = sum(t, y);
  graft_gradients(t, 1, &loss, NULL, 1, &x, GRAFT_UNCONNECTED_ZERO, &out[1]);
  graft_jvp(t, 1, &x, &in[1], 1, &y, GRAFT_UNCONNECTED_ZERO, &out[2]);
  return GRAFT_OK;
}

static void test_cond_piecewise(void **state) {
  (void)state;
  graft_runtime *rt = g_rt;
  static const double pts[2][3] = {{0.5, 1.25, -0.25}, {-0.5, -1.5, 0.75}};
  const double v[3] = {0.3, -0.7, 1.1};
  for (int side = 0; side < 2; side++) {
    int64_t shape[1] = {3};
    graft_tensor *in[2], *out[3];
    graft_tensor_create(F64, 1, shape, &in[0]);
    graft_tensor_create(F64, 1, shape, &in[1]);
    memcpy(graft_tensor_data(in[0]), pts[side], sizeof pts[side]);
    memcpy(graft_tensor_data(in[1]), v, sizeof v);
    char msg[512];
    tu_assert_run_ok(tu_run(rt, piecewise, NULL, 2, in, 3, out, msg), "cond", msg);
    double y[3], g[3], j[3];
    for (int i = 0; i < 3; i++) {
      double x = pts[side][i];
      if (side == 0) {
        y[i] = x * x * sin(x);
        g[i] = 2 * x * sin(x) + x * x * cos(x);
      } else {
        y[i] = exp(x) - 1;
        g[i] = exp(x);
      }
      j[i] = g[i] * v[i];
    }
    tu_assert_close(out[0], y, 3, 1e-15, 0);
    tu_assert_close(out[1], g, 3, 1e-15, 0);
    tu_assert_close(out[2], j, 3, 1e-15, 0);
    for (int i = 0; i < 3; i++) graft_tensor_destroy(out[i]);
    graft_tensor_destroy(in[0]);
    graft_tensor_destroy(in[1]);
  }
}

static graft_status wrong_shape_branch(graft_trace *t, int n, graft_value *const *in, int no,
                                       graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = sum(t, in[0]);
  return GRAFT_OK;
}
static graft_status wrong_dtype_branch(graft_trace *t, int n, graft_value *const *in, int no,
                                       graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = graft_cast(t, in[0], GRAFT_F32);
  return GRAFT_OK;
}

static graft_status mismatched(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  graft_trace_fn other = *(graft_trace_fn *)u;
  graft_value *pred = graft_greater(t, sum(t, in[0]), graft_scalar(t, F64, 0));
  graft_cond(t, pred, 1, in, pos_branch, other, NULL, 1, out);
  return GRAFT_OK;
}

static void test_cond_mismatch_refused(void **state) {
  (void)state;
  graft_runtime *rt = g_rt;
  int64_t shape[1] = {3};
  graft_tensor *x = NULL, *out = NULL;
  graft_tensor_create(F64, 1, shape, &x);
  char msg[512];
  graft_trace_fn fn = wrong_shape_branch;
  tu_assert_status(tu_run(rt, mismatched, &fn, 1, &x, 1, &out, msg), GRAFT_ESHAPE);
  assert_non_null(strstr(msg, "cond: output 0 is f64[3] in the then branch but f64[] in the else branch"));
  fn = wrong_dtype_branch;
  tu_assert_status(tu_run(rt, mismatched, &fn, 1, &x, 1, &out, msg), GRAFT_EDTYPE);
  assert_non_null(strstr(msg, "f32[3] in the else branch"));
  assert_null(out);
  graft_tensor_destroy(x);
}

/* ---- while_loop ------------------------------------------------------------- */

/* Newton for sqrt(a): x <- (x + a / x) / 2 while |x^2 - a| > 1e-12 a. */
static graft_status newton_cond(graft_trace *t, int n, graft_value *const *v, int no,
                                graft_value **out, void *u) {
  (void)n, (void)no;
  graft_value *a = u ? *(graft_value **)u : NULL;
  graft_value *err = graft_abs(t, graft_sub(t, graft_square(t, v[0]), a));
  out[0] = graft_greater(t, err, graft_mul(t, a, graft_scalar(t, F64, 1e-12)));
  return GRAFT_OK;
}
static graft_status newton_body(graft_trace *t, int n, graft_value *const *v, int no,
                                graft_value **out, void *u) {
  (void)n, (void)no;
  graft_value *a = *(graft_value **)u; /* captured from the function's trace */
  out[0] = graft_mul(t, graft_add(t, v[0], graft_div(t, a, v[0])), graft_scalar(t, F64, 0.5));
  out[1] = graft_add(t, v[1], graft_scalar(t, GRAFT_I32, 1));
  return GRAFT_OK;
}
static graft_status newton(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *u) {
  (void)n_in, (void)n_out, (void)u;
  graft_value *a = in[0];
  graft_value *init[2] = {a, graft_scalar(t, GRAFT_I32, 0)};
  graft_while_loop(t, newton_cond, newton_body, &a, 2, init, out, NULL);
  return GRAFT_OK;
}

static void test_while_newton(void **state) {
  (void)state;
  graft_runtime *rt = g_rt;
  const double as[] = {2, 81, 1e-4, 12345.678};
  for (size_t k = 0; k < TU_N_OF(as); k++) {
    graft_tensor *a = NULL, *out[2];
    graft_tensor_create(F64, 0, NULL, &a);
    *(double *)graft_tensor_data(a) = as[k];
    char msg[512];
    tu_assert_run_ok(tu_run(rt, newton, NULL, 1, &a, 2, out, msg), "newton", msg);
    double r = tu_get(out[0], 0);
    assert_true(fabs(r * r - as[k]) <= 1e-12 * as[k]);
    /* the count depends on the data: a reference loop agrees exactly */
    double x = as[k];
    int n = 0;
    while (fabs(x * x - as[k]) > as[k] * 1e-12) {
      x = (x + as[k] / x) * 0.5;
      n++;
    }
    assert_true(r == x);
    assert_int_equal((int)tu_get(out[1], 0), n);
    graft_tensor_destroy(out[0]);
    graft_tensor_destroy(out[1]);
    graft_tensor_destroy(a);
  }
}

/* x^n by n multiplications, n an input: vars (i, p). */
static graft_status pow_cond(graft_trace *t, int n, graft_value *const *v, int no,
                             graft_value **out, void *u) {
  (void)n, (void)no;
  out[0] = graft_less(t, v[0], *(graft_value **)u);
  return GRAFT_OK;
}
typedef struct pow_ctx {
  graft_value *n, *x;
} pow_ctx;
static graft_status pow_body(graft_trace *t, int n, graft_value *const *v, int no,
                             graft_value **out, void *u) {
  (void)n, (void)no;
  const pow_ctx *c = u;
  out[0] = graft_add(t, v[0], graft_scalar(t, GRAFT_I32, 1));
  out[1] = graft_mul(t, v[1], c->x);
  return GRAFT_OK;
}
static graft_status pow_cond2(graft_trace *t, int n, graft_value *const *v, int no,
                              graft_value **out, void *u) {
  return pow_cond(t, n, v, no, out, &((pow_ctx *)u)->n);
}

/* in: x (f64 scalar), n (i32 scalar); out: x^n, d/dx reverse, d/dx forward. */
static graft_status power(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                          graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  int64_t max_iters = *(int64_t *)u;
  pow_ctx c = {in[1], in[0]};
  graft_value *init[2] = {graft_scalar(t, GRAFT_I32, 0), graft_scalar(t, F64, 1)}, *res[2];
  graft_while_opts o = {max_iters};
  graft_while_loop(t, pow_cond2, pow_body, &c, 2, init, res, &o);
  out[0] = res[1];
  graft_gradients(t, 1, &res[1], NULL, 1, &in[0], GRAFT_UNCONNECTED_ZERO, &out[1]);
  graft_value *one = graft_ones_like(t, in[0]);
  graft_jvp(t, 1, &in[0], &one, 1, &res[1], GRAFT_UNCONNECTED_ZERO, &out[2]);
  return GRAFT_OK;
}

static void test_while_power_gradients(void **state) {
  (void)state;
  graft_runtime *rt = g_rt;
  graft_tensor *in[2], *out[3];
  graft_tensor_create(F64, 0, NULL, &in[0]);
  graft_tensor_create(GRAFT_I32, 0, NULL, &in[1]);
  int64_t max_iters = 16;
  const int ns[] = {0, 1, 5, 9};
  for (size_t k = 0; k < TU_N_OF(ns); k++) {
    double x = 1.3;
    *(double *)graft_tensor_data(in[0]) = x;
    *(int32_t *)graft_tensor_data(in[1]) = ns[k];
    char msg[512];
    tu_assert_run_ok(tu_run(rt, power, &max_iters, 2, in, 3, out, msg), "power", msg);
    double want = 1, d = 0;
    for (int i = 0; i < ns[k]; i++) {
      d = d * x + want; /* d/dx of want * x */
      want *= x;
    }
    assert_true(tu_get(out[0], 0) == want);
    assert_true(tu_close(tu_get(out[1], 0), ns[k] * pow(x, ns[k] - 1), 1e-14, 0));
    assert_true(tu_close(tu_get(out[2], 0), ns[k] * pow(x, ns[k] - 1), 1e-14, 0));
    assert_true(tu_get(out[1], 0) == d || tu_close(tu_get(out[1], 0), d, 1e-15, 0));
    for (int i = 0; i < 3; i++) graft_tensor_destroy(out[i]);
  }
  /* reverse mode of an unbounded loop is refused, naming what to do */
  max_iters = 0;
  char msg[512];
  tu_assert_status(tu_run(rt, power, &max_iters, 2, in, 3, out, msg), GRAFT_EUNSUPPORTED);
  assert_non_null(strstr(msg, "while_loop: reverse mode needs opts.max_iters > 0"));
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

/* ---- scan: an RNN against the same RNN unrolled ------------------------------ */

enum { RB = 4, RD = 8, RH = 64, RT = 50 };

typedef struct rnn_ctx {
  int mode;                    /* 0 scan, 1 unrolled, 2 reverse scan, 3 reverse unrolled,
                                  4 scan with checkpoints, 5 reverse scan with checkpoints */
  int64_t checkpoint;
  graft_value *U, *W, *b;      /* of the function's trace: captured by the body */
} rnn_ctx;

static graft_value *cell(graft_trace *t, const rnn_ctx *c, graft_value *h, graft_value *x) {
  graft_value *z = graft_add(t, graft_matmul(t, x, c->U, 0), graft_matmul(t, h, c->W, 0));
  return graft_tanh(t, graft_add(t, z, c->b));
}

static graft_status rnn_body(graft_trace *t, int n, graft_value *const *in, int no,
                             graft_value **out, void *u) {
  (void)n, (void)no;
  out[0] = out[1] = cell(t, u, in[0], in[1]);
  return GRAFT_OK;
}

/* The same cell with the loss accumulated in a carry: (h, acc), x ->
 * (h', acc + sum(h'^2) / 2); no ys. */
static graft_status rnn_acc_body(graft_trace *t, int n, graft_value *const *in, int no,
                                 graft_value **out, void *u) {
  (void)n, (void)no;
  out[0] = cell(t, u, in[0], in[2]);
  out[1] = graft_add(t, in[1], graft_mul(t, sum(t, graft_square(t, out[0])), graft_scalar(t, F64, 0.5)));
  return GRAFT_OK;
}

/* in: as rnn_loss; the loss of an RNN whose per-step loss is carried. */
static graft_status rnn_acc_grads(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  const int *m = u;
  rnn_ctx c = {.U = in[2], .W = in[3], .b = in[4]};
  graft_scan_opts o = {.reverse = m[0], .checkpoint = m[1]};
  graft_value *init[2] = {in[0], graft_scalar(t, F64, 0)}, *res[2];
  graft_scan(t, rnn_acc_body, &c, 2, init, 1, &in[1], 0, res, &o);
  out[0] = graft_add(t, res[1], sum(t, graft_sin(t, res[0])));
  graft_gradients(t, 1, &out[0], NULL, 5, in, GRAFT_UNCONNECTED_ZERO, &out[1]);
  return GRAFT_OK;
}

/* in: h0 [B,H], X [T,B,D], U [D,H], W [H,H], b [H] (f64).  The loss and
 * the final state and the ys, stacked; mode picks scan or unrolled. */
static graft_value *rnn_loss(graft_trace *t, rnn_ctx *c, graft_value *const *in) {
  c->U = in[2], c->W = in[3], c->b = in[4];
  graft_value *hT, *ys;
  if (c->mode == 0 || c->mode == 2 || c->mode >= 4) {
    graft_scan_opts o = {.reverse = c->mode == 2 || c->mode == 5,
                         .checkpoint = c->mode >= 4 ? c->checkpoint : 0};
    graft_value *res[2];
    graft_scan(t, rnn_body, c, 1, &in[0], 1, &in[1], 1, res, &o);
    hT = res[0], ys = res[1];
  } else {
    graft_value *h = in[0], *rows[RT];
    for (int s = 0; s < RT; s++) {
      int r = c->mode == 3 ? RT - 1 - s : s;
      int64_t begin[3] = {r, 0, 0}, size[3] = {1, RB, RD}, shape[2] = {RB, RD};
      h = cell(t, c, h, graft_reshape(t, graft_slice(t, in[1], begin, size), 2, shape));
      int64_t one[3] = {1, RB, RH};
      rows[r] = graft_reshape(t, h, 3, one);
    }
    hT = h, ys = graft_concat(t, RT, rows, 0);
  }
  /* a loss that reads every y and the final state */
  graft_value *l = graft_mul(t, sum(t, graft_square(t, ys)), graft_scalar(t, F64, 0.5));
  return graft_add(t, l, sum(t, graft_sin(t, hT)));
}

static graft_status rnn_grads(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  rnn_ctx c = {.mode = ((int *)u)[0], .checkpoint = ((int *)u)[1]};
  out[0] = rnn_loss(t, &c, in);
  graft_gradients(t, 1, &out[0], NULL, 5, in, GRAFT_UNCONNECTED_ZERO, &out[1]);
  return GRAFT_OK;
}

/* in: the five, then V (a direction for W): the HVP of the loss along V. */
static graft_status rnn_hvp(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *u) {
  (void)n_in, (void)n_out, (void)u;
  rnn_ctx c = {.mode = 0};
  graft_value *loss = rnn_loss(t, &c, in);
  graft_hvp(t, loss, 1, &in[3], &in[5], out);
  return GRAFT_OK;
}

static void rnn_inputs_b(graft_tensor **in, uint64_t seed, int64_t batch) {
  tu_rng r = {seed};
  const int64_t h0[2] = {batch, RH}, X[3] = {RT, batch, RD}, U[2] = {RD, RH}, W[2] = {RH, RH}, b[1] = {RH};
  in[0] = tu_tensor_rand(&r, F64, 2, h0, -0.5, 0.5);
  in[1] = tu_tensor_rand(&r, F64, 3, X, -1, 1);
  in[2] = tu_tensor_rand(&r, F64, 2, U, -0.3, 0.3);
  in[3] = tu_tensor_rand(&r, F64, 2, W, -0.15, 0.15);
  in[4] = tu_tensor_rand(&r, F64, 1, b, -0.1, 0.1);
  in[5] = tu_tensor_rand(&r, F64, 2, W, -1, 1);
}

static void rnn_inputs(graft_tensor **in, uint64_t seed) { rnn_inputs_b(in, seed, RB); }

static void assert_tensors_close(graft_tensor *a, graft_tensor *b, double rtol, const char *what) {
  int64_t n = graft_tensor_numel(a);
  assert_int_equal(n, graft_tensor_numel(b));
  double scale = 0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(tu_get(b, i)));
  for (int64_t i = 0; i < n; i++)
    if (fabs(tu_get(a, i) - tu_get(b, i)) > rtol * scale)
      fail_msg("%s: element %lld: %.17g vs %.17g", what, (long long)i, tu_get(a, i), tu_get(b, i));
}

static void test_scan_rnn_equals_unrolled(void **state) {
  (void)state;
  graft_runtime *rt = g_rt;
  graft_tensor *in[6];
  rnn_inputs(in, 17);
  static const char *const names[6] = {"loss", "d h0", "d X", "d U", "d W", "d b"};
  for (int rev = 0; rev < 2; rev++) {
    graft_tensor *a[6], *b[6];
    char msg[512];
    int mode[2] = {rev ? 2 : 0, 0};
    tu_assert_run_ok(tu_run(rt, rnn_grads, mode, 5, in, 6, a, msg), "scan", msg);
    mode[0] = rev ? 3 : 1;
    tu_assert_run_ok(tu_run(rt, rnn_grads, mode, 5, in, 6, b, msg), "unrolled", msg);
    for (int i = 0; i < 6; i++) {
      assert_tensors_close(a[i], b[i], 1e-12, names[i]);
      graft_tensor_destroy(a[i]);
      graft_tensor_destroy(b[i]);
    }
  }
  for (int i = 0; i < 6; i++) graft_tensor_destroy(in[i]);
}

static void test_scan_rnn_hvp_matches_finite_differences(void **state) {
  (void)state;
  graft_runtime *rt = g_rt;
  graft_tensor *in[6], *hv = NULL;
  rnn_inputs(in, 23);
  char msg[512];
  tu_assert_run_ok(tu_run(rt, rnn_hvp, NULL, 6, in, 1, &hv, msg), "hvp", msg);
  /* central differences of the gradient along V */
  const double eps = 1e-5;
  graft_tensor *gp[6], *gm[6];
  double *w = graft_tensor_data(in[3]);
  const double *v = graft_tensor_data(in[5]);
  int mode[2] = {0, 0};
  for (int s = 0; s < 2; s++) {
    for (int64_t i = 0; i < RH * RH; i++) w[i] += (s ? -2 : 1) * eps * v[i];
    tu_assert_run_ok(tu_run(rt, rnn_grads, mode, 5, in, 6, s ? gm : gp, msg), "grad", msg);
  }
  graft_tensor *fd = NULL;
  int64_t shape[2] = {RH, RH};
  graft_tensor_create(F64, 2, shape, &fd);
  double *f = graft_tensor_data(fd);
  for (int64_t i = 0; i < RH * RH; i++) f[i] = (tu_get(gp[4], i) - tu_get(gm[4], i)) / (2 * eps);
  assert_tensors_close(hv, fd, 1e-6, "hvp vs finite differences");
  for (int i = 0; i < 6; i++) {
    graft_tensor_destroy(gp[i]);
    graft_tensor_destroy(gm[i]);
    graft_tensor_destroy(in[i]);
  }
  graft_tensor_destroy(fd);
  graft_tensor_destroy(hv);
}

/* ---- remat ------------------------------------------------------------------ */

enum { MB = 256, MW = 96, MBLK = 4, MLAY = 3, MIN = 1 + 2 * MBLK * MLAY };

typedef struct mlp_ctx {
  int mode;                    /* 0 plain, 1 a remat region per block, 2 nested too */
  int blk;
  graft_value *const *in;      /* x, then (W, b) per layer: the function's values */
} mlp_ctx;

static graft_value *layer(graft_trace *t, const mlp_ctx *c, int l, graft_value *h) {
  graft_value *W = c->in[1 + 2 * (c->blk * MLAY + l)], *b = c->in[2 + 2 * (c->blk * MLAY + l)];
  return graft_tanh(t, graft_add(t, graft_matmul(t, h, W, 0), b));
}

/* layers from..MLAY-1 of the block (weights captured from the function) */
static graft_status inner_layers(graft_trace *t, int n, graft_value *const *in, int no,
                                 graft_value **out, void *u) {
  (void)n, (void)no;
  graft_value *h = in[0];
  for (int l = 1; l < MLAY; l++) h = layer(t, u, l, h);
  out[0] = h;
  return GRAFT_OK;
}

static graft_status block(graft_trace *t, int n, graft_value *const *in, int no, graft_value **out,
                          void *u) {
  (void)n, (void)no;
  const mlp_ctx *c = u;
  graft_value *h = layer(t, c, 0, in[0]);
  if (c->mode == 2) graft_remat(t, inner_layers, u, 1, &h, 1, &h);
  else inner_layers(t, 1, &h, 1, &h, u);
  out[0] = h;
  return GRAFT_OK;
}

static graft_status mlp(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                        graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  graft_value *h = in[0];
  mlp_ctx c[MBLK];
  for (int k = 0; k < MBLK; k++) {
    c[k] = (mlp_ctx){*(int *)u, k, in};
    if (c[k].mode) graft_remat(t, block, &c[k], 1, &h, 1, &h);
    else block(t, 1, &h, 1, &h, &c[k]);
  }
  out[0] = graft_reduce_mean(t, graft_square(t, h), 0, NULL, 0);
  graft_gradients(t, 1, &out[0], NULL, MIN - 1, in + 1, GRAFT_UNCONNECTED_ZERO, out + 1);
  return GRAFT_OK;
}

/* A ws runtime of one thread writing its Chrome trace to a new temporary
 * file (path: a mkstemp template, filled in). */
static graft_runtime *traced_runtime(char *path) {
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.sched = "ws";
  o.num_threads = 1;
  o.trace_path = path;
  return tu_runtime_from(&o);
}

/* The trace file's text (its runtimes destroyed), then the file removed. */
static void read_trace(const char *path, char *text, size_t cap) {
  FILE *fp = fopen(path, "r");
  assert_non_null(fp);
  size_t len = fread(text, 1, cap - 1, fp);
  assert_true(len < cap - 1);
  text[len] = '\0';
  fclose(fp);
  unlink(path);
}

/* Runs of op in a Chrome trace text whose category starts with cat (tile
 * 0 of each: a node's tiles are slices of their own). */
static int count_slices(const char *text, const char *op, const char *cat) {
  char want_name[64], want_cat[64];
  snprintf(want_name, sizeof want_name, "{\"name\":\"%s ", op);
  snprintf(want_cat, sizeof want_cat, "\"cat\":\"%s", cat);
  int n = 0;
  for (const char *p = strstr(text, want_name); p; p = strstr(p + 1, want_name)) {
    const char *end = strchr(p, '}');
    const char *c = strstr(p, "\"cat\":"), *t0 = strstr(p, "\"tile\":0}");
    if (c && c < end && t0 && t0 < end && !strncmp(c, want_cat, strlen(want_cat))) n++;
  }
  return n;
}

static void test_remat_mlp_bitwise_smaller_and_recomputed(void **state) {
  (void)state;
  char path[] = "/tmp/graft_remat_XXXXXX";
  graft_runtime *rt = traced_runtime(path);
  tu_rng r = {5};
  graft_tensor *in[MIN], *out[3][MIN];
  const int64_t xs[2] = {MB, MW}, ws[2] = {MW, MW}, bs[1] = {MW};
  in[0] = tu_tensor_rand(&r, GRAFT_F32, 2, xs, -1, 1);
  for (int i = 1; i < MIN; i += 2) {
    in[i] = tu_tensor_rand(&r, GRAFT_F32, 2, ws, -0.2, 0.2);
    in[i + 1] = tu_tensor_rand(&r, GRAFT_F32, 1, bs, -0.1, 0.1);
  }
  static const char *const names[3] = {"plain", "remat", "nested"};
  graft_plan_stats st[3];
  for (int m = 0; m < 3; m++) {
    graft_function_desc d = {.name = names[m], .trace = mlp, .user = &m, .n_inputs = MIN, .n_outputs = MIN};
    graft_function *f = NULL;
    tu_assert_status(graft_function_create(rt, &d, &f), GRAFT_OK);
    for (int i = 0; i < MIN; i++) out[m][i] = NULL;
    tu_assert_run_ok(graft_function_call(f, MIN, in, MIN, out[m]), names[m], graft_function_errmsg(f));
    tu_assert_status(graft_function_stats(f, &st[m]), GRAFT_OK);
    graft_function_destroy(f);
  }
  graft_runtime_destroy(rt);
  /* the gradients are bitwise those of the region inlined */
  for (int m = 1; m < 3; m++)
    for (int i = 0; i < MIN; i++)
      assert_memory_equal(graft_tensor_data(out[m][i]), graft_tensor_data(out[0][i]),
                          (size_t)graft_tensor_numel(out[0][i]) * 4);
  /* and the arena shrinks: the blocks' insides are never all alive */
  print_message("arena: plain %lld, remat %lld, nested %lld bytes; control nodes %lld / %lld, "
                "body runs %lld / %lld\n", (long long)st[0].arena_bytes,
                (long long)st[1].arena_bytes, (long long)st[2].arena_bytes,
                (long long)st[1].control_nodes, (long long)st[2].control_nodes,
                (long long)st[1].body_runs, (long long)st[2].body_runs);
  assert_true(st[1].arena_bytes < st[0].arena_bytes);
  assert_true(st[2].arena_bytes < st[0].arena_bytes);
  assert_int_equal(st[0].control_nodes, 0);
  assert_int_equal(st[1].control_nodes, 2 * MBLK);      /* each block's region and its backward */
  assert_int_equal(st[1].body_runs, 2 * MBLK);
  /* The forward matmuls of the regions run twice.  Plain: 12 forward, 12
   * weight gradients, 11 input gradients (x gets none).  Remat: the 12
   * forward ones again, in the backward bodies.  Nested: the same count:
   * a block's backward body replays its first layer, and the inner
   * region's backward replays the other two (the block's replay of the
   * inner region is pruned: nothing reads its value). */
  static char text[1 << 22];
  read_trace(path, text, sizeof text);
  int plain = count_slices(text, "matmul", "plain"), remat = count_slices(text, "matmul", "remat"),
      nested = count_slices(text, "matmul", "nested");
  print_message("matmul slices: plain %d, remat %d, nested %d\n", plain, remat, nested);
  assert_int_equal(plain, 35);
  assert_int_equal(remat, 35 + MBLK * MLAY);
  assert_int_equal(nested, 35 + MBLK * MLAY);
  for (int m = 0; m < 3; m++)
    for (int i = 0; i < MIN; i++) graft_tensor_destroy(out[m][i]);
  for (int i = 0; i < MIN; i++) graft_tensor_destroy(in[i]);
}

/* Checkpoints (every k-th carry kept, the rest recomputed block by block)
 * give bitwise the gradients of the plain scan: of the RNN whose loss
 * reads every y (modes 4, 5) and of the one that carries its loss, whose
 * arena they shrink (the ys and their cotangents, as large as the carries,
 * stay in the first); k = 7 leaves a short last block (50 = 7 * 7 + 1), k
 * = 50 is one block. */
static void test_scan_checkpoints_bitwise_and_smaller(void **state) {
  (void)state;
  graft_runtime *rt = g_rt;
  graft_tensor *in[2][6];
  rnn_inputs(in[0], 29);
  rnn_inputs_b(in[1], 31, 64); /* carries large beside the weights */
  static const int64_t ks[] = {7, 10, 50};
  for (int var = 0; var < 4; var++) {
    int rev = var & 1, acc = var >> 1;
    for (size_t kk = 0; kk < TU_N_OF(ks); kk++) {
      graft_tensor *a[6], *b[6];
      graft_plan_stats sa, sb;
      int mode[2] = {acc ? rev : rev ? 2 : 0, 0};
      for (int pass = 0; pass < 2; pass++) {
        graft_function_desc d = {.name = pass ? "ckpt" : "plain", .trace = acc ? rnn_acc_grads : rnn_grads,
                                 .user = mode, .n_inputs = 5, .n_outputs = 6};
        graft_function *f = NULL;
        tu_assert_status(graft_function_create(rt, &d, &f), GRAFT_OK);
        graft_tensor **out = pass ? b : a;
        for (int i = 0; i < 6; i++) out[i] = NULL;
        tu_assert_run_ok(graft_function_call(f, 5, in[acc], 6, out), d.name, graft_function_errmsg(f));
        tu_assert_status(graft_function_stats(f, pass ? &sb : &sa), GRAFT_OK);
        graft_function_destroy(f);
        mode[0] = acc ? rev : rev ? 5 : 4;
        mode[1] = (int)ks[kk];
      }
      for (int i = 0; i < 6; i++) {
        assert_memory_equal(graft_tensor_data(a[i]), graft_tensor_data(b[i]),
                            (size_t)graft_tensor_numel(a[i]) * 8);
        graft_tensor_destroy(a[i]);
        graft_tensor_destroy(b[i]);
      }
      print_message("%s, reverse %d, k %lld: arena %lld -> %lld bytes, body runs %lld -> %lld\n",
                    acc ? "loss carried" : "loss on ys", rev, (long long)ks[kk],
                    (long long)sa.arena_bytes, (long long)sb.arena_bytes, (long long)sa.body_runs,
                    (long long)sb.body_runs);
      if (acc && ks[kk] < RT) assert_true(sb.arena_bytes < sa.arena_bytes); /* (one block: no) */
      /* each step runs forward, recomputed, and backward */
      assert_int_equal(sa.body_runs, 2 * RT);
      assert_int_equal(sb.body_runs, 3 * RT + (RT + ks[kk] - 1) / ks[kk]);
    }
  }
  for (int i = 0; i < 6; i++) {
    graft_tensor_destroy(in[0][i]);
    graft_tensor_destroy(in[1][i]);
  }
}

/* The backward of a scan reads the carries each step left and the ys the
 * forward made (saved), so the forward matmuls run once: the scan runs as
 * many matmuls as the unrolled RNN (per step: 2 forward, and the
 * gradients of U, W, X and h). */
static void test_scan_backward_reads_saved_outputs(void **state) {
  (void)state;
  char path[] = "/tmp/graft_scanmm_XXXXXX";
  graft_runtime *rt = traced_runtime(path);
  graft_tensor *in[6], *out[6];
  rnn_inputs(in, 37);
  static const char *const names[2] = {"scan", "unrolled"};
  for (int m = 0; m < 2; m++) {
    int mode[2] = {m, 0};
    graft_function_desc d = {.name = names[m], .trace = rnn_grads, .user = mode, .n_inputs = 5,
                             .n_outputs = 6};
    graft_function *f = NULL;
    tu_assert_status(graft_function_create(rt, &d, &f), GRAFT_OK);
    for (int i = 0; i < 6; i++) out[i] = NULL;
    tu_assert_run_ok(graft_function_call(f, 5, in, 6, out), names[m], graft_function_errmsg(f));
    graft_function_destroy(f);
    for (int i = 0; i < 6; i++) graft_tensor_destroy(out[i]);
  }
  graft_runtime_destroy(rt);
  static char text[1 << 24];
  read_trace(path, text, sizeof text);
  int scan = count_slices(text, "matmul", "scan"), unrolled = count_slices(text, "matmul", "unrolled");
  print_message("matmul runs: scan %d, unrolled %d\n", scan, unrolled);
  assert_int_equal(unrolled, 6 * RT);
  assert_int_equal(scan, unrolled);
  for (int i = 0; i < 6; i++) graft_tensor_destroy(in[i]);
}

/* A gradient of a gradient through a scan, with and without checkpoints:
 * the same up to rounding (the second-order cotangents reach the carries
 * through the saved ones per step, or through the blocks' recomputation).
 * (Found by the random control-flow DAGs: the checkpoints' cotangents were
 * cut into blocks like the xs.) */
static graft_status tanh_body(graft_trace *t, int n, graft_value *const *in, int no,
                              graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = out[1] = graft_tanh(t, graft_mul(t, in[0], in[1]));
  return GRAFT_OK;
}

static graft_status second_order(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  graft_value *res[2], *g[2];
  graft_scan_opts o = {.checkpoint = *(int64_t *)u};
  graft_scan(t, tanh_body, NULL, 1, &in[0], 1, &in[1], 1, res, &o);
  graft_value *loss = graft_add(t, sum(t, graft_sin(t, res[0])), sum(t, graft_sin(t, res[1])));
  graft_gradients(t, 1, &loss, NULL, 2, in, GRAFT_UNCONNECTED_ZERO, g);
  graft_value *l2 = graft_add(t, sum(t, graft_mul(t, g[0], in[0])), sum(t, graft_mul(t, g[1], in[1])));
  graft_gradients(t, 1, &l2, NULL, 2, in, GRAFT_UNCONNECTED_ZERO, out);
  return GRAFT_OK;
}

static void test_scan_second_order_with_checkpoints(void **state) {
  (void)state;
  const int64_t dh[1] = {3}, dx[2] = {7, 3};
  tu_rng r = {3};
  graft_tensor *in[2] = {tu_tensor_rand(&r, F64, 1, dh, -1, 1), tu_tensor_rand(&r, F64, 2, dx, -1, 1)};
  graft_tensor *ref[2], *got[2];
  char msg[512];
  int64_t k = 0;
  tu_assert_run_ok(tu_run(g_rt, second_order, &k, 2, in, 2, ref, msg), "plain", msg);
  for (k = 2; k <= 7; k++) {
    tu_assert_run_ok(tu_run(g_rt, second_order, &k, 2, in, 2, got, msg), "checkpointed", msg);
    for (int i = 0; i < 2; i++) {
      assert_tensors_close(got[i], ref[i], 1e-13, "second order");
      graft_tensor_destroy(got[i]);
    }
  }
  for (int i = 0; i < 2; i++) {
    graft_tensor_destroy(ref[i]);
    graft_tensor_destroy(in[i]);
  }
}

/* conv2d and the pools take values captured from the trace around a body
 * like every other op (they check their operands themselves). */
typedef struct pool_ctx {
  int op;
  graft_value *img;            /* the function's: a closure */
} pool_ctx;

static graft_value *pool_op(graft_trace *t, int op, graft_value *img) {
  const int64_t k[2] = {2, 2}, s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1}, wd[4] = {1, 1, 2, 2};
  const double w[4] = {1, 2, 3, 4};
  if (op == 0) return graft_max_pool2d(t, img, k, s, p);
  if (op == 1) return graft_avg_pool2d(t, img, k, s, p);
  return graft_conv2d(t, img, graft_constant(t, F64, 4, wd, w), s, p, d, 1);
}

static graft_status pool_body(graft_trace *t, int n, graft_value *const *in, int no,
                              graft_value **out, void *u) {
  (void)n, (void)no, (void)in;
  const pool_ctx *c = u;
  out[0] = pool_op(t, c->op, c->img);
  return GRAFT_OK;
}

static graft_status pool_in_remat(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  pool_ctx c = {*(int *)u, in[0]};
  graft_remat(t, pool_body, &c, 1, in, 1, &out[0]);
  out[1] = pool_op(t, c.op, in[0]);
  return GRAFT_OK;
}

static void test_conv_and_pools_capture_in_bodies(void **state) {
  (void)state;
  const int64_t d[4] = {1, 1, 3, 3};
  tu_rng r = {1};
  graft_tensor *x = tu_tensor_rand(&r, F64, 4, d, -1, 1), *y[2];
  for (int op = 0; op < 3; op++) {
    char msg[512];
    tu_assert_run_ok(tu_run(g_rt, pool_in_remat, &op, 1, &x, 2, y, msg), "pool in a body", msg);
    assert_memory_equal(graft_tensor_data(y[0]), graft_tensor_data(y[1]),
                        (size_t)graft_tensor_numel(y[1]) * 8);
    graft_tensor_destroy(y[0]);
    graft_tensor_destroy(y[1]);
  }
  graft_tensor_destroy(x);
}

/* A body differentiating with respect to a value it closes over (W, the
 * function's input): g = d sum(sin(W x)) / dW = x cos(W x) by
 * graft_gradients, the same by graft_jvp along ones, and outside the body
 * d sum(g) / dW = -x^2 sin(W x) through it. */
static graft_status inner_grad(graft_trace *t, int n, graft_value *const *in, int no,
                               graft_value **out, void *u) {
  (void)n, (void)no;
  graft_value *W = *(graft_value **)u, *x = in[0];
  graft_value *y = graft_sin(t, graft_mul(t, W, x)), *loss = sum(t, y);
  graft_gradients(t, 1, &loss, NULL, 1, &W, GRAFT_UNCONNECTED_ZERO, &out[0]);
  graft_value *one = graft_ones_like(t, W);
  graft_jvp(t, 1, &W, &one, 1, &y, GRAFT_UNCONNECTED_ZERO, &out[1]);
  return GRAFT_OK;
}

static graft_status grad_in_body(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *u) {
  (void)n_in, (void)n_out, (void)u;
  graft_value *W = in[0];
  graft_remat(t, inner_grad, &W, 1, &in[1], 2, out);
  graft_value *s = sum(t, out[0]);
  graft_gradients(t, 1, &s, NULL, 1, &W, GRAFT_UNCONNECTED_ZERO, &out[2]);
  return GRAFT_OK;
}

static void test_gradients_inside_a_body_of_a_closure(void **state) {
  (void)state;
  const int64_t n[1] = {4};
  tu_rng r = {9};
  graft_tensor *in[2] = {tu_tensor_rand(&r, F64, 1, n, -1, 1), tu_tensor_rand(&r, F64, 1, n, -2, 2)};
  graft_tensor *out[3];
  char msg[512];
  tu_assert_run_ok(tu_run(g_rt, grad_in_body, NULL, 2, in, 3, out, msg), "gradient in a body", msg);
  double g[4], h[4];
  for (int i = 0; i < 4; i++) {
    double w = tu_get(in[0], i), x = tu_get(in[1], i);
    g[i] = x * cos(w * x);
    h[i] = -x * x * sin(w * x);
  }
  tu_assert_close(out[0], g, 4, 1e-15, 0);
  tu_assert_close(out[1], g, 4, 1e-15, 0);
  tu_assert_close(out[2], h, 4, 1e-15, 0);
  for (int i = 0; i < 3; i++) graft_tensor_destroy(out[i]);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cond_piecewise),
      cmocka_unit_test(test_cond_mismatch_refused),
      cmocka_unit_test(test_while_newton),
      cmocka_unit_test(test_while_power_gradients),
      cmocka_unit_test(test_scan_rnn_equals_unrolled),
      cmocka_unit_test(test_scan_rnn_hvp_matches_finite_differences),
      cmocka_unit_test(test_scan_checkpoints_bitwise_and_smaller),
      cmocka_unit_test(test_scan_backward_reads_saved_outputs),
      cmocka_unit_test(test_scan_second_order_with_checkpoints),
      cmocka_unit_test(test_conv_and_pools_capture_in_bodies),
      cmocka_unit_test(test_gradients_inside_a_body_of_a_closure),
      cmocka_unit_test(test_remat_mlp_bitwise_smaller_and_recomputed),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
