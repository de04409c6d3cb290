/* Optimizers (graft/optim.h): each rule against a reference written here
 * in plain C from PyTorch's formulas, step by step for 20 steps; the fused
 * update bitwise the same at 1, 2 and 8 threads; clipping; a learning rate
 * in a variable (no retrace); a failed step changes nothing; the slots and
 * the step count are module variables; refusals. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"
#include "sched/sched.h" /* graft__exec_fault_hook, graft__function_plan */

/* The bytes of a small module's variables, in walk order. */
typedef struct snap_t {
  unsigned char bytes[4096];
  size_t n;
} snap_t;

TU_SUPPRESS_GOMP_TASK_LEAK();

enum { N_STEPS = 20 };

/* ---- the reference ---------------------------------------------------------- */

typedef struct ref_state {
  double w[64], b[64], m[64], v[64]; /* b: momentum buffer */
  int64_t t;
} ref_state;

/* One step of d on n elements with gradient g, in double, then rounded to
 * f32 after every operation when f32 (each intermediate as the float the
 * kernel holds). */
static void ref_step(const graft_optimizer_desc *d, double lr, double gscale, int f32, int n,
                     const double *g, ref_state *s) {
#define R(x) (f32 ? (double)(float)(x) : (x))
  s->t++;
  double mu = d->momentum ? d->momentum : 0.9, b1 = d->beta1 ? d->beta1 : 0.9;
  double b2 = d->beta2 ? d->beta2 : 0.999, eps = d->eps ? d->eps : 1e-8, wd = d->weight_decay;
  double c1 = R(1.0 - pow(b1, (double)s->t)), c2s = R(sqrt(1.0 - pow(b2, (double)s->t)));
  lr = R(lr);
  gscale = R(gscale);
  mu = R(mu), b1 = R(b1), b2 = R(b2), eps = R(eps), wd = R(wd);
  for (int i = 0; i < n; i++) {
    double gi = R(gscale * g[i]);
    switch (d->kind) {
    case GRAFT_OPT_SGD: s->w[i] = R(s->w[i] - R(lr * R(gi + R(wd * s->w[i])))); break;
    case GRAFT_OPT_MOMENTUM:
    case GRAFT_OPT_NESTEROV: {
      double ge = R(gi + R(wd * s->w[i]));
      s->b[i] = R(R(mu * s->b[i]) + ge);
      double dir = d->kind == GRAFT_OPT_NESTEROV ? R(ge + R(mu * s->b[i])) : s->b[i];
      s->w[i] = R(s->w[i] - R(lr * dir));
      break;
    }
    default: {
      int decoupled = d->kind == GRAFT_OPT_ADAMW;
      double ge = decoupled ? gi : R(gi + R(wd * s->w[i]));
      s->m[i] = R(R(b1 * s->m[i]) + R(R(1 - b1) * ge));
      s->v[i] = R(R(b2 * s->v[i]) + R(R(R(1 - b2) * ge) * ge));
      double denom = R(R(R(f32 ? (double)sqrtf((float)s->v[i]) : sqrt(s->v[i])) / c2s) + eps);
      double w = decoupled ? R(s->w[i] * R(1 - R(lr * wd))) : s->w[i];
      s->w[i] = R(w - R(R(lr / c1) * R(s->m[i] / denom)));
      break;
    }
    }
  }
#undef R
}

/* ---- graft's side --------------------------------------------------------- */

typedef struct rig {
  graft_module *root, *opt;
  graft_variable *w;
} rig;

/* in[0] is the gradient of w: the step applies it. */
static graft_status apply_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  rig *r = user;
  graft_status st = graft_optimizer_apply(t, r->opt, 1, in);
  out[0] = graft_read(t, r->w); /* the new value: read after the step */
  return st;
}

static void make_rig(rig *r, const graft_optimizer_desc *d, graft_dtype dt, int n, const double *w0) {
  tu_assert_status(graft_module_create(NULL, "model", &r->root), GRAFT_OK);
  const int64_t shape[1] = {n};
  tu_assert_status(graft_variable_create(r->root, "w", dt, 1, shape, NULL, GRAFT_VAR_TRAINABLE, &r->w),
                   GRAFT_OK);
  graft_tensor *init = tu_tensor_from(dt, 1, shape, w0);
  tu_assert_status(graft_variable_set(r->w, init), GRAFT_OK);
  graft_tensor_destroy(init);
  tu_assert_status(graft_optimizer_create(r->root, "opt", d, 1, &r->w, &r->opt), GRAFT_OK);
}

static const char *kind_name(graft_optimizer_kind k) {
  static const char *const names[] = {"sgd", "momentum", "nesterov", "adam", "adamw"};
  return names[k];
}

/* Every rule, with and without weight decay, f32 and f64, against the
 * reference for 20 steps with a gradient that changes every step. */
