#!/usr/bin/env python3
"""Golden greedy paths of the real Gemma 3 270M demo model, produced by mlx-lm.

For each prompt below: the prompt ids (as mlx-lm tokenizes them), N greedy tokens from
mlx_lm.generate.generate_step (the exact decode loop mlx-lm's `generate` uses, without its
stop-on-EOS, so every prompt has N tokens), and at every generated position the top-1 id,
top-2 id and the top-1 − top-2 margin of the raw logits mlx-lm computed at that step. Along
the greedy path the decode steps are teacher-forced by construction: step t sees the prompt
and greedy tokens 0..t-1. An engine compared with this should agree on top-1 wherever the
margin is not tiny (>= 98 %, divergence only where margin < 0.1).

Also records mlx-lm's `generate` text for "The capital of France is" with max_tokens 16,
raw and through the chat template (the `mlxrt run ... -n 16 --temp 0` acceptance check).

Usage: golden_real_model.py [--model DIR] [--out FILE] [-n 64]
Default model ${MLXRT_CACHE:-~/.cache/mlxrt}/models/gemma-3-270m-4bit (made by
make_demo_model.py), default output tests/fixtures/real/<model folder name>.json.
MLX runs on the CPU here (mlx[cpu]); its quantized matmul is slow, so this takes minutes.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

# Varied on purpose: plain completion, chat template (with and without a system turn),
# code, and non-English text with digits and punctuation.
PROMPTS = [
    {"name": "capital_raw", "text": "The capital of France is"},
    {"name": "capital_chat", "chat": [{"role": "user", "content": "The capital of France is"}]},
    {"name": "code_raw", "text": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"},
    {"name": "story_raw", "text": "Il était une fois, dans un petit village de 300 habitants,"},
    {"name": "poem_chat", "chat": [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Write a haiku about the sea, then explain it in one sentence."}]},
]


def default_model():
    cache = os.environ.get("MLXRT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mlxrt")
    return Path(cache) / "models" / "gemma-3-270m-4bit"


def versions():
    from importlib.metadata import version
    return {p: version(p) for p in ["mlx", "mlx-lm", "transformers", "tokenizers", "numpy"]}


def prompt_ids(tok, p):
    # mlx-lm's generate CLI: apply_chat_template(..., add_generation_prompt=True) for chat, and
    # tokenizer.encode (which adds <bos> for Gemma) for a raw prompt.
    if "chat" in p:
        return list(tok.apply_chat_template(p["chat"], add_generation_prompt=True))
    return list(tok.encode(p["text"]))


def greedy_with_margins(model, prompt, n):
    """N greedy tokens from mlx-lm's generate_step, with top-1/top-2/margin of each step's logits."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler

    steps = []

    def record(tokens, logits):
        # Called by generate_step on the raw last-position logits before sampling.
        l32 = logits.astype(mx.float32).reshape(-1)
        top = mx.argpartition(-l32, 2)[:2]
        a, b = int(top[0]), int(top[1])
        va, vb = float(l32[a]), float(l32[b])
        if vb > va or (vb == va and b < a):
            a, b, va, vb = b, a, vb, va
        steps.append({"top1": a, "top2": b, "margin": round(va - vb, 5)})
        return logits

    tokens = []
    for tok_id, _ in generate_step(mx.array(prompt), model, max_tokens=n,
                                   sampler=make_sampler(0.0), logits_processors=[record]):
        tokens.append(int(tok_id))
    # generate_step computes one step past max_tokens before it stops; drop that one.
    steps = steps[:len(tokens)]
    if len(steps) != len(tokens):
        sys.exit(f"golden_real_model: {len(steps)} recorded steps for {len(tokens)} tokens")
    # mlx-lm's greedy sampler takes the argmax of bf16 log-probabilities, so at a near-tie it can
    # pick the float32 top-2; such positions are listed, not hidden.
    for i, (t, s) in enumerate(zip(tokens, steps)):
        if t != s["top1"]:
            print(f"note: step {i}: greedy {t} != float32 top-1 {s['top1']} (margin {s['margin']})",
                  file=sys.stderr)
    return tokens, steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=default_model())
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("-n", type=int, default=64)
    args = ap.parse_args()
    out = args.out or Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "real" / (
        args.model.name + ".json")

    from mlx_lm import generate, load
    from mlx_lm.sample_utils import make_sampler

    t0 = time.time()
    model, tok = load(str(args.model))
    cfg = json.loads((args.model / "config.json").read_text())
    result = {
        "about": "Greedy paths of mlx-lm on this checkpoint; made by scripts/golden_real_model.py",
        "model": args.model.name,
        "quantization": cfg.get("quantization"),
        "versions": versions(),
        "device": "cpu",
        "max_tokens": args.n,
        "eos_token_ids": sorted(int(i) for i in tok.eos_token_ids),
        "prompts": [],
    }

    sampler = make_sampler(0.0)
    capital = PROMPTS[0]["text"]
    chat_prompt = tok.apply_chat_template([{"role": "user", "content": capital}], add_generation_prompt=True)
    result["capital_n16"] = {
        "prompt": capital,
        "raw": generate(model, tok, capital, max_tokens=16, sampler=sampler),
        "chat": generate(model, tok, chat_prompt, max_tokens=16, sampler=sampler),
    }
    print(f"capital n16: {result['capital_n16']}", file=sys.stderr, flush=True)

    for p in PROMPTS:
        t1 = time.time()
        ids = prompt_ids(tok, p)
        tokens, steps = greedy_with_margins(model, ids, args.n)
        entry = dict(p)
        entry.update({
            "prompt_ids": ids,
            "greedy": tokens,
            "greedy_text": tok.decode(tokens),
            "top1": [s["top1"] for s in steps],
            "top2": [s["top2"] for s in steps],
            "margin": [s["margin"] for s in steps],
            "greedy_not_top1": [i for i, (t, s) in enumerate(zip(tokens, steps)) if t != s["top1"]],
        })
        result["prompts"].append(entry)
        print(f"{p['name']}: {time.time() - t1:.0f} s: {entry['greedy_text']!r}", file=sys.stderr, flush=True)

    result["seconds"] = round(time.time() - t0)
    out.parent.mkdir(parents=True, exist_ok=True)
    # One prompt per block, lists on one line each: small and diffable.
    text = json.dumps(result, indent=1, ensure_ascii=False)
    out.write_text(compact_lists(text) + "\n")
    print(f"wrote {out}", file=sys.stderr)


def compact_lists(text):
    """json.dumps(indent) puts every list element on its own line; join number lists back."""
    import re
    return re.sub(r"\[\s*([-0-9.e,\s]+?)\s*\]", lambda m: "[" + ", ".join(
        x.strip() for x in m.group(1).split(",")) + "]", text)


if __name__ == "__main__":
    main()
