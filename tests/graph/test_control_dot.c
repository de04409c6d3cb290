/* graft_function_write_dot on graphs with control flow: each control node
 * gets a cluster labelled by its construct holding a cluster per body,
 * nested as the control flow nests, with the bodies' inputs wired to the
 * values they stand for and their outputs to the GETs that read them.  The
 * text is parsed back (nodes, edges, the clusters each sits in) and, where
 * Graphviz's `dot` is installed, laid out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

TU_RUNTIME_GROUP();

#define F64 GRAFT_F64

/* ---- the DOT text, parsed ----------------------------------------------- */

#define MAX_ITEMS 512
#define NAME_LEN 64
#define PATH_LEN 256

typedef struct dot_node {
  char name[NAME_LEN];
  char op[32];                 /* the op's DOT name */
  int arg;                     /* the number after it (INPUT's or GET's index), else -1 */
  int dashed;                  /* drawn as pruned */
  char path[PATH_LEN];         /* the clusters it is declared in, "/"-joined */
} dot_node;

typedef struct dot_edge {
  char from[NAME_LEN], to[NAME_LEN];
  int dashed;
  char path[PATH_LEN];         /* the clusters the statement is in */
} dot_edge;

typedef struct dot_cluster {
  char name[NAME_LEN];
  char label[64];
  char path[PATH_LEN];         /* the clusters around it */
  char members[8][NAME_LEN];   /* nodes named alone inside it */
  int n_members;
} dot_cluster;

typedef struct dot_doc {
  dot_node nodes[MAX_ITEMS];
  dot_edge edges[MAX_ITEMS];
  dot_cluster clusters[64];
  int n_nodes, n_edges, n_clusters;
} dot_doc;

static const char *skip_spaces(const char *s) {
  while (*s == ' ') s++;
  return s;
}

