/* graft internal: what tests and the checkpoint fuzz target reach of
 * checkpoint.c besides the public calls. */
#ifndef GRAFT_CHECKPOINT_INT_H
#define GRAFT_CHECKPOINT_INT_H

#include <stdint.h>

#include "graft/checkpoint.h"

/* Test hook: when nonzero, graft_module_save stops after the temporary
 * file is written and fsynced, before the rename, as if interrupted there:
 * it removes the temporary file and returns GRAFT_EIO, leaving path as it
 * was.  Set only while no save runs. */
extern int graft__checkpoint_fail_after_tmp;

/* graft_module_load_ex over the bytes of a file already in memory (the
 * file loader maps it and calls this); name is the file's name in
 * messages. */
graft_status graft__checkpoint_load_mem(graft_module *m, const char *name, const uint8_t *file,
                                        int64_t size, unsigned flags, graft_load_report *report);

#endif /* GRAFT_CHECKPOINT_INT_H */
