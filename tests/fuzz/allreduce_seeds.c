/* Seed inputs of the `allreduce` target, written by
 *   fuzz_replay_allreduce --seeds tests/fuzz/corpus/allreduce
 * (`make fuzz-seeds`): inputs in the encoding of allreduce_target.h that
 * reach what allreduce_target.c's fz_target_check lists: each API
 * succeeding under each scheduler, with and without fusion, at several
 * bucket sizes (one value per bucket, all in one), with NULL entries,
 * zero-element values, a symbolic batch, an optimizer step, aliased
 * outputs and the caller's output tensors; each refusal (a NULL x, an
 * integer value, a negative bucket_bytes, a second communicator, a wrong
 * n or n < 0, a gradient of the wrong dtype or shape, MPI_COMM_NULL); a
 * call failing on data, an input and an output refused before running;
 * collectives whose results are unread; more values than graft keeps on
 * its stack; collectives in a remat body; allocation failures.  Replaying the corpus with
 * --check verifies it, so a seed that drifted from the decoder shows. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "allreduce_target.h"
#include "fuzz.h"

typedef fz_seed seed;

/* One value: dtype byte, dims (AR_DIM_*; their count is the rank), ops
 * and the module byte. */
typedef struct val {
  unsigned dt, rank, dims[AR_MAX_RANK], pre, post, var;
} val;

typedef struct prog {
  unsigned h[AR_H_COUNT];
  int n;
  val v[AR_MAX_VALUES];
  unsigned call[AR_CALLS];
} prog;

static void emit(seed *s, const prog *p) {
  memset(s, 0, sizeof *s);
  for (int i = 0; i < AR_H_COUNT; i++)
    fz_put(s, i != AR_H_NVALUES ? p->h[i] : p->n < 7 ? (unsigned)p->n : 200u + (unsigned)p->n - 7);
  for (int i = 0; i < p->n; i++) {
    const val *v = &p->v[i];
    fz_put(s, v->dt), fz_put(s, v->rank);
    for (unsigned d = 0; d < v->rank; d++) fz_put(s, v->dims[d]);
    fz_put(s, v->pre), fz_put(s, v->post), fz_put(s, v->var);
  }
  for (int c = 0; c < AR_CALLS; c++) fz_put(s, p->call[c]);
}

/* A small model's gradients: a matrix, a vector, a scalar, of f32 and
 * f64, with ops around them. */
static prog base(unsigned api) {
  prog p;
  memset(&p, 0, sizeof p);
  p.h[AR_H_API] = api;
  p.h[AR_H_SEED] = 11;
  p.n = 4;
  p.v[0] = (val){AR_DT_F32, 2, {AR_DIM_3, AR_DIM_2}, AR_PRE_SCALE, AR_POST_ADD_PRE, AR_VAR_MATCH};
  p.v[1] = (val){AR_DT_F32, 1, {AR_DIM_5}, AR_PRE_NONE, AR_POST_NONE, AR_VAR_MATCH | AR_VAR_IN_SUB};
  p.v[2] = (val){AR_DT_F64, 0, {0}, AR_PRE_NEG, AR_POST_SCALE, AR_VAR_DECOY};
  p.v[3] = (val){AR_DT_F64, 3, {AR_DIM_2, AR_DIM_1, AR_DIM_3}, AR_PRE_ADD_SELF, AR_POST_SUM_ALL,
                 AR_VAR_MATCH};
  p.call[1] = AR_C_GIVEN;
  return p;
}

#define SEED(name, prog_expr)                       \
  do {                                              \
    prog p_ = (prog_expr);                          \
    emit(&s, &p_);                                  \
    rc |= fz_write_seed(dir, name, s.b, s.n);       \
  } while (0)

