/* kvserver's configuration: one table of every setting, feeding the command
 * line, the --config file, KVSERVER_* environment variables, --help and
 * --print-config alike, so that a setting is named, bounded and documented
 * once.
 *
 * Precedence, lowest first: built-in defaults < config file < environment <
 * command line. Every value is checked where it is read, and the settings
 * that only make sense together (renew <= lease / 2, quarantine >= 2 x
 * max-op + margin, reclaim-low < reclaim-high, buckets that fit the memory)
 * once all sources are in; a problem is one line in the errbuf naming the
 * source (flag, FILE:LINE or variable) and the expected form. Nothing here
 * prints unless asked to (help, print), exits or touches the network. */
#ifndef KVS_CONFIG_H
#define KVS_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "core.h"
#include "errbuf.h"

#define KVS_VERSION "0.1.0"

/* Everything the table fills. Strings are owned (freed by kvs_config_free);
 * NULL means unset. */
struct kvs_opts {
	char *listen;         /* NULL: all addresses */
	uint64_t port;
	char *device;         /* NULL: the address's device, or the only one with atomics */
	uint64_t memory_mib;
	int huge;             /* enum kvs_hugepages */
	uint64_t segment_kib; /* copied into core.segment_size (bytes) */
	struct kvs_core_opts core;
	uint32_t lease_ms, renew_ms;
	unsigned resize_load_pct; /* migrate.h load trigger; 0 = off */
	char *secret_file;
	char *metrics;  /* --metrics ADDR:PORT; NULL: off */
	int log_level;  /* enum kvi_log_level */
	char *log_file; /* NULL: stderr */
	char port_str[8]; /* port, as rdma_cm wants it */
};

/* Where a value came from: print-config says it, errors name it. */
enum kvs_cfg_source { KVS_SRC_DEFAULT, KVS_SRC_FILE, KVS_SRC_ENV, KVS_SRC_FLAG };

#define KVS_CFG_MAX_KEYS 32

struct kvs_config {
	struct kvs_opts o;
	char *file; /* --config FILE, or NULL */
	struct {
		unsigned char src;     /* enum kvs_cfg_source */
		unsigned char derived; /* a default computed from another setting */
		unsigned line;         /* KVS_SRC_FILE: its line */
	} from[KVS_CFG_MAX_KEYS];
};

/* What main should do after kvs_config_parse. */
enum kvs_cfg_action { KVS_CFG_RUN, KVS_CFG_HELP, KVS_CFG_VERSION, KVS_CFG_PRINT };

/* Fill c from the defaults, the --config file (if argv names one), the
 * environment and argv, then check the combination. Returns an action, or
 * -1 with one line in e (a usage error: exit 2). -h and -V answer without
 * reading the file or the environment. c must be freed with
 * kvs_config_free either way. Uses getopt (resets optind). */
int kvs_config_parse(struct kvs_config *c, int argc, char **argv, struct kvi_errbuf *e);

/* Apply one config file on top of c (as kvs_config_parse does for --config):
 * 0, or -1 with "FILE:LINE: ..." in e. Does not run the cross-checks. */
int kvs_config_load_file(struct kvs_config *c, const char *path, struct kvi_errbuf *e);

/* Defaults only. */
void kvs_config_init(struct kvs_config *c);
void kvs_config_free(struct kvs_config *c);

/* --help, grouped by section. */
void kvs_config_help(FILE *f);

/* The effective configuration as a loadable config file: every key, its
 * source as a trailing comment. */
void kvs_config_print(const struct kvs_config *c, FILE *f);

#endif
