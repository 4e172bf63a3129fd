"""The batch-composition stage: the target alone, in mixed batches, among shared prefixes.

A real runtime gives batch-dependent answers only on the GPU with a realistic model, never on
demand here, so most tests use a scripted stand-in (here, not in the product) that streams
OpenAI-style completions and answers the target differently when other requests were in flight
with it: a batch-variant server (as vLLM's default mode on a GPU) and a batch-invariant one. The
live test runs the stage against the real llama-server (4 slots) on the tiny model where it is
installed, and skips otherwise.
"""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from suite.client import GenerationParams, OpenAIClient
from suite.records import REQUEST_LINE
from suite.stages import batch as bt
from suite.stages.batch.run import run_batch
from suite.stages.gate_models import GatePrompt

TARGET = "The lighthouse keeper opened the logbook on the morning after the storm and wrote:"
PROMPT = GatePrompt(id="short-open", version=1, max_tokens=8, prompt=TARGET, sha256="x")
BASE_IDS = [11, 12, 13, 14, 15, 16]


class StandIn:
    """Streams six tokens per request. `variant`: the target's token 3 becomes 99 when another
    prompt came in its trial (since the last cache reset); `fail_target`: the target's requests answer HTTP 500;
    `reset_code`: the reply to POST /reset_prefix_cache (None: 404, no such endpoint)."""

    def __init__(self, variant: bool, fail_target: bool = False, reset_code: int | None = 200,
                 top: bool = True):
        self.variant, self.fail_target, self.reset_code, self.top = variant, fail_target, reset_code, top
        self.others = threading.Event()  # another prompt arrived since the last cache reset (this trial)
        self.lock = threading.Lock()
        self.resets = 0
        self.bodies: list[dict[str, Any]] = []
        me = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                me.handle(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        if h.path == "/reset_prefix_cache":
            self.resets += 1
            self.others = threading.Event()  # a new trial
            code = self.reset_code or 404
            h.send_response(code)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        body = json.loads(raw)
        with self.lock:
            self.bodies.append(body)
        is_target = body["prompt"] == TARGET
        others = self.others
        if not is_target:
            others.set()
            time.sleep(0.2)
        # The target waits (up to 1 s) for another prompt of its trial: the client sends a batch at once.
        crowd = 2 if is_target and others.wait(1.0) else 1
        if is_target and self.fail_target:
            msg = b'{"error": "boom"}'
            h.send_response(500)
            h.send_header("Content-Length", str(len(msg)))
            h.end_headers()
            h.wfile.write(msg)
            return
        ids = list(BASE_IDS)
        lps = [-0.5, -0.25, -0.7, -0.1, -0.2, -0.3]
        if is_target and self.variant and crowd > 1:
            ids[3], lps[3] = 99, -0.72
            lps[1] = -0.2501
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def chunk(data: bytes) -> None:
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        for k, (i, lp) in enumerate(zip(ids, lps)):
            lp_obj: dict[str, Any] = {"tokens": [f"t{i}"], "token_logprobs": [lp]}
            if self.top:
                lp_obj["top_logprobs"] = [{f"t{i}": lp, "alt": lp - (0.01 if k == 3 else 1.0)}]
            text = " <script>alert(9)</script>" if i == 99 else f" t{i}"  # a hostile answer: escaped on every page
            choice = {"index": 0, "text": text, "token_ids": [i], "logprobs": lp_obj,
                      "finish_reason": "length" if k == len(ids) - 1 else None}
            chunk(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
        chunk(b"data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": 5,
                                                               "completion_tokens": len(ids)}}).encode() + b"\n\n")
        chunk(b"data: [DONE]\n\n")
        chunk(b"")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in(request: pytest.FixtureRequest) -> Iterator[StandIn]:
    s = StandIn(**getattr(request, "param", {"variant": True}))
    yield s
    s.close()


def _client(url: str) -> OpenAIClient:
    return OpenAIClient(url, "m", timeout_s=20, params=GenerationParams(seed=42, temperature=0.0))


def _run(s: StandIn, **kw: Any) -> tuple[bt.BatchResult, list[dict[str, Any]]]:
    lines: list[dict[str, Any]] = []
    with _client(s.url) as c:
        r = run_batch(c, PROMPT, trials=kw.pop("trials", 3), batch_sizes=kw.pop("batch_sizes", [3, 4]),
                         record=lambda kind, **f: lines.append({"kind": kind, "at": "t", **f}), **kw)
    return r, lines


