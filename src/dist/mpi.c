/* graft's use of MPI (dist.h) and the public API of graft/mpi.h.
 *
 * Every MPI call graft makes holds one process-wide lock, so the
 * application's MPI_THREAD_SERIALIZED suffices although any worker may
 * post or finish a collective; no call blocks while holding it (waits poll
 * MPI_Test, yielding the CPU between polls, up to a timeout). */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "common/config.h"
#include "dist/dist.h"
#include "graft/mpi.h"
#include "graph/graph.h"

_Static_assert(sizeof(MPI_Comm) <= GRAFT__COMM_BYTES, "an MPI_Comm must fit GRAFT__COMM_BYTES");
_Static_assert(sizeof(MPI_Request) <= GRAFT__REQ_BYTES, "an MPI_Request must fit GRAFT__REQ_BYTES");

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;

static MPI_Comm comm_of(const unsigned char *b) {
  MPI_Comm c;
  memcpy(&c, b, sizeof c);
  return c;
}

static void comm_bytes(MPI_Comm c, unsigned char *b) {
  memset(b, 0, GRAFT__COMM_BYTES);
  memcpy(b, &c, sizeof c);
}

static graft_status mpi_fail(char *msg, const char *what, int err) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", err);
  graft__msgf(msg, "%s: %s", what, s);
  return GRAFT_EIO;
}

int graft__dist_size(const unsigned char *comm, char *msg) {
  int n = 0;
  pthread_mutex_lock(&mpi_lock);
  int err = MPI_Comm_size(comm_of(comm), &n);
  pthread_mutex_unlock(&mpi_lock);
  if (err != MPI_SUCCESS) {
    mpi_fail(msg, "MPI_Comm_size", err);
    return 0;
  }
  return n;
}

graft_status graft__dist_iallreduce(const unsigned char *comm, void *buf, int64_t count,
                                    graft_dtype dt, graft__dist_req *req, char *msg) {
  if (count > INT_MAX) {
    graft__msgf(msg, "a bucket of %lld elements is more than one MPI call takes (%d): use "
                "smaller buckets", (long long)count, INT_MAX);
    return GRAFT_EUNSUPPORTED;
  }
  MPI_Request r;
  pthread_mutex_lock(&mpi_lock);
  int err = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, dt == GRAFT_F64 ? MPI_DOUBLE : MPI_FLOAT,
                           MPI_SUM, comm_of(comm), &r);
  pthread_mutex_unlock(&mpi_lock);
  if (err != MPI_SUCCESS) return mpi_fail(msg, "MPI_Iallreduce", err);
  memcpy(req->b, &r, sizeof r);
  return GRAFT_OK;
}

int graft__dist_test(graft__dist_req *req, int try_lock, char *msg) {
  if (try_lock) {
    if (pthread_mutex_trylock(&mpi_lock)) return 0;
  } else {
    pthread_mutex_lock(&mpi_lock);
  }
  MPI_Request r;
  memcpy(&r, req->b, sizeof r);
  int done = 0, err = MPI_Test(&r, &done, MPI_STATUS_IGNORE);
  memcpy(req->b, &r, sizeof r);
  pthread_mutex_unlock(&mpi_lock);
  if (err != MPI_SUCCESS) return (int)mpi_fail(msg, "MPI_Test", err);
  return done != 0;
}

static graft_status timed_out(char *msg, int64_t timeout_s) {
  graft__msgf(msg, "no answer from the other ranks in %lld s (GRAFT_MPI_TIMEOUT; a rank may have "
              "failed before its first call traced, or stopped calling); the communicator holds "
              "an unfinished collective and cannot be used again (MPI_Abort)",
              (long long)timeout_s);
  return GRAFT_EIO;
}

graft_status graft__dist_wait(graft__dist_req *req, double start_us, int64_t timeout_s,
                              char *msg) {
  for (;;) {
    int done = graft__dist_test(req, 0, msg);
    if (done < 0) return (graft_status)done;
    if (done) return GRAFT_OK;
    if (graft__now_us() - start_us > (double)timeout_s * 1e6) return timed_out(msg, timeout_s);
    sched_yield();
  }
}

