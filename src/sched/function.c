/* Functions: the trace cache, the plan cache, and one call from inputs to
 * committed outputs and variables.
 *
 * Without a declared signature each concrete signature gets its own trace;
 * with one, a single trace (symbolic dims) serves every matching input.  In
 * both cases plans are keyed by the concrete signature and kept in an LRU of
 * cache_capacity entries; evicting a trace evicts its plans. */
#include <stdlib.h>
#include <string.h>

#include "common/simd_state.h"
#include "dist/dist.h"
#include "sched/sched.h"

#define DEFAULT_CAPACITY 16
/* Plans one function may keep: the caches are arrays sized at create. */
#define MAX_CAPACITY 65536

/* A signature flattened as [dtype, rank, dims...] per input. */
typedef struct sigkey {
  int64_t *v;
  int64_t len;
} sigkey;

typedef struct trace_entry {
  graft__graph *g;
  sigkey key;  /* empty for the declared-signature trace */
  uint64_t tick;
} trace_entry;

typedef struct plan_entry {
  graft__plan *p;
  graft__graph *g;
  sigkey key;
  uint64_t tick;
  int alone;   /* runs on the calling thread whatever the team (runs_alone) */
} plan_entry;

struct graft_function {
  graft_runtime *rt;
  char *name;
  graft_trace_fn trace;
  void *user;
  int n_inputs, n_outputs;
  int capacity;
  /* declared signature, or n_sig 0 */
  int has_sig;
  graft_dtype *sig_dtypes;
  int *sig_ranks;
  int64_t *sig_dims; /* n_inputs * GRAFT_MAX_RANK */
  trace_entry *traces;
  int n_traces;
  plan_entry *plans;
  int n_plans;
  uint64_t tick;
  int trace_count;
  int busy;
  graft__graph *last_graph;
  graft__plan *last_plan;
  /* The MPI communicator its traces' collectives use (graft/mpi.h): every
   * call then agrees with the other ranks before and after it runs. */
  unsigned char comm[GRAFT__COMM_BYTES];
  int has_comm;
  char msg[GRAFT__MSG_LEN];
};

