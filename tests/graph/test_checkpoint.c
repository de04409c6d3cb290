/* Checkpoints (graft_module_save / graft_module_load): a bitwise round trip
 * of a module tree with a shared module, f32/f64/i32 variables of ranks 0
 * to 4 and empty shapes; the written file read back by a reader written
 * here from the format's description; one test per kind of corrupt or
 * unfitting file, each checking the status, that the message names the
 * key, and that no variable changed; a save interrupted after its
 * temporary file; bad paths. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/checkpoint_int.h"
#include "testutil.h"

static char g_dir[64]; /* this run's scratch folder */

static const char *in_dir(const char *name) {
  static char path[4][256];
  static int next;
  char *p = path[next++ % 4];
  snprintf(p, sizeof path[0], "%s/%s", g_dir, name);
  return p;
}

/* ---- files -------------------------------------------------------------------- */

static uint8_t *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long len = ftell(f);
  assert_true(len >= 0);
  rewind(f);
  uint8_t *buf = malloc((size_t)len + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return buf;
}

static void write_all(const char *path, const void *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* A safetensors file from hl bytes of header text and n data bytes (data
 * may be NULL: bytes 0, 1, 2, ...). */
static void write_st_n(const char *path, const char *header, size_t hl, const void *data, size_t n) {
  uint8_t *buf = malloc(8 + hl + n + 1);
  assert_non_null(buf);
  put_le64(buf, hl);
  memcpy(buf + 8, header, hl);
  for (size_t i = 0; i < n; i++) buf[8 + hl + i] = data ? ((const uint8_t *)data)[i] : (uint8_t)i;
  write_all(path, buf, 8 + hl + n);
  free(buf);
}

static void write_st(const char *path, const char *header, const void *data, size_t n) {
  write_st_n(path, header, strlen(header), data, n);
}

/* The names in g_dir (sorted, space separated). */
static void dir_listing(char *out, size_t len) {
  struct dirent **list;
  int n = scandir(g_dir, &list, NULL, alphasort);
  assert_true(n >= 0);
  out[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, ".."))
      snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? " " : "", list[i]->d_name);
    free(list[i]);
  }
  free(list);
}

/* Empty g_dir (files and one level of folders). */
static void dir_clear(void) {
  DIR *d = opendir(g_dir);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
    struct stat sb;
    if (!lstat(p, &sb) && S_ISDIR(sb.st_mode)) {
      DIR *sub = opendir(p);
      for (struct dirent *f; sub && (f = readdir(sub));) {
        char q[1024];
        snprintf(q, sizeof q, "%s/%s", p, f->d_name);
        if (strcmp(f->d_name, ".") && strcmp(f->d_name, "..")) unlink(q);
      }
      if (sub) closedir(sub);
      rmdir(p);
    } else {
      unlink(p);
    }
  }
  closedir(d);
}

static int setup(void **state) {
  (void)state;
  const char *base = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/graft_ckpt_XXXXXX", base && strlen(base) < 32 ? base : "/tmp");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  dir_clear();
  return rmdir(g_dir);
}

static int per_test_clear(void **state) {
  (void)state;
  dir_clear();
  return 0;
}

/* ---- models ------------------------------------------------------------------- */

static graft_variable *var(graft_module *m, const char *name, graft_dtype dt, int rank,
                           const int64_t *shape) {
  graft_variable *v = NULL;
  tu_assert_status(graft_variable_create(m, name, dt, rank, shape, NULL, GRAFT_VAR_TRAINABLE, &v),
                   GRAFT_OK);
  return v;
}

static graft_module *module(graft_module *parent, const char *name) {
  graft_module *m = NULL;
  tu_assert_status(graft_module_create(parent, name, &m), GRAFT_OK);
  return m;
}

/* model: step i32[], scale f64[3]; enc: w f32[2,3], b f32[3], empty
 * f32[0,4], and enc.proj (k f64[2,2,2], idx i32[4]), which is shared as
 * dec_proj; layers[0] and layers[1]: u f64[1,2,1,2], none i32[2,0,3]. */
static graft_module *big_model(void) {
  graft_module *root = module(NULL, "model");
  var(root, "step", GRAFT_I32, 0, NULL);
  var(root, "scale", GRAFT_F64, 1, (int64_t[]){3});
  graft_module *enc = module(root, "enc");
  var(enc, "w", GRAFT_F32, 2, (int64_t[]){2, 3});
  var(enc, "b", GRAFT_F32, 1, (int64_t[]){3});
  var(enc, "empty", GRAFT_F32, 2, (int64_t[]){0, 4});
  graft_module *proj = module(enc, "proj");
  var(proj, "k", GRAFT_F64, 3, (int64_t[]){2, 2, 2});
  var(proj, "idx", GRAFT_I32, 1, (int64_t[]){4});
  tu_assert_status(graft_module_attach(root, "dec_proj", proj), GRAFT_OK);
  for (int i = 0; i < 2; i++) {
    graft_module *layer = module(NULL, "layer");
    var(layer, "u", GRAFT_F64, 4, (int64_t[]){1, 2, 1, 2});
    var(layer, "none", GRAFT_I32, 3, (int64_t[]){2, 0, 3});
    tu_assert_status(graft_module_attach(root, i ? "layers[1]" : "layers[0]", layer), GRAFT_OK);
    graft_module_destroy(layer); /* the root holds it now */
  }
  return root;
}

/* m: a f32[2], b i32[3]; sub: c f64[] (paths a, b, sub.c; 28 data bytes). */
static graft_module *small_model(void) {
  graft_module *root = module(NULL, "m");
  var(root, "a", GRAFT_F32, 1, (int64_t[]){2});
  var(root, "b", GRAFT_I32, 1, (int64_t[]){3});
  var(module(root, "sub"), "c", GRAFT_F64, 0, NULL);
  return root;
}

static int64_t n_vars(const graft_module *m) {
  int64_t n = 0;
  tu_assert_status(graft_module_variables(m, 0, NULL, &n), GRAFT_OK);
  return n;
}

static graft_variable **vars_of(const graft_module *m, int64_t *n) {
  *n = n_vars(m);
  graft_variable **v = calloc((size_t)*n + 1, sizeof *v);
  assert_non_null(v);
  int64_t got;
  tu_assert_status(graft_module_variables(m, *n, v, &got), GRAFT_OK);
  assert_int_equal(got, *n);
  return v;
}

static size_t bytes_of(const graft_variable *v) {
  const graft_tensor *t = graft_variable_value(v);
  return (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t));
}

/* Every variable's bytes from a seeded stream of random bits (NaN payloads
 * and all: the round trip is bitwise). */
static void fill(graft_module *m, uint64_t seed) {
  int64_t n;
  graft_variable **v = vars_of(m, &n);
  tu_rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
  for (int64_t i = 0; i < n; i++) {
    uint8_t *d = graft_tensor_data(graft_variable_value(v[i]));
    for (size_t b = 0; b < bytes_of(v[i]); b++) d[b] = (uint8_t)(tu_next(&r) >> 56);
  }
  free(v);
}

