/* The plan checker: verifies a memory plan against the DAG, independently
 * of the planner (its own reachability, per value rather than per buffer).
 *
 * Every compute value must be aligned to its slot (graft__slot_align: 16
 * bytes up to 48, else 64) and inside the arena.  Two
 * values i < j (compile order) whose bytes overlap are legal only if every
 * touch of i (its writer and readers; outputs and staged assignments are
 * also read after the graph, which nothing precedes) is a strict ancestor of
 * j's writer, except that j may read i when j is an elementwise op written
 * exactly over i (same offset and size: in place).
 *
 * Up to graft__memplan_max_exact values the checker keeps descendant
 * bitsets and checks every overlapping pair.  Above, it searches the DAG,
 * and only for the pairs that matter (sweep): on each elementary byte
 * range (between two consecutive value boundaries) each value against the
 * one before it in compile order.  That covers every pair: if i < j < k
 * all hold a byte, (i, j) and (j, k) legal make (i, k) legal, since every
 * touch of i other than j precedes j's writer, which precedes k's writer,
 * and k cannot read i (that read would have to precede j's writer). */
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

static int64_t bytes_of(const graft__plan *p, uint32_t i) { return graft__plan_value_bytes(p, i); }

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
    if (!p->alias || p->alias[r] != i) continue;
    /* a GET reading i's bytes in place: its readers read them too */
    for (uint32_t f = p->succ_off[r]; f < p->succ_off[r + 1]; f++) {
      uint32_t q = p->succ[f];
      if (q != j && graft__plan_reads(p, r, q) && !reaches(c, q, j))
        return bad(c, i, j, "a reader of the first (through a GET) may run after the second's writer",
                   msg);
    }
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

/* Incidences (value, elementary range) the sweep takes on; past them (a
 * pathological layout) it leaves the plan to the pairwise check. */
#define SWEEP_MAX(m) (32 * (int64_t)(m) + (1 << 20))

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static uint32_t lower_bound(const int64_t *v, uint32_t n, int64_t x) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (v[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* ex: the m values with bytes, in compile order.  *done = 0 when the
 * layout is too fragmented for the sweep (nothing checked). */
static graft_status sweep(checker *c, const ext *ex, uint32_t m, int *done, char *msg) {
  graft_status st = GRAFT_ENOMEM;
  uint32_t m1 = m ? m : 1;
  int64_t *pts = graft__malloc(2 * (size_t)m1 * sizeof *pts);
  uint32_t *at = graft__calloc(2 * (size_t)m1 + 2, sizeof *at);
  uint32_t *prev = graft__malloc(m1 * sizeof *prev);
  uint32_t *list = NULL;
  *done = 1;
  if (!pts || !at || !prev) goto out;
  for (uint32_t k = 0; k < m; k++) {
    pts[2 * k] = ex[k].lo;
    pts[2 * k + 1] = ex[k].hi;
    prev[k] = UINT32_MAX;
  }
  qsort(pts, 2 * (size_t)m, sizeof *pts, cmp_i64);
  uint32_t np = 0;
  for (uint32_t k = 0; k < 2 * m; k++)
    if (!np || pts[np - 1] != pts[k]) pts[np++] = pts[k];
  /* Range r is [pts[r], pts[r + 1]); its values, in compile order, are
   * list[at[r] .. at[r + 1]). */
  int64_t total = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t k = 0; k < m; k++) {
      uint32_t a = lower_bound(pts, np, ex[k].lo), b = lower_bound(pts, np, ex[k].hi);
      for (uint32_t r = a; r < b && pass; r++) list[at[r + 1]++] = k;
      if (!pass) {
        total += b - a;
        if (total > SWEEP_MAX(m)) {
          *done = 0;
          st = GRAFT_OK;
          goto out;
        }
        for (uint32_t r = a; r < b; r++) at[r + 2]++;
      }
    }
    if (pass) break;
    for (uint32_t r = 0; r < np; r++) at[r + 2] += at[r + 1];
    list = graft__malloc((size_t)(total ? total : 1) * sizeof *list);
    if (!list) goto out;
  }
  for (uint32_t r = 0; r + 1 < np; r++)
    for (uint32_t q = at[r] + 1; q < at[r + 1]; q++) {
      uint32_t a = list[q - 1], b = list[q];
      if (prev[b] == a) continue; /* (the same pair on the range before) */
      prev[b] = a;
      if ((st = pair_ok(c, ex[a].i, ex[b].i, msg))) goto out;
    }
  st = GRAFT_OK;
out:
  graft__free(pts);
  graft__free(at);
  graft__free(prev);
  graft__free(list);
  return st;
}

graft_status graft__plan_check(const graft__plan *p, char *msg) {
  checker c = {p, p->n_order, 0, NULL, NULL, NULL, 0, NULL};
  uint32_t n = c.n;
  graft_status st = GRAFT_ENOMEM;
  ext *ex = graft__malloc((n ? n : 1) * sizeof *ex);
  uint8_t *is_out = NULL; /* per graph node: an output */
  c.sink = graft__calloc(n ? n : 1, 1);
  c.stack = graft__malloc((n ? n : 1) * sizeof *c.stack);
  c.seen = graft__calloc(n ? n : 1, sizeof *c.seen);
  if (!ex || !c.sink || !c.stack || !c.seen) goto out;
  if ((int64_t)n <= graft__memplan_max_exact) {
    c.nw = (n + 63) / 64;
    c.desc = graft__calloc((size_t)n * (size_t)(c.nw ? c.nw : 1), sizeof *c.desc);
    if (!c.desc) goto out;
    descendants(&c);
  }
  is_out = graft__calloc(p->g->n_nodes ? p->g->n_nodes : 1, 1);
  if (!is_out) goto out;
  for (int k = 0; k < p->g->n_outputs; k++) is_out[p->g->outputs[k]] = 1;
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = p->order[i];
    const graft__node *nd = graft__graph_node(p->g, id);
    c.sink[i] = (graft__ops[nd->op].flags & GRAFT__OPF_SIDE_EFFECT) || is_out[id];
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
  if (!c.desc) {
    int done;
    if ((st = sweep(&c, ex, m, &done, msg)) || done) goto out;
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
  graft__free(is_out);
  graft__free(c.sink);
  graft__free(c.stack);
  graft__free(c.seen);
  graft__free(c.desc);
  return st;
}
