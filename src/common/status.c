#include "common/common.h"

GRAFT_API const char *graft_status_str(graft_status s) {
  switch (s) {
#define X(name, num, msg) \
  case GRAFT_##name:      \
    return msg;
    GRAFT_STATUS_MAP(X)
#undef X
  }
  return "unknown status";
}

GRAFT_API const char *graft_status_name(graft_status s) {
  switch (s) {
#define X(name, num, msg) \
  case GRAFT_##name:      \
    return "GRAFT_" #name;
    GRAFT_STATUS_MAP(X)
#undef X
  }
  return "GRAFT_UNKNOWN";
}

int graft__status_is_error(int s) {
  switch (s) {
#define X(name, num, msg) \
  case GRAFT_##name:      \
    return s != GRAFT_OK;
    GRAFT_STATUS_MAP(X)
#undef X
  }
  return 0;
}
