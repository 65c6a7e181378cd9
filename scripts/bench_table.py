#!/usr/bin/env python3
"""Side-by-side table of llama-bench and `mlxrt bench` results (same -p/-n/-d), in markdown.

Inputs are the engines' JSON outputs: llama-bench `-o json` or `-o jsonl`, `mlxrt bench -o json`
(a list). Files may be partial (a run killed by its timeout): every complete JSON object found is
used, anything else is skipped. Rows are keyed by (n_prompt, n_gen, n_depth); a missing value
shows as "—". Only the standard library is needed.

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


def key(o):
    return (int(o.get("n_prompt", 0)), int(o.get("n_gen", 0)), int(o.get("n_depth", 0)))


def test_name(k):
    p, n, d = k
    s = f"pp{p}" if p and not n else f"tg{n}" if n and not p else f"pp{p}+tg{n}"
    return s + (f" @ d{d}" if d else "")


def collect(paths):
    res = {}
    meta = {}
    for p in paths:
        for o in json_objects(p):
            if "avg_ts" not in o:
                continue
            res[key(o)] = o
            meta = meta or o
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
                  key=lambda k: (k[2], 0 if k[0] and not k[1] else 1, k[0], k[1]))
    out = [f"## {title}", ""]
    head = ["test", "llama.cpp Q4_0 t/s"] + [f"mlxrt {lab} t/s" for lab in labels]
    head += [f"{lab} / llama.cpp" for lab in labels]
    head += [f"mlxrt {lab} % roofline" for lab in labels]
    out.append("| " + " | ".join(head) + " |")
    out.append("| " + " | ".join(["---"] + ["---:"] * (len(head) - 1)) + " |")
    for k in keys:
        row = [test_name(k), fmt_ts(L.get(k))]
        row += [fmt_ts(M[lab].get(k)) for lab in labels]
        row += [ratio(M[lab].get(k), L.get(k)) for lab in labels]
        for lab in labels:
            o = M[lab].get(k)
            row.append(f"{o['roofline_pct']:.1f} %" if o and o.get("n_gen") and o.get("roofline_pct")
                       else "—")
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    notes = []
    if lmeta:
        notes.append(f"llama.cpp: build {lmeta.get('build_commit', '?')}, {lmeta.get('model_type', '?')}, "
                     f"{lmeta.get('model_size', 0) / 1e9:.2f} GB, {lmeta.get('model_n_params', 0) / 1e9:.3f} B "
                     f"params, backends {lmeta.get('backends', '?')}, GPU {lmeta.get('gpu_info', '?')}, "
                     f"n_gpu_layers {lmeta.get('n_gpu_layers', '?')}, flash_attn {lmeta.get('flash_attn', '?')}, "
                     f"type_k/v {lmeta.get('type_k', '?')}/{lmeta.get('type_v', '?')}, "
                     f"n_ubatch {lmeta.get('n_ubatch', '?')}")
    for lab in labels:
        o = mmeta.get(lab)
        if o:
            notes.append(f"mlxrt {lab}: {o.get('model', '?')} {o.get('quant', '?')}, "
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama", nargs="*", default=[], help="llama-bench json/jsonl files")
    ap.add_argument("--mlxrt", action="append", default=[], metavar="LABEL=F1,F2",
                    help="mlxrt bench json files for one column")
    ap.add_argument("--dir", action="append", default=[], help="folder(s) the GPU script wrote")
    ap.add_argument("--status", nargs="*", default=[])
    ap.add_argument("--env", nargs="*", default=[])
    ap.add_argument("--title", default="Gemma 4 31B shapes (synthetic weights), llama.cpp vs mlxrt")
    ap.add_argument("-o", "--output", help="write here (default stdout)")
    a = ap.parse_args()
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
