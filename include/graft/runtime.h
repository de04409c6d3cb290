/* graft: the runtime (worker team and its configuration).
 *
 * A runtime holds the resolved configuration: thread count, scheduler,
 * partition level, topology, binding, tile grain and trace output.  It is
 * read once, at graft_runtime_create.  Precedence for every setting: a field
 * set in graft_runtime_opts > the GRAFT_* environment variable > OpenMP state
 * > hwloc.  An invalid value is an error that names where it came from (the
 * variable, or the graft_runtime_opts field) and the accepted values.
 *
 * | variable          | values                                        | default                  |
 * |-------------------|-----------------------------------------------|--------------------------|
 * | GRAFT_NUM_THREADS | integer in 1..4096                            | omp_get_max_threads()    |
 * | GRAFT_SCHED       | ws, omp, seq                                  | ws                       |
 * | GRAFT_PARTITION   | auto, none, package, numa, l3, l2, core       | auto                     |
 * | GRAFT_TOPOLOGY    | hwloc synthetic description, or xml:PATH      | this machine             |
 * | GRAFT_BIND        | true, false                                   | true on real topologies  |
 * | GRAFT_GRAIN       | integer in 1..2^48 (elements per tile)        | 32768                    |
 * | GRAFT_MEMORY      | parallel, lanes:N (N = 1..4096)               | parallel                 |
 * | GRAFT_TRACE       | path of a Chrome trace JSON file              | off                      |
 * | GRAFT_DISPLAY_ENV | true, verbose, false                          | false                    |
 *
 * Thread safety: a runtime may be shared by several functions, and distinct
 * functions on one runtime may be called concurrently from different
 * threads.  graft_runtime_destroy must not race with any call that uses the
 * runtime, and every function created on it must be destroyed first.
 *
 * A synthetic GRAFT_TOPOLOGY may describe at most 8192 objects in all (the
 * sum of every level's width, "[numa]" NUMA nodes included: "pack:2 core:8
 * pu:2" has 2 + 16 + 32 = 50) and at most 256 children per object; larger
 * ones are refused before hwloc sees them (hwloc would spend from seconds to
 * minutes building them).  "pack:8 numa:2 l3:4 core:16 pu:2" (2048 PUs) has
 * 3160 objects; leave out the levels that no partition level needs.
 *
 * GRAFT_MEMORY=lanes:N trades parallelism for memory: every node also waits
 * for the node N places before it in the plan's order, so at most N nodes
 * run at once and the memory planner may reuse more (lanes:1 runs the plan
 * in order and its arena comes close to LOAD, the sequential minimum).
 */
#ifndef GRAFT_RUNTIME_H
#define GRAFT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "graft/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct graft_runtime graft_runtime;

/* Option bag: a zero / NULL field means "not set here" (the environment,
 * then OpenMP, then hwloc decide).  Initialise with graft_runtime_opts_init
 * or designated initializers. */
typedef struct graft_runtime_opts {
  int num_threads;        /* 1..4096 */
  const char *sched;      /* "ws", "omp", "seq" */
  const char *partition;  /* "auto", "none", "package", "numa", "l3", "l2", "core" */
  const char *topology;   /* hwloc synthetic description or "xml:PATH" */
  const char *trace_path; /* Chrome trace JSON output */
  int bind;               /* 0 unset, 1 true, -1 false */
  int64_t grain;          /* elements per tile, 1..2^48 */
  const char *memory;     /* "parallel", or "lanes:N" (N in 1..4096) */
  const char *fusion;     /* "on" (default): chains of elementwise ops run
                             as one node, compiled to one loop of machine
                             code where graft can (x86-64 with AVX);
                             "interp": fused, never compiled; "off": one
                             node per op.  Bitwise the same results. */
  int mpi_timeout;        /* seconds a call waits for the other ranks of an
                             MPI communicator (graft/mpi.h), 1..86400;
                             0 unset (default 600) */
} graft_runtime_opts;

GRAFT_API void graft_runtime_opts_init(graft_runtime_opts *opts);

/* Create a runtime.  opts NULL = environment defaults.  On failure *out is
 * NULL and graft_last_errmsg() names the offending opts field or variable,
 * its value and the accepted values.  Returns GRAFT_EINVAL for invalid
 * values, GRAFT_ENOMEM, or GRAFT_EIO when a topology file cannot be read or
 * the trace file cannot be created.  Free with graft_runtime_destroy. */
GRAFT_API graft_status graft_runtime_create(const graft_runtime_opts *opts,
                                            graft_runtime **out);

/* Same, and the message of a failure is also written to errbuf when it is
 * not NULL (truncated to errlen, NUL-terminated; "" on success). */
GRAFT_API graft_status graft_runtime_create_ex(const graft_runtime_opts *opts,
                                               graft_runtime **out,
                                               char *errbuf, size_t errlen);

/* NULL is a no-op. */
GRAFT_API void graft_runtime_destroy(graft_runtime *rt);

/* Writes "threads=2 sched=ws partition=auto domains=1 ..." into buf (always
 * NUL-terminated when len > 0); returns the length the full text needs, like
 * snprintf.  buf NULL measures only (whatever len is).  rt NULL writes
 * "(null runtime)" and sets graft_last_errmsg. */
GRAFT_API int graft_runtime_describe(const graft_runtime *rt, char *buf,
                                     size_t len);

/* Resolved thread count of rt. */
GRAFT_API int graft_runtime_num_threads(const graft_runtime *rt);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_RUNTIME_H */
