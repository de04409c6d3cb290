/* Optimizers (graft/optim.h): a module holding the slots and the step count
 * of the variables it updates, and the trace-time code that emits one fused
 * UPDATE node per variable (graph.h's graft__update_attr: the kernel's
 * formulas), with the step's scalars (learning rate, bias corrections,
 * clipping scale) computed once per apply in the graph, so neither a
 * learning-rate schedule nor the step count retraces. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graft/optim.h"
#include "graph/module_int.h"

/* The state behind an optimizer module (its ext). */
typedef struct optim {
  graft_optimizer_desc d;   /* defaults filled in */
  int n;
  graft_variable **vars;    /* held (one reference each) */
  graft_variable **slots;   /* n * n_slots, owned by the per-variable submodules */
  int n_slots;
  graft_variable *step;     /* f64 rank 0, owned by the optimizer module */
} optim;

static void optim_free(void *ext) {
  optim *o = ext;
  for (int i = 0; o->vars && i < o->n; i++)
    if (o->vars[i]) graft__variable_unref(o->vars[i]);
  graft__free(o->vars);
  graft__free(o->slots);
  graft__free(o);
}

static const char *kind_name(graft_optimizer_kind k) {
  switch (k) {
  case GRAFT_OPT_SGD: return "sgd";
  case GRAFT_OPT_MOMENTUM: return "momentum";
  case GRAFT_OPT_NESTEROV: return "nesterov";
  case GRAFT_OPT_ADAM: return "adam";
  case GRAFT_OPT_ADAMW: return "adamw";
  }
  return "?";
}

static int in_open01(double x) { return x > 0 && x < 1; }

/* Fill defaults into d and check it; a message in graft_last_errmsg. */
static graft_status check_desc(const char *api, graft_optimizer_desc *d) {
  if ((unsigned)d->kind > GRAFT_OPT_ADAMW)
    return graft__fail(GRAFT_EINVAL, "%s: desc->kind is %d (expected a graft_optimizer_kind)", api,
                       (int)d->kind);
  const char *k = kind_name(d->kind);
  if (d->momentum == 0) d->momentum = 0.9;
  if (d->beta1 == 0) d->beta1 = 0.9;
  if (d->beta2 == 0) d->beta2 = 0.999;
  if (d->eps == 0) d->eps = 1e-8;
  if (d->lr_var) {
    const graft_tensor *v = d->lr_var->value;
    graft_dtype dt = graft_tensor_dtype(v);
    if (graft_tensor_rank(v) != 0 || (dt != GRAFT_F32 && dt != GRAFT_F64))
      return graft__fail(GRAFT_EINVAL, "%s (%s): desc->lr_var '%s' is %s of rank %d (expected a "
                         "rank-0 f32 or f64 variable)", api, k, d->lr_var->name,
                         graft_dtype_name(dt), graft_tensor_rank(v));
  } else if (!(d->lr > 0) || !isfinite(d->lr)) {
    return graft__fail(GRAFT_EINVAL, "%s (%s): desc->lr is %g (expected a finite lr > 0, or "
                       "desc->lr_var)", api, k, d->lr);
  }
  if (!in_open01(d->momentum))
    return graft__fail(GRAFT_EINVAL, "%s (%s): desc->momentum is %g (expected 0 < momentum < 1)",
                       api, k, d->momentum);
  if (!in_open01(d->beta1) || !in_open01(d->beta2))
    return graft__fail(GRAFT_EINVAL, "%s (%s): desc->beta1, beta2 are %g, %g (expected each in "
                       "(0, 1))", api, k, d->beta1, d->beta2);
  if (!(d->eps > 0) || !isfinite(d->eps))
    return graft__fail(GRAFT_EINVAL, "%s (%s): desc->eps is %g (expected a finite eps > 0)", api,
                       k, d->eps);
  if (!(d->weight_decay >= 0) || !isfinite(d->weight_decay))
    return graft__fail(GRAFT_EINVAL, "%s (%s): desc->weight_decay is %g (expected >= 0)", api, k,
                       d->weight_decay);
  if (!(d->clip_norm >= 0) || !isfinite(d->clip_norm))
    return graft__fail(GRAFT_EINVAL, "%s (%s): desc->clip_norm is %g (expected >= 0; 0 = none)",
                       api, k, d->clip_norm);
  return GRAFT_OK;
}

static int slots_of(graft_optimizer_kind k) {
  return k == GRAFT_OPT_SGD ? 0 : k == GRAFT_OPT_ADAM || k == GRAFT_OPT_ADAMW ? 2 : 1;
}

/* "model/dense/w" -> "model_dense_w": an identifier for the variable's
 * slot module (sibling numbering keeps two such names apart). */
