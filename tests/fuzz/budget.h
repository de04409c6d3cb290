/* A graft allocator hook with a budget, for the fuzz targets.
 *
 * Fuzz inputs ask for shapes of every size.  The library must refuse the
 * absurd ones itself (element or byte counts past its limits); shapes that
 * are merely large (a legitimate 2^40-byte fill) it may try to allocate.
 * The hook refuses every block above FZ_BLOCK_LIMIT and every allocation
 * that would take the live total above FZ_LIVE_LIMIT, so such a call fails
 * with GRAFT_ENOMEM instead of exhausting the machine, and a fuzz run stays
 * within libFuzzer's RSS limit.  Refusals are counted: a status that
 * differs between two calls is a finding only when neither call was refused
 * memory. */
#ifndef GRAFT_FUZZ_BUDGET_H
#define GRAFT_FUZZ_BUDGET_H

#include <stdint.h>

/* Largest block the hook hands out, and most bytes live at once. */
#define FZ_BLOCK_LIMIT ((int64_t)16 << 20)
#define FZ_LIVE_LIMIT ((int64_t)256 << 20)

/* Install the hook (once, before any graft object exists). */
void fz_budget_install(void);

/* Allocations refused since the process started. */
int64_t fz_budget_refusals(void);

/* Refuse the n-th allocation from now (1: the next one) once, counted as a
 * refusal; 0 cancels a pending one.  For targets that check what a failed
 * allocation leaves behind (the module target). */
void fz_budget_fail_nth(int64_t n);

/* Bytes of the library's blocks live now (with their headers): a target
 * that frees everything it made checks that this returns to where it was. */
int64_t fz_budget_live(void);

#endif /* GRAFT_FUZZ_BUDGET_H */
