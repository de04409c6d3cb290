/* The work-stealing executor.
 *
 * Workers are the threads of one OpenMP parallel region per call, each with
 * a Chase-Lev deque of tasks (order position << 32 | tile).  A finished tile
 * counts down its node; the node's last tile counts down each successor, and
 * a successor that becomes ready has its tiles pushed, keeping one to run
 * inline next.  Idle workers steal, victims of their own domain first, then
 * the others; they spin briefly, then yield, then sleep.  Nothing on the hot
 * path takes a lock or allocates (deques are sized at first use and grow
 * only if a graph outgrows them).  Sources (nodes with no compute
 * predecessor) start on a worker of their partition part's domain. */
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "sched/chrome.h"
#include "sched/deque.h"
#include "sched/sched.h"

typedef struct worker {
  graft__deque dq;
  _Atomic int64_t done;        /* nodes this worker completed (owner writes) */
  int64_t steals;
  graft__trace_event *ev;      /* GRAFT_TRACE only */
  int64_t n_ev, cap_ev;
  char msg[GRAFT__MSG_LEN];
} __attribute__((aligned(64))) worker;

struct graft__exec_state {
  int n;                       /* workers allocated */
  worker *w;
  _Atomic int32_t *pending;    /* per order position */
  _Atomic int32_t *tiles_left;
  /* Only counters that are ever decremented need a reset per call: pending
   * of nodes with several predecessors, tiles_left of nodes with several
   * tiles (a chain of single-tile nodes resets nothing). */
  uint32_t *reset_pending, *reset_tiles;
  int64_t n_reset_pending, n_reset_tiles;
  _Atomic int cancel;
  _Atomic int status;
  char msg[GRAFT__MSG_LEN];
};

typedef struct ctx {
  graft__plan *p;
  const graft_runtime *rt;
  struct graft__exec_state *s;
  int team;
  int tracing;
  double t0;
} ctx;

void graft__exec_state_destroy(struct graft__exec_state *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    graft__deque_destroy(&s->w[i].dq);
    graft__free(s->w[i].ev);
  }
  graft__free(s->w);
  graft__free(s->pending);
  graft__free(s->tiles_left);
  graft__free(s->reset_pending);
  graft__free(s->reset_tiles);
  graft__free(s);
}

static graft_status state_get(graft__plan *p, int n, struct graft__exec_state **out) {
  if (p->ws && p->ws->n >= n) {
    *out = p->ws;
    return GRAFT_OK;
  }
  graft__exec_state_destroy(p->ws);
  p->ws = NULL;
  struct graft__exec_state *s = graft__calloc(1, sizeof *s);
  if (!s) return GRAFT_ENOMEM;
  size_t m = p->n_order ? p->n_order : 1;
  s->w = graft__aligned_alloc((size_t)n * sizeof *s->w, 64);
  s->pending = graft__malloc(m * sizeof *s->pending);
  s->tiles_left = graft__malloc(m * sizeof *s->tiles_left);
  s->reset_pending = graft__malloc(m * sizeof *s->reset_pending);
  s->reset_tiles = graft__malloc(m * sizeof *s->reset_tiles);
  if (!s->w || !s->pending || !s->tiles_left || !s->reset_pending || !s->reset_tiles) {
    graft__free(s->w);
    s->w = NULL;
    graft__exec_state_destroy(s);
    return GRAFT_ENOMEM;
  }
  memset(s->w, 0, (size_t)n * sizeof *s->w);
  for (uint32_t i = 0; i < p->n_order; i++) {
    if (p->npred[i] >= 2) s->reset_pending[s->n_reset_pending++] = i;
    if (p->tiling[i].n >= 2) s->reset_tiles[s->n_reset_tiles++] = i;
  }
  /* A deque never holds more than every task of the plan, so sizing each
   * for that means execution never allocates: no out-of-memory can strike
   * after kernels started writing the caller's outputs. */
  int64_t cap = GRAFT__MAX(p->n_tasks, 16);
  for (int i = 0; i < n; i++) {
    if (graft__deque_init(&s->w[i].dq, cap)) {
      s->n = i;
      graft__exec_state_destroy(s);
      return GRAFT_ENOMEM;
    }
    s->n = i + 1;
  }
  p->ws = *out = s;
  return GRAFT_OK;
}

static double now_us(void) { return graft__now_us(); }