typedef struct snap {
  uint8_t *bytes;
  size_t n;
} snap;

static snap take(const graft_module *m) {
  int64_t n;
  graft_variable **v = vars_of(m, &n);
  snap s = {NULL, 0};
  for (int64_t i = 0; i < n; i++) s.n += bytes_of(v[i]);
  s.bytes = malloc(s.n + 1);
  assert_non_null(s.bytes);
  size_t at = 0;
  for (int64_t i = 0; i < n; i++) {
    memcpy(s.bytes + at, graft_tensor_data(graft_variable_value(v[i])), bytes_of(v[i]));
    at += bytes_of(v[i]);
  }
  free(v);
  return s;
}

static int snap_equal(snap a, snap b) { return a.n == b.n && !memcmp(a.bytes, b.bytes, a.n); }

#define assert_unchanged(m, before)                                                  \
  do {                                                                               \
    snap now_ = take(m);                                                             \
    if (!snap_equal(now_, (before))) fail_msg("a failed load changed a variable");   \
    free(now_.bytes);                                                                \
  } while (0)

/* Load path into m, which must fail with want and a message holding each
 * of subs (NULL-terminated), leaving every variable as it was. */
static void expect_refused(graft_module *m, const char *path, unsigned flags, graft_status want,
                           ...) {
  snap before = take(m);
  graft_load_report rep;
  graft_status st = graft_module_load_ex(m, path, flags, &rep);
  if (st != want)
    fail_msg("load of %s: %s, want %s: %s", path, graft_status_name(st), graft_status_name(want),
             graft_last_errmsg());
  tu_assert_msg_has(graft_last_errmsg(), "graft_module_load");
  va_list ap;
  va_start(ap, want);
  for (const char *s; (s = va_arg(ap, const char *));) tu_assert_msg_has(graft_last_errmsg(), s);
  va_end(ap);
  assert_int_equal(rep.loaded, 0);
  assert_unchanged(m, before);
  free(before.bytes);
}

/* ---- an independent reader ---------------------------------------------------
 * From the format's description: an 8-byte little-endian length N, N bytes
 * of JSON, the data.  The JSON reader takes what graft writes: objects,
 * arrays, strings without escapes, integers. */

typedef struct jr {
  const char *s;
  size_t n, i;
} jr;

static void jr_ws(jr *r) {
  while (r->i < r->n && strchr(" \t\r\n", r->s[r->i]) && r->s[r->i]) r->i++;
}

static int jr_eat(jr *r, char c) {
  jr_ws(r);
  if (r->i < r->n && r->s[r->i] == c) {
    r->i++;
    return 1;
  }
  return 0;
}

static void jr_expect(jr *r, char c) {
  if (!jr_eat(r, c)) fail_msg("header byte %zu: expected '%c'", r->i, c);
}

static void jr_string(jr *r, char *out, size_t cap) {
  jr_expect(r, '"');
  size_t k = 0;
  while (r->i < r->n && r->s[r->i] != '"') {
    if (r->s[r->i] == '\\') fail_msg("header byte %zu: an escape in a string", r->i);
    if (k + 1 < cap) out[k++] = r->s[r->i];
    r->i++;
  }
  out[k] = '\0';
  jr_expect(r, '"');
}

static long long jr_int(jr *r) {
  jr_ws(r);
  char *end;
  long long v = strtoll(r->s + r->i, &end, 10);
  if (end == r->s + r->i) fail_msg("header byte %zu: expected an integer", r->i);
  r->i = (size_t)(end - r->s);
  return v;
}

typedef struct rd_entry {
  char key[128], dtype[16];
  int rank;
  long long dims[8], begin, end;
} rd_entry;

typedef struct rd_file {
  size_t header_len;
  int n;
  rd_entry e[32];
  char format[32], version[32];
} rd_file;

static void rd_entry_fields(jr *r, rd_entry *e) {
  jr_expect(r, '{');
  int seen = 0;
  do {
    char field[32];
    jr_string(r, field, sizeof field);
    jr_expect(r, ':');
    if (!strcmp(field, "dtype")) {
      jr_string(r, e->dtype, sizeof e->dtype);
      seen |= 1;
    } else if (!strcmp(field, "shape")) {
      jr_expect(r, '[');
      if (!jr_eat(r, ']')) {
        do e->dims[e->rank++] = jr_int(r);
        while (jr_eat(r, ','));
        jr_expect(r, ']');
      }
      seen |= 2;
    } else if (!strcmp(field, "data_offsets")) {
      jr_expect(r, '[');
      e->begin = jr_int(r);
      jr_expect(r, ',');
      e->end = jr_int(r);
      jr_expect(r, ']');
      seen |= 4;
    } else {
      fail_msg("key '%s': field '%s'", e->key, field);
    }
  } while (jr_eat(r, ','));
  jr_expect(r, '}');
  assert_int_equal(seen, 7);
}

static void rd_parse(const uint8_t *file, size_t size, rd_file *f) {
  memset(f, 0, sizeof *f);
  assert_true(size >= 8);
  f->header_len = (size_t)get_le64(file);
  assert_true(8 + f->header_len <= size);
  jr r = {(const char *)file + 8, f->header_len, 0};
  assert_int_equal(r.s[0], '{');
  jr_expect(&r, '{');
  do {
    char key[128];
    jr_string(&r, key, sizeof key);
    jr_expect(&r, ':');
    if (!strcmp(key, "__metadata__")) {
      jr_expect(&r, '{');
      do {
        char k[32], v[32];
        jr_string(&r, k, sizeof k);
        jr_expect(&r, ':');
        jr_string(&r, v, sizeof v);
        if (!strcmp(k, "format")) snprintf(f->format, sizeof f->format, "%s", v);
        if (!strcmp(k, "graft_version")) snprintf(f->version, sizeof f->version, "%s", v);
      } while (jr_eat(&r, ','));
      jr_expect(&r, '}');
      continue;
    }
    assert_true(f->n < 32);
    rd_entry *e = &f->e[f->n++];
    snprintf(e->key, sizeof e->key, "%s", key);
    rd_entry_fields(&r, e);
  } while (jr_eat(&r, ','));
  jr_expect(&r, '}');
  for (size_t i = r.i; i < f->header_len; i++)
    if (r.s[i] != ' ') fail_msg("header byte %zu after the JSON is 0x%02x (expected padding)", i, r.s[i]);
}

static const rd_entry *rd_find(const rd_file *f, const char *key) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->e[i].key, key)) return &f->e[i];
  return NULL;
}

typedef struct path_list {
  int n;
  char path[32][64];
  graft_variable *v[32];
} path_list;

static graft_status add_path(const char *path, graft_variable *v, void *user) {
  path_list *l = user;
  assert_true(l->n < 32);
  snprintf(l->path[l->n], sizeof l->path[0], "%s", path);
  l->v[l->n++] = v;
  return GRAFT_OK;
}

