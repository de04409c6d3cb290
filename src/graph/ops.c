/* Public op constructors: validate, run the shape rule, append a node.
 * Every constructor goes through emit(), which owns the sticky-error
 * protocol: NULL, foreign and poison inputs, and the message format
 * "<op>: <reason> (op #<id> in trace '<name>')". */
#include <string.h>

#include "graph/graph.h"

/* What emit() needs beyond the inputs. */
typedef struct spec {
  int op;
  graft_dtype dtype; /* output dtype for leaves, cast, one_hot */
  double fill;
  graft__attr attr;
  int rank;          /* leaves: rank and shape */
  const int64_t *shape;
} spec;

static graft_value *fail_op(graft_trace *t, int op, graft_status s, const char *reason) {
  graft__trace_failf(t, s, "%s: %s (op #%u in trace '%s')", graft__ops[op].name, reason,
                     t->g->n_nodes, t->g->name);
  return GRAFT__POISON;
}

/* The node of a value already checked to be of t (check_inputs: a
 * captured value's is its INPUT in t's graph). */
static graft__node *node(const graft_trace *t, const graft_value *v) {
  return graft__trace_node(t, v);
}

/* Common entry checks; returns NULL to go on, else the value to return.
 * Handles are classified by address (graft__trace_value), so a value of
 * another trace, or of one that ended, is refused without being read. */
static graft_value *check_inputs_at(graft_trace *t, int op, int n_in, graft_value *const *in,
                                    graft__node **nodes) {
  if (t->status != GRAFT_OK) return GRAFT__POISON;
  for (int i = 0; i < n_in; i++) {
    char why[128];
    graft__node *n;
    switch (graft__trace_value(t, in[i], &n)) {
    case GRAFT__VALUE_NODE:
      if (nodes) nodes[i] = n;
      continue;
    case GRAFT__VALUE_NULL:
      snprintf(why, sizeof why, "input %d is NULL", i);
      return fail_op(t, op, GRAFT_EINVAL, why);
    case GRAFT__VALUE_POISON:
      /* This trace has not failed, so the poison came from another. */
      snprintf(why, sizeof why, "input %d is the poison value of another (failed) trace", i);
      return fail_op(t, op, GRAFT_EMISUSE, why);
    case GRAFT__VALUE_FOREIGN:
      if (t->cap) { /* a body using a value of a trace around it: capture it */
        uint32_t id = graft__capture_value(t, in[i]);
        if (id != GRAFT__POISON_ID) {
          if (nodes) nodes[i] = graft__graph_node(t->g, id);
          continue;
        }
        if (t->status) return GRAFT__POISON;
      }
      snprintf(why, sizeof why,
               "input %d belongs to another trace, or to one that ended (values are valid only "
               "in the callback that made them)", i);
      return fail_op(t, op, GRAFT_EMISUSE, why);
    }
  }
  return NULL;
}

static graft_value *check_inputs(graft_trace *t, int op, int n_in, graft_value *const *in) {
  return check_inputs_at(t, op, n_in, in, NULL);
}

/* The output's size must exist (graft__size_check): with every dim
 * concrete, checked now; with symbols, the concrete dims alone must fit
 * (compile checks the rest once the symbols are bound). */
static graft_status size_ok(const graft__shape *o, int n_in, const graft__shape *in, char *msg) {
  /* Shaped like an input of a dtype as wide: that input passed this check
   * when it was made (the common case: elementwise ops, costs nothing). */
  for (int i = 0; i < n_in; i++)
    if (in[i].rank == o->rank && graft_dtype_size(in[i].dtype) >= graft_dtype_size(o->dtype) &&
        !memcmp(in[i].dims, o->dims, (size_t)o->rank * sizeof *o->dims))
      return GRAFT_OK;
  int64_t dims[GRAFT_MAX_RANK];
  int r = 0;
  for (int i = 0; i < o->rank; i++)
    if (o->dims[i] >= 0) dims[r++] = o->dims[i];
  graft_status st = graft__size_check(r, dims, o->dtype, NULL, NULL, msg, GRAFT__MSG_LEN);
  if (st && r < o->rank) {
    char shape[160];
    graft__shape_str(shape, sizeof shape, o->rank, o->dims);
    graft__msgf(msg, "output %s%s: its concrete dims alone hold too many elements",
                graft_dtype_name(o->dtype), shape);
  } else if (st) {
    char why[GRAFT__MSG_LEN];
    memcpy(why, msg, sizeof why);
    graft__msgf(msg, "output %s", why);
  }
  return st;
}