@pytest.mark.parametrize("stand_in", [{"variant": True}], indirect=True)
def test_a_batch_variant_server_is_found_with_its_first_departure_and_gap(stand_in: StandIn) -> None:
    r, lines = _run(stand_in, reset_path="/reset_prefix_cache")
    single, mixed, prefix = (r.mode(m) for m in ("single", "mixed", "prefix"))
    assert single and mixed and prefix
    assert (single.target.distinct_answers, single.target.answered) == (1, 3)
    assert (mixed.target.distinct_answers, mixed.target.answered) == (1, 3)  # one answer, but not the alone one
    assert mixed.differ_from_single == 3 and mixed.same_as_single == 0
    d = mixed.first_divergence
    assert d is not None and d.token_index == 3 and (d.modal_token, d.other_token) == (14, 99)
    assert math.isclose(d.modal_logprob - d.other_logprob, -0.1 + 0.72)
    assert d.modal_margin is not None and math.isclose(d.modal_margin, 0.01)  # a near-tie at token 3, from the stream
    assert d.prefix_logprob_diff is not None and math.isclose(d.prefix_logprob_diff, 0.0001, abs_tol=1e-9)
    assert r.varies_with_batch is True and r.verdict.startswith("varies with batch composition")
    assert "3 of 3 differ from the one-at-a-time answer (first at token 3" in r.verdict
    assert r.distinct_overall == 2 and r.answered_overall == 9
    # the cache was reset before every trial of every mode
    assert r.cache_reset == "per-trial" and stand_in.resets == 9
    # every request is a typed line: 3 alone + (3+4+3) per batch mode
    assert len(lines) == 3 + 2 * 10
    parsed = [REQUEST_LINE.validate_python(x) for x in lines]
    assert sum(1 for p in parsed if p.role == "target") == 9
    assert {p.batch_size for p in parsed if p.mode == "mixed"} == {3, 4}
    # prefix mode: the others share the beginning of the target (up to all of it)
    others = [b["prompt"] for b in stand_in.bodies if b["prompt"] != TARGET]
    assert any(p.startswith(TARGET) for p in others)
    assert max(prefix.prefix_chars) == len(TARGET)
    # the requests carried the card's seed, temperature and top-2 logprobs
    assert all(b["seed"] == 42 and b["temperature"] == 0.0 and b["logprobs"] == 2 for b in stand_in.bodies)
    assert mixed.tokens_per_s and mixed.output_tokens == 10 * 6


@pytest.mark.parametrize("stand_in", [{"variant": False, "reset_code": None, "top": False}], indirect=True)
def test_a_batch_invariant_server_gives_one_answer_and_says_what_n_bounds(stand_in: StandIn) -> None:
    r, _ = _run(stand_in, reset_path="/reset_prefix_cache", trials=4)
    assert r.varies_with_batch is False
    assert all(m.target.distinct_answers == 1 and m.differ_from_single == 0 for m in r.modes)
    assert all(m.same_tokens_logprob_diff == 0.0 for m in r.modes if m.mode != "single")
    assert "mixed 4, prefix 4 target answers equal the one-at-a-time answer" in r.verdict
    assert "more than 31% of batches could still be missed" in r.verdict  # 1 - 0.05^(1/8)
    # the stand-in ends every answer with finish_reason "length": the verdict says what the cap may hide
    assert r.verdict.endswith("12 of 12 target answers cut at 8 tokens: they may differ past the cap")
    # no reset endpoint: 404, recorded as failed with its reason, the trials still ran
    assert r.cache_reset == "failed" and "HTTP 404" in (r.cache_reset_note or "")
    assert r.distinct_overall == 1


@pytest.mark.parametrize("stand_in", [{"variant": True}], indirect=True)
def test_no_reset_endpoint_declared_sends_none(stand_in: StandIn) -> None:
    r, _ = _run(stand_in, reset_path=None, trials=1, batch_sizes=[2])
    assert r.cache_reset == "not-offered" and stand_in.resets == 0
    assert r.mode("mixed").differ_from_single == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("stand_in", [{"variant": True, "fail_target": True}], indirect=True)
