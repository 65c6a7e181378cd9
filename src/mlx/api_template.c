/* The public chat-template calls (include/mlxrt.h, "chat templates"). */
#include <stdlib.h>

#include "base/error.h"
#include "mlx/api_internal.h"
#include "mlx/chat_render.h"
#include "mlx/model.h"
#include "mlxrt.h"

char *mlxrt_chat_template_apply(const mlxrt_model *M, const char *messages_json,
                                const char *tools_json, const mlxrt_template_options *o,
                                mlxrt_error *err) {
  if (!M || !messages_json) {
    mx_fail(err, "mlxrt_chat_template_apply: no %s given", M ? "messages" : "model");
    return NULL;
  }
  const mlxrt_template_options d = {1, 0, NULL};
  if (!o) o = &d;
  return mx_render_chat_json(M->m, messages_json, tools_json,
                             o->add_generation_prompt, o->enable_thinking, o->template_text, err);
}

const char *mlxrt_chat_template_source(const mlxrt_model *M) {
  return M && mx_chat_template_origin(M->m) ? "model" : "built-in";
}
