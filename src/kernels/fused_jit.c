/* Fused groups compiled to one loop (kernels.h: graft__fused_compile).
 *
 * The interpreter (fused.c) runs a group member by member over chunks of
 * elements, so every member is a pass through L1: a load, one operation
 * and a store per element, and a division or square root cannot overlap
 * the cheap members around it.  Here a group becomes one loop over its
 * elements: each input is loaded once, the members' values stay in
 * registers, and only the root's value is stored, 8 floats or 4 doubles
 * at a time (AVX), then one at a time for the last few.
 *
 * Each element gets the same IEEE operations in the same order as the
 * members' kernels give it (elementwise.c: an add is one vaddps or vaddss
 * here and there, a maximum the same compare and select), so the bits are
 * the same as the interpreter's and as unfused; tests compare all three,
 * with NaNs of different payloads and signs among the inputs.  The kernels
 * of add, sub, mul, div and mul_add write a NaN result as C's NAN (which
 * NaN an add of two NaNs passes on is otherwise the compiler's choice);
 * the code does so too, where the NaN's bits could show (canon_needed).
 *
 * A group compiles when every member has a rule below, one dtype (f32 or
 * f64) runs through all of it, every input is the group's shape, one
 * element (a hyperparameter, broadcast into a register once) or a row of
 * whole vectors broadcast over the leading dims (a bias), and its values
 * fit the 16 vector registers; otherwise the interpreter runs it.
 * The rules are a table expanded from GRAFT_OP_MAP (the probe idiom of
 * kernel_table.c), so an op without one is simply not compiled. */
#include <math.h>
#include <string.h>

#include "common/common.h"
#include "kernels/jit_x86.h"
#include "kernels/kernels.h"
#include "kernels/kernels_int.h"

#define N_VREGS 16
#define VEC_BYTES 32

enum { K_ZERO, K_SIGN, K_ONE, K_NAN, N_CONSTS };
#define NEEDS(k) (1u << (k))

/* Compare predicates (vcmpps imm8). */
enum { EQ_OQ = 0x00, UNORD_Q = 0x03, NEQ_UQ = 0x04, LT_OQ = 0x11, GT_OQ = 0x1E };
/* Opcodes in the 0F map. */
enum { OP_SQRT = 0x51, OP_AND = 0x54, OP_ANDN = 0x55, OP_OR = 0x56, OP_XOR = 0x57,
       OP_ADD = 0x58, OP_MUL = 0x59, OP_SUB = 0x5C, OP_MIN = 0x5D, OP_DIV = 0x5E,
       OP_MAX = 0x5F };

typedef struct jit_ctx {
  graft__asm *a;
  graft__asm_form f;
  uint32_t busy;              /* vector registers holding a value */
  int konst[N_CONSTS];        /* register of each constant, -1 if unused */
  int failed;                 /* ran out of registers */
} jit_ctx;

static int take(jit_ctx *c) {
  for (int r = 0; r < N_VREGS; r++)
    if (!(c->busy & (1u << r))) {
      c->busy |= 1u << r;
      return r;
    }
  c->failed = 1;
  return 0;
}

static void give(jit_ctx *c, int r) { c->busy &= ~(1u << r); }

/* ---- the rules: d = op(s[0], s[1], s[2]), d a register no operand holds -- */

typedef void (*jit_rule)(jit_ctx *c, int d, const int *s);

typedef struct jit_op {
  jit_rule emit;
  unsigned consts; /* NEEDS() of the constants it reads */
  /* CANON: its kernel writes a NaN result as C's NAN (add, sub, mul, div,
   * mul_add), and so does the code, where it matters (see canon_needed).
   * BLIND: a NaN operand gives what any NaN would (a NaN, canonical after
   * a CANON op; 0 from a comparison), whatever its bits. */
  unsigned flags;
} jit_op;
#define CANON 1u
#define BLIND 2u