static void test_graft_optimizer_apply__matches_reference(void **state) {
  (void)state;
  enum { N = 37 };
  graft_runtime *rt = tu_runtime();
  for (int kind = GRAFT_OPT_SGD; kind <= GRAFT_OPT_ADAMW; kind++) {
    for (int wd = 0; wd < 2; wd++) {
      for (int f32 = 0; f32 < 2; f32++) {
        graft_optimizer_desc d = {.kind = (graft_optimizer_kind)kind, .lr = 0.05,
                                  .weight_decay = wd ? 0.01 : 0};
        if (kind == GRAFT_OPT_NESTEROV) d.momentum = 0.8;
        if (kind == GRAFT_OPT_ADAM) d.beta1 = 0.85;
        char ctx[64];
        snprintf(ctx, sizeof ctx, "%s wd=%d %s", kind_name(d.kind), wd, f32 ? "f32" : "f64");
        graft_dtype dt = f32 ? GRAFT_F32 : GRAFT_F64;
        ref_state s = {0};
        for (int i = 0; i < N; i++) s.w[i] = f32 ? (float)(0.3 * sin(i + 1.0)) : 0.3 * sin(i + 1.0);
        rig r;
        make_rig(&r, &d, dt, N, s.w);
        graft_function *f = tu_function(rt, "apply", apply_cb, &r, 1, 1, NULL);
        const int64_t shape[1] = {N};
        for (int step = 0; step < N_STEPS; step++) {
          double g[N];
          for (int i = 0; i < N; i++) g[i] = cos(0.7 * i + 0.3 * step) * (1 + 0.1 * step);
          if (f32)
            for (int i = 0; i < N; i++) g[i] = (float)g[i];
          graft_tensor *gt = tu_tensor_from(dt, 1, shape, g), *out = NULL;
          tu_assert_call_ok(f, 1, &gt, 1, &out);
          ref_step(&d, d.lr, 1, f32, N, g, &s);
          const graft_tensor *wv = graft_variable_value(r.w);
          for (int i = 0; i < N; i++) {
            double got = tu_get(wv, i), want = s.w[i], tol = (f32 ? 1e-6 : 1e-12) * fabs(want) + 1e-30;
            if (fabs(got - want) > tol)
              fail_msg("%s step %d element %d: %.17g, reference %.17g", ctx, step, i, got, want);
            if (tu_get(out, i) != got) fail_msg("%s: the read after the step differs", ctx);
          }
          graft_tensor_destroy(gt);
          graft_tensor_destroy(out);
        }
        assert_int_equal(graft_function_trace_count(f), 1);
        graft_function_destroy(f);
        graft_module_destroy(r.root);
      }
    }
  }
  graft_runtime_destroy(rt);
}

/* A training step (tu_net_step): a loss's gradient, applied by Adam, large enough for
 * tiles; the variables after 5 steps are the same bits at 1, 2 and 8
 * threads (ws, grain 1024) and under seq and omp, and the step writes in
 * place (direct) when nothing reads the new values. */
static void run_training(const char *sched, int threads, graft_optimizer_kind kind, double clip,
                         double *w_out, double *b_out, int64_t *direct) {
  enum { IN = 64, OUT = 96, BATCH = 16 };
  tu_net m;
  tu_assert_status(graft_module_create(NULL, "net", &m.root), GRAFT_OK);
  const int64_t ws[2] = {IN, OUT}, bs[1] = {OUT};
  float w0[IN * OUT];
  for (int i = 0; i < IN * OUT; i++) w0[i] = (float)(0.1 * sin(0.37 * i));
  tu_assert_status(graft_variable_create(m.root, "w", GRAFT_F32, 2, ws, w0, GRAFT_VAR_TRAINABLE, &m.w),
                   GRAFT_OK);
  tu_assert_status(graft_variable_create(m.root, "b", GRAFT_F32, 1, bs, NULL, GRAFT_VAR_TRAINABLE, &m.b),
                   GRAFT_OK);
  graft_variable *vars[2] = {m.w, m.b};
  graft_optimizer_desc d = {.kind = kind, .lr = 0.01, .weight_decay = 0.001, .clip_norm = clip};
  tu_assert_status(graft_optimizer_create(m.root, "adam", &d, 2, vars, &m.opt), GRAFT_OK);
  graft_runtime *rt = tu_runtime_of(sched, threads, 1024);
  graft_function *f = tu_function(rt, "train", tu_net_step, &m, 2, 1, NULL);
  tu_rng rng = {42};
  const int64_t xs[2] = {BATCH, IN}, ys[2] = {BATCH, OUT};
  graft_tensor *x = tu_tensor_rand(&rng, GRAFT_F32, 2, xs, -1, 1);
  graft_tensor *y = tu_tensor_rand(&rng, GRAFT_F32, 2, ys, -1, 1);
  graft_tensor *in[2] = {x, y};
  for (int step = 0; step < 5; step++) {
    graft_tensor *loss = NULL;
    tu_assert_call_ok(f, 2, in, 1, &loss);
    graft_tensor_destroy(loss);
  }
  graft_plan_stats stats;
  tu_assert_status(graft_function_stats(f, &stats), GRAFT_OK);
  *direct = stats.direct_assigns;
  for (int i = 0; i < IN * OUT; i++) w_out[i] = tu_get(graft_variable_value(m.w), i);
  for (int i = 0; i < OUT; i++) b_out[i] = tu_get(graft_variable_value(m.b), i);
  graft_tensor_destroy(x);
  graft_tensor_destroy(y);
  graft_function_destroy(f);
  graft_runtime_destroy(rt);
  graft_module_destroy(m.root);
}

