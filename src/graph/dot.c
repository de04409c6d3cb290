/* Graphviz export of a traced graph.  A control node's bodies (cond's
 * branches, a loop's cond and body, a scan's or remat's body) are drawn as
 * clusters beside it, nested as the control flow nests; their nodes are
 * named with a prefix per body so that every name is unique. */
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"

static const char *const role_color[] = {"black", "firebrick", "royalblue"};

/* What each body of a construct is called (enum graft__ctl_kind). */
static const char *const body_name[][2] = {[GRAFT__CTL_COND] = {"then", "else"},
                                           [GRAFT__CTL_WHILE] = {"cond", "body"},
                                           [GRAFT__CTL_SCAN] = {"body", NULL},
                                           [GRAFT__CTL_REMAT] = {"body", NULL}};

/* A body's node name prefix: "c<control id>_<body>_" per level. */
#define PREFIX_LEVEL 24

typedef struct dot_out {
  FILE *to;
  uint8_t *live;               /* scratch: the liveness of the graph being drawn */
  char *pre;                   /* its node name prefix ("" at the top) */
} dot_out;

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

/* Every node of g (pruned ones dashed) and its input edges, indented by
 * ind, named d->pre "n" id. */
static void write_nodes(dot_out *d, const graft__graph *g, int ind) {
  FILE *to = d->to;
  graft__graph_prune(g, d->live);
  for (uint32_t id = 0; id < g->n_nodes; id++) {
    const graft__node *n = graft__graph_node(g, id);
    const char *shape, *fill;
    char dims[96];
    node_style(n, &shape, &fill);
    graft__shape_str(dims, sizeof dims, n->rank, n->shape);
    fprintf(to, "%*s%sn%u [shape=%s, fillcolor=%s, color=%s, style=\"filled%s\", label=\"#%u %s",
            ind, "", d->pre, id, shape, fill, role_color[n->role < 3 ? n->role : 0],
            d->live[id] ? "" : ",dashed", id, graft__ops[n->op].name);
    if (n->op == GRAFT__OP_VAR_READ || (graft__ops[n->op].flags & GRAFT__OPF_SIDE_EFFECT)) {
      graft_variable *const *vs = &n->attr.var.var;
      int nv = n->op == GRAFT__OP_VAR_READ ? 1 : graft__node_writes(n, &vs);
      for (int j = 0; j < nv; j++) {
        fputc(j ? ',' : ' ', to);
        put_escaped(to, vs[j]->name);
      }
    } else if (n->op == GRAFT__OP_INPUT) {
      fprintf(to, " %d", n->attr.input.index);
    } else if (n->op == GRAFT__OP_GET) {
      fprintf(to, " %d", n->attr.get.index);
    }
    fprintf(to, "\\n%s %s\"];\n", graft_dtype_name((graft_dtype)n->dtype), dims);
    for (int k = 0; k < n->n_in; k++)
      fprintf(to, "%*s%sn%u -> %sn%u;\n", ind, "", d->pre, n->in[k], d->pre, id);
  }
}

/* Extend d->pre (len bytes long) with body k of control node id. */
static void enter_body(dot_out *d, size_t len, uint32_t id, int k) {
  snprintf(d->pre + len, PREFIX_LEVEL, "c%u_%d_", id, k);
}

/* The edges between control node n of the graph named by d->pre (len
 * bytes) and its bodies, dashed: from the node's input each body input
 * stands for, and from each body output to the GET that reads it (a while
 * loop's predicate to the node itself).  Drawn outside the node's cluster,
 * where both ends are already placed (an edge inside a cluster would pull
 * an outer node into it). */
static void write_body_edges(dot_out *d, size_t len, const graft__node *n, int ind) {
  const graft__ctl *c = n->attr.ctl.ctl;
  FILE *to = d->to;
  for (int k = 0; k < c->n_subs; k++) {
    const graft__graph *sg = c->sub[k]->g;
    d->pre[len] = '\0';
    for (int j = 0; j < sg->n_inputs; j++) {
      fprintf(to, "%*s%sn%u -> ", ind, "", d->pre, n->in[c->map[k][j]]);
      enter_body(d, len, n->id, k);
      fprintf(to, "%sn%u [style=dashed, color=grey40];\n", d->pre, sg->inputs[j]);
      d->pre[len] = '\0';
    }
    for (int i = 0; i < sg->n_outputs && i < c->n_out; i++) {
      int pred = c->kind == GRAFT__CTL_WHILE && k == 0;
      enter_body(d, len, n->id, k);
      fprintf(to, "%*s%sn%u -> ", ind, "", d->pre, sg->outputs[i]);
      d->pre[len] = '\0';
      fprintf(to, "%sn%u [style=dashed, color=grey40];\n", d->pre, pred ? n->id : c->gets[i]);
    }
  }
  d->pre[len] = '\0';
}

