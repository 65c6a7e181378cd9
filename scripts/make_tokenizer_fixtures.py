#!/usr/bin/env python3
"""Tokenizer golden data for tests/test_tokenizer.c, computed with HF `tokenizers` (pinned).

Usage: make_tokenizer_fixtures.py [--cache-only]
  --cache-only: only make the cache files (what CI needs before the tests; see
                scripts/make_tokenizer_files.sh) and check the committed ids were made from them.

Writes (idempotent; reruns rewrite identical files):
  tests/fixtures/tokenizer/corpus.txt          our own corpus (seeds below + deterministic mixes)
  tests/fixtures/tokenizer/small-*.json         three small hand-made tokenizer.json files that
                                                exercise the mechanisms the C tokenizer supports
  tests/fixtures/tokenizer/small-expected.txt   ids / decodes for them from HF tokenizers
  tests/fixtures/tokenizer/gemma3-expected.txt  ids for the corpus with the Gemma 3 tokenizer.json
  tests/fixtures/tokenizer/gemma4-expected.txt  ids for the corpus with the Gemma 4-style file
and, in the cache (${MLXRT_CACHE:-~/.cache/mlxrt}/models, not committed: 33 MB each):
  gemma-4-style-tokenizer/tokenizer.json        Gemma 3 vocabulary + Gemma 4 special tokens

The Gemma 3 tokenizer.json comes from scripts/make_demo_model.py --only tokenizer (run here when
it is missing). No package ships a Gemma 4 tokenizer.json, so the Gemma 4-style file renames the
Gemma 3 control tokens at the ids the reference doc (gemma-architecture.md §13) gives Gemma 4's
tokens and drops the <bos> from the post-processor (the Gemma 4 converter sets
add_bos_token=False, BOS comes from the chat template).

Expected-file format: '#' header lines (versions, sha256 of the tokenizer.json), then one line
per item: `KIND INDEX ADD_SPECIAL : id id ...` where KIND is L (corpus line INDEX), B (block of
BLOCK consecutive lines starting at line INDEX joined with "\\n") or A (the whole corpus);
and `D SKIP : ids => hex` lines giving HF's decode of an id list.
"""
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "tokenizer"
BLOCK = 8
N_LINES = 2400


def cache_models() -> Path:
    cache = os.environ.get("MLXRT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mlxrt")
    return Path(cache) / "models"


