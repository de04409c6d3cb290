/* Reference kernels of the elementwise ops: leaves (fill, constant), unary
 * math, cast, broadcasting binary ops, where, and assign.
 *
 * Every kernel computes output elements [begin, end) in row-major order, and
 * each element is a pure function of its operands, so any split of the range
 * gives bitwise the same result.
 *
 * Dtype policy (the graph layer validates dtypes before a kernel runs; these
 * checks only turn a broken invariant into GRAFT_EDTYPE instead of a crash):
 *   i32 arithmetic wraps modulo 2^32 (computed in uint32_t, never signed
 *   overflow); float -> i32 casts truncate toward zero, NaN -> 0, and
 *   saturate to INT32_MIN / INT32_MAX; comparisons write 1 or 0 in the
 *   operands' dtype (0 when an operand is NaN); maximum / minimum propagate
 *   NaN from either operand and return b when the operands are equal (0.0
 *   and -0.0 too), the operand their gradient rule sends a tie to; relu and
 *   sign keep NaN.
 *
 * In place: reading and writing element i of the same buffer is fine, so the
 * output may alias an input that has the output's shape and element size.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_int.h"
#include "kernels/special.h"

#define MAX_IN 3

/* ---- broadcast iteration ---------------------------------------------
 *
 * A plan describes the output as a (collapsed) row-major box and gives each
 * input's element stride per dim, 0 where it broadcasts.  Output dims of size
 * 1 are dropped and neighbouring dims merged when every input is contiguous
 * across them, so equal shapes and scalars become one flat run and the inner
 * loops below see strides of only 0 or 1. */
typedef struct bplan {
  int rank; /* >= 1 */
  int n_in;
  int64_t dim[GRAFT_MAX_RANK];
  int64_t stride[MAX_IN][GRAFT_MAX_RANK];
} bplan;

typedef struct biter {
  int64_t coord[GRAFT_MAX_RANK];
  int64_t off[MAX_IN]; /* element offset of the current position per input */
} biter;

static void plan_init(bplan *p, const graft__kargs *k, int n_in) {
  const graft__tview *out = k->out;
  int r = out->rank;
  int64_t stride[MAX_IN][GRAFT_MAX_RANK];

  for (int j = 0; j < n_in; j++) {
    const graft__tview *in = k->in[j];
    int64_t s = 1;
    for (int d = r - 1; d >= 0; d--) {
      int id = d - (r - in->rank); /* right-aligned */
      if (id >= 0 && in->shape[id] != 1) {
        stride[j][d] = s;
        s *= in->shape[id];
      } else {
        stride[j][d] = 0;
      }
    }
  }

  p->rank = 0;
  p->n_in = n_in;
  for (int d = 0; d < r; d++) {
    if (out->shape[d] == 1)
      continue;
    int q = p->rank - 1;
    int merge = q >= 0;
    for (int j = 0; j < n_in && merge; j++)
      merge = p->stride[j][q] == stride[j][d] * out->shape[d];
    if (merge) {
      p->dim[q] *= out->shape[d];
      for (int j = 0; j < n_in; j++)
        p->stride[j][q] = stride[j][d];
    } else {
      p->dim[p->rank] = out->shape[d];
      for (int j = 0; j < n_in; j++)
        p->stride[j][p->rank] = stride[j][d];
      p->rank++;
    }
  }
  if (p->rank == 0) { /* one element */
    p->rank = 1;
    p->dim[0] = 1;
    for (int j = 0; j < n_in; j++)
      p->stride[j][0] = 0;
  }
}

/* Position it at flat output index i (the output is non-empty). */
static void iter_seek(const bplan *p, biter *it, int64_t i) {
  for (int j = 0; j < p->n_in; j++)
    it->off[j] = 0;
  for (int d = p->rank - 1; d >= 0; d--) {
    int64_t c = i % p->dim[d];
    i /= p->dim[d];
    it->coord[d] = c;
    for (int j = 0; j < p->n_in; j++)
      it->off[j] += c * p->stride[j][d];
  }
}

/* Elements left in the current innermost row, at most left. */
static int64_t iter_run(const bplan *p, const biter *it, int64_t left) {
  int64_t row = p->dim[p->rank - 1] - it->coord[p->rank - 1];
  return row < left ? row : left;
}

/* Advance by n elements, n <= iter_run(). */
static void iter_step(const bplan *p, biter *it, int64_t n) {
  int d = p->rank - 1;
  it->coord[d] += n;
  for (int j = 0; j < p->n_in; j++)
    it->off[j] += n * p->stride[j][d];
  while (d > 0 && it->coord[d] == p->dim[d]) {
    it->coord[d] = 0;
    for (int j = 0; j < p->n_in; j++)
      it->off[j] -= p->dim[d] * p->stride[j][d];
    d--;
    it->coord[d]++;
    for (int j = 0; j < p->n_in; j++)
      it->off[j] += p->stride[j][d];
  }
}