static void arith(jit_ctx *c, int op, int d, int s1, int s2) { graft__asm_arith(c->a, c->f, op, d, s1, s2); }
static void logic(jit_ctx *c, int op, int d, int s1, int s2) { graft__asm_logic(c->a, c->f, op, d, s1, s2); }
static void cmp(jit_ctx *c, int pred, int d, int s1, int s2) { graft__asm_cmp(c->a, c->f, pred, d, s1, s2); }

/* d, or C's NAN where d is a NaN (graft__canon_f32: the kernels of add,
 * sub, mul, div and mul_add write that) */
static void canon(jit_ctx *c, int d) {
  int t = take(c);
  cmp(c, UNORD_Q, t, d, d);
  graft__asm_blend(c->a, c->f, d, d, c->konst[K_NAN], t);
  give(c, t);
}

static void r_add(jit_ctx *c, int d, const int *s) { arith(c, OP_ADD, d, s[0], s[1]); }
static void r_sub(jit_ctx *c, int d, const int *s) { arith(c, OP_SUB, d, s[0], s[1]); }
static void r_mul(jit_ctx *c, int d, const int *s) { arith(c, OP_MUL, d, s[0], s[1]); }
static void r_div(jit_ctx *c, int d, const int *s) { arith(c, OP_DIV, d, s[0], s[1]); }
static void r_square(jit_ctx *c, int d, const int *s) { arith(c, OP_MUL, d, s[0], s[0]); }
static void r_sqrt(jit_ctx *c, int d, const int *s) { arith(c, OP_SQRT, d, s[0], s[0]); }
/* -x and fabs(x): the sign bit flipped, cleared */
static void r_neg(jit_ctx *c, int d, const int *s) { logic(c, OP_XOR, d, s[0], c->konst[K_SIGN]); }
static void r_abs(jit_ctx *c, int d, const int *s) { logic(c, OP_ANDN, d, c->konst[K_SIGN], s[0]); }
/* a copy: stop_gradient, a cast to the same dtype, the assign of a root */
static void r_copy(jit_ctx *c, int d, const int *s) { graft__asm_move(c->a, c->f, d, s[0]); }

/* x > 0 || x != x ? x : 0 */
static void r_relu(jit_ctx *c, int d, const int *s) {
  int t = take(c);
  cmp(c, GT_OQ, d, s[0], c->konst[K_ZERO]);
  cmp(c, UNORD_Q, t, s[0], s[0]);
  logic(c, OP_OR, d, d, t);
  logic(c, OP_AND, d, d, s[0]);
  give(c, t);
}

/* a != a ? a : b != b ? b : a > b ? a : b (min: a < b).  maxps(a, b) is
 * a > b ? a : b, and b for a NaN in either: only a NaN a is left. */
static void minmax(jit_ctx *c, int op, int d, const int *s) {
  int t = take(c);
  arith(c, op, d, s[0], s[1]);
  cmp(c, UNORD_Q, t, s[0], s[0]);
  logic(c, OP_ANDN, d, t, d);
  logic(c, OP_AND, t, t, s[0]);
  logic(c, OP_OR, d, d, t);
  give(c, t);
}
static void r_max(jit_ctx *c, int d, const int *s) { minmax(c, OP_MAX, d, s); }
static void r_min(jit_ctx *c, int d, const int *s) { minmax(c, OP_MIN, d, s); }

/* a OP b ? 1 : 0 */
static void compare(jit_ctx *c, int pred, int d, const int *s) {
  cmp(c, pred, d, s[0], s[1]);
  logic(c, OP_AND, d, d, c->konst[K_ONE]);
}
static void r_greater(jit_ctx *c, int d, const int *s) { compare(c, GT_OQ, d, s); }
static void r_less(jit_ctx *c, int d, const int *s) { compare(c, LT_OQ, d, s); }
static void r_equal(jit_ctx *c, int d, const int *s) { compare(c, EQ_OQ, d, s); }

