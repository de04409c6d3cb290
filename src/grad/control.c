/* Gradient rules of control flow (graph/control.c builds the nodes).
 *
 * A control node's outputs are GET nodes, so its rules take per-output
 * cotangents (reverse.c gathers the GETs') and give per-output tangents
 * (forward.c hands them to the GETs); the table rows of the ops themselves
 * are never called.  Each rule is control flow again, whose bodies replay
 * the forward body (graft__replay) on the inputs it needs and apply
 * graft_gradients or graft_jvp to the copy:
 *   cond    a cond of the branches' rules, on the same predicate;
 *   remat   a remat of the body's rule (the backward recomputes the
 *           region's intermediates inside its own body);
 *   scan    reverse: a scan the other way over the carries the forward
 *           saved (graft__ctl_save: before and after each step), threading
 *           the carries' cotangents and accumulating the captured values';
 *           its body reads the saved carries and the forward's ys where the
 *           replay would recompute them (body_vjp's subst), so only forward
 *           ops the backward needs besides run again; with a checkpoint
 *           interval, a reverse scan over blocks, each recomputing its
 *           carries from its checkpoint first (reading the xs in place, a
 *           block of rows a step); forward: a scan that carries primal and
 *           tangent together;
 *   while   reverse (max_iters > 0): a reverse scan over the iterations the
 *           loop ran (its saved count); forward: a while loop carrying
 *           primal and tangent, with the same cond.
 * Cotangents of the saved outputs (a gradient of a gradient) join the
 * carries' at their step, so every composition keeps working. */
#include <string.h>

#include "grad/grad.h"

/* v as a value of t: its own, or captured from a trace around t. */
static graft_value *local(graft_trace *t, graft_value *v) {
  if (!v || graft__value_node(t->g, v)) return v;
  uint32_t id = graft__capture_value(t, v);
  return id == GRAFT__POISON_ID ? GRAFT__POISON : graft__value(t->g, id);
}

static int is_float(graft_value *v) { return graft__grad_is_float(v); }

/* In body trace t: replay s on prim[] (values of t, distinct), then the
 * cotangents of its inputs for the output cotangents cot[i] (NULL: none):
 * gx[j] for each float input that want[j] asks for (zeros where
 * unconnected), NULL for the others.  subst (or NULL) holds values equal,
 * bitwise, to outputs of the forward (the saved carries a step left, a
 * scan's ys): the backward nodes read those instead of the replayed ones,
 * so forward ops that only made them are pruned, not recomputed (a tanh
 * cell's backward needs its output, not the matmuls before it). */
static graft_status body_vjp(graft_trace *t, const graft__sub *s, graft_value *const *prim,
                             const uint8_t *want, graft_value *const *cot,
                             graft_value *const *subst, graft_value **gx) {
  int ns = s->g->n_inputs, no = s->g->n_outputs;
  graft_value **buf = graft__calloc((size_t)(3 * no + 2 * ns) + 1, sizeof *buf);
  if (!buf) return graft_trace_fail(t, GRAFT_ENOMEM, "backward body: out of memory");
  graft_value **outs = buf, **seeds = buf + no, **xs = buf + 2 * no, **g = xs + ns;
  graft_value **replayed = g + ns;
  graft_status st = graft__replay(t, s, prim, outs);
  memcpy(replayed, outs, (size_t)no * sizeof *outs);
  uint32_t mark = t->g->n_nodes; /* the backward nodes follow */
  int ny = 0, nx = 0;
  for (int i = 0; i < no && !st; i++)
    if (cot[i] && is_float(outs[i])) {
      seeds[ny] = cot[i];
      outs[ny++] = outs[i];
    }
  for (int j = 0; j < ns; j++) {
    gx[j] = NULL;
    if (want[j] && is_float(prim[j])) xs[nx++] = prim[j];
  }
  if (!st && ny && nx) st = graft_gradients(t, ny, outs, seeds, nx, xs, GRAFT_UNCONNECTED_ZERO, g);
  for (int i = 0; i < no && subst && !t->status; i++) {
    const graft__node *r = graft__trace_node(t, replayed[i]), *v = graft__trace_node(t, subst[i]);
    if (!subst[i] || !r || !v || r == v || r->op == GRAFT__OP_INPUT) continue;
    for (uint32_t id = mark; id < t->g->n_nodes; id++) {
      graft__node *b = graft__graph_node(t->g, id);
      for (int j = 0; j < b->n_in; j++)
        if (b->in[j] == r->id) b->in[j] = v->id;
    }
  }
  for (int j = 0, k = 0; j < ns && !st; j++)
    if (want[j] && is_float(prim[j])) gx[j] = ny ? g[k++] : graft_zeros_like(t, prim[j]);
  graft__free(buf);
  return t->status;
}

/* In body trace t: replay s on prim[] into outs[], and the tangents of the
 * float outputs for input tangents tan[j] (NULL: zero) into touts[] (zeros
 * where unconnected; NULL for the others). */
