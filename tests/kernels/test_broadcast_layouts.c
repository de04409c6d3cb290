/* The strided and broadcasting paths of every multi-input elementwise
 * kernel against a plain oracle that reads each operand through NumPy's
 * broadcasting rule (tu_bcast_src).
 *
 * Every binary op (add, sub, mul, div, pow, maximum, minimum, greater,
 * less, equal), where and mul_add, over every combination of operand
 * layouts drawn from a list of shapes that broadcast to the output (a
 * condition [3,1] against values [3,4], [1,4], [4], [], [2,1,4] against
 * [3,1], ...): size-1 dims on either side and in the middle, missing
 * leading dims, scalars, full shapes.  A small output [2,3,4] and a larger
 * one [5,7,9], which ws with a grain of 4 cuts into 16-element tiles that
 * start and end inside rows.  f32, f64 and i32 where the op takes i32;
 * where with every condition dtype.  Results must match the oracle
 * (exactly: each element is one rounding of the same operation) and be
 * bitwise equal between seq and ws. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "kernels/seq_ws.h"
#include "testutil.h"

/* ---- ops ------------------------------------------------------------------------ */

enum op { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MAXIMUM, OP_MINIMUM, OP_GREATER, OP_LESS,
          OP_EQUAL, OP_WHERE, OP_MUL_ADD, OP_COUNT };

static const struct {
  const char *name;
  int n_in;
  int int_ok;
} k_ops[OP_COUNT] = {
    {"add", 2, 1},     {"sub", 2, 1},   {"mul", 2, 1},  {"div", 2, 0},
    {"pow", 2, 0},     {"maximum", 2, 1}, {"minimum", 2, 1}, {"greater", 2, 1},
    {"less", 2, 1},    {"equal", 2, 1}, {"where", 3, 1}, {"mul_add", 3, 0},
};

static graft_status trace_op(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_value *a = in[0], *b = in[1];
  switch (*(const int *)user) {
  case OP_ADD: out[0] = graft_add(t, a, b); break;
  case OP_SUB: out[0] = graft_sub(t, a, b); break;
  case OP_MUL: out[0] = graft_mul(t, a, b); break;
  case OP_DIV: out[0] = graft_div(t, a, b); break;
  case OP_POW: out[0] = graft_pow(t, a, b); break;
  case OP_MAXIMUM: out[0] = graft_maximum(t, a, b); break;
  case OP_MINIMUM: out[0] = graft_minimum(t, a, b); break;
  case OP_GREATER: out[0] = graft_greater(t, a, b); break;
  case OP_LESS: out[0] = graft_less(t, a, b); break;
  case OP_EQUAL: out[0] = graft_equal(t, a, b); break;
  case OP_WHERE: out[0] = graft_where(t, a, b, in[2]); break;
  default: out[0] = graft_mul_add(t, a, b, in[2]); break;
  }
  return graft_trace_status(t);
}

/* The op on one element's operands, in dtype dt (f32: float arithmetic and
 * powf; i32: wrapping arithmetic, as the kernels document). */
