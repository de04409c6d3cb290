/* Sequential-vs-parallel differential test on seeded random DAGs.
 *
 * Each case is a seed.  The seed fixes the inputs, the variables and the
 * graph: the trace callback draws every op from a generator seeded by it, so
 * every function traced from one seed records the same graph.  The graph
 * mixes unary ops, broadcasting binary ops, where, reductions over random
 * axes, small (batched) matmuls, transpose, reshape, slice, concat, softmax,
 * constants, and reads and assignments of variables; operands come from
 * every earlier value (fan-in and fan-out), and several values are outputs.
 * Values stay finite: each value carries a bound on its magnitude and large
 * ones pass through tanh before an op could overflow them.
 *
 * The graph runs with GRAFT_SCHED=seq (the reference) and with ws at 1, 2,
 * 3, 4 and 8 threads and omp at 2 and 4 threads, with a grain of 64 so small
 * ops are cut into tiles; every output of two successive calls and every
 * variable afterwards must be bitwise equal to the reference.  A few cases
 * also run on a synthetic 4-NUMA topology with 8 threads (several parts).
 *
 * GRAFT_TEST_DAGS sets the case count (default 300); GRAFT_TEST_SEED=S runs
 * only case S (a failure prints the seed to use). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define COUNT(arr) (sizeof(arr) / sizeof((arr)[0]))

/* ASan runs: the OpenMP-task baseline makes GCC 12's libgomp leak its
 * task-dependency bookkeeping (allocated inside GOMP_task; reproducible
 * without graft).  Suppress exactly that: graft allocates nothing under
 * GOMP_task.  The full unwinder is needed to see through libgomp, which has
 * no frame pointers. */
const char *__lsan_default_suppressions(void);
const char *__asan_default_options(void);
__attribute__((used)) const char *__lsan_default_suppressions(void) { return "leak:GOMP_task\n"; }
__attribute__((used)) const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }

enum {
  MAX_RANK = 4,
  MAX_IN = 3,
  MAX_VARS = 3,
  MAX_OUT = 5,
  MAX_POOL = 160,
  MAX_NUMEL = 4096,
  GRAIN = 64,
  DEFAULT_DAGS = 300,
};

/* ---- case description (drawn from the seed, outside the trace) ---------- */

typedef struct shape {
  int rank;
  int64_t d[GRAFT_MAX_RANK];
} shape;

typedef struct dag_spec {
  uint64_t seed;
  graft_dtype dt;
  int64_t alphabet[3];  /* dims shared by shapes, so many of them broadcast */
  int n_in, n_vars, n_out, n_ops;
  shape in[MAX_IN], var[MAX_VARS];
  graft_variable *vars[MAX_VARS];
} dag_spec;

static uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static tu_rng rng_from(uint64_t seed, uint64_t salt) {
  tu_rng r = {splitmix(seed ^ salt) | 1u};
  return r;
}

static int64_t numel_of(const shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->d[i];
  return n;
}

static shape shape_of(const graft_value *v) {
  shape s = {graft_value_rank(v), {0}};
  const int64_t *d = graft_value_shape(v);
  for (int i = 0; i < s.rank; i++) s.d[i] = d[i];
  return s;
}

static int64_t random_dim(tu_rng *r, const dag_spec *s) {
  int64_t k = tu_int(r, 0, 19);
  if (k < 3) return 1;
  if (k < 18) return s->alphabet[tu_int(r, 0, 2)];
  return tu_int(r, 1, 9);
}

static shape random_shape(tu_rng *r, const dag_spec *s) {
  static const int ranks[] = {0, 1, 2, 2, 3, 3, 3, 3, 4, 4};
  shape sh = {ranks[tu_int(r, 0, 9)], {0}};
  for (int i = 0; i < sh.rank; i++) sh.d[i] = random_dim(r, s);
  while (numel_of(&sh) > MAX_NUMEL) sh.d[tu_int(r, 0, sh.rank - 1)] = 1;
  return sh;
}

static void spec_make(dag_spec *s, uint64_t seed) {
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
} gen;

static int chance(gen *g, int percent) { return tu_int(&g->r, 0, 99) < percent; }

