/* The Chase-Lev work-stealing deque: order at both ends, growth, reset,
 * reclamation, allocation failure, and concurrent owner/thief runs in which
 * every item must be taken exactly once (the last of them a memory-order
 * test that keeps going until owner and thieves have met often enough,
 * however loaded the machine).
 *
 * The concurrent cases run a team of TEAM threads (thread 0 owns the deque,
 * the others steal): an OpenMP parallel region by default, or pthreads when
 * built with -DGRAFT_DEQUE_TEST_PTHREADS (for ThreadSanitizer, which does not
 * see libgomp's synchronization).  Workers only record; the asserts run on
 * the test's thread after the join. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#ifdef GRAFT_DEQUE_TEST_PTHREADS
#include <pthread.h>
#else
#include <omp.h>
#endif

#include "graft/alloc.h"
#include "sched/deque.h"
#include "watchdog.h"

enum {
  TEAM = 4,
  N_STREAM = 200000,
  RACE_ITEMS = 20000,    /* items per round of the last-element race */
  RACE_MET = 2000,       /* the race runs until thieves took this many
                            items while the owner was popping */
  RACE_MIN_ROUNDS = 10,
  RACE_MAX_SECONDS = 30,
};

static int64_t capacity_of(graft__deque *d) {
  return atomic_load_explicit(&d->buf, memory_order_relaxed)->mask + 1;
}

static int retired_count(const graft__deque *d) {
  int n = 0;
  for (const graft__deque_buf *r = d->retired; r; r = r->next) n++;
  return n;
}

/* ---- single thread ---------------------------------------------------- */

static void test_graft__deque_init__rounds_capacity(void **state) {
  (void)state;
  static const int64_t ask[] = {-5, 0, 1, 16, 17, 1000, 1024};
  static const int64_t want[] = {16, 16, 16, 16, 32, 1024, 1024};
  for (size_t i = 0; i < sizeof ask / sizeof ask[0]; i++) {
    graft__deque d;
    assert_int_equal(graft__deque_init(&d, ask[i]), GRAFT_OK);
    assert_int_equal(capacity_of(&d), want[i]);
    assert_int_equal(graft__deque_size_approx(&d), 0);
    assert_null(d.retired);
    graft__deque_destroy(&d);
  }
}

static void test_graft__deque_pop__lifo_order(void **state) {
  (void)state;
  graft__deque d;
  assert_int_equal(graft__deque_init(&d, 128), GRAFT_OK);
  uint64_t x = 12345;
  assert_int_equal(graft__deque_pop(&d, &x), 0);
  assert_int_equal(x, 12345); /* untouched when empty */
  for (uint64_t i = 0; i < 100; i++) assert_int_equal(graft__deque_push(&d, i), GRAFT_OK);
  assert_int_equal(graft__deque_size_approx(&d), 100);
  for (uint64_t i = 100; i-- > 0;) {
    assert_int_equal(graft__deque_pop(&d, &x), 1);
    assert_int_equal(x, i);
  }
  assert_int_equal(graft__deque_pop(&d, &x), 0);
  assert_int_equal(graft__deque_steal(&d, &x), 0);
  assert_int_equal(graft__deque_size_approx(&d), 0);
  /* Still usable after running dry, including through the empty-pop path. */
  assert_int_equal(graft__deque_push(&d, 7), GRAFT_OK);
  assert_int_equal(graft__deque_pop(&d, &x), 1);
  assert_int_equal(x, 7);
  graft__deque_destroy(&d);
}

static void test_graft__deque_steal__fifo_order(void **state) {
  (void)state;
  graft__deque d;
  assert_int_equal(graft__deque_init(&d, 16), GRAFT_OK);
  uint64_t x = 0;
  assert_int_equal(graft__deque_steal(&d, &x), 0);
  for (uint64_t i = 0; i < 100; i++) assert_int_equal(graft__deque_push(&d, i * 3 + 1), GRAFT_OK);
  for (uint64_t i = 0; i < 100; i++) {
    assert_int_equal(graft__deque_steal(&d, &x), 1);
    assert_int_equal(x, i * 3 + 1);
  }
  assert_int_equal(graft__deque_steal(&d, &x), 0);
  assert_int_equal(graft__deque_pop(&d, &x), 0);
  graft__deque_destroy(&d);
}

