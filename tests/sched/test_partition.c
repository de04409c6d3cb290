/* The partitioner on synthetic topologies: independent branches stay whole
 * in one part and spread evenly over the parts, a long chain stays in one
 * part, and the partition level decides the part count.  Also where the
 * plan puts its workers (binding) and which side work it defers.  Every plan's
 * output is also bitwise equal to the sequential executor's.
 *
 * Branches are found in the plan through the node ids of their values (a
 * graft_value is the head of its node) and plan->order, which maps order
 * positions to node ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "watchdog.h"
#include "sched/sched.h"

TU_SUPPRESS_GOMP_TASK_LEAK();

enum { MAX_K = 16, BRANCH_NODES = 5, ROWS = 32, DIM = 64, CHAIN = 200 };

#define NUMA_TOPO "pack:2 numa:2 core:4 pu:1"
#define PACK_TOPO "pack:2 core:4 pu:1"

/* ---- K branches on a shared input, joined by a sum --------------------- */

typedef struct branches {
  int k;
  graft_variable *w1[MAX_K], *b1[MAX_K], *w2[MAX_K], *b2[MAX_K];
  uint32_t ids[MAX_K][BRANCH_NODES]; /* node ids of each branch, filled by the trace */
} branches;

static uint32_t id_of(const graft_value *v) { return graft__value_id(v); }

/* Branch i: matmul [32,64]x[64,64] -> add bias -> relu -> matmul -> add. */
static graft_status branches_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  branches *b = user;
  graft_value *sum = NULL;
  for (int i = 0; i < b->k; i++) {
    graft_value *v[BRANCH_NODES];
    v[0] = graft_matmul(t, in[0], graft_read(t, b->w1[i]), 0);
    v[1] = graft_add(t, v[0], graft_read(t, b->b1[i]));
    v[2] = graft_relu(t, v[1]);
    v[3] = graft_matmul(t, v[2], graft_read(t, b->w2[i]), 0);
    v[4] = graft_add(t, v[3], graft_read(t, b->b2[i]));
    for (int j = 0; j < BRANCH_NODES; j++) b->ids[i][j] = id_of(v[j]);
    sum = sum ? graft_add(t, sum, v[4]) : v[4];
  }
  out[0] = sum;
  return GRAFT_OK;
}

static void branches_make(branches *b, int k, tu_rng *r) {
  memset(b, 0, sizeof *b);
  b->k = k;
  const int64_t ws[] = {DIM, DIM}, bs[] = {DIM};
  for (int i = 0; i < k; i++) {
    graft_variable **vs[] = {&b->w1[i], &b->b1[i], &b->w2[i], &b->b2[i]};
    for (int j = 0; j < 4; j++) {
      int rank = j % 2 ? 1 : 2;
      graft_tensor *init = tu_tensor_rand(r, GRAFT_F32, rank, rank == 2 ? ws : bs, -0.2, 0.2);
      assert_int_equal(graft_variable_create(NULL, "p", GRAFT_F32, rank, rank == 2 ? ws : bs,
                                             graft_tensor_data(init), 0, vs[j]),
                       GRAFT_OK);
      graft_tensor_destroy(init);
    }
  }
}

static void branches_free(branches *b) {
  for (int i = 0; i < b->k; i++) {
    graft_variable_destroy(b->w1[i]);
    graft_variable_destroy(b->b1[i]);
    graft_variable_destroy(b->w2[i]);
    graft_variable_destroy(b->b2[i]);
  }
}

/* ---- a chain of elementwise ops ---------------------------------------- */

static graft_status chain_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *h = in[0];
  for (int i = 0; i < CHAIN; i++) {
    switch (i % 5) {
    case 0: h = graft_tanh(t, h); break;
    case 1: h = graft_add(t, h, in[0]); break; /* the input is no compute predecessor */
    case 2: h = graft_sin(t, h); break;
    case 3: h = graft_mul(t, h, graft_read(t, (graft_variable *)user)); break;
    default: h = graft_sigmoid(t, h); break;
    }
  }
  out[0] = h;
  return GRAFT_OK;
}

