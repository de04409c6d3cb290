/* Running control flow: a failure inside a body fails the call with a
 * message naming the construct, the body and the iteration, and changes
 * nothing (outputs, variables), and the next good call succeeds; a scan
 * body's independent matmuls give the same bits on every executor; the
 * work-stealing team stays up for a whole call (one parallel region however
 * many body runs), with the same bits, failures and nesting, and is not
 * started inside the caller's own parallel region; the Chrome trace names a
 * loop's iterations; the plan stats count bodies, their runs and their ops;
 * a scan under a signature with an unknown batch dim gets one trace and a
 * plan per batch size. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <omp.h>
#include <unistd.h>

#include "sched/sched.h" /* graft__ctl_team_always, graft__exec_ws_regions */
#include "testutil.h"

TU_SUPPRESS_GOMP_TASK_LEAK();

#define F64 GRAFT_F64
#define I32 GRAFT_I32

static graft_value *sum_all(graft_trace *t, graft_value *x) { return graft_reduce_sum(t, x, 0, NULL, 0); }

/* The executors every case runs on. */
typedef struct exec_cfg {
  const char *sched;
  int threads;
} exec_cfg;

static const exec_cfg execs[] = {{"seq", 1}, {"ws", 1}, {"ws", 2}, {"ws", 3},
                                 {"ws", 4}, {"ws", 8}, {"omp", 2}, {"omp", 4}};

/* A copy of t's bytes (the caller frees it). */
static void *bytes_of(const graft_tensor *t) {
  size_t n = (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t));
  void *c = malloc(n ? n : 1);
  assert_non_null(c);
  memcpy(c, graft_tensor_data(t), n);
  return c;
}

static void assert_bytes(const graft_tensor *t, const void *want, const char *what) {
  size_t n = (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t));
  if (memcmp(graft_tensor_data(t), want, n)) fail_msg("%s changed", what);
}

/* ---- failures inside bodies -------------------------------------------------- */

/* Each function ends by adding what its construct gave to a variable. */
enum { FN = 4, FC = 5, FT = 6 };

typedef struct fail_ctx {
  graft_variable *v; /* f64 scalar */
} fail_ctx;

/* scan over (logits [FT, FN, FC], labels [FT, FN]) from h0 [FN, FC]: each
 * step's cross entropy of x + h, and h <- tanh(x + h). */
static graft_status xent_step(graft_trace *t, int n, graft_value *const *in, int no,
                              graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  graft_value *z = graft_add(t, in[1], in[0]);
  out[0] = graft_tanh(t, z);
  out[1] = graft_softmax_cross_entropy(t, z, in[2]);
  return GRAFT_OK;
}

static graft_status scan_xent(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  fail_ctx *c = u;
  graft_value *xs[2] = {in[0], in[1]}, *res[2];
  graft_scan(t, xent_step, NULL, 1, &in[2], 2, xs, 1, res, NULL);
  out[0] = res[0];
  out[1] = res[1];
  graft_assign_add(t, c->v, sum_all(t, res[1]));
  return GRAFT_OK;
}

/* cond(pred > 0) over (logits [FN, FC], labels [FN]): the cross entropy,
 * else the logits' mean. */
static graft_status xent_branch(graft_trace *t, int n, graft_value *const *in, int no,
                                graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = graft_softmax_cross_entropy(t, in[0], in[1]);
  return GRAFT_OK;
}

static graft_status mean_branch(graft_trace *t, int n, graft_value *const *in, int no,
                                graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = graft_reduce_mean(t, in[0], 0, NULL, 0);
  return GRAFT_OK;
}

static graft_status cond_xent(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  fail_ctx *c = u;
  graft_value *pred = graft_greater(t, in[2], graft_scalar(t, F64, 0));
  graft_cond(t, pred, 2, in, xent_branch, mean_branch, NULL, 1, out);
  graft_assign_add(t, c->v, out[0]);
  return GRAFT_OK;
}

/* The loops' bodies read values of the function's trace (captured). */
typedef struct loop_ctx {
  graft_value *n, *x; /* the count (i32 scalar), the data */
} loop_ctx;

/* The cond of loops whose var 0 counts: i < n. */
static graft_status count_below(graft_trace *t, int n, graft_value *const *v, int no,
                                graft_value **out, void *u) {
  (void)n, (void)no;
  out[0] = graft_less(t, v[0], ((const loop_ctx *)u)->n);
  return GRAFT_OK;
}

/* while (i < n): acc += xent(logits, lab); lab += 1.  in: logits [FN, FC],
 * labels [FN], n (i32 scalar); vars (i, lab, acc). */
static graft_status xent_shift(graft_trace *t, int n, graft_value *const *v, int no,
                               graft_value **out, void *u) {
  (void)n, (void)no;
  const loop_ctx *w = u;
  out[0] = graft_add(t, v[0], graft_scalar(t, I32, 1));
  out[1] = graft_add(t, v[1], graft_scalar(t, I32, 1));
  out[2] = graft_add(t, v[2], graft_softmax_cross_entropy(t, w->x, v[1]));
  return GRAFT_OK;
}

static graft_status while_xent(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  fail_ctx *c = u;
  loop_ctx w = {in[2], in[0]};
  graft_value *init[3] = {graft_scalar(t, I32, 0), in[1], graft_scalar(t, F64, 0)}, *res[3];
  graft_while_loop(t, count_below, xent_shift, &w, 3, init, res, NULL);
  out[0] = res[2];
  graft_assign_add(t, c->v, res[2]);
  return GRAFT_OK;
}

/* Mean cross entropy of rows x[r * FC ..] with labels lab (the kernel's
 * formula). */
