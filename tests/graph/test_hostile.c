/* Hostile and careless input (issue 14): sizes that overflow, data checks
 * that pruning must keep, statuses that are not graft_status codes, custom
 * VJP rules that return junk or recurse, values whose trace has ended, and a
 * runtime destroyed under its functions.  Every case must end in a
 * documented status with a message that names what failed: no crash, no
 * hang, no use of freed memory (the ASan build runs this file), and no
 * partial effect on variables or caller tensors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

TU_SUPPRESS_GOMP_TASK_LEAK();

static const char *const k_scheds[] = {"seq", "ws", "omp"};

/* Run fn(user) with no inputs and one output on a fresh runtime of sched
 * (3 workers for ws and omp: more than this machine's cores); returns the
 * status, the message in msg (512 bytes). */
static graft_status run_on(const char *sched, graft_trace_fn fn, void *user, int n_in,
                           graft_tensor *const *in, char *msg) {
  graft_runtime *rt = tu_runtime_of(sched, strcmp(sched, "seq") ? 3 : 1, 0);
  graft_tensor *out = NULL;
  graft_status st = tu_run(rt, fn, user, n_in, in, 1, &out, msg);
  graft_tensor_destroy(out);
  if (st != GRAFT_OK) assert_null(out);
  graft_runtime_destroy(rt);
  return st;
}

/* ---- 1. sizes ------------------------------------------------------------ */

typedef struct fill_case {
  graft_dtype dt;
  int rank;
  int64_t dims[3];
  graft_status want;
} fill_case;

static graft_status fill_reduce_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  const fill_case *c = user;
  out[0] = graft_reduce_sum(t, graft_fill(t, c->dt, c->rank, c->dims, 1), 0, NULL, 0);
  return GRAFT_OK;
}

/* graft_fill(f32, [2^62]) used to overflow the byte count (UBSan, then a
 * heap overflow in the fill kernel); [INT64_MAX] hung the ws executor. */
static void test_graft_fill__huge_shapes_refused(void **state) {
  (void)state;
  const fill_case cases[] = {
      {GRAFT_F32, 1, {INT64_C(1) << 62}, GRAFT_ENOMEM},
      {GRAFT_F32, 1, {INT64_MAX}, GRAFT_ENOMEM},
      {GRAFT_F64, 1, {INT64_C(1) << 46}, GRAFT_ENOMEM}, /* 2^49 bytes: past the limit */
      {GRAFT_I32, 2, {INT64_C(1) << 32, INT64_C(1) << 32}, GRAFT_ESHAPE}, /* 2^64 elements */
      {GRAFT_F32, 3, {INT64_MAX, 2, 2}, GRAFT_ESHAPE},
  };
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    for (size_t s = 0; s < TU_N_OF(k_scheds); s++) {
      char msg[512] = "", ctx[64];
      snprintf(ctx, sizeof ctx, "case %zu on %s", i, k_scheds[s]);
      graft_status st = run_on(k_scheds[s], fill_reduce_cb, (void *)&cases[i], 0, NULL, msg);
      if (st != cases[i].want)
        fail_msg("%s: status %s, want %s (%s)", ctx, graft_status_name(st),
                 graft_status_name(cases[i].want), msg);
      tu_assert_msg_has(msg, "fill: output ");
      char dim[32];
      snprintf(dim, sizeof dim, "%lld", (long long)cases[i].dims[0]);
      tu_assert_msg_has(msg, dim);
    }
  }
}

/* The largest value the limit allows traces and compiles; one element
 * more is refused (the boundary of GRAFT__MAX_VALUE_BYTES, 2^48). */
static graft_status fill_shape_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  const fill_case *c = user;
  graft_value *x = graft_fill(t, c->dt, c->rank, c->dims, 1);
  /* The output: the shape of x, without computing x (x stays pruned). */
  out[0] = graft_scalar(t, GRAFT_F32, (double)graft_value_rank(x));
  return GRAFT_OK;
}

static void test_graft_fill__byte_limit_boundary(void **state) {
  (void)state;
  fill_case at = {GRAFT_F32, 1, {INT64_C(1) << 46}, GRAFT_OK};
  fill_case past = {GRAFT_F32, 1, {(INT64_C(1) << 46) + 1}, GRAFT_ENOMEM};
  char msg[512] = "";
  tu_assert_status(run_on("seq", fill_shape_cb, &at, 0, NULL, msg), GRAFT_OK);
  tu_assert_status(run_on("seq", fill_shape_cb, &past, 0, NULL, msg), GRAFT_ENOMEM);
  tu_assert_msg_has(msg, "2^48");
}

