/* Shape rules, one per row kind of GRAFT_OP_MAP.
 *
 * Each rule runs twice in a function's life: at trace time on shapes that
 * may hold symbols (c->binding == NULL; a check that depends on a symbol is
 * deferred), and at compile time on concrete shapes (c->binding set; every
 * check is made).  Symbols that an op creates (a reshape's inferred dim, the
 * broadcast of two unrelated symbols) are "derived": compile binds them when
 * graft__shape_unify meets them. */
#include <limits.h>
#include <string.h>

#include "graph/graph.h"

typedef char shape_buf[96];

static const char *shp(shape_buf b, const graft__shape *s) {
  graft__shape_str(b, sizeof(shape_buf), s->rank, s->dims);
  return b;
}

graft_status graft__shape_fail(graft__shape_ctx *c, graft_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  graft__vmsgf(c->msg, fmt, ap);
  va_end(ap);
  return st;
}

static int is_float(graft_dtype dt) { return dt == GRAFT_F32 || dt == GRAFT_F64; }

/* A dim as this mode sees it: symbols resolve to their size when concrete. */
static int64_t res(const graft__shape_ctx *c, int64_t d) {
  if (c->binding && GRAFT_DIM_IS_SYM(d)) return c->binding[-2 - d];
  return d;
}

static int64_t derived(graft__shape_ctx *c) {
  return c->g ? graft__graph_new_sym(c->g, -1, 0) : -1;
}

/* Broadcast one dim pair; 0 on success. */
static int bcast_dim(graft__shape_ctx *c, int64_t a, int64_t b, int64_t *out) {
  if (a == b || b == 1) {
    *out = a;
  } else if (a == 1) {
    *out = b;
  } else if (a >= 0 && b >= 0) {
    return -1;
  } else if (a >= 0 || b >= 0) {
    *out = a >= 0 ? a : b; /* the symbol must be 1 or equal: checked at compile */
  } else {
    *out = derived(c);     /* two unrelated symbols */
    if (*out == -1) return -2;
  }
  return 0;
}

static graft_status bcast(graft__shape_ctx *c, const graft__shape *a, const graft__shape *b,
                          graft__shape *out) {
  int r = GRAFT__MAX(a->rank, b->rank);
  graft__shape o = {a->dtype, r, {0}};
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    int e = bcast_dim(c, da, db, &o.dims[i]);
    if (e == -2) return graft__shape_fail(c, GRAFT_ENOMEM, "out of memory");
    if (e) {
      shape_buf x, y;
      return graft__shape_fail(c, GRAFT_ESHAPE, "cannot broadcast %s with %s (dim %d: %lld vs %lld)",
                  shp(x, a), shp(y, b), i, (long long)da, (long long)db);
    }
  }
  *out = o;
  return GRAFT_OK;
}

/* Does `from` broadcast to `to`?  Deferred where a symbol decides. */
static int broadcasts_to(const graft__shape *from, const graft__shape *to) {
  if (from->rank > to->rank) return 0;
  for (int i = 0; i < from->rank; i++) {
    int64_t f = from->dims[i], t = to->dims[i + to->rank - from->rank];
    if (f == t || f == 1) continue;
    if (f >= 0 && t >= 0) return 0;
  }
  return 1;
}

static graft_status need_int_ok(graft__shape_ctx *c, const graft__node *n, graft_dtype dt) {
  if (dt == GRAFT_I32 && !(graft__ops[n->op].flags & GRAFT__OPF_INT))
    return graft__shape_fail(c, GRAFT_EDTYPE, "i32 operands are not supported (f32 and f64 are)");
  return GRAFT_OK;
}

graft_status graft__shape_leaf(graft__shape_ctx *c, const graft__node *n,
                               const graft__shape *in, graft__shape *out) {
  (void)in;
  graft__node_shape(n, out);
  for (int i = 0; i < out->rank; i++) {
    out->dims[i] = res(c, out->dims[i]);
    if (c->binding && out->dims[i] < 0)
      return graft__shape_fail(c, GRAFT_EINTERNAL, "unbound symbol in a leaf shape");
  }
  return GRAFT_OK;
}

graft_status graft__shape_unary(graft__shape_ctx *c, const graft__node *n,
                                const graft__shape *in, graft__shape *out) {
  graft_status st = need_int_ok(c, n, in[0].dtype);
  if (st) return st;
  *out = in[0];
  return GRAFT_OK;
}

graft_status graft__shape_cast(graft__shape_ctx *c, const graft__node *n,
                               const graft__shape *in, graft__shape *out) {
  (void)c;
  *out = in[0];
  out->dtype = (graft_dtype)n->dtype;
  return GRAFT_OK;
}

graft_status graft__shape_binary(graft__shape_ctx *c, const graft__node *n,
                                 const graft__shape *in, graft__shape *out) {
  if (in[0].dtype != in[1].dtype)
    return graft__shape_fail(c, GRAFT_EDTYPE, "operand dtypes differ: %s vs %s (use cast)",
                graft_dtype_name(in[0].dtype), graft_dtype_name(in[1].dtype));
  graft_status st = need_int_ok(c, n, in[0].dtype);
  return st ? st : bcast(c, &in[0], &in[1], out);
}

