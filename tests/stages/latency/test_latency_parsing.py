"""The latency stage's pure parts: runtime-reported timings and Prometheus histogram deltas."""

import threading
from types import SimpleNamespace

import pytest

from suite.client import Completion, GenerationParams
from suite.definitions import MetricsSpec, RuntimeDefinition, TimingsSpec, get_definition
from suite.errors import SuiteError
from suite.profiles import get_profile
import suite.stages.latency.run as lat  # the run half: the requests it sends, timed

LAT_RUN = lat
from suite.analysis.stats import summarize

# What the shipped definitions declare: vLLM's histograms, llama-server's `timings` fields.
VLLM = get_definition("vllm-cpu").metrics
LLAMA = get_definition("llamacpp").timings

VLLM_BEFORE = """
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_sum{model_name="tiny"} 1.5
vllm:time_to_first_token_seconds_count{model_name="tiny"} 3.0
vllm:inter_token_latency_seconds_sum{model_name="tiny"} 2.0
vllm:inter_token_latency_seconds_count{model_name="tiny"} 100.0
vllm:request_time_per_output_token_seconds_sum{model_name="tiny"} 0.06
vllm:request_time_per_output_token_seconds_count{model_name="tiny"} 3.0
vllm:e2e_request_latency_seconds_sum{model_name="tiny"} 9.0
vllm:e2e_request_latency_seconds_count{model_name="tiny"} 3.0
process_cpu_seconds_total 12.5
"""
VLLM_AFTER = """
vllm:time_to_first_token_seconds_sum{model_name="tiny"} 2.3
vllm:time_to_first_token_seconds_count{model_name="tiny"} 7.0
vllm:inter_token_latency_seconds_sum{model_name="tiny"} 6.0
vllm:inter_token_latency_seconds_count{model_name="tiny"} 300.0
vllm:request_time_per_output_token_seconds_sum{model_name="tiny"} 0.16
vllm:request_time_per_output_token_seconds_count{model_name="tiny"} 7.0
vllm:e2e_request_latency_seconds_sum{model_name="tiny"} 21.0
vllm:e2e_request_latency_seconds_count{model_name="tiny"} 7.0
vllm:num_requests_running{model_name="tiny"} NaN
"""


def test_prometheus_deltas_give_the_means_of_the_new_requests():
    before, after = lat.parse_prometheus(VLLM_BEFORE), lat.parse_prometheus(VLLM_AFTER)
    assert before["process_cpu_seconds_total"] == 12.5
    assert "vllm:num_requests_running" not in after  # NaN samples are dropped
    means = lat.histogram_means(before, after, VLLM)
    assert means["ttft"] == (pytest.approx(0.2), 4)
    # TPOT from the per-request histogram (4 requests, mean 0.025 s), not the per-token ITL one (200 gaps)
    assert means["tpot"] == (pytest.approx(0.025), 4)
    assert means["e2e"] == (pytest.approx(3.0), 4)
    assert lat.histogram_means(after, after, VLLM) == {}


def test_llama_server_timings():
    t = {"prompt_n": 30, "prompt_ms": 40.0, "predicted_n": 11, "predicted_ms": 200.0,
         "predicted_per_token_ms": 18.18}
    got = lat.reported_timings(t, LLAMA)
    assert got == {"ttft": pytest.approx(0.04), "e2e": pytest.approx(0.24), "tpot": pytest.approx(0.02)}
    assert lat.reported_timings(None, LLAMA) is None
    assert lat.reported_timings({"prompt_ms": "x"}, LLAMA) is None
    assert "tpot" not in lat.reported_timings({"prompt_ms": 1, "predicted_ms": 1, "predicted_n": 1}, LLAMA)
    # a runtime whose definition declares no [timings] reports none, whatever its replies carry
    assert lat.reported_timings(t, TimingsSpec()) is None
    # the fields are the definition's: another server's names read the same way
    other = TimingsSpec(prompt_ms="p", generation_ms="g", generated_tokens="n")
    assert lat.reported_timings({"p": 40.0, "g": 200.0, "n": 11}, other) == got


