/* Fused groups compiled to machine code (kernels/fused_jit.c) against the
 * interpreter (GRAFT_FUSION=interp) and against no fusion at all, bitwise.
 *
 * Every op the compiler takes, in f32 and f64, each operand of the group's
 * shape, one element (broadcast) or a row broadcast over the group's
 * leading dim (a bias: read at i % cols), over lengths around the vector
 * width (1 to 1,027 elements: the packed loop, the scalar tail, both;
 * rows of whole vectors and rows that are not), in
 * groups of two forms: neg(op(...)) and op(...) with neg(input) as one
 * operand, and op(...) assigned to a variable.  Inputs mix finite values
 * with the values whose bits a careless compiler gets wrong: NaNs of both
 * signs and different payloads (an add of two NaNs must return the one
 * the C kernel returns), a signalling NaN, infinities, signed zeros and
 * subnormals.  Each case runs sequentially and on two workers with tiles of
 * a few elements (so tiles start and end off the vector width); where the
 * CPU lets graft compile, the plan must hold exactly one group, compiled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "testutil.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

enum { MAX_ARITY = 3 };

typedef graft_value *(*unary_fn)(graft_trace *, graft_value *);
typedef graft_value *(*binary_fn)(graft_trace *, graft_value *, graft_value *);
typedef graft_value *(*ternary_fn)(graft_trace *, graft_value *, graft_value *, graft_value *);

static graft_value *cast_same(graft_trace *t, graft_value *x) { return graft_cast(t, x, graft_value_dtype(x)); }

typedef struct op_case {
  const char *name;
  int arity;
  unary_fn u;
  binary_fn b;
  ternary_fn t;
} op_case;

static const op_case k_ops[] = {
    {"neg", 1, graft_neg, NULL, NULL},           {"square", 1, graft_square, NULL, NULL},
    {"sqrt", 1, graft_sqrt, NULL, NULL},         {"relu", 1, graft_relu, NULL, NULL},
    {"abs", 1, graft_abs, NULL, NULL},           {"stop_gradient", 1, graft_stop_gradient, NULL, NULL},
    {"cast", 1, cast_same, NULL, NULL},          {"add", 2, NULL, graft_add, NULL},
    {"sub", 2, NULL, graft_sub, NULL},           {"mul", 2, NULL, graft_mul, NULL},
    {"div", 2, NULL, graft_div, NULL},           {"maximum", 2, NULL, graft_maximum, NULL},
    {"minimum", 2, NULL, graft_minimum, NULL},   {"greater", 2, NULL, graft_greater, NULL},
    {"less", 2, NULL, graft_less, NULL},         {"equal", 2, NULL, graft_equal, NULL},
    {"where", 3, NULL, NULL, graft_where},       {"mul_add", 3, NULL, NULL, graft_mul_add},
};

/* Where op's value goes decides whether the code must make a NaN result
 * canonical: before neg (which flips a NaN's sign) and an assign it must,
 * before mul (whose NaN result is made canonical anyway) and a comparison
 * (0 for any NaN) it need not. */
enum { FORM_NEG_AFTER, FORM_NEG_BEFORE, FORM_ASSIGN, FORM_MUL_AFTER, FORM_LESS_AFTER, N_FORMS };
static const char *const k_forms[N_FORMS] = {"neg(op(...))", "op(neg(in), ...)", "assign(v, op(...))",
                                             "mul(op(...), in0)", "less(op(...), in0)"};

typedef struct jcase {
  const op_case *op;
  int form;
  int neg_at;                 /* FORM_NEG_BEFORE: the operand neg feeds */
  graft_variable *var;        /* FORM_ASSIGN */
} jcase;

static graft_value *apply(graft_trace *t, const op_case *op, graft_value **x) {
  if (op->arity == 1) return op->u(t, x[0]);
  if (op->arity == 2) return op->b(t, x[0], x[1]);
  return op->t(t, x[0], x[1], x[2]);
}

