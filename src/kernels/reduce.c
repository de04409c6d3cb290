/* graft kernels: reductions (reduce_sum, reduce_mean, reduce_max,
 * reduce_prod, logsumexp).
 *
 * Units are output elements.  Each output element visits its reduced input
 * elements in row-major order of the reduced coordinates, whatever loop
 * shape runs, and starts from the same initial value: a result never depends
 * on how the output range is split, nor on which layout path ran.  One
 * exception, for speed: a sum or mean whose reduced elements form one
 * contiguous run (the trailing axes, or all of them) adds them into LANES
 * partial sums, element i into partial i % LANES, then the partials in a
 * fixed tree (sum_run), so its order depends on the run's length only: the
 * same input gives the same bits whatever splits the work (a chain of
 * 16,384 dependent double adds took 23 us, the lanes about 5).
 *
 * Accumulators: f32 sums, products and logsumexp run in double (rounded once
 * at the end) because a float accumulator loses digits quickly over long
 * rows; f64 runs in double; i32 sums and products run in uint32_t, whose
 * wrap-around is defined and equals the int32 result modulo 2^32.  Max needs
 * no wider type.
 *
 * Empty reductions give the identity: sum 0, prod 1, max -inf (i32
 * INT32_MIN), logsumexp -inf; mean is NaN (0/0).  Every NaN result is
 * written as C's NAN (CANON below).
 */
#include <math.h>
#include <stdint.h>

#include "kernels/kernels_int.h"

/* Outputs whose accumulators sit on the stack at once in the leading-block
 * path (2 KiB of doubles, twice for logsumexp). */
#define CHUNK 256

enum layout {
  LAY_INNER,   /* reduced axes are a trailing block: each output reads a contiguous run */
  LAY_OUTER,   /* reduced axes are a leading block: input is [R, O], sweep rows */
  LAY_GENERAL  /* anything else: odometer over the reduced axes */
};

/* The input seen as kept and reduced axes after dropping size-1 dims and
 * merging neighbours of the same kind (neither changes the row-major order
 * of the reduced coordinates, so results are the same as unmerged). */
typedef struct rplan {
  enum layout lay;
  int nk, nr;
  int64_t kdim[GRAFT_MAX_RANK], kstride[GRAFT_MAX_RANK];
  int64_t rdim[GRAFT_MAX_RANK], rstride[GRAFT_MAX_RANK];
  int64_t R;   /* reduced elements per output */
  int64_t O;   /* outputs */
} rplan;

static void make_plan(int rank, const int64_t *shape, unsigned mask, rplan *p) {
  int64_t stride[GRAFT_MAX_RANK], dim[GRAFT_MAX_RANK], st[GRAFT_MAX_RANK];
  int red[GRAFT_MAX_RANK];
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= shape[d];
  }
  int n = 0;
  for (int d = 0; d < rank; d++) {
    if (shape[d] == 1)
      continue;
    int r = (int)((mask >> d) & 1u);
    if (n > 0 && red[n - 1] == r) {
      dim[n - 1] *= shape[d];
      st[n - 1] = stride[d];
    } else {
      dim[n] = shape[d];
      st[n] = stride[d];
      red[n] = r;
      n++;
    }
  }
  p->nk = p->nr = 0;
  p->R = p->O = 1;
  for (int i = 0; i < n; i++) {
    if (red[i]) {
      p->rdim[p->nr] = dim[i];
      p->rstride[p->nr++] = st[i];
      p->R *= dim[i];
    } else {
      p->kdim[p->nk] = dim[i];
      p->kstride[p->nk++] = st[i];
      p->O *= dim[i];
    }
  }
  if (p->nr == 0) {
    /* Nothing (or only size-1 dims) reduced: one element per output. */
    p->rdim[0] = p->rstride[0] = 1;
    p->nr = 1;
    p->lay = LAY_INNER;
  } else if (p->nr == 1 && red[n - 1]) {
    p->lay = LAY_INNER;
  } else if (p->nr == 1 && red[0]) {
    p->lay = LAY_OUTER;
  } else {
    p->lay = LAY_GENERAL;
  }
}

