/* VJP rules of the reductions.
 *
 * A reduction's cotangent g has the reduced shape (keepdims may be 0).  Each
 * rule first brings g (and y, where it needs it) to the keepdims shape: x's
 * shape with 1 at the reduced axes.  That shape broadcasts against x, so the
 * elementwise ops below spread it over the reduced axes by themselves; only
 * the sum needs an explicit broadcast_to.  Shapes are passed through as
 * graft_value_shape reports them, so symbolic dims work unchanged. */
#include "grad/grad.h"

/* g brought to the keepdims shape and broadcast to x's shape. */
static graft_value *spread(graft_trace *t, const graft__node *n, graft_value *x, graft_value *g) {
  return graft_broadcast_to(t, graft__grad_keep_shape(t, n, x, g), graft_value_rank(x),
                            graft_value_shape(x));
}

void graft__vjp_REDUCE_SUM(graft_trace *t, const graft__node *n, graft_value *const *in,
                           graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = spread(t, n, in[0], g);
}

/* spread(g) / count.  The count is a trace-time constant when every
 * reduced dim is concrete; with a symbolic reduced dim it is computed in
 * the graph, as the sum of a ones block shaped like the reduced dims only
 * (1 elsewhere), so it is bound per call like the dims themselves. */
void graft__vjp_REDUCE_MEAN(graft_trace *t, const graft__node *n, graft_value *const *in,
                            graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  graft_value *x = in[0];
  unsigned mask = n->attr.reduce.mask;
  int r = graft_value_rank(x);
  const int64_t *xs = graft_value_shape(x);
  int64_t block[GRAFT_MAX_RANK];
  for (int i = 0; i < r; i++) block[i] = mask & (1u << i) ? xs[i] : 1;
  graft_value *inv = graft__grad_inv_count(t, x, r, block); /* count 0: x is empty */
  /* Scale before spreading: the product has the reduced shape, not x's. */
  gx[0] = spread(t, n, x, graft_mul(t, g, inv));
}

/* The gradient goes to the elements equal to the maximum; ties share it
 * equally (g / number of maxima), so the gradient sums to g per group.  A
 * group holding NaN has a NaN maximum that no element equals: its
 * gradient is NaN throughout (0 * (g / 0)), which reports the NaN input. */
void graft__vjp_REDUCE_MAX(graft_trace *t, const graft__node *n, graft_value *const *in,
                           graft_value *y, graft_value *g, graft_value **gx) {
  graft_value *x = in[0];
  /* x's shape, 1 at maxima */
  graft_value *hit = graft_equal(t, x, graft__grad_keep_shape(t, n, x, y));
  graft_value *share =
      graft_div(t, graft__grad_keep_shape(t, n, x, g), graft__grad_sum_keep(t, n, hit));
  gx[0] = graft_mul(t, hit, share);
}

/* d prod / d x_i = the product of the other elements of x_i's group
 * (graft__grad_prod_others: finite everywhere, zeros included, so
 * gradients of this gradient stay finite).  First and second derivatives
 * are exact everywhere; third and higher ones miss terms at groups holding
 * three or more zeros. */
void graft__vjp_REDUCE_PROD(graft_trace *t, const graft__node *n, graft_value *const *in,
                            graft_value *y, graft_value *g, graft_value **gx) {
  graft_value *x = in[0];
  graft_value *others = graft__grad_prod_others(t, n, x, y);
  gx[0] = graft_mul(t, graft__grad_keep_shape(t, n, x, g), others);
}

/* d lse / d x = softmax over the reduced axes = exp(x - y). */
void graft__vjp_LOGSUMEXP(graft_trace *t, const graft__node *n, graft_value *const *in,
                          graft_value *y, graft_value *g, graft_value **gx) {
  graft_value *x = in[0];
  graft_value *p = graft_exp(t, graft_sub(t, x, graft__grad_keep_shape(t, n, x, y)));
  gx[0] = graft_mul(t, graft__grad_keep_shape(t, n, x, g), p);
}
