/* Gradient checking for the grad tests: graft's reverse-mode gradient of a
 * scalar loss against central finite differences.
 *
 * A problem is a loss callback (it builds a rank-0 value from the inputs
 * and may read variables), its input tensors and the variables it reads.
 * gc_analytic traces the loss and graft_gradients of it in ONE trace (the
 * gradients are extra outputs) and returns the loss and the gradient with
 * respect to every float input and every variable read.  gc_numeric
 * compiles a function that returns only the loss and perturbs one element
 * at a time, x + h and x - h (the step actually taken is read back in the
 * input's dtype, so rounding of the perturbed value is accounted for), and
 * returns (L+ - L-) / (x+ - x-).  gc_check compares the two;
 * gc_check_signature does so for several input shapes through one function
 * with a declared (symbolic) signature.  gc_fn_* expose the compiled
 * gradient function itself (other runtimes, stats, repeated calls).
 *
 * For forward mode, gc_fd_directional differences every output of any
 * traced function along a direction (JVPs, HVPs as JVPs of gradients, the
 * columns of Jacobians); tu_runtime_of (testutil.h) and gc_same_bits serve the checks
 * that results are bitwise equal across schedulers and thread counts.
 *
 * Integer inputs (labels) are neither differentiated nor perturbed: their
 * gradient slots stay NULL.
 *
 * Header-only (static inline); include after <cmocka.h> and testutil.h. */
#ifndef GRAFT_TEST_GRADCHECK_H
#define GRAFT_TEST_GRADCHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

enum { GC_MAX_IN = 8, GC_MAX_VARS = 8 };

/* Build the loss (a rank-0 float value) from the n_in input values; read
 * variables with graft_read.  Return NULL or poison after recording an
 * error on t. */
typedef graft_value *(*gc_loss_fn)(graft_trace *t, int n_in, graft_value *const *in,
                                   void *user);

typedef struct gc_problem {
  gc_loss_fn loss;
  void *user;
  int n_in;
  graft_tensor *const *in;        /* n_in tensors (may include i32 ones) */
  int n_var;
  graft_variable *const *vars;    /* n_var variables the loss reads */
} gc_problem;

/* Tolerances of a comparison: |got - want| <= rtol * |want| + atol. */
typedef struct gc_tol {
  double rtol, atol;
} gc_tol;

/* Central-difference defaults (float64). */
#define GC_STEP 1e-6
#define GC_FD_TOL ((gc_tol){1e-6, 1e-8})

static inline int gc_is_float(graft_dtype dt) { return dt == GRAFT_F32 || dt == GRAFT_F64; }

/* ---- the traced functions ------------------------------------------------ */

typedef struct gc_ctx_ {
  const gc_problem *p;
  int with_grads;
} gc_ctx_;

static inline graft_value *gc_loss_checked_(graft_trace *t, const gc_problem *p,
                                            graft_value *const *in) {
  graft_value *L = p->loss(t, p->n_in, in, p->user);
  if (!L || graft_value_is_poison(L)) {
    if (graft_trace_status(t) == GRAFT_OK)
      graft_trace_fail(t, GRAFT_EINVAL, "gradcheck: the loss callback returned no value");
    return NULL;
  }
  if (graft_value_rank(L) != 0) {
    graft_trace_fail(t, GRAFT_ESHAPE, "gradcheck: the loss has rank %d, not 0",
                     graft_value_rank(L));
    return NULL;
  }
  return L;
}

/* Outputs: the loss, then the gradient of every float input, then of every
 * variable read (with_grads), or the loss alone. */