graft_status graft__shape_where(graft__shape_ctx *c, const graft__node *n,
                                const graft__shape *in, graft__shape *out) {
  (void)n;
  if (in[1].dtype != in[2].dtype)
    return graft__shape_fail(c, GRAFT_EDTYPE, "branch dtypes differ: %s vs %s",
                graft_dtype_name(in[1].dtype), graft_dtype_name(in[2].dtype));
  graft__shape ab;
  graft_status st = bcast(c, &in[1], &in[2], &ab);
  if (st) return st;
  st = bcast(c, &in[0], &ab, out);
  out->dtype = in[1].dtype;
  return st;
}

graft_status graft__shape_mul_add(graft__shape_ctx *c, const graft__node *n,
                                  const graft__shape *in, graft__shape *out) {
  if (in[0].dtype != in[1].dtype || in[1].dtype != in[2].dtype)
    return graft__shape_fail(c, GRAFT_EDTYPE, "operand dtypes differ: %s, %s, %s (use cast)",
                graft_dtype_name(in[0].dtype), graft_dtype_name(in[1].dtype),
                graft_dtype_name(in[2].dtype));
  graft_status st = need_int_ok(c, n, in[0].dtype);
  graft__shape ab;
  if (st == GRAFT_OK) st = bcast(c, &in[0], &in[1], &ab);
  return st ? st : bcast(c, &ab, &in[2], out);
}

graft_status graft__shape_reduce(graft__shape_ctx *c, const graft__node *n,
                                 const graft__shape *in, graft__shape *out) {
  graft_status st = need_int_ok(c, n, in[0].dtype);
  if (st) return st;
  unsigned mask = n->attr.reduce.mask;
  if (in[0].rank < 32 && (mask >> in[0].rank))
    return graft__shape_fail(c, GRAFT_EINVAL, "axis out of range for rank %d", in[0].rank);
  graft__shape o = {in[0].dtype, 0, {0}};
  for (int i = 0; i < in[0].rank; i++) {
    if (!(mask & (1u << i))) o.dims[o.rank++] = in[0].dims[i];
    else if (n->attr.reduce.keepdims) o.dims[o.rank++] = 1;
  }
  *out = o;
  return GRAFT_OK;
}

graft_status graft__shape_matmul(graft__shape_ctx *c, const graft__node *n,
                                 const graft__shape *in, graft__shape *out) {
  const graft__shape *a = &in[0], *b = &in[1];
  shape_buf x, y;
  if (a->dtype != b->dtype)
    return graft__shape_fail(c, GRAFT_EDTYPE, "operand dtypes differ: %s vs %s",
                graft_dtype_name(a->dtype), graft_dtype_name(b->dtype));
  if (!is_float(a->dtype))
    return graft__shape_fail(c, GRAFT_EDTYPE, "%s operands are not supported (f32 and f64 are)",
                graft_dtype_name(a->dtype));
  if (a->rank < 2 || b->rank < 2)
    return graft__shape_fail(c, GRAFT_ESHAPE, "operands need rank >= 2: %s x %s", shp(x, a), shp(y, b));
  unsigned fl = n->attr.matmul.flags;
  int ta = (fl & GRAFT_TRANS_A) != 0, tb = (fl & GRAFT_TRANS_B) != 0;
  int64_t m = a->dims[a->rank - 2 + ta], ka = a->dims[a->rank - 1 - ta];
  int64_t kb = b->dims[b->rank - 2 + tb], nn = b->dims[b->rank - 1 - tb];
  if (ka != kb && ka >= 0 && kb >= 0)
    return graft__shape_fail(c, GRAFT_ESHAPE, "inner dimensions differ: %s x %s%s%s", shp(x, a), shp(y, b),
                ta ? " (a transposed)" : "", tb ? " (b transposed)" : "");
  /* CBLAS takes int sizes: a larger concrete matrix dim cannot be run. */
  const int64_t mnk[3] = {m, ka >= 0 ? ka : kb, nn};
  for (int i = 0; i < 3; i++)
    if (mnk[i] > INT_MAX)
      return graft__shape_fail(c, GRAFT_EUNSUPPORTED, "%s x %s: matrix dim %lld exceeds the BLAS int range (%d)",
                  shp(x, a), shp(y, b), (long long)mnk[i], INT_MAX);
  graft__shape ba = *a, bb = *b;
  ba.rank -= 2;
  bb.rank -= 2;
  graft__shape o;
  graft_status st = bcast(c, &ba, &bb, &o);
  if (st) {
    graft__msgf(c->msg, "batch dimensions do not broadcast: %s x %s", shp(x, a), shp(y, b));
    return st;
  }
  o.dims[o.rank++] = m;
  o.dims[o.rank++] = nn;
  o.dtype = a->dtype;
  *out = o;
  return GRAFT_OK;
}

