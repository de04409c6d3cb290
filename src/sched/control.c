/* Control flow at run time: compiling a control node's bodies with the plan
 * that holds it, and the kernels of COND, WHILE, SCAN, REMAT and GET.
 *
 * When a plan infers its shapes, each control node compiles its bodies
 * into plans of their own for the concrete shapes of its inputs (a
 * scan's x without its leading axis): their outputs' shapes are the
 * node's, and the checks that needed concrete dims run then.  The node's
 * value packs its outputs, each 64-byte aligned; a GET copies one out.
 *
 * Running: a body's inputs are views bound to memory each step (the
 * node's inputs, a slice of an x, the current carries); its outputs are
 * copied where they go.  Carries alternate between the node's own value
 * and a second buffer of the same layout, so a body that swaps two carries
 * reads each before either is written.  A plan holding control flow walks
 * its order on the calling thread (graft__ctl_run_plan), and a body runs on
 * the runtime's executor, so its independent nodes spread over the workers
 * (a body that holds control flow walks too), or on the calling thread where
 * that is faster (run_body measures).  Under ws the walk runs inside one
 * parallel region held for the whole call (graft__exec_ws_hold), so each
 * body run is a job for a team already up, not a team start.  Either way
 * every node runs the same tiles, so the bits are the same at every thread
 * count. */
#include <omp.h>
#include <string.h>

#include "sched/chrome.h"
#include "sched/sched.h"

#define KEEP 5 /* run times a body keeps each way (run_body) */

struct graft__ctl_exec {
  const graft__ctl *c;
  graft__plan *sub[2];
  int alone[2];                /* the body runs on the calling thread anyway */
  int n_all;                   /* outputs, the saved ones included */
  graft__shape *osh;           /* their concrete shapes */
  int64_t *off, *bytes;        /* their place in the packed value */
  int64_t total;
  unsigned char *pong;         /* the second carry buffer (WHILE, SCAN), in
                                  the shared block (graft__ctl_share) */
  int64_t steps;               /* SCAN: the xs' length */
  int64_t *x_bytes;            /* SCAN: one slice of each x */
  const graft_runtime *rt;
  int sched;
  /* Runs of the bodies and the ops they ran, since compile (function.c
   * reports a call's difference): one thread runs a node at a time. */
  int64_t runs, ops;
  struct pick {                /* per body: on the team, or on this thread? */
    int64_t runs;
    int n[2], at[2];           /* times kept each way, where the next goes */
    double t[2][KEEP];         /* the last runs' times, in us */
    int team;                  /* the way chosen */
  } pick[2];
};

void graft__ctl_exec_destroy(graft__ctl_exec *e) {
  if (!e) return;
  for (int k = 0; k < 2; k++) graft__plan_destroy(e->sub[k]);
  graft__free(e->osh);
  graft__free(e->off);
  graft__free(e->bytes);
  graft__free(e->x_bytes);
  graft__free(e);
}

/* ---- the bodies' shared arena ------------------------------------------------ */

/* A plan holding control flow walks its order on one thread (its bodies
 * get the team), so its control nodes run one at a time and what they use
 * while running can share memory: each control node of a plan puts its
 * second carry buffer and then its bodies at the same address, and a
 * body's own control nodes start past its arena.  The top-level plan holds
 * that one block. */

static int64_t align_up(int64_t b) { return (b + GRAFT__ALIGN - 1) / GRAFT__ALIGN * GRAFT__ALIGN; }

/* A loop's second carry buffer (0 for cond and remat). */
static int64_t pong_bytes(const graft__ctl_exec *e) {
  int nc = e->c->n_carry;
  return nc ? align_up(e->off[nc - 1] + e->bytes[nc - 1]) : 0;
}

/* Bytes the control nodes of q need beside q's own arena while one of them
 * runs: its second carry buffer, then its largest body and what that
 * body's control nodes need. */
