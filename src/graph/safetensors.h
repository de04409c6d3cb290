/* graft internal: the safetensors format (checkpoint.c reads and writes
 * module checkpoints with it).
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON (an
 * object: one entry per tensor, {"dtype": "F32", "shape": [2, 3],
 * "data_offsets": [begin, end]}, and an optional "__metadata__" object of
 * strings), then the data section: each tensor's raw little-endian bytes at
 * [begin, end) of the section.  The parser trusts nothing in the file: it
 * returns a table of entries only when every rule below holds, else
 * GRAFT_ECORRUPT (GRAFT_ENOMEM when out of memory) and a message naming
 * the key:
 *   - 8 <= file size, N <= GRAFT__ST_MAX_HEADER and 8 + N <= file size;
 *   - the header is JSON (jansson) with no duplicate key at any level, an
 *     object; "__metadata__", when present, an object of strings;
 *   - each entry an object with exactly dtype, shape and data_offsets;
 *     dtype one of safetensors' byte-sized dtype names; shape an array of
 *     integers >= 0 whose element count fits int64; data_offsets two
 *     integers 0 <= begin <= end <= data section size, end - begin = element
 *     count x dtype size;
 *   - sorted by offsets, the entries tile the data section exactly: the
 *     first begins at 0, each begins where the one before ends (no overlap,
 *     no gap), the last ends at the end of the file.
 */
#ifndef GRAFT_SAFETENSORS_H
#define GRAFT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* The longest header the parser accepts (safetensors' own limit): the JSON
 * tree jansson builds is proportional to it. */
#define GRAFT__ST_MAX_HEADER 100000000

/* The data section starts on a multiple of this (the writer pads the JSON
 * with spaces, as safetensors' writer does), so mapped data is aligned for
 * every dtype. */
#define GRAFT__ST_ALIGN 8

typedef struct graft__st_entry {
  const char *key;     /* NUL-free UTF-8, owned by the table */
  const char *dtype;   /* the file's dtype name ("F32"); static */
  int graft_dt;        /* its graft_dtype, or -1 when graft has none */
  int rank;
  const int64_t *dims; /* rank dims, owned by the table */
  int64_t begin, end;  /* data_offsets: bytes of the data section */
} graft__st_entry;

typedef struct graft__st_table {
  int64_t n;
  graft__st_entry *entries; /* sorted by key (strcmp) */
  int64_t data_at;          /* file offset of the data section: 8 + N */
  int64_t data_bytes;       /* its size: the file size - data_at */
  graft__arena mem;         /* keys and dims */
} graft__st_table;

/* Validate the file bytes [0, size) (see above) into *t, which the caller
 * frees with graft__st_table_free (also after a failure).  On failure why
 * (GRAFT__MSG_LEN bytes) says which rule failed, naming the key. */
graft_status graft__st_parse(const uint8_t *file, int64_t size, graft__st_table *t, char *why);
void graft__st_table_free(graft__st_table *t);

/* The entry of t named key, or NULL. */
const graft__st_entry *graft__st_find(const graft__st_table *t, const char *key);

/* A header for n tensors in this order (key, graft_dt, rank, dims of each
 * entry; begin and end are set here, the data laid out back to back), with
 * "__metadata__" naming graft and its version: *out (free with
 * graft__free) receives the 8-byte length and the JSON padded with spaces
 * to a multiple of GRAFT__ST_ALIGN, *len its size (the data section
 * follows).  GRAFT_OK, or GRAFT_ENOMEM, or GRAFT_EINVAL when the header
 * would exceed GRAFT__ST_MAX_HEADER (about a million tensors), with why. */
graft_status graft__st_header(int64_t n, graft__st_entry *entries, uint8_t **out, int64_t *len,
                              char *why);

/* The safetensors name of a graft dtype ("F32"). */
const char *graft__st_dtype_name(graft_dtype dt);

#endif /* GRAFT_SAFETENSORS_H */
