/* Gradients at ties and kinks, with exact expected values.
 *
 * The op tables of test_vjp_ops / test_jvp draw their inputs away from
 * ties and kinks, where central differences do not apply; this file puts
 * inputs exactly on them and checks the rules documented in src/grad:
 *  - reduce_max: the gradient goes to the elements equal to the maximum and
 *    ties share it equally (g / number of maxima), in the VJP and the JVP
 *    (the mean of the tied tangents), along every axis set of rank-1, -2 and
 *    -3 inputs with and without keepdims, and the adjoint identity
 *    <u, J v> = <J^T u, v> holds there;
 *  - maximum / minimum: a tie (a == b, 0.0 and -0.0 included) sends the
 *    whole gradient and the tangent to b, with broadcasting operands;
 *  - relu'(0) = 0 and abs'(0) = 0 (at -0.0 too); sign has no gradient;
 *  - NaN: a reduce_max group holding NaN gets NaN gradients and tangent;
 *    maximum / minimum send a NaN comparison to b.
 * graft has no reduce_min op (src/graph/op_map.h), so there is none to test.
 *
 * Each case is one traced function with inputs (primals, seed u,
 * tangents v) and outputs (J^T u per primal, J v), run in f32 and f64.
 * Seeds and tangents are multiples of 1/16 and the oracle computes in the
 * case's dtype, so the expected values are exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

TU_RUNTIME_GROUP();

enum op { OP_REDUCE_MAX, OP_MAXIMUM, OP_MINIMUM, OP_RELU, OP_ABS, OP_SIGN };

typedef struct tie_case {
  int op;
  int n_x; /* primals: 1 or 2 */
  int rank[2];
  int64_t shape[2][3];
  int n_axes, axes[3], keepdims; /* reduce_max */
} tie_case;

static graft_value *apply(graft_trace *t, const tie_case *c, graft_value *const *x) {
  switch (c->op) {
  case OP_REDUCE_MAX: return graft_reduce_max(t, x[0], c->n_axes, c->axes, c->keepdims);
  case OP_MAXIMUM: return graft_maximum(t, x[0], x[1]);
  case OP_MINIMUM: return graft_minimum(t, x[0], x[1]);
  case OP_RELU: return graft_relu(t, x[0]);
  case OP_ABS: return graft_abs(t, x[0]);
  default: return graft_sign(t, x[0]);
  }
}

/* in: primals x[0..n_x), the seed u (y's shape), tangents v[0..n_x).
 * out: J^T u per primal, then J v (zeros where there is no gradient). */
static graft_status trace_case(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const tie_case *c = user;
  graft_value *const *x = in, *u = in[c->n_x], *const *v = in + c->n_x + 1;
  graft_value *y = apply(t, c, x);
  graft_status st = graft_gradients(t, 1, &y, &u, c->n_x, x, GRAFT_UNCONNECTED_ZERO, out);
  if (st) return st;
  return graft_jvp(t, c->n_x, x, v, 1, &y, GRAFT_UNCONNECTED_ZERO, &out[c->n_x]);
}

/* ---- the oracle ------------------------------------------------------------------ */

/* v rounded to dt, so that the oracle computes in the case's dtype. */
static double in_dt(graft_dtype dt, double v) { return dt == GRAFT_F32 ? (double)(float)v : v; }

/* y's shape for reduce_max: keep = x's shape with 1 at the reduced axes (the
 * same flat order as y's, keepdims or not). */
static void keep_shape(const tie_case *c, int64_t *keep) {
  int r = c->rank[0];
  for (int i = 0; i < r; i++) keep[i] = c->shape[0][i];
  if (!c->n_axes)
    for (int i = 0; i < r; i++) keep[i] = 1;
  for (int k = 0; k < c->n_axes; k++) keep[(c->axes[k] + r) % r] = 1;
}

/* reduce_max: gx[i] = u / count at the maxima of i's group, else 0; jv =
 * the mean of the tangents at the maxima. */
