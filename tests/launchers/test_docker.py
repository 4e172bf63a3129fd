"""The Docker launcher against the real engine: the llamacpp CPU image built and gated end to end,
interrupts that leave no container behind, the watchdog stopping a container, and the one-line
errors (port in use, build failure, never ready, exits at once, no NVIDIA runtime).

The engine is started by `.ci/docker-setup.sh` when it does not answer (it also builds the local
base image); the tests skip, with the reason, only when the engine cannot be started. Images are
built FROM the local base image (`SUITE_DOCKER_BASE`), since none can be pulled here.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from suite.client import GenerationParams, OpenAIClient
from suite.definitions import RuntimeDefinition, get_definition, load_definitions
from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.launchers.base import LaunchSpec
from suite.launchers.docker import LABEL_SESSION, SESSION, DockerLauncher, nvidia_runtime_present
from suite.paths import REPO_ROOT
from suite.stages.gate_models import select_prompts
from suite.stages.repeat import run_gate

pytestmark = pytest.mark.docker

BASE_IMAGE = os.environ.get("SUITE_DOCKER_BASE", "suite-base:bookworm")


def _tail(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


@pytest.fixture(scope="session")
def docker_launcher() -> DockerLauncher:
    """The engine answers (started here when it does not) and the local base image exists."""
    os.environ["SUITE_DOCKER_BASE"] = BASE_IMAGE
    launcher = DockerLauncher()
    try:
        launcher.check_available()
    except EnvironmentUnavailable as exc:
        setup = subprocess.run([str(REPO_ROOT / ".ci" / "docker-setup.sh")], capture_output=True, text=True,
                               timeout=1800)
        if setup.returncode != 0:
            pytest.skip(f"the Docker engine cannot be started here: {exc}; setup: {_tail(setup.stderr)}")
        launcher = DockerLauncher()
        launcher.check_available()
    if not launcher.engine.images.list(name=BASE_IMAGE):
        built = subprocess.run([str(REPO_ROOT / ".ci" / "base-image.sh"), BASE_IMAGE], capture_output=True,
                               text=True, timeout=1800)
        assert built.returncode == 0, f"base image: {_tail(built.stderr)}"
    return launcher


@pytest.fixture(scope="session")
def llamacpp_image(docker_launcher: DockerLauncher) -> RuntimeDefinition:
    definition = get_definition("llamacpp")
    t0 = time.monotonic()
    docker_launcher.prepare(definition)
    print(f"\nllamacpp image {docker_launcher.image_for(definition)} ready in {time.monotonic() - t0:.0f} s")
    return definition


def session_containers(launcher: DockerLauncher, session: str = SESSION) -> list[Any]:
    return launcher.engine.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={session}"})


def spec_for(definition: RuntimeDefinition, model: Path, tmp: Path, **fields: Any) -> LaunchSpec:
    extra: dict[str, Any] = {"served_name": "tiny", "seed": 42, "context_length": 2048,
                             "log_path": tmp / f"{definition.name}.log", "startup_timeout_s": 180.0}
    extra.update(fields)
    return LaunchSpec(runtime=definition, model_path=model, **extra)


# -- the llamacpp CPU image, end to end -------------------------------------------------------------

def test_gate_in_a_container(docker_launcher, llamacpp_image, tiny_gguf, tmp_path):
    definition = llamacpp_image
    control = definition.control("prompt-cache-off")
    with docker_launcher.start(spec_for(definition, tiny_gguf, tmp_path)) as rt:
        print(f"\ncontainer {rt.container_id[:12]} start-to-ready {rt.startup_s:.1f} s")
        attrs = docker_launcher.engine.api.inspect_container(rt.container_id)
        bindings = [b for ports in attrs["NetworkSettings"]["Ports"].values() for b in ports or []]
        assert bindings and all(b["HostIp"] == "127.0.0.1" for b in bindings)
        mounts = attrs["Mounts"]
        assert [m["RW"] for m in mounts] == [False] and mounts[0]["Destination"] == "/models"
        assert f"/models/{tiny_gguf.name}" in rt.command
        assert attrs["Config"]["Labels"]["suite.run"] == "1"
        assert rt.image_digest and rt.image_digest.startswith("sha256:")
        with OpenAIClient(rt.base_url, "tiny", params=GenerationParams(extra_body={
                **definition.request.extra_body, **control.extra_body})) as client:
            gate = run_gate(client, select_prompts(["short-open"]), 5,
                            max_tokens_cap=16, alive=rt.alive)
    prompt = gate.prompts[0]
    assert prompt.answered == 5 and prompt.errors == 0
    assert prompt.distinct_answers == 1, prompt.answers
    assert any(word.isalpha() for word in prompt.answers[0].text.split())
    assert "llama" in rt.log_path.read_text().lower()  # the container's log reached the run folder
    assert session_containers(docker_launcher) == []


def test_adding_a_runtime_is_a_folder(docker_launcher, llamacpp_image, tiny_gguf, tmp_path):
    """A new runtime: a folder with a runtime.toml and a Dockerfile, no Python; a gate runs on it."""
    image = docker_launcher.image_for(llamacpp_image)
    folder = tmp_path / "images" / "llamacpp-one-slot"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(f"FROM {image}\nENTRYPOINT [\"/usr/local/bin/llama-server\"]\n")
    (folder / "runtime.toml").write_text(textwrap.dedent("""\
        description = "llama-server with one slot and a small batch"
        [server]
        ready_path = "/health"
        container_port = 8080
        [docker]
        command = ["--model", "{model_path}", "--alias", "{served_name}", "--host", "0.0.0.0",
                   "--port", "8080", "--seed", "{seed}", "--ctx-size", "{context_length}",
                   "--parallel", "1", "--batch-size", "64"]
        gpu = "none"
        [capabilities]
        formats = ["gguf"]
        """))
    definition = load_definitions(tmp_path / "images")["llamacpp-one-slot"]
    docker_launcher.prepare(definition)
    with docker_launcher.start(spec_for(definition, tiny_gguf, tmp_path)) as rt:
        assert "--parallel" in rt.command and "1" in rt.command
        with OpenAIClient(rt.base_url, "tiny", params=GenerationParams(extra_body={"cache_prompt": False})) as client:
            gate = run_gate(client, select_prompts(["short-open"]), 3,
                            max_tokens_cap=8, alive=rt.alive)
    assert gate.prompts[0].answered == 3 and gate.prompts[0].distinct_answers == 1
    assert session_containers(docker_launcher) == []


# -- interrupts -------------------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    import httpx
    from suite.definitions import get_definition
    from suite.launchers.base import LaunchSpec
    from suite.launchers.docker import DockerLauncher

    launcher = DockerLauncher()
    definition = get_definition("llamacpp")
    launcher.prepare(definition)
    spec = LaunchSpec(runtime=definition, model_path=Path(sys.argv[1]), served_name="tiny",
                      context_length=2048, log_path=Path(sys.argv[2]), startup_timeout_s=120)
    print("starting", flush=True)
    rt = launcher.start(spec)  # no `with`: the launcher alone must clean up
    print("ready", flush=True)
    with httpx.Client(timeout=60) as http:
        while True:
            http.post(rt.base_url + "/v1/completions", json={
                "model": "tiny", "prompt": "The capital of France is", "max_tokens": 16, "seed": 42})
""")


