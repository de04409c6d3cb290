/* graft kernels: conv2d's three products as Winograd F(2x2, 3x3), for 3x3
 * kernels at unit stride and dilation (graft__wino_applies).
 *
 * A 2x2 block of a 3x3 correlation's output is A^T (U . V) A, where
 * U = G k G^T for the kernel k, V = B^T d B for the 4x4 block d of input
 * it reads, and . multiplies elementwise:
 *   G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  A^T = [1 1 1 0; 0 1 -1 -1].
 * Summed over input channels, element xi (of 16) of every block is one
 * matrix product, M_xi [Cout, blocks] = U_xi [Cout, Cin] V_xi [Cin, blocks]:
 * 16 gemms of depth Cin (CBLAS) stand for im2col's one of depth 9 Cin over
 * 4 times the columns, 2.25 times fewer multiply-adds.
 *
 *   CONV2D    y = x (*) w over x's planes placed at (ph, pw) in zeros.
 *   CONV2D_X  dx = g (*) w', w'[c][o] = w[o][c] turned 180 degrees, over
 *             g's planes placed at (2 - ph, 2 - pw): the input gradient of a
 *             unit-stride correlation is the full correlation of the output
 *             gradient with the turned kernel.
 *   CONV2D_W  dw = G^T dU G, dU_xi [O, C] = the sum over blocks of
 *             (A g_b A^T)_xi (B^T d_b B)_xi (the forward's adjoint in U):
 *             a gemm per xi over a chunk of images' blocks, accumulating
 *             chunk by chunk in increasing image order.
 * Blocks run over each output plane in 2x2 steps; those past an odd edge
 * read zeros and drop their outside outputs.
 *
 * Units: runs of graft__wino_unit images x groups (CONV2D, CONV2D_X;
 * unit = run * G + group), or groups (CONV2D_W, whose batch sum never
 * splits); the gemms take chunks of a run's images at a time.  A unit's gemms have a fixed shape and its transforms a fixed
 * order whatever tile holds it, so every tiling gives the same bits.  The
 * kernels' transform U is made once per tile call (and group), in the
 * tile's scratch with the blocks of one chunk. */
#include <cblas.h>
#include <string.h>

#include "kernels/conv_geom.h"
#include "kernels/kernels_int.h"

/* Blocks per gemm the chunks aim at: 2 images of 14 x 14 (49 blocks each).
 * Fewer make OpenBLAS's packing a larger share of short gemms; more spill
 * a chunk's V and M (16 x channels x blocks each) out of L2. */
#define WINO_BLOCKS 96

/* Chunks per unit of CONV2D and CONV2D_X: each tile call makes the
 * kernels' transform and clears its products once, so units of a few
 * chunks keep that a small share (8 images: 8 tiles at batch 64). */
#define WINO_UNIT_CHUNKS 4

int graft__wino_applies(const graft__conv_geom *g, int64_t O) {
  return g->KH == 3 && g->KW == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 &&
         g->ph <= 2 && g->pw <= 2 && g->OH > 0 && g->OW > 0 && g->Cg >= GRAFT__WINO_MIN_CH &&
         g->G > 0 && O / g->G >= GRAFT__WINO_MIN_CH;
}

/* One product's planes: input planes H x W at (ph, pw) in a plane of zeros,
 * output planes OH x OW in TY x TX blocks of 2x2 (TT per plane); a block
 * reads rows 2ty .. 2ty + 3 of the zero-padded plane, columns likewise, of
 * which the 4 rows of PW = 2 TX + 2 columns the input transform keeps. */
typedef struct wplane {
  int64_t H, W, ph, pw, OH, OW, TY, TX, TT, PW;
} wplane;

