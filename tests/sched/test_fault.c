/* Fault injection in the executors: graft__exec_fault_hook fails one chosen
 * (node, tile), drawn at random over the plan's nodes and tiles, call after
 * call.  The failing call must return the injected status with a message
 * naming the op ("<op>: ... (op #N in trace ...)"), return (no hang: the
 * meson timeout), run no node that depends on the failed one, leave every
 * variable as it was and allocate nothing into the caller's NULL output
 * slots.  The next call, hook cleared, must succeed with results bitwise
 * equal to the sequential executor's after the same successful calls.
 *
 * The hook runs on worker threads: it only reads the target and counts calls
 * in atomics; every assert runs on the test's thread after the call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "watchdog.h"
#include "sched/sched.h"

TU_SUPPRESS_GOMP_TASK_LEAK();

enum { N_OUT = 3, N_VARS = 3, FAULTS = 24, MAX_NODES = 1024, GRAIN = 64 };

/* ---- the hook ------------------------------------------------------------ */

static uint32_t target_node;
static int64_t target_tile;
static graft_status target_status;
static _Atomic int hits;                  /* calls of the hook on the target */
static _Atomic int ran[MAX_NODES];        /* hook calls per node id */

static graft_status fault_hook(uint32_t node, int64_t tile) {
  if (node < MAX_NODES) atomic_fetch_add_explicit(&ran[node], 1, memory_order_relaxed);
  if (node == target_node && tile == target_tile) {
    atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
    return target_status;
  }
  return GRAFT_OK;
}

static void arm(uint32_t node, int64_t tile, graft_status st) {
  target_node = node;
  target_tile = tile;
  target_status = st;
  atomic_store(&hits, 0);
  for (int i = 0; i < MAX_NODES; i++) atomic_store(&ran[i], 0);
  graft__exec_fault_hook = fault_hook;
}

/* ---- the graph ----------------------------------------------------------- */

typedef struct model {
  graft_variable *w, *acc, *count;
} model;

/* Batched matmul, elementwise chains, softmax rows, a
 * split reduction, a concat of branches, and two assignments. */
static graft_status step(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                         graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  model *m = user;
  graft_value *h = graft_tanh(t, graft_matmul(t, in[0], graft_read(t, m->w), 0)); /* [3,40,16] */
  graft_value *s = graft_softmax(t, h, -1);
  graft_value *loss = graft_reduce_mean(t, graft_square(t, h), 0, NULL, 0);
  graft_value *br[3] = {graft_sin(t, h), graft_cos(t, s), graft_sigmoid(t, graft_mul(t, h, s))};
  graft_value *cat = graft_concat(t, 3, br, -1); /* [3,40,48] */
  int axes[2] = {0, 1};
  graft_value *acc = graft_assign_add(t, m->acc, graft_reduce_mean(t, s, 2, axes, 0));
  graft_assign_add(t, m->count, graft_scalar(t, GRAFT_F64, 1.0));
  out[0] = graft_add(t, cat, graft_reduce_max(t, cat, 1, axes, 1));
  out[1] = loss;
  out[2] = graft_mul(t, acc, graft_scalar(t, GRAFT_F64, 2.0));
  return GRAFT_OK;
}

typedef struct snapshot {
  graft_tensor *out[N_OUT];
  graft_tensor *var[N_VARS];
} snapshot;

typedef struct fixture {
  model m;
  graft_tensor *x;
  graft_tensor *var0[N_VARS];
  snapshot ref[FAULTS + 1]; /* seq: outputs and variables after each successful call */
} fixture;

static graft_variable *var_k(const fixture *fx, int k) {
  return k == 0 ? fx->m.w : k == 1 ? fx->m.acc : fx->m.count;
}


static void snapshot_vars(const fixture *fx, snapshot *s) {
  for (int k = 0; k < N_VARS; k++) s->var[k] = tu_copy(graft_variable_value(var_k(fx, k)));
}

static void snapshot_free(snapshot *s) {
  for (int i = 0; i < N_OUT; i++) graft_tensor_destroy(s->out[i]);
  for (int k = 0; k < N_VARS; k++) graft_tensor_destroy(s->var[k]);
  memset(s, 0, sizeof *s);
}