static inline graft_status gc_trace_(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                     graft_value **out, void *user) {
  const gc_ctx_ *c = user;
  const gc_problem *p = c->p;
  (void)n_in;
  graft_value *L = gc_loss_checked_(t, p, in);
  if (!L) return graft_trace_status(t);
  out[0] = L;
  if (!c->with_grads) return GRAFT_OK;
  graft_value *xs[GC_MAX_IN + GC_MAX_VARS];
  int n_x = 0;
  for (int i = 0; i < p->n_in; i++)
    if (gc_is_float(graft_value_dtype(in[i]))) xs[n_x++] = in[i];
  for (int k = 0; k < p->n_var; k++) xs[n_x++] = graft_read(t, p->vars[k]);
  if (n_x + 1 != n_out)
    return graft_trace_fail(t, GRAFT_EINTERNAL, "gradcheck: %d outputs for %d gradients", n_out,
                            n_x);
  graft_status st =
      graft_gradients(t, 1, &L, NULL, n_x, xs, GRAFT_UNCONNECTED_ZERO, out + 1);
  return st;
}

static inline int gc_n_float_in_(const gc_problem *p) {
  int n = 0;
  for (int i = 0; i < p->n_in; i++) n += gc_is_float(graft_tensor_dtype(p->in[i]));
  return n;
}

static inline void gc_check_problem_(const gc_problem *p) {
  assert_true(p->n_in >= 0 && p->n_in <= GC_MAX_IN);
  assert_true(p->n_var >= 0 && p->n_var <= GC_MAX_VARS);
}

/* ---- graft's gradient ------------------------------------------------------ */

/* A compiled gradcheck function of a problem: outputs the loss, then (with
 * grads) the gradient of every float input and of every variable.  The
 * problem must outlive it. */
typedef struct gc_fn {
  gc_ctx_ ctx;
  graft_function *f;
  int n_out;
} gc_fn;

/* sig: an optional declared signature (NULL: none). */
static inline void gc_fn_open(gc_fn *g, graft_runtime *rt, const gc_problem *p, int with_grads,
                              const graft_signature *sig) {
  gc_check_problem_(p);
  g->ctx.p = p;
  g->ctx.with_grads = with_grads;
  g->n_out = with_grads ? 1 + gc_n_float_in_(p) + p->n_var : 1;
  g->f = tu_function(rt, with_grads ? "gradcheck_grad" : "gradcheck_loss", gc_trace_, &g->ctx,
                     p->n_in, g->n_out, sig);
}

static inline void gc_fn_close(gc_fn *g) {
  graft_function_destroy(g->f);
  g->f = NULL;
}

/* Call g on in (p->n_in tensors); out: g->n_out slots (NULL: allocated). */
static inline void gc_fn_call(gc_fn *g, graft_tensor *const *in, graft_tensor **out,
                              const char *ctx) {
  graft_status st = graft_function_call(g->f, g->ctx.p->n_in, in, g->n_out, out);
  if (st != GRAFT_OK)
    fail_msg("%s: call failed: %s: %s", ctx, graft_status_name(st), graft_function_errmsg(g->f));
}

/* Split the outputs of a gradient call on in[] into *loss, gin[] (n_in
 * slots: NULL for integer inputs) and gvar[] (n_var slots), checking each
 * gradient's dtype and shape against its input. */
static inline void gc_split_(const gc_problem *p, graft_tensor *const *in, graft_tensor **out,
                             double *loss, graft_tensor **gin, graft_tensor **gvar,
                             const char *ctx) {
  if (loss) *loss = tu_get(out[0], 0);
  graft_tensor_destroy(out[0]);
  int o = 1;
  for (int i = 0; i < p->n_in; i++) {
    gin[i] = NULL;
    if (!gc_is_float(graft_tensor_dtype(in[i]))) continue;
    gin[i] = out[o++];
    char what[400];
    snprintf(what, sizeof what, "%.300s: gradient of input %d", ctx, i);
    tu_assert_tensor(gin[i], graft_tensor_dtype(in[i]), graft_tensor_rank(in[i]),
                     graft_tensor_shape(in[i]), what);
  }
  for (int k = 0; k < p->n_var; k++) {
    const graft_tensor *v = graft_variable_value(p->vars[k]);
    gvar[k] = out[o++];
    char what[400];
    snprintf(what, sizeof what, "%.300s: gradient of variable %s", ctx,
             graft_variable_name(p->vars[k]));
    tu_assert_tensor(gvar[k], graft_tensor_dtype(v), graft_tensor_rank(v), graft_tensor_shape(v),
                     what);
  }
}

