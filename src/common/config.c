/* The one place where GRAFT_* variables and runtime options are parsed.
 * Precedence: a field set in graft_runtime_opts > the environment > defaults
 * resolved later from OpenMP and hwloc. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"

static const char *const sched_names[] = {"ws", "omp", "seq"};
static const char *const level_names[] = {"auto", "none", "package", "numa", "l3", "l2", "core"};

const char *graft__sched_name(graft__sched s) { return sched_names[s]; }
const char *graft__level_name(graft__level l) { return level_names[l]; }

/* The value of one setting and where it came from, for messages. */
typedef struct setting {
  const char *value;
  const char *origin; /* "GRAFT_SCHED" or "graft_runtime_opts.sched" */
} setting;

static setting pick(const char *opt, const char *opt_name, const char *env_name) {
  setting s = {NULL, NULL};
  if (opt) {
    s.value = opt;
    s.origin = opt_name;
  } else {
    const char *e = getenv(env_name);
    if (e) {
      s.value = e;
      s.origin = env_name;
    }
  }
  return s;
}

static graft_status bad(char *msg, setting s, const char *accepted) {
  graft__msgf(msg, "%s: invalid value '%s' (accepted: %s)", s.origin, s.value, accepted);
  return GRAFT_EINVAL;
}

static int parse_enum(const char *v, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(v, names[i]) == 0) return i;
  return -1;
}

/* Strict positive integer: digits only, no sign, no trailing junk. */
static int parse_pos(const char *v, int64_t max, int64_t *out) {
  if (!*v) return -1;
  for (const char *p = v; *p; p++)
    if (*p < '0' || *p > '9') return -1;
  errno = 0;
  char *end;
  long long x = strtoll(v, &end, 10);
  if (errno || *end || x <= 0 || x > max) return -1;
  *out = x;
  return 0;
}

/* A count: the opts field (0 = not set there) over the variable env_name,
 * accepted in 1..max; *out is left alone when neither sets it. */
static graft_status parse_count(int64_t opt, const char *opt_name, const char *env_name,
                                int64_t max, int64_t *out, char *msg) {
  if (opt) {
    if (opt < 0 || opt > max) {
      graft__msgf(msg, "%s: invalid value %lld (accepted: an integer in 1..%lld; 0 = not set)",
                  opt_name, (long long)opt, (long long)max);
      return GRAFT_EINVAL;
    }
    *out = opt;
    return GRAFT_OK;
  }
  setting s = pick(NULL, NULL, env_name);
  if (!s.value || !parse_pos(s.value, max, out)) return GRAFT_OK;
  char accepted[64];
  snprintf(accepted, sizeof accepted, "an integer in 1..%lld", (long long)max);
  return bad(msg, s, accepted);
}

static graft_status parse_threads(const graft_runtime_opts *o, graft__config *c, char *msg) {
  int64_t n = 0;
  graft_status st = parse_count(o ? o->num_threads : 0, "graft_runtime_opts.num_threads",
                                "GRAFT_NUM_THREADS", GRAFT__MAX_THREADS, &n, msg);
  c->num_threads = (int)n;
  return st;
}

static graft_status parse_grain(const graft_runtime_opts *o, graft__config *c, char *msg) {
  c->grain = GRAFT__DEFAULT_GRAIN;
  return parse_count(o ? o->grain : 0, "graft_runtime_opts.grain", "GRAFT_GRAIN",
                     GRAFT__MAX_GRAIN, &c->grain, msg);
}

static graft_status parse_mpi_timeout(const graft_runtime_opts *o, graft__config *c, char *msg) {
  c->mpi_timeout = GRAFT__MPI_TIMEOUT;
  return parse_count(o ? o->mpi_timeout : 0, "graft_runtime_opts.mpi_timeout", "GRAFT_MPI_TIMEOUT",
                     GRAFT__MAX_MPI_TIMEOUT, &c->mpi_timeout, msg);
}

static graft_status parse_bind(const graft_runtime_opts *o, graft__config *c, char *msg) {
  c->bind = -1;
  if (o && o->bind) {
    if (o->bind != 1 && o->bind != -1) {
      graft__msgf(msg, "graft_runtime_opts.bind: invalid value %d (accepted: 0 unset, 1 true, -1 false)",
                  o->bind);
      return GRAFT_EINVAL;
    }
    c->bind = o->bind == 1;
    return GRAFT_OK;
  }
  setting s = pick(NULL, NULL, "GRAFT_BIND");
  if (!s.value) return GRAFT_OK;
  static const char *const names[] = {"false", "true"};
  int v = parse_enum(s.value, names, 2);
  if (v < 0) return bad(msg, s, "true, false");
  c->bind = v;
  return GRAFT_OK;
}

/* GRAFT_MEMORY: "parallel" or "lanes:N". */
static graft_status parse_memory(const graft_runtime_opts *o, graft__config *c, char *msg) {
  setting s = pick(o ? o->memory : NULL, "graft_runtime_opts.memory", "GRAFT_MEMORY");
  c->lanes = 0;
  if (!s.value || strcmp(s.value, "parallel") == 0) return GRAFT_OK;
  int64_t n;
  if (strncmp(s.value, "lanes:", 6) || parse_pos(s.value + 6, GRAFT__MAX_LANES, &n)) {
    char accepted[64];
    snprintf(accepted, sizeof accepted, "parallel, lanes:N with N in 1..%d", GRAFT__MAX_LANES);
    return bad(msg, s, accepted);
  }
  c->lanes = (int)n;
  return GRAFT_OK;
}

/* Past the first c in p, or NULL when there is none. */
static const char *past(const char *p, int c) {
  p = strchr(p, c);
  return p ? p + 1 : NULL;
}