/* ---- helpers ------------------------------------------------------------ */

static graft_runtime *runtime(const char *topology, const char *partition, int threads,
                              const char *sched) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.topology = topology;
  o.partition = partition;
  o.num_threads = threads;
  o.sched = sched;
  graft_runtime *rt = NULL;
  char msg[512] = "";
  graft_status st = graft_runtime_create_ex(&o, &rt, msg, sizeof msg);
  if (st) fail_msg("runtime %s / %s: %s: %s", topology, partition, graft_status_name(st), msg);
  return rt;
}

/* Call fn once on rt; return the output (the caller frees it) and keep f. */
static graft_tensor *call(graft_runtime *rt, graft_trace_fn fn, void *user, graft_tensor *x,
                          graft_function **f) {
  graft_function_desc d = {.name = "part", .trace = fn, .user = user, .n_inputs = 1,
                           .n_outputs = 1};
  assert_int_equal(graft_function_create(rt, &d, f), GRAFT_OK);
  graft_tensor *y = NULL;
  graft_status st = graft_function_call(*f, 1, &x, 1, &y);
  if (st) fail_msg("call: %s: %s", graft_status_name(st), graft_function_errmsg(*f));
  return y;
}

static void assert_bitwise_equal(const graft_tensor *a, const graft_tensor *b) {
  assert_int_equal(graft_tensor_numel(a), graft_tensor_numel(b));
  assert_int_equal(graft_tensor_dtype(a), graft_tensor_dtype(b));
  assert_memory_equal(graft_tensor_data(a), graft_tensor_data(b),
                      (size_t)graft_tensor_numel(a) * graft_dtype_size(graft_tensor_dtype(a)));
}

/* Output of fn under the sequential executor (the same default grain). */
static graft_tensor *seq_reference(graft_trace_fn fn, void *user, graft_tensor *x) {
  graft_runtime *rt = runtime(NULL, NULL, 1, "seq");
  graft_function *f = NULL;
  graft_tensor *y = call(rt, fn, user, x, &f);
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
  return y;
}

/* Part of node id in plan p. */
static int part_of(const graft__plan *p, uint32_t id) {
  for (uint32_t i = 0; i < p->n_order; i++)
    if (p->order[i] == id) return p->part[i];
  fail_msg("node #%u is not in the plan", id);
  return -1;
}

/* Max over mean of the work of the parts that hold work. */
static double imbalance(const graft_plan_stats *s) {
  int64_t max = 0, total = 0, used = 0;
  for (int k = 0; k < GRAFT_STATS_MAX_PARTS; k++)
    if (s->part_work[k] > 0) {
      used++;
      total += s->part_work[k];
      if (s->part_work[k] > max) max = s->part_work[k];
    }
  assert_true(used > 0);
  return (double)max / ((double)total / (double)used);
}

/* K branches on rt: one part per branch, want_parts parts used, balanced
 * when K is a multiple of the part count; output equal to seq. */
