/* Variables: captured by reference, assignments staged and committed only
 * when a call succeeds, reads in a trace see the assignments before them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

TU_RUNTIME_GROUP();

static graft_variable *make_var(const char *name, graft_dtype dt, int rank, const int64_t *shape,
                                const void *init) {
  graft_variable *v = NULL;
  assert_int_equal(graft_variable_create(NULL, name, dt, rank, shape, init, GRAFT_VAR_TRAINABLE, &v),
                   GRAFT_OK);
  assert_non_null(v);
  return v;
}

/* Assigns the last plan of f writes straight into their variable. */
static int64_t direct_assigns(graft_function *f) {
  graft_plan_stats ps;
  assert_int_equal(graft_function_stats(f, &ps), GRAFT_OK);
  return ps.direct_assigns;
}


/* ---- visible to the next call without retracing ---------------------- */

typedef struct vars2 {
  graft_variable *a, *b;
} vars2;

/* out = 2 * v; v += x */
static graft_status double_then_add_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                       graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_variable *v = user;
  graft_value *r = graft_read(t, v);
  out[0] = graft_mul(t, r, graft_scalar(t, GRAFT_F64, 2.0));
  (void)graft_assign_add(t, v, in[0]);
  return GRAFT_OK;
}

static void test_graft_assign_add__visible_to_next_call_without_retrace(void **state) {
  (void)state;
  const int64_t s[] = {3};
  const double init[] = {1, 2, 3}, ones[] = {1, 1, 1};
  graft_variable *v = make_var("acc", GRAFT_F64, 1, s, init);
  graft_function *f = tu_function(g_rt, "acc_step", double_then_add_cb, v, 1, 1, NULL);
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s, ones)};
  graft_tensor *out[1] = {NULL};
  double cur[3] = {1, 2, 3};
  for (int call = 0; call < 4; call++) {
    tu_assert_call_ok(f, 1, in, 1, out);
    const double want[] = {2 * cur[0], 2 * cur[1], 2 * cur[2]};
    tu_assert_close(out[0], want, 3, 0, 0);
    tu_destroy_outs(out, 1);
    for (int i = 0; i < 3; i++) cur[i] += 1;
    tu_assert_close(graft_variable_value(v), cur, 3, 0, 0);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_variable_destroy(v);
}

/* ---- reads inside one trace ------------------------------------------ */

typedef struct read_obs {
  graft_variable *v;
  int same_before_assign, new_after_assign, assign_returns_current;
} read_obs;

/* out0 = read before assign, out1 = read after assign (v := x). */
static graft_status read_assign_read_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                        graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  read_obs *o = user;
  graft_value *r0 = graft_read(t, o->v);
  graft_value *r0b = graft_read(t, o->v);
  o->same_before_assign = (r0 == r0b);
  graft_value *a = graft_assign(t, o->v, in[0]);
  graft_value *r1 = graft_read(t, o->v);
  o->new_after_assign = (r1 != r0);
  o->assign_returns_current = (graft_read(t, o->v) == r1) && a != NULL && !graft_value_is_poison(a);
  out[0] = graft_add(t, r0, graft_scalar(t, GRAFT_F64, 0.0));
  out[1] = graft_add(t, r1, graft_scalar(t, GRAFT_F64, 0.0));
  return GRAFT_OK;
}

static void test_graft_read__after_assign_returns_new_value(void **state) {
  (void)state;
  const int64_t s[] = {2, 2};
  const double init[] = {1, 2, 3, 4}, x[] = {10, 20, 30, 40};
  read_obs o = {0};
  o.v = make_var("rar", GRAFT_F64, 2, s, init);
  graft_function *f = tu_function(g_rt, "read_assign_read", read_assign_read_cb, &o, 1, 2, NULL);
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 2, s, x)};
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_call_ok(f, 1, in, 2, out);
  assert_true(o.same_before_assign);
  assert_true(o.new_after_assign);
  assert_true(o.assign_returns_current);
  tu_assert_close(out[0], init, 4, 0, 0);
  tu_assert_close(out[1], x, 4, 0, 0);
  tu_assert_close(graft_variable_value(o.v), x, 4, 0, 0);
  tu_destroy_outs(out, 2);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_variable_destroy(o.v);
}

/* r = read(v); v := x; y = 2 * r emitted after the assign: y must still use
 * the old value (the assign is ordered after every read). */
static graft_status late_use_of_read_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                        graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_variable *v = user;
  graft_value *r = graft_read(t, v);
  (void)graft_assign(t, v, in[0]);
  out[0] = graft_mul(t, r, graft_scalar(t, GRAFT_F64, 2.0));
  return GRAFT_OK;
}

static void test_graft_assign__earlier_read_keeps_old_value(void **state) {
  (void)state;
  const int64_t s[] = {3};
  const double init[] = {1, 2, 3}, x[] = {-5, -6, -7};
  graft_variable *v = make_var("war", GRAFT_F64, 1, s, init);
  graft_function *f = tu_function(g_rt, "late_read_use", late_use_of_read_cb, v, 1, 1, NULL);
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s, x)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  const double want[] = {2, 4, 6};
  tu_assert_close(out[0], want, 3, 0, 0);
  tu_assert_close(graft_variable_value(v), x, 3, 0, 0);
  tu_destroy_outs(out, 1);
  /* The next call reads the committed value. */
  tu_assert_call_ok(f, 1, in, 1, out);
  const double want2[] = {-10, -12, -14};
  tu_assert_close(out[0], want2, 3, 0, 0);
  tu_destroy_outs(out, 1);
  /* In place, with the late reader ordered before the assign. */
  assert_int_equal(direct_assigns(f), 1);
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_variable_destroy(v);
}

