/* --model resolution: a directory as is, or a Hugging Face repo id looked up in the local
 * hub cache (models--org--name/snapshots/<revision>, preferring refs/main). */
#include <dirent.h>
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

int mlxrt_resolve_model(const char *arg, char *out, size_t out_len, mlxrt_error *err) {
  if (!arg || !*arg) return mx_fail(err, "no model given (use -m DIR or -m org/name)");
  if (is_dir(arg)) {
    snprintf(out, out_len, "%s", arg);
    return 0;
  }
  const char *slash = strchr(arg, '/');
  if (!slash || slash == arg || strchr(slash + 1, '/') || arg[0] == '.' )
    return mx_fail(err, "model '%s': no such directory (and not a Hugging Face repo id org/name)", arg);
  char hub[2048];
  const char *hf_home = getenv("HF_HOME"), *hub_cache = getenv("HF_HUB_CACHE");
  const char *home = getenv("HOME");
  if (hub_cache && *hub_cache) snprintf(hub, sizeof hub, "%s", hub_cache);
  else if (hf_home && *hf_home) snprintf(hub, sizeof hub, "%s/hub", hf_home);
  else snprintf(hub, sizeof hub, "%s/.cache/huggingface/hub", home ? home : ".");
  char repo[1024];
  snprintf(repo, sizeof repo, "%s/models--%.*s--%s", hub, (int)(slash - arg), arg, slash + 1);
  if (!is_dir(repo))
    return mx_fail(err, "model '%s': not a directory, and not in the Hugging Face cache (%s)", arg, repo);
  /* refs/main names the snapshot to use */
  char ref[1200], rev[256] = "";
  snprintf(ref, sizeof ref, "%s/refs/main", repo);
  FILE *f = fopen(ref, "r");
  if (f) {
    if (fgets(rev, sizeof rev, f)) rev[strcspn(rev, "\r\n")] = 0;
    fclose(f);
  }
  char snap[1500];
  if (rev[0]) {
    snprintf(snap, sizeof snap, "%s/snapshots/%s", repo, rev);
    if (is_dir(snap)) {
      snprintf(out, out_len, "%s", snap);
      return 0;
    }
  }
  /* otherwise the only (or the last, by name) snapshot */
  snprintf(snap, sizeof snap, "%s/snapshots", repo);
  DIR *d = opendir(snap);
  if (!d) return mx_fail(err, "model '%s': %s has no snapshots", arg, repo);
  char best[256] = "";
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' && strcmp(e->d_name, best) > 0) snprintf(best, sizeof best, "%s", e->d_name);
  closedir(d);
  if (!best[0]) return mx_fail(err, "model '%s': %s has no snapshots", arg, repo);
  snprintf(out, out_len, "%s/%s", snap, best);
  return 0;
}