def test_a_target_that_always_fails_stops_with_a_reason_and_keeps_every_line(stand_in: StandIn) -> None:
    r, lines = _run(stand_in, trials=4)
    assert r.varies_with_batch is None and r.verdict.startswith("undetermined: the target never answered alone")
    assert r.stopped_reason and "3 trials in a row failed in the single mode" in r.stopped_reason
    assert [m.mode for m in r.modes] == ["single"]  # nothing sent after the stop
    assert len(lines) == 3 and all(x["error"] for x in lines)
    assert r.reference is None and r.mode("single").target.errors == 3  # type: ignore[union-attr]


def test_trial_prompts_are_deterministic_and_vary_in_length_and_place() -> None:
    corpus = bt.other_texts()
    assert len(corpus) > 10_000
    a = bt.trial_prompts("mixed", 1, TARGET, 6, corpus)
    assert a == bt.trial_prompts("mixed", 1, TARGET, 6, corpus)
    prompts, pos, shared = a
    assert prompts[pos] == TARGET and len(prompts) == 6 and shared is None
    assert len({len(p) for i, p in enumerate(prompts) if i != pos}) >= 4
    places = {bt.trial_prompts("mixed", t, TARGET, 8, corpus)[1] for t in range(8)}
    assert len(places) >= 4
    assert bt.trial_prompts("single", 3, TARGET, 8, corpus) == ([TARGET], 0, None)
    p_prompts, p_pos, p_shared = bt.trial_prompts("prefix", 0, TARGET, 5, corpus)
    cuts = [next(i for i in range(len(TARGET) + 1) if i == len(TARGET) or p[i] != TARGET[i])
            for k, p in enumerate(p_prompts) if k != p_pos]
    assert p_shared == len(TARGET) and len(set(cuts)) == 4 and min(cuts) >= 1


def test_bad_trials_or_sizes_are_one_line() -> None:
    from suite.errors import SuiteError

    with OpenAIClient("http://127.0.0.1:9", "m") as c:
        with pytest.raises(SuiteError, match="batch sizes \\[1\\]: each at least 2"):
            run_batch(c, PROMPT, trials=2, batch_sizes=[1])
        with pytest.raises(SuiteError, match="trials 0"):
            run_batch(c, PROMPT, trials=0, batch_sizes=[2])


def test_profiles_and_the_flag() -> None:
    from suite.bench import plan_arms_profile
    from suite.errors import SuiteError
    from suite.profiles import get_profile

    assert not bt.settings(get_profile("quick")).composition and not bt.settings(get_profile("standard")).composition
    assert bt.settings(get_profile("full")).composition
    p = plan_arms_profile("quick", overrides={"stage_settings": {"batch": {"composition": True}}})
    assert bt.settings(p).composition and bt.planned(p) == 2 + 2 * (3 + 4)
    # the run record keeps the resolved settings, the profile's own values included
    assert p.stage_settings["batch"] == {"composition": True, "trials": 2, "sizes": [3, 4], "prompt": None}
    with pytest.raises(SuiteError, match="stage 'batch', profile 'quick': setting sizes.0 = 1: Input should be greater"):
        plan_arms_profile("quick", overrides={"stage_settings": {"batch": {"sizes": [1]}}})
    with pytest.raises(SuiteError, match="setting trial"):
        plan_arms_profile("quick", overrides={"stage_settings": {"batch": {"trial": 3}}})


def test_the_stage_is_registered_and_runs_after_the_gate_when_asked() -> None:
    from suite.records import RESULT_MODELS
    from suite.stages import ORDER, STAGES

    assert STAGES["batch"].result is bt.BatchResult and "batch" not in ORDER
    assert RESULT_MODELS["batch"] is bt.BatchResult


def test_vllm_declares_its_cache_reset_and_llamacpp_none() -> None:
    from suite.definitions import get_definition

    assert get_definition("vllm").server.reset_cache_path == "/reset_prefix_cache"
    assert get_definition("vllm-cpu").server.reset_cache_path == "/reset_prefix_cache"
    assert get_definition("llamacpp").server.reset_cache_path is None


