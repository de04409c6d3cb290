/* fmnist_model: the classifier, its training step and its evaluation
 * (fmnist_model.h). */
#include "fmnist_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const fm_class_names[FM_CLASSES] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                                "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                                "Bag",         "Ankle boot"};

/* Fashion-MNIST's training-set pixel mean and standard deviation (of
 * pixel / 255). */
#define PIXEL_MEAN 0.2860
#define PIXEL_STD 0.3530

static const int MLP_DIMS[] = {FM_PIXELS, 256, 128, FM_CLASSES};
#define MLP_LAYERS 3
/* The CNN: conv 32 and conv 64 (3x3, pad 1, each with relu and max-pool 2),
 * dense 128, dense 10; the second pool leaves 64 x 7 x 7. */
#define CNN_C1 32
#define CNN_C2 64
#define CNN_HIDDEN 128
#define CNN_FLAT (CNN_C2 * (FM_SIDE / 4) * (FM_SIDE / 4))

const char *fm_arch_name(fm_arch a) {
  return a == FM_MLP ? "MLP 784-256-128-10" : "CNN conv32-pool-conv64-pool-128-10";
}

int fm_fail(graft_status s, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %s: %s", what, graft_status_name(s), graft_last_errmsg());
  return -1;
}

double fm_default_lr(graft_optimizer_kind k) {
  switch (k) {
  case GRAFT_OPT_SGD: return 0.1;
  case GRAFT_OPT_MOMENTUM:
  case GRAFT_OPT_NESTEROV: return 0.01;
  default: return 1e-3; /* Adam, AdamW: PyTorch's default */
  }
}

