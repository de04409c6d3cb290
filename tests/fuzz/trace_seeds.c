/* Seed inputs of the `trace` target, written by
 *   fuzz_replay_trace --seeds tests/fuzz/corpus/trace
 * (`make fuzz-seeds`): one input per op kind on a small float or integer
 * environment, and programs that chain them (a training step with
 * gradients and an assign, gradients of gradients, an HVP, a JVP through a
 * custom gradient; cond, while_loop, scan and remat with gradients and
 * JVPs through them, nested, with captures) under the runtime options and
 * header flags the decoder knows.  The encoding follows trace_target.c
 * (header) and trace_gen.c (op stream); replaying the corpus with --check
 * verifies that every op kind is emitted by some input whose call succeeds
 * under both schedulers, so a seed that drifted from the decoder shows. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "trace_gen.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Header flags and option indexes (trace_target.c). */
enum { F_SIGNATURE = 1, F_TWO_CALLS = 2, F_STALE = 4, F_STATS = 8, F_ORPHAN = 16, F_DROP_VAR = 32,
       F_ARITY = 64, F_CACHE_ONE = 128 };
enum { O_GRAIN, O_MEMORY, O_PARTITION, O_TOPOLOGY, O_BIND, O_THREADS, O_TRACE, O_DESCRIBE, O_COUNT };

typedef struct tdesc {
  unsigned dt; /* 0 f32, 1 f64, 2 i32 */
  int rank;
  int64_t d[4];
  unsigned sym;  /* bit i: dim i is -1 in the signature */
  int64_t alt[4]; /* second call's dims (0: the same) */
  unsigned init;  /* variables: trace_target.c's init byte (0: 2, trainable from data) */
} tdesc;

typedef struct env {
  unsigned flags;
  unsigned opt[O_COUNT];
  int n_in, n_vars, n_out;
  tdesc in[FZ_MAX_IN], var[FZ_MAX_VARS];
  unsigned out_mode[FZ_MAX_OUT];
} env;

typedef struct seed {
  uint8_t b[512];
  size_t n;
} seed;

static void put(seed *s, unsigned v) {
  if (s->n < sizeof s->b) s->b[s->n++] = (uint8_t)v;
}

static void put_bytes(seed *s, const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++) put(s, b[i]);
}

static void put_dim(seed *s, int64_t d) { /* trace_gen.c dim_from: literal below 16 */
  if (d >= 0 && d < 16) {
    put(s, (unsigned)d);
    return;
  }
  put(s, 88);
  for (int i = 0; i < 8; i++) put(s, (unsigned)((uint64_t)d >> (8 * i)) & 0xffu);
}

static void put_env(seed *s, const env *e) {
  put(s, e->flags);
  put(s, (unsigned)e->n_in);
  put(s, (unsigned)e->n_vars);
  put(s, (unsigned)e->n_out);
  for (int i = 0; i < O_COUNT; i++) put(s, e->opt[i]);
  put(s, 7);  /* data seed */
  put(s, 0);  /* data mode: plain values */
  for (int i = 0; i < e->n_in; i++) {
    const tdesc *t = &e->in[i];
    put(s, t->dt);
    put(s, (unsigned)t->rank);
    for (int k = 0; k < t->rank; k++) put_dim(s, t->d[k]);
    put(s, 0); /* signature dtype: the input's */
    for (int k = 0; k < t->rank; k++) put(s, (t->sym >> k) & 1);
    for (int k = 0; k < t->rank; k++) put(s, (unsigned)t->alt[k]);
  }
  for (int i = 0; i < e->n_vars; i++) {
    const tdesc *t = &e->var[i];
    put(s, t->dt);
    put(s, (unsigned)t->rank);
    for (int k = 0; k < t->rank; k++) put_dim(s, t->d[k]);
    put(s, t->init ? t->init : 2); /* 2: from data, trainable */
  }
  for (int i = 0; i < e->n_out; i++) put(s, e->out_mode[i]);
  if (e->flags & F_STALE) put(s, 0); /* the dead trace's function is destroyed */
}

/* Environments: a f32 [2,3] and b f32 [3] with a variable f32 [2,3]; the
 * same in f64; two i32 [4]; and a batch of logits x [4,3] with i32
 * labels [4] and weights [3,4]. */
