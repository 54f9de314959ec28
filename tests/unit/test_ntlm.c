/*
 * test_ntlm.c: the NTLM messages (common/ntlm.c) against MS-NLMP 4.2.4's
 * NTLMv2 example (user "User", domain "Domain", password "Password"), and
 * the type-2 reader's refusals.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "ntlm.h"

/* MS-NLMP 4.2.4.3: the CHALLENGE's target info. */
static const uint8_t target_info[] = {
	0x02, 0x00, 0x0c, 0x00, 'D', 0, 'o', 0, 'm', 0, 'a', 0, 'i', 0, 'n', 0,
	0x01, 0x00, 0x0c, 0x00, 'S', 0, 'e', 0, 'r', 0, 'v', 0, 'e', 0, 'r', 0,
	0x00, 0x00, 0x00, 0x00,
};
static const uint8_t server_challenge[8] = { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef };
static const uint8_t client_challenge[8] = { 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa };

/* A type-2 message: 48 bytes of header, then the target info. */
static size_t
challenge_message(uint8_t *m, const uint8_t *ti, size_t tilen)
{
	memset(m, 0, 48);
	memcpy(m, "NTLMSSP", 8);
	m[8] = 2;
	m[16] = 48;                           /* target name: empty, at 48 */
	m[20] = 0x15; m[21] = 0x82; m[22] = 0x8a; m[23] = 0xe2;  /* flags */
	memcpy(m + 24, server_challenge, 8);
	m[40] = (uint8_t)tilen; m[42] = (uint8_t)tilen;
	m[44] = 48;
	memcpy(m + 48, ti, tilen);
	return 48 + tilen;
}

static void
test_ntlmv2_vectors(void **state)
{
	static const uint8_t ntowfv2[16] = { 0x0c, 0x86, 0x8a, 0x40, 0x3b, 0xfd,
	    0x7a, 0x93, 0xa3, 0x00, 0x1e, 0xf2, 0x2e, 0xf0, 0x2e, 0x3f };
	static const uint8_t lmv2[24] = { 0x86, 0xc3, 0x50, 0x97, 0xac, 0x9c,
	    0xec, 0x10, 0x25, 0x54, 0x76, 0x4a, 0x57, 0xcc, 0xcc, 0x19,
	    0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa };
	static const uint8_t nt_proof[16] = { 0x68, 0xcd, 0x0a, 0xb8, 0x51, 0xe5,
	    0x1c, 0x96, 0xaa, 0xbc, 0x92, 0x7b, 0xeb, 0xef, 0x6a, 0x1c };
	struct ntlm_challenge ch;
	uint8_t m[256], key[16], out[512];
	char why[128];
	size_t n = challenge_message(m, target_info, sizeof(target_info)), len;

	assert_int_equal(ntlm_parse_challenge(m, n, &ch, why, sizeof(why)), 0);
	assert_memory_equal(ch.server_challenge, server_challenge, 8);
	assert_int_equal(ch.target_info_len, sizeof(target_info));
	assert_false(ch.has_timestamp);

	assert_int_equal(ntlm_ntowfv2("Domain", "User", "Password", key), 0);
	assert_memory_equal(key, ntowfv2, 16);
	/* The user is upper-cased, the domain is not. */
	assert_int_equal(ntlm_ntowfv2("Domain", "user", "Password", key), 0);
	assert_memory_equal(key, ntowfv2, 16);

	len = ntlm_authenticate(&ch, key, "Domain", "User", client_challenge, 0,
	    out, sizeof(out));
	assert_true(len > 64);
	assert_memory_equal(out, "NTLMSSP\0\3\0\0\0", 12);
	/* LmChallengeResponse at its offset: LMv2. */
	assert_int_equal(out[12], 24);
	assert_memory_equal(out + (out[16] | out[17] << 8), lmv2, 24);
	/* NtChallengeResponse: NTProofStr, then the blob with the time (0),
	 * the client challenge and the target info. */
	{
		const uint8_t *nt = out + (out[24] | out[25] << 8);
		size_t ntlen = out[20] | out[21] << 8;

		assert_int_equal(ntlen, 16 + 28 + sizeof(target_info) + 4);
		assert_memory_equal(nt, nt_proof, 16);
		assert_memory_equal(nt + 16 + 16, client_challenge, 8);
		assert_memory_equal(nt + 16 + 28, target_info, sizeof(target_info));
	}
	/* Domain and user as UTF-16LE. */
	assert_memory_equal(out + (out[32] | out[33] << 8), "D\0o\0m\0a\0i\0n\0", 12);
	assert_memory_equal(out + (out[40] | out[41] << 8), "U\0s\0e\0r\0", 8);
	/* Too small a buffer: nothing. */
	assert_int_equal(ntlm_authenticate(&ch, key, "Domain", "User",
	    client_challenge, 0, out, 100), 0);
}

