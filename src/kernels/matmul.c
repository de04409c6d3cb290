/* graft kernels: matmul (f32/f64) through single-threaded CBLAS, and the
 * plain reference loop it is tested against.
 *
 * out[..., M, N] = op(a)[..., M, K] @ op(b)[..., K, N], where op transposes
 * the last two dims under GRAFT_TRANS_A / GRAFT_TRANS_B and the leading
 * (batch) dims of a and b broadcast NumPy-style to those of out.
 *
 * Units are the output columns of each row block of each batch (batches
 * x rb x N; kernels_int.h says why and how the plan picks rb).  A call for
 * units [begin, end) issues one gemm per (batch, row block) it touches,
 * over that block's rows [i0, i1) and the range's columns [j0, j1) in it:
 * op(b)[:, j0:j1] starts j0 columns into the stored b, or j0 rows down when
 * b is stored transposed; op(a)[i0:i1, :] starts i0 rows down the stored a,
 * or i0 columns in when a is stored transposed (same leading dims either
 * way); the result goes to out[i0:i1, j0:j1] with ldc = N.  No internal
 * blocking: a single call over all units of one row block is one gemm per
 * batch, exactly what a direct CBLAS call would do (a gemv where the block
 * is one column or one row).
 *
 * An optimized BLAS may sum an element differently depending on its place
 * in the call, so different splits of the units may differ in the last
 * bits.  That is fine: every executor runs a node as the same fixed list of
 * tiles (sched/tiles.c), which depends only on shapes and the grain.
 */
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "kernels/kernels_int.h"

typedef struct mm_geom {
  int64_t M, N, K;
  int trans_a, trans_b;
  int nb;                         /* batch rank of out */
  int64_t bdim[GRAFT_MAX_RANK];   /* out batch dims */
  int64_t astep[GRAFT_MAX_RANK];  /* elements of a per step of out batch dim d (0: broadcast) */
  int64_t bstep[GRAFT_MAX_RANK];
  int64_t batches;
  int64_t rb;                     /* row blocks per batch (units: batches x rb x N) */
  int64_t h;                      /* rows per block (graft__mm_block), the last one's fewer */
} mm_geom;

/* Per out batch dim, how far a's (or b's) matrices move: 0 where the operand
 * lacks the dim or has it as 1. */
static graft_status batch_steps(const graft__kargs *k, const graft__tview *t, int64_t mat,
                                const mm_geom *g, int64_t *step, const char *which) {
  int nt = t->rank - 2;
  int64_t s = mat;
  for (int d = g->nb - 1; d >= 0; d--) {
    int td = d - (g->nb - nt);
    if (td < 0) {
      step[d] = 0;
      continue;
    }
    int64_t n = t->shape[td];
    if (n != 1 && n != g->bdim[d])
      return graft__kernel_internal(k, "batch dim %d of %s is %lld, out has %lld", td, which,
                                    (long long)n, (long long)g->bdim[d]);
    step[d] = n == 1 ? 0 : s;
    s *= n;
  }
  return GRAFT_OK;
}

/* The row blocks the plan cut M into, from the unit count it gave the
 * node: a whole number of blocks of N columns per batch, each block
 * non-empty (graft__mm_block places them). */
static graft_status row_blocks(const graft__kargs *k, mm_geom *g) {
  g->rb = 1;
  g->h = g->M;
  if (g->M == 0 || g->N == 0 || g->batches == 0) return GRAFT_OK;
  const int64_t cols = g->batches * g->N;
  const int64_t rb = k->units / cols;
  const int64_t h = rb >= 1 && rb <= g->M ? graft__mm_block(g->M, rb) : 0;
  if (k->units % cols || !h || rb - 1 >= (g->M + h - 1) / h)
    return graft__kernel_internal(k, "%lld units are not row blocks of %lld rows x %lld columns "
                                  "in %lld batches", (long long)k->units, (long long)g->M,
                                  (long long)g->N, (long long)g->batches);
  g->rb = rb;
  g->h = h;
  return GRAFT_OK;
}

