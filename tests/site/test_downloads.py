"""A model page's downloads (the table it shows, as CSV with its column types and as JSON, and the
claims behind its verdicts) and its permalinks (each section and arm card links to itself)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from suite.export import polars_csv_types
from suite.records import load_all
from suite.site.publish import build_site

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_a_model_page_offers_its_runs_and_claims_as_csv_and_json(tmp_path: Path) -> None:
    root = EXAMPLES / "gpu-lightning-results"
    build_site(root, tmp_path / "site")
    page = (tmp_path / "site" / "models" / "random-lightning.html").read_text(encoding="utf-8")
    links = re.findall(r'href="(random-lightning/data/[^"]+)"', page)
    assert {Path(x).name for x in links} == {"runs.csv", "runs.json", "runs.schema.json", "claims.csv",
                                             "claims.json", "claims.schema.json"}
    data = tmp_path / "site" / "models" / "random-lightning" / "data"
    n = len(load_all(root))
    rows = json.loads((data / "runs.json").read_text())
    assert rows["schema_version"] == 1 and len(rows["rows"]) == n
    schema = json.loads((data / "runs.schema.json").read_text())
    df = pl.read_csv(data / "runs.csv", schema_overrides=polars_csv_types(schema))
    assert df.height == n and set(df["run_id"]) == {r["run_id"] for r in rows["rows"]}
    claims = pl.read_csv(data / "claims.csv",
                         schema_overrides=polars_csv_types(json.loads((data / "claims.schema.json").read_text())))
    assert claims.height == len(json.loads((data / "claims.json").read_text())["rows"]) > 0


def test_every_section_and_arm_card_links_to_itself(tmp_path: Path) -> None:
    build_site(EXAMPLES / "gpu-lightning-results", tmp_path / "site")
    page = (tmp_path / "site" / "models" / "random-lightning.html").read_text(encoding="utf-8")
    ids = re.findall(r'<section id="([^"]+)">', page)
    assert ids and all(f'href="#{i}"' in page for i in ids)
    cards = re.findall(r'<div class="card arm-card" id="([^"]+)">', page)
    assert cards and all(f'<a class="permalink" href="#{c}"' in page for c in cards)


def test_the_speed_against_energy_chart_draws_only_arms_with_both_figures() -> None:
    from suite.site.charts import cost_scatter

    both = {"a": {"tokens_per_s": 200.0, "j_per_token": 0.7, "one_answer": True},
            "b": {"tokens_per_s": 230.0, "j_per_token": 0.6, "one_answer": False},
            "c": {"tokens_per_s": 100.0, "j_per_token": None, "one_answer": None}}
    svg = cost_scatter(both)
    assert svg is not None and svg.startswith("<svg") and "no energy reading: c" in svg
    assert cost_scatter({k: both[k] for k in ("a", "c")}) is None  # one point is no comparison
    assert cost_scatter({}) is None
