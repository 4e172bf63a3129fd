"""Site builds under hostile timing and hostile names: two builds at once (two real processes) leave one
whole site and nothing else; two names never share a page."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.errors import SuiteError
from suite.site.figures import slug
from suite.site.publish import MARKER, build_site

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"
REPO = Path(__file__).resolve().parents[2]
BUILD = "import sys; from pathlib import Path; from suite.site.publish import build_site; " \
        "build_site(Path(sys.argv[1]), Path(sys.argv[2]))"


@pytest.mark.fault
def test_two_site_builds_at_once_leave_one_whole_site(tmp_path: Path, fault_report: Any) -> None:
    out = tmp_path / "public"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    failures: list[str] = []
    tracebacks = 0
    for _ in range(3):  # three rounds of two builds started together
        procs = [subprocess.Popen([sys.executable, "-c", BUILD, str(GOLDEN), str(out)], env=env, cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=300)
            tracebacks += "Traceback" in err
            if p.returncode != 0:
                failures.append(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
    pages = sorted(str(p.relative_to(out)) for p in out.rglob("*.html"))
    left = sorted(p.name for p in tmp_path.iterdir() if p.name not in ("public", ".public.lock"))
    fault_report(tracebacks=tracebacks, records_lost=len(failures))
    assert not failures, failures
    assert (out / MARKER).exists() and "index.html" in pages and len(pages) == 13, pages
    assert left == [], left  # no temporary or old folder left beside it
    # and one build after them reads the folder as the suite's own
    assert build_site(GOLDEN, out).pages == 13


def test_a_site_folder_that_is_not_the_suites_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "public"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(SuiteError, match="not a site this suite built"):
        build_site(GOLDEN, out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["public"]  # no temporary folder left


def test_names_that_differ_never_share_a_page() -> None:
    names = ["a/b", "a-b", "a b", "a:b", "a-b-", ".a-b", "x" * 130, "x" * 131, "", "-", "ü"]
    slugs = [slug(n) for n in names]
    assert len(set(slugs)) == len(names), dict(zip(names, slugs))
    assert slug("a-b") == "a-b" and slug("tiny") == "tiny" and slug("llamacpp-0.3.30") == "llamacpp-0.3.30"
    assert all(len(s) <= 131 and "/" not in s and not s.startswith(".") for s in slugs)


@pytest.mark.fault
def test_two_models_whose_names_slug_alike_get_two_pages(tmp_path: Path, fault_report: Any) -> None:
    results = tmp_path / "results"
    shutil.copytree(GOLDEN / "nano", results / "nano")
    renamed = {"nano": "q/x", "nano2": "q-x"}
    shutil.copytree(GOLDEN / "nano", results / "nano2")
    for folder, model in renamed.items():
        for f in (results / folder).glob("*/*/*.json"):
            data = json.loads(f.read_text())
            data["model"] = model
            if folder == "nano2":  # another run: its own id (the copy's runs would share their pages)
                data["run_id"] = data["run_id"] + "-2"
            f.write_text(json.dumps(data))
        if folder == "nano2":
            for run in (results / folder).glob("*/*"):
                run.rename(run.with_name(run.name + "-2"))
    report = build_site(results, tmp_path / "site")
    pages = sorted(p.name for p in (tmp_path / "site" / "models").glob("*.html"))
    fault_report(records_lost=2 - len(pages))
    assert report.models == 2 and len(pages) == 2, pages
    # two runs that would still share a page (one run copied under another model): refused, not overwritten
    shutil.copytree(GOLDEN / "nano", results / "nano3")
    with pytest.raises(SuiteError, match="two pages would be written to runs/"):
        build_site(results, tmp_path / "site")
    assert len(list((tmp_path / "site" / "models").glob("*.html"))) == 2  # the last whole site stands
