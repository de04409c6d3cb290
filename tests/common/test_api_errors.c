/* Refusals of the API outside traces: every one returns its status and
 * leaves a message in graft_last_errmsg that names the call, the argument,
 * its value and what was expected.  Covers tensors (misaligned wraps per
 * dtype, huge shapes), variables, function create / call / stats / DOT,
 * runtime options (each named by where it came from, opts field or
 * variable, with its accepted range, at the range's ends), the size limits
 * on synthetic topologies (checked before hwloc builds anything), and
 * graft_runtime_describe without a buffer.  The message is per thread: two
 * threads failing at once each read their own. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/config.h"
#include "testutil.h"

/* A non-NULL pointer that graft must overwrite with NULL on failure. */
static char g_sentinel_byte;
#define SENTINEL ((void *)&g_sentinel_byte)

/* ---- helpers ------------------------------------------------------------ */

/* Leave a known message, so a check cannot pass on a stale one. */
static void poison_last_error(void) {
  graft_tensor *t = NULL;
  assert_int_equal(graft_tensor_create(GRAFT_F32, -77, NULL, &t), GRAFT_EINVAL);
  assert_non_null(strstr(graft_last_errmsg(), "-77"));
}

static void expect_msg_(const char *msg, const char *const *subs, const char *what,
                        const char *file, int line) {
  for (int i = 0; subs[i]; i++)
    if (!strstr(msg, subs[i]))
      tu_fail_at_(file, line, "%s: message \"%s\" does not contain \"%s\"", what, msg, subs[i]);
}

static void expect_fail_(graft_status got, graft_status want, const char *const *subs,
                         const char *what, const char *file, int line) {
  if (got != want)
    tu_fail_at_(file, line, "%s: status %s, want %s (message \"%s\")", what,
                graft_status_name(got), graft_status_name(want), graft_last_errmsg());
  expect_msg_(graft_last_errmsg(), subs, what, file, line);
}

/* call fails with want and leaves a message holding every string listed. */
#define expect_fail(call, want, ...)                                                      \
  do {                                                                                    \
    poison_last_error();                                                                  \
    graft_status ef_st_ = (call);                                                         \
    expect_fail_(ef_st_, (want), (const char *const[]){__VA_ARGS__, NULL}, #call, __FILE__, \
                 __LINE__);                                                               \
  } while (0)

#define expect_msg(msg, ...) \
  expect_msg_((msg), (const char *const[]){__VA_ARGS__, NULL}, #msg, __FILE__, __LINE__)

/* Set (value non-NULL) or unset var for one case; restore with env_restore. */
typedef struct saved_env {
  const char *var;
  char *old;
} saved_env;

static saved_env env_set(const char *var, const char *value) {
  saved_env s = {var, NULL};
  const char *o = getenv(var);
  if (o) s.old = strdup(o);
  if (value)
    assert_int_equal(setenv(var, value, 1), 0);
  else
    unsetenv(var);
  return s;
}

static void env_restore(saved_env s) {
  if (s.old) {
    setenv(s.var, s.old, 1);
    free(s.old);
  } else {
    unsetenv(s.var);
  }
}

/* graft_runtime_create(o) with var=value (NULL: unset) for the call. */
static graft_status create_with_env(const graft_runtime_opts *o, const char *var, const char *value,
                                    graft_runtime **rt) {
  saved_env s = env_set(var, value);
  *rt = SENTINEL;
  graft_status st = graft_runtime_create(o, rt);
  env_restore(s);
  return st;
}

/* A small synthetic topology that is not this machine (no binding). */
static graft_runtime_opts small_opts(void) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.topology = "pack:1 pu:2";
  o.sched = "ws";
  return o;
}

static graft_status add_self(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_add(t, in[0], in[0]);
  return GRAFT_OK;
}

static graft_function_desc add_desc(void) {
  graft_function_desc d = {0};
  d.name = "adder";
  d.trace = add_self;
  d.n_inputs = 1;
  d.n_outputs = 1;
  return d;
}

/* ---- graft_last_errmsg ---------------------------------------------------- */

typedef struct fresh_thread {
  const char *msg;
  int was_empty;
} fresh_thread;

static void *read_fresh(void *arg) {
  fresh_thread *r = arg;
  r->msg = graft_last_errmsg();
  r->was_empty = r->msg != NULL && r->msg[0] == '\0';
  return NULL;
}

static void test_graft_last_errmsg__empty_on_a_new_thread(void **state) {
  (void)state;
  poison_last_error(); /* this thread has failed; a new one has not */
  fresh_thread r = {NULL, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, read_fresh, &r), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_non_null(r.msg);
  assert_true(r.was_empty);
}

static void test_graft_last_errmsg__kept_by_success_and_by_reading(void **state) {
  (void)state;
  const int64_t s[] = {2};
  graft_tensor *t = NULL;
  expect_fail(graft_tensor_create(GRAFT_F32, 9, s, &t), GRAFT_EINVAL, "graft_tensor_create",
              "rank 9", "0..8");
  char before[512];
  snprintf(before, sizeof before, "%s", graft_last_errmsg());
  assert_string_equal(graft_last_errmsg(), before); /* reading does not clear it */
  assert_int_equal(graft_tensor_create(GRAFT_F32, 1, s, &t), GRAFT_OK);
  graft_tensor_destroy(t);
  graft_runtime *rt = NULL;
  graft_runtime_opts o = small_opts();
  assert_int_equal(graft_runtime_create(&o, &rt), GRAFT_OK);
  graft_runtime_destroy(rt);
  assert_string_equal(graft_last_errmsg(), before); /* successes leave it, like errno */
}

