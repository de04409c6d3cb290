/* Gradients of conv2d, max_pool2d and avg_pool2d (f64): VJPs against
 * central differences, JVPs against directional differences, <u, J v> from
 * both modes, max pooling's tie rule (the first maximum in window order
 * takes the gradient and gives the tangent), an HVP through a small CNN
 * (conv, relu, max pool, grouped conv, avg pool, dense, softmax
 * cross-entropy) against differences of its gradient, and that CNN's
 * gradients bitwise equal on every executor and thread count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gradcheck.h"
#include "testutil.h"

TU_RUNTIME_GROUP();
TU_SUPPRESS_GOMP_TASK_LEAK();

enum { OP_CONV, OP_MAX, OP_AVG };

typedef struct cg_case {
  const char *name;
  int op;
  int64_t x[4], w[4];  /* w unused by the pools */
  int64_t k[2], s[2], p[2], d[2], groups;
} cg_case;

static const cg_case k_cases[] = {
    {"conv stride 1x2 pad 1x0", OP_CONV, {2, 3, 5, 6}, {4, 3, 3, 2}, {0}, {1, 2}, {1, 0}, {1, 1}, 1},
    {"conv grouped, dilated, strided", OP_CONV, {1, 4, 7, 7}, {4, 2, 3, 3}, {0}, {2, 2}, {1, 1},
     {2, 1}, 2},
    {"conv depthwise", OP_CONV, {2, 4, 5, 5}, {4, 1, 3, 3}, {0}, {1, 1}, {1, 1}, {1, 1}, 4},
    {"conv 2x4 pad 0x2", OP_CONV, {2, 2, 5, 7}, {3, 2, 2, 4}, {0}, {1, 1}, {0, 2}, {1, 1}, 1},
    {"conv 3x3 no pad, rows dilated", OP_CONV, {1, 2, 7, 6}, {2, 2, 3, 3}, {0}, {1, 1}, {0, 0},
     {2, 1}, 1},
    {"max pool 2x3 pad 1", OP_MAX, {2, 2, 5, 6}, {0}, {2, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
    {"max pool overlapping", OP_MAX, {1, 2, 5, 5}, {0}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {"avg pool 3x2 pad 1", OP_AVG, {2, 2, 5, 6}, {0}, {3, 2}, {2, 1}, {1, 1}, {1, 1}, 1},
};

static int n_args(const cg_case *c) { return c->op == OP_CONV ? 2 : 1; }

static graft_value *apply(graft_trace *t, const cg_case *c, graft_value *const *in) {
  if (c->op == OP_CONV) return graft_conv2d(t, in[0], in[1], c->s, c->p, c->d, c->groups);
  if (c->op == OP_MAX) return graft_max_pool2d(t, in[0], c->k, c->s, c->p);
  return graft_avg_pool2d(t, in[0], c->k, c->s, c->p);
}

static void make_args(const cg_case *c, uint64_t seed, graft_tensor **in) {
  tu_rng r = {seed};
  in[0] = tu_tensor_rand(&r, GRAFT_F64, 4, c->x, -1, 1);
  if (c->op == OP_CONV) in[1] = tu_tensor_rand(&r, GRAFT_F64, 4, c->w, -1, 1);
}

/* ---- VJP ---------------------------------------------------------------- */

/* sum(sin(op(args))): every output element weighs in differently. */
static graft_value *sin_loss(graft_trace *t, int n_in, graft_value *const *in, void *user) {
  (void)n_in;
  return graft_reduce_sum(t, graft_sin(t, apply(t, user, in)), 0, NULL, 0);
}

static void test_conv2d__vjp_fd(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_N_OF(k_cases); i++) {
    graft_tensor *in[2] = {0};
    make_args(&k_cases[i], 10 + i, in);
    gc_problem p = {sin_loss, (void *)&k_cases[i], n_args(&k_cases[i]), in, 0, NULL};
    gc_check(g_rt, &p, GC_STEP, GC_FD_TOL, k_cases[i].name);
    gc_free(in, n_args(&k_cases[i]));
  }
}

/* ---- JVP ---------------------------------------------------------------- */

/* in: the args, then their tangents.  out: op(args), its JVP. */
static graft_status trace_jvp(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const cg_case *c = user;
  const int n = n_args(c);
  out[0] = apply(t, c, in);
  return graft_jvp(t, n, in, in + n, 1, out, GRAFT_UNCONNECTED_ZERO, &out[1]);
}

static graft_status trace_op(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = apply(t, user, in);
  return GRAFT_OK;
}

static void test_conv2d__jvp_fd(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_N_OF(k_cases); i++) {
    const cg_case *c = &k_cases[i];
    const int n = n_args(c);
    graft_tensor *in[4] = {0}, *out[2] = {0}, *fd[1] = {0};
    make_args(c, 20 + i, in);
    make_args(c, 30 + i, in + n);
    char msg[512];
    tu_assert_run_ok(tu_run(g_rt, trace_jvp, (void *)c, 2 * n, in, 2, out, msg), c->name, msg);
    gc_fd_directional(g_rt, trace_op, (void *)c, n, in, in + n, 1, GC_STEP, fd, c->name);
    gc_assert_close(out[1], fd[0], GC_FD_TOL, c->name, "JVP");
    gc_free(fd, 1);
    gc_free(out, 2);
    gc_free(in, 2 * n);
  }
}

/* in: args, tangents v, cotangent u.  out: <u, J v> by forward mode, and by
 * reverse mode (the VJP of u dotted with v). */
static graft_status trace_both(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const cg_case *c = user;
  const int n = n_args(c);
  graft_value *y = apply(t, c, in), *jv = NULL, *g[2] = {0}, *u = in[2 * n];
  graft_status st = graft_jvp(t, n, in, in + n, 1, &y, GRAFT_UNCONNECTED_ZERO, &jv);
  if (st) return st;
  out[0] = graft_reduce_sum(t, graft_mul(t, u, jv), 0, NULL, 0);
  graft_value *L = graft_reduce_sum(t, graft_mul(t, u, y), 0, NULL, 0);
  st = graft_gradients(t, 1, &L, NULL, n, in, GRAFT_UNCONNECTED_ZERO, g);
  if (st) return st;
  out[1] = graft_reduce_sum(t, graft_mul(t, g[0], in[n]), 0, NULL, 0);
  if (n == 2)
    out[1] = graft_add(t, out[1], graft_reduce_sum(t, graft_mul(t, g[1], in[n + 1]), 0, NULL, 0));
  return GRAFT_OK;
}

static void test_conv2d__forward_vs_reverse(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_N_OF(k_cases); i++) {
    const cg_case *c = &k_cases[i];
    const int n = n_args(c);
    graft_tensor *in[5] = {0}, *out[2] = {0}, *y = NULL;
    make_args(c, 40 + i, in);
    make_args(c, 50 + i, in + n);
    char msg[512];
    tu_assert_run_ok(tu_run(g_rt, trace_op, (void *)c, n, in, 1, &y, msg), c->name, msg);
    tu_rng r = {60 + i};
    in[2 * n] = tu_tensor_rand(&r, GRAFT_F64, graft_tensor_rank(y), graft_tensor_shape(y), -1, 1);
    tu_assert_run_ok(tu_run(g_rt, trace_both, (void *)c, 2 * n + 1, in, 2, out, msg), c->name, msg);
    if (!tu_close(tu_get(out[0], 0), tu_get(out[1], 0), 1e-12, 1e-12))
      fail_msg("%s: <u, J v> is %.17g by forward mode, %.17g by reverse mode", c->name,
               tu_get(out[0], 0), tu_get(out[1], 0));
    graft_tensor_destroy(y);
    gc_free(out, 2);
    gc_free(in, 2 * n + 1);
  }
}

