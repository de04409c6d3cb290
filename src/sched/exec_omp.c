/* Baseline executor: OpenMP tasks with depend clauses over the same plan
 * and tiles (GRAFT_SCHED=omp).  Each tile is a task that depends on its
 * node's predecessors; a node with several tiles gets a join task that the
 * successors depend on (GCC 12 has no depend(inoutset)).  Under GRAFT_TRACE
 * each thread records its tiles, as the work-stealing workers do. */
#include <omp.h>
#include <stdatomic.h>

#include "sched/chrome.h"
#include "sched/sched.h"

/* GCC warns that the iterator arrays of depend clauses are unused. */
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"

/* ThreadSanitizer builds.  libomp keeps a finished task's block (the
 * firstprivate copies of i and t, the shared pointer to the context) on its
 * own free lists and hands it to a task created later, by another thread
 * maybe; those lists are not instrumented, and Archer orders tasks, not
 * this memory, so TSan takes every reuse for a race between the old task's
 * read of i and the creating thread's write of the new one.  So the
 * creating thread's accesses are not tracked while it fills in a task (the
 * task construct only: no plan, arena or caller data is written there), and
 * a task that libomp runs at once inside the construct (task throttling)
 * is tracked again for its body. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN_BUILD 1
#endif
#endif
#if !defined(TSAN_BUILD) && defined(__SANITIZE_THREAD__)
#define TSAN_BUILD 1
#endif

#ifdef TSAN_BUILD
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
static _Thread_local int creating; /* this thread is inside a task construct */
static void create_begin(void) {
  creating = 1;
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
}
static void create_end(void) {
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  creating = 0;
}
/* Returns whether the body runs inside a construct (tracked again until
 * body_end). */
static int body_begin(void) {
  if (creating) AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  return creating;
}
static void body_end(int inside) {
  if (inside) AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
}
#else
static inline void create_begin(void) {}
static inline void create_end(void) {}
static inline int body_begin(void) { return 0; }
static inline void body_end(int inside) { (void)inside; }
#endif

typedef struct omp_ctx {
  graft__plan *p;
  _Atomic int status;
  _Atomic int cancel;
  char *msg;
  graft__trace_buf *tr;        /* per thread, GRAFT_TRACE only */
  double t0;                   /* the trace file's epoch */
} omp_ctx;

static void fail(omp_ctx *c, uint32_t i, graft_status st, const char *reason) {
  int ok = GRAFT_OK;
  if (atomic_compare_exchange_strong(&c->status, &ok, (int)st))
    graft__exec_fail_msg(c->p, c->p->order[i], reason[0] ? reason : graft_status_str(st), c->msg);
  atomic_store(&c->cancel, 1);
}

static void run_tile(omp_ctx *c, uint32_t i, int64_t t) {
  if (atomic_load_explicit(&c->cancel, memory_order_relaxed)) return;
  int inside = body_begin();
  char reason[GRAFT__MSG_LEN];
  double ts = c->tr ? graft__now_us() : 0;
  graft_status st = graft__exec_tile(c->p, i, t, reason);
  if (c->tr) {
    int w = omp_get_thread_num();
    graft__trace_add(&c->tr[w], (graft__trace_event){ts - c->t0, graft__now_us() - ts, c->p->order[i],
                                                     (int32_t)t, w, -1});
  }
  if (st != GRAFT_OK) fail(c, i, st, reason);
  body_end(inside);
}

static void finish(omp_ctx *c, uint32_t i) {
  if (atomic_load_explicit(&c->cancel, memory_order_relaxed)) return;
  int inside = body_begin();
  char reason[GRAFT__MSG_LEN];
  graft_status st = graft__exec_finish(c->p, i, reason);
  if (st != GRAFT_OK) fail(c, i, st, reason);
  body_end(inside);
}

graft_status graft__exec_omp(graft__plan *p, const graft_runtime *rt, char *msg) {
  if (omp_in_parallel() || omp_get_level() > 0) return graft__exec_seq(p, msg);
  uint32_t n = p->n_order;
  if (n == 0) return GRAFT_OK;
  char *tok = graft__malloc((size_t)n);            /* node done */
  char *ttok = graft__malloc((size_t)p->n_tasks);  /* tile done */
  int nt_team = rt->num_threads;
  graft__trace_buf *tr = rt->trace ? graft__calloc((size_t)nt_team, sizeof *tr) : NULL;
  if (!tok || !ttok || (rt->trace && !tr)) {
    graft__free(tok);
    graft__free(ttok);
    graft__free(tr);
    graft__msgf(msg, "out of memory preparing OpenMP tasks for trace '%s'", p->g->name);
    return GRAFT_ENOMEM;
  }
  omp_ctx c = {p, GRAFT_OK, 0, msg, tr, rt->trace ? graft__chrome_epoch(rt->trace) : 0};
  const uint32_t *pred = p->pred, *off = p->pred_off;

#pragma omp parallel num_threads(nt_team)
#pragma omp single
  {
    int64_t base = 0;
    for (uint32_t i = 0; i < n; i++) {
      int np = (int)(off[i + 1] - off[i]);
      const uint32_t *pi = pred + off[i];
      int nt = p->tiling[i].n;
      if (nt == 1) {
        create_begin();
#pragma omp task depend(iterator(j = 0 : np), in : tok[pi[j]]) depend(out : tok[i]) firstprivate(i) shared(c)
        run_tile(&c, i, 0);
        create_end();
      } else {
        for (int t = 0; t < nt; t++) {
          create_begin();
#pragma omp task depend(iterator(j = 0 : np), in : tok[pi[j]]) depend(out : ttok[base + t]) firstprivate(i, t) shared(c)
          run_tile(&c, i, t);
          create_end();
        }
        create_begin();
#pragma omp task depend(iterator(t = 0 : nt), in : ttok[base + t]) depend(out : tok[i]) firstprivate(i) shared(c)
        finish(&c, i);
        create_end();
      }
      base += nt;
    }
  }
  graft__free(tok);
  graft__free(ttok);
  for (int w = 0; tr && w < nt_team; w++) {
    graft__exec_trace_write(rt, p, &tr[w]);
    graft__free(tr[w].ev);
  }
  graft__free(tr);
  return (graft_status)atomic_load(&c.status);
}