# ------------------------------------------------------------------------------------------
# Corpus: hand-written seeds (ours), then deterministic combinations of them.

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world",
    "The capital of France is Paris.",
    "It's 9:45 a.m. on Tuesday, and the train (No. 12) is late—again!",
    "She said: \"don't worry,\" but I did anyway…",
    "Prices rose 3.5% in Q2; the index closed at 18,204.77 points.",
    "E-mail me at someone@example.org or call +1 (555) 010-9999.",
    "URLs like https://example.com/a/b?c=d&e=f#frag should survive.",
    "Naïve café owners in Zürich serve crème brûlée à la carte.",
    "Ångström, Øresund, Łódź, Příliš žluťoučký kůň, Ğüşöçİ.",
    "¿Dónde está la biblioteca? ¡Allí, al lado del río!",
    "Der Straßenbahnfahrer grüßt die Fußgänger höflich.",
    "Je pense, donc je suis ; c'est l'œuvre d'une vie.",
    "Всё хорошо, что хорошо кончается.",
    "Москва — столица России, а Київ — столиця України.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.",
    "Καλημέρα! Τι κάνεις σήμερα;",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "اللغة العربية جميلة جداً ١٢٣٤٥",
    "שלום עולם, מה שלומך?",
    "עברית נכתבת מימין לשמאל.",
    "你好，世界！今天天气很好。",
    "我们在北京吃了烤鸭，然后去了长城。",
    "東京は日本の首都です。すしが好きです。",
    "カタカナとひらがなと漢字が混ざった文章。",
    "안녕하세요, 세계! 오늘은 날씨가 좋네요.",
    "한국어 문장은 띄어쓰기를 사용합니다.",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "हिन्दी देवनागरी लिपि में लिखी जाती है।",
    "สวัสดีชาวโลก วันนี้อากาศดีมาก",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "Tiếng Việt có nhiều dấu thanh: à á ả ã ạ.",
    "Türkçe'de ı ve i farklı harflerdir.",
    "ქართული ენა ძალიან ლამაზია.",
    "Հայերեն այբուբենը ստեղծվել է Մեսրոպ Մաշտոցի կողմից։",
    "বাংলা ভাষা খুব সুন্দর।",
    "தமிழ் ஒரு பழமையான மொழி.",
    "Kiswahili ni lugha ya Afrika Mashariki.",
    "Mathematics: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ = ∫₀¹ f(t) dt ≈ π/4.",
    "Arrows → ← ↑ ↓ ⇒ and boxes ┌─┐ │ └─┘ and ★☆♠♣♥♦.",
    "Currency: $5, €10, £7.50, ¥1000, ₹250, ₿0.01.",
    "Fractions ½ ⅓ ¼ and superscripts x¹ y² z³, roman Ⅻ.",
    "Full-width ＡＢＣ１２３ and half-width ｶﾀｶﾅ.",
    "Zero-width joiner a\u200db and non-breaking\u00a0space and soft\u00adhyphen.",
    "Combining: e\u0301 vs é, n\u0303 vs ñ, a\u030a vs å.",
    "Emoji: 😀 😂 🥲 🤖 🎉 🚀 🌍 ❤️ 👍🏽 🇫🇷 🇯🇵",
    "Family: 👨‍👩‍👧‍👦, couple: 👩‍❤️‍👨, technologist: 🧑🏿‍💻, rainbow flag: 🏳️‍🌈",
    "Keycaps 1️⃣ 2️⃣ #️⃣ and tags 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "Rare CJK: 𠀋 𪚥 𡈽 and old italic 𐌰𐌱𐌲 and math 𝔸𝕓𝒞.",
    "Control-ish: \u2028 line sep, \u2029 para sep, \ufeff BOM, \u200b zwsp.",
    "ALL CAPS SENTENCE WITH NUMBERS 1234567890 AND SYMBOLS !@#$%^&*()",
    "lowercase words without punctuation just flowing on and on",
    "MixedCase camelCase PascalCase snake_case kebab-case SCREAMING_CASE",
    "A line with trailing spaces   ",
    "   A line with leading spaces",
    "Tabs\tbetween\twords\tand\t\tdouble tabs",
    "multiple     spaces          inside",
    "Numbers: 0 1 12 123 1234 12345 123456 3.14159 2.71828 -42 1e-9 0xFF",
    "Dates: 2024-02-29, 29/02/2024, Feb 29th 2024, 12:00:00Z",
    "Repeated: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "Repeated: ................................................",
    "Repeated: !!!!!!!!!!????????-----------=========__________",
    "Repeated: 😀😀😀😀😀😀😀😀😀😀",
    "Repeated: ĳĳĳĳ ﬁﬁﬁ ßßß",
    "a",
    " ",
    "x y z",
]

