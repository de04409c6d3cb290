/* The `module` fuzz target: one input is a program of calls to the module
 * API (graft/module.h, graft/checkpoint.h, graft_optimizer_create) on a
 * small pool of modules and variables.  The harness keeps its own model of
 * the trees (plain arrays: each module's name, scope, variables and
 * submodules under their attributes in order, the caller's holds, what each
 * optimizer holds, every variable's bytes) and checks every result against
 * it; after each call it checks every live module (name, scope and the
 * three each-once walks) and every live variable's bytes.
 *
 * Input: a stream of ops, each an op byte (mod OP_COUNT) and its operands
 * (module_seeds.c writes them):
 *   CREATE   parent name variant         graft_module_create (variant 1:
 *                                        out NULL)
 *   ATTACH   parent attr child           graft_module_attach
 *   VAR      owner name dtype rank dims dims_mode flags init
 *                                        graft_variable_create
 *   VAR_DESTROY var                      graft_variable_destroy (a caller's
 *                                        variable, or a module's: misuse)
 *   DESTROY  module                      graft_module_destroy (a root, or
 *                                        a held module: misuse)
 *   WALKS    module variant              variables / trainable variables /
 *                                        submodules with every cap, or a
 *                                        misuse (NULL m, NULL n, cap < 0,
 *                                        out NULL)
 *   FLATTEN  module variant status       every path, or a visit that stops
 *                                        the walk, NULL visit or m
 *   PRINT    module variant              into a memory stream (each path,
 *                                        its dtype, shape, sizes and the
 *                                        totals), a read-only stream (EIO),
 *                                        NULL f or m
 *   OPTIM    parent name kind lr lr_var momentum betas eps wd clip n vars
 *                                        graft_optimizer_create
 *   SAVE_LOAD a b mode                   save a; load it back into a after
 *                                        changing its bytes, or into b
 *                                        (strictly or not), or a bad path
 *   SET      var mode seed               graft_variable_set
 *   ARM      k                           the k-th allocation of the next
 *                                        op's call fails (budget.h)
 * Handles are picked among the live ones (a module or variable the model
 * holds to be freed is never touched again).  At the end every root and
 * caller's variable is destroyed, and the bytes live in graft's allocator
 * must be back where they were.
 *
 * Findings (fz_die), besides what the sanitizers report: a status the
 * documentation does not give for the case, GRAFT_ENOMEM without a refused
 * allocation, a failure whose graft_last_errmsg() does not name the call;
 * a failed call that changed anything; a name, scope, walk, path, summary
 * or checkpoint that differs from the model; memory left allocated.
 *
 *   DEFERRED parent name n_params variant n vars
 *                                        graft_deferred_create over pool
 *                                        variables (derive: the sum of
 *                                        every element they hold, plus the
 *                                        first value of each deferred
 *                                        module attached to it)
 *   DEFERRED_CALL module mode var seed   a function that takes a deferred
 *                                        module's values twice in its
 *                                        trace, called; mode 1: a variable
 *                                        set, then a second call (new
 *                                        values, no retrace) */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "budget.h"
#include "fuzz.h"
#include "graft.h"
#include "graft/checkpoint.h"
#include "graft/optim.h"
#include "module_target.h"
#include "reader.h"

#define MAXM 32          /* modules in the model at once */
#define MAXV 64          /* variables */
#define MAXE 24          /* variables, and submodules, per module */
#define MAX_RANK 4
#define MAX_BYTES 2048   /* 4^4 elements of 8 bytes */
#define PATH_CAP 512     /* flatten, print and checkpoints only below this many paths */
#define NAME_MAX_ 63     /* module.h: names of at most 63 characters */
/* The last error left before each checked call (poison_last_error). */
#define POISON "graft_tensor_create: rank -1"

/* ---- the model ----------------------------------------------------------- */

enum { E_OWNED, E_TRACKED, E_MODULE };

typedef struct sentry {
  char *attr;
  int idx; /* a variable (E_OWNED, E_TRACKED) or a module */
} sentry;

typedef struct smod {
  int live;
  graft_module *h;
  char *name, *scope;
  int caller_holds;
  sentry vars[MAXE];
  int var_kind[MAXE];
  int n_vars;
  sentry kids[MAXE];
  int n_kids;
  int held[MT_MAX_OPT_VARS]; /* an optimizer's variables (held, not walked) */
  int n_held;
  int n_params;              /* a deferred module's (0: not one) */
} smod;

typedef struct svar {
  int live;
  graft_variable *h;
  char *name;
  graft_dtype dt;
  int rank;
  int64_t dims[MAX_RANK];
  int64_t bytes_n;
  unsigned flags;
  int owned;        /* created in a module: graft_variable_destroy refuses it */
  int caller_holds; /* created without an owner and not destroyed yet */
  int destroyed;    /* its owner gave it up (memory still held by someone) */
  uint8_t bytes[MAX_BYTES];
} svar;

static smod mods[MAXM];
static svar vars[MAXV];

static int verbose;
static char tmp_dir[64];
static char long63[NAME_MAX_ + 1], long64[NAME_MAX_ + 2];

/* What the replayed corpus reached (fz_target_check). */
enum {
  R_CREATE_OK, R_CREATE_NUMBERED, R_CREATE_BAD, R_ATTACH_OK, R_ATTACH_SHARED, R_ATTACH_LIST,
  R_ATTACH_BAD, R_CYCLE, R_VAR_OK, R_VAR_BAD, R_VAR_DESTROY, R_VAR_MISUSE, R_DESTROY_FREES,
  R_DESTROY_KEEPS, R_DESTROY_MISUSE, R_WALKS, R_FLATTEN, R_FLATTEN_STOP, R_PRINT, R_PRINT_EIO,
  R_OPT_OK, R_OPT_BAD, R_ROUNDTRIP, R_LOAD_OTHER_OK, R_LOAD_OTHER_FAIL, R_LOAD_NONSTRICT,
  R_SAVE_BAD, R_SET_OK, R_SET_BAD, R_ENOMEM, R_DEFERRED_OK, R_DEFERRED_BAD, R_DEFERRED_CALL,
  R_DEFERRED_STALE, R_COUNT
};
static const char *const reached_name[R_COUNT] = {
    "a module created", "a sibling numbered", "a bad module name refused", "an attachment",
    "a module held by two parents", "a list slot", "a bad or taken attribute refused",
    "a cycle refused", "a variable created", "a bad variable refused", "a variable destroyed",
    "a module's variable destroy refused", "a destroy that frees", "a destroy that leaves a shared "
    "module alive", "a held module's destroy refused", "the walks", "a flatten", "a flatten stopped "
    "by visit", "a summary", "a summary to a read-only stream", "an optimizer created",
    "bad optimizer options refused", "a checkpoint round trip", "a load into another tree",
    "a load into another tree refused", "a non-strict load", "a save to a bad path refused",
    "graft_variable_set", "graft_variable_set refused", "an allocation failure",
    "a deferred module created", "a bad deferred module refused", "a deferred module's values "
    "called", "a call of a deferred module over a destroyed variable refused"};
static int reached[R_COUNT];

/* ---- small helpers ------------------------------------------------------- */

#define LOG(...)                          \
  do {                                    \
    if (verbose) fprintf(stderr, __VA_ARGS__); \
  } while (0)

static char *xstrdup(const char *s) {
  char *p = strdup(s);
  if (!p) fz_die("harness: out of memory");
  return p;
}

