"""suite/distributed.py without a cluster: landing shipped run folders write-once, what an arm
needs of a node, the node in the signature, and the one-line answer when Ray is missing."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from suite.distributed import (GPU_GB, INSTALL_HINT, SUITE_HOST, arm_requirements, feasible_nodes, land_run,
                               record_failed)
from suite.errors import SuiteError
from suite.records import iter_run_dirs, load_summary
from suite.probes import Hardware
from suite.signature import Signature, current_node, on_node


def _tar(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


RUN = "20260101T000000000000Z-abcdef12"


def test_land_run_moves_a_finished_folder_into_place_and_never_replaces_one(tmp_path):
    payload = _tar({f"{RUN}/run.json": "{}", f"{RUN}/summary.json": "{}", f"{RUN}/stages/gate.json": "{}"})
    dest = land_run(tmp_path, "tiny", "llamacpp", RUN, payload)
    assert dest == tmp_path / "tiny" / "llamacpp" / RUN
    assert (dest / "stages" / "gate.json").is_file()
    (dest / "summary.json").write_text('{"mine": 1}')
    with pytest.raises(SuiteError, match="never replaced"):
        land_run(tmp_path, "tiny", "llamacpp", RUN, payload)
    assert (dest / "summary.json").read_text() == '{"mine": 1}'
    assert not (tmp_path / ".incoming").exists()


def test_land_run_writes_nothing_for_an_unfinished_or_strange_folder(tmp_path):
    with pytest.raises(SuiteError, match="not a finished run"):
        land_run(tmp_path, "tiny", "llamacpp", RUN, _tar({f"{RUN}/run.json": "{}"}))
    with pytest.raises(SuiteError, match="outside the run folder"):
        land_run(tmp_path, "tiny", "llamacpp", RUN, _tar({"other/run.json": "{}", "other/summary.json": "{}"}))
    with pytest.raises(SuiteError, match="safe folder name"):
        land_run(tmp_path, "tiny", "..", RUN, _tar({f"{RUN}/run.json": "{}"}))
    assert iter_run_dirs(tmp_path) == []
    assert not (tmp_path / ".incoming").exists()


def test_a_failed_arm_is_a_complete_record_with_its_reason(tmp_path):
    s = record_failed(tmp_path, "tiny", "llamacpp", "llamacpp", "local", "quick", "2026-01-01T00:00:00Z",
                      "the node running it was lost", {"attempts": [{"node": "n2"}]})
    run_dir = tmp_path / "tiny" / "llamacpp" / s.run_id
    assert sorted(p.name for p in run_dir.iterdir()) == ["ray.json", "run.json", "summary.json"]
    loaded = load_summary(run_dir / "summary.json")
    assert loaded.status == "failed" and loaded.reason == "the node running it was lost"
    assert json.loads((run_dir / "ray.json").read_text())["attempts"] == [{"node": "n2"}]


class _Card:
    def __init__(self, gpu_memory_gb=None):
        self.gpu_memory_gb = gpu_memory_gb


class _Arm:
    def __init__(self, node_labels=None):
        self.node_labels = node_labels or {}


NODES = [
    {"NodeID": "a", "Alive": True, "Resources": {SUITE_HOST: 1.0, GPU_GB: 32.0}, "Labels": {"gpu": "RTX-5090"}},
    {"NodeID": "b", "Alive": True, "Resources": {SUITE_HOST: 1.0, GPU_GB: 141.0}, "Labels": {"gpu": "H200"}},
    {"NodeID": "c", "Alive": True, "Resources": {SUITE_HOST: 1.0}, "Labels": {}},
    {"NodeID": "d", "Alive": False, "Resources": {SUITE_HOST: 1.0, GPU_GB: 80.0}, "Labels": {"gpu": "H100"}},
    {"NodeID": "e", "Alive": True, "Resources": {"CPU": 8.0}, "Labels": {}},
]


def test_what_an_arm_needs_of_a_node():
    assert arm_requirements(_Card(), _Arm()) == ({SUITE_HOST: 1}, {})
    res, labels = arm_requirements(_Card(32), _Arm({"gpu": "in(RTX-5090,H200)"}))
    assert res == {SUITE_HOST: 1, GPU_GB: 32.0}
    assert feasible_nodes(NODES, *arm_requirements(_Card(), _Arm())) == ["a", "b", "c"]
    assert feasible_nodes(NODES, res, labels) == ["a", "b"]
    assert feasible_nodes(NODES, *arm_requirements(_Card(64), _Arm())) == ["b"]
    assert feasible_nodes(NODES, {SUITE_HOST: 1}, {"gpu": "!H200"}) == ["a", "c"]
    assert feasible_nodes(NODES, {SUITE_HOST: 1}, {"gpu": "B200"}) == []


def _sig(**extra) -> Signature:
    hw = Hardware(cpu="x", cores=2, memory_gb=24.0, os="Linux")
    return Signature(model="tiny", model_format="gguf", model_sha256=None, model_revision=None, runtime="llamacpp",
                     runtime_version="1", launcher="local", command=["llama-server"], env={}, controls=[],
                     prompt_set_hash="p", hardware=hw, **extra).with_digest()


def test_the_node_enters_the_signature_only_when_set():
    old = _sig()
    assert "node" not in old.model_dump(exclude_none=True)
    assert _sig(node=None).digest == old.digest  # records from before the field keep their digest
    assert _sig(node="gpu-box-2").digest != old.digest
    assert current_node() is None
    with on_node("gpu-box-2"):
        assert current_node() == "gpu-box-2"
    assert current_node() is None


def test_without_ray_the_ray_option_answers_one_line(tmp_path):
    code = ("import sys; sys.modules['ray'] = None; from suite.cli import main; "
            "sys.argv = ['suite', 'bench', '--ray', '127.0.0.1:1', '--results', sys.argv[1]]; main()")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [f"error: {INSTALL_HINT}"], out.stderr


def test_progress_prints_one_line_per_change_and_draws_a_table_on_a_terminal():
    from rich.console import Console

    from suite.distributed import Progress

    plain = io.StringIO()
    with Progress(Console(file=plain, force_terminal=False, width=200), ["a", "b"]) as p:
        p.update("a", detail="for a node with suite_host >= 1")
        p.apply({"arm": "a", "kind": "started", "node": "n1", "node_id": "x", "attempt": 1})
        p.apply({"arm": "a", "kind": "stage", "stage": "gate", "node": "n1"})
        p.apply({"arm": "a", "kind": "stage", "stage": "gate", "node": "n1"})  # no change: no line
        p.apply({"arm": "a", "kind": "started", "node": "n2", "node_id": "y", "attempt": 2})
        p.update("a", state="done", detail="complete")
    assert plain.getvalue().splitlines() == [
        "arm a: queued for a node with suite_host >= 1", "arm a: started on node n1",
        "arm a: stage gate on node n1", "arm a: started on node n2 (attempt 2)", "arm a: done on node n2: complete"]
    tty = io.StringIO()
    with Progress(Console(file=tty, force_terminal=True, width=120), ["a"]) as p:
        p.apply({"arm": "a", "kind": "stage", "stage": "latency", "node": "n1"})
    assert "latency" in tty.getvalue() and "n1" in tty.getvalue()


def test_an_address_where_no_cluster_answers_is_one_error_not_minutes_of_retries():
    from suite.distributed import check_reachable
    from suite.launchers.base import free_port

    with pytest.raises(SuiteError, match="no Ray cluster answers there"):
        check_reachable(f"127.0.0.1:{free_port()}")
    check_reachable("auto")  # left to Ray
