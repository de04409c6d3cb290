/* JVP rules of the elementwise ops.
 *
 * Each rule pushes the input tangents forward directly (no transposed VJP),
 * with the math and conventions of vjp_elementwise.c: where the forward
 * output y gives the derivative more cheaply than x does, the rule reads
 * y; kinks and ties pick one side (relu'(0) = 0, abs'(0) = 0, a tie of
 * maximum/minimum goes to b); poles keep their math; pow's terms are
 * guarded by the same double where as its VJP.
 *
 * A NULL tangent is a symbolic zero: terms it would contribute are skipped,
 * never materialized, and a rule whose every term is zero returns NULL.
 * Binary ops broadcast, so a result formed from one smaller input's
 * tangent alone is broadcast to y's shape (graft__jvp_to_shape); any term
 * that also involves a full-shaped operand already has y's shape.
 */
#include "grad/grad.h"

#define UNUSED_(x) (void)(x)

/* a + b with NULL as zero. */
static graft_value *sum2(graft_trace *t, graft_value *a, graft_value *b) {
  if (!a) return b;
  if (!b) return a;
  return graft_add(t, a, b);
}

/* v broadcast to y's shape; NULL stays NULL. */
static graft_value *shaped(graft_trace *t, graft_value *v, graft_value *y) {
  return v ? graft__jvp_to_shape(t, v, y) : NULL;
}

/* Rules with no tangent: the output is piecewise constant in its inputs
 * (sign, comparisons) or derivatives are blocked on purpose. */
#define NO_TANGENT_(e)                                                                       \
  graft_value *graft__jvp_##e(graft_trace *t, const graft__node *n, graft_value *const *in,  \
                              graft_value *y, graft_value *const *tin) {                     \
    UNUSED_(t), UNUSED_(n), UNUSED_(in), UNUSED_(y), UNUSED_(tin);                           \
    return NULL;                                                                             \
  }
NO_TANGENT_(SIGN)
NO_TANGENT_(STOP_GRADIENT)
NO_TANGENT_(GREATER)
NO_TANGENT_(LESS)
NO_TANGENT_(EQUAL)
#undef NO_TANGENT_

/* Every remaining rule has this signature. */
#define RULE_(e)                                                                             \
  graft_value *graft__jvp_##e(graft_trace *t, const graft__node *n, graft_value *const *in,  \
                              graft_value *y, graft_value *const *tin)

/* A unary rule: tx is the input's tangent (a zero tangent gives zero). */
#define UNARY_(e)                                                                            \
  static graft_value *unary_##e(graft_trace *t, const graft__node *n, graft_value *x,        \
                                graft_value *y, graft_value *tx);                            \
  RULE_(e) {                                                                                 \
    if (!tin[0]) return NULL;                                                                \
    return unary_##e(t, n, in[0], y, tin[0]);                                                \
  }                                                                                          \
  static graft_value *unary_##e(graft_trace *t, const graft__node *n, graft_value *x,        \
                                graft_value *y, graft_value *tx)

/* ---- unary ------------------------------------------------------------- */

UNARY_(NEG) {
  UNUSED_(n), UNUSED_(x), UNUSED_(y);
  return graft_neg(t, tx);
}

UNARY_(SQUARE) {
  UNUSED_(n), UNUSED_(y);
  return graft_mul(t, tx, graft_mul(t, x, graft__grad_scalar(t, tx, 2)));
}

/* tx / (2 sqrt x): inf at x = 0, as the math says. */
UNARY_(SQRT) {
  UNUSED_(n), UNUSED_(x);
  return graft_div(t, tx, graft_mul(t, y, graft__grad_scalar(t, tx, 2)));
}

UNARY_(EXP) {
  UNUSED_(n), UNUSED_(x);
  return graft_mul(t, tx, y);
}

UNARY_(LOG) {
  UNUSED_(n), UNUSED_(y);
  return graft_div(t, tx, x);
}

UNARY_(LOG1P) {
  UNUSED_(n), UNUSED_(y);
  return graft_div(t, tx, graft_add(t, x, graft__grad_scalar(t, tx, 1)));
}

UNARY_(TANH) {
  UNUSED_(n), UNUSED_(x);
  return graft_mul(t, tx, graft_sub(t, graft__grad_scalar(t, tx, 1), graft_square(t, y)));
}

UNARY_(SIGMOID) {
  UNUSED_(n), UNUSED_(x);
  return graft_mul(t, tx, graft_mul(t, y, graft_sub(t, graft__grad_scalar(t, tx, 1), y)));
}

/* 0 at the kink. */
UNARY_(RELU) {
  UNUSED_(n), UNUSED_(y);
  return graft__grad_mask(t, graft_greater(t, x, graft__grad_scalar(t, tx, 0)), tx);
}

/* sign(0) = 0: 0 at the kink. */
UNARY_(ABS) {
  UNUSED_(n), UNUSED_(y);
  return graft_mul(t, tx, graft_sign(t, x));
}

UNARY_(SIN) {
  UNUSED_(n), UNUSED_(y);
  return graft_mul(t, tx, graft_cos(t, x));
}

UNARY_(COS) {
  UNUSED_(n), UNUSED_(y);
  return graft_neg(t, graft_mul(t, tx, graft_sin(t, x)));
}

