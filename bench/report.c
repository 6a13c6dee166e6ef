#include "report.h"

#include <string.h>

static const char *dist_name(enum kvb_dist d)
{
	return d == KVB_DIST_UNIFORM ? "uniform" : d == KVB_DIST_LATEST ? "latest" : "zipfian";
}

/* Throughput counts the operations that succeeded; failures are reported
 * beside it, never as throughput. */
static double ok_rate(const struct kvb_phase *p, int t)
{
	return p->seconds > 0 ? (double)(p->ops[t] - p->failed[t]) / p->seconds : 0.0;
}

/* ---- text ---------------------------------------------------------------- */

static void text_row(FILE *f, const char *name, const struct kvb_phase *p, int t)
{
	const struct kvb_hist *h = &p->hist[t];

	if (p->ops[t] == 0)
		return;
	fprintf(f, "%-18s %10llu %11.0f %9.1f %9.1f %9.1f %9.1f %9.1f %8llu\n", name,
		(unsigned long long)p->ops[t], ok_rate(p, t),
		kvb_hist_quantile(h, 0.5) / 1e3, kvb_hist_quantile(h, 0.9) / 1e3, kvb_hist_quantile(h, 0.99) / 1e3,
		kvb_hist_quantile(h, 0.999) / 1e3, h->max / 1e3, (unsigned long long)p->failed[t]);
}

static void text_phase(FILE *f, const struct kvb_cfg *c, const char *name, const struct kvb_phase *p)
{
	fprintf(f, "\n%s phase: %.2f s", name, p->seconds);
	if (p->server_cpu_s >= 0 && p->seconds > 0)
		fprintf(f, ", server CPU %.2f %% of one core", 100.0 * p->server_cpu_s / p->seconds);
	fprintf(f, "\n%-18s %10s %11s %9s %9s %9s %9s %9s %8s\n", "operation", "count", "ops/s", "p50_us",
		"p90_us", "p99_us", "p99.9_us", "max_us", "errors");
	for (int t = 0; t < KVB_T_N; t++)
		text_row(f, kvb_type_names[t], p, t);
	text_row(f, "OVERALL", p, KVB_T_N);
	for (unsigned i = 0; i < p->errs.kinds; i++)
		fprintf(f, "  error %s: %llu\n", c->drv->errname(p->errs.status[i]), (unsigned long long)p->errs.n[i]);
	if (p->errs.other)
		fprintf(f, "  other errors: %llu\n", (unsigned long long)p->errs.other);
	if (p->fail_hist.count)
		fprintf(f, "  failed operations took: p50 %.1f us, p99 %.1f us, max %.1f us\n",
			kvb_hist_quantile(&p->fail_hist, 0.5) / 1e3, kvb_hist_quantile(&p->fail_hist, 0.99) / 1e3,
			p->fail_hist.max / 1e3);
}

void kvb_report_text(FILE *f, const struct kvb_cfg *c, const struct kvb_result *r)
{
	fprintf(f, "kvbench: workload %c (%s), %s distribution, target %s://%s%s%s (%s)\n", c->w->name, c->w->desc,
		dist_name(c->dist), c->drv->scheme, c->host, c->port[0] ? ":" : "", c->port, c->drv->name);
	if (c->sizes) {
		char d[160];

		kvb_sizedist_describe(c->sizes, d, sizeof(d));
		fprintf(f, "%llu records, values %s", (unsigned long long)c->records, d);
	} else {
		fprintf(f, "%llu records, values %u", (unsigned long long)c->records, c->vmin);
		if (c->vmax != c->vmin)
			fprintf(f, "-%u", c->vmax);
		fprintf(f, " B");
	}
	fprintf(f, ", %u threads x %u in flight%s, seed %llu, warm-up %.1f s not recorded\n", c->threads,
		c->depth < c->drv->max_depth ? c->depth : c->drv->max_depth,
		c->depth > c->drv->max_depth ? " (this driver blocks: one per thread)" : "",
		(unsigned long long)c->seed, c->warmup_s);
	if (c->load)
		text_phase(f, c, "load", &r->load);
	if (c->load && r->mem_after_load >= 0)
		fprintf(f, "server memory holding items after the load: %lld bytes, %.1f bytes per record\n",
			(long long)r->mem_after_load, (double)r->mem_after_load / (double)c->records);
	text_phase(f, c, "run", &r->run);
	if (r->rt_kinds) {
		fprintf(f, "\nround trips per operation (library counters, %s):\n",
			c->prime ? "run, warm-up included; the priming reads left out" : "load and run");
		for (unsigned k = 0; k < r->rt_kinds; k++)
			if (r->rt_ops[k])
				fprintf(f, "  %-18s %10llu ops %6.2f round trips/op\n", r->rt_names[k],
					(unsigned long long)r->rt_ops[k], (double)r->rt_rtts[k] / (double)r->rt_ops[k]);
	}
}

/* ---- JSON ---------------------------------------------------------------- */