static void test_graft__deque_pop__both_ends_meet(void **state) {
  (void)state;
  graft__deque d;
  assert_int_equal(graft__deque_init(&d, 16), GRAFT_OK);
  uint64_t x = 0;
  for (uint64_t i = 0; i < 10; i++) assert_int_equal(graft__deque_push(&d, i), GRAFT_OK);
  for (uint64_t k = 0; k < 5; k++) { /* 0 9 1 8 2 7 3 6 4 5 */
    assert_int_equal(graft__deque_steal(&d, &x), 1);
    assert_int_equal(x, k);
    assert_int_equal(graft__deque_pop(&d, &x), 1);
    assert_int_equal(x, 9 - k);
  }
  assert_int_equal(graft__deque_pop(&d, &x), 0);
  /* The last item taken by pop (the CAS path) and by steal. */
  assert_int_equal(graft__deque_push(&d, 42), GRAFT_OK);
  assert_int_equal(graft__deque_pop(&d, &x), 1);
  assert_int_equal(x, 42);
  assert_int_equal(graft__deque_push(&d, 43), GRAFT_OK);
  assert_int_equal(graft__deque_steal(&d, &x), 1);
  assert_int_equal(x, 43);
  assert_int_equal(graft__deque_pop(&d, &x), 0);
  assert_int_equal(graft__deque_steal(&d, &x), 0);
  graft__deque_destroy(&d);
}

/* Growth from 16 to more than 100k items, checked against a plain array
 * model [head, tail) after every operation that returns an item. */
static void test_graft__deque_push__grows_from_16(void **state) {
  (void)state;
  enum { PUSHES = 180000 };
  uint64_t *model = malloc(PUSHES * sizeof *model);
  assert_non_null(model);
  int64_t head = 0, tail = 0, max_size = 0;
  graft__deque d;
  assert_int_equal(graft__deque_init(&d, 16), GRAFT_OK);
  uint64_t x = 0;
  for (uint64_t i = 0; i < PUSHES; i++) {
    uint64_t item = i * 0x9E3779B97F4A7C15ull; /* distinct, and using all 64 bits */
    assert_int_equal(graft__deque_push(&d, item), GRAFT_OK);
    model[tail++] = item;
    if (i % 5 == 4) {
      assert_int_equal(graft__deque_pop(&d, &x), 1);
      assert_true(x == model[--tail]);
    }
    if (i % 7 == 6) {
      assert_int_equal(graft__deque_steal(&d, &x), 1);
      assert_true(x == model[head++]);
    }
    if (tail - head > max_size) max_size = tail - head;
  }
  assert_true(max_size > 100000);
  assert_int_equal(graft__deque_size_approx(&d), tail - head);
  assert_true(capacity_of(&d) >= max_size);
  assert_non_null(d.retired);
  for (int k = 0; head < tail; k++) { /* drain from both ends */
    if (k % 2) {
      assert_int_equal(graft__deque_pop(&d, &x), 1);
      assert_true(x == model[--tail]);
    } else {
      assert_int_equal(graft__deque_steal(&d, &x), 1);
      assert_true(x == model[head++]);
    }
  }
  assert_int_equal(graft__deque_pop(&d, &x), 0);
  assert_int_equal(graft__deque_steal(&d, &x), 0);
  graft__deque_destroy(&d);
  free(model);
}

static void test_graft__deque_reclaim__after_growth(void **state) {
  (void)state;
  graft__deque d;
  assert_int_equal(graft__deque_init(&d, 16), GRAFT_OK);
  for (uint64_t i = 0; i < 1000; i++) assert_int_equal(graft__deque_push(&d, i), GRAFT_OK);
  assert_int_equal(capacity_of(&d), 1024);
  assert_int_equal(retired_count(&d), 6); /* 16 32 64 128 256 512 */
  graft__deque_reclaim(&d);
  assert_null(d.retired);
  graft__deque_reclaim(&d); /* nothing left: a no-op */
  assert_null(d.retired);
  uint64_t x = 0;
  assert_int_equal(graft__deque_steal(&d, &x), 1);
  assert_int_equal(x, 0);
  for (uint64_t i = 1000; i-- > 1;) {
    assert_int_equal(graft__deque_pop(&d, &x), 1);
    assert_int_equal(x, i);
  }
  assert_int_equal(graft__deque_pop(&d, &x), 0);
  graft__deque_destroy(&d);
}

