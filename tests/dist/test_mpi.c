/* Data-parallel training over MPI (graft/mpi.h), run by meson under
 * `mpirun -np 2`: every case runs on both ranks.  Oracles: the gradient of
 * the concatenated batch in one process (f64, 1e-12), bitwise equality of
 * the ranks' variables (checked against rank 0's bytes sent by MPI itself,
 * not only by graft_module_replicas_equal), and snapshots of the variables
 * around failed steps.  Without MPI the program exits 77 (skipped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graft.h"

#if !GRAFT_HAVE_MPI
int main(void) {
  puts("graft was built without MPI: test_mpi skipped");
  return 77;
}
#else
#include <cmocka.h>
#include <mpi.h>

#include "graft/mpi.h"
#include "testutil.h"

enum { IN = 5, HID = 4, OUT = 3, BATCH = 8, NP = 4 };

static int rank, size;

typedef struct model {
  graft_module *root, *net, *opt;
  graft_variable *p[NP];
  int64_t bucket_bytes;
  int bad_grad_shape; /* the step hands a wrongly shaped gradient */
} model;

static void model_init(model *m, unsigned seed, graft_optimizer_kind opt) {
  memset(m, 0, sizeof *m);
  assert_int_equal(graft_module_create(NULL, "root", &m->root), GRAFT_OK);
  assert_int_equal(graft_module_create(m->root, "net", &m->net), GRAFT_OK);
  static const char *names[NP] = {"w1", "b1", "w2", "b2"};
  const int64_t shapes[NP][2] = {{IN, HID}, {HID, 0}, {HID, OUT}, {OUT, 0}};
  tu_rng r = {0x9e3779b97f4a7c15ull ^ seed};
  for (int i = 0; i < NP; i++) {
    int rk = shapes[i][1] ? 2 : 1;
    graft_tensor *init = tu_tensor_rand(&r, GRAFT_F64, rk, shapes[i], -0.8, 0.8);
    assert_int_equal(graft_variable_create(m->net, names[i], GRAFT_F64, rk, shapes[i],
                                           graft_tensor_data(init), GRAFT_VAR_TRAINABLE, &m->p[i]),
                     GRAFT_OK);
    graft_tensor_destroy(init);
  }
  graft_optimizer_desc d = {.kind = opt, .lr = 0.05};
  assert_int_equal(graft_optimizer_create(m->root, "opt", &d, NP, m->p, &m->opt), GRAFT_OK);
}

static graft_value *loss_of(graft_trace *t, model *m, graft_value *x, graft_value *labels,
                            graft_value **p) {
  for (int i = 0; i < NP; i++) p[i] = graft_read(t, m->p[i]);
  graft_value *h = graft_tanh(t, graft_add(t, graft_matmul(t, x, p[0], 0), p[1]));
  graft_value *logits = graft_add(t, graft_matmul(t, h, p[2], 0), p[3]);
  return graft_softmax_cross_entropy(t, logits, labels);
}

/* The gradients of the loss on (x, labels) in g, all-reduced over
 * MPI_COMM_WORLD (m->bucket_bytes); the loss in *loss. */
static graft_status mean_grads(graft_trace *t, model *m, graft_value *const *in,
                               graft_value **g, graft_value **loss) {
  graft_value *p[NP];
  *loss = loss_of(t, m, in[0], in[1], p);
  graft_status st = graft_gradients(t, 1, loss, NULL, NP, p, GRAFT_UNCONNECTED_ZERO, g);
  if (st) return st;
  if (m->bad_grad_shape) g[1] = g[0];
  graft_allreduce_opts o = {.bucket_bytes = m->bucket_bytes};
  return graft_module_allreduce_gradients(t, m->net, MPI_COMM_WORLD, NP, g, g, &o);
}

/* (x, labels) -> the gradients, all-reduced */
static graft_status grad_dp(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_value *loss;
  return mean_grads(t, user, in, out, &loss);
}

