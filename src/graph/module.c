/* Modules: creation with fixed name scopes, attributes (unique per module,
 * hash-indexed), attachment under several parents with reference counts
 * and cycle refusal, and the freeing of what nothing else holds.  The
 * walks are in module_walk.c, the summary in module_print.c. */
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "graph/module_int.h"

/* ---- names and attributes --------------------------------------------- */

static int is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

/* The length of the identifier that s starts with (0: none). */
static size_t ident_len(const char *s) {
  if (!is_ident_start(s[0])) return 0;
  size_t n = 1;
  while (is_ident_char(s[n])) n++;
  return n;
}

int graft__module_is_name(const char *s) {
  size_t n = ident_len(s);
  return n > 0 && n <= GRAFT__NAME_MAX && s[n] == '\0';
}

static graft_status check_name(const char *api, const char *arg, const char *s) {
  if (!s) return graft__fail(GRAFT_EINVAL, "%s: %s is NULL (expected a C identifier)", api, arg);
  if (graft__module_is_name(s)) return GRAFT_OK;
  size_t len = strlen(s);
  if (len > GRAFT__NAME_MAX && ident_len(s) == len)
    return graft__fail(GRAFT_EINVAL, "%s: %s '%.64s...' has %zu characters (expected a C identifier "
                       "of at most %d)", api, arg, s, len, GRAFT__NAME_MAX);
  return graft__fail(GRAFT_EINVAL, "%s: %s '%.80s' is not a C identifier (expected "
                     "[A-Za-z_][A-Za-z0-9_]*, at most %d characters)", api, arg, s, GRAFT__NAME_MAX);
}

/* An attribute: an identifier, or one followed by a list index "[k]"
 * (decimal, no leading zeros, so each slot has one spelling; k <=
 * INT_MAX).  *base: the identifier's length; *slot: 1 for a list slot. */
static graft_status parse_attr(const char *api, const char *attr, size_t *base, int *slot) {
  if (!attr) return graft__fail(GRAFT_EINVAL, "%s: attr is NULL (expected a C identifier or a list "
                                "slot such as \"layers[3]\")", api);
  size_t n = ident_len(attr);
  *base = n;
  *slot = attr[n] == '[';
  if (n > 0 && n <= GRAFT__NAME_MAX && attr[n] == '\0') return GRAFT_OK;
  if (n > 0 && n <= GRAFT__NAME_MAX && *slot) {
    const char *d = attr + n + 1;
    size_t digits = 0;
    long long k = 0;
    while (d[digits] >= '0' && d[digits] <= '9' && digits < 11) k = 10 * k + (d[digits++] - '0');
    if (digits > 0 && (digits == 1 || d[0] != '0') && k <= INT_MAX && d[digits] == ']' &&
        d[digits + 1] == '\0')
      return GRAFT_OK;
  }
  return graft__fail(GRAFT_EINVAL, "%s: attr '%.80s' is not an attribute (expected a C identifier "
                     "of at most %d characters, optionally followed by a list index [k] with "
                     "0 <= k <= %d written without leading zeros, e.g. \"layers[3]\")",
                     api, attr, GRAFT__NAME_MAX, INT_MAX);
}

/* ---- the attribute index ----------------------------------------------
 * Keys: every entry under its attribute ("w", "layers[3]"), and each list
 * under its identifier ("layers", a "list key", pointing at the list's
 * first slot).  A slot's code is (entry index << 2 | is_kid << 1 | is_list);
 * slots store hash << 32 | (code + 1). */

#define MAX_ENTRIES ((int64_t)1 << 29)

static uint32_t key_hash(const char *key, size_t len) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)key[i]) * 16777619u;
  return h;
}

static graft__entry *entry_of(const graft_module *m, uint32_t code) {
  return (code & 2 ? m->kids : m->vars) + (code >> 2);
}

static graft__entry *index_find(const graft_module *m, const char *key, size_t len, int list) {
  const graft__attr_index *ix = &m->index;
  if (!ix->cap) return NULL;
  uint32_t h = key_hash(key, len);
  for (uint32_t s = h & (ix->cap - 1);; s = (s + 1) & (ix->cap - 1)) {
    uint64_t e = ix->slot[s];
    if (!e) return NULL;
    uint32_t code = (uint32_t)e - 1;
    if ((uint32_t)(e >> 32) != h || (int)(code & 1) != list) continue;
    graft__entry *en = entry_of(m, code);
    size_t klen = list ? strcspn(en->attr, "[") : strlen(en->attr);
    if (klen == len && memcmp(en->attr, key, len) == 0) return en;
  }
}

