/* quickstart: a complete graft program.  One traced function is a whole
 * gradient-descent step fitting y = 3x - 1: the forward pass, the loss,
 * graft_gradients and an update of each variable.  The callback runs once;
 * the other 499 calls reuse the compiled plan.  Exits 0 when w and b are
 * fitted.  (make demo runs the larger examples/fashion_mnist.c.) */
#include <stdio.h>

#include "graft.h"

#define CHECK(call)                                                                \
  do {                                                                             \
    graft_status s_ = (call);                                                      \
    if (s_ != GRAFT_OK) {                                                          \
      fprintf(stderr, "%s: %s\n", graft_status_name(s_), graft_last_errmsg());     \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

/* in: x [8,1], y [8,1]; out: the loss.  w, b -= 0.1 * d loss / d (w, b). */
static graft_status step(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                         graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  graft_variable **v = user;
  graft_value *p[2] = {graft_read(t, v[0]), graft_read(t, v[1])}, *g[2];
  graft_value *err = graft_sub(t, graft_add(t, graft_matmul(t, in[0], p[0], 0), p[1]), in[1]);
  graft_value *loss = graft_reduce_mean(t, graft_square(t, err), 0, NULL, 0);
  graft_status s = graft_gradients(t, 1, &loss, NULL, 2, p, GRAFT_UNCONNECTED_ZERO, g);
  for (int i = 0; i < 2 && s == GRAFT_OK; i++)
    graft_assign_sub(t, v[i], graft_mul(t, graft_scalar(t, GRAFT_F32, 0.1), g[i]));
  out[0] = loss;
  return s;
}

int main(void) {
  float x[8], y[8];
  for (int i = 0; i < 8; i++) x[i] = (float)i / 4, y[i] = 3 * x[i] - 1;
  graft_runtime *rt;
  graft_variable *v[2];
  graft_function *f;
  graft_tensor *in[2], *loss = NULL; /* NULL: the first call allocates the output */
  CHECK(graft_runtime_create(NULL, &rt));
  const int64_t w_shape[2] = {1, 1}, b_shape[1] = {1}, data_shape[2] = {8, 1};
  CHECK(graft_variable_create(NULL, "w", GRAFT_F32, 2, w_shape, NULL, GRAFT_VAR_TRAINABLE, &v[0]));
  CHECK(graft_variable_create(NULL, "b", GRAFT_F32, 1, b_shape, NULL, GRAFT_VAR_TRAINABLE, &v[1]));
  graft_function_desc d = {.name = "step", .trace = step, .user = v, .n_inputs = 2,
                           .n_outputs = 1};
  CHECK(graft_function_create(rt, &d, &f));
  CHECK(graft_tensor_wrap(GRAFT_F32, 2, data_shape, x, &in[0]));
  CHECK(graft_tensor_wrap(GRAFT_F32, 2, data_shape, y, &in[1]));
  for (int i = 0; i < 500; i++) CHECK(graft_function_call(f, 2, in, 1, &loss));
  const float *w = graft_tensor_data(graft_variable_value(v[0]));
  const float *b = graft_tensor_data(graft_variable_value(v[1]));
  printf("loss %.2e, w %.4f, b %.4f, traced %d time(s)\n", *(const float *)graft_tensor_data(loss),
         w[0], b[0], graft_function_trace_count(f));
  int fitted = w[0] > 2.99f && w[0] < 3.01f && b[0] > -1.01f && b[0] < -0.99f;
  graft_tensor_destroy(loss);
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);
  graft_function_destroy(f);
  graft_variable_destroy(v[0]);
  graft_variable_destroy(v[1]);
  graft_runtime_destroy(rt);
  return fitted ? 0 : 1;
}
