"""The latency stage's pure parts: runtime-reported timings and Prometheus histogram deltas."""

import pytest

from suite.client import Completion
from suite.stages import latency as lat

VLLM_BEFORE = """
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_sum{model_name="tiny"} 1.5
vllm:time_to_first_token_seconds_count{model_name="tiny"} 3.0
vllm:inter_token_latency_seconds_sum{model_name="tiny"} 2.0
vllm:inter_token_latency_seconds_count{model_name="tiny"} 100.0
vllm:e2e_request_latency_seconds_sum{model_name="tiny"} 9.0
vllm:e2e_request_latency_seconds_count{model_name="tiny"} 3.0
process_cpu_seconds_total 12.5
"""
VLLM_AFTER = """
vllm:time_to_first_token_seconds_sum{model_name="tiny"} 2.3
vllm:time_to_first_token_seconds_count{model_name="tiny"} 7.0
vllm:inter_token_latency_seconds_sum{model_name="tiny"} 6.0
vllm:inter_token_latency_seconds_count{model_name="tiny"} 300.0
vllm:e2e_request_latency_seconds_sum{model_name="tiny"} 21.0
vllm:e2e_request_latency_seconds_count{model_name="tiny"} 7.0
vllm:num_requests_running{model_name="tiny"} NaN
"""


def test_prometheus_deltas_give_the_means_of_the_new_requests():
    before, after = lat.parse_prometheus(VLLM_BEFORE), lat.parse_prometheus(VLLM_AFTER)
    assert before["process_cpu_seconds_total"] == 12.5
    assert "vllm:num_requests_running" not in after  # NaN samples are dropped
    means = lat.vllm_means(before, after)
    assert means["ttft"] == (pytest.approx(0.2), 4)
    assert means["tpot"] == (pytest.approx(0.02), 200)
    assert means["e2e"] == (pytest.approx(3.0), 4)
    assert lat.vllm_means(after, after) == {}


def test_llama_server_timings():
    t = {"prompt_n": 30, "prompt_ms": 40.0, "predicted_n": 11, "predicted_ms": 200.0,
         "predicted_per_token_ms": 18.18}
    got = lat._llama_timings(t)
    assert got == {"ttft": pytest.approx(0.04), "e2e": pytest.approx(0.24), "tpot": pytest.approx(0.02)}
    assert lat._llama_timings(None) is None
    assert lat._llama_timings({"prompt_ms": "x"}) is None
    assert "tpot" not in lat._llama_timings({"prompt_ms": 1, "predicted_ms": 1, "predicted_n": 1})


def test_token_count_and_tpot_from_a_completion():
    c = Completion(text="abc", completion_tokens=None, ttft_s=0.1, e2e_s=1.1,
                   chunk_times_s=[0.1, 0.35, 0.6, 0.85, 1.1], server_timings={"predicted_n": 5})
    n = lat._n_tokens(c)
    assert n == 5
    assert lat._tpot(c, n) == pytest.approx(0.25)
    c2 = Completion(text="abc", ttft_s=0.1, e2e_s=1.1, chunk_times_s=[0.1, 0.5, 1.1])
    assert lat._n_tokens(c2) == 3
    assert lat._tpot(c2, 1) is None
