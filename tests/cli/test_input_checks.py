"""Inputs are checked before anything starts, each bad one as one line.

- `--results` is checked the same way by every command that writes results (`bench`, `gate`,
  `study sessions`) and by `doctor`, which also reports the folder's state: a file there, or a
  folder this user cannot write to, is one line and exit 2;
- every `--results` (and every run `compare` is given) that is empty, holds a NUL or is too long
  for the file system is one line naming the option, the value cut short, exit 2: never an
  OSError's traceback, never the current folder;
- a name given on the command line (`--model`, `--arms`, `--runtime`, `up`'s ARM) that is empty,
  over 128 characters, or holds a path separator, ".." or a control character is one line;
- a cache path, a control name or a description with rich markup (`[/INST]`) is shown as typed
  by `doctor` and `runtimes`.

The commands run as the user runs them (`python -m suite.cli`), on a temporary catalog of one
stand-in runtime (`tests/standin_runtime.py`) and a temporary cache; no check here lets a runtime
start, and none needs a GPU, the network or Docker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.errors import SuiteError
from tests.launchers.test_crash_naming import standin_card, standin_images, suite_env

ROOT = Path(__file__).resolve().parents[2]
LONG = "a" * 300  # a file name past the file system's 255 bytes, a name past 128 characters


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("inputs")
    images = standin_images(tmp / "images", {"standin": ["--mode", "same"]})
    cards = standin_card(tmp / "cards", "standins", ["standin"])
    env = {**suite_env(tmp, images, cards), "RESULTS": str(tmp / "results"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    (tmp / "a-file").write_text("not a folder\n")
    (tmp / "there").mkdir()
    return {"tmp": tmp, "env": env}


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    """The one line a bad input gives: exit 2, `error: ...` alone on stderr, nothing on stdout."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("error: ") and "Traceback" not in r.stderr
    assert r.stdout == ""
    return lines[0]


def _unwritable(tmp: Path) -> Path:
    """A folder this user cannot write to: procfs's for root (who writes anywhere else)."""
    if os.geteuid() == 0:
        return Path("/proc/1")
    d = tmp / "read-only"
    d.mkdir(exist_ok=True)
    d.chmod(0o555)
    return d


# -- 1. --results: the same check wherever results are written, and doctor's report -----------


@pytest.mark.parametrize("command", [["doctor"], ["bench", "--profile", "quick"], ["gate"],
                                     ["study", "sessions"]])
def test_a_file_as_results_is_one_line(world: dict, command: list[str]) -> None:
    file = world["tmp"] / "a-file"
    line = one_error_line(run([*command, "--results", str(file)], world["env"], world["tmp"]))
    assert line == f"error: --results {file}: not a folder (a file is there)"


@pytest.mark.parametrize("command", [["doctor"], ["bench", "--profile", "quick"], ["gate"]])
def test_an_unwritable_results_folder_is_one_line(world: dict, command: list[str]) -> None:
    folder = _unwritable(world["tmp"])
    line = one_error_line(run([*command, "--results", str(folder / "results")], world["env"], world["tmp"]))
    assert line == f"error: --results {folder / 'results'}: {folder} is not writable"
    assert not (world["tmp"] / "results").exists()