/* ---- the network ------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-bound, bound). */
static float uniform(uint64_t *s, double bound) {
  return (float)(((double)(splitmix64(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0) * bound);
}

/* A layer under net: a weight w of shape wshape (rank 2 or 4) drawn
 * He-uniform (bound sqrt(6 / fan_in), fan_in = the product of all dims but
 * the output dim: the relu layers' scale), and a bias b [out] of zeros. */
static int layer_create(fm_model *m, const char *name, int rank, const int64_t *wshape,
                        uint64_t *rng, char *err, size_t errlen) {
  graft_module *layer;
  graft_status s = graft_module_create(m->net, name, &layer);
  if (s) return fm_fail(s, "graft_module_create", err, errlen);
  /* Dense weights are [in, out], conv weights [out, in, kh, kw]. */
  int64_t out = rank == 2 ? wshape[1] : wshape[0], count = 1;
  for (int i = 0; i < rank; i++) count *= wshape[i];
  float *w = malloc((size_t)count * sizeof *w);
  if (!w) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  double bound = sqrt(6.0 / (double)(count / out));
  for (int64_t i = 0; i < count; i++) w[i] = uniform(rng, bound);
  s = graft_variable_create(layer, "w", GRAFT_F32, rank, wshape, w, GRAFT_VAR_TRAINABLE,
                            &m->params[m->n_params]);
  free(w);
  if (s) return fm_fail(s, "graft_variable_create", err, errlen);
  m->n_params++;
  s = graft_variable_create(layer, "b", GRAFT_F32, 1, &out, NULL, GRAFT_VAR_TRAINABLE,
                            &m->params[m->n_params]);
  if (s) return fm_fail(s, "graft_variable_create", err, errlen);
  m->n_params++;
  return 0;
}

/* x [B, in] w [in, out] + b [out], then relu unless last. */
static graft_value *dense(graft_trace *t, graft_value *x, graft_value *w, graft_value *b,
                          int last) {
  graft_value *h = graft_add(t, graft_matmul(t, x, w, 0), b);
  return last ? h : graft_relu(t, h);
}

/* conv 3x3 (pad 1) of x [B, C, H, W] with w [O, C, 3, 3] + b [O], relu,
 * max-pool 2: [B, O, H / 2, W / 2].  Computed as pool, then bias, then
 * relu: the same values (a per-channel bias and relu are monotonic, so
 * they commute with the max), on a quarter of the elements. */
static graft_value *conv_block(graft_trace *t, graft_value *x, graft_value *w, graft_value *b) {
  static const int64_t pad[2] = {1, 1}, two[2] = {2, 2};
  const int64_t bias_shape[3] = {graft_value_shape(w) ? graft_value_shape(w)[0] : 1, 1, 1};
  graft_value *h = graft_max_pool2d(t, graft_conv2d(t, x, w, NULL, pad, NULL, 1), two, NULL, NULL);
  return graft_relu(t, graft_add(t, h, graft_reshape(t, b, 3, bias_shape)));
}

graft_value *fm_forward(graft_trace *t, fm_model *m, graft_value *x, graft_value **p) {
  for (int i = 0; i < m->n_params; i++) p[i] = graft_read(t, m->params[i]);
  if (m->arch == FM_MLP) {
    graft_value *h = x;
    for (int l = 0; l < MLP_LAYERS; l++)
      h = dense(t, h, p[2 * l], p[2 * l + 1], l + 1 == MLP_LAYERS);
    return h;
  }
  /* The batch dim is the signature's symbol: reshapes keep it. */
  const int64_t batch = graft_value_shape(x) ? graft_value_shape(x)[0] : 0;
  const int64_t image[4] = {batch, 1, FM_SIDE, FM_SIDE}, flat[2] = {batch, CNN_FLAT};
  graft_value *h = graft_reshape(t, x, 4, image);
  h = conv_block(t, h, p[0], p[1]);
  h = conv_block(t, h, p[2], p[3]);
  h = graft_reshape(t, h, 2, flat);
  h = dense(t, h, p[4], p[5], 0);
  return dense(t, h, p[6], p[7], 1);
}

/* step: (x, labels) -> (loss, logits), and one optimizer update. */
static graft_status step_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  fm_model *m = user;
  graft_value *p[FM_MAX_PARAMS], *g[FM_MAX_PARAMS];
  graft_value *logits = fm_forward(t, m, in[0], p);
  graft_value *loss = graft_softmax_cross_entropy(t, logits, in[1]);
  graft_status s = graft_gradients(t, 1, &loss, NULL, m->n_params, p, GRAFT_UNCONNECTED_ZERO, g);
  if (s) return s;
#if GRAFT_HAVE_MPI
  if (m->dp) {
    /* Each rank's gradient is its shard's mean; their mean over the ranks
     * is the gradient of the whole batch, and every rank applies the same
     * update. */
    const graft_allreduce_opts ar = {.bucket_bytes = m->bucket_bytes};
    s = graft_module_allreduce_gradients(t, m->net, m->comm, m->n_params, g, g, &ar);
    if (s) return s;
  }
#endif
  s = graft_optimizer_apply(t, m->opt, m->n_params, g);
  if (s) return s;
  out[0] = loss;
  out[1] = logits;
  return GRAFT_OK;
}

/* eval: (x, labels) -> (loss, logits); reads the variables, changes none. */
static graft_status eval_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                               graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  graft_value *p[FM_MAX_PARAMS];
  graft_value *logits = fm_forward(t, user, in[0], p);
  out[0] = graft_softmax_cross_entropy(t, logits, in[1]);
  out[1] = logits;
  return GRAFT_OK;
}

/* Both functions take a batch of any size: x [-1, 784], labels [-1]. */
static const graft_dtype SIG_DTYPES[2] = {GRAFT_F32, GRAFT_I32};
static const int SIG_RANKS[2] = {2, 1};
static const int64_t SIG_X[2] = {-1, FM_PIXELS}, SIG_LABELS[1] = {-1};
static const int64_t *const SIG_SHAPES[2] = {SIG_X, SIG_LABELS};
const graft_signature fm_signature = {
    .n = 2, .dtypes = SIG_DTYPES, .ranks = SIG_RANKS, .shapes = SIG_SHAPES};

