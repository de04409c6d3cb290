/* Shapes, dtypes and attributes that every op's shape rule (src/graph/
 * shape.c) must refuse, with the status and a message that names the op,
 * the shapes and what was expected.
 *
 * Each case builds one op from its inputs.  Traced with concrete input
 * shapes, the op must fail the trace: the call returns the status, makes no
 * output, and its message names the op, its position ("op #N in trace") and
 * the fragments listed.  Cases whose check depends on a dim also run with a
 * declared signature where that dim is -1: the trace then succeeds (nothing
 * can be decided) and the call with the bad concrete sizes must fail at
 * compile time, the same way.  Assignments must leave their variable as it
 * was.  A broadcast may stretch a dim of 1, never shrink one: a [3] value
 * meeting a [1] target (broadcast_to, sum_to_shape's inverse, an assign)
 * is refused, not truncated.
 *
 * Not here: overflowing dims (huge concat sums, pad offsets, reshape and
 * slice arithmetic), which belong to the size-check tests; ops whose rule
 * depends on ranks and attributes only (reduce axes, transpose, softmax,
 * one_hot, cast) have no symbolic variant, since ranks are never
 * symbolic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

TU_RUNTIME_GROUP();

/* What a case builds (params in the case). */
enum kind {
  K_BINARY, K_SQRT, K_CAST, K_WHERE, K_MUL_ADD, K_MATMUL, K_REDUCE_SUM, K_REDUCE_MEAN,
  K_LOGSUMEXP, K_TRANSPOSE, K_RESHAPE, K_BROADCAST_TO, K_SUM_TO_SHAPE, K_SLICE, K_PAD, K_CONCAT,
  K_ONE_HOT, K_SOFTMAX, K_LOG_SOFTMAX, K_XENT, K_ASSIGN, K_ASSIGN_ADD, K_ASSIGN_SUB,
};

enum { MAX_IN = 3 };

typedef struct in_spec {
  graft_dtype dt;
  int rank;
  int64_t dims[4]; /* the call's concrete dims */
  unsigned sym;    /* dims declared -1 in the signature variant (bit per dim) */
} in_spec;

typedef struct refusal {
  const char *name;
  int kind;
  int n_in;
  in_spec in[MAX_IN];
  /* parameters */
  int binop;              /* K_BINARY: index into k_binops */
  int p[4], n_p;          /* axes, perm, axis, flags, depth (p[0]) */
  int rank2;              /* target rank */
  int64_t a[4], b[4];     /* target shape or begin; size or pad shape */
  graft_dtype to;         /* cast, one_hot */
  /* expectations */
  graft_status want;
  const char *frag[3];    /* message fragments (spaces ignored) */
} refusal;

#define F64 GRAFT_F64
#define F32 GRAFT_F32
#define I32 GRAFT_I32
#define V1(dt, a, s) {dt, 1, {a}, s}
#define V2(dt, a, b, s) {dt, 2, {a, b}, s}
#define V3(dt, a, b, c, s) {dt, 3, {a, b, c}, s}

/* The variable the assign cases write: f64 [1] holding 7. */
static graft_variable *g_var;

static const struct {
  const char *name;
  graft_value *(*fn)(graft_trace *, graft_value *, graft_value *);
  int int_ok;
} k_binops[] = {
    {"add", graft_add, 1},         {"sub", graft_sub, 1},         {"mul", graft_mul, 1},
    {"div", graft_div, 0},         {"pow", graft_pow, 0},         {"maximum", graft_maximum, 1},
    {"minimum", graft_minimum, 1}, {"greater", graft_greater, 1}, {"less", graft_less, 1},
    {"equal", graft_equal, 1},
};

