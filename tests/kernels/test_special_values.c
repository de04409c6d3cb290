/* NaN, infinities and signed zeros through the kernels, against oracles
 * that keep them: a result is right when it is NaN where NaN is expected,
 * and otherwise has exactly the expected bits (so -0.0 is not 0.0).
 *
 * What is checked is what the headers and kernel comments document:
 *  - unary math at NaN, +-inf and +-0 (C99 Annex F values, written out),
 *    relu and sign keeping NaN, sign keeping the sign of zero, the special
 *    functions' poles and infinities (special.h);
 *  - every binary op over all pairs of ten special values: IEEE arithmetic,
 *    pow as C pow, maximum/minimum propagating NaN from either operand and
 *    returning b on a tie (0.0 vs -0.0 included), comparisons false on NaN;
 *    i32 arithmetic wrapping modulo 2^32 at INT32_MIN / INT32_MAX;
 *  - where (a NaN condition selects a; the selected operand's bits pass
 *    through), mul_add (the product rounded before the sum, NaN and inf
 *    included);
 *  - casts (NaN -> 0, saturation, truncation toward zero, f64 -> f32
 *    overflow to inf);
 *  - reductions (reduce_max NaN sticks wherever it sits, in every layout and
 *    across split reductions; inf - inf in sums; logsumexp's infinite max),
 *    softmax / log_softmax rows with NaN or an infinite max, cross-entropy
 *    rows with infinities, one_hot labels outside [0, depth).
 * Each case runs in f32 and f64 on the seq executor and on ws with two
 * threads and a small grain (so ops are cut into tiles), and the two must
 * agree bitwise. */
#include <float.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "kernels/seq_ws.h"
#include "testutil.h"

/* ---- ops ------------------------------------------------------------------------ */

enum op {
  /* unary */
  OP_NEG, OP_SQUARE, OP_SQRT, OP_EXP, OP_LOG, OP_LOG1P, OP_TANH, OP_SIGMOID, OP_RELU, OP_ABS,
  OP_SIGN, OP_SIN, OP_COS, OP_TAN, OP_LGAMMA, OP_DIGAMMA, OP_POLYGAMMA1, OP_POLYGAMMA2,
  OP_STOP_GRADIENT, OP_UNARY_END,
  /* binary */
  OP_ADD = OP_UNARY_END, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MAXIMUM, OP_MINIMUM, OP_GREATER,
  OP_LESS, OP_EQUAL, OP_BINARY_END,
  /* the rest */
  OP_WHERE = OP_BINARY_END, OP_MUL_ADD, OP_CAST, OP_REDUCE_MAX, OP_REDUCE_SUM, OP_REDUCE_MEAN,
  OP_REDUCE_PROD, OP_LOGSUMEXP, OP_SOFTMAX, OP_LOG_SOFTMAX, OP_XENT, OP_ONE_HOT,
};

static const char *const k_unary_name[OP_UNARY_END] = {
    "neg", "square", "sqrt", "exp", "log", "log1p", "tanh", "sigmoid", "relu", "abs",
    "sign", "sin", "cos", "tan", "lgamma", "digamma", "polygamma(1)", "polygamma(2)",
    "stop_gradient"};
static const char *const k_binary_name[OP_BINARY_END - OP_ADD] = {
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "greater", "less", "equal"};

typedef struct op_call {
  int op;
  int n_axes, axes[2], keepdims; /* reductions */
  int axis;                      /* softmax */
  graft_dtype to;                /* cast, one_hot */
  int64_t depth;                 /* one_hot */
} op_call;