/* Trace the loss and its gradients in one function and call it once on
 * p->in.  *loss (may be NULL) receives the loss; gin[i] (n_in slots) the
 * gradient of float input i (NULL for integer inputs); gvar[k] (n_var
 * slots, may be NULL when n_var is 0) the gradient of variable k.  Each
 * gradient must have its input's dtype and shape.  The caller frees the
 * tensors (gc_free).  ctx names the case in failure messages. */
static inline void gc_analytic(graft_runtime *rt, const gc_problem *p, double *loss,
                               graft_tensor **gin, graft_tensor **gvar, const char *ctx) {
  gc_fn g;
  gc_fn_open(&g, rt, p, 1, NULL);
  graft_tensor *out[1 + GC_MAX_IN + GC_MAX_VARS] = {0};
  gc_fn_call(&g, p->in, out, ctx);
  gc_fn_close(&g);
  gc_split_(p, p->in, out, loss, gin, gvar, ctx);
}

/* ---- finite differences ---------------------------------------------------- */

/* (L(x+) - L(x-)) / (x+ - x-) for every element of t, which the function f
 * reads (an input tensor, modified in place and restored), into fd (f64,
 * t's shape).  set: NULL for an input, else the variable t mirrors (the
 * perturbed value is copied into it before each call). */
static inline void gc_fd_tensor_(graft_function *f, const gc_problem *p, graft_tensor **in,
                                 graft_tensor **out, graft_tensor *t, graft_variable *set,
                                 double step, graft_tensor *fd, const char *ctx) {
  int64_t n = graft_tensor_numel(t);
  for (int64_t j = 0; j < n; j++) {
    double x0 = tu_get(t, j), L[2], xs[2];
    for (int s = 0; s < 2; s++) {
      tu_set(t, j, s ? x0 - step : x0 + step);
      xs[s] = tu_get(t, j);
      if (set) assert_int_equal(graft_variable_set(set, t), GRAFT_OK);
      graft_status st = graft_function_call(f, p->n_in, in, 1, out);
      if (st != GRAFT_OK)
        fail_msg("%s: loss call failed: %s: %s", ctx, graft_status_name(st),
                 graft_function_errmsg(f));
      L[s] = tu_get(out[0], 0);
    }
    tu_set(t, j, x0);
    if (set) assert_int_equal(graft_variable_set(set, t), GRAFT_OK);
    if (xs[0] == xs[1]) fail_msg("%s: step %g vanishes at %.17g", ctx, step, x0);
    tu_set(fd, j, (L[0] - L[1]) / (xs[0] - xs[1]));
  }
}

static inline graft_tensor *gc_copy(const graft_tensor *t) {
  graft_tensor *c = tu_tensor_from(graft_tensor_dtype(t), graft_tensor_rank(t),
                                   graft_tensor_shape(t), NULL);
  memcpy(graft_tensor_data(c), graft_tensor_data(t),
         (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t)));
  return c;
}

/* Central differences of the loss with step h for every float input
 * (fin[i], f64 tensors of the input's shape; NULL for integer inputs) and
 * every variable (fvar[k]).  Inputs and variables are left as they were. */
