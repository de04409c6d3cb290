/* The op table: GRAFT_OP_MAP expanded into rows. */
#include "graph/graph.h"

#define X(e, name, arity, rule, flags, cost, tile) \
  graft_status graft__shape_##rule(graft__shape_ctx *c, const graft__node *n, \
                                   const graft__shape *in, graft__shape *out);
GRAFT_OP_MAP(X)
#undef X

const graft__op_info graft__ops[GRAFT__OP_COUNT] = {
#define X(e, name, arity, rule, flags, cost, tile) \
  [GRAFT__OP_##e] = {name, arity, graft__shape_##rule, flags, cost, GRAFT__TILE_##tile},
    GRAFT_OP_MAP(X)
#undef X
};

_Static_assert(GRAFT__COUNT(graft__ops) == GRAFT__OP_COUNT, "op table out of sync");
