#include "harness.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "kvclient.h"
#include "rmem_verbs.h"

static long now_ms(void)
{
	return (long)(kvi_mono_ns() / 1000000u);
}

int kvt_start(struct kvt_proc *p, char *const argv[])
{
	int fds[2];

	pid_t parent = getpid();

	memset(p, 0, sizeof(*p));
	if (pipe(fds))
		return -1;
	p->pid = fork();
	if (p->pid < 0)
		return -1;
	if (p->pid == 0) {
		/* Dies with the test: a failed assertion ends the test before
		 * it stops what it started, and a kvserver left running would
		 * hold its port against the next suite. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
			_exit(127);
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		close(fds[0]);
		close(fds[1]);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	p->out = fds[0];
	return 0;
}

/* Read what is available within the deadline; 0 on data, -1 on EOF/timeout. */
static int fill(struct kvt_proc *p, long deadline)
{
	struct pollfd pf = { .fd = p->out, .events = POLLIN };
	long left = deadline - now_ms();
	ssize_t n;

	if (left < 0 || poll(&pf, 1, (int)left) <= 0)
		return -1;
	if (p->len == sizeof(p->buf))
		p->len = 0; /* a runaway line: drop it rather than stall */
	n = read(p->out, p->buf + p->len, sizeof(p->buf) - p->len);
	if (n <= 0)
		return -1;
	if (p->all_len + (size_t)n < sizeof(p->all)) {
		memcpy(p->all + p->all_len, p->buf + p->len, (size_t)n);
		p->all_len += (size_t)n;
		p->all[p->all_len] = '\0';
	}
	p->len += (size_t)n;
	return 0;
}

int kvt_line(struct kvt_proc *p, char *line, size_t len, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;

	for (;;) {
		char *nl = memchr(p->buf, '\n', p->len);

		if (nl) {
			size_t l = (size_t)(nl - p->buf);

			snprintf(line, len, "%.*s", (int)l, p->buf);
			memmove(p->buf, nl + 1, p->len - l - 1);
			p->len -= l + 1;
			return 0;
		}
		if (fill(p, deadline))
			return -1;
	}
}

int kvt_wait(struct kvt_proc *p, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	int st;

	for (;;) {
		pid_t r = waitpid(p->pid, &st, WNOHANG);

		if (r == p->pid)
			break;
		if (now_ms() > deadline) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &st, 0);
			p->pid = 0;
			return -1;
		}
		if (fill(p, now_ms() + 20))
			usleep(10000);
	}
	while (fill(p, now_ms() + 50) == 0)
		;
	close(p->out);
	p->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void kvt_kill(struct kvt_proc *p, int sig)
{
	if (p->pid > 0)
		kill(p->pid, sig);
}

unsigned kvt_start_peer(struct kvt_proc *p, const char *const extra[])
{
	char *argv[16] = { KV_PEER_BIN, "--addr", (char *)kvt_rdma_addr() };
	char line[256];
	unsigned port = 0;
	int n = 3;

	for (int i = 0; extra && extra[i] && n < 15; i++)
		argv[n++] = (char *)extra[i];
	cr_assert_eq(kvt_start(p, argv), 0);
	if (kvt_line(p, line, sizeof(line), 30000) || sscanf(line, "READY %u", &port) != 1)
		cr_assert_fail("rmem_peer did not start: %s", p->all);
	return port;
}

const char *kvt_rdma_addr(void)
{
	const char *a = getenv("RDMA_ADDR");

	return a && *a ? a : NULL;
}

const char *kvt_rdma_dev(void)
{
	const char *d = getenv("RDMA_DEV");

	return d && *d ? d : NULL;
}

void kvt_require_rdma(void)
{
	const char *req = getenv("KV_REQUIRE_RDMA");

	if (kvt_rdma_addr())
		return;
	if (req && strcmp(req, "1") == 0)
		cr_assert_fail("RDMA_ADDR is not set: run the verbs tests under deploy/rdma-env");
	cr_skip_test("no RDMA environment (RDMA_ADDR unset): run under deploy/rdma-env");
}

void kvt_start_server(struct kvt_proc *p, const char *port, const char *const extra[])
{
	kvt_start_server_on(p, kvt_rdma_addr(), port, extra);
}

void kvt_start_server_on(struct kvt_proc *p, const char *listen, const char *port, const char *const extra[])
{
	kvt_start_server_bin(p, KV_SERVER_BIN, listen, port, extra);
}

void kvt_start_server_bin(struct kvt_proc *p, const char *bin, const char *listen, const char *port,
			  const char *const extra[])
{
	char *argv[24] = { (char *)bin, "-p", (char *)port, "-m", "64" };
	char line[512];
	int n = 5;

	if (listen) {
		argv[n++] = "-l";
		argv[n++] = (char *)listen;
	}

	for (int i = 0; extra && extra[i] && n < 23; i++)
		argv[n++] = (char *)extra[i];
	cr_assert_eq(kvt_start(p, argv), 0);
	for (;;) {
		if (kvt_line(p, line, sizeof(line), 60000))
			cr_assert_fail("kvserver did not start: %s", p->all);
		if (strstr(line, "listening on"))
			return;
	}
}

/* utime + stime of a /proc .../stat file, and its command name. */
static unsigned long long stat_ticks(const char *path, char *name, size_t name_len)
{
	char buf[1024], *p, *q;
	unsigned long long ut = 0, st = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return 0;
	}
	fclose(f);
	/* Fields after the command name (which may contain spaces): state is 3rd;
	 * utime and stime are the 14th and 15th. */
	p = strrchr(buf, ')');
	q = strchr(buf, '(');
	if (!p || !q || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	if (name)
		snprintf(name, name_len, "%.*s", (int)(p - q - 1), q + 1);
	return ut + st;
}

unsigned long long kvt_cpu_ticks(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return stat_ticks(path, NULL, 0);
}

unsigned kvt_threads_cpu(pid_t pid, struct kvt_thread_cpu *out, unsigned max)
{
	char path[96];
	struct dirent *d;
	unsigned n = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return 0;
	while (n < max && (d = readdir(dir))) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/stat", (int)pid, d->d_name);
		out[n].tid = atoi(d->d_name);
		out[n].ticks = stat_ticks(path, out[n].name, sizeof(out[n].name));
		n++;
	}
	closedir(dir);
	return n;
}

