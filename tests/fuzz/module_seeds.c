/* Seed inputs of the `module` target, written by
 *   fuzz_replay_module --seeds tests/fuzz/corpus/module
 * (`make fuzz-seeds`): programs in the encoding of module_target.h that
 * reach each API of the target (names and numbering, attachments shared,
 * in lists and in cycles, variables good and bad, destroys in several
 * orders, walks and their misuse, flatten stopped by its visit, the
 * summary, each optimizer kind and bad options, checkpoint round trips and
 * loads into other trees, graft_variable_set, deferred modules and calls of
 * their values), and a program with an allocation failure armed before
 * each call.  Replaying the corpus with
 * --check verifies that they reach what module_target.c lists, so a seed
 * that drifted from the decoder shows. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "module_target.h"

typedef fz_seed seed;

/* Dictionary names (module_target.h). */
enum { N_W, N_B, N_ENC, N_DEC, N_LAYER, N_X, N_LAYERS, N_STEP, N_LR, N_M, N_W_1, N_UNDER, N_HEAD, N_V };

/* Operands: a live module or variable by its rank among the live ones in
 * slot order (lowest free slot first, so creation order while nothing was
 * freed); a parent or owner: ROOT or a live module. */
#define ROOT (-1)
#define NONE 255 /* a NULL handle */

static unsigned parent_byte(int p) { return p < 0 ? 0u : (unsigned)p + 1; }

static void create(seed *s, int parent, unsigned name) {
  fz_put(s, MT_OP_CREATE), fz_put(s, parent_byte(parent)), fz_put(s, name), fz_put(s, 0);
}

static void attach(seed *s, unsigned parent, unsigned attr, unsigned child) {
  fz_put(s, MT_OP_ATTACH), fz_put(s, parent), fz_put(s, attr), fz_put(s, child);
}

/* A list slot attribute: list 0 "layers", 1 "blocks", 2 "w"; index among
 * 0 1 2 3 7 10 INT_MAX. */
static void attach_slot(seed *s, unsigned parent, unsigned list, unsigned idx, unsigned child) {
  static const unsigned byte_of[3] = {129, 130, 128};
  fz_put(s, MT_OP_ATTACH), fz_put(s, parent), fz_put(s, byte_of[list]), fz_put(s, idx), fz_put(s, child);
}

/* dtype 0 f32, 1 f64, 2 i32, 3 and 4 bad; mode: module_target.c's dims
 * modes; flags bit 0 trainable. */
static void variable(seed *s, int owner, unsigned name, unsigned dt, unsigned rank, const unsigned *dims,
                     unsigned mode, unsigned flags, unsigned init) {
  fz_put(s, MT_OP_VAR), fz_put(s, parent_byte(owner)), fz_put(s, name), fz_put(s, dt), fz_put(s, rank);
  for (int i = 0; i < 4; i++) fz_put(s, dims && i < (int)rank ? dims[i] : 1);
  fz_put(s, mode), fz_put(s, flags), fz_put(s, init);
}

static void var_destroy(seed *s, unsigned v) { fz_put(s, MT_OP_VAR_DESTROY), fz_put(s, v); }
static void destroy(seed *s, unsigned m) { fz_put(s, MT_OP_DESTROY), fz_put(s, m); }
static void walks(seed *s, unsigned m, unsigned variant) { fz_put(s, MT_OP_WALKS), fz_put(s, m), fz_put(s, variant); }
static void flatten(seed *s, unsigned m, unsigned variant, unsigned status) {
  fz_put(s, MT_OP_FLATTEN), fz_put(s, m), fz_put(s, variant), fz_put(s, status);
}
static void print(seed *s, unsigned m, unsigned variant) { fz_put(s, MT_OP_PRINT), fz_put(s, m), fz_put(s, variant); }
static void arm(seed *s, unsigned k) { fz_put(s, MT_OP_ARM), fz_put(s, k); }
static void set(seed *s, unsigned v, unsigned mode, unsigned seed_byte) {
  fz_put(s, MT_OP_SET), fz_put(s, v), fz_put(s, mode), fz_put(s, seed_byte);
}

/* Option bytes (module_target.c decode_value): 0 the default / 0, 1 a
 * valid value, 2 1.0, 3 -0.5, 4 NaN, 5 inf, 6 1.5 or 2.0, 7 1e-3. */
