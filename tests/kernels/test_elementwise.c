/* Elementwise ops through the public API: every unary and binary op, where,
 * cast and the leaf constructors, each traced into a one-op function, run on
 * a 1-thread sequential runtime and compared element by element with a naive
 * loop computed in double from the same input values.
 *
 * Unary and binary ops are rows of a table (an X-macro list of our own op
 * ids, each naming the graft function, its oracle, its input domain and its
 * tolerances); the cmocka cases are generated from the same lists, so adding
 * an op is one row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "testutil.h"

/* Relative tolerances: ordinary ops, and the loosely specified ones (pow,
 * tan, lgamma, digamma, polygamma). */
#define TOL32 1e-6
#define TOL64 1e-14
#define LOOSE32 1e-5
#define LOOSE64 1e-12

enum i32_mode { I32_NONE, I32_EXACT, I32_REJECT };

TU_RUNTIME_GROUP();

/* ---- small helpers of this file --------------------------------------- */

static tu_rng rng_for(uint64_t salt) {
  tu_rng r = {0x2545F4914F6CDD1Dull ^ ((salt + 1) * 0x9E3779B97F4A7C15ull)};
  if (r.s == 0) r.s = 1;
  return r;
}

/* Random operand; integral snaps floats down to integers so that
 * comparisons see ties; i32 operands of non-integral rows span +-1000. */
static graft_tensor *make_operand(tu_rng *rng, graft_dtype dt, int rank,
                                  const int64_t *shape, double lo, double hi,
                                  int integral) {
  if (dt == GRAFT_I32 && !integral) {
    lo = -1000;
    hi = 1000;
  }
  graft_tensor *t = tu_tensor_rand(rng, dt, rank, shape, lo, hi);
  if (integral && dt != GRAFT_I32)
    for (int64_t i = 0; i < graft_tensor_numel(t); i++) tu_set(t, i, floor(tu_get(t, i)));
  return t;
}

/* ---- digamma / polygamma oracles ------------------------------------- */
/* Independent of any library: the defining series summed directly over
 * many terms in long double, plus a tail (asymptotic expansion for digamma,
 * Euler-Maclaurin integral estimate for polygamma) at z = x + ORACLE_TERMS. */
#define ORACLE_TERMS 2000

static double or_digamma(double x) {
  long double acc = 0.0L;
  for (int k = ORACLE_TERMS - 1; k >= 0; k--) acc += 1.0L / ((long double)x + k);
  long double z = (long double)x + ORACLE_TERMS, z2 = 1.0L / (z * z);
  long double tail =
      logl(z) - 0.5L / z -
      z2 * (1.0L / 12 - z2 * (1.0L / 120 - z2 * (1.0L / 252 - z2 * (1.0L / 240 - z2 / 132))));
  return (double)(tail - acc);
}

static double or_polygamma(int n, double x) {
  long double acc = 0.0L;
  for (int k = ORACLE_TERMS - 1; k >= 0; k--) {
    long double p = 1.0L / ((long double)x + k), q = p;
    for (int j = 0; j < n; j++) q *= p;
    acc += q;
  }
  long double z = (long double)x + ORACLE_TERMS, zn = powl(z, -(long double)n);
  long double m1 = n + 1, m3 = m1 * (n + 2) * (n + 3), m5 = m3 * (n + 4) * (n + 5);
  acc += zn / n + zn / (2 * z) + m1 * zn / (12 * z * z) - m3 * zn / (720 * powl(z, 4)) +
         m5 * zn / (30240 * powl(z, 6));
  long double fact = 1;
  for (int j = 2; j <= n; j++) fact *= j;
  return (double)((n % 2 ? 1 : -1) * fact * acc);
}

/* ---- unary table ------------------------------------------------------ */

typedef graft_value *(*unary_fn)(graft_trace *, graft_value *);

static graft_value *pg1(graft_trace *t, graft_value *x) { return graft_polygamma(t, 1, x); }
static graft_value *pg2(graft_trace *t, graft_value *x) { return graft_polygamma(t, 2, x); }
static graft_value *pg3(graft_trace *t, graft_value *x) { return graft_polygamma(t, 3, x); }

static double or_neg(double x) { return -x; }
static double or_square(double x) { return x * x; }
static double or_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double or_relu(double x) { return x > 0 ? x : 0.0; }
static double or_sign(double x) { return (double)((x > 0) - (x < 0)); }
static double or_lgamma(double x) {
  int sg;
  return lgamma_r(x, &sg);
}
static double or_pg1(double x) { return or_polygamma(1, x); }
static double or_pg2(double x) { return or_polygamma(2, x); }
static double or_pg3(double x) { return or_polygamma(3, x); }
static double or_ident(double x) { return x; }

/* Values placed first in every random input of a row. */
static const double sp_zero[] = {0.0, -0.0};
static const double sp_one[] = {1.0};
static const double sp_tiny[] = {1e-10, -1e-10, 0.0};
static const double sp_exp[] = {0.0, -80.0};
static const double sp_sigmoid[] = {0.0, -30.0, 30.0};
static const double sp_lgamma[] = {1.0, 2.0, 0.5};
#define SP(a) a, (int)(sizeof(a) / sizeof((a)[0]))
#define NOSP NULL, 0

/* X(ID, name, scenario prefix, graft fn, oracle, lo, hi, rtol32, rtol64,
 *   atol (1: outputs cross zero, atol = rtol), i32 mode, specials) */
