/* softmax, log_softmax and softmax_cross_entropy against naive
 * double-precision oracles: several axes, row sums, large logits (no
 * inf/nan), and the shape / dtype / label errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>

#include "testutil.h"

TU_RUNTIME_GROUP();

static const graft_dtype k_dtypes[] = {GRAFT_F32, GRAFT_F64};

enum { OP_SOFTMAX, OP_LOG_SOFTMAX, OP_XENT };
static const char *const k_names[] = {"softmax", "log_softmax", "softmax_cross_entropy"};

typedef struct nn_param {
  int op;
  int axis;
} nn_param;

static graft_status trace_nn(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  const nn_param *p = user;
  switch (p->op) {
  case OP_SOFTMAX: out[0] = graft_softmax(t, in[0], p->axis); break;
  case OP_LOG_SOFTMAX: out[0] = graft_log_softmax(t, in[0], p->axis); break;
  default: out[0] = graft_softmax_cross_entropy(t, in[0], in[1]); break;
  }
  return GRAFT_OK;
}

/* ---- local helpers ---------------------------------------------------- */

/* Tolerance: rtol relative to the result, plus the rounding the inputs'
 * scale allows (an f32 logit of 1e4 is known only to ~1e-3, so a
 * backward-stable kernel may be off by a few eps * max|x| absolutely in the
 * log domain). */
static double rtol_of(graft_dtype dt) { return dt == GRAFT_F32 ? 1e-5 : 1e-12; }
static double eps_of(graft_dtype dt) { return dt == GRAFT_F32 ? FLT_EPSILON : DBL_EPSILON; }

static double max_abs(const graft_tensor *x) {
  double m = 0.0;
  for (int64_t i = 0; i < graft_tensor_numel(x); i++)
    if (fabs(tu_get(x, i)) > m) m = fabs(tu_get(x, i));
  return m;
}

/* Input data sets. */
enum { DATA_NORMAL, DATA_LARGE_POS, DATA_LARGE_NEG, DATA_WIDE, DATA_COUNT };
static const char *const k_data_names[] = {"normal", "~+1e4", "~-1e4", "[-1e4,1e4]"};

static graft_tensor *make_logits(tu_rng *r, int data, graft_dtype dt, int rank,
                                 const int64_t *shape) {
  switch (data) {
  case DATA_LARGE_POS: return tu_tensor_rand(r, dt, rank, shape, 1e4 - 5.0, 1e4 + 5.0);
  case DATA_LARGE_NEG: return tu_tensor_rand(r, dt, rank, shape, -1e4 - 5.0, -1e4 + 5.0);
  case DATA_WIDE: return tu_tensor_rand(r, dt, rank, shape, -1e4, 1e4);
  default: return tu_tensor_rand(r, dt, rank, shape, -3.0, 3.0);
  }
}

/* ---- softmax / log_softmax -------------------------------------------- */

static const struct sm_case {
  int rank;
  int64_t shape[3];
  int axis;
} k_sm_cases[] = {
    {3, {3, 4, 5}, -1}, {3, {3, 4, 5}, 2}, {3, {3, 4, 5}, 1}, {3, {3, 4, 5}, -2},
    {3, {3, 4, 5}, 0},  {1, {7}, 0},       {2, {4, 6}, -1},   {2, {2, 1}, 1},
};

/* Run op on each case with each dtype, compare with the oracle, check that
 * every output is finite and every row (along the axis) sums to 1. */