static graft_status body_jvp(graft_trace *t, const graft__sub *s, graft_value *const *prim,
                             graft_value *const *tan, graft_value **outs, graft_value **touts) {
  int ns = s->g->n_inputs, no = s->g->n_outputs;
  graft_value **buf = graft__calloc((size_t)(2 * ns + 2 * no) + 1, sizeof *buf);
  if (!buf) return graft_trace_fail(t, GRAFT_ENOMEM, "tangent body: out of memory");
  graft_value **px = buf, **tx = buf + ns, **ys = buf + 2 * ns, **jv = ys + no;
  graft_status st = graft__replay(t, s, prim, outs);
  int np = 0, ny = 0;
  for (int j = 0; j < ns; j++)
    if (tan[j] && is_float(prim[j])) {
      px[np] = prim[j];
      tx[np++] = tan[j];
    }
  for (int i = 0; i < no && !st; i++)
    if (is_float(outs[i])) ys[ny++] = outs[i];
  if (!st && np && ny) st = graft_jvp(t, np, px, tx, ny, ys, GRAFT_UNCONNECTED_ZERO, jv);
  for (int i = 0, k = 0; i < no && !st; i++) {
    touts[i] = NULL;
    if (is_float(outs[i])) touts[i] = np ? jv[k++] : graft_zeros_like(t, outs[i]);
  }
  graft__free(buf);
  return t->status;
}

/* ---- cond and remat ------------------------------------------------------- */

/* The rule's view of a cond or remat node: its inputs past the prefix
 * (cond's pred) become the new node's explicit inputs, followed by the
 * cotangents (or tangents) it was given. */
typedef struct branch_ctx {
  const graft__ctl *c;
  int pre, n_in;               /* the node's prefix and input count */
  graft_value *const *in;      /* the node's inputs (t's) */
  int n_extra;                 /* cotangents / tangents after the inputs */
  int *extra_of;               /* reverse: output i's cotangent's position,
                                  forward: input idx's tangent's, or -1 */
  const uint8_t *need;         /* reverse: the inputs whose cotangent is used */
} branch_ctx;

static graft_status branch_vjp(graft_trace *t, int n, graft_value *const *vals, int n_out,
                               graft_value **outs, void *user, int k) {
  const branch_ctx *x = user;
  const graft__sub *s = x->c->sub[k];
  int ns = s->g->n_inputs, no = s->g->n_outputs, m = x->n_in - x->pre;
  (void)n, (void)n_out;
  graft_value **buf = graft__calloc((size_t)(2 * ns + no) + 1, sizeof *buf);
  uint8_t *want = graft__calloc((size_t)ns + 1, 1);
  if (!buf || !want) {
    graft__free(buf);
    graft__free(want);
    return graft_trace_fail(t, GRAFT_ENOMEM, "%s backward: out of memory", x->c->name);
  }
  graft_value **prim = buf, **gx = buf + ns, **cot = buf + 2 * ns;
  for (int j = 0; j < ns; j++) {
    prim[j] = vals[x->c->map[k][j] - x->pre];
    want[j] = x->need[x->c->map[k][j]];
  }
  for (int i = 0; i < no; i++) cot[i] = x->extra_of[i] >= 0 ? vals[m + x->extra_of[i]] : NULL;
  graft_status st = body_vjp(t, s, prim, want, cot, NULL, gx);
  graft__free(want);
  /* one output per float input of the node: this body's cotangent for it
   * (map is one-to-one), or zeros where the body does not use it */
  int o = 0;
  for (int idx = x->pre; idx < x->n_in && !st; idx++) {
    if (!x->need[idx] || !is_float(x->in[idx])) continue;
    graft_value *v = NULL;
    for (int j = 0; j < ns && !v; j++)
      if (x->c->map[k][j] == idx) v = gx[j];
    outs[o++] = v ? v : graft_zeros_like(t, vals[idx - x->pre]);
  }
  graft__free(buf);
  return t->status;
}

static graft_status then_vjp(graft_trace *t, int n, graft_value *const *v, int no, graft_value **o,
                             void *u) {
  return branch_vjp(t, n, v, no, o, u, 0);
}
static graft_status else_vjp(graft_trace *t, int n, graft_value *const *v, int no, graft_value **o,
                             void *u) {
  return branch_vjp(t, n, v, no, o, u, 1);
}

static graft_status branch_jvp(graft_trace *t, int n, graft_value *const *vals, int n_out,
                               graft_value **outs, void *user, int k) {
  const branch_ctx *x = user;
  const graft__sub *s = x->c->sub[k];
  int ns = s->g->n_inputs, no = s->g->n_outputs, m = x->n_in - x->pre;
  (void)n, (void)n_out;
  graft_value **buf = graft__calloc((size_t)(2 * ns + 2 * no) + 1, sizeof *buf);
  if (!buf) return graft_trace_fail(t, GRAFT_ENOMEM, "%s tangent: out of memory", x->c->name);
  graft_value **prim = buf, **tan = buf + ns, **po = buf + 2 * ns, **to = po + no;
  for (int j = 0; j < ns; j++) {
    int idx = x->c->map[k][j];
    prim[j] = vals[idx - x->pre];
    tan[j] = x->extra_of[idx] >= 0 ? vals[m + x->extra_of[idx]] : NULL;
  }
  graft_status st = body_jvp(t, s, prim, tan, po, to);
  for (int i = 0, o = 0; i < no && !st; i++)
    if (to[i]) outs[o++] = to[i];
  graft__free(buf);
  return t->status;
}

