/* The `trace` fuzz target: one input is one traced function, called under
 * the seq and the ws scheduler with the same inputs, one of the two with
 * elementwise fusion on and the other with it off (GRAFT_FUSION), so the
 * comparison also holds fused plans to the bits of unfused ones.
 *
 * Input layout: a header (below), then the op stream of trace_gen.c.
 *   flags      bit 0 a declared signature, 1 a second call, 2 handles of a
 *              dead trace, 3 stats and DOT after each call, 4 a call on a
 *              function whose runtime was destroyed, 5 variable 0 destroyed
 *              between the calls, 6 a wrong-arity call first, 7 a plan
 *              cache of one
 *   n_in n_vars n_out            counts (mod 5, 4, 5)
 *   grain memory partition topology bind threads trace_path describe
 *                                runtime options, each an index into a
 *                                table below (topology 8: built from the
 *                                bytes that follow)
 *   data_seed data_mode          input and variable data; data_mode bit 2
 *                                also sets variable 0 between the calls
 *                                (bit 3: from a tensor of a wrong shape);
 *                                bit 4: seq fuses and ws does not (else
 *                                ws fuses and seq does not); bit 5: the
 *                                fused side with GRAFT_FUSION=interp (else
 *                                on: groups compiled where graft can)
 *   per input   dtype (low 2 bits; bits 2-3: created, wrapped, wrapped
 *               misaligned), rank (mod 10), dims, signature dtype and dim
 *               modes, dims for the second call
 *   per var     dtype, rank, dims, init mode
 *   per output  how the second call passes it (NULL, a tensor of the right
 *               shape, of a wrong shape, of a wrong dtype)
 *
 * Findings (fz_die): a status outside graft_status or GRAFT_EINTERNAL; seq
 * and ws (one fused, one not) disagreeing on a status (unless the budget
 * refused memory to one of them) or on any output or variable bit; plan
 * stats counting a fused group of fewer than two ops, or any on the
 * unfused side; a failed call that changed a
 * variable or a caller's output tensor, allocated into out[], or left no
 * message; a call that changed an input; whatever the sanitizers report.
 */
#include <limits.h>
#include <math.h>
#include <stdalign.h>
#include <string.h>

#include "budget.h"
#include "fuzz.h"
#include "reader.h"
#include "trace_gen.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define DIMS_CAP 12
#define MAX_SMALL 4096 /* elements of an input or variable the harness fills */
#define N_SLOTS (FZ_MAX_OUT + FZ_EXTRA_OUT)

enum {
  F_SIGNATURE = 1 << 0,
  F_TWO_CALLS = 1 << 1,
  F_STALE = 1 << 2,
  F_STATS = 1 << 3,
  F_ORPHAN = 1 << 4,
  F_DROP_VAR = 1 << 5,
  F_ARITY = 1 << 6,
  F_CACHE_ONE = 1 << 7,
};

static unsigned avoid;
static int verbose; /* GRAFT_FUZZ_VERBOSE: each call's status and message on stderr */
static alignas(64) unsigned char blob[FZ_BLOB_BYTES];
/* Op kinds emitted in a trace whose call then succeeded under both
 * schedulers with equal results (fz_target_check). */
static uint8_t covered[FZ_OP_COUNT];

/* ---- small helpers ------------------------------------------------------ */

/* A status must be one graft_status names, and never GRAFT_EINTERNAL (a
 * bug graft found in itself: the plan checker, an invariant); msg, if not
 * NULL, is the failure's message. */
static void check_status_msg(const char *what, graft_status st, const char *msg) {
  if ((int)st > 0 || (int)st < (int)GRAFT_EINTERNAL)
    fz_die("%s returned %d, not a graft_status (%s)", what, (int)st, msg ? msg : "");
  if (st == GRAFT_EINTERNAL) fz_die("%s returned GRAFT_EINTERNAL (%s)", what, msg ? msg : "");
}

static void check_status(const char *what, graft_status st) { check_status_msg(what, st, NULL); }

/* A call outside a trace: a documented status and, on failure, a
 * graft_last_errmsg() that names the call (status.h). */
static void check_call(const char *api, graft_status st) {
  check_status_msg(api, st, graft_last_errmsg());
  const char *msg = graft_last_errmsg();
  if (st != GRAFT_OK && (!msg || !strstr(msg, api)))
    fz_die("%s failed (%s) but graft_last_errmsg() is '%s'", api, graft_status_name(st),
           msg ? msg : "(NULL)");
}

static int64_t numel_of(int rank, const int64_t *d) { /* -1: negative or past INT64_MAX */
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (d[i] < 0) return -1;
    if (d[i] == 0) n = 0;
  }
  for (int i = 0; i < rank && n; i++)
    if (__builtin_mul_overflow(n, d[i], &n)) return -1;
  return n;
}

static int small_shape(int rank, const int64_t *d) {
  int64_t n = numel_of(rank, d);
  return rank >= 0 && rank <= GRAFT_MAX_RANK && n >= 0 && n <= MAX_SMALL;
}

/* Small even with its 0 dims taken as 1: graft must be able to make it (a
 * zero-element shape whose other dims are huge may be refused). */
static int modest_shape(int rank, const int64_t *d) {
  int64_t n = 1;
  if (!small_shape(rank, d)) return 0;
  for (int i = 0; i < rank; i++)
    if (__builtin_mul_overflow(n, d[i] ? d[i] : 1, &n) || n > MAX_SMALL) return 0;
  return 1;
}

static size_t tensor_bytes(const graft_tensor *t) {
  return (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t));
}

/* memcmp / memcpy for buffers that are NULL when empty (zero-element
 * tensors, shapes of rank 0). */
static int bytes_equal(const void *a, const void *b, size_t n) { return !n || !memcmp(a, b, n); }

/* Equal bits, except that two NaNs are equal whatever their payload and
 * sign: which NaN operand an operation passes on when both are NaN is the
 * hardware's and the compiler's choice (x86 takes the first operand, and a
 * compiler may swap the operands of a commutative add or mul), so the same
 * kernel in another loop (a fused group's, a fast path's) may pass on the
 * other one.  Every other value, signed zeros and infinities included, is
 * compared bit for bit. */
