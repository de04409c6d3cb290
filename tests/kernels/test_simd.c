/* The kernel loops built for SSE2 and AVX2 (GRAFT__SIMD_CLONES,
 * kernels_int.h) give the bits of plain scalar code: whichever build the
 * loader picked on this machine, every element of the elementwise kernels
 * (binary, unary, where, mul_add) and of the optimizer step (UPDATE: SGD,
 * momentum, Nesterov, Adam, AdamW) equals, bit for bit, the same operations
 * done one element at a time by a call this file keeps out of line (so it
 * is never vectorized), in f32 and f64.  A vector build that contracted a
 * multiply-add into an FMA, reassociated a sum or used an approximate
 * reciprocal would fail here.  Each kernel runs in three pieces whose
 * borders are not multiples of a vector's lanes, over an odd count, so
 * vector bodies, peeled heads and scalar tails all meet the reference.
 * NaN results are compared as NaN: which operand's payload an add passes
 * on is the compiler's choice of operand order, in either build. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "testutil.h"
#include "kernels/kernels_int.h"

#define N 1003 /* odd, so vector loops end in a tail */

/* Inputs: uniform values with zeros, signed zeros, infinities, NaNs and
 * subnormals sprinkled in. */
static double input(tu_rng *r, int i, int which, int dt_f32) {
  switch ((i * 7 + which * 3) % 61) {
  case 0: return 0.0;
  case 1: return -0.0;
  case 2: return INFINITY;
  case 3: return -INFINITY;
  case 4: return NAN;
  case 5: return dt_f32 ? 1e-40 : 1e-310; /* subnormal */
  default: return tu_uniform(r, -3.0, 3.0);
  }
}

static int same(double got, double want, int f32) {
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want);
  if (f32) {
    float g = (float)got, w = (float)want;
    return memcmp(&g, &w, sizeof g) == 0;
  }
  return memcmp(&got, &want, sizeof got) == 0;
}

/* ---- elementwise kernels --------------------------------------------------- */

enum { ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, NEG, SQRT, SQUARE, ABS, RELU, WHERE, MUL_ADD, N_OPS };

static const struct {
  const char *name;
  graft__op op;
  int arity;
} ops[N_OPS] = {
    [ADD] = {"add", GRAFT__OP_ADD, 2},         [SUB] = {"sub", GRAFT__OP_SUB, 2},
    [MUL] = {"mul", GRAFT__OP_MUL, 2},         [DIV] = {"div", GRAFT__OP_DIV, 2},
    [MAXIMUM] = {"maximum", GRAFT__OP_MAXIMUM, 2},
    [MINIMUM] = {"minimum", GRAFT__OP_MINIMUM, 2},
    [NEG] = {"neg", GRAFT__OP_NEG, 1},         [SQRT] = {"sqrt", GRAFT__OP_SQRT, 1},
    [SQUARE] = {"square", GRAFT__OP_SQUARE, 1}, [ABS] = {"abs", GRAFT__OP_ABS, 1},
    [RELU] = {"relu", GRAFT__OP_RELU, 1},      [WHERE] = {"where", GRAFT__OP_WHERE, 3},
    [MUL_ADD] = {"mul_add", GRAFT__OP_MUL_ADD, 3},
};

/* One element of op in type T, the way ops.h defines it (NaN-propagating
 * maximum/minimum and relu, a NaN condition counting as true). */
#define DEF_SCALAR(T, SQRTF)                                                   \
  static __attribute__((noinline)) T scalar_##T(int op, T a, T b, T c) {       \
    switch (op) {                                                              \
    case ADD: return a + b;                                                    \
    case SUB: return a - b;                                                    \
    case MUL: return a * b;                                                    \
    case DIV: return a / b;                                                    \
    case MAXIMUM: return a != a ? a : b != b ? b : a > b ? a : b;              \
    case MINIMUM: return a != a ? a : b != b ? b : a < b ? a : b;              \
    case NEG: return -a;                                                       \
    case SQRT: return SQRTF(a);                                                \
    case SQUARE: return a * a;                                                 \
    case ABS: return a < 0 ? -a : a == 0 ? (T)0 : a;                           \
    case RELU: return a > 0 || a != a ? a : (T)0;                              \
    case WHERE: return a != 0 ? b : c;                                         \
    default: {                                                                 \
      T p = a * b;                                                             \
      return p + c;                                                            \
    }                                                                          \
    }                                                                          \
  }
