/*
 * fuzz_proxy_answer.c: libFuzzer target for a proxy's answer to CONNECT
 * (proxy_answer_parse: status line, headers, Proxy-Authenticate challenges)
 * and what the agent does with a 407 (proxy_authn_next: Basic and NTLM,
 * whose type-2 message arrives base64 in the challenge).  The first byte
 * picks the wanted scheme; the rest is the head.
 */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "proxy.h"
#include "proxyauth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct proxy_answer a;
	enum proxy_auth want;
	struct proxy_authn *authn;
	char sl[128], why[300], *value = NULL;

	if (size < 1)
		return 0;
	want = (enum proxy_auth)(data[0] % 2);   /* Negotiate needs GSSAPI */
	if (proxy_answer_parse((const char *)data + 1, size - 1, want, &a, sl,
	    sizeof(sl), why, sizeof(why)) != 0)
		return 0;
	if (a.status < 100 || a.status > 599 || strlen(a.token) > PROXY_TOKEN_MAX ||
	    (!a.has_token && a.token[0] != '\0'))
		abort();
	for (const char *p = a.token; *p != '\0'; p++)
		if (!isalnum((unsigned char)*p) && *p != '+' && *p != '/' && *p != '=')
			abort();
	authn = proxy_authn_new(want, "CORP\\alice", "password", "proxy", why, sizeof(why));
	if (authn == NULL)
		abort();
	/* The first message, then the answer to this 407. */
	if (proxy_authn_next(authn, NULL, &value, why, sizeof(why)) != 0)
		abort();
	free(value);
	value = NULL;
	if (proxy_authn_next(authn, &a, &value, why, sizeof(why)) == 0 && value != NULL) {
		for (const char *p = value; *p != '\0'; p++)
			if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
				abort();
		OPENSSL_cleanse(value, strlen(value));
		free(value);
	}
	proxy_authn_free(authn);
	return 0;
}
