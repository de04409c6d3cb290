/* The kernel table and the unit count of every op, both expanded from
 * GRAFT_OP_MAP so that adding an op needs no edit here unless its units are
 * not its output elements. */
#include <stddef.h>

#include "kernels/kernels_int.h"

/* Per-op exceptions are looked up with the "probe" idiom: for a macro
 * PREFIX_<ENUM> defined as `~, value`, SECOND(PREFIX_<ENUM>, fallback, ~)
 * yields value; for an undefined one, PREFIX_<ENUM> stays a plain token and
 * SECOND yields fallback.  The discarded argument is never emitted, so no
 * kernel symbol of an op without a kernel is referenced. */
#define SECOND_(a, b, ...) b
#define SECOND(...) SECOND_(__VA_ARGS__)

/* Ops whose buffer is bound at call time: no kernel. */
#define NO_KERNEL_INPUT ~, NULL
#define NO_KERNEL_VAR_READ ~, NULL
#define KERNEL_FN(e) SECOND(NO_KERNEL_##e, graft__k_##e, ~)
#define HAS_NO_KERNEL_INPUT ~, 1
#define HAS_NO_KERNEL_VAR_READ ~, 1
#define HAS_NO_KERNEL(e) SECOND(HAS_NO_KERNEL_##e, 0, ~)

/* The list above must be exactly the GRAFT__OPF_EXTERNAL ops. */
#define CHECK_EXTERNAL_(e, name, arity, rule, flags, cost, tile)                          \
  _Static_assert((((flags) & GRAFT__OPF_EXTERNAL) != 0) == HAS_NO_KERNEL(e), \
                 "op '" name "': GRAFT__OPF_EXTERNAL and kernel_table.c's no-kernel list disagree");
GRAFT_OP_MAP(CHECK_EXTERNAL_)
#undef CHECK_EXTERNAL_

#define KERNEL_ENTRY_(e, name, arity, rule, flags, cost, tile) {.run = KERNEL_FN(e)},
/* Sized by its initializer: a row missing here conflicts with the declared
 * size instead of leaving a silent NULL. */
const graft__kernel_info graft__kernels[] = {GRAFT_OP_MAP(KERNEL_ENTRY_)};
#undef KERNEL_ENTRY_

_Static_assert(GRAFT__COUNT(graft__kernels) == GRAFT__OP_COUNT,
               "graft__kernels needs one entry per GRAFT_OP_MAP row");

/* ---- units ----------------------------------------------------------- */

enum units_rule {
  UNITS_NUMEL,   /* output elements */
  UNITS_NONE,    /* no kernel runs */
  UNITS_GEMM,    /* output columns over all batches: one row block (kernels_int.h) */
  UNITS_LANES,   /* vectors along attr.axis.axis: numel / that dim */
  UNITS_ONE,     /* one indivisible unit */
  UNITS_INPUT0,  /* input 0's elements (an optimizer step: the weight's) */
  UNITS_CONV     /* conv2d's products, the max-pool gradient: graft__conv_units */
};

#define UNITS_RULE_MATMUL ~, UNITS_GEMM
#define UNITS_RULE_SOFTMAX ~, UNITS_LANES
#define UNITS_RULE_LOG_SOFTMAX ~, UNITS_LANES
#define UNITS_RULE_SOFTMAX_XENT ~, UNITS_ONE
#define UNITS_RULE_UPDATE ~, UNITS_INPUT0
#define UNITS_RULE_COND ~, UNITS_ONE
#define UNITS_RULE_WHILE ~, UNITS_ONE
#define UNITS_RULE_SCAN ~, UNITS_ONE
#define UNITS_RULE_REMAT ~, UNITS_ONE
#define UNITS_RULE_ALLREDUCE ~, UNITS_ONE
#define UNITS_RULE_CONV2D ~, UNITS_CONV
#define UNITS_RULE_CONV2D_W ~, UNITS_CONV
#define UNITS_RULE_CONV2D_X ~, UNITS_CONV
#define UNITS_RULE_MAX_POOL2D_GRAD ~, UNITS_CONV
#define UNITS_ENTRY_(e, name, arity, rule, flags, cost, tile) \
  SECOND(UNITS_RULE_##e, ((flags) & GRAFT__OPF_EXTERNAL ? UNITS_NONE : UNITS_NUMEL), ~),
static const unsigned char units_rule[] = {GRAFT_OP_MAP(UNITS_ENTRY_)};
#undef UNITS_ENTRY_

_Static_assert(GRAFT__COUNT(units_rule) == GRAFT__OP_COUNT,
               "units_rule needs one entry per GRAFT_OP_MAP row");

/* numel / dim, 0 when there are no elements. */
static int64_t count_over(int64_t numel, int64_t dim) {
  return numel > 0 && dim > 0 ? numel / dim : 0;
}

int64_t graft__kernel_units(const graft__kargs *k) {
  unsigned op = k->node->op;
  if (op >= GRAFT__OP_COUNT)
    return 0;
  const graft__tview *out = k->out;
  switch ((enum units_rule)units_rule[op]) {
  case UNITS_NONE:
    return 0;
  case UNITS_ONE:
    return 1;
  case UNITS_CONV:
    return graft__conv_units(k);
  case UNITS_INPUT0:
    return k->n_in > 0 ? k->in[0]->numel : 0;
  case UNITS_GEMM:
    return out->rank < 2 ? out->numel : count_over(out->numel, out->shape[out->rank - 2]);
  case UNITS_LANES: {
    int axis = k->node->attr.axis.axis;
    if (axis < 0 || axis >= out->rank)
      return out->numel;
    return count_over(out->numel, out->shape[axis]);
  }
  case UNITS_NUMEL:
  default:
    return out->numel;
  }
}

/* ---- per-tile scratch ------------------------------------------------ */

int64_t graft__kernel_scratch(const graft__kargs *k) {
  return k->node->fused ? graft__fused_scratch(k) : graft__conv_scratch(k);
}

graft_status graft__kernel_run_scratch(const graft__kargs *k, int64_t begin, int64_t end,
                                       double *scratch) {
  return k->node->fused ? graft__fused_run(k, begin, end, scratch)
                        : graft__conv_run_scratch(k, begin, end, scratch);
}
