/* VJP rules of the reductions.
 *
 * A reduction's cotangent g has the reduced shape (keepdims may be 0).  Each
 * rule first brings g (and y, where it needs it) to the keepdims shape: x's
 * shape with 1 at the reduced axes.  That shape broadcasts against x, so the
 * elementwise ops below spread it over the reduced axes by themselves; only
 * the sum needs an explicit broadcast_to.  Shapes are passed through as
 * graft_value_shape reports them, so symbolic dims work unchanged. */
#include "grad/grad.h"

/* The axes of mask as a list for the reduce ops; returns their count. */
static int mask_axes(unsigned mask, int rank, int *axes) {
  int k = 0;
  for (int i = 0; i < rank; i++)
    if (mask & (1u << i)) axes[k++] = i;
  return k;
}

/* v (y or g: the reduction's output shape) reshaped to the keepdims shape
 * of x.  A no-op when keepdims was set or nothing was reduced. */
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

/* reduce_sum(v) over the node's axes with keepdims; v itself when no axis
 * is reduced (n_axes 0 would mean "all axes"). */
static graft_value *sum_keep(graft_trace *t, const graft__node *n, graft_value *v) {
  int axes[GRAFT_MAX_RANK];
  int k = mask_axes(n->attr.reduce.mask, graft_value_rank(v), axes);
  return k ? graft_reduce_sum(t, v, k, axes, 1) : v;
}

/* g brought to the keepdims shape and broadcast to x's shape. */
static graft_value *spread(graft_trace *t, const graft__node *n, graft_value *x, graft_value *g) {
  return graft_broadcast_to(t, keep_shape(t, n, x, g), graft_value_rank(x), graft_value_shape(x));
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
  double count = 1;
  int sym = 0;
  for (int i = 0; i < r; i++) {
    block[i] = mask & (1u << i) ? xs[i] : 1;
    if (GRAFT_DIM_IS_SYM(block[i])) sym = 1;
    else count *= (double)block[i];
  }
  graft_value *inv;
  if (sym) {
    graft_value *c = graft_reduce_sum(t, graft_fill(t, graft_value_dtype(x), r, block, 1.0), 0,
                                      NULL, 0);
    inv = graft_div(t, graft__grad_scalar(t, x, 1.0), c);
  } else {
    inv = graft__grad_scalar(t, x, 1.0 / count); /* count 0: inf, but x is empty then */
  }
  /* Scale before spreading: the product has the reduced shape, not x's. */
  gx[0] = spread(t, n, x, graft_mul(t, g, inv));
}

/* The gradient goes to the elements equal to the maximum; ties share it
 * equally (g / number of maxima), so the gradient sums to g per group. */
void graft__vjp_REDUCE_MAX(graft_trace *t, const graft__node *n, graft_value *const *in,
                           graft_value *y, graft_value *g, graft_value **gx) {
  graft_value *x = in[0];
  graft_value *hit = graft_equal(t, x, keep_shape(t, n, x, y)); /* x's shape, 1 at maxima */
  graft_value *share = graft_div(t, keep_shape(t, n, x, g), sum_keep(t, n, hit));
  gx[0] = graft_mul(t, hit, share);
}

/* d prod / d x_i = the product of the other elements of x_i's group.  Where
 * x_i != 0 that is y / x_i, divided by x with its zeros replaced by 1 (the
 * double-where pattern: no inf / NaN even in the branch not taken, so
 * gradients of this gradient stay finite).  Where x_i == 0 it is P (the
 * product of the group's nonzero elements) times the product of the
 * group's other zeros: 1 if x_i is the only zero; with exactly two zeros it
 * is the other zero, written as (sum of the zeros) - x_i so that its value
 * is 0 but its derivative is right; with more zeros it is taken as the
 * constant 0.  So first and second derivatives are exact everywhere;
 * third and higher ones miss terms at groups holding three or more zeros. */
void graft__vjp_REDUCE_PROD(graft_trace *t, const graft__node *n, graft_value *const *in,
                            graft_value *y, graft_value *g, graft_value **gx) {
  graft_value *x = in[0];
  graft_value *zero = graft__grad_scalar(t, x, 0), *one = graft__grad_scalar(t, x, 1);
  graft_value *is0 = graft_equal(t, x, zero), *safe = graft_where(t, is0, one, x);
  int axes[GRAFT_MAX_RANK];
  int k = mask_axes(n->attr.reduce.mask, graft_value_rank(x), axes);
  graft_value *prod_nz = k ? graft_reduce_prod(t, safe, k, axes, 1) : safe;
  graft_value *n0 = sum_keep(t, n, is0); /* zeros per group */
  graft_value *other0 = graft_sub(t, sum_keep(t, n, graft_mul(t, x, is0)), x);
  graft_value *zeros = graft_where(t, graft_equal(t, n0, one), one,
                                   graft_where(t, graft_equal(t, n0, graft__grad_scalar(t, x, 2)),
                                               other0, zero));
  graft_value *others = graft_where(t, is0, graft_mul(t, prod_nz, zeros),
                                    graft_div(t, keep_shape(t, n, x, y), safe));
  gx[0] = graft_mul(t, keep_shape(t, n, x, g), others);
}

/* d lse / d x = softmax over the reduced axes = exp(x - y). */
void graft__vjp_LOGSUMEXP(graft_trace *t, const graft__node *n, graft_value *const *in,
                          graft_value *y, graft_value *g, graft_value **gx) {
  graft_value *x = in[0];
  graft_value *p = graft_exp(t, graft_sub(t, x, keep_shape(t, n, x, y)));
  gx[0] = graft_mul(t, keep_shape(t, n, x, g), p);
}
