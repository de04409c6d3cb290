/* The sequential reference executor: compute nodes in topological order on
 * the calling thread.  GRAFT_SCHED=seq, and the oracle for the others. */
#include "sched/sched.h"

void graft__exec_fail_msg(const graft__plan *p, uint32_t id, const char *reason, char *msg) {
  const graft__node *n = graft__graph_node(p->g, id);
  graft__msgf(msg, "%s: %s (op #%u in trace '%s')", graft__ops[n->op].name, reason, id,
              p->g->name);
}

graft_status graft__exec_seq(graft__plan *p, char *msg) {
  char reason[GRAFT__MSG_LEN];
  for (uint32_t i = 0; i < p->n_order; i++) {
    uint32_t id = p->order[i];
    graft__kargs *k = &p->kargs[id];
    k->msg = reason;
    reason[0] = '\0';
    graft_status st = graft__kernels[k->node->op].run(k, 0, graft__kernel_units(k));
    if (st != GRAFT_OK) {
      graft__exec_fail_msg(p, id, reason[0] ? reason : graft_status_str(st), msg);
      return st;
    }
  }
  return GRAFT_OK;
}
