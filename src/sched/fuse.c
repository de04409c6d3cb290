/* Elementwise fusion at compile (GRAFT_FUSION, on by default).
 *
 * Chains and trees of elementwise ops of one output shape become one node
 * whose kernel (kernels/fused.c) makes one pass per tile: each member runs
 * its own kernel over a chunk of elements, the values between members stay
 * in the tile's scratch, and only the root's value is stored.  The plan
 * then sees one node with the group's inputs, so the memory planner, its
 * checker, the tiler and every executor treat a group as one node.
 *
 * Groups are grown from their root towards the inputs, visiting the nodes
 * in decreasing id (a reverse topological order), so when a node is
 * reached every node that reads it has been decided.  A node is *needed*
 * when something outside a group reads it: an output, a side effect, an op
 * that may fail on data, a node that runs on its own, or a group that has
 * it as an input.  A node nobody needs is dropped from the live set: every
 * reader computes it inside its group.  A member joins a group when it has
 * the root's shape and nobody needs it yet, and either every reader not
 * yet decided is in the group, or it is cheap (cost column <= DUP_COST)
 * and every reader could take it in too: then a group may recompute it
 * rather than read it, which is what lets an optimizer written as ops run
 * in three passes rather than a dozen.  Recomputing gives the same bits:
 * each element's operations are the same whichever node runs them. */
#include <stdlib.h>
#include <string.h>

#include "sched/sched.h"

#define DUP_COST 2

static int member_op(const graft__node *n) {
  unsigned f = graft__ops[n->op].flags;
  return (f & GRAFT__OPF_ELEMWISE) &&
         !(f & (GRAFT__OPF_SIDE_EFFECT | GRAFT__OPF_FALLIBLE | GRAFT__OPF_LEAF | GRAFT__OPF_EXTERNAL)) &&
         n->n_in >= 1 && n->n_in <= 3;
}

/* A root may also be an assign: the group then writes the variable. */
static int root_op(const graft__node *n) {
  return member_op(n) || (n->op == GRAFT__OP_ASSIGN && n->n_in == 1);
}

typedef struct fuse_ctx {
  graft__plan *p;
  const graft__graph *g;
  uint32_t *cons_off, *cons; /* live readers of each node, each once */
  uint8_t *needed;
  uint32_t *in_g, *rejected; /* == stamp: in / refused by the group being grown */
  uint32_t stamp;
  uint32_t root;
  uint32_t mem[GRAFT__FUSED_MAX_MEMBERS];
  int n_mem;
} fuse_ctx;

static const graft__tview *view_of(const fuse_ctx *c, uint32_t id) {
  return graft__plan_view(c->p, id);
}

static int same_shape(const fuse_ctx *c, uint32_t a, uint32_t b) {
  const graft__tview *x = view_of(c, a), *y = view_of(c, b);
  if (x->rank != y->rank || x->numel != y->numel) return 0;
  for (int d = 0; d < x->rank; d++)
    if (x->shape[d] != y->shape[d]) return 0;
  return 1;
}

/* The group's inputs if u joined it (u's in_g mark set by the caller). */
static int count_inputs(const fuse_ctx *c, uint32_t *ext) {
  int n = 0;
  for (int m = 0; m < c->n_mem; m++) {
    const graft__node *nd = graft__graph_node(c->g, c->mem[m]);
    for (int j = 0; j < nd->n_in; j++) {
      uint32_t u = nd->in[j];
      if (c->in_g[u] == c->stamp) continue;
      int seen = 0;
      for (int q = 0; q < n && !seen; q++) seen = ext[q] == u;
      if (seen) continue;
      if (n == GRAFT__FUSED_MAX_IN) return n + 1;
      ext[n++] = u;
    }
  }
  return n;
}