graft_status graft__shape_transpose(graft__shape_ctx *c, const graft__node *n,
                                    const graft__shape *in, graft__shape *out) {
  unsigned seen = 0;
  graft__shape o = in[0];
  for (int i = 0; i < in[0].rank; i++) {
    int p = n->attr.transpose.perm[i];
    if (p < 0 || p >= in[0].rank || (seen & (1u << p)))
      return graft__shape_fail(c, GRAFT_EINVAL, "perm is not a permutation of 0..%d", in[0].rank - 1);
    seen |= 1u << p;
    o.dims[i] = in[0].dims[p];
  }
  *out = o;
  return GRAFT_OK;
}

/* Resolve a user shape attr (dims may be symbols; `infer` allows one -1). */
static graft_status target_shape(graft__shape_ctx *c, const graft__node *n, graft_dtype dt,
                                 graft__shape *o) {
  o->dtype = dt;
  o->rank = n->attr.target.rank;
  for (int i = 0; i < o->rank; i++) o->dims[i] = res(c, n->attr.target.dims[i]);
  return GRAFT_OK;
}

graft_status graft__shape_reshape(graft__shape_ctx *c, const graft__node *n,
                                  const graft__shape *in, graft__shape *out) {
  graft__shape o;
  target_shape(c, n, in[0].dtype, &o);
  int infer = -1, sym = 0, n_known = 0;
  int64_t kdims[GRAFT_MAX_RANK];
  for (int i = 0; i < o.rank; i++) {
    if (o.dims[i] == -1) {
      if (infer >= 0) return graft__shape_fail(c, GRAFT_EINVAL, "more than one -1 in the target shape");
      infer = i;
    } else if (o.dims[i] < 0) {
      sym = 1;
    } else {
      kdims[n_known++] = o.dims[i];
    }
  }
  int64_t known = graft__numel(n_known, kdims); /* the one zero-size rule */
  if (known < 0) {
    shape_buf y;
    return graft__shape_fail(c, GRAFT_ESHAPE, "target shape %s has more than INT64_MAX elements", shp(y, &o));
  }
  int64_t total = graft__numel(in[0].rank, in[0].dims); /* -1 if symbolic */
  shape_buf x, y;
  if (total >= 0 && !sym) {
    if (infer >= 0) {
      if (known == 0 || total % known)
        return graft__shape_fail(c, GRAFT_ESHAPE, "cannot reshape %s (%lld elements) to %s",
                    shp(x, &in[0]), (long long)total, shp(y, &o));
      o.dims[infer] = total / known;
    } else if (known != total) {
      return graft__shape_fail(c, GRAFT_ESHAPE, "cannot reshape %s (%lld elements) to %s (%lld elements)",
                  shp(x, &in[0]), (long long)total, shp(y, &o), (long long)known);
    }
  } else if (infer >= 0) {
    /* Symbolic: the inferred dim is a new symbol, unless it is the same
     * symbolic product moved around unchanged. */
    o.dims[infer] = derived(c);
    if (o.dims[infer] == -1) return graft__shape_fail(c, GRAFT_ENOMEM, "out of memory");
  }
  *out = o;
  return GRAFT_OK;
}

graft_status graft__shape_broadcast_to(graft__shape_ctx *c, const graft__node *n,
                                       const graft__shape *in, graft__shape *out) {
  graft__shape o;
  target_shape(c, n, in[0].dtype, &o);
  if (!broadcasts_to(&in[0], &o)) {
    shape_buf x, y;
    return graft__shape_fail(c, GRAFT_ESHAPE, "%s does not broadcast to %s", shp(x, &in[0]), shp(y, &o));
  }
  *out = o;
  return GRAFT_OK;
}

graft_status graft__shape_sum_to_shape(graft__shape_ctx *c, const graft__node *n,
                                       const graft__shape *in, graft__shape *out) {
  graft__shape o;
  target_shape(c, n, in[0].dtype, &o);
  if (!broadcasts_to(&o, &in[0])) {
    shape_buf x, y;
    return graft__shape_fail(c, GRAFT_ESHAPE, "target %s does not broadcast to the input %s", shp(x, &o),
                shp(y, &in[0]));
  }
  *out = o;
  return GRAFT_OK;
}

graft_status graft__shape_slice(graft__shape_ctx *c, const graft__node *n,
                                const graft__shape *in, graft__shape *out) {
  graft__shape o = in[0];
  for (int i = 0; i < in[0].rank; i++) {
    int64_t b = n->attr.slice.begin[i], s = res(c, n->attr.slice.size[i]), d = in[0].dims[i];
    if (GRAFT_DIM_IS_SYM(s)) { /* a symbolic size (gradients slice like a value): checked at compile */
      o.dims[i] = s;
      continue;
    }
    if (b < 0 || s < -1)
      return graft__shape_fail(c, GRAFT_EINVAL, "dim %d: begin %lld / size %lld must be >= 0 (size -1: to the end)",
                  i, (long long)b, (long long)s);
    if (d < 0) { /* symbolic extent: checked at compile */
      o.dims[i] = s >= 0 ? s : (b == 0 ? d : derived(c));
      continue;
    }
    if (b > d || (s >= 0 && s > d - b)) {
      shape_buf x;
      if (s < 0)
        return graft__shape_fail(c, GRAFT_EINVAL, "dim %d: begin %lld is past the end of %s (dim size %lld)", i,
                    (long long)b, shp(x, &in[0]), (long long)d);
      return graft__shape_fail(c, GRAFT_EINVAL,
                  "dim %d: begin %lld + size %lld is out of bounds of %s (dim size %lld)", i,
                  (long long)b, (long long)s, shp(x, &in[0]), (long long)d);
    }
    o.dims[i] = s >= 0 ? s : d - b;
  }
  *out = o;
  return GRAFT_OK;
}