/* cond != 0 ? a : b (a NaN condition picks a) */
static void r_where(jit_ctx *c, int d, const int *s) {
  int t = take(c);
  cmp(c, NEQ_UQ, d, s[0], c->konst[K_ZERO]);
  logic(c, OP_AND, t, d, s[1]);
  logic(c, OP_ANDN, d, d, s[2]);
  logic(c, OP_OR, d, d, t);
  give(c, t);
}

/* (a * b) + c, rounded twice */
static void r_mul_add(jit_ctx *c, int d, const int *s) {
  arith(c, OP_MUL, d, s[0], s[1]);
  arith(c, OP_ADD, d, d, s[2]);
}

static const jit_op op_add = {r_add, 0, CANON | BLIND};
static const jit_op op_sub = {r_sub, 0, CANON | BLIND};
static const jit_op op_mul = {r_mul, 0, CANON | BLIND};
static const jit_op op_div = {r_div, 0, CANON | BLIND};
static const jit_op op_square = {r_square, 0, 0};
static const jit_op op_sqrt = {r_sqrt, 0, 0};
static const jit_op op_neg = {r_neg, NEEDS(K_SIGN), 0};
static const jit_op op_abs = {r_abs, NEEDS(K_SIGN), 0};
static const jit_op op_relu = {r_relu, NEEDS(K_ZERO), 0};
static const jit_op op_maximum = {r_max, 0, 0};
static const jit_op op_minimum = {r_min, 0, 0};
static const jit_op op_greater = {r_greater, NEEDS(K_ONE), BLIND};
static const jit_op op_less = {r_less, NEEDS(K_ONE), BLIND};
static const jit_op op_equal = {r_equal, NEEDS(K_ONE), BLIND};
static const jit_op op_where = {r_where, NEEDS(K_ZERO), 0};
static const jit_op op_mul_add = {r_mul_add, 0, CANON | BLIND};
static const jit_op op_stop_gradient = {r_copy, 0, 0};
static const jit_op op_cast = {r_copy, 0, 0}; /* only ever from the same dtype here */
static const jit_op op_assign = {r_copy, 0, 0};
#define JIT_RULE_ADD ~, &op_add
#define JIT_RULE_SUB ~, &op_sub
#define JIT_RULE_MUL ~, &op_mul
#define JIT_RULE_DIV ~, &op_div
#define JIT_RULE_SQUARE ~, &op_square
#define JIT_RULE_SQRT ~, &op_sqrt
#define JIT_RULE_NEG ~, &op_neg
#define JIT_RULE_ABS ~, &op_abs
#define JIT_RULE_RELU ~, &op_relu
#define JIT_RULE_MAXIMUM ~, &op_maximum
#define JIT_RULE_MINIMUM ~, &op_minimum
#define JIT_RULE_GREATER ~, &op_greater
#define JIT_RULE_LESS ~, &op_less
#define JIT_RULE_EQUAL ~, &op_equal
#define JIT_RULE_WHERE ~, &op_where
#define JIT_RULE_MUL_ADD ~, &op_mul_add
#define JIT_RULE_STOP_GRADIENT ~, &op_stop_gradient
#define JIT_RULE_CAST ~, &op_cast
#define JIT_RULE_ASSIGN ~, &op_assign
#define SECOND_(a, b, ...) b
#define SECOND(...) SECOND_(__VA_ARGS__)
#define JIT_ENTRY_(e, name, arity, rule, flags, cost, tile) SECOND(JIT_RULE_##e, NULL, ~),
static const jit_op *const rules[] = {GRAFT_OP_MAP(JIT_ENTRY_)};
#undef JIT_ENTRY_
_Static_assert(GRAFT__COUNT(rules) == GRAFT__OP_COUNT, "one jit rule row per GRAFT_OP_MAP row");

/* ---- a group ---------------------------------------------------------------- */