static const env env_f32 = {.n_in = 2, .n_vars = 1, .n_out = 1,
                            .in = {{0, 2, {2, 3}, 0, {0}, 0}, {0, 1, {3}, 0, {0}, 0}},
                            .var = {{0, 2, {2, 3}, 0, {0}, 0}}};
static const env env_f64 = {.n_in = 2, .n_vars = 1, .n_out = 1,
                            .in = {{1, 2, {2, 3}, 0, {0}, 0}, {1, 1, {3}, 0, {0}, 0}},
                            .var = {{1, 2, {2, 3}, 0, {0}, 0}}};
static const env env_i32 = {.n_in = 2, .n_vars = 1, .n_out = 1,
                            .in = {{2, 1, {4}, 0, {0}, 0}, {2, 1, {4}, 0, {0}, 0}},
                            .var = {{2, 1, {4}, 0, {0}, 0}}};
/* init bits (trace_target.c make_optimizer): 4 an optimizer updates the
 * variable, 8 * kind (3: Adam), 64 clipping. */
#define INIT_OPT(kind) (2u | 4u | 8u * (kind))
static const env env_opt = {.n_in = 2, .n_vars = 1, .n_out = 1,
                            .in = {{0, 2, {2, 3}, 0, {0}, 0}, {0, 1, {3}, 0, {0}, 0}},
                            .var = {{0, 2, {2, 3}, 0, {0}, INIT_OPT(3)}}};
/* Images: x f32 [2,2,5,5] (conv2d and the pools). */
static const env env_img = {.n_in = 1, .n_vars = 0, .n_out = 1,
                            .in = {{0, 4, {2, 2, 5, 5}, 0, {0}, 0}}};
static const env env_batch = {.flags = F_TWO_CALLS | F_STATS, .n_in = 2, .n_vars = 1, .n_out = 2,
                              .in = {{0, 2, {4, 3}, 0, {0}, 0}, {2, 1, {4}, 0, {0}, 0}},
                              .var = {{0, 2, {3, 4}, 0, {0}, 0}},
                              .out_mode = {1, 0}};

/* The training step on env_batch: logits = x @ W, loss = xent(logits,
 * labels), g = d loss / d W, W -= 0.5 g; outputs the loss and the new W. */
static const uint8_t prog_train[] = {
    FZ_OP_READ, 0,                /* W */
    FZ_OP_MATMUL, 2, 2, 0, 0,     /* x @ (the first value whose dims fit: W) */
    FZ_OP_SOFTMAX_XENT, 0, 0, 1, 0, /* newest rank-2 logits, labels from the pool */
    FZ_OP_GRADIENTS, 0, 0, 0, 0, 2, 0, /* d loss / d W (the third oldest) */
    FZ_OP_ASSIGN_SUB, 0, 1, 0, 3, /* W -= 0.5 * newest fitting value (g) */
    255, 2, 0, 0};                /* outputs: loss, new W; return OK */

/* The same step with the optimizer of env_adam's variable W instead of
 * the assign: its gradient is the newest value of W's shape (g). */
static const uint8_t prog_train_opt[] = {
    FZ_OP_READ, 0,
    FZ_OP_MATMUL, 2, 2, 0, 0,
    FZ_OP_SOFTMAX_XENT, 0, 0, 1, 0,
    FZ_OP_GRADIENTS, 0, 0, 0, 0, 2, 0,
    FZ_OP_CLIP, 0, 0, 148, 1,     /* clip g to norm 1.5 (rd_double: (148 - 136) / 8), with the norm */
    FZ_OP_OPTIMIZE, 0, 0, 0,      /* one step, W's gradient the newest fitting value */
    255, 4, 0, 0};                /* outputs: loss, new W (pool: W', norm, clipped g, g, loss) */

/* Second derivatives: d/dx of d tanh(x)/dx, and an HVP of sum(sin(x*x)). */
static const uint8_t prog_grad_grad[] = {
    FZ_OP_TANH, 1,
    FZ_OP_GRADIENTS, 0, 0, 0, 0, 0, 0,
    FZ_OP_GRADIENTS, 0, 0, 0, 0, 0, 1, /* of the gradient, seeds: none, x policy zero */
    255, 0, 0};
