/* The work-stealing executor.
 *
 * Workers are the threads of one OpenMP parallel region per call (or of a
 * region held open for a whole call of a plan with control flow, whose body
 * runs are jobs for it: "a held team" below), each with a Chase-Lev deque of
 * items.  An item is a tile (order position << 32 | tile) or a range of
 * ready nodes: a slice of p->sources or of one node's successor list.  A
 * finished tile counts down its node; the node's last tile counts down each
 * successor that has other predecessors, and a successor that becomes ready
 * has its tiles pushed, keeping one to run inline next.  Successors whose
 * only predecessor just finished are ready at once and become the worker's
 * private range, taken one at a time; the worker hands the upper half of it
 * to its deque only while some worker is hungry, and the rest of it before
 * it starts a task of a grain of work or more, so a wide fan-out of small
 * nodes (or a million sources) costs one push per split, not one per node.
 * Idle workers steal, victims of their own domain first, then the others;
 * they spin briefly, then yield, then sleep (20 us at most, on a futex that
 * a push wakes while some sleep, and that every worker leaving the call
 * wakes, so a call's end never waits out a sleep).  Tiles of deferred nodes
 * (big side work off the critical path, tiles.c) wait in a second deque per
 * worker, popped or stolen only when no other work is found.  Nothing on the
 * hot path takes a lock or allocates (deques are sized at first use and grow
 * only if a graph outgrows them).  Sources (nodes with no compute
 * predecessor) start on the workers of their partition part's domain.
 *
 * A runtime of one thread runs the plan's order on the calling thread: the
 * plan is numbered in exactly the order a lone worker takes (order.c), so
 * that is the same walk without its bookkeeping (and function.c does the
 * same, at any thread count, for a plan no second worker could help).  A
 * team that ends up with one thread anyway (or traces) runs the worker loop
 * with no thieves: it pops without the deque's fence and counts down
 * without read-modify-write instructions.  The calling thread resets every
 * deque and counter before the region starts (a held team's job: before it
 * opens), so the team meets only at the region's (the job's) end. */
#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "sched/chrome.h"
#include "sched/deque.h"
#include "sched/sched.h"

typedef struct worker {
  graft__deque dq;
  graft__deque later;          /* tiles of deferred nodes (tiles.c) */
  _Atomic int64_t done;        /* nodes this worker completed, published
                                  by the owner before it looks for work
                                  elsewhere (not per node: idle workers
                                  poll it) */
  int64_t steals;
  graft__trace_buf tr;         /* GRAFT_TRACE only */
  char msg[GRAFT__MSG_LEN];
} __attribute__((aligned(64))) worker;

struct graft__exec_state {
  int n;                       /* workers allocated */
  worker *w;
  /* Per order position: predecessors and tiles still to finish.  The one
   * who brings a counter to zero sets it back to full, so a call that
   * completes leaves every counter ready for the next and nothing is reset
   * per call; only after a failed call (dirty) are they all reset. */
  _Atomic int32_t *pending;
  _Atomic int32_t *tiles_left;
  int dirty;
  _Atomic int cancel;
  _Atomic int status;
  char msg[GRAFT__MSG_LEN];
  /* Workers that found nothing to run or steal: owners of a private range
   * split it while this is non-zero.  Read on every range step, written
   * only when a worker runs dry or finds work again. */
  _Alignas(64) _Atomic int hungry;
  /* Workers asleep in backoff, and the word they sleep on: bumped (and
   * the sleepers woken) when work is pushed while some sleep, and when a
   * worker leaves the call, so the region's end never waits out a sleep. */
  _Alignas(64) _Atomic int sleepers;
  _Atomic int wake;
  char pad[64 - 2 * sizeof(_Atomic int)];
};

/* Range items: bit 63 set, bit 62 = a slice of p->sources (else of p->succ),
 * then the slice's start and end in 31 bits each. */
#define RANGE_BIT (UINT64_C(1) << 63)
#define SRC_BIT (UINT64_C(1) << 62)
#define RANGE_MAX ((UINT32_C(1) << 31) - 1)