def _wait_line(proc: subprocess.Popen, expected: str, timeout_s: float) -> bool:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            line = proc.stdout.readline()
            if not line:
                return False
            if line.strip() == expected:
                return True
    return False


def test_interrupts_leave_no_container(docker_launcher, llamacpp_image, tiny_gguf, tmp_path):
    rng = random.Random(42)
    runs = [("start-up", signal.SIGINT)] * 5 + [("requests", signal.SIGINT)] * 5 + \
           [("start-up", signal.SIGTERM), ("requests", signal.SIGTERM)]
    outcomes = []
    for i, (phase, sig) in enumerate(runs):
        session = f"interrupt-{uuid.uuid4().hex[:8]}-{i}"
        env = {**os.environ, "SUITE_DOCKER_SESSION": session, "PYTHONPATH": str(REPO_ROOT)}
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_gguf), str(tmp_path / f"{i}.log")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                 cwd=REPO_ROOT)
        try:
            assert _wait_line(child, "starting", 60), "the child never started"
            if phase == "requests":
                assert _wait_line(child, "ready", 120), f"never ready: {child.stderr.read() if child.stderr else ''}"
            delay = rng.uniform(0.0, 2.5 if phase == "start-up" else 1.5)
            time.sleep(delay)
            child.send_signal(sig)
            code = child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        left = session_containers(docker_launcher, session)
        log_path = tmp_path / f"{i}.log"
        log_bytes = log_path.stat().st_size if log_path.exists() else 0  # > 0: its container had run
        outcomes.append((phase, sig.name, round(delay, 2), code, len(left), log_bytes))
        for c in left:  # do not leak into the next run even when the assertion below fails
            c.remove(force=True)
    print("\ninterrupts (phase, signal, delay s, exit code, containers left, runtime log bytes):")
    for outcome in outcomes:
        print("  ", outcome)
    assert all(o[4] == 0 for o in outcomes), outcomes
    assert all(o[3] != 0 for o in outcomes), "every child was interrupted, none finished on its own"
    assert any(o[0] == "start-up" and o[5] > 0 for o in outcomes), "no interrupt landed while a container ran"


