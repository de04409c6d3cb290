/* graft kernels: conv2d's parts (im2col / col2im, and its products as one
 * CBLAS gemm per image and group) and max pooling (f32, f64).
 *
 * Units are output elements for all but the products (see below) and the
 * max-pool gradient (image planes), and every output element is
 * computed the same way whatever range holds it: im2col copies, col2im sums
 * an element's window contributions in (kh, kw) order, the pools look at
 * one window (or one element's windows) in a fixed order.  So any split
 * of the units gives the same bits.
 *
 * Geometry (attr.conv): image [N, C, H, W], columns [N, G, R, OH * OW]
 * (image-major: each image's block is contiguous, so the gemms read and
 * write it with leading dimension OH * OW and im2col / col2im stream it)
 * with R = C/G * KH * KW rows (channel, kh, kw) and columns (oh, ow).  Window (oh, ow) covers input rows
 * oh * sh - ph + kh * dh and columns ow * sw - pw + kw * dw.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_int.h"

typedef struct conv_geom {
  int64_t N, C, H, W, G, Cg, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, OHW, R, S; /* S = N * OHW */
} conv_geom;

/* The geometry of node k over an image of shape x (N, C, H, W). */
static graft_status geom_of(const graft__kargs *k, const int64_t *x, conv_geom *g) {
  const struct graft__conv_attr *a = &k->node->attr.conv;
  *g = (conv_geom){.N = x[0], .C = x[1], .H = x[2], .W = x[3],
                   .G = a->groups, .KH = a->k[0], .KW = a->k[1], .sh = a->s[0], .sw = a->s[1],
                   .ph = a->p[0], .pw = a->p[1], .dh = a->d[0], .dw = a->d[1]};
  g->OH = graft__conv_out_dim(g->H, g->KH, g->sh, g->ph, g->dh);
  g->OW = graft__conv_out_dim(g->W, g->KW, g->sw, g->pw, g->dw);
  if (g->G < 1 || g->C % g->G || g->OH < 0 || g->OW < 0)
    return graft__kernel_internal(k, "bad sweep over a [%lld,%lld,%lld,%lld] image",
                                  (long long)g->N, (long long)g->C, (long long)g->H,
                                  (long long)g->W);
  g->Cg = g->C / g->G;
  g->OHW = g->OH * g->OW;
  g->R = g->Cg * g->KH * g->KW;
  g->S = g->N * g->OHW;
  return GRAFT_OK;
}

/* The geometry of node k over image view x (checked against the attr). */
static graft_status geom(const graft__kargs *k, const graft__tview *x, conv_geom *g) {
  if (x->rank != 4)
    return graft__kernel_internal(k, "image of rank %d", x->rank);
  if (x->dtype != GRAFT_F32 && x->dtype != GRAFT_F64)
    return graft__kernel_bad_dtype(k, x->dtype);
  return geom_of(k, x->shape, g);
}

static graft_status check_out(const graft__kargs *k, int64_t begin, int64_t end, int64_t numel,
                              const graft__tview *like) {
  if (k->out->numel != numel || k->out->dtype != like->dtype)
    return graft__kernel_internal(k, "output of %lld elements, expected %lld",
                                  (long long)k->out->numel, (long long)numel);
  return graft__kernel_check_units(k, begin, end, numel);
}

/* Floor and ceiling of a / b for b > 0 and any a. */
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

/* The outputs ow in [lo, hi) of a row sweep whose input column
 * ow * s + off lies in [c0, c1), within [0, n_out). */
static inline void sweep_range(int64_t c0, int64_t c1, int64_t s, int64_t off, int64_t n_out,
                               int64_t *lo, int64_t *hi) {
  if (s == 1) {
    *lo = GRAFT__MAX(c0 - off, (int64_t)0);
    *hi = GRAFT__MIN(c1 - off, n_out);
  } else {
    *lo = GRAFT__MAX(ceil_div(c0 - off, s), (int64_t)0);
    *hi = GRAFT__MIN(floor_div(c1 - 1 - off, s) + 1, n_out);
  }
  if (*hi < *lo) *hi = *lo;
}

