/*
 * prom.c: in-memory Prometheus metrics and the text exposition (see prom.h).
 */
#include "prom.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define OTHER "other"

static void
prom_ready(struct prom_metric *m)
{
	if (m->ready)
		return;
	m->ready = 1;
	if (m->label == NULL) {
		m->nvalues = 1;      /* slot 0, no label */
		return;
	}
	for (size_t i = 0; m->preset != NULL && m->preset[i] != NULL &&
	    m->nvalues < PROM_LABELS_MAX - 1; i++)
		snprintf(m->values[m->nvalues++], PROM_LABEL_LEN, "%s", m->preset[i]);
}

/* The slot of label's value: found, added, or "other" once the family is
 * full (the last slot is kept for it). */
static size_t
prom_slot(struct prom_metric *m, const char *label)
{
	char key[PROM_LABEL_LEN];
	size_t i;

	prom_ready(m);
	if (m->label == NULL)
		return 0;
	/* Longer values are cut, as they are kept. */
	snprintf(key, sizeof(key), "%s", label != NULL && *label != '\0' ? label : "none");
	for (i = 0; i < m->nvalues; i++)
		if (strcmp(m->values[i], key) == 0)
			return i;
	if (m->nvalues < PROM_LABELS_MAX - 1) {
		memcpy(m->values[m->nvalues], key, sizeof(key));
		return m->nvalues++;
	}
	if (m->nvalues == PROM_LABELS_MAX - 1)
		snprintf(m->values[m->nvalues++], PROM_LABEL_LEN, "%s", OTHER);
	return PROM_LABELS_MAX - 1;
}

void
prom_inc(struct prom_metric *m, const char *label)
{
	m->v[prom_slot(m, label)] += 1;
}

void
prom_add(struct prom_metric *m, const char *label, double v)
{
	m->v[prom_slot(m, label)] += v;
}

void
prom_set(struct prom_metric *m, const char *label, double v)
{
	m->v[prom_slot(m, label)] = v;
}

void
prom_observe(struct prom_metric *m, const char *label, double v)
{
	size_t i = prom_slot(m, label), b;

	m->v[i] += v;
	m->count[i]++;
	for (b = 0; b < m->nbounds && b < PROM_BUCKETS_MAX; b++)
		if (v <= m->bounds[b])
			break;
	if (b < m->nbounds && b < PROM_BUCKETS_MAX)
		m->bucket[i][b]++;
}

void
prom_observe_counts(struct prom_metric *m, const char *label,
    const uint64_t *bucket, uint64_t count, double sum)
{
	size_t i = prom_slot(m, label);

	m->v[i] += sum;
	m->count[i] += count;
	for (size_t b = 0; b < m->nbounds && b < PROM_BUCKETS_MAX; b++)
		m->bucket[i][b] += bucket[b];
}

double
prom_get(struct prom_metric *m, const char *label)
{
	return m->v[prom_slot(m, label)];
}

void
prom_reset(struct prom_metric *m)
{
	m->ready = 0;
	m->nvalues = 0;
	memset(m->values, 0, sizeof(m->values));
	memset(m->v, 0, sizeof(m->v));
	memset(m->count, 0, sizeof(m->count));
	memset(m->bucket, 0, sizeof(m->bucket));
}

/* ---- exposition ---- */

/* A sample value: integers without a fraction, others exactly. */
static void
fmt_value(double v, char *buf, size_t len)
{
	if (isnan(v))
		snprintf(buf, len, "NaN");
	else if (isinf(v))
		snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
	else if (v == floor(v) && fabs(v) < 9007199254740992.0)
		snprintf(buf, len, "%.0f", v);
	else
		snprintf(buf, len, "%.17g", v);
}

/* A label value, escaped as the text format wants (\\, \", \n). */
static void
fmt_label(const char *s, char *buf, size_t len)
{
	size_t o = 0;

	for (; *s != '\0' && o + 3 < len; s++) {
		if (*s == '\\' || *s == '"') {
			buf[o++] = '\\';
			buf[o++] = *s;
		} else if (*s == '\n') {
			buf[o++] = '\\';
			buf[o++] = 'n';
		} else
			buf[o++] = *s;
	}
	buf[o] = '\0';
}

