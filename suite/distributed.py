"""Arms across machines on Ray: `suite bench --ray ADDRESS` (or `$RAY_ADDRESS`).

Not a scheduler of our own. Every machine that joins the Ray cluster advertises one unit of the
custom resource `suite_host` (`ray start ... --resources '{"suite_host": 1}'`); every arm becomes a
Ray task that needs one unit, so a machine runs one arm at a time, alone on its GPU. An arm's
`node_labels` (card: `[arms.X] node_labels = {gpu = "H200"}`) become the task's Ray label
selector (`ray start --labels gpu=H200`); a card's `gpu_memory_gb` becomes a need for that many
units of `suite_gpu_gb`, which a GPU machine advertises as its GPU memory in GB, so a model for a
32 GB-class card lands only on such machines.

On its node the task runs the arm exactly as a local bench does (`bench.run_arm`: the node's own
launcher choice, watchdog and GPU lease) into a scratch results folder (named by host, boot,
pid namespace, pid and start: in a cache shared by nodes a node removes only its own dead tasks'
folders), writes `ray.json` (node, attempt, wall-clock start and end) into the finished run
folder and returns that folder as a tar.
The driver unpacks it beside its results folder and renames it into place: a run folder appears
whole or not at all, and one already there is never replaced. A landing holds only folders and
regular files under the run's own folder (no link of any kind: a relative symlink to a sibling
run would make that run's lines this one's); a payload that breaks any rule, or the answer of a
node on another suite version (the task refuses to run there, and the driver checks the answer),
makes that arm a failed record with the reason, and the other arms go on. The node's name
(`$SUITE_NODE_NAME` there, else its host name) goes into the signature; its hardware is detected
on the node as always.

Faults: a task whose node (or worker process) dies is retried by Ray on another node, at most
`MAX_RETRIES` times; after that, or when the task itself raised, the arm is recorded as failed
with the reason (a run folder with `run.json`, `summary.json` and `ray.json`, nothing else).
Ctrl-C on the driver cancels every task: first a KeyboardInterrupt inside it (the arm's own exit
path stops its runtime or removes its container), after `CANCEL_GRACE_S` by force: Ray kills the
task's worker process and the local launcher's parent-death signal ends the runtime it started.

Progress: per-arm state (queued, on node X, stage, done / failed), as a live table on a terminal
and as one line per change otherwise. Ray is an optional extra: without it `--ray` answers with
one line saying how to install it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import socket
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from suite import __version__ as SUITE_VERSION
from suite.errors import SuiteError
from suite.records import RunManifest, RunRecord, Summary, fsync_dir, new_run_id, utcnow, write_once

log = logging.getLogger(__name__)

SUITE_HOST = "suite_host"  # one unit per machine: one arm at a time on it
GPU_GB = "suite_gpu_gb"  # a GPU machine's GPU memory in GB, needed by cards with gpu_memory_gb
HEAD_RESOURCE = "node:__internal_head__"  # Ray's own resource of the head node
MAX_RETRIES = 2  # retries after a lost node / worker, then the arm is recorded as failed
CANCEL_GRACE_S = 10.0  # Ctrl-C: time the tasks get to stop their runtimes before they are killed
INSTALL_HINT = ("--ray needs Ray, an optional extra: pip install 'suite[ray]' "
                "(in a checkout: pip install -e '.[ray]')")
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SuiteError(INSTALL_HINT) from None
    return ray


def node_name() -> str:
    """This node's name in signatures and progress: $SUITE_NODE_NAME, else the host name."""
    return os.environ.get("SUITE_NODE_NAME") or socket.gethostname()


# ---------------------------------------------------------------- what an arm needs of a node

def arm_requirements(card: Any, arm: Any) -> tuple[dict[str, float], dict[str, str]]:
    """(Ray resources, Ray label selector) one arm's task needs."""
    resources: dict[str, float] = {SUITE_HOST: 1}
    if getattr(card, "gpu_memory_gb", None):
        resources[GPU_GB] = float(card.gpu_memory_gb)
    return resources, dict(getattr(arm, "node_labels", None) or {})


