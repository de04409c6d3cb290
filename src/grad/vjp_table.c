/* The VJP table: GRAFT_OP_MAP expanded into rules (the helpers the rule
 * files share are in grad_util.c). */
#include "grad/grad.h"

const graft__vjp_fn graft__vjp[] = {
#define X(e, name, arity, rule, flags, cost, tile) [GRAFT__OP_##e] = graft__vjp_##e,
    GRAFT_OP_MAP(X)
#undef X
};

_Static_assert(sizeof graft__vjp / sizeof graft__vjp[0] == GRAFT__OP_COUNT,
               "graft__vjp needs one rule per GRAFT_OP_MAP row");

/* Leaves have no inputs; side effects and the custom region pass through. */
void graft__vjp_INPUT(graft_trace *t, const graft__node *n, graft_value *const *in, graft_value *y,
                      graft_value *g, graft_value **gx) {
  (void)t, (void)n, (void)in, (void)y, (void)g, (void)gx;
}
void graft__vjp_VAR_READ(graft_trace *t, const graft__node *n, graft_value *const *in,
                         graft_value *y, graft_value *g, graft_value **gx) {
  (void)t, (void)n, (void)in, (void)y, (void)g, (void)gx;
}
void graft__vjp_CONST(graft_trace *t, const graft__node *n, graft_value *const *in, graft_value *y,
                      graft_value *g, graft_value **gx) {
  (void)t, (void)n, (void)in, (void)y, (void)g, (void)gx;
}
void graft__vjp_FILL(graft_trace *t, const graft__node *n, graft_value *const *in, graft_value *y,
                     graft_value *g, graft_value **gx) {
  (void)t, (void)n, (void)in, (void)y, (void)g, (void)gx;
}

/* The new value of the variable is x broadcast to its shape. */
void graft__vjp_ASSIGN(graft_trace *t, const graft__node *n, graft_value *const *in,
                       graft_value *y, graft_value *g, graft_value **gx) {
  (void)n, (void)y;
  gx[0] = graft__grad_unbroadcast(t, g, in[0]);
}

/* The user's rule answers for xs (inputs 1..); y (input 0) gets nothing:
 * the ops that computed it are not differentiated. */
void graft__vjp_CUSTOM(graft_trace *t, const graft__node *n, graft_value *const *in,
                       graft_value *y, graft_value *g, graft_value **gx) {
  const graft__custom *rec = n->attr.custom.rec;
  int n_x = n->n_in - 1;
  graft_status st = rec->vjp(t, n_x, in + 1, y, g, gx + 1, rec->user);
  gx[0] = NULL;
  if (st != GRAFT_OK && !graft_trace_status(t))
    graft_trace_fail(t, st, "custom_gradient: the vjp function returned %s", graft_status_name(st));
}