static void slot_module_name(const char *var, char *out, size_t len) {
  size_t j = 0;
  if (!((var[0] >= 'A' && var[0] <= 'Z') || (var[0] >= 'a' && var[0] <= 'z') || var[0] == '_'))
    out[j++] = 'v';
  for (size_t i = 0; var[i] && j + 1 < len && j < GRAFT__NAME_MAX; i++) {
    char c = var[i];
    int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    out[j++] = ok ? c : '_';
  }
  out[j] = '\0';
}

/* Step, learning-rate variable and slots of a new optimizer; on failure
 * the caller undoes the module.  The step and "lr" come first: a slot
 * module named after a variable "step" or "lr" then takes "step_1" or
 * "lr_1" (sibling numbering) instead of refusing the optimizer. */
static graft_status make_state(graft_module *m, optim *o, const char *api) {
  static const char *const names[2][2] = {{"momentum", NULL}, {"m", "v"}};
  int ns = o->n_slots;
  graft_status st = graft_variable_create(m, "step", GRAFT_F64, 0, NULL, NULL, 0, &o->step);
  if (!st && o->d.lr_var) st = graft__module_hold_var(m, api, "lr", o->d.lr_var, GRAFT__ENTRY_TRACKED);
  if (st) return st;
  for (int i = 0; i < o->n; i++) {
    graft_variable *v = o->vars[i];
    const graft_tensor *val = v->value;
    char sub[GRAFT__NAME_MAX + 1];
    slot_module_name(v->name, sub, sizeof sub);
    graft_module *sm = NULL;
    graft_status st = graft_module_create(m, sub, &sm);
    for (int s = 0; s < ns && !st; s++)
      st = graft_variable_create(sm, names[ns - 1][s], graft_tensor_dtype(val), graft_tensor_rank(val),
                                 graft_tensor_shape(val), NULL, 0, &o->slots[i * ns + s]);
    if (st) return st;
  }
  return GRAFT_OK;
}

GRAFT_API graft_status graft_optimizer_create(graft_module *parent, const char *name,
                                              const graft_optimizer_desc *desc, int n,
                                              graft_variable *const *vars, graft_module **out) {
  static const char api[] = "graft_optimizer_create";
  if (!out) return graft__fail(GRAFT_EINVAL, "%s: out is NULL (expected a graft_module **)", api);
  *out = NULL;
  if (!desc) return graft__fail(GRAFT_EINVAL, "%s: desc is NULL (expected options)", api);
  graft_optimizer_desc d = *desc;
  graft_status st = check_desc(api, &d);
  if (st) return st;
  if (n < 1 || !vars)
    return graft__fail(GRAFT_EINVAL, "%s (%s): %d variables%s (expected n >= 1 and their array)",
                       api, kind_name(d.kind), n, vars ? "" : ", vars NULL");
  for (int i = 0; i < n; i++) {
    if (!vars[i]) return graft__fail(GRAFT_EINVAL, "%s: vars[%d] is NULL", api, i);
    graft_dtype dt = graft_tensor_dtype(vars[i]->value);
    if (dt != GRAFT_F32 && dt != GRAFT_F64)
      return graft__fail(GRAFT_EINVAL, "%s: vars[%d] '%s' is %s (an optimizer updates f32 and f64)",
                         api, i, vars[i]->name, graft_dtype_name(dt));
    if (__atomic_load_n(&vars[i]->destroyed, __ATOMIC_ACQUIRE))
      return graft__fail(GRAFT_EMISUSE, "%s: vars[%d] '%s' was destroyed", api, i, vars[i]->name);
    for (int j = 0; j < i; j++)
      if (vars[j] == vars[i])
        return graft__fail(GRAFT_EINVAL, "%s: vars[%d] and vars[%d] are both '%s'", api, j, i,
                           vars[i]->name);
  }
  optim *o = graft__calloc(1, sizeof *o);
  if (o) {
    o->d = d;
    o->n = n;
    o->n_slots = slots_of(d.kind);
    o->vars = graft__calloc((size_t)n, sizeof *o->vars);
    o->slots = graft__calloc((size_t)n * (size_t)(o->n_slots ? o->n_slots : 1), sizeof *o->slots);
  }
  if (!o || !o->vars || !o->slots) {
    if (o) optim_free(o);
    return graft__fail(GRAFT_ENOMEM, "%s: out of memory", api);
  }
  graft_module *m = NULL;
  st = graft_module_create(parent, name, &m);
  if (st) {
    optim_free(o);
    return graft__fail_in(api, st);
  }
  for (int i = 0; i < n; i++) {
    graft__variable_ref(vars[i]);
    o->vars[i] = vars[i];
  }
  m->ext = o;
  m->ext_free = optim_free;
  st = make_state(m, o, api);
  if (st) {
    /* All or nothing: the module, its slots and its holds go, and a
     * parent is left as it was. */
    if (!parent) graft_module_destroy(m);
    else graft__module_unmake(parent, m);
    return graft__fail_in(api, st);
  }
  *out = m;
  return GRAFT_OK;
}

