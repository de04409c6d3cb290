/* graft internal: the few x86-64 instructions fused_jit.c compiles a fused
 * group into, and the executable memory they run from.
 *
 * Only what a loop over elements needs: AVX arithmetic, compares and bit
 * operations on ymm registers (the packed forms, 8 floats or 4 doubles) or
 * on the low element of an xmm register (the scalar forms, for a loop's
 * last elements), loads and stores at [base + rax], and the integer
 * instructions of the loop around them.  Every VEX instruction takes the
 * three-byte prefix, which encodes all sixteen registers the same way. */
#ifndef GRAFT_JIT_X86_H
#define GRAFT_JIT_X86_H

#include <stddef.h>
#include <stdint.h>

/* General registers by their encoding number. */
enum {
  GRAFT__RAX = 0, GRAFT__RCX = 1, GRAFT__RDX = 2, GRAFT__RBX = 3, GRAFT__RSP = 4,
  GRAFT__RBP = 5, GRAFT__RSI = 6, GRAFT__RDI = 7, GRAFT__R8 = 8, GRAFT__R9 = 9,
  GRAFT__R10 = 10, GRAFT__R11 = 11, GRAFT__R12 = 12, GRAFT__R13 = 13, GRAFT__R14 = 14,
  GRAFT__R15 = 15
};

/* Operand forms of the floating-point instructions: packed over a whole
 * ymm register, or scalar (the low element of an xmm), of floats or
 * doubles. */
typedef struct graft__asm_form {
  int vec;    /* 1 packed ymm, 0 scalar */
  int f64;    /* 1 doubles, 0 floats */
} graft__asm_form;

/* A code buffer.  Emitting past its capacity grows it; a failed growth
 * sets failed and later emits do nothing. */
typedef struct graft__asm {
  uint8_t *b;
  size_t len, cap;
  int failed;
} graft__asm;

void graft__asm_free(graft__asm *a);

/* AVX arithmetic d = s1 OP s2 (opcode in the 0F map: 0x58 add, 0x59 mul,
 * 0x5C sub, 0x5D min, 0x5E div, 0x5F max), NaN rules of the instruction:
 * a NaN in s1 wins over one in s2; 0x51 sqrt of s2 (s1 then only gives a
 * scalar form's upper elements). */
void graft__asm_arith(graft__asm *a, graft__asm_form f, int op, int d, int s1, int s2);
/* d = compare(s1, s2) with predicate pred (0x00 EQ_OQ, 0x03 UNORD_Q,
 * 0x04 NEQ_UQ, 0x11 LT_OQ, 0x1E GT_OQ): all ones where it holds. */
void graft__asm_cmp(graft__asm *a, graft__asm_form f, int pred, int d, int s1, int s2);
/* Bit operations over the whole register (f's width): 0x54 and,
 * 0x55 andn (d = ~s1 & s2), 0x56 or, 0x57 xor. */
void graft__asm_logic(graft__asm *a, graft__asm_form f, int op, int d, int s1, int s2);
/* d = mask ? t : f, element by element (the mask's sign bits). */
void graft__asm_blend(graft__asm *a, graft__asm_form f, int d, int if_false, int if_true, int mask);
/* d = s (a register copy). */
void graft__asm_move(graft__asm *a, graft__asm_form f, int d, int s);
/* d = f's element(s) at [base + index]; [base + index] = s (base not
 * rbp or r13, index not rsp). */
void graft__asm_load(graft__asm *a, graft__asm_form f, int d, int base, int index);
void graft__asm_store(graft__asm *a, graft__asm_form f, int s, int base, int index);
/* d's every element = the element at [base] (vbroadcastss/sd). */
void graft__asm_broadcast(graft__asm *a, int f64, int d, int base);

/* Integer instructions. */
void graft__asm_push(graft__asm *a, int r);
void graft__asm_pop(graft__asm *a, int r);
/* d = [base + disp] (64 bits; base not rsp, r12) */
void graft__asm_mov_load(graft__asm *a, int d, int base, int32_t disp);
void graft__asm_mov_imm64(graft__asm *a, int d, uint64_t v);
void graft__asm_mov(graft__asm *a, int d, int s);
void graft__asm_shl(graft__asm *a, int r, int bits);
void graft__asm_add_imm(graft__asm *a, int r, int32_t v);
/* r = 0 */
void graft__asm_zero(graft__asm *a, int r);
/* Flags of d - s, of r - v (signed compare); of al & v. */
void graft__asm_cmp_reg(graft__asm *a, int d, int s);
void graft__asm_cmp_imm(graft__asm *a, int r, int32_t v);
void graft__asm_test_al(graft__asm *a, uint8_t v);
/* Jump conditions (the 0F 8x opcodes' low byte). */
enum { GRAFT__JMP = 0, GRAFT__JE = 0x84, GRAFT__JNE = 0x85, GRAFT__JGE = 0x8D };
/* A jump (cc one of the above) whose target is set later: its position,
 * for graft__asm_patch. */
size_t graft__asm_jump(graft__asm *a, int cc);
/* Points the jump at position at to the current end of the code. */
void graft__asm_patch(graft__asm *a, size_t at);
/* A jmp back to position to. */
void graft__asm_jump_back(graft__asm *a, size_t to);
void graft__asm_vzeroupper(graft__asm *a);
void graft__asm_ret(graft__asm *a);

/* 1 when this process may run what graft__asm emits: x86-64 Linux with
 * AVX (which the OS saves), and not a ThreadSanitizer build (TSan would
 * not see the code's reads and writes, so the interpreter runs there and
 * TSan keeps checking the tiles' accesses). */
int graft__jit_supported(void);

/* Copies n bytes of code to new pages that may run but not be written
 * (mapped writable, filled, then made executable).  NULL when the system
 * refuses (e.g. a policy against writable-then-executable pages); free
 * with graft__jit_unmap. */
void *graft__jit_map(const uint8_t *code, size_t n);
void graft__jit_unmap(void *p, size_t n);

#endif
