/* The pointer map (src/common/ptrmap.c) against a plain array: inserts,
 * overwrites and lookups of present and absent keys through many rehashes,
 * and a failed rehash (allocation hook) that leaves the map as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/ptrmap.h"
#include "testutil.h"

enum { KEYS = 20000 };

/* Distinct, aligned, never dereferenced. */
static const void *key_of(int64_t k) { return (const void *)(uintptr_t)(64 * (k + 1)); }

static void test_graft__ptrmap__matches_an_array(void **state) {
  (void)state;
  graft__ptrmap m = {0};
  uint32_t *want = malloc(KEYS * sizeof *want);
  uint8_t *have = calloc(KEYS, 1);
  assert_true(want && have);
  tu_rng r = {0x9a9};
  int64_t present = 0;
  assert_null(graft__ptrmap_get(&m, key_of(0))); /* empty, no storage */
  for (int op = 0; op < 4 * KEYS; op++) {
    int64_t k = tu_int(&r, 0, KEYS - 1);
    uint32_t v = (uint32_t)tu_int(&r, 0, 1 << 30);
    if (tu_int(&r, 0, 3)) {
      assert_int_equal(graft__ptrmap_put(&m, key_of(k), v), GRAFT_OK);
      present += !have[k];
      have[k] = 1;
      want[k] = v;
    }
    int64_t q = tu_int(&r, 0, KEYS - 1);
    const uint32_t *got = graft__ptrmap_get(&m, key_of(q));
    if (have[q]) {
      assert_non_null(got);
      assert_int_equal(*got, want[q]);
    } else {
      assert_null(got);
    }
  }
  assert_int_equal(m.n, present);
  assert_true(2 * m.n <= m.cap);
  for (int64_t k = 0; k < KEYS; k++) {
    const uint32_t *got = graft__ptrmap_get(&m, key_of(k));
    if (have[k]) assert_true(got && *got == want[k]);
    else assert_null(got);
  }
  /* Addresses that differ only in their low bits (byte pointers) too. */
  graft__ptrmap b = {0};
  static const char bytes[64];
  for (int i = 0; i < 64; i++) assert_int_equal(graft__ptrmap_put(&b, &bytes[i], (uint32_t)i), GRAFT_OK);
  for (int i = 0; i < 64; i++) assert_int_equal(*graft__ptrmap_get(&b, &bytes[i]), i);
  graft__ptrmap_free(&b);
  graft__ptrmap_free(&m);
  assert_int_equal(m.cap, 0);
  free(want);
  free(have);
}

static int g_fail; /* the allocation hook fails while set */

static void *failing_alloc(void *ctx, size_t size, size_t align) {
  (void)ctx;
  if (g_fail) return NULL;
  return aligned_alloc(align, (size + align - 1) / align * align);
}

static void plain_free(void *ctx, void *p) {
  (void)ctx;
  free(p);
}

static void test_graft__ptrmap__failed_growth_changes_nothing(void **state) {
  (void)state;
  graft_allocator a = {failing_alloc, plain_free, NULL};
  graft_set_allocator(&a);
  graft__ptrmap m = {0};
  uint32_t k = 0;
  /* fill to the brink of a rehash */
  while (2 * (m.n + 1) <= m.cap || m.cap == 0) {
    assert_int_equal(graft__ptrmap_put(&m, key_of(k), k), GRAFT_OK);
    k++;
  }
  uint32_t n = m.n, cap = m.cap;
  g_fail = 1;
  assert_int_equal(graft__ptrmap_put(&m, key_of(k), k), GRAFT_ENOMEM);
  /* an overwrite needs no room */
  assert_int_equal(graft__ptrmap_put(&m, key_of(0), 77), GRAFT_OK);
  g_fail = 0;
  assert_int_equal(m.n, n);
  assert_int_equal(m.cap, cap);
  assert_null(graft__ptrmap_get(&m, key_of(k)));
  assert_int_equal(*graft__ptrmap_get(&m, key_of(0)), 77);
  for (uint32_t j = 1; j < k; j++) assert_int_equal(*graft__ptrmap_get(&m, key_of(j)), j);
  assert_int_equal(graft__ptrmap_put(&m, key_of(k), k), GRAFT_OK); /* and then it grows */
  assert_true(m.cap > cap);
  graft__ptrmap_free(&m);
  graft_set_allocator(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft__ptrmap__matches_an_array),
      cmocka_unit_test(test_graft__ptrmap__failed_growth_changes_nothing),
  };
  return cmocka_run_group_tests_name("common/ptrmap", tests, NULL, NULL);
}