static int values_equal(const void *a, const void *b, size_t n, graft_dtype dt) {
  if (bytes_equal(a, b, n)) return 1;
  if (dt == GRAFT_F32) {
    const float *x = a, *y = b;
    for (size_t i = 0; i < n / sizeof *x; i++)
      if (memcmp(&x[i], &y[i], sizeof *x) && !(isnan(x[i]) && isnan(y[i]))) return 0;
    return 1;
  }
  if (dt == GRAFT_F64) {
    const double *x = a, *y = b;
    for (size_t i = 0; i < n / sizeof *x; i++)
      if (memcmp(&x[i], &y[i], sizeof *x) && !(isnan(x[i]) && isnan(y[i]))) return 0;
    return 1;
  }
  return 0;
}
static void bytes_copy(void *to, const void *from, size_t n) {
  if (n) memcpy(to, from, n);
}

/* Input and variable data: uniform in [-2, 2) (i32: 0..3), with special
 * values (NaN, infinities, -0, denormals, i32 extremes) in data_mode. */
static void fill_data(void *data, graft_dtype dt, int64_t n, uint64_t *seed, unsigned mode) {
  static const double special[] = {NAN, -NAN, INFINITY, -INFINITY, -0.0, 1e-310, 1e30, -1e30, 0.0, 1.0, 1e-40, 3.0};
  static const int32_t ispecial[] = {INT32_MAX, INT32_MIN, -1, 1 << 30, 5, 100};
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = fz_mix(seed);
    int sp = (mode & 1) && (r & 15) == 0;
    double v = sp ? special[(r >> 4) % COUNT(special)] : -2.0 + 4.0 * (double)(r >> 11) * 0x1p-53;
    if (dt == GRAFT_F32) ((float *)data)[i] = (float)v;
    else if (dt == GRAFT_F64) ((double *)data)[i] = v;
    else ((int32_t *)data)[i] = (mode & 2) && (r & 15) == 0 ? ispecial[(r >> 4) % COUNT(ispecial)] : (int32_t)(r >> 62);
  }
}

/* ---- the header ---------------------------------------------------------- */

typedef struct tensor_spec {
  graft_dtype dt;
  unsigned storage; /* 0, 3 created; 1 wrapped; 2 wrapped misaligned */
  int rank;
  int64_t d[DIMS_CAP], alt[DIMS_CAP];
  graft_dtype sig_dt;
  int64_t sig[DIMS_CAP];
  unsigned init; /* variables: bit 0 zeros (init NULL), bit 1 trainable */
} tensor_spec;

typedef struct header {
  unsigned flags;
  int n_in, n_vars, n_out;
  graft_runtime_opts opts;
  char topology[160];
  unsigned describe;
  uint64_t seed;
  unsigned data_mode;
  tensor_spec in[FZ_MAX_IN], var[FZ_MAX_VARS];
  unsigned out_mode[FZ_MAX_OUT];
} header;

static graft_dtype dtype_of(unsigned b) {
  return b % 4 == 3 ? (graft_dtype)(3 + (int)(b / 16)) : (graft_dtype)(b % 4);
}

/* A synthetic topology from the stream: 1..4 levels of 1..4 objects each,
 * now and then (unless avoided) a level of hundreds or a bad count. */
static void topology_from(fz_reader *r, char *buf, size_t len) {
  static const char *const levels[] = {"pack", "numa", "l3", "l2", "l1", "core", "pu"};
  static const int big[] = {1000, 100, 65536, 0};
  size_t o = 0;
  int n = 1 + (int)fz_pick(r, 4);
  buf[0] = 0;
  for (int i = 0; i < n && o < len; i++) {
    const char *name = levels[fz_pick(r, COUNT(levels))];
    unsigned b = fz_u8(r);
    int count = b >= 252 && !(avoid & FZ_AVOID_TOPO) ? big[b - 252] : 1 + (int)(b % 4);
    o += (size_t)snprintf(buf + o, len - o, "%s%s:%d", i ? " " : "", name, count);
  }
}

static void decode_opts(fz_reader *r, header *h) {
  static const int64_t grains[] = {0, 1, 7, 64, 1000, 32768, -1, INT64_MAX};
  static const char *const memory[] = {NULL, "parallel", "lanes:1", "lanes:2", "lanes:3",
                                       "lanes:0", "lanes:4097", "lanes:x", ""};
  static const char *const partition[] = {NULL, "auto", "none", "package", "numa",
                                          "l3", "l2", "core", "bogus"};
  static const char *const topology[] = {NULL,
                                         "pack:2 core:2 pu:1",
                                         "pack:1 core:3 pu:1",
                                         "numa:2 core:2 pu:2",
                                         "pack:2 numa:2 l3:1 core:2 pu:1",
                                         "core:4 pu:1",
                                         "",
                                         "garbage:2"};
  static const int bind[] = {0, 1, -1, 7};
  static const int threads[] = {3, 2, 4, 1, 0, -1};
  static const char *const trace_path[] = {NULL, "/dev/null", "/nonexistent-graft-fuzz/trace.json"};
  graft_runtime_opts *o = &h->opts;
  graft_runtime_opts_init(o);
  o->grain = grains[fz_pick(r, COUNT(grains))];
  o->memory = memory[fz_pick(r, COUNT(memory))];
  o->partition = partition[fz_pick(r, COUNT(partition))];
  unsigned t = fz_pick(r, COUNT(topology) + 1);
  if (t < COUNT(topology)) {
    o->topology = topology[t];
  } else {
    topology_from(r, h->topology, sizeof h->topology);
    o->topology = h->topology;
  }
  o->bind = bind[fz_pick(r, COUNT(bind))];
  o->num_threads = threads[fz_pick(r, COUNT(threads))];
  o->trace_path = trace_path[fz_pick(r, COUNT(trace_path))];
  h->describe = fz_u8(r);
}