/* ---- inside a trace ----------------------------------------------------- */

/* min(1, max_norm / (norm + 1e-6)) for the global 2-norm of the non-NULL
 * xs (f64, the sum of squares in xs order), with the norm in *norm; NULL
 * when every x is NULL. */
static graft_value *clip_coef(graft_trace *t, int n, graft_value *const *xs, double max_norm,
                              graft_value **norm) {
  graft_value *sq = NULL;
  for (int i = 0; i < n; i++) {
    if (!xs[i]) continue;
    graft_value *s = graft_cast(t, graft_reduce_sum(t, graft_square(t, xs[i]), 0, NULL, 0), GRAFT_F64);
    sq = sq ? graft_add(t, sq, s) : s;
  }
  if (!sq) return NULL;
  *norm = graft_sqrt(t, sq);
  graft_value *coef = graft_div(t, graft_scalar(t, GRAFT_F64, max_norm),
                                graft_add(t, *norm, graft_scalar(t, GRAFT_F64, 1e-6)));
  return graft_minimum(t, coef, graft_scalar(t, GRAFT_F64, 1));
}

/* Sticky-fail t unless every non-NULL v[i] is an f32/f64 value of t. */
static graft_status check_float_values(graft_trace *t, const char *fn, const char *what, int n,
                                       graft_value *const *v) {
  for (int i = 0; i < n; i++) {
    switch (graft__trace_value(t, v[i], NULL)) {
    case GRAFT__VALUE_NULL: continue;
    case GRAFT__VALUE_NODE: break;
    case GRAFT__VALUE_POISON:
      return graft_trace_fail(t, GRAFT_EMISUSE, "%s: %s[%d] is the poison value of another (failed) "
                              "trace", fn, what, i);
    case GRAFT__VALUE_FOREIGN:
      return graft_trace_fail(t, GRAFT_EMISUSE, "%s: %s[%d] belongs to another trace, or to one "
                              "that ended", fn, what, i);
    }
    graft_dtype dt = graft_value_dtype(v[i]);
    if (dt != GRAFT_F32 && dt != GRAFT_F64)
      return graft_trace_fail(t, GRAFT_EDTYPE, "%s: %s[%d] is %s (expected f32 or f64)", fn, what, i,
                              graft_dtype_name(dt));
  }
  return GRAFT_OK;
}

GRAFT_API graft_status graft_clip_by_global_norm(graft_trace *t, int n, graft_value *const *xs,
                                                 double max_norm, graft_value **out,
                                                 graft_value **norm) {
  static const char fn[] = "graft_clip_by_global_norm";
  if (!t) return GRAFT_EINVAL;
  if (out)
    for (int i = 0; i < n; i++) out[i] = NULL;
  if (norm) *norm = NULL;
  if (t->status) return t->status;
  if (n < 1 || !xs || !out)
    return graft_trace_fail(t, GRAFT_EINVAL, "%s: needs n >= 1 and the xs and out arrays", fn);
  if (!(max_norm > 0) || !isfinite(max_norm))
    return graft_trace_fail(t, GRAFT_EINVAL, "%s: max_norm is %g (expected a finite value > 0)", fn,
                            max_norm);
  graft_status st = check_float_values(t, fn, "xs", n, xs);
  if (st) return st;
  graft_value *total = NULL, *coef = clip_coef(t, n, xs, max_norm, &total);
  if (!coef) return graft_trace_fail(t, GRAFT_EINVAL, "%s: every xs[i] is NULL", fn);
  coef = graft_stop_gradient(t, coef);
  for (int i = 0; i < n && !t->status; i++)
    if (xs[i]) out[i] = graft_mul(t, xs[i], graft_cast(t, coef, graft_value_dtype(xs[i])));
  if (t->status) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    return t->status;
  }
  if (norm) *norm = total;
  return GRAFT_OK;
}

/* hp = [lr, c1, c2s, gscale] in dtype dt from the f64 scalars. */
static graft_value *hp_vector(graft_trace *t, graft_value *const *f64s, graft_dtype dt) {
  const int64_t one[1] = {1};
  graft_value *parts[GRAFT__UPDATE_HP];
  for (int k = 0; k < GRAFT__UPDATE_HP; k++) parts[k] = graft_reshape(t, graft_cast(t, f64s[k], dt), 1, one);
  return graft_concat(t, GRAFT__UPDATE_HP, parts, 0);
}

