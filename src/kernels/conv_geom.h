/* graft internal: the sweep of a conv2d node as its kernels see it, shared
 * by kernels/conv.c (im2col, col2im, the pools, conv2d's GEMM path) and
 * kernels/winograd.c (conv2d's products as Winograd F(2x2, 3x3)). */
#ifndef GRAFT_KERNELS_CONV_GEOM_H
#define GRAFT_KERNELS_CONV_GEOM_H

#include <stdint.h>

/* Image [N, C, H, W], G groups of Cg channels, kernel KH x KW, stride,
 * padding and dilation; output OH x OW (OHW per plane); columns of
 * R = Cg * KH * KW rows; S = N * OHW. */
typedef struct graft__conv_geom {
  int64_t N, C, H, W, G, Cg, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, OHW, R, S;
} graft__conv_geom;

/* Whether conv2d's products over sweep g with O output channels run as
 * Winograd F(2x2, 3x3) (kernels/winograd.c): 3x3 kernels at unit stride
 * and dilation, padding at most 2, and at least GRAFT__WINO_MIN_CH input
 * and output channels per group.  A function of the shapes only. */
#define GRAFT__WINO_MIN_CH 16
int graft__wino_applies(const graft__conv_geom *g, int64_t O);

/* Images per unit of CONV2D and CONV2D_X on the Winograd path (their units
 * are runs of that many images, x groups; CONV2D_W's stay groups). */
int64_t graft__wino_unit(const graft__conv_geom *g, int op);

/* Elements of the dtype a tile's scratch holds for op's Winograd kernel. */
int64_t graft__wino_scratch(const graft__conv_geom *g, int op, int64_t O);

/* op's units [begin, end) on the Winograd path: x the image, w the weight,
 * y conv2d's output (as for conv2d's GEMM path, whichever is op's output),
 * O output channels; scratch holds graft__wino_scratch elements. */
void graft__wino_f32(int op, const graft__conv_geom *g, int64_t O, float *x, float *w, float *y,
                     int64_t begin, int64_t end, float *scratch);
void graft__wino_f64(int op, const graft__conv_geom *g, int64_t O, double *x, double *w,
                     double *y, int64_t begin, int64_t end, double *scratch);

#endif