/* Room for extra more keys at a load of at most 1/2. */
static graft_status index_reserve(graft__attr_index *ix, uint32_t extra) {
  if (2 * ((uint64_t)ix->n + extra) <= ix->cap) return GRAFT_OK;
  uint32_t cap = ix->cap ? 2 * ix->cap : 16;
  uint64_t *slot = graft__calloc(cap, sizeof *slot);
  if (!slot) return GRAFT_ENOMEM;
  for (uint32_t s = 0; s < ix->cap; s++) {
    if (!ix->slot[s]) continue;
    uint32_t t = (uint32_t)(ix->slot[s] >> 32) & (cap - 1);
    while (slot[t]) t = (t + 1) & (cap - 1);
    slot[t] = ix->slot[s];
  }
  graft__free(ix->slot);
  ix->slot = slot;
  ix->cap = cap;
  return GRAFT_OK;
}

static void index_put(graft__attr_index *ix, const char *key, size_t len, uint32_t code) {
  uint32_t h = key_hash(key, len);
  uint32_t s = h & (ix->cap - 1);
  while (ix->slot[s]) s = (s + 1) & (ix->cap - 1);
  ix->slot[s] = (uint64_t)h << 32 | (code + 1);
  ix->n++;
}

/* The entry that already holds attr (base: its identifier's length, slot:
 * a list slot), or NULL.  A list and a single entry cannot share an
 * identifier. */
static const graft__entry *attr_taken(const graft_module *m, const char *attr, size_t base,
                                      int slot) {
  const graft__entry *e = index_find(m, attr, base, 0);
  if (e) return e;
  return slot ? index_find(m, attr, strlen(attr), 0) : index_find(m, attr, base, 1);
}

static const char *entry_what(const graft__entry *e) {
  return e->kind == GRAFT__ENTRY_MODULE ? "module" : "variable";
}

static const char *entry_name(const graft__entry *e) {
  return e->kind == GRAFT__ENTRY_MODULE ? ((const graft_module *)e->p)->name
                                        : ((const graft_variable *)e->p)->name;
}

static graft_status fail_taken(const char *api, const char *arg, const char *attr,
                               const graft_module *m, const graft__entry *e) {
  return graft__fail(GRAFT_EINVAL, "%s: %s '%s' is taken in module '%s' (scope '%s'): attribute "
                     "'%s' holds %s '%s' (expected an attribute that names no variable or "
                     "submodule yet; a list and a single attribute cannot share a name)",
                     api, arg, attr, m->name, m->scope, e->attr, entry_what(e), entry_name(e));
}

/* Append an entry (kids when is_kid, else vars) holding p under attr; all
 * or nothing. */
static graft_status entry_add(graft_module *m, int is_kid, const char *attr, size_t base, int slot,
                              void *p, int kind) {
  graft__entry **arr = is_kid ? &m->kids : &m->vars;
  int64_t *n = is_kid ? &m->n_kids : &m->n_vars, *cap = is_kid ? &m->cap_kids : &m->cap_vars;
  if (*n >= MAX_ENTRIES) return GRAFT_ENOMEM;
  char *copy = NULL;
  if (graft__grow((void **)arr, cap, *n + 1, sizeof **arr) || index_reserve(&m->index, 2) ||
      !(copy = graft__strdup(attr)))
    return GRAFT_ENOMEM; /* a larger array or index changes nothing */
  uint32_t code = (uint32_t)(*n << 2) | (is_kid ? 2u : 0u);
  (*arr)[*n] = (graft__entry){.attr = copy, .p = p, .kind = (uint8_t)kind,
                              .attr_len = (uint16_t)strlen(copy)};
  ++*n;
  index_put(&m->index, copy, strlen(copy), code);
  if (slot && !index_find(m, copy, base, 1)) index_put(&m->index, copy, base, code | 1);
  return GRAFT_OK;
}

/* ---- creation ---------------------------------------------------------- */

/* The attribute a module created as name under parent gets: name, or the
 * first free name_1, name_2, ...; returns the suffix (0: none). */
static uint32_t unique_name(const graft_module *parent, const char *name, char *out, size_t len) {
  size_t n = strlen(name);
  const graft__entry *holder = attr_taken(parent, name, n, 0);
  snprintf(out, len, "%s", name);
  if (!holder) return 0;
  for (uint32_t k = holder->next_suffix ? holder->next_suffix : 1;; k++) {
    snprintf(out, len, "%s_%u", name, k);
    if (!attr_taken(parent, out, strlen(out), 0)) return k;
  }
}

