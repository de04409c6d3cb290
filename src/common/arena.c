/* Bump arena: many small graph-lifetime allocations freed at once. */
#include <string.h>

#include "common/common.h"

struct graft__arena_block {
  struct graft__arena_block *next;
  size_t used, cap;
  /* data follows, 64-byte aligned */
};

#define BLOCK_HDR 64u
#define BLOCK_MIN (64u * 1024u)

void *graft__arena_alloc(graft__arena *a, size_t size) {
  size = (size + 15u) & ~(size_t)15u;
  struct graft__arena_block *b = a->head;
  if (!b || b->cap - b->used < size) {
    size_t cap = size > BLOCK_MIN ? size : BLOCK_MIN;
    b = graft__aligned_alloc(BLOCK_HDR + cap, GRAFT__ALIGN);
    if (!b) return NULL;
    b->next = a->head;
    b->used = 0;
    b->cap = cap;
    a->head = b;
  }
  void *p = (unsigned char *)b + BLOCK_HDR + b->used;
  b->used += size;
  return p;
}

void graft__arena_free(graft__arena *a) {
  struct graft__arena_block *b = a->head;
  while (b) {
    struct graft__arena_block *n = b->next;
    graft__free(b);
    b = n;
  }
  a->head = NULL;
}
