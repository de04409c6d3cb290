/* graft kernels: BLAS threading setup.
 *
 * graft calls gemm from its own worker threads, one task per tile, so the
 * BLAS must not start threads of its own.  A pthreads OpenBLAS would, and is
 * told to use one thread.  The OpenMP OpenBLAS already runs single-threaded
 * inside an active parallel region, and its openblas_set_num_threads changes
 * the caller's OpenMP thread count (Debian 0.3.21), so it is left alone; the
 * sequential build needs nothing.
 */
#include <pthread.h>
#include <stdio.h>
#include <strings.h>

#include "kernels/kernels_int.h"

#ifdef GRAFT_HAVE_OPENBLAS
/* Declared here because a non-OpenBLAS cblas.h lacks them; the meson check
 * that defines GRAFT_HAVE_OPENBLAS found them in the library. */
int openblas_get_parallel(void);
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

enum { VARIANT_SEQUENTIAL = 0, VARIANT_PTHREADS = 1, VARIANT_OPENMP = 2 };
#endif

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
/* Written only inside pthread_once, which orders it before every reader. */
static int blas_variant = -1;
static char blas_core[32];

static void blas_setup(void) {
#ifdef GRAFT_HAVE_OPENBLAS
  blas_variant = openblas_get_parallel();
  if (blas_variant == VARIANT_PTHREADS)
    openblas_set_num_threads(1);
  const char *core = openblas_get_corename();
  snprintf(blas_core, sizeof blas_core, "%s", core ? core : "");
#endif
}

void graft__blas_init(void) {
  pthread_once(&blas_once, blas_setup);
}

int graft__blas_variant(void) {
  graft__blas_init();
  return blas_variant;
}

const char *graft__blas_core(void) {
  graft__blas_init();
  return blas_core[0] ? blas_core : NULL;
}

/* OpenBLAS's kernel families for x86 cores older than AVX2 (a DYNAMIC_ARCH
 * build falls back to one of these on a core it does not know: 0.3.21
 * takes an Emerald Rapids for a Prescott). */
static const char *const PRE_AVX2[] = {"prescott", "core2",  "penryn",    "dunnington",
                                       "nehalem",  "atom",   "sandybridge", "katmai",
                                       "coppermine", "northwood", "banias", "opteron",
                                       "barcelona", "bobcat", "bulldozer", "piledriver",
                                       "steamroller", "excavator", "nano"};

const char *graft__blas_core_hint(const char *core, int avx2, int avx512) {
  if (!core || !avx2) return NULL;
  for (size_t i = 0; i < sizeof PRE_AVX2 / sizeof PRE_AVX2[0]; i++)
    if (strcasecmp(core, PRE_AVX2[i]) == 0) return avx512 ? "SkylakeX" : "Haswell";
  return NULL;
}

const char *graft__blas_hint(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  return graft__blas_core_hint(graft__blas_core(), __builtin_cpu_supports("avx2") != 0,
                               __builtin_cpu_supports("avx512f") != 0);
#else
  return NULL;
#endif
}