static int may_join(const fuse_ctx *c, uint32_t u) {
  const graft__node *n = graft__graph_node(c->g, u);
  if (!c->p->live[u] || c->needed[u] || !member_op(n) || !same_shape(c, u, c->root)) return 0;
  int all_in = 1, all_could = 1;
  for (uint32_t e = c->cons_off[u]; e < c->cons_off[u + 1]; e++) {
    uint32_t r = c->cons[e];
    if (r > c->root) continue; /* decided: it would have marked u needed */
    all_in &= c->in_g[r] == c->stamp;
    all_could &= root_op(graft__graph_node(c->g, r)) && same_shape(c, r, u);
  }
  return all_in || (graft__ops[n->op].cost <= DUP_COST && all_could);
}

/* Grow the group of root r into c->mem (ascending ids); its input count
 * stays within GRAFT__FUSED_MAX_IN. */
static void grow(fuse_ctx *c, uint32_t r) {
  uint32_t cand[GRAFT__FUSED_MAX_MEMBERS * 3], ext[GRAFT__FUSED_MAX_IN + 1];
  int n_cand = 0;
  c->stamp++;
  c->root = r;
  c->n_mem = 1;
  c->mem[0] = r;
  c->in_g[r] = c->stamp;
  const graft__node *rn = graft__graph_node(c->g, r);
  for (int j = 0; j < rn->n_in; j++) cand[n_cand++] = rn->in[j];
  while (n_cand && c->n_mem < GRAFT__FUSED_MAX_MEMBERS) {
    int best = 0; /* the largest id: every member reading it is decided */
    for (int q = 1; q < n_cand; q++)
      if (cand[q] > cand[best]) best = q;
    uint32_t u = cand[best];
    cand[best] = cand[--n_cand];
    if (c->in_g[u] == c->stamp || c->rejected[u] == c->stamp) continue;
    if (!may_join(c, u)) {
      c->rejected[u] = c->stamp;
      continue;
    }
    c->in_g[u] = c->stamp;
    c->mem[c->n_mem++] = u;
    if (count_inputs(c, ext) > GRAFT__FUSED_MAX_IN) {
      c->in_g[u] = 0;
      c->n_mem--;
      c->rejected[u] = c->stamp;
      continue;
    }
    const graft__node *un = graft__graph_node(c->g, u);
    for (int j = 0; j < un->n_in; j++) cand[n_cand++] = un->in[j];
  }
  /* ascending ids: a topological order of the members */
  for (int a = 1; a < c->n_mem; a++)
    for (int b = a; b > 0 && c->mem[b - 1] > c->mem[b]; b--) {
      uint32_t t = c->mem[b];
      c->mem[b] = c->mem[b - 1];
      c->mem[b - 1] = t;
    }
}

/* Scratch slots: each member's chunk in a slot no live value holds, so a
 * chain of any length runs in one or two slots that stay in L1.  A member
 * may take the slot of an operand it reads for the last time when their
 * elements have one size (an elementwise kernel reads element i before
 * writing it); otherwise the slot is freed after it. */
static void assign_slots(graft__fused *f) {
  int last[GRAFT__FUSED_MAX_MEMBERS], holder[GRAFT__FUSED_MAX_MEMBERS];
  const int nm = f->n_members;
  for (int m = 0; m < nm; m++) last[m] = m;
  for (int m = 0; m < nm; m++)
    for (int j = 0; j < f->m[m].node->n_in; j++)
      if (f->m[m].ref[j] < 0) last[-1 - f->m[m].ref[j]] = m;
  f->n_slots = 0;
  for (int s = 0; s < GRAFT__FUSED_MAX_MEMBERS; s++) holder[s] = -1;
  for (int m = 0; m < nm - 1; m++) {
    graft__fused_member *fm = &f->m[m];
    int pick = -1;
    for (int j = 0; j < fm->node->n_in && pick < 0; j++) { /* in place */
      int r = fm->ref[j];
      if (r < 0 && last[-1 - r] == m &&
          graft_dtype_size(f->m[-1 - r].dtype) == graft_dtype_size(fm->dtype))
        pick = f->m[-1 - r].slot;
    }
    for (int s = 0; s < f->n_slots && pick < 0; s++)
      if (holder[s] < 0 || last[holder[s]] < m) pick = s;
    if (pick < 0) pick = f->n_slots++;
    fm->slot = (int8_t)pick;
    holder[pick] = m;
  }
  f->m[nm - 1].slot = -1;
}