static void
test_timestamp(void **state)
{
	/* With MsvAvTimestamp: its time goes into the blob, LM is Z(24). */
	static const uint8_t ti[] = { 0x07, 0x00, 0x08, 0x00, 1, 2, 3, 4, 5, 6, 7, 8,
	    0x00, 0x00, 0x00, 0x00 };
	static const uint8_t zero[24];
	struct ntlm_challenge ch;
	uint8_t m[128], key[16] = { 0 }, out[512];
	char why[128];

	assert_int_equal(ntlm_parse_challenge(m, challenge_message(m, ti, sizeof(ti)),
	    &ch, why, sizeof(why)), 0);
	assert_true(ch.has_timestamp);
	assert_true(ntlm_authenticate(&ch, key, "", "u@example.com", client_challenge,
	    99, out, sizeof(out)) > 0);
	assert_memory_equal(out + (out[16] | out[17] << 8), zero, 24);
	assert_memory_equal(out + (out[24] | out[25] << 8) + 16 + 8, ti + 4, 8);
}

static void
test_challenge_refusals(void **state)
{
	static const uint8_t no_eol[] = { 0x02, 0x00, 0x02, 0x00, 'x', 0 };
	static const uint8_t past[] = { 0x02, 0x00, 0x40, 0x00, 'x', 0, 0, 0 };
	struct ntlm_challenge ch;
	uint8_t m[128];
	char why[128];
	size_t n;

	n = challenge_message(m, no_eol, sizeof(no_eol));
	assert_int_equal(ntlm_parse_challenge(m, n, &ch, why, sizeof(why)), -1);
	assert_string_equal(why, "NTLM challenge: target info without MsvAvEOL");
	n = challenge_message(m, past, sizeof(past));
	assert_int_equal(ntlm_parse_challenge(m, n, &ch, why, sizeof(why)), -1);
	assert_string_equal(why, "NTLM challenge: an AV pair past the target info");
	n = challenge_message(m, target_info, sizeof(target_info));
	m[44] = 100;   /* target info offset past the end */
	assert_int_equal(ntlm_parse_challenge(m, n, &ch, why, sizeof(why)), -1);
	assert_string_equal(why, "NTLM challenge: target info past the message");
	m[44] = 48;
	m[8] = 3;
	assert_int_equal(ntlm_parse_challenge(m, n, &ch, why, sizeof(why)), -1);
	m[8] = 2;
	m[20] &= (uint8_t)~1;   /* no Unicode */
	assert_int_equal(ntlm_parse_challenge(m, n, &ch, why, sizeof(why)), -1);
	assert_int_equal(ntlm_parse_challenge(m, 40, &ch, why, sizeof(why)), -1);
}

static void
test_split_user(void **state)
{
	char d[NTLM_NAME_MAX], u[NTLM_NAME_MAX];

	assert_int_equal(ntlm_split_user("CORP\\alice", d, u), 0);
	assert_string_equal(d, "CORP");
	assert_string_equal(u, "alice");
	assert_int_equal(ntlm_split_user("alice@corp.example", d, u), 0);
	assert_string_equal(d, "");
	assert_string_equal(u, "alice@corp.example");
	assert_int_equal(ntlm_split_user("CORP\\", d, u), -1);
	assert_int_equal(ntlm_split_user("", d, u), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ntlmv2_vectors),
		cmocka_unit_test(test_timestamp),
		cmocka_unit_test(test_challenge_refusals),
		cmocka_unit_test(test_split_user),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