static graft_status jcase_trace(graft_trace *t, int n_in, graft_value *const *in, int n_out,
                                graft_value **out, void *user) {
  (void)n_out;
  const jcase *c = user;
  graft_value *x[MAX_ARITY];
  for (int j = 0; j < n_in; j++) x[j] = in[j];
  if (c->form == FORM_NEG_BEFORE) x[c->neg_at] = graft_neg(t, x[c->neg_at]);
  graft_value *y = apply(t, c->op, x);
  if (c->form == FORM_NEG_AFTER) y = graft_neg(t, y);
  if (c->form == FORM_MUL_AFTER) y = graft_mul(t, y, in[0]);
  if (c->form == FORM_LESS_AFTER) y = graft_less(t, y, in[0]);
  if (c->form == FORM_ASSIGN) {
    graft_assign(t, c->var, y);
    y = graft_read(t, c->var);
  }
  out[0] = y;
  return GRAFT_OK;
}

/* ---- inputs ----------------------------------------------------------------- */

static const uint32_t k_special32[] = {
    0x7FC00000u, 0xFFC00000u, 0x7FC12345u, 0xFF812345u, 0x7F800001u, /* NaNs, one signalling */
    0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u,              /* +-inf, +-0 */
    0x00000001u, 0x807FFFFFu, 0x3F800000u, 0xBF800000u, 0x7F7FFFFFu, /* subnormals, +-1, max */
};
static const uint64_t k_special64[] = {
    0x7FF8000000000000u, 0xFFF8000000000000u, 0x7FF8000000012345u, 0xFFF4000000012345u,
    0x7FF0000000000001u, 0x7FF0000000000000u, 0xFFF0000000000000u, 0x0000000000000000u,
    0x8000000000000000u, 0x0000000000000001u, 0x800FFFFFFFFFFFFFu, 0x3FF0000000000000u,
    0xBFF0000000000000u, 0x7FEFFFFFFFFFFFFFu,
};

/* Half special values, half finite ones in [-3, 3] (a few exact zeros and
 * ones, which where and the comparisons care about). */
static void fill(tu_rng *r, graft_tensor *t) {
  int64_t n = graft_tensor_numel(t);
  int f64 = graft_tensor_dtype(t) == GRAFT_F64;
  void *d = graft_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    int special = tu_int(r, 0, 1);
    double v = tu_int(r, 0, 9) == 0 ? (double)tu_int(r, -1, 1) : tu_uniform(r, -3, 3);
    if (f64) {
      uint64_t bits;
      if (special) bits = k_special64[tu_int(r, 0, (int64_t)COUNT(k_special64) - 1)];
      else memcpy(&bits, &v, sizeof bits);
      memcpy((char *)d + 8 * i, &bits, 8);
    } else {
      float fv = (float)v;
      uint32_t bits;
      if (special) bits = k_special32[tu_int(r, 0, (int64_t)COUNT(k_special32) - 1)];
      else memcpy(&bits, &fv, sizeof bits);
      memcpy((char *)d + 4 * i, &bits, 4);
    }
  }
}

/* ---- one case under several runtimes ------------------------------------------- */

enum { RT_OFF, RT_INTERP, RT_ON_SEQ, RT_ON_WS, N_RTS };
static const char *const k_rt_names[N_RTS] = {"fusion off", "interp", "on seq", "on ws x2 grain 8"};

static int g_can_compile;
static int64_t g_compiled[N_FORMS]; /* groups compiled per form, on seq */
static int64_t g_row_compiled;      /* of them, with a row operand */

/* One call of c on rt; its output (and the group counts of its plan). */
static graft_tensor *run(graft_runtime *rt, jcase *c, int n_in, graft_tensor *const *in,
                         const graft_tensor *var0, graft_plan_stats *ps) {
  if (c->var) assert_int_equal(graft_variable_set(c->var, var0), GRAFT_OK);
  graft_function *f = tu_function(rt, "jit_case", jcase_trace, c, n_in, 1, NULL);
  graft_tensor *out[1] = {NULL};
  graft_status st = graft_function_call(f, n_in, in, 1, out);
  if (st != GRAFT_OK) fail_msg("%s: %s: %s", c->op->name, graft_status_name(st), graft_function_errmsg(f));
  assert_int_equal(graft_function_stats(f, ps), GRAFT_OK);
  graft_function_destroy(f);
  return out[0];
}

