/* Allocation failure: a countdown allocator fails exactly the N-th
 * allocation, for N = 1, 2, 3, ... until a whole run (runtime, variables,
 * tensors, function, two calls) no longer reaches N.  Every step that fails
 * must return GRAFT_ENOMEM with its outputs NULL and change nothing, and
 * every run must give every block back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

/* ---- the countdown allocator ----------------------------------------- */

typedef struct countdown {
  atomic_flag lock;
  long count;    /* allocations requested so far */
  long fail_at;  /* fail exactly this one (1-based); 0 = never */
  int hit;       /* the failure point was reached */
  void **live;   /* blocks handed out and not yet freed */
  long n_live, cap_live;
  long bad_frees; /* frees of blocks this allocator did not hand out */
  long bad_align;
} countdown;

static countdown g_cd = {ATOMIC_FLAG_INIT, 0, 0, 0, NULL, 0, 0, 0, 0};

static void cd_lock(countdown *c) {
  while (atomic_flag_test_and_set_explicit(&c->lock, memory_order_acquire)) {
  }
}
static void cd_unlock(countdown *c) { atomic_flag_clear_explicit(&c->lock, memory_order_release); }

static void *cd_alloc(void *ctx, size_t size, size_t align) {
  countdown *c = ctx;
  cd_lock(c);
  long k = ++c->count;
  if (c->fail_at > 0 && k == c->fail_at) {
    c->hit = 1;
    cd_unlock(c);
    return NULL;
  }
  if (align < sizeof(void *) || (align & (align - 1)) != 0 || size == 0) c->bad_align++;
  if (align < sizeof(void *)) align = sizeof(void *);
  size_t rounded = (size + align - 1) & ~(align - 1);
  void *p = aligned_alloc(align, rounded);
  if (p && c->n_live == c->cap_live) {
    long ncap = c->cap_live ? 2 * c->cap_live : 256;
    void **n = realloc(c->live, (size_t)ncap * sizeof *n);
    if (!n) {
      free(p);
      p = NULL;
    } else {
      c->live = n;
      c->cap_live = ncap;
    }
  }
  if (p) c->live[c->n_live++] = p;
  cd_unlock(c);
  return p;
}

static void cd_free(void *ctx, void *p) {
  countdown *c = ctx;
  cd_lock(c);
  long i = c->n_live - 1;
  while (i >= 0 && c->live[i] != p) i--;
  if (i < 0) {
    c->bad_frees++;
    cd_unlock(c);
    return; /* not ours: do not pass it to free() */
  }
  c->live[i] = c->live[--c->n_live];
  cd_unlock(c);
  free(p);
}

static void cd_arm(long fail_at) {
  cd_lock(&g_cd);
  g_cd.count = 0;
  g_cd.fail_at = fail_at;
  g_cd.hit = 0;
  cd_unlock(&g_cd);
}

static void cd_install(void) {
  graft_allocator a = {cd_alloc, cd_free, &g_cd};
  graft_set_allocator(&a);
}

/* ---- the workload: a 2-layer MLP step with a variable update ---------- */

#define NB 4 /* batch */
#define NI 3 /* inputs */
#define NH 5 /* hidden */
#define NO 2 /* outputs */

static const double W1[NI * NH] = {0.2, -0.1, 0.4, 0.0, -0.3, 0.5, 0.1, -0.2, 0.3, 0.2,
                                   -0.4, 0.3, 0.1, -0.1, 0.25};
static const double B1[NH] = {0.05, -0.05, 0.1, 0.0, 0.2};
static const double W2[NH * NO] = {0.3, -0.2, 0.1, 0.4, -0.5, 0.2, 0.25, -0.1, 0.15, 0.35};
static const double B2[NO] = {0.01, -0.02};
static const double X[NB * NI] = {1.0, -0.5, 0.25, 0.5, 0.75, -1.0, -0.25, 0.5, 1.5, 2.0, -1.5, 0.0};
static const double T[NB * NO] = {0.5, -0.5, 1.0, 0.0, -0.25, 0.75, 0.1, 0.2};
static const double LR = 0.1;

