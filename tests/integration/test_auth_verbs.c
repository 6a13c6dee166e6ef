/* Authentication at join over real verbs (kvserver --secret-file): the right
 * secret joins and works; a wrong secret, no proof, a stale timestamp (either
 * way), a replayed hello and a proof made for another server are each refused
 * with their own code before the peer gets a usable queue pair; a peer that
 * claims to be the server's loopback without its key is refused; the server's
 * own loopback connections still join, on one address or all; a server
 * without a secret warns that it is open; a bad secret file (or one others may
 * read) stops the server with one line. Hellos that a well-behaved client never
 * sends are built with the auth module and sent raw (kvi_verbs_opts.raw_hello). */
#include <criterion/criterion.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "harness.h"
#include "kvclient.h"
#include "rmem_verbs.h"

TestSuite(auth_verbs, .init = kvt_require_rdma, .timeout = 240);

#define SECRET "kv-auth-test-secret-0123456789"

static char dir[64], secret_path[96], wrong_path[96];

/* Secret files for the test: the server's, and another. */
static void make_files(void)
{
	FILE *f;

	snprintf(dir, sizeof(dir), "/tmp/kv_auth_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(secret_path, sizeof(secret_path), "%s/secret", dir);
	snprintf(wrong_path, sizeof(wrong_path), "%s/wrong", dir);
	f = fopen(secret_path, "w");
	cr_assert_not_null(f);
	fputs(SECRET "\n", f); /* the newline is not part of the secret */
	fclose(f);
	f = fopen(wrong_path, "w");
	cr_assert_not_null(f);
	fputs("not-the-secret-0123456789", f);
	fclose(f);
	cr_assert_eq(chmod(secret_path, 0600) | chmod(wrong_path, 0600), 0);
}

static void remove_files(void)
{
	unlink(secret_path);
	unlink(wrong_path);
	rmdir(dir);
}

/* kvc_create with secret_file; returns its code, the handle in *h when 0. */
static int join(const char *port, const char *secret_file, kvc_t **h, char *err, size_t errlen)
{
	char server[128];
	struct kvc_opts o;

	snprintf(server, sizeof(server), "%s:%s", kvt_rdma_addr(), port);
	kvc_opts_init(&o);
	o.server = server;
	o.depth = 4;
	o.op_timeout_ms = 10000;
	o.connect_timeout_ms = 20000;
	o.secret_file = secret_file;
	*h = NULL;
	return kvc_create(&o, h, err, errlen);
}

/* Connect with exactly these hello bytes; returns the code. */
static int join_raw(const char *port, const struct kvi_wire_hello *hello, struct kvi_rmem **rm,
		    struct kvi_errbuf *e)
{
	struct kvi_welcome w;

	*rm = NULL;
	return kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = kvt_rdma_addr(), .port = port,
								.lbuf_size = 4096, .timeout_ms = 20000,
								.raw_hello = hello },
				      rm, &w, e);
}

/* A hello proved under key for role, stamped ts, for the server at port of
 * the RDMA address. */
static struct kvi_wire_hello hello_for(uint16_t role, const char *key, uint64_t ts, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	struct kvi_hello h = { .role = role };
	struct kvi_wire_hello w;

	cr_assert_eq(getaddrinfo(kvt_rdma_addr(), port, &hints, &ai), 0);
	cr_assert_eq(kvi_auth_prove(&h, key, strlen(key), ai->ai_addr, ts), 0);
	freeaddrinfo(ai);
	kvi_wire_hello_encode(&w, &h);
	return w;
}

static struct kvi_wire_hello hello_at(uint16_t role, const char *key, uint64_t ts)
{
	return hello_for(role, key, ts, "7691");
}

static void stop(struct kvt_proc *srv)
{
	kvt_kill(srv, SIGTERM);
	cr_expect_eq(kvt_wait(srv, 20000), 0, "kvserver: %s", srv->all);
}

