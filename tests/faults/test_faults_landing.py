"""Ray landings that go wrong cost one arm, never the driver.

The payloads are what a broken or hostile node could send: members outside the run folder, a
relative symlink to a sibling run (tarfile's "data" filter lets it through), a cut archive, the
answer of a node on another suite version. The driver's collection step (`collect_arms`) runs with
Ray's real exception classes and a stand-in for `ray.get`; no cluster is started.
"""

from __future__ import annotations

import io
import json
import tarfile
import types
from pathlib import Path

import pytest

from suite import __version__
from suite.distributed import Progress, collect_arms, land_run
from suite.errors import SuiteError
from suite.records import Summary, iter_run_dirs

RUN = "20260101T000000000000Z-abcdef12"
SIBLING = "20251231T000000000000Z-00000000"


def _tar(members: list[tarfile.TarInfo | tuple[str, str]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
            else:
                data = m[1].encode()
                info = tarfile.TarInfo(m[0])
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


FINISHED = [(f"{RUN}/run.json", "{}"), (f"{RUN}/summary.json", "{}")]
BAD_PAYLOADS = {
    "relative symlink to a sibling run": _tar([*FINISHED, _link(f"{RUN}/requests.jsonl",
                                                                f"../{SIBLING}/requests.jsonl")]),
    "symlink out of the results": _tar([*FINISHED, _link(f"{RUN}/x", "/etc/passwd")]),
    "hard link": _tar([*FINISHED, _link(f"{RUN}/requests.jsonl", f"{RUN}/run.json", tarfile.LNKTYPE)]),
    "member outside the folder": _tar([*FINISHED, ("../../escape.json", "{}")]),
    "absolute member": _tar([*FINISHED, ("/tmp/abs.json", "{}")]),
    "another run's folder": _tar([*FINISHED, (f"{SIBLING}/requests.jsonl", "{}")]),
    "cut archive": _tar(FINISHED)[:40],
    "not gzip": b"PK\x03\x04 a zip, not a tar",
}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    sibling = tmp_path / "tiny" / "llamacpp" / SIBLING
    sibling.mkdir(parents=True)
    (sibling / "requests.jsonl").write_text('{"kind": "gate", "text": "the sibling\'s own"}\n')
    return tmp_path


@pytest.mark.fault
@pytest.mark.parametrize("case", list(BAD_PAYLOADS))
def test_a_bad_payload_is_one_line_and_nothing_lands(results: Path, case: str, fault_report) -> None:
    before = sorted(str(p.relative_to(results)) for p in results.rglob("*"))
    tracebacks = 0
    try:
        land_run(results, "tiny", "llamacpp", RUN, BAD_PAYLOADS[case])
        message = "landed"
    except SuiteError as exc:
        message = str(exc)
    except Exception as exc:  # noqa: BLE001 - counted: this aborted the driver before
        tracebacks, message = 1, f"{type(exc).__name__}: {exc}"
    after = sorted(str(p.relative_to(results)) for p in results.rglob("*"))
    sibling = (results / "tiny" / "llamacpp" / SIBLING / "requests.jsonl").read_text()
    fault_report(tracebacks=tracebacks, records_mixed=int(after != before),
                 records_lost=int("the sibling's own" not in sibling))
    assert tracebacks == 0, message
    assert message != "landed" and "\n" not in message and "nothing written" in message
    assert after == before, "something landed"


class _Ref:
    pass


def _collect_with(result, tmp_path: Path) -> tuple[Summary, str]:
    import ray

    from suite.bench import plan_arms

    plan = plan_arms("tiny", ["llamacpp"], "local", "quick")[0]
    console = __import__("rich.console", fromlist=["Console"]).Console(file=io.StringIO(), width=200)
    progress = Progress(console, ["llamacpp"])
    fake = types.SimpleNamespace(get=lambda ref: result, exceptions=ray.exceptions)
    summary = collect_arms(fake, _Ref(), plan, tmp_path, progress, "2026-01-01T00:00:00Z", 2)
    return summary, console.file.getvalue()


def _node_summary(**update) -> dict:
    s = Summary(run_id=RUN, model="tiny", arm="llamacpp", runtime="llamacpp", launcher="local", profile="quick",
                started_at="2026-01-01T00:00:00Z", status="complete")
    return {**s.model_dump(mode="json"), **update}


@pytest.mark.fault
@pytest.mark.parametrize("case", ["another suite version", "an older node without a version",
                                  "a summary of another schema", "a symlink in the run folder"])
def test_a_bad_answer_from_a_node_is_a_failed_arm_not_a_dead_driver(tmp_path: Path, case: str, fault_report) -> None:
    pytest.importorskip("ray")
    payload = _tar([(f"{RUN}/run.json", "{}"), (f"{RUN}/summary.json", "{}")])
    result = {"summary": _node_summary(), "tar": payload, "placement": {"node": "n2"}, "suite_version": __version__}
    if case == "another suite version":
        result["suite_version"] = "0.0.1"
    elif case == "an older node without a version":
        del result["suite_version"]
    elif case == "a summary of another schema":
        result["summary"] = {**_node_summary(), "status": "a-status-of-a-later-version", "gate": [1]}
    else:
        result["tar"] = BAD_PAYLOADS["relative symlink to a sibling run"]
    tracebacks = 0
    try:
        summary, _ = _collect_with(result, tmp_path)
    except Exception:  # noqa: BLE001 - counted: this ended the bench and every other arm before
        tracebacks, summary = 1, None
    landed = [d for d in iter_run_dirs(tmp_path) if d.name == RUN]
    fault_report(tracebacks=tracebacks, records_mixed=len(landed))
    assert summary is not None and summary.status == "failed" and summary.reason
    assert landed == [] and len(iter_run_dirs(tmp_path)) == 1, "one failed record, nothing from the node"
    record = json.loads((iter_run_dirs(tmp_path)[0] / "summary.json").read_text())
    assert record["status"] == "failed" and record["reason"] == summary.reason


def test_a_good_answer_still_lands(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    payload = _tar([(f"{RUN}/run.json", "{}"), (f"{RUN}/summary.json", "{}"), (f"{RUN}/requests.jsonl", "")])
    summary, _ = _collect_with({"summary": _node_summary(), "tar": payload, "placement": {"node": "n2"},
                                "suite_version": __version__}, tmp_path)
    assert summary.status == "complete" and (tmp_path / "tiny" / "llamacpp" / RUN / "requests.jsonl").is_file()


def test_a_node_on_another_version_refuses_the_task_before_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from suite import bench, distributed

    ran: list[str] = []
    monkeypatch.setattr(bench, "run_arm", lambda *a, **k: ran.append("arm"))
    request = {"arm": "llamacpp", "model": "tiny", "launcher": "local", "profile": "quick", "stages": ["gate"],
               "suite_version": "0.0.1"}
    with pytest.raises(SuiteError, match=f"this node runs suite {__version__}, the driver 0.0.1"):
        distributed.run_arm_task(request, board=None)
    assert ran == []
