/* The trace program decoder of the `trace` fuzz target (trace_gen.h).
 *
 * Encoding of the op stream (from fz_trace_prog.body):
 *   op*      an opcode byte (255 ends the ops; else fz_op = byte mod
 *            FZ_OP_COUNT) followed by that op's parameter bytes;
 *   outputs  one operand choice per output;
 *   return   the callback's return choice (0: GRAFT_OK).
 * Parameters are choices: an operand is a byte (0: the newest value, k:
 * the k-th newest; 248: NULL; 249..255: a handle of a dead trace); shapes,
 * dims, axes and dtypes have a default under byte 0 that makes the op
 * valid for ordinary operands, and other bytes that reach every class of
 * bad argument.  Reads past the input give 0, so the shortest programs are
 * the typical ones.
 *
 * Values the ops return go into a pool that later ops draw from, so
 * programs chain: gradients of gradients, JVPs of custom gradients,
 * assigns of reads, gradients through control flow.  A control-flow op's
 * bodies are decoded where graft traces them, each by a gen of its own
 * (its pool: captured values of the enclosing gen's, then its inputs),
 * from the same stream (see "control flow" below).  The decoder also
 * checks what the API promises about results it can see during the trace
 * (gradients shaped like their xs, all-NULL results on failure, ranks and
 * dims in range, control flow's outs) and dies on a violation (fuzz.h). */
#include "trace_gen.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "fuzz.h"
#include "reader.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define SHAPE_CAP 12 /* dims a decoded shape may claim (GRAFT_MAX_RANK + a few) */

typedef graft_value *(*unary_fn)(graft_trace *, graft_value *);
typedef graft_value *(*binary_fn)(graft_trace *, graft_value *, graft_value *);
typedef graft_value *(*reduce_fn)(graft_trace *, graft_value *, int, const int *, int);

#define FZ_FN_(e, fn) fn,
static const unary_fn unary_fns[] = {FZ_UNARY_OPS(FZ_FN_)};
static const binary_fn binary_fns[] = {FZ_BINARY_OPS(FZ_FN_)};
static const reduce_fn reduce_fns[] = {FZ_REDUCE_OPS(FZ_FN_)};
#undef FZ_FN_

const char *fz_op_name(int op) {
#define FZ_NAME_FN_(e, fn) #e,
#define FZ_NAME_(e) #e,
  static const char *const names[] = {FZ_UNARY_OPS(FZ_NAME_FN_) FZ_BINARY_OPS(FZ_NAME_FN_)
                                          FZ_REDUCE_OPS(FZ_NAME_FN_) FZ_OTHER_OPS(FZ_NAME_)};
#undef FZ_NAME_FN_
#undef FZ_NAME_
  _Static_assert(COUNT(names) == FZ_OP_COUNT, "one name per op");
  return op >= 0 && op < FZ_OP_COUNT ? names[op] : "?";
}

int fz_avoid_parse(const char *s, unsigned *out) {
  static const struct {
    const char *name;
    unsigned bit;
  } words[] = {{"huge", FZ_AVOID_HUGE},       {"neg", FZ_AVOID_NEG},
               {"stale", FZ_AVOID_STALE},     {"prune", FZ_AVOID_PRUNE},
               {"recurse", FZ_AVOID_RECURSE}, {"status", FZ_AVOID_STATUS},
               {"vjp", FZ_AVOID_VJP},         {"topo", FZ_AVOID_TOPO},
               {"api", FZ_AVOID_API},         {"orphan", FZ_AVOID_ORPHAN},
               {"empty", FZ_AVOID_EMPTY},     {"read", FZ_AVOID_READ}};
  *out = 0;
  while (s && *s) {
    size_t len = strcspn(s, ",");
    size_t i = 0;
    while (i < COUNT(words) && (strlen(words[i].name) != len || strncmp(words[i].name, s, len)))
      i++;
    if (i == COUNT(words)) {
      fprintf(stderr, "GRAFT_FUZZ_AVOID: unknown class '%.*s' (huge, neg, stale, prune, recurse, "
              "status, vjp, topo, api, orphan, empty, read)\n", (int)len, s);
      return -1;
    }
    *out |= words[i].bit;
    s += len + (s[len] == ',');
  }
  return 0;
}

/* ---- dims ---------------------------------------------------------------- */

static const int64_t huge_dims[8] = {INT64_C(1) << 31,   INT64_C(1) << 32, INT64_C(1) << 40,
                                     INT64_C(1) << 62,   INT64_MAX,        INT64_MAX - 1,
                                     INT64_C(3037000500), INT64_C(1) << 21};
static const int64_t neg_dims[4] = {-1, -3, -1000, INT64_MIN};

/* A dim from its first byte b: < 64 the literal b & 15; 64..79 huge;
 * 80..87 negative or an unknown symbol code; 88 eight raw bytes; else
 * 1..8.  (89..127 are pool dims inside a trace: see rd_dim.) */
static int64_t dim_from(fz_reader *r, unsigned b, unsigned avoid) {
  if (b < 64) return b & 15;
  if (b < 80) return avoid & FZ_AVOID_HUGE ? b & 15 : huge_dims[b & 7];
  if (b < 88) return avoid & FZ_AVOID_NEG ? b & 15 : neg_dims[b & 3];
  if (b == 88) {
    int64_t v = (int64_t)fz_u64(r);
    if ((avoid & FZ_AVOID_NEG) && v < 0) v = -(v + 1);
    if ((avoid & FZ_AVOID_HUGE) && v > 15) v &= 15;
    return v;
  }
  return 1 + b % 8;
}

int64_t fz_dim_decode(fz_reader *r, unsigned avoid) { return dim_from(r, fz_u8(r), avoid); }

/* ---- the generator -------------------------------------------------------- */

typedef struct fz_shape {
  int rank;
  int64_t d[SHAPE_CAP];
} fz_shape;

typedef struct gen gen;

/* What a custom gradient's VJP gets as its user pointer: the callback's
 * gen (whose current gen decodes the VJP's choices) and the trace the
 * region was recorded in, at what depth. */
typedef struct custom_rec {
  gen *top;
  const graft_trace *t;
  int depth;
} custom_rec;

/* A decoder: one per trace being recorded, the function's (depth 0) or a
 * body's (depth k: nested k deep).  They share the byte stream and, in the
 * function's gen (top), the counters and the log's names. */
struct gen {
  graft_trace *t;
  fz_trace_prog *p;
  fz_reader *r;   /* top's rd */
  gen *top;
  int depth;
  graft_value *pool[FZ_POOL];
  int n;
  graft_value *checked[FZ_EXTRA_OUT]; /* values of fallible ops (depth 0 only) */
  int n_checked;
  int recurse; /* a VJP chose to call graft_gradients on its own region */
  int ran;     /* the current op was emitted, not skipped */
  /* The log (fz_trace_prog.verbose): what the current op decoded and made. */
  char args[512], made[512];
  /* top only: */
  fz_reader rd;
  gen *cur;                           /* the gen decoding now */
  int n_ad;                           /* gradient-building calls so far */
  int n_ops;                          /* ops so far, bodies included */
  custom_rec recs[FZ_TOTAL_OPS];      /* one per custom_gradient */
  int n_recs;
  const graft_value *names[512];      /* the log's v0, v1, ... */
  int n_names;
};

static void note(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(char *buf, const char *fmt, ...) {
  size_t o = strlen(buf);
  if (o + 2 >= 512) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + o, 512 - o, fmt, ap);
  va_end(ap);
}

static int is_stale(const gen *g, const graft_value *v) {
  for (int i = 0; i < g->p->n_stale; i++)
    if (g->p->stale[i] == v) return 1;
  return 0;
}

/* Whether the harness may look at v: a value of this trace, not poison. */
static int live(const gen *g, const graft_value *v) {
  return v && !is_stale(g, v) && !graft_value_is_poison(v);
}

static const char *dims_str(char *buf, size_t len, int rank, const int64_t *d) {
  size_t o = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "," : "", (long long)d[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
  return buf;
}

/* v's shape into s; 0 if v is not live.  Checks what trace.h promises of a
 * live value: rank 0..GRAFT_MAX_RANK, dims >= 0 or symbol codes. */
static int shape_of(const gen *g, const graft_value *v, fz_shape *s) {
  if (!live(g, v)) return 0;
  s->rank = graft_value_rank(v);
  if (s->rank < 0 || s->rank > GRAFT_MAX_RANK) fz_die("a live value has rank %d", s->rank);
  if (graft_dtype_size(graft_value_dtype(v)) == 0)
    fz_die("a live value has dtype %d", (int)graft_value_dtype(v));
  const int64_t *d = graft_value_shape(v);
  if (s->rank && !d) fz_die("a live value of rank %d has no shape", s->rank);
  for (int i = 0; i < s->rank; i++) {
    if (d[i] == -1) fz_die("a live value has dim %d = -1 (neither a size nor a symbol)", i);
    s->d[i] = d[i];
  }
  return 1;
}

static int symbolic(const fz_shape *s) {
  for (int i = 0; i < s->rank; i++)
    if (s->d[i] < 0) return 1;
  return 0;
}

static int64_t numel_of(const fz_shape *s) { /* -1: symbolic or past INT64_MAX */
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    if (s->d[i] < 0) return -1;
    if (s->d[i] == 0) return 0;
  }
  for (int i = 0; i < s->rank; i++)
    if (__builtin_mul_overflow(n, s->d[i], &n)) return -1;
  return n;
}

/* "v3", "dead1", "poison", "NULL" (the log's names). */
static const char *name_of(gen *g, const graft_value *v, char *buf) {
  for (int i = 0; v && i < g->p->n_stale; i++)
    if (g->p->stale[i] == v) return snprintf(buf, 16, "dead%d", i), buf;
  if (!v || graft_value_is_poison(v)) return v ? "poison" : "NULL";
  gen *top = g->top;
  int i = 0;
  while (i < top->n_names && top->names[i] != v) i++;
  if (i == top->n_names && top->n_names < (int)COUNT(top->names)) top->names[top->n_names++] = v;
  snprintf(buf, 16, "v%d", i);
  return buf;
}

static void note_value(gen *g, const graft_value *v) {
  char b[16];
  if (g->p->verbose) note(g->args, " %s", name_of(g, v, b));
}