Test(auth_verbs, each_bad_proof_is_refused_with_its_own_code_and_the_right_secret_works)
{
	const char *extra[] = { "-v", "--segment-size", "64", "--secret-file", secret_path, NULL };
	struct kvi_errbuf e = { { 0 } };
	struct kvi_wire_hello hello;
	struct kvi_rmem *rm;
	struct kvt_proc srv;
	char err[400], line[256], val[64];
	size_t vlen = 0;
	kvc_t *h;
	int rc;

	make_files();
	kvt_start_server(&srv, "7691", extra);
	cr_expect_null(strstr(srv.all, "no --secret-file"), "a server with a secret does not warn: %s", srv.all);
	/* The server's own loopback (reclaimer) proves itself with its key,
	 * before any forged loopback claim below is logged. */
	while (!strstr(srv.all, "event=reclaimer_connected") && kvt_line(&srv, line, sizeof(line), 20000) == 0)
		;
	cr_expect_not_null(strstr(srv.all, "event=reclaimer_connected"), "the reclaimer joins: %s", srv.all);
	cr_expect_null(strstr(srv.all, "_refused"), "the loopback is not refused: %s", srv.all);

	/* Right secret: joins, PUT and GET work. */
	rc = join("7691", secret_path, &h, err, sizeof(err));
	cr_assert_eq(rc, 0, "right secret: %s (%s)", kvc_err_name(rc), err);
	cr_assert_eq(kvc_put(h, "k", 1, "authenticated", 13, 0), 0);
	cr_assert_eq(kvc_get(h, "k", 1, val, sizeof(val), &vlen), 0);
	cr_expect_eq(vlen, 13);
	cr_expect_eq(memcmp(val, "authenticated", 13), 0);
	kvc_destroy(h);

	/* The same through KVC_SECRET_FILE. */
	setenv("KVC_SECRET_FILE", secret_path, 1);
	rc = join("7691", NULL, &h, err, sizeof(err));
	cr_expect_eq(rc, 0, "secret from KVC_SECRET_FILE: %s (%s)", kvc_err_name(rc), err);
	kvc_destroy(h);
	unsetenv("KVC_SECRET_FILE");

	/* Wrong secret. */
	rc = join("7691", wrong_path, &h, err, sizeof(err));
	cr_expect_eq(rc, KVC_EAUTH, "wrong secret: %s (%s)", kvc_err_name(rc), err);
	cr_expect_not_null(strstr(err, "secret"), "%s", err);

	/* No proof. */
	rc = join("7691", NULL, &h, err, sizeof(err));
	cr_expect_eq(rc, KVC_ENOAUTH, "no proof: %s (%s)", kvc_err_name(rc), err);
	cr_expect_not_null(strstr(err, "secret file"), "the message says what to give: %s", err);

	/* Stale: the right secret, the clock 60 s behind, then 60 s ahead. */
	hello = hello_at(KVI_ROLE_CLIENT, SECRET, kvi_auth_now_ms() - 60000);
	rc = join_raw("7691", &hello, &rm, &e);
	cr_expect_eq(rc, KVC_ESTALE, "60 s behind: %s (%s)", kvc_err_name(rc), e.msg);
	cr_expect_not_null(strstr(e.msg, "clocks"), "%s", e.msg);
	kvi_rmem_destroy(rm);
	hello = hello_at(KVI_ROLE_CLIENT, SECRET, kvi_auth_now_ms() + 60000);
	rc = join_raw("7691", &hello, &rm, &e);
	cr_expect_eq(rc, KVC_ESTALE, "60 s ahead: %s (%s)", kvc_err_name(rc), e.msg);
	kvi_rmem_destroy(rm);

	/* Replay: one hello joins once; the same bytes again are refused,
	 * whether or not the first connection is still there. */
	hello = hello_at(KVI_ROLE_CLIENT, SECRET, kvi_auth_now_ms());
	rc = join_raw("7691", &hello, &rm, &e);
	cr_assert_eq(rc, 0, "first use of a hello: %s (%s)", kvc_err_name(rc), e.msg);
	{
		struct kvi_rmem *again;

		rc = join_raw("7691", &hello, &again, &e);
		cr_expect_eq(rc, KVC_EREPLAY, "replay while connected: %s (%s)", kvc_err_name(rc), e.msg);
		kvi_rmem_destroy(again);
	}
	kvi_rmem_destroy(rm);
	rc = join_raw("7691", &hello, &rm, &e);
	cr_expect_eq(rc, KVC_EREPLAY, "replay after leaving: %s (%s)", kvc_err_name(rc), e.msg);
	kvi_rmem_destroy(rm);

	/* A fresh proof with the right secret, made for another server (this
	 * host, another port): what a sniffer of that server's joins holds. */
	hello = hello_for(KVI_ROLE_CLIENT, SECRET, kvi_auth_now_ms(), "7699");
	rc = join_raw("7691", &hello, &rm, &e);
	cr_expect_eq(rc, KVC_EAUTH, "a proof for another server: %s (%s)", kvc_err_name(rc), e.msg);
	kvi_rmem_destroy(rm);

	/* Claiming the loopback role: with the clients' secret, or no proof. */
	hello = hello_at(KVI_ROLE_LOOPBACK, SECRET, kvi_auth_now_ms());
	rc = join_raw("7691", &hello, &rm, &e);
	cr_expect_eq(rc, KVC_EAUTH, "loopback claim with the secret: %s (%s)", kvc_err_name(rc), e.msg);
	kvi_rmem_destroy(rm);
	kvi_wire_hello_encode(&hello, &(struct kvi_hello){ .role = KVI_ROLE_LOOPBACK });
	rc = join_raw("7691", &hello, &rm, &e);
	cr_expect_eq(rc, KVC_EAUTH, "loopback claim without proof: %s (%s)", kvc_err_name(rc), e.msg);
	kvi_rmem_destroy(rm);

	stop(&srv);
	cr_expect_not_null(strstr(srv.all, "no proof of the secret"), "%s", srv.all);
	cr_expect_not_null(strstr(srv.all, "wrong proof"), "%s", srv.all);
	cr_expect_not_null(strstr(srv.all, "outside the +-30 s window"), "%s", srv.all);
	cr_expect_not_null(strstr(srv.all, "replayed proof"), "%s", srv.all);
	cr_expect_not_null(strstr(srv.all, "claims to be our loopback"), "%s", srv.all);
	remove_files();
}