/* "fused:mul+add+relu": f's members (traces, DOT). */
static void name_group(graft__fused *f) {
  size_t at = (size_t)snprintf(f->name, sizeof f->name, "fused:");
  for (int m = 0; m < f->n_members && at < sizeof f->name; m++)
    at += (size_t)snprintf(f->name + at, sizeof f->name - at, "%s%s", m ? "+" : "",
                           graft__ops[f->m[m].node->op].name);
  if (at >= sizeof f->name) memcpy(f->name + sizeof f->name - 4, "...", 4);
}

/* The program of the group in c->mem, its inputs into ext. */
static void program(const fuse_ctx *c, graft__fused *f, uint32_t *ext, int *n_ext) {
  *n_ext = count_inputs(c, ext);
  f->n_members = c->n_mem;
  f->cost = 0;
  f->n_dst = 0;
  f->code = NULL; /* compile() may set it */
  const graft__tview *v = view_of(c, c->root);
  f->numel = v->numel;
  f->rank = v->rank;
  for (int d = 0; d < v->rank; d++) f->dims[d] = v->shape[d];
  for (int m = 0; m < c->n_mem; m++) {
    const graft__node *nd = graft__graph_node(c->g, c->mem[m]);
    graft__fused_member *fm = &f->m[m];
    fm->node = nd;
    fm->fn = graft__kernels[nd->op].run;
    fm->dtype = view_of(c, c->mem[m])->dtype;
    fm->dst = -1;
    f->cost += graft__ops[nd->op].cost ? graft__ops[nd->op].cost : 1;
    for (int j = 0; j < nd->n_in; j++) {
      uint32_t u = nd->in[j];
      int8_t ref = 0;
      if (c->in_g[u] == c->stamp) {
        for (int q = 0; q < m; q++)
          if (c->mem[q] == u) ref = (int8_t)(-1 - q);
      } else {
        for (int q = 0; q < *n_ext; q++)
          if (ext[q] == u) ref = (int8_t)q;
      }
      fm->ref[j] = ref;
    }
  }
  name_group(f);
  assign_slots(f);
}

/* Readers of every node among the live compute nodes, each once. */
static graft_status readers(fuse_ctx *c) {
  const graft__graph *g = c->g;
  uint32_t n = g->n_nodes;
  c->cons_off = graft__calloc((size_t)n + 1, sizeof *c->cons_off);
  uint32_t *fill = graft__malloc((size_t)(n ? n : 1) * sizeof *fill);
  if (!c->cons_off || !fill) {
    graft__free(fill);
    return GRAFT_ENOMEM;
  }
  for (int pass = 0; pass < 2; pass++) {
    if (pass) {
      for (uint32_t i = 0; i < n; i++) c->cons_off[i + 1] += c->cons_off[i];
      c->cons = graft__malloc((size_t)(c->cons_off[n] ? c->cons_off[n] : 1) * sizeof *c->cons);
      if (!c->cons) {
        graft__free(fill);
        return GRAFT_ENOMEM;
      }
      memcpy(fill, c->cons_off, (size_t)n * sizeof *fill);
    }
    for (uint32_t id = 0; id < n; id++) {
      const graft__node *nd = graft__graph_node(g, id);
      if (!c->p->live[id]) continue;
      for (int j = 0; j < nd->n_in; j++) {
        int dup = 0;
        for (int k = 0; k < j && !dup; k++) dup = nd->in[k] == nd->in[j];
        if (dup) continue;
        if (pass) c->cons[fill[nd->in[j]]++] = id;
        else c->cons_off[nd->in[j] + 1]++;
      }
    }
  }
  graft__free(fill);
  return GRAFT_OK;
}


