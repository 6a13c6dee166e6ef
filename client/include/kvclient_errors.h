/* libkvclient error codes.
 *
 * Every libkvclient call returns 0 on success or one of these negative codes.
 * The table below is the single source of truth: the enum and kvc_strerror()
 * are both generated from it, so the code and its message never drift apart. */
#ifndef KVCLIENT_ERRORS_H
#define KVCLIENT_ERRORS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVC_BUILDING_LIBRARY)
#define KVC_EXPORT __attribute__((visibility("default")))
#else
#define KVC_EXPORT
#endif

/* X(name, value, message) */
#define KVC_ERRNO_MAP(X)                                                                    \
	X(ENOTFOUND, -1, "key not found")                                                   \
	X(EKEYSIZE, -2, "key is empty or longer than 250 bytes")                            \
	X(EVALSIZE, -3, "value larger than a segment can hold")                             \
	X(ENOMEM, -4, "out of memory")                                                      \
	X(ETIMEDOUT, -5, "operation timed out")                                             \
	X(ESERVERGONE, -6, "server gone: connection lost or peer not responding")           \
	X(EAUTH, -7, "authentication refused by server: wrong secret")                     \
	X(EINVAL, -8, "invalid argument")                                                   \
	X(EUNREACHABLE, -9, "server unreachable: no route, no listener or connection refused") \
	X(ENODEV, -10, "RDMA device not found")                                             \
	X(ENOTSUP, -11, "RDMA device lacks a required capability")                          \
	X(EPROTO, -12, "protocol error: malformed or incompatible message from peer")       \
	X(ERANGE, -13, "remote access out of bounds or not permitted")                      \
	X(EIO, -14, "RDMA operation failed")                                                \
	X(EAGAIN, -15, "too many operations in flight: poll completions first")             \
	X(EINDEXFULL, -16, "index full: both candidate buckets are full")                   \
	X(ECORRUPT, -17, "remote data failed verification on every retry")                 \
	X(ESYS, -18, "system resource error (see log for the failing call)")                \
	X(ETRUNC, -19, "value larger than the buffer given: the needed length is reported") \
	X(EBUSY, -20, "asynchronous operations in flight: blocking calls need an idle handle") \
	X(EUNKNOWN, -21, "outcome unknown: the write was sent but its completion was lost; it may have taken effect") \
	X(EQUOTA, -22, "memory quota reached: this client already holds its share of the server's memory") \
	X(ENOAUTH, -23, "server requires authentication: give a secret file")               \
	X(ESTALE, -24, "proof timestamp outside the server's window: check the clocks")     \
	X(EREPLAY, -25, "proof already used: the server saw this hello before")             \
	X(EFENCED, -26, "fenced: this client's lease ran out (it stalled or lost the server) and the server cut it off; the handle rejoins on the next call") \
	X(ENOTSTORED, -27, "not stored: add found the key present, or replace found it absent") \
	X(EEXISTS, -28, "exists: the item changed since its CAS unique was read; nothing was stored") \
	X(ENONNUMERIC, -29, "cannot increment or decrement a non-numeric value")

enum kvc_errno {
	KVC_OK = 0,
#define KVC_ERRNO_ENUM_(name, val, msg) KVC_##name = (val),
	KVC_ERRNO_MAP(KVC_ERRNO_ENUM_)
#undef KVC_ERRNO_ENUM_
};

/* Text for a code returned by any kvc_ call; never NULL. Unknown codes get a
 * generic text. The returned string is static. */
KVC_EXPORT const char *kvc_strerror(int err);

/* Symbolic name of a code ("KVC_ENOTFOUND"), for logs and JSON; never NULL. */
KVC_EXPORT const char *kvc_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif
