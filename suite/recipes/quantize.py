"""Quantise an hf checkpoint to a compressed-tensors checkpoint with llmcompressor: the NVFP4 and
W4A16 formats of a card, made by the suite from its bf16 format (`source = "quantize:hf-bf16"`).

Runs in the model-preparation tools environment (torch, transformers) with llmcompressor and
compressed-tensors importable (`SUITE_QUANTIZE_PYTHONPATH`), never in the suite's own or vLLM's.
Usage:

    quantize.py SCHEME SRC_DIR OUT_DIR [SOURCE_SHA256]

SCHEME is llmcompressor's preset of that name:
  NVFP4     4-bit float (E2M1) weights and activations in groups of 16 with FP8 scales and a
            global scale; the activations' global scale is calibrated on CALIBRATION_SAMPLES
            sequences of random token ids (seed 0): for random weights no text is more typical
            than another. vLLM serves it natively on Blackwell, weight-only through Marlin on Hopper.
  NVFP4A16  the same weights, activations left in 16 bits: no calibration.
  W4A16     4-bit integer weights, symmetric, groups of 128, activations in 16 bits: no calibration.
Every Linear layer is quantised but the output head (lm_head) and MoE routers (their weights are
no Linear in transformers; matched by name as well). config.json keeps the source's
`suite_random_weights` and gains `suite_quantized` (scheme, tools' versions, the source's checksum).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SCHEMES = ("NVFP4", "NVFP4A16", "W4A16")
IGNORE = ["lm_head", "re:.*mixer\\.gate$", "re:.*mlp\\.gate$", "re:.*router$"]
CALIBRATION_SAMPLES = 16
CALIBRATION_TOKENS = 128
SEED = 0


def calibration_set(vocab_size: int):
    """CALIBRATION_SAMPLES sequences of CALIBRATION_TOKENS random token ids (seed 0), as a dataset."""
    import torch
    from datasets import Dataset
    from datasets.table import InMemoryTable

    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, vocab_size, (CALIBRATION_SAMPLES, CALIBRATION_TOKENS), generator=g)
    table = InMemoryTable.from_pydict({"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()})
    # named, not hashed: what it holds is fixed by the seed and sizes (and hashing an Arrow table
    # fails where datasets and pyarrow releases disagree)
    return Dataset(table, fingerprint=f"suite-random-ids-{SEED}-{vocab_size}-{CALIBRATION_SAMPLES}x{CALIBRATION_TOKENS}")


def quantize(scheme: str, src: Path, out: Path, source_digest: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        import compressed_tensors
        import llmcompressor
        from llmcompressor import oneshot
        from llmcompressor.modifiers.quantization import QuantizationModifier
    except ImportError as exc:
        raise SystemExit(f"the quantisation tools are not importable here ({exc}): install llmcompressor "
                         "and compressed-tensors (benchmarks/gpu/prepare-vllm-parts.sh makes their wheels) "
                         "and name the folder in SUITE_QUANTIZE_PYTHONPATH") from None
    if scheme not in SCHEMES:
        raise SystemExit(f"scheme {scheme!r}: one of {', '.join(SCHEMES)}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16, device_map=device)
    tokenizer = AutoTokenizer.from_pretrained(str(src))
    recipe = QuantizationModifier(targets="Linear", scheme=scheme, ignore=IGNORE)
    kwargs: dict = {}
    if scheme == "NVFP4":  # activation scales need data; one pass over all of it (no layer tracing)
        kwargs = dict(dataset=calibration_set(model.config.vocab_size), num_calibration_samples=CALIBRATION_SAMPLES,
                      max_seq_length=CALIBRATION_TOKENS, pipeline="basic")
    oneshot(model=model, recipe=recipe, **kwargs)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), save_compressed=True)
    tokenizer.save_pretrained(str(out))
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    source_cfg = json.loads((src / "config.json").read_text())
    for key in ("suite_random_weights", "hybrid_override_pattern", "num_hidden_layers"):  # what the source's config says as it says it
        if key in source_cfg:
            cfg[key] = source_cfg[key]
    if "hybrid_override_pattern" in source_cfg:
        cfg.pop("layers_block_type", None)
    mark = {"scheme": scheme, "device": device, "torch": torch.__version__, "llmcompressor": llmcompressor.__version__,
            "compressed_tensors": compressed_tensors.__version__, "source_sha256": source_digest or None,
            "ignore": IGNORE, "calibration": ({"samples": CALIBRATION_SAMPLES, "tokens": CALIBRATION_TOKENS,
                                               "data": "random token ids", "seed": SEED} if scheme == "NVFP4" else None),
            "quantization_format": cfg.get("quantization_config", {}).get("format")}
    cfg["suite_quantized"] = mark
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    if "quantization_config" not in cfg:
        raise SystemExit(f"{cfg_path}: no quantization_config written")
    return mark


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        raise SystemExit(__doc__.split("\n\n")[1].strip())
    mark = quantize(argv[0], Path(argv[1]), Path(argv[2]), argv[3] if len(argv) > 3 else "")
    print(json.dumps(mark))


if __name__ == "__main__":
    main(sys.argv[1:])
