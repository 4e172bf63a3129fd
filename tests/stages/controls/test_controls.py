"""The control matrix: which configurations `--controls` asks for, the printed table, and the
gate per control on fresh llama-server processes (prompt cache off, four clients at once, LoRA)."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
from rich.console import Console

from suite.definitions import get_definition
from suite.errors import SuiteError
from suite.stages.controls import MatrixRow, ControlMatrixResult, LoraOutcome, format_controls_table, resolve_requested


def ctx_for(runtime: str) -> SimpleNamespace:
    return SimpleNamespace(runtime=get_definition(runtime))


def test_all_means_default_every_control_and_lora():
    assert resolve_requested(ctx_for("llamacpp"), ["all"]) == ["default", "prompt-cache-off", "no-repack", "concurrency-4",
                                                               "lora"]
    assert resolve_requested(ctx_for("llamacpp-python"), None) == ["default", "prompt-cache-on", "no-repack",
                                                                   "concurrency-4", "lora"]
    vllm = resolve_requested(ctx_for("vllm-cpu"), ["all"])
    assert vllm[0] == "default" and {"batch-invariant", "prefix-caching-off", "eager", "concurrency-4"} <= set(vllm)


def test_a_control_of_one_kernel_part_joins_the_matrix_only_where_the_arm_named_that_part():
    def ctx(kernel_path):
        return SimpleNamespace(runtime=get_definition("vllm"), signature=SimpleNamespace(kernel_path=kernel_path))

    dense = {"linear": "unquantized (bf16)", "attention": "FLASH_ATTN"}
    w4a16 = {"linear": "MarlinLinearKernel + MacheteLinearKernel", "attention": "FLASH_ATTN + FlashAttention 3",
             "moe": "MARLIN (WNA16)"}
    nvfp4 = {"linear": "MarlinNvFp4LinearKernel + Marlin FP4 weight-only (no native FP4)",
             "attention": "FLASH_ATTN", "moe": "MARLIN (NvFp4)"}
    parts = {"moe-wna16-triton", "moe-nvfp4-emulation", "linear-triton", "linear-marlin", "linear-nvfp4-emulation"}
    assert not parts & set(resolve_requested(ctx(dense), ["all"]))
    # each switch joins where its part's kernels are the ones it replaces, and nowhere else
    assert parts & set(resolve_requested(ctx(w4a16), ["all"])) == {"moe-wna16-triton", "linear-triton", "linear-marlin"}
    assert parts & set(resolve_requested(ctx(nvfp4), ["all"])) == {"moe-nvfp4-emulation", "linear-nvfp4-emulation"}
    assert parts <= set(resolve_requested(ctx(None), ["all"]))  # a path the log did not tell
    assert resolve_requested(ctx(dense), ["moe-wna16-triton"]) == ["moe-wna16-triton"]  # asked by name
    assert "prefix-caching-off" in resolve_requested(ctx(dense), ["all"])
    assert "attention-triton" in resolve_requested(ctx(dense), ["all"])


def test_every_kernel_part_control_names_its_source_in_the_release_it_was_read_from():
    for name, control in get_definition("vllm").controls.items():
        if control.kernel is not None:
            assert control.source.startswith("vllm 0.24.0: "), name
            assert bool(control.args) != bool(control.override), name  # one switch: a flag, or the suite's override


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
    result = ControlMatrixResult(runtime="vllm-cpu", arm="vllm-cpu", requested=["all"], n_requests=20,
                            prompts=["long-open"], rows=[
                                MatrixRow(configuration="default", status="ok", distinct={"long-open": 2},
                                           answered={"long-open": 20}, lengths={"long-open": "973 ×9, 993 ×11"},
                                           cold_is_modal={"long-open": True}),
                                MatrixRow(configuration="batch-invariant", status="refused",
                                           reason="Engine core initialization failed"),
                                MatrixRow(configuration="concurrency-4", concurrency=4, status="ok",
                                           distinct={"long-open": 1}, answered={"long-open": 20},
                                           lengths={"long-open": "993 ×20"}, cold_is_modal={"long-open": False}),
                            ], lora=LoraOutcome(offered=True, reason="adapter refused"))
    console = Console(width=200, record=True)
    console.print(format_controls_table(result))
    text = console.export_text()
    assert "973 ×9, 993 ×11" in text and "2/20" in text
    assert "refused: Engine core initialization failed" in text
    assert "concurrency-4 ×4" in text and "LoRA: adapter refused" in text


def controls_run_lines(summary) -> list:
    """The run's request lines of the control matrix, as read back from its folder."""
    from suite.records import read_requests

    (run_dir,) = [p for p in RESULTS_OF[summary.run_id].glob(f"*/*/{summary.run_id}")]
    return read_requests(run_dir, ["controls"])


RESULTS_OF: dict = {}


@pytest.fixture(scope="module")
def controls_run(tmp_path_factory):
    from suite.bench import BenchRequest, run_bench

    results = tmp_path_factory.mktemp("controls")
    (summary,) = run_bench(BenchRequest.build(
        model="tiny", arms=["llamacpp"], launcher="local", profile="quick", stages=["gate", "controls"],
        results=results, stage_values={"controls": {"names": ["prompt-cache-off", "concurrency-4", "no-repack+concurrency-4",
                                             "lora"]}}))
    RESULTS_OF[summary.run_id] = results
    return summary


@pytest.mark.live
def test_controls_on_fresh_llama_servers(controls_run):
    assert controls_run.status == "complete", controls_run.reason
    result = controls_run.controls
    by = {r.configuration: r for r in result.rows}
    # the default row is added: a control is only ever judged against it
    assert set(by) == {"default", "prompt-cache-off", "concurrency-4", "no-repack+concurrency-4", "lora:base",
                       "lora:adapter"}
    # a combination: one fresh server with both controls' flags, its gate at the largest concurrency
    both = by["no-repack+concurrency-4"]
    assert "--no-repack" in both.command and both.concurrency == 4 and both.gate.concurrency == 4
    assert "--no-repack" not in by["concurrency-4"].command and both.part is None
    # prompt-cache-off is a request field: tried inside one launch, in pairs with and without it
    cache = by.pop("prompt-cache-off")
    assert cache.status == "ok", cache.reason
    assert cache.unit == "pair" and cache.gate is None and "--lora" not in cache.command
    series = cache.in_launch["short-open"]
    assert series.stop in ("credit", "rule-out", "undecided", "second-answer")
    assert len(series.with_first) == len(series.outcomes) >= 1 and series.requests == 2 + 2 * len(series.outcomes)
    lines = [q for q in controls_run_lines(controls_run) if q.label.startswith("prompt-cache-off:")]
    assert len(lines) == series.requests
    assert all(q.request_extra.get("cache_prompt") is False for q in lines if q.label.endswith(":with"))
    assert all("cache_prompt" not in q.request_extra for q in lines if q.label.endswith(":without"))
    for row in by.values():
        assert row.status == "ok", row.reason
        # a control row stops at its second answer (with four requests in flight, at the end of the
        # round that brought it: llama-server on some CPUs answers concurrent requests otherwise);
        # the default row always runs in full
        n, d = row.answered["short-open"], row.distinct["short-open"]
        assert n == 5 or (row.configuration != "default" and (
            d == 2 if row.concurrency == 1 else (d >= 2 and n % row.concurrency == 0)))
        assert row.gate is not None and row.gate.prompts[0].compared_by == "token_ids"
        assert row.distinct["short-open"] == len({tuple(a.token_ids) for a in row.gate.prompts[0].answers})
    assert by["concurrency-4"].concurrency == 4 and by["concurrency-4"].gate.concurrency == 4
    assert any("--lora" in part for part in by["lora:adapter"].command)


