/* The `checkpoint` fuzz target: one input is the bytes of a safetensors
 * file, loaded into a small fixed module (graft__checkpoint_load_mem, what
 * graft_module_load runs on the mapped file) strictly and non-strictly.
 *
 * The module: a f32[2,3], b f64[3], n i32[] and e f32[0,2] of its own; a
 * submodule sub (k i32[2]) attached again as tied, so its variable has two
 * paths; layers[0] (w f64[1]).  Paths: a b n e sub.k tied.k layers[0].w.
 *
 * Before each load every variable holds a known pattern.  Findings
 * (fz_die), besides what the sanitizers report:
 *   - a status other than OK, ECORRUPT, EINVAL, ESHAPE, EDTYPE (ENOMEM only
 *     when the budget refused memory), a failure without a message naming
 *     graft_module_load, a report that says something was loaded;
 *   - a failed load that changed a variable;
 *   - a load that succeeded on a file this harness finds invalid: the
 *     harness checks the layout itself (the length, the JSON object, each
 *     entry's dtype, shape and size, the entries tiling the data section);
 *   - a successful load whose variables differ from the file's bytes under
 *     their keys (or, non-strictly, from the pattern where a key is
 *     missing), or whose report miscounts;
 *   - the two loads disagreeing: a strict success must also be a
 *     non-strict one with the same result, and a malformed file
 *     (ECORRUPT) is malformed for both.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "budget.h"
#include "fuzz.h"
#include "graph/checkpoint_int.h"

#define N_PATHS 7

static graft_module *root;
static struct {
  const char *key;
  graft_variable *v;
} paths[N_PATHS];
static int n_vars;
static graft_variable *vars[8];

/* What the replayed corpus reached (fz_target_check). */
enum { R_STRICT_OK, R_NONSTRICT_ONLY, R_CORRUPT, R_INVAL, R_SHAPE, R_DTYPE, R_COUNT };
static const char *const reached_name[R_COUNT] = {
    "a strict load that succeeds", "a load only non-strict succeeds", "GRAFT_ECORRUPT",
    "GRAFT_EINVAL (keys, shared data)", "GRAFT_ESHAPE", "GRAFT_EDTYPE"};
static int reached[R_COUNT];

/* ---- the module ------------------------------------------------------------ */

static size_t bytes_of(const graft_variable *v) {
  const graft_tensor *t = graft_variable_value(v);
  return (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t));
}

static uint8_t *data_of(const graft_variable *v) { return graft_tensor_data(graft_variable_value(v)); }

static uint8_t pattern(int var, size_t i) { return (uint8_t)(0xA5 ^ (var * 37 + (int)i * 11)); }

static void set_pattern(void) {
  for (int j = 0; j < n_vars; j++)
    for (size_t i = 0; i < bytes_of(vars[j]); i++) data_of(vars[j])[i] = pattern(j, i);
}

static int var_index(const graft_variable *v) {
  for (int j = 0; j < n_vars; j++)
    if (vars[j] == v) return j;
  fz_die("harness: a path's variable is not among the module's");
}

static int has_pattern(const graft_variable *v) {
  int j = var_index(v);
  for (size_t i = 0; i < bytes_of(v); i++)
    if (data_of(v)[i] != pattern(j, i)) return 0;
  return 1;
}

static void must(graft_status st, const char *what) {
  if (st) fz_die("harness: %s: %s", what, graft_last_errmsg());
}

static graft_variable *var(graft_module *m, const char *name, graft_dtype dt, int rank,
                           const int64_t *shape) {
  graft_variable *v;
  must(graft_variable_create(m, name, dt, rank, shape, NULL, 0, &v), "graft_variable_create");
  return v;
}

static int path_i;
static graft_status add_path(const char *path, graft_variable *v, void *user) {
  (void)user;
  if (path_i >= N_PATHS) fz_die("harness: more than %d paths", N_PATHS);
  paths[path_i].key = strdup(path);
  paths[path_i++].v = v;
  return GRAFT_OK;
}

