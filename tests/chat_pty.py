#!/usr/bin/env python3
"""Drives `mlxrt chat` through a pseudo-terminal like a person: three turns, a Ctrl-C in the
middle of a long answer, then /exit. Checks that every turn answers, that turns 2 and 3 do not
re-process the earlier turns (the cache is reused), and that Ctrl-C stops only the answer.
Usage: chat_pty.py MLXRT MODEL_DIR"""
import os, pty, re, select, sys, time

mlxrt, model = sys.argv[1], sys.argv[2]
STAT = re.compile(rb"\[prompt: (\d+) new of (\d+) tokens[^\]]*\]")

pid, fd = pty.fork()
if pid == 0:
    os.execv(mlxrt, [mlxrt, "chat", "-m", model, "--temp", "0", "-n", "24", "--backend", "cpu"])

buf = b""


def read_until(pattern, timeout):
    global buf
    end = time.time() + timeout
    while time.time() < end:
        m = pattern.search(buf)
        if m:
            out, buf = buf[: m.end()], buf[m.end():]
            return out, m
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            buf += data
    sys.stdout.write(buf.decode(errors="replace"))
    raise SystemExit(f"FAIL: timed out waiting for {pattern.pattern!r}")


checks = failures = 0


def check(cond, what):
    global checks, failures
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", what)


PROMPT = re.compile(rb"> ")
read_until(PROMPT, 120)
stats = []
for line in ["What is the capital of France?", "And of Italy?", "Name one famous dish from there."]:
    os.write(fd, line.encode() + b"\n")
    out, m = read_until(STAT, 300)
    new, total = int(m.group(1)), int(m.group(2))
    stats.append((new, total))
    print(f"turn {len(stats)}: processed {new} of {total} prompt tokens")
    read_until(PROMPT, 60)
check(stats[1][1] > stats[0][1] and stats[2][1] > stats[1][1], "the conversation grows turn by turn")
check(stats[1][0] < stats[1][1] - stats[0][1] + 8,
      f"turn 2 processed {stats[1][0]} tokens: it must not re-process turn 1 ({stats[0][1]} tokens)")
check(stats[2][0] < stats[2][1] - stats[1][1] + 8, "turn 3 reuses turns 1 and 2")

# Ctrl-C during a long answer stops the answer, not the program
os.write(fd, b"Write a very long story about a dragon.\n")
time.sleep(0.3)  # the line is read; the answer is being prepared
os.write(fd, b"\x03")
out, m = read_until(STAT, 120)
check(b"interrupted" in out, "Ctrl-C stops the answer and says so")
read_until(PROMPT, 60)
os.write(fd, b"/exit\n")
_, status = os.waitpid(pid, 0)
check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "chat exits 0 after /exit")
print(f"{checks - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
