/* Chrome trace event writer (JSON array format). */
#include <pthread.h>
#include <stdio.h>

#include "sched/chrome.h"

struct graft__chrome {
  FILE *f;
  pthread_mutex_t lock;
  int first;
};

graft_status graft__chrome_open(const char *path, graft__chrome **out, char *msg) {
  *out = NULL;
  graft__chrome *c = graft__calloc(1, sizeof *c);
  if (!c) return GRAFT_ENOMEM;
  c->f = fopen(path, "w");
  if (!c->f) {
    graft__msgf(msg, "GRAFT_TRACE: cannot open '%s' for writing", path);
    graft__free(c);
    return GRAFT_EIO;
  }
  pthread_mutex_init(&c->lock, NULL);
  c->first = 1;
  fputs("[\n", c->f);
  *out = c;
  return GRAFT_OK;
}

void graft__chrome_close(graft__chrome *c) {
  if (!c) return;
  fputs("\n]\n", c->f);
  fclose(c->f);
  pthread_mutex_destroy(&c->lock);
  graft__free(c);
}

void graft__chrome_write(graft__chrome *c, const char *fn_name, const graft__trace_event *ev,
                         int64_t n, const char *(*name_of)(const void *ctx, uint32_t node),
                         const void *ctx) {
  pthread_mutex_lock(&c->lock);
  for (int64_t i = 0; i < n; i++) {
    const graft__trace_event *e = &ev[i];
    fputs(c->first ? "" : ",\n", c->f);
    c->first = 0;
    if (e->dur_us < 0)
      fprintf(c->f,
              "{\"name\":\"steal\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,\"pid\":1,\"tid\":%d,"
              "\"args\":{\"victim\":%d,\"node\":%u,\"tile\":%d}}",
              e->ts_us, e->worker, e->victim, e->node, e->tile);
    else
      fprintf(c->f,
              "{\"name\":\"%s #%u\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
              "\"pid\":1,\"tid\":%d,\"args\":{\"tile\":%d}}",
              name_of(ctx, e->node), e->node, fn_name, e->ts_us, e->dur_us, e->worker, e->tile);
  }
  fflush(c->f);
  pthread_mutex_unlock(&c->lock);
}
