/*
 * fileio.h: whole-file reads with a size limit, and atomic, durable writes.
 *
 * Credentials and state are written to a temporary file in the same
 * directory, fsynced, renamed over the target, and the directory fsynced, so
 * a crash leaves either the old file or the new one, never half of either.
 */
#ifndef TETHER_FILEIO_H
#define TETHER_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Writes len bytes to path atomically with the given mode (0600 for secrets).
 * Returns 0, or -1 with a reason in err; on failure path is unchanged.
 */
int file_write_atomic(const char *path, const void *data, size_t len,
    mode_t mode, char *err, size_t errlen);

/*
 * Reads the whole file into a fresh NUL-terminated buffer (*out, caller
 * frees).  Refuses files larger than max bytes.  Returns 0, or -1 with a
 * reason in err (and *out NULL).
 */
int file_read_all(const char *path, size_t max, char **out, size_t *outlen,
    char *err, size_t errlen);

/*
 * Reads the first line of a secret file (a proxy password): at most max
 * bytes, owned by this process's user or root and readable by no one else
 * (no group or other permission bits), else refused with the mode in err.
 * Returns 0 with *out a fresh NUL-terminated line (the caller wipes it with
 * OPENSSL_cleanse and frees it), or -1 with a reason in err.
 */
int file_read_private(const char *path, size_t max, char **out, char *err,
    size_t errlen);

/*
 * Removes what file_write_atomic leaves behind when its process dies between
 * creating the temporary file and renaming it: entries of dir named
 * "NAME.tmp.XXXXXX".  Only a process that owns dir, with no writer of its
 * own running, may call it.  Returns how many it removed, or -1 if dir
 * cannot be read.
 */
int file_sweep_temps(const char *dir);

/*
 * Renames from over to (same directory) and fsyncs the directory: after a
 * crash either name holds the file, never neither.  Returns 0, or -1 with
 * a reason in err.
 */
int file_rename_durable(const char *from, const char *to, char *err,
    size_t errlen);

/* Creates dir (one level) with mode if missing.  Returns 0 or -1 with err. */
int dir_ensure(const char *dir, mode_t mode, char *err, size_t errlen);

/* 1 if path exists, 0 if not. */
int file_exists(const char *path);

#endif
