"""One-request smoke test of a freshly built llama.cpp runtime (standard library only).

    smoke.py MODEL LOG -- COMMAND...    start a server (COMMAND, with {port} and {model}), wait for
                                        /health, send one completion, stop it
    smoke.py MODEL LOG --python PY      load MODEL with llama-cpp-python in interpreter PY and
                                        complete one prompt

Prints one line: "smoke test: ok (...)" and exits 0, or "smoke test: failed: <cause>" and exits 1,
the cause naming a crash by its signal ("crashed: SIGSEGV (segmentation fault) 1.3 s after start").
The server gets the parent-death signal (Linux): it ends with the smoke test, however that ends.
"""

from __future__ import annotations

import ctypes
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

PROMPT = "The capital of France is"
DESCRIPTIONS = {"SIGSEGV": "segmentation fault", "SIGILL": "illegal instruction", "SIGABRT": "aborted",
                "SIGBUS": "bus error", "SIGFPE": "floating-point exception", "SIGKILL": "killed"}


def died(rc: int, elapsed: float, when: str) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name
        return f"crashed: {name} ({DESCRIPTIONS.get(name, 'signal')}) {elapsed:.1f} s after start{when}"
    return f"exited with status {rc} {elapsed:.1f} s after start{when}"


def tail(log: Path, n: int = 5) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return " | ".join(lines[-n:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the server's child between fork and exec (this script runs no other thread): SIGKILL
    when the smoke test ends (prctl PR_SET_PDEATHSIG), so a killed smoke test leaves no server."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def server(model: str, log: Path, command: list[str]) -> str | None:
    port = free_port()
    argv = [a.format(port=port, model=model) for a in command]
    t0 = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                return died(proc.returncode, time.monotonic() - t0, " (before it was ready)")
            if time.monotonic() - t0 > 120:
                return "not ready within 120 s"
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        body = json.dumps({"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "seed": 42}).encode()
        req = urllib.request.Request(base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                text = json.load(r)["choices"][0]["text"]
        except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
            time.sleep(0.5)
            if proc.poll() is not None:
                return died(proc.returncode, time.monotonic() - t0, " (at its first completion)")
            return f"the completion failed: {e}"
        print(f"smoke test: ok ({len(text)} characters in {time.monotonic() - t0:.1f} s: {text!r})")
        return None
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def in_python(model: str, log: Path, python: str) -> str | None:
    code = ("import sys, llama_cpp\n"
            "print('system_info: ' + llama_cpp.llama_print_system_info().decode(), flush=True)\n"
            "llm = llama_cpp.Llama(sys.argv[1], n_ctx=256, n_threads=2, seed=42, verbose=False)\n"
            f"out = llm({PROMPT!r}, max_tokens=8, temperature=0)\n"
            "print('text:', repr(out['choices'][0]['text']), flush=True)\n")
    t0 = time.monotonic()
    with log.open("w") as fh:
        rc = subprocess.call([python, "-c", code, model], stdout=fh, stderr=subprocess.STDOUT, timeout=300)
    if rc != 0:
        return died(rc, time.monotonic() - t0, "")
    print(f"smoke test: ok ({time.monotonic() - t0:.1f} s)")
    return None


def main(argv: list[str]) -> int:
    model, log = argv[0], Path(argv[1])
    if argv[2] == "--python":
        failure = in_python(model, log, argv[3])
    else:
        failure = server(model, log, argv[3:])
    if failure is None:
        return 0
    print(f"smoke test: failed: {failure}; last lines of {log}: {tail(log)}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
