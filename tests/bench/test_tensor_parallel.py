"""Tensor-parallel degree as a configuration: an arm that spreads over two GPUs says so, runs only
where two are, and names what it lacks elsewhere (the two-GPU run itself needs such a machine)."""

from __future__ import annotations

import pytest

from suite.catalog import arm_runtime, get_card
from suite.definitions import get_definition
from suite.errors import SuiteError
from suite.gpu import gpus_needed, parallel_degree
from suite.launchers import Machine, UnavailableLauncher, launcher_for


class TwoOrOneGpu(Machine):
    def __init__(self, count: int):
        self.__dict__["gpu"] = ("NVIDIA H200", 143.0, None)
        self.__dict__["gpu_count"] = count
        self.__dict__["docker"] = (False, False, "no Docker engine")


@pytest.mark.parametrize("args, degree", [
    ([], (1, 1)),
    (["--tensor-parallel-size", "2"], (2, 1)),
    (["--tensor-parallel-size=4", "--pipeline-parallel-size", "2"], (4, 2)),
    (["-tp", "2", "--max-model-len", "2048"], (2, 1)),
    (["--tensor-parallel-size", "2", "--tensor-parallel-size", "1"], (1, 1)),  # the later one wins
])
def test_parallel_degree_is_read_from_the_server_arguments(args: list[str], degree: tuple[int, int]) -> None:
    assert parallel_degree(args) == degree
    assert gpus_needed(args) == degree[0] * degree[1]


@pytest.mark.parametrize("args, message", [
    (["--tensor-parallel-size", "two"], "--tensor-parallel-size: expected a number of GPUs, got 'two'"),
    (["-tp"], "-tp: expected a number of GPUs, got ''"),
    (["--pipeline-parallel-size=0"], "--pipeline-parallel-size: expected a number of GPUs of at least 1, got 0"),
])
def test_a_bad_degree_is_one_line(args: list[str], message: str) -> None:
    with pytest.raises(SuiteError) as exc:
        parallel_degree(args)
    assert str(exc.value) == message


def test_the_tp2_arm_spreads_over_two_gpus_and_runs_only_where_two_are() -> None:
    card = get_card("random-llama-8b")
    vllm = get_definition("vllm")
    assert card.random_weights
    spread = {name: arm.gpus(arm_runtime(card, name)) for name, arm in card.arms.items()}
    assert {"vllm-tp1": 1, "vllm-tp2": 2, "vllm-tp1-batch-invariant": 1, "vllm-tp2-batch-invariant": 2}.items() <= spread.items()
    assert launcher_for(vllm, "auto", 24, m=TwoOrOneGpu(2), gpus=2).name == "local"
    assert launcher_for(vllm, "auto", 24, m=TwoOrOneGpu(1), gpus=1).name == "local"
    chosen = launcher_for(vllm, "auto", 24, m=TwoOrOneGpu(1), gpus=2)
    assert isinstance(chosen, UnavailableLauncher)
    assert chosen.reason == ("needs 2 NVIDIA GPUs of one host (24 GB class); this machine has 1 NVIDIA GPU "
                             "(the arm spreads over 2): see `suite doctor`")


def test_the_signature_records_the_degree_and_the_gpus_only_where_there_are_several(monkeypatch) -> None:
    from suite import gpu
    from suite.bench import parallel_fields
    from suite.signature import flatten_signature

    monkeypatch.setattr(gpu, "device_names", lambda: ["NVIDIA H200", "NVIDIA H200", "NVIDIA H200"])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert parallel_fields(["vllm", "serve", "m", "--port", "1"], {}) == {}  # one GPU: digests unchanged
    assert parallel_fields(["vllm", "--tensor-parallel-size", "2"], {}) == {
        "tensor_parallel": 2, "pipeline_parallel": 1, "gpus": ["0: NVIDIA H200", "1: NVIDIA H200"]}
    assert parallel_fields(["vllm", "-tp", "2"], {"CUDA_VISIBLE_DEVICES": "2,0"})["gpus"] == [
        "2: NVIDIA H200", "0: NVIDIA H200"]
    from suite.probes import Hardware
    from suite.signature import Signature

    base = dict(model="m", model_format="f", model_sha256=None, model_revision=None, runtime="vllm",
                runtime_version="0.24.0", launcher="local", command=["vllm"], env={}, controls=[],
                prompt_set_hash="x", hardware=Hardware(cpu="c", cores=1, memory_gb=1.0, os="linux"))
    one, two = Signature(**base).with_digest(), Signature(**base, tensor_parallel=2, pipeline_parallel=1,
                                                           gpus=["0: NVIDIA H200", "1: NVIDIA H200"]).with_digest()
    assert one.digest != two.digest
    assert "tensor_parallel" not in flatten_signature(one)
    flat = flatten_signature(two)
    assert flat["tensor_parallel"] == "2" and "1: NVIDIA H200" in str(flat.get("gpus", flat))


def test_the_arms_compared_name_a_comparison_across_tensor_parallel_degrees() -> None:
    from types import SimpleNamespace

    from suite.site.figures import arm_comparisons
    from suite.stages.gate_models import GatePromptResult, GateResult
    from suite.analysis.repro import Sample, analyse

    def gate(ids: list[int]) -> GateResult:
        a = analyse([Sample(index=i, text=" ".join(map(str, ids)), token_ids=ids, finish_reason="stop")
                     for i in range(3)])
        p = GatePromptResult.from_analysis(a, prompt_id="p", prompt_sha256="x", max_tokens=16)
        return GateResult(label="default", n_requests=3, seed=42, temperature=0.0, logprobs=False, prompts=[p],
                          reproducible=True, verdict="", wall_s=0.0, http_s=1.0)

    def run(tp: int | None, ids: list[int]) -> SimpleNamespace:
        return SimpleNamespace(s=SimpleNamespace(gate=gate(ids), signature=SimpleNamespace(
            tensor_parallel=tp, pipeline_parallel=1 if tp else None)))

    tp1, tp2, tp1b = run(None, [1, 2, 3]), run(2, [1, 2, 4]), run(None, [1, 2, 3])
    (c,) = arm_comparisons([tp1, tp2], ["vllm-tp1", "vllm-tp2"])  # type: ignore[list-item]
    assert c["degrees"] == "answers across tensor-parallel degrees: TP 2 vs TP 1" and c["agree"] == 0
    (same,) = arm_comparisons([tp1, tp1b], ["a", "b"])  # type: ignore[list-item]
    assert same["degrees"] is None and same["agree"] == 1