static wplane wplane_of(const graft__conv_geom *g, int op) {
  wplane p = {.H = g->H, .W = g->W, .ph = g->ph, .pw = g->pw, .OH = g->OH, .OW = g->OW};
  if (op == GRAFT__OP_CONV2D_X)
    p = (wplane){.H = g->OH, .W = g->OW, .ph = 2 - g->ph, .pw = 2 - g->pw, .OH = g->H, .OW = g->W};
  p.TY = (p.OH + 1) / 2;
  p.TX = (p.OW + 1) / 2;
  p.TT = p.TY * p.TX;
  p.PW = 2 * p.TX + 2;
  return p;
}

/* Images per gemm chunk (at least 1, at most N). */
static int64_t chunk(const graft__conv_geom *g, int op) {
  const wplane p = wplane_of(g, op);
  const int64_t nb = p.TT > 0 ? (WINO_BLOCKS + p.TT - 1) / p.TT : 1;
  return GRAFT__MAX(GRAFT__MIN(nb, g->N), (int64_t)1);
}

int64_t graft__wino_unit(const graft__conv_geom *g, int op) {
  return GRAFT__MAX(GRAFT__MIN(chunk(g, op) * WINO_UNIT_CHUNKS, g->N), (int64_t)1);
}

/* The distance between the 16 planes of U, V or M (of n elements each):
 * n rounded up to a whole line and one line more, so that the planes of
 * a power-of-two size (32 x 64 kernels: 8 KB) do not all fall in one set
 * of the L1 cache as the transforms write them side by side. */
static int64_t stride(int64_t n) { return graft__size_add_sat(n, 15) / 16 * 16 + 16; }

/* Where a tile's scratch keeps what (offsets in elements, each a multiple
 * of 16): U (the kernels' transform; CONV2D_W: dU), zero (a row of
 * zeros), u and e (the input transform's rows, input_), q (the output
 * transform's 4 rows of blocks; CONV2D_W: the gradient transform's rows,
 * grad_), V and M (a chunk's transformed inputs and products; CONV2D_W:
 * its transformed gradient); M_n: M's elements.  u, e and q are
 * consecutive. */
typedef struct wparts {
  wplane p;
  int64_t U, zero, u, e, q, V, M, total, zero_n, M_n;
} wparts;

static int64_t take(int64_t *at, int64_t n) {
  const int64_t here = *at;
  *at = graft__size_add_sat(*at, graft__size_add_sat(n, 15) / 16 * 16);
  return here;
}

static wparts parts(const graft__conv_geom *g, int op, int64_t O) {
  wparts s = {.p = wplane_of(g, op)};
  const int64_t Og = O / g->G, Cg = g->Cg, w = op == GRAFT__OP_CONV2D_W;
  const int64_t Cin = op == GRAFT__OP_CONV2D_X ? Og : Cg, Cout = op == GRAFT__OP_CONV2D_X ? Cg : Og;
  const int64_t Tn = graft__size_mul_sat(chunk(g, op), s.p.TT); /* a chunk's blocks */
  const int64_t rows = graft__size_mul_sat(s.p.TY, 2 * s.p.TX); /* a plane of u */
  int64_t at = 0;
  s.zero_n = GRAFT__MAX(s.p.W, s.p.OW);
  s.M_n = graft__size_mul_sat(16, stride(graft__size_mul_sat(Cout, Tn)));
  s.U = take(&at, graft__size_mul_sat(16, stride(graft__size_mul_sat(Og, Cg))));
  s.zero = take(&at, s.zero_n);
  s.u = take(&at, graft__size_mul_sat(4, graft__size_add_sat(rows, 4)));
  s.e = take(&at, graft__size_mul_sat(8, s.p.TY));
  s.q = take(&at, w ? graft__size_mul_sat(4, rows) : graft__size_mul_sat(4, Tn));
  s.V = take(&at, graft__size_mul_sat(16, stride(graft__size_mul_sat(Cin, Tn))));
  s.M = take(&at, s.M_n);
  s.total = at;
  return s;
}

int64_t graft__wino_scratch(const graft__conv_geom *g, int op, int64_t O) {
  return parts(g, op, O).total;
}