/* Input offset of the first reduced element of the current output, kept
 * up to date by an odometer over the kept axes (no division per output). */
typedef struct cursor {
  int64_t idx[GRAFT_MAX_RANK];
  int64_t base;
} cursor;

static void cursor_start(cursor *c, const rplan *p, int64_t o) {
  c->base = 0;
  for (int d = p->nk - 1; d >= 0; d--) {
    c->idx[d] = o % p->kdim[d];
    o /= p->kdim[d];
    c->base += c->idx[d] * p->kstride[d];
  }
}

static void cursor_next(cursor *c, const rplan *p) {
  for (int d = p->nk - 1; d >= 0; d--) {
    c->base += p->kstride[d];
    if (++c->idx[d] < p->kdim[d])
      return;
    c->base -= p->kstride[d] * p->kdim[d];
    c->idx[d] = 0;
  }
}

/* Run BODY with v (type T) bound to each input element reduced into the
 * output whose first reduced element is x[base], in row-major order of the
 * reduced coordinates.  Offsets stay integers so no pointer ever leaves the
 * buffer; nothing is read when R is 0 (x may then be NULL). */
#define VISIT(p, T, x, base, v, BODY)                                      \
  do {                                                                     \
    if ((p)->R == 0)                                                       \
      break;                                                               \
    int64_t vidx_[GRAFT_MAX_RANK] = {0};                                   \
    int64_t voff_ = (base);                                                \
    const int vnr_ = (p)->nr;                                              \
    const int64_t vn_ = (p)->rdim[vnr_ - 1], vs_ = (p)->rstride[vnr_ - 1]; \
    for (;;) {                                                             \
      const T *vq_ = (x) + voff_;                                          \
      if (vs_ == 1) {                                                      \
        for (int64_t i_ = 0; i_ < vn_; i_++) {                             \
          T v = vq_[i_];                                                   \
          BODY;                                                            \
        }                                                                  \
      } else {                                                             \
        for (int64_t i_ = 0; i_ < vn_; i_++) {                             \
          T v = (x)[voff_ + i_ * vs_];                                     \
          BODY;                                                            \
        }                                                                  \
      }                                                                    \
      int d_ = vnr_ - 2;                                                   \
      for (; d_ >= 0; d_--) {                                              \
        voff_ += (p)->rstride[d_];                                         \
        if (++vidx_[d_] < (p)->rdim[d_])                                   \
          break;                                                           \
        voff_ -= (p)->rstride[d_] * (p)->rdim[d_];                         \
        vidx_[d_] = 0;                                                     \
      }                                                                    \
      if (d_ < 0)                                                          \
        break;                                                             \
    }                                                                      \
  } while (0)

static int32_t wrap_i32(uint32_t u) {
  /* Converting an out-of-range value to int32_t is implementation-defined;
   * this spelling is exact everywhere. */
  return u <= (uint32_t)INT32_MAX ? (int32_t)u
                                  : (int32_t)(u - 2147483648u) - INT32_MAX - 1;
}

/* Partial sums of a contiguous run (see the top). */
#define LANES 16

/* The LANES partials added pairwise: ((p0 + p1) + (p2 + p3)) + ... */
static double add_lanes(double *a) {
  for (int w = 1; w < LANES; w *= 2)
    for (int i = 0; i < LANES; i += 2 * w) a[i] += a[i + w];
  return a[0];
}

#define DEF_SUM_RUN(NAME, T)                                                   \
  GRAFT__SIMD_OUTLINED static double NAME(const T *x, int64_t n) {             \
    double a[LANES] = {0};                                                     \
    int64_t i = 0;                                                             \
    for (; i + LANES <= n; i += LANES)                                         \
      for (int j = 0; j < LANES; j++) a[j] += (double)x[i + j];                \
    for (int j = 0; i < n; i++, j++) a[j] += (double)x[i];                     \
    return add_lanes(a);                                                       \
  }