static void test_graft__deque_reset__empties_keeps_buffer(void **state) {
  (void)state;
  graft__deque d;
  assert_int_equal(graft__deque_init(&d, 16), GRAFT_OK);
  uint64_t x = 0;
  for (uint64_t i = 0; i < 40; i++) assert_int_equal(graft__deque_push(&d, i), GRAFT_OK);
  for (int i = 0; i < 5; i++) assert_int_equal(graft__deque_steal(&d, &x), 1);
  graft__deque_buf *buf = atomic_load(&d.buf);
  graft__deque_reset(&d);
  assert_int_equal(graft__deque_size_approx(&d), 0);
  assert_int_equal(graft__deque_pop(&d, &x), 0);
  assert_int_equal(graft__deque_steal(&d, &x), 0);
  assert_ptr_equal(atomic_load(&d.buf), buf);
  assert_int_equal(atomic_load(&d.top), 0);
  assert_int_equal(atomic_load(&d.bottom), 0);
  for (uint64_t i = 100; i < 103; i++) assert_int_equal(graft__deque_push(&d, i), GRAFT_OK);
  assert_int_equal(graft__deque_steal(&d, &x), 1);
  assert_int_equal(x, 100);
  assert_int_equal(graft__deque_pop(&d, &x), 1);
  assert_int_equal(x, 102);
  assert_int_equal(graft__deque_size_approx(&d), 1);
  graft__deque_destroy(&d);
}

/* ---- allocation failure ----------------------------------------------- */

typedef struct countdown {
  long count, fail_at, live;
  int hit;
} countdown;

static void *cd_alloc(void *ctx, size_t size, size_t align) {
  countdown *c = ctx;
  if (++c->count == c->fail_at) {
    c->hit = 1;
    return NULL;
  }
  void *p = aligned_alloc(align, (size + align - 1) & ~(align - 1));
  if (p) c->live++;
  return p;
}

static void cd_free(void *ctx, void *p) {
  countdown *c = ctx;
  c->live--;
  free(p);
}

static int restore_allocator(void **state) {
  (void)state;
  graft_set_allocator(NULL);
  return 0;
}

/* Fail the N-th allocation of "init, push 40 items" (two growths) for every
 * N: the failing step returns GRAFT_ENOMEM, earlier items stay intact, and
 * destroy gives every block back. */
static void test_graft__deque_push__enomem_keeps_items(void **state) {
  (void)state;
  enum { ITEMS = 40 };
  for (long fail_at = 1;; fail_at++) {
    countdown c = {0, fail_at, 0, 0};
    graft_allocator a = {cd_alloc, cd_free, &c};
    graft_set_allocator(&a);
    graft__deque d;
    graft_status st = graft__deque_init(&d, 16);
    int pushed = 0;
    if (st == GRAFT_OK) {
      for (; pushed < ITEMS; pushed++) {
        st = graft__deque_push(&d, (uint64_t)pushed);
        if (st != GRAFT_OK) break;
      }
      assert_int_equal(graft__deque_size_approx(&d), pushed);
      uint64_t x = 0;
      for (int i = pushed; i-- > 0;) {
        assert_int_equal(graft__deque_pop(&d, &x), 1);
        assert_int_equal(x, (uint64_t)i);
      }
      assert_int_equal(graft__deque_pop(&d, &x), 0);
    }
    graft__deque_destroy(&d);
    graft_set_allocator(NULL);
    assert_int_equal(c.live, 0);
    if (!c.hit) {
      assert_int_equal(st, GRAFT_OK);
      assert_int_equal(pushed, ITEMS);
      assert_int_equal(fail_at, 4); /* init + two growths succeeded first */
      break;
    }
    assert_int_equal(st, GRAFT_ENOMEM);
    assert_int_equal(pushed, fail_at == 1 ? 0 : 16 << (fail_at - 2));
  }
}

/* ---- concurrent: one owner, TEAM - 1 thieves -------------------------- */

