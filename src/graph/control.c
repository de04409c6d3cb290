/* Control flow at trace time: cond, while_loop, scan and remat trace their
 * bodies into subgraphs (graft__sub) and append one control node, whose
 * value packs the outputs, and one GET node per output.
 *
 * A body's trace is nested in the caller's: a value of a trace around it
 * that the body uses is captured (an INPUT of the body's graph after its
 * explicit ones, and an input of the control node), so closures work and
 * gradients reach what a body read.  Variables read in a body are read by
 * the trace around it and captured the same way.
 *
 * Shapes: a body's inputs get the shapes of what they stand for; where
 * those hold symbols, the body's graph gets symbols of its own (bound per
 * call from its inputs), and an output dim that is such a symbol maps back
 * to the outer dim it came from.  Dims a body derives (a reshape's -1) are
 * new symbols outside; the compiled subgraphs give every dim (sched/
 * control.c), and checks that need them run there. */
#include <string.h>

#include "graph/graph.h"

#define NONE GRAFT__POISON_ID

static const void *id_key(uint32_t id) { return (const void *)(uintptr_t)((uintptr_t)id + 1); }

void graft__sub_ref(graft__sub *s) { __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED); }

void graft__sub_unref(graft__sub *s) {
  if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  graft__graph_destroy(s->g);
  graft__free(s);
}

/* ---- inputs and captures ------------------------------------------------- */

/* Append INPUT index idx to g shaped like sh (symbols become g's own). */
static graft__node *make_input(graft__graph *g, int idx, const graft__shape *sh) {
  graft__node *n = graft__graph_add(g, GRAFT__OP_INPUT, 0, NULL);
  if (!n) return NULL;
  n->attr.input.index = idx;
  n->dtype = (uint8_t)sh->dtype;
  n->rank = (uint8_t)sh->rank;
  for (int d = 0; d < sh->rank; d++) {
    int64_t dim = sh->dims[d];
    if (GRAFT_DIM_IS_SYM(dim) && (dim = graft__graph_new_sym(g, idx, d)) == -1) return NULL;
    n->shape[d] = dim;
  }
  return n;
}

graft__node *graft__trace_node(const graft_trace *t, const graft_value *v) {
  graft__node *n = graft__value_node(t->g, v);
  if (n || !t->cap) return n;
  const graft__node *pn = graft__trace_node(t->cap->parent, v);
  const uint32_t *id = pn ? graft__ptrmap_get(&t->cap->seen, id_key(pn->id)) : NULL;
  return id ? graft__graph_node(t->g, *id) : NULL;
}

uint32_t graft__capture_value(graft_trace *t, const graft_value *v) {
  graft__capture *c = t->cap;
  if (!c || t->status) return NONE;
  graft_trace *p = c->parent;
  graft__node *pn;
  if (graft__trace_value(p, v, &pn) != GRAFT__VALUE_NODE) {
    uint32_t pid = graft__capture_value(p, v);
    if (pid == NONE) {
      if (p->status) graft__trace_failf(t, p->status, "%s", p->msg);
      return NONE;
    }
    pn = graft__graph_node(p->g, pid);
  }
  const uint32_t *seen = graft__ptrmap_get(&c->seen, id_key(pn->id));
  if (seen) return *seen;
  graft__graph *g = t->g;
  graft__shape sh;
  graft__node_shape(pn, &sh);
  graft__node *in;
  if (graft__grow((void **)&g->inputs, &c->cap_inputs, g->n_inputs + 1, sizeof *g->inputs) ||
      graft__grow((void **)&c->outer, &c->cap, c->n + 1, sizeof *c->outer) ||
      !(in = make_input(g, g->n_inputs, &sh)) || graft__ptrmap_put(&c->seen, id_key(pn->id), in->id)) {
    graft__trace_failf(t, GRAFT_ENOMEM, "capturing a value of the trace around '%s': out of memory",
                       g->name);
    return NONE;
  }
  g->inputs[g->n_inputs++] = in->id;
  c->outer[c->n++] = pn->id;
  return in->id;
}

/* ---- bodies --------------------------------------------------------------- */

typedef struct body {
  graft__sub *sub;
  uint32_t *captured;          /* the caller's node ids, sub inputs n_in.. */
  int n_cap;
} body;

static void body_free(body *b) {
  graft__sub_unref(b->sub);
  graft__free(b->captured);
  b->sub = NULL;
  b->captured = NULL;
}

/* Trace fn into a new subgraph with inputs shaped like[0..n_in) and n_out
 * outputs.  On failure t fails with a message naming what and which. */