static const float k_f32[N_CONSTS] = {0.0f, -0.0f, 1.0f, (float)NAN};
static const double k_f64[N_CONSTS] = {0.0, -0.0, 1.0, (double)NAN};

/* General registers that hold the inputs' and the output's base
 * addresses (rax: the byte index, rcx: a row's byte index, rdx: the end,
 * r13: the vector loop's end, rsi: scratch while setting up, rdi: the
 * pointer list, taken last). */
static const int base_regs[] = {GRAFT__R8,  GRAFT__R9,  GRAFT__R10, GRAFT__R11, GRAFT__RBX,
                                GRAFT__R12, GRAFT__R14, GRAFT__R15, GRAFT__RDI};
static const int saved_regs[] = {GRAFT__RBX, GRAFT__R12, GRAFT__R13, GRAFT__R14, GRAFT__R15};

typedef struct group {
  const graft__fused *f;
  int n_in;
  int kind[GRAFT__FUSED_MAX_IN];   /* GRAFT__FUSED_IN_* */
  int64_t row;                     /* elements of a row input (0: none) */
  int n_out;                       /* the output, or the n_dst destinations */
  int base[GRAFT__FUSED_MAX_IN + GRAFT__UPDATE_MAX_VARS]; /* general register of a full or row
                                                            input; [n_in + j]: output j */
  int sreg[GRAFT__FUSED_MAX_IN];   /* vector register of a scalar input */
  int last_in[GRAFT__FUSED_MAX_IN]; /* the last member reading a full input */
  int last_m[GRAFT__FUSED_MAX_MEMBERS];
  uint8_t canon[GRAFT__FUSED_MAX_MEMBERS]; /* 1: make a NaN result C's NAN */
  unsigned consts;
  int f64;
} group;

/* How code reads input j of the group (kernels.h): its element i, its one
 * element, its element i % row. */
static int in_kind(const graft__tview *in, const graft__tview *out) {
  if (in->numel == out->numel) return GRAFT__FUSED_IN_FULL;
  if (in->numel == 1) return GRAFT__FUSED_IN_SCALAR;
  return graft__is_row_of(in, out) ? GRAFT__FUSED_IN_ROW : -1;
}

/* Which CANON members must write C's NAN: the root, and those read by a
 * member that is not BLIND.  Where every reader is BLIND, a NaN there
 * leaves each reader's result what the kernels give (a NaN made C's NAN
 * by a CANON reader, or a comparison's 0), so the code need not spend a
 * compare and a blend on it: Adam written as ops keeps 3 of its 13. */
static void canon_needed(group *g) {
  const graft__fused *f = g->f;
  const int nm = f->n_members;
  for (int m = 0; m < nm; m++)
    g->canon[m] = (rules[f->m[m].node->op]->flags & CANON) && m == nm - 1;
  for (int q = 0; q < nm; q++) {
    const graft__node *nd = f->m[q].node;
    if (rules[nd->op]->flags & BLIND) continue;
    for (int j = 0; j < nd->n_in; j++) {
      int ref = f->m[q].ref[j];
      if (ref < 0 && (rules[f->m[-1 - ref].node->op]->flags & CANON)) g->canon[-1 - ref] = 1;
    }
  }
  for (int m = 0; m < nm; m++)
    if (g->canon[m]) g->consts |= NEEDS(K_NAN);
}

