/* Every op's VJP rule against finite differences.
 *
 * One table row per case (op_rows.h, shared with the JVP tests): an op,
 * its inputs (shape, how the values are drawn: away from kinks, poles and
 * ties) and its parameters.  The loss is
 * reduce_sum(w * op(inputs)) with fixed random weights w (odd multiples of
 * 1/64, so never 0 and exact in f32).  Each row is checked
 *  - in f64 against central differences (step 1e-6, rtol 1e-6);
 *  - in f32 against graft's own f64 gradient of the same function (inputs
 *    are drawn f32-representable, so both see the same numbers).
 * The smooth unary ops are also checked to second order: the gradient of
 * reduce_sum(first gradient) against differences of the first gradient.
 *
 * The cast rows mix dtypes by nature; their inputs sit on a 2^-12 grid and
 * the step is 2^-10, so the perturbed values and the loss are exact in f32
 * and the differences are exact as well. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grad/gradcheck.h"
#include "grad/op_rows.h"
#include "testutil.h"

TU_RUNTIME_GROUP();

/* ---- second order (the rows and op_loss are in op_rows.h) -------------------- */

/* The sum of every element of the first gradient of op_loss (over all float
 * inputs), each weighted by fresh weights v when weighted (else v = 1): its
 * gradient holds the second derivatives of op.  The weights matter for
 * shift-invariant ops (softmax, logsumexp, ...), whose plain gradient sums
 * are constant. */
static graft_value *grad_sum(graft_trace *t, int n_in, graft_value *const *in, op_case *c,
                             int weighted) {
  graft_value *L = op_loss(t, n_in, in, c), *xs[3], *g[3], *sum = NULL;
  int n_x = 0;
  for (int i = 0; i < n_in; i++)
    if (gc_is_float(graft_value_dtype(in[i]))) xs[n_x++] = in[i];
  if (graft_gradients(t, 1, &L, NULL, n_x, xs, GRAFT_UNCONNECTED_ZERO, g) != GRAFT_OK) return NULL;
  for (int i = 0; i < n_x; i++) {
    graft_value *gi = weighted ? graft_mul(t, weights_like(t, g[i], c->seed + 1 + (uint64_t)i), g[i])
                               : g[i];
    graft_value *s = graft_reduce_sum(t, gi, 0, NULL, 0);
    sum = sum ? graft_add(t, sum, s) : s;
  }
  return sum;
}

static graft_value *first_grad_loss(graft_trace *t, int n_in, graft_value *const *in,
                                    void *user) {
  return grad_sum(t, n_in, in, user, 0);
}

static graft_value *first_grad_vjp_loss(graft_trace *t, int n_in, graft_value *const *in,
                                        void *user) {
  return grad_sum(t, n_in, in, user, 1);
}

/* ---- checks -------------------------------------------------------------------- */

static gc_problem problem_of(op_case *c, gc_loss_fn loss, graft_tensor **in) {
  gc_problem p = {.loss = loss, .user = c, .n_in = c->n_in, .in = in};
  return p;
}

/* f64 (or the row's fixed dtypes) against central differences. */
static void check_fd(op_case *c, gc_loss_fn loss, const char *order) {
  graft_tensor *in[3];
  make_inputs(c, GRAFT_F64, in);
  gc_problem p = problem_of(c, loss, in);
  char ctx[256];
  snprintf(ctx, sizeof ctx, "%s%s (f64 vs finite differences)", c->name, order);
  gc_check(g_rt, &p, c->step ? c->step : GC_STEP, GC_FD_TOL, ctx);
  gc_free(in, c->n_in);
}

/* f32 gradient against the f64 gradient of the same function. */
static void check_f32(op_case *c, gc_loss_fn loss, const char *order) {
  graft_tensor *in64[3], *in32[3], *g64[3], *g32[3];
  make_inputs(c, GRAFT_F64, in64);
  make_inputs(c, GRAFT_F32, in32);
  gc_problem p64 = problem_of(c, loss, in64), p32 = problem_of(c, loss, in32);
  char ctx[256];
  snprintf(ctx, sizeof ctx, "%s%s (f32 vs f64)", c->name, order);
  gc_analytic(g_rt, &p64, NULL, g64, NULL, ctx);
  gc_analytic(g_rt, &p32, NULL, g32, NULL, ctx);
  /* f32 rounds each intermediate to ~6e-8 relative; 1e-5 relative plus a
   * floor of 1e-6 of the gradient's scale covers cancellation in sums. */
  gc_tol tol = {1e-5, 1e-6 * fmax(1.0, gc_max_abs(g64, c->n_in))};
  gc_assert_sets_close(&p32, g32, NULL, g64, NULL, tol, ctx);
  gc_free(g64, c->n_in);
  gc_free(g32, c->n_in);
  gc_free(in64, c->n_in);
  gc_free(in32, c->n_in);
}

