/* graft internal: plans and executors (src/sched -> src/graph, src/kernels).
 *
 * A plan is a graph compiled for one concrete input signature: the live
 * nodes in topological order, a concrete view per node, prepared kernel
 * arguments, and the arena holding every intermediate value.  It is built
 * once and reused by every call with that signature. */
#ifndef GRAFT_SCHED_H
#define GRAFT_SCHED_H

#include "common/common.h"
#include "common/config.h"
#include "graft/function.h"
#include "graph/graph.h"
#include "kernels/kernels.h"

typedef struct graft__plan {
  const graft__graph *g;
  uint8_t *live;            /* per graph node */
  uint32_t *order;          /* live compute nodes (not EXTERNAL), topological */
  uint32_t n_order;
  graft__tview *views;      /* per graph node, concrete */
  const graft__tview **in_ptrs; /* kargs input lists, flattened */
  graft__kargs *kargs;      /* per graph node (valid for compute nodes) */
  int64_t *binding;         /* per symbol */
  size_t *offset;           /* per graph node: arena offset, SIZE_MAX if none */
  unsigned char *arena;
  size_t arena_bytes;
  int fallible;             /* holds a node that may fail on data */
  graft_plan_stats stats;
} graft__plan;

/* Compile g for the concrete inputs in[] (already checked against g's input
 * count, dtypes and ranks).  On failure *out is NULL and msg tells why. */
graft_status graft__plan_compile(const graft__graph *g, graft_tensor *const *in,
                                 graft__plan **out, char *msg);
void graft__plan_destroy(graft__plan *p);

/* Run the plan's compute nodes one after another on the calling thread.
 * The caller has bound the data pointers of external views. */
graft_status graft__exec_seq(graft__plan *p, char *msg);

/* Format a kernel failure "<op>: <reason> (op #<id> in trace '<name>')". */
void graft__exec_fail_msg(const graft__plan *p, uint32_t id, const char *reason, char *msg);

/* The runtime's view used by functions. */
typedef struct graft__topology graft__topology;
struct graft_runtime {
  graft__config cfg;
  int num_threads;
  graft__topology *topo;
};

/* ---- topology (hwloc) ----------------------------------------------------- */
/* Load the topology cfg names (or this machine).  msg on failure. */
graft_status graft__topology_load(const graft__config *cfg, graft__topology **out, char *msg);
void graft__topology_destroy(graft__topology *t);
int graft__topology_pus(const graft__topology *t);       /* usable PUs */
int graft__topology_domains(const graft__topology *t, graft__level level);
int graft__topology_is_this_system(const graft__topology *t);
/* The level "auto" resolves to: NUMA if several, else L3 if several, else none. */
graft__level graft__topology_auto_level(const graft__topology *t);
/* A short description "synthetic:pack:2 ..." or "this machine". */
const char *graft__topology_source(const graft__topology *t);

#endif /* GRAFT_SCHED_H */
