/* Sequential-vs-parallel differential test on seeded random DAGs.
 *
 * Each case is a seed (the generator is in random_dag.h).  The seed fixes
 * the inputs, the variables and the graph: the trace callback draws every
 * op from a generator seeded by it, so every function traced from one seed
 * records the same graph.  The graph
 * mixes unary ops, broadcasting binary ops, where, reductions over random
 * axes, small (batched) matmuls, transpose, reshape, slice, concat, softmax,
 * conv2d and the 2-D pools, constants, and reads and assignments of variables; operands come from
 * every earlier value (fan-in and fan-out), and several values are outputs.
 * Values stay finite: each value carries a bound on its magnitude and large
 * ones pass through tanh before an op could overflow them.
 *
 * The graph runs with GRAFT_SCHED=seq (the reference) and with ws at 1, 2,
 * 3, 4 and 8 threads and omp at 2 and 4 threads, with a grain of 64 so small
 * ops are cut into tiles; every output of two successive calls and every
 * variable afterwards must be bitwise equal to the reference.  A few cases
 * also run on a synthetic 4-NUMA topology with 8 threads (several parts).
 * Cases of their own hold control flow (cond, while_loop, scan, remat,
 * nested, differentiated in reverse, forward and second order) and run
 * with fusion off too.
 *
 * GRAFT_TEST_DAGS sets the case count (default 300; a third of it with
 * control flow); GRAFT_TEST_SEED=S runs only case S (a failure prints the
 * seed to use); GRAFT_TEST_CTL_LOG=1 lists the constructs drawn. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "random_dag.h"
#include "watchdog.h"

TU_SUPPRESS_GOMP_TASK_LEAK();

enum {
  GRAIN = 64,
  DEFAULT_DAGS = 300,
};

/* ---- running and comparing ----------------------------------------------- */

typedef struct run_cfg {
  const char *sched;
  int threads;
  const char *topology, *partition;
  const char *memory;          /* GRAFT_MEMORY, NULL = default */
  const char *fusion;          /* GRAFT_FUSION, NULL = default (on) */
} run_cfg;

typedef struct result {
  graft_status st;
  char msg[512];
  graft_tensor *out[2][MAX_OUT];  /* first call (graft allocates), second (caller's) */
  graft_tensor *var[MAX_VARS];
  int64_t tiles, nodes, parts;
  int64_t arena, load, lane_edges;
  int64_t control_nodes, body_runs;
} result;

static void result_free(result *r) {
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < MAX_OUT; i++) graft_tensor_destroy(r->out[c][i]);
  for (int i = 0; i < MAX_VARS; i++) graft_tensor_destroy(r->var[i]);
  memset(r, 0, sizeof *r);
}

/* Two calls of a fresh function on rt, variables starting from var0. */
static void run_dag(graft_runtime *rt, dag_spec *s, const inputs *io, result *r) {
  memset(r, 0, sizeof *r);
  for (int k = 0; k < s->n_vars; k++) graft_variable_set(s->vars[k], io->var0[k]);
  graft_function_desc d = {.name = "dag", .trace = dag_trace, .user = s,
                           .n_inputs = s->n_in, .n_outputs = s->n_out};
  graft_function *f = NULL;
  r->st = graft_function_create(rt, &d, &f);
  if (r->st) {
    snprintf(r->msg, sizeof r->msg, "graft_function_create failed");
    return;
  }
  r->st = graft_function_call(f, s->n_in, io->in, s->n_out, r->out[0]);
  if (r->st == GRAFT_OK) {
    for (int i = 0; i < s->n_out; i++) r->out[1][i] = empty_like(r->out[0][i]);
    r->st = graft_function_call(f, s->n_in, io->in, s->n_out, r->out[1]);
  }
  snprintf(r->msg, sizeof r->msg, "%s", graft_function_errmsg(f));
  graft_plan_stats ps;
  if (r->st == GRAFT_OK && graft_function_stats(f, &ps) == GRAFT_OK) {
    r->tiles = ps.tiles;
    r->nodes = ps.live_nodes;
    r->parts = ps.parts;
    r->arena = ps.arena_bytes;
    r->load = ps.load_bytes;
    r->lane_edges = ps.lane_edges;
    r->control_nodes = ps.control_nodes;
    r->body_runs = ps.body_runs;
  }
  const char *dot = getenv("GRAFT_TEST_DOT"); /* GRAFT_TEST_DOT=file: the graph, for a repro */
  FILE *df = dot && *dot ? fopen(dot, "w") : NULL;
  if (df) {
    graft_function_write_dot(f, df);
    fclose(df);
  }
  graft_function_destroy(f);
  for (int k = 0; k < s->n_vars; k++) r->var[k] = tu_copy(graft_variable_value(s->vars[k]));
}

