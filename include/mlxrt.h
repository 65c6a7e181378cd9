/* mlxrt — run MLX-format Gemma 3 / Gemma 4 checkpoints on the CPU and NVIDIA GPUs.
 * The public C API. Every call that can fail takes an mlxrt_error* (may be NULL) and returns
 * NULL or -1 on failure with a one-line message naming the file/tensor/field at fault. */
#ifndef MLXRT_H
#define MLXRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlxrt_error {
  char msg[1024];
} mlxrt_error;

/* Thread safety.
 *   - A model (mlxrt_model) may be shared by any number of threads: sessions created from it
 *     in different threads run at the same time and each gives exactly the tokens it gives
 *     alone (tests/test_threads.c). On the CPU the products of concurrent sessions take turns
 *     on the model's worker pool; on CUDA each session's decoder has its own stream.
 *   - A session, a sampler and a chat are used by one thread at a time (no internal locking);
 *     different ones are independent.
 *   - Several models may be loaded and used concurrently in one process.
 *   - Loading a model changes no process-wide state except that the CUDA plug-in is loaded
 *     once per process (cJSON's allocator hooks and the locale are left alone).
 *   - Profiling (MLXRT_CUDA_PROFILE, MLXRT_CUDA_TIMELINE) records one decoder per process. */


/* ---- models ------------------------------------------------------------------------------- */
typedef struct mlxrt_model mlxrt_model;

typedef struct mlxrt_options {
  const char *backend;  /* "auto" (default), "cpu" or "cuda"; NULL = $MLXRT_BACKEND or auto */
  int threads;          /* CPU threads; <= 0 = all cores */
  int verbose;
  const char *numerics; /* "float32" (default) or "mlx-cpu" (MLX's CPU arithmetic bit for bit, CPU
                         * backend only); NULL = $MLXRT_NUMERICS or float32 */
} mlxrt_options;

/* Opens an MLX checkpoint directory (config.json + *.safetensors) and the backend. */
mlxrt_model *mlxrt_model_load(const char *dir, const mlxrt_options *opt, mlxrt_error *err);
void mlxrt_model_free(mlxrt_model *m);
int mlxrt_model_vocab_size(const mlxrt_model *m);
const char *mlxrt_model_backend_name(const mlxrt_model *m);

typedef struct mlxrt_model_info {
  const char *variant;      /* e.g. "gemma3-270m", "gemma4-31b", "gemma4 (custom)" */
  const char *model_type;
  const char *quant;        /* e.g. "affine 4-bit g64", "nvfp4", "bf16", "mixed" */
  int n_layers, hidden_size, vocab_size, sliding_window;
  uint64_t params, bytes_on_disk;
  uint64_t bytes_per_token; /* weights streamed by one decode step */
} mlxrt_model_info;
void mlxrt_model_get_info(const mlxrt_model *m, mlxrt_model_info *info);
/* KV-cache bytes one decode step reads when `depth` tokens are already cached. */
uint64_t mlxrt_model_kv_bytes_per_token(const mlxrt_model *m, int64_t depth);
/* Streaming-read bandwidth of the backend's memory in GB/s, measured now (0 = unknown). */
double mlxrt_model_read_bandwidth(mlxrt_model *m);

/* ---- sessions ------------------------------------------------------------------------------ */
typedef struct mlxrt_session mlxrt_session;

/* capacity: most tokens the session holds (0 = the model's maximum). */
mlxrt_session *mlxrt_session_new(mlxrt_model *m, int64_t capacity, mlxrt_error *err);
/* mlxrt_session_new with flags: MLXRT_SESSION_ALL_POSITIONS = the session will ask for every
 * position's logits (mlxrt_session_feed with all_positions), which only the reference path
 * gives; without it a backend's whole-step decoder may run the session (last logits only). */
#define MLXRT_SESSION_ALL_POSITIONS 1u
mlxrt_session *mlxrt_session_new_ex(mlxrt_model *m, int64_t capacity, unsigned flags, mlxrt_error *err);
void mlxrt_session_free(mlxrt_session *s);
/* Feeds n tokens (a prompt or a continuation). logits may be NULL; otherwise it receives
 * float32 [n, vocab] when all_positions, else [vocab] for the last token. */
int mlxrt_session_feed(mlxrt_session *s, const int32_t *tokens, int64_t n, float *logits,
                       int all_positions, mlxrt_error *err);
/* Feeds one token and returns the greedy next token. With a device decoder only the token id
 * comes back from the device (no logits copy); otherwise the argmax runs on the host. */
int mlxrt_session_step_greedy(mlxrt_session *s, int32_t token, int32_t *next, mlxrt_error *err);
/* A token sampler for mlxrt_session_step_sample: mlxrt_gen_params's sampling fields (defined
 * below; a negative value means mlx-lm's default: temperature 1, every filter off, no
 * repetition penalty; seed when seed_set, else 0). */
typedef struct mlxrt_sampler mlxrt_sampler;
struct mlxrt_gen_params;
mlxrt_sampler *mlxrt_sampler_new(const mlxrt_model *m, const struct mlxrt_gen_params *p, mlxrt_error *err);
void mlxrt_sampler_free(mlxrt_sampler *s);
/* Feeds one token and returns the next one drawn by the sampler. With a device decoder
 * (MLXRT_DECODER=1) the draw runs on the device and only the token id comes back (unless the
 * sampler has a repetition penalty); otherwise it runs on the host over the logits. The fed
 * token joins the sampler's repetition-penalty history. */
int mlxrt_session_step_sample(mlxrt_session *s, int32_t token, mlxrt_sampler *smp, int32_t *next,
                              mlxrt_error *err);
