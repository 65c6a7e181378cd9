/* The OpenAI request bodies `mlxrt serve` accepts, parsed and validated in one pure function
 * (bytes in, a struct or an OpenAI-style error out; no model, no I/O), so the fuzz target
 * (tests/fuzz/fuzz_serve_request.c) can run it alone. docs/SERVER.md lists the fields. */
#ifndef MLXRT_TOOLS_SERVE_REQUEST_H
#define MLXRT_TOOLS_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

typedef enum { SERVE_CHAT = 0, SERVE_COMPLETION = 1 } serve_kind;

/* An error as OpenAI reports it: {"error":{"message","type","param","code"}} with an HTTP status. */
typedef struct serve_error {
  int status;        /* 400, 401, 404, 413, 429, 500, 503 */
  const char *type;  /* "invalid_request_error", "authentication_error", "server_error", ... */
  const char *code;  /* NULL or e.g. "model_not_found", "context_length_exceeded" */
  char param[64];    /* the offending field ("" = none) */
  char message[512]; /* one line */
} serve_error;

/* Sets every field of e (message printf-style); returns -1 for `return serve_fail(...)`. */
int serve_fail(serve_error *e, int status, const char *type, const char *code, const char *param,
               const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define SERVE_MAX_STOP 4
#define SERVE_MAX_STOP_BYTES 256
#define SERVE_MAX_TOP_LOGPROBS 20

typedef struct serve_limits {
  size_t max_messages; /* messages per request */
  size_t max_tools;    /* tool declarations per request */
} serve_limits;
void serve_limits_default(serve_limits *l);

typedef struct serve_request {
  serve_kind kind;
  char *model;           /* NULL when absent */
  /* chat: the messages as the template takes them (a JSON array: role, content as a string or
   * a list of text parts, tool_calls with arguments as objects, tool_call_id, name) */
  char *messages_json;
  size_t n_messages;
  char *tools_json;      /* JSON array or NULL (none, or tool_choice "none") */
  char *prompt;          /* completions: the prompt text */
  size_t prompt_len;
  int max_tokens;        /* -1: not given */
  /* sampling; a negative value: not given (the model's generation_config.json default) */
  double temperature, top_p, min_p, repetition_penalty;
  int top_k;
  uint64_t seed;
  int seed_set;
  char *stop[SERVE_MAX_STOP];
  int n_stop;
  int stream, include_usage;
  int logprobs;          /* 1: return log probabilities */
  int top_logprobs;      /* 0..20 alternatives per token */
  int json_object;       /* response_format {"type":"json_object"} */
  int enable_thinking;   /* chat_template_kwargs.enable_thinking */
  int ignore_eos;        /* llama.cpp's extension: stop tokens do not end the answer */
} serve_request;

/* Parses a request body for kind. Returns 0 (free r with serve_request_free) or -1 with e set
 * (status 400; r is left empty). Checks: the body is UTF-8 JSON with an object at the top,
 * every known field has its type and range, unsupported values are refused by name. */
int serve_request_parse(serve_kind kind, const char *body, size_t len, const serve_limits *lim,
                        serve_request *r, serve_error *e);
void serve_request_free(serve_request *r);

/* 1 when s[0..n) is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF). */
int serve_utf8_valid(const char *s, size_t n);

#endif
