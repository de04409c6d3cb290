/* Forward mode: graft_jvp appends tangent nodes, and the compositions built
 * on it (Hessian-vector products, dense Jacobians).
 *
 * Nodes between the primals and the ys are visited in increasing id order
 * (a topological order); each applies its op's JVP rule to its inputs'
 * tangents.  A missing tangent is a symbolic zero. */
#include "grad/grad.h"

/* A control node: its rule gives the tangent of each output, which its GETs
 * take (their own rules are never called: the node's tangent stays NULL). */
static void control(graft_trace *t, const char *fn, const graft__node *nd, graft_value **tan,
                    const uint8_t *seeded) {
  const graft__ctl *c = nd->attr.ctl.ctl;
  int n_all = graft__ctl_outputs(c);
  graft__grad_args a;
  if (!graft__grad_args_get(t, fn, nd, &a)) return;
  int any = 0;
  for (int j = 0; j < nd->n_in; j++) {
    a.aux[j] = graft__grad_is_float(a.in[j]) ? tan[nd->in[j]] : NULL;
    any |= a.aux[j] != NULL;
  }
  graft_value **to = any ? graft__calloc((size_t)n_all + 1, sizeof *to) : NULL;
  if (any && !to) graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", fn);
  if (to && !graft__jvp_ctl(t, nd, a.in, a.aux, to)) {
    for (int i = 0; i < n_all; i++) {
      uint32_t get = i < c->n_out ? c->gets[i] : c->save_get + (uint32_t)(i - c->n_out);
      if (!seeded[get]) tan[get] = to[i];
    }
  }
  graft__free(to);
  graft__grad_args_free(&a);
}

static graft_status jvp(graft_trace *t, int n_x, graft_value *const *primals,
                        graft_value *const *tangents, int n_y, graft_value *const *ys,
                        graft_unconnected policy, graft_value **jvps);

GRAFT_API graft_status graft_jvp(graft_trace *t, int n_x, graft_value *const *primals,
                                 graft_value *const *tangents, int n_y, graft_value *const *ys,
                                 graft_unconnected policy, graft_value **jvps) {
  /* In a body: values of the traces around become the body's (captured) */
  if (!t || !t->cap || t->status || n_x < 0 || n_y < 0 || (n_x && (!primals || !tangents)) ||
      (n_y && !ys))
    return jvp(t, n_x, primals, tangents, n_y, ys, policy, jvps);
  graft_value **v = graft__calloc((size_t)(2 * n_x + n_y) + 1, sizeof *v);
  if (!v) return graft_trace_fail(t, GRAFT_ENOMEM, "graft_jvp: out of memory");
  graft__grad_localize(t, n_x, primals, v);
  graft__grad_localize(t, n_x, tangents, v + n_x);
  graft__grad_localize(t, n_y, ys, v + 2 * n_x);
  graft_status st = jvp(t, n_x, v, v + n_x, n_y, v + 2 * n_x, policy, jvps);
  graft__free(v);
  return st;
}

