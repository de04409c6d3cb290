/* The budget allocator hook (see budget.h).  Each block carries its size
 * and its header size in a header (align bytes, at least 16) in front of
 * it, so free can return it to the live total. */
#include "budget.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "graft.h"

static _Atomic int64_t live_bytes;
static _Atomic int64_t refusals;
static _Atomic int64_t fail_countdown; /* fz_budget_fail_nth: refuse when it reaches 0 */

static void *budget_alloc(void *ctx, size_t size, size_t align) {
  (void)ctx;
  if (atomic_load(&fail_countdown) > 0 && atomic_fetch_sub(&fail_countdown, 1) == 1) {
    atomic_fetch_add(&refusals, 1);
    return NULL;
  }
  if (size > (size_t)FZ_BLOCK_LIMIT) {
    atomic_fetch_add(&refusals, 1);
    return NULL;
  }
  size_t hdr = align >= 16 ? align : 16;
  int64_t total = (int64_t)size + (int64_t)hdr;
  if (atomic_fetch_add(&live_bytes, total) + total > FZ_LIVE_LIMIT) {
    atomic_fetch_sub(&live_bytes, total);
    atomic_fetch_add(&refusals, 1);
    return NULL;
  }
  /* aligned_alloc wants a multiple of align; so is hdr. */
  size_t rounded = (size + align - 1) / align * align + hdr;
  unsigned char *base = aligned_alloc(align, rounded);
  if (!base) {
    atomic_fetch_sub(&live_bytes, total);
    atomic_fetch_add(&refusals, 1);
    return NULL;
  }
  unsigned char *p = base + hdr;
  ((int64_t *)p)[-1] = total;
  ((int64_t *)p)[-2] = (int64_t)hdr;
  return p;
}

static void budget_free(void *ctx, void *p) {
  (void)ctx;
  int64_t total = ((int64_t *)p)[-1], hdr = ((int64_t *)p)[-2];
  atomic_fetch_sub(&live_bytes, total);
  free((unsigned char *)p - hdr);
}

void fz_budget_install(void) {
  static const graft_allocator hook = {budget_alloc, budget_free, NULL};
  graft_set_allocator(&hook);
}

int64_t fz_budget_refusals(void) { return atomic_load(&refusals); }

void fz_budget_fail_nth(int64_t n) { atomic_store(&fail_countdown, n > 0 ? n : 0); }

int64_t fz_budget_live(void) { return atomic_load(&live_bytes); }
