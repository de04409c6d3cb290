/* graft internal: THE op list.  Every op is named once, here.
 *
 * X(ENUM, name, arity, shape_rule, flags, cost, tile)
 *   ENUM        GRAFT__OP_<ENUM>
 *   name        the public name (graft_<name>), used in messages and DOT
 *   arity       number of data inputs; -1 = variadic (concat)
 *   shape_rule  a graft__shape_<rule> function of shape.c
 *   flags       GRAFT__OPF_* below
 *   cost        relative work per element (matmul: per multiply-add), for
 *               the partitioner's balance and the tiler's grain
 *   tile        how the scheduler may split the op's units into tiles:
 *               UNITS any split (elementwise, shape ops, reductions by output
 *               element, softmax rows); GEMM column blocks of at least
 *               GRAFT__MM_MIN_COLS columns within one batch (row blocks of
 *               at least GRAFT__MM_MIN_ROWS rows for narrower outputs; each
 *               one gemm call), or whole batches; ONE never split
 */
#ifndef GRAFT_OP_MAP_H
#define GRAFT_OP_MAP_H

/* The op keeps no kernel: its buffer is bound at call time (input tensor,
 * variable storage). */
#define GRAFT__OPF_EXTERNAL 0x01u
/* i32 operands are accepted. */
#define GRAFT__OPF_INT 0x02u
/* Elementwise over broadcast inputs (may later run in place). */
#define GRAFT__OPF_ELEMWISE 0x04u
/* Has an effect beyond its value (kept by pruning). */
#define GRAFT__OPF_SIDE_EFFECT 0x08u
/* The kernel may fail on data (e.g. a label out of range). */
#define GRAFT__OPF_FALLIBLE 0x10u
/* Leaf: no data inputs. */
#define GRAFT__OPF_LEAF 0x20u
/* Output is f32/f64 only even if it has no float input. */
#define GRAFT__OPF_FLOAT 0x40u
/* Control flow (attr.ctl): runs subgraphs; its value packs its outputs,
 * which GET nodes read (graph/control.c traces it, sched/control.c runs it). */
#define GRAFT__OPF_CONTROL 0x80u

/* Tiling kinds (the tile column). */
enum graft__tile_kind { GRAFT__TILE_UNITS, GRAFT__TILE_GEMM, GRAFT__TILE_ONE };

