/* The call's entry and the tile runner leave the vector registers' upper
 * halves clean, the runner after every kernel (common/simd_state.h): code
 * built for the base x86-64 that
 * runs after AVX code with dirty upper halves pays a state transition at
 * every switch of encoding (libm's exp took 25x longer a call).
 *
 * graft__exec_fault_hook runs at the start of every tile, on the thread that
 * runs it: it reads XINUSE (XGETBV with ECX = 1, bit 2: the upper halves of
 * ymm0..15 in use), which the previous tile's runner on that thread left,
 * then dirties the upper halves itself (a VEX-256 instruction) before the
 * tile's kernel runs.  The test's thread dirties them too, right before
 * each call (a caller's own AVX code), so the call's entry must clean them
 * as well.  Every reading must be clean (threads start clean).  The graph's
 * kernels (softmax, exp, sums) are ones built for the base x86-64 too, so
 * none of them cleans the state by itself.  Skipped where the CPU has no AVX
 * or no XGETBV with ECX = 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "watchdog.h"
#include "sched/sched.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define HAVE_X86 1
#endif

TU_SUPPRESS_GOMP_TASK_LEAK();

#ifdef HAVE_X86
static int can_read_xinuse(void) {
  unsigned a, b, c, d;
  if (!__builtin_cpu_supports("avx")) return 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
  if (!__get_cpuid_count(0xd, 1, &a, &b, &c, &d)) return 0;
  return (a >> 2) & 1; /* XGETBV with ECX = 1 */
}

static uint64_t xinuse(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return (uint64_t)hi << 32 | lo;
}

/* vpaddd %ymm1, %ymm1, %ymm1 as bytes, so the test itself needs no -mavx. */
static void dirty_upper(void) { __asm__ volatile(".byte 0xc5,0xf5,0xfe,0xc9" ::: "xmm1"); }
#endif

static _Atomic int readings, dirty;

static graft_status hook(uint32_t node, int64_t tile) {
  (void)node, (void)tile;
#ifdef HAVE_X86
  atomic_fetch_add(&readings, 1);
  if (xinuse() & 4) atomic_fetch_add(&dirty, 1);
  dirty_upper();
#endif
  return GRAFT_OK;
}

static graft_status trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                          graft_value **out, void *user) {
  (void)n_in, (void)n_out, (void)user;
  graft_value *s = graft_softmax(t, in[0], 1);
  graft_value *e = graft_exp(t, graft_neg(t, in[0]));
  int ax = 1;
  out[0] = graft_add(t, graft_reduce_sum(t, s, 1, &ax, 0), graft_reduce_sum(t, e, 1, &ax, 0));
  return GRAFT_OK;
}

static void check(const char *sched, int threads) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.sched = sched;
  o.num_threads = threads;
  o.fusion = "off"; /* one node per op: more tiles, more readings */
  o.grain = 64;
  graft_runtime *rt;
  tu_assert_status(graft_runtime_create(&o, &rt), GRAFT_OK);
  float x[64 * 40];
  for (int i = 0; i < 64 * 40; i++) x[i] = (float)(i % 13) * 0.25f - 1.5f;
  const int64_t shape[2] = {64, 40};
  graft_tensor *in, *out = NULL;
  tu_assert_status(graft_tensor_wrap(GRAFT_F32, 2, shape, x, &in), GRAFT_OK);
  graft_function_desc d = {.name = "simd_state", .trace = trace, .n_inputs = 1, .n_outputs = 1};
  graft_function *f;
  tu_assert_status(graft_function_create(rt, &d, &f), GRAFT_OK);
  atomic_store(&readings, 0);
  atomic_store(&dirty, 0);
  graft__exec_fault_hook = hook;
  for (int call = 0; call < 4; call++) {
#ifdef HAVE_X86
    dirty_upper(); /* the caller's own AVX code */
#endif
    tu_assert_call_ok(f, 1, &in, 1, &out);
  }
  graft__exec_fault_hook = NULL;
  print_message("%s, %d thread(s): %d readings, %d dirty\n", sched, threads, atomic_load(&readings),
                atomic_load(&dirty));
  assert_true(atomic_load(&readings) >= 8);
  assert_int_equal(atomic_load(&dirty), 0);
  graft_tensor_destroy(out);
  graft_tensor_destroy(in);
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
}

static void test_simd_state__clean_at_entry_and_after_every_tile(void **state) {
  (void)state;
#ifdef HAVE_X86
  if (!can_read_xinuse()) {
    print_message("no AVX or no XGETBV with ECX = 1: skipped\n");
    skip();
  }
  check("seq", 1);
  check("ws", 1);
  check("ws", 2);
  check("omp", 2);
#else
  skip();
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_WATCHED_TEST(test_simd_state__clean_at_entry_and_after_every_tile),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
