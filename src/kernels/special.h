/* graft internal: special functions in double precision for the LGAMMA,
 * DIGAMMA and POLYGAMMA kernels (f32 kernels call these and round).
 *
 * All three are pure and thread-safe (no signgam, no static state).  Target
 * relative accuracy is about 1e-13 for x in [-50, 1e6], except near the zeros
 * of the functions on the negative axis, where only the absolute error is
 * small (the result is ill-conditioned there).
 *
 * Poles (x = 0, -1, -2, ...):
 *   lgamma        +inf (as C lgamma).
 *   digamma       NaN: the one-sided limits are -inf and +inf, so no signed
 *                 infinity is right.
 *   polygamma     odd n: +inf (both one-sided limits are +inf);
 *                 even n: NaN (the one-sided limits differ in sign).
 * Infinities: digamma(+inf) = +inf, polygamma(n, +inf) = 0; at -inf both
 * give NaN (poles accumulate there).  NaN in, NaN out.
 */
#ifndef GRAFT_SPECIAL_H
#define GRAFT_SPECIAL_H

/* Highest polygamma order computed; n! must be finite in double.  Larger
 * orders give NaN. */
#define GRAFT__POLYGAMMA_MAX_N 170

/* log|Gamma(x)|. */
double graft__special_lgamma(double x);

/* psi(x) = d/dx log Gamma(x). */
double graft__special_digamma(double x);

/* psi^(n)(x), the n-th derivative of digamma; n = 0 is digamma, n < 0 or
 * n > GRAFT__POLYGAMMA_MAX_N gives NaN. */
double graft__special_polygamma(int n, double x);

#endif /* GRAFT_SPECIAL_H */