# -- one-line errors with throwaway runtimes ---------------------------------------------------------

TOY_DOCKERFILE = """\
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
ENTRYPOINT ["bash", "-c"]
"""


def write_runtime(images: Path, name: str, toml: str, dockerfile: str | None = None) -> None:
    folder = images / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "runtime.toml").write_text(toml)
    if dockerfile is not None:
        (folder / "Dockerfile").write_text(dockerfile)


@pytest.fixture(scope="module")
def toy_images(tmp_path_factory, docker_launcher) -> dict[str, RuntimeDefinition]:
    """A shell image, and variants of it (base = "toy") that misbehave on purpose."""
    images = tmp_path_factory.mktemp("images")
    write_runtime(images, "toy", textwrap.dedent("""\
        description = "a shell; its command is the script"
        [server]
        ready_path = "/"
        container_port = 8000
        [docker]
        command = ["python3 -m http.server 8000"]
        gpu = "none"
        """), TOY_DOCKERFILE)
    write_runtime(images, "toy-sleeps", textwrap.dedent("""\
        description = "never answers"
        base = "toy"
        [server]
        ready_path = "/"
        [docker]
        command = ["sleep 600"]
        gpu = "none"
        """))
    write_runtime(images, "toy-dies", textwrap.dedent("""\
        description = "exits at once"
        base = "toy"
        [docker]
        command = ["echo 'loading model'; echo 'fatal: cannot open the model file' >&2; exit 4"]
        gpu = "none"
        """))
    write_runtime(images, "toy-gpu", textwrap.dedent("""\
        description = "needs a GPU"
        base = "toy"
        platforms = ["gpu"]
        [docker]
        command = ["sleep 600"]
        gpu = "required"
        """))
    write_runtime(images, "toy-grows", textwrap.dedent("""\
        description = "serves, and grows its memory by 50 MiB every 0.1 s"
        base = "toy"
        [server]
        ready_path = "/"
        container_port = 8000
        [docker]
        command = ["python3 -m http.server 8000 & sleep 2; python3 -c 'import time\\nhoard = []\\nwhile True: hoard.append(b\\"x\\" * (50 * 2**20)); time.sleep(0.1)'"]
        gpu = "none"
        """))
    write_runtime(images, "toy-compiles", textwrap.dedent("""\
        description = "writes a compile-cache file where TRITON_CACHE_DIR points, then serves"
        base = "toy"
        [server]
        ready_path = "/"
        container_port = 8000
        [docker]
        command = ["mkdir -p \\"$TRITON_CACHE_DIR\\" && date +%s%N > \\"$TRITON_CACHE_DIR/kernel-$HOSTNAME\\" && python3 -m http.server 8000"]
        gpu = "none"
        [compile_cache]
        dirs = [{ env = "TRITON_CACHE_DIR", folder = "triton" }]
        """))
    write_runtime(images, "broken", textwrap.dedent("""\
        description = "its image does not build"
        [docker]
        gpu = "none"
        """), TOY_DOCKERFILE + 'RUN echo "error: the recipe failed on purpose" >&2 && exit 3\n')
    definitions = load_definitions(images)
    docker_launcher.prepare(definitions["toy"])
    return definitions


def one_line(exc: BaseException) -> str:
    message = str(exc)
    assert message and "\n" not in message and "Traceback" not in message
    return message


def test_kept_compile_caches_reach_the_next_container(docker_launcher, toy_images, tiny_gguf, tmp_path):
    """The cache root is mounted: what the first container compiled, the second finds (before the
    fix every container started with its own empty folder while the page said "kept")."""
    from suite.stages.restarts import files_in, cache_env

    root = tmp_path / "caches" / "kept"
    toy = toy_images["toy-compiles"]
    spec = spec_for(toy, tiny_gguf, tmp_path, env=cache_env(root, toy.compile_cache), startup_timeout_s=60.0)
    assert files_in(root) == 0
    with docker_launcher.start(spec):
        pass
    assert files_in(root / "triton") == 1  # written inside the container, kept on the host
    with docker_launcher.start(spec):
        pass
    assert files_in(root / "triton") == 2


def test_build_failure_is_one_line(docker_launcher, toy_images):
    with pytest.raises(SuiteError) as info:
        docker_launcher.prepare(toy_images["broken"])
    message = one_line(info.value)
    assert "'broken'" in message and "failed on purpose" in message
    log_path = Path(message.rsplit("(log: ", 1)[1].rstrip(")"))
    assert "failed on purpose" in log_path.read_text()


def test_port_in_use_is_one_line(docker_launcher, toy_images, tiny_gguf, tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeStartError) as info:
            docker_launcher.start(spec_for(toy_images["toy"], tiny_gguf, tmp_path, port=port))
    assert f"port {port} on 127.0.0.1 is in use" in one_line(info.value)
    assert session_containers(docker_launcher) == []


