/* Malformed uses of the public API: every one returns its specific status,
 * leaves outputs NULL, keeps a message that names what failed, and never
 * crashes, aborts or leaks. */
#include <ctype.h>
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
static graft_variable *g_var; /* f32 [3], for assign errors inside traces */

/* A non-NULL pointer that graft must overwrite with NULL on failure. */
static char g_sentinel_byte;
#define SENTINEL_TENSOR ((graft_tensor *)(void *)&g_sentinel_byte)
#define SENTINEL_FUNCTION ((graft_function *)(void *)&g_sentinel_byte)
#define SENTINEL_RUNTIME ((graft_runtime *)(void *)&g_sentinel_byte)
#define SENTINEL_VARIABLE ((graft_variable *)(void *)&g_sentinel_byte)

/* ---- helpers ---------------------------------------------------------- */

static int ci_contains(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (const char *p = hay; *p; p++) {
    size_t i = 0;
    while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == n) return 1;
  }
  return n == 0;
}

#define assert_msg_has_ci(msg, sub)                                               \
  do {                                                                            \
    const char *am_m_ = (msg), *am_s_ = (sub);                                    \
    if (am_m_ == NULL) fail_msg("message is NULL (wanted \"%s\")", am_s_);        \
    if (!ci_contains(am_m_, am_s_))                                               \
      fail_msg("message \"%s\" does not mention \"%s\"", am_m_, am_s_);           \
  } while (0)

static graft_tensor *make_tensor(graft_dtype dt, int rank, const int64_t *shape, double fillv) {
  graft_tensor *t = NULL;
  assert_int_equal(graft_tensor_create(dt, rank, shape, &t), GRAFT_OK);
  assert_non_null(t);
  int64_t n = graft_tensor_numel(t);
  void *d = graft_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    if (dt == GRAFT_F32) ((float *)d)[i] = (float)fillv;
    else if (dt == GRAFT_F64) ((double *)d)[i] = fillv;
    else ((int32_t *)d)[i] = (int32_t)fillv;
  }
  return t;
}

/* ---- trace-time op errors, table driven ------------------------------ */

typedef graft_value *(*build_fn)(graft_trace *t, graft_value *a, graft_value *b);

typedef struct operand {
  graft_dtype dt;
  int rank; /* -1: no such input */
  int64_t dims[4];
} operand;

typedef struct op_case {
  const char *test_name;
  operand a, b;
  build_fn build;
  graft_status want;
  const char *sub[4]; /* substrings the message must contain */
} op_case;

static const int ax2[] = {2}, axm3[] = {-3}, ax00[] = {0, 0}, ax1m1[] = {1, -1};
static const int perm00[] = {0, 0}, perm02[] = {0, 2};

static graft_value *b_matmul(graft_trace *t, graft_value *a, graft_value *b) { return graft_matmul(t, a, b, 0); }
static graft_value *b_matmul_tb(graft_trace *t, graft_value *a, graft_value *b) {
  return graft_matmul(t, a, b, GRAFT_TRANS_B);
}
static graft_value *b_matmul_null(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_matmul(t, NULL, a, 0);
}
static graft_value *b_add(graft_trace *t, graft_value *a, graft_value *b) { return graft_add(t, a, b); }
static graft_value *b_add_null(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_add(t, a, NULL);
}
static graft_value *b_sub(graft_trace *t, graft_value *a, graft_value *b) { return graft_sub(t, a, b); }
static graft_value *b_mul(graft_trace *t, graft_value *a, graft_value *b) { return graft_mul(t, a, b); }
static graft_value *b_div(graft_trace *t, graft_value *a, graft_value *b) { return graft_div(t, a, b); }
static graft_value *b_pow(graft_trace *t, graft_value *a, graft_value *b) { return graft_pow(t, a, b); }
static graft_value *b_maximum(graft_trace *t, graft_value *a, graft_value *b) { return graft_maximum(t, a, b); }
static graft_value *b_where(graft_trace *t, graft_value *a, graft_value *b) { return graft_where(t, a, a, b); }
static graft_value *b_sqrt(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_sqrt(t, a);
}
static graft_value *b_exp(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_exp(t, a);
}
static graft_value *b_exp_null(graft_trace *t, graft_value *a, graft_value *b) {
  (void)a, (void)b;
  return graft_exp(t, NULL);
}
static graft_value *b_log(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_log(t, a);
}
static graft_value *b_rsum_ax2(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_reduce_sum(t, a, 1, ax2, 0);
}
static graft_value *b_rsum_axm3(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_reduce_sum(t, a, 1, axm3, 0);
}
static graft_value *b_rsum_null_axes(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_reduce_sum(t, a, 1, NULL, 0);
}
static graft_value *b_rmax_dup(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_reduce_max(t, a, 2, ax00, 0);
}
static graft_value *b_rmean_alias(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_reduce_mean(t, a, 2, ax1m1, 1);
}
static graft_value *b_rmean_all(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_reduce_mean(t, a, 0, NULL, 0);
}
static graft_value *b_transpose_dup(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_transpose(t, a, perm00);
}
static graft_value *b_transpose_oob(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_transpose(t, a, perm02);
}
static graft_value *b_reshape_count(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  const int64_t s[] = {4, 2};
  return graft_reshape(t, a, 2, s);
}
static graft_value *b_reshape_two_infer(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  const int64_t s[] = {-1, -1};
  return graft_reshape(t, a, 2, s);
}
static graft_value *b_reshape_indivisible(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  const int64_t s[] = {-1, 4};
  return graft_reshape(t, a, 2, s);
}
static graft_value *b_reshape_rank9(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  const int64_t s[GRAFT_MAX_RANK + 1] = {6, 1, 1, 1, 1, 1, 1, 1, 1};
  return graft_reshape(t, a, GRAFT_MAX_RANK + 1, s);
}
static graft_value *b_slice_begin_oob(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  const int64_t begin[] = {5, 0}, size[] = {1, -1};
  return graft_slice(t, a, begin, size);
}
static graft_value *b_slice_size_oob(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  const int64_t begin[] = {2, 0}, size[] = {3, 3};
  return graft_slice(t, a, begin, size);
}
static graft_value *b_concat0(graft_trace *t, graft_value *a, graft_value *b) {
  graft_value *xs[] = {a, b};
  return graft_concat(t, 2, xs, 0);
}
static graft_value *b_concat_ax2(graft_trace *t, graft_value *a, graft_value *b) {
  graft_value *xs[] = {a, b};
  return graft_concat(t, 2, xs, 2);
}
static graft_value *b_concat_null_elem(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  graft_value *xs[] = {a, NULL};
  return graft_concat(t, 2, xs, 0);
}
static graft_value *b_concat_empty(graft_trace *t, graft_value *a, graft_value *b) {
  (void)a, (void)b;
  return graft_concat(t, 0, NULL, 0);
}
static graft_value *b_softmax_ax2(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_softmax(t, a, 2);
}
static graft_value *b_log_softmax_axm3(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_log_softmax(t, a, -3);
}
static graft_value *b_xent(graft_trace *t, graft_value *a, graft_value *b) {
  return graft_softmax_cross_entropy(t, a, b);
}
static graft_value *b_broadcast_to(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  const int64_t s[] = {2, 4};
  return graft_broadcast_to(t, a, 2, s);
}
static graft_value *b_sum_to_shape(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  const int64_t s[] = {4};
  return graft_sum_to_shape(t, a, 1, s);
}
static graft_value *b_one_hot(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_one_hot(t, a, 3, GRAFT_F32);
}
static graft_value *b_one_hot_negdepth(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_one_hot(t, a, -2, GRAFT_F32);
}
static graft_value *b_cast_bad(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_cast(t, a, (graft_dtype)7);
}
static graft_value *b_polygamma_neg(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_polygamma(t, -1, a);
}
static graft_value *b_constant_null(graft_trace *t, graft_value *a, graft_value *b) {
  (void)a, (void)b;
  const int64_t s[] = {3};
  return graft_constant(t, GRAFT_F32, 1, s, NULL);
}
static graft_value *b_fill_neg(graft_trace *t, graft_value *a, graft_value *b) {
  (void)a, (void)b;
  const int64_t s[] = {-1};
  return graft_fill(t, GRAFT_F32, 1, s, 0.0);
}
static graft_value *b_read_null(graft_trace *t, graft_value *a, graft_value *b) {
  (void)a, (void)b;
  return graft_read(t, NULL);
}
static graft_value *b_assign(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_assign(t, g_var, a);
}
static graft_value *b_assign_null_var(graft_trace *t, graft_value *a, graft_value *b) {
  (void)b;
  return graft_assign(t, NULL, a);
}
static graft_value *b_assign_null_value(graft_trace *t, graft_value *a, graft_value *b) {
  (void)a, (void)b;
  return graft_assign(t, g_var, NULL);
}

