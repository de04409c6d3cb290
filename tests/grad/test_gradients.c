/* graft_gradients as a whole: a 2-layer MLP's weights and biases (variables)
 * against finite differences, seeded VJPs, fan-out, gradients with respect
 * to intermediate values, the unconnected policies, stop_gradient, integer
 * inputs, finite gradients at 0 (the double-where pattern), custom gradients,
 * third derivatives, a symbolic batch dim, SGD training inside one traced
 * function, and bitwise equality of gradients across thread counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grad/gradcheck.h"
#include "testutil.h"

TU_RUNTIME_GROUP();

/* ---- a 2-layer MLP whose parameters are variables --------------------------- */

enum { ACT_TANH, ACT_RELU };

typedef struct mlp {
  graft_variable *v[4]; /* w1 [in, hid], b1 [hid], w2 [hid, out], b2 [out] */
  int act;
} mlp;

/* Weights uniform in +-scale / sqrt(fan_in), biases in +-0.1. */
static void mlp_make(mlp *m, graft_dtype dt, int64_t n_in, int64_t n_hid, int64_t n_out, int act,
                     uint64_t seed) {
  tu_rng r = {seed | 1u};
  const int64_t shapes[4][2] = {{n_in, n_hid}, {n_hid, 0}, {n_hid, n_out}, {n_out, 0}};
  const int ranks[4] = {2, 1, 2, 1};
  const char *names[4] = {"w1", "b1", "w2", "b2"};
  m->act = act;
  for (int k = 0; k < 4; k++) {
    double a = k == 0 ? 1.5 / sqrt((double)n_in) : k == 2 ? 1.5 / sqrt((double)n_hid) : 0.1;
    graft_tensor *init = tu_tensor_rand(&r, dt, ranks[k], shapes[k], -a, a);
    m->v[k] = NULL;
    assert_int_equal(graft_variable_create(NULL, names[k], dt, ranks[k], shapes[k],
                                           graft_tensor_data(init), GRAFT_VAR_TRAINABLE, &m->v[k]),
                     GRAFT_OK);
    graft_tensor_destroy(init);
  }
}

static void mlp_free(mlp *m) {
  for (int k = 0; k < 4; k++) graft_variable_destroy(m->v[k]);
}

static graft_value *mlp_logits(graft_trace *t, const mlp *m, graft_value *x) {
  graft_value *pre = graft_add(t, graft_matmul(t, x, graft_read(t, m->v[0]), 0),
                               graft_read(t, m->v[1]));
  graft_value *h = m->act == ACT_TANH ? graft_tanh(t, pre) : graft_relu(t, pre);
  return graft_add(t, graft_matmul(t, h, graft_read(t, m->v[2]), 0), graft_read(t, m->v[3]));
}

/* in[0]: x [N, n_in]; in[1]: labels [N] (i32). */
static graft_value *mlp_loss(graft_trace *t, int n_in, graft_value *const *in, void *user) {
  (void)n_in;
  return graft_softmax_cross_entropy(t, mlp_logits(t, user, in[0]), in[1]);
}

static graft_tensor *labels_rand(tu_rng *r, int64_t n, int64_t classes) {
  return tu_tensor_rand(r, GRAFT_I32, 1, &n, 0, (double)(classes - 1));
}

/* ---- the MLP against finite differences -------------------------------------- */

static void check_mlp(int act, const char *name) {
  tu_rng r = {0xa11ce};
  mlp m;
  mlp_make(&m, GRAFT_F64, 4, 6, 3, act, 77);
  const int64_t xs[] = {8, 4};
  graft_tensor *in[2] = {tu_tensor_rand(&r, GRAFT_F64, 2, xs, -2, 2), labels_rand(&r, 8, 3)};
  gc_problem p = {.loss = mlp_loss, .user = &m, .n_in = 2, .in = in, .n_var = 4, .vars = m.v};
  gc_check(g_rt, &p, GC_STEP, GC_FD_TOL, name);
  gc_free(in, 2);
  mlp_free(&m);
}

static void test_graft_gradients__mlp_weights_and_biases_match_fd(void **state) {
  (void)state;
  check_mlp(ACT_TANH, "mlp 4-6-3 tanh");
  check_mlp(ACT_RELU, "mlp 4-6-3 relu");
}

/* ---- VJPs with explicit seeds --------------------------------------------------- */

/* Y = sin(x) @ y [3,2]; Z = reduce_sum(exp(x), axis 1) [3]. */
static graft_value *vjp_Y(graft_trace *t, graft_value *x, graft_value *y) {
  return graft_matmul(t, graft_sin(t, x), y, 0);
}
static graft_value *vjp_Z(graft_trace *t, graft_value *x) {
  const int ax[] = {1};
  return graft_reduce_sum(t, graft_exp(t, x), 1, ax, 0);
}

/* in: x [3,4], y [4,2], S [3,2].  Outputs: the VJPs of x and y with seed S
 * for Y alone (two outputs), then for {Y, Z} with seeds {S, NULL} (two). */
static graft_status seeded_vjp_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *Y = vjp_Y(t, in[0], in[1]), *Z = vjp_Z(t, in[0]);
  graft_value *ys[2] = {Y, Z}, *seeds[2] = {in[2], NULL};
  graft_status st = graft_gradients(t, 1, ys, seeds, 2, in, GRAFT_UNCONNECTED_NONE, out);
  if (st) return st;
  return graft_gradients(t, 2, ys, seeds, 2, in, GRAFT_UNCONNECTED_NONE, out + 2);
}