/* ---- assign_add / assign_sub / broadcast / i32 ----------------------- */

static graft_status assign_sub_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = graft_assign_sub(t, (graft_variable *)user, in[0]);
  return GRAFT_OK;
}

static void test_graft_assign_sub__decrements_and_returns_new_value(void **state) {
  (void)state;
  const int64_t s[] = {2, 3};
  const double init[] = {10, 20, 30, 40, 50, 60}, d[] = {1, 2, 3, 4, 5, 6};
  graft_variable *v = make_var("dec", GRAFT_F64, 2, s, init);
  graft_function *f = tu_function(g_rt, "dec_step", assign_sub_cb, v, 1, 1, NULL);
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 2, s, d)};
  graft_tensor *out[1] = {NULL};
  double cur[6];
  memcpy(cur, init, sizeof cur);
  for (int call = 0; call < 3; call++) {
    tu_assert_call_ok(f, 1, in, 1, out);
    for (int i = 0; i < 6; i++) cur[i] -= d[i];
    tu_assert_close(out[0], cur, 6, 0, 0);
    tu_assert_close(graft_variable_value(v), cur, 6, 0, 0);
    tu_destroy_outs(out, 1);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_variable_destroy(v);
}

/* v += row (broadcast over the rows of v). */
static graft_status assign_add_row_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                      graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = graft_assign_add(t, (graft_variable *)user, in[0]);
  return GRAFT_OK;
}

static void test_graft_assign_add__broadcast_delta(void **state) {
  (void)state;
  const int64_t s[] = {2, 3}, sr[] = {3};
  const double init[] = {0, 1, 2, 3, 4, 5}, row[] = {100, 200, 300};
  graft_variable *v = make_var("bias_grid", GRAFT_F64, 2, s, init);
  graft_function *f = tu_function(g_rt, "add_row", assign_add_row_cb, v, 1, 1, NULL);
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, sr, row)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  const double want[] = {100, 201, 302, 103, 204, 305};
  tu_assert_close(out[0], want, 6, 0, 0);
  tu_assert_close(graft_variable_value(v), want, 6, 0, 0);
  tu_destroy_outs(out, 1);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_variable_destroy(v);
}

/* v := 0.5 (a scalar broadcast to v's shape); out = read(v) after. */
static graft_status assign_scalar_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                     graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  graft_variable *v = user;
  (void)graft_assign(t, v, graft_scalar(t, GRAFT_F32, 0.5));
  out[0] = graft_neg(t, graft_read(t, v));
  return GRAFT_OK;
}

static void test_graft_assign__scalar_broadcasts_to_variable(void **state) {
  (void)state;
  const int64_t s[] = {2, 2};
  const float init[] = {1, 2, 3, 4};
  graft_variable *v = make_var("halves", GRAFT_F32, 2, s, init);
  graft_function *f = tu_function(g_rt, "set_half", assign_scalar_cb, v, 0, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 0, NULL, 1, out);
  const double want_out[] = {-0.5, -0.5, -0.5, -0.5}, want_v[] = {0.5, 0.5, 0.5, 0.5};
  tu_assert_close(out[0], want_out, 4, 0, 0);
  assert_int_equal(graft_tensor_dtype(out[0]), GRAFT_F32);
  tu_assert_close(graft_variable_value(v), want_v, 4, 0, 0);
  tu_destroy_outs(out, 1);
  graft_function_destroy(f);
  graft_variable_destroy(v);
}

/* An i32 step counter: n += 1 each call. */
static graft_status counter_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  out[0] = graft_assign_add(t, (graft_variable *)user, graft_scalar(t, GRAFT_I32, 1));
  return GRAFT_OK;
}

static void test_graft_assign_add__i32_counter(void **state) {
  (void)state;
  graft_variable *v = make_var("step", GRAFT_I32, 0, NULL, NULL);
  assert_int_equal(graft_tensor_dtype(graft_variable_value(v)), GRAFT_I32);
  assert_int_equal(graft_tensor_numel(graft_variable_value(v)), 1);
  assert_true(tu_get(graft_variable_value(v), 0) == 0);
  graft_function *f = tu_function(g_rt, "count", counter_cb, v, 0, 1, NULL);
  graft_tensor *out[1] = {NULL};
  for (int call = 1; call <= 5; call++) {
    tu_assert_call_ok(f, 0, NULL, 1, out);
    assert_int_equal(graft_tensor_dtype(out[0]), GRAFT_I32);
    assert_int_equal(graft_tensor_rank(out[0]), 0);
    assert_int_equal(((int32_t *)graft_tensor_data(out[0]))[0], call);
    assert_int_equal(((const int32_t *)graft_tensor_data(graft_variable_value(v)))[0], call);
    tu_destroy_outs(out, 1);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
  graft_variable_destroy(v);
}

/* ---- swap ------------------------------------------------------------- */

/* a := b, b := a, both from the values read at the start. */
static graft_status swap_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  vars2 *p = user;
  graft_value *ra = graft_read(t, p->a), *rb = graft_read(t, p->b);
  (void)graft_assign(t, p->a, rb);
  (void)graft_assign(t, p->b, ra);
  out[0] = graft_sub(t, ra, rb); /* old a - old b */
  return GRAFT_OK;
}