static void reset_vars(fixture *fx) {
  for (int k = 0; k < N_VARS; k++)
    assert_int_equal(graft_variable_set(var_k(fx, k), fx->var0[k]), GRAFT_OK);
}

static graft_function *function(graft_runtime *rt, fixture *fx) {
  graft_function_desc d = {.name = "fault", .trace = step, .user = &fx->m, .n_inputs = 1,
                           .n_outputs = N_OUT};
  graft_function *f = NULL;
  assert_int_equal(graft_function_create(rt, &d, &f), GRAFT_OK);
  return f;
}

/* A successful call whose outputs and variables must equal ref. */
static void good_call(graft_function *f, fixture *fx, const snapshot *ref, const char *what) {
  graft_tensor *out[N_OUT] = {NULL};
  tu_watchdog_step("%s", what);
  graft_status st = graft_function_call(f, 1, &fx->x, N_OUT, out);
  if (st) fail_msg("%s: %s: %s", what, graft_status_name(st), graft_function_errmsg(f));
  for (int i = 0; i < N_OUT; i++) {
    if (!tu_bitwise_equal(out[i], ref->out[i])) fail_msg("%s: output %d differs from seq", what, i);
    graft_tensor_destroy(out[i]);
  }
  for (int k = 0; k < N_VARS; k++)
    if (!tu_bitwise_equal(graft_variable_value(var_k(fx, k)), ref->var[k]))
      fail_msg("%s: variable %d differs from seq", what, k);
}

static void fixture_make(fixture *fx) {
  memset(fx, 0, sizeof *fx);
  tu_rng r = {0xfa017ull};
  const int64_t xs[] = {3, 40, 24}, ws[] = {24, 16}, as[] = {16};
  fx->x = tu_tensor_rand(&r, GRAFT_F64, 3, xs, -1, 1);
  fx->var0[0] = tu_tensor_rand(&r, GRAFT_F64, 2, ws, -0.5, 0.5);
  fx->var0[1] = tu_tensor_rand(&r, GRAFT_F64, 1, as, -1, 1);
  fx->var0[2] = tu_tensor_rand(&r, GRAFT_F64, 0, NULL, 0, 0);
  assert_int_equal(graft_variable_create(NULL, "w", GRAFT_F64, 2, ws, NULL, 0, &fx->m.w), GRAFT_OK);
  assert_int_equal(graft_variable_create(NULL, "acc", GRAFT_F64, 1, as, NULL, 0, &fx->m.acc),
                   GRAFT_OK);
  assert_int_equal(graft_variable_create(NULL, "count", GRAFT_F64, 0, NULL, NULL, 0, &fx->m.count),
                   GRAFT_OK);
  reset_vars(fx);
  /* The reference: FAULTS + 1 successful calls of the sequential executor
   * (same grain, so the same tiles and split reductions). */
  graft__exec_fault_hook = NULL;
  graft_runtime *rt = tu_runtime_of("seq", 1, GRAIN);
  graft_function *f = function(rt, fx);
  for (int c = 0; c <= FAULTS; c++) {
    assert_int_equal(graft_function_call(f, 1, &fx->x, N_OUT, fx->ref[c].out), GRAFT_OK);
    snapshot_vars(fx, &fx->ref[c]);
  }
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
  reset_vars(fx);
}

static void fixture_free(fixture *fx) {
  for (int c = 0; c <= FAULTS; c++) snapshot_free(&fx->ref[c]);
  for (int k = 0; k < N_VARS; k++) graft_tensor_destroy(fx->var0[k]);
  graft_tensor_destroy(fx->x);
  graft_variable_destroy(fx->m.w);
  graft_variable_destroy(fx->m.acc);
  graft_variable_destroy(fx->m.count);
}

/* Order positions that depend on position i (its descendants). */
static void descendants(const graft__plan *p, uint32_t i, uint8_t *mark) {
  memset(mark, 0, p->n_order);
  uint32_t *stack = malloc(sizeof *stack * (p->n_order + 1)), n = 0;
  assert_non_null(stack);
  stack[n++] = i;
  while (n) {
    uint32_t u = stack[--n];
    for (uint32_t e = p->succ_off[u]; e < p->succ_off[u + 1]; e++)
      if (!mark[p->succ[e]]) {
        mark[p->succ[e]] = 1;
        stack[n++] = p->succ[e];
      }
  }
  free(stack);
}

