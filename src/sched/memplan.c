/* Static memory planner: every intermediate value gets an offset in one
 * arena so that two values share bytes only when, in EVERY schedule the DAG
 * allows, everything that touches the earlier one (its writer, its readers,
 * and the end of the call for outputs and staged assignments) finishes
 * before the later one's writer starts.
 *
 * 1. Reachability: descendant bitsets over the compute nodes.
 * 2. In place: an elementwise node whose output has an input's shape and
 *    element size writes over that input when every other reader of the
 *    input is its ancestor.  Such chains form one buffer.
 * 3. Buffer x is "before" y (y may take x's bytes) when x is not read after
 *    the graph and every touch of x is an ancestor of y's first writer.
 *    "before" is a strict partial order; two buffers conflict when neither
 *    is before the other.  Buffers are numbered by first writer, a linear
 *    extension of "before", and the conflicts kept as a bit matrix.
 * 4. Placement: the local planner's plan (memplan_local.c) first; unless
 *    it meets the bound (5.), first fit over the already placed buffers a
 *    buffer conflicts with, largest first, in a few tie orders (then best
 *    fit, as time allows), stopping at the bound; the smallest arena wins
 *    and is then compacted.
 * 5. Stats: LOAD, and the bound: the largest total size of pairwise
 *    conflicting buffers, a maximum-weight antichain of "before", exact by a
 *    max flow (antichain_bound).
 *
 * Above graft__memplan_max_exact compute nodes the bitsets would not fit:
 * a bounded search of each writer's nearest ancestors (memplan_local.c)
 * proves the in-place writes and the reuse instead (correct, compact where
 * lifetimes are local; stats say the plan is not exact). */
#include <stdlib.h>
#include <string.h>

#include "sched/memplan_int.h"

int graft__memplan_max_exact = 16384;
/* Placement passes after the first run while their scans (about nb^2 / 2
 * pairs each) stay within this many pairs in all: at 4,400 buffers 4
 * first-fit passes and 2 compactions, from about 8,200 on one pass. */
#define PLACE_BUDGET (64ll << 20)
#define COMPACT_ROUNDS 4
/* The bound's flow stops past these (covering arcs, and Dinic's arc visits,
 * per compute value); the bound is then the larger of the antichain the
 * unfinished flow proves and a greedy one: a lower bound still, perhaps
 * not the largest. */
#define FLOW_ARCS_PER_VALUE 32
#define FLOW_WORK_PER_VALUE 2048

int graft__memplan_naive;
/* Test-only: when > 0, the bound's flow stops after this much work (its
 * declaration belongs next to graft__memplan_naive in sched.h). */
int64_t graft__memplan_flow_work;
#define FLOW_INF (INT64_MAX / 4)

typedef graft__mbuf buffer;

typedef struct mp {
  graft__plan *p;
  uint32_t n;
  int64_t nw;          /* words per bitset over positions */
  uint64_t *desc;      /* strict descendants; row i holds words i/64.. (tri_start) */
  uint32_t *root;      /* order position -> buffer root position */
  uint8_t *sink;       /* per position: value read at the end of the call */
  buffer *buf;
  uint32_t nb;
  int64_t cw;          /* words per bitset over buffers */
  uint64_t *conf;      /* 64 cw x cw: conflict matrix (conflict_matrix) */
  graft__anc anc;      /* without desc: the bounded ancestor search */
} mp;

/* Start of row i of triangular rows over nw words, row i holding only the
 * words from i/64 on (the bits of later positions). */
static inline int64_t tri_start(int64_t nw, uint32_t i) {
  int64_t b = i >> 6;
  return 64 * (b * nw - b * (b - 1) / 2) + (int64_t)(i & 63) * (nw - b);
}

static inline const uint64_t *desc_row(const mp *m, uint32_t i) { return m->desc + tri_start(m->nw, i); }

static inline int is_anc(const mp *m, uint32_t a, uint32_t of) {
  return of > a && ((desc_row(m, a)[(of >> 6) - (a >> 6)] >> (of & 63)) & 1u);
}

static inline int conflicts(const mp *m, uint32_t a, uint32_t b) {
  return (m->conf[(int64_t)a * m->cw + (b >> 6)] >> (b & 63)) & 1u;
}

static int64_t value_bytes(const graft__plan *p, uint32_t i) { return graft__plan_value_bytes(p, i); }

/* Descendant sets, from the successors in reverse order. */
static void descendants(mp *m) {
  const graft__plan *p = m->p;
  for (uint32_t i = m->n; i-- > 0;) {
    uint64_t *d = m->desc + tri_start(m->nw, i);
    int64_t first = i >> 6;
    for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++) {
      uint32_t s = p->succ[e];
      const uint64_t *ds = desc_row(m, s);
      int64_t sf = s >> 6;
      for (int64_t w = sf; w < m->nw; w++) d[w - first] |= ds[w - sf];
      d[sf - first] |= 1ull << (s & 63);
    }
  }
}

/* Every reader of u other than i precedes i in every schedule (without
 * the bitsets: as far as the bounded search proves). */
