/* graft internal: the resolved runtime configuration, parsed in one place
 * (config.c) from graft_runtime_opts and the GRAFT_* environment. */
#ifndef GRAFT_CONFIG_H
#define GRAFT_CONFIG_H

#include "common/common.h"
#include "graft/runtime.h"

typedef enum graft__sched { GRAFT__SCHED_WS, GRAFT__SCHED_OMP, GRAFT__SCHED_SEQ } graft__sched;
/* GRAFT_FUSION: off; on (groups compiled to machine code where they can
 * be, the interpreter elsewhere); interp (every group interpreted). */
typedef enum graft__fusion {
  GRAFT__FUSION_OFF,
  GRAFT__FUSION_COMPILED,
  GRAFT__FUSION_INTERP
} graft__fusion;

typedef enum graft__level {
  GRAFT__LEVEL_AUTO, GRAFT__LEVEL_NONE, GRAFT__LEVEL_PACKAGE, GRAFT__LEVEL_NUMA,
  GRAFT__LEVEL_L3, GRAFT__LEVEL_L2, GRAFT__LEVEL_CORE
} graft__level;

#define GRAFT__DEFAULT_GRAIN 32768
/* Seconds a call waits for the other ranks of a communicator (graft/mpi.h)
 * by default, and at most. */
#define GRAFT__MPI_TIMEOUT 600
#define GRAFT__MAX_MPI_TIMEOUT 86400

/* Accepted ranges of the numeric settings (1..max).  A grain of a value's
 * whole element count already means "no tiling"; no value has more than
 * GRAFT__MAX_VALUE_BYTES bytes, so a larger grain would change nothing. */
#define GRAFT__MAX_THREADS 4096
#define GRAFT__MAX_GRAIN GRAFT__MAX_VALUE_BYTES
#define GRAFT__MAX_LANES 4096

/* Limits on a synthetic topology (GRAFT_TOPOLOGY, opts.topology): objects
 * below the root in all (every level's width summed, NUMA nodes attached
 * with "[numa]" included) and children per object (a level's arity).
 * hwloc's time to build a synthetic topology grows much faster than its
 * size ("pu:8192" takes 40 s, "pack:1000 pu:100" over a minute); within
 * these limits it takes well under a second, and real machines fit. */
#define GRAFT__SYNTH_MAX_OBJECTS 8192
#define GRAFT__SYNTH_MAX_ARITY 256

typedef struct graft__config {
  int num_threads;      /* 0: not set by opts or env (OpenMP / hwloc decide) */
  graft__sched sched;
  graft__level partition;
  char *topology;       /* NULL: this machine */
  const char *topology_origin; /* "GRAFT_TOPOLOGY" or "graft_runtime_opts.topology" (static) */
  char *trace_path;     /* NULL: off */
  const char *trace_origin; /* "GRAFT_TRACE" or "graft_runtime_opts.trace_path" (static) */
  int bind;             /* 1 true, 0 false, -1 default (true on real topologies) */
  int64_t grain;
  int lanes;            /* GRAFT_MEMORY=lanes:N; 0 = parallel (no added edges) */
  int fusion;           /* GRAFT_FUSION: graft__fusion */
  int64_t mpi_timeout;  /* GRAFT_MPI_TIMEOUT: seconds (default GRAFT__MPI_TIMEOUT) */
  int display_env;      /* 0 off, 1 true, 2 verbose */
} graft__config;

/* Parse opts (may be NULL) over the environment.  On failure returns
 * GRAFT_EINVAL or GRAFT_ENOMEM with msg naming where the value came from
 * (the opts field or the variable) and the accepted values.  Free with
 * graft__config_free. */
graft_status graft__config_parse(const graft_runtime_opts *opts, graft__config *cfg,
                                 char *msg);
void graft__config_free(graft__config *cfg);

/* Measure an hwloc synthetic description the way hwloc reads it: optional
 * root attributes "(...)", then levels "[type:]arity[(attributes)]"
 * separated by spaces or newlines (arity as strtoul base 0 reads it), and
 * "[numa]" / "[numa(attributes)]" for NUMA nodes attached to every object
 * of the level before.  Returns 0 with the objects below the root, the PUs
 * (the last level's width) and the largest arity, saturating at
 * INT64_MAX; -1 when desc is not of that form (hwloc refuses it then,
 * before building anything). */
int graft__synthetic_size(const char *desc, int64_t *objects, int64_t *pus, int64_t *max_arity);

const char *graft__sched_name(graft__sched s);
const char *graft__level_name(graft__level l);

#endif /* GRAFT_CONFIG_H */
