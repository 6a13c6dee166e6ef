/* The error table: every code has its own name and a real message. */
#include <criterion/criterion.h>
#include <string.h>

#include "kvclient_errors.h"

static const int codes[] = {
#define X(name, val, msg) KVC_##name,
	KVC_ERRNO_MAP(X)
#undef X
};

Test(errors, every_code_is_negative_named_and_described)
{
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		cr_expect_lt(codes[i], 0, "code %d", codes[i]);
		cr_expect_str_neq(kvc_strerror(codes[i]), "unknown error code", "code %d", codes[i]);
		cr_expect_eq(strncmp(kvc_err_name(codes[i]), "KVC_E", 5), 0, "%s", kvc_err_name(codes[i]));
	}
}

Test(errors, codes_and_names_are_distinct)
{
	size_t n = sizeof(codes) / sizeof(codes[0]);

	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			cr_expect_neq(codes[i], codes[j]);
			cr_expect_str_neq(kvc_err_name(codes[i]), kvc_err_name(codes[j]));
		}
}

Test(errors, unknown_code_gets_generic_text)
{
	cr_expect_str_eq(kvc_strerror(-9999), "unknown error code");
	cr_expect_str_eq(kvc_err_name(12345), "KVC_UNKNOWN");
	cr_expect_str_eq(kvc_strerror(0), "success");
}