typedef struct mlp_vars {
  graft_variable *w1, *b1, *w2, *b2;
} mlp_vars;

/* in: x [NB,NI], target [NB,NO].  out: y [NB,NO], loss [].  b2 -= LR * sum_rows(y - target). */
static graft_status mlp_step_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  mlp_vars *v = user;
  graft_value *h = graft_relu(t, graft_add(t, graft_matmul(t, in[0], graft_read(t, v->w1), 0),
                                           graft_read(t, v->b1)));
  graft_value *y = graft_add(t, graft_matmul(t, h, graft_read(t, v->w2), 0), graft_read(t, v->b2));
  graft_value *diff = graft_sub(t, y, in[1]);
  graft_value *loss = graft_reduce_mean(t, graft_square(t, diff), 0, NULL, 0);
  const int ax0[] = {0};
  graft_value *delta = graft_mul(t, graft_reduce_sum(t, diff, 1, ax0, 0), graft_scalar(t, GRAFT_F64, LR));
  (void)graft_assign_sub(t, v->b2, delta);
  out[0] = y;
  out[1] = loss;
  return GRAFT_OK;
}

/* Reference of one step; updates b2 in place. */
static void mlp_reference(double *b2, double *y, double *loss) {
  double acc = 0, colsum[NO] = {0};
  for (int i = 0; i < NB; i++) {
    double h[NH];
    for (int j = 0; j < NH; j++) {
      double s = B1[j];
      for (int k = 0; k < NI; k++) s += X[i * NI + k] * W1[k * NH + j];
      h[j] = s > 0 ? s : 0;
    }
    for (int j = 0; j < NO; j++) {
      double s = b2[j];
      for (int k = 0; k < NH; k++) s += h[k] * W2[k * NO + j];
      y[i * NO + j] = s;
      double d = s - T[i * NO + j];
      acc += d * d;
      colsum[j] += d;
    }
  }
  *loss = acc / (NB * NO);
  for (int j = 0; j < NO; j++) b2[j] -= LR * colsum[j];
}

#define assert_enomem(s, what)                                                    \
  do {                                                                            \
    graft_status ae_s_ = (s);                                                     \
    if (ae_s_ != GRAFT_ENOMEM)                                                    \
      fail_msg("N=%ld: %s failed with %s, want GRAFT_ENOMEM", n, (what),          \
               graft_status_name(ae_s_));                                         \
  } while (0)

static char g_sentinel;
#define SENTINEL ((void *)&g_sentinel)

/* One call of f; on ENOMEM, checks that nothing changed and retries (the
 * failure point has passed, so the retry must succeed).  Then checks the
 * results against the reference and advances it.  Returns 1 if the first
 * attempt failed. */
static int call_and_check(long n, graft_function *f, graft_tensor **in, mlp_vars *v, double *b2_ref) {
  graft_tensor *out[2] = {NULL, NULL};
  /* b2 before the call (a plain array: a tensor would draw on the failing
   * allocator), which a failed call must leave bit for bit. */
  double b2_before[NO];
  memcpy(b2_before, graft_tensor_data(graft_variable_value(v->b2)), sizeof b2_before);
  graft_status s = graft_function_call(f, 2, in, 2, out);
  int failed = s != GRAFT_OK;
  if (failed) {
    assert_enomem(s, "graft_function_call");
    assert_true(g_cd.hit);
    assert_null(out[0]);
    assert_null(out[1]);
    tu_assert_close(graft_variable_value(v->b2), b2_before, NO, 0, 0);
    s = graft_function_call(f, 2, in, 2, out);
    if (s != GRAFT_OK)
      fail_msg("N=%ld: retry after ENOMEM failed: %s: %s", n, graft_status_name(s),
               graft_function_errmsg(f));
  }
  double y[NB * NO], loss;
  mlp_reference(b2_ref, y, &loss);
  tu_assert_close(out[0], y, NB * NO, 1e-12, 1e-12);
  tu_assert_close(out[1], &loss, 1, 1e-12, 1e-12);
  tu_assert_close(graft_variable_value(v->b2), b2_ref, NO, 1e-12, 1e-12);
  graft_tensor_destroy(out[0]);
  graft_tensor_destroy(out[1]);
  return failed;
}

