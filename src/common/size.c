/* Checked size arithmetic: the one place where element counts, byte counts
 * and sums of them are computed.  Every size in graft is an int64; every
 * product or sum that hostile shapes could push past INT64_MAX goes through
 * these, and an overflow is a status for the caller to report, never a
 * wrap.  Limits (GRAFT__MAX_VALUE_BYTES per value, GRAFT__MAX_PLAN_BYTES per
 * plan) keep everything derived from checked sizes (tile counts, arena
 * offsets, rounding to slots) far from overflow. */
#include <stdio.h>

#include "common/common.h"

int graft__size_mul(int64_t a, int64_t b, int64_t *out) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return -1;
  *out = r;
  return 0;
}

int graft__size_add(int64_t a, int64_t b, int64_t *out) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return -1;
  *out = r;
  return 0;
}

int64_t graft__size_mul_sat(int64_t a, int64_t b) {
  int64_t r;
  if (a <= 0 || b <= 0) return 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

int64_t graft__size_add_sat(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

int64_t graft__numel(int rank, const int64_t *dims) {
  /* One rule for zero-element shapes: any 0 dim makes the count 0,
   * whatever the other dims are (they must still be >= 0). */
  int zero = 0;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return -1;
    zero |= dims[i] == 0;
  }
  if (zero) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    if (graft__size_mul(n, dims[i], &n)) return -1;
  return n;
}

/* A value's dims are checked with every 0 dim taken as 1: a 0 dim empties
 * the value, but kernels still form strides and row lengths from its other
 * dims, so those must fit as if the value were full.  One rule: a shape is
 * valid when its nonzero dims hold at most GRAFT__MAX_VALUE_BYTES. */
graft_status graft__size_check(int rank, const int64_t *dims, graft_dtype dt, int64_t *numel,
                               int64_t *bytes, char *why, size_t why_len) {
  int neg = 0, zero = 0, count_over = 0;
  int64_t count = 1, span = 0; /* elements and bytes of the nonzero dims */
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) neg = 1;
    else if (dims[i] == 0) zero = 1;
    else if (!count_over && graft__size_mul(count, dims[i], &count)) count_over = 1;
  }
  int bytes_over = count_over || graft__size_mul(count, (int64_t)graft_dtype_size(dt), &span) ||
                   span > GRAFT__MAX_VALUE_BYTES;
  if (!neg && !bytes_over) {
    if (numel) *numel = zero ? 0 : count;
    if (bytes) *bytes = zero ? 0 : span;
    return GRAFT_OK;
  }
  if (why) {
    /* Concrete dims, printed as numbers (shape_str would show a negative
     * dim as a trace symbol). */
    char shape[160];
    size_t at = (size_t)snprintf(shape, sizeof shape, "[");
    for (int i = 0; i < rank && at < sizeof shape; i++)
      at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", i ? "," : "",
                             (long long)dims[i]);
    if (at < sizeof shape) snprintf(shape + at, sizeof shape - at, "]");
    if (neg)
      snprintf(why, why_len, "shape %s has a negative dim", shape);
    else if (zero)
      snprintf(why, why_len,
               "%s%s: its nonzero dims span more than 2^%d bytes (a 0 dim empties the value, "
               "but its other dims must fit as if it were full)",
               graft_dtype_name(dt), shape, GRAFT__MAX_VALUE_BYTES_LOG2);
    else if (count_over)
      snprintf(why, why_len, "shape %s: the element count overflows int64", shape);
    else
      snprintf(why, why_len,
               "%s%s needs more than 2^%d bytes (%lld elements), graft's limit for one value",
               graft_dtype_name(dt), shape, GRAFT__MAX_VALUE_BYTES_LOG2, (long long)count);
  }
  return neg || zero || count_over ? GRAFT_ESHAPE : GRAFT_ENOMEM;
}
