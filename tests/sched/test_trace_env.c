/* The runtime's environment outputs: GRAFT_TRACE (a Chrome trace JSON file
 * with one track per worker and a slice per node tile; runtimes alive at
 * once share the file, a process track each, and calls follow one another
 * in time), a GRAFT_TRACE that cannot be written, GRAFT_DISPLAY_ENV (the resolved configuration on
 * stderr), and graft_runtime_describe on a synthetic topology.
 *
 * Which worker ran which tile is learned independently of the trace file
 * through graft__exec_fault_hook (returning OK, recording the OpenMP thread
 * number, which is the worker number of the work-stealing team). */
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <fcntl.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"
#include "watchdog.h"
#include "kernels/kernels_int.h"
#include "sched/sched.h"

TU_SUPPRESS_GOMP_TASK_LEAK();

enum { THREADS = 4, MAX_NODES = 256 };

#define NUMA_TOPO "pack:2 numa:2 core:4 pu:1"

/* ---- helpers ------------------------------------------------------------ */

/* A fresh temporary file name (the file exists, empty). */
static void temp_path(char *path, size_t len, const char *tag) {
  snprintf(path, len, "/tmp/graft_%s_XXXXXX", tag);
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
}

/* The whole file as a NUL-terminated string (the caller frees it). */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  for (size_t got; (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
    n += got;
    if (cap - n - 1 == 0) {
      cap *= 2;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
  }
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static graft_runtime_opts opts_of(int threads, const char *sched) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = threads;
  o.sched = sched;
  return o;
}

/* ---- the traced graph --------------------------------------------------- */

static uint32_t matmul_id;

/* Four independent matmul branches with some elementwise work, joined. */
static graft_status wide(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                         graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *acc = NULL;
  for (int b = 0; b < 4; b++) {
    graft_value *mm = graft_matmul(t, in[0], in[1], b % 2 ? GRAFT_TRANS_B : 0);
    if (b == 0) matmul_id = graft__value_id(mm);
    graft_value *h = graft_tanh(t, graft_add(t, mm, graft_scalar(t, GRAFT_F64, 0.1 * b)));
    acc = acc ? graft_add(t, acc, h) : h;
  }
  out[0] = graft_softmax(t, acc, -1);
  return GRAFT_OK;
}

/* The wide graph's inputs: a [96, 48] and b [48, 48] f64. */
static void wide_inputs(uint64_t seed, graft_tensor *in[2]) {
  tu_rng r = {seed};
  const int64_t as[] = {96, 48}, bs[] = {48, 48};
  in[0] = tu_tensor_rand(&r, GRAFT_F64, 2, as, -1, 1);
  in[1] = tu_tensor_rand(&r, GRAFT_F64, 2, bs, -1, 1);
}

static _Atomic int tasks_run;
static _Atomic unsigned worker_mask; /* bit w: worker w ran a tile */

static graft_status watch(uint32_t node, int64_t tile) {
  (void)node, (void)tile;
  atomic_fetch_add(&tasks_run, 1);
  atomic_fetch_or(&worker_mask, 1u << (omp_get_thread_num() & 31));
  return GRAFT_OK;
}

/* ---- a small JSON walker ------------------------------------------------ */

static const char *skip_ws(const char *s) {
  while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t') s++;
  return s;
}

/* s at '{': the character after the matching '}' (strings and nesting
 * respected), or NULL if unbalanced. */
static const char *object_end(const char *s) {
  int depth = 0, in_str = 0;
  for (; *s; s++) {
    if (in_str) {
      if (*s == '\\' && s[1]) s++;
      else if (*s == '"') in_str = 0;
    } else if (*s == '"') {
      in_str = 1;
    } else if (*s == '{') {
      depth++;
    } else if (*s == '}') {
      if (--depth == 0) return s + 1;
    }
  }
  return NULL;
}

typedef struct event {
  char name[64];
  char ph[4];
  int pid, tid;
  int has_ts, has_dur;
  double ts, dur;
} event;

/* Fields of one event object [b, e). */
static void parse_event(const char *b, const char *e, event *ev) {
  char obj[512];
  size_t n = (size_t)(e - b) < sizeof obj - 1 ? (size_t)(e - b) : sizeof obj - 1;
  memcpy(obj, b, n);
  obj[n] = '\0';
  memset(ev, 0, sizeof *ev);
  ev->tid = ev->pid = -1;
  const char *p;
  if ((p = strstr(obj, "\"name\":\""))) sscanf(p + 8, "%63[^\"]", ev->name);
  if ((p = strstr(obj, "\"ph\":\""))) sscanf(p + 6, "%3[^\"]", ev->ph);
  if ((p = strstr(obj, "\"tid\":"))) sscanf(p + 6, "%d", &ev->tid);
  if ((p = strstr(obj, "\"pid\":"))) sscanf(p + 6, "%d", &ev->pid);
  ev->has_ts = (p = strstr(obj, "\"ts\":")) && sscanf(p + 5, "%lf", &ev->ts) == 1;
  ev->has_dur = (p = strstr(obj, "\"dur\":")) && sscanf(p + 6, "%lf", &ev->dur) == 1 && ev->dur >= 0;
}

/* text must be a JSON array of objects: '[' {obj} (',' {obj})* ']'.
 * Returns the events (the caller frees them). */
static event *parse_trace(const char *text, int *n_events) {
  int cap = 64, n = 0;
  event *ev = malloc(sizeof *ev * (size_t)cap);
  assert_non_null(ev);
  const char *s = skip_ws(text);
  if (*s != '[') fail_msg("trace does not start with '[': %.40s", s);
  s = skip_ws(s + 1);
  if (*s != ']') {
    for (;;) {
      if (*s != '{') fail_msg("expected an object at offset %ld: %.40s", (long)(s - text), s);
      const char *e = object_end(s);
      if (!e) fail_msg("unbalanced object at offset %ld", (long)(s - text));
      if (n == cap) {
        cap *= 2;
        ev = realloc(ev, sizeof *ev * (size_t)cap);
        assert_non_null(ev);
      }
      parse_event(s, e, &ev[n++]);
      s = skip_ws(e);
      if (*s == ',') {
        s = skip_ws(s + 1);
        continue;
      }
      if (*s == ']') break;
      fail_msg("expected ',' or ']' at offset %ld: %.40s", (long)(s - text), s);
    }
  }
  s = skip_ws(s + 1);
  if (*s) fail_msg("text after the closing ']': %.40s", s);
  *n_events = n;
  return ev;
}

/* ---- cases -------------------------------------------------------------- */

/* One call of the wide graph on a THREADS-thread runtime of sched traced
 * through GRAFT_TRACE: the file is a JSON array with a slice per tile of the
 * plan, on the tracks of the workers that ran them. */
static void check_trace(const char *sched) {
  char path[64];
  temp_path(path, sizeof path, "trace");
  assert_int_equal(setenv("GRAFT_TRACE", path, 1), 0);
  graft_runtime_opts o = opts_of(THREADS, sched);
  o.grain = 64; /* tiles too */
  graft_runtime *rt = NULL;
  graft_status st = graft_runtime_create(&o, &rt);
  unsetenv("GRAFT_TRACE");
  assert_int_equal(st, GRAFT_OK);

  graft_tensor *in[2];
  wide_inputs(0x7ace, in);
  graft_function_desc d = {.name = "wide", .trace = wide, .n_inputs = 2, .n_outputs = 1};
  graft_function *f = NULL;
  assert_int_equal(graft_function_create(rt, &d, &f), GRAFT_OK);
  atomic_store(&tasks_run, 0);
  atomic_store(&worker_mask, 0);
  graft__exec_fault_hook = watch;
  graft_tensor *y = NULL;
  st = graft_function_call(f, 2, in, 1, &y);
  graft__exec_fault_hook = NULL;
  assert_int_equal(st, GRAFT_OK);

  /* What the plan says ran: every tile of every node, once. */
  const graft__plan *p = graft__function_plan(f);
  assert_non_null(p);
  assert_true(p->g->n_nodes <= MAX_NODES);
  int want_tiles[MAX_NODES] = {0}, got_tiles[MAX_NODES] = {0};
  static char op_name[MAX_NODES][GRAFT__FUSED_NAME]; /* copies: the plan goes first */
  uint32_t n_nodes = p->g->n_nodes;
  for (uint32_t id = 0; id < n_nodes; id++) { /* a fused group is named by its ops */
    const graft__node *nd = graft__graph_node(p->g, id);
    snprintf(op_name[id], sizeof op_name[id], "%s", nd->fused ? nd->fused->name : graft__ops[nd->op].name);
  }
  for (uint32_t i = 0; i < p->n_order; i++) want_tiles[p->order[i]] = p->tiling[i].n;
  assert_int_equal(atomic_load(&tasks_run), p->n_tasks);
  unsigned ran_mask = atomic_load(&worker_mask);
  graft_tensor_destroy(y);
  graft_function_destroy(f);
  graft_runtime_destroy(rt); /* closes the file; p is gone with f */
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);

  char *text = slurp(path);
  int n = 0;
  event *ev = parse_trace(text, &n);
  unsigned tid_mask = 0;
  int slices = 0, saw_matmul = 0, saw_fused = 0;
  int named = 0;
  for (int k = 0; k < n; k++) {
    assert_int_equal(ev[k].pid, 1);
    if (!strcmp(ev[k].ph, "M")) { /* the runtime's track name */
      assert_string_equal(ev[k].name, "process_name");
      named++;
      continue;
    }
    if (!strcmp(ev[k].ph, "i")) {
      assert_string_equal(ev[k].name, "steal");
      continue;
    }
    assert_string_equal(ev[k].ph, "X");
    assert_true(ev[k].has_ts && ev[k].has_dur);
    assert_in_range(ev[k].tid, 0, THREADS - 1);
    tid_mask |= 1u << ev[k].tid;
    char op[GRAFT__FUSED_NAME];
    unsigned id = 0;
    const char *hash = strrchr(ev[k].name, '#');
    size_t len = hash ? (size_t)(hash - ev[k].name) : 0;
    if (!hash || len < 2 || len - 1 >= sizeof op || hash[-1] != ' ' || sscanf(hash, "#%u", &id) != 1)
      fail_msg("slice name '%s' is not '<op> #<id>'", ev[k].name);
    memcpy(op, ev[k].name, len - 1);
    op[len - 1] = '\0';
    assert_true(id < n_nodes);
    assert_string_equal(op, op_name[id]);
    got_tiles[id]++;
    saw_matmul |= id == matmul_id;
    saw_fused |= !strncmp(op, "fused:", 6) && strstr(op, "tanh") != NULL;
    slices++;
  }
  for (uint32_t id = 0; id < n_nodes; id++)
    if (got_tiles[id] != want_tiles[id])
      fail_msg("node #%u: %d slices in the trace, %d tiles in the plan", id, got_tiles[id],
               want_tiles[id]);
  assert_int_equal(slices, atomic_load(&tasks_run));
  assert_int_equal(named, 1);
  char label[64];
  snprintf(label, sizeof label, "graft runtime 1: %s x%d", sched, THREADS);
  assert_non_null(strstr(text, label));
  assert_true(saw_matmul);
  assert_true(saw_fused); /* the wide graph's tanh chains run fused, named by their ops */
  char want_name[32];
  snprintf(want_name, sizeof want_name, "\"matmul #%u\"", matmul_id);
  assert_non_null(strstr(text, want_name));
  print_message("%s: %d events, %d slices, worker mask %#x\n", sched, n, slices, tid_mask);
  /* A track for every worker that ran something, and for no other. */
  assert_int_equal(tid_mask, ran_mask);
  free(ev);
  free(text);
  unlink(path);
}

