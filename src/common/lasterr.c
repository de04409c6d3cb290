/* The per-thread last error (graft_last_errmsg).  Calls that fail on a
 * handle keep their message there (graft_function_errmsg); calls that have
 * no handle to hold it (constructors, a NULL handle) leave it here, and
 * graft_function_call copies its function's message here too, so a thread
 * can always read its latest failure.  Thread-local, so threads that fail
 * at once never see each other's messages. */
#include <string.h>

#include "common/common.h"

static _Thread_local char last_msg[GRAFT__MSG_LEN];

GRAFT_API const char *graft_last_errmsg(void) { return last_msg; }

graft_status graft__fail(graft_status s, const char *fmt, ...) {
  /* Format apart first: an argument may be last_msg itself (a caller
   * adding context to the message of a call it made). */
  char buf[GRAFT__MSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  graft__vmsgf(buf, fmt, ap);
  va_end(ap);
  memcpy(last_msg, buf, sizeof buf);
  return s;
}

graft_status graft__fail_in(const char *api, graft_status s) {
  size_t n = strlen(api);
  if (strncmp(last_msg, api, n) != 0 || (last_msg[n] != ':' && last_msg[n] != ' '))
    graft__fail(s, "%s: %s", api, last_msg);
  return s;
}