static void decode_tensor(fz_reader *r, tensor_spec *s, int is_input) {
  unsigned b = fz_u8(r);
  s->dt = dtype_of(b);
  s->storage = (b / 4) % 4;
  if ((avoid & FZ_AVOID_API) && s->storage == 2) s->storage = 1;
  s->rank = (int)fz_pick(r, 10);
  for (int i = 0; i < s->rank; i++) s->d[i] = fz_dim_decode(r, avoid);
  if (!is_input) {
    s->init = fz_u8(r);
    return;
  }
  unsigned m = fz_pick(r, 4);
  s->sig_dt = m == 1 ? (graft_dtype)((s->dt + 1) % 3) : m == 2 ? (graft_dtype)7 : s->dt;
  for (int i = 0; i < s->rank; i++) {
    static const int64_t bad[] = {-5, INT64_MIN, INT64_MAX};
    unsigned k = fz_u8(r);
    switch (k % 4) {
    case 0: s->sig[i] = s->d[i]; break;
    case 1: s->sig[i] = -1; break;
    case 2: s->sig[i] = s->d[i] < INT64_MAX ? s->d[i] + 1 : 0; break;
    default: s->sig[i] = bad[(k / 4) % 3]; break;
    }
  }
  for (int i = 0; i < s->rank; i++) {
    unsigned k = fz_u8(r);
    s->alt[i] = k == 0 ? s->d[i] : (int64_t)(k & 15);
  }
}

static void log_tensor(const char *what, int i, const tensor_spec *t, int is_input) {
  fprintf(stderr, "  %s%d: %s (dtype %d) rank %d [", what, i, graft_dtype_name(t->dt), (int)t->dt, t->rank);
  for (int k = 0; k < t->rank; k++) fprintf(stderr, "%s%lld", k ? "," : "", (long long)t->d[k]);
  fprintf(stderr, "]");
  if (is_input) {
    fprintf(stderr, " storage %u, signature %s [", t->storage, graft_dtype_name(t->sig_dt));
    for (int k = 0; k < t->rank; k++) fprintf(stderr, "%s%lld", k ? "," : "", (long long)t->sig[k]);
    fprintf(stderr, "], second call [");
    for (int k = 0; k < t->rank; k++) fprintf(stderr, "%s%lld", k ? "," : "", (long long)t->alt[k]);
    fprintf(stderr, "]");
  } else {
    fprintf(stderr, " init %u", t->init);
  }
  fputc('\n', stderr);
}

static void log_header(const header *h) {
  const graft_runtime_opts *o = &h->opts;
  fprintf(stderr, "  flags 0x%02x, %d inputs, %d variables, %d outputs, fused: %s\n", h->flags,
          h->n_in, h->n_vars, h->n_out, h->data_mode & 16 ? "seq" : "ws");
  fprintf(stderr, "  runtime: threads %d grain %lld memory %s partition %s topology %s bind %d trace %s\n",
          o->num_threads, (long long)o->grain, o->memory ? o->memory : "-",
          o->partition ? o->partition : "-", o->topology ? o->topology : "-", o->bind,
          o->trace_path ? o->trace_path : "-");
  for (int i = 0; i < h->n_in; i++) log_tensor("in", i, &h->in[i], 1);
  for (int i = 0; i < h->n_vars; i++) log_tensor("var", i, &h->var[i], 0);
}

static void decode_header(fz_reader *r, header *h) {
  memset(h, 0, sizeof *h);
  h->flags = fz_u8(r);
  h->n_in = (int)fz_pick(r, FZ_MAX_IN + 1);
  h->n_vars = (int)fz_pick(r, FZ_MAX_VARS + 1);
  h->n_out = (int)fz_pick(r, FZ_MAX_OUT + 1);
  decode_opts(r, h);
  h->seed = fz_u8(r) * 0x9e3779b97f4a7c15ull;
  h->data_mode = fz_u8(r);
  for (int i = 0; i < h->n_in; i++) decode_tensor(r, &h->in[i], 1);
  for (int i = 0; i < h->n_vars; i++) decode_tensor(r, &h->var[i], 0);
  for (int i = 0; i < h->n_out; i++) h->out_mode[i] = fz_pick(r, 4);
  if (avoid & FZ_AVOID_STALE) h->flags &= ~(unsigned)F_STALE;
  if (avoid & FZ_AVOID_ORPHAN) h->flags &= ~(unsigned)F_ORPHAN;
  if (verbose) log_header(h);
}

/* ---- runtimes (cached: creating one loads a topology) ------------------- */

typedef struct rt_entry {
  char key[512];
  graft_runtime *rt;
  uint64_t used;
} rt_entry;

static rt_entry rt_cache[16];
static uint64_t exec_count;

static void opts_key(char *buf, size_t len, const graft_runtime_opts *o, const char *sched,
                     const char *fusion) {
  snprintf(buf, len, "%s|%s|%d|%lld|%s|%s|%s|%d|%s", sched, fusion, o->num_threads,
           (long long)o->grain, o->memory ? o->memory : "-", o->partition ? o->partition : "-",
           o->topology ? o->topology : "-", o->bind, o->trace_path ? o->trace_path : "-");
}

/* The runtime for opts under sched with fusion "on", "interp" or "off", made or
 * from the cache; NULL with the status and message of the failure
 * otherwise. */
static graft_runtime *runtime_get(const graft_runtime_opts *opts, const char *sched,
                                  const char *fusion, graft_status *st, char *msg, size_t len) {
  char key[512];
  opts_key(key, sizeof key, opts, sched, fusion);
  rt_entry *victim = NULL;
  for (size_t i = 0; i < COUNT(rt_cache); i++) {
    rt_entry *e = &rt_cache[i];
    if (e->rt && !strcmp(e->key, key)) {
      e->used = exec_count;
      *st = GRAFT_OK;
      return e->rt;
    }
    if (e->used < exec_count && (!victim || !e->rt || (victim->rt && e->used < victim->used))) victim = e;
  }
  graft_runtime_opts o = *opts;
  o.sched = sched;
  o.fusion = fusion;
  graft_runtime *rt = NULL;
  msg[0] = 0;
  *st = graft_runtime_create_ex(&o, &rt, msg, len);
  check_call("graft_runtime_create", *st);
  if ((*st == GRAFT_OK) != (rt != NULL)) fz_die("graft_runtime_create: status and handle disagree");
  if (!rt || !victim) return rt; /* no free slot: the caller destroys it */
  graft_runtime_destroy(victim->rt);
  snprintf(victim->key, sizeof victim->key, "%s", key);
  victim->rt = rt;
  victim->used = exec_count;
  return rt;
}

static int cached(const graft_runtime *rt) {
  for (size_t i = 0; i < COUNT(rt_cache); i++)
    if (rt_cache[i].rt == rt) return 1;
  return 0;
}

