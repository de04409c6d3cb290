/* fashion_mnist: train and evaluate a classifier on Fashion-MNIST with graft
 * (what `make demo` runs).
 *
 * Reads the dataset (IDX files, gzip or plain: idx.c) from Debian's
 * dataset-fashion-mnist package or --data DIR, builds the model as a module
 * tree, and trains it with one traced function per training step (forward,
 * graft_gradients, the optimizer's update: fmnist_model.c), shuffling the
 * training set every epoch with a seeded generator.  After each epoch a
 * second traced function, whose batch dim is symbolic (one trace for full
 * and partial batches), evaluates the test set.  At the end it prints the
 * test accuracy, the accuracy per class and the confusion matrix, and
 * writes the checkpoint (safetensors: weights, optimizer state and step
 * count, so --load resumes exactly), metrics.csv and curves.png (gnuplot)
 * into --out DIR.
 *
 * With --mpi (a graft built with MPI), under mpirun: data-parallel
 * training.  Every rank shuffles with the same seed and trains on its
 * equal share of each global batch of --batch images (fm_trainer_shard);
 * the step all-reduces the gradients (graft_module_allreduce_gradients)
 * before the update, so every rank applies the update of the whole batch;
 * rank 0's initial variables (or its --load) are broadcast first
 * (graft_module_broadcast), and at the end the ranks check that they hold
 * the same bits (graft_module_replicas_equal).  Rank 0 alone prints, writes
 * the outputs and evaluates, on the whole test set.
 *
 *   fashion_mnist [--model mlp|cnn] [--epochs N] [--batch N] [--lr X]
 *                 [--optimizer sgd|momentum|adam|adamw] [--threads N]
 *                 [--seed N] [--limit N] [--data DIR] [--out DIR]
 *                 [--save FILE] [--load FILE] [--trace FILE] [--dot FILE]
 *                 [--mpi] [--bucket-kib N]
 *
 * Exit status: 0 on success, 1 on a failure (its message on stderr), 2 on
 * a bad command line.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_* (--mpi) */

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fmnist_model.h"
#include "fmnist_report.h"
#include "graft.h"
#include "idx.h"

#define PROG "fashion_mnist"
#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define DEFAULT_OUT "fashion_mnist_out"
#define EVAL_BATCH 128
#define MAX_EPOCHS 1000

typedef struct options {
  fm_config cfg;
  int epochs, threads;
  int64_t batch, limit;
  const char *data, *out, *save, *load, *trace, *dot;
  int mpi;            /* --mpi */
  int64_t bucket_kib; /* --bucket-kib (0: graft's default) */
} options;

static void usage(FILE *to) {
  fprintf(
      to,
      "usage: " PROG " [options]\n"
      "  --model mlp|cnn       the network (default mlp: 784-256-128-10; cnn: 2 conv + 2 dense)\n"
      "  --epochs N            epochs to train (default 6 for mlp, 3 for cnn; 0 with --load:\n"
      "                        evaluate only)\n"
      "  --batch N             training batch size (default 64)\n"
      "  --lr X                learning rate (default: 1e-3 for adam/adamw, 0.01 momentum, "
      "0.1 sgd)\n"
      "  --optimizer NAME      sgd, momentum, adam or adamw (default adam)\n"
      "  --threads N           worker threads (default 1, or GRAFT_NUM_THREADS /\n"
      "                        OMP_NUM_THREADS when set)\n"
      "  --seed N              initial weights and shuffling (default 1)\n"
      "  --limit N             train on the first N training images only\n"
      "  --data DIR            the IDX files (default " DEFAULT_DATA ")\n"
      "  --out DIR             metrics.csv, curves.png, checkpoint.safetensors "
      "(default " DEFAULT_OUT ")\n"
      "  --save FILE           the checkpoint's path (default OUT/checkpoint.safetensors)\n"
      "  --load FILE           start from a checkpoint (resume training, or evaluate)\n"
      "  --trace FILE          Chrome trace (Perfetto) of one training step (--mpi: rank\n"
      "                        R > 0 writes FILE.rankR)\n"
      "  --dot FILE            the training step's graph (Graphviz DOT)\n"
      "  --mpi                 data-parallel training over MPI (run under mpirun; needs a\n"
      "                        graft built with MPI): each rank trains on its share of\n"
      "                        every batch, the gradients are all-reduced; rank 0 prints\n"
      "                        and writes the outputs\n"
      "  --bucket-kib N        with --mpi: all-reduce buckets of N KiB (default: graft's,\n"
      "                        25 MiB)\n");
}

