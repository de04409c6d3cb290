/* graft internal: the resolved runtime configuration, parsed in one place
 * (config.c) from graft_runtime_opts and the GRAFT_* environment. */
#ifndef GRAFT_CONFIG_H
#define GRAFT_CONFIG_H

#include "common/common.h"
#include "graft/runtime.h"

typedef enum graft__sched { GRAFT__SCHED_WS, GRAFT__SCHED_OMP, GRAFT__SCHED_SEQ } graft__sched;

typedef enum graft__level {
  GRAFT__LEVEL_AUTO, GRAFT__LEVEL_NONE, GRAFT__LEVEL_PACKAGE, GRAFT__LEVEL_NUMA,
  GRAFT__LEVEL_L3, GRAFT__LEVEL_L2, GRAFT__LEVEL_CORE
} graft__level;

#define GRAFT__DEFAULT_GRAIN 32768

typedef struct graft__config {
  int num_threads;      /* 0: not set by opts or env (OpenMP / hwloc decide) */
  graft__sched sched;
  graft__level partition;
  char *topology;       /* NULL: this machine */
  const char *topology_origin; /* "GRAFT_TOPOLOGY" or "graft_runtime_opts.topology" (static) */
  char *trace_path;     /* NULL: off */
  int bind;             /* 1 true, 0 false, -1 default (true on real topologies) */
  int64_t grain;
  int lanes;            /* GRAFT_MEMORY=lanes:N; 0 = parallel (no added edges) */
  int display_env;      /* 0 off, 1 true, 2 verbose */
} graft__config;

/* Parse opts (may be NULL) over the environment.  On failure returns
 * GRAFT_EINVAL or GRAFT_ENOMEM with msg naming the variable and the accepted
 * values.  Free with graft__config_free. */
graft_status graft__config_parse(const graft_runtime_opts *opts, graft__config *cfg,
                                 char *msg);
void graft__config_free(graft__config *cfg);

const char *graft__sched_name(graft__sched s);
const char *graft__level_name(graft__level l);

#endif /* GRAFT_CONFIG_H */
