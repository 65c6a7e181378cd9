"""mlxrt serve over raw HTTP on a tiny model (fast; standard library and curl only): endpoints,
authentication, response shapes, SSE framing byte by byte (curl as the client), prompt reuse,
and bad input, each answered by an OpenAI-style 4xx error, never a crash or a hang.

Usage: serve_http_check.py MLXRT_BINARY
"""
import json
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checker, Server, tiny_model  # noqa: E402

KEY = "sk-test-123"
AUTH = {"Authorization": "Bearer " + KEY}
C = Checker()


def is_openai_error(status, body, want_status, want_code=None, want_param=None):
    try:
        e = json.loads(body)["error"]
    except Exception:
        return False
    ok = status == want_status and isinstance(e.get("message"), str) and e["message"]
    ok = ok and isinstance(e.get("type"), str) and "param" in e and "code" in e
    if want_code is not None:
        ok = ok and e["code"] == want_code
    if want_param is not None:
        ok = ok and e["param"] == want_param
    return ok


def expect_error(srv, what, body, want_status=400, want_code=None, want_param=None, path="/v1/chat/completions",
                 headers=AUTH):
    status, _, data = srv.request("POST", path, body=body, headers=headers)
    ok = is_openai_error(status, data, want_status, want_code, want_param)
    C.check(ok, "%s: got %d %s" % (what, status, data[:300]))


