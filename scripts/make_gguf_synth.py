#!/usr/bin/env python3
"""Writes a GGUF (architecture gemma4, random Q4_0 weights) with the shapes of
`mlxrt synth --like PRESET`, so llama.cpp's llama-bench can run the same model shapes as
`mlxrt bench` on a synthetic MLX checkpoint. Needs only numpy and the `gguf` package (pinned
0.19.0 in scripts/venv.sh; on the GPU machine its source folder is put on PYTHONPATH).

Presets (scripts/gguf_gemma4.py, the Gemma 4 rows of tools/synth.c; gemma-architecture.md §3,
§7, §8): gemma4-31b (dense, k_eq_v), gemma4-26b-a4b (MoE: 128 experts top-8 of width 704 next
to a shared dense MLP of 2112, router), gemma4-e2b / gemma4-e4b (per-layer embeddings, KV
sharing, E2B's double-wide MLP on the KV-shared layers), gemma4-12b (dense, k_eq_v, 1 global
KV head). Layer i is full when (i+1) % pattern == 0 or it is the last one; full layers have
head dim 512 and RoPE θ 1e6 over 25 % of the pairs (llama.cpp's rope_freqs tensor), sliding
ones 256 and θ 1e4. --layers N keeps the pattern; the KV-shared count is scaled as mlxrt synth
scales it and must be one llama.cpp can reuse (the last unshared layer full, the one before it
sliding): the script refuses the others and names valid layer counts.

Keys and tensor names are those llama.cpp's gemma4 loader reads (src/models/gemma4.cpp,
src/llama-model.cpp, src/llama-arch.cpp in the pinned llama-cpp-python 0.3.36 sdist). Types:
every weight matrix, both embeddings and the expert stacks (merged ffn_gate_up_exps
[H, 2·704, 128] as the converter writes them, ffn_down_exps) Q4_0, rows that are not a multiple
of 32 would fall back to f32; norms, scales, rope_freqs and the MoE router ffn_gate_inp f32, as
convert_hf_to_gguf.py + llama-quantize leave them (per_layer_model_proj, which llama-quantize
leaves f16, is Q4_0 as in mlxrt's 4-bit checkpoints: the same bytes per token). Values: 4-bit
codes uniformly random, f16 block scales ≈ 0.0043 ± 25 % (dequantized rms ≈ 0.02, like mlxrt
synth), the f32 router uniform with the same rms, norms, router and per-expert scales 1 ± 0.1,
layer scale 1 ± 0.02, so activations stay finite through every layer.

Data is produced by tiling a few-MB random buffer and streamed tensor by tensor: memory stays
small and a 17 GB file is written at disk speed.

Usage:
  make_gguf_synth.py --like PRESET -o OUT.gguf --tokenizer TOK.gguf[.gz] [--layers N] [...]
  make_gguf_synth.py --like PRESET [--layers N] --dry-run [--list]   (sizes, tensor list)
  make_gguf_synth.py --like PRESET [--layers N] --verify FILE.gguf
      reads FILE back with gguf.GGUFReader: metadata as this script writes it for the preset,
      every tensor llama.cpp's loader creates (a table of its create_tensor calls) with its
      shape and type, no tensor it would not create, finite values
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

from gguf_gemma4 import (ARCH, COMMON, PRESETS, check_loader, expected_present, layer_plan,
                         llama_reuse_ok, loader_hparams, resolve)

QK = 32          # Q4_0 block: f16 scale + 16 bytes of 4-bit codes for 32 weights
QBYTES = 18
Q4, F32 = GGMLQuantizationType.Q4_0, GGMLQuantizationType.F32
TILE_UNITS = 1 << 18  # random blocks (4.7 MB of Q4_0) or values, tiled
U32, I32, F32V = GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.FLOAT32


def f32_le(a):
    return np.ascontiguousarray(a, dtype="<f4")


def nbytes(shape, qtype):
    n = int(np.prod(shape))
    return n // QK * QBYTES if qtype == Q4 else n * 4


class Tiler:
    """Bytes of one tensor type from a random buffer; each tensor starts at its own offset."""

    def __init__(self, qtype, seed, scale):
        if qtype == Q4:
            rng = np.random.default_rng(seed)
            blocks = rng.integers(0, 256, size=(TILE_UNITS, QBYTES), dtype=np.uint8)
            d = (scale * rng.uniform(0.75, 1.25, size=TILE_UNITS)).astype("<f2")
            blocks[:, 0:2] = d.view(np.uint8).reshape(TILE_UNITS, 2)
            flat, self.unit = blocks.reshape(-1), QBYTES
        else:
            # Q4_0 rms: block scale × rms of the codes −8..7 (√21.5); uniform ±rms·√3
            rng = np.random.default_rng(seed + 1)
            half = scale * np.sqrt(21.5) * np.sqrt(3.0)
            flat = rng.uniform(-half, half, size=TILE_UNITS).astype("<f4").view(np.uint8)
            self.unit = 4
        self.buf = memoryview(np.concatenate([flat, flat]).tobytes())  # wrap-free slicing
        self.period = flat.size

    def write(self, f, name, nbytes):
        # start on a unit boundary chosen by the name, then whole periods
        off = (zlib.crc32(name.encode()) % TILE_UNITS) * self.unit
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
    """[(name, ggml shape ne0-first, type, data)]: data an f32 numpy array, or None for random
    tiled bytes. Q4_0 needs rows (ne0) that are a multiple of 32, else f32."""
    rng = np.random.default_rng(a.seed)
    H, n = a.hidden, a.layers
    norm = lambda k: f32_le(1.0 + rng.uniform(-0.1, 0.1, size=k))  # noqa: E731
    q4 = lambda *ne: (ne, Q4 if ne[0] % QK == 0 else F32, None)  # noqa: E731
    n_rot = int(a.global_head_dim * a.partial_rotary / 2)
    rope = [1.0] * n_rot + [1e30] * (a.global_head_dim // 2 - n_rot)
    t = [("token_embd.weight",) + q4(H, a.vocab),
         ("output_norm.weight", (H,), F32, norm(H)),
         ("rope_freqs.weight", (a.global_head_dim // 2,), F32, f32_le(rope))]
    if a.ple:
        t += [("per_layer_token_embd.weight",) + q4(n * a.ple, a.vocab),
              ("per_layer_model_proj.weight",) + q4(H, n * a.ple),
              ("per_layer_proj_norm.weight", (a.ple,), F32, norm(a.ple))]
    for i in range(n):
        L = layer_plan(a, i)
        hd, kv, p = L.head_dim, L.kv, f"blk.{i}."
        t += [(p + "attn_norm.weight", (H,), F32, norm(H)),
              (p + "attn_q.weight",) + q4(H, a.heads * hd)]
        if L.has_kv:  # KV-shared layers reuse an earlier layer's cache: no K/V projections
            t.append((p + "attn_k.weight",) + q4(H, kv * hd))
            if not L.k_eq_v:  # full layers with attention_k_eq_v: V is the raw K projection
                t.append((p + "attn_v.weight",) + q4(H, kv * hd))
        t += [(p + "attn_output.weight",) + q4(a.heads * hd, H),
              (p + "attn_q_norm.weight", (hd,), F32, norm(hd))]
        if L.has_kv:
            t.append((p + "attn_k_norm.weight", (hd,), F32, norm(hd)))
        t += [(p + "post_attention_norm.weight", (H,), F32, norm(H)),
              (p + "ffn_norm.weight", (H,), F32, norm(H)),
              (p + "ffn_gate.weight",) + q4(H, L.inter),
              (p + "ffn_up.weight",) + q4(H, L.inter),
              (p + "ffn_down.weight",) + q4(L.inter, H),
              (p + "post_ffw_norm.weight", (H,), F32, norm(H))]
        if a.experts:  # §7: router on the attention output, experts next to the dense MLP
            E, mi = a.experts, a.moe_inter
            t += [(p + "ffn_gate_inp.weight", (H, E), F32, None),
                  (p + "ffn_gate_inp.scale", (H,), F32, norm(H)),
                  (p + "pre_ffw_norm_2.weight", (H,), F32, norm(H)),
                  (p + "post_ffw_norm_1.weight", (H,), F32, norm(H)),
                  (p + "post_ffw_norm_2.weight", (H,), F32, norm(H)),
                  (p + "ffn_gate_up_exps.weight",) + q4(H, 2 * mi, E),
                  (p + "ffn_down_exps.weight",) + q4(mi, H, E),
                  (p + "ffn_down_exps.scale", (E,), F32, norm(E))]  # router.per_expert_scale
        if a.ple:  # §8: per-layer input gate H→256, projection 256→H, norm
            t += [(p + "inp_gate.weight",) + q4(H, a.ple),
                  (p + "proj.weight",) + q4(a.ple, H),
                  (p + "post_norm.weight", (H,), F32, norm(H))]
        t.append((p + "layer_output_scale.weight", (1,), F32,
                  f32_le(1.0 + rng.uniform(-0.02, 0.02, 1))))
    return t


def hparams_kv(a):
    """[(key, value, type, array type)] in the order they are written."""
    K, n = ARCH, a.layers
    plans = [layer_plan(a, i) for i in range(n)]
    ff = [L.inter for L in plans]
    kv = [("general.type", "model", GGUFValueType.STRING, None),
          ("general.name", f"mlxrt synthetic {a.like} (random Q4_0, {n} layers)",
           GGUFValueType.STRING, None),
          ("general.quantization_version", 2, U32, None),
          ("general.file_type", 2, U32, None),  # MOSTLY_Q4_0
          (f"{K}.context_length", a.context, U32, None),
          (f"{K}.embedding_length", a.hidden, U32, None),
          (f"{K}.block_count", n, U32, None),
          # an array where E2B's double-wide layers differ (convert_hf_to_gguf.py does the same)
          (f"{K}.feed_forward_length", ff[0], U32, None) if len(set(ff)) == 1 else
          (f"{K}.feed_forward_length", ff, GGUFValueType.ARRAY, I32),
          (f"{K}.attention.head_count", a.heads, U32, None),
          (f"{K}.attention.head_count_kv", [L.kv for L in plans], GGUFValueType.ARRAY, I32),
          (f"{K}.attention.layer_norm_rms_epsilon", a.eps, F32V, None),
          (f"{K}.attention.key_length", a.global_head_dim, U32, None),
          (f"{K}.attention.value_length", a.global_head_dim, U32, None),
          (f"{K}.attention.key_length_swa", a.head_dim, U32, None),
          (f"{K}.attention.value_length_swa", a.head_dim, U32, None),
          (f"{K}.attention.sliding_window", a.window, U32, None),
          (f"{K}.attention.sliding_window_pattern", [not L.full for L in plans],
           GGUFValueType.ARRAY, GGUFValueType.BOOL),
          (f"{K}.attention.shared_kv_layers", a.shared, U32, None),
          (f"{K}.embedding_length_per_layer_input", a.ple, U32, None),
          (f"{K}.rope.freq_base", a.rope_theta, F32V, None),
          (f"{K}.rope.freq_base_swa", a.rope_theta_swa, F32V, None),
          # full layers rotate over the whole 512 with rope_freqs zeroing 75 % of the pairs
          (f"{K}.rope.dimension_count", a.global_head_dim, U32, None),
          (f"{K}.rope.dimension_count_swa", a.head_dim, U32, None),
          (f"{K}.final_logit_softcapping", a.softcap, F32V, None)]
    if a.experts:
        kv += [(f"{K}.expert_count", a.experts, U32, None),
               (f"{K}.expert_used_count", a.top_k, U32, None),
               (f"{K}.expert_feed_forward_length", a.moe_inter, U32, None)]
    return kv


def summary(tensors):
    nb = sum(nbytes(shape, q) for _, shape, q, _ in tensors)
    npar = sum(int(np.prod(shape)) for _, shape, _, _ in tensors)
    return f"{len(tensors)} tensors, {npar / 1e9:.3f} B parameters, {nb / 1e9:.2f} GB"


def loader_check(a, kv, types, file, bad):
    """The loader's tensor table against file {name: (ggml shape, type)} with the hparams of
    kv/types; appends problems to bad, returns the tensors the loader would create."""
    hp = loader_hparams(kv, types, bad)
    if hp is None:
        return {}
    created, problems = check_loader(hp, file, expected_present(a))
    bad += problems
    if not llama_reuse_ok(hp["swa"], hp["n"] - hp["shared"]):
        bad.append("KV sharing: llama.cpp would reuse a layer of the other type")
    return created


def dry_run(a, listing):
    """Sizes, and the loader check on the plan (the metadata and tensors a write would give)."""
    tensors = plan(a)
    hk = hparams_kv(a) + [("tokenizer.ggml.tokens", a.vocab, GGUFValueType.ARRAY,
                           GGUFValueType.STRING)]
    bad = []
    created = loader_check(a, {k: v for k, v, _, _ in hk},
                           {k: [t] + ([s] if s is not None else []) for k, _, t, s in hk},
                           {name: (shape, q) for name, shape, q, _ in tensors}, bad)
    print(f"{a.like}: {a.layers} layers ({a.shared} KV-shared), {summary(tensors)}; loader "
          f"table: {f'{len(created)} tensors created, OK' if not bad else 'FAILED'}")
    for b in bad[:40]:
        print("  " + b)
    if listing:
        for name, shape, q, _ in tensors:
            print(f"  {name:34s} {str(list(shape)):22s} {q.name:5s} {nbytes(shape, q):>13,d} B")
    if bad:
        sys.exit(1)


def write_model(a):
    tok = read_tokenizer(a.tokenizer)
    nv = vocab_size(tok)
    if a.vocab != nv:
        sys.exit(f"error: --vocab {a.vocab} but the tokenizer in {a.tokenizer} has {nv} entries")
    tensors = plan(a)
    tmp = a.output + ".part"
    w = gguf.GGUFWriter(tmp, ARCH)
    for key, val, t, sub in hparams_kv(a):
        w.add_key_value(key, val, t, sub_type=sub)
    for key, val, t, sub in tok:
        w.add_key_value(key, val, t, sub_type=sub)
    total = 0
    for name, shape, q, _ in tensors:
        nb = nbytes(shape, q)
        if q == Q4:
            # the writer takes numpy order (last dim first) and the byte shape for quant types
            byte_shape = tuple(reversed(shape[1:])) + (shape[0] // QK * QBYTES,)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nb, raw_dtype=Q4)
        else:
            w.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), nb)
        total += nb
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    f = w.fout[0]
    align = w.data_alignment
    pad = lambda: f.write(b"\0" * (-f.tell() % align))  # noqa: E731
    tilers = {}
    t0 = time.time()
    pad()
    for name, shape, q, data in tensors:
        if data is None:
            if q not in tilers:
                tilers[q] = Tiler(q, a.seed, a.scale)
            tilers[q].write(f, name, nbytes(shape, q))
        else:
            f.write(data.tobytes())
        pad()
    w.close()
    os.replace(tmp, a.output)
    dt = time.time() - t0
    print(f"{a.output}: {len(tensors)} tensors, {total / 1e9:.2f} GB of tensor data, "
          f"{os.path.getsize(a.output) / 1e9:.2f} GB file, written in {dt:.1f} s")


def field_value(f):
    if f.types[0] == GGUFValueType.ARRAY and f.types[-1] == GGUFValueType.STRING:
        return len(f.data)  # only its length is compared (the vocabulary)
    return f.contents()


def verify(a, path):
    """Reads PATH back and checks it against this preset and llama.cpp's loader (the tables
    in gguf_gemma4.py); prints the problems and exits non-zero when there are any."""
    t0 = time.time()
    r = gguf.GGUFReader(path)
    fields = {f.name: f for f in r.fields.values()}
    bad = []
    # 1. metadata: what this script writes for --like/--layers (the preset's dimensions)
    want = {k: (v, t, s) for k, v, t, s in hparams_kv(a)}
    want["general.architecture"] = (ARCH, GGUFValueType.STRING, None)
    for key, (val, t, sub) in want.items():
        f = fields.get(key)
        if f is None:
            bad.append(f"key {key}: missing")
            continue
        got = field_value(f)
        if f.types[0] != t or (sub is not None and f.types[-1] != sub):
            bad.append(f"key {key}: type {[x.name for x in f.types]}, want {t.name} {sub}")
        elif (isinstance(val, float) and not np.isclose(got, val, rtol=1e-6)) or \
                (not isinstance(val, float) and got != val):
            bad.append(f"key {key}: {got!r:.80}, want {val!r:.80}")
    ntok = field_value(fields["tokenizer.ggml.tokens"]) if "tokenizer.ggml.tokens" in fields else 0
    if ntok != a.vocab:
        bad.append(f"tokenizer: {ntok} tokens, the preset's vocab is {a.vocab}")
    extra = [k for k in fields if k not in want and not k.startswith(("tokenizer.", "GGUF."))]
    bad += [f"key {k}: not written by this script" for k in extra]
    # 2. tensors: the loader's create_tensor calls with the file's hparams
    tensors = {t.name: t for t in r.tensors}
    created = loader_check(
        a, {k: field_value(f) for k, f in fields.items()}, {k: f.types for k, f in fields.items()},
        {k: (tuple(int(x) for x in t.shape), t.tensor_type) for k, t in tensors.items()}, bad)
    # 3. values: finite, in the ranges the writer chose
    for name, t in tensors.items():
        raw = np.asarray(t.data).reshape(-1).view(np.uint8)[:QBYTES * 65536]
        if t.tensor_type == Q4:
            v = raw[:raw.size // QBYTES * QBYTES].reshape(-1, QBYTES)[:, :2].copy().view("<f2")
            ok = np.all(np.isfinite(v)) and np.all(np.abs(v) < 0.02)
        else:
            v = raw.view("<f4")
            ok = np.all(np.isfinite(v)) and (name.startswith("rope_freqs") or np.all(np.abs(v) < 2))
        if not ok:
            bad.append(f"tensor {name}: values out of range")
    tail = f"{len(tensors)} tensors, {len(fields)} keys, read in {time.time() - t0:.1f} s"
    if bad:
        print(f"{path}: FAILED ({tail})")
        for b in bad[:40]:
            print("  " + b)
        sys.exit(1)
    types = {}
    for t in tensors.values():
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    print(f"{path}: OK for {a.like} with {a.layers} layers ({a.shared} KV-shared): every tensor "
          f"llama.cpp's gemma4 loader creates, none else ({len(created)} created; "
          f"{', '.join(f'{v} {k}' for k, v in sorted(types.items()))}); {tail}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output")
    ap.add_argument("--tokenizer", help="GGUF (or .gguf.gz) whose tokenizer.* keys are copied")
    ap.add_argument("--extract-tokenizer", metavar="SRC",
                    help="write only SRC's tokenizer.* keys to -o (gzip when it ends in .gz)")
    ap.add_argument("--like", default="gemma4-31b", choices=sorted(PRESETS))
    for k, v in list(PRESETS["gemma4-31b"].items()) + list(COMMON.items()):
        if k not in ("k_eq_v", "kv_shared", "double_wide"):  # structural: fixed by the preset
            ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=None,
                            help=f"override the preset's {k}")
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--dry-run", action="store_true", help="print the size only")
    ap.add_argument("--list", action="store_true", help="with --dry-run: every tensor too")
    ap.add_argument("--verify", metavar="FILE", help="check FILE (written for these options)")
    ap.add_argument("--scale", type=float, default=0.0043,
                    help="mean Q4_0 block scale (0.0043: dequantized rms ≈ 0.02)")
    a = ap.parse_args()
    if a.extract_tokenizer:
        if not a.output:
            ap.error("-o is required")
        extract_tokenizer(a.extract_tokenizer, a.output)
        return
    err = resolve(a)
    if err:
        sys.exit(f"error: {err}")
    if a.dry_run:
        dry_run(a, a.list)
    elif a.verify:
        verify(a, a.verify)
    elif not a.output or not a.tokenizer:
        ap.error("-o and --tokenizer are required to write a model")
    else:
        write_model(a)


if __name__ == "__main__":
    main()
