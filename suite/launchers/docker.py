"""The Docker launcher: a runtime as a container built from its image folder.

`prepare` builds `images/<name>/` with the Docker SDK (a variant with `base = "other"` reuses that
runtime's image), tagged `suite-<name>:<hash12>`, where the hash covers the files of the build
context, the Dockerfile's name and the build args; an existing tag is reused, so an image is built
once per content. The host's pip settings are passed to the build as `PIP_*` build args, so that
pip inside the build reaches the package index the way the host does; local pip folders
(find-links, `file://` indexes, a constraints file) are served to the build over HTTP on the
loopback interface (the build then uses the host's network). `SUITE_DOCKER_BASE` overrides the
`BASE` build arg of images that declare one (where no image can be pulled, a local base image).
A release pinned by an arm (`version = "X"`) sets the definition's `[version] build_arg` (for
the CPU images the recipe's version, for the GPU ones the upstream image's tag): another build
arg, so another tag, built once and reused.

`start` runs the image with the GPU requested when the engine has an NVIDIA runtime and the
definition's `gpu` is not "none", the server's port bound to 127.0.0.1 only, the model's folder
mounted read-only under `model_mount` (the model path in the command rewritten to it), the env of
the definition and the chosen controls, and the labels `suite.run=1`, `suite.session=<id>` and
`suite.owner.{pid,start_ticks,boot_id,pidns,host}` (the suite process's identity, `suite.procid`).
The container's log is streamed into the run folder; `start` returns once the ready endpoint
answers 200. Every exit path removes the container: stop/kill, a failed start, Ctrl-C, SIGTERM,
SIGHUP and SIGQUIT (suite.lifetime's signal handlers), and interpreter exit (the registry then
removes every container with this process's session label). Where no cleanup could run (kill -9), the next `start` on the same
host removes the containers whose owner process is gone (pid and start ticks since boot checked,
on the same host, boot and pid namespace only: `owner_gone`). The model path must exist on the Docker host: with a remote engine
(`DOCKER_HOST=ssh://...`) the model cache lives there.

Environment: `SUITE_DOCKER_BASE` (the BASE build arg), `SUITE_DOCKER_GPUS` ("all", or GPU
indexes/UUIDs separated by commas), `SUITE_DOCKER_SESSION` (the session label; default: pid and a
random suffix). Build logs go to `$SUITE_CACHE/docker/builds/`; the progress display
(`suite.progress`) shows a build and a start-up wait with the elapsed time and the latest output
line.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.server
import logging
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlparse, urlsplit, urlunsplit

from suite import procid, progress
from suite.definitions import CompileCacheSpec, DockerSpec, RuntimeDefinition, base_definition, render, version_spec
from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.launchers.base import Launcher, LaunchSpec, ModelPath, RunningRuntime, exit_words, find_error_line, free_port, wait_until_ready
from suite.lifetime import REGISTRY
from suite.paths import cache_dir, open_lock

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

log = logging.getLogger(__name__)

LABEL_RUN = "suite.run"
LABEL_SESSION = "suite.session"
LABEL_RUNTIME = "suite.runtime"
# The owning suite process (`suite.procid`): pid, start in clock ticks since boot, boot id, pid
# namespace and host; a container whose owner is gone (killed with -9: no cleanup ran) is removed
# by the next start of a suite on the same host, boot and pid namespace. `suite.owner.start` (the
# wall-clock start) is for the reader only: a clock step moves it.
LABEL_OWNER_PID = "suite.owner.pid"
LABEL_OWNER_START = "suite.owner.start"
LABEL_OWNER_HOST = "suite.owner.host"
LABEL_OWNER_TICKS = "suite.owner.start_ticks"
LABEL_OWNER_BOOT = "suite.owner.boot_id"
LABEL_OWNER_PIDNS = "suite.owner.pidns"
# Containers started by this process carry this label; `SUITE_DOCKER_SESSION` sets it (tests).
SESSION = os.environ.get("SUITE_DOCKER_SESSION") or f"{os.getpid()}-{secrets.token_hex(4)}"
_SESSION_PID = os.getpid()



def _docker_client(timeout: int = 120) -> docker.DockerClient:
    try:
        import docker
    except ImportError as exc:  # the suite pins it; a broken install says so
        raise EnvironmentUnavailable(f"the Docker SDK for Python is not installed ({exc})") from None
    try:
        return docker.from_env(timeout=timeout)
    except docker.errors.DockerException as exc:
        raise EnvironmentUnavailable(f"Docker engine not reachable: {_first_line(exc)}") from None


def _first_line(exc: BaseException | str) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:400] if text else type(exc).__name__


# ---------------------------------------------------------------- cleanup on every exit path


def remove_session_containers() -> int:
    """Remove every container labelled with this process's session; returns how many."""
    if os.getpid() != _SESSION_PID:  # a forked child must not remove its parent's containers
        return 0
    try:
        import docker

        client = docker.from_env(timeout=30)
        found = client.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={SESSION}"})
    except Exception as exc:  # noqa: BLE001 - best effort on the way out
        log.debug("session cleanup: cannot list containers: %s", exc)
        return 0
    removed = 0
    for container in found:
        try:
            container.remove(force=True)
            removed += 1
        except Exception as exc:  # noqa: BLE001
            if "No such container" not in str(exc) and "already in progress" not in str(exc):
                log.warning("could not remove container %s: %s", container.short_id, _first_line(exc))
    for rt in REGISTRY.live(DockerRuntime):
        rt._mark_stopped()
    if removed:
        log.info("removed %d container(s) of session %s", removed, SESSION)
    return removed


