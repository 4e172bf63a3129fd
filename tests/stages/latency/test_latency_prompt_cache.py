"""The latency stage against a real llama-server: no request's TTFT is a prompt-cache hit.

With one repeated prompt llama-server reuses the whole prompt from its cache after the first
request (`timings.cache_n` = the prompt, `prompt_n` ~ 1); with the unique prefix each request
processes its prompt but for the few leading tokens it shares with the previous one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from suite.bench import make_signature, plan_arms
from suite.launchers.base import RunningRuntime
from suite.profiles import get_profile
from suite.records import RunManifest, RunRecord, new_run_id, utcnow
from suite.stages import StageContext
import suite.stages.latency.run as lat  # the run half: the requests it sends, timed
from tests.conftest import start_local

pytestmark = [pytest.mark.live, pytest.mark.slow]


def _ctx(rt: RunningRuntime, tmp: Path) -> StageContext:
    plan = plan_arms("tiny", ["llamacpp"], "local", "quick")[0]
    signature = make_signature(plan, rt, plan.spec([], tmp / "unused.log"))
    manifest = RunManifest(run_id=new_run_id(signature.digest), model="tiny", arm="llamacpp", runtime="llamacpp",
                           launcher="local", profile="quick", started_at=utcnow(), signature=signature)
    record = RunRecord.create(tmp / "results", manifest)
    profile = get_profile("quick").model_copy(update={"stage_settings": {"latency": {
        "requests": 4, "warmup": 2, "max_tokens": 8, "concurrency": [1]}}})
    return StageContext(card=plan.card, arm_name="llamacpp", arm=plan.arm, runtime=plan.runtime, profile=profile,
                        sampling=plan.card.sampling, signature=signature, record=record,
                        client=plan.client(rt, []), running=rt, controls=[],
                        launch=None,  # type: ignore[arg-type]  (the latency stage never relaunches)
                        )


@pytest.fixture()
def own_llamacpp_server(tiny_gguf: Path, tmp_path: Path) -> Iterator[RunningRuntime]:
    """A llama-server of this test alone: the session's shared one may hold these very prompts from
    another test's latency stage (a request then found 39 of its 44 tokens in the cache), which is
    not what the stage meets, since the bench starts each arm's runtime afresh."""
    with start_local("llamacpp", tiny_gguf, tmp_path) as rt:
        yield rt


def test_unique_prefix_defeats_llama_servers_prompt_cache(own_llamacpp_server: RunningRuntime, tmp_path: Path) -> None:
    ctx = _ctx(own_llamacpp_server, tmp_path)
    result = lat.run(ctx)
    assert result.prompt_cache == "unique-prefix"
    level = result.levels[0]
    assert level.failed == 0 and level.incomplete == 0
    # the prefix has one token length: every request's prompt is as long as the others
    assert level.prompt_tokens is not None and level.prompt_tokens.n == 4
    assert level.prompt_tokens.min == level.prompt_tokens.max
    records = [json.loads(x) for x in (ctx.run_dir / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in records if r["kind"] == "latency" and not r["warmup"]]
    assert len({r["prompt_prefix"] for r in measured}) == 4
    prompt_len = int(level.prompt_tokens.max)
    for r in measured:
        t = r["server_timings"]
        # most of the prompt is processed again: only the shared leading tokens come from the cache
        assert t["prompt_n"] >= prompt_len - 8, t
        assert r["e2e_s"] <= r["stream_close_s"]
        assert r["ttft_s"] <= r["e2e_s"]
