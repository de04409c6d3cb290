/* Log-gamma, digamma and polygamma in double precision.
 *
 * Method: shift x upwards with the recurrence until the asymptotic series is
 * accurate, evaluate the series, and add the shifted-out terms back, smallest
 * first.  Negative non-integer x goes through the reflection formula, which
 * costs the same for any |x| (a recurrence from x = -1e9 would loop 1e9
 * times).  Pole and infinity conventions are documented in special.h.
 */
#include "kernels/special.h"

#include <float.h>
#include <math.h>

#define PI 3.14159265358979323846

/* Shift targets: the first omitted asymptotic term is below 1e-17 relative
 * from here on (digamma: B_18 / (18 y^18) at y = 10). */
#define DIGAMMA_ASYM_MIN 10.0
/* polygamma(n, .) needs y >= POLY_ASYM_BASE + 2 n: its series terms grow
 * like (2k + n)! / (2 pi y)^(2k), so larger orders need larger y. */
#define POLY_ASYM_BASE 10.0

/* The positive zero of digamma, as a double-double, and the Taylor
 * coefficients psi^(j)(x0) / j! = (-1)^(j+1) zeta(j+1, x0) for j = 1..18.
 * Near x0 the recurrence loses every digit to cancellation (psi(x0+h) ~ h),
 * so a series in h = x - x0 takes over there. */
#define DIGAMMA_ROOT_HI 1.4616321449683622
#define DIGAMMA_ROOT_LO 9.5499954299656974e-17
#define DIGAMMA_ROOT_HALFWIDTH 0.125

static const double digamma_root_taylor[18] = {
  0.9676722454476212,     -0.44276316898359208,    0.25849976095565103,
  -0.16394270544240652,   0.10782405069126237,     -0.072199561256454714,
  0.04880428816414311,    -0.033161126474847362,   0.022597648232218104,
  -0.01542476590494896,   0.010538791616612175,    -0.0072045343863568687,
  0.0049267813957298533,  -0.0033698016554393282,  0.002305126326734928,
  -0.0015769367714301972, 0.0010788252019162967,   -0.00073807093899600515,
};

/* Bernoulli numbers B_2 .. B_20. */
static const double bernoulli_2k[10] = {
  1.0 / 6.0,      -1.0 / 30.0,       1.0 / 42.0,       -1.0 / 30.0,     5.0 / 66.0,
  -691.0 / 2730.0, 7.0 / 6.0,         -3617.0 / 510.0, 43867.0 / 798.0, -174611.0 / 330.0,
};

double graft__special_lgamma(double x) {
  /* lgamma() writes the global signgam, a data race between workers. */
  int sign;
  return lgamma_r(x, &sign);
}

/* cot(pi x) for non-integer x.  r = x - nearbyint(x) is exact, so the
 * result keeps full relative precision for any |x|; for |r| > 1/4 the
 * identity cot(pi r) = tan(pi (1/2 - r)) avoids tan near pi/2, where the
 * rounding of pi/2 alone would leave an absolute error of ~1e-16 that
 * polygamma's reflection multiplies by pi^(n+1) Q_n'(0). */
static double cot_pi(double x) {
  double r = x - nearbyint(x);
  double a = fabs(r);
  if (a > 0.25)
    return copysign(tan(PI * (0.5 - a)), r);
  return 1.0 / tan(PI * r);
}

static int is_nonpositive_integer(double x) {
  return x <= 0.0 && x == floor(x);
}

/* ---- digamma --------------------------------------------------------- */

/* y >= DIGAMMA_ASYM_MIN: log y - 1/(2y) - sum B_2k / (2k y^2k), k = 1..8. */
static double digamma_asym(double y) {
  double z = 1.0 / (y * y);
  double s =
      z * (1.0 / 12 +
           z * (-1.0 / 120 +
                z * (1.0 / 252 +
                     z * (-1.0 / 240 +
                          z * (1.0 / 132 +
                               z * (-691.0 / 32760 + z * (1.0 / 12 + z * (-3617.0 / 8160))))))));
  return log(y) - 0.5 / y - s;
}

static double digamma_pos(double x) {
  double h = x - DIGAMMA_ROOT_HI; /* exact here (Sterbenz) */
  if (fabs(h) < DIGAMMA_ROOT_HALFWIDTH) {
    h -= DIGAMMA_ROOT_LO;
    double s = 0.0;
    for (int j = (int)(sizeof digamma_root_taylor / sizeof digamma_root_taylor[0]) - 1; j >= 0; j--)
      s = s * h + digamma_root_taylor[j];
    return s * h;
  }
  /* psi(x) = psi(x + m) - sum_{k<m} 1/(x + k); the terms are positive, so
   * their sum is accurate in any order. */
  double acc = 0.0;
  while (x < DIGAMMA_ASYM_MIN) {
    acc += 1.0 / x;
    x += 1.0;
  }
  return digamma_asym(x) - acc;
}

