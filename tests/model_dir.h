/* A tiny fixture checkpoint (token ids only) made into a model folder with a tokenizer, for the
 * tests of calls that need one (generation reports text per token). After test_util.h. */
#ifndef MLXRT_TESTS_MODEL_DIR_H
#define MLXRT_TESTS_MODEL_DIR_H

#include <cjson/cJSON.h>
#include <dirent.h>
#include <unistd.h>

#include "base/file.h"

/* A fixture checkpoint's files (model_dir) linked into dir (a mkdtemp template), with the
 * tokenizer file plus plain added tokens for ids 345..383: every id of the fixtures' vocabulary
 * of 384 has a text. */
static int make_model_dir(char *dir, const char *model_dir, const char *tokenizer) {
  if (!mkdtemp(dir)) return -1;
  DIR *d = opendir(model_dir);
  if (!d) return -1;
  struct dirent *e;
  char a[1024], b[1024];
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(a, sizeof a, "%s/%s", model_dir, e->d_name);
      snprintf(b, sizeof b, "%s/%s", dir, e->d_name);
      if (symlink(a, b)) return -1;
    }
  closedir(d);
  char *text = mx_read_file(tokenizer, NULL, NULL);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  free(text);
  cJSON *added = j ? cJSON_GetObjectItem(j, "added_tokens") : NULL;
  if (!added) return -1;
  for (int id = 345; id < 384; id++) {
    char name[16];
    snprintf(name, sizeof name, "<x%d>", id);
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "id", id);
    cJSON_AddStringToObject(t, "content", name);
    cJSON_AddBoolToObject(t, "single_word", 0);
    cJSON_AddBoolToObject(t, "lstrip", 0);
    cJSON_AddBoolToObject(t, "rstrip", 0);
    cJSON_AddBoolToObject(t, "normalized", 0);
    cJSON_AddBoolToObject(t, "special", 0);
    cJSON_AddItemToArray(added, t);
  }
  char *out = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  snprintf(b, sizeof b, "%s/tokenizer.json", dir);
  FILE *f = fopen(b, "wb");
  int ok = f && out && fputs(out, f) >= 0;
  if (f) fclose(f);
  free(out);
  return ok ? 0 : -1;
}

static void remove_model_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[1024];
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  if (d) closedir(d);
  rmdir(dir);
}

#endif