/* Readers of a value that an assign also stores read the assign instead:
 * the same bits (an assign of a value of the variable's dtype and shape is
 * a copy), and the value then has one reader, so it can join the assign's
 * group rather than be stored or recomputed.  Adam written as ops: the new
 * m and v are written by their assigns' groups, and the weight's group
 * reads them back, one pass each, as the optimizer kernel does.  (An
 * assign's readers follow it; one that also reads the variable's old
 * value keeps the assign staged, as any such reader does.) */
static graft_status read_through_assigns(fuse_ctx *c) {
  graft__plan *p = c->p;
  const uint32_t n = c->g->n_nodes;
  for (uint32_t a = 0; a < n; a++) {
    const graft__node *an = graft__graph_node(p->g, a);
    if (!p->live[a] || an->op != GRAFT__OP_ASSIGN || an->n_in != 1) continue;
    uint32_t u = an->in[0];
    /* (a scalar, a step count, gains nothing, and its readers' descendants
     * become the assign's, which may keep it staged) */
    if (!member_op(graft__graph_node(p->g, u)) || graft__plan_view(p, u)->numel < 2 ||
        graft__plan_view(p, u)->dtype != graft__plan_view(p, a)->dtype || !same_shape(c, u, a))
      continue;
    for (uint32_t e = c->cons_off[u]; e < c->cons_off[u + 1]; e++) {
      uint32_t r = c->cons[e];
      const graft__node *rn = graft__graph_node(p->g, r);
      /* only readers that may then fuse with the assign's group */
      if (r == a || !member_op(rn)) continue;
      /* a reader of the variable's old value would keep the assign staged */
      int old = 0;
      for (int j = 0; j < rn->n_in && !old; j++) {
        const graft__node *x = graft__graph_node(p->g, rn->in[j]);
        old = x->op == GRAFT__OP_VAR_READ && x->attr.var.var == an->attr.var.var;
      }
      if (old) continue;
      graft__node *w = graft__plan_writable(p, r);
      uint32_t *in = w ? graft__arena_alloc(&p->fg->arena, (size_t)w->n_in * sizeof *in) : NULL;
      if (!in) return GRAFT_ENOMEM;
      for (int j = 0; j < w->n_in; j++) in[j] = w->in[j] == u ? a : w->in[j];
      w->in = in;
    }
  }
  return GRAFT_OK;
}

/* ---- groups writing several variables --------------------------------------
 *
 * Adam written as ops makes three groups per variable: the new m (rooted
 * at its assign), the new v, and the weight, which reads both assigns'
 * values back.  Merged into the weight's group, the three run as one pass
 * that writes m, v and w (10 memory streams become 7, and the compiled
 * loop keeps m and v in registers).  The merged node is an UPDATE in the
 * plan's graph (kernels.h, graft__fused): it writes several variables,
 * directly or staged in its packed value as an optimizer step does, so
 * direct assigns, binding and commit treat it as one. */

typedef struct merge_ctx {
  graft__plan *p;
  graft__fused *progs;
  const uint32_t *roots;
  int *n_ext;
  uint32_t *ext_off;
  uint32_t **ext_all;
  int64_t *ext_cap, *n_ext_all;
  uint32_t *group_of; /* 1 + the group a node roots, else 0 */
  uint32_t *n_read;   /* readers of each node (an output counts as one) */
} merge_ctx;

static const uint32_t *ext_of(const merge_ctx *mc, int k) { return *mc->ext_all + mc->ext_off[k]; }

/* The variable a member or a group's root assigns. */
static graft_variable *var_of(const graft__node *assign) { return assign->attr.var.var; }

/* Does a member of f read the old value of v (an input that reads the
 * variable, which an assign merged before it would have overwritten)? */
static int reads_old(const merge_ctx *mc, const graft__fused *f, const uint32_t *ext, graft_variable *v) {
  for (int m = 0; m < f->n_members; m++)
    for (int j = 0; j < f->m[m].node->n_in; j++) {
      int r = f->m[m].ref[j];
      const graft__node *x = r >= 0 ? graft__graph_node(mc->p->g, ext[r]) : NULL;
      if (x && x->op == GRAFT__OP_VAR_READ && x->attr.var.var == v) return 1;
    }
  return 0;
}

