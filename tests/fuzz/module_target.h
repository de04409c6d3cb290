/* The encoding of the `module` fuzz target's inputs, shared by the decoder
 * (module_target.c) and the seed writer (module_seeds.c).  An input is a
 * stream of ops: an op byte (mod MT_OP_COUNT), then its operands, in the
 * order module_target.c's header comment lists them. */
#ifndef GRAFT_FUZZ_MODULE_TARGET_H
#define GRAFT_FUZZ_MODULE_TARGET_H

enum {
  MT_OP_CREATE,
  MT_OP_ATTACH,
  MT_OP_VAR,
  MT_OP_VAR_DESTROY,
  MT_OP_DESTROY,
  MT_OP_WALKS,
  MT_OP_FLATTEN,
  MT_OP_PRINT,
  MT_OP_OPTIM,
  MT_OP_SAVE_LOAD,
  MT_OP_SET,
  MT_OP_ARM,
  MT_OP_DEFERRED,
  MT_OP_DEFERRED_CALL,
  MT_OP_COUNT
};

/* Ops decoded from one input, at most. */
#define MT_MAX_OPS 64
/* Variables of one optimizer or deferred module, at most. */
#define MT_MAX_OPT_VARS 4

/* Name bytes: below 200 (and from 210) a dictionary name (index mod its
 * size: "w", "b", "enc", "dec", "layer", "x", "layers", "step", "lr", "m",
 * "w_1", "_", "head", "v"); these give bad or odd names. */
enum {
  MT_NAME_EMPTY = 200,
  MT_NAME_DIGIT,   /* "9lives" */
  MT_NAME_LONG64,  /* 64 characters */
  MT_NAME_LONG63,  /* 63: the longest valid name */
  MT_NAME_UTF8,    /* "café" */
  MT_NAME_DOT,     /* "a.b" */
  MT_NAME_SLOT,    /* "l[0]" */
  MT_NAME_NULL,
  MT_NAME_SPACE,   /* "a b" */
  MT_NAME_STREAM   /* a length byte (mod 72), then that many bytes */
};

/* Attribute bytes: below 128 a dictionary name; 128 to 191 a list slot
 * ("w", "layers", "blocks" by the byte mod 3; the next byte picks the
 * index among 0 1 2 3 7 10 INT_MAX); from MT_ATTR_BAD a bad attribute
 * (module_target.c's list); and: */
#define MT_ATTR_BAD 192
#define MT_ATTR_LONG 220  /* a 64-character name */
#define MT_ATTR_TAKEN 221 /* the next byte picks one the parent holds */

/* Destroy the target's runtime (atexit). */
void mt_destroy_runtime(void);

#endif /* GRAFT_FUZZ_MODULE_TARGET_H */