typedef struct run {
  graft__deque d;
  int64_t n;                /* items are 0 .. n-1, pushed in increasing order */
  _Atomic uint32_t *taken;  /* per item: how many times it was taken */
  atomic_int ready, go, done;
  atomic_int popping;       /* the owner is in a pop loop (burst runs) */
  atomic_long by_thieves, lost_races, bad;
  atomic_long met;          /* items stolen while the owner was popping */
  long by_owner;
  int owner_errors, team_size;
  int64_t first_burst;      /* owner pushes this many before thieves start */
} run;

typedef void (*role_fn)(run *r, int tid, int team);

static void take(run *r, uint64_t x) {
  if (x >= (uint64_t)r->n) atomic_fetch_add_explicit(&r->bad, 1, memory_order_relaxed);
  else atomic_fetch_add_explicit(&r->taken[x], 1, memory_order_relaxed);
}

/* A thief steals until the owner says it is done and the deque is empty.
 * Items are pushed in increasing order and top only grows, so one thief's
 * successive items must increase. */
static void thief(run *r) {
  atomic_fetch_add_explicit(&r->ready, 1, memory_order_release);
  while (!atomic_load_explicit(&r->go, memory_order_acquire)) {
  }
  long got = 0, lost = 0, idle = 0, met = 0;
  uint64_t last = 0, x = 0;
  int first = 1;
  for (;;) {
    int s = graft__deque_steal(&r->d, &x);
    if (s == 1) {
      if (!first && x <= last) atomic_fetch_add_explicit(&r->bad, 1, memory_order_relaxed);
      first = 0;
      last = x;
      take(r, x);
      got++;
      met += atomic_load_explicit(&r->popping, memory_order_relaxed);
    } else if (s < 0) {
      lost++;
    } else if (atomic_load_explicit(&r->done, memory_order_acquire)) {
      break;
    } else if (++idle % 64 == 0) {
      sched_yield(); /* let an owner that shares this core run */
    }
  }
  atomic_fetch_add_explicit(&r->by_thieves, got, memory_order_relaxed);
  atomic_fetch_add_explicit(&r->lost_races, lost, memory_order_relaxed);
  atomic_fetch_add_explicit(&r->met, met, memory_order_relaxed);
}

/* The owner starts once every thief is running, or the owner could be done
 * before the (oversubscribed) thieves are scheduled at all. */
static void wait_for_thieves(run *r, int team) {
  while (atomic_load_explicit(&r->ready, memory_order_acquire) < team - 1) sched_yield();
}

/* A little owner-side work between pushes and pops, of varying length, to
 * give the thieves windows of different widths. */
static void busy(unsigned n) {
  for (volatile unsigned i = 0; i < n; i++) {
  }
}

static void owner_push(run *r, uint64_t i) {
  if (graft__deque_push(&r->d, i) != GRAFT_OK) {
    r->owner_errors++;
    take(r, i); /* keep the exactly-once count meaningful */
  }
}

static int owner_pop(run *r) {
  uint64_t x = 0;
  if (!graft__deque_pop(&r->d, &x)) return 0;
  take(r, x);
  r->by_owner++;
  return 1;
}

/* Owner of the stream runs: bursts of growing length (1 .. 512 pushes), each
 * followed by a third as many pops, then a drain. */
static void stream_owner(run *r, int team) {
  wait_for_thieves(r, team);
  uint64_t i = 0;
  for (; i < (uint64_t)r->first_burst && i < (uint64_t)r->n; i++) owner_push(r, i);
  atomic_store_explicit(&r->go, 1, memory_order_release);
  for (uint64_t burst = 1; i < (uint64_t)r->n; burst = burst % 512 + 1) {
    for (uint64_t k = 0; k < burst && i < (uint64_t)r->n; k++) owner_push(r, i++);
    for (uint64_t k = 0; k < burst / 3 + 1; k++) owner_pop(r);
    if (burst % 8 == 0) sched_yield(); /* let thieves that share this core in */
  }
  while (owner_pop(r)) {
  }
  atomic_store_explicit(&r->done, 1, memory_order_release);
}

static void stream_role(run *r, int tid, int team) {
  if (tid == 0) stream_owner(r, team);
  else thief(r);
}