static int function_create(graft_runtime *rt, fm_model *m, const char *name, graft_trace_fn fn,
                           graft_function **out, char *err, size_t errlen) {
  graft_function_desc d = {
      .name = name, .trace = fn, .user = m, .n_inputs = 2, .n_outputs = 2, .signature = &fm_signature};
  graft_status s = graft_function_create(rt, &d, out);
  return s ? fm_fail(s, "graft_function_create", err, errlen) : 0;
}

int fm_step_function(graft_runtime *rt, fm_model *m, graft_function **out, char *err,
                     size_t errlen) {
  return function_create(rt, m, "train_step", step_trace, out, err, errlen);
}

#if GRAFT_HAVE_MPI
/* The step's all-reduce pairs grads[i] with the i-th trainable variable of
 * the network module: the order of m->params, which this checks. */
static int dp_setup(fm_model *m, const fm_config *cfg, char *err, size_t errlen) {
  graft_variable *vars[FM_MAX_PARAMS];
  int64_t n = 0;
  graft_status s = graft_module_trainable_variables(m->net, FM_MAX_PARAMS, vars, &n);
  if (s) return fm_fail(s, "graft_module_trainable_variables", err, errlen);
  for (int i = 0; i < m->n_params; i++)
    if (n != m->n_params || vars[i] != m->params[i]) {
      snprintf(err, errlen, "the network's trainable variables are not its parameters in order");
      return -1;
    }
  m->dp = 1;
  m->comm = cfg->comm;
  m->bucket_bytes = cfg->bucket_bytes;
  return 0;
}
#endif

int fm_model_create(graft_runtime *rt, const fm_config *cfg, fm_model *m, char *err,
                    size_t errlen) {
  memset(m, 0, sizeof *m);
  m->arch = cfg->arch;
  graft_status s;
  uint64_t rng = cfg->seed;
  if ((s = graft_module_create(NULL, "fashion", &m->root)))
    return fm_fail(s, "graft_module_create", err, errlen);
  if ((s = graft_module_create(m->root, "model", &m->net))) {
    fm_fail(s, "graft_module_create", err, errlen);
    goto fail;
  }
  if (cfg->arch == FM_MLP) {
    for (int l = 0; l < MLP_LAYERS; l++) {
      char name[8];
      const int64_t ws[2] = {MLP_DIMS[l], MLP_DIMS[l + 1]};
      snprintf(name, sizeof name, "fc%d", l + 1);
      if (layer_create(m, name, 2, ws, &rng, err, errlen)) goto fail;
    }
  } else {
    const int64_t c1[4] = {CNN_C1, 1, 3, 3}, c2[4] = {CNN_C2, CNN_C1, 3, 3},
                  f1[2] = {CNN_FLAT, CNN_HIDDEN}, f2[2] = {CNN_HIDDEN, FM_CLASSES};
    if (layer_create(m, "conv1", 4, c1, &rng, err, errlen) ||
        layer_create(m, "conv2", 4, c2, &rng, err, errlen) ||
        layer_create(m, "fc1", 2, f1, &rng, err, errlen) ||
        layer_create(m, "fc2", 2, f2, &rng, err, errlen))
      goto fail;
  }
#if GRAFT_HAVE_MPI
  if (cfg->dp && dp_setup(m, cfg, err, errlen)) goto fail;
#endif
  m->base_lr = cfg->lr > 0 ? cfg->lr : fm_default_lr(cfg->optimizer);
  const float lr0 = (float)m->base_lr;
  if ((s = graft_variable_create(NULL, "lr", GRAFT_F32, 0, NULL, &lr0, 0, &m->lr))) {
    fm_fail(s, "graft_variable_create", err, errlen);
    goto fail;
  }
  graft_optimizer_desc od = {.kind = cfg->optimizer,
                             .lr_var = m->lr,
                             .weight_decay = cfg->optimizer == GRAFT_OPT_ADAMW ? 0.01 : 0.0};
  if ((s = graft_optimizer_create(m->root, "optimizer", &od, m->n_params, m->params, &m->opt))) {
    fm_fail(s, "graft_optimizer_create", err, errlen);
    goto fail;
  }
  if (fm_step_function(rt, m, &m->step, err, errlen) ||
      function_create(rt, m, "evaluate", eval_trace, &m->eval, err, errlen))
    goto fail;
  return 0;
fail:
  fm_model_destroy(m);
  return -1;
}

