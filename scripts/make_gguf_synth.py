#!/usr/bin/env python3
"""Writes a GGUF (architecture gemma4, random Q4_0 weights) with the shapes of
`mlxrt synth --like gemma4-31b`, so llama.cpp's llama-bench can run the same model shapes as
`mlxrt bench` on a synthetic MLX checkpoint. Needs only numpy and the `gguf` package (pinned
0.19.0 in scripts/venv.sh; on the GPU machine its source folder is put on PYTHONPATH).

Shapes (src/mlx/synth.c preset gemma4-31b; docs/reference/gemma-architecture.md §3):
hidden 5376, 60 layers, 32 query heads, sliding layers 16 KV heads × 256, full layers
(i+1) % 6 == 0 (and the last layer) 4 KV heads × 512 with k_eq_v (no attn_v), FFN 21504,
window 1024, vocab 262144, tied embedding, final softcap 30, RoPE θ 1e6 proportional
(25 % of the pairs, llama.cpp's rope_freqs tensor) on full layers and θ 1e4 on sliding ones.

Keys and tensor names are those llama.cpp's gemma4 loader reads (src/models/gemma4.cpp,
src/llama-arch.cpp in the pinned llama-cpp-python 0.3.36 sdist). Every weight matrix and the
embedding are Q4_0 (the embedding doubles as the tied lm_head, as in mlxrt's 4-bit
checkpoints); norms, layer_output_scale and rope_freqs are f32. Values: 4-bit codes uniformly
random, f16 block scales ≈ 0.0043 ± 25 % (dequantized rms ≈ 0.02, like mlxrt synth), norms
1 ± 0.1, layer scale 1 ± 0.02, so activations stay finite through 60 layers.

Data is produced by tiling a few-MB random block buffer and streamed tensor by tensor: memory
stays small and a 17 GB file is written at disk speed.

Usage:
  make_gguf_synth.py -o OUT.gguf --tokenizer TOK.gguf[.gz] [--layers N] [--hidden H] ...
  make_gguf_synth.py --extract-tokenizer SRC.gguf -o TOK.gguf.gz   (tokenizer.* keys only)
The tokenizer metadata (262144 entries) comes from the Gemma 3 270M GGUF
(scripts/make_demo_model.sh puts it in ~/.cache/mlxrt/models/gemma-3-270m-q4_k_m.gguf).
"""
import argparse
import gzip
import os
import shutil
import struct
import sys
import time
import zlib

import numpy as np

import gguf
from gguf import GGMLQuantizationType, GGUFValueType

PRESET = dict(hidden=5376, layers=60, heads=32, kv_heads=16, global_kv_heads=4, head_dim=256,
              global_head_dim=512, inter=21504, window=1024, pattern=6, context=262144,
              vocab=262144, rope_theta=1e6, rope_theta_swa=1e4, partial_rotary=0.25,
              softcap=30.0, eps=1e-6)

QK = 32          # Q4_0 block: f16 scale + 16 bytes of 4-bit codes for 32 weights
QBYTES = 18
ARCH = "gemma4"
TILE_BLOCKS = 1 << 18  # 4.7 MB of random blocks, tiled


def layer_is_full(i, n, pattern):
    # as mlxrt synth: (i+1) % pattern == 0, and HF Gemma4TextConfig forces the last layer full
    return i == n - 1 or (i + 1) % pattern == 0


def f32_le(a):
    return np.ascontiguousarray(a, dtype="<f4")


class Tiler:
    """Q4_0 bytes from a random buffer of blocks; each tensor starts at its own offset."""

    def __init__(self, seed, scale):
        rng = np.random.default_rng(seed)
        blocks = rng.integers(0, 256, size=(TILE_BLOCKS, QBYTES), dtype=np.uint8)
        d = (scale * rng.uniform(0.75, 1.25, size=TILE_BLOCKS)).astype("<f2")
        blocks[:, 0:2] = d.view(np.uint8).reshape(TILE_BLOCKS, 2)
        flat = blocks.reshape(-1)
        self.buf = memoryview(np.concatenate([flat, flat]).tobytes())  # wrap-free slicing
        self.period = flat.size

    def write(self, f, name, nbytes):
        # start on a block boundary chosen by the name, then whole periods
        off = (zlib.crc32(name.encode()) % TILE_BLOCKS) * QBYTES
        left = nbytes
        while left:
            n = min(left, self.period)
            f.write(self.buf[off:off + n])
            left -= n


