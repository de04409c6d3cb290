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

/* The axes of mask as a list for the reduce ops; returns their count. */
static int mask_axes(unsigned mask, int rank, int *axes) {
  int k = 0;
  for (int i = 0; i < rank; i++)
    if (mask & (1u << i)) axes[k++] = i;
  return k;
}

/* v (y: the reduction's output shape) reshaped to the keepdims shape of x.
 * A no-op when keepdims was set or nothing was reduced. */
static graft_value *keep_shape(graft_trace *t, const graft__node *n, graft_value *x,
                               graft_value *v) {
  unsigned mask = n->attr.reduce.mask;
  if (n->attr.reduce.keepdims || !mask) return v;
  int r = graft_value_rank(x);
  const int64_t *xs = graft_value_shape(x);
  int64_t shape[GRAFT_MAX_RANK];
  for (int i = 0; i < r; i++) shape[i] = mask & (1u << i) ? 1 : xs[i];
  return graft_reshape(t, v, r, shape);
}

/* reduce_sum(v) over the node's axes with the node's keepdims: y's shape.
 * v itself when no axis is reduced (a rank-0 x; n_axes 0 would mean "all
 * axes", which is then the same thing). */
static graft_value *sum_like_y(graft_trace *t, const graft__node *n, graft_value *v) {
  int axes[GRAFT_MAX_RANK];
  int k = mask_axes(n->attr.reduce.mask, graft_value_rank(v), axes);
  return k ? graft_reduce_sum(t, v, k, axes, n->attr.reduce.keepdims) : v;
}

/* reduce_sum(v) over the node's axes with keepdims (x's keepdims shape). */
static graft_value *sum_keep(graft_trace *t, const graft__node *n, graft_value *v) {
  int axes[GRAFT_MAX_RANK];
  int k = mask_axes(n->attr.reduce.mask, graft_value_rank(v), axes);
  return k ? graft_reduce_sum(t, v, k, axes, 1) : v;
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
  int k = mask_axes(n->attr.reduce.mask, graft_value_rank(tin[0]), axes);
  return k ? graft_reduce_mean(t, tin[0], k, axes, n->attr.reduce.keepdims) : tin[0];
}

/* The tangent of a maximum is the mean of the tangents of the elements
 * equal to it: ties share equally, as in the VJP (so <u, J v> matches
 * <J^T u, v> exactly, ties included). */
graft_value *graft__jvp_REDUCE_MAX(graft_trace *t, const graft__node *n, graft_value *const *in,
                                   graft_value *y, graft_value *const *tin) {
  graft_value *x = in[0], *tx = tin[0];
  if (!tx) return NULL;
  if (!n->attr.reduce.mask) return tx; /* nothing reduced (rank-0 x): y = x */
  graft_value *hit = graft_equal(t, x, keep_shape(t, n, x, y)); /* x's shape, 1 at maxima */
  return graft_div(t, sum_like_y(t, n, graft_mul(t, tx, hit)), sum_like_y(t, n, hit));
}

/* dy = sum over the group of tx_i * (product of the group's other
 * elements), with that product built exactly as in the VJP: y / x_i where
 * x_i != 0 (x's zeros replaced by 1 in the divisor, the double-where
 * pattern: no inf / NaN even in the branch not taken); where x_i == 0, P
 * (the product of the group's nonzero elements) times 1 if x_i is the only
 * zero, times the other zero written as (sum of the zeros) - x_i if there
 * are exactly two, times the constant 0 if there are more.  So the tangent
 * and its first derivative are exact everywhere; second and higher
 * derivatives of the tangent miss terms at groups holding three or more
 * zeros (as the VJP's do). */
graft_value *graft__jvp_REDUCE_PROD(graft_trace *t, const graft__node *n, graft_value *const *in,
                                    graft_value *y, graft_value *const *tin) {
  graft_value *x = in[0], *tx = tin[0];
  if (!tx) return NULL;
  int axes[GRAFT_MAX_RANK];
  int k = mask_axes(n->attr.reduce.mask, graft_value_rank(x), axes);
  if (!k) return tx; /* nothing reduced (rank-0 x): y = x */
  graft_value *zero = graft__grad_scalar(t, x, 0), *one = graft__grad_scalar(t, x, 1);
  graft_value *is0 = graft_equal(t, x, zero), *safe = graft_where(t, is0, one, x);
  graft_value *prod_nz = graft_reduce_prod(t, safe, k, axes, 1);
  graft_value *n0 = sum_keep(t, n, is0); /* zeros per group */
  graft_value *other0 = graft_sub(t, sum_keep(t, n, graft_mul(t, x, is0)), x);
  graft_value *zeros = graft_where(t, graft_equal(t, n0, one), one,
                                   graft_where(t, graft_equal(t, n0, graft__grad_scalar(t, x, 2)),
                                               other0, zero));
  graft_value *others = graft_where(t, is0, graft_mul(t, prod_nz, zeros),
                                    graft_div(t, keep_shape(t, n, x, y), safe));
  return sum_like_y(t, n, graft_mul(t, tx, others));
}

/* d lse = sum over the group of tx * softmax(x), softmax(x) = exp(x - y). */
graft_value *graft__jvp_LOGSUMEXP(graft_trace *t, const graft__node *n, graft_value *const *in,
                                  graft_value *y, graft_value *const *tin) {
  graft_value *x = in[0], *tx = tin[0];
  if (!tx) return NULL;
  graft_value *p = graft_exp(t, graft_sub(t, x, keep_shape(t, n, x, y)));
  return sum_like_y(t, n, graft_mul(t, tx, p));
}
