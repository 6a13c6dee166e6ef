/* kvproxy's stats (stats.h). A figure nobody measures is left out rather
 * than printed as 0: get_flushed (a miss does not say why); the tier's
 * figures are left out when it does not answer. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "stats.h"

static void sum(struct kvp_counters *c, const struct kvp_shared *sh)
{
	memset(c, 0, sizeof(*c));
	for (unsigned i = 0; i < sh->threads; i++) {
#define KVP_SUM_(n) c->n += __atomic_load_n(&sh->workers[i]->n, __ATOMIC_RELAXED);
		KVP_COUNTERS(KVP_SUM_)
#undef KVP_SUM_
	}
}

/* The tier's memcached counters (kvc_server_stats), in ours; 0 or -1. */
static int tier(struct kvp_counters *c, struct kvc_server_stats *ss, kvc_t *h)
{
	if (!h || kvc_server_stats(h, ss))
		return -1;
	c->cmd_get = ss->cmd_get;
	c->cmd_set = ss->cmd_set;
	c->cmd_touch = ss->cmd_touch;
	c->get_hits = ss->get_hits;
	c->get_misses = ss->get_misses;
	c->delete_hits = ss->delete_hits;
	c->delete_misses = ss->delete_misses;
	c->incr_hits = ss->incr_hits;
	c->incr_misses = ss->incr_misses;
	c->decr_hits = ss->decr_hits;
	c->decr_misses = ss->decr_misses;
	c->cas_hits = ss->cas_hits;
	c->cas_misses = ss->cas_misses;
	c->cas_badval = ss->cas_badval;
	c->touch_hits = ss->touch_hits;
	c->touch_misses = ss->touch_misses;
	c->total_items = ss->total_items;
	return 0;
}

void kvp_stats_reset(struct kvp_shared *sh, kvc_t *h)
{
	struct kvc_server_stats ss;
	struct kvp_counters t = { 0 };

	tier(&t, &ss, h);
	pthread_mutex_lock(&sh->reset_mu);
	sum(&sh->base, sh);
	sh->tier_base = t;
	pthread_mutex_unlock(&sh->reset_mu);
}

void kvp_stats_fill(struct kvp_stats *s, struct kvp_shared *sh, kvc_t *h)
{
	struct kvc_server_stats ss;
	struct kvp_counters t = { 0 };
	time_t now = time(NULL);
	uint64_t flushes;
	struct rusage ru;

	memset(s, 0, sizeof(*s));
	s->pid = (uint64_t)getpid();
	s->time = (uint64_t)now;
	s->uptime = (uint64_t)(now - sh->started);
	if (getrusage(RUSAGE_SELF, &ru) == 0) {
		s->rusage_user_us = (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec;
		s->rusage_system_us = (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
	}
	s->curr_connections = __atomic_load_n(&sh->curr_connections, __ATOMIC_RELAXED);
	s->total_connections = __atomic_load_n(&sh->total_connections, __ATOMIC_RELAXED);
	s->rejected_connections = __atomic_load_n(&sh->rejected_connections, __ATOMIC_RELAXED);
	s->threads = sh->threads;
	sum(&s->c, sh);
	s->tier_ok = tier(&t, &ss, h) == 0;
	pthread_mutex_lock(&sh->reset_mu);
#define KVP_SUB_(n) s->c.n -= sh->base.n; t.n -= sh->tier_base.n;
	KVP_COUNTERS(KVP_SUB_)
#undef KVP_SUB_
	pthread_mutex_unlock(&sh->reset_mu);
	if (!s->tier_ok)
		return;
	flushes = s->c.cmd_flush; /* the tier does not count flushes: ours */
	s->c = t;
	s->c.cmd_flush = flushes;
	s->bytes = ss.bytes;
	s->limit_maxbytes = ss.limit_maxbytes;
	s->evictions = ss.evictions;
	s->curr_items = ss.curr_items;
	s->get_expired = ss.get_expired;
}

static void line(struct kvp_buf *b, const char *name, uint64_t v)
{
	kvp_buf_str(b, "STAT ");
	kvp_buf_str(b, name);
	kvp_buf_str(b, " ");
	kvp_buf_u64(b, v);
	kvp_buf_str(b, "\r\n");
}

/* memcached's "seconds.microseconds" */
static void line_us(struct kvp_buf *b, const char *name, uint64_t us)
{
	char frac[8];

	kvp_buf_str(b, "STAT ");
	kvp_buf_str(b, name);
	kvp_buf_str(b, " ");
	kvp_buf_u64(b, us / 1000000u);
	snprintf(frac, sizeof(frac), ".%06u", (unsigned)(us % 1000000u));
	kvp_buf_str(b, frac);
	kvp_buf_str(b, "\r\n");
}

void kvp_stats_render(struct kvp_buf *b, const struct kvp_stats *s)
{
	line(b, "pid", s->pid);
	line(b, "uptime", s->uptime);
	line(b, "time", s->time);
	kvp_buf_str(b, "STAT version " KVP_VERSION "\r\n");
	line(b, "pointer_size", sizeof(void *) * 8);
	line_us(b, "rusage_user", s->rusage_user_us);
	line_us(b, "rusage_system", s->rusage_system_us);
	line(b, "curr_connections", s->curr_connections);
	line(b, "total_connections", s->total_connections);
	line(b, "rejected_connections", s->rejected_connections);
#define KVP_LINE_(n) line(b, #n, s->c.n);
	KVP_COUNTERS(KVP_LINE_)
#undef KVP_LINE_
	line(b, "threads", s->threads);
	if (s->tier_ok) {
		line(b, "curr_items", s->curr_items);
		line(b, "get_expired", s->get_expired);
		line(b, "bytes", s->bytes);
		line(b, "limit_maxbytes", s->limit_maxbytes);
		line(b, "evictions", s->evictions);
	}
	kvp_buf_str(b, "END\r\n");
}
