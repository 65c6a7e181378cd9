#!/usr/bin/env python3
"""Golden values of MLX's own CPU sin, cos, exp and RoPE angles (mlx-cpu numerics).

MLX 0.32 computes sin/cos/exp on the CPU with its own Cephes-style code, not libm (it differs
from libm's sinf in several % of float32 inputs, in the last bit), and mx.fast.rope derives its
frequencies with that exp. tests/test_mlx_cpu_math.c checks src/base/mlx_cpu_math.c and the
RoPE tables of src/mlx/ops.c against this file bit for bit.

Written (safetensors, float32 unless noted):
  x, sin, cos        inputs and mx.sin / mx.cos outputs: random over several ranges, the
                     angles of Gemma 3 RoPE tables, octant boundaries, values past 2^23
  ex, exp            inputs and mx.exp outputs over [-100, 100]
  rope{i}_cos/_sin   [positions, dims/2]: mx.fast.rope on float32 ones/zeros reveals the
                     float32 cos/sin it multiplies by (first half of x = 1, second half = 0);
  rope{i}_pos (int32) and metadata rope{i} = "kind dims base factor rotated" (kind 0 default,
                     1 linear, 2 proportional: mlx-lm's ProportionalRoPE freqs)

Usage: golden_mlx_cpu_math.py [--count N] [--out FILE]
The default (N = 4096) is the committed tests/fixtures/mlx_cpu_math.safetensors; a large N
written elsewhere is the thorough check: build/test_mlx_cpu_math FILE.
"""
import argparse
import math
from importlib.metadata import version
from pathlib import Path

import mlx.core as mx
import numpy as np
from safetensors.numpy import save_file

# (kind, dims, base, factor, rotated): Gemma 3 local and global layers (270M: head_dim 256,
# no scaling; larger Gemma 3: linear factor 8), and a Gemma 4 style proportional partial RoPE.
ROPES = [(0, 256, 10000.0, 1.0, 256), (0, 256, 1000000.0, 1.0, 256), (1, 256, 1000000.0, 8.0, 256),
         (2, 64, 1000000.0, 1.0, 16)]
POSITIONS = [0, 1, 2, 3, 7, 13, 100, 511, 512, 1000, 4095, 8191, 20000, 32767, 131071, 500000]


def rope_tables(kind, dims, base, factor, rotated, pos):
    half = dims // 2
    x = np.zeros((1, 1, 1, dims), np.float32)
    x[..., :half] = 1.0
    cs, sn = [], []
    for p in pos:
        if kind == 2:  # mlx-lm ProportionalRoPE
            e = mx.arange(0, rotated, 2, dtype=mx.float32) / dims
            freqs = mx.concatenate([factor * (base ** e), mx.full(((dims - rotated) // 2,), mx.inf)])
            o = mx.fast.rope(mx.array(x), dims, traditional=False, base=None, scale=1.0, offset=p, freqs=freqs)
        else:  # nn.RoPE: scale 1/factor for linear
            o = mx.fast.rope(mx.array(x), dims, traditional=False, base=base,
                             scale=1.0 / factor if kind == 1 else 1.0, offset=p)
        o = np.array(o).reshape(dims)
        cs.append(o[:half])
        sn.append(o[half:])
    return np.stack(cs), np.stack(sn)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=4096)
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "mlx_cpu_math.safetensors")
    a = ap.parse_args()
    rng = np.random.default_rng(20260)
    n = a.count
    q = max(n // 8, 1)
    parts = [rng.uniform(-4, 4, q), rng.uniform(-100, 100, q), rng.uniform(-4e4, 4e4, q),
             rng.uniform(-2e6, 2e6, q), rng.uniform(-3e7, 3e7, q // 4),
             # octant boundaries k·π/4 and their float neighbours
             np.nextafter(np.float32(np.arange(-q // 2, q // 2) * (math.pi / 4)), np.float32(np.inf)),
             np.float32(np.arange(-q // 2, q // 2) * (math.pi / 4)),
             [0.0, -0.0, 1e-30, -1e-30, 8388607.5, 8388608.0, 8388609.0, -8388609.0]]
    # Gemma 3 RoPE angles: positions × MLX's own frequencies (float32, as mx.fast.rope forms them)
    for base in (10000.0, 1000000.0):
        inv = np.array(mx.exp(mx.arange(0, -128, -1, dtype=mx.float32) * np.float32(math.log(np.float32(base)) / 128)))
        pos = rng.integers(0, 32768, q // 2).astype(np.float32)
        parts.append((pos[:, None] * inv[None, rng.integers(0, 128, 1)]).reshape(-1))
        parts.append((pos[:, None] * inv[None, :]).reshape(-1)[: q])
    x = np.concatenate([np.asarray(p, np.float32).reshape(-1) for p in parts]).astype(np.float32)
    ex = np.concatenate([rng.uniform(-100, 100, q), rng.uniform(-1, 1, q), rng.uniform(-12, 0, q)]).astype(np.float32)
    out = {"x": x, "sin": np.array(mx.sin(mx.array(x))), "cos": np.array(mx.cos(mx.array(x))),
           "ex": ex, "exp": np.array(mx.exp(mx.array(ex)))}
    meta = {"mlx": version("mlx"), "numpy": version("numpy"), "made_by": "scripts/golden_mlx_cpu_math.py"}
    for i, (kind, dims, base, factor, rotated) in enumerate(ROPES):
        c, s = rope_tables(kind, dims, base, factor, rotated, POSITIONS)
        out[f"rope{i}_cos"], out[f"rope{i}_sin"] = c.astype(np.float32), s.astype(np.float32)
        out[f"rope{i}_pos"] = np.array(POSITIONS, np.int32)
        meta[f"rope{i}"] = f"{kind} {dims} {base!r} {factor!r} {rotated}"
    libm = int((np.sin(x).astype(np.float32).view(np.uint32) != out["sin"].view(np.uint32)).sum())
    print(f"{len(x)} sin/cos inputs ({libm} where numpy's float32 sin differs from MLX's), "
          f"{len(ex)} exp inputs, {len(ROPES)} RoPE tables -> {a.out}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(out, str(a.out), metadata=meta)


if __name__ == "__main__":
    main()
