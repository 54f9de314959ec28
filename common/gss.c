/*
 * gss.c: SPNEGO tokens through a GSSAPI loaded at run time (see gss.h).
 * The few types and constants used are GSSAPI's C bindings (RFC 2744),
 * declared here so that the build needs no Kerberos headers either.
 */
#include "gss.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GSSAPI_SONAME "libgssapi_krb5.so.2"

typedef uint32_t OM_uint32;
typedef struct { OM_uint32 length; void *elements; } gss_OID_desc;
typedef struct { size_t length; void *value; } gss_buffer_desc;
typedef void *gss_name_t;
typedef void *gss_ctx_id_t;

#define GSS_S_COMPLETE        0u
#define GSS_S_CONTINUE_NEEDED 1u
#define GSS_ERROR(x)          ((x) & 0xffff0000u)
#define GSS_C_GSS_CODE        1
#define GSS_C_MECH_CODE       2

/* 1.2.840.113554.1.2.1.4: a host-based service name, "service@host". */
static gss_OID_desc nt_hostbased_service = { 10,
    (void *)"\x2a\x86\x48\x86\xf7\x12\x01\x02\x01\x04" };
/* 1.3.6.1.5.5.2: SPNEGO, what HTTP Negotiate carries (RFC 4559). */
static gss_OID_desc spnego = { 6, (void *)"\x2b\x06\x01\x05\x05\x02" };

static struct {
	void *lib;
	OM_uint32 (*import_name)(OM_uint32 *, gss_buffer_desc *, gss_OID_desc *,
	    gss_name_t *);
	OM_uint32 (*init_sec_context)(OM_uint32 *, void *, gss_ctx_id_t *,
	    gss_name_t, gss_OID_desc *, OM_uint32, OM_uint32, void *,
	    gss_buffer_desc *, gss_OID_desc **, gss_buffer_desc *, OM_uint32 *,
	    OM_uint32 *);
	OM_uint32 (*release_buffer)(OM_uint32 *, gss_buffer_desc *);
	OM_uint32 (*release_name)(OM_uint32 *, gss_name_t *);
	OM_uint32 (*delete_sec_context)(OM_uint32 *, gss_ctx_id_t *, gss_buffer_desc *);
	OM_uint32 (*display_status)(OM_uint32 *, OM_uint32, int, gss_OID_desc *,
	    OM_uint32 *, gss_buffer_desc *);
	char error[256];
} api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

struct gss_client {
	gss_name_t target;
	gss_ctx_id_t ctx;
};