graft_status graft__shape_pad(graft__shape_ctx *c, const graft__node *n,
                              const graft__shape *in, graft__shape *out) {
  graft__shape o = in[0];
  for (int i = 0; i < in[0].rank; i++) {
    int64_t b = n->attr.slice.begin[i], t = res(c, n->attr.slice.size[i]), d = in[0].dims[i];
    if (b < 0) return graft__shape_fail(c, GRAFT_EINVAL, "dim %d: begin %lld must be >= 0", i, (long long)b);
    /* b + d > t, without forming b + d (b may be huge). */
    if (t >= 0 && (b > t || (d >= 0 && d > t - b))) {
      shape_buf x;
      return graft__shape_fail(c, GRAFT_ESHAPE, "dim %d: %s placed at %lld does not fit in %lld", i,
                  shp(x, &in[0]), (long long)b, (long long)t);
    }
    o.dims[i] = t;
  }
  *out = o;
  return GRAFT_OK;
}

graft_status graft__shape_custom(graft__shape_ctx *c, const graft__node *n,
                                 const graft__shape *in, graft__shape *out) {
  (void)c, (void)n;
  *out = in[0];
  return GRAFT_OK;
}

/* COND, WHILE, SCAN, REMAT and GET: at trace time, the shape control.c
 * gave the node; concrete, the compiled subgraphs' (the plan's hook). */
graft_status graft__shape_ctl(graft__shape_ctx *c, const graft__node *n,
                              const graft__shape *in, graft__shape *out) {
  if (c->binding && c->ctl) return c->ctl(c, n, in, out);
  if (c->binding) return graft__shape_fail(c, GRAFT_EINTERNAL, "control flow is shaped by its compiled bodies");
  graft__node_shape(n, out);
  return GRAFT_OK;
}

graft_status graft__shape_get(graft__shape_ctx *c, const graft__node *n,
                              const graft__shape *in, graft__shape *out) {
  return graft__shape_ctl(c, n, in, out);
}

graft_status graft__shape_concat(graft__shape_ctx *c, const graft__node *n,
                                 const graft__shape *in, graft__shape *out) {
  int axis = n->attr.axis.axis;
  graft__shape o = in[0];
  if (axis < 0 || axis >= o.rank)
    return graft__shape_fail(c, GRAFT_EINVAL, "axis %d out of range for rank %d", axis, o.rank);
  int sym = 0;
  for (int k = 1; k < n->n_in; k++) {
    shape_buf x, y;
    if (in[k].dtype != o.dtype)
      return graft__shape_fail(c, GRAFT_EDTYPE, "input %d has dtype %s, input 0 has %s", k,
                  graft_dtype_name(in[k].dtype), graft_dtype_name(o.dtype));
    if (in[k].rank != o.rank)
      return graft__shape_fail(c, GRAFT_ESHAPE, "input %d %s and input 0 %s differ in rank", k,
                  shp(x, &in[k]), shp(y, &in[0]));
    for (int i = 0; i < o.rank; i++) {
      int64_t a = in[0].dims[i], b = in[k].dims[i];
      if (i == axis) continue;
      if (a != b && a >= 0 && b >= 0)
        return graft__shape_fail(c, GRAFT_ESHAPE, "input %d %s and input 0 %s differ in dim %d", k,
                    shp(x, &in[k]), shp(y, &in[0]), i);
    }
  }
  int64_t sum = 0;
  for (int k = 0; k < n->n_in; k++) {
    if (in[k].dims[axis] < 0) sym = 1;
    else if (graft__size_add(sum, in[k].dims[axis], &sum))
      return graft__shape_fail(c, GRAFT_ESHAPE, "the sizes along axis %d add up past INT64_MAX (at input %d)",
                  axis, k);
  }
  o.dims[axis] = sym ? derived(c) : sum;
  *out = o;
  return GRAFT_OK;
}

graft_status graft__shape_one_hot(graft__shape_ctx *c, const graft__node *n,
                                  const graft__shape *in, graft__shape *out) {
  if (in[0].dtype != GRAFT_I32)
    return graft__shape_fail(c, GRAFT_EDTYPE, "labels must be i32, got %s", graft_dtype_name(in[0].dtype));
  if (!is_float((graft_dtype)n->dtype))
    return graft__shape_fail(c, GRAFT_EDTYPE, "output dtype must be f32 or f64");
  if (in[0].rank >= GRAFT_MAX_RANK)
    return graft__shape_fail(c, GRAFT_ESHAPE, "labels of rank %d leave no room for the depth dim", in[0].rank);
  if (n->attr.one_hot.depth < 0)
    return graft__shape_fail(c, GRAFT_EINVAL, "depth %lld must be >= 0", (long long)n->attr.one_hot.depth);
  *out = in[0];
  out->dims[out->rank++] = n->attr.one_hot.depth;
  out->dtype = (graft_dtype)n->dtype;
  return GRAFT_OK;
}