static void test_graft_runtime_create__trace_writes_chrome_json(void **state) {
  (void)state;
  check_trace("ws");
  check_trace("omp"); /* the baseline's tasks, by the thread that ran each */
}

/* Two runtimes alive at once trace to one file, one through GRAFT_TRACE, one
 * through opts.trace_path spelled another way: the file holds both (before,
 * each truncated and wrote it through its own FILE, interleaving garbage),
 * each runtime a process track of its own, and each runtime's second call
 * after its first in time. */
static void test_graft_runtime_create__runtimes_share_a_trace_file(void **state) {
  (void)state;
  char path[64], other[96];
  temp_path(path, sizeof path, "trace2");
  snprintf(other, sizeof other, "/tmp/../%s", path + 1); /* the same file */
  const int threads[2] = {2, 3};
  graft_runtime *rt[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    graft_runtime_opts o = opts_of(threads[k], "ws");
    o.grain = 64;
    if (k == 0) assert_int_equal(setenv("GRAFT_TRACE", path, 1), 0);
    else o.trace_path = other;
    graft_status st = graft_runtime_create(&o, &rt[k]);
    unsetenv("GRAFT_TRACE");
    assert_int_equal(st, GRAFT_OK);
  }
  graft_tensor *in[2];
  wide_inputs(0x2ace, in);
  graft_function_desc d = {.name = "wide", .trace = wide, .n_inputs = 2, .n_outputs = 1};
  graft_function *f[2];
  int64_t tasks[2];
  for (int k = 0; k < 2; k++) assert_int_equal(graft_function_create(rt[k], &d, &f[k]), GRAFT_OK);
  /* interleaved: runtime 0, 1, 0, 1 */
  for (int call = 0; call < 2; call++)
    for (int k = 0; k < 2; k++) {
      graft_tensor *y = NULL;
      assert_int_equal(graft_function_call(f[k], 2, in, 1, &y), GRAFT_OK);
      tasks[k] = graft__function_plan(f[k])->n_tasks;
      graft_tensor_destroy(y);
    }
  for (int k = 0; k < 2; k++) {
    graft_function_destroy(f[k]);
    graft_runtime_destroy(rt[k]);
  }
  graft_tensor_destroy(in[0]);
  graft_tensor_destroy(in[1]);

  char *text = slurp(path);
  int n = 0;
  event *ev = parse_trace(text, &n);
  /* per runtime (pid 1, 2): slices of call 1 (written first), then call 2 */
  int slices[2] = {0, 0}, named[2] = {0, 0};
  double end1[2] = {0, 0}, start2[2] = {1e300, 1e300};
  for (int k = 0; k < n; k++) {
    int pid = ev[k].pid;
    assert_in_range(pid, 1, 2);
    if (!strcmp(ev[k].ph, "M")) {
      named[pid - 1]++;
      continue;
    }
    if (strcmp(ev[k].ph, "X")) continue;
    assert_in_range(ev[k].tid, 0, threads[pid - 1] - 1);
    assert_true(ev[k].has_ts && ev[k].has_dur);
    int c = slices[pid - 1]++ < tasks[pid - 1] ? 0 : 1;
    if (c == 0) end1[pid - 1] = GRAFT__MAX(end1[pid - 1], ev[k].ts + ev[k].dur);
    else start2[pid - 1] = GRAFT__MIN(start2[pid - 1], ev[k].ts);
  }
  for (int k = 0; k < 2; k++) {
    assert_int_equal(named[k], 1);
    assert_int_equal(slices[k], 2 * tasks[k]);
    if (start2[k] < end1[k])
      fail_msg("runtime %d: its second call starts at %.1f us, before its first ends (%.1f us)", k + 1,
               start2[k], end1[k]);
  }
  assert_non_null(strstr(text, "graft runtime 1: ws x2"));
  assert_non_null(strstr(text, "graft runtime 2: ws x3"));
  print_message("%d events from two runtimes in one file\n", n);
  free(ev);
  free(text);

  /* Once both closed, a new runtime starts the file anew. */
  graft_runtime_opts o = opts_of(2, "ws");
  o.trace_path = path;
  graft_runtime *again = NULL;
  assert_int_equal(graft_runtime_create(&o, &again), GRAFT_OK);
  graft_runtime_destroy(again);
  text = slurp(path);
  ev = parse_trace(text, &n);
  assert_int_equal(n, 1); /* its track name only */
  assert_int_equal(ev[0].pid, 1);
  free(ev);
  free(text);
  unlink(path);
}

