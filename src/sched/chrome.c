/* Chrome trace event writer (JSON array format).
 *
 * Runtimes that trace to the same file at the same time share it: the file
 * (known by device and inode, not by spelling) is opened, and emptied, by
 * the first of them and finished by the last to close.  Each runtime is a
 * process track of its own (pid 1, 2, ... in opening order, named by a
 * metadata event), its workers the threads in it; times count from the
 * file's opening, so successive calls follow one another. */
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>

#include "sched/chrome.h"

typedef struct trace_file {
  struct trace_file *next;
  dev_t dev;
  ino_t ino;
  FILE *f;
  int refs, pids, first;
  double t0;
  pthread_mutex_t lock; /* the writes */
} trace_file;

struct graft__chrome {
  trace_file *file;
  int pid;
};

static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static trace_file *files; /* open trace files (files_lock) */

/* The open file path names, or NULL. */
static trace_file *find_open(const char *path) {
  struct stat sb;
  if (stat(path, &sb)) return NULL;
  for (trace_file *t = files; t; t = t->next)
    if (t->dev == sb.st_dev && t->ino == sb.st_ino) return t;
  return NULL;
}

/* Start an object (after a comma unless it is the first); t->lock held. */
static void begin(trace_file *t) {
  fputs(t->first ? "" : ",\n", t->f);
  t->first = 0;
}

graft_status graft__chrome_open(const char *path, const char *label, graft__chrome **out, char *msg) {
  *out = NULL;
  graft__chrome *c = graft__calloc(1, sizeof *c);
  if (!c) return GRAFT_ENOMEM;
  graft_status st = GRAFT_OK;
  pthread_mutex_lock(&files_lock);
  trace_file *t = find_open(path);
  if (!t) {
    struct stat sb;
    t = graft__calloc(1, sizeof *t);
    FILE *f = t ? fopen(path, "w") : NULL;
    if (!t || !f || fstat(fileno(f), &sb)) {
      st = t ? GRAFT_EIO : GRAFT_ENOMEM;
      if (t) graft__msgf(msg, "cannot open '%s' for writing", path); /* the caller names the source */
      if (f) fclose(f);
      graft__free(t);
      graft__free(c);
      goto out;
    }
    t->f = f;
    t->dev = sb.st_dev;
    t->ino = sb.st_ino;
    t->first = 1;
    t->t0 = graft__now_us();
    pthread_mutex_init(&t->lock, NULL);
    fputs("[\n", f);
    t->next = files;
    files = t;
  }
  t->refs++;
  c->file = t;
  c->pid = ++t->pids;
  pthread_mutex_lock(&t->lock);
  begin(t);
  fprintf(t->f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"graft runtime %d: %s\"}}",
          c->pid, c->pid, label);
  fflush(t->f);
  pthread_mutex_unlock(&t->lock);
  *out = c;
out:
  pthread_mutex_unlock(&files_lock);
  return st;
}

double graft__chrome_epoch(const graft__chrome *c) { return c->file->t0; }

void graft__chrome_close(graft__chrome *c) {
  if (!c) return;
  trace_file *t = c->file;
  pthread_mutex_lock(&files_lock);
  if (--t->refs == 0) {
    for (trace_file **at = &files; *at; at = &(*at)->next)
      if (*at == t) {
        *at = t->next;
        break;
      }
    fputs("\n]\n", t->f);
    fclose(t->f);
    pthread_mutex_destroy(&t->lock);
    graft__free(t);
  }
  pthread_mutex_unlock(&files_lock);
  graft__free(c);
}

void graft__chrome_write(graft__chrome *c, const char *fn_name, const graft__trace_event *ev,
                         int64_t n, const char *(*name_of)(const void *ctx, uint32_t node),
                         const void *ctx) {
  trace_file *t = c->file;
  pthread_mutex_lock(&t->lock);
  for (int64_t i = 0; i < n; i++) {
    const graft__trace_event *e = &ev[i];
    begin(t);
    if (e->dur_us < 0)
      fprintf(t->f,
              "{\"name\":\"steal\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,\"pid\":%d,\"tid\":%d,"
              "\"args\":{\"victim\":%d,\"node\":%u,\"tile\":%d}}",
              e->ts_us, c->pid, e->worker, e->victim, e->node, e->tile);
    else
      fprintf(t->f,
              "{\"name\":\"%s #%u\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
              "\"pid\":%d,\"tid\":%d,\"args\":{\"tile\":%d}}",
              name_of(ctx, e->node), e->node, fn_name, e->ts_us, e->dur_us, c->pid, e->worker, e->tile);
  }
  fflush(t->f);
  pthread_mutex_unlock(&t->lock);
}