graft_status graft__shape_softmax(graft__shape_ctx *c, const graft__node *n,
                                  const graft__shape *in, graft__shape *out) {
  if (!is_float(in[0].dtype))
    return graft__shape_fail(c, GRAFT_EDTYPE, "%s input is not supported (f32 and f64 are)",
                graft_dtype_name(in[0].dtype));
  if (n->attr.axis.axis < 0 || n->attr.axis.axis >= in[0].rank)
    return graft__shape_fail(c, GRAFT_EINVAL, "axis out of range for rank %d", in[0].rank);
  *out = in[0];
  return GRAFT_OK;
}

graft_status graft__shape_xent(graft__shape_ctx *c, const graft__node *n,
                               const graft__shape *in, graft__shape *out) {
  (void)n;
  shape_buf x, y;
  if (!is_float(in[0].dtype))
    return graft__shape_fail(c, GRAFT_EDTYPE, "logits must be f32 or f64, got %s", graft_dtype_name(in[0].dtype));
  if (in[1].dtype != GRAFT_I32)
    return graft__shape_fail(c, GRAFT_EDTYPE, "labels must be i32, got %s", graft_dtype_name(in[1].dtype));
  if (in[0].rank != 2 || in[1].rank != 1)
    return graft__shape_fail(c, GRAFT_ESHAPE, "need logits [N,C] and labels [N], got %s and %s",
                shp(x, &in[0]), shp(y, &in[1]));
  int64_t a = in[0].dims[0], b = in[1].dims[0];
  if (a != b && a >= 0 && b >= 0)
    return graft__shape_fail(c, GRAFT_ESHAPE, "batch sizes differ: logits %s, labels %s", shp(x, &in[0]),
                shp(y, &in[1]));
  out->dtype = in[0].dtype;
  out->rank = 0;
  return GRAFT_OK;
}

/* ---- convolution and pooling ---------------------------------------- */

int64_t graft__conv_out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  int64_t padded, ext;
  if (in < 0 || k < 1 || s < 1 || p < 0 || d < 1) return -1;
  if (graft__size_add(in, p, &padded) || graft__size_add(padded, p, &padded) ||
      graft__size_mul(d, k - 1, &ext) || ext >= padded)
    return -1;
  return (padded - ext - 1) / s + 1;
}

/* The window sweep of a over image x (f32/f64, rank 4, C, H and W
 * concrete): the output extents in oh, ow. */
static graft_status conv_geom(graft__shape_ctx *c, const struct graft__conv_attr *a,
                              const graft__shape *x, int64_t *oh, int64_t *ow) {
  shape_buf b;
  if (!is_float(x->dtype))
    return graft__shape_fail(c, GRAFT_EDTYPE, "%s input is not supported (f32 and f64 are)",
                graft_dtype_name(x->dtype));
  if (x->rank != 4)
    return graft__shape_fail(c, GRAFT_ESHAPE, "input %s must have rank 4 (N, C, H, W)", shp(b, x));
  for (int i = 1; i < 4; i++)
    if (x->dims[i] < 0)
      return graft__shape_fail(c, GRAFT_EUNSUPPORTED, "input %s: only the batch dim may be symbolic", shp(b, x));
  if (a->groups < 1 || x->dims[1] % a->groups)
    return graft__shape_fail(c, GRAFT_EINVAL, "groups %lld does not divide the %lld channels of %s",
                (long long)a->groups, (long long)x->dims[1], shp(b, x));
  *oh = graft__conv_out_dim(x->dims[2], a->k[0], a->s[0], a->p[0], a->d[0]);
  *ow = graft__conv_out_dim(x->dims[3], a->k[1], a->s[1], a->p[1], a->d[1]);
  if (*oh < 0 || *ow < 0)
    return graft__shape_fail(c, GRAFT_ESHAPE,
                "kernel %lldx%lld (dilation %lldx%lld, stride %lldx%lld, padding %lldx%lld) does "
                "not fit input %s", (long long)a->k[0], (long long)a->k[1], (long long)a->d[0],
                (long long)a->d[1], (long long)a->s[0], (long long)a->s[1], (long long)a->p[0],
                (long long)a->p[1], shp(b, x));
  return GRAFT_OK;
}

/* IM2COL: image [N, C, H, W] -> columns [N, G, C/G * KH * KW, OH * OW]:
 * column (oh, ow) of image n's group g holds the window of output pixel
 * (oh, ow) over g's channels, 0 where it reaches into the padding. */
static graft_status im2col_shape(graft__shape_ctx *c, const struct graft__conv_attr *a,
                                 const graft__shape *x, graft__shape *out) {
  int64_t oh, ow, rows, cols;
  graft_status st = conv_geom(c, a, x, &oh, &ow);
  if (st) return st;
  if (graft__size_mul(x->dims[1] / a->groups, a->k[0], &rows) ||
      graft__size_mul(rows, a->k[1], &rows) || graft__size_mul(oh, ow, &cols))
    return graft__shape_fail(c, GRAFT_ESHAPE, "windows of %lldx%lld over %lld channels, %lldx%lld of them, "
                "overflow int64", (long long)a->k[0], (long long)a->k[1], (long long)x->dims[1],
                (long long)oh, (long long)ow);
  *out = (graft__shape){x->dtype, 4, {x->dims[0], a->groups, rows, cols}};
  return GRAFT_OK;
}

