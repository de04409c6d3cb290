/* Module walks: variables (each once, depth first), submodules (each once,
 * breadth first), every path (flatten), and the reachability test behind
 * cycle refusal.
 *
 * A walk keeps its bookkeeping (the set of what it has seen, its stack or
 * queue, the path it builds) in buffers on the C stack and moves to the
 * heap only for a tree larger than those hold: a walk of a usual model
 * allocates nothing, and walks only read the tree, so several may run at
 * once on one tree.  The stack is explicit, so depth is bounded by memory,
 * not by the C stack.
 *
 * Only what can be met twice goes into the seen set.  There are no cycles,
 * so a module held under one attribute is entered at most once by a walk
 * that enters its holder at most once (by induction from the root): only
 * modules held in several places need the set.  A variable is owned by one
 * module, so only a tracked variable (and then every variable, since the
 * tracked one may be met before or after its owner's) can be met twice:
 * the variable walks run without the set for variables and start over with
 * it at the first tracked entry they meet. */
#include <string.h>

#include "graph/module_int.h"

/* ---- buffers on the C stack, moved to the heap when they fill ----------- */

/* Make *buf (cap elements of elem bytes, the first used of them in use)
 * hold need: doubled, copied to the heap; local is the stack buffer it
 * started in (never freed). */
static graft_status buf_move(void **buf, const void *local, int64_t *cap, int64_t need,
                             int64_t used, size_t elem) {
  int64_t ncap = 2 * *cap;
  while (ncap < need) ncap *= 2;
  void *p = graft__malloc((size_t)ncap * elem);
  if (!p) return GRAFT_ENOMEM;
  memcpy(p, *buf, (size_t)used * elem);
  if (*buf != local) graft__free(*buf);
  *buf = p;
  *cap = ncap;
  return GRAFT_OK;
}

/* The check inline, the move out of line: walks call this per item. */
static inline graft_status buf_grow(void **buf, const void *local, int64_t *cap, int64_t need,
                                    int64_t used, size_t elem) {
  return need <= *cap ? GRAFT_OK : buf_move(buf, local, cap, need, used, elem);
}

static void buf_free(void *buf, const void *local) {
  if (buf != local) graft__free(buf);
}

/* The modules and variables a walk has seen: open addressing on pointers.
 * 1024 slots at a load of at most 1/2 hold 512 objects (a 100-layer model
 * with two variables per layer takes 301) before moving to the heap. */
#define SEEN_LOCAL 1024

typedef struct seen_set {
  const void **slot;  /* NULL until the first add: most walks never add */
  int64_t cap, n;
  const void *local[SEEN_LOCAL];
} seen_set;

static void seen_init(seen_set *s) {
  s->slot = NULL;
  s->cap = SEEN_LOCAL;
  s->n = 0;
}

