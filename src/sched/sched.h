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

/* How a node's units split into tiles: segments of seg units (matmul: the
 * columns of one row block of one batch, kernels_int.h) cut every len units
 * (per_seg > 0), or runs of len units (per_seg 0; for a matmul, whole
 * segments).  Depends only on shapes and the grain. */
typedef struct graft__tiling {
  int64_t units, seg, len;
  int32_t per_seg;          /* tiles per segment when segments are cut, else 0 */
  int32_t n;                /* tiles */
  int64_t split_r;          /* split reduction: reduced extent cut into n blocks; 0 = none */
} graft__tiling;

struct graft__exec_state;
typedef struct graft__ctl_exec graft__ctl_exec;

/* Compile-time inputs from the runtime. */
typedef struct graft__plan_opts {
  int64_t grain;            /* elements per tile */
  int n_parts;              /* partition parts (domains with workers) */
  int lanes;                /* > 0: node i also waits for node i - lanes */
  int pack_small;           /* one thread runs the plan (graft__slot_align) */
  int fusion;               /* GRAFT__FUSION_*: fuse elementwise groups (fuse.c) */
  /* Where control-flow bodies run (control.c): the runtime and its
   * executor (enum graft__sched); rt NULL: on the calling thread. */
  const struct graft_runtime *rt;
  int sched;
  int is_body;              /* compiling a control node's body */
} graft__plan_opts;

typedef struct graft__plan {
  const graft__graph *g;
  uint8_t *live;            /* per graph node */
  uint32_t *order;          /* live compute nodes (not EXTERNAL), topological */
  uint32_t n_order;
  graft__tview *views;      /* concrete views, compute nodes first in order
                               (so executors read them front to back); use
                               graft__plan_view */
  int64_t *shapes;          /* per graph node id: GRAFT_MAX_RANK dims, where
                               its view's shape points */
  uint32_t *vslot;          /* per graph node: its index in views */
  const graft__tview **in_ptrs; /* kargs input lists, flattened */
  graft__kargs *kargs;      /* per order position (with the node's kernel,
                               so the hot path never touches the graph node) */
  int64_t *binding;         /* per symbol */
  size_t *offset;           /* per graph node: arena offset, SIZE_MAX if none */
  unsigned char *arena;
  size_t arena_bytes;
  int fallible;             /* holds a node that may fail on data */
  int pack_small;           /* small values share lines (graft__slot_align) */
  int lanes;                /* GRAFT_MEMORY=lanes:N (0 = none): link adds
                               the ordering edges order[i - N] -> order[i] */
  uint32_t *var_reads;      /* live VAR_READ node ids: bound each call */
  uint32_t n_var_reads;
  uint32_t *assigns;        /* ASSIGN node ids in compile order: committed */
  uint32_t n_assigns;
  /* Per assign: 1 when it may write straight into its variable (else it
   * is staged in the arena and copied at commit).  Such an assign is its
   * variable's only one, no output is a read of the variable, and every
   * node that reads the variable's old value, and every node that may fail
   * on data, precedes it: link adds those ordering edges (war, pairs
   * reader or fallible node id, assign id, sorted by assign id), so once it
   * runs nothing can fail the call.  Calls with an injected fault stage
   * every assign. */
  uint8_t *assign_direct;
  graft__tview *upd_dst;    /* the destination views of the UPDATE nodes
                               (kargs.in past n_in): data set every call */
  /* Per graph node: 1 for an optimizer step the plan writes in place
   * (direct): its packed value gets no
   * arena bytes.  A call that must stage it anyway (a variable shared with
   * a call tensor, an injected fault) uses the fallback block instead. */
  uint8_t *unstaged;
  void *fallback;           /* allocated by the first such call, then kept */
  size_t fallback_bytes;
  uint32_t *war;
  uint32_t n_war;
  int extra_edges;          /* link added edges that carry no value (lanes, war) */
  graft_plan_stats stats;

  /* Scheduling view, indexed by position i in order[] (compute nodes):
   * successors as CSR over order positions, distinct compute predecessors,
   * work, tiles, and the partition part. */
  uint32_t *succ_off;       /* n_order + 1 */
  uint32_t *succ;           /* per node: single-predecessor successors first */
  uint32_t *succ_multi;     /* n_order: where i's successors with npred >= 2 start */
  int32_t *npred;
  uint32_t *pred_off;       /* n_order + 1: the transpose of succ */
  uint32_t *pred;
  int64_t *work;
  graft__tiling *tiling;
  uint16_t *part;
  int n_parts;
  uint32_t *sources;        /* order positions with npred 0, grouped by part */
  uint32_t n_sources;
  uint32_t *src_off;        /* n_parts + 1: part k's sources start at src_off[k] */
  int64_t n_tasks;          /* sum of tiles */
  int64_t n_deferred;       /* tiles of deferred nodes (kargs.defer) */
  double *scratch;          /* partials of split reductions; per-tile scratch */
  int64_t *scratch_off;     /* per order position, in doubles */
  int64_t *scratch_per;     /* per order position: the doubles of scratch each
                               tile gets (graft__kernel_scratch: conv2d's
                               kernels), 0 for none; tile t's starts at
                               scratch_off + t * scratch_per */
  struct graft__exec_state *ws; /* lazily built work-stealing state */
  /* Fusion (fuse.c): g is then the plan's copy of the traced graph, whose
   * chunks holding a group's root are copies too (the others shared). */
  graft__graph *fg;         /* the copy, or NULL when nothing fused */
  uint8_t *fg_own;          /* per chunk: 1 when the copy owns it */
  graft__fused *fused;      /* the groups */
  uint32_t *fused_in;       /* their roots' input lists, flattened */
  void *fused_code;         /* the compiled groups' pages (fused_jit.c) */
  size_t fused_code_len;
  /* Control flow (control.c): per graph node, a control node's compiled
   * bodies (NULL for other nodes; the array NULL without control flow). */
  graft__ctl_exec **ctl;
  int has_ctl;
  int arena_borrowed;       /* a body's arena lies in its top-level plan's
                               ctl_arena (control.c) */
  unsigned char *ctl_arena; /* the bodies' shared block (top level) */
  uint32_t *alias;          /* per order position: a GET reading its control
                               node's bytes in place, that node's position
                               (UINT32_MAX for every other node; the array
                               NULL without control flow): plan.c */
  graft__plan_opts opts;    /* as compiled (bodies compile with them) */
  /* MPI collectives (collective.c): the ALLREDUCE nodes' states, or NULL. */
  struct graft__coll_plan *coll;
} graft__plan;