/* The FD oracles: sum(S * Y), and sum(S * Y) + sum(Z). */
static graft_value *seeded_loss(graft_trace *t, int n_in, graft_value *const *in, void *user) {
  (void)n_in;
  graft_value *L = graft_reduce_sum(t, graft_mul(t, in[2], vjp_Y(t, in[0], in[1])), 0, NULL, 0);
  if (user) L = graft_add(t, L, graft_reduce_sum(t, vjp_Z(t, in[0]), 0, NULL, 0));
  return L;
}

static void test_graft_gradients__non_scalar_seed_matches_fd(void **state) {
  (void)state;
  tu_rng r = {0x5eed};
  const int64_t sx[] = {3, 4}, sy[] = {4, 2}, ss[] = {3, 2};
  graft_tensor *in[3] = {tu_tensor_rand(&r, GRAFT_F64, 2, sx, -2, 2),
                         tu_tensor_rand(&r, GRAFT_F64, 2, sy, -2, 2),
                         tu_tensor_rand(&r, GRAFT_F64, 2, ss, -2, 2)};
  graft_tensor *out[4];
  char msg[512];
  tu_assert_run_ok(tu_run(g_rt, seeded_vjp_cb, NULL, 3, in, 4, out, msg), "seeded vjp", msg);
  static int with_z = 1;
  for (int k = 0; k < 2; k++) {
    gc_problem p = {.loss = seeded_loss, .user = k ? &with_z : NULL, .n_in = 3, .in = in};
    graft_tensor *fd[3];
    const char *ctx = k ? "seeds {S, NULL} for {Y, Z}" : "seed S for Y";
    gc_numeric(g_rt, &p, GC_STEP, fd, NULL, ctx);
    tu_assert_tensor(out[2 * k], GRAFT_F64, 2, sx, ctx);
    tu_assert_tensor(out[2 * k + 1], GRAFT_F64, 2, sy, ctx);
    gc_assert_close(out[2 * k], fd[0], GC_FD_TOL, ctx, "d/dx");
    gc_assert_close(out[2 * k + 1], fd[1], GC_FD_TOL, ctx, "d/dy");
    gc_free(fd, 3);
  }
  tu_destroy_outs(out, 4);
  gc_free(in, 3);
}

/* ---- fan-out and intermediate values ----------------------------------------------- */

/* u = sin(x) feeds exp(u), u * u (twice: one node, both operands) and u @ c. */
static graft_value *fanout_loss(graft_trace *t, int n_in, graft_value *const *in, void *user) {
  (void)n_in, (void)user;
  graft_value *u = graft_sin(t, in[0]);
  graft_value *a = graft_reduce_sum(t, graft_exp(t, u), 0, NULL, 0);
  graft_value *b = graft_reduce_sum(t, graft_mul(t, u, u), 0, NULL, 0);
  graft_value *c = graft_reduce_sum(t, graft_square(t, graft_matmul(t, u, in[1], 0)), 0, NULL, 0);
  return graft_add(t, graft_add(t, a, b), c);
}

static void test_graft_gradients__value_with_three_consumers_matches_fd(void **state) {
  (void)state;
  tu_rng r = {0xfa0};
  const int64_t sx[] = {3, 4}, sc[] = {4, 2};
  graft_tensor *in[2] = {tu_tensor_rand(&r, GRAFT_F64, 2, sx, -2, 2),
                         tu_tensor_rand(&r, GRAFT_F64, 2, sc, -1, 1)};
  gc_problem p = {.loss = fanout_loss, .n_in = 2, .in = in};
  gc_check(g_rt, &p, GC_STEP, GC_FD_TOL, "fan-out of sin(x)");
  gc_free(in, 2);
}

/* y = sum(w * u^3) + sum(x) with u = sin(x); outputs dy/du, dy/dx and u,
 * the intermediate listed first. */
static graft_status intermediate_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                    graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *x = in[0], *w = in[1];
  graft_value *u = graft_sin(t, x);
  graft_value *y = graft_add(
      t, graft_reduce_sum(t, graft_mul(t, w, graft_mul(t, u, graft_square(t, u))), 0, NULL, 0),
      graft_reduce_sum(t, x, 0, NULL, 0));
  graft_value *xs[2] = {u, x};
  out[2] = u;
  return graft_gradients(t, 1, &y, NULL, 2, xs, GRAFT_UNCONNECTED_NONE, out);
}

static void test_graft_gradients__with_respect_to_intermediate_value(void **state) {
  (void)state;
  tu_rng r = {0x1e7};
  const int64_t s[] = {2, 5};
  graft_tensor *in[2] = {tu_tensor_rand(&r, GRAFT_F64, 2, s, -2, 2),
                         tu_tensor_rand(&r, GRAFT_F64, 2, s, -1, 1)};
  graft_tensor *out[3];
  char msg[512];
  tu_assert_run_ok(tu_run(g_rt, intermediate_cb, NULL, 2, in, 3, out, msg), "intermediate", msg);
  double du[10], dx[10];
  for (int j = 0; j < 10; j++) {
    double x = tu_get(in[0], j), w = tu_get(in[1], j), u = sin(x);
    du[j] = 3 * w * u * u;
    dx[j] = du[j] * cos(x) + 1.0;
  }
  tu_assert_tensor(out[0], GRAFT_F64, 2, s, "d/du");
  tu_assert_tensor(out[1], GRAFT_F64, 2, s, "d/dx");
  tu_assert_close(out[0], du, 10, 1e-12, 1e-15);
  tu_assert_close(out[1], dx, 10, 1e-12, 1e-15);
  tu_destroy_outs(out, 3);
  gc_free(in, 2);
}

/* ---- unconnected inputs, stop_gradient, integers ------------------------------------ */

typedef struct flags {
  graft_unconnected policy;
  int null_mask; /* bit i: grads[i] was NULL at trace time */
} flags;

