/* graft internal: Chrome trace output (GRAFT_TRACE), one track per worker,
 * a slice per node or tile, instant events for steals.  Opens in Perfetto
 * and chrome://tracing. */
#ifndef GRAFT_CHROME_H
#define GRAFT_CHROME_H

#include "common/common.h"

typedef struct graft__chrome graft__chrome;

typedef struct graft__trace_event {
  double ts_us, dur_us;   /* dur < 0: an instant steal event */
  uint32_t node;          /* graph node id */
  int32_t tile;
  int32_t worker;
  int32_t victim;         /* steals: the worker robbed */
} graft__trace_event;

/* One worker's events of one call (GRAFT_TRACE): add with
 * graft__trace_add, hand to graft__chrome_write, clear n for the next
 * call; free ev with graft__free. */
typedef struct graft__trace_buf {
  graft__trace_event *ev;
  int64_t n, cap;
} graft__trace_buf;

/* Append e; drops it when out of memory (a trace with holes beats failing
 * the call). */
static inline void graft__trace_add(graft__trace_buf *b, graft__trace_event e) {
  if (b->n == b->cap && graft__grow((void **)&b->ev, &b->cap, b->n + 1, sizeof *b->ev)) return;
  b->ev[b->n++] = e;
}

struct graft_runtime;
struct graft__plan;
/* Write one worker's events of a call of p to rt's trace (exec_seq.c). */
void graft__exec_trace_write(const struct graft_runtime *rt, const struct graft__plan *p,
                             const graft__trace_buf *b);

/* Open path for writing (or join the runtimes already writing it) as a new
 * process track named "graft runtime <pid>: <label>"; msg names the path
 * on failure (GRAFT_EIO). */
graft_status graft__chrome_open(const char *path, const char *label, graft__chrome **out, char *msg);
/* When the file was opened (graft__now_us): events' ts count from there. */
double graft__chrome_epoch(const graft__chrome *c);
/* Leave the file; the last to leave finishes the JSON array and closes it.
 * NULL is a no-op. */
void graft__chrome_close(graft__chrome *c);
/* Append one call's events; name_of gives each node's label.  Thread-safe. */
void graft__chrome_write(graft__chrome *c, const char *fn_name, const graft__trace_event *ev,
                         int64_t n, const char *(*name_of)(const void *ctx, uint32_t node),
                         const void *ctx);

#endif /* GRAFT_CHROME_H */
