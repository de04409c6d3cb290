/* Traces: the recording context, sticky errors, value accessors. */
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"

void graft__trace_begin(graft_trace *t, graft__graph *g) {
  memset(t, 0, sizeof *t);
  t->g = g;
  t->poison.g = g;
  t->poison.id = GRAFT__POISON_ID;
}

void graft__trace_end(graft_trace *t) {
  graft__ptrmap_free(&t->cur);
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
  if (s == GRAFT_OK) s = GRAFT_EINVAL;
  if (t->status == GRAFT_OK) {
    char buf[GRAFT__MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    graft__vmsgf(buf, fmt, ap);
    va_end(ap);
    graft__trace_failf(t, s, "%s (in trace '%s')", buf, t->g->name);
  }
  return t->status;
}

static const graft__node *node_of(const graft_value *v) {
  if (!v || v->id == GRAFT__POISON_ID) return NULL;
  return (const graft__node *)v;
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
