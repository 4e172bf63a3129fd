"""Runtimes and cards of the user's own folders: `SUITE_IMAGES` and `SUITE_CARDS` name one or more
folders (separated by `os.pathsep`) whose definitions and cards join the built-in ones; a name
that is already taken is one error line naming both files, never a silent override."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.catalog import arm_runtime, load_catalog
from suite.definitions import load_definitions, version_spec
from suite.errors import SuiteError
from suite.paths import CARDS_DIR, IMAGES_DIR, REPO_ROOT

# In the order the suite lists them: by file, the built-in ones first.
BUILTIN_RUNTIMES = [p.parent.name for p in sorted(IMAGES_DIR.glob("*/runtime.toml"))]
BUILTIN_CARDS = [p.stem for p in sorted(CARDS_DIR.glob("*.toml"))]

# A runtime the machine already has (a server started by Python itself): no Dockerfile, no install step.
RUNTIME = f'''name = "{{name}}"
description = "an OpenAI-compatible server already on this machine"
platforms = ["cpu"]

[server]
ready_path = "/v1/models"
startup_timeout_s = 60

[local]
command = ["{sys.executable}", "-m", "my_server", "--model", "{{{{model_path}}}}", "--port", "{{{{port}}}}"]

[capabilities]
logprobs = "none"
formats = ["gguf"]
'''

CARD = '''name = "{name}"
title = "a model of my own"
served_name = "mine"

[formats.gguf]
kind = "gguf"
source = "path:model.gguf"

[arms.{runtime}]
runtime = "{runtime}"
format = "gguf"
'''


def runtime_folder(root: Path, name: str, text: str | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "runtime.toml").write_text(text or RUNTIME.format(name=name))
    return folder / "runtime.toml"


def card_file(root: Path, name: str, runtime: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    (root / f"{name}.toml").write_text(CARD.format(name=name, runtime=runtime))
    return root / f"{name}.toml"


@pytest.fixture()
def mine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runtime folder and a card folder outside the checkout, named by SUITE_IMAGES and SUITE_CARDS."""
    runtime_folder(tmp_path / "images", "my-runtime")
    card_file(tmp_path / "cards", "my-model", "my-runtime")
    monkeypatch.setenv("SUITE_IMAGES", str(tmp_path / "images"))
    monkeypatch.setenv("SUITE_CARDS", str(tmp_path / "cards"))
    return tmp_path


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "300", **env})


def test_the_users_folders_add_to_the_built_in_ones(mine: Path) -> None:
    definitions = load_definitions()
    assert list(definitions) == [*BUILTIN_RUNTIMES, "my-runtime"]
    ours = definitions["my-runtime"]
    assert ours.folder == mine / "images" / "my-runtime" and ours.docker is None and ours.local is not None
    assert ours.local.install is None and not (ours.folder / "Dockerfile").exists()
    catalog = load_catalog()
    assert list(catalog) == [*BUILTIN_CARDS, "my-model"]
    assert arm_runtime(catalog["my-model"], "my-runtime").name == "my-runtime"
    # A built-in card's arm still finds its runtime.
    assert arm_runtime(catalog["tiny"], next(iter(catalog["tiny"].arms))).folder.parent == IMAGES_DIR


def test_several_folders_separated_by_pathsep(mine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime_folder(mine / "more-images", "other-runtime")
    card_file(mine / "more-cards", "other-model", "other-runtime")
    monkeypatch.setenv("SUITE_IMAGES", os.pathsep.join([str(mine / "images"), "", str(mine / "more-images")]))
    monkeypatch.setenv("SUITE_CARDS", os.pathsep.join([str(mine / "cards"), str(mine / "more-cards")]))
    assert list(load_definitions())[-2:] == ["my-runtime", "other-runtime"]
    assert list(load_catalog())[-2:] == ["my-model", "other-model"]
    # The built-in folder named again adds nothing (and is no duplicate).
    monkeypatch.setenv("SUITE_CARDS", os.pathsep.join([str(CARDS_DIR), str(mine / "cards")]))
    assert list(load_catalog()) == [*BUILTIN_CARDS, "my-model"]


def test_a_variant_of_a_built_in_runtime_reuses_its_version_knob(mine: Path) -> None:
    base = load_definitions()["llamacpp-python"]
    assert base.version is not None
    text = RUNTIME.format(name="my-variant").replace('platforms = ["cpu"]\n',
                                                      'platforms = ["cpu"]\nbase = "llamacpp-python"\n')
    runtime_folder(mine / "images", "my-variant", text)
    variant = load_definitions()["my-variant"]
    assert variant.base == "llamacpp-python" and version_spec(variant) == base.version


def test_the_cli_lists_the_built_in_and_the_users(mine: Path) -> None:
    env = {"SUITE_IMAGES": str(mine / "images"), "SUITE_CARDS": str(mine / "cards")}
    r = run_cli(["runtimes"], env)
    assert r.returncode == 0, r.stderr
    for name in [*BUILTIN_RUNTIMES, "my-runtime"]:
        assert f" {name} " in r.stdout, name
    r = run_cli(["models"], env)
    assert r.returncode == 0, r.stderr
    for name in [*BUILTIN_CARDS, "my-model"]:
        assert f" {name} " in r.stdout, name
    assert "my-runtime (my-runtime: gguf)" in r.stdout


def test_a_runtime_named_like_a_built_in_one_is_one_error_line(mine: Path) -> None:
    path = runtime_folder(mine / "images", "llamacpp", RUNTIME.format(name="llamacpp"))
    with pytest.raises(SuiteError) as exc:
        load_definitions()
    assert str(exc.value) == (f"{path}: runtime 'llamacpp' is already defined by {IMAGES_DIR / 'llamacpp' / 'runtime.toml'}; "
                              "rename the folder (a definition adds a runtime, it does not replace one)")
    r = run_cli(["runtimes"], {"SUITE_IMAGES": str(mine / "images")})
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line == f"error: {exc.value}"


def test_a_card_named_like_a_built_in_one_is_one_error_line(mine: Path) -> None:
    path = card_file(mine / "cards", "tiny", "my-runtime")
    with pytest.raises(SuiteError) as exc:
        load_catalog()
    assert str(exc.value) == (f"{path}: model card 'tiny' is already defined by {CARDS_DIR / 'tiny.toml'}; "
                              "rename the file (a card adds a model, it does not replace one)")
    r = run_cli(["models"], {"SUITE_CARDS": str(mine / "cards")})
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line == f"error: {exc.value}"


def test_a_folder_that_does_not_exist_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUITE_IMAGES", str(tmp_path / "nowhere"))
    with pytest.raises(SuiteError) as exc:
        load_definitions()
    assert str(exc.value) == f"SUITE_IMAGES: {str(tmp_path / 'nowhere')!r} is not a folder"


def test_a_control_named_with_the_combination_sign_is_one_error_line(mine: Path) -> None:
    """`a+b` names a row of two controls together: a control of its own cannot hold `+`."""
    text = RUNTIME.format(name="plus-runtime") + '\n[controls."cache-off+eager"]\ndescription = "two at once"\n'
    path = runtime_folder(mine / "images", "plus-runtime", text)
    with pytest.raises(SuiteError) as exc:
        load_definitions()
    assert str(path) in str(exc.value) and "controls.cache-off+eager" in str(exc.value)
    assert "'+' joins controls into a combination row" in str(exc.value)
    r = run_cli(["runtimes"], {"SUITE_IMAGES": str(mine / "images")})
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line == f"error: {exc.value}"
