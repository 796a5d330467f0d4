"""Before the GPU run spends its minutes: does every module that `python -m bench.gpu_check` phases a-c
import, import here? deploy/gpu/run-on-lent-gpu.sh runs it after unpacking the payload:

    python3 deploy/gpu/preflight.py OUT_FILE        (from the project root, PYTHONPATH as the run has it)

What is checked is derived from the code, not listed by hand: the run's entry modules (importing them
reaches every module-level import, the CLI's typer and rich included), and every third-party module that
a file on the run's path (autotuner/, trials/, bench/gpu_check.py, bench/trials.py) imports anywhere,
inside functions too (scipy.special for phase c's confidence intervals, rich for the final table, torch,
fbgemm_gpu, torchrec for the trials). Each entry module, and each package's modules, are imported in a process of their own; a missing module is
stubbed and the import retried, so one run names every missing module, not only the first.
OUT_FILE gets `missing: NAMES` (or `missing: none`) and a line per entry module or package. Exit 0: all import; 1: not.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"autotuner", "trials", "bench", "api", "tests"}
# The processes phases a-c start: the report and its table, torchrun's trials, `autotuner tune`.
ENTRY = ["bench.gpu_check", "bench.trials", "trials.run", "trials.plain_a2a", "autotuner.cli.commands"]
PATH = ["autotuner", "trials", "bench/gpu_check.py", "bench/trials.py"]
# On the path's folders but never run by phases a-c (the Kubernetes executor; `autotuner demo`).
NOT_RUN = ("autotuner/executors/kubernetes/", "autotuner/cli/demo.py")
CHILD = r"""
import importlib, json, sys, types
missing, errors = [], []
for target in sys.argv[1:]:
    for _ in range(50):
        try:
            importlib.import_module(target)
            break
        except ModuleNotFoundError as exc:
            if not exc.name or exc.name in sys.modules:
                errors.append(f"{target}: {type(exc).__name__}: {exc}")
                break
            top = exc.name.split(".")[0]  # what to install: the package (the project's own: the module)
            name = exc.name if top in ("autotuner", "trials", "bench", "api") else top
            if name not in missing:
                missing.append(name)
            sys.modules[exc.name] = types.ModuleType(exc.name)  # stubbed: go on to the next missing one
        except Exception as exc:  # a stub lacks what was asked of it, or a library fails to load
            errors.append(f"{target}: {type(exc).__name__}: {str(exc)[:200]}")
            break
print(json.dumps({"missing": missing, "error": None if missing else "; ".join(errors) or None}))
"""


def imported_by(path: Path) -> set[str]:
    """Third-party modules a file imports, at module level or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return {n for n in names if n.split(".")[0] not in LOCAL | set(sys.stdlib_module_names)}


def targets(root: Path = ROOT) -> dict[str, list[str]]:
    """What to import, a process each: every entry module alone, every third-party package's modules
    the path imports together (one process per package: ~20, not one per module)."""
    files = []
    for entry in PATH:
        path = root / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else []
    found: set[str] = set()
    for f in files:
        if not str(f.relative_to(root)).startswith(NOT_RUN):
            found |= imported_by(f)
    groups: dict[str, list[str]] = {name: [name] for name in ENTRY}
    for name in sorted(found):
        groups.setdefault(name.split(".")[0], []).append(name)
    return groups


def check(modules: list[str]) -> dict:
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, *modules], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {"missing": [], "error": f"the import check did not finish: {type(exc).__name__}"}


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else None
    groups = targets()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = dict(zip(groups, pool.map(check, groups.values()), strict=True))
    missing = sorted({m for r in results.values() for m in r["missing"]})
    lines = [f"missing: {' '.join(missing) or 'none'}"]
    for name, r in results.items():
        said = "ok" if not r["missing"] and not r["error"] else ""
        if r["missing"]:
            said = "missing " + ", ".join(r["missing"])
        if r["error"]:
            said = f"{said}; {r['error']}" if said else r["error"]
        lines.append(f"{name}: {said}")
    text = "\n".join(lines) + "\n"
    if out:
        out.write_text(text)
    print(text, end="")
    return 0 if all(not r["missing"] and not r["error"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