static inline void gc_numeric(graft_runtime *rt, const gc_problem *p, double step,
                              graft_tensor **fin, graft_tensor **fvar, const char *ctx) {
  gc_fn g;
  gc_fn_open(&g, rt, p, 0, NULL);
  graft_function *f = g.f;
  graft_tensor *in[GC_MAX_IN], *out[1] = {NULL};
  for (int i = 0; i < p->n_in; i++) in[i] = gc_copy(p->in[i]);
  for (int i = 0; i < p->n_in; i++) {
    fin[i] = NULL;
    if (!gc_is_float(graft_tensor_dtype(in[i]))) continue;
    fin[i] = tu_tensor_from(GRAFT_F64, graft_tensor_rank(in[i]), graft_tensor_shape(in[i]), NULL);
    char what[400];
    snprintf(what, sizeof what, "%.300s: input %d", ctx, i);
    gc_fd_tensor_(f, p, in, out, in[i], NULL, step, fin[i], what);
  }
  for (int k = 0; k < p->n_var; k++) {
    graft_tensor *v = gc_copy(graft_variable_value(p->vars[k]));
    fvar[k] = tu_tensor_from(GRAFT_F64, graft_tensor_rank(v), graft_tensor_shape(v), NULL);
    char what[400];
    snprintf(what, sizeof what, "%.300s: variable %s", ctx, graft_variable_name(p->vars[k]));
    gc_fd_tensor_(f, p, in, out, v, p->vars[k], step, fvar[k], what);
    graft_tensor_destroy(v);
  }
  graft_tensor_destroy(out[0]);
  for (int i = 0; i < p->n_in; i++) graft_tensor_destroy(in[i]);
  gc_fn_close(&g);
}

/* ---- comparisons ----------------------------------------------------------- */

/* got and want (same numel; either may be NULL only if both are) agree
 * elementwise within tol; the first miss fails the test naming ctx, what
 * and the element. */
static inline void gc_assert_close_(const graft_tensor *got, const graft_tensor *want, gc_tol tol,
                                    const char *ctx, const char *what, const char *file,
                                    int line) {
  if (!got || !want) {
    if (got != want)
      tu_fail_at_(file, line, "%s: %s: one gradient is NULL, the other is not", ctx, what);
    return;
  }
  if (graft_tensor_numel(got) != graft_tensor_numel(want))
    tu_fail_at_(file, line, "%s: %s: %lld elements, want %lld", ctx, what,
                (long long)graft_tensor_numel(got), (long long)graft_tensor_numel(want));
  for (int64_t j = 0; j < graft_tensor_numel(got); j++) {
    double g = tu_get(got, j), w = tu_get(want, j);
    if (!isfinite(g) || !isfinite(w) || fabs(g - w) > tol.rtol * fabs(w) + tol.atol)
      tu_fail_at_(file, line, "%s: %s element %lld: got %.17g want %.17g (rtol %g atol %g)", ctx,
                  what, (long long)j, g, w, tol.rtol, tol.atol);
  }
}
#define gc_assert_close(got, want, tol, ctx, what) \
  gc_assert_close_((got), (want), (tol), (ctx), (what), __FILE__, __LINE__)

/* Compare gradient sets a and b of problem p (n_in input slots, n_var
 * variable slots). */
static inline void gc_assert_sets_close_(const gc_problem *p, graft_tensor *const *ain,
                                         graft_tensor *const *avar, graft_tensor *const *bin,
                                         graft_tensor *const *bvar, gc_tol tol, const char *ctx,
                                         const char *file, int line) {
  char what[400];
  for (int i = 0; i < p->n_in; i++) {
    snprintf(what, sizeof what, "input %d", i);
    gc_assert_close_(ain[i], bin[i], tol, ctx, what, file, line);
  }
  for (int k = 0; k < p->n_var; k++) {
    snprintf(what, sizeof what, "variable %s", graft_variable_name(p->vars[k]));
    gc_assert_close_(avar[k], bvar[k], tol, ctx, what, file, line);
  }
}
#define gc_assert_sets_close(p, ain, avar, bin, bvar, tol, ctx) \
  gc_assert_sets_close_((p), (ain), (avar), (bin), (bvar), (tol), (ctx), __FILE__, __LINE__)

static inline void gc_free(graft_tensor **t, int n) { tu_destroy_outs(t, n); }

/* graft's gradient of p against central differences with step h. */
static inline void gc_check(graft_runtime *rt, const gc_problem *p, double step, gc_tol tol,
                            const char *ctx) {
  graft_tensor *ain[GC_MAX_IN], *avar[GC_MAX_VARS], *nin[GC_MAX_IN], *nvar[GC_MAX_VARS];
  gc_analytic(rt, p, NULL, ain, avar, ctx);
  gc_numeric(rt, p, step, nin, nvar, ctx);
  gc_assert_sets_close(p, ain, avar, nin, nvar, tol, ctx);
  gc_free(ain, p->n_in);
  gc_free(nin, p->n_in);
  gc_free(avar, p->n_var);
  gc_free(nvar, p->n_var);
}

