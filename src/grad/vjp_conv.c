/* VJP rules of the convolution family.  im2col and col2im are linear and
 * each other's adjoint; conv2d and its two gradients (graph/conv.c) are
 * bilinear and each other's adjoints.  Max pooling routes the cotangent to each window's
 * argmax (MAX_POOL2D_GRAD) and its tangent reads the tangent there
 * (MAX_POOL2D_SELECT), which are adjoint too; the argmax is piecewise
 * constant in x, so neither has a gradient in x. */
#include "grad/grad.h"

void graft__vjp_IM2COL(graft_trace *t, const graft__node *n, graft_value *const *in,
                       graft_value *y, graft_value *g, graft_value **gx) {
  (void)in, (void)y;
  gx[0] = graft__emit_conv(t, GRAFT__OP_COL2IM, 1, &g, &n->attr.conv);
}

void graft__vjp_COL2IM(graft_trace *t, const graft__node *n, graft_value *const *in,
                       graft_value *y, graft_value *g, graft_value **gx) {
  (void)in, (void)y;
  gx[0] = graft__emit_conv(t, GRAFT__OP_IM2COL, 1, &g, &n->attr.conv);
}

/* op(a, b) with n's sweep. */
static graft_value *prod(graft_trace *t, int op, const graft__node *n, graft_value *a,
                         graft_value *b) {
  graft_value *args[2] = {a, b};
  return graft__emit_conv(t, op, 2, args, &n->attr.conv);
}

/* y = conv2d(x, w): dx = backward_input(w, g), dw = backward_weight(g, x). */
void graft__vjp_CONV2D(graft_trace *t, const graft__node *n, graft_value *const *in,
                       graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = prod(t, GRAFT__OP_CONV2D_X, n, in[1], g);
  gx[1] = prod(t, GRAFT__OP_CONV2D_W, n, g, in[0]);
}

/* dw = backward_weight(gy, x): d gy = conv2d(x, g), dx = backward_input(g, gy). */
void graft__vjp_CONV2D_W(graft_trace *t, const graft__node *n, graft_value *const *in,
                         graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = prod(t, GRAFT__OP_CONV2D, n, in[1], g);
  gx[1] = prod(t, GRAFT__OP_CONV2D_X, n, g, in[0]);
}

/* dx = backward_input(w, gy): dw = backward_weight(gy, g), d gy = conv2d(g, w). */
void graft__vjp_CONV2D_X(graft_trace *t, const graft__node *n, graft_value *const *in,
                         graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = prod(t, GRAFT__OP_CONV2D_W, n, in[1], g);
  gx[1] = prod(t, GRAFT__OP_CONV2D, n, g, in[0]);
}

/* op(x, g): a pool routing op over in[0]'s windows. */
static graft_value *routed(graft_trace *t, int op, const graft__node *n, graft_value *x,
                           graft_value *g) {
  graft_value *args[2] = {x, g};
  return graft__emit_conv(t, op, 2, args, &n->attr.conv);
}

void graft__vjp_MAX_POOL2D(graft_trace *t, const graft__node *n, graft_value *const *in,
                           graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = routed(t, GRAFT__OP_MAX_POOL2D_GRAD, n, in[0], g);
}

void graft__vjp_MAX_POOL2D_GRAD(graft_trace *t, const graft__node *n, graft_value *const *in,
                                graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = NULL;
  gx[1] = routed(t, GRAFT__OP_MAX_POOL2D_SELECT, n, in[0], g);
}

void graft__vjp_MAX_POOL2D_SELECT(graft_trace *t, const graft__node *n, graft_value *const *in,
                                  graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = NULL;
  gx[1] = routed(t, GRAFT__OP_MAX_POOL2D_GRAD, n, in[0], g);
}