static void oracle_reduce_max(const tie_case *c, graft_dtype dt, graft_tensor *const *in,
                              double *gx, double *jv) {
  int r = c->rank[0];
  int64_t keep[3];
  keep_shape(c, keep);
  int64_t nx = tu_numel(r, c->shape[0]), ny = tu_numel(r, keep);
  double m[64], count[64], vsum[64];
  for (int64_t g = 0; g < ny; g++) m[g] = -INFINITY, count[g] = 0, vsum[g] = 0;
  for (int64_t i = 0; i < nx; i++) {
    int64_t g = tu_bcast_src(r, c->shape[0], i, r, keep);
    m[g] = fmax(m[g], tu_get(in[0], i));
  }
  for (int64_t i = 0; i < nx; i++) {
    int64_t g = tu_bcast_src(r, c->shape[0], i, r, keep);
    if (tu_get(in[0], i) != m[g]) continue;
    count[g] += 1;
    vsum[g] += tu_get(in[2], i); /* multiples of 1/16: exact in either dtype */
  }
  for (int64_t i = 0; i < nx; i++) {
    int64_t g = tu_bcast_src(r, c->shape[0], i, r, keep);
    gx[i] = tu_get(in[0], i) == m[g] ? in_dt(dt, tu_get(in[1], g) / count[g]) : 0.0;
  }
  for (int64_t g = 0; g < ny; g++) jv[g] = in_dt(dt, vsum[g] / count[g]);
}

/* y's shape for reduce_max (keepdims or not). */
static int y_shape_reduce(const tie_case *c, int64_t *so) {
  int r = c->rank[0], reduced[3] = {!c->n_axes, !c->n_axes, !c->n_axes}, ro = 0;
  for (int k = 0; k < c->n_axes; k++) reduced[(c->axes[k] + r) % r] = 1;
  for (int i = 0; i < r; i++)
    if (!reduced[i]) so[ro++] = c->shape[0][i];
    else if (c->keepdims) so[ro++] = 1;
  return ro;
}

/* The broadcast output shape of a two-primal case. */
static int out_shape(const tie_case *c, int64_t *so) {
  int r = c->n_x == 2 && c->rank[1] > c->rank[0] ? c->rank[1] : c->rank[0];
  for (int d = 0; d < r; d++) {
    so[d] = 1;
    for (int q = 0; q < c->n_x; q++) {
      int id = d - (r - c->rank[q]);
      if (id >= 0 && c->shape[q][id] != 1) so[d] = c->shape[q][id];
    }
  }
  return r;
}

/* Elementwise ops: the local derivative of y with respect to primal q at
 * output element k (its operands a, b). */
static double local(int op, int q, double a, double b) {
  switch (op) {
  case OP_MAXIMUM: return (a > b) == (q == 0) ? 1.0 : 0.0; /* tie: b */
  case OP_MINIMUM: return (a < b) == (q == 0) ? 1.0 : 0.0;
  case OP_RELU: return a > 0 ? 1.0 : 0.0;
  case OP_ABS: return a > 0 ? 1.0 : a < 0 ? -1.0 : 0.0;
  default: return 0.0; /* sign */
  }
}

static void oracle_elementwise(const tie_case *c, graft_tensor *const *in, double *const *gx,
                               double *jv) {
  int64_t so[3];
  int ro = out_shape(c, so);
  int64_t n = tu_numel(ro, so);
  for (int q = 0; q < c->n_x; q++)
    for (int64_t i = 0; i < tu_numel(c->rank[q], c->shape[q]); i++) gx[q][i] = 0.0;
  for (int64_t k = 0; k < n; k++) {
    int64_t src[2];
    for (int q = 0; q < c->n_x; q++) src[q] = tu_bcast_src(ro, so, k, c->rank[q], c->shape[q]);
    double a = tu_get(in[0], src[0]), b = c->n_x == 2 ? tu_get(in[1], src[1]) : 0.0;
    double u = tu_get(in[c->n_x], k);
    jv[k] = 0.0;
    for (int q = 0; q < c->n_x; q++) {
      double d = local(c->op, q, a, b);
      gx[q][src[q]] += d * u; /* products and sums of multiples of 1/16: exact */
      jv[k] += d * tu_get(in[c->n_x + 1 + q], src[q]);
    }
  }
}

/* ---- running a case ----------------------------------------------------------------- */

/* x[q] holds xv[q] (rank/shape from c); the seed and the tangents are drawn
 * as multiples of 1/16 in [-2, 2] (never 0, so a share sent to the wrong
 * operand shows). */