static void note_nulls(flags *f, graft_value *const *g, int n) {
  f->null_mask = 0;
  for (int i = 0; i < n; i++)
    if (!g[i]) f->null_mask |= 1 << i;
}

/* g, or zeros like x where g is NULL (every output needs a value). */
static graft_value *or_zeros(graft_trace *t, graft_value *g, graft_value *x) {
  return g ? g : graft_zeros_like(t, x);
}

/* in: x [3], z [2,2] (unused), q [3] (only through greater(q, 0)).
 * y = sum(exp(x) * greater(q, 0)).  Outputs the three gradients, zeros where
 * one is NULL. */
static graft_status unconnected_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  flags *f = user;
  graft_value *y = graft_reduce_sum(
      t, graft_mul(t, graft_exp(t, in[0]), graft_greater(t, in[2], graft_scalar(t, GRAFT_F64, 0))),
      0, NULL, 0);
  graft_value *g[3];
  graft_status st = graft_gradients(t, 1, &y, NULL, 3, in, f->policy, g);
  if (st) return st;
  note_nulls(f, g, 3);
  for (int i = 0; i < 3; i++) out[i] = or_zeros(t, g[i], in[i]);
  return GRAFT_OK;
}

static void test_graft_gradients__unconnected_none_and_zero(void **state) {
  (void)state;
  const int64_t sx[] = {3}, sz[] = {2, 2};
  const double xv[] = {0.5, -1, 2}, zv[] = {1, 2, 3, 4}, qv[] = {1, -1, 3};
  graft_tensor *in[3] = {tu_tensor_from(GRAFT_F64, 1, sx, xv), tu_tensor_from(GRAFT_F64, 2, sz, zv),
                         tu_tensor_from(GRAFT_F64, 1, sx, qv)};
  const double want_x[] = {exp(0.5), 0, exp(2.0)}, zeros[] = {0, 0, 0, 0};
  char msg[512];
  graft_tensor *out[3];

  flags f = {GRAFT_UNCONNECTED_NONE, 0};
  tu_assert_run_ok(tu_run(g_rt, unconnected_cb, &f, 3, in, 3, out, msg), "NONE", msg);
  assert_int_equal(f.null_mask, 0x6); /* z unused, q only through a comparison */
  tu_assert_close(out[0], want_x, 3, 1e-15, 0);
  tu_destroy_outs(out, 3);

  f.policy = GRAFT_UNCONNECTED_ZERO;
  tu_assert_run_ok(tu_run(g_rt, unconnected_cb, &f, 3, in, 3, out, msg), "ZERO", msg);
  assert_int_equal(f.null_mask, 0);
  tu_assert_close(out[0], want_x, 3, 1e-15, 0);
  tu_assert_tensor(out[1], GRAFT_F64, 2, sz, "ZERO: d/dz");
  tu_assert_close(out[1], zeros, 4, 0, 0);
  tu_assert_tensor(out[2], GRAFT_F64, 1, sx, "ZERO: d/dq");
  tu_assert_close(out[2], zeros, 3, 0, 0);
  tu_destroy_outs(out, 3);
  gc_free(in, 3);
}

/* Outputs: d/dx sum(x * stop(x)); d/dx sum(exp(stop(x)) + x); d/dx
 * sum(square(stop(x))) (zeros where NULL). */
static graft_status stop_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  flags *f = user;
  graft_value *x = in[0], *s = graft_stop_gradient(t, x);
  graft_value *y[3] = {
      graft_reduce_sum(t, graft_mul(t, x, s), 0, NULL, 0),
      graft_reduce_sum(t, graft_add(t, graft_exp(t, s), x), 0, NULL, 0),
      graft_reduce_sum(t, graft_square(t, s), 0, NULL, 0),
  };
  graft_value *g[3];
  for (int k = 0; k < 3; k++) {
    graft_status st = graft_gradients(t, 1, &y[k], NULL, 1, &x, f->policy, &g[k]);
    if (st) return st;
  }
  note_nulls(f, g, 3);
  for (int k = 0; k < 3; k++) out[k] = or_zeros(t, g[k], x);
  return GRAFT_OK;
}

static void test_graft_gradients__stop_gradient_blocks(void **state) {
  (void)state;
  const int64_t s[] = {4};
  const double xv[] = {-1.5, 0.25, 2, 3}, ones[] = {1, 1, 1, 1}, zeros[] = {0, 0, 0, 0};
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s, xv)};
  graft_tensor *out[3];
  char msg[512];
  for (int pol = 0; pol < 2; pol++) {
    flags f = {pol ? GRAFT_UNCONNECTED_ZERO : GRAFT_UNCONNECTED_NONE, 0};
    tu_assert_run_ok(tu_run(g_rt, stop_cb, &f, 1, in, 3, out, msg), "stop_gradient", msg);
    tu_assert_close(out[0], xv, 4, 0, 0);   /* x, not 2x */
    tu_assert_close(out[1], ones, 4, 0, 0); /* only the direct path */
    if (pol) {
      assert_int_equal(f.null_mask, 0);
      tu_assert_tensor(out[2], GRAFT_F64, 1, s, "ZERO through stop_gradient");
      tu_assert_close(out[2], zeros, 4, 0, 0);
    } else {
      assert_int_equal(f.null_mask, 0x4); /* a symbolic zero, never materialized */
    }
    tu_destroy_outs(out, 3);
  }
  gc_free(in, 1);
}

