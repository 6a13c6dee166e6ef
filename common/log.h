/* Logging for library and programs alike.
 *
 * The library never prints on its own: messages go to the callback installed with
 * kvi_log_set (libkvclient exposes it as kvc_set_log); with none installed they
 * are dropped. kvserver installs kvi_log_stderr; kvbench and kvcli do not:
 * they print the one line that their failing call returned. */
#ifndef KVI_LOG_H
#define KVI_LOG_H

enum kvi_log_level { KVI_LOG_ERROR = 0, KVI_LOG_WARN, KVI_LOG_INFO, KVI_LOG_DEBUG };

typedef void (*kvi_log_fn)(void *arg, int level, const char *msg);

void kvi_log_set(kvi_log_fn fn, void *arg, int max_level);
void kvi_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A ready callback: "prog: level: msg" on stderr; arg is the program name. */
void kvi_log_stderr(void *arg, int level, const char *msg);

#define kvi_err(...) kvi_log(KVI_LOG_ERROR, __VA_ARGS__)
#define kvi_warn(...) kvi_log(KVI_LOG_WARN, __VA_ARGS__)
#define kvi_info(...) kvi_log(KVI_LOG_INFO, __VA_ARGS__)
#define kvi_dbg(...) kvi_log(KVI_LOG_DEBUG, __VA_ARGS__)

#endif
