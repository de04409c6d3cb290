/* idx: IDX files (the MNIST / Fashion-MNIST format), plain or gzip.
 *
 * An IDX file is a 4-byte magic (0x00 0x00, a type code, the number of
 * dims), one big-endian uint32 per dim, then the data, row-major.  Only the
 * unsigned-byte type (0x08) is read: it is what every MNIST-family file
 * holds.  gzip and plain files are told apart by their content (gzip's
 * 1f 8b magic), as zlib's gzread does; concatenated gzip members are one
 * stream, and bytes after the last member that do not start another are
 * ignored (gzread's rule).
 *
 * Nothing here prints or aborts: a failure returns -1 with a message that
 * starts with the file's name ("train-labels-idx1-ubyte.gz: truncated:
 * ...") in err, and leaves the output zeroed.  Sizes are checked before
 * any arithmetic, and memory grows with the bytes actually read, so a
 * header that claims more than the file holds costs no more than the file.
 *
 * Used by examples/fashion_mnist.c, its tests (tests/examples/test_idx.c)
 * and the IDX fuzz target (tests/fuzz/idx_target.c).
 */
#ifndef GRAFT_EXAMPLES_IDX_H
#define GRAFT_EXAMPLES_IDX_H

#include <stddef.h>
#include <stdint.h>

#define IDX_MAX_RANK 3
/* Data bytes one file may declare (the Fashion-MNIST training images are
 * 47 MB). */
#define IDX_MAX_BYTES ((int64_t)1 << 30)

typedef struct idx_array {
  int rank;                   /* 1..IDX_MAX_RANK */
  int64_t dims[IDX_MAX_RANK]; /* dims[0..rank) */
  int64_t count;              /* product of the dims */
  uint8_t *data;              /* count bytes; free with idx_array_free */
} idx_array;

/* Read the file at path (gzip or plain) expecting rank dims.  0 on
 * success; -1 with the reason in err (errlen bytes, NUL-terminated). */
int idx_read_file(const char *path, int rank, idx_array *out, char *err, size_t errlen);

/* The same from size bytes in memory (a file's contents); name is the
 * file name used in messages. */
int idx_read_mem(const char *name, const void *bytes, size_t size, int rank, idx_array *out,
                 char *err, size_t errlen);

/* Free a's data and zero it; a zeroed or NULL a is a no-op. */
void idx_array_free(idx_array *a);

/* One split of a labelled image set: n images of rows x cols bytes and n
 * labels in [0, n_classes). */
typedef struct idx_dataset {
  int64_t n;
  int rows, cols;
  uint8_t *images; /* n * rows * cols bytes */
  uint8_t *labels; /* n bytes */
} idx_dataset;

/* Check that images (rank 3) and labels (rank 1), read from the files
 * named images_name and labels_name, form one split: as many labels as
 * images, at least one image, images of rows x cols (each > 0; 0 = any),
 * every label below n_classes.  On success the arrays' data move into out
 * (images and labels are zeroed); on failure nothing moves.  0 or -1 with
 * err naming the file at fault. */
int idx_dataset_make(idx_array *images, const char *images_name, idx_array *labels,
                     const char *labels_name, int rows, int cols, int n_classes, idx_dataset *out,
                     char *err, size_t errlen);

/* Read split "train" or "t10k" from dir: <split>-images-idx3-ubyte and
 * <split>-labels-idx1-ubyte, each the plain file where it exists, else
 * the name with .gz (as Debian ships them; messages name the .gz then),
 * and check them as idx_dataset_make does. */
int idx_dataset_load(const char *dir, const char *split, int rows, int cols, int n_classes,
                     idx_dataset *out, char *err, size_t errlen);

/* Free d's arrays and zero it; NULL is a no-op. */
void idx_dataset_free(idx_dataset *d);

#endif /* GRAFT_EXAMPLES_IDX_H */
