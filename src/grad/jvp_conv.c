/* JVP rules of the convolution family: im2col and col2im are linear, the
 * max-pool routing ops are linear in their second operand (their argmax is
 * piecewise constant in x), so the tangent is the op applied to the
 * tangent; conv2d and its gradients are bilinear: d op(a, b) = op(da, b) +
 * op(a, db). */
#include "grad/grad.h"

static graft_value *conv_op(graft_trace *t, const graft__node *n, graft_value *x,
                            graft_value *u) {
  if (!u) return NULL;
  if (n->op == GRAFT__OP_IM2COL || n->op == GRAFT__OP_COL2IM)
    return graft__emit_conv(t, n->op, 1, &u, &n->attr.conv);
  graft_value *args[2] = {x, u};
  int op = n->op == GRAFT__OP_MAX_POOL2D ? GRAFT__OP_MAX_POOL2D_SELECT : n->op;
  return graft__emit_conv(t, op, 2, args, &n->attr.conv);
}

graft_value *graft__jvp_IM2COL(graft_trace *t, const graft__node *n, graft_value *const *in,
                               graft_value *y, graft_value *const *tin) {
  (void)y;
  return conv_op(t, n, in[0], tin[0]);
}

graft_value *graft__jvp_COL2IM(graft_trace *t, const graft__node *n, graft_value *const *in,
                               graft_value *y, graft_value *const *tin) {
  (void)y;
  return conv_op(t, n, in[0], tin[0]);
}

/* The tangent at each window's argmax. */
graft_value *graft__jvp_MAX_POOL2D(graft_trace *t, const graft__node *n, graft_value *const *in,
                                   graft_value *y, graft_value *const *tin) {
  (void)y;
  return conv_op(t, n, in[0], tin[0]);
}

graft_value *graft__jvp_MAX_POOL2D_GRAD(graft_trace *t, const graft__node *n,
                                        graft_value *const *in, graft_value *y,
                                        graft_value *const *tin) {
  (void)y;
  return conv_op(t, n, in[0], tin[1]);
}

graft_value *graft__jvp_MAX_POOL2D_SELECT(graft_trace *t, const graft__node *n,
                                          graft_value *const *in, graft_value *y,
                                          graft_value *const *tin) {
  (void)y;
  return conv_op(t, n, in[0], tin[1]);
}

/* op(ta, b) + op(a, tb), either term dropped with its tangent. */
static graft_value *bilinear(graft_trace *t, const graft__node *n, graft_value *const *in,
                             graft_value *const *tin) {
  graft_value *d[2] = {NULL, NULL};
  for (int j = 0; j < 2; j++) {
    if (!tin[j]) continue;
    graft_value *args[2] = {j ? in[0] : tin[0], j ? tin[1] : in[1]};
    d[j] = graft__emit_conv(t, n->op, 2, args, &n->attr.conv);
  }
  return d[0] && d[1] ? graft_add(t, d[0], d[1]) : d[0] ? d[0] : d[1];
}

graft_value *graft__jvp_CONV2D(graft_trace *t, const graft__node *n, graft_value *const *in,
                                graft_value *y, graft_value *const *tin) {
  (void)y;
  return bilinear(t, n, in, tin);
}

graft_value *graft__jvp_CONV2D_W(graft_trace *t, const graft__node *n, graft_value *const *in,
                                  graft_value *y, graft_value *const *tin) {
  (void)y;
  return bilinear(t, n, in, tin);
}

graft_value *graft__jvp_CONV2D_X(graft_trace *t, const graft__node *n,
                                     graft_value *const *in, graft_value *y,
                                     graft_value *const *tin) {
  (void)y;
  return bilinear(t, n, in, tin);
}
