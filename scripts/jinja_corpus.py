#!/usr/bin/env python3
"""Builds the chat-template corpus that tests/test_jinja_corpus.c renders with our interpreter.

Templates: every vendor/llama.cpp/models/templates/*.jinja of the pinned sdist
llama-cpp-python==0.3.36 (downloaded once into ${MLXRT_CACHE:-~/.cache/mlxrt}/src, as
scripts/build_llama_bench.sh does), plus Gemma 3's published instruction-tuned template (the
corpus has none; the text lives in scripts/make_demo_model.py). The sdist's templates are also
written as files to ${MLXRT_CACHE:-~/.cache/mlxrt}/src/templates/ (the real-template tests read
them).

Expected outputs: transformers' own renderer, `render_jinja_template` (the function behind
`apply_chat_template`: its sandboxed environment, tojson, raise_exception, strftime_now,
namespace, the reasoning-field aliasing), for a fixed set of conversations, with fixed
bos/eos strings, enable_thinking given explicitly (as mlxrt passes it) and strftime_now frozen
at a fixed instant (UTC). A template or conversation that transformers refuses is recorded with
the Python error.

Output: ${MLXRT_CACHE:-~/.cache/mlxrt}/jinja_corpus/corpus.json (messages and tools are stored as
JSON text, so both sides read the very same input). Skips the work when the stamp matches.

Usage: PY=$(scripts/venv.sh); $PY scripts/jinja_corpus.py
"""
import datetime as dt
import hashlib
import importlib.metadata as md
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

SDIST = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
CACHE = Path(os.environ.get("MLXRT_CACHE") or Path.home() / ".cache/mlxrt")
SRC = CACHE / "src"
OUT = CACHE / "jinja_corpus"
TEMPLATE_DIR = "vendor/llama.cpp/models/templates/"

NOW = 1753531200  # 2025-07-26 12:00:00 UTC, what strftime_now sees
BOS, EOS = "<bos>", "<eos>"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_demo_model import GEMMA3_CHAT_TEMPLATE  # noqa: E402

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

