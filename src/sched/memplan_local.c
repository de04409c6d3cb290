/* The local memory planner, for plans too large for the exact planner's
 * reachability bitsets (memplan.c): reuse proven by a bounded search of
 * each writer's nearest ancestors.
 *
 * Buffer x may give its bytes to a later buffer y when every touch of x
 * (the readers of its values, or a value's writer when nothing reads it)
 * precedes y's first writer w in every schedule, and x is not read after
 * the graph.  The proof that touch t precedes w: w's breadth-first search
 * of its ancestors (at most GRAFT__ANC_CAP positions, the nearest first)
 * found t, or found the end of t's single-successor chain (t -> u -> ...,
 * each node with one successor: the levels of a reduction tree lead to its
 * root that way), or that chain runs into w.
 *
 * Walking the compile order, each buffer's first writer searches; the
 * candidates are the buffers whose last touch, or its chain's end, the
 * search found; y takes the smallest free slot that holds it (an exact fit
 * ends the scan), else a new slot.  A slot larger by whole lines is split:
 * y takes the front, and the rest stays free under the old occupant's
 * proof.  When no free slot holds y, a run of adjacent free slots of one
 * root does (merged into one), or a free slot at the end of its root grows
 * (the roots are laid out only at the end): a weight gradient then takes
 * the bytes of dead activations instead of all new ones.  What the search
 * does not prove is never
 * shared, so the plan is correct whatever the caps, and compact where
 * lifetimes are local: a stencil wavefront, blocks joined by reduction
 * trees, the temporaries of a long unrolled loop.  Cost: O(GRAFT__ANC_CAP +
 * CAND_CAP x RUN_CAP) per buffer. */
#include <stdlib.h>
#include <string.h>

#include "sched/memplan_int.h"

graft_status graft__anc_init(graft__anc *a, const graft__plan *p, uint32_t cap) {
  memset(a, 0, sizeof *a);
  uint32_t n = p->n_order;
  a->p = p;
  a->cap = cap;
  a->of = UINT32_MAX; /* (no search yet: stamp 0 would mark everything) */
  a->mark = graft__calloc(n ? n : 1, sizeof *a->mark);
  a->jump = graft__malloc((n ? n : 1) * sizeof *a->jump);
  a->level = graft__calloc(n ? n : 1, sizeof *a->level);
  a->found = graft__malloc((size_t)cap * sizeof *a->found);
  if (!a->mark || !a->jump || !a->level || !a->found) {
    graft__anc_free(a);
    return GRAFT_ENOMEM;
  }
  for (uint32_t t = n; t-- > 0;)
    a->jump[t] = p->succ_off[t + 1] - p->succ_off[t] == 1 ? a->jump[p->succ[p->succ_off[t]]] : t;
  for (uint32_t t = 0; t < n; t++)
    for (uint32_t e = p->pred_off[t]; e < p->pred_off[t + 1]; e++)
      a->level[t] = GRAFT__MAX(a->level[t], a->level[p->pred[e]] + 1);
  return GRAFT_OK;
}

void graft__anc_free(graft__anc *a) {
  graft__free(a->mark);
  graft__free(a->jump);
  graft__free(a->level);
  graft__free(a->found);
  a->mark = a->jump = a->level = a->found = NULL;
}

void graft__anc_search(graft__anc *a, uint32_t w, uint32_t cap) {
  const graft__plan *p = a->p;
  uint32_t nf = 0, head = 0, v = w;
  cap = GRAFT__MIN(cap, a->cap);
  a->stamp++;
  a->of = w;
  a->of_cap = cap;
  for (;;) {
    for (uint32_t e = p->pred_off[v]; e < p->pred_off[v + 1] && nf < cap; e++) {
      uint32_t u = p->pred[e];
      if (a->mark[u] == a->stamp) continue;
      a->mark[u] = a->stamp;
      a->found[nf++] = u;
    }
    if (head == nf || nf == cap) break;
    v = a->found[head++];
  }
  a->n_found = nf;
}

/* Candidates examined per search, at most: buffers of many sizes at one
 * hub position would otherwise make the scan quadratic. */
#define CAND_CAP (4 * GRAFT__ANC_CAP)