/* Can f compile for these views, and the facts the code needs. */
static int analyse(group *g, const graft__fused *f, const graft__tview *const *in, int n_in) {
  const int nm = f->n_members;
  const graft_dtype dt = nm >= 1 ? f->m[nm - 1].dtype : GRAFT_I32;
  /* the elements the group runs over */
  const graft__tview shape = {NULL, f->numel, dt, f->rank, f->dims}, *out = &shape;
  g->f = f;
  g->n_in = n_in;
  g->n_out = f->n_dst ? f->n_dst : 1;
  g->consts = 0;
  g->f64 = out->dtype == GRAFT_F64;
  if (out->dtype != GRAFT_F32 && out->dtype != GRAFT_F64) return 0;
  if (out->numel < 1 || n_in > GRAFT__FUSED_MAX_IN || nm < 2 || nm > GRAFT__FUSED_MAX_MEMBERS)
    return 0;
  int n_based = 0;
  g->row = 0;
  for (int j = 0; j < n_in; j++) {
    int k = g->kind[j] = in_kind(in[j], out);
    if (in[j]->dtype != out->dtype || k < 0) return 0;
    /* rows of one length, whole vectors of it (a vector then never
     * straddles the row's end) */
    if (k == GRAFT__FUSED_IN_ROW && ((g->row && g->row != in[j]->numel) ||
                                     in[j]->numel * (int64_t)graft_dtype_size(out->dtype) % VEC_BYTES))
      return 0;
    if (k == GRAFT__FUSED_IN_ROW) g->row = in[j]->numel;
    n_based += k != GRAFT__FUSED_IN_SCALAR;
    g->last_in[j] = -1;
  }
  if (n_based + g->n_out > (int)GRAFT__COUNT(base_regs)) return 0;
  for (int m = 0; m < nm; m++) {
    const graft__fused_member *fm = &f->m[m];
    const graft__node *nd = fm->node;
    const jit_op *r = rules[nd->op];
    if (!r || fm->dtype != out->dtype || nd->n_in < 1 || nd->n_in > 3 ||
        nd->n_in != graft__ops[nd->op].arity)
      return 0;
    g->consts |= r->consts;
    g->last_m[m] = m;
    for (int j = 0; j < nd->n_in; j++) {
      int ref = fm->ref[j];
      if (ref >= n_in || -1 - ref >= m) return 0;
      if (ref >= 0 && g->kind[ref] != GRAFT__FUSED_IN_SCALAR) g->last_in[ref] = m;
      if (ref < 0) g->last_m[-1 - ref] = m;
    }
  }
  canon_needed(g);
  return 1;
}

/* One pass of the loop's body over the registers' width (c->f). */
static void body(jit_ctx *c, const group *g, uint32_t fixed) {
  const graft__fused *f = g->f;
  int in_reg[GRAFT__FUSED_MAX_IN], m_reg[GRAFT__FUSED_MAX_MEMBERS];
  c->busy = fixed;
  for (int j = 0; j < g->n_in; j++) in_reg[j] = -1;
  for (int m = 0; m < f->n_members && !c->failed; m++) {
    const graft__node *nd = f->m[m].node;
    int s[3] = {0, 0, 0};
    for (int j = 0; j < nd->n_in; j++) {
      int ref = f->m[m].ref[j];
      if (ref < 0) {
        s[j] = m_reg[-1 - ref];
      } else if (g->kind[ref] == GRAFT__FUSED_IN_SCALAR) {
        s[j] = g->sreg[ref];
      } else {
        if (in_reg[ref] < 0) {
          in_reg[ref] = take(c);
          graft__asm_load(c->a, c->f, in_reg[ref], g->base[ref],
                          g->kind[ref] == GRAFT__FUSED_IN_ROW ? GRAFT__RCX : GRAFT__RAX);
        }
        s[j] = in_reg[ref];
      }
    }
    int d = m_reg[m] = take(c);
    if (c->failed) break;
    rules[nd->op]->emit(c, d, s);
    if (g->canon[m]) canon(c, d);
    for (int j = 0; j < nd->n_in; j++) {
      int ref = f->m[m].ref[j];
      if (ref < 0 && g->last_m[-1 - ref] == m) give(c, m_reg[-1 - ref]);
      if (ref >= 0 && g->kind[ref] != GRAFT__FUSED_IN_SCALAR && g->last_in[ref] == m)
        give(c, in_reg[ref]);
    }
    if (f->m[m].dst >= 0) graft__asm_store(c->a, c->f, d, g->base[g->n_in + f->m[m].dst], GRAFT__RAX);
    else if (m == f->n_members - 1) graft__asm_store(c->a, c->f, d, g->base[g->n_in], GRAFT__RAX);
    if (g->last_m[m] == m) give(c, d);
  }
}

