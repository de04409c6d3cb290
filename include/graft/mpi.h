/* graft: data-parallel training over MPI.
 *
 * Installed, and the functions below exported, only when graft is built
 * with MPI (meson -Dmpi=auto finds Open MPI; GRAFT_HAVE_MPI is then 1 in
 * graft/version.h).  Compile with the MPI compiler wrapper or pkg-config's
 * flags for ompi-c.
 *
 * The caller owns MPI: it calls MPI_Init_thread (graft's workers call MPI
 * from any thread, one at a time, so the level must be at least
 * MPI_THREAD_SERIALIZED) and MPI_Finalize; graft calls neither.  Every
 * function below refuses MPI_COMM_NULL with GRAFT_EINVAL.  Every rank
 * traces the same step (the same ops in the same order, shapes equal where
 * the collectives are concerned) and calls it the same number of times.
 *
 * A step with collectives behaves like one process training on the
 * concatenated batch: each collective is an ALLREDUCE node posted with a
 * non-blocking MPI all-reduce as soon as its inputs are ready, in one fixed
 * order on every rank (the order the trace made them), and finished by the
 * nodes that read it; the backward pass goes on meanwhile.  A call of such
 * a function also agrees with the other ranks, with two small all-reduces
 * of a status, once before it runs (so a rank whose inputs are refused
 * makes every rank refuse) and once after (so a rank whose step fails, on
 * data or otherwise, makes every rank fail it); a failed call changes no
 * variable on any rank.  Every wait for the other ranks is bounded by the
 * runtime's mpi_timeout (GRAFT_MPI_TIMEOUT, seconds, default 600): past it
 * the call fails with GRAFT_EIO and the communicator, which then holds an
 * unfinished collective, cannot be used again (MPI_Abort).
 *
 * A function may use one communicator.  graft's collectives run only
 * inside graft_function_call; during a call, no other thread may use the
 * same communicator (the application's own MPI calls, or a concurrent call
 * of another function whose collectives use it): collectives must start in
 * one order on every rank.  Collectives inside
 * control-flow bodies are refused (GRAFT_EUNSUPPORTED), and gradients
 * through a collective are not defined (all-reduce gradients after
 * graft_gradients, as below). */
#ifndef GRAFT_MPI_H
#define GRAFT_MPI_H

#include <mpi.h>
#include <stdint.h>

#include "graft/module.h"
#include "graft/status.h"
#include "graft/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bucketing of graft_allreduce_mean_n and graft_module_allreduce_gradients.
 * Zero-initialise for the defaults. */
typedef struct graft_allreduce_opts {
  /* A bucket is posted as one all-reduce once all its values are ready:
   * values join the current bucket until it would pass this many bytes (a
   * larger value gets a bucket of its own).  0: 25 MiB, PyTorch DDP's
   * default.  Smaller buckets start communicating earlier in the backward
   * pass; larger ones pay the per-message latency fewer times. */
  int64_t bucket_bytes;
} graft_allreduce_opts;

/* Inside a trace: the mean over the ranks of comm of x (f32 or f64; the
 * same dtype and shape on every rank).  One bucket of its own.  Fails the
 * trace (sticky error) with GRAFT_EMISUSE when MPI is not initialised,
 * GRAFT_EUNSUPPORTED when its thread level is below MPI_THREAD_SERIALIZED,
 * inside a control-flow body, or when the function already uses another
 * communicator, and GRAFT_EDTYPE for an integer x. */
GRAFT_API graft_value *graft_allreduce_mean(graft_trace *t, MPI_Comm comm, graft_value *x);

/* Inside a trace: out[i] = graft_allreduce_mean of xs[i], the xs grouped
 * into buckets in index order (the order they are posted in: put first
 * the values the backward pass computes first, the last layer's
 * gradients).  A NULL xs[i] gives a NULL out[i].  opts may be NULL.
 * Returns the trace's sticky status. */
GRAFT_API graft_status graft_allreduce_mean_n(graft_trace *t, MPI_Comm comm, int n,
                                              graft_value *const *xs, graft_value **out,
                                              const graft_allreduce_opts *opts);

/* Inside a trace: the n gradients of m's trainable variables, grads[i]
 * that of the i-th of graft_module_trainable_variables(m) (NULL: none),
 * each replaced in out by its mean over the ranks (out may be grads).
 * Buckets are filled from the last variable back (a module's last layers
 * get their gradients first in the backward pass).  GRAFT_EINVAL when n
 * is not the number of m's trainable variables, GRAFT_ESHAPE or
 * GRAFT_EDTYPE (naming the variable) when a gradient does not match it. */
GRAFT_API graft_status graft_module_allreduce_gradients(graft_trace *t, const graft_module *m,
                                                        MPI_Comm comm, int n,
                                                        graft_value *const *grads,
                                                        graft_value **out,
                                                        const graft_allreduce_opts *opts);

/* Outside calls, on every rank of comm: every variable of m (trainable or
 * not, in graft_module_variables' order) gets rank root's value.  The
 * ranks first agree that their modules have the same variables (names,
 * dtypes, shapes); if not, every rank returns GRAFT_ESHAPE and no variable
 * changes.  Collective: every rank must call it. */
GRAFT_API graft_status graft_module_broadcast(graft_module *m, MPI_Comm comm, int root);

/* Outside calls, on every rank of comm: *equal = 1 when every rank's
 * variables of m hold the same bytes (a 64-bit hash of names, shapes and
 * values compared across the ranks), else 0.  Collective. */
GRAFT_API graft_status graft_module_replicas_equal(const graft_module *m, MPI_Comm comm,
                                                   int *equal);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_MPI_H */
