/* Seeded random DAGs for the scheduler tests (test_differential.c,
 * test_memplan.c).
 *
 * A case is a seed.  spec_make draws the case description from it (dtype,
 * a dim alphabet, inputs, variables, output and op counts); inputs_make
 * draws the input data and creates the variables; dag_trace is the trace
 * callback (user: the dag_spec) that draws every op from a generator seeded
 * by the same seed, so every function traced from one seed records the same
 * graph.  The graph mixes unary ops, broadcasting binary ops, where,
 * reductions over random axes, small (batched) matmuls, transpose, reshape,
 * slice, concat, softmax, conv2d and the 2-D pools, constants, and reads and
 * assignments of variables;
 * operands come from every earlier value (fan-in and fan-out), and several
 * values are outputs.  Values stay finite: each value carries a bound on its
 * magnitude and large ones pass through tanh before an op could overflow
 * them.  With dag_spec.ctl set, the graph also holds cond, while_loop, scan
 * and remat nodes with random bodies, some differentiated (see "control
 * flow" below); without it, a seed draws the same graph as before.
 *
 * Header-only (static inline); include after <cmocka.h> and testutil.h. */
#ifndef GRAFT_TEST_RANDOM_DAG_H
#define GRAFT_TEST_RANDOM_DAG_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define COUNT(arr) (sizeof(arr) / sizeof((arr)[0]))

enum {
  MAX_RANK = 4,
  MAX_IN = 3,
  MAX_VARS = 3,
  MAX_OUT = 5,
  MAX_POOL = 160,
  MAX_NUMEL = 4096,
};

/* ---- case description (drawn from the seed, outside the trace) ---------- */

typedef struct shape {
  int rank;
  int64_t d[GRAFT_MAX_RANK];
} shape;

/* What the control-flow generator built, summed over every trace of a spec
 * (dag_spec.counts, NULL: not counted). */
typedef struct dag_counts {
  int64_t cond, while_loop, scan, remat, nested, gradients, jvps, second_order;
} dag_counts;

typedef struct dag_spec {
  uint64_t seed;
  graft_dtype dt;
  int64_t alphabet[3];  /* dims shared by shapes, so many of them broadcast */
  int n_in, n_vars, n_out, n_ops;
  shape in[MAX_IN], var[MAX_VARS];
  graft_variable *vars[MAX_VARS];
  int ctl;              /* draw control flow too (set after spec_make) */
  dag_counts *counts;
} dag_spec;

static inline uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static inline tu_rng rng_from(uint64_t seed, uint64_t salt) {
  tu_rng r = {splitmix(seed ^ salt) | 1u};
  return r;
}

static inline int64_t numel_of(const shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->d[i];
  return n;
}

static inline shape shape_of(const graft_value *v) {
  shape s = {graft_value_rank(v), {0}};
  const int64_t *d = graft_value_shape(v);
  for (int i = 0; i < s.rank; i++) s.d[i] = d[i];
  return s;
}

static inline int64_t random_dim(tu_rng *r, const dag_spec *s) {
  int64_t k = tu_int(r, 0, 19);
  if (k < 3) return 1;
  if (k < 18) return s->alphabet[tu_int(r, 0, 2)];
  return tu_int(r, 1, 9);
}

static inline shape random_shape(tu_rng *r, const dag_spec *s) {
  static const int ranks[] = {0, 1, 2, 2, 3, 3, 3, 3, 4, 4};
  shape sh = {ranks[tu_int(r, 0, 9)], {0}};
  for (int i = 0; i < sh.rank; i++) sh.d[i] = random_dim(r, s);
  while (numel_of(&sh) > MAX_NUMEL) sh.d[tu_int(r, 0, sh.rank - 1)] = 1;
  return sh;
}

static inline void spec_make(dag_spec *s, uint64_t seed) {
  memset(s, 0, sizeof *s);
  tu_rng r = rng_from(seed, 0x5eed);
  s->seed = seed;
  s->dt = tu_int(&r, 0, 2) ? GRAFT_F64 : GRAFT_F32;
  for (int i = 0; i < 3; i++) s->alphabet[i] = tu_int(&r, 3, 9);
  s->n_in = (int)tu_int(&r, 1, MAX_IN);
  s->n_vars = (int)tu_int(&r, 0, MAX_VARS);
  s->n_out = (int)tu_int(&r, 1, MAX_OUT);
  s->n_ops = (int)tu_int(&r, 6, 60);
  for (int i = 0; i < s->n_in; i++) s->in[i] = random_shape(&r, s);
  for (int i = 0; i < s->n_vars; i++) s->var[i] = random_shape(&r, s);
}

/* ---- the generator (runs inside the trace callback) ------------------- */

typedef struct ent {
  graft_value *v;
  double mag;  /* bound on |element| */
} ent;

/* Whether a pool value feeds a later op: outputs prefer the ones that do
 * not, so little of the graph is pruned. */

typedef struct gen {
  graft_trace *t;
  const dag_spec *s;
  tu_rng r;
  ent pool[MAX_POOL];
  uint8_t used[MAX_POOL];
  int n;
  double var_mag[MAX_VARS];
  int failed;
  int depth;   /* 0: the function's trace; k: a body k levels down */
  int smooth;  /* ops whose gradients stay finite (a gradient runs through) */
  int n_ctl;   /* control-flow constructs drawn */
  int second;  /* a body of a construct differentiated twice */
} gen;

static inline int chance(gen *g, int percent) { return tu_int(&g->r, 0, 99) < percent; }

static inline ent push(gen *g, graft_value *v, double mag) {
  ent e = {v, mag};
  if (graft_value_is_poison(v)) {
    g->failed = 1;
    return e;
  }
  if (g->n < MAX_POOL) g->pool[g->n++] = e;
  return e;
}

/* Recent values half of the time (depth), any earlier value otherwise
 * (fan-in from far back, fan-out of old values). */
static inline ent take(gen *g, int64_t i) {
  g->used[i] = 1;
  return g->pool[i];
}

static inline ent tame(gen *g, ent e, double limit) {
  if (e.mag <= limit) return e;
  ent o = {graft_tanh(g->t, e.v), 1.0};
  return o;
}

/* Operands are at most 1e6 in magnitude, so no op below can overflow f32. */
static inline ent pick(gen *g) {
  ent e = chance(g, 50) ? take(g, tu_int(&g->r, MAX(0, g->n - 4), g->n - 1))
                        : take(g, tu_int(&g->r, 0, g->n - 1));
  return tame(g, e, 1e6);
}

static inline graft_value *scalar(gen *g, double v) { return graft_scalar(g->t, g->s->dt, v); }

/* NumPy broadcast of a and b into o; 0 if they do not broadcast. */
static inline int broadcast(const shape *a, const shape *b, shape *o) {
  int r = MAX(a->rank, b->rank);
  for (int i = 0; i < r; i++) {
    int64_t da = i < r - a->rank ? 1 : a->d[i - (r - a->rank)];
    int64_t db = i < r - b->rank ? 1 : b->d[i - (r - b->rank)];
    if (da != db && da != 1 && db != 1) return 0;
    o->d[i] = da == 1 ? db : da;
  }
  o->rank = r;
  return 1;
}

/* A pool value that broadcasts with a (a itself when nothing else does). */
static inline ent pick_partner(gen *g, ent a) {
  shape sa = shape_of(a.v), o;
  int cand[MAX_POOL], n = 0;
  for (int i = 0; i < g->n; i++) {
    shape si = shape_of(g->pool[i].v);
    if (broadcast(&sa, &si, &o) && numel_of(&o) <= MAX_NUMEL) cand[n++] = i;
  }
  if (n == 0) return a;
  return tame(g, take(g, cand[tu_int(&g->r, 0, n - 1)]), 1e6);
}

static inline void op_unary(gen *g) {
  ent x = pick(g);
  graft_trace *t = g->t;
  switch (tu_int(&g->r, 0, 13)) {
  case 0: push(g, graft_tanh(t, x.v), 1); break;
  case 1: push(g, graft_sigmoid(t, x.v), 1); break;
  case 2: push(g, graft_sin(t, x.v), 1); break;
  case 3: push(g, graft_cos(t, x.v), 1); break;
  case 4: push(g, graft_neg(t, x.v), x.mag); break;
  case 5: push(g, graft_abs(t, x.v), x.mag); break;
  case 6: push(g, graft_relu(t, x.v), x.mag); break;
  case 7: x = tame(g, x, 100); push(g, graft_square(t, x.v), x.mag * x.mag); break;
  case 8: x = tame(g, x, 10); push(g, graft_exp(t, x.v), exp(x.mag)); break;
  case 9: push(g, graft_log1p(t, graft_abs(t, x.v)), log1p(x.mag)); break;
  case 10: /* (sqrt's slope is infinite at 0, where relu puts many values) */
    if (g->smooth) push(g, graft_log1p(t, graft_abs(t, x.v)), log1p(x.mag));
    else push(g, graft_sqrt(t, graft_abs(t, x.v)), sqrt(x.mag));
    break;
  case 11: push(g, graft_sign(t, x.v), 1); break;
  case 12: { /* log(|x| + 1) through add and log */
    graft_value *y = graft_log(t, graft_add(t, graft_abs(t, x.v), scalar(g, 1.0)));
    push(g, y, log1p(x.mag));
    break;
  }
  default: { /* a cast round trip is exact */
    graft_dtype other = g->s->dt == GRAFT_F32 ? GRAFT_F64 : GRAFT_F32;
    graft_value *y = g->s->dt == GRAFT_F32 ? graft_cast(t, graft_cast(t, x.v, other), g->s->dt)
                                           : graft_stop_gradient(t, x.v);
    push(g, y, x.mag);
    break;
  }
  }
}

