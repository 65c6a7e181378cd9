#!/usr/bin/env python3
"""How far a single-pass decode attention would move from the reference path's rounding.

The reference path (and the CUDA decoder) rounds the scores to bf16, forms the softmax in
float32, rounds p = exp(s - M) / total to bf16, and accumulates sum p*v in float32 before the
output's bf16 rounding. A single pass over the keys (online softmax, as fused decode kernels
do) cannot round p after normalisation: it accumulates exp(s - m_split) * v unrounded and
normalises at the end. This study measures, on random bf16 q/K/V with several score spreads
and context lengths, (1) how often the two give a different bf16 output and by how many
ulps, and (2) which of the two is closer to the exact (float64) attention over the same
bf16-rounded scores. Numbers only; it decides nothing by itself.

Run: $(bash scripts/venv.sh) scripts/study_attention_rounding.py [--seed N]
"""
import argparse

import numpy as np


def bf16(x):
    """Round float32 values to bf16 (nearest even), returned as float32."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def ulps_of_max(a, b):
    """|a - b| in bf16 steps at the largest |a| (outputs near zero would make per-value ulps
    meaningless: they are averages of random values)."""
    top = float(np.abs(a).max())
    step = 2.0 ** (np.floor(np.log2(top)) - 7) if top > 0 else 1.0
    return np.abs(a.astype(np.float64) - b.astype(np.float64)) / step


def reference(s, v):
    """p rounded to bf16 after normalisation; sums in float32 (key order)."""
    m = s.max()
    e = np.exp((s - m).astype(np.float32), dtype=np.float32)
    total = np.float32(e.sum(dtype=np.float32))
    p = bf16(e / total)
    return bf16((p[:, None] * v).sum(axis=0, dtype=np.float32))


def single_pass(s, v, split=128):
    """Online softmax per split of keys, unrounded weights, normalised once at the end."""
    ms, ls, accs = [], [], []
    for a in range(0, len(s), split):
        sl = s[a:a + split]
        m = sl.max()
        e = np.exp((sl - m).astype(np.float32), dtype=np.float32)
        ms.append(m)
        ls.append(e.sum(dtype=np.float32))
        accs.append((e[:, None] * v[a:a + split]).sum(axis=0, dtype=np.float32))
    ms = np.array(ms, dtype=np.float32)
    M = ms.max()
    w = np.exp(ms - M, dtype=np.float32)
    total = np.float32((w * np.array(ls, dtype=np.float32)).sum(dtype=np.float32))
    acc = (w[:, None] * np.array(accs, dtype=np.float32)).sum(axis=0, dtype=np.float32)
    return bf16(acc / total)


def exact(s, v):
    s = s.astype(np.float64)
    e = np.exp(s - s.max())
    return (e / e.sum()) @ v.astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    hd = 512
    print("| keys | score sd | outputs differing | largest difference, bf16 steps at max|out| | mean error / max|exact|: reference | single pass |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (1024, 32768):
        for sd in (1.0, 4.0, 10.0):
            diff = total = 0
            worst = 0.0
            err_ref = err_sp = 0.0
            for _ in range(4 if n > 4096 else 16):
                v = bf16(rng.standard_normal((n, hd), dtype=np.float32))
                s = bf16((rng.standard_normal(n) * sd).astype(np.float32))
                r, p1 = reference(s, v), single_pass(s, v)
                x = exact(s, v)
                d = ulps_of_max(r, p1)
                diff += int((r != p1).sum())
                total += d.size
                worst = max(worst, float(d.max()))
                scale = np.abs(x).max()
                err_ref += float(np.abs(r - x).mean() / scale)
                err_sp += float(np.abs(p1 - x).mean() / scale)
            trials = 4 if n > 4096 else 16
            print(f"| {n} | {sd:g} | {100.0 * diff / total:.1f} % | {worst:.2f} | {err_ref / trials:.2e} | {err_sp / trials:.2e} |")


if __name__ == "__main__":
    main()