static graft_status then_jvp(graft_trace *t, int n, graft_value *const *v, int no, graft_value **o,
                             void *u) {
  return branch_jvp(t, n, v, no, o, u, 0);
}
static graft_status else_jvp(graft_trace *t, int n, graft_value *const *v, int no, graft_value **o,
                             void *u) {
  return branch_jvp(t, n, v, no, o, u, 1);
}

/* Emit the cond (pred in[0]) or remat of the rule on ins[0..n_ins). */
static graft_status branch_node(graft_trace *t, const graft__ctl *c, graft_value *const *in,
                                int n_ins, graft_value *const *ins, int fwd, int n_out,
                                graft_value **outs, branch_ctx *x) {
  if (c->kind == GRAFT__CTL_COND)
    return graft_cond(t, in[0], n_ins, ins, fwd ? then_jvp : then_vjp, fwd ? else_jvp : else_vjp,
                      x, n_out, outs);
  return graft_remat(t, fwd ? then_jvp : then_vjp, x, n_ins, ins, n_out, outs);
}

static graft_status branch_rule(graft_trace *t, const graft__node *nd, graft_value *const *in,
                                const uint8_t *need, graft_value *const *extra, graft_value **res,
                                int fwd) {
  const graft__ctl *c = nd->attr.ctl.ctl;
  int pre = c->kind == GRAFT__CTL_COND, n_in = nd->n_in, n_y = c->n_out;
  int n_aux = fwd ? n_in : n_y; /* tangents per input, or cotangents per output */
  /* ins: the new node's inputs; outs: its results, one per float output
   * (forward) or float input (reverse) */
  graft_value **ins = graft__calloc((size_t)(2 * n_in + n_aux + n_y) + 1, sizeof *ins);
  int *extra_of = graft__calloc((size_t)n_aux + 1, sizeof *extra_of);
  if (!ins || !extra_of) {
    graft__free(ins);
    graft__free(extra_of);
    return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
  }
  graft_value **outs = ins + n_in + n_aux;
  int m = 0, ne = 0, n_res = 0;
  for (int idx = pre; idx < n_in; idx++) ins[m++] = in[idx];
  for (int i = 0; i < n_aux; i++) {
    extra_of[i] = -1;
    if (extra[i] && (fwd ? i >= pre && is_float(in[i]) : 1)) {
      extra_of[i] = ne++;
      ins[m++] = extra[i];
    }
  }
  if (fwd) {
    for (int i = 0; i < n_y; i++) n_res += is_float(graft__value(t->g, c->gets[i]));
  } else {
    for (int idx = pre; idx < n_in; idx++) n_res += need[idx] && is_float(in[idx]);
  }
  graft_status st = GRAFT_OK;
  if (ne && n_res) {
    branch_ctx x = {c, pre, n_in, in, ne, extra_of, need};
    st = branch_node(t, c, in, m, ins, fwd, n_res, outs, &x);
  }
  /* back to per input (reverse) or per output (forward) */
  int o = 0;
  for (int i = 0; i < (fwd ? n_y : n_in) && !st; i++) {
    res[i] = NULL;
    int fl = fwd ? is_float(graft__value(t->g, c->gets[i]))
                 : i >= pre && need[i] && is_float(in[i]);
    if (fl && ne) res[i] = outs[o++];
  }
  graft__free(ins);
  graft__free(extra_of);
  return st;
}

/* ---- scan and while_loop, reverse mode -------------------------------------- */

/* The reverse scan's body over a scan or while loop's body (sub k):
 * carries [ct_c (float carries)..., ct_cap (float captures)...], xs
 * [carries before the step (all)..., after it (all)..., the node's xs...,
 * its ys (the forward's)..., ct_y (float ys)..., ct_b (float carries,
 * has_cts: cotangents of the saved carries before the step)..., ct_a
 * (has_cta: after)...]; ys the float xs' cotangents. */
typedef struct loop_ctx {
  const graft__ctl *c;
  int k;                       /* the body's sub */
  graft_value *const *in;      /* the node's inputs (t's) */
  int nc, nx, ny, nfc, nfcap, nfy, nfx, has_cts, has_cta;
  int *fc, *fcap, *fy, *fx;    /* float carries / capture sub inputs / ys / xs */
  /* forward mode */
  const uint8_t *want;         /* per sub input: its cotangent is used */
  int *tx;                     /* per x: its tangent's position or -1 */
  graft_value *const *tin;     /* the node's input tangents */
  int ntx;
} loop_ctx;

/* The primal inputs of body k of x's loop, as values of t: its carries,
 * its x slices (the scan's), then what it captured (the node's inputs of
 * the trace around, captured again into t). */
static void body_prims(graft_trace *t, const loop_ctx *x, int k, graft_value *const *carries,
                       graft_value *const *xs, graft_value **prim) {
  int ns = x->c->sub[k]->g->n_inputs, nc = x->nc, nx = k == x->k ? x->nx : 0;
  for (int j = 0; j < ns; j++)
    prim[j] = j < nc ? carries[j] : j < nc + nx ? xs[j - nc] : local(t, x->in[x->c->map[k][j]]);
}

