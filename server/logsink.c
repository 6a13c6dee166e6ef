#define _GNU_SOURCE /* dup3 */
#include "logsink.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "logfmt.h"

static int open_log(const char *path)
{
	return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
}

int kvs_logsink_open(struct kvs_logsink *s, const char *path, struct kvi_errbuf *e)
{
	s->path = path;
	s->fd = STDERR_FILENO;
	if (!path)
		return 0;
	s->fd = open_log(path);
	if (s->fd < 0) {
		kvi_errbuf_set(e, "cannot open log file %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

int kvs_logsink_reopen(struct kvs_logsink *s, struct kvi_errbuf *e)
{
	int fd;

	if (!s->path)
		return 0;
	fd = open_log(s->path);
	if (fd < 0) {
		kvi_errbuf_set(e, "cannot reopen log file %s: %s", s->path, strerror(errno));
		return -1;
	}
	/* Atomic for concurrent writers: a write lands in the old file or the new one. */
	if (dup3(fd, s->fd, O_CLOEXEC) < 0) {
		kvi_errbuf_set(e, "cannot reopen log file %s: dup3: %s", s->path, strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

void kvs_logsink_close(struct kvs_logsink *s)
{
	if (s->path && s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

void kvs_logsink_write(void *arg, int level, const char *event, const char *body)
{
	struct kvs_logsink *s = arg;
	struct timespec ts;
	char line[1024];
	size_t len;
	ssize_t w;

	clock_gettime(CLOCK_REALTIME, &ts);
	len = kvi_logfmt_line(line, sizeof(line), &ts, level, event, body);
	do
		w = write(s->fd, line, len);
	while (w < 0 && errno == EINTR);
	/* A log that cannot be written is dropped: nothing else could report it. */
}
