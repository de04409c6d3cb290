/* graft: allocator hook.
 *
 * Every allocation graft makes (handles, graphs, plans, arenas, tensor
 * memory) goes through one hook.  HPC codes use it to route memory to their
 * own pools; tests use it to fail the N-th allocation.  Memory that OpenMP,
 * OpenBLAS or hwloc allocate internally does not go through it.
 */
#ifndef GRAFT_ALLOC_H
#define GRAFT_ALLOC_H

#include <stddef.h>

#include "graft/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct graft_allocator {
  /* Return size bytes aligned to align (a power of two >= sizeof(void *)),
   * or NULL on failure.  size is never 0. */
  void *(*alloc)(void *ctx, size_t size, size_t align);
  /* Free a block returned by alloc; p is never NULL. */
  void (*free)(void *ctx, void *p);
  void *ctx;
} graft_allocator;

/* Install a (NULL: the default, aligned_alloc/free).  The hook is
 * process-wide: set it before creating any graft object, or after destroying
 * all of them; a block is always freed by the hook that allocated it only if
 * the hook is not changed while graft objects are alive.  Not thread-safe
 * with respect to other graft calls. */
GRAFT_API void graft_set_allocator(const graft_allocator *a);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_ALLOC_H */