#define UNARY_OPS(X)                                                                     \
  X(NEG, "neg", "", graft_neg, or_neg, -5, 5, TOL32, TOL64, 0, EXACT, SP(sp_zero))      \
  X(SQUARE, "square", "", graft_square, or_square, -5, 5, TOL32, TOL64, 0, EXACT, NOSP) \
  X(SQRT, "sqrt", "", graft_sqrt, sqrt, 0, 10, TOL32, TOL64, 0, REJECT, SP(sp_zero))    \
  X(EXP, "exp", "", graft_exp, exp, -10, 10, TOL32, TOL64, 0, REJECT, SP(sp_exp))       \
  X(LOG, "log", "", graft_log, log, 0.01, 10, TOL32, TOL64, 0, REJECT, SP(sp_one))      \
  X(LOG1P, "log1p", "", graft_log1p, log1p, -0.9, 10, TOL32, TOL64, 0, REJECT,          \
    SP(sp_tiny))                                                                         \
  X(TANH, "tanh", "", graft_tanh, tanh, -5, 5, TOL32, TOL64, 0, REJECT, SP(sp_tiny))    \
  X(SIGMOID, "sigmoid", "", graft_sigmoid, or_sigmoid, -20, 20, TOL32, TOL64, 0, REJECT, \
    SP(sp_sigmoid))                                                                      \
  X(RELU, "relu", "", graft_relu, or_relu, -5, 5, TOL32, TOL64, 0, REJECT, SP(sp_zero)) \
  X(ABS, "abs", "", graft_abs, fabs, -5, 5, TOL32, TOL64, 0, EXACT, SP(sp_zero))        \
  X(SIGN, "sign", "", graft_sign, or_sign, -5, 5, TOL32, TOL64, 0, EXACT, SP(sp_zero))  \
  X(SIN, "sin", "", graft_sin, sin, -10, 10, TOL32, TOL64, 1, REJECT, SP(sp_tiny))      \
  X(COS, "cos", "", graft_cos, cos, -10, 10, TOL32, TOL64, 1, REJECT, SP(sp_zero))      \
  X(TAN, "tan", "", graft_tan, tan, -1.5, 1.5, LOOSE32, LOOSE64, 1, REJECT, SP(sp_tiny)) \
  X(LGAMMA, "lgamma", "", graft_lgamma, or_lgamma, 0.05, 30, LOOSE32, LOOSE64, 1, REJECT, \
    SP(sp_lgamma))                                                                       \
  X(DIGAMMA, "digamma", "", graft_digamma, or_digamma, 0.05, 20, LOOSE32, LOOSE64, 1,   \
    REJECT, SP(sp_one))                                                                  \
  X(POLYGAMMA1, "polygamma", "n1_", pg1, or_pg1, 0.05, 20, LOOSE32, LOOSE64, 0, REJECT, \
    SP(sp_one))                                                                          \
  X(POLYGAMMA2, "polygamma", "n2_", pg2, or_pg2, 0.05, 20, LOOSE32, LOOSE64, 0, REJECT, \
    SP(sp_one))                                                                          \
  X(POLYGAMMA3, "polygamma", "n3_", pg3, or_pg3, 0.05, 20, LOOSE32, LOOSE64, 0, REJECT, \
    SP(sp_one))                                                                          \
  /* i32 unspecified: ops.h does not list it, the op is an identity */                  \
  X(STOP_GRADIENT, "stop_gradient", "", graft_stop_gradient, or_ident, -5, 5, TOL32,    \
    TOL64, 0, NONE, SP(sp_zero))

enum unary_id {
#define U_ENUM_(ID, ...) U_##ID,
  UNARY_OPS(U_ENUM_)
#undef U_ENUM_
      U_COUNT
};

typedef struct unary_row {
  const char *name; /* the op's public name, expected in its messages */
  unary_fn fn;
  double (*oracle)(double);
  double lo, hi;
  double rtol32, rtol64;
  int atol; /* 1: atol = rtol (the output crosses zero in the domain) */
  enum i32_mode i32;
  const double *specials;
  int n_specials;
} unary_row;

static const unary_row unary_rows[U_COUNT] = {
#define U_ROW_(ID, name, pre, fn, orc, lo, hi, t32, t64, at, i32, sp) \
  [U_##ID] = {name, fn, orc, lo, hi, t32, t64, at, I32_##i32, sp},
    UNARY_OPS(U_ROW_)
#undef U_ROW_
};

typedef struct unary_case {
  enum unary_id op;
  graft_dtype dt;
} unary_case;

static graft_status trace_unary(graft_trace *t, int n_in, graft_value *const *in,
                                int n_out, graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  out[0] = ((const unary_row *)user)->fn(t, in[0]);
  return GRAFT_OK;
}

/* Run row r on x (any shape) and return the output, asserting success,
 * dtype and shape. */
static graft_tensor *run_unary_ok(const unary_row *r, graft_tensor *x) {
  graft_tensor *out = NULL;
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, trace_unary, (void *)r, 1, &x, 1, &out, msg), NULL, msg);
  assert_int_equal(graft_tensor_dtype(out), graft_tensor_dtype(x));
  tu_assert_shape(out, graft_tensor_rank(x), graft_tensor_shape(x), NULL);
  return out;
}

/* out[i] against r's oracle on x[i]. */
static void check_unary(const unary_row *r, const graft_tensor *x, const graft_tensor *out,
                        double rtol, double atol) {
  for (int64_t i = 0; i < graft_tensor_numel(x); i++) {
    double xi = tu_get(x, i), got = tu_get(out, i), want = r->oracle(xi);
    if (!tu_close(got, want, rtol, atol))
      fail_msg("%s(%.17g) [element %lld, %s]: got %.17g want %.17g", r->name, xi,
               (long long)i, graft_dtype_name(graft_tensor_dtype(x)), got, want);
  }
}

static void test_unary_op(void **state) {
  const unary_case *c = *state;
  const unary_row *r = &unary_rows[c->op];
  tu_rng rng = rng_for((uint64_t)c->op * 8 + (uint64_t)c->dt);
  static const int64_t shape[] = {3, 41};
  graft_tensor *x = tu_tensor_rand(&rng, c->dt, 2, shape,
                                   c->dt == GRAFT_I32 ? -1000 : r->lo,
                                   c->dt == GRAFT_I32 ? 1000 : r->hi);
  if (c->dt != GRAFT_I32)
    for (int i = 0; i < r->n_specials; i++) tu_set(x, i, r->specials[i]);

  if (c->dt == GRAFT_I32 && r->i32 == I32_REJECT) {
    graft_tensor *out = NULL;
    char msg[512] = "";
    graft_status s = tu_run(g_rt, trace_unary, (void *)r, 1, &x, 1, &out, msg);
    tu_assert_run_fails(s, GRAFT_EDTYPE, out, msg, r->name, NULL);
    graft_tensor_destroy(x);
    return;
  }
  graft_tensor *out = run_unary_ok(r, x);
  double rtol = c->dt == GRAFT_F32 ? r->rtol32 : c->dt == GRAFT_F64 ? r->rtol64 : 0.0;
  check_unary(r, x, out, rtol, r->atol ? rtol : 0.0);
  graft_tensor_destroy(out);
  graft_tensor_destroy(x);
}

/* lgamma, digamma and polygamma at negative non-integers (well away from
 * the poles). */
static void check_negative_arguments(const enum unary_id *ops, int n_ops) {
  static const double xs[] = {-0.5, -1.25, -1.5, -2.5, -3.75, -4.5};
  static const int64_t shape[] = {6};
  for (int k = 0; k < n_ops; k++) {
    const unary_row *r = &unary_rows[ops[k]];
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
      graft_tensor *x = tu_tensor_from(dt, 1, shape, xs);
      graft_tensor *out = run_unary_ok(r, x);
      double rtol = dt == GRAFT_F32 ? LOOSE32 : LOOSE64;
      check_unary(r, x, out, rtol, rtol);
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
    }
  }
}

static void test_graft_lgamma__negative_non_integer(void **state) {
  (void)state;
  static const enum unary_id ops[] = {U_LGAMMA};
  check_negative_arguments(ops, 1);
}

static void test_graft_digamma__negative_non_integer(void **state) {
  (void)state;
  static const enum unary_id ops[] = {U_DIGAMMA};
  check_negative_arguments(ops, 1);
}

static void test_graft_polygamma__negative_non_integer(void **state) {
  (void)state;
  static const enum unary_id ops[] = {U_POLYGAMMA1, U_POLYGAMMA2, U_POLYGAMMA3};
  check_negative_arguments(ops, 3);
}