static double xent_ref(const double *x, const int32_t *lab) {
  double total = 0;
  for (int r = 0; r < FN; r++) {
    const double *row = x + r * FC;
    double m = row[0], s = 0;
    for (int j = 1; j < FC; j++) m = fmax(m, row[j]);
    for (int j = 0; j < FC; j++) s += exp(row[j] - m);
    total += m + log(s) - row[lab[r]];
  }
  return total / FN;
}

/* A failure case's function on one executor, and its variable (from 0). */
typedef struct fail_run {
  graft_runtime *rt;
  fail_ctx c;
  graft_function *f;
  char name[64]; /* "<sched> x<threads>" */
} fail_run;

static void fail_run_open(fail_run *fr, const exec_cfg *e, const char *name, graft_trace_fn fn, int n_in,
                          int n_out) {
  double zero = 0;
  fr->rt = tu_runtime_of(e->sched, e->threads, 0);
  fr->c.v = NULL;
  assert_int_equal(graft_variable_create(NULL, "acc", F64, 0, NULL, &zero, 0, &fr->c.v), GRAFT_OK);
  fr->f = tu_function(fr->rt, name, fn, &fr->c, n_in, n_out, NULL);
  snprintf(fr->name, sizeof fr->name, "%s x%d", e->sched, e->threads);
}

static void fail_run_close(fail_run *fr) {
  graft_function_destroy(fr->f);
  graft_variable_destroy(fr->c.v);
  graft_runtime_destroy(fr->rt);
}

/* A call of f that must fail with msg containing where and naming the
 * op and the bad label; out[] (the caller's) and v keep their bytes. */
static void assert_fails_unchanged(graft_function *f, int n_in, graft_tensor **in, int n_out,
                                   graft_tensor **out, graft_variable *v, const char *where,
                                   const char *ctx) {
  void *before[4], *v_before = bytes_of(graft_variable_value(v));
  for (int i = 0; i < n_out; i++) before[i] = bytes_of(out[i]);
  graft_status st = graft_function_call(f, n_in, in, n_out, out);
  const char *msg = graft_function_errmsg(f);
  if (st != GRAFT_EINVAL) fail_msg("%s: status %s (%s), want GRAFT_EINVAL", ctx, graft_status_name(st), msg);
  if (!strstr(msg, where) || !strstr(msg, "softmax_cross_entropy") || !strstr(msg, "label 5 out of range [0, 5)"))
    fail_msg("%s: message \"%s\" does not name \"%s\", the op and the label", ctx, msg, where);
  if (!strncmp(ctx, "seq", 3)) print_message("%s\n", msg);
  for (int i = 0; i < n_out; i++) {
    assert_bytes(out[i], before[i], "an output");
    free(before[i]);
  }
  assert_bytes(graft_variable_value(v), v_before, "the variable");
  free(v_before);
}

static void test_graft_function_call__failure_in_a_scan_body(void **state) {
  (void)state;
  tu_rng r = {11};
  const int64_t xd[3] = {FT, FN, FC}, ld[2] = {FT, FN}, hd[2] = {FN, FC};
  graft_tensor *in[3] = {tu_tensor_rand(&r, F64, 3, xd, -2, 2), tu_tensor_rand(&r, I32, 2, ld, 0, FC - 1),
                         tu_tensor_rand(&r, F64, 2, hd, -1, 1)};
  int32_t *lab = graft_tensor_data(in[1]);
  for (size_t e = 0; e < TU_N_OF(execs); e++) {
    fail_run fr;
    fail_run_open(&fr, &execs[e], "scan_xent", scan_xent, 3, 2);
    graft_function *f = fr.f;
    graft_variable *v = fr.c.v;
    graft_tensor *out[2] = {NULL, NULL};
    tu_assert_call_ok(f, 3, in, 2, out); /* a good call first: a plan, outputs to keep */
    /* a bad label at step 3, row 2: steps 0-2 ran, step 3 fails */
    lab[3 * FN + 2] = FC;
    assert_fails_unchanged(f, 3, in, 2, out, v, "scan: body, iteration 3: ", fr.name);
    /* and the next good call succeeds, with the reference's values */
    lab[3 * FN + 2] = 0;
    double v0 = tu_get(graft_variable_value(v), 0);
    tu_assert_call_ok(f, 3, in, 2, out);
    double h[FN * FC], total = 0;
    memcpy(h, graft_tensor_data(in[2]), sizeof h);
    for (int s = 0; s < FT; s++) {
      double z[FN * FC];
      for (int i = 0; i < FN * FC; i++) z[i] = tu_get(in[0], s * FN * FC + i) + h[i];
      double y = xent_ref(z, lab + s * FN);
      assert_true(tu_close(tu_get(out[1], s), y, 1e-13, 0));
      total += tu_get(out[1], s);
      for (int i = 0; i < FN * FC; i++) h[i] = tanh(z[i]);
    }
    tu_assert_close(out[0], h, FN * FC, 1e-13, 0);
    assert_true(tu_get(graft_variable_value(v), 0) == v0 + total);
    tu_destroy_outs(out, 2);
    fail_run_close(&fr);
  }
  tu_destroy_outs(in, 3);
}

