/* VJP rules of matmul and the softmax family. */
#include "grad/grad.h"

/* C = op(A) op(B).  dop(A) = g op(B)^T and dop(B) = op(A)^T g; where an
 * operand was itself transposed, its gradient is the transpose of that,
 * which (XY)^T = Y^T X^T turns into one more matmul with swapped operands.
 * The flags below pick, per case, the product that lands directly in A's
 * and B's layout, so no transpose op is emitted.  Batch dims were
 * broadcast: the products have the output's batch dims, summed back. */
void graft__vjp_MATMUL(graft_trace *t, const graft__node *n, graft_value *const *in,
                       graft_value *y, graft_value *g, graft_value **gx) {
  (void)y;
  graft_value *a = in[0], *b = in[1], *da, *db;
  const unsigned TA = GRAFT_TRANS_A, TB = GRAFT_TRANS_B;
  switch (n->attr.matmul.flags & (TA | TB)) {
  case 0: /* C = A B */
    da = graft_matmul(t, g, b, TB);           /* g B^T */
    db = graft_matmul(t, a, g, TA);           /* A^T g */
    break;
  case GRAFT_TRANS_A: /* C = A^T B */
    da = graft_matmul(t, b, g, TB);           /* (g B^T)^T = B g^T */
    db = graft_matmul(t, a, g, 0);            /* A g */
    break;
  case GRAFT_TRANS_B: /* C = A B^T */
    da = graft_matmul(t, g, b, 0);            /* g B */
    db = graft_matmul(t, g, a, TA);           /* (A^T g)^T = g^T A */
    break;
  default: /* C = A^T B^T */
    da = graft_matmul(t, b, g, TA | TB);      /* (g B)^T = B^T g^T */
    db = graft_matmul(t, g, a, TA | TB);      /* (A g)^T = g^T A^T */
    break;
  }
  gx[0] = graft__grad_unbroadcast(t, da, a);
  gx[1] = graft__grad_unbroadcast(t, db, b);
}

/* dx = y * (g - sum(g * y)) along the axis (the softmax Jacobian
 * diag(y) - y y^T applied to g). */
void graft__vjp_SOFTMAX(graft_trace *t, const graft__node *n, graft_value *const *in,
                        graft_value *y, graft_value *g, graft_value **gx) {
  (void)in;
  int axis = n->attr.axis.axis;
  graft_value *dot = graft_reduce_sum(t, graft_mul(t, g, y), 1, &axis, 1);
  gx[0] = graft_mul(t, y, graft_sub(t, g, dot));
}

/* dx = g - softmax(x) * sum(g) along the axis, with softmax(x) = exp(y). */
void graft__vjp_LOG_SOFTMAX(graft_trace *t, const graft__node *n, graft_value *const *in,
                            graft_value *y, graft_value *g, graft_value **gx) {
  (void)in;
  int axis = n->attr.axis.axis;
  graft_value *sum = graft_reduce_sum(t, g, 1, &axis, 1);
  gx[0] = graft_sub(t, g, graft_mul(t, graft_exp(t, y), sum));
}

/* loss = mean_i -log_softmax(logits)[i, labels[i]], so
 * dlogits = g * (softmax(logits) - one_hot(labels)) / N.  one_hot needs the
 * class count C concrete.  N is a trace-time constant when the batch dim is
 * concrete; when it is symbolic it is counted in the graph (the sum of a
 * ones vector of the batch's length), so one trace serves every batch size.
 * The labels are integers: no gradient. */
void graft__vjp_SOFTMAX_XENT(graft_trace *t, const graft__node *n, graft_value *const *in,
                             graft_value *y, graft_value *g, graft_value **gx) {
  (void)n, (void)y;
  graft_value *logits = in[0], *labels = in[1];
  const int64_t *s = graft_value_shape(logits);
  graft_dtype dt = graft_value_dtype(logits);
  if (GRAFT_DIM_IS_SYM(s[1])) {
    graft_trace_fail(t, GRAFT_EUNSUPPORTED,
                     "softmax_cross_entropy: gradient with a symbolic class count is not "
                     "supported");
    return;
  }
  graft_value *inv_n = graft__grad_inv_count(t, logits, 1, s);
  graft_value *diff = graft_sub(t, graft_softmax(t, logits, 1), graft_one_hot(t, labels, s[1], dt));
  gx[0] = graft_mul(t, diff, graft_mul(t, g, inv_n));
  gx[1] = NULL;
}
