/*
 * fuzz_token.c: libFuzzer target for token_parse, which reads untrusted bytes
 * straight from Authorization headers and credential files.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "token.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct token t;
	char err[128];
	char out[TOKEN_STR_MAX];
	char *s;

	err[0] = '\0';
	/* token_parse takes a C string: give it exactly the input, terminated. */
	if ((s = malloc(size + 1)) == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (token_parse(s, &t, err, sizeof(err)) == 0) {
		/* Whatever parses must format back to its trimmed self. */
		token_format(&t, out);
		if (strstr(s, out) == NULL)
			abort();
		token_clear(&t);
	} else if (err[0] == '\0') {
		abort(); /* a refusal always says why */
	}
	free(s);
	return 0;
}