static inline uint64_t range_item(int src, uint32_t a, uint32_t b) {
  return RANGE_BIT | (src ? SRC_BIT : 0) | (uint64_t)a << 31 | b;
}

/* Sleep on *w while it holds v, for ns nanoseconds at most.  Without
 * futexes (or where a sandbox refuses the call): a plain sleep, and
 * sleepers see work when it ends. */
static void sleep_on(_Atomic int *w, int v, long ns) {
  struct timespec ts = {0, ns};
#if defined(__linux__)
  if (syscall(SYS_futex, (int *)w, FUTEX_WAIT_PRIVATE, v, &ts, NULL, 0) == 0 || errno == EAGAIN ||
      errno == ETIMEDOUT || errno == EINTR)
    return;
#else
  (void)w, (void)v;
#endif
  nanosleep(&ts, NULL);
}

/* Wake n sleepers of s->wake; callers bump it first, so a worker about to
 * sleep on the old value does not. */
static void wake_sleepers(struct graft__exec_state *s, int n) {
#if defined(__linux__)
  syscall(SYS_futex, (int *)&s->wake, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
#else
  (void)s, (void)n;
#endif
}

/* ---- a held team ---------------------------------------------------------------
 *
 * graft__exec_ws_hold keeps one parallel region open while its calling
 * thread (the driver, worker 0) runs a function; each graft__exec_ws the
 * driver makes meanwhile is a job for the team already there, so a loop of
 * a thousand body runs starts the team once.  Between jobs the other
 * workers park: they spin a little, yield, then sleep on a futex (the
 * bell) that the driver rings when a job opens.  A job is open from its
 * publication until the driver's own worker loop ends; a worker joins it
 * only while it is open, and the driver waits at its end only for the
 * workers inside.  A worker is inside while it may hold a task: one that
 * runs dry steps out (nothing of the job in its hands, its done count
 * published) and back in when work is pushed, so a worker that was slow to
 * wake, or that the OS took off its core while it had nothing to do, costs
 * a job its help, never a wait.  Nothing a job needs may therefore wait on
 * a particular worker: the driver seeds every worker's sources before
 * opening it (onto the others' deques, where the driver and any thief can
 * take them). */

_Atomic int64_t graft__exec_ws_regions;

/* The job word: generation << GEN_SHIFT | OPEN | workers inside. */
#define INSIDE ((UINT64_C(1) << 20) - 1)
#define OPEN (UINT64_C(1) << 20)
#define GEN_SHIFT 21

typedef struct held {
  const graft_runtime *rt;
  int team;                     /* the region's threads */
  int busy;                     /* a job runs (driver only) */
  const struct ctx *job;        /* written before the job opens */
  _Alignas(64) _Atomic uint64_t word;
  _Alignas(64) _Atomic int stop;
  _Atomic int bell;             /* rung (bumped) when a job opens, when work is
                                   pushed while some stepped out, and at the end */
  _Atomic int parked;           /* workers asleep on the bell */
  _Atomic int out;              /* workers stepped out of the open job */
} held;

/* The team the calling thread drives, if any (only its driver sees it). */
static _Thread_local held *driving;

int graft__exec_ws_held(const graft_runtime *rt) {
  return driving && driving->rt == rt && !driving->busy;
}

/* Bump the bell (callers change what waiters check first), and wake those
 * asleep on it. */
static void ring(held *h) {
  atomic_fetch_add(&h->bell, 1);
  if (atomic_load(&h->parked)) {
#if defined(__linux__)
    syscall(SYS_futex, (int *)&h->bell, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#endif
  }
}

/* Waiting for the bell (seen: its value when the waiter last looked): spin
 * for SPIN_US, yield until YIELD_US, then sleep on it.  A scan's body runs
 * follow each other within microseconds, so a worker spinning between them
 * is there for the next; one waiting through a long stretch of the
 * driver's own work (a top-level op, a body on the calling thread) stops
 * taking a core from everybody else. */
#define SPIN_US 50.0
#define YIELD_US 500.0
#define PARK_NS 10000000L

static void idle_wait(held *h, int seen, double *since) {
  double t = graft__now_us();
  if (*since < 0) *since = t;
  if (t - *since < SPIN_US) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else if (t - *since < YIELD_US) {
    sched_yield();
  } else {
    atomic_fetch_add(&h->parked, 1);
    sleep_on(&h->bell, seen, PARK_NS);
    atomic_fetch_sub(&h->parked, 1);
  }
}

/* Count oneself inside the job of generation gen while it is open (w: the
 * word as last read); 0 once it closed or another opened. */
static int join(held *h, uint64_t w, uint64_t gen) {
  while ((w & OPEN) && w >> GEN_SHIFT == gen)
    if (atomic_compare_exchange_weak_explicit(&h->word, &w, w + 1, memory_order_acquire,
                                              memory_order_relaxed))
      return 1;
  return 0;
}

/* What a worker holds privately: the node to run next, and a range. */
typedef struct local {
  uint64_t next;
  int have_next;
  int64_t done;                /* nodes completed (published as worker.done) */
  int src;                     /* the range is a slice of p->sources */
  uint32_t r0, r1;             /* [r0, r1) of the range still to take */
} local;

typedef struct ctx {
  graft__plan *p;
  const graft_runtime *rt;
  struct graft__exec_state *s;
  int team;
  int solo;                    /* team of one: no thieves */
  int tracing;
  double t0;                   /* the trace file's epoch (slice times count from it) */
  struct held *hold;           /* a job of a held team (the caller seeded the
                                  others' sources), or NULL */
  uint64_t gen;                /* that job's generation */
} ctx;

void graft__exec_state_destroy(struct graft__exec_state *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    graft__deque_destroy(&s->w[i].dq);
    graft__deque_destroy(&s->w[i].later);
    graft__free(s->w[i].tr.ev);
  }
  graft__free(s->w);
  graft__free(s->pending);
  graft__free(s->tiles_left);
  graft__free(s);
}

static graft_status state_get(graft__plan *p, int n, struct graft__exec_state **out) {
  if (p->ws && p->ws->n >= n) {
    *out = p->ws;
    return GRAFT_OK;
  }
  graft__exec_state_destroy(p->ws);
  p->ws = NULL;
  struct graft__exec_state *s = graft__aligned_alloc(sizeof *s, 64); /* hungry's line */
  if (!s) return GRAFT_ENOMEM;
  memset(s, 0, sizeof *s);
  size_t m = p->n_order ? p->n_order : 1;
  s->w = graft__aligned_alloc((size_t)n * sizeof *s->w, 64);
  s->pending = graft__malloc(m * sizeof *s->pending);
  s->tiles_left = graft__malloc(m * sizeof *s->tiles_left);
  if (!s->w || !s->pending || !s->tiles_left) {
    graft__free(s->w);
    s->w = NULL;
    graft__exec_state_destroy(s);
    return GRAFT_ENOMEM;
  }
  memset(s->w, 0, (size_t)n * sizeof *s->w);
  s->dirty = 1; /* counters not set yet */
  /* A deque never holds more than every task of the plan, so sizing each
   * for that means execution never allocates: no out-of-memory can strike
   * after kernels started writing the caller's outputs (the later deques:
   * every deferred tile). */
  int64_t cap = GRAFT__MAX(p->n_tasks, 16);
  for (int i = 0; i < n; i++) {
    if (graft__deque_init(&s->w[i].dq, cap) || graft__deque_init(&s->w[i].later, p->n_deferred)) {
      graft__deque_destroy(&s->w[i].dq);
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
  graft__trace_add(&me->tr, (graft__trace_event){ts - c->t0, dur, node, (int32_t)tile, wid, victim});
}

static void fail(ctx *c, uint32_t i, graft_status st, const char *reason) {
  int ok = GRAFT_OK;
  if (atomic_compare_exchange_strong(&c->s->status, &ok, (int)st))
    graft__exec_fail_msg(c->p, c->p->order[i], reason[0] ? reason : graft_status_str(st), c->s->msg);
  atomic_store_explicit(&c->s->cancel, 1, memory_order_release);
}

/* Work was pushed: wake a sleeper, if any (one relaxed load otherwise),
 * and call back a held team's workers that stepped out of the job. */
static inline void nudge(ctx *c) {
  if (atomic_load_explicit(&c->s->sleepers, memory_order_relaxed)) {
    atomic_fetch_add(&c->s->wake, 1);
    wake_sleepers(c->s, 1);
  }
  if (c->hold && atomic_load_explicit(&c->hold->out, memory_order_relaxed)) ring(c->hold);
}

/* Push item (of order position i) onto dq, or cancel the call. */
static inline void push_or_fail(ctx *c, graft__deque *dq, uint32_t i, uint64_t item) {
  if (graft__deque_push(dq, item) != GRAFT_OK) fail(c, i, GRAFT_ENOMEM, "out of memory growing a task deque");
}

/* All tiles of order position i are ready: push them, keeping one inline;
 * a deferred node's tiles all go to the worker's later deque. */
static inline __attribute__((always_inline)) void ready(ctx *c, worker *me, local *l, uint32_t i) {
  if (c->p->kargs[i].defer && !c->solo) {
    for (int32_t t = c->p->tiling[i].n - 1; t >= 0; t--)
      push_or_fail(c, &me->later, i, ((uint64_t)i << 32) | (uint32_t)t);
    nudge(c);
    return;
  }
  int pushed = !c->p->kargs[i].whole;
  if (pushed)
    for (int32_t t = c->p->tiling[i].n - 1; t >= 1; t--)
      push_or_fail(c, &me->dq, i, ((uint64_t)i << 32) | (uint32_t)t);
  if (!l->have_next) {
    l->next = (uint64_t)i << 32;
    l->have_next = 1;
  } else {
    push_or_fail(c, &me->dq, i, (uint64_t)i << 32);
    pushed = 1;
  }
  if (pushed && !c->solo) nudge(c);
}

/* [a, b) of p->sources (src) or p->succ becomes the private range; a range
 * still held is pushed first (it is older, so it stays below). */
static inline void take_range(ctx *c, worker *me, local *l, int src, uint32_t a, uint32_t b) {
  if (l->r0 < l->r1) {
    const uint32_t *arr = l->src ? c->p->sources : c->p->succ;
    push_or_fail(c, &me->dq, arr[l->r0], range_item(l->src, l->r0, l->r1));
    if (!c->solo) nudge(c);
  }
  l->src = src;
  l->r0 = a;
  l->r1 = b;
}

/* Count down a counter whose full value is full; 1 when it reached zero,
 * and then it is full again for the next call (nobody else touches it in
 * this one).  A counter that reads 1 is ours alone: every other arrival has
 * counted down (the acquire load pairs with their release RMWs), so the
 * last one skips the locked instruction. */
static inline int arrive(ctx *c, _Atomic int32_t *cnt, int32_t full) {
  int32_t v = atomic_load_explicit(cnt, c->solo ? memory_order_relaxed : memory_order_acquire);
  if (v != 1) {
    if (c->solo) {
      atomic_store_explicit(cnt, v - 1, memory_order_relaxed);
      return 0;
    }
    if (atomic_fetch_sub_explicit(cnt, 1, memory_order_acq_rel) != 1) return 0;
  }
  atomic_store_explicit(cnt, full, memory_order_relaxed);
  return 1;
}

static inline void complete(ctx *c, worker *me, local *l, uint32_t i) {
  const graft__plan *p = c->p;
  l->done++;
  /* (a chain link, read from the node's kargs: no successor list to walk) */
  if (p->kargs[i].next != UINT32_MAX) {
    ready(c, me, l, p->kargs[i].next);
    return;
  }
  uint32_t e0 = p->succ_off[i], e1 = p->succ_multi[i], e2 = p->succ_off[i + 1];
  for (const uint32_t *e = p->succ + e1, *end = p->succ + e2; e < end; e++)
    if (arrive(c, &c->s->pending[*e], p->npred[*e])) ready(c, me, l, *e);
  if (e1 - e0 == 1)
    ready(c, me, l, p->succ[e0]);
  else if (e1 > e0)
    take_range(c, me, l, 0, e0, e1);
}

static inline void run_task(ctx *c, worker *me, local *l, int wid, uint64_t item) {
  graft__plan *p = c->p;
  uint32_t i = (uint32_t)(item >> 32);
  int64_t t = (int64_t)(item & 0xffffffffu);
  double ts = c->tracing ? now_us() : 0;
  graft_status st = graft__exec_tile(p, i, t, me->msg);
  if (c->tracing) record(c, me, wid, ts, now_us() - ts, p->order[i], t, -1);
  if (st != GRAFT_OK) fail(c, i, st, me->msg);
  if (p->kargs[i].whole || arrive(c, &c->s->tiles_left[i], p->tiling[i].n)) {
    if (!p->kargs[i].whole && p->tiling[i].split_r && st == GRAFT_OK && (st = graft__exec_finish(p, i, me->msg)))
      fail(c, i, st, me->msg);
    complete(c, me, l, i);
  }
}

/* The node an item names first (for traces). */
static uint32_t item_node(const graft__plan *p, uint64_t item) {
  if (!(item & RANGE_BIT)) return p->order[item >> 32];
  uint32_t a = (uint32_t)(item >> 31) & RANGE_MAX;
  return p->order[(item & SRC_BIT) ? p->sources[a] : p->succ[a]];
}

/* Steal from another worker's deque (later: its later deque). */
static int try_steal(ctx *c, int wid, uint64_t *item, int later) {
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
      graft__deque *dq = later ? &c->s->w[v].later : &c->s->w[v].dq;
      while ((r = graft__deque_steal(dq, item)) < 0) {
      }
      if (r == 1) {
        worker *me = &c->s->w[wid];
        me->steals++;
        if (c->tracing)
          record(c, me, wid, now_us(), -1, item_node(c->p, *item),
                 (*item & RANGE_BIT) ? -1 : (int64_t)(*item & 0xffffffffu), v);
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

/* Rounds a worker spins before it yields, or before it steps out of a held
 * team's job (step_out). */
#define STEP_OUT 64

/* Spin, then yield, then sleep on s->wake (seen: its value read before the
 * caller checked for the end, so an end since then cuts the sleep short; a
 * push between the caller's last look for work and that read waits for the
 * sleep's 20 us at most). */
static void backoff(struct graft__exec_state *s, unsigned *idle, int seen) {
  unsigned r = (*idle)++;
  if (r < STEP_OUT) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else if (r < 256) {
    sched_yield();
  } else {
    atomic_fetch_add(&s->sleepers, 1);
    sleep_on(&s->wake, seen, 20000);
    atomic_fetch_sub(&s->sleepers, 1);
  }
}

/* The sources that start on worker wid: each domain's parts' sources, one
 * after another, are cut into contiguous blocks, one per worker of the
 * domain, so neighbouring sources (siblings of one subtree) stay on one
 * worker.  (With fewer workers than parts, parts fold onto domains modulo.)
 * Each block is a range; pieces from several parts are pushed.  Blocks are
 * cut rounding up, so the first workers get the larger ones: the calling
 * thread (worker 0) runs already while the others wake, and a plan with
 * one source starts on it at once.  l NULL: the ranges all go onto wid's
 * deque (a held team's driver seeds the others so, before their job opens:
 * a worker that never joins it leaves its sources there for the thieves). */
static void seed(ctx *c, worker *me, local *l, int wid) {
  const graft__plan *p = c->p;
  int n = c->team, parts = GRAFT__MIN(p->n_parts, n);
  int my = graft__runtime_worker_domain(c->rt, wid, n);
  int lo = -1, cnt = 0;
  for (int w = 0; w < n; w++)
    if (graft__runtime_worker_domain(c->rt, w, n) == my) {
      if (lo < 0) lo = w;
      cnt++;
    }
  int64_t total = 0;
  for (int k = my; k < p->n_parts; k += parts) total += p->src_off[k + 1] - p->src_off[k];
  int64_t r = wid - lo, from = (total * r + cnt - 1) / cnt, to = (total * (r + 1) + cnt - 1) / cnt;
  int64_t j = 0;
  for (int k = my; k < p->n_parts && j < to; k += parts) {
    int64_t len = p->src_off[k + 1] - p->src_off[k];
    int64_t a = GRAFT__MAX(from, j), b = GRAFT__MIN(to, j + len);
    /* a range holds at most RANGE_MAX entries */
    for (int64_t x = a; x < b; x += RANGE_MAX) {
      uint32_t r0 = (uint32_t)(p->src_off[k] + x - j);
      uint32_t r1 = (uint32_t)(p->src_off[k] + GRAFT__MIN(b, x + RANGE_MAX) - j);
      if (l) take_range(c, me, l, 1, r0, r1);
      else push_or_fail(c, &me->dq, p->sources[r0], range_item(1, r0, r1));
    }
    j += len;
  }
}

/* Hand the upper half of the private range to the deque when a worker is
 * hungry and nothing else is there for it to steal. */
static inline void maybe_split(ctx *c, worker *me, local *l) {
  if (l->r1 - l->r0 < 2 || !atomic_load_explicit(&c->s->hungry, memory_order_relaxed) ||
      graft__deque_size_approx(&me->dq))
    return;
  uint32_t mid = l->r0 + (l->r1 - l->r0) / 2;
  const uint32_t *arr = l->src ? c->p->sources : c->p->succ;
  push_or_fail(c, &me->dq, arr[mid], range_item(l->src, mid, l->r1));
  nudge(c);
  l->r1 = mid;
}

/* Before a task of at least a grain of work (order position i), the rest
 * of the private range goes to the deque, where thieves see it: a worker
 * that runs dry while this task runs would otherwise wait for it (a fan-out
 * of three matmuls ran two of them one after the other on one worker, the
 * other worker idle).  Small tasks keep the range private, so a wide
 * fan-out of small nodes still costs one push per split. */
static inline void publish_range(ctx *c, worker *me, local *l, uint32_t i) {
  const graft__plan *p = c->p;
  if (p->work[i] < p->opts.grain * p->tiling[i].n) return;
  const uint32_t *arr = l->src ? p->sources : p->succ;
  push_or_fail(c, &me->dq, arr[l->r0], range_item(l->src, l->r0, l->r1));
  l->r0 = l->r1;
  nudge(c);
}

/* A held team's worker (not the driver) that ran dry steps out of its job
 * (it holds no task, its deques are empty and its done count is
 * published), so the driver never waits for it; it steps back in when the
 * bell rings while the job is still open (work was pushed).  It stays
 * counted hungry, so owners still split their ranges for it (the driver
 * resets the count for the next job).  1: back in; 0: the job closed or
 * another opened, and the worker is out of it. */
static int step_out(ctx *c) {
  held *h = c->hold;
  atomic_fetch_add(&h->out, 1);
  atomic_fetch_sub_explicit(&h->word, 1, memory_order_release);
  int seen = atomic_load(&h->bell), in = 0;
  double since = -1;
  for (;;) {
    idle_wait(h, seen, &since);
    int now = atomic_load(&h->bell);
    if (now == seen) continue;
    seen = now;
    uint64_t w = atomic_load_explicit(&h->word, memory_order_acquire);
    if (!(w & OPEN) || w >> GEN_SHIFT != c->gen || (in = join(h, w, c->gen))) break;
  }
  atomic_fetch_sub(&h->out, 1);
  return in;
}

static void worker_main(ctx *c, int wid) {
  worker *me = &c->s->w[wid];
  const graft__plan *p = c->p;
  local l = {0, 0, 0, 0, 0, 0};
  uint64_t item;
  unsigned idle = 0;
  int is_hungry = 0;
  if (!c->hold || wid == 0) seed(c, me, &l, wid);
  for (;;) {
    if (l.have_next) {
      item = l.next;
      l.have_next = 0;
    } else if (l.r0 < l.r1) {
      if (!c->solo) maybe_split(c, me, &l);
      ready(c, me, &l, (l.src ? p->sources : p->succ)[l.r0++]);
      continue;
    } else if (!(c->solo ? graft__deque_pop_solo(&me->dq, &item)
                         : graft__deque_pop(&me->dq, &item)) &&
               !try_steal(c, wid, &item, 0) && !graft__deque_pop(&me->later, &item) &&
               !try_steal(c, wid, &item, 1)) {
      if (!is_hungry) {
        is_hungry = 1;
        atomic_fetch_add_explicit(&c->s->hungry, 1, memory_order_relaxed);
        atomic_store_explicit(&me->done, l.done, memory_order_release);
      }
      int seen = atomic_load(&c->s->wake);
      if (finished(c)) break;
      if (c->hold && wid && idle >= STEP_OUT) {
        if (!step_out(c)) return; /* (out of the job: touch nothing of it) */
        idle = 0;
        continue;
      }
      backoff(c->s, &idle, seen);
      continue;
    }
    if (is_hungry) {
      is_hungry = 0;
      atomic_fetch_sub_explicit(&c->s->hungry, 1, memory_order_relaxed);
    }
    idle = 0;
    if (atomic_load_explicit(&c->s->cancel, memory_order_relaxed)) break;
    if (item & RANGE_BIT) {
      l.src = (item & SRC_BIT) != 0;
      l.r0 = (uint32_t)(item >> 31) & RANGE_MAX;
      l.r1 = (uint32_t)item & RANGE_MAX;
      continue;
    }
    if (l.r0 < l.r1 && !c->solo) publish_range(c, me, &l, (uint32_t)(item >> 32));
    run_task(c, me, &l, wid, item);
  }
  if (is_hungry) atomic_fetch_sub_explicit(&c->s->hungry, 1, memory_order_relaxed);
  /* The call is over (or cancelled): sleepers need not wait out their
   * sleep to see it.  Bump first: one that counts itself a sleeper after
   * the load below finds the word changed and does not sleep. */
  atomic_fetch_add(&c->s->wake, 1);
  if (atomic_load(&c->s->sleepers)) wake_sleepers(c->s, INT_MAX);
  if (c->hold && wid) atomic_fetch_sub_explicit(&c->hold->word, 1, memory_order_release); /* out */
}

/* ---- the held team's workers and driver ------------------------------------------ */

/* A worker other than the driver: join each job it finds open, once (a
 * second worker_main in one job would publish its done count again from
 * zero), park between them, leave when the driver is done. */
static void park(held *h, int wid) {
  uint64_t last = 0; /* the last job seen (generations start at 1) */
  double since = -1;
  for (;;) {
    int seen = atomic_load(&h->bell);
    if (atomic_load_explicit(&h->stop, memory_order_acquire)) return;
    uint64_t w = atomic_load_explicit(&h->word, memory_order_acquire);
    if ((w & OPEN) && w >> GEN_SHIFT != last) {
      last = w >> GEN_SHIFT;
      if (join(h, w, last)) { /* (worker_main leaves it) */
        ctx mine = *h->job;
        worker_main(&mine, wid);
      }
      since = -1;
      continue;
    }
    idle_wait(h, seen, &since);
  }
}

/* The driver runs job c (its state reset): seed the others, open it, work
 * as worker 0, close it and wait for the workers inside to leave. */
static void run_held(held *h, ctx *c) {
  for (int w = 1; w < c->team; w++) seed(c, &c->s->w[w], NULL, w);
  h->busy = 1;
  h->job = c;
  c->gen = (atomic_load_explicit(&h->word, memory_order_relaxed) >> GEN_SHIFT) + 1;
  atomic_store_explicit(&h->word, c->gen << GEN_SHIFT | OPEN, memory_order_release);
  ring(h);
  worker_main(c, 0);
  atomic_fetch_and_explicit(&h->word, ~OPEN, memory_order_relaxed);
  /* Those inside are leaving already: the job is finished or cancelled,
   * and a worker inside is running (a task, or the few rounds before it
   * would step out). */
  unsigned r = 0;
  while (atomic_load_explicit(&h->word, memory_order_acquire) & INSIDE) {
    if (r++ < 256) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      sched_yield();
    }
  }
  h->busy = 0;
}

graft_status graft__exec_ws_hold(const graft_runtime *rt, graft_status (*fn)(void *arg, char *msg),
                                 void *arg, char *msg) {
  if (driving || rt->num_threads < 2 || omp_in_parallel() || omp_get_level() > 0) return fn(arg, msg);
  held h = {.rt = rt, .team = 1};
  graft_status st = GRAFT_OK;
  const int caller_pu = rt->worker_pu ? graft__runtime_caller_pu() : -1;
  atomic_fetch_add_explicit(&graft__exec_ws_regions, 1, memory_order_relaxed);
#pragma omp parallel num_threads(rt->num_threads)
  {
    int wid = omp_get_thread_num(), n = omp_get_num_threads();
    graft__topology_bind_worker(rt, wid, n, caller_pu);
    if (wid == 0) {
      h.team = n;
      driving = n > 1 ? &h : NULL;
      st = fn(arg, msg);
      driving = NULL;
      atomic_store_explicit(&h.stop, 1, memory_order_release);
      ring(&h);
    } else {
      park(&h, wid);
    }
  }
  return st;
}

graft_status graft__exec_ws(graft__plan *p, const graft_runtime *rt, char *msg) {
  held *h = graft__exec_ws_held(rt) ? driving : NULL;
  if (!h && (omp_in_parallel() || omp_get_level() > 0)) return graft__exec_seq(p, msg);
  /* One worker would walk the plan in its order (order.c renumbered the
   * plan so): run that walk without counters, deque or team.  Traces need
   * the worker loop (it records the slices). */
  if (rt->num_threads == 1 && !rt->trace) {
    p->stats.steals = 0;
    return graft__exec_seq(p, msg);
  }
  if (p->n_order == 0) return GRAFT_OK;
  int nt = h ? h->team : rt->num_threads;
  struct graft__exec_state *s;
  if (state_get(p, nt, &s)) {
    graft__msgf(msg, "out of memory preparing the worker team for trace '%s'", p->g->name);
    return GRAFT_ENOMEM;
  }
  atomic_store(&s->cancel, 0);
  atomic_store(&s->status, GRAFT_OK);
  atomic_store(&s->hungry, 0);
  /* Every deque, done count and counter a worker may touch is reset here,
   * before the team starts (which publishes it to the team), so the team
   * meets only at the region's end: no barrier before the work. */
  for (int i = 0; i < nt; i++) {
    worker *w = &s->w[i];
    graft__deque_reset(&w->dq);
    graft__deque_reset(&w->later);
    atomic_store_explicit(&w->done, 0, memory_order_relaxed);
    w->steals = 0;
    w->tr.n = 0;
  }
  if (s->dirty)
    for (uint32_t i = 0; i < p->n_order; i++) {
      atomic_store_explicit(&s->pending[i], p->npred[i], memory_order_relaxed);
      atomic_store_explicit(&s->tiles_left[i], p->tiling[i].n, memory_order_relaxed);
    }
  ctx c = {p,  rt, s, nt, nt == 1, rt->trace != NULL, rt->trace ? graft__chrome_epoch(rt->trace) : 0,
           h,  0};
  int team = nt; /* the team OpenMP gave (written by worker 0) */
  if (h) {
    run_held(h, &c);
  } else {
    const int caller_pu = rt->worker_pu ? graft__runtime_caller_pu() : -1;
    atomic_fetch_add_explicit(&graft__exec_ws_regions, 1, memory_order_relaxed);
#pragma omp parallel num_threads(nt)
    {
      /* Each worker's own copy, with the team's size (the same in all). */
      ctx mine = c;
      mine.team = omp_get_num_threads();
      mine.solo = mine.team == 1;
      int wid = omp_get_thread_num();
      if (wid == 0) team = mine.team;
      graft__topology_bind_worker(rt, wid, mine.team, caller_pu);
      worker_main(&mine, wid);
    }
  }

  for (int i = 0; i < team; i++) {
    graft__deque_reclaim(&s->w[i].dq);
    graft__deque_reclaim(&s->w[i].later);
  }
  if (c.tracing)
    for (int i = 0; i < team; i++)
      graft__exec_trace_write(rt, p, &s->w[i].tr);
  int64_t steals = 0;
  for (int i = 0; i < team; i++) steals += s->w[i].steals;
  p->stats.steals = steals;
  graft_status st = (graft_status)atomic_load(&s->status);
  /* A failed call stops with counters part way down. */
  s->dirty = st != GRAFT_OK;
  if (st != GRAFT_OK) graft__msgf(msg, "%s", s->msg);
  return st;
}
