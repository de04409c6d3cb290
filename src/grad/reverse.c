/* Reverse mode: graft_gradients appends the backward subgraph.
 *
 * Only nodes on a path from some x to some y matter.  They are visited in
 * decreasing id order (a reverse topological order), each passing its
 * accumulated cotangent through its op's VJP rule.  A node's cotangent is
 * the sum of its consumers' contributions in decreasing consumer order, a
 * fixed order, so the backward graph is the same on every trace.  A missing
 * cotangent is a symbolic zero: nothing is materialized for it. */
#include "grad/grad.h"

/* Add a contribution to a node's cotangent. */
static void accumulate(graft_trace *t, graft_value **cot, uint32_t id, graft_value *g) {
  cot[id] = cot[id] ? graft_add(t, cot[id], g) : g;
}

/* A control node: the cotangents of its outputs are its GETs' (the GETs'
 * own rules pass nothing on). */
static void control(graft_trace *t, const char *fn, const graft__node *nd, graft_value **cot,
                    const uint8_t *from_x, const uint8_t *to_y) {
  const graft__ctl *c = nd->attr.ctl.ctl;
  int n_all = graft__ctl_outputs(c), any = 0;
  graft_value **oc = graft__calloc((size_t)n_all + 1, sizeof *oc);
  if (!oc) {
    graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", fn);
    return;
  }
  for (int i = 0; i < n_all; i++) {
    uint32_t get = i < c->n_out ? c->gets[i] : c->save_get + (uint32_t)(i - c->n_out);
    any |= (oc[i] = cot[get]) != NULL;
  }
  uint8_t *need = any ? graft__malloc((size_t)nd->n_in + 1) : NULL;
  for (int j = 0; need && j < nd->n_in; j++) need[j] = from_x[nd->in[j]] && to_y[nd->in[j]];
  if (any && !need) graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", fn);
  graft__grad_args a;
  if (need && graft__grad_args_get(t, fn, nd, &a)) {
    graft__vjp_ctl(t, nd, a.in, need, oc, n_all, a.aux);
    for (int j = 0; j < nd->n_in && !t->status; j++) {
      uint32_t u = nd->in[j];
      if (a.aux[j] && from_x[u] && to_y[u] && graft__grad_is_float(a.in[j]))
        accumulate(t, cot, u, a.aux[j]);
    }
    graft__grad_args_free(&a);
  }
  graft__free(need);
  graft__free(oc);
}

static graft_status gradients(graft_trace *t, int n_y, graft_value *const *ys,
                              graft_value *const *seeds, int n_x, graft_value *const *xs,
                              graft_unconnected policy, graft_value **grads);

GRAFT_API graft_status graft_gradients(graft_trace *t, int n_y, graft_value *const *ys,
                                       graft_value *const *seeds, int n_x,
                                       graft_value *const *xs, graft_unconnected policy,
                                       graft_value **grads) {
  /* In a body: values of the traces around become the body's (captured) */
  if (!t || !t->cap || t->status || n_y < 0 || n_x < 0 || (n_y && !ys) || (n_x && !xs))
    return gradients(t, n_y, ys, seeds, n_x, xs, policy, grads);
  graft_value **v = graft__calloc((size_t)(2 * n_y + n_x) + 1, sizeof *v);
  if (!v) return graft_trace_fail(t, GRAFT_ENOMEM, "graft_gradients: out of memory");
  graft__grad_localize(t, n_y, ys, v);
  if (seeds) graft__grad_localize(t, n_y, seeds, v + n_y);
  graft__grad_localize(t, n_x, xs, v + 2 * n_y);
  graft_status st = gradients(t, n_y, v, seeds ? v + n_y : NULL, n_x, v + 2 * n_y, policy, grads);
  graft__free(v);
  return st;
}