static void build(void) {
  graft_module *sub, *layer;
  must(graft_module_create(NULL, "m", &root), "graft_module_create");
  var(root, "a", GRAFT_F32, 2, (int64_t[]){2, 3});
  var(root, "b", GRAFT_F64, 1, (int64_t[]){3});
  var(root, "n", GRAFT_I32, 0, NULL);
  var(root, "e", GRAFT_F32, 2, (int64_t[]){0, 2});
  must(graft_module_create(root, "sub", &sub), "graft_module_create");
  var(sub, "k", GRAFT_I32, 1, (int64_t[]){2});
  must(graft_module_attach(root, "tied", sub), "graft_module_attach");
  must(graft_module_create(NULL, "layer", &layer), "graft_module_create");
  var(layer, "w", GRAFT_F64, 1, (int64_t[]){1});
  must(graft_module_attach(root, "layers[0]", layer), "graft_module_attach");
  graft_module_destroy(layer);
  int64_t n;
  must(graft_module_variables(root, 8, vars, &n), "graft_module_variables");
  n_vars = (int)n;
  must(graft_module_flatten(root, add_path, NULL), "graft_module_flatten");
  if (path_i != N_PATHS) fz_die("harness: %d paths, expected %d", path_i, N_PATHS);
}

/* ---- the harness's own reading of the file --------------------------------------- */

typedef struct entry {
  const char *key;
  int64_t begin, end;
} entry;

static int by_offsets(const void *a, const void *b) {
  const entry *x = a, *y = b;
  return x->begin != y->begin ? (x->begin > y->begin) - (x->begin < y->begin)
                              : (x->end > y->end) - (x->end < y->end);
}

static int64_t dtype_size(const char *s) {
  static const struct {
    const char *name;
    int64_t size;
  } t[] = {{"F32", 4}, {"F64", 8}, {"I32", 4}, {"BOOL", 1}, {"U8", 1}, {"I8", 1},
           {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2},
           {"F16", 2}, {"BF16", 2}, {"U32", 4}, {"I64", 8}, {"U64", 8}, {"C64", 8}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(s, t[i].name)) return t[i].size;
  return 0;
}

/* Checks a file graft loaded against the format's rules and returns its
 * JSON header (the caller frees it); *data_at: where the data section
 * begins.  Dies on any rule broken. */
static json_t *check_valid(const uint8_t *data, size_t size, size_t *data_at) {
  if (size < 8) fz_die("graft loaded a file of %zu bytes", size);
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--) len = len << 8 | data[i];
  if (len > size - 8 || len == 0 || data[8] != '{') fz_die("graft loaded a bad header length %llu", (unsigned long long)len);
  json_error_t err;
  json_t *root_json = json_loadb((const char *)data + 8, len, JSON_REJECT_DUPLICATES, &err);
  if (!json_is_object(root_json)) fz_die("graft loaded a header jansson refuses: %s", err.text);
  *data_at = 8 + len;
  int64_t data_bytes = (int64_t)(size - *data_at);
  entry *es = calloc(json_object_size(root_json) + 1, sizeof *es);
  if (!es) fz_die("harness: out of memory");
  size_t n = 0;
  const char *key;
  json_t *e;
  json_object_foreach(root_json, key, e) {
    if (!strcmp(key, "__metadata__")) {
      const char *k;
      json_t *v;
      if (!json_is_object(e)) fz_die("graft loaded a file whose __metadata__ is not an object");
      json_object_foreach(e, k, v) if (!json_is_string(v)) fz_die("graft loaded non-string metadata");
      continue;
    }
    json_t *dt = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape"),
           *offs = json_object_get(e, "data_offsets");
    if (!json_is_object(e) || json_object_size(e) != 3 || !json_is_string(dt) ||
        !json_is_array(shape) || !json_is_array(offs) || json_array_size(offs) != 2)
      fz_die("graft loaded key '%s', not {dtype, shape, data_offsets}", key);
    int64_t count = dtype_size(json_string_value(dt));
    if (!count) fz_die("graft loaded key '%s' of dtype '%s'", key, json_string_value(dt));
    int zero = 0;
    for (size_t d = 0; d < json_array_size(shape); d++) {
      json_t *x = json_array_get(shape, d);
      if (!json_is_integer(x) || json_integer_value(x) < 0) fz_die("graft loaded key '%s': a bad dim", key);
      zero |= json_integer_value(x) == 0;
      if (!zero && __builtin_mul_overflow(count, (int64_t)json_integer_value(x), &count))
        fz_die("graft loaded key '%s' whose size overflows", key);
    }
    if (zero) count = 0;
    json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
    if (!json_is_integer(b) || !json_is_integer(en)) fz_die("graft loaded key '%s': bad offsets", key);
    es[n] = (entry){key, json_integer_value(b), json_integer_value(en)};
    if (es[n].begin < 0 || es[n].end > data_bytes || es[n].end - es[n].begin != count)
      fz_die("graft loaded key '%s' at [%lld, %lld) (size %lld, section %lld)", key,
             (long long)es[n].begin, (long long)es[n].end, (long long)count, (long long)data_bytes);
    n++;
  }
  qsort(es, n, sizeof *es, by_offsets);
  int64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (es[i].begin != at) fz_die("graft loaded a file with a gap or overlap at key '%s'", es[i].key);
    at = es[i].end;
  }
  if (at != data_bytes) fz_die("graft loaded a file with %lld bytes after the last tensor", (long long)(data_bytes - at));
  free(es);
  return root_json;
}

