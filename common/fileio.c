/* fileio.c: bounded reads and atomic durable writes (see fileio.h). */
#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int
fsync_parent(const char *path)
{
	char copy[4096];
	int fd, r;

	if (snprintf(copy, sizeof(copy), "%s", path) >= (int)sizeof(copy))
		return -1;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
	if (fd == -1)
		return -1;
	r = fsync(fd);
	close(fd);
	return r;
}

int
file_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
    char *err, size_t errlen)
{
	char tmp[4096];
	const unsigned char *p = data;
	int fd;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp)) {
		snprintf(err, errlen, "%s: path too long", path);
		return -1;
	}
	fd = mkstemp(tmp);
	if (fd == -1) {
		snprintf(err, errlen, "create temporary file for %s: %s", path,
		    strerror(errno));
		return -1;
	}
	if (fchmod(fd, mode) == -1) {
		snprintf(err, errlen, "chmod %s: %s", tmp, strerror(errno));
		goto fail;
	}
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			snprintf(err, errlen, "write %s: %s", tmp, strerror(errno));
			goto fail;
		}
		p += n;
		len -= (size_t)n;
	}
	if (fsync(fd) == -1) {
		snprintf(err, errlen, "fsync %s: %s", tmp, strerror(errno));
		goto fail;
	}
	if (close(fd) == -1) {
		fd = -1;
		snprintf(err, errlen, "close %s: %s", tmp, strerror(errno));
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) == -1) {
		snprintf(err, errlen, "rename %s to %s: %s", tmp, path, strerror(errno));
		goto fail;
	}
	if (fsync_parent(path) == -1) {
		snprintf(err, errlen, "fsync directory of %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
fail:
	if (fd != -1)
		close(fd);
	unlink(tmp);
	return -1;
}

int
file_read_all(const char *path, size_t max, char **out, size_t *outlen,
    char *err, size_t errlen)
{
	FILE *f;
	char *buf = NULL;
	size_t len = 0;
	struct stat st;

	*out = NULL;
	f = fopen(path, "rb");
	if (f == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(f), &st) == -1 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		goto fail;
	}
	if ((size_t)st.st_size > max) {
		snprintf(err, errlen, "%s: larger than %zu bytes", path, max);
		goto fail;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto fail;
	}
	len = fread(buf, 1, (size_t)st.st_size, f);
	if (ferror(f)) {
		snprintf(err, errlen, "read %s: %s", path, strerror(errno));
		goto fail;
	}
	buf[len] = '\0';
	fclose(f);
	*out = buf;
	if (outlen != NULL)
		*outlen = len;
	return 0;
fail:
	free(buf);
	fclose(f);
	return -1;
}

/* "NAME.tmp.XXXXXX", mkstemp's six characters at the end. */
static int
is_atomic_temp(const char *name)
{
	size_t n = strlen(name);

	return n > 11 && memcmp(name + n - 11, ".tmp.", 5) == 0 &&
	    strchr(name + n - 6, '.') == NULL && strchr(name + n - 6, '/') == NULL;
}

int
file_read_private(const char *path, size_t max, char **out, char *err, size_t errlen)
{
	struct stat st;
	size_t len;
	char *buf;
	int fd;

	*out = NULL;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		goto fail;
	}
	if ((st.st_mode & 077) != 0 || (st.st_uid != geteuid() && st.st_uid != 0)) {
		snprintf(err, errlen, "%s is readable by others than its owner, or owned by "
		    "another user (mode %04o, owner uid %u): make it owned by this user "
		    "(or root) with mode 0600, then change the secret it held", path,
		    (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
		goto fail;
	}
	if ((size_t)st.st_size > max) {
		snprintf(err, errlen, "%s: larger than %zu bytes", path, max);
		goto fail;
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto fail;
	}
	len = 0;
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	close(fd);
	*out = buf;
	return 0;
fail:
	close(fd);
	return -1;
}

int
file_sweep_temps(const char *dir)
{
	char path[4096];
	struct dirent *e;
	DIR *d = opendir(dir);
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (!is_atomic_temp(e->d_name))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) <
		    (int)sizeof(path) && unlink(path) == 0)
			n++;
	}
	closedir(d);
	return n;
}

int
dir_ensure(const char *dir, mode_t mode, char *err, size_t errlen)
{
	struct stat st;

	if (mkdir(dir, mode) == 0)
		return 0;
	if (errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
		return 0;
	snprintf(err, errlen, "mkdir %s: %s", dir, strerror(errno));
	return -1;
}

int
file_exists(const char *path)
{
	return access(path, F_OK) == 0;
}

int
file_rename_durable(const char *from, const char *to, char *err, size_t errlen)
{
	if (rename(from, to) == -1) {
		snprintf(err, errlen, "rename %s to %s: %s", from, to, strerror(errno));
		return -1;
	}
	if (fsync_parent(to) == -1) {
		snprintf(err, errlen, "fsync directory of %s: %s", to, strerror(errno));
		return -1;
	}
	return 0;
}
