"""The bench loads every input its stages will read before any runtime starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from suite import bench
from suite.errors import SuiteError
from suite.paths import PROMPTS_DIR
from suite.stages import STAGES, gate_models


def _broken_gate_dir(tmp_path: Path) -> Path:
    d = tmp_path / "gate"
    shutil.copytree(PROMPTS_DIR / "gate", d)
    (d / "short-open.toml").write_text('id = "short-open"\nversion = 1\nmax_tokens = "many"\nprompt = "x"\n')
    return d


def test_a_broken_gate_prompt_stops_the_bench_before_any_runtime_starts(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gate_models, "GATE_DIR", _broken_gate_dir(tmp_path))
    started: list[str] = []
    monkeypatch.setattr(bench.session, "start_with_determinism", lambda *a, **k: started.append("start") or 1 / 0)
    with pytest.raises(SuiteError) as err:
        bench.run_bench(bench.BenchRequest.build(model="tiny", arms=["llamacpp"], launcher="local", profile="quick", stages=["gate"], results=tmp_path / "results"))
    assert "short-open.toml" in str(err.value) and "max_tokens" in str(err.value)
    assert started == [] and not (tmp_path / "results").exists()


def test_the_restarts_stage_checks_the_same_prompt_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gate_models, "GATE_DIR", _broken_gate_dir(tmp_path))
    profile = bench.plan_arms_profile("quick")
    with pytest.raises(SuiteError, match="short-open.toml"):
        bench.preflight(["latency", "restarts"], profile)
    bench.preflight(["latency"], profile.model_copy(update={"stage_settings": {"controls": {"auto": False}, "reloads": {"launches": 0}}}))


def test_every_stage_that_reads_files_says_which() -> None:
    readers = {name for name, s in STAGES.items() if s.inputs is not None}
    assert readers == {"gate", "restarts", "sessions", "controls", "extraction", "reloads", "batch"}
