"""The suite's own memory over a long run: RSS per 1,000 requests against a real runtime.

Starts llama-server on the tiny model (the local install under the suite's cache), watches it with
the memory watchdog at 10 Hz the whole time (as a bench does), and sends ``--requests`` short
gate-style requests one at a time through the suite's client, recording every request in a real
run record (requests.jsonl) as the gate does. Every 1,000 requests it prints this process's RSS,
the watchdog's timeline length and the requests file size: a client or watchdog that grows per
request shows as a climbing RSS, a bounded one as a flat line after warm-up.

    python benchmarks/bench_long_run_rss.py [--requests 5000] [--max-tokens 4] [--every 1000]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "watchdog")]

import memwatch  # noqa: E402
from suite.catalog import get_card, prepare_format  # noqa: E402
from suite.client import GenerationParams, OpenAIClient  # noqa: E402
from suite.definitions import get_definition  # noqa: E402
from suite.launchers.base import LaunchSpec  # noqa: E402
from suite.launchers.local import LocalLauncher, is_installed  # noqa: E402
from suite.records import RunManifest, RunRecord, new_run_id, utcnow  # noqa: E402
from suite.analysis.repro import Sample, analyse  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--every", type=int, default=1000)
    args = ap.parse_args()

    definition = get_definition("llamacpp")
    if not is_installed(definition):
        print("llamacpp is not installed: run `suite setup --model tiny` first", file=sys.stderr)
        return 2
    model = prepare_format(get_card("tiny"), "gguf")
    me = psutil.Process()
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp)
        spec = LaunchSpec(runtime=definition, model_path=model, served_name="tiny", log_path=results / "rt.log",
                          startup_timeout_s=definition.server.startup_timeout_s)
        manifest = RunManifest(run_id=new_run_id(None), model="tiny", arm="llamacpp", runtime="llamacpp",
                               launcher="local", profile="long-run", started_at=utcnow())
        record = RunRecord.create(results, manifest)
        with LocalLauncher().start(spec) as rt, OpenAIClient(rt.base_url, "tiny", params=GenerationParams(extra_body={"return_tokens": True})) as client:
            wd = memwatch.Watchdog(memwatch.Policy(), probes=memwatch.default_probes(pid=rt.pid), stop=rt.kill)
            wd.start()
            samples: list[Sample] = []
            t0 = time.perf_counter()
            print(f"{'requests':>9} {'suite RSS MiB':>14} {'Δ since 1st':>12} {'timeline pts':>13} "
                  f"{'requests.jsonl MiB':>19} {'req/s':>7}")
            first_rss = None
            for i in range(1, args.requests + 1):
                c = client.complete("The capital of France is", max_tokens=args.max_tokens, logprobs=2)
                record.record_request("gate", stage="gate", index=i, text=c.text, token_ids=c.token_ids,
                                      logprobs=c.logprobs, top_logprobs=c.top_logprobs, e2e_s=c.e2e_s,
                                      finish_reason=c.finish_reason)
                # The gate keeps one analysis sample per request of a prompt's series (N of them);
                # keep the last N only, as a series does.
                samples.append(Sample(index=i, text=c.text, token_ids=c.token_ids, logprobs=c.logprobs))
                del samples[:-200]
                if i % args.every == 0:
                    gc.collect()
                    rss = me.memory_info().rss / 2**20
                    first_rss = first_rss or rss
                    points = len(wd._recorder.t)  # the in-memory timeline (halved past its cap)
                    size = record.requests_path.stat().st_size / 2**20
                    print(f"{i:>9} {rss:>14.1f} {rss - first_rss:>+12.1f} {points:>13} {size:>19.1f} "
                          f"{i / (time.perf_counter() - t0):>7.1f}", flush=True)
            analyse(samples)
            report = wd.stop()
            print(f"watchdog: {report.sample_count} samples over {report.duration_s:.0f} s, "
                  f"timeline kept {len(report.timeline.t_s)} points ({report.timeline.aggregation})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