static void test_graft_function_call__failure_in_a_cond_branch(void **state) {
  (void)state;
  tu_rng r = {12};
  const int64_t xd[2] = {FN, FC}, ld[1] = {FN};
  graft_tensor *in[3] = {tu_tensor_rand(&r, F64, 2, xd, -2, 2), tu_tensor_rand(&r, I32, 1, ld, 0, FC - 1),
                         tu_tensor_from(F64, 0, NULL, (const double[]){1})};
  int32_t *lab = graft_tensor_data(in[1]);
  for (size_t e = 0; e < TU_N_OF(execs); e++) {
    fail_run fr;
    fail_run_open(&fr, &execs[e], "cond_xent", cond_xent, 3, 1);
    graft_function *f = fr.f;
    graft_variable *v = fr.c.v;
    graft_tensor *out[1] = {NULL};
    tu_assert_call_ok(f, 3, in, 1, out);
    assert_true(tu_close(tu_get(out[0], 0), xent_ref(graft_tensor_data(in[0]), lab), 1e-14, 0));
    lab[1] = FC;
    assert_fails_unchanged(f, 3, in, 1, out, v, "cond: then branch: ", fr.name);
    /* the else branch does not read the labels: only the taken branch runs */
    tu_set(in[2], 0, -1);
    double v0 = tu_get(graft_variable_value(v), 0);
    tu_assert_call_ok(f, 3, in, 1, out);
    double mean = 0;
    for (int i = 0; i < FN * FC; i++) mean += tu_get(in[0], i);
    assert_true(tu_close(tu_get(out[0], 0), mean / (FN * FC), 1e-14, 0));
    assert_true(tu_get(graft_variable_value(v), 0) == v0 + tu_get(out[0], 0));
    tu_set(in[2], 0, 1);
    lab[1] = 0;
    tu_assert_call_ok(f, 3, in, 1, out);
    tu_destroy_outs(out, 1);
    fail_run_close(&fr);
  }
  tu_destroy_outs(in, 3);
}

static void test_graft_function_call__failure_in_a_while_body(void **state) {
  (void)state;
  tu_rng r = {13};
  const int64_t xd[2] = {FN, FC}, ld[1] = {FN};
  /* labels up to FC - 3: each iteration adds 1, so iteration 3 reads FC */
  graft_tensor *in[3] = {tu_tensor_rand(&r, F64, 2, xd, -2, 2), tu_tensor_rand(&r, I32, 1, ld, 0, FC - 4),
                         tu_tensor_from(I32, 0, NULL, (const double[]){3})};
  int32_t *lab = graft_tensor_data(in[1]);
  lab[2] = FC - 3;
  for (size_t e = 0; e < TU_N_OF(execs); e++) {
    fail_run fr;
    fail_run_open(&fr, &execs[e], "while_xent", while_xent, 3, 1);
    graft_function *f = fr.f;
    graft_variable *v = fr.c.v;
    graft_tensor *out[1] = {NULL};
    tu_assert_call_ok(f, 3, in, 1, out); /* 3 iterations: labels up to FC - 1 */
    double want = 0;
    int32_t l[FN];
    for (int k = 0; k < 3; k++) {
      for (int i = 0; i < FN; i++) l[i] = lab[i] + k;
      want += xent_ref(graft_tensor_data(in[0]), l);
    }
    assert_true(tu_close(tu_get(out[0], 0), want, 1e-14, 0));
    tu_set(in[2], 0, 5); /* the data asks for more: iteration 3 fails */
    assert_fails_unchanged(f, 3, in, 1, out, v, "while_loop: body, iteration 3: ", fr.name);
    tu_set(in[2], 0, 2);
    double v0 = tu_get(graft_variable_value(v), 0);
    tu_assert_call_ok(f, 3, in, 1, out);
    assert_true(tu_get(graft_variable_value(v), 0) == v0 + tu_get(out[0], 0));
    tu_set(in[2], 0, 3);
    tu_destroy_outs(out, 1);
    fail_run_close(&fr);
  }
  tu_destroy_outs(in, 3);
}

/* ---- a scan body's parallel work, on every executor ------------------------------ */

enum { PB = 96, PH = 128, PT = 4 };

typedef struct par_ctx {
  graft_value *W1, *W2; /* the function's: captured */
} par_ctx;

/* h' = tanh(h W1 + x W2): two independent [PB, PH] x [PH, PH] matmuls. */
static graft_status two_matmuls(graft_trace *t, int n, graft_value *const *in, int no,
                                graft_value **out, void *u) {
  (void)n, (void)no;
  const par_ctx *c = u;
  graft_value *a = graft_matmul(t, in[0], c->W1, 0), *b = graft_matmul(t, in[1], c->W2, 0);
  out[0] = out[1] = graft_tanh(t, graft_add(t, a, b));
  return GRAFT_OK;
}

/* in: h0 [PB, PH], X [PT, PB, PH], W1, W2 [PH, PH].  out: hT, ys, and the
 * gradients of sum(ys^2) for h0, W1, W2 (the backward body: more
 * independent matmuls). */
static graft_status par_scan(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *u) {
  (void)n_in, (void)n_out, (void)u;
  par_ctx c = {in[2], in[3]};
  graft_scan(t, two_matmuls, &c, 1, &in[0], 1, &in[1], 1, out, NULL);
  graft_value *loss = sum_all(t, graft_square(t, out[1]));
  graft_value *xs[3] = {in[0], in[2], in[3]};
  graft_gradients(t, 1, &loss, NULL, 3, xs, GRAFT_UNCONNECTED_ZERO, out + 2);
  return GRAFT_OK;
}