/* ---- im2col / col2im ---------------------------------------------------- */

/* Output lines (one column row's run over ow, at one oh) are walked in
 * order; the coordinates of the first are divided out once, later ones
 * step, and a column row's (image, group, row) once per OH lines. */
#define DEF_IM2COL(NAME, T)                                                               \
  static void NAME(const conv_geom *g, const T *x, T *out, int64_t begin, int64_t end) {  \
    const int64_t KK = g->KH * g->KW;                                                     \
    int64_t q = begin / g->OHW, oh = begin % g->OHW / g->OW, ow0 = begin % g->OW;         \
    for (int64_t i = begin; i < end; q++, oh = 0) {                                       \
      /* column row q: image n, group grp, row r = (channel, kh, kw) */                   \
      const int64_t n = q / (g->G * g->R), grp = q / g->R % g->G, r = q % g->R;           \
      const int64_t c = grp * g->Cg + r / KK, kh = r % KK / g->KW, kw = r % g->KW;        \
      const int64_t off = kw * g->dw - g->pw;                                             \
      const T *img = x + (n * g->C + c) * g->H * g->W;                                    \
      int64_t vlo, vhi; /* the ow whose input column is inside the row */                 \
      sweep_range(0, g->W, g->sw, off, g->OW, &vlo, &vhi);                                \
      for (; oh < g->OH && i < end; oh++, ow0 = 0) {                                      \
        const int64_t ow1 = GRAFT__MIN(g->OW, ow0 + (end - i));                           \
        T *o = out + i - ow0; /* o[ow] is column (oh, ow) */                              \
        const int64_t ih = oh * g->sh - g->ph + kh * g->dh;                               \
        int64_t lo = ow0, hi = ow0;                                                       \
        if (ih >= 0 && ih < g->H) {                                                       \
          lo = GRAFT__MIN(GRAFT__MAX(vlo, ow0), ow1);                                     \
          hi = GRAFT__MAX(GRAFT__MIN(vhi, ow1), lo);                                      \
        }                                                                                 \
        for (int64_t ow = ow0; ow < lo; ow++) o[ow] = 0;                                  \
        if (hi > lo) {                                                                    \
          const T *src = img + ih * g->W; /* the input row */                             \
          if (g->sw == 1)                                                                 \
            memcpy(o + lo, src + lo + off, (size_t)(hi - lo) * sizeof(T));                \
          else                                                                            \
            for (int64_t ow = lo; ow < hi; ow++) o[ow] = src[ow * g->sw + off];           \
        }                                                                                 \
        for (int64_t ow = hi; ow < ow1; ow++) o[ow] = 0;                                  \
        i += ow1 - ow0;                                                                   \
      }                                                                                   \
    }                                                                                     \
  }

DEF_IM2COL(im2col_f32, float)
DEF_IM2COL(im2col_f64, double)

graft_status graft__k_IM2COL(const graft__kargs *k, int64_t begin, int64_t end) {
  conv_geom g;
  graft_status st = geom(k, k->in[0], &g);
  if (st == GRAFT_OK) st = check_out(k, begin, end, g.G * g.R * g.S, k->in[0]);
  if (st != GRAFT_OK || begin >= end) return st;
  if (k->out->dtype == GRAFT_F32)
    im2col_f32(&g, k->in[0]->data, k->out->data, begin, end);
  else
    im2col_f64(&g, k->in[0]->data, k->out->data, begin, end);
  return GRAFT_OK;
}

/* Each image element is the sum of the column entries that copied it, in
 * (kh, kw) order: a run of one image row is zeroed, then each (kh, kw)
 * adds its contiguous (or strided) slice of a column row. */