/* May group q (an assign's) move into w, which reads its value as input
 * e_at? */
static int may_merge(const merge_ctx *mc, int w, int q, int e_at) {
  const graft__fused *fw = &mc->progs[w], *fq = &mc->progs[q];
  const graft__graph *g = mc->p->g;
  const uint32_t e = ext_of(mc, w)[e_at];
  const graft__node *an = graft__graph_node(g, e);
  if (q == w || !fq->n_members || fq->n_dst || an->op != GRAFT__OP_ASSIGN || mc->n_read[e] != 1 ||
      fq->numel != fw->numel || fq->m[fq->n_members - 1].dtype != fw->m[fw->n_members - 1].dtype ||
      fw->n_members + fq->n_members > GRAFT__FUSED_MAX_MEMBERS ||
      (fw->n_dst ? fw->n_dst : 1) >= GRAFT__UPDATE_MAX_VARS)
    return 0;
  /* a variable written once; nothing after the assign reads its old value */
  graft_variable *v = var_of(an);
  if (v == var_of(graft__graph_node(g, mc->roots[w])) || reads_old(mc, fw, ext_of(mc, w), v)) return 0;
  for (int m = 0; m < fw->n_members; m++)
    if (fw->m[m].dst >= 0 && var_of(fw->m[m].node) == v) return 0;
  /* q runs first: none of its inputs may be an assign merged into w
   * before (its members run after q's) */
  for (int i = 0; i < mc->n_ext[q]; i++)
    if (!mc->p->live[ext_of(mc, q)[i]] && mc->group_of[ext_of(mc, q)[i]]) return 0;
  /* inputs of both, less the assign's value, within the limit; one of
   * them of the group's shape (an UPDATE's units are its input 0's) */
  int n = mc->n_ext[q], full = 0;
  for (int i = 0; i < mc->n_ext[q]; i++) full |= graft__plan_view(mc->p, ext_of(mc, q)[i])->numel == fw->numel;
  for (int j = 0; j < mc->n_ext[w]; j++) {
    int dup = j == e_at;
    for (int i = 0; i < mc->n_ext[q] && !dup; i++) dup = ext_of(mc, q)[i] == ext_of(mc, w)[j];
    n += !dup;
    full |= !dup && graft__plan_view(mc->p, ext_of(mc, w)[j])->numel == fw->numel;
  }
  return n <= GRAFT__FUSED_MAX_IN && full;
}

/* q's members, then w's, in w; w's reads of input e_at read q's assign. */
static graft_status merge(merge_ctx *mc, int w, int q, int e_at) {
  graft__fused *fw = &mc->progs[w], *fq = &mc->progs[q];
  uint32_t ext[GRAFT__FUSED_MAX_IN];
  int n = 0, map_w[GRAFT__FUSED_MAX_IN];
  for (int i = 0; i < mc->n_ext[q]; i++) ext[n++] = ext_of(mc, q)[i];
  for (int j = 0; j < mc->n_ext[w]; j++) {
    map_w[j] = -1;
    if (j == e_at) continue;
    for (int i = 0; i < n && map_w[j] < 0; i++)
      if (ext[i] == ext_of(mc, w)[j]) map_w[j] = i;
    if (map_w[j] < 0) {
      map_w[j] = n;
      ext[n++] = ext_of(mc, w)[j];
    }
  }
  const int nq = fq->n_members, nw = fw->n_members;
  graft__fused_member m[GRAFT__FUSED_MAX_MEMBERS];
  memcpy(m, fq->m, (size_t)nq * sizeof *m);
  for (int i = 0; i < nw; i++) {
    m[nq + i] = fw->m[i];
    for (int j = 0; j < fw->m[i].node->n_in; j++) {
      int r = fw->m[i].ref[j];
      m[nq + i].ref[j] = (int8_t)(r < 0 ? r - nq : r == e_at ? -1 - (nq - 1) : map_w[r]);
    }
  }
  if (!fw->n_dst) { /* the root writes destination 0 */
    fw->n_dst = 1;
    m[nq + nw - 1].dst = 0;
  }
  m[nq - 1].dst = (int8_t)fw->n_dst++;
  memcpy(fw->m, m, (size_t)(nq + nw) * sizeof *m);
  fw->n_members = nq + nw;
  fw->cost += fq->cost;
  fq->n_members = 0;
  name_group(fw);
  assign_slots(fw);
  if (graft__grow((void **)mc->ext_all, mc->ext_cap, *mc->n_ext_all + n, sizeof **mc->ext_all))
    return GRAFT_ENOMEM;
  memcpy(*mc->ext_all + *mc->n_ext_all, ext, (size_t)n * sizeof *ext);
  mc->ext_off[w] = (uint32_t)*mc->n_ext_all;
  mc->n_ext[w] = n;
  *mc->n_ext_all += n;
  mc->p->live[mc->roots[q]] = 0; /* its work is w's now */
  return GRAFT_OK;
}