static ent push(gen *g, graft_value *v, double mag) {
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
static ent take(gen *g, int64_t i) {
  g->used[i] = 1;
  return g->pool[i];
}

static ent tame(gen *g, ent e, double limit) {
  if (e.mag <= limit) return e;
  ent o = {graft_tanh(g->t, e.v), 1.0};
  return o;
}

/* Operands are at most 1e6 in magnitude, so no op below can overflow f32. */
static ent pick(gen *g) {
  ent e = chance(g, 50) ? take(g, tu_int(&g->r, MAX(0, g->n - 4), g->n - 1))
                        : take(g, tu_int(&g->r, 0, g->n - 1));
  return tame(g, e, 1e6);
}

static graft_value *scalar(gen *g, double v) { return graft_scalar(g->t, g->s->dt, v); }

/* NumPy broadcast of a and b into o; 0 if they do not broadcast. */
static int broadcast(const shape *a, const shape *b, shape *o) {
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
static ent pick_partner(gen *g, ent a) {
  shape sa = shape_of(a.v), o;
  int cand[MAX_POOL], n = 0;
  for (int i = 0; i < g->n; i++) {
    shape si = shape_of(g->pool[i].v);
    if (broadcast(&sa, &si, &o) && numel_of(&o) <= MAX_NUMEL) cand[n++] = i;
  }
  if (n == 0) return a;
  return tame(g, take(g, cand[tu_int(&g->r, 0, n - 1)]), 1e6);
}

static void op_unary(gen *g) {
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
  case 10: push(g, graft_sqrt(t, graft_abs(t, x.v)), sqrt(x.mag)); break;
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

static void op_binary(gen *g) {
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

static void op_where(gen *g) {
  ent a = pick(g), b = pick_partner(g, a), c = pick_partner(g, a);
  shape sa = shape_of(a.v), sb = shape_of(b.v), sc = shape_of(c.v), ab, abc;
  if (!broadcast(&sa, &sb, &ab) || !broadcast(&ab, &sc, &abc) || numel_of(&abc) > MAX_NUMEL)
    c = a;
  graft_value *cond = chance(g, 70) ? graft_greater(g->t, a.v, c.v) : c.v;
  push(g, graft_where(g->t, cond, a.v, b.v), MAX(a.mag, b.mag));
}

static void random_axes(gen *g, int rank, int *n_axes, int *axes, int64_t *count,
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

static void op_reduce(gen *g) {
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
static int matmul_fits(const shape *a, const shape *b, int64_t m, int64_t n) {
  shape ba = {a->rank - 2, {0}}, bb = {b->rank - 2, {0}}, o;
  memcpy(ba.d, a->d, sizeof(int64_t) * (size_t)ba.rank);
  memcpy(bb.d, b->d, sizeof(int64_t) * (size_t)bb.rank);
  if (!broadcast(&ba, &bb, &o)) return 0;
  return o.rank + 2 <= MAX_RANK && numel_of(&o) * m * n <= MAX_NUMEL;
}

static void op_matmul(gen *g) {
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

static void op_transpose(gen *g) {
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

static void op_reshape(gen *g) {
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

static void op_slice(gen *g) {
  ent x = pick(g);
  shape s = shape_of(x.v);
  int64_t begin[GRAFT_MAX_RANK], size[GRAFT_MAX_RANK];
  for (int i = 0; i < s.rank; i++) {
    begin[i] = tu_int(&g->r, 0, s.d[i] - 1);
    size[i] = chance(g, 20) ? -1 : tu_int(&g->r, 1, s.d[i] - begin[i]);
  }
  push(g, graft_slice(g->t, x.v, begin, size), x.mag);
}

static void op_concat(gen *g) {
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

static void op_softmax(gen *g) {
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

static void op_constant(gen *g) {
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

static void op_read(gen *g) {
  if (!g->s->n_vars) return;
  int k = (int)tu_int(&g->r, 0, g->s->n_vars - 1);
  push(g, graft_read(g->t, g->s->vars[k]), g->var_mag[k]);
}

/* d broadcasts to the variable's shape (without growing it). */
static int broadcasts_to(const shape *d, const shape *v) {
  shape o;
  return d->rank <= v->rank && broadcast(d, v, &o) && !memcmp(o.d, v->d, sizeof(int64_t) * (size_t)v->rank);
}

static void op_assign(gen *g) {
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
  case 1: g->var_mag[k] += d.mag; push(g, graft_assign_sub(g->t, v, d.v), g->var_mag[k]); break;
  default: g->var_mag[k] += d.mag; push(g, graft_assign_add(g->t, v, d.v), g->var_mag[k]); break;
  }
}

typedef void (*op_fn)(gen *g);

static graft_status dag_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                              graft_value **out, void *user) {
  const dag_spec *s = user;
  static const struct {
    op_fn fn;
    int weight;
  } ops[] = {{op_unary, 18}, {op_binary, 20}, {op_where, 5},     {op_reduce, 9},
             {op_matmul, 9}, {op_transpose, 5}, {op_reshape, 5},   {op_slice, 5},
             {op_concat, 5}, {op_softmax, 4},   {op_constant, 3},  {op_read, 4},
             {op_assign, 8}};
  int total = 0;
  for (size_t i = 0; i < COUNT(ops); i++) total += ops[i].weight;

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
   * means, so nearly the whole graph stays live. */
  if (n_out > 1 && chance(g, 60)) {
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

/* ---- running and comparing ----------------------------------------------- */

typedef struct run_cfg {
  const char *sched;
  int threads;
  const char *topology, *partition;
} run_cfg;

typedef struct result {
  graft_status st;
  char msg[512];
  graft_tensor *out[2][MAX_OUT];  /* first call (graft allocates), second (caller's) */
  graft_tensor *var[MAX_VARS];
  int64_t tiles, nodes, parts;
} result;

typedef struct inputs {
  graft_tensor *in[MAX_IN];
  graft_tensor *var0[MAX_VARS];
} inputs;

static void result_free(result *r) {
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < MAX_OUT; i++) graft_tensor_destroy(r->out[c][i]);
  for (int i = 0; i < MAX_VARS; i++) graft_tensor_destroy(r->var[i]);
  memset(r, 0, sizeof *r);
}

static graft_tensor *copy_of(const graft_tensor *t) {
  graft_tensor *c = NULL;
  if (graft_tensor_create(graft_tensor_dtype(t), graft_tensor_rank(t), graft_tensor_shape(t), &c))
    return NULL;
  memcpy(graft_tensor_data(c), graft_tensor_data(t),
         (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t)));
  return c;
}

static graft_tensor *empty_like(const graft_tensor *t) {
  graft_tensor *c = NULL;
  graft_tensor_create(graft_tensor_dtype(t), graft_tensor_rank(t), graft_tensor_shape(t), &c);
  if (c) memset(graft_tensor_data(c), 0xa5, /* stale bytes the call must overwrite */
                (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t)));
  return c;
}

/* Two calls of a fresh function on rt, variables starting from var0. */
static void run_dag(graft_runtime *rt, dag_spec *s, const inputs *io, result *r) {
  memset(r, 0, sizeof *r);
  for (int k = 0; k < s->n_vars; k++) graft_variable_set(s->vars[k], io->var0[k]);
  graft_function_desc d = {.name = "dag", .trace = dag_trace, .user = s,
                           .n_inputs = s->n_in, .n_outputs = s->n_out};
  graft_function *f = NULL;
  r->st = graft_function_create(rt, &d, &f);
  if (r->st) {
    snprintf(r->msg, sizeof r->msg, "graft_function_create failed");
    return;
  }
  r->st = graft_function_call(f, s->n_in, io->in, s->n_out, r->out[0]);
  if (r->st == GRAFT_OK) {
    for (int i = 0; i < s->n_out; i++) r->out[1][i] = empty_like(r->out[0][i]);
    r->st = graft_function_call(f, s->n_in, io->in, s->n_out, r->out[1]);
  }
  snprintf(r->msg, sizeof r->msg, "%s", graft_function_errmsg(f));
  graft_plan_stats ps;
  if (r->st == GRAFT_OK && graft_function_stats(f, &ps) == GRAFT_OK) {
    r->tiles = ps.tiles;
    r->nodes = ps.live_nodes;
    r->parts = ps.parts;
  }
  const char *dot = getenv("GRAFT_TEST_DOT"); /* GRAFT_TEST_DOT=file: the graph, for a repro */
  FILE *df = dot && *dot ? fopen(dot, "w") : NULL;
  if (df) {
    graft_function_write_dot(f, df);
    fclose(df);
  }
  graft_function_destroy(f);
  for (int k = 0; k < s->n_vars; k++) r->var[k] = copy_of(graft_variable_value(s->vars[k]));
}

/* First difference between a and b as text, or "" when bitwise equal. */
static void diff(const graft_tensor *a, const graft_tensor *b, char *why, size_t len) {
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

/* Empty string when got equals ref bitwise; else what differs. */
static void compare(const dag_spec *s, const result *ref, const result *got, char *why, size_t len) {
  char d[256];
  why[0] = '\0';
  if (got->st != ref->st) {
    snprintf(why, len, "status %s (%.200s), reference %s (%.200s)", graft_status_name(got->st), got->msg,
             graft_status_name(ref->st), ref->msg);
    return;
  }
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < s->n_out; i++) {
      diff(got->out[c][i], ref->out[c][i], d, sizeof d);
      if (d[0]) {
        snprintf(why, len, "call %d output %d: %s", c + 1, i, d);
        return;
      }
    }
  for (int k = 0; k < s->n_vars; k++) {
    diff(got->var[k], ref->var[k], d, sizeof d);
    if (d[0]) {
      snprintf(why, len, "variable %d: %s", k, d);
      return;
    }
  }
}

/* Index of the first non-finite element of t, or -1. */
static int64_t first_nonfinite(const graft_tensor *t) {
  for (int64_t i = 0; t && i < graft_tensor_numel(t); i++)
    if (!isfinite(tu_get(t, i))) return i;
  return -1;
}

/* The generator promises finite values; a NaN would make equality weak. */
static void check_finite(const dag_spec *s, const result *ref, char *why, size_t len) {
  why[0] = '\0';
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < s->n_out; i++)
      if (first_nonfinite(ref->out[c][i]) >= 0) {
        snprintf(why, len, "call %d output %d element %lld is not finite", c + 1, i,
                 (long long)first_nonfinite(ref->out[c][i]));
        return;
      }
  for (int k = 0; k < s->n_vars; k++)
    if (first_nonfinite(ref->var[k]) >= 0) {
      snprintf(why, len, "variable %d is not finite", k);
      return;
    }
}

static void inputs_make(dag_spec *s, inputs *io) {
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

static void inputs_free(dag_spec *s, inputs *io) {
  for (int i = 0; i < MAX_IN; i++) graft_tensor_destroy(io->in[i]);
  for (int k = 0; k < MAX_VARS; k++) graft_tensor_destroy(io->var0[k]);
  for (int k = 0; k < s->n_vars; k++) graft_variable_destroy(s->vars[k]);
}

static graft_runtime *runtime_for(const run_cfg *c) {
  graft_runtime_opts o;
  graft_runtime_opts_init(&o);
  o.num_threads = c->threads;
  o.sched = c->sched;
  o.grain = GRAIN;
  o.topology = c->topology;
  o.partition = c->partition;
  graft_runtime *rt = NULL;
  char msg[512] = "";
  graft_status st = graft_runtime_create_ex(&o, &rt, msg, sizeof msg);
  if (st) fail_msg("runtime %s x%d: %s: %s", c->sched, c->threads, graft_status_name(st), msg);
  return rt;
}

typedef struct totals {
  int64_t cases, tiles, nodes, multipart;
} totals;

/* Run case seed on every configuration and compare with the reference. */
static void check_case(uint64_t seed, graft_runtime *ref_rt, graft_runtime **rts,
                       const run_cfg *cfgs, int n_cfgs, totals *tot) {
  dag_spec s;
  inputs io;
  result ref, got;
  char why[512];
  spec_make(&s, seed);
  inputs_make(&s, &io);
  run_dag(ref_rt, &s, &io, &ref);
  if (ref.st != GRAFT_OK) {
    result_free(&ref);
    inputs_free(&s, &io);
    fail_msg("seed %llu: the reference (seq) call failed: %s: %s (rerun: GRAFT_TEST_SEED=%llu)",
             (unsigned long long)seed, graft_status_name(ref.st), ref.msg,
             (unsigned long long)seed);
  }
  check_finite(&s, &ref, why, sizeof why);
  if (why[0]) {
    result_free(&ref);
    inputs_free(&s, &io);
    fail_msg("seed %llu: reference: %s (rerun: GRAFT_TEST_SEED=%llu)", (unsigned long long)seed,
             why, (unsigned long long)seed);
  }
  tot->cases++;
  for (int c = 0; c < n_cfgs; c++) {
    run_dag(rts[c], &s, &io, &got);
    compare(&s, &ref, &got, why, sizeof why);
    if (got.st == GRAFT_OK) {
      tot->tiles += got.tiles;
      tot->nodes += got.nodes;
      tot->multipart += got.parts > 1;
    }
    result_free(&got);
    if (why[0]) {
      result_free(&ref);
      inputs_free(&s, &io);
      fail_msg("seed %llu, sched %s x%d%s%s: %s (rerun: GRAFT_TEST_SEED=%llu)",
               (unsigned long long)seed, cfgs[c].sched, cfgs[c].threads,
               cfgs[c].topology ? " topology " : "", cfgs[c].topology ? cfgs[c].topology : "",
               why, (unsigned long long)seed);
    }
  }
  result_free(&ref);
  inputs_free(&s, &io);
}

static int64_t env_count(const char *name, int64_t dflt) {
  const char *e = getenv(name);
  if (!e || !*e) return dflt;
  long long v = atoll(e);
  return v > 0 ? v : dflt;
}

/* Cases [first, first + n), or just GRAFT_TEST_SEED when set. */
static void run_cases(const run_cfg *cfgs, int n_cfgs, uint64_t first, int64_t n, totals *tot) {
  run_cfg ref_cfg = {"seq", 1, NULL, NULL};
  graft_runtime *ref_rt = runtime_for(&ref_cfg);
  graft_runtime *rts[16];
  for (int c = 0; c < n_cfgs; c++) rts[c] = runtime_for(&cfgs[c]);
  const char *only = getenv("GRAFT_TEST_SEED");
  if (only && *only) {
    check_case(strtoull(only, NULL, 10), ref_rt, rts, cfgs, n_cfgs, tot);
  } else {
    for (int64_t k = 0; k < n; k++) check_case(first + (uint64_t)k, ref_rt, rts, cfgs, n_cfgs, tot);
  }
  for (int c = 0; c < n_cfgs; c++) graft_runtime_destroy(rts[c]);
  graft_runtime_destroy(ref_rt);
}

static void test_graft_function_call__random_dags_bitwise_equal_to_seq(void **state) {
  (void)state;
  static const run_cfg cfgs[] = {{"ws", 1, NULL, NULL}, {"ws", 2, NULL, NULL},
                                 {"ws", 3, NULL, NULL}, {"ws", 4, NULL, NULL},
                                 {"ws", 8, NULL, NULL}, {"omp", 2, NULL, NULL},
                                 {"omp", 4, NULL, NULL}};
  totals tot = {0};
  int64_t n = env_count("GRAFT_TEST_DAGS", DEFAULT_DAGS);
  run_cases(cfgs, (int)COUNT(cfgs), 1, n, &tot);
  print_message("%lld cases, %lld live nodes, %lld tasks over %d schedules\n",
                (long long)tot.cases, (long long)tot.nodes, (long long)tot.tiles,
                (int)COUNT(cfgs));
  /* The grain must have cut ops into tiles, or the test checks too little. */
  const char *only = getenv("GRAFT_TEST_SEED");
  if (!only || !*only) assert_true(tot.tiles > 2 * tot.nodes);
}

static void test_graft_function_call__random_dags_on_numa_topology(void **state) {
  (void)state;
  static const run_cfg cfgs[] = {{"ws", 8, "pack:2 numa:2 core:4 pu:1", "numa"},
                                 {"omp", 8, "pack:2 numa:2 core:4 pu:1", "numa"},
                                 {"ws", 3, "pack:2 numa:2 core:4 pu:1", "numa"}};
  totals tot = {0};
  int64_t n = env_count("GRAFT_TEST_DAGS", DEFAULT_DAGS) / 10;
  run_cases(cfgs, (int)COUNT(cfgs), 1000001, n < 20 ? 20 : n, &tot);
  print_message("%lld cases, %lld with several parts\n", (long long)tot.cases,
                (long long)tot.multipart);
  /* Several parts must have held work in some of them. */
  const char *only = getenv("GRAFT_TEST_SEED");
  if (!only || !*only) assert_true(tot.multipart > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_function_call__random_dags_bitwise_equal_to_seq),
      cmocka_unit_test(test_graft_function_call__random_dags_on_numa_topology),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