/* After a successful load: each path's variable holds its key's bytes,
 * or the pattern where the file lacks the key (non-strict). */
static void check_loaded(const uint8_t *data, size_t size, unsigned flags, const graft_load_report *rep) {
  size_t data_at;
  json_t *h = check_valid(data, size, &data_at);
  int64_t present = 0, unexpected = 0;
  const char *key;
  json_t *e;
  json_object_foreach(h, key, e) {
    if (!strcmp(key, "__metadata__")) continue;
    int known = 0;
    for (int p = 0; p < N_PATHS; p++) known |= !strcmp(paths[p].key, key);
    unexpected += !known;
  }
  for (int p = 0; p < N_PATHS; p++) {
    json_t *ent = json_object_get(h, paths[p].key);
    const graft_variable *v = paths[p].v;
    if (!ent) {
      if (!(flags & GRAFT_LOAD_NONSTRICT)) fz_die("a strict load passed without key '%s'", paths[p].key);
      /* a shared variable may have loaded through its other path */
      int other = 0;
      for (int q = 0; q < N_PATHS; q++) other |= q != p && paths[q].v == v && json_object_get(h, paths[q].key);
      if (!other && !has_pattern(v)) fz_die("variable of missing key '%s' changed", paths[p].key);
      continue;
    }
    present++;
    int64_t begin = json_integer_value(json_array_get(json_object_get(ent, "data_offsets"), 0));
    if (memcmp(data_of(v), data + data_at + begin, bytes_of(v)))
      fz_die("variable of key '%s' differs from the file's bytes", paths[p].key);
  }
  if (rep->loaded != present || rep->missing != N_PATHS - present || rep->unexpected != unexpected)
    fz_die("report: loaded %lld missing %lld unexpected %lld, want %lld %lld %lld",
           (long long)rep->loaded, (long long)rep->missing, (long long)rep->unexpected,
           (long long)present, (long long)(N_PATHS - present), (long long)unexpected);
  if (!(flags & GRAFT_LOAD_NONSTRICT) && unexpected) fz_die("a strict load passed with unexpected keys");
  json_decref(h);
}

/* ---- one input ---------------------------------------------------------------------- */

/* A load from the pattern; returns its status after the checks that hold
 * for one load. */