static graft_status trace_body(graft_trace *t, const char *what, const char *which,
                               graft_trace_fn fn, void *user, int n_in, const graft__shape *like,
                               int n_out, body *b) {
  memset(b, 0, sizeof *b);
  char name[256];
  snprintf(name, sizeof name, "%s/%s.%s", t->g->name, what, which);
  graft__graph *g = graft__graph_create(name, n_in, n_out);
  graft_value **vals = graft__calloc((size_t)(n_in + n_out) + 1, sizeof *vals);
  graft_status st = GRAFT_OK;
  if (!g || !vals) st = GRAFT_ENOMEM;
  for (int j = 0; j < n_in && !st; j++) {
    graft__node *n = make_input(g, j, &like[j]);
    if (!n) st = GRAFT_ENOMEM;
    else g->inputs[j] = n->id;
    vals[j] = n ? graft__value(g, n->id) : NULL;
  }
  if (st) {
    graft__free(vals);
    graft__graph_destroy(g);
    return graft_trace_fail(t, GRAFT_ENOMEM, "%s: %s: out of memory", what, which);
  }
  graft__capture cap = {.parent = t, .cap_inputs = n_in};
  graft_trace s;
  graft__trace_begin(&s, g);
  s.cap = &cap;
  s.role = t->role;
  graft_value **outs = vals + n_in;
  graft_status cb = fn(&s, n_in, vals, n_out, outs, user);
  if (s.status) {
    st = s.status;
    graft__trace_failf(t, st, "%s: %s: %s", what, which, s.msg);
  } else if (cb) {
    st = graft__status_is_error(cb) ? cb : GRAFT__STATUS_FOREIGN;
    graft__trace_failf(t, st, "%s: %s: the callback returned %d (%s) (in trace '%s')", what, which,
                       (int)cb, graft_status_name(cb), t->g->name);
  }
  for (int i = 0; i < n_out && !st; i++) {
    uint32_t id = NONE;
    graft__node *n;
    switch (graft__trace_value(&s, outs[i], &n)) {
    case GRAFT__VALUE_NODE: id = n->id; break;
    case GRAFT__VALUE_FOREIGN: id = graft__capture_value(&s, outs[i]); break;
    default: break;
    }
    if (id == NONE) {
      st = s.status ? s.status : GRAFT_EINVAL;
      if (s.status) graft__trace_failf(t, st, "%s: %s: %s", what, which, s.msg);
      else
        graft__trace_failf(t, st, "%s: %s: output %d is %s (in trace '%s')", what, which, i,
                           outs[i] ? "not a value of this body or a trace around it" : "unset",
                           t->g->name);
    } else {
      g->outputs[i] = id;
    }
  }
  graft__trace_end(&s);
  graft__ptrmap_free(&cap.seen);
  graft__free(vals);
  if (!st && !(b->sub = graft__calloc(1, sizeof *b->sub)))
    st = graft_trace_fail(t, GRAFT_ENOMEM, "%s: %s: out of memory", what, which);
  if (st) {
    graft__free(cap.outer);
    graft__graph_destroy(g);
    return st;
  }
  b->sub->g = g;
  b->sub->n_explicit = n_in;
  b->sub->refs = 1;
  uint8_t *live = graft__malloc(g->n_nodes ? g->n_nodes : 1);
  if (live) graft__graph_prune(g, live);
  for (uint32_t id = 0; id < g->n_nodes; id++)
    if (!live || live[id]) b->sub->fallible |= graft__node_fallible(graft__graph_node(g, id));
  graft__free(live);
  b->captured = cap.outer;
  b->n_cap = (int)cap.n;
  return GRAFT_OK;
}

/* ---- the control node ----------------------------------------------------- */

/* The shape sub input j of sub k stands for, from the node's inputs
 * (dims of t's graph): a scan's x loses its leading axis. */
static void sub_input_shape(const graft__graph *g, const graft__ctl *c, const uint32_t *in, int k,
                            int j, graft__shape *sh) {
  int idx = c->map[k][j];
  graft__node_shape(graft__graph_node(g, in[idx]), sh);
  int x0 = c->has_len + c->n_carry;
  if (c->kind == GRAFT__CTL_SCAN && idx >= x0 && idx < x0 + c->n_xs) {
    if (c->x_blocked >> (idx - x0) & 1) { /* a block of rows */
      sh->dims[0] = c->x_block;
      return;
    }
    sh->rank--;
    memmove(sh->dims, sh->dims + 1, (size_t)sh->rank * sizeof *sh->dims);
  }
}

/* Output i of sub k with its dims in t's codes: a dim the body took from
 * an input maps back to that input's dim; a dim it derived is a new
 * symbol.  *known = 0 when some dim was new (checks wait for compile). */
static graft_status out_shape(graft_trace *t, const graft__ctl *c, const uint32_t *in, int k,
                              int i, graft__shape *sh, int *known) {
  const graft__graph *sg = c->sub[k]->g;
  const graft__node *o = graft__graph_node(sg, sg->outputs[i]);
  graft__node_shape(o, sh);
  *known = 1;
  for (int d = 0; d < sh->rank; d++) {
    int64_t dim = sh->dims[d];
    if (!GRAFT_DIM_IS_SYM(dim)) continue;
    const graft__sym *s = &sg->syms[-2 - dim];
    if (s->input >= 0) {
      graft__shape from;
      sub_input_shape(t->g, c, in, k, s->input, &from);
      sh->dims[d] = from.dims[s->dim];
    } else {
      *known = 0;
      if ((sh->dims[d] = graft__graph_new_sym(t->g, -1, 0)) == -1)
        return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
    }
  }
  return GRAFT_OK;
}