/* Copy the DOT identifier at s into out; returns the end. */
static const char *ident(const char *s, char *out) {
  size_t n = 0;
  while ((*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9')) && n + 1 < NAME_LEN)
    out[n++] = *s++;
  out[n] = '\0';
  return s;
}

/* Parse text (one statement a line, as graft writes it). */
static void parse(const char *text, dot_doc *d) {
  memset(d, 0, sizeof *d);
  int stack[16], depth = 0; /* open clusters, by index into d->clusters */
  char path[PATH_LEN] = "";
  const char *line = text;
  int in_graph = 0;
  while (*line) {
    const char *end = strchr(line, '\n');
    assert_non_null(end);
    const char *s = skip_spaces(line);
    char a[NAME_LEN], b[NAME_LEN];
    if (!strncmp(s, "digraph ", 8)) {
      in_graph = 1;
    } else if (!strncmp(s, "subgraph ", 9)) {
      assert_true(depth < 16 && d->n_clusters < 64);
      dot_cluster *c = &d->clusters[d->n_clusters];
      ident(s + 9, c->name);
      snprintf(c->path, sizeof c->path, "%s", path);
      stack[depth++] = d->n_clusters++;
      size_t len = strlen(path);
      snprintf(path + len, sizeof path - len, "/%s", c->name);
    } else if (*s == '}') {
      if (depth == 0) {
        assert_true(in_graph);
        in_graph = 0;
      } else {
        depth--;
        *strrchr(path, '/') = '\0';
      }
    } else if (!strncmp(s, "label=\"", 7) && depth > 0) {
      dot_cluster *c = &d->clusters[stack[depth - 1]];
      const char *q = strchr(s + 7, '"');
      snprintf(c->label, sizeof c->label, "%.*s", (int)(q - (s + 7)), s + 7);
    } else if (strncmp(s, "node ", 5) && strncmp(s, "edge ", 5)) {
      const char *p = skip_spaces(ident(s, a));
      if (!a[0]) {
        fail_msg("unexpected DOT line \"%.*s\"", (int)(end - line), line);
      } else if (!strncmp(p, "->", 2)) {
        p = ident(skip_spaces(p + 2), b);
        assert_true(d->n_edges < MAX_ITEMS);
        dot_edge *e = &d->edges[d->n_edges++];
        snprintf(e->from, sizeof e->from, "%s", a);
        snprintf(e->to, sizeof e->to, "%s", b);
        e->dashed = strstr(p, "style=dashed") != NULL && strstr(p, "style=dashed") < end;
        snprintf(e->path, sizeof e->path, "%s", path);
      } else if (*p == ';' && depth > 0) {
        dot_cluster *c = &d->clusters[stack[depth - 1]];
        assert_true(c->n_members < 8);
        snprintf(c->members[c->n_members++], NAME_LEN, "%s", a);
      } else if (*p == '[') {
        assert_true(d->n_nodes < MAX_ITEMS);
        dot_node *n = &d->nodes[d->n_nodes++];
        snprintf(n->name, sizeof n->name, "%s", a);
        /* label "#<id> <op>[ <arg>]\n..." (a graph output's: "output <i>") */
        const char *l = strstr(p, "label=\"");
        assert_true(l && l < end);
        l += 7;
        if (*l == '#') {
          for (l++; *l >= '0' && *l <= '9'; l++) continue;
          assert_int_equal(*l++, ' ');
        }
        size_t k = 0;
        for (; *l != ' ' && *l != '\\' && *l != '"' && k + 1 < sizeof n->op; l++) n->op[k++] = *l;
        n->op[k] = '\0';
        n->arg = *l == ' ' && l[1] >= '0' && l[1] <= '9' ? atoi(l + 1) : -1;
        const char *st = strstr(p, "style=\"");
        n->dashed = st && st < end && !strncmp(st + 7, "filled,dashed", 13);
        snprintf(n->path, sizeof n->path, "%s", path);
      }
    }
    line = end + 1;
  }
  assert_int_equal(depth, 0);
  assert_false(in_graph);
}

static const dot_node *node_named(const dot_doc *d, const char *name) {
  for (int i = 0; i < d->n_nodes; i++)
    if (!strcmp(d->nodes[i].name, name)) return &d->nodes[i];
  return NULL;
}

static const dot_cluster *cluster_named(const dot_doc *d, const char *name) {
  for (int i = 0; i < d->n_clusters; i++)
    if (!strcmp(d->clusters[i].name, name)) return &d->clusters[i];
  return NULL;
}

/* name is prefix "n<digits>": a node of the graph drawn with that prefix,
 * not of a body under it. */
static int own_node(const char *name, const char *prefix) {
  size_t len = strlen(prefix);
  if (strncmp(name, prefix, len) || name[len] != 'n') return 0;
  const char *id = name + len + 1;
  return *id && strspn(id, "0123456789") == strlen(id);
}

/* find_node's arg that matches any. */
#define ANY_ARG (-2)

/* The one node of the graph drawn with prefix with op and arg. */
static const dot_node *find_node(const dot_doc *d, const char *prefix, const char *op, int arg,
                                 const char *text) {
  const dot_node *hit = NULL;
  for (int i = 0; i < d->n_nodes; i++) {
    const dot_node *n = &d->nodes[i];
    if (!own_node(n->name, prefix) || strcmp(n->op, op) || (arg != ANY_ARG && n->arg != arg))
      continue;
    if (hit) fail_msg("two '%s %d' nodes under prefix \"%s\":\n%s", op, arg, prefix, text);
    hit = n;
  }
  if (!hit) fail_msg("no '%s %d' node under prefix \"%s\":\n%s", op, arg, prefix, text);
  return hit;
}

/* The edges into node `to`: their count; *from the last one's source. */
static int edges_into(const dot_doc *d, const char *to, const dot_edge **from) {
  int count = 0;
  for (int i = 0; i < d->n_edges; i++)
    if (!strcmp(d->edges[i].to, to)) {
      *from = &d->edges[i];
      count++;
    }
  return count;
}

/* A dashed edge from a node whose name starts with from_prefix to `to`. */
static int dashed_edge_from(const dot_doc *d, const char *from_prefix, const char *to) {
  for (int i = 0; i < d->n_edges; i++) {
    const dot_edge *e = &d->edges[i];
    if (e->dashed && !strcmp(e->to, to) && !strncmp(e->from, from_prefix, strlen(from_prefix)))
      return 1;
  }
  return 0;
}

/* The cluster named name exists, sits directly in the one named parent
 * ("" for the top), and is labelled label. */
static void assert_cluster(const dot_doc *d, const char *name, const char *parent, const char *label,
                           const char *text) {
  const dot_cluster *c = cluster_named(d, name);
  if (!c) fail_msg("no cluster %s:\n%s", name, text);
  const char *at = strrchr(c->path, '/');
  if (strcmp(at ? at + 1 : "", parent))
    fail_msg("cluster %s is in \"%s\", expected in %s:\n%s", name, c->path, parent, text);
  if (strcmp(c->label, label))
    fail_msg("cluster %s is labelled \"%s\", expected \"%s\":\n%s", name, c->label, label, text);
}

/* The input nodes of the body with prefix body (n of them, "input j") each
 * have one incoming edge, dashed, from the node of the graph with prefix
 * outer whose op is src_op with arg src_arg[j]. */
static void assert_inputs_wired(const dot_doc *d, const char *body, int n, const char *outer,
                                const char *src_op, const int *src_arg, const char *text) {
  for (int j = 0; j < n; j++) {
    const dot_node *in = find_node(d, body, "input", j, text);
    const dot_node *src = find_node(d, outer, src_op, src_arg[j], text);
    const dot_edge *e = NULL;
    if (edges_into(d, in->name, &e) != 1 || !e->dashed || strcmp(e->from, src->name))
      fail_msg("%s (input %d) is not fed by one dashed edge from %s (%s %d):\n%s", in->name, j,
               src->name, src_op, src_arg[j], text);
  }
  int count = 0;
  for (int i = 0; i < d->n_nodes; i++)
    count += own_node(d->nodes[i].name, body) && !strcmp(d->nodes[i].op, "input");
  if (count != n) fail_msg("body %s has %d inputs, expected %d:\n%s", body, count, n, text);
}

/* Every node declared once; every edge statement inside every cluster
 * around both its ends (Graphviz puts a node named in a cluster into it,
 * so an edge to an outer node must not sit inside an inner cluster). */
static void assert_well_formed(const dot_doc *d, const char *text) {
  for (int i = 0; i < d->n_nodes; i++)
    for (int j = 0; j < i; j++)
      if (!strcmp(d->nodes[i].name, d->nodes[j].name))
        fail_msg("node %s declared twice:\n%s", d->nodes[i].name, text);
  for (int i = 0; i < d->n_edges; i++) {
    const dot_edge *e = &d->edges[i];
    const dot_node *a = node_named(d, e->from), *b = node_named(d, e->to);
    if (!a || !b) fail_msg("edge %s -> %s names an undeclared node:\n%s", e->from, e->to, text);
    size_t len = strlen(e->path);
    if (strncmp(a->path, e->path, len) || strncmp(b->path, e->path, len))
      fail_msg("edge %s -> %s sits in \"%s\", inside a cluster around one end only:\n%s", e->from,
               e->to, e->path, text);
  }
}

/* Lay text out with Graphviz's dot where it is installed (skipped where
 * not): it must be valid DOT. */
static void assert_dot_accepts(const char *text) {
  if (system("command -v dot >/dev/null 2>&1") != 0) {
    print_message("dot not installed: layout check skipped\n");
    return;
  }
  char path[] = "/tmp/graft_control_dot_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *fp = fdopen(fd, "w");
  assert_non_null(fp);
  assert_int_equal(fputs(text, fp) >= 0, 1);
  assert_int_equal(fclose(fp), 0);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "dot -Tsvg %s -o /dev/null 2>%s.err", path, path);
  int rc = system(cmd);
  char err_path[64];
  snprintf(err_path, sizeof err_path, "%s.err", path);
  FILE *ef = fopen(err_path, "r");
  char err[512] = "";
  if (ef) {
    size_t n = fread(err, 1, sizeof err - 1, ef);
    err[n] = '\0';
    fclose(ef);
  }
  remove(err_path);
  remove(path);
  if (rc != 0 || err[0]) fail_msg("dot -Tsvg: exit %d, \"%s\" on:\n%s", rc, err, text);
}

/* f's DOT text (*text, malloc'ed) parsed (malloc'ed) and checked well
 * formed. */
static dot_doc *dot_of(graft_function *f, char **text) {
  size_t len = 0;
  *text = NULL;
  FILE *m = open_memstream(text, &len);
  assert_non_null(m);
  tu_assert_status(graft_function_write_dot(f, m), GRAFT_OK);
  assert_int_equal(fclose(m), 0);
  dot_doc *d = malloc(sizeof *d);
  assert_non_null(d);
  parse(*text, d);
  assert_well_formed(d, *text);
  return d;
}

/* out (size bytes) = the formatted text; fails the test when it does not
 * fit. */
static void fmt_to(char *out, size_t size, const char *fmt, ...) TU_PRINTF_(3, 4);
static void fmt_to(char *out, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, size, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= size) fail_msg("name \"%s...\" longer than %zu bytes", out, size);
}