DEF_SUM_RUN(sum_run_f32, float)
DEF_SUM_RUN(sum_run_f64, double)

/* The run's sum where the reduced elements of an output are one contiguous
 * run and the rule adds (sum, mean; not for i32, which wraps in uint32_t). */
#define SUM_RUN(T, x, n) _Generic((const T *)0, const float *: sum_run_f32, \
                                  const double *: sum_run_f64)((x), (n))

/* A NaN result is written as the one quiet NaN (NAN): which NaN an add or a
 * multiply passes on when both operands are NaN (an input NaN, inf - inf)
 * is the order's and the compiler's choice, and a split reduction adds in
 * another order than a whole one, so only a canonical NaN keeps results
 * bitwise equal across splits, grains, executors and compilers.  Integers
 * pass through. */
static inline int32_t canon_i32(int32_t v) { return v; }
#define CANON(v) _Generic((v), float: graft__canon_f32, double: graft__canon_f64, int32_t: canon_i32)(v)

/* Step and finish rules: STEP(acc, v) folds one element in, FIN(acc, R)
 * turns the accumulator of R elements into the output value. */
#define STEP_ADD(acc, v) ((acc) += (v))
#define STEP_MUL(acc, v) ((acc) *= (v))
#define STEP_UADD(acc, v) ((acc) += (uint32_t)(v))
#define STEP_UMUL(acc, v) ((acc) = (uint32_t)((uint64_t)(acc) * (uint32_t)(v)))
/* Once acc is NaN nothing compares greater, so NaN sticks. */
#define STEP_FMAX(acc, v) ((acc) = ((v) > (acc) || isnan(v)) ? (v) : (acc))
#define STEP_IMAX(acc, v) ((acc) = (v) > (acc) ? (v) : (acc))

#define FIN_F32(acc, R) ((float)(acc))
#define FIN_SAME(acc, R) (acc)
#define FIN_I32(acc, R) wrap_i32(acc)
#define FIN_MEAN_F32(acc, R) ((float)((R) > 0 ? (acc) / (double)(R) : NAN))
#define FIN_MEAN_F64(acc, R) ((R) > 0 ? (acc) / (double)(R) : NAN)

/* RUN(T, acc, x, n): 1 after setting acc to the sum of the contiguous run
 * x[0, n) where the rule adds (SUM_RUN), 0 where it keeps to VISIT. */
#define RUN_SUM(T, acc, x, n) ((acc) = SUM_RUN(T, (x), (n)), 1)
#define RUN_NONE(T, acc, x, n) 0

/* The leading-block sweep of a sum: acc[j] += x[i * O + j] for rows i in
 * [0, R), columns j in [0, n) (x already at the block's first column), in
 * row order: the loop of the generic sweep, built for SSE2 and AVX2 (a bias
 * gradient, [256, 1024] -> [1024], is all this loop). */
#define DEF_OUTER_SUM(NAME, T)                                                 \
  GRAFT__SIMD_OUTLINED static void NAME(const T *x, int64_t R, int64_t O, int64_t n, \
                                        double *acc) {                          \
    for (int64_t i = 0; i < R; i++) {                                          \
      const T *row = x + i * O;                                                \
      for (int64_t j = 0; j < n; j++) acc[j] += (double)row[j];                \
    }                                                                          \
  }

DEF_OUTER_SUM(outer_sum_f32, float)
DEF_OUTER_SUM(outer_sum_f64, double)

/* OUTER(T, acc, x, R, O, n): 1 after the leading-block sweep of a sum into
 * acc (OUTER_SUM), 0 where the rule's own loop runs (OUTER_NONE). */
#define OUTER_SUM(T, acc, x, R, O, n)                                          \
  (_Generic((const T *)0, const float *: outer_sum_f32,                        \
            const double *: outer_sum_f64)((x), (R), (O), (n), (acc)), 1)
#define OUTER_NONE(T, acc, x, R, O, n) 0

