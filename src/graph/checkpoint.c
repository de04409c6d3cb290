/* Checkpoints of modules (checkpoint.h): a module's variables under their
 * flatten paths in a safetensors file (safetensors.c checks and writes the
 * format).
 *
 * Saving is crash-safe: the file is written whole under a temporary name
 * in the same folder, fsynced, renamed over the old one (an atomic
 * replacement within one file system), and the folder fsynced so the
 * rename itself survives a crash.  A reader therefore sees the old file or
 * the new one, never a mix.
 *
 * Loading maps the file, validates all of it (the format, then the keys,
 * dtypes and shapes against the module, then that every key of a shared
 * variable holds the same bytes), and only then copies into the variables:
 * a failed load changes nothing.  The mapping must not shrink while a load
 * runs (another process truncating the file makes the copy fault, as with
 * any mapped reader).
 *
 * Variables' bytes are copied as they are in memory, and safetensors data
 * is little-endian, so graft refuses to build on a big-endian target
 * rather than carry a byte-swapping path no test here can run. */
#define _GNU_SOURCE /* sync_file_range */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/ptrmap.h"
#include "graph/checkpoint_int.h"
#include "graph/module_int.h"
#include "graph/safetensors.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "graft's checkpoints copy variables' bytes as safetensors' little-endian data: a big-endian target needs checkpoint.c to swap each element on save and load"
#endif

int graft__checkpoint_fail_after_tmp;

static const char save_api[] = "graft_module_save", load_api[] = "graft_module_load";

/* ---- a module's paths --------------------------------------------------------- */

typedef struct ck_path {
  const char *key;
  graft_variable *v;
} ck_path;

typedef struct ck_paths {
  ck_path *p;
  int64_t n, cap;
  graft__arena mem; /* the keys */
} ck_paths;

static graft_status add_path(const char *path, graft_variable *v, void *user) {
  ck_paths *ps = user;
  size_t len = strlen(path) + 1;
  char *key = graft__arena_alloc(&ps->mem, len);
  if (!key || graft__grow((void **)&ps->p, &ps->cap, ps->n + 1, sizeof *ps->p)) return GRAFT_ENOMEM;
  ps->p[ps->n++] = (ck_path){memcpy(key, path, len), v};
  return GRAFT_OK;
}

static void paths_free(ck_paths *ps) {
  graft__free(ps->p);
  graft__arena_free(&ps->mem);
}

static graft_status paths_of(const char *api, const graft_module *m, ck_paths *ps) {
  memset(ps, 0, sizeof *ps);
  graft_status st = graft_module_flatten(m, add_path, ps);
  if (st) paths_free(ps);
  if (st == GRAFT_ENOMEM)
    return graft__fail(st, "%s: out of memory listing the paths of module '%s'", api,
                       graft_module_name(m));
  return st;
}

static const void *var_data(const graft_variable *v) { return graft_tensor_data(v->value); }

static size_t var_bytes(const graft_variable *v) {
  return (size_t)graft_tensor_numel(v->value) * graft_dtype_size(graft_tensor_dtype(v->value));
}

/* ---- system calls ------------------------------------------------------------ */

static graft_status sys_failed(const char *api, const char *path, const char *what, int err) {
  char buf[128];
  /* GNU's strerror_r (this file defines _GNU_SOURCE): returns the text */
  const char *text = strerror_r(err, buf, sizeof buf);
  return graft__fail(GRAFT_EIO, "%s: '%.200s': %s: %s", api, path, what, text);
}

/* Writes go out in windows of this many bytes, and each window's
 * writeback starts as soon as it is written (sync_file_range, Linux), so
 * the disk works while the next window is copied and the final fsync has
 * little left to wait for: a plain write-then-fsync does the two one after
 * the other. */
#define WRITE_WINDOW ((size_t)32 << 20)

static void start_writeback(int fd, off_t at, size_t len) {
#ifdef SYNC_FILE_RANGE_WRITE
  /* A hint: the fsync that follows is what makes the data durable, and
   * reports any error. */
  (void)sync_file_range(fd, at, (off_t)len, SYNC_FILE_RANGE_WRITE);
#else
  (void)fd, (void)at, (void)len;
#endif
}