@pytest.mark.live
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


# -- the process of elimination is a test -----------------------------------------------------------

def _gate_with(others: int, n: int, label: str = "default"):
    """n requests on one prompt, `others` of them (after the first) a second answer."""
    from suite.analysis.repro import Sample, analyse
    from suite.stages.gate_models import GatePromptResult, GateResult

    samples = [Sample(index=i, text="b" if 0 < i <= others else "a", token_ids=[2] if 0 < i <= others else [1])
               for i in range(n)]
    p = GatePromptResult.from_analysis(analyse(samples), prompt_id="long-open", max_tokens=8)
    return GateResult(label=label, n_requests=n, seed=42, temperature=0.0, logprobs=False, prompts=[p],
                      reproducible=None, verdict="", wall_s=1.0, http_s=1.0)


def _matrix(default_others: int, control_others: int, n: int, control_n: int | None = None,
            launches: int = 2) -> ControlMatrixResult:
    """A default row and a control row; the control row of `launches` launches (a row whose first
    launch gave one answer is launched again: the run's own rule), its counts those of one."""
    from suite.stages.controls import row_from_gate

    default = row_from_gate(MatrixRow(configuration="default", status="ok"), _gate_with(default_others, n))
    row = row_from_gate(MatrixRow(configuration="enforce-eager", status="ok", launches=launches),
                         _gate_with(control_others, control_n or n, "enforce-eager"))
    return ControlMatrixResult(runtime="vllm-cpu", arm="vllm-cpu", requested=["all"], n_requests=n,
                          prompts=["long-open"], rows=[default, row])


def test_one_answer_in_a_control_row_is_not_credited_when_the_default_row_rarely_varies():
    # default 1 other answer in 20, the control one answer in 20: Fisher p = 0.5 (old code: credited)
    from suite.stages.controls import eliminate

    result = _matrix(1, 0, 20)
    eliminate(result, _gate_with(1, 20))
    assert result.restoring == []
    (t,) = result.rows[1].tests
    assert t.p_value == pytest.approx(0.5) and not t.credited and t.n == 20 and t.default_n == 20
    assert t.needed == 91  # a 5 % share of other answers against none: 91 requests per row
    assert f"cannot tell; about {t.needed} requests per row would tell" in result.elimination
    assert "one answer in 20 over 2 launches against 1 other answer in 20 at default" in result.elimination


def test_a_cold_start_transient_is_tested_over_launches_not_requests():
    # vLLM on an H200 (random-qwen3, document-4k): the default row's first request alone differed
    # (the prompt computed before the prefix cache held it); prefix caching off gave one answer in 20.
    # That difference comes once per launch: more requests per row could never tell, launches can.
    from suite.analysis.repro import Sample, analyse
    from suite.stages.controls import row_from_gate, eliminate
    from suite.stages.gate_models import GatePromptResult, GateResult

    def gate(first_odd: bool, label: str) -> GateResult:
        samples = [Sample(index=i, text="b" if first_odd and i == 0 else "a",
                          token_ids=[2] if first_odd and i == 0 else [1]) for i in range(20)]
        p = GatePromptResult.from_analysis(analyse(samples), prompt_id="document-4k", max_tokens=8)
        return GateResult(label=label, n_requests=20, seed=42, temperature=0.0, logprobs=False, prompts=[p],
                          reproducible=None, verdict="", wall_s=1.0, http_s=1.0)

    default = row_from_gate(MatrixRow(configuration="default", status="ok"), gate(True, "default"))
    assert default.gate.prompts[0].pattern == "cold-transient"
    row = row_from_gate(MatrixRow(configuration="prefix-caching-off", status="ok"),
                         gate(False, "prefix-caching-off"))
    result = ControlMatrixResult(runtime="vllm", arm="vllm-gpu", requested=["prefix-caching-off"], n_requests=20,
                            prompts=["document-4k"], rows=[default, row])
    eliminate(result, gate(True, "default"))
    (t,) = result.rows[1].tests
    assert t.unit == "launch" and not t.credited and t.p_value == pytest.approx(0.5)
    assert t.needed == 3  # 0 of 3 launches against 3 of 3: p = 1/C(6, 3) = 0.05
    assert "so launches are the unit: 0 of 1 launch with it against 1 of 1 at default" in result.elimination
    assert "about 3 launches per row would tell" in result.elimination
    assert "requests per row would tell" not in result.elimination
    # as on the H200: prefix caching off answered every time what the default's cold request did
    assert "its one answer is the default row's first (cold) answer" not in result.elimination
    cold_row = row_from_gate(MatrixRow(configuration="prefix-caching-off", status="ok"), gate(False, "x"))
    for a in cold_row.gate.prompts[0].answers:
        a.token_ids, a.text = [2], "b"
    result.rows[1] = cold_row
    eliminate(result, gate(True, "default"))
    assert "its one answer is the default row's first (cold) answer, not the later one" in result.elimination
    # a control row that shows the transient too is a second answer, as before
    again = row_from_gate(MatrixRow(configuration="eager", status="ok"), gate(True, "eager"))
    result.rows.append(again)
    eliminate(result, gate(True, "default"))
    assert result.rows[2].tests[0].unit == "request" and not result.rows[2].tests[0].credited


def test_a_control_row_that_answered_twice_is_not_credited():
    from suite.stages.controls import eliminate

    result = _matrix(10, 0, 20, control_n=2)
    eliminate(result, _gate_with(10, 20))
    assert result.restoring == [] and result.rows[1].tests[0].n == 2


