/* Running MPI collectives (graft/mpi.h): each ALLREDUCE node's state in a
 * plan, the kernels of ALLREDUCE and ALLREDUCE_TAKE, the progress polls
 * the executors make, and what a call does after running the plan.
 *
 * ALLREDUCE packs its members into its value and posts one non-blocking
 * sum over the ranks in place (dist.h); the order edges between a graph's
 * ALLREDUCEs (graph/collective.c) make every rank post them in one order.
 * An ALLREDUCE_TAKE waits for its bucket, then writes its member's slice
 * divided by the rank count.  Between tiles every worker polls the posted
 * requests (MPI progresses a non-blocking collective only inside MPI
 * calls), so the exchange runs while the backward pass goes on.
 *
 * After the executor returns, graft__coll_finish settles the call: every
 * posted request is waited for, and after a failure the buckets this rank
 * never posted are posted (their bytes do not matter), so the other ranks'
 * collectives all complete; the call's outcome is then agreed by a vote
 * (function.c), and no rank commits unless every rank succeeded. */
#include <stdatomic.h>
#include <string.h>

#include "dist/dist.h"
#include "sched/sched.h"

/* One ALLREDUCE node of a plan. */
typedef struct graft__coll_state {
  struct graft__coll_plan *cp;
  uint32_t node;               /* its graph id */
  int64_t count;               /* elements */
  graft_dtype dtype;
  int n_members;
  int64_t *off;                /* n_members + 1 element offsets */
  graft__dist_req req;
  double posted_us;
  _Atomic int phase;           /* 0 not posted this call, 1 posted, 2 done */
} graft__coll_state;

struct graft__coll_plan {
  unsigned char comm[GRAFT__COMM_BYTES];
  int size;                    /* ranks */
  int64_t timeout_s;
  int n;                       /* ALLREDUCE nodes, in posting order */
  graft__coll_state *st;
  _Atomic int next;            /* [0, next) posted this call */
  _Atomic int pending;         /* posted, not seen done */
  int64_t *offs;               /* every state's off, one block */
};

void graft__coll_destroy(graft__coll_plan *cp) {
  if (!cp) return;
  graft__free(cp->offs);
  graft__free(cp->st);
  graft__free(cp);
}

graft_status graft__coll_attach(graft__plan *p, char *msg) {
  const graft__graph *g = p->g;
  int n = 0;
  int64_t n_off = 0;
  for (uint32_t id = 0; id < g->n_nodes; id++) {
    const graft__node *nd = graft__graph_node(g, id);
    if (p->live[id] && nd->op == GRAFT__OP_ALLREDUCE) {
      n++;
      n_off += nd->attr.coll.n_members + 1;
    }
  }
  if (!n) return GRAFT_OK;
  graft__coll_plan *cp = graft__calloc(1, sizeof *cp);
  if (cp) {
    p->coll = cp;
    cp->st = graft__calloc((size_t)n, sizeof *cp->st);
    cp->offs = graft__malloc((size_t)n_off * sizeof *cp->offs);
  }
  if (!cp || !cp->st || !cp->offs) {
    graft__msgf(msg, "out of memory compiling trace '%s'", g->name);
    return GRAFT_ENOMEM;
  }
  memcpy(cp->comm, g->comm, GRAFT__COMM_BYTES);
  cp->timeout_s = p->opts.rt ? p->opts.rt->cfg.mpi_timeout : GRAFT__MPI_TIMEOUT;
  char why[GRAFT__MSG_LEN];
  if (!(cp->size = graft__dist_size(cp->comm, why))) {
    graft__msgf(msg, "allreduce_mean: %s (in trace '%s')", why, g->name);
    return GRAFT_EIO;
  }
  int64_t *off = cp->offs;
  for (uint32_t id = 0; id < g->n_nodes; id++) {
    const graft__node *nd = graft__graph_node(g, id);
    if (!p->live[id] || (nd->op != GRAFT__OP_ALLREDUCE && nd->op != GRAFT__OP_ALLREDUCE_TAKE))
      continue;
    graft__node *w = graft__plan_writable(p, id);
    if (!w) {
      graft__msgf(msg, "out of memory compiling trace '%s'", g->name);
      return GRAFT_ENOMEM;
    }
    g = p->g; /* (the plan's copy from the first writable node on) */
    if (nd->op == GRAFT__OP_ALLREDUCE_TAKE) { /* its bucket's, made above */
      w->attr.coll.state = graft__graph_node(g, nd->in[0])->attr.coll.state;
      continue;
    }
    graft__coll_state *s = &cp->st[cp->n++];
    s->cp = cp;
    s->node = id;
    s->n_members = nd->attr.coll.n_members;
    s->dtype = graft__plan_view(p, id)->dtype;
    s->off = off;
    off[0] = 0;
    for (int m = 0; m < s->n_members; m++)
      off[m + 1] = off[m] + graft__plan_view(p, nd->in[m])->numel;
    off += s->n_members + 1;
    s->count = s->off[s->n_members];
    w->attr.coll.state = s;
  }
  return GRAFT_OK;
}