static void paths_of(const graft_module *m, path_list *l) {
  memset(l, 0, sizeof *l);
  tu_assert_status(graft_module_flatten(m, add_path, l), GRAFT_OK);
}

static const char *st_dtype(graft_dtype dt) {
  return dt == GRAFT_F32 ? "F32" : dt == GRAFT_F64 ? "F64" : "I32";
}

/* ---- round trip and the file as written --------------------------------------- */

static void test_graft_module_save__round_trip_is_bitwise(void **state) {
  (void)state;
  graft_module *a = big_model(), *b = big_model();
  fill(a, 1);
  fill(b, 2);
  const char *path = in_dir("model.safetensors");
  tu_assert_status(graft_module_save(a, path), GRAFT_OK);
  snap want = take(a), other = take(b);
  assert_false(snap_equal(want, other));
  graft_load_report rep;
  tu_assert_status(graft_module_load_ex(b, path, 0, &rep), GRAFT_OK);
  snap got = take(b);
  assert_true(snap_equal(got, want));
  path_list l;
  paths_of(a, &l);
  assert_int_equal(l.n, 13);
  assert_int_equal(rep.loaded, l.n);
  assert_int_equal(rep.missing, 0);
  assert_int_equal(rep.unexpected, 0);
  assert_string_equal(rep.keys, "");
  /* saving over a checkpoint replaces it, with nothing left beside it */
  fill(a, 3);
  tu_assert_status(graft_module_save(a, path), GRAFT_OK);
  tu_assert_status(graft_module_load(b, path, 0), GRAFT_OK);
  snap third = take(a), got3 = take(b);
  assert_true(snap_equal(third, got3));
  char names[256];
  dir_listing(names, sizeof names);
  assert_string_equal(names, "model.safetensors");
  free(want.bytes), free(other.bytes), free(got.bytes), free(third.bytes), free(got3.bytes);
  graft_module_destroy(a);
  graft_module_destroy(b);
}

/* The training state checkpoints whole: a net and its Adam optimizer
 * (moments, step count) saved after 3 steps and loaded into a fresh tree
 * of the same structure resumes with the same bits as the run that went
 * on without stopping (the step: tu_net_step). */
static void make_net(tu_net *m, uint64_t seed) {
  m->root = module(NULL, "net");
  m->w = var(m->root, "w", GRAFT_F32, 2, (int64_t[]){8, 6});
  m->b = var(m->root, "b", GRAFT_F32, 1, (int64_t[]){6});
  graft_variable *vars[2] = {m->w, m->b};
  graft_optimizer_desc d = {.kind = GRAFT_OPT_ADAM, .lr = 0.05, .weight_decay = 0.01};
  tu_assert_status(graft_optimizer_create(m->root, "opt", &d, 2, vars, &m->opt), GRAFT_OK);
  tu_rng r = {seed};
  for (int i = 0; i < 48; i++) ((float *)graft_tensor_data(graft_variable_value(m->w)))[i] =
      (float)tu_uniform(&r, -1, 1);
}

static void net_steps(graft_function *f, graft_tensor **in, int n) {
  for (int i = 0; i < n; i++) {
    graft_tensor *loss = NULL;
    tu_assert_call_ok(f, 2, in, 1, &loss);
    graft_tensor_destroy(loss);
  }
}

static void test_graft_module_save__training_state_resumes_bitwise(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  tu_net a, b;
  make_net(&a, 11);
  make_net(&b, 12);
  tu_rng r = {5};
  graft_tensor *x = tu_tensor_rand(&r, GRAFT_F32, 2, (int64_t[]){4, 8}, -1, 1);
  graft_tensor *y = tu_tensor_rand(&r, GRAFT_F32, 2, (int64_t[]){4, 6}, -1, 1);
  graft_tensor *in[2] = {x, y};
  graft_function *fa = tu_function(rt, "step_a", tu_net_step, &a, 2, 1, NULL);
  graft_function *fb = tu_function(rt, "step_b", tu_net_step, &b, 2, 1, NULL);
  net_steps(fa, in, 3);
  const char *path = in_dir("train.safetensors");
  tu_assert_status(graft_module_save(a.root, path), GRAFT_OK);
  snap at3 = take(a.root);
  net_steps(fa, in, 2);
  snap at5 = take(a.root);
  /* w, b, and the optimizer's m and v of each and its step: all keys match */
  graft_load_report rep;
  tu_assert_status(graft_module_load_ex(b.root, path, 0, &rep), GRAFT_OK);
  assert_int_equal(rep.loaded, 7);
  snap loaded = take(b.root);
  assert_true(snap_equal(loaded, at3));
  net_steps(fb, in, 2);
  snap resumed = take(b.root);
  if (!snap_equal(resumed, at5)) fail_msg("the resumed run differs from the uninterrupted one");
  free(at3.bytes), free(at5.bytes), free(loaded.bytes), free(resumed.bytes);
  graft_function_destroy(fa);
  graft_function_destroy(fb);
  graft_tensor_destroy(x);
  graft_tensor_destroy(y);
  graft_runtime_destroy(rt);
  graft_module_destroy(a.root);
  graft_module_destroy(b.root);
}

static void test_graft_module_save__file_read_by_an_independent_reader(void **state) {
  (void)state;
  graft_module *m = big_model();
  fill(m, 4);
  const char *path = in_dir("read.safetensors");
  tu_assert_status(graft_module_save(m, path), GRAFT_OK);
  size_t size;
  uint8_t *file = read_all(path, &size);
  rd_file f;
  rd_parse(file, size, &f);
  assert_string_equal(f.format, "graft");
  assert_string_equal(f.version, GRAFT_VERSION_STRING);
  assert_int_equal((8 + f.header_len) % 8, 0); /* data aligned for every dtype */
  path_list l;
  paths_of(m, &l);
  assert_int_equal(f.n, l.n);
  long long at = 0;
  for (int i = 0; i < l.n; i++) {
    /* header order = flatten order = data order */
    const rd_entry *e = &f.e[i];
    assert_string_equal(e->key, l.path[i]);
    const graft_tensor *t = graft_variable_value(l.v[i]);
    assert_string_equal(e->dtype, st_dtype(graft_tensor_dtype(t)));
    assert_int_equal(e->rank, graft_tensor_rank(t));
    for (int d = 0; d < e->rank; d++) assert_int_equal(e->dims[d], graft_tensor_shape(t)[d]);
    assert_int_equal(e->begin, at);
    assert_int_equal(e->end - e->begin, (long long)bytes_of(l.v[i]));
    assert_memory_equal(file + 8 + f.header_len + e->begin, graft_tensor_data(t), bytes_of(l.v[i]));
    at = e->end;
  }
  assert_int_equal(8 + f.header_len + (size_t)at, size);
  /* the shared module's variables appear under both paths */
  assert_non_null(rd_find(&f, "enc.proj.k"));
  assert_non_null(rd_find(&f, "dec_proj.k"));
  assert_non_null(rd_find(&f, "layers[1].none"));
  free(file);
  graft_module_destroy(m);
}