static void test_graft_function_call__scan_body_parallel_bitwise(void **state) {
  (void)state;
  tu_rng r = {21};
  const int64_t hd[2] = {PB, PH}, xd[3] = {PT, PB, PH}, wd[2] = {PH, PH};
  graft_tensor *in[4] = {tu_tensor_rand(&r, GRAFT_F32, 2, hd, -1, 1), tu_tensor_rand(&r, GRAFT_F32, 3, xd, -1, 1),
                         tu_tensor_rand(&r, GRAFT_F32, 2, wd, -0.1, 0.1),
                         tu_tensor_rand(&r, GRAFT_F32, 2, wd, -0.1, 0.1)};
  graft_tensor *ref[5] = {NULL}, *got[5] = {NULL};
  static const char *const names[5] = {"hT", "ys", "d h0", "d W1", "d W2"};
  for (size_t e = 0; e < TU_N_OF(execs); e++) {
    graft_runtime *rt = tu_runtime_of(execs[e].sched, execs[e].threads, 0);
    graft_function *f = tu_function(rt, "par_scan", par_scan, NULL, 4, 5, NULL);
    graft_tensor **out = e ? got : ref;
    tu_assert_call_ok(f, 4, in, 5, out);
    graft_plan_stats ps;
    tu_assert_status(graft_function_stats(f, &ps), GRAFT_OK);
    assert_int_equal(ps.control_nodes, 2); /* the scan and its backward scan */
    assert_int_equal(ps.body_runs, 2 * PT);
    for (int i = 0; e && i < 5; i++) {
      size_t bytes = (size_t)graft_tensor_numel(ref[i]) * 4;
      if (memcmp(graft_tensor_data(got[i]), graft_tensor_data(ref[i]), bytes))
        fail_msg("%s x%d: %s differs from seq's", execs[e].sched, execs[e].threads, names[i]);
    }
    if (e) tu_destroy_outs(got, 5);
    graft_function_destroy(f);
    graft_runtime_destroy(rt);
  }
  tu_destroy_outs(ref, 5);
  tu_destroy_outs(in, 4);
}

/* ---- the held team: one region a call ------------------------------------------------ */

enum { HT = 12 };

/* The held-team cases' function: a scan whose body holds a cond beside
 * two matmuls, so the scan's body walks on the calling thread and the
 * branches and the backward bodies run on the team.  in: h0 [PB, PH],
 * X [HT, PB, PH], W1, W2 [PH, PH], labels [HT, PB] (i32, < PH), pred (f64
 * scalar).  A step: z = h W1 + x W2, then the branch pred > 0 ? tanh(z W1)
 * : sin(z) W2 gives h' and its loss term, the cross entropy of h' against
 * the step's labels.  out: hT, the losses [HT], and the gradients of their
 * sum for h0, W1, W2; acc += that sum. */
typedef struct held_ctx {
  graft_value *W1, *W2, *pred;
  graft_variable *acc;
} held_ctx;

static graft_status tanh_branch(graft_trace *t, int n, graft_value *const *in, int no,
                                graft_value **out, void *u) {
  (void)n, (void)no;
  out[0] = graft_tanh(t, graft_matmul(t, in[0], ((const held_ctx *)u)->W1, 0));
  out[1] = graft_softmax_cross_entropy(t, out[0], in[1]);
  return GRAFT_OK;
}

static graft_status sin_branch(graft_trace *t, int n, graft_value *const *in, int no,
                               graft_value **out, void *u) {
  (void)n, (void)no;
  out[0] = graft_matmul(t, graft_sin(t, in[0]), ((const held_ctx *)u)->W2, 0);
  out[1] = graft_softmax_cross_entropy(t, out[0], in[1]);
  return GRAFT_OK;
}

static graft_status held_step(graft_trace *t, int n, graft_value *const *in, int no,
                              graft_value **out, void *u) {
  (void)n, (void)no;
  const held_ctx *c = u;
  graft_value *z = graft_add(t, graft_matmul(t, in[0], c->W1, 0), graft_matmul(t, in[1], c->W2, 0));
  graft_value *p = graft_greater(t, c->pred, graft_scalar(t, F64, 0)), *ins[2] = {z, in[2]};
  graft_cond(t, p, 2, ins, tanh_branch, sin_branch, (void *)c, 2, out);
  return GRAFT_OK;
}

static graft_status held_scan(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  held_ctx c = {in[2], in[3], in[5], ((held_ctx *)u)->acc};
  graft_value *xs[2] = {in[1], in[4]};
  graft_scan(t, held_step, &c, 1, &in[0], 2, xs, 1, out, NULL);
  graft_value *loss = sum_all(t, out[1]);
  graft_value *wrt[3] = {in[0], in[2], in[3]};
  graft_gradients(t, 1, &loss, NULL, 3, wrt, GRAFT_UNCONNECTED_ZERO, out + 2);
  graft_assign_add(t, c.acc, loss);
  return GRAFT_OK;
}

static void held_inputs(graft_tensor **in, double pred) {
  tu_rng r = {23};
  const int64_t hd[2] = {PB, PH}, xd[3] = {HT, PB, PH}, wd[2] = {PH, PH}, ld[2] = {HT, PB};
  in[0] = tu_tensor_rand(&r, F64, 2, hd, -1, 1);
  in[1] = tu_tensor_rand(&r, F64, 3, xd, -1, 1);
  in[2] = tu_tensor_rand(&r, F64, 2, wd, -0.1, 0.1);
  in[3] = tu_tensor_rand(&r, F64, 2, wd, -0.1, 0.1);
  in[4] = tu_tensor_rand(&r, I32, 2, ld, 0, PH - 1);
  in[5] = tu_tensor_from(F64, 0, NULL, &pred);
}

/* One held_scan function on one executor, and its variable (from 0). */
typedef struct held_run {
  graft_runtime *rt;
  held_ctx c;
  graft_function *f;
} held_run;

