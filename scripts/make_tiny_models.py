#!/usr/bin/env python3
"""Makes the tiny random Gemma 3 / Gemma 4 checkpoints under tests/fixtures/models/ with
mlx-lm's own model classes and quantize/save utilities, and their golden logits.

Run:  PY=$(scripts/venv.sh); $PY scripts/make_tiny_models.py [--only NAME ...] [--out DIR]

For every variant x mode:
  1. build the mlx-lm model from a config dict, give it seeded random weights (bf16, scaled so
     the next-token distribution is peaked), quantize it with mlx_lm.utils.quantize_model and
     save it with save_model/save_config, exactly what mlx_lm.convert does;
  2. RELOAD the folder with mlx_lm.utils.load_model and compute every golden number from the
     reloaded model, so the data reflects exactly what is on disk:
       prompt        int32 [P]       2 (bos) then seeded random ids in [3, vocab)
       logits        f32 [P, V]      one batched prompt pass through a fresh make_prompt_cache
       greedy        int32 [G]       greedy[0] = argmax(logits[P-1]); greedy[i] = argmax of
                                     the logits after feeding greedy[i-1] through the cache
       greedy_logits f32 [G, V]      the logits each greedy token was taken from
                                     (row 0 is a copy of logits[P-1])
The prompt seed is searched (deterministically) so that every argmax has a clear top-2 margin
and the greedy run does not just repeat one token; the chosen seed and the smallest margin are
recorded in the metadata with the measured float32-vs-bf16 and token-by-token differences.
"""
import argparse
import copy
import json
import platform
import shutil
from pathlib import Path

import numpy as np
import mlx.core as mx
import mlx.nn as nn
import mlx_lm
from mlx.utils import tree_flatten, tree_map, tree_unflatten
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache
from safetensors.numpy import save_file
from mlx_lm.utils import _get_classes, load_model, quantize_model, save_config, save_model

ROOT = Path(__file__).resolve().parent.parent
PROMPT_LEN = 40
N_GREEDY = 32
VOCAB = 384  # 12 successor orbits of 32; not a power of two, like 262208

# mode name -> (group_size, bits, mode) passed to quantize_model; None = bf16
MODES = {
    "bf16": None,
    "affine4-g64": (64, 4, "affine"),
    "affine8-g32": (32, 8, "affine"),
    "nvfp4": (16, 4, "nvfp4"),
    "mxfp4": (32, 4, "mxfp4"),
}


def g4_rope():
    return {
        "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                           "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
    }


def g4_text_config(**kw):
    """A gemma4_text config with every knob written out (mlx-lm's defaults are E2B's)."""
    c = {
        "model_type": "gemma4_text",
        "architectures": ["Gemma4ForCausalLM"],
        "dtype": "bfloat16",
        "vocab_size": VOCAB,
        "vocab_size_per_layer_input": VOCAB,
        "hidden_size": 128,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "global_head_dim": 64,
        "num_global_key_value_heads": None,
        "attention_k_eq_v": False,
        "hidden_size_per_layer_input": 0,
        "num_kv_shared_layers": 0,
        "use_double_wide_mlp": False,
        "enable_moe_block": False,
        "num_experts": None,
        "top_k_experts": None,
        "moe_intermediate_size": None,
        "final_logit_softcapping": 30.0,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "rope_parameters": g4_rope(),
        "sliding_window": 12,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
    }
    c.update(kw)
    return c


def layer_types(pattern):
    return ["full_attention" if ch == "F" else "sliding_attention" for ch in pattern]


def g3_text_config(**kw):
    c = {
        "model_type": "gemma3_text",
        "architectures": ["Gemma3ForCausalLM"],
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB,
        "hidden_size": 128,
        "intermediate_size": 128,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "query_pre_attn_scalar": 48,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 8,
        "sliding_window_pattern": 3,
        "max_position_embeddings": 4096,
        "hidden_activation": "gelu_pytorch_tanh",
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
    }
    c.update(kw)
    return c


def nest(model_type, arch, text, extra=None):
    """Multimodal form: the text config under text_config. mlx-lm's gemma3/gemma4 ModelArgs
    overwrite text_config.vocab_size with the top-level vocab_size (default 262208 / 262144),
    so the top level must carry it too."""
    c = {"model_type": model_type, "architectures": [arch], "text_config": text,
         "vocab_size": text["vocab_size"], "tie_word_embeddings": True}
    c.update(extra or {})
    return c


