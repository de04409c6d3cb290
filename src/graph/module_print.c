/* graft_module_print: a model summary, one row per path (the columns sized
 * to their longest entry, so one pass measures and a second formats), then
 * totals over the variables, each counted once however many paths reach
 * it.  The rows are formatted into memory and written only once all of
 * them are there, so a failure writes nothing. */
#include <stdio.h>
#include <string.h>

#include "graph/module_int.h"

typedef struct print_ctx {
  int path_w, shape_w, params_w, bytes_w;
  int64_t paths;
  char *rows;           /* the formatted rows */
  size_t at, cap;
} print_ctx;

/* "yes" and the separators and newline of a row, beyond its columns. */
#define ROW_EXTRA 32

static int64_t var_bytes(const graft_variable *v) {
  const graft_tensor *t = v->value;
  return graft__size_mul_sat(graft_tensor_numel(t), (int64_t)graft_dtype_size(graft_tensor_dtype(t)));
}

static void var_shape(const graft_variable *v, char *buf, size_t len) {
  graft__shape_str(buf, len, graft_tensor_rank(v->value), graft_tensor_shape(v->value));
}

static int num_width(int64_t x) {
  char buf[32];
  return snprintf(buf, sizeof buf, "%lld", (long long)x);
}

static graft_status measure(const char *path, graft_variable *v, void *user) {
  print_ctx *c = user;
  char shape[160];
  var_shape(v, shape, sizeof shape);
  c->path_w = GRAFT__MAX(c->path_w, (int)strlen(path));
  c->shape_w = GRAFT__MAX(c->shape_w, (int)strlen(shape));
  c->params_w = GRAFT__MAX(c->params_w, num_width(graft_tensor_numel(v->value)));
  c->bytes_w = GRAFT__MAX(c->bytes_w, num_width(var_bytes(v)));
  c->paths++;
  return GRAFT_OK;
}

static graft_status row(const char *path, graft_variable *v, void *user) {
  print_ctx *c = user;
  char shape[160];
  var_shape(v, shape, sizeof shape);
  int w = snprintf(c->rows + c->at, c->cap - c->at, "%-*s  %-5s  %-*s  %*lld  %*lld  %s\n",
                   c->path_w, path, graft_dtype_name(graft_tensor_dtype(v->value)), c->shape_w,
                   shape, c->params_w, (long long)graft_tensor_numel(v->value), c->bytes_w,
                   (long long)var_bytes(v), v->flags & GRAFT_VAR_TRAINABLE ? "yes" : "no");
  /* The measure pass sized the buffer for every row. */
  if (w < 0 || (size_t)w >= c->cap - c->at)
    return graft__fail(GRAFT_EINTERNAL, "graft_module_print: the row of '%s' does not fit the "
                       "%zu bytes measured", path, c->cap);
  c->at += (size_t)w;
  return GRAFT_OK;
}

GRAFT_API graft_status graft_module_print(const graft_module *m, FILE *f) {
  static const char api[] = "graft_module_print";
  if (!m) return graft__fail(GRAFT_EINVAL, "%s: m is NULL (expected a module)", api);
  if (!f) return graft__fail(GRAFT_EINVAL, "%s: f is NULL (expected a stream)", api);
  print_ctx c = {.path_w = 4, .shape_w = 5, .params_w = 10, .bytes_w = 5};
  int64_t n = 0;
  graft_status st = graft_module_flatten(m, measure, &c);
  if (!st) st = graft_module_variables(m, 0, NULL, &n);
  if (st) return graft__fail(st, "%s: %s", api, graft_last_errmsg());
  graft_variable **vars = graft__malloc((size_t)(n ? n : 1) * sizeof *vars);
  if (!vars) return graft__fail(GRAFT_ENOMEM, "%s: out of memory for %lld variables", api, (long long)n);
  st = graft_module_variables(m, n, vars, &n);
  if (st) {
    graft__free(vars);
    return graft__fail(st, "%s: %s", api, graft_last_errmsg());
  }
  int64_t params = 0, trainable = 0, bytes = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t p = graft_tensor_numel(vars[i]->value);
    params = graft__size_add_sat(params, p);
    if (vars[i]->flags & GRAFT_VAR_TRAINABLE) trainable = graft__size_add_sat(trainable, p);
    bytes = graft__size_add_sat(bytes, var_bytes(vars[i]));
  }
  graft__free(vars);
  c.cap = (size_t)c.paths * (size_t)(c.path_w + c.shape_w + c.params_w + c.bytes_w + ROW_EXTRA) + 1;
  c.rows = graft__malloc(c.cap);
  if (!c.rows)
    return graft__fail(GRAFT_ENOMEM, "%s: out of memory for %lld rows", api, (long long)c.paths);
  c.rows[0] = '\0';
  st = graft_module_flatten(m, row, &c);
  if (st) {
    graft__free(c.rows);
    return st == GRAFT_EINTERNAL ? st : graft__fail(st, "%s: %s", api, graft_last_errmsg());
  }
  fprintf(f, "%-*s  %-5s  %-*s  %*s  %*s  %s\n", c.path_w, "path", "dtype", c.shape_w, "shape",
          c.params_w, "parameters", c.bytes_w, "bytes", "trainable");
  fwrite(c.rows, 1, c.at, f);
  graft__free(c.rows);
  fprintf(f, "total: %lld paths, %lld variables, %lld parameters (%lld trainable), %lld bytes\n",
          (long long)c.paths, (long long)n, (long long)params, (long long)trainable, (long long)bytes);
  /* A full disk shows at the flush, not at the buffered writes. */
  if (fflush(f) || ferror(f))
    return graft__fail(GRAFT_EIO, "%s: writing the summary of module '%s' failed (expected a "
                       "writable stream)", api, m->name);
  return GRAFT_OK;
}