static void check_describe(graft_runtime *rt, unsigned b) {
  char buf[96];
  size_t len = b % sizeof buf;
  if (b >= 250 && !(avoid & FZ_AVOID_API)) {
    (void)graft_runtime_describe(rt, NULL, b); /* must not write through NULL */
    return;
  }
  memset(buf, 'x', sizeof buf);
  int n = graft_runtime_describe(rt, buf, len);
  if (n < 0) fz_die("graft_runtime_describe returned %d", n);
  if (len && (!memchr(buf, 0, len) || strlen(buf) != ((size_t)n < len ? (size_t)n : len - 1)))
    fz_die("graft_runtime_describe(len %zu) returned %d but wrote '%.*s'", len, n, (int)len, buf);
  if (len < sizeof buf && buf[len] != 'x') fz_die("graft_runtime_describe wrote past len %zu", len);
}

/* ---- tensors -------------------------------------------------------------- */

typedef struct input {
  graft_tensor *t;
  void *mem; /* wrapped storage (freed after the tensor) */
  void *copy;
} input;

/* A tensor for spec with dims d: created or wrapped and filled when small;
 * an attempt that must not crash otherwise (the input is then NULL). */
static void make_input(input *in, const tensor_spec *s, const int64_t *d, uint64_t *seed,
                       unsigned mode) {
  memset(in, 0, sizeof *in);
  graft_status st;
  if (!small_shape(s->rank, d)) {
    st = graft_tensor_create(s->dt, s->rank, d, &in->t);
    check_call("graft_tensor_create", st);
    if ((st == GRAFT_OK) != (in->t != NULL)) fz_die("graft_tensor_create: status and handle disagree");
    graft_tensor_destroy(in->t);
    in->t = NULL;
    return;
  }
  size_t es = graft_dtype_size(s->dt), n = (size_t)numel_of(s->rank, d);
  if (s->storage == 1 || s->storage == 2) {
    in->mem = aligned_alloc(64, (n * (es ? es : 4) + 64 + 63) / 64 * 64);
    if (!in->mem) fz_die("harness: out of memory");
    void *at = (unsigned char *)in->mem + (s->storage == 2 ? 1 : 0);
    st = graft_tensor_wrap(s->dt, s->rank, d, n ? at : NULL, &in->t);
    check_call("graft_tensor_wrap", st);
    if (st == GRAFT_OK && s->storage == 2 && n && es > 1)
      fz_die("graft_tensor_wrap accepted memory misaligned for %s", graft_dtype_name(s->dt));
  } else {
    st = graft_tensor_create(s->dt, s->rank, d, &in->t);
    check_call("graft_tensor_create", st);
  }
  if (st != GRAFT_OK) {
    if (in->t) fz_die("a tensor call failed but set its handle");
    if (es && modest_shape(s->rank, d) && !(s->storage == 2 && n))
      fz_die("creating a small %s tensor failed: %s", graft_dtype_name(s->dt), graft_status_name(st));
    return;
  }
  fill_data(graft_tensor_data(in->t), s->dt, (int64_t)n, seed, mode);
  in->copy = malloc(n * es + 1);
  if (!in->copy) fz_die("harness: out of memory");
  bytes_copy(in->copy, graft_tensor_data(in->t), n * es);
}

static void free_input(input *in) {
  graft_tensor_destroy(in->t);
  free(in->mem);
  free(in->copy);
  memset(in, 0, sizeof *in);
}

static void check_input_kept(const input *in, int i, const char *who) {
  if (in->t && !bytes_equal(graft_tensor_data(in->t), in->copy, tensor_bytes(in->t)))
    fz_die("%s: a call changed input %d", who, i);
}

/* ---- the two sides ------------------------------------------------------- */

typedef struct side {
  const char *name;
  int fused;       /* its runtime fuses elementwise groups: 1 compiling
                      them where it can, 2 interpreting them */
  graft_runtime *rt;
  fz_trace_prog prog;
  graft_function *f;
  graft_tensor *out[N_SLOTS];
  graft_status st;
  int64_t refused;
} side;

/* An optimizer over the f32/f64 variables whose init has bit 2 set: the
 * first such variable's init picks the kind (bits 3-5), clipping (bit 6)
 * and weight decay (bit 7).  Its slots and step are variables too, so the
 * sides compare them and a failed call must leave them as they were. */
static void make_optimizer(side *s, const header *h) {
  s->prog.opt = NULL;
  s->prog.n_opt = 0;
  unsigned init = 0;
  for (int i = 0; i < h->n_vars; i++) {
    graft_variable *v = s->prog.vars[i];
    graft_dtype dt = h->var[i].dt;
    if (!v || !(h->var[i].init & 4) || (dt != GRAFT_F32 && dt != GRAFT_F64)) continue;
    if (!s->prog.n_opt) init = h->var[i].init;
    s->prog.opt_vars[s->prog.n_opt++] = v;
  }
  if (!s->prog.n_opt) return;
  graft_optimizer_desc d = {.kind = (graft_optimizer_kind)((init >> 3) % 5),
                            .lr = 0.1,
                            .clip_norm = init & 64 ? 1.0 : 0.0,
                            .weight_decay = init & 128 ? 0.01 : 0.0};
  graft_status st = graft_optimizer_create(NULL, "opt", &d, s->prog.n_opt, s->prog.opt_vars, &s->prog.opt);
  check_call("graft_optimizer_create", st);
  if ((st == GRAFT_OK) != (s->prog.opt != NULL)) fz_die("graft_optimizer_create: status and handle disagree");
  if (st != GRAFT_OK) s->prog.n_opt = 0;
}

static void make_vars(side *s, const header *h, const void *const *init) {
  for (int i = 0; i < h->n_vars; i++) {
    const tensor_spec *v = &h->var[i];
    char name[16];
    snprintf(name, sizeof name, "v%d", i);
    int small = small_shape(v->rank, v->d);
    graft_status st = graft_variable_create(NULL, name, v->dt, v->rank, v->d,
                                            small && !(v->init & 1) ? init[i] : NULL,
                                            v->init & 2 ? GRAFT_VAR_TRAINABLE : 0, &s->prog.vars[i]);
    check_call("graft_variable_create", st);
    if ((st == GRAFT_OK) != (s->prog.vars[i] != NULL))
      fz_die("graft_variable_create: status and handle disagree");
    if (st == GRAFT_OK && !small) { /* too big to use; creating it had to be safe */
      graft_variable_destroy(s->prog.vars[i]);
      s->prog.vars[i] = NULL;
    }
  }
  s->prog.n_vars = h->n_vars;
  make_optimizer(s, h);
}