static void run_case(const tie_case *c, const double *const *xv, const char *name) {
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
    tu_rng r = {0x7e5 + (uint64_t)c->op};
    int64_t so[3];
    int ro = c->op == OP_REDUCE_MAX ? y_shape_reduce(c, so) : out_shape(c, so);
    graft_tensor *in[5];
    int n_in = 2 * c->n_x + 1;
    for (int q = 0; q < c->n_x; q++) in[q] = tu_tensor_from(dt, c->rank[q], c->shape[q], xv[q]);
    for (int k = c->n_x; k < n_in; k++) {
      int q = k - c->n_x - 1; /* -1: the seed */
      in[k] = q < 0 ? tu_tensor_from(dt, ro, so, NULL)
                    : tu_tensor_from(dt, c->rank[q], c->shape[q], NULL);
      for (int64_t i = 0; i < graft_tensor_numel(in[k]); i++) {
        int64_t m = tu_int(&r, 1, 32);
        tu_set(in[k], i, (double)(tu_int(&r, 0, 1) ? m : -m) / 16.0);
      }
    }
    double gx_store[2][64], jv[64], *gx[2] = {gx_store[0], gx_store[1]};
    if (c->op == OP_REDUCE_MAX) oracle_reduce_max(c, dt, in, gx[0], jv);
    else oracle_elementwise(c, in, gx, jv);

    graft_tensor *out[3] = {0};
    char msg[512] = "", ctx[192];
    snprintf(ctx, sizeof ctx, "%s %s", name, graft_dtype_name(dt));
    tu_assert_run_ok(tu_run(g_rt, trace_case, (void *)c, n_in, in, c->n_x + 1, out, msg), ctx,
                     msg);
    char what[256];
    for (int q = 0; q < c->n_x; q++) {
      snprintf(what, sizeof what, "%s: J^T u for input %d", ctx, q);
      tu_assert_tensor(out[q], dt, c->rank[q], c->shape[q], what);
      tu_assert_values(out[q], gx[q], graft_tensor_numel(out[q]), 0.0, what);
    }
    snprintf(what, sizeof what, "%s: J v", ctx);
    tu_assert_values(out[c->n_x], jv, graft_tensor_numel(out[c->n_x]), 0.0, what);

    /* the adjoint identity <u, J v> = <J^T u, v> */
    double ujv = 0.0, jtuv = 0.0;
    for (int64_t k = 0; k < graft_tensor_numel(out[c->n_x]); k++)
      ujv += tu_get(in[c->n_x], k) * tu_get(out[c->n_x], k);
    for (int q = 0; q < c->n_x; q++)
      for (int64_t i = 0; i < graft_tensor_numel(out[q]); i++)
        jtuv += tu_get(out[q], i) * tu_get(in[c->n_x + 1 + q], i);
    if (!tu_close(ujv, jtuv, dt == GRAFT_F32 ? 1e-6 : 1e-13, 1e-12))
      fail_msg("%s: <u, J v> = %.17g but <J^T u, v> = %.17g", ctx, ujv, jtuv);

    tu_destroy_outs(out, c->n_x + 1);
    tu_destroy_outs(in, n_in);
  }
}

/* ---- reduce_max ----------------------------------------------------------------------- */

/* x = [1, 3, 3, 2]: the two maxima share the gradient, [0, u/2, u/2, 0],
 * and the tangent is the mean of theirs. */
static void test_reduce_max__tie_shares_gradient_equally(void **state) {
  (void)state;
  static const double x[] = {1, 3, 3, 2};
  const double *xv[] = {x};
  tie_case c = {.op = OP_REDUCE_MAX, .n_x = 1, .rank = {1}, .shape = {{4}}};
  run_case(&c, xv, "reduce_max [1,3,3,2]");

  /* the numbers, seed 1 */
  graft_tensor *in[3] = {tu_tensor_from(GRAFT_F64, 1, c.shape[0], x),
                         tu_tensor_from(GRAFT_F64, 0, NULL, (double[]){1}),
                         tu_tensor_from(GRAFT_F64, 1, c.shape[0], (double[]){1, 2, 4, 8})};
  graft_tensor *out[2] = {0};
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, trace_case, &c, 3, in, 2, out, msg), "reduce_max", msg);
  tu_assert_values(out[0], ((double[]){0, 0.5, 0.5, 0}), 4, 0.0, "reduce_max gradient");
  tu_assert_values(out[1], ((double[]){3}), 1, 0.0, "reduce_max tangent (2 + 4) / 2");
  tu_destroy_outs(out, 2);
  tu_destroy_outs(in, 3);
}

