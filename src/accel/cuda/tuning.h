/* The CUDA decoder's tuning constants, in one place. Each was chosen by measurement on the H200
 * (sm_90, 132 SMs) on the Gemma 4 31B nvfp4 shapes; docs/DECODE.md gives the figures. They are
 * compile-time constants: no setting changes them at run time. */
#ifndef MLXRT_CUDA_TUNING_H
#define MLXRT_CUDA_TUNING_H

/* ---- mat-vec (qmv_tc.cu) ---------------------------------------------------------------- */
/* Shared-memory weight stages in flight per block. Fewer stages leave room for more resident
 * blocks: the one-row kernels (nvfp4, affine 4-bit g32/g64) with 2 stages hold 9 blocks per SM
 * instead of 6 (nvfp4 lm_head 88.7 % of the read bandwidth against 84.8 % with 3; tg128
 * +2.4 %); nvfp4's batch kernel 3 (3-4 % ahead of 4); every other kernel 4. A one-row nvfp4
 * launch takes one stage where its grid then fits one wave and would not with two (the E4B's
 * gate|up: 1280 tiles, 1188 resident blocks with two stages, 1320 with one; tg128 +1.4 %, the
 * same bits, H100); four stages wherever a grid fits one wave of them lost 3 %. */
#define QMV_STAGES_ONE_ROW 2
#define QMV_STAGES_NVFP4_BATCH 3
#define QMV_STAGES_OTHER 4
/* Weight stages a block issues before it waits for the kernel that writes its x: those bytes
 * stream during the producer's tail (tg128 124.3 t/s with 2, 122.8 with 1, 120.9 with 3). */
#define QMV_EARLY_STAGES 2
/* k splits of the batch kernel (ck_qmv_rows_splits): each at least QMV_ROWS_SPLIT_UNITS units
 * (64 k each), at most QMV_ROWS_MAX_SPLITS. On the 31B at 4 rows (H100, µs, 1 / 2 / 3 / 4 / 6
 * splits): down 51.1 / 38.8 / 32.3 / 34.6 / 33.9, o 15.8 / 16.5 / 14.3 / 15.1 / 15.8 (the rule
 * takes 3 for both); q|k|v 26.9 / 30.0 / 31.2 / 30.9 / 31.5 (it takes 1). */
#define QMV_ROWS_SPLIT_UNITS 32
#define QMV_ROWS_MAX_SPLITS 8
/* k splits of the rows-in-columns kernel (ck_qmv_cols_splits): the count with the least
 * waves × (units per split + QMV_COLS_BLOCK_UNITS), a block's fixed cost counted as that many
 * units (its pipeline's fill and the reduction), each split at least QMV_ROWS_SPLIT_UNITS units.
 * On the 31B (H100, µs, 1 / 2 / 3 / 4 splits) at 8 rows: down 34.3 / 37.7 / 28.9 / 32.7, the full
 * layers' o 25.8 / 28.5 / 24.2 / 24.7, o 13.9 / 16.1 / 15.0 / 16.4 (it takes 3, 3 and 1); at 4
 * rows o 13.1 / 10.9 / 13.3 / 13.4, down 28.2 / 26.9 / 29.8 / 27.0 (2 and 2); at 2 rows 3 for
 * both, as the one-wave rule before it. The whole step at B = 6 / 8 +2.2 / +2.1 %. */
#define QMV_COLS_BLOCK_UNITS 48
/* A k split of a one-wave product gives each block at least this many units (3 stages of 16):
 * the 31B's down with 3 splits (7 or 8 blocks per SM instead of 2 or 3) gained tg128 1.3-1.9 %,
 * its o with 3 (43 units per block) lost 1.4 %; the E4B's down (160 tiles of 160 units) in 3
 * splits instead of 1 (the floor at 96): tg128 +1.5 % (H100). */
#define KS_MIN_UNITS 48

