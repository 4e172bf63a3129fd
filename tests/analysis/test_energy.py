"""Energy: NVML's power reading and energy counter, per stage, per control row, per batch mode.

No GPU here: a fake `pynvml` module (in this file) stands in for NVML, with one device whose
energy counter is scripted (a constant power draw: the counter grows with the clock, or a list of
readings, or no counter at all). The real path runs on a GPU machine (tests/launchers/test_watchdog_gpu.py).
"""

from __future__ import annotations

import json
import threading
import time
import types
from collections import namedtuple
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from suite import gpu

Mem = namedtuple("Mem", "used total free")
Util = namedtuple("Util", "gpu memory")


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's name)
    pass


def fake_nvml(watts: float = 300.0, readings: list[int] | None = None, counter: bool = True,
              power: bool = True) -> types.ModuleType:
    """A pynvml stand-in: one H200-like device drawing `watts` (its energy counter grows with the
    clock), or returning `readings` (mJ) one call after another; `counter=False`: no counter."""
    m = types.ModuleType("pynvml")
    t0 = time.monotonic()
    script = list(readings or [])
    m.NVMLError = NVMLError
    m.NVMLError_NotSupported = NVMLError_NotSupported
    m.NVMLError_LibraryNotFound = type("NVMLError_LibraryNotFound", (NVMLError,), {})
    m.NVMLError_DriverNotLoaded = type("NVMLError_DriverNotLoaded", (NVMLError,), {})
    m.nvmlMemory_v2 = 2
    m.calls = {"energy": 0}
    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: 1
    m.nvmlDeviceGetHandleByIndex = lambda i: ("dev", i)
    m.nvmlDeviceGetName = lambda h: "NVIDIA H200 (fake)"
    m.nvmlSystemGetDriverVersion = lambda: "580.0"
    m.nvmlDeviceGetMemoryInfo = lambda h, version=None: Mem(2 * 2**30, 141 * 2**30, 139 * 2**30)
    m.nvmlDeviceGetUtilizationRates = lambda h: Util(50, 10)
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: []
    m.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []

    def power_usage(h: Any) -> int:
        if not power:
            raise NVMLError_NotSupported("Not Supported")
        return int(watts * 1000)

    def energy(h: Any) -> int:
        if not counter:
            raise NVMLError_NotSupported("Not Supported")
        m.calls["energy"] += 1
        if script:
            return script.pop(0)
        return 5_000_000_000 + int((time.monotonic() - t0) * watts * 1000)

    m.nvmlDeviceGetPowerUsage = power_usage
    m.nvmlDeviceGetTotalEnergyConsumption = energy
    return m


@pytest.fixture
def nvml_fake(monkeypatch: pytest.MonkeyPatch):
    """Install a fake NVML for both readers (suite.gpu and the watchdog's probe)."""
    def install(**kw: Any) -> types.ModuleType:
        mod = fake_nvml(**kw)
        monkeypatch.setitem(__import__("sys").modules, "pynvml", mod)
        monkeypatch.setattr(gpu, "_nvml_state", (mod, None))
        return mod
    return install


def test_the_watchdog_probe_samples_power_and_the_energy_counter(nvml_fake) -> None:
    from memwatch import NvmlProbe

    nvml_fake(readings=[7_000_000, 7_000_500, 7_002_000])
    probe = NvmlProbe()
    assert probe.available() == (True, None)
    values = [probe.sample() for _ in range(3)]
    assert values[0]["gpu0_power_w"] == 300.0
    assert [v["gpu0_energy_j"] for v in values] == [7000.0, 7000.5, 7002.0]
    d = probe.details()
    assert d["energy_mj_first"] == {"0": 7_000_000} and d["energy_mj_last"] == {"0": 7_002_000}
    assert d["energy_j"] == 2.0
    assert probe.roles("gpu0_energy_j") == () and probe.roles("gpu0_power_w") == ()  # no ceiling applies


def test_a_gpu_without_counter_or_power_reading_leaves_them_out(nvml_fake) -> None:
    from memwatch import NvmlProbe

    nvml_fake(counter=False, power=False)
    probe = NvmlProbe()
    assert probe.available()[0]
    v = probe.sample()
    assert "gpu0_energy_j" not in v and "gpu0_power_w" not in v and "gpu0_used_bytes" in v
    assert probe.details()["energy_j"] is None
    assert gpu.energy_mj() is None and gpu.power_w() is None and gpu.energy_reader() is None
    with gpu.EnergyMeter() as m:
        pass
    assert m.result(100) is None


