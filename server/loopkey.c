#include "loopkey.h"

#include <pthread.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint8_t key[KVI_AUTH_LOOPBACK_KEY_LEN];
static int have_key;

static void make_key(void)
{
	have_key = kvi_auth_random(key, sizeof(key)) == 0;
}

const uint8_t *kvs_loopkey(void)
{
	/* Once: the main thread (the gate) and the connect threads must agree. */
	pthread_once(&once, make_key);
	return have_key ? key : NULL;
}
