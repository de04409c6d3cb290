/* Shape ops (transpose, reshape, broadcast_to, sum_to_shape, slice, concat,
 * one_hot, cast) against naive index arithmetic, for f32/f64/i32, and their
 * argument errors (status and a message naming the op). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

TU_RUNTIME_GROUP();

static const graft_dtype k_dtypes[] = {GRAFT_F32, GRAFT_F64, GRAFT_I32};

enum { K_TRANSPOSE, K_RESHAPE, K_BROADCAST_TO, K_SUM_TO_SHAPE, K_SLICE, K_CONCAT, K_ONE_HOT, K_CAST };

/* Parameters of the op under test; which fields count depends on kind. */
typedef struct shape_param {
  int kind;
  const int *perm;              /* transpose (NULL: reverse) */
  int rank;                     /* reshape, broadcast_to, sum_to_shape */
  const int64_t *shape;
  const int64_t *begin, *size;  /* slice */
  int axis;                     /* concat */
  int64_t depth;                /* one_hot */
  graft_dtype dt;               /* one_hot, cast */
} shape_param;

static graft_status trace_shape(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_out;
  const shape_param *p = user;
  switch (p->kind) {
  case K_TRANSPOSE: out[0] = graft_transpose(t, in[0], p->perm); break;
  case K_RESHAPE: out[0] = graft_reshape(t, in[0], p->rank, p->shape); break;
  case K_BROADCAST_TO: out[0] = graft_broadcast_to(t, in[0], p->rank, p->shape); break;
  case K_SUM_TO_SHAPE: out[0] = graft_sum_to_shape(t, in[0], p->rank, p->shape); break;
  case K_SLICE: out[0] = graft_slice(t, in[0], p->begin, p->size); break;
  case K_CONCAT: out[0] = graft_concat(t, n_in, in, p->axis); break;
  case K_ONE_HOT: out[0] = graft_one_hot(t, in[0], p->depth, p->dt); break;
  case K_CAST: out[0] = graft_cast(t, in[0], p->dt); break;
  default: return GRAFT_EINTERNAL;
  }
  return GRAFT_OK;
}

static const char *const k_names[] = {
    [K_TRANSPOSE] = "transpose",       [K_RESHAPE] = "reshape", [K_BROADCAST_TO] = "broadcast_to",
    [K_SUM_TO_SHAPE] = "sum_to_shape", [K_SLICE] = "slice",     [K_CONCAT] = "concat",
    [K_ONE_HOT] = "one_hot",           [K_CAST] = "cast",
};

/* ---- local helpers ---------------------------------------------------- */

static graft_tensor *rand_tensor(tu_rng *r, graft_dtype dt, int rank, const int64_t *shape) {
  return dt == GRAFT_I32 ? tu_tensor_rand(r, dt, rank, shape, -1000, 1000)
                         : tu_tensor_rand(r, dt, rank, shape, -10.0, 10.0);
}

/* Run p on in[]; on success check dtype and shape of the result and return it. */
static graft_tensor *run_ok(const shape_param *p, int n_in, graft_tensor **in, graft_dtype dt,
                            int rank, const int64_t *dims, const char *ctx) {
  char msg[512];
  graft_tensor *out = NULL;
  tu_assert_run_ok(tu_run(g_rt, trace_shape, (void *)p, n_in, in, 1, &out, msg), ctx, msg);
  tu_assert_tensor(out, dt, rank, dims, ctx);
  return out;
}

static double *alloc_want(int64_t n) {
  double *w = malloc(sizeof(double) * ((size_t)n + 1));
  assert_non_null(w);
  return w;
}

/* Run p expecting failure `want` with a message naming the op and no output. */
static void expect_fail(const shape_param *p, int n_in, graft_tensor **in, graft_status want,
                        const char *ctx) {
  char msg[512];
  graft_tensor *out = NULL;
  graft_status st = tu_run(g_rt, trace_shape, (void *)p, n_in, in, 1, &out, msg);
  tu_assert_run_fails(st, want, out, msg, k_names[p->kind], ctx);
}

/* ---- transpose -------------------------------------------------------- */