/* Refuse a differs from b (both known) naming output i and the parties. */
static graft_status agree(graft_trace *t, const graft__ctl *c, int i, const graft__shape *a,
                          int a_known, const char *a_is, const graft__shape *b, int b_known,
                          const char *b_is) {
  int rank_ok = a->rank == b->rank;
  int dims_ok = rank_ok && (!a_known || !b_known ||
                            !memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims));
  if (a->dtype == b->dtype && dims_ok) return GRAFT_OK;
  char x[200], y[200];
  return graft_trace_fail(t, a->dtype != b->dtype ? GRAFT_EDTYPE : GRAFT_ESHAPE,
                          "%s: output %d is %s %s but %s %s (they must agree in dtype and shape)",
                          c->name, i, graft__shape_text(x, sizeof x, a), a_is, graft__shape_text(y, sizeof y, b),
                          b_is);
}

/* The control node's inputs: prefix[0..n_prefix), then the captures of
 * every body, each once; fills c->map[k] past the explicit inputs (whose
 * entries the caller set) and moves the bodies' subgraphs into t's graph
 * (which keeps them from now on).  *in is graft__malloc'ed. */
static graft_status assemble(graft_trace *t, graft__ctl *c, int n_prefix, const uint32_t *prefix,
                             body *b, uint32_t **in_out, int *n_in_out) {
  graft__graph *g = t->g;
  int n_cap = 0;
  for (int k = 0; k < c->n_subs; k++) n_cap += b[k].n_cap;
  uint32_t *in = graft__malloc((size_t)(n_prefix + n_cap + 1) * sizeof *in);
  if (!in || graft__grow((void **)&g->subs, &g->cap_subs, g->n_subs + c->n_subs, sizeof *g->subs)) {
    graft__free(in);
    return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
  }
  for (int k = 0; k < c->n_subs; k++) {
    g->subs[g->n_subs++] = c->sub[k];
    b[k].sub = NULL;
  }
  int n_in = n_prefix;
  memcpy(in, prefix, (size_t)n_prefix * sizeof *in);
  for (int k = 0; k < c->n_subs; k++) {
    int ns = c->sub[k]->g->n_inputs, ne = c->sub[k]->n_explicit;
    int *map = graft__arena_alloc(&g->arena, (size_t)(ns + 1) * sizeof *map);
    if (!map) {
      graft__free(in);
      return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
    }
    memcpy(map, c->map[k], (size_t)ne * sizeof *map);
    for (int j = ne; j < ns; j++) {
      uint32_t id = b[k].captured[j - ne];
      int at = n_prefix;
      while (at < n_in && in[at] != id) at++;
      if (at == n_in) in[n_in++] = id;
      map[j] = at;
    }
    c->map[k] = map;
  }
  *in_out = in;
  *n_in_out = n_in;
  return GRAFT_OK;
}

/* Append the control node (op, a copy of c, inputs in[0..n_in)) and one
 * GET per output shaped outs[i]; vals[i] get the GETs' values. */
static graft_status append(graft_trace *t, int op, const graft__ctl *c, const uint32_t *in,
                           int n_in, const graft__shape *outs, graft_value **vals) {
  graft__graph *g = t->g;
  graft__ctl *cc = graft__arena_alloc(&g->arena, sizeof *cc);
  uint32_t *gets = graft__arena_alloc(&g->arena, (size_t)(c->n_out + 1) * sizeof *gets);
  graft__node *n = cc && gets ? graft__graph_add(g, op, n_in, in) : NULL;
  int64_t sym = n ? graft__graph_new_sym(g, -1, 0) : -1;
  if (!n || sym == -1) return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
  *cc = *c;
  cc->gets = gets;
  n->dtype = GRAFT_I32; /* 4-byte words: the packed outputs */
  n->rank = 1;
  n->shape[0] = sym;
  n->role = t->role;
  n->attr.ctl.ctl = cc;
  uint32_t cid = n->id;
  for (int i = 0; i < c->n_out; i++) {
    graft__node *o = graft__graph_add(g, GRAFT__OP_GET, 1, &cid);
    if (!o) return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
    o->dtype = (uint8_t)outs[i].dtype;
    o->rank = (uint8_t)outs[i].rank;
    memcpy(o->shape, outs[i].dims, sizeof o->shape);
    o->role = t->role;
    o->attr.get.index = i;
    gets[i] = o->id;
    vals[i] = graft__value(g, o->id);
  }
  return GRAFT_OK;
}

