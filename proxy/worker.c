/* Worker threads (worker.h). Level-triggered epoll: a connection is read
 * until its socket is empty or a few reads were made (fairness), its
 * requests carried out as one round, its replies written; while replies
 * wait for the socket it is not read (the client must read its answers). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "worker.h"

#define READS_PER_EVENT 4
#define KVP_FALLBACK_MAX_VALUE (1u << 20)

/* A read or write's result: 1 bytes moved, 0 the socket would block (or
 * a signal came), -1 the connection is over. */
static int io_result(ssize_t n)
{
	if (n > 0)
		return 1;
	if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	return -1;
}

static void conn_close(struct kvp_worker *w, struct kvp_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	kvp_buf_free(&c->in);
	kvp_buf_free(&c->out);
	free(c);
	__atomic_fetch_sub(&w->sh->curr_connections, 1, __ATOMIC_RELAXED);
}

static void set_events(struct kvp_worker *w, struct kvp_conn *c, unsigned ev)
{
	struct epoll_event e = { .events = ev, .data.ptr = c };

	if (c->events != ev && epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &e) == 0)
		c->events = ev;
}

static size_t max_value(struct kvp_worker *w)
{
	size_t m = kvc_max_value(w->h, 1);

	/* No server joined (0): take values of memcached's default size; the
	 * library then answers each store (server gone) as it is. */
	return m ? m : KVP_FALLBACK_MAX_VALUE;
}

/* Carry out the requests in c->in that waited for the replies before them
 * to be written (kvp_conn_process stalled). */
static void conn_resume(struct kvp_worker *w, struct kvp_conn *c)
{
	size_t used = kvp_conn_process(c, &w->x, max_value(w), c->in.p, c->in.len);

	kvp_buf_consume(&c->in, used);
	if (c->in.len == 0)
		kvp_buf_free(&c->in);
}

/* Write what can be written; -1 when the connection is to be closed. */
static int conn_flush(struct kvp_worker *w, struct kvp_conn *c)
{
again:
	while (c->out.len) {
		ssize_t n = write(c->fd, c->out.p, c->out.len);
		int io = io_result(n);

		if (io < 0)
			return -1;
		if (io == 0) /* level-triggered: EPOLLOUT says when to go on */
			break;
		kvp_buf_consume(&c->out, (size_t)n);
	}
	if (c->out.oom || c->in.oom)
		return -1;
	if (c->out.len) {
		set_events(w, c, EPOLLOUT);
		return 0;
	}
	if (c->stalled && !c->closing) {
		conn_resume(w, c);
		goto again;
	}
	if (c->eof) /* everything it sent is answered */
		c->closing = 1;
	kvp_buf_free(&c->out); /* idle connections hold no buffer */
	if (c->closing)
		return -1;
	set_events(w, c, EPOLLIN | EPOLLRDHUP);
	return 0;
}

/* Read and answer; -1 when the connection is to be closed. */
static int conn_read(struct kvp_worker *w, struct kvp_conn *c)
{
	size_t mv = max_value(w);

	for (int i = 0; i < READS_PER_EVENT && !c->closing && !c->eof && !c->stalled && c->out.len < KVP_OUT_HIGH; i++) {
		char *dst;
		size_t room, used;
		ssize_t n;
		int rc;

		if (c->in.len == 0) { /* the common case: nothing pending, read into scratch */
			dst = w->scratch;
			room = KVP_SCRATCH;
		} else {
			size_t want = c->need > c->in.len ? c->need - c->in.len : KVP_SCRATCH;

			dst = kvp_buf_reserve(&c->in, want < KVP_SCRATCH ? KVP_SCRATCH : want);
			if (!dst)
				return -1;
			room = c->in.cap - c->in.len;
		}
		n = read(c->fd, dst, room);
		rc = io_result(n);
		if (rc < 0 && n == 0) { /* the client is done sending: answer it, then close */
			c->eof = 1;
			break;
		}
		if (rc < 0)
			return -1;
		if (rc == 0) /* level-triggered: epoll says when there is more */
			break;
		if (dst == w->scratch) {
			used = kvp_conn_process(c, &w->x, mv, dst, (size_t)n);
			kvp_buf_add(&c->in, dst + used, (size_t)n - used);
		} else {
			c->in.len += (size_t)n;
			used = kvp_conn_process(c, &w->x, mv, c->in.p, c->in.len);
			kvp_buf_consume(&c->in, used);
			if (c->in.len == 0)
				kvp_buf_free(&c->in); /* idle connections hold no buffer */
		}
		if ((size_t)n < room)
			break;
	}
	return conn_flush(w, c);
}