static int others_precede(mp *m, uint32_t u, uint32_t i) {
  const graft__plan *p = m->p;
  for (uint32_t e = p->succ_off[u]; e < p->succ_off[u + 1]; e++) {
    uint32_t r = p->succ[e];
    if (r == i) continue;
    if (m->desc) {
      if (!is_anc(m, r, i)) return 0;
      continue;
    }
    if (!graft__anc_reaches(&m->anc, r, i, GRAFT__ANC_CAP)) return 0;
  }
  return 1;
}

/* The input order position i may overwrite, or UINT32_MAX. */
static uint32_t inplace_victim(mp *m, uint32_t i) {
  const graft__plan *p = m->p;
  uint32_t id = p->order[i];
  const graft__node *n = graft__graph_node(p->g, id);
  /* (A writer read after the graph is fine: the buffer then lives to the
   * end; only a victim read after the graph must be kept.) */
  if (!(graft__ops[n->op].flags & GRAFT__OPF_ELEMWISE)) return UINT32_MAX;
  const graft__tview *o = graft__plan_view(p, id);
  for (uint32_t e = p->pred_off[i]; e < p->pred_off[i + 1]; e++) {
    uint32_t u = p->pred[e];
    const graft__tview *v = graft__plan_view(p, p->order[u]);
    if (m->sink[u] || (p->alias && p->alias[u] != UINT32_MAX) || v->numel != o->numel || v->rank != o->rank ||
        graft_dtype_size(v->dtype) != graft_dtype_size(o->dtype) ||
        memcmp(v->shape, o->shape, (size_t)o->rank * sizeof *o->shape))
      continue;
    /* (u may itself have overwritten its input: the chain's buffer carries
     * on.)  A value is overwritten at most once: a second overwriter would
     * have to both precede and follow the first. */
    if (!others_precede(m, u, i)) continue;
    return u;
  }
  return UINT32_MAX;
}

static uint32_t find_root(uint32_t *root, uint32_t x) {
  while (root[x] != x) x = root[x] = root[root[x]];
  return x;
}

/* ---- conflicts ------------------------------------------------------------ */

/* Transpose a 64 x 64 bit block in place (bit c of a[r] <-> bit r of a[c]):
 * swap the off-diagonal halves of ever smaller sub-blocks. */
static void transpose64(uint64_t a[64]) {
  uint64_t mask = 0x00000000ffffffffull;
  for (int j = 32; j; j >>= 1, mask ^= mask << j)
    for (int k = 0; k < 64; k = ((k | j) + 1) & ~j) {
      uint64_t t = ((a[k] >> j) ^ a[k | j]) & mask;
      a[k] ^= t << j;
      a[k | j] ^= t;
    }
}

/* The conflict matrix over buffers with bytes (row x, bit y: x and y
 * conflict).  bd[i] holds the buffers whose first writer descends from
 * position i, kept from the word of the first buffer written after i.  x is
 * before a later y iff y is in bd of every touch of x; the readers of a
 * value descend from its writer, so the touches to intersect are the
 * readers of x's values, or a value itself when nothing reads it.  Later
 * buffers outside that intersection conflict with x (a later buffer is
 * never before x); the rows get those, then the matrix is made symmetric
 * block by block. */
