"""The package's layering, read from its own imports (every ``import`` in every module,
lazy ones inside functions included).

Rules: the model imports nothing above it; policies import neither engine (the
simulator nor the live runtime); the runtime never imports the API or the
simulator; inside the runtime, the job language (``jobspec``) imports no other
part of it, the store (``storage``) and execution (``execution``) only the job
language, and only the loop (``loop``) imports them all; no module imports
itself in a loop. The same rules are written in documentation's layout page (docs/layout.md)
section and in each runtime part's docstring.
"""

from __future__ import annotations

import ast
import importlib.util
from collections import defaultdict
from pathlib import Path

import corral

ROOT = Path(corral.__file__).parent

RULES: dict[str, tuple[str, ...]] = {
    "corral.model": (
        "corral.policies",
        "corral.placement",
        "corral.sim",
        "corral.runtime",
        "corral.api",
        "corral.cli",
        "corral.train",
        "corral.service",
    ),
    "corral.policies": (
        "corral.sim",
        "corral.runtime",
        "corral.api",
        "corral.cli",
        "corral.service",
    ),
    "corral.sim": ("corral.runtime", "corral.api", "corral.cli", "corral.service"),
    "corral.runtime": ("corral.api", "corral.sim", "corral.cli", "corral.service"),
    "corral.runtime.jobspec": (
        "corral.runtime.storage",
        "corral.runtime.execution",
        "corral.runtime.loop",
    ),
    "corral.runtime.storage": ("corral.runtime.execution", "corral.runtime.loop"),
    "corral.runtime.execution": ("corral.runtime.storage", "corral.runtime.loop"),
    "corral.train": ("corral.runtime", "corral.api", "corral.sim", "corral.cli"),
}
"""Part -> parts it must never import. A module obeys the rules of every part it
is in (``corral.runtime.loop.scheduler`` those of ``corral.runtime`` and of
``corral.runtime.loop``)."""


def _target(module: str, name: str) -> str:
    """``from module import name``: the submodule where ``name`` is one, else the module."""
    candidate = f"{module}.{name}"
    path = ROOT.joinpath(*candidate.split(".")[1:])
    if path.with_suffix(".py").exists() or (path / "__init__.py").exists():
        return candidate
    return module


def import_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        module = ".".join(("corral", *path.relative_to(ROOT).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.startswith("corral"):
                    edges[module].update(_target(node.module, a.name) for a in node.names)
            elif isinstance(node, ast.Import):
                edges[module].update(a.name for a in node.names if a.name.startswith("corral"))
    return edges


def part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    found = set()
    for module, targets in edges.items():
        banned = [b for p, bs in RULES.items() if _inside(module, p) for b in bs]
        for target in targets:
            if any(_inside(target, b) for b in banned):
                found.add((module, target))
    return found


def cycles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in edges:  # a module that imports nothing of corral: no loop through it
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                out.add(frozenset(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_part_imports_what_it_must_not() -> None:
    assert violations(import_graph()) == set()


def test_runtime_never_imports_the_api() -> None:
    found = violations(import_graph())
    assert not [
        v for v in found if part(v[0]) == "corral.runtime" and v[1].startswith("corral.api")
    ]


def test_no_import_loops() -> None:
    assert cycles(import_graph()) == set()


def test_the_checker_sees_a_violation_and_a_loop() -> None:
    """The rules bite: a made-up edge from a policy to the simulator is a
    violation, and two modules importing each other are a loop."""
    edges = {"corral.policies.fifo": {"corral.sim.engine"}, "corral.sim.engine": set()}
    assert violations(edges) == {("corral.policies.fifo", "corral.sim.engine")}
    loop = {"corral.a": {"corral.b"}, "corral.b": {"corral.a"}}
    assert cycles(loop) == {frozenset({"corral.a", "corral.b"})}


def test_every_runtime_part_says_what_it_may_import() -> None:
    for name in ("jobspec", "storage", "execution", "loop"):
        spec = importlib.util.find_spec(f"corral.runtime.{name}")
        assert spec is not None and spec.origin
        doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8")))
        assert doc and "May import" in doc, name