def _label_matches(value: str | None, wanted: str) -> bool:
    negate = wanted.startswith("!")
    w = wanted[1:] if negate else wanted
    if w.startswith("in(") and w.endswith(")"):
        ok = value in [v.strip() for v in w[3:-1].split(",")]
    else:
        ok = value == w
    return ok != negate


def feasible_nodes(nodes: list[dict[str, Any]], resources: dict[str, float], labels: dict[str, str]) -> list[str]:
    """Ids of the live nodes (`ray.nodes()`) that offer these resources and carry these labels."""
    out = []
    for n in nodes:
        if not n.get("Alive"):
            continue
        have = n.get("Resources") or {}
        node_labels = n.get("Labels") or {}
        if all(have.get(k, 0) >= v for k, v in resources.items()) and all(
                _label_matches(node_labels.get(k), v) for k, v in labels.items()):
            out.append(n.get("NodeID", "?"))
    return out


def _needs_phrase(resources: dict[str, float], labels: dict[str, str]) -> str:
    res = ", ".join(f"{k} >= {v:g}" for k, v in resources.items())
    lab = ", ".join(f"label {k}={v}" for k, v in labels.items())
    return res + (f", {lab}" if lab else "")


# ---------------------------------------------------------------- on the node

class _Board:
    """The driver's progress board (a Ray actor on the driver's node): tasks report, the driver reads."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.starts: dict[str, int] = {}

    def started(self, arm: str, node: str, node_id: str) -> int:
        self.starts[arm] = self.starts.get(arm, 0) + 1
        self.events.append({"arm": arm, "kind": "started", "node": node, "node_id": node_id,
                            "attempt": self.starts[arm], "at": time.time()})
        return self.starts[arm]

    def report(self, arm: str, kind: str, **fields: Any) -> None:
        self.events.append({"arm": arm, "kind": kind, "at": time.time(), **fields})

    def since(self, index: int) -> list[dict[str, Any]]:
        return self.events[index:]


def _scratch_root() -> Path:
    from suite.paths import cache_dir

    return cache_dir() / "ray-scratch"


def _scratch_name(me: Any) -> str:
    """A task's scratch folder: host, boot, pid namespace, pid and start tick of its worker process.

    The cache may be shared by several nodes (an NFS home): the name says whose folder it is, so
    a node's reaper judges only its own."""
    host = re.sub(r"[^A-Za-z0-9._-]", "_", me.host) or "_"
    ns = re.sub(r"\D", "", me.pidns) or "0"
    return f"{host}~{me.boot_id}~{ns}~{me.pid}~{me.start_ticks}"


def _reap_scratch(root: Path) -> list[Path]:
    """Remove scratch folders of task processes of this node that are gone (a cancelled or killed
    task); returns what was removed. Folders of other hosts, boots or pid namespaces, and folders
    of another form, are left alone."""
    from suite import procid

    me = procid.identity()
    if me is None or not root.is_dir():
        return []
    host, boot, ns = _scratch_name(me).split("~")[:3]
    removed = []
    for d in root.iterdir():
        parts = d.name.split("~")
        if len(parts) != 5 or parts[:3] != [host, boot, ns] or not (parts[3].isdigit() and parts[4].isdigit()):
            continue
        if not procid.is_same(int(parts[3]), int(parts[4])):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _undo_ray_env() -> None:
    """Ray sets OMP_NUM_THREADS=1 in task workers where the node had none: runtimes started from
    here would inherit it (a CPU runtime on one thread). Keep the node's own value, or none."""
    if "OMP_NUM_THREADS" not in os.environ:
        return
    try:
        parent = Path(f"/proc/{os.getppid()}/environ").read_bytes().split(b"\0")
    except OSError:
        return
    if not any(e.startswith(b"OMP_NUM_THREADS=") for e in parent):
        os.environ.pop("OMP_NUM_THREADS", None)


