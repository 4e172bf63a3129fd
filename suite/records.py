"""Run records: write-once files under the results folder, with a schema version.

Layout: `<results>/<model>/<arm>/<run-id>/` holding
- `run.json`      : the manifest, written when the run starts (model, arm, signature, profile);
- `stages/<name>.json` : each stage's result, written once when the stage finishes;
- `requests.jsonl`: one JSON line per request (appended as requests happen);
- `summary.json`  : written once when the run ends; its presence means the run is complete.
- `.owner`       : while the run is not finished, the writer's lock (`fcntl.flock`, held from
  creation until the summary is written, released by the kernel when the writer dies) and who
  holds it; removed with the summary.
A run without `summary.json` is incomplete: `suite bench --resume` continues it, skipping the
stages already written, but never while another process holds its owner lock (a live run is
refused with one line naming the holder). Every file is written to a temporary name and linked
into place, never overwritten, and the folder is fsynced after the link so a crash right after
cannot lose the name.
The loader refuses a schema version other than this one with a sentence that says what to do.

A finished record may be kept compacted (`compact_run`, `tools/compact_records.py`): its request
lines, stage files and summary xz-compressed as `<name>.xz` in place of `<name>`, as the example
trees in docs/examples are. Every reader here takes either form (`record_path`, `read_record`), the
plain one first; a run is written plain, line by line, and a compacted run is expanded back
(`expand_run`) before `--resume` continues it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import lzma
import os
import re
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, Field, TypeAdapter, ValidationError, create_model

from memwatch.report import WatchdogReport
from suite.analysis.claims import Recomputed
from suite.claims import recompute_verdicts, refresh_failure
from suite.contention import Contention
from suite.errors import SuiteError
from suite.gpu import Energy
from suite.paths import FILE_MODE, open_lock
from suite.provenance import SuiteBuild
from suite.sanitize import has_control, printable
from suite.secrets import scrub
from suite.signature import Signature
from suite.stages import STAGES, with_stage_settings

if TYPE_CHECKING:
    from suite.stages.batch import BatchResult
    from suite.stages.controls import ControlMatrixResult
    from suite.stages.extraction import ExtractionResult
    from suite.stages.extraction.reloads import ReloadsResult
    from suite.stages.gate_models import GateResult
    from suite.stages.latency import LatencyResult
    from suite.stages.restarts import RestartsResult
    from suite.stages.sessions import SessionsResult

log = logging.getLogger(__name__)

SCHEMA_VERSION = 4

# What a run record holds besides its identity: each stage's result under the stage's name (from
# the stage registry), and the memory watchdog's report.
RESULT_MODELS: dict[str, type[BaseModel]] = {name: stage.result for name, stage in STAGES.items()} | {
    "watchdog": WatchdogReport}

RunStatus = Literal["complete", "incomplete", "failed", "stopped-by-watchdog", "skipped"]


def update_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 -> 2: the stage results became typed models; a schema-1 record holds the same
    fields under the same names, so only its version moves (a field renamed later gets its own
    `update_to_N` here, applied in order)."""
    return data | {"schema_version": 2}