static void check_branches(const char *topology, const char *partition, int threads,
                           const char *sched, int k, int want_parts) {
  tu_rng r = {0xb4a2c11ull + (uint64_t)k};
  branches b;
  branches_make(&b, k, &r);
  const int64_t xs[] = {ROWS, DIM};
  graft_tensor *x = tu_tensor_rand(&r, GRAFT_F32, 2, xs, -1, 1);
  graft_tensor *want = seq_reference(branches_trace, &b, x);

  graft_runtime *rt = runtime(topology, partition, threads, sched);
  graft_function *f = NULL;
  graft_tensor *y = call(rt, branches_trace, &b, x, &f);
  assert_bitwise_equal(y, want);

  const graft__plan *p = graft__function_plan(f);
  assert_non_null(p);
  assert_int_equal(p->n_parts, want_parts);
  int used[GRAFT_STATS_MAX_PARTS] = {0};
  for (int i = 0; i < k; i++) {
    int part = part_of(p, b.ids[i][0]);
    for (int j = 1; j < BRANCH_NODES; j++) {
      int pj = part_of(p, b.ids[i][j]);
      if (pj != part)
        fail_msg("K=%d: branch %d node %d (#%u) is in part %d, its matmul in part %d", k, i, j,
                 b.ids[i][j], pj, part);
    }
    assert_in_range(part, 0, want_parts - 1);
    used[part]++;
  }
  graft_plan_stats s;
  assert_int_equal(graft_function_stats(f, &s), GRAFT_OK);
  print_message("%s / %s, %d threads, K=%d: %lld parts, imbalance %.4f, cut %lld bytes\n",
                topology, partition, threads, k, (long long)s.parts, s.imbalance,
                (long long)s.cut_bytes);
  int expect_used = k < want_parts ? k : want_parts;
  assert_int_equal(s.parts, expect_used);
  if (k % want_parts == 0) {
    /* The same number of branches in every part, and work within 10%. */
    for (int part = 0; part < want_parts; part++) assert_int_equal(used[part], k / want_parts);
    double imb = imbalance(&s);
    if (imb > 1.10 || s.imbalance > 1.10)
      fail_msg("K=%d over %d parts: imbalance %.4f (stats %.4f)", k, want_parts, imb, s.imbalance);
  }
  /* A second call on the same plan still matches. */
  graft_tensor *y2 = NULL;
  assert_int_equal(graft_function_call(f, 1, &x, 1, &y2), GRAFT_OK);
  assert_bitwise_equal(y2, want);

  graft_tensor_destroy(y2);
  graft_tensor_destroy(y);
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
  graft_tensor_destroy(want);
  graft_tensor_destroy(x);
  branches_free(&b);
}

/* ---- cases -------------------------------------------------------------- */

static void test_graft__plan_partition__numa_16_branches(void **state) {
  (void)state;
  check_branches(NUMA_TOPO, "numa", 16, "ws", 16, 4);
}

static void test_graft__plan_partition__numa_4_branches(void **state) {
  (void)state;
  check_branches(NUMA_TOPO, "numa", 16, "ws", 4, 4);
}

static void test_graft__plan_partition__numa_6_branches(void **state) {
  (void)state;
  check_branches(NUMA_TOPO, "numa", 16, "ws", 6, 4);
}

static void test_graft__plan_partition__numa_branches_omp(void **state) {
  (void)state;
  check_branches(NUMA_TOPO, "numa", 16, "omp", 16, 4);
}

static void test_graft__plan_partition__package_two_parts(void **state) {
  (void)state;
  check_branches(PACK_TOPO, "package", 8, "ws", 4, 2);
  check_branches(PACK_TOPO, "package", 8, "ws", 6, 2);
  check_branches(PACK_TOPO, "package", 8, "ws", 3, 2);
}

static void test_graft__plan_partition__none_one_part(void **state) {
  (void)state;
  check_branches(NUMA_TOPO, "none", 16, "ws", 16, 1);
  check_branches(PACK_TOPO, "none", 8, "ws", 4, 1);
}

/* Fewer threads than domains: parts are the domains that get a worker. */
static void test_graft__plan_partition__fewer_threads_than_domains(void **state) {
  (void)state;
  check_branches(NUMA_TOPO, "numa", 2, "ws", 4, 2);
}

