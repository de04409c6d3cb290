/* graft kernels: conv2d and its two gradients (im2col / col2im of one
 * image into the tile's scratch, and one CBLAS gemm per image and group;
 * 3x3 kernels at unit stride with enough channels run as Winograd
 * F(2x2, 3x3) instead, kernels/winograd.c), im2col / col2im as ops of
 * their own (avg_pool2d), and max pooling (f32, f64).
 *
 * Units are output elements for im2col, col2im and the pools, images x
 * groups (or groups; chunks of images x groups on the Winograd path) for
 * conv2d's kernels (see below), image planes for the max-pool gradient; every unit is computed the same way whatever
 * range holds it: im2col copies, col2im sums an element's window
 * contributions in (kh, kw) order, a gemm call has a fixed shape, the
 * pools look at one window (or one element's windows) in a fixed order.
 * So any split of the units gives the same bits.
 *
 * Geometry (attr.conv): image [N, C, H, W], columns [N, G, R, OH * OW]
 * (image-major: one image's block of a group is contiguous) with
 * R = C/G * KH * KW rows (channel, kh, kw) and columns (oh, ow).  Window
 * (oh, ow) covers input rows oh * sh - ph + kh * dh and columns
 * ow * sw - pw + kw * dw.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/conv_geom.h"
#include "kernels/kernels_int.h"

typedef graft__conv_geom conv_geom; /* S = N * OHW */

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

/* Columns [begin, end) of the whole [N, G, R, OH*OW] layout into out,
 * which holds column begin (conv2d's kernels fill one image's block of a
 * group into scratch).  Output lines (one column row's run over ow, at one
 * oh) are walked in order; the coordinates of the first are divided out
 * once, later ones step, and a column row's (image, group, row) once per OH
 * lines. */