# The nested forms repeat a flat variant's architecture; they differ in config layout and key
# prefixes only, so three modes (bf16, affine with bf16 scales/biases, an fp mode with uint8
# scales) cover them and keep tests/fixtures/models near its 15 MB budget.
NESTED_SKIP = {m: "nested form: bf16, affine4-g64 and nvfp4 only (size budget)"
               for m in ("affine8-g32", "mxfp4")}


def variants():
    v = {}
    v["gemma3-text"] = dict(
        seed=11,
        knobs="gemma3_text, flat model.* keys; 4 layers, sliding_window_pattern 3 (layer 2 global, "
              "the last layer sliding) plus a matching layer_types; 4 q / 2 kv heads x 32; "
              "query_pre_attn_scalar 48 (!= head_dim); rope_theta 1e6 with linear rope_scaling "
              "factor 8 on the global layer, rope_local_base_freq 1e4 on sliding layers; "
              "window 8; (1+w) norms; tied embeddings",
        config=g3_text_config(num_hidden_layers=4, layer_types=layer_types("SSFS")),
    )
    v["gemma3-nested"] = dict(
        seed=12,
        knobs="gemma3 with text_config, language_model.model.* keys (+ vision_tower.* and "
              "multi_modal_projector.* stubs to ignore); 27B-like: 4 q / 2 kv heads x 16 so "
              "heads*head_dim (64) != hidden (128), query_pre_attn_scalar 32 = hidden/heads; "
              "4 layers, sliding_window_pattern 4 (layer 3 global), no layer_types; linear "
              "rope_scaling 8; window 16",
        config=nest("gemma3", "Gemma3ForConditionalGeneration", g3_text_config(
            num_hidden_layers=4, head_dim=16, query_pre_attn_scalar=32,
            sliding_window=16, sliding_window_pattern=4),
            {"boi_token_index": 255999, "eoi_token_index": 256000,
             "image_token_index": 262144, "mm_tokens_per_image": 256,
             "torch_dtype": "bfloat16"}),
        skip=NESTED_SKIP,
    )
    dense = dict(num_hidden_layers=4, layer_types=layer_types("SFSF"), head_dim=16,
                 global_head_dim=32, attention_k_eq_v=True, num_global_key_value_heads=1)
    v["gemma4-dense"] = dict(
        seed=21,
        knobs="gemma4_text, flat model.* keys; 31B-like: 4 layers SFSF; sliding layers 4 q / 2 kv "
              "heads x 16, full layers 4 q / 1 kv (num_global_key_value_heads) x 32 "
              "(global_head_dim), attention_k_eq_v (no v_proj on full layers); proportional "
              "RoPE partial_rotary_factor 0.25 theta 1e6 on full layers, default theta 1e4 on "
              "sliding; random layer_scalar; final softcap 30; tied embeddings; window 12",
        config=g4_text_config(**dense),
    )
    v["gemma4-nested"] = dict(
        seed=22,
        knobs="gemma4 with text_config, language_model.model.* keys (the mlx-vlm / "
              "mlx-community layout, + vision_tower.* and embed_vision.* stubs to ignore); "
              "same architecture as gemma4-dense, other weights",
        config=nest("gemma4", "Gemma4ForConditionalGeneration", g4_text_config(**dense),
                    {"dtype": "bfloat16"}),
        skip=NESTED_SKIP,
    )
    # 12B-like. mlx-lm 0.32.2 maps model_type gemma4_unified to its gemma4 classes
    # (MODEL_REMAPPING), so the saved config is the unified one and the reload runs it as is.
    unified = g4_text_config(
        model_type="gemma4_unified_text", architectures=["Gemma4UnifiedForCausalLM"],
        num_hidden_layers=4, layer_types=layer_types("SSSF"), head_dim=16, global_head_dim=32,
        num_attention_heads=8, num_key_value_heads=4, attention_k_eq_v=True,
        num_global_key_value_heads=1, sliding_window=12, use_bidirectional_attention="vision")
    v["gemma4-unified"] = dict(
        seed=25,
        knobs="gemma4_unified with text_config gemma4_unified_text (Gemma4UnifiedForConditional"
              "Generation), language_model.model.* keys (+ vision_embedder.* and embed_audio.* "
              "stubs and a vision_config / audio_config to ignore); 12B-like: dense, no PLE / MoE "
              "/ KV sharing, 4 layers SSSF; sliding 8 q / 4 kv heads x 16 (heads*head_dim 128 = "
              "hidden), full 8 q / 1 kv (num_global_key_value_heads) x 32 (global_head_dim) "
              "with attention_k_eq_v; proportional RoPE 0.25 theta 1e6 / default 1e4; random "
              "layer_scalar; final softcap 30; tied embeddings; window 12; the PLE / MoE / KV "
              "sharing fields are written out as 0 / false / null (mlx-lm's defaults when absent "
              "are E2B's). Text path checked "
              "against transformers 5.24 modeling_gemma4_unified: attention, MLP, rotary and "
              "scaled embedding are the Gemma 4 text classes; the decoder layer is the Gemma 4 "
              "sandwich (pre/post attention and feedforward norms, then * layer_scalar) without "
              "the PLE and MoE branches; use_bidirectional_attention 'vision' only changes the "
              "mask for vision tokens, so text-only input is plain causal / sliding causal",
        config=nest("gemma4_unified", "Gemma4UnifiedForConditionalGeneration", unified,
                    {"dtype": "bfloat16"}),
        skip={**NESTED_SKIP, "bf16": "unified form: affine4-g64 and nvfp4 only (size budget; "
                                     "the bf16 math is gemma4-nested-bf16's)"},
    )
    v["gemma4-e2b"] = dict(
        seed=23,
        knobs="gemma4_text, flat; E2B-like: 4 layers SFSF, 4 q / 1 kv heads x 16, "
              "global_head_dim 32, no k_eq_v; PLE hidden_size_per_layer_input 64, "
              "vocab_size_per_layer_input 384; num_kv_shared_layers 2 (layer 2 reuses layer 0's "
              "KV, layer 3 reuses layer 1's); use_double_wide_mlp (intermediate 64, 128 on the "
              "shared layers); window 8",
        config=g4_text_config(num_hidden_layers=4, layer_types=layer_types("SFSF"),
                              head_dim=16, global_head_dim=32, intermediate_size=64,
                              num_key_value_heads=1, hidden_size_per_layer_input=64,
                              num_kv_shared_layers=2, use_double_wide_mlp=True,
                              sliding_window=8),
        gains={"succ_layer": 2, "post": 0.4, "ple": 0.05},
    )
    v["gemma4-moe"] = dict(
        seed=24,
        knobs="gemma4_text, flat; 26B-A4B-like: 4 layers SSSF, sliding 4 q / 2 kv x 16, full "
              "k_eq_v with 1 global kv head x 32; enable_moe_block with 8 experts top-2, "
              "moe_intermediate_size 64, shared MLP intermediate 128, router (scale, "
              "per_expert_scale, proj quantized 8-bit g64 by mlx-lm's quant_predicate), "
              "pre_feedforward_layernorm_2 / post_feedforward_layernorm_1,_2; window 16",
        config=g4_text_config(num_hidden_layers=4, layer_types=layer_types("SSSF"),
                              head_dim=16, global_head_dim=32,
                              attention_k_eq_v=True, num_global_key_value_heads=1,
                              enable_moe_block=True, num_experts=8, top_k_experts=2,
                              moe_intermediate_size=64, sliding_window=16),
        skip={"bf16": "MLX 0.32.4's CPU GatherMM (the unquantized expert matmul) supports "
                      "float32 only, so mlx-lm cannot run a bf16 MoE on the CPU"},
    )
    return v


