/* matmul against naive triple loops in double: every GRAFT_TRANS_A/B combo,
 * rank 2, batched, broadcast batch dims, mixed ranks, empty and odd sizes,
 * tiled products (column, row and 2-D tiles) under every executor, and the
 * shape / dtype errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"
#include "kernels/kernels_int.h"
#include "sched/sched.h"

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

/* Whether the oracle checks row (or column) i of S: all of them in small
 * products, else those at either side of every multiple of 16 (where any
 * tile of any split starts or ends: tiles are aligned to 16) and the last. */
static int oracle_checks(int64_t i, int64_t S, int sparse) {
  return !sparse || i % 16 == 0 || i % 16 == 15 || i == S - 1;
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
  const int sparse = n_batch * M * N * K > ((int64_t)1 << 26);
  for (int64_t bi = 0; bi < n_batch; bi++) {
    int64_t oa = tu_bcast_src(nob, os, bi, c->na, c->ba) * M * K;
    int64_t ob = tu_bcast_src(nob, os, bi, c->nb, c->bb) * K * N;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        if (!oracle_checks(m, M, sparse) || !oracle_checks(n, N, sparse)) continue;
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

/* ---- tiled products on many runtimes ------------------------------------ */

/* The runtimes tiled cases run on: seq, ws at 1 to 8 threads
 * (oversubscribed on a small machine) and omp at 2 and 3; a mask picks
 * some (bit r: k_runs[r]). */
static const struct { const char *sched; int threads; } k_runs[] = {
    {"seq", 1}, {"ws", 1}, {"ws", 2}, {"ws", 3}, {"ws", 4}, {"ws", 5}, {"ws", 6},
    {"ws", 7},  {"ws", 8}, {"omp", 2}, {"omp", 3}};
#define RUNS_ALL ((1u << TU_N_OF(k_runs)) - 1)
/* seq, ws at 2, 3 and 8, omp at 2 */
#define RUNS_FEW (1u << 0 | 1u << 2 | 1u << 3 | 1u << 8 | 1u << 9)

static void runtimes_open(unsigned mask, int64_t grain, graft_runtime **rts) {
  for (size_t r = 0; r < TU_N_OF(k_runs); r++)
    rts[r] = (mask >> r) & 1 ? tu_runtime_of(k_runs[r].sched, k_runs[r].threads, grain) : NULL;
}

static void runtimes_close(graft_runtime **rts) {
  for (size_t r = 0; r < TU_N_OF(k_runs); r++) graft_runtime_destroy(rts[r]);
}

/* The plan of f's last call: its one matmul node's tiling, checked to be
 * rb row blocks x cb column runs per batch (batches of N columns). */
static void assert_2d_tiling(graft_function *f, int64_t batches, int64_t rb, int64_t cb,
                             int64_t N, const char *ctx) {
  const graft__plan *p = graft__function_plan(f);
  if (!p) fail_msg("%s: no plan", ctx);
  int found = 0;
  for (uint32_t i = 0; i < p->n_order; i++) {
    if (p->kargs[i].node->op != GRAFT__OP_MATMUL) continue;
    const graft__tiling *tl = &p->tiling[i];
    found++;
    if (tl->units != batches * rb * N || tl->per_seg != cb || tl->seg != N ||
        tl->n != batches * rb * cb)
      fail_msg("%s: tiling units %lld seg %lld per_seg %d n %d, want %lld row blocks x %lld "
               "column runs of %lld columns in %lld batches", ctx, (long long)tl->units,
               (long long)tl->seg, tl->per_seg, tl->n, (long long)rb, (long long)cb,
               (long long)N, (long long)batches);
  }
  assert_int_equal(found, 1);
}

/* Case c's product in dtype dt under flags (random operands from rng) on
 * each runtime rts[r] that is not NULL: each call runs as several tiles
 * (rb > 0: exactly rb row blocks x cb column runs per batch), the first
 * matches the oracle and the others are bitwise equal to it. */
static void check_runs(const mm_case *c, graft_dtype dt, unsigned flags, tu_rng *rng,
                       graft_runtime *const *rts, int64_t grain, int64_t rb, int64_t cb) {
  int64_t as[GRAFT_MAX_RANK], bs[GRAFT_MAX_RANK], os[GRAFT_MAX_RANK];
  const int64_t batches = tu_numel(case_shapes(c, flags, as, bs, os), os);
  graft_tensor *in[2], *ref = NULL;
  const char *ref_run = NULL;
  case_inputs(c, dt, flags, rng, in);
  for (size_t r = 0; r < TU_N_OF(k_runs); r++) {
    if (!rts[r]) continue;
    char ctx[192];
    snprintf(ctx, sizeof ctx, "%s grain %lld %s flags=%u %s x%d", c->name, (long long)grain,
             graft_dtype_name(dt), flags, k_runs[r].sched, k_runs[r].threads);
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
    if (rb) {
      assert_2d_tiling(f, batches, rb, cb, c->n, ctx);
      if (ps.tiles != batches * rb * cb)
        fail_msg("%s: %lld tiles, want %lld", ctx, (long long)ps.tiles,
                 (long long)(batches * rb * cb));
    }
    graft_function_destroy(f);
    if (!ref) {
      check_oracle(c, flags, in, out, ctx);
      ref = out;
      ref_run = k_runs[r].sched;
      continue;
    }
    if (!tu_bitwise_equal(out, ref)) fail_msg("%s: differs bitwise from %s", ctx, ref_run);
    graft_tensor_destroy(out);
  }
  graft_tensor_destroy(ref);
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
  graft_runtime *rts[TU_N_OF(k_runs)];
  runtimes_open(RUNS_FEW, 0, rts);
  tu_rng rng = {0x711e};
  for (size_t i = 0; i < TU_N_OF(cases); i++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++)
      for (unsigned flags = 0; flags < 4; flags++)
        check_runs(&cases[i], k_dtypes[d], flags, &rng, rts, 0, 0, 0);
  runtimes_close(rts);
}

/* ---- 2-D tiles ---------------------------------------------------------- */

/* A product that the grain cuts into rb x cb tiles per batch, run on the
 * runtimes of mask. */
typedef struct tile_case {
  mm_case c;
  int64_t grain;  /* 0: the default */
  int64_t rb, cb; /* row blocks, column runs per batch */
  unsigned mask;
} tile_case;

/* Products whose rows and columns both split: at GRAFT_GRAIN=16384 a
 * 1024^3 product is 4 x 4 tiles of 256 x 256 (the 1-D split made 8); at
 * smaller grains, smaller products split likewise, with sizes that are not
 * multiples of the blocks (100 rows: 32 + 32 + 32 + 4; 333 rows: 4 x 80 +
 * 13), batched and with broadcast batch dims, and with a short inner dim.
 * Every flag combination, f32 and f64; bitwise the same under seq, ws at 1
 * to 8 threads and omp (the 1024^3 case on seq, ws at 2, 3 and 8, omp at
 * 2). */
static void test_matmul__2d_tiles_bitwise_across_threads(void **state) {
  (void)state;
  static const tile_case cases[] = {
      {{"100x2048x140", 0, {0}, 0, {0}, 100, 2048, 140}, 128, 4, 5, RUNS_ALL},
      {{"[2]x[2] 130x1024x90", 1, {2}, 1, {2}, 130, 1024, 90}, 64, 5, 3, RUNS_ALL},
      {{"[2,1]x[3] 64x512x72", 2, {2, 1}, 1, {3}, 64, 512, 72}, 64, 2, 3, RUNS_ALL},
      {{"333x64x300", 0, {0}, 0, {0}, 333, 64, 300}, 64, 5, 4, RUNS_ALL},
      {{"1024x1024x1024", 0, {0}, 0, {0}, 1024, 1024, 1024}, 16384, 4, 4, RUNS_FEW},
  };
  tu_rng rng = {0x2d71e5};
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    const tile_case *tc = &cases[i];
    graft_runtime *rts[TU_N_OF(k_runs)];
    runtimes_open(tc->mask, tc->grain, rts);
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++)
      for (unsigned flags = 0; flags < 4; flags++)
        check_runs(&tc->c, k_dtypes[d], flags, &rng, rts, tc->grain, tc->rb, tc->cb);
    runtimes_close(rts);
  }
}

