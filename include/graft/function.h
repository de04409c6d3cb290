/* graft: traced, cached, compiled functions.
 *
 * A function wraps a trace callback.  graft_function_call computes the
 * input signature (dtype and shape of every input); the first call with a
 * signature runs the callback once to record a graph, and compiles a plan
 * for the concrete shapes.  Later calls with the same signature reuse the
 * plan without calling the callback: host-side C in the callback runs only
 * at trace time.  With a declared signature whose dims may be -1 (unknown),
 * one trace serves every matching input and each concrete shape gets its
 * own plan (kept in an LRU cache of cache_capacity plans).
 *
 * Thread safety: one function handle must not be called from two threads at
 * once (a concurrent call returns GRAFT_EMISUSE and changes nothing);
 * distinct functions may be called concurrently, also on one runtime.
 * Called from inside an active OpenMP parallel region, a call runs its whole
 * graph on the calling thread (no nested team).
 */
#ifndef GRAFT_FUNCTION_H
#define GRAFT_FUNCTION_H

#include <stdint.h>
#include <stdio.h>

#include "graft/runtime.h"
#include "graft/status.h"
#include "graft/tensor.h"
#include "graft/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct graft_function graft_function;

/* The callback: read n_in input values, store n_out output values in out[].
 * Return GRAFT_OK, or an error of its own (the call then fails with it; a
 * number that is not a graft_status error code becomes GRAFT_EINVAL, the
 * number kept in the message).  Errors recorded on t by ops take
 * precedence over the return value. */
typedef graft_status (*graft_trace_fn)(graft_trace *t, int n_in,
                                       graft_value *const *in, int n_out,
                                       graft_value **out, void *user);

/* Declared input signature: dtype and shape per input; a dim of -1 is
 * unknown (one trace for every size). */
typedef struct graft_signature {
  int n;                        /* number of inputs described */
  const graft_dtype *dtypes;    /* n dtypes */
  const int *ranks;             /* n ranks */
  const int64_t *const *shapes; /* n shapes (shapes[i] has ranks[i] dims) */
} graft_signature;

typedef struct graft_function_desc {
  const char *name;               /* shown in messages, DOT and traces; copied */
  graft_trace_fn trace;           /* required */
  void *user;                     /* passed to trace */
  int n_inputs, n_outputs;        /* n_outputs >= 1 */
  const graft_signature *signature; /* optional; copied */
  int cache_capacity;             /* plans kept (LRU), 0..65536; 0 = 16 */
} graft_function_desc;

/* Parts whose work graft_plan_stats lists one by one. */
#define GRAFT_STATS_MAX_PARTS 64