static void test_transpose__perms_rank2_to_4(void **state) {
  (void)state;
  static const struct {
    int rank;
    int64_t shape[4];
    int reverse; /* perm NULL */
    int perm[4];
  } cases[] = {
      {2, {3, 4}, 0, {1, 0}},          {2, {3, 4}, 0, {0, 1}},          {2, {3, 4}, 1, {0}},
      {3, {2, 3, 4}, 0, {0, 1, 2}},    {3, {2, 3, 4}, 0, {0, 2, 1}},    {3, {2, 3, 4}, 0, {1, 0, 2}},
      {3, {2, 3, 4}, 0, {1, 2, 0}},    {3, {2, 3, 4}, 0, {2, 0, 1}},    {3, {2, 3, 4}, 0, {2, 1, 0}},
      {3, {2, 3, 4}, 1, {0}},          {3, {2, 1, 4}, 0, {1, 2, 0}},    {3, {2, 0, 4}, 0, {2, 0, 1}},
      {4, {2, 3, 4, 5}, 0, {0, 2, 1, 3}}, {4, {2, 3, 4, 5}, 0, {3, 2, 1, 0}},
      {4, {2, 3, 4, 5}, 0, {1, 3, 0, 2}}, {4, {2, 3, 4, 5}, 0, {2, 0, 3, 1}},
      {4, {2, 3, 4, 5}, 1, {0}},
  };
  tu_rng rng = {101};
  for (size_t c = 0; c < TU_N_OF(cases); c++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
      int r = cases[c].rank;
      const int64_t *s = cases[c].shape;
      int perm[4];
      for (int i = 0; i < r; i++) perm[i] = cases[c].reverse ? r - 1 - i : cases[c].perm[i];
      int64_t os[4];
      for (int i = 0; i < r; i++) os[i] = s[perm[i]];
      char ctx[96];
      snprintf(ctx, sizeof ctx, "transpose case %zu %s", c, graft_dtype_name(k_dtypes[d]));

      graft_tensor *x = rand_tensor(&rng, k_dtypes[d], r, s);
      int64_t n = tu_numel(r, s);
      double *want = alloc_want(n);
      for (int64_t j = 0; j < n; j++) {
        int64_t oi[4], ii[4];
        tu_unravel(j, r, os, oi);
        for (int i = 0; i < r; i++) ii[perm[i]] = oi[i];
        want[j] = tu_get(x, tu_ravel(ii, r, s));
      }
      shape_param p = {.kind = K_TRANSPOSE, .perm = cases[c].reverse ? NULL : cases[c].perm};
      graft_tensor *out = run_ok(&p, 1, &x, k_dtypes[d], r, os, ctx);
      tu_assert_values(out, want, n, 0.0, ctx);
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
      free(want);
    }
}

static void test_transpose__bad_perm_is_einval(void **state) {
  (void)state;
  static const int perms[][3] = {{0, 0, 1}, {0, 1, 3}, {-1, 0, 1}, {2, 2, 2}};
  int64_t s[3] = {2, 3, 4};
  tu_rng rng = {102};
  graft_tensor *x = rand_tensor(&rng, GRAFT_F32, 3, s);
  for (size_t i = 0; i < TU_N_OF(perms); i++) {
    shape_param p = {.kind = K_TRANSPOSE, .perm = perms[i]};
    char ctx[64];
    snprintf(ctx, sizeof ctx, "perm {%d,%d,%d}", perms[i][0], perms[i][1], perms[i][2]);
    expect_fail(&p, 1, &x, GRAFT_EINVAL, ctx);
  }
  graft_tensor_destroy(x);
}

/* ---- reshape ---------------------------------------------------------- */

static void test_reshape__infer_and_rank0(void **state) {
  (void)state;
  static const struct {
    int in_rank;
    int64_t in[3];
    int rank;
    int64_t target[4];
    int64_t want[4]; /* resolved target */
  } cases[] = {
      {3, {2, 3, 4}, 2, {4, -1}, {4, 6}},
      {3, {2, 3, 4}, 1, {-1}, {24}},
      {3, {2, 3, 4}, 3, {2, -1, 2}, {2, 6, 2}},
      {3, {2, 3, 4}, 4, {3, 2, 2, 2}, {3, 2, 2, 2}},
      {3, {2, 3, 4}, 2, {-1, 1}, {24, 1}},
      {2, {1, 1}, 0, {0}, {0}},          /* to rank 0 */
      {1, {1}, 0, {0}, {0}},             /* to rank 0 */
      {0, {0}, 3, {1, 1, 1}, {1, 1, 1}}, /* from rank 0 */
      {0, {0}, 1, {-1}, {1}},            /* from rank 0, inferred */
      {2, {3, 0}, 2, {0, 5}, {0, 5}},    /* zero-size */
  };
  tu_rng rng = {201};
  for (size_t c = 0; c < TU_N_OF(cases); c++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
      char ctx[96];
      snprintf(ctx, sizeof ctx, "reshape case %zu %s", c, graft_dtype_name(k_dtypes[d]));
      graft_tensor *x = rand_tensor(&rng, k_dtypes[d], cases[c].in_rank, cases[c].in);
      int64_t n = graft_tensor_numel(x);
      double *want = alloc_want(n);
      for (int64_t i = 0; i < n; i++) want[i] = tu_get(x, i);
      shape_param p = {.kind = K_RESHAPE, .rank = cases[c].rank, .shape = cases[c].target};
      graft_tensor *out = run_ok(&p, 1, &x, k_dtypes[d], cases[c].rank, cases[c].want, ctx);
      tu_assert_values(out, want, n, 0.0, ctx);
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
      free(want);
    }
}

