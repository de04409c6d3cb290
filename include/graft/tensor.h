/* graft: host tensors.
 *
 * Tensors carry inputs into a function call, results out of it, and the
 * values of variables.  Memory is row-major and contiguous.  A tensor made by
 * graft_tensor_create owns 64-byte-aligned memory; one made by
 * graft_tensor_wrap borrows the caller's memory, which graft never frees.
 *
 * Thread safety: a tensor is plain data; separate tensors may be used from
 * separate threads.  A tensor passed to graft_function_call must not be
 * written by another thread while the call runs.
 */
#ifndef GRAFT_TENSOR_H
#define GRAFT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "graft/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Highest tensor rank graft accepts. */
#define GRAFT_MAX_RANK 8

typedef enum graft_dtype {
  GRAFT_F32 = 0,
  GRAFT_F64 = 1,
  GRAFT_I32 = 2
} graft_dtype;

typedef struct graft_tensor graft_tensor;

/* Bytes of one element of dt, or 0 if dt is not a dtype. */
GRAFT_API size_t graft_dtype_size(graft_dtype dt);

/* "f32", "f64", "i32"; "?" for an invalid value.  Static, never freed. */
GRAFT_API const char *graft_dtype_name(graft_dtype dt);

/* Create a zero-filled tensor that owns 64-byte-aligned memory.
 * rank is 0..GRAFT_MAX_RANK; shape may be NULL when rank is 0; every dim >= 0
 * (a 0 dim gives zero elements; the other dims must still fit within the
 * byte limit as if the value were full, since kernels form strides from
 * them).  Returns GRAFT_EINVAL (bad rank, NULL shape, negative dim, an
 * element count that overflows int64, an empty shape whose other dims are
 * too large, NULL out), GRAFT_EDTYPE, or GRAFT_ENOMEM (out of memory,
 * or more than 2^48 bytes, graft's limit for one value); *out is NULL on
 * failure and graft_last_errmsg() says why.  Free with graft_tensor_destroy. */
GRAFT_API graft_status graft_tensor_create(graft_dtype dt, int rank,
                                           const int64_t *shape,
                                           graft_tensor **out);

/* Wrap caller memory (row-major, contiguous) in a tensor handle without
 * copying.  graft never frees data; the caller keeps it alive until
 * graft_tensor_destroy.  data may be NULL only if the tensor has zero
 * elements; otherwise it must be aligned for dt (_Alignof its C type: 4
 * bytes for f32 and i32, 8 for f64 on common ABIs), since kernels read it
 * as that type: misaligned data is refused with GRAFT_EINVAL.  Statuses and
 * shape rules otherwise as graft_tensor_create (the handle is the only
 * allocation). */
GRAFT_API graft_status graft_tensor_wrap(graft_dtype dt, int rank,
                                         const int64_t *shape, void *data,
                                         graft_tensor **out);

/* Free the handle and, if it owns them, its elements.  NULL is a no-op. */
GRAFT_API void graft_tensor_destroy(graft_tensor *t);

GRAFT_API void *graft_tensor_data(const graft_tensor *t);
GRAFT_API int graft_tensor_rank(const graft_tensor *t);
/* Pointer to rank dims, valid while t lives (NULL-safe for rank 0). */
GRAFT_API const int64_t *graft_tensor_shape(const graft_tensor *t);
GRAFT_API graft_dtype graft_tensor_dtype(const graft_tensor *t);
/* Number of elements (product of the shape; 1 for rank 0). */
GRAFT_API int64_t graft_tensor_numel(const graft_tensor *t);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_TENSOR_H */
