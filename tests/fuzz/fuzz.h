/* What every fuzz target provides, and how a harness reports a finding.
 *
 * A target is one file set listed in tests/fuzz/meson.build.  It defines
 * libFuzzer's entry points and two hooks for replay.c, the plain driver
 * that replays a corpus in every build (no libFuzzer needed):
 *   fz_target_seeds(dir)  writes the target's generated seed inputs;
 *   fz_target_check()     after a replay, checks what the corpus covered
 *                         (0: enough; else prints what is missing). */
#ifndef GRAFT_FUZZ_H
#define GRAFT_FUZZ_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int fz_target_seeds(const char *dir);
int fz_target_check(void);

/* A finding: print it and abort, which libFuzzer and the replay test both
 * report as a crash of the current input. */
__attribute__((noreturn, format(printf, 1, 2))) static inline void fz_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("graft fuzz: FINDING: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

/* What fz_target_check usually does: 0 when the replayed corpus reached
 * every one of the n kinds of input (reached[i] set), else prints the
 * names of those it missed and returns 1. */
static inline int fz_check_reached(int n, const int *reached, const char *const *names) {
  int missing = 0;
  for (int i = 0; i < n; i++)
    if (!reached[i]) {
      fprintf(stderr, "corpus: no input reaches %s\n", names[i]);
      missing++;
    }
  return missing != 0;
}

/* A generated seed input being built (the *_seeds.c files): fz_put
 * appends a byte, dropping what would not fit. */
typedef struct fz_seed {
  uint8_t b[1024];
  size_t n;
} fz_seed;

static inline void fz_put(fz_seed *s, unsigned v) {
  if (s->n < sizeof s->b) s->b[s->n++] = (uint8_t)v;
}

/* Write the n bytes of a generated seed input to dir/seed-<name>: 0, or -1
 * with the reason on stderr. */
static inline int fz_write_seed(const char *dir, const char *name, const void *bytes, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/seed-%s", dir, name);
  FILE *f = fopen(path, "wb");
  int ok = f && (n == 0 || fwrite(bytes, 1, n, f) == n);
  if (f && fclose(f)) ok = 0;
  if (!ok) perror(path);
  return ok ? 0 : -1;
}

#endif /* GRAFT_FUZZ_H */