#define NONE {GRAFT_F32, -1, {0}}
#define F32(...) {GRAFT_F32, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}}
#define F64(...) {GRAFT_F64, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}}
#define I32(...) {GRAFT_I32, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}}

static const op_case op_cases[] = {
    {"test_graft_matmul__inner_dims_differ", F32(256, 784), F32(100, 10), b_matmul, GRAFT_ESHAPE,
     {"matmul", "[256,784]", "[100,10]", "op #"}},
    {"test_graft_matmul__trans_b_inner_dims_differ", F32(2, 3), F32(3, 2), b_matmul_tb, GRAFT_ESHAPE,
     {"matmul"}},
    {"test_graft_matmul__rank_one_operand", F32(3), F32(3, 2), b_matmul, GRAFT_ESHAPE, {"matmul"}},
    {"test_graft_matmul__batch_dims_not_broadcastable", F32(2, 3, 4), F32(5, 4, 2), b_matmul,
     GRAFT_ESHAPE, {"matmul"}},
    {"test_graft_matmul__i32_operands", I32(2, 3), I32(3, 2), b_matmul, GRAFT_EDTYPE, {"matmul"}},
    {"test_graft_matmul__f32_times_f64", F32(2, 3), F64(3, 2), b_matmul, GRAFT_EDTYPE, {"matmul"}},
    {"test_graft_matmul__null_operand", F32(2, 2), NONE, b_matmul_null, GRAFT_EINVAL, {"matmul"}},
    {"test_graft_add__bad_broadcast", F32(2, 3), F32(4), b_add, GRAFT_ESHAPE, {"add", "[2,3]", "[4]"}},
    {"test_graft_add__f32_plus_f64", F32(2, 3), F64(2, 3), b_add, GRAFT_EDTYPE, {"add"}},
    {"test_graft_add__null_operand", F32(2, 3), NONE, b_add_null, GRAFT_EINVAL, {"add"}},
    {"test_graft_sub__f32_minus_i32", F32(3), I32(3), b_sub, GRAFT_EDTYPE, {"sub"}},
    {"test_graft_mul__bad_broadcast", F64(3, 4), F64(2, 4), b_mul, GRAFT_ESHAPE, {"mul", "[3,4]", "[2,4]"}},
    {"test_graft_div__i32", I32(3), I32(3), b_div, GRAFT_EDTYPE, {"div"}},
    {"test_graft_pow__bad_broadcast", F64(2), F64(3), b_pow, GRAFT_ESHAPE, {"pow"}},
    {"test_graft_maximum__f64_and_f32", F64(3), F32(3), b_maximum, GRAFT_EDTYPE, {"maximum"}},
    {"test_graft_where__branch_dtypes_differ", F32(2), F64(2), b_where, GRAFT_EDTYPE, {"where"}},
    {"test_graft_sqrt__i32", I32(4), NONE, b_sqrt, GRAFT_EDTYPE, {"sqrt"}},
    {"test_graft_exp__i32", I32(4), NONE, b_exp, GRAFT_EDTYPE, {"exp"}},
    {"test_graft_exp__null_operand", F32(4), NONE, b_exp_null, GRAFT_EINVAL, {"exp"}},
    {"test_graft_log__i32", I32(2, 2), NONE, b_log, GRAFT_EDTYPE, {"log"}},
    {"test_graft_reduce_sum__axis_out_of_range", F32(2, 3), NONE, b_rsum_ax2, GRAFT_EINVAL,
     {"reduce_sum"}},
    {"test_graft_reduce_sum__negative_axis_out_of_range", F32(2, 3), NONE, b_rsum_axm3, GRAFT_EINVAL,
     {"reduce_sum"}},
    {"test_graft_reduce_sum__null_axes", F32(2, 3), NONE, b_rsum_null_axes, GRAFT_EINVAL, {"reduce_sum"}},
    {"test_graft_reduce_max__duplicate_axes", F32(2, 3), NONE, b_rmax_dup, GRAFT_EINVAL, {"reduce_max"}},
    {"test_graft_reduce_mean__axis_aliased_by_negative", F64(2, 3), NONE, b_rmean_alias, GRAFT_EINVAL,
     {"reduce_mean"}},
    {"test_graft_reduce_mean__i32", I32(2, 3), NONE, b_rmean_all, GRAFT_EDTYPE, {"reduce_mean"}},
    {"test_graft_transpose__perm_repeats_axis", F32(2, 3), NONE, b_transpose_dup, GRAFT_EINVAL,
     {"transpose"}},
    {"test_graft_transpose__perm_out_of_range", F32(2, 3), NONE, b_transpose_oob, GRAFT_EINVAL,
     {"transpose"}},
    {"test_graft_reshape__element_count_mismatch", F32(2, 3), NONE, b_reshape_count, GRAFT_ESHAPE,
     {"reshape", "[2,3]", "[4,2]"}},
    {"test_graft_reshape__two_inferred_dims", F32(2, 3), NONE, b_reshape_two_infer, GRAFT_EINVAL,
     {"reshape"}},
    {"test_graft_reshape__inferred_dim_indivisible", F32(2, 3), NONE, b_reshape_indivisible,
     GRAFT_ESHAPE, {"reshape"}},
    {"test_graft_reshape__rank_above_max", F32(6), NONE, b_reshape_rank9, GRAFT_EINVAL, {"reshape"}},
    {"test_graft_slice__begin_out_of_range", F32(4, 3), NONE, b_slice_begin_oob, GRAFT_EINVAL, {"slice"}},
    {"test_graft_slice__size_past_end", F32(4, 3), NONE, b_slice_size_oob, GRAFT_EINVAL, {"slice"}},
    {"test_graft_concat__other_dims_differ", F32(2, 3), F32(2, 4), b_concat0, GRAFT_ESHAPE, {"concat"}},
    {"test_graft_concat__ranks_differ", F32(2, 3), F32(3), b_concat0, GRAFT_ESHAPE, {"concat"}},
    {"test_graft_concat__dtypes_differ", F32(2, 3), F64(2, 3), b_concat0, GRAFT_EDTYPE, {"concat"}},
    {"test_graft_concat__axis_out_of_range", F32(2, 3), F32(2, 3), b_concat_ax2, GRAFT_EINVAL, {"concat"}},
    {"test_graft_concat__null_element", F32(2, 3), NONE, b_concat_null_elem, GRAFT_EINVAL, {"concat"}},
    {"test_graft_concat__no_values", F32(2, 3), NONE, b_concat_empty, GRAFT_EINVAL, {"concat"}},
    {"test_graft_softmax__axis_out_of_range", F32(2, 3), NONE, b_softmax_ax2, GRAFT_EINVAL, {"softmax"}},
    {"test_graft_log_softmax__negative_axis_out_of_range", F64(2, 3), NONE, b_log_softmax_axm3,
     GRAFT_EINVAL, {"log_softmax"}},
    {"test_graft_softmax_cross_entropy__f32_labels", F32(4, 3), F32(4), b_xent, GRAFT_EDTYPE,
     {"softmax_cross_entropy"}},
    {"test_graft_softmax_cross_entropy__batch_mismatch", F32(4, 3), I32(5), b_xent, GRAFT_ESHAPE,
     {"softmax_cross_entropy"}},
    {"test_graft_broadcast_to__incompatible_target", F32(3), NONE, b_broadcast_to, GRAFT_ESHAPE,
     {"broadcast_to"}},
    {"test_graft_sum_to_shape__target_not_broadcastable", F32(2, 3), NONE, b_sum_to_shape, GRAFT_ESHAPE,
     {"sum_to_shape"}},
    {"test_graft_one_hot__f32_labels", F32(4), NONE, b_one_hot, GRAFT_EDTYPE, {"one_hot"}},
    {"test_graft_one_hot__negative_depth", I32(4), NONE, b_one_hot_negdepth, GRAFT_EINVAL, {"one_hot"}},
    {"test_graft_cast__invalid_dtype", F32(4), NONE, b_cast_bad, GRAFT_EDTYPE, {"cast"}},
    {"test_graft_polygamma__negative_order", F64(4), NONE, b_polygamma_neg, GRAFT_EINVAL, {"polygamma"}},
    {"test_graft_constant__null_data", F32(1), NONE, b_constant_null, GRAFT_EINVAL, {"constant"}},
    {"test_graft_fill__negative_dim", F32(1), NONE, b_fill_neg, GRAFT_EINVAL, {"fill"}},
    {"test_graft_read__null_variable", F32(1), NONE, b_read_null, GRAFT_EINVAL, {"read"}},
    {"test_graft_assign__dtype_mismatch", F64(3), NONE, b_assign, GRAFT_EDTYPE, {"assign"}},
    {"test_graft_assign__shape_not_broadcastable", F32(4), NONE, b_assign, GRAFT_ESHAPE, {"assign"}},
    {"test_graft_assign__null_variable", F32(3), NONE, b_assign_null_var, GRAFT_EINVAL, {"assign"}},
    {"test_graft_assign__null_value", F32(3), NONE, b_assign_null_value, GRAFT_EINVAL, {"assign"}},
};
#define N_OP_CASES ((int)TU_N_OF(op_cases))

