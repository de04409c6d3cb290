/* The `allreduce` fuzz target: graft/mpi.h's collectives inside traced
 * functions, in a process that is one MPI rank (a singleton: MPI is
 * initialised at MPI_THREAD_SERIALIZED before the first input and kept
 * until exit).  Over one rank the mean is the value itself, so every
 * successful call must give exactly the bits of the same function traced
 * without the collectives (the reference: the harness's callback with
 * `skip` set, on a second, identical module tree).
 *
 * Input (allreduce_target.h names every byte; each is taken modulo its
 * count of choices, and bytes past the end read 0):
 *   header   threads (1-4), scheduler (ws omp seq), fusion (on off), grain
 *            (default 1 4 64), the API (graft_allreduce_mean per value,
 *            graft_allreduce_mean_n in two calls split at `split`,
 *            graft_module_allreduce_gradients), bucket_bytes (0, 1, 24,
 *            256, INT64_MAX, -1), the communicator (WORLD, SELF, or WORLD
 *            then SELF or MPI_COMM_NULL from `split` on), a declared
 *            signature (none, concrete, or -1 for axis 0 of every value:
 *            a symbolic batch), the batch of the first two calls and of
 *            the third, flags (an extra softmax_cross_entropy output
 *            traced before or after the values, an optimizer step, out
 *            aliasing xs and NULL arrays for n = 0, the collectives inside
 *            a graft_remat body, graft_module_broadcast and
 *            graft_module_replicas_equal after the calls, root 0 or 1),
 *            the optimizer kind, n's offset (0 +1 -1 0) from the module's
 *            trainable count or the second graft_allreduce_mean_n call's
 *            values, the number of values (0-40: more than graft keeps on
 *            its stack) and a data seed;
 *   values   dtype (f32 f64 i32, or a NULL entry), rank 0-3 and dims (2 3
 *            1 0 5 7), an op before the collective (none, scale, x + x,
 *            sum over axis 0, sum of all, neg) and one after (none, scale,
 *            + the value before, - the value before, sum of all, or the
 *            value before alone: the result unread), and for
 *            graft_module_allreduce_gradients its variable: matching,
 *            another shape, another dtype, or matching behind a
 *            non-trainable decoy, in the module or its submodule (so the
 *            trainable order is not the values' order);
 *   calls    one flags byte per call: the caller passes output tensors
 *            (the first of a wrong dtype), a label out of range (the call
 *            fails while running, after or before buckets were posted), an
 *            input of a wrong dtype (refused before running), the k-th
 *            allocation of the call refused (budget.h: GRAFT_ENOMEM, or a
 *            success when the call needs fewer).
 * The function is called with two data sets, and with a symbolic
 * signature a third time at another batch size.
 *
 * Findings (fz_die), besides what the sanitizers report: a status other
 * than the one the headers give for the input (the harness models the
 * checks: MPI_COMM_NULL, a NULL x, n < 0, an integer value, a negative
 * bucket_bytes, a control-flow body, a second communicator, n unlike the
 * trainable count, a gradient whose dtype or shape differs from its
 * variable's; the first of them in trace order decides, and within one
 * call any that applies); a refusal whose message does not name the op or
 * variable and what was expected; a success whose outputs or variables
 * (optimizer slots included) differ from the reference's in dtype, shape
 * or any bit (two NaNs count as equal), or whose output shapes differ from
 * the model's; a failed call that changed a variable or an output tensor
 * the caller passed; a broadcast that changed a variable or replicas found
 * unequal over one rank; graft blocks (counted by the allocator hook) left
 * allocated after the input. */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "allreduce_target.h"
#include "budget.h"
#include "fuzz.h"
#include "graft.h"
#include "graft/control.h"
#include "graft/mpi.h"
#include "graft/optim.h"
#include "reader.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AR_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(AR_ASAN)
#define AR_ASAN 1
#endif
#ifdef AR_ASAN
#include <sanitizer/lsan_interface.h>
#endif

#define MAX_IN (AR_MAX_VALUES + 2)
#define MAX_OUT (AR_MAX_VALUES + 1)
#define MAX_VARS (2 * AR_MAX_VALUES)
#define N_RUNTIMES (4 * 3 * 2 * 4)

static const int64_t dim_of[AR_DIM_COUNT] = {2, 3, 1, 0, 5, 7};
static const int64_t grain_of[4] = {0, 1, 4, 64};
static const char *const sched_name[3] = {"ws", "omp", "seq"};
static const char *const api_name[AR_API_COUNT] = {"graft_allreduce_mean", "graft_allreduce_mean_n",
                                                   "graft_module_allreduce_gradients"};
static const int ndelta_of[4] = {0, 1, -1, 0};

static int verbose;
static graft_runtime *runtimes[N_RUNTIMES];

#define LOG(...)                                \
  do {                                          \
    if (verbose) fprintf(stderr, __VA_ARGS__);  \
  } while (0)

/* ---- the decoded input ------------------------------------------------ */

typedef struct value_spec {
  int null;                      /* a NULL entry */
  graft_dtype dt;
  int rank;
  int64_t dims[AR_MAX_RANK];     /* axis 0 of a symbolic value: the call's batch */
  int sym;                       /* axis 0 is the symbolic batch */
  int pre, post;
  int var, in_sub;               /* its variable (module API) */
  int input, output;             /* function input and output, -1: none */
} value_spec;

typedef struct spec {
  int threads, sched, fusion, grain;
  int api, bucket_mode, comm, split, sig;
  int64_t bucket_bytes, batch, batch2;
  unsigned flags;
  int optim_kind, ndelta;
  int n;
  value_spec v[AR_MAX_VALUES];
  uint64_t seed;
  unsigned call[AR_CALLS];
  int n_calls, n_in, n_out;
  int n_train, order[AR_MAX_VALUES]; /* the value of each trainable variable, in walk order */
  int optim;                         /* an optimizer step is traced */
  int in_body;                       /* the collectives are traced in a remat body */
} spec;

