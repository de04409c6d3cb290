/* graft internal: the kernel interface (src/kernels -> src/graph only).
 *
 * A kernel computes the output of one node from concrete input views.  Work
 * is split in "units" (graft__kernel_units): output elements for elementwise
 * ops, shape ops and reductions; output columns over all batches (batches *
 * N = numel / M) for matmul, of each row block where the plan cuts rows
 * into blocks (its kargs.units counts them: kernels_int.h); rows for
 * softmax / log_softmax; one unit for
 * softmax_cross_entropy.  A kernel call computes exactly the units
 * [begin, end).  Different splits of the units need not give bitwise the
 * same result (matmul's BLAS calls do not): every executor runs a node as
 * the same fixed list of tiles (sched/tiles.c), so results are identical
 * across executors and thread counts.
 *
 * Each op has one reference kernel per dtype (dispatched inside the kernel
 * function); matmul f32/f64 calls single-threaded CBLAS.
 */
#ifndef GRAFT_KERNELS_H
#define GRAFT_KERNELS_H

#include <stdint.h>

#include "common/common.h"
#include "graph/graph.h"

/* A concrete tensor view: contiguous, row-major. */
typedef struct graft__tview {
  void *data;                  /* the fields every kernel reads come first */
  int64_t numel;
  graft_dtype dtype;
  int rank;
  /* rank dims, stored apart (a plan's shape store) so a view is 32 bytes:
   * executors stream one per node, and most kernels never read the dims */
  const int64_t *shape;
} graft__tview;

typedef struct graft__kargs {
  const graft__node *node;     /* op and attributes (node->fill, node->attr) */
  int n_in;
  /* For the executors (a plan's kargs are read once per node, so what the
   * hot path needs lives here): whole = 1 when the node runs as one tile
   * covering all its units, defer = 1 when the work-stealing executor
   * runs it only after critical work (sched/tiles.c), fn its kernel,
   * units its unit count, next the node's only successor when the node
   * is also that one's only predecessor (a chain link: it is ready as soon
   * as this node is done), else UINT32_MAX. */
  int16_t whole;
  int16_t defer;
  uint32_t next;
  const graft__tview *const *in; /* n_in input views; an optimizer step's
                                   (UPDATE) are followed by one view per
                                   variable it writes, whose data is where
                                   that variable's new value goes (the
                                   variable, or the step's packed value) */
  const graft__tview *out;
  /* A failing kernel writes its reason here (without op name prefix). */
  char *msg;                   /* GRAFT__MSG_LEN bytes */
  graft_status (*fn)(const struct graft__kargs *k, int64_t begin, int64_t end);
  int64_t units;
} graft__kargs;

typedef graft_status (*graft__kernel_fn)(const graft__kargs *k, int64_t begin, int64_t end);

typedef struct graft__kernel_info {
  graft__kernel_fn run;        /* NULL for GRAFT__OPF_EXTERNAL ops */
} graft__kernel_info;

extern const graft__kernel_info graft__kernels[GRAFT__OP_COUNT];

/* Number of units of k's node for its concrete shapes (>= 0). */
int64_t graft__kernel_units(const graft__kargs *k);

/* Kernels, one per op row (GRAFT_OP_MAP), named graft__k_<ENUM>. */
#define GRAFT__K_DECL_(e, name, arity, rule, flags, cost, tile) \
  graft_status graft__k_##e(const graft__kargs *k, int64_t begin, int64_t end);
GRAFT_OP_MAP(GRAFT__K_DECL_)
#undef GRAFT__K_DECL_

/* Split reductions (float reduce_* and logsumexp): the reduced extent R per
 * output, or 0 when the node cannot be split.  A block [r0, r1) of R writes
 * two doubles per output into part; combine folds n_blocks partials (laid
 * out block after block) into the output in block order. */
int64_t graft__kernel_split_extent(const graft__kargs *k);
graft_status graft__kernel_partial(const graft__kargs *k, int64_t r0, int64_t r1, double *part);
graft_status graft__kernel_combine(const graft__kargs *k, int64_t n_blocks, const double *parts);

/* Per-tile scratch (conv2d's kernels: one image's columns): the doubles
 * one tile of k's node needs, 0 for an op that needs none.  Such a node
 * runs only through graft__kernel_run_scratch, each of its tiles that may
 * run at once with a buffer of its own (sched/tiles.c reserves them in the
 * plan, so nothing is allocated while running). */
int64_t graft__kernel_scratch(const graft__kargs *k);
graft_status graft__kernel_run_scratch(const graft__kargs *k, int64_t begin, int64_t end,
                                       double *scratch);

