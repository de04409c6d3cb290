/* The cold half of the work-stealing deque: buffers (allocation, growth,
 * reclamation).  The hot half (push, pop, steal) is inline in deque.h. */
#include "sched/deque.h"

#include "common/common.h"

enum { MIN_CAPACITY = 16 };

/* Largest capacity whose buffer size still fits in a size_t. */
#define MAX_CAPACITY ((int64_t)((SIZE_MAX - sizeof(graft__deque_buf)) / sizeof(uint64_t) / 2))

static graft__deque_buf *buf_new(int64_t capacity) {
  size_t bytes = sizeof(graft__deque_buf) + (size_t)capacity * sizeof(uint64_t);
  graft__deque_buf *a = graft__aligned_alloc(bytes, GRAFT__ALIGN);
  if (!a) return NULL;
  a->mask = capacity - 1;
  a->next = NULL;
  return a;
}

graft_status graft__deque_init(graft__deque *d, int64_t capacity) {
  atomic_init(&d->top, 0);
  atomic_init(&d->bottom, 0);
  atomic_init(&d->buf, NULL);
  d->retired = NULL;
  int64_t cap = MIN_CAPACITY;
  while (cap < capacity) {
    if (cap > MAX_CAPACITY / 2) return GRAFT_ENOMEM;
    cap *= 2;
  }
  graft__deque_buf *a = buf_new(cap);
  if (!a) return GRAFT_ENOMEM;
  atomic_store_explicit(&d->buf, a, memory_order_relaxed);
  return GRAFT_OK;
}

void graft__deque_reclaim(graft__deque *d) {
  while (d->retired) {
    graft__deque_buf *next = d->retired->next;
    graft__free(d->retired);
    d->retired = next;
  }
}

void graft__deque_destroy(graft__deque *d) {
  graft__deque_reclaim(d);
  graft__free(atomic_load_explicit(&d->buf, memory_order_relaxed));
  atomic_store_explicit(&d->buf, NULL, memory_order_relaxed);
}

void graft__deque_reset(graft__deque *d) {
  atomic_store_explicit(&d->top, 0, memory_order_relaxed);
  atomic_store_explicit(&d->bottom, 0, memory_order_relaxed);
}

graft__deque_buf *graft__deque_grow(graft__deque *d, graft__deque_buf *old, int64_t t, int64_t b) {
  int64_t cap = old->mask + 1;
  if (cap > MAX_CAPACITY / 2) return NULL;
  graft__deque_buf *a = buf_new(2 * cap);
  if (!a) return NULL;
  /* Items keep their indices; only the modulus changes.  The old buffer is
   * never written again, so a thief still reading it sees the same items. */
  for (int64_t i = t; i < b; i++) {
    uint64_t x = atomic_load_explicit(&old->items[i & old->mask], memory_order_relaxed);
    atomic_store_explicit(&a->items[i & a->mask], x, memory_order_relaxed);
  }
  /* Release: a thief that loads the new pointer (acquire) sees the copies. */
  atomic_store_explicit(&d->buf, a, memory_order_release);
  old->next = d->retired;
  d->retired = old;
  return a;
}
