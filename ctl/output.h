/*
 * output.h: how tetherctl prints answers: one JSON value (-o json) or an
 * aligned table with a header row (-o table).
 */
#ifndef TETHER_CTL_OUTPUT_H
#define TETHER_CTL_OUTPUT_H

#include <jansson.h>

enum output_format {
	OUTPUT_TABLE,
	OUTPUT_JSON,
};

/* One table column: its header and the object key it shows. */
struct column {
	const char *header;
	const char *key;
};

/* Prints v as one line of JSON.  Returns 0 or -1. */
int output_json(json_t *v);

/*
 * Prints v (an array of objects, or one object as a single row) as a table
 * with the given columns (terminated by a { NULL, NULL } entry).  Booleans
 * print as yes/no, integer *_at keys as RFC 3339 times, arrays of strings
 * as "a,b,c", missing, null or empty values as "-".  Returns 0, or -1 if v has another shape.
 */
int output_table(json_t *v, const struct column *cols);

/* Prints v in the chosen format. */
int output_print(enum output_format fmt, json_t *v, const struct column *cols);

#endif
