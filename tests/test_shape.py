"""Units a reader can hold in their head: no function over 60 lines, no class over 300, in any
package of the product (migrations and the benchmarks included)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

PACKAGES = ("autotuner", "api", "trials", "bench")
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 300


def too_long(path: Path, root: Path = REPO) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        limit = (
            MAX_FUNCTION_LINES
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            else MAX_CLASS_LINES
            if isinstance(node, ast.ClassDef)
            else None
        )
        if limit is not None and (lines := node.end_lineno - node.lineno + 1) > limit:
            found.append(
                f"{path.relative_to(root)}:{node.lineno} {node.name}: {lines} lines (at most {limit})"
            )
    return found


def test_no_function_or_class_is_too_long():
    files = [p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))]
    assert len(files) > 100  # the walk sees the tree
    assert [line for path in files for line in too_long(path)] == []


def test_the_check_sees_a_long_function_and_class(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    methods = "\n".join(f"    def m{i}(self):\n        return {i}\n" for i in range(MAX_CLASS_LINES // 3 + 1))
    path = tmp_path / "probe.py"
    path.write_text(f"def f():\n{body}\n\n\ndef g():\n    pass\n\n\nclass C:\n{methods}")
    assert too_long(path, tmp_path) == [
        f"probe.py:1 f: {MAX_FUNCTION_LINES + 1} lines (at most {MAX_FUNCTION_LINES})",
        f"probe.py:{MAX_FUNCTION_LINES + 8} C: {MAX_CLASS_LINES + 3} lines (at most {MAX_CLASS_LINES})",
    ]
