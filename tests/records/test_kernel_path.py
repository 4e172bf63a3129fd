"""The kernel path in the signature: the linear, MoE and attention kernels vLLM says it chose, read
from its log by the `[kernels]` lines of images/vllm*/runtime.toml.

The bf16 and HUMMING logs are real: vLLM 0.24.0 on the project's H200 (docs/examples). The
quantised lines are vLLM's own log formats (kernels/linear/__init__.py, the compressed-tensors
WNA16 scheme, the MoE backend oracles, marlin_utils_fp4.py, fused_humming_moe.py) with the values
vLLM puts in them; the Blackwell excerpt is a real RTX-class log of NVFP4 on native FP4 kernels.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from suite.definitions import KernelLine, get_definition
from suite.probes import Hardware, kernel_path
from suite.signature import Signature, flatten_signature, kernel_phrase

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "gpu-vllm-results" / "random-llama-1b"
PREFIX = "(EngineCore pid=4242) INFO 12-03 17:00:00 "

# vLLM's format strings with the values it logs on a Hopper GPU (no FP4 tensor cores)
HOPPER_NVFP4 = [
    PREFIX + "[marlin_utils_fp4.py:137] Your GPU does not have native support for FP4 computation but FP4 "
    "quantization is being used. Weight-only FP4 compression will be used leveraging the Marlin kernel. "
    "This may degrade performance for compute-heavy workloads.",
    PREFIX + "[__init__.py:683] Using MarlinNvFp4LinearKernel for NVFP4 GEMM",
    PREFIX + "[nvfp4.py:209] Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['FLASHINFER_TRTLLM', "
    "'FLASHINFER_CUTEDSL', 'FLASHINFER_CUTEDSL_BATCHED', 'FLASHINFER_CUTLASS', 'VLLM_CUTLASS', 'MARLIN', 'EMULATION'].",
    PREFIX + "[cuda.py:368] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', "
    "'TRITON_ATTN', 'FLEX_ATTENTION'].",
    PREFIX + "[fa_utils.py:94] Using FlashAttention version 3",
]
# a real log of NVFP4 on a Blackwell GPU with native FP4 (FlashInfer's CUTLASS kernels)
BLACKWELL_NVFP4 = [
    "(EngineCore pid=207) INFO 04-19 10:19:23 [__init__.py:683] Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM",
    "(EngineCore pid=207) INFO 04-19 10:19:24 [nvfp4.py:203] Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of "
    "potential backends: ['FLASHINFER_TRTLLM', 'FLASHINFER_CUTEDSL', 'FLASHINFER_CUTEDSL_BATCHED', "
    "'FLASHINFER_CUTLASS', 'VLLM_CUTLASS', 'MARLIN'].",
    "(EngineCore pid=207) INFO 04-19 10:19:24 [cuda.py:368] Using FLASHINFER attention backend out of potential "
    "backends: ['FLASHINFER', 'TRITON_ATTN'].",
]
W4A16 = [
    PREFIX + "[compressed_tensors_wNa16.py:116] Using MarlinLinearKernel for CompressedTensorsWNA16",
    PREFIX + "[wna16.py:141] Using 'MARLIN' WNA16 MoE backend.",
    PREFIX + "[cuda.py:368] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN'].",
]
HUMMING_MOE = PREFIX + "[fused_humming_moe.py:52] Using grouped_contiguous gemm for humming moe"


def _log(tmp_path: Path, lines: list[str], name: str = "runtime.log") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def _real(arm: str) -> Path:
    found = sorted((EXAMPLES / arm).glob("*/logs/runtime-default-*.log")) or sorted((EXAMPLES / arm).glob("*/logs/runtime.log"))
    assert found, f"no example log of {arm}"
    return found[0]


@pytest.mark.parametrize("runtime", ["vllm", "vllm-humming"])
def test_the_real_h200_bf16_log_gives_unquantized_linear_and_flash_attention_3(runtime: str) -> None:
    spec = get_definition(runtime).kernels
    path = kernel_path(_real("vllm-gpu"), spec)
    assert path == {"linear": "unquantized (bf16)", "attention": "FLASH_ATTN + FlashAttention 3"}


def test_the_real_h200_humming_log_names_the_quantisation_method() -> None:
    path = kernel_path(_real("vllm-gpu-humming-w4a16"), get_definition("vllm").kernels)
    assert path is not None and path["linear"] == "HUMMING (--quantization humming)"
    assert "moe" not in path  # a dense Llama: no MoE line, no MoE part


def test_nvfp4_on_hopper_and_on_blackwell_are_two_kernel_paths(tmp_path: Path) -> None:
    spec = get_definition("vllm").kernels
    hopper = kernel_path(_log(tmp_path, HOPPER_NVFP4, "h200.log"), spec)
    blackwell = kernel_path(_log(tmp_path, BLACKWELL_NVFP4, "5090.log"), spec)
    assert hopper == {"linear": "Marlin FP4 weight-only (no native FP4) + MarlinNvFp4LinearKernel",
                      "moe": "MARLIN (NvFp4)", "attention": "FLASH_ATTN + FlashAttention 3"}
    assert blackwell == {"linear": "FlashInferCutlassNvFp4LinearKernel", "moe": "FLASHINFER_CUTLASS (NvFp4)",
                         "attention": "FLASHINFER"}
    base = dict(model="random-lightning", model_format="nvfp4", model_sha256="a" * 64, model_revision=None,
                runtime="vllm", runtime_version="0.24.0", launcher="local", command=["vllm"], env={}, controls=[],
                prompt_set_hash="p" * 64, hardware=Hardware(cpu="x", cores=16, memory_gb=128.0, os="Linux"))
    a = Signature(**base, kernel_path=hopper).with_digest()  # type: ignore[arg-type]
    b = Signature(**base, kernel_path=blackwell).with_digest()  # type: ignore[arg-type]
    none = Signature(**base).with_digest()  # type: ignore[arg-type]
    assert len({a.digest, b.digest, none.digest}) == 3
    assert flatten_signature(a)["kernel_path.moe"] == "MARLIN (NvFp4)"
    assert not any(k.startswith("kernel_path") for k in flatten_signature(none))
    assert kernel_phrase(blackwell) == ("kernels: FlashInferCutlassNvFp4LinearKernel (linear), "
                                        "FLASHINFER_CUTLASS (NvFp4) (MoE), FLASHINFER (attention)")
    assert kernel_phrase(None) is None


def test_w4a16_and_humming_moe_layouts(tmp_path: Path) -> None:
    spec = get_definition("vllm").kernels
    assert kernel_path(_log(tmp_path, W4A16), spec) == {
        "linear": "MarlinLinearKernel", "moe": "MARLIN (WNA16)", "attention": "FLASH_ATTN"}
    grouped = kernel_path(_log(tmp_path, [*W4A16, HUMMING_MOE]), spec)
    assert grouped is not None and grouped["moe"] == "MARLIN (WNA16) + HUMMING grouped_contiguous GEMM"


def test_a_log_without_kernel_lines_or_a_runtime_without_a_table_records_none(tmp_path: Path) -> None:
    assert kernel_path(_log(tmp_path, ["INFO nothing to see"]), get_definition("vllm").kernels) is None
    assert kernel_path(tmp_path / "missing.log", get_definition("vllm").kernels) is None
    assert kernel_path(_log(tmp_path, HOPPER_NVFP4), get_definition("llamacpp").kernels) is None


def test_a_value_is_cut_and_a_template_must_name_groups_the_pattern_has(tmp_path: Path) -> None:
    long = PREFIX + "Using " + "X" * 400 + " for NVFP4 GEMM"
    path = kernel_path(_log(tmp_path, [long]), get_definition("vllm").kernels)
    assert path is not None and len(path["linear"]) == 160
    with pytest.raises(ValidationError, match="names group 2"):
        KernelLine(pattern=r"Using (\w+)", value=r"\1 \2")


def test_the_model_page_marks_arms_whose_kernels_differ(tmp_path: Path) -> None:
    """Two arms of the golden records given other kernel paths (one with markup in a log value):
    each arm's card says its kernels, escaped; arms that agree say nothing."""
    import json
    import shutil

    from suite.signature import kernel_differences
    from suite.site.publish import build_site

    results = tmp_path / "results"
    shutil.copytree(Path(__file__).resolve().parents[1] / "golden" / "results", results)
    paths = {"llamacpp-python": {"linear": "MarlinNvFp4LinearKernel", "moe": "MARLIN (NvFp4)"},
             "vllm-cpu": {"linear": "<b>FlashInferCutlassNvFp4LinearKernel</b>", "attention": "FLASHINFER"}}
    for arm, path in paths.items():
        for f in (results / "tiny" / arm).glob("*/*.json"):
            data = json.loads(f.read_text())
            if isinstance(data.get("signature"), dict):
                data["signature"]["kernel_path"] = path
                f.write_text(json.dumps(data))
    build_site(results, tmp_path / "public")
    page = (tmp_path / "public" / "models" / "tiny.html").read_text()
    assert "kernels: MarlinNvFp4LinearKernel (linear), MARLIN (NvFp4) (MoE)" in page
    assert "kernels: &lt;b&gt;FlashInferCutlassNvFp4LinearKernel&lt;/b&gt; (linear), FLASHINFER (attention)" in page
    assert "<b>FlashInferCutlass" not in page
    same = {"linear": "x"}
    sig = SimpleNamespace(kernel_path=same)
    assert kernel_differences([sig, SimpleNamespace(kernel_path=dict(same)), None]) == [None, None, None]
    assert kernel_differences([sig, SimpleNamespace(kernel_path=None)]) == [None, None]
