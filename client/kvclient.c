/* Library-wide entry points of libkvclient. */
#include "kvclient.h"

#include "log.h"

#define KVC_STR_(x) #x
#define KVC_STR(x) KVC_STR_(x)

const char *kvc_version(void)
{
	return KVC_STR(KVC_VERSION_MAJOR) "." KVC_STR(KVC_VERSION_MINOR) "." KVC_STR(KVC_VERSION_PATCH);
}

void kvc_set_log(kvc_log_fn fn, void *arg, int max_level)
{
	kvi_log_set(fn, arg, max_level);
}