static void test_graft_assign__swap_two_variables(void **state) {
  (void)state;
  const int64_t s[] = {4};
  const double ia[] = {1, 2, 3, 4}, ib[] = {-1, -2, -3, -4};
  vars2 p = {make_var("swap_a", GRAFT_F64, 1, s, ia), make_var("swap_b", GRAFT_F64, 1, s, ib)};
  graft_function *f = tu_function(g_rt, "swap", swap_cb, &p, 0, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 0, NULL, 1, out);
  const double d1[] = {2, 4, 6, 8};
  tu_assert_close(out[0], d1, 4, 0, 0);
  tu_assert_close(graft_variable_value(p.a), ib, 4, 0, 0);
  tu_assert_close(graft_variable_value(p.b), ia, 4, 0, 0);
  tu_destroy_outs(out, 1);
  /* Swapping again restores them, without a retrace. */
  tu_assert_call_ok(f, 0, NULL, 1, out);
  const double d2[] = {-2, -4, -6, -8};
  tu_assert_close(out[0], d2, 4, 0, 0);
  tu_assert_close(graft_variable_value(p.a), ia, 4, 0, 0);
  tu_assert_close(graft_variable_value(p.b), ib, 4, 0, 0);
  tu_destroy_outs(out, 1);
  /* Writing both in place would need each before the other: one is staged. */
  assert_int_equal(direct_assigns(f), 1);
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
  graft_variable_destroy(p.a);
  graft_variable_destroy(p.b);
}

/* a := read(b); then b := read(a) AFTER the first assign: b sees the new a
 * (= old b), so both end up as old b.  Documents the in-trace read rule. */
static graft_status copy_chain_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  vars2 *p = user;
  (void)graft_assign(t, p->a, graft_read(t, p->b));
  out[0] = graft_assign(t, p->b, graft_read(t, p->a));
  return GRAFT_OK;
}

static void test_graft_assign__read_after_assign_in_chain(void **state) {
  (void)state;
  const int64_t s[] = {2};
  const double ia[] = {1, 2}, ib[] = {7, 8};
  vars2 p = {make_var("chain_a", GRAFT_F64, 1, s, ia), make_var("chain_b", GRAFT_F64, 1, s, ib)};
  graft_function *f = tu_function(g_rt, "chain", copy_chain_cb, &p, 0, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 0, NULL, 1, out);
  tu_assert_close(out[0], ib, 2, 0, 0);
  tu_assert_close(graft_variable_value(p.a), ib, 2, 0, 0);
  tu_assert_close(graft_variable_value(p.b), ib, 2, 0, 0);
  tu_destroy_outs(out, 1);
  graft_function_destroy(f);
  graft_variable_destroy(p.a);
  graft_variable_destroy(p.b);
}

/* v := 1; v += 2; out = read(v) -> 3; two assigns of one variable in one trace. */
static graft_status two_assigns_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)in;
  graft_variable *v = user;
  graft_value *first = graft_assign(t, v, graft_scalar(t, GRAFT_F64, 1.0));
  (void)graft_assign_add(t, v, graft_scalar(t, GRAFT_F64, 2.0));
  out[0] = graft_add(t, graft_read(t, v), graft_scalar(t, GRAFT_F64, 0.0));
  if (n_out > 1) out[1] = graft_add(t, first, graft_scalar(t, GRAFT_F64, 0.0));
  return GRAFT_OK;
}

static void test_graft_assign__twice_in_one_trace(void **state) {
  (void)state;
  const int64_t s[] = {3};
  const double init[] = {9, 9, 9};
  graft_variable *v = make_var("twice", GRAFT_F64, 1, s, init);
  graft_function *f = tu_function(g_rt, "two_assigns", two_assigns_cb, v, 0, 2, NULL);
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_call_ok(f, 0, NULL, 2, out);
  const double three[] = {3, 3, 3}, one[] = {1, 1, 1};
  tu_assert_close(out[0], three, 3, 0, 0);
  tu_assert_close(out[1], one, 3, 0, 0);
  tu_assert_close(graft_variable_value(v), three, 3, 0, 0);
  tu_destroy_outs(out, 2);
  graft_function_destroy(f);
  graft_variable_destroy(v);
}

/* ---- no partial effects ------------------------------------------------ */

/* v += x; out = softmax_cross_entropy(logits, labels). */
static graft_status assign_then_xent_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                        graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_variable *v = user;
  (void)graft_assign_add(t, v, in[0]);
  out[0] = graft_softmax_cross_entropy(t, in[1], in[2]);
  return GRAFT_OK;
}

static void test_graft_function_call__failure_after_assign_leaves_variable(void **state) {
  (void)state;
  const int64_t sv[] = {3}, sl[] = {2, 3}, sy[] = {2};
  const double init[] = {1, 2, 3}, dx[] = {10, 10, 10}, logits[] = {0, 0, 0, 0, 0, 0};
  graft_variable *v = make_var("staged", GRAFT_F64, 1, sv, init);
  graft_function *f = tu_function(g_rt, "assign_then_xent", assign_then_xent_cb, v, 3, 1, NULL);
  graft_tensor *labels = NULL;
  assert_int_equal(graft_tensor_create(GRAFT_I32, 1, sy, &labels), GRAFT_OK);
  int32_t *lab = graft_tensor_data(labels);
  lab[0] = 1;
  lab[1] = 5; /* out of [0, 3) */
  graft_tensor *in[3] = {tu_tensor_from(GRAFT_F64, 1, sv, dx),
                         tu_tensor_from(GRAFT_F64, 2, sl, logits), labels};
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 3, in, 1, out), GRAFT_EINVAL);
  assert_null(out[0]);
  tu_assert_close(graft_variable_value(v), init, 3, 0, 0);
  /* Twice, to be sure nothing was staged and kept for later. */
  tu_assert_status(graft_function_call(f, 3, in, 1, out), GRAFT_EINVAL);
  tu_assert_close(graft_variable_value(v), init, 3, 0, 0);

  lab[1] = 2;
  tu_assert_call_ok(f, 3, in, 1, out);
  const double loss = log(3.0);
  tu_assert_close(out[0], &loss, 1, 1e-12, 1e-12);
  const double after[] = {11, 12, 13};
  tu_assert_close(graft_variable_value(v), after, 3, 0, 0);
  tu_destroy_outs(out, 1);
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
  for (int i = 0; i < 3; i++) graft_tensor_destroy(in[i]);
  graft_variable_destroy(v);
}