static const uint8_t prog_hvp[] = {
    FZ_OP_MUL, 1, 0, 0,
    FZ_OP_SIN, 0,
    FZ_OP_HVP, 0, 0, 0, 0, 0,
    255, 0, 0};
/* A custom gradient of square(x) with respect to x, differentiated in
 * reverse (its VJP: 0, a cotangent shaped like x) and forward mode. */
static const uint8_t prog_custom[] = {
    FZ_OP_SQUARE, 1,
    FZ_OP_CUSTOM_GRADIENT, 1, 0, 0,
    FZ_OP_GRADIENTS, 0, 0, 0, 0, 0, 0, 0,
    FZ_OP_JVP, 0, 0, 0, 0, 1, 0,
    255, 0, 0};
/* Elementwise, broadcast, reduction and shape ops mixed, for the runtime
 * option seeds. */
static const uint8_t prog_mix[] = {
    FZ_OP_ADD, 1, 0, 0,       /* a + b (broadcast) */
    FZ_OP_EXP, 0,
    FZ_OP_REDUCE_SUM, 0, 1, 0, 0, 1, /* over the first axis, keepdims */
    FZ_OP_MUL, 0, 0, 0,
    FZ_OP_SOFTMAX, 0, 0,
    FZ_OP_TRANSPOSE, 0, 0,
    255, 0, 0};

/* A small CNN on env_img: conv2d (3x3, padding 1, 2 groups) + relu + max
 * pool 2 + avg pool 2, then the HVP of its sum. */
static const uint8_t prog_cnn[] = {
    FZ_OP_CONV2D, 0, 2, 2, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, /* k 3x3, s 1, p 1, d 1; groups 2 */
    FZ_OP_RELU, 0,
    FZ_OP_MAX_POOL2D, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0,      /* k 2x2, s 2 */
    FZ_OP_AVG_POOL2D, 0, 1, 1, 0, 0, 1, 1, 0, 0, 2,      /* k 2x2, s 1, padding NULL (0) */
    FZ_OP_REDUCE_SUM, 0, 0, 0,
    FZ_OP_HVP, 0, 0, 0, 0, 0,
    255, 0, 0};

/* Control flow (trace_gen.c's op_cond, op_while, op_scan, op_remat and
 * run_body: a body is its capture count, captures, ops up to 255, its
 * outputs and a return choice), on env_ctl, with gradients and JVPs
 * through the constructs.  THRESH picks cond's side: sum(a) > 1e30 never
 * holds, > -1e30 always does. */
static const env env_ctl = {.n_in = 2, .n_vars = 1, .n_out = 3,
                            .in = {{1, 2, {2, 3}, 0, {0}, 0}, {1, 1, {3}, 0, {0}, 0}},
                            .var = {{1, 2, {2, 3}, 0, {0}, 0}}};
#define COND_PIECEWISE(thresh)                                                            \
  FZ_OP_COND, 0, 1, thresh, 0, 0, 1, 0, /* sum(a) > thresh; ins (a), 1 out fitting a */  \
      0, FZ_OP_SIN, 0, FZ_OP_MUL, 0, 0, 1, 255, 0, 0, 0, /* then: sin(a) * a */          \
      0, FZ_OP_EXP, 0, 255, 0, 0, 0,                     /* else: exp(a) */              \
      FZ_OP_GRADIENTS, 0, 0, 0, 0, 0, 0,                 /* d sum(y) / da */             \
      FZ_OP_JVP, 0, 0, 0, 0, 1, 0,                       /* along ones, of y */          \
      255, 2, 1, 0, 0                                    /* outputs y, grad, jvp */
static const uint8_t prog_cond_then[] = {COND_PIECEWISE(9)};
static const uint8_t prog_cond_else[] = {COND_PIECEWISE(8)};
static const uint8_t prog_cond_data[] = {COND_PIECEWISE(1)}; /* sum(a) > 0 */
/* The branches disagree: then gives a [2,3], else sum(a) (any operand). */
static const uint8_t prog_cond_mismatch[] = {
    FZ_OP_COND, 0, 1, 1, 0, 0, 1, 0,
    0, 255, 0, 0, 0,
    0, FZ_OP_REDUCE_SUM, 0, 0, 0, 255, 3, 0, 0,
    255, 0, 0, 0, 0};
