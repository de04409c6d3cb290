/* Helpers shared by the gradient files: the rule files (VJP and JVP alike)
 * and the two builders, graft_gradients and graft_jvp.  See grad.h. */
#include <string.h>

#include "grad/grad.h"

/* ---- values -------------------------------------------------------------- */

int graft__grad_same_shape(const graft_value *a, const graft_value *b) {
  int r = graft_value_rank(b);
  return graft_value_rank(a) == r &&
         (r == 0 ||
          !memcmp(graft_value_shape(a), graft_value_shape(b), (size_t)r * sizeof(int64_t)));
}

graft_value *graft__grad_unbroadcast(graft_trace *t, graft_value *g, graft_value *like) {
  if (graft__grad_same_shape(g, like)) return g;
  return graft_sum_to_shape(t, g, graft_value_rank(like), graft_value_shape(like));
}

graft_value *graft__grad_scalar(graft_trace *t, graft_value *like, double v) {
  return graft_scalar(t, graft_value_dtype(like), v);
}

graft_value *graft__grad_mask(graft_trace *t, graft_value *c, graft_value *v) {
  return graft_where(t, c, v, graft__grad_scalar(t, v, 0));
}

graft_value *graft__grad_mask_not(graft_trace *t, graft_value *c, graft_value *v) {
  return graft_where(t, c, graft__grad_scalar(t, v, 0), v);
}

/* ---- pow ----------------------------------------------------------------- */

/* b enters through stop_gradient where a <= 0, so that the factor's
 * b-derivative matches graft__grad_pow_loga's a-derivative (both 0 there)
 * and the mixed partials agree at every order.  The exponent is replaced
 * only at a = b = 0, where b a^(b-1) would be 0 * inf: a guard on b = 0
 * alone would also cut d/db (b a^(b-1)) = 1/a at a > 0, b = 0. */
graft_value *graft__grad_pow_da(graft_trace *t, graft_value *a, graft_value *b, graft_value *zero,
                                graft_value *one) {
  graft_value *bc = graft_where(t, graft_greater(t, a, zero), b, graft_stop_gradient(t, b));
  graft_value *origin = graft_mul(t, graft_equal(t, a, zero), graft_equal(t, b, zero));
  graft_value *bm1 = graft_where(t, origin, zero, graft_sub(t, bc, one));
  return graft_mul(t, bc, graft_pow(t, a, bm1));
}

graft_value *graft__grad_pow_loga(graft_trace *t, graft_value *a, graft_value *zero,
                                  graft_value *one) {
  graft_value *pos = graft_greater(t, a, zero);
  return graft__grad_mask(t, pos, graft_log(t, graft_where(t, pos, a, one)));
}

/* ---- reductions ---------------------------------------------------------- */

int graft__grad_mask_axes(unsigned mask, int rank, int *axes) {
  int k = 0;
  for (int i = 0; i < rank; i++)
    if (mask & (1u << i)) axes[k++] = i;
  return k;
}

graft_value *graft__grad_keep_shape(graft_trace *t, const graft__node *n, graft_value *x,
                                    graft_value *v) {
  unsigned mask = n->attr.reduce.mask;
  if (n->attr.reduce.keepdims || !mask) return v;
  int r = graft_value_rank(x);
  const int64_t *xs = graft_value_shape(x);
  int64_t shape[GRAFT_MAX_RANK];
  for (int i = 0; i < r; i++) shape[i] = mask & (1u << i) ? 1 : xs[i];
  return graft_reshape(t, v, r, shape);
}

graft_value *graft__grad_sum_keep(graft_trace *t, const graft__node *n, graft_value *v) {
  int axes[GRAFT_MAX_RANK];
  int k = graft__grad_mask_axes(n->attr.reduce.mask, graft_value_rank(v), axes);
  return k ? graft_reduce_sum(t, v, k, axes, 1) : v;
}

graft_value *graft__grad_prod_others(graft_trace *t, const graft__node *n, graft_value *x,
                                     graft_value *y) {
  graft_value *zero = graft__grad_scalar(t, x, 0), *one = graft__grad_scalar(t, x, 1);
  graft_value *is0 = graft_equal(t, x, zero), *safe = graft_where(t, is0, one, x);
  int axes[GRAFT_MAX_RANK];
  int k = graft__grad_mask_axes(n->attr.reduce.mask, graft_value_rank(x), axes);
  graft_value *prod_nz = k ? graft_reduce_prod(t, safe, k, axes, 1) : safe;
  graft_value *n0 = graft__grad_sum_keep(t, n, is0); /* zeros per group */
  graft_value *other0 = graft_sub(t, graft__grad_sum_keep(t, n, graft_mul(t, x, is0)), x);
  graft_value *zeros = graft_where(t, graft_equal(t, n0, one), one,
                                   graft_where(t, graft_equal(t, n0, graft__grad_scalar(t, x, 2)),
                                               other0, zero));
  return graft_where(t, is0, graft_mul(t, prod_nz, zeros),
                     graft_div(t, graft__grad_keep_shape(t, n, x, y), safe));
}