/* A file from another writer: no metadata, keys in another order than the
 * data, whitespace; values as written. */
static void test_graft_module_load__file_of_another_writer(void **state) {
  (void)state;
  graft_module *m = small_model();
  fill(m, 5);
  const float a[2] = {1.5f, -2.0f};
  const int32_t b[3] = {7, -8, 9};
  const double c = 3.25;
  uint8_t data[28];
  memcpy(data, &c, 8);
  memcpy(data + 8, b, 12);
  memcpy(data + 20, a, 8);
  const char *path = in_dir("other.safetensors");
  write_st(path,
           "{ \"b\": {\"shape\": [3], \"dtype\": \"I32\", \"data_offsets\": [8, 20]},\n"
           "  \"a\": {\"data_offsets\": [20, 28], \"dtype\": \"F32\", \"shape\": [2]},\n"
           "  \"sub.c\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [0, 8]} }  ",
           data, sizeof data);
  tu_assert_status(graft_module_load(m, path, 0), GRAFT_OK);
  int64_t n;
  graft_variable **v = vars_of(m, &n);
  assert_int_equal(n, 3);
  assert_memory_equal(graft_tensor_data(graft_variable_value(v[0])), a, sizeof a);
  assert_memory_equal(graft_tensor_data(graft_variable_value(v[1])), b, sizeof b);
  assert_memory_equal(graft_tensor_data(graft_variable_value(v[2])), &c, sizeof c);
  free(v);
  graft_module_destroy(m);
}

/* A module with no variables saves a header with only the metadata. */
static void test_graft_module_save__empty_module(void **state) {
  (void)state;
  graft_module *m = module(NULL, "nothing");
  const char *path = in_dir("empty.safetensors");
  tu_assert_status(graft_module_save(m, path), GRAFT_OK);
  size_t size;
  uint8_t *file = read_all(path, &size);
  rd_file f;
  rd_parse(file, size, &f);
  assert_int_equal(f.n, 0);
  assert_int_equal(size, 8 + f.header_len);
  tu_assert_status(graft_module_load(m, path, 0), GRAFT_OK);
  graft_module *s = small_model();
  expect_refused(s, path, 0, GRAFT_EINVAL, "lacks key 'a'", "(3 missing)", NULL);
  free(file);
  graft_module_destroy(s);
  graft_module_destroy(m);
}

/* ---- corrupt files ---------------------------------------------------------------- */

/* The small model's file as a valid header, for the edits below. */
#define ENTRY_A "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"
#define ENTRY_B "\"b\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[8,20]}"
#define ENTRY_C "\"sub.c\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[20,28]}"

/* write_st, then expect_refused on the small model (strict). */
static void refuse_small(const char *header, size_t data, graft_status want, const char *sub1,
                         const char *sub2) {
  graft_module *m = small_model();
  fill(m, 6);
  const char *path = in_dir("bad.safetensors");
  write_st(path, header, NULL, data);
  expect_refused(m, path, 0, want, sub1, sub2, NULL);
  expect_refused(m, path, GRAFT_LOAD_NONSTRICT, want, sub1, sub2, NULL);
  graft_module_destroy(m);
}

static void test_graft_module_load__valid_small_file_loads(void **state) {
  (void)state;
  graft_module *m = small_model();
  const char *path = in_dir("small.safetensors");
  write_st(path, "{" ENTRY_A "," ENTRY_B "," ENTRY_C "}", NULL, 28);
  tu_assert_status(graft_module_load(m, path, 0), GRAFT_OK);
  snap s = take(m);
  for (size_t i = 0; i < 28; i++) assert_int_equal(s.bytes[i], i);
  free(s.bytes);
  graft_module_destroy(m);
}

static void test_graft_module_load__truncated_file(void **state) {
  (void)state;
  graft_module *src = big_model(), *m = big_model();
  fill(src, 7);
  fill(m, 8);
  const char *path = in_dir("full.safetensors"), *cut = in_dir("cut.safetensors");
  tu_assert_status(graft_module_save(src, path), GRAFT_OK);
  size_t size;
  uint8_t *file = read_all(path, &size);
  for (size_t len = 0; len < size; len++) {
    write_all(cut, file, len);
    expect_refused(m, cut, 0, GRAFT_ECORRUPT, "cut.safetensors", NULL);
  }
  /* the messages say what is short */
  write_all(cut, file, 5);
  expect_refused(m, cut, 0, GRAFT_ECORRUPT, "5 bytes, shorter than the 8-byte header length", NULL);
  write_all(cut, file, 20);
  expect_refused(m, cut, 0, GRAFT_ECORRUPT, "runs past the end of the file", NULL);
  write_all(cut, file, size - 1);
  expect_refused(m, cut, 0, GRAFT_ECORRUPT, "key 'layers[1].u'", "run past the data section", NULL);
  free(file);
  graft_module_destroy(src);
  graft_module_destroy(m);
}

static void test_graft_module_load__zero_byte_file(void **state) {
  (void)state;
  graft_module *m = small_model();
  fill(m, 9);
  const char *path = in_dir("zero.safetensors");
  write_all(path, "", 0);
  expect_refused(m, path, 0, GRAFT_ECORRUPT, "0 bytes", NULL);
  graft_module_destroy(m);
}

static void test_graft_module_load__header_length_past_the_file(void **state) {
  (void)state;
  graft_module *src = small_model(), *m = small_model();
  fill(src, 10);
  fill(m, 11);
  const char *path = in_dir("len.safetensors");
  tu_assert_status(graft_module_save(src, path), GRAFT_OK);
  size_t size;
  uint8_t *file = read_all(path, &size);
  const uint64_t real = get_le64(file);
  const uint64_t lens[] = {size - 8 + 1, size, UINT64_MAX, (uint64_t)1 << 63, (uint64_t)INT64_MAX};
  for (size_t i = 0; i < TU_N_OF(lens); i++) {
    put_le64(file, lens[i]);
    write_all(path, file, size);
    expect_refused(m, path, 0, GRAFT_ECORRUPT, "runs past the end of the file", NULL);
  }
  /* one byte short, or one more: the JSON or the data section no longer
   * fits */
  put_le64(file, real - 1);
  write_all(path, file, size);
  expect_refused(m, path, 0, GRAFT_ECORRUPT, "len.safetensors", NULL);
  put_le64(file, real + 1);
  write_all(path, file, size);
  expect_refused(m, path, 0, GRAFT_ECORRUPT, "len.safetensors", NULL);
  /* over safetensors' limit for the header, in a file that long */
  put_le64(file, 100000001);
  write_all(path, file, size);
  assert_int_equal(truncate(path, 100000001 + 8), 0); /* sparse */
  expect_refused(m, path, 0, GRAFT_ECORRUPT, "header length 100000001 exceeds safetensors' limit",
                 NULL);
  free(file);
  graft_module_destroy(src);
  graft_module_destroy(m);
}

