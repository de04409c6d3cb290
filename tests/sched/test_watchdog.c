/* The scheduler tests' watchdog (tests/watchdog.h): a step that hangs ends
 * the program with status 1 and a message naming the test and the step;
 * steps that keep coming, and time spent outside a watched test, do not.
 * Each case runs the watched code in a child process, with a 1-second
 * limit, and reads what it printed. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "watchdog.h"

enum { GIVE_UP_S = 20 }; /* a child still running then is killed: the watchdog failed */

typedef struct outcome {
  int killed;            /* the child did not end by itself */
  int status;            /* its exit status (when it exited) */
  int signalled;         /* it died of a signal */
  char out[4096];        /* stdout and stderr */
} outcome;

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Run body in a child armed as test "planted" with GRAFT_TEST_WATCHDOG=1. */
static void run_child(void (*body)(void), outcome *o) {
  memset(o, 0, sizeof *o);
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fd[1], STDOUT_FILENO);
    dup2(fd[1], STDERR_FILENO);
    close(fd[0]);
    close(fd[1]);
    setenv("GRAFT_TEST_WATCHDOG", "1", 1);
    void *state = (void *)"planted";
    tu_watchdog_arm_(&state);
    body();
    tu_watchdog_disarm_(&state);
    fflush(stdout);
    _exit(0);
  }
  close(fd[1]);
  size_t got = 0;
  double t0 = tu_watchdog_now_();
  for (;;) {
    struct pollfd p = {fd[0], POLLIN, 0};
    int left_ms = (int)((GIVE_UP_S - (tu_watchdog_now_() - t0)) * 1000);
    if (left_ms <= 0) {
      kill(pid, SIGKILL);
      o->killed = 1;
      break;
    }
    int r = poll(&p, 1, left_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = read(fd[0], o->out + got, sizeof o->out - 1 - got);
    if (n <= 0) break; /* EOF: the child is gone */
    got += (size_t)n;
    if (got == sizeof o->out - 1) break;
  }
  close(fd[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  o->signalled = WIFSIGNALED(st);
  o->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void hang_in_step(void) {
  tu_watchdog_step("step %d", 1);
  tu_watchdog_step("seed %d, ws x%d", 7, 3);
  for (;;) pause();
}

static void hang_without_steps(void) {
  for (;;) pause();
}

/* 2.5 s of steps 0.1 s apart: never 1 s without progress. */
static void steady_steps(void) {
  for (int i = 0; i < 25; i++) {
    tu_watchdog_step("round %d", i);
    nap(0.1);
  }
}

/* body, run in a child, must end it with status 1 and a message holding
 * want. */
static void expect_bark(void (*body)(void), const char *want) {
  outcome o;
  run_child(body, &o);
  if (o.killed) fail_msg("the watchdog did not end a hung child within %d s", GIVE_UP_S);
  assert_false(o.signalled);
  assert_int_equal(o.status, 1);
  if (!strstr(o.out, want)) fail_msg("the message lacks \"%s\": \"%s\"", want, o.out);
}

/* body, run in a child, must end normally with no word from the watchdog. */
static void expect_quiet(void (*body)(void)) {
  outcome o;
  run_child(body, &o);
  assert_false(o.killed);
  assert_false(o.signalled);
  if (o.status != 0) fail_msg("status %d: \"%s\"", o.status, o.out);
  assert_null(strstr(o.out, "WATCHDOG"));
}

/* The test ends (disarms), then the program idles past the limit. */
static void idle_after_disarm(void) {
  void *state = (void *)"planted";
  tu_watchdog_disarm_(&state);
  nap(1.5);
}

static void test_tu_watchdog__hung_step_ends_program_naming_it(void **state) {
  (void)state;
  expect_bark(hang_in_step, "WATCHDOG: planted: seed 7, ws x3: no progress for");
}

static void test_tu_watchdog__hung_test_without_steps(void **state) {
  (void)state;
  expect_bark(hang_without_steps, "WATCHDOG: planted: no progress for");
}

static void test_tu_watchdog__steady_steps_do_not_trip_it(void **state) {
  (void)state;
  expect_quiet(steady_steps);
}

static void test_tu_watchdog__idle_outside_a_test_does_not_trip_it(void **state) {
  (void)state;
  expect_quiet(idle_after_disarm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tu_watchdog__hung_step_ends_program_naming_it),
      cmocka_unit_test(test_tu_watchdog__hung_test_without_steps),
      cmocka_unit_test(test_tu_watchdog__steady_steps_do_not_trip_it),
      cmocka_unit_test(test_tu_watchdog__idle_outside_a_test_does_not_trip_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
