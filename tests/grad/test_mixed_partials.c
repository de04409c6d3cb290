/* Second derivatives of the multi-input elementwise ops (add, sub, mul,
 * div, pow, maximum, minimum, where, mul_add), mixed ones above all.
 *
 * For every ordered pair of inputs (x_i, x_j) of an op f, d/dx_j (df/dx_i)
 * is computed four ways: reverse over reverse, forward over reverse,
 * reverse over forward and forward over forward.  Each result is compared
 * with an analytic Hessian entry H_ij, which is symmetric, so both orders
 * (i, j) and (j, i) must give it and the Hessian graft builds is symmetric.
 * The points include 0, negative values, ties and pow's boundary points
 * (base 0, base < 0 with integer exponents, exponent 0 and 1).  Where graft
 * takes a convention instead of the math (pow has no derivative in its
 * exponent at a base <= 0; maximum/minimum and where are piecewise linear)
 * the oracle states it.  The analytic entries are themselves checked
 * against central differences of graft's first derivatives at the points
 * where f is smooth.
 *
 * Two layouts per op: every input a vector of points (each output element
 * is one Hessian entry), and broadcasting inputs ([3,1] with [4], and
 * [2,1,1] for a third input), where each mode's result is the Hessian
 * summed over the broadcast elements that map to it (reverse results to
 * x_j's shape, forward over reverse to x_i's, forward over forward to the
 * output's): the second-order paths through sum_to_shape and
 * broadcast_to. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grad/gradcheck.h"
#include "testutil.h"

TU_RUNTIME_GROUP();

enum op { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MAXIMUM, OP_MINIMUM, OP_WHERE, OP_MUL_ADD };

enum { MAX_PTS = 16 };

/* An op's test points: pts[k][0..n_in) is point k; rough has bit k set
 * where f is not smooth around point k (a tie, a kink, pow's base at or
 * below 0), so central differences do not apply there. */
typedef struct op_row {
  const char *name;
  int op, n_in;
  int n_pts;
  double pts[MAX_PTS][3];
  unsigned rough;
} op_row;

static const op_row k_rows[] = {
    {"add", OP_ADD, 2, 4, {{0, 0}, {-1, 2}, {1e3, -1e-3}, {-0.0, 0.0}}, 0},
    {"sub", OP_SUB, 2, 4, {{0, 0}, {-1, 2}, {1e3, -1e-3}, {-0.0, 0.0}}, 0},
    {"mul", OP_MUL, 2, 5, {{0, 0}, {-1, 3}, {2, -0.5}, {-0.0, 4}, {-2.5, -1.5}}, 0},
    {"div", OP_DIV, 2, 6, {{1, 2}, {-3, 0.5}, {0, 4}, {2.5, -1}, {0, -2}, {-1, -0.25}}, 0},
    /* (4, 0) is the point of issue 14: d/dy (df/dx) = 1/4 both ways.  The
     * first four points have a > 0 (the broadcast layout uses them). */
    {"pow",
     OP_POW,
     2,
     16,
     {{4, 0},
      {2, 3},
      {0.5, -1},
      {1, 2.5},
      {1, 0},
      {3, -0.5},
      {0.25, 1},
      {0, 0},
      {0, 1},
      {0, 2},
      {0, 3},
      {-2, 2},
      {-2, 3},
      {-2, 0},
      {-2, -1},
      {-0.5, 1}},
     0xff80u},
    {"maximum", OP_MAXIMUM, 2, 7, {{1, 2}, {2, 1}, {-3, 5}, {-1, -1}, {0, 0}, {0, -0.0}, {4, -4}},
     0x38u},
    {"minimum", OP_MINIMUM, 2, 7, {{1, 2}, {2, 1}, {-3, 5}, {-1, -1}, {0, 0}, {0, -0.0}, {4, -4}},
     0x38u},
    /* where(c, a, b); c = 0 is a kink in c. */
    {"where", OP_WHERE, 3, 5, {{1, 2, 3}, {-1, -1, 4}, {0, 5, -6}, {2, 0, 0}, {-0.0, 1, 2}}, 0x14u},
    {"mul_add", OP_MUL_ADD, 3, 5, {{1, 2, 3}, {0, 0, 0}, {-1.5, 2, -4}, {3, -0.0, 1}, {-2, -3, 0.5}},
     0},
};

