/* The client's side of membership (client/lease.c "Lease", "Rejoin";
 * client/lock_report.c) against the real server core and membership table over the local
 * transport: leases taken and renewed while the handle is used; nothing
 * posted past the lease; expelled handles rejoin on their next call; lock
 * words naming nobody are cleared on report, and a member that keeps a lock
 * past every deadline is condemned. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpath_env.h"
#include "kvclient_errors.h"

static struct kvt_env env;

static void setup(void)
{
	/* Operations may take 200 ms: reports come after 50 ms, a watched word
	 * condemns its owner after 250 ms. */
	struct kvs_core_opts o = { .segment_size = 64 << 10, .max_op_ms = 200, .quarantine_ms = 400,
				   .no_evict = 1, .in_process = 1 };

	cr_assert_eq(kvt_env_init_opts(&env, 16, &o), 0);
	cr_assert_eq(kvt_env_leases(&env, 100, 25), 0);
}

static void teardown(void)
{
	kvt_env_fini(&env);
}

TestSuite(lease, .init = setup, .fini = teardown, .timeout = 60);

static kvc_t *client(const struct kvi_local_hooks *hooks)
{
	struct kvc_opts o;
	kvc_t *c = NULL;

	kvc_opts_init(&o);
	o.depth = 4;
	o.op_timeout_ms = 200;
	cr_assert_eq(kvt_env_client_opts(&env, hooks, &o, &c), 0);
	return c;
}

static uint64_t *lock_of(const char *key, int which)
{
	const struct kvi_geometry *sb = kvs_core_geometry(env.srv.core);
	struct kvi_keyhash kh;

	kvi_key_hash(key, strlen(key), sb->hash_seed, sb->bucket_count, &kh);
	return (uint64_t *)(void *)(kvi_local_region_base(env.srv.reg) + kvi_home_bucket_off(sb, kh.b[which]));
}

static struct kvs_members_stats mstats(void)
{
	struct kvs_members_stats s;

	kvs_members_stats(env.srv.members, &s);
	return s;
}

Test(lease, a_handle_in_use_renews_and_never_rejoins)
{
	kvc_t *a = client(NULL);
	uint64_t end = kvi_mono_ns() + 400 * 1000000ull;
	struct kvc_stats st;
	char v[16];
	int n = 0;

	cr_expect_eq(mstats().renewals, 1, "one renewal at join");
	while (kvi_mono_ns() < end) {
		cr_assert_eq(kvt_put_s(a, "k", "v"), 0);
		cr_assert_eq(kvt_get_s(a, "k", v, sizeof(v)), 0);
		n++;
		usleep(1000);
	}
	kvc_get_stats(a, &st);
	cr_expect_eq(st.rejoins, 0);
	cr_expect_geq(mstats().renewals, 400 / 25 - 4, "renewed every ~25 ms (%lu in 400 ms, %d rounds)",
		      (unsigned long)mstats().renewals, n);
	kvc_destroy(a);
}

Test(lease, an_idle_handle_past_its_lease_renews_on_its_next_call)
{
	kvc_t *a = client(NULL);
	struct kvc_stats st;

	usleep(150 * 1000); /* the lease (100 ms) ended; the server has not expelled it */
	cr_expect_eq(kvt_put_s(a, "k", "v"), 0);
	kvc_get_stats(a, &st);
	cr_expect_eq(st.rejoins, 0, "a renewal was enough");
	kvc_destroy(a);
}