def raw_exchange(port, head, chunks, timeout=30):
    """Sends head then chunks on a raw socket (ignoring a server that closes early) and returns
    the status line and body it answered."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(head)
        for c in chunks:
            try:
                s.sendall(c)
            except OSError:
                break
        data = b""
        while True:
            try:
                b = s.recv(65536)
            except OSError:
                break
            if not b:
                break
            data += b
            if b"\r\n\r\n" in data:
                hdr, _, rest = data.partition(b"\r\n\r\n")
                if b"Content-Length:" in hdr:
                    n = int(hdr.split(b"Content-Length:")[1].split(b"\r\n")[0])
                    if len(rest) >= n:
                        break
        return data
    finally:
        s.close()


def check_sse(path, chat):
    """The whole stream: only `data: ...\\n\\n` events, JSON each, [DONE] last."""
    raw = open(path, "rb").read()
    C.check(raw.endswith(b"data: [DONE]\n\n"), "stream ends with data: [DONE]")
    events = raw.split(b"\n\n")
    C.check(events[-1] == b"", "stream ends with a blank line")
    events = events[:-1]
    C.check(all(e.startswith(b"data: ") and b"\n" not in e for e in events), "every event is one data: line")
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    C.check(len(chunks) >= 2, "several chunks")
    if chat:
        C.check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "the first chunk has the role")
        C.check(all(c["object"] == "chat.completion.chunk" for c in chunks), "chunk objects")
    else:
        C.check(all(c["object"] == "text_completion" for c in chunks), "completion chunks")
    C.check(all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2]), "no early finish_reason")
    C.check(chunks[-2]["choices"][0]["finish_reason"] == "length", "finish_reason length before usage")
    C.check(chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5, "usage chunk last")
    return chunks


def dechunk(raw):
    """The body of a chunked transfer, or None when its terminating chunk is missing."""
    out, pos = b"", 0
    while True:
        eol = raw.find(b"\r\n", pos)
        if eol < 0:
            return None
        n = int(raw[pos:eol], 16)
        if n == 0:
            return out
        out += raw[eol + 2:eol + 2 + n]
        pos = eol + 2 + n + 2


def full_queue_and_stop(mlxrt, model):
    """One slot and a queue of one: a long stream holds the slot, the next request waits, the
    third gets 503; then SIGTERM mid-stream: the server stops promptly and cleanly, the waiting
    request gets 503 and the stream ends with an error event."""
    import threading
    import time
    srv = Server(mlxrt, model, "-c", "4096", "--parallel", "1", "--queue", "1")
    body = json.dumps({"prompt": "go on and on", "max_tokens": 4000, "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    data = b""
    while data.count(b"data: ") < 2:
        data += s.recv(65536)
    waiting = {}

    def wait_in_queue():
        waiting["r"] = srv.request("POST", "/v1/completions", body={"prompt": "me next", "max_tokens": 2})
    t = threading.Thread(target=wait_in_queue)
    t.start()
    deadline = time.time() + 10
    while srv.metrics().get("mlxrt_queue_depth") != 1 and time.time() < deadline:
        time.sleep(0.01)
    st, _, d = srv.request("POST", "/v1/completions", body={"prompt": "and me", "max_tokens": 2})
    C.check(is_openai_error(st, d, 503, "queue_full"), "a full queue: 503 queue_full (%d %s)" % (st, d[:200]))
    t0 = time.time()
    problems = srv.stop(timeout=20)
    took = time.time() - t0
    C.check(not problems, "stop during a stream: " + ", ".join(problems))
    C.check(took < 5, "stopped within 5 s of SIGTERM (%.2f s)" % took)
    t.join()
    st, _, d = waiting.get("r", (0, {}, b""))
    C.check(is_openai_error(st, d, 503, "shutting_down"), "the waiting request: 503 (%d %s)" % (st, d[:200]))
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except OSError:
        pass
    s.close()
    body = dechunk(data.partition(b"\r\n\r\n")[2])
    C.check(body is not None and b'data: {"error"' in body and not body.endswith(b"[DONE]\n\n"),
            "the stream ended with an error event: %r" % data[-200:])


def speculative(mlxrt, model, plain_text):
    """--spec lookup and --draft-model: the same greedy completion as the plain server's; a
    setting the slots cannot run fails at start, not per request."""
    for args in (["--spec", "lookup", "--draft-max", "4"], ["--draft-model", model, "--draft-max", "3"]):
        srv = Server(mlxrt, model, "-c", "512", *args)
        try:
            s, _, d = srv.request("POST", "/v1/completions", body={
                "prompt": "one two one two one two", "max_tokens": 40, "temperature": 0, "ignore_eos": True})
            text = json.loads(d)["choices"][0]["text"] if s == 200 else None
            C.check(text == plain_text, "serve %s: the plain greedy text (%d %r vs %r)" % (" ".join(args), s, text,
                                                                                            plain_text))
        finally:
            problems = srv.stop()
            C.check(not problems, "serve %s stops cleanly: %s" % (" ".join(args), ", ".join(problems)))
    r = subprocess.run([mlxrt, "serve", "-m", model, "--port", "0", "--spec", "lookup", "--draft-max", "40"],
                       capture_output=True, text=True, timeout=60)
    C.check(r.returncode == 2 and "--draft-max expects an integer in 1..32" in r.stderr, "serve --draft-max 40")


def main():
    mlxrt = sys.argv[1]
    tmp = tempfile.mkdtemp()
    model = tiny_model(os.path.join(tmp, "tiny-gemma"))
    srv = Server(mlxrt, model, "--api-key", KEY, "-c", "256", "--parallel", "2", "--queue", "8")
    try:
        # ---- endpoints and authentication
        s, _, d = srv.request("GET", "/health")
        C.check(s == 200 and json.loads(d)["status"] == "ok", "/health without a key")
        s, _, d = srv.request("GET", "/v1/models")
        C.check(is_openai_error(s, d, 401, "invalid_api_key"), "/v1/models without a key: 401")
        s, _, d = srv.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
        C.check(is_openai_error(s, d, 401, "invalid_api_key"), "wrong key: 401")
        s, _, d = srv.request("GET", "/metrics")
        C.check(s == 401, "/metrics wants the key")
        s, _, d = srv.request("GET", "/v1/models", headers=AUTH)
        models = json.loads(d)
        C.check(s == 200 and models["object"] == "list" and models["data"][0]["id"] == "tiny-gemma",
                "/v1/models lists the folder's name")
        s, _, d = srv.request("GET", "/v1/models/tiny-gemma", headers=AUTH)
        C.check(s == 200 and json.loads(d)["id"] == "tiny-gemma", "/v1/models/ID")
        s, _, d = srv.request("GET", "/v1/nothing", headers=AUTH)
        C.check(is_openai_error(s, d, 404, "not_found"), "unknown path: 404")
        s, _, d = srv.request("GET", "/v1/chat/completions", headers=AUTH)
        C.check(is_openai_error(s, d, 405), "GET on a POST endpoint: 405")
        expect_error(srv, "no key on chat", {"messages": [{"role": "user", "content": "hi"}]}, 401, headers={})

        # ---- answers
        s, h, d = srv.request("POST", "/v1/chat/completions", headers=AUTH, body={
            "model": "tiny-gemma", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 6,
            "temperature": 0})
        r = json.loads(d) if s == 200 else {}
        C.check(s == 200 and h.get("Content-Type") == "application/json", "chat: 200 JSON (%d %s)" % (s, d[:200]))
        if r:
            C.check(r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-"), "chat object")
            ch = r["choices"][0]
            C.check(ch["message"]["role"] == "assistant" and isinstance(ch["message"]["content"], str), "message")
            C.check(ch["finish_reason"] in ("length", "stop"), "finish_reason")
            u = r["usage"]
            C.check(u["completion_tokens"] <= 6 and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"],
                    "usage adds up")
            C.check("cached_tokens" in u["prompt_tokens_details"], "cached_tokens reported")
        # The same prompt three times: the second asks for one token, so its slot holds exactly
        # the prompt; the third finds all of it but the last token cached (at least one is
        # processed) and answers as the first did. (The prompt is shorter than the fixture's
        # sliding window of 8: a session whose ring has wrapped cannot rewind and starts over.)
        prompt = "hello hello hello hello hello hello"
        got = []
        for i, n in enumerate((4, 1, 4)):
            s, _, d = srv.request("POST", "/v1/completions", headers=AUTH, body={
                "prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 2})
            C.check(s == 200, "completion %d: %d %s" % (i, s, d[:200]))
            got.append(json.loads(d) if s == 200 else None)
        first, _, third = got
        if first and third:
            C.check(first["object"] == "text_completion" and first["id"].startswith("cmpl-"), "completion object")
            C.check(first["choices"][0]["text"] == third["choices"][0]["text"], "greedy twice: same text")
            lp = first["choices"][0]["logprobs"]
            C.check(len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) ==
                    first["usage"]["completion_tokens"], "legacy logprobs per token")
            C.check(all(v <= 0 for v in lp["token_logprobs"]), "log probabilities <= 0")
            C.check(all(len(t) <= 2 for t in lp["top_logprobs"]), "at most 2 alternatives")
            C.check(lp["tokens"] == third["choices"][0]["logprobs"]["tokens"], "same tokens with the cache")
            cached = third["usage"]["prompt_tokens_details"]["cached_tokens"]
            C.check(cached == third["usage"]["prompt_tokens"] - 1,
                    "the repeated prompt is reused from the slot (%d cached of %d)" %
                    (cached, third["usage"]["prompt_tokens"]))

        # ---- SSE framing with curl as the client
        for chat in (True, False):
            hdr, out = os.path.join(tmp, "h.txt"), os.path.join(tmp, "sse.txt")
            body = {"max_tokens": 5, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
            if chat:
                body["messages"] = [{"role": "user", "content": "stream please"}]
            else:
                body["prompt"] = "stream please"
            rc = subprocess.call(["curl", "-sS", "-N", "-D", hdr, "-o", out, "-H", "Authorization: Bearer " + KEY,
                                  "-H", "Content-Type: application/json", "--data-binary", json.dumps(body),
                                  srv.url() + ("/v1/chat/completions" if chat else "/v1/completions")])
            C.check(rc == 0, "curl exit status")
            headers = open(hdr, "rb").read().decode().lower()
            C.check(headers.startswith("http/1.1 200"), "stream status 200")
            C.check("content-type: text/event-stream" in headers, "Content-Type: text/event-stream")
            check_sse(out, chat)

        s, _, d = srv.request("POST", "/v1/chat/completions", headers=AUTH, body={
            "messages": [{"role": "user", "content": "a JSON object please"}], "max_tokens": 3,
            "response_format": {"type": "json_object"}})
        C.check(s == 200, "response_format json_object is taken (%d %s)" % (s, d[:200]))
        hdr, out = os.path.join(tmp, "h.txt"), os.path.join(tmp, "sse.txt")
        rc = subprocess.call(["curl", "-sS", "-N", "-o", out, "-H", "Authorization: Bearer " + KEY, "--data-binary",
                              json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                                          "temperature": 0, "ignore_eos": True, "stream": True, "logprobs": True,
                                          "top_logprobs": 2}),
                              srv.url() + "/v1/chat/completions"])
        events = [json.loads(e[6:]) for e in open(out, "rb").read().split(b"\n\n")[:-2]]
        lps = [x for e in events for x in ((e["choices"][0].get("logprobs") or {}).get("content") or [])]
        C.check(rc == 0 and len(lps) == 5 and all(len(x["top_logprobs"]) == 2 for x in lps),
                "streamed logprobs: one entry per token (%d)" % len(lps))

        # ---- bad input
        msgs = [{"role": "user", "content": "hi"}]
        expect_error(srv, "malformed JSON", b'{"messages": [', 400)
        expect_error(srv, "not an object", b"[]", 400)
        expect_error(srv, "empty body", b"", 400)
        expect_error(srv, "messages of the wrong type", {"messages": "hi"}, 400, want_param="messages")
        expect_error(srv, "content of the wrong type", {"messages": [{"role": "user", "content": 7}]}, 400)
        expect_error(srv, "temperature as a string", {"messages": msgs, "temperature": "hot"}, 400,
                     want_param="temperature")
        expect_error(srv, "max_tokens -1", {"messages": msgs, "max_tokens": -1}, 400, want_param="max_tokens")
        expect_error(srv, "max_tokens 1e9", b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1e9}', 400,
                     want_code="context_length_exceeded", want_param="max_tokens")
        expect_error(srv, "unknown model", {"model": "gpt-5", "messages": msgs}, 404, want_code="model_not_found")
        expect_error(srv, "n = 2", {"messages": msgs, "n": 2}, 400, want_param="n")
        expect_error(srv, "a prompt beyond the context", {"prompt": "word " * 2000}, 400,
                     want_code="context_length_exceeded", path="/v1/completions")
        expect_error(srv, "invalid UTF-8", b'{"messages":[{"role":"user","content":"\xff\xfe"}]}', 400)
        expect_error(srv, "100k messages", {"messages": [{"role": "user", "content": "x"}] * 100000}, 400,
                     want_param="messages")
        expect_error(srv, "a NUL in the text", b'{"prompt":"a\\u0000b"}', 400, path="/v1/completions")
        big = b'{"prompt":"' + b"a" * (10 << 20) + b'"}'
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(big))
        data = raw_exchange(srv.port, head, [big[i:i + 65536] for i in range(0, len(big), 65536)])
        C.check(data.startswith(b"HTTP/1.1 413") and b'"request_too_large"' in data, "10 MB body: 413 (%r)" % data[:80])
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunks = [b"%x\r\n%s\r\n" % (len(big[i:i + 65536]), big[i:i + 65536]) for i in range(0, len(big), 65536)]
        data = raw_exchange(srv.port, head, chunks + [b"0\r\n\r\n"])
        C.check(data.startswith(b"HTTP/1.1 413"), "10 MB chunked body: 413 (%r)" % data[:80])

        # still serving, nothing left busy
        s, _, d = srv.request("POST", "/v1/completions", headers=AUTH, body={"prompt": "still", "max_tokens": 2})
        C.check(s == 200, "still serving after the bad input")
        m = srv.metrics(headers=AUTH)
        C.check(m.get("mlxrt_slots_busy") == 0 and m.get("mlxrt_queue_depth") == 0, "no slot left busy")
        C.check(m.get('mlxrt_requests_total{endpoint="chat_completions",status="400"}', 0) >= 8,
                "/metrics counts the 400s")
        C.check(m.get("mlxrt_prompt_tokens_cached_total", 0) > 0, "/metrics counts reused prompt tokens")
    finally:
        problems = srv.stop()
        C.check(not problems, "orderly stop: " + ", ".join(problems))
    full_queue_and_stop(mlxrt, model)
    srv = Server(mlxrt, model, "-c", "512")
    try:
        s, _, d = srv.request("POST", "/v1/completions", body={
            "prompt": "one two one two one two", "max_tokens": 40, "temperature": 0, "ignore_eos": True})
        plain = json.loads(d)["choices"][0]["text"] if s == 200 else None
        C.check(plain is not None, "a plain greedy completion (%d %s)" % (s, d[:200]))
    finally:
        srv.stop()
    speculative(mlxrt, model, plain)
    return C.end()


if __name__ == "__main__":
    sys.exit(main())