def test_the_meter_gives_joules_power_and_j_per_token(nvml_fake) -> None:
    nvml_fake(readings=[1_000_000, 1_450_000])
    with gpu.EnergyMeter() as m:
        time.sleep(0.05)
    e = m.result(300)
    assert e is not None and e.joules == 450.0 and e.output_tokens == 300 and e.j_per_token == 1.5
    assert e.mean_power_w is not None and e.mean_power_w > 450.0 / 1.0
    assert m.result(0).j_per_token is None  # no token: no J/token, the joules stay  # type: ignore[union-attr]
    nvml_fake(readings=[2_000_000, 1_000_000])  # the counter went backwards (a driver reload): no figure
    with gpu.EnergyMeter() as m2:
        pass
    assert m2.result(10) is None


def test_no_driver_no_energy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "_nvml_state", (None, "no NVIDIA driver answers"))
    assert gpu.energy_mj() is None and gpu.energy_reader() is None
    with gpu.EnergyMeter() as m:
        pass
    assert m.result(5) is None


def test_a_control_row_reads_against_the_default_in_time_and_energy() -> None:
    from suite.stages.controls.view import controls_view
    from suite.stages.controls import MatrixRow, ControlMatrixResult

    def row(name: str, tps: float, joules: float, tokens: int) -> MatrixRow:
        return MatrixRow(configuration=name, status="ok", tokens_per_s=tps, distinct={"short-open": 1},
                          answered={"short-open": 200}, lengths={"short-open": "48 ×200"},
                          energy=gpu.Energy(joules=joules, wall_s=10.0, mean_power_w=joules / 10).with_tokens(tokens))

    res = ControlMatrixResult(runtime="vllm", arm="vllm-gpu", requested=["all"], n_requests=200, prompts=["short-open"],
                         rows=[row("default", 100.0, 1000.0, 9600), row("batch-invariant", 74.0, 1300.0, 9600),
                               MatrixRow(configuration="eager", status="refused", reason="no")])
    v = controls_view(res, ["short-open"])
    assert v is not None
    lines = [r["line"] for r in v["rows"]]
    assert lines[1] == "batch-invariant: 1 distinct of 200, 0.74x the tokens/s, 1.30x the J/token"
    assert lines[0] == "default: 1 distinct of 200, 0.104 J/token"
    assert lines[2] == "eager: refused (no)"
    # without energy (a CPU machine): the time ratio alone
    res.rows[1].energy = None
    assert controls_view(res, ["short-open"])["rows"][1]["line"] == "batch-invariant: 1 distinct of 200, 0.74x the tokens/s"  # type: ignore[index]


# -- the bench: per-stage energy over a scripted server ----------------------------------------------