#define DEF_COL2IM(NAME, T)                                                               \
  static void NAME(const conv_geom *g, const T *cols, T *out, int64_t begin, int64_t end) { \
    const int64_t line0 = begin / g->W;                                                   \
    int64_t iw0 = begin % g->W, ih = line0 % g->H, c = line0 / g->H % g->C;               \
    int64_t n = line0 / (g->H * g->C);                                                    \
    for (int64_t i = begin; i < end; iw0 = 0) {                                           \
      const int64_t iw1 = GRAFT__MIN(g->W, iw0 + (end - i));                              \
      const int64_t grp = c / g->Cg, cg = c % g->Cg;                                      \
      T *o = out + i - iw0; /* o[iw] is image element (n, c, ih, iw) */                   \
      for (int64_t iw = iw0; iw < iw1; iw++) o[iw] = 0;                                   \
      for (int64_t kh = 0; kh < g->KH; kh++) {                                            \
        const int64_t th = ih + g->ph - kh * g->dh;                                       \
        if (th < 0 || (g->sh > 1 && th % g->sh)) continue;                                \
        const int64_t oh = g->sh > 1 ? th / g->sh : th;                                   \
        if (oh >= g->OH) continue;                                                        \
        const T *src0 = cols + (((n * g->G + grp) * g->R + (cg * g->KH + kh) * g->KW) *   \
                                g->OHW + oh * g->OW); /* row kw is src0 + kw * OHW */     \
        if (g->sw == 1 && g->dw == 1) {                                                   \
          /* ow = iw + pw - kw: inside [lo, hi) every kw has its ow in range */          \
          const int64_t lo = GRAFT__MIN(GRAFT__MAX(iw0, g->KW - 1 - g->pw), iw1);         \
          const int64_t hi = GRAFT__MAX(GRAFT__MIN(iw1, g->OW - g->pw), lo);              \
          for (int part = 0; part < 3; part++) { /* edge, inside, edge */                \
            const int64_t a = part == 0 ? iw0 : part == 1 ? lo : hi;                      \
            const int64_t b = part == 0 ? lo : part == 1 ? hi : iw1;                      \
            const T *s = src0 + g->pw; /* element j, row kw: s[kw * (OHW - 1) + j] */     \
            if (part == 1 && g->KW == 3) {                                                \
              const T *s1 = s + (g->OHW - 1), *s2 = s + 2 * (g->OHW - 1);                 \
              for (int64_t j = a; j < b; j++) o[j] = o[j] + s[j] + s1[j] + s2[j];         \
              continue;                                                                   \
            }                                                                             \
            for (int64_t j = a; j < b; j++) {                                             \
              T acc = o[j];                                                               \
              for (int64_t kw = 0; kw < g->KW; kw++) {                                    \
                const int64_t ow = j + g->pw - kw;                                        \
                if (part == 1 || (ow >= 0 && ow < g->OW)) acc += src0[kw * g->OHW + ow];  \
              }                                                                           \
              o[j] = acc;                                                                 \
            }                                                                             \
          }                                                                               \
          continue;                                                                       \
        }                                                                                 \
        for (int64_t kw = 0; kw < g->KW; kw++) {                                          \
          const int64_t off = kw * g->dw - g->pw;                                         \
          const T *src = src0 + kw * g->OHW;                                              \
          int64_t lo, hi;                                                                 \
          sweep_range(iw0, iw1, g->sw, off, g->OW, &lo, &hi);                             \
          if (g->sw == 1) {                                                               \
            for (int64_t ow = lo; ow < hi; ow++) o[ow + off] += src[ow];                  \
          } else {                                                                        \
            for (int64_t ow = lo; ow < hi; ow++) o[ow * g->sw + off] += src[ow];          \
          }                                                                               \
        }                                                                                 \
      }                                                                                   \
      i += iw1 - iw0;                                                                     \
      if (++ih == g->H) {                                                                 \
        ih = 0;                                                                           \
        if (++c == g->C) {                                                                \
          c = 0;                                                                          \
          n++;                                                                            \
        }                                                                                 \
      }                                                                                   \
    }                                                                                     \
  }