/* Owner of the burst runs: push one to four items, then pop until empty, so
 * that pop and the thieves keep meeting on the last items.  (A pop that
 * sees more than one item left takes its item without a CAS; without the
 * fence that orders its store of bottom before its load of top, it can read
 * a stale top while a thief, reading a stale bottom, steals the same item:
 * that takes two or more items in the deque.) */
static void burst_owner(run *r, int team) {
  wait_for_thieves(r, team);
  atomic_store_explicit(&r->go, 1, memory_order_release);
  uint64_t i = 0;
  for (int k = 0; i < (uint64_t)r->n; k++) {
    for (int m = 0; m <= k % 4 && i < (uint64_t)r->n; m++) owner_push(r, i++);
    busy((unsigned)k % 97);
    if (k % 32 == 0) sched_yield();
    atomic_store_explicit(&r->popping, 1, memory_order_relaxed);
    while (owner_pop(r)) {
    }
    atomic_store_explicit(&r->popping, 0, memory_order_relaxed);
  }
  atomic_store_explicit(&r->done, 1, memory_order_release);
}

static void burst_role(run *r, int tid, int team) {
  if (tid == 0) burst_owner(r, team);
  else thief(r);
}

#ifdef GRAFT_DEQUE_TEST_PTHREADS
typedef struct member {
  run *r;
  role_fn fn;
  int tid, team;
} member;

static void *member_main(void *arg) {
  member *m = arg;
  m->fn(m->r, m->tid, m->team);
  return NULL;
}

/* Runs fn on a team of size threads (at most TEAM); returns the team size
 * (the threads that were started). */
static int run_team(run *r, role_fn fn, int size) {
  pthread_t th[TEAM];
  member m[TEAM];
  int started = 1;
  for (int t = 1; t < size; t++) {
    m[t] = (member){r, fn, t, size};
    if (pthread_create(&th[t], NULL, member_main, &m[t]) != 0) break;
    started++;
  }
  fn(r, 0, started); /* a thief that failed to start is not waited for */
  for (int t = 1; t < started; t++) pthread_join(th[t], NULL);
  return started;
}
#else
static int run_team(run *r, role_fn fn, int size) {
  int got = 0;
#pragma omp parallel num_threads(size)
  {
#pragma omp single nowait
    got = omp_get_num_threads();
    fn(r, omp_get_thread_num(), omp_get_num_threads());
  }
  return got;
}
#endif

static void run_init(run *r, int64_t n, int64_t capacity, int64_t first_burst) {
  r->n = n;
  r->taken = calloc((size_t)n, sizeof *r->taken);
  assert_non_null(r->taken);
  for (int64_t i = 0; i < n; i++) atomic_init(&r->taken[i], 0);
  assert_int_equal(graft__deque_init(&r->d, capacity), GRAFT_OK);
  atomic_init(&r->ready, 0);
  atomic_init(&r->go, 0);
  atomic_init(&r->done, 0);
  atomic_init(&r->by_thieves, 0);
  atomic_init(&r->lost_races, 0);
  atomic_init(&r->bad, 0);
  atomic_init(&r->popping, 0);
  atomic_init(&r->met, 0);
  r->by_owner = 0;
  r->owner_errors = 0;
  r->first_burst = first_burst;
}

/* After the join: every item taken exactly once, nothing out of order. */
static void run_check(run *r) {
  assert_int_equal(r->owner_errors, 0);
  assert_int_equal(atomic_load(&r->bad), 0);
  int64_t wrong = 0, first_wrong = -1;
  for (int64_t i = 0; i < r->n; i++)
    if (atomic_load_explicit(&r->taken[i], memory_order_relaxed) != 1) {
      if (first_wrong < 0) first_wrong = i;
      wrong++;
    }
  if (wrong) fprintf(stderr, "%lld items not taken exactly once (first: %lld, taken %u times)\n",
                     (long long)wrong, (long long)first_wrong, (unsigned)r->taken[first_wrong]);
  assert_int_equal(wrong, 0);
  assert_int_equal(r->by_owner + atomic_load(&r->by_thieves), r->n);
  assert_int_equal(graft__deque_size_approx(&r->d), 0);
}

static void run_free(run *r) {
  graft__deque_destroy(&r->d);
  free(r->taken);
}

