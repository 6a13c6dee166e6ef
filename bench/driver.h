/* A benchmark target behind one interface, so one generator drives every
 * system the same way: kvcache over RDMA (libkvclient) and memcached
 * (libmemcached). A connection belongs to one benchmark thread. */
#ifndef KVB_DRIVER_H
#define KVB_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* KVB_DEL: trace replay (a trace's deletes); NOTFOUND when there was none. */
enum kvb_prim { KVB_GET = 1, KVB_PUT = 2, KVB_DEL = 3 };

/* One request in flight. The driver owns it from submit until poll returns it. */
struct kvb_req {
	int prim; /* enum kvb_prim */
	char key[40];
	size_t key_len;
	const void *value; /* PUT */
	size_t value_len;  /* PUT: length; GET: set to the value's length */
	uint32_t ttl_ms;   /* PUT: time to live, 0 = none (memcached: rounded up to seconds) */
	void *buf;         /* GET destination */
	size_t buf_len;
	int status; /* 0, KVB_NOTFOUND, or a driver-specific negative code */
	void *user; /* the runner's */
};

#define KVB_NOTFOUND (-1) /* same value as KVC_ENOTFOUND, for both drivers */

struct kvb_driver {
	const char *scheme; /* "rdma" or "memcached" */
	const char *name;   /* for reports: "kvcache", "memcached" */
	/* Connect to host:port (through RDMA device `device` if not NULL; drivers
	 * without devices ignore it) with room for depth requests in flight. One
	 * line in err on failure. */
	int (*connect)(const char *host, const char *port, const char *device, unsigned depth, void **conn,
		       char *err, size_t len);
	/* Start r; 0, or a negative code (the request then never comes back from poll). */
	int (*submit)(void *conn, struct kvb_req *r);
	/* Start r[0..n) in order (NULL: one submit each): how many started;
	 * when fewer than n, r[returned]->status says why the next did not. */
	int (*submit_many)(void *conn, struct kvb_req **r, unsigned n);
	/* Up to max finished requests within timeout_ms; their count, or a negative code. */
	int (*poll)(void *conn, struct kvb_req **done, unsigned max, int timeout_ms);
	/* Name of a status code, for the error table. */
	const char *(*errname)(int status);
	/* Server process CPU time in seconds so far (user + system); NULL if unknown. */
	int (*server_cpu)(void *conn, double *seconds);
	/* Bytes the server uses to hold items (storage and index); NULL if unknown. */
	int (*server_mem)(void *conn, uint64_t *bytes);
	/* The memory the target may fill with items (kvcache: its heap;
	 * memcached: limit_maxbytes); NULL if unknown. */
	int (*server_limit)(void *conn, uint64_t *bytes);
	/* Largest value the target takes with a key of key_len bytes; NULL if unknown. */
	size_t (*max_value)(void *conn, size_t key_len);
	/* 1 when a request's status says the connection itself is gone (every
	 * later request would fail the same way): the run stops and says so. */
	int (*lost)(int status);
	/* Library round-trip counters: ops[i], rtts[i] for i < *kinds, named by names[i]. */
	void (*round_trips)(void *conn, uint64_t *ops, uint64_t *rtts, const char **names, unsigned *kinds);
	void (*close)(void *conn);
	/* In-process targets: kvi_ticks() (clock.h) the transport spent doing
	 * what a NIC would (moving bytes, completing requests) on the caller's
	 * thread; NULL elsewhere. */
	uint64_t (*transport_ticks)(void *conn);
	/* Requests this driver really keeps in flight per connection (1 = blocking). */
	unsigned max_depth;
};

extern const struct kvb_driver kvb_driver_rdma;
extern const struct kvb_driver kvb_driver_memcached;
/* local://MIB: kvcache's server core and reclaimer in this process, over the
 * in-process transport (the same code as kvserver, without a NIC), with MIB
 * MiB of segments for items. For hit-ratio runs at any scale: a hit ratio
 * does not depend on the transport. */
extern const struct kvb_driver kvb_driver_local;

/* kvc_opts.track_access for rdma:// connections (kvbench --no-access-marks). */
extern int kvb_rdma_track_access;
/* kvc_opts.busy_poll_us for rdma:// connections (kvbench --busy-poll-us). */
extern int kvb_rdma_busy_poll_us;
/* kvc_opts.secret_file for rdma:// connections (kvbench --secret-file), or NULL. */
extern const char *kvb_rdma_secret_file;
/* local:// server settings, read when its server starts (first connect). */
struct kvb_local_opts {
	/* Fault in every page of the region at start, as a region registered
	 * with a NIC is pinned before anyone uses it; otherwise a PUT's first
	 * write to each page costs a page fault on the client's thread. */
	int prefault;
	/* The server's operation deadline (quarantine: twice that); 0 = the
	 * default, short enough for hit-ratio runs on small memory. */
	unsigned max_op_ms;
};
/* kvbench --cpu-per-op sets both: it measures the library, not page faults
 * or a preempted thread missing a tight deadline. */
extern struct kvb_local_opts kvb_local_opts;

/* drv_rdma.c's functions, shared by drv_local.c (both drive a kvc_t). */
struct kvc;
int kvb_rdma_wrap(struct kvc *h, unsigned depth, void **out, char *err, size_t len);
int kvb_rdma_submit(void *conn, struct kvb_req *r);
int kvb_rdma_submit_many(void *conn, struct kvb_req **r, unsigned n);
int kvb_rdma_poll(void *conn, struct kvb_req **done, unsigned max, int timeout_ms);
int kvb_rdma_server_cpu(void *conn, double *seconds);
int kvb_rdma_server_mem(void *conn, uint64_t *bytes);
int kvb_rdma_server_limit(void *conn, uint64_t *bytes);
size_t kvb_rdma_max_value(void *conn, size_t key_len);
int kvb_rdma_lost(int status);
void kvb_rdma_round_trips(void *conn, uint64_t *ops, uint64_t *rtts, const char **names, unsigned *kinds);
void kvb_rdma_close(void *conn);
/* Something of the driver's own that rides with the connection (drv_local.c:
 * its transport). */
void kvb_rdma_set_aux(void *conn, void *aux);
void *kvb_rdma_aux(void *conn);

/* Start r[0..n) in order with d->submit_many, or one submit each where the
 * driver has none: how many started; when fewer than n, r[returned]->status
 * says why that one did not. */
int kvb_submit_many(const struct kvb_driver *d, void *conn, struct kvb_req **r, unsigned n);

/* "rdma://host[:port]" or "memcached://host[:port]": the driver, host and port.
 * A list of servers ("rdma://h1:p1,h2:p2"): host is the whole list, port is
 * empty, and kvb_multi_target is set. Returns NULL and writes one line to err
 * for anything else. */
extern int kvb_multi_target;
const struct kvb_driver *kvb_driver_parse(const char *url, char *host, size_t hl, char *port, size_t pl,
					  char *err, size_t errlen);

#endif
