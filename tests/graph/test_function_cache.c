/* The function cache: one trace per signature, symbolic dims, plan LRU,
 * statistics, DOT export, and the ways outputs can be bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

TU_RUNTIME_GROUP();

/* ---- one trace per signature ----------------------------------------- */

typedef struct counted {
  int traces;
  double host_k; /* read by the callback at trace time only */
} counted;

/* out = x * k + 1, with k captured from host memory at trace time. */
static graft_status affine_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  counted *c = user;
  c->traces++;
  graft_dtype dt = graft_value_dtype(in[0]);
  out[0] = graft_add(t, graft_mul(t, in[0], graft_scalar(t, dt, c->host_k)), graft_scalar(t, dt, 1.0));
  return GRAFT_OK;
}

static void check_affine(const graft_tensor *x, const graft_tensor *y, double k) {
  int64_t n = graft_tensor_numel(x);
  assert_int_equal(graft_tensor_numel(y), n);
  assert_int_equal(graft_tensor_dtype(y), graft_tensor_dtype(x));
  tu_assert_shape(y, graft_tensor_rank(x), graft_tensor_shape(x), NULL);
  double tol = graft_tensor_dtype(x) == GRAFT_F32 ? 1e-6 : 1e-15;
  for (int64_t i = 0; i < n; i++) {
    double want = tu_get(x, i) * k + 1.0;
    if (!tu_close(tu_get(y, i), want, tol, tol)) fail_msg("element %lld: got %g want %g", (long long)i, tu_get(y, i), want);
  }
}

