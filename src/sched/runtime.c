/* The runtime: resolved configuration, topology, thread count. */
#define _GNU_SOURCE /* sched_getcpu */
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_int.h"
#include "sched/chrome.h"
#include "sched/sched.h"

GRAFT_API void graft_runtime_opts_init(graft_runtime_opts *opts) {
  if (opts) memset(opts, 0, sizeof *opts);
}

static int resolved_bind(const graft_runtime *rt) {
  if (!graft__topology_is_this_system(rt->topo)) return 0; /* nothing real to bind to */
  return rt->cfg.bind != 0;
}

static const char *blas_name(void) {
  switch (graft__blas_variant()) {
  case 0: return "openblas-sequential";
  case 1: return "openblas-pthreads";
  case 2: return "openblas-openmp";
  default: return "cblas";
  }
}

static const char *fusion_name(int f) {
  if (f == GRAFT__FUSION_OFF) return "off";
  if (f == GRAFT__FUSION_INTERP) return "interp";
  return graft__fused_can_compile() ? "on" : "on(interp)";
}

GRAFT_API int graft_runtime_describe(const graft_runtime *rt, char *buf, size_t len) {
  if (!buf) len = 0; /* measure only */
  if (!rt) {
    graft__fail(GRAFT_EINVAL, "graft_runtime_describe: rt is NULL (expected a runtime)");
    return snprintf(buf, len, "(null runtime)");
  }
  const char *core = graft__blas_core();
  return snprintf(buf, len,
                  "threads=%d sched=%s partition=%s(%s) domains=%d pus=%d topology=%s bind=%s "
                  "grain=%lld memory=%s%.0d fusion=%s blas=%s%s%s%s trace=%s",
                  rt->num_threads, graft__sched_name(rt->cfg.sched),
                  graft__level_name(rt->cfg.partition), graft__level_name(rt->level),
                  rt->n_domains, graft__topology_pus(rt->topo),
                  graft__topology_source(rt->topo), resolved_bind(rt) ? "true" : "false",
                  (long long)rt->cfg.grain, rt->cfg.lanes ? "lanes:" : "parallel",
                  rt->cfg.lanes, fusion_name(rt->cfg.fusion), blas_name(), core ? "(" : "", core ? core : "", core ? ")" : "",
                  rt->cfg.trace_path ? rt->cfg.trace_path : "off");
}

int graft__runtime_parts(const graft_runtime *rt) {
  return rt->n_domains < rt->num_threads ? rt->n_domains : rt->num_threads;
}

int graft__runtime_caller_pu(void) { return sched_getcpu(); }

/* Worker 0 is the calling thread: its binding belongs to the caller (and
 * to OMP_PROC_BIND), so only the team's other threads are bound.  A team
 * of another size than the runtime's (an OpenMP thread limit) is not
 * bound. */
void graft__topology_bind_worker(const graft_runtime *rt, int w, int n, int caller_pu) {
  if (w == 0 || !rt->worker_pu || n != rt->num_threads) return;
  int pu = rt->worker_pu[w];
  if (pu == caller_pu) pu = rt->worker_pu[0];
  graft__topology_bind(rt->topo, pu);
}

GRAFT_API int graft_runtime_num_threads(const graft_runtime *rt) { return rt ? rt->num_threads : 0; }