/* An UPDATE's units are its input 0's elements: one of the group's shape
 * goes first. */
static void full_input_first(merge_ctx *mc, int w) {
  graft__fused *f = &mc->progs[w];
  uint32_t *ext = *mc->ext_all + mc->ext_off[w];
  int at = -1;
  for (int j = 0; j < mc->n_ext[w] && at < 0; j++)
    if (graft__plan_view(mc->p, ext[j])->numel == f->numel) at = j;
  if (at <= 0) return;
  uint32_t t = ext[0];
  ext[0] = ext[at];
  ext[at] = t;
  for (int m = 0; m < f->n_members; m++)
    for (int j = 0; j < f->m[m].node->n_in; j++)
      f->m[m].ref[j] = (int8_t)(f->m[m].ref[j] == 0 ? at : f->m[m].ref[j] == at ? 0 : f->m[m].ref[j]);
}

/* Merge every assign group read only by another assign group's members
 * into it; *n_merged: groups merged away (n_members 0). */
static graft_status merge_assigns(merge_ctx *mc, int n_groups, int *n_merged) {
  graft__plan *p = mc->p;
  const graft__graph *g = p->g;
  const uint32_t n = g->n_nodes;
  *n_merged = 0;
  mc->group_of = graft__calloc(n ? n : 1, sizeof *mc->group_of);
  mc->n_read = graft__calloc(n ? n : 1, sizeof *mc->n_read);
  if (!mc->group_of || !mc->n_read) return GRAFT_ENOMEM;
  for (int k = 0; k < n_groups; k++) mc->group_of[mc->roots[k]] = (uint32_t)k + 1;
  for (uint32_t id = 0; id < n; id++) {
    const graft__node *nd = graft__graph_node(g, id);
    if (!p->live[id] || mc->group_of[id]) continue;
    for (int j = 0; j < nd->n_in; j++) mc->n_read[nd->in[j]]++;
  }
  for (int k = 0; k < n_groups; k++)
    for (int j = 0; j < mc->n_ext[k]; j++) mc->n_read[ext_of(mc, k)[j]]++;
  for (int i = 0; i < g->n_outputs; i++) mc->n_read[g->outputs[i]]++;
  for (int w = 0; w < n_groups; w++) {
    graft__fused *fw = &mc->progs[w];
    const graft__node *rn = graft__graph_node(g, mc->roots[w]);
    /* its packed value read by nothing, as a direct optimizer step's */
    if (!fw->n_members || rn->op != GRAFT__OP_ASSIGN || mc->n_read[mc->roots[w]]) continue;
    for (int j = 0; j < mc->n_ext[w]; j++) {
      uint32_t e = ext_of(mc, w)[j];
      int q = (int)mc->group_of[e] - 1;
      if (q < 0 || !may_merge(mc, w, q, j)) continue;
      graft_status st = merge(mc, w, q, j);
      if (st) return st;
      ++*n_merged;
      j = -1; /* its inputs changed: look again */
    }
    if (fw->n_dst) full_input_first(mc, w);
  }
  return GRAFT_OK;
}

/* The node of a group writing several variables: an UPDATE of them whose
 * value packs their new values (kernels.h). */
