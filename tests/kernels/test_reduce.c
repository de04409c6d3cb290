/* Reductions (reduce_sum, reduce_mean, reduce_max, reduce_prod, logsumexp)
 * against a naive double-precision oracle, over every axis combination of a
 * rank-3 tensor, plus empty inputs, output shapes and argument errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

TU_RUNTIME_GROUP();

enum { OP_SUM, OP_MEAN, OP_MAX, OP_PROD, OP_LSE, OP_COUNT };

typedef graft_value *(*reduce_fn)(graft_trace *, graft_value *, int, const int *, int);

static const struct reduce_op {
  const char *name;
  reduce_fn fn;
  int int_ok; /* accepts i32 */
} k_ops[OP_COUNT] = {
    [OP_SUM] = {"reduce_sum", graft_reduce_sum, 1},
    [OP_MEAN] = {"reduce_mean", graft_reduce_mean, 0},
    [OP_MAX] = {"reduce_max", graft_reduce_max, 1},
    [OP_PROD] = {"reduce_prod", graft_reduce_prod, 1},
    [OP_LSE] = {"logsumexp", graft_logsumexp, 0},
};

static const graft_dtype k_dtypes[] = {GRAFT_F32, GRAFT_F64, GRAFT_I32};

typedef struct reduce_param {
  int op;
  int n_axes;
  int axes[GRAFT_MAX_RANK];
  int keepdims;
} reduce_param;

static graft_status trace_reduce(graft_trace *t, int n_in, graft_value *const *in,
                                 int n_out, graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  const reduce_param *p = user;
  out[0] = k_ops[p->op].fn(t, in[0], p->n_axes, p->n_axes ? p->axes : NULL, p->keepdims);
  return GRAFT_OK;
}

/* ---- local helpers ---------------------------------------------------- */

static double rtol_of(graft_dtype dt) {
  return dt == GRAFT_F32 ? 1e-5 : dt == GRAFT_F64 ? 1e-13 : 0.0;
}

static void describe(char *buf, size_t len, const reduce_param *p, graft_dtype dt) {
  int w = snprintf(buf, len, "%s %s axes=[", k_ops[p->op].name, graft_dtype_name(dt));
  for (int i = 0; i < p->n_axes && w > 0 && (size_t)w < len; i++)
    w += snprintf(buf + w, len - (size_t)w, i ? ",%d" : "%d", p->axes[i]);
  if (w > 0 && (size_t)w < len)
    snprintf(buf + w, len - (size_t)w, "] keepdims=%d", p->keepdims);
}

/* Naive reduction of x over the axes in mask (bit i = axis i), in double.
 * want[] receives the result in the keepdims layout (which has the same flat
 * order as the squeezed one); returns its element count. */
static int64_t reference_reduce(int op, const graft_tensor *x, unsigned mask, double *want) {
  int r = graft_tensor_rank(x);
  const int64_t *s = graft_tensor_shape(x);
  int64_t os[GRAFT_MAX_RANK], n_out = 1, count = 1;
  for (int i = 0; i < r; i++) {
    int red = (mask >> i) & 1u;
    os[i] = red ? 1 : s[i];
    n_out *= os[i];
    if (red) count *= s[i];
  }
  double init = op == OP_PROD ? 1.0 : (op == OP_MAX || op == OP_LSE) ? -INFINITY : 0.0;
  for (int64_t j = 0; j < n_out; j++) want[j] = init;

  int64_t n = graft_tensor_numel(x);
  double *sums = calloc((size_t)n_out + 1, sizeof(double));
  assert_non_null(sums);
  for (int pass = 0; pass < (op == OP_LSE ? 2 : 1); pass++) {
    int64_t idx[GRAFT_MAX_RANK] = {0};
    for (int64_t e = 0; e < n; e++) {
      int64_t o = 0;
      for (int i = 0; i < r; i++) o = o * os[i] + (((mask >> i) & 1u) ? 0 : idx[i]);
      double v = tu_get(x, e);
      switch (op) {
      case OP_SUM:
      case OP_MEAN: want[o] += v; break;
      case OP_PROD: want[o] *= v; break;
      case OP_MAX: if (v > want[o]) want[o] = v; break;
      case OP_LSE:
        if (pass == 0) {
          if (v > want[o]) want[o] = v;
        } else {
          sums[o] += exp(v - want[o]);
        }
        break;
      }
      for (int i = r - 1; i >= 0; i--) {
        if (++idx[i] < s[i]) break;
        idx[i] = 0;
      }
    }
  }
  for (int64_t j = 0; j < n_out; j++) {
    if (op == OP_MEAN) want[j] /= (double)count; /* 0 / 0 = NaN for empty */
    if (op == OP_LSE) want[j] = isinf(want[j]) ? want[j] : want[j] + log(sums[j]);
  }
  free(sums);
  return n_out;
}