/* Row r of (G k) G^T into planes 4r .. 4r + 3 of U (us apart) at pair i,
 * from row r of G k, [g0 g1 g2]: G^T's columns give g0, (g0 + g1 + g2) / 2,
 * (g0 - g1 + g2) / 2, g2. */
#define WEIGHT_ROW(T, U, us, r, i, g0, g1, g2, h)                                           \
  do {                                                                                      \
    (U)[4 * (r) * (us) + (i)] = (g0);                                                       \
    (U)[(4 * (r) + 1) * (us) + (i)] = (h) * ((g0) + (g1) + (g2));                           \
    (U)[(4 * (r) + 2) * (us) + (i)] = (h) * ((g0) - (g1) + (g2));                           \
    (U)[(4 * (r) + 3) * (us) + (i)] = (g2);                                                 \
  } while (0)

#define DEF_WINO(S, T, GEMM)                                                                       \
/* U_xi [rows][cols] = (G k G^T)_xi for group grp's kernels: k = w[o][c] at                        \
 * row o, column c (turn 0: CONV2D; rows Og, columns Cg), or w[o][c] turned                        \
 * 180 degrees at row c, column o (turn 1: CONV2D_X; rows Cg, columns Og).                         \
 * Planes of U are us apart. */                                                                    \
static void weights_##S(const T *w, int64_t Og, int64_t Cg, int64_t grp, int turn,                 \
                        T *restrict U, int64_t us) {                                               \
  const int64_t rows = turn ? Cg : Og, cols = turn ? Og : Cg;                                      \
  const int64_t rs = turn ? 9 : 9 * Cg, cs = turn ? 9 * Cg : 9; /* w's steps */                    \
  const T *wg = w + grp * Og * Cg * 9;                                                             \
  const T h = (T)0.5;                                                                              \
  for (int64_t r = 0; r < rows; r++)                                                               \
    for (int64_t c = 0; c < cols; c++) {                                                           \
      const T *k = wg + r * rs + c * cs;                                                           \
      const int64_t i = r * cols + c;                                                              \
      /* the kernel's rows a, b, c (turned: read backwards) */                                     \
      const T a0 = k[turn ? 8 : 0], a1 = k[turn ? 7 : 1], a2 = k[turn ? 6 : 2];                    \
      const T b0 = k[turn ? 5 : 3], b1 = k[4], b2 = k[turn ? 3 : 5];                               \
      const T c0 = k[turn ? 2 : 6], c1 = k[turn ? 1 : 7], c2 = k[turn ? 0 : 8];                    \
      /* G k, row by row of G */                                                                   \
      const T p0 = h * (a0 + b0 + c0), p1 = h * (a1 + b1 + c1), p2 = h * (a2 + b2 + c2);           \
      const T m0 = h * (a0 - b0 + c0), m1 = h * (a1 - b1 + c1), m2 = h * (a2 - b2 + c2);           \
      WEIGHT_ROW(T, U, us, 0, i, a0, a1, a2, h);                                                   \
      WEIGHT_ROW(T, U, us, 1, i, p0, p1, p2, h);                                                   \
      WEIGHT_ROW(T, U, us, 2, i, m0, m1, m2, h);                                                   \
      WEIGHT_ROW(T, U, us, 3, i, c0, c1, c2, h);                                                   \
    }                                                                                              \
}                                                                                                  \
                                                                                                   \
/* dw of group grp's kernels (Og x Cg) = G^T dU G, from dU_xi [Og][Cg]                             \
 * (planes us apart). */                                                                           \
