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

/* ---- version ------------------------------------------------------------------------------ */
/* The version this header belongs to (the one definition of the project's version: CMake reads
 * it from here). A new MAJOR changes the shared library's SONAME (libmlxrt.so.MAJOR). */
#define MLXRT_VERSION_MAJOR 0
#define MLXRT_VERSION_MINOR 1
#define MLXRT_VERSION_PATCH 0
#define MLXRT_VERSION "0.1.0"
/* The version of the library linked at run time ("MAJOR.MINOR.PATCH"; may differ from the
 * header's MLXRT_VERSION when the program was built against another one). Static string. */
const char *mlxrt_version(void);

typedef struct mlxrt_error {
  char msg[1024];
} mlxrt_error;

/* Thread safety.
 *   - A model (mlxrt_model) may be shared by any number of threads: sessions created from it
 *     in different threads run at the same time and each gives exactly the tokens it gives
 *     alone (tests/test_threads.c). On the CPU the products of concurrent sessions take turns
 *     on the model's worker pool; on CUDA each session's decoder has its own stream.
 *   - A session, a sampler and a chat are used by one thread at a time (no internal locking);
 *     different ones are independent. The sessions of one pool (mlxrt_pool_new) are meant to be
 *     used by different threads at once: that is when their steps are batched
 *     (tests/test_pool.c).
 *   - Several models may be loaded and used concurrently in one process.
 *   - Loading a model changes no process-wide state except that the CUDA plug-in is loaded
 *     once per process (cJSON's allocator hooks and the locale are left alone).
 *   - Profiling (MLXRT_CUDA_PROFILE, MLXRT_CUDA_TIMELINE) records one decoder per process.
 *   - A draft model (mlxrt_spec_options.draft_model) is a model like any other: sessions in
 *     different threads may draft with the same one at once (each keeps its own session of it,
 *     used only by the thread using that session). */


/* ---- models ------------------------------------------------------------------------------- */
typedef struct mlxrt_model mlxrt_model;

typedef struct mlxrt_options {
  const char *backend;  /* "auto" (default), "cpu" or "cuda"; NULL = $MLXRT_BACKEND or auto */
  int threads;          /* CPU threads; <= 0 = all cores */
  int verbose;
  const char *numerics; /* "float32" (default) or "mlx-cpu" (MLX's CPU arithmetic bit for bit, CPU
                         * backend only); NULL = $MLXRT_NUMERICS or float32 */
  const char *kv_k;     /* the full-attention layers' K cache on a device: "auto" (default, NULL) keeps
                         * K from V where a layer's K and V share one projection (Gemma 4's
                         * attention_k_eq_v layers: 5/8 of the bytes, docs/DECODE.md), "bf16"
                         * keeps K in bf16, "planar3" / "planar4" compress K (docs/KV.md: a
                         * comparison mode, one sequence per decoder: no pools or batches); the
                         * CPU keeps bf16 and refuses planar3 / planar4 when the model loads */
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
  int batched_steps;        /* 1: the backend's decoder steps several sequences reading each
                               weight once (CUDA; the CPU backend but with mlx-cpu numerics), so
                               the sessions of a pool (mlxrt_pool_new) decoding at once outrun as
                               many separate sessions; 0: no pool on this model */
} mlxrt_model_info;
void mlxrt_model_get_info(const mlxrt_model *m, mlxrt_model_info *info);
/* KV-cache bytes one decode step reads when `depth` tokens are already cached, with K and V in
 * bf16 (the reference path's cache). */
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
/* Memory a session holds: its KV cache's bytes and the positions they back (pages are added as
 * the context grows, up to the capacity), and the bytes in use on the device that runs it
 * (every allocation of the device, as the driver reports it; 0 for a host backend). */
typedef struct mlxrt_memory {
  uint64_t kv_bytes;
  int64_t kv_positions;
  uint64_t device_used, device_total;
} mlxrt_memory;
int mlxrt_session_memory(const mlxrt_session *s, mlxrt_memory *out, mlxrt_error *err);
/* KV-cache bytes one decode step of this session reads when `depth` tokens are cached, the
 * cache as its decoder stores it (the device decoder's K from V or compressed K read fewer bytes
 * than mlxrt_model_kv_bytes_per_token counts). */
uint64_t mlxrt_session_kv_read_bytes(const mlxrt_session *s, int64_t depth);
/* Drops every cached token (the session is reusable from scratch). */
void mlxrt_session_reset(mlxrt_session *s);