/* Every variable a call may change: the program's, then the optimizer's
 * (its tracked variables again, its slots, its step); NULL where absent. */
#define MAX_STATE (FZ_MAX_VARS + 3 * FZ_MAX_VARS + 1)
static int state_vars(const side *s, graft_variable **out) {
  int n = s->prog.n_vars;
  for (int i = 0; i < n; i++) out[i] = s->prog.vars[i];
  if (!s->prog.opt) return n;
  int64_t k = 0;
  graft_status st = graft_module_variables(s->prog.opt, MAX_STATE - n, out + n, &k);
  check_call("graft_module_variables", st);
  if (st != GRAFT_OK || k > MAX_STATE - n) fz_die("graft_module_variables: %s, %lld variables",
                                                  graft_status_name(st), (long long)k);
  return n + (int)k;
}

/* The variables' bytes, to tell whether a call changed them. */
typedef struct var_snap {
  void *data[MAX_STATE];
  size_t bytes[MAX_STATE];
} var_snap;

static void snap_vars(const side *s, var_snap *v) {
  memset(v, 0, sizeof *v);
  graft_variable *vars[MAX_STATE];
  int n = state_vars(s, vars);
  for (int i = 0; i < n; i++) {
    if (!vars[i]) continue;
    const graft_tensor *t = graft_variable_value(vars[i]);
    v->bytes[i] = tensor_bytes(t);
    v->data[i] = malloc(v->bytes[i] + 1);
    if (!v->data[i]) fz_die("harness: out of memory");
    bytes_copy(v->data[i], graft_tensor_data(t), v->bytes[i]);
  }
}

static int vars_equal(const side *s, const var_snap *v) {
  graft_variable *vars[MAX_STATE];
  int n = state_vars(s, vars);
  for (int i = 0; i < n; i++) {
    const graft_tensor *t = vars[i] ? graft_variable_value(vars[i]) : NULL;
    if (t && !values_equal(graft_tensor_data(t), v->data[i], v->bytes[i], graft_tensor_dtype(t)))
      return 0;
  }
  return 1;
}

static void free_snap(var_snap *v) {
  for (int i = 0; i < MAX_STATE; i++) free(v->data[i]);
}

/* What one call passes: inputs and the caller's output tensors. */
typedef struct call_args {
  int n_in, n_slots;
  graft_tensor *in[FZ_MAX_IN + 1];
  const input *inputs; /* n_inputs harness inputs behind in[] */
  int n_inputs;
  graft_tensor *given[N_SLOTS]; /* the caller's output tensors, or NULL */
} call_args;

/* One call on s: the status, and every promise about a failed call. */
static void call_side(side *s, const call_args *a, const char *what) {
  var_snap before;
  snap_vars(s, &before);
  for (int k = 0; k < N_SLOTS; k++) s->out[k] = a->given[k];
  int64_t r0 = fz_budget_refusals();
  s->st = graft_function_call(s->f, a->n_in, a->in, a->n_slots, s->out);
  s->refused = fz_budget_refusals() - r0;
  char who[64];
  snprintf(who, sizeof who, "%s call (%s)", what, s->name);
  check_status_msg(who, s->st, graft_function_errmsg(s->f));
  if (s->st != GRAFT_OK && strcmp(graft_last_errmsg(), graft_function_errmsg(s->f)))
    fz_die("%s failed but graft_last_errmsg() '%s' is not the function's '%s'", who,
           graft_last_errmsg(), graft_function_errmsg(s->f));
  for (int i = 0; i < a->n_inputs; i++) check_input_kept(&a->inputs[i], i, who);
  if (s->st == GRAFT_OK) {
    for (int k = 0; k < a->n_slots; k++) {
      if (!s->out[k]) fz_die("%s succeeded without output %d", who, k);
      if (a->given[k] && s->out[k] != a->given[k]) fz_die("%s replaced the caller's output %d", who, k);
    }
  } else {
    const char *msg = graft_function_errmsg(s->f);
    if (!msg || !*msg) fz_die("%s failed (%s) with no message", who, graft_status_name(s->st));
    for (int k = 0; k < N_SLOTS; k++) {
      if (s->out[k] != a->given[k]) fz_die("%s failed but changed out[%d]", who, k);
      const graft_tensor *t = a->given[k];
      const unsigned char *p = t ? graft_tensor_data(t) : NULL;
      for (size_t b = 0; t && b < tensor_bytes(t); b++)
        if (p[b] != 0xA5) fz_die("%s failed (%s) but wrote the caller's output %d", who,
                                 graft_status_name(s->st), k);
    }
    if (!vars_equal(s, &before))
      fz_die("%s failed (%s: %s) but changed a variable", who, graft_status_name(s->st), msg);
  }
  free_snap(&before);
}

/* Free what a call left: graft's output tensors and the caller's. */
static void release_call(side *s, call_args *a) {
  for (int k = 0; k < N_SLOTS; k++) {
    if (s->out[k] != a->given[k]) graft_tensor_destroy(s->out[k]);
    graft_tensor_destroy(a->given[k]);
    s->out[k] = a->given[k] = NULL;
  }
}

static int tensors_equal(const graft_tensor *a, const graft_tensor *b) {
  int rank = graft_tensor_rank(a);
  return graft_tensor_dtype(a) == graft_tensor_dtype(b) && rank == graft_tensor_rank(b) &&
         bytes_equal(graft_tensor_shape(a), graft_tensor_shape(b), (size_t)rank * sizeof(int64_t)) &&
         values_equal(graft_tensor_data(a), graft_tensor_data(b), tensor_bytes(a), graft_tensor_dtype(a));
}

/* Compare the sides after a call; returns 0 when they may have diverged
 * (the budget refused memory to one of them), so later calls are not
 * compared. */
