/* A watchdog for tests that can hang.
 *
 * A lost wake-up or a counter left unreset in the scheduler shows up as a
 * call that never returns; meson notices only at its timeout, minutes
 * later, and says nothing of where.  Register such a test with
 * TU_WATCHED_TEST(f) instead of cmocka_unit_test(f): the watchdog is armed
 * while it runs.  Inside, tu_watchdog_step("seed %llu, ws x%d", ...) names
 * the step about to run and restarts the clock.  When a step (or a test
 * that names none) makes no progress for the limit, a background thread
 * prints the test, the step and how long it has been running, and ends the
 * program with status 1.
 *
 * GRAFT_TEST_WATCHDOG=<seconds> sets the limit (default 30; 0 turns the
 * watchdog off, e.g. under a debugger).  Include after <cmocka.h>. */
#ifndef GRAFT_TEST_WATCHDOG_H
#define GRAFT_TEST_WATCHDOG_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TU_WATCHDOG_DEFAULT_S 30.0

typedef struct tu_watchdog {
  pthread_mutex_t mu;
  pthread_once_t once;
  int running;             /* the thread was started */
  const char *test;        /* the armed test; NULL: disarmed */
  char step[256];          /* what it is doing now ("" before any step) */
  double since;            /* when that began (CLOCK_MONOTONIC seconds) */
  double limit;            /* seconds without progress; 0: off */
} tu_watchdog;

/* The one watchdog of a test program. */
static inline tu_watchdog *tu_watchdog_get_(void) {
  static tu_watchdog w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_ONCE_INIT, 0, NULL, "", 0.0, 0.0};
  return &w;
}

static inline double tu_watchdog_now_(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Says what hung (on stderr, after what the test printed) and ends the
 * program.  Called with w->mu held; writes with write(2) so that a test
 * thread holding stdio's lock cannot block it. */
static inline void tu_watchdog_bark_(tu_watchdog *w, double idle) {
  char msg[640];
  int n = snprintf(msg, sizeof msg,
                   "\nWATCHDOG: %s: %s%sno progress for %.1f s (limit %.0f s): a hang in the "
                   "code under test?  Stopping the program.  (GRAFT_TEST_WATCHDOG=<seconds> "
                   "sets the limit, 0 turns it off.)\n",
                   w->test, w->step[0] ? w->step : "", w->step[0] ? ": " : "", idle, w->limit);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof msg) n = (int)sizeof msg - 1;
  /* What the test printed so far, unless a hung thread holds the lock. */
  if (ftrylockfile(stdout) == 0) {
    fflush(stdout);
    funlockfile(stdout);
  }
  ssize_t ignored = write(STDERR_FILENO, msg, (size_t)n);
  (void)ignored;
  _exit(1);
}

static inline void *tu_watchdog_main_(void *arg) {
  tu_watchdog *w = arg;
  for (;;) {
    struct timespec nap = {0, 100 * 1000 * 1000};
    nanosleep(&nap, NULL);
    pthread_mutex_lock(&w->mu);
    double idle = tu_watchdog_now_() - w->since;
    if (w->test && w->limit > 0 && idle > w->limit) tu_watchdog_bark_(w, idle);
    pthread_mutex_unlock(&w->mu);
  }
  return NULL;
}

static inline void tu_watchdog_start_(void) {
  tu_watchdog *w = tu_watchdog_get_();
  pthread_t th;
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  w->running = pthread_create(&th, &attr, tu_watchdog_main_, w) == 0;
  pthread_attr_destroy(&attr);
  if (!w->running) fprintf(stderr, "watchdog: no thread; tests run without it\n");
}

/* The limit from GRAFT_TEST_WATCHDOG (seconds), or the default. */
static inline double tu_watchdog_limit_(void) {
  const char *e = getenv("GRAFT_TEST_WATCHDOG");
  if (!e || !*e) return TU_WATCHDOG_DEFAULT_S;
  char *end = NULL;
  double v = strtod(e, &end);
  return end != e && *end == '\0' && v >= 0 ? v : TU_WATCHDOG_DEFAULT_S;
}

/* The step about to run (printf format); restarts the clock.  Any thread. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2)))
#endif
static inline void tu_watchdog_step(const char *fmt, ...) {
  tu_watchdog *w = tu_watchdog_get_();
  pthread_mutex_lock(&w->mu);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->step, sizeof w->step, fmt, ap);
  va_end(ap);
  w->since = tu_watchdog_now_();
  pthread_mutex_unlock(&w->mu);
}

/* cmocka fixtures of TU_WATCHED_TEST: *state is the test's name. */
static inline int tu_watchdog_arm_(void **state) {
  tu_watchdog *w = tu_watchdog_get_();
  pthread_once(&w->once, tu_watchdog_start_);
  pthread_mutex_lock(&w->mu);
  w->test = *state;
  w->step[0] = '\0';
  w->limit = tu_watchdog_limit_();
  w->since = tu_watchdog_now_();
  pthread_mutex_unlock(&w->mu);
  return 0;
}

static inline int tu_watchdog_disarm_(void **state) {
  (void)state;
  tu_watchdog *w = tu_watchdog_get_();
  pthread_mutex_lock(&w->mu);
  w->test = NULL;
  pthread_mutex_unlock(&w->mu);
  return 0;
}

/* A cmocka test entry that runs f under the watchdog (f's state holds its
 * name). */
#define TU_WATCHED_TEST(f) \
  cmocka_unit_test_prestate_setup_teardown(f, tu_watchdog_arm_, tu_watchdog_disarm_, (void *)#f)

/* The same for a test with a teardown of its own, which must call
 * tu_watchdog_disarm_(state) (else the watchdog stays armed after f). */
#define TU_WATCHED_TEST_TEARDOWN(f, teardown) \
  cmocka_unit_test_prestate_setup_teardown(f, tu_watchdog_arm_, teardown, (void *)#f)

#endif /* GRAFT_TEST_WATCHDOG_H */
