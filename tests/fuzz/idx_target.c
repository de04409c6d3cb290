/* The `idx` fuzz target: the IDX reader of the Fashion-MNIST example
 * (examples/idx.c), on the bytes of an images file and a labels file.
 *
 * An input: a flags byte, the length of file A (2 bytes, little-endian,
 * clipped to what follows), A's bytes, then file B's bytes (the rest).  A
 * is read as images (rank 3), B as labels (rank 1).  Flags: bit 0 / bit 1
 * gzip A / B here before reading (the reader then inflates what the
 * fuzzer wrote as plain), bit 2 asks idx_dataset_make for 28 x 28 images
 * (else any size), bits 4-5 the gzip level (1, 6, 9 or 0: stored).  Bytes
 * the fuzzer writes may themselves be gzip (1f 8b), read as such.
 *
 * Each file is read twice: from memory (idx_read_mem: inflate here) and
 * from a temporary file (idx_read_file: zlib's gzread).  Findings (fz_die),
 * besides what the sanitizers report:
 *   - the two readers disagreeing: one fails and not the other, or their
 *     dims or bytes differ;
 *   - a failure whose message does not start with the file's name, or that
 *     leaves the output non-zero;
 *   - where the harness knows the plain bytes (all but fuzzer-written
 *     gzip): a success on bytes that break the format (magic 00 00 08,
 *     the rank, a size of exactly header + product of dims, under the
 *     limit), a failure on bytes that keep it, or data other than the
 *     bytes after the header;
 *   - idx_dataset_make accepting a pair that breaks its rules (counts,
 *     sizes, labels in 0..9) or refusing one that keeps them, naming the
 *     wrong file, or moving the data on a failure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "fuzz.h"
#include "idx.h"

static char g_dir[64], g_path[2][96];

/* What the replayed corpus reached (fz_target_check). */
enum {
  R_SPLIT_OK,
  R_GZIP_OK,
  R_RAW_GZIP_OK,
  R_BAD_MAGIC,
  R_TYPE,
  R_RANK,
  R_TRUNCATED,
  R_TRAILING,
  R_LIMIT,
  R_GZIP_CORRUPT,
  R_LABEL,
  R_COUNTS,
  R_SIZE,
  R_COUNT
};
static const char *const reached_name[R_COUNT] = {"a split that loads",
                                                  "a gzip file (compressed here) that reads",
                                                  "a gzip file written by the fuzzer that reads",
                                                  "a bad magic",
                                                  "an unsupported type",
                                                  "a wrong rank",
                                                  "a truncated file",
                                                  "bytes after the data",
                                                  "a size over the limit",
                                                  "corrupt gzip data",
                                                  "a label out of range",
                                                  "counts that differ",
                                                  "a wrong image size"};
static int reached[R_COUNT];

static void note(const char *msg) {
  static const struct {
    const char *text;
    int r;
  } kinds[] = {{"bad magic", R_BAD_MAGIC},       {"data type", R_TYPE},
               {"dims, expected", R_RANK},       {"truncated", R_TRUNCATED},
               {"bytes after the", R_TRAILING},  {"-byte limit", R_LIMIT},
               {"corrupt gzip", R_GZIP_CORRUPT}, {"out of range", R_LABEL},
               {"wrong counts: ", R_COUNTS},     {"pixels", R_SIZE}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strstr(msg, kinds[i].text)) reached[kinds[i].r] = 1;
}

static void remove_files(void) {
  for (int i = 0; i < 2; i++) unlink(g_path[i]);
  rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  /* tmpfs where there is one: the files are rewritten at every input. */
  struct stat st;
  snprintf(g_dir, sizeof g_dir, "%s/graft_fuzz_idx_XXXXXX",
           stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
               ? "/dev/shm"
               : "/tmp");
  if (!mkdtemp(g_dir)) fz_die("harness: mkdtemp: %s", strerror(errno));
  for (int i = 0; i < 2; i++) snprintf(g_path[i], sizeof g_path[i], "%s/%c.idx", g_dir, 'a' + i);
  atexit(remove_files);
  return 0;
}

/* ---- helpers ---------------------------------------------------------------------- */