static int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, PROG ": %s: '%s' is not an integer in %lld..%lld\n", opt, s, (long long)lo,
            (long long)hi);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.cfg = {.arch = FM_MLP, .optimizer = GRAFT_OPT_ADAM, .seed = 1},
                 .epochs = -1, /* the model's default */
                 .batch = 64,
                 .data = DEFAULT_DATA,
                 .out = DEFAULT_OUT};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      exit(0);
    }
    if (!strcmp(a, "--mpi")) { /* the one option without a value */
      o->mpi = 1;
      continue;
    }
    if (strncmp(a, "--", 2) || i + 1 >= argc) {
      fprintf(stderr, PROG ": %s: %s\n", a,
              strncmp(a, "--", 2) ? "not an option" : "needs a value");
      usage(stderr);
      return -1;
    }
    const char *v = argv[++i];
    int64_t n;
    if (!strcmp(a, "--model")) {
      if (strcmp(v, "mlp") && strcmp(v, "cnn"))
        return fprintf(stderr, PROG ": --model: '%s' is not mlp or cnn\n", v), -1;
      o->cfg.arch = strcmp(v, "mlp") ? FM_CNN : FM_MLP;
    } else if (!strcmp(a, "--optimizer")) {
      static const struct {
        const char *name;
        graft_optimizer_kind k;
      } kinds[] = {{"sgd", GRAFT_OPT_SGD},
                   {"momentum", GRAFT_OPT_MOMENTUM},
                   {"adam", GRAFT_OPT_ADAM},
                   {"adamw", GRAFT_OPT_ADAMW}};
      size_t k = 0;
      while (k < 4 && strcmp(v, kinds[k].name)) k++;
      if (k == 4)
        return fprintf(stderr, PROG ": --optimizer: '%s' is not sgd, momentum, adam or adamw\n", v),
               -1;
      o->cfg.optimizer = kinds[k].k;
    } else if (!strcmp(a, "--lr")) {
      char *end;
      o->cfg.lr = strtod(v, &end);
      if (end == v || *end || !(o->cfg.lr > 0 && o->cfg.lr < 1e3))
        return fprintf(stderr, PROG ": --lr: '%s' is not a number in (0, 1000)\n", v), -1;
    } else if (!strcmp(a, "--epochs")) {
      if (parse_int(a, v, 0, MAX_EPOCHS, &n)) return -1;
      o->epochs = (int)n;
    } else if (!strcmp(a, "--batch")) {
      if (parse_int(a, v, 1, 65536, &o->batch)) return -1;
    } else if (!strcmp(a, "--threads")) {
      if (parse_int(a, v, 1, 4096, &n)) return -1;
      o->threads = (int)n;
    } else if (!strcmp(a, "--seed")) {
      if (parse_int(a, v, 0, INT64_MAX, &n)) return -1;
      o->cfg.seed = (uint64_t)n;
    } else if (!strcmp(a, "--limit")) {
      if (parse_int(a, v, 1, INT64_MAX, &o->limit)) return -1;
    } else if (!strcmp(a, "--data")) {
      o->data = v;
    } else if (!strcmp(a, "--out")) {
      o->out = v;
    } else if (!strcmp(a, "--save")) {
      o->save = v;
    } else if (!strcmp(a, "--load")) {
      o->load = v;
    } else if (!strcmp(a, "--trace")) {
      o->trace = v;
    } else if (!strcmp(a, "--dot")) {
      o->dot = v;
    } else if (!strcmp(a, "--bucket-kib")) {
      if (parse_int(a, v, 1, 1 << 22, &o->bucket_kib)) return -1;
    } else {
      fprintf(stderr, PROG ": unknown option %s\n", a);
      usage(stderr);
      return -1;
    }
  }
  if (o->epochs < 0) o->epochs = o->cfg.arch == FM_MLP ? 6 : 3;
  if (o->epochs == 0 && !o->load) {
    fprintf(stderr, PROG ": --epochs 0 only evaluates a model given by --load\n");
    return -1;
  }
  if (o->bucket_kib && !o->mpi) {
    fprintf(stderr, PROG ": --bucket-kib sizes the all-reduce of --mpi, which is not given\n");
    return -1;
  }
