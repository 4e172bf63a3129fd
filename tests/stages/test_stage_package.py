"""A stage added from another package: one module and one entry-point line, no file of the suite
touched. Its result reaches the run record and summary, its request lines are checked and kept,
`--resume` runs it where a run stopped before it, `suite export` writes its table and the model
page draws its section. Live: llama-server on the tiny model, in a child process (the registry is
read once, when the suite is imported)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suite.stages import STAGES

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''"""A stage from outside the suite: the first gate prompt sent twice, its answers counted."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from suite.analysis.claims import Claim
from suite.stages.base import ExportTable, Stage
from suite.stages.repeat import select_prompts
from suite.stages.lines import RequestLineBase


class ProbeLine(RequestLineBase):
    kind: Literal["probe"]
    index: int


class ProbeSettings(BaseModel):
    requests: int = Field(default=4, ge=1)
    max_tokens: int = 8


class ProbeResult(BaseModel):
    answers: list[str]
    distinct: int
    verdict: str


def run(ctx: Any) -> ProbeResult:
    prompt = select_prompts(ctx.profile.gate_prompts)[0]
    settings = STAGE.settings_for(ctx.profile)
    answers = []
    for i in range(settings.requests):
        c = ctx.client.complete(prompt.prompt, max_tokens=settings.max_tokens)
        ctx.record_request("probe", index=i, text=c.text, finish_reason=c.finish_reason,
                           completion_tokens=c.completion_tokens)
        answers.append(c.text)
    n = len(set(answers))
    return ProbeResult(answers=answers, distinct=n, verdict=f"probe verdict: {n} distinct of {len(answers)}")


def rows(r: ProbeResult) -> list[dict[str, Any]]:
    return [{"request": i, "answer_chars": len(a)} for i, a in enumerate(r.answers)]


def claims(r: ProbeResult, summary: Any) -> list[Claim]:
    # a claim that the answer varies, whatever the probe saw: the first screen must show it
    return [Claim(stage="probe", kind="package", arm=getattr(summary, "arm", ""), verdict="asked twice",
                  good=False, phrase=f"probe claim: {r.distinct} distinct of {len(r.answers)}", text=r.verdict)]


STAGE = Stage(name="probe", result=ProbeResult, run=run, fresh_runtimes=False, in_bench=False,
              summary="the first gate prompt twice, from a package of its own", lines=(ProbeLine,),
              tables=(ExportTable("probe", rows),), exported_requests=("probe",),
              page_title="probe", section="tables", claims=claims, first_screen="changes",
              settings=ProbeSettings, profiles={"quick": {"requests": 2}})
