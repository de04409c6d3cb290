/* graft: status codes.
 *
 * Every fallible graft call returns a graft_status: GRAFT_OK (0) on success,
 * a negative code on failure.  Numbers are never reused.  The detailed message
 * of a failure lives on the handle that failed (graft_function_errmsg, ...),
 * never in a process-wide "last error".
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

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_STATUS_H */