static int is_ident_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_ident_char(int c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

/* s[0, n) is a C identifier. */
static int is_ident(const char *s, size_t n) {
  if (n == 0 || !is_ident_start((unsigned char)s[0])) return 0;
  for (size_t i = 1; i < n; i++)
    if (!is_ident_char((unsigned char)s[i])) return 0;
  return 1;
}

/* module.h: a name is a C identifier of at most 63 characters. */
static int valid_name(const char *s) { return s && strlen(s) <= NAME_MAX_ && is_ident(s, strlen(s)); }

/* module.h: an attribute is a name, or a name and a list index "[k]":
 * decimal, 0 to INT_MAX, no leading zeros. */
static int valid_attr(const char *s) {
  if (!s) return 0;
  size_t n = strcspn(s, "[");
  if (n > NAME_MAX_ || !is_ident(s, n)) return 0;
  if (!s[n]) return 1;
  const char *d = s + n + 1;
  size_t nd = 0;
  uint64_t k = 0;
  while (d[nd] >= '0' && d[nd] <= '9') {
    if (k <= (uint64_t)INT_MAX) k = 10 * k + (uint64_t)(d[nd] - '0');
    nd++;
  }
  return nd >= 1 && (nd == 1 || d[0] != '0') && k <= (uint64_t)INT_MAX && d[nd] == ']' && !d[nd + 1];
}

/* attr (valid) names nothing in m yet: no entry under its identifier, no
 * entry in the same slot, and for a plain name no list of that name. */
static int taken(const smod *m, const char *attr) {
  size_t id = strcspn(attr, "[");
  int slot = attr[id] == '[';
  for (int pass = 0; pass < 2; pass++) {
    const sentry *es = pass ? m->kids : m->vars;
    int n = pass ? m->n_kids : m->n_vars;
    for (int i = 0; i < n; i++) {
      const char *a = es[i].attr;
      size_t eid = strcspn(a, "[");
      int eslot = a[eid] == '[';
      int same_id = eid == id && !memcmp(a, attr, id);
      if (same_id && (!eslot || !slot)) return 1;
      if (slot && !strcmp(a, attr)) return 1;
    }
  }
  return 0;
}

/* The name a module created as name under p gets (module.h): name, else
 * the first of name_1, name_2, ... that no attribute of p holds. */
static void unique_name(const smod *p, const char *name, char *out, size_t len) {
  snprintf(out, len, "%s", name);
  for (unsigned k = 1; taken(p, out); k++) snprintf(out, len, "%s_%u", name, k);
}

static int64_t numel_of(const svar *v) {
  int64_t n = 1;
  for (int i = 0; i < v->rank; i++) n *= v->dims[i];
  return n;
}

static size_t dtype_bytes(graft_dtype dt) { return dt == GRAFT_F64 ? 8 : 4; }

/* A documented status: one of want (0-terminated list holds OK too, as
 * GRAFT_OK = 0 cannot end it: n gives the count), or ENOMEM after a
 * refused allocation; a failure must leave a message naming api. */
static void check_status_named(const char *api, const char *named, graft_status st,
                               const graft_status *want, int n, int64_t refused) {
  int ok = 0;
  for (int i = 0; i < n; i++) ok |= st == want[i];
  if (st == GRAFT_ENOMEM && refused) ok = 1;
  if (!ok) {
    char w[256] = "";
    for (int i = 0; i < n; i++)
      snprintf(w + strlen(w), sizeof w - strlen(w), "%s%s", i ? "/" : "", graft_status_name(want[i]));
    fz_die("%s returned %s (%s), expected %s%s", api, graft_status_name(st), graft_last_errmsg(), w,
           refused ? " or GRAFT_ENOMEM" : " (no allocation was refused)");
  }
  /* named NULL: a call whose message is its function's (graft_function_call
   * reports the failing op), any message but the poison */
  const char *msg = graft_last_errmsg();
  if (st != GRAFT_OK && (named ? !strstr(msg, named) : !*msg || strstr(msg, POISON)))
    fz_die("%s failed (%s) and graft_last_errmsg() is '%s'", api, graft_status_name(st),
           graft_last_errmsg());
  if (st == GRAFT_ENOMEM) reached[R_ENOMEM] = 1;
}

static void check_status(const char *api, graft_status st, const graft_status *want, int n,
                         int64_t refused) {
  check_status_named(api, api, st, want, n, refused);
}

/* A status list builder: the statuses whose condition holds. */
typedef struct want_set {
  graft_status s[8];
  int n;
} want_set;

static void want_if(want_set *w, int cond, graft_status s) {
  if (cond && w->n < 8) w->s[w->n++] = s;
}

/* A last error that no checked call writes, so a failure that sets none
 * shows. */
static void poison_last_error(void) {
  graft_tensor *t = NULL;
  if (graft_tensor_create(GRAFT_F32, -1, NULL, &t) != GRAFT_EINVAL || !strstr(graft_last_errmsg(), POISON))
    fz_die("harness: poison failed");
}

/* ---- allocation failures: ARM makes the next op's call fail one allocation */

static int64_t pending_fail, refusals_at;

static void arm(void) {
  poison_last_error();
  fz_budget_fail_nth(pending_fail);
  pending_fail = 0;
  refusals_at = fz_budget_refusals();
}

static int64_t disarm(void) {
  fz_budget_fail_nth(0);
  return fz_budget_refusals() - refusals_at;
}

/* ---- the model's walks ------------------------------------------------------ */

static int mod_of(const graft_module *h) {
  for (int i = 0; i < MAXM; i++)
    if (mods[i].live && mods[i].h == h) return i;
  return -1;
}

static int var_of(const graft_variable *h) {
  for (int i = 0; i < MAXV; i++)
    if (vars[i].live && vars[i].h == h) return i;
  return -1;
}

/* Depth-first, pre-order, each module once: list m's own (tracked too),
 * then enter each submodule not entered yet. */
static void expect_vars_rec(int m, unsigned need, uint8_t *seen_m, uint8_t *seen_v, int *out, int *n) {
  const smod *x = &mods[m];
  for (int i = 0; i < x->n_vars; i++) {
    int v = x->vars[i].idx;
    if (seen_v[v]) continue;
    seen_v[v] = 1;
    if ((vars[v].flags & need) == need) out[(*n)++] = v;
  }
  for (int i = 0; i < x->n_kids; i++) {
    int k = x->kids[i].idx;
    if (seen_m[k]) continue;
    seen_m[k] = 1;
    expect_vars_rec(k, need, seen_m, seen_v, out, n);
  }
}

static int expect_vars(int m, unsigned need, int *out) {
  uint8_t seen_m[MAXM] = {0}, seen_v[MAXV] = {0};
  int n = 0;
  seen_m[m] = 1;
  expect_vars_rec(m, need, seen_m, seen_v, out, &n);
  return n;
}

static int expect_submodules(int m, int *out) {
  uint8_t seen[MAXM] = {0};
  int q[MAXM], qn = 1, n = 0;
  q[0] = m;
  seen[m] = 1;
  for (int head = 0; head < qn; head++)
    for (int i = 0; i < mods[q[head]].n_kids; i++) {
      int k = mods[q[head]].kids[i].idx;
      if (seen[k]) continue;
      seen[k] = 1;
      out[n++] = k;
      q[qn++] = k;
    }
  return n;
}

/* from holds to (or is it); seen: modules already searched. */
static int reaches_from(int from, int to, uint8_t *seen) {
  if (from == to) return 1;
  if (seen[from]) return 0;
  seen[from] = 1;
  for (int i = 0; i < mods[from].n_kids; i++)
    if (reaches_from(mods[from].kids[i].idx, to, seen)) return 1;
  return 0;
}

static int reaches(int from, int to) {
  uint8_t seen[MAXM] = {0};
  return reaches_from(from, to, seen);
}

/* The paths below m that a flatten goes through, to variables and to
 * modules (a walk of shared modules without variables can be long too),
 * saturated at PATH_CAP; memo: -1 where not counted yet. */
static int64_t paths_below(int m, int64_t *memo) {
  if (memo[m] >= 0) return memo[m];
  int64_t n = mods[m].n_vars;
  for (int i = 0; i < mods[m].n_kids && n < PATH_CAP; i++) n += 1 + paths_below(mods[m].kids[i].idx, memo);
  return memo[m] = n < PATH_CAP ? n : PATH_CAP;
}

static int64_t path_count(int m) {
  int64_t memo[MAXM];
  for (int i = 0; i < MAXM; i++) memo[i] = -1;
  return paths_below(m, memo);
}

/* Every path of m, in flatten's order. */
typedef struct path_list {
  char **path;
  int *var;
  int n, cap;
} path_list;

static void paths_add(path_list *p, const char *s, int v) {
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 16;
    p->path = realloc(p->path, (size_t)p->cap * sizeof *p->path);
    p->var = realloc(p->var, (size_t)p->cap * sizeof *p->var);
    if (!p->path || !p->var) fz_die("harness: out of memory");
  }
  p->path[p->n] = xstrdup(s);
  p->var[p->n++] = v;
}

static void paths_free(path_list *p) {
  for (int i = 0; i < p->n; i++) free(p->path[i]);
  free(p->path);
  free(p->var);
  memset(p, 0, sizeof *p);
}

static void expect_paths_rec(int m, const char *prefix, path_list *out) {
  const smod *x = &mods[m];
  size_t pl = strlen(prefix);
  for (int i = 0; i < x->n_vars; i++) {
    char *s = malloc(pl + strlen(x->vars[i].attr) + 1);
    if (!s) fz_die("harness: out of memory");
    memcpy(s, prefix, pl);
    strcpy(s + pl, x->vars[i].attr);
    paths_add(out, s, x->vars[i].idx);
    free(s);
  }
  for (int i = 0; i < x->n_kids; i++) {
    char *s = malloc(pl + strlen(x->kids[i].attr) + 2);
    if (!s) fz_die("harness: out of memory");
    memcpy(s, prefix, pl);
    strcpy(s + pl, x->kids[i].attr);
    strcat(s, ".");
    expect_paths_rec(x->kids[i].idx, s, out);
    free(s);
  }
}

/* ---- liveness: what a destroy frees --------------------------------------------
 * Without cycles a reference count reaches 0 exactly when nothing live
 * holds the object: modules live while a caller's root reaches them,
 * variables while the caller holds them or a live module holds them
 * (owned, tracked, or among an optimizer's). */

static void mark(int m, uint8_t *on) {
  if (on[m]) return;
  on[m] = 1;
  for (int i = 0; i < mods[m].n_kids; i++) mark(mods[m].kids[i].idx, on);
}

static void drop_module(int m) {
  smod *x = &mods[m];
  for (int i = 0; i < x->n_vars; i++) free(x->vars[i].attr);
  for (int i = 0; i < x->n_kids; i++) free(x->kids[i].attr);
  free(x->name);
  free(x->scope);
  memset(x, 0, sizeof *x);
}

static void update_liveness(void) {
  uint8_t on[MAXM] = {0};
  for (int m = 0; m < MAXM; m++)
    if (mods[m].live && mods[m].caller_holds) mark(m, on);
  for (int m = 0; m < MAXM; m++) {
    if (!mods[m].live || on[m]) continue;
    LOG("  model: module '%s' freed\n", mods[m].scope);
    for (int i = 0; i < mods[m].n_vars; i++)
      if (mods[m].var_kind[i] == E_OWNED) vars[mods[m].vars[i].idx].destroyed = 1;
    drop_module(m);
  }
  uint8_t held[MAXV] = {0};
  for (int m = 0; m < MAXM; m++) {
    if (!mods[m].live) continue;
    for (int i = 0; i < mods[m].n_vars; i++) held[mods[m].vars[i].idx] = 1;
    for (int i = 0; i < mods[m].n_held; i++) held[mods[m].held[i]] = 1;
  }
  for (int v = 0; v < MAXV; v++)
    if (vars[v].live && !vars[v].caller_holds && !held[v]) {
      LOG("  model: variable '%s' freed\n", vars[v].name);
      free(vars[v].name);
      memset(&vars[v], 0, sizeof vars[v]);
    }
}

/* ---- checking graft against the model ------------------------------------------- */

typedef graft_status (*var_walk_fn)(const graft_module *, int64_t, graft_variable **, int64_t *);

/* A variable walk gives want[0, n): counted, in full, and cut short. */
static void check_var_walk(const char *api, var_walk_fn walk, int m, const int *want, int n) {
  graft_variable *got[MAXV + 1];
  int64_t count = -1;
  graft_status st = walk(mods[m].h, 0, NULL, &count);
  if (st || count != n)
    fz_die("%s('%s') counts %lld (%s), the model %d", api, mods[m].scope, (long long)count,
           graft_status_name(st), n);
  for (int cap = n; cap >= 0; cap = cap ? cap / 2 : -1) {
    got[cap] = (graft_variable *)got; /* must stay untouched */
    st = walk(mods[m].h, cap, got, &count);
    if (st || count != n)
      fz_die("%s('%s', cap %d) gives %lld (%s), the model %d", api, mods[m].scope, cap,
             (long long)count, graft_status_name(st), n);
    for (int i = 0; i < cap; i++)
      if (got[i] != vars[want[i]].h) {
        int g = var_of(got[i]);
        fz_die("%s('%s'): variable %d is %s, the model's '%s'", api, mods[m].scope, i,
               g >= 0 ? vars[g].name : "not a live variable", vars[want[i]].name);
      }
    if (got[cap] != (graft_variable *)got) fz_die("%s('%s', cap %d) wrote past cap", api, mods[m].scope, cap);
  }
}

static void check_submodules(int m) {
  int want[MAXM];
  int n = expect_submodules(m, want);
  graft_module *got[MAXM + 1];
  int64_t count = -1;
  graft_status st = graft_module_submodules(mods[m].h, 0, NULL, &count);
  if (st || count != n)
    fz_die("graft_module_submodules('%s') counts %lld (%s), the model %d", mods[m].scope,
           (long long)count, graft_status_name(st), n);
  for (int cap = n; cap >= 0; cap = cap ? cap / 2 : -1) {
    got[cap] = (graft_module *)got;
    st = graft_module_submodules(mods[m].h, cap, got, &count);
    if (st || count != n) fz_die("graft_module_submodules('%s', cap %d) failed", mods[m].scope, cap);
    for (int i = 0; i < cap; i++)
      if (got[i] != mods[want[i]].h) {
        int g = mod_of(got[i]);
        fz_die("graft_module_submodules('%s'): module %d is '%s', the model's '%s' (breadth first)",
               mods[m].scope, i, g >= 0 ? mods[g].scope : "not a live module", mods[want[i]].scope);
      }
    if (got[cap] != (graft_module *)got) fz_die("graft_module_submodules wrote past cap");
  }
}

