/* graft: data-dependent control flow (cond, while_loop, scan) and
 * rematerialization, inside a trace.
 *
 * Host C in a trace callback runs once, at trace time.  These calls stage
 * control flow into the graph instead: each branch or body is a trace
 * callback (graft_trace_fn) traced once, into a subgraph of its own, and
 * the control node runs it at call time as often as the data says.  A body
 * gets its own graft_trace; its values belong to it.
 *
 * Closures: a body may use any value of the traces around it (and read
 * variables); such a value is captured, an input of the control node, so
 * gradients flow to it, and graft_gradients / graft_jvp inside a body may
 * name it (they differentiate the body's own copy).  A body may not assign
 * variables or step an optimizer (GRAFT_EUNSUPPORTED).
 *
 * Gradients: all four are differentiable in reverse and forward mode, to
 * any order.  The backward of a cond is a cond of its branches' backward
 * rules; of a scan, a reverse scan over the carries the forward saved; of a
 * while_loop, the same over the iterations it ran, which needs
 * opts.max_iters (reverse mode of an unbounded loop is GRAFT_EUNSUPPORTED).
 * A backward body recomputes its body's forward ops from the saved inputs
 * (so a body's intermediates are never kept across iterations).
 *
 * Each call returns the trace's sticky status; on failure the outs are the
 * poison value and the message (naming the construct, the branch or body,
 * and the output) is on the trace.
 */
#ifndef GRAFT_CONTROL_H
#define GRAFT_CONTROL_H

#include <stdint.h>

#include "graft/function.h"
#include "graft/status.h"
#include "graft/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* outs[0..n_out) = then_fn(ins) if pred is nonzero, else else_fn(ins).
 * pred is a rank-0 value of any dtype.  Both branches are called as
 * fn(t', n_in, ins', n_out, outs', user) and must give n_out outputs of
 * the same dtype and shape (else GRAFT_EDTYPE / GRAFT_ESHAPE, naming the
 * output).  Only the taken branch runs. */
GRAFT_API graft_status graft_cond(graft_trace *t, graft_value *pred, int n_in,
                                  graft_value *const *ins, graft_trace_fn then_fn,
                                  graft_trace_fn else_fn, void *user, int n_out,
                                  graft_value **outs);

typedef struct graft_while_opts {
  /* > 0: stop after this many iterations even if cond still holds (and
   * allow reverse mode, which saves the carries of at most this many);
   * 0: unbounded. */
  int64_t max_iters;
} graft_while_opts;

/* vars = init; while (cond_fn(vars)) vars = body_fn(vars); outs = vars.
 * cond_fn is called as fn(t', n_vars, vars, 1, &pred, user) (pred rank 0,
 * nonzero = go on), body_fn as fn(t', n_vars, vars, n_vars, next, user);
 * next[i] must have init[i]'s dtype and shape.  opts may be NULL. */
GRAFT_API graft_status graft_while_loop(graft_trace *t, graft_trace_fn cond_fn,
                                        graft_trace_fn body_fn, void *user, int n_vars,
                                        graft_value *const *init, graft_value **outs,
                                        const graft_while_opts *opts);

typedef struct graft_scan_opts {
  int reverse;        /* iterate from the last slice to the first */
  /* Reverse mode keeps every checkpoint-th carry (0 or 1: every carry) and
   * recomputes the others from them, block by block. */
  int64_t checkpoint;
} graft_scan_opts;

/* carry = init; for each i along the leading axis of the xs (all of one
 * length T >= 0): (carry, y_i) = body_fn(carry, xs[..][i]).  body_fn is
 * called as fn(t', n_carry + n_xs, [carry..., x_i...], n_carry + n_ys,
 * [next carry..., y_i...], user).  outs gets n_carry + n_ys values: the
 * final carries, then each y stacked along a new leading axis of length T
 * (with reverse, row i of a y is still the output of slice i).  n_xs >= 1:
 * the xs give the length.  opts may be NULL. */
GRAFT_API graft_status graft_scan(graft_trace *t, graft_trace_fn body_fn, void *user, int n_carry,
                                  graft_value *const *init, int n_xs, graft_value *const *xs,
                                  int n_ys, graft_value **outs, const graft_scan_opts *opts);

/* outs = fn(ins), whose intermediates the backward pass recomputes instead
 * of keeping (JAX's checkpoint / remat).  Regions may nest; the gradients
 * are bitwise those of the region inlined. */
GRAFT_API graft_status graft_remat(graft_trace *t, graft_trace_fn fn, void *user, int n_in,
                                   graft_value *const *ins, int n_out, graft_value **outs);

#ifdef __cplusplus
}
#endif

#endif /* GRAFT_CONTROL_H */
