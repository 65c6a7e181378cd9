/* The in-graph timeline of the whole-step decoder (MLXRT_CUDA_TIMELINE=1).
 *
 * The per-kernel profile (cuda_prof.h) times eager launches; the decode step runs as a graph
 * with programmatic dependent launches, where a kernel's cost is what it adds to the chain.
 * Here every kernel launched through ck_launch stamps %globaltimer once its wait for its
 * predecessor returns (ck_launch.cuh), during graph replays only, and the launches of each
 * captured graph are logged with the decoder's current label. The gap from one stamp to the
 * next is the earlier kernel's share of the step as the graph ran it; the table (label,
 * kernel, calls, mean µs, share) goes to stderr when the decoder is freed.
 *
 * The stamps come in execution order and the log in capture order, so the step's branches (the
 * MoE shared MLP, the per-layer inputs) run in order on one stream while the timeline records,
 * as under the profile; a stamp earlier than the one before it is counted and left out.
 *
 * MLXRT_CUDA_TIMELINE=2 also has each grid's last block stamp as it reaches its wait and as
 * the wait returns (two more columns: whether a grid was still being placed when its
 * predecessor completed).
 *
 * One timeline at a time (the launch log is global, like the mat-vec knobs): the decoder that
 * turns it on owns it until ctl_report_free. The stamps cost a constant load and a branch per
 * thread when off. */
#ifndef MLXRT_CUDA_TIMELINE_H
#define MLXRT_CUDA_TIMELINE_H

#include "mlxrt.h"

/* Turns the timeline on when MLXRT_CUDA_TIMELINE=1 (device buffers for the stamps); 0 when
 * off or on, -1 when the variable has another value or the buffers cannot be made. */
int ctl_init(mlxrt_error *err);
int ctl_on(void);
/* The label of the launches that follow (a string constant; the profile's marks). */
void ctl_label(const char *label);
/* Logs the launches enqueued between these two as graph g's (0..CTL_GRAPHS-1, cuda_timeline_agg.h). */
void ctl_capture_begin(int g);
void ctl_capture_end(void);
/* Around one replay of graph g on `stream`: stamps on before it, off after it (stream-ordered). */
int ctl_replay_begin(int g, void *stream, mlxrt_error *err);
int ctl_replay_end(void *stream, mlxrt_error *err);
/* Reads the stamps back on the replays' stream (idle, and not yet destroyed), prints the table,
 * frees everything. */
void ctl_report_free(const char *title);

#endif