static int compare(side *s, int n_out, const char *what) {
  if (verbose)
    for (int k = 0; k < 2; k++)
      fprintf(stderr, "  %s call (%s): %s%s%s\n", what, s[k].name, graft_status_name(s[k].st),
              s[k].st ? ": " : "", s[k].st ? graft_function_errmsg(s[k].f) : "");
  if (s[0].st != s[1].st) {
    if (s[0].refused || s[1].refused) return 0;
    fz_die("%s call: %s returned %s (%s), %s returned %s (%s)", what, s[0].name,
           graft_status_name(s[0].st), graft_function_errmsg(s[0].f), s[1].name,
           graft_status_name(s[1].st), graft_function_errmsg(s[1].f));
  }
  if (s[0].st != GRAFT_OK) return 1;
  for (int k = 0; k < n_out; k++)
    if (!tensors_equal(s[0].out[k], s[1].out[k]))
      fz_die("%s call: output %d differs between %s and %s", what, k, s[0].name, s[1].name);
  graft_variable *va[MAX_STATE], *vb[MAX_STATE];
  int na = state_vars(&s[0], va), nb = state_vars(&s[1], vb);
  if (na != nb) fz_die("%s call: %d variables on %s, %d on %s", what, na, s[0].name, nb, s[1].name);
  for (int i = 0; i < na; i++) {
    graft_variable *a = va[i], *b = vb[i];
    if (a && b && !tensors_equal(graft_variable_value(a), graft_variable_value(b)))
      fz_die("%s call: variable %d differs between %s and %s", what, i, s[0].name, s[1].name);
  }
  for (int op = 0; op < FZ_OP_COUNT; op++) covered[op] |= s[0].prog.emitted[op];
  return 1;
}

static void check_stats(side *s) {
  graft_plan_stats st;
  graft_status rc = graft_function_stats(s->f, &st);
  check_status("graft_function_stats", rc);
  if (s->st == GRAFT_OK && rc != GRAFT_OK) fz_die("graft_function_stats failed after a successful call");
  if (rc == GRAFT_OK && (st.live_nodes < 0 || st.live_nodes > st.nodes || st.arena_bytes < 0 ||
                         st.tiles < 0 || st.naive_bytes < 0))
    fz_die("graft_function_stats: nodes %lld, live %lld, tiles %lld, arena %lld, naive %lld",
           (long long)st.nodes, (long long)st.live_nodes, (long long)st.tiles,
           (long long)st.arena_bytes, (long long)st.naive_bytes);
  /* A group holds two ops at least; an unfused plan has none; an
   * interpreting one compiles none. */
  if (rc == GRAFT_OK && (st.fused_groups < 0 || st.fused_ops < 2 * st.fused_groups ||
                         st.fused_dropped < 0 || (!s->fused && st.fused_ops + st.fused_dropped) ||
                         st.fused_compiled < 0 || st.fused_compiled > st.fused_groups ||
                         (s->fused != 1 && st.fused_compiled)))
    fz_die("graft_function_stats on %s: %lld fused groups (%lld compiled) of %lld ops, %lld values dropped",
           s->name, (long long)st.fused_groups, (long long)st.fused_compiled, (long long)st.fused_ops,
           (long long)st.fused_dropped);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) fz_die("harness: open_memstream failed");
  check_status("graft_function_write_dot", graft_function_write_dot(s->f, f));
  fclose(f);
  free(text);
}

/* The caller's output tensors of the second call, per out_mode: NULL (0),
 * right shape (1), a wrong shape (2), a wrong dtype (3); each filled with
 * 0xA5 so a failed call that wrote them shows. */
static void prepare_outputs(const header *h, const graft_tensor *const *first, call_args *a) {
  memset(a->given, 0, sizeof a->given);
  for (int k = 0; k < h->n_out; k++) {
    unsigned m = h->out_mode[k];
    if (!m) continue;
    int64_t d[GRAFT_MAX_RANK + 1] = {1};
    int rank = 1;
    graft_dtype dt = GRAFT_F32;
    if (first[k]) {
      rank = graft_tensor_rank(first[k]);
      dt = graft_tensor_dtype(first[k]);
      bytes_copy(d, graft_tensor_shape(first[k]), (size_t)rank * sizeof *d);
    }
    if (m == 2 && rank) d[rank - 1] += 1;
    if (m == 2 && !rank) d[rank++] = 2;
    if (m == 3) dt = dt == GRAFT_F32 ? GRAFT_F64 : GRAFT_F32;
    if (!modest_shape(rank, d)) continue;
    if (graft_tensor_create(dt, rank, d, &a->given[k]) != GRAFT_OK)
      fz_die("creating a small output tensor failed");
    if (tensor_bytes(a->given[k])) memset(graft_tensor_data(a->given[k]), 0xA5, tensor_bytes(a->given[k]));
  }
}

/* graft_variable_set on variable 0 of both sides, between the calls, from
 * a tensor of its shape (data_mode bit 3: one more element on the last
 * dim, or rank 1 for a scalar, which must be refused). */
static void set_var0(side *s, const header *h, uint64_t *seed) {
  if (!s[0].prog.vars[0]) return;
  const graft_tensor *v = graft_variable_value(s[0].prog.vars[0]);
  int rank = graft_tensor_rank(v);
  int64_t d[GRAFT_MAX_RANK + 1] = {1};
  bytes_copy(d, graft_tensor_shape(v), (size_t)rank * sizeof *d);
  if (h->data_mode & 8) {
    if (rank) d[rank - 1] += 1;
    else rank = 1;
  }
  graft_tensor *src = NULL;
  if (!modest_shape(rank, d)) return;
  if (graft_tensor_create(graft_tensor_dtype(v), rank, d, &src) != GRAFT_OK)
    fz_die("creating a small tensor failed");
  fill_data(graft_tensor_data(src), graft_tensor_dtype(v), graft_tensor_numel(src), seed, h->data_mode);
  graft_status st[2];
  for (int k = 0; k < 2; k++) {
    var_snap before;
    snap_vars(&s[k], &before);
    st[k] = graft_variable_set(s[k].prog.vars[0], src);
    check_call("graft_variable_set", st[k]);
    if (st[k] != GRAFT_OK && !vars_equal(&s[k], &before)) fz_die("a failed graft_variable_set changed it");
    free_snap(&before);
  }
  if (st[0] != st[1]) fz_die("graft_variable_set: %s on one side, %s on the other",
                             graft_status_name(st[0]), graft_status_name(st[1]));
  if ((h->data_mode & 8) && st[0] == GRAFT_OK) fz_die("graft_variable_set accepted a wrong shape");
  graft_tensor_destroy(src);
}