static int64_t need(const graft__plan *q) {
  int64_t n = 0;
  for (uint32_t id = 0; q->ctl && id < q->g->n_nodes; id++) {
    const graft__ctl_exec *e = q->ctl[id];
    if (!e || !q->live[id]) continue;
    int64_t body = 0;
    for (int k = 0; k < 2; k++)
      if (e->sub[k]) body = GRAFT__MAX(body, align_up((int64_t)e->sub[k]->arena_bytes) + need(e->sub[k]));
    n = GRAFT__MAX(n, pong_bytes(e) + body);
  }
  return n;
}

static void place_bodies(graft__plan *q, unsigned char *base) {
  for (uint32_t id = 0; q->ctl && id < q->g->n_nodes; id++) {
    graft__ctl_exec *e = q->ctl[id];
    if (!e || !q->live[id]) continue;
    e->pong = base; /* (never NULL, even when empty: offsets are added to it) */
    unsigned char *at = base + pong_bytes(e);
    for (int k = 0; k < 2; k++) {
      graft__plan *b = e->sub[k];
      if (!b) continue;
      if (!b->arena_borrowed) graft__free(b->arena);
      b->arena = at;
      b->arena_borrowed = 1;
      graft__plan_point_views(b);
      place_bodies(b, at + align_up((int64_t)b->arena_bytes));
    }
  }
}

graft_status graft__ctl_share(graft__plan *p) {
  int64_t n = need(p);
  if (!(p->ctl_arena = graft__aligned_alloc((size_t)(n ? n : GRAFT__ALIGN), GRAFT__ALIGN)))
    return GRAFT_ENOMEM;
  place_bodies(p, p->ctl_arena);
  p->stats.arena_bytes += n;
  return GRAFT_OK;
}

/* ---- compile ---------------------------------------------------------------- */



static int same(const graft__shape *a, const graft__shape *b) {
  return a->dtype == b->dtype && a->rank == b->rank &&
         !memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims);
}

/* The concrete shape of output i of body k. */
static void sub_out(const graft__plan *sp, int i, graft__shape *s) {
  const graft__tview *v = graft__plan_view(sp, sp->g->outputs[i]);
  s->dtype = v->dtype;
  s->rank = v->rank;
  memcpy(s->dims, v->shape, sizeof s->dims);
}

static const char *const body_name[4][2] = {
    [GRAFT__CTL_COND] = {"then branch", "else branch"},
    [GRAFT__CTL_WHILE] = {"cond", "body"},
    [GRAFT__CTL_SCAN] = {"body", ""},
    [GRAFT__CTL_REMAT] = {"body", ""}};

/* Compile body k of e for the node's concrete input shapes in[]. */
static graft_status compile_body(graft__shape_ctx *sc, const graft__plan *p, graft__ctl_exec *e,
                                 int k, const graft__shape *in) {
  const graft__ctl *c = e->c;
  const graft__graph *sg = c->sub[k]->g;
  int ns = sg->n_inputs;
  int64_t(*dims)[GRAFT_MAX_RANK] = graft__calloc((size_t)ns + 1, sizeof *dims);
  const int64_t **ptr = graft__calloc((size_t)ns + 1, sizeof *ptr);
  if (!dims || !ptr) {
    graft__free(dims);
    graft__free(ptr);
    return graft__shape_fail(sc, GRAFT_ENOMEM, "out of memory");
  }
  int x0 = c->has_len + c->n_carry;
  for (int j = 0; j < ns; j++) {
    int idx = c->map[k][j];
    const graft__shape *s = &in[idx];
    int is_x = c->kind == GRAFT__CTL_SCAN && idx >= x0 && idx < x0 + c->n_xs;
    int drop = is_x && !(c->x_blocked >> (idx - x0) & 1); /* a row, or a block of rows */
    memcpy(dims[j], s->dims + drop, (size_t)(s->rank - drop) * sizeof(int64_t));
    if (is_x && !drop) dims[j][0] = c->x_block;
    ptr[j] = dims[j];
  }
  char msg[GRAFT__MSG_LEN];
  graft__plan_opts o = p->opts;
  o.is_body = 1;
  graft_status st = graft__plan_compile_dims(sg, ptr, &o, &e->sub[k], msg);
  graft__free(dims);
  graft__free(ptr);
  if (st) return graft__shape_fail(sc, st, "%s: %s", body_name[c->kind][k], msg);
  e->alone[k] = graft__plan_runs_alone(e->sub[k], o.grain);
  return GRAFT_OK;
}