/* (x, labels) -> the gradients, in this process alone */
static graft_status grad_local(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_value *p[NP];
  graft_value *loss = loss_of(t, user, in[0], in[1], p);
  return graft_gradients(t, 1, &loss, NULL, NP, p, GRAFT_UNCONNECTED_ZERO, out);
}

/* (x, labels) -> loss, and an Adam step on the all-reduced gradients */
static graft_status step_dp(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  model *m = user;
  graft_value *g[NP], *loss;
  graft_status st = mean_grads(t, m, in, g, &loss);
  if (st || (st = graft_optimizer_apply(t, m->opt, NP, g))) return st;
  out[0] = loss;
  return GRAFT_OK;
}

static graft_function *fn(graft_runtime *rt, const char *name, graft_trace_fn trace, model *m,
                          int n_out) {
  graft_function_desc d = {.name = name, .trace = trace, .user = m, .n_inputs = 2,
                           .n_outputs = n_out};
  graft_function *f = NULL;
  assert_int_equal(graft_function_create(rt, &d, &f), GRAFT_OK);
  return f;
}

static graft_runtime *runtime(int threads, const char *sched) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = threads;
  o.sched = sched;
  o.mpi_timeout = 60;
  graft_runtime *rt = NULL;
  assert_int_equal(graft_runtime_create(&o, &rt), GRAFT_OK);
  return rt;
}

/* The global batch of step s (the same on every rank), and this rank's
 * rows of it. */
static void batch(int s, int rows, int first, graft_tensor **x, graft_tensor **labels) {
  const int64_t xs[2] = {rows, IN}, ls[1] = {rows};
  assert_int_equal(graft_tensor_create(GRAFT_F64, 2, xs, x), GRAFT_OK);
  assert_int_equal(graft_tensor_create(GRAFT_I32, 1, ls, labels), GRAFT_OK);
  tu_rng r = {0x2545f4914f6cdd1dull + (uint64_t)s};
  double *xd = graft_tensor_data(*x);
  int32_t *ld = graft_tensor_data(*labels);
  for (int i = 0; i < BATCH * size; i++) {
    double row[IN];
    for (int j = 0; j < IN; j++) row[j] = tu_uniform(&r, -1, 1);
    int32_t label = (int32_t)tu_int(&r, 0, OUT - 1);
    if (i < first || i >= first + rows) continue;
    memcpy(xd + (i - first) * IN, row, sizeof row);
    ld[i - first] = label;
  }
}

/* Every variable of m as one byte block (to compare before and after). */
static unsigned char *snapshot(const model *m, size_t *len) {
  int64_t n = 0;
  assert_int_equal(graft_module_variables(m->root, 0, NULL, &n), GRAFT_OK);
  graft_variable **vs = calloc((size_t)n, sizeof *vs);
  assert_non_null(vs);
  assert_int_equal(graft_module_variables(m->root, n, vs, &n), GRAFT_OK);
  size_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    const graft_tensor *v = graft_variable_value(vs[i]);
    total += (size_t)graft_tensor_numel(v) * graft_dtype_size(graft_tensor_dtype(v));
  }
  unsigned char *b = malloc(total ? total : 1), *at = b;
  assert_non_null(b);
  for (int64_t i = 0; i < n; i++) {
    const graft_tensor *v = graft_variable_value(vs[i]);
    size_t bytes = (size_t)graft_tensor_numel(v) * graft_dtype_size(graft_tensor_dtype(v));
    memcpy(at, graft_tensor_data(v), bytes);
    at += bytes;
  }
  free(vs);
  *len = total;
  return b;
}

/* Rank 0's bytes, sent by MPI, equal this rank's. */
static void assert_same_as_rank0(const unsigned char *b, size_t len) {
  unsigned char *r0 = malloc(len ? len : 1);
  assert_non_null(r0);
  memcpy(r0, b, len);
  assert_int_equal(MPI_Bcast(r0, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD), MPI_SUCCESS);
  assert_memory_equal(r0, b, len);
  free(r0);
}