static graft_status conflict_matrix(mp *m, const uint32_t *bid) {
  const graft__plan *p = m->p;
  uint32_t n = m->n, nb = m->nb;
  int64_t cw = m->cw = (nb + 63) / 64;
  graft_status st = GRAFT_ENOMEM;
  int64_t *bd_at = graft__malloc(((size_t)n + 1) * sizeof *bd_at);
  uint64_t *with_bytes = graft__calloc((size_t)cw + 1, sizeof *with_bytes);
  uint64_t *bd = NULL;
  m->conf = graft__calloc((size_t)(64 * cw * cw) + 1, sizeof *m->conf);
  if (!bd_at || !with_bytes || !m->conf) goto out;
  /* Row i starts at the word of the first buffer with w0 > i. */
  bd_at[0] = 0;
  for (uint32_t i = 0, k = 0; i < n; i++) {
    while (k < nb && m->buf[k].w0 <= i) k++;
    bd_at[i + 1] = bd_at[i] + cw - (k >> 6);
  }
  bd = graft__calloc((size_t)(bd_at[n] ? bd_at[n] : 1), sizeof *bd);
  if (!bd) goto out;
  for (uint32_t k = 0; k < nb; k++)
    if (m->buf[k].size) with_bytes[k >> 6] |= 1ull << (k & 63);
#define BD_FIRST(i) (cw - (bd_at[(i) + 1] - bd_at[i]))
  for (uint32_t i = n; i-- > 0;) {
    uint64_t *d = bd + bd_at[i];
    int64_t first = BD_FIRST(i);
    for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++) {
      uint32_t s = p->succ[e], y = bid[s];
      const uint64_t *ds = bd + bd_at[s];
      int64_t sf = BD_FIRST(s);
      for (int64_t w = sf; w < cw; w++) d[w - first] |= ds[w - sf];
      if (m->buf[y].w0 == s) d[(y >> 6) - first] |= with_bytes[y >> 6] & (1ull << (y & 63));
    }
  }
  /* Row x: first the buffers x is before (none for a sink), then the later
   * ones it is not. */
  for (uint32_t x = 0; x < nb; x++)
    if (m->buf[x].size && !m->buf[x].sink)
      memset(m->conf + x * cw + (x >> 6), 0xff, (size_t)(cw - (x >> 6)) * sizeof *m->conf);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t x = bid[i], e0 = p->succ_off[i], ns = p->succ_off[i + 1] - e0, nr = 0;
    if (!m->buf[x].size || m->buf[x].sink) continue;
    /* touches: the readers (ordering-only successors read nothing), or the
     * writer itself when nothing reads the value */
    for (uint32_t q = 0; q < ns; q++) nr += graft__plan_reads(p, i, p->succ[e0 + q]);
    uint64_t *cx = m->conf + (int64_t)x * cw;
    for (uint32_t q = 0; q < (nr ? ns : 1); q++) {
      if (nr && !graft__plan_reads(p, i, p->succ[e0 + q])) continue;
      uint32_t t = nr ? p->succ[e0 + q] : i;
      const uint64_t *d = bd + bd_at[t];
      int64_t tf = BD_FIRST(t); /* >= x / 64: t follows x's first writer */
      for (int64_t w = x >> 6; w < tf; w++) cx[w] = 0;
      for (int64_t w = tf; w < cw; w++) cx[w] &= d[w - tf];
    }
  }
  for (uint32_t x = 0; x < nb; x++) {
    if (!m->buf[x].size) continue;
    uint64_t *cx = m->conf + (int64_t)x * cw;
    for (int64_t w = x >> 6; w < cw; w++) cx[w] = ~cx[w] & with_bytes[w];
    cx[x >> 6] &= ~((2ull << (x & 63)) - 1); /* x and the buffers before it */
  }
#undef BD_FIRST
  /* (rows are padded to 64 cw, so blocks need no bounds) */
  uint64_t blk[64];
  for (int64_t bi = 0; bi < cw; bi++)
    for (int64_t bj = bi; bj < cw; bj++) {
      for (int k = 0; k < 64; k++) blk[k] = m->conf[(bi * 64 + k) * cw + bj];
      transpose64(blk);
      for (int k = 0; k < 64; k++) m->conf[(bj * 64 + k) * cw + bi] |= blk[k];
    }
  st = GRAFT_OK;
out:
  graft__free(bd_at);
  graft__free(with_bytes);
  graft__free(bd);
  return st;
}

/* ---- placement ------------------------------------------------------------ */

typedef struct placer {
  const mp *m;
  uint32_t *order;     /* nb: the buffers in placement order */
  int64_t *off;        /* nb: this pass's offsets */
  int64_t *lo, *hi;    /* nb: the placed buffers' bytes, by offset */
  uint32_t *id;        /* nb: ... and which buffers they are */
} placer;

/* Place the buffers in pl->order, each at the lowest gap (first fit) or the
 * smallest (best fit) between the placed buffers it conflicts with that
 * holds it, else above them all; returns the arena size. */
static int64_t place_pass(placer *pl, int best_fit) {
  const mp *m = pl->m;
  int64_t arena = 0;
  uint32_t np = 0;
  for (uint32_t q = 0; q < m->nb; q++) {
    uint32_t b = pl->order[q];
    int64_t size = m->buf[b].size, at = 0, best = -1, best_gap = INT64_MAX;
    const int64_t align = graft__slot_align(size, m->p->pack_small);
    if (!size) {
      pl->off[b] = 0;
      continue;
    }
    const uint64_t *row = m->conf + (int64_t)b * m->cw;
    for (uint32_t k = 0; k < np; k++) {
      /* (branch-free: often about half the placed buffers conflict, at random) */
      uint32_t o = pl->id[k];
      int c = (row[o >> 6] >> (o & 63)) & 1u;
      int64_t gap = pl->lo[k] - at;
      int take = c & (gap >= size) & (gap < best_gap);
      if (take && (!best_fit || gap == size)) {
        best = at;
        break;
      }
      best = take ? at : best;
      best_gap = take ? gap : best_gap;
      at = c && pl->hi[k] > at ? (pl->hi[k] + align - 1) / align * align : at;
    }
    at = best >= 0 ? best : at;
    pl->off[b] = at;
    uint32_t lo = 0, hi = np;
    while (lo < hi) {
      uint32_t mid = (lo + hi) / 2;
      if (pl->lo[mid] <= at) lo = mid + 1;
      else hi = mid;
    }
    size_t tail = np - lo;
    memmove(pl->lo + lo + 1, pl->lo + lo, tail * sizeof *pl->lo);
    memmove(pl->hi + lo + 1, pl->hi + lo, tail * sizeof *pl->hi);
    memmove(pl->id + lo + 1, pl->id + lo, tail * sizeof *pl->id);
    pl->lo[lo] = at;
    pl->hi[lo] = at + size;
    pl->id[lo] = b;
    np++;
    arena = GRAFT__MAX(arena, at + size);
  }
  return arena;
}

