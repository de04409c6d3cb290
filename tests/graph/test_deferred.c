/* Deferred modules: a Gamma from trainable mean and variance and a Normal
 * from (scaled_loc, log_scale), each log_prob and its gradient against a
 * closed form written here and against central finite differences; a
 * deferred slice of the deferred Normal (nested: its walks hold exactly the
 * Normal's 2 trainable variables, and its gradients reach them); derive
 * traced once per trace however often (and however nested) a module is
 * used, and again after an assignment in the same trace; assignments
 * between calls (graft_variable_set, or an assign in a call) seen by the
 * next call without a retrace; every refusal of graft_deferred_create and
 * graft_deferred_params with its status and message, changing nothing;
 * creation under allocation failure; reference counts (the ASan build
 * checks that nothing leaks and nothing is used after it is freed); one
 * deferred module traced from two threads at once. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "graft/checkpoint.h"
#include "graft/optim.h"
#include "graph/module_int.h"
#include "testutil.h"

TU_RUNTIME_GROUP();

/* ---- helpers -------------------------------------------------------------- */

static graft_module *make_module(graft_module *parent, const char *name) {
  graft_module *m = NULL;
  graft_status st = graft_module_create(parent, name, &m);
  if (st) fail_msg("graft_module_create(%s): %s: %s", name, graft_status_name(st), graft_last_errmsg());
  return m;
}

/* An f64 variable of owner holding vals[0..n) (rank 0 when n is 0: one value). */
static graft_variable *make_var(graft_module *owner, const char *name, int n, const double *vals,
                                unsigned flags) {
  const int64_t shape[1] = {n};
  graft_variable *v = NULL;
  graft_status st = graft_variable_create(owner, name, GRAFT_F64, n ? 1 : 0, shape, vals, flags, &v);
  if (st) fail_msg("graft_variable_create(%s): %s: %s", name, graft_status_name(st), graft_last_errmsg());
  return v;
}

static graft_module *make_deferred(graft_module *parent, const char *name, int n_vars,
                                   graft_variable *const *vars, int n_params, graft_derive_fn derive,
                                   void *user) {
  graft_module *m = NULL;
  graft_status st = graft_deferred_create(parent, name, n_vars, vars, n_params, derive, user, &m);
  if (st) fail_msg("graft_deferred_create(%s): %s: %s", name, graft_status_name(st), graft_last_errmsg());
  assert_non_null(m);
  return m;
}

static double var_get(const graft_variable *v, int64_t i) { return tu_get(graft_variable_value(v), i); }

/* v := vals (v's shape), by graft_variable_set. */
static void var_set(graft_variable *v, const double *vals) {
  const graft_tensor *cur = graft_variable_value(v);
  graft_tensor *src = tu_tensor_from(GRAFT_F64, graft_tensor_rank(cur), graft_tensor_shape(cur), vals);
  tu_assert_status(graft_variable_set(v, src), GRAFT_OK);
  graft_tensor_destroy(src);
}

/* A rank-0 (n 0) or [n] f64 input. */
static graft_tensor *input_of(int n, const double *vals) {
  const int64_t shape[1] = {n};
  return tu_tensor_from(GRAFT_F64, n ? 1 : 0, shape, vals);
}

/* Call f on in and return its outputs (n_out of them) in out. */
static void call(graft_function *f, graft_tensor *in, int n_out, graft_tensor **out) {
  for (int i = 0; i < n_out; i++) out[i] = NULL;
  tu_assert_call_ok(f, in ? 1 : 0, &in, n_out, out);
}

/* The paths of a flatten, one per line. */
typedef struct paths {
  char text[4096];
  size_t len;
} paths;

static graft_status collect_path(const char *path, graft_variable *v, void *user) {
  (void)v;
  paths *p = user;
  int w = snprintf(p->text + p->len, sizeof p->text - p->len, "%s\n", path);
  assert_true(w > 0 && (size_t)w < sizeof p->text - p->len);
  p->len += (size_t)w;
  return GRAFT_OK;
}

static void assert_paths(const graft_module *m, const char *want) {
  paths p;
  memset(&p, 0, sizeof p);
  tu_assert_status(graft_module_flatten(m, collect_path, &p), GRAFT_OK);
  assert_string_equal(p.text, want);
}

/* The trainable (trainable != 0) or all variables of m are want[0..n). */
static void assert_vars(const graft_module *m, int trainable, int n, graft_variable *const *want) {
  graft_variable *got[16];
  int64_t count = -1;
  tu_assert_status(trainable ? graft_module_trainable_variables(m, 16, got, &count)
                             : graft_module_variables(m, 16, got, &count), GRAFT_OK);
  assert_int_equal(count, n);
  for (int i = 0; i < n; i++) assert_ptr_equal(got[i], want[i]);
}

/* ---- closed forms --------------------------------------------------------- */

/* digamma(x) for x > 0: the recurrence psi(x) = psi(x + 1) - 1/x up to
 * x >= 10, then the asymptotic series (its first omitted term,
 * 691 / (32760 x^12), is below 3e-14 there). */
static double digamma_ref(double x) {
  double r = 0;
  for (; x < 10; x += 1) r -= 1 / x;
  double f = 1 / (x * x);
  return r + log(x) - 0.5 / x -
         f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f / 132))));
}

/* log Gamma(x; a, b) with a = mu^2 / v, b = mu / v, and its partials in mu
 * and v. */
static void gamma_ref(double mu, double v, double x, double *lp, double *dmu, double *dv) {
  double a = mu * mu / v, b = mu / v;
  *lp = a * log(b) + (a - 1) * log(x) - b * x - lgamma(a);
  double da = log(b) + log(x) - digamma_ref(a), db = a / b - x;
  *dmu = da * 2 * mu / v + db / v;
  *dv = -da * mu * mu / (v * v) - db * mu / (v * v);
}

/* sum over i in [lo, hi) of log Normal(x[i - lo]; 5 s[i], exp(l[i])), and
 * its partials in s and l (zero outside [lo, hi)). */
static double normal_ref(const double *s, const double *l, const double *x, int lo, int hi,
                         double *ds, double *dl) {
  double lp = 0;
  for (int i = 0; i < 3; i++) ds[i] = dl[i] = 0;
  for (int i = lo; i < hi; i++) {
    double loc = 5 * s[i], scale = exp(l[i]), z = (x[i - lo] - loc) / scale;
    lp += -0.5 * z * z - log(scale) - 0.5 * log(2 * M_PI);
    ds[i] = 5 * z / scale;        /* d/dloc = (x - loc) / scale^2 */
    dl[i] = z * z - 1;            /* scale * d/dscale = z^2 - 1 */
  }
  return lp;
}

/* ---- the Gamma -------------------------------------------------------------- */

typedef struct gamma_model {
  graft_module *model, *gamma;
  graft_variable *mean, *variance;
  int derives;              /* times the derive ran */
  int same;                 /* the trace's second use got the first's handles */
  int use_twice;
} gamma_model;

/* concentration = mean^2 / variance, rate = mean / variance. */
static graft_status gamma_derive(graft_trace *t, graft_module *m, int n, graft_value **p, void *user) {
  gamma_model *g = user;
  assert_ptr_equal(m, g->gamma);
  assert_int_equal(n, 2);
  g->derives++;
  graft_value *mu = graft_read(t, g->mean), *v = graft_read(t, g->variance);
  p[0] = graft_div(t, graft_square(t, mu), v);
  p[1] = graft_div(t, mu, v);
  return GRAFT_OK;
}

