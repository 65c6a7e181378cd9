#!/usr/bin/env python3
"""Writes bad model folders for tests/cli_bad_model.sh into OUT_DIR (a temp dir at test time),
built from the small fixture checkpoints in tests/fixtures/models, and OUT_DIR/cases.tsv:
one line per case, "name<TAB>command<TAB>fragment" — `mlxrt <command> OUT_DIR/name` must
fail with one stderr line containing the fragment (command "run-ok": must succeed).
Plain stdlib, deterministic; also makes FIFOs, directories in place of files and paths
longer than 1024 and 4096 bytes.

Usage: scripts/make_bad_models.py OUT_DIR
"""
import json
import os
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "models")
TOK = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "small-a.json")
OUT = sys.argv[1]
cases = []  # (name, command, fragment)

BF16_NAN, BF16_INF = b"\xc0\x7f", b"\x80\x7f"


def read_st(path):
    """[(name, dtype, shape, bytes)] in data order, and the metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    hdr = json.loads(blob[8:8 + n])
    meta = hdr.pop("__metadata__", None)
    data = blob[8 + n:]
    ts = [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
          for k, v in hdr.items()]
    ts.sort(key=lambda t: t[0])
    return ts, meta


def st_bytes(tensors, meta={"format": "mlx"}):
    hdr, data = {}, b""
    for name, dtype, shape, payload in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if meta is not None:
        hdr["__metadata__"] = meta
    h = json.dumps(hdr, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogateescape")
    return struct.pack("<Q", len(h)) + h + data


def write_st(path, tensors):
    with open(path, "wb") as f:
        f.write(st_bytes(tensors))


def index_json(path, weight_map):
    text = json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2, sort_keys=True,
                      ensure_ascii=False)
    with open(path, "wb") as f:  # names with invalid UTF-8 stay the raw bytes they are
        f.write(text.encode("utf-8", "surrogateescape"))


def folder(name, fixture, tokenizer=True):
    """A copy of a fixture (config, single shard, index) with a tokenizer; returns its path."""
    d = os.path.join(OUT, name)
    os.makedirs(d)
    src = os.path.join(FIX, fixture)
    for f in ("config.json", "model.safetensors", "model.safetensors.index.json"):
        shutil.copyfile(os.path.join(src, f), os.path.join(d, f))
    if tokenizer:
        shutil.copyfile(TOK, os.path.join(d, "tokenizer.json"))
    return d


def write_text(d, fname, text):
    with open(os.path.join(d, fname), "w") as f:
        f.write(text)


def case(name, fragment, command="inspect"):
    cases.append((name, command, fragment))


def edit_config(d, fn):
    p = os.path.join(d, "config.json")
    with open(p) as f:
        c = json.load(f)
    fn(c)
    with open(p, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def edit_tensors(d, fn, reindex=True):
    p = os.path.join(d, "model.safetensors")
    ts, _ = read_st(p)
    ts = fn(ts)
    write_st(p, ts)
    if reindex:
        index_json(os.path.join(d, "model.safetensors.index.json"), {t[0]: "model.safetensors" for t in ts})


def poke(name, at, value):
    """Overwrites bytes of one tensor's payload."""
    def fn(ts):
        out = []
        for n, dt, sh, b in ts:
            if n == name:
                b = b[:at] + value + b[at + len(value):]
            out.append((n, dt, sh, b))
        return out
    return fn


def replace_with(d, fname, kind):
    p = os.path.join(d, fname)
    if os.path.exists(p):
        os.remove(p)
    if kind == "fifo":
        os.mkfifo(p)
    else:
        os.mkdir(p)


G3Q, G3B, G3N, G4, G4M = ("gemma3-text-affine4-g64", "gemma3-text-bf16", "gemma3-text-nvfp4",
                          "gemma4-dense-bf16", "gemma4-dense-mxfp4")