def test_a_real_effect_is_credited_with_its_test_and_n():
    from suite.stages.controls import eliminate

    result = _matrix(7, 0, 20)
    eliminate(result, _gate_with(7, 20))
    assert result.restoring == ["enforce-eager"]
    (t,) = result.rows[1].tests
    assert t.credited and t.p_value < 0.01
    assert "one-sided Fisher's exact test" in result.elimination and "at 0.05 over the matrix (1 control tested)" in result.elimination
    assert result.family == 1 and result.rows[1].p_adjusted == pytest.approx(t.p_value)


def test_one_launch_with_one_answer_is_never_credited():
    # Fisher alone would credit it (p < 0.01), but an autotuner's choice can be lucky in one launch
    from suite.stages.controls import eliminate

    result = _matrix(7, 0, 20, launches=1)
    eliminate(result, _gate_with(7, 20))
    (t,) = result.rows[1].tests
    assert result.restoring == [] and not t.credited and t.p_value < 0.01
    assert "a credit rests on 2 launches with the control" in t.text and "in one launch" in t.text


def test_a_second_launch_pools_its_answers_and_a_different_one_counts_as_a_second_answer():
    from suite.stages.controls import row_from_gate
    from suite.stages.controls.run import add_launch, one_answer_each

    first = row_from_gate(MatrixRow(configuration="enforce-eager", status="ok"), _gate_with(0, 20, "enforce-eager"))
    assert one_answer_each(first, None)
    same = row_from_gate(MatrixRow(configuration="enforce-eager", status="ok"), _gate_with(0, 20, "enforce-eager"))
    row = add_launch(first.model_copy(deep=True), same)
    assert row.launches == 2 and row.answered["long-open"] == 40 and row.distinct["long-open"] == 1
    assert row.modal_count["long-open"] == 40 and row.sent["long-open"] == 40
    # the second launch answered otherwise: two answers over the row's launches, never credited
    other = _gate_with(0, 20, "enforce-eager")
    for p in other.prompts:
        for a in p.answers:
            a.text, a.token_ids = a.text + " else", [*(a.token_ids or []), 9]
    row2 = add_launch(first.model_copy(deep=True), row_from_gate(
        MatrixRow(configuration="enforce-eager", status="ok"), other))
    assert row2.distinct["long-open"] == 2 and row2.modal_count["long-open"] == 20
    failed = add_launch(first.model_copy(deep=True), MatrixRow(configuration="enforce-eager", status="failed",
                                                               reason="engine died"))
    assert failed.status == "failed" and failed.reason == "launch 2: engine died"


def test_a_control_row_stops_at_its_second_answer_and_the_table_says_so():
    from suite.analysis.repro import Sample  # noqa: F401
    from suite.client import Completion
    from suite.stages.gate_models import load_gate_prompts
    from suite.stages.repeat import run_gate

    prompt = next(iter(load_gate_prompts().values()))
    answers = iter(["a", "a", "b", "a", "a", "a"])
    sent = []

    def complete(text, max_tokens, logprobs=None, extra=None):
        sent.append(1)
        a = next(answers)
        return Completion(text=a, token_ids=[ord(a)], finish_reason="stop", e2e_s=0.01)

    client = SimpleNamespace(params=SimpleNamespace(request_extra={}, seed=42, temperature=0.0), model="m",
                             complete=complete, chat=lambda *a, **k: complete("", **k))
    prompt = prompt.model_copy(update={"kind": "completion"})
    gate = run_gate(client, [prompt], 6, stop_after_distinct=2)
    assert len(sent) == 3 and gate.prompts[0].requests == 3 and gate.prompts[0].distinct_answers == 2
    full = run_gate(client, [prompt], 3)  # without the stop every request is sent
    assert full.prompts[0].requests == 3


def test_the_automatic_elimination_sends_only_the_prompts_that_varied(monkeypatch):
    from contextlib import contextmanager

    import suite.stages.controls as controls
    from suite.stages.gate_models import load_gate_prompts

    # the run half: the module whose globals `run` reads
    controls_run = importlib.import_module("suite.stages.controls.run")

    ids = list(load_gate_prompts())
    assert len(ids) >= 2
    gate = SimpleNamespace(prompts=[SimpleNamespace(prompt_id=ids[0], distinct_answers=2, pattern="varies")] +
                           [SimpleNamespace(prompt_id=pid, distinct_answers=1, pattern="stable") for pid in ids[1:]])
    asked: list[tuple[str, list[str] | None, int | None]] = []

    def fake_gate_on(ctx, running, client, label, controls_, extra=None, process_cold=True, prompts=None,
                     stop_after_distinct=None, requests=None):
        asked.append((label, prompts, stop_after_distinct))
        return _gate_with(0, 4, label)

    @contextmanager
    def launch(**kw):
        yield SimpleNamespace(startup_s=1.0, command=["x"], alive=lambda: True), None

    monkeypatch.setattr(controls_run, "_gate_on", fake_gate_on)  # where `run` reads it
    ctx = SimpleNamespace(runtime=get_definition("llamacpp"), controls_request=["prompt-cache-off"], arm_name="a",
                          profile=SimpleNamespace(gate_prompts=None, gate_requests=4), results={"gate": gate},
                          automatic_controls=True, launch=launch, carried={},
                          own=lambda model: controls.ControlMatrixSettings(in_launch=False))  # rows of their own launches
    result = controls_run.run(ctx)
    assert [a[0] for a in asked] == ["default", "prompt-cache-off"]  # the default row is always in the matrix
    assert all(a[1] == [ids[0]] for a in asked) and result.prompts == [ids[0]] and result.automatic
    assert asked[0][2] is None and asked[1][2] == 2  # the default row runs in full, the control stops early
    # with every control asked for (the bench's automatic matrix), the LoRA rows stay out: they
    # eliminate nothing; a named `--controls lora` or `all` outside the bench's own elimination runs them
    asked.clear()
    monkeypatch.setattr(controls_run, "run_lora", lambda ctx: (_ for _ in ()).throw(AssertionError("LoRA ran")))
    result = controls_run.run(SimpleNamespace(**{**vars(ctx), "controls_request": ["all"]}))
    assert "default" in [a[0] for a in asked] and len(asked) == 1 + len(get_definition("llamacpp").controls)
    assert result.lora is None


