/* Messages and small shape utilities. */
#include <stdio.h>
#include <time.h>

#include "common/common.h"
#include "graft/trace.h"

void graft__vmsgf(char *buf, const char *fmt, va_list ap) {
  vsnprintf(buf, GRAFT__MSG_LEN, fmt, ap);
}

void graft__msgf(char *buf, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  graft__vmsgf(buf, fmt, ap);
  va_end(ap);
}

void graft__shape_str(char *buf, size_t len, int rank, const int64_t *dims) {
  size_t at = 0;
  if (len == 0) return;
  buf[0] = '\0';
  at += (size_t)snprintf(buf + at, len - at, "[");
  for (int i = 0; i < rank && at < len; i++) {
    const char *sep = i ? "," : "";
    if (GRAFT_DIM_IS_SYM(dims[i]))
      at += (size_t)snprintf(buf + at, len - at, "%ss%lld", sep, (long long)(-2 - dims[i]));
    else
      at += (size_t)snprintf(buf + at, len - at, "%s%lld", sep, (long long)dims[i]);
  }
  if (at < len) snprintf(buf + at, len - at, "]");
}

double graft__now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}
