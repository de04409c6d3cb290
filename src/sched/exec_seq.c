/* The sequential reference executor: compute nodes in topological order on
 * the calling thread.  GRAFT_SCHED=seq, and the oracle for the others. */
#include "common/simd_state.h"
#include "sched/chrome.h"
#include "sched/sched.h"

graft_status (*graft__exec_fault_hook)(uint32_t node, int64_t tile);

void graft__exec_fail_msg(const graft__plan *p, uint32_t id, const char *reason, char *msg) {
  const graft__node *n = graft__graph_node(p->g, id);
  graft__msgf(msg, "%s: %s (op #%u in trace '%s')", graft__ops[n->op].name, reason, id,
              p->g->name);
}

static const char *node_name(const void *ctx, uint32_t node) {
  const graft__node *n = graft__graph_node((const graft__graph *)ctx, node);
  return n->fused ? n->fused->name : graft__ops[n->op].name;
}

void graft__exec_trace_write(const graft_runtime *rt, const graft__plan *p, const graft__trace_buf *b) {
  graft__chrome_write(rt->trace, p->g->name, b->ev, b->n, node_name, p->g);
}

static graft_status run_tile(graft__plan *p, uint32_t i, int64_t t, char *reason) {
  graft__kargs k = p->kargs[i];
  k.msg = reason;
  reason[0] = '\0';
  if (p->coll) graft__coll_progress(p->coll); /* MPI moves only inside MPI calls */
  if (graft__exec_fault_hook) {
    graft_status st = graft__exec_fault_hook(p->order[i], t);
    if (st != GRAFT_OK) return st;
  }
  /* One tile over all units: the common case, which reads only kargs. */
  if (k.whole) return k.fn(&k, 0, k.units);
  const graft__tiling *tl = &p->tiling[i];
  if (tl->split_r) {
    int64_t r0 = tl->split_r * t / tl->n, r1 = tl->split_r * (t + 1) / tl->n;
    return graft__kernel_partial(&k, r0, r1, p->scratch + p->scratch_off[i] + 2 * t * k.out->numel);
  }
  int64_t b, e;
  graft__tile_range(tl, t, &b, &e);
  if (p->scratch_per[i]) /* never whole: see graft__plan_tile */
    return graft__kernel_run_scratch(&k, b, e, p->scratch + p->scratch_off[i] + t * p->scratch_per[i]);
  return k.fn(&k, b, e);
}

graft_status graft__exec_tile(graft__plan *p, uint32_t i, int64_t t, char *reason) {
  graft_status st = run_tile(p, i, t, reason);
  graft__simd_clean_upper(); /* see common/simd_state.h */
  return st;
}

graft_status graft__exec_finish(graft__plan *p, uint32_t i, char *reason) {
  const graft__tiling *tl = &p->tiling[i];
  if (!tl->split_r) return GRAFT_OK;
  graft__kargs k = p->kargs[i];
  k.msg = reason;
  reason[0] = '\0';
  return graft__kernel_combine(&k, tl->n, p->scratch + p->scratch_off[i]);
}

/* Tiles run one after another too, so split reductions combine exactly as
 * in the parallel executors. */
graft_status graft__exec_seq(graft__plan *p, char *msg) {
  return graft__exec_seq_rec(p, NULL, 0, 0, msg);
}

static graft_status tile_rec(graft__plan *p, uint32_t i, int64_t t, char *reason,
                             graft__trace_buf *rec, int worker, double t0) {
  if (!rec) return graft__exec_tile(p, i, t, reason);
  double ts = graft__now_us();
  graft_status st = graft__exec_tile(p, i, t, reason);
  graft__trace_add(rec, (graft__trace_event){ts - t0, graft__now_us() - ts, p->order[i], (int32_t)t,
                                             worker, -1});
  return st;
}

graft_status graft__exec_seq_rec(graft__plan *p, graft__trace_buf *rec, int worker, double t0,
                                 char *msg) {
  char reason[GRAFT__MSG_LEN];
  for (uint32_t i = 0; i < p->n_order; i++) {
    graft_status st = tile_rec(p, i, 0, reason, rec, worker, t0);
    if (!p->kargs[i].whole) {
      int32_t n = p->tiling[i].n;
      for (int64_t t = 1; t < n && st == GRAFT_OK; t++) st = tile_rec(p, i, t, reason, rec, worker, t0);
      if (st == GRAFT_OK && p->tiling[i].split_r) st = graft__exec_finish(p, i, reason);
    }
    if (st != GRAFT_OK) {
      graft__exec_fail_msg(p, p->order[i], reason[0] ? reason : graft_status_str(st), msg);
      return st;
    }
  }
  return GRAFT_OK;
}
