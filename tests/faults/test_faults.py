"""Faults mid-run keep what was measured: real runtimes of the tiny model killed, the suite killed,
the results folder full.

- the runtime killed (its process, by pid) in the middle of the gate: the arm is recorded as
  failed at request k with the k answers kept, and the bench goes on with the next arm;
- the suite killed with SIGKILL in the middle of a stage: `--resume` continues from the last
  finished stage, and the record reads as one run (the interrupted stage's request lines are
  set aside, not mixed with the resumed ones);
- the results folder on a full disk (a small tmpfs): one line, exit 2, no half-written file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _llama_servers(exclude: set[int] = frozenset()) -> list[psutil.Process]:
    """Every llama-server on this machine, but those in `exclude` (other tests' session fixtures).

    All processes, not only this one's children: a runtime whose suite was killed is re-parented.
    """
    out = []
    for p in psutil.process_iter():
        try:
            if p.pid not in exclude and p.status() != psutil.STATUS_ZOMBIE and "llama-server" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass  # gone, or a zombie being reaped
    return out


@pytest.fixture
def others() -> set[int]:
    """llama-servers already running for other tests (session fixtures): never touched here."""
    return {p.pid for p in _llama_servers()}


def _lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def test_runtime_killed_mid_gate_is_a_failed_arm_with_its_answers(tmp_path: Path, tiny_gguf: Path,
                                                                  others: set[int]) -> None:
    from conftest import installed_definition
    from suite.bench import BenchRequest, run_bench

    installed_definition("llamacpp")
    installed_definition("llamacpp-python")
    killed: list[int] = []

    def kill_after_two_answers() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for req in tmp_path.glob("tiny/llamacpp/*/requests.jsonl"):
                if sum(1 for r in _lines(req) if r["kind"] == "gate") >= 2:
                    for p in _llama_servers(others):
                        killed.append(p.pid)
                        os.kill(p.pid, signal.SIGKILL)
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_after_two_answers, daemon=True)
    watcher.start()
    first, second = run_bench(BenchRequest.build(model="tiny", arms=["llamacpp", "llamacpp-python"], launcher="local", profile="quick", stages=["gate", "latency"], results=tmp_path))
    watcher.join(timeout=5)
    assert killed, "the test never saw the gate's answers"
    assert first.status == "failed"
    # killed from outside (by pid, SIGKILL): named by its signal, where it happened, and how far the stage got
    assert first.reason.startswith("the runtime was killed by SIGKILL during stage gate after ")
    assert "of 5 requests" in first.reason
    assert first.failure is not None and first.failure.signal == "SIGKILL" and first.failure.stage == "gate"
    gate = first.gate
    (p,) = gate.prompts
    assert 2 <= p.answered < 5  # the answers before the kill are kept ...
    run_dir = next(tmp_path.glob("tiny/llamacpp/*"))
    assert sum(1 for r in _lines(run_dir / "requests.jsonl") if r["kind"] == "gate" and not r.get("error")) \
        == p.answered
    assert first.latency is None  # ... and nothing ran on a dead runtime
    assert second.status == "complete", second.reason  # the bench went on with the next arm


def test_suite_killed_mid_stage_resumes_as_one_run(tmp_path: Path, tiny_gguf: Path, others: set[int]) -> None:
    from conftest import installed_definition

    installed_definition("llamacpp")
    env = {**os.environ, "RESULTS": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "suite.cli", "bench", "--model", "tiny", "--arms", "llamacpp", "--profile", "quick",
           "--stages", "gate,latency,extraction", "--launcher", "local"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            reqs = list(tmp_path.glob("tiny/llamacpp/*/requests.jsonl"))
            if reqs and any(r["kind"] == "extraction" for r in _lines(reqs[0])):
                break  # gate and latency are done, the extraction is under way
            time.sleep(0.1)
        else:
            pytest.fail("the bench never reached the extraction")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    run_dir = next(tmp_path.glob("tiny/llamacpp/*"))
    assert not (run_dir / "summary.json").exists()
    assert not (run_dir / "stages" / "extraction.json").exists()
    interrupted = [r for r in _lines(run_dir / "requests.jsonl") if r["kind"] == "extraction"]
    assert interrupted

    out = subprocess.run(cmd + ["--resume"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete", summary["reason"]
    lines = _lines(run_dir / "requests.jsonl")
    assert sum(1 for r in lines if r["kind"] == "gate") == 5  # the gate ran once
    sections, repeats = summary["extraction"]["sections"], summary["extraction"]["repeats"]
    assert sum(1 for r in lines if r["kind"] == "extraction") == sections * repeats  # one extraction, whole
    aside = _lines(run_dir / "requests-interrupted.jsonl")
    assert len([r for r in aside if r.get("kind") == "extraction"]) == len(interrupted)
    assert not _llama_servers(others)


def test_full_results_disk_is_one_line_and_no_corrupt_file(tmp_path: Path, tiny_gguf: Path,
                                                           others: set[int]) -> None:
    from conftest import installed_definition

    installed_definition("llamacpp")
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("this machine does not allow mounting a tmpfs")
    try:
        # Leave room for the run folder's start and a few requests, not for the whole gate.
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        (mnt / "filler").write_bytes(b"\0" * (free - 24 * 1024))
        env = {**os.environ, "RESULTS": str(mnt)}
        out = subprocess.run([sys.executable, "-m", "suite.cli", "bench", "--model", "tiny", "--arms", "llamacpp",
                              "--profile", "quick", "--stages", "gate,latency", "--launcher", "local"],
                             env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert out.returncode == 2, out.stdout + out.stderr
        errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "No space left on device" in errors[0], out.stderr
        assert "Traceback" not in out.stderr
        for f in mnt.rglob("*"):
            if f.is_file() and f.suffix == ".json":
                json.loads(f.read_text())  # every JSON file there is whole
            if f.name == "requests.jsonl":
                assert all(json.loads(ln) for ln in f.read_text().splitlines())  # no torn line
        assert not _llama_servers(others)
    finally:
        subprocess.run(["umount", "-l", str(mnt)])
