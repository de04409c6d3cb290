/* Back-to-back calls: many small calls in a row while the runtime is
 * recreated every EPOCH calls with another scheduler (ws, omp), thread count
 * (1..8) and grain.  Every result must be bitwise equal to the sequential
 * reference computed up front, a counter variable must count every call, and
 * nothing may hang (the meson timeout) or leak (the ASan run).
 *
 * A second case calls distinct functions from several threads at once on
 * one runtime (a tenth as many calls per thread).
 *
 * GRAFT_TEST_CALLS sets the number of calls (default 2000; the stress suite
 * runs 10000). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "watchdog.h"

enum { EPOCH = 100, N_INPUTS = 4, N_GRAPHS = 4, MAX_OUT = 3, DEFAULT_CALLS = 2000 };

TU_SUPPRESS_GOMP_TASK_LEAK();

typedef struct model {
  graft_variable *w, *b, *count;
} model;

/* A small layer, its loss, and a call counter. */
static graft_status mlp(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                        graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  model *m = user;
  graft_value *h = graft_matmul(t, in[0], graft_read(t, m->w), 0);
  graft_value *y = graft_tanh(t, graft_add(t, h, graft_read(t, m->b)));
  out[0] = y;
  out[1] = graft_reduce_mean(t, graft_square(t, y), 0, NULL, 0);
  graft_assign_add(t, m->count, graft_scalar(t, GRAFT_F64, 1.0));
  return GRAFT_OK;
}

/* Four independent branches joined by a concat and a softmax. */
static graft_status branches(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *x = in[0], *br[4];
  br[0] = graft_sin(t, x);
  br[1] = graft_sigmoid(t, graft_mul(t, x, x));
  br[2] = graft_exp(t, graft_neg(t, graft_abs(t, x)));
  br[3] = graft_cos(t, graft_add(t, x, graft_scalar(t, GRAFT_F64, 0.5)));
  graft_value *c = graft_concat(t, 4, br, 1);
  out[0] = graft_softmax(t, c, -1);
  int axis = 0;
  out[1] = graft_reduce_sum(t, c, 1, &axis, 1);
  out[2] = graft_logsumexp(t, br[1], 0, NULL, 0);
  return GRAFT_OK;
}

/* One node. */
static graft_status tiny(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                         graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_reduce_max(t, in[0], 0, NULL, 0);
  return GRAFT_OK;
}

/* No compute node at all: the output is the input. */
static graft_status identity(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)t, (void)n_in, (void)n_out, (void)user;
  out[0] = in[0];
  return GRAFT_OK;
}

static const struct {
  const char *name;
  graft_trace_fn fn;
  int n_out;
} graphs[N_GRAPHS] = {
    {"mlp", mlp, 2}, {"branches", branches, 3}, {"tiny", tiny, 1}, {"identity", identity, 1}};

typedef struct fixture {
  model m;
  graft_tensor *x[N_INPUTS];
  /* Per grain (GRAINS[j]): tiling, split reductions included, depends on
   * the grain, so each grain has its own sequential reference. */
  graft_tensor *ref[2][N_GRAPHS][N_INPUTS][MAX_OUT];
} fixture;

static const int64_t GRAINS[2] = {64, 0 /* the default */};

static void make_functions(graft_runtime *rt, fixture *fx, graft_function **f) {
  for (int g = 0; g < N_GRAPHS; g++) {
    graft_function_desc d = {.name = graphs[g].name, .trace = graphs[g].fn, .user = &fx->m,
                             .n_inputs = 1, .n_outputs = graphs[g].n_out};
    assert_int_equal(graft_function_create(rt, &d, &f[g]), GRAFT_OK);
  }
}

static double counter(const fixture *fx) {
  return *(const double *)graft_tensor_data(graft_variable_value(fx->m.count));
}