static void module_free_storage(graft_module *m) {
  graft__free(m->vars);
  graft__free(m->kids);
  graft__free(m->index.slot);
  graft__free(m->name);
  graft__free(m->scope);
  graft__free(m);
}

GRAFT_API graft_status graft_module_create(graft_module *parent, const char *name,
                                           graft_module **out) {
  static const char api[] = "graft_module_create";
  if (!out) return graft__fail(GRAFT_EINVAL, "%s: out is NULL (expected a graft_module **)", api);
  *out = NULL;
  graft_status st = check_name(api, "name", name);
  if (st) return st;
  char uniq[GRAFT__NAME_MAX + 16];
  uint32_t suffix = 0;
  if (parent)
    suffix = unique_name(parent, name, uniq, sizeof uniq);
  else
    snprintf(uniq, sizeof uniq, "%s", name);
  const char *pscope = parent ? parent->scope : "";
  size_t plen = strlen(pscope), ulen = strlen(uniq);
  graft_module *m = graft__calloc(1, sizeof *m);
  if (m) {
    m->name = graft__strdup(uniq);
    m->scope = graft__malloc(plen + ulen + 2);
  }
  if (!m || !m->name || !m->scope ||
      (parent && entry_add(parent, 1, uniq, ulen, 0, m, GRAFT__ENTRY_MODULE))) {
    if (m) module_free_storage(m);
    return graft__fail(GRAFT_ENOMEM, "%s: out of memory for module '%s'", api, uniq);
  }
  memcpy(m->scope, pscope, plen);
  memcpy(m->scope + plen, uniq, ulen);
  memcpy(m->scope + plen + ulen, "/", 2);
  if (suffix) {
    /* The next sibling of this name looks from the next suffix on. */
    graft__entry *holder = (graft__entry *)attr_taken(parent, name, strlen(name), 0);
    holder->next_suffix = suffix + 1;
  }
  m->refs = 1;
  m->caller_holds = parent == NULL;
  *out = m;
  return GRAFT_OK;
}

GRAFT_API graft_status graft_module_attach(graft_module *parent, const char *attr,
                                           graft_module *child) {
  static const char api[] = "graft_module_attach";
  if (!parent) return graft__fail(GRAFT_EINVAL, "%s: parent is NULL (expected a module)", api);
  if (!child) return graft__fail(GRAFT_EINVAL, "%s: child is NULL (expected a module)", api);
  size_t base;
  int slot;
  graft_status st = parse_attr(api, attr, &base, &slot);
  if (st) return st;
  if (child == parent)
    return graft__fail(GRAFT_EMISUSE, "%s: child is parent (module '%s'): a module cannot hold "
                       "itself (expected a module other than parent)", api, parent->name);
  int found = 0;
  if (graft__module_reaches(child, parent, &found))
    return graft__fail(GRAFT_ENOMEM, "%s: out of memory walking module '%s'", api, child->name);
  if (found)
    return graft__fail(GRAFT_EMISUSE, "%s: attaching module '%s' (scope '%s') as '%s' of module "
                       "'%s' (scope '%s') would make a cycle: '%s' already holds '%s' (expected "
                       "a child that does not hold parent)", api, child->name, child->scope, attr,
                       parent->name, parent->scope, child->name, parent->name);
  const graft__entry *e = attr_taken(parent, attr, base, slot);
  if (e) return fail_taken(api, "attr", attr, parent, e);
  if (entry_add(parent, 1, attr, base, slot, child, GRAFT__ENTRY_MODULE))
    return graft__fail(GRAFT_ENOMEM, "%s: out of memory attaching '%s' to module '%s'", api, attr,
                       parent->name);
  child->refs++;
  return GRAFT_OK;
}

graft_status graft__module_hold_var(graft_module *m, const char *api, const char *attr,
                                    graft_variable *v, int kind) {
  size_t base;
  int slot;
  graft_status st = kind == GRAFT__ENTRY_OWNED ? check_name(api, "name", attr)
                                               : parse_attr(api, attr, &base, &slot);
  if (st) return st;
  if (kind == GRAFT__ENTRY_OWNED) base = strlen(attr), slot = 0;
  const graft__entry *e = attr_taken(m, attr, base, slot);
  if (e) return fail_taken(api, "name", attr, m, e);
  if (entry_add(m, 0, attr, base, slot, v, kind))
    return graft__fail(GRAFT_ENOMEM, "%s: out of memory adding variable '%s' to module '%s'", api,
                       attr, m->name);
  if (kind == GRAFT__ENTRY_OWNED)
    v->owned = 1;
  else
    graft__variable_ref(v);
  return GRAFT_OK;
}

