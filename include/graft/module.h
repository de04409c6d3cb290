/* graft: modules and variables (tf.Module in C), deferred modules.
 *
 * A variable is a named, typed, shaped host buffer that traced functions read
 * and assign.  Reads are captured by reference: an assignment is visible to
 * the next call without retracing.  Inside one trace, graft_read returns the
 * same value until an assignment to the variable, and the value assigned
 * after it.  Assignments are staged and committed only when the whole call
 * succeeds; a failed call leaves every variable unchanged.
 *
 * A module is a named container of variables and other modules.  Its name
 * scope is fixed when it is created ("model/encoder/"), and its variables
 * are named scope + name ("model/encoder/w").  Modules hold other modules
 * under attributes: a name ("encoder") or a list slot ("layers[3]"); one
 * module may be held under several attributes of several parents (shared
 * weights), so it has several paths ("encoder.layers[0]", "decoder.tied").
 * Modules are reference counted: the caller holds a root it created, a
 * parent holds its children; destroying a root frees every module and
 * variable that nothing else holds.  A variable is also held by every
 * function that traced it (see graft_variable_destroy).
 *
 * Walks are deterministic: graft_module_variables lists each variable once
 * (the module's own, in creation order, then each submodule's, depth first
 * in attribute order), graft_module_submodules each module once (breadth
 * first), graft_module_flatten every path.  Attribute order is the order in
 * which a parent got its submodules (created under it or attached).
 *
 * A deferred module (TensorFlow Probability's DeferredModule) holds the
 * variables it derives parameters from and a derive callback; inside a
 * trace, graft_deferred_params traces the callback once and returns the
 * derived values, shared by every use in that trace, with gradients
 * reaching the variables (a Gamma built from a trainable mean and
 * variance; examples/deferred_gamma.c).
 *
 * Thread safety: building and walking a module tree is not thread-safe
 * with respect to changes of the same tree; distinct trees may be used from
 * distinct threads.  Walks (variables, trainable variables, submodules,
 * flatten, print) only read, so several may run at once on one tree.  A
 * variable must not be assigned (by a call or by graft_variable_set) while
 * another thread runs a call that uses it.
 */
#ifndef GRAFT_MODULE_H
#define GRAFT_MODULE_H

#include <stdint.h>
#include <stdio.h>

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

/* ---- modules ------------------------------------------------------------ */

/* Create a module named name: a C identifier ([A-Za-z_][A-Za-z0-9_]*, at
 * most 63 characters), else GRAFT_EINVAL.  parent NULL: a root, held by the
 * caller (free it with graft_module_destroy); its scope is "name/".  With a
 * parent: the scope is the parent's scope + name + "/", and the parent holds
 * the module under the attribute of that name (the handle is borrowed: valid
 * while some parent holds the module).  A second module created under one
 * parent with one name is named name_1, then name_2, ... (scope and
 * attribute alike): the first such name that no attribute of parent holds
 * yet.  On failure *out is NULL and graft_last_errmsg() says why. */
GRAFT_API graft_status graft_module_create(graft_module *parent, const char *name,
                                           graft_module **out);

/* Hold child under parent's attribute attr: a C identifier (at most 63
 * characters), or one followed by a list index ("layers[3]": decimal, 0 to
 * INT_MAX, no leading zeros).  A module may be attached in several places
 * and to several parents; each attachment holds a reference.  The child
 * keeps the scope it was created with.  GRAFT_EINVAL for a bad or taken
 * attribute (an attribute names one module or variable of parent, and a
 * list "layers[k]" takes the identifier "layers" from single entries),
 * GRAFT_EMISUSE when the attachment would make a cycle (child is parent or
 * holds it); on failure nothing changes and graft_last_errmsg() says why. */
GRAFT_API graft_status graft_module_attach(graft_module *parent, const char *attr,
                                           graft_module *child);

/* Release the caller's hold on a root module.  What nothing else holds is
 * freed: the module (unless attached somewhere), its submodules that no
 * other parent holds, and their variables: those that a function still
 * uses stay allocated, and that function's next call fails with
 * GRAFT_EMISUSE (as after graft_variable_destroy).  Modules created under a
 * parent are held by the parent, and a root's hold is released once:
 * destroying such a module is a misuse that changes nothing and sets
 * graft_last_errmsg().  NULL is a no-op. */