static const refusal k_cases[] = {
    /* a broadcast stretches 1s, never shrinks */
    {"broadcast_to [3] -> [1]", K_BROADCAST_TO, 1, {V1(F64, 3, 1)}, .rank2 = 1, .a = {1},
     .want = GRAFT_ESHAPE, .frag = {"broadcast_to:", "[3]doesnotbroadcastto[1]"}},
    {"broadcast_to [2,3] -> [3]", K_BROADCAST_TO, 1, {V2(F64, 2, 3, 0)}, .rank2 = 1, .a = {3},
     .want = GRAFT_ESHAPE, .frag = {"broadcast_to:", "[2,3]", "[3]"}},
    {"broadcast_to [3,1] -> [3,4,1]", K_BROADCAST_TO, 1, {V2(F64, 3, 1, 1)}, .rank2 = 3,
     .a = {3, 4, 1}, .want = GRAFT_ESHAPE, .frag = {"broadcast_to:", "[3,1]", "[3,4,1]"}},
    {"sum_to_shape [1] -> [3]", K_SUM_TO_SHAPE, 1, {V1(F64, 1, 1)}, .rank2 = 1, .a = {3},
     .want = GRAFT_ESHAPE, .frag = {"sum_to_shape:", "[3]", "[1]"}},
    {"sum_to_shape [3] -> [2,3]", K_SUM_TO_SHAPE, 1, {V1(F64, 3, 0)}, .rank2 = 2, .a = {2, 3},
     .want = GRAFT_ESHAPE, .frag = {"sum_to_shape:", "[2,3]", "[3]"}},
    /* assigns: the value must broadcast to the variable, dtypes equal */
    {"assign [3] to [1]", K_ASSIGN, 1, {V1(F64, 3, 1)}, .want = GRAFT_ESHAPE,
     .frag = {"assign:", "[3]doesnotbroadcasttovariable'v1'[1]"}},
    {"assign_add [3] to [1]", K_ASSIGN_ADD, 1, {V1(F64, 3, 1)}, .want = GRAFT_ESHAPE,
     .frag = {"assign:", "[3]", "'v1'[1]"}},
    {"assign_sub [2,3] to [1]", K_ASSIGN_SUB, 1, {V2(F64, 2, 3, 0)}, .want = GRAFT_ESHAPE,
     .frag = {"assign:", "[2,3]", "'v1'[1]"}},
    {"assign f32 to f64", K_ASSIGN, 1, {V1(F32, 1, 0)}, .want = GRAFT_EDTYPE,
     .frag = {"assign:", "'v1'isf64", "f32"}},
    /* unary dtypes and cast */
    {"sqrt of i32", K_SQRT, 1, {V1(I32, 3, 0)}, .want = GRAFT_EDTYPE, .frag = {"sqrt:", "i32"}},
    {"cast to dtype 9", K_CAST, 1, {V1(F64, 3, 0)}, .to = (graft_dtype)9, .want = GRAFT_EDTYPE,
     .frag = {"cast:", "dtype"}},
    /* where */
    {"where cond [3] values [4]", K_WHERE, 3, {V1(F64, 3, 1), V1(F64, 4, 1), V1(F64, 4, 1)},
     .want = GRAFT_ESHAPE, .frag = {"where:", "[3]", "[4]"}},
    {"where cond [3,1] values [3] and [4]", K_WHERE, 3,
     {V2(F64, 3, 1, 1), V1(F64, 3, 1), V1(F64, 4, 1)}, .want = GRAFT_ESHAPE,
     .frag = {"where:", "[3]", "[4]"}},
    {"where values f32 and f64", K_WHERE, 3, {V1(F64, 3, 0), V1(F32, 3, 0), V1(F64, 3, 0)},
     .want = GRAFT_EDTYPE, .frag = {"where:", "f32", "f64"}},
    /* mul_add */
    {"mul_add [3] * [4] + [4]", K_MUL_ADD, 3, {V1(F64, 3, 1), V1(F64, 4, 1), V1(F64, 4, 1)},
     .want = GRAFT_ESHAPE, .frag = {"mul_add:", "[3]", "[4]"}},
    {"mul_add [3] * [3] + [4]", K_MUL_ADD, 3, {V1(F64, 3, 1), V1(F64, 3, 1), V1(F64, 4, 1)},
     .want = GRAFT_ESHAPE, .frag = {"mul_add:", "[3]", "[4]"}},
    {"mul_add f64 * f64 + f32", K_MUL_ADD, 3, {V1(F64, 3, 0), V1(F64, 3, 0), V1(F32, 3, 0)},
     .want = GRAFT_EDTYPE, .frag = {"mul_add:", "f32"}},
    {"mul_add of i32", K_MUL_ADD, 3, {V1(I32, 3, 0), V1(I32, 3, 0), V1(I32, 3, 0)},
     .want = GRAFT_EDTYPE, .frag = {"mul_add:", "i32"}},
    /* matmul: inner dims, batch dims, ranks, dtypes, flags */
    {"matmul [2,3] x [4,5]", K_MATMUL, 2, {V2(F64, 2, 3, 2), V2(F64, 4, 5, 1)},
     .want = GRAFT_ESHAPE, .frag = {"matmul:", "inner", "[2,3]x[4,5]"}},
    {"matmul [3,2]^T x [4,5]", K_MATMUL, 2, {V2(F64, 3, 2, 1), V2(F64, 4, 5, 1)},
     .p = {GRAFT_TRANS_A}, .want = GRAFT_ESHAPE, .frag = {"matmul:", "[3,2]x[4,5]", "transposed"}},
    {"matmul [2,3] x [5,4]^T", K_MATMUL, 2, {V2(F64, 2, 3, 2), V2(F64, 5, 4, 2)},
     .p = {GRAFT_TRANS_B}, .want = GRAFT_ESHAPE, .frag = {"matmul:", "[2,3]x[5,4]", "transposed"}},
    {"matmul batch [2,3,4] x [3,4,5]", K_MATMUL, 2, {V3(F64, 2, 3, 4, 1), V3(F64, 3, 4, 5, 1)},
     .want = GRAFT_ESHAPE, .frag = {"matmul:", "batch", "[2,3,4]x[3,4,5]"}},
    {"matmul rank 1", K_MATMUL, 2, {V1(F64, 3, 0), V2(F64, 3, 4, 0)}, .want = GRAFT_ESHAPE,
     .frag = {"matmul:", "rank", "[3]x[3,4]"}},
    {"matmul of i32", K_MATMUL, 2, {V2(I32, 2, 3, 0), V2(I32, 3, 4, 0)}, .want = GRAFT_EDTYPE,
     .frag = {"matmul:", "i32"}},
    {"matmul f32 x f64", K_MATMUL, 2, {V2(F32, 2, 3, 0), V2(F64, 3, 4, 0)}, .want = GRAFT_EDTYPE,
     .frag = {"matmul:", "f32", "f64"}},
    {"matmul flags 4", K_MATMUL, 2, {V2(F64, 2, 3, 0), V2(F64, 3, 4, 0)}, .p = {4},
     .want = GRAFT_EINVAL, .frag = {"matmul:", "flags"}},
    /* reductions */
    {"reduce_sum axis 2 of rank 2", K_REDUCE_SUM, 1, {V2(F64, 2, 3, 0)}, .p = {2}, .n_p = 1,
     .want = GRAFT_EINVAL, .frag = {"reduce_sum:", "axis", "2"}},
    {"reduce_sum axis -3 of rank 2", K_REDUCE_SUM, 1, {V2(F64, 2, 3, 0)}, .p = {-3}, .n_p = 1,
     .want = GRAFT_EINVAL, .frag = {"reduce_sum:", "axis"}},
    {"reduce_sum axes 1 and -1", K_REDUCE_SUM, 1, {V2(F64, 2, 3, 0)}, .p = {1, -1}, .n_p = 2,
     .want = GRAFT_EINVAL, .frag = {"reduce_sum:", "axis"}},
    {"reduce_mean of i32", K_REDUCE_MEAN, 1, {V2(I32, 2, 3, 0)}, .want = GRAFT_EDTYPE,
     .frag = {"reduce_mean:", "i32"}},
    {"logsumexp of i32", K_LOGSUMEXP, 1, {V2(I32, 2, 3, 0)}, .want = GRAFT_EDTYPE,
     .frag = {"logsumexp:", "i32"}},
    /* transpose */
    {"transpose perm 0,0", K_TRANSPOSE, 1, {V2(F64, 2, 3, 0)}, .p = {0, 0}, .want = GRAFT_EINVAL,
     .frag = {"transpose:", "perm", "0..1"}},
    {"transpose perm 0,2", K_TRANSPOSE, 1, {V2(F64, 2, 3, 0)}, .p = {0, 2}, .want = GRAFT_EINVAL,
     .frag = {"transpose:", "perm"}},
    {"transpose perm -1,0", K_TRANSPOSE, 1, {V2(F64, 2, 3, 0)}, .p = {-1, 0},
     .want = GRAFT_EINVAL, .frag = {"transpose:", "perm"}},
    /* reshape: element counts */
    {"reshape [2,3] -> [4]", K_RESHAPE, 1, {V2(F64, 2, 3, 1)}, .rank2 = 1, .a = {4},
     .want = GRAFT_ESHAPE, .frag = {"reshape:", "[2,3](6elements)", "[4](4elements)"}},
    {"reshape [2,3] -> [-1,4]", K_RESHAPE, 1, {V2(F64, 2, 3, 1)}, .rank2 = 2, .a = {-1, 4},
     .want = GRAFT_ESHAPE, .frag = {"reshape:", "[2,3](6elements)", "[-1,4]"}},
    {"reshape [0,3] -> [-1,0]", K_RESHAPE, 1, {V2(F64, 0, 3, 0)}, .rank2 = 2, .a = {-1, 0},
     .want = GRAFT_ESHAPE, .frag = {"reshape:", "[0,3]"}},
    {"reshape with two -1", K_RESHAPE, 1, {V2(F64, 2, 3, 0)}, .rank2 = 2, .a = {-1, -1},
     .want = GRAFT_EINVAL, .frag = {"reshape:", "-1"}},
    /* slice bounds */
    {"slice [4] at 3 size 2", K_SLICE, 1, {V1(F64, 4, 1)}, .a = {3}, .b = {2},
     .want = GRAFT_EINVAL, .frag = {"slice:", "dim0", "[4]"}},
    {"slice [4] at 5 to the end", K_SLICE, 1, {V1(F64, 4, 1)}, .a = {5}, .b = {-1},
     .want = GRAFT_EINVAL, .frag = {"slice:", "dim0", "[4]"}},
    {"slice [4] at -1", K_SLICE, 1, {V1(F64, 4, 0)}, .a = {-1}, .b = {2}, .want = GRAFT_EINVAL,
     .frag = {"slice:", "-1"}},
    {"slice [4] size -2", K_SLICE, 1, {V1(F64, 4, 0)}, .a = {0}, .b = {-2}, .want = GRAFT_EINVAL,
     .frag = {"slice:", "-2"}},
    /* pad: the input must fit */
    {"pad [3] at 1 into [3]", K_PAD, 1, {V1(F64, 3, 1)}, .a = {1}, .rank2 = 1, .b = {3},
     .want = GRAFT_ESHAPE, .frag = {"pad:", "[3]placedat1doesnotfitin3"}},
    {"pad [3] into [2]", K_PAD, 1, {V1(F64, 3, 1)}, .a = {0}, .rank2 = 1, .b = {2},
     .want = GRAFT_ESHAPE, .frag = {"pad:", "[3]", "2"}},
    {"pad [3] into [2,3]", K_PAD, 1, {V1(F64, 3, 0)}, .a = {0, 0}, .rank2 = 2, .b = {2, 3},
     .want = GRAFT_ESHAPE, .frag = {"pad:", "rank"}},
    {"pad [3] at -1", K_PAD, 1, {V1(F64, 3, 0)}, .a = {-1}, .rank2 = 1, .b = {5},
     .want = GRAFT_EINVAL, .frag = {"pad:", "-1"}},
    /* concat */
    {"concat [2,3] [3,3] axis 1", K_CONCAT, 2, {V2(F64, 2, 3, 1), V2(F64, 3, 3, 1)}, .p = {1},
     .want = GRAFT_ESHAPE, .frag = {"concat:", "[3,3]", "[2,3]"}},
    {"concat [2,3] [3] axis 0", K_CONCAT, 2, {V2(F64, 2, 3, 0), V1(F64, 3, 0)}, .p = {0},
     .want = GRAFT_ESHAPE, .frag = {"concat:", "rank"}},
    {"concat f64 f32", K_CONCAT, 2, {V1(F64, 3, 0), V1(F32, 3, 0)}, .p = {0},
     .want = GRAFT_EDTYPE, .frag = {"concat:", "f32", "f64"}},
    {"concat axis 2 of rank 2", K_CONCAT, 2, {V2(F64, 2, 3, 0), V2(F64, 2, 3, 0)}, .p = {2},
     .want = GRAFT_EINVAL, .frag = {"concat:", "axis", "rank2"}},
    /* one_hot */
    {"one_hot of f32 labels", K_ONE_HOT, 1, {V1(F32, 3, 0)}, .p = {4}, .to = F64,
     .want = GRAFT_EDTYPE, .frag = {"one_hot:", "i32", "f32"}},
    {"one_hot depth -1", K_ONE_HOT, 1, {V1(I32, 3, 0)}, .p = {-1}, .to = F64,
     .want = GRAFT_EINVAL, .frag = {"one_hot:", "depth", "-1"}},
    {"one_hot to i32", K_ONE_HOT, 1, {V1(I32, 3, 0)}, .p = {4}, .to = I32, .want = GRAFT_EDTYPE,
     .frag = {"one_hot:", "f32orf64"}},
    /* softmax axis */
    {"softmax axis 2 of rank 2", K_SOFTMAX, 1, {V2(F64, 2, 3, 0)}, .p = {2},
     .want = GRAFT_EINVAL, .frag = {"softmax:", "axis", "rank2"}},
    {"log_softmax axis -3 of rank 2", K_LOG_SOFTMAX, 1, {V2(F64, 2, 3, 0)}, .p = {-3},
     .want = GRAFT_EINVAL, .frag = {"log_softmax:", "axis", "rank2"}},
    {"softmax of i32", K_SOFTMAX, 1, {V2(I32, 2, 3, 0)}, .p = {1}, .want = GRAFT_EDTYPE,
     .frag = {"softmax:", "i32"}},
    /* cross-entropy */
    {"softmax_cross_entropy logits [3]", K_XENT, 2, {V1(F64, 3, 0), V1(I32, 3, 0)},
     .want = GRAFT_ESHAPE, .frag = {"softmax_cross_entropy:", "[N,C]", "[3]"}},
    {"softmax_cross_entropy batch 3 vs 2", K_XENT, 2, {V2(F64, 3, 4, 1), V1(I32, 2, 1)},
     .want = GRAFT_ESHAPE, .frag = {"softmax_cross_entropy:", "batch", "[3,4]"}},
    {"softmax_cross_entropy labels [3,1]", K_XENT, 2, {V2(F64, 3, 4, 0), V2(I32, 3, 1, 0)},
     .want = GRAFT_ESHAPE, .frag = {"softmax_cross_entropy:", "[3,1]"}},
    {"softmax_cross_entropy f64 labels", K_XENT, 2, {V2(F64, 3, 4, 0), V1(F64, 3, 0)},
     .want = GRAFT_EDTYPE, .frag = {"softmax_cross_entropy:", "labels", "i32"}},
    {"softmax_cross_entropy i32 logits", K_XENT, 2, {V2(I32, 3, 4, 0), V1(I32, 3, 0)},
     .want = GRAFT_EDTYPE, .frag = {"softmax_cross_entropy:", "logits", "i32"}},
};