static void test_graft_optimizer_apply__bitwise_across_threads(void **state) {
  (void)state;
  static double w1[64 * 96], b1[96], wn[64 * 96], bn[96];
  const struct {
    const char *sched;
    int threads;
  } runs[] = {{"ws", 2}, {"ws", 8}, {"seq", 1}, {"omp", 3}};
  for (int kind = GRAFT_OPT_MOMENTUM; kind <= GRAFT_OPT_ADAMW; kind += 2) {
    for (int clip = 0; clip < 2; clip++) {
      int64_t direct = 0;
      run_training("ws", 1, (graft_optimizer_kind)kind, clip ? 0.5 : 0, w1, b1, &direct);
      /* w and b each by one fused step, in place, plus the step count */
      assert_int_equal(direct, 3);
      for (size_t r = 0; r < TU_N_OF(runs); r++) {
        run_training(runs[r].sched, runs[r].threads, (graft_optimizer_kind)kind, clip ? 0.5 : 0, wn,
                     bn, &direct);
        if (memcmp(w1, wn, sizeof w1) || memcmp(b1, bn, sizeof b1))
          fail_msg("%s clip %d: %s x%d differs from ws x1", kind_name((graft_optimizer_kind)kind),
                   clip, runs[r].sched, runs[r].threads);
      }
    }
  }
}

/* Clipping: gradients scaled by min(1, c / (norm + 1e-6)), here 0.5 / 5. */
static void test_graft_optimizer_apply__clips_global_norm(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  const double w0[2] = {1, 1}, g[2] = {3, 4}; /* norm 5 */
  for (int c = 0; c < 2; c++) {
    double clip = c ? 10 : 0.5; /* 10: no effect */
    graft_optimizer_desc d = {.kind = GRAFT_OPT_SGD, .lr = 1, .clip_norm = clip};
    rig r;
    make_rig(&r, &d, GRAFT_F64, 2, w0);
    graft_function *f = tu_function(rt, "clip", apply_cb, &r, 1, 1, NULL);
    const int64_t shape[1] = {2};
    graft_tensor *gt = tu_tensor_from(GRAFT_F64, 1, shape, g), *out = NULL;
    tu_assert_call_ok(f, 1, &gt, 1, &out);
    double scale = c ? 1 : 0.5 / (5 + 1e-6);
    for (int i = 0; i < 2; i++) {
      double want = 1 - scale * g[i];
      if (fabs(tu_get(graft_variable_value(r.w), i) - want) > 1e-15)
        fail_msg("clip %g: w[%d] = %.17g, want %.17g", clip, i, tu_get(graft_variable_value(r.w), i),
                 want);
    }
    graft_tensor_destroy(gt);
    graft_tensor_destroy(out);
    graft_function_destroy(f);
    graft_module_destroy(r.root);
  }
  graft_runtime_destroy(rt);
}

typedef struct clip_case {
  double max_norm;
} clip_case;

static graft_status clip_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  const clip_case *c = user;
  graft_value *xs[3] = {in[0], NULL, in[1]}, *ys[3], *norm = NULL;
  graft_status st = graft_clip_by_global_norm(t, 3, xs, c->max_norm, ys, &norm);
  if (st) return st;
  assert_null(ys[1]);
  out[0] = ys[0];
  out[1] = ys[2];
  out[2] = norm;
  return GRAFT_OK;
}

static void test_graft_clip_by_global_norm__values(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  const int64_t s2[1] = {2}, s1[1] = {1};
  const double a[2] = {3, 0}, b[1] = {4};
  graft_tensor *ta = tu_tensor_from(GRAFT_F64, 1, s2, a), *tb = tu_tensor_from(GRAFT_F32, 1, s1, b);
  graft_tensor *in[2] = {ta, tb};
  clip_case c = {1};
  graft_function *f = tu_function(rt, "clip", clip_cb, &c, 2, 3, NULL);
  graft_tensor *out[3] = {NULL, NULL, NULL};
  tu_assert_call_ok(f, 2, in, 3, out);
  double k = 1 / (5 + 1e-6);
  const double wa[2] = {3 * k, 0}, wb[1] = {4 * k}, wn[1] = {5};
  tu_assert_close(out[0], wa, 2, 1e-15, 0);
  tu_assert_close(out[1], wb, 1, 1e-6, 0);
  tu_assert_close(out[2], wn, 1, 1e-15, 0);
  tu_destroy_outs(out, 3);
  graft_function_destroy(f);
  graft_tensor_destroy(ta);
  graft_tensor_destroy(tb);
  graft_runtime_destroy(rt);
}