/* out = v + x (shape [2,2]); v := x */
static graft_status assign_and_output_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                         graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_variable *v = user;
  out[0] = graft_add(t, graft_read(t, v), in[0]);
  (void)graft_assign(t, v, in[0]);
  return GRAFT_OK;
}

static void test_graft_function_call__bad_output_tensor_leaves_variable(void **state) {
  (void)state;
  const int64_t s[] = {2, 2}, bad[] = {4};
  const double init[] = {1, 1, 1, 1}, x[] = {2, 3, 4, 5};
  graft_variable *v = make_var("kept", GRAFT_F64, 2, s, init);
  graft_function *f = tu_function(g_rt, "assign_and_output", assign_and_output_cb, v, 1, 1, NULL);
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 2, s, x)};
  graft_tensor *wrong = tu_tensor_from(GRAFT_F64, 1, bad, NULL);
  graft_tensor *out[1] = {wrong};
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_ESHAPE);
  assert_ptr_equal(out[0], wrong);
  tu_assert_close(graft_variable_value(v), init, 4, 0, 0);
  /* A good call afterwards works and commits. */
  out[0] = NULL;
  tu_assert_call_ok(f, 1, in, 1, out);
  const double want[] = {3, 4, 5, 6};
  tu_assert_close(out[0], want, 4, 0, 0);
  tu_assert_close(graft_variable_value(v), x, 4, 0, 0);
  tu_destroy_outs(out, 1);
  graft_tensor_destroy(wrong);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_variable_destroy(v);
}

/* ---- set / value / name ----------------------------------------------- */

static graft_status read_plus_x_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = graft_add(t, graft_read(t, (graft_variable *)user), in[0]);
  return GRAFT_OK;
}

static void test_graft_variable_set__visible_without_retrace(void **state) {
  (void)state;
  const int64_t s[] = {3};
  const double init[] = {1, 2, 3}, x[] = {100, 100, 100}, nv[] = {-1, -2, -3};
  graft_variable *v = make_var("settable", GRAFT_F64, 1, s, init);
  graft_function *f = tu_function(g_rt, "read_plus_x", read_plus_x_cb, v, 1, 1, NULL);
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s, x)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  const double w1[] = {101, 102, 103};
  tu_assert_close(out[0], w1, 3, 0, 0);
  tu_destroy_outs(out, 1);

  graft_tensor *src = tu_tensor_from(GRAFT_F64, 1, s, nv);
  tu_assert_status(graft_variable_set(v, src), GRAFT_OK);
  /* set copies: changing src afterwards does not change v */
  ((double *)graft_tensor_data(src))[0] = 1e9;
  tu_assert_close(graft_variable_value(v), nv, 3, 0, 0);
  tu_assert_call_ok(f, 1, in, 1, out);
  const double w2[] = {99, 98, 97};
  tu_assert_close(out[0], w2, 3, 0, 0);
  tu_destroy_outs(out, 1);
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_tensor_destroy(src);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_variable_destroy(v);
}

static void test_graft_variable_value__init_copied_zero_default_and_name(void **state) {
  (void)state;
  const int64_t s[] = {2, 3};
  float init[] = {1, 2, 3, 4, 5, 6};
  graft_variable *v = make_var("layer/w", GRAFT_F32, 2, s, init);
  init[0] = 42; /* init is copied */
  const graft_tensor *val = graft_variable_value(v);
  assert_non_null(val);
  assert_int_equal(graft_tensor_dtype(val), GRAFT_F32);
  assert_int_equal(graft_tensor_rank(val), 2);
  assert_int_equal(graft_tensor_shape(val)[0], 2);
  assert_int_equal(graft_tensor_shape(val)[1], 3);
  const double want[] = {1, 2, 3, 4, 5, 6};
  tu_assert_close(val, want, 6, 0, 0);
  assert_string_equal(graft_variable_name(v), "layer/w");

  graft_variable *z = make_var("zeros", GRAFT_F64, 2, s, NULL);
  const double zeros[6] = {0};
  tu_assert_close(graft_variable_value(z), zeros, 6, 0, 0);
  graft_variable_destroy(z);
  graft_variable_destroy(v);
}

/* ---- assign value used as an output ----------------------------------- */

static graft_status assign_is_output_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                        graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_variable *v = user;
  graft_value *nv = graft_assign(t, v, graft_add(t, in[0], graft_scalar(t, GRAFT_F64, 1.0)));
  out[0] = nv;
  out[1] = graft_read(t, v);
  return GRAFT_OK;
}

static void test_graft_assign__value_is_also_output(void **state) {
  (void)state;
  const int64_t s[] = {2};
  const double init[] = {0, 0}, x[] = {5, 6};
  graft_variable *v = make_var("outvar", GRAFT_F64, 1, s, init);
  graft_function *f = tu_function(g_rt, "assign_is_output", assign_is_output_cb, v, 1, 2, NULL);
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s, x)};
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_call_ok(f, 1, in, 2, out);
  const double want[] = {6, 7};
  tu_assert_close(out[0], want, 2, 0, 0);
  tu_assert_close(out[1], want, 2, 0, 0);
  tu_assert_close(graft_variable_value(v), want, 2, 0, 0);
  /* The outputs are the caller's: they are not the variable's storage. */
  assert_ptr_not_equal(graft_tensor_data(out[0]), graft_tensor_data(graft_variable_value(v)));
  assert_ptr_not_equal(graft_tensor_data(out[1]), graft_tensor_data(graft_variable_value(v)));
  ((double *)graft_tensor_data(out[0]))[0] = -100;
  tu_assert_close(graft_variable_value(v), want, 2, 0, 0);
  tu_destroy_outs(out, 2);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_variable_destroy(v);
}