static graft_value *push(gen *g, graft_value *v) {
  if (live(g, v)) g->pool[g->n < FZ_POOL ? g->n++ : FZ_POOL - 1] = v;
  if (g->p->verbose && live(g, v)) {
    char b[16], d[160];
    fz_shape s;
    shape_of(g, v, &s);
    note(g->made, " %s=%s%s", name_of(g, v, b), graft_dtype_name(graft_value_dtype(v)),
         dims_str(d, sizeof d, s.rank, s.d));
  }
  return v;
}

/* Record op as emitted when it ran (not skipped: g->ran) without failing
 * the trace.  v is its value, or NULL for calls that make none. */
static void mark(gen *g, int op, const graft_value *v) {
  if (g->ran && (!v || !graft_value_is_poison(v)) && graft_trace_status(g->t) == GRAFT_OK)
    g->p->emitted[op] = 1;
}

static graft_value *stale(gen *g, unsigned b) {
  if ((g->p->avoid & FZ_AVOID_STALE) || !g->p->n_stale) return NULL;
  return g->p->stale[b % (unsigned)g->p->n_stale];
}

/* Pool value number b, counted from the newest (from_end) or the oldest. */
static graft_value *pool_at(gen *g, unsigned b, int from_end) {
  if (!g->n) {
    graft_value *s = push(g, graft_scalar(g->t, GRAFT_F32, 1.0));
    if (!g->n) return s;
  }
  int i = (int)(b % (unsigned)g->n);
  return g->pool[from_end ? g->n - 1 - i : i];
}

static graft_value *choose(gen *g, int from_end) {
  unsigned b = fz_u8(g->r);
  graft_value *v = b == 248 ? NULL : b > 248 ? stale(g, b) : NULL;
  if (b < 248 || (b > 248 && !v)) v = pool_at(g, b, from_end);
  note_value(g, v);
  return v;
}

/* An operand: the newest values first. */
static graft_value *operand(gen *g) { return choose(g, 1); }
/* A value to differentiate with respect to: the oldest (inputs) first. */
static graft_value *x_operand(gen *g) { return choose(g, 0); }

static graft_value *newest(gen *g) { return g->n ? g->pool[g->n - 1] : NULL; }

static int broadcasts(const fz_shape *a, const fz_shape *b) {
  for (int i = 1; i <= a->rank && i <= b->rank; i++) {
    int64_t x = a->d[a->rank - i], y = b->d[b->rank - i];
    if (x != y && x != 1 && y != 1) return 0;
  }
  return 1;
}

/* The k-th newest pool value accepted by ok(ctx, value), or NULL. */
static graft_value *find(gen *g, int (*ok)(gen *, const void *, graft_value *), const void *ctx) {
  unsigned k = fz_u8(g->r);
  graft_value *found[FZ_POOL];
  int n = 0;
  for (int i = g->n - 1; i >= 0; i--)
    if (ok(g, ctx, g->pool[i])) found[n++] = g->pool[i];
  if (n) note_value(g, found[k % (unsigned)n]);
  return n ? found[k % (unsigned)n] : NULL;
}

static int ok_partner(gen *g, const void *ctx, graft_value *v) {
  const graft_value *a = ctx;
  fz_shape sa, sv;
  return shape_of(g, a, &sa) && shape_of(g, v, &sv) &&
         graft_value_dtype(a) == graft_value_dtype(v) && broadcasts(&sa, &sv);
}

/* A value to combine with a: mostly one of a's dtype whose shape
 * broadcasts with a's (a itself when none does), else any operand. */
static graft_value *partner(gen *g, graft_value *a) {
  if (fz_pick(g->r, 4) == 3 || !live(g, a)) return operand(g);
  graft_value *v = find(g, ok_partner, a);
  if (!v) note_value(g, a);
  return v ? v : a;
}

static graft_dtype dtype_from(gen *g, unsigned b, const graft_value *ref) {
  switch (b % 8) {
  case 0: return live(g, ref) ? graft_value_dtype(ref) : GRAFT_F32;
  case 1: case 5: return GRAFT_F32;
  case 2: case 6: return GRAFT_F64;
  case 3: return GRAFT_I32;
  case 4: return (graft_dtype)(b < 128 ? 3 + (int)(b / 8) : -1 - (int)(b / 8)); /* invalid */
  default: return GRAFT_F64;
  }
}

static graft_dtype rd_dtype(gen *g, const graft_value *ref) {
  graft_dtype dt = dtype_from(g, fz_u8(g->r), ref);
  if (g->p->verbose) note(g->args, " %s(%d)", graft_dtype_name(dt), (int)dt);
  return dt;
}

static double rd_double(gen *g) {
  static const double special[16] = {1.0,  0.0,      -0.0,      0.5, -1.0,    2.0,     3.0, 1e-3,
                                     1e30, -1e30,    INFINITY, -INFINITY, NAN, 1e-310, DBL_MAX, -2.5};
  unsigned b = fz_u8(g->r);
  double v = b < 16 ? special[b] : ((double)b - 136.0) / 8.0;
  if (g->p->verbose) note(g->args, " %g", v);
  return v;
}

/* A dim inside the trace: dim_from's classes, and 89..127 a dim of a pool
 * value (a symbol when that dim is symbolic). */
static int64_t rd_dim(gen *g) {
  unsigned b = fz_u8(g->r);
  if (b >= 89 && b < 128) {
    fz_shape s;
    graft_value *v = pool_at(g, fz_u8(g->r), 1);
    unsigned i = fz_u8(g->r);
    return shape_of(g, v, &s) && s.rank ? s.d[i % (unsigned)s.rank] : 1;
  }
  return dim_from(g->r, b, g->p->avoid);
}

/* A target shape: like's shape (0), like's with one dim redrawn (1), a
 * fresh one of rank 0..3 (2), or any claimed rank -1..10 (3). */
static void rd_shape(gen *g, const graft_value *like, fz_shape *s) {
  unsigned m = fz_pick(g->r, 4);
  if (m <= 1 && shape_of(g, like, s)) {
    if (m == 1 && s->rank) s->d[fz_pick(g->r, (unsigned)s->rank)] = rd_dim(g);
    return;
  }
  s->rank = m == 3 ? fz_range(g->r, -1, SHAPE_CAP - 2) : fz_range(g->r, 0, 3);
  for (int i = 0; i < s->rank; i++) s->d[i] = rd_dim(g);
}

static int raw_axis_from(unsigned b) {
  if (b == 32) return INT_MIN;
  if (b == 33) return INT_MAX;
  return b < 32 ? (int)b - 16 : (int)(b % 10) - 5;
}

static int note_int(gen *g, int v) {
  if (g->p->verbose) note(g->args, " %d", v);
  return v;
}

static void note_dims(gen *g, const char *what, int rank, const int64_t *d) {
  char buf[256];
  if (g->p->verbose) note(g->args, " %s%s", what, dims_str(buf, sizeof buf, rank < 0 ? 0 : rank, d));
  if (g->p->verbose && rank < 0) note(g->args, "(rank %d)", rank);
}

static int rd_raw_axis(gen *g) { return note_int(g, raw_axis_from(fz_u8(g->r))); }

/* One axis: 0 = the last; small values both ways; the extremes. */
static int axis_from(unsigned b) {
  if (b == 0) return -1;
  if (b < 16) return (int)(b % 8) - 4;
  if (b == 16) return INT_MIN;
  if (b == 17) return INT_MAX;
  return (int)(b % 20) - 10;
}

static int rd_axis(gen *g) { return note_int(g, axis_from(fz_u8(g->r))); }

/* A reduction's axes: all (0), distinct valid ones counted up (1) or from
 * the end (2), or raw (3: any count -1..9, any values). */
static int rd_axes(gen *g, const graft_value *x, int *axes) {
  fz_shape s = {0, {0}};
  unsigned m = fz_pick(g->r, 4);
  shape_of(g, x, &s);
  if (m == 0) return 0;
  if (m == 3) {
    int n = fz_range(g->r, -1, 9);
    for (int i = 0; i < n; i++) axes[i] = rd_raw_axis(g);
    return n;
  }
  if (!s.rank) return 0;
  int n = 1 + (int)fz_pick(g->r, (unsigned)s.rank), first = (int)fz_pick(g->r, (unsigned)s.rank);
  for (int i = 0; i < n; i++) {
    int a = (first + i) % s.rank;
    axes[i] = m == 2 ? a - s.rank : a;
  }
  return n;
}

/* ---- parameterised ops ------------------------------------------------- */

static graft_value *op_matmul(gen *g);
static graft_value *op_reshape(gen *g);
static graft_value *op_slice_pad(gen *g, int pad);
static graft_value *op_concat(gen *g);
static graft_value *op_xent(gen *g);
static graft_value *op_assign(gen *g, int op);
static graft_value *op_gradients(gen *g);
static graft_value *op_jvp(gen *g);
static graft_value *op_hvp(gen *g);
static graft_value *op_jacobian(gen *g, int rev);
static graft_value *op_custom(gen *g);
static graft_value *op_trace_fail(gen *g);
static graft_value *op_inspect(gen *g);
static graft_value *op_optimize(gen *g);
static graft_value *op_clip(gen *g);
static graft_value *op_cond(gen *g);
static graft_value *op_while(gen *g);
static graft_value *op_scan(gen *g);
static graft_value *op_remat(gen *g);

static graft_variable *rd_var(gen *g) {
  unsigned i = fz_pick(g->r, (unsigned)g->p->n_vars + 1);
  graft_variable *v = i < (unsigned)g->p->n_vars ? g->p->vars[i] : NULL;
  if (g->p->verbose) note(g->args, v ? " var%u" : " NULL-var", i);
  return v;
}

static graft_value *op_read(gen *g) {
  graft_variable *var = rd_var(g);
  if (!var && g->depth && (g->p->avoid & FZ_AVOID_READ)) {
    g->ran = 0;
    return NULL;
  }
  return graft_read(g->t, var);
}

static graft_value *op_leaf(gen *g, int op) {
  fz_shape s;
  graft_dtype dt = rd_dtype(g, newest(g));
  if (op == FZ_OP_SCALAR) return graft_scalar(g->t, dt, rd_double(g));
  rd_shape(g, newest(g), &s);
  note_dims(g, "shape", s.rank, s.d);
  if (op == FZ_OP_FILL) return graft_fill(g->t, dt, s.rank, s.d, rd_double(g));
  /* 16-byte steps keep f64 data aligned. */
  const unsigned char *data = (const unsigned char *)g->p->blob + 16u * fz_u8(g->r);
  return graft_constant(g->t, dt, s.rank, s.d, data);
}

