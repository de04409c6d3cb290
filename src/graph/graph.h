/* graft internal: the graph IR and the interface of src/graph to the other
 * areas (sched, kernels, grad).
 *
 * A graph is an append-only list of single-output nodes.  A node's inputs
 * always have smaller ids, so id order is a topological order.  Node storage
 * is chunked so a node's address never moves.
 *
 * Shapes may hold symbolic dims (codes GRAFT_DIM_SYM(k) < -1, see trace.h).
 * At compile, every shape rule runs again in concrete mode with the sizes of
 * the call's inputs, and each symbol is bound to its size (graft__shape_unify).
 */
#ifndef GRAFT_GRAPH_H
#define GRAFT_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "common/common.h"
#include "common/ptrmap.h"
#include "graft/control.h"
#include "graft/grad.h"
#include "graft/module.h"
#include "graft/ops.h"
#include "graft/trace.h"
#include "graph/op_map.h"

/* A value handle is not memory: it encodes its graph's serial (high 32
 * bits) and the node id (low 32 bits), so a handle outliving its trace is
 * recognised by its serial and never read (the struct is never defined).
 * Serial 0 is no graph's: (0, GRAFT__POISON_ID) is the poison value. */
#define GRAFT__POISON_ID UINT32_MAX
#define GRAFT__POISON ((graft_value *)(uintptr_t)GRAFT__POISON_ID)
_Static_assert(sizeof(uintptr_t) >= 8, "value handles encode 64 bits in a pointer");

/* Who emitted a node: the user's trace, or a gradient builder (for DOT). */
enum graft__role { GRAFT__ROLE_FORWARD = 0, GRAFT__ROLE_BACKWARD, GRAFT__ROLE_TANGENT };

/* An UPDATE node's rule (the optimizer step it fuses).  Its inputs are the
 * weight's value w, the gradient g, hp = [lr, c1, c2s, gscale] (w's dtype:
 * the learning rate, Adam's bias corrections 1 - b1^t and sqrt(1 - b2^t),
 * the gradient's scale from clipping), then the slots' values; it writes
 * the new weight and slots, packed one after another in its value (a
 * staged write) or straight into the variables (kargs dst).  With
 * ge = gscale g + wd w (Adam(W) below: gscale g, plus wd w for ADAM):
 *   SGD       w' = w - lr ge
 *   MOMENTUM  b' = mu b + ge, w' = w - lr b'
 *   NESTEROV  b' = mu b + ge, w' = w - lr (ge + mu b')
 *   ADAM      m' = b1 m + (1 - b1) ge, v' = b2 v + (1 - b2) ge ge,
 *             w' = w - (lr / c1) m' / (sqrt(v') / c2s + eps)
 *   ADAMW     the same with ge = gscale g, from w (1 - lr wd)  (PyTorch's
 *             formulas and order of operations). */
enum graft__update_kind {
  GRAFT__UPDATE_SGD,
  GRAFT__UPDATE_MOMENTUM,
  GRAFT__UPDATE_NESTEROV,
  GRAFT__UPDATE_ADAM,
  GRAFT__UPDATE_ADAMW
};
#define GRAFT__UPDATE_MAX_VARS 3
#define GRAFT__UPDATE_HP 4

/* An MPI_Comm is kept by value in these bytes (src/dist checks it fits), so
 * the graph needs no MPI header. */
#define GRAFT__COMM_BYTES 16