static graft_status load(const uint8_t *data, size_t size, unsigned flags, int64_t *refused) {
  set_pattern();
  graft_load_report rep;
  int64_t before = fz_budget_refusals();
  graft_status st = graft__checkpoint_load_mem(root, "fuzz", data, (int64_t)size, flags, &rep);
  *refused = fz_budget_refusals() - before;
  const char *msg = graft_last_errmsg();
  switch (st) {
  case GRAFT_OK: check_loaded(data, size, flags, &rep); return st;
  case GRAFT_ENOMEM:
    if (!*refused) fz_die("GRAFT_ENOMEM with no allocation refused: %s", msg);
    break;
  case GRAFT_ECORRUPT:
  case GRAFT_EINVAL:
  case GRAFT_ESHAPE:
  case GRAFT_EDTYPE: break;
  default: fz_die("load returned %d (%s): %s", (int)st, graft_status_name(st), msg);
  }
  if (!strstr(msg, "graft_module_load")) fz_die("a failed load left the message '%s'", msg);
  if (rep.loaded) fz_die("a failed load reports %lld loaded", (long long)rep.loaded);
  for (int j = 0; j < n_vars; j++)
    if (!has_pattern(vars[j])) fz_die("a failed load (%s: %s) changed a variable", graft_status_name(st), msg);
  return st;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fz_budget_install();
  build();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int64_t ref_s, ref_n;
  graft_status strict = load(data, size, 0, &ref_s);
  uint8_t *first = NULL;
  if (strict == GRAFT_OK) { /* keep what it loaded */
    size_t total = 0;
    for (int j = 0; j < n_vars; j++) total += bytes_of(vars[j]);
    first = malloc(total + 1);
    if (!first) fz_die("harness: out of memory");
    for (int j = 0, at = 0; j < n_vars; at += (int)bytes_of(vars[j]), j++) memcpy(first + at, data_of(vars[j]), bytes_of(vars[j]));
  }
  graft_status loose = load(data, size, GRAFT_LOAD_NONSTRICT, &ref_n);
  if (!ref_s && !ref_n) {
    if (strict == GRAFT_OK && loose != GRAFT_OK)
      fz_die("strict load succeeded, non-strict failed (%s)", graft_status_name(loose));
    if ((strict == GRAFT_ECORRUPT) != (loose == GRAFT_ECORRUPT))
      fz_die("malformed for one load only: strict %s, non-strict %s", graft_status_name(strict),
             graft_status_name(loose));
  }
  if (first && loose == GRAFT_OK)
    for (int j = 0, at = 0; j < n_vars; at += (int)bytes_of(vars[j]), j++)
      if (memcmp(first + at, data_of(vars[j]), bytes_of(vars[j])))
        fz_die("strict and non-strict loads of one file differ");
  free(first);
  reached[R_STRICT_OK] |= strict == GRAFT_OK;
  reached[R_NONSTRICT_ONLY] |= strict != GRAFT_OK && loose == GRAFT_OK;
  reached[R_CORRUPT] |= strict == GRAFT_ECORRUPT;
  reached[R_INVAL] |= strict == GRAFT_EINVAL;
  reached[R_SHAPE] |= strict == GRAFT_ESHAPE;
  reached[R_DTYPE] |= strict == GRAFT_EDTYPE;
  return 0;
}

int fz_target_check(void) { return fz_check_reached(R_COUNT, reached, reached_name); }

/* ---- seeds ------------------------------------------------------------------------------- */

/* A file of header text h and n data bytes (0, 7, 14, ...; with tied, the
 * bytes [60, 68) of the data repeat [52, 60), so the fixed module's sub.k
 * and tied.k agree). */
static int seed_st_tied(const char *dir, const char *name, const char *h, size_t n, int tied) {
  size_t hl = strlen(h);
  uint8_t *buf = malloc(8 + hl + n + 1);
  if (!buf) return -1;
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, h, hl);
  for (size_t i = 0; i < n; i++) buf[8 + hl + i] = (uint8_t)(i * 7);
  if (tied && n >= 68) memcpy(buf + 8 + hl + 60, buf + 8 + hl + 52, 8);
  int r = fz_write_seed(dir, name, buf, 8 + hl + n);
  free(buf);
  return r;
}

static int seed_st(const char *dir, const char *name, const char *h, size_t n) {
  return seed_st_tied(dir, name, h, n, 1);
}

/* The fixed module's entries in a header: data a 0-24, b 24-48, n 48-52,
 * e 52-52, sub.k 52-60, tied.k 60-68, layers[0].w 68-76. */
