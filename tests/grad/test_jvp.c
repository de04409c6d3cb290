/* Forward mode: graft_jvp, nested derivatives, Hessian-vector products and
 * dense Jacobians.
 *
 * Every op, over the same rows as the VJP tests (op_rows.h: broadcasting,
 * reductions over axis sets with keepdims, matmul flags with broadcast
 * batches, shape ops, the softmax family, cross-entropy w.r.t. the logits,
 * where, cast), with tangents v (odd multiples of 1/16, exact in f32):
 *  - f64: J v against central differences d/de op(x + e v) (step 1e-6, rtol
 *    1e-6), and the dot-product identity <u, J v> (forward mode) = <J^T u,
 *    v> (reverse mode, graft_gradients seeded with u) to rtol 1e-10;
 *  - f32: J v against graft's own f64 J v (rtol 1e-5);
 *  - f64: graft_hvp of the row's loss reduce_sum(w * op(x)) against central
 *    differences of its gradient along v (the JVP rules of every op that a
 *    VJP rule emits), and f32 graft_hvp against f64 (rtol 1e-5).
 * Then: misuse (a primal listed twice, tangents of the wrong shape or
 * dtype, graft_hvp of a non-scalar), the unconnected policies, NULL
 * tangents, stop_gradient; primals that are intermediate values and
 * variable reads; custom-gradient regions; a symbolic batch dim (one
 * trace, two sizes); nested forward mode of
 * x^5 (exact); the four compositions of forward and reverse mode, each
 * against differences of the lower-order quantity; HVPs of sum(v^3)
 * (exact) and of an MLP loss; full Hessians and Jacobians by
 * graft_jacobian_fwd / _rev (integer x or y refused by both, mixed float
 * dtypes giving y's dtype both ways); and bitwise equality across schedulers and
 * thread counts. */
#include <float.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grad/gradcheck.h"
#include "grad/op_rows.h"
#include "testutil.h"

TU_RUNTIME_GROUP();

/* ---- the op rows in forward mode ------------------------------------------------ */

/* What a row function computes. */
enum what {
  W_Y,    /* in: the op's inputs.  out: y = op(x) */
  W_JVP,  /* in: inputs, tangents.  out: y, J v, u, then J^T u per float input */
  W_GRAD, /* in: inputs.  out: the gradient of op_loss per float input */
  W_HVP,  /* in: inputs, tangents.  out: graft_hvp of op_loss per float input */
};

typedef struct row_ctx {
  op_case *c;
  int what;
  int n_f;   /* float inputs (the primals) */
  int fi[3]; /* their positions among the inputs */
} row_ctx;

static row_ctx row_ctx_of(op_case *c, graft_tensor *const *in, int what) {
  row_ctx r = {.c = c, .what = what};
  for (int i = 0; i < c->n_in; i++)
    if (gc_is_float(graft_tensor_dtype(in[i]))) r.fi[r.n_f++] = i;
  return r;
}

static int row_n_in(const row_ctx *r) {
  return r->c->n_in + (r->what == W_JVP || r->what == W_HVP ? r->n_f : 0);
}

static int row_n_out(const row_ctx *r) {
  return r->what == W_Y ? 1 : r->what == W_JVP ? 3 + r->n_f : r->n_f;
}

static graft_status row_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const row_ctx *r = user;
  op_case *c = r->c;
  graft_value *xs[3], *ts[3];
  for (int k = 0; k < r->n_f; k++) {
    xs[k] = in[r->fi[k]];
    ts[k] = in[c->n_in + k];
  }
  switch (r->what) {
  case W_Y: out[0] = apply_op(t, c, in); return graft_trace_status(t);
  case W_JVP: {
    graft_value *y = apply_op(t, c, in);
    if (graft_value_is_poison(y)) return graft_trace_status(t);
    graft_value *u = weights_like(t, y, c->seed + 77);
    out[0] = y;
    out[2] = u;
    graft_status st = graft_jvp(t, r->n_f, xs, ts, 1, &y, GRAFT_UNCONNECTED_ZERO, &out[1]);
    if (st) return st;
    return graft_gradients(t, 1, &y, &u, r->n_f, xs, GRAFT_UNCONNECTED_ZERO, out + 3);
  }
  case W_GRAD: {
    graft_value *L = op_loss(t, c->n_in, in, c);
    return graft_gradients(t, 1, &L, NULL, r->n_f, xs, GRAFT_UNCONNECTED_ZERO, out);
  }
  default: {
    graft_value *L = op_loss(t, c->n_in, in, c);
    return graft_hvp(t, L, r->n_f, xs, ts, out);
  }
  }
}

/* Tangents of the float inputs (NULL for integer ones), in their dtypes:
 * odd multiples of 1/16 in (-1, 1): never 0, exact in f32, and x +- 2^-10 v
 * stays exact on the cast rows' 2^-12 grid. */
static void make_tangents(const op_case *c, graft_tensor *const *in, graft_tensor **tan) {
  tu_rng r = {(c->seed * 0x2545f4914f6cdd1dull + 99u) | 1u};
  for (int i = 0; i < c->n_in; i++) {
    tan[i] = NULL;
    if (!gc_is_float(graft_tensor_dtype(in[i]))) continue;
    tan[i] = tu_tensor_from(graft_tensor_dtype(in[i]), graft_tensor_rank(in[i]),
                            graft_tensor_shape(in[i]), NULL);
    for (int64_t j = 0; j < graft_tensor_numel(tan[i]); j++)
      tu_set(tan[i], j, (2.0 * (double)tu_int(&r, -8, 7) + 1.0) / 16.0);
  }
}

/* Call the row function r on the inputs in (and the tangents tan of the
 * float inputs where r needs them); out: row_n_out(r) slots. */
static void row_call(row_ctx *r, graft_tensor *const *in, graft_tensor *const *tan,
                     graft_tensor **out, const char *ctx) {
  graft_tensor *all[6];
  int n = 0;
  for (int i = 0; i < r->c->n_in; i++) all[n++] = in[i];
  if (r->what == W_JVP || r->what == W_HVP)
    for (int k = 0; k < r->n_f; k++) all[n++] = tan[r->fi[k]];
  assert_int_equal(n, row_n_in(r));
  char msg[512] = "";
  graft_status st = tu_run(g_rt, row_cb, r, n, all, row_n_out(r), out, msg);
  tu_assert_run_ok(st, ctx, msg);
}

/* The J v of a row call must have y's dtype and shape; J^T u the input's. */
static void check_jvp_outputs(const row_ctx *r, graft_tensor *const *in, graft_tensor **out,
                              const char *ctx) {
  char what[400];
  snprintf(what, sizeof what, "%.300s: J v", ctx);
  tu_assert_tensor(out[1], graft_tensor_dtype(out[0]), graft_tensor_rank(out[0]),
                   graft_tensor_shape(out[0]), what);
  for (int k = 0; k < r->n_f; k++) {
    const graft_tensor *x = in[r->fi[k]];
    snprintf(what, sizeof what, "%.300s: J^T u of input %d", ctx, r->fi[k]);
    tu_assert_tensor(out[3 + k], graft_tensor_dtype(x), graft_tensor_rank(x),
                     graft_tensor_shape(x), what);
  }
}

/* f64 (or the row's fixed dtypes): J v against central differences along
 * v, and <u, J v> = <J^T u, v>. */
static void check_fd_and_dot(op_case *c) {
  graft_tensor *in[3], *tan[3], *out[6] = {0}, *fd[1];
  make_inputs(c, GRAFT_F64, in);
  make_tangents(c, in, tan);
  row_ctx r = row_ctx_of(c, in, W_JVP), ry = row_ctx_of(c, in, W_Y);
  char ctx[256];
  snprintf(ctx, sizeof ctx, "%s (f64 J v vs finite differences)", c->name);
  row_call(&r, in, tan, out, ctx);
  check_jvp_outputs(&r, in, out, ctx);
  gc_fd_directional(g_rt, row_cb, &ry, c->n_in, in, tan, 1, c->step ? c->step : GC_STEP, fd, ctx);
  gc_assert_close(out[1], fd[0], GC_FD_TOL, ctx, "J v");

  /* the dot-product identity */
  double fwd = 0, rev = 0;
  for (int64_t j = 0; j < graft_tensor_numel(out[1]); j++)
    fwd += tu_get(out[2], j) * tu_get(out[1], j);
  for (int k = 0; k < r.n_f; k++)
    for (int64_t j = 0; j < graft_tensor_numel(out[3 + k]); j++)
      rev += tu_get(out[3 + k], j) * tu_get(tan[r.fi[k]], j);
  if (!tu_close(fwd, rev, 1e-10, 0.0))
    fail_msg("%s: <u, J v> = %.17g (forward) but <J^T u, v> = %.17g (reverse)", c->name, fwd, rev);

  gc_free(fd, 1);
  gc_free(out, row_n_out(&r));
  gc_free(tan, c->n_in);
  gc_free(in, c->n_in);
}

/* f32 J v against graft's f64 J v of the same numbers. */
static void check_f32(op_case *c) {
  graft_tensor *in64[3], *in32[3], *t64[3], *t32[3], *o64[6] = {0}, *o32[6] = {0};
  make_inputs(c, GRAFT_F64, in64);
  make_inputs(c, GRAFT_F32, in32);
  make_tangents(c, in64, t64);
  make_tangents(c, in32, t32);
  row_ctx r64 = row_ctx_of(c, in64, W_JVP), r32 = row_ctx_of(c, in32, W_JVP);
  char ctx[256];
  snprintf(ctx, sizeof ctx, "%s (f32 J v vs f64)", c->name);
  row_call(&r64, in64, t64, o64, ctx);
  row_call(&r32, in32, t32, o32, ctx);
  check_jvp_outputs(&r32, in32, o32, ctx);
  if (graft_tensor_dtype(o32[1]) != GRAFT_F32) fail_msg("%s: J v is not f32", ctx);
  /* as for the f32 gradients: 1e-5 relative plus 1e-6 of the scale */
  gc_tol tol = {1e-5, 1e-6 * fmax(1.0, gc_max_abs(&o64[1], 1))};
  gc_assert_close(o32[1], o64[1], tol, ctx, "J v");
  gc_free(o64, row_n_out(&r64));
  gc_free(o32, row_n_out(&r32));
  gc_free(t64, c->n_in);
  gc_free(t32, c->n_in);
  gc_free(in64, c->n_in);
  gc_free(in32, c->n_in);
}

