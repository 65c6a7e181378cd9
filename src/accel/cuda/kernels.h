/* The CUDA kernels' C boundary: how a resident weight is laid out on the device, and the
 * launchers (extern "C", defined in the .cu files). Launchers return a cudaError_t as int
 * (0 = success): the launch status, never a synchronisation.
 *
 * Fast formats are repacked at upload into 16-row tiles whose bytes one warp streams with
 * one 16-byte load per lane, each lane's 16 bytes already in the register order of the
 * m16n8k16 tensor-core fragment (docs/CUDA.md "Layouts"). Everything else keeps MLX's own
 * layout and runs the generic kernel. */
#ifndef MLXRT_CUDA_KERNELS_H
#define MLXRT_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  CK_AFF4 = 0, /* affine 4-bit, g32/64/128, bf16 or f16 scales */
  CK_AFF8,     /* affine 8-bit, g32/64/128, bf16 or f16 scales */
  CK_NVFP4,    /* E2M1 codes, E4M3 scale per 16 (scale folded into the fp16 operand) */
  CK_MXFP4,    /* E2M1 codes, E8M0 scale per 32 */
  CK_MXFP8,    /* E4M3 codes, E8M0 scale per 32 */
  CK_DBF16,    /* dense bf16 */
  CK_DF16,     /* dense f16 */
  CK_GENERIC,  /* anything else: MLX layout, one warp per row, float decode */
  CK_NFORMATS
} ck_format;

/* Mirrors accel_mode / accel_dtype values (kept numeric so this header needs no accel.h). */
typedef struct ck_layout {
  int fmt;          /* ck_format */
  int mode;         /* accel_mode */
  int bits, group_size;
  int dense_dtype;  /* accel_dtype */
  int scales_dtype; /* accel_dtype */
  int64_t slabs;    /* experts, or 1 */
  int64_t rows, cols;
  int64_t tiles;    /* ceil(rows / 16) (fast formats) */
  int64_t nunits;   /* cols / unit_k (fast formats) */
  /* device buffers: fast = repacked codes / repacked scales; generic = MLX parts as loaded */
  void *w, *s, *b;
  size_t w_slab, s_slab, b_slab; /* bytes of one expert slab in each buffer */
} ck_layout;

/* k-values one warp consumes per step (a "unit"): what the x layout and repack align to. */
int ck_unit_k(int fmt, int group_size);
/* Bytes of the repacked code and scale buffers for one slab (fast formats). */
size_t ck_rep_w_bytes(const ck_layout *L);
size_t ck_rep_s_bytes(const ck_layout *L);
/* Padded k of the x layout for this weight (multiple of the unit). */
int64_t ck_xp_cols(const ck_layout *L);

/* Repacks raw MLX parts (device memory, all slabs) into L->w / L->s (allocated by caller). */
int ck_repack(const ck_layout *L, const void *raw_w, const void *raw_s, const void *raw_b,
              void *stream);

/* x [nb ≤ 8, cols] bf16 → fragment-ordered x (fp16 scaled by 2^xexp[n], or bf16 as is for
 * dense bf16), group sums xs[group][8] (affine) and xexp[8]. */
int ck_xprep(const ck_layout *L, const uint16_t *x, int nb, uint16_t *xp, float *xs, int *xexp,
             float *pmax, void *stream);
/* Floats of the scratch ck_xprep needs for cols (per-block maxima). */
size_t ck_xprep_pmax_floats(int64_t cols);
/* ck_xprep for one row (nb = 1) whose producer already wrote pmax[b] = max|x| over values
 * [b·ck_xprep_block(), (b+1)·ck_xprep_block()) for every block b: skips the max pass. */
int ck_xprep_premax(const ck_layout *L, const uint16_t *x, uint16_t *xp, float *xs, int *xexp,
                    const float *pmax, void *stream);
/* ck_xprep for one row with the exponent e given instead of the row maximum's (no maxima
 * read): the caller's bound must keep |x|·2^e below 2^15. */
#define CK_XE_ROWMAX (-1000)
int ck_xprep_fixed(const ck_layout *L, const uint16_t *x, uint16_t *xp, float *xs, int *xexp, int e, void *stream);
int ck_xprep_block(void);
/* ck_xprep of nbatch batches of nb ≤ 8 rows: batch b's rows x + b·nb·cols into the layout
 * ck_qmv_experts reads for its batch b (xp + b·nb·cols, xs + b·(cols/32)·8, xexp + b·8);
 * pmax: 8·nbatch·ceil(cols / ck_xprep_block()) floats of scratch. Fast formats, cols % 32 == 0. */