/* ---- ties ---------------------------------------------------------------- */

/* in: x, tangent.  out: the gradient of sum(max_pool(x)), the JVP. */
static graft_status trace_ties(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  const int64_t k[2] = {2, 2}, s[2] = {1, 1};
  graft_value *y = graft_max_pool2d(t, in[0], k, s, NULL);
  graft_value *L = graft_reduce_sum(t, y, 0, NULL, 0);
  graft_status st = graft_gradients(t, 1, &L, NULL, 1, in, GRAFT_UNCONNECTED_ZERO, &out[0]);
  return st ? st : graft_jvp(t, 1, in, in + 1, 1, &y, GRAFT_UNCONNECTED_ZERO, &out[1]);
}

static void test_max_pool2d__ties_first_wins(void **state) {
  (void)state;
  /* 3x3 of one value but a larger centre tie pair: windows (2x2, stride 1)
   * [[1,1],[1,2]] ... the first maximum in row-major window order wins. */
  const double xv[9] = {1, 1, 1, 1, 2, 2, 1, 2, 2};
  const double tv[9] = {10, 20, 30, 40, 50, 60, 70, 80, 90};
  const int64_t xs[4] = {1, 1, 3, 3};
  graft_tensor *in[2] = {tu_tensor_from(GRAFT_F64, 4, xs, xv), tu_tensor_from(GRAFT_F64, 4, xs, tv)};
  graft_tensor *out[2] = {0};
  char msg[512];
  tu_assert_run_ok(tu_run(g_rt, trace_ties, NULL, 2, in, 2, out, msg), "ties", msg);
  /* Every window's first 2 in window order is x[1][1] (element 4): it
   * takes all four gradients, and every tangent is t[4]. */
  const double gwant[9] = {0, 0, 0, 0, 4, 0, 0, 0, 0};
  const double jwant[4] = {50, 50, 50, 50};
  tu_assert_close(out[0], gwant, 9, 0, 0);
  tu_assert_close(out[1], jwant, 4, 0, 0);
  gc_free(out, 2);
  /* All equal: each window's top-left element. */
  const double flat[9] = {3, 3, 3, 3, 3, 3, 3, 3, 3};
  for (int i = 0; i < 9; i++) tu_set(in[0], i, flat[i]);
  tu_assert_run_ok(tu_run(g_rt, trace_ties, NULL, 2, in, 2, out, msg), "flat", msg);
  const double gflat[9] = {1, 1, 0, 1, 1, 0, 0, 0, 0};
  const double jflat[4] = {10, 20, 40, 50};
  tu_assert_close(out[0], gflat, 9, 0, 0);
  tu_assert_close(out[1], jflat, 4, 0, 0);
  gc_free(out, 2);
  gc_free(in, 2);
}