/* Two threads fail differently at the same time, wait for each other, then
 * read: each sees its own message. */
typedef struct racer {
  pthread_barrier_t *barrier;
  int which;
  graft_status st;
  char msg[512];
} racer;

static void *fail_then_read(void *arg) {
  racer *r = arg;
  if (r->which == 0) {
    const int64_t s[] = {3, -5};
    graft_tensor *t = NULL;
    r->st = graft_tensor_create(GRAFT_F64, 2, s, &t);
  } else {
    graft_function_desc d = add_desc();
    d.n_outputs = 0;
    graft_function *f = NULL;
    r->st = graft_function_create((graft_runtime *)SENTINEL, &d, &f);
  }
  pthread_barrier_wait(r->barrier);
  snprintf(r->msg, sizeof r->msg, "%s", graft_last_errmsg());
  return NULL;
}

static void test_graft_last_errmsg__per_thread(void **state) {
  (void)state;
  poison_last_error();
  char mine[512];
  snprintf(mine, sizeof mine, "%s", graft_last_errmsg());
  for (int round = 0; round < 20; round++) {
    pthread_barrier_t b;
    assert_int_equal(pthread_barrier_init(&b, NULL, 2), 0);
    racer r[2] = {{&b, 0, GRAFT_OK, ""}, {&b, 1, GRAFT_OK, ""}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, fail_then_read, &r[i]), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&b);
    tu_assert_status(r[0].st, GRAFT_EINVAL);
    tu_assert_status(r[1].st, GRAFT_EINVAL);
    expect_msg(r[0].msg, "graft_tensor_create", "shape[1] is -5", ">= 0");
    expect_msg(r[1].msg, "graft_function_create('adder')", "n_outputs is 0", ">= 1");
    assert_null(strstr(r[0].msg, "graft_function_create"));
    assert_null(strstr(r[1].msg, "graft_tensor_create"));
  }
  assert_string_equal(graft_last_errmsg(), mine); /* the main thread's is untouched */
}

/* ---- tensors ---------------------------------------------------------------- */

static void test_graft_tensor_create__refusals_name_argument(void **state) {
  (void)state;
  const int64_t s[] = {2, 3};
  graft_tensor *t = SENTINEL;
  expect_fail(graft_tensor_create(GRAFT_F32, 2, s, NULL), GRAFT_EINVAL, "graft_tensor_create",
              "out is NULL");
  expect_fail(graft_tensor_create((graft_dtype)7, 2, s, &t), GRAFT_EDTYPE, "graft_tensor_create",
              "dtype 7", "GRAFT_F32");
  assert_null(t);
  t = SENTINEL;
  expect_fail(graft_tensor_create(GRAFT_F32, -1, s, &t), GRAFT_EINVAL, "rank -1", "0..8");
  assert_null(t);
  expect_fail(graft_tensor_create(GRAFT_F32, 2, NULL, &t), GRAFT_EINVAL, "graft_tensor_create",
              "shape is NULL", "rank 2");
  const int64_t neg[] = {4, -2};
  expect_fail(graft_tensor_create(GRAFT_I32, 2, neg, &t), GRAFT_EINVAL, "graft_tensor_create",
              "shape[1] is -2", "expected every dim >= 0");
}

static void test_graft_tensor_create__huge_shapes_refused_with_size(void **state) {
  (void)state;
  graft_tensor *t = SENTINEL;
  /* 2^80 elements: the count overflows int64. */
  const int64_t over[] = {INT64_C(1) << 40, INT64_C(1) << 40};
  expect_fail(graft_tensor_create(GRAFT_F64, 2, over, &t), GRAFT_EINVAL, "graft_tensor_create",
              "[1099511627776,1099511627776]", "overflows");
  assert_null(t);
  /* 2^60 f32 elements fit int64 but not graft's per-value limit. */
  const int64_t big[] = {INT64_C(1) << 30, INT64_C(1) << 30};
  t = SENTINEL;
  expect_fail(graft_tensor_create(GRAFT_F32, 2, big, &t), GRAFT_ENOMEM, "graft_tensor_create",
              "f32[1073741824,1073741824]", "2^48");
  assert_null(t);
  t = SENTINEL;
  expect_fail(graft_tensor_wrap(GRAFT_F32, 2, big, &g_sentinel_byte, &t), GRAFT_ENOMEM,
              "graft_tensor_wrap", "2^48");
  assert_null(t);
  /* One rule for zero elements: a 0 dim empties the value, and its other
   * dims must fit as if it were full (kernels form strides from them), so
   * [INT64_MAX, 0] and [INT64_MAX, 2, 0] are refused alike, and an empty
   * value whose other dims fit is accepted. */
  const int64_t z2[] = {INT64_MAX, 0}, z3[] = {INT64_MAX, 2, 0};
  const int64_t *zs[] = {z2, z3};
  for (int i = 0; i < 2; i++) {
    t = SENTINEL;
    expect_fail(graft_tensor_create(GRAFT_F64, 2 + i, zs[i], &t), GRAFT_EINVAL,
                "graft_tensor_create", "9223372036854775807", "a 0 dim empties the value");
    assert_null(t);
  }
  const int64_t ok[] = {INT64_C(1) << 20, 0, INT64_C(1) << 20};
  t = NULL;
  tu_assert_status(graft_tensor_create(GRAFT_F64, 3, ok, &t), GRAFT_OK);
  assert_int_equal(graft_tensor_numel(t), 0);
  graft_tensor_destroy(t);
}