/* psi_n(x + 1) - psi_n(x) == (-1)^n n! / x^(n+1) (n = 0: digamma, 1/x).
 * x = k/16 and x + 1 are exact in f32 and f64; a few negatives too. */
static void check_recurrence(const enum unary_id *ops, const int *orders, int n_ops) {
  enum { NPOS = 160, NNEG = 4, N = NPOS + NNEG };
  static const double neg[NNEG] = {-0.5, -1.25, -2.75, -3.5};
  double xs[2 * N];
  for (int i = 0; i < N; i++) {
    xs[i] = i < NPOS ? (i + 1) / 16.0 : neg[i - NPOS];
    xs[N + i] = xs[i] + 1.0;
  }
  static const int64_t shape[] = {2, N};
  for (int k = 0; k < n_ops; k++) {
    const unary_row *r = &unary_rows[ops[k]];
    int n = orders[k];
    double fact = 1;
    for (int j = 2; j <= n; j++) fact *= j;
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
      graft_tensor *x = tu_tensor_from(dt, 2, shape, xs);
      graft_tensor *out = run_unary_ok(r, x);
      double rtol = dt == GRAFT_F32 ? LOOSE32 : LOOSE64;
      for (int i = 0; i < N; i++) {
        double p0 = tu_get(out, i), p1 = tu_get(out, N + i);
        double want = (n % 2 ? -1 : 1) * fact / pow(xs[i], n + 1);
        double scale = fabs(p0) + fabs(p1) + fabs(want);
        if (!(fabs((p1 - p0) - want) <= rtol * scale))
          fail_msg("%s order %d, %s: f(%.17g) - f(%.17g) = %.17g - %.17g = %.17g, want %.17g",
                   r->name, n, graft_dtype_name(dt), xs[N + i], xs[i], p1, p0, p1 - p0, want);
      }
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
    }
  }
}

static void test_graft_digamma__recurrence_identity(void **state) {
  (void)state;
  static const enum unary_id ops[] = {U_DIGAMMA};
  static const int orders[] = {0};
  check_recurrence(ops, orders, 1);
}

static void test_graft_polygamma__recurrence_identity(void **state) {
  (void)state;
  static const enum unary_id ops[] = {U_POLYGAMMA1, U_POLYGAMMA2, U_POLYGAMMA3};
  static const int orders[] = {1, 2, 3};
  check_recurrence(ops, orders, 3);
}

/* Closed forms: digamma(1) = -gamma, digamma(1/2) = -gamma - 2 ln 2,
 * digamma(2) = 1 - gamma, polygamma(1, 1) = pi^2/6, polygamma(1, 1/2) =
 * pi^2/2, polygamma(2, 1) = -2 zeta(3), polygamma(3, 1) = pi^4/15.  The
 * oracles are checked against them too. */
typedef struct known_value {
  enum unary_id op;
  double x, want;
} known_value;

static const known_value known_values[] = {
    {U_DIGAMMA, 1.0, -0.57721566490153286},  {U_DIGAMMA, 0.5, -1.9635100260214235},
    {U_DIGAMMA, 2.0, 0.42278433509846714},   {U_POLYGAMMA1, 1.0, 1.6449340668482264},
    {U_POLYGAMMA1, 0.5, 4.9348022005446793}, {U_POLYGAMMA2, 1.0, -2.4041138063191886},
    {U_POLYGAMMA3, 1.0, 6.4939394022668291},
};

static void check_known_values(int polygamma) {
  static const int64_t shape[] = {1};
  for (size_t i = 0; i < TU_N_OF(known_values); i++) {
    const known_value *kv = &known_values[i];
    if ((kv->op != U_DIGAMMA) != polygamma) continue;
    const unary_row *r = &unary_rows[kv->op];
    double o = r->oracle(kv->x);
    if (!tu_close(o, kv->want, 1e-15, 0))
      fail_msg("oracle for %s(%g): %.17g want %.17g", r->name, kv->x, o, kv->want);
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
      graft_tensor *x = tu_tensor_from(dt, 1, shape, &kv->x);
      graft_tensor *out = run_unary_ok(r, x);
      double rtol = dt == GRAFT_F32 ? LOOSE32 : LOOSE64;
      double got = tu_get(out, 0);
      if (!tu_close(got, kv->want, rtol, 0))
        fail_msg("%s(%g) %s: got %.17g want %.17g", r->name, kv->x, graft_dtype_name(dt),
                 got, kv->want);
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
    }
  }
}

static void test_graft_digamma__known_values(void **state) {
  (void)state;
  check_known_values(0);
}

static void test_graft_polygamma__known_values(void **state) {
  (void)state;
  check_known_values(1);
}

/* ---- binary table ----------------------------------------------------- */

typedef graft_value *(*binary_fn)(graft_trace *, graft_value *, graft_value *);

static double or_add(double a, double b) { return a + b; }
static double or_sub(double a, double b) { return a - b; }
static double or_mul(double a, double b) { return a * b; }
static double or_div(double a, double b) { return a / b; }
static double or_max(double a, double b) { return a > b ? a : b; }
static double or_min(double a, double b) { return a < b ? a : b; }
static double or_greater(double a, double b) { return a > b ? 1.0 : 0.0; }
static double or_less(double a, double b) { return a < b ? 1.0 : 0.0; }
static double or_equal(double a, double b) { return a == b ? 1.0 : 0.0; }

/* X(ID, name, graft fn, oracle, a lo, a hi, b lo, b hi, integral inputs,
 *   rtol32, rtol64, i32 mode) */
#define BINARY_OPS(X)                                                                      \
  X(ADD, "add", graft_add, or_add, -5, 5, -5, 5, 0, TOL32, TOL64, EXACT)                   \
  X(SUB, "sub", graft_sub, or_sub, -5, 5, -5, 5, 0, TOL32, TOL64, EXACT)                   \
  X(MUL, "mul", graft_mul, or_mul, -5, 5, -5, 5, 0, TOL32, TOL64, EXACT)                   \
  X(DIV, "div", graft_div, or_div, -5, 5, 0.5, 5, 0, TOL32, TOL64, REJECT)                 \
  X(POW, "pow", graft_pow, pow, 0.1, 5, -3, 3, 0, LOOSE32, LOOSE64, REJECT)                \
  X(MAXIMUM, "maximum", graft_maximum, or_max, -5, 5, -5, 5, 0, TOL32, TOL64, EXACT)       \
  X(MINIMUM, "minimum", graft_minimum, or_min, -5, 5, -5, 5, 0, TOL32, TOL64, EXACT)       \
  X(GREATER, "greater", graft_greater, or_greater, -3, 4, -3, 4, 1, 0, 0, EXACT)           \
  X(LESS, "less", graft_less, or_less, -3, 4, -3, 4, 1, 0, 0, EXACT)                       \
  X(EQUAL, "equal", graft_equal, or_equal, -3, 4, -3, 4, 1, 0, 0, EXACT)