/* in: x, tangent.  out: the gradient of sum(max_pool(x)) (2x2 windows,
 * stride 2: the usual pool, which has a path of its own), the JVP, the
 * pool. */
static graft_status trace_ties_2x2(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  const int64_t k[2] = {2, 2};
  graft_value *y = graft_max_pool2d(t, in[0], k, NULL, NULL);
  graft_value *L = graft_reduce_sum(t, graft_mul(t, y, y), 0, NULL, 0);
  out[2] = y;
  graft_status st = graft_gradients(t, 1, &L, NULL, 1, in, GRAFT_UNCONNECTED_ZERO, &out[0]);
  return st ? st : graft_jvp(t, 1, in, in + 1, 1, &y, GRAFT_UNCONNECTED_ZERO, &out[1]);
}

/* The 2x2 stride-2 pool: ties go to the first maximum in window order, a
 * NaN wins its window (value and argmax), -0.0 and 0.0 tie. */
static void test_max_pool2d__ties_2x2_stride_2(void **state) {
  (void)state;
  const double xv[16] = {1, 5, -0.0, 0.0, 5, 3, 0.0, -0.0, 0, 0, 7, NAN, 0, 1, 7, 1};
  const int64_t xs[4] = {1, 1, 4, 4};
  static const graft_dtype dts[2] = {GRAFT_F32, GRAFT_F64};
  for (int d = 0; d < 2; d++) {
    graft_tensor *in[2] = {tu_tensor_from(dts[d], 4, xs, xv), tu_tensor_from(dts[d], 4, xs, NULL)};
    for (int i = 0; i < 16; i++) tu_set(in[1], i, 10.0 * (i + 1));
    graft_tensor *out[3] = {0};
    char msg[512];
    tu_assert_run_ok(tu_run(g_rt, trace_ties_2x2, NULL, 2, in, 3, out, msg), "2x2 ties", msg);
    /* argmaxes: element 1 (5 before the tie at 4), 2 (-0.0 ties 0.0), 13,
     * 11 (NaN); the gradient of sum(y^2) there is 2 y. */
    const double ywant[4] = {5, -0.0, 1, NAN};
    const double gwant[16] = {0, 10, -0.0, 0, 0, 0, 0, 0, 0, 0, 0, NAN, 0, 2, 0, 0};
    const double jwant[4] = {20, 30, 140, 120};
    tu_assert_close(out[2], ywant, 4, 0, 0);
    tu_assert_close(out[0], gwant, 16, 0, 0);
    tu_assert_close(out[1], jwant, 4, 0, 0);
    if (!signbit(tu_get(out[2], 1))) fail_msg("the -0.0 / 0.0 tie gave +0.0, want the first, -0.0");
    gc_free(out, 3);
    gc_free(in, 2);
  }
}

