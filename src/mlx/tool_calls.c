/* Gemma 4 tool calls in generated text (mlxrt_parse_tool_calls). */
#include "base/error.h"
#include "mlxrt.h"

char *mlxrt_parse_tool_calls(const mlxrt_model *m, const char *text, size_t len, char **content,
                             mlxrt_error *err) {
  (void)m, (void)text, (void)len, (void)content;
  mx_fail(err, "mlxrt_parse_tool_calls: not implemented yet");
  return NULL;
}