static graft_status jvp(graft_trace *t, int n_x, graft_value *const *primals,
                        graft_value *const *tangents, int n_y, graft_value *const *ys,
                        graft_unconnected policy, graft_value **jvps) {
  static const char *const fn = "graft_jvp";
  if (!t) return GRAFT_EINVAL;
  if (jvps)
    for (int k = 0; k < n_y; k++) jvps[k] = NULL;
  if (t->status) return t->status;
  if (n_x < 0 || n_y < 0 || (n_x && (!primals || !tangents)) || (n_y && (!ys || !jvps)))
    return graft_trace_fail(t, GRAFT_EINVAL, "%s: bad counts or NULL arrays", fn);
  if (policy != GRAFT_UNCONNECTED_NONE && policy != GRAFT_UNCONNECTED_ZERO)
    return graft_trace_fail(t, GRAFT_EINVAL, "%s: unknown unconnected policy %d", fn, (int)policy);
  graft_status st;
  if ((st = graft__grad_check_values(t, fn, "primals", n_x, primals, 0)) ||
      (st = graft__grad_check_values(t, fn, "tangents", n_x, tangents, 1)) ||
      (st = graft__grad_check_values(t, fn, "ys", n_y, ys, 0)))
    return st;
  for (int i = 0; i < n_x; i++) {
    for (int j = 0; j < i; j++)
      if (primals[j] == primals[i])
        return graft_trace_fail(t, GRAFT_EINVAL, "%s: primals[%d] and primals[%d] are the same value", fn, j, i);
    if (tangents[i] && !graft__grad_same_type(tangents[i], primals[i]))
      return graft_trace_fail(t, GRAFT_ESHAPE, "%s: tangents[%d] must have the dtype and shape of primals[%d]",
                              fn, i, i);
  }

  graft__graph *g = t->g;
  uint32_t n = g->n_nodes, lo = n;
  graft_value **tan = graft__calloc(n, sizeof *tan);
  uint8_t *to_y = graft__calloc(n, 1), *seeded = graft__calloc(n, 1);
  if (!tan || !to_y || !seeded) {
    st = graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", fn);
    goto out;
  }
  uint32_t hi = graft__grad_mark_to_y(g, n_y, ys, to_y);
  for (int i = 0; i < n_x; i++) {
    seeded[graft__value_id(primals[i])] = 1;
    if (graft__grad_is_float(primals[i])) tan[graft__value_id(primals[i])] = tangents[i];
    lo = GRAFT__MIN(lo, graft__value_id(primals[i]));
  }

  uint8_t role = t->role;
  t->role = GRAFT__ROLE_TANGENT;
  for (uint32_t id = lo; id < hi && !t->status; id++) {
    if (seeded[id] || !to_y[id]) continue;
    graft__node *nd = graft__graph_node(g, id);
    if (graft__ops[nd->op].flags & GRAFT__OPF_CONTROL) {
      control(t, fn, nd, tan, seeded);
      continue;
    }
    if (nd->n_in == 0 || !graft__grad_is_float(graft__value(g, id))) continue;
    graft__grad_args a; /* a.aux: the inputs' tangents */
    if (!graft__grad_args_get(t, fn, nd, &a)) break;
    int any = 0;
    for (int j = 0; j < nd->n_in; j++) {
      a.aux[j] = graft__grad_is_float(a.in[j]) ? tan[nd->in[j]] : NULL;
      any |= a.aux[j] != NULL;
    }
    if (any) tan[id] = graft__jvp[nd->op](t, nd, a.in, graft__value(g, id), a.aux);
    graft__grad_args_free(&a);
  }
  for (int k = 0; k < n_y && !t->status; k++) {
    graft_value *v = graft__grad_is_float(ys[k]) ? tan[graft__value_id(ys[k])] : NULL;
    jvps[k] = graft__grad_unconnected(t, policy, v, ys[k]);
  }
  st = graft__grad_finish(t, role, n_y, jvps);
out:
  graft__free(tan);
  graft__free(to_y);
  graft__free(seeded);
  return st;
}

GRAFT_API graft_status graft_hvp(graft_trace *t, graft_value *y, int n_x, graft_value *const *xs,
                                 graft_value *const *vs, graft_value **out) {
  if (!t) return GRAFT_EINVAL;
  if (out)
    for (int i = 0; i < n_x; i++) out[i] = NULL;
  if (t->status) return t->status;
  if (n_x < 1 || !xs || !vs || !out || !y)
    return graft_trace_fail(t, GRAFT_EINVAL, "graft_hvp: needs y, n_x >= 1 and the xs, vs, out arrays");
  if (graft_value_rank(y) != 0)
    return graft_trace_fail(t, GRAFT_ESHAPE, "graft_hvp: y must be a scalar (rank 0), has rank %d",
                            graft_value_rank(y));
  graft_value **buf = graft__calloc((size_t)n_x * 4, sizeof *buf);
  if (!buf) return graft_trace_fail(t, GRAFT_ENOMEM, "graft_hvp: out of memory");
  graft_value **grads = buf, **fx = buf + n_x, **fv = buf + 2 * n_x, **fg = buf + 3 * n_x;
  /* forward over reverse: the JVP of the gradient along vs.  Integer xs
   * (labels) have no gradient and get NULL, as in graft_gradients. */
  graft_status st = graft_gradients(t, 1, &y, NULL, n_x, xs, GRAFT_UNCONNECTED_ZERO, grads);
  int nf = 0;
  for (int i = 0; i < n_x && !st; i++)
    if (grads[i]) {
      fx[nf] = xs[i];
      fv[nf] = vs[i];
      fg[nf++] = grads[i];
    }
  graft_value **hv = grads; /* reuse: the gradients were copied to fg */
  if (!st && nf) st = graft_jvp(t, nf, fx, fv, nf, fg, GRAFT_UNCONNECTED_ZERO, hv);
  for (int i = 0, k = 0; i < n_x && !st; i++)
    out[i] = (k < nf && fx[k] == xs[i]) ? hv[k++] : NULL;
  graft__free(buf);
  return st;
}