static graft_status mm_setup(const graft__kargs *k, mm_geom *g) {
  const graft__tview *a = k->in[0], *b = k->in[1], *c = k->out;
  if (a->dtype != GRAFT_F32 && a->dtype != GRAFT_F64)
    return graft__kernel_bad_dtype(k, a->dtype);
  if (b->dtype != a->dtype || c->dtype != a->dtype)
    return graft__kernel_internal(k, "dtypes %s x %s -> %s differ", graft_dtype_name(a->dtype),
                                  graft_dtype_name(b->dtype), graft_dtype_name(c->dtype));
  if (a->rank < 2 || b->rank < 2 || c->rank < 2 || c->rank < a->rank || c->rank < b->rank)
    return graft__kernel_internal(k, "ranks %d x %d -> %d", a->rank, b->rank, c->rank);
  unsigned flags = k->node->attr.matmul.flags;
  g->trans_a = (flags & GRAFT_TRANS_A) != 0;
  g->trans_b = (flags & GRAFT_TRANS_B) != 0;
  const int64_t *as = a->shape + a->rank - 2, *bs = b->shape + b->rank - 2;
  g->M = c->shape[c->rank - 2];
  g->N = c->shape[c->rank - 1];
  g->K = g->trans_a ? as[0] : as[1];
  int64_t am = g->trans_a ? as[1] : as[0];
  int64_t bk = g->trans_b ? bs[1] : bs[0], bn = g->trans_b ? bs[0] : bs[1];
  if (am != g->M || bk != g->K || bn != g->N)
    return graft__kernel_internal(k, "op(a) is %lldx%lld, op(b) %lldx%lld, out %lldx%lld",
                                  (long long)am, (long long)g->K, (long long)bk, (long long)bn,
                                  (long long)g->M, (long long)g->N);
  g->nb = c->rank - 2;
  g->batches = 1;
  for (int d = 0; d < g->nb; d++) {
    g->bdim[d] = c->shape[d];
    g->batches *= c->shape[d];
  }
  graft_status st = batch_steps(k, a, g->M * g->K, g, g->astep, "a");
  if (st == GRAFT_OK)
    st = batch_steps(k, b, g->K * g->N, g, g->bstep, "b");
  return st == GRAFT_OK ? row_blocks(k, g) : st;
}

/* Element offsets of batch bi's matrices in a and b. */
static void batch_offsets(const mm_geom *g, int64_t bi, int64_t *aoff, int64_t *boff) {
  *aoff = *boff = 0;
  for (int d = g->nb - 1; d >= 0; d--) {
    int64_t i = bi % g->bdim[d];
    bi /= g->bdim[d];
    *aoff += i * g->astep[d];
    *boff += i * g->bstep[d];
  }
}

/* Runs the trailing statements once per (batch, row block) segment that
 * units [begin, end) touch, with bi the batch, out[i0:i1, j0:j1] the
 * block's rows and the range's columns in it, and aoff / boff / coff the
 * element offsets of the batch's matrices in a, b and out. */
#define FOR_BATCH_BLOCK(g, begin, end, ...)                                   \
  do {                                                                        \
    const int64_t n_ = (g)->N;                                                \
    for (int64_t s_ = (begin) / n_; s_ * n_ < (end); s_++) {                  \
      int64_t i0, i1;                                                         \
      const int64_t bi = graft__mm_segment((g)->M, (g)->rb, (g)->h, s_, &i0, &i1); \
      const int64_t j0 = GRAFT__MAX((begin), s_ * n_) - s_ * n_;              \
      const int64_t j1 = GRAFT__MIN((end), (s_ + 1) * n_) - s_ * n_;          \
      int64_t aoff, boff, coff = bi * (g)->M * (g)->N;                        \
      batch_offsets((g), bi, &aoff, &boff);                                   \
      (void)aoff;                                                             \
      (void)boff;                                                             \
      __VA_ARGS__                                                             \
    }                                                                         \
  } while (0)

/* Zero the blocks of units [begin, end) of out. */
static void zero_units(const graft__kargs *k, const mm_geom *g, int64_t begin, int64_t end) {
  size_t es = graft_dtype_size(k->out->dtype);
  char *c = k->out->data;
  FOR_BATCH_BLOCK(g, begin, end, {
    for (int64_t i = i0; i < i1; i++)
      memset(c + (size_t)(coff + i * g->N + j0) * es, 0, (size_t)(j1 - j0) * es);
  });
}

/* out[i0:i1, j0:j1] = op(a)[i0:i1, :] @ op(b)[:, j0:j1] for one batch's
 * matrices a, b, c (K > 0): one gemm, or one gemv where the block is a
 * single column (a matrix-vector product) or a single row (OpenBLAS's gemm
 * is several times slower than its gemv on those).  The choice depends on
 * the block's shape only, so a tile always makes the same call. */