/* Op parameters; which member is used depends on the op. */
typedef union graft__attr {
  struct { unsigned mask; int keepdims; } reduce;     /* REDUCE_*, LOGSUMEXP: bit i = axis i */
  struct { int perm[GRAFT_MAX_RANK]; } transpose;     /* out dim i = in dim perm[i] */
  struct { int rank; int64_t dims[GRAFT_MAX_RANK]; } target; /* RESHAPE (-1 = infer), BROADCAST_TO, SUM_TO_SHAPE, FILL */
  struct { int64_t begin[GRAFT_MAX_RANK], size[GRAFT_MAX_RANK]; } slice; /* SLICE: size -1 = to the end
                                                         (sizes may be symbols); PAD: size = the target shape */
  struct { int axis; } axis;                          /* CONCAT, SOFTMAX, LOG_SOFTMAX (normalized >= 0) */
  struct { int64_t depth; } one_hot;
  struct { unsigned flags; } matmul;                  /* GRAFT_TRANS_A | GRAFT_TRANS_B */
  struct { int n; } polygamma;
  struct graft__conv_attr {                            /* IM2COL, COL2IM, MAX_POOL2D* */
    int64_t x[4];                                      /* the image shape N, C, H, W (N may be a symbol) */
    int64_t k[2], s[2], p[2], d[2];                    /* kernel, stride, padding, dilation (H, W) */
    int64_t groups;
  } conv;
  struct { const void *data; } constant;              /* graph-owned copy */
  struct { graft_variable *var; } var;                /* VAR_READ, ASSIGN */
  struct { int index; } input;                        /* INPUT: position in the signature */
  struct { const struct graft__custom *rec; } custom; /* CUSTOM: the user's VJP rule */
  struct graft__update_attr {                          /* UPDATE: one optimizer step */
    graft_variable *var[GRAFT__UPDATE_MAX_VARS];       /* the weight, then its slots */
    int n_vars;
    int kind;                                          /* enum graft__update_kind */
    double mu, b1, b2, eps, wd;                        /* momentum, betas, eps, decay */
  } update;
  struct { struct graft__ctl *ctl; } ctl;             /* COND, WHILE, SCAN, REMAT */
  struct graft__coll_attr {                            /* ALLREDUCE, ALLREDUCE_TAKE */
    unsigned char comm[GRAFT__COMM_BYTES];             /* the MPI_Comm, by value (dist/) */
    int n_members;                                     /* ALLREDUCE: its first inputs; one
                                                          more is the communicator's previous
                                                          ALLREDUCE (an order edge) */
    int index;                                         /* TAKE: the member it reads;
                                                          ALLREDUCE: its place on the comm */
    struct graft__coll_state *state;                   /* a plan's copy: the call's request
                                                          (sched/collective.c) */
  } coll;
  struct {                                            /* GET: output index of the */
    int index;                                        /* control node it reads; the */
    int64_t offset;                                   /* byte offset there (a plan's copy) */
  } get;
} graft__attr;

typedef struct graft__node {
  uint32_t id;
  uint16_t op;                 /* graft__op */
  uint8_t dtype;               /* graft_dtype of the output */
  uint8_t rank;
  uint8_t role;                /* graft__role */
  int32_t n_in;                /* data inputs */
  uint32_t *in;                /* n_in input ids (graph arena) */
  int64_t shape[GRAFT_MAX_RANK]; /* may hold symbols */
  double fill;                 /* FILL value (also rank-0 scalars) */
  graft__attr attr;
  /* Only in a plan's copy of the graph (sched/fuse.c): the elementwise ops
   * this node runs as one (kernels.h), its inputs then being the group's;
   * NULL in every traced graph. */
  const struct graft__fused *fused;
  /* Only in a plan's copy too (sched/control.c): a control node's or a
   * GET's compiled subgraphs; NULL in every traced graph. */
  const struct graft__ctl_exec *exec;
} graft__node;

/* A custom-gradient region (graph arena): inputs of the CUSTOM node are
 * [y, xs...]; its value is y. */
typedef struct graft__custom {
  graft_vjp_fn vjp;
  void *user;
} graft__custom;

/* What a symbol stands for. */
typedef struct graft__sym {
  int input;   /* input index, or -1 for a derived symbol (reshape -1) */
  int dim;
} graft__sym;

