/* The graph IR: chunked append-only node storage, symbols, pruning. */
#include <string.h>

#include "graph/graph.h"

/* Graph serials: 32 bits, never 0 (the poison's).  A stale handle is taken
 * for a live one only if its graph was made exactly a multiple of 2^32 - 1
 * graphs earlier and that graph's serial is live again. */
static uint32_t next_serial;

graft__graph *graft__graph_create(const char *name, int n_inputs, int n_outputs) {
  graft__graph *g = graft__calloc(1, sizeof *g);
  if (!g) return NULL;
  do g->serial = __atomic_add_fetch(&next_serial, 1, __ATOMIC_RELAXED);
  while (g->serial == 0);
  g->name = graft__strdup(name ? name : "function");
  g->inputs = graft__calloc((size_t)(n_inputs ? n_inputs : 1), sizeof *g->inputs);
  g->outputs = graft__calloc((size_t)(n_outputs ? n_outputs : 1), sizeof *g->outputs);
  if (!g->name || !g->inputs || !g->outputs) {
    graft__graph_destroy(g);
    return NULL;
  }
  g->n_inputs = n_inputs;
  g->n_outputs = n_outputs;
  return g;
}

void graft__graph_destroy(graft__graph *g) {
  if (!g) return;
  for (int64_t i = 0; i < g->n_chunks; i++) graft__free(g->chunks[i]);
  graft__free(g->chunks);
  for (int64_t i = 0; i < g->n_vars; i++) graft__variable_unref(g->vars[i]);
  graft__free(g->vars);
  for (int64_t i = 0; i < g->n_subs; i++) graft__sub_unref(g->subs[i]);
  graft__free(g->subs);
  graft__ptrmap_free(&g->var_set);
  graft__arena_free(&g->arena);
  graft__free(g->syms);
  graft__free(g->inputs);
  graft__free(g->outputs);
  graft__free(g->name);
  graft__free(g);
}

graft__node *graft__graph_add(graft__graph *g, int op, int n_in, const uint32_t *in) {
  if (g->n_nodes == GRAFT__POISON_ID - 1) return NULL;
  uint32_t id = g->n_nodes;
  if ((id & (GRAFT__CHUNK - 1)) == 0 && (int64_t)(id >> GRAFT__CHUNK_BITS) == g->n_chunks) {
    if (graft__grow((void **)&g->chunks, &g->cap_chunks, g->n_chunks + 1, sizeof *g->chunks))
      return NULL;
    graft__node *c = graft__aligned_alloc(GRAFT__CHUNK * sizeof *c, GRAFT__ALIGN);
    if (!c) return NULL;
    g->chunks[g->n_chunks++] = c;
  }
  uint32_t *ins = NULL;
  if (n_in > 0) {
    ins = graft__arena_alloc(&g->arena, (size_t)n_in * sizeof *ins);
    if (!ins) return NULL;
    memcpy(ins, in, (size_t)n_in * sizeof *ins);
  }
  graft__node *n = graft__graph_node(g, id);
  memset(n, 0, sizeof *n);
  n->id = id;
  n->op = (uint16_t)op;
  n->n_in = n_in;
  n->in = ins;
  g->n_nodes++;
  return n;
}

int64_t graft__graph_new_sym(graft__graph *g, int input, int dim) {
  if (graft__grow((void **)&g->syms, &g->cap_syms, g->n_syms + 1, sizeof *g->syms)) return -1;
  g->syms[g->n_syms].input = input;
  g->syms[g->n_syms].dim = dim;
  return GRAFT_DIM_SYM(g->n_syms++);
}

graft_status graft__graph_ref_var(graft__graph *g, graft_variable *v) {
  if (graft__ptrmap_get(&g->var_set, v)) return GRAFT_OK;
  if (graft__grow((void **)&g->vars, &g->cap_vars, g->n_vars + 1, sizeof *g->vars) ||
      graft__ptrmap_put(&g->var_set, v, (uint32_t)g->n_vars))
    return GRAFT_ENOMEM;
  graft__variable_ref(v);
  g->vars[g->n_vars++] = v;
  return GRAFT_OK;
}

/* Ids are topological, so one backward sweep marks everything that reaches
 * an output, a side effect or an op that can fail on data: pruning may drop
 * work, never a check (a label out of range must fail the call whatever it
 * outputs, so that no assign commits an update computed from it). */
void graft__graph_prune(const graft__graph *g, uint8_t *live) {
  memset(live, 0, g->n_nodes);
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] < g->n_nodes) live[g->outputs[i]] = 1;
  for (uint32_t id = g->n_nodes; id-- > 0;) {
    const graft__node *n = graft__graph_node(g, id);
    if ((graft__ops[n->op].flags & GRAFT__OPF_SIDE_EFFECT) || graft__node_fallible(n)) live[id] = 1;
    if (!live[id]) continue;
    for (int i = 0; i < n->n_in; i++) live[n->in[i]] = 1;
  }
}

void graft__node_shape(const graft__node *n, graft__shape *out) {
  out->dtype = (graft_dtype)n->dtype;
  out->rank = n->rank;
  memcpy(out->dims, n->shape, sizeof out->dims);
}
