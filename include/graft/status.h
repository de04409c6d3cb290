/* graft: status codes and the per-thread last error.
 *
 * Every fallible graft call returns a graft_status: GRAFT_OK (0) on success,
 * a negative code on failure.  Numbers are never reused.  The detailed
 * message of a failure lives on the handle that failed where there is one
 * (graft_function_errmsg, graft_trace_errmsg).  Calls that have no handle to
 * hold it (graft_tensor_create, graft_runtime_create, graft_function_create,
 * a call given a NULL handle, ...) leave it in a per-thread last error,
 * graft_last_errmsg; there is no process-wide one.
 */
#ifndef GRAFT_STATUS_H
#define GRAFT_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define GRAFT_API __declspec(dllexport)
#else
#define GRAFT_API __attribute__((visibility("default")))
#endif

/* X(NAME, number, message): the one list that makes the enum and the table. */
#define GRAFT_STATUS_MAP(X)                                                  \
  X(OK, 0, "success")                                                        \
  X(EINVAL, -1, "invalid argument")                                          \
  X(ENOMEM, -2, "out of memory")                                             \
  X(ESHAPE, -3, "incompatible shapes")                                       \
  X(EDTYPE, -4, "unsupported or mismatched dtype")                           \
  X(EMISUSE, -5, "API misuse (wrong state, foreign or destroyed handle)")    \
  X(EUNSUPPORTED, -6, "operation not supported")                             \
  X(ECANCELED, -7, "operation canceled")                                     \
  X(EIO, -8, "input/output error")                                           \
  X(ECORRUPT, -9, "corrupt data")                                            \
  X(EINTERNAL, -10, "internal error")

typedef enum graft_status {
#define GRAFT_STATUS_ENUM_(name, num, msg) GRAFT_##name = (num),
  GRAFT_STATUS_MAP(GRAFT_STATUS_ENUM_)
#undef GRAFT_STATUS_ENUM_
} graft_status;

/* A static string describing s ("out of memory"); never NULL, never freed. */
GRAFT_API const char *graft_status_str(graft_status s);

/* The enum name of s ("GRAFT_ENOMEM"); never NULL, never freed. */
GRAFT_API const char *graft_status_name(graft_status s);

/* The message of the calling thread's last failing graft call, e.g.
 * "graft_tensor_create: rank 9 is out of range (expected 0..8)", like
 * dlerror() but per thread and not cleared by reading it.
 *
 * Which calls set it: every public call that can fail, except the ops and
 * gradient builders inside a trace (those keep a sticky error on the trace,
 * graft_trace_errmsg, which graft_function_call then reports), sets it when
 * it fails, naming itself, the argument, its value and what was expected.
 * graft_function_call copies graft_function_errmsg(f) here on every
 * failure, so this is always the thread's latest failure.
 *
 * A call that succeeds leaves it as it was, like errno: check the status
 * first and read the message only after a failure.
 *
 * Thread-local: each thread sees only its own failures, so threads may fail
 * at once.  Never NULL; "" while no graft call has failed on this thread.
 * The string belongs to graft and stays valid and unchanged until this
 * thread's next failing graft call or its exit; copy it to keep it longer. */
GRAFT_API const char *graft_last_errmsg(void);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_STATUS_H */