/* Zero-element shapes: one rule.  A 0 dim empties the value, but its other
 * dims must fit as if it were full (kernels form strides from them): a
 * fuzzed reduce_sum over [INT64_MAX, INT64_MAX, 0] overflowed the reduce
 * kernel's stride arithmetic (UBSan). */
static void test_graft_tensor_create__zero_element_rule(void **state) {
  (void)state;
  const struct {
    graft_dtype dt;
    int rank;
    int64_t dims[3];
    graft_status want;
  } cases[] = {
      {GRAFT_F64, 2, {INT64_MAX, 0}, GRAFT_EINVAL}, /* the tensor API's status for a bad shape */
      {GRAFT_F64, 3, {INT64_MAX, 2, 0}, GRAFT_EINVAL},
      {GRAFT_F64, 3, {0, INT64_MAX, INT64_MAX}, GRAFT_EINVAL},
      {GRAFT_F32, 2, {0, (INT64_C(1) << 46) + 1}, GRAFT_EINVAL},
      {GRAFT_F32, 2, {0, INT64_C(1) << 46}, GRAFT_OK}, /* 2^48 bytes if it were full */
      {GRAFT_F64, 3, {INT64_C(1) << 20, 0, INT64_C(1) << 20}, GRAFT_OK},
  };
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    for (int wrap = 0; wrap < 2; wrap++) {
      graft_tensor *x = NULL;
      graft_status st = wrap ? graft_tensor_wrap(cases[i].dt, cases[i].rank, cases[i].dims, NULL, &x)
                             : graft_tensor_create(cases[i].dt, cases[i].rank, cases[i].dims, &x);
      if (st != cases[i].want)
        fail_msg("case %zu (%s): status %s, want %s (%s)", i, wrap ? "wrap" : "create",
                 graft_status_name(st), graft_status_name(cases[i].want), graft_last_errmsg());
      if (st == GRAFT_OK) {
        assert_int_equal(graft_tensor_numel(x), 0);
      } else {
        assert_null(x);
        tu_assert_msg_has(graft_last_errmsg(), "a 0 dim empties the value");
      }
      graft_tensor_destroy(x);
    }
  }
}

static graft_status reduce_axes01_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                     graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  const int axes[2] = {0, 1};
  out[0] = graft_reduce_sum(t, in[0], 2, axes, 0);
  return GRAFT_OK;
}

/* An empty input with large other dims is still an input: its sum over the
 * empty and a large dim is zeros, on every executor, traced with concrete
 * or symbolic dims. */
static void test_graft_reduce_sum__empty_input_with_large_dims(void **state) {
  (void)state;
  const int64_t shape[3] = {0, INT64_C(1) << 20, 1 << 10};
  graft_tensor *x = NULL;
  tu_assert_status(graft_tensor_wrap(GRAFT_F32, 3, shape, NULL, &x), GRAFT_OK);
  for (int symbolic = 0; symbolic < 2; symbolic++) {
    for (size_t s = 0; s < TU_N_OF(k_scheds); s++) {
      graft_runtime *rt = tu_runtime_of(k_scheds[s], strcmp(k_scheds[s], "seq") ? 3 : 1, 0);
      const graft_dtype dts[1] = {GRAFT_F32};
      const int ranks[1] = {3};
      const int64_t sig_dims[3] = {-1, -1, -1};
      const int64_t *shapes[1] = {sig_dims};
      graft_signature sig = {1, dts, ranks, shapes};
      graft_function *f = tu_function(rt, "empty_sum", reduce_axes01_cb, NULL, 1, 1,
                                      symbolic ? &sig : NULL);
      graft_tensor *out = NULL;
      tu_assert_call_ok(f, 1, &x, 1, &out);
      const int64_t want_shape[1] = {1 << 10};
      tu_assert_shape(out, 1, want_shape, k_scheds[s]);
      for (int64_t i = 0; i < graft_tensor_numel(out); i++)
        if (tu_get(out, i) != 0) fail_msg("%s: element %lld is %g", k_scheds[s], (long long)i, tu_get(out, i));
      graft_tensor_destroy(out);
      graft_function_destroy(f);
      graft_runtime_destroy(rt);
    }
  }
  graft_tensor_destroy(x);
}

/* Every value fits the per-value limit, but together they pass the plan
 * limit (2^62 bytes): refused at compile, before any sum overflows. */