static void dweights_##S(const T *restrict dU, int64_t us, int64_t Og, int64_t Cg,                 \
                         T *restrict dw) {                                                         \
  const int64_t P = Og * Cg;                                                                       \
  const T h = (T)0.5;                                                                              \
  for (int64_t i = 0; i < P; i++) {                                                                \
    T e[3][4]; /* G^T D */                                                                         \
    for (int j = 0; j < 4; j++) {                                                                  \
      const T d0 = dU[j * us + i], d1 = dU[(4 + j) * us + i], d2 = dU[(8 + j) * us + i],           \
              d3 = dU[(12 + j) * us + i];                                                          \
      e[0][j] = d0 + h * (d1 + d2);                                                                \
      e[1][j] = h * (d1 - d2);                                                                     \
      e[2][j] = h * (d1 + d2) + d3;                                                                \
    }                                                                                              \
    for (int r = 0; r < 3; r++) {                                                                  \
      dw[i * 9 + 3 * r] = e[r][0] + h * (e[r][1] + e[r][2]);                                       \
      dw[i * 9 + 3 * r + 1] = h * (e[r][1] - e[r][2]);                                             \
      dw[i * 9 + 3 * r + 2] = h * (e[r][1] + e[r][2]) + e[r][3];                                   \
    }                                                                                              \
  }                                                                                                \
}                                                                                                  \
                                                                                                   \
/* The transforms' passes over n elements, each stream its own restrict                            \
 * pointer so the loops vectorize without overlap checks:                                          \
 *   in_rows   B^T d over rows a, b, c, d:   a - c, b + c, c - b, b - d                            \
 *   in_cols   (B^T d) B over columns of u (4-wide windows at even columns)                        \
 *   gr_rows   A b over rows a, c:           a, a + c, a - c, -c                                   \
 *   gr_cols   (A b) A^T over columns of u (2-wide windows at even columns) */                     \
static inline void in_rows_##S(const T *restrict a, const T *restrict b, const T *restrict c,      \
                               const T *restrict d, int64_t n, T *restrict o0, T *restrict o1,     \
                               T *restrict o2, T *restrict o3) {                                   \
  for (int64_t j = 0; j < n; j++) {                                                                \
    o0[j] = a[j] - c[j];                                                                           \
    o1[j] = b[j] + c[j];                                                                           \
    o2[j] = c[j] - b[j];                                                                           \
    o3[j] = b[j] - d[j];                                                                           \
  }                                                                                                \
}                                                                                                  \
                                                                                                   \
static inline void in_cols_##S(const T *restrict u, int64_t n, T *restrict v0, T *restrict v1,     \
                               T *restrict v2, T *restrict v3) {                                   \
  for (int64_t t = 0; t < n; t++) {                                                                \
    const T a = u[2 * t], b = u[2 * t + 1], c = u[2 * t + 2], d = u[2 * t + 3];                    \
    v0[t] = a - c;                                                                                 \
    v1[t] = b + c;                                                                                 \
    v2[t] = c - b;                                                                                 \
    v3[t] = b - d;                                                                                 \
  }                                                                                                \
}                                                                                                  \
                                                                                                   \
static inline void gr_rows_##S(const T *restrict a, const T *restrict c, int64_t n,                \
                               T *restrict o0, T *restrict o1, T *restrict o2, T *restrict o3) {   \
  for (int64_t j = 0; j < n; j++) { /* o0 from o1 would not be exact: copied as o1's partner */    \
    const T aj = a[j], cj = c[j];                                                                  \
    o1[j] = aj + cj;                                                                               \
    o2[j] = aj - cj;                                                                               \
    o3[j] = -cj;                                                                                   \
    o0[j] = aj;                                                                                    \
  }                                                                                                \
}                                                                                                  \
                                                                                                   \
static inline void gr_cols_##S(const T *restrict u, int64_t n, T *restrict v0, T *restrict v1,     \
                               T *restrict v2, T *restrict v3) {                                   \
  for (int64_t t = 0; t < n; t++) {                                                                \
    const T a = u[2 * t], b = u[2 * t + 1];                                                        \
    v0[t] = a;                                                                                     \
    v1[t] = a + b;                                                                                 \
    v2[t] = a - b;                                                                                 \
    v3[t] = -b;                                                                                    \
  }                                                                                                \
}                                                                                                  \
                                                                                                   \