/* Runs the whole workload with the N-th allocation failing (n = 0: none).
 * Returns 1 if it ran to the end. */
static int run_workload(long n) {
  graft_runtime *rt = SENTINEL;
  mlp_vars v = {NULL, NULL, NULL, NULL};
  graft_tensor *in[2] = {NULL, NULL};
  graft_function *f = NULL;
  int completed = 0;
  graft_status s;

  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = 1;
  o.sched = "seq";
  s = graft_runtime_create(&o, &rt);
  if (s != GRAFT_OK) {
    assert_enomem(s, "graft_runtime_create");
    assert_null(rt);
    return 0;
  }

  struct {
    graft_variable **slot;
    const char *name;
    int rank;
    int64_t dims[2];
    const double *init;
  } vs[] = {{&v.w1, "w1", 2, {NI, NH}, W1},
            {&v.b1, "b1", 1, {NH, 0}, B1},
            {&v.w2, "w2", 2, {NH, NO}, W2},
            {&v.b2, "b2", 1, {NO, 0}, B2}};
  for (size_t i = 0; i < TU_N_OF(vs); i++) {
    graft_variable *var = SENTINEL;
    s = graft_variable_create(NULL, vs[i].name, GRAFT_F64, vs[i].rank, vs[i].dims, vs[i].init,
                              GRAFT_VAR_TRAINABLE, &var);
    if (s != GRAFT_OK) {
      assert_enomem(s, "graft_variable_create");
      assert_null(var);
      goto done;
    }
    *vs[i].slot = var;
  }

  const int64_t sx[] = {NB, NI}, st[] = {NB, NO};
  const double *src[] = {X, T};
  const int64_t *shp[] = {sx, st};
  for (int i = 0; i < 2; i++) {
    graft_tensor *tt = SENTINEL;
    s = graft_tensor_create(GRAFT_F64, 2, shp[i], &tt);
    if (s != GRAFT_OK) {
      assert_enomem(s, "graft_tensor_create");
      assert_null(tt);
      goto done;
    }
    in[i] = tt;
    memcpy(graft_tensor_data(tt), src[i], (size_t)graft_tensor_numel(tt) * sizeof(double));
  }

  graft_function_desc d = {0};
  d.name = "mlp_step";
  d.trace = mlp_step_cb;
  d.user = &v;
  d.n_inputs = 2;
  d.n_outputs = 2;
  graft_function *ff = SENTINEL;
  s = graft_function_create(rt, &d, &ff);
  if (s != GRAFT_OK) {
    assert_enomem(s, "graft_function_create");
    assert_null(ff);
    goto done;
  }
  f = ff;

  double b2_ref[NO];
  memcpy(b2_ref, B2, sizeof b2_ref);
  /* The first call traces and compiles; if it runs out of memory before the
   * trace is cached, the retry may trace again.  The second call hits the
   * cache: running out of memory there must not lose the cached trace. */
  int first_failed = call_and_check(n, f, in, &v, b2_ref);
  int traces_after_first = graft_function_trace_count(f);
  if (traces_after_first != 1 && !(first_failed && traces_after_first == 2))
    fail_msg("N=%ld: %d traces after the first call (first attempt %s)", n, traces_after_first,
             first_failed ? "failed" : "succeeded");
  int second_failed = call_and_check(n, f, in, &v, b2_ref);
  if (graft_function_trace_count(f) != traces_after_first)
    fail_msg("N=%ld: the cached second call traced again (%d -> %d traces; its first attempt %s)", n,
             traces_after_first, graft_function_trace_count(f), second_failed ? "failed" : "succeeded");
  completed = 1;

done:
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
  graft_variable_destroy(v.w1);
  graft_variable_destroy(v.b1);
  graft_variable_destroy(v.w2);
  graft_variable_destroy(v.b2);
  graft_runtime_destroy(rt);
  return completed;
}