static graft_status huge_chain_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out, (void)user;
  const int64_t dims[1] = {INT64_C(1) << 46}; /* 2^48 bytes of f32 */
  graft_value *x = graft_fill(t, GRAFT_F32, 1, dims, 1);
  for (int i = 0; i < (1 << 14) + 1; i++) x = graft_add(t, x, graft_scalar(t, GRAFT_F32, 1));
  out[0] = graft_reduce_sum(t, x, 0, NULL, 0);
  return GRAFT_OK;
}

static void test_graft_function_call__plan_byte_total_refused(void **state) {
  (void)state;
  char msg[512] = "";
  tu_assert_status(run_on("seq", huge_chain_cb, NULL, 0, NULL, msg), GRAFT_ENOMEM);
  tu_assert_msg_has(msg, "2^62");
}

/* Shape arithmetic on dims near INT64_MAX: a status and a message without
 * wrapped numbers, never a silent success. */
enum shape_case { FILL_EMPTY_HUGE, CONCAT_SUM, PAD_HUGE_BEGIN, PAD_NO_FIT, PAD_FITS, RESHAPE_OVERFLOW,
                  RESHAPE_ZERO, SLICE_HUGE, MATMUL_INT_RANGE };

static graft_status shape_case_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  const float three[3] = {1, 2, 3};
  const int64_t d3[1] = {3}, d4[1] = {4};
  graft_value *x = graft_constant(t, GRAFT_F32, 1, d3, three);
  switch (*(const enum shape_case *)user) {
  case FILL_EMPTY_HUGE: {
    const int64_t d[2] = {0, INT64_MAX};
    out[0] = graft_reduce_sum(t, graft_fill(t, GRAFT_F32, 2, d, 0), 0, NULL, 0);
    break;
  }
  case CONCAT_SUM: { /* 2^17 + 1 parts of 2^46 elements: the sum passes INT64_MAX */
    const int64_t d[1] = {INT64_C(1) << 46};
    enum { N_PARTS = (1 << 17) + 1 };
    graft_value **parts = malloc(N_PARTS * sizeof *parts);
    if (!parts) return GRAFT_ENOMEM;
    parts[0] = graft_fill(t, GRAFT_F32, 1, d, 0);
    for (int i = 1; i < N_PARTS; i++) parts[i] = parts[0];
    out[0] = graft_concat(t, N_PARTS, parts, 0);
    free(parts);
    break;
  }
  case PAD_HUGE_BEGIN: {
    const int64_t b[1] = {INT64_MAX - 1};
    out[0] = graft_pad(t, x, b, 1, d4);
    break;
  }
  case PAD_NO_FIT: {
    const int64_t b[1] = {2};
    out[0] = graft_pad(t, x, b, 1, d4);
    break;
  }
  case PAD_FITS: {
    const int64_t b[1] = {1};
    out[0] = graft_pad(t, x, b, 1, d4);
    break;
  }
  case RESHAPE_OVERFLOW: {
    const int64_t d[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    out[0] = graft_reshape(t, x, 2, d);
    break;
  }
  case RESHAPE_ZERO: {
    const int64_t z[1] = {0}, d[3] = {INT64_C(1) << 20, INT64_C(1) << 20, 0};
    out[0] = graft_reshape(t, graft_fill(t, GRAFT_F32, 1, z, 0), 3, d);
    break;
  }
  case SLICE_HUGE: {
    const int64_t b[1] = {1}, s[1] = {INT64_MAX};
    out[0] = graft_slice(t, x, b, s);
    break;
  }
  case MATMUL_INT_RANGE: {
    const int64_t a[2] = {0, INT64_C(1) << 31}, bb[2] = {INT64_C(1) << 31, 0};
    out[0] = graft_matmul(t, graft_fill(t, GRAFT_F32, 2, a, 0), graft_fill(t, GRAFT_F32, 2, bb, 0), 0);
    break;
  }
  }
  return GRAFT_OK;
}