/* Every byte of a saved header flipped (three bit patterns): outside the
 * free-form metadata each flip fails with nothing changed; inside it a flip
 * may still load, and then loads the saved values. */
static void test_graft_module_load__flipped_byte_in_header(void **state) {
  (void)state;
  graft_module *src = big_model(), *m = big_model();
  fill(src, 12);
  const char *path = in_dir("flip.safetensors"), *bad = in_dir("flipped.safetensors");
  tu_assert_status(graft_module_save(src, path), GRAFT_OK);
  snap saved = take(src);
  size_t size;
  uint8_t *file = read_all(path, &size);
  rd_file f;
  rd_parse(file, size, &f);
  const char *hdr = (const char *)file + 8;
  const char *meta = strstr(hdr, "\"__metadata__\"");
  assert_non_null(meta);
  const char *meta_end = strchr(meta, '}');
  assert_non_null(meta_end);
  size_t m0 = (size_t)(meta - hdr), m1 = (size_t)(meta_end - hdr);
  static const uint8_t masks[] = {0x01, 0x10, 0x80};
  int failed = 0, loaded = 0;
  for (size_t i = 0; i < f.header_len; i++)
    for (size_t k = 0; k < TU_N_OF(masks); k++) {
      file[8 + i] ^= masks[k];
      write_all(bad, file, size);
      file[8 + i] ^= masks[k];
      fill(m, 13);
      snap before = take(m);
      graft_status st = graft_module_load(m, bad, 0);
      snap after = take(m);
      if (st == GRAFT_OK) {
        if (i <= m0 || i >= m1)
          fail_msg("flipping header byte %zu ('%c' ^ 0x%02x) loaded", i, hdr[i], masks[k]);
        assert_true(snap_equal(after, saved));
        loaded++;
      } else {
        assert_true(st == GRAFT_ECORRUPT || st == GRAFT_EINVAL || st == GRAFT_EDTYPE ||
                    st == GRAFT_ESHAPE);
        if (!snap_equal(after, before))
          fail_msg("flipping header byte %zu: failed (%s) but changed a variable", i,
                   graft_last_errmsg());
        failed++;
      }
      free(before.bytes);
      free(after.bytes);
    }
  assert_int_equal(failed + loaded, 3 * (int)f.header_len);
  assert_true(loaded > 0); /* the metadata's strings are free-form */
  free(saved.bytes);
  free(file);
  graft_module_destroy(src);
  graft_module_destroy(m);
}

static void test_graft_module_load__invalid_json(void **state) {
  (void)state;
  refuse_small("{" ENTRY_A "," ENTRY_B "," ENTRY_C, 28, GRAFT_ECORRUPT, "not valid JSON", "byte");
  refuse_small("{" ENTRY_A ",," ENTRY_B "," ENTRY_C "}", 28, GRAFT_ECORRUPT, "not valid JSON", "line 1");
  refuse_small("{" ENTRY_A "," ENTRY_B "," ENTRY_C "}x", 28, GRAFT_ECORRUPT, "not valid JSON", "byte");
  refuse_small("[1,2]", 28, GRAFT_ECORRUPT, "does not begin with '{'", "JSON object");
  refuse_small(" {" ENTRY_A "}", 8, GRAFT_ECORRUPT, "does not begin with '{'", "");
  /* not UTF-8 */
  refuse_small("{\"\xff\":{}}", 0, GRAFT_ECORRUPT, "not valid JSON", "unable to decode byte 0xff");
  /* a NUL byte inside the header, and inside a key */
  graft_module *m = small_model();
  const char *path = in_dir("nul.safetensors");
  static const char nul[] = "{" ENTRY_A "}\0";
  write_st_n(path, nul, sizeof nul - 1, NULL, 8);
  expect_refused(m, path, 0, GRAFT_ECORRUPT, "not valid JSON", NULL);
  static const char nul_key[] = "{\"a\\u0000\":{}}";
  write_st(path, nul_key, NULL, 0);
  expect_refused(m, path, 0, GRAFT_ECORRUPT, "not valid JSON", NULL);
  graft_module_destroy(m);
}

static void test_graft_module_load__duplicate_key(void **state) {
  (void)state;
  refuse_small("{" ENTRY_A "," ENTRY_A "," ENTRY_B "," ENTRY_C "}", 28, GRAFT_ECORRUPT,
               "repeats key 'a'", "byte");
  /* too long for jansson to quote, with an escaped quote in it */
  refuse_small("{\"a_key_longer_than_twenty_bytes\\\"q\":{},\"b\":{},"
               "\"a_key_longer_than_twenty_bytes\\\"q\":{}}",
               0, GRAFT_ECORRUPT, "repeats key 'a_key_longer_than_twenty_bytes\"q'", "");
  /* inside an entry */
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               GRAFT_ECORRUPT, "repeats key 'dtype'", "");
}

static void test_graft_module_load__unknown_dtype(void **state) {
  (void)state;
  refuse_small("{" ENTRY_A ",\"b\":{\"dtype\":\"F33\",\"shape\":[3],\"data_offsets\":[8,20]}," ENTRY_C "}",
               28, GRAFT_ECORRUPT, "key 'b'", "unknown dtype 'F33'");
  refuse_small("{" ENTRY_A ",\"b\":{\"dtype\":\"f32\",\"shape\":[3],\"data_offsets\":[8,20]}," ENTRY_C "}",
               28, GRAFT_ECORRUPT, "key 'b'", "unknown dtype 'f32'");
  refuse_small("{" ENTRY_A ",\"b\":{\"dtype\":32,\"shape\":[3],\"data_offsets\":[8,20]}," ENTRY_C "}",
               28, GRAFT_ECORRUPT, "key 'b'", "dtype is an integer");
}

static void test_graft_module_load__negative_or_overlapping_offsets(void **state) {
  (void)state;
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}," ENTRY_B "," ENTRY_C "}",
               28, GRAFT_ECORRUPT, "key 'a'", "data_offsets[0] is a negative integer");
  refuse_small("{" ENTRY_A ",\"b\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[4,16]},"
               "\"sub.c\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[16,24]}}",
               24, GRAFT_ECORRUPT, "key 'b' at [4, 16) overlaps key 'a' at [0, 8)", "");
  /* two keys on the same bytes */
  refuse_small("{" ENTRY_A ",\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               GRAFT_ECORRUPT, "overlaps key", "[0, 8)");
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
               GRAFT_ECORRUPT, "key 'a'", "end before they begin");
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
               GRAFT_ECORRUPT, "key 'a'", "expected [begin, end]");
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.0]}}", 8,
               GRAFT_ECORRUPT, "key 'a'", "data_offsets[1] is a non-integer number");
  /* beyond json_int_t: jansson refuses it */
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999]}}",
               8, GRAFT_ECORRUPT, "not valid JSON", "too big integer");
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[9223372036854775800,"
               "9223372036854775807]}}", 8, GRAFT_ECORRUPT, "key 'a'", "run past the data section");
}

