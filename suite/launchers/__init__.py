"""Launcher registry: `local` (a child process group) and `docker` (a container).

`get_launcher(name)` answers an unknown name with the list of known ones.
"""

from __future__ import annotations

import importlib

from suite.errors import SuiteError
from suite.launchers.base import Launcher

# name -> "module:Class"; imported lazily so that Docker's SDK is loaded only when used.
LAUNCHERS: dict[str, str] = {
    "local": "suite.launchers.local:LocalLauncher",
    "docker": "suite.launchers.docker:DockerLauncher",
}


def get_launcher(name: str) -> Launcher:
    target = LAUNCHERS.get(name)
    if target is None:
        raise SuiteError(f"unknown launcher {name!r}; known: {', '.join(sorted(LAUNCHERS))}")
    module_name, class_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls()