/* One-pass reduction kernel over output range [begin, end) (non-empty). */
#define DEF_REDUCE(NAME, T, A, INIT, STEP, FIN, RUN, OUTER)                      \
  static void NAME(const rplan *p, const T *x, T *y, int64_t begin, int64_t end) { \
    if (p->lay == LAY_OUTER) {                                                   \
      A acc[CHUNK];                                                              \
      for (int64_t c0 = begin; c0 < end; c0 += CHUNK) {                          \
        int64_t n = GRAFT__MIN((int64_t)CHUNK, end - c0);                        \
        for (int64_t j = 0; j < n; j++)                                          \
          acc[j] = (INIT);                                                       \
        if (!(p->R > 0 && OUTER(T, acc, x + c0, p->R, p->O, n))) /* x NULL at R 0 */ \
          for (int64_t i = 0; i < p->R; i++) {                                   \
            const T *row = x + (i * p->O + c0);                                  \
            for (int64_t j = 0; j < n; j++)                                      \
              STEP(acc[j], row[j]);                                              \
          }                                                                      \
        for (int64_t j = 0; j < n; j++)                                          \
          y[c0 + j] = CANON((T)FIN(acc[j], p->R));                               \
      }                                                                          \
      return;                                                                    \
    }                                                                            \
    cursor c;                                                                    \
    cursor_start(&c, p, begin);                                                  \
    for (int64_t o = begin; o < end; o++, cursor_next(&c, p)) {                  \
      A acc = (INIT);                                                            \
      if (!(p->R > 0 && p->nr == 1 && p->rstride[0] == 1 && RUN(T, acc, x + c.base, p->R))) \
        VISIT(p, T, x, c.base, v, STEP(acc, v));                                 \
      y[o] = CANON((T)FIN(acc, p->R));                                           \
    }                                                                            \
  }

DEF_REDUCE(sum_f32, float, double, 0.0, STEP_ADD, FIN_F32, RUN_SUM, OUTER_SUM)
DEF_REDUCE(sum_f64, double, double, 0.0, STEP_ADD, FIN_SAME, RUN_SUM, OUTER_SUM)
DEF_REDUCE(sum_i32, int32_t, uint32_t, 0u, STEP_UADD, FIN_I32, RUN_NONE, OUTER_NONE)
DEF_REDUCE(mean_f32, float, double, 0.0, STEP_ADD, FIN_MEAN_F32, RUN_SUM, OUTER_SUM)
DEF_REDUCE(mean_f64, double, double, 0.0, STEP_ADD, FIN_MEAN_F64, RUN_SUM, OUTER_SUM)
DEF_REDUCE(max_f32, float, float, -INFINITY, STEP_FMAX, FIN_SAME, RUN_NONE, OUTER_NONE)
DEF_REDUCE(max_f64, double, double, -INFINITY, STEP_FMAX, FIN_SAME, RUN_NONE, OUTER_NONE)
DEF_REDUCE(max_i32, int32_t, int32_t, INT32_MIN, STEP_IMAX, FIN_SAME, RUN_NONE, OUTER_NONE)
DEF_REDUCE(prod_f32, float, double, 1.0, STEP_MUL, FIN_F32, RUN_NONE, OUTER_NONE)
DEF_REDUCE(prod_f64, double, double, 1.0, STEP_MUL, FIN_SAME, RUN_NONE, OUTER_NONE)
DEF_REDUCE(prod_i32, int32_t, uint32_t, 1u, STEP_UMUL, FIN_I32, RUN_NONE, OUTER_NONE)

/* logsumexp = m + log(sum exp(x - m)) with m the max, so no exp overflows.
 * An infinite max is the answer itself (all -inf gives -inf, any +inf gives
 * +inf); a NaN max propagates. */
static double lse_fin(double m, double s) {
  return isfinite(m) ? m + log(s) : m;
}

#define STEP_EXP(acc, v, m) ((acc) += exp((double)(v) - (m)))