static graft_status op_case_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *user) {
  const op_case *c = user;
  (void)n_out;
  out[0] = c->build(t, in[0], n_in > 1 ? in[1] : NULL);
  return GRAFT_OK;
}

static void run_op_case(void **state) {
  const op_case *c = *state;
  int n_in = c->b.rank >= 0 ? 2 : 1;
  graft_tensor *in[2] = {NULL, NULL};
  in[0] = make_tensor(c->a.dt, c->a.rank, c->a.dims, 1.0);
  if (n_in == 2) in[1] = make_tensor(c->b.dt, c->b.rank, c->b.dims, 1.0);
  graft_function *f = tu_function(g_rt, "errcase", op_case_trace, (void *)c, n_in, 1, NULL);
  graft_tensor *out[1] = {NULL};
  graft_status s = graft_function_call(f, n_in, in, 1, out);
  const char *msg = graft_function_errmsg(f);
  if (s != c->want)
    fail_msg("%s: status %s, want %s; message \"%s\"", c->test_name, graft_status_name(s),
             graft_status_name(c->want), msg ? msg : "(null)");
  assert_null(out[0]);
  for (int i = 0; i < 4 && c->sub[i]; i++) tu_assert_msg_has(msg, c->sub[i]);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

/* The message of an op error also names the trace it happened in. */
static void test_graft_matmul__message_names_trace(void **state) {
  (void)state;
  const int64_t sa[] = {256, 784}, sb[] = {100, 10};
  graft_tensor *in[2] = {make_tensor(GRAFT_F32, 2, sa, 0), make_tensor(GRAFT_F32, 2, sb, 0)};
  graft_function *f =
      tu_function(g_rt, "mlp_step", op_case_trace, (void *)&op_cases[0], 2, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 2, in, 1, out), GRAFT_ESHAPE);
  tu_assert_msg_has(graft_function_errmsg(f), "mlp_step");
  tu_assert_msg_has(graft_function_errmsg(f), "inner");
  assert_null(out[0]);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

/* ---- traces: NULL, foreign values, sticky errors, callback failures --- */

typedef struct null_trace_obs {
  int exp_poison, add_poison, matmul_poison, read_poison;
  graft_status status_after;
} null_trace_obs;

static graft_status null_trace_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *user) {
  null_trace_obs *o = user;
  (void)n_in, (void)n_out;
  o->exp_poison = graft_value_is_poison(graft_exp(NULL, in[0]));
  o->add_poison = graft_value_is_poison(graft_add(NULL, in[0], in[0]));
  o->matmul_poison = graft_value_is_poison(graft_matmul(NULL, in[0], in[0], 0));
  o->read_poison = graft_value_is_poison(graft_read(NULL, g_var));
  o->status_after = graft_trace_status(t);
  out[0] = graft_add(t, in[0], in[0]);
  return GRAFT_OK;
}

static void test_graft_add__null_trace(void **state) {
  (void)state;
  /* Outside any trace: poison, no crash. */
  assert_true(graft_value_is_poison(graft_add(NULL, NULL, NULL)));
  assert_true(graft_value_is_poison(graft_scalar(NULL, GRAFT_F32, 1.0)));
  assert_true(graft_value_is_poison(graft_read(NULL, NULL)));
  assert_true(graft_value_is_poison(NULL));
  /* Inside a callback, with valid values of the live trace. */
  null_trace_obs o = {0};
  const int64_t s[] = {2, 2};
  graft_tensor *in[1] = {make_tensor(GRAFT_F32, 2, s, 1.5)};
  graft_function *f = tu_function(g_rt, "nulltrace", null_trace_cb, &o, 1, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_OK);
  assert_true(o.exp_poison);
  assert_true(o.add_poison);
  assert_true(o.matmul_poison);
  assert_true(o.read_poison);
  tu_assert_status(o.status_after, GRAFT_OK);
  const double want[] = {3, 3, 3, 3};
  tu_assert_close(out[0], want, 4, 0, 0);
  graft_tensor_destroy(out[0]);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static graft_value *g_stale; /* a value of function A's trace */

static graft_status keep_value_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  g_stale = in[0];
  out[0] = graft_neg(t, in[0]);
  return GRAFT_OK;
}

static graft_status use_stale_in_op_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                       graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_add(t, in[0], g_stale);
  return GRAFT_OK;
}

static graft_status use_stale_as_output_cb(graft_trace *t, int n_in, graft_value *const *in,
                                           int n_out, graft_value **out, void *user) {
  (void)t, (void)n_in, (void)in, (void)n_out, (void)user;
  out[0] = g_stale;
  return GRAFT_OK;
}

static void test_graft_add__value_from_another_trace(void **state) {
  (void)state;
  const int64_t s[] = {3};
  graft_tensor *in[1] = {make_tensor(GRAFT_F32, 1, s, 2.0)};
  graft_function *fa = tu_function(g_rt, "trace_a", keep_value_cb, NULL, 1, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(fa, 1, in, 1, out), GRAFT_OK);
  graft_tensor_destroy(out[0]);
  out[0] = NULL;
  assert_non_null(g_stale);

  graft_function *fb = tu_function(g_rt, "trace_b", use_stale_in_op_cb, NULL, 1, 1, NULL);
  tu_assert_status(graft_function_call(fb, 1, in, 1, out), GRAFT_EMISUSE);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(fb), "add");
  graft_function_destroy(fb);
  graft_function_destroy(fa);
  graft_tensor_destroy(in[0]);
  g_stale = NULL;
}

static void test_graft_function_call__output_from_another_trace(void **state) {
  (void)state;
  const int64_t s[] = {3};
  graft_tensor *in[1] = {make_tensor(GRAFT_F32, 1, s, 2.0)};
  graft_function *fa = tu_function(g_rt, "trace_a", keep_value_cb, NULL, 1, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(fa, 1, in, 1, out), GRAFT_OK);
  graft_tensor_destroy(out[0]);
  out[0] = NULL;

  graft_function *fb = tu_function(g_rt, "trace_b_out", use_stale_as_output_cb, NULL, 1, 1, NULL);
  tu_assert_status(graft_function_call(fb, 1, in, 1, out), GRAFT_EMISUSE);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(fb), "trace_b_out");
  graft_function_destroy(fb);
  graft_function_destroy(fa);
  graft_tensor_destroy(in[0]);
  g_stale = NULL;
}

typedef struct sticky_obs {
  int mm_poison, add_on_poison_poison, later_fail_poison;
  graft_status status_after_first, status_after_all;
  char msg_after_first[512], msg_after_all[512];
} sticky_obs;

static graft_status sticky_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  sticky_obs *o = user;
  (void)n_in, (void)n_out;
  graft_value *bad = graft_matmul(t, in[0], in[1], 0); /* [2,3] x [4,5] */
  o->mm_poison = graft_value_is_poison(bad);
  o->status_after_first = graft_trace_status(t);
  snprintf(o->msg_after_first, sizeof o->msg_after_first, "%s", graft_trace_errmsg(t));
  graft_value *p = graft_add(t, bad, in[0]);
  o->add_on_poison_poison = graft_value_is_poison(p);
  /* A second, independent failure (reshape count) must not replace the first. */
  const int64_t s[] = {7};
  graft_value *q = graft_reshape(t, in[0], 1, s);
  o->later_fail_poison = graft_value_is_poison(q);
  (void)graft_sqrt(t, graft_cast(t, in[0], GRAFT_I32));
  (void)graft_trace_fail(t, GRAFT_EIO, "late user failure");
  o->status_after_all = graft_trace_status(t);
  snprintf(o->msg_after_all, sizeof o->msg_after_all, "%s", graft_trace_errmsg(t));
  out[0] = graft_relu(t, p);
  return GRAFT_OK;
}