static void decode(fz_reader *r, spec *s) {
  static const int64_t bucket_of[AR_BUCKET_COUNT] = {0, 1, 24, 256, INT64_MAX, -1};
  unsigned h[AR_H_COUNT];
  for (int i = 0; i < AR_H_COUNT; i++) h[i] = fz_u8(r);
  memset(s, 0, sizeof *s);
  s->threads = 1 + (int)(h[AR_H_THREADS] % 4);
  s->sched = (int)(h[AR_H_SCHED] % 3);
  s->fusion = (int)(h[AR_H_FUSION] % 2);
  s->grain = (int)(h[AR_H_GRAIN] % 4);
  s->api = (int)(h[AR_H_API] % AR_API_COUNT);
  s->bucket_mode = (int)(h[AR_H_BUCKET] % AR_BUCKET_COUNT);
  s->bucket_bytes = bucket_of[s->bucket_mode];
  s->comm = (int)(h[AR_H_COMM] % AR_COMM_COUNT);
  s->sig = (int)(h[AR_H_SIG] % AR_SIG_COUNT);
  s->batch = dim_of[h[AR_H_BATCH] % AR_DIM_COUNT];
  s->batch2 = dim_of[h[AR_H_BATCH2] % AR_DIM_COUNT];
  if (s->batch2 == s->batch) s->batch2 = s->batch + 1;
  s->flags = h[AR_H_FLAGS];
  s->optim_kind = (int)(h[AR_H_OPTIM] % 5);
  s->ndelta = ndelta_of[h[AR_H_NDELTA] % 4];
  unsigned nb = h[AR_H_NVALUES];
  s->n = (int)(nb < 200 ? nb % 7 : 7 + (nb - 200) % (AR_MAX_VALUES - 6));
  s->split = (int)(h[AR_H_SPLIT] % (unsigned)(s->n + 1));
  s->seed = h[AR_H_SEED];
  for (int i = 0; i < s->n; i++) {
    value_spec *v = &s->v[i];
    unsigned dt = fz_pick(r, AR_DT_CHOICES);
    v->null = dt == AR_DT_NULL;
    v->dt = dt < AR_DT_F64 ? GRAFT_F32 : dt < AR_DT_I32 ? GRAFT_F64 : dt == AR_DT_I32 ? GRAFT_I32
                                                                                    : GRAFT_F32;
    v->rank = (int)fz_pick(r, AR_MAX_RANK + 1);
    for (int d = 0; d < v->rank; d++) v->dims[d] = dim_of[fz_pick(r, AR_DIM_COUNT)];
    v->sym = s->sig == AR_SIG_SYMBOLIC && v->rank > 0;
    if (v->sym) v->dims[0] = s->batch;
    v->pre = (int)fz_pick(r, AR_PRE_COUNT);
    v->post = (int)fz_pick(r, AR_POST_COUNT);
    unsigned m = fz_u8(r);
    v->var = (int)(m % AR_VAR_COUNT);
    v->in_sub = (m & AR_VAR_IN_SUB) != 0;
    v->input = v->output = -1;
    if (!v->null) {
      v->input = s->n_in++;
      v->output = s->n_out++;
    }
  }
  s->in_body = (s->flags & AR_F_IN_BODY) && s->n_in > 0; /* remat takes one value or more */
  if (s->flags & AR_F_LOSS) s->n_in += 2; /* logits, labels */
  s->n_out++;                             /* the loss, or a constant */
  s->n_calls = s->sig == AR_SIG_SYMBOLIC ? 3 : 2;
  for (int c = 0; c < AR_CALLS; c++) s->call[c] = fz_u8(r);
  if (s->api == AR_API_MODULE) {
    /* graft_module_trainable_variables: the module's own variables in
     * creation order, then its submodule's */
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < s->n; i++)
        if (s->v[i].in_sub == pass) s->order[s->n_train++] = i;
    int all_float = 1;
    for (int k = 0; k < s->n_train; k++) {
      const value_spec *v = &s->v[s->order[k]];
      graft_dtype vdt = v->var == AR_VAR_DTYPE ? (v->dt == GRAFT_F32 ? GRAFT_F64 : GRAFT_F32) : v->dt;
      all_float &= vdt != GRAFT_I32;
    }
    s->optim = (s->flags & AR_F_OPTIM) && all_float && s->n_train > 0;
  }
}

/* ---- the model: shapes, and what the trace must refuse ----------------- */

/* The value the collective gets: value i after its pre op, at batch b. */
static void pre_shape(const value_spec *v, int64_t b, int *rank, int64_t *dims, int *sym) {
  *rank = v->rank;
  memcpy(dims, v->dims, sizeof v->dims);
  if (v->sym) dims[0] = b;
  *sym = v->sym;
  if (v->null) return;
  if (v->pre == AR_PRE_SUM_AXIS0 && v->rank > 0) {
    for (int d = 1; d < v->rank; d++) dims[d - 1] = dims[d];
    (*rank)--;
    *sym = 0;
  } else if (v->pre == AR_PRE_SUM_ALL) {
    *rank = 0;
    *sym = 0;
  }
}

/* The variable of value i (module API): dtype and shape. */
static void var_spec(const spec *s, const value_spec *v, graft_dtype *dt, int *rank, int64_t *dims) {
  int sym;
  pre_shape(v, s->batch, rank, dims, &sym);
  *dt = v->dt;
  if (v->var == AR_VAR_DTYPE) *dt = v->dt == GRAFT_F32 ? GRAFT_F64 : GRAFT_F32;
  if (v->var == AR_VAR_SHAPE) {
    if (*rank == 0) {
      *rank = 1;
      dims[0] = 1;
    } else {
      dims[*rank - 1]++;
    }
  }
}

static void shape_text(char *buf, size_t len, int rank, const int64_t *dims) {
  size_t at = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < rank && at < len; d++)
    at += (size_t)snprintf(buf + at, len - at, "%s%lld", d ? "," : "", (long long)dims[d]);
  if (at < len) snprintf(buf + at, len - at, "]");
}

/* A refusal the model expects: one status and what its message must name. */
#define MAX_NEEDLES 4
typedef struct refusal {
  graft_status st;
  char needle[MAX_NEEDLES][80];
} refusal;

/* The statuses one API call may fail with (any of them: their order within
 * one call is graft's choice), or none. */
typedef struct expect {
  int n;
  refusal r[3];
  int reached; /* R_* of the first refusal */
} expect;

enum {
  R_MEAN_OK, R_N_OK, R_MODULE_OK, R_OPTIM_OK, R_MULTI_BUCKET, R_ZERO_ELEMS, R_SYMBOLIC,
  R_SCHED_WS, R_SCHED_OMP, R_SCHED_SEQ, R_THREADS, R_FUSED, R_UNFUSED, R_SELF, R_NULL_ENTRY,
  R_ALIAS, R_GIVEN, R_NULL_X, R_INT, R_BUCKET_NEG, R_COMM, R_MOD_N, R_MOD_DTYPE, R_MOD_SHAPE,
  R_DATA_FAIL, R_BAD_INPUT, R_BAD_OUT, R_COMM_NULL, R_N_NEG, R_DISCARD, R_MANY, R_MANY_MODULE,
  R_BROADCAST, R_BROADCAST_BAD, R_IN_BODY, R_ENOMEM, R_COUNT
};
static const char *const reached_name[R_COUNT] = {
    "graft_allreduce_mean succeeding", "graft_allreduce_mean_n succeeding",
    "graft_module_allreduce_gradients succeeding", "an optimizer step on all-reduced gradients",
    "several buckets in one call", "a zero-element value all-reduced",
    "a call at another symbolic batch size", "a success under ws", "a success under omp",
    "a success under seq", "a success on 3 or 4 threads",
    "a success with fusion on and ops around the collective", "a success with fusion off",
    "a success on MPI_COMM_SELF",
    "a NULL entry passed through", "out aliasing xs", "outputs the caller passed",
    "a NULL x refused", "an integer value refused", "a negative bucket_bytes refused",
    "a second communicator refused", "a wrong n refused", "a gradient of the wrong dtype refused",
    "a gradient of the wrong shape refused", "a call failing on data after tracing collectives",
    "an input refused before running", "a caller's output of the wrong dtype refused",
    "MPI_COMM_NULL refused", "n < 0 refused", "a success with a collective's result unread",
    "a success of 17 or more values in one call",
    "a success of a module of more than 32 trainable variables", "a broadcast",
    "a broadcast refused", "a collective in a control-flow body refused",
    "an allocation failure"};