#define DEF_BLOCK(NAME, T, GEMM, GEMV)                                                  \
  static void NAME(const mm_geom *g, const T *a, const T *b, T *c, int64_t i0, int64_t i1, \
                   int64_t j0, int64_t j1) {                                            \
    const int m = (int)(i1 - i0), n = (int)(j1 - j0), kk = (int)g->K;                   \
    const int lda = (int)(g->trans_a ? g->M : g->K), ldb = (int)(g->trans_b ? g->K : g->N); \
    a += g->trans_a ? i0 : i0 * g->K; /* op(a)[i0, 0] */                               \
    b += g->trans_b ? j0 * g->K : j0; /* op(b)[0, j0] */                               \
    c += i0 * g->N + j0;                                                                \
    if (n == 1 || m == 1) {                                                             \
      /* beta = 0 may still read y: clear it so no stale NaN survives. */               \
      for (int64_t i = 0; i < m; i++) memset(c + i * g->N, 0, (size_t)n * sizeof(T));   \
    }                                                                                   \
    if (n == 1) {                                                                       \
      /* c[:, 0] = op(a)[i0:i1, :] @ op(b)[:, j0] */                                    \
      const int incb = g->trans_b ? 1 : (int)g->N;                                      \
      if (g->trans_a)                                                                   \
        GEMV(CblasRowMajor, CblasTrans, kk, m, 1, a, lda, b, incb, 0, c, (int)g->N);    \
      else                                                                              \
        GEMV(CblasRowMajor, CblasNoTrans, m, kk, 1, a, lda, b, incb, 0, c, (int)g->N);  \
    } else if (m == 1) {                                                                \
      /* c[0, :] = op(b)[:, j0:j1]^T @ op(a)[i0, :] */                                  \
      const int inca = g->trans_a ? (int)g->M : 1;                                      \
      if (g->trans_b)                                                                   \
        GEMV(CblasRowMajor, CblasNoTrans, n, kk, 1, b, ldb, a, inca, 0, c, 1);          \
      else                                                                              \
        GEMV(CblasRowMajor, CblasTrans, kk, n, 1, b, ldb, a, inca, 0, c, 1);            \
    } else {                                                                            \
      GEMM(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,                       \
           g->trans_b ? CblasTrans : CblasNoTrans, m, n, kk, 1, a, lda, b, ldb, 0, c,   \
           (int)g->N);                                                                  \
    }                                                                                   \
  }

DEF_BLOCK(block_f32, float, cblas_sgemm, cblas_sgemv)
DEF_BLOCK(block_f64, double, cblas_dgemm, cblas_dgemv)

graft_status graft__k_MATMUL(const graft__kargs *k, int64_t begin, int64_t end) {
  mm_geom g;
  graft_status st = mm_setup(k, &g);
  if (st == GRAFT_OK)
    st = graft__kernel_check_units(k, begin, end, g.batches * g.rb * g.N);
  if (st != GRAFT_OK || begin >= end || g.M == 0 || g.N == 0)
    return st;
  if (g.K == 0) {
    /* An empty sum; BLAS would also reject lda = 0. */
    zero_units(k, &g, begin, end);
    return GRAFT_OK;
  }
  if (g.M > INT_MAX || g.N > INT_MAX || g.K > INT_MAX) {
    if (k->msg)
      graft__msgf(k->msg, "matrix dims %lldx%lldx%lld exceed the BLAS int range",
                  (long long)g.M, (long long)g.K, (long long)g.N);
    return GRAFT_EUNSUPPORTED;
  }
  if (k->out->dtype == GRAFT_F32) {
    const float *a = k->in[0]->data, *b = k->in[1]->data;
    float *c = k->out->data;
    FOR_BATCH_BLOCK(&g, begin, end, { block_f32(&g, a + aoff, b + boff, c + coff, i0, i1, j0, j1); });
  } else {
    const double *a = k->in[0]->data, *b = k->in[1]->data;
    double *c = k->out->data;
    FOR_BATCH_BLOCK(&g, begin, end, { block_f64(&g, a + aoff, b + boff, c + coff, i0, i1, j0, j1); });
  }
  return GRAFT_OK;
}

/* The reference: one dot product per output element, accumulated in double
 * in increasing k. */
#define DEF_REF(NAME, T)                                                        \
  static void NAME(const graft__kargs *k, const mm_geom *g, int64_t begin, int64_t end) { \
    const T *a = k->in[0]->data, *b = k->in[1]->data;                          \
    T *c = k->out->data;                                                        \
    const int64_t M = g->M, N = g->N, K = g->K;                                 \
    FOR_BATCH_BLOCK(g, begin, end, {                                            \
      for (int64_t i = i0; i < i1; i++)                                         \
        for (int64_t j = j0; j < j1; j++) {                                     \
          double acc = 0.0;                                                     \
          for (int64_t p = 0; p < K; p++) {                                     \
            T av = g->trans_a ? a[aoff + p * M + i] : a[aoff + i * K + p];      \
            T bv = g->trans_b ? b[boff + j * K + p] : b[boff + p * N + j];      \
            acc += (double)av * (double)bv;                                     \
          }                                                                     \
          c[coff + i * N + j] = (T)acc;                                         \
        }                                                                       \
    });                                                                         \
  }

DEF_REF(ref_f32, float)
DEF_REF(ref_f64, double)

graft_status graft__matmul_ref(const graft__kargs *k, int64_t begin, int64_t end) {
  mm_geom g;
  graft_status st = mm_setup(k, &g);
  if (st == GRAFT_OK)
    st = graft__kernel_check_units(k, begin, end, g.batches * g.rb * g.N);
  if (st != GRAFT_OK || begin >= end || g.M == 0 || g.N == 0)
    return st;
  if (k->out->dtype == GRAFT_F32)
    ref_f32(k, &g, begin, end);
  else
    ref_f64(k, &g, begin, end);
  return GRAFT_OK;
}
