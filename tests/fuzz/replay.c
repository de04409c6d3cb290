/* Replay driver of a fuzz target: feeds files to LLVMFuzzerTestOneInput
 * without libFuzzer, so every build (gcc, ASan) replays the committed
 * corpus as an ordinary test, and reproduces a crash input.
 *
 *   fuzz_replay_<target> [--check] PATH...   replay each file, and each
 *                                            file of each directory
 *   fuzz_replay_<target> --seeds DIR         write the generated seeds
 *
 * --check then asks the target whether the inputs covered what it needs
 * (fz_target_check).  Replaying nothing is an error: a corpus that went
 * missing must not pass silently. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      uint8_t *more = realloc(buf, cap *= 2);
      if (!more) free(buf);
      buf = more;
    }
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "%s: out of memory\n", path);
    return -1;
  }
  printf("replay %s (%zu bytes)\n", path, n);
  fflush(stdout);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

static int skip_entry(const struct dirent *e) { return e->d_name[0] != '.'; }

/* Replays path (a file, or the files of a directory in name order);
 * returns the count, or -1. */
static int replay_path(const char *path) {
  struct stat st;
  if (stat(path, &st)) {
    perror(path);
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) return replay_file(path) ? -1 : 1;
  struct dirent **list;
  int n = scandir(path, &list, skip_entry, alphasort), count = 0;
  if (n < 0) {
    perror(path);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", path, list[i]->d_name);
    if (!stat(full, &st) && S_ISREG(st.st_mode)) {
      if (replay_file(full)) count = -1;
      else if (count >= 0) count++;
    }
    free(list[i]);
  }
  free(list);
  return count;
}

int main(int argc, char **argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  int check = 0, total = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seeds")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "usage: %s --seeds DIR\n", argv[0]);
        return 2;
      }
      return fz_target_seeds(argv[i + 1]) ? 1 : 0;
    }
    if (!strcmp(argv[i], "--check")) {
      check = 1;
      continue;
    }
    int n = replay_path(argv[i]);
    if (n < 0) return 1;
    total += n;
  }
  printf("replayed %d inputs\n", total);
  if (total == 0) {
    fprintf(stderr, "%s: no inputs to replay\n", argv[0]);
    return 1;
  }
  return check ? fz_target_check() : 0;
}
