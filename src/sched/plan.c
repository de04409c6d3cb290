/* Compile a graph for one concrete signature: prune, bind symbols, infer
 * concrete shapes, lay out the arena (one slot per intermediate value until
 * the memory planner lands), prepare kernel arguments. */
#include <stdlib.h>
#include <string.h>

#include "sched/sched.h"

#define NO_SLOT SIZE_MAX

static void unlink_plan(graft__plan *p);

void graft__plan_destroy(graft__plan *p) {
  if (!p) return;
  graft__free(p->live);
  graft__free(p->order);
  graft__free(p->views);
  graft__free(p->shapes);
  graft__free(p->vslot);
  graft__free(p->in_ptrs);
  graft__free(p->kargs);
  graft__free(p->var_reads);
  graft__free(p->assigns);
  graft__free(p->assign_direct);
  graft__free(p->upd_dst);
  graft__free(p->unstaged);
  graft__free(p->fallback);
  graft__free(p->war);
  graft__free(p->binding);
  graft__free(p->offset);
  if (!p->arena_borrowed) graft__free(p->arena);
  graft__free(p->ctl_arena);
  graft__free(p->alias);
  graft__coll_destroy(p->coll);
  unlink_plan(p);
  graft__free(p->work);
  graft__free(p->tiling);
  graft__free(p->scratch);
  graft__free(p->scratch_off);
  graft__free(p->scratch_per);
  graft__free(p->part);
  graft__free(p->sources);
  graft__free(p->src_off);
  graft__exec_state_destroy(p->ws);
  if (p->ctl) {
    for (uint32_t id = 0; id < p->g->n_nodes; id++) graft__ctl_exec_destroy(p->ctl[id]);
    graft__free(p->ctl);
  }
  if (p->fg) {
    for (int64_t c = 0; c < p->fg->n_chunks; c++)
      if (p->fg_own[c]) graft__free(p->fg->chunks[c]);
    graft__free(p->fg->chunks);
    graft__arena_free(&p->fg->arena);
    graft__free(p->fg);
  }
  graft__free(p->fg_own);
  graft__fused_release(p->fused_code, p->fused_code_len);
  graft__free(p->fused);
  graft__free(p->fused_in);
  graft__free(p);
}

graft__node *graft__plan_writable(graft__plan *p, uint32_t id) {
  const graft__graph *g = p->fg ? p->fg : p->g;
  if (!p->fg) {
    size_t nc = (size_t)(g->n_chunks ? g->n_chunks : 1);
    graft__graph *fg = graft__malloc(sizeof *fg);
    graft__node **chunks = graft__malloc(nc * sizeof *chunks);
    p->fg_own = graft__calloc(nc, 1);
    if (!fg || !chunks || !p->fg_own) {
      graft__free(fg);
      graft__free(chunks);
      return NULL;
    }
    *fg = *g;
    memcpy(chunks, g->chunks, (size_t)g->n_chunks * sizeof *chunks);
    fg->chunks = chunks;
    fg->cap_chunks = g->n_chunks;
    fg->arena = (graft__arena){0}; /* the copy's own: new input lists */
    p->fg = fg; /* plan destroy frees what it owns from here on */
    p->g = fg;
  }
  uint32_t ch = id >> GRAFT__CHUNK_BITS;
  if (!p->fg_own[ch]) {
    graft__node *copy = graft__aligned_alloc(GRAFT__CHUNK * sizeof *copy, GRAFT__ALIGN);
    if (!copy) return NULL;
    memcpy(copy, p->fg->chunks[ch], GRAFT__CHUNK * sizeof *copy);
    p->fg->chunks[ch] = copy;
    p->fg_own[ch] = 1;
  }
  return graft__graph_node(p->fg, id);
}

int graft__plan_runs_alone(const graft__plan *p, int64_t grain) {
  if (p->n_tasks <= 1 || p->stats.work <= grain) return 1;
  if (p->n_tasks != (int64_t)p->n_order) return 0;
  for (uint32_t i = 0; i + 1 < p->n_order; i++) {
    int linked = 0;
    for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1] && !linked; e++)
      linked = p->succ[e] == i + 1;
    if (!linked) return 0;
  }
  return 1;
}

static void compile_fail(const graft__graph *g, uint32_t id, const char *reason, char *msg) {
  const graft__node *n = graft__graph_node(g, id);
  graft__msgf(msg, "%s: %s (op #%u in trace '%s')", graft__ops[n->op].name, reason, id, g->name);
}

/* Concrete shapes of every node, binding symbols on the way.  Nodes that
 * pruning removed may fail without failing the call. */