# (name, messages, tools, add_generation_prompt, enable_thinking)
CONVERSATIONS = [
    ("system_user",
     [{"role": "system", "content": " You are a helpful assistant. "},
      {"role": "user", "content": "Héllo wörld 🎉\nWhat is 2+2?  "}], None, True, False),
    ("multi_turn",
     [{"role": "user", "content": "Hi!"},
      {"role": "assistant", "content": "Hello! How can I help?"},
      {"role": "user", "content": "Tell me a joke."}], None, True, False),
    ("tool_call",
     [{"role": "user", "content": "What is the weather in Paris?"},
      {"role": "assistant", "content": "", "reasoning_content": "The user wants the weather.",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather",
                                    "arguments": {"city": "Paris", "unit": "celsius"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
       "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}], [WEATHER_TOOL], True, False),
    ("no_generation_prompt",
     [{"role": "user", "content": "Say hi."},
      {"role": "assistant", "content": "Hi."}], None, False, False),
    ("thinking",
     [{"role": "system", "content": "Think first."},
      {"role": "user", "content": "Why is the sky blue?"}], None, True, True),
    ("content_parts",
     [{"role": "user", "content": [{"type": "text", "text": "Describe this, briefly."}]}], None, True, False),
]


def log(msg):
    print(f"jinja_corpus: {msg}", file=sys.stderr)


def sdist_templates():
    """{name: text} of the sdist's templates, downloading the sdist once."""
    tarball = SRC / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
    if not tarball.exists():
        SRC.mkdir(parents=True, exist_ok=True)
        log(f"downloading {SDIST}=={SDIST_VERSION} (sdist) into {SRC}")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary=:all:",
                        f"{SDIST}=={SDIST_VERSION}", "-d", str(SRC)], check=True)
    out = {}
    with tarfile.open(tarball) as tar:
        for m in tar.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if m.isfile() and rel.startswith(TEMPLATE_DIR) and rel.endswith(".jinja"):
                out[rel[len(TEMPLATE_DIR):-len(".jinja")]] = tar.extractfile(m).read().decode("utf-8")
    if not out:
        sys.exit(f"jinja_corpus: no {TEMPLATE_DIR}*.jinja in {tarball}")
    return dict(sorted(out.items()))


def write_templates(templates):
    """The sdist's templates as files, $MLXRT_CACHE/src/templates/NAME.jinja (the real-template
    tests read them: tests/cli_real_serve_tools.sh); a file is rewritten only when it differs."""
    tdir = SRC / "templates"
    tdir.mkdir(parents=True, exist_ok=True)
    for name, text in templates.items():
        f = tdir / f"{name}.jinja"
        if not f.exists() or f.read_text(encoding="utf-8") != text:
            tmp = tdir / f"{name}.jinja.tmp"
            tmp.write_text(text, encoding="utf-8")
            tmp.rename(f)


def freeze_strftime_now():
    """transformers' strftime_now calls datetime.now(): make it the fixed instant (UTC)."""
    import transformers.utils.chat_template_utils as ctu

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            t = dt.datetime.fromtimestamp(NOW, dt.timezone.utc)
            return t if tz is not None else t.replace(tzinfo=None)

    if getattr(ctu, "datetime", None) is not dt.datetime:
        sys.exit("jinja_corpus: transformers' chat_template_utils no longer uses datetime.now()")
    ctu.datetime = Frozen


def render(template, messages_json, tools_json, gen, thinking):
    from transformers.utils.chat_template_utils import render_jinja_template
    try:
        out, _ = render_jinja_template(conversations=[json.loads(messages_json)],
                                       tools=json.loads(tools_json) if tools_json else None,
                                       chat_template=template, add_generation_prompt=gen,
                                       bos_token=BOS, eos_token=EOS, enable_thinking=thinking)
        return {"expected": out[0]}
    except Exception as e:  # the template (or jinja2) refuses: record why
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    versions = {"python": sys.version.split()[0], "jinja2": md.version("jinja2"),
                "transformers": md.version("transformers"), SDIST: SDIST_VERSION}
    script_hash = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    stamp_text = json.dumps({"script": script_hash, "versions": versions}, sort_keys=True)
    stamp = OUT / "stamp.json"
    templates = sdist_templates()
    write_templates(templates)
    if (OUT / "corpus.json").exists() and stamp.exists() and stamp.read_text() == stamp_text:
        log(f"{OUT / 'corpus.json'} is up to date")
        return
    templates["google-gemma-3-it"] = GEMMA3_CHAT_TEMPLATE
    freeze_strftime_now()
    convs = [{"name": n, "messages_json": json.dumps(m, ensure_ascii=False),
              "tools_json": json.dumps(t, ensure_ascii=False) if t else None,
              "add_generation_prompt": g, "enable_thinking": th}
             for n, m, t, g, th in CONVERSATIONS]
    entries = []
    for name, text in sorted(templates.items()):
        results = [render(text, c["messages_json"], c["tools_json"], c["add_generation_prompt"],
                          c["enable_thinking"]) for c in convs]
        entries.append({"name": name, "template": text, "results": results})
    doc = {"about": "chat templates rendered by transformers' render_jinja_template; made by "
                    "scripts/jinja_corpus.py",
           "versions": versions, "now": NOW, "bos_token": BOS, "eos_token": EOS,
           "conversations": convs, "templates": entries}
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = OUT / "corpus.json.tmp"
    tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    tmp.rename(OUT / "corpus.json")
    stamp.write_text(stamp_text)
    n = sum(len(e["results"]) for e in entries)
    n_err = sum(1 for e in entries for r in e["results"] if "error" in r)
    log(f"wrote {OUT / 'corpus.json'}: {len(entries)} templates x {len(convs)} conversations, "
        f"{n - n_err} renderings, {n_err} refused by transformers")


if __name__ == "__main__":
    main()
