/* Tracing MPI collectives (graft/mpi.h): the graph side, which needs no
 * MPI header (the communicator travels as bytes; dist/mpi.c checks MPI's
 * state and calls this).
 *
 * Values are grouped into buckets; each bucket is one ALLREDUCE node (its
 * members packed, one non-blocking all-reduce) and one ALLREDUCE_TAKE per
 * member (its mean, shaped like the member).  Every ALLREDUCE after a
 * graph's first takes the previous one as a last, unread input: an order
 * edge, so the buckets are posted in the order the trace made them on
 * every rank, whatever order the work-stealing scheduler finishes the
 * gradients in (MPI needs collectives started in one order everywhere). */
#include <string.h>

#include "graph/graph.h"

#define DEFAULT_BUCKET_BYTES ((int64_t)25 << 20)

/* Bytes of v when its shape is concrete, else -1. */
static int64_t value_bytes(const graft__node *n) {
  for (int d = 0; d < n->rank; d++)
    if (n->shape[d] < 0) return -1;
  int64_t numel = graft__numel(n->rank, n->shape), bytes;
  if (numel < 0 || graft__size_mul(numel, graft_dtype_size((graft_dtype)n->dtype), &bytes))
    return -1;
  return bytes;
}

/* Emit one bucket: xs[0..k) (nodes nd[]) into out[]. */
static graft_status bucket(graft_trace *t, const unsigned char *comm, int k,
                           graft_value *const *xs, graft_value **out) {
  graft__graph *g = t->g;
  graft_value *few[17], **in = few;
  if (k + 1 > 17 && !(in = graft__malloc((size_t)(k + 1) * sizeof *in)))
    return graft_trace_fail(t, GRAFT_ENOMEM, "allreduce_mean: out of memory");
  memcpy(in, xs, (size_t)k * sizeof *in);
  int n_in = k;
  if (g->n_colls) in[n_in++] = graft__value(g, g->last_coll);
  graft__attr a;
  memset(&a, 0, sizeof a);
  memcpy(a.coll.comm, comm, GRAFT__COMM_BYTES);
  a.coll.n_members = k;
  a.coll.index = g->n_colls;
  graft_value *packed = graft__emit_attr(t, GRAFT__OP_ALLREDUCE, n_in, in, &a, 0, NULL);
  if (in != few) graft__free(in);
  if (t->status) return t->status;
  g->last_coll = graft__trace_node(t, packed)->id;
  g->n_colls++;
  for (int i = 0; i < k; i++) {
    const graft__node *m = graft__trace_node(t, xs[i]);
    a.coll.index = i;
    out[i] = graft__emit_attr(t, GRAFT__OP_ALLREDUCE_TAKE, 1, &packed, &a, m->rank, m->shape);
  }
  return t->status;
}

graft_status graft__coll_emit(graft_trace *t, const unsigned char *comm, int n,
                              graft_value *const *xs, graft_value **out, int64_t bucket_bytes,
                              int reverse) {
  if (!t) return GRAFT_EINVAL;
  if (t->status) return t->status;
  if (n < 0 || (n && (!xs || !out)))
    return graft_trace_fail(t, GRAFT_EINVAL, "allreduce_mean: %s (expected n >= 0 values and "
                            "an output array)", n < 0 ? "n < 0" : "xs or out is NULL");
  if (bucket_bytes < 0)
    return graft_trace_fail(t, GRAFT_EINVAL, "allreduce_mean: bucket_bytes %lld < 0 (expected "
                            "0 for the default or a size)", (long long)bucket_bytes);
  if (t->cap)
    return graft_trace_fail(t, GRAFT_EUNSUPPORTED, "allreduce_mean: collectives inside a "
                            "control-flow body are not supported (all-reduce outside it)");
  graft__graph *g = t->g;
  if (g->n_colls && memcmp(g->comm, comm, GRAFT__COMM_BYTES))
    return graft_trace_fail(t, GRAFT_EUNSUPPORTED, "allreduce_mean: trace '%s' already uses "
                            "another communicator (expected one per function)", g->name);
  if (!bucket_bytes) bucket_bytes = DEFAULT_BUCKET_BYTES;
  /* Check every value first: a refused one emits nothing. */
  for (int i = 0; i < n; i++) {
    if (!xs[i]) continue;
    graft__node *nd;
    if (graft__trace_value(t, xs[i], &nd) != GRAFT__VALUE_NODE)
      return graft_trace_fail(t, GRAFT_EMISUSE, "allreduce_mean: value %d is not a value of "
                              "trace '%s' (values are valid only in the callback that made them)",
                              i, g->name);
    if (nd->dtype != GRAFT_F32 && nd->dtype != GRAFT_F64)
      return graft_trace_fail(t, GRAFT_EDTYPE, "allreduce_mean: value %d is %s (expected f32 or "
                              "f64)", i, graft_dtype_name((graft_dtype)nd->dtype));
  }
  memcpy(g->comm, comm, GRAFT__COMM_BYTES);
  /* Buckets over the values in posting order (reverse: from the last). */
  graft_value *few_x[16], *few_o[16], **bx = few_x, **bo = few_o;
  if (n > 16) {
    bx = graft__malloc((size_t)n * sizeof *bx);
    bo = graft__malloc((size_t)n * sizeof *bo);
    if (!bx || !bo) {
      graft__free(bx);
      graft__free(bo);
      return graft_trace_fail(t, GRAFT_ENOMEM, "allreduce_mean: out of memory");
    }
  }
  int *at = NULL, few_at[16];
  at = n > 16 ? graft__malloc((size_t)n * sizeof *at) : few_at;
  graft_status st = at ? GRAFT_OK : graft_trace_fail(t, GRAFT_ENOMEM, "allreduce_mean: out of memory");
  int k = 0;
  int64_t held = 0;
  uint8_t dt = 0;
  for (int j = 0; j <= n && !st; j++) {
    int i = j < n ? (reverse ? n - 1 - j : j) : -1;
    const graft__node *nd = i >= 0 && xs[i] ? graft__trace_node(t, xs[i]) : NULL;
    if (i >= 0 && !nd) { /* (out may be xs: each is read before it is written) */
      out[i] = NULL;
      continue;
    }
    int64_t bytes = nd ? value_bytes(nd) : 0;
    /* close the bucket: at the end, on a dtype change, past the size, or
     * before a value of unknown size (which goes alone) */
    if (k && (!nd || nd->dtype != dt || bytes < 0 || held < 0 || held + bytes > bucket_bytes)) {
      st = bucket(t, comm, k, bx, bo);
      for (int m = 0; m < k && !st; m++) out[at[m]] = bo[m];
      k = 0;
      held = 0;
    }
    if (!nd) continue;
    dt = nd->dtype;
    bx[k] = xs[i];
    at[k++] = i;
    held = bytes < 0 ? -1 : held + bytes;
  }
  if (bx != few_x) graft__free(bx);
  if (bo != few_o) graft__free(bo);
  if (at != few_at) graft__free(at);
  return t->status ? t->status : st;
}