static int reached[R_COUNT];

static void add(expect *e, int reach, graft_status st, const char *a, const char *b, const char *c,
                const char *d) {
  if (!e->n) e->reached = reach;
  refusal *r = &e->r[e->n++];
  memset(r, 0, sizeof *r);
  r->st = st;
  const char *in[MAX_NEEDLES] = {a, b, c, d};
  for (int i = 0; i < MAX_NEEDLES; i++)
    if (in[i]) snprintf(r->needle[i], sizeof r->needle[i], "%s", in[i]);
}

/* The communicator of the API call that starts at value i. */
static MPI_Comm comm_at(const spec *s, int i) {
  int module = s->api == AR_API_MODULE, after = i >= s->split;
  switch (s->comm) {
  case AR_COMM_SELF: return MPI_COMM_SELF;
  case AR_COMM_SWITCH: return after && !module ? MPI_COMM_SELF : MPI_COMM_WORLD;
  case AR_COMM_NULL_AFTER: return after || module ? MPI_COMM_NULL : MPI_COMM_WORLD;
  default: return MPI_COMM_WORLD;
  }
}

/* The API's own first check: MPI_COMM_NULL. */
static void comm_check(const spec *s, MPI_Comm c, expect *e) {
  if (c == MPI_COMM_NULL)
    add(e, R_COMM_NULL, GRAFT_EINVAL, api_name[s->api], "MPI_COMM_NULL", "expected", NULL);
}

/* One collective call over values [lo, lo + count) (graph/collective.c's
 * checks; values past the last are NULL); *emitted, *first: whether an
 * earlier call emitted a bucket, and on which communicator. */
static void coll_checks(const spec *s, int lo, int count, MPI_Comm c, int *emitted,
                        MPI_Comm *first, expect *e) {
  if (count < 0) {
    add(e, R_N_NEG, GRAFT_EINVAL, "allreduce_mean", "n < 0", "expected", NULL);
    return;
  }
  int hi = lo + count < s->n ? lo + count : s->n;
  if (s->api != AR_API_MEAN && s->bucket_bytes < 0)
    add(e, R_BUCKET_NEG, GRAFT_EINVAL, "allreduce_mean", "bucket_bytes", "expected", NULL);
  if (s->in_body)
    add(e, R_IN_BODY, GRAFT_EUNSUPPORTED, "allreduce_mean", "control-flow body", NULL, NULL);
  if (*emitted && c != *first)
    add(e, R_COMM, GRAFT_EUNSUPPORTED, "allreduce_mean", "communicator", "expected", NULL);
  int any = 0;
  for (int i = lo; i < hi; i++) {
    const value_spec *v = &s->v[s->api == AR_API_MODULE ? s->order[i] : i];
    if (v->null) continue;
    if (v->dt == GRAFT_I32) {
      add(e, R_INT, GRAFT_EDTYPE, "allreduce_mean", "i32", "expected f32 or f64", NULL);
      break;
    }
    any = 1;
  }
  if (!e->n && any && !*emitted) {
    *emitted = 1;
    *first = c;
  }
}

/* What tracing the step must refuse (e->n 0: nothing). */
static void expect_trace(const spec *s, expect *e) {
  memset(e, 0, sizeof *e);
  int emitted = 0;
  MPI_Comm first = MPI_COMM_NULL;
  switch (s->api) {
  case AR_API_MEAN:
    for (int i = 0; i < s->n && !e->n; i++) {
      comm_check(s, comm_at(s, i), e);
      if (!e->n && s->v[i].null)
        add(e, R_NULL_X, GRAFT_EINVAL, "allreduce_mean", "x is NULL", "expected", NULL);
      if (!e->n) coll_checks(s, i, 1, comm_at(s, i), &emitted, &first, e);
    }
    break;
  case AR_API_N:
    comm_check(s, comm_at(s, 0), e);
    if (!e->n) coll_checks(s, 0, s->split, comm_at(s, 0), &emitted, &first, e);
    if (!e->n) comm_check(s, comm_at(s, s->split), e);
    if (!e->n)
      coll_checks(s, s->split, s->n - s->split + s->ndelta, comm_at(s, s->split), &emitted, &first, e);
    break;
  case AR_API_MODULE: {
    static const char fn[] = "graft_module_allreduce_gradients";
    comm_check(s, comm_at(s, 0), e);
    if (e->n) break;
    if (s->ndelta) {
      char n[32];
      snprintf(n, sizeof n, "n = %d", s->n_train + s->ndelta);
      add(e, R_MOD_N, GRAFT_EINVAL, fn, n, "'net'", "expected");
      break;
    }
    for (int k = 0; k < s->n_train && !e->n; k++) {
      const value_spec *v = &s->v[s->order[k]];
      if (v->null) continue;
      char name[64], want[64];
      snprintf(name, sizeof name, "'root/net/%sv%d'", v->in_sub ? "sub/" : "", s->order[k]);
      graft_dtype vdt;
      int vrank, rank, sym;
      int64_t vdims[AR_MAX_RANK + 1], dims[AR_MAX_RANK];
      var_spec(s, v, &vdt, &vrank, vdims);
      pre_shape(v, s->batch, &rank, dims, &sym);
      if (vdt != v->dt) {
        add(e, R_MOD_DTYPE, GRAFT_EDTYPE, fn, name, graft_dtype_name(v->dt), graft_dtype_name(vdt));
      } else if (sym || vrank != rank || (rank && memcmp(vdims, dims, (size_t)rank * sizeof *dims))) {
        shape_text(want, sizeof want, vrank, vdims);
        add(e, R_MOD_SHAPE, GRAFT_ESHAPE, fn, name, want, "expected");
      }
    }
    if (!e->n) coll_checks(s, 0, s->n_train, comm_at(s, 0), &emitted, &first, e);
    break;
  }
  }
}

/* 1 when msg names everything r asks for. */
static int names_all(const refusal *r, const char *msg) {
  for (int i = 0; i < MAX_NEEDLES; i++)
    if (r->needle[i][0] && !strstr(msg, r->needle[i])) return 0;
  return 1;
}

/* ---- data ---------------------------------------------------------------- */

/* Mostly uniform in [-4, 4), one in 16 a special value (NaN, infinities,
 * -0, a denormal, large); i32: small integers and extremes. */