static void test_graft_trace_status__sticky_first_error(void **state) {
  (void)state;
  sticky_obs o;
  memset(&o, 0, sizeof o);
  const int64_t sa[] = {2, 3}, sb[] = {4, 5};
  graft_tensor *in[2] = {make_tensor(GRAFT_F32, 2, sa, 1), make_tensor(GRAFT_F32, 2, sb, 1)};
  graft_function *f = tu_function(g_rt, "sticky", sticky_cb, &o, 2, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 2, in, 1, out), GRAFT_ESHAPE);
  assert_null(out[0]);
  assert_true(o.mm_poison);
  assert_true(o.add_on_poison_poison);
  assert_true(o.later_fail_poison);
  tu_assert_status(o.status_after_first, GRAFT_ESHAPE);
  tu_assert_status(o.status_after_all, GRAFT_ESHAPE);
  tu_assert_msg_has(o.msg_after_first, "matmul");
  assert_string_equal(o.msg_after_all, o.msg_after_first);
  assert_null(strstr(o.msg_after_all, "reshape"));
  assert_null(strstr(o.msg_after_all, "sqrt"));
  assert_null(strstr(o.msg_after_all, "late user failure"));
  tu_assert_msg_has(graft_function_errmsg(f), "matmul");
  tu_assert_msg_has(graft_function_errmsg(f), "[2,3]");
  tu_assert_msg_has(graft_function_errmsg(f), "[4,5]");
  assert_null(strstr(graft_function_errmsg(f), "reshape"));
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

static graft_status user_fail_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_neg(t, in[0]);
  return graft_trace_fail(t, GRAFT_EUNSUPPORTED, "custom check %d failed", 7);
}

static void test_graft_trace_fail__user_recorded_error(void **state) {
  (void)state;
  const int64_t s[] = {2};
  graft_tensor *in[1] = {make_tensor(GRAFT_F64, 1, s, 1)};
  graft_function *f = tu_function(g_rt, "userfail", user_fail_cb, NULL, 1, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_EUNSUPPORTED);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(f), "custom check 7 failed");
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static graft_status return_error_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                    graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_neg(t, in[0]);
  return GRAFT_EIO;
}

static void test_graft_function_call__callback_returns_error(void **state) {
  (void)state;
  const int64_t s[] = {2};
  graft_tensor *in[1] = {make_tensor(GRAFT_F64, 1, s, 1)};
  graft_function *f = tu_function(g_rt, "cb_returns_eio", return_error_cb, NULL, 1, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_EIO);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(f), "cb_returns_eio");
  /* Still fails the same way on the next call: nothing half-cached. */
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_EIO);
  assert_null(out[0]);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static graft_status op_error_and_return_cb(graft_trace *t, int n_in, graft_value *const *in,
                                           int n_out, graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_sqrt(t, in[0]); /* i32: EDTYPE */
  return GRAFT_EIO;
}

static void test_graft_function_call__op_error_beats_callback_status(void **state) {
  (void)state;
  const int64_t s[] = {2};
  graft_tensor *in[1] = {make_tensor(GRAFT_I32, 1, s, 4)};
  graft_function *f = tu_function(g_rt, "both_fail", op_error_and_return_cb, NULL, 1, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_EDTYPE);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(f), "sqrt");
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static graft_status leave_output_null_cb(graft_trace *t, int n_in, graft_value *const *in,
                                         int n_out, graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_neg(t, in[0]);
  /* out[1] left NULL */
  return GRAFT_OK;
}

static void test_graft_function_call__callback_leaves_output_null(void **state) {
  (void)state;
  const int64_t s[] = {2};
  graft_tensor *in[1] = {make_tensor(GRAFT_F32, 1, s, 1)};
  graft_function *f = tu_function(g_rt, "half_done", leave_output_null_cb, NULL, 1, 2, NULL);
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_status(graft_function_call(f, 1, in, 2, out), GRAFT_EINVAL);
  assert_null(out[0]);
  assert_null(out[1]);
  tu_assert_msg_has(graft_function_errmsg(f), "half_done");
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

typedef struct reentry {
  graft_function *self;
  graft_tensor *x;
  graft_status inner;
  graft_tensor *inner_out;
} reentry;

static graft_status reentrant_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  reentry *r = user;
  graft_tensor *ins[1] = {r->x};
  r->inner_out = NULL;
  r->inner = graft_function_call(r->self, 1, ins, 1, &r->inner_out);
  out[0] = graft_neg(t, in[0]);
  return GRAFT_OK;
}

/* A call of f from inside f's own trace callback is a concurrent use of
 * one handle: GRAFT_EMISUSE, no deadlock, and the outer call goes on. */
static void test_graft_function_call__reentrant_from_own_callback(void **state) {
  (void)state;
  const int64_t s[] = {2};
  reentry r = {NULL, make_tensor(GRAFT_F64, 1, s, 3.0), GRAFT_OK, NULL};
  r.self = tu_function(g_rt, "reentrant", reentrant_cb, &r, 1, 1, NULL);
  graft_tensor *in[1] = {r.x};
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(r.self, 1, in, 1, out), GRAFT_OK);
  tu_assert_status(r.inner, GRAFT_EMISUSE);
  assert_null(r.inner_out);
  const double want[] = {-3, -3};
  tu_assert_close(out[0], want, 2, 0, 0);
  assert_int_equal(graft_function_trace_count(r.self), 1);
  graft_tensor_destroy(out[0]);
  graft_function_destroy(r.self);
  graft_tensor_destroy(r.x);
}

/* ---- graft_function_create ------------------------------------------- */

static graft_status neg_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_neg(t, in[0]);
  return GRAFT_OK;
}

static graft_status add1_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_add(t, in[0], graft_scalar(t, graft_value_dtype(in[0]), 1.0));
  return GRAFT_OK;
}

static void expect_create_fails(graft_runtime *rt, const graft_function_desc *d, graft_status want) {
  graft_function *f = SENTINEL_FUNCTION;
  tu_assert_status(graft_function_create(rt, d, &f), want);
  assert_null(f);
}

static void test_graft_function_create__null_desc(void **state) {
  (void)state;
  expect_create_fails(g_rt, NULL, GRAFT_EINVAL);
}

static void test_graft_function_create__null_trace_callback(void **state) {
  (void)state;
  graft_function_desc d = {.name = "nocb", .trace = NULL, .n_inputs = 1, .n_outputs = 1};
  expect_create_fails(g_rt, &d, GRAFT_EINVAL);
}

static void test_graft_function_create__zero_outputs(void **state) {
  (void)state;
  graft_function_desc d = {.name = "noout", .trace = neg_cb, .n_inputs = 1, .n_outputs = 0};
  expect_create_fails(g_rt, &d, GRAFT_EINVAL);
}

static void test_graft_function_create__negative_inputs(void **state) {
  (void)state;
  graft_function_desc d = {.name = "negin", .trace = neg_cb, .n_inputs = -1, .n_outputs = 1};
  expect_create_fails(g_rt, &d, GRAFT_EINVAL);
}

static void test_graft_function_create__negative_outputs(void **state) {
  (void)state;
  graft_function_desc d = {.name = "negout", .trace = neg_cb, .n_inputs = 1, .n_outputs = -2};
  expect_create_fails(g_rt, &d, GRAFT_EINVAL);
}

static void test_graft_function_create__negative_cache_capacity(void **state) {
  (void)state;
  graft_function_desc d = {.name = "negcap", .trace = neg_cb, .n_inputs = 1, .n_outputs = 1,
                           .cache_capacity = -1};
  expect_create_fails(g_rt, &d, GRAFT_EINVAL);
}

