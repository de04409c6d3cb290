/* The op table shared by the VJP tests (test_vjp_ops.c) and the JVP tests
 * (test_jvp.c): one row per case, an op, its inputs (shape, how the values
 * are drawn: away from kinks, poles and ties) and its parameters.
 *
 * build_group expands a group of rows into a case list (every unary op on
 * a matrix and a scalar, every binary op on broadcasting shape pairs, every
 * reduction over several axis sets with and without keepdims, matmul with
 * every flag and broadcast batch dims, and the written-out shape, softmax,
 * cross-entropy, where, mul_add and cast rows); make_inputs draws a case's inputs
 * (f32-representable, the same numbers in either float dtype); apply_op
 * traces the case's op; weights_like makes fixed random weights shaped like
 * a value (odd multiples of 1/64, exact in f32); op_loss is the scalar
 * loss reduce_sum(w * op(inputs)) of a case.
 *
 * The cast rows mix dtypes by nature (.mixed); their inputs sit on a 2^-12
 * grid and their .step is 2^-10, so perturbed values are exact in f32.
 *
 * Header-only (static inline); include after <cmocka.h>. */
#ifndef GRAFT_TEST_OP_ROWS_H
#define GRAFT_TEST_OP_ROWS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ---- the table ------------------------------------------------------------ */

enum op {
  /* unary */
  OP_NEG, OP_SQUARE, OP_SQRT, OP_EXP, OP_LOG, OP_LOG1P, OP_TANH, OP_SIGMOID, OP_RELU, OP_ABS,
  OP_SIGN, OP_SIN, OP_COS, OP_TAN, OP_LGAMMA, OP_DIGAMMA, OP_POLYGAMMA, OP_CAST,
  /* binary */
  OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MAXIMUM, OP_MINIMUM, OP_GREATER, OP_LESS,
  OP_WHERE, OP_MUL_ADD,
  /* reductions */
  OP_REDUCE_SUM, OP_REDUCE_MEAN, OP_REDUCE_MAX, OP_REDUCE_PROD, OP_LOGSUMEXP,
  /* the rest */
  OP_MATMUL, OP_TRANSPOSE, OP_RESHAPE, OP_BROADCAST_TO, OP_SUM_TO_SHAPE, OP_SLICE, OP_PAD,
  OP_CONCAT, OP_SOFTMAX, OP_LOG_SOFTMAX, OP_XENT,
};

/* How an input's values are drawn (all f32-representable). */
enum gen {
  GEN_UNIFORM, /* uniform in [lo, hi) */
  GEN_AWAY0,   /* magnitude uniform in [lo, hi), random sign: away from 0 */
  GEN_GRID,    /* multiples of 1/8 in [lo, hi] */
  GEN_GRID_ODD,/* odd multiples of 1/16 in [lo, hi]: never equal to a GEN_GRID value */
  GEN_FINE,    /* multiples of 2^-12 in [lo, hi] (the cast rows) */
  GEN_ZEROS,   /* GEN_AWAY0, with every 4th element exactly 0 */
  GEN_LABELS,  /* i32 in [lo, hi] */
};

/* An input's dtype: the case's float dtype, or fixed. */
enum { DT_CASE, DT_F32, DT_F64, DT_I32 };

typedef struct in_spec {
  int rank;
  int64_t shape[4];
  int gen;
  double lo, hi;
  int dt;
} in_spec;

typedef struct op_case {
  char name[192];
  int op;
  int n_in;
  in_spec in[3];
  /* parameters (what the op needs) */
  int n_axes, axes[3], keepdims; /* reductions */
  unsigned flags;                /* matmul */
  int axis;                      /* concat, softmax */
  const int *perm;               /* transpose (NULL: reverse) */
  int rank2;                     /* reshape, broadcast_to, sum_to_shape, pad target */
  int64_t shape2[4];
  int64_t begin[4], size[4];     /* slice, pad */
  int poly_n;                    /* polygamma order */
  graft_dtype cast_to;           /* cast */
  int cast_same;                 /* cast to the input's own dtype */
  /* checking */
  double step;                   /* 0: GC_STEP */
  int mixed;                     /* fixed dtypes: no f32-vs-f64 check */
  uint64_t seed;
} op_case;

