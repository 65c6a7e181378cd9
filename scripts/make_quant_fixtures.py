#!/usr/bin/env python3
"""Golden data for the CPU quantization kernels, made by MLX itself (CPU stream).

Usage: PY=$(scripts/venv.sh); $PY scripts/make_quant_fixtures.py [OUTDIR]
Writes OUTDIR (default tests/fixtures/quant/) {affine,fp,dense,experts}.safetensors and
VERSIONS.txt. Each case <name> holds:
  <name>.weight/.scales/.biases  what mx.quantize returned (biases for affine only)
  <name>.deq                     mx.dequantize(...) (affine: scales dtype, fp modes: bf16)
  <name>.x1, .x3, .x8            bf16 inputs with 1, 3 and 8 rows (8 takes the CPU mat-mat path)
  <name>.y1, .y3, .y8            mx.quantized_matmul(x, ..., transpose=True) as float32
                                 (dense: x @ w.T)
Case names: affine_b{bits}_g{gs}_{bf16|f16|f32}, nvfp4, mxfp4, mxfp8, dense_{dtype}, and in
experts.safetensors moe_affine_b4_g64 / moe_nvfp4 with rank-3 weights [E, rows, cols], where
yN is [E, N, rows]: expert e's product with xN.
Rows are chosen to exercise the edges: an all-zero row, all-positive and all-negative rows
(negative and positive scales), a constant row, and random rows spanning 1e-3..10 in scale,
a row with max 0.05 (E4M3-subnormal nvfp4 scales) and one with max 1e-3 (zero nvfp4 scales).
"""
import os
import sys

import mlx.core as mx
import numpy as np

ROWS, COLS = 8, 256
RNG = np.random.default_rng(20261129)


def weight_matrix(rows=ROWS, cols=COLS):
    w = np.empty((rows, cols), np.float32)
    w[0] = 0.0
    w[1] = RNG.uniform(0.0, 1.0, cols)
    w[2] = -RNG.uniform(0.0, 2.0, cols)
    w[3] = 0.5
    for r in range(4, rows):
        w[r] = RNG.standard_normal(cols) * 10.0 ** RNG.uniform(-3, 1)
    if rows > 7:  # E4M3-subnormal nvfp4 scales, then scales that underflow to 0
        w[6] *= 0.05 / max(1e-30, float(np.abs(w[6]).max()))
        w[7] *= 1e-3 / max(1e-30, float(np.abs(w[7]).max()))
    return w


def inputs(cols, n):
    return mx.array(RNG.standard_normal((n, cols)).astype(np.float32)).astype(mx.bfloat16)


DT = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}


def quant_case(out, name, w, mode, bits, gs):
    kw = dict(group_size=gs, bits=bits, mode=mode)
    q = mx.quantize(w, **kw)
    wq, scales = q[0], q[1]
    biases = q[2] if mode == "affine" else None
    out[name + ".weight"] = wq
    out[name + ".scales"] = scales
    if biases is not None:
        out[name + ".biases"] = biases
    out[name + ".deq"] = mx.dequantize(wq, scales, biases, **kw)
    cols = w.shape[-1]
    for n in (1, 3, 8):
        x = inputs(cols, n)
        out[f"{name}.x{n}"] = x
        if w.ndim == 2:
            xin = x.astype(w.dtype) if mode == "affine" else x
            y = mx.quantized_matmul(xin, wq, scales, biases, transpose=True, **kw)
        else:  # rank-3: one product per expert slab
            ys = []
            for e in range(w.shape[0]):
                b = biases[e] if biases is not None else None
                ys.append(mx.quantized_matmul(x, wq[e], scales[e], b, transpose=True, **kw))
            y = mx.stack(ys)  # [E, n, rows]
        out[f"{name}.y{n}"] = y.astype(mx.float32)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "quant")
    os.makedirs(outdir, exist_ok=True)
    mx.set_default_device(mx.cpu)

    affine = {}
    for bits in (2, 3, 4, 5, 6, 8):
        for gs in (32, 64, 128):
            w = mx.array(weight_matrix()).astype(mx.bfloat16)
            quant_case(affine, f"affine_b{bits}_g{gs}_bf16", w, "affine", bits, gs)
    for dt in ("f16", "f32"):
        for bits, gs in ((4, 64), (3, 32), (8, 128), (6, 64)):
            w = mx.array(weight_matrix()).astype(DT[dt])
            quant_case(affine, f"affine_b{bits}_g{gs}_{dt}", w, "affine", bits, gs)

    fp = {}
    for mode, bits, gs in (("nvfp4", 4, 16), ("mxfp4", 4, 32), ("mxfp8", 8, 32)):
        w = mx.array(weight_matrix()).astype(mx.bfloat16)
        quant_case(fp, mode, w, mode, bits, gs)

    dense = {}
    for dt in ("bf16", "f16", "f32"):
        w = mx.array(weight_matrix()).astype(DT[dt])
        name = f"dense_{dt}"
        dense[name + ".weight"] = w
        for n in (1, 3, 8):
            x = inputs(COLS, n)
            dense[f"{name}.x{n}"] = x
            y = mx.matmul(x.astype(mx.float32), w.astype(mx.float32).T)
            dense[f"{name}.y{n}"] = y

    experts = {}
    w3 = mx.array(np.stack([weight_matrix(8, 128) for _ in range(3)])).astype(mx.bfloat16)
    quant_case(experts, "moe_affine_b4_g64", w3, "affine", 4, 64)
    quant_case(experts, "moe_nvfp4", w3, "nvfp4", 4, 16)

    for fname, arrays in (("affine", affine), ("fp", fp), ("dense", dense),
                          ("experts", experts)):
        mx.eval(list(arrays.values()))
        mx.save_safetensors(os.path.join(outdir, fname + ".safetensors"), arrays,
                            metadata={"made_by": "scripts/make_quant_fixtures.py",
                                      "mlx": mx.__version__})
    with open(os.path.join(outdir, "VERSIONS.txt"), "w") as f:
        f.write(f"mlx {mx.__version__} (CPU stream), numpy {np.__version__}\n")
        f.write("made by scripts/make_quant_fixtures.py (seed 20261129)\n")


if __name__ == "__main__":
    main()