static graft_value *emit(graft_trace *t, const spec *sp, int n_in, graft_value *const *in) {
  if (!t) return NULL;
  if (t->status != GRAFT_OK) return GRAFT__POISON;
  graft__shape shapes[16];
  graft__shape *ins = shapes;
  uint32_t ids_small[16], *ids = ids_small;
  graft__node *nodes_small[16], **nodes = nodes_small;
  if (n_in > 16) {
    ins = graft__malloc((size_t)n_in * sizeof *ins);
    ids = graft__malloc((size_t)n_in * sizeof *ids);
    nodes = graft__malloc((size_t)n_in * sizeof *nodes);
    if (!ins || !ids || !nodes) {
      graft__free(ins);
      graft__free(ids);
      graft__free(nodes);
      return fail_op(t, sp->op, GRAFT_ENOMEM, "out of memory");
    }
  }
  graft_value *early = check_inputs_at(t, sp->op, n_in, in, nodes);
  if (early) {
    if (n_in > 16) {
      graft__free(ins);
      graft__free(ids);
      graft__free(nodes);
    }
    return early;
  }
  for (int i = 0; i < n_in; i++) {
    graft__node_shape(nodes[i], &ins[i]);
    ids[i] = nodes[i]->id;
  }
  if (nodes != nodes_small) graft__free(nodes);

  /* The rule sees a node on the stack first: a failed op appends nothing. */
  graft__node probe;
  memset(&probe, 0, sizeof probe);
  probe.op = (uint16_t)sp->op;
  probe.dtype = (uint8_t)sp->dtype;
  probe.n_in = n_in;
  probe.fill = sp->fill;
  probe.attr = sp->attr;
  probe.rank = (uint8_t)sp->rank;
  if (sp->rank) memcpy(probe.shape, sp->shape, (size_t)sp->rank * sizeof(int64_t));

  graft__shape_ctx c = {NULL, t->g, {0}, NULL, NULL};
  graft__shape out;
  graft_value *ret;
  graft_status st = graft__shape_infer(&c, &probe, ins, &out);
  if (st == GRAFT_OK) st = size_ok(&out, n_in, ins, c.msg);
  if (st != GRAFT_OK) {
    ret = fail_op(t, sp->op, st, c.msg);
  } else {
    graft__node *n = graft__graph_add(t->g, sp->op, n_in, ids);
    if (!n) {
      ret = fail_op(t, sp->op, GRAFT_ENOMEM, "out of memory");
    } else {
      n->dtype = (uint8_t)out.dtype;
      n->rank = (uint8_t)out.rank;
      memcpy(n->shape, out.dims, sizeof n->shape);
      n->fill = sp->fill;
      n->attr = sp->attr;
      n->role = t->role;
      ret = graft__value(t->g, n->id);
    }
  }
  if (ins != shapes) graft__free(ins);
  if (ids != ids_small) graft__free(ids);
  return ret;
}

static int dtype_ok(graft_dtype dt) { return graft_dtype_size(dt) != 0; }

/* Validate a user shape (dims >= 0, symbols of this trace, and -1 if
 * allowed); NULL on success, else a reason. */
static const char *bad_shape(const graft_trace *t, int rank, const int64_t *shape, int allow_infer) {
  if (rank < 0 || rank > GRAFT_MAX_RANK) return "rank must be 0..8";
  if (rank > 0 && !shape) return "shape is NULL";
  for (int i = 0; i < rank; i++) {
    int64_t d = shape[i];
    if (d >= 0 || (d == -1 && allow_infer)) continue;
    if (GRAFT_DIM_IS_SYM(d) && -2 - d < t->g->n_syms) continue;
    return allow_infer ? "dims must be >= 0, -1 (infer) or a symbol of this trace"
                       : "dims must be >= 0 or a symbol of this trace";
  }
  return NULL;
}

/* A single-axis argument as the user gave it (negative: from the end):
 * the normalized axis in *out, or 0 after failing the trace with a message
 * that names the given axis and the accepted range. */
static int axis_ok(graft_trace *t, int op, int axis, int rank, int *out) {
  int a = axis < 0 ? axis + rank : axis;
  if (rank > 0 && a >= 0 && a < rank) {
    *out = a;
    return 1;
  }
  char why[128];
  if (rank == 0)
    snprintf(why, sizeof why, "axis %d: a rank-0 input has no axis", axis);
  else
    snprintf(why, sizeof why, "axis %d is out of range for rank %d (expected %d..%d)", axis, rank,
             -rank, rank - 1);
  fail_op(t, op, GRAFT_EINVAL, why);
  return 0;
}