/* The kernel's side of the units contract (kernels_int.h), called
 * directly: [2, 100, 33] @ [33, 70] (b broadcast over the batch) cut into
 * rb = 4 row blocks of 32, 32, 32 and 4 rows per batch and runs of 16
 * columns, each tile one call, give what the reference kernel gives over
 * the same tiles and over the whole range, within rounding; unit counts
 * that are not whole row blocks of N columns, or that would leave a block
 * empty (8 blocks of 16 cover 100 rows in 7), are refused as internal
 * errors. */
static void test_matmul_kernel__row_block_tiles_match_reference(void **state) {
  (void)state;
  enum { B = 2, M = 100, K = 33, N = 70, RB = 4, LEN = 16 };
  static const int64_t as[3] = {B, M, K}, bs[2] = {K, N}, os[3] = {B, M, N};
  tu_rng rng = {0xb10c};
  graft_tensor *a = tu_tensor_rand(&rng, GRAFT_F64, 3, as, -1, 1);
  graft_tensor *b = tu_tensor_rand(&rng, GRAFT_F64, 2, bs, -1, 1);
  double *got = calloc((size_t)(B * M * N), sizeof *got), *ref = calloc((size_t)(B * M * N), sizeof *ref);
  assert_non_null(got);
  assert_non_null(ref);
  graft__node node;
  memset(&node, 0, sizeof node);
  node.op = GRAFT__OP_MATMUL;
  node.dtype = GRAFT_F64;
  node.rank = 3;
  node.n_in = 2;
  graft__tview va = {graft_tensor_data(a), B * M * K, GRAFT_F64, 3, as};
  graft__tview vb = {graft_tensor_data(b), K * N, GRAFT_F64, 2, bs};
  graft__tview vc = {got, B * M * N, GRAFT_F64, 3, os};
  const graft__tview *vin[2] = {&va, &vb};
  char msg[GRAFT__MSG_LEN] = "";
  graft__kargs k;
  memset(&k, 0, sizeof k);
  k.node = &node;
  k.n_in = 2;
  k.in = vin;
  k.out = &vc;
  k.msg = msg;
  k.units = B * RB * N;
  const graft__tiling tl = {B * RB * N, N, LEN, (N + LEN - 1) / LEN, B * RB * ((N + LEN - 1) / LEN), 0};
  for (int64_t t = 0; t < tl.n; t++) {
    int64_t u0, u1;
    graft__tile_range(&tl, t, &u0, &u1);
    vc.data = got;
    if (graft__k_MATMUL(&k, u0, u1) != GRAFT_OK) fail_msg("tile %lld: %s", (long long)t, msg);
    vc.data = ref;
    if (graft__matmul_ref(&k, u0, u1) != GRAFT_OK) fail_msg("ref tile %lld: %s", (long long)t, msg);
  }
  double *whole = calloc((size_t)(B * M * N), sizeof *whole);
  assert_non_null(whole);
  vc.data = whole;
  assert_int_equal(graft__matmul_ref(&k, 0, k.units), GRAFT_OK);
  for (int64_t i = 0; i < B * M * N; i++)
    if (fabs(got[i] - ref[i]) > 1e-12 * K || ref[i] != whole[i])
      fail_msg("element %lld: tiles %.17g, reference tiles %.17g, whole %.17g", (long long)i,
               got[i], ref[i], whole[i]);
  static const int64_t bad_units[] = {B * RB * N + 1, B * 8 * N, B * (M + 1) * N, 0};
  for (size_t i = 0; i < TU_N_OF(bad_units); i++) {
    k.units = bad_units[i];
    msg[0] = '\0';
    assert_int_equal(graft__k_MATMUL(&k, 0, 1), GRAFT_EINTERNAL);
    tu_assert_msg_has(msg, "row blocks");
  }
  free(whole);
  free(ref);
  free(got);
  graft_tensor_destroy(a);
  graft_tensor_destroy(b);
}

