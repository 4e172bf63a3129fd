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

`--real` runs both designs on a real llama-server with the tiny model (its prompt cache makes the
first answer differ; `prompt-cache-off` is a request field): the suite's bench, gate then the
automatic control matrix. The last line:

    launches per credited cause X (was Y); requests per verdict Z (was W); false credit F; power P
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

    def answer(self, *, first: bool, emptied: bool, control: str | None, rng: random.Random) -> str:
        """The answer of one request: 'cold', 'warm' or 'noise'."""
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
          Truth("launch-effect", "flag-a", True), Truth("no-effect", None, True)]


@dataclass
class Outcome:
    launches: int = 0
    requests: int = 0
    credited: tuple[str, ...] = ()

    def wall(self, launch_s: float, request_s: float) -> float:
        return self.launches * launch_s + self.requests * request_s


def _launch_gate(truth: Truth, control: str | None, n: int, rng: random.Random,
                 stop_at_second: bool) -> list[str]:
    out: list[str] = []
    for i in range(n):
        out.append(truth.answer(first=i == 0, emptied=False, control=control, rng=rng))
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


def in_launch_series(truth: Truth, rng: random.Random, level: float) -> tuple[str, int]:
    """`cache` inside one launch: its decision and the requests it took."""
    first_seen = False

    def ask(with_control: bool) -> str:
        nonlocal first_seen
        a = truth.answer(first=not first_seen, emptied=with_control, control=None, rng=rng)
        first_seen = True
        return a

    ask(False)  # the prompt's first request in the launch, without the control: not tested
    reference = ask(True)
    outcomes: list[str] = []
    requests = 2
    seen_with = {reference}
    stop = "undecided"
    while len(outcomes) < MAX_PAIRS:
        order = (True, False) if rng.random() < 0.5 else (False, True)
        got = {w: ask(w) for w in order}
        requests += 2
        seen_with.add(got[True])
        w, n = got[True] == reference, got[False] == reference
        outcomes.append("F" if w and not n else "U" if n and not w else "C")
        if len(seen_with) > 1:
            stop = "second-answer"
            break
        d = decide(outcomes, level, MAX_PAIRS, EFFECT)  # type: ignore[arg-type]
        if d.decision in ("credit", "rule-out"):
            stop = d.decision
            break
    return stop, requests


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
    ps = _launch_rows(truth, ["flag-a", "flag-b"], m, launch_rng, o)
    ps["cache"] = None
    o.credited = _credit(ps, m)
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
    print(f"over every truth with a cause (one of three a per-request cause): launches per credited cause "
          f"{mix_new:.2f} (was {mix_old:.2f}); a launch-level cause costs what it did")
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
    print(f"launches per credited cause {new_l:.2f} (was {old_l:.2f}); requests per verdict {new_r:.1f} "
          f"(was {old_r:.1f}); false credit {false:.3f}; power {power:.3f} ({where}; false credit and power: "
          f"worst over the simulated truths)")


if __name__ == "__main__":
    main()
