/* graft: optimizers, as graph ops inside the traced training step.
 *
 * An optimizer is a module (graft/module.h) that holds, for the variables
 * it updates, their slots (momentum buffers, Adam's moments) and its step
 * count as module variables, so a checkpoint of a tree holding it saves and
 * restores the whole training state.  Inside a trace, graft_optimizer_apply
 * appends one fused update per variable: a single tiled pass that reads the
 * weight, its gradient and its slots once and writes the new weight and
 * slots once, with the same bits at every thread count.  Like every
 * assignment, the update commits only when the whole call succeeds.  The
 * learning rate may be a variable (rank 0): a schedule changes it between
 * calls with no retrace.
 *
 * The rules are PyTorch's (torch.optim), with wd the weight decay and g the
 * gradient (after clipping):
 *   SGD       w -= lr (g + wd w)
 *   MOMENTUM  b = mu b + (g + wd w);  w -= lr b
 *   NESTEROV  b = mu b + (g + wd w);  w -= lr (g + wd w + mu b)
 *   ADAM      g' = g + wd w;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;
 *             w -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *   ADAMW     w *= 1 - lr wd, then ADAM's step with g' = g
 * where t counts the steps taken (1 at the first).
 *
 * Thread safety: an optimizer must not be applied by two traces at once.
 */
#ifndef GRAFT_OPTIM_H
#define GRAFT_OPTIM_H

#include "graft/module.h"
#include "graft/status.h"
#include "graft/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum graft_optimizer_kind {
  GRAFT_OPT_SGD = 0,
  GRAFT_OPT_MOMENTUM,
  GRAFT_OPT_NESTEROV,
  GRAFT_OPT_ADAM,
  GRAFT_OPT_ADAMW
} graft_optimizer_kind;

/* Option bag: designated initializers; a zero field takes its default. */
typedef struct graft_optimizer_desc {
  graft_optimizer_kind kind;
  double lr;                /* > 0; ignored when lr_var is set */
  graft_variable *lr_var;   /* optional: a rank-0 f32/f64 variable read at
                               every call (tracked by the optimizer, so it
                               is checkpointed with it) */
  double momentum;          /* MOMENTUM, NESTEROV: in (0, 1); 0 = 0.9 */
  double beta1, beta2;      /* ADAM, ADAMW: in (0, 1); 0 = 0.9, 0.999 */
  double eps;               /* ADAM, ADAMW: > 0; 0 = 1e-8 */
  double weight_decay;      /* >= 0; 0 = none */
  double clip_norm;         /* > 0: gradients are scaled so that their global
                               norm is at most clip_norm (as
                               graft_clip_by_global_norm); 0 = no clipping */
} graft_optimizer_desc;

/* Create an optimizer module (parent and name as graft_module_create) for
 * the n distinct f32/f64 variables vars (held, not owned: they stay the
 * caller's or their module's).  Its slots are created now, zeroed, as
 * variables of one submodule per variable (named after the variable:
 * "model/dense/w" -> "model_dense_w"; MOMENTUM and NESTEROV: "momentum",
 * ADAM and ADAMW: "m" and "v"), and its step count is the f64 variable
 * "step" (0); the learning-rate variable, if any, is tracked under "lr"
 * (a slot module whose name is taken, as for a variable named "step",
 * gets the next sibling name: "step_1").  GRAFT_EINVAL (with
 * graft_last_errmsg) for a bad option, a NULL, repeated or integer
 * variable; GRAFT_EMISUSE for a destroyed one; GRAFT_ENOMEM.  All or
 * nothing: after a failure parent is as it was. */
GRAFT_API graft_status graft_optimizer_create(graft_module *parent, const char *name,
                                              const graft_optimizer_desc *desc, int n,
                                              graft_variable *const *vars, graft_module **out);

/* Inside a trace: one step of every variable of opt, grads[i] being the
 * gradient of its i-th variable (its dtype and shape; NULL: that variable
 * is left as it is, its slots too).  The step count advances by one.
 * Reads of the variables later in this trace see their new values.
 * Returns the trace's sticky status. */
GRAFT_API graft_status graft_optimizer_apply(graft_trace *t, graft_module *opt, int n,
                                             graft_value *const *grads);

/* Inside a trace: out[i] = xs[i] * min(1, max_norm / (norm + 1e-6)), where
 * norm (written to *norm when not NULL, f64, rank 0) is the global 2-norm of
 * the n f32/f64 values xs (NULL entries skipped and left NULL in out), as
 * torch.nn.utils.clip_grad_norm_.  max_norm > 0. */
GRAFT_API graft_status graft_clip_by_global_norm(graft_trace *t, int n, graft_value *const *xs,
                                                 double max_norm, graft_value **out,
                                                 graft_value **norm);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_OPTIM_H */
