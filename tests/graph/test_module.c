/* Modules: names, scopes and sibling numbering; attributes and list slots;
 * a module shared by two parents and the walks over that tree (variables
 * and trainable variables each once, submodules breadth first, flatten
 * every path); tracked variables (the deferred-module hook); cycle
 * refusal; reference counts (a function still using a variable of a
 * destroyed module fails with GRAFT_EMISUSE; the ASan build checks that
 * nothing leaks and nothing is used after it is freed); misuse messages;
 * the printed summary, line by line; trees larger than the walks' stack
 * buffers; concurrent walks of one tree. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/module_int.h"
#include "testutil.h"

TU_RUNTIME_GROUP();

/* ---- helpers -------------------------------------------------------------- */

static graft_module *make_module(graft_module *parent, const char *name) {
  graft_module *m = NULL;
  graft_status st = graft_module_create(parent, name, &m);
  if (st) fail_msg("graft_module_create(%s): %s: %s", name, graft_status_name(st), graft_last_errmsg());
  assert_non_null(m);
  return m;
}

/* An f32 variable of owner: [rows, cols], or [rows] when cols is 0. */
static graft_variable *make_var(graft_module *owner, const char *name, int64_t rows, int64_t cols,
                                unsigned flags) {
  const int64_t shape[2] = {rows, cols};
  graft_variable *v = NULL;
  graft_status st = graft_variable_create(owner, name, GRAFT_F32, cols ? 2 : 1, shape, NULL, flags, &v);
  if (st) fail_msg("graft_variable_create(%s): %s: %s", name, graft_status_name(st), graft_last_errmsg());
  assert_non_null(v);
  return v;
}

static void attach(graft_module *parent, const char *attr, graft_module *child) {
  graft_status st = graft_module_attach(parent, attr, child);
  if (st) fail_msg("graft_module_attach(%s): %s: %s", attr, graft_status_name(st), graft_last_errmsg());
}

/* Leave a known message, so a check cannot pass on a stale one. */
static void poison_last_error(void) {
  graft_module *m = NULL;
  assert_int_equal(graft_module_create(NULL, "9poison", &m), GRAFT_EINVAL);
  tu_assert_msg_has(graft_last_errmsg(), "9poison");
}

/* call returns want and leaves a message holding each of the strings. */
#define expect_fail(call, want, ...)                                                         \
  do {                                                                                       \
    poison_last_error();                                                                     \
    tu_assert_status((call), (want));                                                        \
    const char *const ef_subs_[] = {__VA_ARGS__, NULL};                                      \
    for (int ef_i_ = 0; ef_subs_[ef_i_]; ef_i_++) tu_assert_msg_has(graft_last_errmsg(), ef_subs_[ef_i_]); \
  } while (0)

/* The paths of a flatten, one per line. */
typedef struct paths {
  char text[8192];
  size_t len;
  int64_t count;
  graft_variable *vars[64];
} paths;

static graft_status collect_path(const char *path, graft_variable *v, void *user) {
  paths *p = user;
  int w = snprintf(p->text + p->len, sizeof p->text - p->len, "%s\n", path);
  assert_true(w > 0 && (size_t)w < sizeof p->text - p->len);
  p->len += (size_t)w;
  if (p->count < (int64_t)TU_N_OF(p->vars)) p->vars[p->count] = v;
  p->count++;
  return GRAFT_OK;
}

static void flatten(const graft_module *m, paths *p) {
  memset(p, 0, sizeof *p);
  tu_assert_status(graft_module_flatten(m, collect_path, p), GRAFT_OK);
}

/* The walk gives exactly want[0..n). */
static void assert_vars(graft_status (*walk)(const graft_module *, int64_t, graft_variable **, int64_t *),
                        const graft_module *m, graft_variable *const *want, int64_t n) {
  graft_variable *got[64];
  int64_t count = -1;
  tu_assert_status(walk(m, 0, NULL, &count), GRAFT_OK);
  assert_int_equal(count, n);
  tu_assert_status(walk(m, (int64_t)TU_N_OF(got), got, &count), GRAFT_OK);
  assert_int_equal(count, n);
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i])
      fail_msg("variable %lld is %s, want %s", (long long)i, graft_variable_name(got[i]),
               graft_variable_name(want[i]));
}

/* ---- names and scopes --------------------------------------------------- */

static void test_graft_module_create__names_scopes_and_variable_names(void **state) {
  (void)state;
  graft_module *root = make_module(NULL, "model");
  graft_module *enc = make_module(root, "encoder");
  graft_module *attn = make_module(enc, "attention");
  assert_string_equal(graft_module_name(root), "model");
  assert_string_equal(graft_module_scope(root), "model/");
  assert_string_equal(graft_module_name(enc), "encoder");
  assert_string_equal(graft_module_scope(enc), "model/encoder/");
  assert_string_equal(graft_module_scope(attn), "model/encoder/attention/");
  graft_variable *w = make_var(attn, "w_q", 4, 4, GRAFT_VAR_TRAINABLE);
  graft_variable *step = make_var(root, "step", 1, 0, 0);
  assert_string_equal(graft_variable_name(w), "model/encoder/attention/w_q");
  assert_string_equal(graft_variable_name(step), "model/step");
  assert_int_equal(graft_variable_flags(w), GRAFT_VAR_TRAINABLE);
  assert_int_equal(graft_variable_flags(step), 0);
  /* A 63-character name is the longest. */
  char longest[64];
  memset(longest, 'a', 63);
  longest[63] = '\0';
  graft_module *lm = make_module(root, longest);
  assert_string_equal(graft_module_name(lm), longest);
  /* The scope was fixed at creation: attaching elsewhere does not change it. */
  graft_module *other = make_module(NULL, "other");
  attach(other, "moved", enc);
  assert_string_equal(graft_module_scope(enc), "model/encoder/");
  graft_module_destroy(other);
  graft_module_destroy(root);
  assert_null(graft_module_name(NULL));
  assert_null(graft_module_scope(NULL));
  assert_int_equal(graft_variable_flags(NULL), 0);
}