/* Write iov[0..n) whole, a window at a time: writev takes at most IOV_MAX
 * buffers and may write part of them.  0, or -1 with errno. */
static int write_all(int fd, struct iovec *iov, int64_t n) {
  long iov_max = sysconf(_SC_IOV_MAX);
  const int64_t batch = iov_max > 0 ? iov_max : 16; /* 16: POSIX's least IOV_MAX */
  off_t done = 0;
  while (n > 0) {
    /* the buffers of one window, the last one cut at the window's end */
    int64_t k = 0;
    size_t bytes = 0;
    while (k < n && k < batch && bytes < WRITE_WINDOW) bytes += iov[k++].iov_len;
    size_t cut = bytes > WRITE_WINDOW ? bytes - WRITE_WINDOW : 0;
    iov[k - 1].iov_len -= cut;
    ssize_t w = writev(fd, iov, (int)k);
    iov[k - 1].iov_len += cut;
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO; /* no progress on a regular file: do not spin */
      return -1;
    }
    start_writeback(fd, done, (size_t)w);
    done += w;
    for (; n > 0 && (size_t)w >= iov->iov_len; iov++, n--) w -= (ssize_t)iov->iov_len;
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
  return 0;
}

/* The header, then each path's data, into fd through iov (room for
 * ps->n + 1 buffers); 0 or -1 with errno. */
static int write_file(int fd, struct iovec *iov, const uint8_t *hdr, int64_t hdr_len,
                      const ck_paths *ps) {
  int64_t n = 0;
  iov[n++] = (struct iovec){(void *)hdr, (size_t)hdr_len};
  for (int64_t i = 0; i < ps->n; i++)
    if (var_bytes(ps->p[i].v)) iov[n++] = (struct iovec){(void *)var_data(ps->p[i].v), var_bytes(ps->p[i].v)};
  return write_all(fd, iov, n);
}

/* The folder that holds path, into dir (strlen(path) + 2 bytes). */
static void folder_of(const char *path, char *dir) {
  const char *slash = strrchr(path, '/');
  size_t len = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path); /* "/x" lives in "/" */
  if (!slash) dir[len++] = '.';
  else memcpy(dir, path, len);
  dir[len] = '\0';
}

/* fsync a folder, so a rename in it is durable.  0, or -1 with errno. */
static int sync_folder(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int r = fd < 0 ? -1 : fsync(fd);
  int err = errno;
  if (fd >= 0) close(fd);
  /* A file system that cannot sync folders says EINVAL: nothing more can
   * be done there, and the rename is as durable as it makes renames. */
  if (r && err == EINVAL) return 0;
  errno = err;
  return r;
}

static unsigned tmp_serial;

/* A new file next to path, named path.tmp<pid>.<serial> (O_EXCL: never one
 * that exists).  The fd, or -1 with errno. */