def test_never_ready_is_one_line_and_removed(docker_launcher, toy_images, tiny_gguf, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(RuntimeStartError) as info:
        docker_launcher.start(spec_for(toy_images["toy-sleeps"], tiny_gguf, tmp_path, startup_timeout_s=3))
    assert time.monotonic() - t0 < 30
    assert "not ready after 3 s" in one_line(info.value)
    assert session_containers(docker_launcher) == []


def test_exit_at_start_gives_the_log_line(docker_launcher, toy_images, tiny_gguf, tmp_path):
    with pytest.raises(RuntimeStartError) as info:
        docker_launcher.start(spec_for(toy_images["toy-dies"], tiny_gguf, tmp_path))
    message = one_line(info.value)
    assert "exited with status 4" in message and "cannot open the model file" in message
    assert info.value.error_line == "fatal: cannot open the model file"
    assert session_containers(docker_launcher) == []


def test_missing_nvidia_runtime_is_one_line(docker_launcher, toy_images, tiny_gguf, tmp_path):
    if nvidia_runtime_present(docker_launcher.engine):
        pytest.skip("this engine has an NVIDIA runtime")
    with pytest.raises(EnvironmentUnavailable) as info:
        docker_launcher.start(spec_for(toy_images["toy-gpu"], tiny_gguf, tmp_path))
    assert "NVIDIA" in one_line(info.value)
    assert session_containers(docker_launcher) == []


def test_watchdog_stops_a_growing_container(docker_launcher, toy_images, tiny_gguf, tmp_path):
    memwatch = pytest.importorskip("memwatch")
    rt = docker_launcher.start(spec_for(toy_images["toy-grows"], tiny_gguf, tmp_path, startup_timeout_s=30))
    with rt:
        policy = memwatch.Policy(spill_gb=None, host_max_gb=0.6, interval_s=0.1)
        with memwatch.Watchdog(policy, probes=[memwatch.CgroupProbe(rt.container_id)], stop=rt.kill) as wd:
            tripped = wd.wait_tripped(timeout=60)
            gone = wd.wait_gone(timeout=15)
        report = wd.report
    assert tripped and gone, report
    assert report is not None and report.trip is not None
    trip = report.trip
    print(f"\nwatchdog trip: {trip.value_bytes / 2**20:.0f} MiB > {trip.threshold_bytes / 2**20:.0f} MiB, "
          f"stop returned after {trip.stop_returned_s}, gone after {trip.gone_s} s")
    assert report.trip.rule == "host_max" and report.trip.value_bytes >= 0.6 * 2**30
    assert report.trip.value_bytes < 1.5 * 2**30  # stopped soon after the crossing
    assert not rt.alive()
    assert session_containers(docker_launcher) == []


def test_host_pip_settings_reach_the_build(docker_launcher, tmp_path):
    """pip inside a build is configured as on the host; local pip folders are served to it."""
    from suite.launchers.docker import local_path, host_pip_config

    settings = host_pip_config()
    local = [loc for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL")
             for loc in settings.get(name, "").split() if local_path(loc) and local_path(loc).exists()]
    if not local:
        pytest.skip("this host's pip uses no local folder")
    folder = tmp_path / "images" / "pip-probe"
    folder.mkdir(parents=True)
    (folder / "runtime.toml").write_text('description = "probe"\n[docker]\ngpu = "none"\n')
    (folder / "Dockerfile").write_text(TOY_DOCKERFILE + f"LABEL probe={uuid.uuid4().hex}\n" + textwrap.dedent("""\
        ARG PIP_FIND_LINKS
        ARG PIP_EXTRA_INDEX_URL
        ARG PIP_INDEX_URL
        RUN for url in $PIP_FIND_LINKS $PIP_EXTRA_INDEX_URL $PIP_INDEX_URL; do \\
              case "$url" in http://127.0.0.1:*) python3 -c "import sys, urllib.request; \\
                urllib.request.urlopen(sys.argv[1], timeout=30).read(1)" "$url" && echo "reached $url";; esac; \\
            done > /reached.txt && test -s /reached.txt
        """))
    definition = load_definitions(tmp_path / "images")["pip-probe"]
    docker_launcher.prepare(definition)
    tag = docker_launcher.image_for(definition)
    out = docker_launcher.engine.containers.run(tag, ["cat /reached.txt"], remove=True).decode()
    docker_launcher.engine.images.remove(tag)
    assert out.count("reached http://127.0.0.1:") == len(local), out


def test_unreachable_engine_is_unavailable_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(EnvironmentUnavailable) as info:
        DockerLauncher().check_available()
    assert "Docker engine not reachable" in one_line(info.value)
