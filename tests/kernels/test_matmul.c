/* matmul against naive triple loops in double: every GRAFT_TRANS_A/B combo,
 * rank 2, batched, broadcast batch dims, mixed ranks, empty and odd sizes,
 * tiled products (column and row tiles) under every executor, and the
 * shape / dtype errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

TU_RUNTIME_GROUP();
TU_SUPPRESS_GOMP_TASK_LEAK();

static graft_status trace_matmul(graft_trace *t, int n_in, graft_value *const *in,
                                 int n_out, graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  out[0] = graft_matmul(t, in[0], in[1], *(const unsigned *)user);
  return GRAFT_OK;
}

/* A product a @ b of logical sizes M x K times K x N; a and b carry their
 * own batch dims (na / nb of them), which broadcast. */
typedef struct mm_case {
  const char *name;
  int na;
  int64_t ba[4];
  int nb;
  int64_t bb[4];
  int64_t m, k, n;
} mm_case;

static const graft_dtype k_dtypes[] = {GRAFT_F32, GRAFT_F64};

/* The operand and output shapes of case c under flags; returns the
 * output's batch rank. */
static int case_shapes(const mm_case *c, unsigned flags, int64_t *as, int64_t *bs, int64_t *os) {
  int ta = (flags & GRAFT_TRANS_A) != 0, tb = (flags & GRAFT_TRANS_B) != 0;
  int64_t M = c->m, K = c->k, N = c->n;
  memcpy(as, c->ba, sizeof(int64_t) * (size_t)c->na);
  memcpy(bs, c->bb, sizeof(int64_t) * (size_t)c->nb);
  as[c->na] = ta ? K : M;
  as[c->na + 1] = ta ? M : K;
  bs[c->nb] = tb ? N : K;
  bs[c->nb + 1] = tb ? K : N;
  int nob = c->na > c->nb ? c->na : c->nb;
  for (int i = 0; i < nob; i++) {
    int ia = i - (nob - c->na), ib = i - (nob - c->nb);
    int64_t da = ia >= 0 ? c->ba[ia] : 1, db = ib >= 0 ? c->bb[ib] : 1;
    os[i] = da == 1 ? db : da;
  }
  os[nob] = M;
  os[nob + 1] = N;
  return nob;
}

/* out = in[0] @ in[1] of case c under flags, against the oracle.  The
 * tolerance of element (m, n) is rtol * sum_k |a_mk| |b_kn|, the scale of
 * the rounding error of any summation order. */
static void check_oracle(const mm_case *c, unsigned flags, graft_tensor *const *in,
                         const graft_tensor *out, const char *ctx) {
  int ta = (flags & GRAFT_TRANS_A) != 0, tb = (flags & GRAFT_TRANS_B) != 0;
  int64_t M = c->m, K = c->k, N = c->n;
  int64_t as[GRAFT_MAX_RANK], bs[GRAFT_MAX_RANK], os[GRAFT_MAX_RANK];
  int nob = case_shapes(c, flags, as, bs, os);
  graft_dtype dt = graft_tensor_dtype(out);
  tu_assert_tensor(out, dt, nob + 2, os, ctx);
  double rtol = dt == GRAFT_F32 ? 1e-4 : 1e-12;
  int64_t n_batch = tu_numel(nob, os);
  for (int64_t bi = 0; bi < n_batch; bi++) {
    int64_t oa = tu_bcast_src(nob, os, bi, c->na, c->ba) * M * K;
    int64_t ob = tu_bcast_src(nob, os, bi, c->nb, c->bb) * K * N;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double want = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; k++) {
          double x = tu_get(in[0], oa + (ta ? k * M + m : m * K + k));
          double y = tu_get(in[1], ob + (tb ? n * K + k : k * N + n));
          want += x * y;
          mag += fabs(x * y);
        }
        double got = tu_get(out, (bi * M + m) * N + n);
        if (!(fabs(got - want) <= rtol * mag))
          fail_msg("%s: batch %lld (%lld,%lld): got %.17g want %.17g (scale %.3g)", ctx,
                   (long long)bi, (long long)m, (long long)n, got, want, mag);
      }
  }
}