DEF_COL2IM(col2im_f32, float)
DEF_COL2IM(col2im_f64, double)

graft_status graft__k_COL2IM(const graft__kargs *k, int64_t begin, int64_t end) {
  conv_geom g;
  graft_status st = geom(k, k->out, &g);
  const graft__tview *cols = k->in[0];
  if (st == GRAFT_OK && (cols->numel != g.G * g.R * g.S || cols->dtype != k->out->dtype))
    st = graft__kernel_internal(k, "columns of %lld elements, expected %lld",
                                (long long)cols->numel, (long long)(g.G * g.R * g.S));
  if (st == GRAFT_OK) st = graft__kernel_check_units(k, begin, end, k->out->numel);
  if (st != GRAFT_OK || begin >= end) return st;
  if (k->out->dtype == GRAFT_F32)
    col2im_f32(&g, cols->data, k->out->data, begin, end);
  else
    col2im_f64(&g, cols->data, k->out->data, begin, end);
  return GRAFT_OK;
}

/* ---- the products: one gemm per image and group ---------------------------
 *
 * With W_g the weight rows of group g ([O/G, R]), c_ng the columns of
 * image n in group g ([R, OH*OW], contiguous) and y_ng its output channels
 * ([O/G, OH*OW] of NCHW y):
 *   CONV_MM       y_ng = W_g c_ng             units (n, g), one gemm each
 *   CONV_MM_COLS  c_ng = W_g^T y_ng           units (n, g), one gemm each
 *   CONV_MM_W     W_g = sum over n of y_ng c_ng^T, in increasing n (one gemm
 *                 per image accumulating into W_g)   units g
 * A unit's gemms are the same calls whatever tile holds it, and the weight
 * gradient's sum over the batch never splits, so every tiling gives the
 * same bits. */

/* The image shape of a CONV_MM* node, whose batch dim is that of its NCHW
 * operand (the output of CONV_MM, input 1 of CONV_MM_COLS, input 0 of
 * CONV_MM_W). */
static const graft__tview *nchw_of(const graft__kargs *k) {
  switch (k->node->op) {
  case GRAFT__OP_CONV_MM: return k->out;
  case GRAFT__OP_CONV_MM_COLS: return k->in[1];
  default: return k->in[0];
  }
}

int64_t graft__conv_units(const graft__kargs *k) {
  if (k->node->op == GRAFT__OP_MAX_POOL2D_GRAD) /* image planes */
    return k->in[0]->rank == 4 ? graft__size_mul_sat(k->in[0]->shape[0], k->in[0]->shape[1]) : 0;
  const graft__tview *y = nchw_of(k);
  const int64_t G = k->node->attr.conv.groups;
  if (k->node->op == GRAFT__OP_CONV_MM_W) return G;
  return y->rank == 4 ? graft__size_mul_sat(y->shape[0], G) : 0;
}

static graft_status mm_setup(const graft__kargs *k, int64_t begin, int64_t end, conv_geom *g) {
  const graft__tview *y = nchw_of(k);
  const graft__node *n = k->node;
  if (y->rank != 4 || k->n_in != 2)
    return graft__kernel_internal(k, "rank %d image operand", y->rank);
  const int64_t x[4] = {y->shape[0], n->attr.conv.x[1], n->attr.conv.x[2], n->attr.conv.x[3]};
  graft_status st = geom_of(k, x, g);
  if (st != GRAFT_OK) return st;
  const graft__tview *w = n->op == GRAFT__OP_CONV_MM_W ? k->out : k->in[0];
  const graft__tview *cols = n->op == GRAFT__OP_CONV_MM_COLS ? k->out : k->in[1];
  if (w->dtype != y->dtype || cols->dtype != y->dtype || (w->dtype != GRAFT_F32 && w->dtype != GRAFT_F64))
    return graft__kernel_bad_dtype(k, w->dtype);
  if (w->rank != 4 || w->shape[0] != y->shape[1] || w->shape[0] % g->G ||
      w->numel != w->shape[0] * g->R || cols->numel != g->G * g->R * g->S ||
      g->OH != y->shape[2] || g->OW != y->shape[3])
    return graft__kernel_internal(k, "operands do not match the sweep");
  if (w->shape[0] / g->G > INT_MAX || g->R > INT_MAX || g->OHW > INT_MAX) {
    if (k->msg) graft__msgf(k->msg, "gemm sizes exceed the BLAS int range");
    return GRAFT_EUNSUPPORTED;
  }
  return graft__kernel_check_units(k, begin, end, graft__conv_units(k));
}