/* ---- decode attention (attention*.cu) ----------------------------------------------------- */
/* The split passes: at least SPLIT_KEYS keys per split and enough splits for
 * SPLIT_BLOCKS_PER_SM blocks of the scores kernel on every SM (its 119 registers allow 4 blocks
 * of 128 threads), at most MAX_SPLITS: 16 keys / 4 per SM ran tg128 121.6 / 102.0 t/s at depths
 * 0 / 32768 against 118.8 / 98.5 with 32 keys / 8 per SM. */
#define SPLIT_KEYS 16
#define SPLIT_BLOCKS_PER_SM 4
#define MAX_SPLITS 256
/* The one-cluster attention (one launch) while at most CLUSTER_KEYS keys are live: alone it
 * matches the split passes up to 128 keys and loses 6 us at 512, while the step saves two
 * launches per layer. */
#define CLUSTER_KEYS 256
/* Over bf16 K the deep contexts' p.v pass (V streamed by bulk copies) once more than DEEP_KEYS keys
 * are live: ahead of the register path from depth 32768 on (+0.6-1.2 %, +6.7 % at 131072), behind
 * at 4096 (-1.0 %); alone (mlxrt-attn-bench --deep, a full layer) it loses up to 24576 keys. */
#define DEEP_KEYS 32768
/* Over K from V or a compressed K the one pass over the rows once more than ONEPASS_KEYS keys are
 * live (mlxrt-attn-bench --kfv, a full layer of the 31B, 256 splits: 64.0 / 63.0 us one pass / two
 * passes at 8192 keys, 70.2 / 77.5 at 12288, 75.8 / 89.2 at 16384, 98.9 / 136.6 at 32768; tg128
 * +2.4 % at depth 16384, +8.3 % at 65536, 92.4 t/s at 262144 against 78.2 with bf16 K; planar3
 * tg64 +6.4 % at 16384, +15.5 % at 65536 against its register-path scores, H100). */
#define ONEPASS_KEYS 8192

/* ---- the prompt pass (cuda_decoder_prefill.c) --------------------------------------------- */
/* A prompt runs in chunks of up to PF_CHUNK tokens, each layer once per chunk. */
#define PF_CHUNK 512
/* Up to PF_GEMM_MIN rows the mat-vec streams the packed weight ceil(T/8) times (≤ 4 × 0.56 B per
 * parameter for 4-bit), less than dequantizing it (0.56 B read + 2 B written + 2 B read by the
 * GEMM); above, the GEMM's one dequantization is amortised over the rows. */
#define PF_GEMM_MIN 32
/* The grouped product of a chunk's experts (qmm_grouped.cu): a block takes a run of up to
 * QMM_GROUP_BATCHES activation batches of 8 rows on one expert and QMM_GROUP_TILES 16-row tiles
 * (one per warp), QMM_GROUP_STAGES stages of weights and x in flight. On the 26B-A4B's shapes
 * (pp512): 2 stages (4 blocks per SM) 3 % ahead of x read from L1/L2 instead of staged, 3 stages
 * (2 blocks per SM) 21 % behind; 8 tiles per block 4 % behind, 8 batches per run 31 % behind. */
#define QMM_GROUP_BATCHES 4
#define QMM_GROUP_TILES 4
#define QMM_GROUP_STAGES 2

/* The batched step's product (qmm_rows.cu): ROWS_TILES 16-row tiles per block (one per warp),
 * ROWS_STAGES stages of ROWS_UNITS units of weights and every row's x in flight, at most
 * ROWS_MAX rows per launch.
 * The k range is split until the tile groups give ROWS_BLOCKS_PER_SM blocks per SM, each split
 * at least ROWS_SPLIT_UNITS units long, at most ROWS_MAX_SPLITS splits. */
#define ROWS_TILES 8
#define ROWS_STAGES 2
#define ROWS_UNITS 4
#define ROWS_MAX 64
/* From ROWS_MIN rows on the products take this kernel (nvfp4 on sm_90a: ck_qmm_wg); fewer, one
 * batch of the mat-vec's batch kernel (ck_qmv_rows). At 12 rows (two batches of 8) a step's
 * products took 15.22 ms through the batch kernel, 12.22 through this one and 10.10 through
 * ck_qmm_wg; at 8 rows 8.92 / 10.44 / 9.44 (mlxrt-rows-bench, H100). */