static graft_status infer_all(graft__plan *p, const int64_t *const *in, char *msg) {
  const graft__graph *g = p->g;
  graft__shape_ctx c = {p->binding, NULL, {0}, graft__ctl_shape, p};
  uint8_t *ok = graft__calloc(g->n_nodes ? g->n_nodes : 1, 1);
  int max_in = 1;
  for (uint32_t id = 0; id < g->n_nodes; id++)
    max_in = GRAFT__MAX(max_in, graft__graph_node(g, id)->n_in);
  graft__shape *ins = graft__malloc((size_t)max_in * sizeof *ins); /* concat: any count */
  if (!ok || !ins) {
    graft__free(ok);
    graft__free(ins);
    graft__msgf(msg, "out of memory compiling trace '%s'", g->name);
    return GRAFT_ENOMEM;
  }
  graft_status st = GRAFT_OK;
  int64_t total = 0; /* slot bytes of the live compute values, no reuse */
  for (int i = 0; i < g->n_inputs && !st; i++) {
    uint32_t id = g->inputs[i];
    const graft__node *n = graft__graph_node(g, id);
    st = graft__shape_unify(&c, n->rank, n->shape, in[i]);
    if (st) {
      graft__msgf(msg, "input %d: %s (in trace '%s')", i, c.msg, g->name);
      goto out;
    }
  }
  for (uint32_t id = 0; id < g->n_nodes; id++) {
    const graft__node *n = graft__graph_node(g, id);
    graft__shape o;
    int skip = 0;
    for (int k = 0; k < n->n_in && !skip; k++) {
      if (!ok[n->in[k]]) skip = 1;
    }
    if (skip) { /* an input failed (only possible off the live set) */
      if (p->live[id]) {
        st = GRAFT_EINTERNAL;
        compile_fail(g, id, "input shape unknown", msg);
        goto out;
      }
      continue;
    }
    for (int k = 0; k < n->n_in; k++) {
      const graft__tview *v = graft__plan_view(p, n->in[k]);
      ins[k].dtype = v->dtype;
      ins[k].rank = v->rank;
      memcpy(ins[k].dims, v->shape, sizeof ins[k].dims);
    }
    st = graft__shape_infer(&c, n, ins, &o);
    if (!st) st = graft__shape_unify(&c, o.rank, n->shape, o.dims);
    if (st) {
      if (!p->live[id]) {
        st = GRAFT_OK;
        continue;
      }
      compile_fail(g, id, c.msg, msg);
      goto out;
    }
    graft__tview *v = graft__plan_view(p, id);
    int64_t *dims = p->shapes + (size_t)id * GRAFT_MAX_RANK;
    v->dtype = o.dtype;
    v->rank = o.rank;
    memcpy(dims, o.dims, GRAFT_MAX_RANK * sizeof *dims);
    v->shape = dims;
    /* Symbols bound to call sizes make sizes the trace could not check;
     * the live compute values' slots, summed, bound every sum the memory
     * planner forms. */
    char why[GRAFT__MSG_LEN];
    int64_t bytes;
    st = graft__size_check(o.rank, o.dims, o.dtype, &v->numel, &bytes, why, sizeof why);
    if (!st && p->live[id] && !(graft__ops[n->op].flags & GRAFT__OPF_EXTERNAL) &&
        (graft__size_add(total, graft__slot_bytes(bytes, 0), &total) ||
         total > GRAFT__MAX_PLAN_BYTES)) {
      st = GRAFT_ENOMEM;
      char shape[160];
      graft__shape_str(shape, sizeof shape, o.rank, o.dims);
      snprintf(why, sizeof why, "%s%s brings the plan's values past 2^%d bytes in all",
               graft_dtype_name(o.dtype), shape, GRAFT__MAX_PLAN_BYTES_LOG2);
    }
    if (st && !p->live[id]) {
      st = GRAFT_OK;
      continue;
    }
    if (st) {
      char full[GRAFT__MSG_LEN + 8];
      snprintf(full, sizeof full, "output %s", why);
      compile_fail(g, id, full, msg);
      goto out;
    }
    ok[id] = 1;
  }
out:
  graft__free(ok);
  graft__free(ins);
  return st;
}

/* The compute nodes in topological order (the trace's), the variables read
 * and the assigns.  Kernel arguments wait for the final order (args). */
static graft_status layout(graft__plan *p) {
  const graft__graph *g = p->g;
  for (uint32_t id = 0; id < g->n_nodes; id++) {
    p->offset[id] = NO_SLOT;
    const graft__node *n = graft__graph_node(g, id);
    if (!p->live[id] || (graft__ops[n->op].flags & GRAFT__OPF_EXTERNAL)) continue;
    p->order[p->n_order++] = id;
    if (graft__node_fallible(n)) p->fallible = 1;
  }
  p->var_reads = graft__malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *p->var_reads);
  p->assigns = graft__malloc((size_t)(p->n_order ? p->n_order : 1) * sizeof *p->assigns);
  if (!p->var_reads || !p->assigns) return GRAFT_ENOMEM;
  /* Calls bind and commit these without walking the graph. */
  for (uint32_t id = 0; id < g->n_nodes; id++) {
    const graft__node *n = graft__graph_node(g, id);
    if (p->live[id] && n->op == GRAFT__OP_VAR_READ) p->var_reads[p->n_var_reads++] = id;
    /* assigns and optimizer steps: the nodes that write variables */
    if (p->live[id] && (graft__ops[n->op].flags & GRAFT__OPF_SIDE_EFFECT))
      p->assigns[p->n_assigns++] = id;
  }
  return GRAFT_OK;
}