static graft_value *apply(graft_trace *t, const op_call *c, graft_value *const *in) {
  graft_value *x = in[0];
  switch (c->op) {
  case OP_NEG: return graft_neg(t, x);
  case OP_SQUARE: return graft_square(t, x);
  case OP_SQRT: return graft_sqrt(t, x);
  case OP_EXP: return graft_exp(t, x);
  case OP_LOG: return graft_log(t, x);
  case OP_LOG1P: return graft_log1p(t, x);
  case OP_TANH: return graft_tanh(t, x);
  case OP_SIGMOID: return graft_sigmoid(t, x);
  case OP_RELU: return graft_relu(t, x);
  case OP_ABS: return graft_abs(t, x);
  case OP_SIGN: return graft_sign(t, x);
  case OP_SIN: return graft_sin(t, x);
  case OP_COS: return graft_cos(t, x);
  case OP_TAN: return graft_tan(t, x);
  case OP_LGAMMA: return graft_lgamma(t, x);
  case OP_DIGAMMA: return graft_digamma(t, x);
  case OP_POLYGAMMA1: return graft_polygamma(t, 1, x);
  case OP_POLYGAMMA2: return graft_polygamma(t, 2, x);
  case OP_STOP_GRADIENT: return graft_stop_gradient(t, x);
  case OP_ADD: return graft_add(t, x, in[1]);
  case OP_SUB: return graft_sub(t, x, in[1]);
  case OP_MUL: return graft_mul(t, x, in[1]);
  case OP_DIV: return graft_div(t, x, in[1]);
  case OP_POW: return graft_pow(t, x, in[1]);
  case OP_MAXIMUM: return graft_maximum(t, x, in[1]);
  case OP_MINIMUM: return graft_minimum(t, x, in[1]);
  case OP_GREATER: return graft_greater(t, x, in[1]);
  case OP_LESS: return graft_less(t, x, in[1]);
  case OP_EQUAL: return graft_equal(t, x, in[1]);
  case OP_WHERE: return graft_where(t, x, in[1], in[2]);
  case OP_MUL_ADD: return graft_mul_add(t, x, in[1], in[2]);
  case OP_CAST: return graft_cast(t, x, c->to);
  case OP_REDUCE_MAX: return graft_reduce_max(t, x, c->n_axes, c->axes, c->keepdims);
  case OP_REDUCE_SUM: return graft_reduce_sum(t, x, c->n_axes, c->axes, c->keepdims);
  case OP_REDUCE_MEAN: return graft_reduce_mean(t, x, c->n_axes, c->axes, c->keepdims);
  case OP_REDUCE_PROD: return graft_reduce_prod(t, x, c->n_axes, c->axes, c->keepdims);
  case OP_LOGSUMEXP: return graft_logsumexp(t, x, c->n_axes, c->axes, c->keepdims);
  case OP_SOFTMAX: return graft_softmax(t, x, c->axis);
  case OP_LOG_SOFTMAX: return graft_log_softmax(t, x, c->axis);
  case OP_XENT: return graft_softmax_cross_entropy(t, x, in[1]);
  default: return graft_one_hot(t, x, c->depth, c->to);
  }
}

static graft_status trace_op(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = apply(t, user, in);
  return graft_trace_status(t);
}

/* ---- checking ----------------------------------------------------------------- */

/* got is want, NaN-aware: both NaN, or equal with the same sign (-0.0 is
 * not 0.0); with rtol > 0 a finite nonzero want may also be missed by
 * rtol |want| (results that go through exp and log).  Values arrive as
 * doubles; f32 -> double keeps NaN, infinities and the sign of zero. */
static int same_value(double got, double want, double rtol) {
  if (isnan(want)) return isnan(got);
  if (rtol > 0 && isfinite(want) && want != 0 && isfinite(got))
    return fabs(got - want) <= rtol * fabs(want);
  return got == want && signbit(got) == signbit(want);
}

/* Describes input element k of a case for a failure message. */
typedef void (*describe_fn)(char *buf, size_t len, graft_tensor *const *in, int64_t k,
                            const void *user);

/* What check_elements compares an output with. */
typedef struct expect {
  graft_dtype dt;
  const double *want;
  int64_t n;
  double rtol;
  graft_tensor *const *in; /* for describe */
  describe_fn what;
  const void *what_user;
} expect;

/* The output has dtype e->dt and e->n elements, each same_value as want. */
static void check_elements(const graft_tensor *out, const char *where, const void *user) {
  const expect *e = user;
  if (graft_tensor_dtype(out) != e->dt)
    fail_msg("%s: dtype %s, want %s", where, graft_dtype_name(graft_tensor_dtype(out)),
             graft_dtype_name(e->dt));
  if (graft_tensor_numel(out) != e->n)
    fail_msg("%s: %lld elements, want %lld", where, (long long)graft_tensor_numel(out),
             (long long)e->n);
  for (int64_t k = 0; k < e->n; k++) {
    double got = tu_get(out, k);
    if (same_value(got, e->want[k], e->rtol)) continue;
    char d[160] = "";
    if (e->what) e->what(d, sizeof d, e->in, k, e->what_user);
    fail_msg("%s: element %lld %s: got %.17g, want %.17g", where, (long long)k, d, got,
             e->want[k]);
  }
}

/* Run c on in[] on seq and ws (seq_ws.h); the output (dtype dt, numel n)
 * must hold want[] (same_value within rtol) and be bitwise equal across
 * them.  what(k) describes element k for a failure message (NULL: the
 * index only). */
static void check_op_tol(const op_call *c, int n_in, graft_tensor *const *in, graft_dtype dt,
                         const double *want, int64_t n, double rtol, const char *ctx,
                         describe_fn what, const void *what_user) {
  expect e = {dt, want, n, rtol, in, what, what_user};
  sw_run(trace_op, (void *)c, n_in, in, ctx, check_elements, &e);
}

