/* Rendering a conversation into the prompt text: the chat template (Jinja) when there is one,
 * else the built-in C renderer of the family (chat_template.h).
 *
 * The template sees what transformers' apply_chat_template gives it: messages (the JSON as given,
 * with a message's reasoning copied under "thinking" and "reasoning_content" as transformers
 * aliases it), tools (null when none), documents (null), add_generation_prompt, enable_thinking,
 * the folder's *_token strings (bos_token, eos_token, ...), and strftime_now(format) at the
 * current time. The caller's JSON text goes to the template untouched (numbers keep their
 * spelling, so 2.0 stays a float). */
#ifndef MLXRT_MLX_CHAT_RENDER_H
#define MLXRT_MLX_CHAT_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include "mlx/chat_template.h"
#include "mlx/chat_template_load.h"
#include "mlxrt.h"

struct mx_model;

typedef struct mx_chat_request {
  const char *messages_json; /* [{"role":..,"content": string | [{"type":"text","text":..}], ..}] */
  const char *tools_json;    /* a JSON array, or NULL / "null" for none */
  int add_generation_prompt;
  int enable_thinking;
  const char *template_text; /* a Jinja template overriding the model's (parsed per call); NULL */
  int64_t now;               /* strftime_now's instant, unix seconds; 0 = the current time */
} mx_chat_request;

/* Renders with t->main (or r->template_text), else with the built-in renderer `builtin` (its
 * family and variant; the request sets the rest; NULL: none, an error). Returns malloc'd NUL-terminated text (*len bytes, may be NULL) or NULL with
 * err: invalid JSON, a template error (raise_exception's message or "NAME:LINE:COL: ..."), a
 * rendered NUL byte, or what the built-in renderer cannot take (tools, tool calls, tool
 * messages, several content parts). */
char *mx_chat_render_request(const mx_chat_templates *t, const mx_chat_options *builtin,
                             const mx_chat_request *r, size_t *len, mlxrt_error *err);

/* The built-in renderer for the model (family, large Gemma 4 variant). */
mx_chat_options mx_chat_builtin_options(const struct mx_model *m);

/* The model's template (else its built-in renderer) at the current time. */
char *mx_render_chat_json(const struct mx_model *m, const char *messages_json,
                          const char *tools_json, int add_generation_prompt, int enable_thinking,
                          const char *template_text, mlxrt_error *err);

/* The same for a plain role/content list (role "model" is passed as "assistant"). */
char *mx_render_chat_msgs(const struct mx_model *m, const mx_chat_msg *msgs, size_t n,
                          int add_generation_prompt, int enable_thinking,
                          const char *template_text, mlxrt_error *err);

/* What renders the model's prompts: the template's file, or NULL for the built-in renderer. */
const char *mx_chat_template_origin(const struct mx_model *m);

#endif
