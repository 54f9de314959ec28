/*
 * fuzz_catrust.c: libFuzzer target for catrust_check_cross
 * (tunnel-client/catrust.c), which reads the two certificates a gateway
 * sends its agents in SETTINGS "ca" during a CA rotation (docs/0033).
 *
 * Input: a 2-byte big-endian length n, then n bytes of "next", then the
 * rest as "cross"; the pinned CA is fixed (below; the seeds' pair was made
 * for it by `tether-gateway init` and `ca rotate start`).  Checks beyond
 * "no crash": a refusal says why and hands nothing back; an acceptance
 * hands back next, whose DER is exactly the input's.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/pem.h>
#include <openssl/x509.h>

#include "catrust.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char pinned_pem[] =
	"-----BEGIN CERTIFICATE-----\n"
	"MIIBqzCCAVGgAwIBAgIQdkIBeM9HAqXydXeaM/kAaTAKBggqhkjOPQQDAjAlMSMw\n"
	"IQYDVQQDDBpUZXRoZXIgQ0EgZjI4MmRhMDQ2MWI3OWVhZDAeFw0yNjExMjcwOTEx\n"
	"MzZaFw0zNjExMjQxMDExMzZaMCUxIzAhBgNVBAMMGlRldGhlciBDQSBmMjgyZGEw\n"
	"NDYxYjc5ZWFkMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE6FKnv/n0Zw9jSFRF\n"
	"J1OdvL+4N2p0Y5cDkNSqoHdod0bjIGlva06iIuAs25q9Gj6QXZKsQB6CVmol+kiO\n"
	"EtaQ3qNjMGEwDwYDVR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAQYwHQYDVR0O\n"
	"BBYEFGN/Fmp0QYG1aGdjHFF0ArTqaEWYMB8GA1UdIwQYMBaAFGN/Fmp0QYG1aGdj\n"
	"HFF0ArTqaEWYMAoGCCqGSM49BAMCA0gAMEUCIQCBPk+BTBzWcZJ8OuMia6+XgRRi\n"
	"rza/DPEh+8p7mAtCBAIgZeiUYWBl7od4nM7Q/OFwtArnyteBgjSgIGZ7TTqyH8A=\n"
	"-----END CERTIFICATE-----\n";

static X509 *pinned;

static void
check(int ok)
{
	if (!ok)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	X509 *next = (X509 *)1;
	char why[256];
	size_t n;
	int r;

	if (pinned == NULL) {
		BIO *b = BIO_new_mem_buf(pinned_pem, -1);

		pinned = PEM_read_bio_X509(b, NULL, NULL, NULL);
		BIO_free(b);
		check(pinned != NULL);
	}
	if (size < 2)
		return 0;
	n = (size_t)data[0] << 8 | data[1];
	if (n > size - 2)
		return 0;
	why[0] = '\0';
	r = catrust_check_cross(pinned, data + 2, n, data + 2 + n, size - 2 - n,
	    &next, why, sizeof(why));
	if (r != 0) {
		check(r == -1 && next == NULL && why[0] != '\0');
		return 0;
	}
	{
		unsigned char *der = NULL;
		int len = i2d_X509(next, &der);

		check(len > 0 && (size_t)len == n && memcmp(der, data + 2, n) == 0);
		OPENSSL_free(der);
	}
	X509_free(next);
	return 0;
}
