/* libkvclient: the client of a remote key-value cache whose data path is
 * one-sided RDMA (GET = RDMA READ, PUT/DELETE = RDMA CAS locks + WRITE).
 *
 * Conventions: every call returns 0 or a negative KVC_ code (kvclient_errors.h);
 * constructors hand objects back through an out-parameter; destroy functions
 * accept NULL. The library never prints, never exits, and starts no threads. */
#ifndef KVCLIENT_H
#define KVCLIENT_H

#include "kvclient_errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVC_VERSION_MAJOR 0
#define KVC_VERSION_MINOR 1
#define KVC_VERSION_PATCH 0

/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
KVC_EXPORT const char *kvc_version(void);

enum kvc_log_level { KVC_LOG_ERROR = 0, KVC_LOG_WARN, KVC_LOG_INFO, KVC_LOG_DEBUG };
typedef void (*kvc_log_fn)(void *arg, int level, const char *msg);

/* Route the library's diagnostics (connection failures in detail, device
 * choices) to fn, for levels up to max_level. Call before creating handles;
 * NULL silences the library (the default). */
KVC_EXPORT void kvc_set_log(kvc_log_fn fn, void *arg, int max_level);

#ifdef __cplusplus
}
#endif
#endif