/* out = read(v) directly (no op in between); then v += 1.  The output is
 * the value read, i.e. before the assign, and not the variable's storage. */
static graft_status read_is_output_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                      graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  graft_variable *v = user;
  out[0] = graft_read(t, v);
  (void)graft_assign_add(t, v, graft_scalar(t, GRAFT_F64, 1.0));
  return GRAFT_OK;
}

static void test_graft_read__read_is_output_before_assign(void **state) {
  (void)state;
  const int64_t s[] = {3};
  const double init[] = {1, 2, 3};
  graft_variable *v = make_var("read_out", GRAFT_F64, 1, s, init);
  graft_function *f = tu_function(g_rt, "read_is_output", read_is_output_cb, v, 0, 1, NULL);
  double cur[3] = {1, 2, 3};
  for (int call = 0; call < 3; call++) {
    graft_tensor *out[1] = {NULL};
    tu_assert_call_ok(f, 0, NULL, 1, out);
    tu_assert_close(out[0], cur, 3, 0, 0);
    assert_ptr_not_equal(graft_tensor_data(out[0]), graft_tensor_data(graft_variable_value(v)));
    for (int i = 0; i < 3; i++) cur[i] += 1;
    tu_assert_close(graft_variable_value(v), cur, 3, 0, 0);
    tu_destroy_outs(out, 1);
  }
  /* The output is the variable's memory until the end of the call. */
  assert_int_equal(direct_assigns(f), 0);
  graft_function_destroy(f);
  graft_variable_destroy(v);
}

/* ---- two functions share a variable ------------------------------------ */

static graft_status writer_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = graft_assign(t, (graft_variable *)user, in[0]);
  return GRAFT_OK;
}

static graft_status reader_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  out[0] = graft_mul(t, graft_read(t, (graft_variable *)user), graft_scalar(t, GRAFT_F64, 3.0));
  return GRAFT_OK;
}

static void test_graft_assign__seen_by_another_function(void **state) {
  (void)state;
  const int64_t s[] = {2};
  const double init[] = {1, 2};
  graft_variable *v = make_var("shared", GRAFT_F64, 1, s, init);
  graft_function *w = tu_function(g_rt, "writer", writer_cb, v, 1, 1, NULL);
  graft_function *r = tu_function(g_rt, "reader", reader_cb, v, 0, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(r, 0, NULL, 1, out);
  const double w0[] = {3, 6};
  tu_assert_close(out[0], w0, 2, 0, 0);
  tu_destroy_outs(out, 1);
  tu_rng rng = {0x5eed5eedULL};
  for (int k = 0; k < 3; k++) {
    graft_tensor *in[1] = {tu_tensor_rand(&rng, GRAFT_F64, 1, s, -1, 1)};
    tu_assert_call_ok(w, 1, in, 1, out);
    tu_destroy_outs(out, 1);
    tu_assert_call_ok(r, 0, NULL, 1, out);
    const double want[] = {3 * tu_get(in[0], 0), 3 * tu_get(in[0], 1)};
    tu_assert_close(out[0], want, 2, 1e-15, 0);
    tu_destroy_outs(out, 1);
    graft_tensor_destroy(in[0]);
  }
  assert_int_equal(graft_function_trace_count(w), 1);
  assert_int_equal(graft_function_trace_count(r), 1);
  graft_function_destroy(w);
  graft_function_destroy(r);
  graft_variable_destroy(v);
}

/* ---- main ------------------------------------------------------------- */

/* ---- assigns written straight into the variable ------------------------ */


typedef struct sgd_model {
  graft_variable *w, *b;
} sgd_model;

/* One SGD step of y = x W + b on loss sum(y^2); out[1] = sum(2 W) reads W
 * on no path to the assign, so it must run before W is overwritten. */
static graft_status sgd_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  sgd_model *m = user;
  graft_value *reads[2] = {graft_read(t, m->w), graft_read(t, m->b)}, *grads[2];
  graft_value *y = graft_add(t, graft_matmul(t, in[0], reads[0], 0), reads[1]);
  graft_value *loss = graft_reduce_sum(t, graft_mul(t, y, y), 0, NULL, 0);
  graft_status st = graft_gradients(t, 1, &loss, NULL, 2, reads, GRAFT_UNCONNECTED_ZERO, grads);
  if (st != GRAFT_OK) return st;
  graft_value *lr = graft_scalar(t, GRAFT_F64, 0.01);
  for (int i = 0; i < 2; i++)
    (void)graft_assign_sub(t, i ? m->b : m->w, graft_mul(t, lr, grads[i]));
  out[0] = loss;
  out[1] = graft_reduce_sum(t, graft_mul(t, reads[0], graft_scalar(t, GRAFT_F64, 2.0)), 0, NULL, 0);
  return GRAFT_OK;
}

static graft_runtime *runtime_ws(int threads) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = threads;
  o.sched = "ws";
  o.grain = 16; /* several tiles per op */
  graft_runtime *rt = NULL;
  assert_int_equal(graft_runtime_create(&o, &rt), GRAFT_OK);
  return rt;
}

static void test_graft_assign__direct_sgd_steps_bitwise_equal_across_threads(void **state) {
  (void)state;
  const int64_t sx[] = {16, 12}, sw[] = {12, 8}, sb[] = {8};
  tu_rng r = {42};
  graft_tensor *x = tu_tensor_rand(&r, GRAFT_F64, 2, sx, -1, 1);
  graft_tensor *w0 = tu_tensor_rand(&r, GRAFT_F64, 2, sw, -0.5, 0.5);
  graft_tensor *b0 = tu_tensor_rand(&r, GRAFT_F64, 1, sb, -0.5, 0.5);
  graft_tensor *ref_w = NULL, *ref_b = NULL;
  static const int threads[] = {0, 1, 2, 8}; /* 0: the seq group runtime */
  for (size_t c = 0; c < TU_N_OF(threads); c++) {
    sgd_model m = {make_var("sgd_w", GRAFT_F64, 2, sw, graft_tensor_data(w0)),
                   make_var("sgd_b", GRAFT_F64, 1, sb, graft_tensor_data(b0))};
    graft_runtime *rt = threads[c] ? runtime_ws(threads[c]) : g_rt;
    graft_function *f = tu_function(rt, "sgd", sgd_cb, &m, 1, 2, NULL);
    graft_tensor *in[1] = {x};
    double prev_loss = INFINITY;
    for (int step = 0; step < 5; step++) {
      /* out[1] must see the weights from before this step's update */
      double want_w2 = 0;
      const double *wd = graft_tensor_data(graft_variable_value(m.w));
      for (int64_t i = 0; i < 12 * 8; i++) want_w2 += 2 * wd[i];
      graft_tensor *out[2] = {NULL, NULL};
      tu_assert_call_ok(f, 1, in, 2, out);
      double loss = tu_get(out[0], 0), w2 = tu_get(out[1], 0);
      assert_true(loss < prev_loss);
      assert_true(fabs(w2 - want_w2) <= 1e-12 * (1 + fabs(want_w2)));
      prev_loss = loss;
      tu_destroy_outs(out, 2);
    }
    assert_int_equal(direct_assigns(f), 2);
    if (!ref_w) {
      ref_w = tu_copy(graft_variable_value(m.w));
      ref_b = tu_copy(graft_variable_value(m.b));
    } else {
      assert_true(tu_bitwise_equal(graft_variable_value(m.w), ref_w));
      assert_true(tu_bitwise_equal(graft_variable_value(m.b), ref_b));
    }
    graft_function_destroy(f);
    if (rt != g_rt) graft_runtime_destroy(rt);
    graft_variable_destroy(m.w);
    graft_variable_destroy(m.b);
  }
  graft_tensor_destroy(ref_w);
  graft_tensor_destroy(ref_b);
  graft_tensor_destroy(x);
  graft_tensor_destroy(w0);
  graft_tensor_destroy(b0);
}

/* Many variables, each read (out = sum_k v_k * x) and then updated (v_k -=
 * 0.5 * x): 2,500 assigns over ~17,500 nodes, past the size where the
 * search for direct assigns used to give up (it scanned every node per
 * assign).  Every assign is direct, the output sees the old values and
 * the variables the new ones, at 1, 2 and 8 work-stealing threads. */
enum { MANY_VARS = 2500 };

static graft_status many_vars_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_variable **vs = user;
  graft_value *acc = NULL;
  for (int k = 0; k < MANY_VARS; k++) {
    graft_value *m = graft_mul(t, graft_read(t, vs[k]), in[0]);
    acc = acc ? graft_add(t, acc, m) : m;
  }
  for (int k = 0; k < MANY_VARS; k++)
    graft_assign_sub(t, vs[k], graft_mul(t, graft_scalar(t, GRAFT_F64, 0.5), in[0]));
  out[0] = acc;
  return GRAFT_OK;
}

static void test_graft_assign__many_variables_all_direct(void **state) {
  (void)state;
  const int64_t sh[] = {4};
  const double x0[4] = {1, -2, 0.5, 3};
  graft_tensor *x = NULL;
  assert_int_equal(graft_tensor_create(GRAFT_F64, 1, sh, &x), GRAFT_OK);
  memcpy(graft_tensor_data(x), x0, sizeof x0);
  graft_variable **vs = calloc(MANY_VARS, sizeof *vs);
  assert_non_null(vs);
  static const int threads[] = {1, 2, 8};
  for (size_t c = 0; c < TU_N_OF(threads); c++) {
    for (int k = 0; k < MANY_VARS; k++) {
      double init[4] = {k % 7, -(k % 5), 0.25 * (k % 3), 1};
      char name[16];
      snprintf(name, sizeof name, "v%d", k);
      vs[k] = make_var(name, GRAFT_F64, 1, sh, init);
    }
    graft_runtime *rt = runtime_ws(threads[c]);
    graft_function *f = tu_function(rt, "many_vars", many_vars_cb, vs, 1, 1, NULL);
    for (int step = 0; step < 2; step++) {
      graft_tensor *out[1] = {NULL};
      tu_assert_call_ok(f, 1, &x, 1, out);
      /* the output from the values before this step's update */
      for (int e = 0; e < 4; e++) {
        double want = 0;
        for (int k = 0; k < MANY_VARS; k++) {
          double v0[4] = {k % 7, -(k % 5), 0.25 * (k % 3), 1};
          want += (v0[e] - 0.5 * x0[e] * step) * x0[e];
        }
        if (fabs(tu_get(out[0], e) - want) > 1e-9 * (1 + fabs(want)))
          fail_msg("ws x%d step %d: out[%d] = %.17g, want %.17g", threads[c], step, e, tu_get(out[0], e), want);
      }
      tu_destroy_outs(out, 1);
    }
    assert_int_equal(direct_assigns(f), MANY_VARS);
    for (int k = 0; k < MANY_VARS; k += 97) {
      const double *v = graft_tensor_data(graft_variable_value(vs[k]));
      double v0[4] = {k % 7, -(k % 5), 0.25 * (k % 3), 1};
      for (int e = 0; e < 4; e++) assert_true(v[e] == v0[e] - 0.5 * x0[e] - 0.5 * x0[e]);
    }
    graft_function_destroy(f);
    graft_runtime_destroy(rt);
    for (int k = 0; k < MANY_VARS; k++) graft_variable_destroy(vs[k]);
  }
  free(vs);
  graft_tensor_destroy(x);
}

