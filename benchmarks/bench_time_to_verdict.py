"""Time to a verdict: launches, requests and wall time the process of elimination takes to credit
a cause, with today's design (every control over launches of its own) and the in-launch design
(a control that can be applied per request tried in pairs inside one launch, stopped by an exact
sequential test), with their false-credit rate and power.

    python benchmarks/bench_time_to_verdict.py [--trials 2000] [--real] [--launch-s 65] [--request-s 1]

Scripted truths (simulated matrices, the suite's own decision functions): a runtime with one
per-request control (`cache`: its cache emptied before the request, as vLLM's prefix-cache reset or
llama.cpp's `cache_prompt: false`) and two launch controls (`flag-a`, `flag-b`: engine settings),
Holm over the three, at the suite's levels:

- `cache-transient`: the first request after a start, or after the cache is emptied, gives another
  answer (the prefix cache's cold answer). The cause: `cache`.
- `batch-effect`: about a fifth of the requests give another answer at random (a batch or kernel
  effect on every request). The cause: `flag-a` (a batch-invariant mode); `cache` does nothing.
- `launch-effect`: the first request after a start gives another answer, however the cache is
  (a warm-up such as autotuning). The cause: `flag-a`; emptying the cache does nothing.
- `no-effect`: a first-request transient whose cause is none of the three controls: nothing may be
  credited.
- `intermittent-5`, `-10`, `-20`, `-30`: a request without `cache` gives another answer at random in
  5-30 % of requests (the usual "2 of 20"); with it, never. The cause: `cache`.
- `carryover-10`: as `intermittent-10`, but the control's effect lasts into the next request (a request
  without it that follows one with it answers as with it). The cause: `cache`.
- `half-launches`: `intermittent-20` in every other launch only; in the others nothing varies. The
  cause: `cache`.

The per-request control's series is the stage's own code (`suite.stages.controls.inlaunch.run_series`
on a scripted client whose answers follow the truth, the cache reset its POST); the launch rows are
the suite's own tests (Fisher's exact test, `launches_for`, Holm) over simulated launches.

`--real` runs both designs on a real llama-server with the tiny model (its prompt cache makes the
first answer differ; `prompt-cache-off` is a request field): the suite's bench, gate then the
automatic control matrix. The last line, over every simulated truth with a cause:

    every truth with a cause (N): launches per credited cause X (launch rows only: Y); no-effect matrix
    R requests, L launches (launch rows only: ...); worst false credit F; worst power P (launch rows only: ...)
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from suite.analysis.sequential import EFFECT, MAX_PAIRS, decide  # noqa: E402
from suite.analysis.stats import fisher_fewer_others, holm  # noqa: E402
from suite.stages.controls import CONTROL_STOP_AFTER_DISTINCT, ELIMINATION_ALPHA, TRANSIENT_REQUESTS, launches_for  # noqa: E402

CONTROLS = ("cache", "flag-a", "flag-b")
GATE_REQUESTS = 20
IN_LAUNCH_ALPHA = 0.01
NOISE = 0.2  # batch-effect: the share of requests that give another answer


@dataclass
class Truth:
    name: str
    cause: str | None
    transient: bool  # the gate's variance is the first request alone (once per launch)

    rate: float = 0.0  # intermittent truths: the share of requests without the control that differ
    carry: bool = False  # the control's effect lasts into the next request
    every_other_launch: bool = False  # the cause shows in every other launch only

    def answer(self, *, first: bool, emptied: bool, control: str | None, rng: random.Random,
               treated_before: bool = False, launch: int = 0) -> str:
        """The answer of one request: 'cold', 'warm' or 'noise'."""
        if self.rate:
            shows = not (self.every_other_launch and launch % 2)
            treated = control == self.cause or emptied or (self.carry and treated_before)
            return "noise" if shows and not treated and rng.random() < self.rate else "warm"
        if control is not None and control == self.cause and not (self.name == "cache-transient"):
            return "warm"  # the cause's control removes the variance
        if self.name == "cache-transient":
            if control == "cache" or first or emptied:
                return "cold"
            return "warm"
        if self.name == "batch-effect":
            return "noise" if rng.random() < NOISE else "warm"
        # launch-effect and no-effect: the launch's first request differs, whatever the cache
        return "cold" if first else "warm"


TRUTHS = [Truth("cache-transient", "cache", True), Truth("batch-effect", "flag-a", False),
          Truth("launch-effect", "flag-a", True), Truth("no-effect", None, True),
          *(Truth(f"intermittent-{int(q * 100)}", "cache", False, rate=q) for q in (0.05, 0.1, 0.2, 0.3)),
          Truth("carryover-10", "cache", False, rate=0.1, carry=True),
          Truth("half-launches", "cache", False, rate=0.2, every_other_launch=True)]


@dataclass
class Outcome:
    launches: int = 0
    requests: int = 0
    credited: tuple[str, ...] = ()

    def wall(self, launch_s: float, request_s: float) -> float:
        return self.launches * launch_s + self.requests * request_s


_LAUNCH = [0]  # launches simulated so far (a truth that shows in every other launch only reads it)


def _launch_gate(truth: Truth, control: str | None, n: int, rng: random.Random,
                 stop_at_second: bool) -> list[str]:
    out: list[str] = []
    _LAUNCH[0] += 1
    for i in range(n):
        out.append(truth.answer(first=i == 0, emptied=False, control=control, rng=rng, launch=_LAUNCH[0]))
        if stop_at_second and len(set(out)) >= CONTROL_STOP_AFTER_DISTINCT:
            break
    return out


def _launch_rows(truth: Truth, names: list[str], m: int, rng: random.Random, o: Outcome) -> dict[str, float | None]:
    """Today's rows over launches (a transient) or one launch of a full gate: each control's p."""
    ps: dict[str, float | None] = {}
    if truth.transient:
        per_row = launches_for(m)
        default_odd = 0
        for _ in range(per_row):
            answers = _launch_gate(truth, None, TRANSIENT_REQUESTS, rng, False)
            o.launches += 1
            o.requests += len(answers)
            default_odd += answers[0] != answers[-1]
        for name in names:
            odd = launches = 0
            for _ in range(per_row):
                answers = _launch_gate(truth, name, TRANSIENT_REQUESTS, rng, False)
                o.launches += 1
                o.requests += len(answers)
                launches += 1
                if len(set(answers)) > 1:
                    odd += 1
                    break  # a launch that varied: the row stops
            p = fisher_fewer_others(odd, launches, default_odd, per_row)
            ps[name] = p if odd == 0 else None
        return ps
    default = _launch_gate(truth, None, GATE_REQUESTS, rng, False)
    o.launches += 1
    o.requests += len(default)
    modal = max(set(default), key=default.count)
    d_others = len(default) - default.count(modal)
    for name in names:
        answers = _launch_gate(truth, name, GATE_REQUESTS, rng, True)
        o.launches += 1
        o.requests += len(answers)
        if len(set(answers)) == 1:  # one answer: launched again, a credit rests on two launches (the stage's rule)
            again = _launch_gate(truth, name, GATE_REQUESTS, rng, True)
            o.launches += 1
            o.requests += len(again)
            answers += again
        ps[name] = (fisher_fewer_others(0, len(answers), d_others, len(default))
                    if len(set(answers)) == 1 else None)
    return ps


def _credit(ps: dict[str, float | None], planned: int) -> tuple[str, ...]:
    names = list(ps)
    adjusted = holm([ps[n] for n in names] + [1.0] * (planned - len(names)))
    return tuple(n for n, p in zip(names, adjusted) if p is not None and p <= ELIMINATION_ALPHA)


def old_design(truth: Truth, rng: random.Random, launch_rng: random.Random) -> Outcome:
    o = Outcome()
    ps = _launch_rows(truth, list(CONTROLS), len(CONTROLS), launch_rng, o)
    o.credited = _credit(ps, len(CONTROLS))
    return o


class _ScriptedClient:
    """A client whose answers follow a truth: what `run_series` sends it, it answers as the truth
    says (the cache reset is its POST; a request with `cache` is the one right after a reset)."""

    def __init__(self, truth: Truth, rng: random.Random, launch: int) -> None:
        from suite.client.params import GenerationParams

        self.truth, self.rng, self.launch = truth, rng, launch
        self.params = GenerationParams(seed=42, temperature=0.0)
        self.model = "scripted"
        self.first_seen = False
        self.emptied = False
        self.treated_before = False
        self.sent = 0

    def post_empty(self, path: str) -> tuple[int, str]:
        self.emptied = True
        return 200, ""

    def complete(self, prompt: str, *, max_tokens: int, logprobs: int | None = None, stream: bool = False,
                 extra: dict | None = None):  # type: ignore[no-untyped-def]
        from suite.client.replies import Completion

        a = self.truth.answer(first=not self.first_seen, emptied=self.emptied, control=None, rng=self.rng,
                              treated_before=self.treated_before, launch=self.launch)
        self.treated_before, self.emptied, self.first_seen = self.emptied, False, True
        self.sent += 1
        return Completion(text=a, token_ids=[hash(a) % 1000], finish_reason="stop", e2e_s=0.0, completion_tokens=1)

    chat = complete


def in_launch_series(truth: Truth, rng: random.Random, level: float) -> tuple[str, int]:
    """`cache` inside one launch, through the stage's own series code: its decision and requests."""
    from types import SimpleNamespace

    from suite.definitions import InLaunch
    from suite.stages.controls.inlaunch import run_series
    from suite.stages.gate_models import GatePrompt

    _LAUNCH[0] += 1
    client = _ScriptedClient(truth, rng, _LAUNCH[0])
    ctx = SimpleNamespace(record_request=lambda *a, **k: None,
                          runtime=SimpleNamespace(server=SimpleNamespace(reset_cache_path="/reset"),
                                                  capabilities=SimpleNamespace(logprobs="none")))
    prompt = GatePrompt(id="p", version=1, max_tokens=8, prompt="p")
    series, _ = run_series(ctx, client, "cache", InLaunch(reset_cache=True), prompt, 8,  # type: ignore[arg-type]
                           level, seed=rng.randrange(1 << 30), max_pairs=MAX_PAIRS, effect=EFFECT)
    return series.stop, client.sent