/* Data-parallel gradients (several buckets, one, any thread count and
 * executor) equal the gradient of the concatenated batch, and are the
 * same bits on every rank and at every thread count. */
static void test_allreduce_gradients__equal_concatenated_batch(void **state) {
  (void)state;
  static const struct { int threads; const char *sched; int64_t bucket; } cfg[] = {
      {1, "ws", 64}, {2, "ws", 64}, {3, "ws", 0}, {4, "omp", 200}, {2, "seq", 1}};
  unsigned char *first = NULL;
  size_t first_len = 0;
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
    model m;
    model_init(&m, 1, GRAFT_OPT_SGD);
    m.bucket_bytes = cfg[c].bucket;
    graft_runtime *rt = runtime(cfg[c].threads, cfg[c].sched);
    graft_function *dp = fn(rt, "grad_dp", grad_dp, &m, NP), *local = fn(rt, "grad_local", grad_local, &m, NP);
    graft_tensor *x, *l, *gx, *gl;
    batch(0, BATCH, rank * BATCH, &x, &l);
    batch(0, BATCH * size, 0, &gx, &gl);
    graft_tensor *g[NP] = {0}, *want[NP] = {0};
    graft_tensor *in[2] = {x, l}, *gin[2] = {gx, gl};
    assert_int_equal(graft_function_call(dp, 2, in, NP, g), GRAFT_OK);
    assert_int_equal(graft_function_call(local, 2, gin, NP, want), GRAFT_OK);
    size_t len = 0;
    for (int i = 0; i < NP; i++) len += (size_t)graft_tensor_numel(g[i]) * sizeof(double);
    unsigned char *bits = malloc(len), *at = bits;
    assert_non_null(bits);
    for (int i = 0; i < NP; i++) {
      int64_t n = graft_tensor_numel(g[i]);
      for (int64_t k = 0; k < n; k++)
        assert_true(fabs(tu_get(g[i], k) - tu_get(want[i], k)) <= 1e-12 * (1 + fabs(tu_get(want[i], k))));
      memcpy(at, graft_tensor_data(g[i]), (size_t)n * sizeof(double));
      at += (size_t)n * sizeof(double);
      graft_tensor_destroy(g[i]);
      graft_tensor_destroy(want[i]);
    }
    assert_same_as_rank0(bits, len);
    if (!first) {
      first = bits;
      first_len = len;
    } else { /* bucket sizes and executors change no bit */
      assert_int_equal(first_len, len);
      assert_memory_equal(first, bits, len);
      free(bits);
    }
    graft_tensor_destroy(x), graft_tensor_destroy(l), graft_tensor_destroy(gx), graft_tensor_destroy(gl);
    graft_function_destroy(dp);
    graft_function_destroy(local);
    graft_runtime_destroy(rt);
    graft_module_destroy(m.root);
  }
  free(first);
}

/* Ten Adam steps on different shards leave bitwise-identical variables;
 * the ranks start apart and graft_module_broadcast makes them equal. */
