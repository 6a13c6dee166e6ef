/* A fixed-size message buffer for "what failed, where, what to do": every
 * layer that can fail for a reason an operator must read fills one, and the
 * caller that owns it decides where the text goes (a log line, stderr, the
 * client's last-error text). Nothing here knows about RDMA. */
#ifndef KVI_ERRBUF_H
#define KVI_ERRBUF_H

struct kvi_errbuf {
	char msg[320];
};

/* printf into e->msg, truncated to fit; e may be NULL (nothing is written). */
void kvi_errbuf_set(struct kvi_errbuf *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