/* in: logits [4,3], labels [4] (i32).  Out: d/dlogits (zeros where NULL). */
static graft_status int_input_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  flags *f = user;
  graft_value *y = graft_softmax_cross_entropy(t, in[0], in[1]);
  graft_value *xs[2] = {in[1], in[0]}, *g[2];
  graft_status st = graft_gradients(t, 1, &y, NULL, 2, xs, f->policy, g);
  if (st) return st;
  note_nulls(f, g, 2);
  out[0] = or_zeros(t, g[1], in[0]);
  return GRAFT_OK;
}

static void test_graft_gradients__integer_input_gets_null(void **state) {
  (void)state;
  tu_rng r = {0x123};
  const int64_t s[] = {4, 3};
  graft_tensor *in[2] = {tu_tensor_rand(&r, GRAFT_F64, 2, s, -1, 1), labels_rand(&r, 4, 3)};
  graft_tensor *out[1];
  char msg[512];
  for (int pol = 0; pol < 2; pol++) {
    flags f = {pol ? GRAFT_UNCONNECTED_ZERO : GRAFT_UNCONNECTED_NONE, 0};
    tu_assert_run_ok(tu_run(g_rt, int_input_cb, &f, 2, in, 1, out, msg), "int input", msg);
    assert_int_equal(f.null_mask, 0x1); /* labels: NULL whatever the policy */
    /* d/dlogits = (softmax - one_hot) / N */
    for (int i = 0; i < 4; i++) {
      double m = -INFINITY, z = 0;
      for (int c = 0; c < 3; c++) m = fmax(m, tu_get(in[0], i * 3 + c));
      for (int c = 0; c < 3; c++) z += exp(tu_get(in[0], i * 3 + c) - m);
      for (int c = 0; c < 3; c++) {
        double want = (exp(tu_get(in[0], i * 3 + c) - m) / z - (tu_get(in[1], i) == c)) / 4.0;
        assert_true(tu_close(tu_get(out[0], i * 3 + c), want, 1e-12, 1e-15));
      }
    }
    tu_destroy_outs(out, 1);
  }
  gc_free(in, 2);
}

/* ---- misuse ------------------------------------------------------------------------------ */

enum { BAD_SEED_SHAPE, BAD_SEED_DTYPE, BAD_POLICY, BAD_COUNT };

typedef struct bad {
  int kind;
  graft_status got;
  int grads_cleared; /* graft_gradients left every grads[i] NULL */
} bad;

/* in: x [3] f64.  y = sum(exp(x)) (or exp(x) for the seed cases) and one
 * malformed graft_gradients call; the status it returned is the callback's. */
static graft_status bad_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  bad *b = user;
  graft_value *y = graft_exp(t, in[0]), *seed = NULL, *g[1] = {in[0]};
  graft_unconnected policy = GRAFT_UNCONNECTED_NONE;
  const int64_t s2[] = {2};
  if (b->kind == BAD_SEED_SHAPE) seed = graft_fill(t, GRAFT_F64, 1, s2, 1.0);
  if (b->kind == BAD_SEED_DTYPE) seed = graft_cast(t, graft_ones_like(t, y), GRAFT_F32);
  if (b->kind == BAD_POLICY) policy = (graft_unconnected)7;
  b->got = graft_gradients(t, 1, &y, seed ? &seed : NULL, 1, in, policy, g);
  b->grads_cleared = g[0] == NULL;
  out[0] = y;
  return b->got;
}

static void test_graft_gradients__bad_seed_or_policy_fails(void **state) {
  (void)state;
  static const struct {
    graft_status want;
    const char *names;
  } k_want[BAD_COUNT] = {{GRAFT_ESHAPE, "seed"}, {GRAFT_ESHAPE, "seed"}, {GRAFT_EINVAL, "policy"}};
  const int64_t s[] = {3};
  const double xv[] = {1, 2, 3};
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s, xv)};
  for (int k = 0; k < BAD_COUNT; k++) {
    bad b = {k, GRAFT_OK, 0};
    graft_tensor *out[1] = {NULL};
    char msg[512], ctx[32];
    snprintf(ctx, sizeof ctx, "bad case %d", k);
    graft_status st = tu_run(g_rt, bad_cb, &b, 1, in, 1, out, msg);
    tu_assert_status(b.got, k_want[k].want);
    assert_true(b.grads_cleared);
    tu_assert_run_fails(st, k_want[k].want, out[0], msg, k_want[k].names, ctx);
  }
  gc_free(in, 1);
}

/* ---- finite gradients at 0 ------------------------------------------------------------- */

/* Out: d/dx of sum(where(x > 0, sqrt(where(x > 0, x, 1)), 0)), of
 * sum(where(x > 0, x, 0)), and of sum(sqrt(x)). */
static graft_status at_zero_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *x = in[0], *zero = graft_scalar(t, GRAFT_F64, 0), *one = graft_scalar(t, GRAFT_F64, 1);
  graft_value *pos = graft_greater(t, x, zero);
  graft_value *safe = graft_where(t, pos, graft_sqrt(t, graft_where(t, pos, x, one)), zero);
  graft_value *y[3] = {graft_reduce_sum(t, safe, 0, NULL, 0),
                       graft_reduce_sum(t, graft_where(t, pos, x, zero), 0, NULL, 0),
                       graft_reduce_sum(t, graft_sqrt(t, x), 0, NULL, 0)};
  for (int k = 0; k < 3; k++) {
    graft_status st = graft_gradients(t, 1, &y[k], NULL, 1, &x, GRAFT_UNCONNECTED_ZERO, &out[k]);
    if (st) return st;
  }
  return GRAFT_OK;
}

