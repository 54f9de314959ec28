/*
 * printable.h: text a peer sent, shown to a person (an error message on a
 * terminal, a table cell).  One function, so that no gateway, node or
 * server can drive a terminal with the bytes it sends.  Log lines do not
 * need it: common/log.c quotes and escapes every value (docs/0008).
 */
#ifndef TETHER_PRINTABLE_H
#define TETHER_PRINTABLE_H

#include <stddef.h>

/*
 * Copies srclen bytes of src into dst as printable ASCII: bytes 0x20 to
 * 0x7e are kept, every other byte becomes '?'; trailing spaces are
 * dropped; the copy is cut to dstlen - 1 bytes and always NUL-terminated
 * (dstlen > 0).  dst may be src (in place).
 */
void text_printable(char *dst, size_t dstlen, const char *src, size_t srclen);

#endif