static graft_value *apply(graft_trace *t, int op, graft_value *const *x) {
  switch (op) {
  case OP_ADD: return graft_add(t, x[0], x[1]);
  case OP_SUB: return graft_sub(t, x[0], x[1]);
  case OP_MUL: return graft_mul(t, x[0], x[1]);
  case OP_DIV: return graft_div(t, x[0], x[1]);
  case OP_POW: return graft_pow(t, x[0], x[1]);
  case OP_MAXIMUM: return graft_maximum(t, x[0], x[1]);
  case OP_MINIMUM: return graft_minimum(t, x[0], x[1]);
  case OP_WHERE: return graft_where(t, x[0], x[1], x[2]);
  default: return graft_mul_add(t, x[0], x[1], x[2]);
  }
}

/* ---- the oracle ------------------------------------------------------------- */

/* d^2 pow(a, b) / dx_i dx_j (i <= j).  Where a <= 0, a^b has no derivative
 * in b (graft's convention, documented in src/grad): every entry with b is
 * 0 there, and d^2/da^2 is b (b - 1) a^(b-2), 0 where b is 0 or 1 (a^0 and
 * a^1 have no curvature, at a = 0 too). */
static double pow_hess(int i, int j, double a, double b) {
  if (i == 0 && j == 0) return b == 0 || b == 1 ? 0.0 : b * (b - 1) * pow(a, b - 2);
  if (a <= 0) return 0.0;
  if (i == 0) return pow(a, b - 1) * (1 + b * log(a));
  return log(a) * log(a) * pow(a, b);
}

/* H_ij of op at the point x.  add, sub, maximum, minimum and where are
 * piecewise linear: 0 (ties included). */
static double hess(int op, int i, int j, const double *x) {
  if (i > j) {
    int s = i;
    i = j;
    j = s;
  }
  double a = x[0], b = x[1];
  switch (op) {
  case OP_MUL: return i != j ? 1.0 : 0.0;
  case OP_DIV: return i != j ? -1.0 / (b * b) : i == 0 ? 0.0 : 2 * a / (b * b * b);
  case OP_POW: return pow_hess(i, j, a, b);
  case OP_MUL_ADD: return i == 0 && j == 1 ? 1.0 : 0.0;
  default: return 0.0;
  }
}

/* ---- the traced functions ------------------------------------------------------ */

enum mode { M_RR, M_FR, M_RF, M_FF, M_COUNT };
static const char *const k_mode[M_COUNT] = {"reverse over reverse", "forward over reverse",
                                            "reverse over forward", "forward over forward"};

typedef struct pair_ctx {
  int op, i, j;
} pair_ctx;

/* Outputs: d/dx_j (df/dx_i) by the four modes (enum mode), for
 * f = op(inputs) and the scalar L = reduce_sum(f). */
static graft_status trace_pair(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const pair_ctx *c = user;
  graft_value *xi = in[c->i], *xj = in[c->j];
  graft_value *f = apply(t, c->op, in), *L = graft_reduce_sum(t, f, 0, NULL, 0);
  graft_value *one_i = graft_ones_like(t, xi), *one_j = graft_ones_like(t, xj);
  graft_value *gi = NULL, *ti = NULL;
  graft_status st;
  if ((st = graft_gradients(t, 1, &L, NULL, 1, &xi, GRAFT_UNCONNECTED_ZERO, &gi)) ||
      (st = graft_jvp(t, 1, &xi, &one_i, 1, &f, GRAFT_UNCONNECTED_ZERO, &ti)))
    return st;
  graft_value *Lg = graft_reduce_sum(t, gi, 0, NULL, 0), *Lt = graft_reduce_sum(t, ti, 0, NULL, 0);
  if ((st = graft_gradients(t, 1, &Lg, NULL, 1, &xj, GRAFT_UNCONNECTED_ZERO, &out[M_RR])) ||
      (st = graft_jvp(t, 1, &xj, &one_j, 1, &gi, GRAFT_UNCONNECTED_ZERO, &out[M_FR])) ||
      (st = graft_gradients(t, 1, &Lt, NULL, 1, &xj, GRAFT_UNCONNECTED_ZERO, &out[M_RF])))
    return st;
  return graft_jvp(t, 1, &xj, &one_j, 1, &ti, GRAFT_UNCONNECTED_ZERO, &out[M_FF]);
}

/* Outputs: df/dx_i for every input i (reverse mode), for the differences. */
static graft_status trace_grads(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_out;
  const pair_ctx *c = user;
  graft_value *L = graft_reduce_sum(t, apply(t, c->op, in), 0, NULL, 0);
  return graft_gradients(t, 1, &L, NULL, n_in, in, GRAFT_UNCONNECTED_ZERO, out);
}

