/* The core's side of flush_all (core.h "flush_all"; flush.h is the walk):
 * what clients asked and where the walks stand, answered at once.
 *
 * Whatever clients send, this state stays O(1) and the work bounded: any
 * number of immediate requests made while no walk has started yet are one
 * walk (each is carried out by the first walk that starts after it, so a
 * walk already running never counts for a request made during it); there is
 * at most one delayed flush (a later request replaces it, an immediate one
 * cancels it), and a delay too large to come due is simply never due. */
#include "core_impl.h"

#include "clock.h"
#include "kvclient_errors.h"

void kvs_core_attach_flusher(struct kvs_core *c)
{
	pthread_mutex_lock(&c->mu);
	c->has_flusher = 1;
	pthread_mutex_unlock(&c->mu);
}

int kvs_core_has_flusher(struct kvs_core *c)
{
	int has;

	pthread_mutex_lock(&c->mu);
	has = c->has_flusher;
	pthread_mutex_unlock(&c->mu);
	return has;
}

static uint64_t due_ms(const struct kvs_core *c, uint64_t now)
{
	if (!c->flush_due_ns)
		return 0;
	return c->flush_due_ns > now ? (c->flush_due_ns - now + 999999u) / 1000000u : 1;
}

void kvs_core_flush_ctrl_locked(struct kvs_core *c, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	const struct kvi_ctrl_flush *f = &req->flush;
	uint64_t now = kvi_mono_ns(), ticket = 0;

	if (!c->has_flusher) {
		kvs_core_reply_error(req, resp, KVC_ENOTSUP); /* nobody would walk the index */
		return;
	}
	if (f->ticket) {
		/* Only a walk that exists or is the next one can be waited for. */
		if (f->delay_ms || f->ticket > c->flush_started + 1) {
			kvs_core_reply_error(req, resp, KVC_EINVAL);
			return;
		}
		ticket = f->ticket;
	} else {
		c->flush_requests++;
		if (f->delay_ms == 0) {
			c->flush_due_ns = 0; /* an immediate flush cancels a pending one */
			c->flush_wanted = 1;
			ticket = c->flush_started + 1;
		} else {
			/* Saturating: a delay past the clock's range never comes due. */
			uint64_t ns = f->delay_ms > (UINT64_MAX - now) / 1000000u ? UINT64_MAX
										  : now + f->delay_ms * 1000000u;

			c->flush_due_ns = ns;
		}
		if (c->o.wake) /* start the walk, or sleep until the new due time */
			c->o.wake(c->o.wake_arg);
	}
	*resp = (struct kvi_ctrl){ .type = KVI_CTRL_FLUSHED, .seq = req->seq,
				   .flushed = { .ticket = ticket, .done = c->flush_done,
						.walked = c->flush_started > c->flush_done ? c->flush_walked : 0,
						.due_ms = due_ms(c, now) } };
}

int kvs_core_flush_begin(struct kvs_core *c, uint64_t now, uint64_t *ticket)
{
	int go;

	pthread_mutex_lock(&c->mu);
	if (c->flush_due_ns && now >= c->flush_due_ns) {
		c->flush_due_ns = 0;
		c->flush_wanted = 1;
	}
	go = c->flush_wanted;
	if (go) {
		c->flush_wanted = 0;
		c->flush_walked = 0;
		*ticket = ++c->flush_started;
	}
	pthread_mutex_unlock(&c->mu);
	return go;
}

void kvs_core_flush_progress(struct kvs_core *c, uint64_t walked)
{
	pthread_mutex_lock(&c->mu);
	c->flush_walked = walked;
	pthread_mutex_unlock(&c->mu);
}

void kvs_core_flush_end(struct kvs_core *c, uint64_t items)
{
	pthread_mutex_lock(&c->mu);
	c->flush_done = c->flush_started;
	c->flush_items += items;
	c->flush_walked = 0;
	pthread_mutex_unlock(&c->mu);
}

int kvs_core_flush_next_ms(struct kvs_core *c, uint64_t now, int max_ms)
{
	int ms = max_ms;

	pthread_mutex_lock(&c->mu);
	if (c->flush_wanted)
		ms = 0;
	else if (c->flush_due_ns)
		ms = kvi_ms_until(now, c->flush_due_ns, max_ms);
	pthread_mutex_unlock(&c->mu);
	return ms;
}