/* A constant that stays in the body that traces it (graft_constant): a
 * graft_scalar there would be traced in the function's trace and captured,
 * one more body input than these graphs' wiring checks count. */
static graft_value *body_const(graft_trace *t, double v) {
  return graft_constant(t, F64, 0, NULL, &v);
}

/* ---- a scan whose body holds a cond ------------------------------------- */

/* The outermost trace's w, which the then branch reads (captured twice:
 * by the scan body, then by the branch). */
typedef struct rnn_user {
  graft_value *w;
} rnn_user;

/* then: tanh(h x + w) (and an unused exp(x): pruned); else: h - x. */
static graft_status then_fn(graft_trace *t, int n, graft_value *const *in, int no,
                            graft_value **out, void *u) {
  (void)n, (void)no;
  (void)graft_exp(t, in[1]);
  out[0] = graft_tanh(t, graft_add(t, graft_mul(t, in[0], in[1]), ((rnn_user *)u)->w));
  return GRAFT_OK;
}
static graft_status else_fn(graft_trace *t, int n, graft_value *const *in, int no,
                            graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = graft_sub(t, in[0], in[1]);
  return GRAFT_OK;
}

/* carry h, slice x: r = cond(sum(x) > 0, then, else)(h, x); (r, 2 r). */
static graft_status rnn_body(graft_trace *t, int n, graft_value *const *in, int no,
                             graft_value **out, void *u) {
  (void)n, (void)no;
  graft_value *pred =
      graft_greater(t, graft_reduce_sum(t, in[1], 0, NULL, 0), body_const(t, 0));
  graft_value *r;
  graft_cond(t, pred, 2, in, then_fn, else_fn, u, 1, &r);
  out[0] = r;
  out[1] = graft_mul(t, r, body_const(t, 2));
  return GRAFT_OK;
}