static void check_module(int m) {
  const smod *x = &mods[m];
  const char *name = graft_module_name(x->h), *scope = graft_module_scope(x->h);
  if (!name || strcmp(name, x->name) || !scope || strcmp(scope, x->scope))
    fz_die("module '%s' (scope '%s') is named '%s', scope '%s'", x->name, x->scope,
           name ? name : "(NULL)", scope ? scope : "(NULL)");
  int want[MAXV];
  int n = expect_vars(m, 0, want);
  check_var_walk("graft_module_variables", graft_module_variables, m, want, n);
  n = expect_vars(m, GRAFT_VAR_TRAINABLE, want);
  check_var_walk("graft_module_trainable_variables", graft_module_trainable_variables, m, want, n);
  check_submodules(m);
}

static void check_variable(int v) {
  const svar *x = &vars[v];
  const graft_tensor *t = graft_variable_value(x->h);
  const char *name = graft_variable_name(x->h);
  if (!name || strcmp(name, x->name)) fz_die("variable '%s' is named '%s'", x->name, name ? name : "(NULL)");
  if (graft_variable_flags(x->h) != x->flags)
    fz_die("variable '%s' has flags %u, created with %u", x->name, graft_variable_flags(x->h), x->flags);
  if (!t || graft_tensor_dtype(t) != x->dt || graft_tensor_rank(t) != x->rank ||
      (x->rank && memcmp(graft_tensor_shape(t), x->dims, (size_t)x->rank * sizeof(int64_t))))
    fz_die("variable '%s' changed its dtype or shape", x->name);
  if (x->bytes_n && memcmp(graft_tensor_data(t), x->bytes, (size_t)x->bytes_n))
    fz_die("variable '%s' holds other bytes than the model's", x->name);
}

/* Everything live against the model. */
static void check_all(void) {
  for (int m = 0; m < MAXM; m++)
    if (mods[m].live) check_module(m);
  for (int v = 0; v < MAXV; v++)
    if (vars[v].live) check_variable(v);
}

/* ---- picking operands -------------------------------------------------------------- */

static int live_mods(int *out) {
  int n = 0;
  for (int m = 0; m < MAXM; m++)
    if (mods[m].live) out[n++] = m;
  return n;
}

/* A live module, or -1 (none live, or the byte says NULL: 255). */
static int pick_module(fz_reader *r) {
  int l[MAXM], n = live_mods(l);
  unsigned b = fz_u8(r);
  return n && b != 255 ? l[b % (unsigned)n] : -1;
}

/* A parent: 0 (the default) is NULL, a root. */
static int pick_parent(fz_reader *r) {
  int l[MAXM], n = live_mods(l);
  unsigned b = fz_u8(r);
  return n && b ? l[(b - 1) % (unsigned)n] : -1;
}

static int pick_var(fz_reader *r) {
  int l[MAXV], n = 0;
  for (int v = 0; v < MAXV; v++)
    if (vars[v].live) l[n++] = v;
  unsigned b = fz_u8(r);
  return n && b != 255 ? l[b % (unsigned)n] : -1;
}

static int free_mod_slot(void) {
  for (int m = 0; m < MAXM; m++)
    if (!mods[m].live) return m;
  return -1;
}

static int free_var_slot(void) {
  for (int v = 0; v < MAXV; v++)
    if (!vars[v].live) return v;
  return -1;
}

static const char *const dict[] = {"w", "b", "enc", "dec", "layer", "x", "layers", "step",
                                   "lr", "m", "w_1", "_", "head", "v"};
#define N_DICT (sizeof dict / sizeof dict[0])

/* A name: mostly from a small dictionary (so names repeat), else a bad
 * one or bytes from the stream.  buf holds 80 bytes. */
static const char *decode_name(fz_reader *r, char *buf) {
  unsigned b = fz_u8(r);
  switch (b) {
  case MT_NAME_EMPTY: return "";
  case MT_NAME_DIGIT: return "9lives";
  case MT_NAME_LONG64: return long64;
  case MT_NAME_LONG63: return long63;
  case MT_NAME_UTF8: return "caf\xc3\xa9";
  case MT_NAME_DOT: return "a.b";
  case MT_NAME_SLOT: return "l[0]";
  case MT_NAME_NULL: return NULL;
  case MT_NAME_SPACE: return "a b";
  case MT_NAME_STREAM: {
    int n = (int)fz_pick(r, 72);
    for (int i = 0; i < n; i++) {
      unsigned c = fz_u8(r);
      buf[i] = (char)(c ? c : 'a');
    }
    buf[n] = '\0';
    return buf;
  }
  default: return dict[b % N_DICT];
  }
}

/* An attribute of parent p (-1: none): a dictionary name, a list slot, a
 * bad one, or one p already holds. */
static const char *decode_attr(fz_reader *r, int p, char *buf) {
  static const char *const lists[] = {"layers", "blocks", "w"};
  static const long long idx[] = {0, 1, 2, 3, 7, 10, INT_MAX};
  static const char *const bad[] = {"layers[x]", "layers[01]", "layers[2147483648]", "layers[-1]",
                                    "a.b", "", NULL, "layers[3]x", "layers[]", "[3]",
                                    "layers[99999999999]", "9x", "layers[ 1]"};
  unsigned b = fz_u8(r);
  if (b < 128) return dict[b % N_DICT];
  if (b < 192) {
    snprintf(buf, 80, "%s[%lld]", lists[b % 3], idx[fz_pick(r, sizeof idx / sizeof idx[0])]);
    return buf;
  }
  if (b < 192 + sizeof bad / sizeof bad[0]) return bad[b - 192];
  if (b == MT_ATTR_LONG) return long64;
  if (b == MT_ATTR_TAKEN && p >= 0 && mods[p].n_vars + mods[p].n_kids) {
    unsigned i = fz_pick(r, (unsigned)(mods[p].n_vars + mods[p].n_kids));
    return (int)i < mods[p].n_vars ? mods[p].vars[i].attr : mods[p].kids[(int)i - mods[p].n_vars].attr;
  }
  return dict[b % N_DICT];
}

/* ---- ops ------------------------------------------------------------------------------ */

static void add_entry(sentry *es, int *n, const char *attr, int idx) {
  es[*n].attr = xstrdup(attr);
  es[(*n)++].idx = idx;
}

/* The model's module slot m, named uniq under p (-1: a root). */
static void model_module(int m, int p, const char *uniq, graft_module *h) {
  smod *x = &mods[m];
  memset(x, 0, sizeof *x);
  x->live = 1;
  x->h = h;
  x->name = xstrdup(uniq);
  const char *ps = p >= 0 ? mods[p].scope : "";
  x->scope = malloc(strlen(ps) + strlen(uniq) + 2);
  if (!x->scope) fz_die("harness: out of memory");
  sprintf(x->scope, "%s%s/", ps, uniq);
  x->caller_holds = p < 0;
  if (p >= 0) add_entry(mods[p].kids, &mods[p].n_kids, uniq, m);
}

static void op_create(fz_reader *r) {
  char buf[80], uniq[160];
  int p = pick_parent(r);
  const char *name = decode_name(r, buf);
  unsigned variant = fz_u8(r);
  int m = free_mod_slot();
  if (m < 0 || (p >= 0 && mods[p].n_kids >= MAXE)) return;
  int valid = valid_name(name), no_out = variant == 1;
  if (valid) {
    if (p >= 0) unique_name(&mods[p], name, uniq, sizeof uniq);
    else snprintf(uniq, sizeof uniq, "%s", name);
  }
  LOG("create(parent %s, '%s'%s)\n", p >= 0 ? mods[p].scope : "NULL", name ? name : "(NULL)",
      no_out ? ", out NULL" : "");
  graft_module *h = (graft_module *)&h;
  arm();
  graft_status st = graft_module_create(p >= 0 ? mods[p].h : NULL, name, no_out ? NULL : &h);
  int64_t refused = disarm();
  want_set w = {0};
  want_if(&w, valid && !no_out, GRAFT_OK);
  want_if(&w, !valid || no_out, GRAFT_EINVAL);
  check_status("graft_module_create", st, w.s, w.n, refused);
  if (st) {
    if (!no_out && h) fz_die("graft_module_create failed and left *out non-NULL");
    reached[R_CREATE_BAD] |= st == GRAFT_EINVAL;
  } else {
    model_module(m, p, uniq, h);
    reached[R_CREATE_OK] = 1;
    reached[R_CREATE_NUMBERED] |= strcmp(uniq, name) != 0;
    LOG("  -> '%s' scope '%s'\n", mods[m].name, mods[m].scope);
  }
  check_all();
}

static void op_attach(fz_reader *r) {
  char buf[80];
  int p = pick_module(r);
  const char *attr = decode_attr(r, p, buf);
  int c = pick_module(r);
  if (p >= 0 && mods[p].n_kids >= MAXE) return;
  char *attr_copy = attr ? xstrdup(attr) : NULL; /* attr may be an entry's */
  int bad_attr = !valid_attr(attr_copy);
  int cycle = p >= 0 && c >= 0 && reaches(c, p);
  int is_taken = p >= 0 && !bad_attr && taken(&mods[p], attr_copy);
  LOG("attach(%s, '%s', %s)\n", p >= 0 ? mods[p].scope : "NULL", attr_copy ? attr_copy : "(NULL)",
      c >= 0 ? mods[c].scope : "NULL");
  arm();
  graft_status st = graft_module_attach(p >= 0 ? mods[p].h : NULL, attr_copy, c >= 0 ? mods[c].h : NULL);
  int64_t refused = disarm();
  want_set w = {0};
  int handles = p >= 0 && c >= 0;
  want_if(&w, !handles || bad_attr || is_taken, GRAFT_EINVAL);
  want_if(&w, handles && cycle, GRAFT_EMISUSE);
  want_if(&w, !w.n, GRAFT_OK);
  check_status("graft_module_attach", st, w.s, w.n, refused);
  if (!st) {
    int shared = 0;
    for (int m = 0; m < MAXM; m++)
      for (int i = 0; mods[m].live && i < mods[m].n_kids; i++) shared += mods[m].kids[i].idx == c;
    reached[R_ATTACH_SHARED] |= shared >= 1;
    add_entry(mods[p].kids, &mods[p].n_kids, attr_copy, c);
    reached[R_ATTACH_OK] = 1;
    reached[R_ATTACH_LIST] |= strchr(attr_copy, '[') != NULL;
  } else {
    reached[R_ATTACH_BAD] |= st == GRAFT_EINVAL && handles;
    reached[R_CYCLE] |= st == GRAFT_EMISUSE;
  }
  free(attr_copy);
  check_all();
}