static void fixture_make(fixture *fx) {
  tu_rng r = {0x5157e55ull};
  memset(fx, 0, sizeof *fx);
  const int64_t ws[] = {48, 40}, bs[] = {40};
  graft_tensor *w = tu_tensor_rand(&r, GRAFT_F64, 2, ws, -0.3, 0.3);
  graft_tensor *b = tu_tensor_rand(&r, GRAFT_F64, 1, bs, -0.3, 0.3);
  assert_int_equal(graft_variable_create(NULL, "w", GRAFT_F64, 2, ws, graft_tensor_data(w), 0,
                                         &fx->m.w), GRAFT_OK);
  assert_int_equal(graft_variable_create(NULL, "b", GRAFT_F64, 1, bs, graft_tensor_data(b), 0,
                                         &fx->m.b), GRAFT_OK);
  assert_int_equal(graft_variable_create(NULL, "count", GRAFT_F64, 0, NULL, NULL, 0, &fx->m.count),
                   GRAFT_OK);
  graft_tensor_destroy(w);
  graft_tensor_destroy(b);
  /* Inputs of a few batch sizes, so several plans live in each function. */
  for (int i = 0; i < N_INPUTS; i++) {
    const int64_t xs[] = {7 + 30 * i, 48};
    fx->x[i] = tu_tensor_rand(&r, GRAFT_F64, 2, xs, -2, 2);
  }
  /* The references, from the sequential executor. */
  for (int j = 0; j < 2; j++) {
    graft_runtime *rt = tu_runtime_of("seq", 1, GRAINS[j]);
    graft_function *f[N_GRAPHS];
    make_functions(rt, fx, f);
    for (int g = 0; g < N_GRAPHS; g++) {
      for (int i = 0; i < N_INPUTS; i++)
        assert_int_equal(
            graft_function_call(f[g], 1, &fx->x[i], graphs[g].n_out, fx->ref[j][g][i]), GRAFT_OK);
      graft_function_destroy(f[g]);
    }
    graft_runtime_destroy(rt);
  }
}

static void fixture_free(fixture *fx) {
  for (int j = 0; j < 2; j++)
    for (int g = 0; g < N_GRAPHS; g++)
      for (int i = 0; i < N_INPUTS; i++)
        for (int k = 0; k < MAX_OUT; k++) graft_tensor_destroy(fx->ref[j][g][i][k]);
  for (int i = 0; i < N_INPUTS; i++) graft_tensor_destroy(fx->x[i]);
  graft_variable_destroy(fx->m.w);
  graft_variable_destroy(fx->m.b);
  graft_variable_destroy(fx->m.count);
}

static void test_graft_function_call__back_to_back_with_changing_runtimes(void **state) {
  (void)state;
  const char *e = getenv("GRAFT_TEST_CALLS");
  long long calls = e && atoll(e) > 0 ? atoll(e) : DEFAULT_CALLS;
  fixture fx;
  fixture_make(&fx);
  tu_rng r = {0xca11ca11ull};
  double mlp_calls = counter(&fx);
  long long done = 0, epochs = 0;

  int last_threads = 0;
  while (done < calls) {
    /* A new runtime: scheduler, thread count (another than the last one's)
     * and grain drawn at random. */
    int omp = tu_int(&r, 0, 2) == 0, threads;
    do threads = (int)tu_int(&r, 1, 8);
    while (threads == last_threads);
    last_threads = threads;
    int j = (int)tu_int(&r, 0, 1);
    int64_t grain = GRAINS[j];
    const char *sched = omp ? "omp" : "ws";
    graft_runtime *rt = tu_runtime_of(sched, threads, grain);
    graft_function *f[N_GRAPHS];
    make_functions(rt, &fx, f);
    for (int c = 0; c < EPOCH && done < calls; c++, done++) {
      int g = (int)(done % N_GRAPHS), i = (int)((done / N_GRAPHS) % N_INPUTS), n = graphs[g].n_out;
      graft_tensor *out[MAX_OUT] = {NULL};
      /* Every other call writes into the caller's tensors. */
      if ((done / N_GRAPHS) % 2)
        for (int k = 0; k < n; k++) {
          const graft_tensor *ref = fx.ref[j][g][i][k];
          assert_int_equal(graft_tensor_create(graft_tensor_dtype(ref), graft_tensor_rank(ref),
                                               graft_tensor_shape(ref), &out[k]),
                           GRAFT_OK);
        }
      tu_watchdog_step("call %lld (%s input %d, %s x%d, grain %lld)", done, graphs[g].name, i, sched,
                       threads, (long long)grain);
      graft_status st = graft_function_call(f[g], 1, &fx.x[i], n, out);
      if (st != GRAFT_OK)
        fail_msg("call %lld (%s, %s x%d, grain %lld): %s: %s", done, graphs[g].name, sched, threads,
                 (long long)grain, graft_status_name(st), graft_function_errmsg(f[g]));
      for (int k = 0; k < n; k++) {
        if (!tu_bitwise_equal(out[k], fx.ref[j][g][i][k]))
          fail_msg("call %lld (%s input %d, %s x%d, grain %lld): output %d differs from seq", done,
                   graphs[g].name, i, sched, threads, (long long)grain, k);
        graft_tensor_destroy(out[k]);
      }
      if (g == 0) mlp_calls += 1;
    }
    for (int g = 0; g < N_GRAPHS; g++) graft_function_destroy(f[g]);
    graft_runtime_destroy(rt);
    epochs++;
    /* The counter saw every call exactly once (exact in f64). */
    assert_true(counter(&fx) == mlp_calls);
  }
  print_message("%lld calls over %lld runtimes\n", done, epochs);
  fixture_free(&fx);
}

