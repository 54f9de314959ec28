/*
 * url.h: the one URL parser.  Every URL Tether reads goes through
 * url_parse: scheme://[user[:password]@]host[:port][/path][?query].
 * Its users: the agent's HTTP proxy URL (--proxy, HTTPS_PROXY), the join
 * document's gateway_url, the gateway's --url (and gateway.json), the
 * agent's gateway URL (state.json) and the WebSocket client's wss:// or
 * ws:// URL.  A caller that wants less (no user information, an origin
 * only) checks the parsed fields: url_is_origin, has_userinfo.
 */
#ifndef TETHER_URL_H
#define TETHER_URL_H

#include <stddef.h>

#define URL_MAX 2048
#define URL_HOST_MAX 253
#define URL_USERINFO_MAX 256

/*
 * A parsed URL.  Every field is a NUL-terminated copy; user and password
 * are percent-decoded (and wiped by url_clear).  Costs: about 3 KiB, no heap.
 */
struct url {
	char scheme[8];			/* lower case: http, https, ws, wss */
	char user[URL_USERINFO_MAX];	/* "" when absent */
	char password[URL_USERINFO_MAX];
	int has_userinfo;		/* an '@' was there */
	char host[URL_HOST_MAX + 1];	/* without brackets */
	int host_is_ipv6;		/* was [bracketed] */
	int host_is_ip;			/* an IPv4 or IPv6 literal, not a name */
	unsigned int port;		/* explicit, or the scheme's default */
	int port_given;			/* the URL names the port */
	char path[URL_MAX];		/* path and query, "/" when absent */
};

/*
 * Parses s (at most URL_MAX bytes).  The scheme must be one of schemes (a
 * NULL-terminated list, matched without case; default ports: http and ws
 * 80, https and wss 443).  The host must be a DNS name, an IPv4 address or
 * a [bracketed] IPv6 address (common/hostname.h); the port 1 to 65535; no
 * fragment, no space or control byte anywhere; "%XX" in the user
 * information must be valid and must not decode to a NUL or control byte.
 * Returns 0, or -1 with the reason in why (never quoting the password).
 */
int url_parse(const char *s, const char *const *schemes, struct url *u,
    char *why, size_t whylen);

/* Wipes u (the password with OPENSSL_cleanse). */
void url_clear(struct url *u);

/* "scheme://host:port" without user information, for messages. */
void url_display(const struct url *u, char *buf, size_t len);

/* 1 if u is an origin: no path beyond "/", no query (user information is
 * the caller's to refuse through has_userinfo). */
int url_is_origin(const struct url *u);

/*
 * The authority as it goes into a Host header: host (IPv6 in brackets),
 * then ":port" only if the URL named one.  Returns the length written, or
 * -1 if len is too small (buf then holds "").
 */
int url_authority(const struct url *u, char *buf, size_t len);

/* "scheme://" and url_authority: the origin, normalised (lower-case
 * scheme).  Returns the length, or -1 if len is too small. */
int url_origin(const struct url *u, char *buf, size_t len);

#endif
