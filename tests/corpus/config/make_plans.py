"""Golden per-layer plans for tests/corpus/config/good/*.json, as mlx-lm builds them.

Builds each model with mlx-lm's own classes (weights stay lazy, nothing is allocated) and
records what every layer ended up with: type, head dim, KV heads, K/V source, k_eq_v, FFN
width, RoPE base / scale / live frequency pairs, plus model-level fields. test_config.c
compares the C parser's plan with this file. Configs written by transformers 5 with
`per_layer_config` are skipped: mlx-lm does not read that key (the C test checks them against
the equivalent global_head_dim configs instead); so is the Gemma 3 config in rope_parameters
form, which mlx-lm's gemma3_text does not read either.

Run: $(scripts/venv.sh) tests/corpus/config/make_plans.py   (writes plans.json next to it)
"""
import glob
import json
import math
import os

import mlx.core as mx
import mlx_lm
from mlx_lm.utils import _get_classes

HERE = os.path.dirname(os.path.abspath(__file__))


def rope_info(rope, head_dim):
    name = type(rope).__name__
    if name == "ProportionalRoPE":
        f = [float(x) for x in rope._freqs.tolist()]
        live = [x for x in f if math.isfinite(x)]
        factor = live[0]
        theta = (live[1] / live[0]) ** (head_dim / 2) if len(live) > 1 else None
        return {"kind": "proportional", "theta": theta, "factor": factor, "pairs": len(live)}
    # nn.RoPE: positions are multiplied by scale (1/factor), every pair rotates
    return {"kind": "rope", "theta": float(rope.base), "factor": 1.0 / float(rope.scale),
            "pairs": rope.dims // 2, "traditional": bool(rope.traditional)}


def plan(path):
    config = json.load(open(path))
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    lm = getattr(model, "language_model", model)
    inner = lm.model
    out = {"layers": []}
    g4 = hasattr(inner, "previous_kvs")
    prev = inner.previous_kvs if g4 else list(range(len(inner.layers)))
    for i, layer in enumerate(inner.layers):
        a = layer.self_attn
        full = (layer.layer_type == "full_attention") if g4 else (not a.is_sliding)
        e = {"type": "full_attention" if full else "sliding_attention",
             "head_dim": a.head_dim, "kv_heads": a.n_kv_heads, "kv_source": prev[i],
             "k_eq_v": bool(g4 and a.use_k_eq_v and a.has_kv),
             "intermediate": int(layer.mlp.gate_proj.weight.shape[0]),
             "scale": float(a.scale)}
        e.update({"rope_" + k: v for k, v in rope_info(a.rope, a.head_dim).items()})
        out["layers"].append(e)
    out["vocab_size"] = int(inner.embed_tokens.weight.shape[0])
    out["hidden_size"] = int(inner.embed_tokens.weight.shape[1])
    out["num_heads"] = inner.layers[0].self_attn.n_heads
    out["sliding_window"] = int(inner.window_size)
    if g4:
        out["final_logit_softcapping"] = lm.final_logit_softcapping
        out["hidden_size_per_layer_input"] = inner.hidden_size_per_layer_input
        out["enable_moe"] = bool(inner.layers[0].enable_moe)
        if out["enable_moe"]:
            sg = inner.layers[0].experts.switch_glu
            w = sg.gate_proj.weight.shape
            out["moe"] = {"num_experts": int(w[0]), "moe_intermediate_size": int(w[1]),
                          "top_k": lm.args.text_config["top_k_experts"]
                          if hasattr(lm, "args") and hasattr(lm.args, "text_config")
                          else inner.config.top_k_experts}
    return out


def main():
    plans = {"_generated_by": f"mlx-lm {mlx_lm.__version__}, mlx {mx.__version__}"}
    for path in sorted(glob.glob(os.path.join(HERE, "good", "*.json"))):
        text = json.load(open(path))
        tc = text.get("text_config", text)
        if "per_layer_config" in tc:
            continue
        # mlx-lm's gemma3_text reads only rope_theta / rope_local_base_freq / rope_scaling;
        # a transformers-5 config with rope_parameters alone would lose its linear scaling
        # there. The C parser follows transformers for it (checked in test_config.c).
        if tc.get("model_type", "").startswith("gemma3") and "rope_parameters" in tc:
            continue
        plans[os.path.basename(path)] = plan(path)
    # Columnar per-layer arrays keep the file small and readable: layers[field] = [per layer].
    for name, p in plans.items():
        if isinstance(p, dict) and "layers" in p:
            rows = p["layers"]
            p["layers"] = {k: [r.get(k) for r in rows] for k in sorted(rows[0])}
    with open(os.path.join(HERE, "plans.json"), "w") as f:
        f.write("{\n")
        items = sorted(plans.items())
        for n, (name, p) in enumerate(items):
            f.write(f" {json.dumps(name)}: ")
            if isinstance(p, dict):
                f.write("{\n")
                keys = sorted(p)
                for m, k in enumerate(keys):
                    f.write(f"  {json.dumps(k)}: {json.dumps(p[k], sort_keys=True)}")
                    f.write(",\n" if m + 1 < len(keys) else "\n")
                f.write(" }")
            else:
                f.write(json.dumps(p))
            f.write(",\n" if n + 1 < len(items) else "\n")
        f.write("}\n")


if __name__ == "__main__":
    main()
