/* The execution order of a lone worker, found at compile.
 *
 * graft__exec_ws with one worker runs a node, then the successors it made
 * ready (the first inline, the others from its deque, newest first), with
 * a fan-out of single-predecessor successors taken as a range in list
 * order.  That walk is depth first: on a reduction tree it runs each
 * subtree before the next, on a fan-out each branch and the joins it
 * completes.  Renumbering the plan in that order puts every per-node array
 * (views, kernel arguments, tiles, successor lists) in the order the worker
 * reads it, so the hardware prefetcher sees one forward stream instead of
 * one per level of the tree.  This file replays the walk on the plan's
 * successor lists; it must mirror exec_ws.c (ready, complete, take_range,
 * the loop of worker_main) for the renumbered plan to be walked front to
 * back.  Any divergence costs only locality, never correctness: the result
 * is a topological order either way. */
#include "sched/sched.h"

typedef struct item {
  uint32_t a, b;  /* a node (b = UINT32_MAX) or a range [a, b) of arr */
  int src;        /* the range is over the sources, else over p->succ */
} item;

typedef struct walk {
  const graft__plan *p;
  const uint32_t *sources;
  int32_t *pending;
  item *stack;
  int64_t top;
  uint32_t next;
  int have_next;
  item cur;       /* private range */
  uint32_t *seq;
  uint32_t n_seq;
} walk;

static void ready(walk *w, uint32_t s) {
  if (!w->have_next) {
    w->next = s;
    w->have_next = 1;
  } else {
    w->stack[w->top++] = (item){s, UINT32_MAX, 0};
  }
}

static void take_range(walk *w, int src, uint32_t a, uint32_t b) {
  if (w->cur.a < w->cur.b) w->stack[w->top++] = w->cur;
  w->cur = (item){a, b, src};
}

static void complete(walk *w, uint32_t i) {
  const graft__plan *p = w->p;
  uint32_t e0 = p->succ_off[i], e1 = p->succ_multi[i], e2 = p->succ_off[i + 1];
  for (uint32_t e = e1; e < e2; e++)
    if (--w->pending[p->succ[e]] == 0) ready(w, p->succ[e]);
  if (e1 - e0 == 1)
    ready(w, p->succ[e0]);
  else if (e1 > e0)
    take_range(w, 0, e0, e1);
}

graft_status graft__plan_order(const graft__plan *p, uint32_t *seq) {
  uint32_t n = p->n_order;
  walk w = {p, NULL, NULL, NULL, 0, 0, 0, {0, 0, 0}, seq, 0};
  uint32_t *sources = graft__malloc((n ? n : 1) * sizeof *sources);
  w.pending = graft__malloc((n ? n : 1) * sizeof *w.pending);
  /* Every stacked item holds at least one node not yet run. */
  w.stack = graft__malloc((n ? n : 1) * sizeof *w.stack);
  if (!sources || !w.pending || !w.stack) {
    graft__free(sources);
    graft__free(w.pending);
    graft__free(w.stack);
    return GRAFT_ENOMEM;
  }
  uint32_t n_src = 0;
  for (uint32_t i = 0; i < n; i++) {
    w.pending[i] = p->npred[i];
    if (!p->npred[i]) sources[n_src++] = i;
  }
  w.sources = sources;
  take_range(&w, 1, 0, n_src);
  for (;;) {
    if (w.have_next) {
      w.have_next = 0;
      w.seq[w.n_seq++] = w.next;
      complete(&w, w.next);
    } else if (w.cur.a < w.cur.b) {
      ready(&w, (w.cur.src ? w.sources : p->succ)[w.cur.a++]);
    } else if (w.top) {
      item it = w.stack[--w.top];
      if (it.b == UINT32_MAX)
        ready(&w, it.a);
      else
        w.cur = it;
    } else {
      break;
    }
  }
  graft__free(sources);
  graft__free(w.pending);
  graft__free(w.stack);
  /* A DAG's walk reaches every node; anything else is a bug upstream. */
  return w.n_seq == n ? GRAFT_OK : GRAFT_EINTERNAL;
}
