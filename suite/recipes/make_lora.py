"""Make a small LoRA adapter for a model, for the LoRA arms of the gate, in two formats.

Runs in the model-preparation tools venv (torch, transformers, peft), never in the suite's own
environment. Usage:

    make_lora.py HF_DIR OUT_DIR [--gguf-converter PATH/convert_lora_to_gguf.py] [--seed 42]

Writes `OUT_DIR/peft/` (adapter_config.json + adapter_model.safetensors, what vLLM's
`--lora-modules` loads) and, with a converter, `OUT_DIR/gguf/adapter.gguf` (what llama.cpp's
`--lora` loads), converted by llama.cpp's own `convert_lora_to_gguf.py`.

The adapter is not trained: A keeps peft's seeded initialisation and B, which peft starts at
zero (a no-op adapter), is filled from a seeded normal distribution so the adapter really
changes the output. The script checks that it does: greedy answers of base and adapter to a
probe prompt must differ, and the adapter's answer must still be text (not one token repeated).
Everything is seeded, so the same base gives the same adapter.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

PROBE = "The capital of France is"
RANK = 8
ALPHA = 16
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
B_STD = 0.02


def greedy(model, tok, prompt: str, n: int = 24) -> list[int]:
    ids = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=n, do_sample=False)
    return out[0, ids["input_ids"].shape[1]:].tolist()


def make(base_dir: Path, out_dir: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(base_dir))
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    model.eval()
    base_ids = greedy(model, tok, PROBE)
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0, bias="none",
                        task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed)
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:
            with torch.no_grad():
                param.copy_(torch.randn(param.shape, generator=gen) * B_STD)
    peft_model.eval()
    lora_ids = greedy(peft_model, tok, PROBE)
    if lora_ids == base_ids:
        sys.exit(f"the adapter does not change the greedy answer to {PROBE!r}: raise B_STD")
    if len(set(lora_ids)) <= 2:
        sys.exit(f"the adapter's answer degenerates ({tok.decode(lora_ids)!r}): lower B_STD")
    peft_dir = out_dir / "peft"
    tmp = out_dir / "peft.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    peft_model.save_pretrained(str(tmp), safe_serialization=True)
    cfg_path = tmp / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = str(base_dir)
    cfg_path.write_text(json.dumps(cfg, indent=2))
    shutil.rmtree(peft_dir, ignore_errors=True)
    tmp.rename(peft_dir)
    print(json.dumps({"peft": str(peft_dir), "probe": PROBE, "base": tok.decode(base_ids),
                      "adapter": tok.decode(lora_ids)}))
    return peft_dir


def to_gguf(converter: Path, base_dir: Path, peft_dir: Path, out_dir: Path) -> Path:
    target = out_dir / "gguf" / "adapter.gguf"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name("adapter.gguf.tmp")
    r = subprocess.run([sys.executable, str(converter), "--base", str(base_dir), "--outfile", str(tmp),
                        "--outtype", "f32", str(peft_dir)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(converter.parent)})
    if r.returncode != 0 or not tmp.exists():
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"convert_lora_to_gguf failed: {last}")
    tmp.rename(target)
    print(json.dumps({"gguf": str(target)}))
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path, help="HF checkpoint folder of the base model")
    ap.add_argument("out", type=Path, help="output folder (peft/ and gguf/ are written in it)")
    ap.add_argument("--gguf-converter", type=Path, default=None, help="llama.cpp's convert_lora_to_gguf.py")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    peft_dir = args.out / "peft"
    if not (peft_dir / "adapter_config.json").exists():
        peft_dir = make(args.base, args.out, args.seed)
    if args.gguf_converter is not None and not (args.out / "gguf" / "adapter.gguf").exists():
        to_gguf(args.gguf_converter, args.base, peft_dir, args.out)


if __name__ == "__main__":
    main()