/* ---- loop templates --------------------------------------------------
 *
 * Each stamps one static function computing [begin, end) of k's output.
 * EXPR names its operands x (unary), a and b (binary); it may read k.  The
 * contiguous branches are the plain loops the compiler vectorizes; the
 * stride-0 branches hoist a broadcast operand.  The unary and binary ones
 * keep their broadcasting path in an out-of-line NAME_bcast, so the
 * same-shape path (a rank-0 value: one element) stays a few instructions. */

#define DEF_UNARY(NAME, TI, TO, EXPR)                                      \
  GRAFT__SIMD_OUTLINED static void NAME##_bcast(                           \
      const graft__kargs *k, int64_t begin, int64_t end) {                 \
    const TI *xs_ = (const TI *)k->in[0]->data;                            \
    TO *ys_ = (TO *)k->out->data;                                          \
    bplan p_;                                                              \
    biter it_;                                                             \
    plan_init(&p_, k, 1);                                                  \
    iter_seek(&p_, &it_, begin);                                           \
    int64_t sx_ = p_.stride[0][p_.rank - 1];                               \
    for (int64_t i_ = begin; i_ < end;) {                                  \
      int64_t n_ = iter_run(&p_, &it_, end - i_);                          \
      const TI *px_ = xs_ + it_.off[0];                                    \
      TO *py_ = ys_ + i_;                                                  \
      if (sx_ != 0) {                                                      \
        for (int64_t j_ = 0; j_ < n_; j_++) {                              \
          TI x = px_[j_];                                                  \
          py_[j_] = (EXPR);                                                \
        }                                                                  \
      } else {                                                             \
        TI x = px_[0];                                                     \
        TO r_ = (EXPR);                                                    \
        for (int64_t j_ = 0; j_ < n_; j_++)                                \
          py_[j_] = r_;                                                    \
      }                                                                    \
      i_ += n_;                                                            \
      iter_step(&p_, &it_, n_);                                            \
    }                                                                      \
  }                                                                        \
  GRAFT__SIMD_CLONES                                                       \
  static void NAME(const graft__kargs *k, int64_t begin, int64_t end) {    \
    const TI *xs_ = (const TI *)k->in[0]->data;                            \
    TO *ys_ = (TO *)k->out->data;                                          \
    if (k->in[0]->numel == k->out->numel) {                                \
      /* same shape (equal counts imply it under broadcasting): no plan */  \
      for (int64_t i_ = begin; i_ < end; i_++) {                           \
        TI x = xs_[i_];                                                    \
        ys_[i_] = (EXPR);                                                  \
      }                                                                    \
      return;                                                              \
    }                                                                      \
    NAME##_bcast(k, begin, end);                                           \
  }

