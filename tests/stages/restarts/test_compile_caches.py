"""Kept compile caches are kept, and said truthfully: the env each launch gets (the caches the
runtime's definition declares), the Docker mounts that carry it into a container, and the page's
sentence counted from what each launch found.

The Docker end to end (a container's cache file found by the next container) is in test_docker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.definitions import CompileCacheSpec, get_definition, load_definition
from suite.errors import SuiteError
from suite.launchers.docker import CACHE_MOUNT, cache_mounts
from suite.stages.restarts import LaunchOutcome, RestartsResult, cache_counts, cache_env, cache_not_loaded

VLLM = get_definition("vllm").compile_cache


def test_every_compile_cache_points_under_the_root_and_autotuning_is_kept(tmp_path: Path):
    env = cache_env(tmp_path / "kept", VLLM)
    assert env["TRITON_CACHE_AUTOTUNING"] == "1"
    for var, sub in (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                     ("VLLM_CACHE_ROOT", "vllm"), ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
                     ("CUDA_CACHE_PATH", "cuda-compute")):
        assert env[var] == str(tmp_path / "kept" / sub)
    (tmp_path / "kept" / "triton" / "abc").mkdir(parents=True)
    (tmp_path / "kept" / "triton" / "abc" / "k.cubin").write_bytes(b"x")
    assert cache_counts(tmp_path / "kept", VLLM) == {"triton": 1, "inductor": 0, "vllm": 0, "flashinfer": 0,
                                               "cuda-compute": 0}


def test_the_docker_launcher_mounts_the_cache_root_and_rewrites_the_env(tmp_path: Path):
    env = cache_env(tmp_path / "kept", VLLM) | {"OTHER": "/x", "HF_HOME": "relative"}
    volumes, inner = cache_mounts(env, VLLM)
    # before: no mount at all, the container's TRITON_CACHE_DIR a host path that did not exist in it
    assert volumes == {str((tmp_path / "kept").resolve()): {"bind": CACHE_MOUNT, "mode": "rw"}}
    assert inner["TRITON_CACHE_DIR"] == f"{CACHE_MOUNT}/triton"
    assert inner["CUDA_CACHE_PATH"] == f"{CACHE_MOUNT}/cuda-compute"
    assert inner["TRITON_CACHE_AUTOTUNING"] == "1" and inner["OTHER"] == "/x" and inner["HF_HOME"] == "relative"
    assert (tmp_path / "kept" / "flashinfer").is_dir()  # made on the host, so the mount is the user's folder
    assert cache_mounts({"PATH": "/usr/bin"}, VLLM) == ({}, {"PATH": "/usr/bin"})
    # a runtime that declares no caches: its env is left as it is, even a variable vLLM would move
    assert cache_mounts(env, CompileCacheSpec()) == ({}, env)


def test_the_vllm_runtimes_declare_the_same_caches_and_the_others_none(tmp_path: Path):
    """vLLM on the GPU, its HUMMING variant and its CPU build count the same five folders (the
    restarts records compare); llama.cpp's runtimes and LM Studio compile nothing they keep."""
    for name in ("vllm-cpu", "vllm-humming"):
        assert get_definition(name).compile_cache == VLLM
    assert VLLM.settings == {"TRITON_CACHE_AUTOTUNING": "1"}
    for name in ("llamacpp", "llamacpp-cuda", "llamacpp-python", "lmstudio"):
        caches = get_definition(name).compile_cache
        assert caches == CompileCacheSpec()
        assert cache_env(tmp_path, caches) == {} and cache_counts(tmp_path, caches) == {}