static double oracle(int op, graft_dtype dt, const double *x) {
  double a = x[0], b = x[1];
  if (dt == GRAFT_I32) {
    uint32_t ua = (uint32_t)(int32_t)a, ub = (uint32_t)(int32_t)b, u;
    switch (op) {
    case OP_ADD: u = ua + ub; break;
    case OP_SUB: u = ua - ub; break;
    case OP_MUL: u = ua * ub; break;
    case OP_MAXIMUM: return a > b ? a : b;
    case OP_MINIMUM: return a < b ? a : b;
    case OP_GREATER: return a > b;
    case OP_LESS: return a < b;
    case OP_EQUAL: return a == b;
    default: return x[0] != 0 ? x[1] : x[2]; /* where */
    }
    return u <= (uint32_t)INT32_MAX ? (double)u : (double)u - 4294967296.0;
  }
  int f = dt == GRAFT_F32;
  float af = (float)a, bf = (float)b;
  switch (op) {
  case OP_ADD: return f ? (double)(af + bf) : a + b;
  case OP_SUB: return f ? (double)(af - bf) : a - b;
  case OP_MUL: return f ? (double)(af * bf) : a * b;
  case OP_DIV: return f ? (double)(af / bf) : a / b;
  case OP_POW: return f ? (double)powf(af, bf) : pow(a, b);
  case OP_MAXIMUM: return a > b ? a : b;
  case OP_MINIMUM: return a < b ? a : b;
  case OP_GREATER: return a > b;
  case OP_LESS: return a < b;
  case OP_EQUAL: return a == b;
  case OP_WHERE: return x[0] != 0 ? x[1] : x[2];
  default: {
    if (f) {
      float p = af * bf;
      return (double)(p + (float)x[2]);
    }
    double p = a * b;
    return p + x[2];
  }
  }
}

/* ---- layouts --------------------------------------------------------------------------- */

typedef struct shape {
  int rank;
  int64_t d[3];
} shape;

/* Output shapes and the operand shapes that broadcast to each. */
static const struct {
  shape out;
  int n;
  shape in[9];
} k_sets[] = {
    {{3, {2, 3, 4}},
     9,
     {{0, {0}}, {1, {4}}, {2, {3, 1}}, {2, {1, 4}}, {2, {3, 4}}, {3, {2, 1, 4}}, {3, {2, 3, 1}},
      {3, {2, 1, 1}}, {3, {2, 3, 4}}}},
    {{3, {5, 7, 9}},
     6,
     {{0, {0}}, {1, {9}}, {2, {7, 1}}, {3, {5, 1, 9}}, {3, {1, 7, 1}}, {3, {5, 7, 9}}}},
};

/* Operand values: small integers away from 0 for div and pow's exponent,
 * positive bases for pow, a grid with ties for the comparisons, 0/1 and
 * other values for where's condition. */
static graft_tensor *operand(tu_rng *r, int op, int slot, graft_dtype dt, const shape *s) {
  graft_tensor *x = tu_tensor_from(dt, s->rank, s->d, NULL);
  for (int64_t i = 0; i < graft_tensor_numel(x); i++) {
    double v = (double)tu_int(r, -4, 4);
    if (op == OP_DIV && slot == 1 && v == 0) v = 3;
    if (op == OP_POW && slot == 0) v = (double)tu_int(r, 1, 16) / 4.0;
    if (op == OP_POW && slot == 1) v = (double)tu_int(r, -6, 6) / 2.0;
    if (op == OP_WHERE && slot == 0) v = tu_int(r, 0, 2) == 0 ? 0.0 : v;
    if (op != OP_WHERE && dt != GRAFT_I32 && slot == 1) v += 0.5 * (double)tu_int(r, 0, 1);
    tu_set(x, i, v);
  }
  return x;
}

/* An output's dtype, shape and values (exact; NaN where NaN is due). */
typedef struct expect {
  graft_dtype dt;
  const shape *out;
  const double *want;
} expect;

static void check_exact(const graft_tensor *o, const char *where, const void *user) {
  const expect *e = user;
  tu_assert_tensor(o, e->dt, e->out->rank, e->out->d, where);
  for (int64_t k = 0; k < graft_tensor_numel(o); k++) {
    double got = tu_get(o, k);
    if (got != e->want[k] && !(isnan(got) && isnan(e->want[k])))
      fail_msg("%s: element %lld: got %.17g want %.17g", where, (long long)k, got, e->want[k]);
  }
}