typedef struct keyed {
  int64_t key, key2;
  uint32_t k;
} keyed;

static int by_key(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  if (x->key2 != y->key2) return x->key2 < y->key2 ? -1 : 1;
  return x->k < y->k ? -1 : x->k > y->k;
}

/* Largest first; among equal sizes, in descending order of one of these:
 * how many buffers b conflicts with, their bytes, b's last touch, b's
 * span in the compile order.  The first two place the most constrained
 * buffers first; no one order wins on every graph. */
enum { TIE_DEGREE, TIE_WEIGHT, TIE_LAST, TIE_SPAN, TIE_COUNT };

static int64_t tie_key(const mp *m, int tie, uint32_t k) {
  const buffer *b = &m->buf[k];
  const uint64_t *row = m->conf + (int64_t)k * m->cw;
  int64_t s = 0;
  switch (tie) {
  case TIE_DEGREE:
    for (int64_t w = 0; w < m->cw; w++) s += __builtin_popcountll(row[w]);
    return -s;
  case TIE_WEIGHT:
    for (int64_t w = 0; w < m->cw; w++)
      for (uint64_t bits = row[w]; bits; bits &= bits - 1) s += m->buf[w * 64 + __builtin_ctzll(bits)].size;
    return -s;
  case TIE_LAST: return -b->last;
  default: return -(b->last - b->w0);
  }
}

/* pl->order: the buffers by (key, key2, first writer). */
static void order_by(placer *pl, keyed *tmp) {
  uint32_t nb = pl->m->nb;
  qsort(tmp, nb, sizeof *tmp, by_key);
  for (uint32_t k = 0; k < nb; k++) pl->order[k] = tmp[k].k;
}

/* Offsets for every buffer into m->buf[].off; the arena size in *arena;
 * lower: a lower bound on any arena. */
static graft_status place(mp *m, int64_t *arena, int64_t lower) {
  uint32_t nb = m->nb;
  placer pl = {m, NULL, NULL, NULL, NULL, NULL};
  size_t n1 = nb ? nb : 1;
  pl.order = graft__malloc(n1 * sizeof *pl.order);
  pl.off = graft__malloc(n1 * sizeof *pl.off);
  pl.lo = graft__malloc(n1 * sizeof *pl.lo);
  pl.hi = graft__malloc(n1 * sizeof *pl.hi);
  pl.id = graft__malloc(n1 * sizeof *pl.id);
  keyed *tmp = graft__malloc(n1 * sizeof *tmp);
  graft_status st = GRAFT_ENOMEM;
  if (!pl.order || !pl.off || !pl.lo || !pl.hi || !pl.id || !tmp) goto out;
  int64_t best = INT64_MAX, scans = 0, per_pass = (int64_t)nb * nb / 2;
  /* First fit in every tie order, then best fit; a quarter of the budget
   * is left to compaction.  An arena at the lower bound (the stats'
   * bound_bytes) ends the search: nothing can beat it. */
  for (int pass = 0; pass < 2 * TIE_COUNT && best > lower &&
                     (!pass || scans + per_pass <= PLACE_BUDGET / 4 * 3);
       pass++) {
    int tie = pass % TIE_COUNT;
    for (uint32_t k = 0; k < nb; k++) tmp[k] = (keyed){-m->buf[k].size, tie_key(m, tie, k), k};
    order_by(&pl, tmp);
    int64_t a = place_pass(&pl, pass >= TIE_COUNT);
    scans += per_pass;
    if (a < best) {
      best = a;
      for (uint32_t k = 0; k < nb; k++) m->buf[k].off = pl.off[k];
    }
  }
  /* Compaction: first fit in the order of the kept offsets moves no buffer
   * up (the conflicting ones placed before it sit no higher than they did,
   * so its old bytes are still free); stop when nothing moves. */
  for (int round = 0; round < COMPACT_ROUNDS && best > lower && scans + per_pass <= PLACE_BUDGET; round++) {
    for (uint32_t k = 0; k < nb; k++) tmp[k] = (keyed){m->buf[k].off, 0, k};
    order_by(&pl, tmp);
    best = place_pass(&pl, 0);
    scans += per_pass;
    int moved = 0;
    for (uint32_t k = 0; k < nb; k++) {
      moved |= pl.off[k] != m->buf[k].off;
      m->buf[k].off = pl.off[k];
    }
    if (!moved) break;
  }
  *arena = nb ? best : 0;
  st = GRAFT_OK;
out:
  graft__free(pl.order);
  graft__free(pl.off);
  graft__free(pl.lo);
  graft__free(pl.hi);
  graft__free(pl.id);
  graft__free(tmp);
  return st;
}

static int64_t antichain_bound(const mp *m, int *done);
static void bound_stats(mp *m, int64_t flow, int flow_done);

/* LOAD: the most bytes live at once along the compile order, a buffer live
 * from its first writer to its last touch (the end for sinks); where (an
 * order position) in *at.  -1 if out of memory. */
