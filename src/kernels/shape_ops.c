/* graft kernels: shape ops (transpose, reshape, broadcast_to, sum_to_shape,
 * slice, concat, one_hot).
 *
 * Units are output elements for all of them.  The data-movement ops only
 * copy elements, so they work on element sizes rather than dtypes, with
 * memcpy over every contiguous run; copying never rounds, so any split of
 * the range gives the same bytes.  sum_to_shape is a reduction and shares
 * reduce.c's fixed summation order.
 */
#include <string.h>

#include "kernels/kernels_int.h"

/* Row-major element strides of a view. */
static void strides_of(const graft__tview *t, int64_t *st) {
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    st[d] = s;
    s *= t->shape[d];
  }
}

/* Copy len elements of es bytes from every stride-th element of s to d.
 * The fixed-size memcpy calls compile to plain loads and stores without
 * reading floats through integer lvalues. */
static void copy_run(char *d, const char *s, size_t es, int64_t stride, int64_t len) {
  if (stride == 1) {
    memcpy(d, s, (size_t)len * es);
  } else if (stride == 0 && es == 4) { /* broadcast: one value, loaded once */
    uint32_t v;
    memcpy(&v, s, 4);
    for (int64_t i = 0; i < len; i++)
      memcpy(d + 4 * i, &v, 4);
  } else if (stride == 0 && es == 8) {
    uint64_t v;
    memcpy(&v, s, 8);
    for (int64_t i = 0; i < len; i++)
      memcpy(d + 8 * i, &v, 8);
  } else if (es == 4) {
    for (int64_t i = 0; i < len; i++)
      memcpy(d + 4 * i, s + 4 * i * stride, 4);
  } else if (es == 8) {
    for (int64_t i = 0; i < len; i++)
      memcpy(d + 8 * i, s + 8 * i * stride, 8);
  } else {
    for (int64_t i = 0; i < len; i++)
      memcpy(d + (size_t)i * es, s + (size_t)(i * stride) * es, es);
  }
}

/* Out elements [begin, end) (non-empty) of an out of shape oshape, where
 * out coordinate c reads input element ibase + sum c[d] * istride[d]
 * (istride 0: broadcast).  Size-1 out dims are dropped and neighbours whose
 * input strides line up are merged first, so contiguous runs are as long as
 * the layout allows. */
static void gather(char *dst, const char *src, size_t es, int rank, const int64_t *oshape,
                   const int64_t *istride, int64_t ibase, int64_t begin, int64_t end) {
  int64_t dim[GRAFT_MAX_RANK], st[GRAFT_MAX_RANK], idx[GRAFT_MAX_RANK];
  int n = 0;
  for (int d = 0; d < rank; d++) {
    if (oshape[d] == 1)
      continue;
    if (n > 0 && st[n - 1] == istride[d] * oshape[d]) {
      dim[n - 1] *= oshape[d];
      st[n - 1] = istride[d];
    } else {
      dim[n] = oshape[d];
      st[n++] = istride[d];
    }
  }
  if (n == 0) {
    /* A single element. */
    memcpy(dst + (size_t)begin * es, src + (size_t)ibase * es, es);
    return;
  }
  int64_t ioff = ibase, rest = begin;
  for (int d = n - 1; d >= 0; d--) {
    idx[d] = rest % dim[d];
    rest /= dim[d];
    ioff += idx[d] * st[d];
  }
  const int last = n - 1;
  int64_t o = begin;
  for (;;) {
    int64_t len = GRAFT__MIN(dim[last] - idx[last], end - o);
    copy_run(dst + (size_t)o * es, src + (size_t)ioff * es, es, st[last], len);
    o += len;
    if (o >= end)
      break;
    /* The run ended at the end of the last dim: carry into the outer ones. */
    ioff -= idx[last] * st[last];
    idx[last] = 0;
    for (int d = last - 1; d >= 0; d--) {
      ioff += st[d];
      if (++idx[d] < dim[d])
        break;
      ioff -= st[d] * dim[d];
      idx[d] = 0;
    }
  }
}

/* Common checks of a one-input data-movement op: matching dtypes of a known
 * size, units within the output.  Sets *es. */