DEF_SCALAR(float, sqrtf)
DEF_SCALAR(double, sqrt)

/* Run fn over the node's units [0, N) in the three pieces cut[] makes
 * (borders that are not multiples of a vector's lanes). */
static void run_pieces(const graft__node *node, int n_in, const graft__tview *const *vin,
                       const graft__tview *out, graft__kernel_fn fn, const int64_t cut[4],
                       const char *what) {
  char msg[GRAFT__MSG_LEN] = "";
  graft__kargs k;
  memset(&k, 0, sizeof k);
  k.node = node;
  k.n_in = n_in;
  k.in = vin;
  k.out = out;
  k.msg = msg;
  k.units = N;
  for (int p = 0; p < 3; p++)
    if (fn(&k, cut[p], cut[p + 1]) != GRAFT_OK)
      fail_msg("%s over [%lld, %lld): %s", what, (long long)cut[p], (long long)cut[p + 1], msg);
}

/* Run op's kernel over x[0..arity) into y in three pieces. */
static void run_kernel(int op, graft_dtype dt, void *const x[3], void *y) {
  const int64_t shape[1] = {N};
  graft__node node;
  memset(&node, 0, sizeof node);
  node.op = ops[op].op;
  node.dtype = dt;
  node.rank = 1;
  node.n_in = ops[op].arity;
  graft__tview v[3], vy = {y, N, dt, 1, shape};
  const graft__tview *vin[3];
  for (int j = 0; j < ops[op].arity; j++) {
    v[j] = (graft__tview){x[j], N, dt, 1, shape};
    vin[j] = &v[j];
  }
  const int64_t cut[4] = {0, 3, 517, N};
  run_pieces(&node, ops[op].arity, vin, &vy, graft__kernels[node.op].run, cut, ops[op].name);
}

#define CHECK_OPS(T, DT)                                                                  \
  do {                                                                                    \
    tu_rng r = {11};                                                                      \
    static T x[3][N], y[N];                                                               \
    for (int j = 0; j < 3; j++)                                                           \
      for (int i = 0; i < N; i++) x[j][i] = (T)input(&r, i, j, DT == GRAFT_F32);           \
    for (int op = 0; op < N_OPS; op++) {                                                  \
      void *xs[3] = {x[0], x[1], x[2]};                                                   \
      run_kernel(op, DT, xs, y);                                                          \
      for (int i = 0; i < N; i++) {                                                       \
        T want = scalar_##T(op, x[0][i], x[1][i], x[2][i]);                               \
        if (!same(y[i], want, DT == GRAFT_F32))                                           \
          fail_msg("%s %s element %d (%a, %a, %a): kernel %a, scalar %a", ops[op].name,   \
                   graft_dtype_name(DT), i, (double)x[0][i], (double)x[1][i],             \
                   (double)x[2][i], (double)y[i], (double)want);                          \
      }                                                                                   \
    }                                                                                     \
  } while (0)

static void test_elementwise_kernels__scalar_bits(void **state) {
  (void)state;
  CHECK_OPS(float, GRAFT_F32);
  CHECK_OPS(double, GRAFT_F64);
}

/* ---- the optimizer step ---------------------------------------------------- */

/* hp: lr, c1, c2s, gs (the step's scalars); the rest from the node. */
typedef struct hyper {
  double lr, c1, c2s, gs, mu, b1, b2, eps, wd;
} hyper;

/* One element of the step in T, in kernels/optim.c's order of operations
 * (PyTorch's formulas). */
