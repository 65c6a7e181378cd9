/* The step pool (step_pool.h). One mutex guards the gather; the thread that completes it (or whose
 * wait for a missing sequence runs out) leads the step: it takes every waiting row, runs the
 * batched step with the mutex released, hands each row its result and wakes them all. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/flag.h"
#include "base/error.h"
#include "mlx/decoder_desc.h"
#include "mlx/step_pool.h"

/* How long a step waits for a sequence of the previous step to come back with its next token:
 * a session's work between two steps (its callback, the text of its token) takes microseconds,
 * a step of a large model milliseconds; a sequence that stays away longer (its thread does
 * something else without leaving) is not waited for again until it steps. */
#define POOL_WAIT_NS 2000000LL
/* A prompt's piece between two turns of the batched steps when the backend's prompt pass does
 * not chunk by a fixed size; otherwise its chunk (accel_backend.decoder_prompt_chunk), so that
 * the pieces cut the prompt where one long call would and give its bits. */
#define POOL_PROMPT_PIECE 512

typedef struct pool_row {
  int used;     /* a session holds the slot */
  int expected; /* stepped in the latest step and has neither come back nor left */
  int pending;  /* waiting for the next step */
  int done;     /* its step ran: rc, err, next (and *logits) are its result */
  int32_t token, next;
  int64_t pos;
  int sampled;
  accel_sample_params sp;
  double u;
  float *logits;
  int rc;
  mlxrt_error err;
} pool_row;

struct mx_pool {
  accel_backend *b;
  mx_decoder *x;
  int slots, vocab;
  int64_t capacity;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pool_row *row;
  int n_pending, n_missing;
  int busy;            /* the decoder runs a step or a prompt piece */
  int prompts_waiting; /* threads waiting to feed a prompt piece */
  int prompt_turn;     /* a step ran while a prompt waited: the decoder is the prompt's next */
  int held;            /* mx_pool_hold: no step starts; prompts run */
  int64_t idle_since;  /* ns: when the decoder last became free (missing rows are waited for from then) */
  mx_pool_stats stats;
  /* the step's rows */
  int *st_slot;
  int32_t *st_tok, *st_next;
  int64_t *st_pos;
  accel_sample_params *st_sp;
  double *st_u;
  float *st_logits; /* [slots, vocab], made when a row first asks for logits */
};

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

mx_pool *mx_pool_create(const mx_model *m, accel_backend *b, int slots, int64_t capacity, mlxrt_error *err) {
  if (!b->decoder_batch_init) {
    mx_fail(err, "the %s backend has no batched decode", b->name);
    return NULL;
  }
  if (b->mlx_cpu_numerics) {
    mx_fail(err, "the %s backend's decoder does not emulate mlx-cpu numerics", b->name);
    return NULL;
  }
  mx_pool *p = mx_calloc(1, sizeof *p, err);
  if (!p) return NULL;
  p->b = b;
  p->slots = slots;
  p->capacity = capacity;
  p->vocab = m->cfg.vocab_size;
  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  const size_t n = (size_t)slots;
  if (!(p->row = mx_calloc(n, sizeof *p->row, err)) || !(p->st_slot = mx_calloc(n, sizeof *p->st_slot, err)) ||
      !(p->st_tok = mx_calloc(n, sizeof *p->st_tok, err)) || !(p->st_next = mx_calloc(n, sizeof *p->st_next, err)) ||
      !(p->st_pos = mx_calloc(n, sizeof *p->st_pos, err)) || !(p->st_sp = mx_calloc(n, sizeof *p->st_sp, err)) ||
      !(p->st_u = mx_calloc(n, sizeof *p->st_u, err)))
    goto fail;
  p->x = mx_decoder_open(m, b, capacity, 0, err);
  if (!p->x) {
    if (!err->msg[0]) {
      const char *why = mx_decoder_unsupported_reason(m);
      mx_fail(err, "the %s backend's decoder does not run this model%s%s%s", b->name, why ? " (it has " : "",
              why ? why : "", why ? ")" : "");
    }
    goto fail;
  }
  if (b->decoder_batch_init(p->x->dec, slots, err)) goto fail;
  p->idle_since = now_ns();
  return p;
fail:
  mx_pool_free(p);
  return NULL;
}

void mx_pool_free(mx_pool *p) {
  if (!p) return;
  mx_decoder_close(p->x);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->row);
  free(p->st_slot);
  free(p->st_tok);
  free(p->st_next);
  free(p->st_pos);
  free(p->st_sp);
  free(p->st_u);
  free(p->st_logits);
  free(p);
}

