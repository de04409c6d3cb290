/* quickstart: train a small classifier with graft.
 *
 * One traced function is a whole SGD step: the forward pass of a 2-16-2 MLP,
 * the softmax cross-entropy loss, its gradients (graft_gradients) and the
 * updates of the four variables (graft_assign_sub).  The callback runs once;
 * every later call reuses the compiled plan.  Exits 0 when every call worked
 * and the loss fell, 1 otherwise.
 *
 *   make demo         (runs build/examples/quickstart [out.dot])
 *   dot -Tsvg quickstart.dot > quickstart.svg
 */
#include <stdio.h>

#include "graft.h"

enum { N = 64, IN = 2, HIDDEN = 16, CLASSES = 2, STEPS = 300 };

typedef struct model {
  graft_variable *v[4]; /* w1 [IN,HIDDEN], b1 [HIDDEN], w2 [HIDDEN,CLASSES], b2 [CLASSES] */
} model;

/* in: points [N,IN] (f32) and labels [N] (i32); out: the loss, the logits.
 * Runs once per input signature: host code here runs only at trace time. */
static graft_status sgd_step(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  model *m = user;
  graft_value *p[4], *g[4];
  for (int i = 0; i < 4; i++) p[i] = graft_read(t, m->v[i]);
  graft_value *h = graft_tanh(t, graft_add(t, graft_matmul(t, in[0], p[0], 0), p[1]));
  graft_value *logits = graft_add(t, graft_matmul(t, h, p[2], 0), p[3]);
  graft_value *loss = graft_softmax_cross_entropy(t, logits, in[1]);
  /* Op errors are sticky: graft_gradients returns the first one. */
  graft_status s = graft_gradients(t, 1, &loss, NULL, 4, p, GRAFT_UNCONNECTED_ZERO, g);
  if (s != GRAFT_OK) return s;
  graft_value *lr = graft_scalar(t, GRAFT_F32, 0.5);
  for (int i = 0; i < 4; i++) graft_assign_sub(t, m->v[i], graft_mul(t, lr, g[i]));
  out[0] = loss;
  out[1] = logits;
  return GRAFT_OK;
}

static float uniform(unsigned *seed) { /* in [-1, 1) */
  *seed = *seed * 1664525u + 1013904223u;
  return (float)(*seed >> 8) / 8388608.0f - 1.0f;
}

static double accuracy(const float *logits, const int32_t *labels) {
  int right = 0;
  for (int i = 0; i < N; i++) {
    int best = 0;
    for (int c = 1; c < CLASSES; c++)
      if (logits[i * CLASSES + c] > logits[i * CLASSES + best]) best = c;
    right += best == labels[i];
  }
  return 100.0 * right / N;
}

static int failed(graft_status s, const char *what) {
  if (s == GRAFT_OK) return 0;
  fprintf(stderr, "quickstart: %s failed (%s): %s\n", what, graft_status_name(s),
          graft_last_errmsg());
  return 1;
}

int main(int argc, char **argv) {
  const char *dot_path = argc > 1 ? argv[1] : "quickstart.dot";
  /* Points in [-1, 1)^2, label 1 where both coordinates have the same sign:
   * no straight line separates the classes, the hidden layer must. */
  unsigned seed = 7;
  float x[N][IN], w1[IN * HIDDEN], w2[HIDDEN * CLASSES];
  int32_t labels[N];
  for (int i = 0; i < N; i++) {
    x[i][0] = uniform(&seed);
    x[i][1] = uniform(&seed);
    labels[i] = (x[i][0] > 0) == (x[i][1] > 0);
  }
  for (int i = 0; i < IN * HIDDEN; i++) w1[i] = uniform(&seed);
  for (int i = 0; i < HIDDEN * CLASSES; i++) w2[i] = 0.5f * uniform(&seed);

  graft_runtime *rt = NULL;
  model m = {{NULL}};
  graft_function *f = NULL;
  graft_tensor *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL};
  int bad = failed(graft_runtime_create(NULL, &rt), "graft_runtime_create");
  if (!bad) {
    char desc[256];
    graft_runtime_describe(rt, desc, sizeof desc);
    printf("runtime: %s\n", desc);
  }

  const char *names[4] = {"w1", "b1", "w2", "b2"};
  const int ranks[4] = {2, 1, 2, 1};
  const int64_t shapes[4][2] = {{IN, HIDDEN}, {HIDDEN}, {HIDDEN, CLASSES}, {CLASSES}};
  const float *init[4] = {w1, NULL, w2, NULL}; /* copied; NULL = zeros */
  for (int i = 0; i < 4 && !bad; i++)
    bad = failed(graft_variable_create(NULL, names[i], GRAFT_F32, ranks[i], shapes[i], init[i],
                                       GRAFT_VAR_TRAINABLE, &m.v[i]),
                 "graft_variable_create");

  graft_function_desc desc = {.name = "sgd_step", .trace = sgd_step, .user = &m,
                              .n_inputs = 2, .n_outputs = 2};
  bad = bad || failed(graft_function_create(rt, &desc, &f), "graft_function_create");
  const int64_t x_shape[] = {N, IN}, labels_shape[] = {N};
  bad = bad || failed(graft_tensor_wrap(GRAFT_F32, 2, x_shape, x, &in[0]), "graft_tensor_wrap");
  bad = bad || failed(graft_tensor_wrap(GRAFT_I32, 1, labels_shape, labels, &in[1]),
                      "graft_tensor_wrap");

  float first_loss = 0.0f, loss = 0.0f;
  for (int step = 0; step <= STEPS && !bad; step++) {
    /* The first call allocates the outputs (NULL slots); later calls write into them. */
    bad = failed(graft_function_call(f, 2, in, 2, out), "graft_function_call");
    if (bad) break;
    loss = *(const float *)graft_tensor_data(out[0]);
    if (step == 0) first_loss = loss;
    if (step % 50 == 0)
      printf("step %3d  loss %.4f  accuracy %5.1f%%\n", step, loss,
             accuracy(graft_tensor_data(out[1]), labels));
  }

  if (!bad) {
    printf("trace count after %d calls: %d\n", STEPS + 1, graft_function_trace_count(f));
    graft_plan_stats st;
    bad = failed(graft_function_stats(f, &st), "graft_function_stats");
    if (!bad)
      printf("plan: %lld nodes traced, %lld pruned, arena %lld bytes (%lld without reuse), "
             "%lld updates written straight into their variable\n",
             (long long)st.nodes, (long long)st.pruned_nodes, (long long)st.arena_bytes,
             (long long)st.naive_bytes, (long long)st.direct_assigns);
  }
  if (!bad && !(loss < 0.5f * first_loss)) {
    fprintf(stderr, "quickstart: the loss did not fall: %.4f -> %.4f\n", first_loss, loss);
    bad = 1;
  }
  if (!bad) {
    FILE *fp = fopen(dot_path, "w");
    if (!fp) {
      perror(dot_path);
      bad = 1;
    } else {
      bad = failed(graft_function_write_dot(f, fp), "graft_function_write_dot");
      bad |= fclose(fp) != 0;
      if (!bad) printf("graph written to %s (render: dot -Tsvg %s > quickstart.svg)\n", dot_path,
                       dot_path);
    }
  }

  for (int i = 0; i < 2; i++) {
    graft_tensor_destroy(out[i]);
    graft_tensor_destroy(in[i]);
  }
  graft_function_destroy(f);
  for (int i = 0; i < 4; i++) graft_variable_destroy(m.v[i]);
  graft_runtime_destroy(rt);
  return bad;
}
