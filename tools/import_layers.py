#!/usr/bin/env python3
"""The suite's import graph against its layers: no import circle, and no import from a lower layer
up to a higher one.

    python3 tools/import_layers.py          # prints the layers, each upward import and each circle; exit 1 if any

Every import statement counts, at module level or inside a function (a function-level import is
still a dependency at run time); an import under `if TYPE_CHECKING:` does not (it names a type for
the checker and is never executed). A module not placed in `LAYERS` is itself a fault: the map
must say where each module lives. Modules of one layer may import each other (no circle).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "suite"

# Lowest first. A module (or package: every module under it) belongs to the first layer naming it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("suite", "suite.errors", "suite.paths", "suite.progress", "suite.procid", "suite.lifetime",
                    "suite.profiles", "suite.definitions", "suite.secrets", "suite.hashing", "suite.provenance", "suite.sanitize")),
    ("analysis", ("suite.analysis",)),
    ("services", ("suite.client", "suite.gpu", "suite.contention", "suite.probes", "suite.signature",
                  "suite.launchers", "suite.recipes")),
    ("inputs", ("suite.catalog",)),
    ("stages", ("suite.stages",)),
    ("records", ("suite.records", "suite.claims", "suite.run_figures")),
    ("orchestration", ("suite.refusals", "suite.bench")),
    ("publication", ("suite.site", "suite.export", "suite.compare", "suite.schema")),
    ("entry", ("suite.distributed", "suite.cli", "suite.__main__")),
]


def modules(root: Path = ROOT / PACKAGE) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for p in sorted(root.rglob("*.py")):
        name = ".".join(p.relative_to(root.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (length of the matching prefix, layer index)
    for i, (_, names) in enumerate(LAYERS):
        for n in names:
            # the package itself is its __init__ alone; a module it does not name has no layer
            if (module == n or (n != PACKAGE and module.startswith(n + "."))) and (best is None or len(n) > best[0]):
                best = (len(n), i)
    return None if best is None else best[1]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (TYPE_CHECKING blocks aside)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.ImportFrom):
                base = m.split(".")
                if node.level:
                    keep = len(base) - node.level + (1 if path.name == "__init__.py" else 0)
                    mod = ".".join(base[:keep] + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                names = [mod, *(f"{mod}.{a.name}" for a in node.names)]
            else:
                names = [a.name for a in node.names]
            graph[m] |= {t for t in names if t in mods and t != m and not m.startswith(t + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def check(root: Path = ROOT / PACKAGE) -> tuple[list[str], list[str], list[str]]:
    """(modules with no layer, upward imports as 'a (layer) -> b (layer)', circles as 'a <-> b')."""
    mods = modules(root)
    graph = imports(mods)
    unplaced = [m for m in mods if layer_of(m) is None]
    upward = []
    for a, targets in sorted(graph.items()):
        la = layer_of(a)
        for b in sorted(targets):
            lb = layer_of(b)
            if la is not None and lb is not None and lb > la:
                upward.append(f"{a} ({LAYERS[la][0]}) -> {b} ({LAYERS[lb][0]})")
    return unplaced, upward, [" <-> ".join(c) for c in circles(graph)]


def main() -> int:
    unplaced, upward, found = check()
    for i, (name, mods) in enumerate(LAYERS):
        print(f"{i} {name}: {', '.join(mods)}")
    for m in unplaced:
        print(f"no layer: {m}")
    for line in upward:
        print(f"upward: {line}")
    for line in found:
        print(f"circle: {line}")
    if not (unplaced or upward or found):
        print(f"{len(modules())} modules: no import circle, no upward import")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