def update_to_3(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 -> 3: a stage's settings that were fields of the profile (`Stage.profile_keys`:
    batch composition's `batch_trials`, ...) are kept in the profile's `stage_settings` under the
    stage's name, as the stage's own settings."""
    settings = data.get("profile_settings")
    if isinstance(settings, dict):
        data = data | {"profile_settings": with_stage_settings(settings)}
    return data | {"schema_version": 3}


def update_to_4(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 3 -> 4: a record keeps the suite's code that wrote it (`suite`: version, git commit,
    tree modified) and its invocation the run's tags (`invocation.tags`); a schema-3 record has
    neither, and reads as None and no tags."""
    return data | {"schema_version": 4}


# Numbered upgrades (as asv's `update_to_N`): UPGRADES[n] turns a schema n-1 record into n.
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {2: update_to_2, 3: update_to_3, 4: update_to_4}


class DeterminismOutcome(BaseModel):
    """What happened to the runtime's determinism mode at start-up."""

    control: str | None = None  # the control tried (e.g. batch-invariant); None: none offered
    # refused: the runtime's log matched a refusal pattern of the control; failed: it did not
    # start in that mode for another reason (a crash, a timeout). Either way the arm ran in default mode.
    # off: offered, and the card's arm asked for the default mode (`determinism_mode = false`).
    outcome: Literal["on", "refused", "failed", "not-offered", "off"] = "not-offered"
    error_line: str | None = None  # the log line that says why it was refused or failed
    # Refused in an earlier run of the same configuration on this machine (that run's id, or when):
    # not started again this time (suite.refusals; `suite bench --retry-refused` tries it).
    known_from: str | None = None
    memo_key: str | None = Field(default=None, exclude=True)  # the refusal's key, this process only


class Invocation(BaseModel):
    """What was asked for: the command line, and every setting that differs from the named profile.

    A run labelled `quick` that ran 6 restarts and a reload says so here (`overrides`), and on its
    page beside the profile's name."""

    command: list[str] | None = None  # the suite's command line as typed, secrets redacted; None: not from the CLI
    overrides: dict[str, Any] = Field(default_factory=dict)  # profile setting -> the value this run used instead
    stages: list[str] = Field(default_factory=list)  # the stages asked for (a stage a verdict adds is not among them)
    controls: list[str] | None = None  # `suite gate --controls`: the control sets asked for
    # `--tag KEY=VALUE` (given more than once): the user's own labels of the run ("driver=575"),
    # shown with it and filterable in `suite results --tag`; empty in records written before tags
    tags: dict[str, str] = Field(default_factory=dict)

    def overrides_text(self) -> str:
        """`gate requests 3 · restarts launches 6 · reloads launches 1 · controls auto off`; empty
        when the profile ran as it is."""
        def value(v: Any) -> str:
            if isinstance(v, bool):
                return "on" if v else "off"
            if isinstance(v, list):
                return ",".join(map(str, v)) if v else "none"
            return "none" if v is None else str(v)

        return " · ".join(f"{k.replace('_', ' ').replace('.', ' ')} {value(v)}" for k, v in self.overrides.items())

    def command_text(self) -> str | None:
        """The command line as a shell would take it, or None."""
        import shlex

        return shlex.join(self.command) if self.command else None


class RuntimeFailure(BaseModel):
    """How the arm's runtime failed: what a failed arm's page shows first.

    `what` is the sentence: "crashed: SIGSEGV (segmentation fault) 1.3 s after start", or
    "crashed: SIGSEGV (segmentation fault) during stage gate after 3 of 20 requests"."""

    what: str
    cause: Literal["signal", "exit", "timeout", "refused", "gone"]  # gone: not running, the reason unknown
    signal: str | None = None  # "SIGSEGV" when it ended by a signal
    exit_status: int | None = None  # its exit status when it exited
    after_s: float | None = None  # seconds from its start (a start-up failure)
    stage: str | None = None  # the stage it died in; None: at start-up
    requests_done: int | None = None  # requests of that stage answered before it died ...
    requests_planned: int | None = None  # ... of that many planned
    error_line: str | None = None  # the log line that reads as an error (never an INFO line); None: none does
    log_tail: list[str] = Field(default_factory=list)  # the log's last lines (20), secrets scrubbed
    log_file: str | None = None  # the runtime's log, relative to the run folder


# A record's names (model, arm, runtime ...) show on every page, chart and table, and the chart
# renderer aborts the whole process on a control character: a name holds none, and is 1 to 128
# characters (pages name their files by the name's slug, never by the name).
NAME_MAX_CHARS = 128


def _check_record_name(name: str) -> str:
    if not name or len(name) > NAME_MAX_CHARS or has_control(name):
        raise ValueError(f"{printable(repr(name))[:140]} is not a name (1 to {NAME_MAX_CHARS} characters, "
                         "no control character)")
    return name


def _check_record_text(text: str) -> str:
    if has_control(text):
        raise ValueError(f"{printable(repr(text))[:140]} holds a control character")
    return text


RecordName = Annotated[str, AfterValidator(_check_record_name)]
RecordText = Annotated[str, AfterValidator(_check_record_text)]


def name_problem(name: str) -> str | None:
    """What keeps a name given on the command line (a model, an arm, a runtime) from naming a
    record and a folder under the results: empty, over NAME_MAX_CHARS characters, a control
    character (NUL among them), a path separator or "..". None: it is a name."""
    if not name:
        return "empty; give a name"
    if len(name) > NAME_MAX_CHARS:
        return f"too long; a name has at most {NAME_MAX_CHARS} characters"
    if has_control(name) or "\t" in name or "\n" in name:
        return "holds a control character"
    if "/" in name or "\\" in name:
        return "holds a path separator; a name is one folder's"
    if ".." in name or name == ".":
        return "holds '..' or is '.'; a name is one folder's"
    return None


def short_id_of(run_id: str) -> str:
    """A run's 8-character id: the start of the SHA-256 of its run id (unique per run; the run
    id's tail is its configuration's signature, which reruns share, and every failed run's is
    `nosig`)."""
    import hashlib

    return hashlib.sha256(run_id.encode()).hexdigest()[:8]


class RunIdentity(BaseModel):
    """What names a run: shared by its manifest (run.json) and its summary. Its names are checked
    on load (`RecordName`): a name that is not one makes the record one that is named and skipped."""

    schema_version: int = SCHEMA_VERSION
    run_id: RecordName
    model: RecordName
    arm: RecordName
    runtime: RecordName
    launcher: RecordName
    profile: RecordName
    started_at: RecordText
    # The suite's code that wrote it (version, git commit, tree modified), beside the signature and
    # never in its digest; None: a record written before the suite kept it.
    suite: SuiteBuild | None = None

    @property
    def tags(self) -> dict[str, str]:
        """The run's `--tag KEY=VALUE` labels (its invocation's)."""
        invocation = getattr(self, "invocation", None)
        return dict(invocation.tags) if invocation is not None else {}

    @property
    def short_id(self) -> str:
        """The 8-character id printed for the run, its own (`short_id_of`): reruns of one
        configuration share a signature, never a short id. `suite compare` takes it, or a unique
        prefix of it or of the run id."""
        return short_id_of(self.run_id)


class RunManifest(RunIdentity):
    signature: Signature | None = None
    # the profile's settings after the command line's overrides (--gate-requests...): a resume
    # compares them, since the profile's name alone does not say what ran (None: older records)
    profile_settings: dict[str, Any] | None = None
    invocation: Invocation | None = None  # None: a record from before invocations were kept


class LaunchWatchdog(BaseModel):
    """The watchdog of one fresh launch of an arm (a restart, a session, a control row, a reload)."""

    label: str  # the stage and the launch's controls, e.g. "restarts: default"
    report: WatchdogReport


class SummaryBase(RunIdentity):
    """summary.json without the stage results: how the run ended."""

    finished_at: str | None = None
    status: RunStatus = "incomplete"
    reason: str | None = None  # why failed / skipped / stopped
    wall_s: float | None = None
    startup_s: float | None = None
    determinism: DeterminismOutcome = Field(default_factory=DeterminismOutcome)
    signature: Signature | None = None
    # Per stage, the GPUs' energy while it ran and its joules per output token (NVML's energy
    # counter; empty where no NVIDIA driver answers). A stage that starts runtimes of its own
    # (restarts, sessions, controls) includes their start-ups.
    energy: dict[str, Energy] = Field(default_factory=dict)
    # per stage, other processes' share of the CPUs while it ran (suite.contention): busy marks its timings
    contention: dict[str, Contention] = Field(default_factory=dict)
    invocation: Invocation | None = None  # the command line and the profile's overrides
    failure: RuntimeFailure | None = None  # how the runtime failed (a crash, an exit, a timeout); None: it did not
    # the watchdog of every fresh launch beside the main one, in the order they ran (the memory
    # chart covers each of them; the main launch's report is the `watchdog` stage)
    launch_watchdogs: list[LaunchWatchdog] = Field(default_factory=list)
    stage_s: dict[str, float] = Field(default_factory=dict)  # each stage's wall time, in the order they ran
    # Verdict texts the run printed when it ended that today's statistics, recomputed from its
    # answers when it was read (suite.claims), say otherwise; never written into a record.
    recomputed: list[Recomputed] = Field(default_factory=list, exclude=True)


# summary.json: one arm's run, and one typed field per stage of the registry (and the watchdog),
# None when it did not run: `summary.gate` is a GateResult, `summary.latency` a LatencyResult...
if TYPE_CHECKING:
    # What the type checker reads: the fields that the built-in stages give the model made below
    # (a stage from another package adds its own at run time; code reaches it by name).
    # tests/records/test_summary_fields.py holds this list to the stage registry.
    class Summary(SummaryBase):
        """summary.json: one arm's run, one typed result per stage (None when the stage did not run)."""

        gate: GateResult | None = None
        batch: BatchResult | None = None
        latency: LatencyResult | None = None
        extraction: ExtractionResult | None = None
        reloads: ReloadsResult | None = None
        restarts: RestartsResult | None = None
        controls: ControlMatrixResult | None = None
        sessions: SessionsResult | None = None
        watchdog: WatchdogReport | None = None
else:
    Summary = create_model(
        "Summary", __base__=SummaryBase,
        __doc__="summary.json: one arm's run, one typed result per stage (None when the stage did not run).",
        **{name: (model | None, None) for name, model in RESULT_MODELS.items()},
    )


# -- request lines (requests.jsonl) ----------------------------------------------------------------
# One JSON line per request, `kind` first. Each stage declares the models of the lines it writes
# (`Stage.lines`); `RequestLine` joins them and picks the model by `kind`.

LINE_MODELS: tuple[type[BaseModel], ...] = tuple(dict.fromkeys(m for stage in STAGES.values() for m in stage.lines))
# A union of the registry's line models, made at run time: the checker cannot read it as a type
# (valid-type), and `X | Y` has no spelling for a tuple of classes (UP007's rewrite drops the Union).
RequestLine = Annotated[Union[LINE_MODELS], Field(discriminator="kind")]  # type: ignore[valid-type]  # noqa: UP007
REQUEST_LINE: TypeAdapter[Any] = TypeAdapter(RequestLine)
_KIND_PREFIX = re.compile(r'\{"kind": "([^"\\]*)"')
_ERROR_FIELDS = ("error", "reason", "error_line")  # a request line's fields that quote an error message


def read_requests(run_dir: Path, kinds: Iterable[str]) -> list[Any]:
    """The request lines of these kinds from a run's requests.jsonl, in order, as their models.

    A line cut short (the last line of an interrupted run) or one that does not match its kind's
    model is skipped with a warning naming the file and line."""
    path = record_path(run_dir / "requests.jsonl")
    wanted = set(kinds)
    out: list[Any] = []
    if not os.path.lexists(path):
        return out
    try:
        fh = read_record(run_dir / "requests.jsonl")
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link to a file elsewhere: none of this run's lines
            log.warning("%s: request records skipped: a symbolic link (not followed)", path)
            return out
        raise SuiteError(f"{path}: cannot read the request records: {exc.strerror or exc}") from None
    with fh:
        for lineno, raw in _lines(fh, path):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                log.warning("%s:%d: request line skipped: not UTF-8 (byte %d)", path, lineno, exc.start)
                continue
            if not line:
                continue
            # lines are written kind first: lines of other kinds are skipped without parsing
            head = _KIND_PREFIX.match(line)
            if head is not None and head.group(1) not in wanted:
                continue
            try:
                data = json.loads(line)
            except (ValueError, RecursionError):
                log.warning("%s:%d: unreadable request line skipped", path, lineno)
                continue
            if not isinstance(data, dict):
                log.warning("%s:%d: request line skipped: a JSON %s, not an object", path, lineno,
                            type(data).__name__)
                continue
            kind = data.get("kind")
            if not isinstance(kind, str) or kind not in wanted:
                continue
            try:
                out.append(REQUEST_LINE.validate_python(data))
            except ValidationError as exc:
                first = exc.errors()[0]
                log.warning("%s:%d: request line skipped: %s: %s", path, lineno,
                            ".".join(str(x) for x in first["loc"]), first["msg"])
    return out


def _lines(fh: IO[bytes], path: Path) -> Iterable[tuple[int, bytes]]:
    """The numbered lines of a request file; a compacted one that is corrupt or cut short ends at
    the last line it could read, with a warning."""
    lineno = 0
    try:
        for lineno, raw in enumerate(fh, 1):
            yield lineno, raw
    except PACK_ERRORS as exc:
        log.warning("%s: request lines after line %d unreadable (%s)", path, lineno, exc or type(exc).__name__)


def utcnow() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fsync_dir(folder: Path) -> None:
    """Make a new name in `folder` (a link, a rename, a new file) durable; best effort where a
    file system cannot sync folders."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_once(path: Path, data: str | bytes) -> None:
    """Write a file through a temporary name and a rename; refuse to replace an existing one."""
    if path.exists():
        raise SuiteError(f"{path}: already written; run records are never overwritten")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise SuiteError(f"{path}: cannot write the run record: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), FILE_MODE)
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)  # fails if path appeared meanwhile: never overwrite
        fsync_dir(path.parent)  # the name itself survives a crash, not only the content
    except OSError as exc:
        # A full disk or a lost folder: the record file is never left half-written (only the
        # complete temporary file is ever linked into place).
        raise SuiteError(f"{path}: cannot write the run record: {exc.strerror or exc}") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def open_record(path: Path) -> IO[bytes]:
    """A record file opened to read, never through a symbolic link (O_NOFOLLOW): a link in a results
    folder is an OSError (ELOOP) naming no file outside it."""
    return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")


# -- compacted records --------------------------------------------------------------------------------
PACKED = ".xz"  # a compacted record file: `<name>.xz`, xz-compressed, in place of `<name>`
PACKABLE = ("requests.jsonl", "summary.json", "stages/*.json")  # what `compact_run` compresses
# lzma's errors reading a compressed record: a bad stream (LZMAError), one cut short (EOFError)
PACK_ERRORS = (lzma.LZMAError, EOFError)


def packed(path: Path) -> Path:
    """The compacted form of a record file: `<name>.xz` beside it."""
    return path.with_name(path.name + PACKED)


def record_path(path: Path) -> Path:
    """The file that holds this record: `path` itself where it exists (a link counts: it is refused
    when read), else its compacted form where that exists, else `path` (missing)."""
    if os.path.lexists(path):
        return path
    other = packed(path)
    return other if os.path.lexists(other) else path


def has_record(path: Path) -> bool:
    """Whether this record file exists, plain or compacted."""
    return os.path.lexists(record_path(path))


class _Unpacked(lzma.LZMAFile):
    """A compacted record file read decompressed; closing it closes the file under it too."""

    def __init__(self, raw: IO[bytes]):
        super().__init__(raw, "rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def read_record(path: Path) -> IO[bytes]:
    """A record file opened to read in either form (`record_path`), never through a symbolic link;
    a compacted one reads decompressed, a bad or cut-short stream raising one of PACK_ERRORS."""
    real = record_path(path)
    fh = open_record(real)
    if real == path:
        return fh
    return _Unpacked(fh)


def _open_write(path: Path, how: int) -> IO[bytes]:
    """A file of a run folder opened to write (`how`: os.O_APPEND or os.O_TRUNC), created where
    missing, never through a symbolic link; a link there is one SuiteError line."""
    try:
        return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | how, 0o644),
                         "ab" if how == os.O_APPEND else "wb")
    except OSError as exc:
        raise SuiteError(f"{path}: cannot write: {_os_reason(exc)}") from None


def _os_reason(exc: OSError) -> str:
    return "a symbolic link (not followed)" if exc.errno == errno.ELOOP else exc.strerror or str(exc)


def _read_json(path: Path) -> Any:
    """A record file's JSON; unreadable, undecodable or malformed files (a symbolic link among
    them) are one-line errors."""
    try:
        with read_record(path) as fh:
            return json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError, *PACK_ERRORS) as exc:  # ValueError: bad UTF-8 or JSON
        reason = _os_reason(exc) if isinstance(exc, OSError) else str(exc) or type(exc).__name__
        raise SuiteError(f"{record_path(path)}: cannot read run record: {reason}") from None


def _invalid(path: Path, exc: ValidationError, prefix: str = "") -> SuiteError:
    first = exc.errors()[0]
    key = ".".join([prefix] * bool(prefix) + [str(p) for p in first["loc"]]) or "(top level)"
    return SuiteError(f"{path}: invalid run record at {key}: {first['msg'].removeprefix('Value error, ')}")


def upgraded(path: Path, data: Any) -> dict[str, Any]:
    """A run.json or summary.json at this suite's schema version, upgraded step by step from an
    older one; a newer or unknown version is a one-line error."""
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: not a run record (a JSON object was expected, found {type(data).__name__})")
    version = data.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise NewerRecord(f"{path}: schema version {version} is newer than this suite's {SCHEMA_VERSION}; "
                         "upgrade the suite to read it")
    if not isinstance(version, int) or version < 1 or any(v not in UPGRADES for v in range(version + 1, SCHEMA_VERSION + 1)):
        raise SuiteError(f"{path}: schema version {version} is not one this suite reads (1 to {SCHEMA_VERSION}); "
                         "re-run the benchmark or use the suite version that wrote it")
    for v in range(version + 1, SCHEMA_VERSION + 1):
        data = UPGRADES[v](data)
    return data


class NewerRecord(SuiteError):
    """A record written by a newer suite: not a bad record, an old reader (it stops every view)."""


class RunInUse(SuiteError):
    """Another live process writes this run folder (it holds the owner lock)."""


OWNER_FILE = ".owner"


def _take_owner(run_dir: Path) -> Any:
    """Hold the run folder's owner lock; RunInUse naming the holder when a live process has it."""
    path = run_dir / OWNER_FILE
    try:
        fh = open_lock(path)  # a symbolic link there is refused, never followed (and its target truncated)
    except OSError as exc:
        reason = "a symbolic link (not followed)" if exc.errno == errno.ELOOP else exc.strerror or exc
        raise SuiteError(f"{path}: cannot take the run's owner lock: {reason}") from None
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = " ".join(fh.read(300).split()) or "another process"
        fh.close()
        raise RunInUse(f"{run_dir}: the run is being written by a live suite process ({holder}); --resume never "
                       "takes over a live run: wait for it to finish, or run without --resume") from None
    except OSError as exc:
        fh.close()
        raise SuiteError(f"{path}: cannot take the run's owner lock: {exc.strerror or exc}") from None
    try:  # who holds it, for the refusal's message only: a full disk leaves it empty
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()} since {utcnow()}\n")
        fh.flush()
    except OSError:
        pass
    return fh