int fz_target_seeds(const char *dir) {
  if (mkdir(dir, 0777) && errno != EEXIST) {
    perror(dir);
    return -1;
  }
  static const char *const api[AR_API_COUNT] = {"mean", "mean-n", "module"};
  static const char *const sched[3] = {"ws", "omp", "seq"};
  int rc = 0;
  seed s;
  char name[64];
  prog p;
  /* each API under each scheduler (ws on 2 threads, omp on 3, seq),
   * fused and not */
  for (unsigned a = 0; a < AR_API_COUNT; a++)
    for (unsigned k = 0; k < 3; k++) {
      p = base(a);
      p.h[AR_H_THREADS] = 2 + k, p.h[AR_H_SCHED] = k, p.h[AR_H_FUSION] = k == 1;
      p.h[AR_H_GRAIN] = k, p.h[AR_H_SPLIT] = 2, p.h[AR_H_SEED] = 20 + k;
      snprintf(name, sizeof name, "%s-%s", api[a], sched[k]);
      SEED(name, p);
    }
  /* bucket sizes: each value alone, a few together, all in one */
  for (unsigned b = AR_BUCKET_TINY; b <= AR_BUCKET_HUGE; b++)
    for (unsigned a = AR_API_N; a <= AR_API_MODULE; a++) {
      p = base(a);
      p.h[AR_H_BUCKET] = b, p.h[AR_H_THREADS] = 1, p.h[AR_H_FLAGS] = AR_F_ALIAS;
      p.v[2].dt = AR_DT_F32, p.v[3].dt = AR_DT_F32;
      snprintf(name, sizeof name, "%s-bucket-%u", api[a], b);
      SEED(name, p);
    }
  /* NULL entries and zero-element values */
  for (unsigned a = AR_API_N; a <= AR_API_MODULE; a++) {
    p = base(a);
    p.v[1].dt = AR_DT_NULL;
    p.v[3].dims[1] = AR_DIM_0;
    p.h[AR_H_BUCKET] = AR_BUCKET_SMALL;
    snprintf(name, sizeof name, "%s-null-zero", api[a]);
    SEED(name, p);
  }
  /* a symbolic batch (gradients summed over it for the module), a loss
   * traced first, the caller's outputs in both calls */
  for (unsigned a = 0; a < AR_API_COUNT; a++) {
    p = base(a);
    p.h[AR_H_SIG] = AR_SIG_SYMBOLIC, p.h[AR_H_BATCH] = AR_DIM_3, p.h[AR_H_BATCH2] = AR_DIM_5;
    p.h[AR_H_FLAGS] = AR_F_LOSS | AR_F_LOSS_FIRST, p.h[AR_H_THREADS] = 1;
    for (int i = 0; i < 4; i++)
      if (a == AR_API_MODULE && p.v[i].rank) p.v[i].pre = AR_PRE_SUM_AXIS0;
    p.call[0] = AR_C_GIVEN;
    snprintf(name, sizeof name, "%s-symbolic", api[a]);
    SEED(name, p);
  }
  /* an optimizer step of each kind on the all-reduced gradients, on
   * MPI_COMM_SELF; then a broadcast (root 0, then 1: refused) */
  for (unsigned k = 0; k < 5; k++) {
    p = base(AR_API_MODULE);
    p.h[AR_H_FLAGS] = AR_F_OPTIM | (k & 1 ? AR_F_ALIAS : 0) | (k < 2 ? AR_F_BROADCAST : 0) |
                      (k == 1 ? AR_F_ROOT1 : 0);
    p.h[AR_H_OPTIM] = k;
    p.h[AR_H_COMM] = k == 4 ? AR_COMM_SELF : AR_COMM_WORLD, p.h[AR_H_THREADS] = 1;
    p.h[AR_H_BUCKET] = AR_BUCKET_SMALL;
    snprintf(name, sizeof name, "optim-%u", k);
    SEED(name, p);
  }
  /* refusals: an integer value, a negative bucket_bytes, a second
   * communicator, a NULL x */
  for (unsigned a = 0; a < AR_API_COUNT; a++) {
    p = base(a);
    p.v[2].dt = AR_DT_I32;
    p.call[0] = AR_C_GIVEN;
    snprintf(name, sizeof name, "%s-int", api[a]);
    SEED(name, p);
  }
  for (unsigned a = AR_API_N; a <= AR_API_MODULE; a++) {
    p = base(a);
    p.h[AR_H_BUCKET] = AR_BUCKET_NEG;
    snprintf(name, sizeof name, "%s-bucket-neg", api[a]);
    SEED(name, p);
  }
  for (unsigned a = AR_API_MEAN; a <= AR_API_N; a++) {
    p = base(a);
    p.h[AR_H_COMM] = AR_COMM_SWITCH, p.h[AR_H_SPLIT] = 2;
    snprintf(name, sizeof name, "%s-two-comms", api[a]);
    SEED(name, p);
  }
  p = base(AR_API_MEAN);
  p.v[2].dt = AR_DT_NULL;
  SEED("mean-null", p);
  /* MPI_COMM_NULL (an abort in MPI_Comm_size before graft refused it:
   * regress-comm-null-*), from the split on */
  for (unsigned a = 0; a < AR_API_COUNT; a++) {
    p = base(a);
    p.h[AR_H_COMM] = AR_COMM_NULL_AFTER, p.h[AR_H_SPLIT] = 1, p.h[AR_H_FLAGS] = AR_F_BROADCAST;
    snprintf(name, sizeof name, "%s-comm-null", api[a]);
    SEED(name, p);
  }
  /* graft_allreduce_mean_n with n = -1 */
  p = base(AR_API_N);
  p.h[AR_H_SPLIT] = 4, p.h[AR_H_NDELTA] = 2;
  SEED("mean-n-negative", p);
  /* results left unread (pruned collectives, or kept by the next
   * bucket's order edge), and empty calls passing NULL arrays */
  for (unsigned a = 0; a < AR_API_COUNT; a++) {
    p = base(a);
    p.v[0].post = AR_POST_DISCARD, p.v[3].post = AR_POST_DISCARD;
    p.h[AR_H_BUCKET] = AR_BUCKET_TINY, p.h[AR_H_FLAGS] = AR_F_ALIAS, p.h[AR_H_THREADS] = 1;
    snprintf(name, sizeof name, "%s-discard", api[a]);
    SEED(name, p);
  }
  p = base(AR_API_N);
  p.n = 0, p.h[AR_H_FLAGS] = AR_F_ALIAS;
  SEED("mean-n-empty", p);
  /* more values than graft's on-stack arrays: one bucket of 36, one per
   * value, a module of 36 trainable variables */
  for (unsigned a = AR_API_N; a <= AR_API_MODULE; a++)
    for (unsigned b = AR_BUCKET_TINY; b <= AR_BUCKET_HUGE; b += AR_BUCKET_HUGE - AR_BUCKET_TINY) {
      p = base(a);
      p.n = 36;
      for (int i = 0; i < p.n; i++)
        p.v[i] = (val){AR_DT_F32, 1, {AR_DIM_2}, (unsigned)i % AR_PRE_COUNT,
                       (unsigned)i % AR_POST_COUNT, (unsigned)i & AR_VAR_IN_SUB};
      p.h[AR_H_BUCKET] = b, p.h[AR_H_SPLIT] = 1, p.h[AR_H_THREADS] = 1;
      snprintf(name, sizeof name, "%s-many-%u", api[a], b);
      SEED(name, p);
    }
  /* the module's refusals: n off by one each way, a gradient of the wrong
   * dtype and of the wrong shape, a symbolic one */
  for (unsigned d = 1; d <= 2; d++) {
    p = base(AR_API_MODULE);
    p.h[AR_H_NDELTA] = d;
    snprintf(name, sizeof name, "module-n-%u", d);
    SEED(name, p);
  }
  p = base(AR_API_MODULE);
  p.v[3].var = AR_VAR_DTYPE;
  SEED("module-dtype", p);
  p = base(AR_API_MODULE);
  p.v[1].var = AR_VAR_SHAPE | AR_VAR_IN_SUB;
  SEED("module-shape", p);
  p = base(AR_API_MODULE);
  p.h[AR_H_SIG] = AR_SIG_SYMBOLIC;
  SEED("module-symbolic-shape", p);
  /* failures while calling: a label out of range (the loss traced after
   * the collectives) then a good call; a caller's output, then an input
   * of a wrong dtype (the loss traced first, seq) */
  for (unsigned a = 0; a < AR_API_COUNT; a++) {
    p = base(a);
    p.h[AR_H_FLAGS] = AR_F_LOSS | (a == AR_API_MODULE ? AR_F_OPTIM : 0);
    p.h[AR_H_SIG] = AR_SIG_CONCRETE, p.h[AR_H_THREADS] = 1 + a;
    p.call[0] = AR_C_BAD_LABELS | AR_C_GIVEN;
    snprintf(name, sizeof name, "%s-fail-data", api[a]);
    SEED(name, p);
    p.h[AR_H_FLAGS] |= AR_F_LOSS_FIRST, p.h[AR_H_SCHED] = 2;
    p.call[0] = AR_C_GIVEN | AR_C_BAD_OUT;
    p.call[1] = AR_C_BAD_INPUT;
    snprintf(name, sizeof name, "%s-fail-out", api[a]);
    SEED(name, p);
  }
  /* collectives inside a remat body: refused */
  for (unsigned a = 0; a < AR_API_COUNT; a++) {
    p = base(a);
    p.h[AR_H_FLAGS] = AR_F_IN_BODY;
    snprintf(name, sizeof name, "%s-in-body", api[a]);
    SEED(name, p);
  }
  /* an allocation failure armed in the first call (tracing, compiling or
   * running it), at several depths; the second call then succeeds */
  for (unsigned a = 0; a < AR_API_COUNT; a++)
    for (unsigned k = 0; k < 8; k++) {
      p = base(a);
      p.h[AR_H_SEED] = 3 * k, p.h[AR_H_THREADS] = k & 1, p.h[AR_H_FLAGS] = AR_F_OPTIM;
      p.call[0] = AR_C_FAIL_ALLOC | k << 5;
      snprintf(name, sizeof name, "%s-enomem-%u", api[a], k);
      SEED(name, p);
    }
  return rc ? -1 : 0;
}
