/* graft internal: helpers shared by the kernel files only (not part of the
 * kernels -> sched interface in kernels.h). */
#ifndef GRAFT_KERNELS_INT_H
#define GRAFT_KERNELS_INT_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* On x86-64 the kernel loops that vectorize (elementwise.c, optim.c,
 * conv.c, winograd.c) are also built for AVX2, and the loader picks the
 * build the CPU runs (an ifunc): twice the vector width for the same
 * operations in the same order (the "avx2" target has no FMA, and C11 mode
 * contracts nothing anyway), so the same bits either way.  Adam's update
 * over the demo's 235,146 parameters: 1.13 -> 0.55 ns per element. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GRAFT__SIMD_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define GRAFT__SIMD_TSAN 1
#endif
/* (Not under ThreadSanitizer: the clones' ifunc resolvers run before the
 * sanitizer's runtime starts, and their instrumentation crashes there.) */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && !defined(GRAFT__SIMD_TSAN)
#define GRAFT__SIMD_CLONES __attribute__((target_clones("avx2", "default")))
/* Cloned and kept out of line (a call through the ifunc is never inlined;
 * clang refuses noinline beside target_clones). */
#define GRAFT__SIMD_OUTLINED GRAFT__SIMD_CLONES
#else
#define GRAFT__SIMD_CLONES
#define GRAFT__SIMD_OUTLINED __attribute__((noinline))
#endif

/* v, or C's NAN where v is a NaN: what a kernel writes where two NaNs may
 * meet in one operation (an add of two NaN operands passes on the first
 * operand's, and which operand comes first is the compiler's choice, which
 * it makes differently in a loop's vector body, its tail and a short
 * loop), so that results stay bitwise equal across tile sizes, fusion and
 * compilers.  A compare and a blend where the loop vectorizes. */
static inline float graft__canon_f32(float v) { return v != v ? (float)NAN : v; }
static inline double graft__canon_f64(double v) { return v != v ? (double)NAN : v; }

/* 1 when in, after its leading 1s, is out's trailing dims: a row that
 * broadcasts over out's leading dims, read at flat index i % numel. */
static inline int graft__is_row_of(const graft__tview *in, const graft__tview *out) {
  int d0 = 0;
  while (d0 < in->rank && in->shape[d0] == 1) d0++;
  const int n = in->rank - d0;
  if (n == 0 || n > out->rank) return 0;
  for (int d = 0; d < n; d++)
    if (in->shape[d0 + d] != out->shape[out->rank - n + d]) return 0;
  return 1;
}

/* Plain triple-loop matmul with the same arguments, units and broadcasting
 * as graft__k_MATMUL; accumulates in double.  Tests use it as the oracle for
 * the BLAS path. */
graft_status graft__matmul_ref(const graft__kargs *k, int64_t begin, int64_t end);