static graft_status check_move(const graft__kargs *k, int64_t begin, int64_t end, size_t *es) {
  const graft__tview *in = k->in[0], *out = k->out;
  *es = graft_dtype_size(in->dtype);
  if (*es == 0)
    return graft__kernel_bad_dtype(k, in->dtype);
  if (out->dtype != in->dtype)
    return graft__kernel_internal(k, "input dtype %s but output dtype %s",
                                  graft_dtype_name(in->dtype), graft_dtype_name(out->dtype));
  return graft__kernel_check_units(k, begin, end, out->numel);
}

graft_status graft__k_TRANSPOSE(const graft__kargs *k, int64_t begin, int64_t end) {
  const graft__tview *in = k->in[0], *out = k->out;
  size_t es;
  graft_status st = check_move(k, begin, end, &es);
  if (st != GRAFT_OK)
    return st;
  if (in->rank != out->rank)
    return graft__kernel_internal(k, "rank %d -> %d", in->rank, out->rank);
  const int *perm = k->node->attr.transpose.perm;
  int64_t ist[GRAFT_MAX_RANK], pst[GRAFT_MAX_RANK];
  unsigned seen = 0;
  strides_of(in, ist);
  for (int i = 0; i < out->rank; i++) {
    int p = perm[i];
    if (p < 0 || p >= in->rank || (seen >> p) & 1u || out->shape[i] != in->shape[p])
      return graft__kernel_internal(k, "perm[%d] = %d does not fit the shapes", i, p);
    seen |= 1u << p;
    pst[i] = ist[p];
  }
  if (begin < end)
    gather(out->data, in->data, es, out->rank, out->shape, pst, 0, begin, end);
  return GRAFT_OK;
}

graft_status graft__k_RESHAPE(const graft__kargs *k, int64_t begin, int64_t end) {
  const graft__tview *in = k->in[0], *out = k->out;
  size_t es;
  graft_status st = check_move(k, begin, end, &es);
  if (st != GRAFT_OK)
    return st;
  if (in->numel != out->numel)
    return graft__kernel_internal(k, "%lld elements -> %lld", (long long)in->numel,
                                  (long long)out->numel);
  if (begin < end)
    memcpy((char *)out->data + (size_t)begin * es, (const char *)in->data + (size_t)begin * es,
           (size_t)(end - begin) * es);
  return GRAFT_OK;
}

graft_status graft__k_BROADCAST_TO(const graft__kargs *k, int64_t begin, int64_t end) {
  const graft__tview *in = k->in[0], *out = k->out;
  size_t es;
  graft_status st = check_move(k, begin, end, &es);
  if (st != GRAFT_OK)
    return st;
  if (in->rank > out->rank)
    return graft__kernel_internal(k, "rank %d -> %d", in->rank, out->rank);
  int64_t ist[GRAFT_MAX_RANK], bst[GRAFT_MAX_RANK];
  strides_of(in, ist);
  const int lead = out->rank - in->rank;
  for (int d = 0; d < out->rank; d++) {
    if (d < lead) {
      bst[d] = 0;
      continue;
    }
    int64_t n = in->shape[d - lead];
    if (n != 1 && n != out->shape[d])
      return graft__kernel_internal(k, "dim %d of size %lld cannot broadcast to %lld", d - lead,
                                    (long long)n, (long long)out->shape[d]);
    bst[d] = n == 1 ? 0 : ist[d - lead];
  }
  if (begin < end)
    gather(out->data, in->data, es, out->rank, out->shape, bst, 0, begin, end);
  return GRAFT_OK;
}

graft_status graft__k_SUM_TO_SHAPE(const graft__kargs *k, int64_t begin, int64_t end) {
  const graft__tview *in = k->in[0], *out = k->out;
  /* Reduce every input axis the target lacks or holds as 1; the kept axes
   * then enumerate the output in its own row-major order.  Extra leading
   * target dims can only be 1. */
  const int lead = in->rank - out->rank;
  for (int od = 0; od < -lead; od++)
    if (out->shape[od] != 1)
      return graft__kernel_internal(k, "target dim %d is %lld beyond the input rank", od,
                                    (long long)out->shape[od]);
  unsigned mask = 0;
  for (int d = 0; d < in->rank; d++) {
    int od = d - lead;
    if (od < 0 || (out->shape[od] == 1 && in->shape[d] != 1))
      mask |= 1u << d;
    else if (out->shape[od] != in->shape[d])
      return graft__kernel_internal(k, "dim %d of size %lld does not sum to %lld", d,
                                    (long long)in->shape[d], (long long)out->shape[od]);
  }
  return graft__reduce_run(k, GRAFT__RED_SUM, mask, begin, end);
}

