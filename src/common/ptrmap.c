/* Pointer -> uint32 map (see ptrmap.h). */
#include <string.h>

#include "common/ptrmap.h"

static uint32_t slot_of(const void *key, uint32_t cap) {
  uint64_t h = ((uint64_t)(uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull;
  return (uint32_t)(h >> 32) & (cap - 1);
}

uint32_t *graft__ptrmap_get(const graft__ptrmap *m, const void *key) {
  if (!m->cap) return NULL;
  for (uint32_t s = slot_of(key, m->cap);; s = (s + 1) & (m->cap - 1)) {
    if (m->key[s] == key) return &m->val[s];
    if (!m->key[s]) return NULL;
  }
}

graft_status graft__ptrmap_put(graft__ptrmap *m, const void *key, uint32_t val) {
  uint32_t *have = graft__ptrmap_get(m, key);
  if (have) {
    *have = val;
    return GRAFT_OK;
  }
  if (2 * (m->n + 1) > m->cap) {
    /* Rehash into twice the room (at least 16 slots). */
    uint32_t cap = m->cap ? 2 * m->cap : 16;
    if (cap <= m->cap) return GRAFT_ENOMEM;
    const void **key2 = graft__calloc(cap, sizeof *key2);
    uint32_t *val2 = graft__malloc((size_t)cap * sizeof *val2);
    if (!key2 || !val2) {
      graft__free(key2);
      graft__free(val2);
      return GRAFT_ENOMEM;
    }
    for (uint32_t s = 0; s < m->cap; s++) {
      if (!m->key[s]) continue;
      uint32_t t = slot_of(m->key[s], cap);
      while (key2[t]) t = (t + 1) & (cap - 1);
      key2[t] = m->key[s];
      val2[t] = m->val[s];
    }
    graft__free(m->key);
    graft__free(m->val);
    m->key = key2;
    m->val = val2;
    m->cap = cap;
  }
  uint32_t s = slot_of(key, m->cap);
  while (m->key[s]) s = (s + 1) & (m->cap - 1);
  m->key[s] = key;
  m->val[s] = val;
  m->n++;
  return GRAFT_OK;
}

void graft__ptrmap_free(graft__ptrmap *m) {
  graft__free(m->key);
  graft__free(m->val);
  memset(m, 0, sizeof *m);
}