static void test_graft_function_create__signature_count_mismatch(void **state) {
  (void)state;
  const graft_dtype dts[] = {GRAFT_F32};
  const int ranks[] = {1};
  const int64_t s0[] = {-1};
  const int64_t *const shapes[] = {s0};
  graft_signature sig = {.n = 1, .dtypes = dts, .ranks = ranks, .shapes = shapes};
  graft_function_desc d = {.name = "sig2", .trace = neg_cb, .n_inputs = 2, .n_outputs = 1,
                           .signature = &sig};
  expect_create_fails(g_rt, &d, GRAFT_EINVAL);
}

static void test_graft_function_create__signature_bad_dim(void **state) {
  (void)state;
  const graft_dtype dts[] = {GRAFT_F32};
  const int ranks[] = {2};
  const int64_t s0[] = {3, -2};
  const int64_t *const shapes[] = {s0};
  graft_signature sig = {.n = 1, .dtypes = dts, .ranks = ranks, .shapes = shapes};
  graft_function_desc d = {.name = "sigdim", .trace = neg_cb, .n_inputs = 1, .n_outputs = 1,
                           .signature = &sig};
  expect_create_fails(g_rt, &d, GRAFT_EINVAL);
}

static void test_graft_function_create__signature_bad_rank(void **state) {
  (void)state;
  const graft_dtype dts[] = {GRAFT_F32};
  const int ranks[] = {GRAFT_MAX_RANK + 1};
  const int64_t s0[GRAFT_MAX_RANK + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  const int64_t *const shapes[] = {s0};
  graft_signature sig = {.n = 1, .dtypes = dts, .ranks = ranks, .shapes = shapes};
  graft_function_desc d = {.name = "sigrank", .trace = neg_cb, .n_inputs = 1, .n_outputs = 1,
                           .signature = &sig};
  expect_create_fails(g_rt, &d, GRAFT_EINVAL);
}

static void test_graft_function_create__null_runtime_and_out(void **state) {
  (void)state;
  graft_function_desc d = {.name = "ok", .trace = neg_cb, .n_inputs = 1, .n_outputs = 1};
  expect_create_fails(NULL, &d, GRAFT_EINVAL);
  tu_assert_status(graft_function_create(g_rt, &d, NULL), GRAFT_EINVAL);
}

/* ---- graft_function_call argument checks ----------------------------- */

static void test_graft_function_call__wrong_input_count(void **state) {
  (void)state;
  const int64_t s[] = {2, 3};
  graft_tensor *in[2] = {make_tensor(GRAFT_F32, 2, s, 1), make_tensor(GRAFT_F32, 2, s, 1)};
  graft_function *f = tu_function(g_rt, "count_in", add1_cb, NULL, 1, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 2, in, 1, out), GRAFT_EINVAL);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(f), "count_in");
  tu_assert_status(graft_function_call(f, 0, NULL, 1, out), GRAFT_EINVAL);
  assert_null(out[0]);
  assert_int_equal(graft_function_trace_count(f), 0);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

static void test_graft_function_call__wrong_output_count(void **state) {
  (void)state;
  const int64_t s[] = {2, 3};
  graft_tensor *in[1] = {make_tensor(GRAFT_F32, 2, s, 1)};
  graft_function *f = tu_function(g_rt, "count_out", add1_cb, NULL, 1, 1, NULL);
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_status(graft_function_call(f, 1, in, 2, out), GRAFT_EINVAL);
  assert_null(out[0]);
  assert_null(out[1]);
  tu_assert_msg_has(graft_function_errmsg(f), "count_out");
  tu_assert_status(graft_function_call(f, 1, in, 0, NULL), GRAFT_EINVAL);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static void test_graft_function_call__null_input_tensor(void **state) {
  (void)state;
  graft_function *f = tu_function(g_rt, "null_in", add1_cb, NULL, 1, 1, NULL);
  graft_tensor *in[1] = {NULL};
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_EINVAL);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(f), "null_in");
  tu_assert_status(graft_function_call(f, 1, NULL, 1, out), GRAFT_EINVAL);
  assert_null(out[0]);
  tu_assert_status(graft_function_call(NULL, 1, in, 1, out), GRAFT_EINVAL);
  graft_function_destroy(f);
}

static void test_graft_function_call__null_output_array(void **state) {
  (void)state;
  const int64_t s[] = {2};
  graft_tensor *in[1] = {make_tensor(GRAFT_F32, 1, s, 1)};
  graft_function *f = tu_function(g_rt, "null_outs", add1_cb, NULL, 1, 1, NULL);
  tu_assert_status(graft_function_call(f, 1, in, 1, NULL), GRAFT_EINVAL);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static graft_signature g_sig_f32_batch4; /* f32 [-1,4] */
static const graft_dtype g_sig_dts[] = {GRAFT_F32};
static const int g_sig_ranks[] = {2};
static const int64_t g_sig_s0[] = {-1, 4};
static const int64_t *const g_sig_shapes[] = {g_sig_s0};

static void expect_signature_reject(graft_dtype dt, int rank, const int64_t *shape, graft_status want) {
  graft_function *f = tu_function(g_rt, "sigcheck", add1_cb, NULL, 1, 1, &g_sig_f32_batch4);
  graft_tensor *in[1] = {make_tensor(dt, rank, shape, 1)};
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 1, in, 1, out), want);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(f), "sigcheck");
  assert_int_equal(graft_function_trace_count(f), 0);
  /* A matching input still works afterwards. */
  const int64_t ok[] = {3, 4};
  graft_tensor *good[1] = {make_tensor(GRAFT_F32, 2, ok, 2)};
  tu_assert_status(graft_function_call(f, 1, good, 1, out), GRAFT_OK);
  assert_non_null(out[0]);
  assert_string_equal(graft_function_errmsg(f), "");
  const double want_v[12] = {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
  tu_assert_close(out[0], want_v, 12, 0, 0);
  graft_tensor_destroy(out[0]);
  graft_tensor_destroy(good[0]);
  graft_tensor_destroy(in[0]);
  graft_function_destroy(f);
}

static void test_graft_function_call__input_dtype_differs_from_signature(void **state) {
  (void)state;
  const int64_t s[] = {3, 4};
  expect_signature_reject(GRAFT_F64, 2, s, GRAFT_EDTYPE);
}

static void test_graft_function_call__input_shape_differs_from_signature(void **state) {
  (void)state;
  const int64_t s[] = {3, 5};
  expect_signature_reject(GRAFT_F32, 2, s, GRAFT_ESHAPE);
}

static void test_graft_function_call__input_rank_differs_from_signature(void **state) {
  (void)state;
  const int64_t s[] = {4};
  expect_signature_reject(GRAFT_F32, 1, s, GRAFT_ESHAPE);
}

static void check_prealloc_reject(graft_dtype out_dt, int out_rank, const int64_t *out_shape,
                                  graft_status want) {
  const int64_t s[] = {2, 3};
  graft_tensor *in[1] = {make_tensor(GRAFT_F32, 2, s, 1)};
  graft_function *f = tu_function(g_rt, "prealloc", add1_cb, NULL, 1, 1, NULL);
  graft_tensor *o = make_tensor(out_dt, out_rank, out_shape, 7.0);
  graft_tensor *out[1] = {o};
  tu_assert_status(graft_function_call(f, 1, in, 1, out), want);
  assert_ptr_equal(out[0], o);
  tu_assert_msg_has(graft_function_errmsg(f), "prealloc");
  /* The caller's tensor is left exactly as it was. */
  assert_int_equal(graft_tensor_dtype(o), out_dt);
  assert_int_equal(graft_tensor_rank(o), out_rank);
  for (int i = 0; i < out_rank; i++) assert_int_equal(graft_tensor_shape(o)[i], out_shape[i]);
  for (int64_t i = 0; i < graft_tensor_numel(o); i++) assert_true(tu_get(o, i) == 7.0);
  /* The function is still usable. */
  graft_tensor *fresh[1] = {NULL};
  tu_assert_status(graft_function_call(f, 1, in, 1, fresh), GRAFT_OK);
  const double want_v[] = {2, 2, 2, 2, 2, 2};
  tu_assert_close(fresh[0], want_v, 6, 0, 0);
  graft_tensor_destroy(fresh[0]);
  graft_tensor_destroy(o);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static void test_graft_function_call__preallocated_output_wrong_shape(void **state) {
  (void)state;
  const int64_t s[] = {3, 2};
  check_prealloc_reject(GRAFT_F32, 2, s, GRAFT_ESHAPE);
}

static void test_graft_function_call__preallocated_output_wrong_rank(void **state) {
  (void)state;
  const int64_t s[] = {6};
  check_prealloc_reject(GRAFT_F32, 1, s, GRAFT_ESHAPE);
}

static void test_graft_function_call__preallocated_output_wrong_dtype(void **state) {
  (void)state;
  const int64_t s[] = {2, 3};
  check_prealloc_reject(GRAFT_F64, 2, s, GRAFT_EDTYPE);
}

static void test_graft_function_errmsg__cleared_after_success(void **state) {
  (void)state;
  const int64_t s[] = {2};
  graft_tensor *in[1] = {make_tensor(GRAFT_F32, 1, s, 1)};
  graft_function *f = tu_function(g_rt, "clears", add1_cb, NULL, 1, 1, NULL);
  assert_string_equal(graft_function_errmsg(f), "");
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 0, NULL, 1, out), GRAFT_EINVAL);
  assert_true(strlen(graft_function_errmsg(f)) > 0);
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_OK);
  assert_string_equal(graft_function_errmsg(f), "");
  graft_tensor_destroy(out[0]);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static void test_graft_function_write_dot__before_trace(void **state) {
  (void)state;
  graft_function *f = tu_function(g_rt, "untraced", add1_cb, NULL, 1, 1, NULL);
  FILE *fp = tmpfile();
  assert_non_null(fp);
  tu_assert_status(graft_function_write_dot(f, fp), GRAFT_EMISUSE);
  tu_assert_status(graft_function_write_dot(NULL, fp), GRAFT_EINVAL);
  fclose(fp);
  graft_plan_stats st;
  tu_assert_status(graft_function_stats(f, &st), GRAFT_EMISUSE);
  tu_assert_status(graft_function_stats(f, NULL), GRAFT_EINVAL);
  graft_function_destroy(f);
}

