/* graft internal: special functions in double precision for the LGAMMA,
 * DIGAMMA and POLYGAMMA kernels (f32 kernels call these and round), and
 * the f32 tanh of the TANH kernel (below, inline so that loops vectorize).
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

#include <math.h>
#include <stdint.h>
#include <string.h>

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

/* tanh of a float, within 0.51 ulp of the true value (0.5068 at most over
 * every float, which tests/kernels/test_tanh.c checks in the stress
 * suite): the double result is within 2^-30 relative before its one
 * rounding to float, so it is the correctly rounded float except where the
 * true value lies that close to a midpoint between two floats (then it may
 * be the float on the other side: 53,303 of the 2^31 non-negative floats).
 * Odd (computed on |x|, the sign put back), so tanh(-0) = -0; tanh(+-inf)
 * = +-1; NaN gives NaN.
 *
 * Why not tanhf: libm's is a scalar call (about 16 ns an element here),
 * and the tanh of an RNN cell was a quarter of its step.  This is straight
 * line double arithmetic and bit operations, with no branch, table or
 * call, so gcc and clang vectorize the kernel loops that call it (two
 * double lanes with SSE2); a vector lane does the same IEEE operations as
 * the scalar code, so an element gets the same bits whichever tile, chunk,
 * loop or tail computes it.  (A ?: on doubles would not do: gcc threads
 * jumps through it, then will not if-convert the trapping arithmetic that
 * moved into the arms, and leaves the loop scalar.)
 *
 * Method, for a = min(|x|, 10) (tanh rounds to 1.0f from 9.01 on; the
 * clamp turns inf into 1 and keeps 2^n below in range):
 *   tanh a = m / (m + 2), m = e^(2a) - 1, with no cancellation anywhere:
 *   2a = n ln 2 + r, |r| <= ln 2 / 2, n in [0, 29];
 *   m = 2^n q + (2^n - 1), q = e^r - 1 = r + r^2 p(r), p of degree 5
 *   (below); n = 0 gives m = q, and for n >= 1 neither term exceeds
 *   1.5 m, so q's relative error reaches m and tanh at most 1.5-fold.
 * p interpolates (e^r - 1 - r) / r^2 at the 6 Chebyshev nodes of
 * [-0.3466, 0.3466] (computed in long double, rounded to double): q's
 * relative error is below 2^-30.8 there, where the Taylor polynomial of
 * the same degree gives 2^-25.8.
 * The min clamps a NaN too; or-ing a quiet NaN's bits into the result
 * makes it a NaN again, which then travels through every step. */
static inline float graft__special_tanhf(float x) {
  uint32_t xb;
  memcpy(&xb, &x, sizeof xb);
  const uint32_t ub = xb & 0x7fffffffu; /* |x| */
  /* Integer min and masks (never a branch): 0x41200000 is 10.0f,
   * 0x7f800000 inf, 0x7fc00000 a quiet NaN. */
  const uint32_t nan_bits = (0u - (uint32_t)(ub > 0x7f800000u)) & 0x7fc00000u;
  const uint32_t ab = (ub < 0x41200000u ? ub : 0x41200000u) | nan_bits;
  float af;
  memcpy(&af, &ab, sizeof af);
  const double y = 2.0 * (double)af;

  /* n = y / ln 2 rounded, by the rounding of adding 1.5 * 2^52: n is then
   * the low bits of kd, from which 2^n is built without a float-to-integer
   * conversion (SSE2 has none for 64-bit integers).  One ln 2 constant
   * suffices: n <= 29 keeps the error of n ln 2 near 2^-49. */
  const double shifter = 0x1.8p52;
  const double kd = y * 1.4426950408889634 + shifter;
  const double n = kd - shifter;
  const double r = y - n * 0.6931471805599453;
  uint64_t bits;
  memcpy(&bits, &kd, sizeof bits);
  bits = (bits << 52) + 0x3ff0000000000000u; /* n's bits moved into 1.0's exponent */
  double two_n;
  memcpy(&two_n, &bits, sizeof two_n);

  /* p by Estrin's scheme: shorter dependency chains than Horner's. */
  const double r2 = r * r, r4 = r2 * r2;
  const double p = (0.50000000134638856 + r * 0.16666666681621095) +
                   r2 * (0.04166646494450571 + r * 0.0083333109276155053) +
                   r4 * (0.0013933647862928215 + r * 0.00019890988455418724);
  const double m = two_n * (r + r2 * p) + (two_n - 1.0);

  /* The sign goes back on in the float's bits: four lanes at a time. */
  const float t = (float)(m / (m + 2.0));
  uint32_t tb;
  memcpy(&tb, &t, sizeof tb);
  tb |= xb & 0x80000000u;
  float res;
  memcpy(&res, &tb, sizeof res);
  return res;
}

#endif /* GRAFT_SPECIAL_H */
