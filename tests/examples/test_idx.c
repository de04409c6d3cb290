/* The IDX reader of the Fashion-MNIST example (examples/idx.c) on small
 * generated files, gzip and plain, and on malformed ones: each failure a
 * message naming the file and the fault, the output left zeroed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "idx.h"

static char g_dir[64];
static char g_err[1024];

/* dir/name; a static buffer per call site is enough for these tests. */
static const char *path_of(const char *name) {
  static char p[4][256];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
  return p[k];
}

/* The bytes of an IDX file: magic 00 00 type rank, dims, data, extra bytes
 * appended.  Returns the size; *out is malloc'd. */
static size_t idx_bytes(uint8_t type, int rank, const uint32_t *dims, const uint8_t *data, size_t n,
                        size_t extra, uint8_t **out) {
  size_t size = 4 + 4 * (size_t)rank + n + extra;
  uint8_t *b = malloc(size);
  assert_non_null(b);
  b[0] = b[1] = 0;
  b[2] = type;
  b[3] = (uint8_t)rank;
  for (int i = 0; i < rank; i++)
    for (int k = 0; k < 4; k++) b[4 + 4 * i + k] = (uint8_t)(dims[i] >> (24 - 8 * k));
  if (n) memcpy(b + 4 + 4 * rank, data, n);
  memset(b + 4 + 4 * rank + n, 0x5a, extra);
  *out = b;
  return size;
}

/* Write size bytes to dir/name, gzip-compressed when gz. */
static const char *write_file(const char *name, const uint8_t *b, size_t size, int gz) {
  const char *path = path_of(name);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    if (size) assert_int_equal(gzwrite(f, b, (unsigned)size), (int)size);
    assert_int_equal(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
  }
  return path;
}

/* An IDX file written to dir/name; returns its path. */
static const char *write_idx(const char *name, int gz, uint8_t type, int rank, const uint32_t *dims,
                             const uint8_t *data, size_t n, size_t extra) {
  uint8_t *b;
  size_t size = idx_bytes(type, rank, dims, data, n, extra, &b);
  const char *path = write_file(name, b, size, gz);
  free(b);
  return path;
}

static uint8_t *pattern(size_t n, unsigned seed) {
  uint8_t *p = malloc(n ? n : 1);
  assert_non_null(p);
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 131 + seed * 17 + (i >> 8));
  return p;
}

/* A failure: -1, a message that names the file and holds what, a zeroed
 * output. */