static void test_shape_rules__int64_edges(void **state) {
  (void)state;
  const struct {
    enum shape_case c;
    graft_status want;
    const char *op, *has;
  } cases[] = {
      {FILL_EMPTY_HUGE, GRAFT_ESHAPE, "fill", "a 0 dim empties the value"},
      {CONCAT_SUM, GRAFT_ESHAPE, "concat", "INT64_MAX"},
      {PAD_HUGE_BEGIN, GRAFT_ESHAPE, "pad", "9223372036854775806"},
      {PAD_NO_FIT, GRAFT_ESHAPE, "pad", "does not fit"},
      {PAD_FITS, GRAFT_OK, NULL, NULL},
      {RESHAPE_OVERFLOW, GRAFT_ESHAPE, "reshape", "INT64_MAX"},
      {RESHAPE_ZERO, GRAFT_OK, NULL, NULL},
      {SLICE_HUGE, GRAFT_EINVAL, "slice", "9223372036854775807"},
      {MATMUL_INT_RANGE, GRAFT_EUNSUPPORTED, "matmul", "BLAS"},
  };
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    char msg[512] = "";
    graft_runtime *rt = tu_runtime();
    graft_tensor *out = NULL;
    graft_status st = tu_run(rt, shape_case_cb, (void *)&cases[i].c, 0, NULL, 1, &out, msg);
    if (st != cases[i].want)
      fail_msg("case %zu: status %s, want %s (%s)", i, graft_status_name(st),
               graft_status_name(cases[i].want), msg);
    if (cases[i].want == GRAFT_OK) {
      assert_non_null(out);
      if (cases[i].c == PAD_FITS) {
        const double want[4] = {0, 1, 2, 3};
        tu_assert_close(out, want, 4, 0, 0);
      } else {
        assert_int_equal(graft_tensor_numel(out), 0);
      }
    } else {
      assert_null(out);
      tu_assert_msg_has(msg, cases[i].op);
      tu_assert_msg_has(msg, cases[i].has);
      tu_assert_msg_lacks(msg, "-9223372036854775808"); /* a wrapped sum */
      tu_assert_msg_lacks(msg, "s9223372036854775");    /* a wrapped sum printed as a symbol */
    }
    graft_tensor_destroy(out);
    graft_runtime_destroy(rt);
  }
}

/* ---- 2. data checks survive pruning ----------------------------------------- */

typedef struct step {
  graft_variable *w; /* f32 [4, 3] */
  int output;        /* 0: the assign, 1: the gradient, 2: a JVP, 3: the loss */
} step;

/* loss = softmax_cross_entropy(x @ W, labels); W -= 0.5 * dloss/dW. */
static graft_status step_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  step *s = user;
  graft_value *w = graft_read(t, s->w);
  graft_value *loss = graft_softmax_cross_entropy(t, graft_matmul(t, in[0], w, 0), in[1]);
  graft_value *g = NULL;
  graft_status st = graft_gradients(t, 1, &loss, NULL, 1, &w, GRAFT_UNCONNECTED_ZERO, &g);
  if (st) return st;
  graft_value *upd = graft_assign_sub(t, s->w, graft_mul(t, graft_scalar(t, GRAFT_F32, 0.5), g));
  switch (s->output) {
  case 0: out[0] = upd; break;
  case 1: out[0] = g; break;
  case 2: {
    graft_value *tan = graft_ones_like(t, w), *jv = NULL;
    st = graft_jvp(t, 1, &w, &tan, 1, &loss, GRAFT_UNCONNECTED_ZERO, &jv);
    out[0] = jv;
    break;
  }
  default: out[0] = loss; break;
  }
  return st;
}

/* A label out of range must fail the call and change nothing, whatever the
 * function outputs: before, a step that output only its assign (or only
 * the gradient, or a JVP) pruned the loss, skipped its label check, and
 * committed an update computed from the bad label. */
