/* mlxrt_session_generate (include/mlxrt.h): prompt reuse, batched prompt with cancellation,
 * sampling on the device or the host, logprobs, streaming text per token. */
#include <string.h>

#include "base/error.h"
#include "mlx/api_internal.h"

void mlxrt_generate_options_default(mlxrt_generate_options *o) {
  memset(o, 0, sizeof *o);
  mlxrt_gen_params_default(&o->gen);
}

int mlxrt_session_generate(mlxrt_session *S, const int32_t *prompt, size_t n,
                           const mlxrt_generate_options *o, mlxrt_token_fn fn, void *user,
                           mlxrt_gen_stats *stats, mlxrt_error *err) {
  (void)S, (void)prompt, (void)n, (void)o, (void)fn, (void)user, (void)stats;
  return mx_fail(err, "mlxrt_session_generate: not implemented yet");
}

int mlxrt_chat_set_messages(mlxrt_chat *c, const mlxrt_message *msgs, size_t n, mlxrt_error *err) {
  (void)c, (void)msgs, (void)n;
  return mx_fail(err, "mlxrt_chat_set_messages: not implemented yet");
}

int mlxrt_chat_respond(mlxrt_chat *c, mlxrt_text_fn fn, void *user, mlxrt_gen_stats *stats,
                       mlxrt_error *err) {
  (void)c, (void)fn, (void)user, (void)stats;
  return mx_fail(err, "mlxrt_chat_respond: not implemented yet");
}

char *mlxrt_parse_tool_calls(const mlxrt_model *m, const char *text, size_t len, char **content,
                             mlxrt_error *err) {
  (void)m, (void)text, (void)len, (void)content;
  mx_fail(err, "mlxrt_parse_tool_calls: not implemented yet");
  return NULL;
}
