/* VJP rules of the convolution family.  im2col and col2im are linear and
 * each other's adjoint; conv2d's three products (graph/conv.c) are
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

/* y = conv2d_gemm(w, c): dw = backward_weight(g, c), dc = backward_columns(w, g). */
void graft__vjp_CONV_MM(graft_trace *t, const graft__node *n, graft_value *const *in,
                        graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = prod(t, GRAFT__OP_CONV_MM_W, n, g, in[1]);
  gx[1] = prod(t, GRAFT__OP_CONV_MM_COLS, n, in[0], g);
}

/* dw = backward_weight(gy, c): d gy = conv2d_gemm(g, c), dc = backward_columns(g, gy). */
void graft__vjp_CONV_MM_W(graft_trace *t, const graft__node *n, graft_value *const *in,
                          graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = prod(t, GRAFT__OP_CONV_MM, n, g, in[1]);
  gx[1] = prod(t, GRAFT__OP_CONV_MM_COLS, n, g, in[0]);
}

/* dc = backward_columns(w, gy): dw = backward_weight(gy, g), d gy = conv2d_gemm(w, g). */
void graft__vjp_CONV_MM_COLS(graft_trace *t, const graft__node *n, graft_value *const *in,
                             graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  gx[0] = prod(t, GRAFT__OP_CONV_MM_W, n, in[1], g);
  gx[1] = prod(t, GRAFT__OP_CONV_MM, n, in[0], g);
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