/* sec^2 x = 1 + tan^2 x, from y. */
UNARY_(TAN) {
  UNUSED_(n), UNUSED_(x);
  return graft_mul(t, tx, graft_add(t, graft__grad_scalar(t, tx, 1), graft_square(t, y)));
}

UNARY_(LGAMMA) {
  UNUSED_(n), UNUSED_(y);
  return graft_mul(t, tx, graft_digamma(t, x));
}

UNARY_(DIGAMMA) {
  UNUSED_(n), UNUSED_(y);
  return graft_mul(t, tx, graft_polygamma(t, 1, x));
}

/* Order 170 has no representable next order: graft_polygamma fails the
 * trace for n + 1 = 171, as in the VJP. */
UNARY_(POLYGAMMA) {
  UNUSED_(y);
  return graft_mul(t, tx, graft_polygamma(t, n->attr.polygamma.n + 1, x));
}

/* Only float -> float carries a tangent; integers are not differentiable. */
UNARY_(CAST) {
  UNUSED_(n);
  graft_dtype from = graft_value_dtype(x), to = graft_value_dtype(y);
  if ((from != GRAFT_F32 && from != GRAFT_F64) || (to != GRAFT_F32 && to != GRAFT_F64))
    return NULL;
  return graft_cast(t, tx, to);
}

#undef UNARY_

/* ---- binary ------------------------------------------------------------ */

RULE_(ADD) {
  UNUSED_(n), UNUSED_(in);
  return shaped(t, sum2(t, tin[0], tin[1]), y);
}

RULE_(SUB) {
  UNUSED_(n), UNUSED_(in);
  graft_value *ta = tin[0], *tb = tin[1], *r;
  if (ta && tb)
    r = graft_sub(t, ta, tb);
  else if (ta)
    r = ta;
  else if (tb)
    r = graft_neg(t, tb);
  else
    return NULL;
  return graft__jvp_to_shape(t, r, y);
}

/* ta b + a tb: each term has y's shape. */
RULE_(MUL) {
  UNUSED_(n), UNUSED_(y);
  graft_value *ra = tin[0] ? graft_mul(t, tin[0], in[1]) : NULL;
  graft_value *rb = tin[1] ? graft_mul(t, in[0], tin[1]) : NULL;
  return sum2(t, ra, rb);
}

/* (ta - y tb) / b. */
RULE_(DIV) {
  UNUSED_(n);
  graft_value *ta = tin[0], *tb = tin[1], *b = in[1];
  if (ta && tb) return graft_div(t, graft_sub(t, ta, graft_mul(t, y, tb)), b);
  if (ta) return graft_div(t, ta, b);
  if (tb) return graft_neg(t, graft_div(t, graft_mul(t, y, tb), b));
  return NULL;
}

/* ta b a^(b-1) + tb log(a) y.  As in the VJP, the base term is 0 at
 * a = b = 0 and constant in b where a <= 0, the exponent term 0 where
 * a <= 0, and each masked branch gets a safe argument (b - 1 -> 0, a -> 1)
 * so that its own derivative, which higher derivatives multiply by 0, is
 * finite rather than inf. */
RULE_(POW) {
  UNUSED_(n);
  graft_value *a = in[0], *b = in[1], *ta = tin[0], *tb = tin[1];
  graft_value *zero = graft__grad_scalar(t, y, 0), *one = graft__grad_scalar(t, y, 1);
  graft_value *ra = NULL, *rb = NULL;
  if (ta) ra = graft_mul(t, ta, graft__grad_pow_da(t, a, b, zero, one));
  if (tb) rb = graft_mul(t, graft_mul(t, tb, graft__grad_pow_loga(t, a, zero, one)), y);
  return shaped(t, sum2(t, ra, rb), y);
}

/* where(c, ta, tb) with y's shape, a NULL tangent as zero. */
static graft_value *choose(graft_trace *t, graft_value *c, graft_value *ta, graft_value *tb,
                           graft_value *y) {
  graft_value *r;
  if (ta && tb)
    r = graft_where(t, c, ta, tb);
  else if (ta)
    r = graft__grad_mask(t, c, ta);
  else if (tb)
    r = graft__grad_mask_not(t, c, tb);
  else
    return NULL;
  return graft__jvp_to_shape(t, r, y);
}

/* where(a > b, ta, tb): ties and NaNs take b's tangent, as the VJP sends
 * them b's gradient. */
RULE_(MAXIMUM) {
  UNUSED_(n);
  if (!tin[0] && !tin[1]) return NULL;
  return choose(t, graft_greater(t, in[0], in[1]), tin[0], tin[1], y);
}

RULE_(MINIMUM) {
  UNUSED_(n);
  if (!tin[0] && !tin[1]) return NULL;
  return choose(t, graft_less(t, in[0], in[1]), tin[0], tin[1], y);
}

/* ta b + a tb + tc. */
RULE_(MUL_ADD) {
  UNUSED_(n);
  graft_value *ra = tin[0] ? graft_mul(t, tin[0], in[1]) : NULL;
  graft_value *rb = tin[1] ? graft_mul(t, in[0], tin[1]) : NULL;
  graft_value *r = sum2(t, ra, rb);
  if (tin[2]) r = r ? graft_add(t, r, tin[2]) : tin[2];
  return shaped(t, r, y);
}

/* where(c, ta, tb); the condition carries no tangent. */
RULE_(WHERE) {
  UNUSED_(n);
  return choose(t, in[0], tin[1], tin[2], y);
}