void fm_model_destroy(fm_model *m) {
  graft_function_destroy(m->step);
  graft_function_destroy(m->eval);
  graft_module_destroy(m->root);
  graft_variable_destroy(m->lr);
  memset(m, 0, sizeof *m);
}

/* ---- data and evaluation ------------------------------------------------------ */

void fm_batch_fill(const idx_dataset *d, const int64_t *idx, int64_t n, float *x, int32_t *labels) {
  const float scale = (float)(1.0 / (255.0 * PIXEL_STD)), shift = (float)(-PIXEL_MEAN / PIXEL_STD);
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *img = d->images + idx[i] * FM_PIXELS;
    float *row = x + i * FM_PIXELS;
    for (int k = 0; k < FM_PIXELS; k++) row[k] = (float)img[k] * scale + shift;
    labels[i] = d->labels[idx[i]];
  }
}

void fm_argmax(const float *logits, int64_t n, int32_t *pred) {
  for (int64_t i = 0; i < n; i++) {
    const float *r = logits + i * FM_CLASSES;
    int best = 0;
    for (int c = 1; c < FM_CLASSES; c++)
      if (r[c] > r[best]) best = c;
    pred[i] = best;
  }
}

int fm_evaluate(fm_model *m, const idx_dataset *d, int64_t n, int64_t batch, fm_eval *res,
                char *err, size_t errlen) {
  memset(res, 0, sizeof *res);
  if (n <= 0 || n > d->n) n = d->n;
  if (batch > n) batch = n;
  float *x = malloc((size_t)batch * FM_PIXELS * sizeof *x);
  int32_t *labels = malloc((size_t)batch * sizeof *labels),
          *pred = malloc((size_t)batch * sizeof *pred);
  int64_t *idx = malloc((size_t)batch * sizeof *idx);
  int rc = -1;
  double loss_sum = 0.0;
  int64_t right = 0;
  if (!x || !labels || !pred || !idx) {
    snprintf(err, errlen, "out of memory");
    goto out;
  }
  for (int64_t at = 0; at < n; at += batch) {
    int64_t b = n - at < batch ? n - at : batch;
    for (int64_t i = 0; i < b; i++) idx[i] = at + i;
    fm_batch_fill(d, idx, b, x, labels);
    const int64_t xs[2] = {b, FM_PIXELS}, ls[1] = {b};
    graft_tensor *in[2] = {NULL, NULL}, *outs[2] = {NULL, NULL};
    graft_status s = graft_tensor_wrap(GRAFT_F32, 2, xs, x, &in[0]);
    if (!s) s = graft_tensor_wrap(GRAFT_I32, 1, ls, labels, &in[1]);
    if (!s) s = graft_function_call(m->eval, 2, in, 2, outs);
    if (!s) {
      loss_sum += (double)*(const float *)graft_tensor_data(outs[0]) * (double)b;
      fm_argmax(graft_tensor_data(outs[1]), b, pred);
      for (int64_t i = 0; i < b; i++) {
        res->confusion[labels[i]][pred[i]]++;
        right += pred[i] == labels[i];
      }
    }
    for (int i = 0; i < 2; i++) {
      graft_tensor_destroy(in[i]);
      graft_tensor_destroy(outs[i]);
    }
    if (s) {
      fm_fail(s, "evaluate", err, errlen);
      goto out;
    }
  }
  res->n = n;
  res->loss = loss_sum / (double)n;
  res->accuracy = (double)right / (double)n;
  rc = 0;
out:
  free(x);
  free(labels);
  free(pred);
  free(idx);
  return rc;
}

