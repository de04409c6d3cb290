/* graft internal: allocation hook, messages, small utilities shared by every
 * area.  Internal symbols are graft__<area>_* with hidden visibility. */
#ifndef GRAFT_COMMON_H
#define GRAFT_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "graft/alloc.h"
#include "graft/status.h"
#include "graft/tensor.h"

#define GRAFT__ALIGN 64
#define GRAFT__MSG_LEN 512

/* Every allocation of graft goes through these (see graft_set_allocator). */
void *graft__malloc(size_t size);
void *graft__calloc(size_t n, size_t size);
/* Aligned to align (power of two); free with graft__free. */
void *graft__aligned_alloc(size_t size, size_t align);
/* Like realloc; on failure returns NULL and keeps p. */
void *graft__realloc(void *p, size_t old_size, size_t new_size);
void graft__free(void *p);
char *graft__strdup(const char *s);

/* Grow *arr (elements of elem bytes, *cap of them) to hold at least need.
 * Returns GRAFT_OK or GRAFT_ENOMEM (arr unchanged). */
graft_status graft__grow(void **arr, int64_t *cap, int64_t need, size_t elem);

/* printf into buf of GRAFT__MSG_LEN (truncating). */
void graft__msgf(char *buf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void graft__vmsgf(char *buf, const char *fmt, va_list ap);

/* "[256,784]" (symbols as "s0", "s1"); writes at most len bytes. */
void graft__shape_str(char *buf, size_t len, int rank, const int64_t *dims);

/* Product of dims (1 for rank 0); -1 if a dim is negative or it overflows. */
int64_t graft__numel(int rank, const int64_t *dims);

double graft__now_us(void);

/* Bump arena for many small allocations freed together. */
typedef struct graft__arena {
  struct graft__arena_block *head;
} graft__arena;
void *graft__arena_alloc(graft__arena *a, size_t size);
void graft__arena_free(graft__arena *a);

#define GRAFT__MIN(a, b) ((a) < (b) ? (a) : (b))
#define GRAFT__MAX(a, b) ((a) > (b) ? (a) : (b))
#define GRAFT__COUNT(arr) (sizeof(arr) / sizeof((arr)[0]))

#endif /* GRAFT_COMMON_H */