/* Input data per op: positive near 1 where cancellation or overflow would
 * blur a relative comparison; for i32 prod, +-1 with a few 2s so that no
 * product leaves int32. */
static graft_tensor *make_input(tu_rng *r, int op, graft_dtype dt, int rank,
                                const int64_t *shape) {
  if (dt == GRAFT_I32 && op == OP_PROD) {
    graft_tensor *t = NULL;
    assert_int_equal(graft_tensor_create(dt, rank, shape, &t), GRAFT_OK);
    int32_t *d = graft_tensor_data(t);
    for (int64_t i = 0; i < graft_tensor_numel(t); i++)
      d[i] = (i % 7 == 0) ? 2 : ((tu_next(r) & 1u) ? 1 : -1);
    return t;
  }
  if (dt == GRAFT_I32) return tu_tensor_rand(r, dt, rank, shape, -50, 50);
  if (op == OP_MAX) return tu_tensor_rand(r, dt, rank, shape, -2.0, 2.0);
  return tu_tensor_rand(r, dt, rank, shape, 0.5, 1.5);
}

/* Run one reduction of x and compare with the oracle (shape, dtype, values). */
static void check_one(const reduce_param *p, graft_tensor *x, graft_dtype dt) {
  char ctx[160], msg[512];
  describe(ctx, sizeof ctx, p, dt);
  int r = graft_tensor_rank(x);
  const int64_t *s = graft_tensor_shape(x);

  unsigned mask = 0;
  if (p->n_axes == 0) mask = (1u << r) - 1u;
  for (int i = 0; i < p->n_axes; i++) mask |= 1u << (p->axes[i] < 0 ? p->axes[i] + r : p->axes[i]);

  int64_t want_dims[GRAFT_MAX_RANK];
  int want_rank = 0;
  for (int i = 0; i < r; i++) {
    if (!((mask >> i) & 1u)) want_dims[want_rank++] = s[i];
    else if (p->keepdims) want_dims[want_rank++] = 1;
  }

  int64_t n_alloc = 1;
  for (int i = 0; i < r; i++) n_alloc *= ((mask >> i) & 1u) ? 1 : s[i];
  double *want = malloc(sizeof(double) * ((size_t)n_alloc + 1));
  assert_non_null(want);
  int64_t n_want = reference_reduce(p->op, x, mask, want);

  graft_tensor *out = NULL;
  tu_assert_run_ok(tu_run(g_rt, trace_reduce, (void *)p, 1, &x, 1, &out, msg), ctx, msg);
  tu_assert_tensor(out, dt, want_rank, want_dims, ctx);
  tu_assert_values(out, want, n_want, rtol_of(dt), ctx);
  graft_tensor_destroy(out);
  free(want);
}

/* Every axis set of a rank-3 tensor: n_axes = 0, and each non-empty subset
 * written three ways (positive ascending, negative descending, mixed signs);
 * each with keepdims 0 and 1. */