static void test_graft__plan_partition__chain_stays_in_one_part(void **state) {
  (void)state;
  static const struct {
    const char *topology, *partition;
    int threads;
  } cfgs[] = {{NUMA_TOPO, "numa", 16}, {PACK_TOPO, "package", 8}, {NUMA_TOPO, "none", 16}};
  tu_rng r = {0xc4a1bull};
  const int64_t xs[] = {64, 64};
  graft_tensor *x = tu_tensor_rand(&r, GRAFT_F64, 2, xs, -1, 1);
  graft_tensor *sc = tu_tensor_rand(&r, GRAFT_F64, 2, xs, 0.5, 1.5);
  graft_variable *scale = NULL;
  assert_int_equal(graft_variable_create(NULL, "scale", GRAFT_F64, 2, xs, graft_tensor_data(sc),
                                         0, &scale),
                   GRAFT_OK);
  graft_tensor *want = seq_reference(chain_trace, scale, x);
  for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
    graft_runtime *rt = runtime(cfgs[c].topology, cfgs[c].partition, cfgs[c].threads, "ws");
    graft_function *f = NULL;
    graft_tensor *y = call(rt, chain_trace, scale, x, &f);
    assert_bitwise_equal(y, want);
    graft_plan_stats s;
    assert_int_equal(graft_function_stats(f, &s), GRAFT_OK);
    assert_int_equal(s.parts, 1);
    assert_int_equal(s.cut_bytes, 0);
    const graft__plan *p = graft__function_plan(f);
    assert_int_equal(p->n_order, CHAIN);
    for (uint32_t i = 1; i < p->n_order; i++) assert_int_equal(p->part[i], p->part[0]);
    graft_tensor_destroy(y);
    graft_function_destroy(f);
    graft_runtime_destroy(rt);
  }
  graft_tensor_destroy(want);
  graft_variable_destroy(scale);
  graft_tensor_destroy(sc);
  graft_tensor_destroy(x);
}

/* ---- deferred side work ------------------------------------------------- */

enum { SPINE = 16 };

typedef struct spine {
  uint32_t chain[SPINE], side;  /* node ids, filled by the trace */
} spine;

/* x -> SPINE tanh in a row (out[0]), and sin(x) on the side (out[1]): every
 * op is a 512 x 512 elementwise op, tiled at the default grain. */
static graft_status spine_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  spine *sp = user;
  graft_value *h = in[0];
  for (int i = 0; i < SPINE; i++) {
    h = graft_tanh(t, h);
    sp->chain[i] = id_of(h);
  }
  out[0] = h;
  out[1] = graft_sin(t, in[0]);
  sp->side = id_of(out[1]);
  return GRAFT_OK;
}

static const graft__kargs *kargs_of(const graft__plan *p, uint32_t id) {
  for (uint32_t i = 0; i < p->n_order; i++)
    if (p->order[i] == id) return &p->kargs[i];
  fail_msg("node #%u is not in the plan", id);
  return NULL;
}

/* A tiled node whose remaining path is under 1/8 of the critical path is
 * deferred (the side op, and the chain's last op); the rest of the chain is
 * not; the later deques hold exactly the deferred tiles; and deferring
 * changes nothing in the results, at any thread count. */
static void test_graft__plan_tile__defers_side_work(void **state) {
  (void)state;
  tu_rng r = {0x5de7ull};
  const int64_t xs[] = {512, 512};
  graft_tensor *x = tu_tensor_rand(&r, GRAFT_F32, 2, xs, -1, 1);
  graft_tensor *want[2] = {NULL, NULL};
  for (int threads = 1; threads <= 3; threads++) {
    graft_runtime *rt = runtime(NULL, NULL, threads, threads == 1 ? "seq" : "ws");
    spine sp;
    graft_function_desc d = {.name = "spine", .trace = spine_trace, .user = &sp,
                             .n_inputs = 1, .n_outputs = 2};
    graft_function *f = NULL;
    assert_int_equal(graft_function_create(rt, &d, &f), GRAFT_OK);
    graft_tensor *y[2] = {NULL, NULL};
    graft_status st = graft_function_call(f, 1, &x, 2, y);
    if (st) fail_msg("call: %s: %s", graft_status_name(st), graft_function_errmsg(f));
    const graft__plan *p = graft__function_plan(f);
    const graft__kargs *side = kargs_of(p, sp.side);
    assert_int_equal(side->whole, 0);
    assert_int_equal(side->defer, 1);
    for (int i = 0; i < SPINE - 2; i++) {
      assert_int_equal(kargs_of(p, sp.chain[i])->whole, 0);
      assert_int_equal(kargs_of(p, sp.chain[i])->defer, 0);
    }
    assert_int_equal(kargs_of(p, sp.chain[SPINE - 1])->defer, 1);
    int64_t deferred = 0;
    for (uint32_t i = 0; i < p->n_order; i++)
      if (p->kargs[i].defer) deferred += p->tiling[i].n;
    assert_true(deferred >= 2);
    assert_int_equal(p->n_deferred, deferred);
    for (int k = 0; k < 2; k++) {
      if (!want[k]) {
        want[k] = y[k];
      } else {
        assert_bitwise_equal(y[k], want[k]);
        graft_tensor_destroy(y[k]);
      }
    }
    graft_function_destroy(f);
    graft_runtime_destroy(rt);
  }
  graft_tensor_destroy(want[0]);
  graft_tensor_destroy(want[1]);
  graft_tensor_destroy(x);
}