/* ---- a small CNN ---------------------------------------------------------- */

/* in: x [N, 1, 8, 8], w1 [4, 1, 3, 3], w2 [4, 2, 3, 3], w3 [16, 3], labels
 * [N] (i32).  conv(pad 1) + relu + max pool 2, grouped conv (2 groups, pad
 * 1) + relu + avg pool 2, dense, softmax cross-entropy. */
static graft_value *cnn_loss(graft_trace *t, graft_value *const *in) {
  const int64_t pad[2] = {1, 1}, k2[2] = {2, 2}, flat[2] = {-1, 16};
  graft_value *h = graft_relu(t, graft_conv2d(t, in[0], in[1], NULL, pad, NULL, 1));
  h = graft_max_pool2d(t, h, k2, NULL, NULL);
  h = graft_relu(t, graft_conv2d(t, h, in[2], NULL, pad, NULL, 2));
  h = graft_reshape(t, graft_avg_pool2d(t, h, k2, NULL, NULL), 2, flat);
  return graft_softmax_cross_entropy(t, graft_matmul(t, h, in[3], 0), in[4]);
}

enum { CNN_IN = 5, CNN_W = 3 };

/* out: the gradient of the loss in each weight. */
static graft_status trace_cnn_grad(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *L = cnn_loss(t, in);
  return graft_gradients(t, 1, &L, NULL, CNN_W, in + 1, GRAFT_UNCONNECTED_ZERO, out);
}

/* in: the CNN's inputs, then a direction per weight.  out: the HVP. */
static graft_status trace_cnn_hvp(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  return graft_hvp(t, cnn_loss(t, in), CNN_W, in + 1, in + CNN_IN, out);
}

static void make_cnn(uint64_t seed, int64_t batch, graft_tensor **in) {
  tu_rng r = {seed};
  const int64_t xs[4] = {batch, 1, 8, 8}, w1[4] = {4, 1, 3, 3}, w2[4] = {4, 2, 3, 3},
                w3[2] = {16, 3}, ls[1] = {batch};
  in[0] = tu_tensor_rand(&r, GRAFT_F64, 4, xs, -1, 1);
  in[1] = tu_tensor_rand(&r, GRAFT_F64, 4, w1, -1, 1);
  in[2] = tu_tensor_rand(&r, GRAFT_F64, 4, w2, -0.5, 0.5);
  in[3] = tu_tensor_rand(&r, GRAFT_F64, 2, w3, -1, 1);
  in[4] = tu_tensor_from(GRAFT_I32, 1, ls, NULL);
  for (int64_t i = 0; i < batch; i++) tu_set(in[4], i, (double)(i % 3));
}

