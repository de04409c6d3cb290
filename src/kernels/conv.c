/* graft kernels: conv2d's parts (im2col / col2im, and its products as one
 * CBLAS gemm per image and group) and max pooling (f32, f64).
 *
 * Units are output elements for all but the products (see below), and
 * every output element is
 * computed the same way whatever range holds it: im2col copies, col2im sums
 * an element's window contributions in (kh, kw) order, the pools look at
 * one window (or one element's windows) in a fixed order.  So any split
 * of the units gives the same bits.
 *
 * Geometry (attr.conv): image [N, C, H, W], columns [G, R, S] with
 * R = C/G * KH * KW rows (channel, kh, kw) and S = N * OH * OW columns
 * (image, oh, ow).  Window (oh, ow) covers input rows
 * oh * sh - ph + kh * dh and columns ow * sw - pw + kw * dw.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_int.h"

typedef struct conv_geom {
  int64_t N, C, H, W, G, Cg, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, OHW, R, S;
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

/* Output lines (one column row's run over ow) are walked in order; the
 * coordinates of the first are divided out once, later ones step. */
#define DEF_IM2COL(NAME, T)                                                               \
  static void NAME(const conv_geom *g, const T *x, T *out, int64_t begin, int64_t end) {  \
    const int64_t KK = g->KH * g->KW;                                                     \
    int64_t row = begin / g->S, col = begin % g->S;                                       \
    int64_t n = col / g->OHW, oh = col % g->OHW / g->OW, ow0 = col % g->OW;               \
    for (int64_t i = begin; i < end;) {                                                   \
      const int64_t grp = row / g->R, r = row % g->R;                                     \
      const int64_t c = grp * g->Cg + r / KK, kh = r % KK / g->KW, kw = r % g->KW;        \
      const int64_t off = kw * g->dw - g->pw;                                             \
      int64_t vlo, vhi; /* the ow whose input column is inside the row */                 \
      sweep_range(0, g->W, g->sw, off, g->OW, &vlo, &vhi);                                \
      for (; i < end; ow0 = 0) {                                                          \
        const int64_t ow1 = GRAFT__MIN(g->OW, ow0 + (end - i));                           \
        T *o = out + i - ow0; /* o[ow] is output column (n, oh, ow) */                    \
        const int64_t ih = oh * g->sh - g->ph + kh * g->dh;                               \
        int64_t lo = ow0, hi = ow0;                                                       \
        if (ih >= 0 && ih < g->H) {                                                       \
          lo = GRAFT__MIN(GRAFT__MAX(vlo, ow0), ow1);                                     \
          hi = GRAFT__MAX(GRAFT__MIN(vhi, ow1), lo);                                      \
        }                                                                                 \
        for (int64_t ow = ow0; ow < lo; ow++) o[ow] = 0;                                  \
        if (hi > lo) {                                                                    \
          const T *src = x + ((n * g->C + c) * g->H + ih) * g->W; /* the input row */     \
          if (g->sw == 1)                                                                 \
            memcpy(o + lo, src + lo + off, (size_t)(hi - lo) * sizeof(T));                \
          else                                                                            \
            for (int64_t ow = lo; ow < hi; ow++) o[ow] = src[ow * g->sw + off];           \
        }                                                                                 \
        for (int64_t ow = hi; ow < ow1; ow++) o[ow] = 0;                                  \
        i += ow1 - ow0;                                                                   \
        if (++oh == g->OH) {                                                              \
          oh = 0;                                                                         \
          if (++n == g->N) { /* next column row */                                        \
            n = 0;                                                                        \
            row++;                                                                        \
            ow0 = 0;                                                                      \
            break;                                                                        \
          }                                                                               \
        }                                                                                 \
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
        for (int64_t kw = 0; kw < g->KW; kw++) {                                          \
          const int64_t off = kw * g->dw - g->pw;                                         \
          const T *src = cols + ((grp * g->R + (cg * g->KH + kh) * g->KW + kw) * g->S +   \
                                 n * g->OHW + oh * g->OW);                                \
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
 * image n in group g ([R, OH*OW], a block of the columns' rows with leading
 * dimension S) and y_ng its output channels ([O/G, OH*OW] of NCHW y):
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
  if (w->shape[0] / g->G > INT_MAX || g->R > INT_MAX || g->S > INT_MAX || g->OHW > INT_MAX) {
    if (k->msg) graft__msgf(k->msg, "gemm sizes exceed the BLAS int range");
    return GRAFT_EUNSUPPORTED;
  }
  return graft__kernel_check_units(k, begin, end, graft__conv_units(k));
}

#define DEF_CONV_MM(NAME, T, GEMM)                                                            \
  static void NAME(const graft__kargs *k, const conv_geom *g, int64_t begin, int64_t end) {  \
    const int op = k->node->op;                                                             \
    const int64_t O = nchw_of(k)->shape[1], Og = O / g->G, R = g->R, S = g->S, P = g->OHW;  \
    const int m = (int)Og, r = (int)R, p = (int)P, s = (int)S;                              \
    const T *w = op == GRAFT__OP_CONV_MM_W ? NULL : k->in[0]->data;                         \
    if (op == GRAFT__OP_CONV_MM) {                                                          \
      const T *cols = k->in[1]->data;                                                       \
      T *y = k->out->data;                                                                  \
      for (int64_t u = begin; u < end; u++) {                                               \
        const int64_t n = u / g->G, grp = u % g->G;                                         \
        T *yb = y + (n * O + grp * Og) * P;                                                 \
        if (R == 0) memset(yb, 0, (size_t)(Og * P) * sizeof(T));                            \
        else GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, p, r, 1, w + grp * Og * R, r, \
                  cols + grp * R * S + n * P, s, 0, yb, p);                                 \
      }                                                                                     \
    } else if (op == GRAFT__OP_CONV_MM_COLS) {                                              \
      const T *y = k->in[1]->data;                                                          \
      T *cols = k->out->data;                                                               \
      for (int64_t u = begin; u < end; u++) {                                               \
        const int64_t n = u / g->G, grp = u % g->G;                                         \
        T *cb = cols + grp * R * S + n * P;                                                 \
        if (Og == 0)                                                                        \
          for (int64_t i = 0; i < R; i++) memset(cb + i * S, 0, (size_t)P * sizeof(T));     \
        else GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, r, p, m, 1, w + grp * Og * R, r, \
                  y + (n * O + grp * Og) * P, p, 0, cb, s);                                 \
      }                                                                                     \
    } else {                                                                                \
      const T *y = k->in[0]->data, *cols = k->in[1]->data;                                  \
      T *dw = k->out->data;                                                                 \
      for (int64_t grp = begin; grp < end; grp++) {                                         \
        T *wb = dw + grp * Og * R;                                                          \
        if (g->N == 0 || P == 0) memset(wb, 0, (size_t)(Og * R) * sizeof(T));               \
        for (int64_t n = 0; n < g->N && P > 0; n++)                                         \
          GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, m, r, p, 1, y + (n * O + grp * Og) * P, \
               p, cols + grp * R * S + n * P, s, n ? 1 : 0, wb, r);                          \
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

graft_status graft__k_CONV_MM(const graft__kargs *k, int64_t begin, int64_t end) {
  return run_mm(k, begin, end);
}

graft_status graft__k_CONV_MM_W(const graft__kargs *k, int64_t begin, int64_t end) {
  return run_mm(k, begin, end);
}

graft_status graft__k_CONV_MM_COLS(const graft__kargs *k, int64_t begin, int64_t end) {
  return run_mm(k, begin, end);
}

/* ---- max pooling -------------------------------------------------------- */

/* The argmax of window (oh, ow) of an H x W plane as ih * W + iw, or -1
 * for a window with no element: the first maximum in row-major window
 * order, or the first NaN. */
#define DEF_ARGMAX(NAME, T)                                                           \
  static int64_t NAME(const conv_geom *g, const T *plane, int64_t oh, int64_t ow) {   \
    int64_t best = -1;                                                                \
    T bv = 0;                                                                         \
    for (int64_t kh = 0; kh < g->KH; kh++) {                                          \
      const int64_t ih = oh * g->sh - g->ph + kh;                                     \
      if (ih < 0 || ih >= g->H) continue;                                             \
      for (int64_t kw = 0; kw < g->KW; kw++) {                                        \
        const int64_t iw = ow * g->sw - g->pw + kw;                                   \
        if (iw < 0 || iw >= g->W) continue;                                           \
        const T v = plane[ih * g->W + iw];                                            \
        if (best < 0 || v > bv || (isnan(v) && !isnan(bv))) {                         \
          best = ih * g->W + iw;                                                      \
          bv = v;                                                                     \
        }                                                                             \
      }                                                                               \
    }                                                                                 \
    return best;                                                                      \
  }

/* MAX_POOL2D (sel NULL): out[i] = the window's max; MAX_POOL2D_SELECT:
 * out[i] = sel at the window's argmax. */
#define DEF_POOL(NAME, ARGMAX, T)                                                     \
  static void NAME(const conv_geom *g, const T *x, const T *sel, T *out, int64_t begin, \
                   int64_t end) {                                                     \
    const int64_t HW = g->H * g->W;                                                   \
    int64_t plane = begin / g->OHW, oh = begin % g->OHW / g->OW, ow = begin % g->OW;  \
    for (int64_t i = begin; i < end; i++) {                                           \
      const int64_t a = ARGMAX(g, x + plane * HW, oh, ow);                            \
      out[i] = a < 0 ? (sel ? 0 : -INFINITY) : (sel ? sel : x)[plane * HW + a];       \
      if (++ow == g->OW) {                                                            \
        ow = 0;                                                                       \
        if (++oh == g->OH) {                                                          \
          oh = 0;                                                                     \
          plane++;                                                                    \
        }                                                                             \
      }                                                                               \
    }                                                                                 \
  }

/* MAX_POOL2D_GRAD: image element i gets the cotangents of the windows whose
 * argmax it is, summed in (oh, ow) order.  Runs of one image row are
 * walked: each window over the run has its argmax found, and adds its
 * cotangent there when that lies in the run. */
#define DEF_POOL_GRAD(NAME, ARGMAX, T)                                                \
  static void NAME(const conv_geom *g, const T *x, const T *cot, T *out, int64_t begin, \
                   int64_t end) {                                                     \
    const int64_t HW = g->H * g->W;                                                   \
    int64_t plane = begin / HW, ih = begin % HW / g->W, iw0 = begin % g->W;           \
    for (int64_t i = begin; i < end; iw0 = 0) {                                       \
      const int64_t iw1 = GRAFT__MIN(g->W, iw0 + (end - i));                          \
      T *o = out + i - iw0; /* o[iw] is image element (plane, ih, iw) */              \
      for (int64_t iw = iw0; iw < iw1; iw++) o[iw] = 0;                               \
      int64_t oh0, oh1, ow0, ow1;                                                     \
      sweep_range(ih - g->KH + 1, ih + 1, g->sh, -g->ph, g->OH, &oh0, &oh1);          \
      sweep_range(iw0 - g->KW + 1, iw1, g->sw, -g->pw, g->OW, &ow0, &ow1);            \
      const T *gp = cot + plane * g->OHW;                                             \
      for (int64_t oh = oh0; oh < oh1; oh++)                                          \
        for (int64_t ow = ow0; ow < ow1; ow++) {                                      \
          const int64_t a = ARGMAX(g, x + plane * HW, oh, ow) - ih * g->W;            \
          if (a >= iw0 && a < iw1) o[a] += gp[oh * g->OW + ow];                       \
        }                                                                             \
      i += iw1 - iw0;                                                                 \
      if (++ih == g->H) {                                                             \
        ih = 0;                                                                       \
        plane++;                                                                      \
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
  int64_t other = n->op == GRAFT__OP_MAX_POOL2D_GRAD ? pooled : x->numel;
  if (n->op != GRAFT__OP_MAX_POOL2D &&
      (k->n_in != 2 || k->in[1]->numel != other || k->in[1]->dtype != x->dtype))
    return graft__kernel_internal(k, "second operand does not match the image");
  return check_out(k, begin, end, n->op == GRAFT__OP_MAX_POOL2D_GRAD ? x->numel : pooled, x);
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

graft_status graft__k_MAX_POOL2D(const graft__kargs *k, int64_t begin, int64_t end) {
  return run_pool(k, begin, end);
}

graft_status graft__k_MAX_POOL2D_GRAD(const graft__kargs *k, int64_t begin, int64_t end) {
  return run_pool(k, begin, end);
}

graft_status graft__k_MAX_POOL2D_SELECT(const graft__kargs *k, int64_t begin, int64_t end) {
  return run_pool(k, begin, end);
}
