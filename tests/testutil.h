/* Shared helpers for graft's cmocka tests: deterministic random data, a
 * one-shot "trace this and run it" call, comparisons, the per-file runtime
 * group, status / shape / value assertions and index arithmetic.  Include
 * after <cmocka.h>.
 *
 * The assertions that are functions report the caller's file and line (the
 * macro forwards __FILE__ / __LINE__), so a failure points at the check that
 * failed, not at this header. */
#ifndef GRAFT_TESTUTIL_H
#define GRAFT_TESTUTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graft.h"

/* xorshift64*: reproducible across platforms. */
typedef struct tu_rng {
  uint64_t s;
} tu_rng;

static inline uint64_t tu_next(tu_rng *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 2685821657736338717ull;
}
/* Uniform in [lo, hi). */
static inline double tu_uniform(tu_rng *r, double lo, double hi) {
  return lo + (hi - lo) * ((double)(tu_next(r) >> 11) * (1.0 / 9007199254740992.0));
}
static inline int64_t tu_int(tu_rng *r, int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)(tu_next(r) % (uint64_t)(hi - lo + 1));
}

/* A tensor of dtype dt filled with uniform values in [lo, hi) (i32: integers
 * in [lo, hi]).  Asserts on failure. */
static inline graft_tensor *tu_tensor_rand(tu_rng *r, graft_dtype dt, int rank,
                                           const int64_t *shape, double lo, double hi) {
  graft_tensor *t = NULL;
  assert_int_equal(graft_tensor_create(dt, rank, shape, &t), GRAFT_OK);
  int64_t n = graft_tensor_numel(t);
  void *d = graft_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    if (dt == GRAFT_F32) ((float *)d)[i] = (float)tu_uniform(r, lo, hi);
    else if (dt == GRAFT_F64) ((double *)d)[i] = tu_uniform(r, lo, hi);
    else ((int32_t *)d)[i] = (int32_t)tu_int(r, (int64_t)lo, (int64_t)hi);
  }
  return t;
}

/* Element i of t as a double. */
static inline double tu_get(const graft_tensor *t, int64_t i) {
  const void *d = graft_tensor_data(t);
  switch (graft_tensor_dtype(t)) {
  case GRAFT_F32: return ((const float *)d)[i];
  case GRAFT_F64: return ((const double *)d)[i];
  default: return ((const int32_t *)d)[i];
  }
}

/* For files that run the omp executor, at file scope.  ASan runs: the
 * OpenMP-task baseline makes GCC 12's libgomp leak its task-dependency
 * bookkeeping (allocated inside GOMP_task; reproducible without graft).
 * Suppress exactly that: graft allocates nothing under GOMP_task.  The full
 * unwinder is needed to see through libgomp, which has no frame pointers. */
#define TU_SUPPRESS_GOMP_TASK_LEAK()                                              \
  const char *__lsan_default_suppressions(void);                                  \
  const char *__asan_default_options(void);                                       \
  __attribute__((used)) const char *__lsan_default_suppressions(void) {           \
    return "leak:GOMP_task\n";                                                    \
  }                                                                               \
  __attribute__((used)) const char *__asan_default_options(void) {                \
    return "fast_unwind_on_malloc=0";                                             \
  }                                                                               \
  _Static_assert(1, "TU_SUPPRESS_GOMP_TASK_LEAK")

/* A runtime made from o; fails the test with the runtime's message
 * otherwise. */
static inline graft_runtime *tu_runtime_from(const graft_runtime_opts *o) {
  graft_runtime *rt = NULL;
  char msg[512] = "";
  graft_status st = graft_runtime_create_ex(o, &rt, msg, sizeof msg);
  if (st)
    fail_msg("runtime %s x%d: %s: %s", o->sched ? o->sched : "(default)", o->num_threads,
             graft_status_name(st), msg);
  return rt;
}

