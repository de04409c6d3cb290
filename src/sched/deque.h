/* graft internal: the per-worker work-stealing deque.
 *
 * A Chase-Lev deque ("Dynamic Circular Work-Stealing Deque", Chase & Lev,
 * SPAA 2005) of uint64_t items, with the C11 memory orders of Le, Pop, Cohen
 * and Zappa Nardelli ("Correct and Efficient Work-Stealing for Weak Memory
 * Models", PPoPP 2013).
 *
 * One thread owns a deque: only it may push, pop, grow, reset or reclaim.
 * Any thread may steal.  The owner works at the bottom (LIFO), thieves take
 * from the top (FIFO).  top and bottom only grow (until a quiescent reset);
 * an item's slot is its index modulo the buffer capacity.
 *
 * Memory orders (why each one is needed):
 *  - push stores bottom with release: a thief that reads the new bottom with
 *    acquire sees the item in its slot, and everything the owner wrote before
 *    the push (the node the item names).  The paper's release fence + relaxed
 *    store does the same in C11; a release store is also understood by
 *    ThreadSanitizer, which does not model fences.  pop's later relaxed
 *    stores to bottom stay in that release sequence (same thread, C11 5.1.2.4).
 *  - push loads top with acquire: a slot freed by a steal is rewritten only
 *    after the thief's read of it (the thief's CAS on top is a release).
 *  - pop stores the decremented bottom, then a seq_cst fence, then loads top:
 *    the owner's claim on the last slot and a thief's claim (its load of top,
 *    fence, load of bottom) cannot both miss each other (store-load order,
 *    which no acquire/release pairing gives).
 *  - steal loads top (acquire), a seq_cst fence, bottom (acquire), the buffer
 *    pointer (acquire, pairing with the release store of a grown buffer), the
 *    slot, and then claims the index with a seq_cst CAS on top.  The CAS
 *    decides between thieves, and between thieves and the owner when one
 *    item is left; a thief that loses returns -1 and its read is discarded.
 *  - Slots are read and written with relaxed atomics: a thief may read a slot
 *    the owner is rewriting (its CAS then fails), which must not be a data
 *    race.
 *
 * Growth: when full, push copies the live items into a buffer twice as large
 * and publishes it with a release store.  The old buffer is kept on a retired
 * list, since a thief may still be reading it; graft__deque_reclaim frees the
 * retired buffers once no thief can be inside steal.
 */
#ifndef GRAFT_SCHED_DEQUE_H
#define GRAFT_SCHED_DEQUE_H

#include <stdatomic.h>
#include <stdint.h>

#include "graft/status.h"

typedef struct graft__deque_buf {
  int64_t mask;                      /* capacity - 1; capacity a power of two */
  struct graft__deque_buf *next;     /* retired list link */
  _Atomic uint64_t items[];
} graft__deque_buf;

/* top and bottom on separate cache lines: thieves hammer top, the owner
 * bottom. */
typedef struct graft__deque {
  _Alignas(64) _Atomic int64_t top;
  char pad1[64 - sizeof(_Atomic int64_t)];
  _Atomic int64_t bottom;
  char pad2[64 - sizeof(_Atomic int64_t)];
  _Atomic(graft__deque_buf *) buf;
  graft__deque_buf *retired;         /* owner only */
} graft__deque;

/* Make d empty with room for capacity items (rounded up to a power of two,
 * at least 16).  Returns GRAFT_OK or GRAFT_ENOMEM (d then holds nothing to
 * free, destroy is still allowed).  Free with graft__deque_destroy. */
graft_status graft__deque_init(graft__deque *d, int64_t capacity);

/* Free the buffer and every retired buffer.  No thread may use d any more. */
void graft__deque_destroy(graft__deque *d);

/* Owner only: a buffer twice as large holding the items [t, b), published in
 * d->buf; the old buffer is retired.  NULL (and d unchanged) when the
 * allocation fails.  Used by graft__deque_push. */
graft__deque_buf *graft__deque_grow(graft__deque *d, graft__deque_buf *old, int64_t t, int64_t b);