/* Lay the outputs out (64-byte aligned) and size the node's value. */
static graft_status layout(graft__shape_ctx *sc, graft__ctl_exec *e) {
  e->total = 0;
  for (int i = 0; i < e->n_all; i++) {
    char why[GRAFT__MSG_LEN];
    if (graft__size_check(e->osh[i].rank, e->osh[i].dims, e->osh[i].dtype, NULL, &e->bytes[i], why,
                          sizeof why) ||
        graft__size_add(e->total, (e->bytes[i] + GRAFT__ALIGN - 1) / GRAFT__ALIGN * GRAFT__ALIGN,
                        &e->total))
      return graft__shape_fail(sc, GRAFT_ENOMEM, "output %d: %s", i, why);
    e->off[i] = e->total - (e->bytes[i] + GRAFT__ALIGN - 1) / GRAFT__ALIGN * GRAFT__ALIGN;
  }
  return GRAFT_OK;
}

static graft_status compile_ctl(graft__shape_ctx *sc, graft__plan *p, const graft__node *n,
                                const graft__shape *in, graft__shape *out) {
  const graft__ctl *c = n->attr.ctl.ctl;
  graft__ctl_exec *e = graft__calloc(1, sizeof *e);
  if (!e) return graft__shape_fail(sc, GRAFT_ENOMEM, "out of memory");
  p->ctl[n->id] = e; /* the plan frees it, whatever happens next */
  p->has_ctl = 1;
  e->c = c;
  e->rt = p->opts.rt;
  e->sched = p->opts.sched;
  e->n_all = graft__ctl_outputs(c);
  e->osh = graft__calloc((size_t)e->n_all + 1, sizeof *e->osh);
  e->off = graft__calloc((size_t)e->n_all + 1, sizeof *e->off);
  e->bytes = graft__calloc((size_t)e->n_all + 1, sizeof *e->bytes);
  e->x_bytes = graft__calloc((size_t)c->n_xs + 1, sizeof *e->x_bytes);
  if (!e->osh || !e->off || !e->bytes || !e->x_bytes) return graft__shape_fail(sc, GRAFT_ENOMEM, "out of memory");
  graft_status st;
  for (int k = 0; k < c->n_subs; k++)
    if ((st = compile_body(sc, p, e, k, in))) return st;
  char a[200], b[200];
  int x0 = c->has_len + c->n_carry;
  switch (c->kind) {
  case GRAFT__CTL_COND:
    for (int i = 0; i < c->n_out; i++) {
      graft__shape t, f;
      sub_out(e->sub[0], i, &t);
      sub_out(e->sub[1], i, &f);
      if (!same(&t, &f))
        return graft__shape_fail(sc, GRAFT_ESHAPE, "output %d is %s in the then branch but %s in the else "
                     "branch for these inputs", i, graft__shape_text(a, sizeof a, &t), graft__shape_text(b, sizeof b, &f));
      e->osh[i] = t;
    }
    break;
  case GRAFT__CTL_WHILE: {
    graft__shape pr;
    sub_out(e->sub[0], 0, &pr);
    if (pr.rank != 0)
      return graft__shape_fail(sc, GRAFT_ESHAPE, "the cond callback's output is %s (expected a scalar)",
                   graft__shape_text(a, sizeof a, &pr));
    for (int i = 0; i < c->n_carry; i++) {
      sub_out(e->sub[1], i, &e->osh[i]);
      if (!same(&e->osh[i], &in[i]))
        return graft__shape_fail(sc, GRAFT_ESHAPE, "var %d is %s from the body but %s in init for these "
                     "inputs", i, graft__shape_text(a, sizeof a, &e->osh[i]), graft__shape_text(b, sizeof b, &in[i]));
    }
    for (int i = 0; c->save && i < 2 * c->n_carry; i++) { /* before and after */
      graft__shape *s = &e->osh[c->n_out + i];
      *s = in[i % c->n_carry];
      memmove(s->dims + 1, s->dims, (size_t)s->rank * sizeof *s->dims);
      s->dims[0] = c->max_iters;
      s->rank++;
    }
    if (c->save) e->osh[c->n_out + 2 * c->n_carry] = (graft__shape){.dtype = GRAFT_I32};
    break;
  }
  case GRAFT__CTL_SCAN:
    e->steps = graft__scan_steps(c, 0, in[x0].dims[0]);
    for (int i = 0; i < c->n_xs; i++) {
      const graft__shape *x = &in[x0 + i];
      if (graft__scan_steps(c, i, x->dims[0]) != e->steps)
        return graft__shape_fail(sc, GRAFT_ESHAPE, "xs[%d] is %s but xs[0] is %s for these inputs (every x "
                     "needs the same leading length)", i, graft__shape_text(a, sizeof a, x),
                     graft__shape_text(b, sizeof b, &in[x0]));
      graft__size_check(x->rank - 1, x->dims + 1, x->dtype, NULL, &e->x_bytes[i], a, sizeof a);
      if (c->x_blocked >> i & 1) e->x_bytes[i] *= c->x_block; /* (one step: a block of rows) */
    }
    for (int i = 0; i < c->n_out; i++) {
      graft__shape *s = &e->osh[i];
      sub_out(e->sub[0], i, s);
      if (i < c->n_carry) {
        if (!same(s, &in[c->has_len + i]))
          return graft__shape_fail(sc, GRAFT_ESHAPE, "carry %d is %s from the body but %s in init for these "
                       "inputs", i, graft__shape_text(a, sizeof a, s), graft__shape_text(b, sizeof b, &in[c->has_len + i]));
        continue;
      }
      memmove(s->dims + 1, s->dims, (size_t)s->rank * sizeof *s->dims);
      s->dims[0] = e->steps;
      s->rank++;
    }
    for (int i = 0; c->save && i < graft__ctl_saved(c); i++) { /* before (and after) */
      graft__shape *s = &e->osh[c->n_out + i];
      *s = e->osh[i % c->n_carry];
      memmove(s->dims + 1, s->dims, (size_t)s->rank * sizeof *s->dims);
      s->dims[0] = c->checkpoint > 1 ? (e->steps + c->checkpoint - 1) / c->checkpoint : e->steps;
      s->rank++;
    }
    break;
  case GRAFT__CTL_REMAT:
    for (int i = 0; i < c->n_out; i++) sub_out(e->sub[0], i, &e->osh[i]);
    break;
  }
  if ((st = layout(sc, e))) return st;
  out->dtype = GRAFT_I32;
  out->rank = 1;
  out->dims[0] = (e->total + 3) / 4;
  return GRAFT_OK;
}

