/* The JSON shapes of OpenAI responses (cJSON): objects, chunks, usage, logprobs, errors. */
#ifndef MLXRT_TOOLS_SERVE_RESPONSE_H
#define MLXRT_TOOLS_SERVE_RESPONSE_H

#include <cjson/cJSON.h>

#include "serve.h"

/* {id, object, created, model}: object from the job's kind ("chat.completion",
 * "chat.completion.chunk", "text_completion"). */
cJSON *serve_resp_base(const serve_job *j, const char *model_id, int chunk);
/* {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details: {cached_tokens}} */
cJSON *serve_resp_usage(int64_t prompt, int64_t completion, int64_t cached);
/* One choice of a chunk or a response: {"index":0, ...}; the caller adds the rest. */
cJSON *serve_resp_choice(cJSON *resp);
/* Writes `data: JSON\n\n` to the job and deletes obj. -1: out of memory. */
int serve_sse_send(serve_job *j, cJSON *obj);
/* finish_reason from mlxrt_gen_stats.stopped_by. */
const char *serve_finish_reason(int stopped_by, int tool_calls);

/* A token as logprobs show it: its text (invalid UTF-8 replaced by U+FFFD) and its raw bytes. */
cJSON *serve_logprob_token(const mlxrt_model *m, int32_t id, double logprob, int with_top);

/* "call_" and 24 random hex digits (ids of tool calls and responses use the same generator). */
void serve_random_id(char *out, size_t n, const char *prefix);

#endif
