"""Run records: write-once files under the results folder, with a schema version.

Layout: `<results>/<model>/<arm>/<run-id>/` holding
- `run.json`      : the manifest, written when the run starts (model, arm, signature, profile);
- `stages/<name>.json` : each stage's result, written once when the stage finishes;
- `requests.jsonl`: one JSON line per request (appended as requests happen);
- `summary.json`  : written once when the run ends; its presence means the run is complete.
A run without `summary.json` is incomplete: `suite bench --resume` continues it, skipping the
stages already written. Every file is written to a temporary name and renamed, never overwritten.
The loader refuses a schema version other than this one with a sentence that says what to do.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from suite.errors import SuiteError
from suite.signature import Signature

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
STAGE_KEYS = ("gate", "controls", "latency", "extraction", "restarts", "sessions", "reloads", "watchdog")

RunStatus = Literal["complete", "incomplete", "failed", "stopped-by-watchdog", "skipped"]


class FreshLaunch(BaseModel):
    """One fresh launch a stage made of the arm's configuration (restarts, sessions, reloads)."""

    index: int
    status: Literal["ok", "refused", "failed"]
    reason: str | None = None  # the log's error line when it did not start or failed
    startup_s: float | None = None

    def did_not_start(self, exc: Exception, refused: bool) -> None:
        """Record a launch that was refused (a start-up error) or could not run here."""
        self.status = "refused" if refused else "failed"
        self.reason = getattr(exc, "error_line", None) or str(exc)


class DeterminismOutcome(BaseModel):
    """What happened to the runtime's determinism mode at start-up."""

    control: str | None = None  # the control tried (e.g. batch-invariant); None: none offered
    outcome: Literal["on", "refused", "not-offered"] = "not-offered"
    error_line: str | None = None  # the log line that says why it was refused


class RunIdentity(BaseModel):
    """What names a run: shared by its manifest (run.json) and its summary."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    model: str
    arm: str
    runtime: str
    launcher: str
    profile: str
    started_at: str


class RunManifest(RunIdentity):
    signature: Signature | None = None


class Summary(RunIdentity):
    """summary.json: one arm's run, one key per stage (None when the stage did not run)."""

    finished_at: str | None = None
    status: RunStatus = "incomplete"
    reason: str | None = None  # why failed / skipped / stopped
    wall_s: float | None = None
    startup_s: float | None = None
    determinism: DeterminismOutcome = Field(default_factory=DeterminismOutcome)
    signature: Signature | None = None
    gate: dict[str, Any] | None = None
    controls: dict[str, Any] | None = None
    latency: dict[str, Any] | None = None
    extraction: dict[str, Any] | None = None
    restarts: dict[str, Any] | None = None
    sessions: dict[str, Any] | None = None
    reloads: dict[str, Any] | None = None
    watchdog: dict[str, Any] | None = None


