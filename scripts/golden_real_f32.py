#!/usr/bin/env python3
"""Adds a float32-accumulation reference to a fixture made by golden_real_model.py.

MLX's CPU quantized_matmul accumulates in bf16 (docs/NUMERICS.md), so mlx-lm's own logits on
a quantized checkpoint carry a few bf16 ulps of accumulation noise, enough to flip near-ties.
This script runs the same mlx-lm model with every quantized layer replaced by the dense bf16
matrix mx.dequantize gives (MLX's dense CPU matmul accumulates in float32), teacher-forced
along the fixture's greedy path, and stores per step f32_top1, f32_top2, f32_margin.
It also stores this reference's greedy text for the fixture's capital_n16 prompt
(`mlx_lm.generate`, max_tokens 16, temperature 0; raw and through the chat template, as
golden_real_model.py does for mlx-lm itself) in capital_n16.f32_raw / f32_chat: what
`mlxrt run -n 16 --temp 0` prints with the default (float32-accumulation) numerics.

Usage: golden_real_f32.py FIXTURE.json [--model DIR]
"""
import argparse
import json
import os
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm import load


def dequantize_in_place(module):
    for name, child in module.children().items():
        items = child if isinstance(child, list) else [child]
        for i, c in enumerate(items):
            if isinstance(c, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
                w = mx.dequantize(c.weight, c.scales, getattr(c, "biases", None), c.group_size, c.bits,
                                  mode=c.mode)
                if isinstance(c, nn.QuantizedLinear):
                    d = nn.Linear(w.shape[1], w.shape[0], bias=False)
                else:
                    d = nn.Embedding(w.shape[0], w.shape[1])
                d.weight = w
                if isinstance(child, list):
                    child[i] = d
                else:
                    setattr(module, name, d)
            elif isinstance(c, nn.Module):
                dequantize_in_place(c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture", type=Path)
    ap.add_argument("--model", type=Path, default=None)
    a = ap.parse_args()
    fx = json.loads(a.fixture.read_text())
    cache = os.environ.get("MLXRT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mlxrt")
    model_dir = a.model or Path(cache) / "models" / fx["model"]
    model, tok = load(str(model_dir))
    dequantize_in_place(model)
    for p in fx["prompts"]:
        seq = p["prompt_ids"] + p["greedy"][:-1]
        logits = model(mx.array([seq]))[0, len(p["prompt_ids"]) - 1:].astype(mx.float32)
        top1, top2, margin = [], [], []
        for row in logits:
            t = mx.argsort(-row)[:2]
            a1, a2 = int(t[0]), int(t[1])
            top1.append(a1)
            top2.append(a2)
            margin.append(round(float(row[a1] - row[a2]), 5))
        p["f32_top1"], p["f32_top2"], p["f32_margin"] = top1, top2, margin
    from importlib.metadata import version
    from mlx_lm import generate
    from mlx_lm.sample_utils import make_sampler
    cap = fx["capital_n16"]
    chat_prompt = tok.apply_chat_template([{"role": "user", "content": cap["prompt"]}], add_generation_prompt=True)
    cap["f32_raw"] = generate(model, tok, cap["prompt"], max_tokens=16, sampler=make_sampler(0.0))
    cap["f32_chat"] = generate(model, tok, chat_prompt, max_tokens=16, sampler=make_sampler(0.0))
    print(f"{fx['model']}: float32-accumulation greedy text {cap['f32_raw']!r} / chat {cap['f32_chat']!r}")
    fx["f32_versions"] = {p: version(p) for p in ["mlx", "mlx-lm", "transformers", "tokenizers", "numpy"]}
    fx["f32_reference"] = ("mlx-lm on the same checkpoint with every quantized layer replaced by "
                           "its mx.dequantize bf16 matrix (float32 accumulation), teacher-forced "
                           "along the greedy path; made by scripts/golden_real_f32.py")
    text = json.dumps(fx, indent=1, ensure_ascii=False)
    import re
    text = re.sub(r"\[\s*([-0-9.e,\s]+?)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    a.fixture.write_text(text + "\n")


if __name__ == "__main__":
    main()