/* A runtime with the scheduler sched ("seq", "ws", "omp"), threads threads
 * and tile grain grain (0: the default); fails the test with the runtime's message otherwise. */
static inline graft_runtime *tu_runtime_of(const char *sched, int threads, int64_t grain) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = threads;
  o.sched = sched;
  o.grain = grain;
  return tu_runtime_from(&o);
}

/* Options of such a runtime with GRAFT_FUSION fusion ("on", "interp",
 * "off"), and the runtime. */
static inline graft_runtime_opts tu_opts_fused(const char *sched, int threads, int64_t grain,
                                               const char *fusion) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = threads;
  o.sched = sched;
  o.grain = grain;
  o.fusion = fusion;
  return o;
}

static inline graft_runtime *tu_runtime_fused(const char *sched, int threads, int64_t grain,
                                              const char *fusion) {
  graft_runtime_opts o = tu_opts_fused(sched, threads, grain, fusion);
  return tu_runtime_from(&o);
}

/* The runtime shared by a test file: 1 thread, sequential (deterministic). */
static inline graft_runtime *tu_runtime(void) { return tu_runtime_of("seq", 1, 0); }

/* Create a function from fn, call it once on in[] (outputs allocated by graft
 * into out[]), destroy it.  Returns the call's status; on failure copies the
 * message into msg (if not NULL, 512 bytes). */
static inline graft_status tu_run(graft_runtime *rt, graft_trace_fn fn, void *user,
                                  int n_in, graft_tensor *const *in, int n_out,
                                  graft_tensor **out, char *msg) {
  graft_function_desc d = {0};
  d.name = "test";
  d.trace = fn;
  d.user = user;
  d.n_inputs = n_in;
  d.n_outputs = n_out;
  graft_function *f = NULL;
  graft_status s = graft_function_create(rt, &d, &f);
  if (s != GRAFT_OK) return s;
  for (int i = 0; i < n_out; i++) out[i] = NULL;
  s = graft_function_call(f, n_in, in, n_out, out);
  if (msg) snprintf(msg, 512, "%s", graft_function_errmsg(f));
  graft_function_destroy(f);
  return s;
}

/* |a - b| <= atol + rtol * |b|, NaNs equal, infinities equal by sign. */
static inline int tu_close(double a, double b, double rtol, double atol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= atol + rtol * fabs(b);
}

/* Assert that t holds want[0..n) within tolerance; prints the first miss. */
#define tu_assert_close(t, want, n, rtol, atol)                                   \
  do {                                                                            \
    int64_t tu_n_ = (n);                                                          \
    assert_int_equal(graft_tensor_numel(t), tu_n_);                               \
    for (int64_t tu_i_ = 0; tu_i_ < tu_n_; tu_i_++) {                             \
      double tu_g_ = tu_get((t), tu_i_), tu_w_ = (want)[tu_i_];                   \
      if (!tu_close(tu_g_, tu_w_, (rtol), (atol))) {                              \
        fail_msg("element %lld: got %.17g want %.17g", (long long)tu_i_, tu_g_, tu_w_); \
      }                                                                           \
    }                                                                             \
  } while (0)

/* ---- small utilities --------------------------------------------------- */

/* Number of elements of an array (not a pointer). */
#define TU_N_OF(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__) || defined(__clang__)
#define TU_PRINTF_(f, a) __attribute__((format(printf, f, a)))
#else
#define TU_PRINTF_(f, a)
#endif

/* Print "ERROR: <formatted>" and fail the running test at file:line. */
static inline void tu_fail_at_(const char *file, int line, const char *fmt, ...) TU_PRINTF_(3, 4);
static inline void tu_fail_at_(const char *file, int line, const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  print_error("ERROR: %s\n", buf);
  _fail(file, line);
}

/* "ctx: " when ctx is set, "" otherwise: the prefix of a failure message. */
#define TU_CTX_(ctx) ((ctx) ? (ctx) : ""), ((ctx) ? ": " : "")