class RunRecord:
    """A run folder being written: manifest, stage files, requests, then the summary.

    The writer holds the folder's owner lock from `create` / `open_incomplete` until `finish`
    (or `release`, or its death)."""

    def __init__(self, run_dir: Path, manifest: RunManifest, owner: Any = None):
        self.dir = run_dir
        self.manifest = manifest
        self._lock = threading.Lock()
        self._owner = owner

    @classmethod
    def create(cls, results: Path, manifest: RunManifest) -> RunRecord:
        run_dir = results / manifest.model / manifest.arm / manifest.run_id
        if run_dir.exists():
            raise SuiteError(f"{run_dir}: run folder exists already")
        run_dir.mkdir(parents=True)
        fsync_dir(run_dir.parent)
        owner = _take_owner(run_dir)  # before run.json: a resume never sees an unlocked new run
        write_once(run_dir / "run.json", manifest.model_dump_json(indent=2))
        return cls(run_dir, manifest, owner)

    @classmethod
    def open_incomplete(cls, run_dir: Path) -> RunRecord:
        """Reopen an interrupted run to continue it; RunInUse when a live process still writes it."""
        if has_record(run_dir / "summary.json"):
            raise SuiteError(f"{run_dir}: the run is finished; nothing to resume")
        owner = _take_owner(run_dir)
        try:
            if has_record(run_dir / "summary.json"):
                raise SuiteError(f"{run_dir}: the run finished meanwhile; nothing to resume")
            expand_run(run_dir)  # a compacted record is written plain again, line by line
            return cls(run_dir, read_manifest(run_dir), owner)
        except BaseException:
            owner.close()
            raise

    def release(self) -> None:
        """Give up the owner lock (after the summary, or when the run is left to a later resume)."""
        if self._owner is not None:
            self._owner.close()
            self._owner = None

    @property
    def requests_path(self) -> Path:
        return self.dir / "requests.jsonl"

    @property
    def log_dir(self) -> Path:
        d = self.dir / "logs"
        d.mkdir(exist_ok=True)
        return d

    def record_request(self, kind: str, **fields: Any) -> None:
        """Append one request's record (thread-safe); a line is written whole or not at all.

        The line is checked against its kind's model (`RequestLine`) before it is written."""
        payload = {"kind": kind, "at": utcnow(), **fields}
        for key in _ERROR_FIELDS:  # an error names the endpoint: never with its credentials
            if isinstance(payload.get(key), str):
                payload[key] = scrub(payload[key])
        REQUEST_LINE.validate_python(payload)
        line = (json.dumps(payload, default=str) + "\n").encode("utf-8")
        with self._lock:
            try:
                fd = os.open(self.requests_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            except OSError as exc:
                raise SuiteError(f"{self.requests_path}: cannot record a request: {_os_reason(exc)}") from None
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

    def set_aside_unfinished(self, done: set[str], carried: Callable[[dict[str, Any]], bool] | None = None) -> int:
        """Before a resume: move the request lines of stages that did not finish to
        `requests-interrupted.jsonl`, so the record reads as one run. Returns how many moved.
        `carried(line)`: a line of a stage that did not finish but that stays (a part of the stage
        the resumed run takes up).

        Lines are moved and kept byte for byte: one that cannot be read (cut short, not UTF-8,
        nested too deep, a stage that is not a name) goes aside with the unfinished stages; one that
        is JSON but not an object names no stage and stays (`read_requests` skips it, naming it)."""
        if not os.path.lexists(self.requests_path):
            return 0
        keep: list[bytes] = []
        moved: list[bytes] = []
        try:
            with open_record(self.requests_path) as fh:
                content = fh.read()
        except OSError as exc:
            raise SuiteError(f"{self.requests_path}: cannot read the request records: {_os_reason(exc)}") from None
        for ln in content.split(b"\n"):
            if not ln.strip():
                continue
            try:
                data = json.loads(ln)
            except (ValueError, RecursionError):  # a torn last line of the interrupted run, or worse
                moved.append(ln)
                continue
            stage = data.get("stage") if isinstance(data, dict) else None
            stays = stage is None or (isinstance(stage, str) and stage in done) or (
                carried is not None and isinstance(data, dict) and carried(data))
            (keep if stays else moved).append(ln)
        if moved:
            # durable in this order: a crash leaves a line in both files at worst, never in neither
            aside = self.dir / "requests-interrupted.jsonl"
            with _open_write(aside, os.O_APPEND) as fh:
                fh.write(b"\n".join(moved) + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            tmp = self.requests_path.with_suffix(".jsonl.tmp")
            with _open_write(tmp, os.O_TRUNC) as fh:
                fh.write(b"".join(ln + b"\n" for ln in keep))
                fh.flush()
                os.fsync(fh.fileno())
            tmp.replace(self.requests_path)
            fsync_dir(self.dir)
        return len(moved)

    def stage_done(self, name: str) -> bool:
        return has_record(self.dir / "stages" / f"{name}.json")

    def write_stage(self, name: str, result: BaseModel | dict[str, Any]) -> None:
        payload = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
        write_once(self.dir / "stages" / f"{name}.json", json.dumps(payload, indent=2, default=str))

    def read_stage(self, name: str) -> BaseModel | None:
        """A finished stage's result as its model (RESULT_MODELS); None if it did not finish."""
        p = self.dir / "stages" / f"{name}.json"
        if not has_record(p):
            return None
        data = _read_json(p)
        if not isinstance(data, dict):
            raise SuiteError(f"{p}: not a stage result (a JSON object was expected, found {type(data).__name__})")
        try:
            return RESULT_MODELS[name].model_validate(data)
        except ValidationError as exc:
            raise _invalid(p, exc) from None

    def finish(self, summary: Summary) -> Path:
        for key in RESULT_MODELS:
            if getattr(summary, key) is None:
                setattr(summary, key, self.read_stage(key))
        path = self.dir / "summary.json"
        write_once(path, summary.model_dump_json(indent=2))
        # Finished: no one resumes it any more (open_incomplete checks for the summary under the
        # lock), so the lock file goes and the record holds its own files only.
        (self.dir / OWNER_FILE).unlink(missing_ok=True)
        self.release()
        return path


def _stage_results(where: Path, data: dict[str, Any], problems: list[str] | None) -> dict[str, BaseModel | None]:
    """Each stage result of a summary as its model. A result that does not validate is a one-line
    error, or, given `problems`, left out (None) with its line added there (the site still shows
    the rest of the run)."""
    out: dict[str, BaseModel | None] = {}
    for key, model in RESULT_MODELS.items():
        raw = data.get(key)
        if raw is None:
            out[key] = None
            continue
        try:
            out[key] = model.model_validate(raw)
        except ValidationError as exc:
            if problems is None:
                raise _invalid(where, exc, prefix=key) from None
            first = exc.errors()[0]
            problems.append(f"{where}: {key}.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
            out[key] = None
    return out


def load_summary(path: Path, problems: list[str] | None = None) -> Summary:
    """Load and validate one summary.json (upgraded from an older schema); a wrong schema version
    or an invalid field is a one-line error (see `_stage_results` for `problems`)."""
    where = record_path(path)  # the file read: plain or compacted
    data = upgraded(where, _read_json(path))
    stages = _stage_results(where, data, problems)
    try:
        summary = Summary.model_validate({k: v for k, v in data.items() if k not in RESULT_MODELS})
    except ValidationError as exc:
        raise _invalid(where, exc) from None
    for key, result in stages.items():
        setattr(summary, key, result)
    said = check_lines(summary, path.parent)
    recompute_verdicts(summary)
    summary.recomputed.extend(said)
    refresh_failure(summary, path.parent)
    return summary


def check_lines(summary: Summary, run_dir: Path) -> list[Any]:
    """Each stage result that declares `Stage.from_lines` made from the run's request lines and
    checked against what the summary kept (in place); one note per disagreement, for the page."""
    from suite.claims import written_by

    notes: list[Any] = []
    checked = {name: (stage, getattr(summary, name, None)) for name, stage in STAGES.items()
               if stage.from_lines is not None and getattr(summary, name, None) is not None}
    kinds = {name: set(stage.exported_requests or (name,)) for name, (stage, _) in checked.items()}
    if not checked:
        return notes
    try:  # the file is read once for every stage that checks its lines
        every = read_requests(run_dir, set().union(*kinds.values()))
    except SuiteError as exc:
        return [Recomputed(stage=name, field="request lines", then="", now=f"not read: {exc}",
                           written_by=written_by(summary), kept=True) for name in checked]
    for name, (stage, result) in checked.items():
        assert stage.from_lines is not None
        lines = [q for q in every if getattr(q, "kind", None) in kinds[name]]
        again, said = stage.from_lines(result, lines)
        if again is not result:  # made from the lines: what they hold beyond the summary's counts too
            setattr(summary, name, again)
            notes.extend(Recomputed(stage=name, field="answers", then="as the summary kept them", now=text,
                                    written_by=written_by(summary)) for text in said)
    return notes


def read_manifest(run_dir: Path) -> RunManifest:
    """A run's run.json, read only (no lock taken, nothing written)."""
    path = run_dir / "run.json"
    data = upgraded(path, _read_json(path))
    try:
        return RunManifest.model_validate(data)
    except ValidationError as exc:
        raise _invalid(path, exc) from None


def run_in_progress(run_dir: Path) -> bool:
    """Whether a live process holds the run's owner lock (reads only; a missing lock file: no)."""
    try:
        fd = os.open(run_dir / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the shared lock at once
    return False


def incomplete_summary(run_dir: Path, problems: list[str] | None = None) -> Summary:
    """A summary for a run that never finished, built from its manifest and stage files (read
    only: listing a run never takes its lock or writes into it)."""
    m = read_manifest(run_dir)
    live = run_in_progress(run_dir)
    reason = ("the run is under way: a live suite process writes it" if live
              else "the run did not finish (interrupted); `suite bench --resume` continues it")
    summary = Summary(
        **m.model_dump(exclude={"signature", "profile_settings", "invocation"}), signature=m.signature,
        invocation=m.invocation, status="incomplete", reason=reason,
    )
    for key in RESULT_MODELS:
        p = run_dir / "stages" / f"{key}.json"
        if not has_record(p):
            continue
        raw = _read_json(p)
        setattr(summary, key, _stage_results(p, {key: raw}, problems)[key])
    if not live:
        # a stage the run was cut in: what it finished, rebuilt from the request lines it kept
        # (the file read once for every such stage)
        cut = {name: (stage, set(stage.exported_requests or (name,))) for name, stage in STAGES.items()
               if stage.rebuild is not None and getattr(summary, name, None) is None}
        every = read_requests(run_dir, set().union(*(kinds for _, kinds in cut.values()))) if cut else []
        for name, (stage, kinds) in cut.items():
            assert stage.rebuild is not None
            lines = [q for q in every if getattr(q, "kind", None) in kinds]
            if lines:
                setattr(summary, name, stage.rebuild(lines, summary, run_dir / "logs"))
    recompute_verdicts(summary)
    refresh_failure(summary, run_dir)
    return summary


def _real_dirs(folder: Path) -> list[Path]:
    """The folders in `folder`, symbolic links left out (a link may lead out of the results)."""
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def iter_run_dirs(results: Path) -> list[Path]:
    """Every run folder (`<model>/<arm>/<run_id>/` holding a run.json) under `results`; no symbolic
    link is followed, so a model, arm or run folder linked from elsewhere is not a run of these results."""
    return sorted(run for model in _real_dirs(results) for arm in _real_dirs(model) for run in _real_dirs(arm)
                  if os.path.lexists(run / "run.json"))


def load_all(results: Path, problems: list[str] | None = None,
             skipped: list[str] | None = None) -> list[Summary]:
    """Every run under the results folder, complete or not, oldest first (`problems`: see
    `_stage_results`).

    A record that cannot be read (a missing field, a name that is not one, bad JSON) never hides
    the others: it is named in one warning line (added to `skipped` too) and left out. A record of
    a newer schema stops the load (NewerRecord): the suite is to be upgraded, not the run hidden."""
    out: list[Summary] = []
    for run_dir in iter_run_dirs(results):
        summary_path = run_dir / "summary.json"
        try:
            out.append(load_summary(summary_path, problems) if has_record(summary_path)
                       else incomplete_summary(run_dir, problems))
        except NewerRecord:
            raise
        except SuiteError as exc:
            log.warning("run record skipped: %s", exc)
            if skipped is not None:
                skipped.append(str(exc))
    out.sort(key=lambda s: (s.started_at, s.run_id))
    return out


def find_incomplete(results: Path, model: str, arm: str) -> Path | None:
    """The newest incomplete run folder of this model and arm, if any."""
    if any(p.is_symlink() for p in (results / model, results / model / arm)):
        return None  # a folder linked from elsewhere holds no run of these results
    candidates = sorted(run for run in _real_dirs(results / model / arm)
                        if os.path.lexists(run / "run.json") and not has_record(run / "summary.json"))
    return candidates[-1] if candidates else None


def new_run_id(signature_digest: str | None) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{stamp}-{(signature_digest or 'nosig')[:8]}"


# -- compacting a finished record -------------------------------------------------------------------

def _packable(run_dir: Path, suffix: str = "") -> list[Path]:
    """The record files of a run that compacting takes (PACKABLE, `suffix` added), links left out."""
    return [p for pattern in PACKABLE for p in sorted(run_dir.glob(pattern + suffix)) if not p.is_symlink()]


def compact_run(run_dir: Path, preset: int = 9) -> list[tuple[Path, int, int]]:
    """Keep a run folder's request lines, stage files and summary xz-compressed (`<name>.xz`);
    returns each file compacted with its size before and after. Runtime logs stay plain (a page
    reads them again), and so does run.json (what marks a run folder).

    Each compressed file is written once, read back and compared with the original before the
    original goes: a crash in between leaves both, and readers take the plain one. A run a live
    process writes is refused (one line), as is a folder that is not a run."""
    if not os.path.lexists(run_dir / "run.json") or run_dir.is_symlink():
        raise SuiteError(f"{run_dir}: not a run folder (no run.json)")
    if run_in_progress(run_dir):
        raise RunInUse(f"{run_dir}: the run is being written by a live suite process; compact it once it ends")
    done: list[tuple[Path, int, int]] = []
    for path in _packable(run_dir):
        try:
            with open_record(path) as fh:
                data = fh.read()
        except OSError as exc:
            raise SuiteError(f"{path}: cannot read: {_os_reason(exc)}") from None
        out = packed(path)
        if os.path.lexists(out):  # left by a compacting cut short: the plain file is the record
            out.unlink()
        write_once(out, lzma.compress(data, preset=preset))
        with _Unpacked(open_record(out)) as fh:
            if fh.read() != data:
                raise SuiteError(f"{out}: reads back different from {path.name}; {path.name} kept")
        path.unlink()
        fsync_dir(path.parent)
        done.append((path, len(data), out.stat().st_size))
    return done


def expand_run(run_dir: Path) -> list[Path]:
    """Write a compacted run's files plain again (before a resume appends to them); returns the
    files expanded. A plain file beside its compacted form is the record: the compacted one goes."""
    done: list[Path] = []
    for out in _packable(run_dir, PACKED):
        plain = out.with_name(out.name.removesuffix(PACKED))
        if not os.path.lexists(plain):
            try:
                with _Unpacked(open_record(out)) as fh:
                    data = fh.read()
            except (OSError, *PACK_ERRORS) as exc:
                reason = _os_reason(exc) if isinstance(exc, OSError) else str(exc) or type(exc).__name__
                raise SuiteError(f"{out}: cannot expand the compacted record: {reason}") from None
            write_once(plain, data)
            done.append(plain)
        out.unlink()
        fsync_dir(out.parent)
    return done