enum binary_id {
#define B_ENUM_(ID, ...) B_##ID,
  BINARY_OPS(B_ENUM_)
#undef B_ENUM_
      B_COUNT
};

typedef struct binary_row {
  const char *name;
  binary_fn fn;
  double (*oracle)(double, double);
  double a_lo, a_hi, b_lo, b_hi;
  int integral;
  double rtol32, rtol64;
  enum i32_mode i32;
} binary_row;

static const binary_row binary_rows[B_COUNT] = {
#define B_ROW_(ID, name, fn, orc, alo, ahi, blo, bhi, integ, t32, t64, i32) \
  [B_##ID] = {name, fn, orc, alo, ahi, blo, bhi, integ, t32, t64, I32_##i32},
    BINARY_OPS(B_ROW_)
#undef B_ROW_
};

typedef struct binary_case {
  enum binary_id op;
  graft_dtype dt;
} binary_case;

static graft_status trace_binary(graft_trace *t, int n_in, graft_value *const *in,
                                 int n_out, graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  out[0] = ((const binary_row *)user)->fn(t, in[0], in[1]);
  return GRAFT_OK;
}

/* out against r's oracle on a and b broadcast to out's shape (ro, so). */
static void check_binary(const binary_row *r, const graft_tensor *a, const graft_tensor *b,
                         const graft_tensor *out, int ro, const int64_t *so, double rtol) {
  tu_assert_shape(out, ro, so, NULL);
  assert_int_equal(graft_tensor_dtype(out), graft_tensor_dtype(a));
  int ra = graft_tensor_rank(a), rb = graft_tensor_rank(b);
  const int64_t *sa = graft_tensor_shape(a), *sb = graft_tensor_shape(b);
  int64_t n = tu_numel(ro, so);
  assert_int_equal(graft_tensor_numel(out), n);
  for (int64_t i = 0; i < n; i++) {
    double av = tu_get(a, tu_bcast_src(ro, so, i, ra, sa));
    double bv = tu_get(b, tu_bcast_src(ro, so, i, rb, sb));
    double got = tu_get(out, i), want = r->oracle(av, bv);
    if (!tu_close(got, want, rtol, 0))
      fail_msg("%s(%.17g, %.17g) [element %lld, %s]: got %.17g want %.17g", r->name, av, bv,
               (long long)i, graft_dtype_name(graft_tensor_dtype(a)), got, want);
  }
}

static double binary_rtol(const binary_row *r, graft_dtype dt) {
  return dt == GRAFT_F32 ? r->rtol32 : dt == GRAFT_F64 ? r->rtol64 : 0.0;
}

/* Each op on [3,1,4] (op) [5,1] -> [3,5,4]. */
static void test_binary_op(void **state) {
  const binary_case *c = *state;
  const binary_row *r = &binary_rows[c->op];
  tu_rng rng = rng_for(1000 + (uint64_t)c->op * 8 + (uint64_t)c->dt);
  static const int64_t sa[] = {3, 1, 4}, sb[] = {5, 1}, so[] = {3, 5, 4};
  graft_tensor *in[2];
  in[0] = make_operand(&rng, c->dt, 3, sa, r->a_lo, r->a_hi, r->integral);
  in[1] = make_operand(&rng, c->dt, 2, sb, r->b_lo, r->b_hi, r->integral);
  graft_tensor *out = NULL;
  char msg[512] = "";
  graft_status s = tu_run(g_rt, trace_binary, (void *)r, 2, in, 1, &out, msg);
  if (c->dt == GRAFT_I32 && r->i32 == I32_REJECT) {
    tu_assert_run_fails(s, GRAFT_EDTYPE, out, msg, r->name, NULL);
  } else {
    tu_assert_run_ok(s, NULL, msg);
    check_binary(r, in[0], in[1], out, 3, so, binary_rtol(r, c->dt));
  }
  graft_tensor_destroy(out);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

/* a < 0 with a non-integer exponent gives NaN, as C pow does. */
static void test_graft_pow__negative_base_follows_c_pow(void **state) {
  (void)state;
  static const double a[] = {-2, -2, -8, -3, 0, 0, 2, -0.5};
  static const double b[] = {2, 3, 0.5, -1, 0, 2, 0.5, -2};
  static const int64_t shape[] = {8};
  const binary_row *r = &binary_rows[B_POW];
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
    graft_tensor *in[2] = {tu_tensor_from(dt, 1, shape, a), tu_tensor_from(dt, 1, shape, b)};
    graft_tensor *out = NULL;
    char msg[512] = "";
    tu_assert_run_ok(tu_run(g_rt, trace_binary, (void *)r, 2, in, 1, &out, msg), NULL, msg);
    check_binary(r, in[0], in[1], out, 1, shape, binary_rtol(r, dt));
    graft_tensor_destroy(out);
    graft_tensor_destroy(in[0]);
    graft_tensor_destroy(in[1]);
  }
}

/* ---- broadcasting edge cases ------------------------------------------ */

/* X(name, rank a, rank b, rank out); shapes in bcast_shapes below. */
#define BCAST_CASES(X)          \
  X(identical_shapes)           \
  X(size1_dims_both_sides)      \
  X(rank_difference)            \
  X(rank_difference_reversed)   \
  X(rank0_with_rank3)           \
  X(rank3_with_rank0)           \
  X(zero_size_dim_with_size1)   \
  X(zero_size_trailing_dim)     \
  X(size1_with_zero)

enum bcast_id {
#define BC_ENUM_(nm) BC_##nm,
  BCAST_CASES(BC_ENUM_)
#undef BC_ENUM_
      BC_COUNT
};

typedef struct bcast_shapes {
  int ra, rb, ro;
  int64_t sa[4], sb[4], so[4];
} bcast_shapes;

static const bcast_shapes bcast_table[BC_COUNT] = {
    [BC_identical_shapes] = {2, 2, 2, {4, 5}, {4, 5}, {4, 5}},
    [BC_size1_dims_both_sides] = {3, 3, 3, {3, 1, 4}, {1, 5, 1}, {3, 5, 4}},
    [BC_rank_difference] = {3, 1, 3, {2, 3, 4}, {4}, {2, 3, 4}},
    [BC_rank_difference_reversed] = {1, 3, 3, {4}, {2, 3, 4}, {2, 3, 4}},
    [BC_rank0_with_rank3] = {0, 3, 3, {0}, {2, 3, 4}, {2, 3, 4}},
    [BC_rank3_with_rank0] = {3, 0, 3, {2, 3, 4}, {0}, {2, 3, 4}},
    [BC_zero_size_dim_with_size1] = {2, 2, 2, {0, 3}, {1, 3}, {0, 3}},
    [BC_zero_size_trailing_dim] = {2, 2, 2, {2, 0}, {2, 1}, {2, 0}},
    [BC_size1_with_zero] = {1, 1, 1, {1}, {0}, {0}},
};

typedef struct bcast_run {
  enum binary_id op;
  enum bcast_id shapes;
} bcast_run;

/* add and sub (not commutative: catches swapped operands), f64. */
static void test_broadcast(void **state) {
  const bcast_run *c = *state;
  const bcast_shapes *bs = &bcast_table[c->shapes];
  const binary_row *r = &binary_rows[c->op];
  tu_rng rng = rng_for(2000 + (uint64_t)c->shapes * 8 + (uint64_t)c->op);
  graft_tensor *in[2] = {tu_tensor_rand(&rng, GRAFT_F64, bs->ra, bs->sa, -5, 5),
                         tu_tensor_rand(&rng, GRAFT_F64, bs->rb, bs->sb, -5, 5)};
  graft_tensor *out = NULL;
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, trace_binary, (void *)r, 2, in, 1, &out, msg), NULL, msg);
  check_binary(r, in[0], in[1], out, bs->ro, bs->so, TOL64);
  graft_tensor_destroy(out);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