static graft_status loop_vjp_body(graft_trace *t, int n, graft_value *const *vals, int n_out,
                                  graft_value **outs, void *user) {
  const loop_ctx *x = user;
  const graft__ctl *c = x->c;
  const graft__sub *s = c->sub[x->k];
  int ns = s->g->n_inputs, no = s->g->n_outputs, nc = x->nc, nx = x->nx;
  (void)n, (void)n_out;
  graft_value **buf = graft__calloc((size_t)(2 * ns + 2 * no) + 1, sizeof *buf);
  if (!buf) return graft_trace_fail(t, GRAFT_ENOMEM, "%s backward: out of memory", c->name);
  graft_value **prim = buf, **gx = buf + ns, **cot = buf + 2 * ns, **sub = cot + no;
  graft_value *const *ct_c = vals, *const *ct_cap = vals + x->nfc;
  graft_value *const *Sb = ct_cap + x->nfcap, *const *Sa = Sb + nc, *const *xt = Sa + nc;
  graft_value *const *yf = xt + nx, *const *cty = yf + x->ny, *const *ctb = cty + x->nfy;
  graft_value *const *cta = ctb + (x->has_cts ? x->nfc : 0);
  body_prims(t, x, x->k, Sb, xt, prim);
  for (int i = 0; i < x->nfc; i++)
    cot[x->fc[i]] = x->has_cta ? graft_add(t, ct_c[i], cta[i]) : ct_c[i];
  for (int i = 0; i < x->nfy; i++) cot[nc + x->fy[i]] = cty[i];
  for (int i = 0; i < nc; i++) sub[i] = Sa[i];
  for (int i = 0; i < x->ny; i++) sub[nc + i] = yf[i];
  graft_status st = body_vjp(t, s, prim, x->want, cot, sub, gx);
  int o = 0;
  for (int i = 0; i < x->nfc && !st; i++) {
    graft_value *g = gx[x->fc[i]];
    outs[o++] = x->has_cts ? graft_add(t, g, ctb[i]) : g;
  }
  for (int i = 0; i < x->nfcap && !st; i++) outs[o++] = graft_add(t, ct_cap[i], gx[x->fcap[i]]);
  for (int i = 0; i < x->nfx && !st; i++) outs[o++] = gx[nc + x->fx[i]];
  graft__free(buf);
  return t->status;
}

/* ---- checkpoints: the reverse scan block by block ---------------------------- */

/* A block's recomputation: the forward body on (carry, x), giving the next
 * carries and, as ys, the carries before each step, after it, and the
 * body's ys. */
static graft_status recompute_body(graft_trace *t, int n, graft_value *const *vals, int n_out,
                                   graft_value **outs, void *user) {
  const loop_ctx *x = user;
  const graft__sub *s = x->c->sub[0];
  int ns = s->g->n_inputs, no = s->g->n_outputs, nc = x->nc;
  (void)n, (void)n_out;
  graft_value **buf = graft__calloc((size_t)(ns + no) + 1, sizeof *buf);
  if (!buf) return graft_trace_fail(t, GRAFT_ENOMEM, "scan backward: out of memory");
  graft_value **prim = buf, **po = buf + ns;
  body_prims(t, x, 0, vals, vals + nc, prim);
  graft_status st = graft__replay(t, s, prim, po);
  for (int i = 0; i < nc && !st; i++) {
    outs[i] = po[i];
    outs[nc + i] = vals[i];
    outs[2 * nc + i] = po[i];
  }
  for (int i = 0; i < x->ny && !st; i++) outs[3 * nc + i] = po[nc + i];
  graft__free(buf);
  return t->status;
}

/* The outer reverse scan's body, one block: carries [ct_c..., ct_cap...],
 * xs [checkpoint (nc)..., x block [k, ...] (nx)..., ct_y block (nfy)...,
 * ct_S (nfc, has_cts)..., len]: recompute the block's carries from its
 * checkpoint, then the reverse scan of the plain rule over them. */
static graft_status block_vjp_body(graft_trace *t, int n, graft_value *const *vals, int n_out,
                                   graft_value **outs, void *user) {
  const loop_ctx *x = user;
  const graft__ctl *c = x->c;
  int nc = x->nc, nx = x->nx, nfc = x->nfc, nfcap = x->nfcap;
  (void)n, (void)n_out;
  graft_value *const *ct = vals, *const *S = vals + nfc + nfcap, *const *xb = S + nc;
  graft_value *const *cty = xb + nx, *const *ctS = cty + x->nfy;
  graft_value *len = ctS[x->has_cts ? nfc : 0];
  int ny = x->ny;
  graft_value **buf = graft__calloc((size_t)(4 * (nc + nx + ny + nfc + nfcap + x->nfy + x->nfx)) + 4,
                                    sizeof *buf);
  if (!buf) return graft_trace_fail(t, GRAFT_ENOMEM, "scan backward: out of memory");
  graft_value **res = buf, **xs2 = res + 3 * nc + ny + 1, **res2 = xs2 + 2 * nc + nx + ny + x->nfy + 1;
  graft_scan_opts fwd = {.reverse = c->reverse}, bwd = {.reverse = !c->reverse};
  graft_status st =
      graft__scan_ext(t, recompute_body, (void *)x, nc, S, nx, xb, 2 * nc + ny, res, &fwd, len, NULL);
  loop_ctx inner = *x;
  inner.has_cts = 0; /* the checkpoints' cotangents join per block, below */
  int m = 0;
  for (int i = 0; i < 2 * nc; i++) xs2[m++] = res[nc + i]; /* before, after */
  for (int i = 0; i < nx; i++) xs2[m++] = xb[i];
  for (int i = 0; i < ny; i++) xs2[m++] = res[3 * nc + i];
  for (int i = 0; i < x->nfy; i++) xs2[m++] = cty[i];
  if (!st)
    st = graft__scan_ext(t, loop_vjp_body, &inner, nfc + nfcap, ct, m, xs2, x->nfx, res2, &bwd, len,
                         NULL);
  for (int i = 0; i < nfc + nfcap + x->nfx && !st; i++)
    outs[i] = i < nfc && x->has_cts ? graft_add(t, res2[i], ctS[i]) : res2[i];
  graft__free(buf);
  return t->status;
}