/* Element bytes from a seed (f32/f64: small finite values; i32: any). */
static void fill_bytes(uint8_t *b, graft_dtype dt, int64_t numel, unsigned seed) {
  uint64_t s = seed;
  for (int64_t i = 0; i < numel; i++) {
    uint64_t x = fz_mix(&s);
    if (dt == GRAFT_F32) {
      float f = (float)((int)(x % 2001) - 1000) / 8.0f;
      memcpy(b + 4 * i, &f, 4);
    } else if (dt == GRAFT_F64) {
      double d = (double)((int64_t)(x % 200001) - 100000) / 64.0;
      memcpy(b + 8 * i, &d, 8);
    } else {
      int32_t k = (int32_t)(uint32_t)x;
      memcpy(b + 4 * i, &k, 4);
    }
  }
}

static void op_var(fz_reader *r) {
  char buf[80];
  int o = pick_parent(r);
  const char *name = decode_name(r, buf);
  unsigned dtb = fz_u8(r), rb = fz_u8(r);
  int64_t dims[GRAFT_MAX_RANK + 1]; /* a bad rank of 9 may be read as far as that */
  for (int i = 0; i <= GRAFT_MAX_RANK; i++) dims[i] = i < MAX_RANK ? fz_pick(r, 5) : 1;
  unsigned dims_mode = fz_u8(r), flagb = fz_u8(r), init = fz_u8(r);
  graft_dtype dt = dtb % 5 == 3 ? (graft_dtype)3 : dtb % 5 == 4 ? (graft_dtype)-1 : (graft_dtype)(dtb % 5);
  int rank = rb % 7 == 5 ? 9 : rb % 7 == 6 ? -1 : (int)(rb % 7) % 5;
  /* dims_mode: 0 as read; 1 a negative dim; 2 a count past int64; 3 2^40
   * elements (the budget refuses them); 4 an empty shape whose other dims
   * overflow */
  int64_t odd[3] = {0};
  int shape_bad = 0, shape_big = 0;
  const int64_t *shape = dims;
  switch (dims_mode % 8) {
  case 1:
    if (rank > 0 && rank <= MAX_RANK) dims[rank - 1] = -1, shape_bad = 1;
    break;
  case 2: odd[0] = INT64_MAX, odd[1] = 2, rank = 2, shape = odd, shape_bad = 1; break;
  case 3: odd[0] = (int64_t)1 << 40, rank = 1, shape = odd, shape_big = 1; break;
  case 4: odd[0] = 0, odd[1] = INT64_MAX, odd[2] = 4, rank = 3, shape = odd, shape_bad = 1; break;
  default: break;
  }
  unsigned flags = (flagb & 1) | (flagb & 0x80 ? 0x100u : 0u);
  int v = free_var_slot();
  if (v < 0 || (o >= 0 && mods[o].n_vars >= MAXE)) return;
  int dt_ok = dt == GRAFT_F32 || dt == GRAFT_F64 || dt == GRAFT_I32;
  int rank_ok = rank >= 0 && rank <= MAX_RANK;
  int name_ok = name && (o < 0 || (valid_name(name) && !taken(&mods[o], name)));
  svar x = {0};
  x.dt = dt;
  x.rank = rank_ok ? rank : 0;
  if (rank_ok && rank && !shape_bad && !shape_big) memcpy(x.dims, shape, (size_t)rank * sizeof *shape);
  x.bytes_n = dt_ok && rank_ok && !shape_bad && !shape_big ? numel_of(&x) * (int64_t)dtype_bytes(dt) : 0;
  if (init) fill_bytes(x.bytes, dt, x.bytes_n / (int64_t)(dt_ok ? dtype_bytes(dt) : 4), init);
  LOG("variable(owner %s, '%s', dtype %d, rank %d, mode %u, flags %u, init %u)\n",
      o >= 0 ? mods[o].scope : "NULL", name ? name : "(NULL)", (int)dt, rank, dims_mode % 8, flags, init);
  graft_variable *h = (graft_variable *)&h;
  arm();
  graft_status st = graft_variable_create(o >= 0 ? mods[o].h : NULL, name, dt, rank, shape,
                                          init && !shape_big ? x.bytes : NULL, flags, &h);
  int64_t refused = disarm();
  want_set w = {0};
  want_if(&w, !dt_ok, GRAFT_EDTYPE);
  want_if(&w, !rank_ok || shape_bad || !name_ok, GRAFT_EINVAL);
  /* a 2^40-element shape is left to the allocator, which refuses it:
   * GRAFT_ENOMEM with a refusal is the one outcome (check_status) */
  want_if(&w, !w.n && !shape_big, GRAFT_OK);
  check_status("graft_variable_create", st, w.s, w.n, refused);
  if (st) {
    if (h) fz_die("graft_variable_create failed and left *out non-NULL");
    reached[R_VAR_BAD] = 1;
    check_all();
    return;
  }
  const char *scope = o >= 0 ? mods[o].scope : "";
  x.name = malloc(strlen(scope) + strlen(name) + 1);
  if (!x.name) fz_die("harness: out of memory");
  sprintf(x.name, "%s%s", scope, name);
  x.live = 1;
  x.h = h;
  x.flags = flags;
  x.owned = o >= 0;
  x.caller_holds = o < 0;
  vars[v] = x;
  if (o >= 0) {
    mods[o].var_kind[mods[o].n_vars] = E_OWNED;
    add_entry(mods[o].vars, &mods[o].n_vars, name, v);
  }
  reached[R_VAR_OK] = 1;
  check_all();
}

static void op_var_destroy(fz_reader *r) {
  int v = pick_var(r);
  if (v < 0) {
    graft_variable_destroy(NULL); /* a no-op */
    check_all();
    return;
  }
  if (!vars[v].owned && !vars[v].caller_holds) return; /* destroyed already: not the caller's to give */
  LOG("variable_destroy('%s')\n", vars[v].name);
  poison_last_error();
  graft_variable_destroy(vars[v].h);
  if (vars[v].owned) {
    if (!strstr(graft_last_errmsg(), "graft_variable_destroy"))
      fz_die("graft_variable_destroy of module variable '%s' left the message '%s'", vars[v].name,
             graft_last_errmsg());
    reached[R_VAR_MISUSE] = 1;
  } else {
    vars[v].caller_holds = 0;
    vars[v].destroyed = 1;
    update_liveness();
    reached[R_VAR_DESTROY] = 1;
  }
  check_all();
}

static int count_live(void) {
  int n = 0;
  for (int m = 0; m < MAXM; m++) n += mods[m].live;
  return n;
}

static void op_destroy(fz_reader *r) {
  int m = pick_module(r);
  if (m < 0) {
    graft_module_destroy(NULL);
    check_all();
    return;
  }
  LOG("destroy('%s')%s\n", mods[m].scope, mods[m].caller_holds ? "" : " (not the caller's)");
  poison_last_error();
  graft_module_destroy(mods[m].h);
  if (!mods[m].caller_holds) {
    if (!strstr(graft_last_errmsg(), "graft_module_destroy"))
      fz_die("graft_module_destroy of held module '%s' left the message '%s'", mods[m].scope,
             graft_last_errmsg());
    reached[R_DESTROY_MISUSE] = 1;
  } else {
    uint8_t below[MAXM] = {0};
    mark(m, below);
    int before = count_live();
    mods[m].caller_holds = 0;
    update_liveness();
    reached[R_DESTROY_FREES] |= count_live() < before;
    for (int k = 0; k < MAXM; k++) reached[R_DESTROY_KEEPS] |= below[k] && mods[k].live;
  }
  check_all();
}

static void op_walks(fz_reader *r) {
  static const char *const api[3] = {"graft_module_variables", "graft_module_trainable_variables",
                                     "graft_module_submodules"};
  int m = pick_module(r);
  unsigned variant = fz_u8(r);
  if (m < 0) variant = 1 + variant % 4;
  unsigned which = (variant >> 4) % 3;
  LOG("walks(%s, variant %u)\n", m >= 0 ? mods[m].scope : "NULL", variant % 8);
  if (variant % 8 >= 1 && variant % 8 <= 4) {
    /* a misuse: NULL m, NULL n, cap < 0, out NULL with cap > 0 */
    void *out[4];
    int64_t n = 77;
    unsigned k = variant % 8;
    const graft_module *mh = k == 1 || m < 0 ? NULL : mods[m].h;
    int64_t cap = k == 3 ? -1 : k == 4 ? 2 : 4;
    void *outp = k == 4 ? NULL : out;
    int64_t *np = k == 2 ? NULL : &n;
    poison_last_error();
    graft_status st = which == 0   ? graft_module_variables(mh, cap, outp, np)
                      : which == 1 ? graft_module_trainable_variables(mh, cap, outp, np)
                                   : graft_module_submodules(mh, cap, outp, np);
    graft_status want = GRAFT_EINVAL;
    check_status(api[which], st, &want, 1, 0);
    if (np && n != 0) fz_die("%s failed and left *n = %lld", api[which], (long long)n);
    return;
  }
  /* The walks of a small tree allocate nothing (module.h): an armed
   * failure must not make them fail. */
  arm();
  check_module(m);
  int64_t refused = disarm();
  if (refused) fz_die("a walk of module '%s' (%d modules live) allocated", mods[m].scope, count_live());
  reached[R_WALKS] = 1;
}

/* flatten's visit: compares each path with the model's, and stops at
 * stop_at with stop_status. */
typedef struct flat_check {
  const path_list *want;
  int at, stop_at;
  graft_status stop_status;
  const char *scope;
} flat_check;

static graft_status visit_check(const char *path, graft_variable *v, void *user) {
  flat_check *c = user;
  if (c->at >= c->want->n)
    fz_die("graft_module_flatten('%s') visits '%s' past the model's %d paths", c->scope, path, c->want->n);
  if (strcmp(path, c->want->path[c->at]) || v != vars[c->want->var[c->at]].h)
    fz_die("graft_module_flatten('%s'): path %d is '%s' (%s), the model's '%s' (%s)", c->scope, c->at,
           path, var_of(v) >= 0 ? vars[var_of(v)].name : "?", c->want->path[c->at],
           vars[c->want->var[c->at]].name);
  if (c->at++ == c->stop_at) return c->stop_status;
  return GRAFT_OK;
}