static void record(ctx *c, worker *me, int wid, double ts, double dur, uint32_t node, int64_t tile,
                   int victim) {
  if (me->n_ev == me->cap_ev &&
      graft__grow((void **)&me->ev, &me->cap_ev, me->n_ev + 1, sizeof *me->ev))
    return; /* a trace with holes beats failing the call */
  me->ev[me->n_ev++] = (graft__trace_event){ts - c->t0, dur, node, (int32_t)tile, wid, victim};
}

static void fail(ctx *c, uint32_t i, graft_status st, const char *reason) {
  int ok = GRAFT_OK;
  if (atomic_compare_exchange_strong(&c->s->status, &ok, (int)st))
    graft__exec_fail_msg(c->p, c->p->order[i], reason[0] ? reason : graft_status_str(st), c->s->msg);
  atomic_store_explicit(&c->s->cancel, 1, memory_order_release);
}

static inline void push_or_fail(ctx *c, worker *me, uint32_t i, uint64_t item) {
  if (graft__deque_push(&me->dq, item) != GRAFT_OK) fail(c, i, GRAFT_ENOMEM, "out of memory growing a task deque");
}

/* All tiles of order position i are ready: push them, keeping one inline. */
static inline void ready(ctx *c, worker *me, uint32_t i, uint64_t *next, int *have_next) {
  int32_t n = c->p->tiling[i].n;
  for (int32_t t = n - 1; t >= 1; t--) push_or_fail(c, me, i, ((uint64_t)i << 32) | (uint32_t)t);
  if (!*have_next) {
    *next = (uint64_t)i << 32;
    *have_next = 1;
  } else {
    push_or_fail(c, me, i, (uint64_t)i << 32);
  }
}

static inline void complete(ctx *c, worker *me, uint32_t i, uint64_t *next, int *have_next) {
  const graft__plan *p = c->p;
  atomic_store_explicit(&me->done, atomic_load_explicit(&me->done, memory_order_relaxed) + 1,
                        memory_order_release);
  for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++) {
    uint32_t s = p->succ[e];
    if (p->npred[s] == 1 ||
        atomic_fetch_sub_explicit(&c->s->pending[s], 1, memory_order_acq_rel) == 1)
      ready(c, me, s, next, have_next);
  }
}

static inline void run_task(ctx *c, worker *me, int wid, uint64_t item, uint64_t *next,
                            int *have_next) {
  graft__plan *p = c->p;
  uint32_t i = (uint32_t)(item >> 32);
  int64_t t = (int64_t)(item & 0xffffffffu);
  double ts = c->tracing ? now_us() : 0;
  graft_status st = graft__exec_tile(p, i, t, me->msg);
  if (c->tracing) record(c, me, wid, ts, now_us() - ts, p->order[i], t, -1);
  if (st != GRAFT_OK) fail(c, i, st, me->msg);
  if (p->tiling[i].n == 1 ||
      atomic_fetch_sub_explicit(&c->s->tiles_left[i], 1, memory_order_acq_rel) == 1) {
    if (p->tiling[i].split_r && st == GRAFT_OK && (st = graft__exec_finish(p, i, me->msg)))
      fail(c, i, st, me->msg);
    complete(c, me, i, next, have_next);
  }
}

static int try_steal(ctx *c, int wid, uint64_t *item) {
  int n = c->team;
  if (n == 1) return 0;
  int my = graft__runtime_worker_domain(c->rt, wid, n);
  /* Two passes: own domain, then everybody else. */
  for (int pass = 0; pass < 2; pass++) {
    for (int k = 1; k < n; k++) {
      int v = (wid + k) % n;
      int same = graft__runtime_worker_domain(c->rt, v, n) == my;
      if (same != (pass == 0)) continue;
      int r;
      while ((r = graft__deque_steal(&c->s->w[v].dq, item)) < 0) {
      }
      if (r == 1) {
        worker *me = &c->s->w[wid];
        me->steals++;
        if (c->tracing) record(c, me, wid, now_us(), -1, c->p->order[*item >> 32],
                               (int64_t)(*item & 0xffffffffu), v);
        return 1;
      }
    }
  }
  return 0;
}

static int finished(ctx *c) {
  if (atomic_load_explicit(&c->s->cancel, memory_order_acquire)) return 1;
  int64_t done = 0;
  for (int i = 0; i < c->team; i++)
    done += atomic_load_explicit(&c->s->w[i].done, memory_order_acquire);
  return done == (int64_t)c->p->n_order;
}