static void check_unwritable(const char *path, int via_env) {
  graft_runtime_opts o = opts_of(2, "ws");
  if (via_env) assert_int_equal(setenv("GRAFT_TRACE", path, 1), 0);
  else o.trace_path = path;
  graft_runtime *rt = (graft_runtime *)&o; /* must be reset to NULL */
  char msg[512] = "";
  graft_status st = graft_runtime_create_ex(&o, &rt, msg, sizeof msg);
  unsetenv("GRAFT_TRACE");
  assert_int_equal(st, GRAFT_EIO);
  assert_null(rt);
  if (!strstr(msg, path)) fail_msg("message '%s' does not name '%s'", msg, path);
  if (via_env && !strstr(msg, "GRAFT_TRACE")) fail_msg("message '%s' does not name GRAFT_TRACE", msg);
  /* Without a buffer, the status alone. */
  if (via_env) assert_int_equal(setenv("GRAFT_TRACE", path, 1), 0);
  assert_int_equal(graft_runtime_create(&o, &rt), GRAFT_EIO);
  unsetenv("GRAFT_TRACE");
  assert_null(rt);
}

static void test_graft_runtime_create__trace_unwritable_path(void **state) {
  (void)state;
  /* A missing directory, and a directory: both fail even for root. */
  check_unwritable("/nonexistent-graft-dir/sub/trace.json", 1);
  check_unwritable("/tmp", 1);
  check_unwritable("/nonexistent-graft-dir/trace.json", 0);
}

