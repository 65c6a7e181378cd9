#!/usr/bin/env python3
"""Side-by-side table of llama-bench and `mlxrt bench` results (same -p/-n/-d), in markdown.

Inputs are the engines' JSON outputs: llama-bench `-o json` or `-o jsonl`, `mlxrt bench -o json`
(a list). Files may be partial (a run killed by its timeout): every complete JSON object found is
used, anything else is skipped. Rows are keyed by (model, n_prompt, n_gen, n_depth); a missing
value shows as "—". The model is the `mlxrt synth --like` preset: the "preset" field that
scripts/gpu_bench_vs_llama.sh adds to each result, else the GGUF's file name (llama-bench's
model_filename, PRESET-q4_0.gguf), else --preset-default (gemma4-31b: the only shapes the script
ran before it had --like). Only the standard library is needed.

  bench_table.py --llama L.jsonl --mlxrt nvfp4=A.json,B.json --mlxrt affine4=C.json \\
                 [--status status.txt] [--env env.txt] [--title T] [-o OUT.md]
  bench_table.py --dir OUTDIR [--dir OUTDIR2 ...] [-o OUT.md]
      collects llama-*.json[l] and mlxrt-<label>*.json[l] from each folder (the file names
      scripts/gpu_bench_vs_llama.sh writes), plus status.txt and env.txt.
"""
import argparse
import glob
import json
import os
import re
import sys


