"""The package's layering, read from its own imports (every ``import`` in every module,
lazy ones inside functions included).

Rules: the model imports nothing above it; policies import neither engine (the
simulator nor the live runtime); the runtime never imports the API or the
simulator; no module imports itself in a loop. The exceptions that exist today
are listed with why; the test fails on a new violation, and on a listed one
that has gone (so the list stays true).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import corral

ROOT = Path(corral.__file__).parent

RULES: dict[str, tuple[str, ...]] = {
    "corral.model": (
        "corral.policies",
        "corral.sim",
        "corral.runtime",
        "corral.api",
        "corral.cli",
        "corral.train",
    ),
    "corral.policies": ("corral.sim", "corral.runtime", "corral.api", "corral.cli"),
    "corral.runtime": ("corral.api", "corral.sim", "corral.cli"),
}
"""Part -> parts it must never import."""

KNOWN_VIOLATIONS = {
    # Hare's planners still live in the simulator (issue: policies own their planners)
    ("corral.policies", "corral.sim.rounds.planners"),
    ("corral.runtime.round_policy", "corral.sim.rounds.listsched"),
    ("corral.runtime.round_policy", "corral.sim.rounds.planners"),
    ("corral.runtime.round_policy", "corral.sim.rounds.workload"),
}
KNOWN_CYCLES = {
    # the result type is defined beside the engine that the checker's module serves
    frozenset({"corral.sim.engine", "corral.sim.invariants"}),
    # the task runners share helpers through each other
    frozenset({"corral.train.round_keeper", "corral.train.rounds", "corral.train.run_task"}),
    frozenset({"corral.train", "corral.train.session"}),
}


def import_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        module = ".".join(("corral", *path.relative_to(ROOT).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.startswith("corral"):
                    edges[module].add(node.module)
            elif isinstance(node, ast.Import):
                edges[module].update(a.name for a in node.names if a.name.startswith("corral"))
    return edges


def part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def violations(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    found = set()
    for module, targets in edges.items():
        banned = RULES.get(part(module), ())
        for target in targets:
            if target.startswith(banned):
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
    found = violations(import_graph())
    assert found - KNOWN_VIOLATIONS == set(), "new layering violations"
    assert KNOWN_VIOLATIONS - found == set(), "listed violations that are gone: drop them"


def test_runtime_never_imports_the_api() -> None:
    found = violations(import_graph())
    assert not [
        v for v in found if part(v[0]) == "corral.runtime" and v[1].startswith("corral.api")
    ]


def test_no_import_loops_but_the_listed_ones() -> None:
    found = cycles(import_graph())
    assert found - KNOWN_CYCLES == set(), "new import loops"
    assert KNOWN_CYCLES - found == set(), "listed loops that are gone: drop them"