graft_status graft__dist_vote(const unsigned char *comm, int64_t timeout_s, graft_status *st,
                              int *who, char *msg) {
  MPI_Comm c = comm_of(comm);
  int rank = 0, size = 0;
  pthread_mutex_lock(&mpi_lock);
  int err = MPI_Comm_rank(c, &rank);
  if (err == MPI_SUCCESS) err = MPI_Comm_size(c, &size);
  pthread_mutex_unlock(&mpi_lock);
  if (err != MPI_SUCCESS) return mpi_fail(msg, "MPI_Comm_rank", err);
  /* maxima: any failure, the lowest failing rank (size - rank), a status */
  int failed = *st != GRAFT_OK;
  int v[3] = {failed, failed ? size - rank : 0, failed ? -(int)*st : 0};
  double t0 = graft__now_us();
  MPI_Request r;
  pthread_mutex_lock(&mpi_lock);
  err = MPI_Iallreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MAX, c, &r);
  pthread_mutex_unlock(&mpi_lock);
  if (err != MPI_SUCCESS) return mpi_fail(msg, "MPI_Iallreduce", err);
  graft__dist_req q;
  memcpy(q.b, &r, sizeof r);
  graft_status ws = graft__dist_wait(&q, t0, timeout_s, msg);
  if (ws) return ws;
  *st = v[0] ? (graft_status)-v[2] : GRAFT_OK;
  *who = v[0] ? size - v[1] : -1;
  return GRAFT_OK;
}

/* ---- the public API ------------------------------------------------------ */

/* MPI must be running at MPI_THREAD_SERIALIZED or more; NULL when it is,
 * else the status, with the reason in msg. */
static graft_status mpi_ready(const char *fn, char *msg, size_t len) {
  int init = 0, fin = 0, level = MPI_THREAD_SINGLE;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) {
    snprintf(msg, len, "%s: MPI is %s (expected the caller's MPI_Init_thread before, "
             "MPI_Finalize after)", fn, fin ? "finalized" : "not initialized");
    return GRAFT_EMISUSE;
  }
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_SERIALIZED) {
    snprintf(msg, len, "%s: MPI runs at thread level %s (expected MPI_THREAD_SERIALIZED or "
             "MPI_THREAD_MULTIPLE from MPI_Init_thread: graft's workers call MPI, one at a time)",
             fn, level == MPI_THREAD_FUNNELED ? "MPI_THREAD_FUNNELED" : "MPI_THREAD_SINGLE");
    return GRAFT_EUNSUPPORTED;
  }
  return GRAFT_OK;
}

/* MPI_COMM_NULL would reach MPI_Comm_size when the plan is compiled,
 * whose default error handler aborts the process. */
static graft_status comm_null(const char *fn, MPI_Comm comm, char *msg, size_t len) {
  if (comm != MPI_COMM_NULL) return GRAFT_OK;
  snprintf(msg, len, "%s: comm is MPI_COMM_NULL (expected a communicator)", fn);
  return GRAFT_EINVAL;
}

static graft_status trace_ready(graft_trace *t, const char *fn, MPI_Comm comm) {
  if (!t) return graft__fail(GRAFT_EINVAL, "%s: t is NULL (expected a trace)", fn);
  if (t->status) return t->status;
  char msg[GRAFT__MSG_LEN];
  graft_status st = mpi_ready(fn, msg, sizeof msg);
  if (!st) st = comm_null(fn, comm, msg, sizeof msg);
  return st ? graft_trace_fail(t, st, "%s", msg) : GRAFT_OK;
}

GRAFT_API graft_value *graft_allreduce_mean(graft_trace *t, MPI_Comm comm, graft_value *x) {
  if (!t) return NULL;
  if (trace_ready(t, "graft_allreduce_mean", comm)) return GRAFT__POISON;
  if (!x) {
    graft_trace_fail(t, GRAFT_EINVAL, "allreduce_mean: x is NULL (expected a value)");
    return GRAFT__POISON;
  }
  unsigned char b[GRAFT__COMM_BYTES];
  comm_bytes(comm, b);
  graft_value *y = NULL;
  return graft__coll_emit(t, b, 1, &x, &y, 0, 0) ? GRAFT__POISON : y;
}

GRAFT_API graft_status graft_allreduce_mean_n(graft_trace *t, MPI_Comm comm, int n,
                                              graft_value *const *xs, graft_value **out,
                                              const graft_allreduce_opts *opts) {
  graft_status st = trace_ready(t, "graft_allreduce_mean_n", comm);
  if (st) return st;
  unsigned char b[GRAFT__COMM_BYTES];
  comm_bytes(comm, b);
  return graft__coll_emit(t, b, n, xs, out, opts ? opts->bucket_bytes : 0, 0);
}

