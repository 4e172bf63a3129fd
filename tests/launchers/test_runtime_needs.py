"""A runtime definition holds only what the runtime uses: a local runtime with nothing to install
names no install recipe, one that never runs in Docker has no `[docker]` section and no Dockerfile.
What a launcher needs and does not find is one line naming the file and the key."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from suite.definitions import load_definitions
from suite.errors import SuiteError
from suite.launchers import launcher_for
from suite.launchers.local import LocalLauncher, is_installed

PLAIN = f'''name = "plain"
description = "a server the machine already has"
platforms = ["cpu"]

[local]
command = ["{sys.executable}", "-m", "http.server", "{{port}}", "--bind", "{{host}}"]

[capabilities]
formats = ["gguf"]
'''


def write(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "runtime.toml").write_text(text)
    return folder / "runtime.toml"


def test_a_local_runtime_without_install_or_dockerfile_loads_and_is_ready(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    write(tmp_path / "images", "plain", PLAIN)
    definition = load_definitions(tmp_path / "images")["plain"]
    assert definition.local is not None and definition.local.install is None and definition.docker is None
    assert is_installed(definition)
    LocalLauncher().prepare(definition)  # nothing to install: nothing happens
    assert not (tmp_path / "cache").exists()
    assert launcher_for(definition, "auto").name == "local"
    refused = launcher_for(definition, "docker")
    assert refused.name == "none" and "has neither" in getattr(refused, "reason", ""), refused


def test_prefix_without_an_install_recipe_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path / "images", "plain", PLAIN.replace('"-m", "http.server"', '"{prefix}/serve.py"'))
    with pytest.raises(SuiteError) as exc:
        load_definitions(tmp_path / "images")
    assert str(exc.value) == (f"{path}: local.command[1]: '{{prefix}}/serve.py': {{prefix}} is the install "
                              "folder, and local.install names no recipe that fills it")


def test_a_python_runtime_without_a_recipe_needs_an_existing_interpreter(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLAIN_PYTHON", raising=False)
    monkeypatch.delenv("SUITE_WHEELHOUSE", raising=False)
    path = write(tmp_path / "images", "plain", PLAIN.replace(f'"{sys.executable}"', '"{python}"')
                 .replace("[local]\n", '[local]\npython_env = "PLAIN"\n'))
    definition = load_definitions(tmp_path / "images")["plain"]
    assert not is_installed(definition)
    with pytest.raises(SuiteError) as exc:
        LocalLauncher().prepare(definition)
    assert str(exc.value) == (f"{path}: local.install: none, so no recipe builds the runtime's own venv for "
                              "{python}; set PLAIN_PYTHON to an existing interpreter or name an install recipe")


def test_a_docker_section_without_its_dockerfile_is_one_line_when_an_image_is_needed(tmp_path: Path) -> None:
    from suite.launchers.docker import image_tag

    path = write(tmp_path / "images", "boxed", PLAIN.replace("plain", "boxed") + '\n[docker]\ncommand = ["--port", "8000"]\n')
    definition = load_definitions(tmp_path / "images")["boxed"]  # loads: only building the image needs the file
    with pytest.raises(SuiteError) as exc:
        image_tag(definition)
    assert str(exc.value) == f"{path}: docker.dockerfile: no file 'Dockerfile'"
