/* The device and the address the listener serves: binding the listen address,
 * choosing the RDMA device for a wildcard bind and saying why neither worked,
 * and the addresses the owner asks for afterwards (the port bound, an address
 * its own loopbacks can reach). Private parts: listener_impl.h. */
#include "listener_impl.h"

#include <errno.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#include "kvclient_errors.h"

/* Choose the device for a wildcard bind: the named one, else the only one with
 * atomics. */
static int pick_device(struct kvi_listener *l, const struct kvi_listen_opts *o, struct kvi_errbuf *e)
{
	char names[256];
	int n = 0, usable = 0;

	l->devs = rdma_get_devices(&n);
	kvi_device_names(names, sizeof(names));
	for (int i = 0; l->devs && i < n; i++) {
		struct ibv_device_attr a;

		if (o->device) {
			if (strcmp(ibv_get_device_name(l->devs[i]->device), o->device) == 0)
				l->ctx = l->devs[i];
			continue;
		}
		if (ibv_query_device(l->devs[i], &a) == 0 && a.atomic_cap != IBV_ATOMIC_NONE) {
			usable++;
			if (!l->ctx)
				l->ctx = l->devs[i];
		}
	}
	if (o->device && !l->ctx) {
		kvi_errbuf_set(e, "RDMA device '%s' not found (available: %s): name one of these with -d/--device",
			       o->device, names);
		return KVC_ENODEV;
	}
	if (n == 0) {
		kvi_errbuf_set(e, "no RDMA device found: attach an RDMA NIC or create Soft-RoCE "
			       "(deploy/rdma-env does it for tests)");
		return KVC_ENODEV;
	}
	if (!o->device && usable == 0) {
		/* Let the capability check say precisely what is missing. */
		l->ctx = l->devs[0];
	} else if (!o->device && usable > 1) {
		kvi_errbuf_set(e, "several RDMA devices can serve (%s): choose one with -d/--device "
			       "or bind an address on it with -l/--listen", names);
		return KVC_EINVAL;
	}
	return 0;
}

static int is_loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
	return a->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

/* Can a fresh id (on channel ch; NULL: its own) bind address a on some
 * port (port 0: any), and, with dev, on that device? */