static int64_t live_peak(const mp *m, int64_t *at) {
  int64_t *delta = graft__calloc((size_t)m->n + 2, sizeof *delta);
  if (!delta) return -1;
  for (uint32_t b = 0; b < m->nb; b++) {
    delta[m->buf[b].w0] += m->buf[b].size;
    delta[m->buf[b].last + 1] -= m->buf[b].size;
  }
  int64_t peak = 0, cur = 0;
  *at = 0;
  for (uint32_t i = 0; i <= m->n; i++) {
    cur += delta[i];
    if (cur > peak) {
      peak = cur;
      *at = i;
    }
  }
  graft__free(delta);
  return peak;
}

/* Without the bitsets: buffers first written on one topological level are
 * pairwise unordered (x before y needs x's first writer to be an ancestor
 * of y's, on a lower level), so they conflict, and the heaviest level is
 * an antichain: a lower bound for any parallel-safe arena.  -1 if out of
 * memory. */
static int64_t level_bound(const mp *m) {
  int64_t *sum = graft__calloc((size_t)m->n + 1, sizeof *sum), best = 0;
  if (!sum) return -1;
  for (uint32_t b = 0; b < m->nb; b++) {
    int64_t *s = &sum[m->anc.level[m->buf[b].w0]];
    *s += m->buf[b].size;
    best = GRAFT__MAX(best, *s);
  }
  graft__free(sum);
  return best;
}

graft_status graft__memplan(graft__plan *p) {
  double t0 = graft__now_us();
  mp m;
  memset(&m, 0, sizeof m);
  m.p = p;
  m.n = p->n_order;
  uint32_t n = m.n;
  graft_status st = GRAFT_ENOMEM;
  uint32_t *bid = NULL;
  int64_t *local_off = NULL; /* the local planner's offsets, while placement tries */
  m.root = graft__malloc((n ? n : 1) * sizeof *m.root);
  m.sink = graft__calloc(n ? n : 1, 1);
  bid = graft__malloc((n ? n : 1) * sizeof *bid);
  if (!m.root || !m.sink || !bid) goto out;
  int exact = (int64_t)n <= graft__memplan_max_exact;
  if (exact) {
    m.nw = (n + 63) / 64;
    int64_t words = tri_start(m.nw, n);
    m.desc = graft__calloc((size_t)(words ? words : 1), sizeof *m.desc);
    if (!m.desc) goto out;
    descendants(&m);
  }
  /* The bounded search: the local planner's proofs (its plan competes in
   * the exact planner too), and without the bitsets the in-place ones. */
  if (graft__anc_init(&m.anc, p, GRAFT__ANC_CAP)) goto out;
  /* Outputs and staged assignments are read after the graph. */
  uint8_t *is_out = graft__calloc(p->g->n_nodes ? p->g->n_nodes : 1, 1);
  if (!is_out) goto out;
  for (int k = 0; k < p->g->n_outputs; k++) is_out[p->g->outputs[k]] = 1;
  for (uint32_t i = 0; i < n; i++) {
    const graft__node *nd = graft__graph_node(p->g, p->order[i]);
    m.sink[i] = (graft__ops[nd->op].flags & GRAFT__OPF_SIDE_EFFECT) || is_out[p->order[i]];
    m.root[i] = i;
  }
  graft__free(is_out);
  /* A GET read in place joins its control node's buffer (plan.c). */
  for (uint32_t i = 0; p->alias && i < n; i++)
    if (p->alias[i] != UINT32_MAX) m.root[i] = find_root(m.root, p->alias[i]);
  int64_t inplace = 0;
  for (uint32_t i = 0; i < n && !graft__memplan_naive; i++) {
    uint32_t u = inplace_victim(&m, i);
    if (u == UINT32_MAX) continue;
    /* a buffer takes one in-place writer per value: u's data dies here */
    m.root[i] = find_root(m.root, u);
    inplace++;
  }
  graft__free(m.desc);
  m.desc = NULL;
  /* Buffers numbered by first writer (their root, the chain's first value). */
  uint32_t nb = 0;
  for (uint32_t i = 0; i < n; i++) bid[i] = find_root(m.root, i) == i ? nb++ : UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) bid[i] = bid[find_root(m.root, i)];
  m.nb = nb;
  m.buf = graft__calloc(nb ? nb : 1, sizeof *m.buf);
  if (!m.buf) goto out;
  for (uint32_t i = 0; i < n; i++) {
    buffer *b = &m.buf[bid[i]];
    if (find_root(m.root, i) == i) b->w0 = i;
    b->size = GRAFT__MAX(b->size, graft__slot_bytes(value_bytes(p, i), p->pack_small));
    b->sink |= m.sink[i];
    b->last = GRAFT__MAX(b->last, (int64_t)i);
    for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++)
      if (graft__plan_reads(p, i, p->succ[e])) b->last = GRAFT__MAX(b->last, (int64_t)p->succ[e]);
  }
  for (uint32_t k = 0; k < nb; k++)
    if (m.buf[k].sink) m.buf[k].last = n;
  int flow_done = 0;
  int64_t flow = -1;
  if (exact) {
    if (conflict_matrix(&m, bid)) goto out;
    flow = antichain_bound(&m, &flow_done);
  } else {
    flow = level_bound(&m);
  }
  /* The stats, the bound among them, before placement: it stops there. */
  bound_stats(&m, flow, flow_done);

  int64_t arena = 0;
  if (exact && !graft__memplan_naive) {
    /* The local planner first (it costs little): where it meets the lower
     * bound, as on chains, fan-outs and trees, placement has nothing to
     * add; else placement runs (stopping once it meets the bound) and the
     * smaller arena wins. */
    int64_t lower = p->stats.bound_bytes, local = 0;
    if (graft__memplan_local(p, &m.anc, m.buf, nb, bid, &local)) goto out;
    arena = local;
    if (local > lower) {
      local_off = graft__malloc((nb ? nb : 1) * sizeof *local_off);
      if (!local_off) goto out;
      for (uint32_t k = 0; k < nb; k++) local_off[k] = m.buf[k].off;
      if (place(&m, &arena, lower)) goto out;
      if (local < arena) {
        for (uint32_t k = 0; k < nb; k++) m.buf[k].off = local_off[k];
        arena = local;
      }
    }
  } else if (!graft__memplan_naive) {
    if (graft__memplan_local(p, &m.anc, m.buf, nb, bid, &arena)) goto out;
  } else {
    /* No sharing.  Whole-line buffers first, then the small slots, so no
     * alignment padding falls between them. */
    for (int small = 0; small < 2; small++)
      for (uint32_t k = 0; k < nb; k++)
        if ((graft__slot_align(m.buf[k].size, p->pack_small) < GRAFT__ALIGN) == small) {
          m.buf[k].off = arena;
          arena += m.buf[k].size;
        }
  }
  for (uint32_t i = 0; i < n; i++) p->offset[p->order[i]] = (size_t)m.buf[bid[i]].off;
  p->arena_bytes = (size_t)arena;
  p->stats.inplace = inplace;
  p->stats.planner_exact = exact;
  p->stats.planner_us = graft__now_us() - t0;
  st = GRAFT_OK;