static void check_every_axis_combo(int op) {
  static const int64_t shape[3] = {3, 4, 5};
  tu_rng rng = {0x5eed0000u + (uint64_t)op};
  for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
    graft_dtype dt = k_dtypes[d];
    if (dt == GRAFT_I32 && !k_ops[op].int_ok) continue;
    graft_tensor *x = make_input(&rng, op, dt, 3, shape);
    for (int keep = 0; keep <= 1; keep++) {
      reduce_param p = {.op = op, .n_axes = 0, .keepdims = keep};
      check_one(&p, x, dt);
      for (unsigned mask = 1; mask < 8; mask++) {
        for (int enc = 0; enc < 3; enc++) {
          p.n_axes = 0;
          for (int a = 0; a < 3; a++) {
            if (!((mask >> a) & 1u)) continue;
            int v = enc == 0 ? a : enc == 1 ? a - 3 : ((p.n_axes & 1) ? a - 3 : a);
            p.axes[p.n_axes++] = v;
          }
          if (enc == 1) /* descending */
            for (int i = 0; i < p.n_axes / 2; i++) {
              int tmp = p.axes[i];
              p.axes[i] = p.axes[p.n_axes - 1 - i];
              p.axes[p.n_axes - 1 - i] = tmp;
            }
          check_one(&p, x, dt);
        }
      }
    }
    graft_tensor_destroy(x);
  }
}

static void test_reduce_sum__every_axis_combo(void **state) {
  (void)state;
  check_every_axis_combo(OP_SUM);
}
static void test_reduce_mean__every_axis_combo(void **state) {
  (void)state;
  check_every_axis_combo(OP_MEAN);
}
static void test_reduce_max__every_axis_combo(void **state) {
  (void)state;
  check_every_axis_combo(OP_MAX);
}
static void test_reduce_prod__every_axis_combo(void **state) {
  (void)state;
  check_every_axis_combo(OP_PROD);
}
static void test_logsumexp__every_axis_combo(void **state) {
  (void)state;
  check_every_axis_combo(OP_LSE);
}

/* ---- sums of contiguous runs ------------------------------------------- */

/* The order reduce.c documents for a sum or mean whose reduced elements are
 * one contiguous run: element i into partial i % 16 (in double), then the
 * partials pairwise ((p0 + p1) + (p2 + p3)) + ...  Pinned bitwise, with
 * data whose sequential sum rounds differently, so a kernel that went back
 * to one chain (or another order) fails here. */
static double lane_sum(const graft_tensor *x, int64_t first, int64_t n) {
  double a[16] = {0};
  for (int64_t i = 0; i < n; i++) a[i % 16] += tu_get(x, first + i);
  for (int w = 1; w < 16; w *= 2)
    for (int i = 0; i < 16; i += 2 * w) a[i] += a[i + w];
  return a[0];
}

static void test_reduce_sum__contiguous_runs_in_lanes(void **state) {
  (void)state;
  /* {rows, run}: the trailing axis reduced (rows outputs), and all of it */
  static const int64_t shapes[][2] = {{3, 1037}, {1, 16}, {2, 15}, {5, 33}};
  tu_rng rng = {0x1a7e5u};
  int differs = 0; /* cases where one chain would give other bits */
  for (size_t d = 0; d < 2; d++)
    for (size_t c = 0; c < TU_N_OF(shapes); c++) {
      graft_dtype dt = k_dtypes[d];
      graft_tensor *x = tu_tensor_rand(&rng, dt, 2, shapes[c], -1.0, 1.0);
      for (int64_t i = 0; i < graft_tensor_numel(x); i += 7) /* magnitudes apart */
        tu_set(x, i, tu_get(x, i) * (dt == GRAFT_F64 ? 1e9 : 1e4));
      for (int op = OP_SUM; op <= OP_MEAN; op++)
        for (int all = 0; all <= 1; all++) {
          reduce_param p = {.op = op, .n_axes = all ? 0 : 1, .axes = {1}};
          char msg[512];
          graft_tensor *out = NULL;
          tu_assert_run_ok(tu_run(g_rt, trace_reduce, &p, 1, &x, 1, &out, msg), k_ops[op].name, msg);
          int64_t n_out = all ? 1 : shapes[c][0], run = graft_tensor_numel(x) / n_out;
          for (int64_t o = 0; o < n_out; o++) {
            double want = lane_sum(x, o * run, run), chain = 0.0;
            for (int64_t i = 0; i < run; i++) chain += tu_get(x, o * run + i);
            if (op == OP_MEAN) want /= (double)run, chain /= (double)run;
            if (dt == GRAFT_F32) want = (float)want, chain = (float)chain;
            double got = tu_get(out, o);
            if (memcmp(&got, &want, sizeof got) != 0)
              fail_msg("%s %s [%lld, %lld] %s output %lld: %.17g, want %.17g (16 lanes)",
                       k_ops[op].name, graft_dtype_name(dt), (long long)shapes[c][0],
                       (long long)shapes[c][1], all ? "all axes" : "axis 1", (long long)o, got,
                       want);
            differs += got != chain;
          }
          graft_tensor_destroy(out);
        }
      graft_tensor_destroy(x);
    }
  assert_true(differs > 0);
}