/* Exact (NaN-aware) results. */
static void check_op(const op_call *c, int n_in, graft_tensor *const *in, graft_dtype dt,
                     const double *want, int64_t n, const char *ctx, describe_fn what,
                     const void *what_user) {
  check_op_tol(c, n_in, in, dt, want, n, 0.0, ctx, what, what_user);
}

/* Results through exp and log: finite values within a few roundings. */
static double rtol_of(graft_dtype dt) { return dt == GRAFT_F32 ? 1e-6 : 1e-14; }

/* x in dtype dt: doubles rounded to float for f32. */
static double in_dt(graft_dtype dt, double v) { return dt == GRAFT_F32 ? (double)(float)v : v; }

/* ---- unary: Annex F values, written out ------------------------------------------- */

enum { N_U = 5 };
static const double k_u_x[N_U] = {NAN, INFINITY, -INFINITY, -0.0, 0.0};

/* want[op][k] = op(k_u_x[k]) (lgamma of 0 and -inf: +inf as C lgamma; the
 * special functions' poles and infinities: special.h). */
static const double k_u_want[OP_UNARY_END][N_U] = {
    [OP_NEG] = {NAN, -INFINITY, INFINITY, 0.0, -0.0},
    [OP_SQUARE] = {NAN, INFINITY, INFINITY, 0.0, 0.0},
    [OP_SQRT] = {NAN, INFINITY, NAN, -0.0, 0.0},
    [OP_EXP] = {NAN, INFINITY, 0.0, 1.0, 1.0},
    [OP_LOG] = {NAN, INFINITY, NAN, -INFINITY, -INFINITY},
    [OP_LOG1P] = {NAN, INFINITY, NAN, -0.0, 0.0},
    [OP_TANH] = {NAN, 1.0, -1.0, -0.0, 0.0},
    [OP_SIGMOID] = {NAN, 1.0, 0.0, 0.5, 0.5},
    [OP_RELU] = {NAN, INFINITY, 0.0, 0.0, 0.0},
    [OP_ABS] = {NAN, INFINITY, INFINITY, 0.0, 0.0},
    [OP_SIGN] = {NAN, 1.0, -1.0, -0.0, 0.0},
    [OP_SIN] = {NAN, NAN, NAN, -0.0, 0.0},
    [OP_COS] = {NAN, NAN, NAN, 1.0, 1.0},
    [OP_TAN] = {NAN, NAN, NAN, -0.0, 0.0},
    [OP_LGAMMA] = {NAN, INFINITY, INFINITY, INFINITY, INFINITY},
    [OP_DIGAMMA] = {NAN, INFINITY, NAN, NAN, NAN},
    [OP_POLYGAMMA1] = {NAN, 0.0, NAN, INFINITY, INFINITY},
    [OP_POLYGAMMA2] = {NAN, 0.0, NAN, NAN, NAN},
    [OP_STOP_GRADIENT] = {NAN, INFINITY, -INFINITY, -0.0, 0.0},
};

static void describe_unary(char *buf, size_t len, graft_tensor *const *in, int64_t k,
                           const void *user) {
  snprintf(buf, len, "(%s(%g))", k_unary_name[*(const int *)user], tu_get(in[0], k));
}

/* The five values repeated 8 times (40 elements: several tiles on ws). */
static void test_unary__nan_inf_signed_zero(void **state) {
  (void)state;
  enum { REP = 8 };
  static const int64_t shape[] = {N_U * REP};
  double x[N_U * REP], want[N_U * REP];
  for (int i = 0; i < N_U * REP; i++) x[i] = k_u_x[i % N_U];
  for (int op = 0; op < OP_UNARY_END; op++)
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
      graft_tensor *in = tu_tensor_from(dt, 1, shape, x);
      for (int i = 0; i < N_U * REP; i++) want[i] = k_u_want[op][i % N_U];
      op_call c = {.op = op};
      char ctx[64];
      snprintf(ctx, sizeof ctx, "%s %s", k_unary_name[op], graft_dtype_name(dt));
      check_op(&c, 1, &in, dt, want, N_U * REP, ctx, describe_unary, &op);
      graft_tensor_destroy(in);
    }
}

/* ---- binary: every pair of ten special values ------------------------------------------- */

enum { N_B = 10 };
static const double k_b_x[N_B] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 1.0, -1.0, 2.5, -2.5, 3.0};

