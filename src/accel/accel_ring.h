/* The sliding-attention rings of a whole-step decoder hold ACCEL_RING_SLACK positions more than
 * the attention window: position p lives in slot p % (window + ACCEL_RING_SLACK), and a query
 * attends to the last `window` positions only. The slack lets a session take back up to
 * ACCEL_RING_SLACK + 1 positions after the ring has wrapped (a rejected draft; a chat turn whose
 * re-rendered history differs inside the last answer) without losing history the window still
 * needs. Backend-neutral (the CPU decoder and the CUDA kernels include it). */
#ifndef MLXRT_ACCEL_RING_H
#define MLXRT_ACCEL_RING_H

#define ACCEL_RING_SLACK 32

#endif