static void test_training__variables_identical_after_10_steps(void **state) {
  (void)state;
  model m;
  model_init(&m, 100 + (unsigned)rank, GRAFT_OPT_ADAM); /* different on each rank */
  int equal = -1;
  assert_int_equal(graft_module_replicas_equal(m.root, MPI_COMM_WORLD, &equal), GRAFT_OK);
  assert_int_equal(equal, size == 1);
  assert_int_equal(graft_module_broadcast(m.root, MPI_COMM_WORLD, 0), GRAFT_OK);
  assert_int_equal(graft_module_replicas_equal(m.root, MPI_COMM_WORLD, &equal), GRAFT_OK);
  assert_int_equal(equal, 1);
  m.bucket_bytes = 100;
  graft_runtime *rt = runtime(2, "ws");
  graft_function *step = fn(rt, "step_dp", step_dp, &m, 1);
  size_t len0 = 0;
  unsigned char *before = snapshot(&m, &len0);
  for (int s = 0; s < 10; s++) {
    graft_tensor *x, *l, *loss = NULL;
    batch(s, BATCH, rank * BATCH, &x, &l);
    graft_tensor *in[2] = {x, l};
    assert_int_equal(graft_function_call(step, 2, in, 1, &loss), GRAFT_OK);
    assert_true(isfinite(tu_get(loss, 0)));
    graft_tensor_destroy(loss), graft_tensor_destroy(x), graft_tensor_destroy(l);
  }
  size_t len = 0;
  unsigned char *after = snapshot(&m, &len);
  assert_int_equal(len, len0);
  assert_true(memcmp(before, after, len) != 0); /* it trained */
  assert_same_as_rank0(after, len);
  assert_int_equal(graft_module_replicas_equal(m.root, MPI_COMM_WORLD, &equal), GRAFT_OK);
  assert_int_equal(equal, 1);
  free(before), free(after);
  graft_function_destroy(step);
  graft_runtime_destroy(rt);
  graft_module_destroy(m.root);
}

/* A step that fails on rank 1 only (a label out of range; then inputs of
 * the wrong dtype, refused before running) fails on every rank, naming
 * rank 1, and changes no variable anywhere; the next good step works. */
static void test_training__failure_on_one_rank_fails_all(void **state) {
  (void)state;
  model m;
  model_init(&m, 7, GRAFT_OPT_ADAM);
  m.bucket_bytes = 64;
  graft_runtime *rt = runtime(2, "ws");
  graft_function *step = fn(rt, "step_dp", step_dp, &m, 1);
  for (int s = 0; s < 4; s++) {
    graft_tensor *x, *l, *loss = NULL;
    batch(s, BATCH, rank * BATCH, &x, &l);
    if (s == 1 && rank == 1) ((int32_t *)graft_tensor_data(l))[3] = OUT + 5;
    if (s == 2 && rank == 1) { /* an i32 x: refused before the plan runs */
      graft_tensor_destroy(x);
      const int64_t shape[2] = {BATCH, IN};
      assert_int_equal(graft_tensor_create(GRAFT_I32, 2, shape, &x), GRAFT_OK);
    }
    size_t len = 0, len2 = 0;
    unsigned char *before = snapshot(&m, &len);
    graft_tensor *in[2] = {x, l};
    graft_status st = graft_function_call(step, 2, in, 1, &loss);
    unsigned char *after = snapshot(&m, &len2);
    if (s == 1 || s == 2) {
      assert_int_not_equal(st, GRAFT_OK);
      assert_null(loss);
      assert_memory_equal(before, after, len);
      if (rank != 1) assert_non_null(strstr(graft_function_errmsg(step), "rank 1"));
      else if (s == 1) assert_non_null(strstr(graft_function_errmsg(step), "softmax_cross_entropy"));
    } else {
      assert_int_equal(st, GRAFT_OK);
      assert_true(memcmp(before, after, len) != 0);
      graft_tensor_destroy(loss);
    }
    assert_same_as_rank0(after, len2);
    free(before), free(after);
    graft_tensor_destroy(x), graft_tensor_destroy(l);
  }
  graft_function_destroy(step);
  graft_runtime_destroy(rt);
  graft_module_destroy(m.root);
}

/* graft_allreduce_mean of a plain value is the mean over the ranks. */
static graft_status mean_of(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_allreduce_mean(t, MPI_COMM_WORLD, in[0]);
  out[1] = graft_allreduce_mean(t, MPI_COMM_WORLD, graft_cast(t, in[0], GRAFT_F32));
  return graft_trace_status(t);
}

