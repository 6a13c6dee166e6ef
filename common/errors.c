/* kvc_strerror / kvc_err_name, generated from KVC_ERRNO_MAP. */
#include "kvclient_errors.h"

const char *kvc_strerror(int err)
{
	switch (err) {
	case KVC_OK:
		return "success";
#define KVC_STRERROR_CASE_(name, val, msg) \
	case KVC_##name:                     \
		return msg;
		KVC_ERRNO_MAP(KVC_STRERROR_CASE_)
#undef KVC_STRERROR_CASE_
	}
	return "unknown error code";
}

const char *kvc_err_name(int err)
{
	switch (err) {
	case KVC_OK:
		return "KVC_OK";
#define KVC_ERRNAME_CASE_(name, val, msg) \
	case KVC_##name:                    \
		return "KVC_" #name;
		KVC_ERRNO_MAP(KVC_ERRNAME_CASE_)
#undef KVC_ERRNAME_CASE_
	}
	return "KVC_UNKNOWN";
}