def test_the_shipped_definitions_declare_what_their_servers_report():
    """vLLM (GPU, CPU, HUMMING): the per-request histograms; llama-server (CPU, CUDA): its `timings`
    fields; llama-cpp-python and LM Studio report neither."""
    names = {"ttft": ["vllm:time_to_first_token_seconds"], "tpot": ["vllm:request_time_per_output_token_seconds"],
             "e2e": ["vllm:e2e_request_latency_seconds"]}
    for name in ("vllm", "vllm-cpu", "vllm-humming"):
        d = get_definition(name)
        assert d.metrics.by_quantity() == names and not d.timings.declared
    for name in ("llamacpp", "llamacpp-cuda"):
        d = get_definition(name)
        assert d.timings == TimingsSpec(prompt_ms="prompt_ms", generation_ms="predicted_ms",
                                        generated_tokens="predicted_n", cached_tokens="cache_n")
        assert not d.metrics.declared
    for name in ("llamacpp-python", "lmstudio"):
        d = get_definition(name)
        assert not d.metrics.declared and d.timings == TimingsSpec()


def test_token_count_and_tpot_from_a_completion():
    c = Completion(text="abc", completion_tokens=None, ttft_s=0.1, e2e_s=1.1,
                   chunk_times_s=[0.1, 0.35, 0.6, 0.85, 1.1], server_timings={"predicted_n": 5})
    n = lat._n_tokens(c)
    assert n == 5
    assert lat._tpot(c, n) == pytest.approx(0.25)
    c2 = Completion(text="abc", ttft_s=0.1, e2e_s=1.1, chunk_times_s=[0.1, 0.5, 1.1])
    assert lat._n_tokens(c2) == 3
    assert lat._tpot(c2, 1) is None


# -- the vLLM cross-check counts requests, not tokens ---------------------------------------------

def _level(ttft: list[float], tpot: list[float], e2e: list[float]) -> lat.LatencyLevel:
    d = summarize([1.0])
    return lat.LatencyLevel(concurrency=1, requests=len(e2e), failed=0, wall_s=1.0, ttft_s=summarize(ttft),
                            itl_s=d, tpot_s=summarize(tpot), e2e_s=summarize(e2e), output_tokens=d,
                            output_tokens_per_s=d, overhead_ms=d)


def test_vllm_cross_check_n_is_the_request_count_not_the_token_count():
    """20 requests of 128 tokens: the ITL histogram grows by 2,540 gaps, the request histograms by 20."""
    before = lat.parse_prometheus(
        "vllm:time_to_first_token_seconds_sum 0\nvllm:time_to_first_token_seconds_count 0\n"
        "vllm:inter_token_latency_seconds_sum 0\nvllm:inter_token_latency_seconds_count 0\n"
        "vllm:time_per_output_token_seconds_sum 0\nvllm:time_per_output_token_seconds_count 0\n"
        "vllm:request_time_per_output_token_seconds_sum 0\nvllm:request_time_per_output_token_seconds_count 0\n"
        "vllm:e2e_request_latency_seconds_sum 0\nvllm:e2e_request_latency_seconds_count 0\n")
    after = lat.parse_prometheus(
        "vllm:time_to_first_token_seconds_sum 1.0\nvllm:time_to_first_token_seconds_count 20\n"
        "vllm:inter_token_latency_seconds_sum 50.8\nvllm:inter_token_latency_seconds_count 2540\n"
        "vllm:time_per_output_token_seconds_sum 50.8\nvllm:time_per_output_token_seconds_count 2540\n"
        "vllm:request_time_per_output_token_seconds_sum 0.4\nvllm:request_time_per_output_token_seconds_count 20\n"
        "vllm:e2e_request_latency_seconds_sum 60.0\nvllm:e2e_request_latency_seconds_count 20\n")
    level = _level([0.05] * 20, [0.021] * 20, [3.0] * 20)
    rt = lat._runtime_timings([], level, before, after, VLLM)
    assert rt is not None and rt.source == "vllm /metrics"
    assert rt.n == 20
    assert (rt.n_ttft, rt.n_tpot, rt.n_e2e) == (20, 20, 20)
    assert rt.tpot_mean_s == pytest.approx(0.02)
    assert rt.tpot_mean_diff_ms == pytest.approx(1.0)