typedef struct graft__graph {
  graft__node **chunks;        /* GRAFT__CHUNK nodes each */
  int64_t n_chunks, cap_chunks;
  uint32_t serial;             /* nonzero, carried by this graph's value handles */
  uint32_t n_nodes;
  graft__arena arena;          /* input lists, constant data */
  graft__sym *syms;
  int64_t n_syms, cap_syms;
  uint32_t *inputs;            /* n_inputs INPUT node ids */
  int n_inputs;
  uint32_t *outputs;           /* n_outputs node ids */
  int n_outputs;
  graft_variable **vars;       /* variables referenced (one reference each) */
  int64_t n_vars, cap_vars;
  graft__ptrmap var_set;       /* ... the same, for lookup */
  struct graft__sub **subs;    /* subgraphs its control nodes run (one
                                  reference each) */
  int64_t n_subs, cap_subs;
  /* The communicator its collectives use (ALLREDUCE: one per graph), and
   * how many ALLREDUCE nodes it holds (their attr.coll.index: 0, 1, ...). */
  unsigned char comm[GRAFT__COMM_BYTES];
  int n_colls;
  uint32_t last_coll;          /* the last ALLREDUCE's id (n_colls > 0) */
  char *name;
} graft__graph;

#define GRAFT__CHUNK_BITS 10
#define GRAFT__CHUNK (1u << GRAFT__CHUNK_BITS)

static inline graft__node *graft__graph_node(const graft__graph *g, uint32_t id) {
  return &g->chunks[id >> GRAFT__CHUNK_BITS][id & (GRAFT__CHUNK - 1)];
}

/* The handle of node id of g. */
static inline graft_value *graft__value(const graft__graph *g, uint32_t id) {
  return (graft_value *)(uintptr_t)((uint64_t)g->serial << 32 | id);
}
/* The node id a handle names (whatever its graph: check with
 * graft__value_node first where the handle comes from the user). */
static inline uint32_t graft__value_id(const graft_value *v) { return (uint32_t)(uintptr_t)v; }
/* The node of g that v names, or NULL when v is not a value of g (NULL,
 * poison, another graph's, or a graph's that is gone). */
static inline graft__node *graft__value_node(const graft__graph *g, const graft_value *v) {
  uint64_t h = (uint64_t)(uintptr_t)v;
  if ((uint32_t)(h >> 32) != g->serial || (uint32_t)h >= g->n_nodes) return NULL;
  return graft__graph_node(g, (uint32_t)h);
}

/* Op table rows, from GRAFT_OP_MAP. */
typedef struct graft__shape {
  graft_dtype dtype;
  int rank;
  int64_t dims[GRAFT_MAX_RANK];
} graft__shape;

/* Shape-rule context.  binding == NULL: symbolic (trace) mode, undecidable
 * checks are deferred; else concrete mode, binding[k] is symbol k's size
 * (-1 while unbound).  msg receives the reason of a failure, without the op
 * name prefix. */
typedef struct graft__shape_ctx {
  int64_t *binding;
  graft__graph *g;             /* symbolic mode: to make derived symbols */
  char msg[GRAFT__MSG_LEN];
  /* Concrete mode: the shapes of control nodes and their GETs, which come
   * from their compiled subgraphs (a plan's, sched/control.c); NULL
   * elsewhere. */
  graft_status (*ctl)(struct graft__shape_ctx *c, const graft__node *n, const graft__shape *in,
                      graft__shape *out);
  void *ctl_arg;
} graft__shape_ctx;

typedef graft_status (*graft__shape_fn)(graft__shape_ctx *c, const graft__node *n,
                                        const graft__shape *in, graft__shape *out);

typedef struct graft__op_info {
  const char *name;
  int arity;
  graft__shape_fn shape;
  unsigned flags;
  int cost;        /* work per element */
  int tile;        /* enum graft__tile_kind */
} graft__op_info;

extern const graft__op_info graft__ops[GRAFT__OP_COUNT];

