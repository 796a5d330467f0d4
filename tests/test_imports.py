"""Imports point one way: trials/ <- autotuner/ <- api/, and no module imports itself round a cycle.

Every import statement of the three packages is read (at module level or inside a function alike):
`import a.b` and `from a.b import c` are edges to the modules they name (to `a.b.c` when it is a
module). A package's own `__init__` re-exporting its modules is an edge like any other. Below, what
trials/ and the job side may import from outside the repository.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

PACKAGES = ("trials", "autotuner", "api")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    _module_name(p): p
    for package in PACKAGES
    for p in sorted((REPO / package).rglob("*.py"))
    if "migrations" not in p.parts
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                      for a in node.names}  # fmt: skip
    return {name for name in found if name.split(".")[0] in PACKAGES}


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def test_every_import_names_a_module_of_ours():
    unknown = {(m, i) for m, imports in GRAPH.items() for i in imports if i not in MODULES}
    assert not unknown


@pytest.mark.parametrize(
    ("package", "must_not_import"), [("trials", ("autotuner", "api")), ("autotuner", ("api",))]
)
def test_imports_point_one_way(package, must_not_import):
    wrong = sorted((m, i) for m, imports in GRAPH.items() if m.split(".")[0] == package
                   for i in imports if i.split(".")[0] in must_not_import)  # fmt: skip
    assert wrong == []


def cycles_in(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle a depth-first walk closes, as the path round it."""
    found: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


def test_no_import_cycle():
    assert cycles_in(GRAPH) == []


def test_the_walk_would_see_a_cycle():
    """A guard against a walk that sees nothing: the graph holds the edges we know, and the search
    finds a cycle planted in it."""
    assert "autotuner.tuning.driver" in GRAPH["autotuner.tuning"]
    assert "autotuner.store" in GRAPH["autotuner.tuning.driver"]
    planted = {**GRAPH, "autotuner.store": GRAPH["autotuner.store"] | {"autotuner.tuning.driver"}}
    assert ["autotuner.store", "autotuner.tuning.driver", "autotuner.store"] in [
        c[-3:] for c in cycles_in(planted)
    ]


# What trials/ may import besides itself and the standard library: the torch stack it measures, and
# pydantic for the spec's models (light, no torch conflict, installed with this package). Never the
# engine's or the service's libraries (optuna, fastapi, sqlalchemy, ...): the trial runs on the cluster.
TRIALS_MAY_IMPORT = {"torch", "torchrec", "fbgemm_gpu", "numpy", "pydantic", "pydantic_core"}


def _third_party(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - set(PACKAGES)


def test_trials_imports_the_torch_stack_and_pydantic_only():
    trials = {name: path for name, path in MODULES.items() if name.startswith("trials")}
    wrong = {name: sorted(_third_party(path) - TRIALS_MAY_IMPORT) for name, path in trials.items()}
    assert {name: found for name, found in wrong.items() if found} == {}
    assert "pydantic" in _third_party(MODULES["trials.spec"])  # the walk sees what the spec imports


JOB_SIDE = sorted(name for name in MODULES if name.startswith("autotuner.job"))


def test_the_job_side_imports_only_the_standard_library():
    """Every module of autotuner/job (what a training job's prolog and script import) loads with the
    standard library only. They read the spec's choices from trials.choices, which is standard library
    only; the spec itself (pydantic) stays out."""
    assert {"autotuner.job.hook", "autotuner.job.exports", "autotuner.job.qcomms"} <= set(JOB_SIDE)
    code = (
        f"import sys, {', '.join(JOB_SIDE)}\n"
        "tops = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)\n"
        "print(sorted(m for m in tops if not m.startswith('_') and m != 'site'))\n"
        "print(sorted(m for m in sys.modules if m.startswith('trials')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == ["['autotuner', 'trials']", "['trials', 'trials.choices']"], out.stderr
    assert _third_party(MODULES["trials.choices"]) == set()