'''


def _package(where: Path, module: str, entry: str) -> Path:
    """An installed package on `where`: a module and its metadata with one entry point."""
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{module}.py").write_text(PROBE)
    meta = where / f"{module}-1.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n")
    (meta / "entry_points.txt").write_text(f"[suite.stages]\nprobe = {entry}\n")
    return where


def _suite(args: list[str], path: Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT)]), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout)


def _kinds(run: Path) -> list[str]:
    return [json.loads(line)["kind"] for line in (run / "requests.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.live
def test_a_stage_from_another_package_reaches_record_resume_export_and_page(tmp_path: Path) -> None:
    from conftest import installed_definition
    from suite.catalog import get_card, is_prepared

    installed_definition("llamacpp")
    if not is_prepared(get_card("tiny"), "gguf"):
        pytest.skip("the tiny GGUF is not prepared here (run `suite setup`)")
    plugin = _package(tmp_path / "plugin", "suite_probe_stage", "suite_probe_stage:STAGE")
    results = tmp_path / "results"
    bench = ["bench", "--model", "tiny", "--arms", "llamacpp", "--launcher", "local", "--profile", "quick",
             "--stages", "gate,probe", "--gate-requests", "2", "--no-auto-controls", "--results", str(results)]
    done = _suite(bench, plugin, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = (results / "tiny" / "llamacpp").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["probe"]["distinct"] in (1, 2) and len(summary["probe"]["answers"]) == 2  # quick: 2 requests
    assert (run / "stages" / "probe.json").exists()
    # its own settings, resolved for the profile, are recorded with the profile's
    settings = json.loads((run / "run.json").read_text())["profile_settings"]["stage_settings"]
    assert settings["probe"] == {"requests": 2, "max_tokens": 8}
    assert set(settings) == {"probe", *(name for name, stage in STAGES.items() if stage.settings is not None)}
    assert _kinds(run).count("probe") == 2

    # --resume: a run that stopped after its gate (no probe result, no summary) runs the probe only
    twin = run.with_name("20000101T000000000000Z-stopped")
    shutil.copytree(run, twin)
    (twin / "summary.json").unlink()
    (twin / "stages" / "probe.json").unlink()
    manifest = json.loads((twin / "run.json").read_text())
    (twin / "run.json").write_text(json.dumps({**manifest, "run_id": twin.name}))
    gate_lines = _kinds(twin).count("gate")
    resumed = _suite([*bench, "--resume"], plugin, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((twin / "summary.json").read_text())["probe"] is not None
    kinds = _kinds(twin)
    assert kinds.count("gate") == gate_lines and kinds.count("probe") == 2  # the gate was not sent again
    assert len(list((results / "tiny" / "llamacpp").iterdir())) == 2  # no third run

    # the export's table and request lines
    out = tmp_path / "export"
    exported = _suite(["export", "--results", str(results), "--format", "csv", "--out", str(out)], plugin, tmp_path)
    assert exported.returncode == 0, exported.stderr[-2000:]
    with (out / "probe.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 4 and {r["request"] for r in table} == {"0", "1"}
    with (out / "requests.csv").open() as fh:
        assert sum(r["kind"] == "probe" for r in csv.DictReader(fh)) == 4

    # the model page's section, drawn from the stage's declaration
    site = tmp_path / "site"
    built = _suite(["site", "--results", str(results), "--out", str(site)], plugin, tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    page = (site / "models" / "tiny.html").read_text()
    assert '<section id="stage-probe"' in page and "the first gate prompt twice, from a package of its own" in page
    assert "probe verdict:" in page and "answer_chars" in page
    # its claim reaches the first screen through the registry: "what changes it?" names it
    card = page[page.index('<div class="card arm-card" id="arm-llamacpp">'):]
    card = card[:card.index("</div>\n{% endfor %}") if "{% endfor %}" in card else len(card)]
    assert "probe: probe claim: " in card[:20000]


def test_a_stage_package_that_cannot_load_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """An entry point naming a module that is not there, or an object that is not a stage: one
    line naming the entry point, exit 2, before any command runs."""
    missing = _package(tmp_path / "a", "suite_probe_missing", "suite_probe_gone:STAGE")
    r = _suite(["--version"], missing, tmp_path, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.strip()]
    assert "stage entry point 'probe' (suite_probe_gone:STAGE): cannot load it: ModuleNotFoundError" in line
    wrong = _package(tmp_path / "b", "suite_probe_wrong", "suite_probe_wrong:ProbeResult")
    r = _suite(["results", "--results", str(tmp_path / "none")], wrong, tmp_path, timeout=120)
    assert r.returncode == 2 and "not a suite.stages.base.Stage but a ModelMetaclass" in r.stderr
    bad = _package(tmp_path / "d", "suite_probe_bad", "suite_probe_bad:STAGE")
    (bad / "suite_probe_bad.py").write_text(PROBE.replace('profiles={"quick": {"requests": 2}}', 'profiles={"quick": {"requests": 0}}'))
    r = _suite(["bench", "--model", "tiny", "--arms", "llamacpp", "--launcher", "local", "--profile", "quick",
                "--stages", "gate,probe", "--results", str(tmp_path / "r")], bad, tmp_path, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and not (tmp_path / "r").exists()
    assert "stage 'probe', profile 'quick': setting requests = 0: Input should be greater than or equal to 1" in r.stderr
    taken = _package(tmp_path / "c", "suite_probe_taken", "suite_probe_taken:STAGE")
    (taken / "suite_probe_taken.py").write_text(PROBE.replace('name="probe"', 'name="gate"'))
    r = _suite(["--version"], taken, tmp_path, timeout=120)
    assert r.returncode == 2 and "a stage named 'gate' exists already" in r.stderr


def test_a_run_recorded_before_a_profile_setting_existed_still_resumes() -> None:
    """A field added to the profile with a default (here `stage_settings`) compares as that default
    against a run recorded before it existed: the run may be continued; a value that differs may not."""
    from suite.bench import configuration_differences
    from suite.profiles import get_profile
    from suite.records import RunManifest

    profile = get_profile("quick")
    old = {k: v for k, v in profile.model_dump(mode="json").items() if k != "stage_settings"}
    manifest = RunManifest(run_id="r", model="tiny", arm="a", runtime="llamacpp", launcher="local",
                           profile="quick", started_at="2026-12-01T00:00:00Z", profile_settings=old)
    assert not any(d.startswith("profile settings") for d in configuration_differences(manifest, None, profile))
    changed = manifest.model_copy(update={"profile_settings": {**old, "gate_requests": 7}})
    assert "profile settings gate_requests" in configuration_differences(changed, None, profile)


PAGE_STAGE = '''"""A stage from outside the suite that draws its own page section, with a template beside it."""