/* The shapes of the explicit inputs vals[0..n) of t, checked. */
static graft_status input_shapes(graft_trace *t, const char *what, const char *arg, int n,
                                 graft_value *const *vals, uint32_t *ids, graft__shape *sh) {
  for (int i = 0; i < n; i++) {
    graft__node *nd;
    switch (graft__trace_value(t, vals[i], &nd)) {
    case GRAFT__VALUE_NODE: break;
    case GRAFT__VALUE_FOREIGN: {
      uint32_t id = graft__capture_value(t, vals[i]);
      if (id != NONE) {
        nd = graft__graph_node(t->g, id);
        break;
      }
      if (t->status) return t->status;
    }
    /* fall through */
    default:
      return graft_trace_fail(t, vals[i] == GRAFT__POISON ? GRAFT_EMISUSE : GRAFT_EINVAL,
                              "%s: %s[%d] is %s", what, arg, i,
                              !vals[i] ? "NULL"
                              : vals[i] == GRAFT__POISON ? "the poison value of another trace"
                                                         : "a value of another trace, or of one that ended");
    }
    ids[i] = nd->id;
    graft__node_shape(nd, &sh[i]);
  }
  return GRAFT_OK;
}

static void poison_all(int n, graft_value **outs) {
  for (int i = 0; outs && i < n; i++) outs[i] = GRAFT__POISON;
}

/* Entry checks shared by the four: t usable, counts sane.  (The outs are
 * written last, on success, or poisoned on failure by the public entry:
 * they may be the ins' array.) */
static graft_status enter(graft_trace *t, const char *what, int n_out, graft_value **outs, int ok) {
  (void)n_out, (void)outs;
  if (!t) return GRAFT_EINVAL;
  if (t->status) return t->status;
  if (!ok) return graft_trace_fail(t, GRAFT_EINVAL, "%s: bad counts, NULL arrays or NULL callbacks", what);
  return GRAFT_OK;
}

/* Scratch for the explicit inputs: ids, shapes and the identity map. */
typedef struct explicit_in {
  uint32_t *ids;
  graft__shape *sh;
  int *map;
} explicit_in;

static graft_status explicit_alloc(graft_trace *t, const char *what, int n, explicit_in *e) {
  e->ids = graft__calloc((size_t)n + 1, sizeof *e->ids);
  e->sh = graft__calloc((size_t)n + 1, sizeof *e->sh);
  e->map = graft__calloc((size_t)n + 1, sizeof *e->map);
  if (e->ids && e->sh && e->map) return GRAFT_OK;
  graft__free(e->ids);
  graft__free(e->sh);
  graft__free(e->map);
  e->ids = NULL, e->sh = NULL, e->map = NULL;
  return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", what);
}

static void explicit_free(explicit_in *e) {
  graft__free(e->ids);
  graft__free(e->sh);
  graft__free(e->map);
}

/* A rank-0 predicate or length. */
static graft_status scalar_arg(graft_trace *t, const char *what, const char *arg,
                               const graft__shape *s) {
  if (s->rank == 0) return GRAFT_OK;
  char x[200];
  return graft_trace_fail(t, GRAFT_ESHAPE, "%s: %s is %s; it must be a scalar (rank 0)", what, arg,
                          graft__shape_text(x, sizeof x, s));
}

static graft_status cond_impl(graft_trace *t, graft_value *pred, int n_in, graft_value *const *ins,
                              graft_trace_fn then_fn, graft_trace_fn else_fn, void *user, int n_out,
                              graft_value **outs) {
  static const char *what = "cond";
  graft_status st = enter(t, what, n_out, outs,
                          n_in >= 0 && n_out >= 1 && (!n_in || ins) && outs && then_fn && else_fn);
  if (st) return st;
  explicit_in e;
  if ((st = explicit_alloc(t, what, 1 + n_in, &e))) return st;
  if ((st = input_shapes(t, what, "pred", 1, &pred, e.ids, e.sh)) ||
      (st = scalar_arg(t, what, "pred", &e.sh[0])) ||
      (st = input_shapes(t, what, "ins", n_in, ins, e.ids + 1, e.sh + 1))) {
    explicit_free(&e);
    return st;
  }
  for (int j = 0; j < n_in; j++) e.map[j] = 1 + j;
  graft__ctl c = {.kind = GRAFT__CTL_COND, .n_subs = 2, .n_out = n_out, .name = what};
  body b[2];
  memset(b, 0, sizeof b);
  static const char *const which[2] = {"then", "else"};
  graft_trace_fn fns[2] = {then_fn, else_fn};
  for (int k = 0; k < 2 && !st; k++) {
    st = trace_body(t, what, which[k], fns[k], user, n_in, e.sh + 1, n_out, &b[k]);
    c.sub[k] = b[k].sub;
    c.map[k] = e.map;
  }
  graft__shape *osh = graft__calloc((size_t)n_out, 2 * sizeof *osh);
  uint32_t *in = NULL;
  int n_node_in = 0;
  if (!st && !osh) st = graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", what);
  if (!st) st = assemble(t, &c, 1 + n_in, e.ids, b, &in, &n_node_in);
  for (int i = 0; i < n_out && !st; i++) {
    int k0, k1;
    if (!(st = out_shape(t, &c, in, 0, i, &osh[i], &k0)) &&
        !(st = out_shape(t, &c, in, 1, i, &osh[n_out + i], &k1)))
      st = agree(t, &c, i, &osh[i], k0, "in the then branch", &osh[n_out + i], k1,
                 "in the else branch");
  }
  if (!st) st = append(t, GRAFT__OP_COND, &c, in, n_node_in, osh, outs);
  for (int k = 0; k < 2; k++) body_free(&b[k]);
  graft__free(in);
  graft__free(osh);
  explicit_free(&e);
  return t->status;
}