/* Random operands of case c for dtype dt under flags (the caller frees). */
static void case_inputs(const mm_case *c, graft_dtype dt, unsigned flags, tu_rng *rng,
                        graft_tensor **in) {
  int64_t as[GRAFT_MAX_RANK], bs[GRAFT_MAX_RANK], os[GRAFT_MAX_RANK];
  case_shapes(c, flags, as, bs, os);
  in[0] = tu_tensor_rand(rng, dt, c->na + 2, as, -1.0, 1.0);
  in[1] = tu_tensor_rand(rng, dt, c->nb + 2, bs, -1.0, 1.0);
}

/* Run one case with one dtype and flags; compare with the oracle. */
static void check_case(const mm_case *c, graft_dtype dt, unsigned flags, tu_rng *rng) {
  char ctx[128];
  snprintf(ctx, sizeof ctx, "%s %s flags=%u", c->name, graft_dtype_name(dt), flags);
  graft_tensor *in[2];
  case_inputs(c, dt, flags, rng, in);
  graft_tensor *out = NULL;
  char msg[512];
  tu_assert_run_ok(tu_run(g_rt, trace_matmul, &flags, 2, in, 1, &out, msg), ctx, msg);
  check_oracle(c, flags, in, out, ctx);
  graft_tensor_destroy(out);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

/* Every case x dtype x flag combination. */
static void check_cases(const mm_case *cases, size_t n, uint64_t seed) {
  tu_rng rng = {seed};
  for (size_t i = 0; i < n; i++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++)
      for (unsigned flags = 0; flags < 4; flags++) check_case(&cases[i], k_dtypes[d], flags, &rng);
}

/* ---- correct results -------------------------------------------------- */

/* Tiles of out = a @ b ([M,K] @ [K,N], f32) on a runtime of sched x threads
 * at grain; the output (the caller frees it). */
static graft_tensor *tiled_run(const char *sched, int threads, int64_t grain, graft_tensor **in,
                               int64_t *tiles) {
  graft_runtime *rt = tu_runtime_of(sched, threads, grain);
  static const unsigned no_flags = 0;
  graft_function_desc fd = {.name = "mm", .trace = trace_matmul, .user = (void *)&no_flags,
                            .n_inputs = 2, .n_outputs = 1};
  graft_function *f = NULL;
  assert_int_equal(graft_function_create(rt, &fd, &f), GRAFT_OK);
  graft_tensor *out = NULL;
  assert_int_equal(graft_function_call(f, 2, in, 1, &out), GRAFT_OK);
  graft_plan_stats ps;
  assert_int_equal(graft_function_stats(f, &ps), GRAFT_OK);
  *tiles = ps.tiles;
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
  return out;
}

/* A grain under the default scales the GEMM tile minimum down with it:
 * 256 x 64 x 1024 is 4 column tiles at the default grain and 16 at 8192
 * (64 columns each), and at either grain the result is bitwise the same on
 * seq and on ws at 3 threads. */
static void test_matmul__smaller_grain_gives_more_gemm_tiles(void **state) {
  (void)state;
  static const int64_t sa[] = {256, 64}, sb[] = {64, 1024};
  tu_rng rng = {0x6a1};
  graft_tensor *in[2] = {tu_tensor_rand(&rng, GRAFT_F32, 2, sa, -1, 1),
                         tu_tensor_rand(&rng, GRAFT_F32, 2, sb, -1, 1)};
  static const struct { int64_t grain, tiles; } cases[] = {{32768, 4}, {8192, 16}};
  for (size_t c = 0; c < TU_N_OF(cases); c++) {
    int64_t t_seq = 0, t_ws = 0;
    graft_tensor *ys = tiled_run("seq", 1, cases[c].grain, in, &t_seq);
    graft_tensor *yw = tiled_run("ws", 3, cases[c].grain, in, &t_ws);
    assert_int_equal(t_seq, cases[c].tiles);
    assert_int_equal(t_ws, cases[c].tiles);
    assert_true(tu_bitwise_equal(ys, yw));
    graft_tensor_destroy(ys);
    graft_tensor_destroy(yw);
  }
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

/* Products large enough to be tiled: column tiles (784 columns: near-equal
 * tiles), row tiles where op(a) is transposed or rows split as finely as
 * columns, and row tiles for outputs too narrow for columns (a classifier
 * head, a matrix-vector product, batched and broadcast ones), in every flag
 * combination.  Each runs as several tiles, matches the oracle, and is
 * bitwise the same under seq, ws at 2, 3 and 8 threads (oversubscribed) and
 * omp. */
static void test_matmul__tiled_bitwise_across_schedules(void **state) {
  (void)state;
  static const mm_case cases[] = {
      {"cols 64x128x1024", 0, {0}, 0, {0}, 64, 128, 1024},
      {"600x32x784 (rows under TRANS_A)", 0, {0}, 0, {0}, 600, 32, 784},
      {"rows 640x32x512", 0, {0}, 0, {0}, 640, 32, 512},
      {"head 256x1024x10", 0, {0}, 0, {0}, 256, 1024, 10},
      {"matvec 1000x300x1", 0, {0}, 0, {0}, 1000, 300, 1},
      {"[3]x[3] 200x64x7", 1, {3}, 1, {3}, 200, 64, 7},
      {"[2]x[1] 300x50x3", 1, {2}, 1, {1}, 300, 50, 3},
  };
  static const struct { const char *sched; int threads; } runs[] = {
      {"seq", 1}, {"ws", 2}, {"ws", 3}, {"ws", 8}, {"omp", 2}};
  graft_runtime *rts[TU_N_OF(runs)];
  for (size_t r = 0; r < TU_N_OF(runs); r++) rts[r] = tu_runtime_of(runs[r].sched, runs[r].threads, 0);
  tu_rng rng = {0x711e};
  for (size_t i = 0; i < TU_N_OF(cases); i++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++)
      for (unsigned flags = 0; flags < 4; flags++) {
        const mm_case *c = &cases[i];
        graft_tensor *in[2], *ref = NULL;
        case_inputs(c, k_dtypes[d], flags, &rng, in);
        for (size_t r = 0; r < TU_N_OF(runs); r++) {
          char ctx[160];
          snprintf(ctx, sizeof ctx, "%s %s flags=%u %s x%d", c->name,
                   graft_dtype_name(k_dtypes[d]), flags, runs[r].sched, runs[r].threads);
          graft_function_desc fd = {.name = "mm", .trace = trace_matmul, .user = &flags,
                                    .n_inputs = 2, .n_outputs = 1};
          graft_function *f = NULL;
          assert_int_equal(graft_function_create(rts[r], &fd, &f), GRAFT_OK);
          graft_tensor *out = NULL;
          graft_status st = graft_function_call(f, 2, in, 1, &out);
          if (st) fail_msg("%s: %s: %s", ctx, graft_status_name(st), graft_function_errmsg(f));
          graft_plan_stats ps;
          assert_int_equal(graft_function_stats(f, &ps), GRAFT_OK);
          if (ps.tiles < 2) fail_msg("%s: %lld tile(s), want several", ctx, (long long)ps.tiles);
          graft_function_destroy(f);
          if (!ref) {
            check_oracle(c, flags, in, out, ctx);
            ref = out;
            continue;
          }
          size_t bytes = (size_t)graft_tensor_numel(out) * graft_dtype_size(k_dtypes[d]);
          if (memcmp(graft_tensor_data(out), graft_tensor_data(ref), bytes))
            fail_msg("%s: differs bitwise from seq", ctx);
          graft_tensor_destroy(out);
        }
        graft_tensor_destroy(ref);
        graft_tensor_destroy(in[0]);
        graft_tensor_destroy(in[1]);
      }
  for (size_t r = 0; r < TU_N_OF(runs); r++) graft_runtime_destroy(rts[r]);
}

static void test_matmul__rank2_all_flags(void **state) {
  (void)state;
  static const mm_case cases[] = {
      {"rank2", 0, {0}, 0, {0}, 3, 4, 5},
      {"square", 0, {0}, 0, {0}, 6, 6, 6},
      {"outer", 0, {0}, 0, {0}, 4, 1, 3},
      {"inner", 0, {0}, 0, {0}, 1, 9, 1},
  };
  check_cases(cases, TU_N_OF(cases), 1);
}

static void test_matmul__odd_sizes(void **state) {
  (void)state;
  static const mm_case cases[] = {
      {"1x1x1", 0, {0}, 0, {0}, 1, 1, 1},      {"7x33x65", 0, {0}, 0, {0}, 7, 33, 65},
      {"65x7x33", 0, {0}, 0, {0}, 65, 7, 33},  {"33x65x1", 0, {0}, 0, {0}, 33, 65, 1},
      {"1x65x7", 0, {0}, 0, {0}, 1, 65, 7},    {"65x65x65", 0, {0}, 0, {0}, 65, 65, 65},
      {"33x1x7", 0, {0}, 0, {0}, 33, 1, 7},    {"b2 7x33x1", 1, {2}, 1, {2}, 7, 33, 1},
  };
  check_cases(cases, TU_N_OF(cases), 2);
}

static void test_matmul__batched_rank3(void **state) {
  (void)state;
  static const mm_case cases[] = {
      {"[2]x[2]", 1, {2}, 1, {2}, 3, 4, 5},
      {"[3]x[3]", 1, {3}, 1, {3}, 1, 7, 2},
      {"[2,3]x[2,3]", 2, {2, 3}, 2, {2, 3}, 2, 3, 4},
  };
  check_cases(cases, TU_N_OF(cases), 3);
}

static void test_matmul__broadcast_batch(void **state) {
  (void)state;
  static const mm_case cases[] = {
      {"[2,1]x[3]", 2, {2, 1}, 1, {3}, 3, 4, 5},  /* -> [2,3,M,N] */
      {"[1]x[4]", 1, {1}, 1, {4}, 2, 3, 2},
      {"[4]x[1]", 1, {4}, 1, {1}, 2, 3, 2},
      {"[1,2]x[3,1]", 2, {1, 2}, 2, {3, 1}, 2, 2, 3},
      {"[3]x[2,1]", 1, {3}, 2, {2, 1}, 3, 2, 4},
  };
  check_cases(cases, TU_N_OF(cases), 4);
}

static void test_matmul__mixed_ranks(void **state) {
  (void)state;
  static const mm_case cases[] = {
      {"rank3 x rank2", 1, {4}, 0, {0}, 3, 5, 2},
      {"rank2 x rank3", 0, {0}, 1, {2}, 2, 3, 4},
      {"rank4 x rank2", 2, {2, 3}, 0, {0}, 2, 4, 3},
  };
  check_cases(cases, TU_N_OF(cases), 5);
}

/* K = 0: an empty sum is 0, so the result is all zeros of shape [M,N]. */
static void test_matmul__k_zero_gives_zeros(void **state) {
  (void)state;
  static const mm_case cases[] = {
      {"K=0", 0, {0}, 0, {0}, 3, 0, 4},
      {"batched K=0", 1, {2}, 1, {2}, 2, 0, 3},
  };
  check_cases(cases, TU_N_OF(cases), 6);
  /* And explicitly: every element is exactly +0 or -0. */
  int64_t as[2] = {3, 0}, bs[2] = {0, 4};
  for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
    graft_tensor *in[2] = {NULL, NULL}, *out = NULL;
    assert_int_equal(graft_tensor_create(k_dtypes[d], 2, as, &in[0]), GRAFT_OK);
    assert_int_equal(graft_tensor_create(k_dtypes[d], 2, bs, &in[1]), GRAFT_OK);
    unsigned flags = 0;
    char msg[512];
    tu_assert_run_ok(tu_run(g_rt, trace_matmul, &flags, 2, in, 1, &out, msg), "K=0 zeros", msg);
    assert_int_equal(graft_tensor_numel(out), 12);
    for (int64_t i = 0; i < 12; i++) assert_true(tu_get(out, i) == 0.0);
    graft_tensor_destroy(out);
    graft_tensor_destroy(in[0]);
    graft_tensor_destroy(in[1]);
  }
}

static void test_matmul__empty_m_n_batch(void **state) {
  (void)state;
  static const mm_case cases[] = {
      {"M=0", 0, {0}, 0, {0}, 0, 3, 4},
      {"N=0", 0, {0}, 0, {0}, 3, 4, 0},
      {"M=0 batched", 1, {2}, 1, {2}, 0, 3, 4},
      {"batch 0", 1, {0}, 1, {0}, 2, 3, 4},
      {"batch 0 bcast", 1, {0}, 1, {1}, 2, 3, 4},
  };
  check_cases(cases, TU_N_OF(cases), 7);
}

/* ---- errors ------------------------------------------------------------ */

static graft_status run_shapes(graft_dtype da, int ra, const int64_t *sa, graft_dtype db,
                               int rb, const int64_t *sb, unsigned flags, char *msg) {
  tu_rng rng = {11};
  graft_tensor *in[2] = {tu_tensor_rand(&rng, da, ra, sa, -1, 1),
                         tu_tensor_rand(&rng, db, rb, sb, -1, 1)};
  graft_tensor *out = NULL;
  graft_status st = tu_run(g_rt, trace_matmul, &flags, 2, in, 1, &out, msg);
  if (st != GRAFT_OK) assert_null(out);
  graft_tensor_destroy(out);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
  return st;
}

/* got (a run_shapes status, which already checked that no output was
 * allocated) is want, and msg names matmul. */
#define expect_status(got, want, ctx, msg) \
  tu_assert_run_fails((got), (want), NULL, (msg), "matmul", (ctx))

static void test_matmul__inner_dims_differ_is_eshape(void **state) {
  (void)state;
  char msg[512];
  int64_t a[2] = {2, 3}, b[2] = {4, 5};
  expect_status(run_shapes(GRAFT_F32, 2, a, GRAFT_F32, 2, b, 0, msg), GRAFT_ESHAPE,
                "[2,3]x[4,5]", msg);
  if (!strstr(msg, "[2,3]") || !strstr(msg, "[4,5]"))
    fail_msg("message \"%s\" does not show both shapes [2,3] and [4,5]", msg);

  /* Shapes that would fit without the flag do not fit with it. */
  int64_t b2[2] = {3, 5};
  expect_status(run_shapes(GRAFT_F64, 2, a, GRAFT_F64, 2, b2, GRAFT_TRANS_B, msg),
                GRAFT_ESHAPE, "[2,3]x[3,5]^T", msg);
  expect_status(run_shapes(GRAFT_F64, 2, a, GRAFT_F64, 2, b2, GRAFT_TRANS_A, msg),
                GRAFT_ESHAPE, "[2,3]^T x[3,5]", msg);
  int64_t a3[3] = {2, 4, 3}, b3[3] = {2, 4, 3};
  expect_status(run_shapes(GRAFT_F32, 3, a3, GRAFT_F32, 3, b3, 0, msg), GRAFT_ESHAPE,
                "[2,4,3]x[2,4,3]", msg);
}

static void test_matmul__batch_dims_incompatible_is_eshape(void **state) {
  (void)state;
  char msg[512];
  int64_t a[3] = {2, 3, 4}, b[3] = {3, 4, 5};
  expect_status(run_shapes(GRAFT_F32, 3, a, GRAFT_F32, 3, b, 0, msg), GRAFT_ESHAPE,
                "[2,3,4]x[3,4,5]", msg);
  int64_t a4[4] = {2, 2, 3, 4}, b4[4] = {3, 1, 4, 5};
  expect_status(run_shapes(GRAFT_F64, 4, a4, GRAFT_F64, 4, b4, 0, msg), GRAFT_ESHAPE,
                "[2,2,3,4]x[3,1,4,5]", msg);
}

/* ops.h requires rank >= 2 on each side; the status is not specified
 * beyond "an error", so any failure naming matmul passes. */
static void test_matmul__rank1_operand_fails(void **state) {
  (void)state;
  char msg[512];
  int64_t v[1] = {3}, m[2] = {3, 3};
  static const struct { int ra, rb; } combos[] = {{1, 2}, {2, 1}, {1, 1}};
  for (size_t i = 0; i < TU_N_OF(combos); i++) {
    graft_status st = run_shapes(GRAFT_F32, combos[i].ra, combos[i].ra == 1 ? v : m, GRAFT_F32,
                                 combos[i].rb, combos[i].rb == 1 ? v : m, 0, msg);
    if (st == GRAFT_OK) fail_msg("rank %d x rank %d succeeded", combos[i].ra, combos[i].rb);
    if (!strstr(msg, "matmul")) fail_msg("message \"%s\" does not name matmul", msg);
  }
  /* rank 0 too */
  graft_status st = run_shapes(GRAFT_F64, 0, NULL, GRAFT_F64, 2, m, 0, msg);
  if (st == GRAFT_OK) fail_msg("rank 0 x rank 2 succeeded");
  if (!strstr(msg, "matmul")) fail_msg("message \"%s\" does not name matmul", msg);
}

static void test_matmul__i32_is_edtype(void **state) {
  (void)state;
  char msg[512];
  int64_t a[2] = {2, 3}, b[2] = {3, 4};
  expect_status(run_shapes(GRAFT_I32, 2, a, GRAFT_I32, 2, b, 0, msg), GRAFT_EDTYPE,
                "i32 x i32", msg);
}

static void test_matmul__mixed_dtypes_is_edtype(void **state) {
  (void)state;
  char msg[512];
  int64_t a[2] = {2, 3}, b[2] = {3, 4};
  expect_status(run_shapes(GRAFT_F32, 2, a, GRAFT_F64, 2, b, 0, msg), GRAFT_EDTYPE,
                "f32 x f64", msg);
  expect_status(run_shapes(GRAFT_F64, 2, a, GRAFT_I32, 2, b, 0, msg), GRAFT_EDTYPE,
                "f64 x i32", msg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul__rank2_all_flags),
      cmocka_unit_test(test_matmul__tiled_bitwise_across_schedules),
      cmocka_unit_test(test_matmul__smaller_grain_gives_more_gemm_tiles),
      cmocka_unit_test(test_matmul__odd_sizes),
      cmocka_unit_test(test_matmul__batched_rank3),
      cmocka_unit_test(test_matmul__broadcast_batch),
      cmocka_unit_test(test_matmul__mixed_ranks),
      cmocka_unit_test(test_matmul__k_zero_gives_zeros),
      cmocka_unit_test(test_matmul__empty_m_n_batch),
      cmocka_unit_test(test_matmul__inner_dims_differ_is_eshape),
      cmocka_unit_test(test_matmul__batch_dims_incompatible_is_eshape),
      cmocka_unit_test(test_matmul__rank1_operand_fails),
      cmocka_unit_test(test_matmul__i32_is_edtype),
      cmocka_unit_test(test_matmul__mixed_dtypes_is_edtype),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