static graft_value *gamma_log_prob(graft_trace *t, graft_value *const *ab, graft_value *x) {
  graft_value *a = ab[0], *b = ab[1], *one = graft_scalar(t, GRAFT_F64, 1);
  graft_value *lp = graft_mul(t, a, graft_log(t, b));
  lp = graft_add(t, lp, graft_mul(t, graft_sub(t, a, one), graft_log(t, x)));
  lp = graft_sub(t, lp, graft_mul(t, b, x));
  return graft_sub(t, lp, graft_lgamma(t, a));
}

/* in: x; out: log_prob(x), its gradient in mean and in variance. */
static graft_status gamma_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  gamma_model *g = user;
  graft_value *ab[2], *again[2];
  graft_status st = graft_deferred_params(t, g->gamma, 2, ab);
  if (st) return st;
  out[0] = gamma_log_prob(t, ab, in[0]);
  if (g->use_twice) {
    /* A second use (another method of the distribution) shares the values. */
    st = graft_deferred_params(t, g->gamma, 2, again);
    if (st) return st;
    g->same = again[0] == ab[0] && again[1] == ab[1];
    out[0] = graft_mul(t, graft_scalar(t, GRAFT_F64, 0.5),
                       graft_add(t, out[0], gamma_log_prob(t, again, in[0])));
  }
  graft_value *xs[2] = {graft_read(t, g->mean), graft_read(t, g->variance)};
  return graft_gradients(t, 1, out, NULL, 2, xs, GRAFT_UNCONNECTED_ZERO, out + 1);
}

static void gamma_setup(gamma_model *g, double mean, double variance) {
  memset(g, 0, sizeof *g);
  g->model = make_module(NULL, "model");
  g->mean = make_var(g->model, "mean", 0, &mean, GRAFT_VAR_TRAINABLE);
  g->variance = make_var(g->model, "variance", 0, &variance, GRAFT_VAR_TRAINABLE);
  graft_variable *vars[2] = {g->mean, g->variance};
  g->gamma = make_deferred(g->model, "gamma", 2, vars, 2, gamma_derive, g);
}

/* log_prob(x) and its gradient from f, at the variables' current values. */
static void gamma_eval(graft_function *f, double x, double got[3]) {
  graft_tensor *in = input_of(0, &x), *out[3];
  call(f, in, 3, out);
  for (int i = 0; i < 3; i++) got[i] = tu_get(out[i], 0);
  tu_destroy_outs(out, 3);
  graft_tensor_destroy(in);
}

static void test_graft_deferred_params__gamma_log_prob_and_gradient(void **state) {
  (void)state;
  const double mean = 3, variance = 2, x = 5, h = 1e-6;
  gamma_model g;
  gamma_setup(&g, mean, variance);
  graft_function *f = tu_function(g_rt, "gamma_lp", gamma_trace, &g, 1, 3, NULL);
  double got[3], want[3];
  gamma_eval(f, x, got);
  gamma_ref(mean, variance, x, &want[0], &want[1], &want[2]);
  for (int i = 0; i < 3; i++)
    if (!tu_close(got[i], want[i], 1e-12, 1e-12)) fail_msg("output %d: %.17g, closed form %.17g", i, got[i], want[i]);
  /* Central differences of graft's own log_prob: each step is a
   * graft_variable_set and a call of the same function (no retrace). */
  graft_variable *vars[2] = {g.mean, g.variance};
  const double at[2] = {mean, variance};
  for (int k = 0; k < 2; k++) {
    double plus[3], minus[3], v = at[k] + h;
    var_set(vars[k], &v);
    gamma_eval(f, x, plus);
    v = at[k] - h;
    var_set(vars[k], &v);
    gamma_eval(f, x, minus);
    var_set(vars[k], &at[k]);
    double fd = (plus[0] - minus[0]) / (2 * h);
    if (!tu_close(got[1 + k], fd, 1e-6, 1e-9))
      fail_msg("d log_prob / d %s: %.17g, central difference %.17g", k ? "variance" : "mean", got[1 + k], fd);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  assert_int_equal(g.derives, 1);
  graft_function_destroy(f);
  graft_module_destroy(g.model);
}

/* ---- the Normal and a deferred slice of it ---------------------------------- */

typedef struct normal_model {
  graft_variable *scaled_loc, *log_scale;  /* [3], trainable, the caller's */
  graft_module *normal;                    /* (5 scaled_loc, exp(log_scale)) */
  graft_module *slice;                     /* elements 1 and 2 of the normal's */
  int normal_derives, slice_derives;
  int use_normal_too;                      /* the trace also uses the normal directly */
  int same;
} normal_model;

static graft_status normal_derive(graft_trace *t, graft_module *m, int n, graft_value **p, void *user) {
  (void)m;
  (void)n;
  normal_model *nm = user;
  nm->normal_derives++;
  p[0] = graft_mul(t, graft_scalar(t, GRAFT_F64, 5), graft_read(t, nm->scaled_loc));
  p[1] = graft_exp(t, graft_read(t, nm->log_scale));
  return GRAFT_OK;
}

/* Nested: the slice derives from the normal (attached to it as "base"). */
static graft_status slice_derive(graft_trace *t, graft_module *m, int n, graft_value **p, void *user) {
  (void)m;
  (void)n;
  normal_model *nm = user;
  nm->slice_derives++;
  graft_value *base[2];
  graft_status st = graft_deferred_params(t, nm->normal, 2, base);
  if (st) return st;
  const int64_t begin[1] = {1}, size[1] = {2};
  for (int i = 0; i < 2; i++) p[i] = graft_slice(t, base[i], begin, size);
  return GRAFT_OK;
}

static graft_value *normal_log_prob(graft_trace *t, graft_value *const *ls, graft_value *x) {
  graft_value *z = graft_div(t, graft_sub(t, x, ls[0]), ls[1]);
  graft_value *lp = graft_mul(t, graft_scalar(t, GRAFT_F64, -0.5), graft_square(t, z));
  lp = graft_sub(t, lp, graft_log(t, ls[1]));
  lp = graft_sub(t, lp, graft_scalar(t, GRAFT_F64, 0.5 * log(2 * M_PI)));
  return graft_reduce_sum(t, lp, 0, NULL, 0);
}

/* in: x; out: the summed log_prob of module m (user's normal or slice, by
 * the function's name), its gradient in scaled_loc and in log_scale. */
static graft_status normal_trace_of(graft_trace *t, graft_value *const *in, graft_value **out,
                                    normal_model *nm, graft_module *m) {
  graft_value *ls[2];
  graft_status st = graft_deferred_params(t, m, 2, ls);
  if (st) return st;
  out[0] = normal_log_prob(t, ls, in[0]);
  if (nm->use_normal_too) {
    graft_value *base[2], *again[2];
    if ((st = graft_deferred_params(t, nm->normal, 2, base)) ||
        (st = graft_deferred_params(t, m, 2, again)))
      return st;
    nm->same = again[0] == ls[0] && again[1] == ls[1];
  }
  graft_value *xs[2] = {graft_read(t, nm->scaled_loc), graft_read(t, nm->log_scale)};
  return graft_gradients(t, 1, out, NULL, 2, xs, GRAFT_UNCONNECTED_ZERO, out + 1);
}

static graft_status normal_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  normal_model *nm = user;
  return normal_trace_of(t, in, out, nm, nm->normal);
}

static graft_status slice_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  normal_model *nm = user;
  return normal_trace_of(t, in, out, nm, nm->slice);
}

static const double g_scaled_loc[3] = {0.1, -0.2, 0.3}, g_log_scale[3] = {0.0, -0.5, 0.4};

