/*
 * join.c: `tether-client join` (see join.h).
 *
 * join checks everything before it writes anything: the flags, the join
 * document (shape and expiry), what DIR already holds, then the gateway: its
 * CA fetched without verification (GET /v1/ca) must match the document's
 * ca_checksum, and a second request (GET /healthz) must verify against that
 * CA.  Only then is DIR written, state.json last since its presence means
 * "joined"; on any failure what was written is removed again.  The import
 * token is never printed or logged.  Both requests go through the proxy the
 * tunnel would use (--proxy, else https_proxy/HTTPS_PROXY, unless
 * no_proxy/NO_PROXY exempts the gateway) with fetch.c, not libcurl.  A node key already in DIR (from a join
 * or a first `run` killed half way) is kept, so that the gateway, which may
 * have registered it, recognises the retry; temporary files such a kill left
 * are removed.
 *
 * A transient fault is not final (docs/0043): a gateway not reached (a
 * name lookup, a connection refused or timed out, a handshake or an answer
 * cut short, a proxy that lost its way) or answering 408, 429 or 5xx is
 * asked again, both requests from the start, after the agent's own
 * backoff with jitter (backoff.h), or after the Retry-After the gateway
 * named plus the agent's jitter; each retry is printed with its reason.
 * A refusal no retry changes ends join at once: a CA that does not match
 * or does not verify, an answer that is not the gateway's (404, not PEM),
 * a proxy that refuses.  --timeout bounds the retries (default
 * JOIN_TIMEOUT_DEFAULT_S, 0: no bound), and so does the document's
 * expiry.  Nothing is written before the gateway has answered, so a retry
 * needs nothing undone, and the node key is made once, after it.  join
 * never sends the import token: `run` exchanges it on first use.
 */
#include "join.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "agentkey.h"
#include "backoff.h"
#include "cli.h"
#include "ca.h"
#include "duration.h"
#include "fetch.h"
#include "fileio.h"
#include "httpbody.h"
#include "joindoc.h"
#include "proxy.h"
#include "state.h"

#define GATEWAY_TIMEOUT_MS  10000u
#define GATEWAY_MAX_BODY    (64 * 1024)
/* --timeout's default: long enough to ride out a gateway's restart or a
 * balancer's health checks catching up, short enough that a script (or an
 * operator) told "exit 4: gateway unreachable" hears it within a minute
 * (docs/0043). */
#define JOIN_TIMEOUT_DEFAULT_S 30
#define JOIN_TIMEOUT_MAX_S     (INT64_C(366) * 24 * 3600)
/* join_try_ca's "a transient fault: try again". */
#define JOIN_TRY_AGAIN      (-2)

struct join_opts {
	const char *state_dir;
	const char *node_name;
	const char *ca_checksum;  /* --ca-checksum, or NULL */
	bool rejoin;              /* --rejoin: re-pin the CA of a joined DIR */
	const char *proxy_url;    /* --proxy, else the environment's, or NULL */
	const char *no_proxy;     /* no_proxy / NO_PROXY, or NULL */
	int64_t timeout_s;        /* --timeout: 0 retries without a bound */
	int proxy_auth;           /* --proxy-auth: enum proxy_auth */
	const char *proxy_user;   /* --proxy-user, or NULL */
	char *proxy_password;     /* from --proxy-password-file, or NULL */
	struct client_state st;   /* allow[] and services[] from the flags */
	/* --service-ca NAME=FILE: read at parse time, written with the rest */
	char svc_ca_name[CLIENT_MAX_SERVICES][32];
	char *svc_ca_pem[CLIENT_MAX_SERVICES];
	size_t nsvc_ca;
	/* --service-token NAME=FILE: read and checked at parse time */
	char svc_tok_name[CLIENT_MAX_SERVICES][32];
	char *svc_tok[CLIENT_MAX_SERVICES];
	size_t nsvc_tok;
};

/* What join has written so far, so that a failure can undo it. */
struct join_undo {
	bool made_dir;
	bool wrote_key;
	bool wrote_ca;
	bool wrote_token;
	bool wrote_state;
	size_t wrote_svc_ca;      /* the first n of join_opts' service CAs */
	size_t wrote_svc_tok;     /* the first n of its service tokens */
};