static void display(const graft_runtime *rt) {
  char buf[512];
  graft_runtime_describe(rt, buf, sizeof buf);
  fprintf(stderr, "graft: %s\n", buf);
  /* (unless the user chose the kernels) */
  const char *chosen = getenv("OPENBLAS_CORETYPE");
  const char *hint = chosen && *chosen ? NULL : graft__blas_hint();
  if (hint)
    fprintf(stderr,
            "graft: note: OpenBLAS runs its %s kernels, older than this CPU: "
            "OPENBLAS_CORETYPE=%s (set before the program starts) selects faster ones\n",
            graft__blas_core(), hint);
  if (rt->cfg.display_env < 2) return;
  static const char *const vars[] = {"GRAFT_NUM_THREADS", "GRAFT_SCHED", "GRAFT_PARTITION",
                                     "GRAFT_TOPOLOGY", "GRAFT_BIND", "GRAFT_GRAIN", "GRAFT_MEMORY",
                                     "GRAFT_TRACE", "OMP_NUM_THREADS", "OMP_PROC_BIND",
                                     "OMP_PLACES", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE"};
  for (size_t i = 0; i < GRAFT__COUNT(vars); i++) {
    const char *v = getenv(vars[i]);
    fprintf(stderr, "graft:   %s=%s\n", vars[i], v ? v : "(unset)");
  }
}

/* The message of a failure, without the API call's name, goes to msg. */
static graft_status create(const graft_runtime_opts *opts, graft_runtime **out, char *msg) {
  char why[GRAFT__MSG_LEN];
  graft_status st = GRAFT_EINVAL;
  graft_runtime *rt = NULL;
  if (!out) {
    graft__msgf(msg, "out is NULL (expected a graft_runtime **)");
    goto done;
  }
  *out = NULL;
  rt = graft__calloc(1, sizeof *rt);
  if (rt) rt->refs = 1; /* the user's */
  if (!rt) {
    st = GRAFT_ENOMEM;
    graft__msgf(msg, "out of memory for the runtime");
    goto done;
  }
  st = graft__config_parse(opts, &rt->cfg, msg);
  if (!st) st = graft__topology_load(&rt->cfg, &rt->topo, msg);
  if (st) {
    graft__config_free(&rt->cfg);
    graft__free(rt);
    rt = NULL;
    goto done;
  }
  rt->num_threads = rt->cfg.num_threads;
  if (!rt->num_threads) rt->num_threads = omp_get_max_threads();
  if (rt->num_threads < 1) rt->num_threads = graft__topology_pus(rt->topo);
  if (rt->cfg.sched == GRAFT__SCHED_SEQ) rt->num_threads = 1;
  rt->level = rt->cfg.partition == GRAFT__LEVEL_AUTO ? graft__topology_auto_level(rt->topo)
                                                     : rt->cfg.partition;
  rt->n_domains = graft__topology_domains(rt->topo, rt->level);
  if (resolved_bind(rt) && rt->num_threads > 1) {
    rt->worker_pu = graft__malloc((size_t)rt->num_threads * sizeof *rt->worker_pu);
    if (!rt->worker_pu ||
        graft__topology_worker_pus(rt->topo, rt->level, graft__runtime_parts(rt),
                                   rt->num_threads, rt->worker_pu)) {
      st = GRAFT_ENOMEM;
      graft__msgf(msg, "out of memory for the workers' PU map");
      graft_runtime_destroy(rt);
      rt = NULL;
      goto done;
    }
  }
  char label[64];
  snprintf(label, sizeof label, "%s x%d", graft__sched_name(rt->cfg.sched), rt->num_threads);
  if (rt->cfg.trace_path && (st = graft__chrome_open(rt->cfg.trace_path, label, &rt->trace, why))) {
    if (st == GRAFT_ENOMEM)
      graft__msgf(msg, "out of memory opening the trace file");
    else /* the opts field or the variable the path came from */
      graft__msgf(msg, "%s: %s", rt->cfg.trace_origin, why);
    graft_runtime_destroy(rt);
    rt = NULL;
    goto done;
  }
  graft__blas_init();
  if (rt->cfg.display_env) display(rt);
  *out = rt;
done:
  return st;
}

GRAFT_API graft_status graft_runtime_create_ex(const graft_runtime_opts *opts, graft_runtime **out,
                                               char *errbuf, size_t errlen) {
  char msg[GRAFT__MSG_LEN] = "";
  graft_status st = create(opts, out, msg);
  if (st) graft__fail(st, "graft_runtime_create_ex: %s", msg);
  if (errbuf && errlen) snprintf(errbuf, errlen, "%s", st ? graft_last_errmsg() : "");
  return st;
}

GRAFT_API graft_status graft_runtime_create(const graft_runtime_opts *opts, graft_runtime **out) {
  char msg[GRAFT__MSG_LEN] = "";
  graft_status st = create(opts, out, msg);
  return st ? graft__fail(st, "graft_runtime_create: %s", msg) : st;
}

/* A runtime is freed when the user has destroyed it and no function holds
 * it: a function outliving its runtime (a documented misuse) then fails
 * its calls with GRAFT_EMISUSE instead of reading freed memory. */
static void runtime_free(graft_runtime *rt) {
  graft__chrome_close(rt->trace);
  graft__free(rt->worker_pu);
  graft__topology_destroy(rt->topo);
  graft__config_free(&rt->cfg);
  graft__free(rt);
}

void graft__runtime_ref(graft_runtime *rt) { __atomic_add_fetch(&rt->refs, 1, __ATOMIC_RELAXED); }

void graft__runtime_unref(graft_runtime *rt) {
  if (__atomic_sub_fetch(&rt->refs, 1, __ATOMIC_ACQ_REL) == 0) runtime_free(rt);
}

int graft__runtime_destroyed(const graft_runtime *rt) {
  return __atomic_load_n(&rt->destroyed, __ATOMIC_ACQUIRE);
}

GRAFT_API void graft_runtime_destroy(graft_runtime *rt) {
  if (!rt) return;
  /* A second destroy of the same handle is a use after free when no
   * function held it; while one does, it is caught here. */
  if (__atomic_exchange_n(&rt->destroyed, 1, __ATOMIC_ACQ_REL)) return;
  graft__runtime_unref(rt);
}