/* The oracle in dtype dt (f32: float arithmetic and powf). */
static double binary_oracle(int op, graft_dtype dt, double a, double b) {
  int f = dt == GRAFT_F32;
  float af = (float)a, bf = (float)b;
  switch (op) {
  case OP_ADD: return f ? (double)(af + bf) : a + b;
  case OP_SUB: return f ? (double)(af - bf) : a - b;
  case OP_MUL: return f ? (double)(af * bf) : a * b;
  case OP_DIV: return f ? (double)(af / bf) : a / b;
  case OP_POW: return f ? (double)powf(af, bf) : pow(a, b); /* documented: as C pow */
  case OP_MAXIMUM: return isnan(a) || isnan(b) ? NAN : a > b ? a : b; /* tie: b */
  case OP_MINIMUM: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
  case OP_GREATER: return a > b ? 1.0 : 0.0;
  case OP_LESS: return a < b ? 1.0 : 0.0;
  default: return a == b ? 1.0 : 0.0;
  }
}

typedef struct bin_layout {
  const char *name;
  int ra, rb;
  int64_t sa[2], sb[2];
} bin_layout;

/* Three layouts giving all 100 pairs: the same-shape path, and the
 * broadcasting path with a or b as the broadcast operand of the inner
 * dim. */
static const bin_layout k_bin_layouts[] = {
    {"[100] (op) [100]", 1, 1, {N_B * N_B}, {N_B * N_B}},
    {"[10,1] (op) [10]", 2, 1, {N_B, 1}, {N_B}},
    {"[10] (op) [10,1]", 1, 2, {N_B}, {N_B, 1}},
};

static void describe_binary(char *buf, size_t len, graft_tensor *const *in, int64_t k,
                            const void *user) {
  const bin_layout *l = user;
  int64_t so[2] = {N_B, N_B};
  int ro = l->ra == 1 && l->rb == 1 ? 1 : 2;
  if (ro == 1) so[0] = N_B * N_B;
  snprintf(buf, len, "(a %g, b %g)", tu_get(in[0], tu_bcast_src(ro, so, k, l->ra, l->sa)),
           tu_get(in[1], tu_bcast_src(ro, so, k, l->rb, l->sb)));
}

/* The operands of layout l: a takes value i and b value j at output (i, j). */
static void bin_operands(const bin_layout *l, graft_dtype dt, const double *vals, int nv,
                         graft_tensor **in) {
  in[0] = tu_tensor_from(dt, l->ra, l->sa, NULL);
  in[1] = tu_tensor_from(dt, l->rb, l->sb, NULL);
  for (int64_t k = 0; k < graft_tensor_numel(in[0]); k++)
    tu_set(in[0], k, vals[l->ra == 1 && l->rb == 1 ? k / nv : k % nv]);
  for (int64_t k = 0; k < graft_tensor_numel(in[1]); k++) tu_set(in[1], k, vals[k % nv]);
}

static void test_binary__all_pairs_of_special_values(void **state) {
  (void)state;
  double want[N_B * N_B];
  for (int op = OP_ADD; op < OP_BINARY_END; op++)
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++)
      for (size_t l = 0; l < TU_N_OF(k_bin_layouts); l++) {
        const bin_layout *L = &k_bin_layouts[l];
        graft_tensor *in[2];
        bin_operands(L, dt, k_b_x, N_B, in);
        /* output element k pairs value k / 10 (a) with k % 10 (b) in every layout
         * except [10] (op) [10,1], where a varies along the inner dim */
        for (int k = 0; k < N_B * N_B; k++) {
          int i = k / N_B, j = k % N_B;
          if (L->ra == 1 && L->rb == 2) i = k % N_B, j = k / N_B;
          want[k] = binary_oracle(op, dt, k_b_x[i], k_b_x[j]);
        }
        op_call c = {.op = op};
        char ctx[96];
        snprintf(ctx, sizeof ctx, "%s %s %s", k_binary_name[op - OP_ADD], L->name,
                 graft_dtype_name(dt));
        check_op(&c, 2, in, dt, want, N_B * N_B, ctx, describe_binary, L);
        tu_destroy_outs(in, 2);
      }
}

/* i32: add, sub and mul wrap modulo 2^32; maximum, minimum and the
 * comparisons at the extremes. */
static double i32_oracle(int op, int32_t a, int32_t b) {
  uint32_t ua = (uint32_t)a, ub = (uint32_t)b, u;
  switch (op) {
  case OP_ADD: u = ua + ub; break;
  case OP_SUB: u = ua - ub; break;
  case OP_MUL: u = ua * ub; break;
  case OP_MAXIMUM: return a > b ? a : b;
  case OP_MINIMUM: return a < b ? a : b;
  case OP_GREATER: return a > b;
  case OP_LESS: return a < b;
  default: return a == b;
  }
  return u <= (uint32_t)INT32_MAX ? (double)u : (double)u - 4294967296.0;
}

