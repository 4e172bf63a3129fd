"""Memory of a container (or any cgroup), read from the kernel's cgroup files.

Works with cgroup v1 (``memory.usage_in_bytes``, ``memory.stat``) and v2 (``memory.current``,
``memory.stat``). The cgroup is found from a process (``/proc/<pid>/cgroup`` mapped through the
cgroup mounts in ``/proc/self/mountinfo``), from a Docker container id (its main process's pid
from the Docker SDK, else the usual paths ``docker/<id>``, ``system.slice/docker-<id>.scope``), or
given as a folder. Where no cgroup file of the container can be read here (a remote Docker host,
an engine in a VM), the Docker SDK's streamed stats are the fallback: about once a second.

Metrics: ``cgroup_usage_bytes`` (what the kernel charges, page cache included) and
``cgroup_working_set_bytes`` (usage less inactive file pages, as ``docker stats`` shows it; this
is the one the policy watches), ``cgroup_limit_bytes`` when the cgroup has a limit.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memwatch.probe import Probe

log = logging.getLogger(__name__)

_UNLIMITED = 1 << 60  # v1 reports "no limit" as a huge page-aligned number


@dataclass(frozen=True)
class CgroupMount:
    version: int  # 1 or 2
    mountpoint: Path
    root: str  # the cgroup path that the mount shows at its mountpoint
    controllers: frozenset[str]


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[CgroupMount]:
    """The cgroup v1 and v2 mounts of this process's mount namespace."""
    mounts: list[CgroupMount] = []
    try:
        text = Path(mountinfo).read_text()
    except OSError:
        return mounts
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        fstype, superopts = rfields[0], rfields[2]
        root = fields[3].replace("\\040", " ")
        mountpoint = Path(fields[4].replace("\\040", " "))
        if fstype == "cgroup2":
            mounts.append(CgroupMount(2, mountpoint, root, frozenset()))
        elif fstype == "cgroup":
            mounts.append(CgroupMount(1, mountpoint, root, frozenset(superopts.split(","))))
    return mounts


def _under(mount: CgroupMount, cgroup_path: str) -> Path | None:
    root = mount.root.rstrip("/")
    if root and not (cgroup_path == root or cgroup_path.startswith(root + "/")):
        return None
    rel = cgroup_path[len(root):].lstrip("/")
    return mount.mountpoint / rel if rel else mount.mountpoint