# ---- 1. files that are not regular files -----------------------------------------------------
for fname, kind, frag in [("model.safetensors", "fifo", "model.safetensors: is not a regular file"),
                          ("tokenizer.json", "fifo", "tokenizer.json: is not a regular file"),
                          ("tokenizer.json", "dir", "tokenizer.json: is a directory"),
                          ("config.json", "fifo", "config.json: is not a regular file"),
                          ("generation_config.json", "fifo", "generation_config.json: is not a regular file"),
                          ("model.safetensors.index.json", "fifo", "index.json: is not a regular file"),
                          ("model.safetensors", "dir", "model.safetensors: is a directory")]:
    name = "%s_%s" % (kind, fname.replace(".", "_"))
    d = folder(name, G3Q)
    replace_with(d, fname, kind)
    case(name, frag)
d = folder("fifo_tokenizer_run", G3Q)
replace_with(d, "tokenizer.json", "fifo")
case("fifo_tokenizer_run", "tokenizer.json: is not a regular file", "run")
# a FIFO shard found by the glob (no index)
d = folder("fifo_glob_shard", G3Q)
os.remove(os.path.join(d, "model.safetensors.index.json"))
os.mkfifo(os.path.join(d, "model-extra.safetensors"))
case("fifo_glob_shard", "model-extra.safetensors: is not a regular file")

