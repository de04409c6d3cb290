/* Replay: re-emit a traced body (graft__sub) into another trace, on new
 * inputs.  The gradient rules of control flow use it: a body's backward is
 * its forward replayed on the saved inputs, then graft_gradients (or
 * graft_jvp) over the copy, all inside a new body.
 *
 * Each live node is emitted again through the ordinary constructors' path
 * (graft__emit_like: shape rules, checks, captures), so the copy is a
 * trace like any other.  Symbols: the body's symbols that stand for an
 * input's dim become that dim of the new input; the ones it derived become
 * new symbols of t.  The attributes that hold dims (targets, slices, conv
 * geometry) are translated the same way. */
#include <string.h>

#include "graph/graph.h"

typedef struct replay {
  graft_trace *t;
  const graft__graph *g;
  int64_t *sym;                /* per body symbol: its code in t, 0 = not yet */
  graft_value *const *in;
} replay;

static graft_status dim_code(replay *r, int64_t d, int64_t *out) {
  if (!GRAFT_DIM_IS_SYM(d)) {
    *out = d;
    return GRAFT_OK;
  }
  int64_t k = -2 - d;
  if (!r->sym[k]) {
    const graft__sym *s = &r->g->syms[k];
    if (s->input >= 0) {
      r->sym[k] = graft_value_shape(r->in[s->input])[s->dim];
    } else if ((r->sym[k] = graft__graph_new_sym(r->t->g, -1, 0)) == -1) {
      r->sym[k] = 0;
      return graft_trace_fail(r->t, GRAFT_ENOMEM, "replaying '%s': out of memory", r->g->name);
    }
  }
  *out = r->sym[k];
  return GRAFT_OK;
}

static graft_status dims_code(replay *r, int n, int64_t *dims) {
  for (int i = 0; i < n; i++) {
    graft_status st = dim_code(r, dims[i], &dims[i]);
    if (st) return st;
  }
  return GRAFT_OK;
}

/* n's attributes with their dims in t's codes. */
static graft_status translate(replay *r, const graft__node *n, graft__attr *a) {
  *a = n->attr;
  switch (n->op) {
  case GRAFT__OP_RESHAPE:
  case GRAFT__OP_BROADCAST_TO:
  case GRAFT__OP_SUM_TO_SHAPE:
  case GRAFT__OP_FILL: return dims_code(r, a->target.rank, a->target.dims);
  case GRAFT__OP_SLICE:
  case GRAFT__OP_PAD: {
    graft_status st = dims_code(r, GRAFT_MAX_RANK, a->slice.begin);
    return st ? st : dims_code(r, GRAFT_MAX_RANK, a->slice.size);
  }
  case GRAFT__OP_CONV2D:
  case GRAFT__OP_CONV2D_W:
  case GRAFT__OP_CONV2D_X:
  case GRAFT__OP_IM2COL:
  case GRAFT__OP_COL2IM:
  case GRAFT__OP_MAX_POOL2D:
  case GRAFT__OP_MAX_POOL2D_GRAD:
  case GRAFT__OP_MAX_POOL2D_SELECT: return dims_code(r, 4, a->conv.x);
  default: return GRAFT_OK;
  }
}

graft_status graft__replay(graft_trace *t, const graft__sub *s, graft_value *const *in,
                           graft_value **outs) {
  if (t->status) return t->status;
  const graft__graph *g = s->g;
  uint32_t n = g->n_nodes;
  replay r = {t, g, graft__calloc((size_t)(g->n_syms ? g->n_syms : 1), sizeof *r.sym), in};
  uint8_t *live = graft__malloc(n ? n : 1);
  graft_value **val = graft__calloc(n ? n : 1, sizeof *val);
  uint32_t *ctl_new = graft__calloc(n ? n : 1, sizeof *ctl_new); /* old control id -> new */
  graft_value *few[16], **ins = few;
  int max_in = 0;
  for (uint32_t id = 0; id < n; id++) max_in = GRAFT__MAX(max_in, graft__graph_node(g, id)->n_in);
  if (max_in > 16) ins = graft__malloc((size_t)max_in * sizeof *ins);
  graft__graph *tg = t->g;
  if (!r.sym || !live || !val || !ctl_new || !ins ||
      graft__grow((void **)&tg->subs, &tg->cap_subs, tg->n_subs + 1, sizeof *tg->subs)) {
    graft_trace_fail(t, GRAFT_ENOMEM, "replaying '%s': out of memory", g->name);
    goto out;
  }
  /* t's graph keeps the body: its constants and custom rules stay valid */
  graft__sub_ref((graft__sub *)s);
  tg->subs[tg->n_subs++] = (graft__sub *)s;
  graft__graph_prune(g, live);
  for (uint32_t id = 0; id < n && !t->status; id++) {
    if (!live[id]) continue;
    const graft__node *nd = graft__graph_node(g, id);
    if (nd->op == GRAFT__OP_INPUT) {
      val[id] = in[nd->attr.input.index];
      continue;
    }
    if (nd->op == GRAFT__OP_GET) {
      uint32_t c = ctl_new[nd->in[0]];
      const graft__ctl *cc = graft__graph_node(tg, c)->attr.ctl.ctl;
      int i = nd->attr.get.index;
      if (i < cc->n_out) {
        val[id] = graft__value(tg, cc->gets[i]);
      } else {
        uint32_t first;
        if (!graft__ctl_save(t, c, &first)) val[id] = graft__value(tg, first + (uint32_t)(i - cc->n_out));
      }
      continue;
    }
    for (int j = 0; j < nd->n_in; j++) ins[j] = val[nd->in[j]];
    if (graft__ops[nd->op].flags & GRAFT__OPF_CONTROL) {
      graft__ctl_replay(t, nd, ins, &ctl_new[id]);
      continue;
    }
    graft__attr a;
    int64_t shape[GRAFT_MAX_RANK];
    memcpy(shape, nd->shape, sizeof shape);
    if (translate(&r, nd, &a) || dims_code(&r, nd->rank, shape)) break;
    val[id] = graft__emit_like(t, nd, &a, shape, ins);
  }
  for (int i = 0; i < g->n_outputs && !t->status; i++) outs[i] = val[g->outputs[i]];
out:
  if (ins != few) graft__free(ins);
  graft__free(r.sym);
  graft__free(live);
  graft__free(val);
  graft__free(ctl_new);
  return t->status;
}