/* One gradient function with the declared signature sig, called on the
 * inputs of each of the n problems p[0..n) (same loss, user and variables;
 * inputs of different concrete shapes matching sig): each call's gradients
 * against central differences, and the callback traced once in all. */
static inline void gc_check_signature(graft_runtime *rt, const graft_signature *sig, int n,
                                      const gc_problem *p, double step, gc_tol tol,
                                      const char *ctx) {
  gc_fn g;
  gc_fn_open(&g, rt, &p[0], 1, sig);
  for (int b = 0; b < n; b++) {
    char what[400];
    snprintf(what, sizeof what, "%.300s: call %d (dim 0 of input 0 is %lld)", ctx, b + 1,
             (long long)(graft_tensor_rank(p[b].in[0]) ? graft_tensor_shape(p[b].in[0])[0] : 0));
    graft_tensor *out[1 + GC_MAX_IN + GC_MAX_VARS] = {0};
    graft_tensor *gin[GC_MAX_IN], *gvar[GC_MAX_VARS], *fin[GC_MAX_IN], *fvar[GC_MAX_VARS];
    gc_fn_call(&g, p[b].in, out, what);
    gc_split_(&p[b], p[b].in, out, NULL, gin, gvar, what);
    gc_numeric(rt, &p[b], step, fin, fvar, what);
    gc_assert_sets_close(&p[b], gin, gvar, fin, fvar, tol, what);
    gc_free(gin, p[b].n_in);
    gc_free(gvar, p[b].n_var);
    gc_free(fin, p[b].n_in);
    gc_free(fvar, p[b].n_var);
  }
  if (graft_function_trace_count(g.f) != 1)
    fail_msg("%s: traced %d times, want once", ctx, graft_function_trace_count(g.f));
  gc_fn_close(&g);
}

/* Largest |element| over the gradients of a set (a scale for f32 floors). */
static inline double gc_max_abs(graft_tensor *const *t, int n) {
  double m = 0.0;
  for (int i = 0; i < n; i++)
    for (int64_t j = 0; t[i] && j < graft_tensor_numel(t[i]); j++)
      m = fmax(m, fabs(tu_get(t[i], j)));
  return m;
}

/* ---- directional differences (forward mode) ----------------------------------- */

enum { GC_MAX_OUT = 16 };

/* Central differences of every output of a traced function along a
 * direction: fd[k] (f64, output k's shape) = (F_k(x + h d) - F_k(x - h d)) /
 * 2h, where fn (n_in inputs, n_out float outputs, user) is F and dir[i] is
 * input i's share of d (in[i]'s shape; NULL: input i is held fixed, as
 * integer inputs must be).  Every perturbed input moves at once, rounded to
 * its dtype; the differences divide by the nominal 2h, so that rounding adds
 * about eps |x| / (h |d|) relative error (none where x +- h d is exact, e.g.
 * dyadic x and d).  in is not modified.  The caller frees fd (gc_free). */