def run_arm_task(request: dict[str, Any], board: Any) -> dict[str, Any]:
    """The Ray task: one arm on this node, as a local bench runs it; returns its run folder as a tar."""
    import ray

    from suite import gpu, procid
    from suite.bench import JudgeChoice, plan_arms, run_arm
    from suite.launchers import reap_orphans
    from suite.signature import on_node

    _undo_ray_env()
    wanted = request.get("suite_version")
    if wanted is not None and wanted != SUITE_VERSION:
        raise SuiteError(f"this node runs suite {SUITE_VERSION}, the driver {wanted}: install the driver's version "
                         "on every node (records of two versions are never mixed)")
    arm = request["arm"]
    name = node_name()
    node_id = ray.get_runtime_context().get_node_id()
    try:
        attempt = ray.get(board.started.remote(arm, name, node_id), timeout=30)
    except Exception as exc:  # noqa: BLE001 - progress is best effort; the arm still runs
        log.warning("arm %s: progress board unreachable: %s", arm, _first_line(exc))
        attempt = None
    root = _scratch_root()
    _reap_scratch(root)
    me = procid.identity()
    assert me is not None  # this process runs
    work = root / _scratch_name(me)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        plan = plan_arms(request["model"], [arm], request["launcher"], request["profile"],
                         request.get("gate_requests"), request.get("overrides"))[0]
        judge = JudgeChoice(*request["judge"]) if request.get("judge") else None
        t0 = time.time()
        reap_orphans()  # before the GPU check: an orphan of a killed task may hold the GPU
        with on_node(name), gpu.exclusive_device() as lease:
            summary = run_arm(plan, work, request["stages"], request.get("controls"), False, judge,
                              on_stage=lambda stage: board.report.remote(arm, "stage", stage=stage, node=name),
                              command=request.get("command"), tags=request.get("tags"))
            if lease.locked:
                waited = gpu.wait_for_baseline(lease.baseline_bytes)
                if not waited.reached:
                    log.warning("arm %s: %s", arm, waited.reason)
        t1 = time.time()
        placement = {"node": name, "node_id": node_id, "host": socket.gethostname(),
                     "attempt": attempt, "started": t0, "finished": t1}
        payload: bytes | None = None
        if summary.run_id != "-":  # skipped arms leave no folder, as in a local bench
            run_dir = work / summary.model / summary.arm / summary.run_id
            write_once(run_dir / "ray.json", json.dumps(placement, indent=2))
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                tar.add(run_dir, arcname=summary.run_id)
            payload = buf.getvalue()
        return {"summary": summary.model_dump(mode="json"), "tar": payload, "placement": placement,
                "suite_version": SUITE_VERSION}
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- on the driver

def _member_filter(run_id: str):
    """The tar filter of a landing: only folders and regular files under `run_id/`, as tarfile's
    "data" filter leaves them. A link of any kind is refused: a relative symlink to a sibling run
    passes the data filter, and once landed it would show that run's lines as this one's."""
    def only_files(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
        name = member.name.rstrip("/")
        if name != run_id and not name.startswith(f"{run_id}/"):
            raise SuiteError(f"a member outside the run folder ({member.name!r})")
        if not (member.isreg() or member.isdir()):
            kind = "a symlink" if member.issym() else "a hard link" if member.islnk() else "a special file"
            raise SuiteError(f"{kind} ({member.name!r}); a run folder holds only folders and files")
        return tarfile.data_filter(member, dest)

    return only_files


def land_run(results: Path, model: str, arm: str, run_id: str, payload: bytes) -> Path:
    """Unpack a run folder shipped from a node and move it into `results` whole, never replacing one.

    Anything wrong with the payload (not a tar, cut short, a member outside the run folder, a
    link, a special file) is one SuiteError and nothing is written."""
    for part in (model, arm, run_id):
        if not isinstance(part, str) or not _SAFE.match(part):
            raise SuiteError(f"a node sent a run folder named {part!r}: not a safe folder name")
    dest = results / model / arm / run_id
    if dest.exists():
        raise SuiteError(f"{dest}: a run folder with this id exists already; run records are never replaced")
    if not isinstance(payload, (bytes, bytearray)):
        raise SuiteError(f"the run folder {run_id} sent by the node is not an archive ({type(payload).__name__}); "
                         "nothing written")
    incoming = results / ".incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    # Nested two levels deeper than a run folder: the loaders' `*/*/*/run.json` never sees it.
    tmp = Path(tempfile.mkdtemp(prefix=f"{run_id}.", dir=incoming))
    try:
        staged = tmp / model / arm
        staged.mkdir(parents=True)
        try:
            with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as tar:
                tar.extractall(staged, filter=_member_filter(run_id))
        except SuiteError as exc:
            raise SuiteError(f"the run folder {run_id} sent by the node holds {exc}; nothing written") from None
        except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError) as exc:
            raise SuiteError(f"the run folder {run_id} sent by the node cannot be unpacked ({_first_line(exc)}); "
                             "nothing written") from None
        src = staged / run_id
        found = sorted(p.name for p in staged.iterdir())
        if found != [run_id] or not (src / "run.json").is_file() or not (src / "summary.json").is_file():
            raise SuiteError(f"the run folder {run_id} sent by the node is not a finished run "
                             f"(found {found}); nothing written")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            raise SuiteError(f"{dest}: a run folder with this id exists already; run records are never replaced")
        try:
            os.rename(src, dest)  # fails on a non-empty folder of that name: never replaces a run
        except OSError as exc:
            raise SuiteError(f"{dest}: the run folder sent by the node could not be moved into place "
                             f"({exc.strerror or exc}); nothing written") from None
        fsync_dir(dest.parent)
        return dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            incoming.rmdir()
        except OSError:
            pass