static void normal_setup(normal_model *nm) {
  memset(nm, 0, sizeof *nm);
  nm->scaled_loc = make_var(NULL, "scaled_loc", 3, g_scaled_loc, GRAFT_VAR_TRAINABLE);
  nm->log_scale = make_var(NULL, "log_scale", 3, g_log_scale, GRAFT_VAR_TRAINABLE);
  graft_variable *vars[2] = {nm->scaled_loc, nm->log_scale};
  nm->normal = make_deferred(NULL, "normal", 2, vars, 2, normal_derive, nm);
  nm->slice = make_deferred(NULL, "normal_slice", 0, NULL, 2, slice_derive, nm);
  tu_assert_status(graft_module_attach(nm->slice, "base", nm->normal), GRAFT_OK);
}

static void normal_teardown(normal_model *nm) {
  graft_module_destroy(nm->slice);
  graft_module_destroy(nm->normal);
  graft_variable_destroy(nm->scaled_loc);
  graft_variable_destroy(nm->log_scale);
}

/* Check f (the log_prob of elements [lo, hi) of the normal at x[0..hi-lo))
 * against the closed form and against central differences in every
 * element of both variables. */
static void check_normal(normal_model *nm, graft_function *f, int lo, int hi, const double *x) {
  const double h = 1e-6;
  graft_tensor *in = input_of(hi - lo, x), *out[3];
  call(f, in, 3, out);
  double ds[3], dl[3], s[3], l[3];
  memcpy(s, g_scaled_loc, sizeof s);
  memcpy(l, g_log_scale, sizeof l);
  double lp = normal_ref(s, l, x, lo, hi, ds, dl);
  assert_true(tu_close(tu_get(out[0], 0), lp, 1e-12, 1e-12));
  tu_assert_close(out[1], ds, 3, 1e-12, 1e-12);
  tu_assert_close(out[2], dl, 3, 1e-12, 1e-12);
  graft_variable *vars[2] = {nm->scaled_loc, nm->log_scale};
  for (int k = 0; k < 2; k++) {
    double *at = k ? l : s;
    for (int i = 0; i < 3; i++) {
      graft_tensor *o[3];
      double lpv[2];
      for (int side = 0; side < 2; side++) {
        at[i] += side ? -h : h;
        var_set(vars[k], at);
        call(f, in, 3, o);
        lpv[side] = tu_get(o[0], 0);
        tu_destroy_outs(o, 3);
        at[i] = (k ? g_log_scale : g_scaled_loc)[i];
      }
      var_set(vars[k], at);
      double fd = (lpv[0] - lpv[1]) / (2 * h), grad = tu_get(out[1 + k], i);
      if (!tu_close(grad, fd, 1e-6, 1e-9))
        fail_msg("d log_prob / d %s[%d]: %.17g, central difference %.17g",
                 k ? "log_scale" : "scaled_loc", i, grad, fd);
    }
  }
  tu_destroy_outs(out, 3);
  graft_tensor_destroy(in);
  assert_int_equal(graft_function_trace_count(f), 1);
}

static void test_graft_deferred_params__normal_log_prob_and_gradient(void **state) {
  (void)state;
  normal_model nm;
  normal_setup(&nm);
  graft_variable *both[2] = {nm.scaled_loc, nm.log_scale};
  assert_vars(nm.normal, 1, 2, both);
  assert_paths(nm.normal, "scaled_loc\nlog_scale\n");
  graft_function *f = tu_function(g_rt, "normal_lp", normal_trace, &nm, 1, 3, NULL);
  const double x[3] = {0.7, -1.2, 2.0};
  check_normal(&nm, f, 0, 3, x);
  assert_int_equal(nm.normal_derives, 1);
  graft_function_destroy(f);
  normal_teardown(&nm);
}

static void test_graft_deferred_params__nested_slice_of_a_normal(void **state) {
  (void)state;
  normal_model nm;
  normal_setup(&nm);
  /* The slice tracks no variable of its own, yet its walks hold the
   * normal's 2 trainable variables (once each), under the normal's path. */
  graft_variable *both[2] = {nm.scaled_loc, nm.log_scale};
  assert_vars(nm.slice, 1, 2, both);
  assert_vars(nm.slice, 0, 2, both);
  assert_paths(nm.slice, "base.scaled_loc\nbase.log_scale\n");
  graft_module *subs[4];
  int64_t n = 0;
  tu_assert_status(graft_module_submodules(nm.slice, 4, subs, &n), GRAFT_OK);
  assert_int_equal(n, 1);
  assert_ptr_equal(subs[0], nm.normal);
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  tu_assert_status(graft_module_print(nm.slice, mem), GRAFT_OK);
  fclose(mem);
  tu_assert_msg_has(text, "base.scaled_loc");
  tu_assert_msg_has(text, "total: 2 paths, 2 variables, 6 parameters (6 trainable)");
  free(text);
  /* Its gradients reach the variables: element 0, which the slice drops,
   * gets 0. */
  graft_function *f = tu_function(g_rt, "slice_lp", slice_trace, &nm, 1, 3, NULL);
  const double x[2] = {-1.2, 2.0};
  check_normal(&nm, f, 1, 3, x);
  assert_int_equal(nm.normal_derives, 1);
  assert_int_equal(nm.slice_derives, 1);
  graft_function_destroy(f);
  normal_teardown(&nm);
}

/* ---- derive once per trace ---------------------------------------------------- */

static void test_graft_deferred_params__derive_traced_once_per_trace(void **state) {
  (void)state;
  gamma_model g;
  gamma_setup(&g, 3, 2);
  g.use_twice = 1;
  graft_function *f = tu_function(g_rt, "gamma_twice", gamma_trace, &g, 1, 3, NULL);
  double got[3], want[3];
  gamma_eval(f, 5, got);
  gamma_ref(3, 2, 5, &want[0], &want[1], &want[2]);
  for (int i = 0; i < 3; i++) assert_true(tu_close(got[i], want[i], 1e-12, 1e-12));
  assert_true(g.same);
  assert_int_equal(g.derives, 1);
  /* Calls do not run it; each new trace does, once. */
  gamma_eval(f, 5, got);
  assert_int_equal(g.derives, 1);
  graft_function *f2 = tu_function(g_rt, "gamma_twice_2", gamma_trace, &g, 1, 3, NULL);
  gamma_eval(f2, 5, got);
  assert_int_equal(g.derives, 2);
  graft_function_destroy(f2);
  graft_function_destroy(f);
  graft_module_destroy(g.model);

  /* Nested: the slice's derive uses the normal, and so does the trace,
   * before and after: each derive runs once. */
  normal_model nm;
  normal_setup(&nm);
  nm.use_normal_too = 1;
  f = tu_function(g_rt, "slice_and_normal", slice_trace, &nm, 1, 3, NULL);
  const double x[2] = {-1.2, 2.0};
  graft_tensor *in = input_of(2, x), *out[3];
  call(f, in, 3, out);
  tu_destroy_outs(out, 3);
  graft_tensor_destroy(in);
  assert_true(nm.same);
  assert_int_equal(nm.normal_derives, 1);
  assert_int_equal(nm.slice_derives, 1);
  graft_function_destroy(f);
  normal_teardown(&nm);
}

/* ---- assignments ----------------------------------------------------------------- */

/* mean += 0.5 (no deferred module in sight). */
static graft_status bump_mean(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in;
  (void)in;
  (void)n_out;
  gamma_model *g = user;
  out[0] = graft_assign_add(t, g->mean, graft_scalar(t, GRAFT_F64, 0.5));
  return graft_trace_status(t);
}

