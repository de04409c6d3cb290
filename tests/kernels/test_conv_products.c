/* conv2d's three products (the output, and the gradients in the weight and
 * in the input of <g, conv2d(x, w)>) against naive loops in double, at
 * shapes that take each of conv2d's kernel paths: im2col + gemm, and
 * Winograd F(2x2, 3x3) (3x3, unit stride and dilation, padding 0 to 2, at
 * least GRAFT__WINO_MIN_CH = 16 channels per group on both sides: odd and
 * even planes, groups, batches that leave a partial chunk and a partial
 * run, planes of one block), and the 9-term loops of one input channel
 * under 3x3; f32 and f64; bitwise equal results on seq, ws x1 / x2 / x8 and
 * omp at the default grain and at a small one (many tiles). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

TU_SUPPRESS_GOMP_TASK_LEAK();

typedef struct prod_case {
  const char *what;
  int64_t n, c, h, w, o, k, s, p, d, groups; /* square kernel, stride, padding, dilation */
} prod_case;

static const prod_case k_cases[] = {
    {"winograd, the demo's second layer", 3, 16, 14, 14, 32, 3, 1, 1, 1, 1},
    {"winograd, odd planes, no padding", 2, 16, 9, 7, 16, 3, 1, 0, 1, 1},
    {"winograd, padding 2, odd", 5, 17, 5, 6, 18, 3, 1, 2, 1, 1},
    {"winograd, two groups", 2, 32, 6, 5, 32, 3, 1, 1, 1, 2},
    {"winograd, one block per plane", 7, 16, 2, 2, 16, 3, 1, 1, 1, 1},
    {"winograd, runs of images and a partial one", 19, 16, 14, 14, 16, 3, 1, 1, 1, 1},
    {"gemm, few channels", 2, 3, 8, 7, 5, 3, 1, 1, 1, 1},
    {"gemm, strided", 2, 16, 9, 9, 16, 3, 2, 1, 1, 1},
    {"gemm, dilated", 2, 16, 9, 8, 16, 3, 1, 2, 2, 1},
    {"gemm, padding 3", 1, 16, 4, 4, 16, 3, 1, 3, 1, 1},
    {"nine terms, one input channel", 3, 1, 28, 28, 16, 3, 1, 1, 1, 1},
    {"nine terms, strided, odd plane", 2, 1, 9, 7, 5, 3, 2, 0, 1, 1},
};

static int64_t out_dim(const prod_case *c, int64_t in) {
  return (in + 2 * c->p - c->d * (c->k - 1) - 1) / c->s + 1;
}

/* y = conv2d(x, w), then the gradients of <g, y> in x and w. */
static graft_status trace_products(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const prod_case *c = user;
  const int64_t s[2] = {c->s, c->s}, p[2] = {c->p, c->p}, d[2] = {c->d, c->d};
  out[0] = graft_conv2d(t, in[0], in[1], s, p, d, c->groups);
  return graft_gradients(t, 1, &out[0], &in[2], 2, in, GRAFT_UNCONNECTED_ZERO, out + 1);
}

/* The three products in double and the magnitudes of their sums (sums of
 * |terms|) by the definition: y[n,o,oh,ow] = sum over the group's channels
 * c and kernel (kh, kw) of w[o,c,kh,kw] x[n,c,oh*s-p+kh*d,ow*s-p+kw*d]; dx
 * and dw sum g[n,o,oh,ow] times the other factor over the same terms. */
static void oracle(const prod_case *c, const graft_tensor *x, const graft_tensor *w,
                   const graft_tensor *g, double *want[3], double *mag[3]) {
  const int64_t OH = out_dim(c, c->h), OW = out_dim(c, c->w), Cg = c->c / c->groups,
                Og = c->o / c->groups;
  const int64_t nx = c->n * c->c * c->h * c->w, nw = c->o * Cg * c->k * c->k,
                ny = c->n * c->o * OH * OW;
  const int64_t sizes[3] = {ny, nx, nw};
  for (int i = 0; i < 3; i++)
    for (int64_t e = 0; e < sizes[i]; e++) want[i][e] = mag[i][e] = 0;
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t o = 0; o < c->o; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          const int64_t ye = ((n * c->o + o) * OH + oh) * OW + ow;
          const double gv = tu_get(g, ye);
          for (int64_t ci = 0; ci < Cg; ci++)
            for (int64_t kh = 0; kh < c->k; kh++)
              for (int64_t kw = 0; kw < c->k; kw++) {
                const int64_t ih = oh * c->s - c->p + kh * c->d, iw = ow * c->s - c->p + kw * c->d;
                if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
                const int64_t ch = o / Og * Cg + ci;
                const int64_t xe = ((n * c->c + ch) * c->h + ih) * c->w + iw;
                const int64_t we = ((o * Cg + ci) * c->k + kh) * c->k + kw;
                const double xv = tu_get(x, xe), wv = tu_get(w, we);
                want[0][ye] += wv * xv;
                mag[0][ye] += fabs(wv * xv);
                want[1][xe] += gv * wv;
                mag[1][xe] += fabs(gv * wv);
                want[2][we] += gv * xv;
                mag[2][we] += fabs(gv * xv);
              }
        }
}