/* FAULTS failing calls at random (node, tile), each followed by a good one. */
static void check_faults(const char *sched, int threads, uint64_t seed) {
  fixture fx;
  fixture_make(&fx);
  graft_runtime *rt = tu_runtime_of(sched, threads, GRAIN);
  graft_function *f = function(rt, &fx);
  tu_rng r = {seed};
  char what[160];
  snprintf(what, sizeof what, "%s x%d, first call", sched, threads);
  good_call(f, &fx, &fx.ref[0], what);

  const graft__plan *p = graft__function_plan(f);
  assert_non_null(p);
  assert_true(p->g->n_nodes <= MAX_NODES);
  assert_true(p->n_tasks > (int64_t)p->n_order); /* tiles exist to aim at */
  uint8_t *below = malloc(p->n_order);
  assert_non_null(below);
  for (int c = 0; c < FAULTS; c++) {
    /* Every third fault hits the last tile of a node; the others any tile. */
    uint32_t i = (uint32_t)tu_int(&r, 0, p->n_order - 1);
    int64_t n_tiles = p->tiling[i].n;
    int64_t tile = c % 3 == 2 ? n_tiles - 1 : tu_int(&r, 0, n_tiles - 1);
    uint32_t id = p->order[i];
    graft_status inject = c % 2 ? GRAFT_EIO : GRAFT_ENOMEM;
    const char *op = graft__ops[graft__graph_node(p->g, id)->op].name;
    snprintf(what, sizeof what, "%s x%d, fault %d at %s #%u tile %lld/%lld", sched, threads, c, op,
             id, (long long)tile, (long long)n_tiles);

    snapshot before = {{NULL}, {NULL}};
    snapshot_vars(&fx, &before);
    graft_tensor *out[N_OUT] = {NULL};
    arm(id, tile, inject);
    tu_watchdog_step("%s", what);
    graft_status st = graft_function_call(f, 1, &fx.x, N_OUT, out);
    graft__exec_fault_hook = NULL;

    char msg[512], want[64];
    snprintf(msg, sizeof msg, "%s", graft_function_errmsg(f));
    if (st != inject)
      fail_msg("%s: returned %s (%s), injected %s", what, graft_status_name(st), msg,
               graft_status_name(inject));
    assert_int_equal(atomic_load(&hits), 1);
    snprintf(want, sizeof want, "op #%u ", id);
    if (!strstr(msg, want) || strncmp(msg, op, strlen(op)) || msg[strlen(op)] != ':' ||
        !strstr(msg, graft_status_str(inject)))
      fail_msg("%s: message '%s' should name the op ('%s: ... (%s...')", what, msg, op, want);
    for (int k = 0; k < N_OUT; k++)
      if (out[k]) fail_msg("%s: output slot %d was filled by a failed call", what, k);
    for (int k = 0; k < N_VARS; k++)
      if (!tu_bitwise_equal(graft_variable_value(var_k(&fx, k)), before.var[k]))
        fail_msg("%s: variable %d changed by a failed call", what, k);
    descendants(p, i, below);
    for (uint32_t j = 0; j < p->n_order; j++)
      if (below[j] && atomic_load(&ran[p->order[j]]))
        fail_msg("%s: #%u, which depends on the failed node, ran", what, p->order[j]);
    snapshot_free(&before);

    snprintf(what, sizeof what, "%s x%d, call after fault %d", sched, threads, c);
    good_call(f, &fx, &fx.ref[c + 1], what);
    assert_ptr_equal(graft__function_plan(f), p); /* the same plan, reused */
  }
  free(below);
  graft__exec_fault_hook = NULL;
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
  fixture_free(&fx);
}

/* Run after every case, also one that failed half-way. */
static int reset_hook(void **state) {
  graft__exec_fault_hook = NULL;
  return tu_watchdog_disarm_(state);
}

static void test_graft_function_call__fault_ws_1(void **state) {
  (void)state;
  check_faults("ws", 1, 0x11);
}

static void test_graft_function_call__fault_ws_2(void **state) {
  (void)state;
  check_faults("ws", 2, 0x22);
}

static void test_graft_function_call__fault_ws_4(void **state) {
  (void)state;
  check_faults("ws", 4, 0x44);
}

