/* printable.c: peer text made safe to show on a terminal (see printable.h). */
#include "printable.h"

void
text_printable(char *dst, size_t dstlen, const char *src, size_t srclen)
{
	size_t n = 0;

	if (dstlen == 0)
		return;
	for (size_t i = 0; i < srclen && n + 1 < dstlen; i++) {
		unsigned char ch = (unsigned char)src[i];

		dst[n++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
	}
	while (n > 0 && dst[n - 1] == ' ')
		n--;
	dst[n] = '\0';
}
