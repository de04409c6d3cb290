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

/* Control nodes (control.c): their outputs are GETs, so their rules take
 * the cotangent of each output, the saved ones included (cot[i] for i <
 * n_cot, NULL for none: the rule may add saved outputs), setting gx[j] for
 * each input j that need[j] marks (the others' would go unused); and give the tangent of each output
 * (tout[i], NULL for a zero) from the inputs' (tin[j]). */
graft_status graft__vjp_ctl(graft_trace *t, const graft__node *n, graft_value *const *in,
                            const uint8_t *need, graft_value *const *cot, int n_cot,
                            graft_value **gx);
graft_status graft__jvp_ctl(graft_trace *t, const graft__node *n, graft_value *const *in,
                            graft_value *const *tin, graft_value **tout);

/* broadcast_to(v, shape of like) when the shapes differ, else v. */
graft_value *graft__jvp_to_shape(graft_trace *t, graft_value *v, graft_value *like);

/* Helpers shared by the gradient files (grad_util.c). */

/* 1 when a and b have the same rank and dims (dims compared as stored, so
 * symbols too), else 0. */
int graft__grad_same_shape(const graft_value *a, const graft_value *b);
/* sum_to_shape(g, shape of like) when the shapes differ, else g. */
graft_value *graft__grad_unbroadcast(graft_trace *t, graft_value *g, graft_value *like);
/* A scalar of like's dtype. */
graft_value *graft__grad_scalar(graft_trace *t, graft_value *like, double v);
/* v where c holds, else 0; a scalar zero, which where broadcasts, so the
 * result has v's shape when c broadcasts to it. */
graft_value *graft__grad_mask(graft_trace *t, graft_value *c, graft_value *v);
/* 0 where c holds, else v. */
graft_value *graft__grad_mask_not(graft_trace *t, graft_value *c, graft_value *v);

/* pow's partial derivatives, for its VJP and JVP rules; zero and one are
 * scalars of a's dtype.  Each masked branch gets a safe argument (b - 1 ->
 * 0, a -> 1) so that its own derivative, which higher derivatives multiply
 * by 0, is finite rather than inf (0 * inf = NaN).
 * d a^b / da = b a^(b-1), 0 at a = b = 0 (a^0 is constant; the formula is
 * 0 * inf there).  Where a <= 0, a^b has no derivative in b (see
 * graft__grad_pow_loga), so this factor is constant in b there: every
 * mixed partial is then 0 in either order, and the Hessian symmetric.
 * Where a > 0 it is the plain formula, exact at every order (b = 0
 * included: d/db of it is 1/a there). */
graft_value *graft__grad_pow_da(graft_trace *t, graft_value *a, graft_value *b, graft_value *zero,
                                graft_value *one);
/* log(a), with d a^b / db = log(a) a^b, taken as 0 where a <= 0: at a = 0
 * the limit of y log a is 0 for b > 0, and a < 0 has no real derivative in
 * b. */
graft_value *graft__grad_pow_loga(graft_trace *t, graft_value *a, graft_value *zero,
                                  graft_value *one);

/* Reductions (REDUCE_*, LOGSUMEXP): n is the reduction node, x its input. */
/* The axes of mask below rank as a list for the reduce ops; returns their
 * count. */
int graft__grad_mask_axes(unsigned mask, int rank, int *axes);
/* v (y, g or a tangent: the reduction's output shape) reshaped to the
 * keepdims shape of x, x's shape with 1 at the reduced axes.  v itself when
 * keepdims was set or nothing was reduced. */
graft_value *graft__grad_keep_shape(graft_trace *t, const graft__node *n, graft_value *x,
                                    graft_value *v);
/* reduce_sum(v) over the node's axes with keepdims (x's keepdims shape); v
 * itself when no axis is reduced (n_axes 0 would mean "all axes"). */