double graft__special_digamma(double x) {
  if (isnan(x))
    return x;
  if (is_nonpositive_integer(x)) /* poles, and -inf */
    return NAN;
  if (x < 0.0) /* psi(x) = psi(1 - x) - pi cot(pi x) */
    return digamma_pos(1.0 - x) - PI * cot_pi(x);
  return digamma_pos(x);
}

/* ---- polygamma ------------------------------------------------------- */

/* fact / t^p for t > 0, where fact = exp(lfact).  pow alone is the most
 * accurate, but t^p may leave the double range while the quotient does not
 * (large orders); then logs carry the computation. */
static double fact_over_pow(double fact, double lfact, int p, double t) {
  double q = pow(t, -(double)p);
  if (q >= DBL_MIN && q <= DBL_MAX) {
    double r = fact * q;
    if (r >= DBL_MIN && r <= DBL_MAX)
      return r;
  }
  return exp(lfact - p * log(t));
}

/* (-1)^(n+1) psi^(n)(x) for x > 0, n >= 1: a positive sum
 *   n! sum_{k<m} 1/(x+k)^(n+1) + asymptotic series at y = x + m,
 * the series being (n-1)!/y^n [1 + n/(2y) + sum_k B_2k n(n+1)..(n+2k-1) /
 * ((2k)! y^2k)]. */
static double polygamma_pos_abs(int n, double x) {
  double fact_nm1 = 1.0;
  for (int i = 2; i < n; i++)
    fact_nm1 *= i;
  double fact_n = fact_nm1 * n;
  int sign;
  double lfact_nm1 = lgamma_r((double)n, &sign);
  double lfact_n = lgamma_r((double)n + 1.0, &sign);

  double ymin = POLY_ASYM_BASE + 2.0 * n;
  double m = x < ymin ? ceil(ymin - x) : 0.0;
  double y = x + m;

  double iy2 = 1.0 / (y * y);
  double c = 1.0, series = 0.0;
  for (int k = 1; k <= 10; k++) {
    c *= (double)(n + 2 * k - 2) * (double)(n + 2 * k - 1) / ((double)(2 * k - 1) * (2 * k)) * iy2;
    series += bernoulli_2k[k - 1] * c;
  }
  double s = fact_over_pow(fact_nm1, lfact_nm1, n, y) * (1.0 + n / (2.0 * y) + series);

  for (double k = m - 1.0; k >= 0.0; k -= 1.0)
    s += fact_over_pow(fact_n, lfact_n, n + 1, x + k);
  return s;
}

static double polygamma_pos(int n, double x) {
  double s = polygamma_pos_abs(n, x);
  return (n & 1) ? s : -s;
}

/* Differentiating psi(1-x) - psi(x) = pi cot(pi x) n times gives
 *   psi^(n)(x) = (-1)^n [psi^(n)(1-x) - pi^(n+1) Q_n(cot(pi x))],
 * where cot^(n)(u) = (-1)^n Q_n(cot u), Q_0(c) = c, Q_{m+1} = (1 + c^2) Q_m'.
 * Q_n has non-negative coefficients and a single parity, so evaluating it
 * never cancels. */
static double polygamma_neg(int n, double x) {
  double q[GRAFT__POLYGAMMA_MAX_N + 2];
  for (int j = 0; j <= n + 1; j++)
    q[j] = 0.0;
  q[1] = 1.0;
  for (int m = 0; m < n; m++) {
    for (int j = 0; j <= m; j++) /* derivative: degree m+1 -> m */
      q[j] = (j + 1) * q[j + 1];
    q[m + 1] = 0.0;
    for (int j = m + 2; j >= 2; j--) /* times 1 + c^2: degree m -> m+2 */
      q[j] += q[j - 2];
  }
  double c = cot_pi(x);
  double qc = 0.0;
  for (int j = n + 1; j >= 0; j--)
    qc = qc * c + q[j];
  double refl = pow(PI, n + 1.0) * qc;
  double v = polygamma_pos(n, 1.0 - x) - refl;
  return (n & 1) ? -v : v;
}

double graft__special_polygamma(int n, double x) {
  if (n == 0)
    return graft__special_digamma(x);
  if (n < 0 || n > GRAFT__POLYGAMMA_MAX_N || isnan(x) || x == -INFINITY)
    return NAN;
  if (x == INFINITY)
    return 0.0;
  if (is_nonpositive_integer(x))
    return (n & 1) ? INFINITY : NAN;
  if (x < 0.0)
    return polygamma_neg(n, x);
  return polygamma_pos(n, x);
}