/* V_xi [c][t0 + ty * TX + tx] = (B^T d B)_xi for the 4x4 block d at rows                          \
 * 2ty, columns 2tx of plane c of in (Cin planes of one image, offset by                           \
 * (ph, pw) in a zero plane); planes of V are vs apart, its rows ld.                               \
 *                                                                                                 \
 * B^T d runs row of blocks by row of blocks into u, 4 planes (k) of TY rows                       \
 * of 2 TX columns: so (B^T d) B is one pass over all TT blocks of a plane,                        \
 * block t reading columns 2t .. 2t + 3.  A row's last block reads 2                               \
 * columns past the row, kept apart in e (4 planes of TY x 2), and is redone                       \
 * from them after the pass.  The caller zeroed u and e, whose columns                             \
 * outside the input's stay zero; zero holds W zeros. */                                           \
GRAFT__SIMD_CLONES                                                                                 \
static void input_##S(const wplane *p, const T *in, int64_t Cin, T *restrict V, int64_t vs,        \
                      int64_t ld, int64_t t0, T *restrict u, T *restrict e, const T *zero) {       \
  const int64_t R = 2 * p->TX, us = p->TY * R + 4, es = 2 * p->TY; /* rows; planes */              \
  /* the input's columns [pw, pw + W) in u's rows and in e */                                      \
  const int64_t j1 = GRAFT__MIN(p->pw + p->W, R), e0 = GRAFT__MAX(p->pw, R) - R;                   \
  const int64_t e1 = GRAFT__MAX(p->pw + p->W, R) - R;                                              \
  for (int64_t c = 0; c < Cin; c++) {                                                              \
    const T *plane = in + c * p->H * p->W;                                                         \
    for (int64_t ty = 0; ty < p->TY; ty++) {                                                       \
      const T *r[4]; /* the block rows' input rows, zero past the plane */                         \
      for (int k = 0; k < 4; k++) {                                                                \
        const int64_t ih = 2 * ty + k - p->ph;                                                     \
        r[k] = ih >= 0 && ih < p->H ? plane + ih * p->W - p->pw : zero - p->pw;                    \
      }                                                                                            \
      T *o = u + ty * R;                                                                           \
      in_rows_##S(r[0] + p->pw, r[1] + p->pw, r[2] + p->pw, r[3] + p->pw, j1 - p->pw,              \
                  o + p->pw, o + us + p->pw, o + 2 * us + p->pw, o + 3 * us + p->pw);              \
      for (int64_t j = e0; j < e1; j++) { /* columns 2 TX and 2 TX + 1 */                          \
        const T *a = r[0] + R + j, *b = r[1] + R + j, *cc = r[2] + R + j, *d = r[3] + R + j;       \
        T *x = e + 2 * ty + j;                                                                     \
        x[0] = *a - *cc;                                                                           \
        x[es] = *b + *cc;                                                                          \
        x[2 * es] = *cc - *b;                                                                      \
        x[3 * es] = *b - *d;                                                                       \
      }                                                                                            \
    }                                                                                              \
    T *v = V + c * ld + t0;                                                                        \
    for (int k = 0; k < 4; k++) {                                                                  \
      const T *uk = u + k * us, *ek = e + k * es;                                                  \
      T *v0 = v + 4 * k * vs, *v1 = v0 + vs, *v2 = v1 + vs, *v3 = v2 + vs;                         \
      in_cols_##S(uk, p->TT, v0, v1, v2, v3);                                                      \
      for (int64_t ty = 0; ty < p->TY; ty++) { /* the rows' last blocks */                         \
        const int64_t t = ty * p->TX + p->TX - 1;                                                  \
        const T a = uk[2 * t], b = uk[2 * t + 1], cc = ek[2 * ty], d = ek[2 * ty + 1];             \
        v0[t] = a - cc;                                                                            \
        v1[t] = b + cc;                                                                            \
        v2[t] = cc - b;                                                                            \
        v3[t] = b - d;                                                                             \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
}                                                                                                  \
                                                                                                   \
/* Gt_xi [o][t0 + ty * TX + tx] = (A b A^T)_xi for the 2x2 block b at rows                         \
 * 2ty, columns 2tx of plane o of g (Og planes OH x OW of one image, zero                          \
 * past the edge); planes of Gt are gs apart, its rows ld.  With                                   \
 * b = [a b; c d], A b has rows [a b], [a+c b+d], [a-c b-d], [-c -d], and                          \
 * a row [r0 r1] times A^T is [r0, r0+r1, r0-r1, -r1].  A b runs row of                            \
 * blocks by row of blocks into u (4 planes of TY rows of 2 TX columns,                            \
 * zeroed by the caller: an odd edge's column stays zero), then (A b) A^T                          \
 * in one pass over the plane's blocks; zero holds OW zeros. */                                    \
GRAFT__SIMD_CLONES                                                                                 \
static void grad_##S(const wplane *p, const T *g, int64_t Og, T *restrict Gt, int64_t gs,          \
                     int64_t ld, int64_t t0, T *restrict u, const T *zero) {                       \
  const int64_t R = 2 * p->TX, us = p->TY * R;                                                     \
  for (int64_t o = 0; o < Og; o++) {                                                               \
    const T *plane = g + o * p->OH * p->OW;                                                        \
    for (int64_t ty = 0; ty < p->TY; ty++) {                                                       \
      const T *r0 = plane + 2 * ty * p->OW;                                                        \
      const T *r1 = 2 * ty + 1 < p->OH ? r0 + p->OW : zero;                                        \
      T *x = u + ty * R;                                                                           \
      gr_rows_##S(r0, r1, p->OW, x, x + us, x + 2 * us, x + 3 * us);                               \
    }                                                                                              \
    T *v = Gt + o * ld + t0;                                                                       \
    for (int k = 0; k < 4; k++)                                                                    \
      gr_cols_##S(u + k * us, p->TT, v + 4 * k * gs, v + (4 * k + 1) * gs, v + (4 * k + 2) * gs,   \
                  v + (4 * k + 3) * gs);                                                           \
  }                                                                                                \
}                                                                                                  \
                                                                                                   \