CODE = [
    "def fib(n):",
    "    if n < 2:",
    "        return n",
    "    return fib(n - 1) + fib(n - 2)",
    "print(f\"{fib(10)=}\")  # 55",
    "import numpy as np; x = np.zeros((3, 4), dtype=np.float32)",
    "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y",
    "#include <stdio.h>",
    "int main(int argc, char **argv) {",
    "  printf(\"hello, %s\\n\", argc > 1 ? argv[1] : \"world\");",
    "  return 0;",
    "}",
    "for (size_t i = 0; i < n; i++) sum += a[i] * b[i];",
    "#define MAX(a, b) ((a) > (b) ? (a) : (b))",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{:?}\", v); }",
    "impl<T: Clone> Stack<T> { pub fn push(&mut self, t: T) { self.items.push(t) } }",
    "const add = (a, b) => a + b; console.log(`sum: ${add(2, 3)}`);",
    "document.querySelectorAll('div.item > span').forEach(el => el.remove());",
    "function* gen() { yield* [1, 2, 3]; }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "<div class=\"box\"><p>Hello <b>bold</b> and <i>italic</i></p></div>",
    "<table><tr><td>1</td><td>2</td></tr></table>",
    "<h1>Title</h1><br/><hr><ul><li>one</li><li>two</li></ul>",
    "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
    "key: value\nlist:\n  - one\n  - two",
    "$ ls -la | grep '^d' | awk '{print $9}' > dirs.txt 2>&1",
    "git commit -m \"fix: handle empty input\" && git push origin main",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}",
    "\tif err != nil {\n\t\treturn err\n\t}",
    "public static void main(String[] args) { System.out.println(\"Java\"); }",
    "#!/usr/bin/env bash\nset -euo pipefail\necho \"$HOME\"",
    "x <- c(1, 2, 3); mean(x)  # R",
    "main = putStrLn \"Haskell\" >> return ()",
    "(defun square (x) (* x x))",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "regex: ^[A-Za-z_][A-Za-z0-9_]*$ and \\d+\\.\\d*",
    "    // four-space indented comment",
    "        /* eight-space indented block comment */",
    "\t\t\t// three tabs",
    "Windows line ending\r\nand a carriage return\ronly",
]

SPECIAL = [
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>",
    "<bos><start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n",
    "<bos>",
    "<eos>",
    "<pad><unk><mask>",
    "text<bos>text",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<unused0> <unused1><unused99>",
    "< bos >",
    "<bos",
    "bos>",
    "<<bos>>",
    "<start_of_turn>system\nYou are helpful.<end_of_turn>",
    "<|turn>user\nhello<turn|>\n<|turn>model\n<|channel>thought\n<channel|>Hi<turn|>",
    "<|think|>",
    "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
    "<|tool_response>response:get_weather{temp:20}<tool_response|>",
    "<|tool>declaration<tool|>",
    "<|image|><|audio|><image|><audio|><|video|>",
    "<|image><|audio>",
    "<table> <td> </td> <h2>",
    "<0x41><0xFF> literal byte-token text",
    "▁already▁has▁metaspace▁▁",
]

WHITESPACE = [
    "\n",
    "\n\n",
    "\n\n\n\n\n",
    "\t",
    "\t\t",
    "\t\t\t\t\t\t\t\t\t\t",
    "  ",
    "     ",
    " \t \n \t\n",
    "a\nb",
    "a\n\nb",
    "a\n\n\nb",
    "a \n b",
    "end with newline\n",
    "\nstart with newline",
    " " * 40,
    "\t" * 40,
    "\n" * 40,
    "x" + " " * 33 + "y",
    "mixed \t\n\r\n\u3000 whitespace \u00a0\u2003 kinds",
]

ALL_SEEDS = PROSE + CODE + SPECIAL + WHITESPACE

WORDS = ("time person year way day thing man world life hand part child eye woman place work "
         "week case point government company number group problem fact être sein 時間 사람 "
         "время λόγος وقت זמן समय เวลา").split()
JOINERS = [" ", "  ", "\t", "\n", "\n\n", ", ", ". ", " — ", "", "<bos>", "<start_of_turn>", " 🙂 "]


