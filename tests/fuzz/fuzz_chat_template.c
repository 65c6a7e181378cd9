/* libFuzzer target: chat template rendering and the thought-channel splitter. Byte 0 picks the
 * options (family, generation prompt, thinking, large variant); the rest is a list of
 * messages separated by NUL bytes, each a role selector byte then its content (selector 7:
 * the role is the content up to the first ':' — an arbitrary role). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlx/chat_template.h"

static void require(int cond) {
  if (!cond) abort();
}

static void sink(void *user, int is_thought, const char *text, size_t len) {
  size_t *total = user;
  (void)is_thought;
  require(len == 0 || text != NULL);
  *total += len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const ROLES[] = {"system", "user", "assistant", "model",
                                      "developer", "tool", "user"};
  if (size < 1) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  mx_chat_options opt = {(data[0] & 1) ? MX_CHAT_GEMMA4 : MX_CHAT_GEMMA3, (data[0] >> 1) & 1,
                         (data[0] >> 2) & 1, (data[0] >> 3) & 1};
  mx_chat_msg msgs[64];
  size_t n = 0;
  for (char *p = text + 1; p < text + size && n < 64;) {
    size_t len = strlen(p);
    char *next = p + len + 1;
    if (len == 0) {
      p = next;
      continue;
    }
    unsigned sel = (unsigned char)p[0] % 8;
    char *content = p + 1;
    const char *role;
    if (sel == 7) {
      char *colon = strchr(content, ':');
      role = content;
      if (colon) {
        *colon = 0;
        content = colon + 1;
      }
    } else {
      role = ROLES[sel];
    }
    msgs[n++] = (mx_chat_msg){role, content};
    p = next;
  }
  mlxrt_error err;
  char *out = mx_chat_render(msgs, n, &opt, &err);
  if (out) {
    require(strncmp(out, "<bos>", 5) == 0);
    char *thought = NULL, *answer = NULL;
    if (mx_thought_split(out, &thought, &answer, &err) == 0) {
      free(thought);
      free(answer);
    }
    size_t total = 0;
    mx_thought_stream ts;
    mx_thought_stream_init(&ts, (data[0] >> 4) & 1);
    size_t ol = strlen(out);
    for (size_t i = 0; i < ol; i += 7)
      mx_thought_stream_feed(&ts, out + i, ol - i < 7 ? ol - i : 7, sink, &total);
    mx_thought_stream_finish(&ts, sink, &total);
    require(total <= ol);
    free(out);
  } else {
    require(strchr(err.msg, '\n') == NULL);
  }
  free(text);
  return 0;
}