/* ---- runtime time errors inside the graph ----------------------------- */

static graft_status xent_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_softmax_cross_entropy(t, in[0], in[1]);
  return GRAFT_OK;
}

static void check_bad_label(int32_t bad) {
  const int64_t sl[] = {4, 3}, sy[] = {4};
  graft_tensor *in[2] = {make_tensor(GRAFT_F32, 2, sl, 0.25), make_tensor(GRAFT_I32, 1, sy, 1)};
  ((int32_t *)graft_tensor_data(in[1]))[2] = bad;
  graft_function *f = tu_function(g_rt, "xent_labels", xent_cb, NULL, 2, 1, NULL);
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 2, in, 1, out), GRAFT_EINVAL);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(f), "softmax_cross_entropy");
  /* Fixing the label makes the same plan succeed: the runtime and function survive. */
  ((int32_t *)graft_tensor_data(in[1]))[2] = 2;
  tu_assert_status(graft_function_call(f, 2, in, 1, out), GRAFT_OK);
  const double want = log(3.0);
  tu_assert_close(out[0], &want, 1, 1e-6, 1e-6);
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_tensor_destroy(out[0]);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

static void test_graft_softmax_cross_entropy__label_equal_to_classes(void **state) {
  (void)state;
  check_bad_label(3);
}

static void test_graft_softmax_cross_entropy__negative_label(void **state) {
  (void)state;
  check_bad_label(-1);
}

/* ---- tensors ---------------------------------------------------------- */

static void test_graft_tensor_create__negative_dim(void **state) {
  (void)state;
  const int64_t s[] = {2, -1};
  graft_tensor *t = SENTINEL_TENSOR;
  tu_assert_status(graft_tensor_create(GRAFT_F32, 2, s, &t), GRAFT_EINVAL);
  assert_null(t);
}