static inline void gc_fd_directional(graft_runtime *rt, graft_trace_fn fn, void *user, int n_in,
                                     graft_tensor *const *in, graft_tensor *const *dir,
                                     int n_out, double step, graft_tensor **fd, const char *ctx) {
  assert_true(n_in >= 0 && n_in <= GC_MAX_IN + GC_MAX_VARS);
  assert_true(n_out >= 1 && n_out <= GC_MAX_OUT);
  graft_function *f = tu_function(rt, "gradcheck_directional", fn, user, n_in, n_out, NULL);
  graft_tensor *x[2][GC_MAX_IN + GC_MAX_VARS], *y[2][GC_MAX_OUT];
  for (int s = 0; s < 2; s++) {
    for (int i = 0; i < n_in; i++) {
      x[s][i] = gc_copy(in[i]);
      if (!dir || !dir[i]) continue;
      if (graft_tensor_numel(dir[i]) != graft_tensor_numel(in[i]))
        fail_msg("%s: direction %d has %lld elements, input %d has %lld", ctx, i,
                 (long long)graft_tensor_numel(dir[i]), i, (long long)graft_tensor_numel(in[i]));
      for (int64_t j = 0; j < graft_tensor_numel(in[i]); j++)
        tu_set(x[s][i], j, tu_get(in[i], j) + (s ? -step : step) * tu_get(dir[i], j));
    }
    for (int k = 0; k < n_out; k++) y[s][k] = NULL;
    graft_status st = graft_function_call(f, n_in, x[s], n_out, y[s]);
    if (st != GRAFT_OK)
      fail_msg("%s: call at x %c h d failed: %s: %s", ctx, s ? '-' : '+', graft_status_name(st),
               graft_function_errmsg(f));
  }
  for (int k = 0; k < n_out; k++) {
    if (!gc_is_float(graft_tensor_dtype(y[0][k])))
      fail_msg("%s: output %d is not float", ctx, k);
    fd[k] = tu_tensor_from(GRAFT_F64, graft_tensor_rank(y[0][k]), graft_tensor_shape(y[0][k]), NULL);
    for (int64_t j = 0; j < graft_tensor_numel(fd[k]); j++)
      tu_set(fd[k], j, (tu_get(y[0][k], j) - tu_get(y[1][k], j)) / (2.0 * step));
  }
  for (int s = 0; s < 2; s++) {
    gc_free(x[s], n_in);
    gc_free(y[s], n_out);
  }
  graft_function_destroy(f);
}

/* ---- runtimes and bitwise comparison ---------------------------------------------- */

/* a and b have one dtype, one shape and the same bytes. */
static inline int gc_same_bits(const graft_tensor *a, const graft_tensor *b) {
  if (graft_tensor_dtype(a) != graft_tensor_dtype(b) || graft_tensor_rank(a) != graft_tensor_rank(b))
    return 0;
  for (int i = 0; i < graft_tensor_rank(a); i++)
    if (graft_tensor_shape(a)[i] != graft_tensor_shape(b)[i]) return 0;
  size_t n = (size_t)graft_tensor_numel(a) * graft_dtype_size(graft_tensor_dtype(a));
  return memcmp(graft_tensor_data(a), graft_tensor_data(b), n) == 0;
}

/* Ops that see the symbolic dim of x [-1, 4] (c [4]): a mean and a
 * logsumexp over it, a reshape to [-1], a matmul contracting it, a softmax
 * along it, a slice to its end, a max over it, broadcasting against it.
 * Returns the loss; *vec (may be NULL) gets a [-1, 4] term. */
static inline graft_value *gc_sym_loss(graft_trace *t, graft_value *x, graft_value *c,
                                       graft_value **vec) {
  const int ax0[] = {0};
  const int64_t flat[] = {-1}, begin[] = {1, 0}, size[] = {-1, 2};
  graft_value *terms[] = {
      graft_mul(t, c, graft_reduce_mean(t, graft_square(t, x), 1, ax0, 0)),
      graft_logsumexp(t, x, 1, ax0, 1),
      graft_sin(t, graft_reshape(t, x, 1, flat)),
      graft_matmul(t, graft_tanh(t, x), x, GRAFT_TRANS_A),
      graft_mul(t, graft_softmax(t, x, 0), x),
      graft_square(t, graft_slice(t, x, begin, size)),
      graft_reduce_max(t, x, 1, ax0, 0),
      graft_div(t, x, graft_add(t, graft_square(t, c), graft_scalar(t, GRAFT_F64, 1))),
  };
  if (vec) *vec = terms[4];
  graft_value *L = NULL;
  for (size_t k = 0; k < TU_N_OF(terms); k++) {
    graft_value *s = graft_reduce_sum(t, terms[k], 0, NULL, 0);
    L = L ? graft_add(t, L, s) : s;
  }
  return L;
}

#endif /* GRAFT_TEST_GRADCHECK_H */
