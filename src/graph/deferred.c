/* Deferred modules (module.h): a module that tracks the variables it
 * derives parameters from, with a derive callback that a trace runs once
 * and whose values every later use in that trace shares.
 *
 * The module itself only holds what never changes (the callback, its user
 * pointer, the parameter count), so traces on several threads may use one
 * deferred module at once.  What a trace derived lives in that trace (its
 * deferred cache, freed when the trace ends), so a stale entry of another
 * trace can never be used.  An entry remembers the current value, in the
 * trace, of each variable the derived values depend on: an assignment
 * later in the same trace makes the next use derive again, as graft_read
 * gives the assigned value after an assignment.  Across calls nothing is
 * cached: reads are by reference, so a new value of a variable reaches
 * the derived values of the next call without a retrace. */
#include <stdio.h>
#include <string.h>

#include "graph/module_int.h"

/* Derive callbacks running inside one another (a deferred module deriving
 * from another one, which derives from a third...): deeper is refused. */
#define MAX_DEPTH 64

/* The longest base of a tracked variable's attribute: room is left for a
 * "_<k>" suffix within GRAFT__NAME_MAX. */
#define ATTR_BASE_MAX (GRAFT__NAME_MAX - 11)

/* A deferred module's ext. */
typedef struct deferred {
  graft_derive_fn derive;
  void *user;
  int n_params;
  /* Unique per deferred module ever made: a trace's entry for a module
   * freed during the trace is not taken for a new module at its address. */
  uint64_t serial;
} deferred;

static uint64_t next_serial;

static void deferred_free(void *ext) { graft__free(ext); }

/* m's state when m is a deferred module, else NULL. */
static const deferred *deferred_of(const graft_module *m) {
  return m && m->ext_free == deferred_free ? m->ext : NULL;
}

/* ---- creation ------------------------------------------------------------ */

/* The attribute a tracked variable is held under, before deduplication:
 * the last '/'-separated part of its name ("model/loc" -> "loc"), with
 * every character outside [A-Za-z0-9_] made '_', a leading digit
 * prefixed by 'v', "var" for an empty part, cut at ATTR_BASE_MAX. */
static void attr_base(const char *name, char *out) {
  const char *last = strrchr(name, '/');
  last = last ? last + 1 : name;
  size_t j = 0;
  if (*last >= '0' && *last <= '9') out[j++] = 'v';
  for (; *last && j < ATTR_BASE_MAX; last++) {
    char c = *last;
    int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    out[j++] = ok ? c : '_';
  }
  if (j == 0) memcpy(out, "var", 4);
  else out[j] = '\0';
}

/* Hold vars[0..n) in m (a new module: nothing is taken in it but what
 * this adds) as tracked variables: variable i under its base name, or
 * base_k with the smallest k that no earlier attribute took. */
static graft_status hold_tracked(graft_module *m, const char *api, int n,
                                 graft_variable *const *vars) {
  char(*base)[ATTR_BASE_MAX + 1] = graft__malloc((size_t)(n ? n : 1) * sizeof *base);
  uint32_t *suffix = graft__malloc((size_t)(n ? n : 1) * sizeof *suffix);
  graft_status st = base && suffix ? GRAFT_OK : GRAFT_ENOMEM;
  if (st) graft__fail(st, "%s: out of memory for %d tracked variables", api, n);
  /* A taken name makes the probe below leave a message; a success must
   * leave the thread's last message as the caller had it. */
  char saved[GRAFT__MSG_LEN];
  int probed = 0;
  snprintf(saved, sizeof saved, "%s", graft_last_errmsg());
  for (int i = 0; i < n && !st; i++) {
    attr_base(vars[i]->name, base[i]);
    /* Variables that share a base take the suffixes after the last one's:
     * many of one name cost one probe each, not one per earlier name. */
    uint32_t k = 0;
    for (int j = i - 1; j >= 0; j--)
      if (strcmp(base[j], base[i]) == 0) {
        k = suffix[j] + 1;
        break;
      }
    /* m holds i attributes, so one of i + 1 names is free: past that the
     * name itself is refused (EINVAL with hold_var's message), not taken. */
    for (int tries = 0;; k++, tries++) {
      char attr[GRAFT__NAME_MAX + 1];
      if (k) snprintf(attr, sizeof attr, "%s_%u", base[i], k);
      else snprintf(attr, sizeof attr, "%s", base[i]);
      st = graft__module_hold_var(m, api, attr, vars[i], GRAFT__ENTRY_TRACKED);
      if (st != GRAFT_EINVAL || tries > i) break;
      probed = 1; /* taken by an earlier variable's suffixed name */
    }
    suffix[i] = k;
  }
  if (!st && probed) graft__fail(GRAFT_OK, "%s", saved);
  graft__free(base);
  graft__free(suffix);
  return st;
}