/* The label set "{name="value"" without the closing brace, or "". */
static void
fmt_labels(const struct prom_metric *m, size_t i, char *buf, size_t len)
{
	char esc[2 * PROM_LABEL_LEN + 4];

	char first[PROM_LABEL_LEN], esc2[2 * PROM_LABEL_LEN + 4];
	const char *comma;
	size_t n;

	if (m->label == NULL) {
		buf[0] = '\0';
		return;
	}
	comma = m->label2 != NULL ? strchr(m->values[i], ',') : NULL;
	if (comma == NULL) {
		fmt_label(m->values[i], esc, sizeof(esc));
		snprintf(buf, len, "%s=\"%s\"", m->label, esc);
		return;
	}
	/* Two labels: the value is "first,second". */
	n = (size_t)(comma - m->values[i]);
	memcpy(first, m->values[i], n);
	first[n] = '\0';
	fmt_label(first, esc, sizeof(esc));
	fmt_label(comma + 1, esc2, sizeof(esc2));
	snprintf(buf, len, "%s=\"%s\",%s=\"%s\"", m->label, esc, m->label2, esc2);
}

static int
write_histogram(FILE *out, const struct prom_metric *m, size_t i)
{
	char labels[128], sep[2] = "", val[40], le[40];
	uint64_t cum = 0;
	int r = 0;

	fmt_labels(m, i, labels, sizeof(labels));
	if (labels[0] != '\0')
		sep[0] = ',';
	for (size_t b = 0; b < m->nbounds && b < PROM_BUCKETS_MAX; b++) {
		cum += m->bucket[i][b];
		fmt_value(m->bounds[b], le, sizeof(le));
		if (m->bounds[b] != floor(m->bounds[b]))
			snprintf(le, sizeof(le), "%g", m->bounds[b]);
		r |= fprintf(out, "%s_bucket{%s%sle=\"%s\"} %llu\n", m->name, labels, sep,
		    le, (unsigned long long)cum) < 0;
	}
	r |= fprintf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", m->name, labels, sep,
	    (unsigned long long)m->count[i]) < 0;
	fmt_value(m->v[i], val, sizeof(val));
	if (labels[0] != '\0') {
		r |= fprintf(out, "%s_sum{%s} %s\n", m->name, labels, val) < 0;
		r |= fprintf(out, "%s_count{%s} %llu\n", m->name, labels,
		    (unsigned long long)m->count[i]) < 0;
	} else {
		r |= fprintf(out, "%s_sum %s\n", m->name, val) < 0;
		r |= fprintf(out, "%s_count %llu\n", m->name,
		    (unsigned long long)m->count[i]) < 0;
	}
	return r ? -1 : 0;
}

static int
write_metric(FILE *out, struct prom_metric *m)
{
	static const char *const types[] = {
		[PROM_COUNTER] = "counter", [PROM_GAUGE] = "gauge",
		[PROM_HISTOGRAM] = "histogram",
	};
	char labels[128], val[40];
	int r = 0;

	prom_ready(m);
	r |= fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help,
	    m->name, types[m->kind]) < 0;
	for (size_t i = 0; i < m->nvalues; i++) {
		if (m->kind == PROM_HISTOGRAM) {
			r |= write_histogram(out, m, i);
			continue;
		}
		fmt_labels(m, i, labels, sizeof(labels));
		fmt_value(m->v[i], val, sizeof(val));
		if (labels[0] != '\0')
			r |= fprintf(out, "%s{%s} %s\n", m->name, labels, val) < 0;
		else
			r |= fprintf(out, "%s %s\n", m->name, val) < 0;
	}
	return r ? -1 : 0;
}

int
prom_write(FILE *out, struct prom_metric *const *ms, size_t n)
{
	int r = 0;

	for (size_t i = 0; i < n; i++)
		r |= write_metric(out, ms[i]);
	return r ? -1 : 0;
}

