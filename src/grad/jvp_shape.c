/* JVP rules of the shape ops.  Every shape op is linear, so its tangent is
 * the op itself applied to the input's tangent with the node's parameters.
 * Target shapes are y's shape as graft_value_shape reports it (symbolic
 * dims, derived ones included, pass through), so the tangent has exactly
 * y's shape even where the op inferred a dim (reshape -1, slice to the end
 * of a symbolic extent). */
#include "grad/grad.h"

graft_value *graft__jvp_TRANSPOSE(graft_trace *t, const graft__node *n, graft_value *const *in,
                                  graft_value *y, graft_value *const *tin) {
  (void)in, (void)y;
  if (!tin[0]) return NULL;
  return graft_transpose(t, tin[0], n->attr.transpose.perm);
}

graft_value *graft__jvp_RESHAPE(graft_trace *t, const graft__node *n, graft_value *const *in,
                                graft_value *y, graft_value *const *tin) {
  (void)n, (void)in;
  if (!tin[0]) return NULL;
  return graft_reshape(t, tin[0], graft_value_rank(y), graft_value_shape(y));
}

graft_value *graft__jvp_BROADCAST_TO(graft_trace *t, const graft__node *n, graft_value *const *in,
                                     graft_value *y, graft_value *const *tin) {
  (void)n, (void)in;
  if (!tin[0]) return NULL;
  return graft__jvp_to_shape(t, tin[0], y);
}

graft_value *graft__jvp_SUM_TO_SHAPE(graft_trace *t, const graft__node *n, graft_value *const *in,
                                     graft_value *y, graft_value *const *tin) {
  (void)n, (void)in;
  if (!tin[0]) return NULL;
  return graft__grad_unbroadcast(t, tin[0], y);
}

/* The same window of the tangent; its size is y's shape (the node's sizes
 * with -1 resolved). */
graft_value *graft__jvp_SLICE(graft_trace *t, const graft__node *n, graft_value *const *in,
                              graft_value *y, graft_value *const *tin) {
  (void)in;
  if (!tin[0]) return NULL;
  return graft_slice(t, tin[0], n->attr.slice.begin, graft_value_shape(y));
}

/* The padding is constant: the tangent is zero-padded the same way. */
graft_value *graft__jvp_PAD(graft_trace *t, const graft__node *n, graft_value *const *in,
                            graft_value *y, graft_value *const *tin) {
  (void)in;
  if (!tin[0]) return NULL;
  return graft_pad(t, tin[0], n->attr.slice.begin, graft_value_rank(y), graft_value_shape(y));
}

/* The tangents joined along the axis; a NULL (zero) tangent becomes
 * zeros shaped like its input, but only when some tangent is not NULL. */
graft_value *graft__jvp_CONCAT(graft_trace *t, const graft__node *n, graft_value *const *in,
                               graft_value *y, graft_value *const *tin) {
  (void)y;
  int any = 0;
  for (int k = 0; k < n->n_in; k++) any |= tin[k] != NULL;
  if (!any) return NULL;
  graft_value *small[8], **ts = small;
  if (n->n_in > 8) {
    ts = graft__malloc((size_t)n->n_in * sizeof *ts);
    if (!ts) {
      graft_trace_fail(t, GRAFT_ENOMEM, "concat: out of memory");
      return NULL;
    }
  }
  for (int k = 0; k < n->n_in; k++) ts[k] = tin[k] ? tin[k] : graft_zeros_like(t, in[k]);
  graft_value *r = graft_concat(t, n->n_in, ts, n->attr.axis.axis);
  if (ts != small) graft__free(ts);
  return r;
}

/* The labels are integers: no tangent. */
graft_value *graft__jvp_ONE_HOT(graft_trace *t, const graft__node *n, graft_value *const *in,
                                graft_value *y, graft_value *const *tin) {
  (void)t, (void)n, (void)in, (void)y, (void)tin;
  return NULL;
}