# ---- 2. long paths ----------------------------------------------------------------------------
def deep(name, total):
    """A chain of directories whose full path is longer than `total` bytes; made with dir fds,
    since the kernel refuses whole paths of 4096 bytes or more. Returns the path string."""
    base = os.path.join(OUT, name)
    os.makedirs(base)
    fd = os.open(base, os.O_RDONLY)
    path = base
    while len(path) <= total:
        comp = "d" * 200
        os.mkdir(comp, dir_fd=fd)
        nfd = os.open(comp, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
        path += "/" + comp
    src = os.path.join(FIX, G3Q)
    for f, s in (("config.json", os.path.join(src, "config.json")),
                 ("model.safetensors", os.path.join(src, "model.safetensors")),
                 ("tokenizer.json", TOK)):
        with open(s, "rb") as i:
            blob = i.read()
        o = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(o, blob)
        os.close(o)
    os.close(fd)
    return path


long1 = deep("long1100", 1100)
case(os.path.relpath(long1, OUT), "", "run-ok")
long4 = deep("long4200", 4200)
case(os.path.relpath(long4, OUT), "File name too long")

# ---- 3. tensors the config does not use -------------------------------------------------------
d = folder("unused_layers", G3Q)
edit_config(d, lambda c: c.update(num_hidden_layers=3, layer_types=c["layer_types"][:3]))
case("unused_layers", "num_hidden_layers = 3, but the checkpoint has layer 3")
d = folder("unused_extra_tensor", G3B)
edit_tensors(d, lambda ts: ts + [("model.extra_norm.weight", "BF16", [128], b"\x80\x3f" * 128)])
case("unused_extra_tensor", "tensor 'model.extra_norm.weight' is not used")
d = folder("unused_lm_head_tied", G4)
edit_tensors(d, lambda ts: ts + [("lm_head.weight", "BF16", [384, 128], b"\x00" * (384 * 128 * 2))])
case("unused_lm_head_tied", "tie_word_embeddings is true")
d = folder("unused_unknown_tower", G3B)
edit_tensors(d, lambda ts: ts + [("speech_tower.w", "BF16", [2], b"\x00" * 4)])
case("unused_unknown_tower", "tensor 'speech_tower.w' is not used")
d = folder("unused_layer_scalar", G3B)
edit_tensors(d, lambda ts: ts + [("model.layers.0.layer_scalar", "BF16", [1], b"\x80\x3f")])
case("unused_layer_scalar", "has no layer_scalar")

# ---- 4. token ids past the embedding ----------------------------------------------------------
d = folder("tokenizer_id_too_large", G3Q)
with open(TOK) as f:
    tok = json.load(f)
# HF numbers added tokens the vocabulary lacks from its size on (345 here): 50 of them
for i in range(50):
    tok["added_tokens"].append({"id": 345 + i, "content": "<extra_%d>" % i, "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False, "special": True})
write_text(d, "tokenizer.json", json.dumps(tok))
case("tokenizer_id_too_large", "token '<extra_39>' has id 384, but the model's embedding has 384 rows")
d = folder("gen_eos_too_large", G3Q)
write_text(d, "generation_config.json", json.dumps({"eos_token_id": [1, 9999]}))
case("gen_eos_too_large", "eos_token_id' must be a token id in [0, 384), got 9999")

# ---- 5. non-finite weights --------------------------------------------------------------------
for name, fixture, tensor, at, value, frag in [
        ("nan_final_norm", G3Q, "model.norm.weight", 6, BF16_NAN, "'model.norm.weight' holds NaN at index 3"),
        ("inf_input_norm", G3B, "model.layers.2.input_layernorm.weight", 0, BF16_INF, "holds +Inf at index 0"),
        ("nan_q_norm", G4, "model.layers.1.self_attn.q_norm.weight", 10, BF16_NAN, "q_norm.weight' holds NaN"),
        ("nan_layer_scalar", G4, "model.layers.3.layer_scalar", 0, BF16_NAN, "layer_scalar' holds NaN"),
        ("nan_affine_scale", G3Q, "model.layers.1.mlp.up_proj.scales", 20, BF16_NAN, "up_proj.scales' holds NaN at index 10"),
        ("inf_affine_bias", G3Q, "model.embed_tokens.biases", 0, b"\x80\xff", "embed_tokens.biases' holds -Inf"),
        ("nan_nvfp4_scale", G3N, "model.layers.0.self_attn.o_proj.scales", 5, b"\x7f", "o_proj.scales' holds a NaN scale at index 5"),
        ("nan_mxfp4_scale", G4M, "model.layers.0.mlp.down_proj.scales", 1, b"\xff", "down_proj.scales' holds a NaN scale at index 1")]:
    d = folder(name, fixture)
    edit_tensors(d, poke(tensor, at, value), reindex=False)
    case(name, frag)

# ---- 6. errors that blame the right thing -----------------------------------------------------
d = folder("wrong_hidden_size_quant", G3Q)
edit_config(d, lambda c: c.update(hidden_size=96))
case("wrong_hidden_size_quant", "disagrees with config.json hidden_size = 96")
d = folder("wrong_hidden_size_quant_fits", G3Q)  # 256 columns fit 2-bit group 128 as well
edit_config(d, lambda c: c.update(hidden_size=256))
case("wrong_hidden_size_quant_fits", "disagrees with config.json hidden_size = 256")
d = folder("wrong_hidden_size_dense", G3B)
edit_config(d, lambda c: c.update(hidden_size=96))
case("wrong_hidden_size_dense", "(hidden_size = 96)")
d = folder("rms_norm_eps_overflow", G3Q)
with open(os.path.join(d, "config.json")) as f:
    text = f.read()
write_text(d, "config.json", text.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e999'))
case("rms_norm_eps_overflow", "rms_norm_eps' must be a positive finite number, got a number that is not finite")
d = folder("control_chars_tensor_name", G3B)
edit_tensors(d, lambda ts: ts + [("model.evil\x1b[31m\nname", "BF16", [1], b"\x00\x00")])
case("control_chars_tensor_name", "model.evil\\x1b[31m\\nname")
d = folder("invalid_utf8_tensor_name", G3B)
edit_tensors(d, lambda ts: ts + [("model.bad\udcffname", "BF16", [1], b"\x00\x00")])
case("invalid_utf8_tensor_name", "model.bad\\xffname")

# ---- shards and the index ---------------------------------------------------------------------
d = folder("bad_index_json", G3Q)
write_text(d, "model.safetensors.index.json", '{"weight_map": {"model.norm.weight": "model.safetensors",}')
case("bad_index_json", "index.json: not valid JSON")
d = folder("index_missing_shard", G3Q)
with open(os.path.join(d, "model.safetensors.index.json")) as f:
    idx = json.load(f)
idx["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors"
write_text(d, "model.safetensors.index.json", json.dumps(idx))
case("index_missing_shard", "'model-00002-of-00002.safetensors', which cannot be opened")
d = folder("shard_not_in_index", G3Q)
write_st(os.path.join(d, "model-extra.safetensors"), [("x", "BF16", [1], b"\x00\x00")])
case("shard_not_in_index", "'model-extra.safetensors' is a model*.safetensors file the weight_map does not name")
d = folder("tensor_not_in_index", G3Q)
with open(os.path.join(d, "model.safetensors.index.json")) as f:
    idx = json.load(f)
del idx["weight_map"]["model.norm.weight"]
write_text(d, "model.safetensors.index.json", json.dumps(idx))
case("tensor_not_in_index", "tensor 'model.norm.weight' of")
d = folder("index_trailing_bytes", G3Q)
with open(os.path.join(d, "model.safetensors.index.json"), "a") as f:
    f.write('{"weight_map": {}}')
case("index_trailing_bytes", "index.json: extra bytes after the JSON value")
d = folder("index_names_tensor_twice", G3Q)
with open(os.path.join(d, "model.safetensors.index.json")) as f:
    text = f.read()
write_text(d, "model.safetensors.index.json", text.replace(
    '"weight_map": {', '"weight_map": {\n    "model.norm.weight": "model.safetensors",', 1))
case("index_names_tensor_twice", "weight_map names tensor 'model.norm.weight' twice")
d = folder("index_escapes_folder", G3Q)
index_json(os.path.join(d, "model.safetensors.index.json"), {"model.norm.weight": "../model.safetensors"})
case("index_escapes_folder", "expected a file name in the same directory")
d = folder("duplicate_tensor_across_shards", G3Q)
ts, _ = read_st(os.path.join(d, "model.safetensors"))
os.remove(os.path.join(d, "model.safetensors"))
os.remove(os.path.join(d, "model.safetensors.index.json"))
half = len(ts) // 2
write_st(os.path.join(d, "model-00001-of-00002.safetensors"), ts[:half + 1])
write_st(os.path.join(d, "model-00002-of-00002.safetensors"), ts[half:])
case("duplicate_tensor_across_shards", "is in both")
d = folder("truncated_shard", G3Q)
p = os.path.join(d, "model.safetensors")
with open(p, "rb") as f:
    blob = f.read()
with open(p, "wb") as f:
    f.write(blob[:len(blob) - 1000])
case("truncated_shard", "run past the data area")
d = folder("missing_tensor", G3B)
edit_tensors(d, lambda ts: [t for t in ts if t[0] != "model.layers.1.mlp.up_proj.weight"])
case("missing_tensor", "tensor 'model.layers.1.mlp.up_proj.weight' is missing")
d = folder("norm_wrong_dtype", G3B)
edit_tensors(d, lambda ts: [(n, "I16", s, b) if n == "model.norm.weight" else (n, dt, s, b) for n, dt, s, b in ts])
case("norm_wrong_dtype", "'model.norm.weight' has dtype I16, expected BF16, F16 or F32")

# ---- config.json --------------------------------------------------------------------------------
for name, fn, frag in [
        ("config_hidden_size_string", lambda c: c.update(hidden_size="128"), "'hidden_size' must be a positive integer"),
        ("config_layers_null", lambda c: c.update(num_hidden_layers=None), "num_hidden_layers"),
        ("config_vocab_float", lambda c: c.update(vocab_size=384.5), "'vocab_size' must be a positive integer"),
        ("config_eps_negative", lambda c: c.update(rms_norm_eps=-1), "'rms_norm_eps' must be a positive finite number"),
        ("config_model_type_unknown", lambda c: c.update(model_type="llama"), "llama")]:
    d = folder(name, G3Q)
    edit_config(d, fn)
    case(name, frag)
d = folder("config_missing", G3Q)
os.remove(os.path.join(d, "config.json"))
case("config_missing", "config.json: cannot open: No such file or directory")
d = folder("config_trailing_garbage", G3Q)
write_text(d, "generation_config.json", '{"eos_token_id": 1} trailing')
case("config_trailing_garbage", "generation_config.json")

# huge (sparse) files: refused by size, not read
d = folder("huge_config", G3Q)
os.truncate(os.path.join(d, "config.json"), 1 << 40)
case("huge_config", "config.json: is 1099511627776 bytes, more than the 67108864")
d = folder("huge_tokenizer", G3Q)
os.truncate(os.path.join(d, "tokenizer.json"), 1 << 40)
case("huge_tokenizer", "tokenizer.json: is 1099511627776 bytes, more than the 1073741824")
d = folder("tiny_shard", G3Q)
os.remove(os.path.join(d, "model.safetensors"))
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(b"\x00" * 4)
case("tiny_shard", "model.safetensors: file is 4 bytes, too short")

# a Hugging Face cache whose refs/main is a FIFO: resolution must not block on it (it falls
# back to the only snapshot); run as `-m org/model` with HF_HUB_CACHE=OUT/hub
repo = os.path.join(OUT, "hub", "models--org--model")
os.makedirs(os.path.join(repo, "refs"))
os.mkfifo(os.path.join(repo, "refs", "main"))
os.makedirs(os.path.join(repo, "snapshots"))
shutil.move(folder("hub_snapshot", G3Q), os.path.join(repo, "snapshots", "abc123"))
case("org/model", "", "run-hub-ok")

# ---- chat templates: parsed at load, so a broken one fails the load naming its file ----------
d = folder("template_jinja_broken", G3Q)
write_text(d, "chat_template.jinja", "{{ bos_token }}\n{% for m in messages %}{{ m.content }}")
case("template_jinja_broken", "chat_template.jinja:", "run")
for kind, frag in [("fifo", "chat_template.jinja: is not a regular file"),
                   ("dir", "chat_template.jinja: is a directory")]:
    d = folder("template_jinja_" + kind, G3Q)
    replace_with(d, "chat_template.jinja", kind)
    case("template_jinja_" + kind, frag)
for name, value, frag in [
        ("template_config_broken", "{{ bos_token ", "tokenizer_config.json (chat_template):"),
        ("template_config_list_broken", [{"name": "default", "template": "{{ bos_token }}"},
                                         {"name": "tool_use", "template": "{% if tools %}"}],
         'tokenizer_config.json (chat_template "tool_use"):'),
        ("template_config_number", 5, '"chat_template" must be a string or a list'),
        ("template_config_list_entry", [{"name": "default"}], "chat_template[0] must be an object")]:
    d = folder(name, G3Q)
    write_text(d, "tokenizer_config.json", json.dumps({"bos_token": "<bos>", "chat_template": value}))
    case(name, frag)
d = folder("tokenizer_config_invalid_json", G3Q)
write_text(d, "tokenizer_config.json", '{"chat_template": ')
case("tokenizer_config_invalid_json", "tokenizer_config.json: invalid JSON at byte")
d = folder("template_config_list_ok", G3Q)
write_text(d, "tokenizer_config.json", json.dumps({
    "bos_token": {"content": "<bos>", "special": True}, "eos_token": "<eos>", "pad_token": None,
    "chat_template": [{"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}"},
                      {"name": "tool_use", "template": "{{ tools | length }}"}]}))
case("template_config_list_ok", "", "run-ok")

with open(os.path.join(OUT, "cases.tsv"), "w") as f:
    for c in cases:
        f.write("\t".join(c) + "\n")