/* v [T, ...] as blocks [nb, k, ...] (zero rows past T). */
static graft_value *to_blocks(graft_trace *t, graft_value *v, int64_t nb, int64_t k) {
  int r = graft_value_rank(v);
  int64_t shape[GRAFT_MAX_RANK], begin[GRAFT_MAX_RANK] = {0};
  memcpy(shape, graft_value_shape(v), (size_t)r * sizeof *shape);
  if (shape[0] != nb * k) {
    shape[0] = nb * k;
    v = graft_pad(t, v, begin, r, shape);
  }
  memmove(shape + 2, shape + 1, (size_t)(r - 1) * sizeof *shape);
  shape[0] = nb;
  shape[1] = k;
  return graft_reshape(t, v, r + 1, shape);
}

/* blocks [nb, k, ...] back to [T, ...]. */
static graft_value *from_blocks(graft_trace *t, graft_value *v, int64_t T) {
  int r = graft_value_rank(v);
  int64_t shape[GRAFT_MAX_RANK], begin[GRAFT_MAX_RANK] = {0}, size[GRAFT_MAX_RANK];
  memcpy(shape + 1, graft_value_shape(v) + 2, (size_t)(r - 2) * sizeof *shape);
  shape[0] = graft_value_shape(v)[0] * graft_value_shape(v)[1];
  v = graft_reshape(t, v, r - 1, shape);
  if (shape[0] == T) return v;
  for (int i = 0; i < r - 1; i++) size[i] = i ? -1 : T;
  return graft_slice(t, v, begin, size);
}

/* x i of scan c, which it reads in blocks, as a copy in blocks. */
static graft_value *blocks_of(graft_trace *t, const graft__ctl *c, int i, graft_value *x) {
  int64_t rows = graft_value_shape(x)[0];
  return to_blocks(t, x, graft__scan_steps(c, i, rows), c->x_block);
}

/* The float members of a list: their positions in idx[], the count back. */
static int floats(graft_value *const *v, int n, int *idx) {
  int m = 0;
  for (int i = 0; i < n; i++)
    if (v[i] && is_float(v[i])) idx[m++] = i; /* (NULL: not wanted) */
  return m;
}