/* The learning rate in a variable: changed between calls, no retrace. */
static void test_graft_optimizer_apply__lr_variable_schedule(void **state) {
  (void)state;
  graft_runtime *rt = tu_runtime();
  graft_variable *lr = NULL;
  const double lr0 = 0.5;
  tu_assert_status(graft_variable_create(NULL, "lr", GRAFT_F64, 0, NULL, &lr0, 0, &lr), GRAFT_OK);
  graft_optimizer_desc d = {.kind = GRAFT_OPT_SGD, .lr_var = lr};
  const double w0[1] = {10}, g[1] = {1};
  rig r;
  make_rig(&r, &d, GRAFT_F64, 1, w0);
  graft_function *f = tu_function(rt, "sched", apply_cb, &r, 1, 1, NULL);
  const int64_t shape[1] = {1};
  graft_tensor *gt = tu_tensor_from(GRAFT_F64, 1, shape, g);
  const double lrs[3] = {0.5, 0.25, 2}, want[3] = {9.5, 9.25, 7.25};
  for (int k = 0; k < 3; k++) {
    graft_tensor *lt = tu_tensor_from(GRAFT_F64, 0, NULL, &lrs[k]), *out = NULL;
    tu_assert_status(graft_variable_set(lr, lt), GRAFT_OK);
    tu_assert_call_ok(f, 1, &gt, 1, &out);
    assert_true(tu_get(graft_variable_value(r.w), 0) == want[k]);
    graft_tensor_destroy(lt);
    graft_tensor_destroy(out);
  }
  assert_int_equal(graft_function_trace_count(f), 1);
  graft_tensor_destroy(gt);
  graft_function_destroy(f);
  graft_module_destroy(r.root);
  graft_variable_destroy(lr);
  graft_runtime_destroy(rt);
}

/* A step that fails (a label out of range) changes neither the weights,
 * nor the slots, nor the step count, on every executor and thread count.
 * The plan writes the step in place (direct): it orders the step after
 * the label check, so the check has passed when the step writes.  A check
 * that reads the stepped weights (after == 1: a second loss on them) comes
 * after the step: the step is staged instead, and a failure there changes
 * nothing either. */
typedef struct xent_step {
  graft_module *root, *opt;
  graft_variable *w;
  int after;
} xent_step;

static graft_status xent_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                            graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  xent_step *s = user;
  graft_value *w = graft_read(t, s->w), *g = NULL;
  graft_value *loss = graft_softmax_cross_entropy(t, graft_matmul(t, in[0], w, 0), in[1]);
  graft_status st = graft_gradients(t, 1, &loss, NULL, 1, &w, GRAFT_UNCONNECTED_ZERO, &g);
  if (!st) st = graft_optimizer_apply(t, s->opt, 1, &g);
  out[0] = graft_scalar(t, GRAFT_F32, 0); /* nothing needs the loss */
  if (s->after) /* the loss on the stepped weights, checked after the step */
    out[0] = graft_softmax_cross_entropy(t, graft_matmul(t, in[0], graft_read(t, s->w), 0), in[2]);
  return st;
}

static snap_t module_bytes(const graft_module *m) {
  graft_variable *v[8];
  int64_t n = 0;
  tu_assert_status(graft_module_variables(m, 8, v, &n), GRAFT_OK);
  snap_t s = {{0}, 0};
  for (int64_t i = 0; i < n; i++) {
    const graft_tensor *t = graft_variable_value(v[i]);
    size_t b = (size_t)graft_tensor_numel(t) * graft_dtype_size(graft_tensor_dtype(t));
    assert_true(s.n + b <= sizeof s.bytes);
    memcpy(s.bytes + s.n, graft_tensor_data(t), b);
    s.n += b;
  }
  return s;
}