static void test_graft_module_create__siblings_numbered(void **state) {
  (void)state;
  graft_module *root = make_module(NULL, "model");
  const char *want[] = {"dense", "dense_1", "dense_2", "dense_3"};
  for (int i = 0; i < 4; i++) {
    graft_module *m = make_module(root, "dense");
    assert_string_equal(graft_module_name(m), want[i]);
    char scope[64];
    snprintf(scope, sizeof scope, "model/%s/", want[i]);
    assert_string_equal(graft_module_scope(m), scope);
  }
  /* A name that a numbered sibling took is numbered in turn. */
  assert_string_equal(graft_module_name(make_module(root, "dense_1")), "dense_1_1");
  /* A name a variable or a list holds is taken too; another parent starts afresh. */
  make_var(root, "w", 2, 0, 0);
  assert_string_equal(graft_module_name(make_module(root, "w")), "w_1");
  graft_module *slot = make_module(NULL, "block");
  attach(root, "layers[0]", slot);
  graft_module_destroy(slot);
  assert_string_equal(graft_module_name(make_module(root, "layers")), "layers_1");
  graft_module *enc = make_module(root, "encoder");
  assert_string_equal(graft_module_name(make_module(enc, "dense")), "dense");
  /* The attribute is the numbered name. */
  paths p;
  make_var(make_module(root, "dense"), "b", 1, 0, 0);
  flatten(root, &p);
  tu_assert_msg_has(p.text, "\ndense_4.b\n");
  /* Two roots may share a name: nothing is global. */
  graft_module *twin = make_module(NULL, "model");
  assert_string_equal(graft_module_name(twin), "model");
  graft_module_destroy(twin);
  graft_module_destroy(root);
}

static void test_graft_module_create__bad_names_refused(void **state) {
  (void)state;
  graft_module *root = make_module(NULL, "model");
  graft_module *m = NULL;
  const char *bad[] = {"", "1abc", "a-b", "a.b", "a/b", "a b", "layers[0]", "é"};
  for (size_t i = 0; i < TU_N_OF(bad); i++) {
    m = (graft_module *)&m;
    expect_fail(graft_module_create(root, bad[i], &m), GRAFT_EINVAL, "graft_module_create",
                "is not a C identifier", bad[i]);
    assert_null(m);
    expect_fail(graft_module_create(NULL, bad[i], &m), GRAFT_EINVAL, "graft_module_create");
  }
  char too_long[65];
  memset(too_long, 'x', 64);
  too_long[64] = '\0';
  expect_fail(graft_module_create(root, too_long, &m), GRAFT_EINVAL, "graft_module_create",
              "64 characters", "at most 63");
  expect_fail(graft_module_create(root, NULL, &m), GRAFT_EINVAL, "graft_module_create",
              "name is NULL");
  expect_fail(graft_module_create(root, "ok", NULL), GRAFT_EINVAL, "graft_module_create",
              "out is NULL");
  /* Nothing was added: the first "ok" is still plain. */
  assert_string_equal(graft_module_name(make_module(root, "ok")), "ok");
  paths p;
  flatten(root, &p);
  assert_int_equal(p.count, 0);
  graft_module_destroy(root);
}

/* ---- attributes ---------------------------------------------------------- */

static void test_graft_module_attach__attributes_and_list_slots(void **state) {
  (void)state;
  graft_module *root = make_module(NULL, "model");
  graft_module *a = make_module(NULL, "a");
  make_var(a, "w", 1, 0, 0);
  const char *good[] = {"x", "_private", "layers[0]", "layers[1]", "layers[10]", "big[2147483647]"};
  for (size_t i = 0; i < TU_N_OF(good); i++) attach(root, good[i], a);
  const char *bad[] = {"",           "1x",          "x.y",         "layers[]",   "layers[-1]",
                       "layers[01]", "layers[00]",  "layers[ 1]",  "layers[1]x", "layers[1",
                       "x[0][1]",    "layers[2147483648]",         "layers[99999999999]",
                       "[3]",        "layers.3"};
  for (size_t i = 0; i < TU_N_OF(bad); i++)
    expect_fail(graft_module_attach(root, bad[i], a), GRAFT_EINVAL, "graft_module_attach",
                "is not an attribute", "list index");
  expect_fail(graft_module_attach(root, NULL, a), GRAFT_EINVAL, "graft_module_attach", "attr is NULL");
  /* Taken: the same attribute, a single name over a list, a slot over a
   * single name, a variable's name. */
  struct {
    const char *attr, *holder;
  } taken[] = {{"x", "'x'"}, {"layers[1]", "'layers[1]'"}, {"layers", "'layers[0]'"},
               {"x[0]", "'x'"}, {"big", "'big[2147483647]'"}};
  for (size_t i = 0; i < TU_N_OF(taken); i++)
    expect_fail(graft_module_attach(root, taken[i].attr, a), GRAFT_EINVAL, "graft_module_attach",
                "is taken in module 'model'", taken[i].holder, "module 'a'");
  make_var(root, "v", 1, 0, 0);
  expect_fail(graft_module_attach(root, "v", a), GRAFT_EINVAL, "is taken", "variable 'model/v'");
  expect_fail(graft_module_attach(root, "v[0]", a), GRAFT_EINVAL, "is taken", "variable 'model/v'");
  graft_variable *v = (graft_variable *)&v;
  expect_fail(graft_variable_create(root, "layers", GRAFT_F32, 0, NULL, NULL, 0, &v), GRAFT_EINVAL,
              "graft_variable_create", "name 'layers' is taken", "'layers[0]'");
  assert_null(v);
  expect_fail(graft_variable_create(root, "x", GRAFT_F32, 0, NULL, NULL, 0, &v), GRAFT_EINVAL,
              "graft_variable_create", "name 'x' is taken", "module 'a'");
  expect_fail(graft_variable_create(root, "w[0]", GRAFT_F32, 0, NULL, NULL, 0, &v), GRAFT_EINVAL,
              "graft_variable_create", "'w[0]' is not a C identifier");
  expect_fail(graft_variable_create(root, "v", GRAFT_F32, 0, NULL, NULL, 0, &v), GRAFT_EINVAL,
              "graft_variable_create", "name 'v' is taken");
  expect_fail(graft_module_attach(NULL, "y", a), GRAFT_EINVAL, "graft_module_attach", "parent is NULL");
  expect_fail(graft_module_attach(root, "y", NULL), GRAFT_EINVAL, "graft_module_attach", "child is NULL");
  /* Every good attribute is a path, in attachment order; nothing refused was added. */
  paths p;
  flatten(root, &p);
  assert_string_equal(p.text, "v\nx.w\n_private.w\nlayers[0].w\nlayers[1].w\nlayers[10].w\n"
                              "big[2147483647].w\n");
  graft_module_destroy(a);
  graft_module_destroy(root);
}