static graft_value *op_polygamma(gen *g) {
  static const int orders[] = {1, 0, 2, 3, 4, 170, 171, -1, INT_MIN, INT_MAX};
  int n = orders[fz_pick(g->r, COUNT(orders))];
  return graft_polygamma(g->t, note_int(g, n), operand(g));
}

static graft_value *op_transpose(gen *g) {
  graft_value *x = operand(g);
  fz_shape s;
  int perm[SHAPE_CAP];
  unsigned m = fz_pick(g->r, 3);
  if (m == 0 || !shape_of(g, x, &s)) return graft_transpose(g->t, x, NULL);
  for (int i = 0; i < s.rank; i++) perm[i] = m == 1 ? i : rd_raw_axis(g);
  for (int i = s.rank - 1; m == 1 && i > 0; i--) { /* a valid permutation */
    int j = (int)fz_pick(g->r, (unsigned)i + 1), tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
  for (int i = 0; i < s.rank && m == 1; i++) note_int(g, perm[i]);
  return graft_transpose(g->t, x, perm);
}

/* broadcast_to: x with a dim prepended (0), x with its 1-dims redrawn (1),
 * any shape (2).  sum_to_shape: x without its first dim (0), x with some
 * dims set to 1 (1), any shape (2). */
static graft_value *op_broadcast_sum(gen *g, int sum) {
  graft_value *x = operand(g);
  fz_shape s;
  unsigned m = fz_pick(g->r, 3);
  if (m == 2 || !shape_of(g, x, &s)) {
    rd_shape(g, x, &s);
  } else if (m == 0 && !sum) {
    if (s.rank < GRAFT_MAX_RANK) {
      memmove(s.d + 1, s.d, (size_t)s.rank * sizeof *s.d);
      s.rank++;
      s.d[0] = rd_dim(g);
    }
  } else if (m == 0) {
    if (s.rank) memmove(s.d, s.d + 1, (size_t)--s.rank * sizeof *s.d);
  } else {
    for (int i = 0; i < s.rank; i++)
      if (sum ? fz_u8(g->r) & 1 : s.d[i] == 1) s.d[i] = sum ? 1 : rd_dim(g);
  }
  note_dims(g, "shape", s.rank, s.d);
  return sum ? graft_sum_to_shape(g->t, x, s.rank, s.d) : graft_broadcast_to(g->t, x, s.rank, s.d);
}

static graft_value *op_one_hot(gen *g) {
  static const int64_t depths[] = {3, 1, 0, 2, 5, INT64_C(1) << 20, -1, INT64_MAX, INT64_C(1) << 40};
  graft_value *labels = NULL;
  for (int i = g->n - 1; i >= 0 && !labels; i--)
    if (live(g, g->pool[i]) && graft_value_dtype(g->pool[i]) == GRAFT_I32) labels = g->pool[i];
  if (fz_pick(g->r, 4) == 3 || !labels) labels = operand(g);
  unsigned k = fz_pick(g->r, COUNT(depths));
  if ((g->p->avoid & FZ_AVOID_HUGE) && depths[k] > 5) k = 0;
  if ((g->p->avoid & FZ_AVOID_NEG) && depths[k] < 0) k = 0;
  note_dims(g, "depth", 1, &depths[k]);
  return graft_one_hot(g->t, labels, depths[k], rd_dtype(g, NULL));
}

static graft_value *op_softmax(gen *g, int log) {
  graft_value *x = operand(g);
  int axis = rd_axis(g);
  return log ? graft_log_softmax(g->t, x, axis) : graft_softmax(g->t, x, axis);
}

/* A conv2d / pool argument of at least lo: lo + b % 4, or past the edge
 * (b >= 250: lo - 1, -1, a dim of any class). */
static int64_t rd_conv_arg(gen *g, int64_t lo) {
  unsigned b = fz_u8(g->r);
  return b < 250 ? lo + (int64_t)(b % 4) : b == 250 ? lo - 1 : b == 251 ? -1 : rd_dim(g);
}

/* conv2d, max_pool2d, avg_pool2d of an operand: kernel, stride, padding
 * and dilation pairs (rd_conv_arg), a byte of NULL flags (bit i: pair i+1
 * NULL; bit 3: the pool's kernel NULL), and for conv2d the groups (1 or 2,
 * or past the edge) and the weight: one fitting the operand's channels
 * and the kernel pair (modes 0..2), or any operand (3). */
static graft_value *op_conv(gen *g, int op) {
  graft_value *x = operand(g);
  int64_t pair[4][2];
  static const int64_t lo[4] = {1, 1, 0, 1};
  for (int i = 0; i < 4; i++) {
    pair[i][0] = rd_conv_arg(g, lo[i]);
    pair[i][1] = rd_conv_arg(g, lo[i]);
    note_dims(g, "", 2, pair[i]);
  }
  const unsigned null = fz_u8(g->r);
  const int64_t *k = null & 8 ? NULL : pair[0], *s = null & 1 ? NULL : pair[1];
  const int64_t *pad = null & 2 ? NULL : pair[2], *dil = null & 4 ? NULL : pair[3];
  if (op == FZ_OP_MAX_POOL2D) return graft_max_pool2d(g->t, x, k, s, pad);
  if (op == FZ_OP_AVG_POOL2D) return graft_avg_pool2d(g->t, x, k, s, pad);
  unsigned b = fz_u8(g->r);
  const int64_t groups = note_int(g, b < 250 ? 1 + (int)(b % 2) : (int)b - 252);
  graft_value *w;
  fz_shape sx;
  if (fz_pick(g->r, 4) < 3 && shape_of(g, x, &sx) && sx.rank == 4) {
    const int64_t per = groups > 0 ? groups : 1;
    const int64_t ws[4] = {per * (1 + fz_pick(g->r, 3)), sx.d[1] >= 0 ? sx.d[1] / per : 1,
                           pair[0][0], pair[0][1]};
    note_dims(g, "w", 4, ws);
    w = push(g, graft_fill(g->t, graft_value_dtype(x), 4, ws, 0.25));
  } else {
    w = operand(g);
  }
  return graft_conv2d(g->t, x, w, s, pad, dil, groups);
}

static graft_value *op_cast(gen *g) {
  graft_value *x = operand(g);
  return graft_cast(g->t, x, rd_dtype(g, NULL));
}

static graft_value *op_where(gen *g, int mul_add) {
  graft_value *a = operand(g), *b = partner(g, a), *c = partner(g, mul_add ? a : b);
  return mul_add ? graft_mul_add(g->t, a, b, c) : graft_where(g->t, a, b, c);
}

static graft_value *op_reduce(gen *g, int k) {
  int axes[SHAPE_CAP];
  graft_value *x = operand(g);
  int n = rd_axes(g, x, axes);
  if (g->p->verbose) note(g->args, " n_axes %d:", n);
  for (int i = 0; i < n; i++) note_int(g, axes[i]);
  return reduce_fns[k](g->t, x, n, axes, note_int(g, (int)fz_pick(g->r, 3)));
}

/* The log line of an op: what it decoded, made, or why the trace failed. */
static void log_op(gen *g, int op, const graft_value *v, graft_status before) {
  if (!g->p->verbose) return;
  char b[16];
  graft_status now = graft_trace_status(g->t);
  fprintf(stderr, "%*s  %-15s(%s ) ->%s", 4 * g->depth, "", fz_op_name(op), g->args,
          g->made[0] ? g->made : "");
  if (!g->made[0]) fprintf(stderr, " %s", g->ran ? name_of(g, v, b) : "(skipped)");
  if (now != before) fprintf(stderr, "  FAILED %s: %s", graft_status_name(now), graft_trace_errmsg(g->t));
  fputc('\n', stderr);
  g->args[0] = g->made[0] = 0;
}

/* One op: decode it, emit it, put its value in the pool. */
static void emit_op(gen *g, int op) {
  graft_status before = graft_trace_status(g->t);
  graft_value *v;
  const int n_un = (int)COUNT(unary_fns), n_bin = (int)COUNT(binary_fns),
            n_red = (int)COUNT(reduce_fns);
  g->ran = 1;
  g->top->n_ops++;
  if (op < n_un) {
    v = unary_fns[op](g->t, operand(g));
  } else if (op < n_un + n_bin) {
    graft_value *a = operand(g);
    v = binary_fns[op - n_un](g->t, a, partner(g, a));
  } else if (op < n_un + n_bin + n_red) {
    v = op_reduce(g, op - n_un - n_bin);
  } else {
    switch ((fz_op)op) {
    case FZ_OP_SCALAR: case FZ_OP_CONSTANT: case FZ_OP_FILL: v = op_leaf(g, op); break;
    case FZ_OP_WHERE: v = op_where(g, 0); break;
    case FZ_OP_MUL_ADD: v = op_where(g, 1); break;
    case FZ_OP_POLYGAMMA: v = op_polygamma(g); break;
    case FZ_OP_CAST: v = op_cast(g); break;
    case FZ_OP_MATMUL: v = op_matmul(g); break;
    case FZ_OP_TRANSPOSE: v = op_transpose(g); break;
    case FZ_OP_RESHAPE: v = op_reshape(g); break;
    case FZ_OP_BROADCAST_TO: v = op_broadcast_sum(g, 0); break;
    case FZ_OP_SUM_TO_SHAPE: v = op_broadcast_sum(g, 1); break;
    case FZ_OP_SLICE: v = op_slice_pad(g, 0); break;
    case FZ_OP_PAD: v = op_slice_pad(g, 1); break;
    case FZ_OP_CONCAT: v = op_concat(g); break;
    case FZ_OP_ONE_HOT: v = op_one_hot(g); break;
    case FZ_OP_SOFTMAX: v = op_softmax(g, 0); break;
    case FZ_OP_LOG_SOFTMAX: v = op_softmax(g, 1); break;
    case FZ_OP_SOFTMAX_XENT: v = op_xent(g); break;
    case FZ_OP_READ: v = op_read(g); break;
    case FZ_OP_ASSIGN: case FZ_OP_ASSIGN_ADD: case FZ_OP_ASSIGN_SUB: v = op_assign(g, op); break;
    case FZ_OP_GRADIENTS: v = op_gradients(g); break;
    case FZ_OP_JVP: v = op_jvp(g); break;
    case FZ_OP_HVP: v = op_hvp(g); break;
    case FZ_OP_JACOBIAN_FWD: v = op_jacobian(g, 0); break;
    case FZ_OP_JACOBIAN_REV: v = op_jacobian(g, 1); break;
    case FZ_OP_CUSTOM_GRADIENT: v = op_custom(g); break;
    case FZ_OP_TRACE_FAIL: v = op_trace_fail(g); break;
    case FZ_OP_INSPECT: v = op_inspect(g); break;
    case FZ_OP_OPTIMIZE: v = op_optimize(g); break;
    case FZ_OP_CLIP: v = op_clip(g); break;
    case FZ_OP_CONV2D: case FZ_OP_MAX_POOL2D: case FZ_OP_AVG_POOL2D: v = op_conv(g, op); break;
    case FZ_OP_COND: v = op_cond(g); break;
    case FZ_OP_WHILE_LOOP: v = op_while(g); break;
    case FZ_OP_SCAN: v = op_scan(g); break;
    case FZ_OP_REMAT: v = op_remat(g); break;
    default: fz_die("decoder: opcode %d has no case", op);
    }
  }
  mark(g, op, v);
  push(g, v);
  log_op(g, op, v, before);
}

/* Ops until 255, the end of the input, max of them or the trace's total. */
static void emit_ops(gen *g, int max) {
  for (int k = 0; k < max && g->top->n_ops < FZ_TOTAL_OPS; k++) {
    if (fz_eof(g->r)) break;
    unsigned b = fz_u8(g->r);
    if (b == 255) break;
    emit_op(g, (int)(b % FZ_OP_COUNT));
  }
}

/* matmul: (a, a, TRANS_B) (0), (a, a, TRANS_A) (1), a pool value whose
 * inner dim matches a's under random flags (2), anything with any flags
 * (3). */
typedef struct mm_ctx {
  const graft_value *a;
  unsigned flags;
} mm_ctx;

static int ok_matmul(gen *g, const void *ctx, graft_value *v) {
  const mm_ctx *c = ctx;
  fz_shape sa, sb;
  if (!shape_of(g, c->a, &sa) || !shape_of(g, v, &sb) || sa.rank < 2 || sb.rank < 2 ||
      graft_value_dtype(c->a) != graft_value_dtype(v))
    return 0;
  int64_t ka = sa.d[sa.rank - ((c->flags & GRAFT_TRANS_A) ? 2 : 1)];
  int64_t kb = sb.d[sb.rank - ((c->flags & GRAFT_TRANS_B) ? 1 : 2)];
  return ka == kb;
}

static graft_value *op_matmul(gen *g) {
  graft_value *a = operand(g);
  switch (fz_pick(g->r, 4)) {
  case 0: return graft_matmul(g->t, a, a, GRAFT_TRANS_B);
  case 1: return graft_matmul(g->t, a, a, GRAFT_TRANS_A);
  case 2: {
    mm_ctx c = {a, fz_pick(g->r, 4)};
    graft_value *b = live(g, a) ? find(g, ok_matmul, &c) : NULL;
    return b ? graft_matmul(g->t, a, b, c.flags) : graft_matmul(g->t, a, a, GRAFT_TRANS_B);
  }
  default: {
    graft_value *b = operand(g);
    return graft_matmul(g->t, a, b, (unsigned)note_int(g, (int)fz_u8(g->r)));
  }
  }
}

/* reshape: [-1] (0), the dims reversed (1), a 1 inserted and one dim
 * inferred (2), two adjacent dims merged into -1 (3), any shape with maybe
 * a -1 (4). */
static graft_value *op_reshape(gen *g) {
  graft_value *x = operand(g);
  fz_shape s, o;
  unsigned m = fz_pick(g->r, 5);
  if (m == 0 || (m < 4 && !shape_of(g, x, &s))) {
    int64_t flat = -1;
    return graft_reshape(g->t, x, 1, &flat);
  }
  switch (m) {
  case 1:
    o.rank = s.rank;
    for (int i = 0; i < s.rank; i++) o.d[i] = s.d[s.rank - 1 - i];
    break;
  case 2: {
    o = s;
    if (o.rank < GRAFT_MAX_RANK) {
      int at = (int)fz_pick(g->r, (unsigned)o.rank + 1);
      memmove(o.d + at + 1, o.d + at, (size_t)(o.rank - at) * sizeof *o.d);
      o.d[at] = 1;
      o.rank++;
    }
    if (o.rank) o.d[fz_pick(g->r, (unsigned)o.rank)] = -1;
    break;
  }
  case 3: {
    o = s;
    if (o.rank >= 2) {
      int at = (int)fz_pick(g->r, (unsigned)o.rank - 1);
      o.d[at] = -1;
      memmove(o.d + at + 1, o.d + at + 2, (size_t)(o.rank - at - 2) * sizeof *o.d);
      o.rank--;
    }
    break;
  }
  default:
    rd_shape(g, x, &o);
    if (o.rank > 0 && o.rank <= SHAPE_CAP && fz_u8(g->r) & 1) o.d[fz_pick(g->r, (unsigned)o.rank)] = -1;
    break;
  }
  note_dims(g, "shape", o.rank, o.d);
  return graft_reshape(g->t, x, o.rank, o.d);
}

/* slice (pad): in range per dim (0) or raw begin and size (shape) (1).
 * In range: a concrete dim d gets begin in [0, d] and size in [0, d -
 * begin] or -1 (pad: shape = d + begin + extra); a symbolic one begin 0 and
 * the whole dim. */
static graft_value *op_slice_pad(gen *g, int pad) {
  graft_value *x = operand(g);
  fz_shape s;
  int64_t begin[SHAPE_CAP] = {0}, size[SHAPE_CAP] = {0};
  unsigned m = fz_pick(g->r, 2);
  int have = shape_of(g, x, &s);
  int rank = have ? s.rank : 0;
  for (int i = 0; i < rank; i++) {
    int64_t d = s.d[i];
    if (m == 1) {
      begin[i] = rd_dim(g);
      size[i] = rd_dim(g);
    } else if (d < 0) {
      begin[i] = 0;
      size[i] = !pad && (fz_u8(g->r) & 1) ? -1 : d;
    } else if (pad) {
      begin[i] = fz_pick(g->r, 3);
      size[i] = d > INT64_MAX - 8 ? d : d + begin[i] + fz_pick(g->r, 3);
    } else {
      begin[i] = (int64_t)(fz_u8(g->r) % ((uint64_t)d + 1));
      unsigned b = fz_u8(g->r);
      size[i] = b == 0 ? -1 : (int64_t)(b % ((uint64_t)(d - begin[i]) + 1));
    }
  }
  note_dims(g, "begin", rank, begin);
  note_dims(g, pad ? "shape" : "size", rank, size);
  if (!pad) return graft_slice(g->t, x, begin, size);
  if (m == 1 && fz_u8(g->r) & 1) rank = fz_range(g->r, -1, SHAPE_CAP - 2);
  return graft_pad(g->t, x, begin, rank, size);
}

typedef struct cat_ctx {
  const graft_value *x;
  int axis;
} cat_ctx;

static int ok_concat(gen *g, const void *ctx, graft_value *v) {
  const cat_ctx *c = ctx;
  fz_shape sx, sv;
  if (!shape_of(g, c->x, &sx) || !shape_of(g, v, &sv) || sx.rank != sv.rank ||
      graft_value_dtype(c->x) != graft_value_dtype(v))
    return 0;
  for (int i = 0; i < sx.rank; i++)
    if (i != c->axis && sx.d[i] != sv.d[i]) return 0;
  return 1;
}

/* concat: 1..4 values that agree but on a valid axis (0), or any count
 * -1..5 of any operands on any axis (1). */
static graft_value *op_concat(gen *g) {
  graft_value *xs[8];
  fz_shape s;
  xs[0] = operand(g);
  if (fz_pick(g->r, 2) == 1) {
    int n = fz_range(g->r, -1, 5), axis = rd_raw_axis(g);
    for (int i = 1; i < n; i++) xs[i] = operand(g);
    return graft_concat(g->t, note_int(g, n), xs, axis);
  }
  int rank = shape_of(g, xs[0], &s) ? s.rank : 0;
  int n = 1 + (int)fz_pick(g->r, 4);
  int axis = rank ? (int)fz_pick(g->r, (unsigned)rank) : 0;
  cat_ctx c = {xs[0], axis};
  for (int i = 1; i < n; i++) {
    graft_value *v = live(g, xs[0]) ? find(g, ok_concat, &c) : NULL;
    xs[i] = v ? v : xs[0];
  }
  return graft_concat(g->t, note_int(g, n), xs, note_int(g, fz_u8(g->r) & 1 ? axis - rank : axis));
}

static int ok_logits(gen *g, const void *ctx, graft_value *v) {
  (void)ctx;
  fz_shape s;
  return shape_of(g, v, &s) && s.rank == 2 && graft_value_dtype(v) != GRAFT_I32;
}

static int ok_labels(gen *g, const void *ctx, graft_value *v) {
  const int64_t *n = ctx;
  fz_shape s;
  /* A symbolic batch may match at run time: graft checks it at compile. */
  return shape_of(g, v, &s) && s.rank == 1 && (s.d[0] == *n || s.d[0] < 0 || *n < 0) &&
         graft_value_dtype(v) == GRAFT_I32;
}

/* softmax_cross_entropy: logits a rank-2 float value (else any operand);
 * labels a constant with one byte per label (0..C-1 in range, C out of
 * range, C+1 is -1) (0), an i32 [N] value of the pool (1), or any operand
 * (2).  The value joins the forced outputs so that a label check can
 * never be pruned away unseen. */
static graft_value *op_xent(gen *g) {
  graft_value *logits = find(g, ok_logits, NULL), *labels = NULL;
  fz_shape s;
  if (!logits || fz_pick(g->r, 4) == 3) logits = operand(g);
  int have = shape_of(g, logits, &s) && s.rank == 2;
  unsigned m = fz_pick(g->r, 3);
  if (m == 0 && have && s.d[0] >= 0 && s.d[0] <= 64 && s.d[1] >= 0 && s.d[1] < 250) {
    int32_t lab[64];
    for (int64_t i = 0; i < s.d[0]; i++) {
      int v = (int)fz_pick(g->r, (unsigned)s.d[1] + 2);
      lab[i] = v == s.d[1] + 1 ? -1 : v;
    }
    labels = graft_constant(g->t, GRAFT_I32, 1, s.d, lab);
  } else if (m <= 1 && have) {
    labels = find(g, ok_labels, &s.d[0]);
  }
  if (!labels) labels = operand(g);
  graft_value *v = graft_softmax_cross_entropy(g->t, logits, labels);
  if (!g->depth && live(g, v) && g->n_checked < FZ_EXTRA_OUT) g->checked[g->n_checked++] = v;
  return v;
}

typedef struct var_ctx {
  graft_dtype dt;
  fz_shape s;
} var_ctx;

static int ok_assign(gen *g, const void *ctx, graft_value *v) {
  const var_ctx *c = ctx;
  fz_shape s;
  if (!shape_of(g, v, &s) || graft_value_dtype(v) != c->dt || s.rank > c->s.rank) return 0;
  for (int i = 1; i <= s.rank; i++)
    if (s.d[s.rank - i] != 1 && s.d[s.rank - i] != c->s.d[c->s.rank - i]) return 0;
  return 1;
}

/* assign/_add/_sub: a pool value that broadcasts to the variable (0), a
 * scalar times one (1: graft's fused update), any operand (2). */
static graft_value *op_assign(gen *g, int op) {
  graft_variable *var = rd_var(g);
  unsigned m = fz_pick(g->r, 3);
  graft_value *x = NULL;
  if (m <= 1 && var) {
    const graft_tensor *val = graft_variable_value(var);
    var_ctx c = {graft_tensor_dtype(val), {graft_tensor_rank(val), {0}}};
    if (c.s.rank) memcpy(c.s.d, graft_tensor_shape(val), (size_t)c.s.rank * sizeof *c.s.d);
    x = find(g, ok_assign, &c);
    if (!x) x = graft_read(g->t, var);
    if (m == 1) x = graft_mul(g->t, graft_scalar(g->t, c.dt, rd_double(g)), x);
  }
  if (!x) x = operand(g);
  if (op == FZ_OP_ASSIGN) return graft_assign(g->t, var, x);
  return op == FZ_OP_ASSIGN_ADD ? graft_assign_add(g->t, var, x) : graft_assign_sub(g->t, var, x);
}

/* ---- optimizers -------------------------------------------------------- */

static void check_results(gen *g, const char *api, graft_status st, int n, graft_value *const *res,
                          graft_value *const *like, int int_null);
static void push_all(gen *g, int n, graft_value *const *v);

static int ok_exact(gen *g, const void *ctx, graft_value *v) {
  const var_ctx *c = ctx;
  fz_shape s;
  if (!shape_of(g, v, &s) || graft_value_dtype(v) != c->dt || s.rank != c->s.rank) return 0;
  for (int i = 0; i < s.rank; i++)
    if (s.d[i] != c->s.d[i]) return 0;
  return 1;
}

/* graft_optimizer_apply on the program's optimizer: each variable's
 * gradient a pool value of its dtype and shape (0, 1; the variable's read
 * when none fits), NULL (2: that variable keeps its value), any operand
 * (3); now and then one gradient too many (6) or no optimizer (7).  The
 * result is the first variable's read after the step. */
static graft_value *op_optimize(gen *g) {
  unsigned m = fz_pick(g->r, 8);
  graft_module *opt = m == 7 ? NULL : g->p->opt;
  int n = g->p->n_opt + (m == 6);
  graft_value *gr[FZ_MAX_VARS + 1] = {NULL};
  for (int i = 0; i < n; i++) {
    graft_variable *var = i < g->p->n_opt ? g->p->opt_vars[i] : NULL;
    unsigned c = fz_pick(g->r, 4);
    if (c <= 1 && var) {
      const graft_tensor *val = graft_variable_value(var);
      var_ctx ctx = {graft_tensor_dtype(val), {graft_tensor_rank(val), {0}}};
      if (ctx.s.rank) memcpy(ctx.s.d, graft_tensor_shape(val), (size_t)ctx.s.rank * sizeof *ctx.s.d);
      gr[i] = find(g, ok_exact, &ctx);
      if (!gr[i]) gr[i] = graft_read(g->t, var);
    } else if (c == 3 || !var) {
      gr[i] = operand(g);
    }
  }
  graft_status st = graft_optimizer_apply(g->t, opt, n, gr);
  check_results(g, "graft_optimizer_apply", st, 0, NULL, NULL, 0);
  if (st == GRAFT_OK && (!opt || m == 6)) fz_die("graft_optimizer_apply accepted %s", opt ? "a wrong count" : "no optimizer");
  return g->p->n_opt ? graft_read(g->t, g->p->opt_vars[0]) : NULL;
}

/* graft_clip_by_global_norm of 1..3 operands (NULL entries allowed), with
 * a max_norm from rd_double (<= 0, NaN: refused) and the norm asked for or
 * not. */
static graft_value *op_clip(gen *g) {
  int n = 1 + (int)fz_pick(g->r, 3);
  graft_value *xs[3], *out[3] = {NULL}, *norm = NULL;
  for (int i = 0; i < n; i++) xs[i] = operand(g);
  double max_norm = rd_double(g);
  int want_norm = fz_pick(g->r, 2);
  graft_status st = graft_clip_by_global_norm(g->t, n, xs, max_norm, out, want_norm ? &norm : NULL);
  graft_value *given[3], *got[3];
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (xs[i]) {
      given[k] = xs[i];
      got[k++] = out[i];
    } else if (out[i]) {
      fz_die("graft_clip_by_global_norm: out[%d] is not NULL for a NULL xs[%d]", i, i);
    }
  }
  check_results(g, "graft_clip_by_global_norm", st, k, got, given, 0);
  for (int i = 0; st == GRAFT_OK && i < k; i++)
    if (!got[i]) fz_die("graft_clip_by_global_norm: a NULL result for a value");
  if (st == GRAFT_OK && !(max_norm > 0)) fz_die("graft_clip_by_global_norm accepted max_norm %g", max_norm);
  if (want_norm && (st == GRAFT_OK) != (norm != NULL))
    fz_die("graft_clip_by_global_norm: %s with norm %p", graft_status_name(st), (void *)norm);
  push_all(g, n, out);
  return norm;
}