/* ---- the layouts ------------------------------------------------------------ */

typedef struct layout {
  int n_in;
  int rank[3];
  int64_t shape[3][3];
  int ro; /* the broadcast (output) shape */
  int64_t so[3];
} layout;

/* Every input a vector of the row's points. */
static layout points_layout(const op_row *r) {
  layout l = {.n_in = r->n_in, .ro = 1, .so = {r->n_pts}};
  for (int i = 0; i < r->n_in; i++) {
    l.rank[i] = 1;
    l.shape[i][0] = r->n_pts;
  }
  return l;
}

/* x0 [3,1], x1 [4], x2 [2,1,1]: output [3,4] or [2,3,4]. */
static layout bcast_layout(const op_row *r) {
  layout l = {.n_in = r->n_in,
              .rank = {2, 1, 3},
              .shape = {{3, 1}, {4}, {2, 1, 1}},
              .ro = r->n_in == 3 ? 3 : 2,
              .so = {3, 4}};
  if (r->n_in == 3) {
    l.so[0] = 2;
    l.so[1] = 3;
    l.so[2] = 4;
  }
  return l;
}

/* Input i of layout l in dtype dt: point k's coordinate i for element k
 * (the first points of the row fill a broadcast layout's short inputs). */
static graft_tensor *layout_input(const op_row *r, const layout *l, int i, graft_dtype dt) {
  graft_tensor *x = tu_tensor_from(dt, l->rank[i], l->shape[i], NULL);
  for (int64_t k = 0; k < graft_tensor_numel(x); k++) tu_set(x, k, r->pts[k][i]);
  return x;
}

/* The expected value of a mode's output shaped (rank, shape): H_ij at each
 * broadcast element, summed into the element of the output it maps to. */
static void expected(const op_row *r, const layout *l, graft_tensor *const *in, int i, int j,
                     int rank, const int64_t *shape, double *want) {
  int64_t n_out = tu_numel(rank, shape), n = tu_numel(l->ro, l->so);
  for (int64_t m = 0; m < n_out; m++) want[m] = 0.0;
  for (int64_t k = 0; k < n; k++) {
    double x[3];
    for (int q = 0; q < l->n_in; q++)
      x[q] = tu_get(in[q], tu_bcast_src(l->ro, l->so, k, l->rank[q], l->shape[q]));
    want[tu_bcast_src(l->ro, l->so, k, rank, shape)] += hess(r->op, i, j, x);
  }
}

/* Every mode, every ordered pair, against the oracle. */
static void check_layout(const op_row *r, const layout *l, graft_dtype dt, const char *lname) {
  graft_tensor *in[3];
  for (int q = 0; q < l->n_in; q++) in[q] = layout_input(r, l, q, dt);
  double rtol = dt == GRAFT_F32 ? 1e-5 : 1e-12, atol = dt == GRAFT_F32 ? 1e-5 : 1e-12;
  for (int i = 0; i < r->n_in; i++)
    for (int j = 0; j < r->n_in; j++) {
      pair_ctx c = {r->op, i, j};
      graft_tensor *out[M_COUNT];
      char msg[512] = "";
      graft_status st = tu_run(g_rt, trace_pair, &c, l->n_in, in, M_COUNT, out, msg);
      char ctx[256];
      snprintf(ctx, sizeof ctx, "%s %s %s: d/dx%d (df/dx%d)", r->name, lname,
               graft_dtype_name(dt), j, i);
      tu_assert_run_ok(st, ctx, msg);
      for (int m = 0; m < M_COUNT; m++) {
        /* reverse results have x_j's shape, forward over reverse x_i's,
         * forward over forward the output's */
        int rank = m == M_FF ? l->ro : m == M_FR ? l->rank[i] : l->rank[j];
        const int64_t *shape = m == M_FF ? l->so : m == M_FR ? l->shape[i] : l->shape[j];
        double want[MAX_PTS * 2];
        expected(r, l, in, i, j, rank, shape, want);
        tu_assert_tensor(out[m], dt, rank, shape, ctx);
        for (int64_t k = 0; k < graft_tensor_numel(out[m]); k++) {
          double got = tu_get(out[m], k);
          if (!isfinite(got) || fabs(got - want[k]) > atol + rtol * fabs(want[k]))
            fail_msg("%s, %s, element %lld: got %.17g want %.17g", ctx, k_mode[m], (long long)k,
                     got, want[k]);
        }
      }
      tu_destroy_outs(out, M_COUNT);
    }
  tu_destroy_outs(in, l->n_in);
}