static void test_graft_tensor_create__rank_above_max(void **state) {
  (void)state;
  const int64_t s[GRAFT_MAX_RANK + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  graft_tensor *t = SENTINEL_TENSOR;
  tu_assert_status(graft_tensor_create(GRAFT_F32, GRAFT_MAX_RANK + 1, s, &t), GRAFT_EINVAL);
  assert_null(t);
  t = SENTINEL_TENSOR;
  tu_assert_status(graft_tensor_create(GRAFT_F32, -1, s, &t), GRAFT_EINVAL);
  assert_null(t);
}

static void test_graft_tensor_create__bad_dtype(void **state) {
  (void)state;
  const int64_t s[] = {2};
  graft_tensor *t = SENTINEL_TENSOR;
  tu_assert_status(graft_tensor_create((graft_dtype)3, 1, s, &t), GRAFT_EDTYPE);
  assert_null(t);
  t = SENTINEL_TENSOR;
  tu_assert_status(graft_tensor_create((graft_dtype)-1, 1, s, &t), GRAFT_EDTYPE);
  assert_null(t);
  assert_int_equal(graft_dtype_size((graft_dtype)3), 0);
  assert_string_equal(graft_dtype_name((graft_dtype)3), "?");
}

static void test_graft_tensor_create__null_out_and_shape(void **state) {
  (void)state;
  const int64_t s[] = {2};
  tu_assert_status(graft_tensor_create(GRAFT_F32, 1, s, NULL), GRAFT_EINVAL);
  graft_tensor *t = SENTINEL_TENSOR;
  tu_assert_status(graft_tensor_create(GRAFT_F32, 2, NULL, &t), GRAFT_EINVAL);
  assert_null(t);
}

static void test_graft_tensor_create__overflowing_size(void **state) {
  (void)state;
  const int64_t s[] = {INT64_C(1) << 40, INT64_C(1) << 40};
  graft_tensor *t = SENTINEL_TENSOR;
  graft_status st = graft_tensor_create(GRAFT_F64, 2, s, &t);
  /* 2^80 elements: refused as invalid or as unallocatable, never wrapped around. */
  if (st != GRAFT_EINVAL && st != GRAFT_ENOMEM)
    fail_msg("status %s, want GRAFT_EINVAL or GRAFT_ENOMEM", graft_status_name(st));
  assert_null(t);
}

static void test_graft_tensor_wrap__null_data_nonzero_size(void **state) {
  (void)state;
  const int64_t s[] = {2, 3};
  graft_tensor *t = SENTINEL_TENSOR;
  tu_assert_status(graft_tensor_wrap(GRAFT_F32, 2, s, NULL, &t), GRAFT_EINVAL);
  assert_null(t);
  /* Zero elements: NULL data is allowed. */
  const int64_t z[] = {0, 3};
  t = NULL;
  tu_assert_status(graft_tensor_wrap(GRAFT_F32, 2, z, NULL, &t), GRAFT_OK);
  assert_non_null(t);
  assert_int_equal(graft_tensor_numel(t), 0);
  graft_tensor_destroy(t);
  /* Bad dtype and negative dim are refused as in create. */
  float buf[6];
  t = SENTINEL_TENSOR;
  tu_assert_status(graft_tensor_wrap((graft_dtype)9, 2, s, buf, &t), GRAFT_EDTYPE);
  assert_null(t);
  const int64_t neg[] = {-2, 3};
  t = SENTINEL_TENSOR;
  tu_assert_status(graft_tensor_wrap(GRAFT_F32, 2, neg, buf, &t), GRAFT_EINVAL);
  assert_null(t);
}

/* ---- runtime configuration ------------------------------------------- */

typedef struct env_case {
  const char *test_name;
  const char *var, *value;
  const char *sub; /* besides the variable name; NULL: none */
  graft_status want;
} env_case;

static const env_case env_cases[] = {
    {"test_graft_runtime_create__env_num_threads_zero", "GRAFT_NUM_THREADS", "0", NULL, GRAFT_EINVAL},
    {"test_graft_runtime_create__env_num_threads_not_a_number", "GRAFT_NUM_THREADS", "abc", NULL, GRAFT_EINVAL},
    {"test_graft_runtime_create__env_num_threads_negative", "GRAFT_NUM_THREADS", "-3", NULL, GRAFT_EINVAL},
    {"test_graft_runtime_create__env_num_threads_trailing_junk", "GRAFT_NUM_THREADS", "4x", NULL, GRAFT_EINVAL},
    {"test_graft_runtime_create__env_num_threads_empty", "GRAFT_NUM_THREADS", "", NULL, GRAFT_EINVAL},
    {"test_graft_runtime_create__env_sched_unknown", "GRAFT_SCHED", "fast", "seq", GRAFT_EINVAL},
    {"test_graft_runtime_create__env_partition_unknown", "GRAFT_PARTITION", "socket", "numa", GRAFT_EINVAL},
    {"test_graft_runtime_create__env_bind_not_boolean", "GRAFT_BIND", "maybe", "true", GRAFT_EINVAL},
    {"test_graft_runtime_create__env_grain_zero", "GRAFT_GRAIN", "0", NULL, GRAFT_EINVAL},
    {"test_graft_runtime_create__env_grain_negative", "GRAFT_GRAIN", "-10", NULL, GRAFT_EINVAL},
    {"test_graft_runtime_create__env_memory_unknown", "GRAFT_MEMORY", "serial", "lanes:N", GRAFT_EINVAL},
    {"test_graft_runtime_create__env_memory_lanes_zero", "GRAFT_MEMORY", "lanes:0", "1..4096", GRAFT_EINVAL},
    {"test_graft_runtime_create__env_memory_lanes_empty", "GRAFT_MEMORY", "lanes:", "parallel", GRAFT_EINVAL},
    {"test_graft_runtime_create__env_memory_lanes_too_many", "GRAFT_MEMORY", "lanes:5000", "GRAFT_MEMORY", GRAFT_EINVAL},
    {"test_graft_runtime_create__env_topology_garbage", "GRAFT_TOPOLOGY", "garbage", NULL, GRAFT_EINVAL},
    {"test_graft_runtime_create__env_display_env_unknown", "GRAFT_DISPLAY_ENV", "loud", "verbose", GRAFT_EINVAL},
    {"test_graft_runtime_create__env_topology_xml_missing", "GRAFT_TOPOLOGY",
     "xml:/nonexistent/graft-test/topo.xml", "/nonexistent/graft-test/topo.xml", GRAFT_EIO},
};
#define N_ENV_CASES ((int)TU_N_OF(env_cases))

static void run_env_case(void **state) {
  const env_case *c = *state;
  const char *old = getenv(c->var);
  char *saved = old ? strdup(old) : NULL;
  assert_int_equal(setenv(c->var, c->value, 1), 0);

  graft_runtime *rt = SENTINEL_RUNTIME;
  graft_status s1 = graft_runtime_create(NULL, &rt);
  graft_runtime *rt1 = rt;
  char err[512];
  memset(err, 0, sizeof err);
  rt = SENTINEL_RUNTIME;
  graft_status s2 = graft_runtime_create_ex(NULL, &rt, err, sizeof err);
  graft_runtime *rt2 = rt;

  if (saved) {
    setenv(c->var, saved, 1);
    free(saved);
  } else {
    unsetenv(c->var);
  }
  if (s1 == GRAFT_OK) graft_runtime_destroy(rt1);
  if (s2 == GRAFT_OK) graft_runtime_destroy(rt2);

  graft_status want = c->want;
  tu_assert_status(s1, want);
  assert_null(rt1);
  tu_assert_status(s2, want);
  assert_null(rt2);
  tu_assert_msg_has(err, c->var);
  if (c->sub) tu_assert_msg_has(err, c->sub);
}

typedef struct opts_case {
  const char *test_name;
  graft_runtime_opts opts;
  graft_status want;
  const char *sub;
} opts_case;

static const opts_case opts_cases[] = {
    {"test_graft_runtime_create__opts_num_threads_negative", {.num_threads = -1}, GRAFT_EINVAL,
     "num_threads"},
    {"test_graft_runtime_create__opts_sched_unknown", {.sched = "x"}, GRAFT_EINVAL, "sched"},
    {"test_graft_runtime_create__opts_partition_unknown", {.partition = "socket"}, GRAFT_EINVAL,
     "partition"},
    {"test_graft_runtime_create__opts_grain_negative", {.grain = -1}, GRAFT_EINVAL, "grain"},
    {"test_graft_runtime_create__opts_bind_out_of_range", {.bind = 2}, GRAFT_EINVAL, "bind"},
    {"test_graft_runtime_create__opts_topology_garbage", {.topology = "garbage"}, GRAFT_EINVAL,
     "topology"},
    {"test_graft_runtime_create__opts_topology_xml_missing",
     {.topology = "xml:/nonexistent/graft-test/topo.xml"}, GRAFT_EIO, "topo"},
};
#define N_OPTS_CASES ((int)TU_N_OF(opts_cases))

static void run_opts_case(void **state) {
  const opts_case *c = *state;
  graft_runtime *rt = SENTINEL_RUNTIME;
  graft_status s1 = graft_runtime_create(&c->opts, &rt);
  if (s1 == GRAFT_OK) graft_runtime_destroy(rt);
  tu_assert_status(s1, c->want);
  assert_null(rt);
  char err[512];
  memset(err, 0, sizeof err);
  rt = SENTINEL_RUNTIME;
  graft_status s2 = graft_runtime_create_ex(&c->opts, &rt, err, sizeof err);
  if (s2 == GRAFT_OK) graft_runtime_destroy(rt);
  tu_assert_status(s2, c->want);
  assert_null(rt);
  assert_msg_has_ci(err, c->sub);
  /* The value came from opts, not from the environment: the message must
   * not send the user to a GRAFT_* variable they never set. */
  if (strstr(err, "GRAFT_") != NULL)
    fail_msg("message \"%s\" blames an environment variable for an opts field", err);
}

static void test_graft_runtime_create_ex__errbuf_truncated(void **state) {
  (void)state;
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.sched = "definitely-not-a-scheduler";
  char buf[16];
  memset(buf, 'Z', sizeof buf);
  graft_runtime *rt = SENTINEL_RUNTIME;
  tu_assert_status(graft_runtime_create_ex(&o, &rt, buf, 8), GRAFT_EINVAL);
  assert_null(rt);
  assert_true(memchr(buf, '\0', 8) != NULL);
  for (int i = 8; i < 16; i++) assert_int_equal(buf[i], 'Z');
  /* No buffer at all is fine too. */
  rt = SENTINEL_RUNTIME;
  tu_assert_status(graft_runtime_create_ex(&o, &rt, NULL, 0), GRAFT_EINVAL);
  assert_null(rt);
}

static void test_graft_runtime_create__null_out(void **state) {
  (void)state;
  tu_assert_status(graft_runtime_create(NULL, NULL), GRAFT_EINVAL);
}

/* ---- variables -------------------------------------------------------- */

static void test_graft_variable_create__negative_dim(void **state) {
  (void)state;
  const int64_t s[] = {3, -4};
  graft_variable *v = SENTINEL_VARIABLE;
  tu_assert_status(graft_variable_create(NULL, "neg", GRAFT_F32, 2, s, NULL, 0, &v), GRAFT_EINVAL);
  assert_null(v);
}

static void test_graft_variable_create__bad_rank_dtype_out(void **state) {
  (void)state;
  const int64_t s[GRAFT_MAX_RANK + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  graft_variable *v = SENTINEL_VARIABLE;
  tu_assert_status(graft_variable_create(NULL, "r9", GRAFT_F32, GRAFT_MAX_RANK + 1, s, NULL, 0, &v),
                GRAFT_EINVAL);
  assert_null(v);
  v = SENTINEL_VARIABLE;
  tu_assert_status(graft_variable_create(NULL, "dt", (graft_dtype)5, 1, s, NULL, 0, &v),
                   GRAFT_EDTYPE);
  assert_null(v);
  tu_assert_status(graft_variable_create(NULL, "noout", GRAFT_F32, 1, s, NULL, 0, NULL),
                   GRAFT_EINVAL);
}

static void test_graft_variable_set__mismatch(void **state) {
  (void)state;
  const float init[] = {1, 2, 3};
  const int64_t s3[] = {3}, s4[] = {4};
  graft_variable *v = NULL;
  tu_assert_status(graft_variable_create(NULL, "setme", GRAFT_F32, 1, s3, init, 0, &v), GRAFT_OK);
  graft_tensor *wrong_shape = make_tensor(GRAFT_F32, 1, s4, 9);
  graft_tensor *wrong_dtype = make_tensor(GRAFT_F64, 1, s3, 9);
  tu_assert_status(graft_variable_set(v, wrong_shape), GRAFT_ESHAPE);
  tu_assert_status(graft_variable_set(v, wrong_dtype), GRAFT_EDTYPE);
  tu_assert_status(graft_variable_set(v, NULL), GRAFT_EINVAL);
  tu_assert_status(graft_variable_set(NULL, wrong_shape), GRAFT_EINVAL);
  const double want[] = {1, 2, 3};
  tu_assert_close(graft_variable_value(v), want, 3, 0, 0);
  graft_tensor_destroy(wrong_shape);
  graft_tensor_destroy(wrong_dtype);
  graft_variable_destroy(v);
}

static graft_status read_var_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = graft_add(t, in[0], graft_read(t, (graft_variable *)user));
  return GRAFT_OK;
}

static void test_graft_function_call__variable_destroyed(void **state) {
  (void)state;
  const double init[] = {1, 2};
  const int64_t s[] = {2};
  graft_variable *v = NULL;
  tu_assert_status(graft_variable_create(NULL, "doomed_var", GRAFT_F64, 1, s, init, 0, &v),
                   GRAFT_OK);
  graft_function *f = tu_function(g_rt, "uses_doomed", read_var_cb, v, 1, 1, NULL);
  graft_tensor *in[1] = {make_tensor(GRAFT_F64, 1, s, 10)};
  graft_tensor *out[1] = {NULL};
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_OK);
  const double want[] = {11, 12};
  tu_assert_close(out[0], want, 2, 0, 0);
  graft_tensor_destroy(out[0]);
  out[0] = NULL;

  graft_variable_destroy(v);
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_EMISUSE);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(f), "doomed_var");
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