def record_failed(results: Path, model: str, arm: str, runtime: str, launcher: str, profile: str,
                  started: str, reason: str, placement: dict[str, Any]) -> Summary:
    """A failed arm on the driver: run.json, summary.json (status failed, the reason), ray.json."""
    from suite.provenance import suite_build

    manifest = RunManifest(run_id=new_run_id(None), model=model, arm=arm, runtime=runtime, launcher=launcher,
                           profile=profile, started_at=started, suite=suite_build())
    record = RunRecord.create(results, manifest)
    write_once(record.dir / "ray.json", json.dumps(placement, indent=2))
    summary = Summary(**manifest.model_dump(exclude={"signature", "profile_settings"}), finished_at=utcnow(),
                      status="failed", reason=reason)
    record.finish(summary)
    return summary


@dataclass
class _ArmState:
    arm: str
    state: str = "queued"
    node: str | None = None
    stage: str | None = None
    attempt: int = 0
    detail: str = ""
    nodes: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        where = f" on node {self.node}" if self.node else ""
        if self.state == "queued":
            return f"arm {self.arm}: queued{(' ' + self.detail) if self.detail else ''}"
        if self.state == "running":
            again = f" (attempt {self.attempt})" if self.attempt > 1 else ""
            return f"arm {self.arm}: {'stage ' + self.stage if self.stage else 'started'}{where}{again}"
        return f"arm {self.arm}: {self.state}{where}{(': ' + self.detail) if self.detail else ''}"


class Progress:
    """Per-arm state: a live table on a terminal, else one line per change."""

    def __init__(self, console: Any, arms: list[str]):
        self.console = console
        self.arms = {a: _ArmState(a) for a in arms}
        self.live: Any = None

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.update(self._table())
            self.live.__exit__(*exc)

    def _table(self) -> Any:
        from rich.table import Table

        from suite.progress import cells

        table = Table("arm", "state", "node", "stage", "attempt", "detail")
        for s in self.arms.values():
            table.add_row(*cells(s.arm, s.state, s.node or "-", s.stage or "-", str(s.attempt or "-"), s.detail or ""))
        return table

    def _print(self, s: _ArmState) -> None:
        self.console.print(s.line(), highlight=False, soft_wrap=True, markup=False)

    def update(self, arm: str, **changes: Any) -> None:
        s = self.arms[arm]
        before = s.line()
        for k, v in changes.items():
            setattr(s, k, v)
        if self.live is not None:
            self.live.update(self._table())
        elif s.line() != before:
            self._print(s)

    def apply(self, event: dict[str, Any]) -> None:
        arm = event.get("arm")
        if arm not in self.arms:
            return
        s = self.arms[arm]
        if event["kind"] == "started":
            s.nodes.append({"node": event.get("node"), "node_id": event.get("node_id"), "at": event.get("at")})
            self.update(arm, state="running", node=event.get("node"), stage=None,
                        attempt=event.get("attempt") or s.attempt + 1, detail="")
        elif event["kind"] == "stage":
            self.update(arm, state="running", stage=event.get("stage"), node=event.get("node") or s.node)

    def note(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True, markup=False)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A host:port address must answer (Ray's own client retries for minutes); `auto`, ray://: left to Ray."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise SuiteError(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc}); start one with "
                         "`ray start --head --resources '{\"suite_host\": 1}'` (docs/RAY.md)") from None


