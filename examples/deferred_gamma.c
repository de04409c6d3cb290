/* deferred_gamma: a Gamma distribution parameterized by its mean and
 * variance, as a deferred module (TensorFlow Probability's DeferredModule).
 *
 * The trainable variables are mean and variance; the module derives the
 * Gamma's concentration = mean^2 / variance and rate = mean / variance
 * inside each trace, once, and every use of the distribution in the trace
 * shares them, with gradients reaching mean and variance.  The program
 * prints log_prob(5) and its gradient next to the closed form, then fits
 * mean and variance to a few samples by maximum likelihood with Adam (one
 * traced function per step, traced once: each step's new mean and variance
 * reach the next call's derived values without a retrace).  Exits 0 when
 * graft agrees with the closed form and the fit raised the likelihood, 1
 * otherwise.
 *
 *   build/examples/deferred_gamma
 */
#include <math.h>
#include <stdio.h>

#include "graft.h"

enum { N = 8, STEPS = 300 };

typedef struct gamma_dist {
  graft_variable *mean, *variance;
  graft_module *gamma;   /* the deferred module */
  graft_module *adam;    /* the optimizer of mean and variance */
} gamma_dist;

/* The derive callback: traced once per trace, not once per use. */
static graft_status derive(graft_trace *t, graft_module *m, int n, graft_value **params,
                           void *user) {
  (void)m;
  (void)n;
  gamma_dist *g = user;
  graft_value *mean = graft_read(t, g->mean), *variance = graft_read(t, g->variance);
  params[0] = graft_div(t, graft_square(t, mean), variance); /* concentration */
  params[1] = graft_div(t, mean, variance);                  /* rate */
  return GRAFT_OK;
}

/* log Gamma(x; a, b) = a log b + (a - 1) log x - b x - lgamma(a), elementwise. */
static graft_value *log_prob(graft_trace *t, gamma_dist *g, graft_value *x) {
  graft_value *p[2];
  if (graft_deferred_params(t, g->gamma, 2, p) != GRAFT_OK) return p[0]; /* poison */
  graft_value *a = p[0], *b = p[1];
  graft_value *lp = graft_mul(t, a, graft_log(t, b));
  lp = graft_add(t, lp, graft_mul(t, graft_sub(t, a, graft_scalar(t, GRAFT_F64, 1)), graft_log(t, x)));
  lp = graft_sub(t, lp, graft_mul(t, b, x));
  return graft_sub(t, lp, graft_lgamma(t, a));
}

/* in: x (rank 0); out: log_prob(x) and its gradient in mean and variance. */
static graft_status log_prob_and_grad(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                      graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  gamma_dist *g = user;
  out[0] = log_prob(t, g, in[0]);
  graft_value *xs[2] = {graft_read(t, g->mean), graft_read(t, g->variance)};
  return graft_gradients(t, 1, out, NULL, 2, xs, GRAFT_UNCONNECTED_ZERO, out + 1);
}

/* in: samples [N]; out: their mean negative log-likelihood before the
 * step.  One Adam step on mean and variance. */
static graft_status train_step(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  gamma_dist *g = user;
  graft_value *nll = graft_neg(t, graft_reduce_mean(t, log_prob(t, g, in[0]), 0, NULL, 0));
  graft_value *xs[2] = {graft_read(t, g->mean), graft_read(t, g->variance)}, *grads[2];
  graft_status s = graft_gradients(t, 1, &nll, NULL, 2, xs, GRAFT_UNCONNECTED_ZERO, grads);
  if (s == GRAFT_OK) s = graft_optimizer_apply(t, g->adam, 2, grads);
  out[0] = nll;
  return s;
}

/* digamma(x), x > 0: psi(x) = psi(x + 1) - 1/x up to x >= 10, then the
 * asymptotic series. */
static double digamma(double x) {
  double r = 0;
  for (; x < 10; x += 1) r -= 1 / x;
  double f = 1 / (x * x);
  return r + log(x) - 0.5 / x -
         f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f / 132))));
}

/* The closed form: log_prob and its partials in mean and variance. */
static void closed_form(double mean, double variance, double x, double out[3]) {
  double a = mean * mean / variance, b = mean / variance;
  double da = log(b) + log(x) - digamma(a), db = a / b - x;
  out[0] = a * log(b) + (a - 1) * log(x) - b * x - lgamma(a);
  out[1] = da * 2 * mean / variance + db / variance;
  out[2] = -(da * mean * mean + db * mean) / (variance * variance);
}

static int failed(graft_status s, const char *what) {
  if (s == GRAFT_OK) return 0;
  fprintf(stderr, "deferred_gamma: %s failed (%s): %s\n", what, graft_status_name(s),
          graft_last_errmsg());
  return 1;
}

static double scalar(const graft_tensor *t) { return *(const double *)graft_tensor_data(t); }