static graft_value *build(graft_trace *t, const refusal *c, graft_value *const *in) {
  graft_value *x = in[0];
  switch (c->kind) {
  case K_BINARY: return k_binops[c->binop].fn(t, x, in[1]);
  case K_SQRT: return graft_sqrt(t, x);
  case K_CAST: return graft_cast(t, x, c->to);
  case K_WHERE: return graft_where(t, x, in[1], in[2]);
  case K_MUL_ADD: return graft_mul_add(t, x, in[1], in[2]);
  case K_MATMUL: return graft_matmul(t, x, in[1], (unsigned)c->p[0]);
  case K_REDUCE_SUM: return graft_reduce_sum(t, x, c->n_p, c->p, 0);
  case K_REDUCE_MEAN: return graft_reduce_mean(t, x, c->n_p, c->p, 0);
  case K_LOGSUMEXP: return graft_logsumexp(t, x, c->n_p, c->p, 0);
  case K_TRANSPOSE: return graft_transpose(t, x, c->p);
  case K_RESHAPE: return graft_reshape(t, x, c->rank2, c->a);
  case K_BROADCAST_TO: return graft_broadcast_to(t, x, c->rank2, c->a);
  case K_SUM_TO_SHAPE: return graft_sum_to_shape(t, x, c->rank2, c->a);
  case K_SLICE: return graft_slice(t, x, c->a, c->b);
  case K_PAD: return graft_pad(t, x, c->a, c->rank2, c->b);
  case K_CONCAT: return graft_concat(t, c->n_in, in, c->p[0]);
  case K_ONE_HOT: return graft_one_hot(t, x, c->p[0], c->to);
  case K_SOFTMAX: return graft_softmax(t, x, c->p[0]);
  case K_LOG_SOFTMAX: return graft_log_softmax(t, x, c->p[0]);
  case K_XENT: return graft_softmax_cross_entropy(t, x, in[1]);
  case K_ASSIGN: return graft_assign(t, g_var, x);
  case K_ASSIGN_ADD: return graft_assign_add(t, g_var, x);
  default: return graft_assign_sub(t, g_var, x);
  }
}

