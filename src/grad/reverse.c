/* Reverse mode: graft_gradients appends the backward subgraph.
 *
 * Only nodes on a path from some x to some y matter.  They are visited in
 * decreasing id order (a reverse topological order), each passing its
 * accumulated cotangent through its op's VJP rule.  A node's cotangent is
 * the sum of its consumers' contributions in decreasing consumer order, a
 * fixed order, so the backward graph is the same on every trace.  A missing
 * cotangent is a symbolic zero: nothing is materialized for it. */
#include <string.h>

#include "grad/grad.h"

static int is_float(const graft_value *v) {
  graft_dtype d = graft_value_dtype(v);
  return d == GRAFT_F32 || d == GRAFT_F64;
}

static graft_status check_values(graft_trace *t, const char *what, int n, graft_value *const *v,
                                 int allow_null) {
  for (int i = 0; i < n; i++) {
    if (!v[i]) {
      if (allow_null) continue;
      return graft_trace_fail(t, GRAFT_EINVAL, "graft_gradients: %s[%d] is NULL", what, i);
    }
    if (v[i]->g != t->g)
      return graft_trace_fail(t, GRAFT_EMISUSE, "graft_gradients: %s[%d] belongs to another trace",
                              what, i);
    if (v[i]->id == GRAFT__POISON_ID) return t->status ? t->status : GRAFT_EINVAL;
  }
  return GRAFT_OK;
}

/* Add a contribution to a node's cotangent. */
static void accumulate(graft_trace *t, graft_value **cot, uint32_t id, graft_value *g) {
  cot[id] = cot[id] ? graft_add(t, cot[id], g) : g;
}

GRAFT_API graft_status graft_gradients(graft_trace *t, int n_y, graft_value *const *ys,
                                       graft_value *const *seeds, int n_x,
                                       graft_value *const *xs, graft_unconnected policy,
                                       graft_value **grads) {
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
  if ((st = check_values(t, "ys", n_y, ys, 0)) || (st = check_values(t, "xs", n_x, xs, 0)) ||
      (seeds && (st = check_values(t, "seeds", n_y, seeds, 1))))
    return st;
  for (int k = 0; seeds && k < n_y; k++) {
    if (!seeds[k]) continue;
    const graft__node *a = (const graft__node *)seeds[k], *b = (const graft__node *)ys[k];
    if (a->dtype != b->dtype || a->rank != b->rank ||
        memcmp(a->shape, b->shape, (size_t)a->rank * sizeof *a->shape))
      return graft_trace_fail(t, GRAFT_ESHAPE,
                              "graft_gradients: seed %d must have the dtype and shape of ys[%d]", k, k);
  }

  graft__graph *g = t->g;
  uint32_t n = g->n_nodes;
  uint8_t *from_x = graft__calloc(n, 1), *to_y = graft__calloc(n, 1);
  graft_value **cot = graft__calloc(n, sizeof *cot);
  if (!from_x || !to_y || !cot) {
    st = graft_trace_fail(t, GRAFT_ENOMEM, "graft_gradients: out of memory");
    goto out;
  }
  /* Forward from the xs, backward from the ys: the nodes in between. */
  uint32_t lo = n, hi = 0;
  for (int i = 0; i < n_x; i++) {
    from_x[xs[i]->id] = 1;
    lo = GRAFT__MIN(lo, xs[i]->id);
  }
  for (uint32_t id = lo; id < n; id++) {
    const graft__node *nd = graft__graph_node(g, id);
    for (int j = 0; j < nd->n_in && !from_x[id]; j++) from_x[id] = from_x[nd->in[j]];
  }
  for (int k = 0; k < n_y; k++) {
    to_y[ys[k]->id] = 1;
    hi = GRAFT__MAX(hi, ys[k]->id + 1);
  }
  for (uint32_t id = hi; id-- > 0;) {
    if (!to_y[id]) continue;
    const graft__node *nd = graft__graph_node(g, id);
    for (int j = 0; j < nd->n_in; j++) to_y[nd->in[j]] = 1;
  }

  uint8_t role = t->role;
  t->role = GRAFT__ROLE_BACKWARD;
  for (int k = 0; k < n_y; k++) {
    if (!from_x[ys[k]->id] || !is_float(ys[k])) continue;
    graft_value *seed = seeds && seeds[k] ? seeds[k] : graft_ones_like(t, ys[k]);
    accumulate(t, cot, ys[k]->id, seed);
  }
  /* Snapshot n: the rules append nodes, which need no visiting. */
  for (uint32_t id = hi; id-- > lo && !t->status;) {
    if (!cot[id] || !from_x[id] || !to_y[id]) continue;
    graft__node *nd = graft__graph_node(g, id);
    if (!is_float(&nd->v) || nd->n_in == 0) continue;
    graft_value *in_small[8], **in = in_small, *gx_small[8], **gx = gx_small;
    if (nd->n_in > 8) {
      in = graft__calloc((size_t)nd->n_in, sizeof *in);
      gx = graft__calloc((size_t)nd->n_in, sizeof *gx);
      if (!in || !gx) {
        graft__free(in);
        graft__free(gx);
        graft_trace_fail(t, GRAFT_ENOMEM, "graft_gradients: out of memory");
        break;
      }
    }
    for (int j = 0; j < nd->n_in; j++) {
      in[j] = &graft__graph_node(g, nd->in[j])->v;
      gx[j] = NULL;
    }
    graft__vjp[nd->op](t, nd, in, &nd->v, cot[id], gx);
    for (int j = 0; j < nd->n_in && !t->status; j++) {
      uint32_t u = nd->in[j];
      if (!gx[j] || !from_x[u] || !to_y[u] || !is_float(in[j])) continue;
      accumulate(t, cot, u, gx[j]);
    }
    if (in != in_small) {
      graft__free(in);
      graft__free(gx);
    }
  }
  for (int i = 0; i < n_x && !t->status; i++) {
    if (!is_float(xs[i])) continue;
    graft_value *c = cot[xs[i]->id];
    if (!c && policy == GRAFT_UNCONNECTED_ZERO) c = graft_zeros_like(t, xs[i]);
    grads[i] = c;
  }
  t->role = role;
  st = t->status;
  if (st)
    for (int i = 0; i < n_x; i++) grads[i] = NULL;
out:
  graft__free(from_x);
  graft__free(to_y);
  graft__free(cot);
  return st;
}
