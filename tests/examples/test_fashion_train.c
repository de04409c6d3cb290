/* A short training run of the Fashion-MNIST example (examples/
 * fmnist_model.c, the code `make demo` runs): one epoch of the MLP with
 * Adam on the first 5,000 training images, evaluated on the 10,000 test
 * images.  It must reach over 80 % test accuracy, end with the same bits
 * at 1 and 2 threads (every weight and the whole checkpoint file), and a
 * checkpoint loaded into a fresh model must give exactly the same test
 * loss, accuracy and confusion matrix.
 *
 * Needs the dataset (Debian's dataset-fashion-mnist, which `make deps`
 * installs; GRAFT_FASHION_MNIST_DIR names another copy): without it the
 * test fails, saying so, rather than skipping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fmnist_model.h"
#include "idx.h"

#define SUBSET 5000
#define BATCH 8
#define SEED 1

static idx_dataset g_train, g_test;
static char g_dir[64];
/* The 1-thread run's evaluation; its checkpoint is g_dir/t1.safetensors. */
static fm_eval g_t1;
static int g_have_t1;

static int setup(void **state) {
  (void)state;
  const char *dir = getenv("GRAFT_FASHION_MNIST_DIR");
  if (!dir) dir = "/usr/share/datasets/fashion-mnist";
  char err[1024];
  if (idx_dataset_load(dir, "train", FM_SIDE, FM_SIDE, FM_CLASSES, &g_train, err, sizeof err) ||
      idx_dataset_load(dir, "t10k", FM_SIDE, FM_SIDE, FM_CLASSES, &g_test, err, sizeof err)) {
    fprintf(stderr,
            "test_fashion_train: the Fashion-MNIST dataset is needed: %s\n"
            "  install Debian's dataset-fashion-mnist (make deps) or set GRAFT_FASHION_MNIST_DIR\n",
            err);
    return -1;
  }
  snprintf(g_dir, sizeof g_dir, "/tmp/graft_test_fashion_XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  idx_dataset_free(&g_train);
  idx_dataset_free(&g_test);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void must(int rc, const char *err) {
  if (rc) fail_msg("%s", err);
}

static graft_runtime *runtime(int threads) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = threads;
  o.sched = "ws";
  graft_runtime *rt = NULL;
  if (graft_runtime_create(&o, &rt)) fail_msg("graft_runtime_create: %s", graft_last_errmsg());
  return rt;
}

static void *read_all(const char *path, long *size) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  *size = ftell(f);
  rewind(f);
  void *b = malloc((size_t)*size);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)*size, f), (size_t)*size);
  fclose(f);
  return b;
}

/* One epoch on the subset at threads threads; saves the checkpoint to
 * path and returns the test evaluation. */
static fm_eval train_once(int threads, const char *path, fm_model *m, graft_runtime **rt) {
  char err[1024] = "";
  fm_config cfg = {.arch = FM_MLP, .optimizer = GRAFT_OPT_ADAM, .seed = SEED};
  *rt = runtime(threads);
  must(fm_model_create(*rt, &cfg, m, err, sizeof err), err);
  fm_trainer tr;
  must(fm_trainer_init(&tr, m, &g_train, SUBSET, BATCH, 1, err, sizeof err), err);
  double loss, acc;
  must(fm_train_epoch(&tr, SEED, 1, &loss, &acc, err, sizeof err), err);
  assert_int_equal(tr.steps, (SUBSET + BATCH - 1) / BATCH);
  fm_trainer_free(&tr);
  fm_eval ev;
  must(fm_evaluate(m, &g_test, 0, 512, &ev, err, sizeof err), err);
  assert_int_equal(ev.n, 10000);
  /* One trace each: the training step (5000 = 625 x 8) and the
   * evaluation's (10000 = 19 x 512 + 272) reuse the trace. */
  assert_int_equal(graft_function_trace_count(m->step), 1);
  assert_int_equal(graft_function_trace_count(m->eval), 1);
  graft_status s = graft_module_save(m->root, path);
  if (s) fail_msg("graft_module_save: %s", graft_last_errmsg());
  print_message("%d thread(s): train loss %.4f acc %.2f%%, test loss %.4f acc %.2f%%\n", threads,
                loss, 100 * acc, ev.loss, 100 * ev.accuracy);
  return ev;
}

