/* The plan checker: verifies a memory plan against the DAG, independently
 * of the planner (its own reachability, per value rather than per buffer).
 *
 * Every compute value must be aligned to its slot (graft__slot_align: 16
 * bytes up to 48, else 64) and inside the arena.  Two
 * values i < j (compile order) whose bytes overlap are legal only if every
 * touch of i (its writer and readers; outputs and staged assignments are
 * also read after the graph, which nothing precedes) is a strict ancestor of
 * j's writer, except that j may read i when j is an elementwise op written
 * exactly over i (same offset and size: in place). */
#include <stdlib.h>
#include <string.h>

#include "sched/sched.h"

typedef struct checker {
  const graft__plan *p;
  uint32_t n;
  int64_t nw;
  uint64_t *desc;    /* n x nw: strict descendants, or NULL (then DFS) */
  uint32_t *stack;
  uint32_t *seen;
  uint32_t stamp;
  uint8_t *sink;
} checker;

/* Descendant sets, built from the successors in reverse order. */
static void descendants(checker *c) {
  const graft__plan *p = c->p;
  for (uint32_t i = c->n; i-- > 0;) {
    uint64_t *d = c->desc + (int64_t)i * c->nw;
    for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++) {
      uint32_t s = p->succ[e];
      const uint64_t *ds = c->desc + (int64_t)s * c->nw;
      for (int64_t w = 0; w < c->nw; w++) d[w] |= ds[w];
      d[s >> 6] |= 1ull << (s & 63);
    }
  }
}

static int reaches(checker *c, uint32_t from, uint32_t to) {
  if (from == to) return 0;
  if (c->desc) return (c->desc[(int64_t)from * c->nw + (to >> 6)] >> (to & 63)) & 1u;
  const graft__plan *p = c->p;
  uint32_t top = 0;
  c->stamp++;
  c->stack[top++] = from;
  while (top) {
    uint32_t u = c->stack[--top];
    for (uint32_t e = p->succ_off[u]; e < p->succ_off[u + 1]; e++) {
      uint32_t s = p->succ[e];
      if (s == to) return 1;
      if (s < to && c->seen[s] != c->stamp) {
        c->seen[s] = c->stamp;
        c->stack[top++] = s;
      }
    }
  }
  return 0;
}

static int64_t bytes_of(const graft__plan *p, uint32_t i) {
  const graft__tview *v = graft__plan_view(p, p->order[i]);
  return v->numel * (int64_t)graft_dtype_size(v->dtype);
}

static int reads(const graft__plan *p, uint32_t j, uint32_t i) {
  for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++)
    if (p->succ[e] == j) return graft__plan_reads(p, i, j);
  return 0;
}

static graft_status bad(const checker *c, uint32_t i, uint32_t j, const char *why, char *msg) {
  const graft__graph *g = c->p->g;
  uint32_t a = c->p->order[i], b = c->p->order[j];
  graft__msgf(msg, "plan check: %s #%u and %s #%u share bytes but %s (trace '%s')",
              graft__ops[graft__graph_node(g, a)->op].name, a,
              graft__ops[graft__graph_node(g, b)->op].name, b, why, g->name);
  return GRAFT_EINTERNAL;
}

/* May j's write land on i's bytes? */
static graft_status pair_ok(checker *c, uint32_t i, uint32_t j, char *msg) {
  const graft__plan *p = c->p;
  if (c->sink[i]) return bad(c, i, j, "the first is read after the graph", msg);
  if (!reaches(c, i, j)) return bad(c, i, j, "the second's writer does not follow the first's", msg);
  for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++) {
    uint32_t r = p->succ[e];
    if (r != j && graft__plan_reads(p, i, r) && !reaches(c, r, j))
      return bad(c, i, j, "a reader of the first may run after the second's writer", msg);
  }
  if (reads(p, j, i)) {
    uint32_t a = p->order[i], b = p->order[j];
    const graft__node *nb = graft__graph_node(p->g, b);
    if (!(graft__ops[nb->op].flags & GRAFT__OPF_ELEMWISE) || p->offset[a] != p->offset[b] ||
        bytes_of(p, i) != bytes_of(p, j) || graft__plan_view(p, a)->numel != graft__plan_view(p, b)->numel)
      return bad(c, i, j, "the second reads the first and is not an exact in-place write", msg);
  }
  return GRAFT_OK;
}

typedef struct ext {
  int64_t lo, hi;
  uint32_t i;
} ext;

static int by_lo(const void *a, const void *b) {
  const ext *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

graft_status graft__plan_check(const graft__plan *p, char *msg) {
  checker c = {p, p->n_order, 0, NULL, NULL, NULL, 0, NULL};
  uint32_t n = c.n;
  graft_status st = GRAFT_ENOMEM;
  ext *ex = graft__malloc((n ? n : 1) * sizeof *ex);
  c.sink = graft__calloc(n ? n : 1, 1);
  c.stack = graft__malloc((n ? n : 1) * sizeof *c.stack);
  c.seen = graft__calloc(n ? n : 1, sizeof *c.seen);
  if (!ex || !c.sink || !c.stack || !c.seen) goto out;
  if (n <= 16384) {
    c.nw = (n + 63) / 64;
    c.desc = graft__calloc((size_t)n * (size_t)(c.nw ? c.nw : 1), sizeof *c.desc);
    if (!c.desc) goto out;
    descendants(&c);
  }
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = p->order[i];
    const graft__node *nd = graft__graph_node(p->g, id);
    c.sink[i] = (graft__ops[nd->op].flags & GRAFT__OPF_SIDE_EFFECT) != 0;
    for (int k = 0; k < p->g->n_outputs; k++) c.sink[i] |= p->g->outputs[k] == id;
    int64_t b = bytes_of(p, i);
    if ((int64_t)p->offset[id] % graft__slot_align(b, p->pack_small)) {
      graft__msgf(msg, "plan check: #%u at offset %zu is not %lld-byte aligned", id, p->offset[id],
                  (long long)graft__slot_align(b, p->pack_small));
      st = GRAFT_EINTERNAL;
      goto out;
    }
    if ((int64_t)p->offset[id] + b > (int64_t)p->arena_bytes) {
      graft__msgf(msg, "plan check: #%u [%zu, %lld) ends past the arena (%zu bytes)", id,
                  p->offset[id], (long long)(p->offset[id] + b), p->arena_bytes);
      st = GRAFT_EINTERNAL;
      goto out;
    }
    if (b) ex[m++] = (ext){(int64_t)p->offset[id], (int64_t)p->offset[id] + b, i};
  }
  qsort(ex, m, sizeof *ex, by_lo);
  for (uint32_t a = 0; a < m; a++) {
    for (uint32_t b = a + 1; b < m && ex[b].lo < ex[a].hi; b++) {
      uint32_t i = GRAFT__MIN(ex[a].i, ex[b].i), j = GRAFT__MAX(ex[a].i, ex[b].i);
      if ((st = pair_ok(&c, i, j, msg))) goto out;
    }
  }
  st = GRAFT_OK;
out:
  if (st == GRAFT_ENOMEM) graft__msgf(msg, "plan check: out of memory");
  graft__free(ex);
  graft__free(c.sink);
  graft__free(c.stack);
  graft__free(c.seen);
  graft__free(c.desc);
  return st;
}