/* stderr of graft_runtime_create(o) with GRAFT_DISPLAY_ENV=value. */
static char *stderr_of_create(const char *value, const graft_runtime_opts *o) {
  char path[64];
  temp_path(path, sizeof path, "stderr");
  if (value) assert_int_equal(setenv("GRAFT_DISPLAY_ENV", value, 1), 0);
  fflush(stderr);
  int saved = dup(2), fd = open(path, O_WRONLY | O_TRUNC);
  assert_true(saved >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);
  graft_runtime *rt = NULL;
  graft_status st = graft_runtime_create(o, &rt);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  unsetenv("GRAFT_DISPLAY_ENV");
  assert_int_equal(st, GRAFT_OK);
  graft_runtime_destroy(rt);
  char *text = slurp(path);
  unlink(path);
  return text;
}

static void test_graft_runtime_create__display_env(void **state) {
  (void)state;
  graft_runtime_opts o = opts_of(3, "omp");
  char *text = stderr_of_create("true", &o);
  if (!strstr(text, "threads=3") || !strstr(text, "sched=omp"))
    fail_msg("GRAFT_DISPLAY_ENV=true printed '%s'", text);
  /* The BLAS and its kernels; a note where OpenBLAS runs kernels older
   * than the CPU (unless OPENBLAS_CORETYPE chose them), and none otherwise. */
  const char *core = graft__blas_core(), *hint = graft__blas_hint();
  const char *chosen = getenv("OPENBLAS_CORETYPE");
  if (!strstr(text, "blas=") || (core && !strstr(text, core)))
    fail_msg("GRAFT_DISPLAY_ENV=true printed '%s' (kernels %s)", text, core ? core : "-");
  int noted = strstr(text, "note: OpenBLAS runs its") != NULL;
  if (noted != (hint && !(chosen && *chosen)) || (noted && !strstr(text, hint)))
    fail_msg("GRAFT_DISPLAY_ENV=true printed '%s' (hint %s)", text, hint ? hint : "none");
  print_message("blas kernels %s, hint %s\n", core ? core : "-", hint ? hint : "none");
  free(text);

  o = opts_of(2, "ws");
  text = stderr_of_create("verbose", &o);
  if (!strstr(text, "threads=2") || !strstr(text, "sched=ws") ||
      !strstr(text, "GRAFT_NUM_THREADS="))
    fail_msg("GRAFT_DISPLAY_ENV=verbose printed '%s'", text);
  free(text);

  /* Unset and false: nothing at all. */
  text = stderr_of_create(NULL, &o);
  assert_string_equal(text, "");
  free(text);
  text = stderr_of_create("false", &o);
  assert_string_equal(text, "");
  free(text);
}