#define DEF_LSE(NAME, T)                                                         \
  static void NAME(const rplan *p, const T *x, T *y, int64_t begin, int64_t end) { \
    if (p->lay == LAY_OUTER) {                                                   \
      double m[CHUNK], s[CHUNK];                                                 \
      for (int64_t c0 = begin; c0 < end; c0 += CHUNK) {                          \
        int64_t n = GRAFT__MIN((int64_t)CHUNK, end - c0);                        \
        for (int64_t j = 0; j < n; j++) {                                        \
          m[j] = -INFINITY;                                                      \
          s[j] = 0.0;                                                            \
        }                                                                        \
        for (int64_t i = 0; i < p->R; i++) {                                     \
          const T *row = x + (i * p->O + c0);                                    \
          for (int64_t j = 0; j < n; j++)                                        \
            STEP_FMAX(m[j], (double)row[j]);                                     \
        }                                                                        \
        for (int64_t i = 0; i < p->R; i++) {                                     \
          const T *row = x + (i * p->O + c0);                                    \
          for (int64_t j = 0; j < n; j++)                                        \
            STEP_EXP(s[j], row[j], m[j]);                                        \
        }                                                                        \
        for (int64_t j = 0; j < n; j++)                                          \
          y[c0 + j] = CANON((T)lse_fin(m[j], s[j]));                             \
      }                                                                          \
      return;                                                                    \
    }                                                                            \
    cursor c;                                                                    \
    cursor_start(&c, p, begin);                                                  \
    for (int64_t o = begin; o < end; o++, cursor_next(&c, p)) {                  \
      double m = -INFINITY, s = 0.0;                                             \
      VISIT(p, T, x, c.base, v, STEP_FMAX(m, (double)v));                        \
      if (isfinite(m))                                                           \
        VISIT(p, T, x, c.base, v, STEP_EXP(s, v, m));                            \
      y[o] = CANON((T)lse_fin(m, s));                                            \
    }                                                                            \
  }

DEF_LSE(lse_f32, float)
DEF_LSE(lse_f64, double)

/* Stands in for the i32 variants that supported() refuses. */
static void no_i32(const rplan *p, const void *x, void *y, int64_t begin, int64_t end) {
  (void)p, (void)x, (void)y, (void)begin, (void)end;
}

static int supported(enum graft__reduce_kind kind, graft_dtype dt) {
  if (dt == GRAFT_F32 || dt == GRAFT_F64)
    return 1;
  return dt == GRAFT_I32 && kind != GRAFT__RED_MEAN && kind != GRAFT__RED_LSE;
}

graft_status graft__reduce_run(const graft__kargs *k, enum graft__reduce_kind kind,
                               unsigned mask, int64_t begin, int64_t end) {
  const graft__tview *in = k->in[0], *out = k->out;
  if (!supported(kind, in->dtype))
    return graft__kernel_bad_dtype(k, in->dtype);
  if (in->dtype != out->dtype)
    return graft__kernel_internal(k, "input dtype %s but output dtype %s",
                                  graft_dtype_name(in->dtype), graft_dtype_name(out->dtype));
  if ((mask >> in->rank) != 0)
    return graft__kernel_internal(k, "axis mask 0x%x beyond rank %d", mask, in->rank);
  rplan p;
  make_plan(in->rank, in->shape, mask, &p);
  if (p.O != out->numel)
    return graft__kernel_internal(k, "output has %lld elements, expected %lld",
                                  (long long)out->numel, (long long)p.O);
  graft_status st = graft__kernel_check_units(k, begin, end, p.O);
  if (st != GRAFT_OK || begin >= end)
    return st;
  const void *x = in->data;
  void *y = out->data;
#define CASE(KIND, F32, F64, I32)         \
  case KIND:                              \
    if (in->dtype == GRAFT_F32)           \
      F32(&p, x, y, begin, end);          \
    else if (in->dtype == GRAFT_F64)      \
      F64(&p, x, y, begin, end);          \
    else                                  \
      I32(&p, x, y, begin, end);          \
    break;
  switch (kind) {
  CASE(GRAFT__RED_SUM, sum_f32, sum_f64, sum_i32)
  CASE(GRAFT__RED_MAX, max_f32, max_f64, max_i32)
  CASE(GRAFT__RED_PROD, prod_f32, prod_f64, prod_i32)
  CASE(GRAFT__RED_MEAN, mean_f32, mean_f64, no_i32)
  CASE(GRAFT__RED_LSE, lse_f32, lse_f64, no_i32)
  }
#undef CASE
  return GRAFT_OK;
}