static void report(const jcase *c, graft_dtype dt, int n_in, graft_tensor *const *in,
                   const graft_tensor *ref, const graft_tensor *got, const char *rt) {
  size_t es = graft_dtype_size(dt);
  int64_t n = graft_tensor_numel(ref), i = 0;
  while (i < n && !memcmp((const char *)graft_tensor_data(ref) + i * es,
                          (const char *)graft_tensor_data(got) + i * es, es))
    i++;
  char ops[160] = "";
  size_t at = 0;
  for (int j = 0; j < n_in && i < n; j++) {
    int64_t k = i % graft_tensor_numel(in[j]);
    uint64_t bits = 0;
    memcpy(&bits, (const char *)graft_tensor_data(in[j]) + k * es, es);
    at += (size_t)snprintf(ops + at, sizeof ops - at, " in%d=%#llx", j, (unsigned long long)bits);
  }
  uint64_t rb = 0, gb = 0;
  if (i < n) {
    memcpy(&rb, (const char *)graft_tensor_data(ref) + i * es, es);
    memcpy(&gb, (const char *)graft_tensor_data(got) + i * es, es);
  }
  fail_msg("%s %s, %s, %lld elements: %s differs from fusion off at element %lld: %#llx, want %#llx (%s)",
           c->op->name, dt == GRAFT_F64 ? "f64" : "f32", k_forms[c->form], (long long)n, rt,
           (long long)i, (unsigned long long)gb, (unsigned long long)rb, ops);
}

enum { K_FULL, K_SCALAR, K_ROW, N_KINDS };

/* The group's shape is [rows, cols]; operand j is kind[j]: of that shape,
 * one element, or a row [cols] (a bias). */
