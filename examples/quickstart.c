/* quickstart: trace a 2-layer MLP forward pass over variables, call it twice
 * (the second call reuses the compiled plan), print the output and the trace
 * count, and write the graph as Graphviz DOT.
 *
 *   make demo            (or: build/examples/quickstart [out.dot])
 *   dot -Tsvg quickstart.dot > quickstart.svg
 */
#include <stdio.h>
#include <stdlib.h>

#include "graft.h"

enum { BATCH = 4, IN = 8, HIDDEN = 16, OUT = 3 };

typedef struct mlp {
  graft_variable *w1, *b1, *w2, *b2;
} mlp;

/* Runs once per input signature; later calls reuse the plan. */
static graft_status forward(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in;
  (void)n_out;
  mlp *m = user;
  graft_value *h = graft_relu(t, graft_add(t, graft_matmul(t, in[0], graft_read(t, m->w1), 0),
                                           graft_read(t, m->b1)));
  graft_value *logits = graft_add(t, graft_matmul(t, h, graft_read(t, m->w2), 0),
                                  graft_read(t, m->b2));
  out[0] = graft_softmax(t, logits, -1);
  return GRAFT_OK;
}

static void fill_random(float *x, int64_t n, float scale, unsigned *seed) {
  for (int64_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    x[i] = scale * ((float)(*seed >> 8) / 16777216.0f - 0.5f);
  }
}

static int check(graft_status s, const char *what, const graft_function *f) {
  if (s == GRAFT_OK) return 0;
  fprintf(stderr, "quickstart: %s failed: %s%s%s\n", what, graft_status_str(s), f ? ": " : "",
          f ? graft_function_errmsg(f) : "");
  return 1;
}

int main(int argc, char **argv) {
  const char *dot_path = argc > 1 ? argv[1] : "quickstart.dot";
  unsigned seed = 42;
  float w1[IN * HIDDEN], b1[HIDDEN] = {0}, w2[HIDDEN * OUT], b2[OUT] = {0}, x[BATCH * IN];
  fill_random(w1, IN * HIDDEN, 0.8f, &seed);
  fill_random(w2, HIDDEN * OUT, 0.8f, &seed);
  fill_random(x, BATCH * IN, 2.0f, &seed);

  graft_runtime *rt = NULL;
  if (check(graft_runtime_create(NULL, &rt), "graft_runtime_create", NULL)) return 1;
  char desc[256];
  graft_runtime_describe(rt, desc, sizeof desc);
  printf("runtime: %s\n", desc);

  mlp m = {0};
  const int64_t s_w1[] = {IN, HIDDEN}, s_b1[] = {HIDDEN}, s_w2[] = {HIDDEN, OUT}, s_b2[] = {OUT};
  int bad = check(graft_variable_create(NULL, "w1", GRAFT_F32, 2, s_w1, w1, GRAFT_VAR_TRAINABLE, &m.w1), "w1", NULL) ||
            check(graft_variable_create(NULL, "b1", GRAFT_F32, 1, s_b1, b1, GRAFT_VAR_TRAINABLE, &m.b1), "b1", NULL) ||
            check(graft_variable_create(NULL, "w2", GRAFT_F32, 2, s_w2, w2, GRAFT_VAR_TRAINABLE, &m.w2), "w2", NULL) ||
            check(graft_variable_create(NULL, "b2", GRAFT_F32, 1, s_b2, b2, GRAFT_VAR_TRAINABLE, &m.b2), "b2", NULL);

  graft_function *f = NULL;
  graft_function_desc d = {.name = "mlp_forward", .trace = forward, .user = &m,
                           .n_inputs = 1, .n_outputs = 1};
  bad = bad || check(graft_function_create(rt, &d, &f), "graft_function_create", NULL);

  const int64_t s_x[] = {BATCH, IN};
  graft_tensor *xt = NULL, *y = NULL;
  bad = bad || check(graft_tensor_wrap(GRAFT_F32, 2, s_x, x, &xt), "graft_tensor_wrap", NULL);
  for (int call = 0; call < 2 && !bad; call++) {
    graft_tensor_destroy(y);
    y = NULL;
    bad = check(graft_function_call(f, 1, &xt, 1, &y), "graft_function_call", f);
  }
  if (!bad) {
    const float *p = graft_tensor_data(y);
    printf("softmax(mlp(x)) [%d x %d]:\n", BATCH, OUT);
    for (int i = 0; i < BATCH; i++) {
      printf("  ");
      for (int j = 0; j < OUT; j++) printf(" %.5f", p[i * OUT + j]);
      printf("\n");
    }
    printf("trace count after 2 calls: %d\n", graft_function_trace_count(f));
    graft_plan_stats st;
    if (graft_function_stats(f, &st) == GRAFT_OK)
      printf("plan: %lld nodes, %lld live, %lld pruned, arena %lld bytes\n", (long long)st.nodes,
             (long long)st.live_nodes, (long long)st.pruned_nodes, (long long)st.arena_bytes);
    FILE *fp = fopen(dot_path, "w");
    if (!fp) {
      perror(dot_path);
      bad = 1;
    } else {
      bad = check(graft_function_write_dot(f, fp), "graft_function_write_dot", f);
      bad |= fclose(fp) != 0;
      if (!bad) printf("graph written to %s (render: dot -Tsvg %s > mlp.svg)\n", dot_path, dot_path);
    }
  }
  graft_tensor_destroy(y);
  graft_tensor_destroy(xt);
  graft_function_destroy(f);
  graft_variable_destroy(m.w1);
  graft_variable_destroy(m.b1);
  graft_variable_destroy(m.w2);
  graft_variable_destroy(m.b2);
  graft_runtime_destroy(rt);
  return bad ? 1 : 0;
}
