"""Where a local Python runtime (vLLM) gets its interpreter: three ways, chosen by configuration.

A runtime definition whose `[local]` names `python_env = "SUITE_VLLM"` runs its command's
`{python}` from one of:

- **existing**: an environment that already has the runtime, named by `SUITE_VLLM_PYTHON` (an
  interpreter: a path, or a name on PATH) and optionally `SUITE_VLLM_PYTHONPATH` (an extra import
  path, put first on the runtime's PYTHONPATH). Nothing is installed. Its version must be the one
  the arm names (or the definition's default): another version is one line, before any start.
  Air-gapped GPU machines with a preinstalled vLLM (e.g. one installed into a folder used through
  PYTHONPATH) run it this way.
- **wheelhouse**: `SUITE_WHEELHOUSE` names a folder of wheels; the install recipe builds the
  runtime's own venv from it with `pip --no-index --find-links` (the venv sees the machine's own
  packages, e.g. its torch). A wheelhouse without the pinned release is one line.
- **venv**: the default: the install recipe builds the runtime's own venv from the package index.

The way is recorded in the run's signature (the interpreter and the import path are in its env,
the version in `runtime_version`) and `suite doctor` says which way each arm would use.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from suite.definitions import RuntimeDefinition, version_spec
from suite.errors import SuiteError

WHEELHOUSE_ENV = "SUITE_WHEELHOUSE"
DEFAULT_PYTHON = "{prefix}/venv/bin/python"


class PythonWay(BaseModel):
    """How a local Python runtime would run here."""

    way: Literal["venv", "wheelhouse", "existing"]
    python: str  # the interpreter the command runs (a template with {prefix} for venv and wheelhouse)
    pythonpath: str | None = None  # existing: the extra import path
    wheelhouse: str | None = None
    python_var: str  # e.g. SUITE_VLLM_PYTHON
    pythonpath_var: str

    def env(self) -> dict[str, str]:
        """What the runtime's environment gains: the extra import path first on PYTHONPATH, and the
        configuration itself (recorded with the signature's env)."""
        if self.way != "existing":
            return {WHEELHOUSE_ENV: self.wheelhouse} if self.wheelhouse else {}
        out = {self.python_var: self.python}
        if self.pythonpath:
            current = os.environ.get("PYTHONPATH")
            out[self.pythonpath_var] = self.pythonpath
            out["PYTHONPATH"] = self.pythonpath + (os.pathsep + current if current else "")
        return out

    @property
    def text(self) -> str:
        if self.way == "existing":
            return (f"the existing environment {self.python}"
                    + (f" with PYTHONPATH={self.pythonpath}" if self.pythonpath else "")
                    + f" ({self.python_var})")
        if self.way == "wheelhouse":
            return f"its own venv from the wheelhouse {self.wheelhouse} ({WHEELHOUSE_ENV}, pip --no-index)"
        return "its own venv from the package index"


def python_way(definition: RuntimeDefinition, environ: Mapping[str, str] | None = None) -> PythonWay | None:
    """The way this machine's configuration picks; None for a runtime without the knob."""
    local = definition.local
    if local is None or not local.python_env:
        return None
    env = os.environ if environ is None else environ
    var, path_var = f"{local.python_env}_PYTHON", f"{local.python_env}_PYTHONPATH"
    python = (env.get(var) or "").strip()
    if python:
        return PythonWay(way="existing", python=python, pythonpath=(env.get(path_var) or "").strip() or None,
                         python_var=var, pythonpath_var=path_var)
    wheelhouse = (env.get(WHEELHOUSE_ENV) or "").strip()
    if wheelhouse:
        return PythonWay(way="wheelhouse", python=DEFAULT_PYTHON, wheelhouse=wheelhouse, python_var=var,
                         pythonpath_var=path_var)
    return PythonWay(way="venv", python=DEFAULT_PYTHON, python_var=var, pythonpath_var=path_var)


def uses_existing(definition: RuntimeDefinition) -> bool:
    w = python_way(definition)
    return w is not None and w.way == "existing"


def expected_version(definition: RuntimeDefinition) -> str | None:
    spec = version_spec(definition)
    return definition.pinned_version or (spec.default if spec else None)


def interpreter(definition: RuntimeDefinition, prefix: Path) -> str:
    """The `{python}` of the command: the existing interpreter, else the venv's in `prefix`."""
    w = python_way(definition)
    return (w.python if w else DEFAULT_PYTHON).format(prefix=prefix)


_ASKED: dict[tuple[str, tuple[str, ...]], str] = {}  # an existing environment's answer to the version command


def check_existing(definition: RuntimeDefinition, timeout_s: float = 180.0) -> str:
    """The existing environment's version of the runtime, checked against the arm's; else one line."""
    w = python_way(definition)
    assert w is not None and w.way == "existing"
    local = definition.local
    assert local is not None
    where = f"{w.python_var}={w.python}" + (f" ({w.pythonpath_var}={w.pythonpath})" if w.pythonpath else "")
    if shutil.which(w.python) is None:
        raise SuiteError(f"{where}: no such interpreter")
    if w.pythonpath and not all(Path(p).is_dir() for p in w.pythonpath.split(os.pathsep) if p):
        raise SuiteError(f"{where}: the import path is not a folder")
    template = local.version_command or [w.python, "-c", f"import {definition.name}; print({definition.name}.__version__)"]
    command = [p.format(python=w.python, prefix="") for p in template]
    key = (where, tuple(command))
    found = _ASKED.get(key)
    if found is None:  # asked once per process: `suite doctor` lists several arms of one environment
        try:
            r = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                               env={**os.environ, **w.env()})
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SuiteError(f"{where}: cannot ask its version: {exc}") from None
        lines = [ln.strip() for ln in (r.stdout or "").splitlines() if ln.strip()]
        if r.returncode != 0 or not lines:
            err = [ln.strip() for ln in (r.stderr or "").splitlines() if ln.strip()]
            raise SuiteError(f"{where}: the runtime does not import there: {(err or ['no output'])[-1][:300]}")
        found = _ASKED[key] = lines[-1]
    wanted = expected_version(definition)
    if wanted and not _same_release(found, wanted):
        raise SuiteError(f"{where} has {definition.name} {found}; the arm names {wanted} "
                         f"(name {found} in the card's arm, or point {w.python_var} at an environment with {wanted})")
    return found


