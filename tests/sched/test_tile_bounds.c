/* A tile of an elementwise kernel touches only its own elements.
 *
 * The memory planner lets an elementwise node write over an input of its
 * shape and element size (in place), and the executors run a node's tiles on
 * different workers at once.  So tile [begin, end) may read and write only
 * elements [begin, end) of its output and of every full-shape input: element
 * 0 of an input, say, is being overwritten by the first tile meanwhile.  Such
 * a read races even when its value goes unused, and a race can still give
 * the right answer (where once read both branches' element 0 in every tile;
 * ThreadSanitizer saw it, the differential tests could not).
 *
 * Here every elementwise kernel, for each dtype, each mix of full and
 * broadcast (one-element) inputs, out of place and in place over each input
 * the planner could pick, runs one tile whose operands' other elements lie
 * on inaccessible pages: a stray access faults, and the fault fails the case
 * with its op, dtypes and layout.  The tile's elements must also equal those
 * of the whole range computed on plain memory. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "testutil.h"

enum { MAX_IN = 3 };

/* ---- operands whose elements outside the tile cannot be touched ---------- */

typedef struct guarded {
  char *map;    /* the mapping */
  size_t len;
  void *data;   /* element 0 (on an inaccessible page) */
} guarded;

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* n elements of es bytes; [begin, end) on readable and writable pages that
 * start and end exactly at its bounds, the rest on PROT_NONE pages.  The
 * tile's byte length must be a multiple of the page size. */
static guarded guarded_alloc(int64_t n, size_t es, int64_t begin, int64_t end) {
  size_t pg = page_size();
  size_t lead = round_up((size_t)begin * es, pg), mid = (size_t)(end - begin) * es;
  size_t tail = round_up((size_t)(n - end) * es, pg);
  assert_int_equal(mid % pg, 0);
  guarded g = {NULL, lead + mid + tail, NULL};
  void *m = mmap(NULL, g.len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(m != MAP_FAILED);
  g.map = m;
  assert_int_equal(mprotect(g.map + lead, mid, PROT_READ | PROT_WRITE), 0);
  g.data = g.map + lead - (size_t)begin * es;
  return g;
}

static void guarded_free(guarded *g) {
  if (g->map) munmap(g->map, g->len);
  g->map = NULL;
}

/* A stray access lands here and jumps back to the case. */
static sigjmp_buf fault_jmp;
static volatile sig_atomic_t fault_sig;

static void on_fault(int sig) {
  fault_sig = sig;
  siglongjmp(fault_jmp, 1);
}

/* Run k on [begin, end) with SIGSEGV and SIGBUS caught; 0, or the signal. */
static int run_guarded(const graft__kargs *k, int64_t begin, int64_t end, graft_status *st) {
  struct sigaction sa, old_segv, old_bus;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fault;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &old_segv);
  sigaction(SIGBUS, &sa, &old_bus);
  fault_sig = 0;
  if (sigsetjmp(fault_jmp, 1) == 0) *st = k->fn(k, begin, end);
  sigaction(SIGSEGV, &old_segv, NULL);
  sigaction(SIGBUS, &old_bus, NULL);
  return fault_sig;
}

/* ---- values ----------------------------------------------------------------- */

static size_t dt_size(graft_dtype dt) { return graft_dtype_size(dt); }

static void set_elem(void *d, graft_dtype dt, int64_t i, double v) {
  switch (dt) {
  case GRAFT_F32: ((float *)d)[i] = (float)v; break;
  case GRAFT_F64: ((double *)d)[i] = v; break;
  default: ((int32_t *)d)[i] = (int32_t)v; break;
  }
}

/* Input j's element i: positive, in every op's domain; conditions (where's
 * input 0) are zero at every third element. */
static double input_value(int j, int is_cond, graft_dtype dt, int64_t i) {
  if (is_cond) return i % 3 == 0 ? 0.0 : 1.0 + (double)(i % 5);
  if (dt == GRAFT_I32) return (double)(1 + (i * (j + 3)) % 9);
  return 0.5 + (double)((i * (2 * j + 7)) % 101) / 101.0;
}

/* ---- one case ------------------------------------------------------------------ */