GRAFT_API graft_status graft_optimizer_apply(graft_trace *t, graft_module *opt, int n,
                                             graft_value *const *grads) {
  static const char fn[] = "graft_optimizer_apply";
  if (!t) return GRAFT_EINVAL;
  if (t->status) return t->status;
  if (!opt || opt->ext_free != optim_free)
    return graft_trace_fail(t, GRAFT_EINVAL, "%s: %s is not an optimizer (expected a module made "
                            "by graft_optimizer_create)", fn, opt ? graft_module_scope(opt) : "opt NULL");
  optim *o = opt->ext;
  const graft_optimizer_desc *d = &o->d;
  if (n != o->n || !grads)
    return graft_trace_fail(t, GRAFT_EINVAL, "%s: %d gradients for optimizer '%s' of %d variables "
                            "(expected one per variable, NULL to skip one)", fn, n, opt->scope, o->n);
  graft_status st = check_float_values(t, fn, "grads", n, grads);
  if (st) return st;
  for (int i = 0; i < n; i++) {
    if (!grads[i]) continue;
    const graft_tensor *w = o->vars[i]->value;
    int r = graft_value_rank(grads[i]);
    if (graft_value_dtype(grads[i]) != graft_tensor_dtype(w) || r != graft_tensor_rank(w) ||
        (r && memcmp(graft_value_shape(grads[i]), graft_tensor_shape(w), (size_t)r * sizeof(int64_t)))) {
      char want[160], got[160];
      graft__shape_str(want, sizeof want, graft_tensor_rank(w), graft_tensor_shape(w));
      graft__shape_str(got, sizeof got, r, graft_value_shape(grads[i]));
      return graft_trace_fail(t, GRAFT_ESHAPE, "%s: grads[%d] is %s%s, variable '%s' is %s%s", fn, i,
                              graft_dtype_name(graft_value_dtype(grads[i])), got, o->vars[i]->name,
                              graft_dtype_name(graft_tensor_dtype(w)), want);
    }
  }
  /* The step's scalars, in f64: t advances once per apply. */
  graft_value *step = graft_add(t, graft_read(t, o->step), graft_scalar(t, GRAFT_F64, 1));
  graft_assign(t, o->step, step);
  graft_value *lr = d->lr_var ? graft_cast(t, graft_read(t, d->lr_var), GRAFT_F64)
                              : graft_scalar(t, GRAFT_F64, d->lr);
  graft_value *c1 = graft_scalar(t, GRAFT_F64, 1), *c2s = c1, *gscale = c1;
  if (d->kind == GRAFT_OPT_ADAM || d->kind == GRAFT_OPT_ADAMW) {
    graft_value *one = graft_scalar(t, GRAFT_F64, 1);
    c1 = graft_sub(t, one, graft_pow(t, graft_scalar(t, GRAFT_F64, d->beta1), step));
    c2s = graft_sqrt(t, graft_sub(t, one, graft_pow(t, graft_scalar(t, GRAFT_F64, d->beta2), step)));
  }
  if (d->clip_norm > 0) { /* the scale alone: the kernel multiplies each gradient by it */
    graft_value *norm, *coef = clip_coef(t, n, grads, d->clip_norm, &norm);
    if (coef) gscale = coef;
  }
  graft_value *f64s[GRAFT__UPDATE_HP] = {lr, c1, c2s, gscale};
  graft_value *hp[2] = {NULL, NULL}; /* per dtype, made on first use */
  static const int kinds[] = {GRAFT__UPDATE_SGD, GRAFT__UPDATE_MOMENTUM, GRAFT__UPDATE_NESTEROV,
                              GRAFT__UPDATE_ADAM, GRAFT__UPDATE_ADAMW};
  for (int i = 0; i < n && !t->status; i++) {
    if (!grads[i]) continue;
    graft_dtype dt = graft_tensor_dtype(o->vars[i]->value);
    int h = dt == GRAFT_F64;
    if (!hp[h]) hp[h] = hp_vector(t, f64s, dt);
    struct graft__update_attr u = {.n_vars = 1 + o->n_slots,
                                   .kind = kinds[d->kind],
                                   .mu = d->momentum,
                                   .b1 = d->beta1,
                                   .b2 = d->beta2,
                                   .eps = d->eps,
                                   .wd = d->weight_decay};
    u.var[0] = o->vars[i];
    for (int s = 0; s < o->n_slots; s++) u.var[1 + s] = o->slots[i * o->n_slots + s];
    graft__update(t, &u, grads[i], hp[h]);
  }
  return t->status;
}
