"""The summary's fields as the type checker reads them (records.py declares them under
TYPE_CHECKING) are those the built-in stages and the watchdog give the model at run time, each
with the same result model: a stage added to the registry without its line there fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from suite import records
from suite.stages import BUILT_IN


def _declared() -> dict[str, str]:
    """The `Summary` class written for the type checker: field name -> result model's name."""
    tree = ast.parse(Path(records.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Summary":
            out: dict[str, str] = {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    union = item.annotation
                    assert isinstance(union, ast.BinOp), ast.unparse(union)
                    out[item.target.id] = ast.unparse(union.left)
            return out
    raise AssertionError("records.py declares no Summary class for the type checker")


def test_the_checked_summary_has_each_built_in_stage_and_the_watchdog_with_its_model() -> None:
    built_in = {name: model for name, model in records.RESULT_MODELS.items()
                if name == "watchdog" or name in {s.name for s in BUILT_IN}}
    assert _declared() == {name: model.__name__ for name, model in built_in.items()}


def test_the_run_time_summary_has_a_field_per_result_model() -> None:
    fields = records.Summary.model_fields
    for name in records.RESULT_MODELS:
        assert name in fields and fields[name].default is None