/* ---- graph ----------------------------------------------------------- */
graft__graph *graft__graph_create(const char *name, int n_inputs, int n_outputs);
void graft__graph_destroy(graft__graph *g);
/* Append a node (inputs copied); NULL on ENOMEM.  The caller fills shape. */
graft__node *graft__graph_add(graft__graph *g, int op, int n_in, const uint32_t *in);
/* New symbol; its code is GRAFT_DIM_SYM(returned index), or -1 on ENOMEM. */
int64_t graft__graph_new_sym(graft__graph *g, int input, int dim);
/* Record that g references v (takes a reference once per variable). */
graft_status graft__graph_ref_var(graft__graph *g, graft_variable *v);

/* live[i] = 1 for nodes that reach an output, a side effect or a node
 * that can fail on data (GRAFT__OPF_FALLIBLE). */
void graft__graph_prune(const graft__graph *g, uint8_t *live);

/* Clusters drawn around nodes: of[id] the cluster (named by its root id)
 * node id is drawn in, UINT32_MAX for none; name[root] its label, NULL for
 * an id that roots none.  A plan's fused groups (sched/fuse.c). */
typedef struct graft__dot_clusters {
  const uint32_t *of;
  const char *const *name;
} graft__dot_clusters;

/* Write g in Graphviz DOT: inputs, variables, constants, ops and side
 * effects styled apart, backward/tangent nodes coloured by role, pruned
 * nodes dashed; with c (or NULL), clusters around nodes.  Each control
 * node gets a cluster holding a cluster per body (drawn the same way,
 * recursively, its nodes named "c<node>_<body>_n<id>"), with dashed edges
 * from the node's inputs to the body inputs they stand for and from the
 * body outputs to the GETs that read them (a while loop's predicate: to
 * the node). */
graft_status graft__graph_write_dot(const graft__graph *g, const graft__dot_clusters *c, FILE *to);