/* in: xs [T, 3], h0 [3], w [3]; out: the final h, the ys. */
static graft_status rnn(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                        graft_value **out, void *u) {
  (void)n_in, (void)n_out, (void)u;
  rnn_user ru = {in[2]};
  return graft_scan(t, rnn_body, &ru, 1, &in[1], 1, &in[0], 1, out, NULL);
}

static void test_graft_function_write_dot__scan_with_cond_clusters(void **state) {
  (void)state;
  graft_function *f = tu_function(g_rt, "dot_rnn", rnn, NULL, 3, 2, NULL);
  tu_rng rng = {0xc0d07ULL};
  const int64_t sx[] = {4, 3}, sh[] = {3};
  graft_tensor *in[3] = {tu_tensor_rand(&rng, F64, 2, sx, -1, 1),
                         tu_tensor_rand(&rng, F64, 1, sh, -1, 1),
                         tu_tensor_rand(&rng, F64, 1, sh, -1, 1)};
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_call_ok(f, 3, in, 2, out);
  char *text;
  dot_doc *d = dot_of(f, &text);

  /* the scan: its cluster holds it and its body's cluster */
  const dot_node *scan = find_node(d, "", "scan", ANY_ARG, text);
  assert_string_equal(scan->path, "");
  char sc[NAME_LEN], body[NAME_LEN], label[64];
  fmt_to(sc, sizeof sc, "cluster_c%s", scan->name + 1);
  fmt_to(body, sizeof body, "c%s_0_", scan->name + 1);
  fmt_to(label, sizeof label, "#%s scan", scan->name + 1);
  assert_cluster(d, sc, "", label, text);
  const dot_cluster *scl = cluster_named(d, sc);
  assert_int_equal(scl->n_members, 1);
  assert_string_equal(scl->members[0], scan->name);
  char body_cluster[NAME_LEN];
  fmt_to(body_cluster, sizeof body_cluster, "cluster_%s", body);
  assert_cluster(d, body_cluster, sc, "body", text);

  /* its body's inputs: the carry (h0 = input 1), the slice of xs (input
   * 0), the captured w (input 2) */
  static const int scan_src[] = {1, 0, 2};
  assert_inputs_wired(d, body, 3, "", "input", scan_src, text);

  /* the cond in the body: a cluster with then and else */
  const dot_node *cond = find_node(d, body, "cond", ANY_ARG, text);
  char want_path[PATH_LEN];
  fmt_to(want_path, sizeof want_path, "/%s/%s", sc, body_cluster);
  assert_string_equal(cond->path, want_path);
  const char *cid = cond->name + strlen(body) + 1;
  char cc[NAME_LEN], then_b[NAME_LEN], else_b[NAME_LEN], then_c[NAME_LEN], else_c[NAME_LEN];
  fmt_to(cc, sizeof cc, "cluster_%sc%s", body, cid);
  fmt_to(label, sizeof label, "#%s cond", cid);
  assert_cluster(d, cc, body_cluster, label, text);
  fmt_to(then_b, sizeof then_b, "%sc%s_0_", body, cid);
  fmt_to(else_b, sizeof else_b, "%sc%s_1_", body, cid);
  fmt_to(then_c, sizeof then_c, "cluster_%s", then_b);
  fmt_to(else_c, sizeof else_c, "cluster_%s", else_b);
  assert_cluster(d, then_c, cc, "then", text);
  assert_cluster(d, else_c, cc, "else", text);

  /* the branches' inputs come from the scan body's: h, x, and (then only)
   * the w the body captured */
  static const int cond_src[] = {0, 1, 2};
  assert_inputs_wired(d, then_b, 3, body, "input", cond_src, text);
  assert_inputs_wired(d, else_b, 2, body, "input", cond_src, text);

  /* nodes drawn in their branch's cluster, the unused exp dashed */
  const dot_node *ex = find_node(d, then_b, "exp", ANY_ARG, text);
  const dot_node *th = find_node(d, then_b, "tanh", ANY_ARG, text);
  const dot_node *sb = find_node(d, else_b, "sub", ANY_ARG, text);
  fmt_to(want_path, sizeof want_path, "/%s/%s/%s/%s", sc, body_cluster, cc, then_c);
  assert_string_equal(ex->path, want_path);
  assert_string_equal(th->path, want_path);
  fmt_to(want_path, sizeof want_path, "/%s/%s/%s/%s", sc, body_cluster, cc, else_c);
  assert_string_equal(sb->path, want_path);
  assert_true(ex->dashed);
  assert_false(th->dashed);
  assert_false(sb->dashed);
  assert_false(find_node(d, body, "mul", ANY_ARG, text)->dashed);

  /* outputs: each branch's to the cond's GET 0; the body's to the scan's
   * GETs 0 (the carry) and 1 (the ys) */
  const dot_node *cget = find_node(d, body, "get", 0, text);
  if (!dashed_edge_from(d, then_b, cget->name) || !dashed_edge_from(d, else_b, cget->name))
    fail_msg("the branches' outputs do not reach %s:\n%s", cget->name, text);
  const dot_edge *e = NULL;
  assert_int_equal(edges_into(d, th->name, &e), 1); /* tanh's own input only */
  for (int i = 0; i < 2; i++) {
    const dot_node *get = find_node(d, "", "get", i, text);
    int from_scan = 0, from_body = 0;
    for (int k = 0; k < d->n_edges; k++) {
      const dot_edge *g = &d->edges[k];
      if (strcmp(g->to, get->name)) continue;
      from_scan += !strcmp(g->from, scan->name) && !g->dashed;
      from_body += g->dashed && own_node(g->from, body);
    }
    if (from_scan != 1 || from_body != 1)
      fail_msg("%s (get %d): %d edges from the scan, %d from its body's outputs:\n%s", get->name,
               i, from_scan, from_body, text);
  }
  /* the body's carry output (the cond's GET) reaches the scan's GET 0 */
  if (!dashed_edge_from(d, cget->name, find_node(d, "", "get", 0, text)->name))
    fail_msg("the carry %s does not reach the scan's get 0:\n%s", cget->name, text);
  assert_dot_accepts(text);

  free(d);
  free(text);
  tu_destroy_outs(out, 2);
  for (int i = 0; i < 3; i++) graft_tensor_destroy(in[i]);
  graft_function_destroy(f);
}

