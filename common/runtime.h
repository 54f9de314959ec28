/*
 * runtime.h: process-wide settings every Tether program makes first thing.
 */
#ifndef TETHER_RUNTIME_H
#define TETHER_RUNTIME_H

/*
 * Ignores SIGPIPE (a peer that goes away is an error return, not death),
 * makes jansson wipe every block it frees (JSON carries tokens), and
 * tunes malloc for bulk streams: buffers of 128 KiB to 1 MiB come and go for
 * every message, and glibc's defaults would map and unmap (or trim and
 * regrow) them each time, paying a page fault per 4 KiB.
 */
void runtime_init(void);

struct event_base;
/*
 * The process's one event loop.  epoll with a changelist: interest in
 * writability comes and goes with every message, and the changelist folds
 * those changes into one epoll_ctl per socket per loop iteration, or none.
 */
struct event_base *runtime_event_base(void);

#include <stdint.h>
#include <sys/time.h>

/*
 * Raises the soft open-files limit (RLIMIT_NOFILE) to the hard one: every
 * tunnel, stream and dial is a descriptor, and the usual soft limit (1024)
 * caps a gateway at about a thousand agents.  Returns the soft limit now in
 * force (LONG_MAX when unlimited, -1 when it cannot be read); *was gets the
 * soft limit before (may be NULL).  The caller says what the limit means.
 */
long runtime_raise_nofile(long *was);

/* ms milliseconds as the struct timeval libevent's timers take. */
struct timeval runtime_ms_timeval(uint32_t ms);

#endif