def test_vllm_without_the_per_request_tpot_histogram_reports_no_tpot():
    before = lat.parse_prometheus("vllm:e2e_request_latency_seconds_sum 0\nvllm:e2e_request_latency_seconds_count 0\n"
                                  "vllm:inter_token_latency_seconds_sum 0\nvllm:inter_token_latency_seconds_count 0\n")
    after = lat.parse_prometheus("vllm:e2e_request_latency_seconds_sum 6\nvllm:e2e_request_latency_seconds_count 2\n"
                                 "vllm:inter_token_latency_seconds_sum 5\nvllm:inter_token_latency_seconds_count 250\n")
    rt = lat._runtime_timings([], _level([0.1, 0.1], [0.02, 0.02], [3.0, 3.0]), before, after, VLLM)
    assert rt is not None and rt.n == 2 and rt.tpot_mean_s is None and rt.tpot_mean_diff_ms is None


def test_prometheus_text_with_braces_and_escapes_in_labels():
    text = (
        '# TYPE vllm:e2e_request_latency_seconds histogram\n'
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="org/m{1}"} 4\n'
        'vllm:e2e_request_latency_seconds_sum{model_name="org/m{1}"} 8.5\n'
        'vllm:e2e_request_latency_seconds_count{model_name="say \\"hi\\""} 4\n'
        'vllm:e2e_request_latency_seconds_count{model_name="other"} 1 1700000000000\n'
    )
    got = lat.parse_prometheus(text)
    assert got["vllm:e2e_request_latency_seconds_sum"] == 8.5
    assert got["vllm:e2e_request_latency_seconds_count"] == 5.0
    assert got["vllm:e2e_request_latency_seconds_bucket"] == 4.0
    assert lat.parse_prometheus("not a metric line {{{\n") == {}


# -- unique prompts --------------------------------------------------------------------------------

def test_prompt_prefixes_are_unique_fixed_length_and_deterministic():
    prompts = [lat.prompt_for(i) for i in range(lat.MAX_REQUESTS)]
    assert len(set(prompts)) == lat.MAX_REQUESTS
    assert len({len(p) for p in prompts}) == 1
    assert lat.prompt_for(7) == "Request 0007: " + lat.PROMPT == lat.prompt_for(7)
    # digits only vary, in a fixed-width field: the token length is the same on digit-splitting tokenizers
    assert {p[: len("Request ")] for p in prompts} == {"Request "}
    with pytest.raises(SuiteError):
        lat.prompt_for(lat.MAX_REQUESTS)


class _FakeClient:
    params = GenerationParams()

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.lock = threading.Lock()

    def complete(self, prompt: str, **kw) -> Completion:
        with self.lock:
            self.prompts.append(prompt)
        return Completion(text="x y", finish_reason="length", completion_tokens=3, prompt_tokens=40,
                          ttft_s=0.01, e2e_s=0.03, chunk_times_s=[0.01, 0.02, 0.03], stream_close_s=0.5,
                          server_timings={"prompt_n": 40, "prompt_ms": 5.0, "predicted_n": 3,
                                          "predicted_ms": 20.0, "cache_n": 1})

    def async_client(self, **kw) -> "_FakeClient":  # the concurrent levels' asyncio twin
        return self

    async def __aenter__(self) -> "_FakeClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def complete_stream(self, prompt: str, **kw) -> Completion:
        return self.complete(prompt, **kw)


