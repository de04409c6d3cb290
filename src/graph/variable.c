/* Variables: host storage captured by reference by every graph that reads
 * or assigns them.  A variable is reference-counted: its owner holds one
 * reference and each graph that uses it one more, so destroying it while a
 * function still refers to it leaves memory valid and makes that function's
 * next call fail with GRAFT_EMISUSE. */
#include <string.h>

#include "graph/graph.h"

GRAFT_API graft_status graft_variable_create(graft_module *owner, const char *name, graft_dtype dt,
                                             int rank, const int64_t *shape, const void *init,
                                             unsigned flags, graft_variable **out) {
  if (!out) return GRAFT_EINVAL;
  *out = NULL;
  if (owner) return GRAFT_EUNSUPPORTED; /* modules arrive with a later release */
  if (!name) return GRAFT_EINVAL;
  graft_variable *v = graft__calloc(1, sizeof *v);
  if (!v) return GRAFT_ENOMEM;
  graft_status st = graft_tensor_create(dt, rank, shape, &v->value);
  if (st) {
    graft__free(v);
    return st;
  }
  v->name = graft__strdup(name);
  if (!v->name) {
    graft_tensor_destroy(v->value);
    graft__free(v);
    return GRAFT_ENOMEM;
  }
  if (init)
    memcpy(graft_tensor_data(v->value), init,
           (size_t)graft_tensor_numel(v->value) * graft_dtype_size(dt));
  v->flags = flags;
  v->refs = 1;
  *out = v;
  return GRAFT_OK;
}

void graft__variable_ref(graft_variable *v) { __atomic_add_fetch(&v->refs, 1, __ATOMIC_RELAXED); }

void graft__variable_unref(graft_variable *v) {
  if (__atomic_sub_fetch(&v->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  graft_tensor_destroy(v->value);
  graft__free(v->name);
  graft__free(v);
}

GRAFT_API void graft_variable_destroy(graft_variable *v) {
  if (!v) return;
  __atomic_store_n(&v->destroyed, 1, __ATOMIC_RELEASE);
  graft__variable_unref(v);
}

GRAFT_API const char *graft_variable_name(const graft_variable *v) { return v ? v->name : NULL; }

GRAFT_API const graft_tensor *graft_variable_value(const graft_variable *v) {
  return v ? v->value : NULL;
}

GRAFT_API graft_status graft_variable_set(graft_variable *v, const graft_tensor *src) {
  if (!v || !src) return GRAFT_EINVAL;
  const graft_tensor *d = v->value;
  if (graft_tensor_dtype(src) != graft_tensor_dtype(d)) return GRAFT_EDTYPE;
  if (graft_tensor_rank(src) != graft_tensor_rank(d) ||
      memcmp(graft_tensor_shape(src), graft_tensor_shape(d),
             (size_t)graft_tensor_rank(d) * sizeof(int64_t)))
    return GRAFT_ESHAPE;
  memcpy(graft_tensor_data(d), graft_tensor_data(src),
         (size_t)graft_tensor_numel(d) * graft_dtype_size(graft_tensor_dtype(d)));
  return GRAFT_OK;
}