/* The concrete view of graph node id. */
static inline graft__tview *graft__plan_view(const graft__plan *p, uint32_t id) {
  return &p->views[p->vslot[id]];
}

/* Arena bytes order position i's value takes (0 for an unstaged step). */
static inline int64_t graft__plan_value_bytes(const graft__plan *p, uint32_t i) {
  uint32_t id = p->order[i];
  if (p->unstaged && p->unstaged[id]) return 0;
  const graft__tview *v = graft__plan_view(p, id);
  return v->numel * (int64_t)graft_dtype_size(v->dtype);
}

/* Does order position s read the value of u (s a successor of u)?  Every
 * successor does, except one joined only by an ordering edge (lanes, or a
 * reader of a variable before its direct assign). */
static inline int graft__plan_reads(const graft__plan *p, uint32_t u, uint32_t s) {
  if (!p->extra_edges) return 1;
  const graft__kargs *k = &p->kargs[s];
  const graft__tview *v = graft__plan_view(p, p->order[u]);
  for (int j = 0; j < k->n_in; j++)
    if (k->in[j] == v) return 1;
  return 0;
}


/* ---- fusion (fuse.c) ------------------------------------------------------ */
/* Group the live elementwise ops of a plan whose shapes are inferred into
 * fused nodes (kernels.h): each group's root gets the group's inputs and
 * its program in p's copy of the graph, and members no node outside a
 * group reads leave the live set.  Runs before layout. */
graft_status graft__plan_fuse(graft__plan *p);

/* A node's cost per element (the cost column; a fused group's summed). */
static inline int graft__plan_node_cost(const graft__node *n) {
  return n->fused ? n->fused->cost : graft__ops[n->op].cost;
}

/* Compile g for the concrete inputs in[] (already checked against g's input
 * count, dtypes and ranks).  On failure *out is NULL and msg tells why. */
graft_status graft__plan_compile(const graft__graph *g, graft_tensor *const *in,
                                 const graft__plan_opts *opts, graft__plan **out, char *msg);