GRAFT_API void graft_module_destroy(graft_module *m);

/* "encoder" (the name given at creation, made unique), and the scope
 * "model/encoder/".  Static while m lives; NULL for NULL. */
GRAFT_API const char *graft_module_name(const graft_module *m);
GRAFT_API const char *graft_module_scope(const graft_module *m);

/* The walks write up to cap handles into out (out may be NULL when cap is 0)
 * and the total count into *n, so a caller may ask for the count first.
 * Variables: each once, m's own in creation order (with a deferred module's
 * tracked variables), then each submodule's, depth first in attribute
 * order (a module met again under another path is not entered again).
 * Trainable variables: the same, only those with GRAFT_VAR_TRAINABLE.
 * Submodules: each module below m once, breadth first in attribute order
 * (m itself excluded).  The handles are borrowed.  A walk allocates nothing
 * unless the tree is deep (over 32 levels) or large (over 256 submodules
 * for graft_module_submodules, or over 512 modules held in several places
 * and variables to tell apart).  GRAFT_EINVAL (NULL m or n, cap < 0, out
 * NULL with cap > 0) or GRAFT_ENOMEM, with *n = 0 and graft_last_errmsg()
 * set. */
GRAFT_API graft_status graft_module_variables(const graft_module *m, int64_t cap,
                                              graft_variable **out, int64_t *n);
GRAFT_API graft_status graft_module_trainable_variables(const graft_module *m, int64_t cap,
                                                        graft_variable **out, int64_t *n);
GRAFT_API graft_status graft_module_submodules(const graft_module *m, int64_t cap,
                                               graft_module **out, int64_t *n);

/* Visit every variable under every path, in the order of
 * graft_module_variables but repeating a shared module under each of its
 * paths: path is "encoder.layers[0].w" (attributes joined by '.', then the
 * variable's name within its module, without m's own name); valid during
 * the call.  A graft_status error returned by visit stops the walk and is
 * returned as is (graft_last_errmsg() as visit left it); any other nonzero
 * number stops it with GRAFT_EINVAL. */
typedef graft_status (*graft_module_visit_fn)(const char *path, graft_variable *v, void *user);
GRAFT_API graft_status graft_module_flatten(const graft_module *m, graft_module_visit_fn visit,
                                            void *user);

/* Print a summary of m to f: a header line, one line per path (path,
 * dtype, shape, parameters, bytes, trainable "yes"/"no"; columns
 * separated by two spaces and padded to their widest entry), then
 * "total: P paths, V variables, N parameters (T trainable), B bytes" with
 * each variable counted once.  GRAFT_EIO when f cannot be written (checked
 * after a flush). */
GRAFT_API graft_status graft_module_print(const graft_module *m, FILE *f);

/* ---- variables ------------------------------------------------------------ */

/* Create a variable.  owner NULL: the caller holds it and frees it with
 * graft_variable_destroy; its name is name.  With an owner: the module
 * holds it, its name is the owner's scope + name, and name is the
 * attribute it has in the owner (a C identifier, not taken by another
 * variable or module of the owner, else GRAFT_EINVAL).  init: row-major data
 * of dtype dt, copied; NULL = zeros.  name is copied.  On failure *out is
 * NULL and graft_last_errmsg() says why. */
GRAFT_API graft_status graft_variable_create(graft_module *owner, const char *name,
                                             graft_dtype dt, int rank,
                                             const int64_t *shape, const void *init,
                                             unsigned flags, graft_variable **out);

/* Give up the caller's variable (one created without an owner; a module's
 * variables go with the module: destroying one is a misuse that changes
 * nothing and sets graft_last_errmsg()).  Functions that traced a read or an
 * assignment of it hold their own reference, so its memory stays valid, but
 * their next call fails with GRAFT_EMISUSE naming the variable; destroy or
 * recreate them.  NULL is a no-op. */
GRAFT_API void graft_variable_destroy(graft_variable *v);