static void check_softmax(int op, int data, uint64_t seed) {
  tu_rng rng = {seed};
  for (size_t c = 0; c < TU_N_OF(k_sm_cases); c++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
      const struct sm_case *sc = &k_sm_cases[c];
      graft_dtype dt = k_dtypes[d];
      int ax = sc->axis < 0 ? sc->axis + sc->rank : sc->axis;
      int64_t outer = 1, len = sc->shape[ax], inner = 1;
      for (int i = 0; i < ax; i++) outer *= sc->shape[i];
      for (int i = ax + 1; i < sc->rank; i++) inner *= sc->shape[i];
      char ctx[128];
      snprintf(ctx, sizeof ctx, "%s case %zu (axis %d) %s %s", k_names[op], c, sc->axis,
               graft_dtype_name(dt), k_data_names[data]);

      graft_tensor *x = make_logits(&rng, data, dt, sc->rank, sc->shape);
      nn_param p = {.op = op, .axis = sc->axis};
      graft_tensor *out = NULL;
      char msg[512];
      tu_assert_run_ok(tu_run(g_rt, trace_nn, &p, 1, &x, 1, &out, msg), ctx, msg);
      tu_assert_tensor(out, dt, sc->rank, sc->shape, ctx);

      double rtol = rtol_of(dt), scale = 4.0 * eps_of(dt) * max_abs(x);
      for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
          double m = -INFINITY, s = 0.0, row_sum = 0.0;
          for (int64_t k = 0; k < len; k++) m = fmax(m, tu_get(x, (o * len + k) * inner + in));
          for (int64_t k = 0; k < len; k++) s += exp(tu_get(x, (o * len + k) * inner + in) - m);
          for (int64_t k = 0; k < len; k++) {
            int64_t e = (o * len + k) * inner + in;
            double lsm = tu_get(x, e) - m - log(s), got = tu_get(out, e);
            if (!isfinite(got))
              fail_msg("%s: element %lld is %g", ctx, (long long)e, got);
            int ok;
            if (op == OP_SOFTMAX) {
              double want = exp(lsm);
              ok = fabs(got - want) <= (rtol + scale) * want + (dt == GRAFT_F32 ? 1e-37 : 1e-300);
              row_sum += got;
              if (!ok)
                fail_msg("%s: element %lld: got %.17g want %.17g", ctx, (long long)e, got, want);
            } else {
              ok = fabs(got - lsm) <= rtol * fabs(lsm) + scale + (dt == GRAFT_F32 ? 1e-6 : 1e-13);
              row_sum += exp(got);
              if (!ok)
                fail_msg("%s: element %lld: got %.17g want %.17g", ctx, (long long)e, got, lsm);
            }
          }
          if (fabs(row_sum - 1.0) > rtol * (double)len + scale)
            fail_msg("%s: row (%lld,%lld) sums to %.17g", ctx, (long long)o, (long long)in,
                     row_sum);
        }
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
    }
}

static void test_softmax__reference_and_row_sums(void **state) {
  (void)state;
  check_softmax(OP_SOFTMAX, DATA_NORMAL, 1);
}

static void test_log_softmax__reference_and_row_sums(void **state) {
  (void)state;
  check_softmax(OP_LOG_SOFTMAX, DATA_NORMAL, 2);
}

static void test_softmax__large_logits_stable(void **state) {
  (void)state;
  for (int data = DATA_LARGE_POS; data < DATA_COUNT; data++)
    check_softmax(OP_SOFTMAX, data, 10 + (uint64_t)data);
}

static void test_log_softmax__large_logits_stable(void **state) {
  (void)state;
  for (int data = DATA_LARGE_POS; data < DATA_COUNT; data++)
    check_softmax(OP_LOG_SOFTMAX, data, 20 + (uint64_t)data);
}

static void expect_fail(const nn_param *p, int n_in, graft_tensor **in, graft_status want,
                        const char *ctx, char *msg) {
  graft_tensor *out = NULL;
  graft_status st = tu_run(g_rt, trace_nn, (void *)p, n_in, in, 1, &out, msg);
  tu_assert_run_fails(st, want, out, msg, k_names[p->op], ctx);
}

static void test_softmax__axis_out_of_range_is_einval(void **state) {
  (void)state;
  int64_t s[3] = {2, 3, 4};
  tu_rng rng = {30};
  graft_tensor *x = tu_tensor_rand(&rng, GRAFT_F32, 3, s, -1, 1);
  static const int axes[] = {3, -4, 100};
  char msg[512];
  for (int op = OP_SOFTMAX; op <= OP_LOG_SOFTMAX; op++)
    for (size_t i = 0; i < TU_N_OF(axes); i++) {
      nn_param p = {.op = op, .axis = axes[i]};
      char ctx[64];
      snprintf(ctx, sizeof ctx, "%s axis %d of rank 3", k_names[op], axes[i]);
      expect_fail(&p, 1, &x, GRAFT_EINVAL, ctx, msg);
    }
  graft_tensor_destroy(x);
}

static void test_softmax__i32_is_edtype(void **state) {
  (void)state;
  int64_t s[2] = {2, 3};
  tu_rng rng = {31};
  graft_tensor *x = tu_tensor_rand(&rng, GRAFT_I32, 2, s, -3, 3);
  char msg[512];
  for (int op = OP_SOFTMAX; op <= OP_LOG_SOFTMAX; op++) {
    nn_param p = {.op = op, .axis = -1};
    expect_fail(&p, 1, &x, GRAFT_EDTYPE, k_names[op], msg);
  }
  graft_tensor_destroy(x);
}

