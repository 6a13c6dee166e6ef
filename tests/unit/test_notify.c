/* kvs_notify: the sd_notify datagram reaches a socket named by NOTIFY_SOCKET,
 * both a path and an abstract ('@') name, and bad values are refused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"

/* A datagram socket bound to `name` (path, or '@' abstract name), standing in
 * for systemd's notification socket; reads time out after a second, so a
 * missing message fails the test instead of hanging it. */
static int listen_at(const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 1 };
	size_t n = strlen(name);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
	memcpy(sa.sun_path, name, n);
	if (name[0] == '@')
		sa.sun_path[0] = '\0';
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa,
			  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] != '@'))), 0,
		     "bind %s: %s", name, strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void expect_message(int fd, const char *want)
{
	char buf[256];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);

	cr_assert_geq(n, 0, "no datagram arrived: %s", strerror(errno));
	buf[n] = '\0';
	cr_expect_str_eq(buf, want);
}

Test(notify, ready_reaches_a_path_socket)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/kv-notify-test.%d", (int)getpid());
	unlink(path);
	fd = listen_at(path);
	setenv("NOTIFY_SOCKET", path, 1);
	cr_expect_eq(kvs_notify("READY=1"), 0);
	expect_message(fd, "READY=1");
	cr_expect_eq(kvs_notify("STOPPING=1"), 0);
	expect_message(fd, "STOPPING=1");
	close(fd);
	unlink(path);
}

Test(notify, ready_reaches_an_abstract_socket)
{
	char name[64];
	int fd;

	snprintf(name, sizeof(name), "@kv-notify-test/%d", (int)getpid());
	fd = listen_at(name);
	setenv("NOTIFY_SOCKET", name, 1);
	cr_expect_eq(kvs_notify("READY=1"), 0);
	expect_message(fd, "READY=1");
	close(fd);
}

Test(notify, unset_or_empty_socket_is_nothing_to_do)
{
	unsetenv("NOTIFY_SOCKET");
	cr_expect_eq(kvs_notify("READY=1"), 0);
	setenv("NOTIFY_SOCKET", "", 1);
	cr_expect_eq(kvs_notify("READY=1"), 0);
}

Test(notify, bad_addresses_are_refused)
{
	char longpath[200];

	setenv("NOTIFY_SOCKET", "relative/path", 1);
	cr_expect_eq(kvs_notify("READY=1"), -EINVAL);
	setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
	cr_expect_eq(kvs_notify("READY=1"), -EAFNOSUPPORT);
	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	setenv("NOTIFY_SOCKET", longpath, 1);
	cr_expect_eq(kvs_notify("READY=1"), -EINVAL);
	/* Nobody listens there: the error comes back, nothing is printed. */
	setenv("NOTIFY_SOCKET", "/nonexistent-dir/kv-notify", 1);
	cr_expect_eq(kvs_notify("READY=1"), -ENOENT);
}