static void stream_case(int64_t capacity, int64_t first_burst, const char *label) {
  run r;
  run_init(&r, N_STREAM, capacity, first_burst);
  r.team_size = run_team(&r, stream_role, TEAM);
  int retired = retired_count(&r.d);
  int64_t cap = capacity_of(&r.d);
  run_check(&r);
  printf("  %s: team %d, owner took %ld, thieves %ld (lost %ld races), capacity %lld, "
         "%d buffers retired\n",
         label, r.team_size, r.by_owner, atomic_load(&r.by_thieves), atomic_load(&r.lost_races),
         (long long)cap, retired);
  if (first_burst > capacity) assert_true(retired > 0);
  graft__deque_reclaim(&r.d);
  assert_null(r.d.retired);
  run_free(&r);
}

static void test_graft__deque_steal__concurrent_exactly_once(void **state) {
  (void)state;
  stream_case(1 << 18, 0, "no growth");
}

/* Starting at 16: the first burst of 100 items grows the buffer before the
 * thieves start; the later bursts (up to 512) grow it while they steal. */
static void test_graft__deque_steal__concurrent_with_growth(void **state) {
  (void)state;
  stream_case(16, 100, "growth");
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The memory-order case.  Only an owner and a thief running on two CPUs at
 * once can show a missing fence (x86 reorders exactly pop's store of bottom
 * and load of top), so a fixed number of rounds proves nothing on a machine
 * that other tests load: the two may hardly ever run at the same time.
 * Rounds go on until thieves have taken RACE_MET items while the owner was
 * in a pop loop (each such meeting is a chance to take one item twice), for
 * RACE_MAX_SECONDS at most, and the case is skipped, saying so, if they met
 * too rarely.  With the fence removed, 10 runs on a 2-core machine loaded by
 * other programs (load average 8 to 11) each found a duplicate within 254
 * meetings.  One thread per CPU (2 to TEAM): more would take CPU time from
 * the owner and leave fewer pairs running at once. */
static void test_graft__deque_pop__last_element_race(void **state) {
  (void)state;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int team = cpus < 2 ? 2 : cpus > TEAM ? TEAM : (int)cpus;
  long owner = 0, thieves = 0, lost = 0, met = 0;
  int rounds = 0;
  double t0 = now_s();
  while (rounds < RACE_MIN_ROUNDS || (met < RACE_MET && now_s() - t0 < RACE_MAX_SECONDS)) {
    run r;
    run_init(&r, RACE_ITEMS, 16, 0);
    tu_watchdog_step("round %d (team %d, %ld meetings so far)", rounds, team, met);
    r.team_size = run_team(&r, burst_role, team);
    run_check(&r);
    owner += r.by_owner;
    thieves += atomic_load(&r.by_thieves);
    lost += atomic_load(&r.lost_races);
    met += atomic_load(&r.met);
    run_free(&r);
    rounds++;
  }
  printf("  last element: %d rounds in %.1f s, team %d: owner took %ld, thieves %ld (%ld while "
         "the owner popped; lost %ld races)\n",
         rounds, now_s() - t0, team, owner, thieves, met, lost);
  if (met < RACE_MET) {
    print_message("the thieves met the owner's pops only %ld times in %d s (wanted %d): too few "
                  "to test the memory orders; skipped\n", met, RACE_MAX_SECONDS, RACE_MET);
    skip();
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft__deque_init__rounds_capacity),
      cmocka_unit_test(test_graft__deque_pop__lifo_order),
      cmocka_unit_test(test_graft__deque_steal__fifo_order),
      cmocka_unit_test(test_graft__deque_pop__both_ends_meet),
      cmocka_unit_test(test_graft__deque_push__grows_from_16),
      cmocka_unit_test(test_graft__deque_reclaim__after_growth),
      cmocka_unit_test(test_graft__deque_reset__empties_keeps_buffer),
      cmocka_unit_test_teardown(test_graft__deque_push__enomem_keeps_items, restore_allocator),
      TU_WATCHED_TEST(test_graft__deque_steal__concurrent_exactly_once),
      TU_WATCHED_TEST(test_graft__deque_steal__concurrent_with_growth),
      TU_WATCHED_TEST(test_graft__deque_pop__last_element_race),
  };
  return cmocka_run_group_tests_name("sched/deque", tests, NULL, NULL);
}
