/* The byte reader every fuzz target decodes its input with.
 *
 * A fuzz input is a stream of choices.  Each read takes the next byte (or
 * eight); past the end every read gives 0, so a short input is a valid
 * program whose remaining choices are the defaults, and the decoders make 0
 * the ordinary, valid choice wherever they can (short seeds, and libFuzzer
 * truncations stay meaningful).
 *
 * Header-only (static inline). */
#ifndef GRAFT_FUZZ_READER_H
#define GRAFT_FUZZ_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct fz_reader {
  const uint8_t *p;
  size_t n, pos;
} fz_reader;

static inline unsigned fz_u8(fz_reader *r) { return r->pos < r->n ? r->p[r->pos++] : 0u; }

/* A choice among n (1..256) alternatives. */
static inline unsigned fz_pick(fz_reader *r, unsigned n) { return fz_u8(r) % n; }

/* lo + a choice in [0, hi - lo]. */
static inline int fz_range(fz_reader *r, int lo, int hi) {
  return lo + (int)fz_pick(r, (unsigned)(hi - lo + 1));
}

/* Eight bytes, little-endian. */
static inline uint64_t fz_u64(fz_reader *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)fz_u8(r) << (8 * i);
  return v;
}

static inline int fz_eof(const fz_reader *r) { return r->pos >= r->n; }

/* splitmix64: expands a seed from the input into data. */
static inline uint64_t fz_mix(uint64_t *s) {
  uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

#endif /* GRAFT_FUZZ_READER_H */