static graft_status failf(graft_function *f, graft_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static graft_status failf(graft_function *f, graft_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  graft__vmsgf(f->msg, fmt, ap);
  va_end(ap);
  return s;
}

/* ---- create / destroy -------------------------------------------------- */

static graft_status copy_signature(graft_function *f, const graft_signature *s) {
  int n = f->n_inputs;
  f->sig_dtypes = graft__calloc((size_t)(n ? n : 1), sizeof *f->sig_dtypes);
  f->sig_ranks = graft__calloc((size_t)(n ? n : 1), sizeof *f->sig_ranks);
  f->sig_dims = graft__calloc((size_t)(n ? n : 1) * GRAFT_MAX_RANK, sizeof *f->sig_dims);
  if (!f->sig_dtypes || !f->sig_ranks || !f->sig_dims) return GRAFT_ENOMEM;
  for (int i = 0; i < n; i++) {
    f->sig_dtypes[i] = s->dtypes[i];
    f->sig_ranks[i] = s->ranks[i];
    for (int d = 0; d < s->ranks[i]; d++) f->sig_dims[i * GRAFT_MAX_RANK + d] = s->shapes[i][d];
  }
  f->has_sig = 1;
  return GRAFT_OK;
}

/* A refusal of graft_function_create, naming the call and the function. */
static graft_status create_fail(const graft_function_desc *d, graft_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static graft_status create_fail(const graft_function_desc *d, graft_status st, const char *fmt, ...) {
  char why[GRAFT__MSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  graft__vmsgf(why, fmt, ap);
  va_end(ap);
  return graft__fail(st, "graft_function_create('%s'): %s", d->name ? d->name : "function", why);
}

static graft_status check_signature(const graft_function_desc *d) {
  const graft_signature *s = d->signature;
  if (s->n != d->n_inputs)
    return create_fail(d, GRAFT_EINVAL, "signature->n is %d (expected n_inputs, %d)", s->n,
                       d->n_inputs);
  if (d->n_inputs && (!s->dtypes || !s->ranks || !s->shapes))
    return create_fail(d, GRAFT_EINVAL, "signature->%s is NULL (expected %d entries)",
                       !s->dtypes ? "dtypes" : !s->ranks ? "ranks" : "shapes", s->n);
  for (int i = 0; i < s->n; i++) {
    if (graft_dtype_size(s->dtypes[i]) == 0)
      return create_fail(d, GRAFT_EDTYPE,
                         "signature->dtypes[%d] is %d (expected GRAFT_F32, GRAFT_F64 or GRAFT_I32)",
                         i, (int)s->dtypes[i]);
    if (s->ranks[i] < 0 || s->ranks[i] > GRAFT_MAX_RANK)
      return create_fail(d, GRAFT_EINVAL, "signature->ranks[%d] is %d (expected 0..%d)", i,
                         s->ranks[i], GRAFT_MAX_RANK);
    if (s->ranks[i] && !s->shapes[i])
      return create_fail(d, GRAFT_EINVAL, "signature->shapes[%d] is NULL (expected %d dims)", i,
                         s->ranks[i]);
    for (int k = 0; k < s->ranks[i]; k++)
      if (s->shapes[i][k] < -1)
        return create_fail(d, GRAFT_EINVAL,
                           "signature->shapes[%d][%d] is %lld (expected a dim >= 0, or -1 for "
                           "unknown)", i, k, (long long)s->shapes[i][k]);
  }
  return GRAFT_OK;
}

GRAFT_API graft_status graft_function_create(graft_runtime *rt, const graft_function_desc *desc,
                                             graft_function **out) {
  if (!out)
    return graft__fail(GRAFT_EINVAL, "graft_function_create: out is NULL (expected a "
                       "graft_function **)");
  *out = NULL;
  if (!desc)
    return graft__fail(GRAFT_EINVAL, "graft_function_create: desc is NULL (expected a "
                       "graft_function_desc)");
  if (!rt) return create_fail(desc, GRAFT_EINVAL, "rt is NULL (expected a runtime)");
  if (!desc->trace)
    return create_fail(desc, GRAFT_EINVAL, "desc->trace is NULL (expected a trace callback)");
  if (desc->n_inputs < 0)
    return create_fail(desc, GRAFT_EINVAL, "desc->n_inputs is %d (expected >= 0)", desc->n_inputs);
  if (desc->n_outputs < 1)
    return create_fail(desc, GRAFT_EINVAL, "desc->n_outputs is %d (expected >= 1)",
                       desc->n_outputs);
  if (desc->cache_capacity < 0 || desc->cache_capacity > MAX_CAPACITY)
    return create_fail(desc, GRAFT_EINVAL, "desc->cache_capacity is %d (expected 0..%d, 0 = %d)",
                       desc->cache_capacity, MAX_CAPACITY, DEFAULT_CAPACITY);
  graft_status st;
  if (desc->signature && (st = check_signature(desc))) return st;
  if (graft__runtime_destroyed(rt))
    return create_fail(desc, GRAFT_EMISUSE, "rt was destroyed (expected a live runtime)");
  graft_function *f = graft__calloc(1, sizeof *f);
  if (!f) return create_fail(desc, GRAFT_ENOMEM, "out of memory");
  f->rt = rt;
  graft__runtime_ref(rt);
  f->trace = desc->trace;
  f->user = desc->user;
  f->n_inputs = desc->n_inputs;
  f->n_outputs = desc->n_outputs;
  f->capacity = desc->cache_capacity ? desc->cache_capacity : DEFAULT_CAPACITY;
  f->name = graft__strdup(desc->name ? desc->name : "function");
  f->traces = graft__calloc((size_t)f->capacity, sizeof *f->traces);
  f->plans = graft__calloc((size_t)f->capacity, sizeof *f->plans);
  if (!f->name || !f->traces || !f->plans ||
      (desc->signature && copy_signature(f, desc->signature))) {
    graft_function_destroy(f);
    return create_fail(desc, GRAFT_ENOMEM, "out of memory");
  }
  *out = f;
  return GRAFT_OK;
}

static void drop_plan(graft_function *f, int i) {
  if (f->plans[i].p == f->last_plan) f->last_plan = NULL;
  graft__plan_destroy(f->plans[i].p);
  graft__free(f->plans[i].key.v);
  f->plans[i] = f->plans[--f->n_plans];
}

static void drop_trace(graft_function *f, int i) {
  graft__graph *g = f->traces[i].g;
  for (int k = f->n_plans; k-- > 0;)
    if (f->plans[k].g == g) drop_plan(f, k);
  if (g == f->last_graph) f->last_graph = NULL;
  graft__graph_destroy(g);
  graft__free(f->traces[i].key.v);
  f->traces[i] = f->traces[--f->n_traces];
}

GRAFT_API void graft_function_destroy(graft_function *f) {
  if (!f) return;
  while (f->n_traces) drop_trace(f, f->n_traces - 1);
  while (f->n_plans) drop_plan(f, f->n_plans - 1);
  graft__free(f->traces);
  graft__free(f->plans);
  graft__free(f->sig_dtypes);
  graft__free(f->sig_ranks);
  graft__free(f->sig_dims);
  graft__free(f->name);
  if (f->rt) graft__runtime_unref(f->rt);
  graft__free(f);
}

/* ---- signatures -------------------------------------------------------- */

/* A call's scratch arrays: a stack buffer of the caller's when the need
 * fits (a call with a few inputs, outputs and variables allocates nothing),
 * else the heap; free with scratch_free. */
static void *scratch_get(void *stack, size_t stack_bytes, size_t need) {
  return need <= stack_bytes ? stack : graft__malloc(need ? need : 1);
}

static void scratch_free(void *p, const void *stack) {
  if (p != stack) graft__free(p);
}

/* Tensors (inputs, outputs, variables) a call handles in stack buffers
 * (a training step of a few layers with Adam's moments fits), and the
 * counts it compares pair by pair rather than sorting (fewer steps). */
#define SMALL_CALL 64
#define FEW_PAIRS 16

/* The key of in[] in k->v: buf (cap bytes) or allocated (scratch_get). */
static graft_status make_key(int n, graft_tensor *const *in, int64_t *buf, size_t cap, sigkey *k) {
  int64_t len = 0;
  for (int i = 0; i < n; i++) len += 2 + graft_tensor_rank(in[i]);
  k->v = scratch_get(buf, cap, (size_t)len * sizeof *k->v);
  if (!k->v) return GRAFT_ENOMEM;
  k->len = 0;
  for (int i = 0; i < n; i++) {
    k->v[k->len++] = graft_tensor_dtype(in[i]);
    k->v[k->len++] = graft_tensor_rank(in[i]);
    for (int d = 0; d < graft_tensor_rank(in[i]); d++) k->v[k->len++] = graft_tensor_shape(in[i])[d];
  }
  return GRAFT_OK;
}

static int key_eq(const sigkey *a, const sigkey *b) {
  return a->len == b->len && !memcmp(a->v, b->v, (size_t)a->len * sizeof *a->v);
}

static graft_status check_inputs(graft_function *f, int n_in, graft_tensor *const *in) {
  if (n_in != f->n_inputs)
    return failf(f, GRAFT_EINVAL, "%s: called with %d inputs, the function takes %d", f->name, n_in,
                 f->n_inputs);
  if (n_in && !in) return failf(f, GRAFT_EINVAL, "%s: input array is NULL", f->name);
  for (int i = 0; i < n_in; i++) {
    if (!in[i]) return failf(f, GRAFT_EINVAL, "%s: input %d is NULL", f->name, i);
    if (!f->has_sig) continue;
    if (graft_tensor_dtype(in[i]) != f->sig_dtypes[i])
      return failf(f, GRAFT_EDTYPE, "%s: input %d is %s, the signature says %s", f->name, i,
                   graft_dtype_name(graft_tensor_dtype(in[i])), graft_dtype_name(f->sig_dtypes[i]));
    int bad = graft_tensor_rank(in[i]) != f->sig_ranks[i];
    for (int d = 0; !bad && d < f->sig_ranks[i]; d++) {
      int64_t s = f->sig_dims[i * GRAFT_MAX_RANK + d];
      bad = s >= 0 && s != graft_tensor_shape(in[i])[d];
    }
    if (bad) {
      char want[96], got[96];
      graft__shape_str(want, sizeof want, f->sig_ranks[i], &f->sig_dims[i * GRAFT_MAX_RANK]);
      graft__shape_str(got, sizeof got, graft_tensor_rank(in[i]), graft_tensor_shape(in[i]));
      return failf(f, GRAFT_ESHAPE, "%s: input %d has shape %s, the signature says %s (-1: any)",
                   f->name, i, got, want);
    }
  }
  return GRAFT_OK;
}

/* ---- tracing ----------------------------------------------------------- */

static graft_status add_inputs(graft_function *f, graft__graph *g, graft_tensor *const *in) {
  for (int i = 0; i < f->n_inputs; i++) {
    graft__node *n = graft__graph_add(g, GRAFT__OP_INPUT, 0, NULL);
    if (!n) return GRAFT_ENOMEM;
    n->attr.input.index = i;
    n->dtype = (uint8_t)graft_tensor_dtype(in[i]);
    n->rank = (uint8_t)graft_tensor_rank(in[i]);
    for (int d = 0; d < n->rank; d++) {
      int64_t dim = graft_tensor_shape(in[i])[d];
      if (f->has_sig && f->sig_dims[i * GRAFT_MAX_RANK + d] == -1) {
        dim = graft__graph_new_sym(g, i, d);
        if (dim == -1) return GRAFT_ENOMEM;
      }
      n->shape[d] = dim;
    }
    g->inputs[i] = n->id;
  }
  return GRAFT_OK;
}

static graft_status run_trace(graft_function *f, graft_tensor *const *in, graft__graph **out) {
  *out = NULL;
  graft__graph *g = graft__graph_create(f->name, f->n_inputs, f->n_outputs);
  if (!g || add_inputs(f, g, in)) {
    graft__graph_destroy(g);
    return failf(f, GRAFT_ENOMEM, "%s: out of memory while tracing", f->name);
  }
  graft_value **ins = graft__calloc((size_t)(f->n_inputs + f->n_outputs) + 1, sizeof *ins);
  if (!ins) {
    graft__graph_destroy(g);
    return failf(f, GRAFT_ENOMEM, "%s: out of memory while tracing", f->name);
  }
  graft_value **outs = ins + f->n_inputs;
  for (int i = 0; i < f->n_inputs; i++) ins[i] = graft__value(g, g->inputs[i]);

  graft_trace t;
  graft__trace_begin(&t, g);
  graft_status cb = f->trace(&t, f->n_inputs, ins, f->n_outputs, outs, f->user);
  f->trace_count++;
  graft_status st = t.status;
  if (st) {
    failf(f, st, "%s", t.msg);
  } else if (cb && graft__status_is_error(cb)) {
    st = failf(f, cb, "%s: the trace callback returned %s", f->name, graft_status_name(cb));
  } else if (cb) {
    st = failf(f, GRAFT__STATUS_FOREIGN,
               "%s: the trace callback returned %d, which is not a graft_status error code "
               "(reported as %s)", f->name, (int)cb, graft_status_name(GRAFT__STATUS_FOREIGN));
  } else {
    for (int i = 0; i < f->n_outputs && !st; i++) {
      graft__node *n;
      switch (graft__trace_value(&t, outs[i], &n)) {
      case GRAFT__VALUE_NODE: g->outputs[i] = n->id; break;
      case GRAFT__VALUE_NULL:
        st = failf(f, GRAFT_EINVAL, "%s: the trace callback left output %d unset", f->name, i);
        break;
      case GRAFT__VALUE_POISON:
        st = failf(f, GRAFT_EMISUSE, "%s: output %d is the poison value of another (failed) trace",
                   f->name, i);
        break;
      case GRAFT__VALUE_FOREIGN:
        st = failf(f, GRAFT_EMISUSE, "%s: output %d belongs to another trace, or to one that ended",
                   f->name, i);
        break;
      }
    }
  }
  graft__trace_end(&t);
  graft__free(ins);
  if (st) {
    graft__graph_destroy(g);
    return st;
  }
  *out = g;
  return GRAFT_OK;
}

/* The least recently used entry of each cache. */
static int oldest_trace(const graft_function *f) {
  int v = 0;
  for (int i = 1; i < f->n_traces; i++)
    if (f->traces[i].tick < f->traces[v].tick) v = i;
  return v;
}

static int oldest_plan(const graft_function *f) {
  int v = 0;
  for (int i = 1; i < f->n_plans; i++)
    if (f->plans[i].tick < f->plans[v].tick) v = i;
  return v;
}

static graft_status get_graph(graft_function *f, graft_tensor *const *in, const sigkey *key,
                              graft__graph **out) {
  for (int i = 0; i < f->n_traces; i++) {
    if (f->has_sig || key_eq(&f->traces[i].key, key)) {
      f->traces[i].tick = ++f->tick;
      *out = f->traces[i].g;
      return GRAFT_OK;
    }
  }
  graft__graph *g;
  graft_status st = run_trace(f, in, &g);
  if (st) return st;
  sigkey copy = {NULL, 0};
  if (!f->has_sig) {
    copy.v = graft__malloc((size_t)(key->len ? key->len : 1) * sizeof *copy.v);
    if (!copy.v) {
      graft__graph_destroy(g);
      return failf(f, GRAFT_ENOMEM, "%s: out of memory", f->name);
    }
    memcpy(copy.v, key->v, (size_t)key->len * sizeof *copy.v);
    copy.len = key->len;
  }
  if (f->n_traces == f->capacity)
    drop_trace(f, oldest_trace(f));
  f->traces[f->n_traces++] = (trace_entry){g, copy, ++f->tick};
  *out = g;
  return GRAFT_OK;
}

/* A plan runs alone (graft__plan_runs_alone) when no second worker could
 * help it.  (A plan holding control flow walks its order on the calling
 * thread whatever the team, and each control node's bodies get the team:
 * execute.) */

static graft_status get_plan(graft_function *f, graft__graph *g, graft_tensor *const *in,
                             const sigkey *key, graft__plan **out, int *alone) {
  for (int i = 0; i < f->n_plans; i++) {
    if (f->plans[i].g == g && key_eq(&f->plans[i].key, key)) {
      f->plans[i].tick = ++f->tick;
      *out = f->plans[i].p;
      *alone = f->plans[i].alone;
      return GRAFT_OK;
    }
  }
  graft__plan *p;
  graft__plan_opts po = {f->rt->cfg.grain, graft__runtime_parts(f->rt), f->rt->cfg.lanes,
                         f->rt->num_threads == 1 || f->rt->cfg.sched == GRAFT__SCHED_SEQ,
                         f->rt->cfg.fusion, f->rt, (int)f->rt->cfg.sched, 0};
  graft_status st = graft__plan_compile(g, in, &po, &p, f->msg);
  if (st) return st;
  sigkey copy = {graft__malloc((size_t)(key->len ? key->len : 1) * sizeof *copy.v), key->len};
  if (!copy.v) {
    graft__plan_destroy(p);
    return failf(f, GRAFT_ENOMEM, "%s: out of memory", f->name);
  }
  memcpy(copy.v, key->v, (size_t)key->len * sizeof *copy.v);
  if (f->n_plans == f->capacity)
    drop_plan(f, oldest_plan(f));
  *alone = graft__plan_runs_alone(p, f->rt->cfg.grain);
  f->plans[f->n_plans++] = (plan_entry){p, g, copy, ++f->tick, *alone};
  *out = p;
  return GRAFT_OK;
}

/* ---- one call ---------------------------------------------------------- */

static size_t tensor_bytes(const graft_tensor *t) {
  return (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t));
}

/* The memory of a call's tensors: inputs, output destinations, variables. */
enum { SET_IN, SET_OUT, SET_VAR, N_SETS };

typedef struct range {
  uintptr_t lo, hi;
  uint32_t idx;
  int set;
} range;

static int by_range(const void *a, const void *b) {
  const range *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* x's bits in out_hit / var_hit (an input has none). */
static uint8_t *hit_of(const range *x, uint8_t *out_hit, uint8_t *var_hit) {
  return x->set == SET_OUT ? &out_hit[x->idx] : x->set == SET_VAR ? &var_hit[x->idx] : NULL;
}

/* hit[SET_OUT][i] and hit[SET_VAR][k]: bit s set when output destination i
 * (variable k's tensor) shares bytes with a tensor of set s, another set.
 * A few ranges are compared pair by pair; more take a sort and two sweeps
 * (the largest end of each set before a range, the smallest start after
 * it), not a test of every pair: a call with thousands of outputs and
 * variables stays cheap. */
static graft_status clashes(const graft__graph *g, int n_in, graft_tensor *const *in, int n_out,
                            graft_tensor *const *dst, uint8_t *out_hit, uint8_t *var_hit) {
  int64_t n = (int64_t)n_in + n_out + g->n_vars, m = 0;
  range few[SMALL_CALL];
  range *r = scratch_get(few, sizeof few, (size_t)n * sizeof *r);
  if (!r) return GRAFT_ENOMEM;
  for (int64_t k = 0; k < n; k++) {
    int set = k < n_in ? SET_IN : k < n_in + n_out ? SET_OUT : SET_VAR;
    uint32_t idx = (uint32_t)(set == SET_IN ? k : set == SET_OUT ? k - n_in : k - n_in - n_out);
    const graft_tensor *t = set == SET_IN ? in[idx] : set == SET_OUT ? dst[idx] : g->vars[idx]->value;
    uintptr_t lo = (uintptr_t)graft_tensor_data(t);
    size_t bytes = tensor_bytes(t);
    if (bytes) r[m++] = (range){lo, lo + bytes, idx, set};
  }
  for (int i = 0; i < n_out; i++) out_hit[i] = 0;
  for (int64_t k = 0; k < g->n_vars; k++) var_hit[k] = 0;
  if (m <= FEW_PAIRS) {
    for (int64_t q = 0; q < m; q++)
      for (int64_t u = q + 1; u < m; u++) {
        const range *x = &r[q], *y = &r[u];
        if (x->set == y->set || x->lo >= y->hi || y->lo >= x->hi) continue;
        uint8_t *hx = hit_of(x, out_hit, var_hit), *hy = hit_of(y, out_hit, var_hit);
        if (hx) *hx |= (uint8_t)(1u << y->set);
        if (hy) *hy |= (uint8_t)(1u << x->set);
      }
    scratch_free(r, few);
    return GRAFT_OK;
  }
  qsort(r, (size_t)m, sizeof *r, by_range);
  uintptr_t edge[N_SETS];
  for (int pass = 0; pass < 2; pass++) {
    for (int s = 0; s < N_SETS; s++) edge[s] = pass ? UINTPTR_MAX : 0;
    for (int64_t q = 0; q < m; q++) {
      const range *x = &r[pass ? m - 1 - q : q];
      uint8_t hit = 0;
      for (int s = 0; s < N_SETS; s++)
        if (s != x->set && (pass ? edge[s] < x->hi : edge[s] > x->lo)) hit |= (uint8_t)(1u << s);
      uint8_t *hx = hit_of(x, out_hit, var_hit);
      if (hx) *hx |= hit;
      edge[x->set] = pass ? GRAFT__MIN(edge[x->set], x->lo) : GRAFT__MAX(edge[x->set], x->hi);
    }
  }
  scratch_free(r, few);
  return GRAFT_OK;
}

static int by_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* direct[i] = 0 for an output whose node an earlier output is too: only
 * the first of them is written straight into its tensor.  A few are
 * compared pair by pair, more sorted by (node, i). */
static graft_status first_of_each_node(const graft__graph *g, int n_out, uint8_t *direct) {
  if (n_out <= FEW_PAIRS) {
    for (int q = 1; q < n_out; q++)
      for (int u = 0; u < q && direct[q]; u++) direct[q] = g->outputs[u] != g->outputs[q];
    return GRAFT_OK;
  }
  uint64_t *ids = graft__malloc((size_t)n_out * sizeof *ids);
  if (!ids) return GRAFT_ENOMEM;
  for (int i = 0; i < n_out; i++) ids[i] = (uint64_t)g->outputs[i] << 32 | (uint32_t)i;
  qsort(ids, (size_t)n_out, sizeof *ids, by_u64);
  for (int q = 1; q < n_out; q++)
    if (ids[q] >> 32 == ids[q - 1] >> 32) direct[(uint32_t)ids[q]] = 0;
  graft__free(ids);
  return GRAFT_OK;
}

static size_t view_bytes(const graft__tview *v) {
  return (size_t)v->numel * graft_dtype_size(v->dtype);
}

/* Check caller-provided outputs and allocate the missing ones into mine[]. */
static graft_status prepare_outputs(graft_function *f, graft__plan *p, graft_tensor **out,
                                    graft_tensor **mine) {
  const graft__graph *g = p->g;
  for (int i = 0; i < f->n_outputs; i++) {
    const graft__tview *v = graft__plan_view(p, g->outputs[i]);
    mine[i] = NULL;
    if (out[i]) {
      if (graft_tensor_dtype(out[i]) != v->dtype)
        return failf(f, GRAFT_EDTYPE, "%s: output %d tensor is %s, the output is %s", f->name, i,
                     graft_dtype_name(graft_tensor_dtype(out[i])), graft_dtype_name(v->dtype));
      if (graft_tensor_rank(out[i]) != v->rank ||
          memcmp(graft_tensor_shape(out[i]), v->shape, (size_t)v->rank * sizeof(int64_t))) {
        char want[96], got[96];
        graft__shape_str(want, sizeof want, v->rank, v->shape);
        graft__shape_str(got, sizeof got, graft_tensor_rank(out[i]), graft_tensor_shape(out[i]));
        return failf(f, GRAFT_ESHAPE, "%s: output %d tensor has shape %s, the output is %s",
                     f->name, i, got, want);
      }
      continue;
    }
    if (graft__tensor_create_unfilled(v->dtype, v->rank, v->shape, &mine[i]))
      return failf(f, GRAFT_ENOMEM, "%s: out of memory allocating output %d", f->name, i);
  }
  return GRAFT_OK;
}

/* The fallback block of p: room to stage every step the plan meant to
 * write in place (each aligned), allocated once, before anything runs. */
static graft_status grow_fallback(graft__plan *p) {
  size_t need = 0;
  for (uint32_t k = 0; k < p->n_assigns; k++) {
    uint32_t id = p->assigns[k];
    if (p->unstaged[id])
      need += (view_bytes(graft__plan_view(p, id)) + GRAFT__ALIGN - 1) / GRAFT__ALIGN * GRAFT__ALIGN;
  }
  void *b = graft__aligned_alloc(need ? need : GRAFT__ALIGN, GRAFT__ALIGN);
  if (!b) return GRAFT_ENOMEM;
  graft__free(p->fallback);
  p->fallback = b;
  p->fallback_bytes = need;
  return GRAFT_OK;
}

/* Point external views at this call's memory; decide which outputs the
 * kernels write straight into (direct[i]). */
static graft_status bind(graft_function *f, graft__plan *p, graft_tensor *const *in,
                         graft_tensor *const *dst, uint8_t *direct) {
  const graft__graph *g = p->g;
  for (int i = 0; i < g->n_inputs; i++) graft__plan_view(p, g->inputs[i])->data = graft_tensor_data(in[i]);
  for (int64_t i = 0; i < g->n_vars; i++) {
    if (__atomic_load_n(&g->vars[i]->destroyed, __ATOMIC_ACQUIRE))
      return failf(f, GRAFT_EMISUSE, "%s: variable '%s' was destroyed after this function traced it",
                   f->name, g->vars[i]->name);
  }
  for (uint32_t k = 0; k < p->n_var_reads; k++) {
    uint32_t id = p->var_reads[k];
    graft__plan_view(p, id)->data = graft_tensor_data(graft__graph_node(g, id)->attr.var.var->value);
  }
  /* Arena views keep their pointers between calls; only outputs that went
   * straight to the caller last time are pointed back at the arena. */
  for (int i = 0; i < f->n_outputs; i++) {
    uint32_t id = g->outputs[i];
    if (p->offset[id] != SIZE_MAX) graft__plan_view(p, id)->data = p->arena + p->offset[id];
  }
  /* Outputs go straight into the caller's tensors only when nothing can
   * fail once kernels run: shapes are checked at compile, executors never
   * allocate, so only ops that fail on data (the plan's fallible flag) or a
   * test's injected fault can.  Otherwise outputs go through the arena and
   * are copied at commit, so a failure leaves the caller's tensors as they
   * were. */
  int may_fail = p->fallible || graft__exec_fault_hook != NULL;
  int n_out = f->n_outputs;
  uint8_t few_hits[SMALL_CALL];
  uint8_t *var_hit = scratch_get(few_hits, sizeof few_hits, (size_t)g->n_vars);
  if (!var_hit || clashes(g, f->n_inputs, in, n_out, dst, direct, var_hit)) {
    scratch_free(var_hit, few_hits); /* (NULL: nothing) */
    return failf(f, GRAFT_ENOMEM, "%s: out of memory", f->name);
  }
  /* Outputs: straight into the destination unless it shares bytes with an
   * input or a variable, and only the first of outputs that are one node. */
  for (int i = 0; i < n_out; i++) direct[i] = !(direct[i] & ((1u << SET_IN) | (1u << SET_VAR)));
  if (first_of_each_node(g, n_out, direct)) {
    scratch_free(var_hit, few_hits);
    return failf(f, GRAFT_ENOMEM, "%s: out of memory", f->name);
  }
  /* Assigns the plan allows go straight into their variable (the plan
   * orders them after every op that may fail on data), unless a fault is
   * injected or the variable's memory is also a tensor of this call; the
   * others write to the arena and are copied at commit. */
  size_t fallback_at = 0;
  for (uint32_t k = 0; k < p->n_assigns; k++) {
    uint32_t id = p->assigns[k];
    const graft__node *n = graft__graph_node(g, id);
    graft_variable *const *vs;
    int nv = graft__node_writes(n, &vs), dir = p->assign_direct[k] && !graft__exec_fault_hook;
    for (int j = 0; j < nv && dir; j++) {
      const uint32_t *vk = graft__ptrmap_get(&g->var_set, vs[j]);
      dir = vk && !var_hit[*vk];
    }
    graft__tview *view = graft__plan_view(p, id);
    if (n->op != GRAFT__OP_UPDATE) {
      view->data = dir ? graft_tensor_data(vs[0]->value) : p->arena + p->offset[id];
      continue;
    }
    /* An optimizer step writes each variable, or its slice of the packed
     * value in the arena (staged): in the fallback block for a step the
     * plan meant to write in place (it has no arena bytes). */
    view->data = p->arena + p->offset[id];
    if (!dir && p->unstaged[id]) {
      if (fallback_at + view_bytes(view) > p->fallback_bytes && grow_fallback(p)) {
        scratch_free(var_hit, few_hits);
        return failf(f, GRAFT_ENOMEM, "%s: out of memory staging an optimizer step", f->name);
      }
      view->data = (unsigned char *)p->fallback + fallback_at;
      fallback_at += (view_bytes(view) + GRAFT__ALIGN - 1) / GRAFT__ALIGN * GRAFT__ALIGN;
    }
    const graft__kargs *ka = &p->kargs[p->vslot[id]];
    size_t slice = view_bytes(view) / (size_t)nv;
    for (int j = 0; j < nv; j++) /* the destination views (kernels.h) */
      ((graft__tview *)ka->in[ka->n_in + j])->data =
          dir ? graft_tensor_data(vs[j]->value) : (unsigned char *)view->data + (size_t)j * slice;
  }
  for (int i = 0; i < n_out; i++) {
    uint32_t id = g->outputs[i];
    direct[i] = direct[i] && !may_fail && p->offset[id] != SIZE_MAX;
    if (direct[i]) graft__plan_view(p, id)->data = graft_tensor_data(dst[i]);
  }
  scratch_free(var_hit, few_hits);
  return GRAFT_OK;
}

static void commit(graft_function *f, graft__plan *p, graft_tensor *const *dst,
                   const uint8_t *direct) {
  const graft__graph *g = p->g;
  for (int i = 0; i < f->n_outputs; i++) {
    const graft__tview *v = graft__plan_view(p, g->outputs[i]);
    if (!direct[i] && view_bytes(v)) memcpy(graft_tensor_data(dst[i]), v->data, view_bytes(v));
  }
  for (uint32_t k = 0; k < p->n_assigns; k++) {
    const graft__node *n = graft__graph_node(g, p->assigns[k]);
    const graft__tview *v = graft__plan_view(p, p->assigns[k]);
    graft_variable *const *vs;
    int nv = graft__node_writes(n, &vs);
    const graft__kargs *ka = &p->kargs[p->vslot[p->assigns[k]]];
    size_t bytes = view_bytes(v) / (size_t)nv;
    for (int j = 0; j < nv; j++) {
      const void *from = n->op == GRAFT__OP_UPDATE ? ka->in[ka->n_in + j]->data : v->data;
      void *to = graft_tensor_data(vs[j]->value);
      if (bytes && from != to) memcpy(to, from, bytes); /* else direct */
    }
  }
}

/* A plan that runs alone skips the team (waking it and waiting for it at
 * the end cost microseconds) unless a trace wants the workers' slices;
 * the OpenMP-task baseline always starts its team. */
static graft_status execute(graft_function *f, graft__plan *p, int alone) {
  graft__simd_clean_upper(); /* the caller's AVX code may have left them dirty */
  if (p->has_ctl) return graft__ctl_run_plan(p, f->rt, f->msg); /* bodies take the team */
  switch (f->rt->cfg.sched) {
  case GRAFT__SCHED_SEQ: return graft__exec_seq(p, f->msg);
  case GRAFT__SCHED_WS:
    if (alone && !f->rt->trace) {
      p->stats.steals = 0;
      return graft__exec_seq(p, f->msg);
    }
    return graft__exec_ws(p, f->rt, f->msg);
  case GRAFT__SCHED_OMP: return graft__exec_omp(p, f->rt, f->msg);
  }
  return GRAFT_EINTERNAL;
}

/* The communicator of g's collectives becomes f's (one per function). */
static graft_status note_comm(graft_function *f, const graft__graph *g) {
  if (!g->n_colls) return GRAFT_OK;
  if (f->has_comm && memcmp(f->comm, g->comm, GRAFT__COMM_BYTES))
    return failf(f, GRAFT_EUNSUPPORTED, "%s: trace '%s' all-reduces over another communicator than "
                 "the function's earlier traces (expected one per function)", f->name, g->name);
  memcpy(f->comm, g->comm, GRAFT__COMM_BYTES);
  f->has_comm = 1;
  return GRAFT_OK;
}

/* A call of a function with collectives agrees with the other ranks on
 * st (this rank's outcome so far; `when` says which vote): every rank
 * gets GRAFT_OK only if every rank had it, else a failure, naming the
 * rank where it happened.  Each rank votes twice per call that runs (before
 * and after), once per call refused before running. */
static graft_status agree(graft_function *f, graft_status st, const char *when) {
  if (!f->has_comm) return st;
  graft_status all = st;
  int who = -1;
  char why[GRAFT__MSG_LEN];
  graft_status vs = graft__dist_vote(f->comm, f->rt->cfg.mpi_timeout, &all, &who, why);
  if (vs) return st ? st : failf(f, vs, "%s: agreeing %s the call with the other ranks: %s",
                                 f->name, when, why);
  if (st || !all) return st;
  return failf(f, all, "%s: rank %d %s (%s); no rank's variables or outputs changed", f->name,
               who, strcmp(when, "before") ? "failed this call" : "refused this call before it ran",
               graft_status_str(all));
}

static graft_status call_locked(graft_function *f, int n_in, graft_tensor *const *in, int n_out,
                                graft_tensor **out) {
  if (graft__runtime_destroyed(f->rt))
    return failf(f, GRAFT_EMISUSE, "%s: its runtime was destroyed (destroy functions before their "
                 "runtime)", f->name);
  graft_status st = check_inputs(f, n_in, in);
  if (!st && n_out != f->n_outputs)
    st = failf(f, GRAFT_EINVAL, "%s: called with %d outputs, the function has %d", f->name, n_out,
               f->n_outputs);
  if (!st && !out) st = failf(f, GRAFT_EINVAL, "%s: output array is NULL", f->name);

  sigkey key;
  int64_t few_dims[4 * SMALL_CALL];
  graft__graph *g = NULL;
  graft__plan *p = NULL;
  int alone = 0;
  if (!st && make_key(n_in, in, few_dims, sizeof few_dims, &key))
    st = failf(f, GRAFT_ENOMEM, "%s: out of memory", f->name);
  else if (!st) {
    st = get_graph(f, in, &key, &g);
    if (!st) st = note_comm(f, g);
    if (!st) st = get_plan(f, g, in, &key, &p, &alone);
    scratch_free(key.v, few_dims);
  }
  if (st) return agree(f, st, "before");
  f->last_graph = g;

  /* mine[n_out], dst[n_out], direct[n_out] */
  graft_tensor *few_out[3 * SMALL_CALL];
  graft_tensor **mine = scratch_get(few_out, sizeof few_out,
                                    (size_t)n_out * (sizeof *mine + sizeof(graft_tensor *) + 1));
  if (!mine) return failf(f, GRAFT_ENOMEM, "%s: out of memory", f->name);
  memset(mine, 0, (size_t)n_out * sizeof *mine); /* a failed prepare_outputs frees them all */
  graft_tensor **dst = mine + n_out;
  uint8_t *direct = (uint8_t *)(dst + n_out);
  st = prepare_outputs(f, p, out, mine);
  for (int i = 0; i < n_out; i++) dst[i] = out[i] ? out[i] : mine[i];
  if (!st) st = bind(f, p, in, dst, direct);
  int64_t ctl[3] = {0, 0, 0};
  if (!st && p->has_ctl) graft__ctl_count(p, &ctl[0], &ctl[1], &ctl[2]);
  int ran = 0;
  st = agree(f, st, "before");
  if (!st) {
    ran = 1;
    st = execute(f, p, alone);
  }
  if (ran && p->coll) { /* every rank's collectives complete, then the vote */
    graft_status fs = graft__coll_finish(p, st, st ? NULL : f->msg);
    if (!st) st = fs;
  }
  if (ran) st = agree(f, st, "after");
  if (p && p->has_ctl) { /* this call's body runs */
    int64_t now[3] = {0, 0, 0};
    graft__ctl_count(p, &now[0], &now[1], &now[2]);
    p->stats.control_nodes = now[0];
    p->stats.body_runs = now[1] - ctl[1];
    p->stats.body_ops = now[2] - ctl[2];
  }
  if (!st) {
    commit(f, p, dst, direct);
    for (int i = 0; i < n_out; i++)
      if (!out[i]) out[i] = mine[i];
    f->last_plan = p;
  } else {
    for (int i = 0; i < n_out; i++) graft_tensor_destroy(mine[i]);
  }
  scratch_free(mine, few_out);
  return st;
}

GRAFT_API graft_status graft_function_call(graft_function *f, int n_in, graft_tensor *const *in,
                                           int n_out, graft_tensor **out) {
  if (!f) return graft__fail(GRAFT_EINVAL, "graft_function_call: f is NULL (expected a function)");
  int idle = 0;
  if (!__atomic_compare_exchange_n(&f->busy, &idle, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return graft__fail(GRAFT_EMISUSE, /* the running call owns f->msg */
                       "graft_function_call: '%s' is already running a call (expected one call "
                       "at a time per function)", f->name);
  f->msg[0] = '\0';
  graft_status st = call_locked(f, n_in, in, n_out, out);
  if (st) graft__fail(st, "%s", *f->msg ? f->msg : graft_status_str(st)); /* graft_last_errmsg */
  __atomic_store_n(&f->busy, 0, __ATOMIC_RELEASE);
  return st;
}

GRAFT_API const char *graft_function_errmsg(const graft_function *f) { return f ? f->msg : ""; }

GRAFT_API int graft_function_trace_count(const graft_function *f) { return f ? f->trace_count : 0; }

GRAFT_API graft_status graft_function_stats(graft_function *f, graft_plan_stats *out) {
  if (!f || !out)
    return graft__fail(GRAFT_EINVAL, "graft_function_stats: %s is NULL (expected %s)",
                       !f ? "f" : "out", !f ? "a function" : "a graft_plan_stats to fill");
  if (!f->last_plan)
    return graft__fail(GRAFT_EMISUSE, "graft_function_stats: '%s' has no plan yet (expected a "
                       "successful graft_function_call first)", f->name);
  *out = f->last_plan->stats;
  out->trace_count = f->trace_count;
  out->plan_count = f->n_plans;
  return GRAFT_OK;
}

/* The traced graph in DOT, with the fused groups of the last call's plan
 * (when it is of that graph) as clusters: a node recomputed by several
 * groups is drawn in the first. */
static graft_status write_dot(graft_function *f, FILE *to) {
  const graft__graph *g = f->last_graph;
  const graft__plan *p = f->last_plan;
  if (!p || !p->fg || p->fg->serial != g->serial) return graft__graph_write_dot(g, NULL, to);
  uint32_t *of = graft__malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *of);
  const char **name = graft__calloc(g->n_nodes ? g->n_nodes : 1, sizeof *name);
  graft_status st = GRAFT_ENOMEM;
  if (of && name) {
    for (uint32_t id = 0; id < g->n_nodes; id++) of[id] = UINT32_MAX;
    for (uint32_t r = 0; r < g->n_nodes; r++) {
      const graft__fused *fu = graft__graph_node(p->fg, r)->fused;
      if (!fu) continue;
      name[r] = fu->name;
      for (int m = 0; m < fu->n_members; m++)
        if (of[fu->m[m].node->id] == UINT32_MAX) of[fu->m[m].node->id] = r;
    }
    graft__dot_clusters c = {of, name};
    st = graft__graph_write_dot(g, &c, to);
  }
  graft__free(of);
  graft__free(name);
  return st;
}

GRAFT_API graft_status graft_function_write_dot(graft_function *f, FILE *to) {
  if (!f || !to)
    return graft__fail(GRAFT_EINVAL, "graft_function_write_dot: %s is NULL (expected %s)",
                       !f ? "f" : "to", !f ? "a function" : "a FILE open for writing");
  if (!f->last_graph)
    return graft__fail(GRAFT_EMISUSE, "graft_function_write_dot: '%s' has no graph yet (expected "
                       "a graft_function_call that traced first)", f->name);
  graft_status st = write_dot(f, to);
  return st ? graft__fail(st, "graft_function_write_dot: '%s': %s", f->name, graft_status_str(st))
            : st;
}

/* For tests: the plan of the last successful call (NULL before one). */
const graft__plan *graft__function_plan(const graft_function *f) { return f ? f->last_plan : NULL; }

int graft__function_plan_alone(const graft_function *f) {
  for (int i = 0; f && i < f->n_plans; i++)
    if (f->plans[i].p == f->last_plan) return f->plans[i].alone;
  return 0;
}
