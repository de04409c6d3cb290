/* Host tensors. */
#include <string.h>

#include "common/common.h"

struct graft_tensor {
  graft_dtype dtype;
  int rank;
  int owns;
  int64_t numel;
  int64_t shape[GRAFT_MAX_RANK];
  void *data;
};

GRAFT_API size_t graft_dtype_size(graft_dtype dt) {
  switch (dt) {
  case GRAFT_F32: return 4;
  case GRAFT_F64: return 8;
  case GRAFT_I32: return 4;
  }
  return 0;
}

GRAFT_API const char *graft_dtype_name(graft_dtype dt) {
  switch (dt) {
  case GRAFT_F32: return "f32";
  case GRAFT_F64: return "f64";
  case GRAFT_I32: return "i32";
  }
  return "?";
}

static graft_status make(graft_dtype dt, int rank, const int64_t *shape, void *data,
                         int owns, graft_tensor **out) {
  if (!out) return GRAFT_EINVAL;
  *out = NULL;
  if (graft_dtype_size(dt) == 0) return GRAFT_EDTYPE;
  if (rank < 0 || rank > GRAFT_MAX_RANK || (rank > 0 && !shape)) return GRAFT_EINVAL;
  int64_t n = graft__numel(rank, shape);
  if (n < 0 || (uint64_t)n > SIZE_MAX / 8) return GRAFT_EINVAL;
  if (!owns && !data && n > 0) return GRAFT_EINVAL;
  graft_tensor *t = graft__calloc(1, sizeof *t);
  if (!t) return GRAFT_ENOMEM;
  t->dtype = dt;
  t->rank = rank;
  t->numel = n;
  if (rank) memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
  t->owns = owns;
  if (owns) {
    size_t bytes = (size_t)n * graft_dtype_size(dt);
    t->data = graft__aligned_alloc(bytes ? bytes : 1, GRAFT__ALIGN);
    if (!t->data) {
      graft__free(t);
      return GRAFT_ENOMEM;
    }
    memset(t->data, 0, bytes);
  } else {
    t->data = data;
  }
  *out = t;
  return GRAFT_OK;
}

GRAFT_API graft_status graft_tensor_create(graft_dtype dt, int rank, const int64_t *shape,
                                           graft_tensor **out) {
  return make(dt, rank, shape, NULL, 1, out);
}

GRAFT_API graft_status graft_tensor_wrap(graft_dtype dt, int rank, const int64_t *shape,
                                         void *data, graft_tensor **out) {
  return make(dt, rank, shape, data, 0, out);
}

GRAFT_API void graft_tensor_destroy(graft_tensor *t) {
  if (!t) return;
  if (t->owns) graft__free(t->data);
  graft__free(t);
}

GRAFT_API void *graft_tensor_data(const graft_tensor *t) { return t ? t->data : NULL; }
GRAFT_API int graft_tensor_rank(const graft_tensor *t) { return t ? t->rank : 0; }
GRAFT_API const int64_t *graft_tensor_shape(const graft_tensor *t) {
  return t ? t->shape : NULL;
}
GRAFT_API graft_dtype graft_tensor_dtype(const graft_tensor *t) {
  return t ? t->dtype : GRAFT_F32;
}
GRAFT_API int64_t graft_tensor_numel(const graft_tensor *t) { return t ? t->numel : 0; }