int ck_xprep_batched(const ck_layout *L, const uint16_t *x, int nb, int nbatch, uint16_t *xp, float *xs, int *xexp,
                     float *pmax, void *stream);
/* ck_xprep_batched of nbatch batches of 8 rows gathered from x: batch b's row n is row
 * map[8b + n] of x (rows of cols), a zero row where map is < 0 (written as zeros). */
int ck_xprep_rows(const ck_layout *L, const uint16_t *x, const int *map, int nbatch, uint16_t *xp, float *xs, int *xexp,
                  float *pmax, void *stream);
/* ck_xprep_batched with every row's exponent e given (ck_xprep_fixed's: no max pass, one launch). */
int ck_xprep_batched_fixed(const ck_layout *L, const uint16_t *x, int nb, int nbatch, uint16_t *xp, float *xs,
                           int *xexp, int e, void *stream);
/* ck_xprep_batched of one row per batch whose block maxima are given (pmax + b·8·nblk: what
 * ck_qmv_experts_geglu's amax holds with amax_z = 8·nblk): no max pass. */
int ck_xprep_batched_premax(const ck_layout *L, const uint16_t *x, int nbatch, uint16_t *xp, float *xs, int *xexp,
                            const float *pmax, void *stream);
/* y[n*ldy + r] for n < nb ≤ 8, rows of slab `slab`; fast formats read xp/xs/xexp, the generic
 * kernel reads x directly. */
/* nz batches of nb rows (2 ≤ nb ≤ 8; ck_xprep_batched's layout) times the weight L (zero: nz
 * zeros on the device, the expert mode's slab list) into y (row r at y + r·ldy), the batches of a
 * tile side by side so that its weights are read from memory once for all. ksplit > 1: the k
 * range in that many splits, split s's partial sums at y + s·kstride (kstride ≥ nz·nb·ldy), for
 * the consumer to add in split order. A row's result is the same bits in any batch, at any z and
 * for any nb (the batch kernel's rows are independent columns of its mma; nb only says which
 * rows of x are read); the splits change the sums' grouping. */
int ck_qmv_rows(const ck_layout *L, const int *zero, int nz, int nb, const uint16_t *xp, const float *xs,
                const int *xexp, float *y, int64_t ldy, int ksplit, int64_t kstride, void *stream);
/* The k splits ck_qmv_rows takes on L for nz batches of nb rows on a device of sms SMs: those
 * that fill one wave of its resident blocks (QMV_ROWS_SPLIT_UNITS, QMV_ROWS_MAX_SPLITS). */
int ck_qmv_rows_splits(const ck_layout *L, int nb, int nz, int sms);
/* nvfp4 at 2 to 8 rows (ck_qmv_cols_supported): the one-row kernel's form with the rows in the
 * mma's columns (qmv_cols.cu). x: nb rows of ck_xprep_batched's layout (cols·2 bytes apart); y,
 * ksplit and kstride as ck_qmv_rows' (kstride ≥ nb·ldy). A row's result is the same bits at
 * any place among the rows and whatever the others hold, for nb = 2, for nb = 3 and 4 alike, and
 * for nb = 5 to 8 alike. */
int ck_qmv_cols_supported(const ck_layout *L, int nb);
int ck_qmv_cols(const ck_layout *L, int nb, const uint16_t *xp, const int *xexp, float *y, int64_t ldy, int ksplit,
                int64_t kstride, void *stream);
/* The k splits ck_qmv_cols takes on L at nb rows on sms SMs (the least waves × block cost). */
int ck_qmv_cols_splits(const ck_layout *L, int nb, int sms);
int ck_qmv(const ck_layout *L, int64_t slab, const uint16_t *x, const uint16_t *xp,
           const float *xs, const int *xexp, int nb, float *y, int64_t ldy, void *stream);
/* The two halves of ck_qmv: tensor-core kernels (qmv_tc.cu) and the generic one. */
int ck_qmv_fast(const ck_layout *L, int64_t slab, const uint16_t *xp, const float *xs,
                const int *xexp, int nb, float *y, int64_t ldy, void *stream);
