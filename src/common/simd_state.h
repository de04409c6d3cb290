/* graft internal: leave the x86 vector registers' upper halves clean.
 *
 * Code built for AVX (glibc's memset and memcpy, OpenBLAS's kernels, the
 * AVX2 clones of graft's own kernels) can return with the upper bits of the
 * vector registers marked in use.  glibc's EVEX memset, which OpenBLAS calls
 * to clear a GEMM's output when beta is 0, writes zmm16..31 and issues no
 * VZEROUPPER.  SSE code that runs next (graft's kernels built for the base
 * x86-64, which call libm's AVX exp and log) then pays a state transition on
 * every switch between the two encodings: on the machine this was found on,
 * exp took 110 ns a call instead of 4.4, and one softmax of a 32 x 10 batch
 * 88 us instead of 4.  VZEROUPPER marks the upper halves clean again, for
 * about a cycle; the tile runner issues it after every kernel
 * (graft__exec_tile), and a call's entry before the first (the caller's own
 * AVX code).
 *
 * VZEROUPPER is an AVX instruction, so it runs only where the CPU has AVX
 * (where it does not, nothing can have dirtied the upper halves). */
#ifndef GRAFT_SIMD_STATE_H
#define GRAFT_SIMD_STATE_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static inline void graft__simd_clean_upper(void) {
  if (__builtin_cpu_supports("avx")) __asm__ volatile("vzeroupper" ::: "memory");
}
#else
static inline void graft__simd_clean_upper(void) {}
#endif

#endif