static void test_binary__i32_extremes_wrap(void **state) {
  (void)state;
  enum { NI = 6 };
  static const double vals[NI] = {INT32_MIN, INT32_MAX, -1, 0, 1, 65536};
  static const int ops[] = {OP_ADD, OP_SUB, OP_MUL, OP_MAXIMUM, OP_MINIMUM, OP_GREATER, OP_LESS,
                            OP_EQUAL};
  static const bin_layout L = {"[6,1] (op) [6]", 2, 1, {NI, 1}, {NI}};
  double want[NI * NI];
  for (size_t o = 0; o < TU_N_OF(ops); o++) {
    graft_tensor *in[2];
    bin_operands(&L, GRAFT_I32, vals, NI, in);
    for (int k = 0; k < NI * NI; k++)
      want[k] = i32_oracle(ops[o], (int32_t)vals[k / NI], (int32_t)vals[k % NI]);
    op_call c = {.op = ops[o]};
    char ctx[64];
    snprintf(ctx, sizeof ctx, "%s i32", k_binary_name[ops[o] - OP_ADD]);
    check_op(&c, 2, in, GRAFT_I32, want, NI * NI, ctx, NULL, NULL);
    tu_destroy_outs(in, 2);
  }
}

/* i32 neg, abs and square wrap too: -INT32_MIN = abs(INT32_MIN) =
 * INT32_MIN; sign is -1, 0 or 1. */
static void test_unary__i32_extremes_wrap(void **state) {
  (void)state;
  enum { NI = 5 };
  static const int64_t s[] = {NI};
  static const double x[NI] = {INT32_MIN, INT32_MAX, -1, 0, 65536};
  static const struct {
    int op;
    double want[NI];
  } rows[] = {
      {OP_NEG, {INT32_MIN, -INT32_MAX, 1, 0, -65536}},
      {OP_ABS, {INT32_MIN, INT32_MAX, 1, 0, 65536}},
      {OP_SQUARE, {0, 1, 1, 0, 0}}, /* (2^31)^2, (2^31 - 1)^2 and 2^32 modulo 2^32 */
      {OP_SIGN, {-1, 1, -1, 0, 1}},
  };
  for (size_t r = 0; r < TU_N_OF(rows); r++) {
    graft_tensor *in = tu_tensor_from(GRAFT_I32, 1, s, x);
    op_call c = {.op = rows[r].op};
    char ctx[32];
    snprintf(ctx, sizeof ctx, "%s i32", k_unary_name[rows[r].op]);
    check_op(&c, 1, &in, GRAFT_I32, rows[r].want, NI, ctx, NULL, NULL);
    graft_tensor_destroy(in);
  }
}

/* ---- where and mul_add: three operands over the special values ------------------------------ */

/* x0 [10,1,1], x1 [10,1], x2 [10]: output element (i, j, k) reads values
 * i, j, k. */
static void ternary_operands(graft_dtype dt0, graft_dtype dt, graft_tensor **in) {
  static const int64_t s0[] = {N_B, 1, 1}, s1[] = {N_B, 1}, s2[] = {N_B};
  in[0] = tu_tensor_from(dt0, 3, s0, k_b_x);
  in[1] = tu_tensor_from(dt, 2, s1, k_b_x);
  in[2] = tu_tensor_from(dt, 1, s2, k_b_x);
}

static void describe_ternary(char *buf, size_t len, graft_tensor *const *in, int64_t k,
                             const void *user) {
  (void)user;
  snprintf(buf, len, "(%g, %g, %g)", tu_get(in[0], k / (N_B * N_B)), tu_get(in[1], k / N_B % N_B),
           tu_get(in[2], k % N_B));
}

/* cond != 0 selects a (a NaN condition too; -0.0 selects b), and the
 * selected operand passes through unchanged (NaN, infinities, -0.0). */
static void test_graft_where__special_conditions_and_values(void **state) {
  (void)state;
  static double want[N_B * N_B * N_B];
  for (graft_dtype dc = GRAFT_F32; dc <= GRAFT_F64; dc++)
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
      graft_tensor *in[3];
      ternary_operands(dc, dt, in);
      for (int k = 0; k < N_B * N_B * N_B; k++) {
        double cnd = k_b_x[k / (N_B * N_B)];
        want[k] = in_dt(dt, cnd != 0 ? k_b_x[k / N_B % N_B] : k_b_x[k % N_B]);
      }
      op_call c = {.op = OP_WHERE};
      char ctx[64];
      snprintf(ctx, sizeof ctx, "where cond %s values %s", graft_dtype_name(dc),
               graft_dtype_name(dt));
      check_op(&c, 3, in, dt, want, N_B * N_B * N_B, ctx, describe_ternary, NULL);
      tu_destroy_outs(in, 3);
    }
}