Test(auth_verbs, a_server_without_a_secret_warns_and_still_guards_the_loopback_role)
{
	const char *extra[] = { "--segment-size", "64", NULL };
	struct kvi_errbuf e = { { 0 } };
	struct kvi_wire_hello hello;
	struct kvi_rmem *rm;
	struct kvt_proc srv;
	char err[400];
	kvc_t *h;
	int rc;

	kvt_start_server(&srv, "7692", extra);
	cr_expect_not_null(strstr(srv.all, "anyone who can reach port 7692 can read and write"), "%s", srv.all);
	rc = join("7692", NULL, &h, err, sizeof(err));
	cr_expect_eq(rc, 0, "open server: %s (%s)", kvc_err_name(rc), err);
	kvc_destroy(h);
	kvi_wire_hello_encode(&hello, &(struct kvi_hello){ .role = KVI_ROLE_LOOPBACK });
	rc = join_raw("7692", &hello, &rm, &e);
	cr_expect_eq(rc, KVC_EAUTH, "loopback claim on an open server: %s (%s)", kvc_err_name(rc), e.msg);
	kvi_rmem_destroy(rm);
	stop(&srv);
	/* Warned once, not per client. */
	{
		const char *first = strstr(srv.all, "no --secret-file");

		cr_expect_not_null(first);
		cr_expect_null(first ? strstr(first + 1, "no --secret-file") : NULL, "%s", srv.all);
	}
}