static void test_reshape__size_mismatch_is_eshape(void **state) {
  (void)state;
  int64_t s[3] = {2, 3, 4};
  static const int64_t t1[2] = {5, 5}, t2[2] = {-1, 5}, t3[1] = {25}, t4[3] = {2, 3, 5};
  static const struct { int rank; const int64_t *t; } cases[] = {{2, t1}, {2, t2}, {1, t3}, {3, t4}};
  tu_rng rng = {202};
  graft_tensor *x = rand_tensor(&rng, GRAFT_F64, 3, s);
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    shape_param p = {.kind = K_RESHAPE, .rank = cases[i].rank, .shape = cases[i].t};
    char ctx[64];
    snprintf(ctx, sizeof ctx, "reshape [2,3,4] case %zu", i);
    expect_fail(&p, 1, &x, GRAFT_ESHAPE, ctx);
  }
  /* A rank-0 value has one element. */
  graft_tensor *y = rand_tensor(&rng, GRAFT_F64, 0, NULL);
  static const int64_t t5[1] = {2};
  shape_param p = {.kind = K_RESHAPE, .rank = 1, .shape = t5};
  expect_fail(&p, 1, &y, GRAFT_ESHAPE, "reshape [] -> [2]");
  graft_tensor_destroy(y);
  graft_tensor_destroy(x);
}

static void test_reshape__two_inferred_dims_is_einval(void **state) {
  (void)state;
  int64_t s[3] = {2, 3, 4};
  static const int64_t t[3] = {-1, -1, 2};
  tu_rng rng = {203};
  graft_tensor *x = rand_tensor(&rng, GRAFT_I32, 3, s);
  shape_param p = {.kind = K_RESHAPE, .rank = 3, .shape = t};
  expect_fail(&p, 1, &x, GRAFT_EINVAL, "reshape [-1,-1,2]");
  graft_tensor_destroy(x);
}

/* ---- broadcast_to ----------------------------------------------------- */

static void test_broadcast_to__numpy_rules(void **state) {
  (void)state;
  static const struct {
    int in_rank;
    int64_t in[3];
    int rank;
    int64_t target[3];
  } cases[] = {
      {2, {3, 1}, 3, {2, 3, 4}}, {0, {0}, 2, {2, 2}},       {1, {4}, 2, {3, 4}},
      {2, {1, 1}, 2, {1, 1}},    {3, {2, 1, 4}, 3, {2, 3, 4}}, {2, {3, 4}, 2, {3, 4}},
      {1, {1}, 3, {2, 3, 4}},    {2, {3, 1}, 2, {3, 0}},    {1, {1}, 1, {0}},
  };
  tu_rng rng = {301};
  for (size_t c = 0; c < TU_N_OF(cases); c++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
      char ctx[96];
      snprintf(ctx, sizeof ctx, "broadcast_to case %zu %s", c, graft_dtype_name(k_dtypes[d]));
      graft_tensor *x = rand_tensor(&rng, k_dtypes[d], cases[c].in_rank, cases[c].in);
      int64_t n = tu_numel(cases[c].rank, cases[c].target);
      double *want = alloc_want(n);
      for (int64_t j = 0; j < n; j++)
        want[j] = tu_get(x, tu_bcast_src(cases[c].rank, cases[c].target, j, cases[c].in_rank,
                                         cases[c].in));
      shape_param p = {.kind = K_BROADCAST_TO, .rank = cases[c].rank, .shape = cases[c].target};
      graft_tensor *out = run_ok(&p, 1, &x, k_dtypes[d], cases[c].rank, cases[c].target, ctx);
      tu_assert_values(out, want, n, 0.0, ctx);
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
      free(want);
    }
}

static void test_broadcast_to__incompatible_is_eshape(void **state) {
  (void)state;
  static const struct {
    int in_rank;
    int64_t in[2];
    int rank;
    int64_t target[2];
  } cases[] = {
      {2, {3, 2}, 2, {3, 4}}, /* 2 vs 4 */
      {1, {3}, 0, {0}},       /* rank cannot shrink */
      {2, {2, 3}, 1, {3}},    /* rank cannot shrink */
      {1, {2}, 1, {0}},       /* 2 vs 0 */
  };
  tu_rng rng = {302};
  for (size_t c = 0; c < TU_N_OF(cases); c++) {
    graft_tensor *x = rand_tensor(&rng, GRAFT_F32, cases[c].in_rank, cases[c].in);
    shape_param p = {.kind = K_BROADCAST_TO, .rank = cases[c].rank, .shape = cases[c].target};
    char ctx[64];
    snprintf(ctx, sizeof ctx, "broadcast_to case %zu", c);
    expect_fail(&p, 1, &x, GRAFT_ESHAPE, ctx);
    graft_tensor_destroy(x);
  }
}