/* ---- a while loop whose body holds a remat ------------------------------ */

static graft_status count_cond(graft_trace *t, int n, graft_value *const *in, int no,
                               graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = graft_less(t, in[0], body_const(t, 5));
  return GRAFT_OK;
}
static graft_status double_fn(graft_trace *t, int n, graft_value *const *in, int no,
                              graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = graft_mul(t, in[0], body_const(t, 2));
  return GRAFT_OK;
}
static graft_status count_body(graft_trace *t, int n, graft_value *const *in, int no,
                               graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = graft_add(t, in[0], body_const(t, 1));
  graft_remat(t, double_fn, NULL, 1, &in[1], 1, &out[1]);
  return GRAFT_OK;
}
/* (i, x) = (0, x0); while i < 5: (i + 1, 2 x).  in: i0, x0. */
static graft_status count_loop(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *u) {
  (void)n_in, (void)n_out, (void)u;
  return graft_while_loop(t, count_cond, count_body, NULL, 2, in, out, NULL);
}

static void test_graft_function_write_dot__while_loop_with_remat_clusters(void **state) {
  (void)state;
  graft_function *f = tu_function(g_rt, "dot_loop", count_loop, NULL, 2, 2, NULL);
  const int64_t sx[] = {2};
  const double zero = 0, x0[2] = {1, -3};
  graft_tensor *in[2] = {tu_tensor_from(F64, 0, NULL, &zero), tu_tensor_from(F64, 1, sx, x0)};
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_call_ok(f, 2, in, 2, out);
  const double want[2] = {32, -96};
  tu_assert_values(out[1], want, 2, 0, "x0 doubled 5 times");
  char *text;
  dot_doc *d = dot_of(f, &text);

  const dot_node *loop = find_node(d, "", "while_loop", ANY_ARG, text);
  const char *id = loop->name + 1;
  char lc[NAME_LEN], cond_b[NAME_LEN], body_b[NAME_LEN], cond_c[NAME_LEN], body_c[NAME_LEN],
      label[64];
  fmt_to(lc, sizeof lc, "cluster_c%s", id);
  fmt_to(label, sizeof label, "#%s while_loop", id);
  assert_cluster(d, lc, "", label, text);
  fmt_to(cond_b, sizeof cond_b, "c%s_0_", id);
  fmt_to(body_b, sizeof body_b, "c%s_1_", id);
  fmt_to(cond_c, sizeof cond_c, "cluster_%s", cond_b);
  fmt_to(body_c, sizeof body_c, "cluster_%s", body_b);
  assert_cluster(d, cond_c, lc, "cond", text);
  assert_cluster(d, body_c, lc, "body", text);
  static const int src[] = {0, 1};
  assert_inputs_wired(d, cond_b, 2, "", "input", src, text);
  assert_inputs_wired(d, body_b, 2, "", "input", src, text);
  /* the predicate feeds the loop node; the body's vars its GETs */
  const dot_node *less = find_node(d, cond_b, "less", ANY_ARG, text);
  if (!dashed_edge_from(d, less->name, loop->name))
    fail_msg("the predicate %s does not reach %s:\n%s", less->name, loop->name, text);
  for (int i = 0; i < 2; i++)
    if (!dashed_edge_from(d, body_b, find_node(d, "", "get", i, text)->name))
      fail_msg("var %d of the body reaches no get %d:\n%s", i, i, text);

  /* the remat in the body, its own body nested one level deeper */
  const dot_node *remat = find_node(d, body_b, "remat", ANY_ARG, text);
  const char *rid = remat->name + strlen(body_b) + 1;
  char rc[NAME_LEN], rb[NAME_LEN], rbc[NAME_LEN];
  fmt_to(rc, sizeof rc, "cluster_%sc%s", body_b, rid);
  fmt_to(label, sizeof label, "#%s remat", rid);
  assert_cluster(d, rc, body_c, label, text);
  fmt_to(rb, sizeof rb, "%sc%s_0_", body_b, rid);
  fmt_to(rbc, sizeof rbc, "cluster_%s", rb);
  assert_cluster(d, rbc, rc, "body", text);
  static const int rsrc[] = {1};
  assert_inputs_wired(d, rb, 1, body_b, "input", rsrc, text);
  const dot_node *mul = find_node(d, rb, "mul", ANY_ARG, text);
  if (!dashed_edge_from(d, mul->name, find_node(d, body_b, "get", 0, text)->name))
    fail_msg("the remat's output %s reaches no get 0 in the loop body:\n%s", mul->name, text);
  assert_dot_accepts(text);

  free(d);
  free(text);
  tu_destroy_outs(out, 2);
  for (int i = 0; i < 2; i++) graft_tensor_destroy(in[i]);
  graft_function_destroy(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_function_write_dot__scan_with_cond_clusters),
      cmocka_unit_test(test_graft_function_write_dot__while_loop_with_remat_clusters),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