#define DEF_BINARY(NAME, T, EXPR)                                          \
  GRAFT__SIMD_OUTLINED static void NAME##_bcast(                           \
      const graft__kargs *k, int64_t begin, int64_t end) {                 \
    const T *as_ = (const T *)k->in[0]->data;                              \
    const T *bs_ = (const T *)k->in[1]->data;                              \
    T *ys_ = (T *)k->out->data;                                            \
    bplan p_;                                                              \
    biter it_;                                                             \
    plan_init(&p_, k, 2);                                                  \
    iter_seek(&p_, &it_, begin);                                           \
    int64_t sa_ = p_.stride[0][p_.rank - 1];                               \
    int64_t sb_ = p_.stride[1][p_.rank - 1];                               \
    for (int64_t i_ = begin; i_ < end;) {                                  \
      int64_t n_ = iter_run(&p_, &it_, end - i_);                          \
      const T *pa_ = as_ + it_.off[0];                                     \
      const T *pb_ = bs_ + it_.off[1];                                     \
      T *py_ = ys_ + i_;                                                   \
      if (sa_ != 0 && sb_ != 0) {                                          \
        for (int64_t j_ = 0; j_ < n_; j_++) {                              \
          T a = pa_[j_], b = pb_[j_];                                      \
          py_[j_] = (EXPR);                                                \
        }                                                                  \
      } else if (sb_ != 0) {                                               \
        const T a0_ = pa_[0];                                              \
        for (int64_t j_ = 0; j_ < n_; j_++) {                              \
          T a = a0_, b = pb_[j_];                                          \
          py_[j_] = (EXPR);                                                \
        }                                                                  \
      } else if (sa_ != 0) {                                               \
        const T b0_ = pb_[0];                                              \
        for (int64_t j_ = 0; j_ < n_; j_++) {                              \
          T a = pa_[j_], b = b0_;                                          \
          py_[j_] = (EXPR);                                                \
        }                                                                  \
      } else {                                                             \
        T a = pa_[0], b = pb_[0];                                          \
        T r_ = (EXPR);                                                     \
        for (int64_t j_ = 0; j_ < n_; j_++)                                \
          py_[j_] = r_;                                                    \
      }                                                                    \
      i_ += n_;                                                            \
      iter_step(&p_, &it_, n_);                                            \
    }                                                                      \
  }                                                                        \
  GRAFT__SIMD_CLONES                                                       \
  static void NAME(const graft__kargs *k, int64_t begin, int64_t end) {    \
    const T *as_ = (const T *)k->in[0]->data;                              \
    const T *bs_ = (const T *)k->in[1]->data;                              \
    T *ys_ = (T *)k->out->data;                                            \
    const int64_t na_ = k->in[0]->numel, nb_ = k->in[1]->numel, no_ = k->out->numel; \
    if (na_ == no_ && nb_ == no_) {                                        \
      for (int64_t i_ = begin; i_ < end; i_++) {                           \
        T a = as_[i_], b = bs_[i_];                                        \
        ys_[i_] = (EXPR);                                                  \
      }                                                                    \
      return;                                                              \
    }                                                                      \
    /* a scalar operand (a hyperparameter, a loss scale): no plan either */ \
    if (na_ == no_ && nb_ == 1) {                                          \
      const T b = bs_[0];                                                  \
      for (int64_t i_ = begin; i_ < end; i_++) {                           \
        T a = as_[i_];                                                     \
        ys_[i_] = (EXPR);                                                  \
      }                                                                    \
      return;                                                              \
    }                                                                      \
    if (na_ == 1 && nb_ == no_) {                                          \
      const T a = as_[0];                                                  \
      for (int64_t i_ = begin; i_ < end; i_++) {                           \
        T b = bs_[i_];                                                     \
        ys_[i_] = (EXPR);                                                  \
      }                                                                    \
      return;                                                              \
    }                                                                      \
    /* one operand a row repeated over the other's leading dims (a bias    \
     * [C] over [N, C]): element i reads it at i % its length, no plan */  \
    const int rb_ = na_ == no_ && nb_ > 1 && graft__is_row_of(k->in[1], k->out);  \
    if (rb_ || (nb_ == no_ && na_ > 1 && graft__is_row_of(k->in[0], k->out))) {   \
      const int64_t len_ = rb_ ? nb_ : na_;                                \
      for (int64_t i_ = begin; i_ < end;) {                                \
        const int64_t j0_ = i_ % len_;                                     \
        const int64_t n_ = len_ - j0_ < end - i_ ? len_ - j0_ : end - i_;  \
        /* both advance by one: the full operand from i, the row from j0 */ \
        const T *pa_ = as_ + (rb_ ? i_ : j0_), *pb_ = bs_ + (rb_ ? j0_ : i_); \
        T *py_ = ys_ + i_;                                                 \
        for (int64_t j_ = 0; j_ < n_; j_++) {                              \
          T a = pa_[j_], b = pb_[j_];                                      \
          py_[j_] = (EXPR);                                                \
        }                                                                  \
        i_ += n_;                                                          \
      }                                                                    \
      return;                                                              \
    }                                                                      \
    NAME##_bcast(k, begin, end);                                           \
  }

/* Runs the trailing block over the broadcast runs of outputs [begin, end)
 * of a 3-input op: n_ outputs from py_ (in y, of TY) read inputs from p0_,
 * p1_, p2_ (in x0, x1, x2, of T0, T1, T2) with innermost strides s0_, s1_,
 * s2_ (0: a broadcast operand). */
#define FOR_RUNS3(k, begin, end, T0, x0, T1, x1, T2, x2, TY, y, ...)        \
  do {                                                                     \
    bplan p_;                                                              \
    biter it_;                                                             \
    plan_init(&p_, (k), 3);                                                \
    iter_seek(&p_, &it_, (begin));                                         \
    const int64_t s0_ = p_.stride[0][p_.rank - 1];                         \
    const int64_t s1_ = p_.stride[1][p_.rank - 1];                         \
    const int64_t s2_ = p_.stride[2][p_.rank - 1];                         \
    for (int64_t i_ = (begin); i_ < (end);) {                              \
      int64_t n_ = iter_run(&p_, &it_, (end) - i_);                        \
      const T0 *p0_ = (x0) + it_.off[0];                                   \
      const T1 *p1_ = (x1) + it_.off[1];                                   \
      const T2 *p2_ = (x2) + it_.off[2];                                   \
      TY *py_ = (y) + i_;                                                  \
      __VA_ARGS__                                                          \
      i_ += n_;                                                            \
      iter_step(&p_, &it_, n_);                                            \
    }                                                                      \
  } while (0)