static void check_add_fails(int ra, const int64_t *sa, graft_dtype da, int rb,
                            const int64_t *sb, graft_dtype db, graft_status want,
                            const char *const *needles, int n_needles) {
  tu_rng rng = rng_for(3000);
  graft_tensor *in[2] = {tu_tensor_rand(&rng, da, ra, sa, -1, 1),
                         tu_tensor_rand(&rng, db, rb, sb, -1, 1)};
  graft_tensor *out = NULL;
  char msg[512] = "";
  graft_status s = tu_run(g_rt, trace_binary, (void *)&binary_rows[B_ADD], 2, in, 1, &out, msg);
  tu_assert_run_fails(s, want, out, msg, "add", NULL);
  for (int i = 0; i < n_needles; i++)
    if (!tu_msg_has(msg, needles[i])) fail_msg("message \"%s\" lacks \"%s\"", msg, needles[i]);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

static void test_graft_add__incompatible_shapes_fail_eshape(void **state) {
  (void)state;
  static const int64_t sa[] = {2, 3}, sb[] = {4};
  static const char *const needles[] = {"[2,3]", "[4]"};
  check_add_fails(2, sa, GRAFT_F32, 1, sb, GRAFT_F32, GRAFT_ESHAPE, needles, 2);
}

/* Only 1 stretches: a 0 does not broadcast against 2. */
static void test_graft_add__zero_vs_nonunit_dim_fails_eshape(void **state) {
  (void)state;
  static const int64_t sa[] = {0}, sb[] = {2};
  static const char *const needles[] = {"[0]", "[2]"};
  check_add_fails(1, sa, GRAFT_F64, 1, sb, GRAFT_F64, GRAFT_ESHAPE, needles, 2);
}

static void test_graft_add__dtype_mismatch_fails_edtype(void **state) {
  (void)state;
  static const int64_t s[] = {2, 3};
  check_add_fails(2, s, GRAFT_F32, 2, s, GRAFT_F64, GRAFT_EDTYPE, NULL, 0);
}

/* (a + b) * c over [300,257]: more elements than one default tile, chained
 * elementwise ops (candidates for in-place reuse), two broadcast patterns. */
static graft_status trace_add_mul(graft_trace *t, int n_in, graft_value *const *in,
                                  int n_out, graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  (void)user;
  out[0] = graft_mul(t, graft_add(t, in[0], in[1]), in[2]);
  return GRAFT_OK;
}

static void test_graft_add__large_broadcast_spans_tiles(void **state) {
  (void)state;
  static const int64_t sa[] = {300, 257}, sb[] = {257}, sc[] = {300, 1};
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
    tu_rng rng = rng_for(4000 + (uint64_t)dt);
    graft_tensor *in[3] = {tu_tensor_rand(&rng, dt, 2, sa, -5, 5),
                           tu_tensor_rand(&rng, dt, 1, sb, -5, 5),
                           tu_tensor_rand(&rng, dt, 2, sc, -5, 5)};
    graft_tensor *out = NULL;
    char msg[512] = "";
    tu_assert_run_ok(tu_run(g_rt, trace_add_mul, NULL, 3, in, 1, &out, msg), NULL, msg);
    tu_assert_shape(out, 2, sa, NULL);
    assert_int_equal(graft_tensor_dtype(out), dt);
    double rtol = dt == GRAFT_F32 ? 2 * TOL32 : 2 * TOL64;
    for (int64_t i = 0; i < 300 * 257; i++) {
      double want = (tu_get(in[0], i) + tu_get(in[1], i % 257)) * tu_get(in[2], i / 257);
      if (!tu_close(tu_get(out, i), want, rtol, 0))
        fail_msg("element %lld (%s): got %.17g want %.17g", (long long)i,
                 graft_dtype_name(dt), tu_get(out, i), want);
    }
    graft_tensor_destroy(out);
    for (int k = 0; k < 3; k++) graft_tensor_destroy(in[k]);
  }
}

/* ---- mul_add ------------------------------------------------------------ */

static graft_status trace_mul_add(graft_trace *t, int n_in, graft_value *const *in,
                                  int n_out, graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_mul_add(t, in[0], in[1], in[2]);
  out[1] = graft_add(t, graft_mul(t, in[0], in[1]), in[2]);
  return GRAFT_OK;
}

/* mul_add(a, b, c) equals round(round(a b) + c) element by element (in the
 * dtype), and is bitwise the same as add(mul(a, b), c): full operands, a
 * scalar a (the SGD case, vectorized path), and every broadcasting layout,
 * f32 and f64, on seq and on ws with 3 threads over tiles. */
static void test_graft_mul_add__equals_add_of_mul_bitwise(void **state) {
  (void)state;
  static const struct {
    int ra, rb, rc;
    int64_t sa[3], sb[3], sc[3];
  } cases[] = {
      {2, 2, 2, {300, 400}, {300, 400}, {300, 400}}, /* full, tiled */
      {0, 2, 2, {0}, {300, 400}, {300, 400}},        /* scalar a, tiled */
      {1, 2, 2, {1}, {3, 4}, {3, 4}},
      {3, 2, 1, {3, 1, 4}, {5, 1}, {4}},
      {1, 3, 2, {5}, {2, 1, 1}, {4, 1}},
  };
  graft_runtime *ws = tu_runtime_of("ws", 3, 0);
  tu_rng rng = rng_for(4800);
  for (size_t i = 0; i < TU_N_OF(cases); i++)
    for (int d = 0; d < 2; d++) {
      graft_dtype dt = d ? GRAFT_F64 : GRAFT_F32;
      graft_tensor *in[3] = {tu_tensor_rand(&rng, dt, cases[i].ra, cases[i].sa, -3, 3),
                             tu_tensor_rand(&rng, dt, cases[i].rb, cases[i].sb, -3, 3),
                             tu_tensor_rand(&rng, dt, cases[i].rc, cases[i].sc, -3, 3)};
      for (int r = 0; r < 2; r++) {
        graft_tensor *out[2] = {NULL, NULL};
        char msg[512] = "";
        tu_assert_run_ok(tu_run(r ? ws : g_rt, trace_mul_add, NULL, 3, in, 2, out, msg), NULL,
                         msg);
        int ro = graft_tensor_rank(out[0]);
        const int64_t *so = graft_tensor_shape(out[0]);
        tu_assert_shape(out[1], ro, so, NULL);
        for (int64_t j = 0; j < tu_numel(ro, so); j++) {
          double v[3];
          for (int k = 0; k < 3; k++)
            v[k] = tu_get(in[k], tu_bcast_src(ro, so, j, graft_tensor_rank(in[k]),
                                              graft_tensor_shape(in[k])));
          double want = d ? v[0] * v[1] + v[2] : (double)((float)((float)v[0] * (float)v[1]) + (float)v[2]);
          if (tu_get(out[0], j) != want)
            fail_msg("case %zu %s: mul_add(%g, %g, %g) [element %lld]: got %.17g want %.17g", i,
                     graft_dtype_name(dt), v[0], v[1], v[2], (long long)j, tu_get(out[0], j), want);
        }
        assert_memory_equal(graft_tensor_data(out[0]), graft_tensor_data(out[1]),
                            (size_t)tu_numel(ro, so) * graft_dtype_size(dt));
        graft_tensor_destroy(out[0]);
        graft_tensor_destroy(out[1]);
      }
      for (int k = 0; k < 3; k++) graft_tensor_destroy(in[k]);
    }
  graft_runtime_destroy(ws);
}

