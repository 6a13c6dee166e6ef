/* kvbench results: a table for people on stdout, and the same numbers as JSON
 * with stable field names (documented in docs/benchmarking.md "JSON output") for scripts. */
#ifndef KVB_REPORT_H
#define KVB_REPORT_H

#include <stdio.h>

#include "runner.h"

void kvb_report_text(FILE *f, const struct kvb_cfg *c, const struct kvb_result *r);
void kvb_report_json(FILE *f, const struct kvb_cfg *c, const struct kvb_result *r);

#endif