def run_bench_ray(address: str, model: str, arms: list[str] | None = None, launcher: str = "auto",
                  profile: str = "standard", stages: list[str] | None = None, results: Path | None = None,
                  controls: list[str] | None = None, judge_url: str | None = None, judge_model: str | None = None,
                  gate_requests: int | None = None, overrides: dict[str, Any] | None = None,
                  max_retries: int = MAX_RETRIES, console: Any = None,
                  command: list[str] | None = None, tags: dict[str, str] | None = None) -> list[Summary]:
    """Every arm of `model` as a Ray task on a `suite_host` node; run folders land in `results` write-once."""
    ray = import_ray()
    from suite.bench import check_controls, plan_arms, probe_judge, resolve_judge
    from suite.paths import results_dir
    from suite.sanitize import SafeConsole
    from suite.stages import ORDER

    console = console or SafeConsole(stderr=True)
    out = results or results_dir()
    plans = plan_arms(model, arms, launcher, profile, gate_requests, overrides)  # checks input
    judge = resolve_judge(plans[0].card, judge_url, judge_model) if plans else None
    check_controls(plans, controls)  # bad input: one line before anything starts
    if judge is not None:
        judge = probe_judge(judge, explicit_model=judge_model is not None)
    base = {"model": model, "launcher": launcher, "profile": profile, "stages": stages or list(ORDER),
            "controls": controls, "judge": (judge.url, judge.model) if judge else None,
            "gate_requests": gate_requests, "overrides": overrides, "suite_version": SUITE_VERSION, "command": command,
            "tags": tags}
    t_bench = time.monotonic()
    check_reachable(address)
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise SuiteError(f"--ray {address}: cannot connect to the Ray cluster: {_first_line(exc)}") from None
    summaries: list[Summary] = []
    try:
        nodes = ray.nodes()
        # The board lives on the head node (a lost worker node does not take the progress with it).
        head = [n for n in nodes if n.get("Alive") and (n.get("Resources") or {}).get(HEAD_RESOURCE)]
        board = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(_Board).options(
            resources={HEAD_RESOURCE: 0.001} if head else {}).remote()
        task = ray.remote(run_arm_task)
        pending: dict[Any, Any] = {}
        started_at: dict[str, str] = {}
        with Progress(console, [p.arm_name for p in plans]) as progress:
            for plan in plans:
                resources, labels = arm_requirements(plan.card, plan.arm)
                started_at[plan.arm_name] = utcnow()
                if not feasible_nodes(nodes, resources, labels):
                    reason = (f"no live node of the Ray cluster offers {_needs_phrase(resources, labels)} "
                              "(see docs/RAY.md: ray start --resources / --labels)")
                    s = record_failed(out, plan.card.name, plan.arm_name, plan.runtime.name, plan.launcher.name,
                                      plan.profile.name, started_at[plan.arm_name], reason,
                                      {"attempts": [], "resources": resources, "labels": labels})
                    progress.update(plan.arm_name, state="failed", detail=reason)
                    summaries.append(s)
                    continue
                opts: dict[str, Any] = {"resources": {k: v for k, v in resources.items()}, "num_cpus": 0,
                                        "max_retries": max_retries, "retry_exceptions": False,
                                        "name": f"suite:{plan.card.name}/{plan.arm_name}"}
                if labels:
                    opts["label_selector"] = labels
                ref = task.options(**opts).remote({**base, "arm": plan.arm_name}, board)
                pending[ref] = plan
                progress.update(plan.arm_name, detail=f"for a node with {_needs_phrase(resources, labels)}")
            seen = 0
            try:
                while pending:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                    try:
                        events = ray.get(board.since.remote(seen), timeout=10)
                    except Exception:  # noqa: BLE001 - the board is best effort
                        events = []
                    seen += len(events)
                    for event in events:
                        progress.apply(event)
                    for ref in ready:
                        plan = pending.pop(ref)
                        summaries.append(collect_arms(ray, ref, plan, out, progress, started_at[plan.arm_name],
                                                  max_retries))
            except KeyboardInterrupt:
                progress.note(f"interrupted: cancelling {len(pending)} arm task(s); their runtimes stop on their nodes")
                # First a KeyboardInterrupt inside each task (its runtime and container are stopped
                # on the arm's own exit path), then force: Ray kills the worker, and the parent-death
                # signal ends a local runtime it started.
                for ref in pending:
                    ray.cancel(ref, force=False)
                done, left = ray.wait(list(pending), num_returns=len(pending), timeout=CANCEL_GRACE_S)
                for ref in left:
                    ray.cancel(ref, force=True)
                if left:
                    ray.wait(left, num_returns=len(left), timeout=30)
                progress.note(f"cancelled: {len(done)} arm task(s) stopped themselves, {len(left)} killed")
                raise
        progress.note(f"bench on Ray: {len(plans)} arm(s) in {time.monotonic() - t_bench:.1f} s")
    finally:
        ray.shutdown()
    order = {p.arm_name: i for i, p in enumerate(plans)}
    summaries.sort(key=lambda s: order.get(s.arm, 0))
    return summaries