void
client_join_usage(void)
{
	fprintf(stdout,
	    "usage: tether-client join --state-dir DIR [--node-name NAME]\n"
	    "           [--allow HOST:PORT]... [--service NAME=URL]...\n"
	    "           [--service-ca NAME=FILE]... [--service-token NAME=FILE]...\n"
	    "           [--ca-checksum sha256:HEX] [--proxy URL]\n"
	    "           [--proxy-auth basic|ntlm|negotiate] [--proxy-user DOMAIN\\USER]\n"
	    "           [--proxy-password-file FILE] [--timeout DURATION]\n"
	    "           < JOIN_DOCUMENT\n"
	    "       tether-client join --rejoin --state-dir DIR [--ca-checksum ...]\n"
	    "           [--proxy ...] [--timeout DURATION] < JOIN_DOCUMENT\n"
	    "\n"
	    "Reads the join document (from `tetherctl token create`) on stdin,\n"
	    "checks it and the gateway's CA against its ca_checksum, and only then\n"
	    "writes DIR (created 0700 if missing).  A gateway not reached yet (no\n"
	    "name, connection refused, a cut or timed-out handshake) or answering\n"
	    "408, 429 or 5xx is asked again with backoff and jitter, after its\n"
	    "Retry-After when it gives one; each retry is printed with its reason.\n"
	    "A CA that does not match, or an answer that is not the gateway's, ends\n"
	    "join at once.  The import token is exchanged by `run`, not here.\n"
	    "\n"
	    "  --state-dir DIR     where the agent keeps its key and state (required)\n"
	    "  --node-name NAME    this node's name (default: the host name);\n"
	    "                      1..63 of A-Z a-z 0-9 . _ -\n"
	    "  --allow HOST:PORT   a target the gateway may open streams to; HOST:*\n"
	    "                      allows every port; repeatable; none by default\n"
	    "  --service NAME=URL  a named upstream, e.g.\n"
	    "                      kube-api=https://127.0.0.1:6443; repeatable\n"
	    "  --service-ca NAME=FILE  the CA (PEM) that service NAME's https\n"
	    "                      certificate is verified with (copied to\n"
	    "                      DIR/service-NAME-ca.crt); default: system CAs\n"
	    "  --service-token NAME=FILE  a bearer token (one line, at most 8 KiB)\n"
	    "                      the agent puts on every request to service NAME\n"
	    "                      in place of any Authorization (copied to\n"
	    "                      DIR/service-NAME.token, 0600)\n"
	    "  --ca-checksum sha256:HEX  the CA checksum the operator expects; the\n"
	    "                      document's must be the same (the registration\n"
	    "                      command of `tetherctl token create --format\n"
	    "                      command` passes it)\n"
	    "  --proxy URL         reach the gateway through this HTTP CONNECT\n"
	    "                      proxy (default: https_proxy / HTTPS_PROXY,\n"
	    "                      except hosts in no_proxy / NO_PROXY), as `run`\n"
	    "  --proxy-auth SCHEME, --proxy-user DOMAIN\\USER,\n"
	    "  --proxy-password-file FILE  how to authenticate to the proxy, as\n"
	    "                      `run` does (basic, ntlm, negotiate; the password\n"
	    "                      file readable by its owner only)\n"
	    "  --timeout DURATION  give up retrying after this long (Ns, Nm, Nh, Nd;\n"
	    "                      default 30s; 0: retry until the document\n"
	    "                      expires); join then exits 4 saying why\n"
	    "  --rejoin            DIR is joined to the document's cluster already:\n"
	    "                      keep its agent, key and settings, and only pin\n"
	    "                      the CA the document names (its import token is\n"
	    "                      not used).  The recovery of a node that missed\n"
	    "                      a whole CA rotation (docs/0033); a running\n"
	    "                      agent dials with the new CA at its next attempt\n"
	    "\n"
	    "exit: 0 joined; 2 invalid document or arguments, or the document\n"
	    "expired while retrying; 3 DIR already belongs to a cluster; 4 gateway\n"
	    "still unreachable at --timeout, CA checksum mismatch, or not a\n"
	    "gateway's answer; 1 DIR cannot be written.  Nothing is written unless\n"
	    "it exits 0.\n"
	    "\n"
	    "examples:\n"
	    "  tetherctl token create --cluster c-0123456789ab |\n"
	    "    tether-client join --state-dir /var/lib/tether --allow 127.0.0.1:22\n"
	    "  # provisioning (cloud-init) that may run before the gateway is up:\n"
	    "  tether-client join --state-dir /var/lib/tether --timeout 15m < join.json\n");
}

/* --- flags --- */

static int
add_allow(struct client_state *st, const char *entry)
{
	if (!client_allow_valid(entry))
		return client_usage_error("join", "--allow %s: want HOST:PORT or HOST:* "
		    "(HOST a name, an IPv4 address or [IPv6], PORT 1..65535)", entry);
	for (size_t i = 0; i < st->nallow; i++) {
		if (strcmp(st->allow[i], entry) == 0)
			return 0;
	}
	if (st->nallow >= CLIENT_MAX_ALLOW)
		return client_usage_error("join", "too many --allow entries (at most %s)",
		    "64");
	snprintf(st->allow[st->nallow++], sizeof(st->allow[0]), "%s", entry);
	return 0;
}

static int
add_service(struct client_state *st, const char *arg)
{
	char name[sizeof(st->services[0].name)];
	char url[sizeof(st->services[0].url)];
	const char *eq = strchr(arg, '=');
	size_t n, ulen;

	if (eq == NULL || (n = (size_t)(eq - arg)) >= sizeof(name) ||
	    strlen(eq + 1) >= sizeof(url))
		return client_usage_error("join", "--service %s: want NAME=URL", arg);
	memcpy(name, arg, n);
	name[n] = '\0';
	snprintf(url, sizeof(url), "%s", eq + 1);
	if (!client_service_valid(name, url))
		return client_usage_error("join", "--service %s: want NAME=http(s)://"
		    "HOST:PORT with NAME 1..31 of a-z 0-9 -", arg);
	ulen = strlen(url);
	if (ulen > 0 && url[ulen - 1] == '/')
		url[ulen - 1] = '\0';
	for (size_t i = 0; i < st->nservices; i++) {
		if (strcmp(st->services[i].name, name) == 0)
			return client_usage_error("join", "--service %s given twice", name);
	}
	if (st->nservices >= CLIENT_MAX_SERVICES)
		return client_usage_error("join", "too many --service entries (at most %s)",
		    "8");
	snprintf(st->services[st->nservices].name, sizeof(st->services[0].name),
	    "%s", name);
	snprintf(st->services[st->nservices].url, sizeof(st->services[0].url),
	    "%s", url);
	st->nservices++;
	return 0;
}

/* --service-ca NAME=FILE: the CA (PEM) an https service is verified with. */
static int
add_service_ca(struct join_opts *o, const char *arg)
{
	const char *eq = strchr(arg, '=');
	char err[512], *pem = NULL;
	size_t n, len;

	if (eq == NULL || (n = (size_t)(eq - arg)) == 0 ||
	    n >= sizeof(o->svc_ca_name[0]) || eq[1] == '\0')
		return client_usage_error("join", "--service-ca %s: want NAME=FILE", arg);
	for (size_t i = 0; i < o->nsvc_ca; i++)
		if (strncmp(o->svc_ca_name[i], arg, n) == 0 &&
		    o->svc_ca_name[i][n] == '\0')
			return client_usage_error("join", "--service-ca %s given twice", arg);
	if (o->nsvc_ca >= CLIENT_MAX_SERVICES)
		return client_usage_error("join", "too many --service-ca entries (at most %s)",
		    "8");
	if (file_read_all(eq + 1, 1 << 20, &pem, &len, err, sizeof(err)) == -1) {
		fprintf(stderr, "tether-client join: --service-ca %s: %s\n", arg, err);
		return JOIN_EXIT_USAGE;
	}
	if (strstr(pem, "-----BEGIN CERTIFICATE-----") == NULL) {
		free(pem);
		return client_usage_error("join", "--service-ca %s: not a PEM certificate",
		    arg);
	}
	memcpy(o->svc_ca_name[o->nsvc_ca], arg, n);
	o->svc_ca_name[o->nsvc_ca][n] = '\0';
	o->svc_ca_pem[o->nsvc_ca++] = pem;
	return 0;
}