static void test_softmax_cross_entropy__label_check_survives_pruning(void **state) {
  (void)state;
  const int64_t xs[2] = {2, 4}, ws[2] = {4, 3}, ls[1] = {2};
  const double xv[8] = {1, 2, 3, 4, -1, 0.5, 2, -3};
  float w0[12];
  for (int i = 0; i < 12; i++) w0[i] = 0.1f * (float)(i - 5);
  graft_tensor *x = tu_tensor_from(GRAFT_F32, 2, xs, xv);
  for (int bad = 0; bad < 2; bad++) {
    const double lv[2] = {1, bad ? 42 : 2};
    graft_tensor *labels = tu_tensor_from(GRAFT_I32, 1, ls, lv);
    graft_tensor *in[2] = {x, labels};
    for (int output = 0; output < 4; output++) {
      for (size_t s = 0; s < TU_N_OF(k_scheds); s++) {
        char ctx[96];
        snprintf(ctx, sizeof ctx, "labels %s, output %d, %s", bad ? "bad" : "good", output,
                 k_scheds[s]);
        graft_variable *w = NULL;
        tu_assert_status(graft_variable_create(NULL, "w", GRAFT_F32, 2, ws, w0, GRAFT_VAR_TRAINABLE, &w),
                         GRAFT_OK);
        step st = {w, output};
        graft_runtime *rt = tu_runtime_of(k_scheds[s], strcmp(k_scheds[s], "seq") ? 3 : 1, 0);
        graft_function *f = tu_function(rt, "step", step_cb, &st, 2, 1, NULL);
        /* A caller-provided output must keep its bytes on failure too. */
        int64_t od[2] = {4, 3};
        graft_tensor *dst = NULL;
        if (output == 0 || output == 1) {
          dst = tu_tensor_from(GRAFT_F32, 2, od, NULL);
        } else {
          dst = tu_tensor_from(GRAFT_F32, 0, NULL, NULL);
        }
        for (int64_t i = 0; i < graft_tensor_numel(dst); i++) tu_set(dst, i, 7.0);
        graft_tensor *out = dst;
        graft_status got = graft_function_call(f, 2, in, 1, &out);
        const float *wv = graft_tensor_data(graft_variable_value(w));
        if (bad) {
          if (got != GRAFT_EINVAL)
            fail_msg("%s: status %s, want GRAFT_EINVAL (%s)", ctx, graft_status_name(got),
                     graft_function_errmsg(f));
          tu_assert_msg_has(graft_function_errmsg(f), "softmax_cross_entropy");
          tu_assert_msg_has(graft_function_errmsg(f), "42");
          if (memcmp(wv, w0, sizeof w0) != 0) fail_msg("%s: the variable changed", ctx);
          for (int64_t i = 0; i < graft_tensor_numel(dst); i++)
            if (tu_get(dst, i) != 7.0) fail_msg("%s: the caller's output changed", ctx);
        } else {
          if (got != GRAFT_OK) fail_msg("%s: %s", ctx, graft_function_errmsg(f));
          if (memcmp(wv, w0, sizeof w0) == 0) fail_msg("%s: the step did not update", ctx);
        }
        graft_tensor_destroy(dst);
        graft_function_destroy(f);
        graft_runtime_destroy(rt);
        graft_variable_destroy(w);
      }
    }
    graft_tensor_destroy(labels);
  }
  graft_tensor_destroy(x);
}

/* ---- 4. statuses the callback makes up ----------------------------------------- */

typedef struct status_case {
  int returned;  /* what the callback returns */
  int failed;    /* what it passes to graft_trace_fail, or 1 for none */
} status_case;

static graft_status status_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  const status_case *c = user;
  out[0] = graft_scalar(t, GRAFT_F32, 1);
  if (c->failed != 1) graft_trace_fail(t, (graft_status)c->failed, "my check %d failed", 17);
  return (graft_status)c->returned;
}

static void test_graft_function_call__only_documented_statuses(void **state) {
  (void)state;
  const struct {
    status_case c;
    graft_status want;
    const char *has;
  } cases[] = {
      {{5, 1}, GRAFT_EINVAL, "returned 5"},
      {{-99, 1}, GRAFT_EINVAL, "returned -99"},
      {{GRAFT_EDTYPE, 1}, GRAFT_EDTYPE, "GRAFT_EDTYPE"},
      {{GRAFT_OK, 7}, GRAFT_EINVAL, "given 7"},
      {{GRAFT_OK, GRAFT_OK}, GRAFT_EINVAL, "given 0"},
      {{GRAFT_OK, GRAFT_ECORRUPT}, GRAFT_ECORRUPT, "my check 17 failed"},
      {{3, -1000}, GRAFT_EINVAL, "my check 17 failed"},
  };
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    char msg[512] = "";
    graft_status st = run_on("seq", status_cb, (void *)&cases[i].c, 0, NULL, msg);
    if (st != cases[i].want)
      fail_msg("case %zu: status %d (%s), want %s", i, (int)st, msg, graft_status_name(cases[i].want));
    tu_assert_msg_has(msg, cases[i].has);
  }
}

/* ---- 5. custom VJP rules ------------------------------------------------------ */

enum vjp_mode { VJP_GOOD, VJP_WRONG_SHAPE, VJP_WRONG_DTYPE, VJP_STALE, VJP_STALE_POISON,
                VJP_RECURSE, VJP_NEST, VJP_BAD_STATUS };

typedef struct vjp_case {
  enum vjp_mode mode;
  graft_value *stale;
} vjp_case;

static graft_value *square_region(graft_trace *t, graft_value *x, vjp_case *c);