#define DEF_CONV_MM(NAME, T, GEMM)                                                            \
  static void NAME(const graft__kargs *k, const conv_geom *g, int64_t begin, int64_t end) {  \
    const int op = k->node->op;                                                             \
    const int64_t O = nchw_of(k)->shape[1], Og = O / g->G, R = g->R, P = g->OHW;            \
    const int m = (int)Og, r = (int)R, p = (int)P;                                          \
    const T *w = op == GRAFT__OP_CONV_MM_W ? NULL : k->in[0]->data;                         \
    if (op == GRAFT__OP_CONV_MM) {                                                          \
      const T *cols = k->in[1]->data;                                                       \
      T *y = k->out->data;                                                                  \
      for (int64_t u = begin; u < end; u++) {                                               \
        const int64_t n = u / g->G, grp = u % g->G;                                         \
        T *yb = y + (n * O + grp * Og) * P;                                                 \
        if (R == 0) memset(yb, 0, (size_t)(Og * P) * sizeof(T));                            \
        else GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, p, r, 1, w + grp * Og * R, r, \
                  cols + (n * g->G + grp) * R * P, p, 0, yb, p);                            \
      }                                                                                     \
    } else if (op == GRAFT__OP_CONV_MM_COLS) {                                              \
      const T *y = k->in[1]->data;                                                          \
      T *cols = k->out->data;                                                               \
      for (int64_t u = begin; u < end; u++) {                                               \
        const int64_t n = u / g->G, grp = u % g->G;                                         \
        T *cb = cols + (n * g->G + grp) * R * P;                                            \
        if (Og == 0) memset(cb, 0, (size_t)(R * P) * sizeof(T));                            \
        else GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, r, p, m, 1, w + grp * Og * R, r, \
                  y + (n * O + grp * Og) * P, p, 0, cb, p);                                 \
      }                                                                                     \
    } else {                                                                                \
      const T *y = k->in[0]->data, *cols = k->in[1]->data;                                  \
      T *dw = k->out->data;                                                                 \
      for (int64_t grp = begin; grp < end; grp++) {                                         \
        T *wb = dw + grp * Og * R;                                                          \
        if (g->N == 0 || P == 0) memset(wb, 0, (size_t)(Og * R) * sizeof(T));               \
        for (int64_t n = 0; n < g->N && P > 0; n++)                                         \
          GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, m, r, p, 1, y + (n * O + grp * Og) * P, \
               p, cols + (n * g->G + grp) * R * P, p, n ? 1 : 0, wb, r);                     \
      }                                                                                     \
    }                                                                                       \
  }

DEF_CONV_MM(conv_mm_f32, float, cblas_sgemm)
DEF_CONV_MM(conv_mm_f64, double, cblas_dgemm)

static graft_status run_mm(const graft__kargs *k, int64_t begin, int64_t end) {
  conv_geom g;
  graft_status st = mm_setup(k, begin, end, &g);
  if (st != GRAFT_OK || begin >= end) return st;
  if (k->out->dtype == GRAFT_F32)
    conv_mm_f32(k, &g, begin, end);
  else
    conv_mm_f64(k, &g, begin, end);
  return GRAFT_OK;
}