int graft__anc_reaches(graft__anc *a, uint32_t r, uint32_t w, uint32_t cap) {
  const graft__plan *p = a->p;
  /* (an ancestor comes earlier in the order, and on a lower level) */
  if (r >= w || a->level[r] >= a->level[w]) return 0;
  if (a->jump[r] == w) return 1;
  uint32_t nf = 0, head = 0, v = w;
  cap = GRAFT__MIN(cap, a->cap);
  a->stamp++;
  a->of = UINT32_MAX; /* (the marks no longer answer graft__anc_before) */
  for (;;) {
    for (uint32_t e = p->pred_off[v]; e < p->pred_off[v + 1]; e++) {
      uint32_t u = p->pred[e];
      /* r -> ... -> u -> ... -> w; a path from r runs through positions
       * after r only */
      if (u == r || a->jump[r] == u) return 1;
      if (u < r || a->level[u] <= a->level[r] || a->mark[u] == a->stamp || nf == cap) continue;
      a->mark[u] = a->stamp;
      a->found[nf++] = u;
    }
    if (head == nf) return 0;
    v = a->found[head++];
  }
}

typedef struct local {
  const graft__mbuf *buf;
  const uint32_t *t_off, *touch;  /* touches of each buffer */
  const uint32_t *r_off;          /* candidates by key position ... */
  uint32_t *rel, *r_lo;           /* ... from r_lo on not yet reused */
  const int64_t *s_size;          /* slots: bytes ... */
  const uint32_t *s_occ;          /* ... the buffer in each ... */
  const uint32_t *s_next;         /* ... and the slot after it in its root (or NONE) */
  const uint32_t *b_slot;         /* each buffer's slot: where its bytes are free once it
                                   * dies (the rest of a split slot), not where they are */
} local;

#define NONE UINT32_MAX
/* Slots a run of free slots may span, at most. */
#define RUN_CAP 16

/* Does the last search prove every touch of buffer x before its writer? */
static int dead(const local *l, const graft__anc *a, uint32_t x) {
  for (uint32_t t = l->t_off[x]; t < l->t_off[x + 1]; t++)
    if (!graft__anc_before(a, l->touch[t])) return 0;
  return 1;
}

/* The smallest slot the last search proves free that holds size bytes,
 * or NONE. */
static uint32_t free_slot(local *l, const graft__anc *a, int64_t size) {
  uint32_t best = NONE, seen = 0;
  for (uint32_t f = 0; f < a->n_found && seen < CAND_CAP; f++) {
    uint32_t at = a->found[f];
    for (uint32_t r = l->r_lo[at]; r < l->r_off[at + 1] && seen < CAND_CAP; r++) {
      uint32_t x = l->rel[r], s = l->b_slot[x];
      if (l->s_occ[s] != x) {
        /* reused, so never free again: swap it out to the front (whose
         * entry this scan has seen) and drop it */
        l->rel[r] = l->rel[l->r_lo[at]];
        l->rel[l->r_lo[at]++] = x;
        continue;
      }
      seen++;
      /* (a slot of 64 bytes or more is 64-aligned; one under 64 holds only
       * values of at most 48 bytes: the alignment always fits) */
      if (l->s_size[s] < size || (best != NONE && l->s_size[best] <= l->s_size[s])) continue;
      if (!dead(l, a, x)) continue;
      best = s;
      if (l->s_size[s] == size) return s;
    }
  }
  return best;
}

/* Where no free slot holds size bytes (a whole number of lines): a run of
 * adjacent free whole-line slots of one root, starting at a slot the last
 * search proves free, that holds them with the fewest bytes to spare; else
 * one that ends its root, which may grow, with the least growth.  Returns
 * its first slot (NONE if neither), *end the slot after it, *total its
 * bytes. */
static uint32_t free_run(const local *l, const graft__anc *a, int64_t size, uint32_t *end,
                         int64_t *total) {
  uint32_t best = NONE, seen = 0;
  int64_t best_cost = INT64_MAX; /* spare bytes of a run that holds size; size + growth if not */
  for (uint32_t f = 0; f < a->n_found && seen < CAND_CAP; f++) {
    uint32_t at = a->found[f];
    for (uint32_t r = l->r_lo[at]; r < l->r_off[at + 1] && seen < CAND_CAP; r++) {
      uint32_t x = l->rel[r], s = l->b_slot[x];
      if (l->s_occ[s] != x || l->s_size[s] % GRAFT__ALIGN) continue;
      seen++;
      if (!dead(l, a, x)) continue;
      int64_t sum = l->s_size[s];
      uint32_t k = l->s_next[s];
      for (int n = 1; sum < size && k != NONE && n < RUN_CAP; n++, k = l->s_next[k]) {
        uint32_t xk = l->s_occ[k];
        if (l->b_slot[xk] != k || !l->buf[xk].size || l->buf[xk].sink ||
            l->s_size[k] % GRAFT__ALIGN || !dead(l, a, xk))
          break;
        sum += l->s_size[k];
      }
      int64_t cost = sum >= size ? sum - size : k == NONE ? 2 * size - sum : INT64_MAX;
      if (cost < best_cost) {
        best_cost = cost;
        best = s;
        *end = k;
        *total = sum;
      }
    }
  }
  return best;
}