/* --service-token NAME=FILE: the bearer token the agent sends to NAME.  The
 * file's content is never printed. */
static int
add_service_token(struct join_opts *o, const char *arg)
{
	const char *eq = strchr(arg, '=');
	char err[512], *tok = NULL;
	size_t n;

	if (eq == NULL || (n = (size_t)(eq - arg)) == 0 ||
	    n >= sizeof(o->svc_tok_name[0]) || eq[1] == '\0')
		return client_usage_error("join", "--service-token %s: want NAME=FILE", arg);
	for (size_t i = 0; i < o->nsvc_tok; i++)
		if (strncmp(o->svc_tok_name[i], arg, n) == 0 &&
		    o->svc_tok_name[i][n] == '\0')
			return client_usage_error("join", "--service-token %s given twice", arg);
	if (o->nsvc_tok >= CLIENT_MAX_SERVICES)
		return client_usage_error("join", "too many --service-token entries (at "
		    "most %s)", "8");
	if (client_service_token_read(eq + 1, &tok, err, sizeof(err)) == -1) {
		fprintf(stderr, "tether-client join: --service-token %.*s: %s\n",
		    (int)n, arg, err);
		return JOIN_EXIT_USAGE;
	}
	memcpy(o->svc_tok_name[o->nsvc_tok], arg, n);
	o->svc_tok_name[o->nsvc_tok][n] = '\0';
	o->svc_tok[o->nsvc_tok++] = tok;
	return 0;
}

/* Every --service-token names a --service (marked to use it).  Returns -1
 * or an exit code. */
static int
check_service_tokens(struct join_opts *o)
{
	for (size_t i = 0; i < o->nsvc_tok; i++) {
		size_t j;

		for (j = 0; j < o->st.nservices; j++)
			if (strcmp(o->st.services[j].name, o->svc_tok_name[i]) == 0)
				break;
		if (j == o->st.nservices)
			return client_usage_error("join", "--service-token %s: no --service "
			    "of that name", o->svc_tok_name[i]);
		o->st.services[j].token = true;
	}
	return -1;
}

/* Every --service-ca names an https --service.  Returns -1 or an exit code. */
static int
check_service_cas(const struct join_opts *o)
{
	for (size_t i = 0; i < o->nsvc_ca; i++) {
		size_t j;

		for (j = 0; j < o->st.nservices; j++)
			if (strcmp(o->st.services[j].name, o->svc_ca_name[i]) == 0)
				break;
		if (j == o->st.nservices ||
		    strncmp(o->st.services[j].url, "https://", 8) != 0)
			return client_usage_error("join", "--service-ca %s: no https "
			    "--service of that name", o->svc_ca_name[i]);
	}
	return -1;
}

/* --proxy-auth SCHEME.  -1 to continue, or an exit code. */
static int
join_proxy_auth(struct join_opts *o, const char *v)
{
	for (int i = 0; proxy_auth_names[i] != NULL; i++)
		if (strcmp(v, proxy_auth_names[i]) == 0) {
			o->proxy_auth = i;
			return -1;
		}
	return client_usage_error("join", "--proxy-auth %s: want basic, ntlm or "
	    "negotiate", v);
}

/* --proxy-password-file FILE, read now.  -1 to continue, or an exit code. */
static int
join_proxy_password(struct join_opts *o, const char *path)
{
	char err[512];

	if (o->proxy_password != NULL) {
		explicit_bzero(o->proxy_password, strlen(o->proxy_password));
		free(o->proxy_password);
		o->proxy_password = NULL;
	}
	if (file_read_private(path, 1024, &o->proxy_password, err, sizeof(err)) != 0)
		return client_usage_error("join", "--proxy-password-file: %s", err);
	return -1;
}