#define DEF_IM2COL(NAME, T)                                                               \
  static void NAME(const conv_geom *g, const T *x, T *out, int64_t begin, int64_t end) {  \
    const int64_t KK = g->KH * g->KW;                                                     \
    /* flat: output lines as long as image rows at unit stride, so a column               \
     * row's windows are a shifted copy of the plane (e.g. 3x3 with pad 1) */            \
    const int flat = g->sh == 1 && g->sw == 1 && g->OW == g->W;                           \
    int64_t q = begin / g->OHW, oh = begin % g->OHW / g->OW, ow0 = begin % g->OW;         \
    for (int64_t i = begin; i < end; q++, oh = 0) {                                       \
      /* column row q: image n, group grp, row r = (channel, kh, kw) */                   \
      const int64_t n = q / (g->G * g->R), grp = q / g->R % g->G, r = q % g->R;           \
      const int64_t c = grp * g->Cg + r / KK, kh = r % KK / g->KW, kw = r % g->KW;        \
      const int64_t off = kw * g->dw - g->pw;                                             \
      const T *img = x + (n * g->C + c) * g->H * g->W;                                    \
      int64_t vlo, vhi; /* the ow whose input column is inside the row */                 \
      sweep_range(0, g->W, g->sw, off, g->OW, &vlo, &vhi);                                \
      if (flat && oh == 0 && ow0 == 0 && end - i >= g->OHW) {                             \
        /* A whole column row of a flat sweep: column p reads image element              \
         * p + shift, so the valid windows are one run of the plane. */                  \
        T *o = out + (i - begin);                                                         \
        const int64_t ihs = kh * g->dh - g->ph, shift = ihs * g->W + off;                 \
        const int64_t oh_lo = GRAFT__MIN(GRAFT__MAX(-ihs, (int64_t)0), g->OH);             \
        const int64_t oh_hi = GRAFT__MAX(GRAFT__MIN(g->H - ihs, g->OH), oh_lo);           \
        int64_t p_lo = 0, p_hi = 0; /* from the first valid column to the last */         \
        if (oh_hi > oh_lo && vhi > vlo) {                                                 \
          p_lo = oh_lo * g->OW + vlo, p_hi = (oh_hi - 1) * g->OW + vhi;                   \
          for (int64_t p = p_lo; p < p_hi; p++) o[p] = img[p + shift];                    \
          /* the run also copied the neighbours of the lines' edge columns (a few:         \
           * down the lines, not a memset call per line) */                               \
          for (int64_t ow = 0; ow < vlo; ow++)                                            \
            for (int64_t h = oh_lo; h < oh_hi; h++) o[h * g->OW + ow] = 0;                \
          for (int64_t ow = vhi; ow < g->OW; ow++)                                        \
            for (int64_t h = oh_lo; h < oh_hi; h++) o[h * g->OW + ow] = 0;                \
        }                                                                                 \
        for (int64_t p = 0; p < p_lo; p++) o[p] = 0;                                      \
        for (int64_t p = p_hi; p < g->OHW; p++) o[p] = 0;                                 \
        i += g->OHW;                                                                      \
        continue;                                                                         \
      }                                                                                   \
      for (; oh < g->OH && i < end; oh++, ow0 = 0) {                                      \
        const int64_t ow1 = GRAFT__MIN(g->OW, ow0 + (end - i));                           \
        T *o = out + (i - begin) - ow0; /* o[ow] is column (oh, ow) */                    \
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
    im2col_f32(&g, k->in[0]->data, (float *)k->out->data + begin, begin, end);
  else
    im2col_f64(&g, k->in[0]->data, (double *)k->out->data + begin, begin, end);
  return GRAFT_OK;
}

/* Image elements [begin, end) from columns whose first block (image n,
 * group g: block n * G + g) is block base.  Each element is the sum of
 * the column entries that copied it, in (kh, kw) order: a run of one image
 * row is zeroed, then each kernel row adds its entries. */
#define DEF_COL2IM(NAME, T)                                                               \
  static void NAME(const conv_geom *g, const T *cols, int64_t base, T *out, int64_t begin, \
                   int64_t end) {                                                         \
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
        const T *src0 = cols + (((n * g->G + grp - base) * g->R + (cg * g->KH + kh) * g->KW) * \
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
    col2im_f32(&g, cols->data, 0, k->out->data, begin, end);
  else
    col2im_f64(&g, cols->data, 0, k->out->data, begin, end);
  return GRAFT_OK;
}

/* ---- conv2d and its two gradients: one gemm per image and group ----------
 *
 * (Unless graft__wino_applies: then kernels/winograd.c, with units of its
 * own, computes the same three products.)
 * With W_g the weight rows of group g ([O/G, R]), c_ng = im2col of image n
 * over group g's channels ([R, OH*OW]) and y_ng the group's output channels
 * of image n ([O/G, OH*OW] of NCHW y):
 *   CONV2D     (x, w)  y_ng = W_g c_ng                    units (n, g)
 *   CONV2D_W   (g, x)  W_g  = sum over n of y_ng c_ng^T,  units g
 *                      in increasing n (one gemm per image accumulating)
 *   CONV2D_X   (w, g)  x_ng = col2im(W_g^T y_ng)          units (n, g)
 * c_ng lives in the tile's scratch (graft__kernel_scratch): im2col writes
 * it just before the gemm reads it (CONV2D, CONV2D_W), or the gemm writes
 * it just before col2im reads it (CONV2D_X), so it stays in cache instead
 * of making a round trip through memory for the whole batch.  A unit's
 * calls are the same whatever tile holds it, and the weight gradient's sum
 * over the batch never splits, so every tiling gives the same bits. */

/* The image shape of a CONV2D* node: x itself, or attr.x with the batch
 * dim of the cotangent (CONV2D_X, whose output is the image). */
static graft_status conv_setup(const graft__kargs *k, int64_t begin, int64_t end, conv_geom *g,
                               const graft__tview **x, const graft__tview **w,
                               const graft__tview **y) {
  const graft__node *n = k->node;
  if (k->n_in != 2) return graft__kernel_internal(k, "%d operands", k->n_in);
  switch (n->op) {
  case GRAFT__OP_CONV2D: *x = k->in[0], *w = k->in[1], *y = k->out; break;
  case GRAFT__OP_CONV2D_W: *y = k->in[0], *x = k->in[1], *w = k->out; break;
  default: *w = k->in[0], *y = k->in[1], *x = k->out; break;
  }
  graft_status st = geom(k, *x, g);
  if (st != GRAFT_OK) return st;
  const graft__tview *W = *w, *Y = *y;
  if (W->dtype != (*x)->dtype || Y->dtype != (*x)->dtype)
    return graft__kernel_bad_dtype(k, W->dtype);
  if (W->rank != 4 || Y->rank != 4 || W->shape[0] != Y->shape[1] || W->shape[0] % g->G ||
      W->numel != W->shape[0] * g->R || Y->shape[0] != g->N || g->OH != Y->shape[2] ||
      g->OW != Y->shape[3])
    return graft__kernel_internal(k, "operands do not match the sweep");
  if (W->shape[0] / g->G > INT_MAX || g->R > INT_MAX || g->OHW > INT_MAX) {
    if (k->msg) graft__msgf(k->msg, "gemm sizes exceed the BLAS int range");
    return GRAFT_EUNSUPPORTED;
  }
  return graft__kernel_check_units(k, begin, end, graft__conv_units(k));
}

/* The weight of a CONV2D* node (its output for CONV2D_W). */
static const graft__tview *weight_of(const graft__kargs *k) {
  const int op = k->node->op;
  return op == GRAFT__OP_CONV2D ? k->in[1] : op == GRAFT__OP_CONV2D_X ? k->in[0] : k->out;
}

/* Whether node k's product over sweep g runs as Winograd F(2x2, 3x3)
 * (kernels/winograd.c). */
static int wino(const graft__kargs *k, const conv_geom *g) {
  const graft__tview *w = weight_of(k);
  return w->rank == 4 && graft__wino_applies(g, w->shape[0]);
}

int64_t graft__conv_units(const graft__kargs *k) {
  const graft__node *n = k->node;
  const graft__tview *x = n->op == GRAFT__OP_CONV2D_X ? k->out
                          : n->op == GRAFT__OP_CONV2D_W ? k->in[1] : k->in[0];
  if (x->rank != 4) return 0;
  if (n->op == GRAFT__OP_MAX_POOL2D_GRAD) /* image planes */
    return graft__size_mul_sat(x->shape[0], x->shape[1]);
  if (n->op == GRAFT__OP_CONV2D_W) return n->attr.conv.groups;
  conv_geom g;
  if (geom_of(k, x->shape, &g) == GRAFT_OK && wino(k, &g)) { /* chunks of images x groups */
    const int64_t nb = graft__wino_unit(&g, n->op);
    return graft__size_mul_sat((g.N + nb - 1) / nb, g.G);
  }
  return graft__size_mul_sat(x->shape[0], n->attr.conv.groups);
}

int64_t graft__conv_scratch(const graft__kargs *k) {
  const int op = k->node->op;
  if (op != GRAFT__OP_CONV2D && op != GRAFT__OP_CONV2D_W && op != GRAFT__OP_CONV2D_X) return 0;
  const graft__tview *x = op == GRAFT__OP_CONV2D_X ? k->out : k->in[op == GRAFT__OP_CONV2D_W];
  conv_geom g;
  if (x->rank != 4 || geom_of(k, x->shape, &g) != GRAFT_OK) return 0;
  /* elements of x's dtype: the Winograd kernel's parts, or one c_ng */
  const int64_t n = wino(k, &g) ? graft__wino_scratch(&g, op, weight_of(k)->shape[0])
                                : graft__size_mul_sat(g.R, g.OHW);
  return graft__size_mul_sat(n, (int64_t)graft_dtype_size(x->dtype)) / (int64_t)sizeof(double) +
         1;
}

#define DEF_CONV(NAME, T, GEMM, IM2COL, COL2IM, NINE, NINE_W)                                                \
  static void NAME(const graft__kargs *k, const conv_geom *g, const T *x, const T *w, T *y,  \
                   int64_t begin, int64_t end, T *c) {                                       \
    const int op = k->node->op;                                                              \
    const int64_t O = k->node->op == GRAFT__OP_CONV2D_W ? k->in[0]->shape[1]                 \
                                                       : (k->node->op == GRAFT__OP_CONV2D   \
                                                              ? k->out->shape[1]             \
                                                              : k->in[1]->shape[1]);         \
    const int64_t Og = O / g->G, R = g->R, P = g->OHW, RP = R * P;                           \
    const int m = (int)Og, r = (int)R, p = (int)P;                                           \
    if (op == GRAFT__OP_CONV2D_W) { /* units: groups; w is the output */                     \
      for (int64_t grp = begin; grp < end; grp++) {                                          \
        T *wb = (T *)w + grp * Og * R;                                                       \
        if (g->N == 0 || P == 0 || R == 0) memset(wb, 0, (size_t)(Og * R) * sizeof(T));      \
        for (int64_t n = 0; n < g->N && P > 0 && R > 0; n++) {                               \
          const int64_t b0 = (n * g->G + grp) * RP;                                          \
          IM2COL(g, x, c, b0, b0 + RP);                                                      \
          if (R == 9)                                                                        \
            NINE_W(y + (n * O + grp * Og) * P, Og, c, P, n > 0, wb);                         \
          else                                                                               \
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, m, r, p, 1,                        \
                 y + (n * O + grp * Og) * P, p, c, p, n ? 1 : 0, wb, r);                     \
        }                                                                                    \
      }                                                                                      \
      return;                                                                                \
    }                                                                                        \
    for (int64_t u = begin; u < end; u++) {                                                  \
      const int64_t n = u / g->G, grp = u % g->G, b0 = u * RP;                               \
      T *yb = y + (n * O + grp * Og) * P;                                                    \
      if (op == GRAFT__OP_CONV2D) {                                                          \
        if (R == 0) {                                                                        \
          memset(yb, 0, (size_t)(Og * P) * sizeof(T));                                       \
          continue;                                                                          \
        }                                                                                    \
        IM2COL(g, x, c, b0, b0 + RP);                                                        \
        if (R == 9)                                                                          \
          NINE(w + grp * Og * R, Og, c, P, yb);                                              \
        else                                                                                 \
          GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, p, r, 1, w + grp * Og * R, r, c, \
               p, 0, yb, p);                                                                 \
      } else { /* CONV2D_X: x is the output; its channels of group grp in image n */        \
        const int64_t i0 = (n * g->C + grp * g->Cg) * g->H * g->W;                           \
        if (Og == 0) memset(c, 0, (size_t)RP * sizeof(T));                                   \
        else GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, r, p, m, 1, w + grp * Og * R, r,   \
                  yb, p, 0, c, p);                                                           \
        COL2IM(g, c, u, (T *)x, i0, i0 + g->Cg * g->H * g->W);                               \
      }                                                                                      \
    }                                                                                        \
  }