/* ---- batched decode ------------------------------------------------------------------------ */
/* Many sequences decoded together on a backend's decoder (CUDA, or the CPU's unless it runs
 * mlx-cpu numerics): each of `slots` slots
 * holds one sequence with its own KV cache of `capacity` tokens, and a step feeds one token to
 * each of any set of them at once, every weight read once for the whole set (continuous
 * batching: a slot's sequence may start, stop or be replaced between steps). A sequence's
 * tokens and logits do not depend on which others share its steps, only, on CUDA, on how many
 * do (a lone row, 2-15 rows and 16 or more take different product kernels: the same tokens, the
 * logits within bf16 noise); on MoE models within the tolerance of the experts' grouped
 * products. A batch is used by one thread at a time;
 * batches of one shared model may run in different threads. */
typedef struct mlxrt_batch mlxrt_batch;
/* NULL with err set when the model's backend has no batched decode, or slots is outside
 * 1..256, or capacity outside 1..the model's maximum. Both backends read each weight once per
 * step for all the sequences the step holds; the CPU's results are a lone session's bit for
 * bit. */
mlxrt_batch *mlxrt_batch_new(mlxrt_model *m, int slots, int64_t capacity, mlxrt_error *err);
void mlxrt_batch_free(mlxrt_batch *b);
/* Starts slot `slot`'s sequence anew with a prompt of n tokens (whatever it held is dropped)
 * and returns its greedy next token. */
int mlxrt_batch_prompt(mlxrt_batch *b, int slot, const int32_t *tokens, int64_t n, int32_t *next,
                       mlxrt_error *err);
/* Feeds tokens[r] to the sequence in slots[r] (distinct slots holding a sequence with room for
 * one more token) for r < n, and writes each one's greedy next token to next[r]. On an error
 * no sequence has moved. */
int mlxrt_batch_step(mlxrt_batch *b, int n, const int *slots, const int32_t *tokens, int32_t *next,
                     mlxrt_error *err);
/* mlxrt_batch_step with row r's next token drawn by samplers[r] on the device, as
 * mlxrt_session_step_sample draws it (NULL: greedy); the fed token joins that sampler's
 * history. A sampler with a repetition penalty is refused (the device draws from the logits
 * alone). */
struct mlxrt_sampler;
int mlxrt_batch_step_sample(mlxrt_batch *b, int n, const int *slots, const int32_t *tokens,
                            struct mlxrt_sampler *const *samplers, int32_t *next, mlxrt_error *err);
/* Tokens slot `slot`'s sequence holds (0: none). */
int64_t mlxrt_batch_position(const mlxrt_batch *b, int slot);
/* Memory the batch holds (mlxrt_memory): every slot's KV cache together (kv_positions: the
 * decoder's own sequence's), and the device's bytes in use. */
int mlxrt_batch_memory(const mlxrt_batch *b, mlxrt_memory *out, mlxrt_error *err);

/* ---- session pools: continuous batching for threads ----------------------------------------
 * A pool is one batched decoder (as mlxrt_batch's) whose slots are sessions. A pool session is
 * an ordinary session for one thread at a time — feed, step, mlxrt_session_generate with
 * logprobs, samplers, repetition penalty, stop tokens and cancel — of the pool's capacity;
 * speculative decoding is refused (last logits only, as on any decoder). What a pool adds:
 * sessions of one pool used by different threads at the same time step together. Each
 * one-token step joins the pool's next batched step, which runs when every sequence of the
 * previous step has come back with its next token or has left (its answer ended, it is fed a
 * prompt, it is freed), or after 2 ms, so the weights are read once per step for all of them.
 * Prompts run one at a time on the pool's decoder in pieces (its prompt pass's chunk, 512
 * tokens), taking turns with the batched steps: a long prompt slows the others' steps without
 * stopping them. A pool session's tokens are those of the same sequence in an mlxrt_batch (on
 * the CPU backend, those of a lone session bit for bit; on CUDA the batched step's numerics,
 * which on MoE models depend on the step's other sequences within the grouped products'
 * tolerance). A step that fails for one sequence (its logits overflowed) fails only that
 * sequence's call. Sessions of one pool used by one thread in turn still work, each step
 * waiting up to 2 ms for the others.
 * Thread-safe: mlxrt_pool_session_new and mlxrt_session_free of pool sessions from any thread;
 * mlxrt_pool_free once every session of the pool is freed. */
typedef struct mlxrt_pool mlxrt_pool;
/* A pool of `slots` sessions (1..256) of `capacity` tokens each (1..the model's maximum; each
 * slot's KV cache grows as its context does, as a session's). NULL with err set when the
 * backend has no batched decode or its decoder does not run the model. */