def test_a_transient_is_eliminated_launch_by_launch(monkeypatch):
    """The gate's only variance is a cold-start transient: every row is launches of a short gate (3
    requests per prompt), as many as the corrected test needs (two controls, Holm: 4 launches a row),
    and a control whose launches never show it is credited, 4 of 4 default launches against 0 of 4
    (p = 1/70, Holm-adjusted 0.029); one that shows it in one launch is not."""
    from contextlib import contextmanager

    import suite.stages.controls as controls
    from suite.analysis.repro import Sample, analyse
    from suite.stages.gate_models import GatePromptResult, GateResult, load_gate_prompts

    # the run half: the module whose globals `run` reads
    controls_run = importlib.import_module("suite.stages.controls.run")

    pid = list(load_gate_prompts())[0]
    gate = SimpleNamespace(prompts=[SimpleNamespace(prompt_id=pid, distinct_answers=2, pattern="cold-transient")])
    asked: list[tuple[str, int | None, int | None]] = []
    launches_seen: dict[str, int] = {}

    def series(first_odd: bool, n: int, label: str) -> GateResult:
        samples = [Sample(index=i, text="b" if first_odd and i == 0 else "a",
                          token_ids=[2] if first_odd and i == 0 else [1]) for i in range(n)]
        p = GatePromptResult.from_analysis(analyse(samples), prompt_id=pid, max_tokens=8)
        return GateResult(label=label, n_requests=n, seed=42, temperature=0.0, logprobs=False, prompts=[p],
                          reproducible=None, verdict="", wall_s=1.0, http_s=1.0)

    def fake_gate_on(ctx, running, client, label, controls_, extra=None, process_cold=True, prompts=None,
                     stop_after_distinct=None, requests=None):
        asked.append((label, requests, stop_after_distinct))
        launches_seen[label] = launches_seen.get(label, 0) + 1
        odd = label == "default" or (label == "slots-off" and launches_seen[label] == 2)
        return series(odd, requests or 20, label)

    @contextmanager
    def launch(**kw):
        yield SimpleNamespace(startup_s=1.0, command=["x"], alive=lambda: True), None

    monkeypatch.setattr(controls_run, "_gate_on", fake_gate_on)  # where `run` reads it
    runtime = get_definition("llamacpp")
    cache_off = "prompt-cache-off"
    other = next(n for n in runtime.controls if n not in (cache_off, "concurrency-4"))
    monkeypatch.setattr(runtime, "controls", {cache_off: runtime.controls[cache_off], "slots-off": runtime.controls[other]})
    ctx = SimpleNamespace(runtime=runtime, controls_request=[cache_off, "slots-off"], arm_name="a",
                          profile=SimpleNamespace(gate_prompts=None, gate_requests=20), results={"gate": gate},
                          automatic_controls=True, launch=launch, carried={},
                          own=lambda model: controls.ControlMatrixSettings(in_launch=False))  # the launch design
    result = controls_run.run(ctx)
    # a control row stops at its first launch that shows the transient: it cannot be credited then
    assert [a[0] for a in asked] == ["default"] * 4 + [cache_off] * 4 + ["slots-off"] * 2
    assert all(a[1] == controls.TRANSIENT_REQUESTS and a[2] is None for a in asked)
    assert result.launches_per_row == 4 and result.n_requests == 3
    by = {r.configuration: r for r in result.rows}
    assert by["default"].cold_odd[pid] == [True] * 4 and by[cache_off].cold_odd[pid] == [False] * 4
    assert by["default"].launches == 4
    assert result.restoring == [cache_off]
    (t,) = by[cache_off].tests
    assert t.unit == "launch" and t.credited and t.p_value == pytest.approx(1 / 70)
    assert by[cache_off].p_adjusted == pytest.approx(2 / 70) and result.family == 2
    assert f"{cache_off} on {pid}: the first answer alone differed in 0 of 4 launches against 4 of 4 at default" in result.elimination
    assert "2 controls tested, Holm" in result.elimination
    (s,) = by["slots-off"].tests
    assert not s.credited and s.others == 1 and "1 of 2 launches" in s.text


def test_llama_servers_prompt_cache_transient_is_eliminated_over_launches(tmp_path):
    """A real llama-server on the tiny model: 20 identical requests, the first after the start alone
    differs (its prompt cache); the elimination then runs three launches per row and credits
    prompt-cache-off, 3 of 3 default launches against 0 of 3 (p = 0.05), whose one answer is the
    default's cold one."""
    from suite.bench import BenchRequest, run_bench

    (s,) = run_bench(BenchRequest.build(model="tiny", arms=["llamacpp"], launcher="local", profile="quick", stages=["gate", "controls"], results=tmp_path / "results", stage_values={'controls': {'names': ["prompt-cache-off"], 'in_launch': False}}, gate_requests=20))
    assert s.status == "complete", s.reason
    # every stage says how much of the CPUs other processes took while it ran (the runtime is ours)
    assert set(s.contention) == {"gate", "controls"} and all(0 <= c.others_share <= 1 for c in s.contention.values())
    (p,) = s.gate.prompts
    c = s.controls
    if p.pattern == "stable":
        # On some CPUs (seen on one with AMX and AVX-512-FP16) llama-server's cached prompt gives
        # the cold answer: then nothing varied, and the matrix says so instead of crediting a control
        assert p.distinct_answers == 1 and p.answered == 20, p.pattern_text
        assert c.restoring == [] and c.elimination == "the answers did not vary: nothing to eliminate"
        return
    assert p.pattern == "cold-transient", p.pattern_text
    assert c.launches_per_row == 3
    by = {r.configuration: r for r in c.rows}
    assert by["default"].cold_odd[p.prompt_id] == [True, True, True]
    assert by["prompt-cache-off"].cold_odd[p.prompt_id] == [False, False, False]
    assert c.restoring == ["prompt-cache-off"]
    assert "0 of 3 launches against 3 of 3 at default" in c.elimination
    assert "its one answer is the default row's first (cold) answer" in c.elimination