static void fill(graft_tensor *t, uint64_t *seed) {
  static const double special[] = {NAN, INFINITY, -INFINITY, -0.0, 1e-310, 1e30, -3e38, 0.0};
  static const int32_t ispecial[] = {INT32_MAX, INT32_MIN, -1, 0};
  int64_t n = graft_tensor_numel(t);
  void *p = graft_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    uint64_t x = fz_mix(seed);
    int sp = (x & 15) == 0;
    double d = sp ? special[(x >> 4) % 8] : (double)(x >> 11) / (double)(1ull << 53) * 8 - 4;
    switch (graft_tensor_dtype(t)) {
    case GRAFT_F32: ((float *)p)[i] = (float)d; break;
    case GRAFT_F64: ((double *)p)[i] = d; break;
    default: ((int32_t *)p)[i] = sp ? ispecial[(x >> 4) % 4] : (int32_t)((x >> 8) % 19) - 9; break;
    }
  }
}

static graft_tensor *tensor(graft_dtype dt, int rank, const int64_t *dims) {
  graft_tensor *t = NULL;
  if (graft_tensor_create(dt, rank, dims, &t)) fz_die("graft_tensor_create: %s", graft_last_errmsg());
  return t;
}

static size_t tensor_bytes(const graft_tensor *t) {
  return (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t));
}

/* Bitwise equal, except that two NaNs are equal (which NaN an op passes
 * on is the hardware's choice). */
static int same_values(const graft_tensor *a, const graft_tensor *b) {
  graft_dtype dt = graft_tensor_dtype(a);
  int r = graft_tensor_rank(a);
  if (dt != graft_tensor_dtype(b) || r != graft_tensor_rank(b) ||
      (r && memcmp(graft_tensor_shape(a), graft_tensor_shape(b), (size_t)r * sizeof(int64_t))))
    return 0;
  size_t bytes = tensor_bytes(a);
  const unsigned char *x = graft_tensor_data(a), *y = graft_tensor_data(b);
  if (!bytes || !memcmp(x, y, bytes)) return 1;
  size_t es = graft_dtype_size(dt);
  for (size_t i = 0; i < bytes; i += es) {
    if (!memcmp(x + i, y + i, es)) continue;
    if (dt == GRAFT_F32) {
      float p, q;
      memcpy(&p, x + i, es), memcpy(&q, y + i, es);
      if (isnan(p) && isnan(q)) continue;
    } else if (dt == GRAFT_F64) {
      double p, q;
      memcpy(&p, x + i, es), memcpy(&q, y + i, es);
      if (isnan(p) && isnan(q)) continue;
    }
    return 0;
  }
  return 1;
}

/* ---- module trees ------------------------------------------------------ */

/* root { net { v<i>..., decoys d<i>, sub { v<i>... } }, opt } */
typedef struct tree {
  graft_module *root, *net, *sub, *opt;
  graft_variable *train[AR_MAX_VALUES]; /* in trainable order */
} tree;

static void tree_make(const spec *s, tree *t) {
  memset(t, 0, sizeof *t);
  if (s->api != AR_API_MODULE) return;
  if (graft_module_create(NULL, "root", &t->root) || graft_module_create(t->root, "net", &t->net) ||
      graft_module_create(t->net, "sub", &t->sub))
    fz_die("graft_module_create: %s", graft_last_errmsg());
  graft_variable *of[AR_MAX_VALUES];
  uint64_t seed = s->seed * 7919 + 17;
  for (int i = 0; i < s->n; i++) {
    const value_spec *v = &s->v[i];
    graft_module *owner = v->in_sub ? t->sub : t->net;
    graft_dtype dt;
    int rank;
    int64_t dims[AR_MAX_RANK + 1];
    var_spec(s, v, &dt, &rank, dims);
    graft_tensor *init = tensor(dt, rank, dims);
    fill(init, &seed);
    char name[16];
    graft_variable *h = NULL;
    if (v->var == AR_VAR_DECOY) {
      snprintf(name, sizeof name, "d%d", i);
      if (graft_variable_create(owner, name, dt, rank, dims, graft_tensor_data(init), 0, &h))
        fz_die("graft_variable_create: %s", graft_last_errmsg());
    }
    snprintf(name, sizeof name, "v%d", i);
    if (graft_variable_create(owner, name, dt, rank, dims, graft_tensor_data(init),
                              GRAFT_VAR_TRAINABLE, &of[i]))
      fz_die("graft_variable_create: %s", graft_last_errmsg());
    graft_tensor_destroy(init);
  }
  for (int k = 0; k < s->n_train; k++) t->train[k] = of[s->order[k]];
  /* the model's trainable order is graft's */
  graft_variable *walk[AR_MAX_VALUES];
  int64_t nv = 0;
  if (graft_module_trainable_variables(t->net, AR_MAX_VALUES, walk, &nv))
    fz_die("graft_module_trainable_variables: %s", graft_last_errmsg());
  if (nv != s->n_train || (nv && memcmp(walk, t->train, (size_t)nv * sizeof *walk)))
    fz_die("graft_module_trainable_variables: %lld variables, not in the documented order",
           (long long)nv);
  if (s->optim) {
    graft_optimizer_desc d = {.kind = (graft_optimizer_kind)s->optim_kind, .lr = 0.125};
    if (graft_optimizer_create(t->root, "opt", &d, s->n_train, t->train, &t->opt))
      fz_die("graft_optimizer_create: %s", graft_last_errmsg());
  }
}

/* Every variable of the tree (optimizer slots too), in walk order. */
static int tree_vars(const tree *t, graft_variable **out) {
  int64_t n = 0;
  if (!t->root) return 0;
  if (graft_module_variables(t->root, 0, NULL, &n) || n > 8 * MAX_VARS ||
      graft_module_variables(t->root, n, out, &n))
    fz_die("graft_module_variables: %lld variables (%s)", (long long)n, graft_last_errmsg());
  return (int)n;
}

/* The bytes of every variable, one block. */
typedef struct snap {
  unsigned char *b;
  size_t len;
} snap;

static snap tree_snap(const tree *t) {
  graft_variable *vs[8 * MAX_VARS];
  int n = tree_vars(t, vs);
  snap sn = {NULL, 0};
  for (int i = 0; i < n; i++) sn.len += tensor_bytes(graft_variable_value(vs[i]));
  sn.b = malloc(sn.len ? sn.len : 1);
  if (!sn.b) fz_die("harness: out of memory");
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    const graft_tensor *v = graft_variable_value(vs[i]);
    if (tensor_bytes(v)) memcpy(sn.b + at, graft_tensor_data(v), tensor_bytes(v));
    at += tensor_bytes(v);
  }
  return sn;
}

static int snap_same(const tree *t, const snap *before) {
  snap now = tree_snap(t);
  int same = now.len == before->len && (!now.len || !memcmp(now.b, before->b, now.len));
  free(now.b);
  return same;
}

/* ---- the traced step ------------------------------------------------------ */

typedef struct tracer {
  const spec *s;
  const tree *tr;
  int skip; /* the reference: each collective is the value itself */
} tracer;