graft_value *graft__grad_sum_keep(graft_trace *t, const graft__node *n, graft_value *v);
/* For REDUCE_PROD (n, input x, output y): at each x_i, the product of the
 * other elements of x_i's group, at x's shape.  Where x_i != 0 that is y /
 * x_i, divided by x with its zeros replaced by 1 (the double-where pattern:
 * no inf / NaN even in the branch not taken).  Where x_i == 0 it is P (the
 * product of the group's nonzero elements) times the product of the
 * group's other zeros: 1 if x_i is the only zero; with exactly two zeros
 * the other zero, written as (sum of the zeros) - x_i so that its value is
 * 0 but its derivative is right; with more zeros the constant 0.  So it and
 * its first derivative are exact everywhere; higher derivatives miss terms
 * at groups holding three or more zeros. */
graft_value *graft__grad_prod_others(graft_trace *t, const graft__node *n, graft_value *x,
                                     graft_value *y);

/* 1 / the element count of a block of dims[0..rank) (the reduced dims of
 * a mean, the batch dim of a cross-entropy), a scalar of like's dtype: a
 * trace-time constant when every dim is concrete, else counted in the graph
 * (the sum of a ones block of dims), so it is bound per call like the dims
 * themselves and one trace serves every size.  A count of 0 gives inf; the
 * callers then have no element that uses it. */
graft_value *graft__grad_inv_count(graft_trace *t, graft_value *like, int rank,
                                   const int64_t *dims);

/* The builders, graft_gradients (reverse.c) and graft_jvp (forward.c). */
/* 1 for an f32 or f64 value. */
int graft__grad_is_float(const graft_value *v);
/* 1 when a and b have the same dtype and shape. */
int graft__grad_same_type(const graft_value *a, const graft_value *b);
/* Check the argument array v[0..n) of the builder fn ("what" names it in
 * messages): no NULL (unless allow_null), no value of another trace, no
 * poisoned value.  Fails the trace and returns the status, else GRAFT_OK. */
graft_status graft__grad_check_values(graft_trace *t, const char *fn, const char *what, int n,
                                      graft_value *const *v, int allow_null);
/* out[i] = v[i], or, in a control-flow body's trace, the body's own value
 * for a v[i] of a trace around it (captured), so a body can differentiate
 * with respect to (or through) the values it closes over. */
void graft__grad_localize(graft_trace *t, int n, graft_value *const *v, graft_value **out);
/* Set to_y[id] (to_y zeroed, g->n_nodes bytes) for the ys and every node
 * they depend on.  Returns one past the largest y id (0 with no ys). */
uint32_t graft__grad_mark_to_y(const graft__graph *g, int n_y, graft_value *const *ys,
                               uint8_t *to_y);

/* A node's input values in[0..n_in) and a second array of the same length
 * (tangents, cotangents) for the rule call, on the stack for up to
 * GRAFT__GRAD_SMALL inputs, else on the heap.  Do not copy: in and aux may
 * point into the struct. */
#define GRAFT__GRAD_SMALL 8
typedef struct graft__grad_args {
  graft_value **in, **aux;
  graft_value *in_small[GRAFT__GRAD_SMALL], *aux_small[GRAFT__GRAD_SMALL];
} graft__grad_args;
/* Fill a->in with nd's input values and a->aux with NULL.  Out of memory:
 * fails the trace ("<fn>: out of memory") and returns 0, nothing to free;
 * else returns 1 and a must go to graft__grad_args_free. */
int graft__grad_args_get(graft_trace *t, const char *fn, const graft__node *nd,
                         graft__grad_args *a);
void graft__grad_args_free(graft__grad_args *a);
/* A builder's result for the output like: v, or where v is NULL (not
 * connected, a symbolic zero) NULL or, under GRAFT_UNCONNECTED_ZERO, zeros
 * shaped like like. */
graft_value *graft__grad_unconnected(graft_trace *t, graft_unconnected policy, graft_value *v,
                                     graft_value *like);
/* End a builder's visit: restore the trace's emitting role and, when the
 * trace has failed, clear the n outputs.  Returns the trace's status. */
graft_status graft__grad_finish(graft_trace *t, uint8_t role, int n, graft_value **out);

#endif /* GRAFT_GRAD_INT_H */
