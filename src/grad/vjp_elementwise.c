/* VJP rules of the elementwise ops.
 *
 * Every rule is built from public graft ops that have rules of their own,
 * so gradients of gradients work.  Where the forward output y gives the
 * derivative more cheaply than x does, the rule reads y.  Binary ops
 * broadcast, so each input's share is summed back to its shape.
 *
 * Kinks and ties pick one side, never NaN: relu'(0) = 0, abs'(0) = 0,
 * maximum/minimum send a tie to b.  Poles keep their math (sqrt'(0) = inf,
 * log'(0) = inf); pow's exponent gradient is 0 where the base is <= 0
 * (at every order: its base gradient is then constant in the exponent)
 * and its base gradient 0 at a = b = 0, rather than NaN. */
#include "grad/grad.h"

#define UNUSED_(x) (void)(x)

/* gx[0] = g * d, d the local derivative. */
static void chain(graft_trace *t, graft_value *g, graft_value *d, graft_value **gx) {
  gx[0] = graft_mul(t, g, d);
}

/* Each binary input's share, reduced to its own shape. */
static void set2(graft_trace *t, graft_value *const *in, graft_value *ga, graft_value *gb,
                 graft_value **gx) {
  gx[0] = graft__grad_unbroadcast(t, ga, in[0]);
  gx[1] = graft__grad_unbroadcast(t, gb, in[1]);
}

/* Rules with no gradient: the output is piecewise constant in its inputs
 * (sign, comparisons) or gradients are blocked on purpose. */
#define NO_GRAD_(e)                                                                     \
  void graft__vjp_##e(graft_trace *t, const graft__node *n, graft_value *const *in,  \
                      graft_value *y, graft_value *g, graft_value **gx) {             \
    UNUSED_(t), UNUSED_(n), UNUSED_(in), UNUSED_(y), UNUSED_(g), UNUSED_(gx);          \
  }
NO_GRAD_(SIGN)
NO_GRAD_(STOP_GRADIENT)
NO_GRAD_(GREATER)
NO_GRAD_(LESS)
NO_GRAD_(EQUAL)
#undef NO_GRAD_

/* Every remaining rule has this signature. */
#define RULE_(e)                                                                     \
  void graft__vjp_##e(graft_trace *t, const graft__node *n, graft_value *const *in, \
                      graft_value *y, graft_value *g, graft_value **gx)

/* ---- unary ------------------------------------------------------------- */

RULE_(NEG) {
  UNUSED_(n), UNUSED_(in), UNUSED_(y);
  gx[0] = graft_neg(t, g);
}

RULE_(SQUARE) {
  UNUSED_(n), UNUSED_(y);
  chain(t, g, graft_mul(t, in[0], graft__grad_scalar(t, g, 2)), gx);
}

/* 1 / (2 sqrt x): inf at x = 0, as the math says. */
RULE_(SQRT) {
  UNUSED_(n), UNUSED_(in);
  gx[0] = graft_div(t, g, graft_mul(t, y, graft__grad_scalar(t, g, 2)));
}

RULE_(EXP) {
  UNUSED_(n), UNUSED_(in);
  chain(t, g, y, gx);
}

RULE_(LOG) {
  UNUSED_(n), UNUSED_(y);
  gx[0] = graft_div(t, g, in[0]);
}

RULE_(LOG1P) {
  UNUSED_(n), UNUSED_(y);
  gx[0] = graft_div(t, g, graft_add(t, in[0], graft__grad_scalar(t, g, 1)));
}

RULE_(TANH) {
  UNUSED_(n), UNUSED_(in);
  chain(t, g, graft_sub(t, graft__grad_scalar(t, g, 1), graft_square(t, y)), gx);
}

RULE_(SIGMOID) {
  UNUSED_(n), UNUSED_(in);
  chain(t, g, graft_mul(t, y, graft_sub(t, graft__grad_scalar(t, g, 1), y)), gx);
}

/* Subgradient 0 at the kink. */
RULE_(RELU) {
  UNUSED_(n), UNUSED_(y);
  gx[0] = graft__grad_mask(t, graft_greater(t, in[0], graft__grad_scalar(t, g, 0)), g);
}

/* sign(0) = 0: subgradient 0 at the kink. */
RULE_(ABS) {
  UNUSED_(n), UNUSED_(y);
  chain(t, g, graft_sign(t, in[0]), gx);
}

RULE_(SIN) {
  UNUSED_(n), UNUSED_(y);
  chain(t, g, graft_cos(t, in[0]), gx);
}

RULE_(COS) {
  UNUSED_(n), UNUSED_(y);
  gx[0] = graft_neg(t, graft_mul(t, g, graft_sin(t, in[0])));
}