graft_status graft__shape_im2col(graft__shape_ctx *c, const graft__node *n,
                                 const graft__shape *in, graft__shape *out) {
  return im2col_shape(c, &n->attr.conv, &in[0], out);
}

/* COL2IM: the adjoint of IM2COL, columns -> the image shape attr.x (every
 * window element summed back onto its pixel). */
graft_status graft__shape_col2im(graft__shape_ctx *c, const graft__node *n,
                                 const graft__shape *in, graft__shape *out) {
  graft__shape x = {in[0].dtype, 4, {0}}, want;
  for (int i = 0; i < 4; i++) x.dims[i] = res(c, n->attr.conv.x[i]);
  graft_status st = im2col_shape(c, &n->attr.conv, &x, &want);
  if (st) return st;
  int ok = in[0].rank == 4;
  for (int i = 0; ok && i < 4; i++)
    ok = in[0].dims[i] == want.dims[i] || in[0].dims[i] < 0 || want.dims[i] < 0;
  if (!ok) {
    shape_buf b, i, w;
    return graft__shape_fail(c, GRAFT_ESHAPE, "columns %s do not match image %s (expected %s)",
                shp(b, &in[0]), shp(i, &x), shp(w, &want));
  }
  *out = x;
  return GRAFT_OK;
}

/* Does b have a's dtype and (up to undecided symbols) shape? */
static int same_shape(const graft__shape *a, const graft__shape *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i] && a->dims[i] >= 0 && b->dims[i] >= 0) return 0;
  return 1;
}

static graft_status conv_operand(graft__shape_ctx *c, const graft__shape *have,
                                 const graft__shape *want, const char *what) {
  if (same_shape(have, want)) return GRAFT_OK;
  shape_buf b, w;
  return graft__shape_fail(c, GRAFT_ESHAPE, "%s is %s%s, expected %s%s", what, graft_dtype_name(have->dtype),
              shp(b, have), graft_dtype_name(want->dtype), shp(w, want));
}

/* conv2d and its gradients, over the image shape attr.x (whose batch dim
 * may be a symbol): CONV2D (x, w) -> y [N, O, OH, OW], CONV2D_W (g, x) ->
 * the weight's shape, CONV2D_X (w, g) -> x's shape.  Each is one gemm per
 * image and group, whose sizes CBLAS takes as ints: [O/G, C/G * KH * KW] x
 * [C/G * KH * KW, OH * OW]. */
static graft_status conv2d_geom(graft__shape_ctx *c, const graft__node *n, const graft__shape *w,
                                graft__shape *x, graft__shape *y) {
  const struct graft__conv_attr *a = &n->attr.conv;
  *x = (graft__shape){w->dtype, 4, {0}};
  for (int i = 0; i < 4; i++) x->dims[i] = res(c, a->x[i]);
  int64_t oh, ow;
  graft__shape cols;
  graft_status st = im2col_shape(c, a, x, &cols);
  if (st == GRAFT_OK) st = conv_geom(c, a, x, &oh, &ow);
  if (st) return st;
  shape_buf b, d;
  if (w->rank != 4 || w->dims[0] < 0 || w->dims[0] % a->groups ||
      w->dims[1] != x->dims[1] / a->groups || w->dims[2] != a->k[0] || w->dims[3] != a->k[1])
    return graft__shape_fail(c, GRAFT_ESHAPE, "weight %s does not match image %s", shp(b, w), shp(d, x));
  if (w->dims[0] / a->groups > INT_MAX || cols.dims[2] > INT_MAX || cols.dims[3] > INT_MAX)
    return graft__shape_fail(c, GRAFT_EUNSUPPORTED, "weight %s on image %s: gemms past the BLAS int range (%d)",
                shp(b, w), shp(d, x), INT_MAX);
  *y = (graft__shape){w->dtype, 4, {x->dims[0], w->dims[0], oh, ow}};
  return GRAFT_OK;
}

graft_status graft__shape_conv2d(graft__shape_ctx *c, const graft__node *n,
                                 const graft__shape *in, graft__shape *out) {
  graft__shape x;
  graft_status st = conv2d_geom(c, n, &in[1], &x, out);
  return st ? st : conv_operand(c, &in[0], &x, "the input");
}

graft_status graft__shape_conv2d_w(graft__shape_ctx *c, const graft__node *n,
                                   const graft__shape *in, graft__shape *out) {
  /* The weight's shape: O from the cotangent, the rest from the sweep. */
  const struct graft__conv_attr *a = &n->attr.conv;
  shape_buf b;
  if (in[0].rank != 4 || in[0].dims[1] < 0)
    return graft__shape_fail(c, GRAFT_ESHAPE, "cotangent %s must be [N, O, OH, OW]", shp(b, &in[0]));
  graft__shape w = {in[0].dtype, 4, {in[0].dims[1], res(c, a->x[1]) / a->groups, a->k[0], a->k[1]}};
  graft__shape x, y;
  graft_status st = conv2d_geom(c, n, &w, &x, &y);
  if (st == GRAFT_OK) st = conv_operand(c, &in[0], &y, "the cotangent");
  if (st == GRAFT_OK) st = conv_operand(c, &in[1], &x, "the input");
  if (st == GRAFT_OK) *out = w;
  return st;
}

