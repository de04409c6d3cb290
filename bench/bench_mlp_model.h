/* bench_mlp_model.h: the MLP that bench_mlp and bench_hvp share.
 *
 * An MLP 784-1024-1024-10 (relu, softmax cross-entropy) on one batch of 256
 * rows, f32, with i32 labels.  The data are synthetic and seeded: x uniform
 * in [-1, 1), labels the argmax of x @ T for a fixed random "teacher" T, so
 * the loss has something to learn.  The six weights and biases W1, b1, W2,
 * b2, W3, b3 are graft variables (He-uniform weights for the relu layers,
 * half that variance for the logits; biases uniform in [-0.01, 0.01)).
 *
 * Header-only (static inline) so each benchmark stays one executable built
 * from one file.  Include bench_common.h first (BENCH_PROG names the program
 * in the messages).
 */
#ifndef GRAFT_BENCH_MLP_MODEL_H
#define GRAFT_BENCH_MLP_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "graft.h"

#define BATCH 256
#define N_LAYERS 3
#define N_VARS (2 * N_LAYERS)

static const int DIMS[N_LAYERS + 1] = {784, 1024, 1024, 10};

/* ---- sizes ------------------------------------------------------------------ */

/* Elements of layer l's weight. */
static inline int64_t w_count(int l) { return (int64_t)DIMS[l] * DIMS[l + 1]; }

/* Elements of variable i (W1, b1, W2, b2, W3, b3). */
static inline int64_t var_count(int i) { return i % 2 ? DIMS[i / 2 + 1] : w_count(i / 2); }

/* ---- the model and its data ------------------------------------------------- */

typedef struct model {
  float *x;                     /* [BATCH, DIMS[0]] */
  int32_t *labels;              /* [BATCH] */
  float *init[N_VARS];          /* initial W1, b1, W2, b2, W3, b3 */
  graft_variable *var[N_VARS];  /* the same, as graft variables */
  graft_tensor *tx, *tlabels, *tloss;
} model;

static inline int model_create(model *m) {
  memset(m, 0, sizeof *m);
  m->x = bench_alloc_f32((int64_t)BATCH * DIMS[0]);
  m->labels = malloc(BATCH * sizeof *m->labels);
  float *teacher = bench_alloc_f32((int64_t)DIMS[0] * DIMS[N_LAYERS]);
  int rc = -1;
  if (!m->x || !m->labels || !teacher) goto oom;
  bench_fill_f32(m->x, (int64_t)BATCH * DIMS[0], 1, 1.0f);
  bench_fill_f32(teacher, (int64_t)DIMS[0] * DIMS[N_LAYERS], 2, 1.0f);
  for (int i = 0; i < BATCH; i++) {
    int best = 0;
    double best_v = -INFINITY;
    for (int c = 0; c < DIMS[N_LAYERS]; c++) {
      double v = 0.0;
      for (int k = 0; k < DIMS[0]; k++)
        v += (double)m->x[(int64_t)i * DIMS[0] + k] * teacher[(int64_t)k * DIMS[N_LAYERS] + c];
      if (v > best_v) best_v = v, best = c;
    }
    m->labels[i] = best;
  }
  for (int l = 0; l < N_LAYERS; l++) {
    char name[16];
    /* He-uniform for the relu layers, half that variance for the logits. */
    float scale = (float)sqrt((l + 1 < N_LAYERS ? 6.0 : 3.0) / DIMS[l]);
    m->init[2 * l] = bench_alloc_f32(w_count(l));
    m->init[2 * l + 1] = bench_alloc_f32(DIMS[l + 1]);
    if (!m->init[2 * l] || !m->init[2 * l + 1]) goto oom;
    bench_fill_f32(m->init[2 * l], w_count(l), 10 + 2 * (uint64_t)l, scale);
    bench_fill_f32(m->init[2 * l + 1], DIMS[l + 1], 11 + 2 * (uint64_t)l, 0.01f);
    snprintf(name, sizeof name, "W%d", l + 1);
    if (bench_variable_f32(name, DIMS[l], DIMS[l + 1], m->init[2 * l], GRAFT_VAR_TRAINABLE,
                           &m->var[2 * l]))
      goto out;
    snprintf(name, sizeof name, "b%d", l + 1);
    if (bench_variable_f32(name, DIMS[l + 1], 0, m->init[2 * l + 1], GRAFT_VAR_TRAINABLE,
                           &m->var[2 * l + 1]))
      goto out;
  }
  const int64_t xshape[2] = {BATCH, DIMS[0]}, lshape[1] = {BATCH};
  if (bench_report(graft_tensor_wrap(GRAFT_F32, 2, xshape, m->x, &m->tx), "graft_tensor_wrap",
                   NULL) ||
      bench_report(graft_tensor_wrap(GRAFT_I32, 1, lshape, m->labels, &m->tlabels),
                   "graft_tensor_wrap", NULL) ||
      bench_report(graft_tensor_create(GRAFT_F32, 0, NULL, &m->tloss), "graft_tensor_create",
                   NULL))
    goto out;
  rc = 0;
  goto out;
oom:
  bench_oom();
out:
  free(teacher);
  return rc;
}

static inline void model_destroy(model *m) {
  graft_tensor_destroy(m->tx);
  graft_tensor_destroy(m->tlabels);
  graft_tensor_destroy(m->tloss);
  for (int i = 0; i < N_VARS; i++) {
    graft_variable_destroy(m->var[i]);
    free(m->init[i]);
  }
  free(m->x);
  free(m->labels);
}

/* ---- the loss, traced ------------------------------------------------------- */

/* The loss of the batch with the weights params[] (W1, b1, W2, b2, W3, b3,
 * any values of their shapes), or, with params NULL, with the variables:
 * each is read just before its layer and reads[] receives the six reads. */
static inline graft_value *mlp_loss(graft_trace *t, model *m, graft_value *x, graft_value *labels,
                                    graft_value *const *params, graft_value **reads) {
  graft_value *h = x;
  for (int l = 0; l < N_LAYERS; l++) {
    graft_value *w, *b;
    if (params) {
      w = params[2 * l], b = params[2 * l + 1];
    } else {
      w = reads[2 * l] = graft_read(t, m->var[2 * l]);
      b = reads[2 * l + 1] = graft_read(t, m->var[2 * l + 1]);
    }
    h = graft_add(t, graft_matmul(t, h, w, 0), b);
    if (l + 1 < N_LAYERS) h = graft_relu(t, h);
  }
  return graft_softmax_cross_entropy(t, h, labels);
}

/* The loss of the batch; reads[] receives the six variable reads. */
static inline graft_value *trace_loss(graft_trace *t, model *m, graft_value *x,
                                      graft_value *labels, graft_value **reads) {
  return mlp_loss(t, m, x, labels, NULL, reads);
}

#endif /* GRAFT_BENCH_MLP_MODEL_H */