/* At the default grain the layers of bench_mlp (batch 256) and a 1024^3
 * product keep the 1-D tiles they had before 2-D tiles existed, and
 * products with twice the work or more split in 2-D: 1024 x 2048 x 1024
 * and 512 x 2048 x 2048 in 16 tiles of 256 x 256 (tile counts: the rule in
 * kernels_int.h). */
static void test_matmul__default_grain_tile_counts(void **state) {
  (void)state;
  static const struct { int64_t m, k, n; unsigned flags; int64_t tiles; } cases[] = {
      {256, 784, 1024, 0, 4},             {256, 1024, 1024, 0, 4},
      {256, 1024, 10, 0, 4},              {1024, 256, 1024, GRAFT_TRANS_A, 4},
      {784, 256, 1024, GRAFT_TRANS_A, 4}, {256, 1024, 1024, GRAFT_TRANS_B, 4},
      {256, 10, 1024, GRAFT_TRANS_B, 4},  {4096, 4096, 1, 0, 64},
      {1024, 1024, 1024, 0, 4},           {1024, 2048, 1024, 0, 16},
      {512, 2048, 2048, GRAFT_TRANS_A, 16},
  };
  graft_runtime *rt = tu_runtime_of("seq", 1, 0);
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    const int ta = (cases[i].flags & GRAFT_TRANS_A) != 0, tb = (cases[i].flags & GRAFT_TRANS_B) != 0;
    const int64_t m = cases[i].m, k = cases[i].k, n = cases[i].n;
    int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n};
    graft_tensor *in[2] = {NULL, NULL}, *out = NULL;
    assert_int_equal(graft_tensor_create(GRAFT_F32, 2, sa, &in[0]), GRAFT_OK);
    assert_int_equal(graft_tensor_create(GRAFT_F32, 2, sb, &in[1]), GRAFT_OK);
    memset(graft_tensor_data(in[0]), 0, (size_t)(m * k) * sizeof(float));
    memset(graft_tensor_data(in[1]), 0, (size_t)(k * n) * sizeof(float));
    graft_function_desc fd = {.name = "mm", .trace = trace_matmul, .user = (void *)&cases[i].flags,
                              .n_inputs = 2, .n_outputs = 1};
    graft_function *f = NULL;
    assert_int_equal(graft_function_create(rt, &fd, &f), GRAFT_OK);
    assert_int_equal(graft_function_call(f, 2, in, 1, &out), GRAFT_OK);
    graft_plan_stats ps;
    assert_int_equal(graft_function_stats(f, &ps), GRAFT_OK);
    if (ps.tiles != cases[i].tiles)
      fail_msg("%lldx%lldx%lld flags=%u: %lld tiles, want %lld", (long long)m, (long long)k,
               (long long)n, cases[i].flags, (long long)ps.tiles, (long long)cases[i].tiles);
    graft_function_destroy(f);
    graft_tensor_destroy(out);
    graft_tensor_destroy(in[0]);
    graft_tensor_destroy(in[1]);
  }
  graft_runtime_destroy(rt);
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
      cmocka_unit_test(test_matmul__2d_tiles_bitwise_across_threads),
      cmocka_unit_test(test_matmul__default_grain_tile_counts),
      cmocka_unit_test(test_matmul_kernel__row_block_tiles_match_reference),
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