static void test_graft_optimizer_apply__failed_step_changes_nothing(void **state) {
  (void)state;
  enum { B = 64, K = 16, C = 5 };
  const struct {
    const char *sched;
    int threads;
  } runs[] = {{"seq", 1}, {"ws", 1}, {"ws", 2}, {"ws", 8}, {"omp", 3}};
  tu_rng r = {3};
  graft_tensor *x = tu_tensor_rand(&r, GRAFT_F32, 2, (int64_t[]){B, K}, -1, 1);
  double good[B], bad[B];
  for (int i = 0; i < B; i++) good[i] = bad[i] = i % C;
  bad[B - 1] = C + 2;
  graft_tensor *lg = tu_tensor_from(GRAFT_I32, 1, (int64_t[]){B}, good);
  graft_tensor *lb = tu_tensor_from(GRAFT_I32, 1, (int64_t[]){B}, bad);
  for (int after = 0; after < 2; after++) {
    for (size_t q = 0; q < TU_N_OF(runs); q++) {
      for (int which = 0; which < (after ? 2 : 1); which++) { /* after: the first or second check fails */
        xent_step m = {.after = after};
        tu_assert_status(graft_module_create(NULL, "clf", &m.root), GRAFT_OK);
        float w0[K * C];
        for (int i = 0; i < K * C; i++) w0[i] = 0.1f * (float)(i % 13 - 6);
        tu_assert_status(graft_variable_create(m.root, "w", GRAFT_F32, 2, (int64_t[]){K, C}, w0,
                                               GRAFT_VAR_TRAINABLE, &m.w),
                         GRAFT_OK);
        graft_optimizer_desc d = {.kind = GRAFT_OPT_ADAM, .lr = 0.1};
        tu_assert_status(graft_optimizer_create(m.root, "opt", &d, 1, &m.w, &m.opt), GRAFT_OK);
        graft_runtime *rt = tu_runtime_of(runs[q].sched, runs[q].threads, 16);
        graft_function *f = tu_function(rt, "step", xent_cb, &m, 2 + after, 1, NULL);
        graft_tensor *in_good[3] = {x, lg, lg}, *in_bad[3] = {x, which ? lg : lb, which ? lb : lg};
        graft_tensor *out = NULL;
        tu_assert_call_ok(f, 2 + after, in_good, 1, &out); /* slots and step now nonzero */
        graft_tensor_destroy(out);
        out = NULL;
        graft_plan_stats st;
        tu_assert_status(graft_function_stats(f, &st), GRAFT_OK);
        /* the step of w and the step count in place, unless a check follows */
        assert_int_equal(st.direct_assigns, after ? 1 : 2);
        const graft__plan *p = graft__function_plan(f);
        int unstaged = -1; /* written in place: the packed value has no arena bytes */
        for (uint32_t k = 0; k < p->n_assigns; k++)
          if (graft__graph_node(p->g, p->assigns[k])->op == GRAFT__OP_UPDATE) unstaged = p->unstaged[p->assigns[k]];
        assert_int_equal(unstaged, !after);
        snap_t before = module_bytes(m.root);
        tu_assert_status(graft_function_call(f, 2 + after, in_bad, 1, &out), GRAFT_EINVAL);
        tu_assert_msg_has(graft_function_errmsg(f), "softmax_cross_entropy");
        snap_t now = module_bytes(m.root);
        if (now.n != before.n || memcmp(now.bytes, before.bytes, now.n))
          fail_msg("%s x%d, after %d, check %d: a failed step changed the module", runs[q].sched,
                   runs[q].threads, after, which);
        graft_function_destroy(f);
        graft_runtime_destroy(rt);
        graft_module_destroy(m.root);
      }
    }
  }
  graft_tensor_destroy(x);
  graft_tensor_destroy(lg);
  graft_tensor_destroy(lb);
}

/* The slots and the step count are the optimizer's module variables. */
typedef struct paths {
  char buf[1024];
} paths;

static graft_status collect(const char *path, graft_variable *v, void *user) {
  paths *p = user;
  size_t at = strlen(p->buf);
  snprintf(p->buf + at, sizeof p->buf - at, "%s%s=%s", at ? " " : "", path, graft_variable_name(v));
  return GRAFT_OK;
}

static void test_graft_optimizer_create__slots_are_module_variables(void **state) {
  (void)state;
  graft_module *root;
  graft_variable *w, *b;
  tu_assert_status(graft_module_create(NULL, "net", &root), GRAFT_OK);
  const int64_t s[1] = {3};
  tu_assert_status(graft_variable_create(root, "w", GRAFT_F32, 1, s, NULL, GRAFT_VAR_TRAINABLE, &w), GRAFT_OK);
  tu_assert_status(graft_variable_create(root, "b", GRAFT_F64, 1, s, NULL, GRAFT_VAR_TRAINABLE, &b), GRAFT_OK);
  graft_variable *vars[2] = {w, b};
  graft_optimizer_desc d = {.kind = GRAFT_OPT_ADAM, .lr = 0.001};
  graft_module *opt;
  tu_assert_status(graft_optimizer_create(root, "adam", &d, 2, vars, &opt), GRAFT_OK);
  paths p = {""};
  tu_assert_status(graft_module_flatten(opt, collect, &p), GRAFT_OK);
  assert_string_equal(p.buf, "step=net/adam/step net_w.m=net/adam/net_w/m net_w.v=net/adam/net_w/v "
                             "net_b.m=net/adam/net_b/m net_b.v=net/adam/net_b/v");
  p.buf[0] = '\0';
  tu_assert_status(graft_module_flatten(root, collect, &p), GRAFT_OK);
  tu_assert_msg_has(p.buf, "w=net/w b=net/b adam.step=net/adam/step adam.net_w.m=net/adam/net_w/m");
  graft_module_destroy(root);
}