/* The 4 outputs of each of Tn blocks (A^T m A) from M_xi [Tn] (planes ms                          \
 * apart) into q0..q3 (rows 0 and 1 of the block, columns 0 and 1). */                             \
GRAFT__SIMD_CLONES                                                                                 \
static void block_out_##S(const T *restrict m, int64_t ms, int64_t Tn, T *restrict q0,             \
                          T *restrict q1, T *restrict q2, T *restrict q3) {                        \
  const T *restrict m0 = m, *restrict m1 = m0 + ms, *restrict m2 = m1 + ms;                        \
  const T *restrict m3 = m2 + ms, *restrict m4 = m3 + ms, *restrict m5 = m4 + ms;                  \
  const T *restrict m6 = m5 + ms, *restrict m7 = m6 + ms, *restrict m8 = m7 + ms;                  \
  const T *restrict m9 = m8 + ms, *restrict m10 = m9 + ms, *restrict m11 = m10 + ms;               \
  const T *restrict m12 = m11 + ms, *restrict m13 = m12 + ms, *restrict m14 = m13 + ms;            \
  const T *restrict m15 = m14 + ms;                                                                \
  for (int64_t t = 0; t < Tn; t++) {                                                               \
    /* A^T m: rows s (0) and d (1) */                                                              \
    const T s0 = m0[t] + m4[t] + m8[t], s1 = m1[t] + m5[t] + m9[t];                                \
    const T s2 = m2[t] + m6[t] + m10[t], s3 = m3[t] + m7[t] + m11[t];                              \
    const T d0 = m4[t] - m8[t] - m12[t], d1 = m5[t] - m9[t] - m13[t];                              \
    const T d2 = m6[t] - m10[t] - m14[t], d3 = m7[t] - m11[t] - m15[t];                            \
    q0[t] = s0 + s1 + s2;                                                                          \
    q1[t] = s1 - s2 - s3;                                                                          \
    q2[t] = d0 + d1 + d2;                                                                          \
    q3[t] = d1 - d2 - d3;                                                                          \
  }                                                                                                \
}                                                                                                  \
                                                                                                   \