mlxrt_pool *mlxrt_pool_new(mlxrt_model *m, int slots, int64_t capacity, mlxrt_error *err);
void mlxrt_pool_free(mlxrt_pool *p);
/* A session on a free slot of the pool (NULL with err set when all are taken); free it with
 * mlxrt_session_free, which frees the slot. mlxrt_session_memory reports the whole pool's. */
mlxrt_session *mlxrt_pool_session_new(mlxrt_pool *p, mlxrt_error *err);
/* Since the pool was made: batched steps run, the sequence steps they held (rows / steps = the
 * mean batch), prompt pieces fed. Thread-safe. */
typedef struct mlxrt_pool_stats {
  int64_t steps, rows, prompt_pieces;
} mlxrt_pool_stats;
void mlxrt_pool_get_stats(mlxrt_pool *p, mlxrt_pool_stats *st);

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

/* ---- speculative decoding ---------------------------------------------------------------------
 * Several tokens per pass of the model: a drafter proposes up to draft_max tokens, the model
 * checks them all in one pass (every position's logits, each row bit for bit what a one-token
 * step computes) and keeps the drafted tokens it agrees with plus one token of its own. Greedy
 * output is identical to plain greedy decoding. Sampled output follows speculative sampling's
 * rejection rule, so each token is distributed exactly as the plain sampler's (same
 * temperature, filters and repetition penalty) — but the random draws are used differently: a
 * seed gives other tokens than without speculation. Needs the reference path with row-exact
 * products (the CPU backend): on a session that a backend's whole-step decoder runs, asking
 * for it is an error naming the option. */
#define MLXRT_SPEC_OFF 0
#define MLXRT_SPEC_LOOKUP 1    /* prompt lookup: the drafts are copied from the context (prompt and
                                  answer so far) after the latest earlier occurrence of its last
                                  n tokens, n = ngram_max down to 1; no second model */
#define MLXRT_SPEC_DRAFT 2     /* a draft model (same vocabulary) drafts: greedily at temperature
                                  0, else sampling with the same settings. A Gemma 4 MTP drafter
                                  (model_type gemma4_assistant) drafts from the session's own K/V
                                  and hidden states, a constant draft_max per pass */
#define MLXRT_SPEC_MAX_DRAFT 32
#define MLXRT_SPEC_MAX_NGRAM 8
typedef struct mlxrt_spec_options {
  int mode;                 /* MLXRT_SPEC_OFF (0), MLXRT_SPEC_LOOKUP or MLXRT_SPEC_DRAFT */
  int draft_max;            /* tokens drafted per pass, 1..MLXRT_SPEC_MAX_DRAFT; 0 = the default
                               (lookup 10, draft model 4) */
  int ngram_max;            /* lookup: longest n-gram matched, 1..MLXRT_SPEC_MAX_NGRAM; 0 = 3 */
  mlxrt_model *draft_model; /* MLXRT_SPEC_DRAFT: the drafting model (its vocabulary must be the
                               model's). Shared like any model; each session that uses it keeps
                               a session of it (freed with the session) */
} mlxrt_spec_options;

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
  mlxrt_spec_options spec;  /* speculative decoding; all 0 (the zeroed struct) = off */
} mlxrt_chat_options;

