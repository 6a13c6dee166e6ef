/* sd_notify's datagram protocol, without libsystemd (notify.h). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"

int kvs_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len;
	size_t n;
	ssize_t sent;
	int fd, rc = 0;

	if (!path || !*path)
		return 0;
	if (path[0] != '/' && path[0] != '@')
		return strchr(path, ':') ? -EAFNOSUPPORT : -EINVAL;
	n = strlen(path);
	/* A path needs its terminating NUL inside sun_path; an abstract name
	 * is exactly its bytes (the address length says where it ends). */
	if (n >= sizeof(sa.sun_path) + (path[0] == '@'))
		return -EINVAL;
	memcpy(sa.sun_path, path, n);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));

	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* MSG_NOSIGNAL: a manager that went away must not kill us with SIGPIPE. */
	sent = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&sa, len);
	if (sent < 0)
		rc = -errno;
	else if ((size_t)sent != strlen(state))
		rc = -EMSGSIZE;
	close(fd);
	return rc;
}