/* A counted while loop over b: while (i < 3 && sum(b) > 0) b = b + sin(b),
 * max_iters 4 (or 0: unbounded), then d b' / d b (reverse) and its JVP. */
#define WHILE_PROG(iters)                                                                     \
  FZ_OP_WHILE_LOOP, 0, 0, 0, iters, 3, /* counter + (b); max_iters table[iters]; limit 3 */   \
      0, 255, 0, 0, 1, 0,              /* cond: sum(b) > 0 */                                \
      0, FZ_OP_SIN, 0, FZ_OP_ADD, 0, 0, 1, 255, 0, 0, 0, /* body: b + sin(b) */             \
      FZ_OP_GRADIENTS, 0, 0, 0, 0, 1, 0,  /* of the loop's b, seeds none, wrt b */          \
      FZ_OP_JVP, 0, 0, 0, 1, 1, 0,        /* along ones at b, of the loop's b */            \
      255, 2, 1, 0, 0
static const uint8_t prog_while[] = {WHILE_PROG(0)};
static const uint8_t prog_while_unbounded[] = {WHILE_PROG(6)}; /* reverse mode refused */
/* Forward mode through an unbounded loop: the JVP alone. */
static const uint8_t prog_while_jvp[] = {
    FZ_OP_WHILE_LOOP, 0, 0, 0, 6, 3,
    0, 255, 0, 0, 1, 0,
    0, FZ_OP_SIN, 0, FZ_OP_ADD, 0, 0, 1, 255, 0, 0, 0,
    FZ_OP_JVP, 0, 0, 0, 1, 0, 0,
    255, 1, 0, 2, 0};
/* An RNN cell over a's rows: h = tanh(h + x_t), carry b, ys the hs; then
 * gradients wrt a and b.  CKPT indexes the checkpoint table, REV
 * reverses. */
#define SCAN_PROG(rev, ckpt)                                                                    \
  FZ_OP_SCAN, 0, 1, 0, 1, 0, 1, rev, ckpt, /* 1 carry (b), xs (a), 1 y */                       \
      0, FZ_OP_ADD, 0, 0, 1, FZ_OP_TANH, 0, 255, 0, 0, 0, 0, /* h' = tanh(x + h); y = h' */   \
      FZ_OP_GRADIENTS, 0, 1, 0, 0, 0, 1, 0,                  /* d sum(ys) / (a, b) */         \
      255, 2, 1, 0, 0
static const uint8_t prog_scan[] = {SCAN_PROG(0, 0)};
static const uint8_t prog_scan_reverse_ckpt[] = {SCAN_PROG(1, 3)}; /* checkpoint 2 */
/* The HVP of sum(ys) of the RNN at a. */
static const uint8_t prog_scan_hvp[] = {
    FZ_OP_SCAN, 0, 1, 0, 1, 0, 1, 0, 0,
    0, FZ_OP_ADD, 0, 0, 1, FZ_OP_TANH, 0, 255, 0, 0, 0, 0,
    FZ_OP_HVP, 0, 0, 0, 0, 0,
    255, 0, 1, 2, 0};
/* remat of sin(a)^2 + a, gradient wrt a, and the JVP. */
static const uint8_t prog_remat[] = {
    FZ_OP_REMAT, 0, 1, 0, 1,                  /* ins (a), 1 out */
    0, FZ_OP_SIN, 0, FZ_OP_MUL, 0, 0, 0, FZ_OP_ADD, 0, 0, 2, 255, 0, 0,
    FZ_OP_GRADIENTS, 0, 0, 0, 0, 0, 0,
    FZ_OP_JVP, 0, 0, 0, 0, 1, 0,
    255, 2, 1, 0, 0};
/* Nesting and closures: a scan over a whose body holds a cond on the
 * slice (taking b, captured from the function's trace) inside a remat,
 * then gradients wrt a and b. */