static graft_value *apply_pre(graft_trace *t, const value_spec *v, graft_value *x) {
  const int axis0 = 0;
  switch (v->pre) {
  case AR_PRE_SCALE: return graft_mul(t, x, graft_scalar(t, v->dt, v->dt == GRAFT_I32 ? 3 : 0.375));
  case AR_PRE_ADD_SELF: return graft_add(t, x, x);
  case AR_PRE_SUM_AXIS0: return v->rank ? graft_reduce_sum(t, x, 1, &axis0, 0) : x;
  case AR_PRE_SUM_ALL: return graft_reduce_sum(t, x, 0, NULL, 0);
  case AR_PRE_NEG: return graft_neg(t, x);
  default: return x;
  }
}

static graft_value *apply_post(graft_trace *t, const value_spec *v, graft_value *y, graft_value *pre) {
  switch (v->post) {
  case AR_POST_SCALE: return graft_mul(t, y, graft_scalar(t, v->dt, v->dt == GRAFT_I32 ? -2 : -0.25));
  case AR_POST_ADD_PRE: return graft_add(t, y, pre);
  case AR_POST_SUB_PRE: return graft_sub(t, y, pre);
  case AR_POST_SUM_ALL: return graft_reduce_sum(t, y, 0, NULL, 0);
  case AR_POST_DISCARD: return pre;
  default: return y;
  }
}

/* With out aliasing xs, an empty call passes no arrays at all. */
static graft_value **null_if(int alias, int n, graft_value **a) { return alias && !n ? NULL : a; }

/* y[i] = the collective of pre[i] (NULL entries: NULL), through the API
 * the input picks; the reference (skip) passes the values through. */
static void collect(graft_trace *t, const tracer *tc, graft_value *const *pre, graft_value **y) {
  const spec *s = tc->s;
  graft_allreduce_opts o = {.bucket_bytes = s->bucket_bytes};
  const int alias = (s->flags & AR_F_ALIAS) != 0;
  switch (s->api) {
  case AR_API_MEAN:
    for (int i = 0; i < s->n; i++)
      y[i] = tc->skip ? pre[i] : graft_allreduce_mean(t, comm_at(s, i), pre[i]);
    break;
  case AR_API_N: {
    graft_value *xs[AR_MAX_VALUES + 1], *res[AR_MAX_VALUES + 1] = {0}, **to = alias ? xs : res;
    memcpy(xs, pre, sizeof xs);
    if (tc->skip) {
      memcpy(to, pre, sizeof xs);
    } else {
      const int n2 = s->n - s->split + s->ndelta;
      graft_allreduce_mean_n(t, comm_at(s, 0), s->split, null_if(alias, s->split, xs),
                             null_if(alias, s->split, to), &o);
      graft_allreduce_mean_n(t, comm_at(s, s->split), n2, null_if(alias, n2, xs + s->split),
                             null_if(alias, n2, to + s->split), &o);
    }
    memcpy(y, to, sizeof xs);
    for (int i = s->n + s->ndelta; i < s->n; i++) /* in no call */
      if (i >= s->split) y[i] = pre[i];
    break;
  }
  case AR_API_MODULE: {
    graft_value *g[AR_MAX_VALUES + 1] = {0}, *res[AR_MAX_VALUES + 1] = {0}, **to = alias ? g : res;
    for (int k = 0; k < s->n_train; k++) g[k] = pre[s->order[k]];
    if (tc->skip)
      memcpy(to, g, sizeof g);
    else
      graft_module_allreduce_gradients(t, tc->tr->net, comm_at(s, 0), s->n_train + s->ndelta,
                                       null_if(alias, s->n_train + s->ndelta, g),
                                       null_if(alias, s->n_train + s->ndelta, to), &o);
    for (int k = 0; k < s->n_train; k++) y[s->order[k]] = to[k];
    break;
  }
  }
}

/* AR_F_IN_BODY: collect inside a remat region, whose inputs and outputs
 * are the values that are not NULL entries, in order. */
static graft_status body(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                         graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const tracer *tc = user;
  const spec *s = tc->s;
  graft_value *pre[AR_MAX_VALUES + 1] = {0}, *y[AR_MAX_VALUES + 1] = {0};
  for (int i = 0, k = 0; i < s->n; i++)
    if (s->v[i].input >= 0) pre[i] = in[k++];
  collect(t, tc, pre, y);
  for (int i = 0, k = 0; i < s->n; i++)
    if (s->v[i].input >= 0) out[k++] = y[i];
  return graft_trace_status(t);
}

static graft_status step(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                         graft_value **out, void *user) {
  (void)n_in;
  const tracer *tc = user;
  const spec *s = tc->s;
  graft_value *loss = NULL;
  if ((s->flags & AR_F_LOSS) && (s->flags & AR_F_LOSS_FIRST))
    loss = graft_softmax_cross_entropy(t, in[s->n_in - 2], in[s->n_in - 1]);
  graft_value *pre[AR_MAX_VALUES + 1] = {0}, *y[AR_MAX_VALUES + 1] = {0};
  graft_value *ins[AR_MAX_VALUES], *outs[AR_MAX_VALUES];
  int k = 0;
  for (int i = 0; i < s->n; i++)
    if (s->v[i].input >= 0) ins[k++] = pre[i] = apply_pre(t, &s->v[i], in[s->v[i].input]);
  if (s->in_body) {
    graft_remat(t, body, (void *)tc, k, ins, k, outs);
    for (int i = 0, j = 0; i < s->n; i++)
      if (s->v[i].input >= 0) y[i] = outs[j++];
  } else {
    collect(t, tc, pre, y);
  }
  if (s->optim) {
    graft_value *g[AR_MAX_VALUES];
    for (int j = 0; j < s->n_train; j++) g[j] = y[s->order[j]];
    graft_optimizer_apply(t, tc->tr->opt, s->n_train, g);
  }
  if ((s->flags & AR_F_LOSS) && !(s->flags & AR_F_LOSS_FIRST))
    loss = graft_softmax_cross_entropy(t, in[s->n_in - 2], in[s->n_in - 1]);
  for (int i = 0; i < s->n; i++)
    if (s->v[i].output >= 0) out[s->v[i].output] = apply_post(t, &s->v[i], y[i], pre[i]);
  out[n_out - 1] = loss ? loss : graft_scalar(t, GRAFT_F64, 1.0);
  return graft_trace_status(t);
}

/* ---- runtimes, functions, calls ------------------------------------------ */

static graft_runtime *runtime_for(const spec *s) {
  int key = ((s->threads - 1) * 3 + s->sched) * 8 + s->fusion * 4 + s->grain;
  if (runtimes[key]) return runtimes[key];
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = s->threads;
  o.sched = sched_name[s->sched];
  o.fusion = s->fusion ? "off" : "on";
  o.grain = grain_of[s->grain];
  o.bind = -1;
  o.mpi_timeout = 60;
  if (graft_runtime_create(&o, &runtimes[key]))
    fz_die("graft_runtime_create: %s", graft_last_errmsg());
  return runtimes[key];
}

