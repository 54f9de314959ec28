/*
 * api.c: HTTPS requests to the admin API with libcurl (see api.h): one
 * easy handle per call, bounded answers, and the mapping of each failure to
 * a message and an exit code.
 */
#include "api.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "httpbody.h"
#include "printable.h"

#define API_CONNECT_TIMEOUT_S 10L
#define API_TIMEOUT_S         60L
#define API_MAX_BODY          (16 * 1024 * 1024)

/* Errors that mean "reached something, but could not trust it". */
static bool
is_trust_error(CURLcode rc)
{
	switch (rc) {
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
		return true;
	default:
		return false;
	}
}

static void
report_curl_error(const struct api *a, CURLcode rc, const char *cerr)
{
	const char *why = cerr[0] != '\0' ? cerr : curl_easy_strerror(rc);

	if (is_trust_error(rc))
		fprintf(stderr, "tetherctl: cannot trust %s: %s\n%s", a->server, why,
		    a->cacert == NULL ? "Pass the gateway's CA with --cacert "
		    "DATA_DIR/ca.crt (or set TETHER_CACERT).\n" : "");
	else
		fprintf(stderr, "tetherctl: cannot reach %s: %s\n", a->server, why);
}

/* A non-2xx answer: the server's {"error":...} if it sent one. */
static void
report_http_error(long code, const struct httpbody *b)
{
	json_t *root = NULL, *e;
	json_error_t jerr;
	char reason[512];

	if (b->buf != NULL)
		root = json_loadb(b->buf, b->len, 0, &jerr);
	if (root != NULL && json_is_object(root) &&
	    (e = json_object_get(root, "error")) != NULL && json_is_string(e)) {
		/* A server's message must not drive the terminal. */
		text_printable(reason, sizeof(reason), json_string_value(e),
		    json_string_length(e));
		fprintf(stderr, "tetherctl: %s (HTTP %ld)\n", reason, code);
	} else
		fprintf(stderr, "tetherctl: the server answered HTTP %ld\n", code);
	json_decref(root);
}

/* Frees a header list, wiping each header first (one holds the token). */
static void
headers_free(struct curl_slist *h)
{
	for (struct curl_slist *p = h; p != NULL; p = p->next)
		explicit_bzero(p->data, strlen(p->data));
	curl_slist_free_all(h);
}

static struct curl_slist *
make_headers(const struct api *a, bool has_body)
{
	struct curl_slist *h = NULL, *t;
	char auth[256];
	int n;

	n = snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
	    a->token != NULL ? a->token : "");
	if (n < 0 || (size_t)n >= sizeof(auth))
		goto fail;
	if ((t = curl_slist_append(h, auth)) == NULL)
		goto fail;
	h = t;
	if ((t = curl_slist_append(h, "Accept: application/json")) == NULL)
		goto fail;
	h = t;
	if (has_body) {
		if ((t = curl_slist_append(h, "Content-Type: application/json")) == NULL)
			goto fail;
		h = t;
	}
	explicit_bzero(auth, sizeof(auth));
	return h;
fail:
	explicit_bzero(auth, sizeof(auth));
	headers_free(h);
	return NULL;
}

/*
 * Performs the request.  Returns CTL_EXIT_OK with the 2xx body in *b, or
 * an exit code after reporting why.
 */
static int
perform(const struct api *a, const char *method, const char *path,
    json_t *body, struct httpbody *b)
{
	char url[API_SERVER_MAX + 2048], cerr[CURL_ERROR_SIZE];
	struct curl_slist *headers = NULL;
	char *text = NULL;
	CURL *c = NULL;
	CURLcode rc;
	long code = 0;
	int r = CTL_EXIT_SERVER, n;

	memset(b, 0, sizeof(*b));
	b->max = API_MAX_BODY;
	cerr[0] = '\0';
	n = snprintf(url, sizeof(url), "%s%s", a->server, path);
	if (n < 0 || (size_t)n >= sizeof(url)) {
		fprintf(stderr, "tetherctl: request URL too long\n");
		r = CTL_EXIT_USAGE;
		goto out;
	}
	if (body != NULL &&
	    (text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL) {
		fprintf(stderr, "tetherctl: cannot encode the request\n");
		goto out;
	}
	if ((c = curl_easy_init()) == NULL ||
	    (headers = make_headers(a, text != NULL)) == NULL) {
		fprintf(stderr, "tetherctl: cannot initialise libcurl\n");
		goto out;
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, API_CONNECT_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, API_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "tetherctl/" TETHER_VERSION);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, httpbody_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	if (a->cacert != NULL) {
		/* Only this CA: not also the system's CA directory (as join). */
		curl_easy_setopt(c, CURLOPT_CAINFO, a->cacert);
		curl_easy_setopt(c, CURLOPT_CAPATH, NULL);
	}
	if (strcmp(method, "POST") == 0) {
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, text != NULL ? text : "");
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE,
		    (long)(text != NULL ? strlen(text) : 0));
	} else if (strcmp(method, "GET") != 0) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
		if (text != NULL) {
			curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
			curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
		}
	}
	rc = curl_easy_perform(c);
	if (b->too_big) {
		fprintf(stderr, "tetherctl: the server's answer is larger than %d "
		    "bytes\n", API_MAX_BODY);
		goto out;
	}
	if (rc != CURLE_OK) {
		report_curl_error(a, rc, cerr);
		r = CTL_EXIT_UNREACHABLE;
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (code < 200 || code > 299) {
		report_http_error(code, b);
		goto out;
	}
	r = CTL_EXIT_OK;
out:
	if (r != CTL_EXIT_OK)
		httpbody_wipe(b);
	headers_free(headers);
	curl_easy_cleanup(c);
	if (text != NULL) {
		explicit_bzero(text, strlen(text));
		free(text);
	}
	return r;
}

int
api_call_raw(const struct api *a, const char *method, const char *path,
    json_t *body, char **out, size_t *outlen)
{
	struct httpbody b;
	int r;

	*out = NULL;
	*outlen = 0;
	if ((r = perform(a, method, path, body, &b)) != CTL_EXIT_OK)
		return r;
	if (b.buf == NULL && (b.buf = calloc(1, 1)) == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		return CTL_EXIT_SERVER;
	}
	*out = b.buf;
	*outlen = b.len;
	return CTL_EXIT_OK;
}

int
api_call(const struct api *a, const char *method, const char *path,
    json_t *body, json_t **out)
{
	json_error_t jerr;
	struct httpbody b;
	int r;

	*out = NULL;
	if ((r = perform(a, method, path, body, &b)) != CTL_EXIT_OK)
		return r;
	if (b.len == 0)
		*out = json_null();
	else if ((*out = json_loadb(b.buf, b.len, 0, &jerr)) == NULL) {
		fprintf(stderr, "tetherctl: the server's answer to %s %s is not "
		    "JSON\n", method, path);
		r = CTL_EXIT_SERVER;
	}
	httpbody_wipe(&b);
	return r;
}

char *
api_escape(const char *s)
{
	char *e, *copy;

	if ((e = curl_easy_escape(NULL, s, 0)) == NULL)
		return NULL;
	copy = strdup(e);
	curl_free(e);
	return copy;
}