def test_a_transient_rows_speed_and_energy_cover_all_its_launches():
    """A row of three launches reports tokens/s and J/token over the three gates (each launch's
    requests, not its start-up), not over the first launch alone; a launch without an energy
    reading leaves the row without one rather than with a part."""
    import suite.stages.controls as controls
    from suite.analysis.repro import Sample, analyse
    from suite.gpu import Energy
    from suite.stages.gate_models import GatePromptResult, GateResult

    def launch(n_tokens: int, http_s: float, joules: float | None) -> controls.MatrixRow:
        samples = [Sample(index=i, text="a", token_ids=[1] * n_tokens) for i in range(3)]
        p = GatePromptResult.from_analysis(analyse(samples), prompt_id="doc", max_tokens=64)
        gate = GateResult(label="default", n_requests=3, seed=42, temperature=0.0, logprobs=False, prompts=[p],
                          reproducible=True, verdict="", wall_s=http_s, http_s=http_s)
        row = controls.row_from_gate(controls.MatrixRow(configuration="default", controls=[], status="ok"), gate)
        row.energy = None if joules is None else Energy(joules=joules, wall_s=http_s, mean_power_w=joules / http_s).with_tokens(3 * n_tokens)
        return row

    rows = [launch(64, 1.0, 200.0), launch(64, 0.5, 100.0), launch(32, 0.5, 60.0)]
    first = rows[0]
    assert first.tokens_per_s == 192.0 and first.energy.j_per_token == pytest.approx(200 / 192, abs=1e-6)
    controls.pool_launches(first, rows)
    assert first.tokens_per_s == pytest.approx((192 + 192 + 96) / 2.0)
    assert first.energy.joules == 360.0 and first.energy.output_tokens == 480
    assert first.energy.j_per_token == pytest.approx(360 / 480) and first.energy.mean_power_w == pytest.approx(180.0)
    partial = [launch(64, 1.0, 200.0), launch(64, 1.0, None)]
    controls.pool_launches(partial[0], partial)
    assert partial[0].energy is None and partial[0].tokens_per_s == 192.0


# -- an interrupted matrix, rebuilt from its request lines ------------------------------------------

def _scripted_rows(script: dict[str, list[list[str]]], n: int, stop: dict[str, int | None]):
    """Each label's gate as the stage sends it (run_gate, its lines recorded as the record would keep
    them), on a client that answers the i-th gate prompt from `script[label][i]`: the prompts' ids,
    the rows the stage would have built, and every request line."""
    from suite.client import Completion
    from suite.stages.controls import MatrixRow, row_from_gate
    from suite.stages.lines import AnswerLine
    from suite.stages.gate_models import load_gate_prompts
    from suite.stages.repeat import run_gate

    prompts = [p.model_copy(update={"kind": "completion"}) for p in list(load_gate_prompts().values())[:2]]
    lines: list[AnswerLine] = []
    rows = []
    for label, answers in script.items():
        queues = {p.id: iter(texts) for p, texts in zip(prompts, answers)}
        current: list[str] = []

        def complete(text, max_tokens, logprobs=None, extra=None, _q=queues, _c=current):
            a = next(_q[_c[-1]])
            return Completion(text=a, token_ids=[ord(ch) for ch in a], finish_reason="stop", e2e_s=0.01,
                              completion_tokens=len(a))

        def record(kind, _c=current, **fields):
            lines.append(AnswerLine(kind=kind, at="2026-12-02T00:00:00Z", stage="controls", **fields))

        client = SimpleNamespace(params=SimpleNamespace(request_extra={}, seed=42, temperature=0.0), model="m",
                                 complete=complete, chat=lambda *a, **k: complete("", **k))
        gates = []
        for p in prompts:  # one prompt at a time, so the client knows which script to answer from
            current.append(p.id)
            gates.append(run_gate(client, [p], n, stop_after_distinct=stop.get(label), record=record, label=label,
                                  controls=[] if label == "default" else [label], kind="controls",
                                  process_cold=not gates))
        gate = gates[0].model_copy(update={"prompts": [g.prompts[0] for g in gates],
                                           "http_s": sum(g.http_s for g in gates)})
        rows.append(row_from_gate(MatrixRow(configuration=label, status="ok",
                                             controls=[] if label == "default" else [label]), gate))
    return [p.id for p in prompts], rows, lines


def _gate_for(prompt_ids, default_row):
    from suite.stages.gate_models import GateResult

    return default_row.gate.model_copy(update={"label": "default"}) if default_row.gate else GateResult(
        n_requests=0, seed=None, temperature=0.0, logprobs=False, prompts=[], reproducible=None, verdict="",
        wall_s=0, http_s=0)


def test_a_matrix_cut_short_is_rebuilt_from_its_lines_as_the_stage_would_have_built_it():
    """The rows a matrix finished before its run stopped come back from the request lines with the
    same counts, the same tests and the same elimination as the stage's own result; a row cut
    mid-way is named and left out, and no figure the lines do not hold (start-up, energy) is made up."""
    from suite.stages.controls import ControlMatrixResult, eliminate, rebuild

    n = 8
    varying = [f"v{i % 3}" for i in range(n)]
    script = {
        "default": [list(varying), ["same"] * n],
        "eager": [["one"] * n, ["same"] * n],  # one answer: the candidate
        "concurrency-4": [["x", "y"] + ["x"] * (n - 2), ["same"] * n],  # stops at its second answer
    }
    ids, rows, lines = _scripted_rows(script, n, {"default": None, "eager": 2, "concurrency-4": 2})
    gate = _gate_for(ids, rows[0])
    live = ControlMatrixResult(runtime="r", arm="a", requested=["all"], n_requests=n, prompts=ids, rows=rows)
    eliminate(live, gate)
    before = SimpleNamespace(gate=gate, runtime="r", arm="a")

    rebuilt = rebuild(lines, before)
    assert rebuilt is not None and [r.configuration for r in rebuilt.rows] == ["default", "eager", "concurrency-4"]
    for got, want in zip(rebuilt.rows, live.rows):
        assert (got.distinct, got.answered, got.sent, got.modal_count) == (want.distinct, want.answered, want.sent,
                                                                            want.modal_count)
        assert [(t.prompt_id, t.n, t.others, t.credited, t.p_value) for t in got.tests] == \
            [(t.prompt_id, t.n, t.others, t.credited, t.p_value) for t in want.tests]
        assert got.startup_s is None and got.energy is None
    # one launch of each row here: the live matrix credits nothing before a second launch, nor does the rebuilt
    assert rebuilt.restoring == live.restoring == []
    assert rebuilt.elimination == live.elimination
    assert "3 finished rows rebuilt from its request lines (default, eager, concurrency-4)" in rebuilt.interrupted
    assert "start-up times and energy are not kept" in rebuilt.interrupted

    # the run stopped inside the eager row: 3 requests of its second prompt, all alike
    eager = [q for q in lines if q.label == "eager"]
    cut_at = [i for i, q in enumerate(eager) if q.prompt_id == ids[1]][3]
    kept = [q for q in lines if q.label == "default"] + eager[:cut_at]
    cut = rebuild(kept, before)
    assert cut is not None and [r.configuration for r in cut.rows] == ["default"]
    assert f"cut mid-way and left out: eager ({n + 3} requests)" in cut.interrupted
    assert cut.restoring == [] and "no control of the 0 that ran" in cut.elimination


