/* Logging for library and programs alike.
 *
 * The library never prints on its own: messages go to the callback installed with
 * kvi_log_set (libkvclient exposes it as kvc_set_log); with none installed they
 * are dropped. kvserver installs a structured sink (kvi_log_set_ev) that
 * writes logfmt lines (logfmt.h); kvbench and kvcli install nothing:
 * they print the one line that their failing call returned.
 *
 * Two ways to log: kvi_log's free text, and kvi_event's named event with
 * key=value fields, for code whose log is read by machines (the server's).
 * Either goes to whichever sink is installed: a plain kvi_log_fn gets an
 * event as the text "event=NAME key=value ...". */
#ifndef KVI_LOG_H
#define KVI_LOG_H

enum kvi_log_level { KVI_LOG_ERROR = 0, KVI_LOG_WARN, KVI_LOG_INFO, KVI_LOG_DEBUG };

typedef void (*kvi_log_fn)(void *arg, int level, const char *msg);

/* A structured sink: event is a snake_case name and body its logfmt fields
 * (maybe empty), or event is NULL and body is kvi_log's free text. Called
 * from any thread; it must write each event whole (one write(2) per line). */
typedef void (*kvi_log_ev_fn)(void *arg, int level, const char *event, const char *body);

/* Install a sink (NULL: none) and the most verbose level that reaches it.
 * Set once at start-up, before threads exist; the two replace each other. */
void kvi_log_set(kvi_log_fn fn, void *arg, int max_level);
void kvi_log_set_ev(kvi_log_ev_fn fn, void *arg, int max_level);

/* Would a message of this level reach a sink? */
int kvi_log_enabled(int level);

void kvi_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An event: fmt gives its fields, "client=%u addr=%s reason=%s"; a
 * conversion that is a whole value is quoted as logfmt needs (logfmt.h). */
void kvi_event(int level, const char *event, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A ready callback: "prog: level: msg" on stderr; arg is the program name. */
void kvi_log_stderr(void *arg, int level, const char *msg);

#define kvi_err(...) kvi_log(KVI_LOG_ERROR, __VA_ARGS__)
#define kvi_warn(...) kvi_log(KVI_LOG_WARN, __VA_ARGS__)
#define kvi_info(...) kvi_log(KVI_LOG_INFO, __VA_ARGS__)
#define kvi_dbg(...) kvi_log(KVI_LOG_DEBUG, __VA_ARGS__)

#define kvi_ev_err(event, ...) kvi_event(KVI_LOG_ERROR, event, __VA_ARGS__)
#define kvi_ev_warn(event, ...) kvi_event(KVI_LOG_WARN, event, __VA_ARGS__)
#define kvi_ev_info(event, ...) kvi_event(KVI_LOG_INFO, event, __VA_ARGS__)
#define kvi_ev_dbg(event, ...) kvi_event(KVI_LOG_DEBUG, event, __VA_ARGS__)

#endif