static void test_allreduce_mean__value(void **state) {
  (void)state;
  graft_runtime *rt = runtime(2, "ws");
  graft_function_desc d = {.name = "mean", .trace = mean_of, .n_inputs = 1, .n_outputs = 2};
  graft_function *f = NULL;
  assert_int_equal(graft_function_create(rt, &d, &f), GRAFT_OK);
  const int64_t shape[2] = {3, 7};
  graft_tensor *x = NULL;
  assert_int_equal(graft_tensor_create(GRAFT_F64, 2, shape, &x), GRAFT_OK);
  for (int i = 0; i < 21; i++) ((double *)graft_tensor_data(x))[i] = i + 100.0 * rank;
  graft_tensor *y[2] = {0};
  assert_int_equal(graft_function_call(f, 1, &x, 2, y), GRAFT_OK);
  double shift = 100.0 * (size - 1) / 2;
  for (int i = 0; i < 21; i++) {
    assert_true(tu_get(y[0], i) == i + shift);
    assert_true(tu_get(y[1], i) == (float)(i + shift));
  }
  graft_tensor_destroy(y[0]), graft_tensor_destroy(y[1]), graft_tensor_destroy(x);
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
}

/* Misuse is refused at trace time with a clear message, on every rank
 * alike: an integer value, a collective in a scan body, a gradient
 * through a collective, a gradient of the wrong shape, broadcasting
 * modules that differ, MPI_COMM_NULL. */
static graft_status int_value(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_allreduce_mean(t, MPI_COMM_WORLD, graft_cast(t, in[0], GRAFT_I32));
  return graft_trace_status(t);
}

static graft_status body_mean(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_add(t, in[0], graft_allreduce_mean(t, MPI_COMM_WORLD, in[1]));
  out[1] = in[1];
  return graft_trace_status(t);
}

static graft_status in_scan(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  const int ax = 0;
  graft_value *c0 = graft_reduce_sum(t, in[0], 1, &ax, 0), *res[2] = {NULL, NULL};
  graft_status st = graft_scan(t, body_mean, NULL, 1, &c0, 1, in, 1, res, NULL);
  out[0] = res[0];
  return st;
}

static graft_status through(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  const int axes[2] = {0, 1};
  graft_value *y = graft_reduce_sum(t, graft_allreduce_mean(t, MPI_COMM_WORLD, in[0]), 2, axes, 0);
  return graft_gradients(t, 1, &y, NULL, 1, in, GRAFT_UNCONNECTED_ZERO, out);
}

static graft_status null_comm(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  out[0] = graft_allreduce_mean(t, MPI_COMM_NULL, in[0]);
  return graft_trace_status(t);
}

static void expect_refused(graft_trace_fn trace, void *user, int n_in, graft_status want,
                           const char *needle) {
  graft_runtime *rt = runtime(1, "ws");
  graft_function_desc d = {.name = "refused", .trace = trace, .user = user, .n_inputs = n_in,
                           .n_outputs = 1};
  graft_function *f = NULL;
  assert_int_equal(graft_function_create(rt, &d, &f), GRAFT_OK);
  const int64_t shape[2] = {BATCH, IN}, ls[1] = {BATCH};
  graft_tensor *x = NULL, *l = NULL, *y = NULL;
  assert_int_equal(graft_tensor_create(GRAFT_F64, 2, shape, &x), GRAFT_OK);
  assert_int_equal(graft_tensor_create(GRAFT_I32, 1, ls, &l), GRAFT_OK);
  graft_tensor *in[2] = {x, l};
  assert_int_equal(graft_function_call(f, n_in, in, 1, &y), want);
  assert_null(y);
  if (!strstr(graft_function_errmsg(f), needle)) fail_msg("message: %s", graft_function_errmsg(f));
  graft_tensor_destroy(x), graft_tensor_destroy(l);
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
}

static graft_status step_one_out(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  return step_dp(t, n_in, in, n_out, out, user);
}