/* Check body output i (sub k) against the shape it must have. */
static graft_status must_be(graft_trace *t, const graft__ctl *c, const uint32_t *in, int k, int i,
                            const graft__shape *want, const char *want_is, const char *got_is) {
  graft__shape got;
  int known;
  graft_status st = out_shape(t, c, in, k, i, &got, &known);
  return st ? st : agree(t, c, i, &got, known, got_is, want, 1, want_is);
}

static graft_status while_impl(graft_trace *t, graft_trace_fn cond_fn, graft_trace_fn body_fn,
                               void *user, int n_vars, graft_value *const *init, graft_value **outs,
                               const graft_while_opts *opts) {
  static const char *what = "while_loop";
  graft_status st = enter(t, what, n_vars, outs, n_vars >= 1 && init && outs && cond_fn && body_fn);
  if (st) return st;
  if (opts && opts->max_iters < 0)
    return graft_trace_fail(t, GRAFT_EINVAL, "%s: max_iters is %lld (expected >= 0; 0 = unbounded)",
                            what, (long long)opts->max_iters);
  explicit_in e;
  if ((st = explicit_alloc(t, what, n_vars, &e))) return st;
  if ((st = input_shapes(t, what, "init", n_vars, init, e.ids, e.sh))) {
    explicit_free(&e);
    return st;
  }
  for (int j = 0; j < n_vars; j++) e.map[j] = j;
  graft__ctl c = {.kind = GRAFT__CTL_WHILE, .n_subs = 2, .n_carry = n_vars, .n_out = n_vars,
                  .max_iters = opts ? opts->max_iters : 0, .name = what};
  body b[2];
  memset(b, 0, sizeof b);
  st = trace_body(t, what, "cond", cond_fn, user, n_vars, e.sh, 1, &b[0]);
  if (!st) st = trace_body(t, what, "body", body_fn, user, n_vars, e.sh, n_vars, &b[1]);
  c.sub[0] = b[0].sub, c.sub[1] = b[1].sub;
  c.map[0] = c.map[1] = e.map;
  uint32_t *in = NULL;
  int n_in = 0;
  if (!st) st = assemble(t, &c, n_vars, e.ids, b, &in, &n_in);
  if (!st) {
    graft__shape p;
    int known;
    if (!(st = out_shape(t, &c, in, 0, 0, &p, &known)) && p.rank != 0)
      st = scalar_arg(t, what, "the cond callback's output", &p);
  }
  for (int i = 0; i < n_vars && !st; i++)
    st = must_be(t, &c, in, 1, i, &e.sh[i], "in init", "from the body");
  if (!st) st = append(t, GRAFT__OP_WHILE, &c, in, n_in, e.sh, outs);
  for (int k = 0; k < 2; k++) body_free(&b[k]);
  graft__free(in);
  explicit_free(&e);
  return t->status;
}

