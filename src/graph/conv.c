/* Convolution and pooling: graft_conv2d, graft_max_pool2d, graft_avg_pool2d.
 *
 * conv2d is one node, CONV2D (x, w): per image and group, im2col of the
 * image's channels into the tile's scratch, then one gemm straight into
 * NCHW y.  Its gradients are CONV2D_W (g, x), the weight's (per group, the
 * same im2col and one gemm per image accumulating, in increasing image
 * order), and CONV2D_X (w, g), the input's (per image and group, one gemm
 * into scratch, then col2im).  The three are bilinear and each other's
 * adjoints, so their VJP and JVP rules are the three again and gradients of
 * any order stay within them.  The columns live in per-tile scratch the
 * plan reserves (sched/tiles.c), one image at a time, so they stay in
 * cache and cost no arena bytes.  The kernels pick faster ways to the
 * same three products by shape: Winograd F(2x2, 3x3) for 3x3 unit-stride
 * sweeps with 16 or more channels per group (kernels/winograd.c), 9-term
 * loops for one input channel under 3x3 (kernels/conv.c).
 *
 * avg_pool2d is the mean over the windows of im2col (channels folded into
 * the batch), so it counts padding as zeros and always divides by KH * KW
 * (PyTorch's count_include_pad=True).  max_pool2d has kernels of its own
 * (MAX_POOL2D, and MAX_POOL2D_GRAD / MAX_POOL2D_SELECT for its VJP / JVP).
 *
 * Every argument is checked here, so refusals name the public op rather
 * than a node it is built from. */
#include <limits.h>
#include <string.h>

#include "graph/graph.h"

