#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"

int mx_open_regular(const char *path, const char *what, struct stat *st, mlxrt_error *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return mx_fail(err, "%s: cannot open: %s", path, strerror(errno));
  if (fstat(fd, st) != 0) {
    int e = errno;
    close(fd);
    return mx_fail(err, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st->st_mode)) {
    close(fd);
    return mx_fail(err, "%s: is %s, expected %s", path,
                   S_ISDIR(st->st_mode) ? "a directory" : "not a regular file",
                   what ? what : "a regular file");
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
    int e = errno;
    close(fd);
    return mx_fail(err, "%s: cannot clear O_NONBLOCK: %s", path, strerror(e));
  }
  return fd;
}

static char *read_fd(int fd, const char *path, size_t *len, mlxrt_error *err) {
  char *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      size_t ncap = cap ? cap * 2 : 65536;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        mx_fail(err, "%s: out of memory reading file", path);
        return NULL;
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t got = read(fd, buf + n, cap - n - 1);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int e = errno;
      free(buf);
      mx_fail(err, "%s: read error: %s", path, strerror(e));
      return NULL;
    }
    if (got == 0) break;
    n += (size_t)got;
  }
  buf[n] = 0;
  if (len) *len = n;
  return buf;
}

char *mx_read_file(const char *path, size_t *len, mlxrt_error *err) {
  struct stat st;
  int fd = mx_open_regular(path, NULL, &st, err);
  if (fd < 0) return NULL;
  /* the small JSON files of a folder (a 31B's index is ~200 KB): a huge or sparse file would
   * only make the load crawl through memory */
  if ((uint64_t)st.st_size > MX_MAX_SMALL_FILE) {
    close(fd);
    mx_fail(err, "%s: is %llu bytes, more than the %llu a JSON file of a model folder may have",
            path, (unsigned long long)st.st_size, (unsigned long long)MX_MAX_SMALL_FILE);
    return NULL;
  }
  char *buf = read_fd(fd, path, len, err);
  close(fd);
  return buf;
}

char *mx_path_join(const char *dir, const char *name, mlxrt_error *err) {
  size_t n = strlen(dir);
  int slash = n > 0 && dir[n - 1] == '/';
  char *p = mx_malloc(n + strlen(name) + 2, err);
  if (p) sprintf(p, "%s%s%s", dir, slash ? "" : "/", name);
  return p;
}