@pytest.mark.live
def test_llamacpp_batches(llamacpp_server: Any, tmp_path: Path) -> None:
    """The real llama-server (4 slots) on the tiny model: every mode answers, every request is a line."""
    marker = Path.home() / ".cache/suite/runtimes/llamacpp/.installed"
    if not marker.exists():
        pytest.skip("llama-server is not installed here")
    rt = llamacpp_server
    lines: list[dict[str, Any]] = []
    from suite.definitions import get_definition

    client = OpenAIClient(rt.base_url, "tiny", params=GenerationParams(
        seed=42, temperature=0.0, extra_body=dict(get_definition("llamacpp").request.extra_body)))
    with client:
        r = run_batch(client, PROMPT.model_copy(update={"max_tokens": 16}), trials=2, batch_sizes=[3, 4],
                         reset_path=None, record=lambda kind, **f: lines.append({"kind": kind, "at": "t", **f}))
    assert r.stopped_reason is None
    assert all(m.target.answered == 2 for m in r.modes)
    assert r.mode("single").target.compared_by == "token_ids"  # type: ignore[union-attr]
    assert len(lines) == 2 + 2 * 7
    # two trials a mode: a departure in batches can be too few to tell from chance (Fisher's test)
    assert (r.varies_with_batch is None) == r.verdict.startswith("undetermined")
    assert (r.varies_with_batch is True) == r.verdict.startswith("varies with batch composition")
    assert all(m.target.answers[0].logprobs for m in r.modes)
    print(r.verdict)


@pytest.mark.parametrize("stand_in", [{"variant": True}], indirect=True)
def test_the_page_shows_the_modes_beside_the_gate_and_the_export_has_rows(stand_in: StandIn, tmp_path: Path) -> None:
    import shutil

    from suite.export import TABLES
    from suite.site.figures import load_runs
    from suite.site.publish import build_site

    golden = Path(__file__).resolve().parents[2] / "golden" / "results"
    results = tmp_path / "results"
    shutil.copytree(golden, results)
    r, _ = _run(stand_in, reset_path="/reset_prefix_cache", trials=3)
    for summary in results.glob("tiny/llamacpp/*/summary.json"):  # whichever run the page shows
        data = json.loads(summary.read_text())
        data["batch"] = r.model_dump(mode="json")
        summary.chmod(0o644)
        summary.write_text(json.dumps(data))
    report = build_site(results, tmp_path / "public")
    assert report.stage_problems == []
    html = (tmp_path / "public" / "models" / "tiny.html").read_text()
    section = html[html.index('<section id="batch">'):html.index('<section id="arms-compared">')]
    assert html.index('<section id="gate">') < html.index('<section id="batch">')
    assert "varies with its batch" in section
    assert "3 of 3 differ from the one-at-a-time answer" in section
    assert "first departure: token 3, logprob gap 0.62 nats" in section
    assert "emptied before every trial" in section
    assert "<script>alert(9)" not in html and "&lt;script&gt;alert(9)" in section
    rows = [x for m in load_runs(results).values() for a in m.arms.values() for run in a.runs
            for x in TABLES["batch"]([run])]
    assert [x["mode"] for x in rows] == ["single", "mixed", "prefix"] * 2
    assert rows[1]["first_divergence_token"] == 3 and rows[1]["differ_from_single"] == 3


def test_the_target_prompt_defaults_to_short_open_and_a_bad_one_is_one_line() -> None:
    from suite.errors import SuiteError
    from suite.profiles import get_profile

    full = get_profile("full")
    assert full.gate_prompts is None and bt.batch_prompt(full).id == "short-open"  # not the 4K document
    assert bt.batch_prompt(full.model_copy(update={"gate_prompts": ["long-open"]})).id == "long-open"
    assert bt.batch_prompt(full.model_copy(update={"stage_settings": {"batch": {"prompt": "long-open"}}})).id == "long-open"
    with pytest.raises(SuiteError, match="unknown gate prompt 'nope'"):
        bt.batch_prompt(full.model_copy(update={"stage_settings": {"batch": {"prompt": "nope"}}}))