static void test_graft_function_call__same_signature_traces_once(void **state) {
  (void)state;
  tu_rng rng = {0x1234abcdULL};
  counted c = {0, 3.0};
  graft_function *f = tu_function(g_rt, "affine", affine_cb, &c, 1, 1, NULL);
  const int64_t s[] = {2, 3};
  graft_tensor *in[1] = {tu_tensor_rand(&rng, GRAFT_F64, 2, s, -1, 1)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  check_affine(in[0], out[0], 3.0);
  tu_destroy_outs(out, 1);
  /* New data, same signature: no retrace, and the new data is used. */
  graft_tensor_destroy(in[0]);
  in[0] = tu_tensor_rand(&rng, GRAFT_F64, 2, s, -1, 1);
  tu_assert_call_ok(f, 1, in, 1, out);
  check_affine(in[0], out[0], 3.0);
  tu_destroy_outs(out, 1);
  assert_int_equal(graft_function_trace_count(f), 1);
  assert_int_equal(c.traces, 1);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static void test_graft_function_call__host_code_runs_only_at_trace(void **state) {
  (void)state;
  tu_rng rng = {0x77ULL};
  counted c = {0, 2.0};
  graft_function *f = tu_function(g_rt, "affine_host", affine_cb, &c, 1, 1, NULL);
  const int64_t s[] = {5};
  graft_tensor *in[1] = {tu_tensor_rand(&rng, GRAFT_F64, 1, s, -1, 1)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  check_affine(in[0], out[0], 2.0);
  tu_destroy_outs(out, 1);
  c.host_k = 100.0; /* host state changes; the cached graph keeps k = 2 */
  tu_assert_call_ok(f, 1, in, 1, out);
  check_affine(in[0], out[0], 2.0);
  tu_destroy_outs(out, 1);
  assert_int_equal(c.traces, 1);
  /* A new signature traces again and sees the current host value. */
  const int64_t s2[] = {6};
  graft_tensor *in2[1] = {tu_tensor_rand(&rng, GRAFT_F64, 1, s2, -1, 1)};
  tu_assert_call_ok(f, 1, in2, 1, out);
  check_affine(in2[0], out[0], 100.0);
  tu_destroy_outs(out, 1);
  assert_int_equal(c.traces, 2);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in2[0]);
}

static void test_graft_function_call__new_shape_or_dtype_retraces(void **state) {
  (void)state;
  tu_rng rng = {0xfeedULL};
  counted c = {0, -0.5};
  graft_function *f = tu_function(g_rt, "affine_shapes", affine_cb, &c, 1, 1, NULL);
  const int64_t s23[] = {2, 3}, s43[] = {4, 3};
  graft_tensor *a = tu_tensor_rand(&rng, GRAFT_F64, 2, s23, -2, 2);
  graft_tensor *b = tu_tensor_rand(&rng, GRAFT_F64, 2, s43, -2, 2);
  graft_tensor *a32 = tu_tensor_rand(&rng, GRAFT_F32, 2, s23, -2, 2);
  graft_tensor *out[1] = {NULL};
  struct {
    graft_tensor *x;
    int traces_after;
  } seq[] = {{a, 1}, {a, 1}, {b, 2}, {a, 2}, {b, 2}, {a32, 3}, {a, 3}};
  for (size_t i = 0; i < TU_N_OF(seq); i++) {
    graft_tensor *in[1] = {seq[i].x};
    tu_assert_call_ok(f, 1, in, 1, out);
    check_affine(seq[i].x, out[0], -0.5);
    tu_destroy_outs(out, 1);
    assert_int_equal(graft_function_trace_count(f), seq[i].traces_after);
  }
  assert_int_equal(c.traces, 3);
  graft_function_destroy(f);
  graft_tensor_destroy(a);
  graft_tensor_destroy(b);
  graft_tensor_destroy(a32);
}

static void test_graft_function_call__distinct_functions_have_own_caches(void **state) {
  (void)state;
  counted c1 = {0, 1.0}, c2 = {0, 2.0};
  graft_function *f1 = tu_function(g_rt, "aff1", affine_cb, &c1, 1, 1, NULL);
  graft_function *f2 = tu_function(g_rt, "aff2", affine_cb, &c2, 1, 1, NULL);
  tu_rng rng = {0x99ULL};
  const int64_t s[] = {3};
  graft_tensor *in[1] = {tu_tensor_rand(&rng, GRAFT_F64, 1, s, -1, 1)};
  graft_tensor *out[1] = {NULL};
  for (int k = 0; k < 2; k++) {
    tu_assert_call_ok(f1, 1, in, 1, out);
    check_affine(in[0], out[0], 1.0);
    tu_destroy_outs(out, 1);
    tu_assert_call_ok(f2, 1, in, 1, out);
    check_affine(in[0], out[0], 2.0);
    tu_destroy_outs(out, 1);
  }
  assert_int_equal(graft_function_trace_count(f1), 1);
  assert_int_equal(graft_function_trace_count(f2), 1);
  graft_function_destroy(f1);
  graft_function_destroy(f2);
  graft_tensor_destroy(in[0]);
}

/* ---- symbolic dims ---------------------------------------------------- */

typedef struct sym_obs {
  int traces;
  int batch_is_sym, width_is_4, reshape_rank_ok;
  int64_t reshape_dim1;
} sym_obs;

/* out0 = reduce_sum(x, axis 0) [4]; out1 = reshape(x, [2, B, 2]) using the
 * symbolic batch dim read from graft_value_shape. */
static graft_status sym_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  sym_obs *o = user;
  o->traces++;
  const int64_t *sh = graft_value_shape(in[0]);
  o->batch_is_sym = sh != NULL && GRAFT_DIM_IS_SYM(sh[0]);
  o->width_is_4 = sh != NULL && sh[1] == 4;
  const int ax0[] = {0};
  out[0] = graft_reduce_sum(t, in[0], 1, ax0, 0);
  const int64_t target[] = {2, sh ? sh[0] : 0, 2};
  out[1] = graft_reshape(t, in[0], 3, target);
  o->reshape_rank_ok = graft_value_rank(out[1]) == 3;
  const int64_t *rs = graft_value_shape(out[1]);
  o->reshape_dim1 = rs ? rs[1] : 0;
  /* out2 = flatten with an inferred dim: [4B] */
  const int64_t flat[] = {-1};
  out[2] = graft_reshape(t, in[0], 1, flat);
  /* out3 = x + fill([B, 1], 0.5): a constant shaped by the symbol */
  const int64_t fs[] = {sh ? sh[0] : 0, 1};
  out[3] = graft_add(t, in[0], graft_fill(t, GRAFT_F64, 2, fs, 0.5));
  return GRAFT_OK;
}

static const graft_dtype g_sig_dts[] = {GRAFT_F64};
static const int g_sig_ranks[] = {2};
static const int64_t g_sig_s0[] = {-1, 4};
static const int64_t *const g_sig_shapes[] = {g_sig_s0};
static const graft_signature g_sig_batch4 = {/* f64 [-1,4] */
    .n = 1, .dtypes = g_sig_dts, .ranks = g_sig_ranks, .shapes = g_sig_shapes};

static void test_graft_function_call__symbolic_batch_dim_one_trace(void **state) {
  (void)state;
  sym_obs o;
  memset(&o, 0, sizeof o);
  graft_function_desc d = {.name = "sym_batch", .trace = sym_cb, .user = &o, .n_inputs = 1,
                           .n_outputs = 4, .signature = &g_sig_batch4};
  graft_function *f = tu_function_create(g_rt, &d);
  tu_rng rng = {0xabcULL};
  const int64_t batches[] = {3, 5, 3};
  for (int k = 0; k < 3; k++) {
    const int64_t B = batches[k], s[] = {B, 4};
    graft_tensor *in[1] = {tu_tensor_rand(&rng, GRAFT_F64, 2, s, -1, 1)};
    graft_tensor *out[4] = {NULL, NULL, NULL, NULL};
    tu_assert_call_ok(f, 1, in, 4, out);
    double colsum[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < B; i++)
      for (int j = 0; j < 4; j++) colsum[j] += tu_get(in[0], i * 4 + j);
    const int64_t s4[] = {4}, sr[] = {2, B, 2};
    tu_assert_shape(out[0], 1, s4, NULL);
    tu_assert_close(out[0], colsum, 4, 1e-14, 1e-14);
    tu_assert_shape(out[1], 3, sr, NULL);
    for (int64_t i = 0; i < B * 4; i++) assert_true(tu_get(out[1], i) == tu_get(in[0], i));
    const int64_t sf[] = {4 * B};
    tu_assert_shape(out[2], 1, sf, NULL);
    for (int64_t i = 0; i < B * 4; i++) assert_true(tu_get(out[2], i) == tu_get(in[0], i));
    tu_assert_shape(out[3], 2, s, NULL);
    for (int64_t i = 0; i < B * 4; i++) assert_true(tu_get(out[3], i) == tu_get(in[0], i) + 0.5);
    tu_destroy_outs(out, 4);
    graft_tensor_destroy(in[0]);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  assert_int_equal(o.traces, 1);
  assert_true(o.batch_is_sym);
  assert_true(o.width_is_4);
  assert_true(o.reshape_rank_ok);
  assert_true(GRAFT_DIM_IS_SYM(o.reshape_dim1));
  graft_plan_stats st;
  tu_assert_status(graft_function_stats(f, &st), GRAFT_OK);
  assert_int_equal(st.trace_count, 1);
  assert_int_equal(st.plan_count, 2); /* batch 3 and batch 5 */
  graft_function_destroy(f);
}

/* y = relu(x @ W + b): symbolic batch through matmul and broadcasting. */
static const double g_W[8] = {0.5, -1.0, 0.25, 2.0, -0.75, 0.5, 1.5, -0.25}; /* [4,2] */
static const double g_b[2] = {0.1, -0.2};

static graft_status dense_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  const int64_t sw[] = {4, 2}, sb[] = {2};
  graft_value *w = graft_constant(t, GRAFT_F64, 2, sw, g_W);
  graft_value *b = graft_constant(t, GRAFT_F64, 1, sb, g_b);
  out[0] = graft_relu(t, graft_add(t, graft_matmul(t, in[0], w, 0), b));
  return GRAFT_OK;
}

static void check_dense(const graft_tensor *x, const graft_tensor *y) {
  int64_t B = graft_tensor_shape(x)[0];
  const int64_t sy[] = {B, 2};
  tu_assert_shape(y, 2, sy, NULL);
  for (int64_t i = 0; i < B; i++)
    for (int j = 0; j < 2; j++) {
      double acc = g_b[j];
      for (int k = 0; k < 4; k++) acc += tu_get(x, i * 4 + k) * g_W[k * 2 + j];
      double want = acc > 0 ? acc : 0;
      if (!tu_close(tu_get(y, i * 2 + j), want, 1e-13, 1e-13))
        fail_msg("[%lld,%d]: got %.17g want %.17g", (long long)i, j, tu_get(y, i * 2 + j), want);
    }
}

static void test_graft_function_call__symbolic_batch_through_matmul(void **state) {
  (void)state;
  graft_function_desc d = {.name = "dense_sym", .trace = dense_cb, .n_inputs = 1, .n_outputs = 1,
                           .signature = &g_sig_batch4};
  graft_function *f = tu_function_create(g_rt, &d);
  tu_rng rng = {0xd3ULL};
  const int64_t batches[] = {1, 3, 7, 3, 1};
  for (int k = 0; k < 5; k++) {
    const int64_t s[] = {batches[k], 4};
    graft_tensor *in[1] = {tu_tensor_rand(&rng, GRAFT_F64, 2, s, -2, 2)};
    graft_tensor *out[1] = {NULL};
    tu_assert_call_ok(f, 1, in, 1, out);
    check_dense(in[0], out[0]);
    tu_destroy_outs(out, 1);
    graft_tensor_destroy(in[0]);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
}

/* Two inputs, each [-1,3]: x + y.  Matching batches work from one trace; a
 * mismatch (neither 1) is a shape error of add at call time. */
static graft_status add_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_add(t, in[0], in[1]);
  return GRAFT_OK;
}

static void test_graft_function_call__two_symbolic_dims_mismatch_at_call(void **state) {
  (void)state;
  const graft_dtype dts[] = {GRAFT_F64, GRAFT_F64};
  const int ranks[] = {2, 2};
  const int64_t s0[] = {-1, 3};
  const int64_t *const shapes[] = {s0, s0};
  graft_signature sig = {.n = 2, .dtypes = dts, .ranks = ranks, .shapes = shapes};
  graft_function_desc d = {.name = "sym_add", .trace = add_cb, .n_inputs = 2, .n_outputs = 1,
                           .signature = &sig};
  graft_function *f = tu_function_create(g_rt, &d);
  tu_rng rng = {0x31337ULL};
  const int64_t pairs[][2] = {{2, 2}, {4, 4}, {2, 3}, {2, 2}};
  for (int k = 0; k < 4; k++) {
    const int64_t sa[] = {pairs[k][0], 3}, sb[] = {pairs[k][1], 3};
    graft_tensor *in[2] = {tu_tensor_rand(&rng, GRAFT_F64, 2, sa, -1, 1),
                           tu_tensor_rand(&rng, GRAFT_F64, 2, sb, -1, 1)};
    graft_tensor *out[1] = {NULL};
    if (pairs[k][0] == pairs[k][1]) {
      tu_assert_call_ok(f, 2, in, 1, out);
      int64_t n = pairs[k][0] * 3;
      for (int64_t i = 0; i < n; i++)
        assert_true(tu_get(out[0], i) == tu_get(in[0], i) + tu_get(in[1], i));
      tu_destroy_outs(out, 1);
    } else {
      tu_assert_status(graft_function_call(f, 2, in, 1, out), GRAFT_ESHAPE);
      assert_null(out[0]);
      const char *msg = graft_function_errmsg(f);
      if (strstr(msg, "add") == NULL) fail_msg("message \"%s\" does not name add", msg);
    }
    graft_tensor_destroy(in[0]);
    graft_tensor_destroy(in[1]);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
}

/* ---- LRU capacity ---------------------------------------------------- */

static void test_graft_function_call__cache_capacity_one_alternating(void **state) {
  (void)state;
  counted c = {0, 1.5};
  graft_function_desc d = {.name = "lru1", .trace = affine_cb, .user = &c, .n_inputs = 1,
                           .n_outputs = 1, .cache_capacity = 1};
  graft_function *f = tu_function_create(g_rt, &d);
  tu_rng rng = {0x1ULL};
  const int64_t s2[] = {2, 3}, s3[] = {3, 3};
  graft_tensor *a = tu_tensor_rand(&rng, GRAFT_F64, 2, s2, -1, 1);
  graft_tensor *b = tu_tensor_rand(&rng, GRAFT_F64, 2, s3, -1, 1);
  for (int k = 0; k < 6; k++) {
    graft_tensor *in[1] = {(k & 1) ? b : a};
    graft_tensor *out[1] = {NULL};
    tu_assert_call_ok(f, 1, in, 1, out);
    check_affine(in[0], out[0], 1.5);
    tu_destroy_outs(out, 1);
    graft_plan_stats st;
    tu_assert_status(graft_function_stats(f, &st), GRAFT_OK);
    assert_true(st.plan_count <= 1);
    assert_true(st.plan_count >= 1);
  }
  graft_function_destroy(f);

  /* With a symbolic signature the single trace survives plan eviction. */
  counted c2 = {0, 1.5};
  const graft_dtype dts[] = {GRAFT_F64};
  const int ranks[] = {2};
  const int64_t sd[] = {-1, 3};
  const int64_t *const shapes[] = {sd};
  graft_signature sig = {.n = 1, .dtypes = dts, .ranks = ranks, .shapes = shapes};
  graft_function_desc d2 = {.name = "lru1_sym", .trace = affine_cb, .user = &c2, .n_inputs = 1,
                            .n_outputs = 1, .cache_capacity = 1, .signature = &sig};
  f = tu_function_create(g_rt, &d2);
  for (int k = 0; k < 6; k++) {
    graft_tensor *in[1] = {(k & 1) ? b : a};
    graft_tensor *out[1] = {NULL};
    tu_assert_call_ok(f, 1, in, 1, out);
    check_affine(in[0], out[0], 1.5);
    tu_destroy_outs(out, 1);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  assert_int_equal(c2.traces, 1);
  graft_function_destroy(f);
  graft_tensor_destroy(a);
  graft_tensor_destroy(b);
}

/* ---- stats and DOT ----------------------------------------------------- */

typedef struct mlp_user {
  graft_variable *w;
  int with_unused;
} mlp_user;

/* relu(x @ read(w) + 1), plus optionally an exp(x) that reaches nothing. */
static graft_status mlp_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  mlp_user *u = user;
  graft_value *h = graft_matmul(t, in[0], graft_read(t, u->w), 0);
  if (u->with_unused) (void)graft_exp(t, in[0]);
  out[0] = graft_relu(t, graft_add(t, h, graft_scalar(t, GRAFT_F64, 1.0)));
  return GRAFT_OK;
}

static void stats_of(mlp_user *u, const char *name, graft_plan_stats *st) {
  graft_function *f = tu_function(g_rt, name, mlp_cb, u, 1, 1, NULL);
  tu_rng rng = {0x5a5aULL};
  const int64_t s[] = {8, 4};
  graft_tensor *in[1] = {tu_tensor_rand(&rng, GRAFT_F64, 2, s, -1, 1)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  tu_destroy_outs(out, 1);
  tu_assert_call_ok(f, 1, in, 1, out);
  tu_destroy_outs(out, 1);
  memset(st, 0xff, sizeof *st);
  tu_assert_status(graft_function_stats(f, st), GRAFT_OK);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static void test_graft_function_stats__fields_and_pruned_nodes(void **state) {
  (void)state;
  const int64_t sw[] = {4, 3};
  graft_variable *w = NULL;
  assert_int_equal(graft_variable_create(NULL, "stats_w", GRAFT_F64, 2, sw, NULL, 0, &w), GRAFT_OK);
  mlp_user plain = {w, 0}, extra = {w, 1};
  graft_plan_stats a, b;
  stats_of(&plain, "mlp_plain", &a);
  stats_of(&extra, "mlp_extra", &b);
  for (int k = 0; k < 2; k++) {
    const graft_plan_stats *st = k ? &b : &a;
    assert_true(st->nodes > 0);
    assert_true(st->live_nodes > 0);
    assert_true(st->pruned_nodes >= 0);
    assert_int_equal(st->live_nodes + st->pruned_nodes, st->nodes);
    assert_true(st->tiles >= 1);
    assert_true(st->arena_bytes >= 0);
    assert_true(st->naive_bytes >= st->arena_bytes);
    assert_true(st->load_bytes >= 0);
    assert_true(st->bound_bytes >= 0);
    assert_true(st->bound_bytes <= st->naive_bytes);
    assert_true(st->inplace >= 0);
    assert_true(st->parts >= 1);
    assert_true(st->cut_bytes >= 0);
    assert_int_equal(st->trace_count, 1);
    assert_int_equal(st->plan_count, 1);
    assert_true(st->compile_us >= 0);
  }
  /* The unused exp is one more node, and it is pruned. */
  assert_int_equal(b.nodes, a.nodes + 1);
  assert_int_equal(b.pruned_nodes, a.pruned_nodes + 1);
  assert_int_equal(b.live_nodes, a.live_nodes);
  assert_true(b.pruned_nodes >= 1);
  graft_variable_destroy(w);
}

static char *read_all(FILE *fp) {
  assert_int_equal(fseek(fp, 0, SEEK_END), 0);
  long n = ftell(fp);
  assert_true(n > 0);
  rewind(fp);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
  buf[n] = '\0';
  return buf;
}

static void test_graft_function_write_dot__digraph_with_op_names(void **state) {
  (void)state;
  const int64_t sw[] = {4, 3};
  graft_variable *w = NULL;
  assert_int_equal(graft_variable_create(NULL, "dot_w", GRAFT_F64, 2, sw, NULL, 0, &w), GRAFT_OK);
  mlp_user u = {w, 1};
  graft_function *f = tu_function(g_rt, "dot_mlp", mlp_cb, &u, 1, 1, NULL);
  tu_rng rng = {0xd07ULL};
  const int64_t s[] = {2, 4};
  graft_tensor *in[1] = {tu_tensor_rand(&rng, GRAFT_F64, 2, s, -1, 1)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  tu_destroy_outs(out, 1);
  FILE *fp = tmpfile();
  assert_non_null(fp);
  tu_assert_status(graft_function_write_dot(f, fp), GRAFT_OK);
  char *text = read_all(fp);
  fclose(fp);
  /* relu(h + 1) ran as one fused node: drawn as a cluster named by its ops */
  const char *want[] = {"digraph", "matmul", "relu", "add", "exp", "dashed", "dot_w",
                        "subgraph cluster_fused", "fused:add+relu", "}"};
  for (size_t i = 0; i < TU_N_OF(want); i++)
    if (strstr(text, want[i]) == NULL) fail_msg("DOT lacks \"%s\":\n%s", want[i], text);
  free(text);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_variable_destroy(w);
}

/* ---- output binding ---------------------------------------------------- */

/* out[k] = (k + 1) * x, and out[n - 1] repeats out[0]'s node. */
static graft_status scaled_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)user;
  for (int k = 0; k < n_out - 1; k++) out[k] = graft_mul(t, in[0], graft_scalar(t, GRAFT_F64, k + 1.0));
  out[n_out - 1] = out[0];
  return GRAFT_OK;
}

/* Two output destinations that share bytes with the input, shifted by an
 * element either way (a kernel writing there directly would overwrite input
 * elements before reading them), among many that do not: every output
 * holds (k + 1) * x of the input as it was, and the output repeating
 * another's node is written too. */
static void test_graft_function_call__outputs_overlapping_the_input(void **state) {
  (void)state;
  enum { N = 8, OUTS = 600 };
  graft_function *f = tu_function(g_rt, "scaled", scaled_cb, NULL, 1, OUTS, NULL);
  /* x at buf[N, 2N); out[3] at [N + 1, 2N + 1), out[OUTS / 2] at [1, N + 1) */
  double *buf = calloc(3 * N, sizeof *buf), x0[N];
  assert_non_null(buf);
  for (int i = 0; i < N; i++) buf[N + i] = x0[i] = 0.5 + i;
  const int64_t s[] = {N};
  graft_tensor *in[1], *out[OUTS];
  assert_int_equal(graft_tensor_wrap(GRAFT_F64, 1, s, buf + N, &in[0]), GRAFT_OK);
  for (int k = 0; k < OUTS; k++) {
    if (k == 3) assert_int_equal(graft_tensor_wrap(GRAFT_F64, 1, s, buf + N + 1, &out[k]), GRAFT_OK);
    else if (k == OUTS / 2) assert_int_equal(graft_tensor_wrap(GRAFT_F64, 1, s, buf + 1, &out[k]), GRAFT_OK);
    else out[k] = NULL;
  }
  tu_assert_call_ok(f, 1, in, OUTS, out);
  for (int k = 0; k < OUTS; k++) {
    double want[N], scale = k == OUTS - 1 ? 1.0 : k + 1.0;
    for (int i = 0; i < N; i++) want[i] = scale * x0[i];
    tu_assert_close(out[k], want, N, 0, 0);
  }
  for (int k = 0; k < OUTS; k++)
    if (k != 3 && k != OUTS / 2) graft_tensor_destroy(out[k]);
  graft_tensor_destroy(out[3]);
  graft_tensor_destroy(out[OUTS / 2]);
  graft_tensor_destroy(in[0]);
  free(buf);
  graft_function_destroy(f);
}

static graft_status identity_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)t, (void)n_in, (void)n_out, (void)user;
  out[0] = in[0];
  return GRAFT_OK;
}

static void test_graft_function_call__output_is_input(void **state) {
  (void)state;
  graft_function *f = tu_function(g_rt, "identity", identity_cb, NULL, 1, 1, NULL);
  tu_rng rng = {0x1dULL};
  const int64_t s[] = {3, 2};
  graft_tensor *in[1] = {tu_tensor_rand(&rng, GRAFT_F32, 2, s, -1, 1)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  assert_non_null(out[0]);
  assert_ptr_not_equal(out[0], in[0]);
  assert_ptr_not_equal(graft_tensor_data(out[0]), graft_tensor_data(in[0]));
  tu_assert_shape(out[0], 2, s, NULL);
  assert_int_equal(graft_tensor_dtype(out[0]), GRAFT_F32);
  assert_memory_equal(graft_tensor_data(out[0]), graft_tensor_data(in[0]), 6 * sizeof(float));
  tu_destroy_outs(out, 1);
  /* Into a preallocated tensor too. */
  float buf[6] = {0};
  graft_tensor *o = NULL;
  assert_int_equal(graft_tensor_wrap(GRAFT_F32, 2, s, buf, &o), GRAFT_OK);
  out[0] = o;
  tu_assert_call_ok(f, 1, in, 1, out);
  assert_ptr_equal(out[0], o);
  assert_memory_equal(buf, graft_tensor_data(in[0]), sizeof buf);
  graft_tensor_destroy(o);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static graft_status two_slots_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = out[1] = graft_add(t, in[0], in[1]);
  return GRAFT_OK;
}

static void test_graft_function_call__same_value_in_two_outputs(void **state) {
  (void)state;
  graft_function *f = tu_function(g_rt, "two_slots", two_slots_cb, NULL, 2, 2, NULL);
  tu_rng rng = {0x2ULL};
  const int64_t s[] = {4};
  graft_tensor *in[2] = {tu_tensor_rand(&rng, GRAFT_F64, 1, s, -1, 1),
                         tu_tensor_rand(&rng, GRAFT_F64, 1, s, -1, 1)};
  double want[4];
  for (int i = 0; i < 4; i++) want[i] = tu_get(in[0], i) + tu_get(in[1], i);
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_call_ok(f, 2, in, 2, out);
  assert_non_null(out[0]);
  assert_non_null(out[1]);
  assert_ptr_not_equal(out[0], out[1]);
  assert_ptr_not_equal(graft_tensor_data(out[0]), graft_tensor_data(out[1]));
  tu_assert_close(out[0], want, 4, 0, 0);
  tu_assert_close(out[1], want, 4, 0, 0);
  tu_destroy_outs(out, 2);
  /* One slot preallocated, the other allocated by graft. */
  double buf[4] = {9, 9, 9, 9};
  graft_tensor *o = NULL;
  assert_int_equal(graft_tensor_wrap(GRAFT_F64, 1, s, buf, &o), GRAFT_OK);
  out[0] = NULL;
  out[1] = o;
  tu_assert_call_ok(f, 2, in, 2, out);
  assert_ptr_equal(out[1], o);
  tu_assert_close(out[0], want, 4, 0, 0);
  for (int i = 0; i < 4; i++) assert_true(buf[i] == want[i]);
  graft_tensor_destroy(out[0]);
  graft_tensor_destroy(o);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
}

static void test_graft_function_call__preallocated_output_written_in_place(void **state) {
  (void)state;
  counted c = {0, 4.0};
  graft_function *f = tu_function(g_rt, "inplace_out", affine_cb, &c, 1, 1, NULL);
  tu_rng rng = {0x3ULL};
  const int64_t s[] = {2, 5};
  double buf[10];
  for (int i = 0; i < 10; i++) buf[i] = -777;
  graft_tensor *o = NULL;
  assert_int_equal(graft_tensor_wrap(GRAFT_F64, 2, s, buf, &o), GRAFT_OK);
  for (int k = 0; k < 3; k++) {
    graft_tensor *in[1] = {tu_tensor_rand(&rng, GRAFT_F64, 2, s, -1, 1)};
    graft_tensor *out[1] = {o};
    tu_assert_call_ok(f, 1, in, 1, out);
    assert_ptr_equal(out[0], o);
    assert_ptr_equal(graft_tensor_data(o), buf);
    for (int i = 0; i < 10; i++) {
      double want = tu_get(in[0], i) * 4.0 + 1.0;
      if (!tu_close(buf[i], want, 1e-15, 1e-15)) fail_msg("buf[%d] = %g, want %g", i, buf[i], want);
    }
    graft_tensor_destroy(in[0]);
  }
  graft_tensor_destroy(o);
  /* graft never frees wrapped memory: buf is still ours. */
  buf[0] = 1.0;
  assert_int_equal(c.traces, 1);
  graft_function_destroy(f);
}

static const double g_const_vals[3] = {1.5, -2.5, 4.0};

static graft_status const_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out, (void)user;
  const int64_t s[] = {3};
  out[0] = graft_constant(t, GRAFT_F64, 1, s, g_const_vals);
  return GRAFT_OK;
}

static void test_graft_function_call__no_inputs_constant_output(void **state) {
  (void)state;
  graft_function *f = tu_function(g_rt, "constant_out", const_cb, NULL, 0, 1, NULL);
  for (int k = 0; k < 2; k++) {
    graft_tensor *out[1] = {NULL};
    tu_assert_call_ok(f, 0, NULL, 1, out);
    tu_assert_close(out[0], g_const_vals, 3, 0, 0);
    /* Writing the output must not change the next call's constant. */
    ((double *)graft_tensor_data(out[0]))[0] = 100;
    tu_destroy_outs(out, 1);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
}

/* A chain of 3000 nodes: more than one chunk of graph nodes. */
#define CHAIN 3000
static graft_status chain_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *x = in[0];
  graft_value *first = NULL;
  for (int i = 0; i < CHAIN; i++) {
    x = graft_add(t, x, graft_scalar(t, GRAFT_F64, 1.0));
    if (i == 0) first = x;
  }
  out[0] = x;
  out[1] = first; /* a value from the first chunk, still valid */
  return GRAFT_OK;
}

static void test_graft_function_call__long_chain_crosses_node_chunks(void **state) {
  (void)state;
  graft_function *f = tu_function(g_rt, "chain", chain_cb, NULL, 1, 2, NULL);
  const int64_t s[] = {3};
  const double x[] = {0.5, -1, 2};
  graft_tensor *in[1] = {NULL};
  assert_int_equal(graft_tensor_create(GRAFT_F64, 1, s, &in[0]), GRAFT_OK);
  memcpy(graft_tensor_data(in[0]), x, sizeof x);
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_call_ok(f, 1, in, 2, out);
  const double want[] = {0.5 + CHAIN, -1 + CHAIN, 2 + CHAIN}, want1[] = {1.5, 0, 3};
  tu_assert_close(out[0], want, 3, 0, 0);
  tu_assert_close(out[1], want1, 3, 0, 0);
  tu_destroy_outs(out, 2);
  graft_plan_stats st;
  assert_int_equal(graft_function_stats(f, &st), GRAFT_OK);
  assert_true(st.nodes >= 2 * CHAIN);
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

/* ---- main ------------------------------------------------------------- */

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_function_call__same_signature_traces_once),
      cmocka_unit_test(test_graft_function_call__host_code_runs_only_at_trace),
      cmocka_unit_test(test_graft_function_call__new_shape_or_dtype_retraces),
      cmocka_unit_test(test_graft_function_call__distinct_functions_have_own_caches),
      cmocka_unit_test(test_graft_function_call__symbolic_batch_dim_one_trace),
      cmocka_unit_test(test_graft_function_call__symbolic_batch_through_matmul),
      cmocka_unit_test(test_graft_function_call__two_symbolic_dims_mismatch_at_call),
      cmocka_unit_test(test_graft_function_call__cache_capacity_one_alternating),
      cmocka_unit_test(test_graft_function_stats__fields_and_pruned_nodes),
      cmocka_unit_test(test_graft_function_write_dot__digraph_with_op_names),
      cmocka_unit_test(test_graft_function_call__output_is_input),
      cmocka_unit_test(test_graft_function_call__outputs_overlapping_the_input),
      cmocka_unit_test(test_graft_function_call__same_value_in_two_outputs),
      cmocka_unit_test(test_graft_function_call__preallocated_output_written_in_place),
      cmocka_unit_test(test_graft_function_call__no_inputs_constant_output),
      cmocka_unit_test(test_graft_function_call__long_chain_crosses_node_chunks),
  };
  return cmocka_run_group_tests_name("graph/function_cache", tests, tu_group_setup,
                                     tu_group_teardown);
}