/* ---- shapes ---------------------------------------------------------- */
/* Write a shape rule's reason into c->msg and return st. */
graft_status graft__shape_fail(graft__shape_ctx *c, graft_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Run n's shape rule on inputs in[] (concrete if c->binding). */
graft_status graft__shape_infer(graft__shape_ctx *c, const graft__node *n,
                                const graft__shape *in, graft__shape *out);
/* Bind the symbols of a trace-time shape sym to concrete sizes conc.
 * Returns GRAFT_ESHAPE (with c->msg) on a contradiction. */
graft_status graft__shape_unify(graft__shape_ctx *c, int rank, const int64_t *sym,
                                const int64_t *conc);
/* The shape of node n as a graft__shape (trace-time dims). */
void graft__node_shape(const graft__node *n, graft__shape *out);
/* "f32[3,4]" into buf (len bytes), for messages; returns buf. */
const char *graft__shape_text(char *buf, size_t len, const graft__shape *s);

/* The variables a side-effect node writes (ASSIGN: its one; UPDATE: the
 * weight, then its slots) in *vars; returns their count. */
static inline int graft__node_writes(const graft__node *n, graft_variable *const **vars) {
  if (n->op == GRAFT__OP_UPDATE) {
    *vars = n->attr.update.var;
    return n->attr.update.n_vars;
  }
  *vars = &n->attr.var.var;
  return 1;
}

/* ---- control flow (control.c, replay.c) ----------------------------- */
/* A traced body or branch: its graph's inputs are the explicit ones, then
 * the captures (values of the traces around it that it used); its outputs
 * are the body's.  Immutable once traced; shared by every graph whose
 * control nodes run it (references counted). */
typedef struct graft__sub {
  graft__graph *g;
  int n_explicit;
  int fallible;                /* holds a node that may fail on data */
  int refs;                    /* atomic */
} graft__sub;
void graft__sub_ref(graft__sub *s);
void graft__sub_unref(graft__sub *s);

enum graft__ctl_kind { GRAFT__CTL_COND, GRAFT__CTL_WHILE, GRAFT__CTL_SCAN, GRAFT__CTL_REMAT };

/* A control node's description (graph arena).  The node's inputs are
 *   COND   [pred, ins..., captures...]
 *   WHILE  [init..., captures...]
 *   SCAN   [len?, init..., xs..., captures...]  (len: has_len)
 *   REMAT  [ins..., captures...]
 * and sub input j of sub k is node input map[k][j].  Its outputs (GET
 * nodes) are
 *   COND, REMAT  the branches' / body's outputs
 *   WHILE        the final vars
 *   SCAN         the final carries, then the ys stacked ([T, ...])
 * and, with save (reverse mode asked for it), then each carry stacked as
 * it was before each step (SCAN: T rows, or with a checkpoint interval k
 * > 1 only before each block of k rows: ceil(T / k) rows; WHILE: max_iters
 * rows, the rows past the count zero), then (without checkpoints) each
 * carry as each step left it, stacked the same way, and, for WHILE, the
 * iteration count (i32): graft__ctl_saved of them. */
typedef struct graft__ctl {
  int kind;                    /* enum graft__ctl_kind */
  int n_subs;                  /* COND, WHILE: 2 (then/else, cond/body); else 1 */
  graft__sub *sub[2];
  int *map[2];
  int n_carry, n_xs, n_ys;     /* WHILE: n_carry vars; SCAN */
  int n_out;                   /* outputs before the saved ones */
  int64_t max_iters;           /* WHILE: 0 = unbounded */
  int64_t checkpoint;          /* SCAN: reverse mode keeps every k-th carry
                                  (> 1 only with a length known at trace
                                  time: graft__ctl_save clears it else) */
  int reverse;                 /* SCAN */
  int64_t x_block;             /* SCAN: the xs marked in x_blocked are read
                                  x_block rows at a time (step j: rows
                                  [j k, j k + k) as [k, ...]; the last
                                  block's rows past the x's end are never
                                  read: a checkpointed backward's blocks,
                                  its inner scans reading only len rows);
                                  the length is then ceil(rows / k) */
  uint64_t x_blocked;          /* bit i: x i is read in blocks */
  int has_len;                 /* SCAN: input 0 (i32, rank 0) is the number
                                  of steps to run (<= T; the others' ys rows
                                  are zero): a while loop's backward */
  int save;                    /* saved outputs follow (see above) */
  uint32_t save_get;           /* the first saved output's GET node */
  uint32_t *gets;              /* n_out GET node ids (in order) */
  const char *name;            /* what messages call it */
} graft__ctl;

/* The saved outputs of a control node (once save is set). */
static inline int graft__ctl_saved(const graft__ctl *c) {
  return c->n_carry * (c->checkpoint > 1 ? 1 : 2) + (c->kind == GRAFT__CTL_WHILE);
}
/* Outputs of a control node including the saved ones. */
static inline int graft__ctl_outputs(const graft__ctl *c) {
  return c->n_out + (c->save ? graft__ctl_saved(c) : 0);
}
/* The node n may fail on data (its op's flag, or a subgraph that may). */
static inline int graft__node_fallible(const graft__node *n) {
  if (graft__ops[n->op].flags & GRAFT__OPF_FALLIBLE) return 1;
  if (!(graft__ops[n->op].flags & GRAFT__OPF_CONTROL)) return 0;
  const graft__ctl *c = n->attr.ctl.ctl;
  return c->sub[0]->fallible || (c->n_subs > 1 && c->sub[1]->fallible);
}

/* Emit a node like proto (op, dtype, fill; attr and, for leaves, shape
 * given, in t's symbols) on inputs in[0..proto->n_in): replay (ops.c). */
graft_value *graft__emit_like(graft_trace *t, const graft__node *proto, const graft__attr *attr,
                              const int64_t *shape, graft_value *const *in);
/* The xs a scan reads in blocks (graft__ctl.x_block, x_blocked). */
typedef struct graft__scan_blocks {
  int64_t k;
  uint64_t mask;
} graft__scan_blocks;
/* graft_scan with, when len is not NULL, an i32 scalar: run only slices
 * 0 .. len - 1 (with reverse, len - 1 down to 0); the ys' other rows are
 * zero (a while loop's backward); and with blk (or NULL), xs read in
 * blocks (a checkpointed backward). */
graft_status graft__scan_ext(graft_trace *t, graft_trace_fn body_fn, void *user, int n_carry,
                             graft_value *const *init, int n_xs, graft_value *const *xs, int n_ys,
                             graft_value **outs, const graft_scan_opts *opts, graft_value *len,
                             const graft__scan_blocks *blk);
/* The steps of a scan whose x i has d0 rows (its blocks, if read in
 * blocks). */
static inline int64_t graft__scan_steps(const graft__ctl *c, int i, int64_t d0) {
  if (!(c->x_blocked >> i & 1) || GRAFT_DIM_IS_SYM(d0)) return d0;
  return (d0 + c->x_block - 1) / c->x_block;
}
/* Make control node id of t's graph keep what reverse mode needs (see
 * graft__ctl): *first is the id of the first of those outputs' GETs
 * (graft__ctl_saved of them, consecutive); asking again gives the same. */
graft_status graft__ctl_save(graft_trace *t, uint32_t id, uint32_t *first);
/* Emit a copy of control node n (of another graph) on inputs in[] (values
 * of t, one per input of n); *id gets the new node's id (its GETs are
 * its ctl's gets). */
graft_status graft__ctl_replay(graft_trace *t, const graft__node *n, graft_value *const *in,
                               uint32_t *id);
/* Replay subgraph s into t: its explicit and captured inputs are in[]
 * (values of t, s->g->n_inputs of them); outs[] get its outputs. */
graft_status graft__replay(graft_trace *t, const graft__sub *s, graft_value *const *in,
                           graft_value **outs);

/* ---- convolution and pooling (conv.c, shape.c) ----------------------- */
/* The output extent of a window sweep over in elements (padding p on both
 * sides, kernel k dilated by d, stride s), or -1 when the dilated kernel
 * does not fit the padded input or a size overflows. */
int64_t graft__conv_out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d);
/* Emit a convolution-family node (op IM2COL, COL2IM, MAX_POOL2D*) on inputs
 * in[0..n_in) with geometry a (ops.c; sticky errors as every op). */
