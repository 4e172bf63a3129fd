"""The study model's architecture with random weights (random:nemotron_h) and the formats the suite
quantises itself from a card's bf16 format (quantize:hf-bf16, suite/recipes/quantize.py).

The card checks run everywhere. The end-to-end test builds a small hybrid Mamba-Transformer MoE
checkpoint through the catalog (the recipe in the model-preparation tools environment) and
quantises it to NVFP4 and W4A16 with llmcompressor on the CPU: it needs the tools venv and the
quantisation tools (`SUITE_QUANTIZE_PYTHONPATH`, or the folder `suite setup` installs them into),
and is skipped, saying which, without them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from suite.catalog import get_card, is_random_checkpoint, load_card, prepare_format, prepared_checksum
from suite.errors import SuiteError
from suite.paths import tools_prefix


def test_random_lightning_keeps_the_release_s_layer_kinds_experts_and_top_k() -> None:
    card = get_card("random-lightning")
    assert card.random_weights
    shape = card.formats["hf-bf16"].shape
    assert shape is not None and card.formats["hf-bf16"].source == "random:nemotron_h"
    pattern = shape.layer_pattern or ""
    released = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"  # Nemotron 3 Nano 30B-A3B's 52 layers
    assert released.startswith(pattern) and len(pattern) == shape.num_layers == 13
    assert {c: pattern.count(c) for c in "ME*"} == {"M": 6, "E": 5, "*": 2}
    assert (shape.n_routed_experts, shape.num_experts_per_tok, shape.mamba_head_dim, shape.ssm_state_size,
            shape.n_groups, shape.num_kv_heads, shape.head_dim) == (128, 6, 64, 128, 8, 2, 128)
    # every 4-bit group divides every input width: W4A16's 128, NVFP4's 16
    widths = [shape.hidden_size, shape.moe_intermediate_size, shape.moe_shared_expert_intermediate_size,
              (shape.mamba_num_heads or 0) * (shape.mamba_head_dim or 0), shape.num_heads * (shape.head_dim or 0)]
    assert all(w and w % 128 == 0 for w in widths), widths
    # the Mamba-2 in-projection's width (x, z, B, C, dt) is a multiple of 64, as Marlin needs: the release's 10,304
    d_inner = (shape.mamba_num_heads or 0) * (shape.mamba_head_dim or 0)
    in_proj = 2 * d_inner + 2 * (shape.n_groups or 0) * (shape.ssm_state_size or 0) + (shape.mamba_num_heads or 0)
    assert in_proj == 10304 and in_proj % 64 == 0
    assert {n: (f.kind, f.source, f.scheme) for n, f in card.formats.items() if n != "hf-bf16"} == {
        "nvfp4": ("nvfp4", "quantize:hf-bf16", "NVFP4"), "w4a16": ("w4a16", "quantize:hf-bf16", "W4A16")}
    vllm_arms = {"vllm-gpu", "vllm-gpu-batch-invariant", "vllm-gpu-nvfp4", "vllm-gpu-w4a16",
                 "vllm-gpu-humming-w4a16", "vllm-gpu-humming-w4a16-grouped", "vllm-gpu-w4a16-moe-triton"}
    assert vllm_arms <= set(card.arms)  # these at least: an arm added beside them breaks nothing
    for name in vllm_arms:
        arm = card.arms[name]
        assert arm.runtime == "vllm" and arm.version == "0.24.0" and arm.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    grouped = card.arms["vllm-gpu-humming-w4a16-grouped"]
    assert grouped.env["VLLM_HUMMING_MOE_GEMM_TYPE"] == "grouped" and grouped.args == ["--quantization", "humming"]
    # the W4A16 weights, the experts through Triton's WNA16 fused MoE: vLLM 0.24.0 ignores --moe-backend
    # for this checkpoint, so the arm takes the suite's kernel override
    triton = card.arms["vllm-gpu-w4a16-moe-triton"]
    assert triton.format == "w4a16" and triton.controls == ["moe-wna16-triton"] and not triton.args


def test_every_gpu_card_offers_a_batch_invariant_arm_and_tiny_gpu_quantised_trained_weights() -> None:
    for name in ("tiny-gpu", "random-llama-1b", "random-qwen3", "random-lightning"):
        card = get_card(name)
        assert any(a.determinism_mode and not a.args for a in card.arms.values()), name
    tiny = get_card("tiny-gpu")
    assert not tiny.random_weights
    assert {tiny.arms[a].format for a in ("vllm-gpu-nvfp4", "vllm-gpu-w4a16")} == {"nvfp4", "w4a16"}
    assert tiny.formats["nvfp4"].source == tiny.formats["w4a16"].source == "quantize:hf-bf16"


CARD = '''
name = "q"
title = "q"
served_name = "q"
random_weights = true
[formats.hf]
kind = "hf"
source = "random:nemotron_h"
shape = {{ {shape} }}
[formats.four]
kind = "{kind}"
source = "{source}"
{scheme}
[arms.v]
runtime = "vllm"
format = "four"
'''
HYBRID = ('hidden_size = 256, num_layers = 5, layer_pattern = "MEM*E", num_heads = 4, num_kv_heads = 2, '
          'head_dim = 64, intermediate_size = 128, n_routed_experts = 8, num_experts_per_tok = 2, '
          'moe_intermediate_size = 128, moe_shared_expert_intermediate_size = 256, mamba_num_heads = 8, '
          'mamba_head_dim = 64, ssm_state_size = 32, n_groups = 2, routed_scaling_factor = 2.5, vocab_size = 1024, '
          'split_digits = true, max_position = 2048, seed = 0')


def _card(tmp_path: Path, kind: str = "w4a16", source: str = "quantize:hf", scheme: str = 'scheme = "W4A16"',
          shape: str = HYBRID) -> Path:
    path = tmp_path / "q.toml"
    path.write_text(textwrap.dedent(CARD.format(kind=kind, source=source, scheme=scheme, shape=shape)))
    return path


@pytest.mark.parametrize("kw, says", [
    (dict(scheme=""), "a quantize: source names its scheme"),
    (dict(source="hf:org/repo"), "only a quantize: source has one"),
    (dict(scheme='scheme = "NVFP4"'), "scheme NVFP4 makes a nvfp4 format, not w4a16"),
    (dict(scheme='scheme = "W8A8"'), "scheme"),
    (dict(source="quantize:nope"), "formats.four.source: 'nope' is not an hf format of this card"),
    (dict(shape=HYBRID.replace("n_routed_experts = 8, ", "")), "a random:nemotron_h shape names n_routed_experts"),
    (dict(shape=HYBRID.replace('"MEM*E"', '"MEM*"')), "layer_pattern has 4 layers, num_layers says 5"),
    (dict(shape=HYBRID.replace('"MEM*E"', '"MEMXE"')), "layer_pattern"),
])
def test_bad_quantize_and_hybrid_formats_are_one_line(tmp_path: Path, kw: dict[str, str], says: str) -> None:
    with pytest.raises(SuiteError, match="(?i)" + re.escape(says)) as err:
        load_card(_card(tmp_path, **kw))
    assert "\n" not in str(err.value) and "q.toml" in str(err.value)


def test_a_quantised_format_of_a_card_is_accepted(tmp_path: Path) -> None:
    card = load_card(_card(tmp_path))
    assert card.formats["four"].scheme == "W4A16"


def _tools() -> tuple[Path, str]:
    python = tools_prefix() / "venv" / "bin" / "python"
    if not python.exists():
        pytest.skip("the model-preparation tools are not installed here (suite setup installs them)")
    quantize = os.environ.get("SUITE_QUANTIZE_PYTHONPATH", "").strip()
    if not quantize and (tools_prefix() / "quantize" / ".installed").exists():
        quantize = str(tools_prefix() / "quantize")
    if not quantize:
        pytest.skip("the quantisation tools are not installed here (SUITE_QUANTIZE_PYTHONPATH, or "
                    "`suite setup --model random-lightning` installs them beside the tools venv)")
    r = subprocess.run([str(python), "-c", "import llmcompressor, compressed_tensors, datasets"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": quantize}, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"the quantisation tools in {quantize} do not import: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return python, quantize


@pytest.mark.slow
def test_the_suite_builds_a_hybrid_moe_and_quantises_it_to_nvfp4_and_w4a16(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    python, quantize = _tools()
    monkeypatch.setenv("SUITE_TOOLS_PYTHON", str(python))
    monkeypatch.setenv("SUITE_QUANTIZE_PYTHONPATH", quantize)
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    path = _card(tmp_path).read_text().replace('[formats.four]', '''[formats.nv]
kind = "nvfp4"
source = "quantize:hf"
scheme = "NVFP4"

[formats.four]''')
    (tmp_path / "q.toml").write_text(path)
    card = load_card(tmp_path / "q.toml")
    bf16 = prepare_format(card, "hf")
    cfg = json.loads((bf16 / "config.json").read_text())
    assert cfg["architectures"] == ["NemotronHForCausalLM"] and is_random_checkpoint(bf16)
    # the released checkpoints' spelling, which transformers 5 and vLLM 0.24.0 read
    assert cfg["hybrid_override_pattern"] == "MEM*E" and cfg["num_hidden_layers"] == 5 and "layers_block_type" not in cfg
    assert cfg["n_routed_experts"] == 8 and cfg["num_experts_per_tok"] == 2
    for fmt_name, scheme, fmt, bits_key in (("four", "W4A16", "pack-quantized", "weight_packed"),
                                            ("nv", "NVFP4", "nvfp4-pack-quantized", "weight_global_scale")):
        out = prepare_format(card, fmt_name)
        q = json.loads((out / "config.json").read_text())
        qc = q["quantization_config"]
        assert qc["quant_method"] == "compressed-tensors" and qc["format"] == fmt
        weights = next(iter(qc["config_groups"].values()))["weights"]
        assert weights["num_bits"] == 4 and weights["group_size"] == (128 if scheme == "W4A16" else 16)
        assert "lm_head" in qc["ignore"] and any(i.endswith("mixer.gate") for i in qc["ignore"])  # head and routers kept
        assert q["suite_quantized"]["scheme"] == scheme and q["suite_quantized"]["source_sha256"] == prepared_checksum(card, "hf")
        assert q["hybrid_override_pattern"] == "MEM*E" and is_random_checkpoint(out)
        names = subprocess.run([str(python), "-c", textwrap.dedent(f'''
            from safetensors import safe_open
            with safe_open({str(out / "model.safetensors")!r}, "pt") as f:
                print("\\n".join(f.keys()))''')], capture_output=True, text=True, timeout=120).stdout.split()
        assert f"backbone.layers.1.mixer.experts.7.down_proj.{bits_key}" in names  # every expert quantised
        assert "lm_head.weight" in names and "backbone.layers.1.mixer.gate.weight" in names
        assert prepared_checksum(card, fmt_name) and (out / ".recipe").read_text().strip() == "1"
    if scheme == "NVFP4":
        assert q["suite_quantized"]["calibration"]["data"] == "random token ids"


def test_suite_setup_prepares_every_format_before_any_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """A random-weight or quantised checkpoint needs torch and transformers, not vLLM: `suite setup`
    builds the formats first, so that a machine still putting vLLM together has them."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    import suite.bench
    import suite.catalog
    from suite import cli

    order: list[str] = []
    card = get_card("random-lightning")
    launcher = SimpleNamespace(can_run=True, reason="", prepare=lambda runtime, model: order.append(f"runtime {runtime.name}"))
    plans = [SimpleNamespace(card=card, arm_name=name, arm=arm, runtime=SimpleNamespace(name=arm.runtime), launcher=launcher)
             for name, arm in card.arms.items()]
    monkeypatch.setattr(suite.bench, "plan_arms", lambda *a, **k: plans)
    monkeypatch.setattr(suite.catalog, "prepare_format", lambda c, fmt: order.append(f"format {fmt}") or Path("/x"))
    result = CliRunner().invoke(cli.app, ["setup", "--model", "random-lightning"])
    assert result.exit_code == 0, result.output
    assert order[:3] == ["format hf-bf16", "format nvfp4", "format w4a16"]
    assert order[3:] == ["runtime vllm"] * len(plans)