/* ---- a module shared by two parents ------------------------------------- */

/* model: step (i32, not trainable)
 *   encoder: w [4,3], b [3]; emb -> embedding
 *   decoder: w [3,4]; layers[0] -> dense (w [3,3], frozen); layers[1] -> embedding
 * embedding: table [10,4] (shared by encoder and decoder) */
typedef struct tree {
  graft_module *root, *enc, *dec, *emb, *dense;
  graft_variable *step, *enc_w, *enc_b, *table, *dec_w, *dense_w;
} tree;

static void build_tree(tree *t) {
  t->root = make_module(NULL, "model");
  const int64_t none[1] = {0};
  graft_variable *step = NULL;
  tu_assert_status(graft_variable_create(t->root, "step", GRAFT_I32, 0, none, NULL, 0, &step), GRAFT_OK);
  t->step = step;
  t->enc = make_module(t->root, "encoder");
  t->enc_w = make_var(t->enc, "w", 4, 3, GRAFT_VAR_TRAINABLE);
  t->enc_b = make_var(t->enc, "b", 3, 0, GRAFT_VAR_TRAINABLE);
  t->emb = make_module(NULL, "embedding");
  t->table = make_var(t->emb, "table", 10, 4, GRAFT_VAR_TRAINABLE);
  attach(t->enc, "emb", t->emb);
  t->dec = make_module(t->root, "decoder");
  t->dec_w = make_var(t->dec, "w", 3, 4, GRAFT_VAR_TRAINABLE);
  t->dense = make_module(NULL, "dense");
  t->dense_w = make_var(t->dense, "w", 3, 3, 0);
  attach(t->dec, "layers[0]", t->dense);
  attach(t->dec, "layers[1]", t->emb);
  /* The parents hold them now. */
  graft_module_destroy(t->emb);
  graft_module_destroy(t->dense);
}

static void test_graft_module_variables__shared_module_listed_once(void **state) {
  (void)state;
  tree t;
  build_tree(&t);
  graft_variable *all[] = {t.step, t.enc_w, t.enc_b, t.table, t.dec_w, t.dense_w};
  assert_vars(graft_module_variables, t.root, all, 6);
  graft_variable *trainable[] = {t.enc_w, t.enc_b, t.table, t.dec_w};
  assert_vars(graft_module_trainable_variables, t.root, trainable, 4);
  graft_variable *of_dec[] = {t.dec_w, t.dense_w, t.table};
  assert_vars(graft_module_variables, t.dec, of_dec, 3);
  graft_variable *of_emb[] = {t.table};
  assert_vars(graft_module_variables, t.emb, of_emb, 1);
  /* cap smaller than the count: the first cap, and the full count. */
  graft_variable *got[2] = {NULL, NULL};
  int64_t n = 0;
  tu_assert_status(graft_module_variables(t.root, 2, got, &n), GRAFT_OK);
  assert_int_equal(n, 6);
  assert_ptr_equal(got[0], t.step);
  assert_ptr_equal(got[1], t.enc_w);
  assert_string_equal(graft_variable_name(t.table), "embedding/table");
  assert_string_equal(graft_variable_name(t.dense_w), "dense/w");
  graft_module_destroy(t.root);
}

static void test_graft_module_submodules__breadth_first_each_once(void **state) {
  (void)state;
  tree t;
  build_tree(&t);
  graft_module *got[8];
  int64_t n = -1;
  tu_assert_status(graft_module_submodules(t.root, 8, got, &n), GRAFT_OK);
  assert_int_equal(n, 4);
  graft_module *want[] = {t.enc, t.dec, t.emb, t.dense};
  for (int i = 0; i < 4; i++) assert_ptr_equal(got[i], want[i]);
  tu_assert_status(graft_module_submodules(t.dec, 8, got, &n), GRAFT_OK);
  assert_int_equal(n, 2);
  assert_ptr_equal(got[0], t.dense);
  assert_ptr_equal(got[1], t.emb);
  tu_assert_status(graft_module_submodules(t.emb, 0, NULL, &n), GRAFT_OK);
  assert_int_equal(n, 0);
  graft_module_destroy(t.root);
}

