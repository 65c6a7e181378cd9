/* The generated text on its way out, as a pipeline of two pure filters: stop strings (text up to
 * the first stop string goes out, the rest is dropped; a piece that may begin one is held back
 * across token boundaries) and tool-call markers (`<|tool_call>...<tool_call|>` segments are cut
 * out of the text and handed over whole). Both keep back only what could still turn into a
 * match, so text streams with the least delay. */
#ifndef MLXRT_TOOLS_SERVE_TEXT_H
#define MLXRT_TOOLS_SERVE_TEXT_H

#include <stddef.h>

typedef struct serve_buf {
  char *p;
  size_t len, cap;
} serve_buf;
/* Appends n bytes (keeps a NUL after them); -1 when out of memory. */
int serve_buf_add(serve_buf *b, const char *s, size_t n);
int serve_buf_printf(serve_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void serve_buf_free(serve_buf *b);

/* Where filtered text goes: kind 0 = plain text, 1 = a whole tool-call segment. */
typedef void (*serve_text_fn)(void *user, int kind, const char *s, size_t n);

/* Length of the longest proper prefix of pat that s[0..n) ends with (0 when none). */
size_t serve_partial_suffix(const char *s, size_t n, const char *pat, size_t pat_len);

typedef struct serve_stop_filter {
  char *const *stop; /* borrowed */
  int n_stop;
  serve_buf held;
  int stopped;       /* a stop string was found: later text is dropped */
} serve_stop_filter;
void serve_stop_init(serve_stop_filter *f, char *const *stop, int n_stop);
/* Takes a piece of text; passes on what can no longer start a stop string. Returns 1 when a stop
 * string completed (the text before it was passed on). -1: out of memory. */
int serve_stop_push(serve_stop_filter *f, const char *s, size_t n, serve_text_fn fn, void *user);
/* The answer ended: passes on what was held back (unless stopped). */
void serve_stop_finish(serve_stop_filter *f, serve_text_fn fn, void *user);
void serve_stop_free(serve_stop_filter *f);

#define SERVE_TOOL_OPEN "<|tool_call>"
#define SERVE_TOOL_CLOSE "<tool_call|>"
typedef struct serve_tool_splitter {
  int enabled;  /* 0: everything is plain text */
  int inside;   /* within a call segment */
  serve_buf buf;
} serve_tool_splitter;
void serve_tool_init(serve_tool_splitter *t, int enabled);
int serve_tool_push(serve_tool_splitter *t, const char *s, size_t n, serve_text_fn fn, void *user);
/* The answer ended: an unclosed call goes out as plain text. */
void serve_tool_finish(serve_tool_splitter *t, serve_text_fn fn, void *user);
void serve_tool_free(serve_tool_splitter *t);

#endif
