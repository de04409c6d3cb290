/* graft internal: gradient rules (src/grad -> src/graph only).
 *
 * One VJP rule per GRAFT_OP_MAP row, in the table graft__vjp, written with
 * public graft ops so the backward nodes are ordinary nodes.  (JVP rules
 * join the same way with forward mode.) */
#ifndef GRAFT_GRAD_INT_H
#define GRAFT_GRAD_INT_H

#include "graft/grad.h"
#include "graph/graph.h"

/* A VJP rule.  n is the forward node, in[j] its input values, y its output
 * value, g the cotangent of y (never NULL, y's dtype and shape).  Set gx[j]
 * to the cotangent of input j, with in[j]'s shape (undo broadcasting with
 * graft_sum_to_shape), or leave it NULL for "no gradient" (a symbolic
 * zero): integer inputs, labels, conditions, comparison operands.  Rules
 * are called only for float outputs.  Errors go on the trace (sticky). */
typedef void (*graft__vjp_fn)(graft_trace *t, const graft__node *n, graft_value *const *in,
                              graft_value *y, graft_value *g, graft_value **gx);

extern const graft__vjp_fn graft__vjp[GRAFT__OP_COUNT];

/* One rule per op row, named graft__vjp_<ENUM> (NULL-free: ops without a
 * gradient, like comparisons, have rules that leave gx NULL). */
#define GRAFT__VJP_DECL_(e, name, arity, rule, flags, cost, tile)                       \
  void graft__vjp_##e(graft_trace *t, const graft__node *n, graft_value *const *in, \
                      graft_value *y, graft_value *g, graft_value **gx);
GRAFT_OP_MAP(GRAFT__VJP_DECL_)
#undef GRAFT__VJP_DECL_

/* A JVP rule.  n is the forward node, in[j] its input values, y its output
 * value, tin[j] the tangent of input j (NULL: zero; else in[j]'s dtype and
 * shape).  Return the tangent of y with y's shape (use
 * graft__jvp_to_shape when broadcasting left it smaller), or NULL for a
 * zero tangent.  Called only when some tin[j] is not NULL and y is float. */
typedef graft_value *(*graft__jvp_fn)(graft_trace *t, const graft__node *n,
                                      graft_value *const *in, graft_value *y,
                                      graft_value *const *tin);

extern const graft__jvp_fn graft__jvp[GRAFT__OP_COUNT];

#define GRAFT__JVP_DECL_(e, name, arity, rule, flags, cost, tile)                          \
  graft_value *graft__jvp_##e(graft_trace *t, const graft__node *n, graft_value *const *in, \
                              graft_value *y, graft_value *const *tin);
GRAFT_OP_MAP(GRAFT__JVP_DECL_)
#undef GRAFT__JVP_DECL_

/* broadcast_to(v, shape of like) when the shapes differ, else v. */
graft_value *graft__jvp_to_shape(graft_trace *t, graft_value *v, graft_value *like);

/* Helpers shared by the rule files. */
/* sum_to_shape(g, shape of like) when the shapes differ, else g. */
graft_value *graft__grad_unbroadcast(graft_trace *t, graft_value *g, graft_value *like);
/* A scalar of x's dtype. */
graft_value *graft__grad_scalar(graft_trace *t, graft_value *like, double v);

#endif /* GRAFT_GRAD_INT_H */
