/* Static memory planner: every intermediate value gets an offset in one
 * arena so that two values share bytes only when, in EVERY schedule the DAG
 * allows, everything that touches the earlier one (its writer, its readers,
 * and the end of the call for outputs and staged assignments) finishes
 * before the later one's writer starts.
 *
 * 1. Reachability: ancestor bitsets over the compute nodes.
 * 2. In place: an elementwise node whose output has an input's shape and
 *    element size writes over that input when every other reader of the
 *    input is its ancestor.  Such chains form one buffer.
 * 3. Buffers are placed largest first at the best-fitting gap among the
 *    already placed buffers they conflict with (neither ordered after the
 *    other).
 *
 * Above MAX_EXACT compute nodes the bitsets would not fit, so the planner
 * only merges in-place chains whose input has a single reader and gives every
 * buffer its own bytes (correct, not compact; stats say so). */
#include <stdlib.h>
#include <string.h>

#include "sched/sched.h"

#define MAX_EXACT 16384

int graft__memplan_naive;
#define ROUND(b) (((b) + GRAFT__ALIGN - 1) & ~(int64_t)(GRAFT__ALIGN - 1))

typedef struct buffer {
  int64_t size;        /* bytes, rounded to the alignment */
  uint32_t w0;         /* first writer (order position) */
  int sink;            /* read at the end of the call */
  uint32_t *touch;     /* maximal touches (writers and readers) */
  int32_t n_touch;
  int64_t off;
} buffer;

typedef struct mp {
  graft__plan *p;
  uint32_t n;
  int64_t nw;          /* words per bitset */
  uint64_t *anc;       /* n x nw: strict ancestors */
  uint32_t *root;      /* order position -> buffer root position */
  uint8_t *sink;       /* per position: value read at the end of the call */
} mp;

static inline int is_anc(const mp *m, uint32_t a, uint32_t of) {
  return (m->anc[(int64_t)of * m->nw + (a >> 6)] >> (a & 63)) & 1u;
}

static int64_t value_bytes(const graft__plan *p, uint32_t i) {
  const graft__tview *v = graft__plan_view(p, p->order[i]);
  return v->numel * (int64_t)graft_dtype_size(v->dtype);
}

static void ancestors(mp *m) {
  const graft__plan *p = m->p;
  for (uint32_t i = 0; i < m->n; i++) {
    uint64_t *a = m->anc + (int64_t)i * m->nw;
    for (uint32_t e = p->pred_off[i]; e < p->pred_off[i + 1]; e++) {
      uint32_t u = p->pred[e];
      const uint64_t *b = m->anc + (int64_t)u * m->nw;
      for (int64_t w = 0; w <= (int64_t)(u >> 6); w++) a[w] |= b[w];
      a[u >> 6] |= 1ull << (u & 63);
    }
  }
}

/* Every reader of u other than i precedes i in every schedule. */
static int others_precede(const mp *m, uint32_t u, uint32_t i) {
  const graft__plan *p = m->p;
  for (uint32_t e = p->succ_off[u]; e < p->succ_off[u + 1]; e++) {
    uint32_t r = p->succ[e];
    if (r == i) continue;
    if (!m->anc || !is_anc(m, r, i)) return 0;
  }
  return 1;
}