int graft__synthetic_size(const char *desc, int64_t *objects, int64_t *pus, int64_t *max_arity) {
  int64_t width = 1, total = 0, widest = 0;
  const char *p = desc;
  if (*p == '(' && !(p = past(p, ')'))) return -1; /* root attributes */
  for (;;) {
    while (*p == ' ' || *p == '\n') p++;
    if (!*p) break;
    if (*p == '[') { /* a NUMA node attached to each object of the level before */
      if (!(p = past(p, ']'))) return -1;
      total = graft__size_add_sat(total, width);
      continue;
    }
    /* A type name: hwloc reads the arity after the next ':', wherever. */
    if ((*p < '0' || *p > '9') && !(p = past(p, ':'))) return -1;
    char *end;
    errno = 0;
    unsigned long long a = strtoull(p, &end, 0);
    if (end == p) return -1;
    int64_t arity = errno == ERANGE || a > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)a;
    p = end;
    if (*p == '(' && !(p = past(p, ')'))) return -1; /* the level's attributes */
    widest = GRAFT__MAX(widest, arity);
    width = graft__size_mul_sat(width, arity);
    total = graft__size_add_sat(total, width);
  }
  *objects = total;
  *pus = width;
  *max_arity = widest;
  return 0;
}

/* Refuse a synthetic topology above the limits before hwloc spends
 * minutes building it. */
static graft_status check_topology_size(setting s, char *msg) {
  int64_t objects, pus, arity;
  if (strncmp(s.value, "xml:", 4) == 0 || graft__synthetic_size(s.value, &objects, &pus, &arity))
    return GRAFT_OK; /* a file, or text hwloc refuses at once */
  if (objects <= GRAFT__SYNTH_MAX_OBJECTS && arity <= GRAFT__SYNTH_MAX_ARITY) return GRAFT_OK;
  graft__msgf(msg,
              "%s: the synthetic topology '%s' has %lld objects (%lld PUs) and up to %lld "
              "children per object (accepted: at most %d objects in all, NUMA nodes included, "
              "and at most %d children per object)",
              s.origin, s.value, (long long)objects, (long long)pus, (long long)arity,
              GRAFT__SYNTH_MAX_OBJECTS, GRAFT__SYNTH_MAX_ARITY);
  return GRAFT_EINVAL;
}

static graft_status copy_str(const char *v, char **dst) {
  if (!v) return GRAFT_OK;
  *dst = graft__strdup(v);
  return *dst ? GRAFT_OK : GRAFT_ENOMEM;
}

graft_status graft__config_parse(const graft_runtime_opts *o, graft__config *c, char *msg) {
  memset(c, 0, sizeof *c);
  msg[0] = '\0';
  graft_status st;
  if ((st = parse_threads(o, c, msg)) || (st = parse_grain(o, c, msg)) ||
      (st = parse_bind(o, c, msg)) || (st = parse_memory(o, c, msg)) ||
      (st = parse_mpi_timeout(o, c, msg)))
    return st;

  setting s = pick(o ? o->sched : NULL, "graft_runtime_opts.sched", "GRAFT_SCHED");
  c->sched = GRAFT__SCHED_WS;
  if (s.value) {
    int v = parse_enum(s.value, sched_names, (int)GRAFT__COUNT(sched_names));
    if (v < 0) return bad(msg, s, "ws, omp, seq");
    c->sched = (graft__sched)v;
  }

  s = pick(o ? o->partition : NULL, "graft_runtime_opts.partition", "GRAFT_PARTITION");
  c->partition = GRAFT__LEVEL_AUTO;
  if (s.value) {
    int v = parse_enum(s.value, level_names, (int)GRAFT__COUNT(level_names));
    if (v < 0) return bad(msg, s, "auto, none, package, numa, l3, l2, core");
    c->partition = (graft__level)v;
  }

  s = pick(o ? o->fusion : NULL, "graft_runtime_opts.fusion", "GRAFT_FUSION");
  c->fusion = GRAFT__FUSION_COMPILED;
  if (s.value) {
    /* in graft__fusion's order */
    static const char *const names[] = {"off", "on", "interp"};
    int v = parse_enum(s.value, names, 3);
    if (v < 0) return bad(msg, s, "on, off, interp");
    c->fusion = v;
  }

  s = pick(NULL, NULL, "GRAFT_DISPLAY_ENV");
  if (s.value) {
    static const char *const names[] = {"false", "true", "verbose"};
    int v = parse_enum(s.value, names, 3);
    if (v < 0) return bad(msg, s, "true, verbose, false");
    c->display_env = v;
  }

  s = pick(o ? o->topology : NULL, "graft_runtime_opts.topology", "GRAFT_TOPOLOGY");
  if (s.value && !*s.value) return bad(msg, s, "an hwloc synthetic description or xml:PATH");
  if (s.value && (st = check_topology_size(s, msg))) return st;
  if ((st = copy_str(s.value, &c->topology))) goto fail;
  c->topology_origin = s.origin;

  s = pick(o ? o->trace_path : NULL, "graft_runtime_opts.trace_path", "GRAFT_TRACE");
  if (s.value && !*s.value) {
    graft__config_free(c);
    return bad(msg, s, "a file path");
  }
  if ((st = copy_str(s.value, &c->trace_path))) goto fail;
  c->trace_origin = s.origin;
  return GRAFT_OK;

fail:
  graft__msgf(msg, "out of memory while reading the configuration");
  graft__config_free(c);
  return st;
}

void graft__config_free(graft__config *c) {
  graft__free(c->topology);
  graft__free(c->trace_path);
  c->topology = c->trace_path = NULL;
}