static void test_graft_tensor_wrap__misaligned_per_dtype(void **state) {
  (void)state;
  static _Alignas(64) unsigned char buf[256];
  const int64_t s[] = {4};
  static const struct {
    graft_dtype dt;
    size_t align;
    const char *name;
  } cases[] = {{GRAFT_F32, _Alignof(float), "f32"},
               {GRAFT_F64, _Alignof(double), "f64"},
               {GRAFT_I32, _Alignof(int32_t), "i32"}};
  for (size_t c = 0; c < TU_N_OF(cases); c++) {
    char want[64];
    snprintf(want, sizeof want, "multiple of %zu", cases[c].align);
    for (size_t off = 0; off <= 2 * cases[c].align; off++) {
      graft_tensor *t = SENTINEL;
      if (off % cases[c].align == 0) {
        tu_assert_status(graft_tensor_wrap(cases[c].dt, 1, s, buf + off, &t), GRAFT_OK);
        assert_ptr_equal(graft_tensor_data(t), buf + off);
        graft_tensor_destroy(t);
      } else {
        expect_fail(graft_tensor_wrap(cases[c].dt, 1, s, buf + off, &t), GRAFT_EINVAL,
                    "graft_tensor_wrap", "not aligned", cases[c].name, want);
        assert_null(t);
      }
    }
  }
  /* The rule is on the pointer, even for zero elements; NULL is fine there. */
  const int64_t z[] = {0};
  graft_tensor *t = SENTINEL;
  expect_fail(graft_tensor_wrap(GRAFT_F64, 1, z, buf + 1, &t), GRAFT_EINVAL, "not aligned");
  assert_null(t);
  tu_assert_status(graft_tensor_wrap(GRAFT_F64, 1, z, NULL, &t), GRAFT_OK);
  graft_tensor_destroy(t);
  t = SENTINEL;
  expect_fail(graft_tensor_wrap(GRAFT_F32, 1, s, NULL, &t), GRAFT_EINVAL, "graft_tensor_wrap",
              "data is NULL", "f32[4]", "4 elements");
  assert_null(t);
}

/* ---- variables -------------------------------------------------------------- */

static void test_graft_variable_create__refusals_name_argument(void **state) {
  (void)state;
  const int64_t s[] = {3};
  graft_variable *v = SENTINEL;
  expect_fail(graft_variable_create(NULL, "w", GRAFT_F32, 1, s, NULL, 0, NULL), GRAFT_EINVAL,
              "graft_variable_create", "out is NULL");
  graft_module *owner = NULL;
  tu_assert_status(graft_module_create(NULL, "owner", &owner), GRAFT_OK);
  expect_fail(graft_variable_create(owner, "w.x", GRAFT_F32, 1, s, NULL, 0, &v), GRAFT_EINVAL,
              "graft_variable_create", "name 'w.x' is not a C identifier");
  assert_null(v);
  graft_module_destroy(owner);
  v = SENTINEL;
  v = SENTINEL;
  expect_fail(graft_variable_create(NULL, NULL, GRAFT_F32, 1, s, NULL, 0, &v), GRAFT_EINVAL,
              "graft_variable_create", "name is NULL");
  assert_null(v);
  v = SENTINEL;
  expect_fail(graft_variable_create(NULL, "w", GRAFT_F32, 12, s, NULL, 0, &v), GRAFT_EINVAL,
              "graft_variable_create", "rank 12");
  assert_null(v);
  expect_fail(graft_variable_create(NULL, "w", (graft_dtype)-3, 1, s, NULL, 0, &v), GRAFT_EDTYPE,
              "graft_variable_create", "dtype -3");
  const int64_t neg[] = {-1};
  expect_fail(graft_variable_create(NULL, "w", GRAFT_F32, 1, neg, NULL, 0, &v), GRAFT_EINVAL,
              "graft_variable_create", "shape[0] is -1");
}

static void test_graft_variable_set__refusals_name_both_shapes(void **state) {
  (void)state;
  const int64_t s3[] = {3}, s4[] = {4};
  graft_variable *v = NULL;
  tu_assert_status(graft_variable_create(NULL, "bias", GRAFT_F32, 1, s3, NULL, 0, &v), GRAFT_OK);
  graft_tensor *shape4 = NULL, *f64 = NULL;
  tu_assert_status(graft_tensor_create(GRAFT_F32, 1, s4, &shape4), GRAFT_OK);
  tu_assert_status(graft_tensor_create(GRAFT_F64, 1, s3, &f64), GRAFT_OK);
  expect_fail(graft_variable_set(v, shape4), GRAFT_ESHAPE, "graft_variable_set", "'bias'",
              "f32[4]", "expected f32[3]");
  expect_fail(graft_variable_set(v, f64), GRAFT_EDTYPE, "graft_variable_set", "f64[3]",
              "expected f32[3]");
  expect_fail(graft_variable_set(v, NULL), GRAFT_EINVAL, "graft_variable_set", "src is NULL");
  expect_fail(graft_variable_set(NULL, f64), GRAFT_EINVAL, "graft_variable_set", "v is NULL");
  graft_tensor_destroy(shape4);
  graft_tensor_destroy(f64);
  graft_variable_destroy(v);
}

/* ---- functions ---------------------------------------------------------------- */

typedef struct create_case {
  const char *what;
  void (*spoil)(graft_function_desc *d, graft_signature *sig);
  graft_status want;
  const char *sub1, *sub2;
} create_case;

