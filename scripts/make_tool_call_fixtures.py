#!/usr/bin/env python3
"""Writes tests/fixtures/tool_calls/gemma4.json: generated texts holding Gemma 4 tool calls and
what mlx-lm's own parser (mlx_lm.tool_parsers.gemma4.parse_tool_call) makes of them, for
tests/test_api_generate.c to compare with mlxrt_parse_tool_calls.

mlx-lm's server cuts the text between the tool_call_start and tool_call_end markers the module
declares and hands each piece to parse_tool_call; the text outside the markers is the message
content. This script does the same: "calls" lists {name, arguments} in order (a piece holding
several calls gives several), "content" the text outside, and "error": true where the parser
raises (the C side must then fail too).

Usage: PY=$(scripts/venv.sh); $PY scripts/make_tool_call_fixtures.py
"""
import importlib.metadata as md
import json
from pathlib import Path

from mlx_lm.tool_parsers import gemma4

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "tool_calls" / "gemma4.json"
S = '<|"|>'
O, C = gemma4.tool_call_start, gemma4.tool_call_end

TEXTS = [
    "Hello, no tools here.",
    "",
    f"{O}call:get_weather{{location:{S}Paris{S},unit:{S}celsius{S}}}{C}",
    f"{O}call:f{{a:1,b:-2.5,c:1e3,d:true,e:false,f:null,g:0}}{C}",
    f"{O}call:f{{q:{{inner:{S}x{S},list:[1,2,{S}three{S}]}},arr:[{{k:1}},{{k:2}}],e:[]}}{C}",
    f'{O}call:run{{code:{S}if (a) {{ b: "c", d }}\n\tend \\ done{S}}}{C}',
    f"Let me check.{O}call:a{{x:1}}{C} and {O}call:b{{y:{S}z{S}}}{C} done",
    f"{O}call:a{{x:1}}call:b{{y:2}}{C}",
    f"{O}call:now{{}}{C}",
    f"{O}call:get-time{{tz:{S}UTC{S}}}{C}",
    f"{O}call:say{{text:{S}héllo 世界 😀{S},empty:{S}{S}}}{C}",
    f'{O}call:f{{"quoted":"json \\"style\\"",n:12.5e-1}}{C}',
    f"<|channel>thought\nplanning<channel|>Sure.{O}call:search{{query:{S}mlx{S},limit:5}}{C}",
    # malformed: the parser raises
    f"{O}call:f{{a:{S}x}}{C}",
    f"{O}call:f{{a:}}{C}",
    f"{O}call:f{{a:1,}}{C}",
    f"{O}call:f{{a:tru}}{C}",
    f"{O}f{{a:1}}{C}",
]


def parse(text):
    calls, content, pos = [], [], 0
    while True:
        i = text.find(O, pos)
        if i < 0:
            content.append(text[pos:])
            break
        j = text.find(C, i + len(O))
        if j < 0:
            raise ValueError("unterminated tool call")
        content.append(text[pos:i])
        got = gemma4.parse_tool_call(text[i + len(O):j])
        calls.extend(got if isinstance(got, list) else [got])
        pos = j + len(C)
    return calls, "".join(content)


def main():
    cases = []
    for t in TEXTS:
        try:
            calls, content = parse(t)
            cases.append({"text": t, "calls": calls, "content": content})
        except Exception as e:  # json.JSONDecodeError or ValueError, as the server sees them
            cases.append({"text": t, "error": True, "why": f"{type(e).__name__}: {e}"})
    doc = {"generator": "scripts/make_tool_call_fixtures.py",
           "mlx_lm_version": md.version("mlx-lm"), "cases": cases}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