/* ---- means ---------------------------------------------------------------- */

graft_value *graft__grad_inv_count(graft_trace *t, graft_value *like, int rank,
                                   const int64_t *dims) {
  double count = 1;
  int sym = 0;
  for (int i = 0; i < rank; i++) {
    if (GRAFT_DIM_IS_SYM(dims[i])) sym = 1;
    else count *= (double)dims[i];
  }
  if (!sym) return graft__grad_scalar(t, like, 1.0 / count); /* count 0: inf, nothing uses it */
  graft_value *c = graft_reduce_sum(t, graft_fill(t, graft_value_dtype(like), rank, dims, 1.0), 0,
                                    NULL, 0);
  return graft_div(t, graft__grad_scalar(t, like, 1.0), c);
}

/* ---- the builders -------------------------------------------------------- */

int graft__grad_is_float(const graft_value *v) {
  graft_dtype d = graft_value_dtype(v);
  return d == GRAFT_F32 || d == GRAFT_F64;
}

int graft__grad_same_type(const graft_value *a, const graft_value *b) {
  int r = graft_value_rank(a);
  return graft_value_dtype(a) == graft_value_dtype(b) && r == graft_value_rank(b) &&
         (r == 0 || !memcmp(graft_value_shape(a), graft_value_shape(b), (size_t)r * sizeof(int64_t)));
}

graft_status graft__grad_check_values(graft_trace *t, const char *fn, const char *what, int n,
                                      graft_value *const *v, int allow_null) {
  for (int i = 0; i < n; i++) {
    if (!v[i]) {
      if (allow_null) continue;
      return graft_trace_fail(t, GRAFT_EINVAL, "%s: %s[%d] is NULL", fn, what, i);
    }
    switch (graft__trace_value(t, v[i], NULL)) {
    case GRAFT__VALUE_NODE:
    case GRAFT__VALUE_NULL: break;
    case GRAFT__VALUE_POISON:
      return graft_trace_fail(t, GRAFT_EMISUSE, "%s: %s[%d] is the poison value of another (failed) trace",
                              fn, what, i);
    case GRAFT__VALUE_FOREIGN:
      return graft_trace_fail(t, GRAFT_EMISUSE,
                              "%s: %s[%d] belongs to another trace, or to one that ended", fn, what, i);
    }
  }
  return GRAFT_OK;
}

void graft__grad_localize(graft_trace *t, int n, graft_value *const *v, graft_value **out) {
  for (int i = 0; i < n; i++) {
    out[i] = v[i];
    if (!v[i] || graft__trace_value(t, v[i], NULL) != GRAFT__VALUE_FOREIGN) continue;
    uint32_t id = graft__capture_value(t, v[i]);
    if (id != GRAFT__POISON_ID) out[i] = graft__value(t->g, id);
  }
}

uint32_t graft__grad_mark_to_y(const graft__graph *g, int n_y, graft_value *const *ys,
                               uint8_t *to_y) {
  uint32_t hi = 0;
  for (int k = 0; k < n_y; k++) {
    to_y[graft__value_id(ys[k])] = 1;
    hi = GRAFT__MAX(hi, graft__value_id(ys[k]) + 1);
  }
  for (uint32_t id = hi; id-- > 0;) {
    if (!to_y[id]) continue;
    const graft__node *nd = graft__graph_node(g, id);
    for (int j = 0; j < nd->n_in; j++) to_y[nd->in[j]] = 1;
  }
  return hi;
}

int graft__grad_args_get(graft_trace *t, const char *fn, const graft__node *nd,
                         graft__grad_args *a) {
  a->in = a->in_small;
  a->aux = a->aux_small;
  if (nd->n_in > GRAFT__GRAD_SMALL) {
    a->in = graft__calloc((size_t)nd->n_in, sizeof *a->in);
    a->aux = graft__calloc((size_t)nd->n_in, sizeof *a->aux);
    if (!a->in || !a->aux) {
      graft__free(a->in);
      graft__free(a->aux);
      graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", fn);
      return 0;
    }
  }
  for (int j = 0; j < nd->n_in; j++) {
    a->in[j] = graft__value(t->g, nd->in[j]);
    a->aux[j] = NULL;
  }
  return 1;
}

void graft__grad_args_free(graft__grad_args *a) {
  if (a->in != a->in_small) {
    graft__free(a->in);
    graft__free(a->aux);
  }
}

graft_value *graft__grad_unconnected(graft_trace *t, graft_unconnected policy, graft_value *v,
                                     graft_value *like) {
  if (!v && policy == GRAFT_UNCONNECTED_ZERO) v = graft_zeros_like(t, like);
  return v;
}

graft_status graft__grad_finish(graft_trace *t, uint8_t role, int n, graft_value **out) {
  t->role = role;
  graft_status st = t->status;
  if (st)
    for (int i = 0; i < n; i++) out[i] = NULL;
  return st;
}
