/* bench_checkpoint: saving and loading a checkpoint of 100 M parameters
 * against plain file I/O of the same bytes, in the same run and folder.
 *
 * A module holds 25 f32 variables of 4 Mi elements (104,857,600
 * parameters, 400 MiB; --vars and --elems change that).  Each rep runs four
 * experiments, in an order rotated from rep to rep:
 *   save   graft_module_save: the header, a temporary file written from
 *          the variables, fsync, rename over the checkpoint, fsync of the
 *          folder
 *   write  the baseline: open(O_TRUNC) of another file in the folder, write
 *          of the checkpoint's size from one buffer, fsync, close
 *   load   graft_module_load of the checkpoint into a second module: map,
 *          validate, copy into its variables
 *   read   the baseline: open, read of the whole checkpoint into one
 *          buffer, close
 * ratio = save / write and load / read (medians; target <= 1.3).  Both
 * sides of a ratio meet the same file system and page cache: the files
 * were just written, so load and read copy from the page cache, and save
 * and write both replace a file of the same size (the rename frees the old
 * checkpoint's blocks, O_TRUNC frees the old baseline's).  A check row
 * confirms that the loaded module equals the saved one bitwise.
 *
 * Usage: bench_checkpoint [--json] [--reps N] [--dir DIR] [--vars N] [--elems N]
 *   --dir   the folder for the files (default $TMPDIR, else /tmp): a scratch
 *           folder is made in it and removed at the end
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, open_memstream (bench_common.h) */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BENCH_PROG "bench_checkpoint"
#include "bench_common.h"
#include "graft.h"

#define DEFAULT_REPS 5
#define MIN_REPS 1
#define MAX_REPS 1000
#define TARGET 1.3

typedef struct options {
  int json, reps;
  const char *dir;
  int vars;
  int64_t elems;
} options;

enum { E_SAVE, E_WRITE, E_LOAD, E_READ, N_EXP };
static const char *const NAMES[N_EXP] = {"save", "write", "load", "read"};

typedef struct ctx {
  graft_module *src, *dst;
  char dir[256], ckpt[320], plain[320];
  uint8_t *buf;   /* the baselines' buffer: the checkpoint's size */
  int64_t bytes;  /* the checkpoint's size */
} ctx;

/* ---- the experiments --------------------------------------------------------- */

static int fail_errno(const char *what, const char *path) {
  fprintf(stderr, BENCH_PROG ": %s %s: %s\n", what, path, strerror(errno));
  return -1;
}