/* ---- sum_to_shape ----------------------------------------------------- */

static void test_sum_to_shape__reduces_broadcast_dims(void **state) {
  (void)state;
  static const struct {
    int in_rank;
    int64_t in[3];
    int rank;
    int64_t target[3];
  } cases[] = {
      {3, {2, 3, 4}, 2, {3, 1}},    {3, {2, 3, 4}, 0, {0}},       {3, {2, 3, 4}, 3, {1, 1, 4}},
      {3, {2, 3, 4}, 3, {2, 3, 4}}, {3, {2, 3, 4}, 1, {4}},       {3, {2, 3, 4}, 3, {2, 1, 1}},
      {3, {2, 3, 4}, 3, {1, 3, 1}}, {3, {2, 3, 4}, 2, {1, 1}},    {3, {4, 1, 3}, 2, {1, 3}},
      {2, {0, 3}, 1, {3}},          {2, {0, 3}, 2, {1, 1}},       {2, {3, 0}, 2, {3, 1}},
  };
  tu_rng rng = {401};
  for (size_t c = 0; c < TU_N_OF(cases); c++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
      graft_dtype dt = k_dtypes[d];
      char ctx[96];
      snprintf(ctx, sizeof ctx, "sum_to_shape case %zu %s", c, graft_dtype_name(dt));
      /* positive floats: no cancellation to blur the relative tolerance */
      graft_tensor *x = dt == GRAFT_I32
                            ? tu_tensor_rand(&rng, dt, cases[c].in_rank, cases[c].in, -100, 100)
                            : tu_tensor_rand(&rng, dt, cases[c].in_rank, cases[c].in, 0.5, 1.5);
      int64_t n = tu_numel(cases[c].rank, cases[c].target);
      double *want = alloc_want(n);
      for (int64_t j = 0; j < n; j++) want[j] = 0.0;
      for (int64_t e = 0; e < graft_tensor_numel(x); e++)
        want[tu_bcast_src(cases[c].in_rank, cases[c].in, e, cases[c].rank, cases[c].target)] +=
            tu_get(x, e);
      shape_param p = {.kind = K_SUM_TO_SHAPE, .rank = cases[c].rank, .shape = cases[c].target};
      graft_tensor *out = run_ok(&p, 1, &x, dt, cases[c].rank, cases[c].target, ctx);
      tu_assert_values(out, want, n, dt == GRAFT_F32 ? 1e-5 : dt == GRAFT_F64 ? 1e-13 : 0.0, ctx);
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
      free(want);
    }
}

static void test_sum_to_shape__incompatible_is_eshape(void **state) {
  (void)state;
  int64_t s[3] = {2, 3, 4};
  static const int64_t t1[1] = {3}, t2[2] = {2, 4}, t3[4] = {1, 2, 3, 4};
  static const struct { int rank; const int64_t *t; } cases[] = {{1, t1}, {2, t2}, {4, t3}};
  tu_rng rng = {402};
  graft_tensor *x = rand_tensor(&rng, GRAFT_F32, 3, s);
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    shape_param p = {.kind = K_SUM_TO_SHAPE, .rank = cases[i].rank, .shape = cases[i].t};
    char ctx[64];
    snprintf(ctx, sizeof ctx, "sum_to_shape [2,3,4] case %zu", i);
    expect_fail(&p, 1, &x, GRAFT_ESHAPE, ctx);
  }
  graft_tensor_destroy(x);
}

/* ---- slice ------------------------------------------------------------ */

static void check_slices(const int64_t (*begin)[3], const int64_t (*size)[3],
                         const int64_t (*want_shape)[3], size_t n_cases, uint64_t seed) {
  static const int64_t s[3] = {4, 5, 6};
  tu_rng rng = {seed};
  for (size_t c = 0; c < n_cases; c++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
      char ctx[96];
      snprintf(ctx, sizeof ctx, "slice case %zu %s", c, graft_dtype_name(k_dtypes[d]));
      graft_tensor *x = rand_tensor(&rng, k_dtypes[d], 3, s);
      int64_t n = tu_numel(3, want_shape[c]);
      double *want = alloc_want(n);
      for (int64_t j = 0; j < n; j++) {
        int64_t idx[3];
        tu_unravel(j, 3, want_shape[c], idx);
        for (int i = 0; i < 3; i++) idx[i] += begin[c][i];
        want[j] = tu_get(x, tu_ravel(idx, 3, s));
      }
      shape_param p = {.kind = K_SLICE, .begin = begin[c], .size = size[c]};
      graft_tensor *out = run_ok(&p, 1, &x, k_dtypes[d], 3, want_shape[c], ctx);
      tu_assert_values(out, want, n, 0.0, ctx);
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
      free(want);
    }
}