/* n bytes gzip-compressed at level into a malloc'd block; *out_n its size. */
static uint8_t *gzip_bytes(const uint8_t *p, size_t n, int level, size_t *out_n) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    fz_die("harness: deflateInit2");
  size_t cap = deflateBound(&zs, (uLong)n) + 32;
  uint8_t *out = malloc(cap);
  if (!out) fz_die("harness: out of memory");
  zs.next_in = (Bytef *)p;
  zs.avail_in = (uInt)n;
  zs.next_out = out;
  zs.avail_out = (uInt)cap;
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) fz_die("harness: deflate");
  *out_n = cap - zs.avail_out;
  deflateEnd(&zs);
  return out;
}

/* A new file each time: truncating the old one would make ext4 flush it
 * to disk at close (auto_da_alloc), a few ms per input. */
static void write_file(const char *path, const uint8_t *p, size_t n) {
  unlink(path);
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) fz_die("harness: writing %s", path);
}

static int is_zero(const idx_array *a) {
  return a->rank == 0 && a->count == 0 && a->data == NULL && a->dims[0] == 0;
}

static void check_failure(int rc, const char *name, const char *err, const idx_array *a) {
  if (rc != -1) fz_die("%s: status %d, neither 0 nor -1", name, rc);
  if (strncmp(err, name, strlen(name)) || strncmp(err + strlen(name), ": ", 2))
    fz_die("%s: failure message does not start with the file's name: \"%s\"", name, err);
  if (!is_zero(a)) fz_die("%s: a failure left the output set", name);
}

/* The harness's own reading of plain bytes: 1 when they are a valid IDX
 * file of rank, with its dims and data offset. */
static int valid_plain(const uint8_t *p, size_t n, int rank, int64_t *dims, size_t *data_at) {
  if (n < 4 || p[0] || p[1] || p[2] != 0x08 || p[3] != rank) return 0;
  if (n < 4 + 4 * (size_t)rank) return 0;
  int64_t count = 1;
  for (int i = 0; i < rank; i++) {
    const uint8_t *d = p + 4 + 4 * i;
    dims[i] = (int64_t)d[0] << 24 | (int64_t)d[1] << 16 | (int64_t)d[2] << 8 | d[3];
    count *= dims[i];
    if (count > IDX_MAX_BYTES) return 0;
  }
  *data_at = 4 + 4 * (size_t)rank;
  return n - *data_at == (size_t)count;
}

/* Read one file both ways and check them; returns 1 with *out set (from
 * memory) on success. */
static int read_both(int which, const uint8_t *bytes, size_t n, const uint8_t *plain,
                     size_t plain_n, int rank, idx_array *out) {
  const char *name = which ? "B.idx" : "A.idx";
  char err_m[1024] = "", err_f[1024] = "";
  idx_array f;
  int rm = idx_read_mem(name, bytes, n, rank, out, err_m, sizeof err_m);
  write_file(g_path[which], bytes, n);
  int rf = idx_read_file(g_path[which], rank, &f, err_f, sizeof err_f);
  if (rm) check_failure(rm, name, err_m, out);
  if (rf) check_failure(rf, g_path[which], err_f, &f);
  if (!rm != !rf)
    fz_die("%s: memory and file readers disagree: memory %s, file %s", name, rm ? err_m : "ok",
           rf ? err_f : "ok");
  if (!rm) {
    if (out->rank != rank || f.rank != rank || out->count != f.count ||
        memcmp(out->dims, f.dims, sizeof f.dims) || memcmp(out->data, f.data, (size_t)f.count))
      fz_die("%s: memory and file readers read different arrays", name);
    if (!out->data) fz_die("%s: a success without data", name);
  } else {
    note(err_m);
  }
  idx_array_free(&f);
  if (plain) {
    int64_t dims[IDX_MAX_RANK];
    size_t at = 0;
    int ok = valid_plain(plain, plain_n, rank, dims, &at);
    if (ok && rm && !strstr(err_m, "out of memory"))
      fz_die("%s: refused a valid file: %s", name, err_m);
    if (!ok && !rm) fz_die("%s: accepted a malformed file", name);
    if (!rm) {
      for (int i = 0; i < rank; i++)
        if (out->dims[i] != dims[i])
          fz_die("%s: dim %d read as %lld, is %lld", name, i, (long long)out->dims[i],
                 (long long)dims[i]);
      if (memcmp(out->data, plain + at, plain_n - at))
        fz_die("%s: data differ from the file's", name);
    }
  }
  return !rm;
}

/* ---- one input ------------------------------------------------------------------- */

