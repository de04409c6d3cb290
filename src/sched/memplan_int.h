/* Between the memory planner's parts: the exact planner (memplan.c) and
 * the local one for plans above its size limit (memplan_local.c). */
#ifndef GRAFT_SCHED_MEMPLAN_INT_H
#define GRAFT_SCHED_MEMPLAN_INT_H

#include "sched/sched.h"

/* A buffer: one value, or an in-place chain of values (its first writer
 * first), numbered by first writer. */
typedef struct graft__mbuf {
  int64_t size;        /* bytes, rounded to a slot (graft__slot_bytes) */
  uint32_t w0;         /* first writer (order position) */
  int sink;            /* read at the end of the call */
  int64_t last;        /* last touch (order position; n for a sink) */
  int64_t off;
} graft__mbuf;

/* Bounded ancestor search: graft__anc_search(a, w, cap) walks the
 * predecessors of position w breadth first and marks what it reaches, at
 * most cap positions (<= a->cap), the nearest first.  Then
 * graft__anc_before(a, t) is true when that proves t an ancestor of w: t
 * was marked, or the end of t's single-successor chain (jump) was, or that
 * chain runs into w.  False proves nothing.  Callers try GRAFT__ANC_NEAR
 * first (it settles a regular graph: a stencil, a tree, a chain) and
 * GRAFT__ANC_CAP only when that proves too little. */
#define GRAFT__ANC_NEAR 8
#define GRAFT__ANC_CAP 64

typedef struct graft__anc {
  const graft__plan *p;
  uint32_t *mark;      /* n: == stamp for the last search's finds */
  uint32_t *jump;      /* n: the end of each position's single-successor chain */
  uint32_t *level;     /* n: the longest path from a source (an ancestor's is lower) */
  uint32_t *found;     /* a->cap: what the last search marked, in BFS order */
  uint32_t n_found, cap, stamp;
  uint32_t of, of_cap; /* the last search: from which position, how far */
} graft__anc;

graft_status graft__anc_init(graft__anc *a, const graft__plan *p, uint32_t cap);
void graft__anc_free(graft__anc *a);
void graft__anc_search(graft__anc *a, uint32_t w, uint32_t cap);
/* Is r an ancestor of w?  1 proves it; 0 when it is not, or the search
 * (of at most cap positions between them) did not find it.  Leaves no
 * marks for graft__anc_before. */
int graft__anc_reaches(graft__anc *a, uint32_t r, uint32_t w, uint32_t cap);
static inline int graft__anc_before(const graft__anc *a, uint32_t t) {
  uint32_t j = a->jump[t];
  return t != a->of && (a->mark[t] == a->stamp || a->mark[j] == a->stamp || j == a->of);
}

graft_status graft__memplan_local(const graft__plan *p, graft__anc *a, graft__mbuf *buf, uint32_t nb,
                                  const uint32_t *bid, int64_t *arena);

#endif