static void check_case(graft_runtime *const *rts, tu_rng *r, const op_case *op, graft_dtype dt,
                       int64_t rows, int64_t cols, const int *kind, int form) {
  const int64_t shape[2] = {rows, cols};
  jcase c = {op, form, (kind[0] + 2 * kind[op->arity - 1] + form) % op->arity, NULL};
  graft_tensor *in[MAX_ARITY] = {NULL, NULL, NULL}, *var0 = NULL;
  int has_row = 0;
  for (int j = 0; j < op->arity; j++) {
    if (kind[j] == K_SCALAR) in[j] = tu_tensor_from(dt, 0, shape, NULL);
    else if (kind[j] == K_ROW) in[j] = tu_tensor_from(dt, 1, &shape[1], NULL);
    else in[j] = tu_tensor_from(dt, 2, shape, NULL);
    has_row |= kind[j] == K_ROW;
    fill(r, in[j]);
  }
  if (form == FORM_ASSIGN) {
    var0 = tu_tensor_from(dt, 2, shape, NULL);
    fill(r, var0);
    assert_int_equal(graft_variable_create(NULL, "v", dt, 2, shape, NULL, 0, &c.var), GRAFT_OK);
  }
  /* rows compile when a vector (32 bytes) never straddles a row's end */
  const int compiles = g_can_compile && (!has_row || cols * (int64_t)graft_dtype_size(dt) % 32 == 0);
  graft_tensor *out[N_RTS], *var[N_RTS] = {NULL};
  graft_plan_stats ps[N_RTS];
  for (int k = 0; k < N_RTS; k++) {
    out[k] = run(rts[k], &c, op->arity, in, var0, &ps[k]);
    if (c.var) var[k] = tu_copy(graft_variable_value(c.var));
  }
  for (int k = 1; k < N_RTS; k++) {
    if (!tu_bitwise_equal(out[RT_OFF], out[k])) report(&c, dt, op->arity, in, out[RT_OFF], out[k], k_rt_names[k]);
    if (c.var && !tu_bitwise_equal(var[RT_OFF], var[k]))
      report(&c, dt, op->arity, in, var[RT_OFF], var[k], k_rt_names[k]);
  }
  /* the group ran compiled (or interpreted, as asked) */
  if (ps[RT_OFF].fused_groups != 0 || ps[RT_INTERP].fused_compiled != 0)
    fail_msg("%s: fusion off has %lld groups, interp %lld compiled", op->name,
             (long long)ps[RT_OFF].fused_groups, (long long)ps[RT_INTERP].fused_compiled);
  /* neg(op(...)) is always one group; the other forms may not fuse (a
   * one-element value read back after its assign stays stored, and a
   * where's condition is not computed inside a group), but compile
   * whatever does */
  int want = form == FORM_NEG_AFTER ? 1 : (int)ps[RT_INTERP].fused_groups;
  for (int k = RT_INTERP; k < N_RTS; k++)
    if (ps[k].fused_groups != want)
      fail_msg("%s %s, %s: %s fused %lld groups, want %d", op->name, dt == GRAFT_F64 ? "f64" : "f32",
               k_forms[form], k_rt_names[k], (long long)ps[k].fused_groups, want);
  for (int k = RT_ON_SEQ; k < N_RTS; k++)
    if (ps[k].fused_compiled != (compiles ? want : 0))
      fail_msg("%s %s, %s, [%lld, %lld]%s: %s compiled %lld groups, want %d", op->name,
               dt == GRAFT_F64 ? "f64" : "f32", k_forms[form], (long long)rows, (long long)cols,
               has_row ? " with a row" : "", k_rt_names[k], (long long)ps[k].fused_compiled, compiles ? want : 0);
  g_compiled[form] += ps[RT_ON_SEQ].fused_compiled;
  g_row_compiled += has_row ? ps[RT_ON_SEQ].fused_compiled : 0;
  for (int k = 0; k < N_RTS; k++) {
    graft_tensor_destroy(out[k]);
    graft_tensor_destroy(var[k]);
  }
  for (int j = 0; j < op->arity; j++) graft_tensor_destroy(in[j]);
  graft_tensor_destroy(var0);
  graft_variable_destroy(c.var);
}

/* [rows, cols]: one row of lengths around the vector width, then shapes
 * with row operands whose rows are whole vectors of f32, of f64 only, or
 * of neither (the interpreter runs those). */
static const int64_t k_shapes[][2] = {{1, 1},  {1, 3},  {1, 4},   {1, 7},  {1, 8},  {1, 9},
                                      {1, 15}, {1, 16}, {1, 17},  {1, 33}, {1, 100}, {1, 1027},
                                      {3, 8},  {5, 16}, {2, 24},  {9, 4},  {4, 5},   {33, 32}};