/* Output planes OH x OW of nb images (image i's Cout planes at out + i * os)                      \
 * from M_xi [Cout][Tn] (planes ms apart, left zero), cut at the planes'                           \
 * edge; q holds 4 * Tn. */                                                                        \
GRAFT__SIMD_CLONES                                                                                 \
static void output_##S(const wplane *p, T *M, int64_t ms, int64_t Cout, int64_t Tn,                \
                       int64_t nb, T *out, int64_t os, T *q) {                                     \
  T *q0 = q, *q1 = q0 + Tn, *q2 = q1 + Tn, *q3 = q2 + Tn;                                          \
  const int64_t full = p->OW / 2, OHW = p->OH * p->OW;                                             \
  for (int64_t o = 0; o < Cout; o++) {                                                             \
    block_out_##S(M + o * Tn, ms, Tn, q0, q1, q2, q3);                                             \
    if (o % 8 == 7 || o == Cout - 1) /* a few channels' lines, while at hand */                    \
      for (int xi = 0; xi < 16; xi++)                                                              \
        memset(M + xi * ms + o / 8 * 8 * Tn, 0, (size_t)((o % 8 + 1) * Tn) * sizeof(T));           \
    for (int64_t i = 0; i < nb; i++)                                                               \
      for (int64_t ty = 0; ty < p->TY; ty++) {                                                     \
        const int64_t t = i * p->TT + ty * p->TX;                                                  \
        const T *a = q0 + t, *b = q1 + t, *c = q2 + t, *d = q3 + t;                                \
        T *y0 = out + i * os + o * OHW + 2 * ty * p->OW, *y1 = y0 + p->OW;                         \
        for (int64_t tx = 0; tx < full; tx++) {                                                    \
          y0[2 * tx] = a[tx];                                                                      \
          y0[2 * tx + 1] = b[tx];                                                                  \
        }                                                                                          \
        if (p->OW % 2) y0[2 * full] = a[full];                                                     \
        if (2 * ty + 1 == p->OH) continue;                                                         \
        for (int64_t tx = 0; tx < full; tx++) {                                                    \
          y1[2 * tx] = c[tx];                                                                      \
          y1[2 * tx + 1] = d[tx];                                                                  \
        }                                                                                          \
        if (p->OW % 2) y1[2 * full] = c[full];                                                     \
      }                                                                                            \
  }                                                                                                \
}                                                                                                  \
                                                                                                   \