/* The input order position i may overwrite, or UINT32_MAX. */
static uint32_t inplace_victim(const mp *m, uint32_t i) {
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
    if (m->sink[u] || v->numel != o->numel || v->rank != o->rank ||
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

/* Collect each buffer's touches and keep the maximal ones (those that are
 * not ancestors of another touch). */
static graft_status gather(mp *m, buffer *buf, uint32_t *bid, uint32_t nb) {
  const graft__plan *p = m->p;
  int64_t *cnt = graft__calloc(nb ? nb : 1, sizeof *cnt);
  if (!cnt) return GRAFT_ENOMEM;
  for (uint32_t i = 0; i < m->n; i++) cnt[bid[i]] += 1 + (p->succ_off[i + 1] - p->succ_off[i]);
  for (uint32_t b = 0; b < nb; b++) {
    buf[b].touch = graft__malloc((size_t)(cnt[b] ? cnt[b] : 1) * sizeof *buf[b].touch);
    if (!buf[b].touch) {
      graft__free(cnt);
      return GRAFT_ENOMEM;
    }
  }
  graft__free(cnt);
  for (uint32_t i = 0; i < m->n; i++) {
    buffer *b = &buf[bid[i]];
    b->touch[b->n_touch++] = i;
    for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++) b->touch[b->n_touch++] = p->succ[e];
  }
  if (!m->anc) return GRAFT_OK;
  /* A touch is maximal when it is no ancestor of another touch: OR the
   * ancestor sets of all touches once, then keep those outside the union
   * (linear in the touches, where comparing pairs was quadratic). */
  uint64_t *uni = graft__calloc((size_t)(m->nw ? m->nw : 1), sizeof *uni);
  if (!uni) return GRAFT_ENOMEM;
  for (uint32_t k = 0; k < nb; k++) {
    buffer *b = &buf[k];
    for (int32_t x = 0; x < b->n_touch; x++) {
      const uint64_t *a = m->anc + (int64_t)b->touch[x] * m->nw;
      for (int64_t w = 0; w <= (int64_t)(b->touch[x] >> 6); w++) uni[w] |= a[w];
    }
    int32_t w = 0;
    for (int32_t x = 0; x < b->n_touch; x++) {
      uint32_t t = b->touch[x];
      uint64_t bit = 1ull << (t & 63);
      if (uni[t >> 6] & bit) continue;      /* an ancestor of another touch */
      uni[t >> 6] |= bit;                   /* keep duplicates out */
      b->touch[w++] = t;
    }
    b->n_touch = w;
    memset(uni, 0, (size_t)m->nw * sizeof *uni);
  }
  graft__free(uni);
  return GRAFT_OK;
}

/* Buffer y may use x's bytes: x is finished before y's first write. */
static int after(const mp *m, const buffer *y, const buffer *x) {
  if (x->sink || !m->anc) return 0;
  for (int32_t k = 0; k < x->n_touch; k++)
    if (!is_anc(m, x->touch[k], y->w0)) return 0;
  return 1;
}

static int conflict(const mp *m, const buffer *a, const buffer *b) {
  return !after(m, a, b) && !after(m, b, a);
}

static const buffer *sort_buf;
static int by_size_desc(const void *a, const void *b) {
  const buffer *x = &sort_buf[*(const uint32_t *)a], *y = &sort_buf[*(const uint32_t *)b];
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  return x->w0 < y->w0 ? -1 : x->w0 > y->w0;
}

/* Best fit over the placed buffers, kept sorted by offset: the smallest gap
 * between the conflicting ones that holds size, else the end. */
static int64_t best_fit(const mp *m, const buffer *buf, const uint32_t *placed, uint32_t np,
                        const buffer *b) {
  int64_t at = 0, best = -1, best_gap = INT64_MAX;
  for (uint32_t k = 0; k < np; k++) {
    const buffer *o = &buf[placed[k]];
    if (!o->size || !conflict(m, b, o)) continue;
    if (o->off - at >= b->size && o->off - at < best_gap) {
      best = at;
      best_gap = o->off - at;
    }
    at = GRAFT__MAX(at, o->off + o->size);
  }
  return best >= 0 ? best : at;
}

/* Insert buffer k into placed[] keeping offsets ascending. */
static void insert_placed(const buffer *buf, uint32_t *placed, uint32_t *np, uint32_t k) {
  uint32_t lo = 0, hi = *np;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (buf[placed[mid]].off <= buf[k].off) lo = mid + 1;
    else hi = mid;
  }
  memmove(placed + lo + 1, placed + lo, (size_t)(*np - lo) * sizeof *placed);
  placed[lo] = k;
  (*np)++;
}