/* A sum or mean over leading axes ([R, O] -> [O], a bias gradient) adds each
 * column's R elements in row order into one double: the loop built for SSE2
 * and AVX2 (reduce.c, outer_sum) must give the bits of that scalar chain, on
 * column counts that are not multiples of a vector's lanes and over the
 * 256-column blocks the kernel sweeps.  With no rows, sums are 0 and means
 * NaN, also from a wrapped tensor with no data (NULL: a pointer the sweep
 * must not offset; clang's UBSan found that in fuzz_trace). */
static void test_reduce_sum__leading_block_in_row_order(void **state) {
  (void)state;
  static const int64_t shapes[][2] = {{37, 1003}, {300, 5}, {7, 257}, {1, 9}, {0, 9}};
  tu_rng rng = {0x0b1a5u};
  for (size_t d = 0; d < 2; d++)
    for (size_t c = 0; c < TU_N_OF(shapes); c++) {
      graft_dtype dt = k_dtypes[d];
      const int64_t R = shapes[c][0], O = shapes[c][1];
      graft_tensor *x = NULL;
      if (R == 0)
        tu_assert_status(graft_tensor_wrap(dt, 2, shapes[c], NULL, &x), GRAFT_OK);
      else
        x = tu_tensor_rand(&rng, dt, 2, shapes[c], -1.0, 1.0);
      for (int64_t i = 0; i < graft_tensor_numel(x); i += 5) /* magnitudes apart */
        tu_set(x, i, tu_get(x, i) * (dt == GRAFT_F64 ? 1e9 : 1e4));
      for (int op = OP_SUM; op <= OP_MEAN; op++) {
        reduce_param p = {.op = op, .n_axes = 1, .axes = {0}};
        char msg[512];
        graft_tensor *out = NULL;
        tu_assert_run_ok(tu_run(g_rt, trace_reduce, &p, 1, &x, 1, &out, msg), k_ops[op].name, msg);
        for (int64_t o = 0; o < O; o++) {
          double want = 0.0;
          for (int64_t i = 0; i < R; i++) want += tu_get(x, i * O + o);
          if (op == OP_MEAN) want /= (double)R;
          if (dt == GRAFT_F32) want = (float)want;
          double got = tu_get(out, o);
          if (R == 0 && op == OP_MEAN ? !isnan(got) : memcmp(&got, &want, sizeof got) != 0)
            fail_msg("%s %s [%lld, %lld] axis 0, output %lld: %.17g, want %.17g (row order)",
                     k_ops[op].name, graft_dtype_name(dt), (long long)R, (long long)O, (long long)o,
                     got, want);
        }
        graft_tensor_destroy(out);
      }
      graft_tensor_destroy(x);
    }
}

/* A NaN result is C's NAN, bit for bit, whatever NaNs went in: here a
 * negative NaN, a NaN with another payload and inf - inf in one group, on
 * seq and on ws with a grain of 4 (split reductions combine blocks), for
 * every float reduction, dtype and layout (all axes, rows, columns). */
