/*
 * prom.h: Prometheus metrics kept in memory, and their text exposition
 * (format 0.0.4, what /metrics serves).
 *
 * A metric is a static struct prom_metric: a family with at most one
 * label (or two, label2, kept as one value "a,b").  Counting is O(1) per
 * event: the label value is found among at most PROM_LABELS_MAX by
 * comparing strings, never allocated.  A family
 * holds the values it was declared with (preset) and those it met since,
 * up to PROM_LABELS_MAX - 1; past that every new value counts as "other",
 * so a label can never grow without bound whatever the callers pass.
 *
 * Costs: each metric is about 4 KiB of zeroed static memory (its bucket
 * table); formatting is O(values x buckets) per metric.  Single-threaded:
 * the process's event loop is the only caller.
 */
#ifndef TETHER_PROM_H
#define TETHER_PROM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PROM_LABELS_MAX  24    /* values of one family's label, "other" included */
#define PROM_BUCKETS_MAX 16    /* histogram buckets, +Inf not counted */
#define PROM_LABEL_LEN   32    /* longest label value kept, NUL included */

enum prom_kind { PROM_COUNTER, PROM_GAUGE, PROM_HISTOGRAM };

struct prom_metric {
	/* Set where the metric is defined: */
	const char *name;              /* tether_..._total, _seconds, _bytes */
	const char *help;
	enum prom_kind kind;
	const char *label;             /* the label's name, or NULL: none */
	const char *label2;            /* a second label's name, or NULL: then a
	                                  value "a,b" is written label="a",
	                                  label2="b" (a value without a comma:
	                                  label only) */
	const char *const *preset;     /* values shown from the start (NULL-ended) */
	const double *bounds;          /* histogram: upper bounds, ascending */
	size_t nbounds;                /* at most PROM_BUCKETS_MAX */
	/* Kept by prom.c: */
	int ready;                     /* presets loaded */
	size_t nvalues;
	char values[PROM_LABELS_MAX][PROM_LABEL_LEN];
	double v[PROM_LABELS_MAX];     /* counter or gauge; histogram: the sum */
	uint64_t count[PROM_LABELS_MAX];                    /* histogram */
	uint64_t bucket[PROM_LABELS_MAX][PROM_BUCKETS_MAX]; /* histogram, not cumulative */
};

/* label: the label's value ("" or NULL for a metric without a label). */
void prom_inc(struct prom_metric *m, const char *label);
/* Adds v (a counter only ever grows: v >= 0). */
void prom_add(struct prom_metric *m, const char *label, double v);
/* Sets a gauge. */
void prom_set(struct prom_metric *m, const char *label, double v);
/* Records one observation of a histogram. */
void prom_observe(struct prom_metric *m, const char *label, double v);
/* Adds count observations of a histogram at once, summing to sum: bucket[b]
 * of them in bucket b (not cumulative; nbounds entries, the rest are
 * above the last bound).  For counts kept apart and folded in later. */
void prom_observe_counts(struct prom_metric *m, const char *label,
    const uint64_t *bucket, uint64_t count, double sum);
/* The current value of a counter or gauge (0 if never touched). */
double prom_get(struct prom_metric *m, const char *label);
/* Forgets every value (tests). */
void prom_reset(struct prom_metric *m);

/* Writes the metrics in the text format.  Returns 0, or -1 on a write error. */
int prom_write(FILE *out, struct prom_metric *const *ms, size_t n);

/*
 * Writes the standard process metrics of this process (Linux /proc):
 * process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds (O(open fds)),
 * process_max_fds, process_start_time_seconds.  Returns 0 or -1.
 */
int prom_write_process(FILE *out);

/* Some families, for prom_text. */
struct prom_list {
	struct prom_metric *const *ms;
	size_t n;
};

/* A whole scrape: the families of each list in turn, then the process
 * metrics.  Malloc'd, with *len; NULL when out of memory. */
char *prom_text(const struct prom_list *lists, size_t nlists, size_t *len);

/* Seconds on a monotonic clock, for durations. */
double prom_now(void);

#endif