static const graft_dtype g_dtypes[] = {GRAFT_F32};
static const int g_ranks[] = {2};
static const int64_t g_dims[] = {-1, 4};
static const int64_t *const g_shapes[] = {g_dims};

static void with_sig(graft_function_desc *d, graft_signature *sig) {
  *sig = (graft_signature){1, g_dtypes, g_ranks, g_shapes};
  d->signature = sig;
}
static void no_trace(graft_function_desc *d, graft_signature *s) { (void)s, d->trace = NULL; }
static void neg_inputs(graft_function_desc *d, graft_signature *s) { (void)s, d->n_inputs = -2; }
static void no_outputs(graft_function_desc *d, graft_signature *s) { (void)s, d->n_outputs = 0; }
static void neg_capacity(graft_function_desc *d, graft_signature *s) { (void)s, d->cache_capacity = -4; }
static void huge_capacity(graft_function_desc *d, graft_signature *s) {
  (void)s, d->cache_capacity = 65537;
}
static void sig_n(graft_function_desc *d, graft_signature *s) { with_sig(d, s), s->n = 3; }
static void sig_no_dtypes(graft_function_desc *d, graft_signature *s) { with_sig(d, s), s->dtypes = NULL; }
static void sig_no_ranks(graft_function_desc *d, graft_signature *s) { with_sig(d, s), s->ranks = NULL; }
static void sig_no_shapes(graft_function_desc *d, graft_signature *s) { with_sig(d, s), s->shapes = NULL; }
static void sig_dtype(graft_function_desc *d, graft_signature *s) {
  static const graft_dtype bad[] = {(graft_dtype)9};
  with_sig(d, s), s->dtypes = bad;
}
static void sig_rank(graft_function_desc *d, graft_signature *s) {
  static const int bad[] = {11};
  with_sig(d, s), s->ranks = bad;
}
static void sig_shape_null(graft_function_desc *d, graft_signature *s) {
  static const int64_t *const bad[] = {NULL};
  with_sig(d, s), s->shapes = bad;
}
static void sig_dim(graft_function_desc *d, graft_signature *s) {
  static const int64_t dims[] = {3, -2};
  static const int64_t *const bad[] = {dims};
  with_sig(d, s), s->shapes = bad;
}

static const create_case create_cases[] = {
    {"no trace", no_trace, GRAFT_EINVAL, "desc->trace is NULL", "callback"},
    {"negative n_inputs", neg_inputs, GRAFT_EINVAL, "n_inputs is -2", ">= 0"},
    {"no outputs", no_outputs, GRAFT_EINVAL, "n_outputs is 0", ">= 1"},
    {"negative capacity", neg_capacity, GRAFT_EINVAL, "cache_capacity is -4", "expected 0..65536"},
    {"huge capacity", huge_capacity, GRAFT_EINVAL, "cache_capacity is 65537", "expected 0..65536"},
    {"signature n", sig_n, GRAFT_EINVAL, "signature->n is 3", "n_inputs, 1"},
    {"signature dtypes", sig_no_dtypes, GRAFT_EINVAL, "signature->dtypes is NULL", "1 entries"},
    {"signature ranks", sig_no_ranks, GRAFT_EINVAL, "signature->ranks is NULL", "1 entries"},
    {"signature shapes", sig_no_shapes, GRAFT_EINVAL, "signature->shapes is NULL", "1 entries"},
    {"signature dtype", sig_dtype, GRAFT_EDTYPE, "signature->dtypes[0] is 9", "GRAFT_F64"},
    {"signature rank", sig_rank, GRAFT_EINVAL, "signature->ranks[0] is 11", "0..8"},
    {"signature shape", sig_shape_null, GRAFT_EINVAL, "signature->shapes[0] is NULL", "2 dims"},
    {"signature dim", sig_dim, GRAFT_EINVAL, "signature->shapes[0][1] is -2", "-1 for unknown"},
};

static void test_graft_function_create__each_reason_named(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  for (size_t i = 0; i < TU_N_OF(create_cases); i++) {
    const create_case *c = &create_cases[i];
    graft_function_desc d = add_desc();
    graft_signature sig;
    c->spoil(&d, &sig);
    graft_function *f = SENTINEL;
    poison_last_error();
    graft_status st = graft_function_create(rt, &d, &f);
    if (st != c->want)
      fail_msg("%s: status %s, want %s", c->what, graft_status_name(st), graft_status_name(c->want));
    assert_null(f);
    expect_msg(graft_last_errmsg(), "graft_function_create('adder')", c->sub1, c->sub2);
  }
  /* The same desc, unspoiled, is accepted (the cases failed for their reason). */
  graft_function_desc d = add_desc();
  graft_signature sig;
  with_sig(&d, &sig);
  graft_function *f = NULL;
  tu_assert_status(graft_function_create(rt, &d, &f), GRAFT_OK);
  graft_function_destroy(f);

  graft_function_desc ok = add_desc();
  f = SENTINEL;
  expect_fail(graft_function_create(rt, &ok, NULL), GRAFT_EINVAL, "graft_function_create",
              "out is NULL");
  expect_fail(graft_function_create(rt, NULL, &f), GRAFT_EINVAL, "graft_function_create",
              "desc is NULL");
  assert_null(f);
  f = SENTINEL;
  expect_fail(graft_function_create(NULL, &ok, &f), GRAFT_EINVAL, "graft_function_create('adder')",
              "rt is NULL");
  assert_null(f);
  ok.name = NULL; /* the default name */
  expect_fail(graft_function_create(NULL, &ok, &f), GRAFT_EINVAL, "graft_function_create('function')");
  graft_runtime_destroy(rt);
}

