/* Control flow: cond, while_loop, scan and remat, their values, their
 * gradients in both modes against analytic results, unrolled graphs and
 * finite differences, and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cond_piecewise),
      cmocka_unit_test(test_cond_mismatch_refused),
      cmocka_unit_test(test_while_newton),
      cmocka_unit_test(test_while_power_gradients),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