char *
prom_text(const struct prom_list *lists, size_t nlists, size_t *len)
{
	char *text = NULL;
	FILE *f = open_memstream(&text, len);
	int r = 0;

	if (f == NULL)
		return NULL;
	for (size_t i = 0; i < nlists; i++)
		r |= prom_write(f, lists[i].ms, lists[i].n);
	r |= prom_write_process(f);
	if (fclose(f) != 0 || r != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* ---- process metrics ---- */

double
prom_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Open descriptors: entries of /proc/self/fd, less the one reading it. */
static long
open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	long n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n > 0 ? n - 1 : 0;
}

/* Start time: /proc/self/stat field 22 (clock ticks after boot) plus the
 * boot time from /proc/stat.  -1 if unreadable. */
static double
start_time(void)
{
	char buf[1024], *p;
	unsigned long long ticks = 0, btime = 0;
	size_t n;
	FILE *f = fopen("/proc/self/stat", "r");
	int field;

	if (f == NULL)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The command name may hold spaces and ')': fields start after the last ')'. */
	if ((p = strrchr(buf, ')')) == NULL)
		return -1;
	p++;
	for (field = 3; field <= 22 && p != NULL; field++) {
		while (*p == ' ')
			p++;
		if (field == 22)
			ticks = strtoull(p, NULL, 10);
		p = strchr(p, ' ');
	}
	if ((f = fopen("/proc/stat", "r")) == NULL)
		return -1;
	while (fgets(buf, sizeof(buf), f) != NULL)
		if (strncmp(buf, "btime ", 6) == 0)
			btime = strtoull(buf + 6, NULL, 10);
	fclose(f);
	if (btime == 0)
		return -1;
	return (double)btime + (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

int
prom_write_process(FILE *out)
{
	static struct prom_metric cpu = { .name = "process_cpu_seconds_total",
	    .help = "User and system CPU time spent in seconds.", .kind = PROM_COUNTER };
	static struct prom_metric rss = { .name = "process_resident_memory_bytes",
	    .help = "Resident memory size in bytes.", .kind = PROM_GAUGE };
	static struct prom_metric vsz = { .name = "process_virtual_memory_bytes",
	    .help = "Virtual memory size in bytes.", .kind = PROM_GAUGE };
	static struct prom_metric fds = { .name = "process_open_fds",
	    .help = "Number of open file descriptors.", .kind = PROM_GAUGE };
	static struct prom_metric maxfds = { .name = "process_max_fds",
	    .help = "Maximum number of open file descriptors.", .kind = PROM_GAUGE };
	static struct prom_metric start = { .name = "process_start_time_seconds",
	    .help = "Start time of the process since unix epoch in seconds.",
	    .kind = PROM_GAUGE };
	struct prom_metric *const all[] = { &cpu, &rss, &vsz, &fds, &maxfds, &start };
	struct rusage ru;
	struct rlimit rl;
	unsigned long long pages_v = 0, pages_r = 0;
	long page = sysconf(_SC_PAGESIZE);
	FILE *f;

	if (getrusage(RUSAGE_SELF, &ru) == 0)
		prom_set(&cpu, NULL, (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
		    (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	if ((f = fopen("/proc/self/statm", "r")) != NULL) {
		if (fscanf(f, "%llu %llu", &pages_v, &pages_r) == 2) {
			prom_set(&vsz, NULL, (double)pages_v * (double)page);
			prom_set(&rss, NULL, (double)pages_r * (double)page);
		}
		fclose(f);
	}
	prom_set(&fds, NULL, (double)open_fds());
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		prom_set(&maxfds, NULL, rl.rlim_cur == RLIM_INFINITY ? INFINITY :
		    (double)rl.rlim_cur);
	if (prom_get(&start, NULL) == 0)
		prom_set(&start, NULL, start_time());
	return prom_write(out, all, sizeof(all) / sizeof(all[0]));
}