graft_status graft__memplan_local(const graft__plan *p, graft__anc *a, graft__mbuf *buf,
                                  uint32_t nb, const uint32_t *bid, int64_t *arena) {
  uint32_t n = p->n_order, nb1 = nb ? nb : 1;
  size_t ns_max = 2 * (size_t)nb1;
  graft_status st = GRAFT_ENOMEM;
  /* Touches of each buffer (t_off/touch), candidates by key position
   * (r_off/rel/r_lo); slots: bytes, occupant, root slot, offset in it and
   * the next slot of the root (s_size, s_occ, s_root, s_off, s_next), at
   * most one per buffer plus one per split; roots' extents and offsets in
   * the arena (s_ext, s_base); per buffer: the slot its bytes come free in
   * (b_slot) and the one it was placed in (b_place). */
  uint32_t *t_off = graft__calloc((size_t)nb + 2, sizeof *t_off);
  uint32_t *r_off = graft__calloc((size_t)n + 2, sizeof *r_off);
  uint32_t *r_lo = graft__malloc(((size_t)n + 1) * sizeof *r_lo), *rel = NULL;
  int64_t *s_size = graft__malloc(ns_max * sizeof *s_size);
  int64_t *s_off = graft__malloc(ns_max * sizeof *s_off);
  int64_t *s_ext = graft__malloc(ns_max * sizeof *s_ext);
  int64_t *s_base = graft__malloc(ns_max * sizeof *s_base);
  uint32_t *s_occ = graft__malloc(ns_max * sizeof *s_occ);
  uint32_t *s_root = graft__malloc(ns_max * sizeof *s_root);
  uint32_t *s_next = graft__malloc(ns_max * sizeof *s_next);
  uint32_t *b_slot = graft__malloc(nb1 * sizeof *b_slot);
  uint32_t *b_place = graft__malloc(nb1 * sizeof *b_place);
  uint32_t *touch = NULL, *lastv = graft__malloc(nb1 * sizeof *lastv);
  if (!lastv || !t_off || !r_off || !r_lo || !s_size || !s_off || !s_ext || !s_base || !s_occ ||
      !s_root || !s_next || !b_slot || !b_place)
    goto out;
  /* Only buffers that can be freed (bytes, not read after the graph) need
   * touches or a place in the release lists. */
#define FREEABLE(b) (buf[b].size && !buf[b].sink)
  /* Of an in-place chain only the last value's touches count: every other
   * touch precedes the next in-place writer (the condition that made it
   * one), hence the last value's writer, hence its readers.  A buffer that
   * GETs read in place (plan.c, alias_gets) counts every member's: its
   * control node's readers and each GET's are unordered. */
  for (uint32_t i = 0; i < n; i++) lastv[bid[i]] = i;
  for (uint32_t i = 0; p->alias && i < n; i++)
    if (p->alias[i] != UINT32_MAX) lastv[bid[i]] = UINT32_MAX;
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t i = 0; i < n; i++) {
      uint32_t b = bid[i], nr = 0;
      if (!FREEABLE(b) || (lastv[b] != i && lastv[b] != UINT32_MAX)) continue;
      for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++)
        if (graft__plan_reads(p, i, p->succ[e])) {
          if (pass) touch[t_off[b + 1]++] = p->succ[e];
          nr++;
        }
      if (!pass) t_off[b + 2] += nr ? nr : 1;
      else if (!nr) touch[t_off[b + 1]++] = i;
    }
    if (pass) break;
    /* counts at b + 2 become starts at b + 1; filling moves them to b + 2 */
    for (uint32_t b = 0; b < nb; b++) t_off[b + 2] += t_off[b + 1];
    touch = graft__malloc((t_off[nb + 1] ? t_off[nb + 1] : 1) * sizeof *touch);
    if (!touch) goto out;
  }
  /* A buffer is a candidate where the search may find its last touch t,
   * and where it may find t's chain end (when that differs). */
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t b = 0; b < nb; b++) {
      if (!FREEABLE(b)) continue;
      uint32_t t = (uint32_t)buf[b].last, key[2] = {t, a->jump[t]};
      for (int k = 0; k < 1 + (key[1] != t); k++) {
        if (pass) rel[r_off[key[k] + 1]++] = b;
        else r_off[key[k] + 2]++;
      }
    }
    if (pass) break;
    for (uint32_t i = 0; i < n; i++) r_off[i + 2] += r_off[i + 1];
    rel = graft__malloc((r_off[n + 1] ? r_off[n + 1] : 1) * sizeof *rel);
    if (!rel) goto out;
  }
  memcpy(r_lo, r_off, ((size_t)n + 1) * sizeof *r_lo);

  local l = {buf, t_off, touch, r_off, rel, r_lo, s_size, s_occ, s_next, b_slot};
  uint32_t ns = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t y = bid[i];
    if (buf[y].w0 != i || !buf[y].size) continue;
    graft__anc_search(a, i, GRAFT__ANC_NEAR);
    uint32_t best = free_slot(&l, a, buf[y].size);
    if (best == NONE || s_size[best] != buf[y].size) {
      graft__anc_search(a, i, GRAFT__ANC_CAP);
      best = free_slot(&l, a, buf[y].size);
    }
    uint32_t end;
    int64_t total;
    if (best == NONE && buf[y].size % GRAFT__ALIGN == 0 &&
        (best = free_run(&l, a, buf[y].size, &end, &total)) != NONE) {
      /* Merge the run into its first slot (grown to size bytes if it ends
       * its root short of them); the rest of the run's last slot, if any,
       * stays free under its occupant's proof (the split below), and the
       * slots merged in are never free again. */
      uint32_t last = s_occ[best];
      for (uint32_t k = s_next[best]; k != end; k = s_next[k]) {
        last = s_occ[k];
        s_occ[k] = y;
      }
      s_next[best] = end;
      s_size[best] = GRAFT__MAX(total, buf[y].size);
      s_occ[best] = last;
    }
    if (best == NONE) {
      best = ns++;
      s_size[best] = buf[y].size;
      s_root[best] = best;
      s_next[best] = NONE;
      s_off[best] = 0; /* (within its root: the roots are laid out below) */
    } else if (s_size[best] - buf[y].size >= GRAFT__ALIGN && buf[y].size % GRAFT__ALIGN == 0) {
      /* Split: y takes the front; the rest stays with the old occupant,
       * free under the same proof (whole lines, so aligned for anyone). */
      uint32_t rest = ns++, x = s_occ[best];
      s_root[rest] = s_root[best];
      s_off[rest] = s_off[best] + buf[y].size;
      s_size[rest] = s_size[best] - buf[y].size;
      s_occ[rest] = x;
      s_next[rest] = s_next[best];
      s_next[best] = rest;
      b_slot[x] = rest; /* (x's bytes stay where b_place says) */
      s_size[best] = buf[y].size;
    }
    s_occ[best] = y;
    b_slot[y] = b_place[y] = best;
  }