/* out[0]: the op's value (assigns too: the variable's new value). */
static graft_status trace_case(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = build(t, user, in);
  return graft_trace_status(t);
}

static int has_sym(const refusal *c) {
  for (int i = 0; i < c->n_in; i++)
    if (c->in[i].sym) return 1;
  return 0;
}

/* Call a function on c's inputs (with the -1 signature when sig) and check
 * the refusal; stage says where it must fail. */
static void check_refused(const refusal *c, int sig, const char *stage) {
  graft_tensor *in[MAX_IN];
  graft_dtype dts[MAX_IN];
  int ranks[MAX_IN];
  int64_t sdims[MAX_IN][4];
  const int64_t *shapes[MAX_IN];
  for (int i = 0; i < c->n_in; i++) {
    const in_spec *s = &c->in[i];
    in[i] = tu_tensor_from(s->dt, s->rank, s->dims, NULL);
    memset(graft_tensor_data(in[i]), 0,
           (size_t)graft_tensor_numel(in[i]) * graft_dtype_size(s->dt));
    dts[i] = s->dt;
    ranks[i] = s->rank;
    for (int d = 0; d < s->rank; d++) sdims[i][d] = (s->sym & (1u << d)) ? -1 : s->dims[d];
    shapes[i] = sdims[i];
  }
  graft_signature sg = {c->n_in, dts, ranks, shapes};
  graft_function *f = tu_function(g_rt, "refusal", trace_case, (void *)c, c->n_in, 1,
                                  sig ? &sg : NULL);
  graft_tensor *out = NULL;
  char ctx[160];
  snprintf(ctx, sizeof ctx, "%s (%s)", c->name, stage);
  graft_status st = graft_function_call(f, c->n_in, in, 1, &out);
  const char *msg = graft_function_errmsg(f);
  tu_assert_run_fails(st, c->want, out, msg, NULL, ctx);
  for (int k = 0; k < 3 && c->frag[k]; k++)
    if (!tu_msg_has(msg, c->frag[k]))
      fail_msg("%s: message \"%s\" lacks \"%s\"", ctx, msg, c->frag[k]);
  if (!tu_msg_has(msg, "(op#") || !tu_msg_has(msg, "intrace'refusal'"))
    fail_msg("%s: message \"%s\" does not place the op in its trace", ctx, msg);
  if (sig) {
    /* a failed trace is retraced by the next call; a trace that succeeded
     * is reused, and its compile fails again the same way */
    char first[1024];
    snprintf(first, sizeof first, "%s", msg);
    st = graft_function_call(f, c->n_in, in, 1, &out);
    tu_assert_run_fails(st, c->want, out, graft_function_errmsg(f), NULL, ctx);
    if (graft_function_trace_count(f) != 1)
      fail_msg("%s: traced %d times in two calls: the trace failed (\"%s\"), where only the "
               "compile should", ctx, graft_function_trace_count(f), first);
    if (strcmp(first, graft_function_errmsg(f)))
      fail_msg("%s: the second call said \"%s\", the first \"%s\"", ctx,
               graft_function_errmsg(f), first);
  }
  if (tu_get(graft_variable_value(g_var), 0) != 7.0)
    fail_msg("%s: the failed call changed the variable to %g", ctx,
             tu_get(graft_variable_value(g_var), 0));
  graft_function_destroy(f);
  tu_destroy_outs(in, c->n_in);
}