/* Shorthands for in_spec initializers. */
#define IN0(g, lo, hi) {0, {0}, g, lo, hi, DT_CASE}
#define IN1(a, g, lo, hi) {1, {a}, g, lo, hi, DT_CASE}
#define IN2(a, b, g, lo, hi) {2, {a, b}, g, lo, hi, DT_CASE}
#define IN3(a, b, c, g, lo, hi) {3, {a, b, c}, g, lo, hi, DT_CASE}
#define IN4(a, b, c, d, g, lo, hi) {4, {a, b, c, d}, g, lo, hi, DT_CASE}

/* ---- unary rows --------------------------------------------------------- */

typedef struct unary_row {
  const char *name;
  int op, poly_n;
  int gen;
  double lo, hi;
  int smooth; /* also checked to second order */
} unary_row;

static const unary_row k_unary[] = {
    {"neg", OP_NEG, 0, GEN_UNIFORM, -2, 2, 1},
    {"square", OP_SQUARE, 0, GEN_UNIFORM, -2, 2, 1},
    {"sqrt", OP_SQRT, 0, GEN_UNIFORM, 0.5, 3, 1},
    {"exp", OP_EXP, 0, GEN_UNIFORM, -2, 2, 1},
    {"log", OP_LOG, 0, GEN_UNIFORM, 0.5, 3, 1},
    {"log1p", OP_LOG1P, 0, GEN_UNIFORM, -0.5, 2, 1},
    {"tanh", OP_TANH, 0, GEN_UNIFORM, -2, 2, 1},
    {"sigmoid", OP_SIGMOID, 0, GEN_UNIFORM, -3, 3, 1},
    {"relu", OP_RELU, 0, GEN_AWAY0, 0.1, 2, 0},
    {"abs", OP_ABS, 0, GEN_AWAY0, 0.1, 2, 0},
    {"sign", OP_SIGN, 0, GEN_AWAY0, 0.1, 2, 0},
    {"sin", OP_SIN, 0, GEN_UNIFORM, -3, 3, 1},
    {"cos", OP_COS, 0, GEN_UNIFORM, -3, 3, 1},
    {"tan", OP_TAN, 0, GEN_UNIFORM, -1.2, 1.2, 1},
    {"lgamma", OP_LGAMMA, 0, GEN_UNIFORM, 0.5, 4, 1},
    {"digamma", OP_DIGAMMA, 0, GEN_UNIFORM, 0.5, 4, 1},
    {"polygamma(0)", OP_POLYGAMMA, 0, GEN_UNIFORM, 0.5, 4, 0},
    {"polygamma(1)", OP_POLYGAMMA, 1, GEN_UNIFORM, 0.5, 4, 1},
    {"polygamma(2)", OP_POLYGAMMA, 2, GEN_UNIFORM, 0.5, 4, 0},
    {"cast(same dtype)", OP_CAST, 0, GEN_UNIFORM, -2, 2, 0},
};

/* Unary shapes: a matrix and a scalar. */
static const in_spec k_unary_shapes[] = {IN2(3, 5, 0, 0, 0), IN0(0, 0, 0)};

/* ---- binary rows -------------------------------------------------------- */

typedef struct binary_row {
  const char *name;
  int op;
  int gen_a;
  double lo_a, hi_a;
  int gen_b;
  double lo_b, hi_b;
} binary_row;

static const binary_row k_binary[] = {
    {"add", OP_ADD, GEN_UNIFORM, -2, 2, GEN_UNIFORM, -2, 2},
    {"sub", OP_SUB, GEN_UNIFORM, -2, 2, GEN_UNIFORM, -2, 2},
    {"mul", OP_MUL, GEN_UNIFORM, -2, 2, GEN_UNIFORM, -2, 2},
    {"div", OP_DIV, GEN_UNIFORM, -2, 2, GEN_AWAY0, 0.5, 2},
    {"pow", OP_POW, GEN_UNIFORM, 0.5, 2, GEN_UNIFORM, -2, 2},
    {"maximum", OP_MAXIMUM, GEN_GRID_ODD, -2, 2, GEN_GRID, -2, 2},
    {"minimum", OP_MINIMUM, GEN_GRID_ODD, -2, 2, GEN_GRID, -2, 2},
    /* No gradient: graft's is zero, and so are the differences away from ties. */
    {"greater", OP_GREATER, GEN_GRID_ODD, -2, 2, GEN_GRID, -2, 2},
    {"less", OP_LESS, GEN_GRID_ODD, -2, 2, GEN_GRID, -2, 2},
};

