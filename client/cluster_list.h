/* libkvclient internals: the handle's server list (cluster_list.c) --
 * parsing one, reading the list file, and the members that left it.
 * Nothing here is exported. */
#ifndef KVI_CLUSTER_LIST_H
#define KVI_CLUSTER_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "kvclient.h"

struct kvi_dial;

/* One server of a parsed list: where it is (owned) and its weight. */
struct kvi_list_entry {
	struct kvi_dial *d;
	uint32_t weight;
};

/* Parse a list in kvc_opts.server's form into e[0..*n) (room for
 * KVI_RING_MAX): 0, or KVC_EINVAL/KVC_ENOMEM with one line in err. */
int kvi_list_parse(const char *s, const struct kvc_opts *o, struct kvi_list_entry *e, unsigned *n, char *err,
		   size_t errlen);
/* Free the dials of e[0..n). */
void kvi_list_free_entries(struct kvi_list_entry *e, unsigned n);
/* The list file's contents (NUL-terminated, to be freed), or NULL with err set. */
char *kvi_list_read_file(const char *path, char *err, size_t errlen);
/* From kvc_submit and kvc_poll: if the list file changed (looked at once a
 * second), apply it as kvc_set_servers would; a bad one is logged and the
 * list kept. */
void kvi_list_check_file(kvc_t *h, uint64_t now);
/* Close the members that left the list and have nothing in flight. */
void kvi_list_reap_drained(kvc_t *h);

#endif
