"""Gemma 4 presets and llama.cpp's gemma4 loader, as tables, for scripts/make_gguf_synth.py.

PRESETS are the Gemma 4 rows of tools/synth.c (`mlxrt synth --like`), expanded the way
synth.c expands them (layer_is_full, kv_shared_for, plan_layer); gemma-architecture.md §3, §7,
§8. LOADER is the list of create_tensor calls of llama_model_gemma4::load_arch_tensors
(src/models/gemma4.cpp) and of the generic ".scale" pass of llama_model_base::load_tensors
(src/llama-model.cpp) in the llama.cpp of the pinned llama-cpp-python 0.3.36 sdist; KEYS the
hparams llama_model_base::load_hparams and llama_model_gemma4::load_arch_hparams read.
"""
from types import SimpleNamespace

from gguf import GGMLQuantizationType, GGUFValueType

ARCH = "gemma4"

# name: tools/synth.c PRESETS (global_kv_heads 0 = null: full layers keep kv_heads; kv_shared
# is num_kv_shared_layers at full depth; double_wide doubles the MLP of the KV-shared layers)
_F = ("hidden layers inter heads kv_heads head_dim window context vocab global_head_dim "
      "global_kv_heads k_eq_v pattern ple kv_shared double_wide experts top_k moe_inter").split()
PRESETS = {name: dict(zip(_F, v)) for name, v in {
    "gemma4-31b":     (5376, 60, 21504, 32, 16, 256, 1024, 262144, 262144,
                       512, 4, 1, 6, 0, 0, 0, 0, 0, 0),
    "gemma4-26b-a4b": (2816, 30, 2112, 16, 8, 256, 1024, 262144, 262144,
                       512, 2, 1, 6, 0, 0, 0, 128, 8, 704),
    "gemma4-e2b":     (1536, 35, 6144, 8, 1, 256, 512, 131072, 262144,
                       512, 0, 0, 5, 256, 20, 1, 0, 0, 0),
    "gemma4-e4b":     (2560, 42, 10240, 8, 2, 256, 512, 131072, 262144,
                       512, 0, 0, 6, 256, 18, 0, 0, 0, 0),
    "gemma4-12b":     (3840, 48, 15360, 16, 8, 256, 1024, 131072, 262144,
                       512, 1, 1, 6, 0, 0, 0, 0, 0, 0),
}.items()}
# shared by every Gemma 4 variant (§3): RoPE, final softcap, RMSNorm eps
COMMON = dict(rope_theta=1e6, rope_theta_swa=1e4, partial_rotary=0.25, softcap=30.0, eps=1e-6)
LLAMA_MAX_LAYERS, LLAMA_MAX_EXPERTS = 512, 1024


def layer_is_full(i, n, pattern):
    # as mlxrt synth: (i+1) % pattern == 0, and HF Gemma4TextConfig forces the last layer full
    return i == n - 1 or (i + 1) % pattern == 0