typedef struct opt {
  unsigned kind, lr, lr_var /* NONE: none */, mom, b1, b2, eps, wd, clip, n, v[4], null_vars;
} opt;

static void optim(seed *s, int parent, unsigned name, const opt *o) {
  fz_put(s, MT_OP_OPTIM), fz_put(s, parent_byte(parent)), fz_put(s, name), fz_put(s, o->kind), fz_put(s, o->lr);
  if (o->lr_var == NONE) {
    fz_put(s, 0);
  } else {
    fz_put(s, 1);
    fz_put(s, o->lr_var);
  }
  fz_put(s, o->mom), fz_put(s, o->b1), fz_put(s, o->b2), fz_put(s, o->eps), fz_put(s, o->wd), fz_put(s, o->clip);
  fz_put(s, o->n);
  for (unsigned i = 0; i < o->n; i++) fz_put(s, o->v[i]);
  fz_put(s, o->null_vars);
}

/* mode 0 round trip, 2 strict into b, 3 non-strict into b; arm_load > 0:
 * the load's arm-th allocation fails. */
static void save_load(seed *s, unsigned a, unsigned b, unsigned mode, unsigned arm_load) {
  fz_put(s, MT_OP_SAVE_LOAD), fz_put(s, a), fz_put(s, b), fz_put(s, mode);
  fz_put(s, 3); /* scribble salt */
  if (arm_load) {
    fz_put(s, 1);
    fz_put(s, arm_load - 1);
  } else {
    fz_put(s, 0);
  }
}

/* variant: 1 derive NULL, 2 vars NULL, 3 n_vars -1, 4 out NULL. */
static void deferred(seed *s, int parent, unsigned name, unsigned n_params, unsigned variant, unsigned n,
                     const unsigned *v) {
  fz_put(s, MT_OP_DEFERRED), fz_put(s, parent_byte(parent)), fz_put(s, name), fz_put(s, n_params), fz_put(s, variant);
  fz_put(s, n);
  for (unsigned i = 0; i < n; i++) fz_put(s, v[i]);
}

/* d: the rank of a deferred module among the live deferred ones; mode 1:
 * variable v set between two calls. */
static void deferred_call(seed *s, unsigned d, unsigned mode, unsigned v) {
  fz_put(s, MT_OP_DEFERRED_CALL), fz_put(s, d), fz_put(s, mode), fz_put(s, v), fz_put(s, 9);
}

static void save_bad(seed *s, unsigned a, unsigned k) { fz_put(s, MT_OP_SAVE_LOAD), fz_put(s, a), fz_put(s, a), fz_put(s, 4), fz_put(s, k); }
static void load_bad(seed *s, unsigned a, unsigned k) { fz_put(s, MT_OP_SAVE_LOAD), fz_put(s, a), fz_put(s, a), fz_put(s, 5), fz_put(s, k); }

static const unsigned d23[] = {2, 3}, d3[] = {3}, d4[] = {4}, d221[] = {2, 2, 1}, d0[] = {0, 2};

/* model (0) with encoder (1), three layers numbered (2 3 4), variables in
 * them, and a module attached as a list in two places. */
static void prog_tree(seed *s) {
  create(s, ROOT, N_ENC);                          /* m0 enc */
  create(s, 0, N_LAYER);                           /* m1 enc/layer */
  create(s, 0, N_LAYER);                           /* m2 enc/layer_1 */
  create(s, 0, N_LAYER);                           /* m3 enc/layer_2 */
  variable(s, 1, N_W, 0, 2, d23, 0, 1, 7);         /* v0 enc/layer/w f32[2,3] trainable */
  variable(s, 1, N_B, 1, 1, d3, 0, 1, 9);          /* v1 enc/layer/b f64[3] */
  variable(s, 2, N_W, 2, 0, NULL, 0, 0, 5);        /* v2 enc/layer_1/w i32[] */
  variable(s, 3, N_X, 0, 2, d0, 0, 1, 0);          /* v3 enc/layer_2/x f32[0,2] */
  variable(s, 0, N_STEP, 1, 0, NULL, 0, 0, 0);     /* v4 enc/step */
  attach_slot(s, 0, 0, 0, 1);                      /* enc.layers[0] = layer */
  attach_slot(s, 0, 0, 1, 2);
  create(s, 0, N_LAYERS);                          /* "layers" is a list: layers_1 */
  walks(s, 0, 0);
  flatten(s, 0, 0, 0);
  print(s, 0, 0);
  save_load(s, 0, 0, 0, 0);
  walks(s, 1, 0);
}

