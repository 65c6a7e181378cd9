/* Reading the model folder's chat template and its token variables (chat_template_load.h). */
#include "mlx/chat_template_load.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/file.h"
#include "mlx/jinja.h"
#include "mlx/json_doc.h"

/* 1 when DIR/name does not exist (anything else, even an unreadable entry, is read and judged). */
static int absent(const char *path) {
  struct stat st;
  return stat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR);
}

/* Parses a template; the message names `origin` (the interpreter's own "NAME:LINE:COL" form). */
static mx_jinja *parse_named(const char *src, size_t len, const char *origin, mlxrt_error *err) {
  mx_jinja *j = mx_jinja_parse(src, len, origin, err);
  if (!j && err && !strstr(err->msg, origin)) mx_prefix(err, "%s", origin);
  return j;
}

static int add_named(mx_chat_templates *t, const char *name, mx_jinja *j, mlxrt_error *err) {
  char **names = realloc(t->names, (t->n_named + 1) * sizeof *names);
  if (names) t->names = names;
  mx_jinja **named = names ? realloc(t->named, (t->n_named + 1) * sizeof *named) : NULL;
  if (named) t->named = named;
  char *copy = named ? strdup(name) : NULL;
  if (!copy) {
    mx_jinja_free(j);
    return mx_fail(err, "out of memory for the chat templates");
  }
  t->names[t->n_named] = copy;
  t->named[t->n_named++] = j;
  return 0;
}

/* "chat_template": a string, or a list of {"name", "template"} objects. */
static int load_config_templates(const jd_value *ct, const char *path, mx_chat_templates *t,
                                 mlxrt_error *err) {
  char origin[4200];
  if (jd_is(ct, JD_STRING)) {
    snprintf(origin, sizeof origin, "%s (chat_template)", path);
    if (!(t->main = parse_named(ct->str, ct->str_len, origin, err))) return -1;
    return (t->origin = mx_strdup(path, err)) ? 0 : -1;
  }
  if (!jd_is(ct, JD_ARRAY))
    return mx_fail(err, "%s: \"chat_template\" must be a string or a list of {\"name\", \"template\"} "
                   "objects", path);
  size_t i = 0;
  for (const jd_value *e = ct->child; e; e = e->next, i++) {
    const jd_value *name = jd_get(e, "name"), *text = jd_get(e, "template");
    if (!jd_is(name, JD_STRING) || !jd_is(text, JD_STRING) || strlen(name->str) != name->str_len)
      return mx_fail(err, "%s: chat_template[%zu] must be an object with string \"name\" and "
                     "\"template\"", path, i);
    int is_default = !strcmp(name->str, "default");
    if (is_default ? t->main != NULL : mx_chat_templates_find(t, name->str) != NULL)
      return mx_fail(err, "%s: chat_template[%zu]: a second template named \"%.64s\"", path, i,
                     name->str);
    snprintf(origin, sizeof origin, "%s (chat_template \"%.64s\")", path, name->str);
    mx_jinja *j = parse_named(text->str, text->str_len, origin, err);
    if (!j) return -1;
    if (is_default) t->main = j;
    else if (add_named(t, name->str, j, err)) return -1;
  }
  if (t->main && !(t->origin = mx_strdup(path, err))) return -1;
  return 0;
}

/* Top-level "*_token" members: a string, or an object with a string "content". */
static int load_vars(const jd_value *root, mx_chat_templates *t, mlxrt_error *err) {
  static const char SUFFIX[] = "_token";
  const size_t sl = sizeof SUFFIX - 1;
  for (const jd_value *m = root->child; m; m = m->next) {
    if (m->key_len <= sl || strcmp(m->key + m->key_len - sl, SUFFIX) || strlen(m->key) != m->key_len)
      continue;
    const jd_value *v = jd_is(m, JD_OBJECT) ? jd_get(m, "content") : m;
    if (!jd_is(v, JD_STRING) || strlen(v->str) != v->str_len) continue; /* null, AddedToken, ... */
    if (mx_chat_templates_set_var(t, m->key, v->str, err)) return -1;
  }
  return 0;
}

