/* The rows of the MPI collectives (ALLREDUCE, ALLREDUCE_TAKE, graft/mpi.h):
 * no derivative through them is defined.  Data-parallel training
 * all-reduces gradients after graft_gradients, so nothing differentiates
 * a collective; a trace that does fails with a message saying what to do
 * instead. */
#include "grad/grad.h"

static void refuse(graft_trace *t, const graft__node *n) {
  graft_trace_fail(t, GRAFT_EUNSUPPORTED,
                   "%s: no gradient through an MPI collective (take gradients first, then "
                   "all-reduce them: graft_module_allreduce_gradients)",
                   graft__ops[n->op].name);
}

void graft__vjp_ALLREDUCE(graft_trace *t, const graft__node *n, graft_value *const *in,
                          graft_value *y, graft_value *g, graft_value **gx) {
  (void)in, (void)y, (void)g, (void)gx;
  refuse(t, n);
}

void graft__vjp_ALLREDUCE_TAKE(graft_trace *t, const graft__node *n, graft_value *const *in,
                               graft_value *y, graft_value *g, graft_value **gx) {
  (void)in, (void)y, (void)g, (void)gx;
  refuse(t, n);
}

graft_value *graft__jvp_ALLREDUCE(graft_trace *t, const graft__node *n, graft_value *const *in,
                                  graft_value *y, graft_value *const *tin) {
  (void)in, (void)y, (void)tin;
  refuse(t, n);
  return NULL;
}

graft_value *graft__jvp_ALLREDUCE_TAKE(graft_trace *t, const graft__node *n,
                                       graft_value *const *in, graft_value *y,
                                       graft_value *const *tin) {
  (void)in, (void)y, (void)tin;
  refuse(t, n);
  return NULL;
}
