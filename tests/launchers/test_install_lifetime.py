"""Nothing an install recipe started outlives the suite: `suite setup` killed (-9, SIGTERM, SIGHUP)
while its recipe compiles and smoke-tests leaves no process of the recipe behind.

Real processes throughout: the real CLI runs a recipe (in a runtime folder made here) that starts
a long "compile" in its group and the real llama.cpp smoke test (images/llamacpp/smoke.py) with a
stand-in server command; the suite is then killed and every process the recipe started must end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.launchers.test_crash_naming import ROOT, standin_card, standin_images, suite_env

SMOKE = ROOT / "images" / "llamacpp" / "smoke.py"

# A compile in the recipe's group, the smoke test with its server (a `sleep` standing in for a
# llama-server that never gets ready), and optionally a worker that starts its own session.
RECIPE = """#!/bin/bash
bash -c 'sleep 4321 & wait' &
"{python}" "{smoke}" /no/model "$1.smoke.log" -- sleep 4322 &
{extra}
wait
"""


def recipe_images(tmp: Path, extra: str = "") -> Path:
    images = standin_images(tmp / "images", {"slowinstall": []})
    (images / "slowinstall" / "install.sh").write_text(
        RECIPE.format(python=sys.executable, smoke=SMOKE, extra=extra))
    return images


def recipe_processes(root: int, wanted: set[str], timeout_s: float = 30.0) -> list[psutil.Process]:
    """The descendants of `root` (`root` started them: no one else's) once a process of each
    command in `wanted` runs among them (joined argv), with those that left its tree by then."""
    deadline = time.monotonic() + timeout_s
    seen: dict[int, tuple[str, psutil.Process]] = {}
    while time.monotonic() < deadline:
        try:
            tree = psutil.Process(root).children(recursive=True)
        except psutil.Error:
            tree = []
        for p in tree:
            try:
                seen.setdefault(p.pid, (" ".join(p.cmdline()), p))
            except psutil.Error:
                continue
        found = [(line, p) for line, p in seen.values() if p.is_running()]
        if {w for w in wanted if any(w in line for line, _ in found)} == wanted:
            return [p for _, p in found]
        time.sleep(0.1)
    raise AssertionError(f"the recipe never started all of {sorted(wanted)}")


def guards_in_place(root: int, timeout_s: float = 10.0) -> None:
    """Wait until every guard among `root`'s children has its SIGTERM handler in place (it starts
    beside the recipe; a kill within its first milliseconds is left to the lease). Returns after
    `timeout_s` anyway (a suite without guards)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pending, guards = 0, 0
        try:
            children = psutil.Process(root).children()
        except psutil.Error:
            return
        for child in children:
            try:
                if "PR_SET_PDEATHSIG" not in " ".join(child.cmdline()):
                    continue
                status = Path(f"/proc/{child.pid}/status").read_text()
            except (psutil.Error, OSError):
                continue
            guards += 1
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            term = 1 << (signal.SIGTERM - 1)
            if not int(fields.get("SigCgt", "0"), 16) & term or int(fields.get("SigBlk", "0"), 16) & term:
                pending += 1
        if guards and not pending:
            return
        time.sleep(0.05)


def left_behind(procs: list[psutil.Process], timeout_s: float = 5.0) -> list[str]:
    """Those of `procs` still running (not zombies) after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(" ".join(p.cmdline()))
            except psutil.Error:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def kill_suite_during_install(tmp: Path, sig: int, extra: str = "",
                              wanted: frozenset[str] = frozenset({"sleep 4321", "sleep 4322", "smoke.py"})
                              ) -> list[str]:
    """`suite setup` of a runtime whose recipe compiles and smoke-tests, sent `sig` mid-recipe:
    the commands of the recipe's processes still running 5 s later."""
    images = recipe_images(tmp, extra)
    cards = standin_card(tmp / "cards", "slowcard", ["slowinstall"])
    env = suite_env(tmp, images, cards)
    out = (tmp / "suite.out").open("wb")
    suite = subprocess.Popen([sys.executable, "-m", "suite.cli", "setup", "--model", "slowcard", "--launcher",
                              "local"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    procs: list[psutil.Process] = []
    try:
        procs = recipe_processes(suite.pid, set(wanted))
        guards_in_place(suite.pid)
        suite.send_signal(sig)
        suite.wait(timeout=30)
        return left_behind(procs)
    finally:
        if suite.poll() is None:
            suite.kill()
            suite.wait()
        for p in procs:  # only the processes this test's suite started, each while it is still that one
            if p.is_running():
                try:
                    p.kill()
                except psutil.Error:
                    pass


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP], ids=["SIGKILL", "SIGTERM", "SIGHUP"])
def test_no_process_of_an_install_recipe_outlives_the_suite(tmp_path: Path, sig: int) -> None:
    left = kill_suite_during_install(tmp_path, sig)
    assert left == [], f"left running after {signal.Signals(sig).name} of `suite setup`: {left}"
    leases = list((tmp_path / "cache" / "leases").glob("*.json"))
    if sig != signal.SIGKILL:
        assert leases == [], "a stopped install leaves no lease"


def test_the_smoke_tests_server_dies_with_the_smoke_test(tmp_path: Path) -> None:
    """smoke.py killed alone (-9): the server it started gets the parent-death signal."""
    smoke = subprocess.Popen([sys.executable, str(SMOKE), "/no/model", str(tmp_path / "smoke.log"), "--",
                              "sleep", "4324"], stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        (server,) = recipe_processes(smoke.pid, {"sleep 4324"}, timeout_s=10)
        smoke.kill()
        smoke.wait()
        assert left_behind([server]) == [], "the smoke test's server outlived it"
    finally:
        try:
            os.killpg(smoke.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


TOOLS_INSTALLER = """
import sys
from pathlib import Path
from suite import catalog
from suite.lifetime import REGISTRY
REGISTRY.install_signal_handlers()  # as the CLI does
catalog.RECIPES = Path(sys.argv[1])  # a tools recipe that compiles for a long time
catalog.ensure_tools()
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_no_process_of_the_tools_install_outlives_the_suite(tmp_path: Path, sig: int) -> None:
    """The model-preparation tools' recipe is an install recipe too: the same guarantees."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "tools-install.sh").write_text("#!/bin/bash\nbash -c 'sleep 4323 & wait' &\nwait\n")
    env = {k: v for k, v in os.environ.items() if k != "SUITE_TOOLS_PYTHON"}
    suite = subprocess.Popen([sys.executable, "-c", TOOLS_INSTALLER, str(recipes)], cwd=ROOT, start_new_session=True,
                             env={**env, "PYTHONPATH": str(ROOT), "SUITE_CACHE": str(tmp_path / "cache")},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    procs: list[psutil.Process] = []
    try:
        procs = recipe_processes(suite.pid, {"sleep 4323"})
        guards_in_place(suite.pid)
        suite.send_signal(sig)
        suite.wait(timeout=30)
        left = left_behind(procs)
        assert left == [], f"left running after {signal.Signals(sig).name}: {left}"
    finally:
        if suite.poll() is None:
            suite.kill()
            suite.wait()
        for p in procs:
            if p.is_running():
                try:
                    p.kill()
                except psutil.Error:
                    pass