/* ---- the runtime of a test file ----------------------------------------- */

/* Defines `static graft_runtime *g_rt` and the cmocka group fixtures
 * tu_group_setup (g_rt = tu_runtime(): 1 thread, sequential) and
 * tu_group_teardown (destroys it).  Use once at file scope:
 * `TU_RUNTIME_GROUP();`.  A file with more shared state calls these from its
 * own fixtures. */
#define TU_RUNTIME_GROUP()                                                        \
  static graft_runtime *g_rt;                                                     \
  static inline int tu_group_setup(void **state) {                                \
    (void)state;                                                                  \
    g_rt = tu_runtime();                                                          \
    return 0;                                                                     \
  }                                                                               \
  static inline int tu_group_teardown(void **state) {                             \
    (void)state;                                                                  \
    graft_runtime_destroy(g_rt);                                                  \
    g_rt = NULL;                                                                  \
    return 0;                                                                     \
  }                                                                               \
  _Static_assert(1, "TU_RUNTIME_GROUP")

/* ---- statuses and calls -------------------------------------------------- */

/* got == want, else fail naming both statuses. */
#define tu_assert_status(got, want)                                               \
  do {                                                                            \
    graft_status as_g_ = (got), as_w_ = (want);                                   \
    if (as_g_ != as_w_)                                                           \
      fail_msg("status %s (%d), want %s (%d)", graft_status_name(as_g_), (int)as_g_, \
               graft_status_name(as_w_), (int)as_w_);                             \
  } while (0)

/* Call f and fail with its status and message unless it succeeds. */
#define tu_assert_call_ok(f, n_in, in, n_out, out)                                \
  do {                                                                            \
    graft_status ac_s_ = graft_function_call((f), (n_in), (in), (n_out), (out));  \
    if (ac_s_ != GRAFT_OK)                                                        \
      fail_msg("call failed: %s: %s", graft_status_name(ac_s_), graft_function_errmsg(f)); \
  } while (0)

/* st (the status of a tu_run, whose message is msg) is GRAFT_OK; ctx (may be
 * NULL) says which case ran. */
#define tu_assert_run_ok(st, ctx, msg) tu_assert_run_ok_((st), (ctx), (msg), __FILE__, __LINE__)
static inline void tu_assert_run_ok_(graft_status st, const char *ctx, const char *msg,
                                     const char *file, int line) {
  if (st != GRAFT_OK)
    tu_fail_at_(file, line, "%s%scall failed: status %s (%s)", TU_CTX_(ctx),
                graft_status_name(st), msg ? msg : "");
}

/* A tu_run that must fail: status want, no output allocated (out is the
 * output slot after the run), and a message that names op (unless op is
 * NULL).  ctx (may be NULL) says which case ran. */
#define tu_assert_run_fails(st, want, out, msg, op, ctx)                          \
  tu_assert_run_fails_((st), (want), (out), (msg), (op), (ctx), __FILE__, __LINE__)
static inline void tu_assert_run_fails_(graft_status st, graft_status want, const graft_tensor *out,
                                        const char *msg, const char *op, const char *ctx,
                                        const char *file, int line) {
  if (msg == NULL) msg = "";
  if (st != want)
    tu_fail_at_(file, line, "%s%sstatus %s, want %s (%s)", TU_CTX_(ctx), graft_status_name(st),
                graft_status_name(want), msg);
  if (out != NULL)
    tu_fail_at_(file, line, "%s%sfailed with %s but allocated an output", TU_CTX_(ctx),
                graft_status_name(st));
  if (op && !strstr(msg, op))
    tu_fail_at_(file, line, "%s%smessage \"%s\" does not name %s", TU_CTX_(ctx), msg, op);
}

/* A one-layer training step for optimizer tests: h = tanh(x w + b),
 * loss = mean((h - y)^2), then one step of opt over (w, b).  in: x, y;
 * out: the loss.  user: a tu_net. */
