/* JVP rules of the reductions.
 *
 * The sum and the mean are linear: their tangent is the same reduction of
 * the input's tangent (same axes, rebuilt from the node's mask, and the
 * same keepdims), so it has y's shape by construction.  The others weight
 * the tangent elementwise at x's shape and then sum it over the reduced
 * axes with the node's keepdims.  Where a weight needs y, y is first
 * brought to the keepdims shape (x's shape with 1 at the reduced axes),
 * which broadcasts against x.  Shapes are passed through as
 * graft_value_shape reports them, so symbolic dims work unchanged. */
#include "grad/grad.h"

/* reduce_sum(v) over the node's axes with the node's keepdims: y's shape.
 * v itself when no axis is reduced (a rank-0 x; n_axes 0 would mean "all
 * axes", which is then the same thing). */
static graft_value *sum_like_y(graft_trace *t, const graft__node *n, graft_value *v) {
  int axes[GRAFT_MAX_RANK];
  int k = graft__grad_mask_axes(n->attr.reduce.mask, graft_value_rank(v), axes);
  return k ? graft_reduce_sum(t, v, k, axes, n->attr.reduce.keepdims) : v;
}

graft_value *graft__jvp_REDUCE_SUM(graft_trace *t, const graft__node *n, graft_value *const *in,
                                   graft_value *y, graft_value *const *tin) {
  (void)in, (void)y;
  if (!tin[0]) return NULL;
  return sum_like_y(t, n, tin[0]);
}

/* The mean op counts the reduced elements itself (symbolic dims included). */
graft_value *graft__jvp_REDUCE_MEAN(graft_trace *t, const graft__node *n, graft_value *const *in,
                                    graft_value *y, graft_value *const *tin) {
  (void)in, (void)y;
  if (!tin[0]) return NULL;
  int axes[GRAFT_MAX_RANK];
  int k = graft__grad_mask_axes(n->attr.reduce.mask, graft_value_rank(tin[0]), axes);
  return k ? graft_reduce_mean(t, tin[0], k, axes, n->attr.reduce.keepdims) : tin[0];
}

/* The tangent of a maximum is the mean of the tangents of the elements
 * equal to it: ties share equally, as in the VJP (so <u, J v> matches
 * <J^T u, v> exactly, ties included).  A group holding NaN: 0 / 0 = NaN,
 * as the VJP. */
graft_value *graft__jvp_REDUCE_MAX(graft_trace *t, const graft__node *n, graft_value *const *in,
                                   graft_value *y, graft_value *const *tin) {
  graft_value *x = in[0], *tx = tin[0];
  if (!tx) return NULL;
  if (!n->attr.reduce.mask) return tx; /* nothing reduced (rank-0 x): y = x */
  /* x's shape, 1 at maxima */
  graft_value *hit = graft_equal(t, x, graft__grad_keep_shape(t, n, x, y));
  return graft_div(t, sum_like_y(t, n, graft_mul(t, tx, hit)), sum_like_y(t, n, hit));
}

/* dy = sum over the group of tx_i * (product of the group's other
 * elements), with that product built as in the VJP (graft__grad_prod_others:
 * finite everywhere, zeros included).  So the tangent and its first
 * derivative are exact everywhere; second and higher derivatives of the
 * tangent miss terms at groups holding three or more zeros (as the VJP's
 * do). */
graft_value *graft__jvp_REDUCE_PROD(graft_trace *t, const graft__node *n, graft_value *const *in,
                                    graft_value *y, graft_value *const *tin) {
  graft_value *x = in[0], *tx = tin[0];
  if (!tx) return NULL;
  int axes[GRAFT_MAX_RANK];
  if (!graft__grad_mask_axes(n->attr.reduce.mask, graft_value_rank(x), axes))
    return tx; /* nothing reduced (rank-0 x): y = x */
  return sum_like_y(t, n, graft_mul(t, tx, graft__grad_prod_others(t, n, x, y)));
}

/* d lse = sum over the group of tx * softmax(x), softmax(x) = exp(x - y). */
graft_value *graft__jvp_LOGSUMEXP(graft_trace *t, const graft__node *n, graft_value *const *in,
                                  graft_value *y, graft_value *const *tin) {
  graft_value *x = in[0], *tx = tin[0];
  if (!tx) return NULL;
  graft_value *p = graft_exp(t, graft_sub(t, x, graft__grad_keep_shape(t, n, x, y)));
  return sum_like_y(t, n, graft_mul(t, tx, p));
}