/* Seen done: count it once, whoever saw it. */
static void done(graft__coll_state *s) {
  int posted = 1;
  if (atomic_compare_exchange_strong(&s->phase, &posted, 2)) atomic_fetch_sub(&s->cp->pending, 1);
}

void graft__coll_progress(graft__coll_plan *cp) {
  if (!atomic_load_explicit(&cp->pending, memory_order_relaxed)) return;
  char why[GRAFT__MSG_LEN];
  for (int i = 0; i < cp->n; i++) {
    graft__coll_state *s = &cp->st[i];
    if (atomic_load_explicit(&s->phase, memory_order_acquire) != 1) continue;
    int d = graft__dist_test(&s->req, 1, why); /* errors: the TAKE's wait reports them */
    if (d == 1) done(s);
    else if (d == 0) break; /* not yet (or the lock is busy: another worker polls) */
  }
}

static graft_status post(graft__coll_state *s, void *buf, char *msg) {
  graft_status st = graft__dist_iallreduce(s->cp->comm, buf, s->count, s->dtype, &s->req, msg);
  if (st) return st;
  s->posted_us = graft__now_us();
  atomic_fetch_add(&s->cp->pending, 1);
  atomic_store_explicit(&s->phase, 1, memory_order_release);
  atomic_store(&s->cp->next, (int)(s - s->cp->st) + 1);
  return GRAFT_OK;
}

static graft_status bucket_wait(graft__coll_state *s, char *msg) {
  if (atomic_load_explicit(&s->phase, memory_order_acquire) == 2) return GRAFT_OK;
  graft_status st = graft__dist_wait(&s->req, s->posted_us, s->cp->timeout_s, msg);
  if (!st) done(s);
  return st;
}

graft_status graft__k_ALLREDUCE(const graft__kargs *k, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  graft__coll_state *s = k->node->attr.coll.state;
  const size_t es = graft_dtype_size(s->dtype);
  unsigned char *out = k->out->data;
  for (int m = 0; m < s->n_members; m++) {
    size_t bytes = (size_t)(s->off[m + 1] - s->off[m]) * es;
    if (bytes) memcpy(out + (size_t)s->off[m] * es, k->in[m]->data, bytes);
  }
  return post(s, out, k->msg);
}

graft_status graft__k_ALLREDUCE_TAKE(const graft__kargs *k, int64_t begin, int64_t end) {
  graft__coll_state *s = k->node->attr.coll.state;
  graft_status st = bucket_wait(s, k->msg);
  if (st) return st;
  const int64_t at = s->off[k->node->attr.coll.index];
  if (s->dtype == GRAFT_F64) {
    const double *x = (const double *)k->in[0]->data + at, size = s->cp->size;
    double *y = k->out->data;
    for (int64_t i = begin; i < end; i++) y[i] = x[i] / size;
  } else {
    const float *x = (const float *)k->in[0]->data + at, size = (float)s->cp->size;
    float *y = k->out->data;
    for (int64_t i = begin; i < end; i++) y[i] = x[i] / size;
  }
  return GRAFT_OK;
}

graft_status graft__coll_finish(graft__plan *p, graft_status failed, char *msg) {
  graft__coll_plan *cp = p->coll;
  graft_status st = GRAFT_OK;
  char why[GRAFT__MSG_LEN];
  for (int i = 0; i < cp->n && !st; i++)
    if (atomic_load(&cp->st[i].phase) == 1) st = bucket_wait(&cp->st[i], why);
  /* The buckets a failed call never posted: posted now, one at a time
   * (their buffers may share arena bytes), so the other ranks finish. */
  for (int i = failed ? atomic_load(&cp->next) : cp->n; i < cp->n && !st; i++) {
    graft__coll_state *s = &cp->st[i];
    st = post(s, graft__plan_view(p, s->node)->data, why);
    if (!st) st = bucket_wait(s, why);
  }
  for (int i = 0; i < cp->n; i++) atomic_store(&cp->st[i].phase, 0);
  atomic_store(&cp->next, 0);
  atomic_store(&cp->pending, 0);
  if (st && msg) graft__msgf(msg, "allreduce_mean: %s (in trace '%s')", why, p->g->name);
  return st;
}