static const uint8_t prog_nested[] = {
    FZ_OP_SCAN, 0, 0, 0, 0, 1, 0, 0,          /* no carry, xs (a), 1 y */
    1, 0,                                     /* scan body: captures b */
    FZ_OP_REMAT, 0, 2, 0, 0, 1,               /* remat (x_t, b), 1 out */
    0, FZ_OP_COND, 0, 0, 1, 0, 0, 0, 0,       /* cond sum(b) > 0 on (b) */
    1, 1, FZ_OP_MUL, 0, 0, 1, 255, 0, 0, 0,   /* then: b * x_t (captured) */
    0, FZ_OP_NEG, 0, 255, 0, 0, 0,            /* else: -b */
    255, 0, 0,                                /* remat out: the cond's */
    255, 0, 0,                                /* scan y */
    FZ_OP_GRADIENTS, 0, 1, 0, 0, 0, 1, 0,
    255, 2, 1, 0, 0};

static int emit(const char *dir, const char *name, const env *e, const uint8_t *body, size_t n) {
  seed s = {{0}, 0};
  put_env(&s, e);
  put_bytes(&s, body, n);
  return fz_write_seed(dir, name, s.b, s.n);
}

/* Per op kind: the op with default (0) parameters on the environment its
 * dtypes need; ops that want a rank-2 first operand take the oldest value. */
/* "<prefix>-<op name in lower case>" into buf (64 bytes). */
static const char *op_file(const char *prefix, int op, char *buf) {
  snprintf(buf, 64, "%s-%s", prefix, fz_op_name(op));
  for (char *c = buf; *c; c++)
    if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
  return buf;
}

static int emit_ops(const char *dir) {
  int rc = 0;
  char name[64];
  for (int op = 0; op < FZ_OP_COUNT; op++) {
    const env *e = &env_f32;
    uint8_t body[4] = {(uint8_t)op, 0};
    size_t n = 1;
    if (op == FZ_OP_ONE_HOT) e = &env_i32;
    if (op == FZ_OP_OPTIMIZE) e = &env_opt;
    if (op == FZ_OP_CONV2D || op == FZ_OP_MAX_POOL2D || op == FZ_OP_AVG_POOL2D) e = &env_img;
    if (op == FZ_OP_MATMUL || op == FZ_OP_SLICE || op == FZ_OP_PAD || op == FZ_OP_SOFTMAX ||
        op == FZ_OP_LOG_SOFTMAX || op == FZ_OP_RESHAPE)
      body[n++] = 1; /* operand: a [2,3] */
    rc |= emit(dir, op_file("op", op, name), e, body, n);
  }
  /* The i32 and f64 variants of the families that take them. */
  const uint8_t i32_ops[] = {FZ_OP_ADD, FZ_OP_MUL, FZ_OP_MAXIMUM, FZ_OP_REDUCE_PROD, FZ_OP_CAST, FZ_OP_WHERE};
  for (size_t i = 0; i < COUNT(i32_ops); i++) {
    rc |= emit(dir, op_file("i32", i32_ops[i], name), &env_i32, &i32_ops[i], 1);
  }
  const uint8_t f64_ops[] = {FZ_OP_POW, FZ_OP_LGAMMA, FZ_OP_POLYGAMMA, FZ_OP_LOGSUMEXP, FZ_OP_MUL_ADD};
  for (size_t i = 0; i < COUNT(f64_ops); i++) {
    rc |= emit(dir, op_file("f64", f64_ops[i], name), &env_f64, &f64_ops[i], 1);
  }
  return rc;
}

/* The chained programs, and prog_mix under each family of runtime options
 * and header flags. */
