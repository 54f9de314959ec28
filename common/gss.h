/*
 * gss.h: Kerberos (SPNEGO) tokens for a Negotiate proxy through the
 * system's GSSAPI, MIT krb5's libgssapi_krb5.so.2, loaded with dlopen the
 * first time a Negotiate proxy is used: the agent links no Kerberos library
 * (a dozen shared libraries at most, and a static build; docs/0024).  The
 * client's credentials are the node's: a keytab (KRB5_CLIENT_KTNAME) or a
 * credential cache (KRB5CCNAME), as krb5.conf and the environment say.
 *
 * A step may talk to the KDC (a blocking exchange bounded by krb5's own
 * timeouts): call it off any event loop.
 */
#ifndef TETHER_GSS_H
#define TETHER_GSS_H

#include <stddef.h>
#include <stdint.h>

struct gss_client;

/*
 * A security context for the service HTTP@host (the proxy's host name, as
 * the proxy's keytab has it).  NULL with a reason in err when GSSAPI
 * cannot be loaded (not installed, or a static binary).
 */
struct gss_client *gss_client_new(const char *host, char *err, size_t errlen);

/*
 * One step: in (the proxy's token, decoded) is NULL for the first.  On 0,
 * *out is a malloc'd token of *outlen bytes to send (NULL, 0 when there is
 * none) and *complete says whether the context is established.  -1 with
 * GSSAPI's own messages in err (no ticket, an unknown principal, a clock
 * skew...).
 */
int gss_client_step(struct gss_client *g, const uint8_t *in, size_t inlen,
    uint8_t **out, size_t *outlen, int *complete, char *err, size_t errlen);

/* Ends the context and frees g (NULL: nothing). */
void gss_client_free(struct gss_client *g);

#endif