# ---------------------------------------------------------------------------------------------
# Random weights


def rotation_orbits(rng, hidden, sigma, n_experts=0):
    """A random orthogonal Q that fixes one unit direction d (and, for MoE, n_experts routing
    directions u_e) and rotates the rest in 2-D planes by multiples of 2*pi/32 (so Q^32 = I),
    and a [VOCAB, hidden] embedding made of orbits E[succ(v)] = Q E[v] of length 32 sharing a
    component along d. For MoE every orbit also carries a large component along the u_e of
    its own two experts, so the router's top-2 choice is never a near tie.
    Returns E, Q, d, u (the routing directions, [n_experts, hidden])."""
    o, _ = np.linalg.qr(rng.normal(0, 1, (hidden, hidden)))
    fixed = 1 + n_experts
    fixed += (hidden - fixed) % 2
    b = np.eye(hidden)
    for i in range(fixed, hidden - 1, 2):
        a = 2 * np.pi * rng.integers(1, 32) / 32
        b[i:i + 2, i:i + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    q = o @ b @ o.T
    d = o[:, 0]
    u = o[:, 1:1 + n_experts].T
    norm = sigma * np.sqrt(hidden)
    emb = np.zeros((VOCAB, hidden))
    order = rng.permutation(VOCAB)
    pairs = [(i, j) for i in range(n_experts) for j in range(i + 1, n_experts)]
    picks = rng.permutation(len(pairs)) if pairs else []
    for k in range(VOCAB // 32):
        r = rng.normal(0, sigma, hidden)
        r -= o[:, :fixed] @ (o[:, :fixed].T @ r)
        x = r + 0.5 * norm * d
        if pairs:
            for e in pairs[picks[k % len(pairs)]]:
                x = x + 5 * sigma * u[e]
        for tok in order[k * 32:(k + 1) * 32]:
            emb[tok] = x
            x = q @ x
    return emb, q, d, u


def init_params(model, config, seed, gains):
    """Seeded random weights with one planted structure that makes the next-token distribution
    peaked without making greedy decode repeat the input token (which a tied head does when
    the residual stream stays close to the input embedding):
      - the embedding is built of orbits E[succ(v)] = Q E[v] (Q random orthogonal, see
        rotation_orbits), all sharing a positive component along a direction d;
      - one layer's MLP ("successor layer") computes Q x: gate rows ~ d (so gelu(gate) is a
        near-constant positive factor), up = P^T Q, down = P (P random orthogonal), and its
        post-feedforward norm has a large gain so it dominates the residual stream. The tied
        head then puts the top logit on succ(current token) with a wide margin;
      - every other sublayer is random with a moderate output gain, so attention, the KV cache,
        RoPE etc. still move every logit measurably.
    Gemma 3 norms are stored zero-centred (the model multiplies by 1+w)."""
    rng = np.random.default_rng(seed)
    text = config.get("text_config", config)
    g3 = text["model_type"] == "gemma3_text"
    hidden = text["hidden_size"]
    succ_layer = gains["succ_layer"]
    emb, q, d, u = rotation_orbits(rng, hidden, gains["embed"], text.get("num_experts") or 0)
    out = []
    for name, p in tree_flatten(model.parameters()):
        shape = p.shape
        parts = name.split(".")
        leaf = parts[-2] if name.endswith(".weight") else parts[-1]
        layer = int(parts[parts.index("layers") + 1]) if "layers" in parts else -1
        in_succ_mlp = layer == succ_layer and ".mlp." in name
        if name.endswith("embed_tokens.weight"):
            a = emb
        elif name.endswith("embed_tokens_per_layer.weight"):
            a = rng.normal(0, gains["ple"], shape)
        elif in_succ_mlp and leaf == "gate_proj":
            a = np.outer(np.ones(shape[0]), d) * (1 + 0.2 * rng.normal(0, 1, shape[0]))[:, None]
            a += rng.normal(0, 0.02, shape)
        elif in_succ_mlp and leaf in ("up_proj", "down_proj"):
            if leaf == "down_proj":  # [hidden, inter]: P with orthonormal rows
                pmat, _ = np.linalg.qr(rng.normal(0, 1, (shape[1], shape[1])))
                a = pmat[:shape[0], :]
            else:
                a = None  # filled below, needs down_proj's P
        elif "norm" in leaf:
            noise = 0.2
            if leaf in ("q_norm", "k_norm") and not g3:
                base = gains["qk"]
            elif leaf == "norm":
                base = 1.0
            elif leaf == "post_feedforward_layernorm" and layer == succ_layer:
                base, noise = gains["succ_gain"], 0.05
            elif leaf == "pre_feedforward_layernorm" and layer == succ_layer:
                base, noise = 1.0, 0.05
            elif leaf == "post_feedforward_layernorm_1" and layer == succ_layer:
                base, noise = 1.0, 0.05
            elif leaf == "post_feedforward_layernorm_2" and layer == succ_layer:
                base = 0.3  # the experts must not drown the successor MLP
            elif leaf.startswith("post_"):
                base = gains["post"]
            else:
                base = 1.0
            a = base * (1.0 + noise * rng.normal(0, 1, shape))
            if g3:
                a = a - 1.0
        elif leaf == "layer_scalar":
            a = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("router.scale"):
            a = 1.0 + 0.2 * rng.normal(0, 1, shape)
        elif name.endswith("per_expert_scale"):
            a = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("router.proj.weight"):
            # reads the routing directions: well separated top-2 expert scores
            a = gains["router"] * u + rng.normal(0, 0.05 / np.sqrt(shape[-1]), shape)
        elif len(shape) >= 2:
            a = rng.normal(0, 1.0 / np.sqrt(shape[-1]), shape)
        else:
            raise SystemExit(f"no init rule for {name} {shape}")
        out.append([name, a])
    # up_proj = P^T Q with P = down_proj [hidden, inter] having orthonormal rows, so
    # down @ diag(gelu(gate)) @ up ~ c * Q.
    byname = {n: i for i, (n, _) in enumerate(out)}
    for n, a in out:
        if a is None:
            down = out[byname[n.replace("up_proj", "down_proj")]][1]
            out[byname[n]][1] = down.T @ q
    model.update(tree_unflatten(
        [(n, mx.array(np.asarray(a, np.float32)).astype(mx.bfloat16)) for n, a in out]))


def build_model(config):
    model_cls, args_cls = _get_classes(config=config)
    model = model_cls(args_cls.from_dict(copy.deepcopy(config)))
    # Tied head: Gemma 3's Model always creates lm_head and its sanitize drops it when the
    # weights have none (as in every Gemma checkpoint); Gemma 4 does not create it.
    if config["model_type"] == "gemma3_text":
        model.sanitize({})
    elif config["model_type"] == "gemma3":
        model.language_model.sanitize({})
    return model


# ---------------------------------------------------------------------------------------------
# Golden data


def f32(a):
    return np.array(a.astype(mx.float32))


def run_golden(model, prompt):
    """One batched prompt pass through a fresh cache, then N_GREEDY-1 single-token steps."""
    cache = make_prompt_cache(model)
    logits = f32(model(mx.array(prompt)[None], cache=cache)[0])
    greedy, rows = [], [logits[-1]]
    for i in range(N_GREEDY):
        tok = int(np.argmax(rows[-1]))
        greedy.append(tok)
        if i + 1 < N_GREEDY:
            rows.append(f32(model(mx.array([[tok]]), cache=cache)[0, -1]))
    return logits, np.array(greedy, np.int32), np.stack(rows)


def run_teacher(model, prompt, cont):
    """The golden procedure with the continuation tokens given: one batched prompt pass, then
    each continuation token fed alone. Returns the [P + len(cont), V] logits."""
    cache = make_prompt_cache(model)
    rows = [f32(model(mx.array(prompt)[None], cache=cache)[0])]
    for t in cont:
        rows.append(f32(model(mx.array([[int(t)]]), cache=cache)[0]))
    return np.concatenate(rows)


def window_changed(folder, config, delta):
    """The same file loaded with sliding_window + delta: how much an off-by-one window moves
    the logits (the fixture must detect it)."""
    cfg = json.loads((folder / "config.json").read_text())
    if "text_config" in cfg:
        tc = copy.deepcopy(cfg["text_config"])
        tc["sliding_window"] += delta
        return load_model(folder, model_config={"text_config": tc})[0]
    return load_model(folder, model_config={"sliding_window": cfg["sliding_window"] + delta})[0]


def router_min_gap(model, prompt, cont):
    """Smallest gap between the k-th and (k+1)-th expert score over every router call of the
    golden procedure (0 = a tie another engine could break differently)."""
    from mlx_lm.models import gemma4_text
    gaps, top, orig = [], [], gemma4_text.Router.__call__

    def hook(self, x):
        xs = mx.fast.rms_norm(x, self.scale * self._root_size, self.eps)
        sc = np.sort(f32(self.proj(xs)).reshape(-1, self.config.num_experts), -1)
        k = self.config.top_k_experts
        gaps.append(float((sc[:, -k] - sc[:, -k - 1]).min()))
        top.append(float(np.abs(sc).max()))
        return orig(self, x)

    gemma4_text.Router.__call__ = hook
    try:
        run_teacher(model, prompt, cont)
    finally:
        gemma4_text.Router.__call__ = orig
    return min(gaps), max(top)


def run_forced(model, tokens):
    """Every token fed one at a time through a fresh cache (teacher forcing)."""
    cache = make_prompt_cache(model)
    return np.stack([f32(model(mx.array([[int(t)]]), cache=cache)[0, -1]) for t in tokens])


def run_batched(model, tokens):
    cache = make_prompt_cache(model)
    return f32(model(mx.array(tokens)[None], cache=cache)[0])


def margins(rows):
    s = np.sort(rows, axis=-1)
    return s[:, -1] - s[:, -2]


def softmax_top1(rows):
    e = np.exp(rows - rows.max(-1, keepdims=True))
    return (e.max(-1) / e.sum(-1))


def make_prompt(seed):
    rng = np.random.default_rng(1000 + seed)
    return np.concatenate([[2], rng.integers(3, VOCAB, PROMPT_LEN - 1)]).astype(np.int32)


def choose_prompt(model, min_margin, min_distinct, tries=40):
    """First prompt seed whose argmaxes all have a clear margin and whose greedy run is
    varied; the best one seen if none qualifies."""
    best = None
    for s in range(tries):
        prompt = make_prompt(s)
        logits, greedy, glog = run_golden(model, prompt)
        m = float(min(margins(logits).min(), margins(glog).min()))
        distinct = len(set(greedy.tolist()))
        score = (m >= min_margin and distinct >= min_distinct, min(m, min_margin), distinct, m)
        if best is None or score > best[0]:
            best = (score, s, prompt, logits, greedy, glog)
        if score[0]:
            break
    return best[1:]


def to_float32_model(model):
    """The same weights with every float parameter in float32 (quantized data unchanged), to
    measure how far the bf16 numbers are from a higher-precision evaluation."""
    def cast(p):
        return p.astype(mx.float32) if mx.issubdtype(p.dtype, mx.floating) else p
    model.update(tree_map(cast, model.parameters()))
    return model


def dequantized_float32(model):
    """Every parameter of the model as float32, quantized layers dequantized the way mlx-lm's
    QuantizedLinear / QuantizedEmbedding compute them; names without the .scales/.biases."""
    out = {}
    for prefix, mod in model.named_modules():
        if isinstance(mod, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            w = mx.dequantize(mod.weight, mod.scales, mod.get("biases"), group_size=mod.group_size,
                              bits=mod.bits, mode=mod.mode)
            out[f"{prefix}.weight"] = w.astype(mx.float32)
    for name, p in tree_flatten(model.parameters()):
        stem = name.rsplit(".", 1)[0]
        if f"{stem}.weight" in out and name.endswith((".weight", ".scales", ".biases")):
            continue
        out[name] = p.astype(mx.float32)
    mx.eval(out)
    return out


def transformers_crosscheck(folder, text, tokens):
    """A second peer for the text math: transformers' Gemma4UnifiedForCausalLM (float32, CPU,
    eager attention) with the checkpoint's dequantized weights against mlx-lm's gemma4 classes
    with the same float32 weights, on the same tokens in one batched pass (every row is a
    next-token distribution). Needs torch; without it the metadata says so."""
    try:
        import torch
        from transformers.models.gemma4_unified import (Gemma4UnifiedForCausalLM,
                                                        Gemma4UnifiedTextConfig)
    except ImportError as e:
        return {"transformers_crosscheck": f"not run: {e}"}
    import transformers
    model, _ = load_model(folder)
    w = dequantized_float32(model)
    # mlx-lm, float32: an unquantized model of the same config with the dequantized weights.
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("quantization", None)
    cfg.pop("quantization_config", None)
    m32 = build_model(cfg)
    m32.load_weights(list(w.items()), strict=True)
    ref = run_batched(m32, tokens)
    # transformers: the text config as Gemma4UnifiedTextConfig takes it (no PLE / MoE fields).
    tc = {k: v for k, v in text.items()
          if k not in ("vocab_size_per_layer_input", "hidden_size_per_layer_input",
                       "enable_moe_block", "num_experts", "top_k_experts",
                       "moe_intermediate_size", "architectures", "model_type", "dtype")}
    hf_cfg = Gemma4UnifiedTextConfig(**tc)
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = Gemma4UnifiedForCausalLM(hf_cfg).eval().float()
    sd = {}
    for k, v in w.items():
        k = k.removeprefix("language_model.")
        sd[k] = torch.from_numpy(np.array(v))
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith("rotary_emb.inv_freq")]
    if missing or unexpected:
        raise SystemExit(f"{folder}: transformers state dict missing {missing} "
                         f"unexpected {unexpected}")
    with torch.no_grad():
        out = hf(torch.tensor(tokens[None].astype(np.int64)), use_cache=False).logits[0].numpy()
    d = float(np.abs(out - ref).max())
    agree = int((out.argmax(-1) == ref.argmax(-1)).sum())
    tol = 1e-3 * max(1.0, float(np.abs(ref).max()))
    if d > tol:
        raise SystemExit(f"{folder}: transformers vs mlx-lm float32 max |diff| {d:.3g} > {tol:.3g}")
    return {"transformers_crosscheck": f"Gemma4UnifiedForCausalLM, transformers "
                                       f"{transformers.__version__}, torch {torch.__version__}, "
                                       "float32 CPU eager, dequantized weights, one batched pass "
                                       "of prompt + greedy[:-1] vs mlx-lm float32",
            "transformers_vs_mlx_lm_float32_max_abs_diff": f"{d:.6g}",
            "transformers_vs_mlx_lm_float32_tolerance": f"{tol:.6g}",
            "transformers_vs_mlx_lm_float32_argmax_agree": f"{agree}/{len(tokens)}"}


# ---------------------------------------------------------------------------------------------


def save_checkpoint(config, seed, gains, mode, folder):
    model = build_model(config)
    init_params(model, config, seed, gains)
    mx.eval(model.parameters())
    cfg = copy.deepcopy(config)
    if MODES[mode] is not None:
        gs, bits, qmode = MODES[mode]
        model, cfg = quantize_model(model, cfg, gs, bits, mode=qmode)
    if folder.exists():
        shutil.rmtree(folder)
    save_model(folder, model)
    save_config(cfg, config_path=folder / "config.json")


def add_vision_stub(folder, model_type, rng):
    """mlx-vlm / mlx-community multimodal files also carry vision tower weights (bf16, never
    quantized) and a vision_config; mlx-lm's sanitize drops them. A few tiny tensors of that
    kind are added so loaders prove they ignore them."""
    path = folder / "model.safetensors"
    w = mx.load(str(path))
    if model_type == "gemma4_unified":  # encoder-free: patch and audio embedders, no tower
        names = ["vision_embedder.patch_dense.weight",
                 "vision_embedder.multimodal_embedder.embedding_projection.weight",
                 "embed_audio.embedding_projection.weight"]
    else:
        names = ["vision_tower.encoder.layers.0.self_attn.q_proj.weight",
                 "vision_tower.encoder.layers.0.mlp.fc1.weight"]
        names.append("multi_modal_projector.mm_input_projection_weight"
                     if model_type == "gemma3" else "embed_vision.embedding_projection.weight")
    for n in names:
        w[n] = mx.array(rng.normal(0, 0.02, (32, 32)).astype(np.float32)).astype(mx.bfloat16)
    mx.save_safetensors(str(path), w, metadata={"format": "mlx"})
    idx = json.loads((folder / "model.safetensors.index.json").read_text())
    for n in names:
        idx["weight_map"][n] = "model.safetensors"
    idx["weight_map"] = dict(sorted(idx["weight_map"].items()))
    idx["metadata"]["total_size"] = sum(v.nbytes for v in w.values())
    (folder / "model.safetensors.index.json").write_text(json.dumps(idx, indent=4))
    cfg = json.loads((folder / "config.json").read_text())
    if model_type == "gemma4_unified":
        cfg["vision_config"] = {"model_type": "gemma4_unified_vision", "hidden_size": 32}
        cfg["audio_config"] = {"model_type": "gemma4_unified_audio", "hidden_size": 32}
    else:
        cfg["vision_config"] = {"model_type": "siglip_vision_model" if model_type == "gemma3"
                                else "gemma4_vision", "hidden_size": 32,
                                "num_hidden_layers": 1}
    (folder / "config.json").write_text(json.dumps(dict(sorted(cfg.items())), indent=4))


def make_folder(name, var, mode, out, gains, log):
    folder = out / f"{name}-{mode}"
    config = var["config"]
    save_checkpoint(config, var["seed"], gains, mode, folder)
    if config["model_type"] in ("gemma3", "gemma4", "gemma4_unified"):
        add_vision_stub(folder, config["model_type"], np.random.default_rng(var["seed"] + 7))

    model, _ = load_model(folder)
    pseed, prompt, logits, greedy, glog = choose_prompt(model, gains["min_margin"], 8)
    all_rows = np.concatenate([logits, glog[1:]])
    min_margin = float(margins(np.concatenate([logits, glog])).min())

    # Consistency of mlx-lm itself: the same tokens fed one at a time, and again batched.
    seq = np.concatenate([prompt, greedy[:-1]])
    forced = run_forced(model, seq)
    batched_all = run_batched(model, seq)
    d_forced = float(np.abs(forced - all_rows).max())
    d_batched = float(np.abs(batched_all - all_rows).max())
    argmax_forced = int((forced.argmax(-1) == all_rows.argmax(-1)).sum())
    # Higher-precision evaluation of the same file.
    model32 = to_float32_model(load_model(folder)[0])
    rows32 = run_teacher(model32, prompt, greedy[:-1])
    d32 = float(np.abs(rows32 - all_rows).max())
    argmax32 = int((rows32.argmax(-1) == all_rows.argmax(-1)).sum())
    # Sensitivity: a sliding window one too long, and the first 10 prompt tokens changed
    # (seen at the last 10 prompt positions only through the full-attention layers).
    d_window = float(np.abs(run_teacher(window_changed(folder, config, 1), prompt, greedy[:-1])
                            - all_rows).max())
    other = prompt.copy()
    other[1:11] = make_prompt(999)[1:11]
    d_context = float(np.abs(run_batched(model, other)[-10:] - logits[-10:]).max())
    scale = float(np.abs(all_rows).max())

    # mlx-lm's own generation loop (prompt[:-1] batched, then the last prompt token alone)
    # must pick the same greedy tokens.
    gen = [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=N_GREEDY,
                                            sampler=lambda lp: mx.argmax(lp, -1))]
    if gen != greedy.tolist():
        raise SystemExit(f"{folder}: mlx_lm generate_step greedy {gen} != {greedy.tolist()}")
    text = config.get("text_config", config)
    cross = (transformers_crosscheck(folder, text, np.concatenate([prompt, greedy[:-1]]))
             if text["model_type"] == "gemma4_unified_text" else {})
    gap = router_min_gap(model, prompt, greedy[:-1]) if text.get("enable_moe_block") else None
    meta = {
        "variant": name, "mode": mode, "vocab_size": str(VOCAB),
        "prompt_len": str(PROMPT_LEN), "n_greedy": str(N_GREEDY),
        "mlx_version": mx.__version__, "mlx_lm_version": mlx_lm.__version__,
        "prompt_seed": str(pseed), "weight_seed": str(var["seed"]),
        "min_top2_margin": f"{min_margin:.6g}",
        "mean_top1_prob": f"{float(softmax_top1(all_rows).mean()):.4f}",
        "greedy_distinct": str(len(set(greedy.tolist()))),
        "max_abs_logit": f"{scale:.6g}",
        "tokenwise_vs_golden_max_abs_diff": f"{d_forced:.6g}",
        "tokenwise_argmax_agree": f"{argmax_forced}/{len(all_rows)}",
        "rebatched_vs_golden_max_abs_diff": f"{d_batched:.6g}",
        "float32_vs_golden_max_abs_diff": f"{d32:.6g}",
        "float32_argmax_agree": f"{argmax32}/{len(all_rows)}",
        "window_plus_one_max_abs_diff": f"{d_window:.6g}",
        "far_context_change_max_abs_diff": f"{d_context:.6g}",
        "greedy_logits_row0": "copy of logits[prompt_len-1]",
        "generate_step_greedy": "same tokens",
    }
    meta.update(cross)
    if gap is not None:
        gap, top = gap
        meta["router_topk_min_gap"] = f"{gap:.6g}"
        meta["router_score_max_abs"] = f"{top:.6g}"
    # Written with the safetensors package (its header is padded so the int32/f32 data is
    # 4-byte aligned, unlike mx.save_safetensors) so readers may use the data in place.
    save_file({"prompt": prompt, "logits": np.ascontiguousarray(logits, np.float32),
               "greedy": greedy, "greedy_logits": np.ascontiguousarray(glog, np.float32)},
              str(folder / "golden.safetensors"), metadata=meta)
    log.append(meta)
    print(f"{folder.name}: margin {min_margin:.3f} top1p {meta['mean_top1_prob']} distinct "
          f"{meta['greedy_distinct']} |logit| {scale:.2f} tokenwise {d_forced:.4f} "
          f"({argmax_forced}) f32 {d32:.4f} ({argmax32}) window+1 {d_window:.3f} far-context "
          f"{d_context:.3f} seed {pseed}" + (f" router gap {gap:.4f}" if gap is not None else ""),
          flush=True)


GAINS = {"embed": 0.1, "ple": 0.1, "post": 1.0, "succ_gain": 8.0, "succ_layer": 0, "qk": 0.25, "router": 4.0,
         "min_margin": 1.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/models"))
    ap.add_argument("--only", nargs="*", help="variant names (default all)")
    ap.add_argument("--modes", nargs="*", help="mode names (default all)")
    args = ap.parse_args()
    mx.set_default_device(mx.cpu)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = []
    for name, var in variants().items():
        if args.only and name not in args.only:
            continue
        for mode in MODES:
            if args.modes and mode not in args.modes:
                continue
            if mode in var.get("skip", {}):
                print(f"{name}-{mode}: skipped: {var['skip'][mode]}")
                continue
            make_folder(name, var, mode, out, {**GAINS, **var.get("gains", {})}, log)
    write_versions(out)


def write_versions(out):
    import importlib.metadata as md
    lines = [f"python {platform.python_version()}", f"mlx {mx.__version__}",
             f"mlx-lm {mlx_lm.__version__}", f"numpy {np.__version__}",
             "device cpu", "generated by scripts/make_tiny_models.py"]
    try:
        lines.insert(2, f"mlx-cpu {md.version('mlx-cpu')}")
    except md.PackageNotFoundError:
        pass
    (out / "VERSIONS.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