static void test_slice__begin_size_and_to_end(void **state) {
  (void)state;
  static const int64_t begin[][3] = {{1, 0, 2}, {0, 0, 0}, {3, 4, 5}, {1, 2, 3}, {0, 1, 0}};
  static const int64_t size[][3] = {{2, -1, 3}, {-1, -1, -1}, {1, 1, 1}, {-1, 2, -1}, {4, 4, 6}};
  static const int64_t want[][3] = {{2, 5, 3}, {4, 5, 6}, {1, 1, 1}, {3, 2, 3}, {4, 4, 6}};
  check_slices(begin, size, want, TU_N_OF(begin), 501);
}

static void test_slice__zero_size(void **state) {
  (void)state;
  static const int64_t begin[][3] = {{2, 1, 0}, {0, 0, 3}, {4, 0, 6}, {1, 5, 2}};
  static const int64_t size[][3] = {{0, 2, -1}, {-1, -1, 0}, {-1, 2, -1}, {2, -1, 1}};
  static const int64_t want[][3] = {{0, 2, 6}, {4, 5, 0}, {0, 2, 0}, {2, 0, 1}};
  check_slices(begin, size, want, TU_N_OF(begin), 502);
}

static void test_slice__out_of_bounds_is_einval(void **state) {
  (void)state;
  static const int64_t begin[][3] = {{0, 0, 5}, {-1, 0, 0}, {0, 0, 0}, {5, 0, 0}, {0, 0, 0}};
  static const int64_t size[][3] = {{1, 1, 2}, {1, 1, 1}, {5, 1, 1}, {0, 1, 1}, {1, -2, 1}};
  int64_t s[3] = {4, 5, 6};
  tu_rng rng = {503};
  graft_tensor *x = rand_tensor(&rng, GRAFT_F32, 3, s);
  for (size_t c = 0; c < TU_N_OF(begin); c++) {
    shape_param p = {.kind = K_SLICE, .begin = begin[c], .size = size[c]};
    char ctx[64];
    snprintf(ctx, sizeof ctx, "slice [4,5,6] case %zu", c);
    expect_fail(&p, 1, &x, GRAFT_EINVAL, ctx);
  }
  graft_tensor_destroy(x);
}

/* ---- concat ----------------------------------------------------------- */

static void test_concat__each_axis(void **state) {
  (void)state;
  static const struct {
    int n;
    int axis;
    int rank;
    int64_t base[3];
    int64_t sizes[3]; /* each input's dim along axis */
  } cases[] = {
      {2, 0, 3, {2, 3, 4}, {2, 3}},     {2, 1, 3, {2, 3, 4}, {1, 2}},     {2, 2, 3, {2, 3, 4}, {4, 1}},
      {3, 0, 3, {2, 3, 4}, {1, 2, 3}},  {3, 1, 3, {2, 3, 4}, {3, 1, 2}},  {3, 2, 3, {2, 3, 4}, {2, 2, 5}},
      {2, -1, 3, {2, 3, 4}, {3, 2}},    {3, -2, 3, {2, 3, 4}, {1, 1, 1}}, {2, -3, 3, {2, 3, 4}, {1, 4}},
      {3, 1, 3, {2, 3, 4}, {2, 0, 1}},  {1, 0, 3, {2, 3, 4}, {2}},        {3, 0, 1, {5}, {1, 3, 2}},
      {2, -1, 2, {3, 0}, {2, 3}},
  };
  tu_rng rng = {601};
  for (size_t c = 0; c < TU_N_OF(cases); c++)
    for (size_t d = 0; d < TU_N_OF(k_dtypes); d++) {
      int r = cases[c].rank, n_in = cases[c].n;
      int ax = cases[c].axis < 0 ? cases[c].axis + r : cases[c].axis;
      char ctx[96];
      snprintf(ctx, sizeof ctx, "concat case %zu %s", c, graft_dtype_name(k_dtypes[d]));
      graft_tensor *in[3] = {NULL, NULL, NULL};
      int64_t shapes[3][3], os[3];
      memcpy(os, cases[c].base, sizeof os);
      os[ax] = 0;
      for (int k = 0; k < n_in; k++) {
        memcpy(shapes[k], cases[c].base, sizeof shapes[k]);
        shapes[k][ax] = cases[c].sizes[k];
        os[ax] += cases[c].sizes[k];
        in[k] = rand_tensor(&rng, k_dtypes[d], r, shapes[k]);
      }
      int64_t n = tu_numel(r, os);
      double *want = alloc_want(n);
      for (int64_t j = 0; j < n; j++) {
        int64_t idx[3] = {0, 0, 0};
        tu_unravel(j, r, os, idx);
        int k = 0;
        while (idx[ax] >= shapes[k][ax]) idx[ax] -= shapes[k++][ax];
        want[j] = tu_get(in[k], tu_ravel(idx, r, shapes[k]));
      }
      shape_param p = {.kind = K_CONCAT, .axis = cases[c].axis};
      graft_tensor *out = run_ok(&p, n_in, in, k_dtypes[d], r, os, ctx);
      tu_assert_values(out, want, n, 0.0, ctx);
      graft_tensor_destroy(out);
      for (int k = 0; k < n_in; k++) graft_tensor_destroy(in[k]);
      free(want);
    }
}