/* The full name ("model/encoder/w"). */
GRAFT_API const char *graft_variable_name(const graft_variable *v);
/* The flags given at creation (GRAFT_VAR_TRAINABLE); 0 for NULL. */
GRAFT_API unsigned graft_variable_flags(const graft_variable *v);
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

/* ---- deferred modules ------------------------------------------------------ */

/* The derive callback of a deferred module m: compute n_params values from
 * the variables m tracks (graft_read) and from the deferred modules
 * attached to m (graft_deferred_params), store them in params[] (each a
 * value of t), return GRAFT_OK or an error.  Runs inside a trace: once per
 * trace, and again only after a variable it depends on is assigned later in
 * that trace.  derive is pure: it reads and computes; an assignment
 * (graft_assign*, graft_optimizer_apply) inside it fails the trace with
 * GRAFT_EMISUSE.  Every variable the values depend on must be in m's walk
 * (tracked by m, or held by a module attached to m), else GRAFT_EMISUSE
 * naming it: what m derives from is what its walks and checkpoints hold. */
typedef graft_status (*graft_derive_fn)(graft_trace *t, graft_module *m, int n_params,
                                        graft_value **params, void *user);

/* Create a deferred module (parent and name as graft_module_create:
 * scope, sibling numbering, who holds it) that tracks the n_vars >= 0
 * distinct variables vars (held by m too, so they appear in its walks and
 * checkpoints, and stay allocated while m lives; they may belong to other
 * modules or to the caller) and derives n_params >= 1 values from them
 * with derive(user).  Variable i is held under the last '/'-separated part
 * of its name ("model/mean" -> "mean"), with characters outside
 * [A-Za-z0-9_] made '_', a leading digit prefixed by 'v' and an empty part
 * named "var", then told apart by "_1", "_2", ... in vars order ("loc",
 * "loc_1").  A deferred module it derives from is attached to it
 * (graft_module_attach) or created under it, so its variables show in m's
 * walks too.  GRAFT_EINVAL for a NULL out, name or derive, a bad name,
 * n_params < 1, n_vars < 0, vars NULL with n_vars > 0, a NULL or repeated
 * variable; GRAFT_EMISUSE for a destroyed variable; GRAFT_ENOMEM.  On
 * failure *out is NULL, parent is unchanged and graft_last_errmsg() says
 * why.  user is not freed by graft. */
GRAFT_API graft_status graft_deferred_create(graft_module *parent, const char *name, int n_vars,
                                             graft_variable *const *vars, int n_params,
                                             graft_derive_fn derive, void *user,
                                             graft_module **out);

/* Inside a trace: m's n derived values (n = its n_params) in out[].  The
 * first use in a trace runs derive; later uses in the same trace return
 * the same handles, unless a variable the values depend on was assigned
 * in the trace since (then derive runs again, from the assigned values, as
 * graft_read gives the assigned value).  Nothing is kept across traces,
 * and variables are read by reference: after an assignment (in a call, or
 * graft_variable_set) the next call computes new derived values without a
 * retrace.  A traced function holds the variables it read, not m: its
 * later calls do not need m, a retrace does.
 *
 * Errors fail the trace (sticky), set out[0..n) to poison and return the
 * trace's status: GRAFT_EINVAL for a NULL m or out, a module that is not
 * deferred, n != n_params; derive's own error (a number that is not a
 * graft_status error code becomes GRAFT_EINVAL); GRAFT_EINVAL when derive
 * leaves a params[i] NULL; GRAFT_EMISUSE when it stores a poison value or
 * one of another trace, assigns a variable, reads one m does not hold, or
 * asks for m's own values (directly, or through other deferred modules in
 * a cycle); GRAFT_EUNSUPPORTED for derives nested more than 64 deep; an op
 * error inside derive keeps its status, its message prefixed with the
 * module's name.  The messages name graft_deferred_params and the module.
 * A failed trace's status is returned as is.  t NULL: GRAFT_EINVAL with
 * graft_last_errmsg().
 *
 * Thread safety: graft_deferred_params only reads m (what a trace derived
 * lives in the trace), so traces on several threads may use one deferred
 * module at once. */
GRAFT_API graft_status graft_deferred_params(graft_trace *t, graft_module *m, int n,
                                             graft_value **out);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_MODULE_H */