static void assert_no_leak(long n) {
  if (g_cd.n_live != 0) fail_msg("N=%ld: %ld blocks still live after destroying everything", n, g_cd.n_live);
  if (g_cd.bad_frees != 0) fail_msg("N=%ld: %ld frees of blocks not from the hook", n, g_cd.bad_frees);
  if (g_cd.bad_align != 0) fail_msg("N=%ld: %ld requests with a bad size/alignment", n, g_cd.bad_align);
}

static void test_graft_set_allocator__hook_sees_every_block(void **state) {
  (void)state;
  cd_install();
  cd_arm(0);
  assert_true(run_workload(0));
  assert_true(g_cd.count > 10);
  assert_no_leak(0);
  /* A tensor made by the caller also goes through the hook. */
  long before = g_cd.count;
  const int64_t s[] = {16};
  graft_tensor *t = NULL;
  assert_int_equal(graft_tensor_create(GRAFT_F32, 1, s, &t), GRAFT_OK);
  assert_true(g_cd.count > before);
  assert_true(g_cd.n_live > 0);
  assert_true(((uintptr_t)graft_tensor_data(t) % 64) == 0);
  graft_tensor_destroy(t);
  assert_no_leak(0);
  graft_set_allocator(NULL);
}

static void test_graft_set_allocator__fail_each_allocation_once(void **state) {
  (void)state;
  cd_install();
  long n = 1;
  for (;; n++) {
    if (n > 200000) fail_msg("still failing at N=%ld: the workload never completes", n);
    cd_arm(n);
    int completed = run_workload(n);
    assert_no_leak(n);
    if (!g_cd.hit) {
      assert_true(completed);
      break;
    }
  }
  /* The run that did not reach N made fewer than N allocations. */
  assert_true(g_cd.count < n);
  assert_true(n > 10);
  print_message("exercised %ld allocation failure points\n", n - 1);
  /* A working allocator: the whole thing still works. */
  cd_arm(0);
  assert_true(run_workload(0));
  assert_no_leak(0);
  graft_set_allocator(NULL);
  /* And with the default allocator. */
  assert_true(run_workload(0));
}

/* The first allocation of each public constructor failing: the simplest
 * cases, checked one by one with their outputs. */
static void test_graft_tensor_create__first_allocation_fails(void **state) {
  (void)state;
  cd_install();
  const int64_t s[] = {3, 3};
  cd_arm(1);
  graft_tensor *t = SENTINEL;
  assert_int_equal(graft_tensor_create(GRAFT_F64, 2, s, &t), GRAFT_ENOMEM);
  assert_null(t);
  assert_true(g_cd.hit);
  double buf[9];
  cd_arm(1);
  t = SENTINEL;
  assert_int_equal(graft_tensor_wrap(GRAFT_F64, 2, s, buf, &t), GRAFT_ENOMEM);
  assert_null(t);
  cd_arm(1);
  graft_variable *v = SENTINEL;
  assert_int_equal(graft_variable_create(NULL, "v", GRAFT_F64, 2, s, NULL, 0, &v), GRAFT_ENOMEM);
  assert_null(v);
  cd_arm(1);
  graft_runtime *rt = SENTINEL;
  assert_int_equal(graft_runtime_create(NULL, &rt), GRAFT_ENOMEM);
  assert_null(rt);
  assert_no_leak(1);
  graft_set_allocator(NULL);
}

static int group_teardown(void **state) {
  (void)state;
  graft_set_allocator(NULL);
  free(g_cd.live);
  g_cd.live = NULL;
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_set_allocator__hook_sees_every_block),
      cmocka_unit_test(test_graft_tensor_create__first_allocation_fails),
      cmocka_unit_test(test_graft_set_allocator__fail_each_allocation_once),
  };
  return cmocka_run_group_tests_name("common/alloc_fail", tests, NULL, group_teardown);
}
