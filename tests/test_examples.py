"""The example results trees kept in docs/examples (real runs: the tiny model's three CPU arms, and
llama.cpp's CUDA build on an H200) read, publish and compare with this suite's code."""

from __future__ import annotations

from pathlib import Path

from suite.compare import compare_runs
from suite.site.publish import build_site
from suite.records import iter_run_dirs, load_all

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


def test_cpu_example_tree_publishes_with_its_verdicts(tmp_path: Path) -> None:
    root = EXAMPLES / "cpu-results"
    runs = {s.arm: s for s in load_all(root)}
    assert set(runs) == {"llamacpp", "llamacpp-python", "vllm-cpu"}
    build_site(root, tmp_path / "site")
    page = (tmp_path / "site" / "models" / "tiny.html").read_text(encoding="utf-8")
    assert "cold-start transient: only the first request after the start differs (1 of 5)" in page
    assert "prompt-cache-off bring(s) short-open back to one answer" in page
    assert "(over launches)" in page
    a, b = (d for d in iter_run_dirs(root) if d.parent.name in ("llamacpp", "vllm-cpu"))
    cmp = compare_runs(str(a), str(b), root)
    assert cmp.prompts and any(d.key == "runtime" for d in cmp.signature_diff)


def test_gpu_example_tree_reads_as_200_identical_requests(tmp_path: Path) -> None:
    root = EXAMPLES / "gpu-results"
    (s,) = [s for s in load_all(root) if s.gate]
    (p,) = s.gate.prompts
    assert p.requests == 200 and p.distinct_answers == 1
    build_site(root, tmp_path / "site")
