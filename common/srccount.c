/*
 * srccount.c: a count per source address (see srccount.h): a hash table
 * of 1024 chained buckets, one small entry per source holding something,
 * freed when its count falls back to 0 (memory follows the live sources).
 */
#include "srccount.h"

#include <stdlib.h>
#include <string.h>

#define SRC_BUCKETS 1024
#define SRC_KEY_MAX 64

struct src_entry {
	struct src_entry *next;
	uint32_t n;
	char key[SRC_KEY_MAX];
};

struct srccount {
	struct src_entry *b[SRC_BUCKETS];
	size_t sources;
};

/* The address part of peer into key (a port after the last ':' dropped,
 * unless the address is a bare IPv6 literal). */
static void
src_key(const char *peer, char key[SRC_KEY_MAX])
{
	size_t len = strnlen(peer, SRC_KEY_MAX - 1);
	const char *colon = memchr(peer, ':', len);
	const char *last = NULL;

	for (size_t i = 0; i < len; i++)
		if (peer[i] == ':')
			last = peer + i;
	if (peer[0] == '[') {
		const char *close = memchr(peer, ']', len);

		if (close != NULL)
			len = (size_t)(close - peer) + 1;
	} else if (colon != NULL && colon == last) {
		len = (size_t)(colon - peer);       /* IPv4 "a.b.c.d:port" */
	}
	memcpy(key, peer, len);
	key[len] = '\0';
}

/* FNV-1a over the key. */
static size_t
src_hash(const char *key)
{
	uint32_t h = 2166136261u;

	for (; *key != '\0'; key++)
		h = (h ^ (uint8_t)*key) * 16777619u;
	return h % SRC_BUCKETS;
}

static struct src_entry **
src_find(const struct srccount *t, const char *key)
{
	struct src_entry *const *p = &t->b[src_hash(key)];

	while (*p != NULL && strcmp((*p)->key, key) != 0)
		p = &(*p)->next;
	return (struct src_entry **)p;
}

struct srccount *
srccount_new(void)
{
	return calloc(1, sizeof(struct srccount));
}

void
srccount_free(struct srccount *t)
{
	if (t == NULL)
		return;
	for (size_t i = 0; i < SRC_BUCKETS; i++) {
		while (t->b[i] != NULL) {
			struct src_entry *e = t->b[i];

			t->b[i] = e->next;
			free(e);
		}
	}
	free(t);
}

uint32_t
srccount_get(const struct srccount *t, const char *peer)
{
	char key[SRC_KEY_MAX];
	struct src_entry **p;

	src_key(peer, key);
	p = src_find(t, key);
	return *p != NULL ? (*p)->n : 0;
}

int
srccount_take(struct srccount *t, const char *peer, uint32_t cap)
{
	char key[SRC_KEY_MAX];
	struct src_entry **p;

	src_key(peer, key);
	p = src_find(t, key);
	if (*p != NULL) {
		if ((*p)->n >= cap)
			return -1;
		(*p)->n++;
		return 0;
	}
	if (cap == 0 || (*p = calloc(1, sizeof(**p))) == NULL)
		return -1;
	memcpy((*p)->key, key, sizeof(key));
	(*p)->n = 1;
	t->sources++;
	return 0;
}

void
srccount_put(struct srccount *t, const char *peer)
{
	char key[SRC_KEY_MAX];
	struct src_entry **p, *e;

	src_key(peer, key);
	p = src_find(t, key);
	if ((e = *p) == NULL)
		return;
	if (--e->n > 0)
		return;
	*p = e->next;
	free(e);
	t->sources--;
}

size_t
srccount_sources(const struct srccount *t)
{
	return t->sources;
}
