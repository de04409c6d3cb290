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
 * assigns of reads.  The decoder also checks what the API promises about
 * results it can see during the trace (gradients shaped like their xs,
 * all-NULL results on failure, ranks and dims in range) and dies on a
 * violation (fuzz.h). */
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
               {"api", FZ_AVOID_API},         {"orphan", FZ_AVOID_ORPHAN}};
  *out = 0;
  while (s && *s) {
    size_t len = strcspn(s, ",");
    size_t i = 0;
    while (i < COUNT(words) && (strlen(words[i].name) != len || strncmp(words[i].name, s, len)))
      i++;
    if (i == COUNT(words)) {
      fprintf(stderr, "GRAFT_FUZZ_AVOID: unknown class '%.*s' (huge, neg, stale, prune, recurse, "
              "status, vjp, topo, api, orphan)\n", (int)len, s);
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

typedef struct gen {
  graft_trace *t;
  fz_trace_prog *p;
  fz_reader r;
  graft_value *pool[FZ_POOL];
  int n;
  int n_ad;                           /* gradient-building calls so far */
  graft_value *checked[FZ_EXTRA_OUT]; /* values of fallible ops */
  int n_checked;
  int recurse; /* a VJP chose to call graft_gradients on its own region */
  int ran;     /* the current op was emitted, not skipped */
  /* The log (fz_trace_prog.verbose): what the current op decoded and made,
   * and names (v0, v1, ...) for the values seen. */
  char args[512], made[512];
  const graft_value *names[512];
  int n_names;
} gen;

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
  int i = 0;
  while (i < g->n_names && g->names[i] != v) i++;
  if (i == g->n_names && g->n_names < (int)COUNT(g->names)) g->names[g->n_names++] = v;
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
  unsigned b = fz_u8(&g->r);
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
  unsigned k = fz_u8(&g->r);
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
  if (fz_pick(&g->r, 4) == 3 || !live(g, a)) return operand(g);
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
  graft_dtype dt = dtype_from(g, fz_u8(&g->r), ref);
  if (g->p->verbose) note(g->args, " %s(%d)", graft_dtype_name(dt), (int)dt);
  return dt;
}

static double rd_double(gen *g) {
  static const double special[16] = {1.0,  0.0,      -0.0,      0.5, -1.0,    2.0,     3.0, 1e-3,
                                     1e30, -1e30,    INFINITY, -INFINITY, NAN, 1e-310, DBL_MAX, -2.5};
  unsigned b = fz_u8(&g->r);
  double v = b < 16 ? special[b] : ((double)b - 136.0) / 8.0;
  if (g->p->verbose) note(g->args, " %g", v);
  return v;
}

/* A dim inside the trace: dim_from's classes, and 89..127 a dim of a pool
 * value (a symbol when that dim is symbolic). */
static int64_t rd_dim(gen *g) {
  unsigned b = fz_u8(&g->r);
  if (b >= 89 && b < 128) {
    fz_shape s;
    graft_value *v = pool_at(g, fz_u8(&g->r), 1);
    unsigned i = fz_u8(&g->r);
    return shape_of(g, v, &s) && s.rank ? s.d[i % (unsigned)s.rank] : 1;
  }
  return dim_from(&g->r, b, g->p->avoid);
}

/* A target shape: like's shape (0), like's with one dim redrawn (1), a
 * fresh one of rank 0..3 (2), or any claimed rank -1..10 (3). */
static void rd_shape(gen *g, const graft_value *like, fz_shape *s) {
  unsigned m = fz_pick(&g->r, 4);
  if (m <= 1 && shape_of(g, like, s)) {
    if (m == 1 && s->rank) s->d[fz_pick(&g->r, (unsigned)s->rank)] = rd_dim(g);
    return;
  }
  s->rank = m == 3 ? fz_range(&g->r, -1, SHAPE_CAP - 2) : fz_range(&g->r, 0, 3);
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

static int rd_raw_axis(gen *g) { return note_int(g, raw_axis_from(fz_u8(&g->r))); }

/* One axis: 0 = the last; small values both ways; the extremes. */
static int axis_from(unsigned b) {
  if (b == 0) return -1;
  if (b < 16) return (int)(b % 8) - 4;
  if (b == 16) return INT_MIN;
  if (b == 17) return INT_MAX;
  return (int)(b % 20) - 10;
}

static int rd_axis(gen *g) { return note_int(g, axis_from(fz_u8(&g->r))); }

/* A reduction's axes: all (0), distinct valid ones counted up (1) or from
 * the end (2), or raw (3: any count -1..9, any values). */
static int rd_axes(gen *g, const graft_value *x, int *axes) {
  fz_shape s = {0, {0}};
  unsigned m = fz_pick(&g->r, 4);
  shape_of(g, x, &s);
  if (m == 0) return 0;
  if (m == 3) {
    int n = fz_range(&g->r, -1, 9);
    for (int i = 0; i < n; i++) axes[i] = rd_raw_axis(g);
    return n;
  }
  if (!s.rank) return 0;
  int n = 1 + (int)fz_pick(&g->r, (unsigned)s.rank), first = (int)fz_pick(&g->r, (unsigned)s.rank);
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

static graft_variable *rd_var(gen *g) {
  unsigned i = fz_pick(&g->r, (unsigned)g->p->n_vars + 1);
  graft_variable *v = i < (unsigned)g->p->n_vars ? g->p->vars[i] : NULL;
  if (g->p->verbose) note(g->args, v ? " var%u" : " NULL-var", i);
  return v;
}

static graft_value *op_leaf(gen *g, int op) {
  fz_shape s;
  graft_dtype dt = rd_dtype(g, newest(g));
  if (op == FZ_OP_SCALAR) return graft_scalar(g->t, dt, rd_double(g));
  rd_shape(g, newest(g), &s);
  note_dims(g, "shape", s.rank, s.d);
  if (op == FZ_OP_FILL) return graft_fill(g->t, dt, s.rank, s.d, rd_double(g));
  /* 16-byte steps keep f64 data aligned. */
  const unsigned char *data = (const unsigned char *)g->p->blob + 16u * fz_u8(&g->r);
  return graft_constant(g->t, dt, s.rank, s.d, data);
}

static graft_value *op_polygamma(gen *g) {
  static const int orders[] = {1, 0, 2, 3, 4, 170, 171, -1, INT_MIN, INT_MAX};
  int n = orders[fz_pick(&g->r, COUNT(orders))];
  return graft_polygamma(g->t, note_int(g, n), operand(g));
}

static graft_value *op_transpose(gen *g) {
  graft_value *x = operand(g);
  fz_shape s;
  int perm[SHAPE_CAP];
  unsigned m = fz_pick(&g->r, 3);
  if (m == 0 || !shape_of(g, x, &s)) return graft_transpose(g->t, x, NULL);
  for (int i = 0; i < s.rank; i++) perm[i] = m == 1 ? i : rd_raw_axis(g);
  for (int i = s.rank - 1; m == 1 && i > 0; i--) { /* a valid permutation */
    int j = (int)fz_pick(&g->r, (unsigned)i + 1), tmp = perm[i];
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
  unsigned m = fz_pick(&g->r, 3);
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
      if (sum ? fz_u8(&g->r) & 1 : s.d[i] == 1) s.d[i] = sum ? 1 : rd_dim(g);
  }
  note_dims(g, "shape", s.rank, s.d);
  return sum ? graft_sum_to_shape(g->t, x, s.rank, s.d) : graft_broadcast_to(g->t, x, s.rank, s.d);
}

static graft_value *op_one_hot(gen *g) {
  static const int64_t depths[] = {3, 1, 0, 2, 5, INT64_C(1) << 20, -1, INT64_MAX, INT64_C(1) << 40};
  graft_value *labels = NULL;
  for (int i = g->n - 1; i >= 0 && !labels; i--)
    if (live(g, g->pool[i]) && graft_value_dtype(g->pool[i]) == GRAFT_I32) labels = g->pool[i];
  if (fz_pick(&g->r, 4) == 3 || !labels) labels = operand(g);
  unsigned k = fz_pick(&g->r, COUNT(depths));
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
  unsigned b = fz_u8(&g->r);
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
  const unsigned null = fz_u8(&g->r);
  const int64_t *k = null & 8 ? NULL : pair[0], *s = null & 1 ? NULL : pair[1];
  const int64_t *pad = null & 2 ? NULL : pair[2], *dil = null & 4 ? NULL : pair[3];
  if (op == FZ_OP_MAX_POOL2D) return graft_max_pool2d(g->t, x, k, s, pad);
  if (op == FZ_OP_AVG_POOL2D) return graft_avg_pool2d(g->t, x, k, s, pad);
  unsigned b = fz_u8(&g->r);
  const int64_t groups = note_int(g, b < 250 ? 1 + (int)(b % 2) : (int)b - 252);
  graft_value *w;
  fz_shape sx;
  if (fz_pick(&g->r, 4) < 3 && shape_of(g, x, &sx) && sx.rank == 4) {
    const int64_t per = groups > 0 ? groups : 1;
    const int64_t ws[4] = {per * (1 + fz_pick(&g->r, 3)), sx.d[1] >= 0 ? sx.d[1] / per : 1,
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
  return reduce_fns[k](g->t, x, n, axes, note_int(g, (int)fz_pick(&g->r, 3)));
}

/* The log line of an op: what it decoded, made, or why the trace failed. */
static void log_op(gen *g, int op, const graft_value *v, graft_status before) {
  if (!g->p->verbose) return;
  char b[16];
  graft_status now = graft_trace_status(g->t);
  fprintf(stderr, "  %-15s(%s ) ->%s", fz_op_name(op), g->args, g->made[0] ? g->made : "");
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
    case FZ_OP_READ: v = graft_read(g->t, rd_var(g)); break;
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
    default: fz_die("decoder: opcode %d has no case", op);
    }
  }
  mark(g, op, v);
  push(g, v);
  log_op(g, op, v, before);
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
  switch (fz_pick(&g->r, 4)) {
  case 0: return graft_matmul(g->t, a, a, GRAFT_TRANS_B);
  case 1: return graft_matmul(g->t, a, a, GRAFT_TRANS_A);
  case 2: {
    mm_ctx c = {a, fz_pick(&g->r, 4)};
    graft_value *b = live(g, a) ? find(g, ok_matmul, &c) : NULL;
    return b ? graft_matmul(g->t, a, b, c.flags) : graft_matmul(g->t, a, a, GRAFT_TRANS_B);
  }
  default: {
    graft_value *b = operand(g);
    return graft_matmul(g->t, a, b, (unsigned)note_int(g, (int)fz_u8(&g->r)));
  }
  }
}

/* reshape: [-1] (0), the dims reversed (1), a 1 inserted and one dim
 * inferred (2), two adjacent dims merged into -1 (3), any shape with maybe
 * a -1 (4). */
static graft_value *op_reshape(gen *g) {
  graft_value *x = operand(g);
  fz_shape s, o;
  unsigned m = fz_pick(&g->r, 5);
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
      int at = (int)fz_pick(&g->r, (unsigned)o.rank + 1);
      memmove(o.d + at + 1, o.d + at, (size_t)(o.rank - at) * sizeof *o.d);
      o.d[at] = 1;
      o.rank++;
    }
    if (o.rank) o.d[fz_pick(&g->r, (unsigned)o.rank)] = -1;
    break;
  }
  case 3: {
    o = s;
    if (o.rank >= 2) {
      int at = (int)fz_pick(&g->r, (unsigned)o.rank - 1);
      o.d[at] = -1;
      memmove(o.d + at + 1, o.d + at + 2, (size_t)(o.rank - at - 2) * sizeof *o.d);
      o.rank--;
    }
    break;
  }
  default:
    rd_shape(g, x, &o);
    if (o.rank > 0 && o.rank <= SHAPE_CAP && fz_u8(&g->r) & 1) o.d[fz_pick(&g->r, (unsigned)o.rank)] = -1;
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
  unsigned m = fz_pick(&g->r, 2);
  int have = shape_of(g, x, &s);
  int rank = have ? s.rank : 0;
  for (int i = 0; i < rank; i++) {
    int64_t d = s.d[i];
    if (m == 1) {
      begin[i] = rd_dim(g);
      size[i] = rd_dim(g);
    } else if (d < 0) {
      begin[i] = 0;
      size[i] = !pad && (fz_u8(&g->r) & 1) ? -1 : d;
    } else if (pad) {
      begin[i] = fz_pick(&g->r, 3);
      size[i] = d > INT64_MAX - 8 ? d : d + begin[i] + fz_pick(&g->r, 3);
    } else {
      begin[i] = (int64_t)(fz_u8(&g->r) % ((uint64_t)d + 1));
      unsigned b = fz_u8(&g->r);
      size[i] = b == 0 ? -1 : (int64_t)(b % ((uint64_t)(d - begin[i]) + 1));
    }
  }
  note_dims(g, "begin", rank, begin);
  note_dims(g, pad ? "shape" : "size", rank, size);
  if (!pad) return graft_slice(g->t, x, begin, size);
  if (m == 1 && fz_u8(&g->r) & 1) rank = fz_range(&g->r, -1, SHAPE_CAP - 2);
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
  if (fz_pick(&g->r, 2) == 1) {
    int n = fz_range(&g->r, -1, 5), axis = rd_raw_axis(g);
    for (int i = 1; i < n; i++) xs[i] = operand(g);
    return graft_concat(g->t, note_int(g, n), xs, axis);
  }
  int rank = shape_of(g, xs[0], &s) ? s.rank : 0;
  int n = 1 + (int)fz_pick(&g->r, 4);
  int axis = rank ? (int)fz_pick(&g->r, (unsigned)rank) : 0;
  cat_ctx c = {xs[0], axis};
  for (int i = 1; i < n; i++) {
    graft_value *v = live(g, xs[0]) ? find(g, ok_concat, &c) : NULL;
    xs[i] = v ? v : xs[0];
  }
  return graft_concat(g->t, note_int(g, n), xs, note_int(g, fz_u8(&g->r) & 1 ? axis - rank : axis));
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
  if (!logits || fz_pick(&g->r, 4) == 3) logits = operand(g);
  int have = shape_of(g, logits, &s) && s.rank == 2;
  unsigned m = fz_pick(&g->r, 3);
  if (m == 0 && have && s.d[0] >= 0 && s.d[0] <= 64 && s.d[1] >= 0 && s.d[1] < 250) {
    int32_t lab[64];
    for (int64_t i = 0; i < s.d[0]; i++) {
      int v = (int)fz_pick(&g->r, (unsigned)s.d[1] + 2);
      lab[i] = v == s.d[1] + 1 ? -1 : v;
    }
    labels = graft_constant(g->t, GRAFT_I32, 1, s.d, lab);
  } else if (m <= 1 && have) {
    labels = find(g, ok_labels, &s.d[0]);
  }
  if (!labels) labels = operand(g);
  graft_value *v = graft_softmax_cross_entropy(g->t, logits, labels);
  if (live(g, v) && g->n_checked < FZ_EXTRA_OUT) g->checked[g->n_checked++] = v;
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
  unsigned m = fz_pick(&g->r, 3);
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
  unsigned m = fz_pick(&g->r, 8);
  graft_module *opt = m == 7 ? NULL : g->p->opt;
  int n = g->p->n_opt + (m == 6);
  graft_value *gr[FZ_MAX_VARS + 1] = {NULL};
  for (int i = 0; i < n; i++) {
    graft_variable *var = i < g->p->n_opt ? g->p->opt_vars[i] : NULL;
    unsigned c = fz_pick(&g->r, 4);
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
  int n = 1 + (int)fz_pick(&g->r, 3);
  graft_value *xs[3], *out[3] = {NULL}, *norm = NULL;
  for (int i = 0; i < n; i++) xs[i] = operand(g);
  double max_norm = rd_double(g);
  int want_norm = fz_pick(&g->r, 2);
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
  unsigned b = fz_u8(&g->r);
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
  switch (fz_pick(&g->r, 4)) {
  case 0: return graft_ones_like(g->t, v);
  case 1: return NULL;
  case 2: return operand(g);
  default: return partner(g, v);
  }
}

static int ad_budget(gen *g) {
  g->ran = g->n_ad++ < FZ_MAX_AD;
  return g->ran;
}

/* gradients: 1..3 ys, seeds NULL (0) or one per y (1), 1..4 xs. */
static graft_value *op_gradients(gen *g) {
  graft_value *ys[3], *seeds[3], *xs[4], *grads[4];
  int n_y = 1 + (int)fz_pick(&g->r, 3), n_x = 1 + (int)fz_pick(&g->r, 4);
  int with_seeds = fz_pick(&g->r, 2);
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
  int n_x = 1 + (int)fz_pick(&g->r, 3), n_y = 1 + (int)fz_pick(&g->r, 3);
  unsigned m = fz_pick(&g->r, 3);
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
  if (fz_pick(&g->r, 2) == 0) y = graft_reduce_sum(g->t, y, 0, NULL, 0);
  int n_x = 1 + (int)fz_pick(&g->r, 3);
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
  return odd_statuses[fz_pick(&g->r, n)];
}

static graft_status fz_vjp(graft_trace *t, int n_x, graft_value *const *xs, graft_value *y,
                           graft_value *gy, graft_value **gxs, void *user);

/* custom_gradient: 0..3 xs (or a bad count), y an operand, vjp ours (or
 * NULL). */
static graft_value *op_custom(gen *g) {
  graft_value *xs[4];
  unsigned m = fz_pick(&g->r, 8);
  int n_x = m == 7 ? -1 : (int)(m % 4);
  for (int i = 0; i < n_x; i++) xs[i] = x_operand(g);
  graft_value *y = operand(g);
  graft_vjp_fn fn = m == 6 ? NULL : fz_vjp;
  graft_value *v = graft_custom_gradient(g->t, n_x, xs, y, fn, g);
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
 * the whole VJP (9). */
static graft_status fz_vjp(graft_trace *t, int n_x, graft_value *const *xs, graft_value *y,
                           graft_value *gy, graft_value **gxs, void *user) {
  gen *g = user;
  if (t != g->t) fz_die("a VJP ran with another trace than the one it was recorded in");
  if (n_x < 0 || n_x > 3) fz_die("a VJP got n_x = %d for a region of 0..3 inputs", n_x);
  if (g->recurse) {
    graft_value *tmp[3] = {NULL, NULL, NULL};
    graft_status st = graft_gradients(t, 1, &y, &gy, n_x, xs, GRAFT_UNCONNECTED_NONE, tmp);
    for (int i = 0; i < n_x; i++) gxs[i] = tmp[i];
    return st;
  }
  graft_status ret = GRAFT_OK;
  for (int i = 0; i < n_x; i++) {
    unsigned c = fz_pick(&g->r, 10);
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
    case 7: gxs[i] = stale(g, fz_u8(&g->r)); break;
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

/* ---- the callback ------------------------------------------------------- */

graft_status fz_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                      graft_value **out, void *user) {
  fz_trace_prog *p = user;
  gen g;
  memset(&g, 0, sizeof g);
  g.t = t;
  g.p = p;
  g.r = (fz_reader){p->data, p->size, p->body};
  memset(p->emitted, 0, sizeof p->emitted);
  if (n_out != p->n_out + p->n_extra)
    fz_die("the callback got n_out = %d, the function has %d", n_out, p->n_out + p->n_extra);
  for (int i = 0; i < n_in; i++) push(&g, in[i]);
  if (p->verbose) fprintf(stderr, "  trace: inputs%s\n", g.made);
  g.made[0] = 0;

  for (int k = 0; k < FZ_MAX_OPS; k++) {
    if (fz_eof(&g.r)) break;
    unsigned b = fz_u8(&g.r);
    if (b == 255) break;
    emit_op(&g, (int)(b % FZ_OP_COUNT));
  }
  for (int k = 0; k < p->n_out; k++) out[k] = operand(&g);
  if (p->verbose) fprintf(stderr, "  outputs:%s\n", g.args);
  for (int k = 0; k < p->n_extra; k++)
    out[p->n_out + k] = k < g.n_checked ? g.checked[k] : graft_scalar(t, GRAFT_F32, 0.0);
  return fz_u8(&g.r) % 4 == 3 ? rd_status(&g) : GRAFT_OK;
}