/* Ties along each axis of a rank-2 input (rows and columns with 1, 2 and 3
 * maxima; a group of equal elements). */
static void test_reduce_max__ties_along_each_axis_rank2(void **state) {
  (void)state;
  static const double x[] = {5, 5, 1, /**/ 2, 7, 7, /**/ 5, 7, 1, /**/ 4, 4, 4};
  const double *xv[] = {x};
  static const struct {
    int n, axes[2];
  } sets[] = {{1, {0}}, {1, {1}}, {1, {-1}}, {2, {0, 1}}, {0, {0}}};
  for (size_t s = 0; s < TU_N_OF(sets); s++)
    for (int keep = 0; keep < 2; keep++) {
      tie_case c = {.op = OP_REDUCE_MAX, .n_x = 1, .rank = {2}, .shape = {{4, 3}},
                    .n_axes = sets[s].n, .keepdims = keep};
      memcpy(c.axes, sets[s].axes, sizeof sets[s].axes);
      char name[96];
      snprintf(name, sizeof name, "reduce_max [4,3] %d axes (first %d) keepdims %d", sets[s].n,
               sets[s].axes[0], keep);
      run_case(&c, xv, name);
    }
}

/* A rank-3 input on a grid of three values (ties in most groups), every
 * axis set. */
static void test_reduce_max__ties_along_each_axis_rank3(void **state) {
  (void)state;
  double x[2 * 3 * 4];
  tu_rng r = {0x3a3};
  for (size_t i = 0; i < TU_N_OF(x); i++) x[i] = (double)tu_int(&r, 0, 2) - 1.0;
  const double *xv[] = {x};
  static const struct {
    int n, axes[3];
  } sets[] = {{1, {0}}, {1, {1}}, {1, {2}}, {2, {0, 2}}, {2, {2, 1}}, {3, {0, 1, 2}}, {0, {0}}};
  for (size_t s = 0; s < TU_N_OF(sets); s++)
    for (int keep = 0; keep < 2; keep++) {
      tie_case c = {.op = OP_REDUCE_MAX, .n_x = 1, .rank = {3}, .shape = {{2, 3, 4}},
                    .n_axes = sets[s].n, .keepdims = keep};
      memcpy(c.axes, sets[s].axes, sizeof sets[s].axes);
      char name[96];
      snprintf(name, sizeof name, "reduce_max [2,3,4] set %zu keepdims %d", s, keep);
      run_case(&c, xv, name);
    }
}

/* ---- maximum / minimum, relu, abs, sign ----------------------------------------------------- */

/* Equal operands (0.0 against -0.0 too) send the whole gradient and the
 * tangent to b; so does every tie where the operands broadcast. */
static void test_maximum_minimum__tie_goes_to_b(void **state) {
  (void)state;
  static const double a6[] = {1, 2, -0.0, 0.0, -3, 4}, b6[] = {1, 1, 0.0, -0.0, -3, 5};
  static const double a3[] = {0, 1, 2}, b4[] = {1, 0, 2, 1}, s0[] = {1},
                      b5[] = {1, 0, 1, 2, 1};
  static const struct {
    int ra, rb;
    int64_t sa[2], sb[2];
    const double *a, *b;
  } layouts[] = {
      {1, 1, {6}, {6}, a6, b6},     /* same shape */
      {2, 1, {3, 1}, {4}, a3, b4},  /* [3,1] with [4]: ties in 3 of 12 pairs */
      {0, 1, {0}, {5}, s0, b5},     /* [] with [5] */
      {1, 0, {5}, {0}, b5, s0},     /* [5] with [] */
  };
  for (int op = OP_MAXIMUM; op <= OP_MINIMUM; op++)
    for (size_t l = 0; l < TU_N_OF(layouts); l++) {
      tie_case c = {.op = op, .n_x = 2, .rank = {layouts[l].ra, layouts[l].rb}};
      memcpy(c.shape[0], layouts[l].sa, sizeof layouts[l].sa);
      memcpy(c.shape[1], layouts[l].sb, sizeof layouts[l].sb);
      const double *xv[] = {layouts[l].a, layouts[l].b};
      char name[64];
      snprintf(name, sizeof name, "%s layout %zu", op == OP_MAXIMUM ? "maximum" : "minimum", l);
      run_case(&c, xv, name);
    }
}