static void check_split(idx_array *a, idx_array *b, int want_28) {
  char err[1024] = "";
  idx_dataset d;
  int rows = want_28 ? 28 : 0;
  uint8_t *ad = a->data, *bd = b->data;
  int64_t n = a->dims[0];
  int ok = a->rank == 3 && b->rank == 1 && a->dims[0] > 0 && a->dims[1] > 0 && a->dims[2] > 0 &&
           (!want_28 || (a->dims[1] == 28 && a->dims[2] == 28)) && b->dims[0] == a->dims[0];
  const char *culprit = a->dims[0] > 0 && a->dims[1] > 0 && a->dims[2] > 0 &&
                                (!want_28 || (a->dims[1] == 28 && a->dims[2] == 28))
                            ? "B.idx"
                            : "A.idx";
  for (int64_t i = 0; ok && i < b->count; i++) ok = b->data[i] < 10;
  int rc = idx_dataset_make(a, "A.idx", b, "B.idx", rows, rows, 10, &d, err, sizeof err);
  if (ok != !rc)
    fz_die("idx_dataset_make: %s a split the harness %s (%s)", rc ? "refused" : "accepted",
           ok ? "accepts" : "refuses", err);
  if (rc) {
    note(err);
    if (strncmp(err, culprit, 5)) fz_die("idx_dataset_make names the wrong file: \"%s\"", err);
    if (a->data != ad || b->data != bd) fz_die("idx_dataset_make moved data on a failure");
    return;
  }
  reached[R_SPLIT_OK] = 1;
  if (d.images != ad || d.labels != bd || a->data || b->data || d.n != n)
    fz_die("idx_dataset_make: the data did not move into the split");
  idx_dataset_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  uint8_t flags = data[0];
  size_t len_a = (size_t)data[1] | (size_t)data[2] << 8, rest = size - 3;
  if (len_a > rest) len_a = rest;
  const uint8_t *raw[2] = {data + 3, data + 3 + len_a};
  size_t raw_n[2] = {len_a, rest - len_a};
  static const int levels[4] = {1, 6, 9, 0};
  int level = levels[(flags >> 4) & 3];
  idx_array arr[2];
  int ok[2];
  for (int k = 0; k < 2; k++) {
    int here = flags >> k & 1;
    size_t n = raw_n[k];
    uint8_t *gz = here ? gzip_bytes(raw[k], raw_n[k], level, &n) : NULL;
    const uint8_t *bytes = here ? gz : raw[k];
    int fuzzer_gzip = !here && raw_n[k] >= 2 && raw[k][0] == 0x1f && raw[k][1] == 0x8b;
    ok[k] = read_both(k, bytes, n, fuzzer_gzip ? NULL : raw[k], raw_n[k], k ? 1 : 3, &arr[k]);
    if (ok[k] && here) reached[R_GZIP_OK] = 1;
    if (ok[k] && fuzzer_gzip) reached[R_RAW_GZIP_OK] = 1;
    free(gz);
  }
  if (ok[0] && ok[1]) check_split(&arr[0], &arr[1], flags >> 2 & 1);
  for (int k = 0; k < 2; k++) idx_array_free(&arr[k]);
  return 0;
}

int fz_target_check(void) { return fz_check_reached(R_COUNT, reached, reached_name); }

/* ---- seeds ------------------------------------------------------------------------ */

typedef struct buf {
  uint8_t b[1024];
  size_t n;
} buf;

static void put(buf *s, const void *p, size_t n) {
  if (s->n + n > sizeof s->b) fz_die("harness: seed too long");
  memcpy(s->b + s->n, p, n);
  s->n += n;
}

/* An IDX file: magic 00 00 type rank, dims, then count bytes of a pattern
 * (labels: i % 10, or label_at set to 10). */
static void put_idx(buf *s, uint8_t type, int rank, const uint32_t *dims, size_t count,
                    int64_t bad_label_at) {
  uint8_t h[4] = {0, 0, type, (uint8_t)rank};
  put(s, h, 4);
  for (int i = 0; i < rank; i++) {
    uint8_t d[4] = {(uint8_t)(dims[i] >> 24), (uint8_t)(dims[i] >> 16), (uint8_t)(dims[i] >> 8),
                    (uint8_t)dims[i]};
    put(s, d, 4);
  }
  for (size_t i = 0; i < count; i++) {
    uint8_t v = rank == 1 ? (uint8_t)(i % 10) : (uint8_t)(i * 37);
    if ((int64_t)i == bad_label_at) v = 10;
    put(s, &v, 1);
  }
}