static graft_status gradients(graft_trace *t, int n_y, graft_value *const *ys,
                              graft_value *const *seeds, int n_x, graft_value *const *xs,
                              graft_unconnected policy, graft_value **grads) {
  static const char *const fn = "graft_gradients";
  if (!t) return GRAFT_EINVAL;
  if (grads)
    for (int i = 0; i < n_x; i++) grads[i] = NULL;
  if (t->status) return t->status;
  if (n_y < 0 || n_x < 0 || (n_y && !ys) || (n_x && (!xs || !grads)))
    return graft_trace_fail(t, GRAFT_EINVAL, "graft_gradients: bad counts or NULL arrays");
  if (policy != GRAFT_UNCONNECTED_NONE && policy != GRAFT_UNCONNECTED_ZERO)
    return graft_trace_fail(t, GRAFT_EINVAL, "graft_gradients: unknown unconnected policy %d",
                            (int)policy);
  graft_status st;
  if ((st = graft__grad_check_values(t, fn, "ys", n_y, ys, 0)) ||
      (st = graft__grad_check_values(t, fn, "xs", n_x, xs, 0)) ||
      (seeds && (st = graft__grad_check_values(t, fn, "seeds", n_y, seeds, 1))))
    return st;
  for (int k = 0; seeds && k < n_y; k++)
    if (seeds[k] && !graft__grad_same_type(seeds[k], ys[k]))
      return graft_trace_fail(t, GRAFT_ESHAPE, "%s: seed %d must have the dtype and shape of ys[%d]",
                              fn, k, k);

  graft__graph *g = t->g;
  uint32_t n = g->n_nodes;
  uint8_t *from_x = graft__calloc(n, 1), *to_y = graft__calloc(n, 1);
  graft_value **cot = graft__calloc(n, sizeof *cot);
  if (!from_x || !to_y || !cot) {
    st = graft_trace_fail(t, GRAFT_ENOMEM, "graft_gradients: out of memory");
    goto out;
  }
  /* Forward from the xs, backward from the ys: the nodes in between. */
  uint32_t lo = n;
  for (int i = 0; i < n_x; i++) {
    from_x[graft__value_id(xs[i])] = 1;
    lo = GRAFT__MIN(lo, graft__value_id(xs[i]));
  }
  for (uint32_t id = lo; id < n; id++) {
    const graft__node *nd = graft__graph_node(g, id);
    for (int j = 0; j < nd->n_in && !from_x[id]; j++) from_x[id] = from_x[nd->in[j]];
  }
  uint32_t hi = graft__grad_mark_to_y(g, n_y, ys, to_y);

  uint8_t role = t->role;
  t->role = GRAFT__ROLE_BACKWARD;
  for (int k = 0; k < n_y; k++) {
    if (!from_x[graft__value_id(ys[k])] || !graft__grad_is_float(ys[k])) continue;
    graft_value *seed = seeds && seeds[k] ? seeds[k] : graft_ones_like(t, ys[k]);
    accumulate(t, cot, graft__value_id(ys[k]), seed);
  }
  /* Snapshot n: the rules append nodes, which need no visiting. */
  for (uint32_t id = hi; id-- > lo && !t->status;) {
    graft__node *nd = graft__graph_node(g, id);
    if ((graft__ops[nd->op].flags & GRAFT__OPF_CONTROL) && from_x[id] && to_y[id]) {
      control(t, fn, nd, cot, from_x, to_y);
      continue;
    }
    if (!cot[id] || !from_x[id] || !to_y[id]) continue;
    if (!graft__grad_is_float(graft__value(g, id)) || nd->n_in == 0) continue;
    graft__grad_args a; /* a.aux: the inputs' cotangents, set by the rule */
    if (!graft__grad_args_get(t, fn, nd, &a)) break;
    graft__vjp[nd->op](t, nd, a.in, graft__value(g, id), cot[id], a.aux);
    for (int j = 0; j < nd->n_in && !t->status; j++) {
      uint32_t u = nd->in[j];
      if (!a.aux[j] || !from_x[u] || !to_y[u] || !graft__grad_is_float(a.in[j])) continue;
      accumulate(t, cot, u, a.aux[j]);
    }
    graft__grad_args_free(&a);
  }
  for (int i = 0; i < n_x && !t->status; i++) {
    if (!graft__grad_is_float(xs[i])) continue; /* integer xs: NULL under either policy */
    grads[i] = graft__grad_unconnected(t, policy, cot[graft__value_id(xs[i])], xs[i]);
  }
  st = graft__grad_finish(t, role, n_x, grads);
out:
  graft__free(from_x);
  graft__free(to_y);
  graft__free(cot);
  return st;
}
