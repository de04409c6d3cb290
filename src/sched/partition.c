/* Partitioner: one part per topology domain that has workers.
 *
 * Chains are contracted first (a node whose only compute predecessor has no
 * other successor joins that predecessor's cluster), so a branch of a graph
 * is one cluster and never crosses parts.  Clusters that depend on no other
 * cluster are spread largest first over the least-loaded part (LPT); every
 * other cluster goes where most of its input bytes live, unless that part
 * would exceed the mean load by more than the slack, in which case it goes
 * to the least-loaded part. */
#include <stdlib.h>
#include <string.h>

#include "sched/sched.h"

#define SLACK 1.10

static uint32_t find(uint32_t *parent, uint32_t x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];
    x = parent[x];
  }
  return x;
}

static int64_t value_bytes(const graft__plan *p, uint32_t i) {
  const graft__tview *v = graft__plan_view(p, p->order[i]);
  return v->numel * (int64_t)graft_dtype_size(v->dtype);
}

typedef struct cluster {
  uint32_t root;    /* representative order position */
  uint32_t first;   /* smallest order position (topological rank) */
  int64_t work;
  int source;       /* no compute predecessor outside the cluster */
} cluster;

/* A source cluster with its sort key copied in, so the comparator needs no
 * context: plans are compiled on several threads at once (distinct
 * functions may be called concurrently), so nothing here may live at file
 * scope. */
typedef struct src_key {
  int64_t work;
  uint32_t first, c;
} src_key;

/* Most work first; ties by topological rank (first is unique). */
static int by_work_desc(const void *a, const void *b) {
  const src_key *x = a, *y = b;
  if (x->work != y->work) return x->work > y->work ? -1 : 1;
  return x->first < y->first ? -1 : x->first > y->first;
}

static int least_loaded(const int64_t *load, int n) {
  int best = 0;
  for (int k = 1; k < n; k++)
    if (load[k] < load[best]) best = k;
  return best;
}

static void fill_stats(graft__plan *p, const int64_t *load, int n_parts) {
  graft_plan_stats *s = &p->stats;
  int64_t total = 0, max = 0, used = 0, cut = 0;
  memset(s->part_work, 0, sizeof s->part_work);
  for (int k = 0; k < n_parts; k++) {
    total += load[k];
    max = GRAFT__MAX(max, load[k]);
    used += load[k] > 0;
    if (k < GRAFT_STATS_MAX_PARTS) s->part_work[k] = load[k];
  }
  for (uint32_t i = 0; i < p->n_order; i++) {
    for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++)
      if (p->part[p->succ[e]] != p->part[i]) cut = graft__size_add_sat(cut, value_bytes(p, i));
  }
  s->parts = used ? used : 1;
  s->work = total;
  s->cut_bytes = cut;
  s->imbalance = total ? (double)max / ((double)total / (double)s->parts) : 1.0;
}

