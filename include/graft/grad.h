/* graft: gradients (reverse mode) and forward mode.
 *
 * graft_gradients appends the backward subgraph of ys with respect to xs to
 * the trace.  The emitted nodes are ordinary values: they are pruned,
 * planned, scheduled and exported like any other (styled as backward in
 * DOT), and since every op that a gradient rule emits has a gradient rule of
 * its own, gradients of gradients work to any depth.
 *
 * Where the math has no derivative, both modes take the same convention:
 * relu'(0) = abs'(0) = 0; sign, comparisons and one_hot have none; a tie of
 * maximum / minimum (and a NaN operand) sends the whole gradient to b;
 * reduce_max shares a tie equally among the maxima (a group holding NaN
 * gets NaN); pow(a, b) has no derivative in b where a <= 0 (0 at every
 * order, so its Hessian stays symmetric), and d/da is 0 at a = b = 0.
 * Poles keep their math (sqrt'(0) = log'(0) = inf).
 */
#ifndef GRAFT_GRAD_H
#define GRAFT_GRAD_H

#include "graft/status.h"
#include "graft/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What an x that no y depends on gets. */
typedef enum graft_unconnected {
  GRAFT_UNCONNECTED_NONE = 0, /* grads[i] = NULL */
  GRAFT_UNCONNECTED_ZERO = 1  /* grads[i] = zeros shaped like xs[i] */
} graft_unconnected;

/* Vector-Jacobian products: grads[i] = sum over k of seeds[k]^T d ys[k] / d xs[i].
 * seeds may be NULL (all ones) or hold NULL entries (ones like ys[k]); a
 * seed must have its y's dtype and shape.  xs may be inputs, variable reads
 * or any intermediate value, listed in any order.  Integer xs (labels,
 * indices) get no gradient (NULL whatever the policy); gradients do not flow
 * through integer values, comparisons, one_hot or stop_gradient.
 * Returns the trace's sticky status: on failure grads[] are all NULL and the
 * message is on the trace. */
GRAFT_API graft_status graft_gradients(graft_trace *t, int n_y, graft_value *const *ys,
                                       graft_value *const *seeds, int n_x,
                                       graft_value *const *xs, graft_unconnected policy,
                                       graft_value **grads);

/* A user VJP rule: given the region's inputs xs, its output y and the
 * cotangent gy of y, store the cotangent of each xs[i] in gxs[i] (NULL: no
 * gradient).  Emit graft ops on t; return GRAFT_OK or an error. */
typedef graft_status (*graft_vjp_fn)(graft_trace *t, int n_x, graft_value *const *xs,
                                     graft_value *y, graft_value *gy, graft_value **gxs,
                                     void *user);

/* A value equal to y whose gradient with respect to xs is given by vjp
 * instead of by differentiating the ops that computed y from xs (for
 * numerically better or cheaper rules, e.g. a stable log-sum-exp).  user is
 * passed to vjp, which runs while gradients are built, inside the trace.
 * What vjp stores is checked: each gxs[i] must be NULL or a value of this
 * trace with the dtype and shape of xs[i] (else the trace fails with
 * GRAFT_EDTYPE / GRAFT_ESHAPE / GRAFT_EMISUSE naming the op and input).  vjp
 * may build gradients itself, but not through its own region (that would
 * recurse without end: GRAFT_EMISUSE), and rules nest at most 16 deep
 * (GRAFT_EUNSUPPORTED). */
GRAFT_API graft_value *graft_custom_gradient(graft_trace *t, int n_x, graft_value *const *xs,
                                             graft_value *y, graft_vjp_fn vjp, void *user);

/* Jacobian-vector products (forward mode): jvps[k] = sum over i of
 * d ys[k] / d primals[i] . tangents[i].  tangents[i] must have primals[i]'s
 * dtype and shape (NULL: zero).  Listing a value twice among the primals is
 * GRAFT_EINVAL.  Tangents propagate by a direct JVP rule per op (no double
 * transposition), styled as tangent nodes in DOT; stop_gradient, integer
 * values and comparisons carry no tangent.  A ys[k] that no primal reaches
 * gets NULL (GRAFT_UNCONNECTED_NONE) or zeros (GRAFT_UNCONNECTED_ZERO).
 * Composes with graft_gradients in any order and depth. */
GRAFT_API graft_status graft_jvp(graft_trace *t, int n_x, graft_value *const *primals,
                                 graft_value *const *tangents, int n_y, graft_value *const *ys,
                                 graft_unconnected policy, graft_value **jvps);

/* Hessian-vector products by forward-over-reverse: out[i] = sum over j of
 * d^2 y / d xs[i] d xs[j] . vs[j] for a scalar (rank-0) y.  Integer xs get
 * NULL; on failure every out[i] is NULL.  Costs about one
 * gradient plus one forward sweep over it (a small constant times the
 * loss+gradient), not a Hessian. */
GRAFT_API graft_status graft_hvp(graft_trace *t, graft_value *y, int n_x, graft_value *const *xs,
                                 graft_value *const *vs, graft_value **out);

/* Dense Jacobian d y / d x as a value of shape y.shape + x.shape (both with
 * concrete dims) and y's dtype.  graft_jacobian_fwd builds it column by
 * column: numel(x) JVPs, cheap when x is small.  graft_jacobian_rev builds
 * it row by row: numel(y) VJPs, cheap when y is small.  Both give the same
 * values (zeros where y does not depend on x).  x and y must be f32 or f64:
 * an integer x or y (labels, indices) has no derivative, and either call
 * fails with GRAFT_EDTYPE ("graft_jacobian_rev: x is i32; ...") rather than
 * return zeros.  Meant for small problems (the graph grows with the column
 * or row count). */
GRAFT_API graft_status graft_jacobian_fwd(graft_trace *t, graft_value *y, graft_value *x,
                                          graft_value **out);
GRAFT_API graft_status graft_jacobian_rev(graft_trace *t, graft_value *y, graft_value *x,
                                          graft_value **out);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_GRAD_H */