/* Give to, a module just made under its parent (no attributes yet), the
 * variables and attribute index of from, a root built apart so that a
 * failure there never touched the parent; from is left empty. */
static void take_attributes(graft_module *to, graft_module *from) {
  to->vars = from->vars;
  to->n_vars = from->n_vars;
  to->cap_vars = from->cap_vars;
  to->index = from->index;
  from->vars = NULL;
  from->n_vars = from->cap_vars = 0;
  from->index = (graft__attr_index){0};
}

static graft_status check_create_args(const char *api, const char *name, int n_vars,
                                      graft_variable *const *vars, int n_params,
                                      graft_derive_fn derive) {
  if (!name) return graft__fail(GRAFT_EINVAL, "%s: name is NULL (expected a C identifier)", api);
  if (!graft__module_is_name(name))
    return graft__fail(GRAFT_EINVAL, "%s: name '%.80s' is not a C identifier (expected "
                       "[A-Za-z_][A-Za-z0-9_]*, at most %d characters)", api, name,
                       GRAFT__NAME_MAX);
  if (!derive)
    return graft__fail(GRAFT_EINVAL, "%s: derive is NULL for deferred module '%s' (expected the "
                       "callback that computes its parameters)", api, name);
  if (n_params < 1)
    return graft__fail(GRAFT_EINVAL, "%s: n_params is %d for deferred module '%s' (expected "
                       "n_params >= 1)", api, n_params, name);
  if (n_vars < 0 || (n_vars > 0 && !vars))
    return graft__fail(GRAFT_EINVAL, "%s: n_vars is %d and vars is %s for deferred module '%s' "
                       "(expected n_vars >= 0 and, when n_vars > 0, an array of that many "
                       "variables)", api, n_vars, vars ? "set" : "NULL", name);
  for (int i = 0; i < n_vars; i++) {
    if (!vars[i])
      return graft__fail(GRAFT_EINVAL, "%s: vars[%d] is NULL for deferred module '%s' (expected "
                         "a variable)", api, i, name);
    if (__atomic_load_n(&vars[i]->destroyed, __ATOMIC_ACQUIRE))
      return graft__fail(GRAFT_EMISUSE, "%s: vars[%d] '%s' was destroyed (deferred module '%s')",
                         api, i, vars[i]->name, name);
    for (int j = 0; j < i; j++)
      if (vars[j] == vars[i])
        return graft__fail(GRAFT_EINVAL, "%s: vars[%d] and vars[%d] are both '%s' (deferred module "
                           "'%s'; expected each variable once)", api, j, i, vars[i]->name, name);
  }
  return GRAFT_OK;
}

GRAFT_API graft_status graft_deferred_create(graft_module *parent, const char *name, int n_vars,
                                             graft_variable *const *vars, int n_params,
                                             graft_derive_fn derive, void *user,
                                             graft_module **out) {
  static const char api[] = "graft_deferred_create";
  if (!out) return graft__fail(GRAFT_EINVAL, "%s: out is NULL (expected a graft_module **)", api);
  *out = NULL;
  graft_status st = check_create_args(api, name, n_vars, vars, n_params, derive);
  if (st) return st;
  deferred *d = graft__calloc(1, sizeof *d);
  if (!d) return graft__fail(GRAFT_ENOMEM, "%s: out of memory for deferred module '%s'", api, name);
  d->derive = derive;
  d->user = user;
  d->n_params = n_params;
  /* Built as a root first: a module made under a parent stays the
   * parent's (attributes are never removed), so everything that can fail
   * happens before it is made. */
  graft_module *root = NULL, *m = NULL;
  st = graft_module_create(NULL, name, &root);
  if (!st) st = hold_tracked(root, api, n_vars, vars);
  if (!st && parent) st = graft_module_create(parent, name, &m);
  if (st) {
    graft_module_destroy(root);
    graft__free(d);
    return graft__fail_in(api, st); /* graft_module_create's message names it */
  }
  if (parent) {
    take_attributes(m, root);
    graft_module_destroy(root);
  } else {
    m = root;
  }
  d->serial = __atomic_add_fetch(&next_serial, 1, __ATOMIC_RELAXED);
  m->ext = d;
  m->ext_free = deferred_free;
  *out = m;
  return GRAFT_OK;
}