static void test_graft_gradients__double_where_sqrt_finite_at_zero(void **state) {
  (void)state;
  const int64_t s[] = {4};
  const double xv[] = {-1, 0, 0.25, 4};
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s, xv)};
  graft_tensor *out[3];
  char msg[512];
  tu_assert_run_ok(tu_run(g_rt, at_zero_cb, NULL, 1, in, 3, out, msg), "where at 0", msg);
  const double want_safe[] = {0, 0, 1, 0.25}, want_where[] = {0, 0, 1, 1};
  for (int j = 0; j < 4; j++) {
    if (!isfinite(tu_get(out[0], j)))
      fail_msg("double where: element %d (x = %g) is %g", j, xv[j], tu_get(out[0], j));
    if (!isfinite(tu_get(out[1], j)))
      fail_msg("where: element %d (x = %g) is %g", j, xv[j], tu_get(out[1], j));
  }
  tu_assert_close(out[0], want_safe, 4, 1e-15, 0);
  tu_assert_close(out[1], want_where, 4, 0, 0);
  /* Plain sqrt: +inf at 0 (the math), 0.5 / sqrt(x) elsewhere. */
  assert_true(isinf(tu_get(out[2], 1)) && tu_get(out[2], 1) > 0);
  assert_true(tu_close(tu_get(out[2], 2), 1.0, 1e-15, 0));
  assert_true(tu_close(tu_get(out[2], 3), 0.25, 1e-15, 0));
  tu_destroy_outs(out, 3);
  gc_free(in, 1);
}

/* ---- custom gradients -------------------------------------------------------------------- */

typedef struct lse_user {
  int vjp_calls; /* trace-time count of the user rule's runs */
  double scale;  /* the rule returns scale * softmax(x) * gy */
} lse_user;

static graft_status lse_vjp(graft_trace *t, int n_x, graft_value *const *xs, graft_value *y,
                            graft_value *gy, graft_value **gxs, void *user) {
  (void)n_x, (void)y;
  lse_user *u = user;
  u->vjp_calls++;
  graft_value *sm = graft_softmax(t, xs[0], -1);
  if (u->scale != 1.0) sm = graft_mul(t, sm, graft_scalar(t, graft_value_dtype(sm), u->scale));
  gxs[0] = graft_mul(t, sm, gy);
  return graft_trace_status(t);
}

/* A naive log-sum-exp over the last axis (keepdims) with the stable rule. */
static graft_value *lse_region(graft_trace *t, graft_value *x, lse_user *u) {
  const int ax[] = {-1};
  graft_value *y = graft_log(t, graft_reduce_sum(t, graft_exp(t, x), 1, ax, 1));
  return graft_custom_gradient(t, 1, &x, y, lse_vjp, u);
}

/* in: x [3,5], w [3,1]: loss = sum(w * lse(x)). */
static graft_value *lse_loss(graft_trace *t, int n_in, graft_value *const *in, void *user) {
  (void)n_in;
  return graft_reduce_sum(t, graft_mul(t, in[1], lse_region(t, in[0], user)), 0, NULL, 0);
}

/* Out: lse(x), and d sum(w * lse(x)) / dx. */
static graft_status lse_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_value *v = lse_region(t, in[0], user);
  graft_value *L = graft_reduce_sum(t, graft_mul(t, in[1], v), 0, NULL, 0);
  out[0] = v;
  return graft_gradients(t, 1, &L, NULL, 1, in, GRAFT_UNCONNECTED_NONE, &out[1]);
}

/* Value and gradient of the region at x drawn from [lo, hi). */
static void check_lse(double lo, double hi, double scale, const char *ctx) {
  tu_rng r = {0x15e};
  const int64_t sx[] = {3, 5}, sw[] = {3, 1};
  graft_tensor *in[2] = {tu_tensor_rand(&r, GRAFT_F64, 2, sx, lo, hi),
                         tu_tensor_rand(&r, GRAFT_F64, 2, sw, -2, 2)};
  lse_user u = {0, scale};
  graft_tensor *out[2];
  char msg[512];
  tu_assert_run_ok(tu_run(g_rt, lse_cb, &u, 2, in, 2, out, msg), ctx, msg);
  assert_int_equal(u.vjp_calls, 1);
  tu_assert_tensor(out[1], GRAFT_F64, 2, sx, ctx);
  int overflow = hi > 700;
  for (int i = 0; i < 3; i++) {
    double m = -INFINITY, z = 0;
    for (int c = 0; c < 5; c++) m = fmax(m, tu_get(in[0], i * 5 + c));
    for (int c = 0; c < 5; c++) z += exp(tu_get(in[0], i * 5 + c) - m);
    if (!overflow && !tu_close(tu_get(out[0], i), m + log(z), 1e-13, 0))
      fail_msg("%s: lse row %d: got %.17g want %.17g", ctx, i, tu_get(out[0], i), m + log(z));
    for (int c = 0; c < 5; c++) {
      double want = scale * tu_get(in[1], i) * exp(tu_get(in[0], i * 5 + c) - m) / z;
      double got = tu_get(out[1], i * 5 + c);
      if (!isfinite(got) || !tu_close(got, want, 1e-12, 1e-300))
        fail_msg("%s: gradient [%d,%d]: got %.17g want %.17g", ctx, i, c, got, want);
    }
  }
  tu_destroy_outs(out, 2);
  if (!overflow && scale == 1.0) {
    lse_user u2 = {0, 1.0};
    gc_problem p = {.loss = lse_loss, .user = &u2, .n_in = 2, .in = in};
    gc_check(g_rt, &p, GC_STEP, GC_FD_TOL, ctx);
  }
  gc_free(in, 2);
}

static void test_graft_custom_gradient__logsumexp_value_and_gradient(void **state) {
  (void)state;
  check_lse(-2, 2, 1.0, "custom lse, x in [-2,2]");
  /* The user's rule, not the region's ops, gives the gradient. */
  check_lse(-2, 2, 3.0, "custom lse with a 3x rule");
}