def new_design(truth: Truth, rng: random.Random, launch_rng: random.Random) -> Outcome:
    o = Outcome(launches=1)
    m = len(CONTROLS)
    level = IN_LAUNCH_ALPHA / m
    stop, requests = in_launch_series(truth, rng, level)
    o.requests += requests
    credited: list[str] = []
    if stop == "credit":
        credited.append("cache")
        o.credited = tuple(credited)  # the cause found inside the launch: the launch rows are not started
        return o
    # the launch rows; a per-request control whose pairs could not decide is tried over launches too
    undecided = stop == "undecided"
    ps = _launch_rows(truth, ["flag-a", "flag-b", *(["cache"] if undecided else [])], m + undecided, launch_rng, o)
    if not undecided:
        ps["cache"] = None
    o.credited = _credit(ps, m + undecided)
    return o


def simulate(trials: int, seed: int, launch_s: float, request_s: float) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for truth in TRUTHS:
        out[truth.name] = {}
        for label, design in (("today", old_design), ("in-launch", new_design)):
            rng = random.Random(seed)
            # the launch rows of both designs see the same draws (common random numbers): their
            # difference is the design's, not the simulation's
            runs = [design(truth, rng, random.Random(seed * 1_000_003 + i)) for i in range(trials)]
            right = sum(1 for r in runs if truth.cause is not None and truth.cause in r.credited)
            wrong = sum(1 for r in runs if any(c != truth.cause for c in r.credited))
            out[truth.name][label] = {
                "launches": sum(r.launches for r in runs) / trials,
                "requests": sum(r.requests for r in runs) / trials,
                "wall_s": sum(r.wall(launch_s, request_s) for r in runs) / trials,
                "power": right / trials if truth.cause else math.nan,
                "false_credit": wrong / trials,
            }
    return out