/* while (rax < end [&& rax not a whole vector's]) { body; rax += step;
 * rcx += step, back to 0 at the row's end } */
static void loop(jit_ctx *c, const group *g, uint32_t fixed, int end, int step, int to_aligned) {
  graft__asm *a = c->a;
  const int64_t row_bytes = g->row * (g->f64 ? 8 : 4);
  size_t top = a->len;
  graft__asm_cmp_reg(a, GRAFT__RAX, end);
  size_t out = graft__asm_jump(a, GRAFT__JGE), out2 = 0;
  if (to_aligned) {
    graft__asm_test_al(a, VEC_BYTES - 1);
    out2 = graft__asm_jump(a, GRAFT__JE);
  }
  body(c, g, fixed);
  graft__asm_add_imm(a, GRAFT__RAX, step);
  if (g->row) {
    graft__asm_add_imm(a, GRAFT__RCX, step);
    graft__asm_cmp_imm(a, GRAFT__RCX, (int32_t)row_bytes);
    size_t skip = graft__asm_jump(a, GRAFT__JNE);
    graft__asm_zero(a, GRAFT__RCX);
    graft__asm_patch(a, skip);
  }
  graft__asm_jump_back(a, top);
  graft__asm_patch(a, out);
  if (to_aligned) graft__asm_patch(a, out2);
}

/* The loop: void code(const void *const *ptrs, int64_t begin, int64_t end,
 * int64_t row0), ptrs the inputs' data then the output's, row0 = begin %
 * row.  With a row input, one element at a time until begin is a whole
 * vector's (then so is its place in the row: rows are whole vectors), 8
 * floats (4 doubles) at a time, then one at a time. */
static int emit(graft__asm *a, const group *gc) {
  group g = *gc;
  const int f64 = g.f64;
  const int es = f64 ? 8 : 4;
  jit_ctx c = {.a = a, .f = {1, f64}};
  uint32_t fixed = 0;
  for (int k = 0; k < N_CONSTS; k++) {
    c.konst[k] = -1;
    if (g.consts & NEEDS(k)) fixed |= 1u << (c.konst[k] = take(&c));
  }
  for (int j = 0; j < g.n_in; j++)
    if (g.kind[j] == GRAFT__FUSED_IN_SCALAR) fixed |= 1u << (g.sreg[j] = take(&c));
  if (g.row && (int64_t)(int32_t)(g.row * es) != g.row * es) return 0;
  if (c.failed) return 0;

  for (size_t i = 0; i < GRAFT__COUNT(saved_regs); i++) graft__asm_push(a, saved_regs[i]);
  graft__asm_mov(a, GRAFT__RAX, GRAFT__RSI);
  graft__asm_shl(a, GRAFT__RAX, f64 ? 3 : 2);
  graft__asm_shl(a, GRAFT__RDX, f64 ? 3 : 2);
  if (g.row) graft__asm_shl(a, GRAFT__RCX, f64 ? 3 : 2);
  graft__asm_mov(a, GRAFT__R13, GRAFT__RDX);
  graft__asm_add_imm(a, GRAFT__R13, es - VEC_BYTES);
  for (int k = 0; k < N_CONSTS; k++) {
    if (c.konst[k] < 0) continue;
    graft__asm_mov_imm64(a, GRAFT__RSI, f64 ? (uint64_t)(uintptr_t)&k_f64[k] : (uint64_t)(uintptr_t)&k_f32[k]);
    graft__asm_broadcast(a, f64, c.konst[k], GRAFT__RSI);
  }
  for (int j = 0; j < g.n_in; j++) {
    if (g.kind[j] != GRAFT__FUSED_IN_SCALAR) continue;
    graft__asm_mov_load(a, GRAFT__RSI, GRAFT__RDI, 8 * j);
    graft__asm_broadcast(a, f64, g.sreg[j], GRAFT__RSI);
  }
  int nb = 0;
  for (int j = 0; j < g.n_in + g.n_out; j++) {
    if (j < g.n_in && g.kind[j] == GRAFT__FUSED_IN_SCALAR) continue;
    g.base[j] = base_regs[nb++];
  }
  /* rdi (the list) is the last base taken, so it is overwritten last */
  for (int j = 0; j < g.n_in + g.n_out; j++)
    if (!(j < g.n_in && g.kind[j] == GRAFT__FUSED_IN_SCALAR))
      graft__asm_mov_load(a, g.base[j], GRAFT__RDI, 8 * j);

  if (g.row) {
    c.f.vec = 0;
    loop(&c, &g, fixed, GRAFT__RDX, es, 1);
    c.f.vec = 1;
  }
  loop(&c, &g, fixed, GRAFT__R13, VEC_BYTES, 0); /* 8 floats (4 doubles) a turn */
  c.f.vec = 0;
  loop(&c, &g, fixed, GRAFT__RDX, es, 0);        /* then one a turn */
  for (size_t i = GRAFT__COUNT(saved_regs); i-- > 0;) graft__asm_pop(a, saved_regs[i]);
  graft__asm_vzeroupper(a);
  graft__asm_ret(a);
  return !c.failed && !a->failed;
}

