/*
 * certcmd.c: `tether-gateway cert renew` (see certcmd.h): a new server
 * certificate from the data directory's CA, for a running gateway to pick
 * up on SIGHUP.
 */
#include "certcmd.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ca.h"
#include "joindoc.h"

#define DEFAULT_DAYS 730
#define MAX_DAYS 3650

static const char cert_usage[] =
"usage: tether-gateway cert renew --data-dir DIR [--days N]\n"
"\n"
"renew  issues a new server certificate, DIR/server.crt, from the CA in DIR\n"
"       (ca.crt and ca.key): the same names (subjectAltName) and key\n"
"       (server.key) as the one it replaces, a new serial, valid from an hour\n"
"       ago for N days (default 730, at most 3650).  The old server.crt must\n"
"       be one this CA issued for server.key.  The file is replaced atomically:\n"
"       a gateway reading it sees the old one or the new one.\n"
"\n"
"       Also issues the replicas' peer credential again, a new peer.key and\n"
"       peer.crt (created where there were none): what a replica proves to\n"
"       another one; server.key alone opens no peer link.\n"
"\n"
"       A running gateway keeps serving the old certificate until it gets\n"
"       SIGHUP (systemctl reload tether-gateway): then new TLS handshakes get\n"
"       the new one, and tunnels and streams already open stay as they are.\n"
"       It logs the serial and notAfter it now serves, or why it kept the old\n"
"       one.  Check with:\n"
"         openssl s_client -connect HOST:PORT </dev/null 2>/dev/null |\n"
"           openssl x509 -noout -serial -enddate\n"
"\n"
"       Replicas: run it where ca.key is, copy server.crt, peer.crt and\n"
"       peer.key to every replica's data directory, then SIGHUP each\n"
"       (docs/operations.md).  A gateway also\n"
"       renews by itself --cert-renew-before days before expiry (default 45)\n"
"       when ca.key is in its data directory.\n"
"\n"
"Prints the new serial and notAfter.  Exit 0 renewed, 1 failed (nothing\n"
"changed; the message names the file and what is wrong), 2 bad usage.\n"
"\n"
"Example:\n"
"  tether-gateway cert renew --data-dir /var/lib/tether && systemctl reload tether-gateway\n";

static int __attribute__((format(printf, 1, 2)))
cert_usage_error(const char *fmt, ...);

static int
cert_usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tether-gateway: cert: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nRun 'tether-gateway cert --help' for usage.\n");
	return 2;
}

/* --days: 1 to MAX_DAYS, digits only.  0 or -1. */
static int
parse_days(const char *s, long *out)
{
	char *end;
	long v;

	if (s[0] < '0' || s[0] > '9')
		return -1;
	v = strtol(s, &end, 10);
	if (*end != '\0' || v < 1 || v > MAX_DAYS)
		return -1;
	*out = v;
	return 0;
}

static int
cert_renew(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "data-dir", required_argument, NULL, 'd' },
		{ "days", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dir = NULL;
	long days = DEFAULT_DAYS;
	struct ca_cert_info info;
	char err[700], after[32];
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'n':
			if (parse_days(optarg, &days) != 0)
				return cert_usage_error("--days wants 1 to %d, not \"%s\"",
				    MAX_DAYS, optarg);
			break;
		case 'h': fputs(cert_usage, stdout); return 0;
		default: return cert_usage_error("renew: unknown flag");
		}
	}
	if (optind != argc)
		return cert_usage_error("renew: unexpected argument \"%s\"",
		    argv[optind]);
	if (dir == NULL)
		return cert_usage_error("renew: --data-dir DIR is required");
	if (ca_renew_server(dir, days, &info, err, sizeof(err)) != 0) {
		fprintf(stderr, "tether-gateway: cert renew: %s (nothing changed)\n",
		    err);
		return 1;
	}
	rfc3339_format((int64_t)info.not_after, after);
	printf("renewed %s/server.crt serial %s not_after %s\n", dir, info.serial,
	    after);
	if (ca_renew_peer(dir, days, &info, err, sizeof(err)) != 0) {
		fprintf(stderr, "tether-gateway: cert renew: server.crt renewed, "
		    "but not the peer credential: %s (peer.crt and peer.key "
		    "unchanged)\n", err);
		return 1;
	}
	rfc3339_format((int64_t)info.not_after, after);
	printf("renewed %s/peer.crt serial %s not_after %s (new peer.key)\n", dir,
	    info.serial, after);
	printf("send SIGHUP to each gateway serving it (systemctl reload "
	    "tether-gateway) to serve it\n");
	return 0;
}

int
cmd_cert(int argc, char **argv)
{
	if (argc < 2)
		return cert_usage_error("a subcommand is required: renew");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		fputs(cert_usage, stdout);
		return 0;
	}
	if (strcmp(argv[1], "renew") == 0)
		return cert_renew(argc - 1, argv + 1);
	return cert_usage_error("unknown subcommand \"%s\": use renew", argv[1]);
}
