/*
 * url.h: the one parser for the URLs Tether takes from its users (issue 8
 * wants every ad-hoc one moved here): scheme://[user[:password]@]host[:port][/path][?query].
 * Used for the agent's HTTP proxy URL (--proxy, HTTPS_PROXY).
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
	unsigned int port;		/* explicit, or the scheme's default */
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

#endif
