/* Tiles: split a node's kernel units so one large op feeds several workers.
 * The split depends only on shapes and the grain, never on the thread
 * count, and kernels give bitwise the same result for any split of their
 * units (matmul only at graft__matmul_align points, hence GEMM tiling cuts
 * at batch starts and multiples of GRAFT__MM_ROW_BLOCK rows). */
#include "kernels/kernels_int.h"
#include "sched/sched.h"

#define MAX_TILES 4096
#define MAX_SPLIT 64

int64_t graft__plan_node_work(const graft__plan *p, uint32_t i) {
  uint32_t id = p->order[i];
  const graft__node *n = graft__graph_node(p->g, id);
  const graft__tview *o = &p->views[id];
  int cost = graft__ops[n->op].cost;
  if (n->op == GRAFT__OP_MATMUL) {
    const graft__tview *a = p->kargs[id].in[0];
    int64_t k = a->shape[a->rank - ((n->attr.matmul.flags & GRAFT_TRANS_A) ? 2 : 1)];
    return (int64_t)cost * o->numel * (k ? k : 1);
  }
  int64_t elems = o->numel;
  for (int j = 0; j < n->n_in; j++) elems = GRAFT__MAX(elems, p->kargs[id].in[j]->numel);
  return (int64_t)(cost ? cost : 1) * (elems ? elems : 1);
}

static void tile_node(graft__plan *p, uint32_t i, int64_t grain, graft__tiling *tl) {
  uint32_t id = p->order[i];
  const graft__kargs *k = &p->kargs[id];
  const graft__node *n = k->node;
  int64_t units = graft__kernel_units(k);
  tl->units = units;
  tl->seg = units ? units : 1;
  tl->len = tl->seg;
  tl->per_seg = 0;
  tl->n = 1;
  tl->split_r = 0;
  if (graft__ops[n->op].tile == GRAFT__TILE_ONE) return;

  /* Few outputs over many elements: split the reduced extent instead. */
  int64_t r = graft__kernel_split_extent(k);
  int64_t want = r > 1 ? k->in[0]->numel / grain : 0;
  if (want >= 2 && units < want) {
    tl->split_r = r;
    tl->n = (int32_t)GRAFT__MIN(GRAFT__MIN(want, (int64_t)MAX_SPLIT), r);
    return;
  }
  if (units <= 1) return;

  /* Elements (or multiply-adds) one unit stands for. */
  int64_t per_unit = p->work[i] / (graft__ops[n->op].cost ? graft__ops[n->op].cost : 1) / units;
  if (per_unit < 1) per_unit = 1;
  int64_t len = grain / per_unit;
  if (len < 1) len = 1;
  if (len * MAX_TILES < units) len = (units + MAX_TILES - 1) / MAX_TILES;

  if (graft__ops[n->op].tile == GRAFT__TILE_GEMM) {
    /* Segments are batches of m rows; cut inside one only every 64 rows. */
    int64_t m = k->out->shape[k->out->rank - 2];
    int64_t batches = units / (m ? m : 1);
    if (m <= 0 || batches * m != units) return; /* keep it whole */
    tl->seg = m;
    if (len >= m) {
      tl->len = (len / m) * m;
      tl->n = (int32_t)((units + tl->len - 1) / tl->len);
    } else {
      len = (len + GRAFT__MM_ROW_BLOCK - 1) / GRAFT__MM_ROW_BLOCK * GRAFT__MM_ROW_BLOCK;
      if (len >= m) {
        tl->len = m;
        tl->n = (int32_t)batches;
      } else {
        tl->len = len;
        tl->per_seg = (int32_t)((m + len - 1) / len);
        tl->n = (int32_t)(batches * tl->per_seg);
      }
    }
    return;
  }
  tl->len = GRAFT__MIN(len, units);
  tl->n = (int32_t)((units + tl->len - 1) / tl->len);
}

graft_status graft__plan_tile(graft__plan *p, int64_t grain) {
  size_t n = p->n_order ? p->n_order : 1;
  p->work = graft__malloc(n * sizeof *p->work);
  p->tiling = graft__malloc(n * sizeof *p->tiling);
  if (!p->work || !p->tiling) return GRAFT_ENOMEM;
  p->scratch_off = graft__malloc(n * sizeof *p->scratch_off);
  if (!p->scratch_off) return GRAFT_ENOMEM;
  p->n_tasks = 0;
  int64_t scratch = 0;
  for (uint32_t i = 0; i < p->n_order; i++) {
    p->work[i] = graft__plan_node_work(p, i);
    tile_node(p, i, grain, &p->tiling[i]);
    p->n_tasks += p->tiling[i].n;
    p->scratch_off[i] = scratch;
    if (p->tiling[i].split_r) scratch += 2 * (int64_t)p->tiling[i].n * p->views[p->order[i]].numel;
  }
  p->scratch = graft__aligned_alloc((size_t)(scratch ? scratch : 1) * sizeof *p->scratch, GRAFT__ALIGN);
  return p->scratch ? GRAFT_OK : GRAFT_ENOMEM;
}