static graft_status make_update(graft__plan *p, graft__node *r, const graft__fused *f) {
  int64_t packed;
  if (graft__size_mul(f->numel, f->n_dst, &packed)) return GRAFT_ENOMEM;
  r->op = GRAFT__OP_UPDATE;
  memset(&r->attr.update, 0, sizeof r->attr.update);
  r->attr.update.n_vars = f->n_dst;
  for (int m = 0; m < f->n_members; m++)
    if (f->m[m].dst >= 0) r->attr.update.var[f->m[m].dst] = var_of(f->m[m].node);
  graft__tview *v = graft__plan_view(p, r->id);
  v->numel = packed;
  v->rank = 1;
  p->shapes[(size_t)r->id * GRAFT_MAX_RANK] = packed;
  return GRAFT_OK;
}

/* The groups as machine code where fused_jit.c takes them (the others
 * keep the interpreter). */
static graft_status compile(graft__plan *p, const uint32_t *roots, int n_groups) {
  graft__fused **gs = graft__malloc((size_t)n_groups * sizeof *gs);
  graft__fused_io *io = graft__malloc((size_t)n_groups * sizeof *io);
  if (!gs || !io) {
    graft__free(gs);
    graft__free(io);
    return GRAFT_ENOMEM;
  }
  for (int k = 0; k < n_groups; k++) {
    const graft__node *r = graft__graph_node(p->g, roots[k]);
    gs[k] = &p->fused[k];
    io[k].n_in = p->fused[k].n_members ? r->n_in : 0; /* (merged away: not compiled) */
    for (int j = 0; j < io[k].n_in && j < GRAFT__FUSED_MAX_IN; j++)
      io[k].in[j] = graft__plan_view(p, r->in[j]);
  }
  p->fused_code = graft__fused_compile(gs, io, n_groups, &p->fused_code_len);
  for (int k = 0; k < n_groups; k++) p->stats.fused_compiled += p->fused[k].code != NULL;
  graft__free(gs);
  graft__free(io);
  return GRAFT_OK;
}

