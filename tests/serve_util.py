"""Starting and stopping `mlxrt serve` for the tests (Python standard library only).

Server(binary, model, *args) starts it on a free port (--port 0, the port read from its start
line), waits for /health, and on stop() sends SIGTERM and checks an orderly exit: status 0 and
no sanitizer report on stderr. A tiny model for the fast tests: tiny_model(dir) pairs a random
fixture checkpoint with a small hand-made tokenizer (tests/fixtures).
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SANITIZER = re.compile(r"ERROR: (Address|Leak|Thread)Sanitizer|runtime error:|SUMMARY: \w+Sanitizer")


def tiny_model(dst, fixture="gemma3-text-bf16", tokenizer="small-a.json"):
    os.makedirs(dst, exist_ok=True)
    src = os.path.join(ROOT, "tests/fixtures/models", fixture)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(src, f), dst)
    # the checkpoint has more rows than the small tokenizer has ids: named fillers cover the rest,
    # so every id the model can produce decodes
    with open(os.path.join(ROOT, "tests/fixtures/tokenizer", tokenizer)) as f:
        tok = json.load(f)
    with open(os.path.join(src, "config.json")) as f:
        rows = json.load(f)["vocab_size"]
    vocab = tok["model"]["vocab"]
    used = set(vocab.values()) | {a["id"] for a in tok.get("added_tokens", [])}
    for i in range(rows):
        if i not in used:
            vocab["<filler%d>" % i] = i
    with open(os.path.join(dst, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    return dst


class Server:
    def __init__(self, binary, model, *args, env=None):
        self.log_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "mlxrt-serve-%d-%d.log" % (os.getpid(), id(self)))
        self.log = open(self.log_path, "w+")
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", *args],
                                     stdout=subprocess.DEVNULL, stderr=self.log, env=e)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError("mlxrt serve exited with %d:\n%s" % (self.proc.returncode, self.stderr()))
            m = re.search(r"on http://[^ ]*:(\d+) ", self.stderr())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.05)
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("mlxrt serve did not start:\n" + self.stderr())
        self.wait_health()

    def stderr(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_health(self, timeout=30):
        deadline = time.time() + timeout
        while True:
            try:
                status, _, _ = self.request("GET", "/health")
                if status == 200:
                    return
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("no /health answer")
            time.sleep(0.05)

    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def request(self, method, path, body=None, headers=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, dict(r.getheaders()), data
        finally:
            c.close()

    def metrics(self, headers=None):
        status, _, data = self.request("GET", "/metrics", headers=headers)
        assert status == 200, status
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self, timeout=60):
        """SIGTERM; returns the problems found (empty list: a clean exit)."""
        problems = []
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                problems.append("did not stop within %d s of SIGTERM" % timeout)
        err = self.stderr()
        if self.proc.returncode != 0:
            problems.append("exit status %d" % self.proc.returncode)
        if SANITIZER.search(err):
            problems.append("sanitizer report")
        if problems:
            sys.stderr.write("---- server stderr ----\n" + err[-20000:] + "\n")
        self.log.close()
        os.unlink(self.log_path)
        return problems


class Checker:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL: " + what, flush=True)
        return cond

    def end(self):
        print("%d checks, %d passed, %d failed" % (self.passed + self.failed, self.passed, self.failed))
        return 1 if self.failed else 0