void kvt_threads_cpu_diff(const struct kvt_thread_cpu *a, unsigned na, const struct kvt_thread_cpu *b, unsigned nb,
			  char *out, size_t len)
{
	size_t at = 0;

	out[0] = '\0';
	for (unsigned i = 0; i < nb && at < len; i++) {
		unsigned long long before = 0;

		for (unsigned j = 0; j < na; j++)
			if (a[j].tid == b[i].tid)
				before = a[j].ticks;
		at += (size_t)snprintf(out + at, len - at, "%s%s %llu", i ? ", " : "", b[i].name, b[i].ticks - before);
	}
}

struct kvc *kvt_kv_connect(const char *port, unsigned depth, unsigned cache_entries)
{
	char server[128], err[400];
	struct kvc_opts o;
	kvc_t *h;

	snprintf(server, sizeof(server), "%s:%s", kvt_rdma_addr(), port);
	kvc_opts_init(&o);
	o.server = server;
	o.depth = depth;
	o.cache_entries = cache_entries;
	o.op_timeout_ms = 10000;
	cr_assert_eq(kvc_create(&o, &h, err, sizeof(err)), 0, "%s", err);
	return h;
}

struct kvi_rmem *kvt_rmem_connect(const char *port)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_welcome w;
	struct kvi_rmem *rm;

	cr_assert_eq(kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = kvt_rdma_addr(), .port = port,
								    .lbuf_size = 1 << 16, .timeout_ms = 20000 },
					    &rm, &w, &e),
		     0, "%s", e.msg);
	return rm;
}
