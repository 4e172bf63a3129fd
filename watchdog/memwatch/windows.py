"""The Windows "shared GPU memory" counter (Docker Desktop / WSL 2 hosts, native Windows).

When a runtime overruns its card on Windows, the driver pages into system memory and the
performance counter ``\\GPU Adapter Memory(*)\\Shared Usage`` grows: that is the spill signal
there. The counter is read by a long-running ``typeperf`` (or PowerShell ``Get-Counter`` where
typeperf is missing) in a reader thread; both refresh once a second at most, so this probe's value
changes at about 1 Hz even when the watchdog samples at 10 Hz. Under WSL the Windows tools are
reached through ``/mnt/c``. Elsewhere the probe is unavailable ("not Windows or WSL").

Metric: ``gpu_shared_bytes``, the sum of Shared Usage over all adapters (role "spill").
"""

from __future__ import annotations

import csv
import logging
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from memwatch.probe import Probe

log = logging.getLogger(__name__)

COUNTER = r"\GPU Adapter Memory(*)\Shared Usage"
_WIN_DIR = Path("/mnt/c/Windows/System32")
_PS_SCRIPT = (
    f"Get-Counter -Counter '{COUNTER}' -Continuous -SampleInterval 1 | ForEach-Object {{ "
    "[Console]::WriteLine(($_.CounterSamples | Measure-Object -Property CookedValue -Sum).Sum); "
    "[Console]::Out.Flush() }"
)


def host_kind() -> str | None:
    """'windows', 'wsl', or None elsewhere."""
    if sys.platform == "win32":
        return "windows"
    if sys.platform.startswith("linux"):
        try:
            release = Path("/proc/sys/kernel/osrelease").read_text().lower()
        except OSError:
            return None
        if "microsoft" in release or "wsl" in release:
            return "wsl"
    return None


def parse_typeperf_line(line: str) -> float | None:
    """The sum of the counter columns of one typeperf CSV row; None for the header or a blank row.

    A row reads ``"11/29/2026 23:01:02.345","123.000000","0.000000"``; the header's first cell
    is ``(PDH-CSV 4.0)``.
    """
    line = line.strip()
    if not line.startswith('"'):
        return None
    cells = next(csv.reader([line]))
    if not cells or "PDH-CSV" in cells[0]:
        return None
    total = 0.0
    seen = False
    for cell in cells[1:]:
        try:
            total += float(cell)
            seen = True
        except ValueError:
            continue
    return total if seen else None


def parse_powershell_line(line: str) -> float | None:
    try:
        return float(line.strip().replace(",", "."))
    except ValueError:
        return None


class WindowsSharedGpuProbe(Probe):
    """Shared GPU memory of the Windows host, summed over adapters (about 1 Hz)."""

    name = "windows_shared_gpu"

    def __init__(self) -> None:
        super().__init__()
        self._proc: subprocess.Popen[str] | None = None
        self._latest: float | None = None
        self._updates = 0
        self._tool: str | None = None
        self._host: str | None = None

    def _find_tool(self) -> tuple[list[str], Any] | None:
        for name in ("typeperf", "typeperf.exe"):
            exe = shutil.which(name)
            if exe:
                return [exe, COUNTER, "-si", "1"], parse_typeperf_line
        if (_WIN_DIR / "typeperf.exe").exists():
            return [str(_WIN_DIR / "typeperf.exe"), COUNTER, "-si", "1"], parse_typeperf_line
        for name in ("powershell", "powershell.exe", "pwsh"):
            exe = shutil.which(name)
            if exe:
                return [exe, "-NoProfile", "-Command", _PS_SCRIPT], parse_powershell_line
        ps = _WIN_DIR / "WindowsPowerShell/v1.0/powershell.exe"
        if ps.exists():
            return [str(ps), "-NoProfile", "-Command", _PS_SCRIPT], parse_powershell_line
        return None

    def available(self) -> tuple[bool, str | None]:
        self._host = host_kind()
        if self._host is None:
            return False, "not Windows or WSL"
        found = self._find_tool()
        if found is None:
            return False, "neither typeperf nor PowerShell found"
        cmd, parser = found
        self._tool = Path(cmd[0]).name
        try:
            self._proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                text=True, bufsize=1,
            )
        except OSError as exc:
            return False, f"cannot start {self._tool}: {exc}"
        threading.Thread(target=self._read, args=(parser,), name="memwatch-winctr", daemon=True).start()
        return True, None

    def _read(self, parser: Any) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            value = parser(line)
            if value is not None:
                self._latest = value
                self._updates += 1

    def sample(self) -> dict[str, float]:
        return {} if self._latest is None else {"gpu_shared_bytes": float(self._latest)}

    def roles(self, metric: str) -> tuple[str, ...]:
        return ("spill",) if metric == "gpu_shared_bytes" else ()

    def details(self) -> dict[str, Any]:
        return {"host": self._host, "tool": self._tool, "counter": COUNTER, "updates": self._updates}

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