/* sec^2 x = 1 + tan^2 x, from y. */
RULE_(TAN) {
  UNUSED_(n), UNUSED_(in);
  chain(t, g, graft_add(t, graft__grad_scalar(t, g, 1), graft_square(t, y)), gx);
}

RULE_(LGAMMA) {
  UNUSED_(n), UNUSED_(y);
  chain(t, g, graft_digamma(t, in[0]), gx);
}

RULE_(DIGAMMA) {
  UNUSED_(n), UNUSED_(y);
  chain(t, g, graft_polygamma(t, 1, in[0]), gx);
}

/* Order 170 has no representable next order: graft_polygamma fails the
 * trace for n + 1 = 171. */
RULE_(POLYGAMMA) {
  UNUSED_(y);
  chain(t, g, graft_polygamma(t, n->attr.polygamma.n + 1, in[0]), gx);
}

/* Only float -> float carries a gradient; integers are not differentiable. */
RULE_(CAST) {
  UNUSED_(n), UNUSED_(y);
  graft_dtype from = graft_value_dtype(in[0]);
  if (from == GRAFT_F32 || from == GRAFT_F64) gx[0] = graft_cast(t, g, from);
}

/* ---- binary ------------------------------------------------------------ */

RULE_(ADD) {
  UNUSED_(n), UNUSED_(y);
  set2(t, in, g, g, gx);
}

RULE_(SUB) {
  UNUSED_(n), UNUSED_(y);
  set2(t, in, g, graft_neg(t, g), gx);
}

RULE_(MUL) {
  UNUSED_(n), UNUSED_(y);
  set2(t, in, graft_mul(t, g, in[1]), graft_mul(t, g, in[0]), gx);
}

/* d(a/b)/db = -a/b^2 = -(1/b) y, so db = -da y. */
RULE_(DIV) {
  UNUSED_(n);
  graft_value *ga = graft_div(t, g, in[1]);
  set2(t, in, ga, graft_neg(t, graft_mul(t, ga, y)), gx);
}

/* da = g b a^(b-1), taken as 0 at a = b = 0 (a^0 is constant; the
 * formula is 0 * inf there).  db = g log(a) y, taken as 0 where a <= 0: at
 * a = 0 the limit of y log a is 0 for b > 0, and a < 0 has no real
 * derivative in b; so where a <= 0, da is also held constant in b, and the
 * mixed partials agree (0 both ways).  Each masked branch also gets a safe
 * argument (b - 1 -> 0, a -> 1) so that its own gradient, which higher
 * derivatives multiply by 0, is finite rather than inf (0 * inf = NaN).
 * The factors are graft__grad_pow_da and graft__grad_pow_loga, shared with
 * the JVP. */
RULE_(POW) {
  UNUSED_(n);
  graft_value *a = in[0], *b = in[1];
  graft_value *zero = graft__grad_scalar(t, g, 0), *one = graft__grad_scalar(t, g, 1);
  graft_value *da = graft__grad_pow_da(t, a, b, zero, one);
  graft_value *loga = graft__grad_pow_loga(t, a, zero, one);
  set2(t, in, graft_mul(t, g, da), graft_mul(t, graft_mul(t, g, loga), y), gx);
}

/* Ties (a == b) send the whole gradient to b; so do NaNs. */
RULE_(MAXIMUM) {
  UNUSED_(n), UNUSED_(y);
  graft_value *c = graft_greater(t, in[0], in[1]);
  set2(t, in, graft__grad_mask(t, c, g), graft__grad_mask_not(t, c, g), gx);
}

RULE_(MINIMUM) {
  UNUSED_(n), UNUSED_(y);
  graft_value *c = graft_less(t, in[0], in[1]);
  set2(t, in, graft__grad_mask(t, c, g), graft__grad_mask_not(t, c, g), gx);
}

/* a b + c: each input's share summed back to its shape. */
RULE_(MUL_ADD) {
  UNUSED_(n), UNUSED_(y);
  gx[0] = graft__grad_unbroadcast(t, graft_mul(t, g, in[1]), in[0]);
  gx[1] = graft__grad_unbroadcast(t, graft_mul(t, g, in[0]), in[1]);
  gx[2] = graft__grad_unbroadcast(t, g, in[2]);
}

/* The condition gets nothing. */
RULE_(WHERE) {
  UNUSED_(n), UNUSED_(y);
  gx[1] = graft__grad_unbroadcast(t, graft__grad_mask(t, in[0], g), in[1]);
  gx[2] = graft__grad_unbroadcast(t, graft__grad_mask_not(t, in[0], g), in[2]);
}
