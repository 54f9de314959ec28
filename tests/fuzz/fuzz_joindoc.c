/*
 * fuzz_joindoc.c: libFuzzer target for joindoc_parse, which reads the join
 * document an operator pastes onto a node (tether-client join's stdin).
 *
 * Checks beyond "no crash": a refusal always says why and never repeats the
 * token string it was given; whatever parses formats to one line that
 * parses back to the same document.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "joindoc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The "token" string of the input, if it is an object with one that looks
 * like an import token (the secret to protect) and is long enough to be
 * recognisable in a message; else NULL (caller frees). */
static char *
input_token(const uint8_t *data, size_t size)
{
	json_error_t jerr;
	json_t *root, *t;
	char *tok = NULL;

	if ((root = json_loadb((const char *)data, size, JSON_DECODE_ANY,
	    &jerr)) == NULL)
		return NULL;
	t = json_object_get(root, "token");
	if (t != NULL && json_is_string(t) && json_string_length(t) >= 8 &&
	    strlen(json_string_value(t)) == json_string_length(t) &&
	    strncmp(json_string_value(t), "tti_", 4) == 0)
		tok = strdup(json_string_value(t));
	json_decref(root);
	return tok;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct joindoc doc, again;
	char err[256], err2[256];
	char *s, *tok;

	err[0] = '\0';
	if (joindoc_parse((const char *)data, size, &doc, err, sizeof(err)) == 0) {
		if ((s = joindoc_format(&doc)) == NULL)
			abort();
		if (strchr(s, '\n') != NULL)
			abort();
		if (joindoc_parse(s, strlen(s), &again, err2, sizeof(err2)) != 0)
			abort();
		if (memcmp(&doc, &again, sizeof(doc)) != 0)
			abort();
		free(s);
		joindoc_clear(&doc);
		joindoc_clear(&again);
		return 0;
	}
	if (err[0] == '\0')
		abort(); /* a refusal always says why */
	if ((tok = input_token(data, size)) != NULL) {
		if (strstr(err, tok) != NULL)
			abort(); /* a refusal never repeats the token */
		free(tok);
	}
	return 0;
}