Test(auth_verbs, a_bad_secret_file_stops_the_server_with_one_line)
{
	char *argv[] = { KV_SERVER_BIN, "-l", (char *)kvt_rdma_addr(), "-p", "7693", "--secret-file", NULL, NULL };
	char shortp[112];
	struct kvt_proc srv;
	FILE *f;

	make_files();
	snprintf(shortp, sizeof(shortp), "%s/short", dir);
	f = fopen(shortp, "w");
	cr_assert_not_null(f);
	fputs("too-short\n", f);
	fclose(f);
	cr_assert_eq(chmod(shortp, 0600), 0);
	argv[6] = shortp;
	cr_assert_eq(kvt_start(&srv, argv), 0);
	cr_expect_eq(kvt_wait(&srv, 20000), 2, "%s", srv.all);
	cr_expect_not_null(strstr(srv.all, "fewer than 16"), "%s", srv.all);
	argv[6] = "/nonexistent/secret";
	cr_assert_eq(kvt_start(&srv, argv), 0);
	cr_expect_eq(kvt_wait(&srv, 20000), 2, "%s", srv.all);
	cr_expect_not_null(strstr(srv.all, "cannot read secret file /nonexistent/secret"), "%s", srv.all);
	/* A good secret that group or others may read: refused, not warned. */
	cr_assert_eq(chmod(secret_path, 0644), 0);
	argv[6] = secret_path;
	cr_assert_eq(kvt_start(&srv, argv), 0);
	cr_expect_eq(kvt_wait(&srv, 20000), 2, "%s", srv.all);
	cr_expect_not_null(strstr(srv.all, "group or others"), "%s", srv.all);
	cr_expect_not_null(strstr(srv.all, "chmod 600"), "%s", srv.all);
	unlink(shortp);
	remove_files();
}

/* On all addresses the server's loopback dials an address of its device
 * (kvi_listener_self_addr): its proof is for that address, the one its
 * connection request arrives at, so it joins; so do clients at the address
 * they dial. */
Test(auth_verbs, a_server_on_all_addresses_admits_its_loopback_and_clients)
{
	const char *extra[] = { "-v", "--segment-size", "64", "--secret-file", secret_path, NULL };
	struct kvt_proc srv;
	char err[400], line[256];
	kvc_t *h;
	int rc;

	make_files();
	kvt_start_server_on(&srv, NULL, "7695", extra);
	while (!strstr(srv.all, "event=reclaimer_connected") && kvt_line(&srv, line, sizeof(line), 20000) == 0)
		;
	cr_expect_not_null(strstr(srv.all, "event=reclaimer_connected"), "the reclaimer joins: %s", srv.all);
	rc = join("7695", secret_path, &h, err, sizeof(err));
	cr_expect_eq(rc, 0, "right secret: %s (%s)", kvc_err_name(rc), err);
	if (rc == 0) {
		cr_expect_eq(kvc_put(h, "k", 1, "v", 1, 0), 0);
		kvc_destroy(h);
	}
	stop(&srv);
	cr_expect_null(strstr(srv.all, "_refused"), "nobody is refused: %s", srv.all);
	remove_files();
}

Test(auth_verbs, kvcli_takes_the_secret_file)
{
	const char *extra[] = { "--segment-size", "64", "--secret-file", secret_path, NULL };
	char *put[] = { KV_CLI_BIN, "-s", NULL, "--secret-file", secret_path, "put", "cli", "v", NULL };
	char *get_noauth[] = { KV_CLI_BIN, "-s", NULL, "get", "cli", NULL };
	char server[128];
	struct kvt_proc srv, cli;

	make_files();
	snprintf(server, sizeof(server), "%s:7694", kvt_rdma_addr());
	put[2] = get_noauth[2] = server;
	kvt_start_server(&srv, "7694", extra);
	cr_assert_eq(kvt_start(&cli, put), 0);
	cr_expect_eq(kvt_wait(&cli, 30000), 0, "kvcli put: %s", cli.all);
	cr_assert_eq(kvt_start(&cli, get_noauth), 0);
	cr_expect_eq(kvt_wait(&cli, 30000), 2, "kvcli without a secret: %s", cli.all);
	cr_expect_not_null(strstr(cli.all, "requires authentication"), "%s", cli.all);
	stop(&srv);
	remove_files();
}