def test_what_the_lines_cannot_rebuild_is_left_to_the_one_line():
    """Nothing finished, a matrix of launches (a cold-start transient's rows), LoRA's rows: None,
    and the page names the lines kept instead."""
    from suite.stages.controls import rebuild

    n = 4
    ids, rows, lines = _scripted_rows({"default": [["p", "q", "p", "q"], ["s"] * n]}, n, {"default": None})
    gate = _gate_for(ids, rows[0])
    before = SimpleNamespace(gate=gate, runtime="r", arm="a")
    assert rebuild([], before) is None
    assert rebuild(lines[:-1], before) is None  # the default row cut at its last request: no row finished
    lora = [q.model_copy(update={"label": "lora:base"}) for q in lines]
    assert rebuild(lora, before) is None
    cold = gate.model_copy(update={"prompts": [p.model_copy(update={"distinct_answers": 2, "pattern": "cold-transient"})
                                               for p in gate.prompts]})
    assert rebuild(lines, SimpleNamespace(gate=cold, runtime="r", arm="a")) is None


def _gate_of(series: dict[str, tuple[int, int]], label: str = "default"):
    """Prompt id -> (others, n): n requests, `others` of them (after the first) a second answer."""
    from suite.analysis.repro import Sample, analyse
    from suite.stages.gate_models import GatePromptResult, GateResult

    prompts = []
    for pid, (others, n) in series.items():
        samples = [Sample(index=i, text="b" if 0 < i <= others else "a", token_ids=[2] if 0 < i <= others else [1])
                   for i in range(n)]
        prompts.append(GatePromptResult.from_analysis(analyse(samples), prompt_id=pid, max_tokens=8))
    return GateResult(label=label, n_requests=max(n for _, n in series.values()), seed=42, temperature=0.0,
                      logprobs=False, prompts=prompts, reproducible=None, verdict="", wall_s=1.0, http_s=1.0)


def test_a_control_that_brings_one_prompt_of_several_back_is_named_only_past_the_matrixs_tests():
    """No control brings both prompts back; `strong` brings short-open back so clearly that the test
    holds over all four prompt tests of the matrix (Bonferroni, p <= 0.05 / 4); `weak` passes its own
    test at 0.05 on short-open but not that one, so the verdict does not name it."""
    from suite.stages.controls import eliminate, row_from_gate

    default_gate = _gate_of({"long-open": (9, 20), "short-open": (9, 20)})
    rows = [row_from_gate(MatrixRow(configuration="default", status="ok"), default_gate),
            row_from_gate(MatrixRow(configuration="strong", status="ok", launches=2),
                          _gate_of({"long-open": (1, 2), "short-open": (0, 20)}, "strong")),
            row_from_gate(MatrixRow(configuration="weak", status="ok", launches=2),
                          _gate_of({"long-open": (1, 2), "short-open": (0, 7)}, "weak"))]
    result = ControlMatrixResult(runtime="vllm", arm="vllm", requested=["all"], n_requests=20,
                            prompts=["long-open", "short-open"], rows=rows)
    eliminate(result, default_gate)
    assert result.restoring == []
    weak = next(t for t in rows[2].tests if t.prompt_id == "short-open")
    assert weak.credited and 0.05 / 4 < weak.p_value <= 0.05  # its own test passes, the matrix's does not
    text = result.elimination
    assert text.startswith("no control of the 2 that ran is shown to bring long-open, short-open back to one "
                           "answer; on a prompt of its own: strong brings short-open back (p = ")
    assert "each p <= 0.05 / 4 (Bonferroni over the matrix's 4 prompt tests)" in text
    assert "weak brings" not in text
    # one prompt that varied: the verdict itself says whether a control brings it back
    single = _gate_of({"short-open": (9, 20)})
    one = ControlMatrixResult(runtime="vllm", arm="vllm", requested=["all"], n_requests=20, prompts=["short-open"],
                         rows=[row_from_gate(MatrixRow(configuration="default", status="ok"), single),
                               row_from_gate(MatrixRow(configuration="weak", status="ok"),
                                             _gate_of({"short-open": (1, 2)}, "weak"))])
    eliminate(one, single)
    assert "on a prompt of its own" not in one.elimination


def test_a_transient_matrix_plans_the_launches_its_corrected_test_needs():
    """Holm over the controls asks the smallest p to reach alpha / controls: 1 / C(2L, L) does so at
    L = 3 for one control, 4 for two or three, 5 for four to twelve (vLLM's six and more)."""
    from suite.stages.controls import launches_for

    assert [launches_for(m) for m in (1, 2, 3, 4, 6, 12)] == [3, 4, 4, 5, 5, 5]
    assert launches_for(13) == 6


def test_six_controls_of_no_effect_credit_none_beyond_the_family_level():
    """The matrix's family: six control rows, each one answer in 20 where the default gave 5 others in
    20: none passing alone at p = 0.024 is credited over the six (Holm)."""
    from suite.stages.controls import eliminate
    from suite.analysis.stats import fisher_fewer_others

    result = _matrix(5, 0, 20)
    extra = [r.model_copy(update={"configuration": f"c{i}"}) for i, r in enumerate(result.rows[1:] * 5)]
    result.rows.extend(extra)
    eliminate(result, _gate_with(5, 20))
    p = fisher_fewer_others(0, 20, 5, 20)
    assert p is not None and 0.05 / 6 < p <= 0.05
    assert result.restoring == [] and result.family == 6
    assert "not over the 6 controls" in result.elimination or "no control of the 6" in result.elimination


def test_a_control_row_whose_requests_all_failed_shows_failed_with_its_error():
    """A control row's prompt whose every request failed (context size exceeded) is failed, with the
    runtime's error, on the page and in its claim: never "0 of 0" beside a green note."""
    from suite.analysis.repro import Sample, analyse
    from suite.stages.controls import claims, eliminate, row_from_gate
    from suite.stages.controls.view import controls_view
    from suite.stages.gate_models import GatePromptResult, GateResult

    failed = [Sample(index=i, error="HTTP 500: context size exceeded") for i in range(20)]
    p = GatePromptResult.from_analysis(analyse(failed), prompt_id="long-open", max_tokens=8,
                                       error_messages=["HTTP 500: context size exceeded"])
    gate = GateResult(label="eager", n_requests=20, seed=42, temperature=0.0, logprobs=False, prompts=[p],
                      reproducible=None, verdict="", wall_s=1.0, http_s=1.0)
    result = _matrix(7, 0, 20)
    result.rows[1] = row_from_gate(MatrixRow(configuration="enforce-eager", status="ok"), gate)
    eliminate(result, _gate_with(7, 20))
    assert result.restoring == []
    view = controls_view(result, ["long-open"])
    (cell,) = view["by_conf"]["enforce-eager"]["cells"]
    assert cell["answered"] == 0 and cell["errors"] == 20 and "context size exceeded" in cell["error"]
    (claim,) = [c for c in claims(result, None) if c.kind == "control" and c.configuration == "enforce-eager"]
    assert claim.verdict == "every request failed" and claim.good is None