GRAFT_API graft_status graft_module_allreduce_gradients(graft_trace *t, const graft_module *m,
                                                        MPI_Comm comm, int n,
                                                        graft_value *const *grads,
                                                        graft_value **out,
                                                        const graft_allreduce_opts *opts) {
  static const char fn[] = "graft_module_allreduce_gradients";
  graft_status st = trace_ready(t, fn, comm);
  if (st) return st;
  if (!m || (n && (!grads || !out)))
    return graft_trace_fail(t, GRAFT_EINVAL, "%s: %s is NULL (expected %s)", fn,
                            !m ? "m" : !grads ? "grads" : "out",
                            !m ? "a module" : "an array of n gradients");
  int64_t nv = 0;
  if ((st = graft_module_trainable_variables(m, 0, NULL, &nv)))
    return graft_trace_fail(t, st, "%s: %s", fn, graft_last_errmsg());
  if (nv != n)
    return graft_trace_fail(t, GRAFT_EINVAL, "%s: n = %d gradients for module '%s', which has "
                            "%lld trainable variables (expected one gradient, or NULL, each)", fn,
                            n, graft_module_name(m), (long long)nv);
  graft_variable *few[32], **vs = n > 32 ? graft__malloc((size_t)n * sizeof *vs) : few;
  if (!vs) return graft_trace_fail(t, GRAFT_ENOMEM, "%s: out of memory", fn);
  st = graft_module_trainable_variables(m, n, vs, &nv);
  for (int i = 0; i < n && !st; i++) {
    if (!grads[i] || graft_value_is_poison(grads[i])) continue;
    const graft_tensor *v = vs[i]->value;
    int r = graft_value_rank(grads[i]);
    if (graft_value_dtype(grads[i]) != graft_tensor_dtype(v))
      st = graft_trace_fail(t, GRAFT_EDTYPE, "%s: gradient %d is %s, variable '%s' is %s", fn, i,
                            graft_dtype_name(graft_value_dtype(grads[i])), vs[i]->name,
                            graft_dtype_name(graft_tensor_dtype(v)));
    else if (r != graft_tensor_rank(v) ||
             (r && memcmp(graft_value_shape(grads[i]), graft_tensor_shape(v),
                          (size_t)r * sizeof(int64_t)))) {
      char a[96], b[96];
      graft__shape_str(a, sizeof a, r, graft_value_shape(grads[i]));
      graft__shape_str(b, sizeof b, graft_tensor_rank(v), graft_tensor_shape(v));
      st = graft_trace_fail(t, GRAFT_ESHAPE, "%s: gradient %d has shape %s, variable '%s' %s "
                            "(expected the variable's)", fn, i, a, vs[i]->name, b);
    }
  }
  if (vs != few) graft__free(vs);
  if (st) return t->status ? t->status : graft_trace_fail(t, st, "%s: %s", fn, graft_last_errmsg());
  unsigned char b[GRAFT__COMM_BYTES];
  comm_bytes(comm, b);
  return graft__coll_emit(t, b, n, grads, out, opts ? opts->bucket_bytes : 0, 1);
}

/* ---- outside calls: broadcast and replica checks ------------------------- */

/* Run a non-blocking collective started under the lock to completion. */
static graft_status finish(MPI_Request r, int64_t timeout_s, char *msg) {
  graft__dist_req q;
  memcpy(q.b, &r, sizeof r);
  return graft__dist_wait(&q, graft__now_us(), timeout_s, msg);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
  return h;
}

/* The variables of m and a hash of their names, dtypes, shapes (and, with
 * values, bytes). */
static graft_status module_hash(const graft_module *m, int values, graft_variable ***vs,
                                int64_t *n, uint64_t *h) {
  *vs = NULL;
  graft_status st = graft_module_variables(m, 0, NULL, n);
  if (st) return st;
  *vs = graft__malloc((size_t)(*n ? *n : 1) * sizeof **vs);
  if (!*vs) return GRAFT_ENOMEM;
  if ((st = graft_module_variables(m, *n, *vs, n))) return st;
  uint64_t x = 0xcbf29ce484222325ull;
  for (int64_t i = 0; i < *n; i++) {
    const graft_tensor *v = (*vs)[i]->value;
    int32_t dt = graft_tensor_dtype(v), r = graft_tensor_rank(v);
    x = fnv(x, (*vs)[i]->name, strlen((*vs)[i]->name) + 1);
    x = fnv(x, &dt, sizeof dt);
    x = fnv(x, &r, sizeof r);
    x = fnv(x, graft_tensor_shape(v), (size_t)r * sizeof(int64_t));
    if (values)
      x = fnv(x, graft_tensor_data(v), (size_t)graft_tensor_numel(v) * graft_dtype_size(dt));
  }
  *h = x;
  return GRAFT_OK;
}

