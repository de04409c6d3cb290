/* The safetensors format: a validating parser for files from anywhere and
 * the header writer (safetensors.h states the rules).  The JSON is read
 * and written by jansson; this file checks what the JSON says.  Every
 * number from the file is untrusted: header lengths, dims and offsets go
 * through the checked size helpers, and jansson refuses integers beyond
 * json_int_t (long long, int64 here) itself. */
#include "graph/safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graft/version.h"

_Static_assert(sizeof(json_int_t) == sizeof(int64_t), "jansson's json_int_t must be 64 bits");

#define META_KEY "__metadata__"

/* safetensors' byte-sized dtypes: names, element sizes and graft's dtype
 * (-1: none).  The others still have to be valid (a file written for
 * another framework loads the keys graft holds, non-strictly). */
static const struct {
  const char *name;
  int64_t size;
  int graft_dt;
} dtypes[] = {
    {"F32", 4, GRAFT_F32}, {"F64", 8, GRAFT_F64}, {"I32", 4, GRAFT_I32},  {"BOOL", 1, -1},
    {"U8", 1, -1},         {"I8", 1, -1},         {"F8_E5M2", 1, -1},     {"F8_E4M3", 1, -1},
    {"F8_E8M0", 1, -1},    {"I16", 2, -1},        {"U16", 2, -1},         {"F16", 2, -1},
    {"BF16", 2, -1},       {"U32", 4, -1},        {"I64", 8, -1},         {"U64", 8, -1},
    {"C64", 8, -1},
};

const char *graft__st_dtype_name(graft_dtype dt) {
  for (size_t i = 0; i < GRAFT__COUNT(dtypes); i++)
    if (dtypes[i].graft_dt == (int)dt) return dtypes[i].name;
  return "?";
}

/* ---- messages -------------------------------------------------------------- */

/* A key as messages show it: at most 96 bytes, control bytes as '?' (keys
 * come from hostile files). */
typedef struct key_text {
  char s[112];
} key_text;

static key_text show(const char *key) {
  key_text k;
  size_t i = 0;
  for (; key[i] && i < 96; i++) k.s[i] = (unsigned char)key[i] < 0x20 || key[i] == 0x7f ? '?' : key[i];
  if (key[i]) memcpy(k.s + i, "...", 4);
  else k.s[i] = '\0';
  return k;
}

__attribute__((format(printf, 2, 3))) static graft_status corrupt(char *why, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  graft__vmsgf(why, fmt, ap);
  va_end(ap);
  return GRAFT_ECORRUPT;
}

/* ---- the header length --------------------------------------------------------- */

static uint64_t get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- the JSON ---------------------------------------------------------------- */

/* jansson reports a duplicate key just past its closing quote, and names it
 * only when short: find the string token that ends there (its opening quote
 * is the nearest quote before it that no backslash escapes: inside a JSON
 * string every quote is escaped) and decode it with jansson. */
static int duplicate_key(const char *text, int end, char *out, size_t len) {
  if (end < 2 || text[end - 1] != '"') return 0;
  for (int q = end - 2; q >= 0; q--) {
    if (text[q] != '"') continue;
    int slashes = 0;
    while (q - 1 - slashes >= 0 && text[q - 1 - slashes] == '\\') slashes++;
    if (slashes % 2) continue;
    json_t *s = json_loadb(text + q, (size_t)(end - q), JSON_DECODE_ANY, NULL);
    int ok = json_is_string(s);
    if (ok) snprintf(out, len, "%s", show(json_string_value(s)).s);
    json_decref(s);
    return ok;
  }
  return 0;
}