static void test_reduce__nan_results_are_canonical(void **state) {
  (void)state;
  graft_runtime *rts[2] = {tu_runtime_of("seq", 1, 0), tu_runtime_of("ws", 2, 4)};
  const double odd = -(double)NAN, canon = NAN;
  union { double d; uint64_t u; } pay = {.d = NAN};
  pay.u |= 0x1234; /* a quiet NaN with its own payload */
  static const int64_t shape[2] = {4, 40};
  for (int r = 0; r < 2; r++)
    for (size_t d = 0; d < 2; d++)
      for (int op = OP_SUM; op < OP_COUNT; op++)
        for (int axis = -1; axis < 2; axis++) {
          double v[160];
          for (int i = 0; i < 160; i++) v[i] = (double)(i % 5) - 2.0;
          graft_tensor *x = tu_tensor_from(k_dtypes[d], 2, shape, v);
          for (int row = 0; row < 4; row++) { /* a NaN, +inf and -inf in every row */
            tu_set(x, row * 40 + 3, row % 2 ? odd : pay.d);
            tu_set(x, row * 40 + 11, INFINITY);
            tu_set(x, row * 40 + 29, -INFINITY);
          }
          for (int64_t j = 0; j < 40; j++) tu_set(x, 2 * 40 + j, j % 2 ? odd : pay.d);
          reduce_param p = {.op = op, .n_axes = axis < 0 ? 0 : 1, .axes = {axis < 0 ? 0 : axis}};
          char msg[512];
          graft_tensor *out = NULL;
          tu_assert_run_ok(tu_run(rts[r], trace_reduce, &p, 1, &x, 1, &out, msg), k_ops[op].name, msg);
          for (int64_t o = 0; o < graft_tensor_numel(out); o++) {
            double got = tu_get(out, o);
            if (isnan(got) && memcmp(&got, &canon, sizeof got) != 0)
              fail_msg("%s %s axis %d output %lld (%s): a NaN other than NAN", k_ops[op].name,
                       graft_dtype_name(k_dtypes[d]), axis, (long long)o, r ? "ws" : "seq");
            /* every row and (through row 2) every column holds a NaN */
            if (!isnan(got))
              fail_msg("%s %s axis %d output %lld: %.17g, want NaN", k_ops[op].name,
                       graft_dtype_name(k_dtypes[d]), axis, (long long)o, got);
          }
          graft_tensor_destroy(out);
          graft_tensor_destroy(x);
        }
  for (int r = 0; r < 2; r++) graft_runtime_destroy(rts[r]);
}

/* ---- rank-0 input ----------------------------------------------------- */

static void test_reduce__rank0_input_all_axes(void **state) {
  (void)state;
  tu_rng rng = {77};
  for (int op = 0; op < OP_COUNT; op++)
    for (size_t d = 0; d < 2; d++) {
      graft_tensor *x = make_input(&rng, op, k_dtypes[d], 0, NULL);
      for (int keep = 0; keep <= 1; keep++) {
        reduce_param p = {.op = op, .n_axes = 0, .keepdims = keep};
        check_one(&p, x, k_dtypes[d]);
      }
      graft_tensor_destroy(x);
    }
}

/* ---- output shapes (literal table) ------------------------------------ */

static void test_reduce__output_shapes(void **state) {
  (void)state;
  static const struct {
    int n_axes;
    int axes[3];
    int keepdims;
    int rank;
    int64_t dims[3];
  } cases[] = {
      {0, {0}, 0, 0, {0}},          {0, {0}, 1, 3, {1, 1, 1}},
      {1, {0}, 0, 2, {3, 4}},       {1, {-1}, 1, 3, {2, 3, 1}},
      {2, {0, 2}, 0, 1, {3}},       {2, {2, 0}, 1, 3, {1, 3, 1}},
      {2, {1, -1}, 0, 1, {2}},      {3, {-3, 1, 2}, 0, 0, {0}},
      {1, {-2}, 0, 2, {2, 4}},      {3, {2, 1, 0}, 1, 3, {1, 1, 1}},
  };
  static const int64_t shape[3] = {2, 3, 4};
  tu_rng rng = {99};
  graft_tensor *x = tu_tensor_rand(&rng, GRAFT_F64, 3, shape, 0.5, 1.5);
  for (int op = 0; op < OP_COUNT; op++)
    for (size_t c = 0; c < TU_N_OF(cases); c++) {
      reduce_param p = {.op = op, .n_axes = cases[c].n_axes, .keepdims = cases[c].keepdims};
      memcpy(p.axes, cases[c].axes, sizeof cases[c].axes);
      char ctx[160], msg[512];
      describe(ctx, sizeof ctx, &p, GRAFT_F64);
      graft_tensor *out = NULL;
      tu_assert_run_ok(tu_run(g_rt, trace_reduce, &p, 1, &x, 1, &out, msg), ctx, msg);
      tu_assert_shape(out, cases[c].rank, cases[c].dims, ctx);
      graft_tensor_destroy(out);
    }
  graft_tensor_destroy(x);
}

