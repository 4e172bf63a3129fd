"""One typed `BenchRequest` for both drivers: built once by the command line, sent to Ray nodes as
JSON and rebuilt there typed (stage settings included); `--retry-refused` reaches a node's arm;
every stage's options come from the stage registry, with their help."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from suite import bench, distributed
from suite.errors import SuiteError
from suite.records import Summary
from suite.stages import STAGES
from suite.stages.batch import BatchSettings
from suite.stages.controls import ControlMatrixSettings
from suite.stages.extraction import ExtractionSettings


def _request(**fields: Any) -> bench.BenchRequest:
    return bench.BenchRequest.build(model="tiny", arms=["llamacpp"], launcher="local", profile="quick",
                                    stages=["gate"], **fields)


def test_the_request_travels_as_json_and_comes_back_typed(tmp_path: Path) -> None:
    request = _request(gate_requests=7, results=tmp_path, retry_refused=True, tags={"k": "v"},
                       stage_values={"batch": {"trials": 3, "sizes": [2, 4]}, "controls": {"names": ["all"]},
                                     "extraction": {"judge_url": "http://127.0.0.1:9/v1"}})
    again = bench.BenchRequest.model_validate_json(request.model_dump_json())
    assert again == request
    assert isinstance(again.settings["batch"], BatchSettings) and again.settings["batch"].trials == 3
    assert again.profile.gate_requests == 7 and again.retry_refused and again.results == tmp_path
    # what the run record leaves out (the judge's address, the rows asked for) still reaches a node
    controls, extraction = again.settings["controls"], again.settings["extraction"]
    assert isinstance(controls, ControlMatrixSettings) and controls.names == ["all"]
    assert isinstance(extraction, ExtractionSettings) and extraction.judge_url == "http://127.0.0.1:9/v1"
    assert "names" not in again.profile.stage_settings["controls"]
    assert "judge_url" not in again.profile.stage_settings["extraction"]
    # the profile's values for its stages, then the command line's
    assert again.profile.stage_settings["batch"] == {"composition": False, "trials": 3, "sizes": [2, 4],
                                                     "prompt": None}
    with pytest.raises(ValidationError, match="frozen"):
        request.resume = True  # type: ignore[misc]  # frozen


@pytest.mark.parametrize("fields, line", [
    ({"gate_requests": 1}, "--gate-requests 1: the gate needs at least 2 requests per prompt"),
    ({"stages": ["nope"]}, "--stages nope: not a stage"),
    ({"stage_values": {"batch": {"sizes": [1]}}, "options": {"batch": {"sizes": "--batch-sizes"}}},
     "--batch-sizes '1': must be 2 or more"),
])
def test_a_bad_value_is_one_line_when_the_request_is_built(fields: dict[str, Any], line: str) -> None:
    with pytest.raises(SuiteError) as err:
        bench.BenchRequest.build(model="tiny", **fields)
    assert line in str(err.value)


def _fake_ray(monkeypatch: pytest.MonkeyPatch) -> Any:
    class Remote:
        def remote(self, *a: Any, **k: Any) -> int:
            return 1

    fake = types.SimpleNamespace(get_runtime_context=lambda: types.SimpleNamespace(get_node_id=lambda: "n1"),
                                 get=lambda ref, timeout=None: 1)
    monkeypatch.setitem(sys.modules, "ray", fake)
    return types.SimpleNamespace(started=Remote(), report=Remote())


@pytest.mark.parametrize("retry", [True, False])
def test_retry_refused_reaches_the_arm_on_a_ray_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    retry: bool) -> None:
    """The node's plan carries --retry-refused, which `start_with_determinism` reads (a refusal
    this machine remembers is then started again: tests/launchers/test_refusals.py)."""
    board = _fake_ray(monkeypatch)
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    seen: list[bool] = []

    def arm(plan: Any, *a: Any, **k: Any) -> Summary:
        seen.append(plan.retry_refused)
        return Summary(run_id="-", model=plan.card.name, arm=plan.arm_name, runtime=plan.runtime.name,
                       launcher=plan.launcher.name, profile=plan.profile.name, started_at="x", status="skipped")

    monkeypatch.setattr(bench.runner, "run_arm", arm)
    request = _request(results=tmp_path / "results", retry_refused=retry)
    answer = distributed.run_arm_task(request.model_dump_json(), "llamacpp", board)
    assert seen == [retry] and answer["summary"]["status"] == "skipped"


def test_the_command_line_gives_the_ray_driver_the_whole_request(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    from suite import cli

    got: list[Any] = []
    monkeypatch.setattr(distributed, "run_bench_ray", lambda address, request, **k: got.append(request) or [])
    monkeypatch.setattr(cli, "_end_of_bench", lambda *a, **k: None)
    r = CliRunner().invoke(cli.app, ["bench", "--ray", "127.0.0.1:9", "--model", "tiny", "--arms", "llamacpp",
                                     "--profile", "quick", "--retry-refused", "--gate-requests", "3",
                                     "--batch-trials", "2", "--results", str(tmp_path)])
    assert r.exit_code == 0, r.output
    (request,) = got
    assert request.retry_refused and request.profile.gate_requests == 3
    assert request.settings["batch"].trials == 2  # typed, not a dict


def test_every_stage_option_is_in_the_help_with_its_help() -> None:
    from suite import cli

    r = CliRunner().invoke(cli.app, ["bench", "--help"], terminal_width=400)
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    options = [o for s in STAGES.values() for o in s.options]
    assert {o.name for o in options} >= {"--batch-sizes", "--restarts", "--reloads", "--concurrency", "--controls",
                                         "--auto-controls", "--judge-url", "--judge-model", "--batch-prompt"}
    for option in options:
        assert option.flag.replace("/", " / ") in text and " ".join(option.help.split()) in text, option.flag


def test_cli_bench_takes_at_most_15_parameters() -> None:
    import inspect

    from suite import cli

    assert len(inspect.signature(cli.bench).parameters) <= 15
    assert len(inspect.signature(bench.run_bench).parameters) <= 3
