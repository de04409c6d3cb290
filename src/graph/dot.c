/* Graphviz export of a traced graph. */
#include <stdio.h>

#include "graph/graph.h"

static const char *const role_color[] = {"black", "firebrick", "royalblue"};

static void node_style(const graft__node *n, const char **shape, const char **fill) {
  *shape = "box";
  *fill = "white";
  switch (n->op) {
  case GRAFT__OP_INPUT: *shape = "invhouse"; *fill = "palegreen"; break;
  case GRAFT__OP_VAR_READ: *shape = "cylinder"; *fill = "khaki"; break;
  case GRAFT__OP_CONST:
  case GRAFT__OP_FILL: *shape = "ellipse"; *fill = "lightgrey"; break;
  default:
    if (graft__ops[n->op].flags & GRAFT__OPF_SIDE_EFFECT) {
      *shape = "hexagon";
      *fill = "orange";
    }
  }
}

/* Escape for a DOT quoted string (names are user text). */
static void put_escaped(FILE *to, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', to);
    fputc(*s, to);
  }
}

/* Clusters (fused groups, drawn around their members) in id order of
 * their roots. */
static void write_clusters(const graft__graph *g, const graft__dot_clusters *c, FILE *to) {
  for (uint32_t r = 0; r < g->n_nodes; r++) {
    if (!c->name[r]) continue;
    fprintf(to, "  subgraph cluster_fused%u {\n    label=\"#%u ", r, r);
    put_escaped(to, c->name[r]);
    fprintf(to, "\";\n    style=\"rounded,dashed\";\n    color=purple;\n    fontname=\"Helvetica\";\n");
    for (uint32_t id = 0; id <= r; id++)
      if (c->of[id] == r) fprintf(to, "    n%u;\n", id);
    fprintf(to, "  }\n");
  }
}

graft_status graft__graph_write_dot(const graft__graph *g, const graft__dot_clusters *c, FILE *to) {
  uint8_t *live = graft__malloc(g->n_nodes ? g->n_nodes : 1);
  if (!live) return GRAFT_ENOMEM;
  graft__graph_prune(g, live);
  fprintf(to, "digraph \"");
  put_escaped(to, g->name);
  fprintf(to, "\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", style=filled];\n");
  for (uint32_t id = 0; id < g->n_nodes; id++) {
    const graft__node *n = graft__graph_node(g, id);
    const char *shape, *fill;
    char dims[96];
    node_style(n, &shape, &fill);
    graft__shape_str(dims, sizeof dims, n->rank, n->shape);
    fprintf(to, "  n%u [shape=%s, fillcolor=%s, color=%s, style=\"filled%s\", label=\"#%u %s", id,
            shape, fill, role_color[n->role < 3 ? n->role : 0], live[id] ? "" : ",dashed", id,
            graft__ops[n->op].name);
    if (n->op == GRAFT__OP_VAR_READ || (graft__ops[n->op].flags & GRAFT__OPF_SIDE_EFFECT)) {
      graft_variable *const *vs = &n->attr.var.var;
      int nv = n->op == GRAFT__OP_VAR_READ ? 1 : graft__node_writes(n, &vs);
      for (int j = 0; j < nv; j++) {
        fputc(j ? ',' : ' ', to);
        put_escaped(to, vs[j]->name);
      }
    } else if (n->op == GRAFT__OP_INPUT) {
      fprintf(to, " %d", n->attr.input.index);
    }
    fprintf(to, "\\n%s %s\"];\n", graft_dtype_name((graft_dtype)n->dtype), dims);
    for (int k = 0; k < n->n_in; k++) fprintf(to, "  n%u -> n%u;\n", n->in[k], id);
  }
  if (c) write_clusters(g, c, to);
  for (int i = 0; i < g->n_outputs; i++) {
    fprintf(to, "  out%d [shape=house, fillcolor=lightblue, label=\"output %d\"];\n", i, i);
    fprintf(to, "  n%u -> out%d;\n", g->outputs[i], i);
  }
  fprintf(to, "}\n");
  graft__free(live);
  /* A full disk shows at the flush, not at the buffered writes. */
  return fflush(to) || ferror(to) ? GRAFT_EIO : GRAFT_OK;
}