/* ---- differentiation --------------------------------------------------- */

static graft_unconnected rd_policy(gen *g) {
  unsigned b = fz_u8(g->r);
  return b % 4 == 3 ? (graft_unconnected)(int)(b / 4) : (graft_unconnected)(b % 2);
}

/* Results of a derivative API: all NULL after a failure; after a success
 * each NULL, or of like[i]'s dtype and shape (dims compared where both are
 * concrete); NULL for an i32 like[i] when int_null (gradients and HVPs
 * always; JVPs under GRAFT_UNCONNECTED_NONE, as ZERO gives i32 zeros). */
static void check_results(gen *g, const char *api, graft_status st, int n, graft_value *const *res,
                          graft_value *const *like, int int_null) {
  if (st != graft_trace_status(g->t))
    fz_die("%s returned %s but the trace status is %s", api, graft_status_name(st),
           graft_status_name(graft_trace_status(g->t)));
  for (int i = 0; i < n; i++) {
    if (st != GRAFT_OK) {
      if (res[i]) fz_die("%s failed (%s) but result %d is not NULL", api, graft_status_name(st), i);
      continue;
    }
    fz_shape a, b;
    char sa[256], sb[256];
    if (!live(g, like[i])) fz_die("%s succeeded on a NULL, poison or dead value (#%d)", api, i);
    if (res[i] && int_null && graft_value_dtype(like[i]) == GRAFT_I32)
      fz_die("%s: result %d is not NULL for an i32 value", api, i);
    if (!res[i]) continue;
    if (!shape_of(g, res[i], &a)) fz_die("%s succeeded with a poison result %d", api, i);
    shape_of(g, like[i], &b);
    int bad = graft_value_dtype(res[i]) != graft_value_dtype(like[i]) || a.rank != b.rank;
    for (int k = 0; !bad && k < a.rank; k++) bad = a.d[k] >= 0 && b.d[k] >= 0 && a.d[k] != b.d[k];
    if (bad)
      fz_die("%s: result %d is %s%s, expected %s%s", api, i,
             graft_dtype_name(graft_value_dtype(res[i])), dims_str(sa, sizeof sa, a.rank, a.d),
             graft_dtype_name(graft_value_dtype(like[i])), dims_str(sb, sizeof sb, b.rank, b.d));
  }
}