static graft_function *function_for(const spec *s, const tracer *tc, graft_runtime *rt) {
  graft_dtype dts[MAX_IN];
  int ranks[MAX_IN];
  int64_t dims[MAX_IN][AR_MAX_RANK];
  const int64_t *shapes[MAX_IN];
  for (int i = 0; i < s->n; i++) {
    const value_spec *v = &s->v[i];
    if (v->input < 0) continue;
    dts[v->input] = v->dt;
    ranks[v->input] = v->rank;
    memcpy(dims[v->input], v->dims, sizeof v->dims);
    if (v->sym) dims[v->input][0] = -1;
  }
  if (s->flags & AR_F_LOSS) {
    dts[s->n_in - 2] = GRAFT_F64, ranks[s->n_in - 2] = 2;
    dims[s->n_in - 2][0] = 2, dims[s->n_in - 2][1] = 3;
    dts[s->n_in - 1] = GRAFT_I32, ranks[s->n_in - 1] = 1, dims[s->n_in - 1][0] = 2;
  }
  for (int i = 0; i < s->n_in; i++) shapes[i] = dims[i];
  graft_signature sig = {s->n_in, dts, ranks, shapes};
  graft_function_desc d = {.name = tc->skip ? "reference" : "step", .trace = step,
                           .user = (void *)tc, .n_inputs = s->n_in, .n_outputs = s->n_out,
                           .signature = s->sig != AR_SIG_NONE ? &sig : NULL};
  graft_function *f = NULL;
  if (graft_function_create(rt, &d, &f)) fz_die("graft_function_create: %s", graft_last_errmsg());
  return f;
}

/* The dtype and shape of output o at batch b. */
static void out_spec(const spec *s, int o, int64_t b, graft_dtype *dt, int *rank, int64_t *dims) {
  *dt = GRAFT_F64, *rank = 0;
  for (int i = 0; i < s->n; i++) {
    const value_spec *v = &s->v[i];
    if (v->output != o) continue;
    int sym;
    pre_shape(v, b, rank, dims, &sym);
    *dt = v->dt;
    if (v->post == AR_POST_SUM_ALL) *rank = 0;
  }
}

typedef struct call_args {
  graft_tensor *in[MAX_IN];
  graft_tensor *out[MAX_OUT];   /* what the caller passes */
  graft_tensor *given[MAX_OUT]; /* the tensors it passed (to check and free) */
  unsigned flags;               /* AR_C_* that apply */
  int64_t batch;
} call_args;

static void args_make(const spec *s, int c, call_args *a) {
  memset(a, 0, sizeof *a);
  a->batch = c == 2 ? s->batch2 : s->batch;
  a->flags = s->call[c];
  if (!(s->flags & AR_F_LOSS)) a->flags &= ~(unsigned)AR_C_BAD_LABELS;
  if (!(a->flags & AR_C_GIVEN)) a->flags &= ~(unsigned)AR_C_BAD_OUT;
  if (s->sig == AR_SIG_NONE || s->n_in == 0) a->flags &= ~(unsigned)AR_C_BAD_INPUT;
  uint64_t seed = s->seed * 1000003 + (uint64_t)c * 7777 + 1;
  for (int i = 0; i < s->n; i++) {
    const value_spec *v = &s->v[i];
    if (v->input < 0) continue;
    int64_t dims[AR_MAX_RANK];
    memcpy(dims, v->dims, sizeof dims);
    if (v->sym) dims[0] = a->batch;
    a->in[v->input] = tensor(v->dt, v->rank, dims);
    fill(a->in[v->input], &seed);
  }
  if (s->flags & AR_F_LOSS) {
    const int64_t ld[2] = {2, 3}, bd[1] = {2};
    a->in[s->n_in - 2] = tensor(GRAFT_F64, 2, ld);
    fill(a->in[s->n_in - 2], &seed);
    a->in[s->n_in - 1] = tensor(GRAFT_I32, 1, bd);
    int32_t *l = graft_tensor_data(a->in[s->n_in - 1]);
    l[0] = (int32_t)(seed % 3);
    l[1] = a->flags & AR_C_BAD_LABELS ? (seed & 1 ? 3 : -1) : 2;
  }
  if (a->flags & AR_C_BAD_INPUT) { /* a dtype the signature does not give */
    graft_tensor *t = a->in[0];
    graft_dtype dt = graft_tensor_dtype(t) == GRAFT_F32 ? GRAFT_F64 : GRAFT_F32;
    a->in[0] = tensor(dt, graft_tensor_rank(t), graft_tensor_shape(t));
    graft_tensor_destroy(t);
  }
  if (a->flags & AR_C_GIVEN)
    for (int o = 0; o < s->n_out; o++) {
      graft_dtype dt;
      int rank;
      int64_t dims[AR_MAX_RANK];
      out_spec(s, o, a->batch, &dt, &rank, dims);
      if (o == 0 && (a->flags & AR_C_BAD_OUT)) dt = dt == GRAFT_F32 ? GRAFT_F64 : GRAFT_F32;
      a->out[o] = a->given[o] = tensor(dt, rank, dims);
      memset(graft_tensor_data(a->out[o]), 0xa5, tensor_bytes(a->out[o]));
    }
}

static void args_free(const spec *s, call_args *a) {
  for (int i = 0; i < s->n_in; i++) graft_tensor_destroy(a->in[i]);
  for (int o = 0; o < s->n_out; o++) {
    if (a->out[o] != a->given[o]) graft_tensor_destroy(a->out[o]);
    graft_tensor_destroy(a->given[o]);
  }
}

/* The caller's tensors still hold the pattern args_make wrote. */
static int given_untouched(const spec *s, const call_args *a) {
  for (int o = 0; o < s->n_out; o++) {
    const graft_tensor *t = a->given[o];
    if (!t) continue;
    const unsigned char *p = graft_tensor_data(t);
    for (size_t i = 0; i < tensor_bytes(t); i++)
      if (p[i] != 0xa5) return 0;
  }
  return 1;
}

/* The refusal a call of the step must give (e->n 0: none), in the order
 * graft_function_call checks: the inputs, the trace (trace), the caller's
 * outputs, the run.  *traced: the refusal comes from tracing (the
 * reference, which has no collectives, would not refuse it). */
static void expect_call(const expect *trace, const call_args *a, expect *e, int *traced) {
  *traced = 0;
  memset(e, 0, sizeof *e);
  if (a->flags & AR_C_BAD_INPUT) {
    add(e, R_BAD_INPUT, GRAFT_EDTYPE, "step", NULL, NULL, NULL);
    add(e, R_BAD_INPUT, GRAFT_EINVAL, "step", NULL, NULL, NULL);
  } else if (trace->n) {
    *e = *trace;
    *traced = 1;
  } else if (a->flags & AR_C_BAD_OUT) {
    add(e, R_BAD_OUT, GRAFT_EDTYPE, "step", NULL, NULL, NULL);
    add(e, R_BAD_OUT, GRAFT_EINVAL, "step", NULL, NULL, NULL);
  } else if (a->flags & AR_C_BAD_LABELS) {
    add(e, R_DATA_FAIL, GRAFT_EINVAL, "softmax_cross_entropy", NULL, NULL, NULL);
  }
}

