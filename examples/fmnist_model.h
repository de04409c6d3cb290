/* fmnist_model: the Fashion-MNIST classifier of examples/fashion_mnist.c as
 * a graft module tree, its traced training step and its traced evaluation.
 *
 * The tree (what a checkpoint holds, so --load resumes training exactly):
 *   fashion/            root
 *     model/            the network, each layer a module holding w and b:
 *                       MLP fc1, fc2, fc3 (784-256-128-10, relu);
 *                       CNN conv1 (32 3x3, pad 1, relu, max-pool 2), conv2
 *                       (64 likewise), fc1 (3136-128, relu), fc2 (128-10)
 *     optimizer/        graft_optimizer_create over the network's variables
 *                       (its step count, its learning rate "lr" and slots:
 *                       Adam's m and v, ...)
 *
 * Two traced functions share the runtime:
 *   step  (x [-1, 784] f32, labels [-1] i32) -> (loss, logits [-1, 10]):
 *         forward, softmax cross-entropy, graft_gradients, the optimizer's
 *         update; the batch dim is symbolic, so a last partial batch gets a
 *         plan of its own, not a second trace;
 *   eval  (x [-1, 784] f32, labels [-1] i32) -> (loss, logits [-1, 10]):
 *         the forward pass alone, one trace for full and partial batches.
 * Pixels are normalized on the host as they are gathered into a batch
 * (fm_batch_fill), with Fashion-MNIST's training mean and deviation.
 *
 * Data parallel (fashion_mnist --mpi; builds with MPI only): with
 * fm_config.dp set, the step averages the gradients over the ranks of
 * fm_config.comm (graft_module_allreduce_gradients) before the update, and
 * fm_trainer_shard makes each rank train on its share of every global
 * batch.
 *
 * Used by examples/fashion_mnist.c, tests/examples/test_fashion_train.c and
 * bench/bench_fashion.c.
 */
#ifndef GRAFT_EXAMPLES_FMNIST_MODEL_H
#define GRAFT_EXAMPLES_FMNIST_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "graft.h"
#include "idx.h"
#if GRAFT_HAVE_MPI
#include "graft/mpi.h"
#endif

#define FM_CLASSES 10
#define FM_SIDE 28
#define FM_PIXELS (FM_SIDE * FM_SIDE)
#define FM_MAX_PARAMS 16

extern const char *const fm_class_names[FM_CLASSES];

typedef enum fm_arch { FM_MLP, FM_CNN } fm_arch;

/* "MLP 784-256-128-10", "CNN conv32-pool-conv64-pool-128-10". */
const char *fm_arch_name(fm_arch a);

typedef struct fm_config {
  fm_arch arch;
  graft_optimizer_kind optimizer;
  double lr;     /* <= 0: the optimizer's default (fm_default_lr) */
  uint64_t seed; /* initial weights */
#if GRAFT_HAVE_MPI
  int dp;               /* nonzero: all-reduce the gradients over comm */
  MPI_Comm comm;        /* every rank traces the same step on it */
  int64_t bucket_bytes; /* graft_allreduce_opts.bucket_bytes (0: graft's) */
#endif
} fm_config;

typedef struct fm_model {
  fm_arch arch;
  graft_module *root, *net, *opt;
  graft_variable *lr; /* the optimizer's learning rate (f32, rank 0),
                         set before each step by the schedule */
  double base_lr;
  graft_variable *params[FM_MAX_PARAMS];
  int n_params;
  graft_function *step, *eval;
#if GRAFT_HAVE_MPI
  int dp; /* fm_config's */
  MPI_Comm comm;
  int64_t bucket_bytes;
#endif
} fm_model;

/* The learning rate used when none is given. */
double fm_default_lr(graft_optimizer_kind k);

/* Build the tree (weights drawn from cfg->seed) and the two functions on
 * rt.  0, or -1 with the reason in err; on failure m is zeroed.  With
 * cfg->dp the ranks still draw their own weights: broadcast rank 0's
 * (graft_module_broadcast of m->root) before the first step. */
int fm_model_create(graft_runtime *rt, const fm_config *cfg, fm_model *m, char *err, size_t errlen);
void fm_model_destroy(fm_model *m);

/* The signature of step and eval: x [-1, 784] f32, labels [-1] i32. */
extern const graft_signature fm_signature;

/* Inside a trace: the logits [B, 10] of x [B, 784] (the network alone);
 * p[] receives the reads of m's n_params parameters, in their order (for
 * graft_gradients).  bench_small_step traces its own update after it. */
