/* Untrusted-input plumbing: message escaping and elision (base/error.c), the regular-file
 * opener (base/file.c), config numbers that overflow, and every fixture loading with the
 * checks against the config (unused tensors, non-finite values, token ids). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "mlx/config.h"
#include "mlx/model.h"
#include "test_util.h"

static void test_escaping(void) {
  mlxrt_error err;
  mx_fail(&err, "tensor '%s' bad", "a\nb\x1b[31m\xff\x7f\tc\xc3\xa9");
  CHECK_MSG(err, "tensor 'a\\nb\\x1b[31m\\xff\\x7f\\tc\xc3\xa9' bad");
  CHECK(strchr(err.msg, '\n') == NULL && strchr(err.msg, 0x1b) == NULL);
  /* prefixing does not escape twice */
  mx_prefix(&err, "dir\x01");
  CHECK_MSG(err, "dir\\x01: tensor 'a\\nb\\x1b");
  /* a too long message keeps its start and its end (the cause) */
  char longp[3000];
  memset(longp, 'p', sizeof longp - 1);
  longp[sizeof longp - 1] = 0;
  mx_fail(&err, "%s: File name too long", longp);
  CHECK(strlen(err.msg) < sizeof err.msg);
  CHECK_MSG(err, " ... ");
  CHECK(strstr(err.msg, "File name too long") != NULL && err.msg[0] == 'p');
  /* an overlong or surrogate UTF-8 sequence is invalid */
  mx_fail(&err, "%s", "\xc0\xaf\xed\xa0\x80");
  CHECK_MSG(err, "\\xc0\\xaf\\xed\\xa0\\x80");
}

static void test_regular_files(void) {
  char dir[] = "/tmp/mlxrt-test-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char fifo[64], sub[64];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  snprintf(sub, sizeof sub, "%s/sub", dir);
  CHECK(mkfifo(fifo, 0600) == 0 && mkdir(sub, 0700) == 0);
  mlxrt_error err;
  size_t len;
  CHECK(mx_read_file(fifo, &len, &err) == NULL); /* returns at once: no writer needed */
  CHECK_MSG(err, "fifo: is not a regular file");
  CHECK(mx_read_file(sub, &len, &err) == NULL);
  CHECK_MSG(err, "sub: is a directory");
  unlink(fifo);
  rmdir(sub);
  rmdir(dir);
}

static void test_config_overflow(void) {
  static mx_config cfg;
  mlxrt_error err;
  CHECK(mx_config_parse("{\"model_type\": \"gemma3_text\", \"rms_norm_eps\": 1e999}", "c.json",
                        &cfg, &err) != 0);
  CHECK_MSG(err, "'rms_norm_eps' must be a positive finite number, got a number that is not finite");
  CHECK(strstr(err.msg, "null") == NULL);
  CHECK(mx_config_parse("{\"model_type\": \"gemma3_text\", \"hidden_size\": -1e999}", "c.json",
                        &cfg, &err) != 0);
  CHECK_MSG(err, "not finite");
}

/* Every fixture loads: none carries a tensor the loader calls unused or a non-finite value. */
static void test_fixtures_load(void) {
  static const char *const F[] = {"gemma3-nested-affine4-g64", "gemma3-nested-bf16",
                                  "gemma3-text-nvfp4", "gemma4-dense-mxfp4",
                                  "gemma4-e2b-affine8-g32", "gemma4-moe-nvfp4",
                                  "gemma4-nested-nvfp4", "gemma4-unified-affine4-g64",
                                  "gemma4-unified-nvfp4"};
  for (size_t i = 0; i < sizeof F / sizeof F[0]; i++) {
    char p[256];
    snprintf(p, sizeof p, "tests/fixtures/models/%s", F[i]);
    mlxrt_error err = {{0}};
    mx_model *m = mx_model_open(p, &err);
    CHECKF(m != NULL, "%s: %s", F[i], err.msg);
    mx_model_close(m);
  }
}

int main(void) {
  alarm(60); /* a FIFO that blocks must fail the test, not hang it */
  test_escaping();
  test_regular_files();
  test_config_overflow();
  test_fixtures_load();
  TEST_END();
}
