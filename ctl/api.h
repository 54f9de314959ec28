/*
 * api.h: tetherctl's calls to the gateway's admin API over HTTPS (libcurl).
 *
 * Requests carry "Authorization: Bearer TOKEN" and JSON bodies; answers are
 * JSON, errors {"error":"reason"}.  Each call reports its own failure on
 * stderr ("tetherctl: reason (HTTP 404)") and returns the process exit code
 * that failure maps to, so commands only pass it on.  The token never
 * appears in a message.
 */
#ifndef TETHER_CTL_API_H
#define TETHER_CTL_API_H

#include <stddef.h>

#include <jansson.h>

/* tetherctl's exit codes (docs/interface.md). */
#define CTL_EXIT_OK          0
#define CTL_EXIT_SERVER      1  /* the server refused or failed */
#define CTL_EXIT_USAGE       2  /* bad usage */
#define CTL_EXIT_UNREACHABLE 3  /* cannot reach or trust the server */

#define API_SERVER_MAX 512

struct api {
	char server[API_SERVER_MAX];   /* https://HOST[:PORT], no trailing '/' */
	const char *cacert;            /* CA bundle path, or NULL for the system's */
	char *token;                   /* secret: never print; NULL until loaded */
};

/*
 * method path (path starts with '/', already escaped) with an optional JSON
 * body.  On 2xx returns CTL_EXIT_OK with the parsed answer in *out (caller
 * decrefs; JSON null for an empty body).  Otherwise prints why and returns
 * CTL_EXIT_SERVER or CTL_EXIT_UNREACHABLE, *out NULL.
 */
int api_call(const struct api *a, const char *method, const char *path,
    json_t *body, json_t **out);

/* Same, for answers that are not JSON (kubeconfig): the raw body in *out
 * (NUL-terminated, caller frees) and its length. */
int api_call_raw(const struct api *a, const char *method, const char *path,
    json_t *body, char **out, size_t *outlen);

/* s escaped for use as one path segment or query value, in a fresh string
 * (caller frees), or NULL. */
char *api_escape(const char *s);

#endif