def collect_arms(ray: Any, ref: Any, plan: Any, out: Path, progress: Progress, started: str,
             max_retries: int) -> Summary:
    """The finished task's run folder into `out`, or a failed record with the reason."""
    arm = plan.arm_name
    state = progress.arms[arm]
    placement = {"attempts": state.nodes}
    try:
        result = ray.get(ref)
    except ray.exceptions.RayTaskError as exc:  # the task itself raised (on a node: bad set-up there)
        cause = getattr(exc, "cause", None)
        reason = f"on node {state.node or '?'}: {_first_line(cause) if cause else _first_line(exc)}"
    except ray.exceptions.TaskCancelledError:
        raise KeyboardInterrupt from None
    except ray.exceptions.RayError as exc:  # node or worker lost, Ray already retried
        reason = (f"the node running it was lost ({len(state.nodes)} attempt(s), {max_retries} retries "
                  f"allowed): {_first_line(exc)}")
    else:
        try:
            summary, placement = _read_result(result, state.node)
            if result.get("tar"):
                land_run(out, summary.model, summary.arm, summary.run_id, result["tar"])
        except SuiteError as exc:  # this arm's result is lost to a bad payload; the other arms go on
            reason = str(exc)
            log.error("arm %s: %s", arm, reason)
        else:
            progress.update(arm, state="done", node=placement.get("node") or state.node, stage=None,
                            detail=f"{summary.status}{(' (' + summary.reason + ')') if summary.reason else ''}"
                            f"{', record ' + summary.run_id if summary.run_id != '-' else ''}")
            return summary
    summary = record_failed(out, plan.card.name, arm, plan.runtime.name, plan.launcher.name, plan.profile.name,
                            started, reason, placement)
    progress.update(arm, state="failed", stage=None, detail=reason)
    return summary


def _read_result(result: Any, node: str | None) -> tuple[Summary, dict[str, Any]]:
    """A task's answer as (summary, placement); SuiteError when it is not one this suite reads
    (a node on another suite version, a broken answer)."""
    where = f"node {node or '?'}"
    if not isinstance(result, dict):
        raise SuiteError(f"{where} answered with {type(result).__name__}, not an arm's result")
    version = result.get("suite_version")
    if version != SUITE_VERSION:
        raise SuiteError(f"{where} runs suite {version or 'of an older version'}, the driver {SUITE_VERSION}: "
                         "its record is not landed (install one version everywhere)")
    try:
        summary = Summary.model_validate(result.get("summary"))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise SuiteError(f"{where} sent a summary this suite does not read: "
                         f"{'.'.join(str(x) for x in first['loc']) or '(top level)'}: {first['msg']}") from None
    placement = result.get("placement")
    return summary, placement if isinstance(placement, dict) else {}
