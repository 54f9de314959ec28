/*
 * cacmd.c: `tether-gateway ca rotate ...` (see cacmd.h): the data
 * directory's files of a CA rotation (auth/carotate.h), for running
 * gateways to pick up on SIGHUP.
 */
#include "cacmd.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carotate.h"
#include "joindoc.h"

static const char ca_usage[] =
"usage: tether-gateway ca rotate start  --data-dir DIR\n"
"       tether-gateway ca rotate finish --data-dir DIR\n"
"       tether-gateway ca rotate status --data-dir DIR\n"
"\n"
"Replaces the gateway's CA without joining any node again.  Run start and\n"
"finish where ca.key is (the data directory init made); serving replicas\n"
"need only the certificates.\n"
"\n"
"start   makes a new CA (ca.next.crt, ca.next.key) and a cross-certificate\n"
"        (ca.cross.crt: the new CA, signed by the current one), and issues\n"
"        server.crt (same key and names) and a new peer.key + peer.crt from\n"
"        the new CA, each file holding the cross-certificate after the\n"
"        certificate.  The overlap begins: clients trusting either CA verify\n"
"        the gateway.  After SIGHUP a gateway sends every connected agent the\n"
"        new CA (SETTINGS), signed by the CA the agent pinned; the agent keeps\n"
"        it beside its own and says so.  Kubeconfigs and join documents are\n"
"        issued for the new CA from then on; old kubeconfigs keep working.\n"
"\n"
"finish  ends the overlap: ca.crt and ca.key become the new CA (the old\n"
"        certificate is kept as ca.old.crt), server.crt and peer.crt lose the\n"
"        cross-certificate.  After SIGHUP, clients and agents that trust only\n"
"        the old CA are refused; agents that followed make the new CA their\n"
"        only one.  Finish when 'tetherctl ca status' shows every agent (or\n"
"        enough) holds the new CA.  An agent offline during the whole overlap\n"
"        must join again with a new join document.\n"
"\n"
"status  the phase (none, overlap, final) and the CAs' checksums, from DIR.\n"
"        Which agents hold the new CA: 'tetherctl ca status' and\n"
"        'tetherctl agent list -o json' (\"cas\").\n"
"\n"
"Replicas: after start and after finish, copy ca.crt, ca.next.crt,\n"
"ca.cross.crt, ca.old.crt (those there are), server.crt, peer.crt and\n"
"peer.key to every replica's data directory (remove ca.next.crt and\n"
"ca.cross.crt there after finish), then SIGHUP each (docs/operations.md).\n"
"\n"
"Exit 0 done, 1 failed (a start or finish cut short is run again), 2 bad\n"
"usage.\n"
"\n"
"Example:\n"
"  tether-gateway ca rotate start --data-dir /var/lib/tether && systemctl reload tether-gateway\n"
"  tetherctl ca status\n"
"  tether-gateway ca rotate finish --data-dir /var/lib/tether && systemctl reload tether-gateway\n";

static int __attribute__((format(printf, 1, 2)))
ca_usage_error(const char *fmt, ...);

static int
ca_usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tether-gateway: ca: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nRun 'tether-gateway ca --help' for usage.\n");
	return 2;
}

/* The phase and checksums, one "key value" a line. */
static void
print_rotation(const struct ca_rotation *r)
{
	char after[32];

	printf("phase %s\n", ca_phase_name(r->phase));
	printf("ca %s\n", r->current_checksum);
	if (r->phase == CA_PHASE_NONE)
		return;
	rfc3339_format((int64_t)r->next_not_after, after);
	printf("new_ca %s\n", r->next_checksum);
	printf("new_ca_not_after %s\n", after);
	if (r->phase == CA_PHASE_FINAL)
		printf("old_ca %s\n", r->old_checksum);
}

static int
rotate(const char *what, const char *dir)
{
	struct ca_rotation *r = calloc(1, sizeof(*r));
	char err[700];
	int rc = 1;

	if (r == NULL) {
		fprintf(stderr, "tether-gateway: ca rotate: out of memory\n");
		return 1;
	}
	if (strcmp(what, "start") == 0) {
		if (ca_rotate_start(dir, r, err, sizeof(err)) != 0) {
			fprintf(stderr, "tether-gateway: ca rotate start: %s (no "
			    "rotation started; run it again)\n", err);
			goto out;
		}
		printf("started the CA rotation in %s: new CA in ca.next.crt, "
		    "server.crt and peer.crt issued by it\n", dir);
	} else if (strcmp(what, "finish") == 0) {
		if (ca_rotate_finish(dir, r, err, sizeof(err)) != 0) {
			fprintf(stderr, "tether-gateway: ca rotate finish: %s (run "
			    "it again once fixed)\n", err);
			goto out;
		}
		printf("finished the CA rotation in %s: ca.crt is the new CA, the "
		    "old one kept as ca.old.crt\n", dir);
	} else if (ca_rotation_read(dir, r, err, sizeof(err)) != 0) {
		fprintf(stderr, "tether-gateway: ca rotate status: %s\n", err);
		goto out;
	}
	print_rotation(r);
	if (strcmp(what, "status") != 0)
		printf("copy the files to every replica and send each SIGHUP "
		    "(systemctl reload tether-gateway)\n");
	rc = 0;
out:
	free(r);
	return rc;
}

static int
ca_rotate(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "data-dir", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dir = NULL, *what;
	int c;

	if (argc < 2)
		return ca_usage_error("rotate: start, finish or status is required");
	what = argv[1];
	if (strcmp(what, "--help") == 0 || strcmp(what, "-h") == 0) {
		fputs(ca_usage, stdout);
		return 0;
	}
	if (strcmp(what, "start") != 0 && strcmp(what, "finish") != 0 &&
	    strcmp(what, "status") != 0)
		return ca_usage_error("rotate: unknown step \"%s\": use start, "
		    "finish or status", what);
	argc--;
	argv++;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'h': fputs(ca_usage, stdout); return 0;
		default: return ca_usage_error("rotate %s: unknown flag", what);
		}
	}
	if (optind != argc)
		return ca_usage_error("rotate %s: unexpected argument \"%s\"", what,
		    argv[optind]);
	if (dir == NULL)
		return ca_usage_error("rotate %s: --data-dir DIR is required", what);
	return rotate(what, dir);
}

int
cmd_ca(int argc, char **argv)
{
	if (argc < 2)
		return ca_usage_error("a subcommand is required: rotate");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		fputs(ca_usage, stdout);
		return 0;
	}
	if (strcmp(argv[1], "rotate") == 0)
		return ca_rotate(argc - 1, argv + 1);
	return ca_usage_error("unknown subcommand \"%s\": use rotate", argv[1]);
}