typedef struct reentry {
  graft_function *f;
  graft_tensor *x;
  graft_status st;
  char msg[512];
} reentry;

/* Calls its own function while that function is tracing: the call in
 * flight owns it, so the nested call must be refused. */
static graft_status call_self(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  reentry *r = user;
  graft_tensor *y = NULL;
  r->st = graft_function_call(r->f, 1, &r->x, 1, &y);
  snprintf(r->msg, sizeof r->msg, "%s", graft_last_errmsg());
  graft_tensor_destroy(y);
  out[0] = graft_add(t, in[0], in[0]);
  return GRAFT_OK;
}

static void test_graft_function_call__failures_reach_last_errmsg(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  const int64_t s[] = {3};
  graft_tensor *x = NULL, *y = NULL;
  tu_assert_status(graft_tensor_create(GRAFT_F32, 1, s, &x), GRAFT_OK);
  expect_fail(graft_function_call(NULL, 1, &x, 1, &y), GRAFT_EINVAL, "graft_function_call",
              "f is NULL");

  graft_function_desc d = add_desc();
  graft_function *f = tu_function_create(rt, &d);
  graft_tensor *two[] = {x, x};
  poison_last_error();
  graft_status st = graft_function_call(f, 2, two, 1, &y);
  assert_int_not_equal(st, GRAFT_OK);
  assert_null(y);
  assert_true(graft_function_errmsg(f)[0] != '\0');
  assert_string_equal(graft_last_errmsg(), graft_function_errmsg(f));

  /* An error inside the trace, reported by the call. */
  const int64_t s2[] = {2};
  graft_tensor *x2 = NULL;
  tu_assert_status(graft_tensor_create(GRAFT_F64, 1, s2, &x2), GRAFT_OK);
  d.name = "typed";
  static const graft_dtype dts[] = {GRAFT_F32};
  static const int rk[] = {1};
  static const int64_t dims[] = {3};
  static const int64_t *const shp[] = {dims};
  graft_signature sig = {1, dts, rk, shp};
  d.signature = &sig;
  graft_function *g = tu_function_create(rt, &d);
  poison_last_error();
  assert_int_not_equal(graft_function_call(g, 1, &x2, 1, &y), GRAFT_OK);
  assert_string_equal(graft_last_errmsg(), graft_function_errmsg(g));
  expect_msg(graft_last_errmsg(), "typed");

  /* A call on a function already running a call. */
  reentry r = {NULL, x, GRAFT_OK, ""};
  graft_function_desc rd = add_desc();
  rd.name = "reentrant";
  rd.trace = call_self;
  rd.user = &r;
  r.f = tu_function_create(rt, &rd);
  tu_assert_call_ok(r.f, 1, &x, 1, &y);
  tu_assert_status(r.st, GRAFT_EMISUSE);
  expect_msg(r.msg, "graft_function_call", "'reentrant'", "already running");
  graft_tensor_destroy(y);

  graft_function_destroy(r.f);
  graft_function_destroy(g);
  graft_function_destroy(f);
  graft_tensor_destroy(x2);
  graft_tensor_destroy(x);
  graft_runtime_destroy(rt);
}

static void test_graft_function_stats__before_a_call(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  graft_function_desc d = add_desc();
  graft_function *f = tu_function_create(rt, &d);
  graft_plan_stats ps;
  expect_fail(graft_function_stats(f, &ps), GRAFT_EMISUSE, "graft_function_stats", "'adder'",
              "no plan yet");
  expect_fail(graft_function_stats(NULL, &ps), GRAFT_EINVAL, "graft_function_stats", "f is NULL");
  expect_fail(graft_function_stats(f, NULL), GRAFT_EINVAL, "graft_function_stats", "out is NULL");
  expect_fail(graft_function_write_dot(f, stderr), GRAFT_EMISUSE, "graft_function_write_dot",
              "'adder'", "no graph yet");
  expect_fail(graft_function_write_dot(f, NULL), GRAFT_EINVAL, "graft_function_write_dot",
              "to is NULL");
  expect_fail(graft_function_write_dot(NULL, stderr), GRAFT_EINVAL, "graft_function_write_dot",
              "f is NULL");
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
}

/* ---- runtime describe --------------------------------------------------------- */

static void test_graft_runtime_describe__null_buf_measures(void **state) {
  (void)state;
  graft_runtime_opts o = small_opts();
  graft_runtime *rt = NULL;
  tu_assert_status(graft_runtime_create(&o, &rt), GRAFT_OK);
  char buf[1024];
  int len = graft_runtime_describe(rt, buf, sizeof buf);
  assert_true(len > 0 && (size_t)len < sizeof buf);
  assert_int_equal((int)strlen(buf), len);
  assert_int_equal(graft_runtime_describe(rt, NULL, 0), len);
  assert_int_equal(graft_runtime_describe(rt, NULL, 100), len);
  assert_int_equal(graft_runtime_describe(rt, NULL, (size_t)-1), len);
  graft_runtime_destroy(rt);

  poison_last_error();
  int n = graft_runtime_describe(NULL, NULL, 64);
  assert_int_equal(n, (int)strlen("(null runtime)"));
  expect_msg(graft_last_errmsg(), "graft_runtime_describe", "rt is NULL");
  char small[8];
  assert_int_equal(graft_runtime_describe(NULL, small, sizeof small), n);
  assert_string_equal(small, "(null r");
}

/* ---- runtime options: source and range -------------------------------------- */

