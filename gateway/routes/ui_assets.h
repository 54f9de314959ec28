/*
 * ui_assets.h: the status page's files, embedded at build time
 * (gateway/routes/ui/embed.cmake writes ui_assets.c from gateway/routes/ui/).
 */
#ifndef TETHER_UI_ASSETS_H
#define TETHER_UI_ASSETS_H

#include <stddef.h>

struct ui_file {
	const char *name;            /* "index.html", "ui.css", "ui.js" */
	const unsigned char *data;
	size_t len;
};

extern const struct ui_file ui_files[];
extern const size_t ui_nfiles;

#endif
