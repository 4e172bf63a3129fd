"""Benchmark: the suite's own time per request at concurrency 1, against a real runtime.

Starts the tiny model on an arm of the catalog (default: llama.cpp's llama-server) through the
local launcher, sends warm-up requests, then N streamed requests through the latency stage, and
prints the suite's overhead per request (client: building the body and parsing the stream;
stage: the same plus writing the request record), with TTFT and TPOT as measured by the suite
next to what the runtime reports for the same requests.

    .venv/bin/python benchmarks/bench_client_overhead.py [--arm llamacpp] [--requests 50] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from suite.bench import make_signature, plan_arms
from suite.catalog import prepare_format
from suite.errors import SuiteError
from suite.profiles import get_profile
from suite.records import RunManifest, RunRecord, new_run_id, utcnow
from suite.stages import StageContext
import suite.stages.latency.run as lat  # the run half: the requests it sends, timed
from suite.analysis.stats import summarize


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", default="llamacpp")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    plan = plan_arms("tiny", [args.arm], "local", "quick")[0]
    plan.launcher.check_available()
    plan.launcher.prepare(plan.runtime)
    prepare_format(plan.card, plan.arm.format)
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp_name:
        tmp = Path(tmp_name)
        spec = plan.spec([], tmp / "runtime.log")
        with plan.launcher.start(spec) as rt:
            signature = make_signature(plan, rt, spec)
            manifest = RunManifest(run_id=new_run_id(signature.digest), model="tiny", arm=args.arm,
                                   runtime=plan.runtime.name, launcher="local", profile="bench",
                                   started_at=utcnow(), signature=signature)
            record = RunRecord.create(tmp / "results", manifest)
            profile = get_profile("quick").model_copy(update={"stage_settings": {"latency": {
                "requests": args.requests, "warmup": args.warmup, "max_tokens": args.max_tokens, "concurrency": [1]}}})
            with plan.client(rt, []) as client:
                ctx = StageContext(card=plan.card, arm_name=args.arm, arm=plan.arm, runtime=plan.runtime,
                                   profile=profile, sampling=plan.card.sampling, signature=signature,
                                   record=record, client=client, running=rt, controls=[],
                                   launch=None,  # type: ignore[arg-type]
                                   )
                result = lat.run(ctx)
                # CPU time of the whole exchange in this thread (HTTP included): an upper bound of
                # the suite's own work that contention on a shared machine cannot inflate.
                cpu_ms = []
                for _ in range(args.requests):
                    c0 = time.thread_time()
                    client.complete(lat.PROMPT, max_tokens=args.max_tokens, stream=True)
                    cpu_ms.append((time.thread_time() - c0) * 1000)
                cpu = summarize(cpu_ms)
            level = result.levels[0]
            client_ms = level.overhead_ms

    def ms(x: float | None, scale: float = 1.0) -> str:
        return "-" if x is None else f"{x * scale:.3f}"

    print(f"arm {args.arm} ({signature.runtime} {signature.runtime_version}), {level.requests} streamed requests, "
          f"max_tokens {args.max_tokens}, concurrency 1, mean {level.output_tokens.mean:.1f} tokens each")
    print(f"suite overhead per request, client only : median {ms(client_ms.p50)} ms, p99 {ms(client_ms.p99)} ms")
    print(f"record writing per request             : median {ms(level.record_ms.p50)} ms, "
          f"p99 {ms(level.record_ms.p99)} ms")
    print(f"suite CPU time per request, whole exchange: median {ms(cpu.p50)} ms, p99 {ms(cpu.p99)} ms "
          f"(wall-clock overhead above includes waiting for a core on a busy machine)")
    print(f"TTFT ours: median {ms(level.ttft_s.p50, 1000)} ms; TPOT ours: median "
          f"{ms(level.tpot_s.p50, 1000)} ms, mean {ms(level.tpot_s.mean, 1000)} ms")
    rt_t = level.runtime_timings
    if rt_t is not None:
        print(f"runtime ({rt_t.source}): TTFT mean {ms(rt_t.ttft_mean_s, 1000)} ms, "
              f"TPOT mean {ms(rt_t.tpot_mean_s, 1000)} ms")
        print(f"ours - runtime: TTFT mean {ms(rt_t.ttft_mean_diff_ms)} ms"
              + (f" (median {ms(rt_t.ttft_diff_ms.p50)})" if rt_t.ttft_diff_ms else "")
              + f", TPOT mean {ms(rt_t.tpot_mean_diff_ms)} ms"
              + (f" (median {ms(rt_t.tpot_diff_ms.p50)})" if rt_t.tpot_diff_ms else ""))
    else:
        print("runtime timings: not reported by this runtime")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SuiteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