graft_status graft__plan_fuse(graft__plan *p) {
  fuse_ctx c = {.p = p, .g = p->g};
  if (readers(&c) || read_through_assigns(&c)) {
    graft__free(c.cons_off);
    graft__free(c.cons);
    return GRAFT_ENOMEM;
  }
  graft__free(c.cons_off);
  graft__free(c.cons);
  c.cons_off = c.cons = NULL;
  const graft__graph *g = c.g = p->g; /* with the readers redirected */
  uint32_t n = g->n_nodes;
  uint32_t *roots = NULL, *ext_all = NULL, *ext_off = NULL;
  int *n_ext = NULL;
  int n_groups = 0;
  int64_t cap = 0, ext_cap = 0, n_ext_all = 0, off_cap = 0, nx_cap = 0;
  graft__fused *progs = NULL;
  int64_t prog_cap = 0;
  graft_status st = GRAFT_ENOMEM;
  c.needed = graft__calloc(n ? n : 1, 1);
  c.in_g = graft__calloc(n ? n : 1, sizeof *c.in_g);
  c.rejected = graft__calloc(n ? n : 1, sizeof *c.rejected);
  if (!c.needed || !c.in_g || !c.rejected || readers(&c)) goto out;
  for (int i = 0; i < g->n_outputs; i++) c.needed[g->outputs[i]] = 1;
  for (uint32_t id = 0; id < n; id++) {
    const graft__node *nd = graft__graph_node(g, id);
    if ((graft__ops[nd->op].flags & GRAFT__OPF_SIDE_EFFECT) || graft__node_fallible(nd)) c.needed[id] = 1;
  }
  for (uint32_t id = n; id-- > 0;) {
    const graft__node *nd = graft__graph_node(g, id);
    if (!p->live[id] || (graft__ops[nd->op].flags & GRAFT__OPF_EXTERNAL)) continue;
    if (!c.needed[id]) { /* every reader computes it in its group */
      p->live[id] = 0;
      p->stats.fused_dropped++;
      continue;
    }
    if (root_op(nd) && view_of(&c, id)->numel > 0) {
      grow(&c, id);
      if (c.n_mem >= 2) {
        if (graft__grow((void **)&progs, &prog_cap, n_groups + 1, sizeof *progs) ||
            graft__grow((void **)&roots, &cap, n_groups + 1, sizeof *roots) ||
            graft__grow((void **)&n_ext, &nx_cap, n_groups + 1, sizeof *n_ext) ||
            graft__grow((void **)&ext_off, &off_cap, n_groups + 1, sizeof *ext_off) ||
            graft__grow((void **)&ext_all, &ext_cap, n_ext_all + GRAFT__FUSED_MAX_IN, sizeof *ext_all))
          goto out;
        program(&c, &progs[n_groups], ext_all + n_ext_all, &n_ext[n_groups]);
        roots[n_groups] = id;
        ext_off[n_groups] = (uint32_t)n_ext_all;
        for (int q = 0; q < n_ext[n_groups]; q++) c.needed[ext_all[n_ext_all + q]] = 1;
        n_ext_all += n_ext[n_groups];
        p->stats.fused_ops += c.n_mem;
        n_groups++;
        continue;
      }
    }
    for (int j = 0; j < nd->n_in; j++) c.needed[nd->in[j]] = 1;
  }
  int n_merged = 0;
  merge_ctx mc = {p, progs, roots, n_ext, ext_off, &ext_all, &ext_cap, &n_ext_all, NULL, NULL};
  graft_status mst = merge_assigns(&mc, n_groups, &n_merged);
  graft__free(mc.group_of);
  graft__free(mc.n_read);
  if (mst) goto out;
  p->stats.fused_groups = n_groups - n_merged;
  st = GRAFT_OK;
  p->fused = progs;
  p->fused_in = ext_all;
  progs = NULL;
  ext_all = NULL;
  /* Every root runs as traced: its group's copy of it, taken before any
   * root takes its group's inputs.  A member may root a group of its own:
   * a cheap value that one group recomputes and a later one, at its limits
   * (members or inputs), reads instead, which makes it needed.  Its node
   * (the plan's copy, when its chunk was copied before, e.g. by
   * read_through_assigns) is about to get that group's inputs and program,
   * so the members that compute it run the copy too. */
  uint32_t *group_of = c.in_g; /* 1 + the group a node roots, else 0 */
  memset(group_of, 0, (size_t)n * sizeof *group_of);
  for (int k = 0; k < n_groups; k++) {
    graft__fused *f = &p->fused[k];
    f->root = *graft__graph_node(g, roots[k]);
    /* (a group merged into another has no members: its root's copy is
     * what its assign member there runs) */
    if (f->n_members) f->m[f->n_members - 1].node = &f->root;
    group_of[roots[k]] = (uint32_t)k + 1;
  }
  for (int k = 0; k < n_groups; k++)
    for (int m = 0; m + 1 < p->fused[k].n_members; m++) {
      uint32_t o = group_of[p->fused[k].m[m].node->id];
      if (o) p->fused[k].m[m].node = &p->fused[o - 1].root;
    }
  for (int k = 0; k < n_groups && !st; k++) {
    graft__fused *f = &p->fused[k];
    if (!f->n_members) continue;
    graft__node *r = graft__plan_writable(p, roots[k]);
    if (!r) {
      st = GRAFT_ENOMEM;
      break;
    }
    r->n_in = n_ext[k];
    r->in = p->fused_in + ext_off[k];
    r->fused = f;
    if (f->n_dst) st = make_update(p, r, f);
  }
  if (!st && n_groups && p->opts.fusion == GRAFT__FUSION_COMPILED) st = compile(p, roots, n_groups);
out:
  graft__free(c.cons_off);
  graft__free(c.cons);
  graft__free(c.needed);
  graft__free(c.in_g);
  graft__free(c.rejected);
  graft__free(roots);
  graft__free(n_ext);
  graft__free(ext_off);
  graft__free(ext_all);
  graft__free(progs);
  return st;
}
