/* graft kernels: softmax, log_softmax and softmax_cross_entropy.
 *
 * All three are computed stably: the row max m is subtracted before exp, so
 * no exp overflows, and sums of exp run in double (f32 included) in
 * increasing index order.  A row holding NaN gives NaN; a row whose max is
 * infinite gives NaN in softmax / log_softmax (inf - inf), as in NumPy.
 */
#include <math.h>

#include "kernels/kernels_int.h"

/* Rows processed side by side when the axis is not the last one. */
#define CHUNK 256

/* Once m is NaN nothing compares greater, so NaN sticks. */
#define STEP_MAX(m, v) ((m) = ((v) > (m) || isnan(v)) ? (v) : (m))

/* The input seen as [outer, A, inner] around the softmax axis; row
 * r = q * inner + i holds the A elements x[q, :, i] (stride inner). */
typedef struct rows {
  int64_t outer, A, inner;
} rows;

/* Rows [begin, end) in blocks of neighbouring rows that share q, so each
 * pass over the axis reads contiguous runs of up to CHUNK elements.  Every
 * row sees the same operations in the same order whatever its block, so the
 * result does not depend on the split.  LOG selects log_softmax. */
#define DEF_SOFTMAX(NAME, T, LOG)                                               \
  static void NAME(const rows *g, const T *x, T *y, int64_t begin, int64_t end) { \
    double m[CHUNK], s[CHUNK];                                                  \
    const int64_t A = g->A, inner = g->inner;                                   \
    for (int64_t r = begin; r < end;) {                                         \
      const int64_t q = r / inner, i = r % inner;                               \
      const int64_t n = GRAFT__MIN(GRAFT__MIN((int64_t)CHUNK, inner - i), end - r); \
      const int64_t base = q * A * inner + i;                                   \
      for (int64_t j = 0; j < n; j++) {                                         \
        m[j] = -INFINITY;                                                       \
        s[j] = 0.0;                                                             \
      }                                                                         \
      for (int64_t t = 0; t < A; t++) {                                         \
        const T *xr = x + (base + t * inner);                                   \
        for (int64_t j = 0; j < n; j++)                                         \
          STEP_MAX(m[j], (double)xr[j]);                                        \
      }                                                                         \
      for (int64_t t = 0; t < A; t++) {                                         \
        const T *xr = x + (base + t * inner);                                   \
        for (int64_t j = 0; j < n; j++)                                         \
          s[j] += exp((double)xr[j] - m[j]);                                    \
      }                                                                         \
      if (LOG)                                                                  \
        for (int64_t j = 0; j < n; j++)                                         \
          s[j] = log(s[j]);                                                     \
      for (int64_t t = 0; t < A; t++) {                                         \
        const T *xr = x + (base + t * inner);                                   \
        T *yr = y + (base + t * inner);                                         \
        for (int64_t j = 0; j < n; j++) {                                       \
          const double z = (double)xr[j] - m[j];                                \
          yr[j] = (T)(LOG ? z - s[j] : exp(z) / s[j]);                          \
        }                                                                       \
      }                                                                         \
      r += n;                                                                   \
    }                                                                           \
  }

DEF_SOFTMAX(softmax_f32, float, 0)
DEF_SOFTMAX(softmax_f64, double, 0)
DEF_SOFTMAX(log_softmax_f32, float, 1)
DEF_SOFTMAX(log_softmax_f64, double, 1)