#define E_A "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"
#define E_B "\"b\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[24,48]}"
#define E_N "\"n\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[48,52]}"
#define E_E "\"e\":{\"dtype\":\"F32\",\"shape\":[0,2],\"data_offsets\":[52,52]}"
#define E_K "\"sub.k\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[52,60]}"
#define E_T "\"tied.k\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[60,68]}"
#define E_W "\"layers[0].w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[68,76]}"
#define ALL E_A "," E_B "," E_N "," E_E "," E_K "," E_T "," E_W

int fz_target_seeds(const char *dir) {
  if (mkdir(dir, 0777) && errno != EEXIST) {
    perror(dir);
    return -1;
  }
  /* a file graft wrote, its shared keys agreeing */
  char path[1024];
  snprintf(path, sizeof path, "%s/seed-saved", dir);
  set_pattern();
  if (graft_module_save(root, path)) {
    fprintf(stderr, "%s\n", graft_last_errmsg());
    return -1;
  }
  FILE *f = fopen(path, "rb");
  uint8_t saved[4096];
  size_t n = f ? fread(saved, 1, sizeof saved, f) : 0;
  if (f) fclose(f);
  if (n < 16) return -1;
  uint8_t cut[4096];
  memcpy(cut, saved, n);
  cut[8 + 3] ^= 0x01; /* a flipped byte in the header */
  int rc = fz_write_seed(dir, "flipped-header", cut, n);
  cut[8 + 3] ^= 0x01;
  cut[0] = (uint8_t)(cut[0] + 1); /* the header length one past */
  rc |= fz_write_seed(dir, "length-past", cut, n);
  rc |= fz_write_seed(dir, "truncated", saved, n - 3);
  rc |= fz_write_seed(dir, "zero-bytes", saved, 0);
  /* hand-written files */
  rc |= seed_st_tied(dir, "shared-disagree", "{" ALL "}", 76, 0);
  rc |= seed_st(dir, "written-by-hand", "{" ALL "}", 76);
  rc |= seed_st(dir, "other-writer",
                "{ \"layers[0].w\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]},"
                " \"sub.k\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [8, 16]},"
                " \"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [16, 40]},"
                " \"b\": {\"dtype\": \"F64\", \"shape\": [3], \"data_offsets\": [40, 64]},"
                " \"n\": {\"dtype\": \"I32\", \"shape\": [], \"data_offsets\": [64, 68]},"
                " \"e\": {\"dtype\": \"F32\", \"shape\": [0, 2], \"data_offsets\": [68, 68]},"
                " \"x\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [68, 72]} }   ",
                72);
  rc |= seed_st(dir, "invalid-json", "{" E_A "," E_B, 48);
  rc |= seed_st(dir, "duplicate-key", "{" E_A "," E_A "}", 24);
  rc |= seed_st(dir, "unknown-dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24);
  rc |= seed_st(dir, "negative-offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[-24,0]}}", 24);
  rc |= seed_st(dir, "overlap", "{" E_A ",\"b\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[16,40]}}", 40);
  rc |= seed_st(dir, "gap", "{" E_A ",\"b\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[32,56]}}", 56);
  rc |= seed_st(dir, "wrong-size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,24]}}", 24);
  rc |= seed_st(dir, "wrong-shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}," E_B "," E_N "," E_E "," E_K "," E_T "," E_W "}", 76);
  rc |= seed_st(dir, "wrong-dtype", "{\"a\":{\"dtype\":\"I32\",\"shape\":[2,3],\"data_offsets\":[0,24]}," E_B "," E_N "," E_E "," E_K "," E_T "," E_W "}", 76);
  rc |= seed_st(dir, "missing-key", "{" E_A "," E_B "," E_N "," E_E "," E_K "," E_T "}", 68);
  rc |= seed_st(dir, "extra-key", "{" ALL ",\"z\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[76,79]}}", 79);
  rc |= seed_st(dir, "huge-numbers", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,9223372036854775807]}}", 8);
  rc |= seed_st(dir, "metadata", "{\"__metadata__\":{\"format\":\"graft\",\"n\":1}," E_A "}", 24);
  return rc ? -1 : 0;
}
