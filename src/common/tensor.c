/* Host tensors. */
#include <string.h>

#include "common/common.h"

struct graft_tensor {
  graft_dtype dtype;
  int rank;
  int64_t numel;
  int64_t shape[GRAFT_MAX_RANK];
  void *data;
};

/* A tensor that owns its memory is one block: the handle, then the data
 * from the next 64-byte boundary on (one allocation and one free per
 * tensor: a call whose outputs graft allocates makes one each). */
#define DATA_AT ((sizeof(graft_tensor) + GRAFT__ALIGN - 1) / GRAFT__ALIGN * GRAFT__ALIGN)

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

/* What a wrapped pointer must be aligned to for the kernels to read dt. */
static size_t dtype_align(graft_dtype dt) {
  switch (dt) {
  case GRAFT_F32: return _Alignof(float);
  case GRAFT_F64: return _Alignof(double);
  case GRAFT_I32: return _Alignof(int32_t);
  }
  return 1;
}

graft_status graft__tensor_check(const char *api, graft_dtype dt, int rank, const int64_t *shape,
                                 int64_t *numel) {
  if (graft_dtype_size(dt) == 0)
    return graft__fail(GRAFT_EDTYPE,
                       "%s: dtype %d is not a graft_dtype (expected GRAFT_F32, GRAFT_F64 or "
                       "GRAFT_I32)", api, (int)dt);
  if (rank < 0 || rank > GRAFT_MAX_RANK)
    return graft__fail(GRAFT_EINVAL, "%s: rank %d is out of range (expected 0..%d)", api, rank,
                       GRAFT_MAX_RANK);
  if (rank > 0 && !shape)
    return graft__fail(GRAFT_EINVAL, "%s: shape is NULL for rank %d (expected %d dims)", api,
                       rank, rank);
  /* Named here, by index and value: a shape string would print a negative
   * dim as a trace symbol. */
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0)
      return graft__fail(GRAFT_EINVAL, "%s: shape[%d] is %lld (expected every dim >= 0)", api, i,
                         (long long)shape[i]);
  char why[GRAFT__MSG_LEN / 2];
  graft_status st = graft__size_check(rank, shape, dt, numel, NULL, why, sizeof why);
  /* A count past int64 is an invalid argument here (the documented status
   * of tensor constructors); too many bytes stays GRAFT_ENOMEM. */
  if (st) return graft__fail(st == GRAFT_ENOMEM ? st : GRAFT_EINVAL, "%s: %s", api, why);
  return GRAFT_OK;
}

/* owns: 0 wraps data; 1 allocates zero-filled memory; 2 allocates memory
 * left as it comes (the caller writes every byte). */
static graft_status make(const char *api, graft_dtype dt, int rank, const int64_t *shape,
                         void *data, int owns, graft_tensor **out) {
  if (!out) return graft__fail(GRAFT_EINVAL, "%s: out is NULL (expected a graft_tensor **)", api);
  *out = NULL;
  int64_t n;
  graft_status st = graft__tensor_check(api, dt, rank, shape, &n);
  if (st) return st;
  size_t bytes = (size_t)n * graft_dtype_size(dt);
  char shp[160];
  if (!owns && ((!data && n > 0) || (uintptr_t)data % dtype_align(dt))) {
    graft__shape_str(shp, sizeof shp, rank, shape);
    if (!data)
      return graft__fail(GRAFT_EINVAL,
                         "%s: data is NULL for %s%s (%lld elements; expected memory for them, "
                         "NULL only for zero elements)", api, graft_dtype_name(dt), shp,
                         (long long)n);
    return graft__fail(GRAFT_EINVAL,
                       "%s: data %p is not aligned for %s (address %% %zu = %zu; expected a "
                       "multiple of %zu)", api, data, graft_dtype_name(dt), dtype_align(dt),
                       (size_t)((uintptr_t)data % dtype_align(dt)), dtype_align(dt));
  }
  graft_tensor *t;
  if (!owns) {
    t = graft__calloc(1, sizeof *t);
    if (!t) return graft__fail(GRAFT_ENOMEM, "%s: out of memory for the tensor handle", api);
    t->data = data;
  } else {
    t = bytes <= SIZE_MAX - DATA_AT ? graft__aligned_alloc(DATA_AT + bytes, GRAFT__ALIGN) : NULL;
    if (!t) {
      graft__shape_str(shp, sizeof shp, rank, shape);
      return graft__fail(GRAFT_ENOMEM, "%s: out of memory for %s%s (%zu bytes)", api,
                         graft_dtype_name(dt), shp, bytes);
    }
    memset(t, 0, sizeof *t);
    t->data = (unsigned char *)t + DATA_AT;
    if (owns == 1) memset(t->data, 0, bytes);
  }
  t->dtype = dt;
  t->rank = rank;
  t->numel = n;
  if (rank) memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
  *out = t;
  return GRAFT_OK;
}

GRAFT_API graft_status graft_tensor_create(graft_dtype dt, int rank, const int64_t *shape,
                                           graft_tensor **out) {
  return make("graft_tensor_create", dt, rank, shape, NULL, 1, out);
}

graft_status graft__tensor_create_unfilled(graft_dtype dt, int rank, const int64_t *shape,
                                          graft_tensor **out) {
  return make("graft_tensor_create", dt, rank, shape, NULL, 2, out);
}

GRAFT_API graft_status graft_tensor_wrap(graft_dtype dt, int rank, const int64_t *shape,
                                         void *data, graft_tensor **out) {
  return make("graft_tensor_wrap", dt, rank, shape, data, 0, out);
}

GRAFT_API void graft_tensor_destroy(graft_tensor *t) {
  graft__free(t); /* owned data is in the handle's block */
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