/* ---- freeing ------------------------------------------------------------ */

/* Drop one reference to m; free it and, through a list threaded through
 * the modules themselves (no allocation, no recursion however deep the
 * tree), every submodule that nothing else holds. */
static void release(graft_module *m) {
  if (--m->refs > 0) return;
  m->next_free = NULL;
  for (graft_module *x = m; x;) {
    if (x->ext_free) x->ext_free(x->ext);
    for (int64_t i = 0; i < x->n_vars; i++) {
      graft_variable *v = x->vars[i].p;
      /* Functions that traced an owned variable keep it allocated and fail
       * their next call, as after graft_variable_destroy. */
      if (x->vars[i].kind == GRAFT__ENTRY_OWNED) __atomic_store_n(&v->destroyed, 1, __ATOMIC_RELEASE);
      graft__variable_unref(v);
      graft__free(x->vars[i].attr);
    }
    graft_module *next = x->next_free;
    for (int64_t i = 0; i < x->n_kids; i++) {
      graft_module *k = x->kids[i].p;
      if (--k->refs == 0) {
        k->next_free = next;
        next = k;
      }
      graft__free(x->kids[i].attr);
    }
    module_free_storage(x);
    x = next;
  }
}

/* Rebuild m's attribute index from its entries, in place (a removal:
 * linear probing has no deletion of its own). */
static void index_rebuild(graft_module *m) {
  graft__attr_index *ix = &m->index;
  if (!ix->cap) return;
  memset(ix->slot, 0, (size_t)ix->cap * sizeof *ix->slot);
  ix->n = 0;
  for (int is_kid = 0; is_kid < 2; is_kid++) {
    const graft__entry *arr = is_kid ? m->kids : m->vars;
    int64_t n = is_kid ? m->n_kids : m->n_vars;
    for (int64_t i = 0; i < n; i++) {
      uint32_t code = (uint32_t)(i << 2) | (is_kid ? 2u : 0u);
      size_t base = strcspn(arr[i].attr, "[");
      index_put(ix, arr[i].attr, arr[i].attr_len, code);
      if (arr[i].attr[base] && !index_find(m, arr[i].attr, base, 1))
        index_put(ix, arr[i].attr, base, code | 1);
    }
  }
}

void graft__module_unmake(graft_module *parent, graft_module *m) {
  if (!parent || parent->n_kids < 1 || parent->kids[parent->n_kids - 1].p != m || m->refs != 1)
    return; /* not the last module made under parent, or held elsewhere: keep it */
  graft__entry *e = &parent->kids[--parent->n_kids];
  /* "name_k": the next sibling of that name may take name_k again.  The
   * holder is found as graft_module_create found it: a list ("layers"
   * when "layers[0]" exists) holds its name too. */
  size_t len = strlen(m->name), d = len;
  while (d > 0 && m->name[d - 1] >= '0' && m->name[d - 1] <= '9') d--;
  if (d < len && d > 1 && m->name[d - 1] == '_') {
    graft__entry *holder = (graft__entry *)attr_taken(parent, m->name, d - 1, 0);
    unsigned long k = strtoul(m->name + d, NULL, 10);
    if (holder && k > 0 && k < holder->next_suffix) holder->next_suffix = (uint32_t)k;
  }
  graft__free(e->attr);
  memset(e, 0, sizeof *e);
  index_rebuild(parent);
  release(m);
}

GRAFT_API void graft_module_destroy(graft_module *m) {
  if (!m) return;
  if (!m->caller_holds) {
    graft__fail(GRAFT_EMISUSE, "graft_module_destroy: module '%s' (scope '%s') is not held by the "
                "caller (expected a root module, created with parent NULL, destroyed once; a "
                "module created under a parent goes with its parents); nothing was freed",
                m->name, m->scope);
    return;
  }
  m->caller_holds = 0;
  release(m);
}

GRAFT_API const char *graft_module_name(const graft_module *m) { return m ? m->name : NULL; }
GRAFT_API const char *graft_module_scope(const graft_module *m) { return m ? m->scope : NULL; }
