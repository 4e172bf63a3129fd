"""The import graph of `suite/` has no circle and no upward import (tools/import_layers.py, which
anyone can run), and the checker finds each kind of fault in a package made to have it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("import_layers", ROOT / "tools" / "import_layers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["import_layers"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_suite_has_no_circle_no_upward_import_and_every_module_placed() -> None:
    unplaced, upward, circles = _tool().check()
    assert (unplaced, upward, circles) == ([], [], [])


def test_the_checker_finds_an_upward_import_a_circle_and_an_unplaced_module(tmp_path: Path) -> None:
    pkg = tmp_path / "suite"
    (pkg / "stages").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "stages" / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("def f():\n    from suite import bench  # a function-level import counts\n")
    (pkg / "bench.py").write_text("from suite import errors\n")
    (pkg / "stages" / "gate.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from suite import records  # a type only: not counted\n")
    (pkg / "records.py").write_text("")
    (pkg / "newthing.py").write_text("")
    unplaced, upward, circles = _tool().check(pkg)
    assert unplaced == ["suite.newthing"]
    assert upward == ["suite.errors (foundation) -> suite.bench (orchestration)"]
    assert circles == ["suite.bench <-> suite.errors"]