static void bound_stats(const mp *m, buffer *buf, const uint32_t *bid, uint32_t nb);

graft_status graft__memplan(graft__plan *p) {
  double t0 = graft__now_us();
  mp m = {p, p->n_order, 0, NULL, NULL, NULL};
  uint32_t n = m.n;
  graft_status st = GRAFT_ENOMEM;
  buffer *buf = NULL;
  uint32_t *bid = NULL, *idx = NULL, *placed = NULL;
  m.root = graft__malloc((n ? n : 1) * sizeof *m.root);
  m.sink = graft__calloc(n ? n : 1, 1);
  bid = graft__malloc((n ? n : 1) * sizeof *bid);
  if (!m.root || !m.sink || !bid) goto out;
  if (n <= MAX_EXACT) {
    m.nw = (n + 63) / 64;
    m.anc = graft__calloc((size_t)n * (size_t)(m.nw ? m.nw : 1), sizeof *m.anc);
    if (!m.anc) goto out;
    ancestors(&m);
  }
  /* Outputs and staged assignments are read after the graph. */
  for (uint32_t i = 0; i < n; i++) {
    const graft__node *nd = graft__graph_node(p->g, p->order[i]);
    m.sink[i] = graft__ops[nd->op].flags & GRAFT__OPF_SIDE_EFFECT ? 1 : 0;
    m.root[i] = i;
  }
  for (int k = 0; k < p->g->n_outputs; k++) {
    uint32_t id = p->g->outputs[k];
    for (uint32_t i = 0; i < n; i++)
      if (p->order[i] == id) m.sink[i] = 1;
  }
  int64_t inplace = 0;
  for (uint32_t i = 0; i < n && !graft__memplan_naive; i++) {
    uint32_t u = inplace_victim(&m, i);
    if (u == UINT32_MAX) continue;
    /* a buffer takes one in-place writer per value: u's data dies here */
    m.root[i] = find_root(m.root, u);
    inplace++;
  }
  uint32_t nb = 0;
  for (uint32_t i = 0; i < n; i++) bid[i] = find_root(m.root, i) == i ? nb++ : UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) bid[i] = bid[find_root(m.root, i)];
  buf = graft__calloc(nb ? nb : 1, sizeof *buf);
  idx = graft__malloc((nb ? nb : 1) * sizeof *idx);
  placed = graft__malloc((nb ? nb : 1) * sizeof *placed);
  if (!buf || !idx || !placed) goto out;
  for (uint32_t i = 0; i < n; i++) {
    buffer *b = &buf[bid[i]];
    if (find_root(m.root, i) == i) b->w0 = i;
    b->size = GRAFT__MAX(b->size, ROUND(value_bytes(p, i)));
    b->sink |= m.sink[i];
  }
  if (gather(&m, buf, bid, nb)) goto out;

  for (uint32_t k = 0; k < nb; k++) idx[k] = k;
  sort_buf = buf;
  qsort(idx, nb, sizeof *idx, by_size_desc);
  int64_t arena = 0;
  uint32_t np = 0;
  for (uint32_t k = 0; k < nb; k++) {
    buffer *b = &buf[idx[k]];
    if (m.anc && !graft__memplan_naive)
      b->off = b->size ? best_fit(&m, buf, placed, np, b) : 0;
    else
      b->off = arena; /* no reachability: no sharing */
    insert_placed(buf, placed, &np, idx[k]);
    arena = GRAFT__MAX(arena, b->off + b->size);
  }
  for (uint32_t i = 0; i < n; i++) p->offset[p->order[i]] = (size_t)buf[bid[i]].off;
  p->arena_bytes = (size_t)arena;
  p->stats.inplace = inplace;
  p->stats.planner_exact = m.anc != NULL;
  bound_stats(&m, buf, bid, nb);
  p->stats.planner_us = graft__now_us() - t0;
  st = GRAFT_OK;