static int create_tmp(const char *path, char *tmp, size_t len) {
  for (int tries = 0; tries < 64; tries++) {
    snprintf(tmp, len, "%s.tmp%ld.%u", path, (long)getpid(),
             __atomic_fetch_add(&tmp_serial, 1, __ATOMIC_RELAXED));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

/* Drop the cached pages of the file a save replaces (its bytes on disk
 * stay until the rename), as truncating it would: the page cache then does
 * not hold the old and the new checkpoint at once.  Measured here (400 MiB,
 * bench_checkpoint), writing the new file beside a cached old one made a
 * save 1.2-1.5x a plain truncate + write + fsync of the same bytes; with
 * the old pages dropped, and the windowed writeback above, 0.88-1.03x. */
static void drop_cached(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return; /* no old file (or none we may read): nothing to drop */
  struct stat sb;
  if (!fstat(fd, &sb) && S_ISREG(sb.st_mode)) (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

/* What a save needs besides the header, allocated before the file system
 * is touched, so running out of memory changes nothing there. */
typedef struct ck_save {
  char *tmp, *dir;
  size_t tmp_len;
  struct iovec *iov;
} ck_save;

static graft_status replace_file(const char *path, const uint8_t *hdr, int64_t hdr_len,
                                 const ck_paths *ps, const ck_save *w) {
  drop_cached(path);
  int fd = create_tmp(path, w->tmp, w->tmp_len);
  if (fd < 0) return sys_failed(save_api, path, "cannot create a temporary file next to it", errno);
  const char *failed = NULL;
  int err = 0;
  if (write_file(fd, w->iov, hdr, hdr_len, ps)) {
    failed = "cannot write the temporary file";
    err = errno;
  } else if (fsync(fd)) {
    failed = "cannot fsync the temporary file";
    err = errno;
  }
  if (close(fd) && !failed) {
    failed = "cannot close the temporary file";
    err = errno;
  }
  if (!failed && graft__checkpoint_fail_after_tmp) {
    failed = "interrupted after writing the temporary file (test hook)";
    err = EINTR;
  }
  if (!failed && rename(w->tmp, path)) {
    failed = "cannot rename the temporary file over it";
    err = errno;
  }
  if (failed) {
    unlink(w->tmp);
    return sys_failed(save_api, path, failed, err);
  }
  if (sync_folder(w->dir))
    return sys_failed(save_api, path, "the new checkpoint is in place, but fsync of its folder "
                      "failed, so it may not survive a crash", errno);
  return GRAFT_OK;
}

static graft_status save_paths(const char *path, const ck_paths *ps) {
  graft__st_entry *es = graft__calloc((size_t)ps->n + 1, sizeof *es);
  ck_save w = {.tmp_len = strlen(path) + 48};
  w.tmp = graft__malloc(w.tmp_len);
  w.dir = graft__malloc(strlen(path) + 2);
  w.iov = graft__malloc((size_t)(ps->n + 1) * sizeof *w.iov);
  uint8_t *hdr = NULL;
  int64_t hdr_len;
  graft_status st = GRAFT_OK;
  if (!es || !w.tmp || !w.dir || !w.iov) {
    st = graft__fail(GRAFT_ENOMEM, "%s: '%.200s': out of memory for %lld entries", save_api, path,
                     (long long)ps->n);
  } else {
    for (int64_t i = 0; i < ps->n; i++) {
      const graft_tensor *t = ps->p[i].v->value;
      es[i] = (graft__st_entry){.key = ps->p[i].key, .graft_dt = (int)graft_tensor_dtype(t),
                                .rank = graft_tensor_rank(t), .dims = graft_tensor_shape(t)};
    }
    char why[GRAFT__MSG_LEN];
    st = graft__st_header(ps->n, es, &hdr, &hdr_len, why);
    if (st) st = graft__fail(st, "%s: '%.200s': %s", save_api, path, why);
  }
  if (!st) {
    folder_of(path, w.dir);
    st = replace_file(path, hdr, hdr_len, ps, &w);
  }
  graft__free(hdr);
  graft__free(es);
  graft__free(w.tmp);
  graft__free(w.dir);
  graft__free(w.iov);
  return st;
}

GRAFT_API graft_status graft_module_save(const graft_module *m, const char *path) {
  if (!m) return graft__fail(GRAFT_EINVAL, "%s: m is NULL (expected a module)", save_api);
  if (!path || !path[0])
    return graft__fail(GRAFT_EINVAL, "%s: path is %s (expected a file name)", save_api,
                       path ? "empty" : "NULL");
  ck_paths ps;
  graft_status st = paths_of(save_api, m, &ps);
  if (st) return st;
  st = save_paths(path, &ps);
  paths_free(&ps);
  return st;
}

/* ---- load: keys against the module ---------------------------------------- */

/* Append " -key" / " +key" to the report while whole names fit. */
static void report_key(graft_load_report *r, char sign, const char *key) {
  if (!r) return;
  size_t at = strlen(r->keys), len = strlen(key);
  if (at + (at > 0) + 1 + len >= sizeof r->keys) return;
  if (at) r->keys[at++] = ' ';
  r->keys[at++] = sign;
  memcpy(r->keys + at, key, len + 1);
}

typedef struct ck_load {
  const char *name;          /* the file, for messages */
  const uint8_t *data;       /* its data section */
  const graft__st_table *t;
  const ck_paths *ps;
  const graft__st_entry **entry; /* per path: its entry, or NULL */
  uint8_t *copy;             /* per path: copy its entry (the first of its variable) */
  uint8_t *used;             /* per entry: a path matched it */
} ck_load;

/* Each path's entry, of its variable's dtype and shape. */
static graft_status match_paths(ck_load *c) {
  for (int64_t i = 0; i < c->ps->n; i++) {
    const ck_path *p = &c->ps->p[i];
    const graft__st_entry *e = graft__st_find(c->t, p->key);
    c->entry[i] = e;
    if (!e) continue;
    c->used[e - c->t->entries] = 1;
    const graft_tensor *v = p->v->value;
    int rank = graft_tensor_rank(v);
    int same_shape = e->rank == rank &&
                     !memcmp(e->dims, graft_tensor_shape(v), (size_t)rank * sizeof *e->dims);
    if (e->graft_dt == (int)graft_tensor_dtype(v) && same_shape) continue;
    char have[160], want[160];
    graft__shape_str(have, sizeof have, e->rank, e->dims);
    graft__shape_str(want, sizeof want, rank, graft_tensor_shape(v));
    return graft__fail(e->graft_dt != (int)graft_tensor_dtype(v) ? GRAFT_EDTYPE : GRAFT_ESHAPE,
                       "%s: '%.200s': key '%s' is %s%s, but variable '%s' is %s%s (%s%s)", load_api,
                       c->name, p->key, e->dtype, have, p->v->name,
                       graft__st_dtype_name(graft_tensor_dtype(v)), want,
                       e->graft_dt < 0 ? "graft holds F32, F64 and I32; " : "",
                       "nothing was loaded");
  }
  return GRAFT_OK;
}

/* A variable under several paths (a shared module) loads once: every key
 * of it in the file must hold the same bytes. */
static graft_status match_shared(ck_load *c) {
  graft__ptrmap first = {0};
  graft_status st = GRAFT_OK;
  for (int64_t i = 0; i < c->ps->n && !st; i++) {
    const graft__st_entry *e = c->entry[i];
    if (!e) continue;
    graft_variable *v = c->ps->p[i].v;
    uint32_t *j = graft__ptrmap_get(&first, v);
    if (!j) {
      c->copy[i] = 1;
      if (graft__ptrmap_put(&first, v, (uint32_t)i))
        st = graft__fail(GRAFT_ENOMEM, "%s: out of memory", load_api);
      continue;
    }
    const graft__st_entry *f = c->entry[*j];
    if (memcmp(c->data + e->begin, c->data + f->begin, (size_t)(e->end - e->begin)))
      st = graft__fail(GRAFT_EINVAL, "%s: '%.200s': keys '%s' and '%s' hold different data, but "
                       "both are paths of variable '%s' (a shared module): nothing was loaded",
                       load_api, c->name, c->ps->p[*j].key, c->ps->p[i].key, v->name);
  }
  graft__ptrmap_free(&first);
  return st;
}

/* Missing and unexpected keys: counted and named in the report, and an
 * error unless the load is non-strict. */
static graft_status match_keys(ck_load *c, unsigned flags, graft_load_report *r) {
  int64_t missing = 0, unexpected = 0;
  const char *first_missing = NULL, *first_unexpected = NULL;
  for (int64_t i = 0; i < c->ps->n; i++)
    if (!c->entry[i]) {
      if (!missing++) first_missing = c->ps->p[i].key;
      report_key(r, '-', c->ps->p[i].key);
    }
  for (int64_t i = 0; i < c->t->n; i++)
    if (!c->used[i]) {
      if (!unexpected++) first_unexpected = c->t->entries[i].key;
      report_key(r, '+', c->t->entries[i].key);
    }
  if (r) {
    r->missing = missing;
    r->unexpected = unexpected;
  }
  if ((flags & GRAFT_LOAD_NONSTRICT) || (!missing && !unexpected)) return GRAFT_OK;
  char lacks[256] = "", extra[256] = "";
  if (missing)
    snprintf(lacks, sizeof lacks, "the file lacks key '%.120s' of the module (%lld missing)",
             first_missing, (long long)missing);
  if (unexpected)
    snprintf(extra, sizeof extra, "%shas key '%.120s' the module lacks (%lld unexpected)",
             missing ? "; it " : "the file ", first_unexpected, (long long)unexpected);
  return graft__fail(GRAFT_EINVAL, "%s: '%.200s': %s%s: nothing was loaded "
                     "(GRAFT_LOAD_NONSTRICT loads the keys that match)",
                     load_api, c->name, lacks, extra);
}

graft_status graft__checkpoint_load_mem(graft_module *m, const char *name, const uint8_t *file,
                                        int64_t size, unsigned flags, graft_load_report *report) {
  if (report) memset(report, 0, sizeof *report);
  graft__st_table t;
  char why[GRAFT__MSG_LEN];
  graft_status st = graft__st_parse(file, size, &t, why);
  if (st) {
    graft__st_table_free(&t);
    return graft__fail(st, "%s: '%.200s': %s", load_api, name, why);
  }
  ck_paths ps;
  if ((st = paths_of(load_api, m, &ps))) {
    graft__st_table_free(&t);
    return st;
  }
  ck_load c = {.name = name, .data = file + t.data_at, .t = &t, .ps = &ps,
               .entry = graft__calloc((size_t)ps.n + 1, sizeof *c.entry),
               .copy = graft__calloc((size_t)ps.n + 1, 1),
               .used = graft__calloc((size_t)t.n + 1, 1)};
  if (!c.entry || !c.copy || !c.used)
    st = graft__fail(GRAFT_ENOMEM, "%s: out of memory matching %lld keys", load_api, (long long)t.n);
  if (!st) st = match_paths(&c);
  if (!st) st = match_shared(&c);
  if (!st) st = match_keys(&c, flags, report);
  if (!st) {
    int64_t loaded = 0;
    for (int64_t i = 0; i < ps.n; i++) {
      const graft__st_entry *e = c.entry[i];
      loaded += e != NULL;
      if (c.copy[i] && e->end > e->begin)
        memcpy(graft_tensor_data(ps.p[i].v->value), c.data + e->begin, (size_t)(e->end - e->begin));
    }
    if (report) report->loaded = loaded;
  }
  graft__free(c.entry);
  graft__free(c.copy);
  graft__free(c.used);
  paths_free(&ps);
  graft__st_table_free(&t);
  return st;
}

/* ---- load: the file ---------------------------------------------------------- */

GRAFT_API graft_status graft_module_load_ex(graft_module *m, const char *path, unsigned flags,
                                            graft_load_report *report) {
  if (report) memset(report, 0, sizeof *report);
  if (!m) return graft__fail(GRAFT_EINVAL, "%s: m is NULL (expected a module)", load_api);
  if (!path) return graft__fail(GRAFT_EINVAL, "%s: path is NULL (expected a file name)", load_api);
  if (flags & ~GRAFT_LOAD_NONSTRICT)
    return graft__fail(GRAFT_EINVAL, "%s: flags 0x%x has unknown bits (expected 0 or "
                       "GRAFT_LOAD_NONSTRICT)", load_api, flags);
  /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
   * below); it changes nothing for a regular file. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return sys_failed(load_api, path, "cannot open it", errno);
  struct stat sb;
  graft_status st = GRAFT_OK;
  if (fstat(fd, &sb)) st = sys_failed(load_api, path, "cannot stat it", errno);
  else if (S_ISDIR(sb.st_mode))
    st = graft__fail(GRAFT_EIO, "%s: '%.200s' is a directory (expected a checkpoint file)",
                     load_api, path);
  else if (!S_ISREG(sb.st_mode))
    st = graft__fail(GRAFT_EIO, "%s: '%.200s' is not a regular file (expected a checkpoint file)",
                     load_api, path);
  void *map = NULL;
  int64_t size = st ? 0 : (int64_t)sb.st_size;
  if (!st && size > 0) {
    map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      map = NULL;
      st = sys_failed(load_api, path, "cannot map it", errno);
    }
  }
  close(fd);
  if (st) return st;
  static const uint8_t empty[1];
  st = graft__checkpoint_load_mem(m, path, map ? map : empty, size, flags, report);
  if (map) munmap(map, (size_t)size);
  return st;
}

GRAFT_API graft_status graft_module_load(graft_module *m, const char *path, unsigned flags) {
  return graft_module_load_ex(m, path, flags, NULL);
}