def kv_shared_for(like, n, pattern):
    """synth.c kv_shared_for: the preset's count scaled to n layers, lowered until every shared
    layer has an earlier unshared one of its type."""
    ps = PRESETS[like]
    if not ps["kv_shared"]:
        return 0
    s = ps["kv_shared"] if n == ps["layers"] else \
        (ps["kv_shared"] * n + ps["layers"] // 2) // ps["layers"]
    for s in range(s, 0, -1):
        first = n - s
        if first > 0 and all(any(layer_is_full(i, n, pattern) == layer_is_full(j, n, pattern)
                                 for i in range(first)) for j in range(first, n)):
            return s
    return 0


def llama_reuse_ok(swa, first):
    """llama.cpp (llama-model.cpp create_memory, GEMMA4): n_layer_kv_from_start ≥ 2, and shared
    layer il reuses layer first-2 when sliding, first-1 when full; the KV caches assert that the
    target is of the same type (which makes it the last unshared layer of that type, as in HF)."""
    return first >= 2 and all(swa[first - (2 if swa[il] else 1)] == swa[il]
                              for il in range(first, len(swa)))


def layer_plan(a, i):
    """synth.c plan_layer for layer i of a.layers with a.shared KV-shared layers."""
    n, first = a.layers, a.layers - a.shared
    full = layer_is_full(i, n, a.pattern)
    has_kv = i < first
    return SimpleNamespace(
        full=full, has_kv=has_kv,
        head_dim=a.global_head_dim if full else a.head_dim,
        kv=a.global_kv_heads if full and a.k_eq_v and a.global_kv_heads else a.kv_heads,
        k_eq_v=bool(a.k_eq_v and full and has_kv),
        inter=a.inter * (2 if a.double_wide and i >= first else 1))


def resolve(a):
    """Fills a with the preset's values (options given on the command line win) and a.shared;
    returns an error message or None."""
    for k, v in list(PRESETS[a.like].items()) + list(COMMON.items()):
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    n = a.layers
    if not 2 <= n <= LLAMA_MAX_LAYERS:
        return "--layers must be 2..512 (llama.cpp's gemma4 needs at least one sliding layer)"
    a.shared = kv_shared_for(a.like, n, a.pattern)
    swa = [not layer_is_full(i, n, a.pattern) for i in range(n)]
    if not llama_reuse_ok(swa, n - a.shared):
        ok = [m for m in range(2, PRESETS[a.like]["layers"] + 1) if kv_shared_for(
            a.like, m, a.pattern) and llama_reuse_ok(
            [not layer_is_full(i, m, a.pattern) for i in range(m)],
            m - kv_shared_for(a.like, m, a.pattern))]
        return (f"{a.like} with {n} layers has {a.shared} KV-shared layers (mlxrt synth's scaling) "
                f"that llama.cpp cannot reuse (it takes layer {n - a.shared - 1} for the full ones "
                f"and {n - a.shared - 2} for the sliding ones); layer counts with a valid KV "
                f"sharing: {', '.join(map(str, ok))} (or fewer layers, without sharing)")
    kvs = {a.kv_heads} | ({a.global_kv_heads} if a.k_eq_v and a.global_kv_heads else set())
    if any(k <= 0 or a.heads % k for k in kvs):
        return f"heads {a.heads} must be a multiple of the KV heads {sorted(kvs)}"
    if a.experts and not (0 < a.top_k <= a.experts <= LLAMA_MAX_EXPERTS and a.moe_inter > 0):
        return "MoE needs 0 < top_k ≤ experts ≤ 1024 and moe_inter > 0"
    return None


# ---- llama.cpp's loader -------------------------------------------------------------------

REQ, OPT, DUP = 0, 1, 2  # flags: 0, TENSOR_NOT_REQUIRED, TENSOR_DUPLICATED (not counted)
# (name, ne in ggml order, flags, when the call is made, type this script writes, whether this
# script writes it when the loader does not require it). Expressions over: E n_embd, V n_vocab,
# L n_layer, P n_embd_per_layer, NE n_expert, FE n_ff_exp; per layer i: nh n_head(i), nkv
# n_head_kv(i), hd n_embd_head_k(i), ff n_ff(i), swa is_swa(i), has_kv has_kv(i); kvf the
# loader's kv_flags (REQ on layers with their own KV, OPT on the shared ones); got(t) whether
# the loader got tensor t (this layer's blk.i.t) earlier; K_EQ_V the preset's attention_k_eq_v.
# Types: q4 = Q4_0 when ne0 % 32 == 0, else f32. 1-D tensors and norms are f32 (the converter
# writes them so), ffn_gate_inp f32 (convert_hf_to_gguf.py forces it, llama-quantize skips it).
# per_layer_model_proj: llama-quantize leaves it f16, this script makes it Q4_0 as mlxrt does.
LOADER_GLOBAL = [
    ("output.weight", "E, V", "OPT", "True", "q4", "False"),          # tied: absent
    ("token_embd.weight", "E, V", "DUP", "not got('output.weight')", "q4", None),
    ("token_embd.weight", "E, V", "REQ", "True", "q4", None),
    ("per_layer_token_embd.weight", "P * L, V", "REQ", "P > 0", "q4", None),
    ("per_layer_model_proj.weight", "E, P * L", "REQ", "P > 0", "q4", None),
    ("per_layer_proj_norm.weight", "P,", "REQ", "P > 0", "f32", None),
    ("output_norm.weight", "E,", "REQ", "True", "f32", None),
]
LOADER_LAYER = [
    ("attn_norm.weight", "E,", "REQ", "True", "f32", None),
    ("attn_qkv.weight", "E, hd * nh + 2 * hd * nkv", "OPT", "True", "q4", "False"),
    ("attn_q.weight", "E, hd * nh", "REQ", "not got('attn_qkv.weight')", "q4", None),
    ("attn_k.weight", "E, hd * nkv", "kvf", "not got('attn_qkv.weight')", "q4", "has_kv"),
    ("attn_v.weight", "E, hd * nkv", "OPT", "not got('attn_qkv.weight')", "q4",
     "has_kv and not (K_EQ_V and not swa)"),                          # k_eq_v: V = raw K
    ("attn_output.weight", "hd * nh, E", "REQ", "True", "q4", None),
    ("attn_q_norm.weight", "hd,", "REQ", "True", "f32", None),
    ("attn_k_norm.weight", "hd,", "kvf", "True", "f32", "has_kv"),
    ("post_attention_norm.weight", "E,", "REQ", "True", "f32", None),
    ("layer_output_scale.weight", "1,", "OPT", "True", "f32", "True"),  # layer_scalar
    ("rope_freqs.weight", "hd // 2,", "DUP if rope_seen else REQ", "not swa", "f32", None),
    ("ffn_norm.weight", "E,", "REQ", "True", "f32", None),
    ("ffn_gate.weight", "E, ff", "REQ", "True", "q4", None),
    ("ffn_up.weight", "E, ff", "REQ", "True", "q4", None),
    ("ffn_down.weight", "ff, E", "REQ", "True", "q4", None),
    ("post_ffw_norm.weight", "E,", "REQ", "True", "f32", None),
    ("ffn_gate_inp.weight", "E, NE", "OPT", "True", "f32", "NE > 0"),  # router: has_expert
    ("ffn_gate_inp.scale", "E,", "REQ", "got('ffn_gate_inp.weight')", "f32", None),
    ("pre_ffw_norm_2.weight", "E,", "REQ", "got('ffn_gate_inp.weight')", "f32", None),
    ("post_ffw_norm_1.weight", "E,", "REQ", "got('ffn_gate_inp.weight')", "f32", None),
    ("post_ffw_norm_2.weight", "E,", "REQ", "got('ffn_gate_inp.weight')", "f32", None),
    ("ffn_gate_up_exps.weight", "E, FE * 2, NE", "OPT", "got('ffn_gate_inp.weight')", "q4",
     "True"),                                                         # merged, as converted
    ("ffn_gate_exps.weight", "E, FE, NE", "REQ",
     "got('ffn_gate_inp.weight') and not got('ffn_gate_up_exps.weight')", "q4", None),
    ("ffn_up_exps.weight", "E, FE, NE", "REQ",
     "got('ffn_gate_inp.weight') and not got('ffn_gate_up_exps.weight')", "q4", None),
    ("ffn_down_exps.weight", "FE, E, NE", "REQ", "got('ffn_gate_inp.weight')", "q4", None),
    ("inp_gate.weight", "E, P", "REQ", "P > 0", "q4", None),
    ("proj.weight", "P, E", "REQ", "P > 0", "q4", None),
    ("post_norm.weight", "E,", "REQ", "P > 0", "f32", None),
]
# generic pass: optional per-tensor scales of the matrices the layer got, per-expert ones of the
# separate expert stacks (gemma4's converter writes router.per_expert_scale as ffn_down_exps.scale)
for _m in ("attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "ffn_gate", "ffn_down",
           "ffn_up"):
    for _s in ("scale", "input_scale"):
        LOADER_LAYER.append((f"{_m}.{_s}", "1,", "OPT", f"got('{_m}.weight')", "f32", "False"))
for _m in ("ffn_gate_exps", "ffn_down_exps", "ffn_up_exps"):
    for _s in ("scale", "input_scale"):
        LOADER_LAYER.append((f"{_m}.{_s}", "NE,", "OPT", f"got('{_m}.weight')", "f32",
                             str(_m == "ffn_down_exps" and _s == "scale")))

_V = GGUFValueType
# key (after "gemma4."): how llama.cpp reads it: "u32"/"f32" get_key (the type must match),
# "arr" get_key_or_arr (a u32 or an int32/uint32/bool array of n_layer), "pattern" get_arr;
# required or not
KEYS = {"context_length": ("u32", True), "embedding_length": ("u32", True),
        "block_count": ("u32", True), "expert_count": ("u32", False),
        "expert_used_count": ("arr", False), "feed_forward_length": ("arr", False),
        "attention.head_count": ("arr", False), "attention.head_count_kv": ("arr", False),
        "attention.key_length": ("u32", False), "attention.value_length": ("u32", False),
        "rope.freq_base": ("f32", False), "rope.dimension_count": ("u32", False),
        "attention.key_length_swa": ("u32", True), "attention.value_length_swa": ("u32", True),
        "rope.dimension_count_swa": ("u32", False),
        "attention.sliding_window_pattern": ("pattern", True),
        "attention.shared_kv_layers": ("u32", False), "rope.freq_base_swa": ("f32", False),
        "expert_feed_forward_length": ("arr", False), "attention.sliding_window": ("u32", True),
        "attention.layer_norm_rms_epsilon": ("f32", True),
        "embedding_length_per_layer_input": ("u32", True),
        "final_logit_softcapping": ("f32", False)}


def loader_hparams(kv, types, bad):
    """The hparams llama.cpp derives from the file's keys (None after a fatal problem)."""
    got = {}
    n = kv.get(f"{ARCH}.block_count")
    for k, (how, req) in KEYS.items():
        key = f"{ARCH}.{k}"
        if key not in kv:
            if req:
                bad.append(f"key {key}: required by llama.cpp, missing")
            continue
        t = types[key]
        is_arr = t[0] == _V.ARRAY
        if how in ("u32", "f32") and t != [_V.UINT32 if how == "u32" else _V.FLOAT32]:
            bad.append(f"key {key}: type {[x.name for x in t]}, llama.cpp wants {how}")
        elif how in ("arr", "pattern") and is_arr and (
                t[-1] not in (_V.INT32, _V.UINT32, _V.BOOL) or len(kv[key]) != n):
            bad.append(f"key {key}: wants an int32/uint32/bool array of {n}")
        elif (how == "arr" and not is_arr and t != [_V.UINT32]) or \
                (how == "pattern" and not is_arr):
            bad.append(f"key {key}: type {[x.name for x in t]}, llama.cpp wants {how}")
        else:
            v = kv[key]
            got[k] = [int(x) for x in v] if is_arr else (v if how == "f32" else int(v))
    need = ("block_count", "embedding_length", "attention.sliding_window_pattern",
            "embedding_length_per_layer_input")
    if any(k not in got for k in need) or "tokenizer.ggml.tokens" not in kv:
        bad.append("cannot derive the loader's hparams")
        return None
    arr = lambda k, d: got[k] if isinstance(got.get(k), list) else [got.get(k, d)] * n  # noqa
    nh = arr("attention.head_count", 0)
    E = got["embedding_length"]
    hp = dict(n=n, E=E, V=kv["tokenizer.ggml.tokens"], nh=nh,
              nkv=arr("attention.head_count_kv", None),
              swa=[bool(x) for x in got["attention.sliding_window_pattern"]],
              ff=arr("feed_forward_length", 0), P=got["embedding_length_per_layer_input"],
              shared=got.get("attention.shared_kv_layers", 0), NE=got.get("expert_count", 0),
              used=arr("expert_used_count", 0), FE=arr("expert_feed_forward_length", 0)[0])
    hp["nkv"] = [k if k is not None else h for k, h in zip(hp["nkv"], nh)]
    hd_full = got.get("attention.key_length", E // nh[0] if nh[0] else 0)
    hd_swa = got.get("attention.key_length_swa", hd_full)
    if got.get("attention.value_length", hd_full) != hd_full or \
            got.get("attention.value_length_swa", hd_swa) != hd_swa:
        bad.append("Gemma 4 requires n_embd_head_k == n_embd_head_v (and _swa)")
    hp["hd"] = [hd_swa if s else hd_full for s in hp["swa"]]
    # llama_model_base::load_hparams and the KV cache asserts
    if max(hp["used"]) > hp["NE"] or (hp["NE"] > 0) != (max(hp["used"]) > 0):
        bad.append(f"expert_used_count {max(hp['used'])} vs expert_count {hp['NE']}")
    if not any(hp["swa"]):
        bad.append("no sliding layer (is_swa_any asserts)")
    return hp


def expected_present(a):
    return {"K_EQ_V": bool(a.k_eq_v)}


def check_loader(hp, file, consts):
    """Runs LOADER against file {name: (ggml shape, type)}; returns (the tensors the loader
    counts as created, problems). The loader fails unless it creates every tensor in the file."""
    created, loaded, problems = {}, set(), []
    ns = dict(consts, E=hp["E"], V=hp["V"], L=hp["n"], P=hp["P"], NE=hp["NE"], FE=hp["FE"],
              REQ=REQ, OPT=OPT, DUP=DUP, rope_seen=False)
    want_type = {"f32": GGMLQuantizationType.F32}

    def run(rows, prefix):
        ns["got"] = lambda t: prefix + t in loaded
        for name, ne, flags, when, typ, ours in rows:
            if not eval(when, ns):  # noqa: S307 (the table above)
                continue
            flags, ne = eval(flags, ns), tuple(eval(ne, ns))
            if name == "rope_freqs.weight":  # llama-arch.cpp: "rope_freqs", no blk.%d
                ns["rope_seen"] = True
            else:
                name = prefix + name
            t = file.get(name)
            if flags == OPT and ours is not None and eval(ours, ns) != (t is not None):
                problems.append(f"{name}: {'present' if t else 'absent'}, this preset "
                                f"{'writes' if t is None else 'does not write'} it")
            if t is None:
                if flags == REQ:
                    problems.append(f"{name}: missing, the loader requires it")
                continue
            shape, qtype = t
            pad = lambda s: tuple(s) + (1,) * (4 - len(s))  # noqa: E731
            if pad(shape) != pad(ne):
                problems.append(f"{name}: shape {list(shape)}, the loader wants {list(ne)}")
            q4 = ne[0] % 32 == 0
            want = want_type.get(typ, GGMLQuantizationType.Q4_0 if q4 else GGMLQuantizationType.F32)
            if qtype != want:
                problems.append(f"{name}: type {qtype.name}, want {want.name}")
            loaded.add(name)
            if flags != DUP:
                if name in created:
                    problems.append(f"{name}: created twice")
                created[name] = t

    run(LOADER_GLOBAL, "")
    for i in range(hp["n"]):
        ns.update(i=i, nh=hp["nh"][i], nkv=hp["nkv"][i], hd=hp["hd"][i], ff=hp["ff"][i],
                  swa=hp["swa"][i], has_kv=i < hp["n"] - hp["shared"])
        ns["kvf"] = REQ if ns["has_kv"] else OPT
        run(LOADER_LAYER, f"blk.{i}.")
    for name in sorted(set(file) - set(created)):
        problems.append(f"{name}: in the file but not created by the loader "
                        f"(done_getting_tensors: wrong number of tensors)")
    for name, (shape, qtype) in file.items():
        if len(shape) == 1 and qtype != GGMLQuantizationType.F32:
            problems.append(f"{name}: a 1-D tensor must be F32")
    return created, problems
