/*
 * gwlist.c: the gateway URLs an agent dials (see gwlist.h).
 */
#include "gwlist.h"

#include <stdlib.h>
#include <string.h>

static bool
in_list(char *const *list, size_t n, const char *url)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(list[i], url) == 0)
			return true;
	return false;
}

static void
free_all(char **list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(list[i]);
}

int
gwlist_set(struct gwlist *l, const char *const *pushed, size_t npushed,
    const char *join)
{
	char *url[GWLIST_MAX], *join_copy;
	size_t n = 0, np, cur = 0;

	if (npushed > FRAME_MAX_URLS || join == NULL || join[0] == '\0')
		return -1;
	for (size_t i = 0; i < npushed; i++) {
		if (in_list(url, n, pushed[i]))
			continue;
		if ((url[n] = strdup(pushed[i])) == NULL)
			goto fail;
		n++;
	}
	np = n;
	if (!in_list(url, n, join)) {
		if ((url[n] = strdup(join)) == NULL)
			goto fail;
		n++;
	}
	if ((join_copy = strdup(join)) == NULL)
		goto fail;
	/* The URL in use stays in use: a new list does not move a tunnel. */
	for (size_t i = 0; l->n > 0 && i < n; i++)
		if (strcmp(url[i], gwlist_current(l)) == 0)
			cur = i;
	gwlist_clear(l);
	memcpy(l->url, url, n * sizeof(url[0]));
	l->n = n;
	l->npushed = np;
	l->cur = cur;
	l->join = join_copy;
	return 0;
fail:
	free_all(url, n);
	return -1;
}

void
gwlist_clear(struct gwlist *l)
{
	free_all(l->url, l->n);
	free(l->join);
	memset(l, 0, sizeof(*l));
}

const char *
gwlist_current(const struct gwlist *l)
{
	return l->n > 0 ? l->url[l->cur] : "";
}

void
gwlist_next(struct gwlist *l)
{
	if (l->n > 0)
		l->cur = (l->cur + 1) % l->n;
}

bool
gwlist_same_pushed(const struct gwlist *l, const char *const *urls, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		bool dup = false;

		for (size_t j = 0; j < i && !dup; j++)
			dup = strcmp(urls[j], urls[i]) == 0;
		if (dup)
			continue;
		if (k >= l->npushed || strcmp(l->url[k], urls[i]) != 0)
			return false;
		k++;
	}
	return k == l->npushed;
}