/* ---- distinct functions called at once on one runtime ------------------- */

enum { CALLERS = 3 };

typedef struct caller {
  graft_function *f;
  const char *sched;         /* the runtime's (for the watchdog) */
  int threads;
  int g;                     /* graph (one without variables) */
  const fixture *fx;
  int j;                     /* grain index of the runtime */
  long long calls;
  long long bad_call;        /* first failing or differing call, or -1 */
  graft_status st;
  int bad_out;
} caller;

/* Runs on a plain thread: records, never asserts. */
static void *caller_main(void *arg) {
  caller *c = arg;
  c->bad_call = -1;
  for (long long k = 0; k < c->calls && c->bad_call < 0; k++) {
    int i = (int)(k % N_INPUTS), n = graphs[c->g].n_out;
    graft_tensor *out[MAX_OUT] = {NULL};
    tu_watchdog_step("%s x%d: a caller's call %lld (%s)", c->sched, c->threads, k, graphs[c->g].name);
    c->st = graft_function_call(c->f, 1, &c->fx->x[i], n, out);
    for (int o = 0; o < n; o++) {
      if (c->bad_call < 0 && (c->st || !tu_bitwise_equal(out[o], c->fx->ref[c->j][c->g][i][o]))) {
        c->bad_call = k;
        c->bad_out = o;
      }
      graft_tensor_destroy(out[o]);
    }
  }
  return NULL;
}

/* The runtime contract: distinct functions may run at once on one runtime
 * (each call opens its own worker team). */
static void test_graft_function_call__concurrent_functions_on_one_runtime(void **state) {
  (void)state;
  const char *e = getenv("GRAFT_TEST_CALLS");
  long long calls = (e && atoll(e) > 0 ? atoll(e) : DEFAULT_CALLS) / 10;
  fixture fx;
  fixture_make(&fx);
  static const struct {
    const char *sched;
    int threads, j;
  } cfgs[] = {{"ws", 4, 0}, {"ws", 2, 1}, {"omp", 3, 0}};
  for (size_t r = 0; r < sizeof cfgs / sizeof cfgs[0]; r++) {
    graft_runtime *rt = tu_runtime_of(cfgs[r].sched, cfgs[r].threads, GRAINS[cfgs[r].j]);
    caller c[CALLERS];
    pthread_t th[CALLERS];
    for (int k = 0; k < CALLERS; k++) {
      int g = 1 + k % (N_GRAPHS - 1); /* branches, tiny, identity: no variables */
      graft_function_desc d = {.name = graphs[g].name, .trace = graphs[g].fn, .n_inputs = 1,
                               .n_outputs = graphs[g].n_out};
      c[k] = (caller){NULL, cfgs[r].sched, cfgs[r].threads, g, &fx, cfgs[r].j, calls < 20 ? 20 : calls,
                      -1, GRAFT_OK, 0};
      assert_int_equal(graft_function_create(rt, &d, &c[k].f), GRAFT_OK);
    }
    for (int k = 0; k < CALLERS; k++)
      assert_int_equal(pthread_create(&th[k], NULL, caller_main, &c[k]), 0);
    for (int k = 0; k < CALLERS; k++) assert_int_equal(pthread_join(th[k], NULL), 0);
    for (int k = 0; k < CALLERS; k++) {
      if (c[k].bad_call >= 0)
        fail_msg("%s x%d, thread %d (%s): call %lld: %s, output %d %s", cfgs[r].sched,
                 cfgs[r].threads, k, graphs[c[k].g].name, c[k].bad_call,
                 graft_status_name(c[k].st), c[k].bad_out,
                 c[k].st ? graft_function_errmsg(c[k].f) : "differs from seq");
      graft_function_destroy(c[k].f);
    }
    graft_runtime_destroy(rt);
  }
  fixture_free(&fx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_WATCHED_TEST(test_graft_function_call__back_to_back_with_changing_runtimes),
      TU_WATCHED_TEST(test_graft_function_call__concurrent_functions_on_one_runtime),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