/* ---- leaves -------------------------------------------------------------- */

static graft_value *leaf(graft_trace *t, int op, graft_dtype dt, int rank, const int64_t *shape,
                         double v, const void *data) {
  if (!t) return NULL;
  if (t->status) return GRAFT__POISON;
  if (!dtype_ok(dt)) return fail_op(t, op, GRAFT_EDTYPE, "invalid dtype");
  const char *why = bad_shape(t, rank, shape, 0);
  if (why) return fail_op(t, op, GRAFT_EINVAL, why);
  spec sp = {.op = op, .dtype = dt, .fill = v, .rank = rank, .shape = shape};
  if (op == GRAFT__OP_CONST) {
    if (!data) return fail_op(t, op, GRAFT_EINVAL, "data is NULL");
    for (int i = 0; i < rank; i++)
      if (shape[i] < 0) return fail_op(t, op, GRAFT_EINVAL, "constants need concrete dims");
    int64_t nb;
    char why[GRAFT__MSG_LEN];
    graft_status st = graft__size_check(rank, shape, dt, NULL, &nb, why, sizeof why);
    if (st) return fail_op(t, op, st, why);
    size_t bytes = (size_t)nb;
    void *copy = graft__arena_alloc(&t->g->arena, bytes ? bytes : 1);
    if (!copy) return fail_op(t, op, GRAFT_ENOMEM, "out of memory");
    memcpy(copy, data, bytes);
    sp.attr.constant.data = copy;
  } else {
    sp.attr.target.rank = rank;
    if (rank) memcpy(sp.attr.target.dims, shape, (size_t)rank * sizeof *shape);
  }
  return emit(t, &sp, 0, NULL);
}

/* A scalar fill traced inside a control-flow body (graft_scalar,
 * graft_fill of rank 0) goes to the function's own trace, and the body
 * captures it like any value from around it: a loop's body then reads it
 * each iteration instead of filling it again (a while loop's
 * `x * 0.999999 + 1e-6` ran three fills per iteration), and no gradient
 * needs it (nothing from a wrt reaches it).  An invalid dtype stays the
 * body's failure. */
static graft_value *scalar_fill(graft_trace *t, graft_dtype dt, double v) {
  graft_trace *root = t;
  while (root && root->cap && !root->status) root = root->cap->parent;
  if (root != t && root && !root->status && dtype_ok(dt)) {
    graft_value *c = leaf(root, GRAFT__OP_FILL, dt, 0, NULL, v, NULL);
    if (root->status) graft__trace_failf(t, root->status, "%s", root->msg);
    return t->status ? GRAFT__POISON : c;
  }
  return leaf(t, GRAFT__OP_FILL, dt, 0, NULL, v, NULL);
}

GRAFT_API graft_value *graft_scalar(graft_trace *t, graft_dtype dt, double v) {
  return scalar_fill(t, dt, v);
}

GRAFT_API graft_value *graft_constant(graft_trace *t, graft_dtype dt, int rank,
                                      const int64_t *shape, const void *data) {
  return leaf(t, GRAFT__OP_CONST, dt, rank, shape, 0, data);
}

GRAFT_API graft_value *graft_fill(graft_trace *t, graft_dtype dt, int rank, const int64_t *shape,
                                  double v) {
  if (rank == 0) return scalar_fill(t, dt, v);
  return leaf(t, GRAFT__OP_FILL, dt, rank, shape, v, NULL);
}

static graft_value *fill_like(graft_trace *t, graft_value *x, double v) {
  if (!t) return NULL;
  graft_value *early = check_inputs(t, GRAFT__OP_FILL, 1, &x);
  if (early) return early;
  const graft__node *n = node(t, x);
  return leaf(t, GRAFT__OP_FILL, (graft_dtype)n->dtype, n->rank, n->shape, v, NULL);
}

GRAFT_API graft_value *graft_zeros_like(graft_trace *t, graft_value *x) { return fill_like(t, x, 0); }
GRAFT_API graft_value *graft_ones_like(graft_trace *t, graft_value *x) { return fill_like(t, x, 1); }

/* ---- elementwise --------------------------------------------------------- */

static graft_value *op1(graft_trace *t, int op, graft_value *x) {
  spec sp = {.op = op};
  return emit(t, &sp, 1, &x);
}

static graft_value *op2(graft_trace *t, int op, graft_value *a, graft_value *b) {
  spec sp = {.op = op};
  graft_value *in[2] = {a, b};
  return emit(t, &sp, 2, in);
}

#define UNARY(name, E) \
  GRAFT_API graft_value *graft_##name(graft_trace *t, graft_value *x) { return op1(t, GRAFT__OP_##E, x); }
