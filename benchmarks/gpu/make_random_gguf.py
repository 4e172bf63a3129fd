"""A small random-weight Gemma 3 GGUF with the tiny model's real tokenizer, for GPU checks.

The tiny model's GGUF (253 MB) is too big to carry to a lent GPU machine; this writes a model of
the same architecture (gemma3) and the same vocabulary (262,144 tokens, SentencePiece, BOS added)
with small dimensions and weights drawn from a fixed seed, in f16 (norms in f32). The same seed
gives the same file, byte for byte. Greedy decoding on random weights is still a fair determinism
test: the logits are close together, so a kernel that sums in a different order changes the
argmax sooner than on a trained model; what it cannot say anything about is answer quality.

Two steps, so that only a few MB travel:

    # here, once: the tokenizer alone (all tokenizer.* keys, no tensors), about 6 MB
    python3 benchmarks/gpu/make_random_gguf.py vocab --from ~/.cache/suite/models/tiny/gguf/gemma-3-270m-q4_k_m.gguf \
        --out .gpu/gemma3-vocab.gguf
    # anywhere (numpy and llama.cpp's gguf-py on PYTHONPATH): the random model, about 150 MB
    python3 benchmarks/gpu/make_random_gguf.py model --vocab .gpu/gemma3-vocab.gguf --out random-gemma3.gguf

`--vocab` also accepts the full tiny GGUF. Needs numpy and `gguf` (llama.cpp's gguf-py: put
`vendor/llama.cpp/gguf-py` on PYTHONPATH, or pass `--gguf-py DIR`).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path


def _import_gguf(path: str | None):
    if path:
        sys.path.insert(0, path)
    import gguf  # noqa: PLC0415

    return gguf


def _copy_fields(gguf, reader, writer, prefix: str) -> int:
    """Copy every key starting with `prefix` from a GGUFReader to a GGUFWriter, types kept."""
    n = 0
    for key, field in reader.fields.items():
        if not key.startswith(prefix):
            continue
        main = field.types[0]
        sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if sub is not None:
            value = list(value)
        writer.add_key_value(key, value, main, sub_type=sub)
        n += 1
    return n


def write_vocab(gguf, src: Path, out: Path) -> None:
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_name("tokenizer of " + str(reader.fields.get("general.name").contents()
                                          if "general.name" in reader.fields else src.name))
    n = _copy_fields(gguf, reader, writer, "tokenizer.")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{out}: {n} tokenizer keys from {src} ({out.stat().st_size / 1e6:.1f} MB)")


def write_model(gguf, vocab: Path, out: Path, *, seed: int, layers: int, hidden: int, heads: int, kv_heads: int,
                head_dim: int, ffn: int, ctx: int, std: float) -> None:
    import numpy as np  # noqa: PLC0415

    reader = gguf.GGUFReader(str(vocab))
    if reader.fields["general.architecture"].contents() != "gemma3":
        raise SystemExit(f"{vocab}: not a gemma3 file")
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    writer = gguf.GGUFWriter(str(out), "gemma3")
    writer.add_type("model")
    writer.add_name(f"random gemma3 {layers}x{hidden} seed {seed}")
    writer.add_description(f"random weights (normal, std {std}, numpy seed {seed}); tokenizer of the suite's tiny "
                           "model (Gemma 3 270M); for determinism checks only")
    writer.add_context_length(ctx)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_sliding_window(512)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    _copy_fields(gguf, reader, writer, "tokenizer.")

    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> np.ndarray:  # numpy (rows, cols) = ggml ne (cols, rows)
        return (rng.standard_normal((rows, cols), dtype=np.float32) * std).astype(np.float16)

    def ones(n: int) -> np.ndarray:  # gemma norms are stored with their +1 applied
        return np.ones(n, dtype=np.float32)

    writer.add_tensor("token_embd.weight", mat(n_vocab, hidden))
    for i in range(layers):
        b = f"blk.{i}"
        writer.add_tensor(f"{b}.attn_norm.weight", ones(hidden))
        writer.add_tensor(f"{b}.attn_q.weight", mat(heads * head_dim, hidden))
        writer.add_tensor(f"{b}.attn_k.weight", mat(kv_heads * head_dim, hidden))
        writer.add_tensor(f"{b}.attn_v.weight", mat(kv_heads * head_dim, hidden))
        writer.add_tensor(f"{b}.attn_q_norm.weight", ones(head_dim))
        writer.add_tensor(f"{b}.attn_k_norm.weight", ones(head_dim))
        writer.add_tensor(f"{b}.attn_output.weight", mat(hidden, heads * head_dim))
        writer.add_tensor(f"{b}.post_attention_norm.weight", ones(hidden))
        writer.add_tensor(f"{b}.ffn_norm.weight", ones(hidden))
        writer.add_tensor(f"{b}.ffn_gate.weight", mat(ffn, hidden))
        writer.add_tensor(f"{b}.ffn_up.weight", mat(ffn, hidden))
        writer.add_tensor(f"{b}.ffn_down.weight", mat(hidden, ffn))
        writer.add_tensor(f"{b}.post_ffw_norm.weight", ones(hidden))
    writer.add_tensor("output_norm.weight", ones(hidden))  # output tied to token_embd, as in the tiny model
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    print(f"{out}: gemma3 {layers} layers, hidden {hidden}, {heads}/{kv_heads} heads of {head_dim}, ffn {ffn}, "
          f"vocab {n_vocab}, seed {seed}; {out.stat().st_size / 1e6:.1f} MB, sha256 {digest}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf-py", default=None, help="llama.cpp's gguf-py folder (else gguf from PYTHONPATH)")
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("vocab", help="write a tokenizer-only GGUF from a gemma3 GGUF")
    v.add_argument("--from", dest="src", required=True, type=Path)
    v.add_argument("--out", required=True, type=Path)
    m = sub.add_parser("model", help="write the random-weight model")
    m.add_argument("--vocab", required=True, type=Path, help="a gemma3 GGUF with the tokenizer (vocab-only is enough)")
    m.add_argument("--out", required=True, type=Path)
    m.add_argument("--seed", type=int, default=42)
    m.add_argument("--layers", type=int, default=6, help="6: five sliding-window layers and one global, as gemma3")
    m.add_argument("--hidden", type=int, default=256)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--kv-heads", type=int, default=1)
    m.add_argument("--head-dim", type=int, default=64)
    m.add_argument("--ffn", type=int, default=1024)
    m.add_argument("--ctx", type=int, default=32768)
    m.add_argument("--std", type=float, default=0.02)
    a = p.parse_args()
    gguf = _import_gguf(a.gguf_py)
    if a.cmd == "vocab":
        write_vocab(gguf, a.src.expanduser(), a.out)
    else:
        write_model(gguf, a.vocab.expanduser(), a.out, seed=a.seed, layers=a.layers, hidden=a.hidden,
                    heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim, ffn=a.ffn, ctx=a.ctx, std=a.std)
    return 0


if __name__ == "__main__":
    sys.exit(main())
