#include "cli_file.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_num.h"

static const char *kind_of(mode_t m) {
  return S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* Reads fd to its end, at most CLI_TEXT_LIMIT bytes; -1 with errno (EFBIG past the limit). */
static char *read_all(int fd, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (n + 1 >= cap) {
      char *nb = cap > CLI_TEXT_LIMIT ? NULL : realloc(buf, cap *= 2);
      if (!nb) {
        if (cap > CLI_TEXT_LIMIT) errno = EFBIG;
        break;
      }
      buf = nb;
    }
    ssize_t got = read(fd, buf + n, cap - n - 1);
    if (got > 0) {
      n += (size_t)got;
      if (n > CLI_TEXT_LIMIT) {
        errno = EFBIG;
        break;
      }
    } else if (got == 0) {
      buf[n] = 0;
      *len = n;
      return buf;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) { /* a non-blocking standard input */
      struct pollfd p = {fd, POLLIN, 0};
      poll(&p, 1, -1);
    } else if (errno != EINTR) break;
  }
  int e = buf ? errno : ENOMEM;
  free(buf);
  errno = e;
  return NULL;
}

char *cli_read_text(const char *cmd, const char *path, size_t *len) {
  int is_stdin = !strcmp(path, "-");
  const char *name = is_stdin ? "standard input" : path;
  int fd = is_stdin ? 0 : open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    cli_error(cmd, "cannot read '%s': %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  char *text = NULL;
  size_t n = 0;
  if (fstat(fd, &st)) cli_error(cmd, "cannot read '%s': %s", name, strerror(errno));
  else if (S_ISDIR(st.st_mode)) cli_error(cmd, "'%s' is a directory, not a text file", name);
  else if (!is_stdin && !S_ISREG(st.st_mode))
    cli_error(cmd, "'%s' is not a regular file (it is %s)", name, kind_of(st.st_mode));
  else if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > CLI_TEXT_LIMIT)
    cli_error(cmd, "'%s' has %lld bytes, more than the %zu MiB a text file may have", name,
              (long long)st.st_size, CLI_TEXT_LIMIT >> 20);
  else if (!(text = read_all(fd, &n))) {
    if (errno == EFBIG)
      cli_error(cmd, "'%s' has more than the %zu MiB a text file may have", name, CLI_TEXT_LIMIT >> 20);
    else cli_error(cmd, "cannot read '%s': %s", name, strerror(errno));
  } else {
    const char *nul = memchr(text, 0, n);
    if (nul) {
      cli_error(cmd, "'%s' has a NUL byte at offset %zu: a prompt must be text", name, (size_t)(nul - text));
      free(text);
      text = NULL;
    }
  }
  if (!is_stdin) close(fd);
  if (text && len) *len = n;
  return text;
}