/* f64: graft_hvp of op_loss along v against differences of its gradient. */
static void check_hvp(op_case *c) {
  graft_tensor *in[3], *tan[3], *hv[3] = {0}, *fd[3];
  make_inputs(c, GRAFT_F64, in);
  make_tangents(c, in, tan);
  row_ctx rh = row_ctx_of(c, in, W_HVP), rg = row_ctx_of(c, in, W_GRAD);
  char ctx[256];
  snprintf(ctx, sizeof ctx, "%s (f64 HVP vs differences of the gradient)", c->name);
  row_call(&rh, in, tan, hv, ctx);
  gc_fd_directional(g_rt, row_cb, &rg, c->n_in, in, tan, rg.n_f, c->step ? c->step : GC_STEP, fd,
                    ctx);
  for (int k = 0; k < rh.n_f; k++) {
    const graft_tensor *x = in[rh.fi[k]];
    char what[64];
    snprintf(what, sizeof what, "H v of input %d", rh.fi[k]);
    tu_assert_tensor(hv[k], graft_tensor_dtype(x), graft_tensor_rank(x), graft_tensor_shape(x),
                     ctx);
    gc_assert_close(hv[k], fd[k], GC_FD_TOL, ctx, what);
  }
  gc_free(hv, rh.n_f);
  gc_free(fd, rg.n_f);
  gc_free(tan, c->n_in);
  gc_free(in, c->n_in);
}

/* f32 graft_hvp against graft's f64 graft_hvp of the same numbers. */
static void check_hvp_f32(op_case *c) {
  graft_tensor *in64[3], *in32[3], *t64[3], *t32[3], *h64[3] = {0}, *h32[3] = {0};
  make_inputs(c, GRAFT_F64, in64);
  make_inputs(c, GRAFT_F32, in32);
  make_tangents(c, in64, t64);
  make_tangents(c, in32, t32);
  row_ctx r64 = row_ctx_of(c, in64, W_HVP), r32 = row_ctx_of(c, in32, W_HVP);
  char ctx[256];
  snprintf(ctx, sizeof ctx, "%s (f32 HVP vs f64)", c->name);
  row_call(&r64, in64, t64, h64, ctx);
  row_call(&r32, in32, t32, h32, ctx);
  gc_tol tol = {1e-5, 1e-6 * fmax(1.0, gc_max_abs(h64, r64.n_f))};
  for (int k = 0; k < r32.n_f; k++) {
    const graft_tensor *x = in32[r32.fi[k]];
    char what[64];
    snprintf(what, sizeof what, "H v of input %d", r32.fi[k]);
    tu_assert_tensor(h32[k], GRAFT_F32, graft_tensor_rank(x), graft_tensor_shape(x), ctx);
    gc_assert_close(h32[k], h64[k], tol, ctx, what);
  }
  gc_free(h64, r64.n_f);
  gc_free(h32, r32.n_f);
  gc_free(t64, c->n_in);
  gc_free(t32, c->n_in);
  gc_free(in64, c->n_in);
  gc_free(in32, c->n_in);
}

enum mode { M_FD_DOT, M_F32, M_HVP, M_HVP_F32 };

static void run_group(int g, int mode) {
  case_list l = {0};
  build_group(g, &l);
  int n = 0;
  for (int i = 0; i < l.n; i++) {
    if (mode == M_FD_DOT) check_fd_and_dot(&l.c[i]), n++;
    else if (mode == M_F32 && !l.c[i].mixed) check_f32(&l.c[i]), n++;
    else if (mode == M_HVP) check_hvp(&l.c[i]), n++;
    else if (mode == M_HVP_F32 && !l.c[i].mixed) check_hvp_f32(&l.c[i]), n++;
  }
  print_message("%d cases\n", n);
  assert_true(n > 0);
  free(l.c);
}

static void test_graft_jvp__unary_ops_match_fd_and_vjp(void **state) {
  (void)state;
  run_group(G_UNARY, M_FD_DOT);
}
static void test_graft_jvp__unary_ops_f32_match_f64(void **state) {
  (void)state;
  run_group(G_UNARY, M_F32);
}
static void test_graft_hvp__unary_ops_match_fd_of_gradient(void **state) {
  (void)state;
  run_group(G_UNARY, M_HVP);
}
static void test_graft_hvp__unary_ops_f32_match_f64(void **state) {
  (void)state;
  run_group(G_UNARY, M_HVP_F32);
}
static void test_graft_jvp__binary_ops_broadcast_match_fd_and_vjp(void **state) {
  (void)state;
  run_group(G_BINARY, M_FD_DOT);
}
static void test_graft_jvp__binary_ops_broadcast_f32_match_f64(void **state) {
  (void)state;
  run_group(G_BINARY, M_F32);
}
static void test_graft_hvp__binary_ops_broadcast_match_fd_of_gradient(void **state) {
  (void)state;
  run_group(G_BINARY, M_HVP);
}
static void test_graft_hvp__binary_ops_broadcast_f32_match_f64(void **state) {
  (void)state;
  run_group(G_BINARY, M_HVP_F32);
}
static void test_graft_jvp__reductions_match_fd_and_vjp(void **state) {
  (void)state;
  run_group(G_REDUCE, M_FD_DOT);
}
static void test_graft_jvp__reductions_f32_match_f64(void **state) {
  (void)state;
  run_group(G_REDUCE, M_F32);
}
static void test_graft_hvp__reductions_match_fd_of_gradient(void **state) {
  (void)state;
  run_group(G_REDUCE, M_HVP);
}
static void test_graft_hvp__reductions_f32_match_f64(void **state) {
  (void)state;
  run_group(G_REDUCE, M_HVP_F32);
}
static void test_graft_jvp__matmul_flags_and_batch_match_fd_and_vjp(void **state) {
  (void)state;
  run_group(G_MATMUL, M_FD_DOT);
}
static void test_graft_jvp__matmul_flags_and_batch_f32_match_f64(void **state) {
  (void)state;
  run_group(G_MATMUL, M_F32);
}
static void test_graft_hvp__matmul_flags_and_batch_match_fd_of_gradient(void **state) {
  (void)state;
  run_group(G_MATMUL, M_HVP);
}
static void test_graft_hvp__matmul_flags_and_batch_f32_match_f64(void **state) {
  (void)state;
  run_group(G_MATMUL, M_HVP_F32);
}
static void test_graft_jvp__shape_nn_where_cast_match_fd_and_vjp(void **state) {
  (void)state;
  run_group(G_MISC, M_FD_DOT);
}
static void test_graft_jvp__shape_nn_where_f32_match_f64(void **state) {
  (void)state;
  run_group(G_MISC, M_F32);
}
static void test_graft_hvp__shape_nn_where_cast_match_fd_of_gradient(void **state) {
  (void)state;
  run_group(G_MISC, M_HVP);
}
static void test_graft_hvp__shape_nn_where_f32_match_f64(void **state) {
  (void)state;
  run_group(G_MISC, M_HVP_F32);
}

/* ---- misuse ------------------------------------------------------------------------ */

enum { BAD_TWICE, BAD_SHAPE, BAD_RANK, BAD_DTYPE, BAD_HVP_RANK };

typedef struct bad_ctx {
  int kind;
  graft_status got; /* what the graft call returned inside the trace */
  int out_null;     /* its output slot was left NULL */
} bad_ctx;

/* in: x [3] f64.  Calls graft_jvp (or graft_hvp) wrongly; out[0] = exp(x)
 * if that somehow succeeds. */
static graft_status bad_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  bad_ctx *b = user;
  graft_value *x = in[0], *y = graft_exp(t, x), *j[1] = {(graft_value *)1};
  const int64_t s4[] = {4}, s31[] = {3, 1}, s3[] = {3};
  switch (b->kind) {
  case BAD_TWICE: {
    graft_value *p[2] = {x, x}, *v[2] = {graft_ones_like(t, x), graft_ones_like(t, x)};
    b->got = graft_jvp(t, 2, p, v, 1, &y, GRAFT_UNCONNECTED_NONE, j);
    break;
  }
  case BAD_SHAPE: {
    graft_value *v = graft_fill(t, GRAFT_F64, 1, s4, 1.0);
    b->got = graft_jvp(t, 1, &x, &v, 1, &y, GRAFT_UNCONNECTED_NONE, j);
    break;
  }
  case BAD_RANK: {
    graft_value *v = graft_fill(t, GRAFT_F64, 2, s31, 1.0);
    b->got = graft_jvp(t, 1, &x, &v, 1, &y, GRAFT_UNCONNECTED_NONE, j);
    break;
  }
  case BAD_DTYPE: {
    graft_value *v = graft_fill(t, GRAFT_F32, 1, s3, 1.0);
    b->got = graft_jvp(t, 1, &x, &v, 1, &y, GRAFT_UNCONNECTED_NONE, j);
    break;
  }
  default: {
    graft_value *v = graft_ones_like(t, x);
    b->got = graft_hvp(t, y, 1, &x, &v, j); /* y is not a scalar */
    break;
  }
  }
  b->out_null = j[0] == NULL;
  if (b->got) return b->got;
  out[0] = j[0] ? j[0] : y;
  return GRAFT_OK;
}

