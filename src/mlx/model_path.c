/* --model resolution: a directory as is, or a Hugging Face repo id looked up in the local
 * hub cache (models--org--name/snapshots/<revision>, preferring refs/main). Paths have any
 * length: they are allocated, and only the caller's out buffer can be too small (an error). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "mlxrt.h"

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* printf into a fresh allocation */
static char *fmt_alloc(mlxrt_error *err, const char *fmt, const char *a, const char *b,
                       const char *c) {
  int n = snprintf(NULL, 0, fmt, a, b, c);
  char *p = n >= 0 ? mx_malloc((size_t)n + 1, err) : NULL;
  if (p) snprintf(p, (size_t)n + 1, fmt, a, b, c);
  return p;
}

static int put(char *out, size_t out_len, const char *path, mlxrt_error *err) {
  size_t n = strlen(path);
  if (n >= out_len)
    return mx_fail(err, "model path is %zu bytes, longer than the %zu the caller can hold: %s", n,
                   out_len ? out_len - 1 : 0, path);
  memcpy(out, path, n + 1);
  return 0;
}

/* the snapshot to use: refs/main when it names one, otherwise the last by name */
static char *pick_snapshot(const char *arg, const char *repo, mlxrt_error *err) {
  char *ref = fmt_alloc(err, "%s/refs/main%s%s", repo, "", "");
  if (!ref) return NULL;
  char rev[256] = "";
  size_t len;
  char *text = mx_read_file(ref, &len, err); /* a regular file: a FIFO would block */
  free(ref);
  if (text) {
    snprintf(rev, sizeof rev, "%.*s", (int)strcspn(text, "\r\n"), text);
    free(text);
  }
  if (rev[0] && !strchr(rev, '/')) {
    char *snap = fmt_alloc(err, "%s/snapshots/%s%s", repo, rev, "");
    if (!snap || is_dir(snap)) return snap;
    free(snap);
  }
  char *snaps = fmt_alloc(err, "%s/snapshots%s%s", repo, "", "");
  if (!snaps) return NULL;
  DIR *d = opendir(snaps);
  char *best = NULL;
  for (struct dirent *e; d && (e = readdir(d));)
    if (e->d_name[0] != '.' && (!best || strcmp(e->d_name, best) > 0)) {
      free(best);
      if (!(best = mx_strdup(e->d_name, err))) break;
    }
  if (d) closedir(d);
  char *snap = best ? fmt_alloc(err, "%s/%s%s", snaps, best, "") : NULL;
  if (!best) mx_fail(err, "model '%s': %s has no snapshots", arg, repo);
  free(best);
  free(snaps);
  return snap;
}

int mlxrt_resolve_model(const char *arg, char *out, size_t out_len, mlxrt_error *err) {
  if (!arg || !*arg) return mx_fail(err, "no model given (use -m DIR or -m org/name)");
  struct stat st;
  if (stat(arg, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return mx_fail(err, "model '%s': is not a directory", arg);
    return put(out, out_len, arg, err);
  }
  if (errno != ENOENT) return mx_fail(err, "model '%s': cannot open: %s", arg, strerror(errno));
  const char *slash = strchr(arg, '/');
  if (!slash || slash == arg || strchr(slash + 1, '/') || arg[0] == '.' )
    return mx_fail(err, "model '%s': no such directory (and not a Hugging Face repo id org/name)", arg);
  const char *hf_home = getenv("HF_HOME"), *hub_cache = getenv("HF_HUB_CACHE");
  const char *home = getenv("HOME");
  char *hub;
  if (hub_cache && *hub_cache) hub = mx_strdup(hub_cache, err);
  else if (hf_home && *hf_home) hub = fmt_alloc(err, "%s/hub%s%s", hf_home, "", "");
  else hub = fmt_alloc(err, "%s/.cache/huggingface/hub%s%s", home ? home : ".", "", "");
  if (!hub) return -1;
  char *org = mx_strdup(arg, err);
  if (!org) {
    free(hub);
    return -1;
  }
  org[slash - arg] = 0;
  char *repo = fmt_alloc(err, "%s/models--%s--%s", hub, org, slash + 1);
  free(hub);
  free(org);
  if (!repo) return -1;
  int rc = -1;
  if (!is_dir(repo)) {
    mx_fail(err, "model '%s': not a directory, and not in the Hugging Face cache (%s)", arg, repo);
  } else {
    char *snap = pick_snapshot(arg, repo, err);
    if (snap) rc = put(out, out_len, snap, err);
    free(snap);
  }
  free(repo);
  return rc;
}