static void test_graft_mul_add__bad_operands_fail(void **state) {
  (void)state;
  static const int64_t s[] = {2, 3}, s4[] = {4};
  tu_rng rng = rng_for(4900);
  static const struct {
    graft_dtype da, db, dc;
    int rc;
    const int64_t *sc;
    graft_status want;
  } cases[] = {
      {GRAFT_F32, GRAFT_F32, GRAFT_F64, 2, s, GRAFT_EDTYPE},
      {GRAFT_I32, GRAFT_I32, GRAFT_I32, 2, s, GRAFT_EDTYPE},
      {GRAFT_F64, GRAFT_F64, GRAFT_F64, 1, s4, GRAFT_ESHAPE},
  };
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    graft_tensor *in[3] = {tu_tensor_rand(&rng, cases[i].da, 2, s, -1, 1),
                           tu_tensor_rand(&rng, cases[i].db, 2, s, -1, 1),
                           tu_tensor_rand(&rng, cases[i].dc, cases[i].rc, cases[i].sc, -1, 1)};
    graft_tensor *out[2] = {NULL, NULL};
    char msg[512] = "";
    graft_status st = tu_run(g_rt, trace_mul_add, NULL, 3, in, 2, out, msg);
    tu_assert_run_fails(st, cases[i].want, out[0], msg, "mul_add", NULL);
    for (int k = 0; k < 3; k++) graft_tensor_destroy(in[k]);
  }
}

/* ---- where ------------------------------------------------------------ */

static graft_status trace_where(graft_trace *t, int n_in, graft_value *const *in,
                                int n_out, graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  (void)user;
  out[0] = graft_where(t, in[0], in[1], in[2]);
  return GRAFT_OK;
}

/* out == (cond != 0 ? a : b), all broadcast to (ro, so), exactly. */
static void check_where(graft_tensor *const *in, const graft_tensor *out, int ro,
                        const int64_t *so) {
  tu_assert_shape(out, ro, so, NULL);
  assert_int_equal(graft_tensor_dtype(out), graft_tensor_dtype(in[1]));
  for (int64_t i = 0; i < tu_numel(ro, so); i++) {
    double v[3];
    for (int k = 0; k < 3; k++)
      v[k] = tu_get(in[k], tu_bcast_src(ro, so, i, graft_tensor_rank(in[k]),
                                        graft_tensor_shape(in[k])));
    double want = v[0] != 0 ? v[1] : v[2], got = tu_get(out, i);
    if (!tu_close(got, want, 0, 0))
      fail_msg("where(%g, %g, %g) [element %lld]: got %.17g want %.17g", v[0], v[1], v[2],
               (long long)i, got, want);
  }
}

static void test_graft_where__cond_i32_selects_f64_all_broadcast(void **state) {
  (void)state;
  static const int64_t sc[] = {3, 1, 1}, sa[] = {1, 4, 1}, sb[] = {1, 1, 5},
                       so[] = {3, 4, 5};
  static const double cond[] = {0, 2, -1};
  tu_rng rng = rng_for(5000);
  graft_tensor *in[3] = {tu_tensor_from(GRAFT_I32, 3, sc, cond),
                         tu_tensor_rand(&rng, GRAFT_F64, 3, sa, -5, 5),
                         tu_tensor_rand(&rng, GRAFT_F64, 3, sb, -5, 5)};
  graft_tensor *out = NULL;
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, trace_where, NULL, 3, in, 1, &out, msg), NULL, msg);
  check_where(in, out, 3, so);
  graft_tensor_destroy(out);
  for (int k = 0; k < 3; k++) graft_tensor_destroy(in[k]);
}

/* cond != 0 as in C: 0.5 and NaN select a, -0.0 selects b. */
static void test_graft_where__cond_f32_nonzero_semantics_i32_values(void **state) {
  (void)state;
  static const int64_t sc[] = {6}, sa[] = {2, 1}, so[] = {2, 6};
  const double cond[] = {0.0, -0.0, 0.5, NAN, 1.0, -3.0};
  static const double a[] = {11, -22}, b[] = {7};
  graft_tensor *in[3] = {tu_tensor_from(GRAFT_F32, 1, sc, cond),
                         tu_tensor_from(GRAFT_I32, 2, sa, a),
                         tu_tensor_from(GRAFT_I32, 0, NULL, b)};
  graft_tensor *out = NULL;
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, trace_where, NULL, 3, in, 1, &out, msg), NULL, msg);
  check_where(in, out, 2, so);
  graft_tensor_destroy(out);
  for (int k = 0; k < 3; k++) graft_tensor_destroy(in[k]);
}

static void test_graft_where__value_dtype_mismatch_fails_edtype(void **state) {
  (void)state;
  static const int64_t s[] = {2, 3};
  tu_rng rng = rng_for(5100);
  graft_tensor *in[3] = {tu_tensor_rand(&rng, GRAFT_I32, 2, s, 0, 1),
                         tu_tensor_rand(&rng, GRAFT_F32, 2, s, -1, 1),
                         tu_tensor_rand(&rng, GRAFT_F64, 2, s, -1, 1)};
  graft_tensor *out = NULL;
  char msg[512] = "";
  graft_status st = tu_run(g_rt, trace_where, NULL, 3, in, 1, &out, msg);
  tu_assert_run_fails(st, GRAFT_EDTYPE, out, msg, "where", NULL);
  for (int k = 0; k < 3; k++) graft_tensor_destroy(in[k]);
}

