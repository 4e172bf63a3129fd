"""`suite bench --ray` on a real Ray cluster on this machine: a head and a second node, each a
separate `ray start` (its own process group), each advertising one `suite_host`.

Two arms of the tiny model run on different nodes at the same time and land in the driver's
results folder and on the site; losing a node mid-arm leaves no half record (the arm is retried
on the other node, or recorded as failed with the reason); Ctrl-C on the driver leaves no runtime.
Runtimes started here are told apart from anyone else's by an env marker the nodes pass down.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from suite.launchers.base import free_port
from suite.records import iter_run_dirs, load_summary

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")

BIN = Path(sys.executable).parent
RAY = BIN / "ray"
SUITE = BIN / "suite"
MARK = f"suite-ray-test-{uuid.uuid4().hex[:8]}"
ARMS = "llamacpp,llamacpp-python"
RUNTIME_NAMES = ("llama-server", "llama_cpp.server")


ROOT = Path(__file__).resolve().parents[2]


def _env(node: str) -> dict[str, str]:
    # the checkout under test first on every node's and the driver's path (not the installed one)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "SUITE_NODE_NAME": node, "SUITE_RAY_TEST": MARK, "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONPATH": path}


class Cluster:
    """A head and worker nodes started with `ray start`, each in its own session (process group)."""

    def __init__(self) -> None:
        self.temp = Path(tempfile.mkdtemp(prefix="sray-", dir="/tmp"))  # short: socket paths are limited
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.groups: dict[str, int] = {}

    def _raylets(self) -> set[int]:
        out = set()
        for p in psutil.process_iter(["name", "cmdline"]):
            cmd = p.info["cmdline"] or []
            if cmd and cmd[0].endswith("/raylet") and any(str(self.temp) in c for c in cmd):
                out.add(p.pid)
        return out

    def start(self, name: str, head: bool = False) -> None:
        before = self._raylets()
        common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--resources", '{"suite_host": 1}',
                  "--object-store-memory", str(80 * 2**20), "--labels", f"node={name}", "--disable-usage-stats"]
        where = (["--head", "--port", str(self.port), "--include-dashboard=false", "--temp-dir", str(self.temp)]
                 if head else ["--address", self.address])
        subprocess.run([str(RAY), "start", *where, *common], env=_env(name), check=True, capture_output=True,
                       timeout=120, start_new_session=True)
        new = self._raylets() - before
        assert len(new) == 1, f"expected one new raylet, found {new}"
        pgid = os.getpgid(new.pop())
        assert pgid != os.getpgrp()
        self.groups[name] = pgid

    def kill(self, name: str) -> None:
        """The node is lost: its raylet's whole process group (raylet, agents, workers) killed."""
        os.killpg(self.groups.pop(name), signal.SIGKILL)

    def stop(self) -> None:
        subprocess.run([str(RAY), "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    from suite.definitions import get_definition
    from suite.launchers.local import is_installed

    for name in ("llamacpp", "llamacpp-python"):
        if not is_installed(get_definition(name)):
            pytest.skip(f"runtime {name} is not installed here (run `suite setup`)")
    c = Cluster()
    try:
        c.start("head", head=True)
        c.start("node2")
        yield c
    finally:
        c.stop()


def our_runtimes() -> list[psutil.Process]:
    """llama-server / llama_cpp.server processes started by this test's nodes (still running)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if any(n in cmd for n in RUNTIME_NAMES) and p.environ().get("SUITE_RAY_TEST") == MARK \
                    and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def wait_no_runtimes(timeout_s: float = 20) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while (left := our_runtimes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


class Driver:
    """`suite bench --ray` as a child process, its output read line by line."""

    def __init__(self, cluster: Cluster, results: Path, *extra: str):
        self.lines: list[str] = []
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [str(SUITE), "bench", "--ray", cluster.address, "--model", "tiny", "--profile", "quick",
             "--stages", "gate", "--arms", ARMS, "--results", str(results), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env("driver"),
            cwd=Path(__file__).resolve().parents[2])

    def wait_for(self, predicate, timeout_s: float = 120) -> str:
        """Read lines until one satisfies `predicate`; return it."""
        deadline = time.monotonic() + timeout_s
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                line = self.proc.stdout.readline()
                if line == "":
                    break
                self.lines.append(f"{time.monotonic() - self.t0:6.1f} {line.rstrip()}" if os.environ.get("RAYTEST_DEBUG") else line.rstrip("\n"))
                if predicate(self.lines[-1]):
                    return self.lines[-1]
        raise AssertionError("no such line; driver said:\n" + "\n".join(self.lines[-60:]))

    def finish(self, timeout_s: float = 240) -> int:
        out, _ = self.proc.communicate(timeout=timeout_s)
        self.lines += out.splitlines()
        self.wall_s = time.monotonic() - self.t0
        return self.proc.returncode

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def runs(results: Path) -> list[tuple[Path, dict]]:
    return [(d, json.loads((d / "ray.json").read_text())) for d in iter_run_dirs(results)]


def assert_nothing_half_written(results: Path) -> None:
    for d in iter_run_dirs(results):
        assert (d / "summary.json").is_file(), f"{d}: a run folder without its summary"
    assert not (results / ".incoming").exists() or not any((results / ".incoming").iterdir())


BROKEN_GATE = """\
import pathlib
import sys

from suite.stages import gate_models

gate_models.GATE_DIR = pathlib.Path(sys.argv.pop(1))  # the gate prompts this process reads
from suite.cli import main

sys.argv[0] = "suite"
main()
"""


def test_both_drivers_refuse_a_broken_prompt_file_with_one_line_before_any_runtime_starts(cluster, tmp_path):
    """The same broken gate prompt file: the local bench and `--ray` say the same one line, exit 2,
    and start nothing (no runtime here or on a node, no task, no record)."""
    gate = tmp_path / "gate"
    shutil.copytree(ROOT / "prompts" / "gate", gate)
    (gate / "short-open.toml").write_text('id = "short-open"\nversion = 1\nmax_tokens = "many"\nprompt = "x"\n')
    script = tmp_path / "suite_with_broken_gate.py"
    script.write_text(BROKEN_GATE)
    said = {}
    for driver, extra in (("local", []), ("ray", ["--ray", cluster.address])):
        results = tmp_path / f"results-{driver}"
        r = subprocess.run([sys.executable, str(script), str(gate), "bench", "--model", "tiny", "--profile", "quick",
                            "--stages", "gate", "--arms", ARMS, "--launcher", "local", "--results", str(results),
                            *extra], capture_output=True, text=True, env=_env("driver"), cwd=ROOT, timeout=300)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1, (driver, r.returncode, r.stdout + r.stderr)
        assert "short-open.toml" in lines[0] and "max_tokens" in lines[0], lines[0]
        assert not results.exists() and our_runtimes() == []
        said[driver] = lines[0]
    assert said["local"] == said["ray"]  # one start-up: the same check, the same words


def test_two_arms_on_two_nodes_at_once_land_in_results_and_site(cluster, tmp_path):
    results = tmp_path / "results"
    driver = Driver(cluster, results)
    try:
        rc = driver.finish()
    finally:
        driver.kill()
    assert rc == 0, driver.text
    print(f"two-arm quick bench on two nodes: {driver.wall_s:.1f} s")
    found = runs(results)
    assert len(found) == 2, driver.text
    summaries = {load_summary(d / "summary.json").arm: (load_summary(d / "summary.json"), place)
                 for d, place in found}
    assert set(summaries) == set(ARMS.split(","))
    assert all(s.status == "complete" for s, _ in summaries.values()), driver.text
    placements = [p for _, p in summaries.values()]
    assert placements[0]["node_id"] != placements[1]["node_id"], placements
    assert {s.signature.node for s, _ in summaries.values()} == {"head", "node2"}
    # The arms overlapped in time: each started before the other finished.
    a, b = placements
    assert a["started"] < b["finished"] and b["started"] < a["finished"], placements
    # Progress named the nodes and the stage, and the end state.
    assert "on node head" in driver.text and "on node node2" in driver.text
    assert "stage gate" in driver.text and "done on node" in driver.text
    assert_nothing_half_written(results)
    assert not wait_no_runtimes()

    from suite.site.publish import build_site

    site = tmp_path / "site"
    build_site(results, site)
    pages = "\n".join(p.read_text(errors="replace") for p in site.rglob("*.html"))
    for s, _ in summaries.values():
        assert s.run_id in pages
    assert "node (Ray)" in pages


def test_ctrl_c_on_the_driver_cancels_the_arms_and_leaves_no_runtime(cluster, tmp_path):
    results = tmp_path / "results"
    driver = Driver(cluster, results, "--gate-requests", "60")
    try:
        # Both arms running their gate on their nodes: both runtimes are up.
        driver.wait_for(lambda line: "stage gate" in line)
        driver.wait_for(lambda line: "stage gate" in line)
        assert len(our_runtimes()) >= 1
        driver.proc.send_signal(signal.SIGINT)
        rc = driver.finish(timeout_s=90)
    finally:
        driver.kill()
    if os.environ.get("RAYTEST_DEBUG"):
        print(driver.text, f"\nfinished at {time.monotonic() - driver.t0:.1f}")
    assert rc == 130, driver.text
    assert "cancelling" in driver.text
    left = wait_no_runtimes()
    assert not left, [" ".join(p.cmdline()) for p in left]
    assert_nothing_half_written(results)


def test_node_lost_mid_arm_is_retried_on_the_other_node(cluster, tmp_path):
    """Kill the second node while its arm runs: Ray retries the arm on the head; no half record."""
    results = tmp_path / "results"
    driver = Driver(cluster, results, "--gate-requests", "30")
    try:
        line = driver.wait_for(lambda line: "stage gate on node node2" in line)
        lost_arm = line.split(":", 1)[0].removeprefix("arm ").strip()
        cluster.kill("node2")
        rc = driver.finish()
    finally:
        driver.kill()
    assert rc == 0, driver.text
    assert_nothing_half_written(results)
    found = runs(results)
    assert len(found) == 2, driver.text
    by_arm = {load_summary(d / "summary.json").arm: (load_summary(d / "summary.json"), p) for d, p in found}
    summary, placement = by_arm[lost_arm]
    # Retried on the surviving node (attempt 2) and complete; or, if Ray gave up, failed with why.
    if summary.status == "complete":
        assert placement["node"] == "head" and placement["attempt"] == 2, placement
        assert "(attempt 2)" in driver.text
    else:
        assert summary.status == "failed" and "lost" in (summary.reason or ""), summary
    assert not wait_no_runtimes()
    cluster.start("node3")  # for any test after this one


def test_node_lost_without_retries_is_recorded_failed_with_the_reason(cluster, tmp_path):
    results = tmp_path / "results"
    if "node3" not in cluster.groups:
        cluster.start("node3")
    driver = Driver(cluster, results, "--gate-requests", "30", "--ray-retries", "0")
    try:
        line = driver.wait_for(lambda line: "stage gate on node node3" in line)
        lost_arm = line.split(":", 1)[0].removeprefix("arm ").strip()
        cluster.kill("node3")
        rc = driver.finish()
    finally:
        driver.kill()
    # an arm failed: the bench never reads as a pass (exit 3), the other arm's record kept
    assert rc == 3, driver.text
    assert "not measured:" in driver.text and "failed" in driver.text
    assert_nothing_half_written(results)
    by_arm = {load_summary(d / "summary.json").arm: load_summary(d / "summary.json") for d in iter_run_dirs(results)}
    assert by_arm[lost_arm].status == "failed"
    assert "the node running it was lost" in (by_arm[lost_arm].reason or "")
    failed_dir = results / "tiny" / lost_arm / by_arm[lost_arm].run_id
    assert sorted(p.name for p in failed_dir.iterdir()) == ["ray.json", "run.json", "summary.json"]
    assert not wait_no_runtimes()
