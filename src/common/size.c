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

graft_status graft__size_check(int rank, const int64_t *dims, graft_dtype dt, int64_t *numel,
                               int64_t *bytes, char *why, size_t why_len) {
  char shape[160];
  int64_t n = -1, b = 0;
  int neg = 0;
  for (int i = 0; i < rank; i++) neg |= dims[i] < 0;
  if (!neg) n = graft__numel(rank, dims);
  if (n < 0 || graft__size_mul(n, (int64_t)graft_dtype_size(dt), &b) ||
      b > GRAFT__MAX_VALUE_BYTES) {
    if (why) {
      /* Concrete dims, printed as numbers (shape_str would show a negative
       * dim as a trace symbol). */
      size_t at = (size_t)snprintf(shape, sizeof shape, "[");
      for (int i = 0; i < rank && at < sizeof shape; i++)
        at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", i ? "," : "",
                               (long long)dims[i]);
      if (at < sizeof shape) snprintf(shape + at, sizeof shape - at, "]");
      if (neg)
        snprintf(why, why_len, "shape %s has a negative dim", shape);
      else if (n < 0)
        snprintf(why, why_len, "shape %s: the element count overflows int64", shape);
      else
        snprintf(why, why_len,
                 "%s%s needs more than 2^%d bytes (%lld elements), graft's limit for one value",
                 graft_dtype_name(dt), shape, GRAFT__MAX_VALUE_BYTES_LOG2, (long long)n);
    }
    return neg || n < 0 ? GRAFT_ESHAPE : GRAFT_ENOMEM;
  }
  if (numel) *numel = n;
  if (bytes) *bytes = b;
  return GRAFT_OK;
}
