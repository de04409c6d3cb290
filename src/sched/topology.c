/* hwloc topology: usable PUs (topology ∩ process binding) and domains. */
#include <hwloc.h>
#include <string.h>

#include "sched/sched.h"

struct graft__topology {
  hwloc_topology_t topo;
  hwloc_bitmap_t usable;
  int this_system;
  char *source;
};

static graft_status setup(graft__topology *t, const char *desc, const char *origin, char *msg) {
  if (!desc) return GRAFT_OK;
  if (strncmp(desc, "xml:", 4) == 0) {
    if (hwloc_topology_set_xml(t->topo, desc + 4) != 0) {
      graft__msgf(msg, "%s: cannot read hwloc XML file '%s'", origin, desc + 4);
      return GRAFT_EIO;
    }
  } else if (hwloc_topology_set_synthetic(t->topo, desc) != 0) {
    graft__msgf(msg,
                "%s: invalid value '%s' (accepted: an hwloc synthetic description "
                "such as 'pack:2 numa:2 core:4 pu:1', or xml:PATH)",
                origin, desc);
    return GRAFT_EINVAL;
  }
  return GRAFT_OK;
}

graft_status graft__topology_load(const graft__config *cfg, graft__topology **out, char *msg) {
  *out = NULL;
  graft__topology *t = graft__calloc(1, sizeof *t);
  if (!t) return GRAFT_ENOMEM;
  graft_status st = GRAFT_OK;
  if (hwloc_topology_init(&t->topo) != 0) {
    graft__free(t);
    graft__msgf(msg, "hwloc_topology_init failed");
    return GRAFT_ENOMEM;
  }
  st = setup(t, cfg->topology, cfg->topology_origin, msg);
  if (!st && hwloc_topology_load(t->topo) != 0) {
    if (cfg->topology)
      graft__msgf(msg, "%s: hwloc could not build the topology '%s'", cfg->topology_origin,
                  cfg->topology);
    else
      graft__msgf(msg, "hwloc could not load this machine's topology");
    st = GRAFT_EIO;
  }
  if (!st) {
    t->this_system = hwloc_topology_is_thissystem(t->topo);
    t->usable = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(t->topo));
    t->source = graft__strdup(cfg->topology ? cfg->topology : "this-machine");
    if (!t->usable || !t->source) st = GRAFT_ENOMEM;
  }
  if (!st && t->this_system) {
    hwloc_bitmap_t bound = hwloc_bitmap_alloc();
    if (bound && hwloc_get_cpubind(t->topo, bound, HWLOC_CPUBIND_PROCESS) == 0 &&
        hwloc_bitmap_intersects(bound, t->usable))
      hwloc_bitmap_and(t->usable, t->usable, bound);
    hwloc_bitmap_free(bound);
  }
  if (st) {
    if (st == GRAFT_ENOMEM) graft__msgf(msg, "out of memory loading the topology");
    graft__topology_destroy(t);
    return st;
  }
  *out = t;
  return GRAFT_OK;
}

void graft__topology_destroy(graft__topology *t) {
  if (!t) return;
  if (t->usable) hwloc_bitmap_free(t->usable);
  hwloc_topology_destroy(t->topo);
  graft__free(t->source);
  graft__free(t);
}

int graft__topology_pus(const graft__topology *t) {
  int w = hwloc_bitmap_weight(t->usable);
  return w > 0 ? w : 1;
}

static hwloc_obj_type_t level_type(graft__level l) {
  switch (l) {
  case GRAFT__LEVEL_PACKAGE: return HWLOC_OBJ_PACKAGE;
  case GRAFT__LEVEL_NUMA: return HWLOC_OBJ_NUMANODE;
  case GRAFT__LEVEL_L3: return HWLOC_OBJ_L3CACHE;
  case GRAFT__LEVEL_L2: return HWLOC_OBJ_L2CACHE;
  default: return HWLOC_OBJ_CORE;
  }
}