/* The table's entry of op E: RUN, which tells the ops apart by k->node. */
#define KERNEL_VIA(E, RUN)                                                               \
  graft_status graft__k_##E(const graft__kargs *k, int64_t begin, int64_t end) {         \
    return RUN(k, begin, end);                                                           \
  }

KERNEL_VIA(CONV_MM, run_mm)
KERNEL_VIA(CONV_MM_W, run_mm)
KERNEL_VIA(CONV_MM_COLS, run_mm)

/* ---- max pooling -------------------------------------------------------- */

/* The argmax of window (oh, ow) of an H x W plane as ih * W + iw, or -1
 * for a window with no element, and its value in *val: the first maximum
 * in row-major window order, or the first NaN.  Which element wins is data
 * (often random), so the common path has no data-dependent branch: the
 * maximum by selects, then the first element equal to it by a backward
 * scan of selects (index_too 0: the value only).  A window holding NaN
 * takes a plain loop.  SCAN does rows [kh0, kh1) and columns [kw0, kw1)
 * of the window at win (row length W); called with constant bounds for a
 * whole 2x2 window (the usual pool), its loops unroll. */
#define DEF_ARGMAX(NAME, T)                                                           \
  static inline __attribute__((always_inline)) int64_t NAME##_scan(                  \
      const T *win, int64_t W, int64_t kh0, int64_t kh1, int64_t kw0, int64_t kw1,    \
      int index_too, T *val) {                                                        \
    T m = win[kh0 * W + kw0];                                                         \
    int nan = 0;                                                                      \
    for (int64_t kh = kh0; kh < kh1; kh++)                                            \
      for (int64_t kw = kw0; kw < kw1; kw++) {                                        \
        const T v = win[kh * W + kw];                                                 \
        m = v > m ? v : m;                                                            \
        nan |= v != v;                                                                \
      }                                                                               \
    int64_t best = kh0 * W + kw0;                                                     \
    if (nan) {                                                                        \
      for (int64_t kh = kh0; kh < kh1 && win[best] == win[best]; kh++)                \
        for (int64_t kw = kw0; kw < kw1; kw++)                                        \
          if (win[kh * W + kw] != win[kh * W + kw]) {                                 \
            best = kh * W + kw;                                                       \
            break;                                                                    \
          }                                                                           \
      m = win[best];                                                                  \
    } else if (index_too) {                                                           \
      for (int64_t kh = kh1 - 1; kh >= kh0; kh--)                                     \
        for (int64_t kw = kw1 - 1; kw >= kw0; kw--)                                   \
          best += (kh * W + kw - best) & -(int64_t)(win[kh * W + kw] == m);           \
    }                                                                                 \
    *val = m;                                                                         \
    return best;                                                                      \
  }                                                                                   \
  static inline __attribute__((always_inline)) int64_t NAME(                          \
      const conv_geom *g, const T *plane, int64_t oh, int64_t ow, int index_too, T *val) { \
    const int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;                   \
    const int64_t kh0 = GRAFT__MAX(-h0, (int64_t)0), kh1 = GRAFT__MIN(g->KH, g->H - h0); \
    const int64_t kw0 = GRAFT__MAX(-w0, (int64_t)0), kw1 = GRAFT__MIN(g->KW, g->W - w0); \
    if (kh0 >= kh1 || kw0 >= kw1) return -1;                                          \
    const T *win = plane + h0 * g->W + w0;                                            \
    const int64_t at = kh0 == 0 && kw0 == 0 && kh1 == 2 && kw1 == 2                   \
                           ? NAME##_scan(win, g->W, 0, 2, 0, 2, index_too, val)       \
                           : NAME##_scan(win, g->W, kh0, kh1, kw0, kw1, index_too, val); \
    return h0 * g->W + w0 + at;                                                       \
  }

/* The usual pool, 2x2 windows at stride 2 without padding: each window
 * is a whole 2x2 block, no two overlap, and straight-line code serves. */