static graft_status scan_impl(graft_trace *t, graft_trace_fn body_fn, void *user, int n_carry,
                              graft_value *const *init, int n_xs, graft_value *const *xs, int n_ys,
                              graft_value **outs, const graft_scan_opts *opts, graft_value *len,
                              const graft__scan_blocks *blk) {
  static const char *what = "scan";
  int n_out = n_carry + n_ys;
  graft_status st = enter(t, what, n_out, outs,
                          n_carry >= 0 && n_xs >= 1 && n_ys >= 0 && n_out >= 1 && xs && outs &&
                              (!n_carry || init) && body_fn);
  if (st) return st;
  if (opts && opts->checkpoint < 0)
    return graft_trace_fail(t, GRAFT_EINVAL, "%s: checkpoint is %lld (expected >= 0)", what,
                            (long long)opts->checkpoint);
  int pre = len != NULL, n_args = pre + n_carry + n_xs;
  explicit_in e;
  if ((st = explicit_alloc(t, what, n_args, &e))) return st;
  if ((len && ((st = input_shapes(t, what, "len", 1, &len, e.ids, e.sh)) ||
               (st = scalar_arg(t, what, "len", &e.sh[0])))) ||
      (st = input_shapes(t, what, "init", n_carry, init, e.ids + pre, e.sh + pre)) ||
      (st = input_shapes(t, what, "xs", n_xs, xs, e.ids + pre + n_carry, e.sh + pre + n_carry))) {
    explicit_free(&e);
    return st;
  }
  graft__shape *x = e.sh + pre + n_carry;
  graft__ctl c = {.kind = GRAFT__CTL_SCAN, .n_subs = 1, .n_carry = n_carry, .n_xs = n_xs,
                  .n_ys = n_ys, .n_out = n_out, .has_len = pre, .name = what,
                  .reverse = opts ? opts->reverse != 0 : 0, .checkpoint = opts ? opts->checkpoint : 0,
                  .x_block = blk ? blk->k : 0, .x_blocked = blk ? blk->mask : 0};
  int64_t T = x[0].rank ? graft__scan_steps(&c, 0, x[0].dims[0]) : 0;
  for (int i = 0; i < n_xs && !st; i++) {
    char a[200], b0[200];
    if (x[i].rank < 1)
      st = graft_trace_fail(t, GRAFT_ESHAPE, "%s: xs[%d] is %s; an x needs a leading axis to scan",
                            what, i, graft__shape_text(a, sizeof a, &x[i]));
    else if ((c.x_blocked >> i & 1) && GRAFT_DIM_IS_SYM(x[i].dims[0]))
      st = graft_trace_fail(t, GRAFT_EINTERNAL, "%s: xs[%d] read in blocks needs a known length", what, i);
    else if (graft__scan_steps(&c, i, x[i].dims[0]) != T && !GRAFT_DIM_IS_SYM(x[i].dims[0]) &&
             !GRAFT_DIM_IS_SYM(T))
      st = graft_trace_fail(t, GRAFT_ESHAPE,
                            "%s: xs[%d] is %s but xs[0] is %s (every x needs the same leading length)",
                            what, i, graft__shape_text(a, sizeof a, &x[i]), graft__shape_text(b0, sizeof b0, &x[0]));
  }
  if (!st && len && e.sh[0].dtype != GRAFT_I32)
    st = graft_trace_fail(t, GRAFT_EDTYPE, "%s: len must be i32", what);
  if (st) {
    explicit_free(&e);
    return st;
  }
  /* the body's inputs: the carries, then each x without its leading axis */
  graft__shape *like = graft__calloc((size_t)(n_carry + n_xs) + 1, sizeof *like);
  graft__shape *osh = graft__calloc((size_t)n_out + 1, sizeof *osh);
  if (!like || !osh) {
    graft__free(like);
    graft__free(osh);
    explicit_free(&e);
    return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", what);
  }
  for (int j = 0; j < n_carry + n_xs; j++) {
    like[j] = e.sh[pre + j];
    if (j >= n_carry && (c.x_blocked >> (j - n_carry) & 1)) {
      like[j].dims[0] = c.x_block;
    } else if (j >= n_carry) {
      like[j].rank--;
      memmove(like[j].dims, like[j].dims + 1, (size_t)like[j].rank * sizeof *like[j].dims);
    }
    e.map[j] = pre + j;
  }
  body b;
  st = trace_body(t, what, "body", body_fn, user, n_carry + n_xs, like, n_out, &b);
  c.sub[0] = b.sub;
  c.map[0] = e.map;
  uint32_t *in = NULL;
  int n_in = 0;
  if (!st) st = assemble(t, &c, n_args, e.ids, &b, &in, &n_in);
  for (int i = 0; i < n_carry && !st; i++) {
    osh[i] = e.sh[pre + i];
    st = must_be(t, &c, in, 0, i, &osh[i], "in init", "from the body");
  }
  for (int i = 0; i < n_ys && !st; i++) {
    graft__shape *y = &osh[n_carry + i];
    int known;
    if ((st = out_shape(t, &c, in, 0, n_carry + i, y, &known))) break;
    if (y->rank == GRAFT_MAX_RANK) {
      char a[200];
      st = graft_trace_fail(t, GRAFT_ESHAPE, "%s: y %d is %s; stacked it would exceed rank %d",
                            what, i, graft__shape_text(a, sizeof a, y), GRAFT_MAX_RANK);
      break;
    }
    memmove(y->dims + 1, y->dims, (size_t)y->rank * sizeof *y->dims);
    y->dims[0] = T;
    y->rank++;
  }
  if (!st) st = append(t, GRAFT__OP_SCAN, &c, in, n_in, osh, outs);
  body_free(&b);
  graft__free(in);
  graft__free(like);
  graft__free(osh);
  explicit_free(&e);
  return t->status;
}