#if !GRAFT_HAVE_MPI
  if (o->mpi) {
    fprintf(stderr, PROG ": --mpi: this graft was built without MPI (GRAFT_HAVE_MPI is 0): "
                    "install Open MPI (Debian: libopenmpi-dev openmpi-bin) and rebuild with "
                    "meson -Dmpi=enabled\n");
    return -1;
  }
#endif
  return 0;
}

/* ---- training ---------------------------------------------------------------- */

/* What one run holds besides the model. */
typedef struct run {
  options *o;
  graft_runtime *rt;
  fm_model m;
  idx_dataset train, test;
  fm_trainer tr;
  int rank, ranks;  /* 0 of 1 without --mpi */
  int shared_cpus;  /* another rank on this node may run on this one's CPUs */
#if GRAFT_HAVE_MPI
  MPI_Comm comm; /* the training step's: a duplicate of MPI_COMM_WORLD */
#endif
  char err[1024];
} run;

/* printf on rank 0; the other ranks print nothing but their errors. */
static void say(const run *r, const char *fmt, ...) {
  if (r->rank) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

/* ---- MPI ---------------------------------------------------------------------- */

#if GRAFT_HAVE_MPI
/* 1 when a CPU this rank may run on is also another rank's on this node
 * (mpirun --bind-to none): graft binds a runtime's workers to the PUs the
 * process may use, first to last, so every such rank would put its first
 * worker on the same PU. */
static int shares_cpus(void) {
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
      MPI_SUCCESS)
    return 0;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine)) CPU_ZERO(&mine);
  static int use[CPU_SETSIZE], all[CPU_SETSIZE]; /* ranks of the node that may use each */
  for (int c = 0; c < CPU_SETSIZE; c++) use[c] = CPU_ISSET(c, &mine) != 0;
  int shared = 0;
  if (MPI_Allreduce(use, all, CPU_SETSIZE, MPI_INT, MPI_SUM, node) == MPI_SUCCESS)
    for (int c = 0; c < CPU_SETSIZE; c++) shared |= use[c] && all[c] > 1;
  MPI_Comm_free(&node);
  return shared;
}

/* MPI_Init_thread at MPI_THREAD_SERIALIZED (graft's workers post and
 * finish the all-reduces, one at a time) and the step's communicator. */
static int mpi_start(run *r, int *argc, char ***argv) {
  int provided;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    snprintf(r->err, sizeof r->err, "MPI_Init_thread failed");
    return -1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r->ranks);
  if (provided < MPI_THREAD_SERIALIZED) {
    snprintf(r->err, sizeof r->err,
             "MPI provides thread level %d, below MPI_THREAD_SERIALIZED (%d), which graft needs",
             provided, MPI_THREAD_SERIALIZED);
    return -1;
  }
  if (MPI_Comm_dup(MPI_COMM_WORLD, &r->comm) != MPI_SUCCESS) {
    snprintf(r->err, sizeof r->err, "MPI_Comm_dup failed");
    return -1;
  }
  r->shared_cpus = shares_cpus();
  if (r->o->batch % r->ranks) {
    snprintf(r->err, sizeof r->err,
             "--batch %lld does not split into %d equal shares: give a batch that divides by "
             "the number of ranks",
             (long long)r->o->batch, r->ranks);
    return -1;
  }
  return 0;
}
#endif

/* Every rank's rc agreed: -1 on every rank when any failed (a rank that did
 * not fail says so in err; the one that did printed its own reason), so
 * that no rank goes on to wait for another that stopped. */
