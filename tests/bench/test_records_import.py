"""Reading records loads none of the measuring machinery: `suite.records`, the site's publishing,
the export and the comparison import the stages' record halves only (their results, settings,
views), never the client, the launchers, a stage's run half (`run.py`, `reloads_run`, `judge_run`,
`chat`, `inlaunch`) nor the request engine (`suite.stages.repeat`). A stage names its run as
"module:function" (`Stage.run`), imported when a bench runs it (`Stage.runner()`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from suite.errors import SuiteError
from suite.stages import STAGES, run_problem
from suite.stages.base import Stage

ROOT = Path(__file__).resolve().parents[2]

# The run half: what sends requests or starts runtimes.
RUN_HALF = re.compile(r"^suite\.(client|launchers)(\.|$)"
                      r"|^suite\.stages\.repeat$"
                      r"|^suite\.stages\.[a-z_]+\.(run|inlaunch|chat|judge_run|reloads_run)$")


def _loaded(module: str) -> list[str]:
    """The suite's modules a fresh interpreter has loaded after importing `module` alone."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(m for m in sys.modules if m.startswith('suite'))))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", ["suite.records", "suite.site.publish", "suite.export", "suite.compare"])
def test_reading_records_loads_no_client_launcher_or_run_half(module: str) -> None:
    loaded = _loaded(module)
    assert "suite.stages" in loaded  # the registry and every stage's record half are read
    assert [m for m in loaded if RUN_HALF.search(m)] == []


def test_the_pattern_names_the_run_half() -> None:
    for name in ("suite.client", "suite.client.aio", "suite.launchers.base", "suite.stages.repeat", "suite.stages.gate.run",
                 "suite.stages.controls.inlaunch", "suite.stages.extraction.judge_run", "suite.stages.extraction.reloads_run",
                 "suite.stages.extraction.chat"):
        assert RUN_HALF.search(name), name
    for name in ("suite.records", "suite.stages.gate_models", "suite.stages.controls.rows", "suite.stages.extraction.judge",
                 "suite.stages.extraction.reloads", "suite.stages.latency.result"):
        assert not RUN_HALF.search(name), name


def test_every_built_in_stage_names_its_run_in_its_own_folder() -> None:
    for stage in STAGES.values():
        if not isinstance(stage.run, str):
            continue  # a stage from another package may give the function itself
        module, function = stage.run_parts
        assert RUN_HALF.search(module), f"{stage.name}: {stage.run} is not a run-half module"
        assert run_problem(stage) is None
        assert (stage.folder / "__init__.py").is_file()
        assert callable(stage.runner())
        assert stage.runner().__name__ == function


def test_a_run_given_as_a_function_or_a_name() -> None:
    from pydantic import BaseModel

    def run(ctx: object) -> BaseModel:
        return BaseModel()

    given = Stage(name="probe", result=BaseModel, run=run, fresh_runtimes=False, in_bench=False, summary="a probe")
    assert given.runner() is run and given.folder == Path(__file__).parent and run_problem(given) is None
    named = Stage(name="probe", result=BaseModel, run="suite.stages.gate.run:run", fresh_runtimes=False, in_bench=False, summary="a probe")
    assert named.runner() is STAGES["gate"].runner() and named.folder == ROOT / "suite" / "stages" / "gate"
    for bad, problem in (("suite.stages.gate.run", "is not \"module:function\""), ("suite.nowhere:run", "no module 'suite.nowhere'")):
        stage = Stage(name="probe", result=BaseModel, run=bad, fresh_runtimes=False, in_bench=False, summary="a probe")
        assert problem in (run_problem(stage) or "")
    missing = Stage(name="probe", result=BaseModel, run="suite.stages.gate.run:nothing", fresh_runtimes=False, in_bench=False, summary="a probe")
    with pytest.raises(SuiteError, match="cannot load it"):
        missing.runner()