/* Run bad_cb of kind: the graft call returns want inside the trace and
 * leaves its output NULL, and the function call fails with want and a
 * message naming must_name and also (may be NULL). */
static void check_bad(int kind, graft_status want, const char *must_name, const char *also,
                      const char *ctx) {
  const int64_t s3[] = {3};
  const double xv[] = {0.5, -1, 2};
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 1, s3, xv)}, *out[1] = {NULL};
  bad_ctx b = {.kind = kind};
  char msg[512] = "";
  graft_status st = tu_run(g_rt, bad_cb, &b, 1, in, 1, out, msg);
  if (b.got != want)
    fail_msg("%s: the call returned %s inside the trace, want %s", ctx, graft_status_name(b.got),
             graft_status_name(want));
  if (!b.out_null) fail_msg("%s: a failed call left an output", ctx);
  tu_assert_run_fails(st, want, out[0], msg, must_name, ctx);
  if (also && !strstr(msg, also)) fail_msg("%s: message \"%s\" does not name %s", ctx, msg, also);
  print_message("%s: %s\n", ctx, msg);
  gc_free(in, 1);
}

static void test_graft_jvp__primal_listed_twice_is_einval(void **state) {
  (void)state;
  check_bad(BAD_TWICE, GRAFT_EINVAL, "graft_jvp", "primals", "x listed twice");
}

static void test_graft_jvp__tangent_of_wrong_shape_is_eshape(void **state) {
  (void)state;
  check_bad(BAD_SHAPE, GRAFT_ESHAPE, "graft_jvp", "tangents", "tangent [4] for a primal [3]");
  check_bad(BAD_RANK, GRAFT_ESHAPE, "graft_jvp", "tangents", "tangent [3,1] for a primal [3]");
}

/* The header says tangents must have the primal's dtype: an f32 tangent for
 * an f64 primal fails (ESHAPE, as the shape-or-dtype mismatch it is). */
static void test_graft_jvp__tangent_of_wrong_dtype_fails(void **state) {
  (void)state;
  check_bad(BAD_DTYPE, GRAFT_ESHAPE, "graft_jvp", "tangents", "f32 tangent for an f64 primal");
}

static void test_graft_hvp__non_scalar_y_is_eshape(void **state) {
  (void)state;
  check_bad(BAD_HVP_RANK, GRAFT_ESHAPE, "graft_hvp", "scalar", "graft_hvp of exp(x) [3]");
}

/* ---- unconnected outputs and stop_gradient ---------------------------------------- */

enum { N_UNC = 6 };

typedef struct unc_ctx {
  graft_unconnected policy;
  int null[N_UNC];
} unc_ctx;

/* in: x [3], z [2,2], v [3] (x's tangent).  ys: exp(x), sin(z) (no primal
 * reaches it), greater(x, 0) (a comparison), cast(cast(x, i32), f64)
 * (through an integer), exp(stop_gradient(x)), x itself.  out: the JVPs
 * (zeros like y where NULL). */
static graft_status unc_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  unc_ctx *u = user;
  graft_value *x = in[0], *z = in[1], *v = in[2];
  graft_value *ys[N_UNC] = {
      graft_exp(t, x),
      graft_sin(t, z),
      graft_greater(t, x, graft_zeros_like(t, x)),
      graft_cast(t, graft_cast(t, x, GRAFT_I32), GRAFT_F64),
      graft_exp(t, graft_stop_gradient(t, x)),
      x,
  };
  graft_value *j[N_UNC];
  graft_status st = graft_jvp(t, 1, &x, &v, N_UNC, ys, u->policy, j);
  if (st) return st;
  for (int k = 0; k < N_UNC; k++) {
    u->null[k] = j[k] == NULL;
    out[k] = j[k] ? j[k] : graft_zeros_like(t, ys[k]);
  }
  return GRAFT_OK;
}

static void test_graft_jvp__unconnected_none_and_zero(void **state) {
  (void)state;
  const int64_t s3[] = {3}, s22[] = {2, 2};
  const double xv[] = {0.5, -1.25, 2}, zv[] = {1, 2, 3, 4}, vv[] = {0.25, -3, 1.5};
  graft_tensor *in[3] = {tu_tensor_from(GRAFT_F64, 1, s3, xv), tu_tensor_from(GRAFT_F64, 2, s22, zv),
                         tu_tensor_from(GRAFT_F64, 1, s3, vv)};
  double want0[3], zero[4] = {0};
  for (int i = 0; i < 3; i++) want0[i] = exp(xv[i]) * vv[i];
  static const char *names[N_UNC] = {"exp(x)", "sin(z)", "greater(x, 0)", "through i32",
                                     "exp(stop_gradient(x))", "x"};
  for (int pol = 0; pol < 2; pol++) {
    unc_ctx u = {.policy = pol ? GRAFT_UNCONNECTED_ZERO : GRAFT_UNCONNECTED_NONE};
    graft_tensor *out[N_UNC] = {0};
    char msg[512] = "", ctx[128];
    graft_status st = tu_run(g_rt, unc_cb, &u, 3, in, N_UNC, out, msg);
    tu_assert_run_ok(st, pol ? "ZERO" : "NONE", msg);
    for (int k = 0; k < N_UNC; k++) {
      snprintf(ctx, sizeof ctx, "%s: J v of %s", pol ? "ZERO" : "NONE", names[k]);
      int want_null = !pol && k >= 1 && k <= 4;
      if (u.null[k] != want_null)
        fail_msg("%s is %s, want %s", ctx, u.null[k] ? "NULL" : "a value",
                 want_null ? "NULL" : "a value");
      const graft_tensor *shape_of = k == 1 ? in[1] : in[0];
      tu_assert_tensor(out[k], GRAFT_F64, graft_tensor_rank(shape_of), graft_tensor_shape(shape_of),
                       ctx);
      if (k == 0) tu_assert_values(out[k], want0, 3, 1e-14, ctx);
      else if (k == 5) tu_assert_values(out[k], vv, 3, 0.0, ctx);
      else tu_assert_values(out[k], zero, graft_tensor_numel(out[k]), 0.0, ctx);
    }
    tu_destroy_outs(out, N_UNC);
  }
  gc_free(in, 3);
}

/* A NULL tangent is a zero tangent. */
static graft_status null_tangent_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                    graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *p[2] = {in[0], in[1]}, *v[2] = {in[2], NULL};
  graft_value *y = graft_mul(t, graft_sin(t, in[0]), graft_exp(t, in[1]));
  graft_value *unreached = graft_exp(t, in[1]), *ys[2] = {y, unreached};
  graft_value *j[2];
  graft_status st = graft_jvp(t, 2, p, v, 2, ys, GRAFT_UNCONNECTED_NONE, j);
  if (st) return st;
  if (j[1] != NULL) return graft_trace_fail(t, GRAFT_EINTERNAL, "test: exp(b) has a tangent");
  out[0] = j[0];
  return GRAFT_OK;
}

static void test_graft_jvp__null_tangent_is_zero(void **state) {
  (void)state;
  const int64_t s3[] = {3};
  const double av[] = {0.5, -1, 2}, bv[] = {0.25, 1, -0.5}, vv[] = {1, -2, 0.5};
  graft_tensor *in[3] = {tu_tensor_from(GRAFT_F64, 1, s3, av), tu_tensor_from(GRAFT_F64, 1, s3, bv),
                         tu_tensor_from(GRAFT_F64, 1, s3, vv)},
               *out[1] = {NULL};
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, null_tangent_cb, NULL, 3, in, 1, out, msg), "NULL tangent", msg);
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = cos(av[i]) * vv[i] * exp(bv[i]);
  tu_assert_values(out[0], want, 3, 1e-14, "d/de sin(a + e v) exp(b)");
  gc_free(out, 1);
  gc_free(in, 3);
}

/* in: x [4], v [4].  out: J v of x * stop(x), stop(x) + x, sum(x * stop(x)),
 * exp(stop(x)) (must be NULL under NONE), and graft_hvp of
 * sum(square(x) * stop(x)) along v. */
static graft_status stop_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  int *blocked = user;
  graft_value *x = in[0], *v = in[1], *s = graft_stop_gradient(t, x);
  graft_value *ys[4] = {graft_mul(t, x, s), graft_add(t, s, x),
                        graft_reduce_sum(t, graft_mul(t, x, s), 0, NULL, 0), graft_exp(t, s)};
  graft_value *j[4];
  graft_status st = graft_jvp(t, 1, &x, &v, 4, ys, GRAFT_UNCONNECTED_NONE, j);
  if (st) return st;
  *blocked = j[3] == NULL;
  out[0] = j[0];
  out[1] = j[1];
  out[2] = j[2];
  graft_value *L = graft_reduce_sum(t, graft_mul(t, graft_square(t, x), s), 0, NULL, 0);
  return graft_hvp(t, L, 1, &x, &v, &out[3]);
}

static void test_graft_jvp__stop_gradient_blocks_tangents(void **state) {
  (void)state;
  const int64_t s4[] = {4};
  const double xv[] = {0.5, -1.25, 2, 3}, vv[] = {0.25, -3, 1.5, 1};
  graft_tensor *in[2] = {tu_tensor_from(GRAFT_F64, 1, s4, xv), tu_tensor_from(GRAFT_F64, 1, s4, vv)};
  graft_tensor *out[4] = {0};
  int blocked = 0;
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, stop_cb, &blocked, 2, in, 4, out, msg), "stop_gradient", msg);
  assert_true(blocked);
  double xv_v[4], hv[4], dot = 0;
  for (int i = 0; i < 4; i++) {
    xv_v[i] = xv[i] * vv[i];
    hv[i] = 2 * xv[i] * vv[i];
    dot += xv_v[i];
  }
  /* dyadic numbers: every result is exact */
  tu_assert_values(out[0], xv_v, 4, 0.0, "J v of x * stop(x) (not 2 x v)");
  tu_assert_values(out[1], vv, 4, 0.0, "J v of stop(x) + x");
  tu_assert_values(out[2], &dot, 1, 0.0, "J v of sum(x * stop(x))");
  tu_assert_values(out[3], hv, 4, 0.0, "H v of sum(x^2 stop(x)) (not 6 x v)");
  gc_free(out, 4);
  gc_free(in, 2);
}