/* Empty string when got equals ref bitwise; else what differs. */
static void compare(const dag_spec *s, const result *ref, const result *got, char *why, size_t len) {
  why[0] = '\0';
  if (got->st != ref->st) {
    snprintf(why, len, "status %s (%.200s), reference %s (%.200s)", graft_status_name(got->st), got->msg,
             graft_status_name(ref->st), ref->msg);
    return;
  }
  for (int c = 0; c < 2; c++) {
    char what[32];
    snprintf(what, sizeof what, "call %d output", c + 1);
    if (diff_list(what, s->n_out, got->out[c], ref->out[c], why, len)) return;
  }
  diff_list("variable", s->n_vars, got->var, ref->var, why, len);
}

/* Index of the first non-finite element of t, or -1. */
static int64_t first_nonfinite(const graft_tensor *t) {
  for (int64_t i = 0; t && i < graft_tensor_numel(t); i++)
    if (!isfinite(tu_get(t, i))) return i;
  return -1;
}

/* The generator promises finite values; a NaN would make equality weak. */
static void check_finite(const dag_spec *s, const result *ref, char *why, size_t len) {
  why[0] = '\0';
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < s->n_out; i++)
      if (first_nonfinite(ref->out[c][i]) >= 0) {
        snprintf(why, len, "call %d output %d element %lld is not finite", c + 1, i,
                 (long long)first_nonfinite(ref->out[c][i]));
        return;
      }
  for (int k = 0; k < s->n_vars; k++)
    if (first_nonfinite(ref->var[k]) >= 0) {
      snprintf(why, len, "variable %d is not finite", k);
      return;
    }
}

static graft_runtime *runtime_for(const run_cfg *c) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = c->threads;
  o.sched = c->sched;
  o.grain = GRAIN;
  o.topology = c->topology;
  o.partition = c->partition;
  o.memory = c->memory;
  o.fusion = c->fusion;
  graft_runtime *rt = NULL;
  char msg[512] = "";
  graft_status st = graft_runtime_create_ex(&o, &rt, msg, sizeof msg);
  if (st) fail_msg("runtime %s x%d: %s: %s", c->sched, c->threads, graft_status_name(st), msg);
  return rt;
}

typedef struct totals {
  int64_t cases, tiles, nodes, multipart, control_nodes, body_runs;
  dag_counts counts;           /* what the generator drew (control flow) */
  int64_t arena[16], load[16], lane_edges[16]; /* per configuration */
} totals;

/* Run case seed (with control flow when ctl) on every configuration and
 * compare with the reference. */
static void check_case(uint64_t seed, int ctl, graft_runtime *ref_rt, graft_runtime **rts,
                       const run_cfg *cfgs, int n_cfgs, totals *tot) {
  dag_spec s;
  inputs io;
  result ref, got;
  char why[512];
  spec_make(&s, seed);
  s.ctl = ctl;
  s.counts = &tot->counts; /* (the reference's trace: counted once) */
  inputs_make(&s, &io);
  tu_watchdog_step("seed %llu, the seq reference", (unsigned long long)seed);
  run_dag(ref_rt, &s, &io, &ref);
  if (ref.st != GRAFT_OK) {
    snprintf(why, sizeof why, "%s: %.400s", graft_status_name(ref.st), ref.msg); /* (freed next) */
    result_free(&ref);
    inputs_free(&s, &io);
    fail_msg("seed %llu: the reference (seq) call failed: %s (rerun: GRAFT_TEST_SEED=%llu)",
             (unsigned long long)seed, why, (unsigned long long)seed);
  }
  check_finite(&s, &ref, why, sizeof why);
  if (why[0]) {
    result_free(&ref);
    inputs_free(&s, &io);
    fail_msg("seed %llu: reference: %s (rerun: GRAFT_TEST_SEED=%llu)", (unsigned long long)seed,
             why, (unsigned long long)seed);
  }
  tot->cases++;
  tot->control_nodes += ref.control_nodes;
  tot->body_runs += ref.body_runs;
  s.counts = NULL;
  for (int c = 0; c < n_cfgs; c++) {
    tu_watchdog_step("seed %llu, sched %s x%d%s%s%s%s%s (rerun: GRAFT_TEST_SEED=%llu)",
                     (unsigned long long)seed, cfgs[c].sched, cfgs[c].threads,
                     cfgs[c].topology ? " topology " : "", cfgs[c].topology ? cfgs[c].topology : "",
                     cfgs[c].memory ? " memory " : "", cfgs[c].memory ? cfgs[c].memory : "",
                     cfgs[c].fusion ? " fusion off" : "", (unsigned long long)seed);
    run_dag(rts[c], &s, &io, &got);
    compare(&s, &ref, &got, why, sizeof why);
    if (got.st == GRAFT_OK) {
      tot->tiles += got.tiles;
      tot->nodes += got.nodes;
      tot->multipart += got.parts > 1;
      tot->arena[c] += got.arena;
      tot->load[c] += got.load;
      tot->lane_edges[c] += got.lane_edges;
    }
    result_free(&got);
    if (why[0]) {
      result_free(&ref);
      inputs_free(&s, &io);
      fail_msg("seed %llu, sched %s x%d%s%s%s%s: %s (rerun: GRAFT_TEST_SEED=%llu)",
               (unsigned long long)seed, cfgs[c].sched, cfgs[c].threads,
               cfgs[c].topology ? " topology " : "", cfgs[c].topology ? cfgs[c].topology : "",
               cfgs[c].fusion ? " fusion " : "", cfgs[c].fusion ? cfgs[c].fusion : "",
               why, (unsigned long long)seed);
    }
  }
  result_free(&ref);
  inputs_free(&s, &io);
}