static void test_cnn__hvp_fd(void **state) {
  (void)state;
  graft_tensor *in[CNN_IN + CNN_W] = {0}, *out[CNN_W] = {0}, *fd[CNN_W] = {0};
  make_cnn(70, 3, in);
  tu_rng r = {71};
  for (int j = 0; j < CNN_W; j++)
    in[CNN_IN + j] = tu_tensor_rand(&r, GRAFT_F64, graft_tensor_rank(in[1 + j]),
                                    graft_tensor_shape(in[1 + j]), -1, 1);
  char msg[512];
  tu_assert_run_ok(tu_run(g_rt, trace_cnn_hvp, NULL, CNN_IN + CNN_W, in, CNN_W, out, msg), "hvp",
                   msg);
  /* Differences of the gradient along the direction (the weights move). */
  graft_tensor *dir[CNN_IN] = {NULL, in[CNN_IN], in[CNN_IN + 1], in[CNN_IN + 2], NULL};
  gc_fd_directional(g_rt, trace_cnn_grad, NULL, CNN_IN, in, dir, CNN_W, 1e-5, fd, "hvp");
  for (int j = 0; j < CNN_W; j++) {
    char what[64];
    snprintf(what, sizeof what, "HVP of weight %d", j + 1);
    gc_assert_close(out[j], fd[j], ((gc_tol){1e-5, 1e-7}), "cnn", what);
  }
  gc_free(fd, CNN_W);
  gc_free(out, CNN_W);
  gc_free(in, CNN_IN + CNN_W);
}

/* The CNN's gradients (and its HVP) are bitwise equal on seq, ws x1 / x2 /
 * x8 and omp, at the default grain and at a small one. */
static void test_cnn__bitwise_across_executors(void **state) {
  (void)state;
  static const struct {
    const char *sched;
    int threads;
  } ex[] = {{"seq", 1}, {"ws", 1}, {"ws", 2}, {"ws", 8}, {"omp", 2}};
  static const int64_t grains[] = {0, 512};
  graft_tensor *in[CNN_IN + CNN_W] = {0};
  make_cnn(80, 9, in);
  tu_rng r = {81};
  for (int j = 0; j < CNN_W; j++)
    in[CNN_IN + j] = tu_tensor_rand(&r, GRAFT_F64, graft_tensor_rank(in[1 + j]),
                                    graft_tensor_shape(in[1 + j]), -1, 1);
  for (int hvp = 0; hvp < 2; hvp++)
    for (size_t g = 0; g < TU_N_OF(grains); g++) {
      graft_tensor *first[CNN_W] = {0};
      for (size_t e = 0; e < TU_N_OF(ex); e++) {
        char ctx[128], msg[512];
        snprintf(ctx, sizeof ctx, "%s on %s x%d grain %lld", hvp ? "hvp" : "gradients",
                 ex[e].sched, ex[e].threads, (long long)grains[g]);
        graft_runtime *rt = tu_runtime_of(ex[e].sched, ex[e].threads, grains[g]);
        graft_tensor *out[CNN_W] = {0};
        tu_assert_run_ok(tu_run(rt, hvp ? trace_cnn_hvp : trace_cnn_grad, NULL,
                                hvp ? CNN_IN + CNN_W : CNN_IN, in, CNN_W, out, msg),
                         ctx, msg);
        graft_runtime_destroy(rt);
        for (int j = 0; j < CNN_W; j++) {
          if (!first[j]) {
            first[j] = out[j];
            continue;
          }
          if (!gc_same_bits(out[j], first[j]))
            fail_msg("%s: weight %d differs bitwise from seq", ctx, j + 1);
          graft_tensor_destroy(out[j]);
        }
      }
      gc_free(first, CNN_W);
    }
  gc_free(in, CNN_IN + CNN_W);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv2d__vjp_fd),
      cmocka_unit_test(test_conv2d__jvp_fd),
      cmocka_unit_test(test_conv2d__forward_vs_reverse),
      cmocka_unit_test(test_max_pool2d__ties_first_wins),
      cmocka_unit_test(test_max_pool2d__ties_2x2_stride_2),
      cmocka_unit_test(test_cnn__hvp_fd),
      cmocka_unit_test(test_cnn__bitwise_across_executors),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