/* ---- statuses and NULL destroys -------------------------------------- */

static void test_graft_status_str__every_code_distinct(void **state) {
  (void)state;
  static const graft_status codes[] = {
#define CODE_(name, num, msg) GRAFT_##name,
      GRAFT_STATUS_MAP(CODE_)
#undef CODE_
  };
  static const char *const names[] = {
#define NAME_(name, num, msg) "GRAFT_" #name,
      GRAFT_STATUS_MAP(NAME_)
#undef NAME_
  };
  const int n = (int)TU_N_OF(codes);
  assert_int_equal(n, 11);
  for (int i = 0; i < n; i++) {
    const char *s = graft_status_str(codes[i]), *nm = graft_status_name(codes[i]);
    assert_non_null(s);
    assert_non_null(nm);
    assert_true(strlen(s) > 0);
    assert_string_equal(nm, names[i]);
    for (int j = 0; j < i; j++) {
      assert_string_not_equal(s, graft_status_str(codes[j]));
      assert_string_not_equal(nm, graft_status_name(codes[j]));
    }
  }
  assert_string_equal(graft_status_str(GRAFT_ENOMEM), "out of memory");
  /* Codes outside the list still give a string. */
  assert_non_null(graft_status_str((graft_status)-99));
  assert_non_null(graft_status_name((graft_status)-99));
  assert_non_null(graft_status_str((graft_status)5));
  assert_non_null(graft_status_name((graft_status)5));
}

static void test_graft_destroy__null_is_noop(void **state) {
  (void)state;
  graft_tensor_destroy(NULL);
  graft_function_destroy(NULL);
  graft_runtime_destroy(NULL);
  graft_variable_destroy(NULL);
}

/* ---- main ------------------------------------------------------------- */

static int group_setup(void **state) {
  tu_group_setup(state);
  const int64_t s[] = {3};
  if (graft_variable_create(NULL, "err_var", GRAFT_F32, 1, s, NULL, 0, &g_var) != GRAFT_OK) return -1;
  g_sig_f32_batch4.n = 1;
  g_sig_f32_batch4.dtypes = g_sig_dts;
  g_sig_f32_batch4.ranks = g_sig_ranks;
  g_sig_f32_batch4.shapes = g_sig_shapes;
  return 0;
}

static int group_teardown(void **state) {
  graft_variable_destroy(g_var);
  return tu_group_teardown(state);
}

static const struct CMUnitTest fixed_tests[] = {
    cmocka_unit_test(test_graft_matmul__message_names_trace),
    cmocka_unit_test(test_graft_add__null_trace),
    cmocka_unit_test(test_graft_add__value_from_another_trace),
    cmocka_unit_test(test_graft_function_call__output_from_another_trace),
    cmocka_unit_test(test_graft_trace_status__sticky_first_error),
    cmocka_unit_test(test_graft_trace_fail__user_recorded_error),
    cmocka_unit_test(test_graft_function_call__callback_returns_error),
    cmocka_unit_test(test_graft_function_call__op_error_beats_callback_status),
    cmocka_unit_test(test_graft_function_call__callback_leaves_output_null),
    cmocka_unit_test(test_graft_function_call__reentrant_from_own_callback),
    cmocka_unit_test(test_graft_function_create__null_desc),
    cmocka_unit_test(test_graft_function_create__null_trace_callback),
    cmocka_unit_test(test_graft_function_create__zero_outputs),
    cmocka_unit_test(test_graft_function_create__negative_inputs),
    cmocka_unit_test(test_graft_function_create__negative_outputs),
    cmocka_unit_test(test_graft_function_create__negative_cache_capacity),
    cmocka_unit_test(test_graft_function_create__signature_count_mismatch),
    cmocka_unit_test(test_graft_function_create__signature_bad_dim),
    cmocka_unit_test(test_graft_function_create__signature_bad_rank),
    cmocka_unit_test(test_graft_function_create__null_runtime_and_out),
    cmocka_unit_test(test_graft_function_call__wrong_input_count),
    cmocka_unit_test(test_graft_function_call__wrong_output_count),
    cmocka_unit_test(test_graft_function_call__null_input_tensor),
    cmocka_unit_test(test_graft_function_call__null_output_array),
    cmocka_unit_test(test_graft_function_call__input_dtype_differs_from_signature),
    cmocka_unit_test(test_graft_function_call__input_shape_differs_from_signature),
    cmocka_unit_test(test_graft_function_call__input_rank_differs_from_signature),
    cmocka_unit_test(test_graft_function_call__preallocated_output_wrong_shape),
    cmocka_unit_test(test_graft_function_call__preallocated_output_wrong_rank),
    cmocka_unit_test(test_graft_function_call__preallocated_output_wrong_dtype),
    cmocka_unit_test(test_graft_function_errmsg__cleared_after_success),
    cmocka_unit_test(test_graft_function_write_dot__before_trace),
    cmocka_unit_test(test_graft_softmax_cross_entropy__label_equal_to_classes),
    cmocka_unit_test(test_graft_softmax_cross_entropy__negative_label),
    cmocka_unit_test(test_graft_tensor_create__negative_dim),
    cmocka_unit_test(test_graft_tensor_create__rank_above_max),
    cmocka_unit_test(test_graft_tensor_create__bad_dtype),
    cmocka_unit_test(test_graft_tensor_create__null_out_and_shape),
    cmocka_unit_test(test_graft_tensor_create__overflowing_size),
    cmocka_unit_test(test_graft_tensor_wrap__null_data_nonzero_size),
    cmocka_unit_test(test_graft_runtime_create_ex__errbuf_truncated),
    cmocka_unit_test(test_graft_runtime_create__null_out),
    cmocka_unit_test(test_graft_variable_create__negative_dim),
    cmocka_unit_test(test_graft_variable_create__bad_rank_dtype_out),
    cmocka_unit_test(test_graft_variable_set__mismatch),
    cmocka_unit_test(test_graft_function_call__variable_destroyed),
    cmocka_unit_test(test_graft_status_str__every_code_distinct),
    cmocka_unit_test(test_graft_destroy__null_is_noop),
};
#define N_FIXED ((int)TU_N_OF(fixed_tests))

int main(void) {
  struct CMUnitTest
      all[TU_N_OF(op_cases) + TU_N_OF(env_cases) + TU_N_OF(opts_cases) + TU_N_OF(fixed_tests)];
  int k = 0;
  for (int i = 0; i < N_OP_CASES; i++) {
    struct CMUnitTest u = {op_cases[i].test_name, run_op_case, NULL, NULL, (void *)&op_cases[i]};
    all[k++] = u;
  }
  for (int i = 0; i < N_ENV_CASES; i++) {
    struct CMUnitTest u = {env_cases[i].test_name, run_env_case, NULL, NULL, (void *)&env_cases[i]};
    all[k++] = u;
  }
  for (int i = 0; i < N_OPTS_CASES; i++) {
    struct CMUnitTest u = {opts_cases[i].test_name, run_opts_case, NULL, NULL, (void *)&opts_cases[i]};
    all[k++] = u;
  }
  for (int i = 0; i < N_FIXED; i++) all[k++] = fixed_tests[i];
  return cmocka_run_group_tests_name("graph/errors", all, group_setup, group_teardown);
}
