"""The gate at concurrency: N identical requests per prompt, C in flight at once, against a running server.

`suite bench --url` runs the gate one request at a time (the studies' design); this runs the same
gate function (`suite.stages.repeat.run_gate`: same prompts, seed, sampling, analysis and verdict)
with C requests in flight, so that batching inside the runtime gets its chance to change answers.
One table row per (prompt, concurrency): distinct answers in N, the lengths with counts, the verdict.

    python3 benchmarks/gpu/gate_concurrency.py --url http://127.0.0.1:8080/v1 --model NAME \
        [--prompts short-open] [--levels 1,8,64] [--requests 200] [--max-tokens 48] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from suite.client import GenerationParams, OpenAIClient  # noqa: E402
from suite.stages.gate_models import select_prompts  # noqa: E402
from suite.stages.repeat import run_gate  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="the server's OpenAI-compatible address, ending in /v1")
    p.add_argument("--model", required=True, help="the served model name")
    p.add_argument("--prompts", default="short-open", help="gate prompt ids (prompts/gate), comma-separated")
    p.add_argument("--levels", default="1,8,64", help="concurrency levels")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--max-tokens", type=int, default=48, help="cap on each prompt's max_tokens (quick profile: 48)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    prompts = select_prompts([x for x in a.prompts.split(",") if x])
    rows = []
    print(f"{'prompt':<12} {'c':>4} {'distinct':>10} {'wall s':>7}  lengths | verdict", flush=True)
    base = a.url.rstrip("/").removesuffix("/v1")  # the client adds /v1 itself
    with OpenAIClient(base, a.model, timeout_s=600, params=GenerationParams(seed=a.seed, temperature=0.0)) as client:
        for prompt in prompts:
            for c in [int(x) for x in a.levels.split(",")]:
                t0 = time.perf_counter()
                g = run_gate(client, [prompt], a.requests, max_tokens_cap=a.max_tokens,
                             concurrency=c, label=f"c{c}")
                pr = g.prompts[0]
                wall = time.perf_counter() - t0
                rows.append({"prompt": prompt.id, "concurrency": c, "requests": a.requests,
                             "distinct": pr.distinct_answers, "answered": pr.answered, "lengths": pr.lengths_text,
                             "verdict": g.verdict, "wall_s": round(wall, 2),
                             "modal_count": max((len(x.indices) for x in pr.answers), default=0)})
                print(f"{prompt.id:<12} {c:>4} {pr.distinct_answers:>4} of {pr.answered:<4} {wall:>7.1f}  "
                      f"{pr.lengths_text} | {g.verdict}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