graft_value *fm_forward(graft_trace *t, fm_model *m, graft_value *x, graft_value **p);

/* A training-step function of m on rt (one more than m->step: the demo's
 * Chrome trace runs one step on a runtime that writes a trace). */
int fm_step_function(graft_runtime *rt, fm_model *m, graft_function **out, char *err,
                     size_t errlen);

/* Gather the images idx[0..n) of d into x (n x 784, normalized) and their
 * labels into labels. */
void fm_batch_fill(const idx_dataset *d, const int64_t *idx, int64_t n, float *x, int32_t *labels);

/* Predicted class of each of the n rows of logits. */
void fm_argmax(const float *logits, int64_t n, int32_t *pred);

typedef struct fm_eval {
  double loss;     /* mean over the images */
  double accuracy; /* fraction right */
  int64_t n;
  int64_t confusion[FM_CLASSES][FM_CLASSES]; /* [true][predicted] */
} fm_eval;

/* Evaluate m on the first n images of d (all when n <= 0 or n > d->n), in
 * batches of batch.  0, or -1 with the reason in err. */
int fm_evaluate(fm_model *m, const idx_dataset *d, int64_t n, int64_t batch, fm_eval *res,
                char *err, size_t errlen);

/* The training loop's state: the shuffled order and one batch's buffers
 * and tensors, reused by every full batch.  A step takes the next batch
 * images of the order (the global batch); a rank of ranks trains on its
 * share of them, rows rows (fm_trainer_shard; one rank: all). */
typedef struct fm_trainer {
  fm_model *m;
  const idx_dataset *d;
  int64_t n, batch;       /* images trained on (the first n of d), batch size */
  int64_t *order;         /* this epoch's order of the n images */
  float *x;               /* batch x 784 */
  int32_t *labels, *pred; /* batch */
  graft_tensor *in[2], *out[2], *lr;
  int64_t steps;       /* steps taken */
  int64_t total_steps; /* of the schedule */
  int rank, ranks;     /* this process's share of each batch: 0 of 1 */
  int64_t rows;        /* rows of a full batch this rank trains on */
  int64_t last_rows;   /* rows of the last step (its loss and right) */
} fm_trainer;

/* 0, or -1 with err; n <= 0 or over d->n: all of d.  The learning rate
 * follows a cosine from the model's base rate down to 0 over epochs
 * epochs (a variable set before each step: no retrace). */
int fm_trainer_init(fm_trainer *tr, fm_model *m, const idx_dataset *d, int64_t n, int64_t batch,
                    int epochs, char *err, size_t errlen);
void fm_trainer_free(fm_trainer *tr);

/* Data parallel: of each global batch of k images, rank (of ranks) trains
 * on the k / ranks images from rank * (k / ranks) on: a full batch splits
 * exactly (batch must divide by ranks); of the last, partial one the k %
 * ranks images at its end (fewer than ranks) are not trained on that
 * epoch, since equal shares keep the mean of the ranks' gradients the
 * gradient of the images trained on.  Every rank must shuffle with the
 * same seed.  0, or -1 with err (tr unchanged). */
int fm_trainer_shard(fm_trainer *tr, int rank, int ranks, char *err, size_t errlen);

/* The order of epoch (1, 2, ...): a shuffle that depends on seed and epoch
 * alone, so a run resumed at an epoch sees the order it would have. */
void fm_trainer_shuffle(fm_trainer *tr, uint64_t seed, int epoch);

/* One step of f (m->step, or another function of fm_step_function) on the
 * batch of the order starting at at: *b images (batch, or fewer at the
 * end), of which this rank trained on tr->last_rows (all, or its share:
 * fm_trainer_shard); their mean loss and how many it classified right
 * (before the update).  A last batch of fewer images than ranks is
 * skipped on every rank (*b images, last_rows 0, *loss 0, *right 0).  0,
 * or -1 with err. */
int fm_trainer_step(fm_trainer *tr, graft_function *f, int64_t at, int64_t *b, double *loss,
                    int64_t *right, char *err, size_t errlen);

/* A whole epoch of m->step: shuffle, then every batch; the epoch's mean
 * loss and accuracy (over this rank's rows).  0, or -1 with err. */
int fm_train_epoch(fm_trainer *tr, uint64_t seed, int epoch, double *loss, double *accuracy,
                   char *err, size_t errlen);

/* Report a failed graft call "<what>: <status>: <message>" into err; -1. */
int fm_fail(graft_status s, const char *what, char *err, size_t errlen);

#endif /* GRAFT_EXAMPLES_FMNIST_MODEL_H */
