"""Derive an HF checkpoint (bf16) from a GGUF file: the same weights in a second format.

Runs in the model-preparation tools venv (torch, transformers, gguf), never in the suite's own
environment. Usage: derive_hf.py GGUF_PATH OUT_DIR [PROBE_JSON]

PROBE_JSON (`{"text": ..., "ids": [...]}`, the card's `tokenizer_probe`): the ids the GGUF's own
tokenizer (llama.cpp) gives the text. transformers converts a GGUF's tokenizer itself, and a
release whose conversion differs reads every prompt as other tokens (one such release made a
3,034-token prompt of the tiny model longer than 8,192): the derived tokenizer must give the same
ids, else nothing is written and the last line says where they part.

The GGUF's chat template is carried over too (ChatML, the format llama.cpp's runtimes fall back
to, when the GGUF has none), so that a chat request is the same token sequence on both formats.

The tokenizer that transformers derives from Gemma's GGUF does not add the BOS token; without it
Gemma answers nonsense. This script makes the saved tokenizer add BOS (post-processor and config),
and checks that it does before it finishes.
"""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def check_probe(tok, probe: dict) -> str | None:
    """None when `tok` reads the probe's text as its ids; else one line saying how it differs."""
    import transformers

    got = tok(probe["text"])["input_ids"]
    want = list(probe["ids"])
    if got == want:
        return None
    at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    return (f"the derived tokenizer (transformers {transformers.__version__}) reads the probe text as "
            f"{len(got)} ids, the GGUF's own tokenizer as {len(want)}; they part at id {at} "
            f"({got[at:at + 3]} against {want[at:at + 3]}): no checkpoint is made")


def main(gguf_path: str, out_dir: str, probe_json: str | None = None) -> None:
    gguf = Path(gguf_path)
    out = Path(out_dir)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    # The GGUF loader leaves quantizer marks on the config; the saved checkpoint is plain bf16.
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(model.config, attr):
            delattr(model.config, attr)
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    model.config.torch_dtype = torch.bfloat16
    model.save_pretrained(str(out), safe_serialization=True)
    template = gguf_chat_template(gguf) or CHATML_CHAT_TEMPLATE
    if template and not getattr(tok, "chat_template", None):
        tok.chat_template = template
    tok.save_pretrained(str(out))
    fix_bos(out, tok.bos_token, tok.bos_token_id)
    check = AutoTokenizer.from_pretrained(str(out))
    ids = check("The capital of France is")["input_ids"]
    if ids[0] != tok.bos_token_id:
        sys.exit(f"derived tokenizer does not add BOS ({tok.bos_token_id}): {ids}")
    if template and not check.chat_template:
        sys.exit("derived tokenizer lost the GGUF's chat template")
    if probe_json:
        differs = check_probe(check, json.loads(probe_json))
        if differs:
            sys.exit(differs)
    print(json.dumps({"out": str(out), "bos_id": tok.bos_token_id, "probe_ids": ids}))


# ChatML as llama.cpp's built-in "chatml" template renders it, with the BOS token that
# llama.cpp adds when it tokenises the rendered prompt.
CHATML_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def gguf_chat_template(gguf: Path) -> str | None:
    from gguf import GGUFReader

    field = GGUFReader(str(gguf)).fields.get("tokenizer.chat_template")
    if field is None:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def fix_bos(out: Path, bos: str, bos_id: int) -> None:
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["add_bos_token"] = True
    cfg["add_eos_token"] = False
    cfg_path.write_text(json.dumps(cfg, indent=2))
    tj_path = out / "tokenizer.json"
    if tj_path.exists():
        tj = json.loads(tj_path.read_text())
        tj["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
        }
        tj_path.write_text(json.dumps(tj, ensure_ascii=False))


if __name__ == "__main__":
    main(*sys.argv[1:4])