int graft__fused_refuse_pages;

void *graft__fused_compile(graft__fused *const *groups, const graft__fused_io *io, int n,
                           size_t *len) {
  graft__asm a = {0};
  size_t at[64];
  size_t *pos = n <= 64 ? at : graft__malloc((size_t)n * sizeof *pos);
  void *mem = NULL;
  *len = 0;
  if (!pos || !graft__jit_supported()) goto out;
  for (int k = 0; k < n; k++) {
    group g;
    pos[k] = SIZE_MAX;
    if (!groups[k]->n_members || !analyse(&g, groups[k], io[k].in, io[k].n_in)) continue;
    size_t start = (a.len + 15) / 16 * 16;
    while (a.len < start && !a.failed) graft__asm_ret(&a); /* padding, never run */
    if (emit(&a, &g)) pos[k] = start;
    else if (!a.failed) a.len = start; /* out of registers: drop it */
    if (a.failed) goto out;
  }
  if (a.len == 0 || graft__fused_refuse_pages || !(mem = graft__jit_map(a.b, a.len))) goto out;
  *len = a.len;
  for (int k = 0; k < n; k++) {
    graft__fused *f = groups[k];
    f->code = NULL;
    if (pos[k] == SIZE_MAX) continue;
    /* (POSIX: code and data pointers have one representation) */
    void *entry = (uint8_t *)mem + pos[k];
    memcpy(&f->code, &entry, sizeof f->code);
    const graft__tview shape = {NULL, f->numel, f->m[f->n_members - 1].dtype, f->rank, f->dims};
    f->code_dtype = shape.dtype;
    f->code_row = 0;
    for (int j = 0; j < io[k].n_in; j++) {
      f->code_kind[j] = (uint8_t)in_kind(io[k].in[j], &shape);
      if (f->code_kind[j] == GRAFT__FUSED_IN_ROW) f->code_row = io[k].in[j]->numel;
    }
    f->code_n_in = io[k].n_in;
  }
out:
  if (pos != at) graft__free(pos);
  graft__asm_free(&a);
  return mem;
}

void graft__fused_release(void *mem, size_t len) { graft__jit_unmap(mem, len); }

int graft__fused_can_compile(void) { return graft__jit_supported(); }