/* Operand shape pairs, broadcasting every way. */
static const struct {
  in_spec a, b;
} k_binary_shapes[] = {
    {IN2(3, 4, 0, 0, 0), IN2(3, 4, 0, 0, 0)},
    {IN3(3, 1, 4, 0, 0, 0), IN2(5, 1, 0, 0, 0)},
    {IN2(5, 1, 0, 0, 0), IN3(3, 1, 4, 0, 0, 0)},
    {IN0(0, 0, 0), IN2(2, 3, 0, 0, 0)},
    {IN2(2, 3, 0, 0, 0), IN0(0, 0, 0)},
    {IN1(4, 0, 0, 0), IN2(3, 1, 0, 0, 0)},
};

/* ---- reduction rows ----------------------------------------------------- */

static const struct {
  const char *name;
  int op, gen;
  double lo, hi;
} k_reduce[] = {
    {"reduce_sum", OP_REDUCE_SUM, GEN_UNIFORM, -2, 2},
    {"reduce_mean", OP_REDUCE_MEAN, GEN_UNIFORM, -2, 2},
    {"reduce_max", OP_REDUCE_MAX, GEN_UNIFORM, -2, 2},
    {"reduce_prod", OP_REDUCE_PROD, GEN_AWAY0, 0.6, 1.4},
    {"reduce_prod(zeros)", OP_REDUCE_PROD, GEN_ZEROS, 0.6, 1.4},
    {"logsumexp", OP_LOGSUMEXP, GEN_UNIFORM, -2, 2},
};

static const struct {
  int n;
  int axes[3];
} k_axis_sets[] = {{0, {0}},    {1, {0}},    {1, {1}},    {1, {-1}},
                   {2, {0, 2}}, {2, {2, 1}}, {3, {0, 1, 2}}};

/* ---- shape, nn, where, mul_add and cast rows (written out) ------------------ */

static const int k_perm_201[] = {2, 0, 1};
static const int k_perm_102[] = {1, 0, 2};