/* Binding places each worker on a PU of its own domain (the one
 * graft__runtime_worker_domain gives it), distinct PUs while the domain has
 * enough, compact from the domain's first PU; without domains, worker w
 * takes PU w (modulo the count). */
static void test_graft__topology_worker_pus__inside_the_workers_domain(void **state) {
  (void)state;
  static const struct {
    const char *partition;
    int threads;
  } cfgs[] = {{"numa", 4}, {"numa", 8}, {"numa", 16}, {"numa", 24}, {"package", 6},
              {"none", 16}, {"none", 20}};
  for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
    graft_runtime *rt = runtime("pack:2 numa:2 core:4 pu:1", cfgs[c].partition, cfgs[c].threads, "ws");
    int n = cfgs[c].threads, parts = graft__runtime_parts(rt), map[32];
    /* PUs per domain: 16 PUs split evenly, in OS order (synthetic). */
    int per = 16 / rt->n_domains;
    assert_int_equal(graft__topology_worker_pus(rt->topo, rt->level, parts, n, map), GRAFT_OK);
    for (int w = 0; w < n; w++) {
      int d = graft__runtime_worker_domain(rt, w, n);
      if (parts == 1) {
        assert_int_equal(map[w], w % 16);
        continue;
      }
      if (map[w] / per != d)
        fail_msg("%s/%d: worker %d (domain %d) on PU %d", cfgs[c].partition, n, w, d, map[w]);
      int first = 0;
      while (graft__runtime_worker_domain(rt, first, n) != d) first++;
      assert_int_equal(map[w], d * per + (w - first) % per);
    }
    graft_runtime_destroy(rt);
  }
}

int main(void) {
  /* These cases check the partitioner and tiler on plans of one node per op, whose
   * nodes they look up by id; fused plans have tests of their own
   * (tests/sched/test_fusion.c), and the plan checker runs on every plan. */
  setenv("GRAFT_FUSION", "off", 1);
  const struct CMUnitTest tests[] = {
      TU_WATCHED_TEST(test_graft__plan_partition__numa_16_branches),
      TU_WATCHED_TEST(test_graft__plan_partition__numa_4_branches),
      TU_WATCHED_TEST(test_graft__plan_partition__numa_6_branches),
      TU_WATCHED_TEST(test_graft__plan_partition__numa_branches_omp),
      TU_WATCHED_TEST(test_graft__plan_partition__package_two_parts),
      TU_WATCHED_TEST(test_graft__plan_partition__none_one_part),
      TU_WATCHED_TEST(test_graft__plan_partition__fewer_threads_than_domains),
      TU_WATCHED_TEST(test_graft__plan_partition__chain_stays_in_one_part),
      TU_WATCHED_TEST(test_graft__topology_worker_pus__inside_the_workers_domain),
      TU_WATCHED_TEST(test_graft__plan_tile__defers_side_work),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
