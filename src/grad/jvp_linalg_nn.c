/* JVP rules of matmul and the softmax family. */
#include "grad/grad.h"

/* d op(A) op(B) = op(dA) op(B) + op(A) op(dB): the product is bilinear, so
 * each term is the same matmul (same flags) with one operand replaced by
 * its tangent; a NULL tangent drops its term.  Each term has the batch dims
 * of A and B broadcast together, i.e. y's. */
graft_value *graft__jvp_MATMUL(graft_trace *t, const graft__node *n, graft_value *const *in,
                               graft_value *y, graft_value *const *tin) {
  unsigned flags = n->attr.matmul.flags;
  graft_value *r = NULL;
  if (tin[0]) r = graft_matmul(t, tin[0], in[1], flags);
  if (tin[1]) {
    graft_value *b = graft_matmul(t, in[0], tin[1], flags);
    r = r ? graft_add(t, r, b) : b;
  }
  return r ? graft__jvp_to_shape(t, r, y) : NULL;
}

/* dy = y * (t - sum(t * y)) along the axis (the softmax Jacobian
 * diag(y) - y y^T applied to t; it is symmetric, so this mirrors the VJP). */
graft_value *graft__jvp_SOFTMAX(graft_trace *t, const graft__node *n, graft_value *const *in,
                                graft_value *y, graft_value *const *tin) {
  (void)in;
  graft_value *tx = tin[0];
  if (!tx) return NULL;
  int axis = n->attr.axis.axis;
  graft_value *dot = graft_reduce_sum(t, graft_mul(t, tx, y), 1, &axis, 1);
  return graft_mul(t, y, graft_sub(t, tx, dot));
}

/* dy = t - sum(softmax(x) * t) along the axis, with softmax(x) = exp(y). */
graft_value *graft__jvp_LOG_SOFTMAX(graft_trace *t, const graft__node *n, graft_value *const *in,
                                    graft_value *y, graft_value *const *tin) {
  (void)in;
  graft_value *tx = tin[0];
  if (!tx) return NULL;
  int axis = n->attr.axis.axis;
  graft_value *dot = graft_reduce_sum(t, graft_mul(t, graft_exp(t, y), tx), 1, &axis, 1);
  return graft_sub(t, tx, dot);
}

/* loss = mean_i (lse(logits_i) - logits[i, labels[i]]), so
 * dloss = sum((softmax(logits) - one_hot(labels)) * t) / N, a rank-0 value.
 * N is a trace-time constant when the batch dim is concrete, else counted
 * in the graph (the sum of a ones vector of the batch's length), as in the
 * VJP.  1/N scales the elements before the sum, so N = 0 gives 0 (as the
 * loss itself does), not 0 * inf.  one_hot needs the class count C
 * concrete; with a symbolic C the picked tangents t[i, labels[i]] are
 * instead taken through xent(t, labels) = mean_i (lse(t_i) - t[i, labels[i]]):
 *   dloss = sum_i (sum_c p * t - lse(t_i)) / N + xent(t, labels),
 * exact and linear in t (with the right derivatives), so forward mode
 * works there too.  The labels are integers: no tangent. */
graft_value *graft__jvp_SOFTMAX_XENT(graft_trace *t, const graft__node *n, graft_value *const *in,
                                     graft_value *y, graft_value *const *tin) {
  (void)n, (void)y;
  graft_value *logits = in[0], *labels = in[1], *tx = tin[0];
  if (!tx) return NULL;
  const int64_t *s = graft_value_shape(logits);
  graft_dtype dt = graft_value_dtype(logits);
  graft_value *inv_n = graft__grad_inv_count(t, logits, 1, s);
  graft_value *p = graft_softmax(t, logits, 1);
  if (GRAFT_DIM_IS_SYM(s[1])) {
    int axis = 1;
    graft_value *row = graft_sub(t, graft_reduce_sum(t, graft_mul(t, p, tx), 1, &axis, 0),
                                 graft_logsumexp(t, tx, 1, &axis, 0)); /* [N] */
    return graft_add(t, graft_reduce_sum(t, graft_mul(t, row, inv_n), 0, NULL, 0),
                     graft_softmax_cross_entropy(t, tx, labels));
  }
  graft_value *diff = graft_sub(t, p, graft_one_hot(t, labels, s[1], dt));
  return graft_reduce_sum(t, graft_mul(t, graft_mul(t, diff, tx), inv_n), 0, NULL, 0);
}