from __future__ import annotations

from pydantic import BaseModel

from suite.stages.base import SectionTemplate, Stage


class ProbeResult(BaseModel):
    answers: list[str]
    verdict: str


def run(ctx):
    raise NotImplementedError  # the page is built from a record: the stage never runs here


STAGE = Stage(name="probe", result=ProbeResult, run=run, fresh_runtimes=False, in_bench=False,
              summary="a stage with a section of its own", page_title="probe",
              section=SectionTemplate("section.html", "suite_probe_page.view:page", slot="causes", order=9))
'''

PAGE_VIEW = '''def page(results, inputs):
    return {"probe_rows": [(arm, r.answers if r else None) for arm, r in zip(inputs.arms, results)]}
'''

PAGE_TEMPLATE = '''<section id="probe">
<h2>Probe, drawn by its own template</h2>
{% for arm, answers in probe_rows %}<p class="probe-row">{{ arm }}: {{ answers | join(' | ') if answers else 'not run' }}</p>
{% endfor %}
</section>

'''


def _page_package(where: Path, template: bool = True, view: str = PAGE_VIEW) -> Path:
    """An installed package folder holding a stage, its page view and (or not) its template."""
    pkg = where / "suite_probe_page"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PAGE_STAGE)
    (pkg / "view.py").write_text(view)
    if template:
        (pkg / "section.html").write_text(PAGE_TEMPLATE)
    meta = where / "suite_probe_page-1.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: suite-probe-page\nVersion: 1.0\n")
    (meta / "entry_points.txt").write_text("[suite.stages]\nprobe = suite_probe_page:STAGE\n")
    return where


def test_a_stage_package_draws_its_own_section_in_its_slot_escaped(tmp_path: Path) -> None:
    """A stage package with a template and a view of its own: the model page includes its section
    in the slot it names (after the built-in sections there, by its order), filled by its view, its
    text escaped; the built-in sections around it unchanged. A template missing from the package is
    one line and exit 2."""
    plugin = _page_package(tmp_path / "plugin")
    results = tmp_path / "results"
    shutil.copytree(ROOT / "tests" / "golden" / "results" / "tiny", results / "tiny")
    (run,) = (results / "tiny" / "vllm-cpu").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    summary["probe"] = {"answers": ["<script>alert(1)</script>", "two"], "verdict": "2 distinct"}
    (run / "summary.json").write_text(json.dumps(summary))
    site = tmp_path / "site"
    built = _suite(["site", "--results", str(results), "--out", str(site)], plugin, tmp_path, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    page = (site / "models" / "tiny.html").read_text()
    assert '<p class="probe-row">vllm-cpu: &lt;script&gt;alert(1)&lt;/script&gt; | two</p>' in page
    assert '<p class="probe-row">llamacpp: not run</p>' in page and "<script>alert" not in page
    order = [page.index(f'<section id="{s}">') for s in ("controls", "restarts", "sessions", "probe", "latency")]
    assert order == sorted(order)
    assert '<section id="stage-probe"' not in page  # drawn by its template, not by the generic section
    # the run's own page draws it too, for that run alone; a run without its result does not
    run_page = (site / "runs" / f"{run.name}-vllm-cpu.html").read_text()
    assert '<p class="probe-row">vllm-cpu: &lt;script&gt;alert(1)&lt;/script&gt; | two</p>' in run_page
    assert not any("probe-row" in p.read_text() for p in (site / "runs").glob("*-llamacpp.html"))

    missing = _page_package(tmp_path / "broken", template=False)
    r = _suite(["--version"], missing, tmp_path, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "its page section's template 'section.html' is not in" in r.stderr

    # a view that fails, or gives a name the page itself uses: its section is one line in its place
    # and in the log, the page and every other section are written
    for view, said in (("def page(results, inputs):\n    raise ValueError('no <b>view</b>')\n",
                        "ValueError: no &lt;b&gt;view&lt;/b&gt;"),
                       ("def page(results, inputs):\n    return {'arms': []}\n",
                        "SuiteError: its view gives &#39;arms&#39;, a name the page itself uses")):
        where = tmp_path / f"v{len(said)}"
        out = tmp_path / f"site{len(said)}"
        r = _suite(["site", "--results", str(results), "--out", str(out)], _page_package(where, view=view),
                   tmp_path, timeout=300)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert "stage 'probe': its page section could not be drawn" in r.stderr
        # the model page and the run's own page (the run has the stage's result): one line each
        assert "2 stage sections could not be drawn" in r.stdout + r.stderr
        page = (out / "models" / "tiny.html").read_text()
        assert (f'<section id="probe" class="stage-section"><p class="bad">stage &#39;probe&#39;: its page section '
                f"could not be drawn: {said}</p></section>") in page
        assert '<section id="sessions">' in page and '<section id="latency">' in page


def test_a_run_recorded_when_batch_settings_were_profile_fields_reads_them_as_the_stages_own(tmp_path) -> None:
    """A schema-2 run.json kept batch composition's settings as profile fields (`batch_trials`, ...):
    read now, they are the stage's own settings, so the run resumes with the same values and a run
    that had others is refused naming the setting."""
    import json

    from suite.bench import configuration_differences, plan_arms_profile
    from suite.records import SCHEMA_VERSION, read_manifest

    profile = plan_arms_profile("full")
    old = {k: v for k, v in profile.model_dump(mode="json").items() if k != "stage_settings"}
    old |= {"batch_composition": True, "batch_trials": 8, "batch_sizes": [8, 16, 32], "batch_prompt": None}
    run = tmp_path / "run"
    run.mkdir()
    manifest = {"schema_version": 2, "run_id": "r", "model": "tiny", "arm": "a", "runtime": "llamacpp",
                "launcher": "local", "profile": "full", "started_at": "2026-12-01T00:00:00Z", "profile_settings": old}
    (run / "run.json").write_text(json.dumps(manifest))
    m = read_manifest(run)
    assert SCHEMA_VERSION == 4 and m.schema_version == 4
    assert "batch_trials" not in m.profile_settings
    assert m.profile_settings["stage_settings"]["batch"] == {"composition": True, "trials": 8, "sizes": [8, 16, 32],
                                                             "prompt": None}
    assert not any(d.startswith("profile settings") for d in configuration_differences(m, None, profile))
    (run / "run.json").write_text(json.dumps(manifest | {"profile_settings": old | {"batch_trials": 3}}))
    assert "profile settings batch.trials" in configuration_differences(read_manifest(run), None, profile)


SCREEN_STAGE = '''"""A stage from outside the suite with a first-screen part of its own."""