static void unlink_plan(graft__plan *p) {
  graft__free(p->succ_off);
  graft__free(p->succ);
  graft__free(p->succ_multi);
  graft__free(p->pred_off);
  graft__free(p->pred);
  graft__free(p->npred);
  p->succ_off = p->succ = p->succ_multi = p->pred_off = p->pred = NULL;
  p->npred = NULL;
}

static graft_status link(graft__plan *p);

static int by_assign(const void *a, const void *b) {
  const uint32_t *x = a, *y = b;
  return x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : x[0] < y[0] ? -1 : x[0] > y[0];
}

/* (variable, order position or index) pairs, sorted by variable then the
 * second field: the readers of each variable, the assigns to it, the
 * variables read as outputs. */
typedef struct var_at {
  uintptr_t var;
  uint32_t at;
} var_at;

static int by_var_at(const void *a, const void *b) {
  const var_at *x = a, *y = b;
  if (x->var != y->var) return x->var < y->var ? -1 : 1;
  return x->at < y->at ? -1 : x->at > y->at;
}

/* The first entry for var in the sorted list (or len). */
static uint32_t var_first(const var_at *l, uint32_t len, uintptr_t var) {
  uint32_t lo = 0, hi = len;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (l[mid].var < var) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Walks of the graph (node visits) the search for direct assigns may make
 * in all; past them the remaining assigns stay staged. */
#define DIRECT_ASSIGN_WORK 50000000

/* Ordering edges from ops that may fail on data to direct assigns, in all;
 * past them the remaining assigns stay staged. */
#define FALLIBLE_EDGES 65536

/* A plan with MPI collectives: every ALLREDUCE_TAKE that the graph's last
 * ALLREDUCE does not depend on waits for that ALLREDUCE to be posted (war
 * pairs: ordering edges).  A worker reaching a bucket's TAKE then finds
 * the rest of the backward pass done, not waiting to be run: a lone worker
 * (which walks depth first, so would meet bucket 0's TAKEs right after
 * posting it) and a team alike spend the exchange computing, and only
 * block once nothing else is left.  Needs the first link. */
static graft_status take_late(graft__plan *p) {
  const graft__graph *g = p->g;
  uint32_t n = p->n_order, last = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++)
    if (graft__graph_node(g, p->order[i])->op == GRAFT__OP_ALLREDUCE) last = i;
  if (last == UINT32_MAX) return GRAFT_OK;
  /* its ancestors (positions): a TAKE among them must not wait for it */
  uint8_t *anc = graft__calloc(n ? n : 1, 1);
  uint32_t *stack = graft__malloc((n ? n : 1) * sizeof *stack);
  uint32_t *war = graft__malloc(2 * (size_t)(n ? n : 1) * sizeof *war);
  graft_status st = GRAFT_ENOMEM;
  if (!anc || !stack || !war) goto out;
  uint32_t top = 0, m = 0;
  stack[top++] = last;
  anc[last] = 1;
  while (top) {
    uint32_t u = stack[--top];
    for (uint32_t e = p->pred_off[u]; e < p->pred_off[u + 1]; e++)
      if (!anc[p->pred[e]]) {
        anc[p->pred[e]] = 1;
        stack[top++] = p->pred[e];
      }
  }
  const uint32_t last_id = p->order[last];
  for (uint32_t i = 0; i < n; i++) {
    const graft__node *nd = graft__graph_node(g, p->order[i]);
    if (nd->op != GRAFT__OP_ALLREDUCE_TAKE || anc[i] || nd->in[0] == last_id) continue;
    war[2 * m] = last_id;
    war[2 * m + 1] = p->order[i];
    m++;
  }
  st = GRAFT_OK;
  if (m) {
    qsort(war, m, 2 * sizeof *war, by_assign);
    graft__free(p->war);
    p->war = war;
    p->n_war = m;
    war = NULL;
    unlink_plan(p);
    p->extra_edges = 1;
    st = link(p);
  }
out:
  graft__free(anc);
  graft__free(stack);
  graft__free(war);
  return st;
}

/* Assigns that may write straight into their variables (see sched.h), and
 * the ordering edges that make it safe.  Needs the successor lists of a
 * first link.  Each candidate walks its descendants (an update at the end
 * of a training step has none), within DIRECT_ASSIGN_WORK in all.  An
 * optimizer step (UPDATE) writes several variables: each must pass, and
 * nothing may read its packed value (a read of a variable after its step,
 * in the same trace), which a direct step never writes. */