static graft_status remat_impl(graft_trace *t, graft_trace_fn fn, void *user, int n_in,
                               graft_value *const *ins, int n_out, graft_value **outs) {
  static const char *what = "remat";
  graft_status st = enter(t, what, n_out, outs, n_in >= 0 && n_out >= 1 && (!n_in || ins) && outs && fn);
  if (st) return st;
  explicit_in e;
  if ((st = explicit_alloc(t, what, n_in, &e))) return st;
  if ((st = input_shapes(t, what, "ins", n_in, ins, e.ids, e.sh))) {
    explicit_free(&e);
    return st;
  }
  for (int j = 0; j < n_in; j++) e.map[j] = j;
  graft__ctl c = {.kind = GRAFT__CTL_REMAT, .n_subs = 1, .n_out = n_out, .name = what};
  body b;
  graft__shape *osh = graft__calloc((size_t)n_out, sizeof *osh);
  st = osh ? trace_body(t, what, "body", fn, user, n_in, e.sh, n_out, &b)
           : graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", what);
  if (!osh) memset(&b, 0, sizeof b);
  c.sub[0] = b.sub;
  c.map[0] = e.map;
  uint32_t *in = NULL;
  int n_node_in = 0;
  if (!st) st = assemble(t, &c, n_in, e.ids, &b, &in, &n_node_in);
  for (int i = 0; i < n_out && !st; i++) {
    int known;
    st = out_shape(t, &c, in, 0, i, &osh[i], &known);
  }
  if (!st) st = append(t, GRAFT__OP_REMAT, &c, in, n_node_in, osh, outs);
  body_free(&b);
  graft__free(in);
  graft__free(osh);
  explicit_free(&e);
  return t->status;
}

/* The public entries: outs poisoned on failure (written on success). */
static graft_status finish(graft_status st, int n_out, graft_value **outs) {
  if (st && outs && n_out > 0) poison_all(n_out, outs);
  return st;
}

GRAFT_API graft_status graft_cond(graft_trace *t, graft_value *pred, int n_in,
                                  graft_value *const *ins, graft_trace_fn then_fn,
                                  graft_trace_fn else_fn, void *user, int n_out,
                                  graft_value **outs) {
  return finish(cond_impl(t, pred, n_in, ins, then_fn, else_fn, user, n_out, outs), n_out, outs);
}

GRAFT_API graft_status graft_while_loop(graft_trace *t, graft_trace_fn cond_fn,
                                        graft_trace_fn body_fn, void *user, int n_vars,
                                        graft_value *const *init, graft_value **outs,
                                        const graft_while_opts *opts) {
  return finish(while_impl(t, cond_fn, body_fn, user, n_vars, init, outs, opts), n_vars, outs);
}

graft_status graft__scan_ext(graft_trace *t, graft_trace_fn body_fn, void *user, int n_carry,
                             graft_value *const *init, int n_xs, graft_value *const *xs, int n_ys,
                             graft_value **outs, const graft_scan_opts *opts, graft_value *len,
                             const graft__scan_blocks *blk) {
  return finish(scan_impl(t, body_fn, user, n_carry, init, n_xs, xs, n_ys, outs, opts, len, blk),
                n_carry + n_ys, outs);
}

GRAFT_API graft_status graft_scan(graft_trace *t, graft_trace_fn body_fn, void *user, int n_carry,
                                  graft_value *const *init, int n_xs, graft_value *const *xs,
                                  int n_ys, graft_value **outs, const graft_scan_opts *opts) {
  return graft__scan_ext(t, body_fn, user, n_carry, init, n_xs, xs, n_ys, outs, opts, NULL, NULL);
}

GRAFT_API graft_status graft_remat(graft_trace *t, graft_trace_fn fn, void *user, int n_in,
                                   graft_value *const *ins, int n_out, graft_value **outs) {
  return finish(remat_impl(t, fn, user, n_in, ins, n_out, outs), n_out, outs);
}

/* ---- saved carries (for reverse mode) -------------------------------------- */