def make_corpus() -> str:
    rng = random.Random(20261129)
    lines = []
    # every seed as its own lines (seeds with \n contribute several lines)
    for s in ALL_SEEDS:
        lines.extend(s.split("\n"))
    while len(lines) < N_LINES:
        kind = rng.randrange(6)
        if kind == 0:  # two or three seeds joined on one line
            parts = [rng.choice(ALL_SEEDS).replace("\n", " ") for _ in range(rng.randint(2, 3))]
            lines.append(rng.choice(JOINERS).replace("\n", " ").join(parts))
        elif kind == 1:  # random word salad with odd joiners
            n = rng.randint(1, 14)
            out = ""
            for _ in range(n):
                out += rng.choice(WORDS) + rng.choice(JOINERS).replace("\n", "  ")
            lines.append(out)
        elif kind == 2:  # a seed with a slice taken from a random offset (cuts inside words)
            s = rng.choice(PROSE)
            a = rng.randrange(len(s))
            lines.append(s[a:a + rng.randint(1, 40)])
        elif kind == 3:  # a code line re-indented
            s = rng.choice(CODE).split("\n")[0]
            lines.append(rng.choice(["", " ", "  ", "    ", "\t", "\t\t", "        "]) + s.strip())
        elif kind == 4:  # blank lines and whitespace-only lines make newline runs in blocks
            lines.extend([""] * rng.randint(1, 3))
            lines.append(rng.choice([" ", "   ", "\t", "\t \t", ""]) + rng.choice(WORDS))
        else:  # special-token text glued to words
            sp = rng.choice(SPECIAL).split("\n")[0]
            w = rng.choice(WORDS)
            lines.append(rng.choice([sp + w, w + sp, w + " " + sp + " " + w, sp + sp]))
    lines = lines[:N_LINES]
    return "\n".join(lines) + "\n"


def corpus_items(text: str):
    """(kind, index, add_special, string) in the order of the expected files."""
    lines = text.split("\n")[:-1]
    items = [("L", i, 1, l) for i, l in enumerate(lines)]
    for i in range(0, len(lines), BLOCK):
        items.append(("B", i, 0, "\n".join(lines[i:i + BLOCK]) + "\n"))
    items.append(("A", 0, 1, text))
    return items


# ------------------------------------------------------------------------------------------
# Small hand-made tokenizer.json files.

BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


def bpe_from_words(words, base_chars, specials):
    """Vocab + merges learning each word left to right (c1 c2, c1c2 c3, ...)."""
    vocab = {}
    for s in specials:
        vocab.setdefault(s, len(vocab))
    for b in BYTE_TOKENS:
        vocab.setdefault(b, len(vocab))
    for c in base_chars:
        vocab.setdefault(c, len(vocab))
    merges = []
    for w in words:
        cur = w[0]
        for c in w[1:]:
            vocab.setdefault(c, len(vocab))
            pair = [cur, c]
            if pair not in merges:
                merges.append(pair)
            cur = cur + c
            vocab.setdefault(cur, len(vocab))
    return vocab, merges


