/* Which plans the work-stealing executor runs on the calling thread alone
 * (one task, at most one grain of work, or a chain of single-tile nodes:
 * no second worker could help) and which start the team, and that either
 * way a call gives the sequential executor's bits, into outputs graft
 * allocates and into the caller's, at every thread count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sched/sched.h"
#include "testutil.h"
#include "watchdog.h"

TU_SUPPRESS_GOMP_TASK_LEAK();

#define CHAIN 10

/* x + y */
static graft_status trace_add(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_add(t, in[0], in[1]);
  return GRAFT_OK;
}

/* CHAIN ops, each reading the one before (and x or y). */
static graft_value *chain(graft_trace *t, graft_value *v, graft_value *x, graft_value *y, int n) {
  for (int k = 0; k < n; k++) {
    switch (k % 5) {
    case 0: v = graft_add(t, v, y); break;
    case 1: v = graft_mul(t, v, x); break;
    case 2: v = graft_neg(t, v); break;
    case 3: v = graft_tanh(t, v); break;
    default: v = graft_sub(t, v, y); break;
    }
  }
  return v;
}

static graft_status trace_chain(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = chain(t, in[0], in[0], in[1], CHAIN);
  return GRAFT_OK;
}

/* Two independent chains of CHAIN / 2 ops, one from x and one from y,
 * joined by an add: two workers can each run one. */
static graft_status trace_branches(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *a = chain(t, in[0], in[0], in[1], CHAIN / 2);
  graft_value *b = chain(t, in[1], in[1], in[0], CHAIN / 2);
  out[0] = graft_add(t, a, b);
  return GRAFT_OK;
}

typedef struct dcase {
  const char *name;
  graft_trace_fn trace;
  int64_t n;      /* elements of x and y */
  int64_t grain;  /* 0: the default */
  int alone;      /* expected */
} dcase;

static const dcase cases[] = {
    {"one add of 16", trace_add, 16, 0, 1},
    {"one add of 4096 (under one grain)", trace_add, 4096, 0, 1},
    {"a chain of 10 ops of 4096 (over one grain)", trace_chain, 4096, 0, 1},
    {"two branches of 5 ops of 4096", trace_branches, 4096, 0, 0},
    {"one add of 65536 (tiled)", trace_add, 65536, 0, 0},
    {"one add of 16 in 4 tiles (grain 4)", trace_add, 16, 4, 0},
};

/* Fusion off: every op its own node, so the chains stay chains. */
static graft_runtime *runtime(const char *sched, int threads, int64_t grain) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.sched = sched;
  o.num_threads = threads;
  o.grain = grain;
  o.fusion = "off";
  graft_runtime *rt = NULL;
  char msg[512] = "";
  if (graft_runtime_create_ex(&o, &rt, msg, sizeof msg)) fail_msg("runtime %s x%d: %s", sched, threads, msg);
  return rt;
}

static void test_graft_function_call__alone_or_team_same_bits(void **state) {
  (void)state;
  static const struct {
    const char *sched;
    int threads;
  } runs[] = {{"seq", 1}, {"ws", 1}, {"ws", 2}, {"ws", 3}, {"omp", 2}};
  tu_rng rng = {0xd15a7c4};
  for (size_t c = 0; c < GRAFT__COUNT(cases); c++) {
    const dcase *k = &cases[c];
    graft_tensor *in[2] = {tu_tensor_rand(&rng, GRAFT_F32, 1, &k->n, -1, 1),
                           tu_tensor_rand(&rng, GRAFT_F32, 1, &k->n, -1, 1)};
    graft_tensor *ref = NULL;
    for (size_t r = 0; r < GRAFT__COUNT(runs); r++) {
      tu_watchdog_step("%s, %s x%d", k->name, runs[r].sched, runs[r].threads);
      graft_runtime *rt = runtime(runs[r].sched, runs[r].threads, k->grain);
      graft_function *f = tu_function(rt, k->name, k->trace, NULL, 2, 1, NULL);
      graft_tensor *mine[1] = {NULL};
      graft_status st = graft_function_call(f, 2, in, 1, mine);
      if (st) fail_msg("%s, %s x%d: %s", k->name, runs[r].sched, runs[r].threads, graft_function_errmsg(f));
      if (graft__function_plan_alone(f) != k->alone)
        fail_msg("%s, %s x%d: the plan runs %s, expected %s", k->name, runs[r].sched, runs[r].threads,
                 graft__function_plan_alone(f) ? "alone" : "on the team",
                 k->alone ? "alone" : "on the team");
      /* Again into the caller's tensor, which held other bits. */
      graft_tensor *theirs[1] = {tu_copy(in[0])};
      st = graft_function_call(f, 2, in, 1, theirs);
      if (st) fail_msg("%s, %s x%d: %s", k->name, runs[r].sched, runs[r].threads, graft_function_errmsg(f));
      if (!ref) ref = tu_copy(mine[0]);
      if (!tu_bitwise_equal(mine[0], ref) || !tu_bitwise_equal(theirs[0], ref))
        fail_msg("%s: %s x%d differs bitwise from seq", k->name, runs[r].sched, runs[r].threads);
      tu_destroy_outs(mine, 1);
      tu_destroy_outs(theirs, 1);
      graft_function_destroy(f);
      graft_runtime_destroy(rt);
    }
    graft_tensor_destroy(ref);
    tu_destroy_outs(in, 2);
  }
}

/* A call that fails on data changes nothing, alone as on the team: the
 * caller's output keeps its bits. */
static graft_status trace_bad_labels(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                     graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_softmax_cross_entropy(t, in[0], in[1]);
  return GRAFT_OK;
}

static void test_graft_function_call__alone_failure_changes_nothing(void **state) {
  (void)state;
  tu_rng rng = {0xfa11};
  const int64_t ls[2] = {4, 3}, lab_shape[1] = {4};
  const double labels[4] = {0, 2, 1, 1};
  graft_tensor *in[2] = {tu_tensor_rand(&rng, GRAFT_F32, 2, ls, -1, 1),
                         tu_tensor_from(GRAFT_I32, 1, lab_shape, labels)};
  for (int threads = 1; threads <= 2; threads++) {
    graft_runtime *rt = runtime("ws", threads, 0);
    graft_function *f = tu_function(rt, "bad_labels", trace_bad_labels, NULL, 2, 1, NULL);
    graft_tensor *out[1] = {NULL};
    tu_set(in[1], 2, 1);
    assert_int_equal(graft_function_call(f, 2, in, 1, out), GRAFT_OK);
    assert_int_equal(graft__function_plan_alone(f), 1);
    graft_tensor *before = tu_copy(out[0]);
    tu_set(in[1], 2, 7); /* out of range for 3 classes */
    assert_int_equal(graft_function_call(f, 2, in, 1, out), GRAFT_EINVAL);
    assert_true(tu_msg_has(graft_function_errmsg(f), "label7outofrange[0,3)"));
    assert_true(tu_bitwise_equal(out[0], before));
    graft_tensor_destroy(before);
    tu_destroy_outs(out, 1);
    graft_function_destroy(f);
    graft_runtime_destroy(rt);
  }
  tu_destroy_outs(in, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_WATCHED_TEST(test_graft_function_call__alone_or_team_same_bits),
      TU_WATCHED_TEST(test_graft_function_call__alone_failure_changes_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