#define DEF_STEP(T, SQRTF)                                                                \
  static __attribute__((noinline)) void step_##T(int kind, const hyper *hd, T w, T g, T *m, \
                                                 T *v, T *wo) {                           \
    const T lr = (T)hd->lr, c1 = (T)hd->c1, c2s = (T)hd->c2s, gs = (T)hd->gs;              \
    const T mu = (T)hd->mu, b1 = (T)hd->b1, b2 = (T)hd->b2, eps = (T)hd->eps, wd = (T)hd->wd; \
    if (kind == GRAFT__UPDATE_SGD) {                                                      \
      T ge = gs * g + wd * w;                                                             \
      *wo = w - lr * ge;                                                                  \
    } else if (kind == GRAFT__UPDATE_MOMENTUM || kind == GRAFT__UPDATE_NESTEROV) {        \
      T ge = gs * g + wd * w;                                                             \
      T mn = mu * *m + ge;                                                                \
      T d = kind == GRAFT__UPDATE_NESTEROV ? ge + mu * mn : mn;                           \
      *m = mn;                                                                            \
      *wo = w - lr * d;                                                                   \
    } else {                                                                              \
      int decoupled = kind == GRAFT__UPDATE_ADAMW;                                        \
      const T step = lr / c1, shrink = decoupled ? (T)1 - lr * wd : (T)1;                 \
      const T l2 = decoupled ? (T)0 : wd;                                                 \
      T ge = gs * g + l2 * w;                                                             \
      T mn = b1 * *m + ((T)1 - b1) * ge;                                                  \
      T vn = b2 * *v + ((T)1 - b2) * ge * ge;                                             \
      T denom = SQRTF(vn) / c2s + eps;                                                    \
      *m = mn;                                                                            \
      *v = vn;                                                                            \
      *wo = w * shrink - step * (mn / denom);                                             \
    }                                                                                     \
  }
DEF_STEP(float, sqrtf)
DEF_STEP(double, sqrt)

static int slots_of(int kind) {
  return kind == GRAFT__UPDATE_SGD ? 0 : kind <= GRAFT__UPDATE_NESTEROV ? 1 : 2;
}

/* The UPDATE kernel over w, g, m, v (m, v as the kind needs), writing in
 * place (the variables themselves) or, out of place, to wo, mo, vo. */
static void run_update(int kind, const hyper *hd, graft_dtype dt, void *w, void *g, void *m,
                       void *v, void *hp, void *wo, void *mo, void *vo) {
  const int64_t shape[1] = {N}, hshape[1] = {GRAFT__UPDATE_HP};
  graft__node node;
  memset(&node, 0, sizeof node);
  node.op = GRAFT__OP_UPDATE;
  node.dtype = dt;
  node.rank = 1;
  node.attr.update.kind = kind;
  node.attr.update.n_vars = 1 + slots_of(kind);
  node.attr.update.mu = hd->mu;
  node.attr.update.b1 = hd->b1;
  node.attr.update.b2 = hd->b2;
  node.attr.update.eps = hd->eps;
  node.attr.update.wd = hd->wd;
  const int nv = 1 + slots_of(kind), n_in = 2 + nv;
  node.n_in = n_in;
  graft__tview vw = {w, N, dt, 1, shape}, vg = {g, N, dt, 1, shape},
               vh = {hp, GRAFT__UPDATE_HP, dt, 1, hshape}, vm = {m, N, dt, 1, shape},
               vv = {v, N, dt, 1, shape}, vwo = {wo, N, dt, 1, shape},
               vmo = {mo, N, dt, 1, shape}, vvo = {vo, N, dt, 1, shape};
  const graft__tview *vin[8] = {&vw, &vg, &vh};
  int j = 3;
  if (nv >= 2) vin[j++] = &vm;
  if (nv >= 3) vin[j++] = &vv;
  vin[j++] = &vwo;
  if (nv >= 2) vin[j++] = &vmo;
  if (nv >= 3) vin[j++] = &vvo;
  const int64_t cut[4] = {0, 5, 611, N};
  char what[32];
  snprintf(what, sizeof what, "update kind %d", kind);
  run_pieces(&node, n_in, vin, &vwo, graft__k_UPDATE, cut, what);
}