graft_status graft__ctl_shape(graft__shape_ctx *sc, const graft__node *n, const graft__shape *in,
                              graft__shape *out) {
  graft__plan *p = sc->ctl_arg;
  if (n->op != GRAFT__OP_GET) return compile_ctl(sc, p, n, in, out);
  const graft__ctl_exec *e = p->ctl[n->in[0]];
  int i = n->attr.get.index;
  if (!e || i < 0 || i >= e->n_all) return graft__shape_fail(sc, GRAFT_EINTERNAL, "output %d of nothing", i);
  *out = e->osh[i];
  return GRAFT_OK;
}

graft_status graft__ctl_attach(graft__plan *p) {
  const graft__graph *g = p->g;
  for (uint32_t id = 0; id < g->n_nodes; id++) {
    const graft__node *n = graft__graph_node(p->g, id);
    const graft__ctl_exec *e = p->ctl[id];
    if (n->op == GRAFT__OP_GET && p->live[id]) e = p->ctl[n->in[0]];
    if (!e || !p->live[id]) continue;
    graft__node *w = graft__plan_writable(p, id);
    if (!w) return GRAFT_ENOMEM;
    w->exec = e;
    if (w->op == GRAFT__OP_GET) w->attr.get.offset = e->off[w->attr.get.index];
  }
  return GRAFT_OK;
}