static void push_all(gen *g, int n, graft_value *const *v) {
  for (int i = 0; i < n; i++) push(g, v[i]);
}

/* A seed or tangent for v: ones like v (0), NULL (1), any operand (2), a
 * partner of v (3: right dtype, maybe the wrong shape). */
static graft_value *rd_direction(gen *g, graft_value *v) {
  switch (fz_pick(g->r, 4)) {
  case 0: return graft_ones_like(g->t, v);
  case 1: return NULL;
  case 2: return operand(g);
  default: return partner(g, v);
  }
}

static int ad_budget(gen *g) {
  g->ran = g->top->n_ad++ < FZ_MAX_AD;
  return g->ran;
}

/* gradients: 1..3 ys, seeds NULL (0) or one per y (1), 1..4 xs. */
static graft_value *op_gradients(gen *g) {
  graft_value *ys[3], *seeds[3], *xs[4], *grads[4];
  int n_y = 1 + (int)fz_pick(g->r, 3), n_x = 1 + (int)fz_pick(g->r, 4);
  int with_seeds = fz_pick(g->r, 2);
  for (int i = 0; i < n_y; i++) {
    ys[i] = operand(g);
    seeds[i] = with_seeds ? rd_direction(g, ys[i]) : NULL;
  }
  for (int i = 0; i < n_x; i++) xs[i] = x_operand(g);
  graft_unconnected policy = rd_policy(g);
  if (!ad_budget(g)) return NULL;
  graft_status st = graft_gradients(g->t, n_y, ys, with_seeds ? seeds : NULL, n_x, xs, policy, grads);
  check_results(g, "graft_gradients", st, n_x, grads, xs, 1);
  push_all(g, n_x, grads);
  return NULL; /* pushed above */
}

/* jvp: 1..3 primals with tangents ones-like (0) or one choice each (1) or
 * a NULL array (2), 1..3 ys. */
static graft_value *op_jvp(gen *g) {
  graft_value *xs[3], *tans[3], *ys[3], *jvps[3];
  int n_x = 1 + (int)fz_pick(g->r, 3), n_y = 1 + (int)fz_pick(g->r, 3);
  unsigned m = fz_pick(g->r, 3);
  for (int i = 0; i < n_x; i++) {
    xs[i] = x_operand(g);
    tans[i] = m == 0 ? graft_ones_like(g->t, xs[i]) : m == 1 ? rd_direction(g, xs[i]) : NULL;
  }
  for (int i = 0; i < n_y; i++) ys[i] = operand(g);
  graft_unconnected policy = rd_policy(g);
  if (!ad_budget(g)) return NULL;
  graft_status st = graft_jvp(g->t, n_x, xs, m == 2 ? NULL : tans, n_y, ys, policy, jvps);
  check_results(g, "graft_jvp", st, n_y, jvps, ys, policy == GRAFT_UNCONNECTED_NONE);
  push_all(g, n_y, jvps);
  return NULL; /* pushed above */
}