static void test_graft_module_load__gap(void **state) {
  (void)state;
  refuse_small("{" ENTRY_A ",\"b\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[12,24]},"
               "\"sub.c\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[24,32]}}",
               32, GRAFT_ECORRUPT, "4 bytes between key 'a' (ending at 8) and key 'b'", "gap");
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
               "\"b\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[12,24]},"
               "\"sub.c\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[24,32]}}",
               32, GRAFT_ECORRUPT, "first 4 bytes, before key 'a'", "gap");
  refuse_small("{" ENTRY_A "," ENTRY_B "," ENTRY_C "}", 30, GRAFT_ECORRUPT,
               "last 2 bytes of the file, after key 'sub.c'", "gap");
  refuse_small("{}", 4, GRAFT_ECORRUPT, "holds 4 bytes, but the header lists no tensor", "");
}

static void test_graft_module_load__wrong_size(void **state) {
  (void)state;
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}," ENTRY_B "," ENTRY_C "}",
               28, GRAFT_ECORRUPT, "key 'a'", "hold 8 bytes, but F32[3] takes 12");
  refuse_small("{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, GRAFT_ECORRUPT,
               "key 'a'", "F64[2] takes 16");
  /* an element count past int64 */
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}}",
               8, GRAFT_ECORRUPT, "key 'a'", "overflows int64");
  /* a byte count past int64 */
  refuse_small("{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,8]}}",
               8, GRAFT_ECORRUPT, "key 'a'", "overflow int64");
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,8]}}", 8, GRAFT_ECORRUPT,
               "key 'a'", "shape[1] is a negative integer");
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, GRAFT_ECORRUPT,
               "key 'a'", "shape[0] is a non-integer number");
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, GRAFT_ECORRUPT,
               "key 'a'", "shape is an integer");
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, GRAFT_ECORRUPT, "key 'a'",
               "has no shape");
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"crc\":1}}", 8,
               GRAFT_ECORRUPT, "key 'a'", "unexpected field 'crc'");
  refuse_small("{\"a\":[1]}", 0, GRAFT_ECORRUPT, "key 'a' is an array", "");
  refuse_small("{\"__metadata__\":{\"format\":1}," ENTRY_A "}", 8, GRAFT_ECORRUPT,
               "'__metadata__' entry 'format' is an integer", "");
  refuse_small("{\"__metadata__\":[]," ENTRY_A "}", 8, GRAFT_ECORRUPT, "'__metadata__' is an array",
               "");
}

/* Valid files that do not fit the module. */
static void test_graft_module_load__wrong_shape_or_dtype(void **state) {
  (void)state;
  refuse_small("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]}," ENTRY_B "," ENTRY_C "}",
               28, GRAFT_ESHAPE, "key 'a' is F32[1,2], but variable 'm/a' is F32[2]", "");
  refuse_small("{" ENTRY_A "," ENTRY_B ",\"sub.c\":{\"dtype\":\"F64\",\"shape\":[1],"
               "\"data_offsets\":[20,28]}}", 28, GRAFT_ESHAPE, "key 'sub.c' is F64[1]",
               "variable 'm/sub/c' is F64[]");
  refuse_small("{" ENTRY_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]}," ENTRY_C "}",
               28, GRAFT_EDTYPE, "key 'b' is F32[3], but variable 'm/b' is I32[3]", "");
  refuse_small("{" ENTRY_A ",\"b\":{\"dtype\":\"U32\",\"shape\":[3],\"data_offsets\":[8,20]}," ENTRY_C "}",
               28, GRAFT_EDTYPE, "key 'b' is U32[3]", "graft holds F32, F64 and I32");
}

static void test_graft_module_load__missing_key(void **state) {
  (void)state;
  graft_module *m = small_model();
  fill(m, 14);
  const char *path = in_dir("missing.safetensors");
  write_st(path, "{" ENTRY_A "," ENTRY_B "}", NULL, 20);
  expect_refused(m, path, 0, GRAFT_EINVAL, "the file lacks key 'sub.c' of the module (1 missing)",
                 "NONSTRICT", NULL);
  /* non-strict: a and b load, sub.c keeps its value */
  snap before = take(m);
  graft_load_report rep;
  tu_assert_status(graft_module_load_ex(m, path, GRAFT_LOAD_NONSTRICT, &rep), GRAFT_OK);
  assert_int_equal(rep.loaded, 2);
  assert_int_equal(rep.missing, 1);
  assert_int_equal(rep.unexpected, 0);
  assert_string_equal(rep.keys, "-sub.c");
  snap after = take(m);
  for (size_t i = 0; i < 20; i++) assert_int_equal(after.bytes[i], i);
  assert_memory_equal(after.bytes + 20, before.bytes + 20, 8);
  free(before.bytes), free(after.bytes);
  graft_module_destroy(m);
}

static void test_graft_module_load__extra_key(void **state) {
  (void)state;
  graft_module *m = small_model();
  fill(m, 15);
  const char *path = in_dir("extra.safetensors");
  /* a dtype graft does not hold is fine on a key it does not load */
  write_st(path, "{" ENTRY_A "," ENTRY_B "," ENTRY_C
                 ",\"head.x\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[28,32]}}", NULL, 32);
  expect_refused(m, path, 0, GRAFT_EINVAL, "has key 'head.x' the module lacks (1 unexpected)", NULL);
  graft_load_report rep;
  tu_assert_status(graft_module_load_ex(m, path, GRAFT_LOAD_NONSTRICT, &rep), GRAFT_OK);
  assert_int_equal(rep.loaded, 3);
  assert_int_equal(rep.missing, 0);
  assert_int_equal(rep.unexpected, 1);
  assert_string_equal(rep.keys, "+head.x");
  snap s = take(m);
  for (size_t i = 0; i < 28; i++) assert_int_equal(s.bytes[i], i);
  free(s.bytes);
  graft_module_destroy(m);
}

static void test_graft_module_load__nonstrict_reports_missing_and_extra(void **state) {
  (void)state;
  graft_module *m = small_model();
  fill(m, 16);
  const char *path = in_dir("both.safetensors");
  write_st(path, "{\"z\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[20,24]}," ENTRY_A "," ENTRY_B
                 ",\"y\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[24,24]}}", NULL, 24);
  expect_refused(m, path, 0, GRAFT_EINVAL, "lacks key 'sub.c' of the module (1 missing)",
                 "has key 'y' the module lacks (2 unexpected)", NULL);
  graft_load_report rep;
  tu_assert_status(graft_module_load_ex(m, path, GRAFT_LOAD_NONSTRICT, &rep), GRAFT_OK);
  assert_int_equal(rep.loaded, 2);
  assert_int_equal(rep.missing, 1);
  assert_int_equal(rep.unexpected, 2);
  assert_string_equal(rep.keys, "-sub.c +y +z");
  /* the report is filled on a failure too */
  tu_assert_status(graft_module_load_ex(m, path, 0, &rep), GRAFT_EINVAL);
  assert_int_equal(rep.loaded, 0);
  assert_int_equal(rep.missing, 1);
  assert_int_equal(rep.unexpected, 2);
  graft_module_destroy(m);
}

