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

/* An optimizer step is not differentiated (its value is the packed new
 * state; the weight's new value is read through a slice, whose gradient
 * stops here). */
void graft__vjp_UPDATE(graft_trace *t, const graft__node *n, graft_value *const *in,
                       graft_value *y, graft_value *g, graft_value **gx) {
  (void)t, (void)n, (void)in, (void)y, (void)g, (void)gx;
}

/* Check what a custom rule returned for input j (of the CUSTOM node n,
 * whose input 0 is y): a value of this trace with the input's dtype and
 * shape, or NULL. */
static void check_custom_cotangent(graft_trace *t, const graft__node *n, int j,
                                   graft_value *x, graft_value *gx) {
  graft__node *c;
  const char *why = NULL;
  switch (graft__trace_value(t, gx, &c)) {
  case GRAFT__VALUE_NULL: return;
  case GRAFT__VALUE_NODE: break;
  case GRAFT__VALUE_POISON: why = "the poison value of another (failed) trace"; break;
  case GRAFT__VALUE_FOREIGN: why = "a value of another trace, or of one that ended"; break;
  }
  if (why) {
    graft_trace_fail(t, GRAFT_EMISUSE, "custom_gradient (op #%u): the vjp function's cotangent for "
                     "xs[%d] is %s", n->id, j - 1, why);
    return;
  }
  if (graft__grad_same_type(gx, x)) return;
  const graft__node *xn = graft__value_node(t->g, x);
  char want[96], got[96];
  graft__shape_str(want, sizeof want, xn->rank, xn->shape);
  graft__shape_str(got, sizeof got, c->rank, c->shape);
  graft_trace_fail(t, c->dtype != xn->dtype ? GRAFT_EDTYPE : GRAFT_ESHAPE,
                   "custom_gradient (op #%u): the vjp function's cotangent for xs[%d] is %s%s, "
                   "expected %s%s (the dtype and shape of xs[%d])", n->id, j - 1,
                   graft_dtype_name((graft_dtype)c->dtype), got,
                   graft_dtype_name((graft_dtype)xn->dtype), want, j - 1);
}

/* The user's rule answers for xs (inputs 1..); y (input 0) gets nothing:
 * the ops that computed it are not differentiated.  The rule may build
 * gradients itself (of other regions), but one that reaches its own region
 * again would recurse without end: refused, as is nesting past
 * GRAFT__MAX_VJP_DEPTH rules. */
void graft__vjp_CUSTOM(graft_trace *t, const graft__node *n, graft_value *const *in,
                       graft_value *y, graft_value *g, graft_value **gx) {
  const graft__custom *rec = n->attr.custom.rec;
  int n_x = n->n_in - 1;
  gx[0] = NULL;
  for (int d = 0; d < t->vjp_depth; d++)
    if (t->vjp_active[d] == n->id) {
      graft_trace_fail(t, GRAFT_EMISUSE, "custom_gradient (op #%u): its vjp function builds "
                       "gradients through its own region (it would recurse without end)", n->id);
      return;
    }
  if (t->vjp_depth == GRAFT__MAX_VJP_DEPTH) {
    graft_trace_fail(t, GRAFT_EUNSUPPORTED, "custom_gradient (op #%u): vjp functions nested %d "
                     "deep (each building gradients of another custom region)", n->id,
                     GRAFT__MAX_VJP_DEPTH);
    return;
  }
  t->vjp_active[t->vjp_depth++] = n->id;
  graft_status st = rec->vjp(t, n_x, in + 1, y, g, gx + 1, rec->user);
  t->vjp_depth--;
  if (st != GRAFT_OK && !graft_trace_status(t))
    graft_trace_fail(t, st, "custom_gradient (op #%u): the vjp function returned %d (%s)", n->id,
                     (int)st, graft_status_name(st));
  for (int j = 1; j <= n_x && !graft_trace_status(t); j++)
    check_custom_cotangent(t, n, j, in[j], gx[j]);
}
