#include "errbuf.h"

#include <stdarg.h>
#include <stdio.h>

void kvi_errbuf_set(struct kvi_errbuf *e, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
}
