"""The control matrix: which configurations `--controls` asks for, the printed table, and the
gate per control on fresh llama-server processes (prompt cache off, four clients at once, LoRA)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from rich.console import Console

from suite.definitions import get_definition
from suite.errors import SuiteError
from suite.stages.controls import ControlRow, ControlsResult, LoraOutcome, format_controls_table, resolve_requested


def ctx_for(runtime: str) -> SimpleNamespace:
    return SimpleNamespace(runtime=get_definition(runtime))


def test_all_means_default_every_control_and_lora():
    assert resolve_requested(ctx_for("llamacpp"), ["all"]) == ["default", "prompt-cache-off", "concurrency-4", "lora"]
    assert resolve_requested(ctx_for("llamacpp-python"), None) == ["default", "prompt-cache-on", "concurrency-4", "lora"]
    vllm = resolve_requested(ctx_for("vllm-cpu"), ["all"])
    assert vllm[0] == "default" and {"batch-invariant", "prefix-caching-off", "eager", "concurrency-4"} <= set(vllm)


def test_every_runtime_offers_concurrency_4_and_its_cache_controls():
    for name, cache in (("llamacpp", "prompt-cache-off"), ("llamacpp-python", "prompt-cache-on"),
                        ("vllm-cpu", "prefix-caching-off")):
        d = get_definition(name)
        assert d.controls["concurrency-4"].concurrency == 4
        assert cache in d.controls


def test_unknown_control_is_one_line_with_the_known_ones():
    with pytest.raises(SuiteError, match="runtime 'llamacpp' has no control 'turbo'; known: default, concurrency-4"):
        resolve_requested(ctx_for("llamacpp"), ["turbo"])


def test_table_shows_distinct_answers_lengths_and_refusals():
    result = ControlsResult(runtime="vllm-cpu", arm="vllm-cpu", requested=["all"], n_requests=20,
                            prompts=["long-open"], rows=[
                                ControlRow(configuration="default", status="ok", distinct={"long-open": 2},
                                           answered={"long-open": 20}, lengths={"long-open": "973 ×9, 993 ×11"},
                                           cold_is_modal={"long-open": True}),
                                ControlRow(configuration="batch-invariant", status="refused",
                                           reason="Engine core initialization failed"),
                                ControlRow(configuration="concurrency-4", concurrency=4, status="ok",
                                           distinct={"long-open": 1}, answered={"long-open": 20},
                                           lengths={"long-open": "993 ×20"}, cold_is_modal={"long-open": False}),
                            ], lora=LoraOutcome(offered=True, reason="adapter refused"))
    console = Console(width=200, record=True)
    console.print(format_controls_table(result))
    text = console.export_text()
    assert "973 ×9, 993 ×11" in text and "2/20" in text
    assert "refused: Engine core initialization failed" in text
    assert "concurrency-4 ×4" in text and "LoRA: adapter refused" in text


@pytest.fixture(scope="module")
def controls_run(tmp_path_factory):
    from suite.bench import run_bench

    results = tmp_path_factory.mktemp("controls")
    (summary,) = run_bench("tiny", ["llamacpp"], "local", "quick", ["gate", "controls"], results=results,
                           controls=["prompt-cache-off", "concurrency-4", "lora"])
    return summary


def test_controls_on_fresh_llama_servers(controls_run):
    assert controls_run.status == "complete", controls_run.reason
    result = controls_run.controls
    by = {r.configuration: r for r in result.rows}
    assert set(by) == {"prompt-cache-off", "concurrency-4", "lora:base", "lora:adapter"}
    for row in by.values():
        assert row.status == "ok", row.reason
        assert row.answered["short-open"] == 5
        assert row.gate is not None and row.gate.prompts[0].compared_by == "token_ids"
        assert row.distinct["short-open"] == len({tuple(a.token_ids) for a in row.gate.prompts[0].answers})
    assert by["concurrency-4"].concurrency == 4 and by["concurrency-4"].gate.concurrency == 4
    assert by["prompt-cache-off"].gate.prompts[0].cold_warm is not None
    assert any("--lora" in part for part in by["lora:adapter"].command)
    assert "--lora" not in by["prompt-cache-off"].command


def test_lora_base_and_adapter_in_one_llama_server(controls_run):
    result = controls_run.controls
    lora = result.lora
    assert lora.status == "ok" and lora.same_process is True and lora.select == "scale"
    assert lora.adapter_changes_output is True
    base = next(r for r in result.rows if r.configuration == "lora:base")
    adapter = next(r for r in result.rows if r.configuration == "lora:adapter")
    assert base.command == adapter.command  # one process, two arms
    # The base arm (adapter scale 0) answers as the plain model of the gate did.
    gate_modal = controls_run.gate.prompts[0].answers[0].token_ids
    assert base.gate.prompts[0].answers[0].token_ids == gate_modal