static int load_config(const char *dir, int want_template, mx_chat_templates *t, mlxrt_error *err) {
  char *path = mx_path_join(dir, "tokenizer_config.json", err);
  if (!path) return -1;
  int rc = -1;
  char *text = NULL;
  jd_doc *doc = NULL;
  if (absent(path)) {
    rc = 0;
    goto out;
  }
  size_t len, off = 0;
  const char *what = NULL;
  if (!(text = mx_read_file(path, &len, err))) goto out;
  if (!(doc = jd_parse(text, len, &off, &what))) {
    mx_fail(err, "%s: invalid JSON at byte %zu: %s", path, off, what ? what : "?");
    goto out;
  }
  const jd_value *root = jd_root(doc);
  if (!jd_is(root, JD_OBJECT)) {
    mx_fail(err, "%s: expected a JSON object", path);
    goto out;
  }
  if (load_vars(root, t, err)) goto out;
  const jd_value *ct = jd_get(root, "chat_template");
  if (want_template && ct && !jd_is(ct, JD_NULL) && load_config_templates(ct, path, t, err)) goto out;
  rc = 0;
out:
  jd_free(doc);
  free(text);
  free(path);
  return rc;
}

int mx_chat_templates_load(const char *dir, mx_chat_templates *t, mlxrt_error *err) {
  memset(t, 0, sizeof *t);
  char *path = mx_path_join(dir, "chat_template.jinja", err);
  if (!path) return -1;
  int have_file = !absent(path);
  if (have_file) {
    size_t len;
    char *text = mx_read_file(path, &len, err);
    if (text) t->main = parse_named(text, len, path, err);
    free(text);
    if (!t->main) {
      free(path);
      return -1;
    }
    t->origin = path;
  } else {
    free(path);
  }
  if (load_config(dir, !have_file, t, err)) {
    mx_chat_templates_free(t);
    return -1;
  }
  return 0;
}

void mx_chat_templates_free(mx_chat_templates *t) {
  if (!t) return;
  mx_jinja_free(t->main);
  free(t->origin);
  for (size_t i = 0; i < t->n_named; i++) {
    mx_jinja_free(t->named[i]);
    free(t->names[i]);
  }
  free(t->named);
  free(t->names);
  for (size_t i = 0; i < t->n_vars; i++) {
    free(t->vars[i].name);
    free(t->vars[i].value);
  }
  free(t->vars);
  memset(t, 0, sizeof *t);
}

const mx_jinja *mx_chat_templates_find(const mx_chat_templates *t, const char *name) {
  if (!strcmp(name, "default")) return t->main;
  for (size_t i = 0; i < t->n_named; i++)
    if (!strcmp(t->names[i], name)) return t->named[i];
  return NULL;
}

const char *mx_chat_templates_var(const mx_chat_templates *t, const char *name) {
  for (size_t i = 0; i < t->n_vars; i++)
    if (!strcmp(t->vars[i].name, name)) return t->vars[i].value;
  return NULL;
}

int mx_chat_templates_set_var(mx_chat_templates *t, const char *name, const char *value,
                              mlxrt_error *err) {
  char *v = mx_strdup(value, err);
  if (!v) return -1;
  for (size_t i = 0; i < t->n_vars; i++)
    if (!strcmp(t->vars[i].name, name)) {
      free(t->vars[i].value);
      t->vars[i].value = v;
      return 0;
    }
  mx_chat_var *vars = realloc(t->vars, (t->n_vars + 1) * sizeof *vars);
  char *n = vars ? mx_strdup(name, err) : NULL;
  if (vars) t->vars = vars;
  if (!n) {
    free(v);
    return vars ? -1 : mx_fail(err, "out of memory for the template variables");
  }
  t->vars[t->n_vars].name = n;
  t->vars[t->n_vars++].value = v;
  return 0;
}
