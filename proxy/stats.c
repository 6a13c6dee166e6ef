/* kvproxy's stats (stats.h). Figures the proxy cannot measure are left out
 * rather than printed as 0: curr_items (the servers do not count items
 * yet), get_expired and get_flushed (a miss does not say why). */
#include <stddef.h>
#include <string.h>
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

void kvp_stats_reset(struct kvp_shared *sh)
{
	pthread_mutex_lock(&sh->reset_mu);
	sum(&sh->base, sh);
	pthread_mutex_unlock(&sh->reset_mu);
}

void kvp_stats_fill(struct kvp_stats *s, struct kvp_shared *sh, kvc_t *h)
{
	struct kvc_server_stats ss;
	time_t now = time(NULL);

	memset(s, 0, sizeof(*s));
	s->pid = (uint64_t)getpid();
	s->time = (uint64_t)now;
	s->uptime = (uint64_t)(now - sh->started);
	s->curr_connections = __atomic_load_n(&sh->curr_connections, __ATOMIC_RELAXED);
	s->total_connections = __atomic_load_n(&sh->total_connections, __ATOMIC_RELAXED);
	s->rejected_connections = __atomic_load_n(&sh->rejected_connections, __ATOMIC_RELAXED);
	s->threads = sh->threads;
	sum(&s->c, sh);
	pthread_mutex_lock(&sh->reset_mu);
#define KVP_SUB_(n) s->c.n -= sh->base.n;
	KVP_COUNTERS(KVP_SUB_)
#undef KVP_SUB_
	pthread_mutex_unlock(&sh->reset_mu);
	if (h && kvc_server_stats(h, &ss) == 0) {
		s->tier_ok = 1;
		s->bytes = ss.bytes;
		s->limit_maxbytes = ss.limit_maxbytes;
		s->evictions = ss.evictions;
	}
}

static void line(struct kvp_buf *b, const char *name, uint64_t v)
{
	kvp_buf_str(b, "STAT ");
	kvp_buf_str(b, name);
	kvp_buf_str(b, " ");
	kvp_buf_u64(b, v);
	kvp_buf_str(b, "\r\n");
}

void kvp_stats_render(struct kvp_buf *b, const struct kvp_stats *s)
{
	line(b, "pid", s->pid);
	line(b, "uptime", s->uptime);
	line(b, "time", s->time);
	kvp_buf_str(b, "STAT version " KVP_VERSION "\r\n");
	line(b, "pointer_size", sizeof(void *) * 8);
	line(b, "curr_connections", s->curr_connections);
	line(b, "total_connections", s->total_connections);
	line(b, "rejected_connections", s->rejected_connections);
#define KVP_LINE_(n) line(b, #n, s->c.n);
	KVP_COUNTERS(KVP_LINE_)
#undef KVP_LINE_
	line(b, "threads", s->threads);
	if (s->tier_ok) {
		line(b, "bytes", s->bytes);
		line(b, "limit_maxbytes", s->limit_maxbytes);
		line(b, "evictions", s->evictions);
	}
	kvp_buf_str(b, "END\r\n");
}