/* The oracle against central differences of graft's first derivatives
 * along each input, at the row's smooth points (f64). */
static void check_oracle_by_fd(const op_row *r) {
  layout l = points_layout(r);
  graft_tensor *in[3], *dir[3] = {NULL, NULL, NULL};
  for (int q = 0; q < r->n_in; q++) in[q] = layout_input(r, &l, q, GRAFT_F64);
  pair_ctx c = {r->op, 0, 0};
  for (int j = 0; j < r->n_in; j++) {
    dir[j] = tu_tensor_from(GRAFT_F64, 1, l.shape[j], NULL);
    for (int k = 0; k < r->n_pts; k++) tu_set(dir[j], k, 1.0);
    graft_tensor *fd[3];
    char ctx[128];
    snprintf(ctx, sizeof ctx, "%s: differences along x%d", r->name, j);
    gc_fd_directional(g_rt, trace_grads, &c, r->n_in, in, dir, r->n_in, GC_STEP, fd, ctx);
    for (int i = 0; i < r->n_in; i++)
      for (int k = 0; k < r->n_pts; k++) {
        if (r->rough & (1u << k)) continue;
        double got = tu_get(fd[i], k), want = hess(r->op, i, j, r->pts[k]);
        if (fabs(got - want) > 1e-7 + 1e-6 * fabs(want))
          fail_msg("%s: point %d: d/dx%d (df/dx%d) by differences %.17g, oracle %.17g", ctx, k, j,
                   i, got, want);
      }
    gc_free(fd, r->n_in);
    graft_tensor_destroy(dir[j]);
    dir[j] = NULL;
  }
  tu_destroy_outs(in, r->n_in);
}

static void test_hessian(void **state) {
  const op_row *r = *state;
  check_oracle_by_fd(r);
  for (graft_dtype dt = GRAFT_F32; dt <= GRAFT_F64; dt++) {
    layout p = points_layout(r), b = bcast_layout(r);
    check_layout(r, &p, dt, "points");
    check_layout(r, &b, dt, "broadcast");
  }
}

/* The reproducer of issue 14: at x = 4, y = 0, d/dy (df/dx) of pow is 0.25
 * (x^(y-1) (1 + y ln x)), by every mode and in both orders; the first
 * derivatives stay 0 (d/dx) and ln 4 (d/dy). */
static void test_graft_pow__mixed_partial_at_zero_exponent(void **state) {
  (void)state;
  static const int64_t s1[] = {1};
  graft_tensor *in[2] = {tu_tensor_from(GRAFT_F64, 1, s1, (double[]){4}),
                         tu_tensor_from(GRAFT_F64, 1, s1, (double[]){0})};
  for (int i = 0; i < 2; i++) {
    pair_ctx c = {OP_POW, i, 1 - i};
    graft_tensor *out[M_COUNT];
    char msg[512] = "";
    tu_assert_run_ok(tu_run(g_rt, trace_pair, &c, 2, in, M_COUNT, out, msg), "pow", msg);
    for (int m = 0; m < M_COUNT; m++)
      if (tu_get(out[m], 0) != 0.25)
        fail_msg("pow(4, 0): d/dx%d (df/dx%d) by %s is %.17g, want 0.25", 1 - i, i, k_mode[m],
                 tu_get(out[m], 0));
    tu_destroy_outs(out, M_COUNT);
  }
  pair_ctx c = {OP_POW, 0, 0};
  graft_tensor *g[2];
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, trace_grads, &c, 2, in, 2, g, msg), "pow gradients", msg);
  tu_assert_values(g[0], ((double[]){0.0}), 1, 0.0, "d pow(4, 0) / dx");
  tu_assert_values(g[1], ((double[]){log(4.0)}), 1, 1e-15, "d pow(4, 0) / dy");
  tu_destroy_outs(g, 2);
  tu_destroy_outs(in, 2);
}

int main(void) {
  struct CMUnitTest tests[TU_N_OF(k_rows) + 1];
  for (size_t r = 0; r < TU_N_OF(k_rows); r++) {
    static char names[TU_N_OF(k_rows)][64];
    snprintf(names[r], sizeof names[r], "test_hessian__%s_symmetric_in_four_modes",
             k_rows[r].name);
    tests[r] = (struct CMUnitTest){names[r], test_hessian, NULL, NULL, (void *)&k_rows[r]};
  }
  tests[TU_N_OF(k_rows)] = (struct CMUnitTest)cmocka_unit_test(
      test_graft_pow__mixed_partial_at_zero_exponent);
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