/* ck_qmv_fast with the k range split over `ksplit` blocks per tile (fast formats only): the
 * partial sums of split s go to y + s·kstride (the caller adds them, in order). */
/* Resident blocks per SM of the kernel ck_qmv_split launches for nb rows (0 when unknown), and
 * the device's SM count in *sms. */
int ck_qmv_occupancy(const ck_layout *L, int nb, int *sms);
int ck_qmv_split(const ck_layout *L, int64_t slab, const uint16_t *xp, const float *xs, const int *xexp, int nb,
                 float *y, int64_t ldy, int ksplit, int64_t kstride, void *stream);
/* ck_qmv_split with `stages` weight stages per block (1: the one-row nvfp4 kernel only; 2–4), where
 * ck_qmv_split chooses (tests: a result does not depend on the count) */
int ck_qmv_split_stages(const ck_layout *L, int64_t slab, const uint16_t *xp, const float *xs, const int *xexp, int nb,
                        float *y, int64_t ldy, int ksplit, int64_t kstride, int stages, void *stream);
/* One row of a gate|up product whose rows are interleaved by 8 (tile t: gate rows 8t … 8t+7,
 * then up rows 8t … 8t+7; fast formats, rows % 16 == 0), with GeGLU in its epilogue: act[i]
 * (bf16) = what dk_geglu makes of gate row i and up row i, bit for bit, and amax[i / apblock]
 * raised to max |act| over its block (amax zeroed before; apblock a multiple of 8). No y. */
int ck_qmv_geglu(const ck_layout *L, const uint16_t *xp, const float *xs, const int *xexp, uint16_t *act,
                 float *amax, int apblock, void *stream);
int ck_qmv_generic(const ck_layout *L, int64_t slab, const uint16_t *x, int nb, float *y,
                   int64_t ldy, void *stream);
/* Products of a stacked weight with experts chosen on the device: for z < nz, slab zslab[z]
 * (none when < 0) times the nb ≤ 8 rows of activation batch z (xper; else of batch 0 for
 * every z; ck_xprep_batched's layout) into y + z·zy (row n at + n·ldy). ids_ready: zslab was
 * written by a kernel that completes before this launch's predecessor passes its wait (two
 * launches back or more), so the slab is read and its first weight stages issued before this
 * kernel's own wait; else after it. Fast formats; one launch of tiles × nz blocks. */
int ck_qmv_experts(const ck_layout *L, const int *zslab, int nz, const uint16_t *xp, const float *xs, const int *xexp,
                   int nb, int xper, float *y, int64_t ldy, int64_t zy, int ids_ready, void *stream);
/* ck_qmv_geglu in the expert mode: one row of x (batch 0) for every z, the slabs' rows
 * interleaved by 8, batch z's activations into act + z·rows/2 and their maxima into
 * amax + z·amax_z (zeroed before). */
int ck_qmv_experts_geglu(const ck_layout *L, const int *zslab, int nz, const uint16_t *xp, const float *xs,
                         const int *xexp, uint16_t *act, float *amax, int apblock, int64_t amax_z, int ids_ready,
                         void *stream);
/* The prompt pass's grouped product (qmm_grouped.cu): activation batch i < nitems of 8 rows
 * (ck_xprep_batched's layout) times slab item_e[i] (item_e NULL: slab 0) into y + i·zy (row n at
 * + n·ldy). Blocks take runs of at most ck_qmm_group_batches() batches of one slab: run r =
 * batches runs[2r] … + runs[2r + 1] (count 0: none; dk_moe_group writes them) for r < nruns, or
 * with runs NULL batches [r·len, r·len + len) ∩ [0, nitems) (1 ≤ len ≤ ck_qmm_group_batches()).
 * Each unit's codes are decoded once per run. Fast formats (not the generic layout); one launch. */
int ck_qmm_group_batches(void);
int ck_qmm_grouped(const ck_layout *L, const int *item_e, const int *runs, int nruns, int nitems, int len,
                   const uint16_t *xp, const float *xs, const int *xexp, float *y, int64_t ldy, int64_t zy,
                   void *stream);
/* The batched decode step's product (qmm_rows.cu): nr ≤ ck_qmm_rows_max() rows of x
 * (ck_xprep_batched's layout, batches of 8 rows, the last one padded) times the weight L into y
 * (row r at y + r·ldy), each weight byte read and decoded once for all rows. ks k splits
 * (ck_qmm_rows_splits; ks > 1 needs part: ks·nr·tiles·16 floats, and cnt: one counter per group
 * of tiles, zero at the first launch and left at zero). A row's bits depend on neither nr nor
 * the row's place. Fast formats (not the generic layout); one launch. */
