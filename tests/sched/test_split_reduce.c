/* Reductions with few outputs over many elements are split into blocks
 * whose partials combine in block order: the result must match a double
 * oracle and be bitwise the same for seq, omp and ws at any thread count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sched/sched.h"
#include "testutil.h"
#include "watchdog.h"

TU_SUPPRESS_GOMP_TASK_LEAK();

typedef graft_value *(*reduce_fn)(graft_trace *, graft_value *, int, const int *, int);

typedef struct rcase {
  const char *name;
  reduce_fn fn;
  int n_axes;
  int axes[2];
} rcase;

static const rcase cases[] = {
    {"reduce_sum all", graft_reduce_sum, 0, {0}},
    {"reduce_mean all", graft_reduce_mean, 0, {0}},
    {"reduce_max all", graft_reduce_max, 0, {0}},
    {"reduce_prod all", graft_reduce_prod, 0, {0}},
    {"logsumexp all", graft_logsumexp, 0, {0}},
    {"reduce_sum axis 0", graft_reduce_sum, 1, {0}},
    {"logsumexp axes 0,2", graft_logsumexp, 2, {0, 2}},
};

static graft_status trace_reduce(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const rcase *c = user;
  out[0] = c->fn(t, in[0], c->n_axes, c->axes, 0);
  return GRAFT_OK;
}

/* Oracle in long double over the same shape [A, B, C]. */
static void oracle(const rcase *c, const double *x, const int64_t *s, double *want, int64_t *n_out) {
  unsigned mask = 0;
  if (c->n_axes == 0) mask = 7;
  for (int i = 0; i < c->n_axes; i++) mask |= 1u << c->axes[i];
  int64_t od[3];
  for (int d = 0; d < 3; d++) od[d] = (mask >> d) & 1 ? 1 : s[d];
  *n_out = od[0] * od[1] * od[2];
  for (int64_t o = 0; o < *n_out; o++) {
    int64_t oi[3] = {o / (od[1] * od[2]), (o / od[2]) % od[1], o % od[2]};
    long double acc = c->fn == graft_reduce_prod ? 1 : 0, m = -INFINITY;
    int64_t cnt = 0;
    for (int64_t i = 0; i < s[0]; i++)
      for (int64_t j = 0; j < s[1]; j++)
        for (int64_t k = 0; k < s[2]; k++) {
          int64_t ii[3] = {i, j, k};
          int hit = 1;
          for (int d = 0; d < 3; d++) hit &= ((mask >> d) & 1) || ii[d] == oi[d];
          if (!hit) continue;
          long double v = x[(i * s[1] + j) * s[2] + k];
          cnt++;
          if (c->fn == graft_reduce_prod) acc *= v;
          else if (c->fn == graft_reduce_max || c->fn == graft_logsumexp) m = v > m ? v : m;
          else acc += v;
        }
    if (c->fn == graft_logsumexp) {
      for (int64_t i = 0; i < s[0]; i++)
        for (int64_t j = 0; j < s[1]; j++)
          for (int64_t k = 0; k < s[2]; k++) {
            int64_t ii[3] = {i, j, k};
            int hit = 1;
            for (int d = 0; d < 3; d++) hit &= ((mask >> d) & 1) || ii[d] == oi[d];
            if (hit) acc += expl(x[(i * s[1] + j) * s[2] + k] - m);
          }
      acc = m + logl(acc);
    } else if (c->fn == graft_reduce_max) {
      acc = m;
    } else if (c->fn == graft_reduce_mean) {
      acc /= cnt;
    }
    want[o] = (double)acc;
  }
}

static graft_runtime *runtime(const char *sched, int threads) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.sched = sched;
  o.num_threads = threads;
  o.grain = 4096;
  graft_runtime *rt = NULL;
  assert_int_equal(graft_runtime_create(&o, &rt), GRAFT_OK);
  return rt;
}

static void test_split_reduction__bitwise_across_schedules(void **state) {
  (void)state;
  static const struct { const char *sched; int threads; } runs[] = {
      {"seq", 1}, {"ws", 1}, {"ws", 2}, {"ws", 3}, {"ws", 8}, {"omp", 2}, {"omp", 4}};
  const int64_t shape[3] = {40, 30, 50}; /* 60000 elements, grain 4096 */
  tu_rng rng = {0x5eed};
  for (int dt = 0; dt < 2; dt++) {
    graft_dtype dtype = dt ? GRAFT_F64 : GRAFT_F32;
    graft_tensor *x = tu_tensor_rand(&rng, dtype, 3, shape, 0.99, 1.01);
    double *xd = malloc(60000 * sizeof *xd);
    for (int64_t i = 0; i < 60000; i++) xd[i] = tu_get(x, i);
    for (size_t c = 0; c < GRAFT__COUNT(cases); c++) {
      double want[2000];
      int64_t n_out;
      oracle(&cases[c], xd, shape, want, &n_out);
      graft_tensor *ref = NULL;
      for (size_t r = 0; r < GRAFT__COUNT(runs); r++) {
        graft_runtime *rt = runtime(runs[r].sched, runs[r].threads);
        graft_function_desc d = {.name = "reduce", .trace = trace_reduce,
                                 .user = (void *)&cases[c], .n_inputs = 1, .n_outputs = 1};
        graft_function *f = NULL;
        assert_int_equal(graft_function_create(rt, &d, &f), GRAFT_OK);
        graft_tensor *y = NULL;
        tu_watchdog_step("%s %s, %s x%d", cases[c].name, graft_dtype_name(dtype), runs[r].sched,
                         runs[r].threads);
        graft_status s = graft_function_call(f, 1, &x, 1, &y);
        if (s != GRAFT_OK) fail_msg("%s: %s", cases[c].name, graft_function_errmsg(f));
        if (cases[c].n_axes == 0) {
          /* A full reduction over 60000 elements must have been split. */
          const graft__plan *p = graft__function_plan(f);
          int64_t split = 0;
          for (uint32_t i = 0; i < p->n_order; i++) split += p->tiling[i].split_r > 0;
          assert_int_equal(split, 1);
        }
        double rtol = dt ? 1e-12 : 1e-5;
        if (cases[c].fn == graft_reduce_prod) rtol = dt ? 1e-10 : 1e-4;
        tu_assert_close(y, want, n_out, rtol, 0);
        if (!ref) {
          ref = y;
        } else {
          size_t bytes = (size_t)n_out * graft_dtype_size(dtype);
          if (memcmp(graft_tensor_data(ref), graft_tensor_data(y), bytes))
            fail_msg("%s %s: %s x%d differs bitwise from seq", cases[c].name,
                     graft_dtype_name(dtype), runs[r].sched, runs[r].threads);
          graft_tensor_destroy(y);
        }
        graft_function_destroy(f);
        graft_runtime_destroy(rt);
      }
      graft_tensor_destroy(ref);
    }
    free(xd);
    graft_tensor_destroy(x);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_WATCHED_TEST(test_split_reduction__bitwise_across_schedules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
