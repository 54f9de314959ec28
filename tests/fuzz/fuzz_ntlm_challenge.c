/*
 * fuzz_ntlm_challenge.c: libFuzzer target for the NTLM type-2 message a
 * proxy sends (ntlm_parse_challenge) and the type-3 answer built from what
 * it accepts (ntlm_authenticate), which must fit the size ntlm.h promises.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ntlm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t key[16], cc[8];
	static uint8_t out[64 + 2 * (4 + 5) + 24 + 48 + NTLM_TARGET_INFO_MAX];
	struct ntlm_challenge ch;
	char why[128];
	size_t n;

	if (ntlm_parse_challenge(data, size, &ch, why, sizeof(why)) != 0)
		return 0;
	if (ch.target_info_len > NTLM_TARGET_INFO_MAX || ch.target_info_len > size)
		abort();
	n = ntlm_authenticate(&ch, key, "CORP", "alice", cc, 1, out, sizeof(out));
	if (n == 0 || n > sizeof(out) || memcmp(out, "NTLMSSP", 8) != 0)
		abort();
	return 0;
}
