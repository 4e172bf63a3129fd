"""The H200 records of the study's model class (random-lightning: a hybrid Mamba-MoE in bf16, NVFP4
and W4A16) and of the in-launch elimination on random-qwen3, read back as the site reads them."""

from __future__ import annotations

from pathlib import Path

from suite.claims import claims_of
from suite.records import load_all

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "gpu-vllm-results"
LIGHTNING = Path(__file__).resolve().parents[2] / "docs" / "examples" / "gpu-lightning-results"


def _runs(model: str) -> dict:
    """Per arm, its newest run with a gate (a later run of the control matrix alone has none), else
    its newest run (a run that failed before its gate)."""
    out: dict = {}
    for s in load_all(LIGHTNING):  # oldest first
        if s.model == model and (s.gate is not None or s.arm not in out or out[s.arm].gate is None):
            out[s.arm] = s
    return out


def test_each_format_ran_on_its_own_kernels_and_the_record_says_which():
    runs = _runs("random-lightning")
    assert {"vllm-gpu", "vllm-gpu-nvfp4", "vllm-gpu-w4a16", "vllm-gpu-humming-w4a16"} <= set(runs)
    paths = {arm: runs[arm].signature.kernel_path for arm in ("vllm-gpu", "vllm-gpu-nvfp4", "vllm-gpu-w4a16")}
    # Hopper has no FP4 tensor cores: NVFP4 runs weight-only through Marlin, and says so
    assert "Marlin" in paths["vllm-gpu-nvfp4"]["linear"] and paths["vllm-gpu-nvfp4"]["moe"] == "MARLIN (NvFp4)"
    assert paths["vllm-gpu-w4a16"]["moe"] == "MARLIN (WNA16)"
    assert paths["vllm-gpu"]["moe"].startswith("TRITON")
    assert len({tuple(sorted(p.items())) for p in paths.values()}) == 3
    # the kernel path is part of the configuration: three formats, three digests
    assert len({runs[a].signature.digest for a in paths}) == 3


def test_the_gate_per_format_and_the_humming_failure_named_by_its_error():
    runs = _runs("random-lightning")
    distinct = {arm: {p.prompt_id: p.distinct_answers for p in runs[arm].gate.prompts}
                for arm in ("vllm-gpu", "vllm-gpu-nvfp4", "vllm-gpu-w4a16")}
    assert distinct["vllm-gpu"] == {"document-4k": 1, "long-open": 1, "short-open": 1}
    assert distinct["vllm-gpu-nvfp4"]["document-4k"] > 1 and distinct["vllm-gpu-w4a16"]["document-4k"] > 1
    assert runs["vllm-gpu"].batch is not None
    humming = runs["vllm-gpu-humming-w4a16"]
    assert humming.status == "failed" and "1536 != 768" in (humming.reason or "")


def test_prefix_caching_credited_inside_one_launch_with_a_stronger_test_than_launches_gave():
    runs = [s for s in load_all(EXAMPLES)
            if s.model == "random-qwen3" and s.controls is not None and s.controls.automatic
            and any(r.in_launch for r in s.controls.rows)]
    assert len(runs) == 1
    controls = runs[0].controls
    assert controls.restoring == ["prefix-caching-off"]
    (row,) = [r for r in controls.rows if r.in_launch]
    series = row.in_launch["document-4k"]
    assert row.unit == "pair" and series.stop == "credit" and series.with_distinct == 1
    result = series.result()
    assert result.p_value is not None and result.p_value < 0.05 and row.p_adjusted < 0.05
    # the launch rows were not started: one launch for the whole matrix
    assert {r.status for r in controls.rows if not r.in_launch} == {"skipped"}
    (claim,) = [c for c in claims_of(runs[0], only="controls") if c.kind == "control"
                and c.configuration == "prefix-caching-off"]
    assert claim.good is True and claim.evidence.unit == "pairs inside one launch"


def test_nvfp4_moe_marlin_credited_inside_each_launch_and_the_start_up_choice_named():
    """The H100 matrix of 2026-12-06 on NVFP4: with the MoE layers' Marlin NvFp4 kernel replaced by
    vLLM's emulation, each of two launches gave one answer on every prompt, while on document-4k
    the two launches answered differently. Counted inside their own launch, the requests credit the
    MoE kernel; the launches' difference is named as a choice made at start-up, not as a second
    answer that would rule the kernel out."""
    (run,) = [s for s in load_all(LIGHTNING) if s.run_id.endswith("9b81e573")]
    controls = run.controls
    assert controls is not None and controls.restoring == ["moe-nvfp4-emulation"]
    row = next(r for r in controls.rows if r.configuration == "moe-nvfp4-emulation")
    assert row.kernel_path["moe"] == "EMULATION (NvFp4)" and row.launches == 2
    doc = next(t for t in row.tests if t.prompt_id == "document-4k")
    assert (doc.n, doc.others, doc.launch_answers, doc.credited) == (40, 0, 2, True)
    assert doc.default_others == 12 and doc.p_value is not None and doc.p_value < 1e-5
    assert row.starts_differ and controls.restores_word == "restores one answer inside each launch"
    # the rows that still varied inside a launch are ruled out, each from its own start-up log
    for name, part in (("linear-nvfp4-emulation", "linear"), ("attention-triton", "attention")):
        other = next(r for r in controls.rows if r.configuration == name)
        assert other.kernel_path[part] != row.kernel_path[part] and not other.tests[0].credited
    verdicts = {c.configuration: c.verdict for c in claims_of(run) if c.kind == "control"}
    assert verdicts == {"moe-nvfp4-emulation": "restores one answer inside each launch",
                        "linear-nvfp4-emulation": "still varies", "attention-triton": "still varies"}
