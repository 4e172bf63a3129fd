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
    assert {name: arm.gpus(arm_runtime(card, name)) for name, arm in card.arms.items()} == {
        "vllm-tp1": 1, "vllm-tp2": 2, "vllm-tp1-batch-invariant": 1, "vllm-tp2-batch-invariant": 2}
    assert launcher_for(vllm, "auto", 24, m=TwoOrOneGpu(2), gpus=2).name == "local"
    assert launcher_for(vllm, "auto", 24, m=TwoOrOneGpu(1), gpus=1).name == "local"
    chosen = launcher_for(vllm, "auto", 24, m=TwoOrOneGpu(1), gpus=2)
    assert isinstance(chosen, UnavailableLauncher)
    assert chosen.reason == ("needs 2 NVIDIA GPUs of one host (24 GB class); this machine has 1 NVIDIA GPU "
                             "(the arm spreads over 2): see `suite doctor`")