static void test_graft_where__incompatible_shapes_fail_eshape(void **state) {
  (void)state;
  static const int64_t sc[] = {2, 3}, sa[] = {3}, sb[] = {4};
  tu_rng rng = rng_for(5200);
  graft_tensor *in[3] = {tu_tensor_rand(&rng, GRAFT_I32, 2, sc, 0, 1),
                         tu_tensor_rand(&rng, GRAFT_F64, 1, sa, -1, 1),
                         tu_tensor_rand(&rng, GRAFT_F64, 1, sb, -1, 1)};
  graft_tensor *out = NULL;
  char msg[512] = "";
  graft_status st = tu_run(g_rt, trace_where, NULL, 3, in, 1, &out, msg);
  tu_assert_run_fails(st, GRAFT_ESHAPE, out, msg, "where", NULL);
  for (int k = 0; k < 3; k++) graft_tensor_destroy(in[k]);
}

/* ---- cast ------------------------------------------------------------- */

#define DT_f32 GRAFT_F32
#define DT_f64 GRAFT_F64
#define DT_i32 GRAFT_I32
#define CAST_PAIRS(X) \
  X(f32, f32)         \
  X(f32, f64)         \
  X(f32, i32)         \
  X(f64, f32)         \
  X(f64, f64)         \
  X(f64, i32)         \
  X(i32, f32)         \
  X(i32, f64)         \
  X(i32, i32)

typedef struct cast_case {
  graft_dtype from, to;
} cast_case;

static graft_status trace_cast(graft_trace *t, int n_in, graft_value *const *in,
                               int n_out, graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  out[0] = graft_cast(t, in[0], *(const graft_dtype *)user);
  return GRAFT_OK;
}

/* What C's conversion gives (float -> i32 truncates toward zero). */
static double cast_expect(double v, graft_dtype to) {
  switch (to) {
  case GRAFT_F32: return (double)(float)v;
  case GRAFT_F64: return v;
  default: return (double)(int32_t)v;
  }
}

/* Every value fits i32 after truncation. */
static const double cast_float_src[] = {
    -2.75, -0.5, -0.0, 0.0, 0.1, 0.5, 0.9999, 2.75, -7.9999, 1000.25,
    123456.789, 16777217.0, -2147483520.0, 2147483520.0, 1e-40, -1e-40};
static const double cast_int_src[] = {0, 1, -1, 7, -123456789, 2147483647, -2147483648.0,
                                      16777217, 16777219, -16777217};

static void test_cast(void **state) {
  const cast_case *c = *state;
  const double *src = c->from == GRAFT_I32 ? cast_int_src : cast_float_src;
  int64_t n = c->from == GRAFT_I32 ? (int64_t)TU_N_OF(cast_int_src)
                                    : (int64_t)TU_N_OF(cast_float_src);
  int64_t shape[] = {n};
  graft_tensor *x = tu_tensor_from(c->from, 1, shape, src);
  graft_tensor *out = NULL;
  char msg[512] = "";
  graft_dtype to = c->to;
  tu_assert_run_ok(tu_run(g_rt, trace_cast, &to, 1, &x, 1, &out, msg), NULL, msg);
  assert_int_equal(graft_tensor_dtype(out), c->to);
  tu_assert_shape(out, 1, shape, NULL);
  for (int64_t i = 0; i < n; i++) {
    double v = tu_get(x, i), want = cast_expect(v, c->to), got = tu_get(out, i);
    if (!tu_close(got, want, 0, 0))
      fail_msg("cast %s -> %s of %.17g: got %.17g want %.17g", graft_dtype_name(c->from),
               graft_dtype_name(c->to), v, got, want);
  }
  graft_tensor_destroy(out);
  graft_tensor_destroy(x);
}

/* ---- leaves: scalar, constant, fill, zeros_like, ones_like ------------ */

typedef struct leaf_spec {
  graft_dtype dt;
  int rank;
  const int64_t *shape;
  const double *data; /* constant: host values; scalar/fill: data[0] */
  int mutate;         /* constant: overwrite the host buffer after the op */
} leaf_spec;

static graft_status trace_scalar(graft_trace *t, int n_in, graft_value *const *in,
                                 int n_out, graft_value **out, void *user) {
  (void)n_in;
  (void)in;
  (void)n_out;
  const leaf_spec *l = user;
  out[0] = graft_scalar(t, l->dt, l->data[0]);
  return GRAFT_OK;
}

static graft_status trace_fill(graft_trace *t, int n_in, graft_value *const *in,
                               int n_out, graft_value **out, void *user) {
  (void)n_in;
  (void)in;
  (void)n_out;
  const leaf_spec *l = user;
  out[0] = graft_fill(t, l->dt, l->rank, l->shape, l->data[0]);
  return GRAFT_OK;
}

/* Builds the host buffer from l->data, makes the constant, and (mutate)
 * overwrites the buffer before the graph runs: graft must have copied it. */
static graft_status trace_constant(graft_trace *t, int n_in, graft_value *const *in,
                                   int n_out, graft_value **out, void *user) {
  (void)n_in;
  (void)in;
  (void)n_out;
  const leaf_spec *l = user;
  int64_t n = tu_numel(l->rank, l->shape);
  union {
    float f[16];
    double d[16];
    int32_t i[16];
  } buf;
  for (int64_t k = 0; k < n && k < 16; k++) {
    if (l->dt == GRAFT_F32) buf.f[k] = (float)l->data[k];
    else if (l->dt == GRAFT_F64) buf.d[k] = l->data[k];
    else buf.i[k] = (int32_t)l->data[k];
  }
  out[0] = graft_constant(t, l->dt, l->rank, l->shape, &buf);
  if (l->mutate) memset(&buf, 0x5a, sizeof buf);
  return GRAFT_OK;
}

static void check_leaf(graft_trace_fn fn, const leaf_spec *l, const double *want) {
  graft_tensor *out = NULL;
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, fn, (void *)l, 0, NULL, 1, &out, msg), NULL, msg);
  assert_int_equal(graft_tensor_dtype(out), l->dt);
  tu_assert_shape(out, l->rank, l->shape, NULL);
  tu_assert_close(out, want, tu_numel(l->rank, l->shape), 0, 0);
  graft_tensor_destroy(out);
}

static void test_graft_scalar__each_dtype_rank0(void **state) {
  (void)state;
  static const double v[3] = {2.5, -0.1, -7};
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_I32; dt++) {
    leaf_spec l = {dt, 0, NULL, &v[dt], 0};
    double want = cast_expect(v[dt], dt);
    check_leaf(trace_scalar, &l, &want);
  }
}

static void test_graft_constant__each_dtype_round_trips(void **state) {
  (void)state;
  static const int64_t shape[] = {2, 3};
  static const double data[] = {1.5, -2.25, 0.1, 1e10, -0.0, 3};
  static const double idata[] = {1, -2, 0, 2147483647, -2147483648.0, 3};
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_I32; dt++) {
    const double *d = dt == GRAFT_I32 ? idata : data;
    leaf_spec l = {dt, 2, shape, d, 0};
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = cast_expect(d[i], dt);
    check_leaf(trace_constant, &l, want);
  }
}