static void test_graft_module_flatten__every_path_of_a_shared_module(void **state) {
  (void)state;
  tree t;
  build_tree(&t);
  paths p;
  flatten(t.root, &p);
  assert_string_equal(p.text, "step\n"
                              "encoder.w\n"
                              "encoder.b\n"
                              "encoder.emb.table\n"
                              "decoder.w\n"
                              "decoder.layers[0].w\n"
                              "decoder.layers[1].table\n");
  graft_variable *want[] = {t.step, t.enc_w, t.enc_b, t.table, t.dec_w, t.dense_w, t.table};
  assert_int_equal(p.count, 7);
  for (int i = 0; i < 7; i++) assert_ptr_equal(p.vars[i], want[i]);
  flatten(t.dec, &p);
  assert_string_equal(p.text, "w\nlayers[0].w\nlayers[1].table\n");
  graft_module_destroy(t.root);
}

typedef struct stop_ctx {
  int seen, stop_at;
  graft_status with;
} stop_ctx;

static graft_status stop_visit(const char *path, graft_variable *v, void *user) {
  (void)path, (void)v;
  stop_ctx *c = user;
  return ++c->seen == c->stop_at ? c->with : GRAFT_OK;
}

static void test_graft_module_flatten__visit_status_stops_the_walk(void **state) {
  (void)state;
  tree t;
  build_tree(&t);
  stop_ctx c = {0, 3, GRAFT_EIO};
  poison_last_error();
  tu_assert_status(graft_module_flatten(t.root, stop_visit, &c), GRAFT_EIO);
  assert_int_equal(c.seen, 3);
  /* The visitor's own failure keeps the visitor's message. */
  tu_assert_msg_has(graft_last_errmsg(), "9poison");
  c = (stop_ctx){0, 2, (graft_status)7};
  expect_fail(graft_module_flatten(t.root, stop_visit, &c), GRAFT_EINVAL, "graft_module_flatten",
              "visit returned 7", "'encoder.w'");
  assert_int_equal(c.seen, 2);
  expect_fail(graft_module_flatten(NULL, stop_visit, &c), GRAFT_EINVAL, "graft_module_flatten",
              "m is NULL");
  expect_fail(graft_module_flatten(t.root, NULL, &c), GRAFT_EINVAL, "graft_module_flatten",
              "visit is NULL");
  graft_module_destroy(t.root);
}

static void test_graft_module_variables__argument_refusals(void **state) {
  (void)state;
  tree t;
  build_tree(&t);
  graft_variable *vs[4];
  graft_module *ms[4];
  int64_t n = 99;
  expect_fail(graft_module_variables(NULL, 4, vs, &n), GRAFT_EINVAL, "graft_module_variables",
              "m is NULL");
  assert_int_equal(n, 0);
  n = 99;
  expect_fail(graft_module_trainable_variables(t.root, -1, vs, &n), GRAFT_EINVAL,
              "graft_module_trainable_variables", "cap is -1");
  assert_int_equal(n, 0);
  expect_fail(graft_module_submodules(t.root, 4, NULL, &n), GRAFT_EINVAL, "graft_module_submodules",
              "out is NULL with cap 4");
  expect_fail(graft_module_submodules(t.root, 4, ms, NULL), GRAFT_EINVAL, "graft_module_submodules",
              "n is NULL");
  expect_fail(graft_module_print(NULL, stdout), GRAFT_EINVAL, "graft_module_print", "m is NULL");
  expect_fail(graft_module_print(t.root, NULL), GRAFT_EINVAL, "graft_module_print", "f is NULL");
  graft_module_destroy(t.root);
}

/* ---- tracked variables (the deferred-module hook) ------------------------ */

static void test_graft__module_hold_var__tracked_variables_walk_with_own(void **state) {
  (void)state;
  tree t;
  build_tree(&t);
  graft_variable *free_var = make_var(NULL, "scale", 1, 0, GRAFT_VAR_TRAINABLE);
  graft_module *d = make_module(t.root, "deferred");
  graft_variable *own = make_var(d, "own", 2, 0, 0);
  tu_assert_status(graft__module_hold_var(d, "test", "loc", t.enc_w, GRAFT__ENTRY_TRACKED), GRAFT_OK);
  tu_assert_status(graft__module_hold_var(d, "test", "vars[1]", free_var, GRAFT__ENTRY_TRACKED),
                   GRAFT_OK);
  expect_fail(graft__module_hold_var(d, "test", "own", free_var, GRAFT__ENTRY_TRACKED), GRAFT_EINVAL,
              "test: name 'own' is taken");
  /* Tracked variables are listed with the module's own, in the order added;
   * one owned elsewhere is listed once, where the walk meets it first. */
  graft_variable *of_d[] = {own, t.enc_w, free_var};
  assert_vars(graft_module_variables, d, of_d, 3);
  graft_variable *all[] = {t.step, t.enc_w, t.enc_b, t.table, t.dec_w, t.dense_w, own, free_var};
  assert_vars(graft_module_variables, t.root, all, 8);
  graft_variable *trainable[] = {t.enc_w, t.enc_b, t.table, t.dec_w, free_var};
  assert_vars(graft_module_trainable_variables, t.root, trainable, 5);
  paths p;
  flatten(d, &p);
  assert_string_equal(p.text, "own\nloc\nvars[1]\n");
  /* The module held a reference of its own and does not destroy what it
   * only tracks: free_var stays the caller's, and usable. */
  graft_module_destroy(t.root);
  graft_tensor *x = tu_tensor_from(GRAFT_F32, 1, (const int64_t[]){1}, (const double[]){4});
  tu_assert_status(graft_variable_set(free_var, x), GRAFT_OK);
  graft_tensor_destroy(x);
  graft_variable_destroy(free_var);
}