void graft__ctl_count(const graft__plan *p, int64_t *nodes, int64_t *runs, int64_t *ops) {
  for (uint32_t id = 0; p->ctl && id < p->g->n_nodes; id++) {
    const graft__ctl_exec *e = p->ctl[id];
    if (!e || !p->live[id]) continue;
    ++*nodes;
    *runs += e->runs;
    *ops += e->ops;
    for (int k = 0; k < 2; k++)
      if (e->sub[k]) graft__ctl_count(e->sub[k], nodes, runs, ops);
  }
}

/* ---- run --------------------------------------------------------------------- */

/* GRAFT_TRACE: a body's slices are named by op, construct and iteration. */
typedef struct body_trace {
  const graft__plan *p;
  const char *what;
  int64_t it;
  char name[160];
} body_trace;

static const char *traced_name(const void *ctx, uint32_t node) {
  body_trace *b = (body_trace *)ctx;
  const graft__node *n = graft__graph_node(b->p->g, node);
  const char *op = n->fused ? n->fused->name : graft__ops[n->op].name;
  if (b->it >= 0) snprintf(b->name, sizeof b->name, "%s [%s #%lld]", op, b->what, (long long)b->it);
  else snprintf(b->name, sizeof b->name, "%s [%s]", op, b->what);
  return b->name;
}

/* Walk p on this thread recording its slices, named as b says. */
static graft_status walk_traced(graft__plan *p, const graft_runtime *rt, body_trace *b, char *msg) {
  graft__trace_buf buf = {0};
  graft_status st = graft__exec_seq_rec(p, &buf, omp_get_thread_num(),
                                        graft__chrome_epoch(rt->trace), msg);
  graft__chrome_write(rt->trace, p->g->name, buf.ev, buf.n, traced_name, b);
  graft__free(buf.ev);
  return st;
}

static graft_status run_traced(const graft__ctl_exec *e, int k, int64_t it, char *msg) {
  char what[64];
  snprintf(what, sizeof what, "%s.%s", e->c->name, body_name[e->c->kind][k]);
  body_trace b = {e->sub[k], what, it, ""};
  return walk_traced(e->sub[k], e->rt, &b, msg);
}

static const char *plain_name(const void *ctx, uint32_t node) {
  const graft__node *n = graft__graph_node(((const graft__plan *)ctx)->g, node);
  return n->fused ? n->fused->name : graft__ops[n->op].name;
}

/* 1 when some body of p's control nodes (or of theirs) may run on the
 * work-stealing team (run_body). */
static int wants_team(const graft__plan *p) {
  for (uint32_t id = 0; p->ctl && id < p->g->n_nodes; id++) {
    const graft__ctl_exec *e = p->ctl[id];
    if (!e || !p->live[id] || e->sched != GRAFT__SCHED_WS) continue;
    for (int k = 0; k < 2; k++)
      if (e->sub[k] && (e->sub[k]->has_ctl ? wants_team(e->sub[k]) : !e->alone[k])) return 1;
  }
  return 0;
}

static graft_status walk(void *p, char *msg) { return graft__exec_seq(p, msg); }

/* Under ws, the walk holds the team: a loop of 200 body runs starts it
 * once (per body run, on a loaded 2-core VM, waking it cost more than a
 * run of an RNN step's body). */
graft_status graft__ctl_run_plan(graft__plan *p, const graft_runtime *rt, char *msg) {
  if (!rt || !rt->trace)
    return rt && rt->num_threads > 1 && wants_team(p) ? graft__exec_ws_hold(rt, walk, p, msg)
                                                       : graft__exec_seq(p, msg);
  graft__trace_buf buf = {0};
  graft_status st = graft__exec_seq_rec(p, &buf, 0, graft__chrome_epoch(rt->trace), msg);
  graft__chrome_write(rt->trace, p->g->name, buf.ev, buf.n, plain_name, p);
  graft__free(buf.ev);
  return st;
}