typedef struct option_case {
  const char *field, *var; /* "graft_runtime_opts.x", "GRAFT_X" */
  void (*set_opt)(graft_runtime_opts *o);
  const char *env_value;
  graft_status want;
  const char *accepted; /* in both messages */
} option_case;

static void bad_threads(graft_runtime_opts *o) { o->num_threads = -1; }
static void bad_sched(graft_runtime_opts *o) { o->sched = "fastest"; }
static void bad_partition(graft_runtime_opts *o) { o->partition = "socket"; }
static void bad_topology(graft_runtime_opts *o) { o->topology = "pack:3 core"; }
static void big_topology(graft_runtime_opts *o) { o->topology = "pack:1000 pu:100"; }
static void bad_trace(graft_runtime_opts *o) { o->trace_path = "/nonexistent-graft-dir/t.json"; }
static void bad_bind(graft_runtime_opts *o) { o->bind = 3; }
static void bad_grain(graft_runtime_opts *o) { o->grain = INT64_MAX; }
static void bad_memory(graft_runtime_opts *o) { o->memory = "lanes:0"; }

static const option_case option_cases[] = {
    {"graft_runtime_opts.num_threads", "GRAFT_NUM_THREADS", bad_threads, "-1", GRAFT_EINVAL, "1..4096"},
    {"graft_runtime_opts.sched", "GRAFT_SCHED", bad_sched, "fastest", GRAFT_EINVAL, "ws, omp, seq"},
    {"graft_runtime_opts.partition", "GRAFT_PARTITION", bad_partition, "socket", GRAFT_EINVAL, "numa"},
    {"graft_runtime_opts.topology", "GRAFT_TOPOLOGY", bad_topology, "pack:3 core", GRAFT_EINVAL,
     "synthetic"},
    {"graft_runtime_opts.topology", "GRAFT_TOPOLOGY", big_topology, "pack:1000 pu:100",
     GRAFT_EINVAL, "8192 objects"},
    {"graft_runtime_opts.trace_path", "GRAFT_TRACE", bad_trace, "/nonexistent-graft-dir/t.json",
     GRAFT_EIO, "/nonexistent-graft-dir/t.json"},
    {"graft_runtime_opts.bind", "GRAFT_BIND", bad_bind, "sometimes", GRAFT_EINVAL, "true"},
    {"graft_runtime_opts.grain", "GRAFT_GRAIN", bad_grain, "9223372036854775807", GRAFT_EINVAL,
     "1..281474976710656"},
    {"graft_runtime_opts.memory", "GRAFT_MEMORY", bad_memory, "lanes:0", GRAFT_EINVAL, "1..4096"},
};

static void test_graft_runtime_create__option_messages_name_their_source(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_N_OF(option_cases); i++) {
    const option_case *c = &option_cases[i];
    graft_runtime_opts o;
    graft_runtime *rt;
    char ctx[128];
    snprintf(ctx, sizeof ctx, "%s / %s", c->field, c->var);

    /* From opts, with the variable unset: the message names the field. */
    graft_runtime_opts_init(&o);
    c->set_opt(&o);
    poison_last_error();
    graft_status st = create_with_env(&o, c->var, NULL, &rt);
    if (st != c->want) fail_msg("%s (opts): status %s", ctx, graft_status_name(st));
    assert_null(rt);
    expect_msg(graft_last_errmsg(), "graft_runtime_create: ", c->field, c->accepted);
    if (strstr(graft_last_errmsg(), "GRAFT_"))
      fail_msg("%s (opts): \"%s\" blames a variable", ctx, graft_last_errmsg());

    /* From the variable, with opts unset: the message names the variable. */
    graft_runtime_opts_init(&o);
    poison_last_error();
    st = create_with_env(&o, c->var, c->env_value, &rt);
    if (st != c->want) fail_msg("%s (env): status %s", ctx, graft_status_name(st));
    assert_null(rt);
    expect_msg(graft_last_errmsg(), "graft_runtime_create: ", c->var, c->env_value, c->accepted);
    if (strstr(graft_last_errmsg(), "graft_runtime_opts"))
      fail_msg("%s (env): \"%s\" blames an opts field", ctx, graft_last_errmsg());

    /* create_ex names itself and returns the same text in errbuf. */
    char err[512];
    saved_env s = env_set(c->var, c->env_value);
    rt = SENTINEL;
    st = graft_runtime_create_ex(&o, &rt, err, sizeof err);
    env_restore(s);
    tu_assert_status(st, c->want);
    assert_string_equal(err, graft_last_errmsg());
    expect_msg(err, "graft_runtime_create_ex: ", c->var);
  }
  /* A valid field overrides an invalid variable: that variable is never read. */
  graft_runtime_opts o = small_opts();
  o.memory = "lanes:2";
  graft_runtime *rt;
  tu_assert_status(create_with_env(&o, "GRAFT_MEMORY", "lanes:0", &rt), GRAFT_OK);
  graft_runtime_destroy(rt);
}

/* Numeric settings at and around the ends of their ranges. */
typedef struct numeric_case {
  const char *var, *value;
  graft_status want;
  const char *describe; /* in graft_runtime_describe when accepted */
} numeric_case;