graft_status graft__k_SLICE(const graft__kargs *k, int64_t begin, int64_t end) {
  const graft__tview *in = k->in[0], *out = k->out;
  size_t es;
  graft_status st = check_move(k, begin, end, &es);
  if (st != GRAFT_OK)
    return st;
  if (in->rank != out->rank)
    return graft__kernel_internal(k, "rank %d -> %d", in->rank, out->rank);
  const int64_t *b = k->node->attr.slice.begin;
  int64_t ist[GRAFT_MAX_RANK], base = 0;
  strides_of(in, ist);
  for (int d = 0; d < in->rank; d++) {
    if (b[d] < 0 || out->shape[d] > in->shape[d] - b[d])
      return graft__kernel_internal(k, "dim %d: [%lld, +%lld) outside [0, %lld)", d,
                                    (long long)b[d], (long long)out->shape[d],
                                    (long long)in->shape[d]);
    base += b[d] * ist[d];
  }
  if (begin < end)
    gather(out->data, in->data, es, out->rank, out->shape, ist, base, begin, end);
  return GRAFT_OK;
}

/* Every input has out's dtype and rank, out's dims off the axis, and their
 * axis dims add up to out's. */
static graft_status check_concat(const graft__kargs *k, int axis) {
  const graft__tview *out = k->out;
  if (axis < 0 || axis >= out->rank)
    return graft__kernel_internal(k, "axis %d outside rank %d", axis, out->rank);
  int64_t total = 0;
  for (int j = 0; j < k->n_in; j++) {
    const graft__tview *t = k->in[j];
    if (t->dtype != out->dtype)
      return graft__kernel_internal(k, "input %d has dtype %s, output %s", j,
                                    graft_dtype_name(t->dtype), graft_dtype_name(out->dtype));
    if (t->rank != out->rank)
      return graft__kernel_internal(k, "input %d has rank %d, output %d", j, t->rank, out->rank);
    for (int d = 0; d < out->rank; d++)
      if (d != axis && t->shape[d] != out->shape[d])
        return graft__kernel_internal(k, "input %d dim %d is %lld, output %lld", j, d,
                                      (long long)t->shape[d], (long long)out->shape[d]);
    total += t->shape[axis];
  }
  if (total != out->shape[axis])
    return graft__kernel_internal(k, "inputs add up to %lld along axis %d, output has %lld",
                                  (long long)total, axis, (long long)out->shape[axis]);
  return GRAFT_OK;
}

graft_status graft__k_CONCAT(const graft__kargs *k, int64_t begin, int64_t end) {
  const graft__tview *out = k->out;
  const int axis = k->node->attr.axis.axis;
  size_t es = graft_dtype_size(out->dtype);
  if (es == 0)
    return graft__kernel_bad_dtype(k, out->dtype);
  graft_status st = check_concat(k, axis);
  if (st == GRAFT_OK)
    st = graft__kernel_check_units(k, begin, end, out->numel);
  if (st != GRAFT_OK || begin >= end)
    return st;
  /* out is [outer, L] with L = axis dim * inner; each out row is the rows of
   * the inputs (L_j = their axis dim * inner elements) laid end to end. */
  int64_t inner = 1;
  for (int d = axis + 1; d < out->rank; d++)
    inner *= out->shape[d];
  const int64_t L = out->shape[axis] * inner;
#define ROWLEN(j) (k->in[(j)]->shape[axis] * inner)
  int64_t o = begin, q = begin / L, rem = begin % L, cum = 0;
  int j = 0;
  while (rem >= cum + ROWLEN(j))
    cum += ROWLEN(j++);
  while (o < end) {
    const int64_t lj = ROWLEN(j);
    const int64_t take = GRAFT__MIN(cum + lj - rem, end - o);
    memcpy((char *)out->data + (size_t)o * es,
           (const char *)k->in[j]->data + (size_t)(q * lj + rem - cum) * es, (size_t)take * es);
    o += take;
    rem += take;
    if (rem == L) {
      rem = cum = 0;
      j = 0;
      q++;
    }
    /* Move on to the input holding rem, skipping empty ones. */
    while (o < end && rem >= cum + ROWLEN(j))
      cum += ROWLEN(j++);
  }
#undef ROWLEN
  return GRAFT_OK;
}