def _owner_labels() -> dict[str, str]:
    import psutil

    me = procid.identity(_SESSION_PID)
    return {LABEL_OWNER_PID: str(_SESSION_PID), LABEL_OWNER_START: f"{psutil.Process(_SESSION_PID).create_time():.2f}",
            LABEL_OWNER_HOST: socket.gethostname(), LABEL_OWNER_TICKS: str(me.start_ticks if me else -1),
            LABEL_OWNER_BOOT: procid.boot_id(), LABEL_OWNER_PIDNS: procid.pid_namespace()}


def owner_gone(labels: dict[str, str]) -> bool:
    """Whether the suite process named by a container's owner labels has ended.

    Judged only for a container of this host, boot and pid namespace (another machine sharing the
    engine, a suite in another container sharing the host name, or a container of an older suite
    without these labels: not gone); the owner is gone when its pid no longer runs or now names a
    process that started at another tick since boot (a reused pid). Clock steps change nothing."""
    try:
        pid, ticks = int(labels[LABEL_OWNER_PID]), int(labels[LABEL_OWNER_TICKS])
    except (KeyError, ValueError):
        return False
    gone = procid.owner_gone({"pid": pid, "start_ticks": ticks, "boot_id": labels.get(LABEL_OWNER_BOOT),
                              "pidns": labels.get(LABEL_OWNER_PIDNS), "host": labels.get(LABEL_OWNER_HOST)})
    return gone is True


def remove_orphan_containers(client: docker.DockerClient) -> int:
    """Remove suite containers whose owning suite process is gone; says so in one line."""
    try:
        found = client.containers.list(all=True, filters={"label": LABEL_RUN})
    except Exception as exc:  # noqa: BLE001 - best effort
        log.debug("orphan cleanup: cannot list containers: %s", exc)
        return 0
    removed: list[str] = []
    for container in found:
        if not owner_gone(container.labels or {}):
            continue
        try:
            container.remove(force=True)
            removed.append(f"{container.labels.get(LABEL_RUNTIME, '?')} {container.short_id}")
        except Exception as exc:  # noqa: BLE001
            if "No such container" not in str(exc):
                log.debug("could not remove orphan container %s: %s", container.short_id, _first_line(exc))
    if removed:
        log.warning("removed %d container(s) left by a suite process that is gone: %s",
                    len(removed), ", ".join(removed))
    return len(removed)


