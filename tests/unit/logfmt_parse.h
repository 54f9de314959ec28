/*
 * logfmt_parse.h: a strict reader of the logfmt lines common/log.c writes
 * (docs/0008), for the unit test and the fuzz target that check each line
 * parses back to exactly the fields that were logged.  Test code only:
 * header-only, static functions.
 *
 * Grammar: FIELD (' ' FIELD)* '\n', FIELD = KEY '=' VALUE, KEY =
 * [A-Za-z0-9_.-]+, VALUE = a bare run of visible ASCII without '"', '=' and
 * '\\', or '"' ... '"' with \" \\ \n \r \t \xNN \uXXXX escapes and, raw,
 * only visible ASCII, space and valid UTF-8 of code points >= U+00A0.
 * Nothing else is accepted, in particular no raw control byte.
 */
#ifndef TETHER_LOGFMT_PARSE_H
#define TETHER_LOGFMT_PARSE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LP_MAX_FIELDS 64
#define LP_MAX_VALUE 8192

struct lp_field {
	char key[80];
	unsigned char val[LP_MAX_VALUE];
	size_t len;
};

static int
lp_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static size_t
lp_put_utf8(unsigned char *o, uint32_t c)
{
	if (c < 0x80) {
		o[0] = (unsigned char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (unsigned char)(0xc0 | (c >> 6));
		o[1] = (unsigned char)(0x80 | (c & 0x3f));
		return 2;
	}
	o[0] = (unsigned char)(0xe0 | (c >> 12));
	o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
	o[2] = (unsigned char)(0x80 | (c & 0x3f));
	return 3;
}

/* Length of a raw multi-byte UTF-8 sequence allowed inside quotes, or 0. */
static size_t
lp_raw_utf8(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t c, min;

	if ((s[0] & 0xe0) == 0xc0)
		len = 2, c = s[0] & 0x1f, min = 0x80;
	else if ((s[0] & 0xf0) == 0xe0)
		len = 3, c = s[0] & 0x0f, min = 0x800;
	else if ((s[0] & 0xf8) == 0xf0)
		len = 4, c = s[0] & 0x07, min = 0x10000;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff) ||
	    c < 0xa0 || c == 0x2028 || c == 0x2029 || c == 0xfeff ||
	    (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069) ||
	    c == 0x200e || c == 0x200f)
		return 0;
	return len;
}

/* A quoted value starting after its '"'; returns bytes consumed (closing
 * quote included) or 0 on a syntax error. */
static size_t
lp_quoted(const unsigned char *s, size_t n, struct lp_field *f)
{
	size_t i = 0;

	f->len = 0;
	while (i < n && s[i] != '"') {
		if (f->len + 4 > LP_MAX_VALUE)
			return 0;
		if (s[i] == '\\') {
			if (i + 1 >= n)
				return 0;
			switch (s[i + 1]) {
			case '"': f->val[f->len++] = '"'; i += 2; continue;
			case '\\': f->val[f->len++] = '\\'; i += 2; continue;
			case 'n': f->val[f->len++] = '\n'; i += 2; continue;
			case 'r': f->val[f->len++] = '\r'; i += 2; continue;
			case 't': f->val[f->len++] = '\t'; i += 2; continue;
			case 'x':
				if (i + 3 >= n || lp_hex((char)s[i + 2]) < 0 ||
				    lp_hex((char)s[i + 3]) < 0)
					return 0;
				f->val[f->len++] = (unsigned char)(lp_hex((char)s[i + 2]) * 16 +
				    lp_hex((char)s[i + 3]));
				i += 4;
				continue;
			case 'u': {
				uint32_t c = 0;

				if (i + 5 >= n)
					return 0;
				for (int k = 2; k < 6; k++) {
					int h = lp_hex((char)s[i + k]);

					if (h < 0)
						return 0;
					c = c * 16 + (uint32_t)h;
				}
				f->len += lp_put_utf8(f->val + f->len, c);
				i += 6;
				continue;
			}
			default:
				return 0;
			}
		}
		if (s[i] >= 0x20 && s[i] < 0x7f) {
			f->val[f->len++] = s[i++];
			continue;
		}
		size_t k = s[i] >= 0x80 ? lp_raw_utf8(s + i, n - i) : 0;

		if (k == 0)
			return 0;
		memcpy(f->val + f->len, s + i, k);
		f->len += k;
		i += k;
	}
	if (i >= n)
		return 0;
	return i + 1;
}

/* Parses one line (with its '\n', nothing after it) into fields; returns
 * their number, or -1 if the line is not exactly the grammar above. */
static int
logfmt_parse(const char *line, size_t n, struct lp_field *fields, int max)
{
	const unsigned char *s = (const unsigned char *)line;
	size_t i = 0;
	int nf = 0;

	if (n == 0 || s[n - 1] != '\n')
		return -1;
	n--;
	while (i < n) {
		struct lp_field *f;
		size_t k = 0;

		if (nf > 0 && s[i++] != ' ')
			return -1;
		if (nf >= max)
			return -1;
		f = &fields[nf++];
		while (i < n && s[i] != '=') {
			char c = (char)s[i];

			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-') ||
			    k + 1 >= sizeof(f->key))
				return -1;
			f->key[k++] = c;
			i++;
		}
		f->key[k] = '\0';
		if (k == 0 || i >= n)
			return -1;
		i++; /* '=' */
		if (i < n && s[i] == '"') {
			size_t used = lp_quoted(s + i + 1, n - i - 1, f);

			if (used == 0)
				return -1;
			i += 1 + used;
			if (i < n && s[i] != ' ')
				return -1;
			continue;
		}
		f->len = 0;
		while (i < n && s[i] != ' ') {
			if (s[i] <= 0x20 || s[i] >= 0x7f || s[i] == '"' || s[i] == '=' ||
			    s[i] == '\\' || f->len >= LP_MAX_VALUE)
				return -1;
			f->val[f->len++] = s[i++];
		}
		if (f->len == 0)
			return -1;
	}
	return nf;
}

#endif