graft_value *graft__emit_conv(graft_trace *t, int op, int n_in, graft_value *const *in,
                              const struct graft__conv_attr *a);

/* Emit a node of op with attributes attr (and, where its shape rule reads
 * it, the node shape rank/shape) on in[0..n_in) (ops.c). */
graft_value *graft__emit_attr(graft_trace *t, int op, int n_in, graft_value *const *in,
                              const graft__attr *attr, int rank, const int64_t *shape);

/* ---- MPI collectives (collective.c) ---------------------------------- */
/* out[i] = the mean over the ranks of comm (GRAFT__COMM_BYTES of an
 * MPI_Comm) of xs[i] (NULL: NULL), in buckets of at most bucket_bytes (0:
 * 25 MiB) filled in index order, or from the last value with reverse.
 * Returns the trace's sticky status. */
graft_status graft__coll_emit(graft_trace *t, const unsigned char *comm, int n,
                              graft_value *const *xs, graft_value **out, int64_t bucket_bytes,
                              int reverse);

/* ---- variables ------------------------------------------------------- */
struct graft_variable {
  char *name;
  graft_tensor *value;
  unsigned flags;
  int refs;        /* owner + graphs (atomic) */
  int destroyed;   /* the owner gave it up */
  int busy;        /* a call is committing into it (atomic) */
  int owned;       /* a module owns it (module_int.h): graft_variable_destroy refuses it */
};
void graft__variable_ref(graft_variable *v);
void graft__variable_unref(graft_variable *v);