/* The same for inputs with the dims dims[i] (a control node's bodies). */
graft_status graft__plan_compile_dims(const graft__graph *g, const int64_t *const *dims,
                                      const graft__plan_opts *opts, graft__plan **out, char *msg);
/* 1 when no second worker could ever help p (one task, at most a grain of
 * work, or a chain of single-tile nodes): running it on the calling thread
 * is the sequential walk, the same tiles and bits, without a team. */
int graft__plan_runs_alone(const graft__plan *p, int64_t grain);
/* Node id of p's own copy of the graph, made writable: the copy (sharing
 * the traced graph's chunks) is made at the first write, and a chunk is
 * copied at the first write to one of its nodes (fusion, control flow).
 * NULL on ENOMEM. */
graft__node *graft__plan_writable(graft__plan *p, uint32_t id);

/* Point every compute view at its arena bytes (an aliased GET at its
 * control node's), after placement or a move of the arena. */
void graft__plan_point_views(graft__plan *p);

/* ---- control flow (control.c) ---------------------------------------------- */
/* The shape hook of graft__shape_ctx (ctl_arg: the plan): compiles a
 * control node's bodies, or gives a GET its output's shape. */
graft_status graft__ctl_shape(graft__shape_ctx *sc, const graft__node *n, const graft__shape *in,
                              graft__shape *out);
/* Point the plan's copies of control and GET nodes at their compiled
 * bodies (and GETs at their offsets). */
graft_status graft__ctl_attach(graft__plan *p);
void graft__ctl_exec_destroy(graft__ctl_exec *e);
/* Give the bodies of every control node of p (a top-level plan) one shared
 * block (p->ctl_arena) and add it to p's arena_bytes. */
graft_status graft__ctl_share(graft__plan *p);
/* Run a plan holding control flow: its order on the calling thread (its
 * bodies get rt's team: under ws one team held for the whole walk, whose
 * jobs their runs are), recording slices when rt traces. */
graft_status graft__ctl_run_plan(graft__plan *p, const graft_runtime *rt, char *msg);
/* Test-only: when set, a body that may run on the team always does (no
 * timing of the two ways: run_body), so tests reach the team for sure. */
extern int graft__ctl_team_always;
/* Add p's control nodes (their bodies' included), and the body runs and
 * ops since compile, to the counts. */
void graft__ctl_count(const graft__plan *p, int64_t *nodes, int64_t *runs, int64_t *ops);

/* ---- memory (memplan.c, plan_check.c) ------------------------------------ */
/* Arena slots: every value takes whole 64-byte lines, so values written by
 * different workers never share a line; in a plan that one thread runs
 * (pack: a runtime of one thread, or seq), a value of at most
 * GRAFT__SMALL_BYTES takes 16-byte slots instead (rank-0 values pack four
 * to a line, so a million scalars stream 16 MB, not 64). */
#define GRAFT__SMALL_BYTES 48
static inline int64_t graft__slot_align(int64_t bytes, int pack) {
  return pack && bytes <= GRAFT__SMALL_BYTES ? 16 : GRAFT__ALIGN;
}
static inline int64_t graft__slot_bytes(int64_t bytes, int pack) {
  int64_t a = graft__slot_align(bytes, pack);
  return (bytes + a - 1) / a * a;
}
/* Give every compute value an arena offset (p->offset, p->arena_bytes) with
 * parallel-safe reuse and in-place writes; fills the memory stats. */
graft_status graft__memplan(graft__plan *p);
/* Test-only: when set, plans compiled afterwards give every value its own
 * bytes (no reuse, no in-place), the oracle for the planner. */
extern int graft__memplan_naive;
/* Plans with more compute values than this (default 16384) are planned
 * without reachability bitsets (memplan_local.c) and checked by a sweep
 * (plan_check.c); tests lower it to run those paths on small plans. */
extern int graft__memplan_max_exact;
/* Test-only: when > 0, caps the max-flow work of the exact parallel bound
 * (arc visits per value), to test the bound of an unfinished flow. */
extern int64_t graft__memplan_flow_work;
/* Verify p's memory plan against its DAG: alignment, bounds, and that no two
 * values whose lifetimes may overlap in some schedule share bytes.  Returns
 * GRAFT_EINTERNAL with msg naming the two nodes on a violation. */
