/* The f32 tanh (graft__special_tanhf, kernels/special.h) and the TANH
 * kernel that calls it, against tanh() in double: every float checked is
 * within 1 ulp of the true value (the fractional error in ulps of the
 * result, measured against the double) and so at most 1 ulp from the
 * double rounded to float; tanh(-x) is -tanh(x) bit for bit; and the
 * kernel, whose loop the compiler vectorizes, gives the bits that the
 * scalar code gives (a vector lane and a loop's tail must agree, or a
 * result would depend on where a tile starts).
 *
 * Which floats: GRAFT_TEST_TANH_POINTS non-negative bit patterns spread
 * evenly over [0, 2^31) (an odd stride, so that low mantissa bits vary),
 * each with its negative; 2^31 or more checks every float (the stress
 * suite does: about two minutes).  The regular run samples 2^22 and adds
 * every float where the method changes: the first subnormals, around
 * each point where the reduction's n steps (2|x| = (k + 1/2) ln 2), and
 * from 8.5 to 10.5 (tanh rounds to 1 from 9.01 on; the argument is
 * clamped to 10). */
#include <float.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "testutil.h"
#include "kernels/kernels_int.h"
#include "kernels/special.h"

#define BLOCK 4099 /* odd, so the kernel's vector loops end in a tail */

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The scalar code: a call per element keeps this loop from being
 * vectorized, whatever the compiler does with the kernel's. */
static __attribute__((noinline)) float scalar_tanhf(float x) { return graft__special_tanhf(x); }

/* The TANH kernel over x[0, n) into y, called in two pieces so that the
 * second starts at an element that is not a multiple of a vector's lanes. */
static void kernel_tanhf(const float *x, float *y, int64_t n) {
  const int64_t shape[1] = {n};
  graft__node node;
  memset(&node, 0, sizeof node);
  node.op = GRAFT__OP_TANH;
  node.dtype = GRAFT_F32;
  node.rank = 1;
  node.n_in = 1;
  graft__tview vx = {(void *)x, n, GRAFT_F32, 1, shape};
  graft__tview vy = {y, n, GRAFT_F32, 1, shape};
  const graft__tview *vin[1] = {&vx};
  char msg[GRAFT__MSG_LEN] = "";
  graft__kargs k;
  memset(&k, 0, sizeof k);
  k.node = &node;
  k.n_in = 1;
  k.in = vin;
  k.out = &vy;
  k.msg = msg;
  k.units = n;
  const int64_t cut = n < 3 ? n : 3;
  if (graft__k_TANH(&k, 0, cut) != GRAFT_OK || graft__k_TANH(&k, cut, n) != GRAFT_OK)
    fail_msg("TANH kernel on %lld elements: %s", (long long)n, msg);
}

/* What a sweep found: the first failure (its message), the largest error
 * in ulps of the result, and how many results differ from the rounded
 * double. */
typedef struct sweep {
  char fail[256];
  double max_ulps;
  float worst;
  int64_t checked, off_by_one;
} sweep;

/* |y - t| in ulps of the float y, t the true value (a double). */
static double ulps_off(float y, double t) {
  double ay = fabs((double)y);
  /* a power of two's ulp below it is half the one above: use the one on
   * t's side */
  double ulp = fabs(t) < ay ? ay - (double)nextafterf((float)ay, 0.0f)
                            : (double)nextafterf((float)ay, INFINITY) - ay;
  return fabs((double)y - t) / ulp;
}

static void check_one(sweep *s, float x, float got, float neg_got) {
  char why[160] = "";
  if (x != x) {
    if (got == got || neg_got == neg_got) snprintf(why, sizeof why, "NaN gives %a, -NaN %a", got, neg_got);
  } else {
    const double t = tanh((double)x);
    const float want = (float)t, scalar = scalar_tanhf(x);
    const uint32_t g = bits_of(got), w = bits_of(want);
    const double off = ulps_off(got, t);
    if (g != bits_of(scalar))
      snprintf(why, sizeof why, "kernel gives %a, the scalar code %a", got, scalar);
    else if (bits_of(neg_got) != (g ^ 0x80000000u))
      snprintf(why, sizeof why, "tanh(-x) = %a, tanh(x) = %a: not odd", neg_got, got);
    else if ((g > w ? g - w : w - g) > 1 || off >= 1.0)
      snprintf(why, sizeof why, "%a, want %a (%.3f ulps off the true value)", got, want, off);
    if (off > s->max_ulps) {
      s->max_ulps = off;
      s->worst = x;
    }
    s->off_by_one += g != w;
  }
  s->checked++;
  if (why[0] && !s->fail[0]) snprintf(s->fail, sizeof s->fail, "x = %a (bits 0x%08x): %s", x, bits_of(x), why);
}

/* Patterns first, first + stride, ... below end (all < 2^31), each and its
 * negative through the kernel. */