/* Cases [first, first + n), or just GRAFT_TEST_SEED when set. */
static void run_cases(const run_cfg *cfgs, int n_cfgs, uint64_t first, int64_t n, int ctl, totals *tot) {
  run_cfg ref_cfg = {"seq", 1, NULL, NULL, NULL, NULL};
  graft_runtime *ref_rt = runtime_for(&ref_cfg);
  graft_runtime *rts[16];
  for (int c = 0; c < n_cfgs; c++) rts[c] = runtime_for(&cfgs[c]);
  const char *only = getenv("GRAFT_TEST_SEED");
  if (only && *only) {
    check_case(strtoull(only, NULL, 10), ctl, ref_rt, rts, cfgs, n_cfgs, tot);
  } else {
    for (int64_t k = 0; k < n; k++) check_case(first + (uint64_t)k, ctl, ref_rt, rts, cfgs, n_cfgs, tot);
  }
  for (int c = 0; c < n_cfgs; c++) graft_runtime_destroy(rts[c]);
  graft_runtime_destroy(ref_rt);
}

static void test_graft_function_call__random_dags_bitwise_equal_to_seq(void **state) {
  (void)state;
  static const run_cfg cfgs[] = {{"ws", 1, NULL, NULL, NULL, NULL}, {"ws", 2, NULL, NULL, NULL, NULL},
                                 {"ws", 3, NULL, NULL, NULL, NULL}, {"ws", 4, NULL, NULL, NULL, NULL},
                                 {"ws", 8, NULL, NULL, NULL, NULL}, {"omp", 2, NULL, NULL, NULL, NULL},
                                 {"omp", 4, NULL, NULL, NULL, NULL}};
  totals tot = {0};
  int64_t n = tu_env_count("GRAFT_TEST_DAGS", DEFAULT_DAGS);
  run_cases(cfgs, (int)COUNT(cfgs), 1, n, 0, &tot);
  print_message("%lld cases, %lld live nodes, %lld tasks over %d schedules\n",
                (long long)tot.cases, (long long)tot.nodes, (long long)tot.tiles,
                (int)COUNT(cfgs));
  /* The grain must have cut ops into tiles, or the test checks too little. */
  const char *only = getenv("GRAFT_TEST_SEED");
  if (!only || !*only) assert_true(tot.tiles > 2 * tot.nodes);
}

static void test_graft_function_call__random_dags_on_numa_topology(void **state) {
  (void)state;
  static const run_cfg cfgs[] = {{"ws", 8, "pack:2 numa:2 core:4 pu:1", "numa", NULL, NULL},
                                 {"omp", 8, "pack:2 numa:2 core:4 pu:1", "numa", NULL, NULL},
                                 {"ws", 3, "pack:2 numa:2 core:4 pu:1", "numa", NULL, NULL}};
  totals tot = {0};
  int64_t n = tu_env_count("GRAFT_TEST_DAGS", DEFAULT_DAGS) / 10;
  run_cases(cfgs, (int)COUNT(cfgs), 1000001, n < 20 ? 20 : n, 0, &tot);
  print_message("%lld cases, %lld with several parts\n", (long long)tot.cases,
                (long long)tot.multipart);
  /* Several parts must have held work in some of them. */
  const char *only = getenv("GRAFT_TEST_SEED");
  if (!only || !*only) assert_true(tot.multipart > 0);
}

/* GRAFT_MEMORY=lanes:N adds ordering edges: results stay bitwise those of
 * seq at every thread count, and the arena shrinks toward LOAD. */