/* Two roots share a module; cycles refused; destroys in turn. */
static void prog_shared(seed *s) {
  create(s, ROOT, N_ENC);                          /* m0 */
  create(s, ROOT, N_DEC);                          /* m1 */
  create(s, 0, N_HEAD);                            /* m2 enc/head */
  variable(s, 2, N_W, 0, 1, d4, 0, 1, 3);
  variable(s, 2, N_B, 0, 1, d4, 0, 0, 4);
  attach(s, 1, N_HEAD, 2);                         /* dec.head = enc/head */
  attach_slot(s, 1, 0, 3, 2);                      /* dec.layers[3] too */
  attach(s, 2, N_X, 0);                            /* cycle: head holds enc */
  attach(s, 2, N_X, 2);                            /* itself */
  attach(s, 1, N_HEAD, 0);                         /* taken */
  attach(s, 1, N_LAYERS, 0);                       /* a list's name as a plain attribute */
  walks(s, 1, 0);
  flatten(s, 1, 0, 0);
  print(s, 1, 0);
  save_load(s, 0, 1, 2, 0);                        /* enc's file into dec: other paths */
  save_load(s, 0, 1, 3, 0);
  destroy(s, 2);                                   /* not the caller's */
  destroy(s, 0);                                   /* enc goes, head stays (dec holds it) */
  walks(s, 0, 0);
  destroy(s, 0);                                   /* dec */
}

/* Bad names and attributes. */
static void prog_names(seed *s) {
  static const unsigned bad_names[] = {MT_NAME_EMPTY, MT_NAME_DIGIT, MT_NAME_LONG64, MT_NAME_UTF8,
                                       MT_NAME_DOT, MT_NAME_SLOT, MT_NAME_NULL, MT_NAME_SPACE};
  create(s, ROOT, N_M);
  create(s, ROOT, MT_NAME_LONG63);
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    create(s, ROOT, bad_names[i]);
    create(s, 0, bad_names[i]);
  }
  fz_put(s, MT_OP_CREATE), fz_put(s, 1), fz_put(s, MT_NAME_STREAM), fz_put(s, 5), fz_put(s, 'a'), fz_put(s, 0xff),
      fz_put(s, 'b'), fz_put(s, 'c'), fz_put(s, 'd'), fz_put(s, 0);
  fz_put(s, MT_OP_CREATE), fz_put(s, 0), fz_put(s, N_X), fz_put(s, 1); /* out NULL */
  create(s, 0, N_W);
  create(s, 0, N_W);
  create(s, 0, N_W_1);                             /* w_1 is taken: w_1_1 */
  create(s, 0, N_W);                               /* w_2 */
  for (unsigned b = MT_ATTR_BAD; b < MT_ATTR_BAD + 13; b++) attach(s, 0, b, 1);
  attach(s, 0, MT_ATTR_LONG, 1);
  fz_put(s, MT_OP_ATTACH), fz_put(s, 0), fz_put(s, MT_ATTR_TAKEN), fz_put(s, 1), fz_put(s, 1);
  attach_slot(s, 0, 2, 6, 1);                      /* w[INT_MAX]: w is a single entry */
  attach_slot(s, 0, 1, 6, 1);                      /* blocks[INT_MAX] */
  attach(s, NONE, N_X, 1);
  attach(s, 0, N_X, NONE);
  walks(s, 0, 0);
  flatten(s, 0, 0, 0);
}

/* Variables: every dtype, bad dtypes, ranks and shapes; free variables
 * destroyed; a module's variable refused; graft_variable_set. */