/* y [Og, P] = w [Og, 9] c [9, P], the forward's product at R = 9 (one
 * input channel per group under a 3x3 kernel: the first layer of a
 * network on one-channel images).  OpenBLAS runs a gemm of depth 9 at a
 * third of its peak and first clears y in a pass of its own; this sums
 * the 9 products in order and stores each output once. */
#define DEF_NINE(NAME, T)                                                                     \
  GRAFT__SIMD_CLONES                                                                          \
  static void NAME(const T *restrict w, int64_t Og, const T *restrict c, int64_t P,          \
                   T *restrict y) {                                                           \
    const T *c0 = c, *c1 = c0 + P, *c2 = c1 + P, *c3 = c2 + P, *c4 = c3 + P, *c5 = c4 + P;   \
    const T *c6 = c5 + P, *c7 = c6 + P, *c8 = c7 + P;                                        \
    for (int64_t o = 0; o < Og; o++) {                                                        \
      const T *k = w + 9 * o;                                                                 \
      const T k0 = k[0], k1 = k[1], k2 = k[2], k3 = k[3], k4 = k[4], k5 = k[5], k6 = k[6];  \
      const T k7 = k[7], k8 = k[8];                                                           \
      T *restrict yo = y + o * P;                                                             \
      for (int64_t p = 0; p < P; p++)                                                         \
        yo[p] = k0 * c0[p] + k1 * c1[p] + k2 * c2[p] + k3 * c3[p] + k4 * c4[p] + k5 * c5[p] + \
                k6 * c6[p] + k7 * c7[p] + k8 * c8[p];                                         \
    }                                                                                         \
  }