/* ---- primals that are not inputs ------------------------------------------------------ */

/* in: x [3], tr [3], tu [3]; user: the variable V [3].  u = sin(x), r =
 * read(V), y = exp(u) * x + r * u.  out: the JVP of y w.r.t. the primals
 * (r, u), listed against their trace order, along (tr, tu): x is held
 * fixed, so the tangent is exp(u) x tu + tr u + r tu. */
static graft_status inter_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_value *x = in[0], *u = graft_sin(t, x), *r = graft_read(t, user);
  graft_value *y = graft_add(t, graft_mul(t, graft_exp(t, u), x), graft_mul(t, r, u));
  graft_value *p[2] = {r, u}, *v[2] = {in[1], in[2]};
  return graft_jvp(t, 2, p, v, 1, &y, GRAFT_UNCONNECTED_NONE, out);
}

static void test_graft_jvp__intermediate_and_variable_primals_in_any_order(void **state) {
  (void)state;
  const int64_t s3[] = {3};
  const double xv[] = {0.5, -1.25, 2}, tr[] = {1, -0.5, 0.25}, tu[] = {-2, 0.75, 1.5},
               rv[] = {0.3, -0.7, 1.1};
  graft_variable *V = NULL;
  assert_int_equal(graft_variable_create(NULL, "V", GRAFT_F64, 1, s3, rv, GRAFT_VAR_TRAINABLE, &V),
                   GRAFT_OK);
  graft_tensor *in[3] = {tu_tensor_from(GRAFT_F64, 1, s3, xv), tu_tensor_from(GRAFT_F64, 1, s3, tr),
                         tu_tensor_from(GRAFT_F64, 1, s3, tu)},
               *out[1] = {NULL};
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, inter_cb, V, 3, in, 1, out, msg), "JVP w.r.t. (read(V), sin(x))",
                   msg);
  double want[3];
  for (int i = 0; i < 3; i++) {
    double u = sin(xv[i]);
    want[i] = exp(u) * xv[i] * tu[i] + tr[i] * u + rv[i] * tu[i];
  }
  tu_assert_values(out[0], want, 3, 1e-14, "JVP w.r.t. (read(V), sin(x))");
  gc_free(out, 1);
  gc_free(in, 3);
  graft_variable_destroy(V);
}

/* ---- custom gradients -------------------------------------------------------------------- */

/* The stable rule of a naive log-sum-exp: softmax(x) * gy. */
static graft_status lse_vjp(graft_trace *t, int n_x, graft_value *const *xs, graft_value *y,
                            graft_value *gy, graft_value **gxs, void *user) {
  (void)n_x, (void)y, (void)user;
  gxs[0] = graft_mul(t, graft_softmax(t, xs[0], -1), gy);
  return graft_trace_status(t);
}

/* lse(x [3,5]) over the last axis (keepdims) with the custom rule. */
static graft_value *lse_region(graft_trace *t, graft_value *x) {
  const int ax[] = {-1};
  graft_value *y = graft_log(t, graft_reduce_sum(t, graft_exp(t, x), 1, ax, 1));
  return graft_custom_gradient(t, 1, &x, y, lse_vjp, NULL);
}

static graft_status lse_y_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = lse_region(t, in[0]);
  return graft_trace_status(t);
}

/* loss = sum(w * square(lse(x))); out: its gradient. */
static graft_value *lse_loss(graft_trace *t, graft_value *x) {
  graft_value *s = graft_square(t, lse_region(t, x));
  return graft_reduce_sum(t, graft_mul(t, weights_like(t, s, 5), s), 0, NULL, 0);
}

static graft_status lse_grad_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *L = lse_loss(t, in[0]);
  return graft_gradients(t, 1, &L, NULL, 1, in, GRAFT_UNCONNECTED_ZERO, out);
}

/* in: x, v.  out: J v of lse(x) (forward mode differentiates the region's
 * ops), and graft_hvp of the loss (forward over the custom reverse rule). */
static graft_status lse_fwd_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *y = lse_region(t, in[0]);
  graft_status st = graft_jvp(t, 1, in, in + 1, 1, &y, GRAFT_UNCONNECTED_NONE, out);
  if (st) return st;
  return graft_hvp(t, lse_loss(t, in[0]), 1, in, in + 1, out + 1);
}

static void test_graft_jvp__through_custom_gradient_matches_fd(void **state) {
  (void)state;
  tu_rng r = {0x15f};
  const int64_t sx[] = {3, 5};
  graft_tensor *in[2] = {tu_tensor_rand(&r, GRAFT_F64, 2, sx, -2, 2),
                         tu_tensor_rand(&r, GRAFT_F64, 2, sx, -1, 1)},
               *out[2] = {0}, *fd[1], *fdh[1];
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, lse_fwd_cb, NULL, 2, in, 2, out, msg), "custom lse", msg);
  gc_fd_directional(g_rt, lse_y_cb, NULL, 1, in, in + 1, 1, GC_STEP, fd, "custom lse");
  gc_fd_directional(g_rt, lse_grad_cb, NULL, 1, in, in + 1, 1, GC_STEP, fdh, "custom lse");
  const int64_t s31[] = {3, 1};
  tu_assert_tensor(out[0], GRAFT_F64, 2, s31, "J v of custom lse");
  gc_assert_close(out[0], fd[0], GC_FD_TOL, "custom lse", "J v");
  gc_assert_close(out[1], fdh[0], GC_FD_TOL, "custom lse", "H v of sum(w lse(x)^2)");
  gc_free(fd, 1);
  gc_free(fdh, 1);
  gc_free(out, 2);
  gc_free(in, 2);
}

/* ---- a symbolic batch dim ---------------------------------------------------------------- */

/* in: x, c, vx, vc.  out: J v of the loss and of the [-1, 4] term, and the
 * HVP of the loss w.r.t. x and c.  Each -1 of a signature is a symbol of
 * its own, so vx [-1, 4] does not have x's shape at trace time (graft_jvp
 * compares shapes as traced): broadcast_to x's shape ties the symbols (the
 * sizes are checked when the call binds them). */
static graft_status sym_fwd_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *ys[2];
  graft_value *v[2] = {graft_broadcast_to(t, in[2], 2, graft_value_shape(in[0])), in[3]};
  ys[0] = gc_sym_loss(t, in[0], in[1], &ys[1]);
  graft_status st = graft_jvp(t, 2, in, v, 2, ys, GRAFT_UNCONNECTED_ZERO, out);
  if (st) return st;
  return graft_hvp(t, ys[0], 2, in, v, out + 2);
}

/* in: x, c.  out: the loss, the [-1, 4] term. */
static graft_status sym_y_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = gc_sym_loss(t, in[0], in[1], &out[1]);
  return graft_trace_status(t);
}

/* in: x, c.  out: the gradient of the loss w.r.t. x and c. */
static graft_status sym_grad_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *L = gc_sym_loss(t, in[0], in[1], NULL);
  return graft_gradients(t, 1, &L, NULL, 2, in, GRAFT_UNCONNECTED_ZERO, out);
}

static void test_graft_jvp__symbolic_batch_one_trace_two_sizes(void **state) {
  (void)state;
  static const graft_dtype dts[] = {GRAFT_F64, GRAFT_F64, GRAFT_F64, GRAFT_F64};
  static const int ranks[] = {2, 1, 2, 1};
  static const int64_t sx[] = {-1, 4}, sc[] = {4};
  static const int64_t *const shapes[] = {sx, sc, sx, sc};
  const graft_signature sig = {.n = 4, .dtypes = dts, .ranks = ranks, .shapes = shapes};
  graft_function *f = tu_function(g_rt, "sym_fwd", sym_fwd_cb, NULL, 4, 4, &sig);
  tu_rng r = {0x5b02};
  const int64_t batches[] = {3, 7};
  for (int b = 0; b < 2; b++) {
    const int64_t s[] = {batches[b], 4};
    graft_tensor *in[4] = {tu_tensor_rand(&r, GRAFT_F64, 2, s, -2, 2),
                           tu_tensor_rand(&r, GRAFT_F64, 1, sc, -1, 1),
                           tu_tensor_rand(&r, GRAFT_F64, 2, s, -1, 1),
                           tu_tensor_rand(&r, GRAFT_F64, 1, sc, -1, 1)},
                 *out[4] = {0}, *fd[2], *fdh[2];
    char ctx[64];
    snprintf(ctx, sizeof ctx, "ops over a [-1] dim, batch %lld", (long long)batches[b]);
    tu_assert_call_ok(f, 4, in, 4, out);
    gc_fd_directional(g_rt, sym_y_cb, NULL, 2, in, in + 2, 2, GC_STEP, fd, ctx);
    gc_fd_directional(g_rt, sym_grad_cb, NULL, 2, in, in + 2, 2, GC_STEP, fdh, ctx);
    tu_assert_tensor(out[1], GRAFT_F64, 2, s, ctx);
    tu_assert_tensor(out[2], GRAFT_F64, 2, s, ctx);
    gc_assert_close(out[0], fd[0], GC_FD_TOL, ctx, "J v of the loss");
    gc_assert_close(out[1], fd[1], GC_FD_TOL, ctx, "J v of softmax(x, 0) * x");
    gc_assert_close(out[2], fdh[0], GC_FD_TOL, ctx, "H v, x");
    gc_assert_close(out[3], fdh[1], GC_FD_TOL, ctx, "H v, c");
    gc_free(fd, 2);
    gc_free(fdh, 2);
    gc_free(out, 4);
    gc_free(in, 4);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
}

/* ---- nested forward mode --------------------------------------------------------------- */

enum { X5_FORMS = 3, X5_ORDERS = 4 };
static const char *const k_x5_names[X5_FORMS] = {"pow(x, 5)", "x * x * x * x * x",
                                                 "square(square(x)) * x"};

/* in: x (rank 0).  For each form of x^5: y, then the JVP of the previous
 * one along 1, three times: f, f', f'', f'''. */
static graft_status x5_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                          graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *x = in[0];
  for (int f = 0; f < X5_FORMS; f++) {
    graft_value *y;
    if (f == 0) y = graft_pow(t, x, graft_scalar(t, GRAFT_F64, 5.0));
    else if (f == 1) y = graft_mul(t, graft_mul(t, graft_mul(t, graft_mul(t, x, x), x), x), x);
    else y = graft_mul(t, graft_square(t, graft_square(t, x)), x);
    out[f * X5_ORDERS] = y;
    for (int k = 1; k < X5_ORDERS; k++) {
      graft_value *one = graft_scalar(t, GRAFT_F64, 1.0), *d = NULL;
      graft_status st = graft_jvp(t, 1, &x, &one, 1, &y, GRAFT_UNCONNECTED_ZERO, &d);
      if (st) return st;
      out[f * X5_ORDERS + k] = y = d;
    }
  }
  return GRAFT_OK;
}