/* ---- the per-trace cache -------------------------------------------------- */

/* A variable the derived values depend on, and its current value (node
 * id) in the trace when they were derived. */
typedef struct dep {
  graft_variable *v;
  uint32_t id;
} dep;

enum { ENTRY_STALE = 0, ENTRY_DERIVING, ENTRY_READY };

typedef struct entry {
  uint64_t serial;     /* the module's (deferred.serial) */
  int state;
  uint32_t *params;    /* n_params node ids (READY) */
  dep *deps;
  int64_t n_deps;
} entry;

struct graft__deferred_cache {
  graft__ptrmap of;    /* module -> index in e */
  entry *e;
  int64_t n, cap;
  /* The modules whose derive is running, outermost first. */
  const graft_module *chain[MAX_DEPTH];
  int depth;
};

void graft__deferred_cache_free(struct graft__deferred_cache *c) {
  if (!c) return;
  for (int64_t i = 0; i < c->n; i++) {
    graft__free(c->e[i].params);
    graft__free(c->e[i].deps);
  }
  graft__free(c->e);
  graft__ptrmap_free(&c->of);
  graft__free(c);
}

/* Forget what an entry derived (a new derive replaces it). */
static void entry_clear(entry *e) {
  graft__free(e->params);
  graft__free(e->deps);
  e->params = NULL;
  e->deps = NULL;
  e->n_deps = 0;
  e->state = ENTRY_STALE;
}

/* The index of m's entry in t's cache, made (stale) if absent or left by
 * a module freed at m's address; -1 when out of memory. */
static int64_t entry_index(graft_trace *t, const graft_module *m, const deferred *d) {
  if (!t->deferred && !(t->deferred = graft__calloc(1, sizeof *t->deferred))) return -1;
  struct graft__deferred_cache *c = t->deferred;
  const uint32_t *i = graft__ptrmap_get(&c->of, m);
  if (i) {
    entry *e = &c->e[*i];
    if (e->serial != d->serial) {
      entry_clear(e);
      e->serial = d->serial;
    }
    return *i;
  }
  if (c->n >= UINT32_MAX || graft__grow((void **)&c->e, &c->cap, c->n + 1, sizeof *c->e) ||
      graft__ptrmap_put(&c->of, m, (uint32_t)c->n))
    return -1;
  c->e[c->n] = (entry){.serial = d->serial};
  return c->n++;
}

/* 1 when no variable e's values depend on was assigned since. */
static int entry_current(const graft_trace *t, const entry *e) {
  for (int64_t i = 0; i < e->n_deps; i++) {
    const uint32_t *id = graft__ptrmap_get(&t->cur, e->deps[i].v);
    if ((id ? *id : GRAFT__POISON_ID) != e->deps[i].id) return 0;
  }
  return 1;
}

/* ---- inside a trace -------------------------------------------------------- */

#define API "graft_deferred_params"

