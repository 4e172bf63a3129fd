"""The stages a bench runs, in order, for every profile and flag: the stages the run asks for, batch
composition right after the gate where the profile asks for it, reloads right after extraction,
the control matrix at the end when the gate found more than one answer (and the profile adds it),
and the preflight's files for every stage that may run. No runtime starts: the stages are
stand-ins that say they ran."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pytest

from suite import bench
from suite.profiles import PROFILES
from suite.profiles import Profile
from suite.stages import ORDER, STAGES, with_stage_settings
from suite.stages.batch import settings as batch_settings
from suite.stages.controls import settings as controls_settings
from suite.stages.extraction.reloads import settings as reloads_settings

# the batch-composition stage asked for, as `--batch-composition` gives it (its own settings)
BATCH_ON = {"batch": {"composition": True}}


class _Record:
    def __init__(self, done: dict[str, Any]):
        self.done = done

    def stage_done(self, name: str) -> bool:
        return name in self.done

    def read_stage(self, name: str) -> Any:
        return self.done[name]

    def write_stage(self, name: str, result: Any) -> None:
        pass


class _Meter:
    def __init__(self, *args: Any, **kwargs: Any):
        pass

    def __enter__(self) -> "_Meter":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def result(self, *args: Any) -> None:
        return None


def _profile(name: str, **update: Any) -> Profile:
    """A profile with these settings changed, a stage's named as it was a profile field (`reloads`)."""
    return Profile.model_validate(with_stage_settings({**PROFILES[name].model_dump(), **update}))


def _scheduled(monkeypatch: pytest.MonkeyPatch, profile_name: str, stages: list[str], *, reproducible: bool = True,
               done: dict[str, Any] | None = None, **update: Any) -> tuple[list[str], bool]:
    """The stages `BenchSession.run` runs (stand-ins), and whether it added the control matrix itself."""
    profile = _profile(profile_name, **update)
    ran: list[str] = []

    def fake(name: str) -> Any:
        real = STAGES[name]

        def run(ctx: Any) -> Any:
            ran.append(name)
            return SimpleNamespace(reproducible=reproducible)

        return SimpleNamespace(name=name, fresh_runtimes=real.fresh_runtimes, run=run, runner=lambda: run,
                               requests_for=lambda p: None)

    monkeypatch.setattr(bench.session, "get_stage", fake)
    monkeypatch.setattr(bench.session.gpu, "EnergyMeter", _Meter)
    monkeypatch.setattr(bench.session, "ContentionMeter", _Meter)
    monkeypatch.setattr(bench.session.progress, "stage", lambda *a, **k: contextlib.nullcontext())
    session = object.__new__(bench.BenchSession)
    session.plan = SimpleNamespace(profile=profile, arm_name="a", launcher=SimpleNamespace(
        starts_runtimes=True, runs_children=False))
    session.ctx = SimpleNamespace(results={}, reproducible=None, profile=profile, output_tokens={}, stage="",
                                  automatic_controls=False)
    session.record = _Record(done or {})
    session.runtime = SimpleNamespace(alive=lambda: True, stop=lambda: None, log_path=None)
    session.watchdog = SimpleNamespace(tripped=False)
    session.summary = SimpleNamespace(contention={}, energy={}, stage_s={})
    session.not_run = []
    session.status, session.reason = "complete", None
    session.run(stages)
    assert session.status == "complete", session.reason
    return ran, session.ctx.automatic_controls


def test_the_bench_order():
    assert ORDER == ["gate", "latency", "extraction", "restarts"]


@pytest.mark.parametrize("profile, reproducible, expected, automatic", [
    ("quick", True, ["gate", "latency", "extraction", "restarts"], False),
    ("quick", False, ["gate", "latency", "extraction", "restarts"], False),  # quick adds no controls
    ("standard", True, ["gate", "latency", "extraction", "restarts"], False),
    ("standard", False, ["gate", "latency", "extraction", "restarts", "controls"], True),
    ("full", True, ["gate", "batch", "latency", "extraction", "restarts"], False),
    ("full", False, ["gate", "batch", "latency", "extraction", "restarts", "controls"], True),
])
def test_a_bench_by_profile(monkeypatch, profile, reproducible, expected, automatic):
    assert _scheduled(monkeypatch, profile, list(ORDER), reproducible=reproducible) == (expected, automatic)


@pytest.mark.parametrize("profile", ["quick", "standard", "full"])
@pytest.mark.parametrize("reproducible", [True, False])
def test_flags(monkeypatch, profile, reproducible):
    auto = controls_settings(PROFILES[profile]).auto and not reproducible
    tail = ["controls"] if auto else []
    ran, _ = _scheduled(monkeypatch, profile, list(ORDER), reproducible=reproducible, stage_settings=BATCH_ON)
    assert ran == ["gate", "batch", "latency", "extraction", "restarts", *tail]
    ran, _ = _scheduled(monkeypatch, profile, list(ORDER), reproducible=reproducible, reloads=2)
    batch = ["batch"] if batch_settings(PROFILES[profile]).composition else []
    assert ran == ["gate", *batch, "latency", "extraction", "reloads", "restarts", *tail]
    ran, _ = _scheduled(monkeypatch, profile, list(ORDER), reproducible=reproducible, reloads=2,
                        stage_settings=BATCH_ON, auto_controls=True)
    assert ran == ["gate", "batch", "latency", "extraction", "reloads", "restarts",
                   *(["controls"] if not reproducible else [])]
    ran, _ = _scheduled(monkeypatch, profile, list(ORDER), reproducible=reproducible, auto_controls=False)
    assert "controls" not in ran


