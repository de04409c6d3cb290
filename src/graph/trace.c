/* Traces: the recording context, sticky errors, value accessors. */
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"

/* The innermost trace running on this thread (NULL outside callbacks). */
static _Thread_local graft_trace *running;

void graft__trace_begin(graft_trace *t, graft__graph *g) {
  memset(t, 0, sizeof *t);
  t->g = g;
  t->outer = running;
  running = t;
}

void graft__trace_end(graft_trace *t) {
  graft__ptrmap_free(&t->cur);
  graft__deferred_cache_free(t->deferred);
  t->deferred = NULL;
  if (running == t) running = t->outer;
}

void graft__trace_failf(graft_trace *t, graft_status s, const char *fmt, ...) {
  if (t->status != GRAFT_OK) return;
  t->status = s;
  va_list ap;
  va_start(ap, fmt);
  graft__vmsgf(t->msg, fmt, ap);
  va_end(ap);
}

GRAFT_API graft_status graft_trace_status(const graft_trace *t) {
  return t ? t->status : GRAFT_EINVAL;
}

GRAFT_API const char *graft_trace_errmsg(const graft_trace *t) { return t ? t->msg : ""; }

GRAFT_API graft_status graft_trace_fail(graft_trace *t, graft_status s, const char *fmt, ...) {
  if (!t) return GRAFT_EINVAL;
  if (t->status == GRAFT_OK) {
    char buf[GRAFT__MSG_LEN] = "";
    if (fmt) {
      va_list ap;
      va_start(ap, fmt);
      graft__vmsgf(buf, fmt, ap);
      va_end(ap);
    }
    /* Calls return only documented statuses: any other number (0
     * included: a failure was asked for) becomes one, kept in the text. */
    if (graft__status_is_error(s))
      graft__trace_failf(t, s, "%s (in trace '%s')", buf, t->g->name);
    else
      graft__trace_failf(t, GRAFT__STATUS_FOREIGN,
                         "%s (in trace '%s'; graft_trace_fail was given %d, which is not a "
                         "graft_status error code: reported as %s)",
                         buf, t->g->name, (int)s, graft_status_name(GRAFT__STATUS_FOREIGN));
  }
  return t->status;
}

/* v's node when v is a value of a trace running on this thread, else NULL
 * (poison, NULL, or a handle whose trace ended: never read). */
static const graft__node *node_of(const graft_value *v) {
  for (const graft_trace *t = running; t; t = t->outer) {
    graft__node *n;
    if (graft__trace_value(t, v, &n) == GRAFT__VALUE_NODE) return n;
  }
  return NULL;
}

GRAFT_API int graft_value_is_poison(const graft_value *v) { return node_of(v) == NULL; }

GRAFT_API graft_dtype graft_value_dtype(const graft_value *v) {
  const graft__node *n = node_of(v);
  return n ? (graft_dtype)n->dtype : GRAFT_F32;
}

GRAFT_API int graft_value_rank(const graft_value *v) {
  const graft__node *n = node_of(v);
  return n ? n->rank : 0;
}

GRAFT_API const int64_t *graft_value_shape(const graft_value *v) {
  const graft__node *n = node_of(v);
  return n && n->rank ? n->shape : NULL;
}