#define DEF_ONE_HOT(NAME, T)                                                       \
  static void NAME(const int32_t *labels, T *y, int64_t depth, int64_t begin, int64_t end) { \
    int64_t li = begin / depth, j = begin % depth;                                 \
    for (int64_t o = begin; o < end; o++) {                                        \
      y[o] = labels[li] == j ? (T)1 : (T)0;                                        \
      if (++j == depth) {                                                          \
        j = 0;                                                                     \
        li++;                                                                      \
      }                                                                            \
    }                                                                              \
  }

DEF_ONE_HOT(one_hot_f32, float)
DEF_ONE_HOT(one_hot_f64, double)

graft_status graft__k_ONE_HOT(const graft__kargs *k, int64_t begin, int64_t end) {
  const graft__tview *in = k->in[0], *out = k->out;
  if (in->dtype != GRAFT_I32)
    return graft__kernel_bad_dtype(k, in->dtype);
  if (out->dtype != GRAFT_F32 && out->dtype != GRAFT_F64)
    return graft__kernel_bad_dtype(k, out->dtype);
  const int64_t depth = k->node->attr.one_hot.depth;
  const int64_t last = out->rank > 0 ? out->shape[out->rank - 1] : -1;
  if (out->rank != in->rank + 1 || last != depth || out->numel != in->numel * depth)
    return graft__kernel_internal(k, "output rank %d, last dim %lld for %lld labels of depth %lld",
                                  out->rank, (long long)last, (long long)in->numel,
                                  (long long)depth);
  graft_status st = graft__kernel_check_units(k, begin, end, out->numel);
  if (st != GRAFT_OK || begin >= end)
    return st;
  if (out->dtype == GRAFT_F32)
    one_hot_f32(in->data, out->data, depth, begin, end);
  else
    one_hot_f64(in->data, out->data, depth, begin, end);
  return GRAFT_OK;
}

/* ---- pad: out[c] = x[c - begin] inside the placed box, 0 elsewhere ----- */

graft_status graft__k_PAD(const graft__kargs *k, int64_t begin, int64_t end) {
  const graft__tview *x = k->in[0], *o = k->out;
  if (x->dtype != o->dtype || x->rank != o->rank)
    return graft__kernel_internal(k, "pad: input and output views disagree");
  size_t es = graft_dtype_size(o->dtype);
  int r = o->rank;
  int64_t idx[GRAFT_MAX_RANK], xs[GRAFT_MAX_RANK];
  int64_t s = 1;
  for (int d = r - 1; d >= 0; d--) {
    xs[d] = s;
    s *= x->shape[d];
  }
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; d--) {
    idx[d] = o->shape[d] ? rem % o->shape[d] : 0;
    rem = o->shape[d] ? rem / o->shape[d] : 0;
  }
  const char *src = x->data;
  char *dst = o->data;
  for (int64_t e = begin; e < end; e++) {
    int64_t off = 0;
    int inside = 1;
    for (int d = 0; d < r && inside; d++) {
      int64_t c = idx[d] - k->node->attr.slice.begin[d];
      inside = c >= 0 && c < x->shape[d];
      off += c * xs[d];
    }
    if (inside)
      memcpy(dst + (size_t)e * es, src + (size_t)off * es, es);
    else
      memset(dst + (size_t)e * es, 0, es);
    for (int d = r - 1; d >= 0; d--) {
      if (++idx[d] < o->shape[d]) break;
      idx[d] = 0;
    }
  }
  return GRAFT_OK;
}

/* ---- custom_gradient: the value is its first input ---------------------- */

graft_status graft__k_CUSTOM(const graft__kargs *k, int64_t begin, int64_t end) {
  const graft__tview *x = k->in[0], *o = k->out;
  if (x->dtype != o->dtype || x->numel != o->numel)
    return graft__kernel_internal(k, "custom_gradient: input and output views disagree");
  size_t es = graft_dtype_size(o->dtype);
  if (end > begin)
    memcpy((char *)o->data + (size_t)begin * es, (const char *)x->data + (size_t)begin * es,
           (size_t)(end - begin) * es);
  return GRAFT_OK;
}
