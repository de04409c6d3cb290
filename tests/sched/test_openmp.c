/* graft called from inside the caller's own OpenMP parallel region, and the
 * one-call-at-a-time contract of a function handle. */
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "watchdog.h"

enum { N = 64, THREADS = 4, CALLS = 25 };

/* y = sum(x * x) + x[0] */
static graft_status sumsq(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                          graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_reduce_sum(t, graft_square(t, in[0]), 0, NULL, 0);
  return GRAFT_OK;
}

static void test_graft_function_call__inside_omp_parallel(void **state) {
  (void)state;
  graft_runtime *rt = NULL;
  assert_int_equal(graft_runtime_create(NULL, &rt), GRAFT_OK);
  double x[THREADS][N], got[THREADS][CALLS];
  int status[THREADS][CALLS], traces[THREADS], nested[THREADS];
  for (int k = 0; k < THREADS; k++)
    for (int i = 0; i < N; i++) x[k][i] = 0.01 * (k + 1) * (i + 1);

#pragma omp parallel num_threads(THREADS)
  {
    int k = omp_get_thread_num();
    nested[k] = omp_in_parallel();
    graft_function_desc d = {.name = "sumsq", .trace = sumsq, .n_inputs = 1, .n_outputs = 1};
    graft_function *f = NULL;
    const int64_t shape[] = {N};
    graft_tensor *in = NULL;
    graft_status s = graft_function_create(rt, &d, &f);
    if (s == GRAFT_OK) s = graft_tensor_wrap(GRAFT_F64, 1, shape, x[k], &in);
    for (int c = 0; c < CALLS; c++) {
      graft_tensor *y = NULL;
      status[k][c] = s == GRAFT_OK ? graft_function_call(f, 1, &in, 1, &y) : s;
      got[k][c] = status[k][c] == GRAFT_OK ? *(double *)graft_tensor_data(y) : -1;
      graft_tensor_destroy(y);
    }
    traces[k] = graft_function_trace_count(f);
    graft_tensor_destroy(in);
    graft_function_destroy(f);
  }

  /* Assert only here, on the test's own thread. */
  for (int k = 0; k < THREADS; k++) {
    double want = 0;
    for (int i = 0; i < N; i++) want += x[k][i] * x[k][i];
    assert_true(nested[k] || omp_get_max_threads() == 1);
    assert_int_equal(traces[k], 1);
    for (int c = 0; c < CALLS; c++) {
      assert_int_equal(status[k][c], GRAFT_OK);
      assert_true(tu_close(got[k][c], want, 1e-12, 0));
    }
  }
  graft_runtime_destroy(rt);
}

/* The trace callback calls its own function again: the handle is busy. */
static graft_function *reentrant_f;
static graft_status reentrant_status;

static graft_status reenter(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_tensor **args = user;
  graft_tensor *y = NULL;
  reentrant_status = graft_function_call(reentrant_f, 1, args, 1, &y);
  graft_tensor_destroy(y);
  out[0] = graft_neg(t, in[0]);
  return GRAFT_OK;
}

static void test_graft_function_call__concurrent_call_on_one_handle(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  double v = 2.5;
  graft_tensor *in = NULL;
  assert_int_equal(graft_tensor_wrap(GRAFT_F64, 0, NULL, &v, &in), GRAFT_OK);
  graft_function_desc d = {.name = "reenter", .trace = reenter, .user = &in,
                           .n_inputs = 1, .n_outputs = 1};
  assert_int_equal(graft_function_create(rt, &d, &reentrant_f), GRAFT_OK);
  graft_tensor *y = NULL;
  assert_int_equal(graft_function_call(reentrant_f, 1, &in, 1, &y), GRAFT_OK);
  assert_int_equal(reentrant_status, GRAFT_EMISUSE);
  assert_true(*(double *)graft_tensor_data(y) == -2.5);
  graft_tensor_destroy(y);
  graft_function_destroy(reentrant_f);
  graft_tensor_destroy(in);
  graft_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_WATCHED_TEST(test_graft_function_call__inside_omp_parallel),
      TU_WATCHED_TEST(test_graft_function_call__concurrent_call_on_one_handle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