static graft_status run_softmax(const graft__kargs *k, int log_form, int64_t begin, int64_t end) {
  const graft__tview *in = k->in[0], *out = k->out;
  if (in->dtype != GRAFT_F32 && in->dtype != GRAFT_F64)
    return graft__kernel_bad_dtype(k, in->dtype);
  if (out->dtype != in->dtype || out->numel != in->numel)
    return graft__kernel_internal(k, "input %s of %lld elements, output %s of %lld",
                                  graft_dtype_name(in->dtype), (long long)in->numel,
                                  graft_dtype_name(out->dtype), (long long)out->numel);
  const int axis = k->node->attr.axis.axis;
  if (axis < 0 || axis >= in->rank)
    return graft__kernel_internal(k, "axis %d outside rank %d", axis, in->rank);
  rows g = {1, in->shape[axis], 1};
  for (int d = 0; d < axis; d++)
    g.outer *= in->shape[d];
  for (int d = axis + 1; d < in->rank; d++)
    g.inner *= in->shape[d];
  graft_status st = graft__kernel_check_units(k, begin, end, g.outer * g.inner);
  /* An empty axis leaves rows with nothing to write. */
  if (st != GRAFT_OK || begin >= end || g.A == 0)
    return st;
  if (in->dtype == GRAFT_F32)
    (log_form ? log_softmax_f32 : softmax_f32)(&g, in->data, out->data, begin, end);
  else
    (log_form ? log_softmax_f64 : softmax_f64)(&g, in->data, out->data, begin, end);
  return GRAFT_OK;
}

graft_status graft__k_SOFTMAX(const graft__kargs *k, int64_t begin, int64_t end) {
  return run_softmax(k, 0, begin, end);
}

graft_status graft__k_LOG_SOFTMAX(const graft__kargs *k, int64_t begin, int64_t end) {
  return run_softmax(k, 1, begin, end);
}

/* mean over rows of logsumexp(row) - row[label], in row order.  An infinite
 * row max is the row's logsumexp itself. */
#define DEF_XENT(NAME, T)                                                         \
  static double NAME(const T *x, const int32_t *labels, int64_t N, int64_t C) {   \
    double total = 0.0;                                                           \
    for (int64_t i = 0; i < N; i++) {                                             \
      const T *row = x + i * C;                                                   \
      double m = -INFINITY, s = 0.0;                                              \
      for (int64_t j = 0; j < C; j++)                                             \
        STEP_MAX(m, (double)row[j]);                                              \
      double lse = m;                                                             \
      if (isfinite(m)) {                                                          \
        for (int64_t j = 0; j < C; j++)                                           \
          s += exp((double)row[j] - m);                                           \
        lse = m + log(s);                                                         \
      }                                                                           \
      total += lse - (double)row[labels[i]];                                      \
    }                                                                             \
    return total / (double)N;                                                     \
  }

DEF_XENT(xent_f32, float)
DEF_XENT(xent_f64, double)

/* The loss of an empty batch is 0 (no terms; a NaN mean would poison the
 * sums a training loop builds on it). */
graft_status graft__k_SOFTMAX_XENT(const graft__kargs *k, int64_t begin, int64_t end) {
  const graft__tview *lg = k->in[0], *lb = k->in[1], *out = k->out;
  if (lg->dtype != GRAFT_F32 && lg->dtype != GRAFT_F64)
    return graft__kernel_bad_dtype(k, lg->dtype);
  if (lb->dtype != GRAFT_I32)
    return graft__kernel_bad_dtype(k, lb->dtype);
  if (out->dtype != lg->dtype || out->numel != 1 || lg->rank != 2 || lb->rank != 1 ||
      lb->shape[0] != lg->shape[0])
    return graft__kernel_internal(k, "logits rank %d, labels rank %d, output %s of %lld",
                                  lg->rank, lb->rank, graft_dtype_name(out->dtype),
                                  (long long)out->numel);
  graft_status st = graft__kernel_check_units(k, begin, end, 1);
  if (st != GRAFT_OK || begin >= end)
    return st;
  const int64_t N = lg->shape[0], C = lg->shape[1];
  const int32_t *labels = lb->data;
  /* Every label is checked before anything is computed, so a failure
   * leaves the output untouched. */
  for (int64_t i = 0; i < N; i++)
    if (labels[i] < 0 || labels[i] >= C) {
      if (k->msg)
        graft__msgf(k->msg, "label %d out of range [0, %lld) at row %lld", (int)labels[i],
                    (long long)C, (long long)i);
      return GRAFT_EINVAL;
    }
  if (lg->dtype == GRAFT_F32)
    *(float *)out->data = N > 0 ? (float)xent_f32(lg->data, labels, N, C) : 0.0f;
  else
    *(double *)out->data = N > 0 ? xent_f64(lg->data, labels, N, C) : 0.0;
  return GRAFT_OK;
}