/* hvp: y the sum of an operand (0) or any operand (1); 1..3 xs; vs a
 * direction each. */
static graft_value *op_hvp(gen *g) {
  graft_value *xs[3], *vs[3], *out[3];
  graft_value *y = operand(g);
  if (fz_pick(g->r, 2) == 0) y = graft_reduce_sum(g->t, y, 0, NULL, 0);
  int n_x = 1 + (int)fz_pick(g->r, 3);
  for (int i = 0; i < n_x; i++) {
    xs[i] = x_operand(g);
    vs[i] = rd_direction(g, xs[i]);
  }
  if (!ad_budget(g)) return NULL;
  graft_status st = graft_hvp(g->t, y, n_x, xs, vs, out);
  check_results(g, "graft_hvp", st, n_x, out, xs, 1);
  push_all(g, n_x, out);
  return NULL; /* pushed above */
}

/* Jacobians grow the graph with numel(x) (fwd) or numel(y) (rev): only
 * small concrete ones are built (symbolic ones must be refused). */
static graft_value *op_jacobian(gen *g, int rev) {
  graft_value *y = operand(g), *x = x_operand(g), *out = NULL;
  fz_shape s, sy, sx;
  if (shape_of(g, rev ? y : x, &s) && !symbolic(&s) && (numel_of(&s) < 0 || numel_of(&s) > 16)) {
    g->ran = 0;
    return NULL;
  }
  if (!ad_budget(g)) return NULL;
  const char *api = rev ? "graft_jacobian_rev" : "graft_jacobian_fwd";
  graft_status st = rev ? graft_jacobian_rev(g->t, y, x, &out) : graft_jacobian_fwd(g->t, y, x, &out);
  if (st != graft_trace_status(g->t))
    fz_die("%s returned %s but the trace status is %s", api, graft_status_name(st),
           graft_status_name(graft_trace_status(g->t)));
  if (st != GRAFT_OK) {
    if (out) fz_die("%s failed but set its result", api);
    return NULL;
  }
  if (!shape_of(g, out, &s) || !shape_of(g, y, &sy) || !shape_of(g, x, &sx))
    fz_die("%s succeeded with a poison result or on a dead value", api);
  int bad = s.rank != sy.rank + sx.rank || graft_value_dtype(out) != graft_value_dtype(y);
  for (int i = 0; !bad && i < s.rank; i++)
    bad = s.d[i] != (i < sy.rank ? sy.d[i] : sx.d[i - sy.rank]);
  if (bad) fz_die("%s: the result is not shaped y.shape + x.shape", api);
  return out;
}

static const graft_status odd_statuses[] = {GRAFT_EINVAL, GRAFT_ESHAPE, GRAFT_EDTYPE,
                                            GRAFT_ECANCELED, (graft_status)5, (graft_status)1,
                                            (graft_status)-11, (graft_status)INT_MIN,
                                            GRAFT_OK};

/* A failure status chosen by byte: documented ones first, then (unless
 * avoided) numbers outside the enum and GRAFT_OK.  Never GRAFT_EINTERNAL,
 * which the target reserves for graft's own internal errors. */
static graft_status rd_status(gen *g) {
  unsigned n = g->p->avoid & FZ_AVOID_STATUS ? 4 : COUNT(odd_statuses);
  return odd_statuses[fz_pick(g->r, n)];
}

static graft_status fz_vjp(graft_trace *t, int n_x, graft_value *const *xs, graft_value *y,
                           graft_value *gy, graft_value **gxs, void *user);

/* custom_gradient: 0..3 xs (or a bad count), y an operand, vjp ours (or
 * NULL). */
static graft_value *op_custom(gen *g) {
  graft_value *xs[4];
  unsigned m = fz_pick(g->r, 8);
  int n_x = m == 7 ? -1 : (int)(m % 4);
  for (int i = 0; i < n_x; i++) xs[i] = x_operand(g);
  graft_value *y = operand(g);
  graft_vjp_fn fn = m == 6 ? NULL : fz_vjp;
  gen *top = g->top;
  custom_rec *rec = top->n_recs < FZ_TOTAL_OPS ? &top->recs[top->n_recs++] : NULL;
  if (!rec) fz_die("decoder: more custom gradients than ops");
  *rec = (custom_rec){top, g->t, g->depth};
  graft_value *v = graft_custom_gradient(g->t, n_x, xs, y, fn, rec);
  fz_shape sv, sy;
  if (shape_of(g, v, &sv)) {
    if (!shape_of(g, y, &sy)) fz_die("graft_custom_gradient succeeded on a NULL, poison or dead y");
    int bad = sv.rank != sy.rank || graft_value_dtype(v) != graft_value_dtype(y);
    for (int i = 0; !bad && i < sv.rank; i++) bad = sv.d[i] != sy.d[i];
    if (bad) fz_die("graft_custom_gradient: the value is not shaped like y");
  }
  return v;
}

/* The custom gradient's VJP.  Per x: a correct-shaped cotangent (0..2),
 * NULL (3), gy as it is (4: the wrong shape unless y is shaped like x),
 * the wrong dtype (5), any pool value (6), a dead handle (7), a call of
 * graft_gradients on its own region, forever (8), or a failure status for
 * the whole VJP (9).  The choices come from the gen decoding when graft
 * calls it (the region may be in a body whose gen ended: its backward,
 * built later, replays the body, with the VJP, into a trace of its own). */
static graft_status fz_vjp(graft_trace *t, int n_x, graft_value *const *xs, graft_value *y,
                           graft_value *gy, graft_value **gxs, void *user) {
  const custom_rec *rec = user;
  gen *g = rec->top->cur;
  if (!rec->depth && t != rec->t)
    fz_die("a VJP ran with another trace than the one it was recorded in");
  if (n_x < 0 || n_x > 3) fz_die("a VJP got n_x = %d for a region of 0..3 inputs", n_x);
  if (g->recurse) {
    graft_value *tmp[3] = {NULL, NULL, NULL};
    graft_status st = graft_gradients(t, 1, &y, &gy, n_x, xs, GRAFT_UNCONNECTED_NONE, tmp);
    for (int i = 0; i < n_x; i++) gxs[i] = tmp[i];
    return st;
  }
  graft_status ret = GRAFT_OK;
  for (int i = 0; i < n_x; i++) {
    unsigned c = fz_pick(g->r, 10);
    unsigned avoid = g->p->avoid;
    if ((c >= 4 && c <= 6 && (avoid & FZ_AVOID_VJP)) || (c == 7 && (avoid & FZ_AVOID_STALE)) ||
        (c == 8 && (avoid & FZ_AVOID_RECURSE)))
      c = 2;
    graft_value *x = xs[i];
    int is_int = live(g, x) && graft_value_dtype(x) == GRAFT_I32;
    switch (c) {
    case 0: case 1:
      gxs[i] = is_int ? NULL
                      : graft_mul(t, graft_ones_like(t, x),
                                  graft_cast(t, graft_reduce_sum(t, gy, 0, NULL, 0),
                                             live(g, x) ? graft_value_dtype(x) : GRAFT_F32));
      break;
    case 2: gxs[i] = is_int ? NULL : graft_zeros_like(t, x); break;
    case 3: gxs[i] = NULL; break;
    case 4: gxs[i] = gy; break;
    case 5:
      gxs[i] = graft_cast(t, graft_zeros_like(t, x),
                          live(g, x) && graft_value_dtype(x) == GRAFT_F64 ? GRAFT_F32 : GRAFT_F64);
      break;
    case 6: gxs[i] = operand(g); break;
    case 7: gxs[i] = stale(g, fz_u8(g->r)); break;
    case 8: {
      g->recurse = 1;
      graft_value *tmp[3] = {NULL, NULL, NULL};
      ret = graft_gradients(t, 1, &y, &gy, n_x, xs, GRAFT_UNCONNECTED_NONE, tmp);
      g->recurse = 0;
      gxs[i] = tmp[i];
      break;
    }
    default: ret = rd_status(g); break;
    }
    if (ret != GRAFT_OK) break;
  }
  return ret;
}

static graft_value *op_trace_fail(gen *g) {
  graft_status s = rd_status(g);
  (void)graft_trace_fail(g->t, s, "fuzz: a failure from user code (%d)", (int)s);
  return NULL;
}

/* Queries on a value (live, NULL or poison; never a dead handle, which
 * the accessors cannot check) and on the trace. */
static graft_value *op_inspect(gen *g) {
  graft_value *v = operand(g);
  fz_shape s;
  if (!is_stale(g, v)) {
    if (!v && !graft_value_is_poison(v)) fz_die("graft_value_is_poison(NULL) is 0");
    shape_of(g, v, &s);
    if (v && graft_value_is_poison(v) && graft_value_shape(v))
      fz_die("graft_value_shape of a poison value is not NULL");
  }
  const char *msg = graft_trace_errmsg(g->t);
  if (!msg) fz_die("graft_trace_errmsg returned NULL");
  if (graft_trace_status(g->t) != GRAFT_OK && !*msg)
    fz_die("the trace failed (%s) with an empty message", graft_status_name(graft_trace_status(g->t)));
  return NULL;
}

/* ---- control flow ------------------------------------------------------ */

/* cond, while_loop, scan and remat.  Each body is a callback whose gen
 * decodes, from the stream at the point where graft traces it: 0..2
 * captures (values of the enclosing gen's pool, which the body then uses
 * directly), its explicit inputs (the newest values), up to FZ_BODY_OPS
 * ops (255 ends them; control flow nested deeper than FZ_MAX_DEPTH is
 * skipped), its outputs, and a return choice (now and then a failure
 * status).  An output that must agree with something (a carry with its
 * init, the else branch with the then branch) is a value of the right
 * dtype and shape where one fits (fit), else any operand, so mismatches
 * reach the refusals.  The construct's outputs go into the pool, so later
 * gradients, JVPs and HVPs differentiate through them. */

enum { CTL_COND, CTL_WHILE, CTL_SCAN, CTL_REMAT };
static const char *const ctl_names[] = {"cond", "while_loop", "scan", "remat"};

/* What a construct's callbacks need: who called, the counts graft must
 * pass (per body: 0 then / cond / the only body, 1 else / loop body), and
 * what the bodies' outputs must fit; what the bodies' outputs were. */