enum mode { M_FD, M_F32, M_SECOND };

static void run_group(int g, int mode) {
  case_list l = {0};
  build_group(g, &l);
  for (int i = 0; i < l.n; i++) {
    if (mode == M_FD) check_fd(&l.c[i], op_loss, "");
    else if (mode == M_F32 && !l.c[i].mixed) check_f32(&l.c[i], op_loss, "");
    else if (mode == M_SECOND) check_fd(&l.c[i], first_grad_vjp_loss, " second order");
  }
  print_message("%d cases\n", l.n);
  free(l.c);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_graft_gradients__unary_ops_match_fd(void **state) {
  (void)state;
  run_group(G_UNARY, M_FD);
}
static void test_graft_gradients__unary_ops_f32_match_f64(void **state) {
  (void)state;
  run_group(G_UNARY, M_F32);
}
static void test_graft_gradients__binary_ops_broadcast_match_fd(void **state) {
  (void)state;
  run_group(G_BINARY, M_FD);
}
static void test_graft_gradients__binary_ops_broadcast_f32_match_f64(void **state) {
  (void)state;
  run_group(G_BINARY, M_F32);
}
static void test_graft_gradients__reductions_match_fd(void **state) {
  (void)state;
  run_group(G_REDUCE, M_FD);
}
static void test_graft_gradients__reductions_f32_match_f64(void **state) {
  (void)state;
  run_group(G_REDUCE, M_F32);
}
static void test_graft_gradients__matmul_flags_and_batch_match_fd(void **state) {
  (void)state;
  run_group(G_MATMUL, M_FD);
}
static void test_graft_gradients__matmul_flags_and_batch_f32_match_f64(void **state) {
  (void)state;
  run_group(G_MATMUL, M_F32);
}
static void test_graft_gradients__shape_nn_where_cast_match_fd(void **state) {
  (void)state;
  run_group(G_MISC, M_FD);
}
static void test_graft_gradients__shape_nn_where_f32_match_f64(void **state) {
  (void)state;
  run_group(G_MISC, M_F32);
}

/* Second order: every smooth unary op, on both shapes, f64 against
 * differences of graft's first gradient, and f32 against f64. */
static void test_graft_gradients__second_derivatives_of_smooth_unary_ops(void **state) {
  (void)state;
  case_list l = {0};
  build_group(G_UNARY, &l);
  int n = 0;
  for (int i = 0; i < l.n; i++) {
    const unary_row *u = NULL;
    for (size_t r = 0; r < TU_N_OF(k_unary); r++)
      if (k_unary[r].op == l.c[i].op && k_unary[r].poly_n == l.c[i].poly_n) u = &k_unary[r];
    if (!u || !u->smooth) continue;
    check_fd(&l.c[i], first_grad_loss, " second order");
    check_f32(&l.c[i], first_grad_loss, " second order");
    n++;
  }
  print_message("%d cases\n", n);
  assert_int_equal(n, 2 * 14); /* neg ... polygamma(1), two shapes each */
  free(l.c);
}

/* Closure: every rule emits only ops that have rules, so every row
 * differentiates twice: the gradient of sum(v * first gradient) against
 * differences of the first gradient (kinks and linear ops give 0, which the
 * differences agree with away from the kinks). */
static void test_graft_gradients__second_order_of_every_other_op_matches_fd(void **state) {
  (void)state;
  for (int g = G_BINARY; g < G_COUNT; g++) run_group(g, M_SECOND);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_gradients__unary_ops_match_fd),
      cmocka_unit_test(test_graft_gradients__unary_ops_f32_match_f64),
      cmocka_unit_test(test_graft_gradients__binary_ops_broadcast_match_fd),
      cmocka_unit_test(test_graft_gradients__binary_ops_broadcast_f32_match_f64),
      cmocka_unit_test(test_graft_gradients__reductions_match_fd),
      cmocka_unit_test(test_graft_gradients__reductions_f32_match_f64),
      cmocka_unit_test(test_graft_gradients__matmul_flags_and_batch_match_fd),
      cmocka_unit_test(test_graft_gradients__matmul_flags_and_batch_f32_match_f64),
      cmocka_unit_test(test_graft_gradients__shape_nn_where_cast_match_fd),
      cmocka_unit_test(test_graft_gradients__shape_nn_where_f32_match_f64),
      cmocka_unit_test(test_graft_gradients__second_derivatives_of_smooth_unary_ops),
      cmocka_unit_test(test_graft_gradients__second_order_of_every_other_op_matches_fd),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