/* ---- SGD updates as one mul_add pass ----------------------------------- */

/* Live nodes of op (its DOT name) in f's last traced graph. */
static int live_ops(graft_function *f, const char *op) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  assert_non_null(m);
  assert_int_equal(graft_function_write_dot(f, m), GRAFT_OK);
  fclose(m);
  int count = 0;
  size_t n = strlen(op);
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    char *l = strstr(line, "label=\"#");
    if (!l || strstr(line, ",dashed")) continue;
    l += 8;
    while (*l >= '0' && *l <= '9') l++;
    if (*l == ' ' && strncmp(l + 1, op, n) == 0 && !(l[1 + n] == '_' || (l[1 + n] >= 'a' && l[1 + n] <= 'z')))
      count++;
  }
  free(buf);
  return count;
}

typedef struct update_case {
  graft_variable *v;
  int fused_api;   /* graft_assign_sub / _add (else assign of sub / add) */
  int add;         /* v += s g (else v -= s g) */
  int scalar_last; /* mul(g, s) (else mul(s, g)) */
} update_case;

/* in[0] = g, in[1] = s: v := v -/+ s g, out[0] = the new value. */
static graft_status update_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const update_case *u = user;
  graft_value *d = u->scalar_last ? graft_mul(t, in[0], in[1]) : graft_mul(t, in[1], in[0]);
  if (u->fused_api)
    out[0] = u->add ? graft_assign_add(t, u->v, d) : graft_assign_sub(t, u->v, d);
  else
    out[0] = graft_assign(t, u->v, u->add ? graft_add(t, graft_read(t, u->v), d)
                                          : graft_sub(t, graft_read(t, u->v), d));
  return GRAFT_OK;
}

/* assign_sub(v, s * g) and assign_add(v, g * s) with a scalar s (rank 0 or
 * all ones) run as one live mul_add and no live mul, and leave v bitwise as
 * the separate mul and sub / add do, over three steps, f32 and f64, on ws
 * at 3 threads (tiled).  A full-shape s is not fused, and still right. */
static void test_graft_assign_sub__scaled_update_is_one_mul_add_bitwise(void **state) {
  (void)state;
  const int64_t sv[] = {200, 300}, s11[] = {1, 1};
  graft_runtime *rt = runtime_ws(3);
  tu_rng r = {0x5e9d};
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 4; k++) {
      graft_dtype dt = d ? GRAFT_F64 : GRAFT_F32;
      int add = k & 1, scalar_last = k >> 1;
      /* k 0..3: rank-0 and [1,1] scalars; a [200,300] s once (k == 3) */
      int full = k == 3;
      graft_tensor *g = tu_tensor_rand(&r, dt, 2, sv, -1, 1);
      graft_tensor *s = full ? tu_tensor_rand(&r, dt, 2, sv, 0.01, 0.1)
                             : tu_tensor_rand(&r, dt, k == 2 ? 2 : 0, s11, 0.01, 0.1);
      graft_tensor *v0 = tu_tensor_rand(&r, dt, 2, sv, -1, 1);
      graft_tensor *want = NULL;
      for (int api = 1; api >= 0; api--) {
        update_case u = {make_var("upd", dt, 2, sv, graft_tensor_data(v0)), api, add, scalar_last};
        graft_function *f = tu_function(rt, "update", update_cb, &u, 2, 1, NULL);
        graft_tensor *in[2] = {g, s};
        for (int step = 0; step < 3; step++) {
          graft_tensor *out[1] = {NULL};
          tu_assert_call_ok(f, 2, in, 1, out);
          tu_destroy_outs(out, 1);
        }
        if (api) {
          assert_int_equal(live_ops(f, "mul_add"), full ? 0 : 1);
          assert_int_equal(live_ops(f, "mul"), full ? 1 : 0);
          want = tu_copy(graft_variable_value(u.v));
        } else {
          assert_int_equal(live_ops(f, "mul_add"), 0);
          if (!tu_bitwise_equal(graft_variable_value(u.v), want))
            fail_msg("%s k=%d: fused update differs bitwise from mul + %s", graft_dtype_name(dt),
                     k, add ? "add" : "sub");
        }
        graft_function_destroy(f);
        graft_variable_destroy(u.v);
      }
      graft_tensor_destroy(want);
      graft_tensor_destroy(v0);
      graft_tensor_destroy(s);
      graft_tensor_destroy(g);
    }
  graft_runtime_destroy(rt);
}

/* r = read(v); v := x; out = r + (new v): the old value is read after the
 * assign in every schedule, so the assign is staged. */
static graft_status old_and_new_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_variable *v = user;
  graft_value *r = graft_read(t, v);
  graft_value *a = graft_assign(t, v, in[0]);
  out[0] = graft_add(t, r, a);
  return GRAFT_OK;
}