/* An input: flags, then files a and b. */
static int seed(const char *dir, const char *name, uint8_t flags, const buf *a, const buf *b) {
  char path[1024];
  snprintf(path, sizeof path, "%s/seed-%s", dir, name);
  FILE *f = fopen(path, "wb");
  uint8_t h[3] = {flags, (uint8_t)a->n, (uint8_t)(a->n >> 8)};
  if (!f || fwrite(h, 1, 3, f) != 3 || fwrite(a->b, 1, a->n, f) != a->n ||
      fwrite(b->b, 1, b->n, f) != b->n || fclose(f)) {
    perror(path);
    return -1;
  }
  return 0;
}

int fz_target_seeds(const char *dir) {
  if (mkdir(dir, 0777) && errno != EEXIST) {
    perror(dir);
    return -1;
  }
  const uint32_t img[3] = {2, 5, 4}, img28[3] = {1, 28, 28}, lab[1] = {2}, lab1[1] = {1},
                 lab3[1] = {3}, huge[3] = {60000, 28, 28}, over[3] = {65536, 65536, 1};
  buf a = {0}, b = {0}, a28 = {0}, b1 = {0}, t = {0};
  put_idx(&a, 0x08, 3, img, 40, -1);
  put_idx(&b, 0x08, 1, lab, 2, -1);
  put_idx(&a28, 0x08, 3, img28, 784, -1);
  put_idx(&b1, 0x08, 1, lab1, 1, -1);
  int rc = 0;
  rc |= seed(dir, "plain", 0x00, &a, &b);
  rc |= seed(dir, "gzip-both", 0x13, &a, &b);
  rc |= seed(dir, "gzip-stored", 0x33, &a, &b);
  rc |= seed(dir, "28x28", 0x04, &a28, &b1);
  rc |= seed(dir, "28x28-wanted-wrong-size", 0x04, &a, &b);
  /* gzip written into the input itself: one member, then two */
  size_t gn;
  uint8_t *gz = gzip_bytes(a.b, a.n, 6, &gn);
  t.n = 0;
  put(&t, gz, gn);
  rc |= seed(dir, "raw-gzip", 0x00, &t, &b);
  t.b[gn - 6] ^= 0xff; /* its CRC-32 */
  rc |= seed(dir, "raw-gzip-bad-crc", 0x00, &t, &b);
  free(gz);
  t.n = 0;
  gz = gzip_bytes(a.b, 10, 6, &gn);
  put(&t, gz, gn);
  free(gz);
  gz = gzip_bytes(a.b + 10, a.n - 10, 6, &gn);
  put(&t, gz, gn);
  rc |= seed(dir, "raw-gzip-two-members", 0x00, &t, &b);
  t.n = 0;
  put(&t, gz, gn / 2);
  rc |= seed(dir, "raw-gzip-cut", 0x00, &t, &b);
  free(gz);
  /* malformed: magic, type, rank, truncations, trailing bytes, limits */
  t = a;
  t.b[0] = 0x50;
  rc |= seed(dir, "bad-magic", 0x00, &t, &b);
  t = a;
  t.b[2] = 0x0D;
  rc |= seed(dir, "float-type", 0x00, &t, &b);
  rc |= seed(dir, "rank-swapped", 0x00, &b, &a);
  t = a;
  t.n = 3;
  rc |= seed(dir, "cut-magic", 0x00, &t, &b);
  t.n = 9;
  rc |= seed(dir, "cut-dims", 0x01, &t, &b);
  t.n = a.n - 5;
  rc |= seed(dir, "cut-data", 0x01, &t, &b);
  t = a;
  put(&t, "xyz", 3);
  rc |= seed(dir, "trailing", 0x00, &t, &b);
  t.n = 0;
  put_idx(&t, 0x08, 3, huge, 16, -1);
  rc |= seed(dir, "huge-claim", 0x00, &t, &b);
  t.n = 0;
  put_idx(&t, 0x08, 3, over, 0, -1);
  rc |= seed(dir, "over-limit", 0x00, &t, &b);
  /* a split: a label out of range, counts that differ */
  t.n = 0;
  put_idx(&t, 0x08, 1, lab, 2, 1);
  rc |= seed(dir, "label-10", 0x02, &a, &t);
  t.n = 0;
  put_idx(&t, 0x08, 1, lab3, 3, -1);
  rc |= seed(dir, "three-labels", 0x00, &a, &t);
  return rc ? -1 : 0;
}