static void prog_vars(seed *s) {
  create(s, ROOT, N_M);
  variable(s, 0, N_W, 0, 3, d221, 0, 1, 11);
  variable(s, 0, N_W, 0, 1, d4, 0, 1, 0);          /* taken */
  variable(s, 0, N_LAYERS, 1, 1, d4, 0, 0, 0);
  variable(s, 0, MT_NAME_DIGIT, 1, 1, d4, 0, 0, 0);
  variable(s, 0, N_B, 3, 1, d4, 0, 0, 0);          /* dtype 3 */
  variable(s, 0, N_B, 4, 1, d4, 0, 0, 0);          /* dtype -1 */
  variable(s, 0, N_B, 0, 5, d4, 0, 0, 0);          /* rank 9 */
  variable(s, 0, N_B, 0, 6, d4, 0, 0, 0);          /* rank -1 */
  variable(s, 0, N_B, 0, 2, d23, 1, 0, 0);         /* a negative dim */
  variable(s, 0, N_B, 0, 1, d4, 2, 0, 0);          /* a count past int64 */
  variable(s, 0, N_B, 0, 1, d4, 3, 0, 0);          /* 2^40 elements */
  variable(s, 0, N_B, 0, 1, d4, 4, 0, 0);          /* empty, other dims overflow */
  variable(s, 0, MT_NAME_NULL, 0, 1, d4, 0, 0, 0);
  variable(s, ROOT, N_LR, 0, 0, NULL, 0, 0, 2);    /* v1 free */
  variable(s, ROOT, MT_NAME_SPACE, 2, 1, d3, 0, 0, 2); /* v2 free: any name */
  variable(s, ROOT, N_V, 1, 2, d23, 0, 0x81, 13);  /* v3 */
  set(s, 0, 0, 4);
  set(s, 1, 1, 4);
  set(s, 2, 2, 4);
  set(s, 3, 3, 4);
  set(s, 3, 4, 4);
  var_destroy(s, 0);                               /* a module's: refused */
  var_destroy(s, 1);
  var_destroy(s, NONE);
  walks(s, 0, 0);
  print(s, 0, 0);
  destroy(s, 0);
}

/* Walks: misuse of each, flatten stopped, summaries. */
static void prog_walks(seed *s) {
  create(s, ROOT, N_M);
  create(s, 0, N_ENC);
  variable(s, 0, N_W, 0, 1, d4, 0, 1, 1);
  variable(s, 1, N_W, 1, 1, d4, 0, 0, 1);
  for (unsigned which = 0; which < 3; which++)
    for (unsigned k = 1; k <= 4; k++) walks(s, 0, which << 4 | k);
  flatten(s, 0, 1, 1);
  flatten(s, 0, 1, 2);
  flatten(s, 0, 2, 0);
  flatten(s, 0, 2, 1);
  flatten(s, 0, 3, 0);
  flatten(s, 0, 4, 0);
  print(s, 0, 1);
  print(s, 0, 2);
  print(s, NONE, 0);
  print(s, 1, 0);
}

/* Optimizers of each kind over free and module variables, an lr variable,
 * bad options. */
static void prog_optim(seed *s, unsigned kind) {
  create(s, ROOT, N_M);                            /* m0 */
  variable(s, 0, N_W, 0, 2, d23, 0, 1, 1);         /* v0 m/w */
  variable(s, 0, N_B, 1, 1, d3, 0, 1, 2);          /* v1 m/b */
  variable(s, ROOT, N_LR, 0, 0, NULL, 0, 0, 3);    /* v2 lr (free) */
  variable(s, 0, N_X, 2, 1, d3, 0, 0, 0);          /* v3 i32 */
  opt o = {.kind = kind, .lr = 1, .lr_var = NONE, .n = 2, .v = {0, 1}};
  optim(s, ROOT, N_HEAD, &o);                      /* m1 head, its slot modules m2 m3 */
  walks(s, 1, 0);
  o.lr_var = 2;
  o.wd = 1, o.clip = 1, o.mom = 1, o.b1 = 1, o.b2 = 1, o.eps = 1;
  optim(s, 0, N_HEAD, &o);                         /* under m: m/head */
  flatten(s, 0, 0, 0);
  print(s, 0, 0);
  save_load(s, 0, 0, 0, 0);
  opt bad = o;
  bad.kind = 5;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.lr_var = NONE, bad.lr = 3;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.lr_var = NONE, bad.lr = 4;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.mom = 2;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.b2 = 2;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.eps = 3;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.wd = 3;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.clip = 4;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.v[1] = 0;                           /* repeated */
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.v[1] = 3;                           /* i32 */
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.n = 0;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.null_vars = 1;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.lr_var = 0;                         /* not rank 0 */
  optim(s, ROOT, N_HEAD, &bad);
  bad = o, bad.v[1] = NONE;
  optim(s, ROOT, N_HEAD, &bad);
  bad = o;
  optim(s, ROOT, MT_NAME_DIGIT, &bad);
  var_destroy(s, 2);                               /* lr: still tracked by the optimizers */
  destroy(s, 0);
}