graft_status graft__k_REDUCE_SUM(const graft__kargs *k, int64_t begin, int64_t end) {
  return graft__reduce_run(k, GRAFT__RED_SUM, k->node->attr.reduce.mask, begin, end);
}

graft_status graft__k_REDUCE_MEAN(const graft__kargs *k, int64_t begin, int64_t end) {
  return graft__reduce_run(k, GRAFT__RED_MEAN, k->node->attr.reduce.mask, begin, end);
}

graft_status graft__k_REDUCE_MAX(const graft__kargs *k, int64_t begin, int64_t end) {
  return graft__reduce_run(k, GRAFT__RED_MAX, k->node->attr.reduce.mask, begin, end);
}

graft_status graft__k_REDUCE_PROD(const graft__kargs *k, int64_t begin, int64_t end) {
  return graft__reduce_run(k, GRAFT__RED_PROD, k->node->attr.reduce.mask, begin, end);
}

graft_status graft__k_LOGSUMEXP(const graft__kargs *k, int64_t begin, int64_t end) {
  return graft__reduce_run(k, GRAFT__RED_LSE, k->node->attr.reduce.mask, begin, end);
}

/* ---- split reductions --------------------------------------------------
 * When a reduction has few outputs but many reduced elements, the scheduler
 * splits the reduced extent R into blocks: each block writes one partial per
 * output (graft__kernel_partial), and the node's last tile combines them in
 * block order (graft__kernel_combine).  The blocks depend only on shapes and
 * the grain, so the result is the same for every thread count. */

static int split_kind(const graft__kargs *k, enum graft__reduce_kind *kind) {
  switch (k->node->op) {
  case GRAFT__OP_REDUCE_SUM: *kind = GRAFT__RED_SUM; break;
  case GRAFT__OP_REDUCE_MEAN: *kind = GRAFT__RED_MEAN; break;
  case GRAFT__OP_REDUCE_MAX: *kind = GRAFT__RED_MAX; break;
  case GRAFT__OP_REDUCE_PROD: *kind = GRAFT__RED_PROD; break;
  case GRAFT__OP_LOGSUMEXP: *kind = GRAFT__RED_LSE; break;
  default: return 0;
  }
  /* i32 wraps modulo 2^32: keep those whole rather than carry them in
   * double partials. */
  return k->in[0]->dtype == GRAFT_F32 || k->in[0]->dtype == GRAFT_F64;
}

int64_t graft__kernel_split_extent(const graft__kargs *k) {
  enum graft__reduce_kind kind;
  if (!split_kind(k, &kind) || k->out->numel == 0) return 0;
  return k->in[0]->numel / k->out->numel;
}

/* NaN wins, then the larger value. */
static inline double max_nan(double m, double v) { return (m != m || v != v) ? m + v : (v > m ? v : m); }

static double elem(const graft__tview *x, int64_t off) {
  return x->dtype == GRAFT_F32 ? (double)((const float *)x->data)[off]
                               : ((const double *)x->data)[off];
}

/* Visit reduced positions [r0, r1) of the output whose first reduced element
 * is at base, in row-major order of the reduced coordinates. */
#define VISIT_RANGE(p, x, base, r0, r1, v, BODY)                         \
  do {                                                                 \
    int64_t ix_[GRAFT_MAX_RANK], off_ = (base), r_ = (r0);              \
    for (int d_ = (p)->nr - 1; d_ >= 0; d_--) {                         \
      ix_[d_] = r_ % (p)->rdim[d_];                                      \
      r_ /= (p)->rdim[d_];                                               \
      off_ += ix_[d_] * (p)->rstride[d_];                                \
    }                                                                  \
    for (int64_t n_ = (r0); n_ < (r1); n_++) {                           \
      double v = elem((x), off_);                                        \
      BODY;                                                            \
      for (int d_ = (p)->nr - 1; d_ >= 0; d_--) {                       \
        off_ += (p)->rstride[d_];                                        \
        if (++ix_[d_] < (p)->rdim[d_]) break;                           \
        off_ -= (p)->rstride[d_] * (p)->rdim[d_];                        \
        ix_[d_] = 0;                                                     \
      }                                                                \
    }                                                                  \
  } while (0)

