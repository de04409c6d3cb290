/* The encoding of the `allreduce` fuzz target's inputs, shared by the
 * decoder (allreduce_target.c, whose header comment describes what each
 * choice does) and the seed writer (allreduce_seeds.c).  Each field is one
 * byte taken modulo the count of its choices; past the end of the input
 * every byte reads 0, the first choice of each. */
#ifndef GRAFT_FUZZ_ALLREDUCE_TARGET_H
#define GRAFT_FUZZ_ALLREDUCE_TARGET_H

/* The header, in input order. */
enum {
  AR_H_THREADS,   /* 1 + b % 4 */
  AR_H_SCHED,     /* ws omp seq */
  AR_H_FUSION,    /* on off */
  AR_H_GRAIN,     /* default 1 4 64 */
  AR_H_API,       /* AR_API_* */
  AR_H_BUCKET,    /* AR_BUCKET_* */
  AR_H_COMM,      /* AR_COMM_* */
  AR_H_SPLIT,     /* b % (values + 1): where the second graft_allreduce_mean_n
                     call, and AR_COMM_SWITCH's other communicator, start */
  AR_H_SIG,       /* AR_SIG_* */
  AR_H_BATCH,     /* the symbolic batch of the first two calls (a dim byte) */
  AR_H_BATCH2,    /* that of the third call */
  AR_H_FLAGS,     /* AR_F_* */
  AR_H_OPTIM,     /* optimizer kind, b % 5 (graft_optimizer_kind) */
  AR_H_NDELTA,    /* n's offset (0 +1 -1 0 by b % 4): module, n = the
                     trainable count + it; graft_allreduce_mean_n, the
                     second call's n (entries past the values are NULL) */
  AR_H_NVALUES,   /* b < 200: b % 7 values, else 7 + (b - 200) % 34 */
  AR_H_SEED,      /* data */
  AR_H_COUNT
};

enum { AR_API_MEAN, AR_API_N, AR_API_MODULE, AR_API_COUNT };
enum { AR_BUCKET_DEFAULT, AR_BUCKET_TINY, AR_BUCKET_SMALL, AR_BUCKET_MID, AR_BUCKET_HUGE,
       AR_BUCKET_NEG, AR_BUCKET_COUNT };
/* SWITCH: MPI_COMM_SELF from the split on (module: WORLD); NULL_AFTER:
 * MPI_COMM_NULL from the split on (module: MPI_COMM_NULL). */
enum { AR_COMM_WORLD, AR_COMM_SELF, AR_COMM_SWITCH, AR_COMM_NULL_AFTER, AR_COMM_COUNT };
enum { AR_SIG_NONE, AR_SIG_CONCRETE, AR_SIG_SYMBOLIC, AR_SIG_COUNT };

#define AR_F_LOSS 0x01   /* an extra output: softmax_cross_entropy of two inputs */
#define AR_F_LOSS_FIRST 0x02 /* traced before the values (else after) */
#define AR_F_OPTIM 0x04  /* module: an optimizer step on the all-reduced gradients */
#define AR_F_ALIAS 0x08  /* graft_allreduce_mean_n, module: out is xs, and
                            both NULL in a call with n = 0 */
#define AR_F_BROADCAST 0x10 /* module: after the calls, graft_module_broadcast
                               (root 0, or 1 with AR_F_ROOT1) and
                               graft_module_replicas_equal */
#define AR_F_ROOT1 0x20
#define AR_F_IN_BODY 0x40   /* the collectives inside a graft_remat body
                               (refused: GRAFT_EUNSUPPORTED) */

/* Each value, after the header: dtype, rank (b % 4), rank dims, pre op,
 * post op, module byte.  dtype byte b % 8: 0-2 f32, 3-5 f64, 6 i32, 7 a
 * NULL entry (no input; the API gets NULL). */
enum { AR_DT_F32 = 0, AR_DT_F64 = 3, AR_DT_I32 = 6, AR_DT_NULL = 7, AR_DT_CHOICES = 8 };
/* dim byte b % 6 (also AR_H_BATCH, AR_H_BATCH2): 2 3 1 0 5 7 */
enum { AR_DIM_2, AR_DIM_3, AR_DIM_1, AR_DIM_0, AR_DIM_5, AR_DIM_7, AR_DIM_COUNT };
enum { AR_PRE_NONE, AR_PRE_SCALE, AR_PRE_ADD_SELF, AR_PRE_SUM_AXIS0, AR_PRE_SUM_ALL, AR_PRE_NEG,
       AR_PRE_COUNT };
/* DISCARD: the output is the value before (the collective's result is
 * unread, and pruned unless a later bucket's order edge keeps it) */
enum { AR_POST_NONE, AR_POST_SCALE, AR_POST_ADD_PRE, AR_POST_SUB_PRE, AR_POST_SUM_ALL,
       AR_POST_DISCARD, AR_POST_COUNT };
/* Module byte: bits 0-1 the variable (AR_VAR_*), bit 2 in the submodule. */
enum { AR_VAR_MATCH, AR_VAR_SHAPE, AR_VAR_DTYPE, AR_VAR_DECOY, AR_VAR_COUNT };
#define AR_VAR_IN_SUB 0x04

/* Then one byte per call (AR_CALLS): */
#define AR_C_GIVEN 0x01      /* the caller passes output tensors */
#define AR_C_BAD_LABELS 0x02 /* with AR_F_LOSS: a label out of range */
#define AR_C_BAD_OUT 0x04    /* with AR_C_GIVEN: the first output of the wrong dtype */
#define AR_C_BAD_INPUT 0x08  /* with a signature: the first input of the wrong dtype */
#define AR_C_FAIL_ALLOC 0x10 /* the k-th allocation of the call fails, k = 1 +
                                (flags >> 5) * 29 + the data seed % 29 */

#define AR_MAX_VALUES 40 /* more than graft's on-stack arrays hold (16, 32) */
#define AR_MAX_RANK 3
#define AR_CALLS 3 /* the third only with a symbolic signature */

#endif /* GRAFT_FUZZ_ALLREDUCE_TARGET_H */
