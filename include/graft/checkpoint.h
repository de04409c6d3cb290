/* graft: checkpoints of modules, in the safetensors format.
 *
 * A checkpoint holds every variable of a module tree under its flatten
 * path (graft_module_flatten: "encoder.layers[0].w"; a shared module's
 * variables once per path), as safetensors: an 8-byte little-endian header
 * length, a JSON header ({"<path>": {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]}, ..., "__metadata__": {"format": "graft",
 * "graft_version": "..."}}), then the raw little-endian data of each tensor
 * in header order.  Files written by other safetensors writers load as
 * long as their dtypes are F32, F64 or I32.
 *
 * The JSON header is parsed and written by jansson, whose own allocations
 * (the JSON tree, while a call runs) do not go through graft's allocator
 * hook (graft/alloc.h).
 *
 * Thread safety: no call may change the variables of m while it is saved
 * or loaded.
 */
#ifndef GRAFT_CHECKPOINT_H
#define GRAFT_CHECKPOINT_H

#include <stdint.h>

#include "graft/module.h"
#include "graft/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Write m's variables to path, crash-safely: into a temporary file in the
 * same folder (path.tmp<pid>.<n>), fsynced, renamed over path, and the
 * folder fsynced, so path holds the old checkpoint or the new one, never a
 * mix.  GRAFT_EIO (with the system's reason in graft_last_errmsg()) when a
 * step fails; path is then unchanged and the temporary file removed, except
 * when only the last step, the folder's fsync, fails: the new file is then
 * in place but may not survive a crash, as the message says.  GRAFT_EINVAL
 * for a NULL m or a NULL or empty path, GRAFT_ENOMEM. */
GRAFT_API graft_status graft_module_save(const graft_module *m, const char *path);

/* Load flags. */
/* Accept a file whose keys differ from m's paths: matching keys load,
 * missing and unexpected ones are reported (graft_load_report) instead of
 * failing the load. */
#define GRAFT_LOAD_NONSTRICT 1u

/* What a load found (graft_module_load_ex). */
typedef struct graft_load_report {
  int64_t loaded;      /* paths loaded */
  int64_t missing;     /* paths of m the file lacks */
  int64_t unexpected;  /* keys of the file m lacks */
  char keys[1024];     /* the first missing ("-path") and unexpected ("+key")
                          names, space separated, truncated */
} graft_load_report;

/* Read path into m's variables.  Everything is validated before any
 * variable changes: the header length against the file size, the JSON
 * (syntax, duplicate keys), each entry's dtype string, shape and
 * data_offsets (in bounds, in order, no overlap, no gap, size = dtype size
 * x elements), and then the keys against m's paths and the dtypes and
 * shapes against m's variables.  Any mismatch returns GRAFT_ECORRUPT (the
 * file is malformed) or GRAFT_EINVAL / GRAFT_ESHAPE / GRAFT_EDTYPE (a valid
 * file that does not fit m), with a message naming the key in
 * graft_last_errmsg(), and no variable changed.  Missing or unexpected keys
 * fail the load unless flags has GRAFT_LOAD_NONSTRICT.  A variable held
 * under several paths (a shared module) loads once, and all its keys in the
 * file must hold the same bytes (else GRAFT_EINVAL naming two of them).
 * GRAFT_EIO when path cannot be opened or is not a regular file (a
 * directory, a FIFO).  The file is mapped: it must not be truncated while
 * the load runs (the copy would fault, as with any mapped reader). */
GRAFT_API graft_status graft_module_load(graft_module *m, const char *path, unsigned flags);
/* The same, filling *report (may be NULL) on success and on failure. */
GRAFT_API graft_status graft_module_load_ex(graft_module *m, const char *path, unsigned flags,
                                            graft_load_report *report);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_CHECKPOINT_H */
