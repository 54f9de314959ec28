/*
 * runtime.h: process-wide settings every Tether program makes first thing.
 */
#ifndef TETHER_RUNTIME_H
#define TETHER_RUNTIME_H

/*
 * Ignores SIGPIPE (a peer that goes away is an error return, not death) and
 * tunes malloc for bulk streams: buffers of 128 KiB to 1 MiB come and go for
 * every message, and glibc's defaults would map and unmap (or trim and
 * regrow) them each time, paying a page fault per 4 KiB.
 */
void runtime_init(void);

#endif