static void test_graft_jvp__jvp_of_jvp_of_x5_is_exact(void **state) {
  (void)state;
  const double xs[] = {2.0, 0.5, -1.5, 3.0, 1.25, -0.75};
  for (size_t i = 0; i < TU_N_OF(xs); i++) {
    double x = xs[i];
    const double want[X5_ORDERS] = {x * x * x * x * x, 5 * x * x * x * x, 20 * x * x * x,
                                    60 * x * x};
    graft_tensor *in[1] = {tu_tensor_from(GRAFT_F64, 0, NULL, &x)}, *out[X5_FORMS * X5_ORDERS] = {0};
    char msg[512] = "";
    tu_assert_run_ok(tu_run(g_rt, x5_cb, NULL, 1, in, X5_FORMS * X5_ORDERS, out, msg), "x^5", msg);
    for (int f = 0; f < X5_FORMS; f++)
      for (int k = 0; k < X5_ORDERS; k++) {
        char ctx[128];
        snprintf(ctx, sizeof ctx, "derivative %d of %s at %g", k, k_x5_names[f], x);
        tu_assert_tensor(out[f * X5_ORDERS + k], GRAFT_F64, 0, NULL, ctx);
        tu_assert_values(out[f * X5_ORDERS + k], &want[k], 1, 0.0, ctx);
      }
    gc_free(out, X5_FORMS * X5_ORDERS);
    gc_free(in, 1);
  }
}

/* ---- compositions of forward and reverse mode ------------------------------------------ */

/* F(x [3,4], W [4,5]) [3,5]: z = x @ W; h = tanh(z) * sum(x^2, axis 1,
 * keepdims); log_softmax(h, -1) + sqrt(1 + z^2) * mean(W, axis 0, keepdims). */
static graft_value *comp_F(graft_trace *t, graft_value *x, graft_value *W) {
  const int ax1 = 1, ax0 = 0;
  graft_value *z = graft_matmul(t, x, W, 0);
  graft_value *h = graft_mul(t, graft_tanh(t, z), graft_reduce_sum(t, graft_square(t, x), 1, &ax1, 1));
  graft_value *one = graft_scalar(t, GRAFT_F64, 1.0);
  graft_value *s = graft_mul(t, graft_sqrt(t, graft_add(t, one, graft_square(t, z))),
                             graft_reduce_mean(t, W, 1, &ax0, 1));
  return graft_add(t, graft_log_softmax(t, h, -1), s);
}

/* f(x, W) = sum(w * F(x, W)), a scalar. */
static graft_value *comp_f(graft_trace *t, graft_value *x, graft_value *W) {
  graft_value *F = comp_F(t, x, W);
  return graft_reduce_sum(t, graft_mul(t, weights_like(t, F, 11), F), 0, NULL, 0);
}

/* in: x, W.  out: grad f w.r.t. x and W. */
static graft_status comp_grad_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *L = comp_f(t, in[0], in[1]);
  return graft_gradients(t, 1, &L, NULL, 2, in, GRAFT_UNCONNECTED_ZERO, out);
}

/* in: x, W, vx, vW.  out: the JVP of grad f along (vx, vW) (forward over
 * reverse, by hand), then graft_hvp of f along the same. */
static graft_status comp_jvp_grad_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                     graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *L = comp_f(t, in[0], in[1]), *g[2];
  graft_status st = graft_gradients(t, 1, &L, NULL, 2, in, GRAFT_UNCONNECTED_ZERO, g);
  if (st) return st;
  st = graft_jvp(t, 2, in, in + 2, 2, g, GRAFT_UNCONNECTED_ZERO, out);
  if (st) return st;
  return graft_hvp(t, L, 2, in, in + 2, out + 2);
}

/* in: x, W, vx, vW.  out: J_F (vx, vW). */
static graft_status comp_jvp_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *F = comp_F(t, in[0], in[1]);
  return graft_jvp(t, 2, in, in + 2, 1, &F, GRAFT_UNCONNECTED_ZERO, out);
}

/* in: x, W, vx, vW, ux, uW.  out: the JVP along (ux, uW) of J_F (vx, vW)
 * (the second derivative of F along u and v), and the same with u and v
 * swapped. */
static graft_status comp_jvp_jvp_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                    graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *F = comp_F(t, in[0], in[1]);
  for (int swap = 0; swap < 2; swap++) {
    graft_value *const *v = in + (swap ? 4 : 2), *const *u = in + (swap ? 2 : 4);
    graft_value *J1;
    graft_status st = graft_jvp(t, 2, in, v, 1, &F, GRAFT_UNCONNECTED_ZERO, &J1);
    if (st) return st;
    st = graft_jvp(t, 2, in, u, 1, &J1, GRAFT_UNCONNECTED_ZERO, &out[swap]);
    if (st) return st;
  }
  return GRAFT_OK;
}

/* gc loss, in: x, W, vx, vW: sum(w * J_F (vx, vW)) (reverse over forward:
 * its gradient w.r.t. x and W holds second derivatives). */
static graft_value *comp_jvp_loss(graft_trace *t, int n_in, graft_value *const *in, void *user) {
  (void)n_in, (void)user;
  graft_value *J = NULL;
  graft_value *F = comp_F(t, in[0], in[1]);
  if (graft_jvp(t, 2, in, in + 2, 1, &F, GRAFT_UNCONNECTED_ZERO, &J)) return NULL;
  return graft_reduce_sum(t, graft_mul(t, weights_like(t, J, 23), J), 0, NULL, 0);
}

/* gc loss, in: x, W, vx, vW: f's JVP along v, a scalar: <grad f, v>. */
static graft_value *comp_f_jvp_loss(graft_trace *t, int n_in, graft_value *const *in, void *user) {
  (void)n_in, (void)user;
  graft_value *J = NULL, *L = comp_f(t, in[0], in[1]);
  if (graft_jvp(t, 2, in, in + 2, 1, &L, GRAFT_UNCONNECTED_ZERO, &J)) return NULL;
  return J;
}

/* gc loss, in: x, W: sum(w1 * grad_x f) + sum(w2 * grad_W f). */
static graft_value *comp_grad_loss(graft_trace *t, int n_in, graft_value *const *in, void *user) {
  (void)n_in, (void)user;
  graft_value *L = comp_f(t, in[0], in[1]), *g[2];
  if (graft_gradients(t, 1, &L, NULL, 2, in, GRAFT_UNCONNECTED_ZERO, g)) return NULL;
  return graft_add(t, graft_reduce_sum(t, graft_mul(t, weights_like(t, g[0], 31), g[0]), 0, NULL, 0),
                   graft_reduce_sum(t, graft_mul(t, weights_like(t, g[1], 37), g[1]), 0, NULL, 0));
}

/* x, W, vx, vW, ux, uW (f64, seeded). */
static void comp_inputs(graft_tensor **in) {
  tu_rng r = {0xc0de};
  const int64_t sx[] = {3, 4}, sw[] = {4, 5};
  for (int k = 0; k < 6; k++) in[k] = tu_tensor_rand(&r, GRAFT_F64, 2, k % 2 ? sw : sx, -1, 1);
}

static void test_graft_jvp__of_gradient_matches_fd_of_gradient(void **state) {
  (void)state;
  graft_tensor *in[6], *out[4] = {0}, *fd[2];
  comp_inputs(in);
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, comp_jvp_grad_cb, NULL, 4, in, 4, out, msg), "JVP of grad", msg);
  gc_fd_directional(g_rt, comp_grad_cb, NULL, 2, in, in + 2, 2, GC_STEP, fd, "JVP of grad");
  const char *names[2] = {"x", "W"};
  for (int k = 0; k < 2; k++) {
    tu_assert_tensor(out[k], GRAFT_F64, 2, graft_tensor_shape(in[k]), "JVP of grad");
    gc_assert_close(out[k], fd[k], GC_FD_TOL, "JVP of grad (forward over reverse) vs FD", names[k]);
    /* graft_hvp is the same computation */
    gc_assert_close(out[2 + k], out[k], ((gc_tol){1e-13, 1e-14}), "graft_hvp vs JVP of grad",
                    names[k]);
  }
  gc_free(fd, 2);
  gc_free(out, 4);
  gc_free(in, 6);
}