static void op_flatten(fz_reader *r) {
  int m = pick_module(r);
  unsigned variant = fz_u8(r), sb = fz_u8(r);
  if (m >= 0 && path_count(m) >= PATH_CAP) return;
  unsigned k = m < 0 ? 3 : variant % 5;
  LOG("flatten(%s, variant %u)\n", m >= 0 ? mods[m].scope : "NULL", k);
  if (k >= 3) {
    poison_last_error();
    graft_status st = graft_module_flatten(k == 3 ? NULL : mods[m].h, k == 3 ? visit_check : NULL, NULL);
    graft_status want = GRAFT_EINVAL;
    check_status("graft_module_flatten", st, &want, 1, 0);
    return;
  }
  path_list want = {0};
  expect_paths_rec(m, "", &want);
  /* variant 1: visit returns a graft_status error at path sb % n, which
   * flatten returns as is; 2: a number that is no status, GRAFT_EINVAL */
  static const graft_status stops[] = {GRAFT_EIO, GRAFT_ECANCELED, GRAFT_EINVAL, GRAFT_ESHAPE};
  flat_check c = {&want, 0, -1, GRAFT_OK, mods[m].scope};
  if (k && want.n) {
    c.stop_at = (int)(sb % (unsigned)want.n);
    c.stop_status = k == 1 ? stops[sb % 4] : (graft_status)(sb % 2 ? 7 : -1000);
  }
  arm();
  graft_status st = graft_module_flatten(mods[m].h, visit_check, &c);
  int64_t refused = disarm();
  if (c.stop_at >= 0) {
    graft_status w = k == 1 ? c.stop_status : GRAFT_EINVAL;
    if (st != w && !(st == GRAFT_ENOMEM && refused))
      fz_die("graft_module_flatten stopped by %d returned %s", (int)c.stop_status, graft_status_name(st));
    if (st == w && c.at != c.stop_at + 1) fz_die("graft_module_flatten went on after visit failed");
    if (k == 2 && st == GRAFT_EINVAL && !strstr(graft_last_errmsg(), "graft_module_flatten"))
      fz_die("graft_module_flatten: visit's %d left the message '%s'", (int)c.stop_status, graft_last_errmsg());
    reached[R_FLATTEN_STOP] = 1;
  } else {
    graft_status w = GRAFT_OK;
    check_status("graft_module_flatten", st, &w, 1, refused);
    if (!st && c.at != want.n)
      fz_die("graft_module_flatten('%s') visits %d paths, the model %d", mods[m].scope, c.at, want.n);
    reached[R_FLATTEN] = 1;
  }
  paths_free(&want);
}

/* Checks a summary against the model: a header, one row per path (path,
 * dtype, the shape's dims, parameters, bytes, yes/no), the totals. */
static void check_summary(int m, const char *text) {
  path_list want = {0};
  expect_paths_rec(m, "", &want);
  const char *line = text, *nl = strchr(line, '\n');
  if (!nl || strncmp(line, "path", 4)) fz_die("graft_module_print: no header line in '%.200s'", text);
  line = nl + 1;
  int64_t params = 0, trainable = 0, bytes = 0;
  for (int i = 0; i < want.n; i++, line = nl + 1) {
    nl = strchr(line, '\n');
    if (!nl) fz_die("graft_module_print('%s'): %d rows, the model %d paths", mods[m].scope, i, want.n);
    char row[8192];
    size_t len = (size_t)(nl - line) < sizeof row - 1 ? (size_t)(nl - line) : sizeof row - 1;
    memcpy(row, line, len);
    row[len] = '\0';
    char *tok[64];
    int nt = 0;
    for (char *s = strtok(row, " "); s && nt < 64; s = strtok(NULL, " ")) tok[nt++] = s;
    const svar *v = &vars[want.var[i]];
    if (nt < 6 || strcmp(tok[0], want.path[i]) || strcmp(tok[1], graft_dtype_name(v->dt)))
      fz_die("graft_module_print('%s'): row %d is '%.*s', the model's path '%s' (%s)", mods[m].scope, i,
             (int)len, line, want.path[i], graft_dtype_name(v->dt));
    int64_t numel = numel_of(v);
    if (strcmp(tok[nt - 1], v->flags & GRAFT_VAR_TRAINABLE ? "yes" : "no") ||
        strtoll(tok[nt - 2], NULL, 10) != v->bytes_n || strtoll(tok[nt - 3], NULL, 10) != numel)
      fz_die("graft_module_print('%s'): row '%.*s': the model has %lld parameters, %lld bytes, %s",
             mods[m].scope, (int)len, line, (long long)numel, (long long)v->bytes_n,
             v->flags & GRAFT_VAR_TRAINABLE ? "trainable" : "not trainable");
    /* the shape: the dims in order, whatever the punctuation */
    int d = 0;
    for (int t = 2; t < nt - 3; t++)
      for (const char *s = tok[t]; *s;) {
        if (*s >= '0' && *s <= '9') {
          char *end;
          long long x = strtoll(s, &end, 10);
          if (d >= v->rank || x != v->dims[d]) fz_die("graft_module_print: row of '%s' has a wrong shape", want.path[i]);
          d++;
          s = end;
        } else {
          s++;
        }
      }
    if (d != v->rank) fz_die("graft_module_print: row of '%s' shows %d dims of %d", want.path[i], d, v->rank);
  }
  int want_vars[MAXV];
  int nv = expect_vars(m, 0, want_vars);
  for (int i = 0; i < nv; i++) {
    const svar *v = &vars[want_vars[i]];
    params += numel_of(v);
    trainable += v->flags & GRAFT_VAR_TRAINABLE ? numel_of(v) : 0;
    bytes += v->bytes_n;
  }
  char total[256];
  snprintf(total, sizeof total, "total: %d paths, %d variables, %lld parameters (%lld trainable), %lld bytes\n",
           want.n, nv, (long long)params, (long long)trainable, (long long)bytes);
  if (strcmp(line, total)) fz_die("graft_module_print('%s') ends with '%s', the model '%s'", mods[m].scope, line, total);
  paths_free(&want);
}

static void op_print(fz_reader *r) {
  int m = pick_module(r);
  unsigned variant = fz_u8(r) % 4;
  if (m < 0) variant = 3;
  if (m >= 0 && path_count(m) >= PATH_CAP) return;
  LOG("print(%s, variant %u)\n", m >= 0 ? mods[m].scope : "NULL", variant);
  if (variant >= 2) { /* NULL f, NULL m */
    poison_last_error();
    graft_status st = graft_module_print(variant == 3 ? NULL : mods[m].h, variant == 3 ? stderr : NULL);
    graft_status want = GRAFT_EINVAL;
    check_status("graft_module_print", st, &want, 1, 0);
    return;
  }
  char *text = NULL;
  size_t size = 0;
  FILE *f = variant == 1 ? fopen("/dev/null", "r") : open_memstream(&text, &size);
  if (!f) fz_die("harness: cannot open a stream: %s", strerror(errno));
  arm();
  graft_status st = graft_module_print(mods[m].h, f);
  int64_t refused = disarm();
  graft_status want = variant == 1 ? GRAFT_EIO : GRAFT_OK;
  check_status("graft_module_print", st, &want, 1, refused);
  if (fclose(f) && variant == 0) fz_die("harness: closing the memory stream");
  if (variant == 0 && !st) check_summary(m, text);
  if (variant == 0 && st && size) fz_die("graft_module_print failed (%s) after writing %zu bytes", graft_status_name(st), size);
  reached[R_PRINT] |= variant == 0 && !st;
  reached[R_PRINT_EIO] |= st == GRAFT_EIO;
  free(text);
  check_all();
}

/* ---- optimizers ------------------------------------------------------------------------- */

/* optim.h: the slot module of a variable is named after it, "model/dense/w"
 * -> "model_dense_w" (characters that cannot be in a name become '_',
 * cut to a name's length; a name cannot start with a digit). */
static void slot_name(const char *var, char *out) {
  size_t j = 0;
  if (!is_ident_start((unsigned char)var[0])) out[j++] = 'v';
  for (size_t i = 0; var[i] && j < NAME_MAX_; i++) out[j++] = is_ident_char((unsigned char)var[i]) ? var[i] : '_';
  out[j] = '\0';
}

static int is_float_var(int v) { return vars[v].dt == GRAFT_F32 || vars[v].dt == GRAFT_F64; }

static double decode_value(fz_reader *r, double valid, int zero_default) {
  switch (fz_u8(r) % 8) {
  case 1: return valid;
  case 2: return 1.0;
  case 3: return -0.5;
  case 4: return NAN;
  case 5: return INFINITY;
  case 6: return zero_default ? 1.5 : 2.0;
  case 7: return 1e-3;
  default: return 0;
  }
}

/* A slot variable of optimizer module m: dtype and shape of like, zeros. */
static int model_slot_var(int m, const char *attr, graft_dtype dt, int rank, const int64_t *dims) {
  int v = free_var_slot();
  if (v < 0) fz_die("harness: no room for an optimizer's variables");
  svar *x = &vars[v];
  memset(x, 0, sizeof *x);
  x->live = 1;
  x->dt = dt;
  x->rank = rank;
  if (rank) memcpy(x->dims, dims, (size_t)rank * sizeof *dims);
  x->bytes_n = numel_of(x) * (int64_t)dtype_bytes(dt);
  x->owned = 1;
  x->name = malloc(strlen(mods[m].scope) + strlen(attr) + 1);
  if (!x->name) fz_die("harness: out of memory");
  sprintf(x->name, "%s%s", mods[m].scope, attr);
  mods[m].var_kind[mods[m].n_vars] = E_OWNED;
  add_entry(mods[m].vars, &mods[m].n_vars, attr, v);
  return v;
}

/* The handles of an optimizer's new modules and variables, read from the
 * walks of it (the model knows their order and names, checked after). */
static void take_handles(int m) {
  int want[MAXV];
  int n = expect_vars(m, 0, want);
  graft_variable *got[MAXV];
  int64_t count;
  if (graft_module_variables(mods[m].h, MAXV, got, &count) || count != n)
    fz_die("optimizer '%s' has %lld variables, the model %d", mods[m].scope, (long long)count, n);
  for (int i = 0; i < n; i++)
    if (!vars[want[i]].h) vars[want[i]].h = got[i];
  int wm[MAXM];
  n = expect_submodules(m, wm);
  graft_module *gm[MAXM];
  if (graft_module_submodules(mods[m].h, MAXM, gm, &count) || count != n)
    fz_die("optimizer '%s' has %lld submodules, the model %d", mods[m].scope, (long long)count, n);
  for (int i = 0; i < n; i++)
    if (!mods[wm[i]].h) mods[wm[i]].h = gm[i];
}