def test_every_latency_request_has_its_own_prompt(monkeypatch: pytest.MonkeyPatch):
    """Warm-up and every level: no prompt repeats, so TTFT cannot be a prompt-cache hit."""
    monkeypatch.setattr(LAT_RUN, "scrape_metrics", lambda base_url, spec: None)
    records: list[dict] = []
    client = _FakeClient()
    ctx = SimpleNamespace(
        client=client, base_url="http://127.0.0.1:9", runtime=get_definition("llamacpp"),
        sampling=SimpleNamespace(seed=42, temperature=0.0, top_p=None),
        profile=get_profile("quick").model_copy(update={"stage_settings": {"latency": {
            "max_tokens": 3, "warmup": 2, "requests": 5, "concurrency": [1, 3]}}}),
        signature=SimpleNamespace(digest="d" * 64), own=lambda model: None,
        record_request=lambda kind, **kw: records.append(kw),
    )
    result = lat.run(ctx)  # type: ignore[arg-type]
    assert len(client.prompts) == 2 + 5 * 2
    assert len(set(client.prompts)) == len(client.prompts)
    assert result.prompt_cache == "unique-prefix" and result.prompt_prefix == lat.PROMPT_PREFIX
    assert [lv.first_index for lv in result.levels] == [2, 7]
    assert sorted(r["prompt_index"] for r in records) == list(range(12))
    lv = result.levels[0]
    assert lv.e2e_s.p50 == pytest.approx(0.03)  # the last token chunk ...
    assert lv.stream_close_s is not None and lv.stream_close_s.p50 == pytest.approx(0.5)  # ... not the close
    assert lv.prompt_tokens is not None and (lv.prompt_tokens.n, lv.prompt_tokens.min, lv.prompt_tokens.max) == (5, 40, 40)
    assert lv.prompt_cached_tokens is not None and lv.prompt_cached_tokens.p50 == 1
    assert lv.runtime_timings is not None and lv.runtime_timings.source == "llama-server timings"
    assert lv.runtime_timings.n == 5 and lv.runtime_timings.ttft_mean_s == pytest.approx(0.005)


def test_a_runtime_that_declares_no_timings_gets_none(monkeypatch: pytest.MonkeyPatch):
    """The same replies (a `timings` object with cache_n) from a runtime whose definition declares
    neither [timings] nor [metrics]: no runtime timings, no cached tokens, no /metrics asked."""
    asked: list[str] = []
    monkeypatch.setattr(LAT_RUN.httpx, "get", lambda url, **kw: asked.append(url))
    ctx = SimpleNamespace(
        client=_FakeClient(), base_url="http://127.0.0.1:9",
        runtime=RuntimeDefinition(name="plain", description="an OpenAI-compatible server"),
        record_request=lambda kind, **kw: None,
    )
    level = lat.run_level(ctx, 1, 3, 3)  # type: ignore[arg-type]
    assert level.runtime_timings is None and level.prompt_cached_tokens is None and asked == []


def test_metrics_are_scraped_only_where_declared_histograms_are_served(monkeypatch: pytest.MonkeyPatch):
    pages = {"http://x/metrics": "process_cpu_seconds_total 1\nvllm:num_requests_running 0\n"}
    monkeypatch.setattr(LAT_RUN.httpx, "get", lambda url, **kw: SimpleNamespace(status_code=200, text=pages[url]))
    assert lat.scrape_metrics("http://x", VLLM) is None  # no histogram of ours
    pages["http://x/metrics"] = VLLM_BEFORE
    got = lat.scrape_metrics("http://x", VLLM)
    assert got is not None and got["vllm:e2e_request_latency_seconds_count"] == 3.0
    assert lat.scrape_metrics("http://x", MetricsSpec()) is None


def test_old_latency_records_still_validate():
    old = {"version": 1, "prompt_id": "latency-story-v1", "endpoint": "/v1/completions", "max_tokens": 8,
           "warmup": 1, "levels": [], "signature_digest": "x"}
    r = lat.LatencyResult.model_validate(old)
    assert r.prompt_cache is None and r.prompt_prefix is None