/* Plan statistics of the most recently used plan. */
typedef struct graft_plan_stats {
  int64_t nodes;          /* nodes traced (all graph nodes) */
  int64_t live_nodes;     /* nodes in the plan after pruning */
  int64_t pruned_nodes;   /* nodes removed by pruning */
  int64_t tiles;          /* scheduled units (nodes or tiles) */
  int64_t arena_bytes;    /* bytes of the intermediate arena */
  int64_t naive_bytes;    /* bytes with one buffer per value (no reuse) */
  int64_t load_bytes;     /* max live bytes over the compile order: no
                             correct plan's arena is smaller */
  int64_t bound_bytes;    /* parallel-safe lower bound: the most bytes of
                             pairwise conflicting buffers (values that may
                             all be live at once in some schedule), exact
                             by max flow below a work cap; above 16384
                             compute nodes only the larger of load_bytes
                             and the buffers first written on one
                             topological level */
  int64_t inplace;        /* values written over an input (in place) */
  int64_t parts;          /* partition parts holding work */
  int64_t cut_bytes;      /* bytes of values read in another part than written */
  int64_t work;           /* estimated work of the plan (cost column units) */
  int64_t part_work[GRAFT_STATS_MAX_PARTS]; /* estimated work per part */
  int64_t steals;         /* tasks stolen during the last work-stealing call */
  double imbalance;       /* max part work / mean part work over parts (1 = perfect) */
  int trace_count;        /* times the callback ran */
  int plan_count;         /* plans currently cached */
  double compile_us;      /* time to compile this plan */
  double planner_us;      /* of which the memory planner */
  int planner_exact;      /* 1: reuse decided by exact reachability; 0: the
                             graph was too large (> 16384 compute nodes):
                             reuse and in-place writes only where a bounded
                             search of each writer's ancestors proves them
                             (compact when lifetimes are local) */
  int lanes;              /* GRAFT_MEMORY=lanes:N of the plan, 0 = parallel */
  int64_t lane_edges;     /* ordering edges lanes added */
  int64_t direct_assigns; /* assigns that write straight into their variable
                             (when the call cannot fail), not copied at the
                             end of the call */
  int64_t fused_groups;   /* fused nodes: elementwise ops run as one node,
                             one pass per tile (GRAFT_FUSION) */
  int64_t fused_ops;      /* ops inside them (an op recomputed in two
                             groups counts twice) */
  int64_t fused_dropped;  /* values no longer stored: every reader computes
                             them inside its group */
  int64_t fused_compiled; /* fused nodes compiled to one loop of machine
                             code (GRAFT_FUSION=on, x86-64 with AVX); the
                             others run their ops' kernels in turn */
  int64_t control_nodes;  /* cond / while_loop / scan / remat nodes, their
                             bodies' own included (arena_bytes counts the
                             bodies' arenas too) */
  int64_t body_runs;      /* last call: times a body ran (each iteration of
                             each body counts) */
  int64_t body_ops;       /* last call: ops those runs executed */
} graft_plan_stats;

/* Create a function on rt.  desc is copied.  GRAFT_EINVAL for a NULL trace
 * callback, negative counts, a signature whose n differs from n_inputs or
 * with a bad rank/dim; GRAFT_EMISUSE when rt was destroyed; each with a
 * message in graft_last_errmsg().  Free with graft_function_destroy, before
 * rt: a function outliving its runtime keeps it allocated, and its calls
 * fail with GRAFT_EMISUSE. */
GRAFT_API graft_status graft_function_create(graft_runtime *rt,
                                             const graft_function_desc *desc,
                                             graft_function **out);

/* NULL is a no-op. */
GRAFT_API void graft_function_destroy(graft_function *f);

/* Call f.  in: n_in tensors matching n_inputs (and the declared signature).
 * out: n_out slots matching n_outputs; a NULL slot receives a new tensor that
 * the caller frees with graft_tensor_destroy; a non-NULL slot must have the
 * output's dtype and shape and is written in place.
 * On failure nothing is allocated into out[], variables keep their values,
 * and graft_function_errmsg(f) tells why (graft_last_errmsg() too). */
GRAFT_API graft_status graft_function_call(graft_function *f, int n_in,
                                           graft_tensor *const *in, int n_out,
                                           graft_tensor **out);

/* Message of the last failure on f ("" after a success); valid until the
 * next call on f. */
GRAFT_API const char *graft_function_errmsg(const graft_function *f);

/* Times the trace callback has run. */
GRAFT_API int graft_function_trace_count(const graft_function *f);

/* Statistics of the plan used by the last successful call. */
GRAFT_API graft_status graft_function_stats(graft_function *f,
                                            graft_plan_stats *out);

/* Write the graph of the last traced signature in Graphviz DOT (inputs,
 * variables, constants, ops and side effects styled apart; pruned nodes
 * dashed; the bodies of cond, while_loop, scan and remat drawn the same
 * way in clusters around their control node, nested as they nest).
 * GRAFT_EMISUSE if f has not been traced yet. */
GRAFT_API graft_status graft_function_write_dot(graft_function *f, FILE *to);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_FUNCTION_H */