REGISTRY.on_exit(remove_session_containers)  # at exit and on a signal, after the live runtimes


# ---------------------------------------------------------------- the host's pip settings

_PIP_KEYS = {
    "index-url": "PIP_INDEX_URL",
    "extra-index-url": "PIP_EXTRA_INDEX_URL",
    "find-links": "PIP_FIND_LINKS",
    "trusted-host": "PIP_TRUSTED_HOST",
    "timeout": "PIP_DEFAULT_TIMEOUT",
    "default-timeout": "PIP_DEFAULT_TIMEOUT",
    "retries": "PIP_RETRIES",
    "constraint": "PIP_CONSTRAINT",
}
_PIP_LOCATIONS = {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONSTRAINT"}


def host_pip_config() -> dict[str, str]:
    """The host's effective pip settings (config files and PIP_* env), as PIP_* names."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                             text=True, timeout=60, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    except (OSError, subprocess.TimeoutExpired):
        return {}
    settings: dict[str, str] = {}
    for line in out.stdout.splitlines():  # e.g. global.index-url='...', :env:.timeout='60'
        m = re.match(r"^(?P<scope>[^=]*)\.(?P<key>[a-z-]+)='(?P<value>.*)'$", line.strip())
        if m and m["key"] in _PIP_KEYS:
            settings[_PIP_KEYS[m["key"]]] = m["value"]  # later scopes win, as in pip
    return settings


class _LocalFolderServer:
    """Serves local pip folders read-only over HTTP on 127.0.0.1, under their own paths.

    An index folder is served with its parent, so that its relative links (`../../files/x.whl`)
    resolve; nothing outside those roots is served.
    """

    def __init__(self) -> None:
        self.routes: dict[str, Path] = {}
        self.roots: list[Path] = []
        self._server: http.server.ThreadingHTTPServer | None = None

    def add(self, path: Path, with_parent: bool = False) -> str:
        """Serve a folder (an index: with its parent) or one file; returns its route key."""
        path = path.resolve()
        key = f"p{len(self.routes)}"
        self.routes[key] = path
        self.roots.append(path.parent if with_parent and path.is_dir() else path)
        return key

    def url(self, key: str) -> str:
        assert self._server is not None
        target = self.routes[key]
        suffix = "/" if target.is_dir() else ""
        return f"http://127.0.0.1:{self._server.server_address[1]}{quote(str(target))}{suffix}"

    def __enter__(self) -> _LocalFolderServer:
        roots = list(self.roots)

        class Handler(http.server.SimpleHTTPRequestHandler):
            def translate_path(self, path: str) -> str:
                target = Path(unquote(urlparse(path).path)).resolve()
                if any(target == root or root in target.parents for root in roots):
                    return str(target)
                return "/nonexistent"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("pip folder server: " + format, *args)

        # The same folders get the same port when it is free, so that the build args (and with
        # them Docker's layer cache) stay the same from one build to the next.
        preferred = 20000 + zlib.crc32(" ".join(map(str, roots)).encode()) % 20000
        try:
            self._server = http.server.ThreadingHTTPServer(("127.0.0.1", preferred), Handler)
        except OSError:
            self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True, name="pip-folders").start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def local_path(location: str) -> Path | None:
    if location.startswith("file://"):
        return Path(unquote(urlparse(location).path))
    if "://" not in location and location.startswith("/"):
        return Path(location)
    return None


def without_credentials(location: str) -> str:
    """A URL without its user:password part (build args are readable in the image's history)."""
    parts = urlsplit(location)
    if "@" not in parts.netloc:
        return location
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def pip_build_args(server: _LocalFolderServer) -> tuple[dict[str, str], list[str]]:
    """Build args carrying the host's pip settings; local locations are routed through `server`.

    Returns the args with placeholders `{route:KEY}` for served locations, and the route keys.
    Credentials in index URLs are left out: a build arg is stored in the image's history, and
    the SDK's (non-BuildKit) builder has no build secrets.
    """
    args: dict[str, str] = {}
    routes: list[str] = []
    for name, value in host_pip_config().items():
        if name not in _PIP_LOCATIONS:
            args[name] = value
            continue
        kept: list[str] = []
        for location in value.split():
            path = local_path(location)
            if path is None:
                public = without_credentials(location)
                if public != location:
                    log.warning("pip setting %s: credentials in %s left out of the image build "
                                "(build args are kept in the image history)", name, public)
                kept.append(public)
            elif path.exists():
                key = server.add(path, with_parent=name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"))
                routes.append(key)
                kept.append("{route:" + key + "}")
            else:
                log.debug("pip setting %s: %s does not exist here; left out of the build", name, location)
        if kept:
            args[name] = " ".join(kept)
    if routes:
        args["PIP_TRUSTED_HOST"] = " ".join(filter(None, [args.get("PIP_TRUSTED_HOST", ""), "127.0.0.1"]))
    return args, routes


# ---------------------------------------------------------------- images


def image_source(runtime: RuntimeDefinition) -> RuntimeDefinition:
    """The definition whose folder holds the image (itself, or its `base`)."""
    if runtime.base is None:
        return runtime
    seen = {runtime.name}
    source = runtime
    while source.base is not None:
        if source.base in seen:
            raise SuiteError(f"{runtime.folder / 'runtime.toml'}: base: cycle through {source.base!r}")
        seen.add(source.base)
        source = base_definition(source)
    if runtime.pinned_version:  # the variant's release is its base image's release
        source = source.model_copy(update={"pinned_version": runtime.pinned_version})
    return source


def docker_spec(runtime: RuntimeDefinition) -> DockerSpec:
    """The runtime's [docker] section, or its base's when it has none."""
    if runtime.docker is not None:
        return runtime.docker
    source = image_source(runtime)
    if source.docker is None:
        raise EnvironmentUnavailable(f"runtime {runtime.name!r} has no [docker] section (no image)")
    return source.docker


def _context_files(folder: Path, dockerfile: str) -> list[str]:
    from docker.utils.build import exclude_paths

    ignore = folder / ".dockerignore"
    patterns = ["runtime.toml"]  # read by the suite, not a build input
    if ignore.exists():
        patterns += [ln.strip() for ln in ignore.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    included = exclude_paths(str(folder), patterns, dockerfile=dockerfile)
    return sorted(p for p in included if (folder / p).is_file())


def build_args_for(source: RuntimeDefinition) -> dict[str, str]:
    """The build args that define the image: the definition's, and BASE when overridden."""
    spec = source.docker
    assert spec is not None
    args = dict(spec.build_args)
    version = version_spec(source)
    if source.pinned_version and version is not None:
        if not version.build_arg:
            raise SuiteError(f"{source.folder / 'runtime.toml'}: version: no build_arg, so its image cannot be "
                             f"built at release {source.pinned_version}")
        args[version.build_arg] = version.build_arg_value.format(version=source.pinned_version)
    base_override = os.environ.get("SUITE_DOCKER_BASE")
    dockerfile = source.folder / spec.dockerfile
    if base_override and dockerfile.exists() and re.search(r"^\s*ARG\s+BASE\b", dockerfile.read_text(), re.M):
        args["BASE"] = base_override
    return args


def image_tag(runtime: RuntimeDefinition) -> str:
    """`suite-<name>:<hash12>`: the hash of the build context's files, Dockerfile and build args."""
    source = image_source(runtime)
    spec = source.docker
    if spec is None:
        raise EnvironmentUnavailable(f"runtime {source.name!r} has no [docker] section (no image)")
    folder = source.folder
    if not (folder / spec.dockerfile).exists():
        raise SuiteError(f"{folder / 'runtime.toml'}: docker.dockerfile: no file {spec.dockerfile!r}")
    digest = hashlib.sha256()
    digest.update(f"dockerfile={spec.dockerfile}\n".encode())
    for key, value in sorted(build_args_for(source).items()):
        digest.update(f"arg {key}={value}\n".encode())
    for rel in _context_files(folder, spec.dockerfile):
        path = folder / rel
        digest.update(f"file {rel} {os.access(path, os.X_OK)}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"suite-{source.name}:{digest.hexdigest()[:12]}"


_PULL_HINT = re.compile(r"pull access denied|manifest unknown|repository does not exist|registry|dial tcp|"
                        r"no such host|not found: manifest|toomanyrequests", re.I)


def build_image(runtime: RuntimeDefinition, client: docker.DockerClient | None = None) -> str:
    """Build the runtime's image unless its tag exists; returns the tag."""
    import docker

    client = client or _docker_client(timeout=3600)
    source = image_source(runtime)
    tag = image_tag(runtime)
    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.get(tag)
        log.debug("image %s exists", tag)
        return tag
    builds = cache_dir() / "docker" / "builds"
    builds.mkdir(parents=True, exist_ok=True)
    with open_lock(builds / f".{source.name}.lock") as lock:  # never through a symbolic link
        fcntl.flock(lock, fcntl.LOCK_EX)  # another suite process may be building it
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.get(tag)
            return tag
        _run_build(client, source, tag, builds / f"{source.name}-{tag.split(':')[1]}.log")
    return tag


def _run_build(client: docker.DockerClient, source: RuntimeDefinition, tag: str, log_path: Path) -> None:
    import docker

    spec = source.docker
    assert spec is not None
    args = build_args_for(source)
    server = _LocalFolderServer()
    pip_args, routes = pip_build_args(server)
    log.info("building image %s from %s (log: %s)", tag, source.folder, log_path)
    t0 = time.monotonic()
    error: str | None = None
    with server, log_path.open("w") as out, progress.step(f"build image {tag}", detail=f"log: {log_path}") as step:
        for key, value in pip_args.items():
            for route in routes:
                value = value.replace("{route:" + route + "}", server.url(route))
            args.setdefault(key, value)
        shown = {k: v for k, v in args.items() if not k.startswith("PIP_")}
        out.write(f"# build {tag} from {source.folder} args={shown}\n")
        try:
            stream = client.api.build(
                path=str(source.folder), dockerfile=spec.dockerfile, tag=tag, buildargs=args,
                rm=True, forcerm=True, decode=True, pull=False,
                network_mode="host" if routes else None,
                labels={"suite.image": source.name, "suite.tag": tag},
            )
            for chunk in stream:
                if "stream" in chunk:
                    out.write(chunk["stream"])
                    step.note(str(chunk["stream"]))  # the build's latest output line, beside its spinner
                elif "error" in chunk:
                    error = str(chunk["error"]).strip()
                    out.write(f"ERROR {error}\n")
                out.flush()
        except docker.errors.APIError as exc:
            error = _first_line(exc.explanation or exc)
            out.write(f"ERROR {error}\n")
        out.flush()
        if error is not None:
            raise _build_failed(source, error, log_path)
    log.info("built %s in %.0f s", tag, time.monotonic() - t0)


def _build_failed(source: RuntimeDefinition, error: str, log_path: Path) -> SuiteError:
    """The one line a failed build gives: the failing step's error line, and a hint when no image could be pulled."""
    text = log_path.read_text(errors="replace")
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith(("ERROR ", "# build ")))
    line = find_error_line(body) if "returned a non-zero code" in error else None
    message = f"building the image of runtime {source.name!r} failed: {line or error}"
    if _PULL_HINT.search(error) and "SUITE_DOCKER_BASE" not in os.environ:
        message += " (no image can be pulled? set SUITE_DOCKER_BASE to a local base image)"
    return SuiteError(f"{message} (log: {log_path})")


# ---------------------------------------------------------------- running containers


class DockerRuntime(RunningRuntime):
    """A started container; stop/kill remove it."""

    def __init__(self, container: Container, base_url: str, command: list[str], log_path: Path,
                 image_digest: str | None):
        self.container = container
        self.container_id = container.id
        self.base_url = base_url
        self.command = command
        self.log_path = log_path
        self.image_digest = image_digest
        self._lock = threading.Lock()
        self._stopped = False
        self._log_thread: threading.Thread | None = None
        REGISTRY.add(self)

    def _mark_stopped(self) -> None:
        self._stopped = True
        REGISTRY.discard(self)

    def alive(self) -> bool:
        if self._stopped:
            return False
        try:
            self.container.reload()
        except Exception:  # noqa: BLE001 - gone
            return False
        return self.container.status == "running"

    def state(self) -> dict[str, Any]:
        try:
            self.container.reload()
            return dict(self.container.attrs.get("State") or {})
        except Exception:  # noqa: BLE001
            return {}

    def ended(self) -> str | None:
        """How the container's process ended (its exit code read as a shell does: 139 is SIGSEGV)."""
        state = self.state()
        if not state or state.get("Status") not in ("exited", "dead"):
            return None
        if state.get("OOMKilled"):
            return "was killed for lack of memory"
        code = state.get("ExitCode")
        return exit_words(code, shell_convention=True) if isinstance(code, int) else None

    def stop(self, timeout_s: float = 15.0) -> None:
        with self._lock:
            if self._stopped:
                return
            with contextlib.suppress(Exception):
                self.container.stop(timeout=max(1, int(timeout_s)))
            self._remove()

    def kill(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._remove()

    def _remove(self) -> None:
        try:
            self.container.remove(force=True)
        except Exception as exc:  # noqa: BLE001
            if "No such container" not in str(exc) and "already in progress" not in str(exc):
                log.warning("could not remove container %s: %s", self.container.short_id, _first_line(exc))
        if self._log_thread is not None:
            self._log_thread.join(timeout=5)
        self._mark_stopped()

    def follow_log(self) -> None:
        """Stream the container's output into log_path until the container ends."""

        def pump() -> None:
            with self.log_path.open("ab") as fh:
                try:
                    for chunk in self.container.logs(stream=True, follow=True):
                        fh.write(chunk)
                        fh.flush()
                except Exception as exc:  # noqa: BLE001 - the container was removed
                    log.debug("log stream of %s ended: %s", self.container.short_id, exc)

        self._log_thread = threading.Thread(target=pump, daemon=True, name=f"log-{self.container.short_id}")
        self._log_thread.start()


def nvidia_runtime_present(client: docker.DockerClient) -> bool:
    """Whether the engine can give containers an NVIDIA GPU (the NVIDIA Container Toolkit)."""
    try:
        info = client.info()
    except Exception:  # noqa: BLE001
        return False
    runtimes = info.get("Runtimes") or {}
    cdi = " ".join(info.get("CDISpecDirs") or [])
    return "nvidia" in runtimes or info.get("DefaultRuntime") == "nvidia" or "nvidia" in cdi


# Where a launch's compile-cache root is mounted inside the container.
CACHE_MOUNT = "/suite-caches"


def cache_mounts(env: dict[str, str], caches: CompileCacheSpec) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """The compile-cache folders of `env` as read-write mounts, and the env rewritten to them.

    Each compile-cache variable the runtime declares (`caches`, its definition's
    `[compile_cache]`) whose value is an absolute host path has
    that path's parent (the launch's cache root) mounted under `CACHE_MOUNT` and its value
    rewritten to the same folder inside the container; the host folders are made first. Without
    this a container starts with its own empty caches whatever the host keeps: "kept" caches
    would not be kept. Other values are left as they are.
    """
    volumes: dict[str, dict[str, str]] = {}
    inner_of: dict[str, str] = {}
    rewritten = dict(env)
    for var in (d.env for d in caches.dirs):
        value = env.get(var)
        if not value or not os.path.isabs(value):
            continue
        host = Path(value)
        root = str(host.parent.resolve())
        if root not in inner_of:
            inner_of[root] = f"{CACHE_MOUNT}/{len(inner_of)}" if inner_of else CACHE_MOUNT
            volumes[root] = {"bind": inner_of[root], "mode": "rw"}
        host.mkdir(parents=True, exist_ok=True)
        rewritten[var] = f"{inner_of[root]}/{host.name}"
    return volumes, rewritten


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class DockerLauncher(Launcher):
    name = "docker"

    def __init__(self) -> None:
        self._client: docker.DockerClient | None = None
        self._images: dict[str, str] = {}

    @property
    def engine(self) -> docker.DockerClient:
        """The Docker engine's client (connected on first use). Not `client`: that is the stages'
        client to the runtime (Launcher.client), which a bench asks every launcher for."""
        if self._client is None:
            self._client = _docker_client()
        return self._client

    def check_available(self) -> None:
        import docker

        try:
            self.engine.ping()
        except docker.errors.DockerException as exc:
            raise EnvironmentUnavailable(f"Docker engine not reachable: {_first_line(exc)}") from None

    def prepare(self, runtime: RuntimeDefinition, model_path: ModelPath | None = None) -> None:
        self.check_available()
        docker_spec(runtime)
        self._images[_image_key(runtime)] = build_image(runtime, _docker_client(timeout=3600))

    def env(self, runtime: RuntimeDefinition, spec: LaunchSpec) -> dict[str, str]:
        """As `start` runs the container: the image's [docker] env, then the spec's."""
        try:
            dspec_env = docker_spec(runtime).env
        except EnvironmentUnavailable:
            dspec_env = {}
        return {**dspec_env, **spec.env}

    def image_for(self, runtime: RuntimeDefinition) -> str:
        if _image_key(runtime) not in self._images:
            self.prepare(runtime)
        return self._images[_image_key(runtime)]

    def _mounts(self, spec: LaunchSpec, dspec: DockerSpec) -> tuple[dict[str, dict[str, str]], str, list[tuple[str, str]]]:
        model = spec.model_path.resolve()
        if not model.exists():
            raise SuiteError(f"model path {spec.model_path} does not exist")
        mount = dspec.model_mount.rstrip("/") or "/models"
        volumes: dict[str, dict[str, str]] = {}
        if model.is_dir():
            inner = f"{mount}/{model.name}"
            volumes[str(model)] = {"bind": inner, "mode": "ro"}
        else:
            inner = f"{mount}/{model.name}"
            volumes[str(model.parent)] = {"bind": mount, "mode": "ro"}
        loras: list[tuple[str, str]] = []
        for adapter in spec.lora:
            inner_lora = f"/lora/{adapter.name}"
            volumes[str(adapter.path.resolve())] = {"bind": inner_lora, "mode": "ro"}
            loras.append((adapter.name, inner_lora))
        return volumes, inner, loras

    def start(self, spec: LaunchSpec) -> DockerRuntime:
        import docker

        runtime = spec.runtime
        dspec = docker_spec(runtime)
        self.check_available()
        client = self.engine
        tag = build_image(runtime, _docker_client(timeout=3600))  # reused when it exists
        self._images[_image_key(runtime)] = tag
        want_gpu = dspec.gpu != "none"
        has_gpu = want_gpu and nvidia_runtime_present(client)
        if dspec.gpu == "required" and not has_gpu:
            raise EnvironmentUnavailable(
                f"runtime {runtime.name!r} needs an NVIDIA GPU and this Docker engine has no NVIDIA "
                "runtime (install the NVIDIA Container Toolkit)")
        remove_orphan_containers(client)
        port = spec.port or free_port()
        if spec.port and not _port_free(spec.port):
            raise RuntimeStartError(f"runtime {runtime.name!r} cannot start: port {spec.port} on 127.0.0.1 is in use")
        volumes, inner_model, loras = self._mounts(spec, dspec)
        values = {"prefix": "", "model_path": inner_model, "served_name": spec.served_name, "host": "0.0.0.0",
                  "port": runtime.server.container_port, "seed": spec.seed, "context_length": spec.context_length}
        args = render(dspec.command, values, runtime.capabilities.lora_args, loras) + list(spec.args)
        env = {**dspec.env, **spec.env}
        caches, env = cache_mounts(env, runtime.compile_cache)  # kept compile caches: the host folders, mounted
        volumes.update(caches)
        image = client.images.get(tag)
        entrypoint = list(image.attrs.get("Config", {}).get("Entrypoint") or [])
        repo_digests = image.attrs.get("RepoDigests") or []
        image_digest = repo_digests[0] if repo_digests else image.id
        device_requests = None
        if has_gpu:
            device_requests = [docker.types.DeviceRequest(**_gpu_request())]
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        spec.log_path.write_bytes(b"")
        REGISTRY.install_signal_handlers()
        t0 = time.monotonic()
        with REGISTRY.deferred():
            try:
                container = client.containers.create(
                    tag, command=args, environment=env, volumes=volumes, detach=True,
                    ports={f"{runtime.server.container_port}/tcp": ("127.0.0.1", port)},
                    labels={LABEL_RUN: "1", LABEL_SESSION: SESSION, LABEL_RUNTIME: runtime.name,
                            **_owner_labels()},
                    shm_size=dspec.shm_size, device_requests=device_requests,
                )
            except docker.errors.APIError as exc:
                raise RuntimeStartError(f"runtime {runtime.name!r}: container not created: "
                                        f"{_first_line(exc.explanation or exc)}") from None
            rt = DockerRuntime(container, f"http://127.0.0.1:{port}", [*entrypoint, *args], spec.log_path,
                               image_digest)
        try:
            try:
                container.start()
            except docker.errors.APIError as exc:
                reason = _first_line(exc.explanation or exc)
                if re.search(r"address already in use|port is already allocated", reason):
                    reason = f"port {port} on 127.0.0.1 is in use"
                raise RuntimeStartError(f"runtime {runtime.name!r} cannot start: {reason}") from None
            rt.follow_log()
            self._wait_ready(rt, spec, t0)
        except BaseException:
            rt.kill()
            raise
        rt.startup_s = time.monotonic() - t0
        log.info("%s ready on %s in %.1f s (container %s, GPU %s)", runtime.name, rt.base_url, rt.startup_s,
                 container.short_id, "yes" if has_gpu else "no")
        return rt

    def _wait_ready(self, rt: DockerRuntime, spec: LaunchSpec, t0: float) -> None:
        def gone() -> str | None:
            state = rt.state()
            if state and state.get("Status") not in ("exited", "dead"):
                return None
            if rt._log_thread is not None:
                rt._log_thread.join(timeout=3)  # the log's last lines, before reading it
            if state.get("OOMKilled"):
                return "was killed for lack of memory"
            code = state.get("ExitCode")
            return exit_words(code, shell_convention=True) if isinstance(code, int) else "exited with status ?"

        with progress.step(f"start {spec.runtime.name}", timeout_s=spec.startup_timeout_s,
                           detail=f"log: {spec.log_path}") as step:
            def check() -> str | None:
                step.note(progress.tail_of(spec.log_path))  # the container log's latest line, beside the spinner
                return gone()

            wait_until_ready(rt.base_url, spec, t0, check)


def _image_key(runtime: RuntimeDefinition) -> str:
    return f"{runtime.name}@{runtime.pinned_version}" if runtime.pinned_version else runtime.name


def _gpu_request() -> dict[str, Any]:
    """All GPUs, or those named in SUITE_DOCKER_GPUS (comma-separated indexes or UUIDs)."""
    chosen = os.environ.get("SUITE_DOCKER_GPUS", "all").strip()
    if chosen in ("", "all"):
        return {"count": -1, "capabilities": [["gpu"]]}
    return {"device_ids": [d.strip() for d in chosen.split(",") if d.strip()], "capabilities": [["gpu"]]}

