"""Latency and extraction through the bench on vLLM's CPU build: /metrics deltas and json_schema.

Slow (vLLM starts in about 90 s here), so it is left out of `make test`.
"""

from __future__ import annotations

import json

import pytest

from conftest import installed_definition
from suite.bench import run_bench

pytestmark = [pytest.mark.live, pytest.mark.vllm, pytest.mark.slow]


def test_vllm_latency_and_extraction(tiny_hf, tmp_path):
    installed_definition("vllm-cpu")
    (summary,) = run_bench("tiny", ["vllm-cpu"], "local", "quick", ["latency", "extraction"], results=tmp_path)
    assert summary.status == "complete", summary.reason
    run_dir = next(tmp_path.glob("tiny/vllm-cpu/*"))
    latency = json.loads((run_dir / "stages" / "latency.json").read_text())
    level = latency["levels"][0]
    assert level["requests"] == level["ttft_s"]["n"] > 0
    timings = level["runtime_timings"]
    assert timings is not None and timings["source"] == "vllm /metrics"
    # the histogram deltas cover exactly the measured requests (warm-up scraped away)
    assert timings["n"] == level["requests"]
    assert timings["ttft_mean_s"] > 0 and timings["e2e_mean_s"] > 0
    assert abs(timings["e2e_mean_diff_ms"]) < 0.5 * timings["e2e_mean_s"] * 1000

    extraction = json.loads((run_dir / "stages" / "extraction.json").read_text())
    assert extraction["mode"] == "json_schema" and extraction["failed_requests"] == 0
    # a checkpoint without a chat template is asked through /v1/completions, still with the schema
    assert extraction["endpoint"] in ("chat", "completions")
    assert extraction["requests"] == extraction["sections"] * extraction["repeats"]
    facts = [json.loads(x) for x in (run_dir / "requests.jsonl").read_text().splitlines()]
    facts = [f for f in facts if f["kind"] == "extraction-fact"]
    assert facts and all(f["signature"]["runtime"] == "vllm-cpu" for f in facts)