/* Where a body runs.  A plan with control flow holds the work-stealing
 * team for the whole call (graft__ctl_run_plan), so a body run on it costs
 * a job (the parked workers join within a microsecond while they spin),
 * not a team start.  But a worker that the OS takes off its core while it
 * holds a task still delays the run it is in (on a loaded machine: a time
 * slice), and a body may have too little parallel work to pay for handing
 * it around.  So every run of a body is timed (two clock reads), each way
 * keeps its last KEEP times, and a body runs the way whose median is lower
 * (one preempted run must not decide), one run in EXPLORE the other way so
 * its times stay current: a choice follows the machine's load within a few
 * dozen runs.  The first runs alternate, team first, and the very first is
 * not counted (it sizes the team's state and warms the caches).  Either way
 * every node runs the same tiles: the bits do not depend on the choice. */
#define EXPLORE 32

int graft__ctl_team_always;

/* 1: run this time on the team. */
static int choose(struct pick *p) {
  if (graft__ctl_team_always) return 1;
  int64_t r = p->runs++;
  if (p->n[0] < KEEP / 2 + 1 || p->n[1] < KEEP / 2 + 1) return p->n[1] <= p->n[0];
  return r % EXPLORE == 0 ? !p->team : p->team;
}

static double median(const double *t, int n) {
  double s[KEEP];
  for (int i = 0; i < n; i++) { /* (insertion sort: n <= KEEP) */
    int j = i;
    for (; j > 0 && s[j - 1] > t[i]; j--) s[j] = s[j - 1];
    s[j] = t[i];
  }
  return s[n / 2];
}

static void timed(struct pick *p, int team, double us) {
  if (p->runs == 1) return;
  p->t[team][p->at[team]] = us;
  p->at[team] = (p->at[team] + 1) % KEEP;
  if (p->n[team] < KEEP) p->n[team]++;
  if (p->n[0] > KEEP / 2 && p->n[1] > KEEP / 2)
    p->team = median(p->t[1], p->n[1]) < median(p->t[0], p->n[0]);
}

/* Run body k (iteration it, -1 for none). */
static graft_status run_body(const graft__ctl_exec *e, int k, int64_t it, char *msg) {
  graft__plan *sp = e->sub[k];
  graft__ctl_exec *m = (graft__ctl_exec *)e; /* the counters: one runner at a time */
  m->runs++;
  m->ops += sp->n_order;
  if (e->rt && e->rt->trace) return run_traced(e, k, it, msg);
  /* (a body holding control flow walks too: its control nodes share) */
  if (e->rt && e->rt->num_threads > 1 && e->sched != GRAFT__SCHED_SEQ && !e->alone[k] &&
      !sp->has_ctl && (graft__exec_ws_held(e->rt) || !omp_in_parallel())) {
    int team = choose(&m->pick[k]);
    double t0 = graft__now_us();
    graft_status st = !team                            ? graft__exec_seq(sp, msg)
                      : e->sched == GRAFT__SCHED_WS ? graft__exec_ws(sp, e->rt, msg)
                                                     : graft__exec_omp(sp, e->rt, msg);
    timed(&m->pick[k], team, graft__now_us() - t0);
    return st;
  }
  return graft__exec_seq(sp, msg);
}

static void bind(const graft__ctl_exec *e, int k, int j, const void *data) {
  graft__plan *sp = e->sub[k];
  graft__plan_view(sp, sp->g->inputs[j])->data = (void *)data;
}

/* Bind body k's inputs at j >= from to the node's inputs they map to. */
static void bind_captures(const graft__ctl_exec *e, const graft__kargs *k, int b, int from) {
  const graft__graph *sg = e->sub[b]->g;
  for (int j = from; j < sg->n_inputs; j++) bind(e, b, j, k->in[e->c->map[b][j]]->data);
}

static const void *out_data(const graft__ctl_exec *e, int k, int i) {
  graft__plan *sp = e->sub[k];
  return graft__plan_view(sp, sp->g->outputs[i])->data;
}

static int truth(const graft__tview *v) {
  switch (v->dtype) {
  case GRAFT_F32: return *(const float *)v->data != 0;
  case GRAFT_F64: return *(const double *)v->data != 0;
  default: return *(const int32_t *)v->data != 0;
  }
}

/* p + off, where p may be NULL when empty (a caller's empty tensor). */
static const void *at(const void *p, int64_t off) {
  return p ? (const unsigned char *)p + off : p;
}

