/* VJP rules of the shape ops.  Each is the op's adjoint, which is itself a
 * shape op (reshape <-> reshape, broadcast_to <-> sum_to_shape, slice <->
 * pad, transpose <-> inverse transpose), so gradients of these gradients
 * need nothing more.  Target shapes are the inputs' shapes as
 * graft_value_shape reports them: symbolic dims pass through. */
#include "grad/grad.h"

void graft__vjp_TRANSPOSE(graft_trace *t, const graft__node *n, graft_value *const *in,
                          graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  int r = graft_value_rank(in[0]), inv[GRAFT_MAX_RANK];
  for (int i = 0; i < r; i++) inv[n->attr.transpose.perm[i]] = i;
  gx[0] = graft_transpose(t, g, inv);
}

void graft__vjp_RESHAPE(graft_trace *t, const graft__node *n, graft_value *const *in,
                        graft_value *y, graft_value *g, graft_value **gx) {
  (void)n, (void)y;
  gx[0] = graft_reshape(t, g, graft_value_rank(in[0]), graft_value_shape(in[0]));
}

void graft__vjp_BROADCAST_TO(graft_trace *t, const graft__node *n, graft_value *const *in,
                             graft_value *y, graft_value *g, graft_value **gx) {
  (void)n, (void)y;
  gx[0] = graft__grad_unbroadcast(t, g, in[0]);
}

void graft__vjp_SUM_TO_SHAPE(graft_trace *t, const graft__node *n, graft_value *const *in,
                             graft_value *y, graft_value *g, graft_value **gx) {
  (void)n, (void)y;
  gx[0] = graft_broadcast_to(t, g, graft_value_rank(in[0]), graft_value_shape(in[0]));
}

/* The slice's elements go back to where they came from; the rest get 0. */
void graft__vjp_SLICE(graft_trace *t, const graft__node *n, graft_value *const *in,
                      graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = graft_pad(t, g, n->attr.slice.begin, graft_value_rank(in[0]), graft_value_shape(in[0]));
}

/* The padding was constant: only the window holding x gets a gradient. */
void graft__vjp_PAD(graft_trace *t, const graft__node *n, graft_value *const *in,
                    graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = graft_slice(t, g, n->attr.slice.begin, graft_value_shape(in[0]));
}

/* Input k's gradient is its window of g along the axis.  Its begin is the
 * sum of the earlier inputs' extents, which slice needs concrete; its size
 * may be symbolic (slice takes symbol sizes), so only a symbolic extent
 * before some input is unsupported. */
void graft__vjp_CONCAT(graft_trace *t, const graft__node *n, graft_value *const *in,
                       graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  int axis = n->attr.axis.axis;
  int64_t begin[GRAFT_MAX_RANK] = {0};
  for (int k = 0; k < n->n_in; k++) {
    const int64_t *s = graft_value_shape(in[k]);
    gx[k] = graft_slice(t, g, begin, s);
    if (k + 1 < n->n_in && GRAFT_DIM_IS_SYM(s[axis])) {
      graft_trace_fail(t, GRAFT_EUNSUPPORTED,
                       "concat: gradient with a symbolic size along the concat axis is not "
                       "supported");
      return;
    }
    begin[axis] += s[axis];
  }
}

/* The labels are integers: no gradient. */
void graft__vjp_ONE_HOT(graft_trace *t, const graft__node *n, graft_value *const *in,
                        graft_value *y, graft_value *g, graft_value **gx) {
  (void)t, (void)n, (void)in, (void)y, (void)g, (void)gx;
}
