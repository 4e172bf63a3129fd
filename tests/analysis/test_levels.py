"""The statistical levels live in one place (suite.analysis.levels): no other module of the suite
writes one as a number, and changing it there changes the verdicts that use it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEVELS = {0.05, 0.95, 0.01, 0.99, 0.025, 0.975}
# numbers that look like a level and are not one: a unit's factor
NOT_LEVELS = {("suite/analysis/scoring.py", 0.01)}


def test_no_module_writes_a_level_as_a_number() -> None:
    found = []
    for path in sorted((ROOT / "suite").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel == "suite/analysis/levels.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, float) and node.value in LEVELS \
                    and (rel, node.value) not in NOT_LEVELS:
                found.append(f"{rel}:{node.lineno} {node.value}")
    assert not found, found


def test_changing_the_level_in_its_one_place_changes_the_verdicts_that_use_it() -> None:
    """A control row with one answer in 20 over two launches against 3 other answers in 20 at default:
    Fisher's p = 0.115, not credited at 5 %, credited at 20 %; the gate's bound and the elimination's
    family read the same place."""
    script = """
import suite.analysis.levels as L
L.ALPHA, L.CONFIDENCE = {alpha}, 1 - {alpha}
from suite.analysis.claims import Family
from suite.analysis.repro import Sample, analyse, unseen_share_bound
from suite.stages.controls import MatrixRow, ControlMatrixResult, eliminate, row_from_gate
from suite.stages.gate_models import GatePromptResult, GateResult
def gate(others, label):
    s = [Sample(index=i, text="b" if 0 < i <= others else "a", token_ids=[2] if 0 < i <= others else [1]) for i in range(20)]
    p = GatePromptResult.from_analysis(analyse(s), prompt_id="p", max_tokens=8)
    return GateResult(label=label, n_requests=20, seed=1, temperature=0.0, logprobs=False, prompts=[p],
                      reproducible=None, verdict="", wall_s=1.0, http_s=1.0)
d = row_from_gate(MatrixRow(configuration="default", status="ok"), gate(3, "default"))
c = row_from_gate(MatrixRow(configuration="c", status="ok", launches=2), gate(0, "c"))
r = ControlMatrixResult(runtime="r", arm="a", requested=["all"], n_requests=20, prompts=["p"], rows=[d, c])
eliminate(r, gate(3, "default"))
print(r.restoring == ["c"], r.alpha, Family(name="f", size=2, correction="Holm").alpha, round(unseen_share_bound(20), 3))
"""
    out = {}
    for alpha in (0.05, 0.2):
        r = subprocess.run([sys.executable, "-c", script.format(alpha=alpha)], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out[alpha] = r.stdout.split()
    assert out[0.05][:3] == ["False", "0.05", "0.05"] and out[0.2][:3] == ["True", "0.2", "0.2"]
    assert float(out[0.2][3]) < float(out[0.05][3])  # a looser confidence bounds an unseen answer tighter