def test_a_credit_whose_answers_were_all_cut_at_the_cap_says_so():
    from suite.stages.controls import claims, eliminate

    result = _matrix(7, 0, 20)
    row = result.rows[1]
    for p in row.gate.prompts:
        p.truncated, p.max_tokens = p.answered, 64
    eliminate(result, _gate_with(7, 20))
    assert result.restoring == ["enforce-eager"]
    assert "up to the cap: every answer of enforce-eager on long-open was cut at 64 tokens" in result.elimination
    (claim,) = [c for c in claims(result, None) if c.kind == "control" and c.configuration == "enforce-eager"]
    assert any("cut at 64 tokens" in x for x in claim.caveats)


def test_a_rebuilt_rows_kernels_come_from_its_own_start_up_log(tmp_path):
    """A matrix cut short keeps each row's start-up log in the run's logs: the rebuilt row gets its
    control's part and source from the definition and the kernels its own launch named; a
    kernel-part row whose part's kernels equal the default row's is `unchanged` (it tested nothing),
    one whose part changed stays a row of the elimination."""
    from suite.stages.controls import rebuild

    n = 4
    script = {"default": [["p", "q", "p", "q"], ["s"] * n],
              "linear-marlin": [["a", "b"], ["s"] * n],
              "linear-triton": [["c", "d"], ["s"] * n]}
    ids, rows, lines = _scripted_rows(script, n, {"default": None, "linear-marlin": 2, "linear-triton": 2})
    logs = tmp_path / "logs"
    logs.mkdir()
    line = "(EngineCore pid=1) INFO 12-06 07:33:16 [compressed_tensors_wNa16.py:112] Using {} for CompressedTensorsWNA16\n"
    (logs / "runtime-default-100.log").write_text(line.format("MacheteLinearKernel") + line.format("MarlinLinearKernel"))
    (logs / "runtime-linear-marlin-200.log").write_text(line.format("MarlinLinearKernel"))
    # the switch accepted and ignored: the same kernels as the default's
    (logs / "runtime-linear-triton-300.log").write_text(line.format("MacheteLinearKernel") + line.format("MarlinLinearKernel"))
    before = SimpleNamespace(gate=_gate_for(ids, rows[0]), runtime="vllm", arm="a")
    rebuilt = rebuild(lines, before, logs)
    assert rebuilt is not None
    got = {r.configuration: r for r in rebuilt.rows}
    assert got["default"].kernel_path == {"linear": "MacheteLinearKernel + MarlinLinearKernel"}
    marlin, triton = got["linear-marlin"], got["linear-triton"]
    assert marlin.status == "ok" and marlin.part == "linear" and marlin.kernel_path == {"linear": "MarlinLinearKernel"}
    assert marlin.source.startswith("vllm 0.24.0: ")
    assert triton.status == "unchanged" and "did not change the linear kernels" in triton.reason
    # without the logs the rows are kept as the lines say, their kernels unknown
    bare = rebuild(lines, before)
    assert bare is not None and all(r.kernel_path is None for r in bare.rows)
    assert {r.status for r in bare.rows} == {"ok"}


def test_an_in_launch_rows_stop_is_made_again_from_its_pairs():
    """random-qwen3's prefix-caching-off row, tried inside one launch (11 pairs, all favourable: a
    credit): the same row with its pairs made concordant reads as the pairs say, whatever the stop
    the record stored; a stop the pairs cannot hold (a second answer with the control) stays."""
    from pathlib import Path

    from suite.records import load_all
    from suite.stages.controls import recompute

    root = Path(__file__).resolve().parents[3] / "docs" / "examples" / "gpu-vllm-results"
    s = next(x for x in load_all(root) if x.run_id.endswith("-37d705a9"))
    row = next(r for r in s.controls.rows if r.in_launch)
    series = row.in_launch["document-4k"]
    assert series.stop == "credit" and row.configuration in s.controls.restoring
    edited = s.controls.model_copy(deep=True)
    edited_row = next(r for r in edited.rows if r.in_launch)
    edited_row.in_launch["document-4k"].outcomes = ["C"] * len(series.outcomes)  # the pairs alike: no evidence
    again = recompute(edited, s)
    stop = next(r for r in again.rows if r.in_launch).in_launch["document-4k"].stop
    assert stop != "credit" and row.configuration not in again.restoring
    # the rows the run did not start because of that credit now say it no longer stands
    skipped = [r for r in again.rows if r.status == "skipped"]
    assert skipped and all("today's test does not credit it, so nothing was tested here" in r.reason for r in skipped)
    assert all("already brings every prompt back" in r.reason for r in s.controls.rows if r.status == "skipped")
    kept = s.controls.model_copy(deep=True)
    next(r for r in kept.rows if r.in_launch).in_launch["document-4k"].stop = "second-answer"
    assert next(r for r in recompute(kept, s).rows if r.in_launch).in_launch["document-4k"].stop == "second-answer"


# -- combinations of kernel parts -------------------------------------------------------------------

def test_a_combination_applies_every_part_together_each_checked():
    """`a+b` is one row with both controls: their args and env in order, each part's kernel override
    named at launch, the largest concurrency; its kernel parts are each part's. A part that is not a
    control, `default`, or one control twice is one line naming the combination."""
    from pathlib import Path

    from suite.bench.plan import ArmPlan
    from suite.definitions import OVERRIDE_ENV

    vllm = get_definition("vllm")
    both = vllm.control("moe-wna16-triton+linear-marlin")
    assert vllm.parts("moe-wna16-triton+linear-marlin") == ["moe-wna16-triton", "linear-marlin"]
    assert vllm.kernel_parts("moe-wna16-triton+linear-marlin") == ["moe", "linear"]
    assert both.description == (f"{vllm.control('moe-wna16-triton').description} together with "
                                f"{vllm.control('linear-marlin').description}")
    assert both.args == vllm.control("linear-marlin").args and both.kernel is None
    arm = SimpleNamespace(controls=[], env={}, args=[])
    card = SimpleNamespace(served_name="m", sampling=SimpleNamespace(seed=1), context_length=4096)
    plan = SimpleNamespace(arm=arm, runtime=vllm, card=card, model_path=Path("/m"), lora=[])
    spec = ArmPlan.spec(plan, ["moe-wna16-triton+linear-marlin"], Path("/tmp/x.log"))  # type: ignore[arg-type]
    assert spec.env[OVERRIDE_ENV] == "moe-wna16-triton"  # the part's override, though the joined control has none
    assert all(a in spec.args for a in vllm.control("linear-marlin").args)
    for wrong, said in (("moe-wna16-triton+turbo", "has no control 'turbo'"),
                        ("default+eager", "a combination joins two or more different controls"),
                        ("eager+eager", "a combination joins two or more different controls")):
        with pytest.raises(SuiteError, match=said):
            resolve_requested(SimpleNamespace(runtime=vllm), [wrong])
    llama = get_definition("llamacpp")
    assert llama.control("no-repack+concurrency-4").concurrency == 4
    assert llama.control("no-repack+concurrency-4").args == ["--no-repack"]