def test_an_answer_that_varies_alone_is_not_blamed_on_the_batch() -> None:
    """Degenerate case: the target gives two answers alone (a prompt cache), the batches only those two."""
    from suite.analysis.repro import analyse

    a, b = Sample_(0, [1, 2, 3]), Sample_(1, [1, 2, 4])
    single = bt.BatchMode(mode="single", trials=2, batch_sizes=[1, 1], requests=2, failed=0, target=analyse([a, b]))
    bt.compare_to_reference(single, [a, b], a, [a, b])
    mixed_s = [Sample_(0, [1, 2, 4]), Sample_(1, [1, 2, 4])]
    mixed = bt.BatchMode(mode="mixed", trials=2, batch_sizes=[3, 3], requests=6, failed=0, target=analyse(mixed_s))
    bt.compare_to_reference(mixed, mixed_s, a, [a, b])
    assert mixed.differ_from_single == 2 and mixed.unseen_alone == 0
    varies, verdict = bt.verdict_of([single, mixed], True, None)
    assert varies is None and verdict.startswith("undetermined: the answer varies alone")
    new_s = [Sample_(0, [1, 9, 9])]
    new = bt.BatchMode(mode="prefix", trials=1, batch_sizes=[3], requests=3, failed=0, target=analyse(new_s))
    bt.compare_to_reference(new, new_s, a, [a, b])
    varies, verdict = bt.verdict_of([single, mixed, new], True, None)
    # one answer never given alone, but 1 of 2 alone differed too: too few to blame the batch
    assert varies is None and "1 never given alone" in verdict
    assert "3 of 3 batched answers differ from the one-at-a-time answer against 1 of 2 alone" in verdict
    assert "cannot tell a batch effect from an answer that varies by itself" in verdict
    # six alike alone, six batched answers all new: the batch, by the test
    alone6 = [Sample_(i, [1, 2, 3]) for i in range(6)]
    single6 = bt.BatchMode(mode="single", trials=6, batch_sizes=[1] * 6, requests=6, failed=0, target=analyse(alone6))
    bt.compare_to_reference(single6, alone6, alone6[0], alone6)
    batched6 = [Sample_(i, [1, 2, 5 + i % 2]) for i in range(6)]
    mixed6 = bt.BatchMode(mode="mixed", trials=6, batch_sizes=[3] * 6, requests=18, failed=0, target=analyse(batched6))
    bt.compare_to_reference(mixed6, batched6, alone6[0], alone6)
    varies, verdict = bt.verdict_of([single6, mixed6], False, None)
    assert varies is True and verdict.startswith("varies with batch composition")
    assert "6 of 6 batched answers differ from the one-at-a-time answer against 0 of 6 alone" in verdict


def Sample_(i: int, ids: list[int]):  # noqa: N802 - a sample with token ids
    from suite.analysis.repro import Sample

    return Sample(index=i, text=" ".join(map(str, ids)), token_ids=ids, completion_tokens=len(ids))


def test_bad_batch_flags_on_the_command_line_are_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "suite.cli", "bench", "--model", "tiny", "--arms", "llamacpp",
                        "--batch-composition", "--batch-sizes", "1,8", "--results", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == "error: --batch-sizes '1,8': must be 2 or more"
    r = subprocess.run([sys.executable, "-m", "suite.cli", "bench", "--model", "tiny", "--batch-trials", "0",
                        "--results", str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--batch-trials '0': must be 1 or more" in r.stderr
    assert not (tmp_path / "r").exists()


def test_too_few_batched_answers_to_bound_an_effect_are_undetermined() -> None:
    """Degenerate case: every batched answer equals the one-at-a-time answer, but four answers cannot
    bound how often a batch would change it (an even split gives four alike 12 % of the time)."""
    from suite.analysis.repro import analyse

    alone = [Sample_(i, [1, 2, 3]) for i in range(2)]
    single = bt.BatchMode(mode="single", trials=2, batch_sizes=[1, 1], requests=2, failed=0, target=analyse(alone))
    bt.compare_to_reference(single, alone, alone[0], alone)
    modes = [single]
    for name in ("mixed", "prefix"):
        xs = [Sample_(i, [1, 2, 3]) for i in range(2)]
        m = bt.BatchMode(mode=name, trials=2, batch_sizes=[3, 3], requests=6, failed=0, target=analyse(xs))
        bt.compare_to_reference(m, xs, alone[0], alone)
        modes.append(m)
    varies, verdict = bt.verdict_of(modes, False, None)
    assert varies is None
    assert verdict.startswith("undetermined: every batched answer equals the one-at-a-time answer (mixed 2, prefix 2")
    assert "4 batched answers cannot bound a batch effect (6 would)" in verdict