static void test_graft_deferred_params__assignment_between_calls_without_retrace(void **state) {
  (void)state;
  gamma_model g;
  gamma_setup(&g, 3, 2);
  graft_function *f = tu_function(g_rt, "gamma_lp", gamma_trace, &g, 1, 3, NULL);
  graft_function *bump = tu_function(g_rt, "bump", bump_mean, &g, 0, 1, NULL);
  double got[3], want[3];
  gamma_eval(f, 5, got);
  /* graft_variable_set between calls. */
  const double four = 4;
  var_set(g.mean, &four);
  gamma_eval(f, 5, got);
  gamma_ref(4, 2, 5, &want[0], &want[1], &want[2]);
  for (int i = 0; i < 3; i++) assert_true(tu_close(got[i], want[i], 1e-12, 1e-12));
  /* An assignment in another function's call. */
  graft_tensor *o[1];
  call(bump, NULL, 1, o);
  tu_destroy_outs(o, 1);
  assert_true(var_get(g.mean, 0) == 4.5);
  gamma_eval(f, 5, got);
  gamma_ref(4.5, 2, 5, &want[0], &want[1], &want[2]);
  for (int i = 0; i < 3; i++) assert_true(tu_close(got[i], want[i], 1e-12, 1e-12));
  assert_int_equal(graft_function_trace_count(f), 1);
  assert_int_equal(g.derives, 1);
  graft_function_destroy(bump);
  graft_function_destroy(f);
  graft_module_destroy(g.model);
}

/* out: the concentration, mean := mean + 1, the concentration again (from
 * the assigned mean: the second use derives again). */
static graft_status assign_between_uses(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                        graft_value **out, void *user) {
  (void)n_in;
  (void)in;
  (void)n_out;
  gamma_model *g = user;
  graft_value *ab[2], *again[2], *third[2];
  graft_status st = graft_deferred_params(t, g->gamma, 2, ab);
  if (st) return st;
  graft_assign_add(t, g->mean, graft_scalar(t, GRAFT_F64, 1));
  if ((st = graft_deferred_params(t, g->gamma, 2, again)) ||
      (st = graft_deferred_params(t, g->gamma, 2, third)))
    return st;
  g->same = third[0] == again[0] && third[1] == again[1] && again[0] != ab[0];
  out[0] = ab[0];
  out[1] = again[0];
  return GRAFT_OK;
}

static void test_graft_deferred_params__assignment_in_the_trace_derives_again(void **state) {
  (void)state;
  gamma_model g;
  gamma_setup(&g, 3, 2);
  graft_function *f = tu_function(g_rt, "assign_between", assign_between_uses, &g, 0, 2, NULL);
  graft_tensor *out[2];
  call(f, NULL, 2, out);
  assert_true(tu_get(out[0], 0) == 9.0 / 2);
  assert_true(tu_get(out[1], 0) == 16.0 / 2);
  tu_destroy_outs(out, 2);
  assert_true(g.same);
  assert_int_equal(g.derives, 2);
  assert_true(var_get(g.mean, 0) == 4);
  graft_function_destroy(f);
  graft_module_destroy(g.model);
}

/* ---- an optimizer step in the trace ------------------------------------------------- */

typedef struct step_ctx {
  gamma_model *g;
  graft_module *opt;
} step_ctx;

/* in: x; out: the concentration before and after one SGD step on
 * -log_prob(x) (the second use derives again, from the stepped values). */
static graft_status sgd_step_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  step_ctx *s = user;
  gamma_model *g = s->g;
  graft_value *ab[2], *after[2], *grads[2];
  graft_status st = graft_deferred_params(t, g->gamma, 2, ab);
  if (st) return st;
  graft_value *loss = graft_neg(t, gamma_log_prob(t, ab, in[0]));
  graft_value *xs[2] = {graft_read(t, g->mean), graft_read(t, g->variance)};
  if ((st = graft_gradients(t, 1, &loss, NULL, 2, xs, GRAFT_UNCONNECTED_ZERO, grads)) ||
      (st = graft_optimizer_apply(t, s->opt, 2, grads)) ||
      (st = graft_deferred_params(t, g->gamma, 2, after)))
    return st;
  out[0] = ab[0];
  out[1] = after[0];
  return GRAFT_OK;
}

static void test_graft_deferred_params__optimizer_step_in_the_trace(void **state) {
  (void)state;
  gamma_model g;
  gamma_setup(&g, 3, 2);
  graft_variable *vars[2] = {g.mean, g.variance};
  graft_optimizer_desc d = {.kind = GRAFT_OPT_SGD, .lr = 0.1};
  step_ctx s = {&g, NULL};
  tu_assert_status(graft_optimizer_create(g.model, "opt", &d, 2, vars, &s.opt), GRAFT_OK);
  graft_function *f = tu_function(g_rt, "sgd_step", sgd_step_trace, &s, 1, 2, NULL);
  const double x = 5;
  graft_tensor *in = input_of(0, &x), *out[2];
  for (int step = 0; step < 3; step++) {
    double mu = var_get(g.mean, 0), v = var_get(g.variance, 0), lp, dmu, dv;
    gamma_ref(mu, v, x, &lp, &dmu, &dv);
    call(f, in, 2, out);
    double mu2 = mu + 0.1 * dmu, v2 = v + 0.1 * dv;
    assert_true(tu_close(var_get(g.mean, 0), mu2, 1e-12, 0));
    assert_true(tu_close(var_get(g.variance, 0), v2, 1e-12, 0));
    assert_true(tu_close(tu_get(out[0], 0), mu * mu / v, 1e-12, 0));
    assert_true(tu_close(tu_get(out[1], 0), mu2 * mu2 / v2, 1e-12, 0));
    tu_destroy_outs(out, 2);
  }
  graft_tensor_destroy(in);
  assert_int_equal(graft_function_trace_count(f), 1);
  assert_int_equal(g.derives, 2);
  graft_function_destroy(f);
  graft_module_destroy(g.model);
}

/* ---- checkpoints ---------------------------------------------------------------------- */

/* A deferred module's tracked variables are in its checkpoints: a model
 * holding one saves each variable under both paths, and a load through the
 * deferred module alone restores them. */
static void test_graft_module_save__deferred_module_round_trip(void **state) {
  (void)state;
  gamma_model g;
  gamma_setup(&g, 3, 2);
  char dir[] = "/tmp/graft_deferred_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char model_path[64], gamma_path[64];
  snprintf(model_path, sizeof model_path, "%s/model.safetensors", dir);
  snprintf(gamma_path, sizeof gamma_path, "%s/gamma.safetensors", dir);
  tu_assert_status(graft_module_save(g.model, model_path), GRAFT_OK);
  tu_assert_status(graft_module_save(g.gamma, gamma_path), GRAFT_OK);
  const double ten = 10, eleven = 11;
  var_set(g.mean, &ten);
  var_set(g.variance, &eleven);
  tu_assert_status(graft_module_load(g.gamma, gamma_path, 0), GRAFT_OK);
  assert_true(var_get(g.mean, 0) == 3 && var_get(g.variance, 0) == 2);
  var_set(g.mean, &ten);
  graft_load_report r;
  tu_assert_status(graft_module_load_ex(g.model, model_path, 0, &r), GRAFT_OK);
  assert_int_equal(r.loaded, 4); /* mean, variance, gamma.mean, gamma.variance */
  assert_true(var_get(g.mean, 0) == 3);
  /* The deferred module's file lacks the model's own paths. */
  tu_assert_status(graft_module_load(g.model, gamma_path, 0), GRAFT_EINVAL);
  assert_int_equal(unlink(model_path), 0);
  assert_int_equal(unlink(gamma_path), 0);
  assert_int_equal(rmdir(dir), 0);
  graft_module_destroy(g.model);
}

/* ---- reference counts -------------------------------------------------------------- */

/* A deferred root shared by two parents, tracking variables of a third
 * module, and a function that traced it: destroyed in each order.  The
 * function holds the variables, not the modules: its calls work while
 * the variables' owner lives, and fail with GRAFT_EMISUSE after. */