static graft_status loop_vjp(graft_trace *t, const graft__node *nd, graft_value *const *in,
                             const uint8_t *need, graft_value *const *cot, int n_cot,
                             graft_value **gx) {
  graft__ctl *c = nd->attr.ctl.ctl;
  int is_while = c->kind == GRAFT__CTL_WHILE;
  if (is_while && !c->max_iters)
    return graft_trace_fail(t, GRAFT_EUNSUPPORTED,
                            "while_loop: reverse mode needs opts.max_iters > 0 (the loop must "
                            "save its carries, at most max_iters of them); forward mode "
                            "(graft_jvp) works on an unbounded loop (op #%u in trace '%s')",
                            nd->id, t->g->name);
  int k = is_while ? 1 : 0, pre = c->has_len, nc = c->n_carry, nx = c->n_xs, ny = c->n_ys;
  const graft__sub *s = c->sub[k];
  int ns = s->g->n_inputs, ncap = ns - nc - nx, n_in = nd->n_in;
  uint32_t first;
  graft_status st = graft__ctl_save(t, nd->id, &first);
  if (st) return st;
  int n_buf = 4 * (nc + nx + ny + ncap + n_in) + 8;
  int *ib = graft__calloc((size_t)n_buf, sizeof *ib);
  graft_value **vb = graft__calloc((size_t)n_buf * 2, sizeof *vb);
  if (!ib || !vb) {
    graft__free(ib);
    graft__free(vb);
    return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
  }
  loop_ctx x = {.c = c, .k = k, .in = in, .nc = nc, .nx = nx, .ny = ny};
  x.fc = ib, x.fcap = ib + nc, x.fy = x.fcap + ncap, x.fx = x.fy + ny;
  graft_value **tmp = vb; /* for the float tests only, before init is written */
  /* the node's float carries (by the final values), captures, ys, xs */
  for (int i = 0; i < nc; i++) tmp[i] = graft__value(t->g, c->gets[i]);
  x.nfc = floats(tmp, nc, x.fc);
  /* (captures and xs: only those whose cotangent is used) */
  for (int j = 0; j < ncap; j++) tmp[j] = need[c->map[k][nc + nx + j]] ? in[c->map[k][nc + nx + j]] : NULL;
  x.nfcap = floats(tmp, ncap, x.fcap);
  for (int j = 0; j < x.nfcap; j++) x.fcap[j] += nc + nx; /* as sub inputs */
  for (int i = 0; i < ny; i++) tmp[i] = graft__value(t->g, c->gets[nc + i]);
  x.nfy = floats(tmp, ny, x.fy);
  for (int i = 0; i < nx; i++) tmp[i] = need[pre + nc + i] ? in[pre + nc + i] : NULL;
  x.nfx = floats(tmp, nx, x.fx);
  uint8_t *want = graft__calloc((size_t)ns + 1, 1); /* carries always: the chain runs through */
  if (!want) {
    graft__free(ib);
    graft__free(vb);
    return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
  }
  for (int j = 0; j < nc; j++) want[j] = 1;
  for (int i = 0; i < x.nfx; i++) want[nc + x.fx[i]] = 1;
  for (int j = 0; j < x.nfcap; j++) want[x.fcap[j]] = 1;
  x.want = want;
  /* the saved outputs' cotangents (only if they existed before this call):
   * before each step, and (without checkpoints) after */
  int ck = c->checkpoint > 1;
  graft_value *const *cts = n_cot > c->n_out ? cot + c->n_out : NULL;
  for (int i = 0; cts && i < x.nfc; i++) {
    x.has_cts |= cts[x.fc[i]] != NULL;
    x.has_cta |= !ck && cts[nc + x.fc[i]] != NULL;
  }
  /* the reverse scan's carries and xs */
  graft_value **init = vb + nc + nx + ny + ncap + 1, **xs = init + x.nfc + x.nfcap + 1;
  graft_value **outs = xs + 2 * nc + nx + ny + x.nfy + 2 * x.nfc + 2;
  int ni = 0, nxs = 0;
  for (int i = 0; i < x.nfc; i++) {
    graft_value *f = graft__value(t->g, c->gets[x.fc[i]]);
    init[ni++] = cot[x.fc[i]] ? cot[x.fc[i]] : graft_zeros_like(t, f);
  }
  for (int j = 0; j < x.nfcap; j++) init[ni++] = graft_zeros_like(t, in[c->map[k][x.fcap[j]]]);
  for (int i = 0; i < (ck ? 1 : 2) * nc; i++) xs[nxs++] = graft__value(t->g, first + (uint32_t)i);
  for (int i = 0; i < nx; i++) /* (xs the node reads in blocks: copied in blocks) */
    xs[nxs++] = c->x_blocked >> i & 1 ? blocks_of(t, c, i, in[pre + nc + i]) : in[pre + nc + i];
  for (int i = 0; !ck && i < ny; i++) xs[nxs++] = graft__value(t->g, c->gets[nc + i]);
  for (int i = 0; i < x.nfy; i++) {
    graft_value *y = graft__value(t->g, c->gets[nc + x.fy[i]]);
    xs[nxs++] = cot[nc + x.fy[i]] ? cot[nc + x.fy[i]] : graft_zeros_like(t, y);
  }
  for (int a = 0; a < 2; a++) /* the saved carries' cotangents: before, after */
    for (int i = 0; (a ? x.has_cta : x.has_cts) && i < x.nfc; i++) {
      int at = a * nc + x.fc[i];
      graft_value *S = graft__value(t->g, first + (uint32_t)at);
      xs[nxs++] = cts[at] ? cts[at] : graft_zeros_like(t, S);
    }
  for (int i = 0; i < n_in; i++) gx[i] = NULL;
  if (c->checkpoint > 1 && ni + x.nfx && !t->status) { /* block by block */
    int64_t kk = c->checkpoint, T = graft_value_shape(in[pre + nc])[0], nb = (T + kk - 1) / kk;
    /* the xs and the ys' cotangents read in blocks of kk rows, in place;
     * the checkpoints and their cotangents are one row a block already */
    graft__scan_blocks blk = {kk, 0};
    for (int i = 0; i < nx + x.nfy; i++) {
      if (nc + i < 64) blk.mask |= UINT64_C(1) << (nc + i);
      else xs[nc + i] = to_blocks(t, xs[nc + i], nb, kk);
    }
    int32_t *lens = graft__malloc((size_t)nb * sizeof *lens);
    if (!lens) {
      st = graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
    } else {
      for (int64_t j = 0; j < nb; j++) lens[j] = (int32_t)GRAFT__MIN(kk, T - j * kk);
      xs[nxs++] = graft_constant(t, GRAFT_I32, 1, &nb, lens);
      graft__free(lens);
      graft_scan_opts o = {.reverse = !c->reverse};
      st = graft__scan_ext(t, block_vjp_body, &x, ni, init, nxs, xs, x.nfx, outs, &o, NULL, &blk);
    }
    int o2 = 0;
    for (int i = 0; i < x.nfc && !st; i++) gx[pre + x.fc[i]] = outs[o2++];
    for (int j = 0; j < x.nfcap && !st; j++) gx[c->map[k][x.fcap[j]]] = outs[o2++];
    for (int i = 0; i < x.nfx && !st; i++) gx[pre + nc + x.fx[i]] = from_blocks(t, outs[o2++], T);
  } else if (ni + x.nfx && !t->status) {
    graft_scan_opts o = {.reverse = is_while ? 1 : !c->reverse, .checkpoint = 0};
    graft_value *len = is_while ? graft__value(t->g, first + (uint32_t)(2 * nc)) : pre ? in[0] : NULL;
    st = graft__scan_ext(t, loop_vjp_body, &x, ni, init, nxs, xs, x.nfx, outs, &o, len, NULL);
    int o2 = 0;
    for (int i = 0; i < x.nfc && !st; i++) gx[pre + x.fc[i]] = outs[o2++];
    for (int j = 0; j < x.nfcap && !st; j++) gx[c->map[k][x.fcap[j]]] = outs[o2++];
    for (int i = 0; i < x.nfx && !st; i++) {
      graft_value *g = outs[o2++], *xi = in[pre + nc + x.fx[i]];
      gx[pre + nc + x.fx[i]] =
          c->x_blocked >> x.fx[i] & 1 ? from_blocks(t, g, graft_value_shape(xi)[0]) : g;
    }
  }
  graft__free(ib);
  graft__free(vb);
  graft__free(want);
  return t->status;
}