#ifdef TETHER_STATIC
/* A static glibc binary cannot load a shared library that needs libc.so. */
static void
load_api(void)
{
	snprintf(api.error, sizeof(api.error), "Negotiate (Kerberos) is not "
	    "available in a static tether-client: GSSAPI (%s) is loaded at run "
	    "time, which a static binary cannot do; use the dynamic build (the "
	    "Debian package) with libgssapi-krb5-2, or NTLM", GSSAPI_SONAME);
}
#else
static void
load_api(void)
{
	struct { const char *name; void **fn; } syms[] = {
		{ "gss_import_name", (void **)&api.import_name },
		{ "gss_init_sec_context", (void **)&api.init_sec_context },
		{ "gss_release_buffer", (void **)&api.release_buffer },
		{ "gss_release_name", (void **)&api.release_name },
		{ "gss_delete_sec_context", (void **)&api.delete_sec_context },
		{ "gss_display_status", (void **)&api.display_status },
	};
	const char *why;

	if ((api.lib = dlopen(GSSAPI_SONAME, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		why = dlerror();
		snprintf(api.error, sizeof(api.error), "Negotiate needs GSSAPI (MIT "
		    "krb5's %s, Debian's libgssapi-krb5-2), which cannot be loaded%s: %s",
		    GSSAPI_SONAME, why != NULL && strstr(why, "static") != NULL ?
		    " in a static binary" : "", why != NULL ? why : "unknown error");
		return;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
		if ((*syms[i].fn = dlsym(api.lib, syms[i].name)) == NULL) {
			snprintf(api.error, sizeof(api.error), "%s has no %s",
			    GSSAPI_SONAME, syms[i].name);
			dlclose(api.lib);
			api.lib = NULL;
			return;
		}
}
#endif

/* GSSAPI's messages for major (and the mechanism's for minor). */
static void
status_text(OM_uint32 major, OM_uint32 minor, char *out, size_t outlen)
{
	size_t o = 0;
	int pass;

	out[0] = '\0';
	for (pass = 0; pass < 2; pass++) {
		OM_uint32 code = pass == 0 ? major : minor, ctx = 0, min, maj;
		gss_buffer_desc msg;

		if (pass == 1 && minor == 0)
			break;
		do {
			maj = api.display_status(&min, code, pass == 0 ? GSS_C_GSS_CODE :
			    GSS_C_MECH_CODE, NULL, &ctx, &msg);
			if (GSS_ERROR(maj))
				break;
			if (o < outlen)
				o += (size_t)snprintf(out + o, outlen - o, "%s%.*s",
				    o > 0 ? ": " : "", (int)msg.length, (const char *)msg.value);
			api.release_buffer(&min, &msg);
		} while (ctx != 0);
	}
}

struct gss_client *
gss_client_new(const char *host, char *err, size_t errlen)
{
	struct gss_client *g;
	char service[300];
	gss_buffer_desc name;
	OM_uint32 major, minor;

	pthread_once(&api_once, load_api);
	if (api.lib == NULL) {
		snprintf(err, errlen, "%s", api.error);
		return NULL;
	}
	if ((g = calloc(1, sizeof(*g))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	snprintf(service, sizeof(service), "HTTP@%s", host);
	name.value = service;
	name.length = strlen(service);
	major = api.import_name(&minor, &name, &nt_hostbased_service, &g->target);
	if (GSS_ERROR(major)) {
		char text[256];

		status_text(major, minor, text, sizeof(text));
		snprintf(err, errlen, "GSSAPI: cannot name %s: %s", service, text);
		free(g);
		return NULL;
	}
	return g;
}

int
gss_client_step(struct gss_client *g, const uint8_t *in, size_t inlen,
    uint8_t **out, size_t *outlen, int *complete, char *err, size_t errlen)
{
	gss_buffer_desc input = { inlen, (void *)in }, output = { 0, NULL };
	OM_uint32 major, minor, min;
	char text[300];

	*out = NULL;
	*outlen = 0;
	*complete = 0;
	major = api.init_sec_context(&minor, NULL, &g->ctx, g->target, &spnego, 0, 0,
	    NULL, in != NULL ? &input : NULL, NULL, &output, NULL, NULL);
	if (GSS_ERROR(major)) {
		status_text(major, minor, text, sizeof(text));
		snprintf(err, errlen, "Kerberos (GSSAPI) cannot make a ticket for the "
		    "proxy: %s (the node's credentials: a keytab in KRB5_CLIENT_KTNAME "
		    "or a credential cache in KRB5CCNAME)", text);
		if (output.value != NULL)
			api.release_buffer(&min, &output);
		return -1;
	}
	*complete = major == GSS_S_COMPLETE;
	if (output.length > 0) {
		if ((*out = malloc(output.length)) == NULL) {
			api.release_buffer(&min, &output);
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		memcpy(*out, output.value, output.length);
		*outlen = output.length;
	}
	if (output.value != NULL)
		api.release_buffer(&min, &output);
	return 0;
}

void
gss_client_free(struct gss_client *g)
{
	OM_uint32 minor;

	if (g == NULL)
		return;
	if (g->ctx != NULL)
		api.delete_sec_context(&minor, &g->ctx, NULL);
	if (g->target != NULL)
		api.release_name(&minor, &g->target);
	free(g);
}
