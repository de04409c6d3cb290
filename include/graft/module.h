/* graft: variables (and, in a later release, modules).
 *
 * A variable is a named, typed, shaped host buffer that traced functions read
 * and assign.  Reads are captured by reference: an assignment is visible to
 * the next call without retracing.  Inside one trace, graft_read returns the
 * same value until an assignment to the variable, and the value assigned
 * after it.  Assignments are staged and committed only when the whole call
 * succeeds; a failed call leaves every variable unchanged.
 *
 * Thread safety: a variable must not be assigned (by a call or by
 * graft_variable_set) while another thread runs a call that uses it.
 */
#ifndef GRAFT_MODULE_H
#define GRAFT_MODULE_H

#include <stdint.h>

#include "graft/status.h"
#include "graft/tensor.h"
#include "graft/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct graft_module graft_module;
typedef struct graft_variable graft_variable;

/* Variable flags. */
#define GRAFT_VAR_TRAINABLE 1u

/* Create a variable.  owner must be NULL until modules exist (the caller
 * then destroys it with graft_variable_destroy).  init: row-major data of
 * dtype dt, copied; NULL = zeros.  name is copied.  On failure *out is NULL
 * and graft_last_errmsg() says why. */
GRAFT_API graft_status graft_variable_create(graft_module *owner, const char *name,
                                             graft_dtype dt, int rank,
                                             const int64_t *shape, const void *init,
                                             unsigned flags, graft_variable **out);

/* Give up the caller's variable.  Functions that traced a read or an
 * assignment of it hold their own reference, so its memory stays valid, but
 * their next call fails with GRAFT_EMISUSE naming the variable; destroy or
 * recreate them.  NULL is a no-op. */
GRAFT_API void graft_variable_destroy(graft_variable *v);

GRAFT_API const char *graft_variable_name(const graft_variable *v);
/* The variable's current value; the tensor stays owned by v. */
GRAFT_API const graft_tensor *graft_variable_value(const graft_variable *v);
/* Copy src (same dtype and shape) into v (on failure graft_last_errmsg()
 * says why). */
GRAFT_API graft_status graft_variable_set(graft_variable *v, const graft_tensor *src);

/* ---- inside a trace --------------------------------------------------- */
/* The variable's value in this trace. */
GRAFT_API graft_value *graft_read(graft_trace *t, graft_variable *v);
/* v := x (same dtype; x broadcasts to v's shape).  Returns the new value. */
GRAFT_API graft_value *graft_assign(graft_trace *t, graft_variable *v, graft_value *x);
/* v := v + d; returns the new value. */
GRAFT_API graft_value *graft_assign_add(graft_trace *t, graft_variable *v, graft_value *d);
/* v := v - d; returns the new value. */
GRAFT_API graft_value *graft_assign_sub(graft_trace *t, graft_variable *v, graft_value *d);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_MODULE_H */
