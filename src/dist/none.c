/* dist.h without MPI: graft was built with -Dmpi=disabled or found no MPI,
 * so graft/mpi.h is not installed and nothing traces a collective; these
 * answer only a graph made some other way. */
#include "dist/dist.h"

static graft_status none(char *msg) {
  graft__msgf(msg, "graft was built without MPI (meson -Dmpi=enabled needs libopenmpi-dev)");
  return GRAFT_EUNSUPPORTED;
}

int graft__dist_size(const unsigned char *comm, char *msg) {
  (void)comm;
  none(msg);
  return 0;
}

graft_status graft__dist_iallreduce(const unsigned char *comm, void *buf, int64_t count,
                                    graft_dtype dt, graft__dist_req *req, char *msg) {
  (void)comm, (void)buf, (void)count, (void)dt, (void)req;
  return none(msg);
}

int graft__dist_test(graft__dist_req *req, int try_lock, char *msg) {
  (void)req, (void)try_lock;
  return (int)none(msg);
}

graft_status graft__dist_wait(graft__dist_req *req, double start_us, int64_t timeout_s,
                              char *msg) {
  (void)req, (void)start_us, (void)timeout_s;
  return none(msg);
}

graft_status graft__dist_vote(const unsigned char *comm, int64_t timeout_s, graft_status *st,
                              int *who, char *msg) {
  (void)comm, (void)timeout_s, (void)st, (void)who;
  return none(msg);
}