/* Returns -1 to continue, or an exit code. */
static int
join_parse_flags(int argc, char **argv, struct join_opts *o)
{
	static const struct option longopts[] = {
		{ "state-dir", required_argument, NULL, 'd' },
		{ "node-name", required_argument, NULL, 'n' },
		{ "allow", required_argument, NULL, 'a' },
		{ "service", required_argument, NULL, 's' },
		{ "service-ca", required_argument, NULL, 'C' },
		{ "service-token", required_argument, NULL, 'T' },
		{ "ca-checksum", required_argument, NULL, 'K' },
		{ "proxy", required_argument, NULL, 'P' },
		{ "proxy-auth", required_argument, NULL, 'A' },
		{ "proxy-user", required_argument, NULL, 'U' },
		{ "proxy-password-file", required_argument, NULL, 'W' },
		{ "rejoin", no_argument, NULL, 'R' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, r;

	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			o->state_dir = optarg;
			break;
		case 'n':
			o->node_name = optarg;
			break;
		case 'a':
			if ((r = add_allow(&o->st, optarg)) != 0)
				return r;
			break;
		case 's':
			if ((r = add_service(&o->st, optarg)) != 0)
				return r;
			break;
		case 'C':
			if ((r = add_service_ca(o, optarg)) != 0)
				return r;
			break;
		case 'T':
			if ((r = add_service_token(o, optarg)) != 0)
				return r;
			break;
		case 'K':
			if (ca_checksum_valid(optarg) != 0)
				return client_usage_error("join", "--ca-checksum %s: want "
				    "sha256: and 64 lowercase hex digits", optarg);
			o->ca_checksum = optarg;
			break;
		case 'P':
			o->proxy_url = optarg;
			break;
		case 'A':
			if ((r = join_proxy_auth(o, optarg)) != -1)
				return r;
			break;
		case 'U':
			o->proxy_user = optarg;
			break;
		case 'W':
			if ((r = join_proxy_password(o, optarg)) != -1)
				return r;
			break;
		case 'R':
			o->rejoin = true;
			break;
		case 't':
			if (strcmp(optarg, "0") == 0)
				o->timeout_s = 0;
			else if (duration_parse(optarg, JOIN_TIMEOUT_MAX_S,
			    &o->timeout_s) == -1)
				return client_usage_error("join", "--timeout %s: want 0 "
				    "(no bound) or a duration like 90s, 10m or 2h",
				    optarg);
			break;
		case 'h':
			client_join_usage();
			return JOIN_EXIT_OK;
		default:
			return client_getopt_error("join", c, argv);
		}
	}
	if (optind < argc)
		return client_usage_error("join", "unexpected argument %s (the join "
		    "document is read from stdin)", argv[optind]);
	if (o->state_dir == NULL || o->state_dir[0] == '\0')
		return client_usage_error("join", "%s is required", "--state-dir DIR");
	if (strlen(o->state_dir) > PATH_MAX - 64)
		return client_usage_error("join", "--state-dir %s: path too long",
		    o->state_dir);
	if (o->rejoin && (o->node_name != NULL || o->st.nallow > 0 ||
	    o->st.nservices > 0 || o->nsvc_ca > 0 || o->nsvc_tok > 0))
		return client_usage_error("join", "%s keeps DIR's node name, "
		    "targets and services: --node-name, --allow, --service, "
		    "--service-ca and --service-token cannot be given with it",
		    "--rejoin");
	if ((r = check_service_tokens(o)) != -1)
		return r;
	return check_service_cas(o);
}

/* The node name from --node-name or the host name into out. */
static int
join_node_name(const struct join_opts *o, char *out, size_t outlen)
{
	char host[256];

	if (o->node_name != NULL) {
		if (!client_node_name_valid(o->node_name))
			return client_usage_error("join", "--node-name %s: want 1..63 of "
			    "A-Z a-z 0-9 . _ -, not starting with - or .", o->node_name);
		snprintf(out, outlen, "%s", o->node_name);
		return -1;
	}
	if (gethostname(host, sizeof(host)) == -1) {
		fprintf(stderr, "tether-client join: gethostname: %s; pass "
		    "--node-name NAME\n", strerror(errno));
		return JOIN_EXIT_USAGE;
	}
	host[sizeof(host) - 1] = '\0';
	if (!client_node_name_valid(host))
		return client_usage_error("join", "the host name %s is not a valid node "
		    "name; pass --node-name NAME", host);
	/* Valid names are at most 63 bytes, so this always fits. */
	if (strlen(host) >= outlen)
		return client_usage_error("join", "the host name %s is too long; pass "
		    "--node-name NAME", host);
	memcpy(out, host, strlen(host) + 1);
	return -1;
}

/* --- the join document --- */

/* Reads stdin into a fresh buffer, at most JOINDOC_MAX_BYTES. */
static int
read_stdin(char **out, size_t *outlen)
{
	size_t cap = JOINDOC_MAX_BYTES + 1, len = 0;
	char *buf;

	*out = NULL;
	if ((buf = malloc(cap)) == NULL) {
		fprintf(stderr, "tether-client join: out of memory\n");
		return JOIN_EXIT_FAIL;
	}
	if (isatty(STDIN_FILENO))
		fprintf(stderr, "tether-client join: reading the join document "
		    "from stdin (paste it, then press Ctrl-D)\n");
	while (len < cap) {
		ssize_t n = read(STDIN_FILENO, buf + len, cap - len);

		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			fprintf(stderr, "tether-client join: read stdin: %s\n",
			    strerror(errno));
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > JOINDOC_MAX_BYTES) {
		fprintf(stderr, "tether-client join: the join document on stdin is "
		    "larger than %d bytes\n", JOINDOC_MAX_BYTES);
		goto fail;
	}
	*out = buf;
	*outlen = len;
	return -1;
fail:
	explicit_bzero(buf, len);
	free(buf);
	return JOIN_EXIT_USAGE;
}

static int
join_read_doc(struct joindoc *doc)
{
	char err[256], when[32];
	char *buf = NULL;
	size_t len = 0;
	int r;

	if ((r = read_stdin(&buf, &len)) != -1)
		return r;
	if (len == 0) {
		fprintf(stderr, "tether-client join: no join document on stdin; "
		    "pipe in the output of `tetherctl token create`\n");
		r = JOIN_EXIT_USAGE;
		goto out;
	}
	if (joindoc_parse(buf, len, doc, err, sizeof(err)) == -1) {
		fprintf(stderr, "tether-client join: invalid join document: %s\n",
		    err);
		r = JOIN_EXIT_USAGE;
		goto out;
	}
	if (doc->expires_at <= (int64_t)time(NULL)) {
		rfc3339_format(doc->expires_at, when);
		fprintf(stderr, "tether-client join: the join document expired at "
		    "%s; create a new one with `tetherctl token create`\n", when);
		r = JOIN_EXIT_USAGE;
		goto out;
	}
	r = -1;
out:
	explicit_bzero(buf, len);
	free(buf);
	return r;
}

/* --- what DIR holds already --- */