static void test_graft_custom_gradient__overflowing_region_gets_finite_gradient(void **state) {
  (void)state;
  /* exp(1000) overflows: the naive ops would give inf / inf. */
  check_lse(999, 1001, 1.0, "custom lse, x ~ 1000");
}

static graft_status failing_vjp(graft_trace *t, int n_x, graft_value *const *xs, graft_value *y,
                                graft_value *gy, graft_value **gxs, void *user) {
  (void)t, (void)n_x, (void)xs, (void)y, (void)gy, (void)gxs, (void)user;
  return GRAFT_EUNSUPPORTED;
}

static graft_status failing_custom_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                      graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *y = graft_custom_gradient(t, 1, in, graft_exp(t, in[0]), failing_vjp, NULL);
  graft_value *L = graft_reduce_sum(t, y, 0, NULL, 0);
  return graft_gradients(t, 1, &L, NULL, 1, in, GRAFT_UNCONNECTED_NONE, out);
}

static void test_graft_custom_gradient__failing_rule_fails_the_call(void **state) {
  (void)state;
  const int64_t s[] = {3};
  const double xv[] = {1, 2, 3};
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s, xv)}, *out[1] = {NULL};
  char msg[512];
  graft_status st = tu_run(g_rt, failing_custom_cb, NULL, 1, in, 1, out, msg);
  tu_assert_run_fails(st, GRAFT_EUNSUPPORTED, out[0], msg, "custom_gradient", "failing rule");
  gc_free(in, 1);
}

/* ---- higher order ------------------------------------------------------------------------ */

enum { X4_POW, X4_SQUARES, X4_MULS, X4_COUNT };
static const char *const k_x4_names[] = {"pow(x, 4)", "square(square(x))", "x * x * x * x"};

/* Out: the first, second and third derivatives of sum(x^4), each by
 * graft_gradients of reduce_sum of the previous one. */
static graft_status x4_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                          graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  int form = *(const int *)user;
  graft_value *x = in[0], *y;
  if (form == X4_POW) y = graft_pow(t, x, graft_scalar(t, GRAFT_F64, 4));
  else if (form == X4_SQUARES) y = graft_square(t, graft_square(t, x));
  else y = graft_mul(t, graft_mul(t, graft_mul(t, x, x), x), x);
  graft_value *f = graft_reduce_sum(t, y, 0, NULL, 0);
  for (int k = 0; k < 3; k++) {
    graft_status st = graft_gradients(t, 1, &f, NULL, 1, &x, GRAFT_UNCONNECTED_ZERO, &out[k]);
    if (st) return st;
    f = graft_reduce_sum(t, out[k], 0, NULL, 0);
  }
  return GRAFT_OK;
}

static void test_graft_gradients__third_derivative_of_x4_is_24x(void **state) {
  (void)state;
  const int64_t s[] = {6};
  const double xv[] = {-1.5, -0.5, 0, 0.25, 1, 2};
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s, xv)};
  double d1[6], d2[6], d3[6];
  for (int j = 0; j < 6; j++) {
    d1[j] = 4 * xv[j] * xv[j] * xv[j];
    d2[j] = 12 * xv[j] * xv[j];
    d3[j] = 24 * xv[j];
  }
  for (int form = 0; form < X4_COUNT; form++) {
    graft_tensor *out[3];
    char msg[512];
    tu_assert_run_ok(tu_run(g_rt, x4_cb, &form, 1, in, 3, out, msg), k_x4_names[form], msg);
    for (int k = 0; k < 3; k++) {
      const double *want = k == 0 ? d1 : k == 1 ? d2 : d3;
      for (int j = 0; j < 6; j++)
        if (!tu_close(tu_get(out[k], j), want[j], 1e-13, 1e-13))
          fail_msg("%s: derivative %d at x = %g: got %.17g want %.17g", k_x4_names[form], k + 1,
                   xv[j], tu_get(out[k], j), want[j]);
    }
    tu_destroy_outs(out, 3);
  }
  gc_free(in, 1);
}

/* ---- a symbolic batch dim ----------------------------------------------------------------- */

static void test_graft_gradients__symbolic_batch_one_trace_two_sizes(void **state) {
  (void)state;
  mlp m;
  mlp_make(&m, GRAFT_F64, 4, 6, 3, ACT_TANH, 91);
  static const graft_dtype dts[] = {GRAFT_F64, GRAFT_I32};
  static const int ranks[] = {2, 1};
  static const int64_t sx[] = {-1, 4}, sl[] = {-1};
  static const int64_t *const shapes[] = {sx, sl};
  const graft_signature sig = {.n = 2, .dtypes = dts, .ranks = ranks, .shapes = shapes};
  tu_rng r = {0xba7c4};
  graft_tensor *in[2][2];
  const int64_t batches[] = {5, 9};
  for (int b = 0; b < 2; b++) {
    const int64_t s[] = {batches[b], 4};
    in[b][0] = tu_tensor_rand(&r, GRAFT_F64, 2, s, -2, 2);
    in[b][1] = labels_rand(&r, batches[b], 3);
  }
  gc_problem p[2];
  for (int b = 0; b < 2; b++)
    p[b] = (gc_problem){.loss = mlp_loss, .user = &m, .n_in = 2, .in = in[b], .n_var = 4, .vars = m.v};
  gc_check_signature(g_rt, &sig, 2, p, GC_STEP, GC_FD_TOL, "mlp, batch [-1]");
  for (int b = 0; b < 2; b++) gc_free(in[b], 2);
  mlp_free(&m);
}