/* ---- zero-size inputs -------------------------------------------------- */

/* Reduce [2,0,3] over the empty axis (and over all axes): every output
 * element is the identity `expect` of the op. */
static void check_empty(int op, double expect) {
  static const int64_t shape[3] = {2, 0, 3};
  static const reduce_param specs[] = {
      {.n_axes = 1, .axes = {1}, .keepdims = 0},
      {.n_axes = 1, .axes = {-2}, .keepdims = 1},
      {.n_axes = 2, .axes = {0, 1}, .keepdims = 0},
      {.n_axes = 0, .keepdims = 0},
      {.n_axes = 0, .keepdims = 1},
  };
  static const int want_rank[] = {2, 3, 1, 0, 3};
  static const int64_t want_dims[][3] = {{2, 3}, {2, 1, 3}, {3}, {0}, {1, 1, 1}};
  tu_rng rng = {5};
  for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
    graft_dtype dt = k_dtypes[d];
    if (dt == GRAFT_I32 && (!k_ops[op].int_ok || isinf(expect))) continue;
    graft_tensor *x = make_input(&rng, op, dt, 3, shape);
    for (size_t c = 0; c < TU_N_OF(specs); c++) {
      reduce_param p = specs[c];
      p.op = op;
      char ctx[160], msg[512];
      describe(ctx, sizeof ctx, &p, dt);
      graft_tensor *out = NULL;
      tu_assert_run_ok(tu_run(g_rt, trace_reduce, &p, 1, &x, 1, &out, msg), ctx, msg);
      tu_assert_shape(out, want_rank[c], want_dims[c], ctx);
      for (int64_t i = 0; i < graft_tensor_numel(out); i++) {
        double g = tu_get(out, i);
        if (!tu_close(g, expect, 0.0, 0.0))
          fail_msg("%s: element %lld: got %.17g want %.17g", ctx, (long long)i, g, expect);
      }
      graft_tensor_destroy(out);
    }
    graft_tensor_destroy(x);
  }
}

static void test_reduce_sum__empty_is_zero(void **state) {
  (void)state;
  check_empty(OP_SUM, 0.0);
}
static void test_reduce_prod__empty_is_one(void **state) {
  (void)state;
  check_empty(OP_PROD, 1.0);
}
static void test_reduce_max__empty_is_neg_inf(void **state) {
  (void)state;
  check_empty(OP_MAX, -INFINITY);
}
static void test_reduce_mean__empty_is_nan(void **state) {
  (void)state;
  check_empty(OP_MEAN, NAN);
}
static void test_logsumexp__empty_is_neg_inf(void **state) {
  (void)state;
  check_empty(OP_LSE, -INFINITY);
}

/* Reducing a non-empty axis of a zero-size tensor gives a zero-size result. */
static void test_reduce__zero_size_output(void **state) {
  (void)state;
  static const int64_t shape[3] = {2, 0, 3};
  tu_rng rng = {6};
  graft_tensor *x = tu_tensor_rand(&rng, GRAFT_F32, 3, shape, 0.5, 1.5);
  for (int op = 0; op < OP_COUNT; op++)
    for (int keep = 0; keep <= 1; keep++) {
      reduce_param p = {.op = op, .n_axes = 1, .axes = {2}, .keepdims = keep};
      char ctx[160], msg[512];
      describe(ctx, sizeof ctx, &p, GRAFT_F32);
      graft_tensor *out = NULL;
      tu_assert_run_ok(tu_run(g_rt, trace_reduce, &p, 1, &x, 1, &out, msg), ctx, msg);
      static const int64_t d0[2] = {2, 0}, d1[3] = {2, 0, 1};
      tu_assert_shape(out, keep ? 3 : 2, keep ? d1 : d0, ctx);
      assert_int_equal(graft_tensor_numel(out), 0);
      graft_tensor_destroy(out);
    }
  graft_tensor_destroy(x);
}

/* ---- errors ------------------------------------------------------------ */

/* Each spec must fail at trace time with `want` and a message naming the
 * op; nothing is allocated into out[]. */