static void backoff(unsigned *idle) {
  unsigned r = (*idle)++;
  if (r < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else if (r < 256) {
    sched_yield();
  } else {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

/* Push the tiles of the sources that start on worker wid: each part's
 * sources are dealt to the workers of its domain in contiguous blocks, so
 * neighbouring sources (siblings of one subtree) stay on one worker. */
static void seed(ctx *c, worker *me, int wid, uint64_t *next, int *have_next) {
  const graft__plan *p = c->p;
  int n = c->team, parts = GRAFT__MIN(p->n_parts, n);
  int my = graft__runtime_worker_domain(c->rt, wid, n);
  int lo = -1, cnt = 0;
  for (int w = 0; w < n; w++)
    if (graft__runtime_worker_domain(c->rt, w, n) == my) {
      if (lo < 0) lo = w;
      cnt++;
    }
  /* (With fewer workers than parts, parts fold onto domains modulo.) */
  int64_t total = 0, j = 0;
  for (uint32_t k = 0; k < p->n_sources; k++) total += p->part[p->sources[k]] % parts == my;
  int64_t r = wid - lo, from = total * r / cnt, to = total * (r + 1) / cnt;
  for (uint32_t k = 0; k < p->n_sources && j < to; k++) {
    if (p->part[p->sources[k]] % parts != my) continue;
    if (j++ >= from) ready(c, me, p->sources[k], next, have_next);
  }
}

static void worker_main(ctx *c, int wid) {
  worker *me = &c->s->w[wid];
  uint64_t next = 0, item;
  int have_next = 0;
  unsigned idle = 0;
  seed(c, me, wid, &next, &have_next);
  for (;;) {
    if (have_next) {
      item = next;
      have_next = 0;
    } else if (!graft__deque_pop(&me->dq, &item) && !try_steal(c, wid, &item)) {
      if (finished(c)) break;
      backoff(&idle);
      continue;
    }
    idle = 0;
    if (atomic_load_explicit(&c->s->cancel, memory_order_relaxed)) break;
    run_task(c, me, wid, item, &next, &have_next);
  }
}

static const char *node_name(const void *ctx, uint32_t node) {
  const graft__graph *g = ctx;
  return graft__ops[graft__graph_node(g, node)->op].name;
}

graft_status graft__exec_ws(graft__plan *p, const graft_runtime *rt, char *msg) {
  if (omp_in_parallel() || omp_get_level() > 0) return graft__exec_seq(p, msg);
  if (p->n_order == 0) return GRAFT_OK;
  int nt = rt->num_threads;
  struct graft__exec_state *s;
  if (state_get(p, nt, &s)) {
    graft__msgf(msg, "out of memory preparing the worker team for trace '%s'", p->g->name);
    return GRAFT_ENOMEM;
  }
  atomic_store(&s->cancel, 0);
  atomic_store(&s->status, GRAFT_OK);
  ctx c = {p, rt, s, nt, rt->trace != NULL, now_us()};

#pragma omp parallel num_threads(nt)
  {
    int wid = omp_get_thread_num();
#pragma omp single
    c.team = omp_get_num_threads();
    graft__topology_bind_worker(rt, wid, c.team);
    worker *me = &s->w[wid];
    graft__deque_reset(&me->dq);
    atomic_store_explicit(&me->done, 0, memory_order_relaxed);
    me->steals = 0;
    me->n_ev = 0;
#pragma omp for schedule(static) nowait
    for (int64_t k = 0; k < s->n_reset_pending; k++) {
      uint32_t i = s->reset_pending[k];
      atomic_store_explicit(&s->pending[i], p->npred[i], memory_order_relaxed);
    }
#pragma omp for schedule(static)
    for (int64_t k = 0; k < s->n_reset_tiles; k++) {
      uint32_t i = s->reset_tiles[k];
      atomic_store_explicit(&s->tiles_left[i], p->tiling[i].n, memory_order_relaxed);
    }
    /* the implicit barrier of the second for publishes the counters */
    worker_main(&c, wid);
  }

  for (int i = 0; i < c.team; i++) graft__deque_reclaim(&s->w[i].dq);
  if (c.tracing)
    for (int i = 0; i < c.team; i++)
      graft__chrome_write(rt->trace, p->g->name, s->w[i].ev, s->w[i].n_ev, node_name, p->g);
  int64_t steals = 0;
  for (int i = 0; i < c.team; i++) steals += s->w[i].steals;
  p->stats.steals = steals;
  graft_status st = (graft_status)atomic_load(&s->status);
  if (st != GRAFT_OK) graft__msgf(msg, "%s", s->msg);
  return st;
}