/* 1 if the directory that would hold dir exists. */
static int
parent_is_dir(const char *dir)
{
	char copy[PATH_MAX];
	struct stat sb;

	snprintf(copy, sizeof(copy), "%s", dir);
	return stat(dirname(copy), &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Returns -1 to continue (*replace set if a pending join is replaced), or
 * an exit code. */
static int
join_check_dir(const char *dir, const struct joindoc *doc, bool *replace)
{
	struct client_state old;
	struct stat sb;
	char err[512];
	int r;

	*replace = false;
	if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
		return client_usage_error("join", "--state-dir %s is not a directory", dir);
	if (stat(dir, &sb) == -1 && errno == ENOENT && !parent_is_dir(dir))
		return client_usage_error("join", "--state-dir %s: its parent directory "
		    "does not exist (join creates one level only)", dir);
	r = client_state_load(dir, &old, err, sizeof(err));
	if (r == 1)
		return -1;
	if (r == -1) {
		fprintf(stderr, "tether-client join: cannot tell which cluster %s "
		    "belongs to: %s; use a fresh state dir\n", dir, err);
		return JOIN_EXIT_CONFLICT;
	}
	if (strcmp(old.cluster, doc->cluster) != 0) {
		fprintf(stderr, "tether-client join: %s already belongs to cluster "
		    "%s\n", dir, old.cluster);
		return JOIN_EXIT_CONFLICT;
	}
	if (old.agent_id[0] != '\0') {
		fprintf(stderr, "tether-client join: already joined cluster %s as "
		    "agent %s; revoke it and use a fresh state dir to re-join\n",
		    old.cluster, old.agent_id);
		return JOIN_EXIT_CONFLICT;
	}
	*replace = true;
	return -1;
}

/* --- the gateway --- */


/* The first of the environment variables a and b that is set, not empty. */
static const char *
env_first(const char *a, const char *b)
{
	const char *v = getenv(a);

	if (v == NULL || v[0] == '\0')
		v = getenv(b);
	return v != NULL && v[0] != '\0' ? v : NULL;
}

/*
 * GET base+path within timeout_ms.  ca_pem NULL: no TLS verification (the
 * answer is checked by checksum); else verify the server against that CA
 * alone.  Returns 0 with the body (caller wipes) or -1 with a reason and
 * where it failed (*res).
 */
static int
gateway_get(const struct join_opts *o, const char *base, const char *path,
    const char *ca_pem, unsigned int timeout_ms, struct httpbody *b,
    struct fetch_result *res, char *err, size_t errlen)
{
	struct fetch_opts fo;

	memset(&fo, 0, sizeof(fo));
	fo.proxy_url = o->proxy_url;
	fo.no_proxy = o->no_proxy;
	fo.proxy_auth = o->proxy_auth;
	fo.proxy_user = o->proxy_user;
	fo.proxy_password = o->proxy_password;
	fo.ca_pem = ca_pem;
	fo.timeout_ms = timeout_ms;
	fo.max_body = GATEWAY_MAX_BODY;
	return fetch_get(base, path, &fo, b, res, err, errlen);
}

/* The first certificate of a PEM buffer, re-encoded as PEM (so that nothing
 * else the answer carried, such as a second CA, is ever trusted). */
static char *
first_cert_pem(const char *pem, size_t len)
{
	BIO *in = NULL, *out = NULL;
	X509 *x = NULL;
	char *data, *res = NULL;
	long n;

	if (len > INT_MAX || (in = BIO_new_mem_buf(pem, (int)len)) == NULL)
		goto out;
	if ((x = PEM_read_bio_X509(in, NULL, NULL, NULL)) == NULL)
		goto out;
	if ((out = BIO_new(BIO_s_mem())) == NULL || !PEM_write_bio_X509(out, x))
		goto out;
	if ((n = BIO_get_mem_data(out, &data)) <= 0)
		goto out;
	if ((res = malloc((size_t)n + 1)) == NULL)
		goto out;
	memcpy(res, data, (size_t)n);
	res[n] = '\0';
out:
	X509_free(x);
	BIO_free(in);
	BIO_free(out);
	return res;
}

/* --ca-checksum, when given, must name the same CA as the document: the
 * registration command carries both, so an edit to either is caught before
 * the gateway is contacted.  Returns -1 to continue, or an exit code. */
static int
join_check_expected_ca(const struct join_opts *o, const struct joindoc *doc)
{
	if (o->ca_checksum == NULL || strcmp(o->ca_checksum, doc->ca_checksum) == 0)
		return -1;
	fprintf(stderr, "tether-client join: CA checksum mismatch: --ca-checksum "
	    "says %s, the document says %s\n", o->ca_checksum, doc->ca_checksum);
	return JOIN_EXIT_GATEWAY;
}

/* One failed request: JOIN_TRY_AGAIN when another try may do (a transient
 * fault: err says why, *res when to come back), else JOIN_EXIT_GATEWAY
 * after saying why. */
static int
gateway_failed(const struct joindoc *doc, const char *what,
    const struct fetch_result *res, const char *err)
{
	if (fetch_retryable(res))
		return JOIN_TRY_AGAIN;
	fprintf(stderr, "tether-client join: %s %s: %s (not retried: a new try "
	    "would get the same answer)\n", what, doc->gateway_url, err);
	return JOIN_EXIT_GATEWAY;
}

/*
 * One try at pinning the gateway's CA: GET /v1/ca unverified, its first
 * certificate checked against the document's ca_checksum, then GET
 * /healthz verified against it.  Each request waits at most timeout_ms.
 * Returns -1 with *ca_pem set (caller frees), JOIN_TRY_AGAIN with the
 * transient fault in err and *res, or an exit code after saying why.
 */
static int
join_try_ca(const struct join_opts *o, const struct joindoc *doc,
    unsigned int timeout_ms, char **ca_pem, struct fetch_result *res,
    char *err, size_t errlen)
{
	char sum[CA_CHECKSUM_MAX];
	struct httpbody b;
	char *pem = NULL;
	int r = JOIN_EXIT_GATEWAY;

	*ca_pem = NULL;
	if (gateway_get(o, doc->gateway_url, "/v1/ca", NULL, timeout_ms, &b, res,
	    err, errlen) == -1)
		return gateway_failed(doc, "cannot reach gateway", res, err);
	if ((pem = first_cert_pem(b.buf != NULL ? b.buf : "", b.len)) == NULL) {
		fprintf(stderr, "tether-client join: gateway %s did not answer "
		    "/v1/ca with a PEM certificate\n", doc->gateway_url);
		goto out;
	}
	if (ca_checksum_pem(pem, strlen(pem), sum, err, errlen) == -1) {
		fprintf(stderr, "tether-client join: gateway %s: CA certificate: "
		    "%s\n", doc->gateway_url, err);
		goto out;
	}
	if (strcmp(sum, doc->ca_checksum) != 0) {
		fprintf(stderr, "tether-client join: CA checksum mismatch: document "
		    "says %s, gateway presents %s\n", doc->ca_checksum, sum);
		goto out;
	}
	httpbody_wipe(&b);
	if (gateway_get(o, doc->gateway_url, "/healthz", pem, timeout_ms, &b, res,
	    err, errlen) == -1) {
		if (fetch_retryable(res))
			r = JOIN_TRY_AGAIN;
		else
			fprintf(stderr, "tether-client join: gateway %s does not verify "
			    "with its pinned CA: %s\n", doc->gateway_url, err);
		goto out;
	}
	*ca_pem = pem;
	pem = NULL;
	r = -1;
out:
	httpbody_wipe(&b);
	free(pem);
	return r;
}

/* Milliseconds on the monotonic clock. */
static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps ms, whatever signals that do not end the process interrupt. */
static void
sleep_ms(uint32_t ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* How long join has been (or may go on) retrying, for people: "45s",
 * "2m30s", "1h5m". */
static void
span(int64_t ms, char *out, size_t outlen)
{
	int64_t s = (ms + 500) / 1000;

	if (s < 60)
		snprintf(out, outlen, "%llds", (long long)s);
	else if (s < 3600)
		snprintf(out, outlen, "%lldm%llds", (long long)(s / 60),
		    (long long)(s % 60));
	else
		snprintf(out, outlen, "%lldh%lldm", (long long)(s / 3600),
		    (long long)(s % 3600 / 60));
}

/* Where join's retries stop, on the monotonic clock (INT64_MAX: never),
 * and whether the document's expiry is what stops them. */
struct join_bound {
	int64_t start_ms;
	int64_t end_ms;
	bool expiry;
};

static void
join_bound_init(struct join_bound *jb, const struct join_opts *o,
    const struct joindoc *doc)
{
	int64_t left_s = doc->expires_at - (int64_t)time(NULL);

	jb->start_ms = now_ms();
	jb->end_ms = INT64_MAX;
	jb->expiry = false;
	if (o->timeout_s > 0)
		jb->end_ms = jb->start_ms + o->timeout_s * 1000;
	if (left_s < (jb->end_ms - jb->start_ms) / 1000) {
		jb->end_ms = jb->start_ms + (left_s > 0 ? left_s : 0) * 1000;
		jb->expiry = true;
	}
}

/* The last transient fault was the last try: says why join stops.
 * Returns the exit code. */
static int
join_give_up(const struct join_opts *o, const struct joindoc *doc,
    const struct join_bound *jb, unsigned attempts, const char *err,
    const char *why_now)
{
	char took[32], when[32];

	span(now_ms() - jb->start_ms, took, sizeof(took));
	if (jb->expiry) {
		rfc3339_format(doc->expires_at, when);
		fprintf(stderr, "tether-client join: gave up after %s and %u "
		    "attempt%s: the join document expires at %s%s; the gateway %s "
		    "was not reached: %s; create a new document with `tetherctl "
		    "token create`\n", took, attempts, attempts == 1 ? "" : "s",
		    when, why_now, doc->gateway_url, err);
		return JOIN_EXIT_USAGE;
	}
	span(o->timeout_s * 1000, when, sizeof(when));
	fprintf(stderr, "tether-client join: gave up after %s and %u attempt%s "
	    "(--timeout %s%s): cannot reach gateway %s: %s; retry with a longer "
	    "--timeout (0: until the document expires)\n", took, attempts,
	    attempts == 1 ? "" : "s", when, why_now, doc->gateway_url, err);
	return JOIN_EXIT_GATEWAY;
}

/* A wait for people: "0.7s" below 10 s, else span's. */
static void
wait_text(int64_t ms, char *out, size_t outlen)
{
	if (ms < 0)
		ms = 0;
	if (ms < 10000)
		snprintf(out, outlen, "%d.%ds", (int)(ms / 1000),
		    (int)(ms % 1000 / 100));
	else
		span(ms, out, outlen);
}

/* Says that join tries again, why, when, and until when. */
static void
say_retry(const struct joindoc *doc, const struct join_bound *jb,
    const char *err, uint32_t told, uint32_t delay, unsigned next)
{
	char wait[32], asked[80] = "", left[32] = "never";

	wait_text(delay, wait, sizeof(wait));
	if (told != 0) {
		snprintf(asked, sizeof(asked), ", and asks to come back in ");
		wait_text(told, asked + strlen(asked), sizeof(asked) - strlen(asked));
	}
	if (jb->end_ms != INT64_MAX)
		wait_text(jb->end_ms - now_ms(), left, sizeof(left));
	fprintf(stderr, "tether-client join: cannot reach gateway %s: %s%s; "
	    "trying again in %s (attempt %u; gives up in %s)\n",
	    doc->gateway_url, err, asked, wait, next, left);
}

/*
 * Pins the gateway's CA (join_try_ca), trying again after each transient
 * fault until jb's end: the wait is the backoff's (backoff_next), or the
 * gateway's Retry-After (backoff_told), each printed with its reason.  A
 * Retry-After that reaches past the end ends it at once.  Returns -1 with
 * *ca_pem set (caller frees), or an exit code.
 */
static int
join_fetch_ca(const struct join_opts *o, const struct joindoc *doc, char **ca_pem)
{
	struct join_bound jb;
	struct fetch_result res;
	char err[512];
	uint32_t backoff = 0, delay, told = 0;
	unsigned attempts = 0;
	int64_t now, room;
	int r;

	join_bound_init(&jb, o, doc);
	for (;;) {
		room = jb.end_ms - now_ms();
		attempts++;
		r = join_try_ca(o, doc, room < GATEWAY_TIMEOUT_MS ?
		    (unsigned int)(room > 1000 ? room : 1000) : GATEWAY_TIMEOUT_MS,
		    ca_pem, &res, err, sizeof(err));
		if (r != JOIN_TRY_AGAIN)
			return r;
		told = 0;
		if (res.retry_after_ms != 0)
			delay = backoff_told(res.retry_after_ms, &told);
		else
			delay = backoff_next(&backoff, 0);
		now = now_ms();
		if (now >= jb.end_ms)
			return join_give_up(o, doc, &jb, attempts, err, "");
		if (told != 0 && now + told > jb.end_ms)
			return join_give_up(o, doc, &jb, attempts, err,
			    "; the gateway asks to come back later than that");
		if (now + delay > jb.end_ms)
			delay = (uint32_t)(jb.end_ms - now);
		say_retry(doc, &jb, err, told, delay, attempts + 1);
		sleep_ms(delay);
	}
}

/* --- writing DIR --- */

static void
remove_file(const char *dir, const char *name)
{
	char path[PATH_MAX];

	if (client_path(dir, name, path, sizeof(path)) == 0 &&
	    unlink(path) == -1 && errno != ENOENT)
		fprintf(stderr, "tether-client join: cannot remove %s: %s\n", path,
		    strerror(errno));
}

static void
join_undo(const char *dir, const struct join_undo *u,
    const struct join_opts *o)
{
	char name[64];

	for (size_t i = 0; i < u->wrote_svc_ca; i++) {
		snprintf(name, sizeof(name), "service-%s-ca.crt", o->svc_ca_name[i]);
		remove_file(dir, name);
	}
	for (size_t i = 0; i < u->wrote_svc_tok; i++) {
		client_service_token_name(o->svc_tok_name[i], name, sizeof(name));
		remove_file(dir, name);
	}
	if (u->wrote_state)
		remove_file(dir, "state.json");
	if (u->wrote_token)
		remove_file(dir, "import.token");
	if (u->wrote_ca)
		remove_file(dir, "ca.crt");
	if (u->wrote_key)
		remove_file(dir, "agent.key");
	if (u->made_dir && rmdir(dir) == -1)
		fprintf(stderr, "tether-client join: cannot remove %s: %s\n", dir,
		    strerror(errno));
}

static int
write_file(const char *dir, const char *name, const void *data, size_t len,
    mode_t mode, char *err, size_t errlen)
{
	char path[PATH_MAX];

	if (client_path(dir, name, path, sizeof(path)) == -1) {
		snprintf(err, errlen, "%s: path too long", dir);
		return -1;
	}
	return file_write_atomic(path, data, len, mode, err, errlen);
}

/*
 * The node's key: kept if DIR already holds one (a join or a first `run`
 * that did not finish: the gateway may have registered that key, and a
 * retry with it gets the same agent back instead of a record that blocks
 * the node name), else generated.  *kept says which.  Returns 0 or -1.
 */
static int
write_key(const char *dir, bool *kept, char *err, size_t errlen)
{
	char path[PATH_MAX], lerr[256];
	EVP_PKEY *key;
	int r;

	*kept = false;
	if (client_path(dir, "agent.key", path, sizeof(path)) == -1) {
		snprintf(err, errlen, "%s: path too long", dir);
		return -1;
	}
	if (file_exists(path) && (key = agentkey_load(path, lerr, sizeof(lerr))) != NULL) {
		EVP_PKEY_free(key);
		*kept = true;
		return 0;
	}
	if ((key = agentkey_generate()) == NULL) {
		snprintf(err, errlen, "cannot generate the agent key");
		return -1;
	}
	r = agentkey_save(key, path, err, errlen);
	EVP_PKEY_free(key);
	return r;
}

/* Writes DIR; on failure removes what it wrote.  Returns 0 or -1. */
static int
join_write(const char *dir, const struct joindoc *doc, const char *ca_pem,
    const struct join_opts *o, bool replace)
{
	const struct client_state *st = &o->st;
	char name[64];
	struct join_undo u;
	char err[512], tok[sizeof(doc->token) + 1];
	struct stat sb;
	bool kept_key;
	int r = -1;

	memset(&u, 0, sizeof(u));
	if (stat(dir, &sb) == -1)
		u.made_dir = true;
	if (dir_ensure(dir, 0700, err, sizeof(err)) == -1) {
		u.made_dir = false;
		goto out;
	}
	if (replace) {
		/* A pending join of the same cluster: forget it first, so that a
		 * failure below leaves DIR "not joined" rather than mixed. */
		remove_file(dir, "state.json");
		remove_file(dir, "status.json");
	}
	/* A join or an agent killed half way left its temporary files. */
	file_sweep_temps(dir);
	if (write_key(dir, &kept_key, err, sizeof(err)) == -1)
		goto out;
	u.wrote_key = !kept_key;
	if (write_file(dir, "ca.crt", ca_pem, strlen(ca_pem), 0644, err,
	    sizeof(err)) == -1)
		goto out;
	u.wrote_ca = true;
	/* Service CAs are public: 0644, as ca.crt. */
	for (size_t i = 0; i < o->nsvc_ca; i++) {
		snprintf(name, sizeof(name), "service-%s-ca.crt", o->svc_ca_name[i]);
		if (write_file(dir, name, o->svc_ca_pem[i], strlen(o->svc_ca_pem[i]),
		    0644, err, sizeof(err)) == -1)
			goto out;
		u.wrote_svc_ca = i + 1;
	}
	/* Service tokens are secrets: 0600, as import.token. */
	for (size_t i = 0; i < o->nsvc_tok; i++) {
		size_t tlen = strlen(o->svc_tok[i]);
		char *line = malloc(tlen + 2);

		if (line == NULL) {
			snprintf(err, sizeof(err), "out of memory");
			goto out;
		}
		memcpy(line, o->svc_tok[i], tlen);
		memcpy(line + tlen, "\n", 2);
		client_service_token_name(o->svc_tok_name[i], name, sizeof(name));
		r = write_file(dir, name, line, tlen + 1, 0600, err, sizeof(err));
		explicit_bzero(line, tlen + 1);
		free(line);
		if (r == -1)
			goto out;
		u.wrote_svc_tok = i + 1;
	}
	r = -1;
	snprintf(tok, sizeof(tok), "%s\n", doc->token);
	r = write_file(dir, "import.token", tok, strlen(tok), 0600, err,
	    sizeof(err));
	explicit_bzero(tok, sizeof(tok));
	if (r == -1)
		goto out;
	u.wrote_token = true;
	r = -1;
	if (client_state_save(dir, st, err, sizeof(err)) == -1)
		goto out;
	u.wrote_state = true;
	r = 0;
out:
	if (r == -1) {
		fprintf(stderr, "tether-client join: %s\n", err);
		join_undo(dir, &u, o);
	}
	return r;
}

/*
 * --rejoin: DIR must be joined to doc's cluster.  Its ca.crt becomes the CA
 * the document pins (join_fetch_ca checked it), ca.next.crt goes (a
 * rotation's leftover), and state.json names the CA and the document's
 * gateway URL; the agent id, key and settings stay.  Each step atomic: a
 * crash leaves the old CA or the new one, either a valid pin.
 */
static int
join_rejoin_check(const char *dir, const struct joindoc *doc,
    struct client_state *old)
{
	char err[512];
	int r = client_state_load(dir, old, err, sizeof(err));

	if (r == 1) {
		fprintf(stderr, "tether-client join: --rejoin: %s is not joined; join "
		    "without --rejoin\n", dir);
		return JOIN_EXIT_CONFLICT;
	}
	if (r == -1) {
		fprintf(stderr, "tether-client join: --rejoin: %s\n", err);
		return JOIN_EXIT_CONFLICT;
	}
	if (strcmp(old->cluster, doc->cluster) != 0) {
		fprintf(stderr, "tether-client join: --rejoin: %s belongs to cluster "
		    "%s, the document is for %s\n", dir, old->cluster, doc->cluster);
		return JOIN_EXIT_CONFLICT;
	}
	return -1;
}

static int
join_rejoin_write(const char *dir, const struct joindoc *doc, const char *ca_pem,
    struct client_state *st)
{
	char err[512];

	if (write_file(dir, "ca.crt", ca_pem, strlen(ca_pem), 0644, err,
	    sizeof(err)) == -1)
		goto fail;
	remove_file(dir, "ca.next.crt");
	snprintf(st->ca_checksum, sizeof(st->ca_checksum), "%s", doc->ca_checksum);
	snprintf(st->gateway_url, sizeof(st->gateway_url), "%s", doc->gateway_url);
	if (client_state_save(dir, st, err, sizeof(err)) == -1)
		goto fail;
	printf("re-pinned the gateway's CA %s for cluster %s (node %s%s%s kept; "
	    "the document's import token was not used); a running agent dials "
	    "with it at its next attempt\n", doc->ca_checksum, st->cluster,
	    st->node, st->agent_id[0] != '\0' ? ", agent " : "", st->agent_id);
	return JOIN_EXIT_OK;
fail:
	fprintf(stderr, "tether-client join: %s\n", err);
	return JOIN_EXIT_FAIL;
}

int
client_join(int argc, char **argv)
{
	struct join_opts *o = NULL;
	struct joindoc doc;
	char *ca_pem = NULL;
	bool replace = false;
	int r;

	memset(&doc, 0, sizeof(doc));
	if ((o = calloc(1, sizeof(*o))) == NULL) {
		fprintf(stderr, "tether-client join: out of memory\n");
		return JOIN_EXIT_FAIL;
	}
	o->timeout_s = JOIN_TIMEOUT_DEFAULT_S;
	if ((r = join_parse_flags(argc, argv, o)) != -1)
		goto out;
	if ((r = join_node_name(o, o->st.node, sizeof(o->st.node))) != -1)
		goto out;
	if ((r = join_read_doc(&doc)) != -1)
		goto out;
	if ((r = join_check_expected_ca(o, &doc)) != -1)
		goto out;
	if (o->rejoin)
		r = join_rejoin_check(o->state_dir, &doc, &o->st);
	else
		r = join_check_dir(o->state_dir, &doc, &replace);
	if (r != -1)
		goto out;
	if (o->proxy_url == NULL)
		o->proxy_url = env_first("https_proxy", "HTTPS_PROXY");
	o->no_proxy = env_first("no_proxy", "NO_PROXY");
	if ((r = join_fetch_ca(o, &doc, &ca_pem)) != -1)
		goto out;
	if (o->rejoin) {
		r = join_rejoin_write(o->state_dir, &doc, ca_pem, &o->st);
		goto out;
	}
	snprintf(o->st.gateway_url, sizeof(o->st.gateway_url), "%s",
	    doc.gateway_url);
	snprintf(o->st.ca_checksum, sizeof(o->st.ca_checksum), "%s",
	    doc.ca_checksum);
	snprintf(o->st.cluster, sizeof(o->st.cluster), "%s", doc.cluster);
	o->st.agent_id[0] = '\0';
	if (join_write(o->state_dir, &doc, ca_pem, o, replace) == -1) {
		r = JOIN_EXIT_FAIL;
		goto out;
	}
	printf("joined cluster %s as node %s; start the agent with: "
	    "tether-client run --state-dir %s\n", doc.cluster, o->st.node,
	    o->state_dir);
	r = JOIN_EXIT_OK;
out:
	joindoc_clear(&doc);
	free(ca_pem);
	if (o != NULL) {
		for (size_t i = 0; i < o->nsvc_ca; i++)
			free(o->svc_ca_pem[i]);
		for (size_t i = 0; i < o->nsvc_tok; i++) {
			explicit_bzero(o->svc_tok[i], strlen(o->svc_tok[i]));
			free(o->svc_tok[i]);
		}
		if (o->proxy_password != NULL) {
			explicit_bzero(o->proxy_password, strlen(o->proxy_password));
			free(o->proxy_password);
		}
	}
	free(o);
	return r;
}