static void test_graft_function_call__fault_ws_8(void **state) {
  (void)state;
  check_faults("ws", 8, 0x88);
}

static void test_graft_function_call__fault_omp_2(void **state) {
  (void)state;
  check_faults("omp", 2, 0x202);
}

static void test_graft_function_call__fault_omp_4(void **state) {
  (void)state;
  check_faults("omp", 4, 0x404);
}

static void test_graft_function_call__fault_seq(void **state) {
  (void)state;
  check_faults("seq", 1, 0x5e9);
}

/* DESIGN §4: a failed call leaves the caller's output tensors as they were,
 * also when the failure happens in a worker (here an injected fault) of a
 * plan that has no fallible op. */
static void check_caller_outputs_kept(const char *sched, int threads) {
  fixture fx;
  fixture_make(&fx);
  graft_runtime *rt = tu_runtime_of(sched, threads, GRAIN);
  graft_function *f = function(rt, &fx);
  good_call(f, &fx, &fx.ref[0], "first call");
  const graft__plan *p = graft__function_plan(f);
  graft_tensor *out[N_OUT], *keep[N_OUT];
  for (int k = 0; k < N_OUT; k++) {
    out[k] = tu_copy(fx.ref[0].out[k]);
    memset(graft_tensor_data(out[k]), 0x5a,
           (size_t)graft_tensor_numel(out[k]) * graft_dtype_size(graft_tensor_dtype(out[k])));
    keep[k] = tu_copy(out[k]);
  }
  /* Fail the last node in order: every output node has run by then (or runs
   * alongside, in the parallel executors). */
  uint32_t last = p->order[p->n_order - 1];
  int64_t last_tile = p->tiling[p->n_order - 1].n - 1;
  arm(last, last_tile, GRAFT_EIO);
  tu_watchdog_step("%s x%d, fault in the last node #%u", sched, threads, last);
  graft_status st = graft_function_call(f, 1, &fx.x, N_OUT, out);
  graft__exec_fault_hook = NULL;
  assert_int_equal(st, GRAFT_EIO);
  int changed = -1;
  for (int k = 0; k < N_OUT; k++)
    if (changed < 0 && !tu_bitwise_equal(out[k], keep[k])) changed = k;
  for (int k = 0; k < N_OUT; k++) {
    graft_tensor_destroy(out[k]);
    graft_tensor_destroy(keep[k]);
  }
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
  fixture_free(&fx);
  if (changed >= 0)
    fail_msg("%s x%d: caller's output %d was written by a call that failed (fault in op #%u)",
             sched, threads, changed, last);
}

static void test_graft_function_call__fault_keeps_caller_outputs_seq(void **state) {
  (void)state;
  check_caller_outputs_kept("seq", 1);
}

static void test_graft_function_call__fault_keeps_caller_outputs_ws(void **state) {
  (void)state;
  check_caller_outputs_kept("ws", 1);
  check_caller_outputs_kept("ws", 4);
}

static void test_graft_function_call__fault_keeps_caller_outputs_omp(void **state) {
  (void)state;
  check_caller_outputs_kept("omp", 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_WATCHED_TEST_TEARDOWN(test_graft_function_call__fault_ws_1, reset_hook),
      TU_WATCHED_TEST_TEARDOWN(test_graft_function_call__fault_ws_2, reset_hook),
      TU_WATCHED_TEST_TEARDOWN(test_graft_function_call__fault_ws_4, reset_hook),
      TU_WATCHED_TEST_TEARDOWN(test_graft_function_call__fault_ws_8, reset_hook),
      TU_WATCHED_TEST_TEARDOWN(test_graft_function_call__fault_omp_2, reset_hook),
      TU_WATCHED_TEST_TEARDOWN(test_graft_function_call__fault_omp_4, reset_hook),
      TU_WATCHED_TEST_TEARDOWN(test_graft_function_call__fault_seq, reset_hook),
      TU_WATCHED_TEST_TEARDOWN(test_graft_function_call__fault_keeps_caller_outputs_seq,
                                reset_hook),
      TU_WATCHED_TEST_TEARDOWN(test_graft_function_call__fault_keeps_caller_outputs_ws,
                                reset_hook),
      TU_WATCHED_TEST_TEARDOWN(test_graft_function_call__fault_keeps_caller_outputs_omp,
                                reset_hook),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
