/* The model's own chat template, read and parsed when the model loads.
 *
 * Where it comes from (the first that exists): the folder's chat_template.jinja, else
 * tokenizer_config.json's "chat_template" — a string, or a list of {"name", "template"} objects
 * whose "default" is the template (the others stay available by name). No template is fine: the
 * built-in C renderers (chat_template.h) take over. The template is untrusted input: it is parsed
 * at load, so a broken one fails the load with a message naming its file.
 *
 * Template variables of the folder: tokenizer_config.json's top-level "*_token" members
 * (bos_token, eos_token, ...), strings or {"content": string} objects, as transformers passes
 * its special tokens to the template. */
#ifndef MLXRT_MLX_CHAT_TEMPLATE_LOAD_H
#define MLXRT_MLX_CHAT_TEMPLATE_LOAD_H

#include <stddef.h>

#include "mlxrt.h"

struct mx_jinja;

typedef struct mx_chat_var {
  char *name, *value;
} mx_chat_var;

typedef struct mx_chat_templates {
  struct mx_jinja *main; /* the template; NULL: none (the built-in renderer) */
  char *origin;          /* the file main came from; NULL without one */
  size_t n_named;
  char **names;          /* the other templates of a tokenizer_config.json list */
  struct mx_jinja **named;
  size_t n_vars;
  mx_chat_var *vars;     /* bos_token, eos_token, ... */
} mx_chat_templates;

/* Fills *t (zeroed first) from the folder DIR. Returns 0, or -1 with a message naming the file
 * (unreadable file, invalid JSON, a "chat_template" of the wrong type, a template that does not
 * parse). On failure *t holds nothing to free. */
int mx_chat_templates_load(const char *dir, mx_chat_templates *t, mlxrt_error *err);
void mx_chat_templates_free(mx_chat_templates *t);

/* The named template of a tokenizer_config.json list ("default" is main); NULL when absent. */
const struct mx_jinja *mx_chat_templates_find(const mx_chat_templates *t, const char *name);
/* The value of a template variable; NULL when absent. */
const char *mx_chat_templates_var(const mx_chat_templates *t, const char *name);
/* Sets (adds or replaces) a template variable. */
int mx_chat_templates_set_var(mx_chat_templates *t, const char *name, const char *value,
                              mlxrt_error *err);

#endif
