/* Helpers for tests that drive real processes: start one with its output on a
 * pipe, read its lines with a deadline, stop it, and find the RDMA environment
 * chosen by deploy/rdma-env. */
#ifndef KVT_HARNESS_H
#define KVT_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

struct kvt_proc {
	pid_t pid;
	int out; /* read end of the child's stdout+stderr */
	char buf[8192];
	size_t len; /* bytes buffered, not yet returned as lines */
	char all[32768]; /* everything read so far, for failure messages (logfmt lines are long) */
	size_t all_len;
};

/* fork+exec argv (NULL-terminated); stdout and stderr both go to p->out. */
int kvt_start(struct kvt_proc *p, char *const argv[]);
/* Next line (without newline) within timeout_ms: 0, or -1 on EOF/timeout. */
int kvt_line(struct kvt_proc *p, char *line, size_t len, int timeout_ms);
/* Wait for exit within timeout_ms (SIGKILL after); returns the exit status
 * (0..255), 128+signal, or -1 if it had to be killed. Drains output into p->all. */
int kvt_wait(struct kvt_proc *p, int timeout_ms);
void kvt_kill(struct kvt_proc *p, int sig);

/* Start an rmem_peer with extra arguments; returns its port, or aborts the test. */
unsigned kvt_start_peer(struct kvt_proc *p, const char *const extra[]);

/* Start kvserver on RDMA_ADDR:port (-m 64 unless extra says otherwise) and
 * wait for its "listening on" line; aborts the test if it does not come. */
void kvt_start_server(struct kvt_proc *p, const char *port, const char *const extra[]);
/* The same on listen (NULL: no -l, all addresses). */
void kvt_start_server_on(struct kvt_proc *p, const char *listen, const char *port, const char *const extra[]);
/* The same with another kvserver binary (a test build of it). */
void kvt_start_server_bin(struct kvt_proc *p, const char *bin, const char *listen, const char *port,
			  const char *const extra[]);

/* A libkvclient handle to the kvserver on RDMA_ADDR:port (operations may take
 * 10 s, capped by the server's --max-op-ms); aborts the test on failure. */
struct kvc;
struct kvc *kvt_kv_connect(const char *port, unsigned depth, unsigned cache_entries);

/* A bare verbs connection (no libkvclient handle) to the kvserver on
 * RDMA_ADDR:port, for tests that speak the control path themselves; aborts
 * the test on failure. */
struct kvi_rmem;
struct kvi_rmem *kvt_rmem_connect(const char *port);

/* CPU time (user + system) the process has used, in clock ticks. */
unsigned long long kvt_cpu_ticks(pid_t pid);
/* ... and each of its threads (up to max of them), by name. */
struct kvt_thread_cpu {
	int tid;
	char name[20];
	unsigned long long ticks;
};
unsigned kvt_threads_cpu(pid_t pid, struct kvt_thread_cpu *out, unsigned max);
/* "name ticks, ..." of each thread of b: its ticks since a. */
void kvt_threads_cpu_diff(const struct kvt_thread_cpu *a, unsigned na, const struct kvt_thread_cpu *b, unsigned nb,
			  char *out, size_t len);

/* RDMA_ADDR/RDMA_DEV from deploy/rdma-env, or NULL. kvt_require_rdma() skips
 * the test when absent, unless KV_REQUIRE_RDMA=1, when it fails it. */
const char *kvt_rdma_addr(void);
const char *kvt_rdma_dev(void);
void kvt_require_rdma(void);

#endif