static int emit_programs(const char *dir) {
  int rc = 0;
  env e = env_batch;
  rc |= emit(dir, "train", &e, prog_train, sizeof prog_train);
  rc |= emit(dir, "cnn", &env_img, prog_cnn, sizeof prog_cnn);
  e.flags |= F_SIGNATURE; /* batch dims -1: one trace, a plan per batch size */
  e.in[0].sym = 1;
  e.in[1].sym = 1;
  e.in[0].alt[0] = e.in[1].alt[0] = 2;
  rc |= emit(dir, "train-symbolic", &e, prog_train, sizeof prog_train);
  e.flags |= F_CACHE_ONE | F_DROP_VAR;
  rc |= emit(dir, "train-drop-var", &e, prog_train, sizeof prog_train);

  /* Every optimizer kind, with clipping and weight decay on the last. */
  for (unsigned kind = 0; kind < 5; kind++) {
    e = env_batch;
    e.flags |= F_TWO_CALLS;
    e.var[0].init = INIT_OPT(kind) | (kind == 4 ? 64u | 128u : 0u);
    char name[32];
    snprintf(name, sizeof name, "train-opt-%u", kind);
    rc |= emit(dir, name, &e, prog_train_opt, sizeof prog_train_opt);
  }

  e = env_f64;
  rc |= emit(dir, "grad-of-grad", &e, prog_grad_grad, sizeof prog_grad_grad);
  rc |= emit(dir, "hvp", &e, prog_hvp, sizeof prog_hvp);
  rc |= emit(dir, "custom-gradient", &e, prog_custom, sizeof prog_custom);

  static const struct {
    const char *name;
    const uint8_t *prog;
    size_t n;
  } ctl[] = {
#define CTL_(name, prog) {name, prog, sizeof prog}
      CTL_("cond-then", prog_cond_then),       CTL_("cond-else", prog_cond_else),
      CTL_("cond-data", prog_cond_data),       CTL_("cond-mismatch", prog_cond_mismatch),
      CTL_("while", prog_while),               CTL_("while-unbounded", prog_while_unbounded),
      CTL_("while-jvp", prog_while_jvp),       CTL_("scan", prog_scan),
      CTL_("scan-reverse-ckpt", prog_scan_reverse_ckpt), CTL_("scan-hvp", prog_scan_hvp),
      CTL_("remat", prog_remat),               CTL_("nested", prog_nested),
#undef CTL_
  };
  for (size_t i = 0; i < COUNT(ctl); i++) {
    char name[64];
    snprintf(name, sizeof name, "ctl-%s", ctl[i].name);
    rc |= emit(dir, name, &env_ctl, ctl[i].prog, ctl[i].n);
  }

  static const struct {
    const char *name;
    unsigned flags, opt, value;
  } variants[] = {
      {"grain-1", 0, O_GRAIN, 1},          {"grain-7", 0, O_GRAIN, 2},
      {"lanes-1", 0, O_MEMORY, 2},         {"lanes-3", 0, O_MEMORY, 4},
      {"partition-none", 0, O_PARTITION, 2}, {"partition-core", 0, O_PARTITION, 7},
      {"topology-2x2", 0, O_TOPOLOGY, 1},  {"topology-numa", 0, O_TOPOLOGY, 3},
      {"topology-deep", 0, O_TOPOLOGY, 4}, {"bind-false", 0, O_BIND, 2},
      {"threads-4", 0, O_THREADS, 2},      {"threads-1", 0, O_THREADS, 3},
      {"trace-devnull", 0, O_TRACE, 1},    {"describe", 0, O_DESCRIBE, 17},
      {"bad-memory", 0, O_MEMORY, 5},      {"bad-partition", 0, O_PARTITION, 8},
      {"bad-topology", 0, O_TOPOLOGY, 7},  {"bad-grain", 0, O_GRAIN, 6},
      {"stale", F_STALE, O_GRAIN, 0},      {"orphan", F_ORPHAN, O_GRAIN, 0},
      {"arity", F_ARITY, O_GRAIN, 0},      {"two-calls", F_TWO_CALLS | F_STATS, O_GRAIN, 0},
  };
  for (size_t i = 0; i < COUNT(variants); i++) {
    e = env_f32;
    e.flags = variants[i].flags;
    e.opt[variants[i].opt] = variants[i].value;
    char name[64];
    snprintf(name, sizeof name, "mix-%s", variants[i].name);
    rc |= emit(dir, name, &e, prog_mix, sizeof prog_mix);
  }
  return rc;
}

int fz_target_seeds(const char *dir) {
  if (mkdir(dir, 0777) && errno != EEXIST) {
    perror(dir);
    return -1;
  }
  return emit_ops(dir) | emit_programs(dir) ? -1 : 0;
}
