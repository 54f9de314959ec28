/*
 * output.c: JSON and table printing for tetherctl (see output.h).
 */
#include "output.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "joindoc.h"
#include "printable.h"

#define CELL_MAX 256

int
output_json(json_t *v)
{
	char *text;

	if ((text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER |
	    JSON_ENCODE_ANY)) == NULL)
		return -1;
	printf("%s\n", text);
	explicit_bzero(text, strlen(text));   /* a join document, a new token */
	free(text);
	return 0;
}

static int
ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* An array of strings as "a,b,c" (a user token's clusters); anything
 * else in it shows as "...". */
static void
cell_list(json_t *arr, char out[CELL_MAX])
{
	size_t i, o = 0;
	json_t *v;

	out[0] = '\0';
	json_array_foreach(arr, i, v) {
		const char *s = json_string_value(v);
		int n;

		n = snprintf(out + o, CELL_MAX - o, "%s%s", i > 0 ? "," : "",
		    s != NULL ? s : "...");
		if (n < 0 || (size_t)n >= CELL_MAX - o) {
			/* Cut: say so rather than show a wrong last id. */
			snprintf(out + CELL_MAX - 4, 4, "...");
			break;
		}
		o += (size_t)n;
	}
	text_printable(out, CELL_MAX, out, strlen(out));
	if (out[0] == '\0')
		snprintf(out, CELL_MAX, "-");
}

/* The text of one cell, printable and bounded. */
static void
cell_text(json_t *row, const char *key, char out[CELL_MAX])
{
	json_t *v = json_object_get(row, key);
	const char *s;

	switch (v != NULL ? json_typeof(v) : JSON_NULL) {
	case JSON_STRING:
		s = json_string_value(v);
		if (s[0] == '\0') {
			snprintf(out, CELL_MAX, "-");
			return;
		}
		text_printable(out, CELL_MAX, s, json_string_length(v));
		return;
	case JSON_INTEGER:
		if (ends_with(key, "_at")) {
			char when[32];

			rfc3339_format((int64_t)json_integer_value(v), when);
			snprintf(out, CELL_MAX, "%s", when);
		} else
			snprintf(out, CELL_MAX, "%" JSON_INTEGER_FORMAT,
			    json_integer_value(v));
		return;
	case JSON_REAL:
		snprintf(out, CELL_MAX, "%g", json_real_value(v));
		return;
	case JSON_TRUE:
		snprintf(out, CELL_MAX, "yes");
		return;
	case JSON_FALSE:
		snprintf(out, CELL_MAX, "no");
		return;
	case JSON_NULL:
		snprintf(out, CELL_MAX, "-");
		return;
	case JSON_ARRAY:
		cell_list(v, out);
		return;
	default:
		snprintf(out, CELL_MAX, "...");
		return;
	}
}

static void
print_row(const char *const *cells, const size_t *widths, size_t ncols)
{
	for (size_t i = 0; i < ncols; i++) {
		if (i + 1 == ncols)
			printf("%s\n", cells[i]);
		else
			printf("%-*s  ", (int)widths[i], cells[i]);
	}
}

int
output_table(json_t *v, const struct column *cols)
{
	size_t ncols = 0, nrows, widths[16] = { 0 };
	const char *cells[16] = { NULL };
	char (*text)[16][CELL_MAX] = NULL;
	json_t *row;
	size_t i, j;
	int r = -1;

	while (cols[ncols].header != NULL && ncols < 16)
		ncols++;
	if (json_is_object(v))
		nrows = 1;
	else if (json_is_array(v))
		nrows = json_array_size(v);
	else
		return -1;
	if (nrows > 0 && (text = calloc(nrows, sizeof(*text))) == NULL)
		return -1;
	for (j = 0; j < ncols; j++)
		widths[j] = strlen(cols[j].header);
	for (i = 0; i < nrows; i++) {
		row = json_is_object(v) ? v : json_array_get(v, i);
		if (!json_is_object(row))
			goto out;
		for (j = 0; j < ncols; j++) {
			cell_text(row, cols[j].key, text[i][j]);
			if (strlen(text[i][j]) > widths[j])
				widths[j] = strlen(text[i][j]);
		}
	}
	for (j = 0; j < ncols; j++)
		cells[j] = cols[j].header;
	print_row(cells, widths, ncols);
	for (i = 0; i < nrows; i++) {
		for (j = 0; j < ncols; j++)
			cells[j] = text[i][j];
		print_row(cells, widths, ncols);
	}
	r = 0;
out:
	free(text);
	return r;
}

int
output_print(enum output_format fmt, json_t *v, const struct column *cols)
{
	if (fmt == OUTPUT_JSON || cols == NULL)
		return output_json(v);
	return output_table(v, cols);
}