/* cond != 0 ? a : b; a NaN condition counts as true (NaN != 0). */
#define DEF_WHERE(NAME, TC, T)                                             \
  GRAFT__SIMD_CLONES                                                       \
  static void NAME(const graft__kargs *k, int64_t begin, int64_t end) {    \
    const TC *cs_ = (const TC *)k->in[0]->data;                            \
    const T *as_ = (const T *)k->in[1]->data;                              \
    const T *bs_ = (const T *)k->in[2]->data;                              \
    T *ys_ = (T *)k->out->data;                                            \
    const int64_t no_ = k->out->numel;                                     \
    if (k->in[0]->numel == no_ &&                                          \
        (k->in[1]->numel == no_ || k->in[1]->numel == 1) &&                \
        (k->in[2]->numel == no_ || k->in[2]->numel == 1)) {                \
      /* full-shape condition, full or scalar branches (a gradient mask): \
       * unit or zero strides, a loop the compiler turns into blends */    \
      /* one loop per stride pair, so each is a plain select the compiler \
       * vectorizes (a random mask would mispredict a branch per element) */ \
      const int ua_ = k->in[1]->numel == no_, ub_ = k->in[2]->numel == no_; \
      /* a scalar branch is read once here; a full one only inside       \
       * [begin, end): its element 0 belongs to the first tile, which may  \
       * be overwriting it on another worker (output in place over it) */  \
      const T a0_ = ua_ ? (T)0 : as_[0], b0_ = ub_ ? (T)0 : bs_[0];        \
      /* (both sides loaded before the select: a conditional load is      \
       * control flow the vectorizer refuses) */                           \
      if (ua_ && ub_)                                                      \
        for (int64_t i_ = begin; i_ < end; i_++) {                         \
          const T av_ = as_[i_], bv_ = bs_[i_];                            \
          ys_[i_] = cs_[i_] != 0 ? av_ : bv_;                              \
        }                                                                  \
      else if (ua_)                                                        \
        for (int64_t i_ = begin; i_ < end; i_++) {                         \
          const T av_ = as_[i_];                                           \
          ys_[i_] = cs_[i_] != 0 ? av_ : b0_;                              \
        }                                                                  \
      else if (ub_)                                                        \
        for (int64_t i_ = begin; i_ < end; i_++) {                         \
          const T bv_ = bs_[i_];                                           \
          ys_[i_] = cs_[i_] != 0 ? a0_ : bv_;                              \
        }                                                                  \
      else                                                                 \
        for (int64_t i_ = begin; i_ < end; i_++)                           \
          ys_[i_] = cs_[i_] != 0 ? a0_ : b0_;                              \
      return;                                                              \
    }                                                                      \
    FOR_RUNS3(k, begin, end, TC, cs_, T, as_, T, bs_, T, ys_, {            \
      if (s0_ != 0 && s1_ != 0 && s2_ != 0) {                              \
        for (int64_t j_ = 0; j_ < n_; j_++)                                \
          py_[j_] = p0_[j_] != 0 ? p1_[j_] : p2_[j_];                      \
      } else {                                                             \
        for (int64_t j_ = 0; j_ < n_; j_++)                                \
          py_[j_] = p0_[j_ * s0_] != 0 ? p1_[j_ * s1_] : p2_[j_ * s2_];    \
      }                                                                    \
    });                                                                    \
  }

/* a * b + c with the product rounded first (two roundings, as mul then
 * add: the build has no floating-point contraction, -std=c11). */
#define DEF_MUL_ADD(NAME, T, CAN)                                          \
  GRAFT__SIMD_CLONES                                                       \
  static void NAME(const graft__kargs *k, int64_t begin, int64_t end) {    \
    const T *as_ = (const T *)k->in[0]->data;                              \
    const T *bs_ = (const T *)k->in[1]->data;                              \
    const T *cs_ = (const T *)k->in[2]->data;                              \
    T *ys_ = (T *)k->out->data;                                            \
    const int64_t no_ = k->out->numel;                                     \
    if (k->in[1]->numel == no_ && k->in[2]->numel == no_ &&                \
        (k->in[0]->numel == no_ || k->in[0]->numel == 1)) {                \
      /* full b and c, full or scalar a (an SGD step: -lr * g + w) */      \
      if (k->in[0]->numel == 1) {                                          \
        const T a0_ = as_[0];                                              \
        for (int64_t i_ = begin; i_ < end; i_++) {                         \
          const T p_ = a0_ * bs_[i_];                                      \
          ys_[i_] = CAN(p_ + cs_[i_]);                                     \
        }                                                                  \
      } else {                                                             \
        for (int64_t i_ = begin; i_ < end; i_++) {                         \
          const T p_ = as_[i_] * bs_[i_];                                  \
          ys_[i_] = CAN(p_ + cs_[i_]);                                     \
        }                                                                  \
      }                                                                    \
      return;                                                              \
    }                                                                      \
    FOR_RUNS3(k, begin, end, T, as_, T, bs_, T, cs_, T, ys_, {              \
      for (int64_t j_ = 0; j_ < n_; j_++) {                                \
        const T prod_ = p0_[j_ * s0_] * p1_[j_ * s1_];                     \
        py_[j_] = CAN(prod_ + p2_[j_ * s2_]);                                   \
      }                                                                    \
    });                                                                    \
  }

