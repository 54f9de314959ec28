/*
 * store.c: picks the store backend from the URL given to store_open.
 *
 * Only the scheme is looked at here; each backend owns the rest of its URL.
 * SQLite is the one backend today.  PostgreSQL is reserved: its URL is
 * recognised so that an operator gets a clear "not yet" rather than
 * "unknown scheme".
 */
#include <stdio.h>
#include <string.h>

#include "store.h"
#include "store_backend.h"

#define SQLITE_SCHEME   "sqlite://"
#define POSTGRES_SCHEME "postgres://"
#define POSTGRESQL_SCHEME "postgresql://"

static int
has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

int
store_open(const char *url, struct store **out, char *err, size_t errlen)
{
	*out = NULL;
	if (url == NULL || *url == '\0') {
		snprintf(err, errlen, "no store URL given");
		return STORE_ERR;
	}
	if (has_prefix(url, SQLITE_SCHEME))
		return store_sqlite_open(url + strlen(SQLITE_SCHEME), out, err,
		    errlen);
	if (has_prefix(url, POSTGRES_SCHEME) ||
	    has_prefix(url, POSTGRESQL_SCHEME)) {
		snprintf(err, errlen, "PostgreSQL store not yet supported");
		return STORE_ERR;
	}
	/* Print only the scheme: a URL may carry a password. */
	snprintf(err, errlen, "unsupported store URL scheme \"%.*s\" "
	    "(expected sqlite://PATH)", (int)strcspn(url, ":/"), url);
	return STORE_ERR;
}
