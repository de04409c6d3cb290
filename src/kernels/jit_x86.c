/* x86-64 instruction encoding for fused_jit.c, and executable pages.
 *
 * Encodings from the Intel SDM, volume 2: a VEX instruction is C4, then
 * R X B (inverted) and the opcode map, then W, the first source (inverted),
 * L (256 bits) and the implied prefix, then the opcode and ModRM. */
#include "kernels/jit_x86.h"

#include <string.h>

#include "common/common.h"

#if defined(__x86_64__) && defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#define JIT_X86 1
#endif

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define JIT_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define JIT_TSAN 1
#endif

void graft__asm_free(graft__asm *a) {
  graft__free(a->b);
  *a = (graft__asm){0};
}

static void put(graft__asm *a, const uint8_t *p, size_t n) {
  if (a->failed) return;
  if (a->len + n > a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 1024;
    while (cap < a->len + n) cap *= 2;
    uint8_t *b = graft__realloc(a->b, a->cap, cap);
    if (!b) {
      a->failed = 1;
      return;
    }
    a->b = b;
    a->cap = cap;
  }
  memcpy(a->b + a->len, p, n);
  a->len += n;
}

static void byte(graft__asm *a, unsigned v) {
  uint8_t b = (uint8_t)v;
  put(a, &b, 1);
}

static void u32(graft__asm *a, uint32_t v) {
  uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  put(a, b, 4);
}

/* ---- VEX ------------------------------------------------------------------ */

enum { MAP_0F = 1, MAP_0F38 = 2, MAP_0F3A = 3 };
enum { PP_NONE = 0, PP_66 = 1, PP_F3 = 2, PP_F2 = 3 };

/* The prefix: reg the ModRM reg field's register, vvvv the first source
 * (0 when unused: encoded 1111), x and b the high bits of the SIB index and
 * of the ModRM rm / SIB base. */
static void vex(graft__asm *a, int map, int l, int pp, int reg, int vvvv, int x, int b) {
  byte(a, 0xC4);
  byte(a, (reg & 8 ? 0 : 0x80) | (x & 8 ? 0 : 0x40) | (b & 8 ? 0 : 0x20) | map);
  byte(a, ((~vvvv & 15) << 3) | (l << 2) | pp);
}

/* op reg, vvvv, rm (registers). */
static void vex_rr(graft__asm *a, int map, int l, int pp, int op, int reg, int vvvv, int rm) {
  vex(a, map, l, pp, reg, vvvv, 0, rm);
  byte(a, op);
  byte(a, 0xC0 | (reg & 7) << 3 | (rm & 7));
}

/* op reg, [base + index] */
static void vex_indexed(graft__asm *a, int l, int pp, int op, int reg, int base, int index) {
  vex(a, MAP_0F, l, pp, reg, 0, index, base);
  byte(a, op);
  byte(a, (reg & 7) << 3 | 4);              /* mod 00, rm 100: a SIB follows */
  byte(a, (index & 7) << 3 | (base & 7));   /* scale 1 */
}

static int arith_pp(graft__asm_form f) {
  return f.vec ? (f.f64 ? PP_66 : PP_NONE) : (f.f64 ? PP_F2 : PP_F3);
}

void graft__asm_arith(graft__asm *a, graft__asm_form f, int op, int d, int s1, int s2) {
  /* packed sqrt has no first source */
  vex_rr(a, MAP_0F, f.vec, arith_pp(f), op, d, op == 0x51 && f.vec ? 0 : s1, s2);
}

void graft__asm_cmp(graft__asm *a, graft__asm_form f, int pred, int d, int s1, int s2) {
  vex_rr(a, MAP_0F, f.vec, arith_pp(f), 0xC2, d, s1, s2);
  byte(a, pred);
}

void graft__asm_logic(graft__asm *a, graft__asm_form f, int op, int d, int s1, int s2) {
  vex_rr(a, MAP_0F, f.vec, f.f64 ? PP_66 : PP_NONE, op, d, s1, s2);
}

void graft__asm_blend(graft__asm *a, graft__asm_form f, int d, int if_false, int if_true, int mask) {
  /* vblendvps / vblendvpd: the mask register in the immediate's high bits */
  vex_rr(a, MAP_0F3A, f.vec, PP_66, f.f64 ? 0x4B : 0x4A, d, if_false, if_true);
  byte(a, (unsigned)mask << 4);
}

void graft__asm_move(graft__asm *a, graft__asm_form f, int d, int s) {
  vex_rr(a, MAP_0F, f.vec, PP_NONE, 0x28, d, 0, s); /* vmovaps */
}

void graft__asm_load(graft__asm *a, graft__asm_form f, int d, int base, int index) {
  /* vmovups ymm / vmovss, vmovsd xmm */
  vex_indexed(a, f.vec, f.vec ? PP_NONE : arith_pp(f), 0x10, d, base, index);
}

void graft__asm_store(graft__asm *a, graft__asm_form f, int s, int base, int index) {
  vex_indexed(a, f.vec, f.vec ? PP_NONE : arith_pp(f), 0x11, s, base, index);
}

void graft__asm_broadcast(graft__asm *a, int f64, int d, int base) {
  /* base neither rsp/r12 (would need a SIB) nor rbp/r13 (a displacement) */
  vex(a, MAP_0F38, 1, PP_66, d, 0, 0, base);
  byte(a, f64 ? 0x19 : 0x18);
  byte(a, (d & 7) << 3 | (base & 7));
}

