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
#include "tlswrite.h"

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
	 * memory is still bounded by the flow-control windows.  The trim
	 * threshold is also what a thread's own arena (every event loop but
	 * the first, --workers) keeps free at its top: malloc_trim releases
	 * the main arena's top and every arena's free chunks, not another
	 * arena's top, which only shrinks past this on a free.  8 MiB: a
	 * loop's flood, once closed, leaves at most that resident. */
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 8 << 20);
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

/* A line is held with none before it: written at the end of this pass,
 * with the pass's flush of TLS records when one is scheduled (one event
 * for both), else by the audit's own. */
static void
audit_first_held(void *arg)
{
	if (!tls_write_after_flush(event_get_base(arg), log_audit_flush))
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
	int pagemap;        /* /proc/self/pagemap (a test's stand-in), or -1 */
	uint8_t *copy;      /* one page of an object's file, or NULL */
	size_t released;
};

/* Whether the page at a holds exactly what the object's file fd holds at
 * off: what a private file page refaults to once dropped, so that dropping
 * it then changes nothing.  Read byte by byte without the sanitizer (a page
 * of globals holds ASan's redzones; no memcmp it would intercept). */
__attribute__((no_sanitize_address)) static int
page_as_in_file(const struct release *r, int fd, uintptr_t a, off_t off)
{
	const volatile uint8_t *p = (const volatile uint8_t *)a;

	if (pread(fd, r->copy, r->page, off) != (ssize_t)r->page)
		return 0;
	for (size_t i = 0; i < r->page; i++)
		if (p[i] != r->copy[i])
			return 0;
	return 1;
}

/* Of a writable segment (start..end, the file's bytes from off), the pages
 * still the file's, released one at a time; written (anonymous) pages stay.
 * pagemap's "present" and "file page" bits pick the candidates, and a page
 * goes only if it holds what the file holds: under qemu-user the pagemap
 * read is the host's, whose bits say nothing of the guest's pages (dropping
 * a written page there reverted glibc's __stack_chk_guard to the file's 0:
 * "stack smashing detected" on the armhf agent, 2 s after a tunnel came
 * up). */
static void
release_file_pages(struct release *r, int fd, uintptr_t start, uintptr_t end,
    off_t off)
{
	uint64_t e[64];

	for (uintptr_t a = start; a < end;) {
		size_t n = (end - a) / r->page, bytes;

		n = n > 64 ? 64 : n;
		bytes = n * sizeof(e[0]);
		if (pread(r->pagemap, e, bytes, (off_t)(a / r->page * sizeof(e[0]))) !=
		    (ssize_t)bytes)
			return;
		for (size_t i = 0; i < n; i++, a += r->page, off += (off_t)r->page)
			if ((e[i] >> 63 & 1) != 0 && (e[i] >> 61 & 1) != 0 &&
			    page_as_in_file(r, fd, a, off) &&
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
	const char *file = info->dlpi_name != NULL && info->dlpi_name[0] != '\0' ?
	    info->dlpi_name : "/proc/self/exe";
	int fd = -1;

	(void)size;
	/* The vDSO is the kernel's, not a file mapping. */
	if (info->dlpi_name != NULL && strncmp(info->dlpi_name, "linux-", 6) == 0)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_filesz;
		uintptr_t start = (lo + page - 1) & ~(page - 1), end = hi & ~(page - 1);
		uintptr_t first = lo & ~(page - 1);

		if (ph->p_type != PT_LOAD)
			continue;
		if ((ph->p_flags & PF_W) != 0) {
			if (r->pagemap < 0 || r->copy == NULL || ph->p_offset < lo - first)
				continue;
			if (fd < 0 && (fd = open(file, O_RDONLY | O_CLOEXEC)) < 0)
				continue;
			release_file_pages(r, fd, first, (hi + page - 1) & ~(page - 1),
			    (off_t)(ph->p_offset - (lo - first)));
		} else if (end > start && madvise((void *)start, end - start, MADV_DONTNEED) == 0) {
			r->released += end - start;
		}
	}
	if (fd >= 0)
		close(fd);
	return 0;
}

size_t
runtime_release_startup_with(const char *pagemap)
{
	struct release r = {
		.page = (uintptr_t)sysconf(_SC_PAGESIZE),
		.pagemap = open(pagemap, O_RDONLY | O_CLOEXEC),
	};

	malloc_trim(0);
	r.copy = malloc(r.page);
	dl_iterate_phdr(release_object, &r);
	free(r.copy);
	if (r.pagemap >= 0)
		close(r.pagemap);
	return r.released;
}

size_t
runtime_release_startup(void)
{
	return runtime_release_startup_with("/proc/self/pagemap");
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