/* ---- training --------------------------------------------------------------------- */

/* x [rows, 784] and labels [rows] over the trainer's buffers, and the
 * logits [rows, 10] (t[0..3), all or none). */
static graft_status batch_tensors(fm_trainer *tr, int64_t rows, graft_tensor **t) {
  const int64_t xs[2] = {rows, FM_PIXELS}, ls[1] = {rows}, os[2] = {rows, FM_CLASSES};
  t[0] = t[1] = t[2] = NULL;
  graft_status s = graft_tensor_wrap(GRAFT_F32, 2, xs, tr->x, &t[0]);
  if (!s) s = graft_tensor_wrap(GRAFT_I32, 1, ls, tr->labels, &t[1]);
  if (!s) s = graft_tensor_create(GRAFT_F32, 2, os, &t[2]);
  if (s)
    for (int i = 0; i < 3; i++) {
      graft_tensor_destroy(t[i]);
      t[i] = NULL;
    }
  return s;
}

int fm_trainer_init(fm_trainer *tr, fm_model *m, const idx_dataset *d, int64_t n, int64_t batch,
                    int epochs, char *err, size_t errlen) {
  memset(tr, 0, sizeof *tr);
  tr->m = m;
  tr->d = d;
  tr->n = n <= 0 || n > d->n ? d->n : n;
  tr->batch = batch;
  tr->total_steps = (tr->n + batch - 1) / batch * epochs;
  tr->order = malloc((size_t)tr->n * sizeof *tr->order);
  tr->x = malloc((size_t)batch * FM_PIXELS * sizeof *tr->x);
  tr->labels = malloc((size_t)batch * sizeof *tr->labels);
  tr->pred = malloc((size_t)batch * sizeof *tr->pred);
  if (!tr->order || !tr->x || !tr->labels || !tr->pred) {
    fm_trainer_free(tr);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int64_t i = 0; i < tr->n; i++) tr->order[i] = i;
  tr->ranks = 1;
  tr->rows = batch;
  graft_tensor *t[3];
  graft_status s = batch_tensors(tr, batch, t);
  if (!s) s = graft_tensor_create(GRAFT_F32, 0, NULL, &tr->out[0]);
  if (!s) s = graft_tensor_create(GRAFT_F32, 0, NULL, &tr->lr);
  tr->in[0] = t[0], tr->in[1] = t[1], tr->out[1] = t[2];
  if (s) {
    fm_fail(s, "graft_tensor_create", err, errlen);
    fm_trainer_free(tr);
    return -1;
  }
  return 0;
}

int fm_trainer_shard(fm_trainer *tr, int rank, int ranks, char *err, size_t errlen) {
  if (ranks < 1 || rank < 0 || rank >= ranks || tr->batch % ranks) {
    snprintf(err, errlen,
             "the batch of %lld images does not split into %d equal shares (rank %d): give a "
             "--batch that divides by the number of ranks",
             (long long)tr->batch, ranks, rank);
    return -1;
  }
  graft_tensor *t[3];
  graft_status s = batch_tensors(tr, tr->batch / ranks, t);
  if (s) return fm_fail(s, "graft_tensor_create", err, errlen);
  graft_tensor_destroy(tr->in[0]);
  graft_tensor_destroy(tr->in[1]);
  graft_tensor_destroy(tr->out[1]);
  tr->in[0] = t[0], tr->in[1] = t[1], tr->out[1] = t[2];
  tr->rank = rank;
  tr->ranks = ranks;
  tr->rows = tr->batch / ranks;
  return 0;
}

void fm_trainer_free(fm_trainer *tr) {
  for (int i = 0; i < 2; i++) {
    graft_tensor_destroy(tr->in[i]);
    graft_tensor_destroy(tr->out[i]);
  }
  graft_tensor_destroy(tr->lr);
  free(tr->order);
  free(tr->x);
  free(tr->labels);
  free(tr->pred);
  memset(tr, 0, sizeof *tr);
}

