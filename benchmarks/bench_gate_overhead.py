"""Benchmark: the gate's own time per request, beyond the HTTP exchange, against a real llama-server.

The gate's time is everything it does around a request: building the request body, parsing the
reply, appending the request's record to `requests.jsonl` of a real run record, and analysing
the answers (distinct answers, lengths, divergences). It is measured as the gate's wall time
minus the time spent inside the HTTP exchanges (request sent -> last byte received), divided by
the number of requests. Target: under 1 ms per request.

Usage: python benchmarks/bench_gate_overhead.py [--requests 200] [--max-tokens 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.catalog import get_card, prepare_format  # noqa: E402
from suite.client import GenerationParams, OpenAIClient  # noqa: E402
from suite.definitions import get_definition  # noqa: E402
from suite.launchers.base import LaunchSpec  # noqa: E402
from suite.launchers.local import LocalLauncher, is_installed  # noqa: E402
from suite.records import RunManifest, RunRecord, utcnow  # noqa: E402
from suite.stages.gate_models import load_gate_prompts  # noqa: E402
from suite.stages.repeat import run_gate  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="identical requests per round")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    definition = get_definition("llamacpp")
    if not is_installed(definition):
        print("llama-server is not installed: run `suite setup --runtime llamacpp` first", file=sys.stderr)
        return 2
    card = get_card("tiny")
    model = prepare_format(card, "gguf")
    prompt = load_gate_prompts()["short-open"]
    with tempfile.TemporaryDirectory() as tmp:
        spec = LaunchSpec(runtime=definition, model_path=model, served_name="tiny", log_path=Path(tmp) / "server.log",
                          startup_timeout_s=definition.server.startup_timeout_s)
        record = RunRecord.create(Path(tmp) / "results", RunManifest(
            run_id="bench", model="tiny", arm="llamacpp", runtime="llamacpp", launcher="local", profile="bench",
            started_at=utcnow()))
        per_request_ms: list[float] = []
        client_ms: list[float] = []
        with LocalLauncher().start(spec) as rt, OpenAIClient(rt.base_url, "tiny", params=GenerationParams(
                extra_body=dict(definition.request.extra_body))) as client:
            run_gate(client, [prompt], 5, max_tokens_cap=args.max_tokens)  # warm-up
            for r in range(args.rounds):
                result = run_gate(client, [prompt], args.requests,
                                  max_tokens_cap=args.max_tokens, logprobs=True,
                                  record=lambda kind, **f: record.record_request(kind, signature_digest="bench", **f))
                per_request_ms.append(result.overhead_ms_per_request or float("nan"))
                lines = record.requests_path.read_text().splitlines()[-args.requests:]
                import json

                client_ms.append(1000 * statistics.fmean(json.loads(ln)["overhead_s"] for ln in lines))
                print(f"round {r + 1}: {args.requests} requests, wall {result.wall_s:.2f} s, "
                      f"HTTP {result.http_s:.2f} s, gate overhead {per_request_ms[-1]:.3f} ms/request "
                      f"(of which the client's body building and reply parsing {client_ms[-1]:.3f} ms), "
                      f"distinct answers {result.prompts[0].distinct_answers}")
    best = min(per_request_ms)
    print(f"gate overhead beyond the HTTP exchange: median {statistics.median(per_request_ms):.3f} ms/request, "
          f"best {best:.3f} ms/request over {args.rounds} rounds of {args.requests} "
          f"(target < 1 ms): {'OK' if statistics.median(per_request_ms) < 1.0 else 'OVER TARGET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
