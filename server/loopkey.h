/* The server's loopback key: 32 random bytes made once per process, never
 * written anywhere and never on the wire. The server's own connections to its
 * region (fence.c, reclaim_thread.c) prove themselves with it (auth.h), so that no
 * peer can join as the loopback by saying so. */
#ifndef KVS_LOOPKEY_H
#define KVS_LOOPKEY_H

#include <stdint.h>

#include "auth.h"

/* KVI_AUTH_LOOPBACK_KEY_LEN bytes, the same for every caller in this process;
 * NULL if the kernel gave no random bytes (then no loopback can join). */
const uint8_t *kvs_loopkey(void);

#endif
