"""mlxrt serve driven by the official `openai` Python client (pinned in scripts/venv.sh) on the
demo model: models, chat and completions, streaming with usage, stop strings, seed
reproducibility, logprobs, prompt reuse across a conversation, concurrent streams and the
client's view of errors.

Usage: serve_openai_check.py MLXRT_BINARY MODEL_DIR
"""
import os
import sys
import threading

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checker, Server  # noqa: E402

KEY = "sk-local"
C = Checker()


def main():
    mlxrt, model_dir = sys.argv[1], sys.argv[2]
    srv = Server(mlxrt, model_dir, "--api-key", KEY, "--parallel", "2", "-c", "1024")
    try:
        client = openai.OpenAI(base_url=srv.url() + "/v1", api_key=KEY, max_retries=0, timeout=300)
        run(client, srv)
    finally:
        problems = srv.stop()
        C.check(not problems, "orderly stop: " + ", ".join(problems))
    return C.end()


def run(client, srv):
    name = os.path.basename(os.path.normpath(sys.argv[2]))

    # A prompt processed in one batch and the same prompt after a cached prefix round differently
    # (mlx-lm's prompt cache does the same), which can flip a near tie. Texts compared below come
    # from requests that all find the prompt cached but its last token: a first request with
    # max_tokens 1 leaves the slot holding exactly the prompt.
    def warm_chat(m):
        client.chat.completions.create(model=name, messages=m, max_tokens=1, temperature=0)

    def warm_completion(p):
        client.completions.create(model=name, prompt=p, max_tokens=1, temperature=0)
    ids = [m.id for m in client.models.list()]
    C.check(ids == [name], "models.list: %s" % ids)
    msgs = [{"role": "user", "content": "Name three colors of the rainbow."}]

    # ---- chat, greedy
    warm_chat(msgs)
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=24, temperature=0)
    text = r.choices[0].message.content
    C.check(isinstance(text, str) and len(text) > 0, "chat answer: %r" % text)
    C.check(r.choices[0].message.role == "assistant" and r.choices[0].finish_reason in ("stop", "length"),
            "chat message and finish_reason")
    C.check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens and
            r.usage.completion_tokens <= 24, "chat usage %s" % r.usage)
    C.check(r.usage.prompt_tokens_details.cached_tokens is not None, "cached_tokens present")

    # ---- streaming: the same greedy text in pieces, role first, usage last
    chunks = list(client.chat.completions.create(model=name, messages=msgs, max_tokens=24, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    C.check(chunks[0].choices[0].delta.role == "assistant", "stream: role first")
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    C.check("".join(pieces) == text, "stream text = the non-streamed text (%r vs %r)" % ("".join(pieces), text))
    C.check(sum(1 for p in pieces if p) >= 3, "stream: several content pieces")
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    C.check(finals == [r.choices[0].finish_reason], "stream: one finish_reason, at the end (%s)" % finals)
    C.check(chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens,
            "stream: the usage chunk last")

    # ---- completions
    warm_completion("The capital of France is")
    c1 = client.completions.create(model=name, prompt="The capital of France is", max_tokens=12, temperature=0)
    C.check(isinstance(c1.choices[0].text, str) and c1.choices[0].text, "completion text %r" % c1.choices[0].text)
    C.check(c1.usage.completion_tokens <= 12, "completion usage")
    cs = list(client.completions.create(model=name, prompt="The capital of France is", max_tokens=12,
                                        temperature=0, stream=True))
    C.check("".join(c.choices[0].text for c in cs if c.choices) == c1.choices[0].text, "streamed completion")

    # ---- stop strings: cut where the string begins, held back across tokens, not included
    warm_completion("Count: one, two, three,")
    long = client.completions.create(model=name, prompt="Count: one, two, three,", max_tokens=32, temperature=0)
    full = long.choices[0].text
    stop = None
    for start in range(4, len(full) - 4):
        cand = full[start:start + 3]
        if full.index(cand) == start and cand.strip() and len(cand.encode()) == 3:
            stop = cand
            break
    if C.check(stop is not None, "a stop string from the answer %r" % full):
        cut = client.completions.create(model=name, prompt="Count: one, two, three,", max_tokens=32, temperature=0,
                                        stop=["@@never@@", stop])
        want = full[:full.index(stop)]
        C.check(cut.choices[0].text == want and cut.choices[0].finish_reason == "stop",
                "stop %r: %r (wanted %r)" % (stop, cut.choices[0].text, want))
        streamed = "".join(c.choices[0].text for c in client.completions.create(
            model=name, prompt="Count: one, two, three,", max_tokens=32, temperature=0, stop=stop, stream=True)
            if c.choices)
        C.check(streamed == want, "streamed stop: %r" % streamed)

    # ---- seeds: temperature 0.8, same seed -> same text; seeds differ somewhere
    def sampled(seed):
        return client.chat.completions.create(model=name, messages=msgs, max_tokens=20, temperature=0.8,
                                              seed=seed).choices[0].message.content
    warm_chat(msgs)
    a, b = sampled(1234), sampled(1234)
    C.check(a == b, "same seed, same text (%r / %r)" % (a, b))
    others = {sampled(s) for s in (1, 2, 3)}
    C.check(len(others | {a}) > 1, "different seeds give different texts")

    # ---- logprobs (chat format)
    lp = client.chat.completions.create(model=name, messages=msgs, max_tokens=8, temperature=0, logprobs=True,
                                        top_logprobs=3)
    content = lp.choices[0].logprobs.content
    C.check(len(content) == lp.usage.completion_tokens, "one logprobs entry per token")
    ok = True
    for e in content:
        tops = e.top_logprobs
        ok = ok and e.logprob <= 0 and len(tops) == 3 and bytes(e.bytes).decode("utf-8", "replace") == e.token
        ok = ok and tops[0].logprob >= tops[1].logprob >= tops[2].logprob
        ok = ok and tops[0].token == e.token and abs(tops[0].logprob - e.logprob) < 1e-5  # greedy = argmax
    C.check(ok, "logprobs entries: token, bytes, sorted alternatives, the greedy token first")
    C.check("".join(e.token for e in content).startswith(lp.choices[0].message.content[:4]),
            "the tokens spell the answer")

    # ---- a conversation reuses its slot's cache
    turn1 = client.chat.completions.create(model=name, messages=msgs, max_tokens=16, temperature=0)
    convo = msgs + [{"role": "assistant", "content": turn1.choices[0].message.content},
                    {"role": "user", "content": "And two more?"}]
    turn2 = client.chat.completions.create(model=name, messages=convo, max_tokens=8, temperature=0)
    cached = turn2.usage.prompt_tokens_details.cached_tokens
    C.check(cached >= turn1.usage.prompt_tokens, "turn 2 reuses turn 1 (%d cached, turn 1 prompt %d)" %
            (cached, turn1.usage.prompt_tokens))

    # ---- two streams at once (--parallel 2)
    out = {}

    def stream(i):
        out[i] = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model=name, messages=msgs, max_tokens=24, temperature=0, stream=True) if c.choices)
    ts = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    C.check(all(out.get(i) for i in range(2)), "concurrent streams both answer")

    # ---- errors as the client sees them
    def raises(exc, what, **kw):
        try:
            client.chat.completions.create(**kw)
        except exc as e:
            C.check(e.status_code in (400, 401, 404) and e.body and "message" in e.body, what)
            return
        except Exception as e:  # noqa: BLE001
            C.check(False, "%s: %r" % (what, e))
            return
        C.check(False, what + ": no error")
    raises(openai.NotFoundError, "unknown model -> NotFoundError", model="gpt-4o", messages=msgs)
    raises(openai.BadRequestError, "n=2 -> BadRequestError", model=name, messages=msgs, n=2)
    raises(openai.BadRequestError, "max_tokens beyond the context", model=name, messages=msgs, max_tokens=100000)
    raises(openai.BadRequestError, "empty messages", model=name, messages=[])
    bad = openai.OpenAI(base_url=srv.url() + "/v1", api_key="sk-wrong", max_retries=0)
    try:
        bad.models.list()
        C.check(False, "a wrong key is refused")
    except openai.AuthenticationError:
        C.check(True, "wrong key -> AuthenticationError")


if __name__ == "__main__":
    sys.exit(main())
