/* Variables: host storage captured by reference by every graph that reads
 * or assigns them.  A variable is reference-counted: its owner (the caller,
 * or the module it was created in) holds one reference and each graph that
 * uses it one more, so destroying it (or its module) while a function still
 * refers to it leaves memory valid and makes that function's next call fail
 * with GRAFT_EMISUSE. */
#include <string.h>

#include "graph/module_int.h"

GRAFT_API graft_status graft_variable_create(graft_module *owner, const char *name, graft_dtype dt,
                                             int rank, const int64_t *shape, const void *init,
                                             unsigned flags, graft_variable **out) {
  static const char api[] = "graft_variable_create";
  if (!out) return graft__fail(GRAFT_EINVAL, "%s: out is NULL (expected a graft_variable **)", api);
  *out = NULL;
  if (!name) return graft__fail(GRAFT_EINVAL, "%s: name is NULL (expected a string)", api);
  graft_status st = graft__tensor_check(api, dt, rank, shape, NULL);
  if (st) return st;
  graft_variable *v = graft__calloc(1, sizeof *v);
  if (!v) return graft__fail(GRAFT_ENOMEM, "%s: out of memory for variable '%s'", api, name);
  st = graft_tensor_create(dt, rank, shape, &v->value);
  if (st) {
    graft__free(v);
    return graft__fail(st, "%s: variable '%s': %s", api, name, graft_last_errmsg());
  }
  /* In a module the full name is the owner's scope + name. */
  const char *scope = owner ? owner->scope : "";
  size_t slen = strlen(scope), nlen = strlen(name);
  v->name = graft__malloc(slen + nlen + 1);
  if (!v->name) {
    graft_tensor_destroy(v->value);
    graft__free(v);
    return graft__fail(GRAFT_ENOMEM, "%s: out of memory for variable '%s'", api, name);
  }
  memcpy(v->name, scope, slen);
  memcpy(v->name + slen, name, nlen + 1);
  if (init)
    memcpy(graft_tensor_data(v->value), init,
           (size_t)graft_tensor_numel(v->value) * graft_dtype_size(dt));
  v->flags = flags;
  v->refs = 1;
  if (owner && (st = graft__module_hold_var(owner, api, name, v, GRAFT__ENTRY_OWNED))) {
    graft__variable_unref(v);
    return st;
  }
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
  if (v->owned) {
    graft__fail(GRAFT_EMISUSE, "graft_variable_destroy: variable '%s' belongs to a module (expected "
                "a variable created with owner NULL; a module's variables go with the module); "
                "nothing was freed", v->name);
    return;
  }
  /* A second destroy of a variable that something else still holds (a
   * function, an optimizer, a deferred module) would drop their reference:
   * refuse it.  (Once nothing holds it, the first destroy freed it.) */
  if (__atomic_exchange_n(&v->destroyed, 1, __ATOMIC_ACQ_REL)) {
    graft__fail(GRAFT_EMISUSE, "graft_variable_destroy: variable '%s' was destroyed already "
                "(expected one destroy per variable); nothing was freed", v->name);
    return;
  }
  graft__variable_unref(v);
}

GRAFT_API const char *graft_variable_name(const graft_variable *v) { return v ? v->name : NULL; }

GRAFT_API unsigned graft_variable_flags(const graft_variable *v) { return v ? v->flags : 0u; }

GRAFT_API const graft_tensor *graft_variable_value(const graft_variable *v) {
  return v ? v->value : NULL;
}

GRAFT_API graft_status graft_variable_set(graft_variable *v, const graft_tensor *src) {
  static const char api[] = "graft_variable_set";
  if (!v) return graft__fail(GRAFT_EINVAL, "%s: v is NULL (expected a variable)", api);
  if (!src)
    return graft__fail(GRAFT_EINVAL, "%s: src is NULL (expected a tensor for variable '%s')", api,
                       v->name);
  if (__atomic_load_n(&v->destroyed, __ATOMIC_ACQUIRE))
    return graft__fail(GRAFT_EMISUSE, "%s: variable '%s' was destroyed", api, v->name);
  const graft_tensor *d = v->value;
  int rank = graft_tensor_rank(d);
  if (graft_tensor_dtype(src) != graft_tensor_dtype(d) || graft_tensor_rank(src) != rank ||
      memcmp(graft_tensor_shape(src), graft_tensor_shape(d), (size_t)rank * sizeof(int64_t))) {
    char have[160], want[160];
    graft__shape_str(have, sizeof have, graft_tensor_rank(src), graft_tensor_shape(src));
    graft__shape_str(want, sizeof want, rank, graft_tensor_shape(d));
    return graft__fail(graft_tensor_dtype(src) != graft_tensor_dtype(d) ? GRAFT_EDTYPE : GRAFT_ESHAPE,
                       "%s: src is %s%s (expected %s%s, the dtype and shape of variable '%s')", api,
                       graft_dtype_name(graft_tensor_dtype(src)), have,
                       graft_dtype_name(graft_tensor_dtype(d)), want, v->name);
  }
  memcpy(graft_tensor_data(d), graft_tensor_data(src),
         (size_t)graft_tensor_numel(d) * graft_dtype_size(graft_tensor_dtype(d)));
  return GRAFT_OK;
}
