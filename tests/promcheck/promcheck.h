/* A strict checker of Prometheus text exposition (format 0.0.4), stricter
 * than Prometheus itself where kvserver promises more:
 *  - every line is "# HELP name text", "# TYPE name type" or a sample
 *    "name{label="value",...} value" (labels optional; no timestamps, no
 *    other comments, no blank lines), and the text ends with a newline;
 *  - names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*
 *    (not starting "__"), label values use only the escapes \\ \" \n,
 *    values parse as floats;
 *  - each family has exactly one HELP and one TYPE line, both before its
 *    samples, its samples are contiguous and carry its name, and a family
 *    appears once;
 *  - counters end in _total and are never negative or NaN;
 *  - no series (name and label set, in any order) appears twice.
 * Used by the unit test of the renderer and by the verbs test that scrapes
 * a live kvserver. */
#ifndef KVT_PROMCHECK_H
#define KVT_PROMCHECK_H

#include <stddef.h>

/* 0 if text passes, else -1 with the first problem (and its line) in err. */
int kvt_prom_check(const char *text, char *err, size_t errlen);

/* The value of the sample whose series is exactly `series` as written
 * ("kvcache_segments{state=\"free\"}", or a bare name): 0, or -1 if absent. */
int kvt_prom_value(const char *text, const char *series, double *v);

#endif