/* Checkpoints: round trips, loads into trees of other shapes, strict and
 * not, bad paths. */
static void prog_checkpoint(seed *s) {
  create(s, ROOT, N_M);                            /* m0 */
  create(s, 0, N_ENC);                             /* m1 */
  variable(s, 1, N_W, 0, 2, d23, 0, 1, 1);
  variable(s, 0, N_B, 1, 1, d3, 0, 1, 2);
  create(s, ROOT, N_M);                            /* m2: the same paths */
  create(s, 2, N_ENC);                             /* m3 */
  variable(s, 3, N_W, 0, 2, d23, 0, 1, 5);
  variable(s, 2, N_B, 1, 1, d3, 0, 1, 6);
  create(s, ROOT, N_X);                            /* m4: other shapes */
  create(s, 4, N_ENC);                             /* m5 */
  variable(s, 5, N_W, 0, 1, d4, 0, 1, 5);
  variable(s, 4, N_B, 2, 1, d3, 0, 1, 6);
  attach(s, 0, N_DEC, 1);                          /* enc twice in m */
  save_load(s, 0, 0, 0, 0);
  save_load(s, 1, 3, 2, 0);                        /* enc into enc: the same paths */
  save_load(s, 1, 1, 0, 0);
  save_load(s, 0, 2, 2, 0);                        /* m into m: dec missing */
  save_load(s, 0, 2, 3, 0);                        /* non-strict */
  save_load(s, 0, 4, 2, 0);                        /* other dtypes and shapes */
  save_load(s, 0, 4, 3, 0);
  save_load(s, 1, 3, 2, 2);                        /* a failed allocation in the load */
  save_bad(s, 0, 0);
  save_bad(s, 0, 1);
  save_bad(s, 0, 2);
  save_bad(s, 0, 3);
  load_bad(s, 0, 0);
  load_bad(s, 0, 1);
  load_bad(s, 0, 2);
}

/* Deferred modules over module and caller variables, one deriving from
 * another, called with a variable set between calls; bad arguments; a
 * call after the module holding its variables was destroyed. */
static void prog_deferred(seed *s) {
  create(s, ROOT, N_M);                            /* m0 m */
  create(s, 0, N_ENC);                             /* m1 m/enc */
  variable(s, 0, N_W, 0, 2, d23, 0, 1, 1);         /* v0 m/w */
  variable(s, 1, N_W, 1, 1, d3, 0, 1, 2);          /* v1 m/enc/w */
  variable(s, ROOT, N_X, 2, 1, d3, 0, 0, 3);       /* v2 x (the caller's) */
  static const unsigned v01[] = {0, 1}, v2[] = {2}, v20[] = {2, 0}, v00[] = {0, 0}, none[] = {NONE};
  deferred(s, 0, N_HEAD, 2, 0, 2, v01);            /* m2 m/head: tracks w, w_1 */
  deferred(s, ROOT, N_DEC, 1, 0, 1, v2);           /* m3 dec: tracks x */
  attach(s, 3, N_HEAD, 2);                         /* dec derives from head too */
  deferred(s, 3, N_B, 3, 0, 2, v20);               /* m4 dec/b, under dec */
  walks(s, 3, 0);
  flatten(s, 3, 0, 0);
  print(s, 3, 0);
  deferred_call(s, 0, 1, 0);                       /* head, w set between calls */
  deferred_call(s, 1, 1, 2);                       /* dec */
  deferred_call(s, 2, 0, 0);
  save_load(s, 3, 3, 0, 0);
  deferred(s, ROOT, MT_NAME_DIGIT, 1, 0, 1, v2);
  deferred(s, ROOT, N_V, 0, 0, 1, v2);             /* n_params 0 */
  deferred(s, ROOT, N_V, 1, 1, 1, v2);             /* derive NULL */
  deferred(s, ROOT, N_V, 1, 2, 1, v2);             /* vars NULL */
  deferred(s, ROOT, N_V, 1, 3, 1, v2);             /* n_vars -1 */
  deferred(s, ROOT, N_V, 1, 4, 1, v2);             /* out NULL */
  deferred(s, ROOT, N_V, 1, 0, 2, v00);            /* repeated */
  deferred(s, ROOT, N_V, 1, 0, 1, none);           /* NULL variable */
  destroy(s, 0);                                   /* m: w and enc/w live on in head, destroyed */
  deferred_call(s, 0, 0, 0);                       /* GRAFT_EMISUSE */
  deferred(s, ROOT, N_V, 1, 0, 1, v01);            /* over a destroyed variable */
  /* tracked under "v9lives" and "var": names no attribute could be */
  variable(s, ROOT, MT_NAME_DIGIT, 0, 1, d4, 0, 1, 4);
  variable(s, ROOT, MT_NAME_EMPTY, 2, 0, NULL, 0, 0, 5);
  static const unsigned odd[] = {3, 4};
  deferred(s, ROOT, N_V, 2, 0, 2, odd);            /* v, in m's free slot: the first live */
  flatten(s, 0, 0, 0);
  deferred_call(s, 0, 1, 3);                       /* 9lives set between the calls */
}