/* For each kind, with and without weight decay, in place and not: three
 * steps, each against the scalar step. */
#define CHECK_UPDATE(T, DT)                                                                \
  do {                                                                                     \
    for (int kind = GRAFT__UPDATE_SGD; kind <= GRAFT__UPDATE_ADAMW; kind++)                \
      for (int wdi = 0; wdi < 2; wdi++)                                                    \
        for (int inplace = 0; inplace < 2; inplace++) {                                    \
          tu_rng r = {29 + (uint64_t)kind};                                                \
          static T w[N], g[N], m[N], v[N], wo[N], mo[N], vo[N], rw[N], rm[N], rv[N];       \
          for (int i = 0; i < N; i++) {                                                    \
            rw[i] = w[i] = (T)tu_uniform(&r, -1, 1);                                       \
            rm[i] = m[i] = (T)tu_uniform(&r, -0.1, 0.1);                                   \
            rv[i] = v[i] = (T)tu_uniform(&r, 0, 0.01);                                     \
          }                                                                                \
          for (int s = 1; s <= 3; s++) {                                                   \
            hyper hd = {.lr = 0.01 * s, .c1 = 1 - pow(0.9, s), .c2s = sqrt(1 - pow(0.999, s)), \
                        .gs = 0.5, .mu = 0.9, .b1 = 0.9, .b2 = 0.999, .eps = 1e-8,         \
                        .wd = wdi ? 0.01 : 0};                                             \
            T hp[GRAFT__UPDATE_HP] = {(T)hd.lr, (T)hd.c1, (T)hd.c2s, (T)hd.gs};            \
            for (int i = 0; i < N; i++) g[i] = (T)input(&r, i, s, DT == GRAFT_F32);        \
            for (int i = 0; i < N; i++) step_##T(kind, &hd, rw[i], g[i], &rm[i], &rv[i], &rw[i]); \
            if (inplace) {                                                                 \
              run_update(kind, &hd, DT, w, g, m, v, hp, w, m, v);                          \
            } else {                                                                       \
              run_update(kind, &hd, DT, w, g, m, v, hp, wo, mo, vo);                       \
              memcpy(w, wo, sizeof w);                                                     \
              if (slots_of(kind) >= 1) memcpy(m, mo, sizeof m);                            \
              if (slots_of(kind) >= 2) memcpy(v, vo, sizeof v);                            \
            }                                                                              \
            for (int i = 0; i < N; i++) {                                                  \
              int ok = same(w[i], rw[i], DT == GRAFT_F32) &&                               \
                       (slots_of(kind) < 1 || same(m[i], rm[i], DT == GRAFT_F32)) &&       \
                       (slots_of(kind) < 2 || same(v[i], rv[i], DT == GRAFT_F32));         \
              if (!ok)                                                                     \
                fail_msg("update kind %d %s wd %d %s step %d element %d (g %a): w %a vs %a, " \
                         "m %a vs %a, v %a vs %a", kind, graft_dtype_name(DT), wdi,        \
                         inplace ? "in place" : "out of place", s, i, (double)g[i],        \
                         (double)w[i], (double)rw[i], (double)m[i], (double)rm[i],         \
                         (double)v[i], (double)rv[i]);                                     \
            }                                                                              \
          }                                                                                \
        }                                                                                  \
  } while (0)

static void test_update_kernel__scalar_bits(void **state) {
  (void)state;
  CHECK_UPDATE(float, GRAFT_F32);
  CHECK_UPDATE(double, GRAFT_F64);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_elementwise_kernels__scalar_bits),
      cmocka_unit_test(test_update_kernel__scalar_bits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
