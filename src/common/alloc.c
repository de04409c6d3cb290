/* The one allocation hook every graft allocation goes through. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

static void *default_alloc(void *ctx, size_t size, size_t align) {
  (void)ctx;
  /* aligned_alloc wants size to be a multiple of align. */
  size_t rounded = (size + align - 1) & ~(align - 1);
  return aligned_alloc(align, rounded);
}

static void default_free(void *ctx, void *p) {
  (void)ctx;
  free(p);
}

static graft_allocator hook = {default_alloc, default_free, NULL};

GRAFT_API void graft_set_allocator(const graft_allocator *a) {
  if (a && a->alloc && a->free) {
    hook = *a;
  } else {
    hook.alloc = default_alloc;
    hook.free = default_free;
    hook.ctx = NULL;
  }
}

/* Every block carries its size in a 16-byte header so graft__realloc can copy
 * without the caller's help; aligned blocks keep the header in front too. */
#define HDR 16u

void *graft__aligned_alloc(size_t size, size_t align) {
  if (align < HDR) align = HDR;
  size_t pad = align; /* header lives in the pad before the aligned block */
  if (size > SIZE_MAX - pad) return NULL;
  unsigned char *raw = hook.alloc(hook.ctx, size + pad, align);
  if (!raw) return NULL;
  unsigned char *p = raw + pad;
  memcpy(p - HDR, &raw, sizeof raw);
  memcpy(p - HDR + sizeof raw, &size, sizeof size);
  return p;
}

void *graft__malloc(size_t size) {
  return graft__aligned_alloc(size, HDR);
}

void *graft__calloc(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return NULL;
  void *p = graft__malloc(n * size);
  if (p) memset(p, 0, n * size);
  return p;
}

void graft__free(void *p) {
  if (!p) return;
  unsigned char *raw;
  memcpy(&raw, (unsigned char *)p - HDR, sizeof raw);
  hook.free(hook.ctx, raw);
}

void *graft__realloc(void *p, size_t old_size, size_t new_size) {
  void *q = graft__malloc(new_size);
  if (!q) return NULL;
  if (p) {
    memcpy(q, p, old_size < new_size ? old_size : new_size);
    graft__free(p);
  }
  return q;
}

char *graft__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = graft__malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

graft_status graft__grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
  if (need <= *cap) return GRAFT_OK;
  int64_t ncap = *cap ? *cap : 8;
  while (ncap < need) ncap *= 2;
  void *n = graft__realloc(*arr, (size_t)*cap * elem, (size_t)ncap * elem);
  if (!n) return GRAFT_ENOMEM;
  *arr = n;
  *cap = ncap;
  return GRAFT_OK;
}