static inline void op_binary(gen *g) {
  ent a = pick(g), b = pick_partner(g, a);
  graft_trace *t = g->t;
  switch (tu_int(&g->r, 0, 9)) {
  case 0: push(g, graft_add(t, a.v, b.v), a.mag + b.mag); break;
  case 1: push(g, graft_sub(t, a.v, b.v), a.mag + b.mag); break;
  case 2:
    a = tame(g, a, 1e3), b = tame(g, b, 1e3);
    push(g, graft_mul(t, a.v, b.v), a.mag * b.mag);
    break;
  case 3: /* b' = |b| + 1 >= 1 */
    push(g, graft_div(t, a.v, graft_add(t, graft_abs(t, b.v), scalar(g, 1.0))), a.mag);
    break;
  case 4: push(g, graft_maximum(t, a.v, b.v), MAX(a.mag, b.mag)); break;
  case 5: push(g, graft_minimum(t, a.v, b.v), MAX(a.mag, b.mag)); break;
  case 6: /* (|a| + 1) ** tanh(b): positive base, exponent in (-1, 1) */
    a = tame(g, a, 1e6);
    push(g, graft_pow(t, graft_add(t, graft_abs(t, a.v), scalar(g, 1.0)), graft_tanh(t, b.v)),
         a.mag + 1);
    break;
  case 7: push(g, graft_greater(t, a.v, b.v), 1); break;
  case 8: push(g, graft_less(t, a.v, b.v), 1); break;
  default: push(g, graft_equal(t, a.v, b.v), 1); break;
  }
}

static inline void op_where(gen *g) {
  ent a = pick(g), b = pick_partner(g, a), c = pick_partner(g, a);
  shape sa = shape_of(a.v), sb = shape_of(b.v), sc = shape_of(c.v), ab, abc;
  if (!broadcast(&sa, &sb, &ab) || !broadcast(&ab, &sc, &abc) || numel_of(&abc) > MAX_NUMEL)
    c = a;
  graft_value *cond = chance(g, 70) ? graft_greater(g->t, a.v, c.v) : c.v;
  push(g, graft_where(g->t, cond, a.v, b.v), MAX(a.mag, b.mag));
}

/* a * b + c, the three broadcast together (c falls back to a when it does
 * not fit). */
static inline void op_mul_add(gen *g) {
  ent a = tame(g, pick(g), 1e3), b = tame(g, pick_partner(g, a), 1e3), c = pick_partner(g, a);
  shape sa = shape_of(a.v), sb = shape_of(b.v), sc = shape_of(c.v), ab, abc;
  if (!broadcast(&sa, &sb, &ab) || !broadcast(&ab, &sc, &abc) || numel_of(&abc) > MAX_NUMEL)
    c = a;
  push(g, graft_mul_add(g->t, a.v, b.v, c.v), a.mag * b.mag + c.mag);
}

static inline void random_axes(gen *g, int rank, int *n_axes, int *axes, int64_t *count,
                        const shape *s) {
  *n_axes = 0;
  *count = 1;
  if (rank == 0 || chance(g, 20)) {
    *count = numel_of(s);
    return;
  }
  for (int d = 0; d < rank; d++)
    if (chance(g, 50)) {
      axes[(*n_axes)++] = chance(g, 30) ? d - rank : d;
      *count *= s->d[d];
    }
  if (*n_axes == 0) {
    int d = (int)tu_int(&g->r, 0, rank - 1);
    axes[(*n_axes)++] = d;
    *count = s->d[d];
  }
}

static inline void op_reduce(gen *g) {
  ent x = pick(g);
  shape s = shape_of(x.v);
  int axes[GRAFT_MAX_RANK], n_axes, keep = chance(g, 50);
  int64_t count;
  random_axes(g, s.rank, &n_axes, axes, &count, &s);
  const int *ax = n_axes ? axes : NULL;
  graft_trace *t = g->t;
  switch (tu_int(&g->r, 0, 4)) {
  case 0: push(g, graft_reduce_sum(t, x.v, n_axes, ax, keep), x.mag * (double)count); break;
  case 1: push(g, graft_reduce_mean(t, x.v, n_axes, ax, keep), x.mag); break;
  case 2: push(g, graft_reduce_max(t, x.v, n_axes, ax, keep), x.mag); break;
  case 3: /* |elements| <= 1 keeps the product <= 1 */
    x = tame(g, x, 1);
    push(g, graft_reduce_prod(t, x.v, n_axes, ax, keep), 1);
    break;
  default:
    x = tame(g, x, 30);
    push(g, graft_logsumexp(t, x.v, n_axes, ax, keep), x.mag + log((double)count) + 1);
    break;
  }
}

/* Batch dims of a and b (all but the last two) broadcast within the size
 * limit, given the result's matrix dims m x n. */
static inline int matmul_fits(const shape *a, const shape *b, int64_t m, int64_t n) {
  shape ba = {a->rank - 2, {0}}, bb = {b->rank - 2, {0}}, o;
  memcpy(ba.d, a->d, sizeof(int64_t) * (size_t)ba.rank);
  memcpy(bb.d, b->d, sizeof(int64_t) * (size_t)bb.rank);
  if (!broadcast(&ba, &bb, &o)) return 0;
  return o.rank + 2 <= MAX_RANK && numel_of(&o) * m * n <= MAX_NUMEL;
}

static inline void op_matmul(gen *g) {
  /* a: a recent value of rank >= 2, or one reshaped to a matrix. */
  ent a = pick(g);
  shape sa = shape_of(a.v);
  if (sa.rank < 2) {
    int64_t n = numel_of(&sa), rows = 1;
    for (int64_t k = 2; k <= 9; k++)
      if (n % k == 0 && chance(g, 50)) rows = k;
    int64_t dims[2] = {rows, n / rows};
    a.v = graft_reshape(g->t, a.v, 2, dims);
    sa = shape_of(a.v);
    if (g->failed || graft_value_is_poison(a.v)) {
      g->failed = 1;
      return;
    }
  }
  a = tame(g, a, 1e3);
  unsigned ta = chance(g, 30) ? GRAFT_TRANS_A : 0;
  int64_t m = sa.d[sa.rank - (ta ? 1 : 2)], k = sa.d[sa.rank - (ta ? 2 : 1)];
  int cand[2 * MAX_POOL], n_cand = 0;
  for (int i = 0; i < g->n; i++) {
    shape sb = shape_of(g->pool[i].v);
    if (sb.rank < 2) continue;
    for (int tb = 0; tb < 2; tb++) {
      int64_t bk = sb.d[sb.rank - (tb ? 1 : 2)], bn = sb.d[sb.rank - (tb ? 2 : 1)];
      if (bk == k && matmul_fits(&sa, &sb, m, bn)) cand[n_cand++] = 2 * i + tb;
    }
  }
  ent b;
  unsigned tb;
  if (n_cand) {
    int c = cand[tu_int(&g->r, 0, n_cand - 1)];
    b = take(g, c / 2);
    tb = (c % 2) ? GRAFT_TRANS_B : 0;
  } else { /* op(a) @ op(a)^T always fits its inner dim */
    b = a;
    tb = ta ? 0 : GRAFT_TRANS_B;
    if (!matmul_fits(&sa, &sa, m, m)) return;
  }
  b = tame(g, b, 1e3);
  push(g, graft_matmul(g->t, a.v, b.v, ta | tb), a.mag * b.mag * (double)k);
}