static void held_open(held_run *hr, const exec_cfg *e) {
  double zero = 0;
  hr->rt = tu_runtime_of(e->sched, e->threads, 0);
  memset(&hr->c, 0, sizeof hr->c);
  assert_int_equal(graft_variable_create(NULL, "acc", F64, 0, NULL, &zero, 0, &hr->c.acc), GRAFT_OK);
  hr->f = tu_function(hr->rt, "held_scan", held_scan, &hr->c, 6, 5, NULL);
}

static void held_close(held_run *hr) {
  graft_function_destroy(hr->f);
  graft_variable_destroy(hr->c.acc);
  graft_runtime_destroy(hr->rt);
}

static void assert_outs_equal(graft_tensor *const *got, graft_tensor *const *want, int n, const char *ctx) {
  static const char *const names[5] = {"hT", "losses", "d h0", "d W1", "d W2"};
  for (int i = 0; i < n; i++) {
    size_t bytes = (size_t)graft_tensor_numel(want[i]) * graft_dtype_size(graft_tensor_dtype(want[i]));
    if (graft_tensor_numel(got[i]) != graft_tensor_numel(want[i]) ||
        memcmp(graft_tensor_data(got[i]), graft_tensor_data(want[i]), bytes))
      fail_msg("%s: %s differs from seq's", ctx, names[i]);
  }
}

/* Every body on the team (both branches taken in turn): the bits of seq at
 * every executor, and a ws call of several threads opens one parallel
 * region, not one per body run. */
static void test_graft_function_call__held_team_bitwise(void **state) {
  (void)state;
  graft__ctl_team_always = 1;
  graft_tensor *in[6];
  for (int branch = 0; branch < 2; branch++) {
    held_inputs(in, branch ? -1 : 1);
    graft_tensor *ref[5] = {NULL}, *got[5] = {NULL};
    double ref_acc = 0;
    for (size_t e = 0; e < TU_N_OF(execs); e++) {
      held_run hr;
      held_open(&hr, &execs[e]);
      graft_tensor **out = e ? got : ref;
      int64_t regions = graft__exec_ws_regions;
      tu_assert_call_ok(hr.f, 6, in, 5, out);
      int64_t opened = graft__exec_ws_regions - regions;
      char ctx[64];
      snprintf(ctx, sizeof ctx, "%s x%d, %s branch", execs[e].sched, execs[e].threads, branch ? "else" : "then");
      graft_plan_stats ps;
      tu_assert_status(graft_function_stats(hr.f, &ps), GRAFT_OK);
      assert_true(ps.body_runs >= 4 * HT); /* the scan, the cond and their backward */
      if (!strcmp(execs[e].sched, "ws") && execs[e].threads > 1 && opened != 1)
        fail_msg("%s: %lld parallel regions for one call (want 1)", ctx, (long long)opened);
      if (strcmp(execs[e].sched, "omp") && execs[e].threads == 1 && opened != 0)
        fail_msg("%s: %lld parallel regions at one thread", ctx, (long long)opened);
      double acc = tu_get(graft_variable_value(hr.c.acc), 0);
      if (e) {
        assert_outs_equal(got, ref, 5, ctx);
        if (acc != ref_acc) fail_msg("%s: the variable differs from seq's", ctx);
        tu_destroy_outs(got, 5);
      } else {
        ref_acc = acc;
      }
      held_close(&hr);
    }
    tu_destroy_outs(ref, 5);
    tu_destroy_outs(in, 6);
  }
  graft__ctl_team_always = 0;
}

/* A bad label in a branch of the scan's body (a job for the team) fails
 * the call at that iteration, leaves the outputs and the variable as they
 * were, and the team's next call gives the bits of seq. */
static void test_graft_function_call__failure_in_a_held_team_body(void **state) {
  (void)state;
  graft__ctl_team_always = 1;
  graft_tensor *in[6];
  held_inputs(in, 1);
  int32_t *lab = graft_tensor_data(in[4]);
  graft_tensor *ref[5] = {NULL};
  for (size_t e = 0; e < TU_N_OF(execs); e++) {
    held_run hr;
    held_open(&hr, &execs[e]);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "%s x%d", execs[e].sched, execs[e].threads);
    graft_tensor *out[5] = {NULL};
    tu_assert_call_ok(hr.f, 6, in, 5, out);
    if (!e) memcpy(ref, out, sizeof ref);
    void *before[5], *v_before = bytes_of(graft_variable_value(hr.c.acc));
    for (int i = 0; i < 5; i++) before[i] = bytes_of(out[i]);
    for (int bad = 0; bad < 2; bad++) { /* twice: a failed call leaves the team usable */
      lab[7 * PB + 5] = PH;
      graft_status st = graft_function_call(hr.f, 6, in, 5, out);
      lab[7 * PB + 5] = 3;
      if (st != GRAFT_EINVAL) fail_msg("%s: status %s, want GRAFT_EINVAL", ctx, graft_status_name(st));
      const char *msg = graft_function_errmsg(hr.f);
      if (!strstr(msg, "scan: body, iteration 7: cond: then branch: softmax_cross_entropy") ||
          !strstr(msg, "label 128 out of range [0, 128)"))
        fail_msg("%s: message \"%s\" does not name the body, iteration 7, the branch, the op and the label",
                 ctx, msg);
      for (int i = 0; i < 5; i++) assert_bytes(out[i], before[i], "an output");
      assert_bytes(graft_variable_value(hr.c.acc), v_before, "the variable");
    }
    for (int i = 0; i < 5; i++) free(before[i]);
    free(v_before);
    tu_assert_call_ok(hr.f, 6, in, 5, out);
    if (e) {
      assert_outs_equal(out, ref, 5, ctx);
      tu_destroy_outs(out, 5);
    }
    held_close(&hr);
  }
  tu_destroy_outs(ref, 5);
  tu_destroy_outs(in, 6);
  graft__ctl_team_always = 0;
}