/* op over every combination of the set's shapes for its operands. */
static void check_set(int op, graft_dtype dt, graft_dtype cond_dt, size_t set) {
  const shape *out = &k_sets[set].out;
  int n = k_sets[set].n, n_in = k_ops[op].n_in;
  int combos = n_in == 2 ? n * n : n * n * n;
  int64_t n_out = tu_numel(out->rank, out->d);
  double *want = malloc((size_t)n_out * sizeof *want);
  assert_non_null(want);
  tu_rng r = {0xb0ad + 977u * (uint64_t)op + 31u * (uint64_t)dt + (uint64_t)cond_dt};
  for (int cb = 0; cb < combos; cb++) {
    const shape *s[3] = {&k_sets[set].in[cb % n], &k_sets[set].in[cb / n % n],
                         &k_sets[set].in[cb / (n * n) % n]};
    graft_tensor *in[3];
    for (int q = 0; q < n_in; q++)
      in[q] = operand(&r, op, q, op == OP_WHERE && q == 0 ? cond_dt : dt, s[q]);
    /* skip combinations whose output is smaller than the set's (every
     * operand a size-1 broadcast of some dim): their shapes are another
     * test's business */
    int full = 1;
    for (int d = 0; d < out->rank; d++) {
      int64_t m = 1;
      for (int q = 0; q < n_in; q++) {
        int id = d - (out->rank - s[q]->rank);
        if (id >= 0) m = m > s[q]->d[id] ? m : s[q]->d[id];
      }
      full &= m == out->d[d];
    }
    if (!full) {
      tu_destroy_outs(in, n_in);
      continue;
    }
    for (int64_t k = 0; k < n_out; k++) {
      double x[3] = {0, 0, 0};
      for (int q = 0; q < n_in; q++)
        x[q] = tu_get(in[q], tu_bcast_src(out->rank, out->d, k, s[q]->rank, s[q]->d));
      want[k] = oracle(op, dt, x);
    }
    char ctx[192], sh[3][32];
    for (int q = 0; q < n_in; q++) tu_fmt_shape_(sh[q], sizeof sh[q], s[q]->rank, s[q]->d);
    snprintf(ctx, sizeof ctx, "%s %s %s%s%s%s (%s%s)", k_ops[op].name, sh[0], sh[1],
             n_in == 3 ? " " : "", n_in == 3 ? sh[2] : "", "", graft_dtype_name(dt),
             op == OP_WHERE ? (cond_dt == GRAFT_I32   ? ", cond i32"
                               : cond_dt == GRAFT_F32 ? ", cond f32"
                                                      : ", cond f64")
                            : "");
    expect e = {dt, out, want};
    int opv = op;
    sw_run(trace_op, &opv, n_in, in, ctx, check_exact, &e);
    tu_destroy_outs(in, n_in);
  }
  free(want);
}

static void test_binary_ops__every_broadcast_layout(void **state) {
  (void)state;
  for (int op = OP_ADD; op <= OP_EQUAL; op++)
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_I32; dt++) {
      if (dt == GRAFT_I32 && !k_ops[op].int_ok) continue;
      for (size_t set = 0; set < TU_N_OF(k_sets); set++) check_set(op, dt, dt, set);
    }
}

/* The condition in each dtype, the values in each. */
static void test_graft_where__every_broadcast_layout(void **state) {
  (void)state;
  for (graft_dtype cd = GRAFT_F32; cd <= GRAFT_I32; cd++)
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_I32; dt++)
      for (size_t set = 0; set < TU_N_OF(k_sets); set++) check_set(OP_WHERE, dt, cd, set);
}

static void test_graft_mul_add__every_broadcast_layout(void **state) {
  (void)state;
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++)
    for (size_t set = 0; set < TU_N_OF(k_sets); set++) check_set(OP_MUL_ADD, dt, dt, set);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_binary_ops__every_broadcast_layout),
      cmocka_unit_test(test_graft_where__every_broadcast_layout),
      cmocka_unit_test(test_graft_mul_add__every_broadcast_layout),
  };
  return cmocka_run_group_tests(tests, sw_setup, sw_teardown);
}
