"""Generate a checkpoint of a given shape whose weights are random, from a seed: a model of
realistic shape that needs no download (an offline GPU machine builds it in under a minute).

Runs in the model-preparation tools environment (torch, transformers, tokenizers), never in the
suite's own. Usage:

    random_weights.py SHAPE_JSON OUT_DIR TEXT_DIR [TEXT_DIR ...]

SHAPE_JSON: {"architecture": "llama" | "qwen3" | "nemotron_h", "hidden_size", "num_layers",
"num_heads", "num_kv_heads", "intermediate_size", "vocab_size", "head_dim" (or null), "max_position",
"seed", "tie_word_embeddings", "split_digits" (optional: one token a digit)}; a nemotron_h shape (NVIDIA's hybrid Mamba-Transformer MoE, vLLM's
NemotronHForCausalLM) also names "layer_pattern" (one letter a layer: M Mamba-2, * attention,
E MoE, - MLP; its length is num_layers), "n_routed_experts", "num_experts_per_tok",
"moe_intermediate_size", "moe_shared_expert_intermediate_size", "mamba_num_heads",
"mamba_head_dim", "ssm_state_size", "n_groups" and "routed_scaling_factor". Its config.json
spells the layers as the released Nemotron 3 checkpoints do (`hybrid_override_pattern`), which
every transformers 5 release and vLLM read. The weights are the architecture's own initialisation in transformers
(normal, std 0.02) under `torch.manual_seed(seed)`, made on the GPU where there is one (bf16), and
saved as safetensors. The tokenizer is a byte-level BPE trained with `tokenizers` on the text of
the TOML files under the TEXT_DIRs (the suite's own prompts and documents), padded with plain
added tokens to the vocabulary size so that every id the model can produce decodes; `<s>` is
added in front of every prompt. config.json carries `suite_random_weights` (the shape, the seed,
the device and the torch version): the suite refuses a card that serves such a checkpoint without
saying `random_weights = true`.

Random weights give nonsense text; they are a fair test of determinism (same prompt, seed and
kernels must give the same tokens) and, because random logits sit close together, a strict one.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

SPECIALS = ["<s>", "</s>", "<pad>"]
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def texts(dirs: list[str]) -> list[str]:
    """Every string in the TOML files under the folders, in a stable order."""
    out: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for k in sorted(v):
                walk(v[k])
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for d in dirs:
        for f in sorted(Path(d).rglob("*.toml")):
            walk(tomllib.loads(f.read_text(encoding="utf-8")))
    if not out:
        raise SystemExit(f"no text to train a tokenizer on under {', '.join(dirs)}")
    return out


def train_tokenizer(corpus: list[str], vocab_size: int, split_digits: bool = False):
    """A byte-level BPE trained on the corpus, padded to `vocab_size`. `split_digits`: every digit is
    a token of its own (no merges across digits), so that numbers of as many digits take as many
    tokens: the latency stage's `Request 0007: ` nonces then all have one token length (without it,
    58 to 61 tokens for the latency prompt with the repo's text at 32,000)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if split_digits else byte_level)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    learned = tok.get_vocab_size()
    if learned < vocab_size:  # the shipped text has fewer merges than the vocabulary: pad it
        tok.add_tokens([f"<pad_{i}>" for i in range(learned, vocab_size)])
    if tok.get_vocab_size() != vocab_size:
        raise SystemExit(f"the tokenizer has {tok.get_vocab_size()} ids, not {vocab_size}")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok, learned


NEMOTRON_H_KEYS = ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                   "moe_shared_expert_intermediate_size", "mamba_num_heads", "mamba_head_dim",
                   "ssm_state_size", "n_groups", "routed_scaling_factor")


def make_config(arch: str, shape: dict, kw: dict):
    """The transformers config of the architecture with the shape's sizes."""
    if arch == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**kw)
    if arch == "qwen3":
        from transformers import Qwen3Config

        return Qwen3Config(**kw)
    if arch != "nemotron_h":
        raise SystemExit(f"unknown architecture {arch!r}: llama, qwen3 or nemotron_h")
    from transformers import NemotronHConfig

    pattern = str(shape.get("layer_pattern") or "")
    if len(pattern) != int(shape["num_layers"]) or set(pattern) - set("M*E-"):
        raise SystemExit(f"layer_pattern {pattern!r}: one of M, *, E, - for each of the {shape['num_layers']} layers")
    missing = [k for k in NEMOTRON_H_KEYS if shape.get(k) is None]
    if missing:
        raise SystemExit(f"a nemotron_h shape names {', '.join(missing)}")
    if "n_routed_experts" not in NemotronHConfig().to_dict():  # a transformers without the MoE variant
        raise SystemExit("this transformers' NemotronHConfig has no MoE layers (n_routed_experts): transformers 5.17 or later")
    nemo = {k: shape[k] for k in NEMOTRON_H_KEYS}
    kw = {k: v for k, v in kw.items() if k != "num_hidden_layers"}
    # the released configs' remaining settings (Nemotron 3 Nano 30B-A3B): one shared expert, one
    # routing group, normalised top-k, Mamba-2 with 4-wide convolutions and chunks of 128
    return NemotronHConfig(**kw, hybrid_override_pattern=pattern, n_shared_experts=1, n_group=1, topk_group=1,
                           norm_topk_prob=True, conv_kernel=4, chunk_size=128, use_conv_bias=True,
                           mamba_hidden_act="silu", mlp_hidden_act="relu2", **nemo)


def build(shape: dict, out: Path, text_dirs: list[str]) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    arch = shape["architecture"]
    vocab = int(shape["vocab_size"])
    tok, learned = train_tokenizer(texts(text_dirs), vocab, bool(shape.get("split_digits")))
    kw = dict(vocab_size=vocab, hidden_size=shape["hidden_size"], intermediate_size=shape["intermediate_size"],
              num_hidden_layers=shape["num_layers"], num_attention_heads=shape["num_heads"],
              num_key_value_heads=shape["num_kv_heads"], max_position_embeddings=shape["max_position"],
              tie_word_embeddings=shape["tie_word_embeddings"], bos_token_id=tok.token_to_id("<s>"),
              eos_token_id=tok.token_to_id("</s>"), pad_token_id=tok.token_to_id("<pad>"))
    if shape.get("head_dim"):
        kw["head_dim"] = shape["head_dim"]
    config = make_config(arch, shape, kw)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(int(shape["seed"]))
    if device == "cuda":
        torch.cuda.manual_seed_all(int(shape["seed"]))
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        except TypeError:  # transformers 4: torch_dtype
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHATML
    fast.save_pretrained(str(out))
    params = sum(p.numel() for p in model.parameters())
    mark = {**shape, "device": device, "torch": torch.__version__, "params": params,
            "tokenizer": {"learned": learned, "padded_to": vocab}}
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["suite_random_weights"] = mark
    if arch == "nemotron_h":  # the released checkpoints' spelling of the layers, not transformers' list
        cfg.pop("layers_block_type", None)
        cfg["hybrid_override_pattern"] = shape["layer_pattern"]
        cfg["num_hidden_layers"] = len(shape["layer_pattern"])
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    # every id decodes, and a prompt starts with <s>
    assert all(isinstance(fast.decode([i]), str) for i in (0, learned - 1, vocab - 1))
    assert fast("x")["input_ids"][0] == fast.bos_token_id
    return mark


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        raise SystemExit(__doc__.split("\n\n")[1].strip())
    shape = json.loads(argv[0])
    mark = build(shape, Path(argv[1]), argv[2:])
    print(json.dumps(mark))


if __name__ == "__main__":
    main(sys.argv[1:])