from __future__ import annotations

from pydantic import BaseModel

from suite.analysis.claims import Claim
from suite.stages.base import FirstScreen, Stage
from suite.stages.screen import Answer, FirstScreenPart


class ProbeResult(BaseModel):
    verdict: str


def run(ctx):
    raise NotImplementedError  # the page is built from a record: the stage never runs here


def claims(r, summary):
    return [Claim(stage="probe", kind="package", arm=summary.arm, verdict="varies", good=False,
                  phrase=r.verdict, text=f"the probe's sentence: {r.verdict}")]


def part(ctx):
    failing = [c for c in ctx.claims if c.good is False]
    if not failing:
        return None
    return FirstScreenPart(causes=[f"the probe: {c.phrase}" for c in failing], details=[c.text for c in failing],
                           good=False, cost=Answer("probe-fix: 0.50x the tokens/s", None, ["the probe's fix"]),
                           cost_priority=9, keeps_colour=True)  # it found what the gate did not: red


STAGE = Stage(name="probe", result=ProbeResult, run=run, fresh_runtimes=False, in_bench=False,
              summary="a stage with a first-screen part", claims=claims,
              first_screen=FirstScreen("suite_probe_screen:part", order=0))
'''


def test_a_stage_package_joins_the_first_screen_through_the_same_hook(tmp_path: Path) -> None:
    """A stage from a package declares its first-screen part as the built-in stages do theirs
    (`Stage.first_screen = FirstScreen(...)`): its cause joins "what changes it?" (red, since it says
    it found what the gate did not), its cost answers "what does the fix cost?" (its priority the
    highest), on the model page and the index; an arm without its result is as before."""
    from suite.stages.base import FirstScreen

    # the built-in stages the first screen draws causes from join by the very same field
    assert all(isinstance(STAGES[name].first_screen, FirstScreen) for name in ("controls", "batch", "restarts"))
    where = tmp_path / "plugin"
    where.mkdir()
    (where / "suite_probe_screen.py").write_text(SCREEN_STAGE)
    meta = where / "suite_probe_screen-1.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: suite-probe-screen\nVersion: 1.0\n")
    (meta / "entry_points.txt").write_text("[suite.stages]\nprobe = suite_probe_screen:STAGE\n")
    results = tmp_path / "results"
    shutil.copytree(ROOT / "tests" / "golden" / "results" / "tiny", results / "tiny")
    (run,) = (results / "tiny" / "vllm-cpu").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    summary["probe"] = {"verdict": "2 <b>distinct</b> after a probe"}
    (run / "summary.json").write_text(json.dumps(summary))
    before = tmp_path / "before"
    assert _suite(["site", "--results", str(results), "--out", str(before)], tmp_path / "none", tmp_path,
                  timeout=300).returncode == 0
    site = tmp_path / "site"
    built = _suite(["site", "--results", str(results), "--out", str(site)], where, tmp_path, timeout=300)
    assert built.returncode == 0 and "could not be made" not in built.stderr, built.stderr[-2000:]

    def card(root: Path, arm: str) -> str:
        page = (root / "models" / "tiny.html").read_text()
        start = page.index(f'<div class="card arm-card" id="arm-{arm}">')
        return page[start:page.index('<div class="three">', start) + 6000]

    mine = card(site, "vllm-cpu")
    three = mine[mine.index('<div class="three">'):]
    three = three[:three.index('<details class="why">') if '<details class="why">' in three else len(three)]
    assert ('<span class="qh">What changes it?</span> <span class="bad">the probe: 2 &lt;b&gt;distinct&lt;/b&gt; '
            'after a probe</span>') in three
    assert '<span class="qh">What does the fix cost?</span> <span>probe-fix: 0.50x the tokens/s</span>' in three
    assert "the probe&#39;s sentence: 2 &lt;b&gt;distinct&lt;/b&gt; after a probe" in mine
    index = (site / "index.html").read_text()
    assert "the probe: 2 &lt;b&gt;distinct&lt;/b&gt; after a probe" in index and "probe-fix: 0.50x" in index
    # the arm without the probe's result: its first screen as it was without the package
    assert card(site, "llamacpp") == card(before, "llamacpp")