/* ---- fused elementwise groups (sched/fuse.c builds them, fused.c runs them)
 *
 * Elementwise ops of one output shape that a plan runs as one node, one
 * pass per tile: members in topological order, the root (whose value the
 * node writes: its out view) last.  Every other member's values live only
 * in the tile's scratch, GRAFT__FUSED_CHUNK elements at a time; each member
 * runs its own kernel over them, so every element gets the same operations
 * in the same order as unfused, and the bits are the same.  The node's
 * inputs (kargs in) are the group's external inputs. */
#define GRAFT__FUSED_MAX_MEMBERS 32
#define GRAFT__FUSED_MAX_IN 16
/* Elements per member call: large enough that a member kernel's per-call
 * setup (about 20 ns: a broadcast plan) is noise, small enough that a
 * chunk's slots stay in L1 (a slot holds up to 1024 doubles, 8 KiB).  The
 * demo's Adam written as ops (bench_small_step ops_on): step / its GEMMs
 * 2.07-2.10 at 256-2048 elements, 2.5 at 8192 (slots in L2). */
#define GRAFT__FUSED_CHUNK 1024
#define GRAFT__FUSED_NAME 96

typedef struct graft__fused_member {
  const graft__node *node;     /* the traced op (attributes) */
  graft__kernel_fn fn;
  graft_dtype dtype;           /* of its value */
  int8_t ref[3];               /* per input: >= 0 the node's input ref,
                                  < 0 member -1 - ref */
  int8_t slot;                 /* the scratch slot its chunk goes to (not
                                  the root's); slots are reused once their
                                  value is read for the last time, in place
                                  when the element sizes agree */
  int8_t dst;                  /* >= 0: an assign whose value goes to the
                                  node's destination dst (a group writing
                                  several variables), read back from there;
                                  -1 otherwise */
} graft__fused_member;

/* A group compiled to one loop (fused_jit.c) over elements [begin, end):
 * ptrs holds the group's inputs' data, then its output's (or its n_dst
 * destinations'); row0 is begin % the length of its row inputs
 * (code_row), if it has any. */
typedef void (*graft__fused_code)(const void *const *ptrs, int64_t begin, int64_t end, int64_t row0);
/* How compiled code reads an input: at element i, its one element, at
 * i % code_row (a bias row, graft__is_row_of). */
enum { GRAFT__FUSED_IN_FULL, GRAFT__FUSED_IN_SCALAR, GRAFT__FUSED_IN_ROW };

typedef struct graft__fused {
  int n_members;               /* 0: merged into another group (sched/fuse.c) */
  int n_slots;
  /* The elements it runs over: its root's shape.  A group that writes
   * several variables (n_dst > 0: assigns merged into the group reading
   * their values) is an UPDATE node in the plan: its value is the
   * variables' new values packed (n_dst x numel), and it writes variable j
   * through destination j (kargs in[n_in + j]), as an optimizer step
   * does; its root writes destination 0. */
  int64_t numel;
  int rank;
  int64_t dims[GRAFT_MAX_RANK];
  int n_dst;
  int cost;                    /* the members' cost column, summed */
  char name[GRAFT__FUSED_NAME]; /* "fused:mul+add+relu" (traces, DOT) */
  graft__fused_member m[GRAFT__FUSED_MAX_MEMBERS];
  graft__node root;            /* the root as traced (the plan's copy of the
                                  graph gives it the group's inputs) */
  /* Compiled (graft__fused_compile), or code NULL: the members' kernels
   * run it.  It runs only for the inputs it was compiled for: n_in of
   * dtype code_dtype, input j read as code_kind[j] says (so of the
   * output's count, one element, or code_row elements). */
  graft__fused_code code;
  graft_dtype code_dtype;
  int code_n_in;
  int64_t code_row;
  uint8_t code_kind[GRAFT__FUSED_MAX_IN];
} graft__fused;

/* A group's views at compile: its inputs'. */
typedef struct graft__fused_io {
  const graft__tview *in[GRAFT__FUSED_MAX_IN];
  int n_in;
} graft__fused_io;

/* Compiles the groups it can (fused_jit.c: on x86-64 with AVX) and sets
 * their code; the others keep code NULL.  Returns the code's pages (*len
 * bytes), to free with graft__fused_release after the groups' last run,
 * or NULL when none compiled. */
void *graft__fused_compile(graft__fused *const *groups, const graft__fused_io *io, int n,
                           size_t *len);
void graft__fused_release(void *mem, size_t len);
/* 1 where graft__fused_compile can compile (x86-64 Linux with AVX, not a
 * ThreadSanitizer build). */
int graft__fused_can_compile(void);
/* Tests: nonzero makes graft__fused_compile find no executable memory, as
 * on a system that refuses it (every group is then interpreted). */
extern int graft__fused_refuse_pages;

/* BLAS setup: make OpenBLAS single-threaded inside tasks where that is safe
 * (pthreads variant); never touches the OpenMP variant.  Idempotent. */
void graft__blas_init(void);

#endif /* GRAFT_KERNELS_H */
