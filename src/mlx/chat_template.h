/* The built-in chat templates of Gemma 3 and Gemma 4, written in C, and the splitter that
 * separates Gemma 4's thought channel from the answer.
 *
 * These are the fallback: a model's own Jinja template (chat_template.jinja or
 * tokenizer_config.json, chat_template_load.h) renders its prompts when it has one, and an
 * override given by the caller beats both (chat_render.h). The built-in renderers take plain
 * role/content conversations only, and render those exactly as the real templates do
 * (tests/test_jinja_corpus.c compares them with transformers' renderings of the published
 * Gemma 3 and Gemma 4 templates).
 *
 * Gemma 3 reproduces the published IT template byte for byte (tests/fixtures/chat/gemma3.json):
 *   <bos><start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n
 * the system text is folded, untrimmed, into the first user turn; every other content is trimmed
 * as jinja's `trim` (Python str.strip()) does; assistant is written as model; roles must alternate
 * user/model starting with user.
 *
 * Gemma 4 follows gemma-architecture.md §14: <bos>, an optional native system turn
 * (<|turn>system\n[<|think|>\n]{system}<turn|>\n), turns <|turn>{user|model}\n{content}<turn|>\n
 * (model contents lose any <|channel>…<channel|> thought, as the real template does), and the
 * generation prompt <|turn>model\n, followed for the large variants (31B, 26B, 12B) with thinking
 * off by the empty thought channel <|channel>thought\n<channel|>.
 *
 * Not covered (the real templates do more): tool declarations, tool calls and tool responses
 * (role "tool" is refused), image/audio content parts, and Gemma 4's merging of two consecutive
 * assistant messages into one model turn (here each message is its own turn). A system or
 * developer message after the first is refused for both families.
 *
 * The rendered text begins with the literal "<bos>": tokenize it without adding another BOS.
 * For KV-cache reuse across turns: the prompt of turn n is a prefix of the prompt of turn n+1
 * when the model's reply is stored as it was generated minus surrounding whitespace — except
 * for Gemma 4 large variants with thinking off, whose generation prompt ends with the empty
 * thought channel that history turns do not repeat (compare token ids and keep the common
 * prefix). */
#ifndef MLXRT_MLX_CHAT_TEMPLATE_H
#define MLXRT_MLX_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "mlxrt.h"

typedef enum { MX_CHAT_GEMMA3 = 3, MX_CHAT_GEMMA4 = 4 } mx_chat_family;

/* role: "system" (Gemma 4 also "developer"), "user", "assistant" or "model". */
typedef struct mx_chat_msg {
  const char *role;
  const char *content; /* UTF-8; may be empty, not NULL */
} mx_chat_msg;

typedef struct mx_chat_options {
  mx_chat_family family;
  int add_generation_prompt; /* end with the opening of a model turn */
  int enable_thinking;       /* Gemma 4: <|think|> in the system turn (default 0) */
  int large_variant;         /* Gemma 4 31B/26B/12B: empty thought channel when thinking is off */
} mx_chat_options;

/* Renders the conversation; returns a malloc'd NUL-terminated string (free() it), or NULL with
 * err set (unknown role, roles out of order for Gemma 3, empty conversation, NULL fields). */
char *mx_chat_render(const mx_chat_msg *msgs, size_t n, const mx_chat_options *opt,
                     mlxrt_error *err);

/* 1 when the code point is whitespace for Python's str.strip() (= jinja's `trim`). */
int mx_chat_is_strip_space(uint32_t cp);

/* ---- Gemma 4 thought channel ------------------------------------------------------------
 * Model output with thinking on looks like <|channel>thought\n…reasoning…<channel|>answer.
 * The text after <|channel> up to the first newline names the channel and is dropped; the
 * channel body is thought text; everything else is answer. Feed the detokenized text with the
 * special tokens <|channel> and <channel|> written out. */
#define MX_THOUGHT_OPEN "<|channel>"
#define MX_THOUGHT_CLOSE "<channel|>"

/* Receives consecutive pieces of one kind; is_thought pieces arrive only when show_thought. */
typedef void (*mx_text_sink)(void *user, int is_thought, const char *text, size_t len);

/* Streaming splitter: a marker split over several pieces is recognized; bytes that might start a
 * marker are held back until the next piece (or mx_thought_stream_finish) decides. */
typedef struct mx_thought_stream {
  int show_thought;
  int state;        /* 0 answer, 1 channel name (up to its newline), 2 thought body */
  size_t held;      /* bytes in hold */
  char hold[16];    /* a possible partial marker */
} mx_thought_stream;

void mx_thought_stream_init(mx_thought_stream *s, int show_thought);
void mx_thought_stream_feed(mx_thought_stream *s, const char *text, size_t len, mx_text_sink sink,
                            void *user);
/* Flushes held bytes (text that turned out not to be a marker). */
void mx_thought_stream_finish(mx_thought_stream *s, mx_text_sink sink, void *user);

/* Whole-text split: *thought and *answer are malloc'd (either may be empty, never NULL on
 * success). Several thought channels are concatenated. Returns 0, or -1 on allocation failure. */
int mx_thought_split(const char *text, char **thought, char **answer, mlxrt_error *err);

#endif