static void log_spec(const spec *s) {
  static const char *const bucket[] = {"default", "1", "24", "256", "huge", "-1"};
  static const char *const comm[] = {"world", "self", "self after split", "null after split"};
  static const char *const sig[] = {"none", "concrete", "symbolic"};
  fprintf(stderr, "allreduce: threads %d %s fusion %s grain %lld; %s bucket %s comm %s split %d "
          "sig %s batch %lld/%lld flags 0x%x optim %d (kind %d) ndelta %d, %d values, calls "
          "0x%x 0x%x 0x%x\n", s->threads, sched_name[s->sched], s->fusion ? "off" : "on",
          (long long)grain_of[s->grain], api_name[s->api], bucket[s->bucket_mode], comm[s->comm],
          s->split, sig[s->sig], (long long)s->batch, (long long)s->batch2, s->flags, s->optim,
          s->optim_kind, s->ndelta, s->n, s->call[0], s->call[1], s->call[2]);
  for (int i = 0; i < s->n; i++) {
    const value_spec *v = &s->v[i];
    char sh[96];
    shape_text(sh, sizeof sh, v->rank, v->dims);
    fprintf(stderr, "  value %d: %s %s%s pre %d post %d var %d%s\n", i,
            v->null ? "NULL" : graft_dtype_name(v->dt), sh, v->sym ? " (axis 0 symbolic)" : "",
            v->pre, v->post, v->var, v->in_sub ? " in sub" : "");
  }
}

/* What a success reached, for fz_target_check. */
static void note_success(const spec *s, int c) {
  int colls = 0, zero = 0, nulls = 0, same_dt[3] = {0, 0, 0};
  for (int i = 0; i < s->n; i++) {
    const value_spec *v = &s->v[i];
    int rank, sym;
    int64_t dims[AR_MAX_RANK];
    pre_shape(v, s->batch, &rank, dims, &sym);
    if (v->null) {
      nulls++;
      continue;
    }
    colls++;
    same_dt[v->dt]++;
    for (int d = 0; d < rank; d++) zero |= dims[d] == 0;
  }
  if (!colls) return;
  reached[R_MEAN_OK + s->api] = 1;
  reached[R_OPTIM_OK] |= s->optim;
  reached[R_MULTI_BUCKET] |= s->api != AR_API_MEAN && s->bucket_mode == AR_BUCKET_TINY &&
                             (same_dt[GRAFT_F32] > 1 || same_dt[GRAFT_F64] > 1);
  reached[R_ZERO_ELEMS] |= zero;
  reached[R_SYMBOLIC] |= c == 2;
  reached[R_SCHED_WS + s->sched] = 1;
  reached[R_THREADS] |= s->threads > 2 && s->sched != 2;
  int around = 0;
  for (int i = 0; i < s->n; i++) around |= s->v[i].pre && s->v[i].post && !s->v[i].null;
  reached[R_FUSED] |= !s->fusion && around;
  reached[R_UNFUSED] |= s->fusion;
  reached[R_SELF] |= s->comm != AR_COMM_WORLD;
  reached[R_NULL_ENTRY] |= nulls && s->api != AR_API_MEAN;
  reached[R_ALIAS] |= s->api != AR_API_MEAN && (s->flags & AR_F_ALIAS);
  int first = 0, second = 0, discard = 0;
  for (int i = 0; i < s->n; i++) {
    if (s->v[i].null) continue;
    discard |= s->v[i].post == AR_POST_DISCARD;
    if (s->api == AR_API_N && i >= s->split)
      second++;
    else
      first++;
  }
  reached[R_DISCARD] |= discard;
  reached[R_MANY] |= s->api != AR_API_MEAN && (first > 16 || second > 16);
  reached[R_MANY_MODULE] |= s->n_train > 32;
}

/* One call of the step and, unless tracing must refuse it, of the
 * reference, checked against each other and the model. */
static void run_call(const spec *s, int c, const expect *trace, graft_function *f, graft_function *ref,
                     const tree *ta, const tree *tb) {
  call_args a, b;
  args_make(s, c, &a);
  expect e;
  int traced;
  expect_call(trace, &a, &e, &traced);
  snap before = tree_snap(ta);
  int64_t refused = fz_budget_refusals();
  if (a.flags & AR_C_FAIL_ALLOC) fz_budget_fail_nth(1 + (a.flags >> 5) * 29 + (int64_t)(s->seed % 29));
  graft_status st = graft_function_call(f, s->n_in, a.in, s->n_out, a.out);
  fz_budget_fail_nth(0);
  LOG("  call %d (batch %lld, flags 0x%x): %s %s\n", c, (long long)a.batch, a.flags,
      graft_status_str(st), graft_function_errmsg(f));
  const int starved = fz_budget_refusals() != refused;
  if (starved && st == GRAFT_ENOMEM) { /* a refusal the model does not see: ENOMEM */
    e.n = 0;
    add(&e, R_ENOMEM, GRAFT_ENOMEM, "", NULL, NULL, NULL);
    traced = 1; /* (and no reference: the trees stay equal) */
  }
  if (st) {
    if (!graft_function_errmsg(f)[0]) fz_die("call %d failed (%s) with no message", c, graft_status_str(st));
    int k = 0;
    while (k < e.n && e.r[k].st != st) k++;
    if (k == e.n)
      fz_die("call %d: %s (%s), expected %s%s", c, graft_status_str(st), graft_function_errmsg(f),
             e.n ? graft_status_str(e.r[0].st) : "success", e.n > 1 ? " or another refusal" : "");
    if (!names_all(&e.r[k], graft_function_errmsg(f)))
      fz_die("call %d: %s, but the message \"%s\" does not name %s %s %s %s", c,
             graft_status_str(st), graft_function_errmsg(f), e.r[k].needle[0], e.r[k].needle[1],
             e.r[k].needle[2], e.r[k].needle[3]);
    if (!snap_same(ta, &before)) fz_die("call %d failed (%s) and changed a variable", c, graft_status_str(st));
    if (!given_untouched(s, &a))
      fz_die("call %d failed (%s) and changed an output tensor the caller passed", c,
             graft_status_str(st));
    for (int o = 0; o < s->n_out; o++)
      if (a.out[o] != a.given[o]) fz_die("call %d failed (%s) and set output %d", c, graft_status_str(st), o);
    reached[e.reached] = 1;
  } else if (e.n) {
    fz_die("call %d succeeded, expected %s (%s ...)", c, graft_status_str(e.r[0].st), e.r[0].needle[0]);
  }
  free(before.b);
  if (traced) {
    args_free(s, &a);
    return;
  }
  /* the reference: the same inputs and flags */
  args_make(s, c, &b);
  snap before_b = tree_snap(tb);
  graft_status rst = graft_function_call(ref, s->n_in, b.in, s->n_out, b.out);
  LOG("  reference: %s %s\n", graft_status_str(rst), graft_function_errmsg(ref));
  if (fz_budget_refusals() == refused) {
    if (rst != st)
      fz_die("call %d: %s with collectives, %s without (%s)", c, graft_status_str(st),
             graft_status_str(rst), graft_function_errmsg(rst ? ref : f));
    if (st) {
      if (!snap_same(tb, &before_b)) fz_die("the reference's failed call %d changed a variable", c);
    } else {
      for (int o = 0; o < s->n_out; o++) {
        graft_dtype dt;
        int rank;
        int64_t dims[AR_MAX_RANK];
        out_spec(s, o, a.batch, &dt, &rank, dims);
        const graft_tensor *x = a.out[o];
        if (!x || graft_tensor_dtype(x) != dt || graft_tensor_rank(x) != rank ||
            (rank && memcmp(graft_tensor_shape(x), dims, (size_t)rank * sizeof *dims)))
          fz_die("call %d: output %d is not of the model's dtype and shape", c, o);
        if (!same_values(x, b.out[o]))
          fz_die("call %d: output %d differs from the computation without the all-reduce", c, o);
        if (a.given[o] && x != a.given[o]) fz_die("call %d: output %d is not the caller's tensor", c, o);
      }
      graft_variable *va[8 * MAX_VARS], *vb[8 * MAX_VARS];
      int na = tree_vars(ta, va), nb = tree_vars(tb, vb);
      if (na != nb) fz_die("the two trees hold %d and %d variables", na, nb);
      for (int i = 0; i < na; i++)
        if (!same_values(graft_variable_value(va[i]), graft_variable_value(vb[i])))
          fz_die("call %d: variable '%s' differs from the computation without the all-reduce", c,
                 graft_variable_name(va[i]));
      note_success(s, c);
      reached[R_GIVEN] |= (a.flags & AR_C_GIVEN) != 0;
    }
  }
  free(before_b.b);
  args_free(s, &a);
  args_free(s, &b);
}