/* ---- cycles ---------------------------------------------------------------- */

static void test_graft_module_attach__cycles_refused(void **state) {
  (void)state;
  graft_module *a = make_module(NULL, "a");
  graft_module *b = make_module(a, "b");
  graft_module *c = make_module(b, "c");
  expect_fail(graft_module_attach(a, "self", a), GRAFT_EMISUSE, "graft_module_attach",
              "child is parent", "'a'");
  expect_fail(graft_module_attach(b, "parent", a), GRAFT_EMISUSE, "graft_module_attach",
              "would make a cycle", "'a' already holds 'b'");
  expect_fail(graft_module_attach(c, "grandparent", a), GRAFT_EMISUSE, "would make a cycle",
              "'a' already holds 'c'");
  /* Through a second parent: d holds a, so a may not hold d. */
  graft_module *d = make_module(NULL, "d");
  attach(d, "inner", a);
  expect_fail(graft_module_attach(c, "d", d), GRAFT_EMISUSE, "would make a cycle");
  /* A diamond is no cycle. */
  attach(a, "c_again", c);
  attach(d, "c_direct", c);
  graft_module *got[8];
  int64_t n = 0;
  tu_assert_status(graft_module_submodules(d, 8, got, &n), GRAFT_OK);
  assert_int_equal(n, 3);
  assert_ptr_equal(got[0], a);
  assert_ptr_equal(got[1], c);
  assert_ptr_equal(got[2], b);
  /* Nothing refused was added. */
  tu_assert_status(graft_module_submodules(c, 0, NULL, &n), GRAFT_OK);
  assert_int_equal(n, 0);
  tu_assert_status(graft_module_submodules(a, 8, got, &n), GRAFT_OK);
  assert_int_equal(n, 2);
  graft_module_destroy(a);
  graft_module_destroy(d);
}

/* ---- reference counts ------------------------------------------------------ */

/* out = w * x */
static graft_status scale_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  out[0] = graft_mul(t, graft_read(t, user), in[0]);
  return GRAFT_OK;
}

static void test_graft_module_destroy__function_still_using_a_variable_fails(void **state) {
  (void)state;
  graft_module *root = make_module(NULL, "model");
  graft_module *layer = make_module(root, "layer");
  const int64_t s[] = {3};
  const float init[] = {1, 2, 3};
  graft_variable *w = NULL;
  tu_assert_status(graft_variable_create(layer, "w", GRAFT_F32, 1, s, init, GRAFT_VAR_TRAINABLE, &w),
                   GRAFT_OK);
  graft_function *f = tu_function(g_rt, "scale", scale_cb, w, 1, 1, NULL);
  const double x[] = {2, 2, 2}, want[] = {2, 4, 6};
  graft_tensor *in[1] = {tu_tensor_from(GRAFT_F32, 1, s, x)};
  graft_tensor *out[1] = {NULL};
  tu_assert_call_ok(f, 1, in, 1, out);
  tu_assert_close(out[0], want, 3, 0, 0);
  tu_destroy_outs(out, 1);
  /* A module's variable is not the caller's to destroy. */
  poison_last_error();
  graft_variable_destroy(w);
  tu_assert_msg_has(graft_last_errmsg(), "graft_variable_destroy: variable 'model/layer/w' belongs "
                                         "to a module");
  tu_assert_call_ok(f, 1, in, 1, out);
  tu_destroy_outs(out, 1);
  /* The function's reference keeps w allocated (ASan would see a use
   * after free otherwise); its next call is refused. */
  graft_module_destroy(root);
  tu_assert_status(graft_function_call(f, 1, in, 1, out), GRAFT_EMISUSE);
  assert_null(out[0]);
  tu_assert_msg_has(graft_function_errmsg(f), "variable 'model/layer/w' was destroyed");
  graft_function_destroy(f);
  graft_tensor_destroy(in[0]);
}

static void test_graft_module_destroy__frees_what_nothing_else_holds(void **state) {
  (void)state;
  /* shared is held by two roots; destroying one leaves it whole. */
  graft_module *r1 = make_module(NULL, "r1");
  graft_module *r2 = make_module(NULL, "r2");
  graft_module *shared = make_module(r1, "shared");
  graft_variable *w = make_var(shared, "w", 2, 0, GRAFT_VAR_TRAINABLE);
  attach(r2, "s[0]", shared);
  attach(r2, "s[1]", shared);
  graft_module_destroy(r1);
  graft_variable *want[] = {w};
  assert_vars(graft_module_variables, r2, want, 1);
  assert_string_equal(graft_module_scope(shared), "r1/shared/");
  paths p;
  flatten(r2, &p);
  assert_string_equal(p.text, "s[0].w\ns[1].w\n");
  graft_module_destroy(r2); /* ASan: shared and w freed here, once */
}

static void test_graft_module_destroy__misuse_changes_nothing(void **state) {
  (void)state;
  graft_module *root = make_module(NULL, "model");
  graft_module *kid = make_module(root, "kid");
  make_var(kid, "w", 2, 0, 0);
  poison_last_error();
  graft_module_destroy(kid);
  tu_assert_msg_has(graft_last_errmsg(), "graft_module_destroy: module 'kid' (scope 'model/kid/') "
                                         "is not held by the caller");
  paths p;
  flatten(root, &p);
  assert_string_equal(p.text, "kid.w\n");
  /* A root attached elsewhere: its first destroy gives up the caller's
   * hold, a second one is refused. */
  graft_module *lib = make_module(NULL, "lib");
  attach(root, "lib", lib);
  graft_module_destroy(lib);
  poison_last_error();
  graft_module_destroy(lib);
  tu_assert_msg_has(graft_last_errmsg(), "module 'lib' (scope 'lib/') is not held by the caller");
  assert_string_equal(graft_module_name(lib), "lib");
  graft_module_destroy(NULL);
  graft_module_destroy(root);
}