static void test_graft_constant__copies_host_data(void **state) {
  (void)state;
  static const int64_t shape[] = {4};
  static const double data[] = {1, 2, 3, 4};
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_I32; dt++) {
    leaf_spec l = {dt, 1, shape, data, 1};
    check_leaf(trace_constant, &l, data);
  }
}

static void test_graft_fill__each_dtype(void **state) {
  (void)state;
  static const int64_t shape[] = {2, 3, 2};
  static const double v[3] = {1.5, -0.1, -4};
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_I32; dt++) {
    leaf_spec l = {dt, 3, shape, &v[dt], 0};
    double want[12];
    for (int i = 0; i < 12; i++) want[i] = cast_expect(v[dt], dt);
    check_leaf(trace_fill, &l, want);
  }
}

static void test_graft_fill__zero_size_dim(void **state) {
  (void)state;
  static const int64_t shape[] = {0, 3};
  static const double v = 2;
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_I32; dt++) {
    leaf_spec l = {dt, 2, shape, &v, 0};
    check_leaf(trace_fill, &l, &v);
  }
}

static graft_status trace_like(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  out[0] = *(const int *)user ? graft_ones_like(t, in[0]) : graft_zeros_like(t, in[0]);
  return GRAFT_OK;
}

static void check_like(int ones) {
  static const int64_t s3[] = {2, 3, 4};
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_I32; dt++) {
    for (int rank = 0; rank <= 3; rank += 3) {
      tu_rng rng = rng_for(6000 + (uint64_t)dt * 4 + (uint64_t)rank);
      graft_tensor *x = tu_tensor_rand(&rng, dt, rank, s3, -5, 5);
      graft_tensor *out = NULL;
      char msg[512] = "";
      tu_assert_run_ok(tu_run(g_rt, trace_like, &ones, 1, &x, 1, &out, msg), NULL, msg);
      assert_int_equal(graft_tensor_dtype(out), dt);
      tu_assert_shape(out, rank, s3, NULL);
      double want[24];
      for (int i = 0; i < 24; i++) want[i] = ones;
      tu_assert_close(out, want, graft_tensor_numel(x), 0, 0);
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
    }
  }
}

static void test_graft_zeros_like__matches_input_shape_and_dtype(void **state) {
  (void)state;
  check_like(0);
}

static void test_graft_ones_like__matches_input_shape_and_dtype(void **state) {
  (void)state;
  check_like(1);
}

/* ---- the case list, generated from the tables ------------------------- */

#define UCASE_(ID, name, pre, dt, suffix) \
  {"test_graft_" name "__" pre suffix, test_unary_op, NULL, NULL, &(unary_case){U_##ID, dt}},
#define UCASE_I32_EXACT(ID, name, pre) UCASE_(ID, name, pre, GRAFT_I32, "i32_matches_oracle")
#define UCASE_I32_REJECT(ID, name, pre) UCASE_(ID, name, pre, GRAFT_I32, "i32_fails_edtype")
#define UCASE_I32_NONE(ID, name, pre)
#define UNARY_ENTRIES_(ID, name, pre, fn, orc, lo, hi, t32, t64, at, i32, ...) \
  UCASE_(ID, name, pre, GRAFT_F32, "f32_matches_oracle")                       \
  UCASE_(ID, name, pre, GRAFT_F64, "f64_matches_oracle")                       \
  UCASE_I32_##i32(ID, name, pre)

#define BCASE_(ID, name, dt, suffix) \
  {"test_graft_" name "__" suffix, test_binary_op, NULL, NULL, &(binary_case){B_##ID, dt}},
#define BCASE_I32_EXACT(ID, name) BCASE_(ID, name, GRAFT_I32, "i32_broadcast_matches_oracle")
#define BCASE_I32_REJECT(ID, name) BCASE_(ID, name, GRAFT_I32, "i32_fails_edtype")
#define BINARY_ENTRIES_(ID, name, fn, orc, alo, ahi, blo, bhi, integ, t32, t64, i32) \
  BCASE_(ID, name, GRAFT_F32, "f32_broadcast_matches_oracle")                        \
  BCASE_(ID, name, GRAFT_F64, "f64_broadcast_matches_oracle")                        \
  BCASE_I32_##i32(ID, name)

#define BCAST_ENTRIES_(nm)                                                          \
  {"test_graft_add__broadcast_" #nm, test_broadcast, NULL, NULL,                   \
   &(bcast_run){B_ADD, BC_##nm}},                                                   \
      {"test_graft_sub__broadcast_" #nm, test_broadcast, NULL, NULL,               \
       &(bcast_run){B_SUB, BC_##nm}},

#define CAST_ENTRIES_(from, to)                                                     \
  {"test_graft_cast__" #from "_to_" #to, test_cast, NULL, NULL,                    \
   &(cast_case){DT_##from, DT_##to}},

int main(void) {
  const struct CMUnitTest tests[] = {
      UNARY_OPS(UNARY_ENTRIES_)
      cmocka_unit_test(test_graft_lgamma__negative_non_integer),
      cmocka_unit_test(test_graft_digamma__negative_non_integer),
      cmocka_unit_test(test_graft_polygamma__negative_non_integer),
      cmocka_unit_test(test_graft_digamma__recurrence_identity),
      cmocka_unit_test(test_graft_polygamma__recurrence_identity),
      cmocka_unit_test(test_graft_digamma__known_values),
      cmocka_unit_test(test_graft_polygamma__known_values),
      BINARY_OPS(BINARY_ENTRIES_)
      cmocka_unit_test(test_graft_pow__negative_base_follows_c_pow),
      BCAST_CASES(BCAST_ENTRIES_)
      cmocka_unit_test(test_graft_add__incompatible_shapes_fail_eshape),
      cmocka_unit_test(test_graft_add__zero_vs_nonunit_dim_fails_eshape),
      cmocka_unit_test(test_graft_add__dtype_mismatch_fails_edtype),
      cmocka_unit_test(test_graft_add__large_broadcast_spans_tiles),
      cmocka_unit_test(test_graft_mul_add__equals_add_of_mul_bitwise),
      cmocka_unit_test(test_graft_mul_add__bad_operands_fail),
      cmocka_unit_test(test_graft_where__cond_i32_selects_f64_all_broadcast),
      cmocka_unit_test(test_graft_where__cond_f32_nonzero_semantics_i32_values),
      cmocka_unit_test(test_graft_where__value_dtype_mismatch_fails_edtype),
      cmocka_unit_test(test_graft_where__incompatible_shapes_fail_eshape),
      CAST_PAIRS(CAST_ENTRIES_)
      cmocka_unit_test(test_graft_scalar__each_dtype_rank0),
      cmocka_unit_test(test_graft_constant__each_dtype_round_trips),
      cmocka_unit_test(test_graft_constant__copies_host_data),
      cmocka_unit_test(test_graft_fill__each_dtype),
      cmocka_unit_test(test_graft_fill__zero_size_dim),
      cmocka_unit_test(test_graft_zeros_like__matches_input_shape_and_dtype),
      cmocka_unit_test(test_graft_ones_like__matches_input_shape_and_dtype),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