static void test_concat__mismatches(void **state) {
  (void)state;
  tu_rng rng = {602};
  int64_t s23[2] = {2, 3}, s231[3] = {2, 3, 1}, s34[2] = {3, 4}, s24[2] = {2, 4};
  graft_tensor *in[2];
  shape_param p = {.kind = K_CONCAT, .axis = 0};

  in[0] = rand_tensor(&rng, GRAFT_F32, 2, s23);
  in[1] = rand_tensor(&rng, GRAFT_F32, 3, s231);
  expect_fail(&p, 2, in, GRAFT_ESHAPE, "concat rank 2 with rank 3");
  graft_tensor_destroy(in[1]);

  in[1] = rand_tensor(&rng, GRAFT_F64, 2, s23);
  expect_fail(&p, 2, in, GRAFT_EDTYPE, "concat f32 with f64");
  graft_tensor_destroy(in[1]);

  in[1] = rand_tensor(&rng, GRAFT_I32, 2, s23);
  expect_fail(&p, 2, in, GRAFT_EDTYPE, "concat f32 with i32");
  graft_tensor_destroy(in[1]);

  in[1] = rand_tensor(&rng, GRAFT_F32, 2, s34);
  expect_fail(&p, 2, in, GRAFT_ESHAPE, "concat [2,3] with [3,4] on axis 0");
  graft_tensor_destroy(in[1]);

  in[1] = rand_tensor(&rng, GRAFT_F32, 2, s24);
  p.axis = 1; /* fine on axis 1 ... */
  char msg[512];
  graft_tensor *out = NULL;
  tu_assert_run_ok(tu_run(g_rt, trace_shape, &p, 2, in, 1, &out, msg),
                   "concat [2,3] with [2,4] on axis 1", msg);
  graft_tensor_destroy(out);
  p.axis = 0; /* ... not on axis 0 */
  expect_fail(&p, 2, in, GRAFT_ESHAPE, "concat [2,3] with [2,4] on axis 0");
  p.axis = 2;
  expect_fail(&p, 2, in, GRAFT_EINVAL, "concat axis 2 of rank 2");
  p.axis = -3;
  expect_fail(&p, 2, in, GRAFT_EINVAL, "concat axis -3 of rank 2");
  graft_tensor_destroy(in[1]);
  graft_tensor_destroy(in[0]);
}

/* ---- one_hot ---------------------------------------------------------- */

static void test_one_hot__labels_and_out_of_range(void **state) {
  (void)state;
  static const int32_t l0[6] = {0, 3, -1, 2, 4, 1};
  static const int32_t l1[5] = {0, 1, 0, -5, 0};
  static const int32_t l2[1] = {2};
  static const int32_t l3[4] = {7, 0, 6, 100};
  static const struct {
    int rank;
    int64_t shape[2];
    const int32_t *labels;
    int64_t depth;
  } cases[] = {
      {2, {2, 3}, l0, 4}, {1, {5}, l1, 1}, {0, {0}, l2, 3}, {1, {4}, l3, 7}, {1, {5}, l1, 0},
  };
  static const graft_dtype out_dts[] = {GRAFT_F32, GRAFT_F64};
  for (size_t c = 0; c < TU_N_OF(cases); c++)
    for (size_t d = 0; d < TU_N_OF(out_dts); d++) {
      char ctx[96];
      snprintf(ctx, sizeof ctx, "one_hot case %zu %s", c, graft_dtype_name(out_dts[d]));
      graft_tensor *x = NULL;
      assert_int_equal(graft_tensor_create(GRAFT_I32, cases[c].rank, cases[c].shape, &x), GRAFT_OK);
      int64_t nl = graft_tensor_numel(x), depth = cases[c].depth;
      memcpy(graft_tensor_data(x), cases[c].labels, sizeof(int32_t) * (size_t)nl);
      int64_t os[3];
      memcpy(os, cases[c].shape, sizeof(int64_t) * (size_t)cases[c].rank);
      os[cases[c].rank] = depth;
      double *want = alloc_want(nl * depth);
      for (int64_t i = 0; i < nl; i++)
        for (int64_t k = 0; k < depth; k++) want[i * depth + k] = cases[c].labels[i] == k ? 1.0 : 0.0;
      shape_param p = {.kind = K_ONE_HOT, .depth = depth, .dt = out_dts[d]};
      graft_tensor *out = run_ok(&p, 1, &x, out_dts[d], cases[c].rank + 1, os, ctx);
      tu_assert_values(out, want, nl * depth, 0.0, ctx);
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
      free(want);
    }
}