static void test_graft_module_destroy__shared_deferred_module_in_any_order(void **state) {
  (void)state;
  for (int order = 0; order < 4; order++) {
    gamma_model g;
    memset(&g, 0, sizeof g);
    const double mean = 3, variance = 2;
    g.model = make_module(NULL, "model");
    g.mean = make_var(g.model, "mean", 0, &mean, GRAFT_VAR_TRAINABLE);
    g.variance = make_var(g.model, "variance", 0, &variance, GRAFT_VAR_TRAINABLE);
    graft_variable *vars[2] = {g.mean, g.variance};
    g.gamma = make_deferred(NULL, "gamma", 2, vars, 2, gamma_derive, &g);
    graft_module *p1 = make_module(NULL, "p1"), *p2 = make_module(NULL, "p2");
    tu_assert_status(graft_module_attach(p1, "dist", g.gamma), GRAFT_OK);
    tu_assert_status(graft_module_attach(p2, "prior", g.gamma), GRAFT_OK);
    assert_paths(p1, "dist.mean\ndist.variance\n");
    graft_function *f = tu_function(g_rt, "gamma_lp", gamma_trace, &g, 1, 3, NULL);
    double got[3];
    gamma_eval(f, 5, got);
    graft_module *mods[4] = {g.model, g.gamma, p1, p2};
    static const int orders[4][4] = {{0, 1, 2, 3}, {2, 3, 1, 0}, {1, 2, 0, 3}, {3, 0, 2, 1}};
    int gone[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
      int k = orders[order][i];
      graft_module_destroy(mods[k]);
      gone[k] = 1;
      /* Whoever still holds the deferred module walks it whole, even with
       * the variables' owner gone (the module holds them too). */
      if (!gone[2]) assert_paths(p1, "dist.mean\ndist.variance\n");
      if (!gone[3]) assert_paths(p2, "prior.mean\nprior.variance\n");
      graft_tensor *in = input_of(0, (const double[]){5}), *out[3] = {NULL, NULL, NULL};
      graft_status st = graft_function_call(f, 1, &in, 3, out);
      if (gone[0]) {
        tu_assert_status(st, GRAFT_EMISUSE);
        tu_assert_msg_has(graft_function_errmsg(f), "'model/mean' was destroyed");
        assert_null(out[0]);
      } else {
        tu_assert_status(st, GRAFT_OK);
        tu_destroy_outs(out, 3);
      }
      graft_tensor_destroy(in);
    }
    assert_int_equal(g.derives, 1);
    graft_function_destroy(f);
  }
}

/* ---- graft_deferred_create refusals ------------------------------------------------ */

static graft_status one_param(graft_trace *t, graft_module *m, int n, graft_value **p, void *user) {
  (void)m;
  (void)n;
  p[0] = graft_read(t, (graft_variable *)user);
  return GRAFT_OK;
}

/* Leave a known message, so a check cannot pass on a stale one. */
static void poison_last_error(void) {
  graft_module *m = NULL;
  assert_int_equal(graft_module_create(NULL, "9poison", &m), GRAFT_EINVAL);
}

/* graft_deferred_create(parent, ...) returns want, leaves *out NULL and a
 * message naming the call and holding sub, and parent's paths as they
 * were. */
static void expect_create_fails(graft_module *parent, const char *name, int n_vars,
                                graft_variable *const *vars, int n_params, graft_derive_fn derive,
                                graft_status want, const char *sub) {
  paths before;
  memset(&before, 0, sizeof before);
  tu_assert_status(graft_module_flatten(parent, collect_path, &before), GRAFT_OK);
  int64_t subs_before = 0, subs_after = 0;
  tu_assert_status(graft_module_submodules(parent, 0, NULL, &subs_before), GRAFT_OK);
  poison_last_error();
  graft_module *out = (graft_module *)parent; /* must become NULL */
  tu_assert_status(graft_deferred_create(parent, name, n_vars, vars, n_params, derive, NULL, &out),
                   want);
  assert_null(out);
  tu_assert_msg_has(graft_last_errmsg(), "graft_deferred_create");
  tu_assert_msg_has(graft_last_errmsg(), sub);
  assert_paths(parent, before.text);
  tu_assert_status(graft_module_submodules(parent, 0, NULL, &subs_after), GRAFT_OK);
  assert_int_equal(subs_after, subs_before);
}

static void test_graft_deferred_create__refusals_change_nothing(void **state) {
  (void)state;
  graft_module *parent = make_module(NULL, "model");
  const double one = 1;
  graft_variable *a = make_var(parent, "a", 0, &one, GRAFT_VAR_TRAINABLE);
  graft_variable *b = make_var(parent, "b", 0, &one, 0);
  graft_variable *ok[2] = {a, b}, *with_null[2] = {a, NULL}, *dup[3] = {a, b, a};
  expect_create_fails(parent, "d", 2, ok, 1, NULL, GRAFT_EINVAL, "derive is NULL");
  expect_create_fails(parent, "d", 2, ok, 0, one_param, GRAFT_EINVAL, "n_params is 0");
  expect_create_fails(parent, "d", 2, ok, -3, one_param, GRAFT_EINVAL, "n_params is -3");
  expect_create_fails(parent, "d", -1, ok, 1, one_param, GRAFT_EINVAL, "n_vars is -1");
  expect_create_fails(parent, "d", 2, NULL, 1, one_param, GRAFT_EINVAL, "vars is NULL");
  expect_create_fails(parent, "d", 2, with_null, 1, one_param, GRAFT_EINVAL, "vars[1] is NULL");
  expect_create_fails(parent, "d", 3, dup, 1, one_param, GRAFT_EINVAL,
                      "vars[0] and vars[2] are both 'model/a'");
  expect_create_fails(parent, NULL, 2, ok, 1, one_param, GRAFT_EINVAL, "name is NULL");
  expect_create_fails(parent, "9d", 2, ok, 1, one_param, GRAFT_EINVAL, "'9d' is not a C identifier");
  expect_create_fails(parent, "a.b", 2, ok, 1, one_param, GRAFT_EINVAL, "'a.b'");
  /* A destroyed variable (kept allocated by a deferred module tracking it). */
  graft_variable *loose = make_var(NULL, "loose", 0, &one, 0);
  graft_module *keeper = make_deferred(NULL, "keeper", 1, &loose, 1, one_param, loose);
  graft_variable_destroy(loose);
  expect_create_fails(parent, "d", 1, &loose, 1, one_param, GRAFT_EMISUSE, "'loose' was destroyed");
  graft_module_destroy(keeper);
  poison_last_error();
  assert_int_equal(graft_deferred_create(parent, "d", 0, NULL, 1, one_param, NULL, NULL), GRAFT_EINVAL);
  tu_assert_msg_has(graft_last_errmsg(), "graft_deferred_create: out is NULL");
  graft_module_destroy(parent);
}