static void test_graft_function_call__random_dags_with_memory_lanes(void **state) {
  (void)state;
  static const run_cfg cfgs[] = {{"ws", 4, NULL, NULL, "parallel", NULL}, {"ws", 4, NULL, NULL, "lanes:1", NULL},
                                 {"ws", 3, NULL, NULL, "lanes:2", NULL},  {"omp", 2, NULL, NULL, "lanes:1", NULL},
                                 {"ws", 8, NULL, NULL, "lanes:3", NULL}};
  totals tot = {0};
  int64_t n = tu_env_count("GRAFT_TEST_DAGS", DEFAULT_DAGS) / 10;
  run_cases(cfgs, (int)COUNT(cfgs), 2000001, n < 20 ? 20 : n, 0, &tot);
  print_message("%lld cases; arena/LOAD summed: parallel %.3f, lanes:1 %.3f, lanes:2 %.3f\n",
                (long long)tot.cases, (double)tot.arena[0] / (double)tot.load[0],
                (double)tot.arena[1] / (double)tot.load[1],
                (double)tot.arena[2] / (double)tot.load[2]);
  const char *only = getenv("GRAFT_TEST_SEED");
  if (only && *only) return;
  assert_int_equal(tot.lane_edges[0], 0);
  for (int c = 1; c < (int)COUNT(cfgs); c++) assert_true(tot.lane_edges[c] > 0);
  /* One lane orders every node: no two values live at once that a
   * sequential run would not hold, so the arena comes within a few percent
   * of LOAD and below the parallel plan's. */
  assert_true(tot.arena[1] <= tot.arena[0]);
  assert_true(tot.arena[1] >= tot.load[1]);
  assert_true((double)tot.arena[1] <= 1.05 * (double)tot.load[1]);
}

/* Control flow (random_dag.h's dag_spec.ctl): cond, while_loop, scan and
 * remat nodes with random bodies (closures, nested control flow), some
 * differentiated in reverse, forward or second order.  Plans holding them
 * walk on the calling thread and run each body on the executor: every
 * thread count, omp, and fusion off give seq's bits. */
static void test_graft_function_call__random_control_flow_bitwise_equal_to_seq(void **state) {
  (void)state;
  static const run_cfg cfgs[] = {
      {"ws", 1, NULL, NULL, NULL, NULL},   {"ws", 2, NULL, NULL, NULL, NULL},
      {"ws", 3, NULL, NULL, NULL, NULL},   {"ws", 4, NULL, NULL, NULL, NULL},
      {"ws", 8, NULL, NULL, NULL, NULL},   {"omp", 2, NULL, NULL, NULL, NULL},
      {"omp", 4, NULL, NULL, NULL, NULL},  {"seq", 1, NULL, NULL, NULL, "off"},
      {"ws", 3, NULL, NULL, NULL, "off"},  {"ws", 8, NULL, NULL, NULL, "off"},
      {"omp", 2, NULL, NULL, NULL, "off"}};
  totals tot = {0};
  int64_t n = tu_env_count("GRAFT_TEST_DAGS", DEFAULT_DAGS) / 3;
  run_cases(cfgs, (int)COUNT(cfgs), 3000001, n < 20 ? 20 : n, 1, &tot);
  const dag_counts *c = &tot.counts;
  print_message("%lld cases: %lld cond, %lld while_loop, %lld scan, %lld remat (%lld nested); "
                "%lld gradients, %lld jvps, %lld second order; %lld control nodes, %lld body runs "
                "(seq)\n",
                (long long)tot.cases, (long long)c->cond, (long long)c->while_loop, (long long)c->scan,
                (long long)c->remat, (long long)c->nested, (long long)c->gradients, (long long)c->jvps,
                (long long)c->second_order, (long long)tot.control_nodes, (long long)tot.body_runs);
  /* Every construct and every kind of derivative must have been drawn and
   * run, or the test checks too little. */
  const char *only = getenv("GRAFT_TEST_SEED");
  if (only && *only) return;
  assert_true(c->cond > 0 && c->while_loop > 0 && c->scan > 0 && c->remat > 0 && c->nested > 0);
  assert_true(c->gradients > 0 && c->jvps > 0 && c->second_order > 0);
  assert_true(tot.body_runs > tot.control_nodes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_WATCHED_TEST(test_graft_function_call__random_dags_with_memory_lanes),
      TU_WATCHED_TEST(test_graft_function_call__random_dags_bitwise_equal_to_seq),
      TU_WATCHED_TEST(test_graft_function_call__random_dags_on_numa_topology),
      TU_WATCHED_TEST(test_graft_function_call__random_control_flow_bitwise_equal_to_seq),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