static void test_graft_function_call__compiled_groups_bitwise_equal_to_interpreted_and_unfused(void **state) {
  (void)state;
  graft_runtime *rts[N_RTS] = {tu_runtime_fused("seq", 1, 0, "off"), tu_runtime_fused("seq", 1, 0, "interp"),
                               tu_runtime_fused("seq", 1, 0, "on"), tu_runtime_fused("ws", 2, 8, "on")};
  char desc[512];
  graft_runtime_describe(rts[RT_ON_SEQ], desc, sizeof desc);
  g_can_compile = strstr(desc, "fusion=on ") != NULL;
  print_message("compiling groups: %s\n", g_can_compile ? "yes" : "no (fusion=on(interp))");
  tu_rng r = {0x5eed0f0u};
  int64_t cases = 0;
  for (size_t o = 0; o < COUNT(k_ops); o++)
    for (int dt = 0; dt < 2; dt++)
      for (size_t si = 0; si < COUNT(k_shapes); si++) {
        const int64_t rows = k_shapes[si][0], cols = k_shapes[si][1];
        const int arity = k_ops[o].arity;
        int n_combos = 1;
        for (int j = 0; j < arity; j++) n_combos *= N_KINDS;
        for (int combo = 0; combo < n_combos; combo++) {
          int kind[MAX_ARITY], n_full = 0, n_row = 0;
          for (int j = 0, v = combo; j < arity; j++, v /= N_KINDS) {
            kind[j] = v % N_KINDS;
            n_full += kind[j] == K_FULL;
            n_row += kind[j] == K_ROW;
          }
          /* one operand at least of the group's shape (all one-element
           * operands only in a one-element group); rows only where they
           * are not the whole shape */
          if ((!n_full && rows * cols != 1) || (n_row && rows == 1)) continue;
          for (int form = 0; form < N_FORMS; form++) {
            check_case(rts, &r, &k_ops[o], dt ? GRAFT_F64 : GRAFT_F32, rows, cols, kind, form);
            cases++;
          }
        }
      }
  print_message("%lld cases, each under %d runtimes; groups compiled:", (long long)cases, N_RTS);
  for (int form = 0; form < N_FORMS; form++)
    print_message(" %lld %s%s", (long long)g_compiled[form], k_forms[form], form + 1 < N_FORMS ? "," : "\n");
  print_message("%lld groups with a row operand compiled\n", (long long)g_row_compiled);
  /* every form compiled (most cases of each) where graft compiles */
  for (int form = 0; form < N_FORMS && g_can_compile; form++) assert_true(g_compiled[form] > cases / N_FORMS / 2);
  if (g_can_compile) assert_true(g_row_compiled > 0);
  for (int k = 0; k < N_RTS; k++) graft_runtime_destroy(rts[k]);
}

static const op_case *op_named(const char *name) {
  for (size_t o = 0; o < COUNT(k_ops); o++)
    if (!strcmp(k_ops[o].name, name)) return &k_ops[o];
  fail_msg("no op %s", name);
  return NULL;
}

/* Where the system gives no executable memory, every group is interpreted
 * and the results are the same. */
static void test_graft_function_call__groups_interpreted_without_executable_pages(void **state) {
  (void)state;
  graft_runtime *on = tu_runtime_fused("ws", 2, 8, "on"), *off = tu_runtime_fused("seq", 1, 0, "off");
  const op_case *const ops[] = {op_named("add"), op_named("div"), op_named("mul_add")};
  tu_rng r = {0x9a9e5u};
  for (int refuse = 0; refuse < 2; refuse++)
    for (size_t o = 0; o < COUNT(ops); o++) {
      const int64_t shape[2] = {5, 40};
      jcase c = {ops[o], FORM_NEG_AFTER, 0, NULL};
      graft_tensor *in[MAX_ARITY] = {NULL, NULL, NULL};
      for (int j = 0; j < ops[o]->arity; j++) {
        in[j] = tu_tensor_from(GRAFT_F32, 2, shape, NULL);
        fill(&r, in[j]);
      }
      graft_plan_stats ps_on, ps_off;
      graft__fused_refuse_pages = refuse;
      graft_tensor *got = run(on, &c, ops[o]->arity, in, NULL, &ps_on);
      graft__fused_refuse_pages = 0;
      graft_tensor *want = run(off, &c, ops[o]->arity, in, NULL, &ps_off);
      assert_true(tu_bitwise_equal(got, want));
      assert_int_equal(ps_on.fused_groups, 1);
      assert_int_equal(ps_on.fused_compiled, refuse ? 0 : g_can_compile);
      graft_tensor_destroy(got);
      graft_tensor_destroy(want);
      for (int j = 0; j < ops[o]->arity; j++) graft_tensor_destroy(in[j]);
    }
  graft_runtime_destroy(on);
  graft_runtime_destroy(off);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graft_function_call__compiled_groups_bitwise_equal_to_interpreted_and_unfused),
      cmocka_unit_test(test_graft_function_call__groups_interpreted_without_executable_pages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