/* Called from the caller's own parallel region, a scan runs on each calling
 * thread (no team of its own: no region opened), with seq's bits. */
static void test_graft_function_call__held_team_not_inside_omp_parallel(void **state) {
  (void)state;
  enum { CALLERS = 2 };
  graft__ctl_team_always = 1;
  graft_tensor *in[6];
  held_inputs(in, 1);
  held_run seq;
  held_open(&seq, &execs[0]);
  graft_tensor *ref[5] = {NULL};
  tu_assert_call_ok(seq.f, 6, in, 5, ref);
  held_close(&seq);
  graft_runtime *rt = tu_runtime_of("ws", 2, 0);
  graft_tensor *got[CALLERS][5];
  graft_status status[CALLERS];
  int64_t regions = graft__exec_ws_regions;
#pragma omp parallel num_threads(CALLERS)
  {
    int k = omp_get_thread_num();
    double zero = 0;
    held_ctx c = {0};
    graft_function_desc d = {.name = "held_scan", .trace = held_scan, .user = &c, .n_inputs = 6, .n_outputs = 5};
    graft_function *f = NULL;
    memset(got[k], 0, sizeof got[k]);
    status[k] = graft_variable_create(NULL, "acc", F64, 0, NULL, &zero, 0, &c.acc);
    if (status[k] == GRAFT_OK) status[k] = graft_function_create(rt, &d, &f);
    if (status[k] == GRAFT_OK) status[k] = graft_function_call(f, 6, in, 5, got[k]);
    graft_function_destroy(f);
    graft_variable_destroy(c.acc);
  }
  assert_int_equal(graft__exec_ws_regions, regions);
  for (int k = 0; k < CALLERS; k++) {
    tu_assert_status(status[k], GRAFT_OK);
    assert_outs_equal(got[k], ref, 5, "inside omp parallel");
    tu_destroy_outs(got[k], 5);
  }
  graft_runtime_destroy(rt);
  tu_destroy_outs(ref, 5);
  tu_destroy_outs(in, 6);
  graft__ctl_team_always = 0;
}

/* ---- x^n by a while loop: the Chrome trace's names and the stats ------------------- */

static graft_status pow_body(graft_trace *t, int n, graft_value *const *v, int no,
                             graft_value **out, void *u) {
  (void)n, (void)no;
  const loop_ctx *c = u;
  out[0] = graft_add(t, v[0], graft_scalar(t, I32, 1));
  out[1] = graft_mul(t, v[1], c->x);
  return GRAFT_OK;
}

/* in: x (f64 scalar), n (i32 scalar); out: x^n. */
static graft_status power(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                          graft_value **out, void *u) {
  (void)n_in, (void)n_out, (void)u;
  loop_ctx c = {in[1], in[0]};
  graft_value *init[2] = {graft_scalar(t, I32, 0), graft_scalar(t, F64, 1)}, *res[2];
  graft_while_loop(t, count_below, pow_body, &c, 2, init, res, NULL);
  out[0] = res[1];
  return GRAFT_OK;
}

static graft_tensor **power_inputs(graft_tensor **in, double x, int n) {
  in[0] = tu_tensor_from(F64, 0, NULL, &x);
  in[1] = tu_tensor_from(I32, 0, NULL, (const double[]){n});
  return in;
}

/* Marks seen[k] for every "<tag>k]" in text (k < cap); returns the largest
 * k found (-1: none). */
static int iterations_named(const char *text, const char *tag, uint8_t *seen, int cap) {
  int top = -1;
  for (const char *p = strstr(text, tag); p; p = strstr(p + 1, tag)) {
    char *end;
    long k = strtol(p + strlen(tag), &end, 10);
    if (*end != ']') continue;
    if (k < cap) seen[k] = 1;
    if (k > top) top = (int)k;
  }
  return top;
}

/* A ws runtime of threads threads writing its Chrome trace to a new file,
 * whose name goes to path (at least 32 bytes). */