static graft_status find_direct_assigns(graft__plan *p) {
  const graft__graph *g = p->g;
  uint32_t n = p->n_order, na = p->n_assigns;
  p->assign_direct = graft__calloc(na ? na : 1, 1);
  p->unstaged = graft__calloc(g->n_nodes ? g->n_nodes : 1, 1);
  if (!p->assign_direct || !p->unstaged) return GRAFT_ENOMEM;
  /* With collectives every assign is staged: the ranks vote on the call's
   * outcome after it runs (function.c), and only then may variables
   * change. */
  if (p->coll) return take_late(p);
  if (!na) return GRAFT_OK;
  uint32_t *pos = graft__malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *pos);
  uint32_t *mark = graft__calloc(n ? n : 1, sizeof *mark);
  uint32_t *stack = graft__malloc((n ? n : 1) * sizeof *stack);
  /* Edges accepted so far, from each reader: later candidates must not
   * close a cycle through them (two assigns swapping two variables). */
  uint32_t *whead = graft__malloc((n ? n : 1) * sizeof *whead), *wlink = NULL;
  uint32_t *fall = NULL, n_fall = 0; /* order positions of the ops that may fail on data */
  int64_t n_writes = 0;
  for (uint32_t k = 0; k < na; k++) {
    graft_variable *const *vs;
    n_writes += graft__node_writes(graft__graph_node(g, p->assigns[k]), &vs);
  }
  var_at *readers = NULL, *assigned = graft__malloc((size_t)n_writes * sizeof *assigned), *outs = NULL;
  uint32_t n_readers = 0, n_outs = 0, n_assigned = 0;
  graft_status st = GRAFT_ENOMEM;
  if (!pos || !mark || !stack || !whead || !assigned) goto out;
  for (uint32_t id = 0; id < g->n_nodes; id++) pos[id] = UINT32_MAX;
  int64_t n_reads = 0;
  for (uint32_t i = 0; i < n; i++) {
    pos[p->order[i]] = i;
    whead[i] = UINT32_MAX;
    n_reads += graft__graph_node(g, p->order[i])->n_in;
  }
  readers = graft__malloc((size_t)(n_reads ? n_reads : 1) * sizeof *readers);
  outs = graft__malloc((size_t)(g->n_outputs ? g->n_outputs : 1) * sizeof *outs);
  if (!readers || !outs) goto out;
  for (uint32_t i = 0; i < n; i++) {
    const graft__node *c = graft__graph_node(g, p->order[i]);
    for (int j = 0; j < c->n_in; j++) {
      const graft__node *r = graft__graph_node(g, c->in[j]);
      if (r->op == GRAFT__OP_VAR_READ) readers[n_readers++] = (var_at){(uintptr_t)r->attr.var.var, i};
    }
  }
  for (uint32_t k = 0; k < na; k++) {
    graft_variable *const *vs;
    int nv = graft__node_writes(graft__graph_node(g, p->assigns[k]), &vs);
    for (int j = 0; j < nv; j++) assigned[n_assigned++] = (var_at){(uintptr_t)vs[j], k};
  }
  for (int j = 0; j < g->n_outputs; j++) {
    const graft__node *o = graft__graph_node(g, g->outputs[j]);
    if (o->op == GRAFT__OP_VAR_READ) outs[n_outs++] = (var_at){(uintptr_t)o->attr.var.var, 0};
  }
  qsort(readers, n_readers, sizeof *readers, by_var_at);
  qsort(assigned, n_assigned, sizeof *assigned, by_var_at);
  qsort(outs, n_outs, sizeof *outs, by_var_at);
  /* The nodes that may fail on data: a direct assign waits for them all,
   * so by the time it writes, nothing can fail the call any more (an
   * executor runs nothing after a failure: seq returns, ws and omp cancel
   * before the next task).  Past FALLIBLE_EDGES edges in all, assigns stay
   * staged. */
  fall = graft__malloc((n ? n : 1) * sizeof *fall);
  if (!fall) goto out;
  for (uint32_t i = 0; i < n; i++)
    if (graft__node_fallible(graft__graph_node(g, p->order[i]))) fall[n_fall++] = i;
  int64_t fall_edges = 0;
  int64_t cap = 0, lcap = 0, work = 0;
  for (uint32_t k = 0; k < na && work <= DIRECT_ASSIGN_WORK; k++) {
    uint32_t a = p->assigns[k];
    const graft__node *an = graft__graph_node(g, a);
    graft_variable *const *vs;
    int nv = graft__node_writes(an, &vs);
    /* each variable's only writer, and no output reads the variable; a
     * step's packed value read by nothing */
    int ok = pos[a] != UINT32_MAX &&
             (an->op != GRAFT__OP_UPDATE || p->succ_off[pos[a]] == p->succ_off[pos[a] + 1]);
    for (int j = 0; j < nv && ok; j++) {
      uintptr_t v = (uintptr_t)vs[j];
      uint32_t f = var_first(assigned, n_assigned, v), o = var_first(outs, n_outs, v);
      ok = !(f + 1 < n_assigned && assigned[f + 1].var == v) && !(o < n_outs && outs[o].var == v);
    }
    if (!ok) continue;
    /* Descendants of the assign (mark == k + 1) must not read the old value. */
    uint32_t top = 0;
    stack[top++] = pos[a];
    mark[pos[a]] = k + 1;
    while (top) {
      uint32_t u = stack[--top];
      work++;
      for (uint32_t e = p->succ_off[u]; e < p->succ_off[u + 1]; e++)
        if (mark[p->succ[e]] != k + 1) {
          mark[p->succ[e]] = k + 1;
          stack[top++] = p->succ[e];
        }
      for (uint32_t w = whead[u]; w != UINT32_MAX; w = wlink[w]) {
        uint32_t s = pos[p->war[2 * w + 1]];
        if (mark[s] != k + 1) {
          mark[s] = k + 1;
          stack[top++] = s;
        }
      }
    }
    int64_t first = p->n_war;
    for (int j = 0; j < nv && ok; j++) {
      uintptr_t v = (uintptr_t)vs[j];
      for (uint32_t r = var_first(readers, n_readers, v); r < n_readers && readers[r].var == v && ok;
           r++) {
        uint32_t i = readers[r].at;
        if (i == pos[a]) continue;
        ok = mark[i] != k + 1;
        if (ok) {
          if (graft__grow((void **)&p->war, &cap, 2 * ((int64_t)p->n_war + 1), sizeof *p->war))
            goto out;
          p->war[2 * p->n_war] = p->order[i];
          p->war[2 * p->n_war + 1] = a;
          p->n_war++;
        }
      }
    }
    ok = ok && fall_edges + n_fall <= FALLIBLE_EDGES;
    for (uint32_t f = 0; f < n_fall && ok; f++) {
      ok = mark[fall[f]] != k + 1; /* a check that reads the assign's result: stage */
      if (ok) {
        if (graft__grow((void **)&p->war, &cap, 2 * ((int64_t)p->n_war + 1), sizeof *p->war))
          goto out;
        p->war[2 * p->n_war] = p->order[fall[f]];
        p->war[2 * p->n_war + 1] = a;
        p->n_war++;
      }
    }
    if (!ok) {
      p->n_war = (uint32_t)first;
      continue;
    }
    fall_edges += n_fall;
    p->assign_direct[k] = 1;
    p->stats.direct_assigns++;
    if (an->op == GRAFT__OP_UPDATE) p->unstaged[a] = 1;
    if (graft__grow((void **)&wlink, &lcap, p->n_war, sizeof *wlink)) goto out;
    for (uint32_t w = (uint32_t)first; w < p->n_war; w++) {
      uint32_t r = pos[p->war[2 * w]];
      wlink[w] = whead[r];
      whead[r] = w;
    }
  }
  if (p->n_war) {
    /* A node reading the variable twice waits once. */
    qsort(p->war, p->n_war, 2 * sizeof *p->war, by_assign);
    uint32_t m = 1;
    for (uint32_t w = 1; w < p->n_war; w++)
      if (p->war[2 * w] != p->war[2 * (m - 1)] || p->war[2 * w + 1] != p->war[2 * (m - 1) + 1]) {
        p->war[2 * m] = p->war[2 * w];
        p->war[2 * m + 1] = p->war[2 * w + 1];
        m++;
      }
    p->n_war = m;
  }
  st = GRAFT_OK;
