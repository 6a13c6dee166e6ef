/* Target URLs: which driver, which host and port; and handing requests over. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

static const struct {
	const struct kvb_driver *drv;
	const char *default_port;
} drivers[] = {
	{ &kvb_driver_rdma, "7471" },
	{ &kvb_driver_memcached, "11211" },
	{ &kvb_driver_local, "0" },
};

int kvb_multi_target;

/* "HOST[:PORT],HOST[:PORT],..." (items s[0..len)): each well formed. */
static int list_ok(const char *s, char *err, size_t errlen, const char *url)
{
	while (*s) {
		const char *end = strchr(s, ','), *colon;
		size_t len = end ? (size_t)(end - s) : strlen(s);

		colon = memchr(s, ':', len);
		if (len == 0 || colon == s ||
		    (colon && (colon + 1 == s + len || strspn(colon + 1, "0123456789") != (size_t)(s + len - colon - 1) ||
			       strtoul(colon + 1, NULL, 10) == 0 || strtoul(colon + 1, NULL, 10) > 65535))) {
			snprintf(err, errlen, "malformed server '%.*s' in target '%s': expected HOST[:PORT] with a port of 1..65535",
				 (int)len, s, url);
			return 0;
		}
		s += len + (end != NULL);
		if (end && !*s) {
			snprintf(err, errlen, "malformed target '%s': a trailing comma", url);
			return 0;
		}
	}
	return 1;
}

const struct kvb_driver *kvb_driver_parse(const char *url, char *host, size_t hl, char *port, size_t pl,
					  char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof(drivers) / sizeof(drivers[0]); i++) {
		size_t sl = strlen(drivers[i].drv->scheme);
		const char *hp, *colon;
		size_t hlen;

		if (strncmp(url, drivers[i].drv->scheme, sl) != 0 || strncmp(url + sl, "://", 3) != 0)
			continue;
		hp = url + sl + 3;
		/* Several servers: the list is the "host", and there is no port. */
		if (strchr(hp, ',') && drivers[i].drv != &kvb_driver_local) {
			if (strlen(hp) >= hl || strchr(hp, '/') || strchr(hp, '[')) {
				snprintf(err, errlen, "malformed target '%s': expected %s://HOST[:PORT],HOST[:PORT],... "
					 "(up to %zu characters, IPv4 or names)", url, drivers[i].drv->scheme, hl - 1);
				return NULL;
			}
			if (!list_ok(hp, err, errlen, url))
				return NULL;
			snprintf(host, hl, "%s", hp);
			if (pl)
				port[0] = '\0';
			kvb_multi_target = 1;
			return drivers[i].drv;
		}
		colon = strrchr(hp, ':');
		hlen = colon ? (size_t)(colon - hp) : strlen(hp);
		if (hlen == 0 || hlen >= hl || strchr(hp, '/') ||
		    (colon && (!colon[1] || strlen(colon + 1) >= pl ||
			       strspn(colon + 1, "0123456789") != strlen(colon + 1)))) {
			snprintf(err, errlen, "malformed target '%s': expected %s://HOST[:PORT]", url,
				 drivers[i].drv->scheme);
			return NULL;
		}
		if (colon && (strtoul(colon + 1, NULL, 10) == 0 || strtoul(colon + 1, NULL, 10) > 65535)) {
			snprintf(err, errlen, "bad port in target '%s': expected 1..65535", url);
			return NULL;
		}
		memcpy(host, hp, hlen);
		host[hlen] = '\0';
		snprintf(port, pl, "%s", colon ? colon + 1 : drivers[i].default_port);
		return drivers[i].drv;
	}
	snprintf(err, errlen, "unsupported target '%s': expected rdma://HOST[:PORT][,...], memcached://HOST[:PORT][,...] or local://MIB", url);
	return NULL;
}

int kvb_submit_many(const struct kvb_driver *d, void *conn, struct kvb_req **r, unsigned n)
{
	unsigned i = 0;

	if (d->submit_many)
		return d->submit_many(conn, r, n);
	while (i < n && (r[i]->status = d->submit(conn, r[i])) == 0)
		i++;
	return (int)i;
}