typedef struct tcase {
  unsigned op;
  int n_in;
  graft_dtype in_dt[MAX_IN], out_dt;
  unsigned scalar;   /* bit j: input j has one element (broadcast) */
  int alias;         /* the output is input alias's memory; -1: its own */
} tcase;

static const char *describe(const tcase *c, char *buf, size_t len) {
  size_t w = (size_t)snprintf(buf, len, "%s(", graft__ops[c->op].name);
  for (int j = 0; j < c->n_in && w < len; j++)
    w += (size_t)snprintf(buf + w, len - w, "%s%s %s", j ? ", " : "", graft_dtype_name(c->in_dt[j]),
                          (c->scalar >> j) & 1 ? "[1]" : "[n]");
  if (w < len)
    snprintf(buf + w, len - w, ") -> %s%s", graft_dtype_name(c->out_dt),
             c->alias < 0 ? "" : c->alias == 0   ? " in place over input 0"
                               : c->alias == 1 ? " in place over input 1"
                                               : " in place over input 2");
  return buf;
}

/* Fill kargs k (views v, input view pointers vp) for c over the shape
 * [*n], operand data from data[] and the output's from out. */
static void kargs_for(const tcase *c, const graft__node *node, const int64_t *n, void *const *data,
                      void *out, graft__tview *v, const graft__tview **vp, char *msg,
                      graft__kargs *k) {
  static const int64_t one = 1;
  for (int j = 0; j <= c->n_in; j++) {
    int is_out = j == c->n_in;
    int sc = !is_out && ((c->scalar >> j) & 1);
    v[j] = (graft__tview){is_out ? out : data[j], sc ? 1 : *n, is_out ? c->out_dt : c->in_dt[j], 1,
                          sc ? &one : n};
    if (!is_out) vp[j] = &v[j];
  }
  memset(k, 0, sizeof *k);
  k->node = node;
  k->n_in = c->n_in;
  k->in = vp;
  k->out = &v[c->n_in];
  k->msg = msg;
  k->fn = graft__kernels[c->op].run;
}

/* Run c's middle tile on guarded operands and compare it with the whole
 * range on plain memory. */
static void check_case(const tcase *c) {
  const size_t pg = page_size();
  const int64_t tile = (int64_t)(pg / sizeof(float)), begin = tile / 2, end = begin + tile,
                n = 2 * tile;
  char what[160], msg[GRAFT__MSG_LEN] = "";
  describe(c, what, sizeof what);
  graft__node node;
  memset(&node, 0, sizeof node);
  node.op = (uint16_t)c->op;
  node.dtype = (uint8_t)c->out_dt;
  node.rank = 1;
  node.n_in = c->n_in;

  /* The reference: every input on plain memory, the whole range. */
  void *plain[MAX_IN], *ref_out = NULL;
  for (int j = 0; j < c->n_in; j++) {
    int64_t m = (c->scalar >> j) & 1 ? 1 : n;
    plain[j] = malloc((size_t)m * dt_size(c->in_dt[j]));
    assert_non_null(plain[j]);
    for (int64_t i = 0; i < m; i++)
      set_elem(plain[j], c->in_dt[j], i,
               input_value(j, c->op == GRAFT__OP_WHERE && j == 0, c->in_dt[j], i));
  }
  ref_out = malloc((size_t)n * dt_size(c->out_dt));
  assert_non_null(ref_out);
  graft__tview v[MAX_IN + 1];
  const graft__tview *vp[MAX_IN];
  graft__kargs k;
  kargs_for(c, &node, &n, plain, ref_out, v, vp, msg, &k);
  assert_int_equal(graft__kernel_units(&k), n);
  graft_status st = k.fn(&k, 0, n);
  if (st != GRAFT_OK) fail_msg("%s: whole range: %s: %s", what, graft_status_name(st), msg);

  /* The tile: full operands guarded outside [begin, end). */
  guarded g[MAX_IN + 1] = {{0}};
  void *data[MAX_IN], *out;
  for (int j = 0; j < c->n_in; j++) {
    if ((c->scalar >> j) & 1) {
      data[j] = plain[j];
      continue;
    }
    g[j] = guarded_alloc(n, dt_size(c->in_dt[j]), begin, end);
    data[j] = g[j].data;
    for (int64_t i = begin; i < end; i++)
      set_elem(data[j], c->in_dt[j], i,
               input_value(j, c->op == GRAFT__OP_WHERE && j == 0, c->in_dt[j], i));
  }
  if (c->alias >= 0) {
    out = data[c->alias];
  } else {
    g[MAX_IN] = guarded_alloc(n, dt_size(c->out_dt), begin, end);
    out = g[MAX_IN].data;
  }
  kargs_for(c, &node, &n, data, out, v, vp, msg, &k);
  int sig = run_guarded(&k, begin, end, &st);
  int same = !sig && st == GRAFT_OK &&
             !memcmp((char *)out + (size_t)begin * dt_size(c->out_dt),
                     (char *)ref_out + (size_t)begin * dt_size(c->out_dt),
                     (size_t)(end - begin) * dt_size(c->out_dt));
  for (int j = 0; j <= MAX_IN; j++) guarded_free(&g[j]);
  for (int j = 0; j < c->n_in; j++) free(plain[j]);
  free(ref_out);
  if (sig)
    fail_msg("%s: tile [%lld, %lld) of %lld touched an element outside it (signal %d)", what,
             (long long)begin, (long long)end, (long long)n, sig);
  if (st != GRAFT_OK) fail_msg("%s: tile: %s: %s", what, graft_status_name(st), msg);
  if (!same) fail_msg("%s: tile [%lld, %lld) differs from the whole range", what, (long long)begin,
                      (long long)end);
}