/* ---- scan and while_loop, forward mode ---------------------------------------- */

/* The tangent loop's body: carries [c..., tc (float carries)...], xs
 * [x..., tx (xs with tangents)...]; outputs [c'..., tc'..., y..., ty
 * (float ys)...] (a while loop has no xs or ys). */
static graft_status loop_jvp_body(graft_trace *t, int n, graft_value *const *vals, int n_out,
                                  graft_value **outs, void *user) {
  const loop_ctx *x = user;
  const graft__ctl *c = x->c;
  const graft__sub *s = c->sub[x->k];
  int ns = s->g->n_inputs, no = s->g->n_outputs, nc = x->nc, nx = x->nx;
  (void)n, (void)n_out;
  graft_value **buf = graft__calloc((size_t)(2 * ns + 2 * no) + 1, sizeof *buf);
  if (!buf) return graft_trace_fail(t, GRAFT_ENOMEM, "%s tangent: out of memory", c->name);
  graft_value **prim = buf, **tan = buf + ns, **po = buf + 2 * ns, **to = po + no;
  graft_value *const *cv = vals, *const *tc = vals + nc, *const *xv = tc + x->nfc;
  graft_value *const *txv = xv + nx;
  body_prims(t, x, x->k, cv, xv, prim);
  for (int j = 0; j < ns; j++) { /* the captured values' tangents */
    int idx = c->map[x->k][j];
    tan[j] = j >= nc + nx && x->tin[idx] ? local(t, x->tin[idx]) : NULL;
  }
  for (int i = 0; i < x->nfc; i++) tan[x->fc[i]] = tc[i];
  for (int i = 0; i < nx; i++) tan[nc + i] = x->tx[i] >= 0 ? txv[x->tx[i]] : NULL;
  graft_status st = body_jvp(t, s, prim, tan, po, to);
  int o = 0;
  for (int i = 0; i < nc && !st; i++) outs[o++] = po[i];
  for (int i = 0; i < x->nfc && !st; i++) outs[o++] = to[x->fc[i]];
  for (int i = nc; i < no && !st; i++) outs[o++] = po[i];
  for (int i = nc; i < no && !st; i++)
    if (to[i]) outs[o++] = to[i];
  graft__free(buf);
  return t->status;
}

/* The tangent while loop's cond: the loop's cond on the primal carries. */
static graft_status loop_jvp_cond(graft_trace *t, int n, graft_value *const *vals, int n_out,
                                  graft_value **outs, void *user) {
  const loop_ctx *x = user;
  const graft__sub *s = x->c->sub[0];
  int ns = s->g->n_inputs;
  (void)n, (void)n_out;
  graft_value **prim = graft__calloc((size_t)ns + 1, sizeof *prim);
  if (!prim) return graft_trace_fail(t, GRAFT_ENOMEM, "while_loop tangent: out of memory");
  body_prims(t, x, 0, vals, NULL, prim);
  graft_status st = graft__replay(t, s, prim, outs);
  graft__free(prim);
  return st;
}