/* ---- libFuzzer's entry points ------------------------------------------- */

/* MPI is not finalised: MPI_Finalize unloads Open MPI's components, and
 * what they still hold would show as leaks LeakSanitizer cannot name. */
static void at_exit(void) {
  for (int i = 0; i < N_RUNTIMES; i++) graft_runtime_destroy(runtimes[i]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fz_budget_install();
  verbose = getenv("GRAFT_FUZZ_VERBOSE") != NULL;
  int init = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&init);
  if (!init) {
    /* Open MPI keeps what MPI_Init allocates until exit, some of it in
     * components it unloads: not graft's leaks, and not the input's.  It
     * also installs handlers for the crash signals that print and exit,
     * which libFuzzer then leaves alone (no artifact would be written):
     * the handlers from before MPI_Init are put back. */
    static const int crash_signals[] = {SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV};
    struct sigaction before[sizeof crash_signals / sizeof crash_signals[0]];
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
      sigaction(crash_signals[i], NULL, &before[i]);
#ifdef AR_ASAN
    __lsan_disable();
#endif
    int err = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
#ifdef AR_ASAN
    __lsan_enable();
#endif
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
      sigaction(crash_signals[i], &before[i], NULL);
    if (err != MPI_SUCCESS) {
      fprintf(stderr, "allreduce: MPI_Init_thread failed (%d)\n", err);
      exit(2);
    }
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    fprintf(stderr, "allreduce: MPI gives thread level %d, graft needs MPI_THREAD_SERIALIZED\n",
            provided);
    exit(2);
  }
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 1) {
    fprintf(stderr, "allreduce: runs as one MPI rank (not under mpirun -np %d)\n", size);
    exit(2);
  }
  atexit(at_exit);
  return 0;
}

/* graft_module_broadcast and graft_module_replicas_equal of the step's
 * tree on the module's communicator: over one rank they change nothing
 * and find the replicas equal; MPI_COMM_NULL and a root out of range are
 * refused, naming the function. */
static void broadcast(const spec *s, const tree *t) {
  MPI_Comm c = comm_at(s, 0);
  int root = (s->flags & AR_F_ROOT1) != 0;
  snap before = tree_snap(t);
  graft_status st = graft_module_broadcast(t->root, c, root);
  const char *why = c == MPI_COMM_NULL ? "MPI_COMM_NULL" : root ? "root 1" : NULL;
  LOG("  broadcast (root %d): %s %s\n", root, graft_status_str(st), graft_last_errmsg());
  if (st != (why ? GRAFT_EINVAL : GRAFT_OK))
    fz_die("graft_module_broadcast (root %d): %s (%s), expected %s%s", root, graft_status_str(st),
           graft_last_errmsg(), why ? "a refusal naming " : "success", why ? why : "");
  if (why && (!strstr(graft_last_errmsg(), "graft_module_broadcast") ||
              !strstr(graft_last_errmsg(), why) || !strstr(graft_last_errmsg(), "expected")))
    fz_die("graft_module_broadcast refused, but the message \"%s\" does not name the function, %s "
           "and what was expected", graft_last_errmsg(), why);
  if (!snap_same(t, &before)) fz_die("graft_module_broadcast over one rank changed a variable");
  free(before.b);
  reached[R_BROADCAST] |= !why;
  reached[R_BROADCAST_BAD] |= why != NULL;
  int equal = -1;
  st = graft_module_replicas_equal(t->root, c, &equal);
  if (c == MPI_COMM_NULL ? st != GRAFT_EINVAL || !strstr(graft_last_errmsg(), "MPI_COMM_NULL")
                         : st != GRAFT_OK || equal != 1)
    fz_die("graft_module_replicas_equal: %s (%s), equal %d", graft_status_str(st),
           graft_last_errmsg(), equal);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_reader rd = {data, size, 0};
  spec s;
  decode(&rd, &s);
  if (verbose) log_spec(&s);
  graft_runtime *rt = runtime_for(&s);
  int64_t live0 = fz_budget_live();
  tree ta, tb;
  tree_make(&s, &ta);
  tree_make(&s, &tb);
  tracer ca = {&s, &ta, 0}, cb = {&s, &tb, 1};
  graft_function *f = function_for(&s, &ca, rt), *ref = function_for(&s, &cb, rt);
  expect trace;
  expect_trace(&s, &trace);
  for (int c = 0; c < s.n_calls; c++) run_call(&s, c, &trace, f, ref, &ta, &tb);
  if (s.api == AR_API_MODULE && (s.flags & AR_F_BROADCAST)) broadcast(&s, &ta);
  graft_function_destroy(f);
  graft_function_destroy(ref);
  graft_module_destroy(ta.root);
  graft_module_destroy(tb.root);
  if (fz_budget_live() != live0)
    fz_die("%lld bytes of graft blocks still allocated after the input",
           (long long)(fz_budget_live() - live0));
  return 0;
}

int fz_target_check(void) { return fz_check_reached(R_COUNT, reached, reached_name); }