static graft_status vjp_rule(graft_trace *t, int n_x, graft_value *const *xs, graft_value *y,
                             graft_value *gy, graft_value **gxs, void *user) {
  (void)n_x;
  vjp_case *c = user;
  const int64_t two[1] = {2};
  switch (c->mode) {
  case VJP_GOOD: gxs[0] = graft_mul(t, gy, graft_mul(t, graft_scalar(t, GRAFT_F64, 2), xs[0])); break;
  case VJP_WRONG_SHAPE: gxs[0] = graft_fill(t, GRAFT_F64, 1, two, 1); break;
  case VJP_WRONG_DTYPE: gxs[0] = graft_cast(t, gy, GRAFT_F32); break;
  case VJP_STALE:
  case VJP_STALE_POISON: gxs[0] = c->stale; break;
  case VJP_RECURSE: /* differentiates its own region again */
    return graft_gradients(t, 1, &y, &gy, 1, xs, GRAFT_UNCONNECTED_ZERO, gxs);
  case VJP_NEST: { /* a new region with this rule, differentiated: endless nesting */
    graft_value *inner = square_region(t, xs[0], c);
    return graft_gradients(t, 1, &inner, &gy, 1, xs, GRAFT_UNCONNECTED_ZERO, gxs);
  }
  case VJP_BAD_STATUS: return (graft_status)5;
  }
  return GRAFT_OK;
}

static graft_value *square_region(graft_trace *t, graft_value *x, vjp_case *c) {
  return graft_custom_gradient(t, 1, &x, graft_square(t, x), vjp_rule, c);
}

static graft_status custom_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_value *y = square_region(t, in[0], user), *g = NULL;
  graft_status st = graft_gradients(t, 1, &y, NULL, 1, in, GRAFT_UNCONNECTED_ZERO, &g);
  out[0] = g;
  return st;
}

/* Stashes a value of its own trace in *user, then fails if asked. */
typedef struct stash {
  graft_value *v;
  int fail;
  int poison; /* stash a poison value instead */
} stash;

static graft_status stash_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  stash *s = user;
  s->v = s->poison ? graft_scalar(t, (graft_dtype)77, 0) : graft_scalar(t, GRAFT_F64, 3);
  out[0] = s->poison ? graft_scalar(t, GRAFT_F64, 0) : s->v;
  if (s->fail) return graft_trace_fail(t, GRAFT_EINVAL, "failing on purpose");
  return GRAFT_OK;
}

/* A value whose trace has ended: made by a function that then fails (its
 * graph is freed) or is destroyed. */
static graft_value *stale_value(int poison) {
  graft_runtime *rt = tu_runtime();
  stash s = {NULL, 1, poison};
  char msg[512];
  graft_tensor *out = NULL;
  assert_int_not_equal(tu_run(rt, stash_cb, &s, 0, NULL, 1, &out, msg), GRAFT_OK);
  graft_runtime_destroy(rt);
  assert_non_null(s.v);
  return s.v;
}

static void test_graft_custom_gradient__rule_results_checked(void **state) {
  (void)state;
  const struct {
    enum vjp_mode mode;
    graft_status want;
    const char *has;
  } cases[] = {
      {VJP_GOOD, GRAFT_OK, NULL},
      {VJP_WRONG_SHAPE, GRAFT_ESHAPE, "f64[2]"},
      {VJP_WRONG_DTYPE, GRAFT_EDTYPE, "f32[3]"},
      {VJP_STALE, GRAFT_EMISUSE, "ended"},
      {VJP_STALE_POISON, GRAFT_EMISUSE, "poison"},
      {VJP_RECURSE, GRAFT_EMISUSE, "its own region"},
      {VJP_NEST, GRAFT_EUNSUPPORTED, "nested"},
      {VJP_BAD_STATUS, GRAFT_EINVAL, "returned 5"},
  };
  const int64_t d3[1] = {3};
  const double xv[3] = {1, -2, 0.5};
  graft_tensor *x = tu_tensor_from(GRAFT_F64, 1, d3, xv);
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    vjp_case c = {cases[i].mode, NULL};
    if (c.mode == VJP_STALE || c.mode == VJP_STALE_POISON) c.stale = stale_value(c.mode == VJP_STALE_POISON);
    graft_runtime *rt = tu_runtime();
    graft_tensor *out = NULL;
    char msg[512] = "";
    graft_status st = tu_run(rt, custom_cb, &c, 1, &x, 1, &out, msg);
    if (st != cases[i].want)
      fail_msg("case %zu: status %s, want %s (%s)", i, graft_status_name(st),
               graft_status_name(cases[i].want), msg);
    if (st == GRAFT_OK) {
      const double want[3] = {2, -4, 1};
      tu_assert_close(out, want, 3, 0, 0);
    } else {
      assert_null(out);
      tu_assert_msg_has(msg, "custom_gradient");
      tu_assert_msg_has(msg, cases[i].has);
    }
    graft_tensor_destroy(out);
    graft_runtime_destroy(rt);
  }
  graft_tensor_destroy(x);
}

