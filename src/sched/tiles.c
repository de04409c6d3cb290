/* Tiles: split a node's kernel units so one large op feeds several workers.
 * The split depends only on shapes and the grain, never on the thread
 * count, and every executor runs a node as that same list of tiles, so the
 * result is bitwise the same for every executor and thread count even where
 * a kernel's bits depend on how its units are split (matmul).  GEMM tiles
 * are near-equal runs of a batch's output columns or rows (which, and how
 * many at least: kernels_int.h), or whole batches. */
#include "kernels/kernels_int.h"
#include "sched/sched.h"

#define MAX_TILES 4096
#define MAX_SPLIT 64

int64_t graft__plan_node_work(const graft__plan *p, uint32_t i) {
  uint32_t id = p->order[i];
  const graft__node *n = graft__graph_node(p->g, id);
  const graft__tview *o = graft__plan_view(p, id);
  int cost = graft__plan_node_cost(n);
  if (n->op == GRAFT__OP_MATMUL) {
    const graft__tview *a = p->kargs[i].in[0];
    int64_t k = a->shape[a->rank - ((n->attr.matmul.flags & GRAFT_TRANS_A) ? 2 : 1)];
    return graft__size_mul_sat(graft__size_mul_sat(cost, o->numel), k ? k : 1);
  }
  int64_t elems = o->numel;
  for (int j = 0; j < n->n_in; j++) elems = GRAFT__MAX(elems, p->kargs[i].in[j]->numel);
  return graft__size_mul_sat(cost ? cost : 1, elems ? elems : 1);
}

static void tile_node(graft__plan *p, uint32_t i, int64_t grain, graft__tiling *tl) {
  const graft__kargs *k = &p->kargs[i];
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
  if (n->fused) per_unit = n->fused->cost; /* elements: one per unit, the group's work each */
  if (per_unit < 1) per_unit = 1;
  int64_t len = grain / per_unit;
  if (len < 1) len = 1;
  if (len * MAX_TILES < units) len = (units + MAX_TILES - 1) / MAX_TILES;

  if (graft__ops[n->op].tile == GRAFT__TILE_GEMM) {
    /* Units are output columns, or rows (graft__mm_by_rows); segments are
     * batches of N columns (M rows).  Each tile is one gemm per batch that
     * repacks op(a) (M x K, = per_unit) for column tiles, or op(b) for row
     * tiles, so a tile gets at least max(grain, min * per_unit)
     * multiply-adds: len >= min units (graft__mm_min_units), give or take
     * a quarter.  A segment splits into as many tiles of that size as fit,
     * made equal up to a multiple of GRAFT__MM_ALIGN.  At len >= the
     * segment, tiles are whole batches. */
    const graft__tview *o = k->out;
    const int64_t M = o->rank >= 2 ? o->shape[o->rank - 2] : 0;
    const int64_t N = o->rank >= 2 ? o->shape[o->rank - 1] : 0;
    const int rows = graft__mm_by_rows(M, N, (n->attr.matmul.flags & GRAFT_TRANS_A) != 0);
    const int64_t S = rows ? M : N;
    const int64_t batches = units / (S > 0 ? S : 1);
    if (S <= 0 || batches * S != units) return; /* keep it whole */
    /* A grain below the default scales the minimum down with it (to 16
     * units at least): a many-core run may trade some single-thread speed
     * for more GEMM tiles (GRAFT_GRAIN=8192: 64-column tiles). */
    int64_t min = graft__mm_min_units(rows, N);
    if (grain < GRAFT__DEFAULT_GRAIN) min = GRAFT__MAX(min * grain / GRAFT__DEFAULT_GRAIN, (int64_t)16);
    len = GRAFT__MAX((grain + per_unit - 1) / per_unit, min);
    if (len * MAX_TILES < units) len = (units + MAX_TILES - 1) / MAX_TILES;
    tl->seg = S;
    if (len < S) {
      len = graft__mm_tile_len(S, len, MAX_TILES / batches);
      int64_t per_seg = (S + len - 1) / len;
      if (len < S) {
        tl->len = len;
        tl->per_seg = (int32_t)per_seg;
        tl->n = (int32_t)(batches * per_seg);
        return;
      }
    }
    int64_t per_tile = GRAFT__MAX(len / S, (batches + MAX_TILES - 1) / MAX_TILES);
    tl->len = per_tile * S;
    tl->n = (int32_t)((batches + per_tile - 1) / per_tile);
    return;
  }
  tl->len = GRAFT__MIN(len, units);
  tl->n = (int32_t)((units + tl->len - 1) / tl->len);
}

/* A node whose tiles each need scratch (graft__kernel_scratch) gets at most
 * MAX_SCRATCH_TILES tiles: that bounds the plan's scratch (one buffer per
 * tile, all reserved at compile) and keeps each buffer warm for the units
 * its tile runs one after another.  Still a function of shapes and the
 * grain only. */