/* Which OPENBLAS_CORETYPE would run faster kernels: only for a pre-AVX2
 * family on a CPU with AVX2 (Haswell's kernels) or AVX-512 (SkylakeX's). */
static void test_graft__blas_core_hint__old_kernels_on_new_cpus(void **state) {
  (void)state;
  static const struct {
    const char *core;
    int avx2, avx512;
    const char *want;
  } cases[] = {
      {"Prescott", 1, 1, "SkylakeX"}, {"prescott", 1, 0, "Haswell"},
      {"Sandybridge", 1, 1, "SkylakeX"}, {"NEHALEM", 1, 0, "Haswell"},
      {"Prescott", 0, 0, NULL},         {"Haswell", 1, 1, NULL},
      {"SkylakeX", 1, 1, NULL},         {"Cooperlake", 1, 1, NULL},
      {"Zen", 1, 0, NULL},              {"", 1, 1, NULL},
      {NULL, 1, 1, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *got = graft__blas_core_hint(cases[i].core, cases[i].avx2, cases[i].avx512);
    if ((got == NULL) != (cases[i].want == NULL) || (got && strcmp(got, cases[i].want) != 0))
      fail_msg("%s, avx2 %d, avx512 %d: %s, expected %s", cases[i].core ? cases[i].core : "NULL",
               cases[i].avx2, cases[i].avx512, got ? got : "NULL",
               cases[i].want ? cases[i].want : "NULL");
  }
}

static void test_graft_runtime_describe__synthetic_topology(void **state) {
  (void)state;
  static const char *const partitions[] = {NULL, "auto"};
  for (int k = 0; k < 2; k++) {
    graft_runtime_opts o = opts_of(8, "ws");
    o.topology = NUMA_TOPO;
    o.partition = partitions[k];
    o.bind = 1; /* asked for, but there is nothing real to bind to */
    graft_runtime *rt = NULL;
    char msg[512] = "";
    graft_status st = graft_runtime_create_ex(&o, &rt, msg, sizeof msg);
    if (st) fail_msg("%s: %s", graft_status_name(st), msg);
    char buf[512];
    int len = graft_runtime_describe(rt, buf, sizeof buf);
    assert_int_equal(len, (int)strlen(buf));
    if (!strstr(buf, "partition=") || !strstr(buf, "numa") || !strstr(buf, "domains=4") ||
        !strstr(buf, "bind=false") || !strstr(buf, "threads=8") || !strstr(buf, "pus=16"))
      fail_msg("describe: '%s'", buf);
    assert_int_equal(rt->level, GRAFT__LEVEL_NUMA);
    assert_int_equal(graft__runtime_parts(rt), 4);
    /* Truncation: NUL-terminated, the full length returned. */
    char small[8];
    assert_int_equal(graft_runtime_describe(rt, small, sizeof small), len);
    assert_int_equal(strlen(small), sizeof small - 1);
    graft_runtime_destroy(rt);
  }
  /* A package level on a two-package machine: two domains. */
  graft_runtime_opts o = opts_of(4, "ws");
  o.topology = "pack:2 core:4 pu:1";
  o.partition = "package";
  graft_runtime *rt = NULL;
  assert_int_equal(graft_runtime_create(&o, &rt), GRAFT_OK);
  char buf[512];
  graft_runtime_describe(rt, buf, sizeof buf);
  if (!strstr(buf, "package") || !strstr(buf, "domains=2") || !strstr(buf, "bind=false"))
    fail_msg("describe: '%s'", buf);
  graft_runtime_destroy(rt);
}

/* The outputs of this file are read from GRAFT_* variables: start clean. */
static int clean_env(void **state) {
  (void)state;
  unsetenv("GRAFT_TRACE");
  unsetenv("GRAFT_DISPLAY_ENV");
  graft__exec_fault_hook = NULL;
  return 0;
}

/* clean_env around a test run under the watchdog (state: the test's name). */
static int watched_setup(void **state) {
  clean_env(state);
  return tu_watchdog_arm_(state);
}

static int watched_teardown(void **state) {
  clean_env(state);
  return tu_watchdog_disarm_(state);
}

#define WATCHED_ENV_TEST(f) \
  cmocka_unit_test_prestate_setup_teardown(f, watched_setup, watched_teardown, (void *)#f)

int main(void) {
  const struct CMUnitTest tests[] = {
      WATCHED_ENV_TEST(test_graft_runtime_create__trace_writes_chrome_json),
      WATCHED_ENV_TEST(test_graft_runtime_create__runtimes_share_a_trace_file),
      WATCHED_ENV_TEST(test_graft_runtime_create__trace_unwritable_path),
      WATCHED_ENV_TEST(test_graft_runtime_create__display_env),
      WATCHED_ENV_TEST(test_graft_runtime_describe__synthetic_topology),
      cmocka_unit_test(test_graft__blas_core_hint__old_kernels_on_new_cpus),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