int mx_pool_slots(const mx_pool *p) { return p->slots; }
int64_t mx_pool_capacity(const mx_pool *p) { return p->capacity; }

int mx_pool_acquire(mx_pool *p) {
  pthread_mutex_lock(&p->mu);
  int slot = -1;
  for (int s = 0; s < p->slots && slot < 0; s++)
    if (!p->row[s].used) slot = s;
  if (slot >= 0) {
    pool_row *r = &p->row[slot];
    memset(r, 0, sizeof *r);
    r->used = 1;
  }
  pthread_mutex_unlock(&p->mu);
  return slot;
}

/* mu held */
static void leave_locked(mx_pool *p, int slot) {
  pool_row *r = &p->row[slot];
  if (!r->expected) return;
  r->expected = 0;
  if (--p->n_missing == 0) pthread_cond_broadcast(&p->cv);
}

void mx_pool_leave(mx_pool *p, int slot) {
  pthread_mutex_lock(&p->mu);
  leave_locked(p, slot);
  pthread_mutex_unlock(&p->mu);
}

void mx_pool_release(mx_pool *p, int slot) {
  pthread_mutex_lock(&p->mu);
  leave_locked(p, slot);
  p->row[slot].used = 0;
  pthread_mutex_unlock(&p->mu);
}

/* mu held: once the wait for the previous step's rows has run out, they are not waited for. */
static void expire_locked(mx_pool *p, int64_t now) {
  if (p->busy || !p->n_missing || now < p->idle_since + POOL_WAIT_NS) return;
  for (int s = 0; s < p->slots; s++) p->row[s].expected = 0;
  p->n_missing = 0;
}

/* mu held: waits for a change, at most until the missing rows' wait runs out. */
static void wait_locked(mx_pool *p) {
  if (p->busy || !p->n_missing) {
    pthread_cond_wait(&p->cv, &p->mu);
    return;
  }
  const int64_t until = p->idle_since + POOL_WAIT_NS;
  struct timespec ts = {(time_t)(until / 1000000000LL), (long)(until % 1000000000LL)};
  pthread_cond_timedwait(&p->cv, &p->mu, &ts); /* timed out or woken: the caller looks again */
}

/* mu held: the decoder is free again; after a step a waiting prompt has the next turn, after a
 * prompt piece the waiting rows have it. */
static void decoder_free_locked(mx_pool *p, int after_step) {
  p->busy = 0;
  p->idle_since = now_ns();
  p->prompt_turn = after_step && p->prompts_waiting > 0;
  pthread_cond_broadcast(&p->cv);
}

/* mu held, the gather ready: runs one batched step of every waiting row. */
static void run_step_locked(mx_pool *p) {
  int n = 0, sampled = 0, logits = 0;
  for (int s = 0; s < p->slots; s++) {
    pool_row *r = &p->row[s];
    r->expected = 0;
    if (!r->pending) continue;
    r->pending = 0;
    p->st_slot[n] = s;
    p->st_tok[n] = r->token;
    p->st_pos[n] = r->pos;
    p->st_sp[n] = r->sampled ? r->sp : (accel_sample_params){0};
    p->st_u[n] = r->u;
    sampled |= r->sampled;
    logits |= r->logits != NULL;
    n++;
  }
  p->n_pending = p->n_missing = 0;
  p->busy = 1;
  p->stats.steps++;
  p->stats.rows += n;
  mlxrt_error err = {{0}};
  int rc = 0;
  if (logits && !p->st_logits &&
      !(p->st_logits = mx_malloc((size_t)p->slots * (size_t)p->vocab * sizeof *p->st_logits, &err)))
    rc = -1;
  pthread_mutex_unlock(&p->mu);
  /* (the rows' results are written while their threads wait for done, which is set under mu) */
  for (int k = 0; k < n; k++) p->row[p->st_slot[k]].rc = rc;
  if (!rc && p->b->decoder_batch_step(p->x->dec, n, p->st_slot, p->st_tok, p->st_pos, sampled ? p->st_sp : NULL,
                                      sampled ? p->st_u : NULL, logits ? p->st_logits : NULL, p->st_next, &err)) {
    /* One sequence's failure (logits that overflowed) stays its own: each row again alone (the
     * same tokens as in the batch up to a near-tie: a backend may choose kernels by the row
     * count), so the others get their tokens. */
    for (int k = 0; k < n; k++) {
      pool_row *r = &p->row[p->st_slot[k]];
      r->err = err;
      r->rc = n > 1 ? p->b->decoder_batch_step(p->x->dec, 1, p->st_slot + k, p->st_tok + k, p->st_pos + k,
                                               sampled ? p->st_sp + k : NULL, sampled ? p->st_u + k : NULL,
                                               logits ? p->st_logits + (size_t)k * (size_t)p->vocab : NULL,
                                               p->st_next + k, &r->err)
                    : -1;
    }
  } else if (rc) {
    for (int k = 0; k < n; k++) p->row[p->st_slot[k]].err = err;
  }
  pthread_mutex_lock(&p->mu);
  for (int k = 0; k < n; k++) {
    pool_row *r = &p->row[p->st_slot[k]];
    r->done = 1;
    if (r->rc) continue;
    r->next = p->st_next[k];
    if (r->logits) memcpy(r->logits, p->st_logits + (size_t)k * (size_t)p->vocab, (size_t)p->vocab * sizeof(float));
    r->expected = 1;
    p->n_missing++;
  }
  decoder_free_locked(p, 1);
}