static void test_graft_optimizer_create__refusals(void **state) {
  (void)state;
  graft_variable *w, *k;
  const int64_t s[1] = {3};
  tu_assert_status(graft_variable_create(NULL, "w", GRAFT_F32, 1, s, NULL, 0, &w), GRAFT_OK);
  tu_assert_status(graft_variable_create(NULL, "k", GRAFT_I32, 1, s, NULL, 0, &k), GRAFT_OK);
  graft_variable *dup[2] = {w, w};
  const struct {
    graft_optimizer_desc d;
    int n;
    graft_variable **vars;
    const char *has;
  } cases[] = {
      {{.kind = GRAFT_OPT_SGD, .lr = 0}, 1, &w, "desc->lr is 0"},
      {{.kind = GRAFT_OPT_SGD, .lr = -1}, 1, &w, "desc->lr is -1"},
      {{.kind = (graft_optimizer_kind)9, .lr = 1}, 1, &w, "desc->kind is 9"},
      {{.kind = GRAFT_OPT_MOMENTUM, .lr = 1, .momentum = 1.5}, 1, &w, "momentum is 1.5"},
      {{.kind = GRAFT_OPT_ADAM, .lr = 1, .beta2 = 1}, 1, &w, "beta1, beta2 are 0.9, 1"},
      {{.kind = GRAFT_OPT_ADAM, .lr = 1, .eps = -1}, 1, &w, "eps is -1"},
      {{.kind = GRAFT_OPT_ADAMW, .lr = 1, .weight_decay = -0.1}, 1, &w, "weight_decay is -0.1"},
      {{.kind = GRAFT_OPT_SGD, .lr = 1, .clip_norm = -1}, 1, &w, "clip_norm is -1"},
      {{.kind = GRAFT_OPT_SGD, .lr = 1, .lr_var = w}, 1, &w, "lr_var 'w' is f32 of rank 1"},
      {{.kind = GRAFT_OPT_SGD, .lr = 1}, 0, &w, "0 variables"},
      {{.kind = GRAFT_OPT_SGD, .lr = 1}, 1, &k, "'k' is i32"},
      {{.kind = GRAFT_OPT_SGD, .lr = 1}, 2, dup, "both 'w'"},
  };
  for (size_t i = 0; i < TU_N_OF(cases); i++) {
    graft_module *opt = (graft_module *)&cases[i];
    graft_status st = graft_optimizer_create(NULL, "opt", &cases[i].d, cases[i].n, cases[i].vars, &opt);
    if (st == GRAFT_OK) fail_msg("case %zu accepted", i);
    assert_null(opt);
    tu_assert_msg_has(graft_last_errmsg(), "graft_optimizer_create");
    tu_assert_msg_has(graft_last_errmsg(), cases[i].has);
  }
  graft_variable_destroy(w);
  graft_variable_destroy(k);
}

/* Variables named "step" and "lr" (the optimizer's own attributes): their
 * slot modules take "step_1" and "lr_1". */
static void test_graft_optimizer_create__variables_named_step_and_lr(void **state) {
  (void)state;
  graft_module *root, *opt;
  graft_variable *step, *lr, *rate;
  const int64_t s[1] = {2};
  tu_assert_status(graft_module_create(NULL, "net", &root), GRAFT_OK);
  tu_assert_status(graft_variable_create(NULL, "step", GRAFT_F32, 1, s, NULL, 0, &step), GRAFT_OK);
  tu_assert_status(graft_variable_create(NULL, "lr", GRAFT_F64, 1, s, NULL, 0, &lr), GRAFT_OK);
  tu_assert_status(graft_variable_create(NULL, "rate", GRAFT_F64, 0, NULL, NULL, 0, &rate), GRAFT_OK);
  graft_variable *vars[2] = {step, lr};
  graft_optimizer_desc d = {.kind = GRAFT_OPT_MOMENTUM, .lr_var = rate};
  tu_assert_status(graft_optimizer_create(root, "opt", &d, 2, vars, &opt), GRAFT_OK);
  paths p = {""};
  tu_assert_status(graft_module_flatten(opt, collect, &p), GRAFT_OK);
  assert_string_equal(p.buf, "step=net/opt/step lr=rate step_1.momentum=net/opt/step_1/momentum "
                             "lr_1.momentum=net/opt/lr_1/momentum");
  graft_module_destroy(root);
  graft_variable_destroy(step);
  graft_variable_destroy(lr);
  graft_variable_destroy(rate);
}

/* Every allocation of graft_optimizer_create under a parent failing in
 * turn: each failure is GRAFT_ENOMEM naming the call and leaves the parent
 * as it was (no half-built optimizer, the same sibling numbering), and the
 * variables' reference counts as they were (ASan: nothing leaks). */
typedef struct armed {
  long left; /* > 0: fail the left-th allocation from now */
  int hit;
} armed;

static void *armed_alloc(void *ctx, size_t size, size_t align) {
  armed *a = ctx;
  if (a->left > 0 && --a->left == 0) {
    a->hit = 1;
    return NULL;
  }
  return aligned_alloc(align, (size + align - 1) / align * align);
}

static void armed_free(void *ctx, void *p) {
  (void)ctx;
  free(p);
}