static void test_graft_deferred_create__names_and_tracked_attributes(void **state) {
  (void)state;
  graft_module *parent = make_module(NULL, "model");
  const double one = 1;
  graft_module *enc = make_module(parent, "enc"), *dec = make_module(parent, "dec");
  graft_variable *v[5] = {make_var(enc, "loc", 0, &one, GRAFT_VAR_TRAINABLE),
                          make_var(dec, "loc", 0, &one, GRAFT_VAR_TRAINABLE),
                          make_var(NULL, "loc_1", 0, &one, 0),
                          make_var(NULL, "0 bad/name-2", 0, &one, 0),
                          make_var(NULL, "trailing/", 0, &one, 0)};
  /* Sibling numbering as graft_module_create: d, d_1. */
  graft_module *d = make_deferred(parent, "d", 5, v, 1, one_param, v[0]);
  graft_module *d1 = make_deferred(parent, "d", 1, v, 1, one_param, v[0]);
  assert_string_equal(graft_module_name(d), "d");
  assert_string_equal(graft_module_scope(d), "model/d/");
  assert_string_equal(graft_module_name(d1), "d_1");
  assert_string_equal(graft_module_scope(d1), "model/d_1/");
  /* Tracked variables under the last part of their names, made C
   * identifiers and told apart by suffixes; the variables keep their own
   * names. */
  assert_paths(d, "loc\nloc_1\nloc_1_1\nname_2\nvar\n");
  assert_paths(d1, "loc\n");
  assert_string_equal(graft_variable_name(v[1]), "model/dec/loc");
  assert_paths(parent, "enc.loc\ndec.loc\nd.loc\nd.loc_1\nd.loc_1_1\nd.name_2\nd.var\nd_1.loc\n");
  /* Each variable once in the walks of the parent; trainable ones only
   * where asked. */
  graft_variable *all[5] = {v[0], v[1], v[2], v[3], v[4]};
  assert_vars(d, 0, 5, all);
  assert_vars(d, 1, 2, all);
  assert_vars(parent, 0, 5, all);
  /* A deferred module is a module: attributes of its own, and a name
   * taken by a tracked variable is refused. */
  graft_module *child = NULL;
  tu_assert_status(graft_module_create(d, "loc", &child), GRAFT_OK);
  assert_string_equal(graft_module_name(child), "loc_2");
  tu_assert_status(graft_module_attach(d, "loc", enc), GRAFT_EINVAL);
  tu_assert_msg_has(graft_last_errmsg(), "'loc' is taken");
  /* Many variables of one name: each gets the next suffix. */
  enum { MANY = 300 };
  graft_variable *many[MANY];
  for (int i = 0; i < MANY; i++) many[i] = make_var(NULL, "w", 0, &one, 0);
  graft_module *wide = make_deferred(NULL, "wide", MANY, many, 1, one_param, many[0]);
  paths p;
  memset(&p, 0, sizeof p);
  int64_t n = 0;
  tu_assert_status(graft_module_variables(wide, 0, NULL, &n), GRAFT_OK);
  assert_int_equal(n, MANY);
  for (int i = 0; i < MANY; i++) graft_variable_destroy(many[i]);
  graft_module_destroy(wide);
  for (int i = 2; i < 5; i++) graft_variable_destroy(v[i]);
  graft_module_destroy(parent);
}

/* ---- graft_deferred_params refusals ------------------------------------------------- */

enum misuse {
  M_NOT_DEFERRED, M_NULL_MODULE, M_WRONG_N, M_NULL_OUT, M_ALREADY_FAILED, M_DERIVE_EIO,
  M_DERIVE_NOT_A_STATUS, M_PARAM_NULL, M_PARAM_POISON, M_PARAM_STALE, M_DERIVE_OP_FAILS,
  M_NESTED_OP_FAILS, M_RECURSION, M_CYCLE, M_ASSIGN_IN_DERIVE, M_UNTRACKED, M_TOO_DEEP,
  M_COUNT
};

typedef struct misuse_case {
  graft_status want;
  const char *subs[3];      /* in the message, besides graft_deferred_params */
} misuse_case;

static const misuse_case g_cases[M_COUNT] = {
  [M_NOT_DEFERRED] = {GRAFT_EINVAL, {"module 'plain'", "is not a deferred module", NULL}},
  [M_NULL_MODULE] = {GRAFT_EINVAL, {"m is NULL", NULL, NULL}},
  [M_WRONG_N] = {GRAFT_EINVAL, {"'bad'", "derives 2 values; n is 3", NULL}},
  [M_NULL_OUT] = {GRAFT_EINVAL, {"'bad'", "out is NULL", NULL}},
  [M_ALREADY_FAILED] = {GRAFT_EIO, {"first failure", NULL, NULL}},
  [M_DERIVE_EIO] = {GRAFT_EIO, {"derive of deferred module 'bad'", "returned GRAFT_EIO", NULL}},
  [M_DERIVE_NOT_A_STATUS] = {GRAFT_EINVAL, {"'bad'", "returned 7", "not a graft_status"}},
  [M_PARAM_NULL] = {GRAFT_EINVAL, {"'bad'", "left params[1] of 2 unset", NULL}},
  [M_PARAM_POISON] = {GRAFT_EMISUSE, {"'bad'", "params[1] the poison value", NULL}},
  [M_PARAM_STALE] = {GRAFT_EMISUSE, {"'bad'", "params[1] a value of another trace", NULL}},
  [M_DERIVE_OP_FAILS] = {GRAFT_ESHAPE, {"derive of deferred module 'bad'", "failed: matmul", NULL}},
  [M_NESTED_OP_FAILS] = {GRAFT_ESHAPE, {"derive of deferred module 'peer'",
                                        "derive chain 'bad' -> 'peer') failed: matmul", NULL}},
  [M_RECURSION] = {GRAFT_EMISUSE, {"'bad'", "while it derives them ('bad' -> 'bad')", NULL}},
  [M_CYCLE] = {GRAFT_EMISUSE, {"'bad'", "('bad' -> 'peer' -> 'bad')", "cycle"}},
  [M_ASSIGN_IN_DERIVE] = {GRAFT_EMISUSE, {"'bad'", "assigned variable 'model/variance'", NULL}},
  [M_UNTRACKED] = {GRAFT_EMISUSE, {"'bad'", "read variable 'other', which 'bad' does not track", NULL}},
  [M_TOO_DEEP] = {GRAFT_EUNSUPPORTED, {"'link'", "nested more than 64 deep", NULL}},
};

typedef struct misuse_ctx {
  int mode;
  graft_variable *mean, *variance, *other;
  graft_module *bad, *peer, *plain, *deep;
  graft_value *stale;       /* a value of an earlier trace */
  int poisoned;             /* out[] were poison after the refusal */
  int returned_sticky;      /* the refusal returned the trace's status */
} misuse_ctx;

static graft_status bad_derive(graft_trace *t, graft_module *m, int n, graft_value **p, void *user) {
  misuse_ctx *c = user;
  (void)n;
  p[0] = graft_read(t, c->mean);
  p[1] = graft_read(t, c->variance);
  graft_value *q[2];
  switch (c->mode) {
  case M_DERIVE_EIO: return GRAFT_EIO;
  case M_DERIVE_NOT_A_STATUS: return (graft_status)7;
  case M_PARAM_NULL: p[1] = NULL; break;
  case M_PARAM_POISON: p[1] = GRAFT__POISON; break;
  case M_PARAM_STALE: p[1] = c->stale; break;
  case M_DERIVE_OP_FAILS: p[1] = graft_matmul(t, p[0], p[1], 0); break;
  case M_RECURSION: return graft_deferred_params(t, m, 2, q);
  case M_CYCLE:
  case M_NESTED_OP_FAILS: return graft_deferred_params(t, c->peer, 2, q);
  case M_ASSIGN_IN_DERIVE: graft_assign(t, c->variance, p[0]); break;
  case M_UNTRACKED: p[1] = graft_add(t, p[1], graft_read(t, c->other)); break;
  default: break;
  }
  return GRAFT_OK;
}

/* The peer asks for bad's values (a cycle), or fails an op. */
static graft_status peer_derive(graft_trace *t, graft_module *m, int n, graft_value **p, void *user) {
  (void)m;
  (void)n;
  misuse_ctx *c = user;
  if (c->mode == M_NESTED_OP_FAILS) {
    graft_value *one = graft_scalar(t, GRAFT_F64, 1);
    p[0] = p[1] = graft_matmul(t, one, one, 0);
    return GRAFT_OK;
  }
  return graft_deferred_params(t, c->bad, 2, p);
}

/* A chain link derives its one value from the next link (+1), the last
 * from mean. */