static const op_case k_misc[] = {
    /* transpose */
    {.name = "transpose [2,3,4] perm 2,0,1", .op = OP_TRANSPOSE, .n_in = 1,
     .in = {IN3(2, 3, 4, GEN_UNIFORM, -2, 2)}, .perm = k_perm_201},
    {.name = "transpose [2,3,4] perm 1,0,2", .op = OP_TRANSPOSE, .n_in = 1,
     .in = {IN3(2, 3, 4, GEN_UNIFORM, -2, 2)}, .perm = k_perm_102},
    {.name = "transpose [3,5] reversed", .op = OP_TRANSPOSE, .n_in = 1,
     .in = {IN2(3, 5, GEN_UNIFORM, -2, 2)}},
    /* reshape */
    {.name = "reshape [3,4,5] -> [5,12]", .op = OP_RESHAPE, .n_in = 1,
     .in = {IN3(3, 4, 5, GEN_UNIFORM, -2, 2)}, .rank2 = 2, .shape2 = {5, 12}},
    {.name = "reshape [3,4,5] -> [-1,2,5]", .op = OP_RESHAPE, .n_in = 1,
     .in = {IN3(3, 4, 5, GEN_UNIFORM, -2, 2)}, .rank2 = 3, .shape2 = {-1, 2, 5}},
    {.name = "reshape [1] -> []", .op = OP_RESHAPE, .n_in = 1,
     .in = {IN1(1, GEN_UNIFORM, -2, 2)}, .rank2 = 0},
    /* broadcast_to */
    {.name = "broadcast_to [3,1,4] -> [2,3,5,4]", .op = OP_BROADCAST_TO, .n_in = 1,
     .in = {IN3(3, 1, 4, GEN_UNIFORM, -2, 2)}, .rank2 = 4, .shape2 = {2, 3, 5, 4}},
    {.name = "broadcast_to [] -> [3,4]", .op = OP_BROADCAST_TO, .n_in = 1,
     .in = {IN0(GEN_UNIFORM, -2, 2)}, .rank2 = 2, .shape2 = {3, 4}},
    {.name = "broadcast_to [4] -> [3,4]", .op = OP_BROADCAST_TO, .n_in = 1,
     .in = {IN1(4, GEN_UNIFORM, -2, 2)}, .rank2 = 2, .shape2 = {3, 4}},
    /* sum_to_shape */
    {.name = "sum_to_shape [2,3,4] -> [3,1]", .op = OP_SUM_TO_SHAPE, .n_in = 1,
     .in = {IN3(2, 3, 4, GEN_UNIFORM, -2, 2)}, .rank2 = 2, .shape2 = {3, 1}},
    {.name = "sum_to_shape [2,3,4] -> [4]", .op = OP_SUM_TO_SHAPE, .n_in = 1,
     .in = {IN3(2, 3, 4, GEN_UNIFORM, -2, 2)}, .rank2 = 1, .shape2 = {4}},
    {.name = "sum_to_shape [2,3,4] -> []", .op = OP_SUM_TO_SHAPE, .n_in = 1,
     .in = {IN3(2, 3, 4, GEN_UNIFORM, -2, 2)}, .rank2 = 0},
    {.name = "sum_to_shape [2,3,4] -> [2,1,4]", .op = OP_SUM_TO_SHAPE, .n_in = 1,
     .in = {IN3(2, 3, 4, GEN_UNIFORM, -2, 2)}, .rank2 = 3, .shape2 = {2, 1, 4}},
    /* slice */
    {.name = "slice [4,5,6] at 1,0,2 size 2,-1,3", .op = OP_SLICE, .n_in = 1,
     .in = {IN3(4, 5, 6, GEN_UNIFORM, -2, 2)}, .begin = {1, 0, 2}, .size = {2, -1, 3}},
    {.name = "slice [5,4] at 0,1 size 5,2", .op = OP_SLICE, .n_in = 1,
     .in = {IN2(5, 4, GEN_UNIFORM, -2, 2)}, .begin = {0, 1}, .size = {5, 2}},
    /* pad */
    {.name = "pad [2,3] at 1,2 into [4,6]", .op = OP_PAD, .n_in = 1,
     .in = {IN2(2, 3, GEN_UNIFORM, -2, 2)}, .begin = {1, 2}, .rank2 = 2, .shape2 = {4, 6}},
    {.name = "pad [3] at 0 into [5]", .op = OP_PAD, .n_in = 1, .in = {IN1(3, GEN_UNIFORM, -2, 2)},
     .begin = {0}, .rank2 = 1, .shape2 = {5}},
    /* concat */
    {.name = "concat [2,3] [2,1] [2,4] axis 1", .op = OP_CONCAT, .n_in = 3,
     .in = {IN2(2, 3, GEN_UNIFORM, -2, 2), IN2(2, 1, GEN_UNIFORM, -2, 2),
            IN2(2, 4, GEN_UNIFORM, -2, 2)},
     .axis = 1},
    {.name = "concat [1,3] [2,3] axis 0", .op = OP_CONCAT, .n_in = 2,
     .in = {IN2(1, 3, GEN_UNIFORM, -2, 2), IN2(2, 3, GEN_UNIFORM, -2, 2)}, .axis = 0},
    {.name = "concat [2,2,3] [2,2,2] axis -1", .op = OP_CONCAT, .n_in = 2,
     .in = {IN3(2, 2, 3, GEN_UNIFORM, -2, 2), IN3(2, 2, 2, GEN_UNIFORM, -2, 2)}, .axis = -1},
    /* softmax / log_softmax */
    {.name = "softmax [3,4,5] axis 1", .op = OP_SOFTMAX, .n_in = 1,
     .in = {IN3(3, 4, 5, GEN_UNIFORM, -2, 2)}, .axis = 1},
    {.name = "softmax [3,4,5] axis -1", .op = OP_SOFTMAX, .n_in = 1,
     .in = {IN3(3, 4, 5, GEN_UNIFORM, -2, 2)}, .axis = -1},
    {.name = "softmax [4,6] axis 0", .op = OP_SOFTMAX, .n_in = 1,
     .in = {IN2(4, 6, GEN_UNIFORM, -2, 2)}, .axis = 0},
    {.name = "log_softmax [3,4,5] axis 1", .op = OP_LOG_SOFTMAX, .n_in = 1,
     .in = {IN3(3, 4, 5, GEN_UNIFORM, -2, 2)}, .axis = 1},
    {.name = "log_softmax [3,4,5] axis -1", .op = OP_LOG_SOFTMAX, .n_in = 1,
     .in = {IN3(3, 4, 5, GEN_UNIFORM, -2, 2)}, .axis = -1},
    {.name = "log_softmax [4,6] axis 0", .op = OP_LOG_SOFTMAX, .n_in = 1,
     .in = {IN2(4, 6, GEN_UNIFORM, -2, 2)}, .axis = 0},
    /* softmax_cross_entropy, w.r.t. the logits (labels are i32) */
    {.name = "softmax_cross_entropy [6,4]", .op = OP_XENT, .n_in = 2,
     .in = {IN2(6, 4, GEN_UNIFORM, -3, 3), {1, {6}, GEN_LABELS, 0, 3, DT_I32}}},
    {.name = "softmax_cross_entropy [1,7]", .op = OP_XENT, .n_in = 2,
     .in = {IN2(1, 7, GEN_UNIFORM, -3, 3), {1, {1}, GEN_LABELS, 0, 6, DT_I32}}},
    /* where (w.r.t. both branches; the condition is a constant pattern) */
    {.name = "where [3,4] ? [3,4] : [3,4]", .op = OP_WHERE, .n_in = 2,
     .in = {IN2(3, 4, GEN_UNIFORM, -2, 2), IN2(3, 4, GEN_UNIFORM, -2, 2)}, .rank2 = 2,
     .shape2 = {3, 4}},
    {.name = "where [3,1,4] ? [5,1] : []", .op = OP_WHERE, .n_in = 2,
     .in = {IN2(5, 1, GEN_UNIFORM, -2, 2), IN0(GEN_UNIFORM, -2, 2)}, .rank2 = 3,
     .shape2 = {3, 1, 4}},
    {.name = "where [5,1] ? [] : [3,1,4]", .op = OP_WHERE, .n_in = 2,
     .in = {IN0(GEN_UNIFORM, -2, 2), IN3(3, 1, 4, GEN_UNIFORM, -2, 2)}, .rank2 = 2,
     .shape2 = {5, 1}},
    /* mul_add, w.r.t. all three operands, broadcasting every way */
    {.name = "mul_add [3,4] * [3,4] + [3,4]", .op = OP_MUL_ADD, .n_in = 3,
     .in = {IN2(3, 4, GEN_UNIFORM, -2, 2), IN2(3, 4, GEN_UNIFORM, -2, 2),
            IN2(3, 4, GEN_UNIFORM, -2, 2)}},
    {.name = "mul_add [] * [3,4] + [3,4]", .op = OP_MUL_ADD, .n_in = 3,
     .in = {IN0(GEN_UNIFORM, -2, 2), IN2(3, 4, GEN_UNIFORM, -2, 2),
            IN2(3, 4, GEN_UNIFORM, -2, 2)}},
    {.name = "mul_add [3,1,4] * [5,1] + [4]", .op = OP_MUL_ADD, .n_in = 3,
     .in = {IN3(3, 1, 4, GEN_UNIFORM, -2, 2), IN2(5, 1, GEN_UNIFORM, -2, 2),
            IN1(4, GEN_UNIFORM, -2, 2)}},
    {.name = "mul_add [4] * [] + [2,3,1]", .op = OP_MUL_ADD, .n_in = 3,
     .in = {IN1(4, GEN_UNIFORM, -2, 2), IN0(GEN_UNIFORM, -2, 2),
            IN3(2, 3, 1, GEN_UNIFORM, -2, 2)}},
    /* cast between the float dtypes (exact grids, see the file comment) */
    {.name = "cast f32 -> f64", .op = OP_CAST, .n_in = 1,
     .in = {{2, {3, 5}, GEN_FINE, -1, 1, DT_F32}}, .cast_to = GRAFT_F64, .step = 0x1p-10,
     .mixed = 1},
    {.name = "cast f64 -> f32", .op = OP_CAST, .n_in = 1,
     .in = {{2, {3, 5}, GEN_FINE, -1, 1, DT_F64}}, .cast_to = GRAFT_F32, .step = 0x1p-10,
     .mixed = 1},
};

