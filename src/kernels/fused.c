/* The kernel of a fused elementwise group (kernels.h, sched/fuse.c).
 *
 * A tile's elements go through the members GRAFT__FUSED_CHUNK at a time:
 * each member runs its own kernel over the chunk, reading the node's inputs
 * or earlier members' chunks and writing its own chunk in the tile's
 * scratch (the root writes the node's value).  Member kernels index their
 * operands by output element, so a member's chunk is handed to them as a
 * view whose data pointer is moved back by the chunk's first index: element
 * i then lands in the chunk.  Every element gets exactly the operations it
 * gets unfused, whatever the tiles and chunks, so the bits are the same.
 * In a group that writes several variables (kernels.h), an assign member
 * writes its chunk straight to its destination, where later members read
 * it. */
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/kernels_int.h"

/* Elements per member chunk: whole 64-byte lines of doubles. */
static int64_t chunk_of(const graft__fused *f) {
  int64_t ch = f->numel < GRAFT__FUSED_CHUNK ? f->numel : GRAFT__FUSED_CHUNK;
  return (ch + 7) / 8 * 8;
}

/* Doubles between slots: a chunk, and a line more so that slots do not
 * start at the same offset of a page (which would make them evict each
 * other from L1). */
static int64_t slot_stride(const graft__fused *f) { return chunk_of(f) + 8; }

int64_t graft__fused_scratch(const graft__kargs *k) {
  return (int64_t)k->node->fused->n_slots * slot_stride(k->node->fused) + 1;
}

/* Does k give the compiled loop the inputs it was compiled for? */
static int code_fits(const graft__fused *f, const graft__kargs *k, int64_t begin, int64_t end) {
  if (!f->code || k->n_in != f->code_n_in || k->out->dtype != f->code_dtype || begin < 0 ||
      end > f->numel)
    return 0;
  for (int j = 0; j < k->n_in; j++) {
    int kind = f->code_kind[j];
    int64_t want = kind == GRAFT__FUSED_IN_FULL ? f->numel : kind == GRAFT__FUSED_IN_SCALAR ? 1 : f->code_row;
    if (k->in[j]->dtype != f->code_dtype || k->in[j]->numel != want) return 0;
  }
  return 1;
}

graft_status graft__fused_run(const graft__kargs *k, int64_t begin, int64_t end, double *scratch) {
  const graft__fused *f = k->node->fused;
  if (begin < end && code_fits(f, k, begin, end)) {
    const void *ptrs[GRAFT__FUSED_MAX_IN + GRAFT__UPDATE_MAX_VARS];
    for (int j = 0; j < k->n_in; j++) ptrs[j] = k->in[j]->data;
    for (int j = 0; j < (f->n_dst ? f->n_dst : 1); j++)
      ptrs[k->n_in + j] = f->n_dst ? k->in[k->n_in + j]->data : k->out->data;
    f->code(ptrs, begin, end, f->code_row ? begin % f->code_row : 0);
    return GRAFT_OK;
  }
  const int nm = f->n_members;
  const int64_t ch = chunk_of(f), stride = slot_stride(f);
  /* the variables a group writing several goes to, element by element */
  graft__tview dst[GRAFT__UPDATE_MAX_VARS];
  if (f->n_dst < 0 || f->n_dst > GRAFT__UPDATE_MAX_VARS)
    return graft__kernel_internal(k, "fused group writing %d variables", f->n_dst);
  for (int j = 0; j < f->n_dst; j++)
    dst[j] = (graft__tview){k->in[k->n_in + j]->data, f->numel, k->out->dtype, f->rank, f->dims};
  graft__tview tmp[GRAFT__FUSED_MAX_MEMBERS];
  const graft__tview *ins[GRAFT__FUSED_MAX_MEMBERS][3];
  graft__kargs mk[GRAFT__FUSED_MAX_MEMBERS];
  if (nm < 2 || nm > GRAFT__FUSED_MAX_MEMBERS || f->n_slots < 1 || f->n_slots >= nm)
    return graft__kernel_internal(k, "fused group of %d ops in %d slots", nm, f->n_slots);
  for (int m = 0; m < nm; m++) {
    const graft__fused_member *fm = &f->m[m];
    const graft__node *nd = fm->node;
    if (fm->dst >= f->n_dst || (f->n_dst && m == nm - 1 && fm->dst != 0))
      return graft__kernel_internal(k, "fused member %d writes destination %d of %d", m, fm->dst, f->n_dst);
    /* (a member writing a variable is read back from it) */
    tmp[m] = fm->dst >= 0 ? dst[fm->dst] : (graft__tview){NULL, f->numel, fm->dtype, f->rank, f->dims};
    /* (a member is an op of one to three operands, as traced: fm->ref's) */
    if (nd->n_in < 1 || nd->n_in > 3 || nd->fused)
      return graft__kernel_internal(k, "fused member %d (%s) has %d operands%s", m, graft__ops[nd->op].name,
                                    nd->n_in, nd->fused ? " and is a fused node" : "");
    for (int j = 0; j < nd->n_in; j++) {
      int r = fm->ref[j];
      if (r >= k->n_in || -1 - r >= m)
        return graft__kernel_internal(k, "fused member %d reads operand %d", m, r);
      ins[m][j] = r >= 0 ? k->in[r] : &tmp[-1 - r];
    }
    mk[m] = (graft__kargs){.node = nd, .n_in = nd->n_in, .in = ins[m],
                           .out = fm->dst < 0 && m == nm - 1 ? k->out : &tmp[m], .msg = k->msg,
                           .fn = fm->fn, .units = f->numel, .next = UINT32_MAX};
  }
  /* An assign rooting the group that copies the member just before it
   * (which only the root reads): that member writes the node's value
   * itself and the copy is skipped, the same bits one pass sooner.  Its
   * writes to chunk [cb, ce) come after every earlier member has read
   * [cb, ce), as the copy's did, so an input the value overwrites in place
   * (the variable) is read first either way. */
  int run = nm;
  const graft__fused_member *root = &f->m[nm - 1];
  if (!f->n_dst && root->node->op == GRAFT__OP_ASSIGN && root->node->n_in == 1 &&
      root->ref[0] == -1 - (nm - 2) && f->m[nm - 2].dtype == k->out->dtype) {
    mk[nm - 2].out = k->out;
    run = nm - 1;
  }
  for (int64_t cb = begin; cb < end; cb += ch) {
    const int64_t ce = end - cb < ch ? end : cb + ch;
    /* Moved back by cb elements (in integers): the kernel's element cb
     * is the chunk's first. */
    for (int m = 0; m < nm - 1; m++)
      if (f->m[m].dst < 0)
        tmp[m].data = (void *)((uintptr_t)(scratch + (int64_t)f->m[m].slot * stride) -
                               (uintptr_t)cb * graft_dtype_size(tmp[m].dtype));
    for (int m = 0; m < run; m++) {
      graft_status st = mk[m].fn(&mk[m], cb, ce);
      if (st != GRAFT_OK) return st;
    }
  }
  return GRAFT_OK;
}