def added(tid, content, special=True, normalized=False, lstrip=False, rstrip=False, single=False):
    return {"id": tid, "content": content, "single_word": single, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def small_a():
    """Gemma-like: Replace normalizer, Split " " MergedWithPrevious, byte fallback, fuse_unk,
    <bos> ... <eos> template, Replace/ByteFallback/Fuse decoder."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "\n", "\n\n"]
    words = ["▁the", "▁hello", "hello", "▁world", "world", "▁▁", "▁▁▁", "▁▁▁▁", "ing", "▁sing",
             "▁king", "er", "▁the▁", "é", "ét", "▁été", "你好", "ab", "abc", "bc", "cab"]
    vocab, merges = bpe_from_words(words, list("abcdefghijklmnopqrstuvwxyz▁.,!?éü你好"), specials)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(vocab[s], s, special=s.startswith("<")) for s in specials],
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "<eos>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": [vocab["<bos>"]], "tokens": ["<bos>"]},
                               "<eos>": {"id": "<eos>", "ids": [vocab["<eos>"]], "tokens": ["<eos>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def small_b():
    """Prepend + Replace normalizer, Split "▁" MergedWithNext, no byte fallback (unk, not fused),
    added tokens with lstrip / rstrip / single_word / normalized, ignore_merges, Strip decoder,
    legacy "a b" merges."""
    specials = ["<unk>", "<s>", "</s>"]
    words = ["▁the", "▁cat", "cat", "▁sat", "▁on", "▁mat", "at", "▁▁", "the", "ca"]
    vocab, merges = bpe_from_words(words, list("abcdefghijklmnopqrstuvwxyz▁"), specials)
    for extra in ["[L]", "[R]", "[LR]", "word", "▁norm", "thecat"]:
        vocab.setdefault(extra, len(vocab))
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            added(vocab["<unk>"], "<unk>"), added(vocab["<s>"], "<s>"), added(vocab["</s>"], "</s>"),
            added(vocab["[L]"], "[L]", lstrip=True), added(vocab["[R]"], "[R]", rstrip=True),
            added(vocab["[LR]"], "[LR]", lstrip=True, rstrip=True),
            added(vocab["word"], "word", special=False, single=True),
            added(vocab["▁norm"], " norm", special=False, normalized=True),
            added(len(vocab), "<new>", special=True),
        ],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": "▁"}, "behavior": "MergedWithNext",
                          "invert": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }


def small_c():
    """Pre-tokenizer Sequence of Split behaviours (Isolated, Removed, Contiguous, invert),
    continuing_subword_prefix / end_of_word_suffix, no normalizer, no post-processor,
    no decoder (HF then joins tokens with spaces)."""
    vocab = {"[UNK]": 0}
    for c in "abcdefghijklmnopqrstuvwxyz-,.!":
        vocab[c] = len(vocab)
        vocab["##" + c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
        vocab["##" + c + "</w>"] = len(vocab)
    merges = []

    def learn(w):
        syms = [w[0]] + ["##" + c for c in w[1:]]
        syms[-1] += "</w>"
        cur = syms[0]
        for s in syms[1:]:
            merged = cur + s[2:]
            vocab.setdefault(merged, len(vocab))
            if [cur, s] not in merges:
                merges.append([cur, s])
            cur = merged
    for w in ["hello", "help", "he", "cat", "cats", "dog", "ab"]:
        learn(w)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "[UNK]")],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": False},
            {"type": "Split", "pattern": {"String": "-"}, "behavior": "Isolated", "invert": False},
            {"type": "Split", "pattern": {"String": ","}, "behavior": "Contiguous", "invert": False},
            {"type": "Split", "pattern": {"String": "."}, "behavior": "MergedWithPrevious", "invert": True}]},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "end_of_word_suffix": "</w>", "fuse_unk": True, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }


SMALL_TEXTS = [
    "", "the", " the", "hello world", "hello  world", "the   king sing", "singer", "été été",
    "你好 你好", "abc cab bcab", "xyz?!", "unknown ñ chars ☃", "☃☃☃ ☃", "<bos>", "a<bos>b",
    "<start_of_turn>hello\n\nworld<end_of_turn>\n", "\n\n\n", " ", "  ", "▁the",
    "the cat sat on the mat", "thecat", "  thecat  ", "x [L]y", "x   [L] y", "x [R]   y",
    "x  [LR]  y", "[L][L]  [R]  [R]", "word", "a word b", "sword", "words", "word.", "(word)",
    "my norm", "my norm norm", "norm", "<new>", "a<new>b", "<s></s><unk>", "catcat", "cat",
    "hello help he", "cats-dogs", "a,,b,c", "a.b..c", "dog . cat", "hello-world, cats.", "ab ab",
    "café", "x  y\tz", "tab\there", "ünï", "日本", "🙂",
]


def write_json(path: Path, obj):
    text = (json.dumps(obj, ensure_ascii=False, indent=1) + "\n").encode("utf-8")
    if not path.exists() or path.read_bytes() != text:
        path.write_bytes(text)


def hexs(s: str) -> str:
    return s.encode("utf-8").hex() or "-"


def header(name, tok_path: Path = None):
    h = [f"# {name}: generated by scripts/make_tokenizer_fixtures.py with tokenizers {tokenizers.__version__}"]
    if tok_path is not None:
        h.append(f"# tokenizer.json sha256 {hashlib.sha256(tok_path.read_bytes()).hexdigest()}")
    h.append(f"# python {sys.version.split()[0]}")
    return h


def decode_cases(tok: Tokenizer, ids_lists):
    out = []
    for ids in ids_lists:
        for skip in (0, 1):
            text = tok.decode(ids, skip_special_tokens=bool(skip))
            out.append(f"D {skip} : {' '.join(map(str, ids))} => {hexs(text)}")
    return out


def write_small():
    lines = header("small tokenizers")
    for name, make in (("small-a", small_a), ("small-b", small_b), ("small-c", small_c)):
        path = FIX / f"{name}.json"
        write_json(path, make())
        tok = Tokenizer.from_file(str(path))
        lines.append(f"T {name}")
        for i, s in enumerate(SMALL_TEXTS):
            for add in (1, 0):
                ids = tok.encode(s, add_special_tokens=bool(add)).ids
                lines.append(f"E {add} {hexs(s)} : {' '.join(map(str, ids))}")
        n = tok.get_vocab_size(with_added_tokens=True)
        cases = [[i for i in range(min(n, 40))], [2, 7, 3], [0, 1, 2]]
        # byte runs: valid and invalid UTF-8 (small-a has byte tokens at ids 8..263)
        if name == "small-a":
            b = lambda x: 8 + x
            cases += [[b(0xE2), b(0x98), b(0x83)], [b(0xE2), b(0x98)], [b(0xE2), b(0x98), 10, b(0x41)],
                      [b(0xFF), b(0x41)], [b(0xF0), b(0x9F), b(0x99), b(0x82), b(0xC3)]]
        lines += decode_cases(tok, cases)
    (FIX / "small-expected.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------
# Gemma files

GEMMA4_TOKENS = {  # reference doc gemma-architecture.md §13
    46: "<|tool>", 47: "<tool|>", 48: "<|tool_call>", 49: "<tool_call|>", 50: "<|tool_response>",
    51: "<tool_response|>", 52: '<|"|>', 98: "<|think|>", 100: "<|channel>", 101: "<channel|>",
    105: "<|turn>", 106: "<turn|>", 255999: "<|image>", 256000: "<|audio>", 258880: "<|image|>",
    258881: "<|audio|>", 258882: "<image|>", 258883: "<audio|>", 258884: "<|video|>",
}


def gemma3_path() -> Path:
    p = cache_models() / "gemma-3-270m-tokenizer" / "tokenizer.json"
    if not p.exists():
        maker = ROOT / "scripts" / "make_demo_model.py"
        if not maker.exists():
            sys.exit(f"make_tokenizer_fixtures: {p} is missing and {maker} does not exist")
        subprocess.run([sys.executable, str(maker), "--only", "tokenizer"], check=True)
    if not p.exists():
        sys.exit(f"make_tokenizer_fixtures: {p} still missing after make_demo_model.py")
    return p


def derive_gemma4(src: Path) -> Path:
    dst_dir = cache_models() / "gemma-4-style-tokenizer"
    dst = dst_dir / "tokenizer.json"
    stamp = dst_dir / ".source-sha256"
    src_sha = hashlib.sha256(src.read_bytes()).hexdigest() + " v1"
    if dst.exists() and stamp.exists() and stamp.read_text() == src_sha:
        return dst
    d = json.loads(src.read_text(encoding="utf-8"))
    vocab = d["model"]["vocab"]
    by_id = {v: k for k, v in vocab.items()}
    merge_tokens = set()
    for m in d["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        merge_tokens.update((a, b, a + b))
    for tid, new in GEMMA4_TOKENS.items():
        old = by_id[tid]
        if old in merge_tokens:
            sys.exit(f"make_tokenizer_fixtures: {old!r} (id {tid}) takes part in merges; cannot rename")
        if new in vocab:
            sys.exit(f"make_tokenizer_fixtures: {new!r} already in the vocabulary")
        del vocab[old]
        vocab[new] = tid
    seen = set()
    for t in d["added_tokens"]:
        if t["id"] in GEMMA4_TOKENS:
            t.update(content=GEMMA4_TOKENS[t["id"]], special=True, normalized=False,
                     lstrip=False, rstrip=False, single_word=False)
            seen.add(t["id"])
    missing = set(GEMMA4_TOKENS) - seen
    if missing:
        sys.exit(f"make_tokenizer_fixtures: ids {sorted(missing)} are not added tokens in {src}")
    d["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {}}
    dst_dir.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".tmp")
    tmp.write_text(json.dumps(d, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, dst)
    stamp.write_text(src_sha)
    return dst


def write_expected(name: str, tok_path: Path, corpus: str):
    tok = Tokenizer.from_file(str(tok_path))
    items = corpus_items(corpus)
    out = header(name, tok_path)
    out.append(f"# items: corpus lines (L), blocks of {BLOCK} lines (B), whole corpus (A)")
    encs = tok.encode_batch([s for *_, s in items], add_special_tokens=True)
    encs_plain = tok.encode_batch([s for *_, s in items], add_special_tokens=False)
    for (kind, idx, add, s), e1, e0 in zip(items, encs, encs_plain):
        ids = (e1 if add else e0).ids
        out.append(f"{kind} {idx} {add} : {' '.join(map(str, ids))}")
    # decodes: special tokens kept / skipped, byte-fallback runs valid and cut in half
    vocab = tok.get_vocab()
    b = lambda x: vocab[f"<0x{x:02X}>"]
    cases = [tok.encode(corpus.split("\n")[k]).ids for k in range(0, 200, 13)]
    cases += [[2, 105, 2364, 107, 106, 1], [b(0xE2), b(0x98), b(0x83)], [b(0xE2), b(0x98)],
              [b(0xF0), b(0x9F), b(0x98)] + tok.encode("x", add_special_tokens=False).ids,
              [b(0xFF)], [b(0xC3), b(0xA9), b(0xC3)], [b(0x41), b(0x0A)]]
    out += decode_cases(tok, cases)
    (FIX / f"{name}-expected.txt").write_text("\n".join(out) + "\n", encoding="utf-8")


def check_recorded(name: str, tok_path: Path):
    """--cache-only: say so when the committed ids were made from a different tokenizer.json."""
    exp = FIX / f"{name}-expected.txt"
    want = hashlib.sha256(tok_path.read_bytes()).hexdigest()
    head = exp.read_text(encoding="utf-8").split("\n", 3)[:3] if exp.exists() else []
    if not any(want in line for line in head):
        print(f"make_tokenizer_fixtures: warning: {exp.name} was made from another {tok_path} "
              f"(sha256 {want} not recorded); rerun scripts/make_tokenizer_fixtures.py and commit",
              file=sys.stderr)


def main():
    if "--cache-only" in sys.argv[1:]:  # CI: only the (uncommitted) files in the cache
        g3 = gemma3_path()
        g4 = derive_gemma4(g3)
        check_recorded("gemma3", g3)
        check_recorded("gemma4", g4)
        return
    FIX.mkdir(parents=True, exist_ok=True)
    corpus = make_corpus()
    cpath = FIX / "corpus.txt"
    if not cpath.exists() or cpath.read_bytes() != corpus.encode("utf-8"):
        cpath.write_bytes(corpus.encode("utf-8"))
    write_small()
    if os.environ.get("MLXRT_SMALL_ONLY") == "1":
        return
    g3 = gemma3_path()
    g4 = derive_gemma4(g3)
    write_expected("gemma3", g3, corpus)
    write_expected("gemma4", g4, corpus)
    print(f"make_tokenizer_fixtures: wrote fixtures in {FIX} (Gemma 4-style file: {g4})")


if __name__ == "__main__":
    main()