def _same_release(found: str, wanted: str) -> bool:
    """`0.24.0` is `0.24.0+cu130` (a local build tag), not `0.24.1`."""
    return re.split(r"[+]", found, maxsplit=1)[0] == re.split(r"[+]", wanted, maxsplit=1)[0]


def wheelhouse_has(definition: RuntimeDefinition, folder: str | None = None) -> bool:
    """Whether the wheelhouse holds a wheel of the runtime's package at the pinned release."""
    spec = version_spec(definition)
    folder = folder or os.environ.get(WHEELHOUSE_ENV)
    if not folder or spec is None or not spec.package:
        return False
    version = expected_version(definition)
    name = re.sub(r"[-.]+", "_", spec.package)
    return any(Path(folder).glob(f"{name}-{version}-*.whl")) or any(Path(folder).glob(f"{name}-{version}+*.whl"))


def describe(definition: RuntimeDefinition, installed_marker: Path | None) -> str | None:
    """`suite doctor`'s line: which way the arm would use, and whether it is ready."""
    w = python_way(definition)
    if w is None:
        return None
    version = expected_version(definition)
    what = f"{definition.name} {version}" if version else definition.name
    if w.way == "existing":  # the environment is asked, as the arm's start would ask it
        try:
            found = check_existing(definition)
        except SuiteError as exc:
            return f"{what} from {w.text}: {exc}"
        return f"{what} from {w.text} (it has {found})"
    if installed_marker is not None and installed_marker.exists():
        return f"{what}: installed ({installed_marker.read_text().strip()}) in {installed_marker.parent}"
    if w.way == "wheelhouse" and not wheelhouse_has(definition, w.wheelhouse):
        return f"{what} from {w.text}: the wheelhouse has no {definition.name} {version} wheel"
    return f"{what} from {w.text} (not installed yet)"
