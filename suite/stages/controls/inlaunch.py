"""A control tried inside one launch: pairs of requests with and without it, stopped when decided.

A control whose effect can be applied to one request (`Control.per_request()`: the runtime's
cache emptied before the request, or a request field such as llama.cpp's `cache_prompt: false`)
needs no process of its own. All such controls of a matrix share one launch of the arm's own
configuration. For each control and each prompt that varied: a request without the control (the
prompt's first in the launch, cold for the launch's own reasons: not part of the test), a request
with the control (its answer is the reference), then pairs of one request with it and one without, the order in
each pair drawn at random (the seed and every pair's order are kept), until the exact sequential
test of `suite.analysis.sequential` decides (the control changes the answer, or an effect of the
stated size is ruled out), a request with the control gives a second answer (it cannot be
credited), or `max_pairs` pass. Every request is a request line (`label` "NAME:with" or
"NAME:without", kind `controls`).

The series is kept in the record as the pairs' outcomes (`InLaunchSeries`, in
`suite.stages.controls.series`, which the record half reads without this module), so that the test
and its verdict are made again from them whenever a page is built.
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from suite.analysis.sequential import EFFECT, MAX_PAIRS, Outcome
from suite.client import OpenAIClient
from suite.definitions import InLaunch
from suite.gpu import Energy, EnergyMeter
from suite.stages.batch.run import reset_cache
from suite.stages.controls.series import InLaunchSeries
from suite.stages.gate_models import GatePrompt
from suite.stages.repeat import _one_request, logprobs_for

if TYPE_CHECKING:
    from suite.client.replies import Completion
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


def _key(c: Completion) -> tuple[Any, ...]:
    return tuple(c.token_ids) if c.token_ids is not None else (c.text,)


def _outcome(with_key: tuple[Any, ...], without_key: tuple[Any, ...], reference: tuple[Any, ...]) -> Outcome:
    w, o = with_key == reference, without_key == reference
    if w and not o:
        return "F"
    if o and not w:
        return "U"
    return "C"


class _Sender:
    """Sends one request of a series and writes its request line."""

    def __init__(self, ctx: StageContext, client: OpenAIClient, name: str, how: InLaunch, prompt: GatePrompt,
                 max_tokens: int, reset_path: str | None) -> None:
        self.ctx, self.client, self.name, self.how, self.prompt = ctx, client, name, how, prompt
        self.max_tokens, self.reset_path = max_tokens, reset_path
        self.logprobs = logprobs_for(ctx)
        self.index = 0
        self.tokens = {True: 0, False: 0}
        self.http_s = {True: 0.0, False: 0.0}
        self.cut = 0

    def send(self, with_control: bool, label: str | None = None) -> Completion:
        reset_error = None
        if with_control and self.how.reset_cache:
            reset_error = reset_cache(self.client, self.reset_path)
        extra = dict(self.how.extra_body) if with_control else {}
        if reset_error is not None:
            from suite.client.replies import Completion
            c = Completion(error=f"cache reset before the request failed: {reset_error}")
        else:
            c = _one_request(self.client, self.prompt, self.max_tokens, self.logprobs, extra)
        params = self.client.params
        self.ctx.record_request(
            "controls", label=f"{self.name}:{label or ('with' if with_control else 'without')}",
            controls=[self.name] if with_control else [], prompt_id=self.prompt.id,
            prompt_version=self.prompt.version, prompt_sha256=self.prompt.sha256, index=self.index, wave=self.index,
            concurrency=1, seed=params.seed, temperature=params.temperature, max_tokens=self.max_tokens,
            request_extra=params.request_extra | extra, text=c.text, token_ids=c.token_ids, logprobs=c.logprobs,
            top_logprobs=c.top_logprobs, finish_reason=c.finish_reason, prompt_tokens=c.prompt_tokens,
            completion_tokens=c.completion_tokens, e2e_s=c.e2e_s, ttft_s=c.ttft_s, overhead_s=c.overhead_s,
            server_timings=c.server_timings, system_fingerprint=c.system_fingerprint, error=c.error)
        self.index += 1
        if not c.error and label is None:
            self.tokens[with_control] += c.completion_tokens or len(c.token_ids or [])
            self.http_s[with_control] += c.e2e_s
            if c.finish_reason == "length":
                self.cut += 1
        return c


def run_series(ctx: StageContext, client: OpenAIClient, name: str, how: InLaunch, prompt: GatePrompt,
               max_tokens: int, level: float, seed: int, max_pairs: int = MAX_PAIRS,
               effect: float = EFFECT) -> tuple[InLaunchSeries, _Sender]:
    """One control on one prompt: the reference request, then pairs until the test decides."""
    series = InLaunchSeries(prompt_id=prompt.id, seed=seed, level=level, max_pairs=max_pairs, effect=effect)
    sender = _Sender(ctx, client, name, how, prompt, max_tokens, ctx.runtime.server.reset_cache_path)
    rng = random.Random(seed)
    # the prompt's first request in this launch, without the control: cold for the launch's own
    # reasons (a warm-up, a first compile) whatever the control does; not part of the test
    opening = sender.send(False, label="first")
    if opening.error:
        series.stop, series.reason = "failed", opening.error
        return series, sender
    first = sender.send(True)
    if first.error:
        series.stop, series.reason = "failed", first.error
        return series, sender
    reference = _key(first)
    seen_with, seen_without = {reference}, set()
    series.with_answers = 1
    while len(series.outcomes) < max_pairs:
        with_first = rng.random() < 0.5
        got: dict[bool, Completion] = {}
        for with_control in ((True, False) if with_first else (False, True)):
            got[with_control] = sender.send(with_control)
        failed = next((c for c in got.values() if c.error), None)
        if failed is not None:
            series.stop, series.reason = "failed", failed.error
            break
        w, o = _key(got[True]), _key(got[False])
        seen_with.add(w)
        seen_without.add(o)
        series.with_answers += 1
        series.without_answers += 1
        series.with_first.append(with_first)
        series.outcomes.append(_outcome(w, o, reference))
        if len(seen_with) > 1:
            series.stop = "second-answer"  # a control that gives two answers cannot be credited
            break
        decision = series.result().decision
        if decision in ("credit", "rule-out"):
            series.stop = decision
            break
    series.with_distinct, series.without_distinct = len(seen_with), len(seen_without)
    series.cut = sender.cut
    return series, sender


class InLaunchRun(BaseModel):
    """What one control's series gave over the prompts, for its row of the matrix."""

    name: str
    series: dict[str, InLaunchSeries] = Field(default_factory=dict)
    tokens_per_s: float | None = None  # requests with the control
    paired_tokens_per_s: float | None = None  # requests without it, in the same launch
    energy: Energy | None = None
    wall_s: float = 0.0
    died: str | None = None  # the runtime died during this control's pairs: how (its own error)