static void check_fails(const reduce_param *specs, size_t n_specs, graft_dtype dt,
                        graft_status want) {
  static const int64_t shape[3] = {2, 3, 4};
  tu_rng rng = {8};
  graft_tensor *x = tu_tensor_rand(&rng, dt, 3, shape, 1, 2);
  for (int op = 0; op < OP_COUNT; op++)
    for (size_t c = 0; c < n_specs; c++) {
      reduce_param p = specs[c];
      p.op = op;
      char ctx[160], msg[512];
      describe(ctx, sizeof ctx, &p, dt);
      graft_tensor *out = NULL;
      graft_status st = tu_run(g_rt, trace_reduce, &p, 1, &x, 1, &out, msg);
      tu_assert_run_fails(st, want, out, msg, k_ops[op].name, ctx);
    }
  graft_tensor_destroy(x);
}

static void test_reduce__duplicate_axis_is_einval(void **state) {
  (void)state;
  static const reduce_param specs[] = {
      {.n_axes = 2, .axes = {1, 1}},
      {.n_axes = 2, .axes = {0, -3}},
      {.n_axes = 3, .axes = {2, 0, -1}, .keepdims = 1},
      {.n_axes = 4, .axes = {0, 1, 2, 0}},
  };
  check_fails(specs, TU_N_OF(specs), GRAFT_F32, GRAFT_EINVAL);
}

static void test_reduce__axis_out_of_range_is_einval(void **state) {
  (void)state;
  static const reduce_param specs[] = {
      {.n_axes = 1, .axes = {3}},
      {.n_axes = 1, .axes = {-4}},
      {.n_axes = 2, .axes = {0, 7}, .keepdims = 1},
      {.n_axes = 1, .axes = {-100}},
  };
  check_fails(specs, TU_N_OF(specs), GRAFT_F64, GRAFT_EINVAL);
}

/* reduce_mean and logsumexp are float-only (ops.h). */
static void test_reduce__i32_mean_and_logsumexp_are_edtype(void **state) {
  (void)state;
  static const int64_t shape[3] = {2, 3, 4};
  tu_rng rng = {9};
  graft_tensor *x = tu_tensor_rand(&rng, GRAFT_I32, 3, shape, -5, 5);
  static const int ops[] = {OP_MEAN, OP_LSE};
  for (size_t i = 0; i < 2; i++) {
    reduce_param p = {.op = ops[i], .n_axes = 1, .axes = {1}};
    char ctx[64], msg[512];
    snprintf(ctx, sizeof ctx, "%s i32", k_ops[ops[i]].name);
    graft_tensor *out = NULL;
    graft_status st = tu_run(g_rt, trace_reduce, &p, 1, &x, 1, &out, msg);
    tu_assert_run_fails(st, GRAFT_EDTYPE, out, msg, k_ops[ops[i]].name, ctx);
  }
  graft_tensor_destroy(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_sum__every_axis_combo),
      cmocka_unit_test(test_reduce_mean__every_axis_combo),
      cmocka_unit_test(test_reduce_max__every_axis_combo),
      cmocka_unit_test(test_reduce_prod__every_axis_combo),
      cmocka_unit_test(test_logsumexp__every_axis_combo),
      cmocka_unit_test(test_reduce_sum__contiguous_runs_in_lanes),
      cmocka_unit_test(test_reduce_sum__leading_block_in_row_order),
      cmocka_unit_test(test_reduce__nan_results_are_canonical),
      cmocka_unit_test(test_reduce__rank0_input_all_axes),
      cmocka_unit_test(test_reduce__output_shapes),
      cmocka_unit_test(test_reduce_sum__empty_is_zero),
      cmocka_unit_test(test_reduce_prod__empty_is_one),
      cmocka_unit_test(test_reduce_max__empty_is_neg_inf),
      cmocka_unit_test(test_reduce_mean__empty_is_nan),
      cmocka_unit_test(test_logsumexp__empty_is_neg_inf),
      cmocka_unit_test(test_reduce__zero_size_output),
      cmocka_unit_test(test_reduce__duplicate_axis_is_einval),
      cmocka_unit_test(test_reduce__axis_out_of_range_is_einval),
      cmocka_unit_test(test_reduce__i32_mean_and_logsumexp_are_edtype),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
