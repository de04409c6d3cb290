/* graft internal: a map from pointers to uint32 values (open addressing,
 * linear probing), for lookups that a linear scan made quadratic: the
 * variables a graph references, the current value of each variable in a
 * trace.  Zero-initialised is empty; no removal. */
#ifndef GRAFT_PTRMAP_H
#define GRAFT_PTRMAP_H

#include "common/common.h"

typedef struct graft__ptrmap {
  const void **key;            /* cap slots, NULL = empty */
  uint32_t *val;
  uint32_t cap, n;             /* cap: 0 or a power of two, n < cap / 2 */
} graft__ptrmap;

/* The value of key (not NULL), or NULL when absent. */
uint32_t *graft__ptrmap_get(const graft__ptrmap *m, const void *key);
/* Set key's value, inserting it if absent; GRAFT_ENOMEM leaves m as it
 * was. */
graft_status graft__ptrmap_put(graft__ptrmap *m, const void *key, uint32_t val);
void graft__ptrmap_free(graft__ptrmap *m);

#endif /* GRAFT_PTRMAP_H */