static graft_status json_failed(const char *text, const json_error_t *err, char *why) {
  if (json_error_code(err) == json_error_out_of_memory) {
    graft__msgf(why, "out of memory parsing the JSON header");
    return GRAFT_ENOMEM;
  }
  char key[128];
  if (json_error_code(err) == json_error_duplicate_key &&
      duplicate_key(text, err->position, key, sizeof key))
    return corrupt(why, "the header repeats key '%s' (at byte %lld of the file)", key,
                   8 + (long long)err->position);
  return corrupt(why, "the header is not valid JSON: %s (line %d, column %d, byte %lld of the file)",
                 err->text, err->line, err->column, 8 + (long long)err->position);
}

/* A JSON integer >= 0 into *v; 0, or -1 (it is not one). */
static int get_count(const json_t *j, int64_t *v) {
  if (!json_is_integer(j) || json_integer_value(j) < 0) return -1;
  *v = (int64_t)json_integer_value(j);
  return 0;
}

/* What a JSON value is, for messages. */
static const char *json_kind(const json_t *j) {
  switch (json_typeof(j)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return json_integer_value(j) < 0 ? "a negative integer" : "an integer";
  case JSON_REAL: return "a non-integer number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

static graft_status parse_metadata(const json_t *meta, char *why) {
  if (!json_is_object(meta))
    return corrupt(why, "'" META_KEY "' is %s (expected an object of strings)", json_kind(meta));
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)meta, k, v) {
    if (!json_is_string(v))
      return corrupt(why, "'" META_KEY "' entry '%s' is %s (expected a string)", show(k).s,
                     json_kind(v));
  }
  return GRAFT_OK;
}

static graft_status parse_dtype(const char *key, const json_t *j, graft__st_entry *e, int64_t *size,
                                char *why) {
  if (!json_is_string(j))
    return corrupt(why, "key '%s': dtype is %s (expected a string such as \"F32\")", show(key).s,
                   json_kind(j));
  for (size_t i = 0; i < GRAFT__COUNT(dtypes); i++)
    if (!strcmp(json_string_value(j), dtypes[i].name)) {
      e->dtype = dtypes[i].name;
      e->graft_dt = dtypes[i].graft_dt;
      *size = dtypes[i].size;
      return GRAFT_OK;
    }
  return corrupt(why, "key '%s': unknown dtype '%s' (expected a safetensors dtype: F32, F64, I32, "
                 "BOOL, U8, I8, I16, U16, F16, BF16, U32, I64, U64, ...)",
                 show(key).s, show(json_string_value(j)).s);
}

static graft_status parse_shape(const char *key, const json_t *j, graft__st_entry *e,
                                graft__arena *mem, int64_t *numel, char *why) {
  if (!json_is_array(j))
    return corrupt(why, "key '%s': shape is %s (expected an array of dims)", show(key).s,
                   json_kind(j));
  size_t rank = json_array_size(j);
  if (rank > INT32_MAX) return corrupt(why, "key '%s': shape has %zu dims", show(key).s, rank);
  int64_t *dims = graft__arena_alloc(mem, rank * sizeof *dims);
  if (!dims) {
    graft__msgf(why, "key '%s': out of memory for a shape of %zu dims", show(key).s, rank);
    return GRAFT_ENOMEM;
  }
  for (size_t i = 0; i < rank; i++)
    if (get_count(json_array_get(j, i), &dims[i]))
      return corrupt(why, "key '%s': shape[%zu] is %s (expected an integer >= 0)", show(key).s, i,
                     json_kind(json_array_get(j, i)));
  e->rank = (int)rank;
  e->dims = dims;
  *numel = graft__numel(e->rank, dims);
  if (*numel < 0) {
    char s[160];
    graft__shape_str(s, sizeof s, e->rank, dims);
    return corrupt(why, "key '%s': the element count of shape %s overflows int64", show(key).s, s);
  }
  return GRAFT_OK;
}