graft_status graft__plan_check(const graft__plan *p, char *msg);

/* ---- order (order.c) ------------------------------------------------------ */
/* Given a linked plan (successor lists grouped as group_successors leaves
 * them), write to seq the order positions in the order a lone work-stealing
 * worker runs them, a topological order.  Compiling with that order makes
 * one worker (and the sequential executor) walk every per-node array front
 * to back. */
graft_status graft__plan_order(const graft__plan *p, uint32_t *seq);

/* ---- tiles (tiles.c) ------------------------------------------------------ */
/* Work estimate of order position i (cost column x elements or MACs). */
int64_t graft__plan_node_work(const graft__plan *p, uint32_t i);
/* Fill p->tiling, p->work, p->n_tasks, the kargs' whole and defer flags and
 * p->n_deferred for the grain. */
graft_status graft__plan_tile(graft__plan *p, int64_t grain);
/* Units [*b, *e) of tile t. */
static inline void graft__tile_range(const graft__tiling *tl, int64_t t, int64_t *b, int64_t *e) {
  if (tl->per_seg) {
    int64_t s = t / tl->per_seg, j = t % tl->per_seg;
    *b = s * tl->seg + j * tl->len;
    *e = s * tl->seg + GRAFT__MIN(tl->seg, (j + 1) * tl->len);
  } else {
    *b = t * tl->len;
    *e = GRAFT__MIN(tl->units, (t + 1) * tl->len);
  }
}

/* ---- partition (partition.c) ---------------------------------------------- */
/* Split the compute nodes into p->n_parts parts (p->part), balancing work
 * and keeping chains whole; fill the partition stats. */
graft_status graft__plan_partition(graft__plan *p, int n_parts);
void graft__plan_destroy(graft__plan *p);

/* ---- MPI collectives (collective.c; graft/mpi.h) ---------------------- */
typedef struct graft__coll_plan graft__coll_plan;
/* At compile, after shapes: p->coll for a plan holding ALLREDUCE nodes
 * (each and its TAKEs get their state in the plan's copy of the node). */
graft_status graft__coll_attach(graft__plan *p, char *msg);
void graft__coll_destroy(graft__coll_plan *cp);
/* Between tiles: poll the posted requests (cheap when none is pending). */
void graft__coll_progress(graft__coll_plan *cp);
/* After running p (failed: the executor's status): wait for every posted
 * request and, after a failure, post the buckets this call never did, so
 * the other ranks' collectives complete.  GRAFT_EIO on an MPI error or a
 * timeout (msg). */
graft_status graft__coll_finish(graft__plan *p, graft_status failed, char *msg);

/* Run the plan's compute nodes one after another on the calling thread.
 * The caller has bound the data pointers of external views. */
graft_status graft__exec_seq(graft__plan *p, char *msg);
/* The same, recording a slice per tile into rec (GRAFT_TRACE: a control
 * node's bodies) as worker `worker`, times counted from t0. */
struct graft__trace_buf;
graft_status graft__exec_seq_rec(graft__plan *p, struct graft__trace_buf *rec, int worker, double t0,
                                 char *msg);

/* Run the plan on the runtime's work-stealing team (falls back to the
 * calling thread inside an active OpenMP region, unless the calling thread
 * holds rt's team: graft__exec_ws_hold). */
graft_status graft__exec_ws(graft__plan *p, const graft_runtime *rt, char *msg);
/* Run fn(arg, msg) on the calling thread with rt's work-stealing team kept
 * up around it: each graft__exec_ws fn makes on this thread runs on that
 * team (the other workers wait, parked, between those calls) instead of
 * starting one.  fn runs alone (no team) when rt has one thread, inside an
 * active OpenMP region, or when this thread holds a team already.  Returns
 * fn's status. */
graft_status graft__exec_ws_hold(const graft_runtime *rt, graft_status (*fn)(void *arg, char *msg),
                                 void *arg, char *msg);
/* 1 when the calling thread holds rt's team (graft__exec_ws_hold) and no
 * plan runs on it now: graft__exec_ws would run on that team. */
int graft__exec_ws_held(const graft_runtime *rt);
/* Test-only: parallel regions the work-stealing executor opened (each
 * graft__exec_ws that started a team, each graft__exec_ws_hold). */