out:
  graft__free(pos);
  graft__free(mark);
  graft__free(stack);
  graft__free(whead);
  graft__free(wlink);
  graft__free(readers);
  graft__free(assigned);
  graft__free(outs);
  graft__free(fall);
  if (st == GRAFT_OK && p->n_war) {
    /* Link again with the new edges: they may point backwards in the
     * trace's order, and reorder's walk must see them. */
    unlink_plan(p);
    p->extra_edges = 1;
    st = link(p);
  }
  return st;
}

/* Renumber the compute nodes in the order one worker runs them (order.c),
 * and store the views in that order, compute nodes first. */
static graft_status reorder(graft__plan *p) {
  const graft__graph *g = p->g;
  uint32_t n = p->n_order;
  uint32_t *seq = graft__malloc((n ? n : 1) * sizeof *seq);
  if (!seq) return GRAFT_ENOMEM;
  graft_status st = graft__plan_order(p, seq);
  int same = 1;
  for (uint32_t i = 0; i < n && !st; i++) {
    same &= seq[i] == i;
    seq[i] = p->order[seq[i]];
  }
  p->lanes = p->stats.lanes;
  p->extra_edges = p->lanes || p->n_war;
  if (!st && (!same || p->extra_edges)) {
    memcpy(p->order, seq, (n ? n : 1) * sizeof *seq);
    unlink_plan(p);
    st = link(p);
  }
  graft__free(seq);
  if (st) return st;
  /* Views: compute nodes in order, then every other node by id. */
  size_t m = g->n_nodes ? g->n_nodes : 1;
  graft__tview *v = graft__malloc(m * sizeof *v);
  if (!v) return GRAFT_ENOMEM;
  for (uint32_t id = 0; id < g->n_nodes; id++) p->vslot[id] = UINT32_MAX;
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++) p->vslot[p->order[i]] = k++;
  for (uint32_t id = 0; id < g->n_nodes; id++)
    if (p->vslot[id] == UINT32_MAX) p->vslot[id] = k++;
  for (uint32_t id = 0; id < g->n_nodes; id++) v[p->vslot[id]] = p->views[id];
  graft__free(p->views);
  p->views = v;
  return GRAFT_OK;
}