static void op_optim(fz_reader *r) {
  char buf[80], uniq[160];
  int p = pick_parent(r);
  const char *name = decode_name(r, buf);
  unsigned kb = fz_u8(r);
  graft_optimizer_desc d = {0};
  d.kind = kb % 8 == 5 ? (graft_optimizer_kind)5 : kb % 8 == 6 ? (graft_optimizer_kind)-1 : (graft_optimizer_kind)(kb % 8 % 5);
  d.lr = decode_value(r, 0.1, 0);
  unsigned lrv = fz_u8(r);
  int lr_var = lrv & 1 ? pick_var(r) : -1;
  if (lr_var >= 0 && vars[lr_var].destroyed) lr_var = -1;
  d.lr_var = lr_var >= 0 ? vars[lr_var].h : NULL;
  d.momentum = decode_value(r, 0.5, 1);
  d.beta1 = decode_value(r, 0.8, 1);
  d.beta2 = decode_value(r, 0.99, 1);
  d.eps = decode_value(r, 1e-6, 1);
  d.weight_decay = decode_value(r, 0.01, 0);
  d.clip_norm = decode_value(r, 1.0, 0);
  int n = (int)fz_pick(r, MT_MAX_OPT_VARS + 1);
  int vi[MT_MAX_OPT_VARS];
  graft_variable *vh[MT_MAX_OPT_VARS];
  int any_null = 0, any_int = 0, any_repeat = 0, any_destroyed = 0;
  for (int i = 0; i < n; i++) {
    vi[i] = pick_var(r);
    vh[i] = vi[i] >= 0 ? vars[vi[i]].h : NULL;
    any_null |= vi[i] < 0;
    if (vi[i] < 0) continue;
    any_int |= !is_float_var(vi[i]);
    any_destroyed |= vars[vi[i]].destroyed;
    for (int j = 0; j < i; j++) any_repeat |= vi[j] == vi[i];
  }
  unsigned null_vars = fz_u8(r) == 1;
  /* room in the model: the module, one per variable, slots, step */
  int free_m = 0, free_v = 0;
  for (int m = 0; m < MAXM; m++) free_m += !mods[m].live;
  for (int v = 0; v < MAXV; v++) free_v += !vars[v].live;
  if (free_m < n + 1 || free_v < 2 * n + 1 || (p >= 0 && mods[p].n_kids >= MAXE)) return;
  /* optim.h's rules; 0 takes the default */
  int kind_ok = (unsigned)d.kind <= GRAFT_OPT_ADAMW;
  int lr_ok = lr_var >= 0 ? vars[lr_var].rank == 0 && is_float_var(lr_var) : d.lr > 0 && isfinite(d.lr);
  int mom_ok = d.momentum == 0 || (d.momentum > 0 && d.momentum < 1);
  int betas_ok = (d.beta1 == 0 || (d.beta1 > 0 && d.beta1 < 1)) && (d.beta2 == 0 || (d.beta2 > 0 && d.beta2 < 1));
  int eps_ok = d.eps == 0 || (d.eps > 0 && isfinite(d.eps));
  int wd_ok = d.weight_decay >= 0 && isfinite(d.weight_decay);
  int clip_ok = d.clip_norm >= 0 && isfinite(d.clip_norm);
  int uses_mom = d.kind == GRAFT_OPT_MOMENTUM || d.kind == GRAFT_OPT_NESTEROV;
  int uses_betas = d.kind == GRAFT_OPT_ADAM || d.kind == GRAFT_OPT_ADAMW;
  int name_ok = valid_name(name);
  /* Options that the kind does not use may be refused or ignored.  The
   * order of the checks is not documented: a destroyed variable among
   * other mistakes may be reported first, unless the options or the
   * arrays themselves are bad. */
  int desc_bad = !kind_ok || !lr_ok || (uses_mom && !mom_ok) || (uses_betas && (!betas_ok || !eps_ok)) ||
                 !wd_ok || !clip_ok || n < 1 || null_vars;
  int certain_bad = desc_bad || !name_ok || any_null || any_int || any_repeat;
  int maybe_bad = !mom_ok || !betas_ok || !eps_ok;
  LOG("optimizer(parent %s, '%s', kind %d, lr %g, lr_var %s, mom %g, b %g %g, eps %g, wd %g, clip %g, n %d%s)\n",
      p >= 0 ? mods[p].scope : "NULL", name ? name : "(NULL)", (int)d.kind, d.lr,
      lr_var >= 0 ? vars[lr_var].name : "-", d.momentum, d.beta1, d.beta2, d.eps, d.weight_decay,
      d.clip_norm, n, null_vars ? ", vars NULL" : "");
  graft_module *h = (graft_module *)&h;
  arm();
  graft_status st = graft_optimizer_create(p >= 0 ? mods[p].h : NULL, name, &d, n, null_vars ? NULL : vh, &h);
  int64_t refused = disarm();
  want_set w = {0};
  want_if(&w, certain_bad || maybe_bad, GRAFT_EINVAL);
  want_if(&w, !desc_bad && any_destroyed, GRAFT_EMISUSE);
  want_if(&w, !certain_bad && !any_destroyed, GRAFT_OK);
  check_status("graft_optimizer_create", st, w.s, w.n, refused);
  if (st) {
    if (h) fz_die("graft_optimizer_create failed and left *out non-NULL");
    reached[R_OPT_BAD] |= st == GRAFT_EINVAL;
    check_all();
    return;
  }
  /* The model: the optimizer module holds its variables; its own variables
   * are "step" (f64, rank 0) and the tracked "lr"; one submodule per
   * variable, named after it, holds the slots. */
  if (p >= 0) unique_name(&mods[p], name, uniq, sizeof uniq);
  else snprintf(uniq, sizeof uniq, "%s", name);
  int m = free_mod_slot();
  model_module(m, p, uniq, h);
  for (int i = 0; i < n; i++) mods[m].held[mods[m].n_held++] = vi[i];
  model_slot_var(m, "step", GRAFT_F64, 0, NULL);
  if (lr_var >= 0) {
    mods[m].var_kind[mods[m].n_vars] = E_TRACKED;
    add_entry(mods[m].vars, &mods[m].n_vars, "lr", lr_var);
  }
  static const char *const slot_names[3][2] = {{NULL, NULL}, {"momentum", NULL}, {"m", "v"}};
  int ns = d.kind == GRAFT_OPT_SGD ? 0 : uses_mom ? 1 : 2;
  for (int i = 0; i < n; i++) {
    char sn[NAME_MAX_ + 2], su[160];
    slot_name(vars[vi[i]].name, sn);
    unique_name(&mods[m], sn, su, sizeof su);
    int sm = free_mod_slot();
    model_module(sm, m, su, NULL);
    for (int s = 0; s < ns; s++)
      model_slot_var(sm, slot_names[ns][s], vars[vi[i]].dt, vars[vi[i]].rank, vars[vi[i]].dims);
  }
  take_handles(m);
  reached[R_OPT_OK] = 1;
  LOG("  -> '%s'\n", mods[m].scope);
  check_all();
}

/* ---- checkpoints ------------------------------------------------------------------------- */

static char ckpt_path[128], folder_path[128]; /* the checkpoint; a folder (a bad path to save to) */

/* The folder holds only the files named (a save leaves no temporary). */
static void check_dir(int with_ckpt) {
  DIR *d = opendir(tmp_dir);
  if (!d) fz_die("harness: cannot list %s", tmp_dir);
  int found = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    if (!strcmp(e->d_name, "folder")) continue;
    if (!strcmp(e->d_name, "ckpt.safetensors")) {
      found = 1;
      continue;
    }
    fz_die("a save left '%s' in the folder", e->d_name);
  }
  closedir(d);
  if (found != with_ckpt) fz_die("the checkpoint file is %s", found ? "there after a failed save" : "missing");
}

/* Bytes of every variable of the model: the snapshot a failed call must
 * leave as it was is the model itself (check_all). */
static void scribble(const int *vs, int n, unsigned salt) {
  for (int i = 0; i < n; i++) {
    svar *x = &vars[vs[i]];
    uint8_t *data = graft_tensor_data(graft_variable_value(x->h));
    for (int64_t b = 0; b < x->bytes_n; b++) data[b] = x->bytes[b] = (uint8_t)(x->bytes[b] ^ (0x5Au + salt + (unsigned)b));
  }
}

/* What a load of a's file into b must do: the keys are a's paths, holding
 * the bytes of a's variables. */
typedef struct load_plan {
  int ok_strict, ok_loose;        /* a load that succeeds */
  int missing, unexpected, loaded;
  int bad_dtype, bad_shape, conflict;
} load_plan;

static int find_path(const path_list *p, const char *s) {
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->path[i], s)) return i;
  return -1;
}

static load_plan plan_load(const path_list *fa, const path_list *fb, const uint8_t (*file_bytes)[MAX_BYTES]) {
  load_plan pl = {0};
  for (int i = 0; i < fb->n; i++) {
    int k = find_path(fa, fb->path[i]);
    if (k < 0) {
      pl.missing++;
      continue;
    }
    pl.loaded++;
    const svar *va = &vars[fa->var[k]], *vb = &vars[fb->var[i]];
    if (va->dt != vb->dt) pl.bad_dtype = 1;
    else if (va->rank != vb->rank || memcmp(va->dims, vb->dims, sizeof va->dims)) pl.bad_shape = 1;
    /* another key of the same variable of b must hold the same bytes */
    for (int j = 0; j < i && !pl.bad_dtype && !pl.bad_shape; j++) {
      int kj = find_path(fa, fb->path[j]);
      if (fb->var[j] == fb->var[i] && kj >= 0 &&
          memcmp(file_bytes[k], file_bytes[kj], (size_t)vb->bytes_n))
        pl.conflict = 1;
    }
  }
  for (int k = 0; k < fa->n; k++) pl.unexpected += find_path(fb, fa->path[k]) < 0;
  int fits = !pl.bad_dtype && !pl.bad_shape && !pl.conflict;
  pl.ok_loose = fits;
  pl.ok_strict = fits && !pl.missing && !pl.unexpected;
  return pl;
}

