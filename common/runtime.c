/* runtime.c: process-wide settings, and per-loop helpers (see runtime.h). */
#include "runtime.h"

#include <fcntl.h>
#include <link.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>
#include <openssl/crypto.h>

#include "log.h"

/* jansson's blocks hold what requests and answers carry (tokens, join
 * documents, kubeconfigs): every one is wiped before it is freed.  Cost: a
 * memset of each freed block (they are small: one value each). */
static void
json_free_wiped(void *p)
{
	if (p != NULL) {
		OPENSSL_cleanse(p, malloc_usable_size(p));
		free(p);
	}
}

void
runtime_init(void)
{
	signal(SIGPIPE, SIG_IGN);
	json_set_alloc_funcs(malloc, json_free_wiped);
	/* Keep message-sized buffers in the heap and the heap's top in place:
	 * memory is still bounded by the flow-control windows. */
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 32 << 20);
}

static long
rlim_long(rlim_t v)
{
	return v == RLIM_INFINITY || v > (rlim_t)LONG_MAX ? LONG_MAX : (long)v;
}

long
runtime_raise_nofile(long *was)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return -1;
	if (was != NULL)
		*was = rlim_long(rl.rlim_cur);
	if (rl.rlim_cur != rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && getrlimit(RLIMIT_NOFILE, &rl) != 0)
			return -1;
	}
	return rlim_long(rl.rlim_cur);
}

struct timeval
runtime_ms_timeval(uint32_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	return tv;
}

struct timeval
runtime_common_timeval(struct event_base *base, uint32_t ms)
{
	struct timeval tv = runtime_ms_timeval(ms);
	const struct timeval *common;

	if (ms == 0 || (common = event_base_init_common_timeout(base, &tv)) == NULL)
		return tv;
	return *common;
}

void
runtime_drain(struct event_base *base)
{
	for (int pass = 0; pass < 16 &&
	    event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE) > 0; pass++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

struct event_base *
runtime_event_base(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *base;

	if (cfg == NULL)
		return NULL;
	event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
	base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	return base;
}

/* The calling thread's flush event, on the base of its loop (one loop per
 * thread, docs/0040): each loop flushes the audit lines it held. */
static _Thread_local struct event *audit_flush_ev;

static void
audit_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	log_audit_flush();
}

static void
audit_first_held(void *arg)
{
	event_active(arg, EV_TIMEOUT, 0);
}

int
runtime_audit_per_pass(struct event_base *base)
{
	log_audit_hold(NULL, NULL);
	if (audit_flush_ev != NULL) {
		event_free(audit_flush_ev);
		audit_flush_ev = NULL;
	}
	if (base == NULL)
		return 0;
	if ((audit_flush_ev = event_new(base, -1, 0, audit_flush_cb, NULL)) == NULL)
		return -1;
	log_audit_hold(audit_first_held, audit_flush_ev);
	return 0;
}

int64_t
runtime_monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct release {
	uintptr_t page;
	int pagemap;        /* /proc/self/pagemap, or -1 */
	size_t released;
};

/* Of a writable segment, the pages still the file's (present, pagemap's
 * "file page" bit: never written, so the file holds what they hold),
 * released one at a time; written (anonymous) pages stay. */
static void
release_file_pages(struct release *r, uintptr_t start, uintptr_t end)
{
	uint64_t e[64];

	for (uintptr_t a = start; a < end;) {
		size_t n = (end - a) / r->page, bytes;

		n = n > 64 ? 64 : n;
		bytes = n * sizeof(e[0]);
		if (pread(r->pagemap, e, bytes, (off_t)(a / r->page * sizeof(e[0]))) !=
		    (ssize_t)bytes)
			return;
		for (size_t i = 0; i < n; i++, a += r->page)
			if ((e[i] >> 63 & 1) != 0 && (e[i] >> 61 & 1) != 0 &&
			    madvise((void *)a, r->page, MADV_DONTNEED) == 0)
				r->released += r->page;
	}
}

/* dl_iterate_phdr's callback: the loadable segments of one object. */
static int
release_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct release *r = arg;
	uintptr_t page = r->page;

	(void)size;
	/* The vDSO is the kernel's, not a file mapping. */
	if (info->dlpi_name != NULL && strncmp(info->dlpi_name, "linux-", 6) == 0)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_filesz;
		uintptr_t start = (lo + page - 1) & ~(page - 1), end = hi & ~(page - 1);

		if (ph->p_type != PT_LOAD)
			continue;
		if ((ph->p_flags & PF_W) != 0) {
			if (r->pagemap >= 0)
				release_file_pages(r, lo & ~(page - 1), (hi + page - 1) & ~(page - 1));
		} else if (end > start && madvise((void *)start, end - start, MADV_DONTNEED) == 0) {
			r->released += end - start;
		}
	}
	return 0;
}

size_t
runtime_release_startup(void)
{
	struct release r = {
		.page = (uintptr_t)sysconf(_SC_PAGESIZE),
		.pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC),
	};

	malloc_trim(0);
	dl_iterate_phdr(release_object, &r);
	if (r.pagemap >= 0)
		close(r.pagemap);
	return r.released;
}

void
runtime_test_stop(const char *step)
{
	const char *at = getenv("TETHER_TEST_STOP_AT");

	if (at == NULL || strcmp(at, step) != 0)
		return;
	warn("test hook: stopped at step", KV_S("step", step));
	raise(SIGSTOP);
}