typedef struct tu_net {
  graft_module *root, *opt;
  graft_variable *w, *b;
} tu_net;

static inline graft_status tu_net_step(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                       graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  tu_net *m = (tu_net *)user;
  graft_value *w = graft_read(t, m->w), *b = graft_read(t, m->b);
  graft_value *h = graft_tanh(t, graft_add(t, graft_matmul(t, in[0], w, 0), b));
  graft_value *loss = graft_reduce_mean(t, graft_square(t, graft_sub(t, h, in[1])), 0, NULL, 0);
  graft_value *xs[2] = {w, b}, *gs[2];
  graft_status st = graft_gradients(t, 1, &loss, NULL, 2, xs, GRAFT_UNCONNECTED_ZERO, gs);
  if (!st) st = graft_optimizer_apply(t, m->opt, 2, gs);
  out[0] = loss;
  return st;
}

/* A function from a desc on rt; fails the test (with the status) otherwise. */
static inline graft_function *tu_function_create(graft_runtime *rt, const graft_function_desc *d) {
  graft_function *f = NULL;
  graft_status s = graft_function_create(rt, d, &f);
  if (s != GRAFT_OK)
    fail_msg("graft_function_create(\"%s\"): %s", d->name ? d->name : "(null)",
             graft_status_name(s));
  assert_non_null(f);
  return f;
}

/* A function named name tracing fn(user), n_in inputs, n_out outputs and the
 * signature sig (NULL: none). */
static inline graft_function *tu_function(graft_runtime *rt, const char *name, graft_trace_fn fn,
                                          void *user, int n_in, int n_out,
                                          const graft_signature *sig) {
  graft_function_desc d = {0};
  d.name = name;
  d.trace = fn;
  d.user = user;
  d.n_inputs = n_in;
  d.n_outputs = n_out;
  d.signature = sig;
  return tu_function_create(rt, &d);
}

/* Destroy out[0..n) and set the slots to NULL. */
static inline void tu_destroy_outs(graft_tensor **out, int n) {
  for (int i = 0; i < n; i++) {
    graft_tensor_destroy(out[i]);
    out[i] = NULL;
  }
}

/* ---- building tensors ------------------------------------------------------ */

/* Element i of t := v converted to t's dtype. */
static inline void tu_set(graft_tensor *t, int64_t i, double v) {
  void *d = graft_tensor_data(t);
  switch (graft_tensor_dtype(t)) {
  case GRAFT_F32: ((float *)d)[i] = (float)v; break;
  case GRAFT_F64: ((double *)d)[i] = v; break;
  default: ((int32_t *)d)[i] = (int32_t)v; break;
  }
}

/* A tensor of dtype dt holding vals[0..numel) converted to dt (vals NULL:
 * the data is left as graft_tensor_create made it).  Asserts on failure. */
static inline graft_tensor *tu_tensor_from(graft_dtype dt, int rank, const int64_t *shape,
                                           const double *vals) {
  graft_tensor *t = NULL;
  assert_int_equal(graft_tensor_create(dt, rank, shape, &t), GRAFT_OK);
  assert_non_null(t);
  if (vals)
    for (int64_t i = 0; i < graft_tensor_numel(t); i++) tu_set(t, i, vals[i]);
  return t;
}

/* msg contains needle once spaces are removed from msg (so "[2, 3]" and
 * "[2,3]" both match "[2,3]"; messages up to 1 KiB). */
static inline int tu_msg_has(const char *msg, const char *needle) {
  char flat[1024];
  size_t j = 0;
  for (size_t i = 0; msg[i] && j + 1 < sizeof flat; i++)
    if (msg[i] != ' ') flat[j++] = msg[i];
  flat[j] = '\0';
  return strstr(flat, needle) != NULL;
}

/* Fail unless msg contains sub exactly (tu_assert_msg_lacks: unless it does
 * not), printing both. */
