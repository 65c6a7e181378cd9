/* libFuzzer target: a model folder's chat template and a conversation through the real path —
 * mx_chat_templates_load (chat_template.jinja, tokenizer_config.json) then
 * mx_chat_render_request (the JSON context, the template, the built-in Gemma 4 renderer when
 * there is no template). The input's parts (fuzz_folder.h) become chat_template.jinja,
 * tokenizer_config.json, the messages JSON and the tools JSON (an empty part: no tools). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "fuzz_folder.h"
#include "mlx/chat_render.h"

static void require(int cond) {
  if (!cond) abort();
}

static const char *const NAMES[] = {"chat_template.jinja", "tokenizer_config.json",
                                    "messages.json", "tools.json"};

static char *part(const char *name) {
  char path[256];
  size_t len;
  fuzz_path(name, path, sizeof path);
  char *text = mx_read_file(path, &len, NULL);
  if (text && (len == 0 || strlen(text) != len)) { /* empty, or cut short by a NUL */
    free(text);
    text = NULL;
  }
  return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int n = fuzz_write_folder(data, size, NAMES, 4);
  mlxrt_error err = {{0}};
  mx_chat_templates t;
  if (mx_chat_templates_load(fuzz_dir(), &t, &err)) {
    require(strchr(err.msg, '\n') == NULL && err.msg[0]);
    return 0;
  }
  char *msgs = n > 2 ? part("messages.json") : NULL, *tools = n > 3 ? part("tools.json") : NULL;
  mx_chat_options builtin = {MX_CHAT_GEMMA4, 0, 0, (int)(size & 1)};
  mx_chat_request r = {msgs ? msgs : "[{\"role\":\"user\",\"content\":\"hi\"}]", tools,
                       (int)(size >> 1 & 1), (int)(size >> 2 & 1), NULL, 1753531200};
  size_t len = 0;
  char *out = mx_chat_render_request(&t, &builtin, &r, &len, &err);
  if (out) require(strlen(out) == len);
  else require(strchr(err.msg, '\n') == NULL && err.msg[0]);
  free(out);
  free(msgs);
  free(tools);
  mx_chat_templates_free(&t);
  return 0;
}
