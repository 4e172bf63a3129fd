"""A determinism mode refused on this machine is remembered (suite.refusals): a real llama-server
given a control it rejects at start-up refuses it once; the next start of the same configuration
skips the mode and records the refusal with the run it was seen in; --retry-refused tries again;
another configuration is tried afresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite import bench, refusals
from suite.definitions import Control
from tests.conftest import installed_definition


@pytest.fixture
def refusing_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(refusals, "_path", lambda: tmp_path / "refusals.json")
    definition = installed_definition("llamacpp")
    strict = Control(description="an option this build does not know", args=["--no-such-option"],
                     refused_patterns=[r"invalid argument"])
    definition = definition.model_copy(update={"controls": {**definition.controls, "strict": strict},
                                               "determinism_control": "strict"})
    (plan,) = bench.plan_arms("tiny", ["llamacpp"], "local", "quick")
    plan.runtime = definition
    return plan


def _start(plan, log_dir: Path):
    log_dir.mkdir(parents=True)
    rt, spec, det = bench.start_with_determinism(plan, log_dir, [])
    with rt:
        assert rt.alive()  # the default mode serves
    return spec, det


def test_a_refused_mode_is_tried_once_per_configuration(refusing_plan, tmp_path: Path) -> None:
    spec, first = _start(refusing_plan, tmp_path / "one")
    assert first.outcome == "refused" and first.known_from is None and "invalid argument" in (first.error_line or "")
    assert (tmp_path / "one" / "runtime-strict.log").exists() and spec.controls == []
    (key,) = refusals._load()
    refusals.remember(key, refusals.known(key).model_copy(update={"run_id": "run-one"}))

    _, second = _start(refusing_plan, tmp_path / "two")
    assert not (tmp_path / "two" / "runtime-strict.log").exists()  # not started again
    assert second.outcome == "refused" and second.known_from == "run-one"
    assert second.error_line == first.error_line

    refusing_plan.retry_refused = True
    _, third = _start(refusing_plan, tmp_path / "three")
    assert (tmp_path / "three" / "runtime-strict.log").exists() and third.known_from is None

    refusing_plan.retry_refused = False
    other = refusing_plan.runtime.controls["strict"].model_copy(update={"args": ["--no-such-option", "1"]})
    refusing_plan.runtime = refusing_plan.runtime.model_copy(
        update={"controls": {**refusing_plan.runtime.controls, "strict": other}})
    _, fourth = _start(refusing_plan, tmp_path / "four")  # another configuration: tried afresh
    assert (tmp_path / "four" / "runtime-strict.log").exists() and fourth.known_from is None
    assert len(refusals._load()) == 2


def test_an_unreadable_memory_is_tried_afresh(refusing_plan, tmp_path: Path) -> None:
    (tmp_path / "refusals.json").write_bytes(b"\xff not json")
    _, det = _start(refusing_plan, tmp_path / "one")
    assert det.outcome == "refused" and (tmp_path / "one" / "runtime-strict.log").exists()
    assert len(refusals._load()) == 1  # rewritten