int graft__topology_domains(const graft__topology *t, graft__level level) {
  if (level == GRAFT__LEVEL_AUTO) level = graft__topology_auto_level(t);
  if (level == GRAFT__LEVEL_NONE) return 1;
  hwloc_obj_type_t type = level_type(level);
  int n = 0, total = hwloc_get_nbobjs_by_type(t->topo, type);
  for (int i = 0; i < total; i++) {
    hwloc_obj_t o = hwloc_get_obj_by_type(t->topo, type, (unsigned)i);
    if (o && o->cpuset && hwloc_bitmap_intersects(o->cpuset, t->usable)) n++;
  }
  return n > 0 ? n : 1;
}

graft__level graft__topology_auto_level(const graft__topology *t) {
  if (graft__topology_domains(t, GRAFT__LEVEL_NUMA) > 1) return GRAFT__LEVEL_NUMA;
  if (graft__topology_domains(t, GRAFT__LEVEL_L3) > 1) return GRAFT__LEVEL_L3;
  return GRAFT__LEVEL_NONE;
}

int graft__topology_is_this_system(const graft__topology *t) { return t->this_system; }

const char *graft__topology_source(const graft__topology *t) { return t->source; }

/* The usable PUs of domain d at level (all of them at GRAFT__LEVEL_NONE),
 * as OS indexes in logical order, into out (room for pus); their count. */
static int domain_pus(const graft__topology *t, graft__level level, int d, int *out) {
  hwloc_const_bitmap_t set = t->usable;
  if (level != GRAFT__LEVEL_NONE && level != GRAFT__LEVEL_AUTO) {
    hwloc_obj_type_t type = level_type(level);
    int total = hwloc_get_nbobjs_by_type(t->topo, type), k = 0;
    for (int i = 0; i < total; i++) {
      hwloc_obj_t o = hwloc_get_obj_by_type(t->topo, type, (unsigned)i);
      if (!o || !o->cpuset || !hwloc_bitmap_intersects(o->cpuset, t->usable)) continue;
      if (k++ == d) {
        set = o->cpuset;
        break;
      }
    }
  }
  int n = 0;
  for (int pu = hwloc_bitmap_first(set); pu >= 0; pu = hwloc_bitmap_next(set, pu))
    if (hwloc_bitmap_isset(t->usable, (unsigned)pu)) out[n++] = pu;
  return n;
}

/* The PU (OS index) of each of n workers, for binding: worker w belongs to
 * domain w * parts / n (graft__runtime_worker_domain) and takes the PUs of
 * that domain in order (compact), wrapping when the domain has fewer PUs
 * than workers.  map: room for n. */
graft_status graft__topology_worker_pus(const graft__topology *t, graft__level level, int parts,
                                        int n, int *map) {
  int *pus = graft__malloc((size_t)graft__topology_pus(t) * sizeof *pus);
  if (!pus) return GRAFT_ENOMEM;
  if (level == GRAFT__LEVEL_AUTO) level = graft__topology_auto_level(t);
  for (int w = 0, d = -1, count = 0, first = 0; w < n; w++) {
    int dw = (int)((int64_t)w * parts / n);
    if (dw != d) {
      d = dw;
      first = w;
      count = domain_pus(t, parts > 1 ? level : GRAFT__LEVEL_NONE, d, pus);
    }
    map[w] = count > 0 ? pus[(w - first) % count] : -1;
  }
  graft__free(pus);
  return GRAFT_OK;
}

/* Bind the calling thread to the PU of OS index pu.  A thread remembers
 * where it is bound, so a warm OpenMP pool pays the system call once. */
void graft__topology_bind(const graft__topology *t, int pu) {
  static _Thread_local const graft__topology *bound_topo;
  static _Thread_local int bound_pu = -1;
  if (pu < 0 || (bound_topo == t && bound_pu == pu)) return;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set) return;
  hwloc_bitmap_only(set, (unsigned)pu);
  if (hwloc_set_cpubind(t->topo, set, HWLOC_CPUBIND_THREAD) == 0) {
    bound_topo = t;
    bound_pu = pu;
  }
  hwloc_bitmap_free(set);
}