def memory_cgroup_of_pid(pid: int) -> tuple[Path, int] | None:
    """The folder holding the memory files of the cgroup of ``pid``, and the cgroup version."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    mounts = cgroup_mounts()
    v2_path = None
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and controllers == "":
            v2_path = path
            continue
        if "memory" in controllers.split(","):
            for m in mounts:
                if m.version == 1 and "memory" in m.controllers:
                    folder = _under(m, path)
                    if folder is not None and (folder / "memory.usage_in_bytes").exists():
                        return folder, 1
    if v2_path is not None:
        for m in mounts:
            if m.version == 2:
                folder = _under(m, v2_path)
                if folder is not None and (folder / "memory.current").exists():
                    return folder, 2
    return None


def _candidate_container_dirs(container_id: str) -> list[tuple[Path, int]]:
    """Where Docker puts a container's cgroup, for the cgroupfs and systemd drivers."""
    out: list[tuple[Path, int]] = []
    for m in cgroup_mounts():
        if m.version == 1 and "memory" not in m.controllers:
            continue
        for parent, pattern in (
            ("docker", f"{container_id}*"),
            ("system.slice", f"docker-{container_id}*.scope"),
        ):
            base = m.mountpoint / parent
            if base.is_dir():
                for folder in sorted(base.glob(pattern)):
                    marker = "memory.usage_in_bytes" if m.version == 1 else "memory.current"
                    if (folder / marker).exists():
                        out.append((folder, m.version))
    return out


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _read_stat(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if value:
                out[key] = int(value)
    except (OSError, ValueError):
        pass
    return out


class _DockerStatsReader:
    """Reads the Docker engine's streamed stats of one container in a background thread."""

    def __init__(self, container: Any) -> None:
        self._container = container
        self.latest: dict[str, float] = {}
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memwatch-docker-stats", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for stats in self._container.stats(stream=True, decode=True):
                if self._closed.is_set():
                    return
                mem = stats.get("memory_stats") or {}
                usage = mem.get("usage")
                if usage is None:
                    continue
                st = mem.get("stats") or {}
                inactive = st.get("total_inactive_file", st.get("inactive_file", 0))
                values = {
                    "cgroup_usage_bytes": float(usage),
                    "cgroup_working_set_bytes": float(max(usage - inactive, 0)),
                }
                if mem.get("limit") and mem["limit"] < _UNLIMITED:
                    values["cgroup_limit_bytes"] = float(mem["limit"])
                self.latest = values
        except Exception as exc:  # the container went away, or the engine did
            log.debug("docker stats stream ended: %s", exc)

    def close(self) -> None:
        self._closed.set()


class CgroupProbe(Probe):
    """Memory usage of a container's cgroup (v1 or v2), with Docker's stats as a fallback."""

    name = "cgroup"

    def __init__(
        self,
        container_id: str | None = None,
        *,
        pid: int | None = None,
        path: str | os.PathLike[str] | None = None,
        docker_client: Any = None,
    ) -> None:
        super().__init__()
        if container_id is None and pid is None and path is None:
            raise ValueError("CgroupProbe needs a container id, a pid or a cgroup folder")
        self.container_id = container_id
        self.pid = pid
        self.path: Path | None = Path(path) if path is not None else None
        self.version: int | None = None
        self.source: str | None = None  # "cgroup files" or "docker stats"
        self._docker_client = docker_client
        self._stats: _DockerStatsReader | None = None

    # -- finding the cgroup -------------------------------------------------------------------
    def _docker_container(self) -> Any:
        client = self._docker_client
        if client is None:
            import docker  # imported only when a container is watched

            client = docker.from_env()
            self._docker_client = client
        return client.containers.get(self.container_id)

    def _resolve(self) -> tuple[bool, str | None]:
        if self.path is not None:
            if (self.path / "memory.usage_in_bytes").exists():
                self.version = 1
            elif (self.path / "memory.current").exists():
                self.version = 2
            else:
                return False, f"{self.path} holds no cgroup memory files"
            self.source = "cgroup files"
            return True, None
        if self.pid is not None:
            found = memory_cgroup_of_pid(self.pid)
            if found is None:
                return False, f"no readable memory cgroup for pid {self.pid}"
            self.path, self.version = found
            self.source = "cgroup files"
            return True, None
        # a container: ask the engine for its main process, else look where Docker puts cgroups
        assert self.container_id is not None
        container = None
        engine_error = None
        try:
            container = self._docker_container()
            self.container_id = container.id
            pid = int((container.attrs.get("State") or {}).get("Pid") or 0)
            if pid > 0:
                found = memory_cgroup_of_pid(pid)
                # the pid is the engine's: on a remote engine (DOCKER_HOST=ssh://...) or one in a
                # VM, a local process may carry the same number. Docker's cgroup paths always
                # name the container, so a path without its id is someone else's.
                if found is not None and container.id in str(found[0]):
                    self.path, self.version = found
                    self.source = "cgroup files"
                    return True, None
        except Exception as exc:  # docker missing, engine down, unknown container
            engine_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        candidates = _candidate_container_dirs(self.container_id)
        if len(candidates) == 1:
            self.path, self.version = candidates[0]
            self.source = "cgroup files"
            return True, None
        if container is not None:
            self._stats = _DockerStatsReader(container)
            self.source = "docker stats"
            return True, None
        if len(candidates) > 1:
            return False, f"container id {self.container_id} is ambiguous ({len(candidates)} cgroups)"
        return False, f"container {self.container_id} not found ({engine_error or 'no cgroup'})"

    def available(self) -> tuple[bool, str | None]:
        return self._resolve()

    # -- sampling -----------------------------------------------------------------------------
    def sample(self) -> dict[str, float]:
        if self._stats is not None:
            return dict(self._stats.latest)
        assert self.path is not None
        if self.version == 1:
            usage = _read_int(self.path / "memory.usage_in_bytes")
            stat = _read_stat(self.path / "memory.stat")
            inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
            limit = _read_int(self.path / "memory.limit_in_bytes")
        else:
            usage = _read_int(self.path / "memory.current")
            stat = _read_stat(self.path / "memory.stat")
            inactive = stat.get("inactive_file", 0)
            limit = _read_int(self.path / "memory.max")
        if usage is None:  # the cgroup was removed: the container is gone
            return {"cgroup_usage_bytes": 0.0, "cgroup_working_set_bytes": 0.0}
        values = {
            "cgroup_usage_bytes": float(usage),
            "cgroup_working_set_bytes": float(max(usage - inactive, 0)),
        }
        if limit is not None and limit < _UNLIMITED:
            values["cgroup_limit_bytes"] = float(limit)
        return values

    def roles(self, metric: str) -> tuple[str, ...]:
        return ("spill", "host") if metric == "cgroup_working_set_bytes" else ()

    def current_pids(self) -> list[int] | None:
        if self.path is None:
            return None
        pids: list[int] = []
        if not self.path.exists():
            return pids
        for folder, _dirs, files in os.walk(self.path):
            if "cgroup.procs" in files:
                try:
                    text = Path(folder, "cgroup.procs").read_text()
                except OSError:
                    continue
                pids.extend(int(x) for x in text.split() if x.isdigit())
        return pids

    def details(self) -> dict[str, Any]:
        return {
            "container_id": self.container_id,
            "pid": self.pid,
            "path": str(self.path) if self.path else None,
            "cgroup_version": self.version,
            "source": self.source,
        }

    def close(self) -> None:
        if self._stats is not None:
            self._stats.close()