typedef struct body_ctx {
  gen *parent;
  int kind;
  int n_in[2], n_out[2];
  int tmpl[FZ_CTL_MAX];      /* cond: output i fits explicit input tmpl[i] (-1: none) */
  int n_fit;                 /* scan: outputs 0..n_fit (the carries) fit inputs 0..n_fit */
  int counted;               /* while: var 0 is the harness's i32 counter ... */
  int limit;                 /* ... and the loop stops once it reaches limit */
  int traced[2];             /* bodies traced (each must be, once at most) */
  int ok[2][FZ_CTL_MAX];     /* output i of body k was live: got[k][i], dt[k][i] */
  fz_shape got[2][FZ_CTL_MAX];
  graft_dtype dt[2][FZ_CTL_MAX];
} body_ctx;

/* A control op runs only above the nesting limit. */
static int ctl_allowed(gen *g) {
  g->ran = g->depth < FZ_MAX_DEPTH;
  return g->ran;
}

/* Under GRAFT_FUZZ_AVOID=empty, whether v has no elements (concrete dims). */
static int avoid_empty(gen *g, const graft_value *v) {
  fz_shape s;
  return (g->p->avoid & FZ_AVOID_EMPTY) && shape_of(g, v, &s) && numel_of(&s) == 0;
}

/* A construct's explicit operands: none empty when avoided (else the op
 * is skipped). */
static int operands_ok(gen *g, int n, graft_value *const *v) {
  for (int i = 0; i < n; i++)
    if (avoid_empty(g, v[i])) g->ran = 0;
  return g->ran;
}

/* An output that must be shaped like want (dtype and dims): a pool value
 * that is (0..2), or when none is, ref (a value known to fit) or a fill
 * of a concrete shape; any operand (3, and where nothing says what fits). */
static graft_value *fit(gen *g, const var_ctx *want, graft_value *ref) {
  unsigned m = fz_pick(g->r, 4);
  if (m == 3 || !want) return operand(g);
  graft_value *v = find(g, ok_exact, want);
  if (v) return v;
  if (ref) return ref;
  if (symbolic(&want->s)) return operand(g);
  return graft_fill(g->t, want->dt, want->s.rank, want->s.d, rd_double(g));
}

/* c of x's dtype (f32 when x is not live): a comparison's other side. */
static graft_value *scalar_like(gen *g, const graft_value *x) {
  return graft_scalar(g->t, live(g, x) ? graft_value_dtype(x) : GRAFT_F32, rd_double(g));
}

static int want_of(gen *g, const graft_value *v, var_ctx *w) {
  if (!shape_of(g, v, &w->s)) return 0;
  w->dt = graft_value_dtype(v);
  return 1;
}

/* A while loop's predicate from the cond body's pool: sum(x) > c (0, 1),
 * sum(x) itself (2), any operand (3: rank 0 or refused); with the
 * counter, where(counter < limit, that, 0), so the loop ends by itself. */
static graft_value *while_pred(gen *g, const body_ctx *c, graft_value *const *in) {
  unsigned m = fz_pick(g->r, 4);
  graft_value *x = operand(g), *pred = x;
  if (m < 3) pred = graft_reduce_sum(g->t, x, 0, NULL, 0);
  if (m < 2) pred = graft_greater(g->t, pred, scalar_like(g, x));
  if (!c->counted) return pred;
  graft_value *go = graft_less(g->t, in[0], graft_scalar(g->t, GRAFT_I32, c->limit));
  return graft_where(g->t, go, pred, graft_zeros_like(g->t, pred));
}

/* Body k of c, traced by graft into t. */
static graft_status run_body(body_ctx *c, int k, graft_trace *t, int n_in, graft_value *const *in,
                             int n_out, graft_value **out) {
  gen *pg = c->parent, *top = pg->top;
  const char *api = ctl_names[c->kind];
  if (top->cur != pg) fz_die("%s: a body traced while another body's gen decodes", api);
  if (c->traced[k]++) fz_die("%s: body %d traced twice", api, k);
  if (n_in != c->n_in[k] || n_out != c->n_out[k])
    fz_die("%s: body %d called with %d inputs and %d outputs, expected %d and %d", api, k, n_in,
           n_out, c->n_in[k], c->n_out[k]);
  if (!t || t == pg->t) fz_die("%s: a body traced into the caller's trace", api);
  gen *b = calloc(1, sizeof *b);
  if (!b) fz_die("harness: out of memory");
  b->t = t;
  b->p = pg->p;
  b->r = pg->r;
  b->top = top;
  b->depth = pg->depth + 1;
  top->cur = b;
  int n_cap = (int)fz_pick(b->r, 3);
  for (int i = 0; i < n_cap; i++) push(b, operand(pg));
  for (int i = 0; i < n_in; i++) push(b, in[i]);
  if (b->p->verbose)
    fprintf(stderr, "%*s  [%s body %d: %d captured, inputs%s ]\n", 4 * b->depth, "", api, k,
            n_cap, b->made);
  b->made[0] = 0;
  emit_ops(b, FZ_BODY_OPS);
  var_ctx w;
  for (int i = 0; i < n_out; i++) {
    switch (c->kind) {
    case CTL_COND: {
      /* fits an explicit input, or (else) what the then branch gave */
      int ti = c->tmpl[i];
      graft_value *ref = ti >= 0 ? in[ti] : NULL;
      int have = ref ? want_of(b, ref, &w) : k == 1 && c->ok[0][i];
      if (!ref && have) w = (var_ctx){c->dt[0][i], c->got[0][i]};
      out[i] = fit(b, have ? &w : NULL, ref);
      break;
    }
    case CTL_WHILE:
      if (k == 0) out[i] = while_pred(b, c, in);
      else if (c->counted && i == 0) out[i] = graft_add(t, in[0], graft_scalar(t, GRAFT_I32, 1));
      else out[i] = fit(b, want_of(b, in[i], &w) ? &w : NULL, in[i]);
      break;
    case CTL_SCAN:
      out[i] = i < c->n_fit ? fit(b, want_of(b, in[i], &w) ? &w : NULL, in[i]) : operand(b);
      break;
    default: out[i] = operand(b); break;
    }
    if (avoid_empty(b, out[i])) out[i] = graft_scalar(t, GRAFT_F32, 0.0);
    if (i < FZ_CTL_MAX && (c->ok[k][i] = shape_of(b, out[i], &c->got[k][i])))
      c->dt[k][i] = graft_value_dtype(out[i]);
  }
  graft_status ret = fz_u8(b->r) % 16 == 15 ? rd_status(b) : GRAFT_OK;
  if (b->p->verbose)
    fprintf(stderr, "%*s  [%s body %d: outputs%s -> %s ]\n", 4 * b->depth, "", api, k, b->args,
            graft_status_name(graft_trace_status(t)));
  top->cur = pg;
  free(b);
  return ret;
}

static graft_status body_first(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  return run_body(user, 0, t, n_in, in, n_out, out);
}

static graft_status body_second(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  return run_body(user, 1, t, n_in, in, n_out, out);
}

/* What control.h promises of a call: it returns the trace's status; on
 * failure every out is the poison value and, when this call failed the
 * trace, the message names the construct; on success the outs are live,
 * with want[i]'s dtype and rank, and its dims where both are concrete
 * (want[i] NULL: unknown).  Then the outs join the pool. */
static void check_ctl(gen *g, const body_ctx *c, graft_status before, graft_status st, int n,
                      graft_value **outs, const var_ctx *const *want) {
  const char *api = ctl_names[c->kind];
  if (st != graft_trace_status(g->t))
    fz_die("%s returned %s but the trace status is %s", api, graft_status_name(st),
           graft_status_name(graft_trace_status(g->t)));
  if (st != GRAFT_OK) {
    for (int i = 0; i < n; i++)
      if (!outs[i] || !graft_value_is_poison(outs[i]))
        fz_die("%s failed (%s) but outs[%d] is not the poison value", api, graft_status_name(st),
               i);
    const char *msg = graft_trace_errmsg(g->t);
    if (before == GRAFT_OK && !strstr(msg, api))
      fz_die("%s failed (%s) with a message that does not name it: '%s'", api,
             graft_status_name(st), msg);
    return;
  }
  if (before != GRAFT_OK) fz_die("%s succeeded in a trace that had failed", api);
  for (int k = 0; k < 2; k++)
    if (c->traced[k] != (k == 0 || c->kind <= CTL_WHILE))
      fz_die("%s succeeded but body %d was traced %d times", api, k, c->traced[k]);
  for (int i = 0; i < n; i++) {
    fz_shape s;
    char a[256], b[256];
    if (!shape_of(g, outs[i], &s)) fz_die("%s succeeded with a poison outs[%d]", api, i);
    const var_ctx *w = want[i];
    int bad = w && (graft_value_dtype(outs[i]) != w->dt || s.rank != w->s.rank);
    for (int d = 0; w && !bad && d < s.rank; d++)
      bad = s.d[d] >= 0 && w->s.d[d] >= 0 && s.d[d] != w->s.d[d];
    if (bad)
      fz_die("%s: outs[%d] is %s%s, expected %s%s", api, i,
             graft_dtype_name(graft_value_dtype(outs[i])), dims_str(a, sizeof a, s.rank, s.d),
             graft_dtype_name(w->dt), dims_str(b, sizeof b, w->s.rank, w->s.d));
  }
  push_all(g, n, outs);
}

/* Expected outputs: like the values v[0..n) (NULL where not live). */
static void want_like(gen *g, int n, graft_value *const *v, var_ctx *w, const var_ctx **want) {
  for (int i = 0; i < n; i++) want[i] = want_of(g, v[i], &w[i]) ? &w[i] : NULL;
}

/* Expected outputs: like what body k gave (offset by from). */
static void want_body(const body_ctx *c, int k, int from, int n, var_ctx *w, const var_ctx **want) {
  for (int i = 0; i < n; i++) {
    int j = from + i;
    want[i] = j < FZ_CTL_MAX && c->ok[k][j] ? &w[i] : NULL;
    if (want[i]) w[i] = (var_ctx){c->dt[k][j], c->got[k][j]};
  }
}

/* cond: pred sum(x) > c (mode 0..5), sum(x) (6) or x itself (7: any
 * operand, refused unless rank 0); 1..3 ins, or 0; 1..3 outs, each fitting
 * an explicit input (its choice) or, without ins, the then branch's.  Bad
 * arguments: n_in -1 (5), n_out 0 (4), no else callback (3). */
