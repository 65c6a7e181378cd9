/* Thread safety as include/mlxrt.h states it: one model shared by several threads, each with its
 * own session, gives every thread the text it gets alone; two models in one process run at once.
 * The demo model (Gemma 3 270M, affine 4-bit) on the CPU backend with 2 worker threads, so the
 * products run on the backend's shared worker pool. Greedy tokens of four prompts are computed
 * one session at a time, then by two threads at once on the same model (twice), then by two
 * threads on two models; each thread's tokens must equal its prompt's sequential ones exactly.
 * A watchdog turns a hang into a failure.
 *   test_threads [backend]     (default cpu; scripts/gpu_check.sh runs it with cuda) */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mlxrt.h"
#include "test_util.h"

#define GEN 24
#define NPROMPTS 4

static const int32_t PROMPTS[NPROMPTS][6] = {
    {2, 818, 5279, 529, 7001, 563}, {2, 2094, 1217, 563, 506, 15149},
    {2, 1018, 3649, 236764, 1131, 236789}, {2, 27137, 563, 1623, 529, 672}};

typedef struct job {
  mlxrt_model *m;
  int prompt;
  int32_t out[GEN];
  char err[256];
  int rc;
} job;

/* Greedy tokens after a prompt, in a session of its own. */
static int generate(mlxrt_model *m, int prompt, int32_t *out, char *msg) {
  mlxrt_error err = {{0}};
  mlxrt_session *s = mlxrt_session_new(m, 256, &err);
  int rc = -1;
  if (!s) goto done;
  const int32_t *p = PROMPTS[prompt];
  if (mlxrt_session_feed(s, p, 5, NULL, 0, &err)) goto done;
  int32_t tok = p[5];
  for (int i = 0; i < GEN; i++) {
    if (mlxrt_session_step_greedy(s, tok, &tok, &err)) goto done;
    out[i] = tok;
  }
  rc = 0;
done:
  if (rc) snprintf(msg, 256, "%s", err.msg);
  mlxrt_session_free(s);
  return rc;
}

static void *run_job(void *arg) {
  job *j = arg;
  j->rc = generate(j->m, j->prompt, j->out, j->err);
  return NULL;
}

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "test_threads: no progress in 600 s (a hang): FAIL\n0 passed, 1 failed\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

static char *model_dir(const char *name) {
  static char dir[1024];
  const char *cache = getenv("MLXRT_CACHE"), *home = getenv("HOME");
  if (cache && *cache) snprintf(dir, sizeof dir, "%s/models/%s", cache, name);
  else snprintf(dir, sizeof dir, "%s/.cache/mlxrt/models/%s", home ? home : ".", name);
  return dir;
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "cpu";
  signal(SIGALRM, watchdog);
  alarm(600);
  const char *dir = model_dir("gemma-3-270m-4bit");
  if (access(dir, R_OK)) {
    fprintf(stderr, "test_threads: the demo model is missing (%s): run scripts/prepare_data.sh\n", dir);
    return 1;
  }
  mlxrt_options opt = {backend, 2, 0, NULL, NULL};
  mlxrt_error err = {{0}};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  mlxrt_model *m2 = m ? mlxrt_model_load(dir, &opt, &err) : NULL;
  if (!m || !m2) {
    fprintf(stderr, "test_threads: %s\n", err.msg);
    return 1;
  }
  /* one at a time */
  int32_t want[NPROMPTS][GEN];
  for (int p = 0; p < NPROMPTS; p++) {
    char msg[256];
    CHECKF(!generate(m, p, want[p], msg), "prompt %d alone: %s", p, msg);
  }
  /* the prompts differ: a thread given another's result would be caught */
  CHECK(memcmp(want[0], want[1], sizeof want[0]) != 0 || memcmp(want[2], want[3], sizeof want[2]) != 0);
  /* two threads at once: on one model (two rounds), then on two models */
  for (int round = 0; round < 3; round++) {
    job jobs[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
      jobs[t] = (job){.m = round < 2 ? m : (t ? m2 : m), .prompt = 2 * (round & 1) + t};
      CHECK(pthread_create(&th[t], NULL, run_job, &jobs[t]) == 0);
    }
    for (int t = 0; t < 2; t++) {
      pthread_join(th[t], NULL);
      CHECKF(jobs[t].rc == 0, "round %d thread %d: %s", round, t, jobs[t].err);
      CHECKF(!memcmp(jobs[t].out, want[jobs[t].prompt], sizeof jobs[t].out),
             "round %d thread %d (prompt %d, %s): tokens differ from the prompt's alone", round, t, jobs[t].prompt,
             round < 2 ? "one model" : "two models");
    }
  }
  mlxrt_model_free(m2);
  mlxrt_model_free(m);
  TEST_END();
}