def test_doctor_reports_the_results_folder(world: dict) -> None:
    tmp, env = world["tmp"], world["env"]
    r = run(["doctor", "--json", "--results", str(tmp / "there")], env, tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    state = {row["check"]: row["state"] for row in json.loads(r.stdout)}["results"]
    assert state.startswith(f"{tmp / 'there'} (there, writable; ") and state.endswith(" GiB free)")
    # not there yet: where a bench would make it
    r = run(["doctor", "--json", "--results", str(tmp / "there" / "new")], env, tmp)
    state = {row["check"]: row["state"] for row in json.loads(r.stdout)}["results"]
    assert state.startswith(f"{tmp / 'there' / 'new'} (not there yet: a bench makes it in {tmp / 'there'}, writable; ")
    assert not (tmp / "there" / "new").exists()
    # the default ($RESULTS) that is no folder: said in its row, doctor goes on
    r = run(["doctor", "--json"], {**env, "RESULTS": str(tmp / "a-file")}, tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    state = {row["check"]: row["state"] for row in json.loads(r.stdout)}["results"]
    assert state == f"not usable: {tmp / 'a-file'}: not a folder (a file is there)"


# -- 2. values too long, empty, or not a name ---------------------------------------------------


@pytest.mark.parametrize("command", [["doctor"], ["bench"], ["gate"], ["study", "sessions"], ["results"], ["site"],
                                     ["export"], ["compare", "x", "y"]])
def test_results_too_long_or_empty_is_one_line(world: dict, command: list[str]) -> None:
    tmp, env = world["tmp"], world["env"]
    line = one_error_line(run([*command, "--results", f"{tmp}/{LONG}"], env, tmp))
    assert line.startswith(f"error: --results '{tmp}/aaa") and f"({len(str(tmp)) + 301} characters)" in line
    assert line.endswith("a part of 300 bytes; a file name has at most 255")
    assert LONG not in line  # the value is cut short
    # empty: never the current folder
    assert one_error_line(run([*command, "--results", ""], env, tmp)) == "error: --results '': empty; give a folder"
    assert not (tmp / "results").exists()


@pytest.mark.parametrize(("args", "expected"), [
    (["bench", "--model", LONG], "--model 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... (300 characters): "
                                 "too long; a name has at most 128 characters"),
    (["bench", "--model", ""], "--model '': empty; give a name"),
    (["bench", "--model", "../standins"], "--model '../standins': holds a path separator; a name is one folder's"),
    (["bench", "--model", "a\\b"], "--model 'a\\\\b': holds a path separator; a name is one folder's"),
    (["bench", "--model", ".."], "--model '..': holds '..' or is '.'; a name is one folder's"),
    (["bench", "--model", "a\tb"], "--model 'a\\tb': holds a control character"),
    (["bench", "--model", "standins", "--arms", ""], "--arms '': names nothing; give one or more names, comma-separated"),
    (["bench", "--model", "standins", "--arms", " , "], "--arms ' , ': names nothing; give one or more names, "
                                                         "comma-separated"),
    (["bench", "--model", "standins", "--arms", f"standin,{LONG}"], "--arms 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'"
                                                                     "... (300 characters): too long; a name has at most "
                                                                     "128 characters"),
    (["bench", "--url", "http://127.0.0.1:9/v1", "--model", ""], "--model '': empty; give a name"),
    (["gate", "--model", "standins", "--arms", "x/.."], "--arms 'x/..': holds a path separator; a name is one folder's"),
    (["study", "sessions", "--model", ""], "--model '': empty; give a name"),
    (["setup", "--model", "standins", "--runtime", ""], "--runtime '': names nothing; give one or more names, "
                                                          "comma-separated"),
    (["up", "../standin", "--model", "standins"], "ARM '../standin': holds a path separator; a name is one folder's"),
    (["compare", LONG, "x"], "RUN_A 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... (300 characters): a part of 300 bytes; "
                             "a file name has at most 255"),
    (["compare", "x", ""], "RUN_B '': empty; give a run id, a unique prefix of one, the 8-character id printed for a "
                           "run, or a run folder"),
])
def test_a_bad_name_is_one_line_before_anything_starts(world: dict, args: list[str], expected: str) -> None:
    tmp = world["tmp"]
    (tmp / "run.json").write_text("{}")  # an empty run must not name the current folder
    try:
        line = one_error_line(run(args, world["env"], tmp))
    finally:
        (tmp / "run.json").unlink()
    assert line == f"error: {expected}"
    assert not (tmp / "results").exists() and not (tmp / "cache" / "runtimes" / "standin").exists()


def test_a_nul_is_refused_by_the_checks() -> None:
    """A NUL never reaches a command line (the kernel ends an argument there); the checks refuse it
    all the same, as a caller of the app in-process could give one."""
    from suite.cli import _check_name, _check_run_ref, _results_path
    from suite.paths import path_problem
    from suite.records import name_problem

    assert name_problem("a\0b") == "holds a control character"
    assert path_problem("a\0b") == "holds a NUL character"
    for check, expected in ((lambda: _check_name("--model", "a\0b"), "--model 'a\\x00b': holds a control character"),
                            (lambda: _results_path("r\0"), "--results 'r\\x00': holds a NUL character"),
                            (lambda: _check_run_ref("RUN_A", "\0"), "RUN_A '\\x00': holds a NUL character")):
        with pytest.raises(SuiteError) as exc:
            check()
        assert str(exc.value) == expected
    assert name_problem("tiny") is None and name_problem("llamacpp-0.3.30") is None
    assert path_problem("results/../results") is None and path_problem("/" + "b" * 255) is None
    assert path_problem("/".join(["c" * 200] * 21)).startswith("4220 bytes; a path has at most 4095")


# -- 3. rich markup in a cache path, a control name, a description ------------------------------


MARKUP_RUNTIME = """name = "markup"
description = "a [bold]stand-in[/bold] [/INST]"
platforms = ["cpu"]
determinism_control = "[/INST]"

[server]
ready_path = "/health"
startup_timeout_s = 30

[local]
install = "install.sh"
command = ["true", "--port", "{port}"]

[capabilities]
logprobs = "none"
token_ids = false
formats = ["gguf"]

[controls."[/INST]"]
description = "markup [/INST]"
args = ["--x"]

[controls."[red]x[/red]"]
description = "[/]"
args = ["--y"]
"""


def test_markup_in_a_cache_path_or_control_name_is_shown_as_typed(world: dict, tmp_path: Path) -> None:
    images = tmp_path / "images"
    (images / "markup").mkdir(parents=True)
    (images / "markup" / "install.sh").write_text('#!/bin/bash\nmkdir -p "$1"\n')
    (images / "markup" / "runtime.toml").write_text(MARKUP_RUNTIME)
    cache = tmp_path / "cache [/INST] [bold]"
    env = {**world["env"], "SUITE_IMAGES": str(images), "SUITE_CACHE": str(cache),
           "RESULTS": str(tmp_path / "results [/INST]")}
    r = run(["runtimes"], env, tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    row = next(line for line in r.stdout.splitlines() if "markup" in line)
    assert "[/INST]" in row and "[red]x[/red]" in row
    r = run(["doctor"], env, tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "[/INST] [bold]" in r.stdout and "results [/INST] (not there yet" in r.stdout
    r = run(["doctor", "--json"], env, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {row["check"]: row["state"] for row in json.loads(r.stdout)}
    assert rows["cache"].startswith(f"{cache} (") and rows["results"].startswith(f"{tmp_path / 'results [/INST]'} (")
    assert not (tmp_path / "results [/INST]").exists()