graft_status graft__shape_conv2d_x(graft__shape_ctx *c, const graft__node *n,
                                   const graft__shape *in, graft__shape *out) {
  graft__shape y;
  graft_status st = conv2d_geom(c, n, &in[0], out, &y);
  return st ? st : conv_operand(c, &in[1], &y, "the cotangent");
}

/* MAX_POOL2D: [N, C, H, W] -> [N, C, OH, OW]; padding at most half the
 * kernel, so every window holds an element of the input. */
static graft_status pool_shape(graft__shape_ctx *c, const struct graft__conv_attr *a,
                               const graft__shape *x, graft__shape *out) {
  int64_t oh, ow;
  graft_status st = conv_geom(c, a, x, &oh, &ow);
  if (st) return st;
  if (a->p[0] > a->k[0] / 2 || a->p[1] > a->k[1] / 2)
    return graft__shape_fail(c, GRAFT_EINVAL, "padding %lldx%lld is more than half the kernel %lldx%lld",
                (long long)a->p[0], (long long)a->p[1], (long long)a->k[0], (long long)a->k[1]);
  *out = (graft__shape){x->dtype, 4, {x->dims[0], x->dims[1], oh, ow}};
  return GRAFT_OK;
}

graft_status graft__shape_max_pool2d(graft__shape_ctx *c, const graft__node *n,
                                     const graft__shape *in, graft__shape *out) {
  return pool_shape(c, &n->attr.conv, &in[0], out);
}

/* MAX_POOL2D_GRAD (x, g): g (the pool's output shape) routed to the
 * argmax of each window, an image shaped like x. */
graft_status graft__shape_max_pool2d_grad(graft__shape_ctx *c, const graft__node *n,
                                          const graft__shape *in, graft__shape *out) {
  graft__shape y;
  graft_status st = pool_shape(c, &n->attr.conv, &in[0], &y);
  if (st == GRAFT_OK) st = conv_operand(c, &in[1], &y, "the cotangent");
  if (st == GRAFT_OK) *out = in[0];
  return st;
}

/* MAX_POOL2D_SELECT (x, u): u (shaped like x) at the argmax of each
 * window of x, the pool's output shape. */
graft_status graft__shape_max_pool2d_select(graft__shape_ctx *c, const graft__node *n,
                                            const graft__shape *in, graft__shape *out) {
  graft_status st = pool_shape(c, &n->attr.conv, &in[0], out);
  return st ? st : conv_operand(c, &in[1], &in[0], "the selected operand");
}

graft_status graft__shape_assign(graft__shape_ctx *c, const graft__node *n,
                                 const graft__shape *in, graft__shape *out) {
  const graft_tensor *val = n->attr.var.var->value;
  graft__shape v = {graft_tensor_dtype(val), graft_tensor_rank(val), {0}};
  memcpy(v.dims, graft_tensor_shape(val), (size_t)v.rank * sizeof(int64_t));
  if (in[0].dtype != v.dtype)
    return graft__shape_fail(c, GRAFT_EDTYPE, "variable '%s' is %s, value is %s", n->attr.var.var->name,
                graft_dtype_name(v.dtype), graft_dtype_name(in[0].dtype));
  if (!broadcasts_to(&in[0], &v)) {
    shape_buf x, y;
    return graft__shape_fail(c, GRAFT_ESHAPE, "value %s does not broadcast to variable '%s' %s",
                shp(x, &in[0]), n->attr.var.var->name, shp(y, &v));
  }
  *out = v;
  return GRAFT_OK;
}

/* UPDATE: [w, g, hp, slots...] -> the new weight and slots, packed
 * (n_vars x w's elements, rank 1).  w, g and the slots share dtype and
 * shape (the variable's: concrete); hp holds GRAFT__UPDATE_HP scalars. */