static void test_graft_gradients__of_jvp_matches_fd(void **state) {
  (void)state;
  graft_tensor *in[6];
  comp_inputs(in);
  gc_problem p = {.loss = comp_jvp_loss, .n_in = 4, .in = in};
  gc_check(g_rt, &p, GC_STEP, GC_FD_TOL, "gradient of sum(w * J_F v) (reverse over forward)");
  /* for scalar f, the gradient of <grad f, v> w.r.t. x is H v: the same as
   * forward over reverse */
  gc_problem q = {.loss = comp_f_jvp_loss, .n_in = 4, .in = in};
  graft_tensor *gin[4], *hv[4] = {0};
  gc_analytic(g_rt, &q, NULL, gin, NULL, "gradient of <grad f, v>");
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, comp_jvp_grad_cb, NULL, 4, in, 4, hv, msg), "JVP of grad", msg);
  gc_assert_close(gin[0], hv[0], ((gc_tol){1e-12, 1e-13}), "reverse over forward vs forward over reverse", "x");
  gc_assert_close(gin[1], hv[1], ((gc_tol){1e-12, 1e-13}), "reverse over forward vs forward over reverse", "W");
  gc_check(g_rt, &q, GC_STEP, GC_FD_TOL, "gradient of <grad f, v>");
  gc_free(gin, 4);
  gc_free(hv, 4);
  gc_free(in, 6);
}

static void test_graft_gradients__of_gradient_matches_fd(void **state) {
  (void)state;
  graft_tensor *in[6];
  comp_inputs(in);
  gc_problem p = {.loss = comp_grad_loss, .n_in = 2, .in = in};
  gc_check(g_rt, &p, GC_STEP, GC_FD_TOL, "gradient of sum(w * grad f)");
  gc_free(in, 6);
}

static void test_graft_jvp__of_jvp_matches_fd_of_jvp(void **state) {
  (void)state;
  graft_tensor *in[6], *out[2] = {0}, *fd[1];
  comp_inputs(in);
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, comp_jvp_jvp_cb, NULL, 6, in, 2, out, msg), "JVP of JVP", msg);
  /* differences of J_F v along u: only x and W move (in[4], in[5]) */
  graft_tensor *dir[4] = {in[4], in[5], NULL, NULL};
  gc_fd_directional(g_rt, comp_jvp_cb, NULL, 4, in, dir, 1, GC_STEP, fd, "JVP of JVP");
  const int64_t s35[] = {3, 5};
  tu_assert_tensor(out[0], GRAFT_F64, 2, s35, "JVP of JVP");
  gc_assert_close(out[0], fd[0], GC_FD_TOL, "JVP of JVP vs FD of the JVP", "d2F[u, v]");
  /* second derivatives are symmetric */
  gc_assert_close(out[1], out[0], ((gc_tol){1e-12, 1e-13}), "JVP of JVP", "d2F[v, u] vs d2F[u, v]");
  gc_free(fd, 1);
  gc_free(out, 2);
  gc_free(in, 6);
}

/* ---- Hessian-vector products ---------------------------------------------------------- */

/* in: v [4,5], t [4,5].  out: graft_hvp of sum(v^3) along t, for v^3 as
 * pow(v, 3), v * v * v and square(v) * v. */
static graft_status cube_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *v = in[0];
  graft_value *c[3] = {graft_pow(t, v, graft_scalar(t, GRAFT_F64, 3.0)),
                       graft_mul(t, graft_mul(t, v, v), v), graft_mul(t, graft_square(t, v), v)};
  for (int k = 0; k < 3; k++) {
    graft_value *L = graft_reduce_sum(t, c[k], 0, NULL, 0);
    graft_status st = graft_hvp(t, L, 1, &v, &in[1], &out[k]);
    if (st) return st;
  }
  return GRAFT_OK;
}

static void test_graft_hvp__sum_of_cubes_is_6_v_t(void **state) {
  (void)state;
  static const char *forms[3] = {"pow(v, 3)", "v * v * v", "square(v) * v"};
  const int64_t s[] = {4, 5};
  for (int grid = 0; grid < 2; grid++) {
    /* grid: multiples of 1/8 (0 included), where every product is exact;
     * else uniform, where each form rounds a few times */
    tu_rng r = {grid ? 0x6a1d : 0x6a1e};
    graft_tensor *in[2], *out[3] = {0};
    for (int k = 0; k < 2; k++) {
      in[k] = tu_tensor_from(GRAFT_F64, 2, s, NULL);
      for (int64_t j = 0; j < 20; j++)
        tu_set(in[k], j, grid ? (double)tu_int(&r, -16, 16) / 8.0 : tu_uniform(&r, -2, 2));
    }
    double want[20];
    for (int64_t j = 0; j < 20; j++) want[j] = 6 * tu_get(in[0], j) * tu_get(in[1], j);
    char msg[512] = "";
    tu_assert_run_ok(tu_run(g_rt, cube_cb, NULL, 2, in, 3, out, msg), "sum(v^3)", msg);
    for (int k = 0; k < 3; k++) {
      char ctx[128];
      snprintf(ctx, sizeof ctx, "H t of sum(%s), %s values", forms[k], grid ? "dyadic" : "uniform");
      tu_assert_tensor(out[k], GRAFT_F64, 2, s, ctx);
      tu_assert_values(out[k], want, 20, grid ? 0.0 : 8 * DBL_EPSILON, ctx);
    }
    gc_free(out, 3);
    gc_free(in, 2);
  }
}

/* A 2-layer MLP with its parameters as inputs.  in: x [N, d], labels [N]
 * (i32), W1 [d, h], b1 [h], W2 [h, c], b2 [c]; then (hvp) the tangents of
 * x, W1, b1, W2, b2. */
enum { MLP_X, MLP_LABELS, MLP_W1, MLP_B1, MLP_W2, MLP_B2, MLP_N_IN };
static const int k_mlp_diff[5] = {MLP_X, MLP_W1, MLP_B1, MLP_W2, MLP_B2};

static graft_value *mlp_logits(graft_trace *t, graft_value *const *in) {
  graft_value *h = graft_tanh(t, graft_add(t, graft_matmul(t, in[MLP_X], in[MLP_W1], 0), in[MLP_B1]));
  return graft_add(t, graft_matmul(t, h, in[MLP_W2], 0), in[MLP_B2]);
}

static void mlp_xs(graft_value *const *in, graft_value **xs) {
  for (int k = 0; k < 5; k++) xs[k] = in[k_mlp_diff[k]];
}

/* out: the gradients of the loss w.r.t. x, W1, b1, W2, b2. */
static graft_status mlp_grad_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *L = graft_softmax_cross_entropy(t, mlp_logits(t, in), in[MLP_LABELS]), *xs[5];
  mlp_xs(in, xs);
  return graft_gradients(t, 1, &L, NULL, 5, xs, GRAFT_UNCONNECTED_ZERO, out);
}

/* out: the loss, then graft_hvp of it along the tangents. */
static graft_status mlp_hvp_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *L = graft_softmax_cross_entropy(t, mlp_logits(t, in), in[MLP_LABELS]), *xs[5];
  mlp_xs(in, xs);
  out[0] = L;
  return graft_hvp(t, L, 5, xs, in + MLP_N_IN, out + 1);
}

/* out: the JVPs of the logits and of the loss along the tangents. */
static graft_status mlp_jvp_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *logits = mlp_logits(t, in), *xs[5];
  graft_value *ys[2] = {logits, graft_softmax_cross_entropy(t, logits, in[MLP_LABELS])};
  mlp_xs(in, xs);
  return graft_jvp(t, 5, xs, in + MLP_N_IN, 2, ys, GRAFT_UNCONNECTED_ZERO, out);
}

/* The MLP's inputs (MLP_N_IN) and the tangents (5) in in[0..11). */
static void mlp_inputs(graft_tensor **in, int64_t n, int64_t d, int64_t h, int64_t c,
                       uint64_t seed) {
  tu_rng r = {seed | 1u};
  const int64_t shapes[MLP_N_IN][2] = {{n, d}, {n, 0}, {d, h}, {h, 0}, {h, c}, {c, 0}};
  const int ranks[MLP_N_IN] = {2, 1, 2, 1, 2, 1};
  const double scale[MLP_N_IN] = {1, 0, 1.5 / sqrt((double)d), 0.1, 1.5 / sqrt((double)h), 0.1};
  for (int k = 0; k < MLP_N_IN; k++)
    in[k] = k == MLP_LABELS ? tu_tensor_rand(&r, GRAFT_I32, 1, shapes[k], 0, (double)(c - 1))
                            : tu_tensor_rand(&r, GRAFT_F64, ranks[k], shapes[k], -scale[k], scale[k]);
  for (int k = 0; k < 5; k++) {
    int i = k_mlp_diff[k];
    in[MLP_N_IN + k] = tu_tensor_rand(&r, GRAFT_F64, ranks[i], shapes[i], -1, 1);
  }
}

static void test_graft_hvp__mlp_loss_matches_fd_of_gradient(void **state) {
  (void)state;
  graft_tensor *in[MLP_N_IN + 5], *out[6] = {0}, *fd[5];
  mlp_inputs(in, 8, 4, 6, 3, 0x41f);
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, mlp_hvp_cb, NULL, MLP_N_IN + 5, in, 6, out, msg), "MLP HVP", msg);
  graft_tensor *dir[MLP_N_IN] = {NULL};
  for (int k = 0; k < 5; k++) dir[k_mlp_diff[k]] = in[MLP_N_IN + k];
  gc_fd_directional(g_rt, mlp_grad_cb, NULL, MLP_N_IN, in, dir, 5, 1e-5, fd, "MLP HVP");
  static const char *names[5] = {"x", "W1", "b1", "W2", "b2"};
  for (int k = 0; k < 5; k++) {
    const graft_tensor *x = in[k_mlp_diff[k]];
    tu_assert_tensor(out[1 + k], GRAFT_F64, graft_tensor_rank(x), graft_tensor_shape(x), names[k]);
    gc_assert_close(out[1 + k], fd[k], GC_FD_TOL, "MLP H v vs differences of the gradient (h 1e-5)",
                    names[k]);
  }
  gc_free(fd, 5);
  gc_free(out, 6);
  gc_free(in, MLP_N_IN + 5);
}

