/*
 * fuzz_api_body.c: libFuzzer target for the admin API's request bodies
 * (gateway/routes/apibody.c).  The first byte picks the route's body kind, the
 * rest is the body.
 *
 * Checks beyond "no crash, no leak": a refusal is 400 or 413 with a reason
 * and leaves nothing allocated; an accepted body has every field its kind
 * requires, in range.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apibody.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int ok)
{
	if (!ok)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct api_body b;
	char why[256];
	enum api_body_kind kind;
	int status;

	if (size == 0)
		return 0;
	kind = (enum api_body_kind)(data[0] % API_BODY_KINDS);
	why[0] = '\0';
	status = api_body_parse(kind, (const char *)data + 1, size - 1, data[0] >= 0xf0,
	    &b, why, sizeof(why));
	if (status != 0) {
		check(status == 400 || status == 413);
		check(why[0] != '\0' && b.root == NULL);
		return 0;
	}
	check(data[0] < 0xf0 && b.root != NULL);
	switch (kind) {
	case API_BODY_CLUSTER:
		check(b.name != NULL);
		break;
	case API_BODY_TOKENS:
		check(b.ttl_seconds >= API_TTL_MIN && b.ttl_seconds <= API_TTL_MAX);
		check(b.uses >= 1 && b.uses <= API_USES_MAX);
		break;
	case API_BODY_USER:
		check(b.name != NULL && b.nclusters >= 1 &&
		    b.nclusters <= STORE_TOKEN_CLUSTERS_MAX);
		for (size_t i = 0; i < b.nclusters; i++)
			check(b.clusters[i] != NULL);
		break;
	case API_BODY_KUBECONFIG:
		check(b.user != NULL);
		break;
	case API_BODY_URLS:
		check(b.nurls <= API_URLS_MAX);
		check(strlen(b.urls) <= STORE_URLS_MAX);
		check((b.nurls == 0) == (b.urls[0] == '\0'));
		break;
	default:
		check(0);
	}
	api_body_free(&b);
	return 0;
}