static void test_graft_optimizer_create__allocation_failure_changes_nothing(void **state) {
  (void)state;
  static armed a;
  const graft_allocator hook = {armed_alloc, armed_free, &a};
  a = (armed){0, 0};
  graft_set_allocator(&hook);
  graft_module *root, *opt = NULL;
  graft_variable *w, *b, *rate;
  const int64_t s[1] = {3};
  tu_assert_status(graft_module_create(NULL, "net", &root), GRAFT_OK);
  tu_assert_status(graft_variable_create(root, "w", GRAFT_F32, 1, s, NULL, GRAFT_VAR_TRAINABLE, &w), GRAFT_OK);
  tu_assert_status(graft_variable_create(root, "b", GRAFT_F64, 1, s, NULL, GRAFT_VAR_TRAINABLE, &b), GRAFT_OK);
  tu_assert_status(graft_variable_create(root, "rate", GRAFT_F64, 0, NULL, NULL, 0, &rate), GRAFT_OK);
  graft_module *first;
  tu_assert_status(graft_module_create(root, "opt", &first), GRAFT_OK); /* "opt": ours is opt_1 */
  graft_variable *vars[2] = {w, b};
  graft_optimizer_desc d = {.kind = GRAFT_OPT_ADAM, .lr_var = rate};
  paths before = {""};
  tu_assert_status(graft_module_flatten(root, collect, &before), GRAFT_OK);
  int64_t kids0;
  tu_assert_status(graft_module_submodules(root, 0, NULL, &kids0), GRAFT_OK);
  int fails = 0;
  for (long n = 1;; n++) {
    a = (armed){n, 0};
    graft_status st = graft_optimizer_create(root, "opt", &d, 2, vars, &opt);
    a.left = 0;
    if (!a.hit) {
      tu_assert_status(st, GRAFT_OK);
      break;
    }
    tu_assert_status(st, GRAFT_ENOMEM);
    assert_null(opt);
    tu_assert_msg_has(graft_last_errmsg(), "graft_optimizer_create");
    paths now = {""};
    tu_assert_status(graft_module_flatten(root, collect, &now), GRAFT_OK);
    assert_string_equal(now.buf, before.buf);
    int64_t kids;
    tu_assert_status(graft_module_submodules(root, 0, NULL, &kids), GRAFT_OK);
    assert_int_equal(kids, kids0);
    fails++;
  }
  assert_true(fails >= 8); /* the state, 2 slot modules, 4 slots, the step, the lr hold */
  assert_string_equal(graft_module_name(opt), "opt_1");
  paths p = {""};
  tu_assert_status(graft_module_flatten(opt, collect, &p), GRAFT_OK);
  assert_string_equal(p.buf, "step=net/opt_1/step lr=net/rate net_w.m=net/opt_1/net_w/m "
                             "net_w.v=net/opt_1/net_w/v net_b.m=net/opt_1/net_b/m "
                             "net_b.v=net/opt_1/net_b/v");
  graft_module_destroy(root);
  graft_set_allocator(NULL);
}

/* In a trace: a wrong gradient, a module that is not an optimizer. */
typedef struct bad_apply {
  graft_module *opt, *plain;
  int which;
} bad_apply;

static graft_status bad_apply_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                 graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  bad_apply *b = user;
  const int64_t s2[1] = {2};
  graft_value *g = b->which == 0 ? graft_fill(t, GRAFT_F32, 1, s2, 1) : b->which == 1 ? graft_cast(t, in[0], GRAFT_F64) : in[0];
  graft_status st = graft_optimizer_apply(t, b->which == 2 ? b->plain : b->opt, 1, &g);
  out[0] = in[0];
  return st;
}

static void test_graft_optimizer_apply__refusals(void **state) {
  (void)state;
  graft_module *root, *plain, *opt;
  graft_variable *w;
  const int64_t s[1] = {3};
  tu_assert_status(graft_module_create(NULL, "net", &root), GRAFT_OK);
  tu_assert_status(graft_module_create(root, "plain", &plain), GRAFT_OK);
  tu_assert_status(graft_variable_create(root, "w", GRAFT_F32, 1, s, NULL, 0, &w), GRAFT_OK);
  graft_optimizer_desc d = {.kind = GRAFT_OPT_SGD, .lr = 1};
  tu_assert_status(graft_optimizer_create(root, "opt", &d, 1, &w, &opt), GRAFT_OK);
  graft_runtime *rt = tu_runtime();
  graft_tensor *x = tu_tensor_from(GRAFT_F32, 1, s, NULL), *out = NULL;
  const char *const has[3] = {"grads[0] is f32[2], variable 'net/w' is f32[3]",
                              "grads[0] is f64[3], variable 'net/w' is f32[3]", "not an optimizer"};
  for (int which = 0; which < 3; which++) {
    bad_apply b = {opt, plain, which};
    char msg[512];
    graft_status st = tu_run(rt, bad_apply_cb, &b, 1, &x, 1, &out, msg);
    if (st == GRAFT_OK) fail_msg("case %d accepted", which);
    tu_assert_msg_has(msg, "graft_optimizer_apply");
    tu_assert_msg_has(msg, has[which]);
  }
  graft_tensor_destroy(x);
  graft_runtime_destroy(rt);
  graft_module_destroy(root);
}

/* A step the plan writes in place must still stage (in its fallback
 * block) when a call tensor is the variable's own memory, and when a fault
 * may strike; results are the same bits as an in-place call's. */
/* in[0] the gradient; in[1] any tensor (the variable's memory, in the
 * aliased call), read so the call uses it. */
static graft_status alias_cb(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                             graft_value **out, void *user) {
  (void)n_in, (void)n_out;
  rig *r = user;
  graft_status st = graft_optimizer_apply(t, r->opt, 1, in);
  out[0] = graft_reduce_sum(t, in[1], 0, NULL, 0);
  return st;
}

static uint32_t g_fail_node = UINT32_MAX;
static graft_status fail_node(uint32_t node, int64_t tile) {
  (void)tile;
  return node == g_fail_node ? GRAFT_ECANCELED : GRAFT_OK;
}

