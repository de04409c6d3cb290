/* Shared helpers for graft's cmocka tests: deterministic random data, a
 * one-shot "trace this and run it" call, and comparisons.  Include after
 * <cmocka.h>. */
#ifndef GRAFT_TESTUTIL_H
#define GRAFT_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graft.h"

/* xorshift64*: reproducible across platforms. */
typedef struct tu_rng {
  uint64_t s;
} tu_rng;

static inline uint64_t tu_next(tu_rng *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 2685821657736338717ull;
}
/* Uniform in [lo, hi). */
static inline double tu_uniform(tu_rng *r, double lo, double hi) {
  return lo + (hi - lo) * ((double)(tu_next(r) >> 11) * (1.0 / 9007199254740992.0));
}
static inline int64_t tu_int(tu_rng *r, int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)(tu_next(r) % (uint64_t)(hi - lo + 1));
}

/* A tensor of dtype dt filled with uniform values in [lo, hi) (i32: integers
 * in [lo, hi]).  Asserts on failure. */
static inline graft_tensor *tu_tensor_rand(tu_rng *r, graft_dtype dt, int rank,
                                           const int64_t *shape, double lo, double hi) {
  graft_tensor *t = NULL;
  assert_int_equal(graft_tensor_create(dt, rank, shape, &t), GRAFT_OK);
  int64_t n = graft_tensor_numel(t);
  void *d = graft_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    if (dt == GRAFT_F32) ((float *)d)[i] = (float)tu_uniform(r, lo, hi);
    else if (dt == GRAFT_F64) ((double *)d)[i] = tu_uniform(r, lo, hi);
    else ((int32_t *)d)[i] = (int32_t)tu_int(r, (int64_t)lo, (int64_t)hi);
  }
  return t;
}

/* Element i of t as a double. */
static inline double tu_get(const graft_tensor *t, int64_t i) {
  const void *d = graft_tensor_data(t);
  switch (graft_tensor_dtype(t)) {
  case GRAFT_F32: return ((const float *)d)[i];
  case GRAFT_F64: return ((const double *)d)[i];
  default: return ((const int32_t *)d)[i];
  }
}

/* The runtime shared by a test file: 1 thread, sequential (deterministic). */
static inline graft_runtime *tu_runtime(void) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = 1;
  o.sched = "seq";
  graft_runtime *rt = NULL;
  assert_int_equal(graft_runtime_create(&o, &rt), GRAFT_OK);
  return rt;
}

/* Create a function from fn, call it once on in[] (outputs allocated by graft
 * into out[]), destroy it.  Returns the call's status; on failure copies the
 * message into msg (if not NULL, 512 bytes). */
static inline graft_status tu_run(graft_runtime *rt, graft_trace_fn fn, void *user,
                                  int n_in, graft_tensor *const *in, int n_out,
                                  graft_tensor **out, char *msg) {
  graft_function_desc d = {0};
  d.name = "test";
  d.trace = fn;
  d.user = user;
  d.n_inputs = n_in;
  d.n_outputs = n_out;
  graft_function *f = NULL;
  graft_status s = graft_function_create(rt, &d, &f);
  if (s != GRAFT_OK) return s;
  for (int i = 0; i < n_out; i++) out[i] = NULL;
  s = graft_function_call(f, n_in, in, n_out, out);
  if (msg) snprintf(msg, 512, "%s", graft_function_errmsg(f));
  graft_function_destroy(f);
  return s;
}

/* |a - b| <= atol + rtol * |b|, NaNs equal, infinities equal by sign. */
static inline int tu_close(double a, double b, double rtol, double atol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= atol + rtol * fabs(b);
}

/* Assert that t holds want[0..n) within tolerance; prints the first miss. */
#define tu_assert_close(t, want, n, rtol, atol)                                   \
  do {                                                                            \
    int64_t tu_n_ = (n);                                                          \
    assert_int_equal(graft_tensor_numel(t), tu_n_);                               \
    for (int64_t tu_i_ = 0; tu_i_ < tu_n_; tu_i_++) {                             \
      double tu_g_ = tu_get((t), tu_i_), tu_w_ = (want)[tu_i_];                   \
      if (!tu_close(tu_g_, tu_w_, (rtol), (atol))) {                              \
        fail_msg("element %lld: got %.17g want %.17g", (long long)tu_i_, tu_g_, tu_w_); \
      }                                                                           \
    }                                                                             \
  } while (0)

#endif /* GRAFT_TESTUTIL_H */