/* ---- 6. values whose trace ended, functions whose runtime is gone ------------ */

enum stale_use { USE_IN_OP, USE_IN_GRADIENTS, USE_IN_JVP, USE_AS_OUTPUT, USE_ACCESSORS };

typedef struct stale_case {
  graft_value *stale;
  enum stale_use use;
  int accessor_ok; /* set by the callback: the accessors treated it as no value */
} stale_case;

static graft_status stale_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  stale_case *c = user;
  graft_value *mine = graft_scalar(t, GRAFT_F64, 2), *r = NULL;
  switch (c->use) {
  case USE_IN_OP: out[0] = graft_add(t, mine, c->stale); return GRAFT_OK;
  case USE_IN_GRADIENTS:
    graft_gradients(t, 1, &mine, NULL, 1, &c->stale, GRAFT_UNCONNECTED_ZERO, &r);
    out[0] = mine;
    return graft_trace_status(t);
  case USE_IN_JVP:
    graft_jvp(t, 1, &mine, &c->stale, 1, &mine, GRAFT_UNCONNECTED_ZERO, &r);
    out[0] = mine;
    return graft_trace_status(t);
  case USE_AS_OUTPUT: out[0] = c->stale; return GRAFT_OK;
  case USE_ACCESSORS:
    c->accessor_ok = graft_value_is_poison(c->stale) && graft_value_rank(c->stale) == 0 &&
                     graft_value_shape(c->stale) == NULL && !graft_value_is_poison(mine);
    out[0] = mine;
    return GRAFT_OK;
  }
  return GRAFT_OK;
}

static void test_stale_values__refused_not_read(void **state) {
  (void)state;
  for (int poison = 0; poison < 2; poison++) {
    for (int use = USE_IN_OP; use <= USE_ACCESSORS; use++) {
      stale_case c = {stale_value(poison), (enum stale_use)use, 0};
      char msg[512] = "";
      graft_status st = run_on("seq", stale_cb, &c, 0, NULL, msg);
      if (use == USE_ACCESSORS) {
        tu_assert_status(st, GRAFT_OK);
        assert_true(c.accessor_ok);
        continue;
      }
      if (st != GRAFT_EMISUSE)
        fail_msg("poison %d use %d: status %s (%s)", poison, use, graft_status_name(st), msg);
      tu_assert_msg_has(msg, poison ? "poison" : "ended");
    }
  }
}

/* A value of the calling function's trace, handed to a function called
 * from inside the callback (which traces on the same thread): foreign. */
typedef struct nested {
  graft_runtime *rt;
  graft_value *outer_value;
  graft_status inner_status;
  char inner_msg[512];
  int outer_rank_seen; /* graft_value_rank of the outer value inside the inner trace */
} nested;

static graft_status inner_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  nested *n = user;
  n->outer_rank_seen = graft_value_rank(n->outer_value);
  out[0] = graft_neg(t, n->outer_value);
  return GRAFT_OK;
}

static graft_status outer_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  nested *n = user;
  const int64_t d2[1] = {2};
  n->outer_value = graft_fill(t, GRAFT_F32, 1, d2, 1);
  graft_tensor *r = NULL;
  n->inner_status = tu_run(n->rt, inner_cb, n, 0, NULL, 1, &r, n->inner_msg);
  graft_tensor_destroy(r);
  out[0] = n->outer_value;
  return GRAFT_OK;
}

static void test_nested_trace__outer_value_is_foreign(void **state) {
  (void)state;
  nested n = {tu_runtime(), NULL, GRAFT_OK, "", -1};
  graft_tensor *out = NULL;
  char msg[512] = "";
  tu_assert_run_ok(tu_run(n.rt, outer_cb, &n, 0, NULL, 1, &out, msg), "outer", msg);
  tu_assert_status(n.inner_status, GRAFT_EMISUSE);
  tu_assert_msg_has(n.inner_msg, "another trace");
  assert_int_equal(n.outer_rank_seen, 1); /* the outer trace still runs: its values read */
  const double want[2] = {1, 1};
  tu_assert_close(out, want, 2, 0, 0);
  graft_tensor_destroy(out);
  graft_runtime_destroy(n.rt);
}