#undef FREEABLE
  /* The roots, each as large as the bytes split from it (s_ext); whole-line
   * roots first, then the small ones, so no padding falls between them. */
  for (uint32_t s = 0; s < ns; s++) s_ext[s] = 0;
  for (uint32_t s = 0; s < ns; s++)
    s_ext[s_root[s]] = GRAFT__MAX(s_ext[s_root[s]], s_off[s] + s_size[s]);
  int64_t top = 0;
  for (int small = 0; small < 2; small++)
    for (uint32_t s = 0; s < ns; s++)
      if (s_root[s] == s && (graft__slot_align(s_ext[s], p->pack_small) < GRAFT__ALIGN) == small) {
        s_base[s] = top;
        top += s_ext[s];
      }
  for (uint32_t b = 0; b < nb; b++)
    buf[b].off = buf[b].size ? s_base[s_root[b_place[b]]] + s_off[b_place[b]] : 0;
  *arena = top;
  st = GRAFT_OK;
out:
  graft__free(t_off);
  graft__free(r_off);
  graft__free(rel);
  graft__free(r_lo);
  graft__free(s_size);
  graft__free(s_off);
  graft__free(s_root);
  graft__free(s_next);
  graft__free(s_ext);
  graft__free(s_base);
  graft__free(s_occ);
  graft__free(b_slot);
  graft__free(b_place);
  graft__free(touch);
  graft__free(lastv);
  return st;
}