static const struct {
  const char *sched;
  int threads;
} k_execs[] = {{"seq", 1}, {"ws", 1}, {"ws", 2}, {"ws", 8}, {"omp", 2}};
static const int64_t k_grains[] = {0, 256};
static const char *const k_names[3] = {"output", "input gradient", "weight gradient"};

static void check_case(const prod_case *c, graft_dtype dt, uint64_t seed) {
  tu_rng rng = {seed};
  const int64_t OH = out_dim(c, c->h), OW = out_dim(c, c->w);
  const int64_t xs[4] = {c->n, c->c, c->h, c->w}, ws[4] = {c->o, c->c / c->groups, c->k, c->k},
                ys[4] = {c->n, c->o, OH, OW};
  graft_tensor *in[3] = {tu_tensor_rand(&rng, dt, 4, xs, -1, 1),
                         tu_tensor_rand(&rng, dt, 4, ws, -1, 1),
                         tu_tensor_rand(&rng, dt, 4, ys, -1, 1)};
  const int64_t *shapes[3] = {ys, xs, ws};
  double *want[3], *mag[3];
  for (int i = 0; i < 3; i++) {
    want[i] = malloc((size_t)tu_numel(4, shapes[i]) * sizeof(double));
    mag[i] = malloc((size_t)tu_numel(4, shapes[i]) * sizeof(double));
    assert_non_null(want[i]);
    assert_non_null(mag[i]);
  }
  oracle(c, in[0], in[1], in[2], want, mag);
  /* Winograd's transforms add and halve a few times over: a few units in
   * the last place of the terms' magnitude, as a long dot product does */
  const double rtol = dt == GRAFT_F32 ? 1e-5 : 1e-12;
  for (size_t gi = 0; gi < TU_N_OF(k_grains); gi++) {
    graft_tensor *first[3] = {NULL, NULL, NULL};
    for (size_t ei = 0; ei < TU_N_OF(k_execs); ei++) {
      char ctx[256], msg[512] = "";
      snprintf(ctx, sizeof ctx, "%s, %s, on %s x%d grain %lld", c->what, graft_dtype_name(dt),
               k_execs[ei].sched, k_execs[ei].threads, (long long)k_grains[gi]);
      graft_runtime *rt = tu_runtime_of(k_execs[ei].sched, k_execs[ei].threads, k_grains[gi]);
      graft_tensor *out[3] = {NULL, NULL, NULL};
      tu_assert_run_ok(tu_run(rt, trace_products, (void *)c, 3, in, 3, out, msg), ctx, msg);
      graft_runtime_destroy(rt);
      for (int i = 0; i < 3; i++) {
        tu_assert_tensor(out[i], dt, 4, shapes[i], ctx);
        for (int64_t e = 0; e < tu_numel(4, shapes[i]); e++) {
          const double got = tu_get(out[i], e), tol = rtol * (mag[i][e] + 1e-30);
          if (!(fabs(got - want[i][e]) <= tol))
            fail_msg("%s: %s element %lld is %.17g, want %.17g (tolerance %g)", ctx, k_names[i],
                     (long long)e, got, want[i][e], tol);
        }
        if (!first[i]) {
          first[i] = out[i];
          continue;
        }
        if (!tu_bitwise_equal(out[i], first[i]))
          fail_msg("%s: %s differs bitwise from seq", ctx, k_names[i]);
        graft_tensor_destroy(out[i]);
      }
    }
    tu_destroy_outs(first, 3);
  }
  for (int i = 0; i < 3; i++) {
    free(want[i]);
    free(mag[i]);
    graft_tensor_destroy(in[i]);
  }
}

static void test_conv2d__products_oracle(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_N_OF(k_cases); i++) {
    check_case(&k_cases[i], GRAFT_F32, 700 + i);
    check_case(&k_cases[i], GRAFT_F64, 800 + i);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv2d__products_oracle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
