/* runtime.c: process-wide settings (see runtime.h). */
#include "runtime.h"

#include <malloc.h>
#include <signal.h>

void
runtime_init(void)
{
	signal(SIGPIPE, SIG_IGN);
	/* Keep message-sized buffers in the heap and the heap's top in place:
	 * memory is still bounded by the flow-control windows. */
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 32 << 20);
}