int main(void) {
  graft_runtime *rt = NULL;
  graft_module *model = NULL;
  gamma_dist g = {0};
  graft_function *lp = NULL, *step = NULL;
  graft_tensor *x = NULL, *samples = NULL, *out[3] = {NULL, NULL, NULL}, *nll = NULL;
  const double mean0 = 3, variance0 = 2, x0 = 5;
  /* Samples to fit: their mean is 4.3, and the fitted Gamma's mean
   * approaches it (the maximum-likelihood mean of a Gamma is the sample
   * mean). */
  double data[N] = {2.9, 5.8, 3.1, 4.4, 6.5, 3.7, 2.6, 5.4};
  const int64_t n_shape[1] = {N};

  int bad = failed(graft_runtime_create(NULL, &rt), "graft_runtime_create");
  bad = bad || failed(graft_module_create(NULL, "model", &model), "graft_module_create");
  bad = bad || failed(graft_variable_create(model, "mean", GRAFT_F64, 0, NULL, &mean0,
                                            GRAFT_VAR_TRAINABLE, &g.mean), "graft_variable_create");
  bad = bad || failed(graft_variable_create(model, "variance", GRAFT_F64, 0, NULL, &variance0,
                                            GRAFT_VAR_TRAINABLE, &g.variance),
                      "graft_variable_create");
  graft_variable *vars[2] = {g.mean, g.variance};
  bad = bad || failed(graft_deferred_create(model, "gamma", 2, vars, 2, derive, &g, &g.gamma),
                      "graft_deferred_create");
  graft_optimizer_desc adam = {.kind = GRAFT_OPT_ADAM, .lr = 0.02};
  bad = bad || failed(graft_optimizer_create(model, "adam", &adam, 2, vars, &g.adam),
                      "graft_optimizer_create");
  graft_function_desc d1 = {.name = "log_prob", .trace = log_prob_and_grad, .user = &g,
                            .n_inputs = 1, .n_outputs = 3};
  graft_function_desc d2 = {.name = "train_step", .trace = train_step, .user = &g,
                            .n_inputs = 1, .n_outputs = 1};
  bad = bad || failed(graft_function_create(rt, &d1, &lp), "graft_function_create");
  bad = bad || failed(graft_function_create(rt, &d2, &step), "graft_function_create");
  bad = bad || failed(graft_tensor_create(GRAFT_F64, 0, NULL, &x), "graft_tensor_create");
  bad = bad || failed(graft_tensor_wrap(GRAFT_F64, 1, n_shape, data, &samples), "graft_tensor_wrap");

  /* log_prob(5) and its gradient, graft against the closed form. */
  if (!bad) {
    *(double *)graft_tensor_data(x) = x0;
    bad = failed(graft_function_call(lp, 1, &x, 3, out), "graft_function_call");
  }
  if (!bad) {
    double want[3];
    closed_form(mean0, variance0, x0, want);
    const char *what[3] = {"log_prob(5)", "d/d mean", "d/d variance"};
    printf("Gamma(mean %g, variance %g): concentration %g, rate %g\n", mean0, variance0,
           mean0 * mean0 / variance0, mean0 / variance0);
    printf("%-14s %22s %22s\n", "", "graft", "closed form");
    for (int i = 0; i < 3; i++) {
      double got = scalar(out[i]);
      printf("%-14s %22.15f %22.15f\n", what[i], got, want[i]);
      if (!(fabs(got - want[i]) <= 1e-10 * fabs(want[i]) + 1e-12)) {
        fprintf(stderr, "deferred_gamma: %s: graft %.17g, closed form %.17g\n", what[i], got,
                want[i]);
        bad = 1;
      }
    }
  }

  /* Fit mean and variance to the samples. */
  double first = 0, last = 0;
  for (int s = 0; s <= STEPS && !bad; s++) {
    bad = failed(graft_function_call(step, 1, &samples, 1, &nll), "graft_function_call");
    if (bad) break;
    last = scalar(nll);
    if (s == 0) first = last;
    if (s % 50 == 0)
      printf("step %3d  nll %.6f  mean %.4f  variance %.4f\n", s, last,
             scalar(graft_variable_value(g.mean)), scalar(graft_variable_value(g.variance)));
  }
  if (!bad) {
    printf("traces: log_prob %d, train_step %d (variables read by reference: no retrace)\n",
           graft_function_trace_count(lp), graft_function_trace_count(step));
    graft_module_print(model, stdout);
    if (!(last < first)) {
      fprintf(stderr, "deferred_gamma: the fit did not lower the nll (%g -> %g)\n", first, last);
      bad = 1;
    }
  }

  for (int i = 0; i < 3; i++) graft_tensor_destroy(out[i]);
  graft_tensor_destroy(nll);
  graft_tensor_destroy(samples);
  graft_tensor_destroy(x);
  graft_function_destroy(step);
  graft_function_destroy(lp);
  graft_module_destroy(model);
  graft_runtime_destroy(rt);
  return bad;
}