@pytest.mark.parametrize("table, key", [
    ('dirs = [{ env = "A", folder = "a", recorded_as = "a" }]', "compile_cache.dirs.0"),
    ('dirs = [{ env = "A", folder = "a", recorded_as = "a", default = "{home}/a" }]', "compile_cache.dirs.0.default"),
    ('dirs = [{ env = "A B", folder = "a" }]', "compile_cache.dirs.0.env"),
    ('dirs = [{ env = "A", folder = "../a" }]', "compile_cache.dirs.0.folder"),
    ('dirs = [{ env = "A", folder = "a" }, { env = "B", folder = "a" }]', "compile_cache"),
    ('settings = { "A B" = "1" }', "compile_cache.settings"),
    ("not_loaded_patterns = ['again (']", "compile_cache.not_loaded_patterns"),
])
def test_a_bad_compile_cache_declaration_is_one_line_naming_the_key(tmp_path: Path, table: str, key: str):
    path = tmp_path / "mine" / "runtime.toml"
    path.parent.mkdir()
    path.write_text(f'name = "mine"\ndescription = "x"\n[compile_cache]\n{table}\n')
    with pytest.raises(SuiteError) as err:
        load_definition(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and key in message and "\n" not in message


def _result(mode: str, counts: list[int | None]) -> RestartsResult:
    return RestartsResult(launches=len(counts), launched=len(counts), requests_per_launch=3, prompts=[],
                          stable_within=True, consistent_across=True, verdict="", cache_mode=mode,
                          launch_outcomes=[LaunchOutcome(index=i, status="ok", cache_files_before=c)
                                           for i, c in enumerate(counts)])


def test_the_page_says_what_the_launches_found():
    assert _result("kept", [0, 143, 150]).caches_text == (
        "launches after the first found the first's compile caches (143, 150 files at their start)")
    # the runtime wrote nothing (llama.cpp compiles no kernels, or the folder never reached the
    # container): before, the page still said "launches after the first kept its compile caches"
    empty = _result("kept", [0, 0, 0]).caches_text
    assert "found 0, 0 files at their start" in empty and "nothing was kept" in empty
    assert _result("fresh", [0, 0]).caches_text == "every launch started with empty compile caches"
    assert _result("fresh", [None]).caches_text == "compile caches not recorded"


EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"


def test_a_kept_cache_the_runtime_could_not_load_is_said_from_its_own_log():
    """vLLM 0.32.0's CPU build (the CPU example tree's kept-caches restarts, 2026-12-02) found the
    first launch's compiled graph at each later start, failed to load it and compiled again: its
    log says so, and so does the page, where before it said only that the caches were found. vLLM
    0.24.0 on the H200 loaded its cache ("Directly load AOT compilation"): nothing to say there."""
    patterns = get_definition("vllm-cpu").compile_cache.not_loaded_patterns
    (run,) = (EXAMPLES / "cpu-results" / "tiny" / "vllm-cpu").iterdir()
    said = [cache_not_loaded(log, patterns) for log in sorted((run / "logs").glob("runtime-default-*.log"))]
    assert said[0] is None and all(s is not None for s in said[1:]) and len(said) == 3
    assert said[1].startswith("Compiling model again due to a load failure from ")
    assert said[1].endswith("reason: 'function' object has no attribute 'finalize_loading'")
    (gpu,) = [d for d in (EXAMPLES / "gpu-vllm-results" / "random-qwen3" / "vllm-gpu").iterdir()
              if d.name.startswith("20261202T0346")]  # the H200's kept-caches restarts
    assert [cache_not_loaded(log, VLLM.not_loaded_patterns) for log in sorted((gpu / "logs").glob("runtime-default-*.log"))] \
        == [None, None, None]
    assert cache_not_loaded(None, patterns) is None and cache_not_loaded(run / "logs" / "runtime.log", []) is None
    kept = _result("kept", [0, 93, 93])
    for o, s in zip(kept.launch_outcomes, said):
        o.cache_not_loaded = s
    text = kept.caches_text
    assert text.startswith("launches after the first found the first's compile caches (93, 93 files at their start), "
                           "but the runtime did not load them in 2 of 2 and compiled again (its log: ")
    assert text.endswith("kept caches saved no compiling there")