graft_status graft__plan_partition(graft__plan *p, int n_parts) {
  uint32_t n = p->n_order;
  if (n_parts < 1) n_parts = 1;
  p->n_parts = n_parts;
  p->part = graft__calloc(n ? n : 1, sizeof *p->part);
  p->sources = graft__malloc((n ? n : 1) * sizeof *p->sources);
  p->src_off = graft__malloc(((size_t)n_parts + 1) * sizeof *p->src_off);
  uint32_t *parent = graft__malloc((n ? n : 1) * sizeof *parent);
  uint32_t *cid = graft__malloc((n ? n : 1) * sizeof *cid);
  uint32_t *single = graft__malloc((n ? n : 1) * sizeof *single);
  cluster *cl = graft__calloc(n ? n : 1, sizeof *cl);
  uint32_t *idx = graft__malloc((n ? n : 1) * sizeof *idx);
  int64_t *load = graft__calloc((size_t)n_parts, sizeof *load);
  int64_t *affinity = graft__calloc((size_t)n_parts, sizeof *affinity);
  src_key *keys = graft__malloc((n ? n : 1) * sizeof *keys);
  graft_status st = GRAFT_ENOMEM;
  if (!p->part || !p->sources || !p->src_off || !parent || !cid || !single || !cl || !idx ||
      !load || !affinity || !keys)
    goto out;

  /* Contract chains. */
  for (uint32_t i = 0; i < n; i++) {
    parent[i] = i;
    single[i] = UINT32_MAX;
  }
  for (uint32_t u = 0; u < n; u++)
    for (uint32_t e = p->succ_off[u]; e < p->succ_off[u + 1]; e++)
      if (p->npred[p->succ[e]] == 1) single[p->succ[e]] = u;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t u = single[i];
    if (u != UINT32_MAX && p->succ_off[u + 1] - p->succ_off[u] == 1)
      parent[find(parent, i)] = find(parent, u);
  }

  /* Clusters, numbered in topological order of their first node. */
  uint32_t n_cl = 0;
  for (uint32_t i = 0; i < n; i++) cid[i] = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t r = find(parent, i);
    if (cid[r] == UINT32_MAX) {
      cid[r] = n_cl;
      cl[n_cl] = (cluster){r, i, 0, 1};
      n_cl++;
    }
    cl[cid[r]].work += p->work[i];
  }
  for (uint32_t u = 0; u < n; u++)
    for (uint32_t e = p->succ_off[u]; e < p->succ_off[u + 1]; e++) {
      uint32_t s = p->succ[e];
      if (find(parent, s) != find(parent, u)) cl[cid[find(parent, s)]].source = 0;
    }

  int64_t total = 0;
  for (uint32_t c = 0; c < n_cl; c++) total += cl[c].work;
  double cap = (double)total / n_parts * SLACK;

  /* Source clusters: LPT. */
  uint32_t n_src = 0;
  for (uint32_t c = 0; c < n_cl; c++)
    if (cl[c].source) keys[n_src++] = (src_key){cl[c].work, cl[c].first, c};
  qsort(keys, n_src, sizeof *keys, by_work_desc);
  uint16_t *cpart = (uint16_t *)single; /* reuse: part per cluster */
  for (uint32_t c = 0; c < n_cl; c++) cpart[c] = UINT16_MAX;
  for (uint32_t k = 0; k < n_src; k++) {
    int best = least_loaded(load, n_parts);
    cpart[keys[k].c] = (uint16_t)best;
    load[best] += keys[k].work;
  }

  /* The rest, in topological order of their first node: follow the input
   * bytes within the cap.  Predecessors come earlier (ids are topological),
   * so their parts are known; members are listed per cluster so every edge
   * is looked at once. */
  uint32_t *moff = graft__calloc((size_t)n_cl + 1, sizeof *moff);
  uint32_t *mem = graft__malloc((n ? n : 1) * sizeof *mem);
  if (!moff || !mem) {
    graft__free(moff);
    graft__free(mem);
    goto out;
  }
  for (uint32_t i = 0; i < n; i++) moff[cid[find(parent, i)] + 1]++;
  for (uint32_t c = 0; c < n_cl; c++) moff[c + 1] += moff[c];
  for (uint32_t i = 0, *fill = idx; i < n_cl; i++) fill[i] = moff[i]; /* idx reused as cursor */
  for (uint32_t i = 0; i < n; i++) mem[idx[cid[find(parent, i)]]++] = i;
  for (uint32_t c = 0; c < n_cl; c++) {
    if (cpart[c] != UINT16_MAX) continue;
    memset(affinity, 0, (size_t)n_parts * sizeof *affinity);
    for (uint32_t k = moff[c]; k < moff[c + 1]; k++)
      for (uint32_t e = p->pred_off[mem[k]]; e < p->pred_off[mem[k] + 1]; e++) {
        uint32_t u = p->pred[e];
        if (cid[find(parent, u)] != c) affinity[cpart[cid[find(parent, u)]]] += value_bytes(p, u) + 1;
      }
    int best = 0;
    for (int k = 1; k < n_parts; k++)
      if (affinity[k] > affinity[best]) best = k;
    if ((double)(load[best] + cl[c].work) > cap) best = least_loaded(load, n_parts);
    cpart[c] = (uint16_t)best;
    load[best] += cl[c].work;
  }
  for (uint32_t i = 0; i < n; i++) p->part[i] = cpart[cid[find(parent, i)]];
  graft__free(moff);
  graft__free(mem);

  /* Sources (no compute predecessor), grouped by part. */
  p->n_sources = 0;
  for (int k = 0; k < n_parts; k++) {
    p->src_off[k] = p->n_sources;
    for (uint32_t i = 0; i < n; i++)
      if (p->npred[i] == 0 && p->part[i] == k) p->sources[p->n_sources++] = i;
  }
  p->src_off[n_parts] = p->n_sources;
  fill_stats(p, load, n_parts);
  st = GRAFT_OK;
out:
  graft__free(parent);
  graft__free(cid);
  graft__free(single);
  graft__free(cl);
  graft__free(idx);
  graft__free(load);
  graft__free(affinity);
  graft__free(keys);
  return st;
}