static void assert_failed(int rc, const char *file, const char *what, const idx_array *a) {
  assert_int_equal(rc, -1);
  if (!strstr(g_err, file) || !strstr(g_err, what))
    fail_msg("message \"%s\" should name \"%s\" and say \"%s\"", g_err, file, what);
  assert_null(a->data);
  assert_int_equal(a->rank, 0);
  assert_int_equal(a->count, 0);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/graft_test_idx_XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* ---- valid files -------------------------------------------------------------- */

static void test_idx_read_file__plain_and_gzip(void **state) {
  (void)state;
  const uint32_t dims[3] = {5, 4, 3};
  uint8_t *data = pattern(60, 1);
  for (int gz = 0; gz < 2; gz++) {
    const char *path = write_idx(gz ? "img.gz" : "img", gz, 0x08, 3, dims, data, 60, 0);
    idx_array a;
    assert_int_equal(idx_read_file(path, 3, &a, g_err, sizeof g_err), 0);
    assert_int_equal(a.rank, 3);
    assert_int_equal(a.dims[0], 5);
    assert_int_equal(a.dims[1], 4);
    assert_int_equal(a.dims[2], 3);
    assert_int_equal(a.count, 60);
    assert_memory_equal(a.data, data, 60);
    idx_array_free(&a);
    assert_null(a.data);
  }
  free(data);
}

/* Over a megabyte, so the buffer grows several times, and gzip in two
 * members (what `cat a.gz b.gz` makes): one stream to the reader. */
static void test_idx_read_file__large_and_two_gzip_members(void **state) {
  (void)state;
  const uint32_t dims[3] = {3000, 28, 28};
  size_t n = 3000 * 28 * 28;
  uint8_t *data = pattern(n, 2), *b;
  size_t size = idx_bytes(0x08, 3, dims, data, n, 0, &b);
  const char *path = path_of("two.gz");
  for (int part = 0; part < 2; part++) {
    gzFile f = gzopen(path, part ? "ab" : "wb");
    assert_non_null(f);
    size_t at = part ? size / 3 : 0, len = part ? size - size / 3 : size / 3;
    assert_int_equal(gzwrite(f, b + at, (unsigned)len), (int)len);
    assert_int_equal(gzclose(f), Z_OK);
  }
  idx_array a, m;
  assert_int_equal(idx_read_file(path, 3, &a, g_err, sizeof g_err), 0);
  assert_int_equal(a.count, (int64_t)n);
  assert_memory_equal(a.data, data, n);
  /* The memory reader agrees, on the same compressed bytes. */
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  uint8_t *gzbytes = malloc(4 << 20);
  assert_non_null(gzbytes);
  size_t got = fread(gzbytes, 1, 4 << 20, f);
  fclose(f);
  assert_int_equal(idx_read_mem("two.gz", gzbytes, got, 3, &m, g_err, sizeof g_err), 0);
  assert_int_equal(m.count, (int64_t)n);
  assert_memory_equal(m.data, data, n);
  idx_array_free(&a);
  idx_array_free(&m);
  free(gzbytes);
  free(b);
  free(data);
}

static void test_idx_read_mem__plain_labels_and_empty(void **state) {
  (void)state;
  const uint32_t dims[1] = {7}, zero[1] = {0};
  uint8_t labels[7] = {0, 1, 2, 3, 9, 8, 7}, *b;
  size_t size = idx_bytes(0x08, 1, dims, labels, 7, 0, &b);
  idx_array a;
  assert_int_equal(idx_read_mem("labels", b, size, 1, &a, g_err, sizeof g_err), 0);
  assert_int_equal(a.rank, 1);
  assert_int_equal(a.count, 7);
  assert_memory_equal(a.data, labels, 7);
  idx_array_free(&a);
  free(b);
  size = idx_bytes(0x08, 1, zero, NULL, 0, 0, &b);
  assert_int_equal(idx_read_mem("empty", b, size, 1, &a, g_err, sizeof g_err), 0);
  assert_int_equal(a.count, 0);
  assert_non_null(a.data);
  idx_array_free(&a);
  free(b);
}

/* ---- malformed files ------------------------------------------------------------ */

static void test_idx_read_file__bad_magic(void **state) {
  (void)state;
  const uint32_t dims[1] = {2};
  uint8_t d[2] = {1, 2}, *b;
  size_t size = idx_bytes(0x08, 1, dims, d, 2, 0, &b);
  b[0] = 0x50; /* "PK": a zip file, say */
  for (int gz = 0; gz < 2; gz++) {
    const char *path = write_file(gz ? "magic.gz" : "magic", b, size, gz);
    idx_array a;
    assert_failed(idx_read_file(path, 1, &a, g_err, sizeof g_err), path, "bad magic", &a);
  }
  free(b);
}

static void test_idx_read_file__unsupported_type_and_wrong_rank(void **state) {
  (void)state;
  const uint32_t dims[3] = {1, 2, 2};
  uint8_t d[4] = {0};
  idx_array a;
  const char *path = write_idx("float.gz", 1, 0x0D, 3, dims, d, 4, 0);
  assert_failed(idx_read_file(path, 3, &a, g_err, sizeof g_err), path, "data type 0x0d", &a);
  path = write_idx("rank.gz", 1, 0x08, 3, dims, d, 4, 0);
  assert_failed(idx_read_file(path, 1, &a, g_err, sizeof g_err), path, "3 dims, expected 1", &a);
}

static void test_idx_read_file__truncated(void **state) {
  (void)state;
  const uint32_t dims[3] = {10, 28, 28};
  size_t n = 10 * 28 * 28;
  uint8_t *data = pattern(n, 3), *b;
  size_t size = idx_bytes(0x08, 3, dims, data, n, 0, &b);
  idx_array a;
  for (int gz = 0; gz < 2; gz++) {
    /* Cut in the magic, in the dims, in the data. */
    const size_t cuts[3] = {3, 9, size - 100};
    const char *what[3] = {"4-byte IDX magic", "header ends after", "the file holds 7740"};
    for (int c = 0; c < 3; c++) {
      const char *path = write_file(gz ? "cut.gz" : "cut", b, cuts[c], gz);
      assert_failed(idx_read_file(path, 3, &a, g_err, sizeof g_err), path, what[c], &a);
      assert_non_null(strstr(g_err, "truncated"));
    }
  }
  free(b);
  free(data);
}

/* A gzip file cut short (a download that stopped) and one with a byte
 * flipped in its compressed data. */
static void test_idx_read_file__broken_gzip(void **state) {
  (void)state;
  const uint32_t dims[3] = {20, 28, 28};
  size_t n = 20 * 28 * 28;
  uint8_t *data = pattern(n, 4);
  const char *path = write_idx("whole.gz", 1, 0x08, 3, dims, data, n, 0);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  uint8_t gz[65536];
  size_t size = fread(gz, 1, sizeof gz, f);
  fclose(f);
  assert_true(size > 200 && size < sizeof gz);
  idx_array a;
  const char *cut = write_file("short.gz", gz, size / 2, 0);
  assert_failed(idx_read_file(cut, 3, &a, g_err, sizeof g_err), cut, "truncated", &a);
  assert_failed(idx_read_mem("short.gz", gz, size / 2, 3, &a, g_err, sizeof g_err), "short.gz",
                "truncated", &a);
  gz[size - 6] ^= 0xff; /* the CRC-32 at the end: the data no longer match it */
  const char *bad = write_file("crc.gz", gz, size, 0);
  assert_failed(idx_read_file(bad, 3, &a, g_err, sizeof g_err), bad, "corrupt gzip data", &a);
  assert_failed(idx_read_mem("crc.gz", gz, size, 3, &a, g_err, sizeof g_err), "crc.gz",
                "corrupt gzip data", &a);
  free(data);
}

static void test_idx_read_file__trailing_bytes_are_wrong_counts(void **state) {
  (void)state;
  const uint32_t dims[1] = {4};
  uint8_t d[4] = {1, 2, 3, 4};
  idx_array a;
  for (int gz = 0; gz < 2; gz++) {
    const char *path = write_idx(gz ? "long.gz" : "long", gz, 0x08, 1, dims, d, 4, 3);
    assert_failed(idx_read_file(path, 1, &a, g_err, sizeof g_err), path,
                  "wrong counts: 3 bytes after", &a);
  }
}

/* A header that claims more than any file here holds: refused before any
 * allocation when over the limit, and a clear truncation otherwise (the
 * buffer grows with the bytes read, not with the claim). */
static void test_idx_read_file__huge_counts(void **state) {
  (void)state;
  const uint32_t huge[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu}, big[3] = {60000, 28, 28};
  uint8_t d[16] = {0};
  idx_array a;
  const char *path = write_idx("huge", 0, 0x08, 3, huge, d, 16, 0);
  assert_failed(idx_read_file(path, 3, &a, g_err, sizeof g_err), path, "over the", &a);
  path = write_idx("big", 0, 0x08, 3, big, d, 16, 0);
  assert_failed(idx_read_file(path, 3, &a, g_err, sizeof g_err), path,
                "declares 60000 x 28 x 28 = 47040000 data bytes, the file holds 16", &a);
}

static void test_idx_read_file__missing_file(void **state) {
  (void)state;
  idx_array a;
  const char *path = path_of("nothing-here.gz");
  assert_failed(idx_read_file(path, 1, &a, g_err, sizeof g_err), path, "cannot open", &a);
}

/* ---- a split: images and labels ---------------------------------------------------- */

/* Writes dir/<split>-images-idx3-ubyte(.gz) and the labels file. */
static void write_split(const char *split, int gz, uint32_t n_images, uint32_t rows, uint32_t cols,
                        uint32_t n_labels, const uint8_t *labels) {
  char name[128];
  const uint32_t idims[3] = {n_images, rows, cols}, ldims[1] = {n_labels};
  size_t n = (size_t)n_images * rows * cols;
  uint8_t *img = pattern(n, 5);
  snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", split, gz ? ".gz" : "");
  write_idx(name, gz, 0x08, 3, idims, img, n, 0);
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", split, gz ? ".gz" : "");
  write_idx(name, gz, 0x08, 1, ldims, labels, n_labels, 0);
  free(img);
}

static void assert_load_fails(const char *split, const char *file, const char *what) {
  idx_dataset d;
  assert_int_equal(idx_dataset_load(g_dir, split, 28, 28, 10, &d, g_err, sizeof g_err), -1);
  if (!strstr(g_err, file) || !strstr(g_err, what))
    fail_msg("message \"%s\" should name \"%s\" and say \"%s\"", g_err, file, what);
  assert_null(d.images);
  assert_null(d.labels);
  assert_int_equal(d.n, 0);
}

static void test_idx_dataset_load__gzip_and_plain(void **state) {
  (void)state;
  const uint8_t labels[6] = {0, 9, 3, 3, 1, 5};
  write_split("gzsplit", 1, 6, 28, 28, 6, labels);
  write_split("plainsplit", 0, 6, 28, 28, 6, labels);
  const char *splits[2] = {"gzsplit", "plainsplit"};
  for (int k = 0; k < 2; k++) {
    idx_dataset d;
    assert_int_equal(idx_dataset_load(g_dir, splits[k], 28, 28, 10, &d, g_err, sizeof g_err), 0);
    assert_int_equal(d.n, 6);
    assert_int_equal(d.rows, 28);
    assert_int_equal(d.cols, 28);
    assert_memory_equal(d.labels, labels, 6);
    uint8_t *img = pattern(6 * 28 * 28, 5);
    assert_memory_equal(d.images, img, 6 * 28 * 28);
    free(img);
    idx_dataset_free(&d);
    assert_null(d.images);
  }
}

static void test_idx_dataset_load__label_out_of_range(void **state) {
  (void)state;
  const uint8_t labels[4] = {0, 9, 10, 3};
  write_split("badlabel", 1, 4, 28, 28, 4, labels);
  assert_load_fails("badlabel", "badlabel-labels-idx1-ubyte.gz",
                    "label 10 of item 2 is out of range");
}

static void test_idx_dataset_load__counts_differ(void **state) {
  (void)state;
  const uint8_t labels[5] = {0, 1, 2, 3, 4};
  write_split("fewer", 1, 5, 28, 28, 4, labels);
  assert_load_fails("fewer", "fewer-labels-idx1-ubyte.gz",
                    "wrong counts: 4 labels for the 5 images");
  write_split("noimages", 1, 0, 28, 28, 0, labels);
  assert_load_fails("noimages", "noimages-images-idx3-ubyte.gz", "holds no images");
}

static void test_idx_dataset_load__wrong_image_size(void **state) {
  (void)state;
  const uint8_t labels[2] = {1, 2};
  write_split("small", 1, 2, 27, 28, 2, labels);
  assert_load_fails("small", "small-images-idx3-ubyte.gz", "27 x 28 pixels, expected 28 x 28");
}

static void test_idx_dataset_load__missing_labels_file(void **state) {
  (void)state;
  const uint8_t labels[2] = {1, 2};
  write_split("nolabels", 1, 2, 28, 28, 2, labels);
  assert_int_equal(unlink(path_of("nolabels-labels-idx1-ubyte.gz")), 0);
  assert_load_fails("nolabels", "nolabels-labels-idx1-ubyte.gz", "cannot open");
  assert_load_fails("nosuchsplit", "nosuchsplit-images-idx3-ubyte.gz", "cannot open");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_idx_read_file__plain_and_gzip),
      cmocka_unit_test(test_idx_read_file__large_and_two_gzip_members),
      cmocka_unit_test(test_idx_read_mem__plain_labels_and_empty),
      cmocka_unit_test(test_idx_read_file__bad_magic),
      cmocka_unit_test(test_idx_read_file__unsupported_type_and_wrong_rank),
      cmocka_unit_test(test_idx_read_file__truncated),
      cmocka_unit_test(test_idx_read_file__broken_gzip),
      cmocka_unit_test(test_idx_read_file__trailing_bytes_are_wrong_counts),
      cmocka_unit_test(test_idx_read_file__huge_counts),
      cmocka_unit_test(test_idx_read_file__missing_file),
      cmocka_unit_test(test_idx_dataset_load__gzip_and_plain),
      cmocka_unit_test(test_idx_dataset_load__label_out_of_range),
      cmocka_unit_test(test_idx_dataset_load__counts_differ),
      cmocka_unit_test(test_idx_dataset_load__wrong_image_size),
      cmocka_unit_test(test_idx_dataset_load__missing_labels_file),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