static const numeric_case numeric_cases[] = {
    {"GRAFT_NUM_THREADS", "1", GRAFT_OK, "threads=1 "},
    {"GRAFT_NUM_THREADS", "4096", GRAFT_OK, "threads=4096 "},
    {"GRAFT_NUM_THREADS", "4097", GRAFT_EINVAL, NULL},
    {"GRAFT_NUM_THREADS", "0", GRAFT_EINVAL, NULL},
    {"GRAFT_NUM_THREADS", "-1", GRAFT_EINVAL, NULL},
    {"GRAFT_NUM_THREADS", "1e9", GRAFT_EINVAL, NULL},
    {"GRAFT_NUM_THREADS", "1000000000", GRAFT_EINVAL, NULL},
    {"GRAFT_NUM_THREADS", "99999999999999999999999", GRAFT_EINVAL, NULL},
    {"GRAFT_NUM_THREADS", "8threads", GRAFT_EINVAL, NULL},
    {"GRAFT_NUM_THREADS", " 8", GRAFT_EINVAL, NULL},
    {"GRAFT_NUM_THREADS", "+8", GRAFT_EINVAL, NULL},
    {"GRAFT_NUM_THREADS", "", GRAFT_EINVAL, NULL},
    {"GRAFT_GRAIN", "1", GRAFT_OK, "grain=1 "},
    {"GRAFT_GRAIN", "281474976710656", GRAFT_OK, "grain=281474976710656 "},
    {"GRAFT_GRAIN", "281474976710657", GRAFT_EINVAL, NULL},
    {"GRAFT_GRAIN", "9223372036854775807", GRAFT_EINVAL, NULL},
    {"GRAFT_GRAIN", "9223372036854775808", GRAFT_EINVAL, NULL},
    {"GRAFT_GRAIN", "0", GRAFT_EINVAL, NULL},
    {"GRAFT_MEMORY", "lanes:1", GRAFT_OK, "memory=lanes:1 "},
    {"GRAFT_MEMORY", "lanes:4096", GRAFT_OK, "memory=lanes:4096 "},
    {"GRAFT_MEMORY", "lanes:4097", GRAFT_EINVAL, NULL},
    {"GRAFT_MEMORY", "lanes:-1", GRAFT_EINVAL, NULL},
    {"GRAFT_MEMORY", "lanes:2x", GRAFT_EINVAL, NULL},
    {"GRAFT_MEMORY", "lanes:99999999999999999999", GRAFT_EINVAL, NULL},
};

static void test_graft_runtime_create__numeric_range_ends(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_N_OF(numeric_cases); i++) {
    const numeric_case *c = &numeric_cases[i];
    graft_runtime_opts o = small_opts();
    graft_runtime *rt;
    poison_last_error();
    graft_status st = create_with_env(&o, c->var, c->value, &rt);
    if (st != c->want)
      fail_msg("%s=%s: status %s (%s)", c->var, c->value, graft_status_name(st),
               graft_last_errmsg());
    if (st) {
      assert_null(rt);
      char quoted[64];
      snprintf(quoted, sizeof quoted, "'%s'", c->value);
      expect_msg(graft_last_errmsg(), c->var, quoted, "accepted: ", "..");
      continue;
    }
    char buf[1024];
    graft_runtime_describe(rt, buf, sizeof buf);
    graft_runtime_destroy(rt);
    if (!strstr(buf, c->describe)) fail_msg("%s=%s: describe says \"%s\"", c->var, c->value, buf);
  }
}

static void test_graft_runtime_create__opts_numeric_range_ends(void **state) {
  (void)state;
  static const struct {
    int threads;
    int64_t grain;
    graft_status want;
    const char *sub;
  } cases[] = {
      {4096, 0, GRAFT_OK, "threads=4096 "},
      {4097, 0, GRAFT_EINVAL, "graft_runtime_opts.num_threads: invalid value 4097"},
      {-5, 0, GRAFT_EINVAL, "graft_runtime_opts.num_threads: invalid value -5"},
      {0, INT64_C(1) << 48, GRAFT_OK, "grain=281474976710656 "},
      {0, (INT64_C(1) << 48) + 1, GRAFT_EINVAL, "graft_runtime_opts.grain: invalid value 281474976710657"},
      {0, -1, GRAFT_EINVAL, "graft_runtime_opts.grain: invalid value -1"},
  };
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    graft_runtime_opts o = small_opts();
    o.num_threads = cases[i].threads;
    o.grain = cases[i].grain;
    graft_runtime *rt = SENTINEL;
    poison_last_error();
    graft_status st = graft_runtime_create(&o, &rt);
    tu_assert_status(st, cases[i].want);
    if (st) {
      assert_null(rt);
      expect_msg(graft_last_errmsg(), cases[i].sub, "accepted: an integer in 1..");
      continue;
    }
    char buf[1024];
    graft_runtime_describe(rt, buf, sizeof buf);
    graft_runtime_destroy(rt);
    expect_msg(buf, cases[i].sub);
  }
}

/* ---- synthetic topology limits -------------------------------------------- */

typedef struct synth_case {
  const char *desc;
  int64_t objects, pus, arity;
} synth_case;

/* Counted by hand; hwloc agrees on the PUs (checked below). */
static const synth_case synth_cases[] = {
    {"pack:2 core:4 pu:2", 2 + 8 + 16, 16, 4},
    {"pack:2 [numa] core:4 pu:2", 2 + 2 + 8 + 16, 16, 4},
    {"pack:2 [numa(memory=1GB)] core:4 pu:2", 2 + 2 + 8 + 16, 16, 4},
    {"(memory=1GB) pack:2 numa:2(memory=1GB) core:2 pu:2", 2 + 4 + 8 + 16, 16, 2},
    {"numa:2(memory=1GB indexes=1,0) pu:3", 2 + 6, 6, 3},
    {"2 3 4", 2 + 6 + 24, 24, 4},
    {"pack:0x2 pu:010", 2 + 16, 16, 8},
    {"pack:2\ncore:2  pu:1", 2 + 4 + 4, 4, 2},
    {"pack:32 pu:255", 32 + 8160, 8160, 255},
};