#define ROWS_MIN 9
#define ROWS_BLOCKS_PER_SM 2
#define ROWS_SPLIT_UNITS 16
#define ROWS_MAX_SPLITS 16

/* The batched step's nvfp4 product on the warpgroup tensor cores (qmm_wg.cu): WG_TILES 16-row
 * tiles per block (two warpgroups; k splits as many as fill one round of the resident blocks,
 * ck_qmm_wg_splits, with ROWS_SPLIT_UNITS and ROWS_MAX_SPLITS), WG_STAGES stages of WG_UNITS
 * units (64 k) of weights and every row's x in flight; up to 16 rows, registers for
 * WG_BLOCKS_SMALL blocks per SM. On the 31B's sliding-layer products (H100,
 * µs at B = 4 / 16 / 32 / 64): 145 / 166 / 247 / 330 with these; 16 tiles per block 259-403 /
 * 284-419 / 321-439 / 413-535; 2 blocks per SM up to 16 rows 213 at 16; 4 stages 189 / 214 /
 * 308 / 394; a producer warp and per-slot release 156 / 183 / 260 / 349. At 16 rows, 3 stages of 3
 * units 166.1 and 4 stages of 2 187.9 against 154.3 (k splits by ck_qmm_wg_splits). */
#define WG_TILES 8
#define WG_UNITS 4
#define WG_STAGES 2
#define WG_BLOCKS_SMALL 3
/* From WG_MIN rows on (ROWS_MIN); fewer take ck_qmv_rows: the whole step at B = 4 ran 266.4
 * t/s through this kernel against 269.9 through that one (H100, same call), and with that
 * kernel's k splits the four products of a sliding layer take 133.9 against 143.2 us. */
#define WG_MIN ROWS_MIN
/* From STREAM_ATT_MIN rows on, a batched step's attention streams each row and KV head through
 * one block (attention_stream.cu); fewer rows take the same kernel's split form on the sliding
 * rings (a cluster of 4 blocks per row and KV head: 21.1 against the one-launch cluster kernel's
 * 38.8 us at B = 4, H100) and the split passes on the full layers.
 * A full layer's keys stream only from STREAM_FULL_BLOCKS blocks (rows × KV heads) on: its block
 * reads K twice (K from V) and does GQA 8's arithmetic alone, so with fewer blocks the split
 * passes win. The 31B's full layer on an H200 (µs, stream against split passes, B = 16 / 32 /
 * 64): positions 512–639 124.7 / 127.3 / 163.4 against 87.1 / 156.8 / 290.4; positions
 * 8192–8319 1566.6 / 1571.7 / 2078.6 against 697.2 / 1365.2 / 2691.6. Below 256 blocks the
 * streaming kernel's split form (4 or 8 blocks per row and KV head) does not beat the split
 * passes either: at 8192–8319 402.1 / 887.3 and 263.2 / 725.5 against 205.1 / 727.5 µs at
 * B = 4 / 16 (H100; dev/cuda/attention_stream_split_full.diff). */
#define STREAM_ATT_MIN 16
#define STREAM_FULL_BLOCKS 256

/* ---- the KV cache (cuda_decoder.c) ------------------------------------------------------ */
/* Positions backed by pages beyond the last one fed: the attention kernels read whole tiles
 * (up to 128 keys) past the live ones, and must not touch an unmapped page. */
#define KV_MARGIN 1024

/* ---- the step ------------------------------------------------------------------------------ */
/* Tokens copied to the device's token history per host-to-device copy. */
#define STAGE_TOKENS 4096

/* The most sequences a decoder's batched decode holds (cuda_decoder_batch.c). */
#define DEC_BATCH_MAX 256
/* The batched step's attention: at least this many keys per split (the rows fill the device;
 * the split shape is fixed per decoder, whatever the batch, so a row's bits do not change) */
#define BATCH_SPLIT_KEYS 64

#endif
