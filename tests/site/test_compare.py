"""Two runs compared: modal answers per prompt, where they part, and the signature fields that differ."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suite.analysis.repro import Sample, analyse
from suite.compare import compare_gates, compare_prompt, compare_runs, resolve_run
from suite.errors import SuiteError
from suite.records import iter_run_dirs
from suite.stages.gate_models import GatePromptResult, GateResult

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"


def prompt(pid: str, ids: list[int] | None, text: str, logprobs: list[float] | None = None,
           sha: str = "s") -> GatePromptResult:
    """A gate prompt's result: five requests that all gave this answer."""
    a = analyse([Sample(index=i, text=text, token_ids=ids, logprobs=logprobs) for i in range(5)])
    return GatePromptResult.from_analysis(a, prompt_id=pid, prompt_sha256=sha, max_tokens=16)


def gate(*prompts: GatePromptResult) -> GateResult:
    return GateResult(n_requests=5, seed=0, temperature=0.0, logprobs=True, prompts=list(prompts),
                      reproducible=True, verdict="", wall_s=0.0, http_s=0.0)


def test_same_tokens_agree_and_report_the_logprob_difference():
    c = compare_prompt(prompt("p", [1, 2, 3], "abc", [-0.1, -0.2, -0.3]),
                       prompt("p", [1, 2, 3], "abc", [-0.1, -0.5, -0.3]))
    assert c.modal_agree is True and c.compared_by == "token_ids"
    assert c.logprob_diff == pytest.approx(0.3)
    assert "same modal answer" in c.summary


def test_parting_answers_name_the_token_and_the_text_around_it():
    c = compare_prompt(prompt("p", [1, 2, 3, 4], "The cat sat"), prompt("p", [1, 2, 9], "The cow sat"))
    assert c.modal_agree is False
    assert c.token_index == 2 and c.char_index == 5
    assert "cat" in c.a_context and "cow" in c.b_context


def test_text_comparison_without_ids_and_a_missing_answer():
    c = compare_prompt(prompt("p", None, "yes"), prompt("p", None, "yes"))
    assert c.compared_by == "text" and c.modal_agree is True
    empty = GatePromptResult.from_analysis(analyse([Sample(index=0, text="", error="HTTP 500")]), prompt_id="p",
                                           max_tokens=16)
    assert compare_prompt(prompt("p", None, "x"), empty).modal_agree is None


def test_a_changed_prompt_file_is_flagged():
    (c,) = compare_gates(gate(prompt("p", [1], "a", sha="old")), gate(prompt("p", [1], "a", sha="new")))
    assert c.same_prompt is False


def test_runtimes_that_read_the_prompt_as_other_tokens_are_named():
    """Two runs whose runtimes report another length for the same prompt file answered other input
    (the tiny model's derived tokenizer on one machine read a 3,034-token prompt as over 8,065):
    the prompt's line and the verdict say so; the same or an unreported length says nothing."""
    a, b = prompt("doc", [1, 2], "ab"), prompt("doc", [1, 2], "ab")
    a.prompt_tokens, b.prompt_tokens = [3034], [8065]
    (c,) = compare_gates(gate(a), gate(b))
    assert c.tokens_differ and c.summary.endswith("(the runtimes read the prompt as different tokens: 3034 against 8065)")
    from suite.compare import compare_summaries
    from suite.records import Summary

    def run(g, run_id):
        return Summary(run_id=run_id, model="tiny", arm="x", runtime="r", launcher="local", profile="quick",
                       started_at="2026-12-02T00:00:00Z", gate=g)

    verdict = compare_summaries(run(gate(a), "a"), run(gate(b), "b")).verdict
    assert "the runtimes read the prompt as different tokens on doc (3034 against 8065)" in verdict
    b.prompt_tokens = [3034]
    (same,) = compare_gates(gate(a), gate(b))
    assert not same.tokens_differ and "different tokens" not in same.summary
    b.prompt_tokens = []
    assert not compare_gates(gate(a), gate(b))[0].tokens_differ  # a runtime that reports no length: no claim


def test_compare_two_golden_runs_of_one_arm_names_what_differs():
    runs = [d for d in iter_run_dirs(GOLDEN) if d.parent.name == "llamacpp" and d.parent.parent.name == "tiny"]
    assert len(runs) == 2
    cmp = compare_runs(str(runs[0]), runs[1].name, GOLDEN)
    assert cmp.prompts and all(p.modal_agree is not None for p in cmp.prompts)
    assert "modal answer on" in cmp.verdict
    assert cmp.word in ("the same modal answers", "the same up to the cap", "they part", "undetermined")