/* Ops whose gradients see the symbolic dim: a mean and a logsumexp over
 * it, a reshape to [-1], a matmul contracting it, a softmax along it, a
 * slice to its end, a max over it, and broadcasting against it. */
static graft_value *symbolic_ops_loss(graft_trace *t, int n_in, graft_value *const *in,
                                      void *user) {
  (void)n_in, (void)user;
  return gc_sym_loss(t, in[0], in[1], NULL);
}

static void test_graft_gradients__symbolic_batch_through_many_ops(void **state) {
  (void)state;
  static const graft_dtype dts[] = {GRAFT_F64, GRAFT_F64};
  static const int ranks[] = {2, 1};
  static const int64_t sx[] = {-1, 4}, sc[] = {4};
  static const int64_t *const shapes[] = {sx, sc};
  const graft_signature sig = {.n = 2, .dtypes = dts, .ranks = ranks, .shapes = shapes};
  tu_rng r = {0x5b01};
  graft_tensor *in[2][2];
  const int64_t batches[] = {3, 7};
  gc_problem p[2];
  for (int b = 0; b < 2; b++) {
    const int64_t s[] = {batches[b], 4};
    in[b][0] = tu_tensor_rand(&r, GRAFT_F64, 2, s, -2, 2);
    in[b][1] = tu_tensor_rand(&r, GRAFT_F64, 1, sc, -1, 1);
    p[b] = (gc_problem){.loss = symbolic_ops_loss, .n_in = 2, .in = in[b]};
  }
  gc_check_signature(g_rt, &sig, 2, p, GC_STEP, GC_FD_TOL, "ops over a [-1] dim");
  for (int b = 0; b < 2; b++) gc_free(in[b], 2);
}

/* ---- training -------------------------------------------------------------------------- */

typedef struct sgd {
  mlp *m;
  double lr;
} sgd;

/* One SGD step: loss, gradients of the reads, v -= lr * grad. Out: the loss. */
static graft_status sgd_step_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const sgd *s = user;
  graft_value *L = mlp_loss(t, 2, in, s->m), *reads[4], *g[4];
  for (int k = 0; k < 4; k++) reads[k] = graft_read(t, s->m->v[k]);
  graft_status st = graft_gradients(t, 1, &L, NULL, 4, reads, GRAFT_UNCONNECTED_ZERO, g);
  if (st) return st;
  graft_value *lr = graft_scalar(t, GRAFT_F64, s->lr);
  for (int k = 0; k < 4; k++) graft_assign_sub(t, s->m->v[k], graft_mul(t, lr, g[k]));
  out[0] = L;
  return GRAFT_OK;
}

static graft_status logits_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = mlp_logits(t, user, in[0]);
  return GRAFT_OK;
}

/* Fraction of the rows of x whose larger logit (of two) is the label. */
static double accuracy(graft_function *fwd, graft_tensor *const *in, graft_tensor **logits) {
  tu_assert_call_ok(fwd, 1, in, 1, logits);
  int64_t n = graft_tensor_shape(in[1])[0], right = 0;
  for (int64_t i = 0; i < n; i++)
    right += (tu_get(logits[0], 2 * i + 1) > tu_get(logits[0], 2 * i)) == (int)tu_get(in[1], i);
  return (double)right / (double)n;
}

static void test_graft_assign_sub__sgd_trains_mlp_to_99_percent(void **state) {
  (void)state;
  enum { N = 200, MAX_STEPS = 1000, EVERY = 10 };
  /* Linearly separable: label = [x0 - 0.7 x1 + 0.2 > 0], margin >= 0.05. */
  tu_rng r = {0xc1a55};
  const int64_t sx[] = {N, 2}, sl[] = {N};
  graft_tensor *in[2] = {tu_tensor_from(GRAFT_F64, 2, sx, NULL), tu_tensor_from(GRAFT_I32, 1, sl, NULL)};
  for (int i = 0; i < N;) {
    double a = tu_uniform(&r, -1, 1), b = tu_uniform(&r, -1, 1), margin = a - 0.7 * b + 0.2;
    if (fabs(margin) < 0.05) continue;
    tu_set(in[0], 2 * i, a);
    tu_set(in[0], 2 * i + 1, b);
    tu_set(in[1], i, margin > 0);
    i++;
  }
  mlp m;
  mlp_make(&m, GRAFT_F64, 2, 16, 2, ACT_TANH, 5);
  sgd s = {&m, 0.5};
  graft_function *step = tu_function(g_rt, "sgd_step", sgd_step_cb, &s, 2, 1, NULL);
  graft_function *fwd = tu_function(g_rt, "logits", logits_cb, &m, 1, 1, NULL);
  graft_tensor *loss[1] = {NULL}, *logits[1] = {NULL};
  double acc0 = accuracy(fwd, in, logits), acc = acc0, first_loss = 0;

  /* The first step moves each variable by exactly -lr * its gradient. */
  gc_problem p = {.loss = mlp_loss, .user = &m, .n_in = 2, .in = in, .n_var = 4, .vars = m.v};
  graft_tensor *gin[2], *gvar[4], *before[4];
  gc_analytic(g_rt, &p, NULL, gin, gvar, "sgd: gradient at the start");
  for (int k = 0; k < 4; k++) before[k] = gc_copy(graft_variable_value(m.v[k]));
  tu_assert_call_ok(step, 2, in, 1, loss);
  first_loss = tu_get(loss[0], 0);
  for (int k = 0; k < 4; k++) {
    const graft_tensor *now = graft_variable_value(m.v[k]);
    for (int64_t j = 0; j < graft_tensor_numel(now); j++) {
      double want = tu_get(before[k], j) - s.lr * tu_get(gvar[k], j);
      if (!tu_close(tu_get(now, j), want, 1e-14, 1e-15))
        fail_msg("sgd step: %s[%lld] is %.17g, want %.17g", graft_variable_name(m.v[k]),
                 (long long)j, tu_get(now, j), want);
    }
  }
  gc_free(gin, 2);
  gc_free(gvar, 4);
  gc_free(before, 4);

  int steps = 1;
  while (steps < MAX_STEPS && acc <= 0.99) {
    for (int k = 0; k < EVERY; k++, steps++) tu_assert_call_ok(step, 2, in, 1, loss);
    acc = accuracy(fwd, in, logits);
  }
  print_message("accuracy %.3f -> %.3f after %d steps, loss %.4f -> %.4f\n", acc0, acc, steps,
                first_loss, tu_get(loss[0], 0));
  assert_true(acc0 < 0.9); /* the untrained net is not already right */
  assert_true(acc > 0.99);
  assert_true(tu_get(loss[0], 0) < first_loss);
  assert_int_equal(graft_function_trace_count(step), 1);
  tu_destroy_outs(loss, 1);
  tu_destroy_outs(logits, 1);
  graft_function_destroy(step);
  graft_function_destroy(fwd);
  mlp_free(&m);
  gc_free(in, 2);
}