static graft_status fail(graft_trace *t, graft_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static graft_status fail(graft_trace *t, graft_status s, const char *fmt, ...) {
  char buf[GRAFT__MSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  graft__vmsgf(buf, fmt, ap);
  va_end(ap);
  graft__trace_failf(t, s, API ": %s (in trace '%s')", buf, t->g->name);
  return t->status;
}

/* "a -> b -> m": the derive chain that asks for m again. */
static void chain_str(const struct graft__deferred_cache *c, const graft_module *m, char *buf,
                      size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i <= c->depth && at < len; i++) {
    const graft_module *x = i < c->depth ? c->chain[i] : m;
    int w = snprintf(buf + at, len - at, "%s'%s'", i ? " -> " : "", x->name);
    if (w < 0) break;
    at += (size_t)w;
  }
}

/* The variables the derived values of m depend on: the walk from the
 * values back through their inputs stops at a variable's value (its
 * current one in the trace, or an earlier read or assignment: a value
 * that never changes) and at an optimizer step.  Each variable met must
 * be one of m's walk (tracked by m or below it: what the caller sees in
 * m's variables and checkpoints); each met at its current value is a dep
 * of the entry.  A variable met at several values is listed once per
 * value. */
typedef struct dep_walk {
  graft__ptrmap current;   /* node address -> slot of t->cur holding it */
  graft__ptrmap seen;      /* node address -> 1 */
  uint32_t *stack;
  int64_t n_stack, cap_stack;
  dep *deps;
  int64_t n_deps, cap_deps;
  graft_variable **met;    /* every variable met (current or not) */
  int64_t n_met, cap_met;
} dep_walk;

static void dep_walk_free(dep_walk *w) {
  graft__ptrmap_free(&w->current);
  graft__ptrmap_free(&w->seen);
  graft__free(w->stack);
  graft__free(w->deps);
  graft__free(w->met);
}

static graft_status push_node(dep_walk *w, const graft__graph *g, uint32_t id) {
  const graft__node *n = graft__graph_node(g, id);
  if (graft__ptrmap_get(&w->seen, n)) return GRAFT_OK;
  if (graft__ptrmap_put(&w->seen, n, 1) ||
      graft__grow((void **)&w->stack, &w->cap_stack, w->n_stack + 1, sizeof *w->stack))
    return GRAFT_ENOMEM;
  w->stack[w->n_stack++] = id;
  return GRAFT_OK;
}

static graft_status met(dep_walk *w, graft_variable *v) {
  if (graft__grow((void **)&w->met, &w->cap_met, w->n_met + 1, sizeof *w->met))
    return GRAFT_ENOMEM;
  w->met[w->n_met++] = v;
  return GRAFT_OK;
}

static graft_status walk_deps(const graft_trace *t, const uint32_t *params, int n_params,
                              dep_walk *w) {
  const graft__graph *g = t->g;
  for (uint32_t s = 0; s < t->cur.cap; s++)
    if (t->cur.key[s] && graft__ptrmap_put(&w->current, graft__graph_node(g, t->cur.val[s]), s))
      return GRAFT_ENOMEM;
  for (int i = 0; i < n_params; i++)
    if (push_node(w, g, params[i])) return GRAFT_ENOMEM;
  while (w->n_stack > 0) {
    const graft__node *n = graft__graph_node(g, w->stack[--w->n_stack]);
    const uint32_t *slot = graft__ptrmap_get(&w->current, n);
    if (slot) {
      graft_variable *v = (graft_variable *)t->cur.key[*slot];
      if (graft__grow((void **)&w->deps, &w->cap_deps, w->n_deps + 1, sizeof *w->deps) ||
          met(w, v))
        return GRAFT_ENOMEM;
      w->deps[w->n_deps++] = (dep){v, n->id};
      continue;
    }
    if (n->op == GRAFT__OP_VAR_READ || n->op == GRAFT__OP_ASSIGN) {
      if (met(w, n->attr.var.var)) return GRAFT_ENOMEM;
      continue;
    }
    /* An earlier optimizer step's result: the variables' values then,
     * which no later assignment changes. */
    if (n->op == GRAFT__OP_UPDATE) continue;
    for (int32_t i = 0; i < n->n_in; i++)
      if (push_node(w, g, n->in[i])) return GRAFT_ENOMEM;
  }
  return GRAFT_OK;
}

/* Each variable met is in m's walk; else the trace fails naming it. */
static graft_status check_tracked(graft_trace *t, const graft_module *m, const dep_walk *w) {
  if (w->n_met == 0) return GRAFT_OK;
  int64_t n = 0;
  graft_variable **all = NULL;
  graft__ptrmap in_walk = {0};
  graft_status st = graft_module_variables(m, 0, NULL, &n);
  if (!st && !(all = graft__malloc((size_t)(n ? n : 1) * sizeof *all))) st = GRAFT_ENOMEM;
  if (!st) st = graft_module_variables(m, n, all, &n);
  for (int64_t i = 0; i < n && !st; i++) st = graft__ptrmap_put(&in_walk, all[i], 1);
  graft__free(all);
  if (st) {
    graft__ptrmap_free(&in_walk);
    return fail(t, GRAFT_ENOMEM, "out of memory listing the variables of deferred module '%s'",
                m->name);
  }
  for (int64_t i = 0; i < w->n_met; i++) {
    if (graft__ptrmap_get(&in_walk, w->met[i])) continue;
    graft__ptrmap_free(&in_walk);
    return fail(t, GRAFT_EMISUSE, "derive of deferred module '%s' (scope '%s') read variable "
                "'%s', which '%s' does not track (expected the variables it derives from among "
                "graft_deferred_create's vars, or in a module attached to it, so that its walks "
                "and checkpoints hold them)", m->name, m->scope, w->met[i]->name, m->name);
  }
  graft__ptrmap_free(&in_walk);
  return GRAFT_OK;
}

/* After derive returned cb with params[]: the trace's status, with the
 * reason when derive misbehaved.  first: the first node derive made. */
static graft_status check_derived(graft_trace *t, const graft_module *m, int n_params,
                                  graft_value *const *params, graft_status cb, uint32_t first) {
  const char *name = m->name, *scope = m->scope;
  if (cb && graft__status_is_error(cb))
    return fail(t, cb, "derive of deferred module '%s' (scope '%s') returned %s", name, scope,
                graft_status_name(cb));
  if (cb)
    return fail(t, GRAFT__STATUS_FOREIGN, "derive of deferred module '%s' (scope '%s') returned "
                "%d, which is not a graft_status error code (reported as %s)", name, scope,
                (int)cb, graft_status_name(GRAFT__STATUS_FOREIGN));
  for (int i = 0; i < n_params; i++) {
    switch (graft__trace_value(t, params[i], NULL)) {
    case GRAFT__VALUE_NODE: continue;
    case GRAFT__VALUE_NULL:
      return fail(t, GRAFT_EINVAL, "derive of deferred module '%s' (scope '%s') left params[%d] "
                  "of %d unset (expected a value of this trace in each)", name, scope, i, n_params);
    case GRAFT__VALUE_POISON:
      return fail(t, GRAFT_EMISUSE, "derive of deferred module '%s' (scope '%s') stored in "
                  "params[%d] the poison value of another (failed) trace", name, scope, i);
    case GRAFT__VALUE_FOREIGN:
      return fail(t, GRAFT_EMISUSE, "derive of deferred module '%s' (scope '%s') stored in "
                  "params[%d] a value of another trace, or of one that ended (values are valid "
                  "only in the callback that made them)", name, scope, i);
    }
  }
  /* Derived values are a pure function of the variables: an assignment
   * would run once per trace, or again after each later assignment. */
  for (uint32_t id = first; id < t->g->n_nodes; id++) {
    const graft__node *n = graft__graph_node(t->g, id);
    graft_variable *const *vars;
    if (n->op != GRAFT__OP_ASSIGN && n->op != GRAFT__OP_UPDATE) continue;
    graft__node_writes(n, &vars);
    return fail(t, GRAFT_EMISUSE, "derive of deferred module '%s' (scope '%s') assigned variable "
                "'%s' (op #%u; expected derive to only read variables and compute: assign "
                "before or after graft_deferred_params)", name, scope, vars[0]->name, id);
  }
  return GRAFT_OK;
}

/* Run m's derive into entry ei of t's cache. */
static graft_status derive_into(graft_trace *t, graft_module *m, const deferred *d,
                                int64_t ei) {
  struct graft__deferred_cache *c = t->deferred;
  if (c->depth >= MAX_DEPTH)
    return fail(t, GRAFT_EUNSUPPORTED, "deferred module '%s' (scope '%s') is derived from "
                "deferred modules nested more than %d deep", m->name, m->scope, MAX_DEPTH);
  graft_value **params = graft__calloc((size_t)d->n_params, sizeof *params);
  uint32_t *ids = graft__malloc((size_t)d->n_params * sizeof *ids);
  if (!params || !ids) {
    graft__free(params);
    graft__free(ids);
    return fail(t, GRAFT_ENOMEM, "out of memory deriving deferred module '%s'", m->name);
  }
  c->e[ei].state = ENTRY_DERIVING;
  c->chain[c->depth++] = m;
  uint32_t first = t->g->n_nodes;
  graft_status cb = d->derive(t, m, d->n_params, params, d->user);
  c->depth--;
  /* derive may have grown the cache (modules it derives from). */
  entry *e = &c->e[ei];
  e->state = ENTRY_STALE;
  graft_status st = t->status;
  if (st && strncmp(t->msg, API ":", sizeof API) != 0) {
    /* An op of derive failed the trace: the message says what, and now
     * also in which derive (a refusal of graft_deferred_params inside
     * says so itself, so nested derives do not stack prefixes that would
     * push the reason out of the message). */
    char inner[GRAFT__MSG_LEN], chain[256] = "";
    memcpy(inner, t->msg, sizeof inner);
    if (c->depth > 0) {
      char path[240];
      chain_str(c, m, path, sizeof path);
      snprintf(chain, sizeof chain, "; derive chain %s", path);
    }
    graft__msgf(t->msg, API ": derive of deferred module '%s' (scope '%s'%s) failed: %s", m->name,
                m->scope, chain, inner);
  } else if (!st) {
    st = check_derived(t, m, d->n_params, params, cb, first);
  }
  dep_walk w = {0};
  if (!st) {
    for (int i = 0; i < d->n_params; i++) ids[i] = graft__value_id(params[i]);
    if (walk_deps(t, ids, d->n_params, &w))
      st = fail(t, GRAFT_ENOMEM, "out of memory deriving deferred module '%s'", m->name);
    else
      st = check_tracked(t, m, &w);
  }
  graft__free(params);
  if (st) {
    graft__free(ids);
    dep_walk_free(&w);
    return st;
  }
  entry_clear(e);
  e->params = ids;
  e->deps = w.deps;
  e->n_deps = w.n_deps;
  e->state = ENTRY_READY;
  w.deps = NULL;
  dep_walk_free(&w);
  return GRAFT_OK;
}

GRAFT_API graft_status graft_deferred_params(graft_trace *t, graft_module *m, int n,
                                             graft_value **out) {
  if (out)
    for (int i = 0; i < n; i++) out[i] = GRAFT__POISON;
  if (!t)
    return graft__fail(GRAFT_EINVAL, API ": t is NULL (expected the trace of the running "
                       "callback)");
  if (t->status) return t->status;
  const deferred *d = deferred_of(m);
  if (!m) return fail(t, GRAFT_EINVAL, "m is NULL (expected a deferred module)");
  if (!d)
    return fail(t, GRAFT_EINVAL, "module '%s' (scope '%s') is not a deferred module (expected "
                "one made by graft_deferred_create)", m->name, m->scope);
  if (n != d->n_params)
    return fail(t, GRAFT_EINVAL, "deferred module '%s' (scope '%s') derives %d values; n is %d "
                "(expected n = %d)", m->name, m->scope, d->n_params, n, d->n_params);
  if (!out)
    return fail(t, GRAFT_EINVAL, "out is NULL for deferred module '%s' (scope '%s') (expected an "
                "array of its %d values)", m->name, m->scope, d->n_params);
  int64_t ei = entry_index(t, m, d);
  if (ei < 0) return fail(t, GRAFT_ENOMEM, "out of memory for deferred module '%s'", m->name);
  struct graft__deferred_cache *c = t->deferred;
  if (c->e[ei].state == ENTRY_DERIVING) {
    char chain[256];
    chain_str(c, m, chain, sizeof chain);
    return fail(t, GRAFT_EMISUSE, "deferred module '%s' (scope '%s') is asked for its values while "
                "it derives them (%s): derive recurses or deferred modules derive from each other "
                "in a cycle (expected each to derive only from others)", m->name, m->scope, chain);
  }
  if (c->e[ei].state != ENTRY_READY || !entry_current(t, &c->e[ei])) {
    graft_status st = derive_into(t, m, d, ei);
    if (st) return st;
  }
  const entry *e = &t->deferred->e[ei];
  for (int i = 0; i < n; i++) out[i] = graft__value(t->g, e->params[i]);
  return GRAFT_OK;
}