/* ---- dead traces and orphaned functions ---------------------------------- */

typedef struct stale_ctx {
  graft_value *v[FZ_MAX_STALE];
  int fail;
} stale_ctx;

static graft_status stale_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out;
  stale_ctx *c = user;
  int64_t three = 3;
  c->v[0] = graft_scalar(t, GRAFT_F32, 2.0);
  c->v[1] = graft_fill(t, GRAFT_F32, 1, &three, 1.0);
  c->v[2] = graft_add(t, c->v[0], c->v[1]);
  /* The poison of a failed op, when this trace fails. */
  c->v[3] = c->fail ? graft_add(t, c->v[2], NULL) : graft_exp(t, c->v[2]);
  out[0] = c->v[2];
  return GRAFT_OK;
}

/* Values of a trace that ended (its function destroyed, or kept but its
 * trace over): every op must refuse them (GRAFT_EMISUSE), not read them. */
static graft_function *make_stale(graft_runtime *rt, unsigned b, fz_trace_prog *p) {
  static stale_ctx c;
  memset(&c, 0, sizeof c);
  c.fail = b & 1;
  graft_function_desc d = {.name = "dead", .trace = stale_trace, .user = &c, .n_outputs = 1};
  graft_function *f = NULL;
  if (graft_function_create(rt, &d, &f) != GRAFT_OK) fz_die("creating the dead-trace function failed");
  graft_tensor *out = NULL;
  graft_status st = graft_function_call(f, 0, NULL, 1, &out);
  check_status("dead-trace call", st);
  graft_tensor_destroy(out);
  for (int i = 0; i < FZ_MAX_STALE; i++) p->stale[i] = c.v[i];
  p->n_stale = FZ_MAX_STALE;
  if (b & 2) return f; /* kept alive: its values belong to another trace */
  graft_function_destroy(f);
  return NULL;
}

static graft_status orphan_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)in, (void)n_out, (void)user;
  out[0] = graft_scalar(t, GRAFT_F64, 1.0);
  return GRAFT_OK;
}

/* A function whose runtime the user destroyed first (misuse that graft
 * detects): the call must not touch freed memory. */
static void check_orphan(void) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.sched = "seq";
  o.num_threads = 1;
  o.topology = "pack:1 core:1 pu:1";
  graft_runtime *rt = NULL;
  if (graft_runtime_create(&o, &rt) != GRAFT_OK) fz_die("creating a small runtime failed");
  graft_function_desc d = {.name = "orphan", .trace = orphan_trace, .n_outputs = 1};
  graft_function *f = NULL;
  if (graft_function_create(rt, &d, &f) != GRAFT_OK) fz_die("creating a function failed");
  graft_runtime_destroy(rt);
  graft_tensor *out = NULL;
  graft_status st = graft_function_call(f, 0, NULL, 1, &out);
  check_status("a call after graft_runtime_destroy", st);
  graft_tensor_destroy(out);
  graft_function_destroy(f);
}

/* ---- one input ------------------------------------------------------------- */

static void make_function(side *s, const header *h) {
  graft_dtype sig_dt[FZ_MAX_IN];
  int ranks[FZ_MAX_IN];
  const int64_t *shapes[FZ_MAX_IN];
  for (int i = 0; i < h->n_in; i++) {
    sig_dt[i] = h->in[i].sig_dt;
    ranks[i] = h->in[i].rank;
    shapes[i] = h->in[i].sig;
  }
  graft_signature sig = {h->n_in, sig_dt, ranks, shapes};
  graft_function_desc d = {.name = "fuzz",
                           .trace = fz_trace,
                           .user = &s->prog,
                           .n_inputs = h->n_in,
                           .n_outputs = h->n_out ? h->n_out + s->prog.n_extra : 0,
                           .signature = (h->flags & F_SIGNATURE) ? &sig : NULL,
                           .cache_capacity = (h->flags & F_CACHE_ONE) ? 1 : 0};
  graft_status st = graft_function_create(s->rt, &d, &s->f);
  check_call("graft_function_create", st);
  if ((st == GRAFT_OK) != (s->f != NULL)) fz_die("graft_function_create: status and handle disagree");
}

/* Every op kind must be covered, except TRACE_FAIL, whose call fails by
 * design (the failure paths are what every other check covers). */