#define GRAFT_OP_MAP(X)                                                           \
  /* leaves */                                                                    \
  X(INPUT, "input", 0, leaf, GRAFT__OPF_LEAF | GRAFT__OPF_EXTERNAL | GRAFT__OPF_INT, 0, ONE) \
  X(VAR_READ, "read", 0, leaf, GRAFT__OPF_LEAF | GRAFT__OPF_EXTERNAL | GRAFT__OPF_INT, 0, ONE) \
  X(CONST, "constant", 0, leaf, GRAFT__OPF_LEAF | GRAFT__OPF_INT, 1, UNITS)                 \
  X(FILL, "fill", 0, leaf, GRAFT__OPF_LEAF | GRAFT__OPF_INT, 1, UNITS)                      \
  /* elementwise unary */                                                         \
  X(NEG, "neg", 1, unary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)                   \
  X(SQUARE, "square", 1, unary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)             \
  X(SQRT, "sqrt", 1, unary, GRAFT__OPF_ELEMWISE, 4, UNITS)                                  \
  X(EXP, "exp", 1, unary, GRAFT__OPF_ELEMWISE, 8, UNITS)                                    \
  X(LOG, "log", 1, unary, GRAFT__OPF_ELEMWISE, 8, UNITS)                                    \
  X(LOG1P, "log1p", 1, unary, GRAFT__OPF_ELEMWISE, 8, UNITS)                                \
  X(TANH, "tanh", 1, unary, GRAFT__OPF_ELEMWISE, 8, UNITS)                                  \
  X(SIGMOID, "sigmoid", 1, unary, GRAFT__OPF_ELEMWISE, 8, UNITS)                            \
  X(RELU, "relu", 1, unary, GRAFT__OPF_ELEMWISE, 1, UNITS)                                  \
  X(ABS, "abs", 1, unary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)                   \
  X(SIGN, "sign", 1, unary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)                 \
  X(SIN, "sin", 1, unary, GRAFT__OPF_ELEMWISE, 8, UNITS)                                    \
  X(COS, "cos", 1, unary, GRAFT__OPF_ELEMWISE, 8, UNITS)                                    \
  X(TAN, "tan", 1, unary, GRAFT__OPF_ELEMWISE, 10, UNITS)                                    \
  X(LGAMMA, "lgamma", 1, unary, GRAFT__OPF_ELEMWISE, 40, UNITS)                              \
  X(DIGAMMA, "digamma", 1, unary, GRAFT__OPF_ELEMWISE, 40, UNITS)                            \
  X(POLYGAMMA, "polygamma", 1, unary, GRAFT__OPF_ELEMWISE, 60, UNITS)                        \
  X(STOP_GRADIENT, "stop_gradient", 1, unary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS) \
  X(CAST, "cast", 1, cast, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)                  \
  /* elementwise binary, broadcasting */                                          \
  X(ADD, "add", 2, binary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)                  \
  X(SUB, "sub", 2, binary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)                  \
  X(MUL, "mul", 2, binary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)                  \
  X(DIV, "div", 2, binary, GRAFT__OPF_ELEMWISE, 2, UNITS)                                   \
  X(POW, "pow", 2, binary, GRAFT__OPF_ELEMWISE, 12, UNITS)                                   \
  X(MAXIMUM, "maximum", 2, binary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)          \
  X(MINIMUM, "minimum", 2, binary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)          \
  X(GREATER, "greater", 2, binary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)          \
  X(LESS, "less", 2, binary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)                \
  X(EQUAL, "equal", 2, binary, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)              \
  X(WHERE, "where", 3, where, GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS)               \
  X(MUL_ADD, "mul_add", 3, mul_add, GRAFT__OPF_ELEMWISE, 2, UNITS)                          \
  /* reductions */                                                                \
  X(REDUCE_SUM, "reduce_sum", 1, reduce, GRAFT__OPF_INT, 1, UNITS)                          \
  X(REDUCE_MEAN, "reduce_mean", 1, reduce, 0, 1, UNITS)                                     \
  X(REDUCE_MAX, "reduce_max", 1, reduce, GRAFT__OPF_INT, 1, UNITS)                          \
  X(REDUCE_PROD, "reduce_prod", 1, reduce, GRAFT__OPF_INT, 1, UNITS)                        \
  X(LOGSUMEXP, "logsumexp", 1, reduce, 0, 8, UNITS)                                         \
  /* linear algebra */                                                            \
  X(MATMUL, "matmul", 2, matmul, 0, 1, GEMM)                                               \
  /* shape ops */                                                                 \
  X(TRANSPOSE, "transpose", 1, transpose, GRAFT__OPF_INT, 1, UNITS)                         \
  X(RESHAPE, "reshape", 1, reshape, GRAFT__OPF_INT, 1, UNITS)                               \
  X(BROADCAST_TO, "broadcast_to", 1, broadcast_to, GRAFT__OPF_INT, 1, UNITS)                \
  X(SUM_TO_SHAPE, "sum_to_shape", 1, sum_to_shape, GRAFT__OPF_INT, 1, UNITS)                \
  X(SLICE, "slice", 1, slice, GRAFT__OPF_INT, 1, UNITS)                                     \
  X(CONCAT, "concat", -1, concat, GRAFT__OPF_INT, 1, UNITS)                                 \
  X(PAD, "pad", 1, pad, GRAFT__OPF_INT, 1, UNITS)                                           \
  X(ONE_HOT, "one_hot", 1, one_hot, GRAFT__OPF_INT | GRAFT__OPF_FLOAT, 1, UNITS)            \
  /* neural-network ops */                                                        \
  X(SOFTMAX, "softmax", 1, softmax, 0, 10, UNITS)                                            \
  X(LOG_SOFTMAX, "log_softmax", 1, softmax, 0, 10, UNITS)                                    \
  X(SOFTMAX_XENT, "softmax_cross_entropy", 2, xent, GRAFT__OPF_FALLIBLE, 10, ONE)          \
  /* convolution and pooling (attr.conv; graph/conv.c; CONV2D* units and      \
   * scratch: kernels/conv.c)  */                                               \
  X(CONV2D, "conv2d", 2, conv2d, 0, 8, UNITS)                                                \
  X(CONV2D_W, "conv2d_backward_weight", 2, conv2d_w, 0, 8, UNITS)                            \
  X(CONV2D_X, "conv2d_backward_input", 2, conv2d_x, 0, 8, UNITS)                             \
  X(IM2COL, "im2col", 1, im2col, 0, 1, UNITS)                                                \
  X(COL2IM, "col2im", 1, col2im, 0, 4, UNITS)                                                \
  X(MAX_POOL2D, "max_pool2d", 1, max_pool2d, 0, 4, UNITS)                                    \
  X(MAX_POOL2D_GRAD, "max_pool2d_backward", 2, max_pool2d_grad, 0, 4, UNITS)                \
  X(MAX_POOL2D_SELECT, "max_pool2d_select", 2, max_pool2d_select, 0, 4, UNITS)              \
  /* gradient plumbing */                                                           \
  X(CUSTOM, "custom_gradient", -1, custom, GRAFT__OPF_INT, 1, UNITS)                        \
  /* control flow: one indivisible unit that runs subgraphs; GET copies one   \
   * output out of the packed value */                                          \
  X(COND, "cond", -1, ctl, GRAFT__OPF_INT | GRAFT__OPF_CONTROL, 1, ONE)                     \
  X(WHILE, "while_loop", -1, ctl, GRAFT__OPF_INT | GRAFT__OPF_CONTROL, 1, ONE)              \
  X(SCAN, "scan", -1, ctl, GRAFT__OPF_INT | GRAFT__OPF_CONTROL, 1, ONE)                     \
  X(REMAT, "remat", -1, ctl, GRAFT__OPF_INT | GRAFT__OPF_CONTROL, 1, ONE)                   \
  X(GET, "get", 1, get, GRAFT__OPF_INT, 1, UNITS)                                           \
  /* side effects */                                                              \
  X(ASSIGN, "assign", 1, assign, GRAFT__OPF_SIDE_EFFECT | GRAFT__OPF_ELEMWISE | GRAFT__OPF_INT, 1, UNITS) \
  X(UPDATE, "update", -1, update, GRAFT__OPF_SIDE_EFFECT, 6, UNITS)                          \
  /* collectives over MPI (attr.coll; dist/mpi.c traces them,                 \
   * sched/collective.c runs them): ALLREDUCE packs its members and posts one  \
   * non-blocking all-reduce; an ALLREDUCE_TAKE waits for it and writes one   \
   * member's mean (it fails when the wait does: kept by pruning) */          \
  X(ALLREDUCE, "allreduce_mean", -1, allreduce, 0, 1, ONE)                                   \
  X(ALLREDUCE_TAKE, "allreduce_take", 1, allreduce_take, GRAFT__OPF_FALLIBLE, 1, UNITS)

typedef enum graft__op {
#define GRAFT__OP_ENUM_(e, name, arity, rule, flags, cost, tile) GRAFT__OP_##e,
  GRAFT_OP_MAP(GRAFT__OP_ENUM_)
#undef GRAFT__OP_ENUM_
  GRAFT__OP_COUNT
} graft__op;

#endif /* GRAFT_OP_MAP_H */