/* ---- building the case list ------------------------------------------------- */

enum group { G_UNARY, G_BINARY, G_REDUCE, G_MATMUL, G_MISC, G_COUNT };

typedef struct case_list {
  op_case *c;
  int n, cap;
} case_list;

static inline op_case *push_case(case_list *l) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    l->c = realloc(l->c, (size_t)l->cap * sizeof *l->c);
    assert_non_null(l->c);
  }
  op_case *c = &l->c[l->n++];
  memset(c, 0, sizeof *c);
  c->seed = 0x9e3779b97f4a7c15ull * (uint64_t)l->n + 12345u;
  return c;
}

static inline int fmt_shape(char *b, size_t len, const in_spec *s) {
  char tmp[64];
  return snprintf(b, len, "%s", tu_fmt_shape_(tmp, sizeof tmp, s->rank, s->shape));
}

static inline void set_shape(in_spec *d, const in_spec *shape, int gen, double lo, double hi) {
  *d = *shape;
  d->gen = gen;
  d->lo = lo;
  d->hi = hi;
  d->dt = DT_CASE;
}

static inline void build_group(int g, case_list *l) {
  switch (g) {
  case G_UNARY:
    for (size_t r = 0; r < TU_N_OF(k_unary); r++)
      for (size_t s = 0; s < TU_N_OF(k_unary_shapes); s++) {
        op_case *c = push_case(l);
        const unary_row *u = &k_unary[r];
        c->op = u->op;
        c->poly_n = u->poly_n;
        c->cast_same = u->op == OP_CAST;
        c->n_in = 1;
        set_shape(&c->in[0], &k_unary_shapes[s], u->gen, u->lo, u->hi);
        char sh[64];
        fmt_shape(sh, sizeof sh, &c->in[0]);
        snprintf(c->name, sizeof c->name, "%s %s", u->name, sh);
      }
    break;
  case G_BINARY:
    for (size_t r = 0; r < TU_N_OF(k_binary); r++)
      for (size_t s = 0; s < TU_N_OF(k_binary_shapes); s++) {
        op_case *c = push_case(l);
        const binary_row *b = &k_binary[r];
        c->op = b->op;
        c->n_in = 2;
        set_shape(&c->in[0], &k_binary_shapes[s].a, b->gen_a, b->lo_a, b->hi_a);
        set_shape(&c->in[1], &k_binary_shapes[s].b, b->gen_b, b->lo_b, b->hi_b);
        char sa[64], sb[64];
        fmt_shape(sa, sizeof sa, &c->in[0]);
        fmt_shape(sb, sizeof sb, &c->in[1]);
        snprintf(c->name, sizeof c->name, "%s %s %s", b->name, sa, sb);
      }
    break;
  case G_REDUCE:
    for (size_t r = 0; r < TU_N_OF(k_reduce); r++)
      for (size_t a = 0; a < TU_N_OF(k_axis_sets); a++)
        for (int keep = 0; keep < 2; keep++) {
          op_case *c = push_case(l);
          c->op = k_reduce[r].op;
          c->n_in = 1;
          const in_spec s345 = IN3(3, 4, 5, 0, 0, 0);
          set_shape(&c->in[0], &s345, k_reduce[r].gen, k_reduce[r].lo, k_reduce[r].hi);
          c->n_axes = k_axis_sets[a].n;
          memcpy(c->axes, k_axis_sets[a].axes, sizeof c->axes);
          c->keepdims = keep;
          char ax[32] = "all";
          if (c->n_axes) {
            int w = 0;
            for (int i = 0; i < c->n_axes; i++)
              w += snprintf(ax + w, sizeof ax - (size_t)w, i ? ",%d" : "%d", c->axes[i]);
          }
          snprintf(c->name, sizeof c->name, "%s [3,4,5] axes %s keepdims %d", k_reduce[r].name,
                   ax, keep);
        }
    break;
  case G_MATMUL: {
    /* batch dims of a and b: none, on one side, and broadcast on both. */
    static const struct {
      int ra, rb;
      int64_t a[2], b[2];
    } batch[] = {{0, 0, {0}, {0}}, {1, 0, {2}, {0}}, {0, 1, {0}, {2}}, {2, 1, {2, 1}, {3}}};
    const int64_t m = 3, k = 4, n = 5;
    for (unsigned fl = 0; fl < 4; fl++)
      for (size_t b = 0; b < TU_N_OF(batch); b++) {
        op_case *c = push_case(l);
        c->op = OP_MATMUL;
        c->flags = fl;
        c->n_in = 2;
        in_spec *A = &c->in[0], *B = &c->in[1];
        A->rank = batch[b].ra + 2;
        B->rank = batch[b].rb + 2;
        for (int i = 0; i < batch[b].ra; i++) A->shape[i] = batch[b].a[i];
        for (int i = 0; i < batch[b].rb; i++) B->shape[i] = batch[b].b[i];
        A->shape[A->rank - 2] = (fl & GRAFT_TRANS_A) ? k : m;
        A->shape[A->rank - 1] = (fl & GRAFT_TRANS_A) ? m : k;
        B->shape[B->rank - 2] = (fl & GRAFT_TRANS_B) ? n : k;
        B->shape[B->rank - 1] = (fl & GRAFT_TRANS_B) ? k : n;
        A->gen = B->gen = GEN_UNIFORM;
        A->lo = B->lo = -2;
        A->hi = B->hi = 2;
        char sa[64], sb[64];
        fmt_shape(sa, sizeof sa, A);
        fmt_shape(sb, sizeof sb, B);
        snprintf(c->name, sizeof c->name, "matmul %s %s%s%s", sa, sb,
                 (fl & GRAFT_TRANS_A) ? " TRANS_A" : "", (fl & GRAFT_TRANS_B) ? " TRANS_B" : "");
      }
    break;
  }
  case G_MISC:
    for (size_t r = 0; r < TU_N_OF(k_misc); r++) {
      op_case *c = push_case(l);
      uint64_t seed = c->seed;
      *c = k_misc[r];
      c->seed = seed;
    }
    break;
  }
}