/* ---- dense Jacobians and Hessians ------------------------------------------------------- */

/* in: x [5], W [4,5], A [5,5].  f(x) = sum(tanh(W x)^2) + x^T A x.  out:
 * the Hessian of f as graft_jacobian_fwd and graft_jacobian_rev of its
 * gradient, and the gradient. */
static graft_value *hess_f(graft_trace *t, graft_value *const *in) {
  const int64_t col[] = {5, 1};
  graft_value *xc = graft_reshape(t, in[0], 2, col);
  graft_value *th = graft_tanh(t, graft_matmul(t, in[1], xc, 0));
  graft_value *Ax = graft_matmul(t, in[2], xc, 0);
  return graft_add(t, graft_reduce_sum(t, graft_square(t, th), 0, NULL, 0),
                   graft_reduce_sum(t, graft_mul(t, xc, Ax), 0, NULL, 0));
}

static graft_status hess_grad_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *L = hess_f(t, in);
  return graft_gradients(t, 1, &L, NULL, 1, in, GRAFT_UNCONNECTED_ZERO, out);
}

static graft_status hess_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *L = hess_f(t, in), *g;
  graft_status st = graft_gradients(t, 1, &L, NULL, 1, in, GRAFT_UNCONNECTED_ZERO, &g);
  if (st) return st;
  if ((st = graft_jacobian_fwd(t, g, in[0], &out[0]))) return st;
  return graft_jacobian_rev(t, g, in[0], &out[1]);
}

static void test_graft_jacobian__hessian_symmetric_and_fwd_matches_rev(void **state) {
  (void)state;
  tu_rng r = {0x4e55};
  const int64_t s5[] = {5}, s45[] = {4, 5}, s55[] = {5, 5};
  graft_tensor *in[3] = {tu_tensor_rand(&r, GRAFT_F64, 1, s5, -1, 1),
                         tu_tensor_rand(&r, GRAFT_F64, 2, s45, -0.8, 0.8),
                         tu_tensor_rand(&r, GRAFT_F64, 2, s55, -1, 1)};
  graft_tensor *out[2] = {0};
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, hess_cb, NULL, 3, in, 2, out, msg), "Hessian", msg);
  tu_assert_tensor(out[0], GRAFT_F64, 2, s55, "Hessian by graft_jacobian_fwd");
  tu_assert_tensor(out[1], GRAFT_F64, 2, s55, "Hessian by graft_jacobian_rev");

  /* analytic: W^T diag(phi''(u)) W + A + A^T, u = W x, phi = tanh^2,
   * phi'' = 2 sech^4 - 4 tanh^2 sech^2 */
  double H[25] = {0}, d2[4], scale = 0;
  for (int i = 0; i < 4; i++) {
    double u = 0;
    for (int j = 0; j < 5; j++) u += tu_get(in[1], 5 * i + j) * tu_get(in[0], j);
    double th = tanh(u), s2 = 1 - th * th;
    d2[i] = 2 * s2 * s2 - 4 * th * th * s2;
  }
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 5; b++) {
      double h = tu_get(in[2], 5 * a + b) + tu_get(in[2], 5 * b + a);
      for (int i = 0; i < 4; i++) h += tu_get(in[1], 5 * i + a) * d2[i] * tu_get(in[1], 5 * i + b);
      H[5 * a + b] = h;
      scale = fmax(scale, fabs(h));
    }
  const gc_tol tight = {1e-12, 1e-12 * scale};
  for (int m = 0; m < 2; m++) {
    const char *ctx = m ? "Hessian by graft_jacobian_rev" : "Hessian by graft_jacobian_fwd";
    for (int a = 0; a < 5; a++)
      for (int b = 0; b < 5; b++) {
        double hab = tu_get(out[m], 5 * a + b), hba = tu_get(out[m], 5 * b + a);
        if (fabs(hab - hba) > tight.rtol * fabs(hba) + tight.atol)
          fail_msg("%s: H[%d][%d] = %.17g but H[%d][%d] = %.17g", ctx, a, b, hab, b, a, hba);
        if (!tu_close(hab, H[5 * a + b], tight.rtol, tight.atol))
          fail_msg("%s: H[%d][%d] = %.17g, analytic %.17g", ctx, a, b, hab, H[5 * a + b]);
      }
  }
  gc_assert_close(out[0], out[1], tight, "Hessian", "graft_jacobian_fwd vs graft_jacobian_rev");

  /* columns against differences of the gradient */
  for (int j = 0; j < 5; j++) {
    graft_tensor *e = tu_tensor_from(GRAFT_F64, 1, s5, NULL), *dir[3] = {e, NULL, NULL}, *fd[1];
    for (int k = 0; k < 5; k++) tu_set(e, k, k == j);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "Hessian column %d", j);
    gc_fd_directional(g_rt, hess_grad_cb, NULL, 3, in, dir, 1, GC_STEP, fd, ctx);
    for (int a = 0; a < 5; a++)
      if (!tu_close(tu_get(out[0], 5 * a + j), tu_get(fd[0], a), GC_FD_TOL.rtol, GC_FD_TOL.atol))
        fail_msg("%s: H[%d][%d] = %.17g, differences %.17g", ctx, a, j, tu_get(out[0], 5 * a + j),
                 tu_get(fd[0], a));
    gc_free(fd, 1);
    graft_tensor_destroy(e);
  }
  gc_free(out, 2);
  gc_free(in, 3);
}

/* F(x [2,3]) [2,2] = sin(x) @ x^T + sum(log1p(x^2), axis 1, keepdims). */
static graft_value *vec_F(graft_trace *t, graft_value *x) {
  const int ax1 = 1;
  return graft_add(t, graft_matmul(t, graft_sin(t, x), x, GRAFT_TRANS_B),
                   graft_reduce_sum(t, graft_log1p(t, graft_square(t, x)), 1, &ax1, 1));
}

static graft_status vec_F_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = vec_F(t, in[0]);
  return graft_trace_status(t);
}

static graft_status vec_jac_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *F = vec_F(t, in[0]);
  graft_status st = graft_jacobian_fwd(t, F, in[0], &out[0]);
  if (st) return st;
  return graft_jacobian_rev(t, F, in[0], &out[1]);
}

static void test_graft_jacobian__fwd_and_rev_agree_and_match_fd(void **state) {
  (void)state;
  tu_rng r = {0x1ac0};
  const int64_t s23[] = {2, 3}, sj[] = {2, 2, 2, 3};
  graft_tensor *in[1] = {tu_tensor_rand(&r, GRAFT_F64, 2, s23, -1.5, 1.5)}, *out[2] = {0};
  char msg[512] = "";
  tu_assert_run_ok(tu_run(g_rt, vec_jac_cb, NULL, 1, in, 2, out, msg), "Jacobian", msg);
  tu_assert_tensor(out[0], GRAFT_F64, 4, sj, "graft_jacobian_fwd: shape y.shape + x.shape");
  tu_assert_tensor(out[1], GRAFT_F64, 4, sj, "graft_jacobian_rev: shape y.shape + x.shape");
  gc_assert_close(out[0], out[1], ((gc_tol){1e-12, 1e-13}), "Jacobian", "fwd vs rev");
  for (int j = 0; j < 6; j++) {
    graft_tensor *e = tu_tensor_from(GRAFT_F64, 2, s23, NULL), *fd[1];
    for (int k = 0; k < 6; k++) tu_set(e, k, k == j);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "Jacobian column %d", j);
    gc_fd_directional(g_rt, vec_F_cb, NULL, 1, in, &e, 1, GC_STEP, fd, ctx);
    for (int m = 0; m < 2; m++)
      for (int a = 0; a < 4; a++)
        if (!tu_close(tu_get(out[m], 6 * a + j), tu_get(fd[0], a), GC_FD_TOL.rtol, GC_FD_TOL.atol))
          fail_msg("%s (%s): J[%d][%d] = %.17g, differences %.17g", ctx, m ? "rev" : "fwd", a, j,
                   tu_get(out[m], 6 * a + j), tu_get(fd[0], a));
    gc_free(fd, 1);
    graft_tensor_destroy(e);
  }
  gc_free(out, 2);
  gc_free(in, 1);
}

/* Jacobians of y over x for a case: y = op(x) with the dtypes below.
 * out: graft_jacobian_fwd (which bit 1), then graft_jacobian_rev (bit 2). */
enum jac_case { JC_INT_X, JC_INT_Y, JC_F32_TO_F64, JC_F64_TO_F32, JC_UNCONNECTED };

typedef struct jac_run {
  int c;
  unsigned which;
} jac_run;

static graft_status jac_case_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const jac_run *r = user;
  graft_value *x = in[0], *y;
  switch (r->c) {
  case JC_INT_X: y = graft_sin(t, graft_cast(t, x, GRAFT_F64)); break;           /* x i32 */
  case JC_INT_Y: y = graft_cast(t, graft_sin(t, x), GRAFT_I32); break;           /* x f64 */
  case JC_F32_TO_F64: y = graft_cast(t, graft_sin(t, x), GRAFT_F64); break;      /* x f32 */
  case JC_F64_TO_F32: y = graft_cast(t, graft_sin(t, x), GRAFT_F32); break;      /* x f64 */
  default: y = graft_sin(t, graft_fill(t, GRAFT_F64, 1, (int64_t[]){2}, 0.5)); /* x f64 */
  }
  graft_status st = GRAFT_OK;
  if (r->which & 1) st = graft_jacobian_fwd(t, y, x, out++);
  if (!st && (r->which & 2)) st = graft_jacobian_rev(t, y, x, out);
  return st;
}