out:
  graft__free(m.buf);
  graft__free(bid);
  graft__free(m.desc);
  graft__free(m.conf);
  graft__free(m.root);
  graft__free(m.sink);
  graft__free(local_off);
  graft__anc_free(&m.anc);
  return st;
}

/* ---- the bound ------------------------------------------------------------ */

/* A flow network in CSR form: arc a runs from its tail to head[a] with
 * residual capacity cap[a]; rev[a] is its reverse. */
typedef struct flownet {
  uint32_t nv;
  int64_t na;
  int64_t *first;      /* nv + 1 */
  uint32_t *head;
  int64_t *rev;
  int64_t *cap;
  int64_t *cur;        /* nv: Dinic's current arc */
  int32_t *level;      /* nv */
  uint32_t *queue;     /* nv */
  int64_t *path;       /* nv: arcs of the DFS path */
  int64_t work, work_max;
} flownet;

/* The arcs before the CSR, at most max_n of them. */
typedef struct arc {
  uint32_t tail, head;
  int64_t cap;
} arc;

typedef struct arcs {
  arc *a;
  int64_t n, cap, max_n;
} arcs;

static int arc_add(arcs *a, uint32_t t, uint32_t h, int64_t cap) {
  if (a->n == a->max_n || graft__grow((void **)&a->a, &a->cap, a->n + 1, sizeof *a->a)) return -1;
  a->a[a->n++] = (arc){t, h, cap};
  return 0;
}

static void flownet_free(flownet *f) {
  graft__free(f->first);
  graft__free(f->head);
  graft__free(f->rev);
  graft__free(f->cap);
  graft__free(f->cur);
  graft__free(f->level);
  graft__free(f->queue);
  graft__free(f->path);
}

static graft_status flownet_build(flownet *f, uint32_t nv, const arcs *a) {
  memset(f, 0, sizeof *f);
  f->nv = nv;
  f->na = 2 * a->n;
  size_t na1 = (size_t)(f->na ? f->na : 1);
  f->first = graft__calloc((size_t)nv + 1, sizeof *f->first);
  f->head = graft__malloc(na1 * sizeof *f->head);
  f->rev = graft__malloc(na1 * sizeof *f->rev);
  f->cap = graft__malloc(na1 * sizeof *f->cap);
  f->cur = graft__malloc((size_t)nv * sizeof *f->cur);
  f->level = graft__malloc((size_t)nv * sizeof *f->level);
  f->queue = graft__malloc((size_t)nv * sizeof *f->queue);
  f->path = graft__malloc((size_t)nv * sizeof *f->path);
  if (!f->first || !f->head || !f->rev || !f->cap || !f->cur || !f->level || !f->queue || !f->path)
    return GRAFT_ENOMEM;
  for (int64_t e = 0; e < a->n; e++) {
    f->first[a->a[e].tail + 1]++;
    f->first[a->a[e].head + 1]++;
  }
  for (uint32_t v = 0; v < nv; v++) f->first[v + 1] += f->first[v];
  memcpy(f->cur, f->first, (size_t)nv * sizeof *f->cur);
  for (int64_t e = 0; e < a->n; e++) {
    const arc *c = &a->a[e];
    int64_t x = f->cur[c->tail]++, y = f->cur[c->head]++;
    f->head[x] = c->head;
    f->cap[x] = c->cap;
    f->rev[x] = y;
    f->head[y] = c->tail;
    f->cap[y] = 0;
    f->rev[y] = x;
  }
  return GRAFT_OK;
}