/* ---- softmax_cross_entropy -------------------------------------------- */

static graft_tensor *make_labels(int rank, const int64_t *shape, const int32_t *v) {
  graft_tensor *t = NULL;
  assert_int_equal(graft_tensor_create(GRAFT_I32, rank, shape, &t), GRAFT_OK);
  memcpy(graft_tensor_data(t), v, sizeof(int32_t) * (size_t)graft_tensor_numel(t));
  return t;
}

/* Run xent on logits / labels and compare with mean_i lse(x_i) - x_i[l_i]. */
static void check_xent(graft_tensor *logits, graft_tensor *labels, const char *ctx) {
  int64_t n = graft_tensor_shape(logits)[0], c = graft_tensor_shape(logits)[1];
  const int32_t *l = graft_tensor_data(labels);
  double want = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double m = -INFINITY, s = 0.0;
    for (int64_t k = 0; k < c; k++) m = fmax(m, tu_get(logits, i * c + k));
    for (int64_t k = 0; k < c; k++) s += exp(tu_get(logits, i * c + k) - m);
    want += (m - tu_get(logits, i * c + l[i])) + log(s);
  }
  want /= (double)n;

  graft_dtype dt = graft_tensor_dtype(logits);
  graft_tensor *in[2] = {logits, labels}, *out = NULL;
  nn_param p = {.op = OP_XENT};
  char msg[512];
  tu_assert_run_ok(tu_run(g_rt, trace_nn, &p, 2, in, 1, &out, msg), ctx, msg);
  tu_assert_tensor(out, dt, 0, NULL, ctx);
  double got = tu_get(out, 0);
  double tol = rtol_of(dt) * fabs(want) + 4.0 * eps_of(dt) * max_abs(logits) +
               (dt == GRAFT_F32 ? 1e-6 : 1e-13);
  if (!isfinite(got) || !(fabs(got - want) <= tol))
    fail_msg("%s: got %.17g want %.17g", ctx, got, want);
  graft_tensor_destroy(out);
}

static void test_softmax_cross_entropy__mean_matches_reference(void **state) {
  (void)state;
  static const int64_t shapes[][2] = {{6, 5}, {1, 1}, {8, 3}, {1, 10}, {33, 7}};
  tu_rng rng = {40};
  for (size_t c = 0; c < TU_N_OF(shapes); c++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++)
      for (int data = DATA_NORMAL; data < DATA_COUNT; data++) {
        graft_tensor *x = make_logits(&rng, data, k_dtypes[d], 2, shapes[c]);
        graft_tensor *l = tu_tensor_rand(&rng, GRAFT_I32, 1, shapes[c], 0, (double)(shapes[c][1] - 1));
        char ctx[96];
        snprintf(ctx, sizeof ctx, "xent [%lld,%lld] %s %s", (long long)shapes[c][0],
                 (long long)shapes[c][1], graft_dtype_name(k_dtypes[d]), k_data_names[data]);
        check_xent(x, l, ctx);
        graft_tensor_destroy(x);
        graft_tensor_destroy(l);
      }
}

/* A label far below the row max: the loss is ~1e4 per row, still finite. */
static void test_softmax_cross_entropy__large_logits_stable(void **state) {
  (void)state;
  static const double v[6] = {0.0, 1e4, 0.0, -1e4, 0.0, 1e4};
  static const int32_t lv[2] = {0, 0};
  int64_t s[2] = {2, 3}, sl[1] = {2};
  for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
    graft_tensor *x = NULL;
    assert_int_equal(graft_tensor_create(k_dtypes[d], 2, s, &x), GRAFT_OK);
    for (int i = 0; i < 6; i++) {
      if (k_dtypes[d] == GRAFT_F32) ((float *)graft_tensor_data(x))[i] = (float)v[i];
      else ((double *)graft_tensor_data(x))[i] = v[i];
    }
    graft_tensor *l = make_labels(1, sl, lv);
    check_xent(x, l, k_dtypes[d] == GRAFT_F32 ? "xent extreme f32" : "xent extreme f64");
    graft_tensor_destroy(x);
    graft_tensor_destroy(l);
  }
}

/* Labels outside [0, C) fail at run time with EINVAL and a message naming
 * the op and the label; the output stays NULL. */