int mx_pool_step(mx_pool *p, int slot, int32_t token, int64_t pos, const accel_sample_params *sp, double u,
                 float *logits, int32_t *next, mlxrt_error *err) {
  pthread_mutex_lock(&p->mu);
  pool_row *r = &p->row[slot];
  r->token = token;
  r->pos = pos;
  r->sampled = sp != NULL;
  if (sp) r->sp = *sp;
  r->u = sp ? u : 0.0;
  r->logits = logits;
  r->done = 0;
  r->pending = 1;
  p->n_pending++;
  leave_locked(p, slot); /* it came back */
  while (!r->done) {
    expire_locked(p, now_ns());
    if (!p->busy && !p->held && !p->prompt_turn && p->n_pending > 0 && p->n_missing == 0) {
      run_step_locked(p);
      continue;
    }
    wait_locked(p);
  }
  const int rc = r->rc;
  if (rc) {
    if (err) *err = r->err;
  } else *next = r->next;
  r->logits = NULL;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int mx_pool_feed(mx_pool *p, int slot, const int32_t *tokens, int64_t n, int64_t pos, const accel_sample_params *sp,
                 double u, float *logits, int32_t *next, const volatile int *cancel, int64_t *done,
                 mlxrt_error *err) {
  int64_t fed = 0;
  int rc = 0;
  pthread_mutex_lock(&p->mu);
  leave_locked(p, slot);
  while (fed < n) {
    if (mx_flag_get(cancel)) {
      rc = 1;
      break;
    }
    p->prompts_waiting++;
    for (;;) {
      expire_locked(p, now_ns());
      if (!p->busy && (p->prompt_turn || p->held || (p->n_pending == 0 && p->n_missing == 0))) break;
      wait_locked(p);
    }
    p->prompts_waiting--;
    p->prompt_turn = 0;
    p->busy = 1;
    p->stats.prompt_pieces++;
    pthread_mutex_unlock(&p->mu);
    const int64_t piece = p->b->decoder_prompt_chunk > 0 ? p->b->decoder_prompt_chunk : POOL_PROMPT_PIECE;
    const int64_t k = n - fed < piece ? n - fed : piece;
    const int last = fed + k == n;
    rc = p->b->decoder_slot_prompt(p->x->dec, slot, tokens + fed, k, pos + fed, last ? sp : NULL, u,
                                   last ? logits : NULL, last ? next : NULL, err);
    pthread_mutex_lock(&p->mu);
    decoder_free_locked(p, 0);
    if (rc) break;
    fed += k;
  }
  pthread_mutex_unlock(&p->mu);
  if (done) *done = fed;
  return rc;
}

void mx_pool_get_stats(mx_pool *p, mx_pool_stats *st) {
  pthread_mutex_lock(&p->mu);
  *st = p->stats;
  st->waiting = p->n_pending;
  pthread_mutex_unlock(&p->mu);
}

void mx_pool_hold(mx_pool *p, int hold) {
  pthread_mutex_lock(&p->mu);
  p->held = hold != 0;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

int mx_pool_memory(mx_pool *p, accel_memory *m, mlxrt_error *err) {
  if (!p->b->decoder_memory) return mx_fail(err, "the %s decoder does not report its memory", p->b->name);
  pthread_mutex_lock(&p->mu);
  while (p->busy) pthread_cond_wait(&p->cv, &p->mu); /* the decoder is in use: its step first */
  const int rc = p->b->decoder_memory(p->x->dec, m, err);
  pthread_mutex_unlock(&p->mu);
  return rc;
}