static void take_new(struct kvp_worker *w)
{
	uint64_t v;
	int *fds;
	unsigned n;

	if (read(w->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return;
	pthread_mutex_lock(&w->mu);
	fds = w->queue;
	n = w->qlen;
	w->queue = NULL;
	w->qlen = w->qcap = 0;
	pthread_mutex_unlock(&w->mu);
	for (unsigned i = 0; i < n; i++) {
		struct kvp_conn *c = calloc(1, sizeof(*c));
		struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP };

		if (c) {
			c->fd = fds[i];
			c->events = e.events;
			e.data.ptr = c;
		}
		if (!c || epoll_ctl(w->ep, EPOLL_CTL_ADD, fds[i], &e)) {
			free(c);
			close(fds[i]);
			__atomic_fetch_sub(&w->sh->curr_connections, 1, __ATOMIC_RELAXED);
			continue;
		}
		c->next = w->conns;
		if (w->conns)
			w->conns->prev = c;
		w->conns = c;
	}
	free(fds);
}

static void *loop(void *arg)
{
	struct kvp_worker *w = arg;
	struct epoll_event ev[256];

	time_t last_tick = time(NULL);

	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		int n = epoll_wait(w->ep, ev, 256, 1000);
		time_t now = time(NULL);

		/* The library has no thread: an idle handle's lease renewals and
		 * its reports of memcached's counters to the servers ride on calls
		 * like this one (kvclient.h "Membership"). */
		if (now != last_tick) {
			struct kvc_op *none[1];

			last_tick = now;
			kvc_poll(w->h, none, 1, 0);
		}

		for (int i = 0; i < n; i++) {
			struct kvp_conn *c = ev[i].data.ptr;
			int rc;

			if (!c) {
				take_new(w);
				continue;
			}
			if (ev[i].events & EPOLLOUT)
				rc = conn_flush(w, c);
			else if (ev[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
				rc = conn_read(w, c);
			else
				rc = 0;
			if (rc)
				conn_close(w, c);
		}
	}
	return NULL;
}

int kvp_worker_start(struct kvp_worker *w, const struct kvp_tier_opts *to, struct kvp_shared *sh, char *err,
		     size_t errlen)
{
	struct epoll_event e = { .events = EPOLLIN, .data.ptr = NULL };
	int rc;

	memset(w, 0, sizeof(*w));
	w->sh = sh;
	pthread_mutex_init(&w->mu, NULL);
	w->ep = epoll_create1(EPOLL_CLOEXEC);
	w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	w->scratch = malloc(KVP_SCRATCH);
	if (w->ep < 0 || w->wake_fd < 0 || !w->scratch || epoll_ctl(w->ep, EPOLL_CTL_ADD, w->wake_fd, &e)) {
		snprintf(err, errlen, "cannot set up a worker: %s", strerror(errno));
		return -1;
	}
	rc = kvp_tier_open(to, &w->h, err, errlen);
	if (rc)
		return -1;
	if (kvp_exec_init(&w->x, w->h, sh)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	sh->workers[sh->threads++] = &w->x.ctr;
	if (pthread_create(&w->thread, NULL, loop, w)) {
		snprintf(err, errlen, "cannot start a worker thread");
		return -1;
	}
	return 0;
}

int kvp_worker_give(struct kvp_worker *w, int fd)
{
	uint64_t one = 1;

	pthread_mutex_lock(&w->mu);
	if (w->qlen == w->qcap) {
		unsigned cap = w->qcap ? w->qcap * 2 : 16;
		int *q = realloc(w->queue, cap * sizeof(*q));

		if (!q) {
			pthread_mutex_unlock(&w->mu);
			return -1;
		}
		w->queue = q;
		w->qcap = cap;
	}
	w->queue[w->qlen++] = fd;
	pthread_mutex_unlock(&w->mu);
	return write(w->wake_fd, &one, sizeof(one)) == sizeof(one) ? 0 : -1;
}

void kvp_worker_stop(struct kvp_worker *w)
{
	uint64_t one = 1;

	__atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
	if (write(w->wake_fd, &one, sizeof(one)) < 0) {
		/* the loop wakes within a second anyway */
	}
	pthread_join(w->thread, NULL);
	while (w->conns)
		conn_close(w, w->conns);
	kvp_exec_fini(&w->x);
	kvp_tier_close(w->h);
	close(w->ep);
	close(w->wake_fd);
	free(w->scratch);
	free(w->queue);
}