/* Tokens currently in the cache. */
int64_t mlxrt_session_position(const mlxrt_session *s);
/* Drops every cached token (the session is reusable from scratch). */
void mlxrt_session_reset(mlxrt_session *s);

/* ---- inspection ----------------------------------------------------------------------------- */
/* Describes a checkpoint without loading a backend: model type and variant, layer plan,
 * quantization per group of tensors, parameters, bytes on disk and read per decoded token.
 * Returns malloc'd text (JSON when json != 0) or NULL with err set. */
char *mlxrt_describe(const char *dir, int json, mlxrt_error *err);

/* ---- generation and chat --------------------------------------------------------------------- */
/* Sampling settings; a negative value (or 0 for seed_set) means "the model's
 * generation_config.json default, else mlx-lm's". */
typedef struct mlxrt_gen_params {
  float temperature;        /* 0 = greedy */
  int top_k;                /* 0 = off */
  float top_p;              /* 1 = off */
  float min_p;              /* 0 = off */
  float repetition_penalty; /* 1 = off */
  int repetition_window;
  uint64_t seed;
  int seed_set;
  int max_tokens;           /* per answer; <= 0 = until a stop token or the context is full */
} mlxrt_gen_params;
void mlxrt_gen_params_default(mlxrt_gen_params *p);

typedef struct mlxrt_chat_options {
  const char *system;       /* system prompt or NULL */
  int use_template;         /* 0 = raw text completion (--no-chat-template) */
  int enable_thinking;      /* Gemma 4 thinking */
  int show_thinking;        /* print the thought text too */
  mlxrt_gen_params gen;
  int64_t capacity;         /* context tokens; 0 = the model's maximum */
  volatile int *interrupt;  /* when set non-zero, the current answer stops (Ctrl-C) */
  const char *chat_template; /* Jinja text overriding the model's chat template; NULL = the
                              * model's (see "chat templates" below) */
} mlxrt_chat_options;

typedef struct mlxrt_gen_stats {
  int64_t prompt_tokens;    /* tokens of the rendered conversation */
  int64_t prompt_processed; /* of which had to be processed (the rest was in the cache) */
  int64_t gen_tokens;
  double prompt_seconds, gen_seconds;
  int stopped_by;           /* 0 stop token, 1 max tokens, 2 interrupted, 3 context full */
} mlxrt_gen_stats;

/* Receives answer text as it is generated (never half a UTF-8 character). */
typedef void (*mlxrt_text_fn)(void *user, const char *text, size_t len);

typedef struct mlxrt_chat mlxrt_chat;
/* Loads the tokenizer and generation settings of the model's directory. */
mlxrt_chat *mlxrt_chat_new(mlxrt_model *m, const mlxrt_chat_options *opt, mlxrt_error *err);
void mlxrt_chat_free(mlxrt_chat *c);
/* One user turn: renders the conversation, processes only what the cache lacks, streams the
 * answer to fn and keeps it in the history. */
int mlxrt_chat_turn(mlxrt_chat *c, const char *user_text, mlxrt_text_fn fn, void *user,
                    mlxrt_gen_stats *stats, mlxrt_error *err);
/* Forgets the conversation and the cache. */
void mlxrt_chat_reset(mlxrt_chat *c);

/* Encodes text with the model's tokenizer (add_special: the tokenizer's own BOS etc.). */
int mlxrt_chat_tokenize(mlxrt_chat *c, const char *text, int add_special, int32_t **ids,
                        size_t *n, mlxrt_error *err);

/* ---- chat templates ------------------------------------------------------------------------ */
/* A model's chat template is its own Jinja template (the folder's chat_template.jinja, else
 * tokenizer_config.json "chat_template"), parsed when the model loads (a broken one fails the
 * load); without one, the built-in Gemma 3 / Gemma 4 renderer (plain role/content messages only).
 * The template sees messages, tools, documents (null), add_generation_prompt, enable_thinking,
 * tokenizer_config.json's *_token strings (bos_token, eos_token, ...) and strftime_now(format)
 * at the current time, as transformers' apply_chat_template gives them. */
typedef struct mlxrt_template_options {
  int add_generation_prompt;   /* end with the opening of the assistant's turn */
  int enable_thinking;         /* Gemma 4 thinking (passed to the template as enable_thinking) */
  const char *template_text;   /* a Jinja template that overrides the model's; NULL = the model's */
} mlxrt_template_options;
/* Renders an OpenAI-style messages array (JSON text: [{"role":..,"content": string or
 * [{"type":"text","text":..}], "tool_calls":[..], "tool_call_id":..,"name":..}]) and an optional
 * tools array (JSON text or NULL) with the model's chat template (or template_text; o NULL:
 * add_generation_prompt 1, the rest 0). The built-in renderer refuses tools, tool calls, tool
 * messages and several content parts. Returns malloc'd text (free with mlxrt_free (= free()));
 * tokenize it with add_special = 0 (the template writes the BOS). NULL with err: invalid JSON, the
 * template's raise_exception message, or where the template failed ("NAME:LINE:COL: ...").
 * Thread-safe on a shared model. */
char *mlxrt_chat_template_apply(const mlxrt_model *m, const char *messages_json,
                                const char *tools_json, const mlxrt_template_options *o,
                                mlxrt_error *err);
/* "model" (the checkpoint's own template), or "built-in" */
const char *mlxrt_chat_template_source(const mlxrt_model *m);

/* Resolves a --model argument: a directory, or a Hugging Face repo id ("org/name") found in
 * the local cache ($HF_HOME/hub or ~/.cache/huggingface/hub). */
int mlxrt_resolve_model(const char *arg, char *out, size_t out_len, mlxrt_error *err);

#ifdef __cplusplus
}
#endif

#endif