/* ---- the summary ------------------------------------------------------------- */

static void test_graft_module_print__one_line_per_path_then_totals(void **state) {
  (void)state;
  tree t;
  build_tree(&t);
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  assert_non_null(mem);
  tu_assert_status(graft_module_print(t.root, mem), GRAFT_OK);
  fclose(mem);
  const char *want[] = {
      "path                     dtype  shape   parameters  bytes  trainable",
      "step                     i32    []               1      4  no",
      "encoder.w                f32    [4,3]           12     48  yes",
      "encoder.b                f32    [3]              3     12  yes",
      "encoder.emb.table        f32    [10,4]          40    160  yes",
      "decoder.w                f32    [3,4]           12     48  yes",
      "decoder.layers[0].w      f32    [3,3]            9     36  no",
      "decoder.layers[1].table  f32    [10,4]          40    160  yes",
      /* table counted once */
      "total: 7 paths, 6 variables, 77 parameters (67 trainable), 308 bytes",
  };
  char *line = buf;
  for (size_t i = 0; i < TU_N_OF(want); i++) {
    char *nl = strchr(line, '\n');
    if (!nl) fail_msg("line %zu missing; output:\n%s", i + 1, buf);
    *nl = '\0';
    if (strcmp(line, want[i]) != 0) fail_msg("line %zu is\n\"%s\", want\n\"%s\"", i + 1, line, want[i]);
    line = nl + 1;
  }
  assert_string_equal(line, "");
  free(buf);
  /* A stream that cannot be written. */
  FILE *ro = fopen("/dev/null", "r");
  assert_non_null(ro);
  expect_fail(graft_module_print(t.root, ro), GRAFT_EIO, "graft_module_print", "writing");
  fclose(ro);
  graft_module_destroy(t.root);
}

/* ---- beyond the walks' stack buffers ---------------------------------------- */

static graft_status last_path(const char *path, graft_variable *v, void *user) {
  (void)v;
  char **keep = user;
  free(*keep);
  *keep = strdup(path);
  return *keep ? GRAFT_OK : GRAFT_ENOMEM;
}

static void test_graft_module_variables__large_and_deep_trees(void **state) {
  (void)state;
  /* Wide: 700 layers of 2 variables (the seen set and the queue move to the heap). */
  enum { WIDE = 700 };
  graft_module *root = make_module(NULL, "wide");
  graft_variable **want = malloc(2 * WIDE * sizeof *want);
  assert_non_null(want);
  for (int i = 0; i < WIDE; i++) {
    graft_module *l = make_module(root, "layer");
    want[2 * i] = make_var(l, "w", 2, 2, GRAFT_VAR_TRAINABLE);
    want[2 * i + 1] = make_var(l, "b", 2, 0, 0);
  }
  graft_variable **got = malloc(2 * WIDE * sizeof *got);
  assert_non_null(got);
  int64_t n = 0;
  tu_assert_status(graft_module_variables(root, 2 * WIDE, got, &n), GRAFT_OK);
  assert_int_equal(n, 2 * WIDE);
  assert_memory_equal(got, want, 2 * WIDE * sizeof *got);
  tu_assert_status(graft_module_trainable_variables(root, 2 * WIDE, got, &n), GRAFT_OK);
  assert_int_equal(n, WIDE);
  for (int i = 0; i < WIDE; i++) assert_ptr_equal(got[i], want[2 * i]);
  graft_module **mods = malloc(WIDE * sizeof *mods);
  assert_non_null(mods);
  tu_assert_status(graft_module_submodules(root, WIDE, mods, &n), GRAFT_OK);
  assert_int_equal(n, WIDE);
  assert_string_equal(graft_module_name(mods[WIDE - 1]), "layer_699");
  graft_module_destroy(root);
  free(mods);
  free(got);
  free(want);
  /* Deep: a chain of 100000 modules attached one under the other (the
   * stack, the path and the destroy go far beyond any recursion). */
  enum { DEEP = 100000 };
  graft_module *top = make_module(NULL, "top"), *cur = top;
  for (int i = 0; i < DEEP; i++) {
    graft_module *next = make_module(NULL, "c");
    attach(cur, "c", next);
    graft_module_destroy(next);
    cur = next;
  }
  graft_variable *leaf = make_var(cur, "w", 1, 0, 0);
  tu_assert_status(graft_module_variables(top, 1, got = malloc(sizeof *got), &n), GRAFT_OK);
  assert_int_equal(n, 1);
  assert_ptr_equal(got[0], leaf);
  free(got);
  tu_assert_status(graft_module_submodules(top, 0, NULL, &n), GRAFT_OK);
  assert_int_equal(n, DEEP);
  char *path = NULL;
  tu_assert_status(graft_module_flatten(top, last_path, &path), GRAFT_OK);
  assert_non_null(path);
  assert_int_equal(strlen(path), 2 * DEEP + 1);
  for (int i = 0; i < DEEP; i++) assert_true(path[2 * i] == 'c' && path[2 * i + 1] == '.');
  assert_string_equal(path + 2 * DEEP, "w");
  free(path);
  /* A cycle check at the bottom walks the whole chain. */
  expect_fail(graft_module_attach(cur, "loop", top), GRAFT_EMISUSE, "would make a cycle");
  graft_module_destroy(top);
}

