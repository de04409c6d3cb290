/* graft internal: allocation hook, messages, small utilities shared by every
 * area.  Internal symbols are graft__<area>_* with hidden visibility. */
#ifndef GRAFT_COMMON_H
#define GRAFT_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "graft/alloc.h"
#include "graft/status.h"
#include "graft/tensor.h"

#define GRAFT__ALIGN 64
#define GRAFT__MSG_LEN 512

/* Every allocation of graft goes through these (see graft_set_allocator). */
void *graft__malloc(size_t size);
void *graft__calloc(size_t n, size_t size);
/* Aligned to align (power of two); free with graft__free. */
void *graft__aligned_alloc(size_t size, size_t align);
/* Like realloc; on failure returns NULL and keeps p. */
void *graft__realloc(void *p, size_t old_size, size_t new_size);
void graft__free(void *p);
char *graft__strdup(const char *s);

/* Grow *arr (elements of elem bytes, *cap of them) to hold at least need.
 * Returns GRAFT_OK or GRAFT_ENOMEM (arr unchanged). */
graft_status graft__grow(void **arr, int64_t *cap, int64_t need, size_t elem);

/* 1 when s is one of graft_status's error codes (negative, listed in
 * GRAFT_STATUS_MAP); 0 for GRAFT_OK and for any other number. */
int graft__status_is_error(int s);
/* What graft reports in place of a number a user callback returned (or
 * passed to graft_trace_fail) that is not a graft_status error code. */
#define GRAFT__STATUS_FOREIGN GRAFT_EINVAL

/* printf into buf of GRAFT__MSG_LEN (truncating). */
void graft__msgf(char *buf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void graft__vmsgf(char *buf, const char *fmt, va_list ap);

/* The calling thread's last error (lasterr.c, graft_last_errmsg): printf
 * into it (truncating) and return s, so a failing path of a public call
 * outside traces reads `return graft__fail(GRAFT_EINVAL, "graft_x: ...")`.
 * The message names the API call, the argument, its value and what was
 * expected.  An argument may be graft_last_errmsg() itself. */
graft_status graft__fail(graft_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* s, with the last message prefixed by "api: " unless it starts with api
 * already: a call that failed in a call it made (graft_module_create inside
 * graft_optimizer_create) names itself. */
graft_status graft__fail_in(const char *api, graft_status s);

/* Check the dtype, rank, shape pointer, dims and size of a tensor for the
 * public call api ("graft_tensor_create"): GRAFT_OK with *numel (may be
 * NULL), else GRAFT_EDTYPE, GRAFT_EINVAL (bad rank, NULL shape, negative
 * dim, count overflow) or GRAFT_ENOMEM (over GRAFT__MAX_VALUE_BYTES), with
 * the reason, naming api, in graft_last_errmsg (tensor.c). */
graft_status graft__tensor_check(const char *api, graft_dtype dt, int rank, const int64_t *shape,
                                 int64_t *numel);
/* graft_tensor_create without the zero fill, for a tensor whose every byte
 * the caller writes before anyone reads it (a call's outputs). */
graft_status graft__tensor_create_unfilled(graft_dtype dt, int rank, const int64_t *shape,
                                           graft_tensor **out);

/* "[256,784]" (symbols as "s0", "s1"); writes at most len bytes. */
void graft__shape_str(char *buf, size_t len, int rank, const int64_t *dims);

/* ---- checked sizes (size.c): the one place sizes are multiplied and
 * summed with overflow checks ------------------------------------------ */
/* Bytes one value (a tensor, a variable, an intermediate) may take: far
 * above any real buffer, and low enough that tile counts, slot rounding and
 * work estimates derived from a checked size cannot overflow. */
#define GRAFT__MAX_VALUE_BYTES_LOG2 48
#define GRAFT__MAX_VALUE_BYTES ((int64_t)1 << GRAFT__MAX_VALUE_BYTES_LOG2)
/* Bytes of all of a plan's values together (no reuse): bounds every sum the
 * memory planner forms. */
#define GRAFT__MAX_PLAN_BYTES_LOG2 62
#define GRAFT__MAX_PLAN_BYTES ((int64_t)1 << GRAFT__MAX_PLAN_BYTES_LOG2)
/* *out = a * b (a + b) for a, b >= 0; returns -1 (out untouched) on a
 * negative operand or overflow, else 0. */
int graft__size_mul(int64_t a, int64_t b, int64_t *out);
int graft__size_add(int64_t a, int64_t b, int64_t *out);
/* Saturating versions for estimates (work, costs): INT64_MAX on overflow;
 * mul gives 0 for an operand <= 0. */
int64_t graft__size_mul_sat(int64_t a, int64_t b);
int64_t graft__size_add_sat(int64_t a, int64_t b);
/* Product of dims (1 for rank 0; 0 when any dim is 0, whatever the others
 * are); -1 if a dim is negative or the product overflows. */
int64_t graft__numel(int rank, const int64_t *dims);
/* Check that a value of dtype dt and shape dims can exist: dims >= 0, and
 * its nonzero dims (every 0 dim taken as 1, so that kernels' strides fit
 * even for an empty value) hold at most GRAFT__MAX_VALUE_BYTES.  Returns
 * GRAFT_OK with *numel and *bytes (either may be NULL), or GRAFT_ESHAPE
 * (negative dim, count overflow, an empty value whose other dims are too
 * large) / GRAFT_ENOMEM (too many bytes) with the reason, naming the
 * shape, in why (may be NULL). */
graft_status graft__size_check(int rank, const int64_t *dims, graft_dtype dt, int64_t *numel,
                               int64_t *bytes, char *why, size_t why_len);

double graft__now_us(void);

/* Bump arena for many small allocations freed together. */
typedef struct graft__arena {
  struct graft__arena_block *head;
} graft__arena;
void *graft__arena_alloc(graft__arena *a, size_t size);
void graft__arena_free(graft__arena *a);

#define GRAFT__MIN(a, b) ((a) < (b) ? (a) : (b))
#define GRAFT__MAX(a, b) ((a) > (b) ? (a) : (b))
#define GRAFT__COUNT(arr) (sizeof(arr) / sizeof((arr)[0]))

#endif /* GRAFT_COMMON_H */