/* *same = 1 when h is equal on every rank of c. */
static graft_status agree(MPI_Comm c, uint64_t h, int64_t timeout_s, int *same, char *msg) {
  uint64_t v[2] = {h, ~h}; /* maxima: the largest h and the complement of the smallest */
  MPI_Request r;
  pthread_mutex_lock(&mpi_lock);
  int err = MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, c, &r);
  pthread_mutex_unlock(&mpi_lock);
  if (err != MPI_SUCCESS) return mpi_fail(msg, "MPI_Iallreduce", err);
  graft_status st = finish(r, timeout_s, msg);
  *same = v[0] == ~v[1];
  return st;
}

static int64_t env_timeout(void) {
  graft__config cfg;
  char msg[GRAFT__MSG_LEN];
  if (graft__config_parse(NULL, &cfg, msg)) return GRAFT__MPI_TIMEOUT;
  int64_t s = cfg.mpi_timeout;
  graft__config_free(&cfg);
  return s;
}

GRAFT_API graft_status graft_module_broadcast(graft_module *m, MPI_Comm comm, int root) {
  static const char fn[] = "graft_module_broadcast";
  char msg[GRAFT__MSG_LEN];
  graft_status st = mpi_ready(fn, msg, sizeof msg);
  if (!st) st = comm_null(fn, comm, msg, sizeof msg);
  if (st) return graft__fail(st, "%s", msg);
  if (!m) return graft__fail(GRAFT_EINVAL, "%s: m is NULL (expected a module)", fn);
  int size = 0;
  pthread_mutex_lock(&mpi_lock);
  int err = MPI_Comm_size(comm, &size);
  pthread_mutex_unlock(&mpi_lock);
  if (err != MPI_SUCCESS) return graft__fail(mpi_fail(msg, fn, err), "%s", msg);
  if (root < 0 || root >= size)
    return graft__fail(GRAFT_EINVAL, "%s: root %d (expected a rank in 0..%d)", fn, root, size - 1);
  int64_t timeout = env_timeout(), n = 0;
  graft_variable **vs;
  uint64_t h = 0;
  st = module_hash(m, 0, &vs, &n, &h);
  int same = 0;
  /* every rank joins the agreement, even one that failed to list (a
   * status no hash has) */
  if (st) h = (uint64_t)(int64_t)st;
  graft_status ast = agree(comm, h, timeout, &same, msg);
  if (!ast && !st && !same)
    graft__msgf(msg, "%s: the ranks' modules differ in their variables (names, dtypes or shapes; "
                "'%s' here): nothing changed", fn, graft_module_name(m));
  if (ast || st || !same) {
    graft__free(vs);
    if (st) return graft__fail(st, "%s: %s", fn, graft_last_errmsg());
    return graft__fail(ast ? ast : GRAFT_ESHAPE, "%s", msg);
  }
  for (int64_t i = 0; i < n && !st; i++) {
    const graft_tensor *v = vs[i]->value;
    unsigned char *p = graft_tensor_data(v);
    int64_t bytes = graft_tensor_numel(v) * (int64_t)graft_dtype_size(graft_tensor_dtype(v));
    for (int64_t at = 0; at < bytes && !st; at += INT_MAX) {
      int len = (int)(bytes - at < INT_MAX ? bytes - at : INT_MAX);
      MPI_Request r;
      pthread_mutex_lock(&mpi_lock);
      err = MPI_Ibcast(p + at, len, MPI_BYTE, root, comm, &r);
      pthread_mutex_unlock(&mpi_lock);
      st = err != MPI_SUCCESS ? mpi_fail(msg, "MPI_Ibcast", err) : finish(r, timeout, msg);
    }
  }
  graft__free(vs);
  return st ? graft__fail(st, "%s: %s", fn, msg) : GRAFT_OK;
}

GRAFT_API graft_status graft_module_replicas_equal(const graft_module *m, MPI_Comm comm,
                                                   int *equal) {
  static const char fn[] = "graft_module_replicas_equal";
  char msg[GRAFT__MSG_LEN];
  graft_status st = mpi_ready(fn, msg, sizeof msg);
  if (!st) st = comm_null(fn, comm, msg, sizeof msg);
  if (st) return graft__fail(st, "%s", msg);
  if (!m || !equal)
    return graft__fail(GRAFT_EINVAL, "%s: %s is NULL", fn, !m ? "m" : "equal");
  int64_t n = 0;
  graft_variable **vs;
  uint64_t h = 0;
  st = module_hash(m, 1, &vs, &n, &h);
  graft__free(vs);
  if (st) h = (uint64_t)(int64_t)st;
  int same = 0;
  graft_status ast = agree(comm, h, env_timeout(), &same, msg);
  if (st) return graft__fail(st, "%s: %s", fn, graft_last_errmsg());
  if (ast) return graft__fail(ast, "%s: %s", fn, msg);
  *equal = same;
  return GRAFT_OK;
}