/* A program with an allocation failure armed before each call, the
 * k-th allocation of it. */
static void prog_enomem(seed *s, unsigned k) {
  arm(s, k), create(s, ROOT, N_M);
  create(s, ROOT, N_M);
  arm(s, k), create(s, 0, N_ENC);
  arm(s, k), create(s, 0, N_ENC);
  arm(s, k), variable(s, 0, N_W, 0, 2, d23, 0, 1, 1);
  variable(s, 0, N_W, 0, 2, d23, 0, 1, 1);
  arm(s, k), variable(s, ROOT, N_LR, 0, 0, NULL, 0, 0, 3);
  variable(s, ROOT, N_LR, 0, 0, NULL, 0, 0, 3);
  arm(s, k), attach(s, 0, N_DEC, 1);
  arm(s, k), attach_slot(s, 0, 0, 2, 1);
  walks(s, 0, 0);
  arm(s, k), walks(s, 0, 0);
  arm(s, k), flatten(s, 0, 0, 0);
  arm(s, k), print(s, 0, 0);
  arm(s, k), save_load(s, 0, 0, 0, k);
  opt o = {.kind = 4 /* adamw */, .lr = 1, .lr_var = NONE, .n = 1, .v = {0}};
  arm(s, k), optim(s, ROOT, N_HEAD, &o);
  arm(s, k), optim(s, 0, N_HEAD, &o);
  arm(s, k), set(s, 0, 0, 1);
  static const unsigned v0[] = {0};
  arm(s, k), deferred(s, 0, N_B, 1, 0, 1, v0);
  deferred(s, 0, N_B, 1, 0, 1, v0);
  arm(s, k), deferred_call(s, 0, 1, 0);
}

int fz_target_seeds(const char *dir) {
  if (mkdir(dir, 0777) && errno != EEXIST) {
    perror(dir);
    return -1;
  }
  static const char *const kinds[] = {"sgd", "momentum", "nesterov", "adam", "adamw"};
  int rc = 0;
  seed s;
#define SEED(name, call) (memset(&s, 0, sizeof s), call, rc |= fz_write_seed(dir, name, s.b, s.n))
  SEED("tree", prog_tree(&s));
  SEED("shared", prog_shared(&s));
  SEED("names", prog_names(&s));
  SEED("variables", prog_vars(&s));
  SEED("walks", prog_walks(&s));
  SEED("checkpoint", prog_checkpoint(&s));
  SEED("deferred", prog_deferred(&s));
  for (unsigned k = 0; k < 5; k++) {
    char name[32];
    snprintf(name, sizeof name, "optim-%s", kinds[k]);
    SEED(name, prog_optim(&s, k));
  }
  for (unsigned k = 1; k <= 8; k++) {
    char name[32];
    snprintf(name, sizeof name, "enomem-%u", k);
    SEED(name, prog_enomem(&s, k - 1));
  }
#undef SEED
  return rc ? -1 : 0;
}