void graft__wino_##S(int op, const graft__conv_geom *g, int64_t O, T *x, T *w, T *y,               \
                     int64_t begin, int64_t end, T *scratch) {                                     \
  const int64_t Og = O / g->G, Cg = g->Cg, nb0 = chunk(g, op), us = stride(Og * Cg);               \
  const wparts s = parts(g, op, O);                                                                \
  const wplane *p = &s.p;                                                                          \
  T *zero = scratch + s.zero, *u = scratch + s.u, *e = scratch + s.e, *V = scratch + s.V;          \
  T *M = scratch + s.M, *U = scratch + s.U, *q = scratch + s.q;                                    \
  memset(zero, 0, (size_t)s.zero_n * sizeof(T));                                                   \
  memset(u, 0, (size_t)(s.V - s.u) * sizeof(T)); /* u, e and q */                                  \
  if (op == GRAFT__OP_CONV2D_W) { /* units: groups; w is the output, U holds dU */                 \
    for (int64_t grp = begin; grp < end; grp++) {                                                  \
      memset(U, 0, (size_t)(16 * us) * sizeof(T));                                                 \
      for (int64_t n0 = 0; n0 < g->N; n0 += nb0) {                                                 \
        const int64_t nb = GRAFT__MIN(nb0, g->N - n0), Tn = nb * p->TT, ld = Tn;                   \
        const int64_t vs = stride(Cg * ld), gs = stride(Og * ld);                                  \
        for (int64_t i = 0; i < nb; i++) {                                                         \
          input_##S(p, x + ((n0 + i) * g->C + grp * Cg) * g->H * g->W, Cg, V, vs, ld,              \
                    i * p->TT, u, e, zero);                                                        \
          grad_##S(p, y + ((n0 + i) * O + grp * Og) * g->OHW, Og, M, gs, ld, i * p->TT, q,         \
                   zero);                                                                          \
        }                                                                                          \
        for (int xi = 0; xi < 16; xi++)                                                            \
          GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Og, (int)Cg, (int)Tn, 1, M + xi * gs, \
               (int)ld, V + xi * vs, (int)ld, 1, U + xi * us, (int)Cg);                            \
      }                                                                                            \
      dweights_##S(U, us, Og, Cg, w + grp * Og * Cg * 9);                                          \
    }                                                                                              \
    return;                                                                                        \
  }                                                                                                \
  /* CONV2D: x -> y over Cg -> Og channels; CONV2D_X: y (the gradient) -> x                        \
   * over Og -> Cg channels with the turned kernels */                                             \
  const int fwd = op == GRAFT__OP_CONV2D;                                                          \
  const int64_t Cin = fwd ? Cg : Og, Cout = fwd ? Og : Cg;                                         \
  const int64_t in_hw = fwd ? g->H * g->W : g->OHW, out_hw = fwd ? g->OHW : g->H * g->W;           \
  const int64_t in_is = (fwd ? g->C : O) * in_hw, out_is = (fwd ? O : g->C) * out_hw;              \
  const T *in = fwd ? x : y;                                                                       \
  T *out = fwd ? y : x;                                                                            \
  /* The gemms add (beta 1) into products cleared first, then by each                              \
   * unit's output transform as it reads them: OpenBLAS's beta 0 clears C                          \
   * in a slow pass of its own, a third of a depth-32 gemm's time.  A                              \
   * smaller last chunk uses the start of the same planes. */                                      \
  int64_t have = -1; /* the group whose kernels U holds */                                         \
  const int64_t ms = stride(Cout * nb0 * p->TT);                                                   \
  memset(M, 0, (size_t)s.M_n * sizeof(T));                                                         \
  for (int64_t unit = begin; unit < end; unit++) {                                                 \
    const int64_t grp = unit % g->G, run = graft__wino_unit(g, op), r0 = unit / g->G * run;        \
    if (grp != have) weights_##S(w, Og, Cg, grp, !fwd, U, us);                                     \
    have = grp;                                                                                    \
    for (int64_t n0 = r0; n0 < GRAFT__MIN(r0 + run, g->N); n0 += nb0) {                            \
      const int64_t nb = GRAFT__MIN(nb0, GRAFT__MIN(r0 + run, g->N) - n0), Tn = nb * p->TT;        \
      const int64_t ld = Tn, vs = stride(Cin * ld);                                                \
      for (int64_t i = 0; i < nb; i++)                                                             \
        input_##S(p, in + (n0 + i) * in_is + grp * Cin * in_hw, Cin, V, vs, ld, i * p->TT, u, e,   \
                  zero);                                                                           \
      for (int xi = 0; xi < 16; xi++)                                                              \
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Cout, (int)Tn, (int)Cin, 1,           \
             U + xi * us, (int)Cin, V + xi * vs, (int)ld, 1, M + xi * ms, (int)Tn);                \
      output_##S(p, M, ms, Cout, Tn, nb, out + n0 * out_is + grp * Cout * out_hw, out_is, q);      \
    }                                                                                              \
  }                                                                                                \
}

DEF_WINO(f32, float, cblas_sgemm)
DEF_WINO(f64, double, cblas_dgemm)