def _part_row(name: str, part: str | None, credited: list[bool], starts_differ: bool = False) -> MatrixRow:
    from suite.stages.controls.result import RowTest

    row = MatrixRow(configuration=name, controls=[name], status="ok", part=part)
    row.tests = [RowTest.model_construct(prompt_id=f"p{i}", credited=c, launch_answers=2 if starts_differ else 1)
                 for i, c in enumerate(credited)]
    assert row.starts_differ is starts_differ
    return row


def test_the_smallest_combinations_come_only_where_no_single_part_restores_one_answer():
    from suite.stages.controls.elimination import COMBINATIONS_MAX, combinations_to_try

    def matrix(rows, restoring=()):
        r = ControlMatrixResult(runtime="vllm", arm="a", requested=["all"], n_requests=20, prompts=["p0", "p1"],
                                rows=[MatrixRow(configuration="default", status="ok"), *rows])
        r.restoring = list(restoring)
        return r

    lin, att = _part_row("linear-x", "linear", [False, False]), _part_row("attention-x", "attention", [False, False])
    eager = _part_row("eager", None, [False, False])
    # the NVFP4 matrix of the H100: the MoE emulation restores one answer inside each launch only
    moe = _part_row("moe-x", "moe", [True, True], starts_differ=True)
    assert combinations_to_try(matrix([lin, moe, att, eager], ["moe-x"])) == ["moe-x+linear-x", "moe-x+attention-x"]
    # a part that restores one answer outright: nothing to combine
    whole = _part_row("moe-x", "moe", [True, True])
    assert combinations_to_try(matrix([lin, whole, att], ["moe-x"])) == []
    # no part moved the count: the parts are ruled out, nothing combined
    assert combinations_to_try(matrix([lin, att, eager])) == []
    # two parts each credited on one prompt: the pair of them, not the parts that moved nothing
    half_l, half_m = _part_row("linear-y", "linear", [True, False]), _part_row("moe-y", "moe", [False, True])
    assert combinations_to_try(matrix([half_l, att, half_m])) == ["linear-y+moe-y"]
    # never one part with itself, never a row already in the matrix, at most COMBINATIONS_MAX
    other_lin = _part_row("linear-z", "linear", [False, False])
    done = _part_row("moe-x+attention-x", "moe+attention", [False, False])
    assert combinations_to_try(matrix([moe, lin, other_lin, att, done], ["moe-x"])) == [
        "moe-x+linear-x", "moe-x+linear-z"]
    many = [_part_row(f"attention-{i}", "attention", [False, False]) for i in range(6)]
    assert len(combinations_to_try(matrix([moe, *many], ["moe-x"]))) == COMBINATIONS_MAX


def test_a_combination_row_names_each_part_it_changed():
    from suite.stages.controls.elimination import subject_of

    default = MatrixRow(configuration="default", status="ok",
                        kernel_path={"moe": "MARLIN (NvFp4)", "linear": "MarlinNvFp4LinearKernel"})
    row = MatrixRow(configuration="moe-x+linear-x", status="ok", part="moe+linear",
                    kernel_path={"moe": "EMULATION (NvFp4)", "linear": "EmulationNvFp4LinearKernel"})
    assert subject_of(row, default) == ("the MoE layers' kernels MARLIN (NvFp4), with it EMULATION (NvFp4) together "
                                        "with the linear layers' kernels MarlinNvFp4LinearKernel, with it "
                                        "EmulationNvFp4LinearKernel")


def test_the_combinations_run_after_the_single_rows_and_join_the_family(monkeypatch):
    """The stage's own wiring: once the single rows are in and none restores one answer, the rows
    `combinations_to_try` names are launched (one launch each, both controls in it) and the matrix's
    test is made again over every row, the combinations in its family."""
    from contextlib import contextmanager

    import suite.stages.controls as controls

    controls_run = importlib.import_module("suite.stages.controls.run")
    launched: list[list[str]] = []
    seen: list[list[str]] = []

    def fake_gate_on(ctx, running, client, label, controls_, extra=None, process_cold=True, prompts=None,
                     stop_after_distinct=None, requests=None):
        return _gate_with(7 if label == "default" else 1, 20 if label == "default" else 2, label)

    @contextmanager
    def launch(controls=None, **kw):
        launched.append(list(controls or []))
        yield SimpleNamespace(startup_s=1.0, command=["x"], alive=lambda: True), None

    def combos(result):
        seen.append([r.configuration for r in result.rows])
        return ["linear-marlin+moe-wna16-triton"] if len(seen) == 1 else []

    monkeypatch.setattr(controls_run, "_gate_on", fake_gate_on)
    monkeypatch.setattr(controls_run, "combinations_to_try", combos)
    ctx = SimpleNamespace(runtime=get_definition("vllm"), controls_request=["linear-marlin", "moe-wna16-triton"],
                          arm_name="a", profile=SimpleNamespace(gate_prompts=["long-open"], gate_requests=20),
                          results={"gate": _gate_with(7, 20)}, automatic_controls=False, launch=launch, carried={},
                          signature=SimpleNamespace(kernel_path=None),
                          own=lambda model: controls.ControlMatrixSettings(in_launch=False))
    result = controls_run.run(ctx)
    assert seen[0] == ["default", "linear-marlin", "moe-wna16-triton"]  # asked once the single rows were in
    assert launched[-1] == ["linear-marlin+moe-wna16-triton"]
    both = result.rows[-1]
    assert both.configuration == "linear-marlin+moe-wna16-triton" and both.part == "linear+moe"
    assert both.p_adjusted is not None and result.family == 3  # the combination is a test of the family
    # switched off in the stage's settings: no combination is asked for
    seen.clear()
    off = SimpleNamespace(**{**vars(ctx), "own": lambda model: controls.ControlMatrixSettings(
        in_launch=False, combinations=False)})
    assert [r.configuration for r in controls_run.run(off).rows] == ["default", "linear-marlin", "moe-wna16-triton"]
    assert seen == []