static void test_one_hot__bad_labels_dtype_depth(void **state) {
  (void)state;
  int64_t s[1] = {3};
  tu_rng rng = {701};
  static const graft_dtype float_dts[] = {GRAFT_F32, GRAFT_F64};
  for (size_t d = 0; d < TU_N_OF(float_dts); d++) {
    graft_tensor *x = tu_tensor_rand(&rng, float_dts[d], 1, s, 0, 3);
    shape_param p = {.kind = K_ONE_HOT, .depth = 4, .dt = GRAFT_F32};
    expect_fail(&p, 1, &x, GRAFT_EDTYPE, "one_hot with float labels");
    graft_tensor_destroy(x);
  }
  graft_tensor *x = tu_tensor_rand(&rng, GRAFT_I32, 1, s, 0, 3);
  shape_param p = {.kind = K_ONE_HOT, .depth = 4, .dt = GRAFT_I32};
  expect_fail(&p, 1, &x, GRAFT_EDTYPE, "one_hot to i32");
  p.dt = GRAFT_F64;
  p.depth = -1;
  expect_fail(&p, 1, &x, GRAFT_EINVAL, "one_hot depth -1");
  graft_tensor_destroy(x);
}

/* ---- cast ------------------------------------------------------------- */

/* Integer values in int32 / float range convert exactly between all dtypes. */
static void test_cast__integer_values_all_pairs(void **state) {
  (void)state;
  int64_t s[2] = {3, 7};
  tu_rng rng = {801};
  for (size_t a = 0; a < TU_N_OF(k_dtypes); a++)
    for (size_t b = 0; b < TU_N_OF(k_dtypes); b++) {
      graft_tensor *x = NULL;
      assert_int_equal(graft_tensor_create(k_dtypes[a], 2, s, &x), GRAFT_OK);
      double want[21];
      for (int i = 0; i < 21; i++) {
        want[i] = (double)tu_int(&rng, -100000, 100000);
        void *dp = graft_tensor_data(x);
        if (k_dtypes[a] == GRAFT_F32) ((float *)dp)[i] = (float)want[i];
        else if (k_dtypes[a] == GRAFT_F64) ((double *)dp)[i] = want[i];
        else ((int32_t *)dp)[i] = (int32_t)want[i];
      }
      char ctx[64];
      snprintf(ctx, sizeof ctx, "cast %s -> %s", graft_dtype_name(k_dtypes[a]),
               graft_dtype_name(k_dtypes[b]));
      shape_param p = {.kind = K_CAST, .dt = k_dtypes[b]};
      graft_tensor *out = run_ok(&p, 1, &x, k_dtypes[b], 2, s, ctx);
      tu_assert_values(out, want, 21, 0.0, ctx);
      graft_tensor_destroy(out);
      graft_tensor_destroy(x);
    }
}

/* f64 -> f32 rounds like a C conversion; f32 -> f64 is exact; large i32
 * round to the nearest f32. */
