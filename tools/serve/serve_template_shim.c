/* Stand-in for mlxrt_chat_template_apply until the template API lands (removed then): plain
 * role/content through the built-in renderer. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlx/chat_template.h"
#include "serve_template_shim.h"

char *mlxrt_chat_template_apply(const mlxrt_model *m, const char *messages_json, const char *tools_json,
                                const mlxrt_template_options *o, mlxrt_error *err) {
  (void)tools_json;
  int32_t *ids = NULL;
  size_t n = 0;
  int g4 = !mlxrt_tokenize(m, "<|turn>", 7, 0, &ids, &n, NULL) && n == 1;
  mlxrt_free(ids);
  cJSON *msgs = cJSON_Parse(messages_json);
  size_t count = (size_t)cJSON_GetArraySize(msgs);
  mx_chat_msg *mm = calloc(count ? count : 1, sizeof *mm);
  size_t i = 0;
  for (cJSON *x = msgs ? msgs->child : NULL; x; x = x->next, i++) {
    mm[i].role = cJSON_GetObjectItem(x, "role")->valuestring;
    cJSON *c = cJSON_GetObjectItem(x, "content");
    mm[i].content = cJSON_IsString(c) ? c->valuestring : "";
  }
  mx_chat_options co = {g4 ? MX_CHAT_GEMMA4 : MX_CHAT_GEMMA3, o->add_generation_prompt, o->enable_thinking, 0};
  char *out = mx_chat_render(mm, count, &co, err);
  free(mm);
  cJSON_Delete(msgs);
  return out;
}