static int setup(void **state) {
  tu_group_setup(state);
  static const int64_t s1[] = {1};
  return graft_variable_create(NULL, "v1", GRAFT_F64, 1, s1, (double[]){7}, 0, &g_var);
}

static int teardown(void **state) {
  graft_variable_destroy(g_var);
  return tu_group_teardown(state);
}

/* Every case at trace time, with concrete dims. */
static void test_shape_rules__refuse_at_trace_time(void **state) {
  (void)state;
  for (size_t k = 0; k < TU_N_OF(k_cases); k++) check_refused(&k_cases[k], 0, "trace time");
}

/* The cases that depend on a dim, with that dim declared -1: the trace
 * succeeds and the call with the bad sizes fails when it compiles. */
static void test_shape_rules__refuse_at_compile_time(void **state) {
  (void)state;
  int n = 0;
  for (size_t k = 0; k < TU_N_OF(k_cases); k++)
    if (has_sym(&k_cases[k])) {
      check_refused(&k_cases[k], 1, "compile time");
      n++;
    }
  assert_true(n >= 20);
}

/* Every binary op: shapes that do not broadcast ([3] vs [4], [2,3] vs
 * [3,2], [0] vs [3]), in both modes; operand dtypes that differ; i32 where
 * the op has no i32 kernel. */