out:
  if (buf)
    for (uint32_t k = 0; k < nb; k++) graft__free(buf[k].touch);
  graft__free(buf);
  graft__free(bid);
  graft__free(idx);
  graft__free(placed);
  graft__free(m.anc);
  graft__free(m.root);
  graft__free(m.sink);
  return st;
}

/* naive, LOAD and the parallel-safe bound.
 * LOAD: max bytes of buffers live at once along the compile order.  The
 * buffers live at one step of a valid schedule conflict pairwise, so LOAD is
 * a lower bound of any correct arena; so is the weight of any set of
 * pairwise conflicting buffers (an antichain of "after"): the bound starts
 * from the LOAD peak set and greedily adds every buffer that conflicts with
 * all members, largest first. */
static void bound_stats(const mp *m, buffer *buf, const uint32_t *bid, uint32_t nb) {
  graft__plan *p = m->p;
  uint32_t n = m->n;
  int64_t naive = 0;
  for (uint32_t i = 0; i < n; i++) naive += ROUND(value_bytes(p, i));
  p->stats.naive_bytes = naive;
  /* Live range of a buffer in the compile order: [first touch, last touch],
   * the end of the order for sinks. */
  int64_t *first = graft__malloc((nb ? nb : 1) * sizeof *first);
  int64_t *last = graft__malloc((nb ? nb : 1) * sizeof *last);
  uint8_t *in = graft__calloc(nb ? nb : 1, 1);
  if (!first || !last || !in) goto out;
  for (uint32_t b = 0; b < nb; b++) {
    first[b] = INT64_MAX;
    last[b] = buf[b].sink ? (int64_t)n : -1;
  }
  for (uint32_t i = 0; i < n; i++) {
    uint32_t b = bid[i];
    first[b] = GRAFT__MIN(first[b], (int64_t)i);
    last[b] = GRAFT__MAX(last[b], (int64_t)i);
    for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++)
      last[b] = GRAFT__MAX(last[b], (int64_t)p->succ[e]);
  }
  /* Sweep: +size at first, -size after last. */
  int64_t peak = 0, peak_at = 0, cur = 0;
  int64_t *delta = graft__calloc((size_t)n + 2, sizeof *delta);
  if (!delta) goto out;
  for (uint32_t b = 0; b < nb; b++) {
    delta[first[b]] += buf[b].size;
    delta[last[b] + 1] -= buf[b].size;
  }
  for (uint32_t i = 0; i <= n; i++) {
    cur += delta[i];
    if (cur > peak) {
      peak = cur;
      peak_at = i;
    }
  }
  graft__free(delta);
  p->stats.load_bytes = peak;
  int64_t bound = 0;
  uint32_t *members = graft__malloc((nb ? nb : 1) * sizeof *members);
  uint32_t nm = 0;
  if (!members) {
    p->stats.bound_bytes = peak;
    goto out;
  }
  for (uint32_t b = 0; b < nb; b++)
    if (first[b] <= peak_at && last[b] >= peak_at) {
      in[b] = 1;
      members[nm++] = b;
      bound += buf[b].size;
    }
  if (m->anc) {
    uint32_t *order = graft__malloc((nb ? nb : 1) * sizeof *order);
    if (order) {
      for (uint32_t k = 0; k < nb; k++) order[k] = k;
      sort_buf = buf;
      qsort(order, nb, sizeof *order, by_size_desc);
      for (uint32_t k = 0; k < nb; k++) {
        uint32_t b = order[k];
        if (in[b] || !buf[b].size) continue;
        int ok = 1;
        for (uint32_t j = 0; j < nm && ok; j++) ok = conflict(m, &buf[b], &buf[members[j]]);
        if (!ok) continue;
        in[b] = 1;
        members[nm++] = b;
        bound += buf[b].size;
      }
      graft__free(order);
    }
  }
  p->stats.bound_bytes = bound;
  graft__free(members);
out:
  graft__free(first);
  graft__free(last);
  graft__free(in);
}