def run_controls(ctx: StageContext, names: list[str], prompts: list[GatePrompt], level: float,
                 max_tokens_cap: int | None, max_pairs: int = MAX_PAIRS, effect: float = EFFECT,
                 seed: int = 0) -> tuple[dict[str, InLaunchRun], Any]:
    """Every per-request control of the matrix, inside one launch of the arm's own configuration.

    Returns each control's run, and the launch (its start-up time and command are the rows').
    Raises what `ctx.launch` raises (a refusal, an environment that is not there)."""
    out: dict[str, InLaunchRun] = {}
    with ctx.launch(controls=[], inherit=False) as (running, client):
        for k, name in enumerate(names):
            how = ctx.runtime.control(name).per_request()
            assert how is not None
            run = InLaunchRun(name=name)
            t0 = time.monotonic()
            tokens = {True: 0, False: 0}
            http = {True: 0.0, False: 0.0}
            with EnergyMeter() as meter:
                for j, prompt in enumerate(prompts):
                    cap = min(prompt.max_tokens, max_tokens_cap) if max_tokens_cap else prompt.max_tokens
                    series, sender = run_series(ctx, client, name, how, prompt, cap, level,
                                                seed=seed + 1000 * k + j, max_pairs=max_pairs, effect=effect)
                    run.series[prompt.id] = series
                    for side in (True, False):
                        tokens[side] += sender.tokens[side]
                        http[side] += sender.http_s[side]
                    log.info("controls %s in one launch, %s: %s after %d pairs", name, prompt.id, series.stop,
                             len(series.outcomes))
                    if series.stop == "failed" and not running.alive():
                        from suite.stages.repeat import death_reason_of

                        run.died = death_reason_of(running)() or "the runtime died during the pairs"
                        break
            run.tokens_per_s = round(tokens[True] / http[True], 3) if http[True] > 0 and tokens[True] else None
            run.paired_tokens_per_s = round(tokens[False] / http[False], 3) if http[False] > 0 and tokens[False] else None
            run.energy = meter.result((tokens[True] + tokens[False]) or None)
            run.wall_s = round(time.monotonic() - t0, 3)
            out[name] = run
        return out, running
