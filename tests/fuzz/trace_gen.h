/* The trace program of the `trace` fuzz target: a trace callback that
 * decodes fuzz bytes into calls of every public op, gradient, variable and
 * control-flow API (see trace_gen.c for the encoding; control flow's
 * bodies are decoded from the same stream), and the list of what it
 * emits.
 *
 * The same bytes always trace the same graph, so the two functions of one
 * fuzz input (one per scheduler) record identical graphs. */
#ifndef GRAFT_FUZZ_TRACE_GEN_H
#define GRAFT_FUZZ_TRACE_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "budget.h"
#include "graft.h"
#include "reader.h"

enum {
  FZ_MAX_IN = 4,      /* function inputs */
  FZ_MAX_VARS = 3,    /* variables */
  FZ_MAX_OUT = 4,     /* outputs the program picks */
  FZ_EXTRA_OUT = 2,   /* forced outputs: values of ops that can fail on data */
  FZ_MAX_STALE = 4,   /* handles of dead traces */
  FZ_POOL = 64,       /* values an op may take as operands */
  FZ_MAX_OPS = 48,    /* ops per trace */
  FZ_MAX_AD = 3,      /* gradient/JVP/HVP/Jacobian calls per trace */
  FZ_MAX_DEPTH = 3,   /* bodies nest this deep at most (control ops deeper are skipped) */
  FZ_BODY_OPS = 6,    /* ops per body */
  FZ_TOTAL_OPS = 96,  /* ops per trace, bodies included */
  FZ_CTL_MAX = 4,     /* a construct's decoded inputs and outputs */
};

/* The op kinds the decoder emits; an opcode byte selects one (mod the
 * count).  Unary, binary and reduction ops first (tables of functions),
 * then the rest, each with its own parameter decoder. */
#define FZ_UNARY_OPS(X)                                                                  \
  X(NEG, graft_neg) X(SQUARE, graft_square) X(SQRT, graft_sqrt) X(EXP, graft_exp)         \
  X(LOG, graft_log) X(LOG1P, graft_log1p) X(TANH, graft_tanh) X(SIGMOID, graft_sigmoid)   \
  X(RELU, graft_relu) X(ABS, graft_abs) X(SIGN, graft_sign) X(SIN, graft_sin)             \
  X(COS, graft_cos) X(TAN, graft_tan) X(LGAMMA, graft_lgamma) X(DIGAMMA, graft_digamma)   \
  X(STOP_GRADIENT, graft_stop_gradient) X(ZEROS_LIKE, graft_zeros_like)                   \
  X(ONES_LIKE, graft_ones_like)
#define FZ_BINARY_OPS(X)                                                                 \
  X(ADD, graft_add) X(SUB, graft_sub) X(MUL, graft_mul) X(DIV, graft_div)                 \
  X(POW, graft_pow) X(MAXIMUM, graft_maximum) X(MINIMUM, graft_minimum)                   \
  X(GREATER, graft_greater) X(LESS, graft_less) X(EQUAL, graft_equal)
#define FZ_REDUCE_OPS(X)                                                                 \
  X(REDUCE_SUM, graft_reduce_sum) X(REDUCE_MEAN, graft_reduce_mean)                       \
  X(REDUCE_MAX, graft_reduce_max) X(REDUCE_PROD, graft_reduce_prod)                       \
  X(LOGSUMEXP, graft_logsumexp)
#define FZ_OTHER_OPS(X)                                                                  \
  X(SCALAR) X(CONSTANT) X(FILL) X(WHERE) X(MUL_ADD) X(POLYGAMMA) X(CAST) X(MATMUL)        \
  X(TRANSPOSE) X(RESHAPE) X(BROADCAST_TO) X(SUM_TO_SHAPE) X(SLICE) X(PAD) X(CONCAT)       \
  X(ONE_HOT) X(SOFTMAX) X(LOG_SOFTMAX) X(SOFTMAX_XENT) X(READ) X(ASSIGN) X(ASSIGN_ADD)    \
  X(ASSIGN_SUB) X(GRADIENTS) X(JVP) X(HVP) X(JACOBIAN_FWD) X(JACOBIAN_REV)                \
  X(CUSTOM_GRADIENT) X(TRACE_FAIL) X(INSPECT) X(OPTIMIZE) X(CLIP) X(CONV2D) X(MAX_POOL2D)    \
  X(AVG_POOL2D) X(COND) X(WHILE_LOOP) X(SCAN) X(REMAT)