static void save_load(fz_reader *r) {
  int a = pick_module(r), b = pick_module(r);
  unsigned mode = fz_u8(r) % 6;
  /* a round trip or a load into b: the salt of b's new bytes, and an
   * allocation failure for the load */
  unsigned salt = 0, arm_load = 0, bad_k = mode >= 4 ? fz_u8(r) : 0;
  if (mode < 4) {
    salt = fz_u8(r);
    if (fz_u8(r) == 1) arm_load = 1 + fz_pick(r, 8);
  }
  if (a < 0 || path_count(a) >= PATH_CAP || (b >= 0 && path_count(b) >= PATH_CAP)) return;
  if (mode == 4) { /* save to a bad path */
    static const char *const bad[] = {"", NULL, "/nonexistent-graft-fuzz/ckpt"};
    unsigned k = bad_k % 4;
    const char *path = k == 3 ? folder_path : bad[k];
    LOG("save('%s', bad path %u)\n", mods[a].scope, k);
    arm();
    graft_status st = graft_module_save(mods[a].h, path);
    int64_t refused = disarm();
    graft_status want = k < 2 ? GRAFT_EINVAL : GRAFT_EIO;
    check_status("graft_module_save", st, &want, 1, refused);
    check_dir(0);
    reached[R_SAVE_BAD] = 1;
    check_all();
    return;
  }
  if (mode == 5) { /* load from no file, a folder, NULL */
    unsigned k = bad_k % 3;
    const char *path = k == 0 ? ckpt_path : k == 1 ? tmp_dir : NULL;
    LOG("load('%s', bad path %u)\n", mods[a].scope, k);
    arm();
    graft_status st = graft_module_load(mods[a].h, path, 0);
    int64_t refused = disarm();
    want_set w = {0};
    want_if(&w, k < 2, GRAFT_EIO);
    want_if(&w, k == 2, GRAFT_EINVAL);
    check_status("graft_module_load", st, w.s, w.n, refused);
    check_all();
    return;
  }
  if (b < 0 || mode < 2) b = a;
  unsigned flags = mode == 3 ? GRAFT_LOAD_NONSTRICT : 0;
  LOG("save('%s') then load into '%s'%s\n", mods[a].scope, mods[b].scope, flags ? " non-strictly" : "");
  path_list fa = {0}, fb = {0};
  expect_paths_rec(a, "", &fa);
  expect_paths_rec(b, "", &fb);
  uint8_t(*file_bytes)[MAX_BYTES] = malloc((size_t)(fa.n ? fa.n : 1) * sizeof *file_bytes);
  if (!file_bytes) fz_die("harness: out of memory");
  for (int i = 0; i < fa.n; i++) memcpy(file_bytes[i], vars[fa.var[i]].bytes, MAX_BYTES);
  arm();
  graft_status st = graft_module_save(mods[a].h, ckpt_path);
  int64_t refused = disarm();
  graft_status ok = GRAFT_OK;
  check_status("graft_module_save", st, &ok, 1, refused);
  check_dir(st == GRAFT_OK);
  check_all();
  if (st) goto out;
  /* change b's bytes, so that a load shows */
  int bv[MAXV];
  int nbv = expect_vars(b, 0, bv);
  scribble(bv, nbv, salt);
  load_plan pl = plan_load(&fa, &fb, (const uint8_t(*)[MAX_BYTES])file_bytes);
  int will = flags ? pl.ok_loose : pl.ok_strict;
  graft_load_report rep;
  memset(&rep, 0x7f, sizeof rep);
  pending_fail = arm_load;
  arm();
  st = graft_module_load_ex(mods[b].h, ckpt_path, flags, &rep);
  refused = disarm();
  want_set w = {0};
  want_if(&w, will, GRAFT_OK);
  want_if(&w, !will && (pl.missing || pl.unexpected || pl.conflict), GRAFT_EINVAL);
  want_if(&w, !will && pl.bad_dtype, GRAFT_EDTYPE);
  want_if(&w, !will && pl.bad_shape, GRAFT_ESHAPE);
  check_status("graft_module_load", st, w.s, w.n, refused);
  if (!st) {
    if (rep.loaded != pl.loaded || rep.missing != pl.missing || rep.unexpected != pl.unexpected)
      fz_die("graft_module_load report: loaded %lld missing %lld unexpected %lld, the model %d %d %d",
             (long long)rep.loaded, (long long)rep.missing, (long long)rep.unexpected, pl.loaded,
             pl.missing, pl.unexpected);
    for (int i = 0; i < fb.n; i++) {
      int k = find_path(&fa, fb.path[i]);
      if (k >= 0) memcpy(vars[fb.var[i]].bytes, file_bytes[k], (size_t)vars[fb.var[i]].bytes_n);
    }
    reached[R_ROUNDTRIP] |= a == b;
    reached[R_LOAD_OTHER_OK] |= a != b;
    reached[R_LOAD_NONSTRICT] |= flags && (pl.missing || pl.unexpected);
  } else {
    if (rep.loaded) fz_die("a failed load reports %lld paths loaded", (long long)rep.loaded);
    reached[R_LOAD_OTHER_FAIL] |= a != b && st != GRAFT_ENOMEM;
  }
  check_all(); /* a load changes b's variables as the model says, or nothing */
out:
  unlink(ckpt_path);
  free(file_bytes);
  paths_free(&fa);
  paths_free(&fb);
}

/* SAVE_LOAD in a folder of its own under /tmp, made for the op and
 * removed after it (a run that stops at a finding leaves at most one). */
static void op_save_load(fz_reader *r) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/graft-fuzz-module-XXXXXX");
  if (!mkdtemp(tmp_dir)) fz_die("harness: mkdtemp: %s", strerror(errno));
  snprintf(ckpt_path, sizeof ckpt_path, "%s/ckpt.safetensors", tmp_dir);
  snprintf(folder_path, sizeof folder_path, "%s/folder", tmp_dir);
  if (mkdir(folder_path, 0700)) fz_die("harness: mkdir %s: %s", folder_path, strerror(errno));
  save_load(r);
  unlink(ckpt_path);
  if (rmdir(folder_path) || rmdir(tmp_dir))
    fz_die("the calls left files in %s (%s)", tmp_dir, strerror(errno));
}

static void op_set(fz_reader *r) {
  int v = pick_var(r);
  unsigned mode = fz_u8(r) % 5, seed = fz_u8(r);
  if (v < 0) mode = 4;
  static uint8_t data[2 * MAX_BYTES] __attribute__((aligned(64)));
  graft_tensor *src = NULL;
  graft_dtype dt = v >= 0 ? vars[v].dt : GRAFT_F32;
  int rank = v >= 0 ? vars[v].rank : 0;
  int64_t dims[MAX_RANK + 1] = {0};
  if (v >= 0 && rank) memcpy(dims, vars[v].dims, (size_t)rank * sizeof *dims);
  if (mode == 1) dt = dt == GRAFT_F64 ? GRAFT_I32 : GRAFT_F64;
  if (mode == 2) dims[rank++] = 1 + seed % 2; /* one more dim: always another shape */
  int64_t numel = 1;
  for (int i = 0; i < rank; i++) numel *= dims[i];
  fill_bytes(data, dt, numel, seed + 1);
  if (mode < 3 && graft_tensor_wrap(dt, rank, dims, data, &src))
    fz_die("harness: graft_tensor_wrap: %s", graft_last_errmsg());
  LOG("set(%s, mode %u)\n", v >= 0 ? vars[v].name : "NULL", mode);
  arm();
  graft_status st = graft_variable_set(v >= 0 && mode != 4 ? vars[v].h : NULL, src);
  int64_t refused = disarm();
  want_set w = {0};
  int destroyed = v >= 0 && vars[v].destroyed;
  want_if(&w, mode >= 3, GRAFT_EINVAL);
  want_if(&w, mode < 3 && destroyed, GRAFT_EMISUSE);
  want_if(&w, mode == 1 && !destroyed, GRAFT_EDTYPE);
  want_if(&w, mode == 2 && !destroyed, GRAFT_ESHAPE);
  want_if(&w, mode == 0 && !destroyed, GRAFT_OK);
  check_status("graft_variable_set", st, w.s, w.n, refused);
  if (!st) memcpy(vars[v].bytes, data, (size_t)vars[v].bytes_n);
  reached[R_SET_OK] |= !st;
  reached[R_SET_BAD] |= st != GRAFT_OK;
  graft_tensor_destroy(src);
  check_all();
}

/* ---- deferred modules ------------------------------------------------------------------------ */

static graft_runtime *runtime; /* seq, one thread: the calls of DEFERRED_CALL */
static int derive_runs[MAXM];  /* derive calls per module in the current call */

/* module.h: a tracked variable's attribute is the last '/'-separated part
 * of its name, characters outside [A-Za-z0-9_] made '_', a leading digit
 * prefixed by 'v', "var" for an empty part (cut where deferred.c cuts it,
 * leaving room for a "_<k>" suffix within a name's 63 characters). */
static void tracked_attr_base(const char *name, char *out) {
  const char *last = strrchr(name, '/');
  last = last ? last + 1 : name;
  size_t j = 0;
  if (*last >= '0' && *last <= '9') out[j++] = 'v';
  for (; *last && j < NAME_MAX_ - 11; last++) out[j++] = is_ident_char((unsigned char)*last) ? *last : '_';
  out[j] = '\0';
  if (!j) strcpy(out, "var");
}

/* derive: params[0] = the sum of every element of every variable m tracks
 * (in f64, exact for the pool's values) plus params[0] of each deferred
 * module attached to m; params[k] = params[0] * (k + 1) (exact: the
 * sums have at most 46 significant bits, so no rounding, fused or not). */
static graft_status derive_sum(graft_trace *t, graft_module *mh, int n_params, graft_value **params,
                               void *user) {
  (void)user;
  int m = mod_of(mh);
  if (m < 0 || mods[m].n_params != n_params) fz_die("derive called for a module the model does not know as deferred");
  derive_runs[m]++;
  graft_value *sum = graft_scalar(t, GRAFT_F64, 0);
  for (int i = 0; i < mods[m].n_vars; i++)
    if (mods[m].var_kind[i] == E_TRACKED)
      sum = graft_add(t, sum, graft_reduce_sum(t, graft_cast(t, graft_read(t, vars[mods[m].vars[i].idx].h), GRAFT_F64),
                                               0, NULL, 0));
  for (int i = 0; i < mods[m].n_kids; i++) {
    int k = mods[m].kids[i].idx;
    if (!mods[k].n_params) continue;
    graft_value *kp[3];
    graft_status st = graft_deferred_params(t, mods[k].h, mods[k].n_params, kp);
    if (st) return st;
    sum = graft_add(t, sum, kp[0]);
  }
  params[0] = sum;
  for (int k = 1; k < n_params; k++)
    params[k] = graft_mul(t, sum, graft_scalar(t, GRAFT_F64, k + 1));
  return GRAFT_OK;
}

/* What derive_sum gives for m, from the model's bytes, added in derive's
 * order; *stale: a variable it reads was destroyed (the call must fail);
 * *wild: a value is not a multiple of 1/64 within +-2^31 (bytes a load
 * left or a scribble made), so a variable's sum may round and depend on
 * the order reduce_sum adds in. */
static double expect_sum(int m, int *stale, int *wild) {
  double sum = 0;
  for (int i = 0; i < mods[m].n_vars; i++) {
    if (mods[m].var_kind[i] != E_TRACKED) continue;
    const svar *v = &vars[mods[m].vars[i].idx];
    *stale |= v->destroyed;
    double vs = 0; /* exact for tame values: at most 256 of them */
    for (int64_t e = 0, n = numel_of(v); e < n; e++) {
      double x;
      if (v->dt == GRAFT_F32) {
        float f;
        memcpy(&f, v->bytes + 4 * e, 4);
        x = f;
      } else if (v->dt == GRAFT_F64) {
        memcpy(&x, v->bytes + 8 * e, 8);
      } else {
        int32_t k;
        memcpy(&k, v->bytes + 4 * e, 4);
        x = k;
      }
      *wild |= !(fabs(x) <= 0x1p31) || x * 64 != floor(x * 64);
      vs += x;
    }
    sum += vs;
  }
  for (int i = 0; i < mods[m].n_kids; i++)
    if (mods[mods[m].kids[i].idx].n_params) sum += expect_sum(mods[m].kids[i].idx, stale, wild);
  return sum;
}