/* (zero bytes: the pointers of empty values may be NULL) */
static void copy(void *to, const void *from, int64_t bytes) {
  if (to != from && bytes) memcpy(to, from, (size_t)bytes);
}

static void zero(void *to, int64_t bytes) {
  if (bytes) memset(to, 0, (size_t)bytes);
}

static graft_status body_failed(const graft__kargs *k, graft_status st, const char *where,
                                int64_t step, const char *msg) {
  if (step >= 0) graft__msgf(k->msg, "%s, iteration %lld: %s", where, (long long)step, msg);
  else graft__msgf(k->msg, "%s: %s", where, msg);
  return st;
}

static graft_status run_cond(const graft__ctl_exec *e, const graft__kargs *k, unsigned char *out) {
  int b = truth(k->in[0]) ? 0 : 1;
  char msg[GRAFT__MSG_LEN];
  bind_captures(e, k, b, 0);
  graft_status st = run_body(e, b, -1, msg);
  if (st) return body_failed(k, st, body_name[GRAFT__CTL_COND][b], -1, msg);
  for (int i = 0; i < e->c->n_out; i++) copy(out + e->off[i], out_data(e, b, i), e->bytes[i]);
  return GRAFT_OK;
}

static graft_status run_remat(const graft__ctl_exec *e, const graft__kargs *k, unsigned char *out) {
  char msg[GRAFT__MSG_LEN];
  bind_captures(e, k, 0, 0);
  graft_status st = run_body(e, 0, -1, msg);
  if (st) return body_failed(k, st, "body", -1, msg);
  for (int i = 0; i < e->c->n_out; i++) copy(out + e->off[i], out_data(e, 0, i), e->bytes[i]);
  return GRAFT_OK;
}

/* Carries live in cur (the node's value or the pong buffer, same layout);
 * a step's new carries go to the other one. */
static graft_status run_while(const graft__ctl_exec *e, const graft__kargs *k, unsigned char *out) {
  const graft__ctl *c = e->c;
  int nc = c->n_carry;
  unsigned char *cur = out, *next = e->pong;
  for (int i = 0; i < nc; i++) copy(out + e->off[i], k->in[i]->data, e->bytes[i]);
  bind_captures(e, k, 0, nc);
  bind_captures(e, k, 1, nc);
  char msg[GRAFT__MSG_LEN];
  int64_t it = 0;
  graft_status st = GRAFT_OK;
  for (;; it++) {
    if (c->max_iters && it == c->max_iters) break;
    for (int i = 0; i < nc; i++) bind(e, 0, i, cur + e->off[i]);
    if ((st = run_body(e, 0, it, msg))) return body_failed(k, st, "cond", it, msg);
    if (!truth(graft__plan_view(e->sub[0], e->sub[0]->g->outputs[0]))) break;
    for (int i = 0; c->save && i < nc; i++)
      copy(out + e->off[c->n_out + i] + it * e->bytes[i], cur + e->off[i], e->bytes[i]);
    for (int i = 0; i < nc; i++) bind(e, 1, i, cur + e->off[i]);
    if ((st = run_body(e, 1, it, msg))) return body_failed(k, st, "body", it, msg);
    for (int i = 0; i < nc; i++) {
      copy(next + e->off[i], out_data(e, 1, i), e->bytes[i]);
      if (c->save) /* the carries as this step left them */
        copy(out + e->off[c->n_out + nc + i] + it * e->bytes[i], next + e->off[i], e->bytes[i]);
    }
    unsigned char *x = cur;
    cur = next;
    next = x;
  }
  for (int i = 0; cur != out && i < nc; i++) copy(out + e->off[i], cur + e->off[i], e->bytes[i]);
  if (c->save) {
    for (int i = 0; i < 2 * nc; i++) /* the rows past the count: zeros, not stale bytes */
      zero(out + e->off[c->n_out + i] + it * e->bytes[i % nc], (c->max_iters - it) * e->bytes[i % nc]);
    *(int32_t *)(out + e->off[c->n_out + 2 * nc]) = (int32_t)it;
  }
  return GRAFT_OK;
}