static int bind_probe(struct rdma_event_channel *ch, const struct sockaddr *a, size_t len, struct ibv_device *dev)
{
	struct sockaddr_storage ss = { 0 };
	struct rdma_cm_id *id;
	int ok;

	if (len > sizeof(ss) || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return 0;
	memcpy(&ss, a, len);
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = 0;
	else if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	ok = rdma_bind_addr(id, (struct sockaddr *)&ss) == 0 && (!dev || (id->verbs && id->verbs->device == dev));
	rdma_destroy_id(id);
	return ok;
}

/* Why rdma_bind_addr failed, as the operator needs it. rdma_cm reports a port
 * that another listener holds as EADDRNOTAVAIL, just like an address that is
 * on no RDMA interface (EADDRINUSE only when the exact address is taken), so
 * the address is tried again on another port to tell the two apart. */
static int bind_error(struct rdma_event_channel *ch, const struct rdma_addrinfo *ai, const char *where,
		      const char *port, int err, struct kvi_errbuf *e)
{
	if (err == EADDRINUSE || (err == EADDRNOTAVAIL && bind_probe(ch, ai->ai_src_addr, ai->ai_src_len, NULL))) {
		kvi_errbuf_set(e, "cannot listen on %s port %s: the port is in use (another kvserver?): stop "
			       "that one or choose another port with -p", where, port);
		return KVC_EINVAL;
	}
	if (err == EADDRNOTAVAIL || err == ENODEV) {
		kvi_errbuf_set(e, "cannot listen on %s: the address is not on an RDMA-capable interface here: give "
			       "-l the address of one (rdma link shows them)", where);
		return KVC_ENODEV;
	}
	kvi_errbuf_set(e, "cannot bind %s port %s: %s", where, port, strerror(err));
	return KVC_ESYS;
}

/* -d names a device the listen address is not on: say whether it exists. */
static int device_mismatch(const char *where, const char *bound, const char *want, struct kvi_errbuf *e)
{
	struct ibv_context **devs;
	char names[256];
	int n = 0, exists = 0;

	devs = rdma_get_devices(&n);
	for (int i = 0; devs && i < n; i++)
		exists |= strcmp(ibv_get_device_name(devs[i]->device), want) == 0;
	if (devs)
		rdma_free_devices(devs);
	kvi_device_names(names, sizeof(names));
	if (!exists)
		kvi_errbuf_set(e, "RDMA device '%s' not found (available: %s): name one of these with -d/--device, "
			       "or drop -d (listen address %s is on %s)", want, names, where, bound);
	else
		kvi_errbuf_set(e, "listen address %s is on RDMA device %s, not %s: drop -d, or give -l an address "
			       "of %s", where, bound, want, want);
	return KVC_ENODEV;
}

/* Bind the listen address (where: as the operator wrote it) and settle the
 * device it serves: the address's own, or for a wildcard bind the one
 * pick_device chooses; its capabilities checked and kept in l->attr. */
int kvi_listener_bind(struct kvi_listener *l, const struct kvi_listen_opts *o, const char *where,
		      struct kvi_errbuf *e)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *ai = NULL;
	int rc;

	rc = rdma_getaddrinfo(where, o->port, &hints, &ai);
	if (rc) {
		kvi_errbuf_set(e, "cannot use listen address %s port %s: %s", where, o->port,
			       rc == -1 ? strerror(errno) : gai_strerror(rc));
		rc = KVC_EINVAL;
		goto out;
	}
	if (rdma_bind_addr(l->id, ai->ai_src_addr)) {
		rc = bind_error(l->ch, ai, where, o->port, errno, e);
		goto out;
	}
	if (is_loopback(ai->ai_src_addr)) {
		/* rdma_cm binds it (with no device: the only one with atomics
		 * is then picked), but no client can reach it and the
		 * reclaimer's own connection to it fails forever. */
		kvi_errbuf_set(e, "cannot listen on %s: it is a loopback address, which RDMA cannot connect to: "
			       "give -l the address of an RDMA-capable interface (rdma link shows them)", where);
		rc = KVC_ENODEV;
		goto out;
	}
	if (l->id->verbs) {
		/* Bound to one address: its device is the device. */
		l->ctx = l->id->verbs;
		if (o->device && strcmp(o->device, ibv_get_device_name(l->ctx->device)) != 0) {
			rc = device_mismatch(where, ibv_get_device_name(l->ctx->device), o->device, e);
			goto out;
		}
	} else {
		rc = pick_device(l, o, e);
		if (rc)
			goto out;
	}
	rc = kvi_check_device(l->ctx, &l->attr, e);
out:
	if (ai)
		rdma_freeaddrinfo(ai);
	return rc;
}

/* a's address, numeric ("?" for another family). */
const char *kvi_listener_sa_addr(const struct sockaddr *a, char *buf, size_t n)
{
	snprintf(buf, n, "?");
	if (a->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, buf, (socklen_t)n);
	else if (a->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, buf, (socklen_t)n);
	return buf;
}

const char *kvi_listener_device(const struct kvi_listener *l)
{
	return ibv_get_device_name(l->ctx->device);
}

int kvi_listener_self_addr(const struct kvi_listener *l, char *buf, size_t len)
{
	struct ifaddrs *ifs, *i;
	int found = 0;

	if (l->id->verbs) { /* bound to one address */
		kvi_listener_sa_addr(rdma_get_local_addr(l->id), buf, len);
		return 0;
	}
	if (getifaddrs(&ifs))
		return KVC_ENODEV;
	/* IPv4 first: a link-local IPv6 address would need its scope named. */
	for (int fam = 0; fam < 2 && !found; fam++)
		for (i = ifs; i && !found; i = i->ifa_next) {
			struct sockaddr *a = i->ifa_addr;

			if (!a || a->sa_family != (fam ? AF_INET6 : AF_INET) || is_loopback(a) ||
			    (a->sa_family == AF_INET6 &&
			     IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)a)->sin6_addr)))
				continue;
			/* Its own event channel: no event reaches the loop's. */
			found = bind_probe(NULL, a, fam ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
					   l->ctx->device);
			if (found)
				kvi_listener_sa_addr(a, buf, len);
		}
	freeifaddrs(ifs);
	return found ? 0 : KVC_ENODEV;
}

uint16_t kvi_listener_port(const struct kvi_listener *l)
{
	return ntohs(rdma_get_src_port(l->id));
}