static void test_fm_train_epoch__subset_learns_with_same_bits_at_1_and_2_threads(void **state) {
  (void)state;
  char p1[128], p2[128];
  snprintf(p1, sizeof p1, "%s/t1.safetensors", g_dir);
  snprintf(p2, sizeof p2, "%s/t2.safetensors", g_dir);
  fm_model m1, m2;
  graft_runtime *rt1, *rt2;
  fm_eval e1 = train_once(1, p1, &m1, &rt1), e2 = train_once(2, p2, &m2, &rt2);
  assert_true(e1.accuracy > 0.80);
  g_t1 = e1;
  g_have_t1 = 1;
  /* Same bits: every variable (weights, Adam's moments, the step count),
   * the checkpoint files, the evaluation. */
  int64_t n1, n2;
  graft_variable *v1[64], *v2[64];
  assert_int_equal(graft_module_variables(m1.root, 64, v1, &n1), GRAFT_OK);
  assert_int_equal(graft_module_variables(m2.root, 64, v2, &n2), GRAFT_OK);
  assert_int_equal(n1, n2);
  assert_int_equal(n1, 6 * 3 + 2); /* 6 parameters, their m and v, the step, lr */
  for (int64_t i = 0; i < n1; i++) {
    const graft_tensor *a = graft_variable_value(v1[i]), *b = graft_variable_value(v2[i]);
    assert_int_equal(graft_tensor_numel(a), graft_tensor_numel(b));
    assert_memory_equal(graft_tensor_data(a), graft_tensor_data(b),
                        (size_t)graft_tensor_numel(a) * graft_dtype_size(graft_tensor_dtype(a)));
  }
  long s1, s2;
  void *f1 = read_all(p1, &s1), *f2 = read_all(p2, &s2);
  assert_int_equal(s1, s2);
  assert_memory_equal(f1, f2, (size_t)s1);
  free(f1);
  free(f2);
  assert_memory_equal(&e1, &e2, sizeof e1);
  fm_model_destroy(&m1);
  fm_model_destroy(&m2);
  graft_runtime_destroy(rt1);
  graft_runtime_destroy(rt2);
}

static void test_graft_module_load__reproduces_test_accuracy(void **state) {
  (void)state;
  char path[128], err[1024] = "";
  fm_eval trained;
  graft_runtime *rt;
  fm_model m = {0};
  snprintf(path, sizeof path, "%s/t1.safetensors", g_dir);
  if (g_have_t1) { /* the run of the test before: training is the slow part */
    trained = g_t1;
    rt = runtime(1);
  } else {
    trained = train_once(1, path, &m, &rt);
  }
  fm_model fresh;
  /* Another seed: other initial weights, until the load replaces them. */
  fm_config cfg = {.arch = FM_MLP, .optimizer = GRAFT_OPT_ADAM, .seed = SEED + 99};
  must(fm_model_create(rt, &cfg, &fresh, err, sizeof err), err);
  fm_eval before;
  must(fm_evaluate(&fresh, &g_test, 0, 512, &before, err, sizeof err), err);
  assert_true(before.accuracy < 0.5); /* untrained */
  graft_status s = graft_module_load(fresh.root, path, 0);
  if (s) fail_msg("graft_module_load: %s", graft_last_errmsg());
  fm_eval loaded;
  must(fm_evaluate(&fresh, &g_test, 0, 512, &loaded, err, sizeof err), err);
  assert_memory_equal(&loaded, &trained, sizeof loaded);
  fm_model_destroy(&m);
  fm_model_destroy(&fresh);
  graft_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fm_train_epoch__subset_learns_with_same_bits_at_1_and_2_threads),
      cmocka_unit_test(test_graft_module_load__reproduces_test_accuracy),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