@pytest.mark.parametrize("stages, update, reproducible, expected", [
    # without the gate, batch composition runs first
    (["latency"], {"stage_settings": BATCH_ON}, True, ["batch", "latency"]),
    (["extraction", "gate"], {"stage_settings": BATCH_ON, "reloads": 1}, False,
     ["extraction", "reloads", "gate", "batch", "controls"]),
    # reloads need extraction
    (["gate", "latency"], {"reloads": 3}, True, ["gate", "latency"]),
    # stages asked for are not added twice
    (["gate", "batch", "latency"], {"stage_settings": BATCH_ON}, True, ["gate", "batch", "latency"]),
    (["extraction", "reloads", "latency"], {"reloads": 1}, True, ["extraction", "reloads", "latency"]),
    (["gate", "controls", "latency"], {"auto_controls": True}, False, ["gate", "controls", "latency"]),
    # --controls puts the matrix after the gate (the cli does); a varied gate adds nothing more
    (["gate", "controls", "latency", "extraction", "restarts"], {}, False,
     ["gate", "controls", "latency", "extraction", "restarts"]),
    (["sessions"], {"stage_settings": BATCH_ON, "reloads": 1}, False, ["batch", "sessions"]),
])
def test_stages_asked_for(monkeypatch, stages, update, reproducible, expected):
    ran, _ = _scheduled(monkeypatch, "standard", stages, reproducible=reproducible, **update)
    assert ran == expected


def test_a_continued_run_adds_no_controls_for_a_gate_it_already_has(monkeypatch):
    done = {"gate": SimpleNamespace(reproducible=False)}
    ran, automatic = _scheduled(monkeypatch, "standard", list(ORDER), reproducible=False, done=done)
    assert ran == ["latency", "extraction", "restarts"] and not automatic


@pytest.mark.parametrize("profile", ["quick", "standard", "full"])
@pytest.mark.parametrize("update, extra", [
    ({}, None),
    ({"stage_settings": BATCH_ON}, {"batch"}),
    ({"reloads": 2}, {"reloads"}),
    ({"auto_controls": True}, {"controls"}),
    ({"auto_controls": False, "stage_settings": {"batch": {"composition": False}}, "reloads": 0}, set()),
])
def test_preflight_reads_every_stage_that_may_run(monkeypatch, profile, update, extra):
    prof = _profile(profile, **update)
    checked: list[str] = []
    monkeypatch.setattr(bench.startup, "get_stage", lambda name: SimpleNamespace(inputs=lambda p: checked.append(name),
                                                                                 settings_for=lambda p: None))
    bench.preflight(["latency"], prof)
    expected = {"latency"}
    expected |= {"controls"} if controls_settings(prof).auto else set()
    expected |= {"reloads"} if reloads_settings(prof).launches > 0 else set()
    expected |= {"batch"} if batch_settings(prof).composition else set()
    if extra:
        assert extra <= expected
    assert checked[0] == "latency" and set(checked) == expected and len(checked) == len(expected)


@pytest.mark.parametrize("stages, expected", [
    (list(ORDER), ["gate", "controls", "latency", "extraction", "restarts"]),
    (["latency", "gate"], ["latency", "gate", "controls"]),
    (["latency"], ["controls", "latency"]),  # without the gate: first
    (["gate", "controls"], ["gate", "controls"]),  # asked for already: not twice
])
def test_controls_asked_for_go_right_after_the_gate(stages, expected):
    from suite.stages import place

    assert place(stages, "controls") == expected


@pytest.mark.parametrize("args, expected", [
    (["bench", "--controls", "all"], ["gate", "controls", "latency", "extraction", "restarts"]),
    (["bench", "--stages", "latency,gate", "--controls", "all"], ["latency", "gate", "controls"]),
    (["bench", "--stages", "latency", "--controls", "all"], ["controls", "latency"]),
    (["bench", "--stages", "latency,extraction"], ["latency", "extraction"]),
    (["gate"], ["gate"]),
    (["gate", "--controls", "all"], ["gate", "controls"]),
    (["study", "sessions", "--sessions", "2", "--replicates", "2"], ["sessions"]),
])
def test_the_stages_the_command_line_asks_for(monkeypatch, args, expected):
    from typer.testing import CliRunner

    from suite import cli

    asked: list[list[str]] = []

    def run_bench(request: Any, **kwargs: Any) -> list[Any]:
        asked.append(list(request.stages))
        return []

    monkeypatch.setattr(bench, "run_bench", run_bench)
    CliRunner().invoke(cli.app, args)
    assert asked == [expected]