/* Flatten v to [numel] (concrete dims required). */
static int64_t concrete_numel(const graft_value *v) {
  return graft__numel(graft_value_rank(v), graft_value_shape(v));
}

static graft_status jacobian(graft_trace *t, graft_value *y, graft_value *x, int fwd, graft_value **out) {
  const char *fn = fwd ? "graft_jacobian_fwd" : "graft_jacobian_rev";
  if (!t) return GRAFT_EINVAL;
  if (out) *out = NULL;
  if (t->status) return t->status;
  if (!y || !x || !out) return graft_trace_fail(t, GRAFT_EINVAL, "%s: NULL argument", fn);
  graft_status st;
  if ((st = graft__grad_check_values(t, fn, "y", 1, &y, 0)) ||
      (st = graft__grad_check_values(t, fn, "x", 1, &x, 0)))
    return st;
  /* Integers have no derivative: a zero Jacobian would hide the mistake
   * (reverse mode gives no gradient at all for them). */
  for (int k = 0; k < 2; k++) {
    graft_value *v = k ? y : x;
    if (!graft__grad_is_float(v))
      return graft_trace_fail(t, GRAFT_EDTYPE, "%s: %s is %s; a Jacobian needs f32 or f64 x and y",
                              fn, k ? "y" : "x", graft_dtype_name(graft_value_dtype(v)));
  }
  int64_t ny = concrete_numel(y), nx = concrete_numel(x);
  int ry = graft_value_rank(y), rx = graft_value_rank(x);
  if (ny < 0 || nx < 0)
    return graft_trace_fail(t, GRAFT_EUNSUPPORTED, "%s: needs concrete shapes", fn);
  if (ry + rx > GRAFT_MAX_RANK)
    return graft_trace_fail(t, GRAFT_ESHAPE, "%s: rank %d + %d exceeds %d", fn, ry, rx, GRAFT_MAX_RANK);
  int64_t n = fwd ? nx : ny;
  graft_value *seed_of = fwd ? x : y;
  graft_value **parts = graft__calloc((size_t)(n ? n : 1), sizeof *parts);
  double *basis = graft__calloc((size_t)(n ? n : 1), sizeof *basis);
  if (!parts || !basis) {
    graft__free(parts);
    graft__free(basis);
    return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", fn);
  }
  /* e_k as a constant of the seed's shape, one per column (fwd) or row (rev). */
  int64_t flat_other = fwd ? ny : nx;
  for (int64_t k = 0; k < n && !t->status; k++) {
    basis[k] = 1;
    graft_value *e = graft_cast(t, graft_constant(t, GRAFT_F64, graft_value_rank(seed_of),
                                                  graft_value_shape(seed_of), basis),
                                graft_value_dtype(seed_of));
    basis[k] = 0;
    graft_value *d = NULL;
    if (fwd) graft_jvp(t, 1, &x, &e, 1, &y, GRAFT_UNCONNECTED_ZERO, &d);
    else graft_gradients(t, 1, &y, &e, 1, &x, GRAFT_UNCONNECTED_ZERO, &d);
    int64_t shape[2] = {fwd ? flat_other : 1, fwd ? 1 : flat_other};
    /* a row of reverse mode has x's dtype: the Jacobian has y's */
    if (!fwd && graft_value_dtype(d) != graft_value_dtype(y)) d = graft_cast(t, d, graft_value_dtype(y));
    parts[k] = graft_reshape(t, d, 2, shape);
  }
  graft_value *j = NULL;
  if (!t->status) {
    if (n == 0) {
      int64_t shape[2] = {ny, nx};
      j = graft_fill(t, graft_value_dtype(y), 2, shape, 0);
    } else {
      j = graft_concat(t, (int)n, parts, fwd ? 1 : 0);
    }
    int64_t full[GRAFT_MAX_RANK];
    for (int i = 0; i < ry; i++) full[i] = graft_value_shape(y)[i];
    for (int i = 0; i < rx; i++) full[ry + i] = graft_value_shape(x)[i];
    j = graft_reshape(t, j, ry + rx, full);
  }
  graft__free(parts);
  graft__free(basis);
  if (t->status) return t->status;
  *out = j;
  return GRAFT_OK;
}

GRAFT_API graft_status graft_jacobian_fwd(graft_trace *t, graft_value *y, graft_value *x, graft_value **out) {
  return jacobian(t, y, x, 1, out);
}

GRAFT_API graft_status graft_jacobian_rev(graft_trace *t, graft_value *y, graft_value *x, graft_value **out) {
  return jacobian(t, y, x, 0, out);
}