def test_runs_of_different_models_are_refused_in_one_line():
    tiny = next(d for d in iter_run_dirs(GOLDEN) if d.parent.parent.name == "tiny")
    nano = next(d for d in iter_run_dirs(GOLDEN) if d.parent.parent.name == "nano")
    with pytest.raises(SuiteError, match="different models"):
        compare_runs(str(tiny), str(nano), GOLDEN)
    # two cards of the same weights (the tiny model on CPU arms and on GPU vLLM): asked for, compared
    cmp = compare_runs(str(tiny), str(nano), GOLDEN, across_models=True)
    assert (cmp.a.model, cmp.b.model) == ("tiny", "nano") and cmp.verdict
    with pytest.raises(SuiteError, match="no such run"):
        resolve_run("nope", GOLDEN)


def test_compare_command_prints_its_table():
    runs = [d for d in iter_run_dirs(GOLDEN) if d.parent.parent.name == "tiny"]
    out = subprocess.run([sys.executable, "-m", "suite.cli", "compare", str(runs[0]), str(runs[-1])],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "modal answers" in out.stdout and "configuration fields that differ" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "suite.cli", "compare", "nope", str(runs[0]), "--results",
                          str(GOLDEN)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no such run" in bad.stderr and "Traceback" not in bad.stderr


def _series(pid: str, answers: list[tuple[list[int], str]], cut: bool = False, cap: int = 16) -> GatePromptResult:
    a = analyse([Sample(index=i, text=t, token_ids=ids, finish_reason="length" if cut else "stop")
                 for i, (ids, t) in enumerate(answers)])
    return GatePromptResult.from_analysis(a, prompt_id=pid, prompt_sha256="s", max_tokens=cap)


def test_a_tied_run_has_no_modal_answer_to_compare():
    # run A: two answers, twice each; its "modal" was whichever came first
    a = _series("p", [([1], "x"), ([2], "y"), ([1], "x"), ([2], "y")])
    b = _series("p", [([2], "y")] * 4)
    c = compare_prompt(a, b)
    assert c.modal_agree is None and c.caveat == "tied" and c.a_tied and c.shared_answers == 1
    assert "no modal answer in run A" in c.summary and "part" not in c.summary


def test_answers_cut_at_the_cap_agree_only_up_to_it():
    # both cut at 4 tokens and alike: the same up to the cap, not simply "the same"
    both = compare_prompt(_series("p", [([1, 2, 3, 4], "abcd")] * 3, cut=True, cap=4),
                          _series("p", [([1, 2, 3, 4], "abcd")] * 3, cut=True, cap=4))
    assert both.modal_agree is True and both.caveat == "cap" and "may differ past the cap" in both.summary
    # A cut at 4 tokens, B ran on to 6 (a larger cap) with the same start: not "parted"
    short = compare_prompt(_series("p", [([1, 2, 3, 4], "abcd")] * 3, cut=True, cap=4),
                           _series("p", [([1, 2, 3, 4, 5, 6], "abcdef")] * 3, cap=8))
    assert short.modal_agree is None and short.caveat == "cap"
    assert short.summary.startswith("the same up to the cap (4 tokens)")
    a, b = gate(_series("p", [([1, 2, 3, 4], "abcd")] * 3, cut=True, cap=4)), \
        gate(_series("p", [([1, 2, 3, 4, 5, 6], "abcdef")] * 3, cap=8))
    prompts = compare_gates(a, b)
    assert [p.caveat for p in prompts] == ["cap"]


def test_the_short_id_printed_for_a_run_names_it_and_an_ambiguous_one_is_one_line():
    """The 8-character id printed for a run is its own (reruns of one configuration share their
    run id's tail, never a short id), taken wherever a run is named, a prefix of it too; the run
    id's tail still names a run where no short id matches, and one that several runs share is one
    line listing them, exit 2."""
    from suite.records import short_id_of

    vllm = next(d for d in iter_run_dirs(GOLDEN) if d.parent.name == "vllm-cpu")
    short = short_id_of(vllm.name)
    assert len(short) == 8 and resolve_run(short, GOLDEN) == vllm and resolve_run(short[:6], GOLDEN) == vllm
    shared = [d for d in iter_run_dirs(GOLDEN) if d.name.endswith("-bdd8ea8b")]
    assert len(shared) == 3
    # three reruns of one configuration: three short ids, each naming its own run
    assert len({short_id_of(d.name) for d in shared}) == 3
    assert all(resolve_run(short_id_of(d.name), GOLDEN) == d for d in shared)
    assert len({short_id_of(d.name) for d in iter_run_dirs(GOLDEN)}) == len(iter_run_dirs(GOLDEN))
    with pytest.raises(SuiteError, match=r"run 'bdd8ea8b' is ambiguous: 3 runs under .* match it \(.*\); give more"):
        resolve_run("bdd8ea8b", GOLDEN)
    other = next(d for d in iter_run_dirs(GOLDEN) if d.parent.parent.name == "tiny" and d.parent.name == "llamacpp-python")
    ok = subprocess.run([sys.executable, "-m", "suite.cli", "compare", short, other.name,
                         "--results", str(GOLDEN), "--json"], capture_output=True, text=True, timeout=60)
    assert ok.returncode in (0, 1) and json.loads(ok.stdout)["a"]["run_id"] == vllm.name, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "suite.cli", "compare", "bdd8ea8b", short, "--results", str(GOLDEN)],
                         capture_output=True, text=True, timeout=60)
    lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
    assert bad.returncode == 2 and len(lines) == 1 and "is ambiguous: 3 runs" in lines[0], bad.stderr