/* A cluster per control node of g (named by d->pre) holding the node and
 * a cluster per body, each body drawn like g, recursively; c (or NULL):
 * g's fused clusters, which keep their members. */
static void write_controls(dot_out *d, const graft__graph *g, const graft__dot_clusters *c,
                           int ind) {
  FILE *to = d->to;
  size_t len = strlen(d->pre);
  for (uint32_t id = 0; id < g->n_nodes; id++) {
    const graft__node *n = graft__graph_node(g, id);
    if (!(graft__ops[n->op].flags & GRAFT__OPF_CONTROL)) continue;
    const graft__ctl *ctl = n->attr.ctl.ctl;
    fprintf(to, "%*ssubgraph cluster_%sc%u {\n", ind, "", d->pre, id);
    fprintf(to, "%*slabel=\"#%u %s\";\n%*sstyle=rounded;\n%*scolor=grey40;\n"
            "%*sfontname=\"Helvetica\";\n", ind + 2, "", id, graft__ops[n->op].name, ind + 2, "",
            ind + 2, "", ind + 2, "");
    if (!c || c->of[id] == UINT32_MAX) fprintf(to, "%*s%sn%u;\n", ind + 2, "", d->pre, id);
    for (int k = 0; k < ctl->n_subs; k++) {
      enter_body(d, len, id, k);
      fprintf(to, "%*ssubgraph cluster_%s {\n", ind + 2, "", d->pre);
      fprintf(to, "%*slabel=\"%s\";\n%*sstyle=\"rounded,dashed\";\n%*scolor=grey60;\n", ind + 4,
              "", body_name[ctl->kind][k], ind + 4, "", ind + 4, "");
      write_nodes(d, ctl->sub[k]->g, ind + 4);
      write_controls(d, ctl->sub[k]->g, NULL, ind + 4);
      fprintf(to, "%*s}\n", ind + 2, "");
      d->pre[len] = '\0';
    }
    fprintf(to, "%*s}\n", ind, "");
    write_body_edges(d, len, n, ind);
  }
}

/* The most nodes of g or of a body under it (*nodes), and how deeply
 * bodies nest under it (*depth, from depth). */
static void measure(const graft__graph *g, int depth, uint32_t *nodes, int *max_depth) {
  if (g->n_nodes > *nodes) *nodes = g->n_nodes;
  if (depth > *max_depth) *max_depth = depth;
  for (uint32_t id = 0; id < g->n_nodes; id++) {
    const graft__node *n = graft__graph_node(g, id);
    if (!(graft__ops[n->op].flags & GRAFT__OPF_CONTROL)) continue;
    for (int k = 0; k < n->attr.ctl.ctl->n_subs; k++)
      measure(n->attr.ctl.ctl->sub[k]->g, depth + 1, nodes, max_depth);
  }
}

graft_status graft__graph_write_dot(const graft__graph *g, const graft__dot_clusters *c, FILE *to) {
  uint32_t nodes = 1;
  int depth = 0;
  measure(g, 0, &nodes, &depth);
  /* Allocated before anything is written: no output on ENOMEM. */
  dot_out d = {to, graft__malloc(nodes), graft__calloc((size_t)depth * PREFIX_LEVEL + 1, 1)};
  if (!d.live || !d.pre) {
    graft__free(d.live);
    graft__free(d.pre);
    return GRAFT_ENOMEM;
  }
  fprintf(to, "digraph \"");
  put_escaped(to, g->name);
  fprintf(to, "\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", style=filled];\n");
  write_nodes(&d, g, 2);
  if (c) write_clusters(g, c, to);
  write_controls(&d, g, c, 2);
  for (int i = 0; i < g->n_outputs; i++) {
    fprintf(to, "  out%d [shape=house, fillcolor=lightblue, label=\"output %d\"];\n", i, i);
    fprintf(to, "  n%u -> out%d;\n", g->outputs[i], i);
  }
  fprintf(to, "}\n");
  graft__free(d.live);
  graft__free(d.pre);
  /* A full disk shows at the flush, not at the buffered writes. */
  return fflush(to) || ferror(to) ? GRAFT_EIO : GRAFT_OK;
}
