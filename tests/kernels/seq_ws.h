/* The executors of the kernel edge-case tests (test_special_values,
 * test_broadcast_layouts): seq, and ws with two threads and a grain of 4,
 * which cuts ops into 16-element tiles that start and end inside rows.
 * sw_run calls a one-output function on each runtime, hands every output
 * to the caller's check, and requires the outputs to be bitwise equal.
 *
 * Header-only (static inline); include after <cmocka.h> and testutil.h,
 * and use sw_setup / sw_teardown as the group fixtures. */
#ifndef GRAFT_TEST_SEQ_WS_H
#define GRAFT_TEST_SEQ_WS_H

#include "testutil.h"

enum { SW_N = 2 };
static graft_runtime *sw_rt[SW_N];
static const char *const sw_name[SW_N] = {"seq", "ws x2 grain 4"};

static inline int sw_setup(void **state) {
  (void)state;
  sw_rt[0] = tu_runtime_of("seq", 1, 0);
  sw_rt[1] = tu_runtime_of("ws", 2, 4);
  return 0;
}

static inline int sw_teardown(void **state) {
  (void)state;
  for (int i = 0; i < SW_N; i++) graft_runtime_destroy(sw_rt[i]);
  return 0;
}

/* Checks one runtime's output; where names the case and the runtime. */
typedef void (*sw_check_fn)(const graft_tensor *out, const char *where, const void *user);

/* fn(fn_user) on in[0..n_in) on every runtime: the call must succeed, each
 * output passes check(check_user), and all are bitwise equal to seq's. */
static inline void sw_run(graft_trace_fn fn, void *fn_user, int n_in, graft_tensor *const *in,
                          const char *ctx, sw_check_fn check, const void *check_user) {
  graft_tensor *first = NULL;
  for (int r = 0; r < SW_N; r++) {
    graft_tensor *out = NULL;
    char msg[512] = "", where[512];
    snprintf(where, sizeof where, "%.400s (%s)", ctx, sw_name[r]);
    tu_assert_run_ok(tu_run(sw_rt[r], fn, fn_user, n_in, in, 1, &out, msg), where, msg);
    check(out, where, check_user);
    if (!first) {
      first = out;
      continue;
    }
    if (!tu_bitwise_equal(out, first)) fail_msg("%s: differs bitwise from %s", where, sw_name[0]);
    graft_tensor_destroy(out);
  }
  graft_tensor_destroy(first);
}

#endif /* GRAFT_TEST_SEQ_WS_H */