typedef struct chain_link {
  graft_module *next;
  graft_variable *v;
} chain_link;

static graft_status link_derive(graft_trace *t, graft_module *m, int n, graft_value **p, void *user) {
  (void)m;
  chain_link *l = user;
  if (!l->next) {
    p[0] = graft_read(t, l->v);
    return GRAFT_OK;
  }
  graft_value *q[1];
  graft_status st = graft_deferred_params(t, l->next, n, q);
  p[0] = graft_add(t, q[0], graft_scalar(t, GRAFT_F64, 1));
  return st;
}

/* Assign mean (a failed call must not commit it), then the misuse. */
static graft_status misuse_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in;
  (void)in;
  (void)n_out;
  misuse_ctx *c = user;
  out[0] = graft_assign(t, c->mean, graft_scalar(t, GRAFT_F64, 100));
  graft_value *p[3] = {NULL, NULL, NULL};
  graft_module *m = c->bad;
  int n = 2;
  graft_value **o = p;
  switch (c->mode) {
  case M_NOT_DEFERRED: m = c->plain; break;
  case M_NULL_MODULE: m = NULL; break;
  case M_WRONG_N: n = 3; break;
  case M_NULL_OUT: o = NULL; break;
  case M_ALREADY_FAILED: graft_trace_fail(t, GRAFT_EIO, "first failure"); break;
  case M_TOO_DEEP: m = c->deep; n = 1; break;
  default: break;
  }
  graft_status st = graft_deferred_params(t, m, n, o);
  c->returned_sticky = st != GRAFT_OK && st == graft_trace_status(t);
  c->poisoned = 1;
  for (int i = 0; o && i < n; i++) c->poisoned &= graft_value_is_poison(p[i]);
  return GRAFT_OK;
}

static graft_status deep_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in;
  (void)in;
  (void)n_out;
  misuse_ctx *c = user;
  return graft_deferred_params(t, c->deep, 1, out);
}

/* A value of this trace, kept for a later trace. */
static graft_status keep_value(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in;
  (void)in;
  (void)n_out;
  misuse_ctx *c = user;
  out[0] = c->stale = graft_read(t, c->mean);
  return GRAFT_OK;
}

static void test_graft_deferred_params__refusals_fail_the_trace(void **state) {
  (void)state;
  misuse_ctx c;
  memset(&c, 0, sizeof c);
  const double mean = 3, variance = 2, other = 7;
  graft_module *model = make_module(NULL, "model");
  c.mean = make_var(model, "mean", 0, &mean, GRAFT_VAR_TRAINABLE);
  c.variance = make_var(model, "variance", 0, &variance, GRAFT_VAR_TRAINABLE);
  c.other = make_var(NULL, "other", 0, &other, 0);
  c.plain = make_module(model, "plain");
  graft_variable *vars[2] = {c.mean, c.variance};
  c.bad = make_deferred(model, "bad", 2, vars, 2, bad_derive, &c);
  c.peer = make_deferred(NULL, "peer", 0, NULL, 2, peer_derive, &c);
  /* d0 -> d1 -> ... -> d64: 65 derives inside one another. */
  enum { LINKS = 65 };
  chain_link links[LINKS];
  graft_module *parent = model;
  for (int i = LINKS - 1; i >= 0; i--) links[i] = (chain_link){NULL, c.mean};
  graft_module *mods[LINKS];
  for (int i = 0; i < LINKS; i++) {
    mods[i] = make_deferred(parent, "link", i == LINKS - 1 ? 1 : 0, vars, 1, link_derive, &links[i]);
    if (i) links[i - 1].next = mods[i];
    parent = mods[i];
  }
  c.deep = mods[0];
  graft_tensor *o[1] = {NULL};
  graft_function *keep = tu_function(g_rt, "keep", keep_value, &c, 0, 1, NULL);
  call(keep, NULL, 1, o);
  tu_destroy_outs(o, 1);
  graft_function_destroy(keep);

  for (int mode = 0; mode < M_COUNT; mode++) {
    c.mode = mode;
    c.poisoned = c.returned_sticky = 0;
    graft_function *f = tu_function(g_rt, "misuse", misuse_trace, &c, 0, 1, NULL);
    graft_status st = graft_function_call(f, 0, NULL, 1, o);
    const misuse_case *w = &g_cases[mode];
    if (st != w->want)
      fail_msg("case %d: %s, want %s (%s)", mode, graft_status_name(st), graft_status_name(w->want),
               graft_function_errmsg(f));
    assert_null(o[0]);
    const char *msg = graft_function_errmsg(f);
    if (mode != M_ALREADY_FAILED) tu_assert_msg_has(msg, "graft_deferred_params");
    for (int i = 0; i < 3 && w->subs[i]; i++)
      if (!strstr(msg, w->subs[i])) fail_msg("case %d: message \"%s\" lacks \"%s\"", mode, msg, w->subs[i]);
    assert_true(c.returned_sticky);
    assert_true(c.poisoned);
    assert_true(var_get(c.mean, 0) == mean);
    assert_true(var_get(c.variance, 0) == variance);
    graft_function_destroy(f);
  }
  /* One link fewer is deep enough: d1's value is mean + 63. */
  c.deep = mods[1];
  graft_function *f = tu_function(g_rt, "deep_ok", deep_trace, &c, 0, 1, NULL);
  call(f, NULL, 1, o);
  assert_true(tu_get(o[0], 0) == mean + LINKS - 2);
  tu_destroy_outs(o, 1);
  graft_function_destroy(f);
  /* Outside a trace. */
  graft_value *p[2] = {NULL, NULL};
  poison_last_error();
  tu_assert_status(graft_deferred_params(NULL, c.bad, 2, p), GRAFT_EINVAL);
  tu_assert_msg_has(graft_last_errmsg(), "graft_deferred_params: t is NULL");
  assert_true(graft_value_is_poison(p[0]) && graft_value_is_poison(p[1]));
  graft_module_destroy(c.peer);
  graft_variable_destroy(c.other);
  graft_module_destroy(model);
}

/* ---- out of memory ------------------------------------------------------------------- */

/* Fails exactly the fail_at-th allocation (1-based; 0: none). */
static struct {
  long count, fail_at;
  int hit;
} g_cd;

static void *cd_alloc(void *ctx, size_t size, size_t align) {
  (void)ctx;
  if (++g_cd.count == g_cd.fail_at) {
    g_cd.hit = 1;
    return NULL;
  }
  return aligned_alloc(align, (size + align - 1) / align * align);
}

static void cd_free(void *ctx, void *p) {
  (void)ctx;
  free(p);
}

/* graft_deferred_create under a parent and as a root, with each of its
 * allocations failed in turn: GRAFT_ENOMEM naming the call, *out NULL,
 * the parent's paths as they were (the ASan build: nothing leaked). */
static void test_graft_deferred_create__out_of_memory_changes_nothing(void **state) {
  (void)state;
  const double one = 1;
  graft_module *parent = make_module(NULL, "model");
  graft_module *enc = make_module(parent, "enc");
  graft_variable *v[3] = {make_var(enc, "w", 0, &one, GRAFT_VAR_TRAINABLE),
                          make_var(parent, "w", 0, &one, 0), make_var(parent, "b", 0, &one, 0)};
  static const graft_allocator hook = {cd_alloc, cd_free, NULL};
  for (int root = 0; root < 2; root++) {
    graft_module *where = root ? NULL : parent;
    long n = 1;
    for (;; n++) {
      paths before;
      memset(&before, 0, sizeof before);
      tu_assert_status(graft_module_flatten(parent, collect_path, &before), GRAFT_OK);
      graft_module *m = (graft_module *)parent;
      g_cd.count = 0;
      g_cd.fail_at = n;
      g_cd.hit = 0;
      graft_set_allocator(&hook);
      graft_status st = graft_deferred_create(where, "d", 3, v, 1, one_param, v[0], &m);
      graft_set_allocator(NULL);
      if (!g_cd.hit) {
        tu_assert_status(st, GRAFT_OK);
        assert_paths(m, "w\nw_1\nb\n");
        if (root) graft_module_destroy(m);
        break;
      }
      tu_assert_status(st, GRAFT_ENOMEM);
      assert_null(m);
      tu_assert_msg_has(graft_last_errmsg(), "graft_deferred_create");
      assert_paths(parent, before.text);
    }
    assert_true(n > 5); /* it allocates, and each allocation failed once */
  }
  assert_paths(parent, "w\nb\nenc.w\nd.w\nd.w_1\nd.b\n");
  graft_module_destroy(parent);
}