static graft_value *op_cond(gen *g) {
  if (!ctl_allowed(g)) return NULL;
  unsigned m = fz_pick(g->r, 8);
  graft_value *x = operand(g), *pred = x, *ins[FZ_CTL_MAX] = {NULL}, *outs[FZ_CTL_MAX] = {NULL};
  if (m < 7) pred = graft_reduce_sum(g->t, x, 0, NULL, 0);
  if (m < 6) pred = graft_greater(g->t, pred, scalar_like(g, x));
  int n_in = m == 5 ? -1 : (int)(fz_pick(g->r, 4) + 1) % 4;
  int n_out = m == 4 ? 0 : 1 + (int)fz_pick(g->r, 3);
  for (int i = 0; i < n_in; i++) ins[i] = operand(g);
  body_ctx c = {.parent = g, .kind = CTL_COND, .n_in = {n_in, n_in}, .n_out = {n_out, n_out}};
  for (int i = 0; i < n_out; i++)
    c.tmpl[i] = n_in > 0 ? note_int(g, (int)fz_pick(g->r, (unsigned)n_in)) : -1;
  if (!operands_ok(g, n_in, ins)) return NULL;
  graft_status before = graft_trace_status(g->t);
  graft_status st = graft_cond(g->t, pred, n_in, ins, body_first, m == 3 ? NULL : body_second, &c,
                               n_out, outs);
  var_ctx w[FZ_CTL_MAX];
  const var_ctx *want[FZ_CTL_MAX];
  want_body(&c, 0, 0, n_out, w, want);
  check_ctl(g, &c, before, st, n_out, outs, want);
  return NULL; /* pushed by check_ctl */
}

/* while_loop: 1..3 vars from the pool, after the harness's i32 counter
 * (modes 0..3, 6) that the body steps and the cond compares with a limit
 * 0..6, so a loop without max_iters (0 in the table; opts NULL in mode 6)
 * ends too; without the counter (4, 5) the loop stops at max_iters (1..8)
 * or where the data says.  Bad arguments: no vars (7), max_iters -1. */
static graft_value *op_while(gen *g) {
  static const int64_t max_iters[8] = {4, 1, 2, 3, 8, 5, 0, -1};
  if (!ctl_allowed(g)) return NULL;
  unsigned m = fz_pick(g->r, 8);
  body_ctx c = {.parent = g, .kind = CTL_WHILE, .counted = m < 4 || m == 6};
  graft_value *init[FZ_CTL_MAX] = {NULL}, *outs[FZ_CTL_MAX] = {NULL};
  int n = 0, n_dec = m == 7 ? 0 : 1 + (int)fz_pick(g->r, 3);
  if (c.counted) init[n++] = graft_scalar(g->t, GRAFT_I32, 0.0);
  for (int i = 0; i < n_dec; i++) init[n++] = operand(g);
  graft_while_opts o = {max_iters[fz_pick(g->r, 8)]};
  if (!o.max_iters && !c.counted) o.max_iters = 4;
  c.limit = note_int(g, (int)fz_pick(g->r, 7));
  note_int(g, (int)o.max_iters);
  c.n_in[0] = c.n_in[1] = c.n_out[1] = n;
  c.n_out[0] = 1;
  if (!operands_ok(g, n, init)) return NULL;
  graft_status before = graft_trace_status(g->t);
  graft_status st = graft_while_loop(g->t, body_first, body_second, &c, n, init, outs,
                                     m == 6 ? NULL : &o);
  var_ctx w[FZ_CTL_MAX];
  const var_ctx *want[FZ_CTL_MAX];
  want_like(g, n, init, w, want);
  check_ctl(g, &c, before, st, n, outs, want);
  return NULL; /* pushed by check_ctl */
}

/* A value a scan may run over: rank >= 1 and a leading length of 0..16,
 * or a symbol whose other dims are concrete and nonzero (bounded by the
 * data then); with lead, that leading length. */
static int scannable(gen *g, const void *lead, graft_value *v) {
  fz_shape s;
  if (!shape_of(g, v, &s) || s.rank < 1) return 0;
  if (lead) return s.d[0] == *(const int64_t *)lead;
  if (s.d[0] >= 0) return s.d[0] <= 16;
  for (int i = 1; i < s.rank; i++)
    if (s.d[i] < 1) return 0;
  return 1;
}

/* scan: 0..2 carries, 1..2 xs of one leading length (scannable: the
 * first, or a fill [0..4] when the pool has none), 0..2 ys (one at least
 * with no carry), reverse or not, checkpoint 0, 1, 2, 3, 5, 16.  Bad
 * arguments: any operands as xs (7; skipped when one would scan past the
 * bound), no xs (6), opts NULL (5: defaults), checkpoint -1. */
static graft_value *op_scan(gen *g) {
  static const int64_t checkpoints[8] = {0, 0, 1, 2, 3, 5, 16, -1};
  if (!ctl_allowed(g)) return NULL;
  unsigned m = fz_pick(g->r, 8);
  int n_carry = (int)fz_pick(g->r, 3), n_xs = m == 6 ? 0 : 1 + (int)fz_pick(g->r, 2);
  int n_ys = (int)fz_pick(g->r, 3);
  if (n_carry + n_ys == 0) n_ys = 1;
  graft_value *init[FZ_CTL_MAX] = {NULL}, *xs[FZ_CTL_MAX] = {NULL}, *outs[FZ_CTL_MAX] = {NULL};
  for (int i = 0; i < n_carry; i++) init[i] = operand(g);
  fz_shape s0 = {0, {0}};
  for (int i = 0; i < n_xs; i++) {
    if (m == 7) {
      xs[i] = operand(g);
      fz_shape s;
      if (shape_of(g, xs[i], &s) && s.rank >= 1 && !scannable(g, NULL, xs[i])) {
        g->ran = 0;
        return NULL;
      }
      continue;
    }
    xs[i] = find(g, scannable, i ? (const void *)&s0.d[0] : NULL);
    if (!xs[i] && i) xs[i] = xs[0];
    if (!xs[i]) {
      int64_t len = fz_pick(g->r, 5);
      note_dims(g, "xs", 1, &len);
      xs[i] = push(g, graft_fill(g->t, GRAFT_F32, 1, &len, rd_double(g)));
    }
    if (i == 0 && !shape_of(g, xs[0], &s0)) s0.d[0] = 0;
  }
  graft_scan_opts o = {.reverse = (int)fz_pick(g->r, 2)};
  o.checkpoint = checkpoints[fz_pick(g->r, 8)];
  note_int(g, o.reverse);
  note_int(g, (int)o.checkpoint);
  body_ctx c = {.parent = g, .kind = CTL_SCAN, .n_in = {n_carry + n_xs}, .n_out = {n_carry + n_ys},
                .n_fit = n_carry};
  if (!operands_ok(g, n_carry, init) || !operands_ok(g, n_xs, xs)) return NULL;
  graft_status before = graft_trace_status(g->t);
  graft_status st = graft_scan(g->t, body_first, &c, n_carry, init, n_xs, xs, n_ys, outs,
                               m == 5 ? NULL : &o);
  var_ctx w[FZ_CTL_MAX];
  const var_ctx *want[FZ_CTL_MAX];
  want_like(g, n_carry, init, w, want);
  want_body(&c, 0, n_carry, n_ys, w + n_carry, want + n_carry);
  for (int i = n_carry; i < n_carry + n_ys; i++) { /* y i stacked: [T, ...] */
    var_ctx *y = &w[i];
    if (!want[i] || y->s.rank >= GRAFT_MAX_RANK || !live(g, xs[0])) {
      want[i] = NULL;
      continue;
    }
    memmove(y->s.d + 1, y->s.d, (size_t)y->s.rank * sizeof *y->s.d);
    y->s.d[0] = graft_value_shape(xs[0])[0];
    y->s.rank++;
  }
  check_ctl(g, &c, before, st, n_carry + n_ys, outs, want);
  return NULL; /* pushed by check_ctl */
}

/* remat: 0..3 ins, 1..3 outs (any operands of the body); bad: n_out 0 (7),
 * n_in -1 (6). */
static graft_value *op_remat(gen *g) {
  if (!ctl_allowed(g)) return NULL;
  unsigned m = fz_pick(g->r, 8);
  int n_in = m == 6 ? -1 : (int)fz_pick(g->r, 4), n_out = m == 7 ? 0 : 1 + (int)fz_pick(g->r, 3);
  graft_value *ins[FZ_CTL_MAX] = {NULL}, *outs[FZ_CTL_MAX] = {NULL};
  for (int i = 0; i < n_in; i++) ins[i] = operand(g);
  body_ctx c = {.parent = g, .kind = CTL_REMAT, .n_in = {n_in}, .n_out = {n_out}};
  if (!operands_ok(g, n_in, ins)) return NULL;
  graft_status before = graft_trace_status(g->t);
  graft_status st = graft_remat(g->t, body_first, &c, n_in, ins, n_out, outs);
  var_ctx w[FZ_CTL_MAX];
  const var_ctx *want[FZ_CTL_MAX];
  want_body(&c, 0, 0, n_out, w, want);
  check_ctl(g, &c, before, st, n_out, outs, want);
  return NULL; /* pushed by check_ctl */
}

/* ---- the callback ------------------------------------------------------- */

graft_status fz_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                      graft_value **out, void *user) {
  fz_trace_prog *p = user;
  gen *g = calloc(1, sizeof *g); /* 8 KB: off the stack, which bodies nest on */
  if (!g) fz_die("harness: out of memory");
  g->t = t;
  g->p = p;
  g->top = g->cur = g;
  g->rd = (fz_reader){p->data, p->size, p->body};
  g->r = &g->rd;
  memset(p->emitted, 0, sizeof p->emitted);
  if (n_out != p->n_out + p->n_extra)
    fz_die("the callback got n_out = %d, the function has %d", n_out, p->n_out + p->n_extra);
  for (int i = 0; i < n_in; i++) push(g, in[i]);
  if (p->verbose) fprintf(stderr, "  trace: inputs%s\n", g->made);
  g->made[0] = 0;

  emit_ops(g, FZ_MAX_OPS);
  for (int k = 0; k < p->n_out; k++) out[k] = operand(g);
  if (p->verbose) fprintf(stderr, "  outputs:%s\n", g->args);
  for (int k = 0; k < p->n_extra; k++)
    out[p->n_out + k] = k < g->n_checked ? g->checked[k] : graft_scalar(t, GRAFT_F32, 0.0);
  graft_status ret = fz_u8(g->r) % 4 == 3 ? rd_status(g) : GRAFT_OK;
  free(g);
  return ret;
}
