/* The fused optimizer step (UPDATE): one pass over a weight, its gradient
 * and its slots per tile, reading each once and writing the new weight and
 * slots once (graph.h's graft__update_attr gives the formulas, PyTorch's,
 * in its order of operations).  Elementwise, so any split into tiles gives
 * the same bits.  The destinations are the views after the inputs
 * (kernels.h): the variables themselves when the step is written in place,
 * else slices of the node's packed value. */
#include <math.h>

#include "kernels/kernels_int.h"

/* The hyperparameters as this dtype's numbers. */
typedef struct hp_f32 {
  float lr, c1, c2s, gs, mu, b1, b2, eps, wd;
} hp_f32;
typedef struct hp_f64 {
  double lr, c1, c2s, gs, mu, b1, b2, eps, wd;
} hp_f64;

/* A destination is either its source (written in place) or disjoint from
 * every input (a slice of the step's own arena slot, which the planner
 * never overlaps with a live input), and iteration i touches only element
 * i: no dependence the vectorizer must fear, though it cannot prove it for
 * pointers that may be equal (it would fall back to scalar code, 3-4x
 * slower, in exactly the in-place case). */
#if defined(__clang__)
/* A hint, not a demand: where instrumentation (the sanitizers of the fuzz
 * build) keeps clang from vectorizing, scalar code is correct, so the
 * "loop not vectorized" warning must not fail a -Werror build. */
#pragma clang diagnostic ignored "-Wpass-failed"
#define INDEPENDENT _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define INDEPENDENT _Pragma("GCC ivdep")
#else
#define INDEPENDENT
#endif

/* One loop per kind and dtype, each a plain loop the compiler vectorizes
 * (sqrt without errno: -fno-math-errno).  T is the element type, H its
 * hyperparameter struct. */
#define UPDATE_LOOPS(T, H, SQRT)                                                          \
  GRAFT__SIMD_CLONES                                                                      \
  static void sgd_##T(const H *h, const T *w, const T *g, T *wo, int64_t b, int64_t e) {  \
    INDEPENDENT for (int64_t i = b; i < e; i++) {                                         \
      T ge = h->gs * g[i] + h->wd * w[i];                                                 \
      wo[i] = w[i] - h->lr * ge;                                                          \
    }                                                                                     \
  }                                                                                       \
  GRAFT__SIMD_CLONES                                                                      \
  static void momentum_##T(const H *h, int nesterov, const T *w, const T *g, const T *m,  \
                           T *wo, T *mo, int64_t b, int64_t e) {                          \
    INDEPENDENT for (int64_t i = b; i < e; i++) {                                         \
      T ge = h->gs * g[i] + h->wd * w[i];                                                 \
      T mn = h->mu * m[i] + ge;                                                           \
      T d = nesterov ? ge + h->mu * mn : mn;                                              \
      mo[i] = mn;                                                                         \
      wo[i] = w[i] - h->lr * d;                                                           \
    }                                                                                     \
  }                                                                                       \
  GRAFT__SIMD_CLONES                                                                      \
  static void adam_##T(const H *h, int decoupled, const T *w, const T *g, const T *m,     \
                       const T *v, T *wo, T *mo, T *vo, int64_t b, int64_t e) {           \
    const T step = h->lr / h->c1, shrink = decoupled ? (T)1 - h->lr * h->wd : (T)1;       \
    const T l2 = decoupled ? (T)0 : h->wd;                                                \
    INDEPENDENT for (int64_t i = b; i < e; i++) {                                         \
      T ge = h->gs * g[i] + l2 * w[i];                                                    \
      T mn = h->b1 * m[i] + ((T)1 - h->b1) * ge;                                          \
      T vn = h->b2 * v[i] + ((T)1 - h->b2) * ge * ge;                                     \
      T denom = SQRT(vn) / h->c2s + h->eps;                                               \
      mo[i] = mn;                                                                         \
      vo[i] = vn;                                                                         \
      wo[i] = w[i] * shrink - step * (mn / denom);                                        \
    }                                                                                     \
  }

UPDATE_LOOPS(float, hp_f32, sqrtf)
UPDATE_LOOPS(double, hp_f64, sqrt)
#undef UPDATE_LOOPS

/* Run tile [b, e) of the step in dtype T (H its hyperparameters). */
#define UPDATE_RUN(T, H)                                                                  \
  do {                                                                                    \
    const T *hv = k->in[2]->data;                                                         \
    const H h = {hv[0], hv[1], hv[2], hv[3], (T)u->mu, (T)u->b1, (T)u->b2, (T)u->eps,      \
                 (T)u->wd};                                                               \
    const T *w = k->in[0]->data, *g = k->in[1]->data;                                     \
    T *wo = k->in[k->n_in]->data;                                                         \
    switch (u->kind) {                                                                    \
    case GRAFT__UPDATE_SGD: sgd_##T(&h, w, g, wo, b, e); break;                           \
    case GRAFT__UPDATE_MOMENTUM:                                                          \
    case GRAFT__UPDATE_NESTEROV:                                                          \
      momentum_##T(&h, u->kind == GRAFT__UPDATE_NESTEROV, w, g, k->in[3]->data, wo,       \
                   k->in[k->n_in + 1]->data, b, e);                                       \
      break;                                                                              \
    default:                                                                              \
      adam_##T(&h, u->kind == GRAFT__UPDATE_ADAMW, w, g, k->in[3]->data, k->in[4]->data,  \
               wo, k->in[k->n_in + 1]->data, k->in[k->n_in + 2]->data, b, e);             \
      break;                                                                              \
    }                                                                                     \
  } while (0)

/* The slots each kind keeps (the node's variables after the weight). */
static int slots_of(int kind) {
  switch (kind) {
  case GRAFT__UPDATE_SGD: return 0;
  case GRAFT__UPDATE_MOMENTUM:
  case GRAFT__UPDATE_NESTEROV: return 1;
  default: return 2;
  }
}

graft_status graft__k_UPDATE(const graft__kargs *k, int64_t b, int64_t e) {
  const struct graft__update_attr *u = &k->node->attr.update;
  if (u->kind < GRAFT__UPDATE_SGD || u->kind > GRAFT__UPDATE_ADAMW ||
      u->n_vars != 1 + slots_of(u->kind) || k->n_in != 2 + u->n_vars)
    return graft__kernel_internal(k, "update: kind %d with %d variables and %d inputs", u->kind,
                                  u->n_vars, k->n_in);
  int64_t units = k->in[0]->numel;
  graft_status s = b < e ? graft__kernel_check_units(k, b, e, units) : GRAFT_OK;
  if (s != GRAFT_OK || b >= e) return s;
  if (k->out->dtype == GRAFT_F32)
    UPDATE_RUN(float, hp_f32);
  else if (k->out->dtype == GRAFT_F64)
    UPDATE_RUN(double, hp_f64);
  else
    return graft__kernel_bad_dtype(k, k->out->dtype);
  return GRAFT_OK;
}
