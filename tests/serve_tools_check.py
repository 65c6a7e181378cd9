"""A tool-call round trip through mlxrt serve with the official `openai` client, on a tiny Gemma 4
checkpoint whose greedy answers are designed (scripts/make_tool_call_model.py) and the Gemma 4
31B chat template: the server returns message.tool_calls parsed from the model's
`<|tool_call>...<tool_call|>` (also as streamed deltas), the client sends back the assistant's
call and a tool message, and the server renders them through the template and answers. The
prompt sizes the server reports are checked against the same template rendered by jinja2 with
transformers' settings and tokenized by HF tokenizers.

Usage: serve_tools_check.py MLXRT_BINARY TOKENIZER_JSON TEMPLATE_JINJA
"""
import json
import os
import subprocess
import sys
import tempfile

import jinja2
import jinja2.ext
import jinja2.sandbox
import openai
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import ROOT, Checker, Server  # noqa: E402

C = Checker()
TOOLS = [{"type": "function", "function": {"name": "get_time", "description": "The current time",
                                           "parameters": {"type": "object", "properties": {}}}}]


def reference_tokens(template, tok, messages, tools):
    """The prompt as transformers renders it (its Jinja environment), tokenized without extras."""
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    text = env.from_string(template).render(messages=messages, tools=tools, add_generation_prompt=True,
                                            bos_token="<bos>", eos_token="<eos>")
    return len(tok.encode(text, add_special_tokens=False).ids), text


def main():
    mlxrt, tok_path, template_path = sys.argv[1:4]
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "gemma4-tool-tiny")
    subprocess.check_call([sys.executable, os.path.join(ROOT, "scripts/make_tool_call_model.py"), model, tok_path,
                           template_path])
    template = open(template_path).read()
    tok = Tokenizer.from_file(tok_path)
    srv = Server(mlxrt, model, "-c", "512")
    try:
        run(openai.OpenAI(base_url=srv.url() + "/v1", api_key="none", max_retries=0, timeout=120), template, tok)
    finally:
        problems = srv.stop()
        C.check(not problems, "orderly stop: " + ", ".join(problems))
    return C.end()


def run(client, template, tok):
    user = [{"role": "user", "content": "What time is it?"}]
    r1 = client.chat.completions.create(model="gemma4-tool-tiny", messages=user, tools=TOOLS, temperature=0,
                                        max_tokens=32)
    ch = r1.choices[0]
    calls = ch.message.tool_calls or []
    C.check(ch.finish_reason == "tool_calls", "finish_reason tool_calls (%s)" % ch.finish_reason)
    C.check(len(calls) == 1 and calls[0].type == "function" and calls[0].function.name == "get_time",
            "one call of get_time: %s" % calls)
    if not calls:
        return
    C.check(json.loads(calls[0].function.arguments) == {}, "arguments: %r" % calls[0].function.arguments)
    C.check(calls[0].id.startswith("call_") and len(calls[0].id) > 8, "call id %r" % calls[0].id)
    C.check(not ch.message.content, "no text beside the call: %r" % ch.message.content)
    want, _ = reference_tokens(template, tok, user, TOOLS)
    C.check(r1.usage.prompt_tokens == want, "turn 1 prompt: %d tokens, jinja2 + tokenizers: %d" %
            (r1.usage.prompt_tokens, want))

    # the same answer streamed: the call arrives as a tool_calls delta
    chunks = list(client.chat.completions.create(model="gemma4-tool-tiny", messages=user, tools=TOOLS,
                                                 temperature=0, max_tokens=32, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    C.check(len(deltas) == 1 and deltas[0].index == 0 and deltas[0].function.name == "get_time" and
            deltas[0].id.startswith("call_"), "streamed tool_calls delta: %s" % deltas)
    C.check(chunks[-1].choices[0].finish_reason == "tool_calls", "streamed finish_reason")
    C.check(not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), "no streamed text")

    # the round trip: the call and its result go back; the template renders both
    convo = user + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": calls[0].id, "type": "function",
             "function": {"name": "get_time", "arguments": calls[0].function.arguments}}]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": "12:00"}]
    r2 = client.chat.completions.create(model="gemma4-tool-tiny", messages=convo, tools=TOOLS, temperature=0,
                                        max_tokens=32)
    C.check(r2.choices[0].message.content == "The time is noon." and r2.choices[0].finish_reason == "stop",
            "the answer after the tool: %r (%s)" % (r2.choices[0].message.content, r2.choices[0].finish_reason))
    C.check(not r2.choices[0].message.tool_calls, "no call in the final answer")
    # what the server gives the template: arguments as a mapping (OpenAI sends them as JSON text)
    ref = json.loads(json.dumps(convo))
    ref[1]["content"] = ""
    ref[1]["tool_calls"][0]["function"]["arguments"] = json.loads(calls[0].function.arguments)
    want, text = reference_tokens(template, tok, ref, TOOLS)
    C.check("<|tool_response>response:get_time{value:<|\"|>12:00<|\"|>}<tool_response|>" in text,
            "the reference renders the tool response")
    C.check(r2.usage.prompt_tokens == want, "turn 2 prompt: %d tokens, jinja2 + tokenizers: %d" %
            (r2.usage.prompt_tokens, want))
    C.check(r2.usage.prompt_tokens_details.cached_tokens > 0, "turn 2 reuses the cache (%d)" %
            r2.usage.prompt_tokens_details.cached_tokens)


if __name__ == "__main__":
    sys.exit(main())