/* relu'(0) = 0, abs'(0) = 0 (-0.0 too), and sign has no gradient or
 * tangent anywhere (zeros under GRAFT_UNCONNECTED_ZERO). */
static void test_relu_abs_sign__kinks_at_zero(void **state) {
  (void)state;
  static const double x[] = {0.0, -0.0, 1, -1, 0.5, -2};
  const double *xv[] = {x};
  static const struct {
    int op;
    const char *name;
  } ops[] = {{OP_RELU, "relu"}, {OP_ABS, "abs"}, {OP_SIGN, "sign"}};
  for (size_t o = 0; o < TU_N_OF(ops); o++) {
    tie_case c = {.op = ops[o].op, .n_x = 1, .rank = {1}, .shape = {{6}}};
    run_case(&c, xv, ops[o].name);
  }
}

/* NaN: a reduce_max group holding NaN has a NaN maximum that no element
 * equals, so its gradient and tangent are NaN throughout (the other groups
 * are untouched); maximum / minimum send a NaN comparison's gradient and
 * tangent to b, as documented (their output is NaN either way). */
static void test_nan__reduce_max_group_and_maximum_minimum(void **state) {
  (void)state;
  static const int64_t s23[] = {2, 3}, s2[] = {2};
  static const int ax1[] = {1};
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
    tie_case c = {.op = OP_REDUCE_MAX, .n_x = 1, .rank = {2}, .shape = {{2, 3}}, .n_axes = 1};
    c.axes[0] = ax1[0];
    graft_tensor *in[3] = {tu_tensor_from(dt, 2, s23, (double[]){1, NAN, 3, 4, 4, 2}),
                           tu_tensor_from(dt, 1, s2, (double[]){2, 4}),
                           tu_tensor_from(dt, 2, s23, (double[]){1, 1, 1, 2, 6, 1})};
    graft_tensor *out[2] = {0};
    char msg[512] = "";
    tu_assert_run_ok(tu_run(g_rt, trace_case, &c, 3, in, 2, out, msg), "reduce_max NaN", msg);
    tu_assert_values(out[0], ((double[]){NAN, NAN, NAN, 2, 2, 0}), 6, 0.0, "reduce_max NaN: J^T u");
    tu_assert_values(out[1], ((double[]){NAN, 4}), 2, 0.0, "reduce_max NaN: J v");
    tu_destroy_outs(out, 2);
    tu_destroy_outs(in, 3);

    for (int op = OP_MAXIMUM; op <= OP_MINIMUM; op++) {
      tie_case m = {.op = op, .n_x = 2, .rank = {1, 1}, .shape = {{2}, {2}}};
      graft_tensor *mi[5] = {tu_tensor_from(dt, 1, s2, (double[]){NAN, 1}),
                             tu_tensor_from(dt, 1, s2, (double[]){1, NAN}),
                             tu_tensor_from(dt, 1, s2, (double[]){2, 4}),
                             tu_tensor_from(dt, 1, s2, (double[]){3, 5}),
                             tu_tensor_from(dt, 1, s2, (double[]){7, 11})};
      graft_tensor *mo[3] = {0};
      tu_assert_run_ok(tu_run(g_rt, trace_case, &m, 5, mi, 3, mo, msg), "maximum NaN", msg);
      tu_assert_values(mo[0], ((double[]){0, 0}), 2, 0.0, "NaN comparison: J^T u for a");
      tu_assert_values(mo[1], ((double[]){2, 4}), 2, 0.0, "NaN comparison: J^T u for b");
      tu_assert_values(mo[2], ((double[]){7, 11}), 2, 0.0, "NaN comparison: J v (b's)");
      tu_destroy_outs(mo, 3);
      tu_destroy_outs(mi, 5);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_max__tie_shares_gradient_equally),
      cmocka_unit_test(test_reduce_max__ties_along_each_axis_rank2),
      cmocka_unit_test(test_reduce_max__ties_along_each_axis_rank3),
      cmocka_unit_test(test_maximum_minimum__tie_goes_to_b),
      cmocka_unit_test(test_relu_abs_sign__kinks_at_zero),
      cmocka_unit_test(test_nan__reduce_max_group_and_maximum_minimum),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
