/* Minimal test harness: CHECK counts failures and keeps going; TEST_END prints the summary
 * line CTest logs and returns the exit code. Fixture paths are relative to the source tree. */
#ifndef MLXRT_TEST_UTIL_H
#define MLXRT_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TEST_SANITIZED: 1 in the ASan+UBSan build, where the heaviest sweeps run a lighter form */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED 0
#endif

static int t_checks, t_failures;

#define CHECK(cond)                                                          \
  do {                                                                       \
    t_checks++;                                                              \
    if (!(cond)) {                                                           \
      t_failures++;                                                          \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                        \
  } while (0)

#define CHECKF(cond, ...)                                                    \
  do {                                                                       \
    t_checks++;                                                              \
    if (!(cond)) {                                                           \
      t_failures++;                                                          \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
    }                                                                        \
  } while (0)

/* The error message must contain every given fragment. */
#define CHECK_MSG(err, fragment)                                                       \
  CHECKF(strstr((err).msg, (fragment)) != NULL, "message \"%s\" lacks \"%s\"", (err).msg, \
         (fragment))

#define TEST_END()                                                                   \
  do {                                                                               \
    printf("%d checks, %d passed, %d failed\n", t_checks, t_checks - t_failures,       \
           t_failures);                                                              \
    return t_failures ? 1 : 0;                                                       \
  } while (0)

#endif