/* ---- bitwise equality across thread counts --------------------------------------------------- */

static int same_bits(const graft_tensor *a, const graft_tensor *b) {
  size_t n = (size_t)graft_tensor_numel(a) * graft_dtype_size(graft_tensor_dtype(a));
  return graft_tensor_numel(a) == graft_tensor_numel(b) &&
         memcmp(graft_tensor_data(a), graft_tensor_data(b), n) == 0;
}

static void test_graft_gradients__mlp_bitwise_equal_across_threads(void **state) {
  (void)state;
  static const struct {
    const char *sched;
    int threads;
  } cfgs[] = {{"seq", 1}, {"ws", 1}, {"ws", 2}, {"ws", 8}};
  const graft_dtype dts[] = {GRAFT_F64, GRAFT_F32};
  for (size_t d = 0; d < TU_N_OF(dts); d++) {
    tu_rng r = {0xb175};
    mlp m;
    mlp_make(&m, dts[d], 32, 48, 10, ACT_TANH, 13);
    const int64_t sx[] = {64, 32};
    graft_tensor *in[2] = {tu_tensor_rand(&r, dts[d], 2, sx, -2, 2), labels_rand(&r, 64, 10)};
    gc_problem p = {.loss = mlp_loss, .user = &m, .n_in = 2, .in = in, .n_var = 4, .vars = m.v};
    graft_tensor *ref[6] = {0};
    for (size_t c = 0; c < TU_N_OF(cfgs); c++) {
      graft_runtime *rt = tu_runtime_of(cfgs[c].sched, cfgs[c].threads, 64);
      gc_fn g;
      gc_fn_open(&g, rt, &p, 1, NULL);
      graft_tensor *out[6] = {0};
      char ctx[96];
      snprintf(ctx, sizeof ctx, "%s mlp, %s x%d", graft_dtype_name(dts[d]), cfgs[c].sched,
               cfgs[c].threads);
      for (int rep = 0; rep < 3; rep++) {
        gc_fn_call(&g, in, out, ctx);
        graft_plan_stats st;
        assert_int_equal(graft_function_stats(g.f, &st), GRAFT_OK);
        if (st.tiles <= st.live_nodes)
          fail_msg("%s: %lld tiles for %lld nodes: the grain made no tiles", ctx,
                   (long long)st.tiles, (long long)st.live_nodes);
        for (int o = 0; o < g.n_out; o++) {
          if (c == 0 && rep == 0) {
            ref[o] = gc_copy(out[o]);
            continue;
          }
          if (!same_bits(out[o], ref[o]))
            fail_msg("%s (call %d): output %d differs from seq", ctx, rep + 1, o);
        }
      }
      tu_destroy_outs(out, g.n_out);
      gc_fn_close(&g);
      graft_runtime_destroy(rt);
    }
    tu_destroy_outs(ref, 6);
    gc_free(in, 2);
    mlp_free(&m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_gradients__mlp_weights_and_biases_match_fd),
      cmocka_unit_test(test_graft_gradients__non_scalar_seed_matches_fd),
      cmocka_unit_test(test_graft_gradients__value_with_three_consumers_matches_fd),
      cmocka_unit_test(test_graft_gradients__with_respect_to_intermediate_value),
      cmocka_unit_test(test_graft_gradients__unconnected_none_and_zero),
      cmocka_unit_test(test_graft_gradients__stop_gradient_blocks),
      cmocka_unit_test(test_graft_gradients__integer_input_gets_null),
      cmocka_unit_test(test_graft_gradients__bad_seed_or_policy_fails),
      cmocka_unit_test(test_graft_gradients__double_where_sqrt_finite_at_zero),
      cmocka_unit_test(test_graft_custom_gradient__logsumexp_value_and_gradient),
      cmocka_unit_test(test_graft_custom_gradient__overflowing_region_gets_finite_gradient),
      cmocka_unit_test(test_graft_custom_gradient__failing_rule_fails_the_call),
      cmocka_unit_test(test_graft_gradients__third_derivative_of_x4_is_24x),
      cmocka_unit_test(test_graft_gradients__symbolic_batch_one_trace_two_sizes),
      cmocka_unit_test(test_graft_gradients__symbolic_batch_through_many_ops),
      cmocka_unit_test(test_graft_assign_sub__sgd_trains_mlp_to_99_percent),
      cmocka_unit_test(test_graft_gradients__mlp_bitwise_equal_across_threads),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