static void test_cast__rounding(void **state) {
  (void)state;
  int64_t s[1] = {40};
  tu_rng rng = {802};
  graft_tensor *x = tu_tensor_rand(&rng, GRAFT_F64, 1, s, -1e3, 1e3);
  double want[40];
  for (int i = 0; i < 40; i++) want[i] = (double)(float)tu_get(x, i);
  shape_param p = {.kind = K_CAST, .dt = GRAFT_F32};
  graft_tensor *out = run_ok(&p, 1, &x, GRAFT_F32, 1, s, "cast f64 -> f32");
  tu_assert_values(out, want, 40, 0.0, "cast f64 -> f32");
  graft_tensor_destroy(out);
  graft_tensor_destroy(x);

  x = tu_tensor_rand(&rng, GRAFT_F32, 1, s, -1e3, 1e3);
  for (int i = 0; i < 40; i++) want[i] = tu_get(x, i);
  p.dt = GRAFT_F64;
  out = run_ok(&p, 1, &x, GRAFT_F64, 1, s, "cast f32 -> f64");
  tu_assert_values(out, want, 40, 0.0, "cast f32 -> f64");
  graft_tensor_destroy(out);
  graft_tensor_destroy(x);

  static const int32_t big[5] = {16777217, INT32_MIN, INT32_MAX, 0, -16777219};
  int64_t s5[1] = {5};
  assert_int_equal(graft_tensor_create(GRAFT_I32, 1, s5, &x), GRAFT_OK);
  memcpy(graft_tensor_data(x), big, sizeof big);
  for (int i = 0; i < 5; i++) want[i] = (double)(float)big[i];
  p.dt = GRAFT_F32;
  out = run_ok(&p, 1, &x, GRAFT_F32, 1, s5, "cast i32 -> f32");
  tu_assert_values(out, want, 5, 0.0, "cast i32 -> f32");
  graft_tensor_destroy(out);
  for (int i = 0; i < 5; i++) want[i] = (double)big[i];
  p.dt = GRAFT_F64;
  out = run_ok(&p, 1, &x, GRAFT_F64, 1, s5, "cast i32 -> f64");
  tu_assert_values(out, want, 5, 0.0, "cast i32 -> f64");
  graft_tensor_destroy(out);
  graft_tensor_destroy(x);
}

static void test_cast__invalid_dtype_is_edtype(void **state) {
  (void)state;
  int64_t s[1] = {3};
  tu_rng rng = {803};
  graft_tensor *x = tu_tensor_rand(&rng, GRAFT_F32, 1, s, 0, 1);
  shape_param p = {.kind = K_CAST, .dt = (graft_dtype)7};
  expect_fail(&p, 1, &x, GRAFT_EDTYPE, "cast to dtype 7");
  graft_tensor_destroy(x);
}

/* concat of many values (more than any fixed input buffer): 40 scaled
 * copies of x along axis 0. */
#define MANY_CONCAT 40
static graft_status many_concat_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *xs[MANY_CONCAT];
  for (int k = 0; k < MANY_CONCAT; k++) xs[k] = graft_mul(t, in[0], graft_scalar(t, GRAFT_F64, k));
  out[0] = graft_concat(t, MANY_CONCAT, xs, 0);
  return GRAFT_OK;
}

static void test_graft_concat__forty_inputs(void **state) {
  (void)state;
  const int64_t s[] = {2, 3};
  const double x[] = {1, 2, 3, 4, 5, 6};
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 2, s, x)};
  graft_tensor *out[1] = {NULL};
  char msg[512];
  tu_assert_run_ok(tu_run(g_rt, many_concat_cb, NULL, 1, in, 1, out, msg), "concat of 40", msg);
  assert_int_equal(graft_tensor_shape(out[0])[0], 2 * MANY_CONCAT);
  for (int k = 0; k < MANY_CONCAT; k++)
    for (int i = 0; i < 6; i++) assert_true(tu_get(out[0], 6 * k + i) == k * x[i]);
  graft_tensor_destroy(out[0]);
  graft_tensor_destroy(in[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_concat__forty_inputs),
      cmocka_unit_test(test_transpose__perms_rank2_to_4),
      cmocka_unit_test(test_transpose__bad_perm_is_einval),
      cmocka_unit_test(test_reshape__infer_and_rank0),
      cmocka_unit_test(test_reshape__size_mismatch_is_eshape),
      cmocka_unit_test(test_reshape__two_inferred_dims_is_einval),
      cmocka_unit_test(test_broadcast_to__numpy_rules),
      cmocka_unit_test(test_broadcast_to__incompatible_is_eshape),
      cmocka_unit_test(test_sum_to_shape__reduces_broadcast_dims),
      cmocka_unit_test(test_sum_to_shape__incompatible_is_eshape),
      cmocka_unit_test(test_slice__begin_size_and_to_end),
      cmocka_unit_test(test_slice__zero_size),
      cmocka_unit_test(test_slice__out_of_bounds_is_einval),
      cmocka_unit_test(test_concat__each_axis),
      cmocka_unit_test(test_concat__mismatches),
      cmocka_unit_test(test_one_hot__labels_and_out_of_range),
      cmocka_unit_test(test_one_hot__bad_labels_dtype_depth),
      cmocka_unit_test(test_cast__integer_values_all_pairs),
      cmocka_unit_test(test_cast__rounding),
      cmocka_unit_test(test_cast__invalid_dtype_is_edtype),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