# GGUF scalar value types: struct format (gguf.GGUFValueType numbering)
_SCALAR = {GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
           GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
           GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
           GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d"}


def read_tokenizer(path):
    """tokenizer.* key/values of a GGUF (optionally gzip-compressed) as (key, value, type, sub).
    Parses only the KV section (gguf.GGUFReader takes ~25 s on a 262144-entry vocabulary)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read(64 << 20)  # the KV section of any tokenizer fits; tensors come after
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n]
        pos += n
        return s

    magic, version = take("<I"), take("<I")
    if magic != gguf.GGUF_MAGIC or version < 2:
        sys.exit(f"error: {path} is not a GGUF v2/v3 file")
    take("<Q")  # tensor count
    n_kv = take("<Q")
    out = []
    for _ in range(n_kv):
        key = string().decode("utf-8")
        t = GGUFValueType(take("<I"))
        sub = None
        if t == GGUFValueType.ARRAY:
            sub = GGUFValueType(take("<I"))
            n = take("<Q")
            if sub == GGUFValueType.STRING:
                val = [string() for _ in range(n)]
            elif sub in _SCALAR:
                dt = np.dtype(_SCALAR[sub])
                val = np.frombuffer(data, dtype=dt, count=n, offset=pos).tolist()
                pos += n * dt.itemsize
            else:
                sys.exit(f"error: {path}: nested array in {key}")
        elif t == GGUFValueType.STRING:
            val = string().decode("utf-8")
        else:
            val = take(_SCALAR[t])
        if key.startswith("tokenizer."):
            out.append((key, val, t, sub))
    return out


def vocab_size(tok):
    for key, val, _, _ in tok:
        if key == "tokenizer.ggml.tokens":
            return len(val)
    sys.exit("error: tokenizer metadata has no tokenizer.ggml.tokens array")


def extract_tokenizer(src, out):
    tok = read_tokenizer(src)
    tmp = out[:-3] if out.endswith(".gz") else out
    w = gguf.GGUFWriter(tmp + ".part", "tokenizer-only")
    for key, val, t, sub in tok:
        w.add_key_value(key, val, t, sub_type=sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    if out.endswith(".gz"):
        with open(tmp + ".part", "rb") as i, gzip.open(out, "wb", compresslevel=9) as o:
            shutil.copyfileobj(i, o)
        os.unlink(tmp + ".part")
    else:
        os.replace(tmp + ".part", out)
    print(f"{out}: {len(tok)} tokenizer keys, vocab {vocab_size(tok)}, {os.path.getsize(out)} bytes")


def plan(a):
    """[(name, ggml shape ne0-first, kind)] with kind 'q4' or an f32 numpy array."""
    rng = np.random.default_rng(a.seed)
    H, n = a.hidden, a.layers
    norm = lambda k: f32_le(1.0 + rng.uniform(-0.1, 0.1, size=k))  # noqa: E731
    n_rot = int(a.global_head_dim * a.partial_rotary / 2)
    rope = [1.0] * n_rot + [1e30] * (a.global_head_dim // 2 - n_rot)
    t = [("token_embd.weight", (H, a.vocab), "q4"),
         ("output_norm.weight", (H,), norm(H)),
         ("rope_freqs.weight", (a.global_head_dim // 2,), f32_le(rope))]
    for i in range(n):
        full = layer_is_full(i, n, a.pattern)
        hd = a.global_head_dim if full else a.head_dim
        kv = a.global_kv_heads if full else a.kv_heads
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", (H,), norm(H)),
              (p + "attn_q.weight", (H, a.heads * hd), "q4"),
              (p + "attn_k.weight", (H, kv * hd), "q4")]
        if not full:  # full layers: attention_k_eq_v, V is the raw K projection
            t.append((p + "attn_v.weight", (H, kv * hd), "q4"))
        t += [(p + "attn_output.weight", (a.heads * hd, H), "q4"),
              (p + "attn_q_norm.weight", (hd,), norm(hd)),
              (p + "attn_k_norm.weight", (hd,), norm(hd)),
              (p + "post_attention_norm.weight", (H,), norm(H)),
              (p + "ffn_norm.weight", (H,), norm(H)),
              (p + "ffn_gate.weight", (H, a.inter), "q4"),
              (p + "ffn_up.weight", (H, a.inter), "q4"),
              (p + "ffn_down.weight", (a.inter, H), "q4"),
              (p + "post_ffw_norm.weight", (H,), norm(H)),
              (p + "layer_output_scale.weight", (1,), f32_le(1.0 + rng.uniform(-0.02, 0.02, 1)))]
    return t


def add_hparams(w, a):
    K = ARCH
    swa = [not layer_is_full(i, a.layers, a.pattern) for i in range(a.layers)]
    w.add_string("general.type", "model")
    w.add_string("general.name", f"mlxrt synthetic {a.like} (random Q4_0, {a.layers} layers)")
    w.add_uint32("general.quantization_version", 2)
    w.add_uint32("general.file_type", 2)  # MOSTLY_Q4_0
    w.add_uint32(f"{K}.context_length", a.context)
    w.add_uint32(f"{K}.embedding_length", a.hidden)
    w.add_uint32(f"{K}.block_count", a.layers)
    w.add_uint32(f"{K}.feed_forward_length", a.inter)
    w.add_uint32(f"{K}.attention.head_count", a.heads)
    w.add_key_value(f"{K}.attention.head_count_kv",
                    [a.kv_heads if s else a.global_kv_heads for s in swa],
                    GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
    w.add_float32(f"{K}.attention.layer_norm_rms_epsilon", a.eps)
    w.add_uint32(f"{K}.attention.key_length", a.global_head_dim)
    w.add_uint32(f"{K}.attention.value_length", a.global_head_dim)
    w.add_uint32(f"{K}.attention.key_length_swa", a.head_dim)
    w.add_uint32(f"{K}.attention.value_length_swa", a.head_dim)
    w.add_uint32(f"{K}.attention.sliding_window", a.window)
    w.add_key_value(f"{K}.attention.sliding_window_pattern", swa, GGUFValueType.ARRAY,
                    sub_type=GGUFValueType.BOOL)
    w.add_uint32(f"{K}.attention.shared_kv_layers", 0)
    w.add_uint32(f"{K}.embedding_length_per_layer_input", 0)
    w.add_float32(f"{K}.rope.freq_base", a.rope_theta)
    w.add_float32(f"{K}.rope.freq_base_swa", a.rope_theta_swa)
    # full layers rotate over the whole 512 with rope_freqs zeroing 75 % of the pairs
    w.add_uint32(f"{K}.rope.dimension_count", a.global_head_dim)
    w.add_uint32(f"{K}.rope.dimension_count_swa", a.head_dim)
    w.add_float32(f"{K}.final_logit_softcapping", a.softcap)


def write_model(a):
    tok = read_tokenizer(a.tokenizer)
    nv = vocab_size(tok)
    if a.vocab != nv:
        sys.exit(f"error: --vocab {a.vocab} but the tokenizer in {a.tokenizer} has {nv} entries")
    for name, v in (("hidden", a.hidden), ("inter", a.inter),
                    ("heads*head_dim", a.heads * a.head_dim),
                    ("heads*global_head_dim", a.heads * a.global_head_dim)):
        if v % QK:
            sys.exit(f"error: {name} = {v} is not a multiple of {QK} (Q4_0 rows)")
    if a.heads % a.kv_heads or a.heads % a.global_kv_heads:
        sys.exit("error: heads must be a multiple of kv_heads and global_kv_heads")
    tensors = plan(a)
    if a.dry_run:
        nb = sum(shape[0] // QK * QBYTES * int(np.prod(shape[1:])) if isinstance(k, str) else k.nbytes
                 for _, shape, k in tensors)
        npar = sum(int(np.prod(shape)) for _, shape, _ in tensors)
        print(f"{len(tensors)} tensors, {npar / 1e9:.3f} B parameters, {nb / 1e9:.2f} GB")
        return
    tmp = a.output + ".part"
    w = gguf.GGUFWriter(tmp, ARCH)
    add_hparams(w, a)
    for key, val, t, sub in tok:
        w.add_key_value(key, val, t, sub_type=sub)
    total = 0
    for name, shape, kind in tensors:
        if isinstance(kind, str):
            nbytes = shape[0] // QK * QBYTES * int(np.prod(shape[1:]))
            # the writer takes numpy order (last dim first) and the byte shape for quant types
            byte_shape = tuple(reversed(shape[1:])) + (shape[0] // QK * QBYTES,)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes,
                              raw_dtype=GGMLQuantizationType.Q4_0)
        else:
            nbytes = kind.nbytes
            w.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), nbytes)
        total += nbytes
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    f = w.fout[0]
    align = w.data_alignment
    pad = lambda: f.write(b"\0" * (-f.tell() % align))  # noqa: E731
    tiler = Tiler(a.seed, a.scale)
    t0 = time.time()
    pad()
    for name, shape, kind in tensors:
        if isinstance(kind, str):
            tiler.write(f, name, shape[0] // QK * QBYTES * int(np.prod(shape[1:])))
        else:
            f.write(kind.tobytes())
        pad()
    w.close()
    os.replace(tmp, a.output)
    dt = time.time() - t0
    print(f"{a.output}: {len(tensors)} tensors, {total / 1e9:.2f} GB of tensor data, "
          f"{os.path.getsize(a.output) / 1e9:.2f} GB file, written in {dt:.1f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--tokenizer", help="GGUF (or .gguf.gz) whose tokenizer.* keys are copied")
    ap.add_argument("--extract-tokenizer", metavar="SRC",
                    help="write only SRC's tokenizer.* keys to -o (gzip when it ends in .gz)")
    ap.add_argument("--like", default="gemma4-31b", choices=["gemma4-31b"])
    for k, v in PRESET.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--dry-run", action="store_true", help="print the size only")
    ap.add_argument("--scale", type=float, default=0.0043,
                    help="mean Q4_0 block scale (0.0043: dequantized rms ≈ 0.02)")
    a = ap.parse_args()
    if a.extract_tokenizer:
        extract_tokenizer(a.extract_tokenizer, a.output)
        return
    if not a.tokenizer:
        ap.error("--tokenizer is required")
    if a.layers < 2:
        ap.error("--layers must be ≥ 2 (llama.cpp's gemma4 asserts at least one sliding layer)")
    write_model(a)


if __name__ == "__main__":
    main()