static graft_status one_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                           graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out, (void)user;
  out[0] = graft_scalar(t, GRAFT_F32, 1);
  return GRAFT_OK;
}

/* Destroying a runtime under live functions is a documented misuse: their
 * calls fail with GRAFT_EMISUSE (not a use after free) and the runtime's
 * memory goes with the last function. */
static void test_graft_runtime_destroy__before_its_functions(void **state) {
  (void)state;
  for (size_t s = 0; s < TU_N_OF(k_scheds); s++) {
    graft_runtime *rt = tu_runtime_of(k_scheds[s], 2, 0);
    graft_function *f = tu_function(rt, "f", one_cb, NULL, 0, 1, NULL);
    graft_function *g = tu_function(rt, "g", one_cb, NULL, 0, 1, NULL);
    graft_tensor *out = NULL;
    tu_assert_call_ok(f, 0, NULL, 1, &out);
    graft_tensor_destroy(out);
    out = NULL;
    graft_runtime_destroy(rt);
    tu_assert_status(graft_function_call(f, 0, NULL, 1, &out), GRAFT_EMISUSE);
    assert_null(out);
    tu_assert_msg_has(graft_function_errmsg(f), "runtime was destroyed");
    graft_runtime_destroy(rt); /* again: still held by g, so caught */
    graft_function *h = NULL;
    graft_function_desc d = {.name = "h", .trace = one_cb, .n_inputs = 0, .n_outputs = 1};
    tu_assert_status(graft_function_create(rt, &d, &h), GRAFT_EMISUSE);
    assert_null(h);
    graft_function_destroy(f);
    tu_assert_status(graft_function_call(g, 0, NULL, 1, &out), GRAFT_EMISUSE);
    graft_function_destroy(g); /* frees the runtime (LeakSanitizer checks it) */
  }
}

/* ---- 9. messages name what the user wrote ---------------------------------------- */

static graft_status axis_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  const int64_t d1[1] = {3}, d2[2] = {2, 3};
  graft_value *v = graft_fill(t, GRAFT_F32, 1, d1, 1), *m = graft_fill(t, GRAFT_F32, 2, d2, 1);
  switch (*(const int *)user) {
  case 0: out[0] = graft_concat(t, 1, &v, -3); break;
  case 1: out[0] = graft_softmax(t, m, 5); break;
  case 2: out[0] = graft_log_softmax(t, m, -3); break;
  default: {
    int axis = 2;
    out[0] = graft_reduce_max(t, m, 1, &axis, 0);
    break;
  }
  }
  return GRAFT_OK;
}

static void test_axis_messages__name_the_given_axis(void **state) {
  (void)state;
  const char *const want[4][2] = {{"concat", "axis -3 is out of range for rank 1 (expected -1..0)"},
                                  {"softmax", "axis 5 is out of range for rank 2 (expected -2..1)"},
                                  {"log_softmax", "axis -3 is out of range for rank 2"},
                                  {"reduce_max", "axis 2 is out of range for rank 2 (expected -2..1)"}};
  for (int i = 0; i < 4; i++) {
    char msg[512] = "";
    tu_assert_status(run_on("seq", axis_cb, &i, 0, NULL, msg), GRAFT_EINVAL);
    tu_assert_msg_has(msg, want[i][0]);
    tu_assert_msg_has(msg, want[i][1]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_fill__huge_shapes_refused),
      cmocka_unit_test(test_graft_fill__byte_limit_boundary),
      cmocka_unit_test(test_graft_tensor_create__zero_element_rule),
      cmocka_unit_test(test_graft_reduce_sum__empty_input_with_large_dims),
      cmocka_unit_test(test_graft_function_call__plan_byte_total_refused),
      cmocka_unit_test(test_shape_rules__int64_edges),
      cmocka_unit_test(test_softmax_cross_entropy__label_check_survives_pruning),
      cmocka_unit_test(test_graft_function_call__only_documented_statuses),
      cmocka_unit_test(test_graft_custom_gradient__rule_results_checked),
      cmocka_unit_test(test_stale_values__refused_not_read),
      cmocka_unit_test(test_nested_trace__outer_value_is_foreign),
      cmocka_unit_test(test_graft_runtime_destroy__before_its_functions),
      cmocka_unit_test(test_axis_messages__name_the_given_axis),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
