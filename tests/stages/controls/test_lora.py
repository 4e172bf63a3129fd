"""The suite's test LoRA adapter: made with peft in both formats, and served by llama.cpp's
runtimes (llama-server selects it per request; llama-cpp-python applies it to the whole process)."""

from __future__ import annotations

import json

import pytest

from suite.client import OpenAIClient
from suite.launchers.base import LoraAdapter
from suite.stages.controls import ADAPTER_NAME, adapter_path, lora_request_fields
from suite.stages.controls.run import ensure_adapter
from suite.stages.gate_models import select_prompts
from suite.stages.repeat import run_gate
from tests.conftest import installed_definition, start_local


def test_request_fields_that_pick_base_or_adapter():
    assert lora_request_fields("model", "tiny", True) == {"model": ADAPTER_NAME}
    assert lora_request_fields("model", "tiny", False) == {"model": "tiny"}
    assert lora_request_fields("scale", "tiny", True) == {"lora": [{"id": 0, "scale": 1.0}]}
    assert lora_request_fields("scale", "tiny", False) == {"lora": [{"id": 0, "scale": 0.0}]}
    assert lora_request_fields("process", "tiny", True) is None


@pytest.fixture(scope="module")
def adapters(tiny_card, tiny_hf):
    installed_definition("llamacpp")  # its source tree carries the GGUF converter
    return ensure_adapter(tiny_card, "hf"), ensure_adapter(tiny_card, "gguf")


def test_adapter_in_both_formats(tiny_card, adapters):
    peft_dir, gguf = adapters
    assert peft_dir == adapter_path(tiny_card, "hf") and gguf == adapter_path(tiny_card, "gguf")
    config = json.loads((peft_dir / "adapter_config.json").read_text())
    assert config["r"] == 8 and set(config["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert (peft_dir / "adapter_model.safetensors").stat().st_size > 100_000
    assert gguf.read_bytes()[:4] == b"GGUF"


def test_llamacpp_python_applies_the_adapter_to_every_request(tiny_gguf, adapters, tmp_path):
    prompts = select_prompts(["short-open"])
    answers = {}
    for arm, lora in (("base", []), ("adapter", [LoraAdapter(ADAPTER_NAME, adapters[1])])):
        with start_local("llamacpp-python", tiny_gguf, tmp_path / arm, lora=lora) as rt, \
                OpenAIClient(rt.base_url, "tiny") as client:
            assert ("--lora_path" in rt.command) == bool(lora)
            gate = run_gate(client, prompts, 2, max_tokens_cap=24)
            answers[arm] = gate.prompts[0].answers[0].text
    assert answers["base"] and answers["adapter"]
    assert answers["base"] != answers["adapter"]
