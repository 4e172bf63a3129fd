"""The GPU cards: the tiny model's own weights on GPU vLLM, and random-weight models of realistic
shape generated on the machine from a seed, marked as random weights in the card and on every page.

The recipe runs here on a small shape in the model-preparation tools environment (torch,
transformers, tokenizers), where it is installed; the realistic shapes run on the GPU machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from suite.catalog import get_card, is_random_checkpoint, load_card
from suite.errors import SuiteError
from suite.paths import tools_prefix

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "suite" / "recipes" / "random_weights.py"
TEXT_DIRS = [str(REPO / "prompts" / "extraction" / "documents"), str(REPO / "prompts" / "gate")]


def test_the_gpu_cards_name_vllm_0_24_0_in_both_modes_and_mark_random_weights() -> None:
    tiny = get_card("tiny-gpu")
    assert tiny.formats["hf-bf16"].source == "derive:gguf" and not tiny.random_weights
    assert tiny.formats["gguf"].sha256 == get_card("tiny").formats["gguf"].sha256  # the same weights as the CPU arms
    for name in ("tiny-gpu", "random-llama-1b", "random-qwen3"):
        card = get_card(name)
        assert all(a.runtime == "vllm" and a.version == "0.24.0" for a in card.arms.values())
        assert all(a.env.get("VLLM_USE_FLASHINFER_SAMPLER") == "0" for a in card.arms.values())
        assert any(not a.determinism_mode for a in card.arms.values())  # one arm in vLLM's default mode
    llama = get_card("random-llama-1b")
    assert llama.random_weights and llama.formats["hf-bf16"].source == "random:llama"
    s = llama.formats["hf-bf16"].shape
    assert s is not None and (s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads, s.intermediate_size,
                              s.vocab_size, s.seed) == (2048, 16, 16, 8, 8192, 32000, 0)
    qwen = get_card("random-qwen3")
    assert qwen.random_weights and qwen.formats["hf-bf16"].source == "random:qwen3"


CARD = '''
name = "r"
title = "r"
served_name = "r"
{mark}
[formats.hf]
kind = "hf"
source = "{source}"
{shape}
[arms.v]
runtime = "vllm"
format = "hf"
'''
SHAPE = "shape = { hidden_size = 64, num_layers = 2, num_heads = 4, num_kv_heads = 2, intermediate_size = 128, vocab_size = 1024 }"


def _card(tmp_path: Path, **kw: str) -> Path:
    path = tmp_path / "r.toml"
    path.write_text(textwrap.dedent(CARD.format(**{"mark": "", "shape": SHAPE, "source": "random:llama", **kw})))
    return path


def test_random_weights_not_marked_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SuiteError) as err:
        load_card(_card(tmp_path))
    msg = str(err.value)
    assert "\n" not in msg and "r.toml" in msg and "formats.hf.source 'random:llama': the weights are random; " \
        "the card must say random_weights = true" in msg
    assert load_card(_card(tmp_path, mark="random_weights = true")).random_weights


@pytest.mark.parametrize("source, shape, says", [
    ("random:gpt2", SHAPE, "random: names an architecture: llama, qwen3"),
    ("random:llama", "", "a random: source is an hf format with a [shape]"),
    ("hf:org/repo", SHAPE, "shape belongs to a random: source"),
])
def test_bad_random_sources_are_one_line(tmp_path: Path, source: str, shape: str, says: str) -> None:
    import re

    with pytest.raises(SuiteError, match=re.escape(says)):
        load_card(_card(tmp_path, source=source, shape=shape, mark="random_weights = true"))


def test_a_local_checkpoint_of_random_weights_not_marked_is_one_line(tmp_path: Path) -> None:
    from suite.catalog import arm_runtime

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                  "suite_random_weights": {"seed": 0}}))
    (ckpt / "model.safetensors").write_bytes(b"x")
    assert is_random_checkpoint(ckpt)
    card = load_card(_card(tmp_path, source=f"path:{ckpt}", shape=""))
    with pytest.raises(SuiteError, match="holds random weights .*the card must say random_weights = true"):
        arm_runtime(card, "v")
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert arm_runtime(card, "v").name == "vllm"  # trained weights: nothing to say


def _tools_python() -> Path:
    python = tools_prefix() / "venv" / "bin" / "python"
    if not python.exists():
        pytest.skip("the model-preparation tools are not installed here (suite setup installs them)")
    return python


def _build(python: Path, shape: dict, out: Path) -> dict:
    r = subprocess.run(["nice", str(python), str(RECIPE), json.dumps(shape), str(out), *TEXT_DIRS],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_recipe_builds_the_same_checkpoint_from_the_same_seed(tmp_path: Path) -> None:
    python = _tools_python()
    shape = {"architecture": "qwen3", "hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
             "intermediate_size": 128, "vocab_size": 12000, "head_dim": 16, "max_position": 1024, "seed": 0,
             "tie_word_embeddings": False}
    a, b = tmp_path / "a", tmp_path / "b"
    mark = _build(python, shape, a)
    _build(python, shape, b)
    digest = [hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest() for d in (a, b)]
    assert digest[0] == digest[1]
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["vocab_size"] == 12000
    assert cfg["suite_random_weights"]["seed"] == 0 and is_random_checkpoint(a)
    assert mark["tokenizer"]["learned"] < 12000 == mark["tokenizer"]["padded_to"]  # padded to the vocabulary
    check = subprocess.run([str(python), "-c", textwrap.dedent(f'''
        from transformers import AutoTokenizer
        t = AutoTokenizer.from_pretrained({str(a)!r})
        assert len(t) == 12000, len(t)
        assert all(isinstance(t.decode([i]), str) for i in range(0, 12000, 97))
        ids = t("The lighthouse keeper")["input_ids"]
        assert ids[0] == t.bos_token_id and t.decode(ids[1:]) == "The lighthouse keeper", ids
        print("ok")
    ''')], capture_output=True, text=True, timeout=300)
    assert check.stdout.strip() == "ok", check.stderr[-2000:]
    other = _build(python, {**shape, "seed": 1}, tmp_path / "c")
    assert other["seed"] == 1
    assert hashlib.sha256((tmp_path / "c" / "model.safetensors").read_bytes()).hexdigest() != digest[0]


def test_every_page_marks_random_weights_and_the_default_mode_arm(tmp_path: Path) -> None:
    from suite.site.publish import build_site

    golden = REPO / "tests" / "golden" / "results"
    results = tmp_path / "results"
    shutil.copytree(golden, results)
    for summary in results.glob("tiny/llamacpp/*/summary.json"):
        data = json.loads(summary.read_text())
        data["signature"]["model_random_weights"] = True
        data["determinism"] = {"control": "batch-invariant", "outcome": "off"}
        summary.chmod(0o644)
        summary.write_text(json.dumps(data))
    build_site(results, tmp_path / "public")
    public = tmp_path / "public"
    runs = list((public / "runs").glob("*.html"))
    tiny = [public / "models" / "tiny.html", *(public / "models" / "tiny").glob("*.html"),
            *(p for p in runs if 'models/tiny.html"' in p.read_text())]
    nano = [public / "models" / "nano.html", *(public / "models" / "nano").glob("*.html"),
            *(p for p in runs if 'models/nano.html"' in p.read_text())]
    assert len(tiny) >= 5 and len(nano) >= 2
    for p in tiny:
        assert 'class="badge random-weights"' in p.read_text(), p
    for p in nano:
        assert "random-weights" not in p.read_text(), p
    index = (public / "index.html").read_text()
    assert 'class="badge random-weights"' in index[index.index('id="model-tiny"'):].split("</section>")[0]
    assert "random-weights" not in index[index.index('id="model-nano"'):].split("</section>")[0]
    model = (tmp_path / "public" / "models" / "tiny.html").read_text()
    assert "default mode, as the arm asks; batch-invariant offered" in model


def test_an_arm_in_default_mode_starts_without_the_determinism_control(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from suite import bench, refusals

    monkeypatch.setattr(refusals, "refusal_key", lambda launcher, spec, control: "key")
    monkeypatch.setattr(refusals, "known", lambda key: None)
    monkeypatch.setattr(refusals, "forget", lambda key: None)
    from suite.catalog import Arm
    from suite.definitions import get_definition

    started = []
    launcher = SimpleNamespace(start=lambda spec: started.append(spec.controls) or "rt")
    for mode, want, outcome in ((False, [], "off"), (True, ["batch-invariant"], "on")):
        plan = SimpleNamespace(runtime=get_definition("vllm"), arm=Arm(runtime="vllm", format="hf", determinism_mode=mode),
                               launcher=launcher, spec=lambda controls, log: SimpleNamespace(controls=controls),
                               retry_refused=False)
        rt, spec, det = bench.start_with_determinism(plan, Path("/tmp"), [])  # type: ignore[arg-type]
        assert spec.controls == want and det.outcome == outcome and det.control == "batch-invariant"
    assert started == [[], ["batch-invariant"]]


def test_prepare_builds_a_random_format_once_with_the_tools_interpreter_named(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`source = "random:llama"` through prepare_format, with SUITE_TOOLS_PYTHON naming an interpreter
    that has torch and transformers (what an offline GPU machine does): built once, checksummed, marked."""
    from suite.catalog import format_path, is_prepared, prepare_format, prepared_checksum

    python = _tools_python()
    monkeypatch.setenv("SUITE_TOOLS_PYTHON", str(python))
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    shape = SHAPE.replace("vocab_size = 1024", "vocab_size = 2048")
    card = load_card(_card(tmp_path, mark="random_weights = true", shape=shape))
    path = prepare_format(card, "hf")
    assert path == format_path(card, "hf") and is_prepared(card, "hf") and is_random_checkpoint(path)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["hidden_size"] == 64
    digest = prepared_checksum(card, "hf")
    assert digest and len(digest) == 64
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert prepare_format(card, "hf") == path and (path / "model.safetensors").stat().st_mtime_ns == mtime
    assert not (tmp_path / "cache" / "tools").exists()  # nothing installed: the named interpreter was used
    monkeypatch.setenv("SUITE_TOOLS_PYTHON", "/nonexistent/python3")
    from suite.catalog import ensure_tools

    with pytest.raises(SuiteError, match="SUITE_TOOLS_PYTHON=/nonexistent/python3: no such interpreter"):
        ensure_tools()


