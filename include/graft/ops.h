/* graft: ops.
 *
 * Every op takes the trace first and returns a new value, or a poison value
 * after recording an error on the trace (see trace.h).  No op ever aborts.
 *
 * Dtypes: binary ops need both operands of one dtype (no implicit
 * promotion; use graft_cast).  f32 and f64 are supported by every op; i32 by
 * add, sub, mul, neg, abs, sign, square, maximum, minimum, greater, less,
 * equal, where, reduce_sum, reduce_max, reduce_prod, the shape ops, cast,
 * one_hot (labels) and softmax_cross_entropy (labels).  Comparisons return
 * their operands' dtype holding 1 or 0.
 *
 * Special values: float ops follow IEEE 754 and C99 Annex F (NaN in, NaN
 * out; 1/0 = inf; -0.0 kept where the math keeps it), with the choices
 * stated at each op.  i32 add, sub, mul, neg, square and abs wrap modulo
 * 2^32 (abs(INT32_MIN) = INT32_MIN).
 *
 * Broadcasting follows NumPy: shapes are aligned on the right; a dim of 1
 * stretches; missing leading dims count as 1.
 *
 * Sizes: every value (an op's output, a constant) holds at most 2^48
 * bytes, and a plan's values together at most 2^62 (GRAFT_ESHAPE when an
 * element count overflows int64, GRAFT_ENOMEM past a limit); a shape with a
 * 0 dim has no elements, but its other dims must fit the limit as if it
 * were full (GRAFT_ESHAPE otherwise).  Shapes with symbolic dims
 * are checked again once a call binds them.  Shape arithmetic (concat's
 * sum, slice and pad bounds, reshape's product) never wraps.
 */
#ifndef GRAFT_OPS_H
#define GRAFT_OPS_H

#include <stdint.h>

#include "graft/status.h"
#include "graft/tensor.h"
#include "graft/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of graft_matmul. */
#define GRAFT_TRANS_A 1u
#define GRAFT_TRANS_B 2u

/* ---- leaves ---------------------------------------------------------- */
/* Rank-0 constant.  Inside a control-flow body it is traced in the
 * function's own trace and captured, so a loop does not fill it again each
 * iteration (the same for graft_fill of rank 0). */
GRAFT_API graft_value *graft_scalar(graft_trace *t, graft_dtype dt, double v);
/* Constant copied from host data (row-major, dt elements). */
GRAFT_API graft_value *graft_constant(graft_trace *t, graft_dtype dt, int rank,
                                      const int64_t *shape, const void *data);
/* Constant of the given shape (dims may be symbols) filled with v. */
GRAFT_API graft_value *graft_fill(graft_trace *t, graft_dtype dt, int rank,
                                  const int64_t *shape, double v);
