/* The JVP table: GRAFT_OP_MAP expanded into forward-mode rules. */
#include "grad/grad.h"

const graft__jvp_fn graft__jvp[] = {
#define X(e, name, arity, rule, flags, cost, tile) [GRAFT__OP_##e] = graft__jvp_##e,
    GRAFT_OP_MAP(X)
#undef X
};

_Static_assert(sizeof graft__jvp / sizeof graft__jvp[0] == GRAFT__OP_COUNT,
               "graft__jvp needs one rule per GRAFT_OP_MAP row");

graft_value *graft__jvp_to_shape(graft_trace *t, graft_value *v, graft_value *like) {
  if (graft__grad_same_shape(v, like)) return v;
  return graft_broadcast_to(t, v, graft_value_rank(like), graft_value_shape(like));
}

/* Leaves carry no tangent of their own: the builder seeds the primals. */
#define LEAF(E)                                                                             \
  graft_value *graft__jvp_##E(graft_trace *t, const graft__node *n, graft_value *const *in, \
                              graft_value *y, graft_value *const *tin) {                    \
    (void)t, (void)n, (void)in, (void)y, (void)tin;                                         \
    return NULL;                                                                            \
  }
LEAF(INPUT)
LEAF(VAR_READ)
LEAF(CONST)
LEAF(FILL)
#undef LEAF

/* The new value of the variable is x broadcast to its shape. */
graft_value *graft__jvp_ASSIGN(graft_trace *t, const graft__node *n, graft_value *const *in,
                               graft_value *y, graft_value *const *tin) {
  (void)n, (void)in;
  return tin[0] ? graft__jvp_to_shape(t, tin[0], y) : NULL;
}

/* An optimizer step carries no tangent (as in reverse mode). */
graft_value *graft__jvp_UPDATE(graft_trace *t, const graft__node *n, graft_value *const *in,
                               graft_value *y, graft_value *const *tin) {
  (void)t, (void)n, (void)in, (void)y, (void)tin;
  return NULL;
}

/* A custom rule is given for reverse mode only; forward mode differentiates
 * the ops that computed y (input 0), which is the same derivative. */
graft_value *graft__jvp_CUSTOM(graft_trace *t, const graft__node *n, graft_value *const *in,
                               graft_value *y, graft_value *const *tin) {
  (void)t, (void)n, (void)in, (void)y;
  return tin[0];
}