static void sweep_bits(sweep *s, uint64_t first, uint64_t end, uint64_t stride) {
  static float x[BLOCK], nx[BLOCK], y[BLOCK], ny[BLOCK];
  for (uint64_t u = first; u < end;) {
    int n = 0;
    for (; n < BLOCK && u < end; n++, u += stride) {
      x[n] = float_of((uint32_t)u);
      nx[n] = float_of((uint32_t)u | 0x80000000u);
    }
    kernel_tanhf(x, y, n);
    kernel_tanhf(nx, ny, n);
    for (int i = 0; i < n; i++) check_one(s, x[i], y[i], ny[i]);
  }
}

static void sweep_report(const sweep *s, const char *what) {
  print_message("%s: %lld floats and their negatives, max error %.4f ulp (at %a), %lld differ by 1 ulp "
                "from tanh() in double rounded to float\n",
                what, (long long)s->checked, s->max_ulps, s->worst, (long long)s->off_by_one);
  if (s->fail[0]) fail_msg("%s: %s", what, s->fail);
}

/* Signed zeros keep their sign, infinities give +-1 and the largest
 * floats too, subnormals and tiny normals give themselves, every kind of
 * NaN gives NaN: through the kernel and the scalar code. */
static void test_special_tanhf__special_values(void **state) {
  (void)state;
  static const struct {
    uint32_t x, want; /* want 0xffffffff: any NaN */
  } cases[] = {
      {0x00000000u, 0x00000000u}, /* +0 */
      {0x80000000u, 0x80000000u}, /* -0 */
      {0x7f800000u, 0x3f800000u}, /* +inf -> 1 */
      {0xff800000u, 0xbf800000u}, /* -inf -> -1 */
      {0x7f7fffffu, 0x3f800000u}, /* FLT_MAX -> 1 */
      {0xff7fffffu, 0xbf800000u},
      {0x41200000u, 0x3f800000u}, /* 10, the clamp */
      {0x41180000u, 0x3f800000u}, /* 9.5 (9 gives 0x1.fffffep-1) */
      {0x00000001u, 0x00000001u}, /* the smallest subnormal */
      {0x80000001u, 0x80000001u},
      {0x007fffffu, 0x007fffffu}, /* the largest subnormal */
      {0x00800000u, 0x00800000u}, /* FLT_MIN */
      {0x39800000u, 0x39800000u}, /* 2^-12: tanh x = x (1 - x^2/3), x^2/3 below half an ulp */
      {0x7fc00000u, 0xffffffffu}, /* quiet NaN */
      {0xffc00000u, 0xffffffffu}, /* negative quiet NaN */
      {0x7f800001u, 0xffffffffu}, /* signalling NaN */
      {0x7fffffffu, 0xffffffffu}, /* the largest payload */
  };
  enum { N = sizeof cases / sizeof cases[0] };
  float x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = float_of(cases[i].x);
  kernel_tanhf(x, y, N);
  for (int i = 0; i < N; i++) {
    float s = scalar_tanhf(x[i]);
    if (cases[i].want == 0xffffffffu) {
      if (y[i] == y[i] || s == s) fail_msg("tanh(bits 0x%08x) = %a (scalar %a), want NaN", cases[i].x, y[i], s);
    } else if (bits_of(y[i]) != cases[i].want || bits_of(s) != cases[i].want) {
      fail_msg("tanh(%a) = %a (scalar %a), want %a", x[i], y[i], s, float_of(cases[i].want));
    }
  }
}

/* GRAFT_TEST_TANH_POINTS patterns over every non-negative one (NaNs
 * included), with their negatives. */
static void test_special_tanhf__sweep(void **state) {
  (void)state;
  const uint64_t all = 1ull << 31;
  const uint64_t points = (uint64_t)tu_env_count("GRAFT_TEST_TANH_POINTS", 1 << 22);
  const uint64_t stride = points >= all ? 1 : (all / points) | 1;
  sweep s = {.max_ulps = 0};
  sweep_bits(&s, 0, all, stride);
  char what[96];
  snprintf(what, sizeof what, "%s sweep (stride %llu)", stride == 1 ? "exhaustive" : "sampled",
           (unsigned long long)stride);
  sweep_report(&s, what);
}

/* Every float where the method changes: the first 2^16 subnormals and
 * the first 2^16 normals, 2^15 floats either side of each 2|x| = (k +
 * 1/2) ln 2, k = 0..28, where r jumps from ln 2 / 2 to -ln 2 / 2, and
 * [8.5, 10.5]. */
static void test_special_tanhf__seams(void **state) {
  (void)state;
  sweep s = {.max_ulps = 0};
  sweep_bits(&s, 0, 1u << 16, 1);
  sweep_bits(&s, 0x00800000u, 0x00800000u + (1u << 16), 1);
  for (int k = 0; k <= 28; k++) {
    uint32_t mid = bits_of((float)((k + 0.5) * 0.69314718055994530942 / 2));
    sweep_bits(&s, mid - (1u << 15), mid + (1u << 15), 1);
  }
  sweep_bits(&s, bits_of(8.5f), bits_of(10.5f) + 1, 1);
  sweep_report(&s, "seams");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_special_tanhf__special_values),
      cmocka_unit_test(test_special_tanhf__seams),
      cmocka_unit_test(test_special_tanhf__sweep),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
