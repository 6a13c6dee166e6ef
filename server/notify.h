/* Readiness for service managers: systemd's sd_notify datagram protocol.
 *
 * With Type=notify, systemd hands the service a unix datagram socket in
 * $NOTIFY_SOCKET and waits for "READY=1" before it counts the service as
 * started (and starts units ordered after it); "STOPPING=1" says a shutdown
 * has begun. kvserver sends READY=1 once its region is registered and its
 * port listens, so a client started after kvserver.service can connect at once.
 *
 * The protocol is one datagram of "KEY=VALUE\n..." text to that socket: an
 * absolute path, or an abstract-namespace name written with a leading '@'.
 * It is implemented here directly (a socket, a sendto) rather than through
 * libsystemd, so that kvserver needs nothing more at run time and works the
 * same under any manager that speaks the protocol (or none). */
#ifndef KVS_NOTIFY_H
#define KVS_NOTIFY_H

/* Sends `state` (e.g. "READY=1") to $NOTIFY_SOCKET. Returns 0 when it was
 * sent, and 0 too when NOTIFY_SOCKET is unset or empty (not run by a
 * manager that wants to hear: nothing to do); a negative errno otherwise:
 * -EINVAL for a NOTIFY_SOCKET that is neither an absolute path nor an '@'
 * name or is too long for a unix address, -EAFNOSUPPORT for other address
 * kinds (vsock:), or the error of socket()/sendto(). Never prints; opens and
 * closes its own socket; safe to call from any thread. */
int kvs_notify(const char *state);

#endif