static void json_hist(FILE *f, const struct kvb_hist *h)
{
	fprintf(f, "{\"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"p999\": %.3f, \"max\": %.3f, \"mean\": %.3f}",
		kvb_hist_quantile(h, 0.5) / 1e3, kvb_hist_quantile(h, 0.9) / 1e3, kvb_hist_quantile(h, 0.99) / 1e3,
		kvb_hist_quantile(h, 0.999) / 1e3, h->max / 1e3, h->count ? (double)h->sum / (double)h->count / 1e3 : 0.0);
}

/* The latency CDF as (microseconds, fraction) points, for plots. */
static void json_cdf(FILE *f, const struct kvb_hist *h)
{
	static const double q[] = { 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999, 1.0 };

	fputc('[', f);
	for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++)
		fprintf(f, "%s[%.3f, %g]", i ? ", " : "", kvb_hist_quantile(h, q[i]) / 1e3, q[i]);
	fputc(']', f);
}

static void json_phase(FILE *f, const struct kvb_cfg *c, const struct kvb_phase *p)
{
	fprintf(f, "{\"seconds\": %.3f, \"server_cpu_percent\": ", p->seconds);
	if (p->server_cpu_s >= 0 && p->seconds > 0)
		fprintf(f, "%.3f", 100.0 * p->server_cpu_s / p->seconds);
	else
		fputs("null", f);
	fprintf(f, ", \"operations\": {");
	for (int t = 0, first = 1; t <= KVB_T_N; t++) {
		if (t < KVB_T_N && p->ops[t] == 0)
			continue;
		fprintf(f, "%s\"%s\": {\"count\": %llu, \"errors\": %llu, \"throughput_ops_s\": %.1f, \"latency_us\": ",
			first ? "" : ", ", t == KVB_T_N ? "OVERALL" : kvb_type_names[t], (unsigned long long)p->ops[t],
			(unsigned long long)p->failed[t], ok_rate(p, t));
		json_hist(f, &p->hist[t]);
		fprintf(f, ", \"latency_cdf\": ");
		json_cdf(f, &p->hist[t]);
		fputc('}', f);
		first = 0;
	}
	fprintf(f, "}, \"failed_latency_us\": ");
	json_hist(f, &p->fail_hist);
	fprintf(f, ", \"errors\": {");
	for (unsigned i = 0; i < p->errs.kinds; i++)
		fprintf(f, "%s\"%s\": %llu", i ? ", " : "", c->drv->errname(p->errs.status[i]),
			(unsigned long long)p->errs.n[i]);
	if (p->errs.other)
		fprintf(f, "%s\"other\": %llu", p->errs.kinds ? ", " : "", (unsigned long long)p->errs.other);
	fprintf(f, "}}");
}

void kvb_report_json(FILE *f, const struct kvb_cfg *c, const struct kvb_result *r)
{
	fprintf(f, "{\"kvbench_format\": 1, \"system\": \"%s\", \"target\": \"%s://%s%s%s\", \"workload\": \"%c\", "
		   "\"distribution\": \"%s\", \"records\": %llu, \"threads\": %u, "
		   "\"depth\": %u, \"effective_depth\": %u, \"value_size\": {\"min\": %u, \"max\": %u, \"mean\": %.1f}, "
		   "\"seed\": %llu, \"warmup_seconds\": %.3f,\n",
		c->drv->name, c->drv->scheme, c->host, c->port[0] ? ":" : "", c->port, c->w->name, dist_name(c->dist),
		(unsigned long long)c->records, c->threads, c->depth,
		c->depth < c->drv->max_depth ? c->depth : c->drv->max_depth, c->vmin, c->vmax,
		c->sizes ? c->sizes->mean : ((double)c->vmin + c->vmax) / 2, (unsigned long long)c->seed, c->warmup_s);
	if (c->load) {
		fprintf(f, " \"load\": ");
		json_phase(f, c, &r->load);
		fprintf(f, ",\n \"server_bytes_after_load\": ");
		if (r->mem_after_load >= 0)
			fprintf(f, "%lld, \"bytes_per_record\": %.2f,\n", (long long)r->mem_after_load,
				(double)r->mem_after_load / (double)c->records);
		else
			fprintf(f, "null, \"bytes_per_record\": null,\n");
	}
	fprintf(f, " \"run\": ");
	json_phase(f, c, &r->run);
	fprintf(f, ",\n \"round_trips\": {");
	for (unsigned k = 0, first = 1; k < r->rt_kinds; k++) {
		if (!r->rt_ops[k])
			continue;
		fprintf(f, "%s\"%s\": {\"ops\": %llu, \"round_trips_per_op\": %.4f}", first ? "" : ", ", r->rt_names[k],
			(unsigned long long)r->rt_ops[k], (double)r->rt_rtts[k] / (double)r->rt_ops[k]);
		first = 0;
	}
	fprintf(f, "}}\n");
}
