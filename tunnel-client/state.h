/*
 * state.h: the node's state directory, owned by tether-client.
 *
 *   DIR/state.json    (0600) what join learned: gateway_url, ca_checksum,
 *                     cluster, node, allow[], services{}, service_tokens[]
 *                     (names of services with a token; absent if none),
 *                     agent_id ("" until registered), gateway_urls[]
 *                     (the gateway's URL list, from its SETTINGS frame over
 *                     the tunnel; absent until one came: docs/0031).
 *                     Written last by join: its presence means "joined";
 *                     rewritten whole by run (registered, a new URL list).
 *   DIR/ca.crt        (0644) the gateway CA, pinned by ca_checksum at join
 *                     (a finished CA rotation replaces it: catrust.h).
 *   DIR/ca.next.crt   (0644) a CA rotation's next CA, during its overlap.
 *   DIR/agent.key     (0600) this node's Ed25519 private key.
 *   DIR/import.token  (0600) the import token; deleted once registered.
 *   DIR/service-NAME-ca.crt (0644) `join --service-ca NAME=FILE`.
 *   DIR/service-NAME.token  (0600) `join --service-token NAME=FILE`: the
 *                     bearer token the agent puts on NAME's requests.
 *   DIR/status.json   (0644) written by `run` on every change:
 *                     {"pid":N,"state":"active","connected":true,"last_error":"",
 *                      "gateway":"https://..."} (the URL dialled or held now)
 *
 * Every file is written atomically (fileio.h).
 */
#ifndef TETHER_CLIENT_STATE_H
#define TETHER_CLIENT_STATE_H

#include <stdbool.h>
#include <stddef.h>

#define CLIENT_MAX_ALLOW    64
#define CLIENT_MAX_SERVICES 8
#define CLIENT_MAX_URLS     8    /* FRAME_MAX_URLS */

struct client_service {
	char name[32];        /* "kube-api" */
	char url[256];        /* http(s)://HOST:PORT */
	bool token;           /* DIR/service-NAME.token is its bearer token */
};

struct client_state {
	char gateway_url[256];
	char ca_checksum[72];
	char cluster[32];
	char node[64];
	char agent_id[32];    /* "" until registered */
	char allow[CLIENT_MAX_ALLOW][272];   /* "HOST:PORT" or "HOST:*" */
	size_t nallow;
	struct client_service services[CLIENT_MAX_SERVICES];
	size_t nservices;
	/* The gateway's URLs as it last pushed them (SETTINGS), in its order;
	 * none until then.  The agent dials them, then gateway_url (gwlist.h). */
	char gateway_urls[CLIENT_MAX_URLS][256];
	size_t ngateway_urls;
};

/* DIR/NAME into out (PATH_MAX).  Returns 0, or -1 if it does not fit. */
int client_path(const char *dir, const char *name, char *out, size_t outlen);

/* Loads DIR/state.json.  Returns 0; 1 if DIR is not joined (no state.json);
 * -1 with err if it exists but is unreadable or malformed. */
int client_state_load(const char *dir, struct client_state *st, char *err,
    size_t errlen);
/* Writes DIR/state.json atomically, 0600.  Returns 0 or -1 with err. */
int client_state_save(const char *dir, const struct client_state *st,
    char *err, size_t errlen);

/*
 * Reads a bearer token file (join's --service-token FILE, the agent's
 * DIR/service-NAME.token): one line of 1..8192 visible ASCII bytes, a final
 * LF or CRLF allowed.  Returns 0 with *token (NUL-terminated; caller wipes
 * and frees) or -1 with err, which never quotes the file's content.
 */
int client_service_token_read(const char *path, char **token, char *err,
    size_t errlen);
/* The file name of service NAME's token in the state dir. */
int client_service_token_name(const char *name, char *out, size_t outlen);

/* Writes DIR/status.json for `status` to read.  Returns 0 or -1. */
int client_status_write(const char *dir, const char *state, bool connected,
    const char *last_error, const char *gateway);

/* A gateway URL as the agent dials it: https://HOST[:PORT], an origin
 * (common/url.c's rules), under 256 bytes.  1 if it is one, 0 if not. */
int client_gateway_url_valid(const char *url);

/* Validators shared by join's flags and run's allowlist checks. */
int client_allow_valid(const char *entry);           /* HOST:PORT | HOST:* */
int client_service_valid(const char *name, const char *url);

/* A service URL, http(s)://HOST:PORT[/] (common/url.c's rules; the port
 * named, no user, path or query): its dial target HOST:PORT (IPv6 in
 * brackets) into target, and whether it is https into *tls.  0, or -1. */
int client_service_url(const char *url, char *target, size_t targetlen,
    int *tls);
/* 1 if "host:port" is allowed by the list, 0 if not. */
int client_allow_match(const struct client_state *st, const char *host_port);
/* Node names: 1..63 of [A-Za-z0-9._-], not starting with '-' or '.'. */
int client_node_name_valid(const char *name);

#endif