/* c out of place, then in place over each full input of the output's
 * element size (the planner's rule); returns the cases run. */
static int check_placements(tcase c) {
  int ran = 0;
  c.alias = -1;
  check_case(&c);
  ran++;
  for (int j = 0; j < c.n_in; j++) {
    if ((c.scalar >> j) & 1 || dt_size(c.in_dt[j]) != dt_size(c.out_dt)) continue;
    c.alias = j;
    check_case(&c);
    ran++;
  }
  return ran;
}

/* Every mix of full and one-element inputs (not all one-element: the
 * output would have one element too). */
static int check_layouts(tcase c) {
  int ran = 0;
  for (unsigned s = 0; s + 1 < (1u << c.n_in); s++) {
    c.scalar = s;
    ran += check_placements(c);
  }
  return ran;
}

static const graft_dtype DTYPES[] = {GRAFT_F32, GRAFT_F64, GRAFT_I32};

static void test_elementwise_kernels__tile_touches_only_its_elements(void **state) {
  (void)state;
  int ran = 0, ops = 0;
  for (unsigned op = 0; op < GRAFT__OP_COUNT; op++) {
    const graft__op_info *info = &graft__ops[op];
    if (!(info->flags & GRAFT__OPF_ELEMWISE) || info->arity < 1 || !graft__kernels[op].run)
      continue;
    assert_true(info->arity <= MAX_IN);
    ops++;
    tcase c = {op, info->arity, {GRAFT_F32, GRAFT_F32, GRAFT_F32}, GRAFT_F32, 0, -1};
    for (size_t a = 0; a < TU_N_OF(DTYPES); a++) {
      for (size_t b = 0; b < TU_N_OF(DTYPES); b++) {
        if (op == GRAFT__OP_CAST) { /* every (from, to) */
          c.in_dt[0] = DTYPES[a];
          c.out_dt = DTYPES[b];
        } else if (op == GRAFT__OP_WHERE) { /* every (condition, values) */
          c.in_dt[0] = DTYPES[a];
          c.in_dt[1] = c.in_dt[2] = c.out_dt = DTYPES[b];
        } else {
          if (b > 0) break;
          if (DTYPES[a] == GRAFT_I32 && !(info->flags & GRAFT__OPF_INT)) continue;
          for (int j = 0; j < c.n_in; j++) c.in_dt[j] = DTYPES[a];
          c.out_dt = DTYPES[a];
        }
        ran += check_layouts(c);
      }
    }
  }
  print_message("%d elementwise ops, %d tiles checked\n", ops, ran);
  /* The op table must still flag the ops this is about. */
  assert_true(ops >= 30);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_elementwise_kernels__tile_touches_only_its_elements),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