static void test_refusals__clear_messages(void **state) {
  (void)state;
  expect_refused(int_value, NULL, 1, GRAFT_EDTYPE, "expected f32 or f64");
  expect_refused(in_scan, NULL, 1, GRAFT_EUNSUPPORTED, "control-flow body");
  expect_refused(through, NULL, 1, GRAFT_EUNSUPPORTED, "no gradient through an MPI collective");
  model m;
  model_init(&m, 3, GRAFT_OPT_SGD);
  m.bad_grad_shape = 1;
  expect_refused(step_one_out, &m, 2, GRAFT_ESHAPE, "variable 'root/net/b1'");
  /* broadcast between modules that differ: refused everywhere, nothing changes */
  graft_variable *extra = NULL;
  if (rank == 1) {
    const int64_t one[1] = {1};
    assert_int_equal(graft_variable_create(m.net, "extra", GRAFT_F64, 1, one, NULL, 0, &extra),
                     GRAFT_OK);
  }
  size_t len = 0, len2 = 0;
  unsigned char *before = snapshot(&m, &len);
  assert_int_equal(graft_module_broadcast(m.root, MPI_COMM_WORLD, 0), size > 1 ? GRAFT_ESHAPE : GRAFT_OK);
  unsigned char *after = snapshot(&m, &len2);
  assert_int_equal(len, len2);
  assert_memory_equal(before, after, len);
  assert_int_equal(graft_module_broadcast(m.root, MPI_COMM_WORLD, size), GRAFT_EINVAL);
  int equal = -1;
  assert_int_equal(graft_module_broadcast(m.root, MPI_COMM_NULL, 0), GRAFT_EINVAL);
  assert_int_equal(graft_module_replicas_equal(m.root, MPI_COMM_NULL, &equal), GRAFT_EINVAL);
  assert_int_equal(equal, -1);
  expect_refused(null_comm, NULL, 1, GRAFT_EINVAL, "MPI_COMM_NULL");
  free(before), free(after);
  graft_module_destroy(m.root);
}

/* graft's own blocks, counted through its allocator hook: every test
 * leaves none behind (LeakSanitizer is off for this program: Open MPI
 * keeps memory until exit in components it unloads). */
static _Atomic long live_blocks;

static void *count_alloc(void *ctx, size_t size, size_t align) {
  (void)ctx;
  void *p = aligned_alloc(align, (size + align - 1) / align * align);
  if (p) live_blocks++;
  return p;
}

static void count_free(void *ctx, void *p) {
  (void)ctx;
  live_blocks--;
  free(p);
}

static int no_blocks_left(void **state) {
  (void)state;
  if (live_blocks) fail_msg("%ld graft blocks still allocated after the test", (long)live_blocks);
  return 0;
}

int main(int argc, char **argv) {
  const graft_allocator counting = {count_alloc, count_free, NULL};
  graft_set_allocator(&counting);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) { /* (run directly: a singleton) */
    puts("test_mpi needs two ranks or more: run it under mpirun -np 2 (meson test does)");
    MPI_Finalize();
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_allreduce_gradients__equal_concatenated_batch, no_blocks_left),
      cmocka_unit_test_teardown(test_training__variables_identical_after_10_steps, no_blocks_left),
      cmocka_unit_test_teardown(test_training__failure_on_one_rank_fails_all, no_blocks_left),
      cmocka_unit_test_teardown(test_allreduce_mean__value, no_blocks_left),
      cmocka_unit_test_teardown(test_refusals__clear_messages, no_blocks_left),
  };
  char group[32];
  snprintf(group, sizeof group, "test_mpi rank %d of %d", rank, size);
  int failed = _cmocka_run_group_tests(group, tests, sizeof tests / sizeof tests[0], NULL, NULL);
  MPI_Finalize();
  return failed ? 1 : 0;
}
#endif