/* ---- shared helpers -------------------------------------------------- */

/* Bytes per element, 0 for a value outside the enum (also guards the
 * dtype-indexed tables below). */
static size_t dtype_size(int dt) {
  switch (dt) {
  case GRAFT_F32: return sizeof(float);
  case GRAFT_F64: return sizeof(double);
  case GRAFT_I32: return sizeof(int32_t);
  default: return 0;
  }
}

static graft_status bad_dtype(const graft__kargs *k) {
  return graft__kernel_bad_dtype(k, (graft_dtype)k->out->dtype);
}

/* The failure half of check_args: the first check that fails, with its
 * message (out of line: a kernel on a rank-0 value is a few instructions,
 * and the checks run per node). */
static __attribute__((noinline, cold)) graft_status check_args_fail(const graft__kargs *k, int first,
                                                                   int n, int64_t begin,
                                                                   int64_t end) {
  if (k->n_in < first + n)
    return graft__kernel_internal(k, "kernel needs %d inputs, got %d", first + n, k->n_in);
  for (int j = first; j < first + n; j++) {
    if (k->in[j]->dtype != k->out->dtype) {
      if (k->msg)
        graft__msgf(k->msg, "input %d has dtype %s, output %s", j,
                    graft_dtype_name(k->in[j]->dtype), graft_dtype_name(k->out->dtype));
      return GRAFT_EDTYPE;
    }
  }
  return begin < end ? graft__kernel_check_units(k, begin, end, k->out->numel) : GRAFT_OK;
}

/* Inputs first..first+n-1 must exist and have the output's dtype, and
 * [begin, end) must lie within the output. */
static inline __attribute__((always_inline)) graft_status check_args(const graft__kargs *k,
                                                                    int first, int n,
                                                                    int64_t begin, int64_t end) {
  int ok = k->n_in >= first + n && (begin >= end || (begin >= 0 && end <= k->out->numel));
  for (int j = first; ok && j < first + n; j++) ok = k->in[j]->dtype == k->out->dtype;
  return ok ? GRAFT_OK : check_args_fail(k, first, n, begin, end);
}

/* uint32_t -> int32_t modulo 2^32 without implementation-defined
 * conversion; compiles to nothing. */
static inline int32_t wrap_i32(uint32_t u) {
  return u <= (uint32_t)INT32_MAX ? (int32_t)u : (int32_t)(u - 2147483648u) - INT32_MAX - 1;
}

/* Truncate toward zero, NaN -> 0, saturate (a plain cast is UB out of
 * range). */
static inline int32_t sat_i32(double v) {
  if (v != v)
    return 0;
  if (v >= 2147483647.0)
    return INT32_MAX;
  if (v <= -2147483648.0)
    return INT32_MIN;
  return (int32_t)v;
}

/* ---- element functions ----------------------------------------------- */

static inline float sigmoid_f32(float x) {
  /* exp of a non-positive argument only: no overflow for any x. */
  if (x >= 0.0f)
    return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}

static inline double sigmoid_f64(double x) {
  if (x >= 0.0)
    return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}

/* NaN stays NaN so non-finite checks downstream still see it. */
#define RELU_EXPR(x, zero) ((x) > (zero) || (x) != (x) ? (x) : (zero))
/* -1, 0 or 1; the sign of zero and NaN pass through. */
#define SIGN_F_EXPR(x, one) ((x) > 0 ? (one) : (x) < 0 ? -(one) : (x))
#define MAX_F_EXPR(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b))
#define MIN_F_EXPR(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b))

static inline int32_t neg_i32(int32_t x) { return wrap_i32(0u - (uint32_t)x); }
static inline int32_t square_i32(int32_t x) { return wrap_i32((uint32_t)x * (uint32_t)x); }
static inline int32_t abs_i32(int32_t x) { return x < 0 ? neg_i32(x) : x; }
static inline int32_t sign_i32(int32_t x) { return (x > 0) - (x < 0); }
static inline int32_t add_i32(int32_t a, int32_t b) { return wrap_i32((uint32_t)a + (uint32_t)b); }
static inline int32_t sub_i32(int32_t a, int32_t b) { return wrap_i32((uint32_t)a - (uint32_t)b); }
static inline int32_t mul_i32(int32_t a, int32_t b) { return wrap_i32((uint32_t)a * (uint32_t)b); }