/* A fused node runs only with its scratch (graft__kernel_run_scratch), so
 * it is never whole: executors never call its kargs' fn. */
static graft_status fused_needs_scratch(const graft__kargs *k, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  graft__msgf(k->msg, "%s runs only with its scratch", k->node->fused->name);
  return GRAFT_EINTERNAL;
}

/* Kernel arguments per order position; data pointers are set once the
 * memory plan exists (place). */
static graft_status args(graft__plan *p) {
  const graft__graph *g = p->g;
  int64_t n_ins = 0, n_dst = 0;
  for (uint32_t i = 0; i < p->n_order; i++) {
    const graft__node *nd = graft__graph_node(g, p->order[i]);
    n_ins += nd->n_in;
    if (nd->op == GRAFT__OP_UPDATE) n_dst += nd->attr.update.n_vars;
  }
  size_t n = p->n_order ? p->n_order : 1;
  p->in_ptrs = graft__malloc((size_t)(n_ins + n_dst ? n_ins + n_dst : 1) * sizeof *p->in_ptrs);
  p->kargs = graft__calloc(n, sizeof *p->kargs);
  p->upd_dst = graft__calloc((size_t)(n_dst ? n_dst : 1), sizeof *p->upd_dst);
  if (!p->in_ptrs || !p->kargs || !p->upd_dst) return GRAFT_ENOMEM;
  int64_t k = 0, kd = 0;
  for (uint32_t i = 0; i < p->n_order; i++) {
    uint32_t id = p->order[i];
    const graft__node *nd = graft__graph_node(g, id);
    graft__kargs *ka = &p->kargs[i];
    ka->node = nd;
    ka->n_in = nd->n_in;
    ka->in = &p->in_ptrs[k];
    for (int j = 0; j < nd->n_in; j++) p->in_ptrs[k++] = graft__plan_view(p, nd->in[j]);
    ka->out = graft__plan_view(p, id);
    ka->fn = nd->fused ? fused_needs_scratch : graft__kernels[nd->op].run;
    if (nd->op == GRAFT__OP_UPDATE) /* its destinations follow its inputs */
      for (int j = 0; j < nd->attr.update.n_vars; j++) {
        p->upd_dst[kd] = (graft__tview){.dtype = ka->out->dtype};
        p->in_ptrs[k++] = &p->upd_dst[kd++];
      }
  }
  return GRAFT_OK;
}

/* Allocate the arena the memory plan asked for and point the views at it. */
/* A GET that no graph output is reads its control node's output where
 * the node packed it: no copy, no arena bytes of its own; the memory
 * planner puts it in its node's buffer, so those bytes live until the
 * GET's readers are done (memplan.c, plan_check.c). */
static graft_status alias_gets(graft__plan *p) {
  if (!p->has_ctl) return GRAFT_OK;
  const graft__graph *g = p->g;
  uint32_t *pos = graft__malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *pos);
  p->alias = graft__malloc((size_t)(p->n_order ? p->n_order : 1) * sizeof *p->alias);
  if (!pos || !p->alias) {
    graft__free(pos);
    return GRAFT_ENOMEM;
  }
  for (uint32_t i = 0; i < p->n_order; i++) pos[p->order[i]] = i;
  for (int k = 0; k < g->n_outputs; k++) pos[g->outputs[k]] = UINT32_MAX; /* (reused below) */
  for (uint32_t i = 0; i < p->n_order; i++) {
    uint32_t id = p->order[i];
    const graft__node *n = graft__graph_node(g, id);
    p->alias[i] = UINT32_MAX;
    if (n->op != GRAFT__OP_GET || pos[id] == UINT32_MAX) continue; /* an output: copied */
    p->alias[i] = pos[n->in[0]];
    p->unstaged[id] = 1;
  }
  graft__free(pos);
  return GRAFT_OK;
}

void graft__plan_point_views(graft__plan *p) {
  for (uint32_t i = 0; i < p->n_order; i++)
    graft__plan_view(p, p->order[i])->data = p->arena + p->offset[p->order[i]];
  for (uint32_t i = 0; p->alias && i < p->n_order; i++)
    if (p->alias[i] != UINT32_MAX) {
      const graft__node *n = graft__graph_node(p->g, p->order[i]);
      graft__plan_view(p, p->order[i])->data =
          (unsigned char *)graft__plan_view(p, n->in[0])->data + n->attr.get.offset;
    }
}

static graft_status place(graft__plan *p) {
  p->arena = graft__aligned_alloc(p->arena_bytes ? p->arena_bytes : GRAFT__ALIGN, GRAFT__ALIGN);
  if (!p->arena) return GRAFT_ENOMEM;
  graft__plan_point_views(p);
  return GRAFT_OK;
}

/* Reorder each successor list so the successors with this node as their only
 * compute predecessor come first (in order), and note where the others
 * start: the work-stealing executor hands the first group out as one range
 * of ready nodes, without touching their counters. */