void fm_trainer_shuffle(fm_trainer *tr, uint64_t seed, int epoch) {
  uint64_t rng = seed * 0x2545F4914F6CDD1Dull + (uint64_t)epoch;
  for (int64_t i = 0; i < tr->n; i++) tr->order[i] = i;
  for (int64_t i = tr->n - 1; i > 0; i--) { /* Fisher-Yates */
    int64_t j = (int64_t)(splitmix64(&rng) % (uint64_t)(i + 1)), t = tr->order[i];
    tr->order[i] = tr->order[j];
    tr->order[j] = t;
  }
}

int fm_trainer_step(fm_trainer *tr, graft_function *f, int64_t at, int64_t *b, double *loss,
                    int64_t *right, char *err, size_t errlen) {
  int64_t all = tr->n - at < tr->batch ? tr->n - at : tr->batch;
  /* This rank's equal share of the batch (all of it on one rank). */
  int64_t k = all / tr->ranks;
  *b = all;
  tr->last_rows = k;
  if (k == 0) { /* fewer images left than ranks: every rank skips them */
    *loss = 0.0;
    *right = 0;
    return 0;
  }
  fm_batch_fill(tr->d, tr->order + at + tr->rank * k, k, tr->x, tr->labels);
  graft_tensor *in[2] = {tr->in[0], tr->in[1]}, *out[2] = {tr->out[0], tr->out[1]};
  graft_status s = GRAFT_OK;
  if (k != tr->rows) { /* the last, partial batch: tensors of its size */
    const int64_t xs[2] = {k, FM_PIXELS}, ls[1] = {k};
    in[0] = in[1] = out[0] = out[1] = NULL;
    s = graft_tensor_wrap(GRAFT_F32, 2, xs, tr->x, &in[0]);
    if (!s) s = graft_tensor_wrap(GRAFT_I32, 1, ls, tr->labels, &in[1]);
  }
  if (!s && tr->total_steps > 0) {
    const double pi = 3.14159265358979323846;
    double frac = (double)tr->steps / (double)tr->total_steps;
    float lr = (float)(tr->m->base_lr * 0.5 * (1.0 + cos(pi * (frac < 1.0 ? frac : 1.0))));
    *(float *)graft_tensor_data(tr->lr) = lr;
    s = graft_variable_set(tr->m->lr, tr->lr);
  }
  if (!s) s = graft_function_call(f, 2, in, 2, out);
  if (!s) {
    *loss = *(const float *)graft_tensor_data(out[0]);
    fm_argmax(graft_tensor_data(out[1]), k, tr->pred);
    *right = 0;
    for (int64_t i = 0; i < k; i++) *right += tr->pred[i] == tr->labels[i];
    tr->steps++;
  }
  if (k != tr->rows)
    for (int i = 0; i < 2; i++) {
      graft_tensor_destroy(in[i]);
      graft_tensor_destroy(out[i]);
    }
  return s ? fm_fail(s, "training step", err, errlen) : 0;
}

int fm_train_epoch(fm_trainer *tr, uint64_t seed, int epoch, double *loss, double *accuracy,
                   char *err, size_t errlen) {
  fm_trainer_shuffle(tr, seed, epoch);
  double loss_sum = 0.0;
  int64_t right_sum = 0, rows = 0;
  for (int64_t at = 0, b; at < tr->n; at += b) {
    double l;
    int64_t right;
    if (fm_trainer_step(tr, tr->m->step, at, &b, &l, &right, err, errlen)) return -1;
    loss_sum += l * (double)tr->last_rows;
    right_sum += right;
    rows += tr->last_rows;
  }
  *loss = loss_sum / (double)rows;
  *accuracy = (double)right_sum / (double)rows;
  return 0;
}