/* ---- kernel generators ----------------------------------------------- */

#define CASE_(DT, FN)                                                      \
  case DT:                                                                 \
    FN(k, begin, end);                                                     \
    return GRAFT_OK;

#define UNARY_FLOAT(ENUM, F32, F64)                                        \
  DEF_UNARY(ENUM##_f32, float, float, F32)                                 \
  DEF_UNARY(ENUM##_f64, double, double, F64)                               \
  graft_status graft__k_##ENUM(const graft__kargs *k, int64_t begin, int64_t end) { \
    graft_status s = check_args(k, 0, 1, begin, end);                       \
    if (s != GRAFT_OK)                                                     \
      return s;                                                            \
    if (begin >= end)                                                      \
      return GRAFT_OK;                                                     \
    switch (k->out->dtype) {                                               \
      CASE_(GRAFT_F32, ENUM##_f32)                                         \
      CASE_(GRAFT_F64, ENUM##_f64)                                         \
    default:                                                               \
      return bad_dtype(k);                                                 \
    }                                                                      \
  }

#define UNARY_ALL(ENUM, F32, F64, I32)                                     \
  DEF_UNARY(ENUM##_f32, float, float, F32)                                 \
  DEF_UNARY(ENUM##_f64, double, double, F64)                               \
  DEF_UNARY(ENUM##_i32, int32_t, int32_t, I32)                             \
  graft_status graft__k_##ENUM(const graft__kargs *k, int64_t begin, int64_t end) { \
    graft_status s = check_args(k, 0, 1, begin, end);                       \
    if (s != GRAFT_OK)                                                     \
      return s;                                                            \
    if (begin >= end)                                                      \
      return GRAFT_OK;                                                     \
    switch (k->out->dtype) {                                               \
      CASE_(GRAFT_F32, ENUM##_f32)                                         \
      CASE_(GRAFT_F64, ENUM##_f64)                                         \
      CASE_(GRAFT_I32, ENUM##_i32)                                         \
    default:                                                               \
      return bad_dtype(k);                                                 \
    }                                                                      \
  }

#define BINARY_FLOAT(ENUM, F32, F64)                                       \
  DEF_BINARY(ENUM##_f32, float, F32)                                       \
  DEF_BINARY(ENUM##_f64, double, F64)                                      \
  graft_status graft__k_##ENUM(const graft__kargs *k, int64_t begin, int64_t end) { \
    graft_status s = check_args(k, 0, 2, begin, end);                       \
    if (s != GRAFT_OK)                                                     \
      return s;                                                            \
    if (begin >= end)                                                      \
      return GRAFT_OK;                                                     \
    switch (k->out->dtype) {                                               \
      CASE_(GRAFT_F32, ENUM##_f32)                                         \
      CASE_(GRAFT_F64, ENUM##_f64)                                         \
    default:                                                               \
      return bad_dtype(k);                                                 \
    }                                                                      \
  }

#define BINARY_ALL(ENUM, F32, F64, I32)                                    \
  DEF_BINARY(ENUM##_f32, float, F32)                                       \
  DEF_BINARY(ENUM##_f64, double, F64)                                      \
  DEF_BINARY(ENUM##_i32, int32_t, I32)                                     \
  graft_status graft__k_##ENUM(const graft__kargs *k, int64_t begin, int64_t end) { \
    graft_status s = check_args(k, 0, 2, begin, end);                       \
    if (s != GRAFT_OK)                                                     \
      return s;                                                            \
    if (begin >= end)                                                      \
      return GRAFT_OK;                                                     \
    switch (k->out->dtype) {                                               \
      CASE_(GRAFT_F32, ENUM##_f32)                                         \
      CASE_(GRAFT_F64, ENUM##_f64)                                         \
      CASE_(GRAFT_I32, ENUM##_i32)                                         \
    default:                                                               \
      return bad_dtype(k);                                                 \
    }                                                                      \
  }

/* ---- leaves ---------------------------------------------------------- */

graft_status graft__k_FILL(const graft__kargs *k, int64_t begin, int64_t end) {
  double v = k->node->fill;
  if (begin < end) {
    graft_status s = graft__kernel_check_units(k, begin, end, k->out->numel);
    if (s != GRAFT_OK)
      return s;
  }
  switch (k->out->dtype) {
  case GRAFT_F32: {
    float *y = (float *)k->out->data, f = (float)v;
    for (int64_t i = begin; i < end; i++)
      y[i] = f;
    return GRAFT_OK;
  }
  case GRAFT_F64: {
    double *y = (double *)k->out->data;
    for (int64_t i = begin; i < end; i++)
      y[i] = v;
    return GRAFT_OK;
  }
  case GRAFT_I32: {
    int32_t *y = (int32_t *)k->out->data, f = sat_i32(v);
    for (int64_t i = begin; i < end; i++)
      y[i] = f;
    return GRAFT_OK;
  }
  default:
    return bad_dtype(k);
  }
}

graft_status graft__k_CONST(const graft__kargs *k, int64_t begin, int64_t end) {
  size_t es = dtype_size(k->out->dtype);
  if (es == 0)
    return bad_dtype(k);
  if (begin >= end)
    return GRAFT_OK;
  graft_status s = graft__kernel_check_units(k, begin, end, k->out->numel);
  if (s != GRAFT_OK)
    return s;
  memcpy((char *)k->out->data + (size_t)begin * es,
         (const char *)k->node->attr.constant.data + (size_t)begin * es,
         (size_t)(end - begin) * es);
  return GRAFT_OK;
}

/* ---- unary ----------------------------------------------------------- */

UNARY_ALL(NEG, -x, -x, neg_i32(x))
UNARY_ALL(SQUARE, x * x, x * x, square_i32(x))
UNARY_FLOAT(SQRT, sqrtf(x), sqrt(x))
UNARY_FLOAT(EXP, expf(x), exp(x))
UNARY_FLOAT(LOG, logf(x), log(x))
UNARY_FLOAT(LOG1P, log1pf(x), log1p(x))
UNARY_FLOAT(TANH, graft__special_tanhf(x), tanh(x))
UNARY_FLOAT(SIGMOID, sigmoid_f32(x), sigmoid_f64(x))
UNARY_FLOAT(RELU, RELU_EXPR(x, 0.0f), RELU_EXPR(x, 0.0))
UNARY_ALL(ABS, fabsf(x), fabs(x), abs_i32(x))
UNARY_ALL(SIGN, SIGN_F_EXPR(x, 1.0f), SIGN_F_EXPR(x, 1.0), sign_i32(x))
UNARY_FLOAT(SIN, sinf(x), sin(x))
UNARY_FLOAT(COS, cosf(x), cos(x))
UNARY_FLOAT(TAN, tanf(x), tan(x))
/* Special functions run in double for f32 too: float versions are not
 * available for digamma/polygamma, and one code path is easier to trust. */
UNARY_FLOAT(LGAMMA, (float)graft__special_lgamma(x), graft__special_lgamma(x))
UNARY_FLOAT(DIGAMMA, (float)graft__special_digamma(x), graft__special_digamma(x))
UNARY_FLOAT(POLYGAMMA, (float)graft__special_polygamma(k->node->attr.polygamma.n, x),
            graft__special_polygamma(k->node->attr.polygamma.n, x))
UNARY_ALL(STOP_GRADIENT, x, x, x)

/* ---- cast ------------------------------------------------------------ */

DEF_UNARY(cast_f32_f32, float, float, x)
DEF_UNARY(cast_f32_f64, float, double, (double)x)
DEF_UNARY(cast_f32_i32, float, int32_t, sat_i32(x))
DEF_UNARY(cast_f64_f32, double, float, (float)x)
DEF_UNARY(cast_f64_f64, double, double, x)
DEF_UNARY(cast_f64_i32, double, int32_t, sat_i32(x))
DEF_UNARY(cast_i32_f32, int32_t, float, (float)x)
DEF_UNARY(cast_i32_f64, int32_t, double, (double)x)
DEF_UNARY(cast_i32_i32, int32_t, int32_t, x)

graft_status graft__k_CAST(const graft__kargs *k, int64_t begin, int64_t end) {
  if (k->n_in < 1)
    return graft__kernel_internal(k, "kernel needs 1 input, got %d", k->n_in);
  int from = k->in[0]->dtype, to = k->out->dtype;
  if (dtype_size(from) == 0)
    return graft__kernel_bad_dtype(k, (graft_dtype)from);
  if (dtype_size(to) == 0)
    return bad_dtype(k);
  if (begin >= end)
    return GRAFT_OK;
  graft_status s = graft__kernel_check_units(k, begin, end, k->out->numel);
  if (s != GRAFT_OK)
    return s;
  /* Indexed by (from, to); dtype_size() has ruled out values outside the
   * enum. */
  static void (*const table[3][3])(const graft__kargs *, int64_t, int64_t) = {
    [GRAFT_F32] = {[GRAFT_F32] = cast_f32_f32,
                   [GRAFT_F64] = cast_f32_f64,
                   [GRAFT_I32] = cast_f32_i32},
    [GRAFT_F64] = {[GRAFT_F32] = cast_f64_f32,
                   [GRAFT_F64] = cast_f64_f64,
                   [GRAFT_I32] = cast_f64_i32},
    [GRAFT_I32] = {[GRAFT_F32] = cast_i32_f32,
                   [GRAFT_F64] = cast_i32_f64,
                   [GRAFT_I32] = cast_i32_i32},
  };
  table[from][to](k, begin, end);
  return GRAFT_OK;
}

/* ---- binary ---------------------------------------------------------- */

BINARY_ALL(ADD, graft__canon_f32(a + b), graft__canon_f64(a + b), add_i32(a, b))
BINARY_ALL(SUB, graft__canon_f32(a - b), graft__canon_f64(a - b), sub_i32(a, b))
BINARY_ALL(MUL, graft__canon_f32(a * b), graft__canon_f64(a * b), mul_i32(a, b))
BINARY_FLOAT(DIV, graft__canon_f32(a / b), graft__canon_f64(a / b))
BINARY_FLOAT(POW, powf(a, b), pow(a, b))
BINARY_ALL(MAXIMUM, MAX_F_EXPR(a, b), MAX_F_EXPR(a, b), a > b ? a : b)
BINARY_ALL(MINIMUM, MIN_F_EXPR(a, b), MIN_F_EXPR(a, b), a < b ? a : b)
BINARY_ALL(GREATER, a > b ? 1.0f : 0.0f, a > b ? 1.0 : 0.0, a > b ? 1 : 0)
BINARY_ALL(LESS, a < b ? 1.0f : 0.0f, a < b ? 1.0 : 0.0, a < b ? 1 : 0)
BINARY_ALL(EQUAL, a == b ? 1.0f : 0.0f, a == b ? 1.0 : 0.0, a == b ? 1 : 0)

/* ---- where ----------------------------------------------------------- */

DEF_WHERE(where_f32_f32, float, float)
DEF_WHERE(where_f64_f32, double, float)
DEF_WHERE(where_i32_f32, int32_t, float)
DEF_WHERE(where_f32_f64, float, double)
DEF_WHERE(where_f64_f64, double, double)
DEF_WHERE(where_i32_f64, int32_t, double)
DEF_WHERE(where_f32_i32, float, int32_t)
DEF_WHERE(where_f64_i32, double, int32_t)
DEF_WHERE(where_i32_i32, int32_t, int32_t)

graft_status graft__k_WHERE(const graft__kargs *k, int64_t begin, int64_t end) {
  graft_status s = check_args(k, 1, 2, begin, end);
  if (s != GRAFT_OK)
    return s;
  int cond = k->in[0]->dtype, val = k->out->dtype;
  if (dtype_size(cond) == 0)
    return graft__kernel_bad_dtype(k, (graft_dtype)cond);
  if (dtype_size(val) == 0)
    return bad_dtype(k);
  if (begin >= end)
    return GRAFT_OK;
  /* Indexed by (condition dtype, value dtype), both checked above. */
  static void (*const table[3][3])(const graft__kargs *, int64_t, int64_t) = {
    [GRAFT_F32] = {[GRAFT_F32] = where_f32_f32,
                   [GRAFT_F64] = where_f32_f64,
                   [GRAFT_I32] = where_f32_i32},
    [GRAFT_F64] = {[GRAFT_F32] = where_f64_f32,
                   [GRAFT_F64] = where_f64_f64,
                   [GRAFT_I32] = where_f64_i32},
    [GRAFT_I32] = {[GRAFT_F32] = where_i32_f32,
                   [GRAFT_F64] = where_i32_f64,
                   [GRAFT_I32] = where_i32_i32},
  };
  table[cond][val](k, begin, end);
  return GRAFT_OK;
}

DEF_MUL_ADD(mul_add_f32, float, graft__canon_f32)
DEF_MUL_ADD(mul_add_f64, double, graft__canon_f64)

graft_status graft__k_MUL_ADD(const graft__kargs *k, int64_t begin, int64_t end) {
  graft_status s = check_args(k, 0, 3, begin, end);
  if (s != GRAFT_OK || begin >= end)
    return s;
  if (k->out->dtype == GRAFT_F32)
    mul_add_f32(k, begin, end);
  else if (k->out->dtype == GRAFT_F64)
    mul_add_f64(k, begin, end);
  else
    return bad_dtype(k);
  return GRAFT_OK;
}

/* ---- side effects ---------------------------------------------------- */

/* The staged new value of a variable; the input may broadcast to it. */
/* assign stages the variable's new value: a copy, which the memory planner
 * usually places in place over the value computed for it, so there is
 * nothing left to move. */
static graft_status graft__k_ASSIGN_COPY(const graft__kargs *k, int64_t begin, int64_t end);
UNARY_ALL(ASSIGN_COPY, x, x, x)

graft_status graft__k_ASSIGN(const graft__kargs *k, int64_t begin, int64_t end) {
  if (k->n_in == 1 && k->in[0]->data == k->out->data && k->in[0]->numel == k->out->numel &&
      k->in[0]->dtype == k->out->dtype)
    return GRAFT_OK;
  return graft__k_ASSIGN_COPY(k, begin, end);
}
