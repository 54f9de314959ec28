/*
 * proxyauth.c: the Proxy-Authorization values of one connection's CONNECTs
 * (see proxyauth.h).
 */
#include "proxyauth.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "gss.h"
#include "ntlm.h"

struct proxy_authn {
	enum proxy_auth scheme;
	int round;                      /* CONNECTs sent so far */
	char domain[NTLM_NAME_MAX];
	char user[NTLM_NAME_MAX];
	uint8_t ntowfv2[16];            /* NTLM's key: a secret */
	char host[256];                 /* the proxy's: Negotiate's HTTP@host */
	struct gss_client *gss;         /* Negotiate's context */
	int gss_complete;
};

#define NEGOTIATE_ROUNDS_MAX 4

struct proxy_authn *
proxy_authn_new(enum proxy_auth scheme, const char *user, const char *password,
    const char *proxy_host, char *err, size_t errlen)
{
	struct proxy_authn *a = calloc(1, sizeof(*a));

	if (a == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	a->scheme = scheme;
	snprintf(a->host, sizeof(a->host), "%s", proxy_host);
	if (scheme != PROXY_AUTH_NTLM)
		return a;
	if (user == NULL || ntlm_split_user(user, a->domain, a->user) != 0) {
		snprintf(err, errlen, "NTLM needs a user, DOMAIN\\user or user@domain "
		    "(the proxy URL's or --proxy-user)");
		proxy_authn_free(a);
		return NULL;
	}
	if (ntlm_ntowfv2(a->domain, a->user, password != NULL ? password : "",
	    a->ntowfv2) != 0) {
		snprintf(err, errlen, "NTLM: the user or password is not UTF-8");
		proxy_authn_free(a);
		return NULL;
	}
	return a;
}

/* "SCHEME base64(bin)", malloc'd; NULL when out of memory. */
static char *
header_value(const char *scheme, const uint8_t *bin, size_t len)
{
	size_t slen = strlen(scheme), blen = 4 * ((len + 2) / 3);
	char *v = malloc(slen + 1 + blen + 1);

	if (v == NULL)
		return NULL;
	memcpy(v, scheme, slen);
	v[slen] = ' ';
	EVP_EncodeBlock((unsigned char *)v + slen + 1, bin, (int)len);
	return v;
}

/* A base64 token into at most outlen bytes: the length, or -1. */
static long
b64_decode(const char *in, uint8_t *out, size_t outlen)
{
	size_t n = strlen(in), pad = 0;
	int r;

	if (n == 0 || n % 4 != 0 || n / 4 * 3 > outlen)
		return -1;
	if (in[n - 1] == '=')
		pad++;
	if (in[n - 2] == '=')
		pad++;
	r = EVP_DecodeBlock(out, (const unsigned char *)in, (int)n);
	return r < 0 ? -1 : (long)((size_t)r - pad);
}

static const char *
offered(unsigned offers, char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = '\0';
	for (int i = 0; proxy_auth_names[i] != NULL; i++)
		if (offers & (1u << i))
			o += (size_t)snprintf(buf + o, len - o, "%s%s", o > 0 ? ", " : "",
			    proxy_auth_names[i]);
	if (o == 0)
		snprintf(buf, len, "none Tether speaks");
	return buf;
}

static int
ntlm_next(struct proxy_authn *a, const struct proxy_answer *ans, char **value,
    char *why, size_t whylen)
{
	uint8_t msg[NTLM_CHALLENGE_MAX], out[4096], cc[8];
	struct ntlm_challenge ch;
	char list[64];
	long n;
	size_t len;

	if (ans == NULL) {
		len = ntlm_negotiate(msg, sizeof(msg));
		*value = header_value("NTLM", msg, len);
		return *value != NULL ? 0 : -1;
	}
	if (a->round >= 2 || !(ans->offers & (1u << PROXY_AUTH_NTLM))) {
		if (!(ans->offers & (1u << PROXY_AUTH_NTLM)))
			snprintf(why, whylen, "the proxy does not offer NTLM (it offers %s)",
			    offered(ans->offers, list, sizeof(list)));
		else
			snprintf(why, whylen, "the proxy refused the NTLM credentials of "
			    "%s%s%s: wrong user or password?", a->domain,
			    a->domain[0] != '\0' ? "\\" : "", a->user);
		return 1;
	}
	if (!ans->has_token) {
		snprintf(why, whylen, "the proxy answered NTLM's first message "
		    "without a challenge");
		return 1;
	}
	if ((n = b64_decode(ans->token, msg, sizeof(msg))) < 0) {
		snprintf(why, whylen, "NTLM challenge: not base64 or over %d bytes",
		    NTLM_CHALLENGE_MAX);
		return -1;
	}
	if (ntlm_parse_challenge(msg, (size_t)n, &ch, why, whylen) != 0)
		return -1;
	if (RAND_bytes(cc, sizeof(cc)) != 1) {
		snprintf(why, whylen, "no random bytes for NTLM");
		return -1;
	}
	len = ntlm_authenticate(&ch, a->ntowfv2, a->domain, a->user, cc,
	    ntlm_filetime_now(), out, sizeof(out));
	if (len == 0) {
		snprintf(why, whylen, "NTLM: cannot build the answer (names too long?)");
		return -1;
	}
	*value = header_value("NTLM", out, len);
	OPENSSL_cleanse(out, sizeof(out));
	return *value != NULL ? 0 : -1;
}

/* One GSSAPI step into "Negotiate <token>".  0, or -1 with why. */
static int
negotiate_step(struct proxy_authn *a, const uint8_t *in, size_t inlen, char **value,
    char *why, size_t whylen)
{
	uint8_t *out;
	size_t outlen;

	if (a->gss == NULL && (a->gss = gss_client_new(a->host, why, whylen)) == NULL)
		return -1;
	if (gss_client_step(a->gss, in, inlen, &out, &outlen, &a->gss_complete, why,
	    whylen) != 0)
		return -1;
	if (out == NULL) {
		snprintf(why, whylen, "Kerberos (GSSAPI) made no token for the proxy");
		return -1;
	}
	*value = header_value("Negotiate", out, outlen);
	free(out);
	return *value != NULL ? 0 : -1;
}

static int
negotiate_next(struct proxy_authn *a, const struct proxy_answer *ans, char **value,
    char *why, size_t whylen)
{
	uint8_t in[PROXY_TOKEN_MAX];
	char list[64];
	long n;

	if (ans == NULL)
		return negotiate_step(a, NULL, 0, value, why, whylen);
	if (!(ans->offers & (1u << PROXY_AUTH_NEGOTIATE))) {
		snprintf(why, whylen, "the proxy does not offer Negotiate (it offers %s)",
		    offered(ans->offers, list, sizeof(list)));
		return 1;
	}
	if (!ans->has_token || a->gss_complete || a->round >= NEGOTIATE_ROUNDS_MAX) {
		snprintf(why, whylen, "the proxy refused this node's Kerberos ticket for "
		    "HTTP/%s (is that principal in the proxy's keytab, and is this "
		    "node's principal allowed?)", a->host);
		return 1;
	}
	if ((n = b64_decode(ans->token, in, sizeof(in))) < 0) {
		snprintf(why, whylen, "Negotiate token: not base64");
		return -1;
	}
	return negotiate_step(a, in, (size_t)n, value, why, whylen);
}

int
proxy_authn_blocks(const struct proxy_authn *a)
{
	return a->scheme == PROXY_AUTH_NEGOTIATE;
}

int
proxy_authn_next(struct proxy_authn *a, const struct proxy_answer *ans,
    char **value, char *why, size_t whylen)
{
	int r = 1;

	*value = NULL;
	if (whylen > 0)
		why[0] = '\0';
	switch (a->scheme) {
	case PROXY_AUTH_BASIC:
		r = ans == NULL ? 0 : 1;
		break;
	case PROXY_AUTH_NTLM:
		r = ntlm_next(a, ans, value, why, whylen);
		break;
	case PROXY_AUTH_NEGOTIATE:
		r = negotiate_next(a, ans, value, why, whylen);
		break;
	}
	if (r == 0)
		a->round++;
	return r;
}

enum proxy_auth
proxy_authn_scheme(const struct proxy_authn *a)
{
	return a->scheme;
}

void
proxy_authn_free(struct proxy_authn *a)
{
	if (a == NULL)
		return;
	gss_client_free(a->gss);
	OPENSSL_cleanse(a, sizeof(*a));
	free(a);
}