/* A traced call using deferred modules (nested), with each allocation
 * of the call failed in turn: GRAFT_ENOMEM, no output, the variables as
 * they were; or, where the planner makes do without the block, the
 * result of a call without the failure. */
static graft_status oom_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  normal_model *nm = user;
  graft_status st = slice_trace(t, n_in, in, n_out, out, user);
  graft_assign_add(t, nm->scaled_loc, out[1]);
  return st;
}

static void test_graft_deferred_params__out_of_memory_changes_nothing(void **state) {
  (void)state;
  normal_model nm;
  normal_setup(&nm);
  nm.use_normal_too = 1;
  const double x[2] = {-1.2, 2.0};
  graft_tensor *in = input_of(2, x);
  double ds[3], dl[3], after[3];
  double lp = normal_ref(g_scaled_loc, g_log_scale, x, 1, 3, ds, dl);
  for (int i = 0; i < 3; i++) after[i] = g_scaled_loc[i] + ds[i];
  static const graft_allocator hook = {cd_alloc, cd_free, NULL};
  long n = 1, failed = 0;
  for (;; n++) {
    graft_function *f = tu_function(g_rt, "oom", oom_trace, &nm, 1, 3, NULL);
    graft_tensor *out[3] = {NULL, NULL, NULL};
    g_cd.count = 0;
    g_cd.fail_at = n;
    g_cd.hit = 0;
    graft_set_allocator(&hook);
    graft_status st = graft_function_call(f, 1, &in, 3, out);
    graft_set_allocator(NULL);
    graft_function_destroy(f);
    if (st == GRAFT_OK) {
      assert_true(tu_close(tu_get(out[0], 0), lp, 1e-12, 1e-12));
      for (int i = 0; i < 3; i++) assert_true(tu_close(var_get(nm.scaled_loc, i), after[i], 1e-12, 1e-12));
      tu_destroy_outs(out, 3);
      var_set(nm.scaled_loc, g_scaled_loc);
      if (!g_cd.hit) break;
      continue;
    }
    failed++;
    tu_assert_status(st, GRAFT_ENOMEM);
    for (int i = 0; i < 3; i++) assert_null(out[i]);
    for (int i = 0; i < 3; i++) assert_true(var_get(nm.scaled_loc, i) == g_scaled_loc[i]);
  }
  assert_true(failed > 20);
  graft_tensor_destroy(in);
  normal_teardown(&nm);
}

/* ---- threads ---------------------------------------------------------------------------- */

typedef struct shared_gamma {
  graft_module *gamma;
  graft_variable *mean, *variance;
  int derives;                       /* atomic */
} shared_gamma;

static graft_status shared_derive(graft_trace *t, graft_module *m, int n, graft_value **p, void *user) {
  (void)m;
  (void)n;
  shared_gamma *s = user;
  __atomic_add_fetch(&s->derives, 1, __ATOMIC_RELAXED);
  graft_value *mu = graft_read(t, s->mean), *v = graft_read(t, s->variance);
  p[0] = graft_div(t, graft_square(t, mu), v);
  p[1] = graft_div(t, mu, v);
  return GRAFT_OK;
}

static graft_status shared_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  shared_gamma *s = user;
  graft_value *ab[2];
  graft_status st = graft_deferred_params(t, s->gamma, 2, ab);
  out[0] = gamma_log_prob(t, ab, in[0]);
  return st;
}

enum { THREAD_TRACES = 25 };

typedef struct tracer {
  shared_gamma *s;
  int bad;                           /* recorded here, asserted after the join */
} tracer;

static void *trace_many(void *arg) {
  tracer *w = arg;
  double want, dmu, dv;
  gamma_ref(3, 2, 5, &want, &dmu, &dv);
  for (int i = 0; i < THREAD_TRACES && !w->bad; i++) {
    graft_function_desc d = {.name = "shared", .trace = shared_trace, .user = w->s, .n_inputs = 1,
                             .n_outputs = 1};
    graft_function *f = NULL;
    const double x = 5;
    graft_tensor *in = NULL, *out = NULL;
    const int64_t none = 0;
    if (graft_function_create(g_rt, &d, &f) || graft_tensor_create(GRAFT_F64, 0, &none, &in)) {
      w->bad = 1;
      break;
    }
    *(double *)graft_tensor_data(in) = x;
    if (graft_function_call(f, 1, &in, 1, &out) || !tu_close(tu_get(out, 0), want, 1e-12, 1e-12))
      w->bad = 1;
    graft_tensor_destroy(out);
    graft_tensor_destroy(in);
    graft_function_destroy(f);
  }
  return NULL;
}

/* graft_deferred_params only reads the module: traces on several threads
 * use one deferred module at once, each deriving in its own trace. */
static void test_graft_deferred_params__traces_on_two_threads(void **state) {
  (void)state;
  shared_gamma s = {0};
  const double mean = 3, variance = 2;
  s.mean = make_var(NULL, "mean", 0, &mean, GRAFT_VAR_TRAINABLE);
  s.variance = make_var(NULL, "variance", 0, &variance, GRAFT_VAR_TRAINABLE);
  graft_variable *vars[2] = {s.mean, s.variance};
  s.gamma = make_deferred(NULL, "gamma", 2, vars, 2, shared_derive, &s);
  tracer w[2] = {{&s, 0}, {&s, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, trace_many, &w[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  assert_false(w[0].bad || w[1].bad);
  assert_int_equal(s.derives, 2 * THREAD_TRACES);
  graft_module_destroy(s.gamma);
  graft_variable_destroy(s.mean);
  graft_variable_destroy(s.variance);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_graft_deferred_params__gamma_log_prob_and_gradient),
    cmocka_unit_test(test_graft_deferred_params__normal_log_prob_and_gradient),
    cmocka_unit_test(test_graft_deferred_params__nested_slice_of_a_normal),
    cmocka_unit_test(test_graft_deferred_params__derive_traced_once_per_trace),
    cmocka_unit_test(test_graft_deferred_params__assignment_between_calls_without_retrace),
    cmocka_unit_test(test_graft_deferred_params__assignment_in_the_trace_derives_again),
    cmocka_unit_test(test_graft_deferred_params__optimizer_step_in_the_trace),
    cmocka_unit_test(test_graft_module_destroy__shared_deferred_module_in_any_order),
    cmocka_unit_test(test_graft_module_save__deferred_module_round_trip),
    cmocka_unit_test(test_graft_deferred_create__refusals_change_nothing),
    cmocka_unit_test(test_graft_deferred_create__names_and_tracked_attributes),
    cmocka_unit_test(test_graft_deferred_params__refusals_fail_the_trace),
    cmocka_unit_test(test_graft_deferred_create__out_of_memory_changes_nothing),
    cmocka_unit_test(test_graft_deferred_params__out_of_memory_changes_nothing),
    cmocka_unit_test(test_graft_deferred_params__traces_on_two_threads),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