/* ---- inputs ------------------------------------------------------------------ */

static inline graft_dtype in_dtype(const in_spec *s, graft_dtype dt) {
  switch (s->dt) {
  case DT_F32: return GRAFT_F32;
  case DT_F64: return GRAFT_F64;
  case DT_I32: return GRAFT_I32;
  default: return dt;
  }
}

static inline double draw(tu_rng *r, const in_spec *s, int64_t j) {
  switch (s->gen) {
  case GEN_AWAY0:
  case GEN_ZEROS: {
    if (s->gen == GEN_ZEROS && j % 4 == 0) return 0.0;
    double m = tu_uniform(r, s->lo, s->hi);
    return tu_int(r, 0, 1) ? m : -m;
  }
  case GEN_GRID: return (double)tu_int(r, (int64_t)(s->lo * 8), (int64_t)(s->hi * 8)) / 8.0;
  case GEN_GRID_ODD:
    return (2.0 * (double)tu_int(r, (int64_t)(s->lo * 8), (int64_t)(s->hi * 8) - 1) + 1.0) / 16.0;
  case GEN_FINE: return (double)tu_int(r, (int64_t)(s->lo * 4096), (int64_t)(s->hi * 4096)) / 4096.0;
  case GEN_LABELS: return (double)tu_int(r, (int64_t)s->lo, (int64_t)s->hi);
  default: return tu_uniform(r, s->lo, s->hi);
  }
}