static graft_status parse_offsets(const char *key, const json_t *j, graft__st_entry *e,
                                  int64_t bytes, int64_t data_bytes, char *why) {
  if (!json_is_array(j) || json_array_size(j) != 2)
    return corrupt(why, "key '%s': data_offsets is %s%s (expected [begin, end])", show(key).s,
                   json_kind(j), json_is_array(j) ? " not of 2 elements" : "");
  for (size_t i = 0; i < 2; i++)
    if (get_count(json_array_get(j, i), i ? &e->end : &e->begin))
      return corrupt(why, "key '%s': data_offsets[%zu] is %s (expected an integer >= 0)",
                     show(key).s, i, json_kind(json_array_get(j, i)));
  if (e->begin > e->end)
    return corrupt(why, "key '%s': data_offsets [%lld, %lld) end before they begin", show(key).s,
                   (long long)e->begin, (long long)e->end);
  if (e->end > data_bytes)
    return corrupt(why, "key '%s': data_offsets [%lld, %lld) run past the data section (%lld bytes)",
                   show(key).s, (long long)e->begin, (long long)e->end, (long long)data_bytes);
  if (e->end - e->begin != bytes) {
    char s[160];
    graft__shape_str(s, sizeof s, e->rank, e->dims);
    return corrupt(why, "key '%s': data_offsets [%lld, %lld) hold %lld bytes, but %s%s takes %lld",
                   show(key).s, (long long)e->begin, (long long)e->end,
                   (long long)(e->end - e->begin), e->dtype, s, (long long)bytes);
  }
  return GRAFT_OK;
}

static graft_status parse_entry(const char *key, const json_t *j, graft__st_entry *e,
                                graft__st_table *t, char *why) {
  if (!json_is_object(j))
    return corrupt(why, "key '%s' is %s (expected an object with dtype, shape and data_offsets)",
                   show(key).s, json_kind(j));
  static const char *const fields[] = {"dtype", "shape", "data_offsets"};
  const char *f;
  json_t *v;
  json_object_foreach((json_t *)j, f, v) {
    size_t i = 0;
    while (i < GRAFT__COUNT(fields) && strcmp(f, fields[i])) i++;
    if (i == GRAFT__COUNT(fields))
      return corrupt(why, "key '%s': unexpected field '%s' (expected dtype, shape and data_offsets)",
                     show(key).s, show(f).s);
  }
  for (size_t i = 0; i < GRAFT__COUNT(fields); i++)
    if (!json_object_get(j, fields[i]))
      return corrupt(why, "key '%s' has no %s", show(key).s, fields[i]);
  size_t len = strlen(key) + 1;
  char *k = graft__arena_alloc(&t->mem, len);
  if (!k) {
    graft__msgf(why, "out of memory for key '%s'", show(key).s);
    return GRAFT_ENOMEM;
  }
  e->key = memcpy(k, key, len);
  int64_t size = 0, numel = 0, bytes;
  graft_status st = parse_dtype(key, json_object_get(j, "dtype"), e, &size, why);
  if (!st) st = parse_shape(key, json_object_get(j, "shape"), e, &t->mem, &numel, why);
  if (st) return st;
  if (graft__size_mul(numel, size, &bytes)) {
    char s[160];
    graft__shape_str(s, sizeof s, e->rank, e->dims);
    return corrupt(why, "key '%s': the bytes of %s%s overflow int64", show(key).s, e->dtype, s);
  }
  return parse_offsets(key, json_object_get(j, "data_offsets"), e, bytes, t->data_bytes, why);
}

/* ---- the layout --------------------------------------------------------------- */

static int by_offsets(const void *a, const void *b) {
  const graft__st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->key, y->key);
}

static int by_key(const void *a, const void *b) {
  return strcmp(((const graft__st_entry *)a)->key, ((const graft__st_entry *)b)->key);
}