static graft_status loop_jvp(graft_trace *t, const graft__node *nd, graft_value *const *in,
                             graft_value *const *tin, graft_value **tout) {
  const graft__ctl *c = nd->attr.ctl.ctl;
  int is_while = c->kind == GRAFT__CTL_WHILE, k = is_while ? 1 : 0;
  int pre = c->has_len, nc = c->n_carry, nx = c->n_xs, ny = c->n_ys;
  int n_all = graft__ctl_outputs(c);
  for (int i = 0; i < n_all; i++) tout[i] = NULL;
  int *ib = graft__calloc((size_t)(2 * (nc + nx + ny)) + 2, sizeof *ib);
  graft_value **vb = graft__calloc((size_t)(4 * (nc + nx + ny)) + 4, sizeof *vb);
  if (!ib || !vb) {
    graft__free(ib);
    graft__free(vb);
    return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
  }
  loop_ctx x = {.c = c, .k = k, .in = in, .nc = nc, .nx = nx, .tin = tin};
  x.fc = ib, x.tx = ib + nc;
  for (int i = 0; i < nc; i++) vb[i] = graft__value(t->g, c->gets[i]);
  x.nfc = floats(vb, nc, x.fc);
  graft_value **init = vb, **xs = vb + nc + x.nfc, **outs = xs + 2 * nx;
  int nxs = 0;
  for (int i = 0; i < nc; i++) init[i] = in[pre + i];
  for (int i = 0; i < x.nfc; i++) {
    graft_value *tv = tin[pre + x.fc[i]];
    init[nc + i] = tv ? tv : graft_zeros_like(t, in[pre + x.fc[i]]);
  }
  for (int i = 0; i < nx; i++) xs[nxs++] = in[pre + nc + i];
  for (int i = 0; i < nx; i++) {
    x.tx[i] = -1;
    if (tin[pre + nc + i] && is_float(in[pre + nc + i])) {
      x.tx[i] = x.ntx++;
      xs[nxs++] = tin[pre + nc + i];
    }
  }
  int nfy = 0;
  for (int i = 0; i < ny; i++) nfy += is_float(graft__value(t->g, c->gets[nc + i]));
  graft_status st;
  if (is_while) {
    graft_while_opts o = {c->max_iters};
    st = graft_while_loop(t, loop_jvp_cond, loop_jvp_body, &x, nc + x.nfc, init, outs, &o);
  } else {
    graft_scan_opts o = {c->reverse, c->checkpoint};
    /* xs the node reads in blocks, and their tangents, are read so here */
    graft__scan_blocks blk = {c->x_block, c->x_blocked};
    st = GRAFT_OK;
    for (int i = 0; i < nx && !st; i++) {
      if (x.tx[i] < 0 || !(c->x_blocked >> i & 1)) continue;
      if (nx + x.tx[i] >= 64)
        st = graft_trace_fail(t, GRAFT_EUNSUPPORTED, "scan: tangents of more than 64 xs read in blocks");
      else blk.mask |= UINT64_C(1) << (nx + x.tx[i]);
    }
    if (!st)
      st = graft__scan_ext(t, loop_jvp_body, &x, nc + x.nfc, init, nxs, xs, ny + nfy, outs, &o,
                           pre ? in[0] : NULL, c->x_blocked ? &blk : NULL);
  }
  /* the tangents of the node's outputs */
  for (int i = 0; i < x.nfc && !st; i++) tout[x.fc[i]] = outs[nc + i];
  for (int i = 0, f = 0; i < ny && !st; i++)
    if (is_float(graft__value(t->g, c->gets[nc + i]))) tout[nc + i] = outs[nc + x.nfc + ny + f++];
  if (!st && c->save) { /* the saved carries' tangents: the new loop's saved tangents */
    uint32_t first;
    const graft__node *gn = graft__trace_node(t, outs[0]); /* a GET of the new loop */
    int m = nc + x.nfc, after = c->checkpoint > 1 ? 0 : 1; /* the new loop's carries */
    if (!(st = graft__ctl_save(t, gn->in[0], &first)))
      for (int a = 0; a <= after; a++)
        for (int i = 0; i < x.nfc; i++)
          tout[c->n_out + a * nc + x.fc[i]] = graft__value(t->g, first + (uint32_t)(a * m + nc + i));
  }
  graft__free(ib);
  graft__free(vb);
  return st ? st : t->status;
}

/* ---- entry points (reverse.c, forward.c) --------------------------------------- */

graft_status graft__vjp_ctl(graft_trace *t, const graft__node *n, graft_value *const *in,
                            const uint8_t *need, graft_value *const *cot, int n_cot,
                            graft_value **gx) {
  const graft__ctl *c = n->attr.ctl.ctl;
  if (c->kind == GRAFT__CTL_COND || c->kind == GRAFT__CTL_REMAT)
    return branch_rule(t, n, in, need, cot, gx, 0);
  return loop_vjp(t, n, in, need, cot, n_cot, gx);
}

graft_status graft__jvp_ctl(graft_trace *t, const graft__node *n, graft_value *const *in,
                            graft_value *const *tin, graft_value **tout) {
  const graft__ctl *c = n->attr.ctl.ctl;
  if (c->kind == GRAFT__CTL_COND || c->kind == GRAFT__CTL_REMAT)
    return branch_rule(t, n, in, NULL, tin, tout, 1);
  return loop_jvp(t, n, in, tin, tout);
}

/* The table rows: a control node's rules are the per-output ones above,
 * which the builders call instead (its value, the packed outputs, has no
 * cotangent or tangent of its own); a GET's cotangent is read by its node's
 * rule, and its tangent is set by it. */
#define NO_RULE_(e)                                                                              \
  void graft__vjp_##e(graft_trace *t, const graft__node *n, graft_value *const *in,              \
                      graft_value *y, graft_value *g, graft_value **gx) {                        \
    (void)t, (void)n, (void)in, (void)y, (void)g, (void)gx;                                      \
  }                                                                                              \
  graft_value *graft__jvp_##e(graft_trace *t, const graft__node *n, graft_value *const *in,      \
                              graft_value *y, graft_value *const *tin) {                         \
    (void)t, (void)n, (void)in, (void)y, (void)tin;                                              \
    return NULL;                                                                                 \
  }
NO_RULE_(COND)
NO_RULE_(WHILE)
NO_RULE_(SCAN)
NO_RULE_(REMAT)
NO_RULE_(GET)