static graft_runtime *traced_runtime(int threads, char *path) {
  snprintf(path, 32, "/tmp/graft_ctl_XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.sched = "ws";
  o.num_threads = threads;
  o.trace_path = path;
  return tu_runtime_from(&o);
}

/* The trace at path (its runtime destroyed: the file is closed), which is
 * removed; the text is static (valid until the next call). */
static const char *trace_text(const char *path) {
  static char text[1 << 20];
  FILE *fp = fopen(path, "r");
  assert_non_null(fp);
  size_t len = fread(text, 1, sizeof text - 1, fp);
  text[len] = '\0';
  fclose(fp);
  unlink(path);
  return text;
}

static void test_graft_function_call__chrome_trace_names_iterations(void **state) {
  (void)state;
  char path[32];
  graft_runtime *rt = traced_runtime(2, path);
  enum { NIT = 7 };
  graft_tensor *in[2], *out[1] = {NULL};
  power_inputs(in, 1.5, NIT);
  graft_function *f = tu_function(rt, "power", power, NULL, 2, 1, NULL);
  tu_assert_call_ok(f, 2, in, 1, out);
  assert_true(tu_get(out[0], 0) == pow(1.5, NIT)); /* exact: 1.5^7 needs few bits */
  graft_function_destroy(f);
  graft_runtime_destroy(rt); /* closes the trace */
  const char *text = trace_text(path);
  /* every iteration of the body (0..NIT-1) and of the cond (0..NIT: the
   * last one says stop), and no other */
  uint8_t body[NIT + 2] = {0}, cond[NIT + 2] = {0};
  assert_int_equal(iterations_named(text, "[while_loop.body #", body, NIT + 2), NIT - 1);
  assert_int_equal(iterations_named(text, "[while_loop.cond #", cond, NIT + 2), NIT);
  for (int k = 0; k < NIT; k++)
    if (!body[k] || !cond[k]) fail_msg("iteration %d is not in the trace", k);
  assert_true(cond[NIT]);
  /* a slice's whole name: op, construct and iteration, then the node */
  assert_non_null(strstr(text, "\"name\":\"mul [while_loop.body #2] #"));
  assert_non_null(strstr(text, "\"name\":\"less [while_loop.cond #7] #"));
  tu_destroy_outs(out, 1);
  tu_destroy_outs(in, 2);
}

/* The failing step is the last that runs: the steps after it never start. */
static void test_graft_function_call__failure_stops_the_scan(void **state) {
  (void)state;
  char path[32];
  graft_runtime *rt = traced_runtime(4, path);
  tu_rng r = {14};
  const int64_t xd[3] = {FT, FN, FC}, ld[2] = {FT, FN}, hd[2] = {FN, FC};
  graft_tensor *in[3] = {tu_tensor_rand(&r, F64, 3, xd, -2, 2), tu_tensor_rand(&r, I32, 2, ld, 0, FC - 1),
                         tu_tensor_rand(&r, F64, 2, hd, -1, 1)};
  ((int32_t *)graft_tensor_data(in[1]))[2 * FN] = FC; /* step 2, row 0 */
  graft_variable *v = NULL;
  double zero = 0;
  assert_int_equal(graft_variable_create(NULL, "acc", F64, 0, NULL, &zero, 0, &v), GRAFT_OK);
  fail_ctx c = {v};
  graft_function *f = tu_function(rt, "scan_xent", scan_xent, &c, 3, 2, NULL);
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_status(graft_function_call(f, 3, in, 2, out), GRAFT_EINVAL);
  tu_assert_msg_has(graft_function_errmsg(f), "scan: body, iteration 2: softmax_cross_entropy: label 5");
  assert_null(out[0]);
  assert_null(out[1]);
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
  uint8_t seen[FT] = {0};
  int last = iterations_named(trace_text(path), "[scan.body #", seen, FT); /* (2 if its slices are kept) */
  assert_true(seen[0] && seen[1] && (last == 1 || last == 2));
  graft_variable_destroy(v);
  tu_destroy_outs(in, 3);
}

/* A scan whose body holds a remat: 2 control nodes, 2 body runs a step. */
static graft_status scale(graft_trace *t, int n, graft_value *const *in, int no,
                          graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  out[0] = graft_mul(t, in[0], in[1]);
  return GRAFT_OK;
}

static graft_status scale_step(graft_trace *t, int n, graft_value *const *in, int no,
                               graft_value **out, void *u) {
  (void)n, (void)no, (void)u;
  graft_value *y;
  graft_remat(t, scale, NULL, 2, in, 1, &y);
  out[0] = graft_tanh(t, y);
  out[1] = y;
  return GRAFT_OK;
}

static graft_status scan_remat(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *u) {
  (void)n_in, (void)n_out, (void)u;
  graft_scan(t, scale_step, NULL, 1, &in[0], 1, &in[1], 1, out, NULL);
  return GRAFT_OK;
}

static void test_graft_plan_stats__body_runs_and_ops(void **state) {
  (void)state;
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.sched = "ws";
  o.num_threads = 2;
  o.fusion = "off"; /* one plan node per op: counts that follow from the graph */
  graft_runtime *rt = tu_runtime_from(&o);
  graft_function *f = tu_function(rt, "power", power, NULL, 2, 1, NULL);
  /* n iterations: the cond runs n + 1 times (less: 1 op), the body n times
   * (add, mul: 2 ops; inputs and captures are not ops, and the body's
   * constant 1, a graft_scalar, is traced in the function's trace and
   * captured: filled once a call, not once an iteration).  The counts are
   * the last call's, from one plan. */
  const int ns[] = {7, 3, 0, 7};
  for (size_t k = 0; k < TU_N_OF(ns); k++) {
    graft_tensor *in[2], *out[1] = {NULL};
    tu_assert_call_ok(f, 2, power_inputs(in, 1.25, ns[k]), 1, out);
    assert_true(tu_get(out[0], 0) == pow(1.25, ns[k]));
    graft_plan_stats ps;
    tu_assert_status(graft_function_stats(f, &ps), GRAFT_OK);
    assert_int_equal(ps.plan_count, 1);
    assert_int_equal(ps.control_nodes, 1);
    assert_int_equal(ps.body_runs, 2 * ns[k] + 1);
    assert_int_equal(ps.body_ops, (ns[k] + 1) * 1 + ns[k] * 2);
    tu_destroy_outs(out, 1);
    tu_destroy_outs(in, 2);
  }
  graft_function_destroy(f);
  /* nested: the scan's body and the remat's body each run once a step */
  f = tu_function(rt, "scan_remat", scan_remat, NULL, 2, 2, NULL);
  enum { ST = 5 };
  tu_rng r = {31};
  const int64_t hd[1] = {3}, xd[2] = {ST, 3};
  graft_tensor *in[2] = {tu_tensor_rand(&r, F64, 1, hd, -1, 1), tu_tensor_rand(&r, F64, 2, xd, -1, 1)};
  graft_tensor *out[2] = {NULL, NULL};
  tu_assert_call_ok(f, 2, in, 2, out);
  graft_plan_stats ps;
  tu_assert_status(graft_function_stats(f, &ps), GRAFT_OK);
  assert_int_equal(ps.control_nodes, 2);
  assert_int_equal(ps.body_runs, 2 * ST);
  assert_true(ps.body_ops >= 2 * ST * 1 + ST); /* at least the remat's mul and the step's tanh */
  double h[3];
  for (int i = 0; i < 3; i++) h[i] = tu_get(in[0], i);
  for (int s = 0; s < ST; s++)
    for (int i = 0; i < 3; i++) {
      double y = h[i] * tu_get(in[1], 3 * s + i);
      assert_true(tu_get(out[1], 3 * s + i) == y);
      h[i] = tanh(y);
    }
  tu_assert_close(out[0], h, 3, 1e-15, 0);
  tu_destroy_outs(out, 2);
  tu_destroy_outs(in, 2);
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
}

/* ---- symbolic batch dims ------------------------------------------------------------ */

enum { ET = 5, ED = 3, EH = 4 };

typedef struct rnn_ctx {
  int traces;
  graft_value *W, *U;
} rnn_ctx;

static graft_status rnn_step(graft_trace *t, int n, graft_value *const *in, int no,
                             graft_value **out, void *u) {
  (void)n, (void)no;
  const rnn_ctx *c = u;
  graft_value *z = graft_add(t, graft_matmul(t, in[1], c->W, 0), graft_matmul(t, in[0], c->U, 0));
  out[0] = out[1] = graft_tanh(t, z);
  return GRAFT_OK;
}

/* in: X [ET, B, ED], h0 [B, EH], W [ED, EH], U [EH, EH]; out: hT, ys. */
static graft_status rnn(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                        graft_value **out, void *u) {
  (void)n_in, (void)n_out;
  rnn_ctx *c = u;
  c->traces++;
  c->W = in[2];
  c->U = in[3];
  graft_scan(t, rnn_step, c, 1, &in[1], 1, &in[0], 1, out, NULL);
  return GRAFT_OK;
}

static void test_graft_function_call__scan_with_unknown_batch(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime_of("ws", 2, 0);
  const graft_dtype dts[4] = {F64, F64, F64, F64};
  const int ranks[4] = {3, 2, 2, 2};
  const int64_t sx[3] = {ET, -1, ED}, sh[2] = {-1, EH}, sw[2] = {ED, EH}, su[2] = {EH, EH};
  const int64_t *const shapes[4] = {sx, sh, sw, su};
  graft_signature sig = {4, dts, ranks, shapes};
  rnn_ctx c = {0};
  graft_function *f = tu_function(rt, "rnn", rnn, &c, 4, 2, &sig);
  const int64_t batches[] = {2, 7, 2};
  for (size_t k = 0; k < TU_N_OF(batches); k++) {
    const int64_t B = batches[k], dx[3] = {ET, B, ED}, dh[2] = {B, EH};
    tu_rng r = {(uint64_t)(40 + B)};
    graft_tensor *in[4] = {tu_tensor_rand(&r, F64, 3, dx, -1, 1), tu_tensor_rand(&r, F64, 2, dh, -1, 1),
                           tu_tensor_rand(&r, F64, 2, sw, -0.5, 0.5), tu_tensor_rand(&r, F64, 2, su, -0.5, 0.5)};
    graft_tensor *out[2] = {NULL, NULL};
    tu_assert_call_ok(f, 4, in, 2, out);
    assert_int_equal(graft_tensor_shape(out[1])[1], B);
    /* the hand loop */
    double h[7 * EH], ys[ET * 7 * EH];
    for (int64_t i = 0; i < B * EH; i++) h[i] = tu_get(in[1], i);
    for (int s = 0; s < ET; s++) {
      double z[7 * EH];
      for (int64_t b = 0; b < B; b++)
        for (int j = 0; j < EH; j++) {
          double acc = 0;
          for (int d = 0; d < ED; d++) acc += tu_get(in[0], (s * B + b) * ED + d) * tu_get(in[2], d * EH + j);
          for (int i = 0; i < EH; i++) acc += h[b * EH + i] * tu_get(in[3], i * EH + j);
          z[b * EH + j] = tanh(acc);
        }
      memcpy(h, z, sizeof(double) * (size_t)(B * EH));
      memcpy(ys + s * B * EH, z, sizeof(double) * (size_t)(B * EH));
    }
    tu_assert_close(out[0], h, B * EH, 1e-13, 1e-15);
    tu_assert_close(out[1], ys, ET * B * EH, 1e-13, 1e-15);
    graft_plan_stats ps;
    tu_assert_status(graft_function_stats(f, &ps), GRAFT_OK);
    assert_int_equal(ps.plan_count, k == 0 ? 1 : 2); /* one plan per batch size */
    assert_int_equal(ps.body_runs, ET);
    tu_destroy_outs(out, 2);
    tu_destroy_outs(in, 4);
  }
  assert_int_equal(c.traces, 1);
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_function_call__failure_in_a_scan_body),
      cmocka_unit_test(test_graft_function_call__failure_in_a_cond_branch),
      cmocka_unit_test(test_graft_function_call__failure_in_a_while_body),
      cmocka_unit_test(test_graft_function_call__scan_body_parallel_bitwise),
      cmocka_unit_test(test_graft_function_call__held_team_bitwise),
      cmocka_unit_test(test_graft_function_call__failure_in_a_held_team_body),
      cmocka_unit_test(test_graft_function_call__held_team_not_inside_omp_parallel),
      cmocka_unit_test(test_graft_function_call__chrome_trace_names_iterations),
      cmocka_unit_test(test_graft_function_call__failure_stops_the_scan),
      cmocka_unit_test(test_graft_plan_stats__body_runs_and_ops),
      cmocka_unit_test(test_graft_function_call__scan_with_unknown_batch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