Test(lease, an_expelled_handle_rejoins_as_a_new_client_on_its_next_call)
{
	kvc_t *a = client(NULL);
	uint32_t ids[4], first = kvi_client_conn(a, 0)->rm->client_id;
	struct kvc_stats st;
	char v[16];

	cr_assert_eq(kvt_put_s(a, "k", "before"), 0);
	usleep(120 * 1000);
	cr_assert_eq(kvs_members_expired(env.srv.members, kvi_mono_ns(), ids, 4), 1, "the server expels it");
	cr_expect_eq(ids[0], first);
	cr_expect_eq(kvt_get_s(a, "k", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "before");
	kvc_get_stats(a, &st);
	cr_expect_eq(st.rejoins, 1);
	cr_expect_neq(kvi_client_conn(a, 0)->rm->client_id, first, "a new id");
	kvc_destroy(a);
}

/* A handle that did a PUT, then nothing for several leases, then asks for
 * server statistics first must not get KVC_ESERVERGONE where a GET at that
 * point would rejoin: every call on an idle handle works as the data calls
 * do. */
Test(lease, server_stats_on_a_handle_idle_for_several_leases_renews_or_rejoins_as_data_calls_do)
{
	kvc_t *a = client(NULL);
	struct kvc_server_stats ss;
	struct kvc_stats st;
	uint32_t ids[4];

	cr_assert_eq(kvt_put_s(a, "k", "v"), 0);
	usleep(350 * 1000); /* three leases: lapsed, not expelled yet */
	cr_expect_eq(kvc_server_stats(a, &ss), 0, "idle, lapsed lease");
	kvc_get_stats(a, &st);
	cr_expect_eq(st.rejoins, 0, "a renewal was enough");
	usleep(350 * 1000);
	cr_assert_eq(kvs_members_expired(env.srv.members, kvi_mono_ns(), ids, 4), 1, "the server expels it");
	cr_expect_eq(kvc_server_stats(a, &ss), 0, "idle and expelled");
	kvc_get_stats(a, &st);
	cr_expect_eq(st.rejoins, 1, "it rejoined");
	for (int i = 0; i < 3; i++) {
		usleep(350 * 1000);
		(void)kvs_members_expired(env.srv.members, kvi_mono_ns(), ids, 4);
		cr_expect_eq(kvc_server_stats(a, &ss), 0, "round %d", i);
	}
	kvc_destroy(a);
}

/* A raw client's stray WRITEs can leave junk of any shape in a lock word,
 * MOVED|junk included (a report that skipped MOVED words would leave the key
 * unwritable for good). Junk of every shape: readers ignore it, the writer
 * reports it, the server repairs it, and the PUT completes within its
 * deadline. */
Test(lease, junk_in_a_lock_word_is_reported_and_repaired_so_the_key_stays_writable)
{
	const uint64_t junk[] = { KVI_LOCK_MOVED | 0x1234, KVI_LOCK_MOVED | kvi_lock_held_by(3), KVI_LOCK_LOCKED,
				  kvi_lock_held_by(3) | 1, 0x00000000deadbeefull, ~0ull };
	struct kvc_opts o;
	kvc_t *a = NULL;
	char v[16];

	/* Without a location cache a PUT locks both of the key's buckets. */
	kvc_opts_init(&o);
	o.depth = 4;
	o.op_timeout_ms = 200;
	o.cache_entries = 0;
	cr_assert_eq(kvt_env_client_opts(&env, NULL, &o, &a), 0);
	for (unsigned i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
		char key[8];
		uint64_t t0;
		int rc;

		snprintf(key, sizeof(key), "k%u", i);
		cr_assert_eq(kvt_put_s(a, key, "old"), 0);
		*lock_of(key, 0) = junk[i];
		*lock_of(key, 1) = junk[i];
		cr_expect_eq(kvt_get_s(a, key, v, sizeof(v)), 0, "a GET ignores junk 0x%016llx",
			     (unsigned long long)junk[i]);
		t0 = kvi_mono_ns();
		rc = kvt_put_s(a, key, "new");
		cr_expect_eq(rc, 0, "PUT past junk 0x%016llx: %s", (unsigned long long)junk[i], kvc_err_name(rc));
		cr_expect_lt(kvi_mono_ns() - t0, 200 * 1000000ull, "within the operation's deadline");
		cr_expect_eq(*lock_of(key, 0), 0, "repaired");
		cr_expect_eq(*lock_of(key, 1), 0, "repaired");
	}
	cr_expect_geq(env.srv.verdicts[KVI_REPORT_CLEARING], sizeof(junk) / sizeof(junk[0]));
	kvc_destroy(a);
}

/* An idle handle must not cost a rejoin. Idle when its
 * lease ends (its idle word reads 0), it stays a member; its next call
 * renews on the same connection, with the same id, and writes into a new
 * extent (the old one was sealed). */
Test(lease, an_idle_handle_past_its_lease_is_kept_and_readmitted_without_a_rejoin)
{
	kvc_t *a = client(NULL);
	uint32_t me = kvi_client_conn(a, 0)->rm->client_id;
	struct kvs_members_stats ms;
	struct kvc_stats st;
	unsigned lapsed;
	char v[16];

	cr_assert_eq(kvt_put_s(a, "k", "before"), 0);
	for (int round = 0; round < 3; round++) {
		char val[16];

		usleep(130 * 1000);
		cr_expect_eq(kvt_env_expire(&env, &lapsed), 0, "round %d: nobody expelled", round);
		cr_expect_eq(lapsed, 1, "round %d: kept, lapsed", round);
		cr_expect_eq(kvt_get_s(a, "k", v, sizeof(v)), 0);
		snprintf(val, sizeof(val), "after%d", round);
		cr_expect_eq(kvt_put_s(a, "k", val), 0, "a PUT into a new extent");
		cr_expect_eq(kvt_get_s(a, "k", v, sizeof(v)), 0);
		cr_expect_str_eq(v, val);
	}
	kvc_get_stats(a, &st);
	cr_expect_eq(st.rejoins, 0, "no rejoin");
	cr_expect_eq(st.readmissions, 3);
	cr_expect_eq(kvi_client_conn(a, 0)->rm->client_id, me, "the same id");
	kvs_members_stats(env.srv.members, &ms);
	cr_expect_eq(ms.lapses, 3);
	cr_expect_eq(ms.readmissions, 3);
	kvc_destroy(a);
}

/* ... while a handle whose lease ends with an operation in flight is
 * expelled: its idle word reads busy. */
static int expire_in_flight(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	unsigned *expelled = arg, lapsed;

	(void)rm;
	if (op->kind == KVI_ROP_CAS && op->compare_add == 0 && *expelled == 0) {
		usleep(130 * 1000); /* past the lease */
		*expelled = kvt_env_expire(&env, &lapsed) + 100 * lapsed;
	}
	return 0;
}

Test(lease, a_handle_whose_lease_ends_with_an_operation_in_flight_is_expelled)
{
	static unsigned expelled;
	struct kvi_local_hooks hk = { .before_op = expire_in_flight, .arg = &expelled };
	kvc_t *a = client(&hk);
	int rc;

	rc = kvt_put_s(a, "k", "v");
	cr_expect_neq(rc, 0, "no commit after the lease");
	cr_expect_eq(expelled, 1, "expelled, not kept (%u)", expelled);
	*lock_of("k", 0) = *lock_of("k", 1) = 0;
	kvc_destroy(a);
}

/* A segment grant answered after the client's lease ran out (a loaded
 * server): with nothing posted and no lock held, the PUT renews its lease
 * and goes on, rather than fence a client that did nothing wrong (CI saw a
 * first PUT fail KVC_EFENCED this way) -- unless the server expelled it
 * meanwhile: then the renewal is refused and the PUT fails fenced. */
struct slow_grant {
	uint32_t id;
	int expel;       /* expire members while the grant "travels" */
	unsigned slowed, expelled;
};

static int slow_grant_ctrl(void *arg, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct slow_grant *g = arg;
	int rc = kvs_inproc_ctrl(&env.srv, client_id, req, resp);

	if (req->type == KVI_CTRL_SEG_REQ && g->slowed++ == 0) {
		usleep(130 * 1000); /* past the lease (100 ms), not the operation's 200 ms */
		if (g->expel) {
			unsigned lapsed;

			g->expelled = kvt_env_expire(&env, &lapsed);
		}
	}
	return rc;
}

static void slow_grants(kvc_t *a, struct slow_grant *g)
{
	struct kvi_rmem *rm = kvi_client_conn(a, 0)->rm;

	g->id = rm->client_id;
	kvi_rmem_local_set_ctrl(rm, slow_grant_ctrl, g, g->id);
}

Test(lease, a_grant_answered_after_the_lease_ended_renews_it_instead_of_fencing)
{
	kvc_t *a = client(NULL);
	struct slow_grant g = { 0 };
	struct kvc_stats st;
	char v[16];
	int rc;

	slow_grants(a, &g);
	rc = kvt_put_s(a, "k", "v");
	cr_expect_eq(rc, 0, "%s", kvc_err_name(rc));
	cr_expect_eq(g.slowed, 1);
	kvc_get_stats(a, &st);
	cr_expect_eq(st.lease_revivals, 1);
	cr_expect_eq(st.rejoins, 0);
	cr_expect_eq(kvi_client_conn(a, 0)->rm->client_id, g.id, "the same connection");
	cr_expect_eq(kvt_get_s(a, "k", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "v");
	kvc_destroy(a);
}

Test(lease, a_grant_answered_after_the_server_expelled_the_client_fails_fenced)
{
	kvc_t *a = client(NULL);
	struct slow_grant g = { .expel = 1 };
	struct kvc_stats st;
	char v[16];
	int rc;

	slow_grants(a, &g);
	rc = kvt_put_s(a, "k", "v");
	cr_expect_eq(rc, KVC_EFENCED, "%s", kvc_err_name(rc));
	cr_expect_eq(g.expelled, 1, "busy (an operation under way): expelled, not kept");
	cr_expect_eq(kvt_get_s(a, "k", v, sizeof(v)), KVC_ENOTFOUND, "nothing was written; a new connection");
	cr_expect_eq(kvt_put_s(a, "k", "w"), 0);
	kvc_get_stats(a, &st);
	cr_expect_eq(st.lease_revivals, 0);
	cr_expect_eq(st.rejoins, 1);
	kvc_destroy(a);
}

/* Stall a writer after it took its locks, past its lease. */
static int stall_armed;
static int stall_after_lock(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	if (stall_armed && op->kind == KVI_ROP_CAS && op->compare_add == 0) {
		stall_armed = 0;
		usleep(130 * 1000); /* past the lease; the operation deadline (200 ms) is not */
	}
	return 0;
}

Test(lease, a_writer_whose_lease_ran_out_holding_locks_posts_nothing_more)
{
	struct kvi_local_hooks hk = { .before_op = stall_after_lock };
	kvc_t *a = client(&hk), *b = client(NULL);
	uint32_t me = kvi_client_conn(a, 0)->rm->client_id;
	char v[16];
	int rc;

	stall_armed = 1;
	rc = kvt_put_s(a, "k", "v");
	cr_expect_eq(rc, KVC_EFENCED, "no commit after the lease: %s", kvc_err_name(rc));
	/* It holds its locks (the server fences it and releases them; this
	 * test's server does not): nothing was published. */
	cr_expect(*lock_of("k", 0) == kvi_lock_held_by(me) || *lock_of("k", 1) == kvi_lock_held_by(me));
	cr_expect_eq(kvt_get_s(b, "k", v, sizeof(v)), KVC_ENOTFOUND);
	*lock_of("k", 0) = *lock_of("k", 1) = 0;
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(lease, a_lock_word_naming_no_client_is_cleared_when_reported)
{
	kvc_t *a = client(NULL);
	struct kvc_stats st;
	uint64_t t0;

	*lock_of("k", 0) = kvi_lock_held_by(4000); /* a departed client's, say */
	t0 = kvi_mono_ns();
	cr_expect_eq(kvt_put_s(a, "k", "v"), 0, "the report clears it and the PUT goes on");
	cr_expect_lt(kvi_mono_ns() - t0, 200 * 1000000ull, "within the operation's deadline");
	kvc_get_stats(a, &st);
	cr_expect_geq(st.lock_reports, 1);
	cr_expect_geq(env.srv.verdicts[KVI_REPORT_CLEARING], 1);
	cr_expect_eq(*lock_of("k", 0), 0);
	kvc_destroy(a);
}

Test(lease, a_member_that_keeps_a_lock_past_every_deadline_is_condemned)
{
	kvc_t *owner = client(NULL), *a = client(NULL);
	uint32_t owner_id = kvi_client_conn(owner, 0)->rm->client_id;
	uint64_t t0 = kvi_mono_ns();
	int rc;

	/* owner "holds" k's lock and never lets go (a buggy client). */
	*lock_of("k", 0) = kvi_lock_held_by(owner_id);
	do {
		rc = kvt_put_s(a, "k", "v");
		cr_assert_eq(rc, KVC_ETIMEDOUT, "%s", kvc_err_name(rc));
		(void)kvc_get(owner, "x", 1, NULL, 0, NULL); /* owner stays alive (renews) */
	} while (env.srv.fenced_owner == 0 && kvi_mono_ns() - t0 < 2000 * 1000000ull);
	cr_expect_eq(env.srv.fenced_owner, owner_id, "condemned %u, owner %u", env.srv.fenced_owner, owner_id);
	cr_expect_geq(env.srv.verdicts[KVI_REPORT_WATCHING], 1);
	cr_expect_geq(kvi_mono_ns() - t0, 250 * 1000000ull, "not before one deadline + margin");
	*lock_of("k", 0) = 0;
	kvc_destroy(owner);
	kvc_destroy(a);
}