/* Levels from s over arcs with residual capacity; 1 if t is reached. */
static int flow_levels(flownet *f, uint32_t s, uint32_t t) {
  for (uint32_t v = 0; v < f->nv; v++) f->level[v] = -1;
  uint32_t qh = 0, qt = 0;
  f->level[s] = 0;
  f->queue[qt++] = s;
  while (qh < qt) {
    uint32_t u = f->queue[qh++];
    for (int64_t a = f->first[u]; a < f->first[u + 1]; a++) {
      uint32_t v = f->head[a];
      if (f->cap[a] > 0 && f->level[v] < 0) {
        f->level[v] = f->level[u] + 1;
        f->queue[qt++] = v;
      }
    }
    f->work += f->first[u + 1] - f->first[u];
  }
  return f->level[t] >= 0;
}

/* A blocking flow along the levels (Dinic) by an iterative DFS; returns the
 * flow it adds.  Stops early when the work runs out. */
static int64_t flow_block(flownet *f, uint32_t s, uint32_t t) {
  int64_t total = 0;
  uint32_t depth = 0, u = s;
  memcpy(f->cur, f->first, (size_t)f->nv * sizeof *f->cur);
  while (f->work < f->work_max) {
    if (u == t) {
      int64_t push = FLOW_INF;
      for (uint32_t k = 0; k < depth; k++) push = GRAFT__MIN(push, f->cap[f->path[k]]);
      uint32_t cut = depth;
      for (uint32_t k = 0; k < depth; k++) {
        int64_t a = f->path[k];
        f->cap[a] -= push;
        f->cap[f->rev[a]] += push;
        if (cut == depth && !f->cap[a]) cut = k;
      }
      f->work += depth;
      total += push;
      depth = cut; /* back to the tail of the first saturated arc */
      u = depth ? f->head[f->path[depth - 1]] : s;
      continue;
    }
    int64_t a = f->cur[u];
    for (; a < f->first[u + 1]; a++)
      if (f->cap[a] > 0 && f->level[f->head[a]] == f->level[u] + 1) break;
    f->work += a - f->cur[u] + 1;
    f->cur[u] = a;
    if (a < f->first[u + 1]) {
      f->path[depth++] = a;
      u = f->head[a];
      continue;
    }
    f->level[u] = -1; /* a dead end for the rest of this phase */
    if (!depth) break;
    depth--;
    u = depth ? f->head[f->path[depth - 1]] : s;
    f->cur[u]++;
  }
  return total;
}

/* The covering pairs of "before" (x before y, nothing between) as arcs
 * out(x) -> in(y): the buffers after x in first-writer order (a linear
 * extension) that x is before and that no earlier such buffer is before.
 * -1 past a->max_n arcs or without memory. */
static int covering_arcs(const mp *m, arcs *a) {
  uint32_t nb = m->nb;
  int64_t cw = m->cw;
  int rc = -1;
  uint64_t *covered = graft__malloc((size_t)(cw ? cw : 1) * sizeof *covered);
  uint64_t *later = graft__calloc((size_t)(cw ? cw : 1), sizeof *later);
  if (!covered || !later) goto out;
  for (uint32_t k = 0; k < nb; k++)
    if (m->buf[k].size) later[k >> 6] |= 1ull << (k & 63);
  for (uint32_t x = 0; x < nb; x++) {
    later[x >> 6] &= ~(1ull << (x & 63)); /* later: the buffers with bytes after x */
    if (!m->buf[x].size) continue;
    const uint64_t *cx = m->conf + (int64_t)x * cw;
    int64_t x0 = x >> 6;
    memset(covered + x0, 0, (size_t)(cw - x0) * sizeof *covered);
    for (int64_t w = x0; w < cw; w++) {
      uint64_t bits;
      while ((bits = later[w] & ~cx[w] & ~covered[w])) {
        uint32_t y = (uint32_t)(w * 64 + __builtin_ctzll(bits));
        if (arc_add(a, 2 + 2 * x, 3 + 2 * y, FLOW_INF)) goto out;
        covered[w] |= 1ull << (y & 63);
        const uint64_t *cy = m->conf + (int64_t)y * cw;
        for (int64_t v = w; v < cw; v++) covered[v] |= later[v] & ~cy[v];
      }
    }
  }
  rc = 0;
out:
  graft__free(covered);
  graft__free(later);
  return rc;
}