/* ---- integer instructions --------------------------------------------------- */

static void rex(graft__asm *a, int w, int reg, int rm) {
  unsigned v = 0x40 | (w ? 8 : 0) | (reg & 8 ? 4 : 0) | (rm & 8 ? 1 : 0);
  if (v != 0x40) byte(a, v);
}

void graft__asm_push(graft__asm *a, int r) {
  rex(a, 0, 0, r);
  byte(a, 0x50 + (r & 7));
}

void graft__asm_pop(graft__asm *a, int r) {
  rex(a, 0, 0, r);
  byte(a, 0x58 + (r & 7));
}

void graft__asm_mov_load(graft__asm *a, int d, int base, int32_t disp) {
  rex(a, 1, d, base);
  byte(a, 0x8B);
  byte(a, 0x80 | (d & 7) << 3 | (base & 7)); /* mod 10: disp32 */
  u32(a, (uint32_t)disp);
}

void graft__asm_mov_imm64(graft__asm *a, int d, uint64_t v) {
  rex(a, 1, 0, d);
  byte(a, 0xB8 + (d & 7));
  u32(a, (uint32_t)v);
  u32(a, (uint32_t)(v >> 32));
}

/* op r/m64 = d, r64 = s (register to register). */
static void alu_rr(graft__asm *a, int w, unsigned op, int d, int s) {
  rex(a, w, s, d);
  byte(a, op);
  byte(a, 0xC0 | (s & 7) << 3 | (d & 7));
}

/* op r/m64, imm32 (opcode 81, ext the ModRM reg field's /digit). */
static void alu_ri(graft__asm *a, int ext, int r, int32_t v) {
  rex(a, 1, 0, r);
  byte(a, 0x81);
  byte(a, 0xC0 | ext << 3 | (r & 7));
  u32(a, (uint32_t)v);
}

void graft__asm_mov(graft__asm *a, int d, int s) { alu_rr(a, 1, 0x89, d, s); }

void graft__asm_shl(graft__asm *a, int r, int bits) {
  rex(a, 1, 0, r);
  byte(a, 0xC1);
  byte(a, 0xE0 | (r & 7));
  byte(a, bits);
}

void graft__asm_add_imm(graft__asm *a, int r, int32_t v) { alu_ri(a, 0, r, v); }

/* xor r32, r32 (clears the upper half too) */
void graft__asm_zero(graft__asm *a, int r) { alu_rr(a, 0, 0x31, r, r); }

void graft__asm_cmp_reg(graft__asm *a, int d, int s) { alu_rr(a, 1, 0x39, d, s); }

void graft__asm_cmp_imm(graft__asm *a, int r, int32_t v) { alu_ri(a, 7, r, v); }

void graft__asm_test_al(graft__asm *a, uint8_t v) {
  byte(a, 0xA8);
  byte(a, v);
}

size_t graft__asm_jump(graft__asm *a, int cc) {
  if (cc != GRAFT__JMP) {
    byte(a, 0x0F);
    byte(a, (unsigned)cc);
  } else {
    byte(a, 0xE9);
  }
  size_t at = a->len;
  u32(a, 0);
  return at;
}

void graft__asm_patch(graft__asm *a, size_t at) {
  if (a->failed) return;
  uint32_t rel = (uint32_t)(int32_t)((int64_t)a->len - (int64_t)(at + 4));
  uint8_t b[4] = {(uint8_t)rel, (uint8_t)(rel >> 8), (uint8_t)(rel >> 16), (uint8_t)(rel >> 24)};
  memcpy(a->b + at, b, 4);
}

void graft__asm_jump_back(graft__asm *a, size_t to) {
  byte(a, 0xE9);
  u32(a, (uint32_t)(int32_t)((int64_t)to - (int64_t)(a->len + 4)));
}

void graft__asm_vzeroupper(graft__asm *a) {
  const uint8_t b[3] = {0xC5, 0xF8, 0x77};
  put(a, b, 3);
}

void graft__asm_ret(graft__asm *a) { byte(a, 0xC3); }

/* ---- executable pages ------------------------------------------------------ */

#if defined(JIT_X86) && !defined(JIT_TSAN) && defined(__GNUC__)
int graft__jit_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx");
}

static size_t page_round(size_t n) {
  long ps = sysconf(_SC_PAGESIZE);
  size_t p = ps > 0 ? (size_t)ps : 4096;
  return (n + p - 1) / p * p;
}

void *graft__jit_map(const uint8_t *code, size_t n) {
  if (n == 0) return NULL;
  size_t len = page_round(n);
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  memcpy(p, code, n);
  if (mprotect(p, len, PROT_READ | PROT_EXEC) != 0) {
    munmap(p, len);
    return NULL;
  }
  return p;
}

void graft__jit_unmap(void *p, size_t n) {
  if (p) munmap(p, page_round(n));
}
#else
int graft__jit_supported(void) { return 0; }

void *graft__jit_map(const uint8_t *code, size_t n) {
  (void)code;
  (void)n;
  return NULL;
}

void graft__jit_unmap(void *p, size_t n) {
  (void)p;
  (void)n;
}
#endif