def json_objects(path):
    """Every JSON object in the file: a whole list/object, else one per line (jsonl, or the
    '  {...},' lines of a truncated list)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        print(f"bench_table: {path}: {e}", file=sys.stderr)
        return []
    try:
        v = json.loads(text)
        return [o for o in (v if isinstance(v, list) else [v]) if isinstance(o, dict)]
    except ValueError:
        pass
    out = []
    for line in text.splitlines():
        line = line.strip().rstrip(",")
        if line.startswith("{") and line.endswith("}"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    # llama-bench -o json pretty-prints one object over many lines: recover complete ones
    if not out:
        for m in re.finditer(r"\{[^{}]*\}", text, re.S):
            try:
                out.append(json.loads(m.group(0)))
            except ValueError:
                pass
    return out


DEFAULT_PRESET = "gemma4-31b"


def preset(o):
    if o.get("preset"):
        return str(o["preset"])
    m = re.search(r"([A-Za-z0-9_.-]+)-q4_0\.gguf$", str(o.get("model_filename", "")))
    return m.group(1) if m else DEFAULT_PRESET


def key(o):
    return (preset(o), int(o.get("n_prompt", 0)), int(o.get("n_gen", 0)),
            int(o.get("n_depth", 0)))


def test_name(k):
    _, p, n, d = k
    s = f"pp{p}" if p and not n else f"tg{n}" if n and not p else f"pp{p}+tg{n}"
    return s + (f" @ d{d}" if d else "")


def collect(paths):
    """{key: result}, {preset: its first result}"""
    res = {}
    meta = {}
    for p in paths:
        for o in json_objects(p):
            if "avg_ts" not in o:
                continue
            res[key(o)] = o
            meta.setdefault(preset(o), o)
    return res, meta


def fmt_ts(o):
    if not o:
        return "—"
    sd = o.get("stddev_ts", 0) or 0
    return f"{o['avg_ts']:.2f} ± {sd:.2f}"


def ratio(a, b):
    if not a or not b or not b.get("avg_ts"):
        return "—"
    return f"{a['avg_ts'] / b['avg_ts']:.2f}×"


def from_dirs(dirs):
    llama, mlx, status, env = [], {}, [], []
    for d in dirs:
        llama += sorted(glob.glob(os.path.join(d, "llama-*.json*")))
        for p in sorted(glob.glob(os.path.join(d, "mlxrt-*.json*"))):
            m = re.match(r"mlxrt-([A-Za-z0-9_]+)", os.path.basename(p))
            if m:
                mlx.setdefault(m.group(1), []).append(p)
        for name, lst in (("status.txt", status), ("env.txt", env)):
            if os.path.exists(os.path.join(d, name)):
                lst.append(os.path.join(d, name))
    return llama, mlx, status, env


def render(llama_paths, mlx_paths, status_paths, env_paths, title):
    L, lmeta = collect(llama_paths)
    pref = ["nvfp4", "affine4", "affine8", "mxfp4", "mxfp8", "bf16"]
    labels = sorted(mlx_paths, key=lambda lab: (pref.index(lab) if lab in pref else len(pref), lab))
    M = {}
    mmeta = {}
    for lab in labels:
        M[lab], mmeta[lab] = collect(mlx_paths[lab])
    keys = sorted(set(L) | {k for lab in labels for k in M[lab]},
                  key=lambda k: (k[0], k[3], 0 if k[1] and not k[2] else 1, k[1], k[2]))
    presets = sorted({k[0] for k in keys})
    if title is None:
        title = ("Gemma 4 31B shapes" if presets in ([], [DEFAULT_PRESET]) else
                 f"Gemma 4 shapes of {', '.join(presets)}") + \
            " (synthetic weights), llama.cpp vs mlxrt"
    out = [f"## {title}", ""]
    head = ["model", "test", "llama.cpp Q4_0 t/s"] + [f"mlxrt {lab} t/s" for lab in labels]
    head += [f"{lab} / llama.cpp" for lab in labels]
    head += [f"mlxrt {lab} % roofline" for lab in labels]
    out.append("| " + " | ".join(head) + " |")
    out.append("| " + " | ".join(["---", "---"] + ["---:"] * (len(head) - 2)) + " |")
    for k in keys:
        row = [k[0], test_name(k), fmt_ts(L.get(k))]
        row += [fmt_ts(M[lab].get(k)) for lab in labels]
        row += [ratio(M[lab].get(k), L.get(k)) for lab in labels]
        for lab in labels:
            o = M[lab].get(k)
            row.append(f"{o['roofline_pct']:.1f} %" if o and o.get("n_gen") and o.get("roofline_pct")
                       else "—")
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    notes = []
    for pr, lm in sorted(lmeta.items()):
        notes.append(f"llama.cpp ({pr}): build {lm.get('build_commit', '?')}, {lm.get('model_type', '?')}, "
                     f"{lm.get('model_size', 0) / 1e9:.2f} GB, {lm.get('model_n_params', 0) / 1e9:.3f} B "
                     f"params, backends {lm.get('backends', '?')}, GPU {lm.get('gpu_info', '?')}, "
                     f"n_gpu_layers {lm.get('n_gpu_layers', '?')}, flash_attn {lm.get('flash_attn', '?')}, "
                     f"type_k/v {lm.get('type_k', '?')}/{lm.get('type_v', '?')}, "
                     f"n_ubatch {lm.get('n_ubatch', '?')}")
    for lab in labels:
        for pr, o in sorted(mmeta[lab].items()):
            notes.append(f"mlxrt {lab} ({pr}): {o.get('model', '?')} {o.get('quant', '?')}, "
                         f"{o.get('model_size', 0) / 1e9:.2f} GB, {o.get('model_n_params', 0) / 1e9:.3f} B params, "
                         f"backend {o.get('backend', '?')}, measured read bandwidth "
                         f"{o.get('bandwidth_gbs', 0):.0f} GB/s")
    if notes:
        out += ["- " + n for n in notes] + [""]
    for p in status_paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            lines = [ln.rstrip() for ln in f if ln.strip()]
        if lines:
            out += [f"Steps ({os.path.basename(os.path.dirname(os.path.abspath(p)))}/status.txt):", "",
                    "```"] + lines + ["```", ""]
    for p in env_paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            lines = [ln.rstrip() for ln in f if ln.strip()][:12]
        if lines:
            out += ["Environment:", "", "```"] + lines + ["```", ""]
    return "\n".join(out)


def main():
    global DEFAULT_PRESET
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama", nargs="*", default=[], help="llama-bench json/jsonl files")
    ap.add_argument("--mlxrt", action="append", default=[], metavar="LABEL=F1,F2",
                    help="mlxrt bench json files for one column")
    ap.add_argument("--dir", action="append", default=[], help="folder(s) the GPU script wrote")
    ap.add_argument("--status", nargs="*", default=[])
    ap.add_argument("--env", nargs="*", default=[])
    ap.add_argument("--title", help="default: the presets' names")
    ap.add_argument("--preset-default", default=DEFAULT_PRESET,
                    help="the model of results that do not name theirs")
    ap.add_argument("-o", "--output", help="write here (default stdout)")
    a = ap.parse_args()
    DEFAULT_PRESET = a.preset_default
    llama, mlx, status, env = from_dirs(a.dir)
    llama += a.llama
    for spec in a.mlxrt:
        lab, _, files = spec.partition("=")
        if not files:
            ap.error(f"--mlxrt wants LABEL=FILES, got {spec!r}")
        mlx.setdefault(lab, []).extend(f for f in files.split(",") if f)
    status += a.status
    env += a.env
    text = render(llama, mlx, status, env, a.title)
    if a.output:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