/* The largest total size of pairwise conflicting buffers, a maximum-weight
 * antichain of "before", as weighted Dilworth gives it.  The network: s ->
 * out(x) of capacity size(x), in(y) -> t of capacity size(y), unbounded
 * arcs out(x) -> in(y) for the covering pairs and in(y) -> out(y), so that
 * an unbounded path out(x) ~> in(y) exists exactly when x is before y.  A
 * finite cut is a set X of outs and Y of ins meeting every such pair; the
 * buffers in neither form an antichain, so the min cut is at least the
 * total size less the max antichain, and for a maximal antichain Z, X =
 * below Z and Y = above Z is a cut of exactly total - Z.  After the flow,
 * the buffers whose out s still reaches and whose in it does not are an
 * antichain (no unbounded path leads from one's out to another's in, and
 * in -> out keeps them apart), of weight total - flow when the flow is
 * maximal; an unfinished flow still yields an antichain.
 * Returns its weight, or -1 when the network is too large or memory short;
 * *done says whether the flow finished (the weight is then the maximum). */
static int64_t antichain_bound(const mp *m, int *done) {
  uint32_t nb = m->nb, nv = 2 + 2 * nb, s = 0, t = 1;
  int64_t bound = -1, total = 0, flow = 0;
  *done = 0;
  arcs a = {NULL, 0, 0, 3 * (int64_t)nb + FLOW_ARCS_PER_VALUE * ((int64_t)m->n + 64)};
  flownet f;
  memset(&f, 0, sizeof f);
  for (uint32_t x = 0; x < nb; x++) {
    const buffer *b = &m->buf[x];
    if (!b->size) continue;
    total += b->size;
    if (arc_add(&a, s, 2 + 2 * x, b->size) || arc_add(&a, 3 + 2 * x, t, b->size) ||
        arc_add(&a, 3 + 2 * x, 2 + 2 * x, FLOW_INF))
      goto out;
  }
  if (covering_arcs(m, &a) || flownet_build(&f, nv, &a)) goto out;
  f.work_max = graft__memplan_flow_work > 0 ? graft__memplan_flow_work
                                           : FLOW_WORK_PER_VALUE * ((int64_t)m->n + 64);
  while (f.work < f.work_max && flow_levels(&f, s, t)) flow += flow_block(&f, s, t);
  /* level[] >= 0: what s reaches over arcs with residual capacity */
  *done = !flow_levels(&f, s, t);
  bound = 0;
  for (uint32_t x = 0; x < nb; x++)
    if (m->buf[x].size && f.level[2 + 2 * x] >= 0 && f.level[3 + 2 * x] < 0) bound += m->buf[x].size;
  if (*done && bound != total - flow) { /* cannot happen: distrust the flow */
    *done = 0;
    bound = -1;
  }
out:
  graft__free(a.a);
  flownet_free(&f);
  return bound;
}

/* naive, LOAD and the parallel-safe bound.
 * LOAD: max bytes of buffers live at once along the compile order.  The
 * buffers live at one step of a valid schedule conflict pairwise, so LOAD is
 * a lower bound of any correct arena; so is the weight of any set of
 * pairwise conflicting buffers (an antichain of "before").  The bound is the
 * largest such weight (antichain_bound); where that flow did not finish,
 * the larger of what it found and a greedy set: the LOAD peak set plus
 * every buffer that conflicts with all members, largest first. */
static void bound_stats(mp *m, int64_t flow, int flow_done) {
  graft__plan *p = m->p;
  const buffer *buf = m->buf;
  uint32_t n = m->n, nb = m->nb;
  int64_t naive = 0;
  for (uint32_t i = 0; i < n; i++) naive += graft__slot_bytes(value_bytes(p, i), p->pack_small);
  p->stats.naive_bytes = naive;
  uint32_t *members = NULL;
  keyed *tmp = NULL;
  int64_t peak_at, peak = live_peak(m, &peak_at);
  if (peak < 0) goto out;
  p->stats.load_bytes = peak;
  p->stats.bound_bytes = GRAFT__MAX(peak, flow);
  if (!m->conf || flow_done) goto out;
  members = graft__malloc((nb ? nb : 1) * sizeof *members);
  tmp = graft__malloc((nb ? nb : 1) * sizeof *tmp);
  if (!members || !tmp) goto out;
  int64_t bound = 0;
  uint32_t nm = 0;
  for (uint32_t b = 0; b < nb; b++) {
    tmp[b] = (keyed){-buf[b].size, 0, b};
    if (buf[b].size && buf[b].w0 <= peak_at && buf[b].last >= peak_at) {
      members[nm++] = b;
      bound += buf[b].size;
    }
  }
  qsort(tmp, nb, sizeof *tmp, by_key);
  for (uint32_t k = 0; k < nb; k++) {
    uint32_t b = tmp[k].k;
    int ok = buf[b].size > 0;
    for (uint32_t j = 0; j < nm && ok; j++) ok = b != members[j] && conflicts(m, b, members[j]);
    if (!ok) continue;
    members[nm++] = b;
    bound += buf[b].size;
  }
  p->stats.bound_bytes = GRAFT__MAX(p->stats.bound_bytes, bound);
out:
  graft__free(members);
  graft__free(tmp);
}