GRAFT_API graft_value *graft_zeros_like(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_ones_like(graft_trace *t, graft_value *x);

/* ---- elementwise binary (broadcasting) --------------------------------
 * add, sub, mul, div (and mul_add below): a NaN result is always the quiet
 * NaN of C's NAN, whatever the operands' NaN payloads and signs, so that it
 * has the same bits whatever the tiles, threads, fusion and compiler. */
GRAFT_API graft_value *graft_add(graft_trace *t, graft_value *a, graft_value *b);
GRAFT_API graft_value *graft_sub(graft_trace *t, graft_value *a, graft_value *b);
GRAFT_API graft_value *graft_mul(graft_trace *t, graft_value *a, graft_value *b);
GRAFT_API graft_value *graft_div(graft_trace *t, graft_value *a, graft_value *b);
/* a ** b, real: a < 0 with non-integer b gives NaN as in C pow(). */
GRAFT_API graft_value *graft_pow(graft_trace *t, graft_value *a, graft_value *b);
/* NaN in either operand gives NaN.  Equal operands (0.0 and -0.0
 * included) give b, and the gradient of a tie goes to b. */
GRAFT_API graft_value *graft_maximum(graft_trace *t, graft_value *a, graft_value *b);
GRAFT_API graft_value *graft_minimum(graft_trace *t, graft_value *a, graft_value *b);
/* a > b, a < b, a == b: 0 when either operand is NaN; 0.0 == -0.0. */
GRAFT_API graft_value *graft_greater(graft_trace *t, graft_value *a, graft_value *b);
GRAFT_API graft_value *graft_less(graft_trace *t, graft_value *a, graft_value *b);
GRAFT_API graft_value *graft_equal(graft_trace *t, graft_value *a, graft_value *b);
/* cond != 0 ? a : b, all three broadcast together; cond may have any dtype,
 * a and b share theirs.  A NaN cond counts as nonzero, -0.0 as zero; the
 * chosen element is copied bit for bit. */
GRAFT_API graft_value *graft_where(graft_trace *t, graft_value *cond,
                                   graft_value *a, graft_value *b);
/* a * b + c, all three broadcast together (f32 or f64, one dtype).  The
 * product is rounded before the sum, so the result is bitwise that of
 * graft_add(graft_mul(a, b), c), in one pass over the operands.
 * graft_assign_sub(v, s * g) and graft_assign_add with a scalar s and g
 * shaped like v use it on their own. */
GRAFT_API graft_value *graft_mul_add(graft_trace *t, graft_value *a, graft_value *b,
                                     graft_value *c);

/* ---- elementwise unary ------------------------------------------------ */
GRAFT_API graft_value *graft_neg(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_square(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_sqrt(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_exp(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_log(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_log1p(graft_trace *t, graft_value *x);
/* f32: within 0.51 ulp of the true tanh (every float checked), not always
 * libm's tanhf bits; tanh(-0) = -0, tanh(+-inf) = +-1.  f64: C tanh. */
GRAFT_API graft_value *graft_tanh(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_sigmoid(graft_trace *t, graft_value *x);
/* max(x, 0), keeping NaN; relu(-0.0) = 0.0. */
GRAFT_API graft_value *graft_relu(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_abs(graft_trace *t, graft_value *x);
/* -1, 0 or 1; NaN and the sign of a zero pass through (sign(-0.0) = -0.0). */
GRAFT_API graft_value *graft_sign(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_sin(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_cos(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_tan(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_lgamma(graft_trace *t, graft_value *x);
GRAFT_API graft_value *graft_digamma(graft_trace *t, graft_value *x);
/* n-th derivative of digamma, 0 <= n <= 170 (n = 0 is digamma; larger n
 * overflow n!).  Poles: NaN where the one-sided limits differ, else +inf. */
GRAFT_API graft_value *graft_polygamma(graft_trace *t, int n, graft_value *x);
/* Identity whose gradient and tangent are zero (blocks both modes). */
GRAFT_API graft_value *graft_stop_gradient(graft_trace *t, graft_value *x);
/* Float -> i32 truncates toward zero, NaN gives 0, and values beyond the
 * range (infinities too) saturate to INT32_MIN / INT32_MAX.  f64 -> f32
 * and i32 -> float round to nearest (f64 beyond the f32 range gives inf). */
GRAFT_API graft_value *graft_cast(graft_trace *t, graft_value *x, graft_dtype to);

/* ---- reductions: n_axes 0 (axes NULL) = all axes; negative axes count
 * from the end; each axis at most once.  keepdims keeps reduced dims as 1.
 * An empty reduction gives the identity: sum 0, prod 1, max -inf (i32:
 * INT32_MIN), logsumexp -inf; its mean is NaN.  A NaN in a group makes
 * its result NaN (max and logsumexp included); logsumexp of a group whose
 * max is infinite is that max.  A NaN result is always the quiet NaN of
 * C's NAN (whatever the input NaNs' payloads and signs), so it has the
 * same bits for every executor, tile grain and compiler. */
GRAFT_API graft_value *graft_reduce_sum(graft_trace *t, graft_value *x, int n_axes,
                                        const int *axes, int keepdims);
GRAFT_API graft_value *graft_reduce_mean(graft_trace *t, graft_value *x, int n_axes,
                                         const int *axes, int keepdims);
GRAFT_API graft_value *graft_reduce_max(graft_trace *t, graft_value *x, int n_axes,
                                        const int *axes, int keepdims);
GRAFT_API graft_value *graft_reduce_prod(graft_trace *t, graft_value *x, int n_axes,
                                         const int *axes, int keepdims);
GRAFT_API graft_value *graft_logsumexp(graft_trace *t, graft_value *x, int n_axes,
                                       const int *axes, int keepdims);

/* ---- linear algebra --------------------------------------------------- */
/* a @ b on the last two dims (rank >= 2 each); leading (batch) dims
 * broadcast.  GRAFT_TRANS_A / GRAFT_TRANS_B transpose the last two dims of a
 * / b first.  f32 and f64 (CBLAS: each matrix dim at most INT_MAX, else
 * GRAFT_EUNSUPPORTED). */
GRAFT_API graft_value *graft_matmul(graft_trace *t, graft_value *a, graft_value *b,
                                    unsigned flags);

/* ---- shape ops -------------------------------------------------------- */
/* perm: a permutation of 0..rank-1; NULL reverses the dims. */
GRAFT_API graft_value *graft_transpose(graft_trace *t, graft_value *x, const int *perm);
/* One dim may be -1 (inferred); dims may be symbols of this trace. */
GRAFT_API graft_value *graft_reshape(graft_trace *t, graft_value *x, int rank,
                                     const int64_t *shape);
GRAFT_API graft_value *graft_broadcast_to(graft_trace *t, graft_value *x, int rank,
                                          const int64_t *shape);
/* Sum x down to shape (the inverse of broadcasting, for gradients): shape
 * must broadcast to x's shape. */
GRAFT_API graft_value *graft_sum_to_shape(graft_trace *t, graft_value *x, int rank,
                                          const int64_t *shape);
/* x[begin[i] : begin[i] + size[i]] on every dim; size[i] = -1 means "to the
 * end"; a size may be a symbol of this trace. */
GRAFT_API graft_value *graft_slice(graft_trace *t, graft_value *x,
                                   const int64_t *begin, const int64_t *size);
/* Zero padding, the inverse of slice: a value of the given shape (dims may
 * be symbols) holding x at offset begin and 0 elsewhere; x must fit. */
GRAFT_API graft_value *graft_pad(graft_trace *t, graft_value *x, const int64_t *begin, int rank,
                                 const int64_t *shape);
/* Join n >= 1 values of one dtype and rank along axis (negative: from the
 * end); other dims must match. */
GRAFT_API graft_value *graft_concat(graft_trace *t, int n, graft_value *const *xs,
                                    int axis);
/* labels (i32, any shape) -> labels.shape + [depth] of dtype dt, 1 where
 * the label matches, 0 elsewhere (labels outside [0, depth) give a zero row). */
GRAFT_API graft_value *graft_one_hot(graft_trace *t, graft_value *labels,
                                     int64_t depth, graft_dtype dt);

/* ---- neural-network ops ---------------------------------------------- */
/* Along axis (negative: from the end).  A row (the elements along axis)
 * holding NaN, or whose max is infinite (inf - inf), gives a NaN row; -inf
 * beside finite values gives 0 (log_softmax: -inf). */
GRAFT_API graft_value *graft_softmax(graft_trace *t, graft_value *x, int axis);
GRAFT_API graft_value *graft_log_softmax(graft_trace *t, graft_value *x, int axis);
/* logits [N, C] (f32/f64), labels [N] (i32 in [0, C)): the mean over the
 * batch of -log_softmax(logits)[i, labels[i]], computed stably; a rank-0
 * value.  A label outside [0, C) makes the call fail with GRAFT_EINVAL,
 * changing no variable, even when no output needs the loss (a step that
 * outputs only its updates or gradients): ops that can fail on data are
 * never pruned.
 * A row's log-sum-exp is its max when that is infinite: a -inf logit at
 * the label costs +inf, a +inf logit elsewhere +inf, a +inf logit at the
 * label NaN (inf - inf); a NaN logit makes the loss NaN.  An empty batch
 * (N = 0) gives 0. */
GRAFT_API graft_value *graft_softmax_cross_entropy(graft_trace *t, graft_value *logits,
                                                   graft_value *labels);

/* ---- convolution and pooling (NCHW) ----------------------------------- */
/* Pairs are (H, W).  Output extent per spatial dim:
 *   (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1
 * (rounded down); the dilated kernel must fit the padded input.  Inputs
 * are f32 or f64 of rank 4 whose C, H and W are concrete; the batch dim N
 * may be a symbol (one trace for every batch size).  Bad arguments fail
 * the trace (GRAFT_EINVAL, GRAFT_ESHAPE; GRAFT_EUNSUPPORTED past the BLAS
 * int range) with a message naming the op, the shapes and what was
 * expected. */

/* 2-D convolution (cross-correlation, as in PyTorch): x [N, C, H, W], w
 * [O, C / groups, KH, KW] of x's dtype -> [N, O, OH, OW].  stride and
 * dilation >= 1 (NULL: 1, 1), padding >= 0 zeros on both sides (NULL: 0,
 * 0); groups >= 1 divides C and O (groups == C: depthwise).  No bias: add
 * one by broadcasting ([1, O, 1, 1]).  Runs as im2col and one gemm per
 * group over the whole batch (CBLAS), with VJP and JVP rules of any order.
 * Results are bitwise the same for every thread count. */
GRAFT_API graft_value *graft_conv2d(graft_trace *t, graft_value *x, graft_value *w,
                                    const int64_t stride[2], const int64_t padding[2],
                                    const int64_t dilation[2], int64_t groups);
/* Max over kernel windows: x [N, C, H, W] -> [N, C, OH, OW].  kernel >= 1,
 * stride >= 1 (NULL: the kernel), padding between 0 and kernel / 2 (NULL:
 * 0); padding never wins.  A NaN in a window gives NaN.  Ties: the first
 * maximum in window order (row by row) is the argmax, which takes the
 * whole gradient (VJP) and gives the tangent (JVP). */
GRAFT_API graft_value *graft_max_pool2d(graft_trace *t, graft_value *x, const int64_t kernel[2],
                                        const int64_t stride[2], const int64_t padding[2]);
/* Mean over kernel windows, arguments as graft_max_pool2d.  Padding counts
 * as zeros and every window divides by KH * KW (PyTorch's default,
 * count_include_pad=True). */
GRAFT_API graft_value *graft_avg_pool2d(graft_trace *t, graft_value *x, const int64_t kernel[2],
                                        const int64_t stride[2], const int64_t padding[2]);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_OPS_H */