/* The case's inputs in dtype dt (f32-representable values whatever dt). */
static inline void make_inputs(const op_case *c, graft_dtype dt, graft_tensor **in) {
  tu_rng r = {c->seed | 1u};
  for (int i = 0; i < c->n_in; i++) {
    const in_spec *s = &c->in[i];
    in[i] = tu_tensor_from(in_dtype(s, dt), s->rank, s->shape, NULL);
    for (int64_t j = 0; j < graft_tensor_numel(in[i]); j++)
      tu_set(in[i], j, (double)(float)draw(&r, s, j));
  }
}

/* ---- applying a row ------------------------------------------------------------------ */

/* A constant of v's dtype and shape holding odd multiples of 1/64 in
 * (-1, 1), drawn from seed (the same on every trace). */
static inline graft_value *weights_like(graft_trace *t, graft_value *v, uint64_t seed) {
  int rank = graft_value_rank(v);
  const int64_t *shape = graft_value_shape(v);
  int64_t n = tu_numel(rank, shape);
  double *w = malloc((size_t)(n ? n : 1) * sizeof *w);
  float *wf = malloc((size_t)(n ? n : 1) * sizeof *wf);
  assert_true(w && wf);
  tu_rng r = {(seed * 31u + 7u) | 1u};
  for (int64_t j = 0; j < n; j++) {
    w[j] = (2.0 * (double)tu_int(&r, -32, 31) + 1.0) / 64.0;
    wf[j] = (float)w[j];
  }
  graft_dtype dt = graft_value_dtype(v);
  graft_value *c = graft_constant(t, dt, rank, shape, dt == GRAFT_F32 ? (void *)wf : (void *)w);
  free(w);
  free(wf);
  return c;
}

/* The where condition: a constant of shape (rank2, shape2) in the operands'
 * dtype, nonzero where (3j + 1) % 5 < 3. */
static inline graft_value *where_cond(graft_trace *t, const op_case *c, graft_dtype dt) {
  int64_t n = tu_numel(c->rank2, c->shape2);
  double vals[64];
  assert_true(n <= 64);
  for (int64_t j = 0; j < n; j++) vals[j] = (3 * j + 1) % 5 < 3 ? 1.0 : 0.0;
  graft_tensor *h = tu_tensor_from(dt, c->rank2, c->shape2, vals);
  graft_value *v = graft_constant(t, dt, c->rank2, c->shape2, graft_tensor_data(h));
  graft_tensor_destroy(h);
  return v;
}

