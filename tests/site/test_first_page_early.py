"""A first page early: each arm is prepared just before it runs and the site is rebuilt after each
stage's result and each arm, so the first arm's gate is on the page while the rest still runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_is_rebuilt_after_each_arm(tmp_path: Path, tiny_gguf: Path) -> None:
    from conftest import installed_definition
    from suite.bench import BenchRequest, run_bench
    from suite.paths import results_dir  # noqa: F401
    from suite.site.publish import build_site

    installed_definition("llamacpp")
    installed_definition("llamacpp-python")
    pages: list[tuple[str, bool]] = []

    def after(summary) -> None:
        build_site(tmp_path / "results", tmp_path / "site")
        pages.append((summary.arm, (tmp_path / "site" / "models" / "tiny.html").exists()))

    run_bench(BenchRequest.build(model="tiny", arms=["llamacpp", "llamacpp-python"], launcher="local", profile="quick", stages=["gate"], results=tmp_path / "results"), on_arm=after)
    # the model page existed after the first arm, before the second one started
    assert pages == [("llamacpp", True), ("llamacpp-python", True)]


def test_the_site_is_rebuilt_after_each_stage_with_the_run_under_way(tmp_path: Path, tiny_gguf: Path) -> None:
    """After the first arm's gate, before its next stage: the page exists, names the run as under
    way, and shows the gate's answers."""
    from conftest import installed_definition
    from suite.bench import BenchRequest, run_bench
    from suite.site.publish import build_site

    installed_definition("llamacpp")
    seen: list[tuple[str, str, bool, bool]] = []

    def after(model: str, stage: str) -> None:
        build_site(tmp_path / "results", tmp_path / "site")
        page = tmp_path / "site" / "models" / f"{model}.html"
        text = page.read_text() if page.exists() else ""
        seen.append((model, stage, "the run is under way" in text, "short-open" in text))

    run_bench(BenchRequest.build(model="tiny", arms=["llamacpp"], launcher="local", profile="quick", stages=["gate", "latency"], results=tmp_path / "results"), on_result=after)
    assert seen == [("tiny", "gate", True, True), ("tiny", "latency", True, True)]


def test_bench_site_prints_the_page_once_and_make_bench_prepares_per_arm(tmp_path: Path, tiny_gguf: Path) -> None:
    from conftest import installed_definition

    installed_definition("llamacpp")
    env = {**os.environ, "RESULTS": str(tmp_path / "results"), "SITE_OUT": str(tmp_path / "site")}
    out = subprocess.run([sys.executable, "-m", "suite.cli", "bench", "--model", "tiny", "--arms", "llamacpp",
                          "--profile", "quick", "--stages", "gate", "--site"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("site:")]
    assert len(lines) == 1 and "tiny.html" in lines[0]
    assert (tmp_path / "site" / "models" / "tiny.html").exists()
    makefile = (ROOT / "Makefile").read_text()
    bench = makefile.split("\nbench:")[1].split("\n\n")[0]
    assert "setup" not in bench.splitlines()[0]  # no install-everything step before the first arm
    assert "--site" in bench