/* ---- out of memory ------------------------------------------------------------ */

/* Fails exactly the fail_at-th allocation (1-based; 0: none). */
typedef struct countdown {
  long count, fail_at;
  int hit;
} countdown;

static void *cd_alloc(void *ctx, size_t size, size_t align) {
  countdown *c = ctx;
  if (++c->count == c->fail_at) {
    c->hit = 1;
    return NULL;
  }
  return aligned_alloc(align, (size + align - 1) / align * align);
}

static void cd_free(void *ctx, void *p) {
  (void)ctx;
  free(p);
}

/* Run call; when it fails with GRAFT_ENOMEM (only where the countdown
 * failed an allocation), it must name api and change nothing, so running
 * it again gives what one run without the failure gives. */
#define RETRY_ON_ENOMEM(cd, api, call)                                                        \
  do {                                                                                       \
    int hit_before_ = (cd)->hit;                                                             \
    graft_status st_ = (call);                                                               \
    if (st_ == GRAFT_ENOMEM) {                                                               \
      assert_true((cd)->hit && !hit_before_);                                                \
      tu_assert_msg_has(graft_last_errmsg(), api);                                           \
      st_ = (call);                                                                          \
    }                                                                                        \
    tu_assert_status(st_, GRAFT_OK);                                                         \
  } while (0)

/* A tree that takes the growth paths: layers (arrays and indexes grow;
 * past 256 the breadth-first queue moves to the heap), each attached a
 * second time as a list slot (shared: the seen set), a variable tracked by
 * the root (the variable walks then dedup every variable: past 512
 * modules and variables the set moves to the heap), and a chain depth
 * deep (past 32 the stack, past 256 bytes of path the path buffer move to
 * the heap). */
static graft_module *oom_build(countdown *cd, int layers, int depth) {
  graft_module *root = NULL, *layer = NULL, *chain = NULL;
  graft_variable *w0 = NULL, *v = NULL;
  const int64_t one = 1;
  RETRY_ON_ENOMEM(cd, "graft_module_create", graft_module_create(NULL, "model", &root));
  for (int i = 0; i < layers; i++) {
    RETRY_ON_ENOMEM(cd, "graft_module_create", graft_module_create(root, "layer", &layer));
    RETRY_ON_ENOMEM(cd, "graft_variable_create",
                    graft_variable_create(layer, "w", GRAFT_F32, 1, &one, NULL, 0, i ? &v : &w0));
    char attr[32];
    snprintf(attr, sizeof attr, "all[%d]", i);
    RETRY_ON_ENOMEM(cd, "graft_module_attach", graft_module_attach(root, attr, layer));
  }
  RETRY_ON_ENOMEM(cd, "test", graft__module_hold_var(root, "test", "tracked", w0, GRAFT__ENTRY_TRACKED));
  graft_module *parent = root;
  for (int d = 0; d < depth; d++, parent = chain)
    RETRY_ON_ENOMEM(cd, "graft_module_create", graft_module_create(parent, "chain_link", &chain));
  RETRY_ON_ENOMEM(cd, "graft_variable_create",
                  graft_variable_create(chain, "deep", GRAFT_F32, 1, &one, NULL, 0, &v));
  return root;
}

/* The walks of root: the counts of the variable and submodule walks, and
 * the printed summary (every path) in *text (free). */
static void oom_walks(countdown *cd, const graft_module *root, char **text, int64_t counts[2]) {
  RETRY_ON_ENOMEM(cd, "graft_module_variables", graft_module_variables(root, 0, NULL, &counts[0]));
  RETRY_ON_ENOMEM(cd, "graft_module_submodules", graft_module_submodules(root, 0, NULL, &counts[1]));
  size_t len = 0;
  FILE *mem = open_memstream(text, &len);
  assert_non_null(mem);
  RETRY_ON_ENOMEM(cd, "graft_module_print", graft_module_print(root, mem));
  fclose(mem);
}

/* Fail the n-th allocation of run(cd) for n = 1, 2, ... until a run makes
 * fewer: each must give the same counts and summary as a run with no
 * failure. */
static void oom_each(void (*run)(countdown *cd, char **text, int64_t counts[2]), countdown *cd) {
  char *want = NULL;
  int64_t want_counts[2];
  *cd = (countdown){0, 0, 0};
  run(cd, &want, want_counts);
  long n = 1;
  for (;; n++) {
    *cd = (countdown){0, n, 0};
    char *got = NULL;
    int64_t counts[2];
    run(cd, &got, counts);
    assert_memory_equal(counts, want_counts, sizeof counts);
    assert_string_equal(got, want);
    free(got);
    if (!cd->hit) break;
  }
  free(want);
  assert_true(n > 2); /* the run allocates, and every allocation was failed once */
}

enum { OOM_SMALL_LAYERS = 20, OOM_SMALL_DEPTH = 40, OOM_BIG_LAYERS = 300 };

static void small_tree_run(countdown *cd, char **text, int64_t counts[2]) {
  graft_module *root = oom_build(cd, OOM_SMALL_LAYERS, OOM_SMALL_DEPTH);
  oom_walks(cd, root, text, counts);
  assert_int_equal(counts[0], OOM_SMALL_LAYERS + 1);
  assert_int_equal(counts[1], OOM_SMALL_LAYERS + OOM_SMALL_DEPTH);
  graft_module_destroy(root);
}

static graft_module *g_big;