#define BINARY(name, E)                                                             \
  GRAFT_API graft_value *graft_##name(graft_trace *t, graft_value *a, graft_value *b) { \
    return op2(t, GRAFT__OP_##E, a, b);                                             \
  }
UNARY(neg, NEG)
UNARY(square, SQUARE)
UNARY(sqrt, SQRT)
UNARY(exp, EXP)
UNARY(log, LOG)
UNARY(log1p, LOG1P)
UNARY(tanh, TANH)
UNARY(sigmoid, SIGMOID)
UNARY(relu, RELU)
UNARY(abs, ABS)
UNARY(sign, SIGN)
UNARY(sin, SIN)
UNARY(cos, COS)
UNARY(tan, TAN)
UNARY(lgamma, LGAMMA)
UNARY(digamma, DIGAMMA)
UNARY(stop_gradient, STOP_GRADIENT)
BINARY(add, ADD)
BINARY(sub, SUB)
BINARY(mul, MUL)
BINARY(div, DIV)
BINARY(pow, POW)
BINARY(maximum, MAXIMUM)
BINARY(minimum, MINIMUM)
BINARY(greater, GREATER)
BINARY(less, LESS)
BINARY(equal, EQUAL)
#undef UNARY
#undef BINARY

GRAFT_API graft_value *graft_polygamma(graft_trace *t, int n, graft_value *x) {
  if (!t) return NULL;
  if (n == 0) return graft_digamma(t, x);
  /* n! overflows a double past 170, so higher orders cannot be finite. */
  if ((n < 0 || n > 170) && !t->status)
    return fail_op(t, GRAFT__OP_POLYGAMMA, GRAFT_EINVAL, "order n must be in 0..170");
  spec sp = {.op = GRAFT__OP_POLYGAMMA};
  sp.attr.polygamma.n = n;
  return emit(t, &sp, 1, &x);
}

GRAFT_API graft_value *graft_where(graft_trace *t, graft_value *cond, graft_value *a, graft_value *b) {
  spec sp = {.op = GRAFT__OP_WHERE};
  graft_value *in[3] = {cond, a, b};
  return emit(t, &sp, 3, in);
}

GRAFT_API graft_value *graft_mul_add(graft_trace *t, graft_value *a, graft_value *b, graft_value *c) {
  spec sp = {.op = GRAFT__OP_MUL_ADD};
  graft_value *in[3] = {a, b, c};
  return emit(t, &sp, 3, in);
}

GRAFT_API graft_value *graft_cast(graft_trace *t, graft_value *x, graft_dtype to) {
  if (!t) return NULL;
  if (!dtype_ok(to) && !t->status) return fail_op(t, GRAFT__OP_CAST, GRAFT_EDTYPE, "invalid target dtype");
  spec sp = {.op = GRAFT__OP_CAST, .dtype = to};
  return emit(t, &sp, 1, &x);
}

/* ---- reductions ---------------------------------------------------------- */

static graft_value *reduce(graft_trace *t, int op, graft_value *x, int n_axes, const int *axes,
                           int keepdims) {
  if (!t) return NULL;
  graft_value *early = check_inputs(t, op, 1, &x);
  if (early) return early;
  int rank = node(t, x)->rank;
  unsigned mask = 0;
  char why[96];
  if (n_axes < 0 || (n_axes > 0 && !axes)) return fail_op(t, op, GRAFT_EINVAL, "bad axes list");
  if (n_axes == 0) mask = rank ? (1u << rank) - 1 : 0;
  for (int i = 0; i < n_axes; i++) {
    int a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank) {
      if (rank == 0)
        snprintf(why, sizeof why, "axis %d: a rank-0 input has no axis", axes[i]);
      else
        snprintf(why, sizeof why, "axis %d is out of range for rank %d (expected %d..%d)", axes[i],
                 rank, -rank, rank - 1);
      return fail_op(t, op, GRAFT_EINVAL, why);
    }
    if (mask & (1u << a)) {
      snprintf(why, sizeof why, "axis %d given twice", axes[i]);
      return fail_op(t, op, GRAFT_EINVAL, why);
    }
    mask |= 1u << a;
  }
  spec sp = {.op = op};
  sp.attr.reduce.mask = mask;
  sp.attr.reduce.keepdims = keepdims != 0;
  return emit(t, &sp, 1, &x);
}