/* (a * b) + c with the product rounded first, as mul then add. */
static void test_graft_mul_add__special_values(void **state) {
  (void)state;
  static double want[N_B * N_B * N_B];
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
    graft_tensor *in[3];
    ternary_operands(dt, dt, in);
    for (int k = 0; k < N_B * N_B * N_B; k++) {
      double a = k_b_x[k / (N_B * N_B)], b = k_b_x[k / N_B % N_B], cc = k_b_x[k % N_B];
      if (dt == GRAFT_F32) {
        float p = (float)a * (float)b;
        want[k] = (double)(p + (float)cc);
      } else {
        double p = a * b;
        want[k] = p + cc;
      }
    }
    op_call c = {.op = OP_MUL_ADD};
    char ctx[32];
    snprintf(ctx, sizeof ctx, "mul_add %s", graft_dtype_name(dt));
    check_op(&c, 3, in, dt, want, N_B * N_B * N_B, ctx, describe_ternary, NULL);
    tu_destroy_outs(in, 3);
  }
}

/* ---- casts -------------------------------------------------------------------------------- */

/* float -> i32 truncates toward zero, NaN -> 0, saturates; f64 -> f32
 * overflows to inf and keeps NaN, infinities and -0.0; i32 -> float
 * rounds to nearest. */
static void test_graft_cast__special_values(void **state) {
  (void)state;
  enum { NC = 13 };
  static const int64_t shape[] = {NC};
  static const double x[NC] = {NAN,   INFINITY,     -INFINITY,    -0.0,  2.9,   -2.9, 3e9,
                               -3e9,  2147483647.0, -2147483648.0, 1e300, -1e300, 1e-50};
  static const double to_i32[NC] = {0, INT32_MAX, INT32_MIN, 0, 2, -2, INT32_MAX, INT32_MIN,
                                    INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 0};
  for (graft_dtype from = GRAFT_F32; from <= GRAFT_F64; from++) {
    graft_tensor *in = tu_tensor_from(from, 1, shape, x);
    double want[NC];
    for (int k = 0; k < NC; k++) {
      double xv = tu_get(in, k);
      /* f32 inputs: 1e300 is already inf, 2147483647 rounds to 2^31 */
      want[k] = from == GRAFT_F32 && isinf(xv) ? (xv > 0 ? INT32_MAX : INT32_MIN) : to_i32[k];
    }
    op_call c = {.op = OP_CAST, .to = GRAFT_I32};
    char ctx[48];
    snprintf(ctx, sizeof ctx, "cast %s -> i32", graft_dtype_name(from));
    check_op(&c, 1, &in, GRAFT_I32, want, NC, ctx, NULL, NULL);
    graft_tensor_destroy(in);
  }
  graft_tensor *in = tu_tensor_from(GRAFT_F64, 1, shape, x);
  double want[NC];
  for (int k = 0; k < NC; k++) want[k] = (double)(float)x[k];
  op_call c = {.op = OP_CAST, .to = GRAFT_F32};
  check_op(&c, 1, &in, GRAFT_F32, want, NC, "cast f64 -> f32", NULL, NULL);
  graft_tensor_destroy(in);

  static const double ints[] = {16777217, -16777217, INT32_MAX, INT32_MIN};
  static const int64_t s4[] = {4};
  in = tu_tensor_from(GRAFT_I32, 1, s4, ints);
  double wf[4];
  for (int k = 0; k < 4; k++) wf[k] = (double)(float)ints[k];
  c.to = GRAFT_F32;
  check_op(&c, 1, &in, GRAFT_F32, wf, 4, "cast i32 -> f32", NULL, NULL);
  graft_tensor_destroy(in);
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* A [4,50] input, every row reduced (axis 1) and every column (axis 0,
 * the leading-block layout), and all of it (split into blocks on ws):
 * row 0 holds a NaN at column p, row 1 +inf and -inf, row 2 only -inf,
 * row 3 finite values. */
static void reduce_rows(double *x, int p) {
  for (int j = 0; j < 50; j++) {
    x[j] = j == p ? NAN : (double)(j % 7) - 3.0;
    x[50 + j] = j == 10 ? INFINITY : j == 20 ? -INFINITY : (double)(j % 5);
    x[100 + j] = -INFINITY;
    x[150 + j] = (double)(j % 9) - 4.0;
  }
}

/* The reduction of op over the values v[0..n) (stride s), in double. */
static double reduce_oracle(int op, const double *v, int n, int s) {
  double acc = op == OP_REDUCE_PROD ? 1.0 : op == OP_REDUCE_SUM || op == OP_REDUCE_MEAN ? 0.0
                                                                                     : -INFINITY;
  int any_nan = 0;
  for (int i = 0; i < n; i++) {
    double x = v[i * s];
    any_nan |= isnan(x);
    if (op == OP_REDUCE_SUM || op == OP_REDUCE_MEAN) acc += x;
    else if (op == OP_REDUCE_PROD) acc *= x;
    else acc = x > acc ? x : acc;
  }
  if (any_nan) return NAN;
  if (op == OP_REDUCE_MEAN) return acc / n;
  if (op == OP_LOGSUMEXP && isfinite(acc)) {
    double m = acc, sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp(v[i * s] - m);
    return m + log(sum);
  }
  return acc;
}

static void test_reductions__nan_and_infinities_in_every_layout(void **state) {
  (void)state;
  static const int ops[] = {OP_REDUCE_MAX, OP_REDUCE_SUM, OP_REDUCE_MEAN, OP_REDUCE_PROD,
                            OP_LOGSUMEXP};
  static const char *const names[] = {"reduce_max", "reduce_sum", "reduce_mean", "reduce_prod",
                                      "logsumexp"};
  static const int64_t shape[] = {4, 50};
  static const int nan_at[] = {0, 1, 17, 49};
  for (size_t o = 0; o < TU_N_OF(ops); o++)
    for (size_t pi = 0; pi < TU_N_OF(nan_at); pi++)
      for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++)
        for (int axis = -1; axis < 2; axis++) { /* -1: all */
          double x[200];
          reduce_rows(x, nan_at[pi]);
          graft_tensor *in = tu_tensor_from(dt, 2, shape, x);
          double want[50];
          int n_out;
          if (axis < 0) {
            n_out = 1;
            want[0] = reduce_oracle(ops[o], x, 200, 1);
          } else if (axis == 1) {
            n_out = 4;
            for (int r = 0; r < 4; r++) want[r] = reduce_oracle(ops[o], x + 50 * r, 50, 1);
          } else {
            n_out = 50;
            for (int j = 0; j < 50; j++) want[j] = reduce_oracle(ops[o], x + j, 4, 50);
          }
          /* sums of finite values here are exact in either dtype; the rest
           * are NaN, infinities or computed in double and rounded once */
          for (int k = 0; k < n_out; k++) want[k] = in_dt(dt, want[k]);
          op_call c = {.op = ops[o], .n_axes = axis < 0 ? 0 : 1, .axes = {axis}};
          char ctx[96];
          snprintf(ctx, sizeof ctx, "%s axis %d, NaN at column %d, %s", names[o], axis, nan_at[pi],
                   graft_dtype_name(dt));
          check_op_tol(&c, 1, &in, dt, want, n_out, ops[o] == OP_LOGSUMEXP ? rtol_of(dt) : 0.0,
                       ctx, NULL, NULL);
          graft_tensor_destroy(in);
        }
}

