/* graft: traces and symbolic values.
 *
 * A trace is the recording context handed to a function's trace callback.
 * Ops called on it append nodes to a graph and return graft_value handles.
 * Values belong to their trace: using one in another trace, or after its
 * callback returned (even when the function was destroyed or the trace
 * failed and was freed), is GRAFT_EMISUSE, never a read of freed memory.
 * Handles are valid only during the callback that received the trace.
 *
 * Sticky errors: the first op that fails records its status and a message
 * on the trace ("matmul: inner dimensions differ: [256,784] x [100,10] (op #3
 * in trace 'mlp')") and returns a poison value; ops on a poison value return
 * poison without a new message.  The function call that traced returns that
 * first error, so user code needs no check after every op.
 *
 * Shapes may be symbolic: a function signature dim of -1 traces once for
 * every size of that dim.  graft_value_shape then reports the dim as a
 * symbol code <= GRAFT_DIM_SYM(0) (a negative number below -1); such codes may
 * be passed back to shape-taking ops of the same trace (reshape,
 * broadcast_to, sum_to_shape, fill).  Concrete sizes are bound per call.
 *
 * Thread safety: a trace is used only by the thread running the callback.
 */
#ifndef GRAFT_TRACE_H
#define GRAFT_TRACE_H

#include <stdint.h>

#include "graft/status.h"
#include "graft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct graft_trace graft_trace;
typedef struct graft_value graft_value;

/* Symbolic dimension k (k >= 0) as it appears in shapes: -2, -3, ... */
#define GRAFT_DIM_SYM(k) (-2 - (int64_t)(k))
/* 1 if d is a symbolic dimension code. */
#define GRAFT_DIM_IS_SYM(d) ((d) <= -2)

/* Status of the first failure recorded on t (GRAFT_OK if none). */
GRAFT_API graft_status graft_trace_status(const graft_trace *t);
/* Message of the first failure on t ("" if none); valid while t lives. */
GRAFT_API const char *graft_trace_errmsg(const graft_trace *t);

/* Record a failure from user code (e.g. a check the callback makes); the
 * first failure wins.  fmt is printf-style.  s should be one of the
 * graft_status error codes; any other number (GRAFT_OK, a positive number)
 * is recorded as GRAFT_EINVAL with the number in the message, so calls only
 * ever return documented statuses. */
GRAFT_API graft_status graft_trace_fail(graft_trace *t, graft_status s,
                                        const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 1 if v is a poison value, NULL, or not a value of a trace running on
 * this thread (a handle kept after its callback returned).  A value handle
 * carries the identity of its trace and is never dereferenced: passing a
 * stale or foreign handle to an op, a gradient builder or as an output
 * fails the trace with GRAFT_EMISUSE, and the accessors below treat it like
 * poison (f32, rank 0, NULL shape). */
GRAFT_API int graft_value_is_poison(const graft_value *v);
GRAFT_API graft_dtype graft_value_dtype(const graft_value *v);
GRAFT_API int graft_value_rank(const graft_value *v);
/* rank dims, each >= 0 or a symbol code (GRAFT_DIM_IS_SYM); valid during
 * the trace.  NULL for rank 0 or poison. */
GRAFT_API const int64_t *graft_value_shape(const graft_value *v);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_TRACE_H */