extern _Atomic int64_t graft__exec_ws_regions;
/* Baseline: OpenMP tasks with depend clauses over the same nodes and tiles. */
graft_status graft__exec_omp(graft__plan *p, const graft_runtime *rt, char *msg);
void graft__exec_state_destroy(struct graft__exec_state *s);

/* Test-only fault injection: when set, called before every tile; a non-OK
 * return fails that tile.  Not thread-safe to change during a call. */
extern graft_status (*graft__exec_fault_hook)(uint32_t node, int64_t tile);

/* Run tile t of order position i (the test fault hook first); reason gets
 * the kernel's message on failure.  Shared by every executor. */
graft_status graft__exec_tile(graft__plan *p, uint32_t i, int64_t t, char *reason);
/* After the last tile of i: combine the partials of a split reduction. */
graft_status graft__exec_finish(graft__plan *p, uint32_t i, char *reason);

/* Format a kernel failure "<op>: <reason> (op #<id> in trace '<name>')". */
void graft__exec_fail_msg(const graft__plan *p, uint32_t id, const char *reason, char *msg);

/* The runtime's view used by functions. */
typedef struct graft__topology graft__topology;
struct graft_runtime {
  graft__config cfg;
  int num_threads;
  graft__topology *topo;
  graft__level level;       /* resolved partition level */
  int n_domains;            /* domains at that level */
  struct graft__chrome *trace; /* GRAFT_TRACE output, or NULL */
  int *worker_pu;           /* PU (OS index) of each of num_threads workers
                               when binding is on, else NULL */
  int refs;                 /* the user's (until destroy) + one per function
                               (atomic) */
  int destroyed;            /* graft_runtime_destroy was called (atomic) */
};

/* Functions hold their runtime: it is freed at the last unref. */
void graft__runtime_ref(graft_runtime *rt);
void graft__runtime_unref(graft_runtime *rt);
/* 1 once the user destroyed rt (while a function still holds it). */
int graft__runtime_destroyed(const graft_runtime *rt);

/* Where the calling thread runs now (an OS PU index, or -1). */
int graft__runtime_caller_pu(void);
/* Bind the calling thread, worker w of a team of n, to its PU when binding
 * is on.  Worker 0 is the caller, left where it is; caller_pu is where it
 * runs (graft__runtime_caller_pu before the team started): the worker
 * whose PU that is takes worker 0's, so two workers never share one. */
void graft__topology_bind_worker(const graft_runtime *rt, int w, int n, int caller_pu);
/* Parts a plan is partitioned into: domains that get at least one worker. */
int graft__runtime_parts(const graft_runtime *rt);
/* Domain of worker w of a team of n. */
static inline int graft__runtime_worker_domain(const graft_runtime *rt, int w, int n) {
  int parts = rt->n_domains < n ? rt->n_domains : n;
  return (int)((int64_t)w * parts / n);
}

/* For tests: the plan of f's last successful call, or NULL. */
const graft__plan *graft__function_plan(const graft_function *f);
/* For tests: 1 when that plan runs alone (no second worker can help it:
 * function.c), so the work-stealing executor runs it on the calling thread
 * without starting the team; 0 otherwise or without a plan. */
int graft__function_plan_alone(const graft_function *f);

/* ---- topology (hwloc) ----------------------------------------------------- */
/* Load the topology cfg names (or this machine).  msg on failure. */
graft_status graft__topology_load(const graft__config *cfg, graft__topology **out, char *msg);
void graft__topology_destroy(graft__topology *t);
int graft__topology_pus(const graft__topology *t);       /* usable PUs */
int graft__topology_domains(const graft__topology *t, graft__level level);
int graft__topology_is_this_system(const graft__topology *t);
/* The level "auto" resolves to: NUMA if several, else L3 if several, else none. */
graft__level graft__topology_auto_level(const graft__topology *t);
/* Bind the calling thread to usable PU number w (mod the PU count). */
void graft__topology_bind(const graft__topology *t, int pu);
graft_status graft__topology_worker_pus(const graft__topology *t, graft__level level, int parts,
                                        int n, int *map);
/* A short description "synthetic:pack:2 ..." or "this machine". */
const char *graft__topology_source(const graft__topology *t);

#endif /* GRAFT_SCHED_H */