/* A shared module's variable is read once: its keys must hold the same bytes. */
static void test_graft_module_load__shared_keys_must_agree(void **state) {
  (void)state;
  graft_module *src = big_model(), *m = big_model();
  fill(src, 17);
  fill(m, 18);
  const char *path = in_dir("shared.safetensors");
  tu_assert_status(graft_module_save(src, path), GRAFT_OK);
  size_t size;
  uint8_t *file = read_all(path, &size);
  rd_file f;
  rd_parse(file, size, &f);
  const rd_entry *e = rd_find(&f, "dec_proj.k");
  assert_non_null(e);
  file[8 + f.header_len + e->begin + 3] ^= 0x40;
  write_all(path, file, size);
  expect_refused(m, path, 0, GRAFT_EINVAL, "keys 'enc.proj.k' and 'dec_proj.k' hold different data",
                 "variable 'model/enc/proj/k'", NULL);
  expect_refused(m, path, GRAFT_LOAD_NONSTRICT, GRAFT_EINVAL, "'dec_proj.k'", NULL);
  free(file);
  graft_module_destroy(src);
  graft_module_destroy(m);
}

/* One path of a shared variable missing: strict refuses, non-strict loads
 * it from the other path. */
static void test_graft_module_load__shared_variable_under_one_path(void **state) {
  (void)state;
  graft_module *m = module(NULL, "t");
  graft_module *s = module(m, "s");
  var(s, "k", GRAFT_I32, 1, (int64_t[]){2});
  tu_assert_status(graft_module_attach(m, "again", s), GRAFT_OK);
  const int32_t want[2] = {41, -42};
  const char *path = in_dir("one_path.safetensors");
  write_st(path, "{\"again.k\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", want, 8);
  expect_refused(m, path, 0, GRAFT_EINVAL, "lacks key 's.k'", NULL);
  graft_load_report rep;
  tu_assert_status(graft_module_load_ex(m, path, GRAFT_LOAD_NONSTRICT, &rep), GRAFT_OK);
  assert_int_equal(rep.loaded, 1);
  assert_string_equal(rep.keys, "-s.k");
  int64_t n;
  graft_variable **v = vars_of(m, &n);
  assert_int_equal(n, 1);
  assert_memory_equal(graft_tensor_data(graft_variable_value(v[0])), want, 8);
  free(v);
  graft_module_destroy(m);
}

/* ---- paths ------------------------------------------------------------------------ */

static void test_graft_module_load__directory_or_missing_path(void **state) {
  (void)state;
  graft_module *m = small_model();
  fill(m, 19);
  expect_refused(m, g_dir, 0, GRAFT_EIO, "is a directory", NULL);
  expect_refused(m, in_dir("nope.safetensors"), 0, GRAFT_EIO, "cannot open it",
                 "No such file or directory", NULL);
  /* a FIFO is refused at once (opening it does not wait for a writer) */
  const char *fifo = in_dir("fifo");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  expect_refused(m, fifo, 0, GRAFT_EIO, "not a regular file", NULL);
  snap before = take(m);
  tu_assert_status(graft_module_load(NULL, fifo, 0), GRAFT_EINVAL);
  tu_assert_msg_has(graft_last_errmsg(), "m is NULL");
  tu_assert_status(graft_module_load(m, NULL, 0), GRAFT_EINVAL);
  tu_assert_msg_has(graft_last_errmsg(), "path is NULL");
  tu_assert_status(graft_module_load(m, fifo, 6), GRAFT_EINVAL);
  tu_assert_msg_has(graft_last_errmsg(), "flags 0x6 has unknown bits");
  assert_unchanged(m, before);
  free(before.bytes);
  graft_module_destroy(m);
}

static void test_graft_module_load__unreadable_file(void **state) {
  (void)state;
  graft_module *src = small_model(), *m = small_model();
  fill(src, 20);
  fill(m, 21);
  const char *path = in_dir("locked.safetensors");
  tu_assert_status(graft_module_save(src, path), GRAFT_OK);
  assert_int_equal(chmod(path, 0), 0);
  int fd = open(path, O_RDONLY);
  if (fd >= 0) { /* root reads it anyway */
    close(fd);
    graft_module_destroy(src);
    graft_module_destroy(m);
    skip();
  }
  expect_refused(m, path, 0, GRAFT_EIO, "cannot open it", "Permission denied", NULL);
  graft_module_destroy(src);
  graft_module_destroy(m);
}

static void test_graft_module_save__interrupted_after_temp_file(void **state) {
  (void)state;
  graft_module *m = big_model(), *back = big_model();
  fill(m, 22);
  const char *path = in_dir("ckpt.safetensors");
  tu_assert_status(graft_module_save(m, path), GRAFT_OK);
  snap old = take(m);
  fill(m, 23);
  graft__checkpoint_fail_after_tmp = 1;
  graft_status st = graft_module_save(m, path);
  graft__checkpoint_fail_after_tmp = 0;
  tu_assert_status(st, GRAFT_EIO);
  tu_assert_msg_has(graft_last_errmsg(), "graft_module_save");
  tu_assert_msg_has(graft_last_errmsg(), "interrupted after writing the temporary file");
  char names[256];
  dir_listing(names, sizeof names);
  assert_string_equal(names, "ckpt.safetensors"); /* no temporary file left */
  tu_assert_status(graft_module_load(back, path, 0), GRAFT_OK);
  snap got = take(back);
  assert_true(snap_equal(got, old));
  free(old.bytes), free(got.bytes);
  graft_module_destroy(m);
  graft_module_destroy(back);
}

static void test_graft_module_save__bad_paths(void **state) {
  (void)state;
  graft_module *m = small_model();
  tu_assert_status(graft_module_save(m, in_dir("no/such/folder.safetensors")), GRAFT_EIO);
  tu_assert_msg_has(graft_last_errmsg(), "cannot create a temporary file");
  tu_assert_msg_has(graft_last_errmsg(), "No such file or directory");
  /* a folder where the file should go: the rename fails, the temporary file goes */
  const char *dir = in_dir("taken");
  assert_int_equal(mkdir(dir, 0700), 0);
  char inner[300];
  snprintf(inner, sizeof inner, "%s/x", dir);
  write_all(inner, "x", 1);
  tu_assert_status(graft_module_save(m, dir), GRAFT_EIO);
  tu_assert_msg_has(graft_last_errmsg(), "cannot rename the temporary file over it");
  char names[256];
  dir_listing(names, sizeof names);
  assert_string_equal(names, "taken");
  tu_assert_status(graft_module_save(NULL, dir), GRAFT_EINVAL);
  tu_assert_msg_has(graft_last_errmsg(), "m is NULL");
  tu_assert_status(graft_module_save(m, NULL), GRAFT_EINVAL);
  tu_assert_status(graft_module_save(m, ""), GRAFT_EINVAL);
  tu_assert_msg_has(graft_last_errmsg(), "path is empty");
  graft_module_destroy(m);
}

