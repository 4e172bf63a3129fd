"""Runtime definitions and model cards: the shipped ones validate, bad ones fail with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from suite.catalog import load_card, load_catalog
from suite.definitions import load_definition, load_definitions, render
from suite.errors import SuiteError

GOOD = """
name = "mine"
description = "a test runtime"
[local]
install = "install.sh"
command = ["{prefix}/bin/server", "--port", "{port}"]
"""


def write_runtime(root: Path, text: str, name: str = "mine") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "runtime.toml").write_text(text)
    return folder / "runtime.toml"


def test_shipped_definitions_and_cards_validate():
    definitions = load_definitions()
    assert {"llamacpp", "llamacpp-python", "vllm-cpu"} <= set(definitions)
    assert definitions["vllm-cpu"].determinism_control == "batch-invariant"
    catalog = load_catalog()
    assert {"tiny", "lightning", "nano", "qwen-judge", "tiny-gpu", "random-llama-1b", "random-qwen3"} <= set(catalog)
    tiny = catalog["tiny"]
    assert tiny.formats["gguf"].sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert tiny.formats["hf-bf16"].source == "derive:gguf"
    # The catalog's rules, not its contents (adding an arm or a runtime breaks no test): the tiny
    # card runs on a machine with no GPU, and every arm of every card names a runtime that serves
    # its format's kind.
    assert tiny.arms and all("cpu" in definitions[a.runtime].platforms for a in tiny.arms.values())
    for card in catalog.values():
        for arm_name, arm in card.arms.items():
            assert arm.runtime in definitions, f"{card.name}/{arm_name}"
            formats = definitions[arm.runtime].capabilities.formats
            assert not formats or card.formats[arm.format].kind in formats, f"{card.name}/{arm_name}"
    lightning = catalog["lightning"]
    assert {f.kind for f in lightning.formats.values()} == {"nvfp4", "gguf", "w4a16"}


def test_a_good_definition_loads(tmp_path):
    d = load_definition(write_runtime(tmp_path, GOOD))
    assert d.name == "mine"
    # nothing declared: no runtime timings read, no compile caches pointed anywhere
    assert not d.metrics.declared and not d.timings.declared and d.compile_cache.dirs == []
    assert render(d.local.command, {"prefix": "/p", "port": 9}) == ["/p/bin/server", "--port", "9"]


@pytest.mark.parametrize("text, key", [
    (GOOD + "colour = 'red'\n", "colour"),
    (GOOD.replace('description = "a test runtime"\n', ""), "description"),
    (GOOD + "[capabilities]\nlogprobs = 3\n", "capabilities.logprobs"),
    (GOOD + "[controls.x]\ndescription = 'x'\nenv = { A = 1 }\n", "controls.x.env.A"),
    (GOOD + "[server]\nstartup_timeout_s = 'soon'\n", "server.startup_timeout_s"),
    (GOOD + "[metrics]\nttft = ['vllm time to first token']\n", "metrics.ttft.0"),
    (GOOD + "[metrics]\nttft = 'vllm:time_to_first_token_seconds'\n", "metrics.ttft"),
    (GOOD + "[metrics]\nitl = ['vllm:inter_token_latency_seconds']\n", "metrics.itl"),
    (GOOD + "[timings]\nprompt_ms = 'prompt_ms'\n", "timings"),
    (GOOD + "[timings]\ngenerated_tokens = 'predicted_n'\n", "timings"),
    (GOOD + "[timings]\ncache_n = 'cache_n'\n", "timings.cache_n"),
    ('protocol = "openai"\n' + GOOD, "protocol"),
])
def test_bad_definition_names_file_and_key(tmp_path, text, key):
    path = write_runtime(tmp_path, text)
    with pytest.raises(SuiteError) as err:
        load_definition(path)
    message = str(err.value)
    assert str(path) in message and key in message and "\n" not in message


def test_bad_card_names_file_and_key(tmp_path):
    card = (Path(__file__).resolve().parents[2] / "suite" / "cards" / "tiny.toml").read_text()
    bad = tmp_path / "tiny.toml"
    bad.write_text(card.replace('[arms.llamacpp]\nruntime = "llamacpp"', '[arms.llamacpp]\nruntme = "llamacpp"'))
    with pytest.raises(SuiteError, match=r"tiny\.toml: unknown key: arms\.llamacpp\.runtme"):
        load_card(bad)
    bad.write_text(card.replace('context_length = 4096', 'context_length = "long"'))
    with pytest.raises(SuiteError, match=r"tiny\.toml: .*context_length"):
        load_card(bad)
    bad.write_text(card.replace('format = "hf-bf16"', 'format = "hf-fp32"'))
    with pytest.raises(SuiteError, match=r"arms\.vllm-cpu\.format: unknown format 'hf-fp32'"):
        load_card(bad)


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_cli_unknown_model_and_runtime_one_line():
    r = run_cli("bench", "--model", "nope")
    assert r.returncode == 2
    from suite.paths import CARDS_DIR

    known = ", ".join(sorted(p.stem for p in CARDS_DIR.glob("*.toml")))
    assert r.stderr.strip() == f"error: unknown model 'nope'; known: {known}"  # one line, every card named
    assert "Traceback" not in r.stderr + r.stdout
    r = run_cli("up", "nope", "--model", "tiny")
    assert r.returncode == 2 and "has no arm or runtime 'nope'" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("bench", "--model", "tiny", "--profile", "huge")
    assert r.returncode == 2 and "--profile 'huge': not one of quick, standard, full" in r.stderr


def test_cli_bad_card_one_line(tmp_path):
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "mine.toml").write_text('name = "mine"\ntitle = "t"\nserved_name = "t"\nformats = {}\narms = {}\nextra = 1\n')
    r = run_cli("models", env={"SUITE_CARDS": str(cards)})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "mine.toml: unknown key: extra" in r.stderr and "Traceback" not in r.stderr