static graft_status run_scan(const graft__ctl_exec *e, const graft__kargs *k, unsigned char *out) {
  const graft__ctl *c = e->c;
  int nc = c->n_carry, pre = c->has_len, x0 = pre + nc;
  int64_t T = e->steps, len = T;
  if (pre) {
    int32_t l = *(const int32_t *)k->in[0]->data;
    len = l < 0 ? 0 : l > T ? T : l;
  }
  unsigned char *cur = out, *next = e->pong;
  for (int i = 0; i < nc; i++) copy(out + e->off[i], k->in[pre + i]->data, e->bytes[i]);
  bind_captures(e, k, 0, nc + c->n_xs);
  char msg[GRAFT__MSG_LEN];
  int64_t ck = c->checkpoint > 1 ? c->checkpoint : 1;
  for (int s = 0; s < len; s++) {
    int64_t r = c->reverse ? len - 1 - s : s;
    /* saved: the carry before each row, or before each block of k rows
     * (its first row in iteration order) */
    int keep = c->save && (ck == 1 || (c->reverse ? r == GRAFT__MIN((r / ck + 1) * ck, T) - 1
                                                  : r % ck == 0));
    for (int i = 0; i < nc; i++) {
      bind(e, 0, i, cur + e->off[i]);
      if (keep)
        copy(out + e->off[c->n_out + i] + r / ck * e->bytes[i], cur + e->off[i], e->bytes[i]);
    }
    for (int i = 0; i < c->n_xs; i++)
      bind(e, 0, nc + i, at(k->in[x0 + i]->data, r * e->x_bytes[i]));
    graft_status st = run_body(e, 0, r, msg);
    if (st) return body_failed(k, st, "body", r, msg);
    for (int i = 0; i < nc; i++) {
      copy(next + e->off[i], out_data(e, 0, i), e->bytes[i]);
      if (c->save && ck == 1) /* the carries as this step left them */
        copy(out + e->off[c->n_out + nc + i] + r * e->bytes[i], next + e->off[i], e->bytes[i]);
    }
    for (int i = nc; i < c->n_out; i++) {
      int64_t row = T ? e->bytes[i] / T : 0;
      copy(out + e->off[i] + r * row, out_data(e, 0, i), row);
    }
    unsigned char *x = cur;
    cur = next;
    next = x;
  }
  for (int i = 0; cur != out && i < nc; i++) copy(out + e->off[i], cur + e->off[i], e->bytes[i]);
  if (len < T) { /* rows no step wrote: zeros (len < T: no checkpoints) */
    for (int i = nc; i < graft__ctl_outputs(c); i++) {
      int64_t row = e->bytes[i] / T;
      zero(out + e->off[i] + len * row, (T - len) * row);
    }
  }
  return GRAFT_OK;
}

static graft_status run(const graft__kargs *k) {
  const graft__ctl_exec *e = k->node->exec;
  unsigned char *out = k->out->data;
  switch (e->c->kind) {
  case GRAFT__CTL_COND: return run_cond(e, k, out);
  case GRAFT__CTL_WHILE: return run_while(e, k, out);
  case GRAFT__CTL_SCAN: return run_scan(e, k, out);
  default: return run_remat(e, k, out);
  }
}

/* The kernel-table rows (kernels.h) of the control ops live here: their
 * "kernel" is running plans. */
graft_status graft__k_COND(const graft__kargs *k, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  return run(k);
}
graft_status graft__k_WHILE(const graft__kargs *k, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  return run(k);
}
graft_status graft__k_SCAN(const graft__kargs *k, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  return run(k);
}
graft_status graft__k_REMAT(const graft__kargs *k, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  return run(k);
}

/* GET: elements [begin, end) of output attr.get.index, at its offset;
 * nothing when the GET reads them in place (plan.c, alias_gets). */
graft_status graft__k_GET(const graft__kargs *k, int64_t begin, int64_t end) {
  size_t es = graft_dtype_size(k->out->dtype);
  const unsigned char *from = (const unsigned char *)k->in[0]->data + k->node->attr.get.offset;
  if (k->out->data == from) return GRAFT_OK;
  copy((unsigned char *)k->out->data + begin * es, from + begin * es, (end - begin) * (int64_t)es);
  return GRAFT_OK;
}