graft_status graft__kernel_partial(const graft__kargs *k, int64_t r0, int64_t r1, double *part) {
  enum graft__reduce_kind kind;
  if (!split_kind(k, &kind)) return graft__kernel_internal(k, "op cannot be split");
  rplan p;
  make_plan(k->in[0]->rank, k->in[0]->shape, k->node->attr.reduce.mask, &p);
  cursor c;
  cursor_start(&c, &p, 0);
  for (int64_t o = 0; o < p.O; o++, cursor_next(&c, &p)) {
    double a = kind == GRAFT__RED_PROD ? 1.0 : kind == GRAFT__RED_MAX || kind == GRAFT__RED_LSE ? -INFINITY : 0.0;
    double s = 0.0;
    switch (kind) {
    case GRAFT__RED_SUM:
    case GRAFT__RED_MEAN:
      if (r1 > r0 && p.nr == 1 && p.rstride[0] == 1) { /* one run: the lanes (top) */
        const int64_t at = c.base + r0;
        const void *x = k->in[0]->data;
        a = k->in[0]->dtype == GRAFT_F32 ? SUM_RUN(float, (const float *)x + at, r1 - r0)
                                         : SUM_RUN(double, (const double *)x + at, r1 - r0);
      } else
        VISIT_RANGE(&p, k->in[0], c.base, r0, r1, v, a += v);
      break;
    case GRAFT__RED_PROD: VISIT_RANGE(&p, k->in[0], c.base, r0, r1, v, a *= v); break;
    case GRAFT__RED_MAX: VISIT_RANGE(&p, k->in[0], c.base, r0, r1, v, a = max_nan(a, v)); break;
    case GRAFT__RED_LSE:
      VISIT_RANGE(&p, k->in[0], c.base, r0, r1, v, a = max_nan(a, v));
      if (isfinite(a)) VISIT_RANGE(&p, k->in[0], c.base, r0, r1, v, s += exp(v - a));
      break;
    }
    part[2 * o] = a;
    part[2 * o + 1] = s;
  }
  return GRAFT_OK;
}

graft_status graft__kernel_combine(const graft__kargs *k, int64_t n_blocks, const double *parts) {
  enum graft__reduce_kind kind;
  if (!split_kind(k, &kind)) return graft__kernel_internal(k, "op cannot be split");
  int64_t O = k->out->numel, R = k->in[0]->numel / (O ? O : 1);
  for (int64_t o = 0; o < O; o++) {
    double a = kind == GRAFT__RED_PROD ? 1.0 : kind == GRAFT__RED_MAX || kind == GRAFT__RED_LSE ? -INFINITY : 0.0;
    for (int64_t b = 0; b < n_blocks; b++) {
      double v = parts[(b * O + o) * 2];
      if (kind == GRAFT__RED_PROD) a *= v;
      else if (kind == GRAFT__RED_MAX || kind == GRAFT__RED_LSE) a = max_nan(a, v);
      else a += v;
    }
    if (kind == GRAFT__RED_MEAN) a /= (double)R;
    if (kind == GRAFT__RED_LSE && isfinite(a)) {
      double s = 0.0;
      for (int64_t b = 0; b < n_blocks; b++) {
        double m = parts[(b * O + o) * 2];
        if (m != -INFINITY) s += parts[(b * O + o) * 2 + 1] * exp(m - a);
      }
      a += log(s);
    }
    if (k->out->dtype == GRAFT_F32) ((float *)k->out->data)[o] = CANON((float)a);
    else ((double *)k->out->data)[o] = CANON(a);
  }
  return GRAFT_OK;
}