def test_a_downloaded_checkpoint_of_random_weights_not_marked_is_one_line(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from suite import catalog

    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))

    def fake_download(ref: str, fmt, target: Path) -> str:
        target.mkdir(parents=True, exist_ok=True)
        (target / "config.json").write_text(json.dumps({"suite_random_weights": {"seed": 0}}))
        return "0" * 64

    monkeypatch.setattr(catalog, "_prepare_hf", fake_download)
    card = load_card(_card(tmp_path, source="hf:org/random-model", shape=""))
    with pytest.raises(SuiteError, match="holds random weights .*the card must say random_weights = true"):
        catalog.prepare_format(card, "hf")


def test_a_derived_tokenizer_that_reads_the_probe_otherwise_is_refused_in_one_line() -> None:
    """The derive recipe's tokenizer check (suite/recipes/derive_hf.py `check_probe`), on the tiny
    model's derived tokenizer in the tools environment: the card's probe (llama.cpp's ids) passes;
    the same text against ids that differ in one place gives one line with both counts and where
    they part. (A transformers release whose GGUF conversion differed read the tiny model's
    3,034-token document prompt as more than 8,065 tokens on the GPU test machine.)"""
    import subprocess

    from suite.catalog import format_path, get_card, is_prepared

    card = get_card("tiny")
    if not is_prepared(card, "hf-bf16"):
        pytest.skip("the tiny model's derived checkpoint is not prepared here (suite setup --model tiny)")
    probe = card.formats["hf-bf16"].tokenizer_probe
    assert probe is not None
    wrong = probe.model_copy(update={"ids": [*probe.ids[:5], 7, *probe.ids[6:]]})
    script = ("import json, sys; sys.path.insert(0, sys.argv[1]); from derive_hf import check_probe; "
              "from transformers import AutoTokenizer; tok = AutoTokenizer.from_pretrained(sys.argv[2]); "
              "print(json.dumps([check_probe(tok, json.loads(a)) for a in sys.argv[3:]]))")
    from suite.catalog import RECIPES

    out = subprocess.run([str(_tools_python()), "-c", script, str(RECIPES), str(format_path(card, "hf-bf16")),
                          probe.model_dump_json(), wrong.model_dump_json()], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    ok, differs = json.loads(out.stdout.strip().splitlines()[-1])
    assert ok is None
    assert differs.startswith("the derived tokenizer (transformers ") and "reads the probe text as 41 ids" in differs
    assert "the GGUF's own tokenizer as 41; they part at id 5 " in differs and differs.endswith("no checkpoint is made")