/* A relative path (its folder is "."), and the in-memory loader the fuzz
 * target drives. */
static void test_graft_module_save__relative_path_and_memory_load(void **state) {
  (void)state;
  char cwd[512];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(g_dir), 0);
  graft_module *m = small_model(), *back = small_model();
  fill(m, 24);
  graft_status st = graft_module_save(m, "rel.safetensors");
  assert_int_equal(chdir(cwd), 0);
  tu_assert_status(st, GRAFT_OK);
  size_t size;
  uint8_t *file = read_all(in_dir("rel.safetensors"), &size);
  graft_load_report rep;
  tu_assert_status(graft__checkpoint_load_mem(back, "memory", file, (int64_t)size, 0, &rep), GRAFT_OK);
  assert_int_equal(rep.loaded, 3);
  snap a = take(m), b = take(back);
  assert_true(snap_equal(a, b));
  fill(back, 25);
  tu_assert_status(graft__checkpoint_load_mem(back, "memory", file, 7, 0, &rep), GRAFT_ECORRUPT);
  tu_assert_msg_has(graft_last_errmsg(), "'memory'");
  free(a.bytes), free(b.bytes), free(file);
  graft_module_destroy(m);
  graft_module_destroy(back);
}

/* ---- allocation failure -------------------------------------------------------- */

/* Fails the allocation that brings countdown to 0; counts live blocks. */
static struct {
  long countdown, live;
  int hit;
} g_cd;

static void *cd_alloc(void *ctx, size_t size, size_t align) {
  (void)ctx;
  if (g_cd.countdown > 0 && --g_cd.countdown == 0) {
    g_cd.hit = 1;
    return NULL;
  }
  void *p = aligned_alloc(align, (size + align - 1) / align * align);
  g_cd.live += p != NULL;
  return p;
}

static void cd_free(void *ctx, void *p) {
  (void)ctx;
  g_cd.live--;
  free(p);
}

/* Each allocation of a save and of a load failed in turn: GRAFT_ENOMEM,
 * every block given back, the checkpoint and the variables as they were.
 * (jansson's own allocations do not go through graft's hook.) */
static void test_graft_module_save__allocation_failures_in_save_and_load(void **state) {
  (void)state;
  static const graft_allocator hook = {cd_alloc, cd_free, NULL};
  graft_set_allocator(&hook);
  memset(&g_cd, 0, sizeof g_cd);
  graft_module *m = big_model(), *back = big_model();
  fill(m, 26);
  const char *path = in_dir("alloc.safetensors");
  tu_assert_status(graft_module_save(m, path), GRAFT_OK);
  size_t size;
  uint8_t *old = read_all(path, &size);
  fill(m, 27);
  int save_fails = 0, load_fails = 0;
  for (long n = 1;; n++) {
    long live = g_cd.live;
    g_cd.countdown = n;
    g_cd.hit = 0;
    graft_status st = graft_module_save(m, path);
    g_cd.countdown = 0;
    if (!g_cd.hit) {
      tu_assert_status(st, GRAFT_OK);
      break;
    }
    tu_assert_status(st, GRAFT_ENOMEM);
    tu_assert_msg_has(graft_last_errmsg(), "graft_module_save");
    assert_int_equal(g_cd.live, live);
    size_t now_size;
    uint8_t *now = read_all(path, &now_size);
    assert_true(now_size == size && !memcmp(now, old, size));
    free(now);
    char names[256];
    dir_listing(names, sizeof names);
    assert_string_equal(names, "alloc.safetensors");
    save_fails++;
  }
  fill(back, 28);
  snap before = take(back), want = take(m);
  for (long n = 1;; n++) {
    long live = g_cd.live;
    g_cd.countdown = n;
    g_cd.hit = 0;
    graft_status st = graft_module_load(back, path, 0);
    g_cd.countdown = 0;
    if (!g_cd.hit) {
      tu_assert_status(st, GRAFT_OK);
      break;
    }
    tu_assert_status(st, GRAFT_ENOMEM);
    tu_assert_msg_has(graft_last_errmsg(), "graft_module_load");
    assert_int_equal(g_cd.live, live);
    assert_unchanged(back, before);
    load_fails++;
  }
  snap got = take(back);
  assert_true(snap_equal(got, want));
  assert_true(save_fails >= 3 && load_fails >= 3);
  free(old), free(before.bytes), free(want.bytes), free(got.bytes);
  graft_module_destroy(m);
  graft_module_destroy(back);
  assert_int_equal(g_cd.live, 0);
  graft_set_allocator(NULL);
}

int main(void) {
#define T(f) cmocka_unit_test_setup(f, per_test_clear)
  const struct CMUnitTest tests[] = {
      T(test_graft_module_save__round_trip_is_bitwise),
      T(test_graft_module_save__training_state_resumes_bitwise),
      T(test_graft_module_save__file_read_by_an_independent_reader),
      T(test_graft_module_load__file_of_another_writer),
      T(test_graft_module_save__empty_module),
      T(test_graft_module_load__valid_small_file_loads),
      T(test_graft_module_load__truncated_file),
      T(test_graft_module_load__zero_byte_file),
      T(test_graft_module_load__header_length_past_the_file),
      T(test_graft_module_load__flipped_byte_in_header),
      T(test_graft_module_load__invalid_json),
      T(test_graft_module_load__duplicate_key),
      T(test_graft_module_load__unknown_dtype),
      T(test_graft_module_load__negative_or_overlapping_offsets),
      T(test_graft_module_load__gap),
      T(test_graft_module_load__wrong_size),
      T(test_graft_module_load__wrong_shape_or_dtype),
      T(test_graft_module_load__missing_key),
      T(test_graft_module_load__extra_key),
      T(test_graft_module_load__nonstrict_reports_missing_and_extra),
      T(test_graft_module_load__shared_keys_must_agree),
      T(test_graft_module_load__shared_variable_under_one_path),
      T(test_graft_module_load__directory_or_missing_path),
      T(test_graft_module_load__unreadable_file),
      T(test_graft_module_save__interrupted_after_temp_file),
      T(test_graft_module_save__bad_paths),
      T(test_graft_module_save__relative_path_and_memory_load),
      T(test_graft_module_save__allocation_failures_in_save_and_load),
  };
#undef T
  return cmocka_run_group_tests_name("graph/checkpoint", tests, setup, teardown);
}