static void test_binary_ops__refuse_shapes_and_dtypes(void **state) {
  (void)state;
  static const struct {
    in_spec a, b;
    const char *frag;
  } shapes[] = {{V1(F64, 3, 1), V1(F64, 4, 1), "[3]with[4]"},
                {V2(F64, 2, 3, 3), V2(F64, 3, 2, 3), "[2,3]with[3,2]"},
                {V1(F64, 0, 1), V1(F64, 3, 1), "[0]with[3]"}};
  for (size_t op = 0; op < TU_N_OF(k_binops); op++) {
    char name[64], opname[32];
    snprintf(opname, sizeof opname, "%s:", k_binops[op].name);
    for (size_t s = 0; s < TU_N_OF(shapes); s++) {
      refusal c = {name, K_BINARY, 2, {shapes[s].a, shapes[s].b}, .binop = (int)op,
                   .want = GRAFT_ESHAPE, .frag = {opname, "cannotbroadcast", shapes[s].frag}};
      snprintf(name, sizeof name, "%s %s", k_binops[op].name, shapes[s].frag);
      check_refused(&c, 0, "trace time");
      check_refused(&c, 1, "compile time");
    }
    refusal d = {name, K_BINARY, 2, {V1(F64, 3, 0), V1(F32, 3, 0)}, .binop = (int)op,
                 .want = GRAFT_EDTYPE, .frag = {opname, "f64vsf32"}};
    snprintf(name, sizeof name, "%s f64 with f32", k_binops[op].name);
    check_refused(&d, 0, "trace time");
    if (!k_binops[op].int_ok) {
      refusal e = {name, K_BINARY, 2, {V1(I32, 3, 0), V1(I32, 3, 0)}, .binop = (int)op,
                   .want = GRAFT_EDTYPE, .frag = {opname, "i32"}};
      snprintf(name, sizeof name, "%s of i32", k_binops[op].name);
      check_refused(&e, 0, "trace time");
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shape_rules__refuse_at_trace_time),
      cmocka_unit_test(test_shape_rules__refuse_at_compile_time),
      cmocka_unit_test(test_binary_ops__refuse_shapes_and_dtypes),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
