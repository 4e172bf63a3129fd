"""Verdicts are claims computed from the records whenever they are read: a changed statistic reaches
an old record's pages and export, and the page says where the run printed otherwise when it ended."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from suite.analysis.claims import Claim
from suite.claims import claims_of
from suite.records import expand_run, load_all

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
CREDITED = EXAMPLES / "gpu-vllm-results" / "random-qwen3" / "vllm-gpu" / "20261202T064915975939Z-c74c0352"


@pytest.fixture
def old_record(tmp_path: Path) -> Path:
    """A record a run wrote before today's code: prefix caching off credited over 3 launches a row
    (3 of 3 default launches with the transient against 0 of 3, p = 0.05), one control tested."""
    results = tmp_path / "results"
    dest = results / "random-qwen3" / "vllm-gpu" / CREDITED.name
    shutil.copytree(CREDITED, dest)
    expand_run(dest)  # plain, as the run wrote it (the example tree keeps it compacted)
    return results


def _page_and_claims(results: Path, out: Path) -> tuple[str, pl.DataFrame]:
    from suite.export import export_tables
    from suite.site.publish import build_site

    build_site(results, out / "site")
    export_tables(results, "parquet", out / "export")
    page = (out / "site" / "models" / "random-qwen3.html").read_text()
    return page, pl.read_parquet(out / "export" / "claims.parquet")


def test_a_changed_threshold_reaches_an_old_records_page_and_export(old_record: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import suite.stages.controls.elimination as controls_elimination

    page, claims = _page_and_claims(old_record, tmp_path / "today")
    elimination = claims.filter(pl.col("kind") == "elimination").row(0, named=True)
    # a closed verdict; the restoring control is the claim's configuration, named in its phrase
    assert (elimination["verdict"], elimination["configuration"]) == ("restores one answer", "prefix-caching-off")
    assert not elimination["recomputed"]
    assert "prefix-caching-off restores one answer" in page and "read otherwise when the run ended" not in page

    # the same record, read by code whose elimination asks for a stronger test (the level `recompute`
    # reads when a record is loaded: the elimination module's)
    monkeypatch.setattr(controls_elimination, "ELIMINATION_ALPHA", 0.01)
    page, claims = _page_and_claims(old_record, tmp_path / "stricter")
    elimination = claims.filter(pl.col("kind") == "elimination").row(0, named=True)
    assert elimination["verdict"] == "nothing tested restores one answer" and elimination["recomputed"]
    assert "prefix-caching-off restores one answer" not in page
    # the page says what the run printed then, with the version that wrote the record
    assert "1 verdict read otherwise when the run ended" in page
    assert "as printed when the run ended by suite 0.1.0" in page
    assert "bring(s) document-4k back to one answer" in page  # the text as printed then, quoted


def test_no_stored_sentence_is_the_source_of_a_verdict(old_record: Path) -> None:
    """A record whose stored elimination text says something else entirely still gets the verdict its
    rows give: the stored text is read for the 'as printed then' note alone."""
    import json

    summary_path = next(old_record.glob("*/*/*/summary.json"))
    data = json.loads(summary_path.read_text())
    data["controls"]["elimination"] = "eager brings everything back (a sentence no test gave)"
    data["controls"]["restoring"] = ["eager"]
    summary_path.write_text(json.dumps(data))
    (run,) = load_all(old_record)
    assert run.controls.restoring == ["prefix-caching-off"]
    assert "eager" not in run.controls.elimination
    (note,) = [n for n in run.recomputed if n.stage == "controls"]
    assert note.then.startswith("eager brings everything back") and not note.kept


def test_every_stage_claim_names_its_n_and_its_family() -> None:
    runs = load_all(EXAMPLES / "cpu-results")
    claims: list[Claim] = [c for s in runs for c in claims_of(s)]
    assert {c.stage for c in claims} >= {"gate", "restarts", "controls"}
    for c in claims:
        assert c.arm and c.verdict and c.phrase
        if c.kind in ("gate", "across-launches", "within-launches"):
            assert c.evidence.n is not None and c.evidence.unit
    llamacpp = [c for c in claims if c.arm == "llamacpp"]
    (elimination,) = [c for c in llamacpp if c.kind == "elimination"]
    # three controls tested at the launch unit: Holm over them, named with the claim
    assert elimination.family is not None and elimination.family.size == 3 and elimination.family.correction == "Holm"
    cut = [c for c in llamacpp if c.kind == "across-launches"]
    assert cut and all(any("cut at max_tokens" in x for x in c.caveats) for c in cut)


def test_a_crash_is_named_by_the_engines_error_line_read_again_from_its_log() -> None:
    """An old HUMMING failure's record quoted a traceback's source line (`raise RuntimeError(`); its
    log, kept with the record, says the engine's TypeError: that is the cause every page now shows,
    with what the run printed then beside it."""
    from suite.records import load_summary

    run = EXAMPLES / "gpu-vllm-results" / "random-llama-1b" / "vllm-gpu-humming-w4a16" / "20261202T010024384089Z-nosig"
    s = load_summary(run / "summary.json")
    assert s.failure.error_line.endswith("TypeError: quantize_weight() got an unexpected keyword argument "
                                         "'has_global_scale'")
    assert "raise RuntimeError(" not in s.reason
    (note,) = [n for n in s.recomputed if n.stage == "failure"]
    assert note.then.endswith("raise RuntimeError(") and "no signature" in note.written_by


def test_every_verdict_comes_from_its_kinds_closed_vocabulary() -> None:
    """Every claim of the example and golden records: a verdict of the closed vocabulary its stage
    declares for its kind (`Stage.verdicts`, made from each stage's Literal types; names of
    controls go to the claim's configuration and phrase, numbers to its counts), and the evidence's
    test is the one that decided."""
    from suite.claims import claims_of, unspoken
    from suite.records import load_all
    from suite.stages import STAGES

    root = Path(__file__).resolve().parents[2]
    seen: dict[str, int] = {}
    for tree in ("docs/examples/gpu-vllm-results", "docs/examples/gpu-lightning-results", "docs/examples/cpu-results",
                 "docs/examples/gpu-results", "tests/golden/results"):
        for s in load_all(root / tree):
            for c in claims_of(s):
                assert STAGES[c.stage].verdicts, c.stage  # every built-in stage that makes claims declares them
                assert not unspoken(STAGES[c.stage].verdicts, c), (s.run_id, c.stage, c.kind, c.verdict)
                seen[c.kind] = seen.get(c.kind, 0) + 1
                if c.kind == "elimination" and c.good:
                    assert c.configuration and c.phrase.startswith(c.configuration)
                if c.kind == "control" and c.verdict.startswith("restores"):
                    assert c.evidence.p_adjusted is not None and c.evidence.p_adjusted <= 0.05
    assert {"gate", "control", "elimination", "within-launches", "across-launches", "batch", "sessions",
            "extraction"} <= set(seen)
    assert seen["control"] >= 10 and seen["elimination"] >= 5


def test_a_verdict_outside_its_vocabulary_is_told_apart() -> None:
    """The check `claims_of` names a defect by: a verdict its kind does not have is outside the
    vocabulary, one it has is not, and a stage that declares none is not checked."""
    from suite.analysis.claims import Claim
    from suite.claims import unspoken

    vocabulary = {"batch": ("varies with its batch", "the same in every batch", "undetermined")}
    odd = Claim(stage="batch", kind="batch", arm="a", verdict="probably fine")
    assert unspoken(vocabulary, odd) and not unspoken(vocabulary, odd.model_copy(update={"verdict": "undetermined"}))
    assert not unspoken({}, odd)  # a package's stage that declares none is not checked


def test_every_p_a_claim_prints_is_a_p_of_its_evidence() -> None:
    """Batch, restarts and control claims used to print a p their evidence lacked (null), and a
    control's sentence printed each prompt's p beside the row's: every "p = ..." a claim of the
    example records prints, in its sentence or its phrase, is one of its evidence's p's (its own, the
    family's adjusted p, or a part's: per prompt, per control) at the precision printed."""
    import re

    from suite.claims import claims_of
    from suite.records import load_all

    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    checked, missing = 0, []
    for tree in ("gpu-vllm-results", "gpu-lightning-results", "cpu-results", "gpu-results"):
        for s in load_all(examples / tree):
            for c in claims_of(s):
                ev = [x for x in (c.evidence.p, c.evidence.p_adjusted, *c.evidence.parts.values()) if x is not None]
                for printed in re.findall(r"\bp = ([0-9][0-9.e+-]*[0-9])", f"{c.text} {c.phrase}"):
                    checked += 1
                    if not any(float(f"{e:.2g}") == float(printed) or f"{e:g}" == printed for e in ev):
                        missing.append((s.run_id, c.stage, c.kind, printed, ev))
    assert checked >= 30 and missing == []