static int agree(run *r, int rc) {
#if GRAFT_HAVE_MPI
  if (r->ranks > 1) {
    int mine = rc != 0, any = mine;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any && !mine) snprintf(r->err, sizeof r->err, "stopped: another rank failed");
    return any ? -1 : 0;
  }
#endif
  (void)r;
  return rc;
}

/* The sums of this epoch's training figures over the ranks. */
static void sum_over_ranks(run *r, double *loss_sum, int64_t *right, int64_t *rows) {
#if GRAFT_HAVE_MPI
  if (r->ranks > 1) {
    double v[3] = {*loss_sum, (double)*right, (double)*rows}, all[3];
    MPI_Allreduce(v, all, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    *loss_sum = all[0];
    *right = (int64_t)all[1];
    *rows = (int64_t)all[2];
  }
#else
  (void)r, (void)loss_sum, (void)right, (void)rows;
#endif
}

/* The Chrome trace of one step: a runtime that writes it, and a step
 * function on that runtime; the file is complete once the runtime is gone. */
static int traced_step(run *r, int64_t at, int64_t *b, double *loss, int64_t *right) {
  graft_runtime_opts opts;
  graft_runtime_opts_init(&opts);
  opts.num_threads = graft_runtime_num_threads(r->rt);
  char path[4096];
  snprintf(path, sizeof path, r->rank ? "%s.rank%d" : "%s", r->o->trace, r->rank);
  opts.trace_path = path;
  graft_runtime *trt = NULL;
  graft_function *f = NULL;
  graft_status s = graft_runtime_create(&opts, &trt);
  if (s) return fm_fail(s, "graft_runtime_create (--trace)", r->err, sizeof r->err);
  int rc = fm_step_function(trt, &r->m, &f, r->err, sizeof r->err);
  if (!rc) rc = fm_trainer_step(&r->tr, f, at, b, loss, right, r->err, sizeof r->err);
  graft_function_destroy(f);
  graft_runtime_destroy(trt);
  return rc;
}

static int write_dot(run *r) {
  FILE *f = fopen(r->o->dot, "w");
  if (!f) {
    snprintf(r->err, sizeof r->err, "%s: cannot create: %s", r->o->dot, strerror(errno));
    return -1;
  }
  graft_status s = graft_function_write_dot(r->m.step, f);
  if (fclose(f) && !s) {
    snprintf(r->err, sizeof r->err, "%s: cannot write: %s", r->o->dot, strerror(errno));
    return -1;
  }
  if (s) return fm_fail(s, "graft_function_write_dot", r->err, sizeof r->err);
  say(r, "graph of the training step written to %s (render: dot -Tsvg %s -o step.svg)\n", r->o->dot,
      r->o->dot);
  return 0;
}

static int train_epoch(run *r, int epoch, fm_epoch *e) {
  const options *o = r->o;
  fm_trainer *tr = &r->tr;
  fm_trainer_shuffle(tr, o->cfg.seed, epoch);
  fm_progress p;
  fm_progress_begin(&p, stdout, epoch, o->epochs, tr->n, tr->n * (o->epochs - epoch));
  double loss_sum = 0.0, start = fm_now_us();
  int64_t right_sum = 0, rows = 0; /* this rank's */
  for (int64_t at = 0, b; at < tr->n; at += b) {
    double loss;
    int64_t right, first_step = tr->steps == 0;
    /* The traced step is the second: the first one's timing includes
     * warming the worker team up. */
    int rc = o->trace && tr->steps == 1
                 ? traced_step(r, at, &b, &loss, &right)
                 : fm_trainer_step(tr, r->m.step, at, &b, &loss, &right, r->err, sizeof r->err);
    if (rc) return -1;
    loss_sum += loss * (double)tr->last_rows;
    right_sum += right;
    rows += tr->last_rows;
    if (first_step && o->dot && !r->rank && write_dot(r)) return -1;
    /* With --mpi: rank 0's share so far (the epoch's line has all). */
    if (!r->rank && rows)
      fm_progress_update(&p, at + b, loss_sum / (double)rows, (double)right_sum / (double)rows);
  }
  double secs = (fm_now_us() - start) * 1e-6;
  sum_over_ranks(r, &loss_sum, &right_sum, &rows);
  /* The test set is small: rank 0 evaluates it whole while the others
   * wait for it in agree. */
  fm_eval ev = {0};
  if (!r->rank && fm_evaluate(&r->m, &r->test, 0, EVAL_BATCH, &ev, r->err, sizeof r->err))
    return agree(r, -1);
  if (agree(r, 0)) return -1;
  *e = (fm_epoch){.epoch = epoch,
                  .train_loss = loss_sum / (double)rows,
                  .train_accuracy = (double)right_sum / (double)rows,
                  .test_loss = ev.loss,
                  .test_accuracy = ev.accuracy,
                  .images_per_s = (double)tr->n / secs,
                  .seconds = secs};
  if (!r->rank) fm_progress_end(&p, e);
  return 0;
}

/* ---- the run ---------------------------------------------------------------------- */

static const char *optimizer_name(graft_optimizer_kind k) {
  switch (k) {
  case GRAFT_OPT_SGD: return "sgd";
  case GRAFT_OPT_MOMENTUM: return "momentum";
  case GRAFT_OPT_ADAM: return "adam";
  case GRAFT_OPT_ADAMW: return "adamw";
  default: return "?";
  }
}

static int make_dir(const char *dir, char *err, size_t errlen) {
  if (mkdir(dir, 0777) && errno != EEXIST) {
    snprintf(err, errlen, "%s: cannot create the folder: %s", dir, strerror(errno));
    return -1;
  }
  return 0;
}

static int load_data(run *r) {
  double t0 = fm_now_us();
  if (idx_dataset_load(r->o->data, "train", FM_SIDE, FM_SIDE, FM_CLASSES, &r->train, r->err,
                       sizeof r->err) ||
      idx_dataset_load(r->o->data, "t10k", FM_SIDE, FM_SIDE, FM_CLASSES, &r->test, r->err,
                       sizeof r->err))
    return -1;
  if (fm_trainer_init(&r->tr, &r->m, &r->train, r->o->limit, r->o->batch, r->o->epochs, r->err,
                      sizeof r->err))
    return -1;
  if (r->ranks > 1 && fm_trainer_shard(&r->tr, r->rank, r->ranks, r->err, sizeof r->err))
    return -1;
  say(r, "data: %lld training images (of %lld), %lld test images from %s (%.2f s)\n",
      (long long)r->tr.n, (long long)r->train.n, (long long)r->test.n, r->o->data,
      (fm_now_us() - t0) * 1e-6);
  return 0;
}

static int setup(run *r) {
  const options *o = r->o;
  graft_runtime_opts opts;
  graft_runtime_opts_init(&opts);
  /* One thread unless asked: at batch 64 each of this model's ops is one
   * tile (bench_fashion: step_ws2 no faster than step_ws1), and on a
   * machine that other work shares, a second worker that waits for work
   * costs more than it brings. */
  opts.num_threads = o->threads                                                 ? o->threads
                     : getenv("GRAFT_NUM_THREADS") || getenv("OMP_NUM_THREADS") ? 0
                                                                                : 1;
  /* --mpi with ranks that share CPUs: the OS spreads the ranks' workers,
   * unless GRAFT_BIND says otherwise (graft_runtime_opts.bind would
   * override it). */
  if (r->shared_cpus && !getenv("GRAFT_BIND")) opts.bind = -1;
  /* A bad GRAFT_* value fails here; the message names the variable. */
  graft_status s = graft_runtime_create(&opts, &r->rt);
  if (s) return fm_fail(s, "graft_runtime_create", r->err, sizeof r->err);
  char desc[256];
  graft_runtime_describe(r->rt, desc, sizeof desc);
  say(r, "runtime: %s%s\n", desc,
      opts.bind == -1 ? " (binding off: this node's ranks share its CPUs, as under mpirun "
                        "--bind-to none; GRAFT_BIND=true binds)"
                      : "");
  fm_config cfg = o->cfg;
#if GRAFT_HAVE_MPI
  if (o->mpi) {
    cfg.dp = 1;
    cfg.comm = r->comm;
    cfg.bucket_bytes = o->bucket_kib * 1024;
  }
#endif
  if (fm_model_create(r->rt, &cfg, &r->m, r->err, sizeof r->err)) return -1;
  int64_t params = 0;
  for (int i = 0; i < r->m.n_params; i++)
    params += graft_tensor_numel(graft_variable_value(r->m.params[i]));
  say(r, "model: %s, %lld parameters; optimizer %s, lr %g; batch %lld; seed %llu\n",
      fm_arch_name(o->cfg.arch), (long long)params, optimizer_name(o->cfg.optimizer),
      o->cfg.lr > 0 ? o->cfg.lr : fm_default_lr(o->cfg.optimizer), (long long)o->batch,
      (unsigned long long)o->cfg.seed);
  if (o->mpi) {
    char bucket[64] = "graft's default";
    if (o->bucket_kib) snprintf(bucket, sizeof bucket, "%lld KiB", (long long)o->bucket_kib);
    say(r,
        "data parallel over MPI: %d rank%s, each training on %lld images of every batch of "
        "%lld; gradients (%.2f MiB) all-reduced in buckets of %s\n",
        r->ranks, r->ranks == 1 ? "" : "s", (long long)(o->batch / r->ranks), (long long)o->batch,
        (double)params * 4.0 / 1048576.0, bucket);
  }
  /* With --mpi, rank 0 loads and its variables are broadcast (main). */
  if (o->load && !r->rank) {
    s = graft_module_load(r->m.root, o->load, 0);
    if (s) {
      fm_fail(s, "--load", r->err, sizeof r->err);
      size_t n = strlen(r->err);
      snprintf(r->err + n, sizeof r->err - n,
               " (a checkpoint loads with the --model and --optimizer it was saved with)");
      return -1;
    }
    printf("loaded %s\n", o->load);
  }
  return 0;
}

/* --mpi: every rank starts from rank 0's variables (its weights, or what
 * it loaded: the weights, the optimizer's state and step count). */
static int broadcast(run *r) {
#if GRAFT_HAVE_MPI
  if (r->o->mpi) {
    graft_status s = graft_module_broadcast(r->m.root, r->comm, 0);
    if (s) return fm_fail(s, "graft_module_broadcast", r->err, sizeof r->err);
  }
#endif
  (void)r;
  return 0;
}

/* --mpi, after training: every rank holds the same bits, or the run fails. */
static int check_replicas(run *r) {
#if GRAFT_HAVE_MPI
  if (r->o->mpi) {
    int equal = 0;
    graft_status s = graft_module_replicas_equal(r->m.root, r->comm, &equal);
    if (s) return fm_fail(s, "graft_module_replicas_equal", r->err, sizeof r->err);
    if (!equal) {
      snprintf(r->err, sizeof r->err,
               "graft_module_replicas_equal: the %d ranks' variables differ after training",
               r->ranks);
      return -1;
    }
    say(r, "replicas: %s\n",
        r->ranks == 1 ? "one rank (nothing to compare)"
                      : "every rank holds the same bits (graft_module_replicas_equal)");
  }
#endif
  (void)r;
  return 0;
}

static int finish(run *r, const fm_epoch *epochs, int n_epochs, double train_s) {
  const options *o = r->o;
  fm_eval ev;
  if (fm_evaluate(&r->m, &r->test, 0, EVAL_BATCH, &ev, r->err, sizeof r->err)) return -1;
  if (n_epochs) {
    char ranks[64] = "";
    if (o->mpi) snprintf(ranks, sizeof ranks, " on each of %d ranks", r->ranks);
    printf("trained %d epoch%s in %.1f s: %.0f images/s (%lld steps of batch %lld, %d thread%s%s)\n",
           n_epochs, n_epochs == 1 ? "" : "s", train_s, (double)r->tr.n * n_epochs / train_s,
           (long long)r->tr.steps, (long long)o->batch, graft_runtime_num_threads(r->rt),
           graft_runtime_num_threads(r->rt) == 1 ? "" : "s", ranks);
  }
  fm_print_results(stdout, &ev);
  printf("\ntraining step: traced %d time(s); evaluation: traced %d time(s) for full and "
         "partial batches\n",
         graft_function_trace_count(r->m.step), graft_function_trace_count(r->m.eval));
  if (make_dir(o->out, r->err, sizeof r->err)) return -1;
  char path[4096], csv[4096], png[4096];
  if (n_epochs) {
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", o->out);
    const char *save = o->save ? o->save : path;
    graft_status s = graft_module_save(r->m.root, save);
    if (s) return fm_fail(s, "graft_module_save", r->err, sizeof r->err);
    printf("checkpoint: %s (weights and optimizer state; resume with --load)\n", save);
    snprintf(csv, sizeof csv, "%s/metrics.csv", o->out);
    if (fm_write_metrics(csv, epochs, n_epochs, r->err, sizeof r->err)) return -1;
    printf("metrics:    %s\n", csv);
    snprintf(png, sizeof png, "%s/curves.png", o->out);
    char title[128];
    snprintf(title, sizeof title, "graft: Fashion-MNIST %s, %s, batch %lld",
             fm_arch_name(o->cfg.arch), optimizer_name(o->cfg.optimizer), (long long)o->batch);
    int rc = fm_plot_curves(csv, png, title, n_epochs, r->err, sizeof r->err);
    if (rc < 0) return -1;
    if (rc > 0)
      printf("curves:     gnuplot is not installed: curves.png skipped "
             "(Debian: apt-get install gnuplot-nox)\n");
    else
      printf("curves:     %s\n", png);
  }
  if (o->trace)
    printf("Chrome trace of one training step: %s (open in https://ui.perfetto.dev)\n", o->trace);
  return 0;
}

static void run_free(run *r) {
  fm_trainer_free(&r->tr);
  fm_model_destroy(&r->m);
  graft_runtime_destroy(r->rt);
  idx_dataset_free(&r->train);
  idx_dataset_free(&r->test);
#if GRAFT_HAVE_MPI
  int initialized = 0;
  if (r->o->mpi && MPI_Initialized(&initialized) == MPI_SUCCESS && initialized) {
    if (r->comm != MPI_COMM_NULL) MPI_Comm_free(&r->comm);
    MPI_Finalize();
  }
#endif
}

int main(int argc, char **argv) {
  double t0 = fm_now_us();
  options o;
  if (parse_args(argc, argv, &o)) return 2;
  run r = {.o = &o, .ranks = 1};
  int rc = 0;
#if GRAFT_HAVE_MPI
  r.comm = MPI_COMM_NULL;
  if (o.mpi) rc = mpi_start(&r, &argc, &argv);
#endif
  fm_epoch *epochs = calloc((size_t)o.epochs + 1, sizeof *epochs);
  if (!rc && !epochs) rc = -1, snprintf(r.err, sizeof r.err, "out of memory");
  /* Each step agrees on failure itself (graft/mpi.h); between steps the
   * ranks agree here, so that none waits for one that stopped. */
  if (!rc) rc = setup(&r);
  if (!(rc = agree(&r, rc))) rc = agree(&r, broadcast(&r));
  if (!rc) rc = agree(&r, load_data(&r));
  double train_s = 0.0;
  for (int e = 1; e <= o.epochs && !rc; e++) {
    rc = train_epoch(&r, e, &epochs[e - 1]);
    train_s += epochs[e - 1].seconds;
  }
  if (!rc) rc = agree(&r, check_replicas(&r));
  if (!rc && !r.rank) rc = finish(&r, epochs, o.epochs, train_s);
  if (rc && r.ranks > 1)
    fprintf(stderr, PROG ": rank %d: %s\n", r.rank, r.err);
  else if (rc)
    fprintf(stderr, PROG ": %s\n", r.err);
  else
    say(&r, "total time: %.1f s\n", (fm_now_us() - t0) * 1e-6);
  run_free(&r);
  free(epochs);
  return rc ? 1 : 0;
}