static inline void op_transpose(gen *g) {
  ent x = pick(g);
  int rank = graft_value_rank(x.v);
  if (chance(g, 20)) {
    push(g, graft_transpose(g->t, x.v, NULL), x.mag);
    return;
  }
  int perm[GRAFT_MAX_RANK];
  for (int i = 0; i < rank; i++) perm[i] = i;
  for (int i = rank - 1; i > 0; i--) {
    int j = (int)tu_int(&g->r, 0, i), tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
  push(g, graft_transpose(g->t, x.v, rank ? perm : NULL), x.mag);
}

static inline void op_reshape(gen *g) {
  ent x = pick(g);
  shape s = shape_of(x.v);
  int64_t n = numel_of(&s);
  int rank = (int)tu_int(&g->r, n == 1 ? 0 : 1, MAX_RANK);
  int64_t dims[GRAFT_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = 1;
  /* Spread n's prime factors over the dims. */
  int64_t rest = n;
  for (int64_t p = 2; rest > 1 && rank > 0; p++)
    while (rest % p == 0) {
      dims[tu_int(&g->r, 0, rank - 1)] *= p;
      rest /= p;
    }
  if (rank > 0 && chance(g, 25)) dims[tu_int(&g->r, 0, rank - 1)] = -1;
  push(g, graft_reshape(g->t, x.v, rank, dims), x.mag);
}

static inline void op_slice(gen *g) {
  ent x = pick(g);
  shape s = shape_of(x.v);
  int64_t begin[GRAFT_MAX_RANK], size[GRAFT_MAX_RANK];
  for (int i = 0; i < s.rank; i++) {
    begin[i] = tu_int(&g->r, 0, s.d[i] - 1);
    size[i] = chance(g, 20) ? -1 : tu_int(&g->r, 1, s.d[i] - begin[i]);
  }
  push(g, graft_slice(g->t, x.v, begin, size), x.mag);
}

static inline void op_concat(gen *g) {
  ent x = pick(g);
  shape s = shape_of(x.v);
  if (s.rank == 0) {
    int64_t one = 1;
    x.v = graft_reshape(g->t, x.v, 1, &one);
    s = shape_of(x.v);
  }
  int axis = (int)tu_int(&g->r, 0, s.rank - 1);
  graft_value *xs[4] = {x.v};
  int n = 1;
  double mag = x.mag;
  int64_t total = numel_of(&s);
  int want = (int)tu_int(&g->r, 1, 3);
  for (int tries = 0; tries < 8 && n <= want; tries++) {
    ent c = chance(g, 25) ? x : take(g, tu_int(&g->r, 0, g->n - 1));
    shape sc = shape_of(c.v);
    int ok = sc.rank == s.rank && total + numel_of(&sc) <= MAX_NUMEL;
    for (int d = 0; ok && d < s.rank; d++) ok = d == axis || sc.d[d] == s.d[d];
    if (!ok) continue;
    xs[n++] = c.v;
    total += numel_of(&sc);
    mag = MAX(mag, c.mag);
  }
  push(g, graft_concat(g->t, n, xs, chance(g, 30) ? axis - s.rank : axis), mag);
}

static inline void op_softmax(gen *g) {
  ent x = pick(g);
  int rank = graft_value_rank(x.v);
  if (rank == 0) return;
  int axis = (int)tu_int(&g->r, 0, rank - 1);
  if (chance(g, 30)) axis -= rank;
  if (chance(g, 70)) {
    push(g, graft_softmax(g->t, x.v, axis), 1);
  } else {
    x = tame(g, x, 1e3);
    push(g, graft_log_softmax(g->t, x.v, axis), 2 * x.mag + 3);
  }
}

/* conv2d (stride, padding, dilation, groups; a constant weight), max_pool2d
 * or avg_pool2d of a value taken as an image (reshaped to [1, 1, h, w]
 * unless it has rank 4). */
static inline void op_conv(gen *g) {
  ent x = pick(g);
  shape s = shape_of(x.v);
  if (s.rank != 4) {
    int64_t n = numel_of(&s), w = 1;
    for (int64_t k = 2; k <= 9; k++)
      if (n % k == 0 && chance(g, 50)) w = k;
    int64_t dims[4] = {1, 1, n / w, w};
    if (n == 0) return;
    x.v = graft_reshape(g->t, x.v, 4, dims);
    s = shape_of(x.v);
  }
  x = tame(g, x, 1e3);
  const int64_t N = s.d[0], C = s.d[1], H = s.d[2], W = s.d[3];
  if (N * C * H * W == 0) return;
  int64_t k[2], st[2], pad[2], dil[2] = {1, 1}, out = N;
  const int kind = (int)tu_int(&g->r, 0, 2); /* conv, max pool, avg pool */
  for (int i = 0; i < 2; i++) {
    const int64_t in = s.d[2 + i];
    k[i] = tu_int(&g->r, 1, MIN(3, in + 1));
    st[i] = tu_int(&g->r, 1, 2);
    pad[i] = tu_int(&g->r, 0, k[i] / 2);
    if (kind == 0 && chance(g, 20) && 2 * (k[i] - 1) + 1 <= in + 2 * pad[i]) dil[i] = 2;
    if (dil[i] * (k[i] - 1) + 1 > in + 2 * pad[i]) return;
    out *= (in + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) / st[i] + 1;
  }
  if (kind == 1) {
    push(g, graft_max_pool2d(g->t, x.v, k, st, pad), x.mag);
    return;
  }
  if (kind == 2) {
    push(g, graft_avg_pool2d(g->t, x.v, k, st, pad), x.mag);
    return;
  }
  const int64_t groups = C % 2 == 0 && chance(g, 30) ? 2 : 1, O = groups * tu_int(&g->r, 1, 3);
  const int64_t ws[4] = {O, C / groups, k[0], k[1]}, nw = O * (C / groups) * k[0] * k[1];
  if (out * O > MAX_NUMEL || nw * out > 64 * MAX_NUMEL) return;
  double buf[MAX_NUMEL];
  float fbuf[MAX_NUMEL];
  if (nw > MAX_NUMEL) return;
  for (int64_t i = 0; i < nw; i++) fbuf[i] = (float)(buf[i] = tu_uniform(&g->r, -1, 1));
  const void *data = g->s->dt == GRAFT_F32 ? (const void *)fbuf : (const void *)buf;
  graft_value *w = graft_constant(g->t, g->s->dt, 4, ws, data);
  push(g, graft_conv2d(g->t, x.v, w, st, pad, dil, groups),
       x.mag * (double)(nw / O));
}

static inline void op_constant(gen *g) {
  shape s = random_shape(&g->r, g->s);
  int64_t n = numel_of(&s);
  switch (tu_int(&g->r, 0, 2)) {
  case 0: push(g, scalar(g, tu_uniform(&g->r, -2, 2)), 2); break;
  case 1: push(g, graft_fill(g->t, g->s->dt, s.rank, s.d, tu_uniform(&g->r, -2, 2)), 2); break;
  default: {
    double buf[MAX_NUMEL];
    float fbuf[MAX_NUMEL];
    for (int64_t i = 0; i < n; i++) fbuf[i] = (float)(buf[i] = tu_uniform(&g->r, -1, 1));
    const void *data = g->s->dt == GRAFT_F32 ? (const void *)fbuf : (const void *)buf;
    push(g, graft_constant(g->t, g->s->dt, s.rank, s.d, data), 1);
    break;
  }
  }
}

static inline void op_read(gen *g) {
  if (!g->s->n_vars) return;
  int k = (int)tu_int(&g->r, 0, g->s->n_vars - 1);
  push(g, graft_read(g->t, g->s->vars[k]), g->var_mag[k]);
}

/* d broadcasts to the variable's shape (without growing it). */
static inline int broadcasts_to(const shape *d, const shape *v) {
  shape o;
  return d->rank <= v->rank && broadcast(d, v, &o) && !memcmp(o.d, v->d, sizeof(int64_t) * (size_t)v->rank);
}

static inline void op_assign(gen *g) {
  if (!g->s->n_vars) return;
  int k = (int)tu_int(&g->r, 0, g->s->n_vars - 1);
  const shape *vs = &g->s->var[k];
  int cand[MAX_POOL], n = 0;
  for (int i = 0; i < g->n; i++) {
    shape si = shape_of(g->pool[i].v);
    if (broadcasts_to(&si, vs)) cand[n++] = i;
  }
  ent d;
  if (n) {
    d = take(g, cand[tu_int(&g->r, 0, n - 1)]);
  } else {
    ent x = pick(g);
    d.v = graft_reduce_mean(g->t, x.v, 0, NULL, 0);
    d.mag = x.mag;
  }
  d = tame(g, d, 1);
  graft_variable *v = g->s->vars[k];
  switch (tu_int(&g->r, 0, 3)) {
  case 0: g->var_mag[k] = d.mag; push(g, graft_assign(g->t, v, d.v), d.mag); break;
  case 1: /* now and then an SGD step, s * d (one mul_add) */
    if (chance(g, 50)) d.v = graft_mul(g->t, scalar(g, 0.5), d.v);
    g->var_mag[k] += d.mag;
    push(g, graft_assign_sub(g->t, v, d.v), g->var_mag[k]);
    break;
  default: g->var_mag[k] += d.mag; push(g, graft_assign_add(g->t, v, d.v), g->var_mag[k]); break;
  }
}

typedef void (*op_fn)(gen *g);

/* ---- control flow (dag_spec.ctl) ------------------------------------------
 *
 * cond, while_loop, scan and remat nodes whose bodies are small random DAGs
 * drawn by the same op generators (all but assignments: a body may not
 * assign), each body from a seed of its own that the trace around draws, so
 * a cond's branches differ.  A body starts from its inputs and a few values
 * of the traces around it used directly (closures), and may hold control
 * flow itself, CTL_DEPTH levels deep.  Loop carries pass through tanh every
 * step, so they stay within 1 however many steps run.  A while loop counts
 * its steps in a carry and goes on while the count is below a bound the
 * data gives (0 to K + 1 steps), now and then also while the tanh of a mean
 * of a random DAG over its state stays below a threshold.  A scan runs over
 * the leading axis of an earlier value (reshaped to [T, n / T] now and
 * then) and of a second x made from it, forwards or in reverse.
 *
 * About a third of the constructs of the function's trace are
 * differentiated: their inputs are fresh (tanh of earlier values), and
 * graft_gradients of a loss over their outputs, graft_jvp of the outputs,
 * or a second-order gradient join the pool.  Their bodies then use only ops
 * whose slopes stay finite (gen.smooth), and their while loops are bounded
 * (reverse mode needs max_iters). */

enum { CTL_DEPTH = 2, CTL_MAX_IN = 4, CTL_MAX_OUT = 4 };
enum { DIFF_NONE, DIFF_REVERSE, DIFF_FORWARD, DIFF_SECOND };

typedef struct body_ctx {
  gen *outer;                    /* the generator of the trace around */
  uint64_t seed;                 /* the bodies' ops are drawn from it */
  int diff;                      /* how the construct is differentiated (DIFF_*) */
  int smooth, second;            /* the bodies' gen.smooth and gen.second */
  double in_mag[CTL_MAX_IN];     /* bounds of the bodies' explicit inputs */
  int n_out;                     /* cond: outputs; remat: outputs; scan: ys */
  shape out[CTL_MAX_OUT];        /* cond: the outputs' shapes */
  int out_from[CTL_MAX_OUT];     /* cond: the input of that shape (-1: a scalar) */
  double out_mag[CTL_MAX_OUT];   /* the bodies' bounds on those outputs */
  graft_value *bound;            /* while: the count's bound (of the trace around) */
  double thr;                    /* while: also while the state's say < thr (0: no) */
  int64_t steps;                 /* scan: the xs' length */
} body_ctx;

static inline void gen_ops(gen *g, int n);

static inline int same_shape(const shape *a, const shape *b) {
  return a->rank == b->rank && !memcmp(a->d, b->d, sizeof(int64_t) * (size_t)a->rank);
}

/* The generator of a body that t traces: its inputs in[0..n_in) (bounds
 * from c), up to 3 values of the trace around (captured), then 2 to 10
 * ops.  salt tells a construct's bodies apart.  NULL when out of memory. */
static inline gen *body_begin(graft_trace *t, const body_ctx *c, uint64_t salt, int n_in,
                              graft_value *const *in) {
  gen *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  const gen *o = c->outer;
  b->t = t;
  b->s = o->s;
  b->r = rng_from(c->seed, salt);
  b->depth = o->depth + 1;
  b->smooth = c->smooth;
  b->second = c->second;
  memcpy(b->var_mag, o->var_mag, sizeof b->var_mag);
  for (int i = 0; i < n_in; i++) push(b, in[i], c->in_mag[i]);
  for (int k = (int)tu_int(&b->r, 0, 3); k > 0 && o->n > 0; k--) {
    int64_t i = chance(b, 50) ? tu_int(&b->r, MAX(0, o->n - 4), o->n - 1) : tu_int(&b->r, 0, o->n - 1);
    push(b, o->pool[i].v, o->pool[i].mag);
  }
  gen_ops(b, (int)tu_int(&b->r, 2, 10));
  return b;
}

/* A value of shape *want from b's values: now and then one of that shape
 * as it is; else base (of shape *want) with one that broadcasts to it (a
 * mean when none does). */
static inline ent shaped(gen *b, const shape *want, ent base) {
  int cand[MAX_POOL], n = 0, same[MAX_POOL], n_same = 0;
  for (int i = 0; i < b->n; i++) {
    shape si = shape_of(b->pool[i].v);
    if (broadcasts_to(&si, want)) cand[n++] = i;
    if (same_shape(&si, want)) same[n_same++] = i;
  }
  if (n_same && chance(b, 30)) return b->pool[same[tu_int(&b->r, 0, n_same - 1)]];
  ent v;
  if (n) {
    v = b->pool[cand[tu_int(&b->r, 0, n - 1)]];
  } else {
    ent x = pick(b);
    v = (ent){graft_reduce_mean(b->t, x.v, 0, NULL, 0), x.mag};
  }
  v = tame(b, v, 1e3);
  base = tame(b, base, 1e3);
  switch (tu_int(&b->r, 0, 2)) {
  case 0: return push(b, graft_add(b->t, base.v, v.v), base.mag + v.mag);
  case 1: return push(b, graft_sub(b->t, base.v, v.v), base.mag + v.mag);
  default: return push(b, graft_mul(b->t, base.v, v.v), base.mag * v.mag);
  }
}

/* A loop carry's next value: cur's shape, within 1. */
static inline graft_value *carry_next(gen *b, graft_value *cur) {
  shape s = shape_of(cur);
  return push(b, graft_tanh(b->t, shaped(b, &s, (ent){cur, 1}).v), 1).v;
}

/* A fresh input of a construct differentiated through: tanh of e, or of
 * an earlier value. */
static inline ent fresh_of(gen *g, ent e) { return push(g, graft_tanh(g->t, e.v), 1); }
static inline ent fresh(gen *g) { return fresh_of(g, pick(g)); }

/* in[0..n) for a construct: earlier values, or fresh ones when it is
 * differentiated; their bounds go to c. */
static inline void ctl_inputs(gen *g, body_ctx *c, int n, graft_value **in) {
  for (int i = 0; i < n; i++) {
    ent e = c->diff != DIFF_NONE ? fresh(g) : pick(g);
    in[i] = e.v;
    c->in_mag[i] = e.mag;
  }
}

/* A construct's context: its bodies' seed, and whether and how it is
 * differentiated (a third of the function trace's constructs; reverse mode
 * half of those). */
static inline body_ctx ctx_make(gen *g) {
  static const int modes[4] = {DIFF_REVERSE, DIFF_REVERSE, DIFF_FORWARD, DIFF_SECOND};
  body_ctx c;
  memset(&c, 0, sizeof c);
  c.outer = g;
  c.seed = tu_next(&g->r);
  if (g->depth == 0 && chance(g, 35)) c.diff = modes[tu_int(&g->r, 0, 3)];
  c.smooth = g->smooth || c.diff != DIFF_NONE;
  c.second = g->second || c.diff == DIFF_SECOND;
  return c;
}

/* GRAFT_TEST_CTL_LOG=1: each construct drawn, on stderr (for a reproducer),
 * in the traces that count them (dag_spec.counts). */
static inline void ctl_log(const gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void ctl_log(const gen *g, const char *fmt, ...) {
  const char *on = getenv("GRAFT_TEST_CTL_LOG");
  if (!on || !*on || !g->s->counts) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%*sseed %llu depth %d: ", 2 * g->depth, "", (unsigned long long)g->s->seed, g->depth);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

#define CTL_COUNT(g, field)                   \
  do {                                        \
    if ((g)->s->counts) (g)->s->counts->field++; \
  } while (0)

/* A tangent for x: tanh of a value of x's shape from the pool (ones when
 * none turns up). */
static inline graft_value *tangent_for(gen *g, graft_value *x) {
  shape sx = shape_of(x);
  for (int tries = 0; tries < 16; tries++) {
    ent e = g->pool[tu_int(&g->r, 0, g->n - 1)];
    shape se = shape_of(e.v);
    if (e.v != x && same_shape(&se, &sx)) return graft_tanh(g->t, e.v);
  }
  return graft_ones_like(g->t, x);
}

/* Push a construct's outputs; then, as diff says, the gradients of a loss
 * over them with respect to its fresh inputs F, their JVPs along tangents
 * from the pool, or a second-order gradient.  Gradients are bounded by nothing
 * the generator tracks: they join with a bound that makes every reader
 * pass them through tanh first. */
static inline void ctl_outputs(gen *g, int n_out, graft_value *const *outs, const double *mag, int diff,
                               int n_f, graft_value *const *F) {
  for (int i = 0; i < n_out; i++) push(g, outs[i], mag[i]);
  if (diff == DIFF_NONE || g->failed) return;
  graft_trace *t = g->t;
  const double unbounded = 1e30;
  graft_value *loss = NULL, *res[CTL_MAX_OUT], *res2[CTL_MAX_IN];
  for (int i = 0; i < n_out; i++) {
    graft_value *l = graft_reduce_sum(t, graft_sin(t, outs[i]), 0, NULL, 0);
    loss = loss ? graft_add(t, loss, l) : l;
  }
  static const char *const names[4] = {"", "reverse", "forward", "second order"};
  ctl_log(g, "  differentiated: %s", names[diff]);
  switch (diff) {
  case DIFF_REVERSE:
    if (graft_gradients(t, 1, &loss, NULL, n_f, F, GRAFT_UNCONNECTED_ZERO, res)) break;
    for (int i = 0; i < n_f; i++) push(g, res[i], unbounded);
    CTL_COUNT(g, gradients);
    return;
  case DIFF_FORWARD: {
    graft_value *tan[CTL_MAX_IN];
    for (int i = 0; i < n_f; i++) tan[i] = tangent_for(g, F[i]);
    if (graft_jvp(t, n_f, F, tan, n_out, outs, GRAFT_UNCONNECTED_ZERO, res)) break;
    for (int i = 0; i < n_out; i++) push(g, res[i], unbounded);
    CTL_COUNT(g, jvps);
    return;
  }
  default: { /* d/dF of <dloss/dF, F> */
    if (graft_gradients(t, 1, &loss, NULL, n_f, F, GRAFT_UNCONNECTED_ZERO, res)) break;
    graft_value *l2 = NULL;
    for (int i = 0; i < n_f; i++) {
      graft_value *l = graft_reduce_sum(t, graft_mul(t, res[i], F[i]), 0, NULL, 0);
      l2 = l2 ? graft_add(t, l2, l) : l;
    }
    if (graft_gradients(t, 1, &l2, NULL, n_f, F, GRAFT_UNCONNECTED_ZERO, res2)) break;
    for (int i = 0; i < n_f; i++) {
      push(g, res[i], unbounded);
      push(g, res2[i], unbounded);
    }
    CTL_COUNT(g, second_order);
    return;
  }
  }
  g->failed = 1;
}

/* ---- cond */

static inline graft_status branch(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                  graft_value **out, body_ctx *c, uint64_t salt) {
  gen *b = body_begin(t, c, salt, n_in, in);
  if (!b) return GRAFT_ENOMEM;
  for (int i = 0; i < n_out && !b->failed; i++) {
    ent base;
    if (c->out_from[i] >= 0) {
      base = (ent){in[c->out_from[i]], c->in_mag[c->out_from[i]]};
    } else {
      ent x = pick(b);
      base = (ent){graft_reduce_mean(t, x.v, 0, NULL, 0), x.mag};
    }
    ent e = shaped(b, &c->out[i], base);
    out[i] = e.v;
    c->out_mag[i] = MAX(c->out_mag[i], e.mag);
  }
  free(b);
  return GRAFT_OK;
}

static inline graft_status then_branch(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                       graft_value **out, void *user) {
  return branch(t, n_in, in, n_out, out, user, 0x7e1);
}

static inline graft_status else_branch(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                       graft_value **out, void *user) {
  return branch(t, n_in, in, n_out, out, user, 0xe15e);
}

/* Outputs shaped like inputs (or scalars); the predicate compares a mean
 * of an earlier value with a threshold (or is the mean itself). */
static inline void op_cond(gen *g) {
  body_ctx c = ctx_make(g);
  int n_in = (int)tu_int(&g->r, 1, 3), n_out = (int)tu_int(&g->r, 1, 2);
  graft_value *in[CTL_MAX_IN], *out[CTL_MAX_OUT];
  ctl_inputs(g, &c, n_in, in);
  if (g->failed) return;
  c.n_out = n_out;
  for (int i = 0; i < n_out; i++) {
    c.out_from[i] = chance(g, 20) ? -1 : (int)tu_int(&g->r, 0, n_in - 1);
    c.out[i] = c.out_from[i] < 0 ? (shape){0, {0}} : shape_of(in[c.out_from[i]]);
  }
  graft_value *m = graft_reduce_mean(g->t, pick(g).v, 0, NULL, 0);
  graft_value *pred = chance(g, 80) ? graft_greater(g->t, m, scalar(g, tu_uniform(&g->r, -0.2, 0.2))) : m;
  if (graft_cond(g->t, pred, n_in, in, then_branch, else_branch, &c, n_out, out)) {
    g->failed = 1;
    return;
  }
  CTL_COUNT(g, cond);
  ctl_log(g, "cond: %d in, %d out", n_in, n_out);
  ctl_outputs(g, n_out, out, c.out_mag, c.diff, n_in, in);
}

/* ---- while_loop: vars (count, state...) */

static inline graft_status while_cond(graft_trace *t, int n, graft_value *const *v, int n_out,
                                      graft_value **out, void *user) {
  (void)n_out;
  body_ctx *c = user;
  graft_value *pred = graft_less(t, v[0], c->bound);
  if (c->thr > 0) { /* the state's say: tanh of the mean of a random DAG over it */
    gen *b = body_begin(t, c, 0xc0d, n, v);
    if (!b) return GRAFT_ENOMEM;
    graft_value *m = graft_tanh(t, graft_reduce_mean(t, b->pool[b->n - 1].v, 0, NULL, 0));
    pred = graft_mul(t, pred, graft_less(t, m, graft_scalar(t, b->s->dt, c->thr)));
    free(b);
  }
  out[0] = pred;
  return GRAFT_OK;
}

static inline graft_status while_body(graft_trace *t, int n, graft_value *const *v, int n_out,
                                      graft_value **out, void *user) {
  gen *b = body_begin(t, user, 0xb0d, n, v);
  if (!b) return GRAFT_ENOMEM;
  out[0] = graft_add(t, v[0], graft_scalar(t, b->s->dt, 1));
  for (int i = 1; i < n_out && !b->failed; i++) out[i] = carry_next(b, v[i]);
  free(b);
  return GRAFT_OK;
}

static inline void op_while(gen *g) {
  body_ctx c = ctx_make(g);
  const int grad = c.diff != DIFF_NONE;
  graft_trace *t = g->t;
  const int64_t K = tu_int(&g->r, 1, 6);
  const int n_state = (int)tu_int(&g->r, 1, 2);
  graft_value *init[3], *out[3], *F[2];
  /* bound = K |sin(3 mean(p))| + 1/2 (or - 1/2): 0 to K + 1 steps, from the data */
  graft_value *m = graft_reduce_mean(t, pick(g).v, 0, NULL, 0);
  graft_value *s3 = graft_abs(t, graft_sin(t, graft_mul(t, m, scalar(g, 3))));
  c.bound = graft_add(t, graft_mul(t, s3, scalar(g, (double)K)), scalar(g, chance(g, 15) ? -0.5 : 0.5));
  c.thr = chance(g, 40) ? tu_uniform(&g->r, 0.1, 0.9) : 0;
  init[0] = scalar(g, 0);
  c.in_mag[0] = (double)K + 2;
  for (int i = 0; i < n_state; i++) {
    ent e = grad ? fresh(g) : tame(g, pick(g), 1);
    init[1 + i] = F[i] = e.v;
    c.in_mag[1 + i] = e.mag;
  }
  graft_while_opts o = {0};
  if (c.smooth) o.max_iters = K + 2; /* reverse mode may run through it */
  else if (chance(g, 40)) o.max_iters = tu_int(&g->r, 1, K + 2); /* may cut it short */
  if (g->failed) return;
  if (graft_while_loop(t, while_cond, while_body, &c, 1 + n_state, init, out, &o)) {
    g->failed = 1;
    return;
  }
  CTL_COUNT(g, while_loop);
  ctl_log(g, "while_loop: %d state, K %lld, thr %g, max_iters %lld", n_state, (long long)K, c.thr,
          (long long)o.max_iters);
  const double mag[3] = {(double)K + 2, 1, 1};
  ctl_outputs(g, 1 + n_state, out, mag, c.diff, n_state, F);
}

/* ---- scan: carries, then ys */

static inline graft_status scan_body(graft_trace *t, int n, graft_value *const *in, int n_out,
                                     graft_value **out, void *user) {
  body_ctx *c = user;
  const int n_carry = n_out - c->n_out;
  gen *b = body_begin(t, c, 0x5ca, n, in);
  if (!b) return GRAFT_ENOMEM;
  for (int i = 0; i < n_carry && !b->failed; i++) out[i] = carry_next(b, in[i]);
  /* ys: the newest value of a shape that stacks, then any */
  for (int i = 0; i < c->n_out && !b->failed; i++) {
    int cand[MAX_POOL], m = 0;
    for (int j = 0; j < b->n; j++) {
      shape s = shape_of(b->pool[j].v);
      if (s.rank < MAX_RANK && numel_of(&s) * c->steps <= MAX_NUMEL) cand[m++] = j;
    }
    ent y = m ? b->pool[cand[i == 0 ? m - 1 : tu_int(&b->r, 0, m - 1)]] : b->pool[b->n - 1];
    out[n_carry + i] = y.v;
    c->out_mag[i] = y.mag;
  }
  free(b);
  return GRAFT_OK;
}

static inline void op_scan(gen *g) {
  body_ctx c = ctx_make(g);
  const int grad = c.diff != DIFF_NONE;
  graft_trace *t = g->t;
  ent x = pick(g);
  shape s = shape_of(x.v);
  if (s.rank == 0 || s.d[0] < 2 || s.d[0] > 8 || chance(g, 40)) { /* a leading axis: [T, n / T] */
    int64_t n = numel_of(&s), T = 1;
    for (int64_t k = 2; k <= 6; k++)
      if (n % k == 0 && (T == 1 || chance(g, 50))) T = k;
    int64_t d[2] = {T, n / T};
    x.v = graft_reshape(t, x.v, 2, d);
  }
  if (grad) x = fresh_of(g, x);
  if (g->failed || graft_value_is_poison(x.v)) {
    g->failed = 1;
    return;
  }
  s = shape_of(x.v);
  c.steps = s.d[0];
  graft_value *xs[2] = {x.v};
  double x_mag[2] = {x.mag};
  int n_xs = 1;
  ent w = pick(g);
  shape sw = shape_of(w.v);
  if (chance(g, 40) && sw.rank < MAX_RANK && numel_of(&sw) * c.steps <= MAX_NUMEL) {
    /* a second x, [T, w's shape]: w scaled by the first x's row means */
    int axes[MAX_RANK];
    for (int i = 1; i < s.rank; i++) axes[i - 1] = i;
    ent xt = tame(g, x, 1e3);
    w = tame(g, w, 1e3);
    graft_value *rows = s.rank > 1 ? graft_reduce_mean(t, xt.v, s.rank - 1, axes, 0) : xt.v;
    int64_t cd[MAX_RANK + 1], wd[MAX_RANK + 1];
    cd[0] = c.steps;
    wd[0] = 1;
    for (int i = 0; i < sw.rank; i++) cd[1 + i] = 1, wd[1 + i] = sw.d[i];
    ent x2 = {graft_mul(t, graft_reshape(t, rows, 1 + sw.rank, cd), graft_reshape(t, w.v, 1 + sw.rank, wd)),
              xt.mag * w.mag};
    if (grad) x2 = fresh_of(g, x2);
    xs[n_xs] = x2.v;
    x_mag[n_xs++] = x2.mag;
  }
  const int n_carry = (int)tu_int(&g->r, 0, 2), n_ys = (int)tu_int(&g->r, n_carry ? 0 : 1, 2);
  graft_value *init[2], *F[CTL_MAX_IN], *out[CTL_MAX_OUT];
  for (int i = 0; i < n_carry; i++) {
    ent e = grad ? fresh(g) : tame(g, pick(g), 1);
    init[i] = F[i] = e.v;
    c.in_mag[i] = e.mag;
  }
  for (int i = 0; i < n_xs; i++) {
    F[n_carry + i] = xs[i];
    c.in_mag[n_carry + i] = x_mag[i];
  }
  c.n_out = n_ys;
  graft_scan_opts o = {.reverse = chance(g, 30), .checkpoint = chance(g, 30) ? tu_int(&g->r, 2, 3) : 0};
  if (g->failed) return;
  if (graft_scan(t, scan_body, &c, n_carry, init, n_xs, xs, n_ys, out, &o)) {
    g->failed = 1;
    return;
  }
  CTL_COUNT(g, scan);
  ctl_log(g, "scan: %d carries, %d xs, %d ys, T %lld, reverse %d, checkpoint %lld", n_carry, n_xs, n_ys,
          (long long)c.steps, o.reverse, (long long)o.checkpoint);
  double mag[CTL_MAX_OUT];
  for (int i = 0; i < n_carry + n_ys; i++) mag[i] = i < n_carry ? 1 : c.out_mag[i - n_carry];
  ctl_outputs(g, n_carry + n_ys, out, mag, c.diff, n_carry + n_xs, F);
}

/* ---- remat: any values of the body out */

static inline graft_status remat_body(graft_trace *t, int n, graft_value *const *in, int n_out,
                                      graft_value **out, void *user) {
  body_ctx *c = user;
  gen *b = body_begin(t, c, 0x4e3a, n, in);
  if (!b) return GRAFT_ENOMEM;
  for (int i = 0; i < n_out && !b->failed; i++) {
    ent e = b->pool[i == 0 ? b->n - 1 : tu_int(&b->r, 0, b->n - 1)];
    out[i] = e.v;
    c->out_mag[i] = e.mag;
  }
  free(b);
  return GRAFT_OK;
}

static inline void op_remat(gen *g) {
  body_ctx c = ctx_make(g);
  int n_in = (int)tu_int(&g->r, 1, 3), n_out = (int)tu_int(&g->r, 1, 2);
  graft_value *in[CTL_MAX_IN], *out[CTL_MAX_OUT];
  ctl_inputs(g, &c, n_in, in);
  if (g->failed) return;
  if (graft_remat(g->t, remat_body, &c, n_in, in, n_out, out)) {
    g->failed = 1;
    return;
  }
  CTL_COUNT(g, remat);
  ctl_log(g, "remat: %d in, %d out", n_in, n_out);
  ctl_outputs(g, n_out, out, c.out_mag, c.diff, n_in, in);
}

static inline void op_control(gen *g) {
  if (g->depth > 0) CTL_COUNT(g, nested);
  switch (tu_int(&g->r, 0, 3)) {
  case 0: op_cond(g); break;
  case 1: op_while(g); break;
  case 2: op_scan(g); break;
  default: op_remat(g); break;
  }
  g->n_ctl++;
}

/* n ops of a body (no assignments; control flow above CTL_DEPTH only). */
static inline void gen_ops(gen *g, int n) {
  static const struct {
    op_fn fn;
    int weight;
  } ops[] = {{op_unary, 18},   {op_binary, 16}, {op_where, 4},   {op_mul_add, 3}, {op_reduce, 8},
             {op_matmul, 6},   {op_transpose, 4}, {op_reshape, 4}, {op_slice, 4}, {op_concat, 3},
             {op_softmax, 4},  {op_constant, 2}, {op_read, 3},   {op_conv, 2},    {op_control, 6}};
  const size_t kinds = g->depth < CTL_DEPTH ? COUNT(ops) : COUNT(ops) - 1;
  int total = 0;
  for (size_t i = 0; i < kinds; i++) total += ops[i].weight;
  for (int i = 0; i < n && !g->failed; i++) {
    int w = (int)tu_int(&g->r, 0, total - 1);
    size_t k = 0;
    while (w >= ops[k].weight) w -= ops[k++].weight;
    ops[k].fn(g);
  }
}

static inline graft_status dag_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  const dag_spec *s = user;
  static const struct {
    op_fn fn;
    int weight;
  } ops[] = {{op_unary, 18}, {op_binary, 20}, {op_where, 5},     {op_mul_add, 3}, {op_reduce, 9},
             {op_matmul, 9}, {op_transpose, 5}, {op_reshape, 5},   {op_slice, 5},
             {op_concat, 5}, {op_softmax, 4},   {op_constant, 3},  {op_read, 4},
             {op_assign, 8}, {op_conv, 4}, {op_control, 10}};
  const size_t kinds = s->ctl ? COUNT(ops) : COUNT(ops) - 1;
  int total = 0;
  for (size_t i = 0; i < kinds; i++) total += ops[i].weight;

  gen *g = calloc(1, sizeof *g);
  if (!g) return GRAFT_ENOMEM;
  g->t = t;
  g->s = s;
  g->r = rng_from(s->seed, 0x7ace);
  /* Initial values are in [-1, 1] and every assignment moves a variable by at
   * most 1, so a second call starts within 1 + n_ops. */
  for (int k = 0; k < s->n_vars; k++) g->var_mag[k] = 1 + s->n_ops;
  for (int i = 0; i < n_in; i++) push(g, in[i], 1);
  for (int k = 0; k < s->n_vars; k++) push(g, graft_read(t, s->vars[k]), g->var_mag[k]);
  for (int i = 0; i < s->n_ops && !g->failed; i++) {
    int w = (int)tu_int(&g->r, 0, total - 1);
    size_t k = 0;
    while (w >= ops[k].weight) w -= ops[k++].weight;
    ops[k].fn(g);
  }
  if (s->ctl && !g->n_ctl && !g->failed) op_control(g);
  /* The newest value, then values nothing reads (so little is pruned), and
   * now and then any value: an input, a read, one that is also an operand. */
  int sinks[MAX_POOL], n_sinks = 0;
  for (int i = 0; i < g->n - 1; i++)
    if (!g->used[i]) sinks[n_sinks++] = i;
  for (int i = 0; i < n_out; i++) {
    int k = (int)tu_int(&g->r, 0, g->n - 1);
    if (i == 0) k = g->n - 1;
    else if (n_sinks && chance(g, 80)) k = sinks[tu_int(&g->r, 0, n_sinks - 1)];
    g->used[k] = 1;
    out[i] = g->pool[k].v;
  }
  /* Often the last output also gathers every other sink: a wide fan-in of
   * means, so nearly the whole graph stays live (always with control flow,
   * whose constructs would be pruned otherwise). */
  if (s->ctl || (n_out > 1 && chance(g, 60))) {
    graft_value *acc = out[n_out - 1];
    for (int i = 0; i < n_sinks; i++)
      if (!g->used[sinks[i]]) {
        graft_value *m = graft_reduce_mean(t, g->pool[sinks[i]].v, 0, NULL, 0);
        acc = graft_add(t, acc, graft_tanh(t, m));
      }
    out[n_out - 1] = acc;
  }
  free(g);
  return GRAFT_OK;
}

/* ---- inputs and comparisons ------------------------------------------------ */

/* A case's input tensors and the variables' initial values. */
typedef struct inputs {
  graft_tensor *in[MAX_IN];
  graft_tensor *var0[MAX_VARS];
} inputs;


static inline graft_tensor *empty_like(const graft_tensor *t) {
  graft_tensor *c = NULL;
  graft_tensor_create(graft_tensor_dtype(t), graft_tensor_rank(t), graft_tensor_shape(t), &c);
  if (c) memset(graft_tensor_data(c), 0xa5, /* stale bytes the call must overwrite */
                (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t)));
  return c;
}

/* First difference between a and b as text, or "" when bitwise equal. */
static inline void diff(const graft_tensor *a, const graft_tensor *b, char *why, size_t len) {
  why[0] = '\0';
  if (!a || !b) {
    snprintf(why, len, "missing tensor (%p vs %p)", (const void *)a, (const void *)b);
    return;
  }
  if (graft_tensor_dtype(a) != graft_tensor_dtype(b) || graft_tensor_rank(a) != graft_tensor_rank(b) ||
      memcmp(graft_tensor_shape(a), graft_tensor_shape(b),
             sizeof(int64_t) * (size_t)graft_tensor_rank(a))) {
    snprintf(why, len, "dtype/shape differ");
    return;
  }
  size_t es = graft_dtype_size(graft_tensor_dtype(a));
  const char *x = graft_tensor_data(a), *y = graft_tensor_data(b);
  for (int64_t i = 0; i < graft_tensor_numel(a); i++)
    if (memcmp(x + (size_t)i * es, y + (size_t)i * es, es)) {
      snprintf(why, len, "element %lld: %.17g, reference %.17g", (long long)i, tu_get(a, i),
               tu_get(b, i));
      return;
    }
}

/* First difference between got[0..n) and ref[0..n) as "<what> <i>: <diff>",
 * or "" when all are bitwise equal; returns whether one differs. */
static inline int diff_list(const char *what, int n, graft_tensor *const *got, graft_tensor *const *ref,
                            char *why, size_t len) {
  char d[256];
  why[0] = '\0';
  for (int i = 0; i < n; i++) {
    diff(got[i], ref[i], d, sizeof d);
    if (d[0]) {
      snprintf(why, len, "%s %d: %s", what, i, d);
      return 1;
    }
  }
  return 0;
}

/* The inputs of case s (uniform in [-1, 1)) and its variables, created in
 * s->vars from var0 (inputs_free destroys both). */
static inline void inputs_make(dag_spec *s, inputs *io) {
  tu_rng r = rng_from(s->seed, 0xda7a);
  memset(io, 0, sizeof *io);
  for (int i = 0; i < s->n_in; i++)
    io->in[i] = tu_tensor_rand(&r, s->dt, s->in[i].rank, s->in[i].d, -1, 1);
  for (int k = 0; k < s->n_vars; k++) {
    char name[16];
    snprintf(name, sizeof name, "v%d", k);
    io->var0[k] = tu_tensor_rand(&r, s->dt, s->var[k].rank, s->var[k].d, -1, 1);
    assert_int_equal(graft_variable_create(NULL, name, s->dt, s->var[k].rank, s->var[k].d,
                                           graft_tensor_data(io->var0[k]), 0, &s->vars[k]),
                     GRAFT_OK);
  }
}

static inline void inputs_free(dag_spec *s, inputs *io) {
  for (int i = 0; i < MAX_IN; i++) graft_tensor_destroy(io->in[i]);
  for (int k = 0; k < MAX_VARS; k++) graft_tensor_destroy(io->var0[k]);
  for (int k = 0; k < s->n_vars; k++) graft_variable_destroy(s->vars[k]);
}

/* ==== structured DAGs ======================================================
 *
 * A second generator for the memory planner: graphs whose shape, not their
 * op mix, is the point.  Every value is a matrix [batch, w] with w from a
 * small set (or [batch, 1] after a reduction), so sizes differ and
 * elementwise partners are easy to find.  A graph is a sequence of
 * patterns drawn with kind-dependent weights:
 *   chain     unary / scalar / input-operand elementwise ops one after another
 *   diamond   v -> (a, b) -> join(a, b), the arms sometimes resized and back
 *   wide      v -> k parallel branches, joined by a tree, a running sum or
 *             through [batch, 1] reductions
 *   late      an early value read again by a late consumer (long lifetimes)
 *   resize    matmul by a constant [w, w']
 *   other     non-elementwise ops of equal size: softmax, transpose twice
 *   assign    a staged assignment of the variable (read after the graph)
 * SDAG_CHAIN draws long chains (20 to 200 ops); SDAG_MIXED ("patterns")
 * draws every pattern.  Values stay finite: each carries a magnitude bound
 * and large ones pass through tanh.  sdag_trace is the trace callback
 * (user: the sdag_spec); every trace from one spec records the same graph. */

enum { SDAG_WIDE, SDAG_DIAMONDS, SDAG_LATE, SDAG_CHAIN, SDAG_MIXED, SDAG_KINDS };
enum { SDAG_MAX_OUT = 4 };

static const char *const sdag_kind_names[SDAG_KINDS] = {"wide", "diamonds", "late", "chain",
                                                        "patterns"};

typedef struct sdag_spec {
  uint64_t seed;
  int kind;              /* SDAG_* */
  graft_dtype dt;
  int64_t batch, width[3];
  int n_in, n_out, has_var;
  int target_ops;        /* patterns are drawn until this many ops exist */
  graft_variable *var;   /* [batch, width[0]] when has_var (sdag_inputs_make) */
} sdag_spec;

/* The spec of seed: kind seed % SDAG_KINDS, about 10 to 300 ops (50 to
 * 600 for chains; one seed in 50 draws 1,000 to 3,000). */
static inline void sdag_spec_make(sdag_spec *s, uint64_t seed) {
  memset(s, 0, sizeof *s);
  tu_rng r = rng_from(seed, 0x57dc);
  static const int64_t widths[] = {4, 8, 12, 16, 24, 32, 40, 64};
  s->seed = seed;
  s->kind = (int)(seed % SDAG_KINDS);
  s->dt = tu_int(&r, 0, 2) ? GRAFT_F64 : GRAFT_F32;
  s->batch = tu_int(&r, 1, 16);
  for (int i = 0; i < 3; i++) s->width[i] = widths[tu_int(&r, 0, (int64_t)COUNT(widths) - 1)];
  s->n_in = (int)tu_int(&r, 1, 2);
  s->n_out = (int)tu_int(&r, 1, SDAG_MAX_OUT);
  s->has_var = tu_int(&r, 0, 2) == 0;
  s->target_ops = (int)(s->kind == SDAG_CHAIN ? tu_int(&r, 50, 600) : tu_int(&r, 10, 300));
  if (tu_int(&r, 0, 49) == 0) s->target_ops = (int)tu_int(&r, 1000, 3000);
}

/* Inputs [batch, width[0]] and [batch, width[1]] (uniform in [-1, 1)) and
 * the variable; sdag_inputs_free destroys them. */
static inline void sdag_inputs_make(sdag_spec *s, inputs *io) {
  tu_rng r = rng_from(s->seed, 0xda7b);
  memset(io, 0, sizeof *io);
  for (int i = 0; i < s->n_in; i++) {
    int64_t d[2] = {s->batch, s->width[i]};
    io->in[i] = tu_tensor_rand(&r, s->dt, 2, d, -1, 1);
  }
  s->var = NULL;
  if (s->has_var) {
    int64_t d[2] = {s->batch, s->width[0]};
    io->var0[0] = tu_tensor_rand(&r, s->dt, 2, d, -1, 1);
    assert_int_equal(graft_variable_create(NULL, "sv", s->dt, 2, d, graft_tensor_data(io->var0[0]),
                                           0, &s->var),
                     GRAFT_OK);
  }
}

static inline void sdag_inputs_free(sdag_spec *s, inputs *io) {
  for (int i = 0; i < MAX_IN; i++) graft_tensor_destroy(io->in[i]);
  for (int k = 0; k < MAX_VARS; k++) graft_tensor_destroy(io->var0[k]);
  graft_variable_destroy(s->var);
  s->var = NULL;
}

typedef struct sgen {
  graft_trace *t;
  const sdag_spec *s;
  tu_rng r;
  ent *pool;
  uint8_t *used;
  int n, cap;
  int ops;     /* values made so far (a bound on graph nodes) */
  int failed;
  graft_value *in[MAX_IN];
} sgen;

static inline int sg_chance(sgen *g, int percent) { return tu_int(&g->r, 0, 99) < percent; }

static inline ent sg_make(sgen *g, graft_value *v, double mag) {
  ent e = {v, mag};
  g->ops++;
  if (graft_value_is_poison(v)) g->failed = 1;
  return e;
}

/* Keep e in the pool (operands of later patterns, output candidates). */
static inline void sg_keep(sgen *g, ent e) {
  if (g->failed) return;
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 256;
    ent *p = realloc(g->pool, (size_t)cap * sizeof *p);
    uint8_t *u = realloc(g->used, (size_t)cap);
    if (p) g->pool = p;
    if (u) g->used = u;
    if (!p || !u) {
      g->failed = 1;
      return;
    }
    g->cap = cap;
  }
  g->used[g->n] = 0;
  g->pool[g->n++] = e;
}

static inline int64_t sg_width(const ent *e) {
  const int64_t *d = graft_value_shape(e->v);
  return d ? d[1] : 1; /* (poison: the trace stops at the next step) */
}

static inline ent sg_take(sgen *g, int i) {
  g->used[i] = 1;
  return g->pool[i];
}
static inline ent sg_recent(sgen *g) { return sg_take(g, (int)tu_int(&g->r, MAX(0, g->n - 3), g->n - 1)); }
static inline ent sg_old(sgen *g) { return sg_take(g, (int)tu_int(&g->r, 0, MAX(0, g->n / 4))); }

static inline ent sg_tame(sgen *g, ent e, double limit) {
  return e.mag <= limit ? e : sg_make(g, graft_tanh(g->t, e.v), 1.0);
}

/* One elementwise op over e (same shape): unary, with a scalar, or with an
 * input of e's shape. */
static inline ent sg_elementwise(sgen *g, ent e) {
  graft_trace *t = g->t;
  e = sg_tame(g, e, 1e4);
  switch (tu_int(&g->r, 0, 11)) {
  case 0: return sg_make(g, graft_tanh(t, e.v), 1);
  case 1: return sg_make(g, graft_sin(t, e.v), 1);
  case 2: return sg_make(g, graft_cos(t, e.v), 1);
  case 3: return sg_make(g, graft_sigmoid(t, e.v), 1);
  case 4: return sg_make(g, graft_neg(t, e.v), e.mag);
  case 5: return sg_make(g, graft_abs(t, e.v), e.mag);
  case 6: return sg_make(g, graft_relu(t, e.v), e.mag);
  case 7: e = sg_tame(g, e, 10); return sg_make(g, graft_square(t, e.v), e.mag * e.mag);
  case 8: return sg_make(g, graft_mul(t, e.v, graft_scalar(t, g->s->dt, 0.5)), e.mag * 0.5);
  case 9: return sg_make(g, graft_add(t, e.v, graft_scalar(t, g->s->dt, 0.25)), e.mag + 0.25);
  default:
    for (int i = 0; i < g->s->n_in; i++)
      if (graft_value_shape(g->in[i])[1] == sg_width(&e) && graft_value_shape(g->in[i])[0] == g->s->batch)
        return sg_make(g, sg_chance(g, 50) ? graft_add(t, e.v, g->in[i]) : graft_mul(t, g->in[i], e.v),
                       e.mag + 1);
    return sg_make(g, graft_tanh(t, e.v), 1);
  }
}

/* a (op) b for b of a's shape or [batch, 1] (broadcast); else b is reduced
 * to [batch, 1] first. */
static inline ent sg_join(sgen *g, ent a, ent b) {
  graft_trace *t = g->t;
  if (sg_width(&b) != sg_width(&a) && sg_width(&b) != 1) {
    const int ax[1] = {1};
    b = sg_make(g, graft_reduce_mean(t, b.v, 1, ax, 1), b.mag);
  }
  a = sg_tame(g, a, 1e4);
  b = sg_tame(g, b, 1e4);
  switch (tu_int(&g->r, 0, 4)) {
  case 0: return sg_make(g, graft_add(t, a.v, b.v), a.mag + b.mag);
  case 1: return sg_make(g, graft_sub(t, a.v, b.v), a.mag + b.mag);
  case 2:
    a = sg_tame(g, a, 1), b = sg_tame(g, b, 1);
    return sg_make(g, graft_mul(t, a.v, b.v), 1);
  case 3: return sg_make(g, graft_maximum(t, a.v, b.v), MAX(a.mag, b.mag));
  default: return sg_make(g, graft_minimum(t, a.v, b.v), MAX(a.mag, b.mag));
  }
}

/* e @ W for a constant W [w, w2] with entries in [-1/w, 1/w): |result| <= e.mag. */
static inline ent sg_resize(sgen *g, ent e, int64_t w2) {
  int64_t w = sg_width(&e), d[2] = {w, w2};
  size_t es = graft_dtype_size(g->s->dt);
  void *data = malloc((size_t)(w * w2) * es);
  if (!data) {
    g->failed = 1;
    return e;
  }
  for (int64_t i = 0; i < w * w2; i++) {
    double x = tu_uniform(&g->r, -1, 1) / (double)w;
    if (g->s->dt == GRAFT_F32) ((float *)data)[i] = (float)x;
    else ((double *)data)[i] = x;
  }
  graft_value *W = graft_constant(g->t, g->s->dt, 2, d, data);
  free(data);
  return sg_make(g, graft_matmul(g->t, e.v, W, 0), e.mag);
}

static inline int64_t sg_other_width(sgen *g, int64_t w) {
  int64_t w2 = g->s->width[tu_int(&g->r, 0, 2)];
  return w2 == w ? g->s->width[(tu_int(&g->r, 0, 1) + 1) % 3] : w2;
}

/* A short arm: elementwise ops, now and then through another width and back. */
static inline ent sg_arm(sgen *g, ent e, int len) {
  int64_t w = sg_width(&e);
  for (int k = 0; k < len && !g->failed; k++) {
    if (w > 1 && sg_chance(g, 20)) {
      e = sg_elementwise(g, sg_resize(g, e, sg_other_width(g, w)));
      e = sg_resize(g, e, w);
    } else {
      e = sg_elementwise(g, e);
    }
  }
  return e;
}

static inline void sg_chain(sgen *g) {
  int len = g->s->kind == SDAG_CHAIN ? (int)tu_int(&g->r, 20, 200) : (int)tu_int(&g->r, 1, 6);
  ent e = sg_recent(g);
  for (int k = 0; k < len && !g->failed; k++) {
    e = sg_elementwise(g, e);
    if (sg_chance(g, 10)) sg_keep(g, e); /* a side value: read again later, or an output */
  }
  sg_keep(g, e);
}

static inline void sg_diamond(sgen *g) {
  ent v = sg_recent(g);
  ent a = sg_arm(g, v, (int)tu_int(&g->r, 1, 3));
  ent b = sg_arm(g, v, (int)tu_int(&g->r, 1, 3));
  sg_keep(g, sg_join(g, a, b));
}

static inline void sg_wide(sgen *g) {
  int k = g->s->kind == SDAG_WIDE ? (int)tu_int(&g->r, 2, 24) : (int)tu_int(&g->r, 2, 6);
  ent v = sg_recent(g), ends[24];
  for (int i = 0; i < k; i++) ends[i] = sg_arm(g, v, (int)tu_int(&g->r, 1, 4));
  switch (tu_int(&g->r, 0, 2)) {
  case 0: /* a balanced tree */
    for (int n = k; n > 1; n = (n + 1) / 2)
      for (int i = 0; 2 * i < n; i++) ends[i] = 2 * i + 1 < n ? sg_join(g, ends[2 * i], ends[2 * i + 1]) : ends[2 * i];
    break;
  case 1: /* a running sum: every branch stays live until its turn */
    for (int i = 1; i < k; i++) ends[0] = sg_join(g, ends[0], ends[i]);
    break;
  default: { /* [batch, 1] means added into the first branch */
    const int ax[1] = {1};
    for (int i = 1; i < k; i++) {
      ent m = sg_make(g, graft_reduce_mean(g->t, ends[i].v, 1, ax, 1), ends[i].mag);
      ends[0] = sg_join(g, ends[0], m);
    }
    break;
  }
  }
  sg_keep(g, ends[0]);
}

static inline void sg_late(sgen *g) {
  int k = (int)tu_int(&g->r, 1, 4);
  ent e = sg_recent(g);
  for (int i = 0; i < k && !g->failed; i++) e = sg_join(g, e, sg_old(g));
  sg_keep(g, e);
}

static inline void sg_resize_step(sgen *g) {
  ent e = sg_recent(g);
  int64_t w = sg_width(&e);
  sg_keep(g, sg_elementwise(g, sg_resize(g, e, w > 1 && sg_chance(g, 70) ? sg_other_width(g, w) : g->s->width[0])));
}

static inline void sg_other(sgen *g) {
  ent e = sg_recent(g);
  if (sg_chance(g, 50) && sg_width(&e) > 1) {
    e = sg_tame(g, e, 30);
    sg_keep(g, sg_make(g, graft_softmax(g->t, e.v, -1), 1));
  } else {
    graft_value *tr = graft_transpose(g->t, e.v, NULL);
    g->ops++;
    sg_keep(g, sg_make(g, graft_transpose(g->t, tr, NULL), e.mag));
  }
}

static inline void sg_assign(sgen *g) {
  const sdag_spec *s = g->s;
  if (!s->var) return;
  int cand = -1;
  for (int i = g->n - 1; i >= 0 && cand < 0; i--)
    if (sg_width(&g->pool[i]) == s->width[0]) cand = i;
  ent d = cand >= 0 ? sg_take(g, cand) : sg_resize(g, sg_recent(g), s->width[0]);
  d = sg_tame(g, d, 1);
  graft_value *a = sg_chance(g, 50) ? graft_assign(g->t, s->var, d.v) : graft_assign_add(g->t, s->var, d.v);
  /* The assignment's value may be read on (graft reads the new value). */
  ent e = sg_make(g, a, 1e6);
  if (sg_chance(g, 30)) sg_keep(g, sg_tame(g, e, 1));
}

static inline graft_status sdag_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                      graft_value **out, void *user) {
  const sdag_spec *s = user;
  static const int weights[SDAG_KINDS][7] = {
      /* chain diamond wide late resize other assign */
      {10, 5, 60, 10, 5, 5, 5},  /* wide */
      {10, 60, 5, 10, 5, 5, 5},  /* diamonds */
      {25, 5, 5, 50, 5, 5, 5},   /* late */
      {75, 3, 2, 10, 3, 5, 2},   /* chain */
      {20, 15, 15, 15, 10, 15, 10}, /* mixed */
  };
  void (*const steps[7])(sgen *) = {sg_chain, sg_diamond, sg_wide, sg_late,
                                    sg_resize_step, sg_other, sg_assign};
  int total = 0;
  for (int k = 0; k < 7; k++) total += weights[s->kind][k];
  sgen g;
  memset(&g, 0, sizeof g);
  g.t = t;
  g.s = s;
  g.r = rng_from(s->seed, 0x7acf);
  for (int i = 0; i < n_in && i < MAX_IN; i++) {
    g.in[i] = in[i];
    sg_keep(&g, (ent){in[i], 1});
  }
  /* Early values for late consumers to come back to. */
  int early = s->kind == SDAG_LATE ? (int)tu_int(&g.r, 4, 10) : 1;
  for (int i = 0; i < early; i++) sg_keep(&g, sg_elementwise(&g, g.pool[tu_int(&g.r, 0, n_in - 1)]));
  while (g.ops < s->target_ops && !g.failed) {
    int w = (int)tu_int(&g.r, 0, total - 1), k = 0;
    while (w >= weights[s->kind][k]) w -= weights[s->kind][k++];
    steps[k](&g);
  }
  /* (A failed op recorded its error on t: the call fails with it.) */
  if (!g.failed) {
    /* The newest value, then values nothing reads (mostly), or any. */
    for (int i = 0; i < n_out; i++) {
      int k = g.n - 1;
      if (i > 0) {
        k = (int)tu_int(&g.r, 0, g.n - 1);
        for (int tries = 0; tries < 8 && g.used[k]; tries++) k = (int)tu_int(&g.r, 0, g.n - 1);
      }
      g.used[k] = 1;
      out[i] = g.pool[k].v;
    }
  }
  free(g.pool);
  free(g.used);
  return GRAFT_OK;
}

#endif /* GRAFT_TEST_RANDOM_DAG_H */