static int pool_2x2(const conv_geom *g) {
  return g->KH == 2 && g->KW == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0;
}

/* MAX_POOL2D (sel NULL): out[i] = the window's max; MAX_POOL2D_SELECT:
 * out[i] = sel at the window's argmax.  Runs of one output row are walked;
 * a 2x2 max pool's run takes selects only (a run holding NaN is redone by
 * the general path, which gives the same value to every other window). */
#define DEF_POOL(NAME, ARGMAX, T)                                                     \
  static void NAME(const conv_geom *g, const T *x, const T *sel, T *out, int64_t begin, \
                   int64_t end) {                                                     \
    const int64_t HW = g->H * g->W;                                                   \
    const int fast = !sel && pool_2x2(g);                                             \
    int64_t plane = begin / g->OHW, oh = begin % g->OHW / g->OW, ow0 = begin % g->OW; \
    for (int64_t i = begin; i < end; ow0 = 0) {                                       \
      const int64_t ow1 = GRAFT__MIN(g->OW, ow0 + (end - i));                         \
      const T *xp = x + plane * HW;                                                   \
      T *o = out + i - ow0; /* o[ow] is output (plane, oh, ow) */                     \
      int nan = 0;                                                                    \
      if (fast) {                                                                     \
        const T *r0 = xp + 2 * oh * g->W, *r1 = r0 + g->W;                            \
        for (int64_t ow = ow0; ow < ow1; ow++) {                                      \
          const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1]; \
          T m = a;                                                                    \
          m = b > m ? b : m;                                                          \
          m = c > m ? c : m;                                                          \
          m = d > m ? d : m;                                                          \
          nan |= (a != a) | (b != b) | (c != c) | (d != d);                           \
          o[ow] = m;                                                                  \
        }                                                                             \
      }                                                                               \
      if (!fast || nan)                                                               \
        for (int64_t ow = ow0; ow < ow1; ow++) {                                      \
          T m;                                                                        \
          const int64_t a = ARGMAX(g, xp, oh, ow, sel != NULL, &m);                   \
          o[ow] = a < 0 ? (sel ? 0 : -INFINITY) : sel ? sel[plane * HW + a] : m;      \
        }                                                                             \
      i += ow1 - ow0;                                                                 \
      if (++oh == g->OH) {                                                            \
        oh = 0;                                                                       \
        plane++;                                                                      \
      }                                                                               \
    }                                                                                 \
  }

/* MAX_POOL2D_GRAD, units planes (n, c): each plane is zeroed, then every
 * window in (oh, ow) order adds its cotangent at its argmax, so an element
 * sums its windows' cotangents in that order whatever the tiling.  In a
 * 2x2 pool each element is in one window at most, and a row of windows is
 * done at once without branches: each element gets 0 + g if it is its
 * window's first maximum, else 0 (the same bits); a row holding NaN is
 * redone by the general path. */