static void test_graft_optimizer_apply__stages_when_it_must(void **state) {
  (void)state;
  enum { N = 5 };
  const double w0[N] = {1, -2, 3, 0.5, -0.25}, g[N] = {0.5, 0.25, -1, 2, 0.125};
  const int64_t shape[1] = {N};
  graft_optimizer_desc d = {.kind = GRAFT_OPT_ADAM, .lr = 0.1};
  double want[N];
  for (int run = 0; run < 3; run++) { /* 0: in place, 1: w aliased by a call tensor, 2: a fault */
    rig r;
    make_rig(&r, &d, GRAFT_F64, N, w0);
    graft_runtime *rt = tu_runtime_of("ws", 2, 0);
    graft_function *f = tu_function(rt, "alias", alias_cb, &r, 2, 1, NULL);
    graft_tensor *gt = tu_tensor_from(GRAFT_F64, 1, shape, g), *other = tu_tensor_from(GRAFT_F64, 1, shape, w0);
    graft_tensor *alias = NULL;
    tu_assert_status(graft_tensor_wrap(GRAFT_F64, 1, shape,
                                       graft_tensor_data(graft_variable_value(r.w)), &alias), GRAFT_OK);
    graft_tensor *in[2] = {gt, run == 1 ? alias : other}, *out = NULL;
    if (run == 2) {
      tu_assert_call_ok(f, 2, in, 1, &out); /* compile; the plan shows the step's node */
      graft_tensor_destroy(out);
      out = NULL;
      const graft__plan *p = graft__function_plan(f);
      for (uint32_t k = 0; k < p->n_assigns; k++)
        if (graft__graph_node(p->g, p->assigns[k])->op == GRAFT__OP_UPDATE) g_fail_node = p->assigns[k];
      double before[N];
      for (int i = 0; i < N; i++) before[i] = tu_get(graft_variable_value(r.w), i);
      graft__exec_fault_hook = fail_node;
      graft_status st = graft_function_call(f, 2, in, 1, &out);
      graft__exec_fault_hook = NULL;
      tu_assert_status(st, GRAFT_ECANCELED);
      for (int i = 0; i < N; i++)
        if (tu_get(graft_variable_value(r.w), i) != before[i]) fail_msg("a failed step wrote w[%d]", i);
      /* and a second step from there matches the reference's second step */
      tu_assert_call_ok(f, 2, in, 1, &out);
      ref_state s = {0};
      for (int i = 0; i < N; i++) s.w[i] = w0[i];
      ref_step(&d, d.lr, 1, 0, N, g, &s);
      ref_step(&d, d.lr, 1, 0, N, g, &s);
      for (int i = 0; i < N; i++)
        if (fabs(tu_get(graft_variable_value(r.w), i) - s.w[i]) > 1e-12 * fabs(s.w[i]))
          fail_msg("after the failed step: w[%d] %.17g, reference %.17g", i,
                   tu_get(graft_variable_value(r.w), i), s.w[i]);
    } else {
      tu_assert_call_ok(f, 2, in, 1, &out);
      graft_plan_stats st;
      tu_assert_status(graft_function_stats(f, &st), GRAFT_OK);
      assert_int_equal(st.direct_assigns, 2); /* the step and the step count */
      /* in place: no arena bytes and no fallback; aliased: the fallback */
      const graft__plan *p = graft__function_plan(f);
      if ((p->fallback != NULL) != (run == 1))
        fail_msg("run %d: fallback block %s", run, p->fallback ? "allocated" : "missing");
      for (int i = 0; i < N; i++) {
        double got = tu_get(graft_variable_value(r.w), i);
        if (run == 0) want[i] = got;
        else if (got != want[i]) fail_msg("aliased call: w[%d] %.17g, in place %.17g", i, got, want[i]);
      }
      /* the sum read the variable's old value (the call's tensor) */
      double sum = 0;
      for (int i = 0; i < N; i++) sum += w0[i];
      assert_true(fabs(tu_get(out, 0) - sum) < 1e-12);
    }
    graft_tensor_destroy(out);
    graft_tensor_destroy(gt);
    graft_tensor_destroy(other);
    graft_tensor_destroy(alias);
    graft_function_destroy(f);
    graft_runtime_destroy(rt);
    graft_module_destroy(r.root);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_optimizer_apply__matches_reference),
      cmocka_unit_test(test_graft_optimizer_apply__bitwise_across_threads),
      cmocka_unit_test(test_graft_optimizer_apply__clips_global_norm),
      cmocka_unit_test(test_graft_clip_by_global_norm__values),
      cmocka_unit_test(test_graft_optimizer_apply__lr_variable_schedule),
      cmocka_unit_test(test_graft_optimizer_apply__failed_step_changes_nothing),
      cmocka_unit_test(test_graft_optimizer_create__slots_are_module_variables),
      cmocka_unit_test(test_graft_optimizer_create__refusals),
      cmocka_unit_test(test_graft_optimizer_create__variables_named_step_and_lr),
      cmocka_unit_test(test_graft_optimizer_create__allocation_failure_changes_nothing),
      cmocka_unit_test(test_graft_optimizer_apply__refusals),
      cmocka_unit_test(test_graft_optimizer_apply__stages_when_it_must),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
