"""mlxrt serve with --cont-batching on (tiny model, CPU backend): the slots' sessions share one
batched decoder. Eight different requests (chat and completions, streaming and not, greedy and
seeded sampling with every filter, logprobs with alternatives, a repetition penalty, stop
strings, a prompt longer than a prompt piece) sent at once to --parallel 4, twice, must give
exactly the answers a --cont-batching off server with one slot gives them one after another,
and /metrics must show steps that held several slots.

Usage: serve_batch_check.py MLXRT_BINARY
"""
import json
import os
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checker, Server, tiny_model  # noqa: E402

C = Checker()
LONG = " ".join("word%d" % (i % 37) for i in range(180))
REQUESTS = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "tell me a story"}], "max_tokens": 24,
                              "temperature": 0}),
    ("/v1/completions", {"prompt": "once upon a time", "max_tokens": 24, "temperature": 0.8, "seed": 5,
                         "top_k": 20, "stream": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16,
                              "temperature": 0, "logprobs": True, "top_logprobs": 3}),
    ("/v1/completions", {"prompt": "the cat sat", "max_tokens": 20, "temperature": 0.7, "seed": 9,
                         "repetition_penalty": 1.3, "logprobs": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "count to ten"}], "max_tokens": 30,
                              "temperature": 0, "stop": ["e"], "stream": True}),
    ("/v1/completions", {"prompt": LONG, "max_tokens": 16, "temperature": 0}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a poem"}], "max_tokens": 24,
                              "temperature": 1.0, "seed": 11, "top_p": 0.9, "min_p": 0.05}),
    ("/v1/completions", {"prompt": "and then", "max_tokens": 40, "temperature": 0, "ignore_eos": True}),
]


def essence(path, body, status, data):
    """What must not depend on batching: the text, logprobs, finish reasons, token counts."""
    if status != 200:
        return {"status": status, "body": data.decode(errors="replace")}
    chat = path.endswith("chat/completions")
    if body.get("stream"):
        events = [e[6:] for e in data.decode().split("\n\n") if e.startswith("data: ")]
        out = {"text": "", "finish": None, "done": events[-1] == "[DONE]"}
        for e in events[:-1]:
            c = json.loads(e)["choices"]
            if not c:
                continue
            out["text"] += (c[0]["delta"].get("content") or "") if chat else c[0]["text"]
            out["finish"] = c[0]["finish_reason"] or out["finish"]
        return out
    j = json.loads(data)
    c = j["choices"][0]
    return {"message": c["message"] if chat else c["text"], "logprobs": c["logprobs"], "finish": c["finish_reason"],
            "tokens": [j["usage"]["prompt_tokens"], j["usage"]["completion_tokens"]]}


def main():
    tmp = tempfile.mkdtemp()
    model = tiny_model(os.path.join(tmp, "tiny"))
    results = {}
    srv = Server(sys.argv[1], model, "--parallel", "4", "--cont-batching", "on", "-c", "1024")
    try:
        C.check("decoded as one batch" in srv.stderr(), "the start line says the slots decode as one batch")
        for rnd in range(2):
            def send(i):
                path, body = REQUESTS[i]
                status, _, data = srv.request("POST", path, body=body)
                results[(rnd, i)] = essence(path, body, status, data)
            threads = [threading.Thread(target=send, args=(i,)) for i in range(len(REQUESTS))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        m = srv.metrics()
        steps, rows = m.get("mlxrt_batched_steps_total", 0), m.get("mlxrt_batched_rows_total", 0)
        C.check(steps > 0 and rows > steps, "batched steps held several slots: %d rows in %d steps" % (rows, steps))
    finally:
        problems = srv.stop()
        C.check(not problems, "orderly stop: " + ", ".join(problems))
    ref = Server(sys.argv[1], model, "--parallel", "1", "--cont-batching", "off", "-c", "1024")
    try:
        C.check("decoded as one batch" not in ref.stderr(), "--cont-batching off: separate sessions")
        for i, (path, body) in enumerate(REQUESTS):
            status, _, data = ref.request("POST", path, body=body)
            want = essence(path, body, status, data)
            C.check(want.get("status", 200) == 200, "request %d answered alone: %s" % (i, want))
            for rnd in range(2):
                got = results.get((rnd, i))
                C.check(got == want, "request %d, round %d: the batched answer equals the lone one%s" %
                        (i, rnd, "" if got == want else "\n  batched: %s\n  alone:   %s" % (got, want)))
    finally:
        problems = ref.stop()
        C.check(not problems, "orderly stop: " + ", ".join(problems))
    return C.end()


if __name__ == "__main__":
    sys.exit(main())