def test_the_suites_commit_is_named_beside_the_signature_where_it_differs():
    from suite.compare import compare_summaries
    from suite.provenance import SuiteBuild
    from suite.records import load_summary

    a_dir, b_dir = [d for d in iter_run_dirs(GOLDEN) if d.parent.name == "llamacpp" and d.parent.parent.name == "tiny"]
    a = load_summary(a_dir / "summary.json")
    b = load_summary(b_dir / "summary.json")
    same = compare_summaries(a, b)
    assert not [d for d in same.signature_diff if d.key.startswith("suite.")]  # older records: neither names one
    a.suite = SuiteBuild(version="0.1.0", commit="a" * 40, modified=False)
    b.suite = SuiteBuild(version="0.1.0", commit="b" * 40, modified=False)
    differ = {d.key: (d.a, d.b) for d in compare_summaries(a, b).signature_diff}
    assert differ["suite.commit (beside the signature)"] == ("a" * 40, "b" * 40)
    assert "suite.modified (beside the signature)" not in differ


def test_one_configuration_on_two_machines_is_told_apart_and_a_parting_is_a_finding():
    """The machine (host, GPU UUIDs, driver) is beside the signature, not in its digest: the same
    configuration on two GPUs of one model has one digest, and compare says which machines ran it."""
    from suite.compare import machine_note
    from suite.probes import Machine

    from suite.records import load_all

    base = next(s.signature for s in load_all(GOLDEN) if s.signature is not None)
    assert base is not None
    one = Machine(host="gpu-a", gpu_uuids=["GPU-1111"], gpu_names=["NVIDIA H200"], gpu_driver="580.1")
    two = Machine(host="gpu-b", gpu_uuids=["GPU-2222"], gpu_names=["NVIDIA H200"], gpu_driver="580.1")
    a = base.model_copy(update={"machine": one}).with_digest()
    b = base.model_copy(update={"machine": two}).with_digest()
    assert a.digest == b.digest == base.with_digest().digest  # the machine is not the configuration
    note = machine_note(a, b, True, ["long-open"])
    assert note is not None and note.startswith("two machines of one GPU model and driver: A gpu-a (NVIDIA H200 GPU-1111")
    assert "the answers part on long-open: a difference between machines of one GPU model and driver" in note
    assert machine_note(a, b, True, []).endswith("one configuration (the same digest), and the answers agree")
    assert machine_note(a, a, True, []) == "one machine: gpu-a (NVIDIA H200 GPU-1111, driver 580.1)"
    assert machine_note(base, b, True, []) is None  # an older record does not say


def test_one_arm_on_two_h100s_is_one_configuration_and_compared_by_its_matrix_default_rows():
    """random-lightning's W4A16 arm on two lent H100s (two GPU UUIDs, one model and driver), each run
    a control matrix only: their launch ports differ (a free port each), which is no difference of
    configuration; with no gate in either run, the matrices' default rows (the gate's requests, one
    at a time) are compared, and the machine note says what was compared and what was not."""
    from pathlib import Path

    from suite.compare import compare_runs

    root = Path(__file__).resolve().parents[2] / "docs" / "examples" / "gpu-lightning-results"
    c = compare_runs("20261206T044243596625Z-442868b2", "20261206T073618333390Z-533f3335", root)
    assert c.same_configuration is True
    assert [p.prompt_id for p in c.prompts] == ["document-4k", "long-open", "short-open"]
    by = {p.prompt_id: p for p in c.prompts}
    assert by["document-4k"].caveat == "tied" and (by["document-4k"].shared_answers or 0) >= 1
    assert by["long-open"].caveat == "cap" and by["short-open"].caveat == "cap"  # alike up to the 64-token cap
    assert "from the control matrix's default row" in c.verdict
    assert c.word == "undetermined"  # document-4k tied: neither alike nor parted
    assert c.machines is not None and "two machines of one GPU model and driver" in c.machines
    assert "no modal answer to compare (tied) on document-4k" in c.machines