/* Owner only, no thief inside steal (e.g. after the parallel region joined):
 * free the retired buffers. */
void graft__deque_reclaim(graft__deque *d);

/* Owner only, no thief inside steal: empty the deque, keeping its buffer. */
void graft__deque_reset(graft__deque *d);

/* ThreadSanitizer does not model fences (GCC warns, -Wtsan).  It loses no
 * happens-before edge here: the seq_cst fences only order a store before a
 * load (pop) or two loads that are acquires already (steal); every edge that
 * carries data is a release store or CAS paired with an acquire load. */
#if defined(__SANITIZE_THREAD__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define GRAFT__DEQUE_TSAN_PRAGMAS 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif

/* Owner only: push item at the bottom, growing the buffer when full.
 * GRAFT_ENOMEM if growth failed; the item is then not pushed. */
static inline graft_status graft__deque_push(graft__deque *d, uint64_t item) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
  int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
  graft__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
  if (b - t > a->mask) {
    a = graft__deque_grow(d, a, t, b);
    if (!a) return GRAFT_ENOMEM;
  }
  atomic_store_explicit(&a->items[b & a->mask], item, memory_order_relaxed);
  atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
  return GRAFT_OK;
}

/* Owner only: take the most recently pushed item.  1 = *item set, 0 = empty. */
static inline int graft__deque_pop(graft__deque *d, uint64_t *item) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
  /* top never decreases, so an old value that already says "empty" is right:
   * skip the fence when there is clearly nothing to take. */
  if (atomic_load_explicit(&d->top, memory_order_relaxed) > b) return 0;
  graft__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
  atomic_store_explicit(&d->bottom, b, memory_order_relaxed);
  atomic_thread_fence(memory_order_seq_cst);
  int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
  if (t < b) { /* more than one item left: no thief can reach slot b */
    *item = atomic_load_explicit(&a->items[b & a->mask], memory_order_relaxed);
    return 1;
  }
  int got = 0;
  if (t == b) { /* the last item: race the thieves for it */
    uint64_t x = atomic_load_explicit(&a->items[b & a->mask], memory_order_relaxed);
    if (atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                memory_order_relaxed)) {
      *item = x;
      got = 1;
    }
  }
  /* Empty now (taken or lost): bottom back to top. */
  atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
  return got;
}

/* Owner only, while no other thread can steal from d (a team of one): pop
 * without the fence and the CAS that only guard against thieves. */
static inline int graft__deque_pop_solo(graft__deque *d, uint64_t *item) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
  if (atomic_load_explicit(&d->top, memory_order_relaxed) > b) return 0;
  graft__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
  *item = atomic_load_explicit(&a->items[b & a->mask], memory_order_relaxed);
  atomic_store_explicit(&d->bottom, b, memory_order_relaxed);
  return 1;
}

/* Any thread: take the oldest item.  1 = *item set, 0 = empty, -1 = lost a
 * race with another thief or the owner (the deque may still hold items). */
static inline int graft__deque_steal(graft__deque *d, uint64_t *item) {
  int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
  atomic_thread_fence(memory_order_seq_cst);
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_acquire);
  if (t >= b) return 0;
  graft__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_acquire);
  uint64_t x = atomic_load_explicit(&a->items[t & a->mask], memory_order_relaxed);
  if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                               memory_order_relaxed))
    return -1;
  *item = x;
  return 1;
}

#ifdef GRAFT__DEQUE_TSAN_PRAGMAS
#pragma GCC diagnostic pop
#undef GRAFT__DEQUE_TSAN_PRAGMAS
#endif

/* Items in d as seen at some recent moment; exact when no one else is using d. */
static inline int64_t graft__deque_size_approx(const graft__deque *d) {
  int64_t b = atomic_load_explicit(&((graft__deque *)d)->bottom, memory_order_relaxed);
  int64_t t = atomic_load_explicit(&((graft__deque *)d)->top, memory_order_relaxed);
  return b > t ? b - t : 0;
}

#endif /* GRAFT_SCHED_DEQUE_H */