/* A NaN anywhere in a long vector reduced whole: ws splits the reduction
 * into blocks and combines them, and the NaN must survive the combine. */
static void test_reduce_max__nan_survives_split_reduction(void **state) {
  (void)state;
  enum { N = 4096 };
  static const int64_t shape[] = {N};
  static const int nan_at[] = {0, 1, 2047, 2048, N - 1};
  static double x[N];
  for (size_t pi = 0; pi < TU_N_OF(nan_at); pi++)
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
      for (int i = 0; i < N; i++) x[i] = i == nan_at[pi] ? NAN : (double)(i % 100);
      x[(nan_at[pi] + N / 2) % N] = INFINITY;
      graft_tensor *in = tu_tensor_from(dt, 1, shape, x);
      static const int ops[] = {OP_REDUCE_MAX, OP_REDUCE_SUM, OP_LOGSUMEXP};
      for (size_t o = 0; o < TU_N_OF(ops); o++) {
        op_call c = {.op = ops[o]};
        double want[1] = {NAN};
        char ctx[96];
        snprintf(ctx, sizeof ctx, "op %d over [%d], NaN at %d, %s", ops[o], N, nan_at[pi],
                 graft_dtype_name(dt));
        check_op(&c, 1, &in, dt, want, 1, ctx, NULL, NULL);
      }
      graft_tensor_destroy(in);
    }
}

/* ---- softmax, cross-entropy, one_hot ----------------------------------------------------------- */

/* Rows of [6,3]: a NaN, +inf, all -inf (max infinite: NaN rows, as
 * documented), a -inf among finite values (exp gives 0; log_softmax -inf),
 * +-0 and a finite row.  Along axis 1 and, transposed, axis 0. */