static graft_status group_successors(graft__plan *p) {
  uint32_t n = p->n_order, m = p->succ_off[n];
  /* The executor's items hold order positions and successor indices in 31
   * bits; a plan beyond that would need hundreds of GiB anyway. */
  if (n > INT32_MAX || m > INT32_MAX) return GRAFT_ENOMEM;
  p->succ_multi = graft__malloc((n ? n : 1) * sizeof *p->succ_multi);
  uint32_t *tmp = graft__malloc((m ? m : 1) * sizeof *tmp);
  if (!p->succ_multi || !tmp) {
    graft__free(tmp);
    return GRAFT_ENOMEM;
  }
  for (uint32_t u = 0; u < n; u++) {
    uint32_t k = p->succ_off[u];
    for (int multi = 0; multi < 2; multi++) {
      if (multi) p->succ_multi[u] = k;
      for (uint32_t e = p->succ_off[u]; e < p->succ_off[u + 1]; e++)
        if ((p->npred[p->succ[e]] > 1) == multi) tmp[k++] = p->succ[e];
    }
  }
  graft__free(p->succ);
  p->succ = tmp;
  return GRAFT_OK;
}

/* The first war pair of assign id a (n_war if none). */
static uint32_t war_first(const graft__plan *p, uint32_t a) {
  uint32_t lo = 0, hi = p->n_war;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (p->war[2 * mid + 1] < a)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Successor lists over order positions, and each node's count of distinct
 * compute predecessors (a node reading one value twice waits for it once),
 * with the ordering edges of GRAFT_MEMORY=lanes:N. */
static graft_status link(graft__plan *p) {
  const graft__graph *g = p->g;
  uint32_t n = p->n_order;
  uint32_t *pos = graft__malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *pos);
  p->succ_off = graft__calloc((size_t)n + 1, sizeof *p->succ_off);
  p->npred = graft__calloc(n ? n : 1, sizeof *p->npred);
  if (!pos || !p->succ_off || !p->npred) goto nomem;
  for (uint32_t id = 0; id < g->n_nodes; id++) pos[id] = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) pos[p->order[i]] = i;
  /* Count, then fill; duplicates are skipped by checking earlier inputs. */
  for (int pass = 0; pass < 2; pass++) {
    uint32_t *fill = NULL;
    if (pass == 1) {
      for (uint32_t i = 0; i < n; i++) p->succ_off[i + 1] += p->succ_off[i];
      p->succ = graft__malloc((size_t)(p->succ_off[n] ? p->succ_off[n] : 1) * sizeof *p->succ);
      fill = graft__malloc((n ? n : 1) * sizeof *fill);
      if (!p->succ || !fill) {
        graft__free(fill);
        goto nomem;
      }
      memcpy(fill, p->succ_off, (n ? n : 1) * sizeof *fill);
    }
    p->stats.lane_edges = 0;
    for (uint32_t i = 0; i < n; i++) {
      const graft__node *nd = graft__graph_node(g, p->order[i]);
      /* Inputs, then (lanes) the node lanes places earlier, once each. */
      for (int j = 0; j <= nd->n_in; j++) {
        uint32_t u;
        int dup = 0;
        if (j < nd->n_in) {
          u = pos[nd->in[j]];
          for (int k = 0; k < j && !dup; k++) dup = nd->in[k] == nd->in[j];
        } else {
          if (!p->lanes || i < (uint32_t)p->lanes) break;
          u = i - (uint32_t)p->lanes;
          for (int k = 0; k < nd->n_in && !dup; k++) dup = pos[nd->in[k]] == u;
          p->stats.lane_edges += !dup;
        }
        if (u == UINT32_MAX || dup) continue;
        if (pass == 0) {
          p->succ_off[u + 1]++;
          p->npred[i]++;
        } else {
          p->succ[fill[u]++] = i;
        }
      }
      /* Readers of a variable before its direct assign (war pairs). */
      for (uint32_t w = war_first(p, p->order[i]); w < p->n_war && p->war[2 * w + 1] == p->order[i];
           w++) {
        uint32_t u = pos[p->war[2 * w]];
        int dup = u == i - (uint32_t)p->lanes && p->lanes && i >= (uint32_t)p->lanes;
        for (int k = 0; k < nd->n_in && !dup; k++) dup = pos[nd->in[k]] == u;
        if (dup) continue;
        if (pass == 0) {
          p->succ_off[u + 1]++;
          p->npred[i]++;
        } else {
          p->succ[fill[u]++] = i;
        }
      }
    }
    graft__free(fill);
  }
  graft__free(pos);
  /* Predecessor lists: the transpose, for the OpenMP-task baseline. */
  p->pred_off = graft__calloc((size_t)n + 1, sizeof *p->pred_off);
  p->pred = graft__malloc((size_t)(p->succ_off[n] ? p->succ_off[n] : 1) * sizeof *p->pred);
  if (!p->pred_off || !p->pred) return GRAFT_ENOMEM;
  for (uint32_t i = 0; i < n; i++) p->pred_off[i + 1] = p->pred_off[i] + (uint32_t)p->npred[i];
  for (uint32_t u = 0; u < n; u++)
    for (uint32_t e = p->succ_off[u]; e < p->succ_off[u + 1]; e++) {
      uint32_t v = p->succ[e];
      p->pred[p->pred_off[v + 1] - (uint32_t)p->npred[v]] = u; /* filled back to front below */
      p->npred[v]--;
    }
  for (uint32_t i = 0; i < n; i++) p->npred[i] = (int32_t)(p->pred_off[i + 1] - p->pred_off[i]);
  return group_successors(p);