static int describe_pus(graft_runtime *rt) {
  char buf[1024];
  graft_runtime_describe(rt, buf, sizeof buf);
  const char *p = strstr(buf, "pus=");
  assert_non_null(p);
  return atoi(p + 4);
}

static void test_graft__synthetic_size__counts_like_hwloc(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_N_OF(synth_cases); i++) {
    const synth_case *c = &synth_cases[i];
    int64_t objects = -1, pus = -1, arity = -1;
    if (graft__synthetic_size(c->desc, &objects, &pus, &arity))
      fail_msg("'%s': not measured", c->desc);
    if (objects != c->objects || pus != c->pus || arity != c->arity)
      fail_msg("'%s': %lld objects, %lld pus, arity %lld; want %lld, %lld, %lld", c->desc,
               (long long)objects, (long long)pus, (long long)arity, (long long)c->objects,
               (long long)c->pus, (long long)c->arity);
    graft_runtime_opts o = small_opts();
    o.topology = c->desc;
    graft_runtime *rt = NULL;
    char err[512];
    graft_status st = graft_runtime_create_ex(&o, &rt, err, sizeof err);
    if (st) fail_msg("'%s': %s", c->desc, err);
    assert_int_equal(describe_pus(rt), c->pus);
    graft_runtime_destroy(rt);
  }
  /* Text hwloc would refuse is not measured (and hwloc refuses it). */
  static const char *const malformed[] = {"pack:2 [numa", "pack:", "(memory=1GB", "pack:2(memory=1GB",
                                          "core pu"};
  for (size_t i = 0; i < TU_N_OF(malformed); i++) {
    int64_t a, b, c;
    if (!graft__synthetic_size(malformed[i], &a, &b, &c)) fail_msg("'%s' was measured", malformed[i]);
    graft_runtime_opts o = small_opts();
    o.topology = malformed[i];
    graft_runtime *rt;
    expect_fail(graft_runtime_create(&o, &rt), GRAFT_EINVAL, "graft_runtime_opts.topology",
                malformed[i], "synthetic");
  }
}

static void test_graft_runtime_create__synthetic_topology_limits(void **state) {
  (void)state;
  static const struct {
    const char *desc, *sub1, *sub2;
  } refused[] = {
      {"pack:1000 pu:100", "101000 objects (100000 PUs)", "at most 8192 objects"},
      {"pack:1 core:32 pu:255", "8193 objects", "at most 8192 objects"},
      {"pu:257", "up to 257 children", "at most 256 children"},
      {"pack:2 pu:0x101", "up to 257 children", "at most 256 children"},
      {"pack:16 [numa] [numa] core:16 pu:32", "8496 objects", "NUMA nodes included"},
      {"pack:-1 pu:2", "9223372036854775807", "at most 256 children"},
      {"pack:4294967296 core:4294967296 pu:4294967296", "9223372036854775807 objects",
       "at most 8192 objects"},
  };
  for (size_t i = 0; i < TU_N_OF(refused); i++) {
    graft_runtime_opts o = small_opts();
    o.topology = refused[i].desc;
    graft_runtime *rt = SENTINEL;
    /* These messages come from graft's own check, never from hwloc: a
     * refused description does not reach hwloc. */
    expect_fail(graft_runtime_create(&o, &rt), GRAFT_EINVAL, "graft_runtime_opts.topology",
                refused[i].desc, refused[i].sub1, refused[i].sub2);
    assert_null(rt);
  }
  /* At the limits: accepted. */
  static const char *const accepted[] = {"pu:256", "pack:32 pu:255",
                                         "pack:4 numa:2 l3:4 core:16 pu:2"};
  for (size_t i = 0; i < TU_N_OF(accepted); i++) {
    graft_runtime_opts o = small_opts();
    o.topology = accepted[i];
    graft_runtime *rt = NULL;
    char err[512];
    if (graft_runtime_create_ex(&o, &rt, err, sizeof err)) fail_msg("'%s': %s", accepted[i], err);
    graft_runtime_destroy(rt);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_last_errmsg__empty_on_a_new_thread),
      cmocka_unit_test(test_graft_last_errmsg__kept_by_success_and_by_reading),
      cmocka_unit_test(test_graft_last_errmsg__per_thread),
      cmocka_unit_test(test_graft_tensor_create__refusals_name_argument),
      cmocka_unit_test(test_graft_tensor_create__huge_shapes_refused_with_size),
      cmocka_unit_test(test_graft_tensor_wrap__misaligned_per_dtype),
      cmocka_unit_test(test_graft_variable_create__refusals_name_argument),
      cmocka_unit_test(test_graft_variable_set__refusals_name_both_shapes),
      cmocka_unit_test(test_graft_function_create__each_reason_named),
      cmocka_unit_test(test_graft_function_call__failures_reach_last_errmsg),
      cmocka_unit_test(test_graft_function_stats__before_a_call),
      cmocka_unit_test(test_graft_runtime_describe__null_buf_measures),
      cmocka_unit_test(test_graft_runtime_create__option_messages_name_their_source),
      cmocka_unit_test(test_graft_runtime_create__numeric_range_ends),
      cmocka_unit_test(test_graft_runtime_create__opts_numeric_range_ends),
      cmocka_unit_test(test_graft__synthetic_size__counts_like_hwloc),
      cmocka_unit_test(test_graft_runtime_create__synthetic_topology_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