static void test_graft_assign__old_value_read_after_assign_is_staged(void **state) {
  (void)state;
  const int64_t s[] = {3};
  const double init[] = {1, 2, 3}, x[] = {10, 20, 30}, want[] = {11, 22, 33};
  graft_variable *v = make_var("old_new", GRAFT_F64, 1, s, init);
  graft_function *f = tu_function(g_rt, "old_and_new", old_and_new_cb, v, 1, 1, NULL);
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s, x)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  tu_assert_close(out[0], want, 3, 0, 0);
  tu_assert_close(graft_variable_value(v), x, 3, 0, 0);
  assert_int_equal(direct_assigns(f), 0);
  tu_destroy_outs(out, 1);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_variable_destroy(v);
}

/* v := v + x, out = x, called with the variable's own tensor as x: the
 * call may not write the variable before x is read, so it stages. */
static graft_status add_input_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  (void)graft_assign_add(t, (graft_variable *)user, in[0]);
  out[0] = graft_mul(t, in[0], graft_scalar(t, GRAFT_F64, 1.0));
  return GRAFT_OK;
}

static void test_graft_assign__variable_memory_passed_as_input(void **state) {
  (void)state;
  const int64_t s[] = {4};
  const double init[] = {1, 2, 3, 4}, twice[] = {2, 4, 6, 8};
  graft_variable *v = make_var("aliased", GRAFT_F64, 1, s, init);
  graft_function *f = tu_function(g_rt, "add_input", add_input_cb, v, 1, 1, NULL);
  graft_tensor *in[1] = {(graft_tensor *)graft_variable_value(v)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  assert_int_equal(direct_assigns(f), 1); /* the plan allows it; this call does not */
  tu_assert_close(out[0], init, 4, 0, 0);
  tu_assert_close(graft_variable_value(v), twice, 4, 0, 0);
  tu_destroy_outs(out, 1);
  graft_function_destroy(f);
  graft_variable_destroy(v);
}

static graft_status read_var_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  out[0] = graft_read(t, user);
  return GRAFT_OK;
}

/* A second destroy of a variable an optimizer still holds is refused: it
 * used to drop the optimizer's reference too, freeing the variable under
 * it (use after free when the optimizer went, found by the module fuzz
 * target's author). */
static void test_graft_variable_destroy__twice_while_held_is_refused(void **state) {
  (void)state;
  graft_variable *w = NULL;
  const int64_t s[1] = {3};
  tu_assert_status(graft_variable_create(NULL, "w", GRAFT_F32, 1, s, NULL, 0, &w), GRAFT_OK);
  graft_module *opt = NULL;
  graft_optimizer_desc d = {.kind = GRAFT_OPT_SGD, .lr = 0.1};
  tu_assert_status(graft_optimizer_create(NULL, "opt", &d, 1, &w, &opt), GRAFT_OK);
  graft_variable_destroy(w);
  graft_variable_destroy(w);
  tu_assert_msg_has(graft_last_errmsg(), "graft_variable_destroy: variable 'w' was destroyed already");
  /* the optimizer's reference keeps w alive (ASan: no use after free) */
  assert_string_equal(graft_variable_name(w), "w");
  assert_int_equal(graft_tensor_numel(graft_variable_value(w)), 3);
  /* and a trace that reads it names it */
  graft_runtime *rt = tu_runtime();
  graft_function *f = tu_function(rt, "reads_w", read_var_cb, w, 0, 1, NULL);
  graft_tensor *out = NULL;
  tu_assert_status(graft_function_call(f, 0, NULL, 1, &out), GRAFT_EMISUSE);
  tu_assert_msg_has(graft_function_errmsg(f), "read: variable 'w' was destroyed");
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
  graft_module_destroy(opt); /* frees w */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_assign_add__visible_to_next_call_without_retrace),
      cmocka_unit_test(test_graft_read__after_assign_returns_new_value),
      cmocka_unit_test(test_graft_assign__earlier_read_keeps_old_value),
      cmocka_unit_test(test_graft_assign_sub__decrements_and_returns_new_value),
      cmocka_unit_test(test_graft_assign_sub__scaled_update_is_one_mul_add_bitwise),
      cmocka_unit_test(test_graft_assign_add__broadcast_delta),
      cmocka_unit_test(test_graft_assign__scalar_broadcasts_to_variable),
      cmocka_unit_test(test_graft_assign_add__i32_counter),
      cmocka_unit_test(test_graft_assign__swap_two_variables),
      cmocka_unit_test(test_graft_assign__read_after_assign_in_chain),
      cmocka_unit_test(test_graft_assign__twice_in_one_trace),
      cmocka_unit_test(test_graft_function_call__failure_after_assign_leaves_variable),
      cmocka_unit_test(test_graft_function_call__bad_output_tensor_leaves_variable),
      cmocka_unit_test(test_graft_variable_set__visible_without_retrace),
      cmocka_unit_test(test_graft_variable_value__init_copied_zero_default_and_name),
      cmocka_unit_test(test_graft_assign__value_is_also_output),
      cmocka_unit_test(test_graft_read__read_is_output_before_assign),
      cmocka_unit_test(test_graft_assign__seen_by_another_function),
      cmocka_unit_test(test_graft_assign__direct_sgd_steps_bitwise_equal_across_threads),
      cmocka_unit_test(test_graft_assign__many_variables_all_direct),
      cmocka_unit_test(test_graft_assign__old_value_read_after_assign_is_staged),
      cmocka_unit_test(test_graft_assign__variable_memory_passed_as_input),
      cmocka_unit_test(test_graft_variable_destroy__twice_while_held_is_refused),
  };
  return cmocka_run_group_tests_name("graph/variables", tests, tu_group_setup, tu_group_teardown);
}