static inline graft_value *apply_op(graft_trace *t, const op_case *c, graft_value *const *in) {
  graft_value *x = in[0];
  switch (c->op) {
  case OP_NEG: return graft_neg(t, x);
  case OP_SQUARE: return graft_square(t, x);
  case OP_SQRT: return graft_sqrt(t, x);
  case OP_EXP: return graft_exp(t, x);
  case OP_LOG: return graft_log(t, x);
  case OP_LOG1P: return graft_log1p(t, x);
  case OP_TANH: return graft_tanh(t, x);
  case OP_SIGMOID: return graft_sigmoid(t, x);
  case OP_RELU: return graft_relu(t, x);
  case OP_ABS: return graft_abs(t, x);
  case OP_SIGN: return graft_sign(t, x);
  case OP_SIN: return graft_sin(t, x);
  case OP_COS: return graft_cos(t, x);
  case OP_TAN: return graft_tan(t, x);
  case OP_LGAMMA: return graft_lgamma(t, x);
  case OP_DIGAMMA: return graft_digamma(t, x);
  case OP_POLYGAMMA: return graft_polygamma(t, c->poly_n, x);
  case OP_CAST: return graft_cast(t, x, c->cast_same ? graft_value_dtype(x) : c->cast_to);
  case OP_ADD: return graft_add(t, x, in[1]);
  case OP_SUB: return graft_sub(t, x, in[1]);
  case OP_MUL: return graft_mul(t, x, in[1]);
  case OP_DIV: return graft_div(t, x, in[1]);
  case OP_POW: return graft_pow(t, x, in[1]);
  case OP_MAXIMUM: return graft_maximum(t, x, in[1]);
  case OP_MINIMUM: return graft_minimum(t, x, in[1]);
  case OP_GREATER: return graft_greater(t, x, in[1]);
  case OP_LESS: return graft_less(t, x, in[1]);
  case OP_WHERE: return graft_where(t, where_cond(t, c, graft_value_dtype(x)), x, in[1]);
  case OP_MUL_ADD: return graft_mul_add(t, x, in[1], in[2]);
  case OP_REDUCE_SUM: return graft_reduce_sum(t, x, c->n_axes, c->axes, c->keepdims);
  case OP_REDUCE_MEAN: return graft_reduce_mean(t, x, c->n_axes, c->axes, c->keepdims);
  case OP_REDUCE_MAX: return graft_reduce_max(t, x, c->n_axes, c->axes, c->keepdims);
  case OP_REDUCE_PROD: return graft_reduce_prod(t, x, c->n_axes, c->axes, c->keepdims);
  case OP_LOGSUMEXP: return graft_logsumexp(t, x, c->n_axes, c->axes, c->keepdims);
  case OP_MATMUL: return graft_matmul(t, x, in[1], c->flags);
  case OP_TRANSPOSE: return graft_transpose(t, x, c->perm);
  case OP_RESHAPE: return graft_reshape(t, x, c->rank2, c->shape2);
  case OP_BROADCAST_TO: return graft_broadcast_to(t, x, c->rank2, c->shape2);
  case OP_SUM_TO_SHAPE: return graft_sum_to_shape(t, x, c->rank2, c->shape2);
  case OP_SLICE: return graft_slice(t, x, c->begin, c->size);
  case OP_PAD: return graft_pad(t, x, c->begin, c->rank2, c->shape2);
  case OP_CONCAT: return graft_concat(t, c->n_in, in, c->axis);
  case OP_SOFTMAX: return graft_softmax(t, x, c->axis);
  case OP_LOG_SOFTMAX: return graft_log_softmax(t, x, c->axis);
  case OP_XENT: return graft_softmax_cross_entropy(t, x, in[1]);
  }
  graft_trace_fail(t, GRAFT_EINTERNAL, "test: unknown op %d", c->op);
  return NULL;
}

/* The loss of a case (a gc_loss_fn, user: the op_case): reduce_sum(w *
 * op(in)) with w = weights_like(op(in), seed). */
static inline graft_value *op_loss(graft_trace *t, int n_in, graft_value *const *in, void *user) {
  (void)n_in;
  const op_case *c = user;
  graft_value *y = apply_op(t, c, in);
  if (graft_value_is_poison(y)) return y;
  return graft_reduce_sum(t, graft_mul(t, weights_like(t, y, c->seed), y), 0, NULL, 0);
}

#endif /* GRAFT_TEST_OP_ROWS_H */