int fz_target_check(void) {
  int missing = 0;
  for (int op = 0; op < FZ_OP_COUNT; op++) {
    if (covered[op] || op == FZ_OP_TRACE_FAIL) continue;
    fprintf(stderr, "corpus: no input emits %s in a call that succeeds under both schedulers\n",
            fz_op_name(op));
    missing++;
  }
  return missing != 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (fz_avoid_parse(getenv("GRAFT_FUZZ_AVOID"), &avoid)) exit(2);
  verbose = getenv("GRAFT_FUZZ_VERBOSE") != NULL;
  /* OpenMP workers that spin 200 ms after each call (libomp's default)
   * take the CPU from the next input on a small machine: sleep at once. */
  setenv("KMP_BLOCKTIME", "0", 0);
  uint64_t seed = 0x5eedull;
  for (size_t i = 0; i + 8 <= sizeof blob; i += 8) {
    uint64_t r = fz_mix(&seed);
    double v = (r & 7) == 0 ? (double)(int64_t)r : -2.0 + 4.0 * (double)(r >> 11) * 0x1p-53;
    memcpy(blob + i, &v, 8);
  }
  fz_budget_install();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_reader r = {data, size, 0};
  header h;
  decode_header(&r, &h);
  exec_count++;

  /* One side fused, the other not: equal bits then also mean fused plans
   * compute what unfused ones do. */
  const int seq_fused = (h.data_mode & 16) != 0, interp = (h.data_mode & 32) != 0;
  side s[2] = {{.name = seq_fused ? "seq (fused)" : "seq (unfused)", .fused = seq_fused ? 1 + interp : 0},
               {.name = seq_fused ? "ws (unfused)" : "ws (fused)", .fused = seq_fused ? 0 : 1 + interp}};
  char msg[2][512];
  graft_status rst[2];
  /* (bit 5: the fused side interprets its groups rather than compiling
   * them) */
  const char *fused = interp ? "interp" : "on";
  s[0].rt = runtime_get(&h.opts, "seq", seq_fused ? fused : "off", &rst[0], msg[0], sizeof msg[0]);
  s[1].rt = runtime_get(&h.opts, "ws", seq_fused ? "off" : fused, &rst[1], msg[1], sizeof msg[1]);
  if (rst[0] != rst[1])
    fz_die("graft_runtime_create: seq %s (%s), ws %s (%s)", graft_status_name(rst[0]), msg[0],
           graft_status_name(rst[1]), msg[1]);
  if (!s[0].rt) return 0;
  check_describe(s[1].rt, h.describe);

  /* Inputs (shared) and the variables' initial data (both sides). */
  uint64_t seed = h.seed;
  input in[FZ_MAX_IN], in2[FZ_MAX_IN];
  call_args a1 = {.n_in = h.n_in, .inputs = in, .n_inputs = h.n_in};
  call_args a2[2] = {{.n_in = h.n_in, .inputs = in2, .n_inputs = h.n_in}};
  for (int i = 0; i < h.n_in; i++) {
    make_input(&in[i], &h.in[i], h.in[i].d, &seed, h.data_mode);
    make_input(&in2[i], &h.in[i], h.in[i].alt, &seed, h.data_mode);
    a1.in[i] = in[i].t;
    a2[0].in[i] = in2[i].t;
  }
  a2[1] = a2[0];
  void *init[FZ_MAX_VARS] = {NULL};
  for (int i = 0; i < h.n_vars; i++) {
    const tensor_spec *v = &h.var[i];
    if (!small_shape(v->rank, v->d) || !graft_dtype_size(v->dt)) continue;
    int64_t n = numel_of(v->rank, v->d);
    init[i] = malloc((size_t)n * graft_dtype_size(v->dt) + 1);
    if (!init[i]) fz_die("harness: out of memory");
    fill_data(init[i], v->dt, n, &seed, h.data_mode);
  }

  graft_function *dead = NULL;
  fz_trace_prog base = {.data = data, .size = size, .body = r.pos, .avoid = avoid, .blob = blob,
                        .n_out = h.n_out};
  if (h.flags & F_STALE) dead = make_stale(s[0].rt, fz_u8(&r), &base);
  base.body = r.pos;
  if (h.flags & F_ORPHAN) check_orphan();

  for (int k = 0; k < 2; k++) {
    s[k].prog = base;
    /* ws always outputs the values of fallible ops (a label check) too, so
     * a check that pruning dropped on seq shows as a status mismatch. */
    s[k].prog.n_extra = h.n_out && (k == 1 || (avoid & FZ_AVOID_PRUNE)) ? FZ_EXTRA_OUT : 0;
    s[k].prog.verbose = verbose && k == 0;
    make_vars(&s[k], &h, (const void *const *)init);
  }
  for (int i = 0; i < h.n_vars; i++)
    if ((s[0].prog.vars[i] != NULL) != (s[1].prog.vars[i] != NULL))
      fz_die("graft_variable_create succeeded for one side only");
  for (int k = 0; k < 2; k++) make_function(&s[k], &h);
  if ((s[0].f != NULL) != (s[1].f != NULL)) fz_die("graft_function_create succeeded for one side only");

  int comparable = s[0].f != NULL;
  if (comparable && (h.flags & F_ARITY)) {
    for (int k = 0; k < 2; k++) {
      call_args bad = a1;
      bad.n_in = h.n_in + 1;
      bad.n_slots = h.n_out + s[k].prog.n_extra;
      call_side(&s[k], &bad, "wrong-arity");
      if (s[k].st == GRAFT_OK) fz_die("a call with %d inputs for %d succeeded", bad.n_in, h.n_in);
      release_call(&s[k], &bad);
    }
  }
  graft_tensor *first[N_SLOTS] = {NULL};
  if (comparable) {
    for (int k = 0; k < 2; k++) {
      call_args a = a1;
      a.n_slots = h.n_out + s[k].prog.n_extra;
      call_side(&s[k], &a, "first");
      if (h.flags & F_STATS) check_stats(&s[k]);
    }
    comparable = compare(s, h.n_out, "first");
    for (int k = 0; k < h.n_out; k++) { /* shapes for the second call's outputs */
      const graft_tensor *o = s[0].out[k];
      if (o && modest_shape(graft_tensor_rank(o), graft_tensor_shape(o)) &&
          graft_tensor_create(graft_tensor_dtype(o), graft_tensor_rank(o), graft_tensor_shape(o),
                              &first[k]) != GRAFT_OK)
        fz_die("creating a small tensor failed");
    }
    for (int k = 0; k < 2; k++) release_call(&s[k], &a1);
  }
  if (comparable && (h.flags & F_DROP_VAR) && h.n_vars) {
    for (int k = 0; k < 2; k++) {
      graft_variable_destroy(s[k].prog.vars[0]);
      s[k].prog.vars[0] = NULL;
    }
  }
  if (comparable && (h.data_mode & 4) && h.n_vars) set_var0(s, &h, &seed);
  if (comparable && (h.flags & F_TWO_CALLS)) {
    for (int k = 0; k < 2; k++) {
      prepare_outputs(&h, (const graft_tensor *const *)first, &a2[k]);
      a2[k].n_slots = h.n_out + s[k].prog.n_extra;
      call_side(&s[k], &a2[k], "second");
      if (h.flags & F_STATS) check_stats(&s[k]);
    }
    compare(s, h.n_out, "second");
    for (int k = 0; k < 2; k++) release_call(&s[k], &a2[k]);
  }

  for (int k = 0; k < N_SLOTS; k++) graft_tensor_destroy(first[k]);
  for (int k = 0; k < 2; k++) {
    graft_function_destroy(s[k].f);
    graft_module_destroy(s[k].prog.opt);
    for (int i = 0; i < h.n_vars; i++) graft_variable_destroy(s[k].prog.vars[i]);
    if (!cached(s[k].rt)) graft_runtime_destroy(s[k].rt);
  }
  graft_function_destroy(dead);
  for (int i = 0; i < h.n_in; i++) {
    free_input(&in[i]);
    free_input(&in2[i]);
  }
  for (int i = 0; i < h.n_vars; i++) free(init[i]);
  return 0;
}