typedef struct mlxrt_gen_stats {
  int64_t prompt_tokens;    /* tokens of the rendered conversation */
  int64_t prompt_processed; /* of which had to be processed (the rest was in the cache) */
  int64_t gen_tokens;
  double prompt_seconds, gen_seconds;
  int stopped_by;           /* 0 stop token, 1 max tokens, 2 interrupted, 3 context full,
                               4 the token callback asked (mlxrt_session_generate) */
  /* speculative decoding (all 0 without): passes that verified drafted tokens, tokens drafted
   * in them, of which accepted (acceptance rate = spec_accepted / spec_drafted) */
  int64_t spec_passes, spec_drafted, spec_accepted;
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

/* Encodes text with the model's tokenizer (add_special: the tokenizer's own BOS etc.).
 * *ids is malloc'd: free it with mlxrt_free. */
int mlxrt_chat_tokenize(mlxrt_chat *c, const char *text, int add_special, int32_t **ids,
                        size_t *n, mlxrt_error *err);

/* ---- memory --------------------------------------------------------------------------------- */
/* Frees every buffer the API returns (ids, text); NULL is ignored. */
void mlxrt_free(void *p);

/* ---- tokens ----------------------------------------------------------------------------------
 * Thread-safe on a shared model (the tokenizer is read-only). A model without tokenizer.json
 * fails these calls with a message saying so (mlxrt_token_is_stop then knows only the
 * generation_config.json / config.json eos ids). */
/* Encodes len bytes of UTF-8 text; add_special = 1 applies the tokenizer's post-processor (for
 * Gemma: a leading <bos>). Special tokens written in the text (e.g. "<start_of_turn>") encode as
 * themselves. *ids: malloc'd (mlxrt_free; may be NULL when *n = 0). Returns 0 or -1. */
int mlxrt_tokenize(const mlxrt_model *m, const char *text, size_t len, int add_special,
                   int32_t **ids, size_t *n, mlxrt_error *err);
/* Decodes ids to NUL-terminated text (mlxrt_free; *len without the NUL, len may be NULL);
 * skip_special = 1 drops special tokens (<bos>, <end_of_turn>, ...). An id outside the
 * vocabulary is an error (NULL). */
char *mlxrt_detokenize(const mlxrt_model *m, const int32_t *ids, size_t n, int skip_special,
                       size_t *len, mlxrt_error *err);
/* 1 when id ends an answer: the eos ids of generation_config.json (else config.json), plus the
 * chat turn terminator (<end_of_turn> for Gemma 3, <turn|> for Gemma 4); else 0. */
int mlxrt_token_is_stop(const mlxrt_model *m, int32_t id);

/* ---- generation on a session -----------------------------------------------------------------
 * A session remembers the ids it holds (mlxrt_session_feed, the step calls and
 * mlxrt_session_generate append; mlxrt_session_rewind / mlxrt_session_reset truncate). Like every
 * session call these are for one thread at a time per session; sessions of one shared model run
 * concurrently (see "Thread safety"). mlxrt_session_generate needs the model's tokenizer. */
typedef struct mlxrt_token_info {
  int32_t id;
  int64_t position;        /* where this token will sit in the cache */
  float logprob;           /* log-softmax of the raw logits (temperature 1, no penalty) at id;
                              NAN unless requested */
  int n_top;               /* alternatives below (0 unless top_logprobs > 0) */
  const int32_t *top_ids;  /* most probable first (ties: lower id first); valid during the
                              callback only */
  const float *top_logprobs;
  const char *text;        /* the text this token completes: whole UTF-8 characters, may be empty
                              (a character split over tokens comes with its last token); special
                              tokens written out; valid during the callback only */
  size_t len;
  int is_stop;             /* 1: a stop token that ends the answer (text is empty) */
} mlxrt_token_info;
/* Called once per generated token, stop tokens included (is_stop = 1); return non-zero to end
 * the answer after this token (stats->stopped_by = 4). */
typedef int (*mlxrt_token_fn)(void *user, const mlxrt_token_info *t);

typedef struct mlxrt_generate_options {
  mlxrt_gen_params gen;     /* sampling + max_tokens (<= 0: until a stop token or a full context);
                               negatives = generation_config.json defaults as in mlxrt_chat.
                               seed_set = 0 samples with seed 0: every call is reproducible; pass
                               a seed of your own for answers that vary */
  int logprobs;             /* 1: fill logprob (the logits come to the host each step) */
  int top_logprobs;         /* 0..20 alternatives per token (implies logprobs) */
  volatile int *cancel;     /* non-NULL: when it becomes non-zero the call returns within one
                               prompt batch or one token (stats->stopped_by = 2); a session run
                               by a backend's decoder gets its prompt in one call, so there the
                               flag is seen before and after the prompt */
  int ignore_stop;          /* 1: stop tokens do not end the answer (they arrive as ordinary
                               tokens: is_stop 0, their text written out) */
  mlxrt_spec_options spec;  /* speculative decoding; all 0 = off (mlxrt_generate_options_default) */
} mlxrt_generate_options;
/* Every field "default": gen = mlxrt_gen_params_default, no logprobs, no cancel flag, no
 * speculative decoding. */
void mlxrt_generate_options_default(mlxrt_generate_options *o);

/* Makes the session hold `prompt` (keeping the longest prefix of it the session already holds —
 * a session remembers the ids it was fed — and processing the rest in batches, checking cancel
 * between them; at least the last prompt token is always processed), then generates. Same seed
 * and prompt -> same tokens whatever was cached. stats->prompt_processed = the tokens that had to
 * be processed; prompt_tokens - prompt_processed = reused. The prompt must be shorter than the
 * session's capacity. Generated tokens join the session's ids except the last one (it was
 * sampled, never fed), so a follow-up prompt that extends prompt + answer reuses all of it but
 * that token. Returns 0 (stats->stopped_by: 0 stop token, 1 max_tokens, 2 cancelled, 3 context
 * full, 4 the callback asked) or -1 with err (then the session's content is unspecified but
 * valid: a later call rewinds as needed). fn may be NULL; stats may be NULL; o NULL = defaults.
 * A prefix is reused only where the cache can rewind to it (mlxrt_session_rewind): once a
 * sliding-window model holds more than its window (on the CPU: window + 32 positions), only a
 * prompt that extends what is held (prompt + answer + more) or drops at most its last 33
 * positions keeps it; any other prompt is processed whole. With o->spec the answer is the
 * same for greedy decoding, and the session holds the same ids afterwards. */
int mlxrt_session_generate(mlxrt_session *s, const int32_t *prompt, size_t n,
                           const mlxrt_generate_options *o, mlxrt_token_fn fn, void *user,
                           mlxrt_gen_stats *stats, mlxrt_error *err);
/* Checks that the session can decode speculatively with o (the options' values, the draft
 * model's vocabulary, the backend), and sets up what that needs (the draft model's session):
 * 0, or -1 with err naming what is wrong. o NULL or off: 0. mlxrt_session_generate and
 * mlxrt_chat check the same themselves; this is for failing early. */
int mlxrt_spec_check(mlxrt_session *s, const mlxrt_spec_options *o, mlxrt_error *err);
/* Forgets positions >= pos; returns the position it could rewind to (a sliding-window cache can
 * only rewind within what it still holds — on the reference path its window plus 32 positions
 * are kept, so the last 33 positions written can always be taken back; otherwise 0), or -1 if
 * pos is out of range (pos < 0 or pos > mlxrt_session_position). */
int64_t mlxrt_session_rewind(mlxrt_session *s, int64_t pos);
/* The ids the session holds, in order (*n of them, = mlxrt_session_position); a read-only view
 * owned by the session, valid until the next call on s. */
const int32_t *mlxrt_session_tokens(const mlxrt_session *s, size_t *n);

/* ---- chat with message lists -------------------------------------------------------------------
 * Same threading rule as every chat call: one thread at a time per chat. */
typedef struct mlxrt_message { const char *role; const char *content; } mlxrt_message;
/* Replaces the chat's conversation (roles "system", "user", "assistant", "tool"); a final
 * assistant message is a prefill that the next answer continues: the conversation before it is
 * rendered with the generation prompt (the opening of the model's turn) and the prefill text is
 * appended verbatim, so the answer continues it; respond keeps prefill + answer as that
 * message. Copies the strings (the caller keeps ownership of msgs). The system prompt of the
 * chat's options is not added: a list that wants one includes it. Roles the chat's renderer
 * does not know (today "tool") fail at mlxrt_chat_respond. Needs use_template = 1. */
int mlxrt_chat_set_messages(mlxrt_chat *c, const mlxrt_message *msgs, size_t n, mlxrt_error *err);
/* Answers the conversation as it stands (mlxrt_chat_turn = append a user message + respond);
 * the answer is appended to the conversation (or extends the prefill). On failure the
 * conversation is as it was. With use_template = 0 it continues the raw text so far. */
int mlxrt_chat_respond(mlxrt_chat *c, mlxrt_text_fn fn, void *user, mlxrt_gen_stats *stats,
                       mlxrt_error *err);
/* Gemma 4 tool calls in generated text: `<|tool_call>call:NAME{key:<|"|>str<|"|>,n:1}<tool_call|>`
 * (gemma-architecture.md §13-14). Returns a malloc'd JSON array (mlxrt_free) of
 * {"type":"function","function":{"name":NAME,"arguments":"<JSON object text>"}} ("[]" when none)
 * and, when content is non-NULL, *content = the text with the calls removed (mlxrt_free).
 * Argument values: <|"|>…<|"|> strings (verbatim), numbers, true/false/null, nested {…} and
 * […]; keys bare words; standard JSON is accepted too. Several calls (in one block or several)
 * come in order. Malformed call syntax, an unterminated block, a stray <tool_call|> or invalid
 * UTF-8 is an error naming the offset (NULL; *content untouched). m may be NULL (the format is
 * Gemma 4's for every model). Thread-safe. */
char *mlxrt_parse_tool_calls(const mlxrt_model *m, const char *text, size_t len, char **content,
                             mlxrt_error *err);

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