def utcnow() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_once(path: Path, data: str) -> None:
    """Write a file through a temporary name and a rename; refuse to replace an existing one."""
    if path.exists():
        raise SuiteError(f"{path}: already written; run records are never overwritten")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise SuiteError(f"{path}: cannot write the run record: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)  # fails if path appeared meanwhile: never overwrite
    except OSError as exc:
        # A full disk or a lost folder: the record file is never left half-written (only the
        # complete temporary file is ever linked into place).
        raise SuiteError(f"{path}: cannot write the run record: {exc.strerror or exc}") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _read_json(path: Path) -> Any:
    """A record file's JSON; unreadable, undecodable or malformed files are one-line errors."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad UTF-8 or JSON
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise SuiteError(f"{path}: cannot read run record: {reason}") from None


def _invalid(path: Path, exc: ValidationError) -> SuiteError:
    first = exc.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return SuiteError(f"{path}: invalid run record at {key}: {first['msg']}")


def _check_version(path: Path, data: Any) -> None:
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: not a run record (a JSON object was expected, found {type(data).__name__})")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise SuiteError(
                f"{path}: schema version {version} is newer than this suite's {SCHEMA_VERSION}; "
                "upgrade the suite to read it"
            )
        raise SuiteError(
            f"{path}: schema version {version} is not this suite's {SCHEMA_VERSION}; "
            "re-run the benchmark or use the suite version that wrote it"
        )


class RunRecord:
    """A run folder being written: manifest, stage files, requests, then the summary."""

    def __init__(self, run_dir: Path, manifest: RunManifest):
        self.dir = run_dir
        self.manifest = manifest
        self._lock = threading.Lock()

    @classmethod
    def create(cls, results: Path, manifest: RunManifest) -> "RunRecord":
        run_dir = results / manifest.model / manifest.arm / manifest.run_id
        if run_dir.exists():
            raise SuiteError(f"{run_dir}: run folder exists already")
        run_dir.mkdir(parents=True)
        write_once(run_dir / "run.json", manifest.model_dump_json(indent=2))
        return cls(run_dir, manifest)

    @classmethod
    def open_incomplete(cls, run_dir: Path) -> "RunRecord":
        path = run_dir / "run.json"
        data = _read_json(path)
        _check_version(path, data)
        try:
            return cls(run_dir, RunManifest.model_validate(data))
        except ValidationError as exc:
            raise _invalid(path, exc) from None

    @property
    def requests_path(self) -> Path:
        return self.dir / "requests.jsonl"

    @property
    def log_dir(self) -> Path:
        d = self.dir / "logs"
        d.mkdir(exist_ok=True)
        return d

    def record_request(self, kind: str, **fields: Any) -> None:
        """Append one request's record (thread-safe); a line is written whole or not at all."""
        line = (json.dumps({"kind": kind, "at": utcnow(), **fields}, default=str) + "\n").encode("utf-8")
        with self._lock:
            try:
                fd = os.open(self.requests_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise SuiteError(f"{self.requests_path}: cannot record a request: {exc.strerror or exc}") from None
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(line)
                while view:
                    written = os.write(fd, view)
                    if written <= 0:
                        raise OSError(28, "No space left on device")
                    view = view[written:]
            except OSError as exc:
                os.ftruncate(fd, start)  # a short write leaves no torn line behind
                raise SuiteError(f"{self.requests_path}: cannot record a request: {exc.strerror or exc}") from None
            finally:
                os.close(fd)

    def set_aside_unfinished(self, done: set[str]) -> int:
        """Before a resume: move the request lines of stages that did not finish to
        `requests-interrupted.jsonl`, so the record reads as one run. Returns how many moved."""
        if not self.requests_path.exists():
            return 0
        keep, moved = [], []
        for ln in self.requests_path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                stage = json.loads(ln).get("stage")
            except ValueError:
                stage = None  # a torn last line of the interrupted run
                moved.append(ln)
                continue
            (keep if stage is None or stage in done else moved).append(ln)
        if moved:
            with (self.dir / "requests-interrupted.jsonl").open("a", encoding="utf-8") as fh:
                fh.write("\n".join(moved) + "\n")
            tmp = self.requests_path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(ln + "\n" for ln in keep), encoding="utf-8")
            tmp.replace(self.requests_path)
        return len(moved)

    def stage_done(self, name: str) -> bool:
        return (self.dir / "stages" / f"{name}.json").exists()

    def write_stage(self, name: str, result: BaseModel | dict[str, Any]) -> None:
        payload = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
        write_once(self.dir / "stages" / f"{name}.json", json.dumps(payload, indent=2, default=str))

    def read_stage(self, name: str) -> dict[str, Any] | None:
        p = self.dir / "stages" / f"{name}.json"
        if not p.exists():
            return None
        data = _read_json(p)
        if not isinstance(data, dict):
            raise SuiteError(f"{p}: not a stage result (a JSON object was expected, found {type(data).__name__})")
        return data

    def finish(self, summary: Summary) -> Path:
        for key in STAGE_KEYS:
            if getattr(summary, key) is None:
                setattr(summary, key, self.read_stage(key))
        path = self.dir / "summary.json"
        write_once(path, summary.model_dump_json(indent=2))
        return path


def load_summary(path: Path) -> Summary:
    """Load and validate one summary.json; a wrong schema version is a one-line error."""
    data = _read_json(path)
    _check_version(path, data)
    try:
        return Summary.model_validate(data)
    except ValidationError as exc:
        raise _invalid(path, exc) from None


def incomplete_summary(run_dir: Path) -> Summary:
    """A summary for a run that never finished, built from its manifest and stage files."""
    rec = RunRecord.open_incomplete(run_dir)
    m = rec.manifest
    summary = Summary(
        **m.model_dump(exclude={"signature"}), signature=m.signature, status="incomplete",
        reason="the run did not finish (interrupted); `suite bench --resume` continues it",
    )
    for key in STAGE_KEYS:
        setattr(summary, key, rec.read_stage(key))
    return summary


def iter_run_dirs(results: Path) -> list[Path]:
    return sorted(p.parent for p in results.glob("*/*/*/run.json"))


def load_all(results: Path) -> list[Summary]:
    """Every run under the results folder, complete or not, oldest first."""
    out: list[Summary] = []
    for run_dir in iter_run_dirs(results):
        summary_path = run_dir / "summary.json"
        out.append(load_summary(summary_path) if summary_path.exists() else incomplete_summary(run_dir))
    out.sort(key=lambda s: (s.started_at, s.run_id))
    return out


def find_incomplete(results: Path, model: str, arm: str) -> Path | None:
    """The newest incomplete run folder of this model and arm, if any."""
    candidates = sorted(p.parent for p in (results / model / arm).glob("*/run.json")
                        if not (p.parent / "summary.json").exists())
    return candidates[-1] if candidates else None


def new_run_id(signature_digest: str | None) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{stamp}-{(signature_digest or 'nosig')[:8]}"