static void test_softmax_cross_entropy__label_out_of_range_is_einval(void **state) {
  (void)state;
  static const int32_t bad[][3] = {{0, 17, 1}, {-3, 0, 1}, {0, 1, 5}};
  static const char *const shown[] = {"17", "-3", "5"};
  int64_t s[2] = {3, 5}, sl[1] = {3};
  tu_rng rng = {50};
  char msg[512];
  for (size_t d = 0; d < TU_N_OF(k_dtypes); d++)
    for (size_t i = 0; i < TU_N_OF(bad); i++) {
      graft_tensor *in[2] = {tu_tensor_rand(&rng, k_dtypes[d], 2, s, -1, 1),
                             make_labels(1, sl, bad[i])};
      nn_param p = {.op = OP_XENT};
      char ctx[64];
      snprintf(ctx, sizeof ctx, "xent %s label %s of C=5", graft_dtype_name(k_dtypes[d]), shown[i]);
      expect_fail(&p, 2, in, GRAFT_EINVAL, ctx, msg);
      if (!strstr(msg, shown[i]))
        fail_msg("%s: message \"%s\" does not show the label %s", ctx, msg, shown[i]);
      graft_tensor_destroy(in[0]);
      graft_tensor_destroy(in[1]);
    }
}

static void test_softmax_cross_entropy__wrong_dtypes_are_edtype(void **state) {
  (void)state;
  int64_t s[2] = {3, 4}, sl[1] = {3};
  tu_rng rng = {51};
  char msg[512];
  nn_param p = {.op = OP_XENT};
  graft_tensor *in[2];
  static const graft_dtype label_dts[] = {GRAFT_F32, GRAFT_F64};
  for (size_t i = 0; i < TU_N_OF(label_dts); i++) {
    in[0] = tu_tensor_rand(&rng, GRAFT_F32, 2, s, -1, 1);
    in[1] = tu_tensor_rand(&rng, label_dts[i], 1, sl, 0, 3);
    expect_fail(&p, 2, in, GRAFT_EDTYPE, "xent float labels", msg);
    graft_tensor_destroy(in[0]);
    graft_tensor_destroy(in[1]);
  }
  in[0] = tu_tensor_rand(&rng, GRAFT_I32, 2, s, -3, 3);
  in[1] = tu_tensor_rand(&rng, GRAFT_I32, 1, sl, 0, 3);
  expect_fail(&p, 2, in, GRAFT_EDTYPE, "xent i32 logits", msg);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

static void test_softmax_cross_entropy__bad_shapes_are_eshape(void **state) {
  (void)state;
  static const struct {
    const char *name;
    int rx;
    int64_t sx[3];
    int rl;
    int64_t sl[2];
  } cases[] = {
      {"logits rank 3", 3, {2, 3, 4}, 1, {2}},
      {"logits rank 1", 1, {4}, 1, {4}},
      {"batch 4 vs 5", 2, {4, 3}, 1, {5}},
      {"labels rank 2", 2, {4, 3}, 2, {4, 1}},
      {"labels rank 0", 2, {1, 3}, 0, {0}},
  };
  tu_rng rng = {52};
  char msg[512];
  nn_param p = {.op = OP_XENT};
  for (size_t c = 0; c < TU_N_OF(cases); c++) {
    graft_tensor *in[2] = {tu_tensor_rand(&rng, GRAFT_F64, cases[c].rx, cases[c].sx, -1, 1),
                           tu_tensor_rand(&rng, GRAFT_I32, cases[c].rl, cases[c].sl, 0, 0)};
    expect_fail(&p, 2, in, GRAFT_ESHAPE, cases[c].name, msg);
    graft_tensor_destroy(in[0]);
    graft_tensor_destroy(in[1]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_softmax__reference_and_row_sums),
      cmocka_unit_test(test_log_softmax__reference_and_row_sums),
      cmocka_unit_test(test_softmax__large_logits_stable),
      cmocka_unit_test(test_log_softmax__large_logits_stable),
      cmocka_unit_test(test_softmax__axis_out_of_range_is_einval),
      cmocka_unit_test(test_softmax__i32_is_edtype),
      cmocka_unit_test(test_softmax_cross_entropy__mean_matches_reference),
      cmocka_unit_test(test_softmax_cross_entropy__large_logits_stable),
      cmocka_unit_test(test_softmax_cross_entropy__label_out_of_range_is_einval),
      cmocka_unit_test(test_softmax_cross_entropy__wrong_dtypes_are_edtype),
      cmocka_unit_test(test_softmax_cross_entropy__bad_shapes_are_eshape),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