#define REDUCE(name, E)                                                                     \
  GRAFT_API graft_value *graft_##name(graft_trace *t, graft_value *x, int n_axes, const int *axes, \
                                      int keepdims) {                                       \
    return reduce(t, GRAFT__OP_##E, x, n_axes, axes, keepdims);                             \
  }
REDUCE(reduce_sum, REDUCE_SUM)
REDUCE(reduce_mean, REDUCE_MEAN)
REDUCE(reduce_max, REDUCE_MAX)
REDUCE(reduce_prod, REDUCE_PROD)
REDUCE(logsumexp, LOGSUMEXP)
#undef REDUCE

/* ---- linear algebra and shapes ------------------------------------------ */

GRAFT_API graft_value *graft_matmul(graft_trace *t, graft_value *a, graft_value *b, unsigned flags) {
  if (!t) return NULL;
  if ((flags & ~(GRAFT_TRANS_A | GRAFT_TRANS_B)) && !t->status)
    return fail_op(t, GRAFT__OP_MATMUL, GRAFT_EINVAL, "unknown flags");
  spec sp = {.op = GRAFT__OP_MATMUL};
  sp.attr.matmul.flags = flags;
  graft_value *in[2] = {a, b};
  return emit(t, &sp, 2, in);
}

GRAFT_API graft_value *graft_transpose(graft_trace *t, graft_value *x, const int *perm) {
  if (!t) return NULL;
  graft_value *early = check_inputs(t, GRAFT__OP_TRANSPOSE, 1, &x);
  if (early) return early;
  int rank = node(t, x)->rank;
  spec sp = {.op = GRAFT__OP_TRANSPOSE};
  for (int i = 0; i < rank; i++) sp.attr.transpose.perm[i] = perm ? perm[i] : rank - 1 - i;
  return emit(t, &sp, 1, &x);
}

static graft_value *shaped(graft_trace *t, int op, graft_value *x, int rank, const int64_t *shape,
                           int allow_infer) {
  if (!t) return NULL;
  graft_value *early = check_inputs(t, op, 1, &x);
  if (early) return early;
  const char *why = bad_shape(t, rank, shape, allow_infer);
  if (why) return fail_op(t, op, GRAFT_EINVAL, why);
  spec sp = {.op = op};
  sp.attr.target.rank = rank;
  if (rank) memcpy(sp.attr.target.dims, shape, (size_t)rank * sizeof *shape);
  return emit(t, &sp, 1, &x);
}

GRAFT_API graft_value *graft_reshape(graft_trace *t, graft_value *x, int rank, const int64_t *shape) {
  return shaped(t, GRAFT__OP_RESHAPE, x, rank, shape, 1);
}

GRAFT_API graft_value *graft_broadcast_to(graft_trace *t, graft_value *x, int rank,
                                          const int64_t *shape) {
  return shaped(t, GRAFT__OP_BROADCAST_TO, x, rank, shape, 0);
}

GRAFT_API graft_value *graft_sum_to_shape(graft_trace *t, graft_value *x, int rank,
                                          const int64_t *shape) {
  return shaped(t, GRAFT__OP_SUM_TO_SHAPE, x, rank, shape, 0);
}

GRAFT_API graft_value *graft_slice(graft_trace *t, graft_value *x, const int64_t *begin,
                                   const int64_t *size) {
  if (!t) return NULL;
  graft_value *early = check_inputs(t, GRAFT__OP_SLICE, 1, &x);
  if (early) return early;
  int rank = node(t, x)->rank;
  if (rank && (!begin || !size)) return fail_op(t, GRAFT__OP_SLICE, GRAFT_EINVAL, "begin or size is NULL");
  spec sp = {.op = GRAFT__OP_SLICE};
  for (int i = 0; i < rank; i++) {
    int64_t z = size[i];
    if (z < -1 && !(GRAFT_DIM_IS_SYM(z) && -2 - z < t->g->n_syms)) {
      char why[128];
      snprintf(why, sizeof why, "dim %d: size %lld must be >= 0, -1 (to the end) or a symbol of this trace",
               i, (long long)z);
      return fail_op(t, GRAFT__OP_SLICE, GRAFT_EINVAL, why);
    }
    sp.attr.slice.begin[i] = begin[i];
    sp.attr.slice.size[i] = size[i];
  }
  return emit(t, &sp, 1, &x);
}

GRAFT_API graft_value *graft_pad(graft_trace *t, graft_value *x, const int64_t *begin, int rank,
                                 const int64_t *shape) {
  if (!t) return NULL;
  graft_value *early = check_inputs(t, GRAFT__OP_PAD, 1, &x);
  if (early) return early;
  int xr = node(t, x)->rank;
  if (rank != xr) return fail_op(t, GRAFT__OP_PAD, GRAFT_ESHAPE, "target rank differs from the input's");
  if (xr && !begin) return fail_op(t, GRAFT__OP_PAD, GRAFT_EINVAL, "begin is NULL");
  const char *why = bad_shape(t, rank, shape, 0);
  if (why) return fail_op(t, GRAFT__OP_PAD, GRAFT_EINVAL, why);
  spec sp = {.op = GRAFT__OP_PAD};
  for (int i = 0; i < xr; i++) {
    sp.attr.slice.begin[i] = begin[i];
    sp.attr.slice.size[i] = shape[i];
  }
  return emit(t, &sp, 1, &x);
}

GRAFT_API graft_value *graft_custom_gradient(graft_trace *t, int n_x, graft_value *const *xs,
                                             graft_value *y, graft_vjp_fn vjp, void *user) {
  if (!t) return NULL;
  if (t->status) return GRAFT__POISON;
  if (n_x < 0 || (n_x && !xs) || !vjp)
    return fail_op(t, GRAFT__OP_CUSTOM, GRAFT_EINVAL, "needs n_x >= 0 values and a vjp function");
  graft__custom *rec = graft__arena_alloc(&t->g->arena, sizeof *rec);
  graft_value **in = graft__malloc((size_t)(n_x + 1) * sizeof *in);
  if (!rec || !in) {
    graft__free(in);
    return fail_op(t, GRAFT__OP_CUSTOM, GRAFT_ENOMEM, "out of memory");
  }
  rec->vjp = vjp;
  rec->user = user;
  in[0] = y;
  for (int i = 0; i < n_x; i++) in[i + 1] = xs[i];
  spec sp = {.op = GRAFT__OP_CUSTOM};
  sp.attr.custom.rec = rec;
  graft_value *r = emit(t, &sp, n_x + 1, in);
  graft__free(in);
  return r;
}

GRAFT_API graft_value *graft_concat(graft_trace *t, int n, graft_value *const *xs, int axis) {
  if (!t) return NULL;
  if (t->status) return GRAFT__POISON;
  if (n < 1 || !xs) return fail_op(t, GRAFT__OP_CONCAT, GRAFT_EINVAL, "needs n >= 1 values");
  graft_value *early = check_inputs(t, GRAFT__OP_CONCAT, n, xs);
  if (early) return early;
  int rank = node(t, xs[0])->rank;
  spec sp = {.op = GRAFT__OP_CONCAT};
  if (!axis_ok(t, GRAFT__OP_CONCAT, axis, rank, &sp.attr.axis.axis)) return GRAFT__POISON;
  return emit(t, &sp, n, xs);
}

GRAFT_API graft_value *graft_one_hot(graft_trace *t, graft_value *labels, int64_t depth, graft_dtype dt) {
  spec sp = {.op = GRAFT__OP_ONE_HOT, .dtype = dt};
  sp.attr.one_hot.depth = depth;
  return emit(t, &sp, 1, &labels);
}

/* ---- neural-network ops -------------------------------------------------- */

static graft_value *softmax_like(graft_trace *t, int op, graft_value *x, int axis) {
  if (!t) return NULL;
  graft_value *early = check_inputs(t, op, 1, &x);
  if (early) return early;
  int rank = node(t, x)->rank;
  spec sp = {.op = op};
  if (!axis_ok(t, op, axis, rank, &sp.attr.axis.axis)) return GRAFT__POISON;
  return emit(t, &sp, 1, &x);
}

GRAFT_API graft_value *graft_softmax(graft_trace *t, graft_value *x, int axis) {
  return softmax_like(t, GRAFT__OP_SOFTMAX, x, axis);
}

GRAFT_API graft_value *graft_log_softmax(graft_trace *t, graft_value *x, int axis) {
  return softmax_like(t, GRAFT__OP_LOG_SOFTMAX, x, axis);
}

GRAFT_API graft_value *graft_softmax_cross_entropy(graft_trace *t, graft_value *logits,
                                                   graft_value *labels) {
  return op2(t, GRAFT__OP_SOFTMAX_XENT, logits, labels);
}

graft_value *graft__emit_like(graft_trace *t, const graft__node *proto, const graft__attr *attr,
                              const int64_t *shape, graft_value *const *in) {
  spec sp = {.op = proto->op, .dtype = (graft_dtype)proto->dtype, .fill = proto->fill,
             .attr = *attr, .rank = proto->rank, .shape = shape};
  return emit(t, &sp, proto->n_in, in);
}

graft_value *graft__emit_conv(graft_trace *t, int op, int n_in, graft_value *const *in,
                              const struct graft__conv_attr *a) {
  spec sp = {.op = op};
  sp.attr.conv = *a;
  return emit(t, &sp, n_in, in);
}

graft_value *graft__emit_attr(graft_trace *t, int op, int n_in, graft_value *const *in,
                              const graft__attr *attr, int rank, const int64_t *shape) {
  spec sp = {.op = op, .attr = *attr, .rank = rank, .shape = shape};
  return emit(t, &sp, n_in, in);
}

/* ---- variables ----------------------------------------------------------- */

/* The value v has in this trace so far, or UINT32_MAX. */
static uint32_t current(const graft_trace *t, const graft_variable *v) {
  const uint32_t *id = graft__ptrmap_get(&t->cur, v);
  return id ? *id : GRAFT__POISON_ID;
}

static graft_status set_current(graft_trace *t, graft_variable *v, uint32_t id) {
  return graft__ptrmap_put(&t->cur, v, id);
}

static graft_value *var_check(graft_trace *t, int op, graft_variable *v) {
  if (t->status) return GRAFT__POISON;
  if (!v) return fail_op(t, op, GRAFT_EINVAL, "variable is NULL");
  if (__atomic_load_n(&v->destroyed, __ATOMIC_ACQUIRE)) {
    graft__trace_failf(t, GRAFT_EMISUSE, "%s: variable '%s' was destroyed (op #%u in trace '%s')",
                       graft__ops[op].name, v->name, t->g->n_nodes, t->g->name);
    return GRAFT__POISON;
  }
  if (graft__graph_ref_var(t->g, v)) return fail_op(t, op, GRAFT_ENOMEM, "out of memory");
  return NULL;
}

/* A control-flow body does not write variables (its subgraph may run any
 * number of times, or not at all). */
static graft_value *no_write_in_body(graft_trace *t, int op, const graft_variable *v) {
  if (!t->cap || t->status) return NULL;
  graft__trace_failf(t, GRAFT_EUNSUPPORTED,
                     "%s: variable '%s' is written inside a control-flow body (cond, while_loop, "
                     "scan, remat), which may only read variables (op #%u in trace '%s')",
                     graft__ops[op].name, v ? v->name : "(null)", t->g->n_nodes, t->g->name);
  return GRAFT__POISON;
}

GRAFT_API graft_value *graft_read(graft_trace *t, graft_variable *v) {
  if (!t) return NULL;
  if (t->cap && !t->status) { /* read by the trace around, captured here */
    graft_value *early = var_check(t, GRAFT__OP_VAR_READ, v); /* fails in the body: named */
    if (early) return early;
    graft_value *outer = graft_read(t->cap->parent, v);
    if (t->cap->parent->status) {
      graft__trace_failf(t, t->cap->parent->status, "%s", t->cap->parent->msg);
      return GRAFT__POISON;
    }
    uint32_t id = graft__capture_value(t, outer);
    return id == GRAFT__POISON_ID ? GRAFT__POISON : graft__value(t->g, id);
  }
  graft_value *early = var_check(t, GRAFT__OP_VAR_READ, v);
  if (early) return early;
  uint32_t cur = current(t, v);
  if (cur != GRAFT__POISON_ID) return graft__value(t->g, cur);
  const graft_tensor *val = v->value;
  spec sp = {.op = GRAFT__OP_VAR_READ, .dtype = graft_tensor_dtype(val),
             .rank = graft_tensor_rank(val), .shape = graft_tensor_shape(val)};
  sp.attr.var.var = v;
  graft_value *r = emit(t, &sp, 0, NULL);
  if (r != GRAFT__POISON && set_current(t, v, graft__value_id(r)))
    return fail_op(t, GRAFT__OP_VAR_READ, GRAFT_ENOMEM, "out of memory");
  return r;
}

GRAFT_API graft_value *graft_assign(graft_trace *t, graft_variable *v, graft_value *x) {
  if (!t) return NULL;
  graft_value *early = no_write_in_body(t, GRAFT__OP_ASSIGN, v);
  if (early) return early;
  early = var_check(t, GRAFT__OP_ASSIGN, v);
  if (early) return early;
  spec sp = {.op = GRAFT__OP_ASSIGN};
  sp.attr.var.var = v;
  graft_value *r = emit(t, &sp, 1, &x);
  if (r != GRAFT__POISON && set_current(t, v, graft__value_id(r)))
    return fail_op(t, GRAFT__OP_ASSIGN, GRAFT_ENOMEM, "out of memory");
  return r;
}

/* Whether node n is a float scalar that broadcasts into (rank) dims. */
static int is_scalar_into(const graft__node *n, int rank) {
  if (n->dtype == GRAFT_I32 || n->rank > rank) return 0;
  for (int i = 0; i < n->rank; i++)
    if (n->shape[i] != 1) return 0;
  return 1;
}

/* v's new value for v -= d (op SUB) or v += d (ADD) when d is s * g with s
 * a float scalar and g shaped like v (an SGD step): one mul_add pass over
 * g and v instead of a product pass and an update pass.  Bitwise the same
 * as the two ops: mul_add rounds the product first, and negating s is
 * exact.  NULL when d is not of that form. */
static graft_value *fused_update(graft_trace *t, graft_value *old, graft_value *d, int op) {
  const graft__node *m = node(t, d), *o = node(t, old);
  if (!m || !o || m->op != GRAFT__OP_MUL || m->n_in != 2 || m->dtype != o->dtype) return NULL;
  const graft__node *s = graft__graph_node(t->g, m->in[0]), *g = graft__graph_node(t->g, m->in[1]);
  if (!is_scalar_into(s, o->rank)) {
    const graft__node *x = s;
    s = g;
    g = x;
  }
  if (!is_scalar_into(s, o->rank) || g->rank != o->rank ||
      memcmp(g->shape, o->shape, (size_t)o->rank * sizeof *o->shape) != 0)
    return NULL;
  graft_value *sv = graft__value(t->g, s->id), *gv = graft__value(t->g, g->id);
  return graft_mul_add(t, op == GRAFT__OP_SUB ? graft_neg(t, sv) : sv, gv, old);
}

static graft_value *assign_op(graft_trace *t, graft_variable *v, graft_value *d, int op) {
  if (!t) return NULL;
  graft_value *early = no_write_in_body(t, GRAFT__OP_ASSIGN, v);
  if (early) return early;
  early = var_check(t, GRAFT__OP_ASSIGN, v);
  if (early) return early;
  early = check_inputs(t, GRAFT__OP_ASSIGN, 1, &d);
  if (early) return early;
  graft_value *old = graft_read(t, v), *fused = fused_update(t, old, d, op);
  return graft_assign(t, v, fused ? fused : op2(t, op, old, d));
}

GRAFT_API graft_value *graft_assign_add(graft_trace *t, graft_variable *v, graft_value *d) {
  return assign_op(t, v, d, GRAFT__OP_ADD);
}

GRAFT_API graft_value *graft_assign_sub(graft_trace *t, graft_variable *v, graft_value *d) {
  return assign_op(t, v, d, GRAFT__OP_SUB);
}

/* ---- optimizer updates --------------------------------------------------- */

graft_value *graft__update(graft_trace *t, const struct graft__update_attr *u, graft_value *g,
                           graft_value *hp) {
  if (!t) return NULL;
  if (t->status) return GRAFT__POISON;
  if (u->n_vars < 1 || u->n_vars > GRAFT__UPDATE_MAX_VARS)
    return fail_op(t, GRAFT__OP_UPDATE, GRAFT_EINTERNAL, "bad variable count");
  graft_value *body = no_write_in_body(t, GRAFT__OP_UPDATE, u->var[0]);
  if (body) return body;
  graft_value *in[2 + GRAFT__UPDATE_MAX_VARS];
  for (int j = 0; j < u->n_vars; j++) {
    graft_value *early = var_check(t, GRAFT__OP_UPDATE, u->var[j]);
    if (early) return early;
    in[j ? 2 + j : 0] = graft_read(t, u->var[j]);
  }
  in[1] = g;
  in[2] = hp;
  spec sp = {.op = GRAFT__OP_UPDATE};
  sp.attr.update = *u;
  graft_value *r = emit(t, &sp, 2 + u->n_vars, in);
  if (r == GRAFT__POISON) return r;
  /* Each variable's value after the step, for reads later in this trace: a
   * slice of the packed result (pruned unless something reads it; while
   * something does, the step is staged rather than written in place). */
  const graft__node *w = node(t, in[0]);
  int64_t numel = graft__numel(w->rank, w->shape);
  for (int j = 0; j < u->n_vars && !t->status; j++) {
    const int64_t begin[1] = {j * numel}, size[1] = {numel};
    graft_value *now = graft_reshape(t, graft_slice(t, r, begin, size), w->rank, w->shape);
    if (now != GRAFT__POISON && set_current(t, u->var[j], graft__value_id(now)))
      return fail_op(t, GRAFT__OP_UPDATE, GRAFT_ENOMEM, "out of memory");
  }
  return t->status ? GRAFT__POISON : r;
}
