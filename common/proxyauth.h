/*
 * proxyauth.h: one connection's authentication to an HTTP CONNECT proxy:
 * which Proxy-Authorization value each CONNECT carries, from the scheme
 * the agent was configured with (--proxy-auth) and the proxy's 407
 * answers.  Basic sends the URL's credentials once; NTLM sends NEGOTIATE,
 * reads the CHALLENGE from the 407 and sends AUTHENTICATE (common/ntlm.h)
 * on the same connection; Negotiate sends GSSAPI tokens (common/gss.h).
 * common/wsclient.c does the I/O and calls these between answers.
 */
#ifndef TETHER_PROXYAUTH_H
#define TETHER_PROXYAUTH_H

#include <stddef.h>

#include "proxy.h"

struct proxy_authn;

/*
 * The authentication for one connection to proxy_host.  user and password
 * are the credentials (NTLM: "DOMAIN\\user" or "user@domain"; Basic ignores
 * them: the URL's go into the request); the password is not kept (NTLM
 * keeps its NTOWFv2 key, wiped on free).  Negotiate needs neither: the
 * node's Kerberos credentials (KRB5_CLIENT_KTNAME, KRB5CCNAME) are used.
 * NULL with a reason in err (no user for NTLM, out of memory).
 */
struct proxy_authn *proxy_authn_new(enum proxy_auth scheme, const char *user,
    const char *password, const char *proxy_host, char *err, size_t errlen);

/*
 * The Proxy-Authorization value for the next CONNECT: the first when ans is
 * NULL, else the answer to the proxy's 407 ans.  Returns 0 with *value
 * malloc'd (wipe with OPENSSL_cleanse, then free) or NULL (Basic: the
 * request builder adds the URL's credentials); 1 when there is nothing more
 * to send (refused: why holds what to add to the proxy's status line, or "");
 * -1 on an error (why says it: a malformed challenge, a failing GSSAPI).
 * Negotiate's step may contact the KDC: the caller runs it off its loop.
 */
int proxy_authn_next(struct proxy_authn *a, const struct proxy_answer *ans,
    char **value, char *why, size_t whylen);

/* 1 if proxy_authn_next may block (Negotiate: it may ask the KDC for a
 * ticket), so the caller runs it on a thread of its own; else 0. */
int proxy_authn_blocks(const struct proxy_authn *a);

/* The scheme a was made for. */
enum proxy_auth proxy_authn_scheme(const struct proxy_authn *a);

/* Wipes and frees a (NULL: nothing). */
void proxy_authn_free(struct proxy_authn *a);

#endif