/* dw [Og, 9] (+)= g [Og, P] c [9, P]^T, the weight gradient's product at
 * R = 9 for one image (add: onto dw, else into it): each of a row's 9 dot
 * products runs in 8 lanes, summed in a fixed order, then the P % 8 last
 * terms (OpenBLAS: 1.7 times as long, packing both operands per image). */
#define NINE_ACC(r) for (int l = 0; l < 8; l++) a##r[l] += v[l] * c##r[p0 + l]
#define NINE_SUM(r) \
  (((a##r[0] + a##r[1]) + (a##r[2] + a##r[3])) + ((a##r[4] + a##r[5]) + (a##r[6] + a##r[7])))
#define DEF_NINE_W(NAME, T)                                                                   \
  GRAFT__SIMD_CLONES                                                                          \
  static void NAME(const T *restrict gy, int64_t Og, const T *restrict c, int64_t P, int add, \
                   T *restrict dw) {                                                          \
    const int64_t P8 = P / 8 * 8;                                                             \
    const T *c0 = c, *c1 = c0 + P, *c2 = c1 + P, *c3 = c2 + P, *c4 = c3 + P, *c5 = c4 + P;   \
    const T *c6 = c5 + P, *c7 = c6 + P, *c8 = c7 + P;                                        \
    for (int64_t o = 0; o < Og; o++) {                                                        \
      const T *go = gy + o * P;                                                               \
      T a0[8] = {0}, a1[8] = {0}, a2[8] = {0}, a3[8] = {0}, a4[8] = {0}, a5[8] = {0};         \
      T a6[8] = {0}, a7[8] = {0}, a8[8] = {0};                                                \
      for (int64_t p0 = 0; p0 < P8; p0 += 8) {                                                \
        const T *v = go + p0;                                                                 \
        NINE_ACC(0);                                                                          \
        NINE_ACC(1);                                                                          \
        NINE_ACC(2);                                                                          \
        NINE_ACC(3);                                                                          \
        NINE_ACC(4);                                                                          \
        NINE_ACC(5);                                                                          \
        NINE_ACC(6);                                                                          \
        NINE_ACC(7);                                                                          \
        NINE_ACC(8);                                                                          \
      }                                                                                       \
      T s[9] = {NINE_SUM(0), NINE_SUM(1), NINE_SUM(2), NINE_SUM(3), NINE_SUM(4),              \
                NINE_SUM(5), NINE_SUM(6), NINE_SUM(7), NINE_SUM(8)};                          \
      for (int64_t p = P8; p < P; p++)                                                        \
        for (int r = 0; r < 9; r++) s[r] += go[p] * c[r * P + p];                             \
      for (int r = 0; r < 9; r++) dw[9 * o + r] = add ? dw[9 * o + r] + s[r] : s[r];          \
    }                                                                                         \
  }

DEF_NINE(nine_f32, float)
DEF_NINE(nine_f64, double)
DEF_NINE_W(nine_w_f32, float)
DEF_NINE_W(nine_w_f64, double)

DEF_CONV(conv_f32, float, cblas_sgemm, im2col_f32, col2im_f32, nine_f32, nine_w_f32)
DEF_CONV(conv_f64, double, cblas_dgemm, im2col_f64, col2im_f64, nine_f64, nine_w_f64)

graft_status graft__conv_run_scratch(const graft__kargs *k, int64_t begin, int64_t end,
                                     double *scratch) {
  conv_geom g;
  const graft__tview *x = NULL, *w = NULL, *y = NULL;
  graft_status st = conv_setup(k, begin, end, &g, &x, &w, &y);
  if (st != GRAFT_OK || begin >= end) return st;
  const int f32 = x->dtype == GRAFT_F32;
  if (wino(k, &g) && f32)
    graft__wino_f32(k->node->op, &g, w->shape[0], x->data, w->data, y->data, begin, end,
                    (float *)scratch);
  else if (wino(k, &g))
    graft__wino_f64(k->node->op, &g, w->shape[0], x->data, w->data, y->data, begin, end, scratch);
  else if (f32)
    conv_f32(k, &g, x->data, w->data, y->data, begin, end, (float *)scratch);
  else
    conv_f64(k, &g, x->data, w->data, y->data, begin, end, scratch);
  return GRAFT_OK;
}

/* The table's entry of op E: RUN, which tells the ops apart by k->node. */
#define KERNEL_VIA(E, RUN)                                                               \
  graft_status graft__k_##E(const graft__kargs *k, int64_t begin, int64_t end) {         \
    return RUN(k, begin, end);                                                           \
  }

/* conv2d's kernels run only with a scratch buffer (graft__kernel_run_scratch):
 * the executors never call these entries. */
static graft_status needs_scratch(const graft__kargs *k, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  return graft__kernel_internal(k, "runs only with its scratch (graft__kernel_run_scratch)");
}

KERNEL_VIA(CONV2D, needs_scratch)
KERNEL_VIA(CONV2D_W, needs_scratch)
KERNEL_VIA(CONV2D_X, needs_scratch)

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

/* The 2x2 window ow of rows r0, r1 as a, b, c, d (row-major), its maximum
 * m by selects (the first of equal values), and nan |= whether it holds
 * NaN (then m is not the result: the general path decides). */
#define WINDOW_2X2(T, r0, r1, ow, a, b, c, d, m, nan)                                  \
  const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];      \
  T m = a;                                                                             \
  m = b > m ? b : m;                                                                   \
  m = c > m ? c : m;                                                                   \
  m = d > m ? d : m;                                                                   \
  nan |= (a != a) | (b != b) | (c != c) | (d != d)

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
          WINDOW_2X2(T, r0, r1, ow, a, b, c, d, m, nan);                              \
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
          WINDOW_2X2(T, r0, r1, ow, a, b, c, d, m, nan);                              \
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
      (k->n_in != 2 || k->in[1]->numel != (grad ? pooled : x->numel) ||
       k->in[1]->dtype != x->dtype))
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
