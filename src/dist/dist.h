/* graft internal: graft's use of MPI (src/dist), for src/sched.
 *
 * Communicators and requests travel as bytes, so only src/dist includes
 * <mpi.h>.  Every MPI call graft makes goes through here, one at a time
 * (a process-wide lock: MPI_THREAD_SERIALIZED is enough), and no call
 * blocks while holding the lock: waits poll MPI_Test and give up after a
 * timeout.  Built without MPI (none.c), every function fails with
 * GRAFT_EUNSUPPORTED; nothing reaches them then, since only graft/mpi.h
 * traces collectives. */
#ifndef GRAFT_DIST_H
#define GRAFT_DIST_H

#include <stdint.h>

#include "common/common.h"

#define GRAFT__REQ_BYTES 16

/* One non-blocking operation in flight. */
typedef struct graft__dist_req {
  unsigned char b[GRAFT__REQ_BYTES]; /* the MPI_Request */
} graft__dist_req;

/* Ranks of comm (0 on failure, with msg). */
int graft__dist_size(const unsigned char *comm, char *msg);

/* Start the sum over the ranks of comm of buf[0..count) (f32 or f64) in
 * place. */
graft_status graft__dist_iallreduce(const unsigned char *comm, void *buf, int64_t count,
                                    graft_dtype dt, graft__dist_req *req, char *msg);

/* 1 when req has finished (then nothing more to do), 0 when not yet;
 * a graft_status (negative: GRAFT_EIO) with msg when MPI reports an error.  Only if the
 * lock is free when try is set (0 then also means "busy"). */
int graft__dist_test(graft__dist_req *req, int try_lock, char *msg);

/* Wait for req at most timeout_s seconds from start_us (graft__now_us):
 * GRAFT_OK, or GRAFT_EIO with msg (an MPI error, or the timeout). */
graft_status graft__dist_wait(graft__dist_req *req, double start_us, int64_t timeout_s,
                              char *msg);

/* Agree on a call's outcome across comm: every rank passes its status;
 * on return *st is GRAFT_OK when every rank's was, else the status of a
 * failing rank and *who that rank (the lowest).  The returned status is
 * the vote's own (GRAFT_EIO on an MPI error or timeout). */
graft_status graft__dist_vote(const unsigned char *comm, int64_t timeout_s, graft_status *st,
                              int *who, char *msg);

#endif /* GRAFT_DIST_H */