static int plain_write(ctx *c) {
  int fd = open(c->plain, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail_errno("open", c->plain);
  for (int64_t at = 0; at < c->bytes;) {
    ssize_t w = write(fd, c->buf + at, (size_t)(c->bytes - at));
    if (w <= 0) {
      close(fd);
      return fail_errno("write", c->plain);
    }
    at += w;
  }
  if (fsync(fd)) {
    close(fd);
    return fail_errno("fsync", c->plain);
  }
  return close(fd) ? fail_errno("close", c->plain) : 0;
}

static int plain_read(ctx *c) {
  int fd = open(c->ckpt, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail_errno("open", c->ckpt);
  int64_t at = 0;
  while (at < c->bytes) {
    ssize_t r = read(fd, c->buf + at, (size_t)(c->bytes - at));
    if (r <= 0) break;
    at += r;
  }
  close(fd);
  if (at != c->bytes) return fail_errno("read", c->ckpt);
  return 0;
}

static int graft_failed(const char *what) {
  fprintf(stderr, BENCH_PROG ": %s failed: %s\n", what, graft_last_errmsg());
  return -1;
}

static int run_one(void *user, int e) {
  ctx *c = user;
  switch (e) {
  case E_SAVE: return graft_module_save(c->src, c->ckpt) ? graft_failed("graft_module_save") : 1;
  case E_WRITE: return plain_write(c) ? -1 : 1;
  case E_LOAD: return graft_module_load(c->dst, c->ckpt, 0) ? graft_failed("graft_module_load") : 1;
  default: return plain_read(c) ? -1 : 1;
  }
}

/* ---- setup ---------------------------------------------------------------------- */

static graft_module *model(const options *opt, int fill) {
  graft_module *m = NULL;
  if (graft_module_create(NULL, "model", &m)) {
    graft_failed("graft_module_create");
    return NULL;
  }
  float *data = fill ? bench_alloc_f32(opt->elems) : NULL;
  if (fill && !data) {
    bench_oom();
    graft_module_destroy(m);
    return NULL;
  }
  for (int i = 0; i < opt->vars; i++) {
    char name[32];
    snprintf(name, sizeof name, "w%d", i);
    if (data) bench_fill_f32(data, opt->elems, (uint64_t)i + 1, 1.0f);
    graft_variable *v;
    if (graft_variable_create(m, name, GRAFT_F32, 1, &opt->elems, data, GRAFT_VAR_TRAINABLE, &v)) {
      graft_failed("graft_variable_create");
      free(data);
      graft_module_destroy(m);
      return NULL;
    }
  }
  free(data);
  return m;
}

/* 1 when every variable of a equals b's bitwise. */
static int same_values(const graft_module *a, const graft_module *b, int n) {
  graft_variable *va[64], *vb[64];
  int64_t na, nb;
  if (n > 64 || graft_module_variables(a, 64, va, &na) || graft_module_variables(b, 64, vb, &nb) ||
      na != n || nb != n)
    return 0;
  for (int i = 0; i < n; i++) {
    const graft_tensor *x = graft_variable_value(va[i]), *y = graft_variable_value(vb[i]);
    size_t bytes = (size_t)graft_tensor_numel(x) * sizeof(float);
    if (graft_tensor_numel(y) != graft_tensor_numel(x) ||
        memcmp(graft_tensor_data(x), graft_tensor_data(y), bytes))
      return 0;
  }
  return 1;
}

/* ---- the command line and the output -------------------------------------------------- */

static void usage(FILE *to) {
  fprintf(to, "usage: bench_checkpoint [--json] [--reps N] [--dir DIR] [--vars N (1..64)] "
              "[--elems N]\n");
}

static int own_opt(void *user, const char *arg, const char *val) {
  options *o = user;
  if (!val) return 0;
  char *end;
  if (!strcmp(arg, "--dir")) {
    o->dir = val;
    return 2;
  }
  if (!strcmp(arg, "--vars")) {
    long n = strtol(val, &end, 10);
    if (*end || n < 1 || n > 64) {
      fprintf(stderr, BENCH_PROG ": --vars needs an integer in 1..64\n");
      return -1;
    }
    o->vars = (int)n;
    return 2;
  }
  if (!strcmp(arg, "--elems")) {
    long long n = strtoll(val, &end, 10);
    if (*end || n < 1 || n > ((int64_t)1 << 30)) {
      fprintf(stderr, BENCH_PROG ": --elems needs an integer in 1..2^30\n");
      return -1;
    }
    o->elems = n;
    return 2;
  }
  return 0;
}

static void print_header(const bench_info *info, const options *opt, const ctx *c) {
  char model[160], reps[64];
  snprintf(model, sizeof model, "%d f32 variables of %" PRId64 " elements (%" PRId64
           " parameters), checkpoint %" PRId64 " bytes",
           opt->vars, opt->elems, opt->vars * opt->elems, c->bytes);
  snprintf(reps, sizeof reps, "%d per experiment, order rotated", opt->reps);
  bench_kv extra[] = {{"model", model}, {"reps", reps}, {"folder", c->dir}};
  bench_header_print(info, "bench_checkpoint",
                     "checkpoint save (with fsync) and load vs plain write+fsync / read", extra, 3,
                     opt->json);
  if (opt->json) return;
  printf("# median_ms / min_ms over the reps; GiB_s = checkpoint bytes / median; ratio =\n"
         "# median / the baseline's median (save / write, load / read), target <= %.1f\n",
         TARGET);
  printf("# %-6s %12s %5s %10s %10s %7s %7s %8s %6s %3s\n", "name", "bytes", "reps", "median_ms",
         "min_ms", "GiB_s", "ratio", "baseline", "target", "ok");
}

static void print_row(const options *opt, int e, int64_t bytes, double med_us, double min_us,
                      double base_us) {
  int base = e == E_SAVE || e == E_LOAD;
  double ratio = base ? med_us / base_us : NAN, target = base ? TARGET : NAN;
  double gibs = (double)bytes / (1024.0 * 1024.0 * 1024.0) / (med_us * 1e-6);
  int ok = base && ratio <= TARGET;
  if (opt->json) {
    printf("{\"type\":\"row\",\"name\":\"%s\",\"bytes\":%" PRId64 ",\"reps\":%d", NAMES[e], bytes,
           opt->reps);
    bench_json_num("median_ms", med_us / 1e3, "%.3f");
    bench_json_num("min_ms", min_us / 1e3, "%.3f");
    bench_json_num("gib_per_s", gibs, "%.3f");
    bench_json_num("ratio", ratio, "%.4f");
    printf(",\"baseline\":%s%s%s", base ? "\"" : "", base ? NAMES[e + 1] : "null", base ? "\"" : "");
    bench_json_num("target", target, "%.2f");
    printf(",\"ok\":%s}\n", base ? (ok ? "true" : "false") : "null");
    return;
  }
  char ra[16], ta[16];
  printf("  %-6s %12" PRId64 " %5d %10.2f %10.2f %7.2f %7s %8s %6s %3s\n", NAMES[e], bytes, opt->reps,
         med_us / 1e3, min_us / 1e3, gibs, bench_fmt_num(ra, sizeof ra, "%.3f", ratio),
         base ? NAMES[e + 1] : "-", bench_fmt_num(ta, sizeof ta, "%.1f", target),
         base ? (ok ? "yes" : "no") : "-");
}

/* ---- main ---------------------------------------------------------------------------------- */

static int prepare(const options *opt, ctx *c) {
  const char *base = opt->dir ? opt->dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(c->dir, sizeof c->dir, "%s/bench_checkpoint_XXXXXX", base);
  if (!mkdtemp(c->dir)) return fail_errno("mkdtemp in", base);
  snprintf(c->ckpt, sizeof c->ckpt, "%s/model.safetensors", c->dir);
  snprintf(c->plain, sizeof c->plain, "%s/plain.bin", c->dir);
  c->src = model(opt, 1);
  c->dst = model(opt, 0);
  if (!c->src || !c->dst) return -1;
  /* The first save and load make the files the reps replace and read, and
   * touch every page of the variables and the buffer. */
  if (graft_module_save(c->src, c->ckpt)) return graft_failed("graft_module_save");
  struct stat sb;
  if (stat(c->ckpt, &sb)) return fail_errno("stat", c->ckpt);
  c->bytes = (int64_t)sb.st_size;
  c->buf = bench_alloc_aligned((size_t)c->bytes);
  if (!c->buf) return bench_oom();
  memset(c->buf, 0, (size_t)c->bytes);
  if (plain_read(c) || plain_write(c)) return -1;
  if (graft_module_load(c->dst, c->ckpt, 0)) return graft_failed("graft_module_load");
  return 0;
}

static void cleanup(ctx *c) {
  graft_module_destroy(c->src);
  graft_module_destroy(c->dst);
  free(c->buf);
  if (c->dir[0]) {
    unlink(c->ckpt);
    unlink(c->plain);
    rmdir(c->dir);
  }
}

int main(int argc, char **argv) {
  options opt = {.reps = DEFAULT_REPS, .vars = 25, .elems = (int64_t)4 << 20};
  if (bench_parse_args(argc, argv, &opt.json, &opt.reps, MIN_REPS, MAX_REPS, usage, own_opt, &opt))
    return 2;
  bench_info info;
  if (bench_info_collect(&info, 0)) return 1;
  ctx c = {0};
  int rc = prepare(&opt, &c);
  double *t = rc ? NULL : malloc(sizeof *t * N_EXP * (size_t)opt.reps);
  if (!rc && !t) rc = bench_oom();
  long cpus_before = bench_thread_cpus();
  if (!rc) {
    print_header(&info, &opt, &c);
    fflush(stdout);
    rc = bench_timed_reps(N_EXP, opt.reps, t, run_one, NULL, &c);
  }
  if (!rc) {
    double med[N_EXP], min[N_EXP];
    for (int e = 0; e < N_EXP; e++) med[e] = bench_median_min(t + e * opt.reps, opt.reps, &min[e]);
    for (int e = 0; e < N_EXP; e++)
      print_row(&opt, e, c.bytes, med[e], min[e], e + 1 < N_EXP ? med[e + 1] : NAN);
    int same = same_values(c.src, c.dst, opt.vars);
    bench_print_check(opt.json, "round_trip", same,
                      same ? "the loaded module equals the saved one bitwise"
                           : "the loaded module differs from the saved one");
    if (!same) rc = -1;
    bench_footer_print(cpus_before, bench_thread_cpus(), opt.json);
  }
  free(t);
  cleanup(&c);
  bench_info_free(&info);
  return rc ? 1 : 0;
}