/* The entries, sorted by offsets, must tile the data section. */
static graft_status check_layout(graft__st_table *t, char *why) {
  if (t->n > 1) qsort(t->entries, (size_t)t->n, sizeof *t->entries, by_offsets);
  int64_t at = 0;
  const graft__st_entry *prev = NULL;
  for (int64_t i = 0; i < t->n; i++) {
    const graft__st_entry *e = &t->entries[i];
    if (e->begin > at && prev)
      return corrupt(why, "the %lld bytes between key '%s' (ending at %lld) and key '%s' (beginning "
                     "at %lld) belong to no tensor (a gap)",
                     (long long)(e->begin - at), show(prev->key).s, (long long)at, show(e->key).s,
                     (long long)e->begin);
    if (e->begin > at)
      return corrupt(why, "the data section's first %lld bytes, before key '%s', belong to no "
                     "tensor (a gap)", (long long)e->begin, show(e->key).s);
    if (e->begin < at)
      return corrupt(why, "key '%s' at [%lld, %lld) overlaps key '%s' at [%lld, %lld)",
                     show(e->key).s, (long long)e->begin, (long long)e->end, show(prev->key).s,
                     (long long)prev->begin, (long long)prev->end);
    at = e->end;
    prev = e;
  }
  if (at != t->data_bytes && prev)
    return corrupt(why, "the last %lld bytes of the file, after key '%s' (ending at %lld of the "
                   "data section), belong to no tensor (a gap)",
                   (long long)(t->data_bytes - at), show(prev->key).s, (long long)at);
  if (at != t->data_bytes)
    return corrupt(why, "the data section holds %lld bytes, but the header lists no tensor",
                   (long long)t->data_bytes);
  if (t->n > 1) qsort(t->entries, (size_t)t->n, sizeof *t->entries, by_key);
  return GRAFT_OK;
}

/* ---- parse ------------------------------------------------------------------------ */

static graft_status parse_header(const char *text, int64_t len, graft__st_table *t, char *why) {
  json_error_t err;
  json_t *root = json_loadb(text, (size_t)len, JSON_REJECT_DUPLICATES, &err);
  if (!root) return json_failed(text, &err, why);
  graft_status st = GRAFT_OK;
  const json_t *meta = json_object_get(root, META_KEY);
  if (!json_is_object(root))
    st = corrupt(why, "the header is %s (expected an object)", json_kind(root));
  else if (meta)
    st = parse_metadata(meta, why);
  if (!st) {
    t->n = (int64_t)json_object_size(root) - (meta ? 1 : 0);
    t->entries = t->n ? graft__calloc((size_t)t->n, sizeof *t->entries) : NULL;
    if (t->n && !t->entries) {
      graft__msgf(why, "out of memory for %lld tensor entries", (long long)t->n);
      st = GRAFT_ENOMEM;
    }
  }
  int64_t i = 0;
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (st) break;
    if (strcmp(key, META_KEY)) st = parse_entry(key, v, &t->entries[i++], t, why);
  }
  json_decref(root);
  return st;
}

graft_status graft__st_parse(const uint8_t *file, int64_t size, graft__st_table *t, char *why) {
  memset(t, 0, sizeof *t);
  if (size < 8)
    return corrupt(why, "the file is %lld bytes, shorter than the 8-byte header length",
                   (long long)size);
  uint64_t len = get_le64(file);
  if (len > (uint64_t)(size - 8))
    return corrupt(why, "the header length %llu runs past the end of the file (%lld bytes follow "
                   "the length)", (unsigned long long)len, (long long)(size - 8));
  if (len > GRAFT__ST_MAX_HEADER)
    return corrupt(why, "the header length %llu exceeds safetensors' limit of %d bytes",
                   (unsigned long long)len, GRAFT__ST_MAX_HEADER);
  if (len == 0 || file[8] != '{')
    return corrupt(why, "the header does not begin with '{' (a JSON object)");
  t->data_at = 8 + (int64_t)len;
  t->data_bytes = size - t->data_at;
  graft_status st = parse_header((const char *)file + 8, (int64_t)len, t, why);
  return st ? st : check_layout(t, why);
}

