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

#include "kernels/kernels_int.h"

#ifdef GRAFT_HAVE_OPENBLAS
/* Declared here because a non-OpenBLAS cblas.h lacks them; the meson check
 * that defines GRAFT_HAVE_OPENBLAS found them in the library. */
int openblas_get_parallel(void);
void openblas_set_num_threads(int num_threads);

enum { VARIANT_SEQUENTIAL = 0, VARIANT_PTHREADS = 1, VARIANT_OPENMP = 2 };
#endif

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
/* Written only inside pthread_once, which orders it before every reader. */
static int blas_variant = -1;

static void blas_setup(void) {
#ifdef GRAFT_HAVE_OPENBLAS
  blas_variant = openblas_get_parallel();
  if (blas_variant == VARIANT_PTHREADS)
    openblas_set_num_threads(1);
#endif
}

void graft__blas_init(void) {
  pthread_once(&blas_once, blas_setup);
}

int graft__blas_variant(void) {
  graft__blas_init();
  return blas_variant;
}