static int64_t seen_slot(const void *p, int64_t cap) {
  uint64_t h = ((uint64_t)(uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull;
  return (int64_t)(h >> 32) & (cap - 1);
}

static graft_status seen_rehash(seen_set *s) {
  int64_t cap = 2 * s->cap;
  const void **slot = graft__calloc((size_t)cap, sizeof *slot);
  if (!slot) return GRAFT_ENOMEM;
  for (int64_t i = 0; i < s->cap; i++) {
    if (!s->slot[i]) continue;
    int64_t j = seen_slot(s->slot[i], cap);
    while (slot[j]) j = (j + 1) & (cap - 1);
    slot[j] = s->slot[i];
  }
  buf_free(s->slot, s->local);
  s->slot = slot;
  s->cap = cap;
  return GRAFT_OK;
}

/* 0: p is new (now in s); 1: seen before; -1: out of memory. */
static int seen_add(seen_set *s, const void *p) {
  if (!s->slot) {
    memset(s->local, 0, sizeof s->local);
    s->slot = s->local;
  }
  int64_t i = seen_slot(p, s->cap);
  for (; s->slot[i]; i = (i + 1) & (s->cap - 1))
    if (s->slot[i] == p) return 1;
  if (2 * (s->n + 1) > s->cap) {
    if (seen_rehash(s)) return -1;
    for (i = seen_slot(p, s->cap); s->slot[i];) i = (i + 1) & (s->cap - 1);
  }
  s->slot[i] = p;
  s->n++;
  return 0;
}

static void seen_free(seen_set *s) {
  if (s->slot) buf_free(s->slot, s->local);
}

/* Held in more than one place (the caller's hold on a root aside). */
static int is_shared(const graft_module *m) { return m->refs - m->caller_holds > 1; }

/* 1 when the walk enters m (0: met before); -1 out of memory. */
static int first_visit(seen_set *s, const graft_module *m) {
  if (!is_shared(m)) return 1;
  int r = seen_add(s, m);
  return r < 0 ? -1 : !r;
}

/* The depth-first stack: a module and the next of its submodules to go
 * into; path_len is where its path prefix ends (flatten). */
typedef struct frame {
  const graft_module *m;
  int64_t next;
  size_t path_len;
} frame;

#define STACK_LOCAL 32

typedef struct dfs {
  frame *f;
  int64_t n, cap;
  frame local[STACK_LOCAL];
} dfs;

static void dfs_init(dfs *d) {
  d->f = d->local;
  d->n = 0;
  d->cap = STACK_LOCAL;
}

static graft_status dfs_push(dfs *d, const graft_module *m, size_t path_len) {
  if (buf_grow((void **)&d->f, d->local, &d->cap, d->n + 1, d->n, sizeof *d->f))
    return GRAFT_ENOMEM;
  d->f[d->n++] = (frame){m, 0, path_len};
  return GRAFT_OK;
}

/* The next module down from the top frame (popping finished frames), or
 * NULL when the walk is over. */
static const graft__entry *dfs_next(dfs *d) {
  while (d->n) {
    frame *f = &d->f[d->n - 1];
    if (f->next < f->m->n_kids) return &f->m->kids[f->next++];
    d->n--;
  }
  return NULL;
}

/* ---- each once ------------------------------------------------------------ */

static graft_status walk_args(const char *api, const graft_module *m, int64_t cap,
                              const void *out, int64_t *n) {
  if (!n) return graft__fail(GRAFT_EINVAL, "%s: n is NULL (expected an int64_t * for the count)", api);
  *n = 0;
  if (!m) return graft__fail(GRAFT_EINVAL, "%s: m is NULL (expected a module)", api);
  if (cap < 0) return graft__fail(GRAFT_EINVAL, "%s: cap is %lld (expected >= 0)", api, (long long)cap);
  if (cap > 0 && !out)
    return graft__fail(GRAFT_EINVAL, "%s: out is NULL with cap %lld (expected an array of cap "
                       "handles, or cap 0 to count)", api, (long long)cap);
  return GRAFT_OK;
}

static graft_status walk_oom(const char *api, const graft_module *m, int64_t *n) {
  *n = 0;
  return graft__fail(GRAFT_ENOMEM, "%s: out of memory walking module '%s'", api, m->name);
}

/* What listing a module's variables came to. */
enum { LIST_OK = 0, LIST_NOMEM = -1, LIST_TRACKED = 1 };

/* The variables of x not seen yet whose flags include need, into out
 * (up to cap) and the count *k.  Without dedup (no tracked variable met
 * yet), LIST_TRACKED at the first tracked one. */
static int list_vars(const graft_module *x, unsigned need, int dedup, seen_set *seen, int64_t cap,
                     graft_variable **out, int64_t *k) {
  for (int64_t i = 0; i < x->n_vars; i++) {
    graft_variable *v = x->vars[i].p;
    if (!dedup && x->vars[i].kind == GRAFT__ENTRY_TRACKED) return LIST_TRACKED;
    int r = dedup ? seen_add(seen, v) : 0;
    if (r < 0) return LIST_NOMEM;
    if (r == 0 && (v->flags & need) == need) {
      if (*k < cap) out[*k] = v;
      ++*k;
    }
  }
  return LIST_OK;
}

/* Pre-order depth first: a module's variables on its first visit, then
 * its submodules in attribute order; a module met again is skipped with
 * all below it (all of that was listed then). */
static int walk_vars_once(const graft_module *m, unsigned need, int dedup, int64_t cap,
                          graft_variable **out, int64_t *n) {
  seen_set seen;
  dfs d;
  seen_init(&seen);
  dfs_init(&d);
  int64_t k = 0;
  int r = list_vars(m, need, dedup, &seen, cap, out, &k);
  if (r == LIST_OK && dfs_push(&d, m, 0)) r = LIST_NOMEM;
  for (const graft__entry *e; r == LIST_OK && (e = dfs_next(&d));) {
    int first = first_visit(&seen, e->p);
    if (first < 0) r = LIST_NOMEM;
    else if (first && (r = list_vars(e->p, need, dedup, &seen, cap, out, &k)) == LIST_OK &&
             dfs_push(&d, e->p, 0))
      r = LIST_NOMEM;
  }
  seen_free(&seen);
  buf_free(d.f, d.local);
  *n = k;
  return r;
}

static graft_status walk_vars(const char *api, const graft_module *m, unsigned need, int64_t cap,
                              graft_variable **out, int64_t *n) {
  graft_status st = walk_args(api, m, cap, out, n);
  if (st) return st;
  int r = walk_vars_once(m, need, 0, cap, out, n);
  if (r == LIST_TRACKED) r = walk_vars_once(m, need, 1, cap, out, n);
  return r == LIST_OK ? GRAFT_OK : walk_oom(api, m, n);
}

GRAFT_API graft_status graft_module_variables(const graft_module *m, int64_t cap,
                                              graft_variable **out, int64_t *n) {
  return walk_vars("graft_module_variables", m, 0, cap, out, n);
}

GRAFT_API graft_status graft_module_trainable_variables(const graft_module *m, int64_t cap,
                                                        graft_variable **out, int64_t *n) {
  return walk_vars("graft_module_trainable_variables", m, GRAFT_VAR_TRAINABLE, cap, out, n);
}

#define QUEUE_LOCAL 256

GRAFT_API graft_status graft_module_submodules(const graft_module *m, int64_t cap,
                                               graft_module **out, int64_t *n) {
  static const char api[] = "graft_module_submodules";
  graft_status st = walk_args(api, m, cap, out, n);
  if (st) return st;
  seen_set seen;
  seen_init(&seen);
  const graft_module *local[QUEUE_LOCAL];
  const graft_module **q = local;
  int64_t qcap = QUEUE_LOCAL, qn = 1, k = 0;
  q[0] = m;
  for (int64_t head = 0; head < qn && !st; head++) {
    const graft_module *x = q[head];
    for (int64_t i = 0; i < x->n_kids && !st; i++) {
      graft_module *kid = x->kids[i].p;
      int first = first_visit(&seen, kid);
      if (first < 0) {
        st = GRAFT_ENOMEM;
      } else if (first) {
        if (k < cap) out[k] = kid;
        k++;
        st = buf_grow((void **)&q, local, &qcap, qn + 1, qn, sizeof *q);
        if (!st) q[qn++] = kid;
      }
    }
  }
  seen_free(&seen);
  buf_free(q, local);
  if (st) return walk_oom(api, m, n);
  *n = k;
  return GRAFT_OK;
}

graft_status graft__module_reaches(const graft_module *from, const graft_module *to, int *found) {
  *found = from == to;
  seen_set seen;
  dfs d;
  seen_init(&seen);
  dfs_init(&d);
  graft_status st = dfs_push(&d, from, 0);
  for (const graft__entry *e; !st && !*found && (e = dfs_next(&d));) {
    int first = first_visit(&seen, e->p);
    if (first < 0) st = GRAFT_ENOMEM;
    else if (first && !(*found = e->p == to)) st = dfs_push(&d, e->p, 0);
  }
  seen_free(&seen);
  buf_free(d.f, d.local);
  return st;
}

/* ---- every path -------------------------------------------------------------- */

#define PATH_LOCAL 256

typedef struct path_buf {
  char *s;
  int64_t cap;
  char local[PATH_LOCAL];
} path_buf;

/* Write e's attribute (and then sep, if not '\0') at at, NUL-terminated;
 * *end: the length after it. */
static graft_status path_put(path_buf *p, size_t at, const graft__entry *e, char sep, size_t *end) {
  size_t len = e->attr_len;
  if (buf_grow((void **)&p->s, p->local, &p->cap, (int64_t)(at + len + 2), (int64_t)at, 1))
    return GRAFT_ENOMEM;
  memcpy(p->s + at, e->attr, len);
  at += len;
  if (sep) p->s[at++] = sep;
  p->s[at] = '\0';
  *end = at;
  return GRAFT_OK;
}

typedef struct flat_ctx {
  graft_module_visit_fn visit;
  void *user;
  path_buf path;
  int from_visit; /* the status came from visit */
} flat_ctx;

static graft_status visit_vars(flat_ctx *c, const graft_module *x, size_t prefix) {
  for (int64_t i = 0; i < x->n_vars; i++) {
    size_t end;
    if (path_put(&c->path, prefix, &x->vars[i], '\0', &end)) return GRAFT_ENOMEM;
    graft_status st = c->visit(c->path.s, x->vars[i].p, c->user);
    if (st) {
      c->from_visit = 1;
      return st;
    }
  }
  return GRAFT_OK;
}

GRAFT_API graft_status graft_module_flatten(const graft_module *m, graft_module_visit_fn visit,
                                            void *user) {
  static const char api[] = "graft_module_flatten";
  if (!m) return graft__fail(GRAFT_EINVAL, "%s: m is NULL (expected a module)", api);
  if (!visit) return graft__fail(GRAFT_EINVAL, "%s: visit is NULL (expected a function)", api);
  flat_ctx c = {.visit = visit, .user = user};
  c.path.s = c.path.local;
  c.path.cap = PATH_LOCAL;
  c.path.s[0] = '\0';
  dfs d;
  dfs_init(&d);
  graft_status st = visit_vars(&c, m, 0);
  if (!st) st = dfs_push(&d, m, 0);
  for (const graft__entry *e; !st && (e = dfs_next(&d));) {
    size_t prefix;
    st = path_put(&c.path, d.f[d.n - 1].path_len, e, '.', &prefix);
    if (!st) st = visit_vars(&c, e->p, prefix);
    if (!st) st = dfs_push(&d, e->p, prefix);
  }
  buf_free(d.f, d.local);
  if (st && !c.from_visit) st = graft__fail(GRAFT_ENOMEM, "%s: out of memory for the paths of "
                                            "module '%s'", api, m->name);
  else if (st && !graft__status_is_error(st))
    st = graft__fail(GRAFT__STATUS_FOREIGN, "%s: visit returned %d at path '%s' (expected GRAFT_OK "
                     "or a graft_status error code)", api, (int)st, c.path.s);
  buf_free(c.path.s, c.path.local);
  return st;
}
