/* Session pools (mlxrt.h mlxrt_pool_*): a step pool (step_pool.h) whose slots are public sessions. */
#include <stdlib.h>

#include "api_internal.h"
#include "base/error.h"
#include "mlx/step_pool.h"

struct mlxrt_pool {
  mlxrt_model *model;
  mx_pool *p;
};

mlxrt_pool *mlxrt_pool_new(mlxrt_model *M, int slots, int64_t capacity, mlxrt_error *err) {
  if (mx_api_check_slots(M, slots, capacity, "session pool", err)) return NULL;
  mlxrt_pool *P = mx_calloc(1, sizeof *P, err);
  if (!P) return NULL;
  P->model = M;
  if (!(P->p = mx_pool_create(M->m, M->b, slots, capacity, err))) {
    mx_prefix(err, "session pool");
    free(P);
    return NULL;
  }
  return P;
}

void mlxrt_pool_free(mlxrt_pool *P) {
  if (!P) return;
  mx_pool_free(P->p);
  free(P);
}

mlxrt_session *mlxrt_pool_session_new(mlxrt_pool *P, mlxrt_error *err) {
  mlxrt_session *S = mx_calloc(1, sizeof *S, err);
  if (!S) return NULL;
  S->model = P->model;
  S->s = mx_session_create_pooled(P->model->m, P->model->b, P->p, err);
  if (!S->s || !(S->ids = mx_malloc((size_t)mx_session_capacity(S->s) * sizeof *S->ids, err))) {
    mx_session_free(S->s);
    free(S);
    return NULL;
  }
  return S;
}

void mlxrt_pool_get_stats(mlxrt_pool *P, mlxrt_pool_stats *st) {
  mx_pool_stats ps;
  mx_pool_get_stats(P->p, &ps);
  *st = (mlxrt_pool_stats){ps.steps, ps.rows, ps.prompt_pieces};
}
