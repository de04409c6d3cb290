/* graft: trace tensor computations into dataflow graphs, plan them, run them.
 * The umbrella header; see include/graft/ for each part. */
#ifndef GRAFT_H
#define GRAFT_H

#include "graft/version.h"
#include "graft/status.h"
#include "graft/alloc.h"
#include "graft/tensor.h"
#include "graft/runtime.h"
#include "graft/trace.h"
#include "graft/ops.h"
#include "graft/function.h"
#include "graft/module.h"
#include "graft/grad.h"
#include "graft/checkpoint.h"
#include "graft/optim.h"
#include "graft/control.h"

#endif /* GRAFT_H */
