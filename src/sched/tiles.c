/* Tiles: split a node's kernel units so one large op feeds several workers.
 * The split depends only on shapes and the grain, never on the thread
 * count, and every executor runs a node as that same list of tiles, so the
 * result is bitwise the same for every executor and thread count even where
 * a kernel's bits depend on how its units are split (matmul).  GEMM tiles
 * are near-equal runs of a batch's output columns or blocks of its rows,
 * row blocks x column runs where that makes more tiles (which, and how
 * many at least: kernels_int.h), or whole batches. */
#include <math.h>

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

/* The smallest r with r * r >= x (0 <= x < 2^62). */
static int64_t ceil_sqrt(int64_t x) {
  int64_t r = (int64_t)sqrt((double)x);
  while (r * r < x) r++;
  while (r > 0 && (r - 1) * (r - 1) >= x) r--;
  return r;
}

/* Tiles of a matmul whose output is batches x M x N (M, N > 0) and whose
 * inner dim is K (units: kernels_int.h).  The 1-D split first: runs of at
 * least min columns, or blocks of at least min rows (graft__mm_by_rows,
 * graft__mm_min_units), each at least the grain in multiply-adds, give or
 * take a quarter; as many as fit, made equal up to a multiple of
 * GRAFT__MM_ALIGN; at a segment or more, whole batches.  Then row blocks x
 * column runs of at least side x side and macs multiply-adds, as square as
 * that allows but no smaller than about GRAFT__MM_2D_TILES of them per
 * batch need, where they make more tiles.  A grain below the default
 * scales the minimums down with it (to 16 rows or columns at least): a
 * many-core run may trade some single-thread speed for more tiles
 * (GRAFT_GRAIN=8192: 64-column tiles).  The 2-D tiles' multiply-adds also
 * grow with a grain above the default, so a larger grain gives fewer of
 * them (a 2048^3 product: 64 at the default, 25 at GRAFT_GRAIN=65536). */
/* v (the fewest rows or columns of a tile) scaled down with a grain under
 * the default, to 16 at least. */
static int64_t scaled_min(int64_t v, int64_t grain) {
  return grain < GRAFT__DEFAULT_GRAIN ? GRAFT__MAX(v * grain / GRAFT__DEFAULT_GRAIN, (int64_t)16) : v;
}

static void tile_gemm(int64_t batches, int64_t M, int64_t N, int64_t K, int trans_a,
                      int64_t grain, graft__tiling *tl) {
  const int rows = graft__mm_by_rows(M, N, trans_a);
  const int64_t S = rows ? M : N, Kw = K ? K : 1;
  const int64_t per_unit = GRAFT__MAX(graft__size_mul_sat(rows ? N : M, Kw), (int64_t)1);
  const int64_t min = scaled_min(graft__mm_min_units(rows, N), grain);
  int64_t len = GRAFT__MAX(grain / per_unit + (grain % per_unit != 0), min);
  if (len * MAX_TILES < batches * S) len = (batches * S + MAX_TILES - 1) / MAX_TILES;
  int64_t rb = 1;   /* row blocks per batch */
  tl->seg = N;
  if (len < S) len = graft__mm_tile_len(S, len, MAX_TILES / batches);
  if (len < S && rows) { /* one row block a tile */
    rb = (S + len - 1) / len;
    tl->len = N;
    tl->n = (int32_t)(batches * rb);
  } else if (len < S) {  /* runs of len columns */
    tl->len = len;
    tl->per_seg = (int32_t)((S + len - 1) / len);
    tl->n = (int32_t)(batches * tl->per_seg);
  } else {               /* whole batches */
    int64_t per_tile = GRAFT__MAX(len / S, (batches + MAX_TILES - 1) / MAX_TILES);
    tl->len = per_tile * N;
    tl->n = (int32_t)((batches + per_tile - 1) / per_tile);
  }

  const int64_t side = scaled_min(GRAFT__MM_MIN_COLS, grain);
  const int64_t macs = graft__size_mul_sat(GRAFT__MM_MIN_MACS / GRAFT__DEFAULT_GRAIN, grain);
  const int64_t area = macs / Kw + (macs % Kw != 0); /* rows x columns a tile needs */
  if (M < 2 * side || N < 2 * side || area > (M / 2) * (N / 2)) {
    tl->units = batches * rb * N;
    return;
  }
  int64_t t = GRAFT__MAX(side, ceil_sqrt(area));
  if ((M / t) * (N / t) > GRAFT__MM_2D_TILES) t = GRAFT__MAX(t, ceil_sqrt(M * N / GRAFT__MM_2D_TILES));
  const int64_t h = graft__mm_block(M, M / t), w = graft__mm_block(N, N / t);
  const int64_t rb2 = (M + h - 1) / h, cb2 = (N + w - 1) / w;
  if (rb2 >= 2 && cb2 >= 2 && batches * rb2 * cb2 > tl->n && batches * rb2 * cb2 <= MAX_TILES) {
    rb = rb2;
    tl->len = w;
    tl->per_seg = (int32_t)cb2;
    tl->n = (int32_t)(batches * rb2 * cb2);
  }
  tl->units = batches * rb * N;
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
  if (graft__ops[n->op].tile == GRAFT__TILE_GEMM) {
    const graft__tview *o = k->out, *a = k->in[0];
    if (o->rank < 2 || a->rank < 2 || units <= 0) return;
    const int64_t M = o->shape[o->rank - 2], N = o->shape[o->rank - 1];
    const int trans_a = (n->attr.matmul.flags & GRAFT_TRANS_A) != 0;
    if (M > 0 && N > 0)
      tile_gemm(units / N, M, N, a->shape[a->rank - (trans_a ? 2 : 1)], trans_a, grain, tl);
    return;
  }

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