def real_llama_server(results_root: Path) -> dict[str, dict[str, float]]:
    """Both designs on a real llama-server with the tiny model: the bench's gate, then its
    automatic control matrix (the gate varies: its prompt cache makes the first answer differ)."""
    from suite.bench import BenchRequest, run_bench
    from suite.records import read_requests

    out: dict[str, dict[str, float]] = {}
    for label, in_launch in (("today", False), ("in-launch", True)):
        results = results_root / label
        t0 = time.monotonic()
        (summary,) = run_bench(BenchRequest.build(model="tiny", arms=["llamacpp"], launcher="local", profile="quick",
                                                  stages=["gate"], results=results,
                                                  stage_values={"controls": {"auto": True, "in_launch": in_launch}}))
        wall = time.monotonic() - t0
        c = summary.controls
        if c is None:
            raise SystemExit(f"{label}: the control matrix did not run ({summary.reason})")
        (run_dir,) = list(results.glob(f"*/*/{summary.run_id}"))
        lines = read_requests(run_dir, ["controls"])
        launches = sum(r.launches for r in c.rows if r.status == "ok" and not r.in_launch) + (
            1 if any(r.in_launch for r in c.rows) else 0)
        out[label] = {"launches": launches, "requests": len(lines), "wall_s": wall,
                      "credited": len(c.restoring), "restoring": ", ".join(c.restoring),  # type: ignore[dict-item]
                      "p": min((r.p_adjusted for r in c.rows if r.p_adjusted is not None), default=math.nan)}
        print(f"real llama-server, {label}: {launches} launches, {len(lines)} requests, {wall:.0f} s; "
              f"credited: {', '.join(c.restoring) or 'nothing'}; {c.elimination[:300]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--launch-s", type=float, default=65.0, help="seconds a launch costs (vLLM on the H200: 45-150)")
    ap.add_argument("--request-s", type=float, default=1.0)
    ap.add_argument("--real", action="store_true", help="also run both designs on a real llama-server (tiny model)")
    ap.add_argument("--results", type=Path, default=Path("/tmp/time-to-verdict"))
    args = ap.parse_args()
    sim = simulate(args.trials, args.seed, args.launch_s, args.request_s)
    print(f"simulated matrices, {args.trials} per truth and design; controls {', '.join(CONTROLS)} "
          f"(cache per request); a launch {args.launch_s:g} s, a request {args.request_s:g} s")
    print(f"{'truth':<16} {'design':<10} {'launches':>8} {'requests':>8} {'wall s':>8} {'power':>6} {'false':>6}")
    for truth, designs in sim.items():
        for label, f in designs.items():
            power = "-" if math.isnan(f["power"]) else f"{f['power']:.3f}"
            print(f"{truth:<16} {label:<10} {f['launches']:>8.2f} {f['requests']:>8.1f} {f['wall_s']:>8.0f} "
                  f"{power:>6} {f['false_credit']:>6.3f}")
    # launches per credited cause: launches spent over the truths with a cause / causes credited
    def per_cause(label: str, truths: list[Truth]) -> tuple[float, float]:
        launches = sum(sim[t.name][label]["launches"] for t in truths if t.cause)
        found = sum(sim[t.name][label]["power"] for t in truths if t.cause)
        requests = sum(sim[t.name][label]["requests"] for t in truths) / len(truths)
        return launches / found if found else math.inf, requests

    per_request = [t for t in TRUTHS if t.cause == "cache"]
    mix_new, _ = per_cause("in-launch", TRUTHS)
    mix_old, _ = per_cause("today", TRUTHS)
    print(f"over every truth with a cause: launches per credited cause {mix_new:.2f} (was {mix_old:.2f})")
    new_l, new_r = per_cause("in-launch", per_request)
    old_l, old_r = per_cause("today", per_request)
    false = max(sim[t.name]["in-launch"]["false_credit"] for t in TRUTHS)
    power = min(sim[t.name]["in-launch"]["power"] for t in TRUTHS if t.cause)
    old_power = min(sim[t.name]["today"]["power"] for t in TRUTHS if t.cause)
    cache = sim["cache-transient"]
    print(f"cache-transient alone: {cache['in-launch']['launches']:.2f} launches to a verdict "
          f"(was {cache['today']['launches']:.2f}); power {cache['in-launch']['power']:.3f} "
          f"(was {cache['today']['power']:.3f})")
    print(f"worst power over the truths with a cause: {power:.3f} (was {old_power:.3f})")
    if args.real:
        real = real_llama_server(args.results)
        print(f"real llama-server: launches {real['in-launch']['launches']:.0f} (was {real['today']['launches']:.0f}), "
              f"requests {real['in-launch']['requests']:.0f} (was {real['today']['requests']:.0f}), "
              f"wall {real['in-launch']['wall_s']:.0f} s (was {real['today']['wall_s']:.0f} s)")
    if args.real:
        # launches per credited cause: a design that credited nothing spent its launches for none
        new_l = real["in-launch"]["launches"] / real["in-launch"]["credited"] if real["in-launch"]["credited"] else math.inf
        old_l = real["today"]["launches"] / real["today"]["credited"] if real["today"]["credited"] else math.inf
        new_r, old_r = real["in-launch"]["requests"], real["today"]["requests"]
        where = "real llama-server, a per-request cause"
    else:
        where = "simulated, a per-request cause"
    print(f"{where}: launches per credited cause {new_l:.2f} (was {old_l:.2f}); requests per verdict {new_r:.1f} "
          f"(was {old_r:.1f})")
    # the last line: over every simulated truth with a cause, and the no-effect matrix's cost
    none = sim["no-effect"]
    print(f"every truth with a cause ({sum(1 for t in TRUTHS if t.cause)}): launches per credited cause "
          f"{mix_new:.2f} (launch rows only: {mix_old:.2f}); no-effect matrix {none['in-launch']['requests']:.0f} "
          f"requests, {none['in-launch']['launches']:.1f} launches (launch rows only: {none['today']['requests']:.0f}, "
          f"{none['today']['launches']:.1f}); worst false credit {false:.3f}; worst power {power:.3f} "
          f"(launch rows only: {old_power:.3f})")


if __name__ == "__main__":
    main()