#define DEF_POOL_GRAD(NAME, ARGMAX, T)                                                \
  static void NAME(const conv_geom *g, const T *x, const T *cot, T *out, int64_t begin, \
                   int64_t end) {                                                     \
    const int64_t HW = g->H * g->W, W = g->W;                                         \
    const int fast = pool_2x2(g);                                                     \
    for (int64_t plane = begin; plane < end; plane++) {                               \
      T *o = out + plane * HW;                                                        \
      const T *xp = x + plane * HW, *gp = cot + plane * g->OHW;                       \
      if (!fast || g->H % 2 || g->W % 2) memset(o, 0, (size_t)HW * sizeof(T));        \
      for (int64_t oh = 0; oh < g->OH; oh++) {                                        \
        const T *r0 = xp + 2 * oh * W, *r1 = r0 + W, *gr = gp + oh * g->OW;           \
        T *o0 = o + 2 * oh * W, *o1 = o0 + W;                                         \
        int nan = 0;                                                                  \
        for (int64_t ow = 0; fast && ow < g->OW; ow++) {                              \
          const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1]; \
          T m = a;                                                                    \
          m = b > m ? b : m;                                                          \
          m = c > m ? c : m;                                                          \
          m = d > m ? d : m;                                                          \
          nan |= (a != a) | (b != b) | (c != c) | (d != d);                           \
          const int fa = a == m, fb = !fa & (b == m), fc = !(fa | fb) & (c == m);     \
          const int fd = !(fa | fb | fc);                                             \
          const T G = (T)0 + gr[ow];                                                  \
          o0[2 * ow] = fa ? G : (T)0;                                                 \
          o0[2 * ow + 1] = fb ? G : (T)0;                                             \
          o1[2 * ow] = fc ? G : (T)0;                                                 \
          o1[2 * ow + 1] = fd ? G : (T)0;                                             \
        }                                                                             \
        if (fast && !nan) continue;                                                   \
        if (fast)                                                                     \
          for (int64_t ow = 0; ow < 2 * g->OW; ow++) o0[ow] = o1[ow] = 0;             \
        for (int64_t ow = 0; ow < g->OW; ow++) {                                      \
          T m;                                                                        \
          const int64_t a = ARGMAX(g, xp, oh, ow, 1, &m);                             \
          if (a >= 0) o[a] += gr[ow];                                                 \
        }                                                                             \
      }                                                                               \
    }                                                                                 \
  }

DEF_ARGMAX(argmax_f32, float)
DEF_ARGMAX(argmax_f64, double)
DEF_POOL(pool_f32, argmax_f32, float)
DEF_POOL(pool_f64, argmax_f64, double)
DEF_POOL_GRAD(pool_grad_f32, argmax_f32, float)
DEF_POOL_GRAD(pool_grad_f64, argmax_f64, double)

/* The pool geometry of k and the check of its second operand (shaped like
 * the image for select, like the output for the gradient). */
static graft_status pool_setup(const graft__kargs *k, int64_t begin, int64_t end, conv_geom *g) {
  const graft__tview *x = k->in[0];
  graft_status st = geom(k, x, g);
  if (st != GRAFT_OK) return st;
  const int64_t pooled = g->N * g->C * g->OHW;
  const graft__node *n = k->node;
  const int grad = n->op == GRAFT__OP_MAX_POOL2D_GRAD;
  if (n->op != GRAFT__OP_MAX_POOL2D &&
      (k->n_in != 2 || k->in[1]->numel != (grad ? pooled : x->numel) || k->in[1]->dtype != x->dtype))
    return graft__kernel_internal(k, "second operand does not match the image");
  st = check_out(k, 0, 0, grad ? x->numel : pooled, x);
  return st ? st : graft__kernel_check_units(k, begin, end, grad ? g->N * g->C : pooled);
}

static graft_status run_pool(const graft__kargs *k, int64_t begin, int64_t end) {
  conv_geom g;
  graft_status st = pool_setup(k, begin, end, &g);
  if (st != GRAFT_OK || begin >= end) return st;
  const void *x = k->in[0]->data, *u = k->n_in > 1 ? k->in[1]->data : NULL;
  const int f32 = k->out->dtype == GRAFT_F32;
  if (k->node->op == GRAFT__OP_MAX_POOL2D_GRAD) {
    if (f32) pool_grad_f32(&g, x, u, k->out->data, begin, end);
    else pool_grad_f64(&g, x, u, k->out->data, begin, end);
  } else {
    if (f32) pool_f32(&g, x, u, k->out->data, begin, end);
    else pool_f64(&g, x, u, k->out->data, begin, end);
  }
  return GRAFT_OK;
}

KERNEL_VIA(MAX_POOL2D, run_pool)
KERNEL_VIA(MAX_POOL2D_GRAD, run_pool)
KERNEL_VIA(MAX_POOL2D_SELECT, run_pool)