typedef enum fz_op {
#define FZ_OP_ENUM_FN_(e, fn) FZ_OP_##e,
#define FZ_OP_ENUM_(e) FZ_OP_##e,
  FZ_UNARY_OPS(FZ_OP_ENUM_FN_) FZ_BINARY_OPS(FZ_OP_ENUM_FN_) FZ_REDUCE_OPS(FZ_OP_ENUM_FN_)
  FZ_OTHER_OPS(FZ_OP_ENUM_)
#undef FZ_OP_ENUM_FN_
#undef FZ_OP_ENUM_
  FZ_OP_COUNT
} fz_op;

/* "add", "gradients", ... */
const char *fz_op_name(int op);

/* GRAFT_FUZZ_AVOID=huge,neg,... steers the decoders away from input
 * classes that find bugs already known, so a fuzzing session can look for
 * new ones.  The default (and CI) avoids nothing. */
enum {
  FZ_AVOID_HUGE = 1u << 0,    /* dims past 2^31 (overflowing sizes) */
  FZ_AVOID_NEG = 1u << 1,     /* negative dims, unknown symbol codes */
  FZ_AVOID_STALE = 1u << 2,   /* handles of dead traces */
  FZ_AVOID_PRUNE = 1u << 3,   /* fallible ops whose output is pruned */
  FZ_AVOID_RECURSE = 1u << 4, /* a VJP that calls graft_gradients on its own region */
  FZ_AVOID_STATUS = 1u << 5,  /* undocumented statuses from callbacks */
  FZ_AVOID_VJP = 1u << 6,     /* VJP results of the wrong shape or dtype */
  FZ_AVOID_TOPO = 1u << 7,    /* synthetic topologies with many objects */
  FZ_AVOID_API = 1u << 8,     /* misaligned tensor_wrap, runtime_describe into NULL */
  FZ_AVOID_ORPHAN = 1u << 9,  /* a call on a function whose runtime was destroyed */
  FZ_AVOID_EMPTY = 1u << 10,  /* zero-element values in and out of control flow */
  FZ_AVOID_READ = 1u << 11,   /* a read of a NULL variable in a body */
};
/* Parse a GRAFT_FUZZ_AVOID value; -1 (with a message on stderr) on an
 * unknown word. */
int fz_avoid_parse(const char *s, unsigned *out);

/* What a trace callback decodes, and what it reports back.  One per
 * function (the variables differ between the two). */
typedef struct fz_trace_prog {
  const uint8_t *data;
  size_t size, body;             /* the op stream starts at data[body] */
  unsigned avoid;
  int verbose;                   /* log each op decoded, on stderr */
  const void *blob;              /* constant data: FZ_BLOB_BYTES readable bytes */
  int n_out;                     /* outputs the program picks ... */
  int n_extra;                   /* ... then this many forced ones (0 or FZ_EXTRA_OUT) */
  graft_variable *vars[FZ_MAX_VARS]; /* NULL: absent (the ops get NULL) */
  int n_vars;
  /* An optimizer (graft/optim.h) over opt_vars, some of vars, or NULL. */
  graft_module *opt;
  graft_variable *opt_vars[FZ_MAX_VARS];
  int n_opt;
  graft_value *stale[FZ_MAX_STALE];  /* handles of a dead trace */
  int n_stale;
  /* Set by each trace: the op kinds it emitted without an error. */
  uint8_t emitted[FZ_OP_COUNT];
} fz_trace_prog;

/* Readable bytes behind fz_trace_prog.blob: graft_constant reads up to
 * numel * dtype size of them, and any constant larger than the budget's
 * block is refused (budget.h) before its data is read. */
#define FZ_BLOB_BYTES ((size_t)FZ_BLOCK_LIMIT + 4096)

/* A dim from the stream (the classes trace_gen.c describes: small, huge,
 * negative, raw), for the shapes of inputs and variables. */
int64_t fz_dim_decode(fz_reader *r, unsigned avoid);

/* The trace callback (user: a fz_trace_prog). */
graft_status fz_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                      graft_value **out, void *user);

#endif /* GRAFT_FUZZ_TRACE_GEN_H */
