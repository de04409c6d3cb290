/* idx: IDX files, plain or gzip (idx.h). */
#include "idx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- byte sources: a file through gzread, or memory through inflate ---- */

/* Where bytes come from.  A file goes through zlib's gz* layer, which reads
 * gzip and plain files alike; memory is inflated here with the same rules
 * (gzip when it starts with 1f 8b, one member after another, bytes after
 * the last member ignored), so the fuzz target can compare the two. */
typedef struct source {
  const char *name;
  gzFile gz;                /* a file, or NULL */
  const uint8_t *mem;       /* memory: all of it */
  size_t mem_size, mem_pos; /* plain memory: the next byte */
  z_stream zs;              /* gzip memory */
  int zs_live, zs_end;      /* inflateInit2 done; the stream is over */
  char *err;
  size_t errlen;
} source;

static int fail(source *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The message is "<name>: <what>"; always -1. */
static int fail(source *s, const char *fmt, ...) {
  if (!s->errlen) return -1;
  int n = snprintf(s->err, s->errlen, "%s: ", s->name);
  if (n >= 0 && (size_t)n < s->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err + n, s->errlen - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int is_gzip(const uint8_t *p, size_t n) { return n >= 2 && p[0] == 0x1f && p[1] == 0x8b; }

/* Up to n bytes of gzip memory into buf: the count (< n only at the end),
 * or -1. */
static int64_t inflate_some(source *s, uint8_t *buf, size_t n) {
  size_t got = 0;
  while (got < n && !s->zs_end) {
    s->zs.next_out = buf + got;
    s->zs.avail_out = (uInt)(n - got > UINT32_MAX ? UINT32_MAX : n - got);
    uInt before = s->zs.avail_out;
    int rc = inflate(&s->zs, Z_NO_FLUSH);
    got += before - s->zs.avail_out;
    if (rc == Z_STREAM_END) {
      /* Another member follows only if it starts with the magic. */
      if (is_gzip(s->zs.next_in, s->zs.avail_in)) {
        if (inflateReset(&s->zs) != Z_OK) return fail(s, "gzip: cannot restart the stream");
      } else {
        s->zs_end = 1;
      }
    } else if (rc == Z_BUF_ERROR || (rc == Z_OK && s->zs.avail_in == 0 && s->zs.avail_out)) {
      return fail(s, "truncated: the gzip stream ends in the middle");
    } else if (rc != Z_OK) {
      return fail(s, "corrupt gzip data (%s)", s->zs.msg ? s->zs.msg : zError(rc));
    }
  }
  return (int64_t)got;
}

/* Up to n bytes into buf: the count (< n only at the end), or -1. */
static int64_t source_read(source *s, void *buf, size_t n) {
  if (s->gz) {
    size_t got = 0;
    while (got < n) {
      unsigned ask = n - got > (1u << 30) ? 1u << 30 : (unsigned)(n - got);
      int r = gzread(s->gz, (uint8_t *)buf + got, ask);
      if (r < 0) {
        int code;
        const char *msg = gzerror(s->gz, &code);
        if (code == Z_ERRNO) return fail(s, "cannot read: %s", strerror(errno));
        if (code == Z_BUF_ERROR) return fail(s, "truncated: the gzip stream ends in the middle");
        return fail(s, "corrupt gzip data (%s)", msg);
      }
      if (r == 0) break;
      got += (size_t)r;
    }
    /* gzread reports a truncated gzip stream after the bytes it could
     * decode, as the end of the file; gzerror tells the two apart. */
    int code;
    const char *msg = gzerror(s->gz, &code);
    if (code == Z_BUF_ERROR) return fail(s, "truncated: the gzip stream ends in the middle");
    if (code != Z_OK) return fail(s, "corrupt gzip data (%s)", msg);
    return (int64_t)got;
  }
  if (s->zs_live) return inflate_some(s, buf, n);
  size_t left = s->mem_size - s->mem_pos, k = n < left ? n : left;
  if (k) memcpy(buf, s->mem + s->mem_pos, k);
  s->mem_pos += k;
  return (int64_t)k;
}

static int source_open_mem(source *s, const uint8_t *bytes, size_t size) {
  s->mem = bytes;
  s->mem_size = size;
  if (!is_gzip(bytes, size)) return 0;
  if (size > UINT32_MAX) return fail(s, "gzip data over 4 GiB in memory");
  /* 16 + MAX_WBITS: a gzip wrapper (header and CRC checked), not zlib's. */
  if (inflateInit2(&s->zs, 16 + MAX_WBITS) != Z_OK) return fail(s, "out of memory (zlib)");
  s->zs_live = 1;
  s->zs.next_in = (Bytef *)bytes;
  s->zs.avail_in = (uInt)size;
  return 0;
}

static void source_close(source *s) {
  if (s->gz) gzclose(s->gz);
  if (s->zs_live) inflateEnd(&s->zs);
}

/* ---- the format ---------------------------------------------------------- */

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void describe_dims(const idx_array *a, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < a->rank && at < len; i++) {
    int n = snprintf(buf + at, len - at, "%s%lld", i ? " x " : "", (long long)a->dims[i]);
    if (n < 0) break;
    at += (size_t)n;
  }
}

/* The header: magic, type, rank, dims; fills a's rank, dims and count. */
static int read_header(source *s, int rank, idx_array *a) {
  uint8_t h[4 + 4 * IDX_MAX_RANK];
  int64_t got = source_read(s, h, 4);
  if (got < 0) return -1;
  if (got < 4)
    return fail(s, "truncated: %lld bytes, shorter than the 4-byte IDX magic", (long long)got);
  if (h[0] || h[1])
    return fail(s, "bad magic %02x %02x %02x %02x: not an IDX file (expected 00 00 08 %02x)", h[0],
                h[1], h[2], h[3], rank);
  if (h[2] != 0x08)
    return fail(s, "IDX data type 0x%02x not supported (only 0x08, unsigned bytes)", h[2]);
  if (h[3] != rank)
    return fail(s, "an IDX file of %d dims, expected %d (%s)", h[3], rank,
                rank == 1   ? "labels"
                : rank == 3 ? "images"
                            : "the caller's rank");
  got = source_read(s, h + 4, 4 * (size_t)rank);
  if (got < 0) return -1;
  if (got < 4 * rank)
    return fail(s, "truncated: the header ends after %lld of its %d dim bytes", (long long)got,
                4 * rank);
  a->rank = rank;
  a->count = 1;
  for (int i = 0; i < rank; i++) {
    a->dims[i] = be32(h + 4 + 4 * i);
    /* Each dim is below 2^32, so count stays below 2^63 while it is at
     * most IDX_MAX_BYTES before a multiply. */
    a->count *= a->dims[i];
    if (a->count > IDX_MAX_BYTES) {
      char d[96];
      describe_dims(a, d, sizeof d);
      return fail(s, "the header declares %s%s bytes, over the %lld-byte limit", d,
                  i + 1 < rank ? " x ..." : "", (long long)IDX_MAX_BYTES);
    }
  }
  return 0;
}

/* The data: exactly count bytes, nothing after them.  The buffer grows
 * with what arrives, not with what the header claims. */
static int read_data(source *s, idx_array *a) {
  int64_t have = 0, cap = 0;
  while (have < a->count) {
    if (have == cap) {
      int64_t next = cap ? 2 * cap : 1 << 20;
      if (next > a->count) next = a->count;
      uint8_t *p = realloc(a->data, (size_t)next);
      if (!p) return fail(s, "out of memory (%lld bytes)", (long long)next);
      a->data = p;
      cap = next;
    }
    int64_t got = source_read(s, a->data + have, (size_t)(cap - have));
    if (got < 0) return -1;
    have += got;
    if (have < cap) break; /* the end */
  }
  char d[96];
  describe_dims(a, d, sizeof d);
  if (have < a->count)
    return fail(s, "truncated: the header declares %s = %lld data bytes, the file holds %lld", d,
                (long long)a->count, (long long)have);
  uint8_t extra[4096];
  int64_t more = 0, got;
  while ((got = source_read(s, extra, sizeof extra)) > 0) more += got;
  if (got < 0) return -1;
  if (more)
    return fail(s, "wrong counts: %lld bytes after the %s = %lld data bytes the header declares",
                (long long)more, d, (long long)a->count);
  return 0;
}

static int read_all(source *s, int rank, idx_array *out) {
  memset(out, 0, sizeof *out);
  if (rank < 1 || rank > IDX_MAX_RANK)
    return fail(s, "rank %d asked for, not in 1..%d", rank, IDX_MAX_RANK);
  idx_array a = {0};
  if (read_header(s, rank, &a) || read_data(s, &a)) {
    free(a.data);
    return -1;
  }
  if (!a.data) { /* zero items: a valid, empty array still owns a block */
    a.data = malloc(1);
    if (!a.data) return fail(s, "out of memory");
  }
  *out = a;
  return 0;
}

int idx_read_file(const char *path, int rank, idx_array *out, char *err, size_t errlen) {
  source s = {.name = path, .err = err, .errlen = errlen};
  memset(out, 0, sizeof *out);
  errno = 0;
  s.gz = gzopen(path, "rb");
  if (!s.gz) return fail(&s, "cannot open: %s", errno ? strerror(errno) : "out of memory (zlib)");
  int rc = read_all(&s, rank, out);
  source_close(&s);
  return rc;
}

int idx_read_mem(const char *name, const void *bytes, size_t size, int rank, idx_array *out,
                 char *err, size_t errlen) {
  source s = {.name = name, .err = err, .errlen = errlen};
  memset(out, 0, sizeof *out);
  int rc = source_open_mem(&s, bytes, size) ? -1 : read_all(&s, rank, out);
  source_close(&s);
  return rc;
}

void idx_array_free(idx_array *a) {
  if (!a) return;
  free(a->data);
  memset(a, 0, sizeof *a);
}

/* ---- a labelled split ------------------------------------------------------ */

int idx_dataset_make(idx_array *images, const char *images_name, idx_array *labels,
                     const char *labels_name, int rows, int cols, int n_classes, idx_dataset *out,
                     char *err, size_t errlen) {
  source si = {.name = images_name, .err = err, .errlen = errlen};
  source sl = {.name = labels_name, .err = err, .errlen = errlen};
  memset(out, 0, sizeof *out);
  if (images->rank != 3) return fail(&si, "images need 3 dims, not %d", images->rank);
  if (labels->rank != 1) return fail(&sl, "labels need 1 dim, not %d", labels->rank);
  if (images->dims[0] == 0) return fail(&si, "holds no images");
  if (images->dims[1] == 0 || images->dims[2] == 0)
    return fail(&si, "images of %lld x %lld pixels", (long long)images->dims[1],
                (long long)images->dims[2]);
  if ((rows && images->dims[1] != rows) || (cols && images->dims[2] != cols))
    return fail(&si, "images of %lld x %lld pixels, expected %d x %d", (long long)images->dims[1],
                (long long)images->dims[2], rows, cols);
  if (labels->dims[0] != images->dims[0])
    return fail(&sl, "wrong counts: %lld labels for the %lld images of %s",
                (long long)labels->dims[0], (long long)images->dims[0], images_name);
  for (int64_t i = 0; i < labels->count; i++)
    if (labels->data[i] >= n_classes)
      return fail(&sl, "label %d of item %lld is out of range (classes 0..%d)", labels->data[i],
                  (long long)i, n_classes - 1);
  *out = (idx_dataset){.n = images->dims[0],
                       .rows = (int)images->dims[1],
                       .cols = (int)images->dims[2],
                       .images = images->data,
                       .labels = labels->data};
  memset(images, 0, sizeof *images);
  memset(labels, 0, sizeof *labels);
  return 0;
}

/* dir/<split>-<kind>-idx<rank>-ubyte.gz, or the name without .gz when only
 * that exists; path receives the name used. */
static int read_part(const char *dir, const char *split, const char *kind, int rank, char *path,
                     size_t len, idx_array *out, char *err, size_t errlen) {
  snprintf(path, len, "%s/%s-%s-idx%d-ubyte", dir, split, kind, rank);
  FILE *plain = fopen(path, "rb");
  if (plain) {
    fclose(plain);
  } else {
    size_t n = strlen(path);
    if (n + 3 < len) memcpy(path + n, ".gz", 4);
  }
  return idx_read_file(path, rank, out, err, errlen);
}

int idx_dataset_load(const char *dir, const char *split, int rows, int cols, int n_classes,
                     idx_dataset *out, char *err, size_t errlen) {
  char ipath[4096], lpath[4096];
  idx_array images, labels = {0};
  memset(out, 0, sizeof *out);
  int rc = read_part(dir, split, "images", 3, ipath, sizeof ipath, &images, err, errlen);
  if (!rc) rc = read_part(dir, split, "labels", 1, lpath, sizeof lpath, &labels, err, errlen);
  if (!rc)
    rc = idx_dataset_make(&images, ipath, &labels, lpath, rows, cols, n_classes, out, err, errlen);
  idx_array_free(&images);
  idx_array_free(&labels);
  return rc;
}

void idx_dataset_free(idx_dataset *d) {
  if (!d) return;
  free(d->images);
  free(d->labels);
  memset(d, 0, sizeof *d);
}