void graft__st_table_free(graft__st_table *t) {
  graft__free(t->entries);
  graft__arena_free(&t->mem);
  memset(t, 0, sizeof *t);
}

const graft__st_entry *graft__st_find(const graft__st_table *t, const char *key) {
  if (!t->n) return NULL;
  graft__st_entry probe = {.key = key};
  return bsearch(&probe, t->entries, (size_t)t->n, sizeof probe, by_key);
}

/* ---- write ---------------------------------------------------------------------- */

static json_t *entry_json(const graft__st_entry *e) {
  json_t *o = json_object(), *shape = json_array(), *offs = json_array();
  int bad = !o || !shape || !offs ||
            json_object_set_new(o, "dtype", json_string(graft__st_dtype_name(e->graft_dt)));
  for (int d = 0; !bad && d < e->rank; d++) bad = json_array_append_new(shape, json_integer(e->dims[d]));
  bad = bad || json_array_append_new(offs, json_integer(e->begin)) ||
        json_array_append_new(offs, json_integer(e->end));
  /* set_new takes its value even when it fails */
  bad = json_object_set_new(o, "shape", shape) || bad;
  bad = json_object_set_new(o, "data_offsets", offs) || bad;
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static json_t *header_json(int64_t n, graft__st_entry *entries, char *why) {
  json_t *root = json_object(), *meta = json_object();
  int bad = !root || !meta || json_object_set_new(meta, "format", json_string("graft")) ||
            json_object_set_new(meta, "graft_version", json_string(GRAFT_VERSION_STRING));
  bad = json_object_set_new(root, META_KEY, meta) || bad;
  int64_t at = 0;
  for (int64_t i = 0; !bad && i < n; i++) {
    graft__st_entry *e = &entries[i];
    int64_t numel = graft__numel(e->rank, e->dims), bytes;
    if (numel < 0 || graft__size_mul(numel, (int64_t)graft_dtype_size(e->graft_dt), &bytes) ||
        graft__size_add(at, bytes, &e->end)) {
      graft__msgf(why, "key '%s': the data would end past 2^63 bytes", show(e->key).s);
      json_decref(root);
      return NULL;
    }
    e->begin = at;
    at = e->end;
    bad = json_object_set_new(root, e->key, entry_json(e));
  }
  if (bad) {
    graft__msgf(why, "out of memory building the JSON header (%lld tensors)", (long long)n);
    json_decref(root);
    return NULL;
  }
  return root;
}

graft_status graft__st_header(int64_t n, graft__st_entry *entries, uint8_t **out, int64_t *len,
                              char *why) {
  *out = NULL;
  *len = 0;
  json_t *root = header_json(n, entries, why);
  if (!root) return GRAFT_ENOMEM;
  char *text = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (!text) {
    graft__msgf(why, "out of memory writing the JSON header (%lld tensors)", (long long)n);
    return GRAFT_ENOMEM;
  }
  size_t text_len = strlen(text);
  size_t pad = (GRAFT__ST_ALIGN - (8 + text_len) % GRAFT__ST_ALIGN) % GRAFT__ST_ALIGN;
  if (text_len + pad > GRAFT__ST_MAX_HEADER) {
    graft__msgf(why, "the JSON header of %lld tensors takes %zu bytes, over safetensors' limit of "
                "%d", (long long)n, text_len + pad, GRAFT__ST_MAX_HEADER);
    free(text);
    return GRAFT_EINVAL;
  }
  uint8_t *buf = graft__malloc(8 + text_len + pad);
  if (buf) {
    put_le64(buf, text_len + pad);
    memcpy(buf + 8, text, text_len);
    memset(buf + 8 + text_len, ' ', pad);
    *out = buf;
    *len = (int64_t)(8 + text_len + pad);
  }
  free(text);
  if (!buf) {
    graft__msgf(why, "out of memory for a header of %zu bytes", 8 + text_len + pad);
    return GRAFT_ENOMEM;
  }
  return GRAFT_OK;
}