nomem:
  graft__free(pos);
  return GRAFT_ENOMEM;
}

static void fill_stats(graft__plan *p) {
  const graft__graph *g = p->g;
  graft_plan_stats *s = &p->stats;
  int64_t live = 0;
  for (uint32_t id = 0; id < g->n_nodes; id++) live += p->live[id];
  s->nodes = g->n_nodes;
  s->live_nodes = live;
  s->pruned_nodes = (int64_t)g->n_nodes - live;
  s->tiles = p->n_tasks;
  s->arena_bytes = (int64_t)p->arena_bytes;
}

graft_status graft__plan_compile(const graft__graph *g, graft_tensor *const *in,
                                 const graft__plan_opts *opts, graft__plan **out, char *msg) {
  const int64_t *few[16] = {0}, **dims = few;
  if (g->n_inputs > 16 && !(dims = graft__malloc((size_t)g->n_inputs * sizeof *dims))) {
    *out = NULL;
    graft__msgf(msg, "out of memory compiling trace '%s'", g->name);
    return GRAFT_ENOMEM;
  }
  for (int i = 0; i < g->n_inputs; i++) dims[i] = graft_tensor_shape(in[i]);
  graft_status st = graft__plan_compile_dims(g, dims, opts, out, msg);
  if (dims != few) graft__free(dims);
  return st;
}

graft_status graft__plan_compile_dims(const graft__graph *g, const int64_t *const *in,
                                      const graft__plan_opts *opts, graft__plan **out, char *msg) {
  *out = NULL;
  double t0 = graft__now_us();
  graft__plan *p = graft__calloc(1, sizeof *p);
  if (!p) goto nomem;
  p->g = g;
  p->opts = *opts;
  p->stats.lanes = opts->lanes; /* p->lanes joins once the order is final */
  p->pack_small = opts->pack_small;
  size_t n = g->n_nodes ? g->n_nodes : 1;
  p->live = graft__malloc(n);
  p->order = graft__malloc(n * sizeof *p->order);
  p->views = graft__calloc(n, sizeof *p->views);
  p->shapes = graft__calloc(n * GRAFT_MAX_RANK, sizeof *p->shapes);
  p->vslot = graft__malloc(n * sizeof *p->vslot);
  p->offset = graft__malloc(n * sizeof *p->offset);
  p->binding = graft__malloc((size_t)(g->n_syms ? g->n_syms : 1) * sizeof *p->binding);
  if (!p->live || !p->order || !p->views || !p->shapes || !p->vslot || !p->offset || !p->binding)
    goto nomem;
  for (int64_t i = 0; i < g->n_syms; i++) p->binding[i] = -1;
  for (uint32_t id = 0; id < g->n_nodes && !p->ctl; id++)
    if ((graft__ops[graft__graph_node(g, id)->op].flags & GRAFT__OPF_CONTROL) &&
        !(p->ctl = graft__calloc(n, sizeof *p->ctl)))
      goto nomem;
  for (uint32_t id = 0; id < g->n_nodes; id++) p->vslot[id] = id;
  graft__graph_prune(g, p->live);
  for (int i = 0; i < g->n_inputs; i++) p->live[g->inputs[i]] = 1; /* bound every call */

  graft_status st = infer_all(p, in, msg);
  if (st) { /* with its message (a value too large for memory included) */
    graft__plan_destroy(p);
    return st;
  }
  if ((st = graft__coll_attach(p, msg))) {
    graft__plan_destroy(p);
    return st;
  }
  if ((p->has_ctl && graft__ctl_attach(p)) || (opts->fusion && graft__plan_fuse(p)) || layout(p) || link(p) || find_direct_assigns(p) || reorder(p) || args(p) || alias_gets(p) || graft__memplan(p) || place(p) ||
      graft__plan_tile(p, opts->grain) || graft__plan_partition(p, opts->n_parts))
    goto nomem;
#ifdef GRAFT_PLAN_CHECK
  /* Debug builds verify every plan against the DAG. */
  if ((st = graft__plan_check(p, msg))) {
    graft__plan_destroy(p);
    return st;
  }
#endif
  fill_stats(p);
  if (p->has_ctl && !opts->is_body && graft__ctl_share(p)) goto nomem;
  p->stats.compile_us = graft__now_us() - t0;
  *out = p;
  return GRAFT_OK;

nomem:
  graft__msgf(msg, "out of memory compiling trace '%s'", g->name);
  graft__plan_destroy(p);
  return GRAFT_ENOMEM;
}
