"""The one token-count rule, and that the client, the analysis and the latency stage all use it."""

from __future__ import annotations

from suite.analysis.repro import Sample
from suite.analysis.tokens import token_count
from suite.client import Completion
import suite.stages.latency.run as lat  # the run half: the requests it sends, timed


def test_the_order_of_what_counts() -> None:
    assert token_count([1, 2, 3], completion_tokens=9, server_timings={"predicted_n": 7}) == 3  # ids are exact
    assert token_count(None, 9, {"predicted_n": 7}) == 9
    assert token_count(None, None, {"predicted_n": 7}, logprobs=[-1.0]) == 7
    assert token_count(None, None, {"predicted_n": True}, logprobs=[-1.0, -2.0]) == 2  # a bool is not a count
    assert token_count(None, None, None, None, chunks=4) == 4
    assert token_count() is None and token_count(chunks=0) is None
    assert token_count([], completion_tokens=5) == 0  # an empty answer's ids: zero tokens, not "unknown"


def test_client_analysis_and_latency_agree_on_one_reply() -> None:
    replies = [
        Completion(text="a b", token_ids=[5, 6], completion_tokens=2, chunk_times_s=[0.1, 0.2]),
        Completion(text="a b", completion_tokens=2, chunk_times_s=[0.1, 0.2, 0.3]),
        Completion(text="a b", server_timings={"predicted_n": 3}, chunk_times_s=[0.1, 0.2]),
        Completion(text="a b", logprobs=[-0.1, -0.2]),
    ]
    for c in replies:
        s = Sample(index=0, text=c.text, token_ids=c.token_ids, logprobs=c.logprobs,
                   completion_tokens=c.completion_tokens)
        assert lat._n_tokens(c) == c.n_tokens
        if c.server_timings is None:  # the analysis sees what a request line keeps
            assert s.n_tokens == c.n_tokens
