/* Stand-in for mlxrt_chat_template_apply until the template API lands (removed then). */
#ifndef MLXRT_TOOLS_SERVE_TEMPLATE_SHIM_H
#define MLXRT_TOOLS_SERVE_TEMPLATE_SHIM_H
#include "mlxrt.h"
typedef struct mlxrt_template_options {
  int add_generation_prompt;
  int enable_thinking;
  const char *template_text;
} mlxrt_template_options;
char *mlxrt_chat_template_apply(const mlxrt_model *m, const char *messages_json, const char *tools_json,
                                const mlxrt_template_options *o, mlxrt_error *err);
#endif
