import ast
from pathlib import Path

import autotuner.envvars

PACKAGE = Path(autotuner.envvars.__file__).parent


def imported_modules(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def test_envvars_never_imports_the_search_space():
    # space builds on envvars; the reverse would bring back the lint <-> space cycle.
    offenders = {
        (path.name, module)
        for path in PACKAGE.glob("*.py")
        for module in imported_modules(path)
        if module.split(".")[:2] == ["autotuner", "space"]
    }
    assert offenders == set()