/* GEMM units and tiling (sched/tiles.c).  A matmul's units are the output
 * columns of each row block of each batch: batches x rb x N, in that
 * order, where the plan cuts each batch's M rows into rb blocks
 * (graft__mm_block) and says how many by the unit count it gives the node
 * (graft__kargs.units; graft__kernel_units counts one block).  A call over
 * units [begin, end) is one gemm per (batch, row block) it touches, over
 * that block's rows and the range's columns, so one list of unit ranges
 * makes every tile shape: runs of columns (rb = 1), blocks of rows (rb > 1,
 * one block a tile), both (rb > 1, runs of a block's columns: 2-D tiles)
 * and whole batches.
 *
 * A gemm call over some columns repacks the whole op(a) (M x K); one over
 * some rows repacks the whole op(b) (K x N).  So the 1-D split:
 *   - column tiles get at least GRAFT__MM_MIN_COLS columns;
 *   - outputs too narrow for column tiles (N < GRAFT__MM_MIN_COLS and
 *     M > N: a classifier head, a matrix-vector product) split by rows,
 *     at least GRAFT__MM_MIN_ROWS each (the narrow op(b) is cheap to
 *     repack), so they still spread over workers;
 *   - otherwise products with rows for two or more 256-row tiles split by
 *     rows (at least GRAFT__MM_MIN_COLS each) when that gives as many
 *     tiles as columns would, or when op(a) is transposed (x^T @ dy, the
 *     weight gradient of a dense layer): measured with OpenBLAS 0.3.21,
 *     repeating op(a)'s packing per column tile costs more than repeating
 *     op(b)'s per row tile (1024^3 f64: 1.15x a single call against
 *     1.04x; 1024x256x1024 with a transposed: 1.09-1.25x against 1.0-1.05x);
 *     a batch of 256 rows still splits by columns.
 * Tiles of a segment are as equal as GRAFT__MM_ALIGN allows, so no ragged
 * sliver is left at a batch's end, and may come down to 3/4 of those
 * minimums where that makes one more tile (784 rows: 208 x 3 + 160, not
 * 272 x 2 + 240).
 *
 * That split gives at most max(M, N) / 256 tiles per batch: 4 for a 1024^3
 * product, too few for a many-core machine.  Where rows and columns can
 * both be cut, into tiles of at least GRAFT__MM_MIN_COLS of each and
 * GRAFT__MM_MIN_MACS multiply-adds (both scaled by the grain: sched/
 * tiles.c), near-square but not smaller than about GRAFT__MM_2D_TILES
 * tiles per batch need (enough for 16 workers to balance), and that makes
 * more tiles than the 1-D split, tiles are row blocks x column runs
 * (2048^3: 8 x 8 of 256 x 256; 1024^3 at GRAFT_GRAIN=16384: 4 x 4).  Each
 * such tile repacks a block of op(a) and one of op(b), and more tiles
 * cost more at one thread however they are cut: measured with OpenBLAS
 * 0.3.21 (Zen, 1 thread), a 1024^3 f32 product in 16 tiles of 256 x 256
 * took 1.06-1.12x one call against 1.03-1.05x for 4 row tiles, so at the
 * default grain it keeps its 4 (GRAFT__MM_MIN_MACS: 256 x 256 x 1024 is
 * half of it). */
#define GRAFT__MM_MIN_COLS 256
#define GRAFT__MM_MIN_ROWS 64
#define GRAFT__MM_ALIGN 16
#define GRAFT__MM_MIN_MACS (INT64_C(1) << 27)
#define GRAFT__MM_2D_TILES 64

/* The extent of each of nb near-equal blocks of S rows (or columns), a
 * multiple of GRAFT__MM_ALIGN; the last block gets what is left.  Both the
 * tiler and the kernel place row blocks with it. */
static inline int64_t graft__mm_block(int64_t S, int64_t nb) {
  int64_t e = nb > 1 ? (S + nb - 1) / nb : S;
  return (e + GRAFT__MM_ALIGN - 1) / GRAFT__MM_ALIGN * GRAFT__MM_ALIGN;
}

/* Segment s of a matmul's units (the N columns of one row block of one
 * batch) whose M rows are cut into rb blocks of h (graft__mm_block): its
 * batch, and its rows [*i0, *i1).  The kernel's and every reader's one
 * mapping from units to blocks. */
static inline int64_t graft__mm_segment(int64_t M, int64_t rb, int64_t h, int64_t s, int64_t *i0,
                                        int64_t *i1) {
  *i0 = s % rb * h;
  *i1 = *i0 + h < M ? *i0 + h : M;
  return s / rb;
}

/* Whether the 1-D split of an M x N product (op(a) transposed: trans_a)
 * cuts its rows (else its columns). */
static inline int graft__mm_by_rows(int64_t M, int64_t N, int trans_a) {
  const int64_t T = GRAFT__MM_MIN_COLS;
  return (N < T && M > N) || (M >= 2 * T && (trans_a || M / T >= N / T));
}

/* The fewest rows (by_rows: graft__mm_by_rows) or columns a tile of the
 * 1-D split gets. */
static inline int64_t graft__mm_min_units(int by_rows, int64_t N) {
  return by_rows && N < GRAFT__MM_MIN_COLS ? GRAFT__MM_MIN_ROWS : GRAFT__MM_MIN_COLS;
}

/* The tile extent in a segment of S rows or columns for tiles of about len: as
 * many tiles as fit at 3/4 of len or more (784 rows of at least 256 make
 * four tiles, not three: a third tile leaves one of two workers idle for a
 * whole tile), at most cap of them, near-equal and a multiple of
 * GRAFT__MM_ALIGN.  S or more: the segment is one tile. */