static void big_tree_walks(countdown *cd, char **text, int64_t counts[2]) {
  oom_walks(cd, g_big, text, counts);
  assert_int_equal(counts[0], OOM_BIG_LAYERS + 1);
  assert_int_equal(counts[1], OOM_BIG_LAYERS + OOM_SMALL_DEPTH);
}

static void test_graft_module_create__out_of_memory_changes_nothing(void **state) {
  (void)state;
  countdown cd;
  graft_allocator a = {cd_alloc, cd_free, &cd};
  graft_set_allocator(&a);
  /* Every allocation of building and walking a small tree... */
  oom_each(small_tree_run, &cd);
  /* ...and every allocation of the walks of a tree past their stack buffers. */
  cd = (countdown){0, 0, 0};
  g_big = oom_build(&cd, OOM_BIG_LAYERS, OOM_SMALL_DEPTH);
  oom_each(big_tree_walks, &cd);
  graft_module_destroy(g_big);
  graft_set_allocator(NULL);
}

/* ---- concurrent walks ---------------------------------------------------------- */

typedef struct walker {
  const tree *t;
  int bad; /* recorded on the worker, asserted after the join */
} walker;

static void *walk_many(void *arg) {
  walker *w = arg;
  const tree *t = w->t;
  graft_variable *want[] = {t->step, t->enc_w, t->enc_b, t->table, t->dec_w, t->dense_w};
  for (int r = 0; r < 2000 && !w->bad; r++) {
    graft_variable *got[8];
    int64_t n = 0;
    paths p;
    memset(&p, 0, sizeof p);
    if (graft_module_variables(t->root, 8, got, &n) || n != 6 || memcmp(got, want, sizeof want) ||
        graft_module_flatten(t->root, collect_path, &p) || p.count != 7)
      w->bad = 1;
  }
  return NULL;
}

static void test_graft_module_variables__concurrent_walks_of_one_tree(void **state) {
  (void)state;
  tree t;
  build_tree(&t);
  walker w[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (walker){&t, 0};
    assert_int_equal(pthread_create(&th[i], NULL, walk_many, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(w[i].bad, 0);
  }
  graft_module_destroy(t.root);
}

/* ---- undoing a create (found by the module fuzz target) ---------------------------- */

/* graft__module_unmake gives a name taken by sibling numbering back: the
 * next module of that name takes it again, as if the undone one had never
 * been made.  The holder of the name may be a list ("layers" when
 * "layers[0]" exists): before the fix its numbering was not given back
 * and the next "layers" became layers_2 while layers_1 was free
 * (tests/fuzz/corpus/module/regress-optim-unmake-list-numbering, an
 * optimizer named "layers" failing under such a parent). */
static void test_graft__module_unmake__gives_the_numbered_name_back(void **state) {
  (void)state;
  graft_module *root = make_module(NULL, "m");
  graft_module *x = make_module(root, "x");
  attach(root, "layers[0]", x);
  make_var(root, "w", 2, 0, 0);
  const char *const names[] = {"layers", "w", "x"};
  for (size_t i = 0; i < TU_N_OF(names); i++) {
    char want[32];
    snprintf(want, sizeof want, "%s_1", names[i]);
    graft_module *undone = make_module(root, names[i]);
    assert_string_equal(graft_module_name(undone), want);
    graft__module_unmake(root, undone);
    graft_module *again = make_module(root, names[i]);
    assert_string_equal(graft_module_name(again), want);
    snprintf(want, sizeof want, "m/%s_1/", names[i]);
    assert_string_equal(graft_module_scope(again), want);
  }
  /* the tree is as the creates left it: x (twice), layers_1, w_1, x_1 */
  graft_module *got[8];
  int64_t n = 0;
  tu_assert_status(graft_module_submodules(root, 8, got, &n), GRAFT_OK);
  assert_int_equal(n, 4);
  assert_string_equal(graft_module_name(got[1]), "layers_1");
  assert_string_equal(graft_module_name(got[2]), "w_1");
  assert_string_equal(graft_module_name(got[3]), "x_1");
  graft_module_destroy(root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_module_create__names_scopes_and_variable_names),
      cmocka_unit_test(test_graft_module_create__siblings_numbered),
      cmocka_unit_test(test_graft_module_create__bad_names_refused),
      cmocka_unit_test(test_graft_module_attach__attributes_and_list_slots),
      cmocka_unit_test(test_graft_module_variables__shared_module_listed_once),
      cmocka_unit_test(test_graft_module_submodules__breadth_first_each_once),
      cmocka_unit_test(test_graft_module_flatten__every_path_of_a_shared_module),
      cmocka_unit_test(test_graft_module_flatten__visit_status_stops_the_walk),
      cmocka_unit_test(test_graft_module_variables__argument_refusals),
      cmocka_unit_test(test_graft__module_hold_var__tracked_variables_walk_with_own),
      cmocka_unit_test(test_graft_module_attach__cycles_refused),
      cmocka_unit_test(test_graft_module_destroy__function_still_using_a_variable_fails),
      cmocka_unit_test(test_graft_module_destroy__frees_what_nothing_else_holds),
      cmocka_unit_test(test_graft_module_destroy__misuse_changes_nothing),
      cmocka_unit_test(test_graft_module_print__one_line_per_path_then_totals),
      cmocka_unit_test(test_graft_module_variables__large_and_deep_trees),
      cmocka_unit_test(test_graft_module_variables__concurrent_walks_of_one_tree),
      cmocka_unit_test(test_graft_module_create__out_of_memory_changes_nothing),
      cmocka_unit_test(test_graft__module_unmake__gives_the_numbered_name_back),
  };
  return cmocka_run_group_tests_name("graph/module", tests, tu_group_setup, tu_group_teardown);
}