/* Integers have no derivative: an i32 x or y fails either call with
 * GRAFT_EDTYPE and a message naming the call and the argument, instead of
 * a zero Jacobian (forward) or a reshape of nothing (reverse). */
static void test_graft_jacobian__integer_x_or_y_is_edtype_in_both_modes(void **state) {
  (void)state;
  static const struct {
    int c;
    graft_dtype x_dt;
    const char *what;
  } cases[] = {{JC_INT_X, GRAFT_I32, "x is i32"}, {JC_INT_Y, GRAFT_F64, "y is i32"}};
  const int64_t s3[] = {3};
  for (size_t k = 0; k < TU_N_OF(cases); k++)
    for (int rev = 0; rev < 2; rev++) {
      graft_tensor *x = tu_tensor_from(cases[k].x_dt, 1, s3, (double[]){1, 2, 3}), *out[2] = {0};
      char msg[512] = "", want[96];
      jac_run r = {cases[k].c, rev ? 2u : 1u};
      graft_status st = tu_run(g_rt, jac_case_cb, &r, 1, &x, 1, out, msg);
      snprintf(want, sizeof want, "graft_jacobian_%s: %s", rev ? "rev" : "fwd", cases[k].what);
      tu_assert_run_fails(st, GRAFT_EDTYPE, out[0], msg, want, cases[k].what);
      graft_tensor_destroy(x);
    }
}

/* Mixed float dtypes: both calls give y's dtype and the same values (the
 * diagonal cos(x)); a y that does not depend on x gives zeros both ways. */
static void test_graft_jacobian__mixed_dtypes_and_unconnected_agree(void **state) {
  (void)state;
  static const struct {
    int c;
    graft_dtype x_dt, y_dt;
  } cases[] = {{JC_F32_TO_F64, GRAFT_F32, GRAFT_F64},
               {JC_F64_TO_F32, GRAFT_F64, GRAFT_F32},
               {JC_UNCONNECTED, GRAFT_F64, GRAFT_F64}};
  const int64_t s3[] = {3};
  const double xv[] = {0.5, -1.25, 2};
  for (size_t k = 0; k < TU_N_OF(cases); k++) {
    graft_tensor *x = tu_tensor_from(cases[k].x_dt, 1, s3, xv), *out[2] = {0};
    char msg[512] = "", ctx[64];
    int c = cases[k].c, ny = c == JC_UNCONNECTED ? 2 : 3;
    jac_run r = {c, 3u};
    snprintf(ctx, sizeof ctx, "jacobian case %d", c);
    tu_assert_run_ok(tu_run(g_rt, jac_case_cb, &r, 1, &x, 2, out, msg), ctx, msg);
    const int64_t sj[] = {ny, 3};
    double want[9];
    for (int a = 0; a < ny; a++)
      for (int b = 0; b < 3; b++)
        want[3 * a + b] = c != JC_UNCONNECTED && a == b ? cos((double)(float)xv[a]) : 0.0;
    for (int m = 0; m < 2; m++) {
      tu_assert_tensor(out[m], cases[k].y_dt, 2, sj, ctx);
      tu_assert_values(out[m], want, ny * 3, cases[k].y_dt == GRAFT_F32 ? 1e-6 : 1e-7, ctx);
    }
    tu_destroy_outs(out, 2);
    graft_tensor_destroy(x);
  }
}

/* ---- bitwise equality across schedulers and thread counts ------------------------------ */

static void check_bitwise(graft_trace_fn fn, int n_out, const char *name) {
  static const struct {
    const char *sched;
    int threads;
  } cfgs[] = {{"seq", 1}, {"ws", 1}, {"ws", 2}, {"ws", 8}};
  graft_tensor *in[MLP_N_IN + 5], *ref[8] = {0};
  assert_true(n_out <= 8);
  mlp_inputs(in, 64, 32, 48, 10, 0xb175);
  for (size_t c = 0; c < TU_N_OF(cfgs); c++) {
    graft_runtime *rt = tu_runtime_of(cfgs[c].sched, cfgs[c].threads, 64);
    graft_function *f = tu_function(rt, name, fn, NULL, MLP_N_IN + 5, n_out, NULL);
    graft_tensor *out[8] = {0};
    char ctx[128];
    snprintf(ctx, sizeof ctx, "%s, %s x%d", name, cfgs[c].sched, cfgs[c].threads);
    for (int rep = 0; rep < 3; rep++) {
      tu_assert_call_ok(f, MLP_N_IN + 5, in, n_out, out);
      graft_plan_stats st;
      assert_int_equal(graft_function_stats(f, &st), GRAFT_OK);
      if (st.tiles <= st.live_nodes)
        fail_msg("%s: %lld tiles for %lld nodes: the grain made no tiles", ctx,
                 (long long)st.tiles, (long long)st.live_nodes);
      for (int o = 0; o < n_out; o++) {
        if (c == 0 && rep == 0) {
          ref[o] = gc_copy(out[o]);
          continue;
        }
        if (!gc_same_bits(out[o], ref[o]))
          fail_msg("%s (call %d): output %d differs from seq", ctx, rep + 1, o);
      }
    }
    tu_destroy_outs(out, n_out);
    graft_function_destroy(f);
    graft_runtime_destroy(rt);
  }
  tu_destroy_outs(ref, n_out);
  gc_free(in, MLP_N_IN + 5);
}

static void test_graft_hvp__mlp_bitwise_equal_across_threads(void **state) {
  (void)state;
  check_bitwise(mlp_hvp_cb, 6, "MLP HVP");
}

static void test_graft_jvp__mlp_bitwise_equal_across_threads(void **state) {
  (void)state;
  check_bitwise(mlp_jvp_cb, 2, "MLP JVP");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_jvp__unary_ops_match_fd_and_vjp),
      cmocka_unit_test(test_graft_jvp__unary_ops_f32_match_f64),
      cmocka_unit_test(test_graft_hvp__unary_ops_match_fd_of_gradient),
      cmocka_unit_test(test_graft_hvp__unary_ops_f32_match_f64),
      cmocka_unit_test(test_graft_jvp__binary_ops_broadcast_match_fd_and_vjp),
      cmocka_unit_test(test_graft_jvp__binary_ops_broadcast_f32_match_f64),
      cmocka_unit_test(test_graft_hvp__binary_ops_broadcast_match_fd_of_gradient),
      cmocka_unit_test(test_graft_hvp__binary_ops_broadcast_f32_match_f64),
      cmocka_unit_test(test_graft_jvp__reductions_match_fd_and_vjp),
      cmocka_unit_test(test_graft_jvp__reductions_f32_match_f64),
      cmocka_unit_test(test_graft_hvp__reductions_match_fd_of_gradient),
      cmocka_unit_test(test_graft_hvp__reductions_f32_match_f64),
      cmocka_unit_test(test_graft_jvp__matmul_flags_and_batch_match_fd_and_vjp),
      cmocka_unit_test(test_graft_jvp__matmul_flags_and_batch_f32_match_f64),
      cmocka_unit_test(test_graft_hvp__matmul_flags_and_batch_match_fd_of_gradient),
      cmocka_unit_test(test_graft_hvp__matmul_flags_and_batch_f32_match_f64),
      cmocka_unit_test(test_graft_jvp__shape_nn_where_cast_match_fd_and_vjp),
      cmocka_unit_test(test_graft_jvp__shape_nn_where_f32_match_f64),
      cmocka_unit_test(test_graft_hvp__shape_nn_where_cast_match_fd_of_gradient),
      cmocka_unit_test(test_graft_hvp__shape_nn_where_f32_match_f64),
      cmocka_unit_test(test_graft_jvp__primal_listed_twice_is_einval),
      cmocka_unit_test(test_graft_jvp__tangent_of_wrong_shape_is_eshape),
      cmocka_unit_test(test_graft_jvp__tangent_of_wrong_dtype_fails),
      cmocka_unit_test(test_graft_hvp__non_scalar_y_is_eshape),
      cmocka_unit_test(test_graft_jvp__unconnected_none_and_zero),
      cmocka_unit_test(test_graft_jvp__null_tangent_is_zero),
      cmocka_unit_test(test_graft_jvp__stop_gradient_blocks_tangents),
      cmocka_unit_test(test_graft_jvp__intermediate_and_variable_primals_in_any_order),
      cmocka_unit_test(test_graft_jvp__through_custom_gradient_matches_fd),
      cmocka_unit_test(test_graft_jvp__symbolic_batch_one_trace_two_sizes),
      cmocka_unit_test(test_graft_jvp__jvp_of_jvp_of_x5_is_exact),
      cmocka_unit_test(test_graft_jvp__of_gradient_matches_fd_of_gradient),
      cmocka_unit_test(test_graft_gradients__of_jvp_matches_fd),
      cmocka_unit_test(test_graft_gradients__of_gradient_matches_fd),
      cmocka_unit_test(test_graft_jvp__of_jvp_matches_fd_of_jvp),
      cmocka_unit_test(test_graft_hvp__sum_of_cubes_is_6_v_t),
      cmocka_unit_test(test_graft_hvp__mlp_loss_matches_fd_of_gradient),
      cmocka_unit_test(test_graft_jacobian__hessian_symmetric_and_fwd_matches_rev),
      cmocka_unit_test(test_graft_jacobian__fwd_and_rev_agree_and_match_fd),
      cmocka_unit_test(test_graft_jacobian__integer_x_or_y_is_edtype_in_both_modes),
      cmocka_unit_test(test_graft_jacobian__mixed_dtypes_and_unconnected_agree),
      cmocka_unit_test(test_graft_hvp__mlp_bitwise_equal_across_threads),
      cmocka_unit_test(test_graft_jvp__mlp_bitwise_equal_across_threads),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