graft_status graft__ctl_save(graft_trace *t, uint32_t id, uint32_t *first_out) {
  graft__graph *g = t->g;
  graft__node *n = graft__graph_node(g, id);
  graft__ctl *c = n->attr.ctl.ctl;
  if (!c->save) {
    uint32_t first = g->n_nodes;
    int64_t T = 0;
    if (c->kind == GRAFT__CTL_SCAN) {
      T = graft__scan_steps(c, 0, graft__graph_node(g, n->in[c->has_len + c->n_carry])->shape[0]);
      /* checkpoints need the length now (the blocks are built at trace
       * time) and room for a block axis; without them every carry is kept */
      if (c->checkpoint > 1 && (GRAFT_DIM_IS_SYM(T) || c->has_len)) c->checkpoint = 0;
      for (int i = 0; i < c->n_xs + c->n_ys; i++) { /* blocks add an axis */
        uint32_t v = i < c->n_xs ? n->in[c->has_len + c->n_carry + i] : c->gets[c->n_carry + i - c->n_xs];
        if (graft__graph_node(g, v)->rank == GRAFT_MAX_RANK) c->checkpoint = 0;
      }
    }
    int n_saved = graft__ctl_saved(c), nc = c->n_carry;
    for (int i = 0; i < n_saved; i++) {
      graft__node *o = graft__graph_add(g, GRAFT__OP_GET, 1, &id);
      if (!o) return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c->name);
      o->role = t->role;
      o->attr.get.index = c->n_out + i;
      if (c->kind == GRAFT__CTL_WHILE && i == n_saved - 1) { /* the iteration count */
        o->dtype = GRAFT_I32;
        o->rank = 0;
        continue;
      }
      const graft__node *v = graft__graph_node(g, c->gets[i % nc]); /* the carry's shape */
      if (v->rank == GRAFT_MAX_RANK)
        return graft_trace_fail(t, GRAFT_EUNSUPPORTED,
                                "%s: reverse mode saves carry %d stacked, past rank %d", c->name, i,
                                GRAFT_MAX_RANK);
      o->dtype = v->dtype;
      o->rank = (uint8_t)(v->rank + 1);
      memcpy(o->shape + 1, v->shape, (size_t)v->rank * sizeof *v->shape);
      o->shape[0] = c->kind == GRAFT__CTL_WHILE ? c->max_iters
                    : c->checkpoint > 1           ? (T + c->checkpoint - 1) / c->checkpoint
                                                  : T;
    }
    c->save = 1;
    c->save_get = first;
  }
  *first_out = c->save_get;
  return GRAFT_OK;
}

/* ---- replay ---------------------------------------------------------------- */

graft_status graft__ctl_replay(graft_trace *t, const graft__node *n, graft_value *const *in,
                               uint32_t *id_out) {
  graft__graph *g = t->g;
  graft__ctl c = *n->attr.ctl.ctl;
  c.save = 0;
  c.save_get = 0;
  uint32_t *ids = graft__malloc((size_t)(n->n_in + 1) * sizeof *ids);
  graft__shape *osh = graft__calloc((size_t)c.n_out + 1, sizeof *osh);
  graft_status st = GRAFT_OK;
  if (!ids || !osh ||
      graft__grow((void **)&g->subs, &g->cap_subs, g->n_subs + c.n_subs, sizeof *g->subs))
    st = graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c.name);
  for (int j = 0; j < n->n_in && !st; j++) {
    const graft__node *v = graft__trace_node(t, in[j]);
    if (!v) st = graft_trace_fail(t, GRAFT_EINTERNAL, "%s: replay lost input %d", c.name, j);
    else ids[j] = v->id;
  }
  for (int k = 0; k < c.n_subs && !st; k++) {
    int ns = c.sub[k]->g->n_inputs;
    int *map = graft__arena_alloc(&g->arena, (size_t)(ns + 1) * sizeof *map);
    if (!map) {
      st = graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c.name);
      break;
    }
    memcpy(map, c.map[k], (size_t)ns * sizeof *map);
    c.map[k] = map;
    graft__sub_ref(c.sub[k]);
    g->subs[g->n_subs++] = c.sub[k];
  }
  /* the outputs' shapes, in t's dims */
  int known;
  for (int i = 0; i < c.n_out && !st; i++) {
    switch (c.kind) {
    case GRAFT__CTL_WHILE: graft__node_shape(graft__graph_node(g, ids[i]), &osh[i]); break;
    case GRAFT__CTL_SCAN:
      if (i < c.n_carry) {
        graft__node_shape(graft__graph_node(g, ids[c.has_len + i]), &osh[i]);
        break;
      }
      if ((st = out_shape(t, &c, ids, 0, i, &osh[i], &known))) break;
      memmove(osh[i].dims + 1, osh[i].dims, (size_t)osh[i].rank * sizeof *osh[i].dims);
      osh[i].dims[0] = graft__scan_steps(&c, 0, graft__graph_node(g, ids[c.has_len + c.n_carry])->shape[0]);
      osh[i].rank++;
      break;
    default: st = out_shape(t, &c, ids, 0, i, &osh[i], &known); break;
    }
  }
  static const int ops[] = {[GRAFT__CTL_COND] = GRAFT__OP_COND, [GRAFT__CTL_WHILE] = GRAFT__OP_WHILE,
                            [GRAFT__CTL_SCAN] = GRAFT__OP_SCAN, [GRAFT__CTL_REMAT] = GRAFT__OP_REMAT};
  graft_value **vals = st ? NULL : graft__calloc((size_t)c.n_out, sizeof *vals);
  if (!st && !vals) st = graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", c.name);
  if (!st && !(st = append(t, ops[c.kind], &c, ids, n->n_in, osh, vals)))
    *id_out = graft__value_id(vals[0]) - 1; /* the node precedes its GETs */
  graft__free(vals);
  graft__free(ids);
  graft__free(osh);
  return st;
}