/* ---- trace ----------------------------------------------------------- */
/* Custom VJP rules that may run inside one another (a rule that builds
 * gradients of a region with a rule of its own): deeper is refused. */
#define GRAFT__MAX_VJP_DEPTH 16

struct graft_trace {
  graft__graph *g;
  graft_status status;
  char msg[GRAFT__MSG_LEN];
  /* current value (node id) of each assigned variable in this trace */
  graft__ptrmap cur;
  uint8_t role;    /* role of the nodes being emitted */
  /* The traces running on this thread, innermost first (a callback may
   * call another function, which traces): the value accessors accept
   * only values of these. */
  struct graft_trace *outer;
  /* CUSTOM nodes whose VJP rule is running, outermost first. */
  uint32_t vjp_active[GRAFT__MAX_VJP_DEPTH];
  int vjp_depth;
  /* The values deferred modules derived in this trace (deferred.c; NULL
   * until one is used). */
  struct graft__deferred_cache *deferred;
  /* A control-flow body's trace (control.c): the trace around it and what
   * it captured from there; NULL in a function's trace. */
  struct graft__capture *cap;
};

/* What a body's trace captured: values of the trace around it (parent),
 * each an INPUT node of the body's graph after its explicit inputs. */
typedef struct graft__capture {
  graft_trace *parent;
  uint32_t *outer;             /* the parent's node ids, in input order */
  int64_t n, cap;
  int64_t cap_inputs;          /* capacity of the body graph's inputs array */
  graft__ptrmap seen;          /* parent node id + 1 -> the body's INPUT id */
} graft__capture;

/* The node of t for v: v's own, or the INPUT that captured it (only once
 * graft__capture_value made one).  NULL when v is neither. */
graft__node *graft__trace_node(const graft_trace *t, const graft_value *v);
/* In a body's trace t, the INPUT node id standing for v, a value of a
 * trace around t (captured on first use, through every body between);
 * GRAFT__POISON_ID when v is no such value, or on a failure (then on t). */
uint32_t graft__capture_value(graft_trace *t, const graft_value *v);

/* What a value handle is to trace t. */
typedef enum graft__value_kind {
  GRAFT__VALUE_NODE = 0,   /* a node of t's graph (*node set) */
  GRAFT__VALUE_NULL,
  GRAFT__VALUE_POISON,     /* graft__poison */
  GRAFT__VALUE_FOREIGN     /* of another trace, or of one that ended */
} graft__value_kind;
/* Classify v for t (handles are never read: see graft__value); *node (may
 * be NULL) gets the node when v is one of t's graph. */
static inline graft__value_kind graft__trace_value(const graft_trace *t, const graft_value *v,
                                                   graft__node **node) {
  if (node) *node = NULL;
  if (!v) return GRAFT__VALUE_NULL;
  if (v == GRAFT__POISON) return GRAFT__VALUE_POISON;
  graft__node *n = graft__value_node(t->g, v);
  if (!n) return GRAFT__VALUE_FOREIGN;
  if (node) *node = n;
  return GRAFT__VALUE_NODE;
}

/* Free what deferred modules derived in a trace (deferred.c). */
void graft__deferred_cache_free(struct graft__deferred_cache *c);

/* Initialise t for tracing into g and make it the calling thread's
 * innermost trace; graft__trace_end (same thread, innermost first) undoes
 * that and frees what t owns. */
void graft__trace_begin(graft_trace *t, graft__graph *g);
void graft__trace_end(graft_trace *t);
/* Emit an optimizer step (UPDATE) of u's variables with gradient g and
 * hyperparameter vector hp (see graft__update_attr); later reads of the
 * variables in this trace see their new values.  Returns the node's value
 * or poison (sticky error). */
graft_value *graft__update(graft_trace *t, const struct graft__update_attr *u, graft_value *g,
                           graft_value *hp);
/* Record a failure on t (first wins). */
void graft__trace_failf(graft_trace *t, graft_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* GRAFT_GRAPH_H */