static inline int64_t graft__mm_tile_len(int64_t S, int64_t len, int64_t cap) {
  int64_t n = (S + len - 1) / len;
  if (S / n < len * 3 / 4) n = S / len > 1 ? S / len : 1;
  if (n > cap) n = cap > 1 ? cap : 1;
  return graft__mm_block(S, n);
}

/* The OpenBLAS threading variant as openblas_get_parallel() reports it:
 * 0 sequential, 1 pthreads, 2 OpenMP; -1 when the BLAS is not OpenBLAS.
 * Runs graft__blas_init first, so the answer is the one kernels run with. */
int graft__blas_variant(void);
/* OpenBLAS's name for the kernels it runs ("Prescott", "SkylakeX"), or
 * NULL when the BLAS is not OpenBLAS. */
const char *graft__blas_core(void);
/* The OPENBLAS_CORETYPE that would run faster kernels than core on a CPU
 * with AVX2 (avx2) and AVX-512F (avx512), or NULL when core is not one of
 * the pre-AVX2 families; graft__blas_hint asks it about this machine. */
const char *graft__blas_core_hint(const char *core, int avx2, int avx512);
const char *graft__blas_hint(void);

/* The units of conv2d's kernels (kernels/conv.c): images x groups for
 * CONV2D and CONV2D_X (runs of images x groups on the Winograd path,
 * kernels/winograd.c), groups for CONV2D_W; and image planes (N x C) for
 * MAX_POOL2D_GRAD. */
int64_t graft__conv_units(const graft__kargs *k);
/* Their per-tile scratch (graft__kernel_scratch, graft__kernel_run_scratch
 * dispatch here and to the fused kernel's, fused.c). */
int64_t graft__conv_scratch(const graft__kargs *k);
graft_status graft__conv_run_scratch(const graft__kargs *k, int64_t begin, int64_t end,
                                     double *scratch);
int64_t graft__fused_scratch(const graft__kargs *k);
graft_status graft__fused_run(const graft__kargs *k, int64_t begin, int64_t end, double *scratch);

/* Reduction ops a graft__reduce_run call can perform. */
enum graft__reduce_kind {
  GRAFT__RED_SUM,
  GRAFT__RED_MEAN,
  GRAFT__RED_MAX,
  GRAFT__RED_PROD,
  GRAFT__RED_LSE
};

/* Reduce k->in[0] over the axes in mask (bit i = input axis i) into output
 * elements [begin, end) of k->out, whose numel must be the product of the
 * kept dims (its rank does not matter).  Shared by the reduction kernels and
 * sum_to_shape so both sum in the same fixed order. */
graft_status graft__reduce_run(const graft__kargs *k, enum graft__reduce_kind kind,
                               unsigned mask, int64_t begin, int64_t end);

/* Record why dtype dt cannot run here and return GRAFT_EDTYPE. */
static inline graft_status graft__kernel_bad_dtype(const graft__kargs *k, graft_dtype dt) {
  if (k->msg)
    graft__msgf(k->msg, "unsupported dtype %s", graft_dtype_name(dt));
  return GRAFT_EDTYPE;
}

/* Record an inconsistency between a node and its views (a graph-layer bug,
 * not a user error) and return GRAFT_EINTERNAL. */
static inline graft_status graft__kernel_internal(const graft__kargs *k, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline graft_status graft__kernel_internal(const graft__kargs *k, const char *fmt, ...) {
  if (k->msg) {
    va_list ap;
    va_start(ap, fmt);
    graft__vmsgf(k->msg, fmt, ap);
    va_end(ap);
  }
  return GRAFT_EINTERNAL;
}

/* GRAFT_OK if [begin, end) lies within [0, units), else GRAFT_EINTERNAL. */
static inline graft_status graft__kernel_check_units(const graft__kargs *k, int64_t begin,
                                                     int64_t end, int64_t units) {
  if (begin >= 0 && end <= units)
    return GRAFT_OK;
  return graft__kernel_internal(k, "units [%lld, %lld) outside [0, %lld)", (long long)begin,
                                (long long)end, (long long)units);
}

#endif /* GRAFT_KERNELS_INT_H */
