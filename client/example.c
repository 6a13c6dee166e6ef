/* The smallest libkvclient program: prints the library version and what an
 * error code means. Copy it as a starting point. */
#include <stdio.h>

#include <kvclient.h>

int main(void)
{
	printf("libkvclient %s\n", kvc_version());
	printf("%s: %s\n", kvc_err_name(KVC_ENOTFOUND), kvc_strerror(KVC_ENOTFOUND));
	return 0;
}