#define tu_assert_msg_has(msg, sub)                                               \
  do {                                                                            \
    const char *am_m_ = (msg), *am_s_ = (sub);                                    \
    if (am_m_ == NULL) fail_msg("message is NULL (wanted \"%s\")", am_s_);        \
    if (strstr(am_m_, am_s_) == NULL)                                             \
      fail_msg("message \"%s\" does not contain \"%s\"", am_m_, am_s_);           \
  } while (0)
#define tu_assert_msg_lacks(msg, sub)                                             \
  do {                                                                            \
    const char *am_m_ = (msg), *am_s_ = (sub);                                    \
    if (am_m_ != NULL && strstr(am_m_, am_s_) != NULL)                            \
      fail_msg("message \"%s\" contains \"%s\"", am_m_, am_s_);                   \
  } while (0)

/* ---- index arithmetic (row-major) ------------------------------------------ */

/* Product of d[0..rank) (1 for rank 0). */
static inline int64_t tu_numel(int rank, const int64_t *d) {
  int64_t p = 1;
  for (int i = 0; i < rank; i++) p *= d[i];
  return p;
}

/* Multi-index idx[0..rank) of flat position flat in shape (a zero-size dim
 * gives index 0). */
static inline void tu_unravel(int64_t flat, int rank, const int64_t *shape, int64_t *idx) {
  for (int i = rank - 1; i >= 0; i--) {
    idx[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
}

/* Flat position of multi-index idx[0..rank) in shape. */
static inline int64_t tu_ravel(const int64_t *idx, int rank, const int64_t *shape) {
  int64_t f = 0;
  for (int i = 0; i < rank; i++) f = f * shape[i] + idx[i];
  return f;
}

/* Flat index into a tensor of shape in (rank in_rank) of the element that
 * NumPy broadcasting reads for flat position out_flat of shape out (rank
 * out_rank >= in_rank; dims right-aligned, a size-1 dim of in repeats). */
static inline int64_t tu_bcast_src(int out_rank, const int64_t *out, int64_t out_flat,
                                   int in_rank, const int64_t *in) {
  int64_t idx[GRAFT_MAX_RANK];
  tu_unravel(out_flat, out_rank, out, idx);
  int64_t f = 0;
  for (int j = 0; j < in_rank; j++) f = f * in[j] + (in[j] == 1 ? 0 : idx[j + out_rank - in_rank]);
  return f;
}

/* ---- shapes and values ------------------------------------------------------ */

/* "[d0,d1,...]" into buf. */
static inline const char *tu_fmt_shape_(char *buf, size_t len, int rank, const int64_t *d) {
  size_t w = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && d && w < len; i++)
    w += (size_t)snprintf(buf + w, len - w, i ? ",%lld" : "%lld", (long long)d[i]);
  if (w < len) snprintf(buf + w, len - w, "]");
  return buf;
}

/* t is not NULL and has rank `rank` and dims[0..rank); ctx (may be NULL)
 * says which case ran.  The message shows both shapes. */
#define tu_assert_shape(t, rank, dims, ctx)                                       \
  tu_assert_shape_((t), (rank), (dims), (ctx), __FILE__, __LINE__)
static inline void tu_assert_shape_(const graft_tensor *t, int rank, const int64_t *dims,
                                    const char *ctx, const char *file, int line) {
  if (t == NULL) {
    tu_fail_at_(file, line, "%s%stensor is NULL", TU_CTX_(ctx));
    return;
  }
  int r = graft_tensor_rank(t);
  const int64_t *s = graft_tensor_shape(t);
  char got[160], want[160];
  if (r != rank) {
    tu_fail_at_(file, line, "%s%srank %d, want %d (shape %s, want %s)", TU_CTX_(ctx), r, rank,
                tu_fmt_shape_(got, sizeof got, r, s), tu_fmt_shape_(want, sizeof want, rank, dims));
    return;
  }
  for (int i = 0; i < rank; i++)
    if (s[i] != dims[i])
      tu_fail_at_(file, line, "%s%sdim %d is %lld, want %lld (shape %s, want %s)", TU_CTX_(ctx), i,
                  (long long)s[i], (long long)dims[i], tu_fmt_shape_(got, sizeof got, r, s),
                  tu_fmt_shape_(want, sizeof want, rank, dims));
}

/* t is not NULL, has dtype dt and the shape (rank, dims). */
#define tu_assert_tensor(t, dt, rank, dims, ctx)                                  \
  tu_assert_tensor_((t), (dt), (rank), (dims), (ctx), __FILE__, __LINE__)
static inline void tu_assert_tensor_(const graft_tensor *t, graft_dtype dt, int rank,
                                     const int64_t *dims, const char *ctx, const char *file,
                                     int line) {
  if (t != NULL && graft_tensor_dtype(t) != dt)
    tu_fail_at_(file, line, "%s%sdtype %s, want %s", TU_CTX_(ctx),
                graft_dtype_name(graft_tensor_dtype(t)), graft_dtype_name(dt));
  tu_assert_shape_(t, rank, dims, ctx, file, line);
}

/* t holds n elements and element i is within rtol of want[i] (relative
 * only: atol 0; NaNs equal, infinities equal by sign).  Names the first
 * miss. */
#define tu_assert_values(t, want, n, rtol, ctx)                                   \
  tu_assert_values_((t), (want), (n), (rtol), (ctx), __FILE__, __LINE__)
static inline void tu_assert_values_(const graft_tensor *t, const double *want, int64_t n,
                                     double rtol, const char *ctx, const char *file, int line) {
  if (graft_tensor_numel(t) != n)
    tu_fail_at_(file, line, "%s%s%lld elements, want %lld", TU_CTX_(ctx),
                (long long)graft_tensor_numel(t), (long long)n);
  for (int64_t i = 0; i < n; i++) {
    double g = tu_get(t, i);
    if (!tu_close(g, want[i], rtol, 0.0))
      tu_fail_at_(file, line, "%s%selement %lld: got %.17g want %.17g", TU_CTX_(ctx), (long long)i,
                  g, want[i]);
  }
}

/* ---- environment ----------------------------------------------------------- */

/* The positive integer in environment variable name (a case count such as
 * GRAFT_TEST_DAGS), or dflt when it is unset, empty or not positive. */
static inline int64_t tu_env_count(const char *name, int64_t dflt) {
  const char *e = getenv(name);
  if (!e || !*e) return dflt;
  long long v = atoll(e);
  return v > 0 ? v : dflt;
}


/* A new tensor holding t's dtype, shape and bytes.  Asserts on failure. */
static inline graft_tensor *tu_copy(const graft_tensor *t) {
  graft_tensor *c = NULL;
  assert_int_equal(graft_tensor_create(graft_tensor_dtype(t), graft_tensor_rank(t),
                                       graft_tensor_shape(t), &c),
                   GRAFT_OK);
  memcpy(graft_tensor_data(c), graft_tensor_data(t),
         (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t)));
  return c;
}

/* a and b are non-NULL with one dtype, one shape and the same bytes. */
static inline int tu_bitwise_equal(const graft_tensor *a, const graft_tensor *b) {
  return a && b && graft_tensor_dtype(a) == graft_tensor_dtype(b) &&
         graft_tensor_rank(a) == graft_tensor_rank(b) &&
         !memcmp(graft_tensor_shape(a), graft_tensor_shape(b),
                 sizeof(int64_t) * (size_t)graft_tensor_rank(a)) &&
         !memcmp(graft_tensor_data(a), graft_tensor_data(b),
                 (size_t)graft_tensor_numel(a) * graft_dtype_size(graft_tensor_dtype(a)));
}

#endif /* GRAFT_TESTUTIL_H */