int ck_qmm_rows(const ck_layout *L, int nr, int ks, const uint16_t *xp, const float *xs, const int *xexp, float *y,
                int64_t ldy, float *part, unsigned *cnt, void *stream);
/* The k splits of L's product on a device of sms SMs (its shape and sms alone decide). */
int ck_qmm_rows_splits(const ck_layout *L, int sms);
/* The splits, and the scratch ck_qmm_rows needs for them at the most rows. */
int ck_qmm_rows_scratch(const ck_layout *L, int sms, int64_t *part_floats, int64_t *counters);
int ck_qmm_rows_max(void);
/* The batched step's nvfp4 product on the warpgroup tensor cores (qmm_wg.cu, sm_90a): nr ≤ 64
 * rows of x in ck_xprep_wg's layout (this launch's rows at its xw) times the weight L into y (row
 * r at y + r·ldy), ks k splits as ck_qmm_rows (ck_qmm_wg_splits; ck_qmm_wg_scratch). A row's bits
 * depend on wg_rows_n(nr), not on the other rows or the row's place. */
int ck_qmm_wg(const ck_layout *L, int nr, int ks, const uint16_t *xw, const int *xexp, float *y, int64_t ldy,
              float *part, unsigned *cnt, void *stream);
int ck_qmm_wg_supported(const ck_layout *L, int cc_major, int cc_minor);
/* ck_qmm_wg's k splits at nr rows on a device of sms SMs (the weight's shape, the row count's
 * wgmma width and the kernel's residency decide), and the scratch they need at up to 64 rows. */
int ck_qmm_wg_splits(const ck_layout *L, int nr, int sms);
void ck_qmm_wg_scratch(const ck_layout *L, int sms, int64_t *part_floats, int64_t *counters);
/* x (T bf16 rows) for ck_qmm_wg: launches of up to 64 rows, launch c's at xw + c·64·cols (xw
 * holds 64·ceil(T/64)·cols values), xexp per row (pmax: ck_xprep_batched's, ceil(T/8) batches). */
int ck_xprep_wg(const ck_layout *L, const uint16_t *x, int T, uint16_t *xw, int *xexp, float *pmax, void *stream);
/* ck_xprep_wg with every row's exponent e given (ck_xprep_fixed's: no max pass, one launch). */
int ck_xprep_wg_fixed(const ck_layout *L, const uint16_t *x, int T, uint16_t *xw, int *xexp, int e, void *stream);
/* The same for the generic layout: batch z is the nb bf16 rows at x + z·xz. */
int ck_qmv_generic_experts(const ck_layout *L, const int *zslab, int nz, const uint16_t *x, int64_t xz, int nb,
                           float *y, int64_t ldy, int64_t zy, void *stream);
/* out[i, cols] bf16 = row ids[i] dequantized as mx.dequantize does (ids already checked). */
int ck_embed(const ck_layout *L, const int32_t *ids, int64_t n, uint16_t *out, void *stream);
/* The decode step's start: tok[0] = all_tokens[*pos] and h[k] = bf16(bf16 E[tok, k] · scale)
 * (float32 holding bf16), in one launch. */
int ck_embed_step(const ck_layout *L, const int32_t *all_tokens, const int *pos, int32_t *tok, float scale, float *h,
                  void *stream);

/* The in-graph timeline (cuda_timeline.h): every kernel launched through ck_launch is noted
 * here (a no-op unless a timeline is recording a capture), and ck_set_timeline points every
 * translation unit's stamp buffer at t (NULL: off), ordered on stream st; with last, t holds
 * 2·cap stamps and n two counters (the grid's last block's stamps: ck_launch.cuh). The stamp
 * pointer is process-wide: one timeline records at a time (cuda_timeline.c enforces it). */
void ck_tl_note(const void *kernel);
int ck_set_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st);

/* A plain streaming read of nbytes (multiple of 16) for the bandwidth reference; sink gets
 * a value that depends on every byte so the compiler keeps the loads. */
int ck_read_bw(const void *buf, size_t nbytes, unsigned *sink, int sms, void *stream);

#ifdef __cplusplus
}
#endif

#endif