static graft_value *fail(graft_trace *t, const char *op, graft_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static graft_value *fail(graft_trace *t, const char *op, graft_status st, const char *fmt, ...) {
  char why[GRAFT__MSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  graft__vmsgf(why, fmt, ap);
  va_end(ap);
  graft__trace_failf(t, st, "%s: %s (op #%u in trace '%s')", op, why, t->g->n_nodes, t->g->name);
  return GRAFT__POISON;
}

/* The node of operand v (named what), or NULL after failing the trace. */
static const graft__node *operand(graft_trace *t, const char *op, const char *what,
                                  graft_value *v) {
  graft__node *n;
  switch (graft__trace_value(t, v, &n)) {
  case GRAFT__VALUE_NODE:
    break;
  case GRAFT__VALUE_NULL:
    fail(t, op, GRAFT_EINVAL, "%s is NULL", what);
    return NULL;
  case GRAFT__VALUE_POISON:
    fail(t, op, GRAFT_EMISUSE, "%s is the poison value of another (failed) trace", what);
    return NULL;
  case GRAFT__VALUE_FOREIGN:
    if (t->cap) { /* a body using a value of a trace around it: captured */
      uint32_t id = graft__capture_value(t, v);
      if (id != GRAFT__POISON_ID) {
        n = graft__graph_node(t->g, id);
        break;
      }
      if (t->status) return NULL;
    }
    fail(t, op, GRAFT_EMISUSE, "%s belongs to another trace, or to one that ended", what);
    return NULL;
  }
  char s[96];
  graft__shape_str(s, sizeof s, n->rank, n->shape);
  if (n->dtype != GRAFT_F32 && n->dtype != GRAFT_F64) {
    fail(t, op, GRAFT_EDTYPE, "%s is %s%s (f32 and f64 are supported)", what,
         graft_dtype_name((graft_dtype)n->dtype), s);
    return NULL;
  }
  if (n->rank != 4) {
    fail(t, op, GRAFT_ESHAPE, "%s %s must have rank 4 (%s)", what, s,
         what[0] == 'w' ? "O, C/groups, KH, KW" : "N, C, H, W");
    return NULL;
  }
  for (int i = what[0] == 'w' ? 0 : 1; i < 4; i++)
    if (n->shape[i] < 0) {
      fail(t, op, GRAFT_EUNSUPPORTED, "%s %s: only the batch dim of the input may be symbolic",
           what, s);
      return NULL;
    }
  return n;
}

/* pair[i], or dflt[i] when pair is NULL. */
static int64_t arg(const int64_t *pair, const int64_t *dflt, int i) {
  return pair ? pair[i] : dflt[i];
}

static const int64_t zero[2] = {0, 0}, one[2] = {1, 1};

/* Fill a's sweep from the user's arguments (a NULL stride is stride_dflt)
 * and check it over image x: positive kernel, stride and dilation, padding
 * >= 0, the dilated kernel inside the padded input.  0 after failing the
 * trace. */
static int sweep(graft_trace *t, const char *op, const graft__node *x, const int64_t *kernel,
                 const int64_t *stride, const int64_t *stride_dflt, const int64_t *padding,
                 const int64_t *dilation, struct graft__conv_attr *a, int64_t *oh, int64_t *ow) {
  for (int i = 0; i < 2; i++) {
    a->k[i] = kernel[i];
    a->s[i] = arg(stride, stride_dflt, i);
    a->p[i] = arg(padding, zero, i);
    a->d[i] = arg(dilation, one, i);
  }
  memcpy(a->x, x->shape, sizeof a->x);
  const char *bad = NULL;
  for (int i = 0; i < 2 && !bad; i++) {
    if (a->k[i] < 1) bad = "kernel";
    else if (a->s[i] < 1) bad = "stride";
    else if (a->d[i] < 1) bad = "dilation";
    else if (a->p[i] < 0) bad = "padding";
  }
  if (bad) {
    const int64_t *v = bad[0] == 'k' ? a->k : bad[0] == 's' ? a->s : bad[0] == 'd' ? a->d : a->p;
    fail(t, op, GRAFT_EINVAL, "%s %lldx%lld: must be %s", bad, (long long)v[0], (long long)v[1],
         bad[0] == 'p' ? ">= 0" : ">= 1");
    return 0;
  }
  *oh = graft__conv_out_dim(x->shape[2], a->k[0], a->s[0], a->p[0], a->d[0]);
  *ow = graft__conv_out_dim(x->shape[3], a->k[1], a->s[1], a->p[1], a->d[1]);
  if (*oh < 0 || *ow < 0) {
    char s[96];
    graft__shape_str(s, sizeof s, x->rank, x->shape);
    fail(t, op, GRAFT_ESHAPE,
         "kernel %lldx%lld (dilation %lldx%lld) does not fit input %s padded by %lldx%lld",
         (long long)a->k[0], (long long)a->k[1], (long long)a->d[0], (long long)a->d[1], s,
         (long long)a->p[0], (long long)a->p[1]);
    return 0;
  }
  return 1;
}

/* Whether a value of dtype dt and shape dims (a symbolic batch dim
 * counted as 1: compile checks it bound) can exist; else fails the trace
 * naming what it is. */
static int fits(graft_trace *t, const char *op, const char *what, const int64_t *dims,
                graft_dtype dt) {
  int64_t d[4];
  for (int i = 0; i < 4; i++) d[i] = dims[i] < 0 ? 1 : dims[i];
  char why[GRAFT__MSG_LEN];
  graft_status st = graft__size_check(4, d, dt, NULL, NULL, why, sizeof why);
  if (st) fail(t, op, st, "%s: %s", what, why);
  return st == GRAFT_OK;
}

GRAFT_API graft_value *graft_conv2d(graft_trace *t, graft_value *x, graft_value *w,
                                    const int64_t stride[2], const int64_t padding[2],
                                    const int64_t dilation[2], int64_t groups) {
  static const char op[] = "conv2d";
  if (!t) return NULL;
  if (t->status) return GRAFT__POISON;
  const graft__node *xn = operand(t, op, "input", x), *wn = xn ? operand(t, op, "weight", w) : NULL;
  if (!wn) return GRAFT__POISON;
  char xs[96], ws[96];
  graft__shape_str(xs, sizeof xs, xn->rank, xn->shape);
  graft__shape_str(ws, sizeof ws, wn->rank, wn->shape);
  if (xn->dtype != wn->dtype)
    return fail(t, op, GRAFT_EDTYPE, "input %s%s and weight %s%s differ in dtype",
                graft_dtype_name((graft_dtype)xn->dtype), xs,
                graft_dtype_name((graft_dtype)wn->dtype), ws);
  const int64_t C = xn->shape[1], O = wn->shape[0];
  if (groups < 1 || C % groups || O % groups)
    return fail(t, op, GRAFT_EINVAL,
                "groups %lld must be >= 1 and divide the input's %lld channels (input %s) and "
                "the weight's %lld output channels (weight %s)",
                (long long)groups, (long long)C, xs, (long long)O, ws);
  if (wn->shape[1] != C / groups)
    return fail(t, op, GRAFT_ESHAPE,
                "weight %s has %lld input channels per group, input %s with groups %lld needs %lld",
                ws, (long long)wn->shape[1], xs, (long long)groups, (long long)(C / groups));
  struct graft__conv_attr a;
  int64_t oh, ow;
  if (!sweep(t, op, xn, wn->shape + 2, stride, one, padding, dilation, &a, &oh, &ow))
    return GRAFT__POISON;
  a.groups = groups;
  const int64_t N = xn->shape[0];
  const int64_t rows = graft__size_mul_sat(graft__size_mul_sat(wn->shape[1], a.k[0]), a.k[1]);
  const int64_t out_dims[4] = {N, O, oh, ow}, col_dims[4] = {1, groups, rows, graft__size_mul_sat(oh, ow)};
  if (!fits(t, op, "output", out_dims, (graft_dtype)xn->dtype) ||
      !fits(t, op, "one image's columns", col_dims, (graft_dtype)xn->dtype))
    return GRAFT__POISON;
  /* Each gemm is [O/G, C/G*KH*KW] x [C/G*KH*KW, OH*OW], in CBLAS's ints. */
  if (rows > INT_MAX || O / groups > INT_MAX || graft__size_mul_sat(oh, ow) > INT_MAX)
    return fail(t, op, GRAFT_EUNSUPPORTED,
                "weight %s on input %s: gemms of %lld x %lld x %lld per image and group exceed "
                "the BLAS int range (%d)", ws, xs, (long long)(O / groups), (long long)rows,
                (long long)graft__size_mul_sat(oh, ow), INT_MAX);
  graft_value *in[2] = {x, w};
  return graft__emit_conv(t, GRAFT__OP_CONV2D, 2, in, &a);
}

/* The checks both pools make; 0 after failing the trace. */
static int pool_args(graft_trace *t, const char *op, graft_value *x, const int64_t *kernel,
                     const int64_t *stride, const int64_t *padding, const graft__node **xn,
                     struct graft__conv_attr *a, int64_t *oh, int64_t *ow) {
  if (t->status) return 0;
  *xn = operand(t, op, "input", x);
  if (!*xn) return 0;
  if (!kernel) {
    fail(t, op, GRAFT_EINVAL, "kernel is NULL");
    return 0;
  }
  if (!sweep(t, op, *xn, kernel, stride, kernel, padding, NULL, a, oh, ow)) return 0;
  a->groups = 1;
  const int64_t out_dims[4] = {(*xn)->shape[0], (*xn)->shape[1], *oh, *ow};
  if (!fits(t, op, "output", out_dims, (graft_dtype)(*xn)->dtype)) return 0;
  if (a->p[0] > a->k[0] / 2 || a->p[1] > a->k[1] / 2) {
    fail(t, op, GRAFT_EINVAL, "padding %lldx%lld is more than half the kernel %lldx%lld",
         (long long)a->p[0], (long long)a->p[1], (long long)a->k[0], (long long)a->k[1]);
    return 0;
  }
  return 1;
}

GRAFT_API graft_value *graft_max_pool2d(graft_trace *t, graft_value *x, const int64_t kernel[2],
                                        const int64_t stride[2], const int64_t padding[2]) {
  if (!t) return NULL;
  const graft__node *xn;
  struct graft__conv_attr a;
  int64_t oh, ow;
  if (!pool_args(t, "max_pool2d", x, kernel, stride, padding, &xn, &a, &oh, &ow))
    return GRAFT__POISON;
  return graft__emit_conv(t, GRAFT__OP_MAX_POOL2D, 1, &x, &a);
}

GRAFT_API graft_value *graft_avg_pool2d(graft_trace *t, graft_value *x, const int64_t kernel[2],
                                        const int64_t stride[2], const int64_t padding[2]) {
  if (!t) return NULL;
  const graft__node *xn;
  struct graft__conv_attr a;
  int64_t oh, ow;
  if (!pool_args(t, "avg_pool2d", x, kernel, stride, padding, &xn, &a, &oh, &ow))
    return GRAFT__POISON;
  /* Channels as images of one channel: [N * C, 1, H, W]. */
  const int64_t H = xn->shape[2], W = xn->shape[3];
  graft_value *img = x;
  if (xn->shape[1] != 1) {
    const int64_t one[4] = {-1, 1, H, W};
    img = graft_reshape(t, x, 4, one);
    if (img == GRAFT__POISON) return img;
    memcpy(a.x, graft__value_node(t->g, img)->shape, sizeof a.x);
  }
  const int axis = 2; /* the window's elements: columns [N * C, 1, KH * KW, OH * OW] */
  graft_value *mean = graft_reduce_mean(t, graft__emit_conv(t, GRAFT__OP_IM2COL, 1, &img, &a), 1,
                                        &axis, 0);
  const int64_t nchw[4] = {xn->shape[0], xn->shape[1], oh, ow};
  return graft_reshape(t, mean, 4, nchw);
}