graft_status graft__shape_update(graft__shape_ctx *c, const graft__node *n,
                                 const graft__shape *in, graft__shape *out) {
  const struct graft__update_attr *u = &n->attr.update;
  shape_buf x, y;
  if (u->n_vars < 1 || u->n_vars > GRAFT__UPDATE_MAX_VARS || n->n_in != 2 + u->n_vars)
    return graft__shape_fail(c, GRAFT_EINTERNAL, "%d inputs for %d variables", n->n_in, u->n_vars);
  if (!is_float(in[0].dtype))
    return graft__shape_fail(c, GRAFT_EDTYPE, "variable '%s' is %s (an optimizer updates f32 and f64)",
                u->var[0]->name, graft_dtype_name(in[0].dtype));
  for (int k = 1; k < n->n_in; k++) {
    if (k == 2) continue;
    if (in[k].dtype != in[0].dtype || in[k].rank != in[0].rank ||
        memcmp(in[k].dims, in[0].dims, (size_t)in[0].rank * sizeof(int64_t)))
      return graft__shape_fail(c, k == 1 ? GRAFT_ESHAPE : GRAFT_EINTERNAL,
                  "%s %s%s for variable '%s' %s%s (expected the variable's dtype and shape)",
                  k == 1 ? "gradient" : "slot", graft_dtype_name(in[k].dtype), shp(x, &in[k]),
                  u->var[0]->name, graft_dtype_name(in[0].dtype), shp(y, &in[0]));
  }
  if (in[2].dtype != in[0].dtype || in[2].rank != 1 || in[2].dims[0] != GRAFT__UPDATE_HP)
    return graft__shape_fail(c, GRAFT_EINTERNAL, "hyperparameters %s%s (expected %s[%d])",
                graft_dtype_name(in[2].dtype), shp(x, &in[2]), graft_dtype_name(in[0].dtype),
                GRAFT__UPDATE_HP);
  int64_t numel = graft__numel(in[0].rank, in[0].dims), packed;
  if (numel < 0 || graft__size_mul(numel, u->n_vars, &packed))
    return graft__shape_fail(c, GRAFT_ESHAPE, "variable '%s' %s has no concrete size", u->var[0]->name,
                shp(x, &in[0]));
  out->dtype = in[0].dtype;
  out->rank = 1;
  out->dims[0] = packed;
  return GRAFT_OK;
}

const char *graft__shape_text(char *buf, size_t len, const graft__shape *s) {
  char dims[160];
  graft__shape_str(dims, sizeof dims, s->rank, s->dims);
  snprintf(buf, len, "%s%s", graft_dtype_name(s->dtype), dims);
  return buf;
}

graft_status graft__shape_infer(graft__shape_ctx *c, const graft__node *n,
                                const graft__shape *in, graft__shape *out) {
  c->msg[0] = '\0';
  memset(out, 0, sizeof *out);
  return graft__ops[n->op].shape(c, n, in, out);
}

graft_status graft__shape_unify(graft__shape_ctx *c, int rank, const int64_t *sym,
                                const int64_t *conc) {
  for (int i = 0; i < rank; i++) {
    int64_t s = sym[i], k = conc[i];
    if (!GRAFT_DIM_IS_SYM(s)) {
      if (s != k)
        return graft__shape_fail(c, GRAFT_ESHAPE, "dim %d is %lld for these inputs, %lld when traced", i,
                    (long long)k, (long long)s);
      continue;
    }
    int64_t *b = &c->binding[-2 - s];
    if (*b < 0) *b = k;
    else if (*b != k)
      return graft__shape_fail(c, GRAFT_ESHAPE, "dim %d is %lld but symbol s%lld is %lld here", i,
                  (long long)k, (long long)(-2 - s), (long long)*b);
  }
  return GRAFT_OK;
}

/* ALLREDUCE: its members (f32 or f64, one dtype) packed one after another,
 * a rank-1 value; an input after the members is an order edge (unread). */
graft_status graft__shape_allreduce(graft__shape_ctx *c, const graft__node *n,
                                    const graft__shape *in, graft__shape *out) {
  const int k = n->attr.coll.n_members;
  shape_buf x;
  if (k < 1 || n->n_in < k || n->n_in > k + 1)
    return graft__shape_fail(c, GRAFT_EINTERNAL, "%d inputs for %d members", n->n_in, k);
  int64_t total = 0;
  int sym = 0;
  for (int i = 0; i < k; i++) {
    if (!is_float(in[i].dtype) || in[i].dtype != in[0].dtype)
      return graft__shape_fail(c, GRAFT_EDTYPE, "value %d is %s%s (expected f32 or f64%s%s)", i,
                               graft_dtype_name(in[i].dtype), shp(x, &in[i]),
                               i ? ", the dtype of value 0: " : "",
                               i ? graft_dtype_name(in[0].dtype) : "");
    int64_t dims[GRAFT_MAX_RANK], numel;
    for (int d = 0; d < in[i].rank; d++) {
      dims[d] = res(c, in[i].dims[d]);
      sym |= dims[d] < 0;
    }
    if (sym) continue;
    numel = graft__numel(in[i].rank, dims);
    if (numel < 0 || graft__size_add(total, numel, &total))
      return graft__shape_fail(c, GRAFT_ESHAPE, "value %d %s: the packed size overflows", i,
                               shp(x, &in[i]));
  }
  out->dtype = in[0].dtype;
  out->rank = 1;
  out->dims[0] = total;
  if (sym && (out->dims[0] = derived(c)) == -1)
    return graft__shape_fail(c, GRAFT_ENOMEM, "out of memory");
  return GRAFT_OK;
}

/* ALLREDUCE_TAKE: the shape of the member it reads (the node's, made at
 * trace time from the member's), in the ALLREDUCE's dtype. */
graft_status graft__shape_allreduce_take(graft__shape_ctx *c, const graft__node *n,
                                         const graft__shape *in, graft__shape *out) {
  out->dtype = in[0].dtype;
  out->rank = n->rank;
  for (int d = 0; d < n->rank; d++) out->dims[d] = res(c, n->shape[d]);
  return GRAFT_OK;
}
