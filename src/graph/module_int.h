/* graft internal: modules (module.c, module_walk.c, module_print.c) and
 * what the other files of src/graph that deal in modules (variables,
 * deferred modules, checkpoints) need of them.
 *
 * A module holds entries under attributes: variables (its own, or ones it
 * tracks: a deferred module's inputs, owned elsewhere) and submodules.
 * Attribute names are unique within a module and indexed by a hash table,
 * so adding the n-th attribute costs O(1) and a sequential of many layers
 * is not quadratic to build.  An attribute is an identifier ("w") or a list
 * slot ("layers[3]"); the identifier of a list ("layers") is taken by the
 * list as a whole, so "layers" cannot also name a single entry.
 *
 * Reference counts are plain ints: building a tree is not thread-safe
 * (module.h), and walks only read. */
#ifndef GRAFT_MODULE_INT_H
#define GRAFT_MODULE_INT_H

#include <stdint.h>

#include "graph/graph.h"

/* Given names: C identifiers of at most this many characters. */
#define GRAFT__NAME_MAX 63

/* What an entry holds. */
enum graft__entry_kind {
  GRAFT__ENTRY_OWNED = 0,  /* a variable the module owns (created with it as owner) */
  GRAFT__ENTRY_TRACKED,    /* a variable it holds a reference to (a deferred module's input) */
  GRAFT__ENTRY_MODULE      /* a submodule (one reference) */
};

typedef struct graft__entry {
  char *attr;              /* "w", "encoder", "layers[3]" */
  void *p;                 /* graft_variable * or graft_module * */
  uint8_t kind;            /* enum graft__entry_kind */
  uint16_t attr_len;       /* strlen(attr): flatten copies it into every path */
  /* Where graft_module_create looks for the next free sibling suffix when
   * this entry's attribute is the name asked for (names are never
   * removed, so the smallest free suffix only grows). */
  uint32_t next_suffix;
} graft__entry;

/* Open addressing over the attributes: each slot holds 0 (empty) or a
 * 32-bit hash of its key above an entry code + 1 (see module.c). */
typedef struct graft__attr_index {
  uint64_t *slot;
  uint32_t cap, n;
} graft__attr_index;

struct graft_module {
  char *name;                  /* the unique name, also its attribute in the creating parent */
  char *scope;                 /* "model/encoder/" */
  int refs;                    /* the caller's hold (a root) + one per attachment */
  int caller_holds;            /* a root the caller has not destroyed yet */
  graft__entry *vars;          /* owned and tracked variables, in the order added */
  int64_t n_vars, cap_vars;
  graft__entry *kids;          /* submodules, in the order attached (attribute order) */
  int64_t n_kids, cap_kids;
  graft__attr_index index;
  /* The state of a special module (a deferred module's derive callback and
   * its per-trace cache), freed by ext_free when the module is freed. */
  void *ext;
  void (*ext_free)(void *ext);
  graft_module *next_free;     /* the free list while a destroy runs */
};

/* Hold v in m under attribute attr (a C identifier that names nothing in
 * m yet): kind GRAFT__ENTRY_OWNED takes over the caller's reference and
 * marks v owned (v is destroyed with m); GRAFT__ENTRY_TRACKED takes a new
 * reference.  A tracked variable is listed by the walks with m's own.
 * Returns GRAFT_OK, or GRAFT_EINVAL / GRAFT_ENOMEM with graft_last_errmsg
 * naming api, and m unchanged. */
graft_status graft__module_hold_var(graft_module *m, const char *api, const char *attr,
                                    graft_variable *v, int kind);

/* Undo graft_module_create(parent, ...) of m, when a call that built m
 * under parent fails later: m must be the last module made under parent
 * and held nowhere else (else nothing happens).  m and all it holds are
 * freed, and parent is as before the create (attribute, index, sibling
 * numbering). */
void graft__module_unmake(graft_module *parent, graft_module *m);

/* *found = 1 when to is from or lies below it (cycle checks).  GRAFT_OK, or
 * GRAFT_ENOMEM for a tree too large for the walk's stack buffers. */
graft_status graft__module_reaches(const graft_module *from, const graft_module *to, int *found);

/* 1 when s is a C identifier of 1..GRAFT__NAME_MAX characters. */
int graft__module_is_name(const char *s);

#endif /* GRAFT_MODULE_INT_H */
