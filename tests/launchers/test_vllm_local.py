"""vLLM without Docker: the three ways to its interpreter, the version check, and its workers' end.

vLLM itself cannot run here (no GPU); a stand-in package named `vllm` (written by these tests into
a temporary folder, never installed) plays its part where the suite's own code is what is tested:
it reports a version, and its `vllm.entrypoints.openai.api_server` serves /health and /v1/models
and starts a worker process in its process group, as vLLM's engine core does. The local launcher,
the guard, the install recipe and the version check are the product's, unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from suite.definitions import get_definition, with_version
from suite.errors import SuiteError
from suite.launchers import pyenv
from suite.launchers.base import LaunchSpec
from suite.launchers.local import LocalLauncher, is_installed

REPO = Path(__file__).resolve().parents[2]

SERVER = '''
import http.server, json, os, subprocess, sys, threading
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
out = os.environ["FAKE_VLLM_OUT"]
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(out, "w") as fh:
    json.dump({"pid": os.getpid(), "worker": worker.pid, "argv": sys.argv, "executable": sys.executable,
               "pythonpath": os.environ.get("PYTHONPATH"), "dev_mode": os.environ.get("VLLM_SERVER_DEV_MODE")}, fh)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "tiny"}], "version": "0.24.0"}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def fake_vllm(root: Path, version: str = "0.24.0") -> Path:
    pkg = root / "vllm"
    (pkg / "entrypoints" / "openai").mkdir(parents=True)
    (pkg / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (pkg / "entrypoints" / "__init__.py").write_text("")
    (pkg / "entrypoints" / "openai" / "__init__.py").write_text("")
    (pkg / "entrypoints" / "openai" / "api_server.py").write_text(SERVER)
    return root


@pytest.fixture
def existing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """SUITE_VLLM_PYTHON / SUITE_VLLM_PYTHONPATH naming an environment with the stand-in vLLM 0.24.0."""
    site = fake_vllm(tmp_path / "target")
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SUITE_VLLM_PYTHON", sys.executable)
    monkeypatch.setenv("SUITE_VLLM_PYTHONPATH", str(site))
    monkeypatch.delenv("SUITE_WHEELHOUSE", raising=False)
    return site


def _vllm(version: str | None = "0.24.0"):
    return with_version(get_definition("vllm"), version)


def test_the_way_follows_the_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    d = _vllm()
    assert pyenv.python_way(d, {}).way == "venv"  # type: ignore[union-attr]
    w = pyenv.python_way(d, {"SUITE_WHEELHOUSE": "/w"})
    assert w is not None and w.way == "wheelhouse" and w.env() == {"SUITE_WHEELHOUSE": "/w"}
    e = pyenv.python_way(d, {"SUITE_WHEELHOUSE": "/w", "SUITE_VLLM_PYTHON": "python3", "SUITE_VLLM_PYTHONPATH": "/t"})
    assert e is not None and e.way == "existing" and (e.python, e.pythonpath) == ("python3", "/t")
    monkeypatch.setenv("PYTHONPATH", "/other")
    assert e.env()["PYTHONPATH"] == "/t" + os.pathsep + "/other"
    assert e.env()["SUITE_VLLM_PYTHON"] == "python3"  # recorded with the signature's env
    assert pyenv.python_way(get_definition("llamacpp"), {"SUITE_VLLM_PYTHON": "python3"}) is None
    assert get_definition("vllm").local.python_env == "SUITE_VLLM"  # type: ignore[union-attr]


def test_an_existing_environment_with_the_arms_version_is_accepted(existing: Path) -> None:
    d = _vllm("0.24.0")
    assert is_installed(d)
    LocalLauncher().prepare(d)  # checks the version; installs nothing
    assert not (Path(os.environ["SUITE_CACHE"]) / "runtimes").exists()
    line = pyenv.describe(d, None)
    assert line == (f"vllm 0.24.0 from the existing environment {sys.executable} with PYTHONPATH={existing} "
                    "(SUITE_VLLM_PYTHON) (it has 0.24.0)")


def test_an_existing_environment_of_another_version_is_one_line(existing: Path) -> None:
    with pytest.raises(SuiteError) as err:
        LocalLauncher().prepare(_vllm("0.25.0"))
    msg = str(err.value)
    assert "\n" not in msg and "has vllm 0.24.0; the arm names 0.25.0" in msg and "SUITE_VLLM_PYTHON=" in msg
    # `suite doctor` says so before any start (an arm of another release beside one of the same)
    line = pyenv.describe(_vllm("0.25.0"), None) or ""
    assert line.startswith("vllm 0.25.0 from the existing environment") and "\n" not in line
    assert "has vllm 0.24.0; the arm names 0.25.0" in line


def test_an_environment_without_vllm_or_interpreter_is_one_line(existing: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("SUITE_VLLM_PYTHONPATH", str(tmp_path))  # no vllm there
    with pytest.raises(SuiteError, match="the runtime does not import there: ModuleNotFoundError: No module named 'vllm'"):
        LocalLauncher().prepare(_vllm())
    monkeypatch.setenv("SUITE_VLLM_PYTHON", "/nonexistent/python3")
    with pytest.raises(SuiteError, match="SUITE_VLLM_PYTHON=/nonexistent/python3 .*: no such interpreter"):
        LocalLauncher().prepare(_vllm())


def test_a_wheelhouse_without_the_pinned_release_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wh = tmp_path / "wheels"
    wh.mkdir()
    (wh / "vllm-0.23.1-cp38-abi3-manylinux1_x86_64.whl").write_bytes(b"")
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SUITE_WHEELHOUSE", str(wh))
    monkeypatch.delenv("SUITE_VLLM_PYTHON", raising=False)
    d = _vllm("0.24.0")
    assert not is_installed(d) and not pyenv.wheelhouse_has(d)
    assert "the wheelhouse has no vllm 0.24.0 wheel" in (pyenv.describe(d, None) or "")
    with pytest.raises(SuiteError) as err:
        LocalLauncher().prepare(d)
    assert f"error: the wheelhouse {wh} has no vllm 0.24.0 wheel (vllm wheels there: 0.23.1)" in str(err.value)
    (wh / "vllm-0.24.0-cp38-abi3-manylinux1_x86_64.whl").write_bytes(b"")
    assert pyenv.wheelhouse_has(d)


def _spec(tmp_path: Path, definition) -> LaunchSpec:
    return LaunchSpec(runtime=definition, model_path=tmp_path / "model", served_name="tiny", seed=42,
                      context_length=1024, controls=[], env={"FAKE_VLLM_OUT": str(tmp_path / "fake.json")},
                      args=[], log_path=tmp_path / "vllm.log", startup_timeout_s=60)


def test_the_local_launcher_runs_the_existing_interpreter_with_its_import_path(existing: Path, tmp_path: Path) -> None:
    d = _vllm()
    launcher = LocalLauncher()
    spec = _spec(tmp_path, d)
    rt = launcher.start(spec)
    try:
        info = json.loads((tmp_path / "fake.json").read_text())
        assert rt.command[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        assert info["pythonpath"].split(os.pathsep)[0] == str(existing)
        assert info["dev_mode"] == "1"  # the cache-reset endpoint is served
        env = launcher.env(d, spec)
        assert env["SUITE_VLLM_PYTHON"] == sys.executable and env["SUITE_VLLM_PYTHONPATH"] == str(existing)
        assert launcher.version(d, rt) == "0.24.0"
        assert rt.guard is not None and rt.guard.alive()
    finally:
        rt.stop()
    assert not psutil.pid_exists(info["worker"]) or psutil.Process(info["worker"]).status() == psutil.STATUS_ZOMBIE
    assert not rt.guard.alive()


DRIVER = '''
import json, sys, time
from pathlib import Path
from suite.definitions import get_definition, with_version
from suite.launchers.base import LaunchSpec
from suite.launchers.local import LocalLauncher
tmp = Path(sys.argv[1])
d = with_version(get_definition("vllm"), "0.24.0")
spec = LaunchSpec(runtime=d, model_path=tmp / "model", served_name="tiny", seed=42, context_length=1024,
                  controls=[], env={"FAKE_VLLM_OUT": str(tmp / "fake.json")}, args=[], log_path=tmp / "vllm.log",
                  startup_timeout_s=60)
rt = LocalLauncher().start(spec)
print("started", flush=True)
time.sleep(600)
'''


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_kill_9_of_the_suite_ends_the_runtime_and_its_workers_at_once(existing: Path, tmp_path: Path) -> None:
    """The review's finding: vLLM's workers outlived a kill -9 of the suite until the next start."""
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "started"
        info = json.loads((tmp_path / "fake.json").read_text())
        assert not _gone(info["worker"]) and not _gone(info["pid"])
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (_gone(info["pid"]) and _gone(info["worker"])):
            time.sleep(0.05)
        assert _gone(info["pid"]), "the server outlived the suite"
        assert _gone(info["worker"]), "the worker outlived the suite"
    finally:
        if driver.poll() is None:
            driver.kill()
        for key in ("pid", "worker"):
            try:
                psutil.Process(json.loads((tmp_path / "fake.json").read_text())[key]).kill()
            except (psutil.Error, OSError, ValueError, KeyError):
                pass


def test_the_install_recipe_is_the_definitions_and_executable() -> None:
    recipe = REPO / "images" / "vllm" / "install.sh"
    assert os.access(recipe, os.X_OK)
    assert subprocess.run(["bash", "-n", str(recipe)]).returncode == 0


def test_doctor_says_which_way_each_vllm_arm_would_use(existing: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from suite.cli import python_way_line

    d = get_definition("vllm")
    assert python_way_line(d, "0.24.0") == (f"vllm 0.24.0 from the existing environment {sys.executable} "
                                            f"with PYTHONPATH={existing} (SUITE_VLLM_PYTHON) (it has 0.24.0)")
    monkeypatch.delenv("SUITE_VLLM_PYTHON")
    assert python_way_line(d, "0.24.0") == "vllm 0.24.0 from its own venv from the package index (not installed yet)"
    assert python_way_line(get_definition("llamacpp"), None) is None


def test_offline_a_release_the_wheelhouse_holds_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from suite import catalog

    card_dir = tmp_path / "cards"
    card_dir.mkdir()
    (card_dir / "c.toml").write_text(textwrap.dedent('''
        name = "c"
        title = "c"
        served_name = "c"
        [formats.hf]
        kind = "hf"
        source = "hf:org/repo"
        revision = "main"
        [arms.v]
        runtime = "vllm"
        version = "0.24.0"
        format = "hf"
    '''))
    card = catalog.get_card("c", card_dir)
    monkeypatch.setattr(catalog, "_RELEASES", {"vllm": None})  # the registry does not answer
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SUITE_VLLM_PYTHON", raising=False)
    wh = tmp_path / "wh"
    wh.mkdir()
    monkeypatch.setenv("SUITE_WHEELHOUSE", str(wh))
    with pytest.raises(SuiteError, match="cannot check the releases of vllm"):
        catalog.arm_runtime(card, "v")
    (wh / "vllm-0.24.0-cp38-abi3-manylinux1_x86_64.whl").write_bytes(b"")
    assert catalog.arm_runtime(card, "v").pinned_version == "0.24.0"