#define MAX_SCRATCH_TILES 16

static void cap_scratch_tiles(graft__tiling *tl) {
  if (tl->n <= MAX_SCRATCH_TILES || tl->per_seg || tl->split_r) return;
  tl->len = (tl->units + MAX_SCRATCH_TILES - 1) / MAX_SCRATCH_TILES;
  tl->n = (int32_t)((tl->units + tl->len - 1) / tl->len);
}

/* Deferred nodes: big side work off the critical path.  A node's bottom
 * level is its work plus the largest bottom level among its successors (the
 * work still ahead of it on its longest path); the plan's critical path is
 * the largest.  A node split into tiles whose bottom level is under
 * 1/DEFER_SHARE of the critical path (a weight update hanging off a
 * backward pass, say) is one the work-stealing executor runs only when no
 * other ready work is left to run or steal: a worker that finishes it
 * early is better spent on the tiles the rest of the graph waits for.
 * Single-tile nodes are never deferred (their bookkeeping would cost more
 * than any imbalance they cause).  Shapes and the grain decide it, and it
 * changes only the order tiles run in, never what they compute. */
#define DEFER_SHARE 8

static graft_status mark_deferred(graft__plan *p) {
  size_t n = p->n_order ? p->n_order : 1;
  int64_t *bottom = graft__malloc(n * sizeof *bottom);
  if (!bottom) return GRAFT_ENOMEM;
  int64_t cp = 0;
  for (uint32_t i = p->n_order; i-- > 0;) {
    int64_t below = 0;
    for (uint32_t e = p->succ_off[i]; e < p->succ_off[i + 1]; e++)
      below = GRAFT__MAX(below, bottom[p->succ[e]]);
    bottom[i] = p->work[i] + below;
    cp = GRAFT__MAX(cp, bottom[i]);
  }
  p->n_deferred = 0;
  for (uint32_t i = 0; i < p->n_order; i++) {
    p->kargs[i].defer = !p->kargs[i].whole && bottom[i] < cp / DEFER_SHARE;
    if (p->kargs[i].defer) p->n_deferred += p->tiling[i].n;
  }
  graft__free(bottom);
  return GRAFT_OK;
}

graft_status graft__plan_tile(graft__plan *p, int64_t grain) {
  size_t n = p->n_order ? p->n_order : 1;
  p->work = graft__malloc(n * sizeof *p->work);
  p->tiling = graft__malloc(n * sizeof *p->tiling);
  if (!p->work || !p->tiling) return GRAFT_ENOMEM;
  p->scratch_off = graft__malloc(n * sizeof *p->scratch_off);
  p->scratch_per = graft__malloc(n * sizeof *p->scratch_per);
  if (!p->scratch_off || !p->scratch_per) return GRAFT_ENOMEM;
  p->n_tasks = 0;
  int64_t scratch = 0;
  /* Work is an estimate: capped so that its sums over the plan (bottom
   * levels, part loads, stats) cannot overflow. */
  const int64_t work_cap = INT64_MAX / ((int64_t)p->n_order + 1);
  for (uint32_t i = 0; i < p->n_order; i++) {
    p->work[i] = GRAFT__MIN(graft__plan_node_work(p, i), work_cap);
    tile_node(p, i, grain, &p->tiling[i]);
    const int64_t per = graft__kernel_scratch(&p->kargs[i]);
    p->scratch_per[i] = per;
    if (per) cap_scratch_tiles(&p->tiling[i]);
    p->kargs[i].whole = p->tiling[i].n == 1 && !p->tiling[i].split_r && !per;
    uint32_t e0 = p->succ_off[i], e1 = p->succ_off[i + 1];
    p->kargs[i].next = e1 - e0 == 1 && p->npred[p->succ[e0]] == 1 ? p->succ[e0] : UINT32_MAX;
    p->kargs[i].units = p->tiling[i].units;
    p->n_tasks += p->tiling[i].n;
    p->scratch_off[i] = scratch;
    if (p->tiling[i].split_r &&
        graft__size_add(scratch,
                        graft__size_mul_sat(2 * (int64_t)p->tiling[i].n,
                                            graft__plan_view(p, p->order[i])->numel),
                        &scratch))
      return GRAFT_ENOMEM;
    if (per && graft__size_add(scratch, graft__size_mul_sat(p->tiling[i].n, per), &scratch))
      return GRAFT_ENOMEM;
  }
  int64_t scratch_bytes;
  if (graft__size_mul(scratch, (int64_t)sizeof *p->scratch, &scratch_bytes) ||
      scratch_bytes > GRAFT__MAX_PLAN_BYTES)
    return GRAFT_ENOMEM;
  p->scratch = graft__aligned_alloc((size_t)(scratch_bytes ? scratch_bytes : 1), GRAFT__ALIGN);
  return p->scratch ? mark_deferred(p) : GRAFT_ENOMEM;
}