class Server:
    """GET /v1/models, POST /v1/completions (plain and streamed): four tokens per answer."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/").endswith("/v1/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode())
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                time.sleep(0.02)
                ids = [5, 6, 7, 8]
                lp = {"tokens": ["a"] * 4, "token_logprobs": [-0.1] * 4}
                if not body.get("stream"):
                    self._send(200, json.dumps({"choices": [{"text": " a a a a", "token_ids": ids, "logprobs": lp,
                                                            "finish_reason": "length"}],
                                                "usage": {"prompt_tokens": 3, "completion_tokens": 4}}).encode())
                    return
                out = b"".join(b"data: " + json.dumps({"choices": [{"text": " a", "token_ids": [i],
                                                                     "logprobs": {"token_logprobs": [-0.1]},
                                                                     "finish_reason": None}]}).encode() + b"\n\n"
                               for i in ids)
                out += b'data: {"choices": [], "usage": {"completion_tokens": 4}}\n\ndata: [DONE]\n\n'
                self._send(200, out, "text/event-stream")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.server.shutdown()
    s.server.server_close()


def test_the_bench_records_each_stage_joules_per_output_token(nvml_fake, server: Server, tmp_path: Path) -> None:
    from suite.bench import BenchRequest, run_bench
    from suite.records import load_all

    nvml_fake(watts=300.0)
    summaries = run_bench(BenchRequest.build(model=None, url=server.url, profile="quick", stages=["gate", "batch"], results=tmp_path / "results"))
    s = summaries[0]
    assert s.status == "complete", s.reason
    gate_e, batch_e = s.energy["gate"], s.energy["batch"]
    assert gate_e.output_tokens == 5 * 4  # the quick gate: 5 answers of 4 tokens
    assert gate_e.j_per_token == pytest.approx(gate_e.joules / 20)
    assert 150 < gate_e.mean_power_w < 450  # the scripted 300 W, over a span timed a little apart
    # the batch stage: every request's tokens (2 alone + 2 x (3 + 4) in batches), and per mode
    assert batch_e.output_tokens == (2 + 2 * 7) * 4
    assert s.batch is not None and all(m.energy_j is not None and m.j_per_token for m in s.batch.modes)
    assert s.batch.energy_j is not None
    # the record on disk has the same figures, typed
    again = next(iter(load_all(tmp_path / "results")))
    assert again.energy["gate"].joules == gate_e.joules


def test_batch_modes_read_against_the_first_arm_in_time_and_energy() -> None:
    from suite.stages.batch.view import batch_ratios

    def view(tps: float | None, jpt: float | None) -> dict:
        x = {"mode": "mixed", "tokens_per_s": tps, "j_per_token": jpt, "against": None}
        return {"modes": [x], "by_mode": {"mixed": x}}

    views = [None, view(1000.0, 0.10), view(740.0, 0.13), view(500.0, None)]
    batch_ratios(views, ["cpu", "vllm-gpu", "vllm-gpu-batch-invariant", "other"])
    assert views[1]["modes"][0]["against"] is None  # the base itself
    assert views[2]["modes"][0]["against"] == "0.74x the tokens/s, 1.30x the J/token of vllm-gpu"
    assert views[3]["modes"][0]["against"] == "0.50x the tokens/s of vllm-gpu"  # no energy: the time ratio alone
    batch_ratios([None, None], ["a", "b"])  # nothing ran: nothing to say


def test_the_export_has_energy_rows_per_stage_and_control_row(tmp_path: Path) -> None:
    import shutil

    from suite.export import TABLES, energy_rows
    from suite.site.figures import load_runs

    golden = Path(__file__).resolve().parents[1] / "golden" / "results"
    results = tmp_path / "results"
    shutil.copytree(golden, results)
    e = gpu.Energy(joules=120.0, wall_s=2.0, mean_power_w=60.0).with_tokens(400)
    for summary in results.glob("tiny/llamacpp/*/summary.json"):
        data = json.loads(summary.read_text())
        data["energy"] = {"gate": e.model_dump()}
        for row in (data.get("controls") or {}).get("rows", []):
            row["energy"] = e.model_dump()
        summary.chmod(0o644)
        summary.write_text(json.dumps(data))
    runs = [run for m in load_runs(results).values() for a in m.arms.values() for run in a.runs]
    rows = energy_rows(runs)
    assert rows and all(r["stage"] == "gate" and r["j_per_token"] == 0.3 for r in rows)
    with_controls = [r for r in TABLES["controls"](runs) if r["energy_j"] is not None]
    assert all(r["j_per_token"] == 0.3 for r in with_controls)


def test_the_suites_own_later_launches_are_not_other_processes(nvml_fake) -> None:
    """The arm's main watchdog keeps sampling while the bench starts its fresh launches (restarts,
    control rows): their GPU memory is the suite's own, not another process's."""
    from types import SimpleNamespace

    from memwatch import NvmlProbe

    mod = nvml_fake()
    procs = [SimpleNamespace(pid=100, usedGpuMemory=10 * 2**30), SimpleNamespace(pid=200, usedGpuMemory=20 * 2**30),
             SimpleNamespace(pid=300, usedGpuMemory=1 * 2**30)]
    mod.nvmlDeviceGetComputeRunningProcesses = lambda h: procs
    probe = NvmlProbe(pids=lambda: [100], own=lambda: {200})
    assert probe.available()[0]
    v = probe.sample()
    assert v["gpu_proc_bytes"] == 10 * 2**30
    assert v["gpu_own_proc_bytes"] == 20 * 2**30
    assert v["gpu_other_proc_bytes"] == 1 * 2**30
    # without the caller's own processes named, the probe reads as before
    plain = NvmlProbe(pids=lambda: [100])
    assert plain.available()[0]
    assert "gpu_own_proc_bytes" not in plain.sample()


def test_the_bench_names_its_runtimes_process_trees() -> None:
    import subprocess
    import sys
    from types import SimpleNamespace

    from suite.bench import runtime_pids

    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"])
    try:
        time.sleep(1.0)
        pids = runtime_pids([SimpleNamespace(pid=child.pid), SimpleNamespace(pid=None)])
        assert child.pid in pids and len(pids) >= 2
    finally:
        import psutil

        for c in psutil.Process(child.pid).children(recursive=True):
            c.kill()
        child.kill()
        child.wait()