static void test_softmax__nan_and_infinite_rows(void **state) {
  (void)state;
  static const double x[6][3] = {{NAN, 1, 2},
                                 {INFINITY, 1, 2},
                                 {-INFINITY, -INFINITY, -INFINITY},
                                 {-INFINITY, 0, 0},
                                 {-0.0, 0.0, 0.0},
                                 {1, 2, 3}};
  for (int lg = 0; lg < 2; lg++)
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++)
      for (int axis = 0; axis < 2; axis++) {
        double xv[18], want[18];
        for (int r = 0; r < 6; r++) {
          double m = fmax(fmax(x[r][0], x[r][1]), x[r][2]), s = 0;
          int bad = isnan(x[r][0]) || isnan(x[r][1]) || isnan(x[r][2]) || isinf(m);
          for (int j = 0; j < 3; j++) s += exp(x[r][j] - m);
          for (int j = 0; j < 3; j++) {
            double w = bad ? NAN : lg ? x[r][j] - m - log(s) : exp(x[r][j] - m) / s;
            int k = axis == 1 ? 3 * r + j : 6 * j + r;
            xv[k] = x[r][j];
            want[k] = w;
          }
        }
        const int64_t shape[2] = {axis == 1 ? 6 : 3, axis == 1 ? 3 : 6};
        graft_tensor *in = tu_tensor_from(dt, 2, shape, xv);
        op_call c = {.op = lg ? OP_LOG_SOFTMAX : OP_SOFTMAX, .axis = axis};
        char ctx[64];
        snprintf(ctx, sizeof ctx, "%s axis %d %s", lg ? "log_softmax" : "softmax", axis,
                 graft_dtype_name(dt));
        check_op_tol(&c, 1, &in, dt, want, 18, rtol_of(dt), ctx, NULL, NULL);
        graft_tensor_destroy(in);
      }
}

/* One row per call: an infinite row max is the row's logsumexp itself, so
 * a label on a -inf logit costs +inf, a +inf logit beside a finite label
 * costs +inf and on the label itself inf - inf = NaN; a NaN row gives NaN. */
static void test_softmax_cross_entropy__infinite_logits(void **state) {
  (void)state;
  static const struct {
    double row[2];
    int label;
    double want;
  } rows[] = {
      {{-INFINITY, 0}, 1, 0.0},      {{-INFINITY, 0}, 0, INFINITY}, {{INFINITY, 0}, 1, INFINITY},
      {{INFINITY, 0}, 0, NAN},       {{NAN, 0}, 1, NAN},            {{-INFINITY, -INFINITY}, 0, NAN},
  };
  static const int64_t s12[] = {1, 2}, s1[] = {1};
  for (size_t r = 0; r < TU_N_OF(rows); r++)
    for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
      graft_tensor *in[2] = {tu_tensor_from(dt, 2, s12, rows[r].row),
                             tu_tensor_from(GRAFT_I32, 1, s1, (double[]){rows[r].label})};
      op_call c = {.op = OP_XENT};
      char ctx[96];
      snprintf(ctx, sizeof ctx, "softmax_cross_entropy [%g, %g] label %d %s", rows[r].row[0],
               rows[r].row[1], rows[r].label, graft_dtype_name(dt));
      check_op(&c, 2, in, dt, &rows[r].want, 1, ctx, NULL, NULL);
      tu_destroy_outs(in, 2);
    }
}

/* Labels outside [0, depth) give a zero row (documented), the extremes
 * included. */
static void test_graft_one_hot__labels_outside_depth(void **state) {
  (void)state;
  static const double labels[] = {0, -1, 3, 4, INT32_MIN, INT32_MAX, 2};
  enum { NL = 7, D = 4 };
  static const int64_t s[] = {NL};
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
    graft_tensor *in = tu_tensor_from(GRAFT_I32, 1, s, labels);
    double want[NL * D];
    for (int i = 0; i < NL; i++)
      for (int j = 0; j < D; j++) want[i * D + j] = labels[i] == j ? 1.0 : 0.0;
    op_call c = {.op = OP_ONE_HOT, .depth = D, .to = dt};
    check_op(&c, 1, &in, dt, want, NL * D, graft_dtype_name(dt), NULL, NULL);
    graft_tensor_destroy(in);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary__nan_inf_signed_zero),
      cmocka_unit_test(test_binary__all_pairs_of_special_values),
      cmocka_unit_test(test_binary__i32_extremes_wrap),
      cmocka_unit_test(test_unary__i32_extremes_wrap),
      cmocka_unit_test(test_graft_where__special_conditions_and_values),
      cmocka_unit_test(test_graft_mul_add__special_values),
      cmocka_unit_test(test_graft_cast__special_values),
      cmocka_unit_test(test_reductions__nan_and_infinities_in_every_layout),
      cmocka_unit_test(test_reduce_max__nan_survives_split_reduction),
      cmocka_unit_test(test_softmax__nan_and_infinite_rows),
      cmocka_unit_test(test_softmax_cross_entropy__infinite_logits),
      cmocka_unit_test(test_graft_one_hot__labels_outside_depth),
  };
  return cmocka_run_group_tests(tests, sw_setup, sw_teardown);
}