static void op_deferred(fz_reader *r) {
  char buf[80], uniq[160];
  int p = pick_parent(r);
  const char *name = decode_name(r, buf);
  int n_params = (int)fz_pick(r, 4); /* 0: refused */
  unsigned variant = fz_u8(r) % 8;   /* 1 derive NULL, 2 vars NULL, 3 n_vars -1, 4 out NULL */
  int n = (int)fz_pick(r, MT_MAX_OPT_VARS + 1);
  int vi[MT_MAX_OPT_VARS];
  graft_variable *vh[MT_MAX_OPT_VARS];
  int any_null = 0, any_repeat = 0, any_destroyed = 0;
  for (int i = 0; i < n; i++) {
    vi[i] = pick_var(r);
    vh[i] = vi[i] >= 0 ? vars[vi[i]].h : NULL;
    any_null |= vi[i] < 0;
    if (vi[i] < 0) continue;
    any_destroyed |= vars[vi[i]].destroyed;
    for (int j = 0; j < i; j++) any_repeat |= vi[j] == vi[i];
  }
  int m = free_mod_slot();
  if (m < 0 || (p >= 0 && mods[p].n_kids >= MAXE)) return;
  int n_vars = variant == 3 ? -1 : n;
  int args_bad = !valid_name(name) || variant == 1 || n_params < 1 || variant == 3 || (variant == 2 && n > 0) ||
                 variant == 4;
  LOG("deferred(parent %s, '%s', %d params, variant %u, %d variables)\n", p >= 0 ? mods[p].scope : "NULL",
      name ? name : "(NULL)", n_params, variant, n_vars);
  graft_module *h = (graft_module *)&h;
  arm();
  graft_status st = graft_deferred_create(p >= 0 ? mods[p].h : NULL, name, n_vars, variant == 2 ? NULL : vh,
                                          n_params, variant == 1 ? NULL : derive_sum, NULL,
                                          variant == 4 ? NULL : &h);
  int64_t refused = disarm();
  want_set w = {0};
  want_if(&w, args_bad || any_null || any_repeat, GRAFT_EINVAL);
  want_if(&w, !args_bad && any_destroyed, GRAFT_EMISUSE);
  want_if(&w, !w.n, GRAFT_OK);
  check_status("graft_deferred_create", st, w.s, w.n, refused);
  if (st) {
    if (variant != 4 && h) fz_die("graft_deferred_create failed and left *out non-NULL");
    reached[R_DEFERRED_BAD] |= st == GRAFT_EINVAL;
    check_all();
    return;
  }
  if (p >= 0) unique_name(&mods[p], name, uniq, sizeof uniq);
  else snprintf(uniq, sizeof uniq, "%s", name);
  model_module(m, p, uniq, h);
  mods[m].n_params = n_params;
  for (int i = 0; i < n; i++) {
    char base[NAME_MAX_ + 1], attr[160];
    tracked_attr_base(vars[vi[i]].name, base);
    unique_name(&mods[m], base, attr, sizeof attr);
    mods[m].var_kind[mods[m].n_vars] = E_TRACKED;
    add_entry(mods[m].vars, &mods[m].n_vars, attr, vi[i]);
  }
  reached[R_DEFERRED_OK] = 1;
  LOG("  -> '%s'\n", mods[m].scope);
  check_all();
}

/* The function of DEFERRED_CALL: the module's values, taken twice (the
 * second time must give the same values, derived once). */
typedef struct call_ctx {
  int m;
  int same;
} call_ctx;

static graft_status trace_deferred(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                   graft_value **out, void *user) {
  (void)n_in, (void)in;
  call_ctx *c = user;
  graft_value *again[3];
  graft_status st = graft_deferred_params(t, mods[c->m].h, n_out, out);
  if (!st) st = graft_deferred_params(t, mods[c->m].h, n_out, again);
  for (int i = 0; !st && i < n_out; i++) c->same &= again[i] == out[i];
  return st;
}

/* One call; checks the values against the model (or the failure), and
 * the trace count when expect_trace >= 0.  Returns the status. */
static graft_status call_once(graft_function *f, int m, call_ctx *c, int expect_trace) {
  int stale = 0, wild = 0;
  double want = expect_sum(m, &stale, &wild);
  graft_tensor *out[3] = {NULL, NULL, NULL};
  int n = mods[m].n_params, traces = graft_function_trace_count(f);
  memset(derive_runs, 0, sizeof derive_runs);
  c->same = 1;
  arm();
  graft_status st = graft_function_call(f, 0, NULL, n, out);
  int64_t refused = disarm();
  want_set w = {0};
  want_if(&w, !stale, GRAFT_OK);
  want_if(&w, stale, GRAFT_EMISUSE);
  check_status_named("graft_function_call", NULL, st, w.s, w.n, refused);
  int traced = graft_function_trace_count(f) - traces;
  if (expect_trace >= 0 && !st && traced != expect_trace)
    fz_die("a call of deferred module '%s' traced %d times, expected %d (%s)", mods[m].scope, traced,
           expect_trace, expect_trace ? "the first call" : "a variable set between calls needs no retrace");
  if (traced && !st) {
    if (!c->same) fz_die("deferred module '%s': a second use in one trace gave other values", mods[m].scope);
    for (int k = 0; k < MAXM; k++)
      if (derive_runs[k] > 1)
        fz_die("deferred module '%s': derive ran %d times in one trace", mods[k].scope, derive_runs[k]);
    if (derive_runs[m] != 1) fz_die("deferred module '%s': derive ran %d times", mods[m].scope, derive_runs[m]);
  }
  for (int i = 0; i < n && !st; i++) {
    double got = *(const double *)graft_tensor_data(out[i]);
    double exp = want * (i + 1);
    if (graft_tensor_dtype(out[i]) != GRAFT_F64 || graft_tensor_rank(out[i]) != 0 ||
        (!wild && memcmp(&got, &exp, sizeof got)))
      fz_die("deferred module '%s': value %d is %.17g, the model's %.17g", mods[m].scope, i, got, exp);
  }
  for (int i = 0; i < n; i++) {
    if (st && out[i]) fz_die("a failed graft_function_call allocated out[%d]", i);
    graft_tensor_destroy(out[i]);
  }
  reached[R_DEFERRED_CALL] |= !st;
  reached[R_DEFERRED_STALE] |= st == GRAFT_EMISUSE;
  return st;
}

static void op_deferred_call(fz_reader *r) {
  int l[MAXM], nl = 0;
  for (int m = 0; m < MAXM; m++)
    if (mods[m].live && mods[m].n_params) l[nl++] = m;
  unsigned b = fz_u8(r), mode = fz_u8(r) % 2;
  int v = pick_var(r);
  unsigned seed = fz_u8(r);
  if (!nl) return;
  int m = l[b % (unsigned)nl];
  LOG("deferred_call('%s', mode %u)\n", mods[m].scope, mode);
  call_ctx c = {m, 1};
  graft_function_desc d = {.name = "deferred", .trace = trace_deferred, .user = &c, .n_inputs = 0,
                           .n_outputs = mods[m].n_params};
  graft_function *f = NULL;
  if (graft_function_create(runtime, &d, &f)) fz_die("harness: graft_function_create: %s", graft_last_errmsg());
  graft_status first = call_once(f, m, &c, 1);
  if (mode == 1 && v >= 0 && !vars[v].destroyed) {
    /* a new value for a variable: the next call sees it without a retrace */
    static uint8_t data[MAX_BYTES] __attribute__((aligned(64)));
    graft_tensor *src = NULL;
    fill_bytes(data, vars[v].dt, numel_of(&vars[v]), seed + 7);
    if (graft_tensor_wrap(vars[v].dt, vars[v].rank, vars[v].dims, data, &src) || graft_variable_set(vars[v].h, src))
      fz_die("harness: setting variable '%s': %s", vars[v].name, graft_last_errmsg());
    memcpy(vars[v].bytes, data, (size_t)vars[v].bytes_n);
    graft_tensor_destroy(src);
    call_once(f, m, &c, first == GRAFT_OK ? 0 : -1);
  }
  graft_function_destroy(f);
  check_all();
}

/* ---- one input ------------------------------------------------------------------------------ */

static void teardown(void) {
  for (int m = 0; m < MAXM; m++)
    if (mods[m].live && mods[m].caller_holds) {
      LOG("teardown: destroy('%s')\n", mods[m].scope);
      graft_module_destroy(mods[m].h);
      mods[m].caller_holds = 0;
      update_liveness();
      check_all();
    }
  for (int v = 0; v < MAXV; v++)
    if (vars[v].live && vars[v].caller_holds) {
      LOG("teardown: variable_destroy('%s')\n", vars[v].name);
      graft_variable_destroy(vars[v].h);
      vars[v].caller_holds = 0;
      vars[v].destroyed = 1;
      update_liveness();
      check_all();
    }
  for (int m = 0; m < MAXM; m++)
    if (mods[m].live) fz_die("harness: module '%s' outlived every root", mods[m].scope);
  for (int v = 0; v < MAXV; v++)
    if (vars[v].live) fz_die("harness: variable '%s' outlived its holders", vars[v].name);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fz_budget_install();
  verbose = getenv("GRAFT_FUZZ_VERBOSE") != NULL;
  memset(long63, 'q', NAME_MAX_);
  memset(long64, 'q', NAME_MAX_ + 1);
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.sched = "seq";
  o.num_threads = 1;
  if (graft_runtime_create(&o, &runtime)) {
    fprintf(stderr, "graft_runtime_create: %s\n", graft_last_errmsg());
    exit(2);
  }
  atexit(mt_destroy_runtime);
  return 0;
}

void mt_destroy_runtime(void) { graft_runtime_destroy(runtime); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_reader rd = {data, size, 0};
  int64_t live0 = fz_budget_live();
  pending_fail = 0;
  for (int ops = 0; ops < MT_MAX_OPS && !fz_eof(&rd); ops++) {
    unsigned op = fz_pick(&rd, MT_OP_COUNT);
    switch (op) {
    case MT_OP_CREATE: op_create(&rd); break;
    case MT_OP_ATTACH: op_attach(&rd); break;
    case MT_OP_VAR: op_var(&rd); break;
    case MT_OP_VAR_DESTROY: op_var_destroy(&rd); break;
    case MT_OP_DESTROY: op_destroy(&rd); break;
    case MT_OP_WALKS: op_walks(&rd); break;
    case MT_OP_FLATTEN: op_flatten(&rd); break;
    case MT_OP_PRINT: op_print(&rd); break;
    case MT_OP_OPTIM: op_optim(&rd); break;
    case MT_OP_SAVE_LOAD: op_save_load(&rd); break;
    case MT_OP_SET: op_set(&rd); break;
    case MT_OP_ARM: pending_fail = 1 + fz_pick(&rd, 16); break;
    case MT_OP_DEFERRED: op_deferred(&rd); break;
    case MT_OP_DEFERRED_CALL: op_deferred_call(&rd); break;
    }
  }
  teardown();
  int64_t live = fz_budget_live();
  if (live != live0) fz_die("%lld bytes of graft memory live after every root and variable was destroyed",
                            (long long)(live - live0));
  return 0;
}

int fz_target_check(void) { return fz_check_reached(R_COUNT, reached, reached_name); }
