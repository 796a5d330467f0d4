"""Every direct dependency of pyproject.toml at its floor, one `name==version` a line (for `make
test-min`). Read from pyproject itself, so a floor that is declared is a floor that is tested.

    python .ci/floors.py [--build]    # --build: the build-system requirements instead
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

FLOOR = re.compile(r"(?P<name>[A-Za-z0-9_.\-]+(?:\[[A-Za-z0-9_,\-]+\])?)\s*>=\s*(?P<version>[0-9][^,;\s]*)")
UNBOUNDED = re.compile(r"[A-Za-z0-9_.\-]+")  # no floor to test (type stubs): installed as resolved


def floors(requirements: list[str]) -> list[str]:
    pins = []
    for requirement in dict.fromkeys(requirements):
        if match := FLOOR.fullmatch(requirement):
            pins.append(f"{match['name']}=={match['version']}")
        elif UNBOUNDED.fullmatch(requirement):
            pins.append(requirement)
        else:
            raise SystemExit(f"pyproject.toml: {requirement!r}: write a floor as name>=version (or no bound)")
    return pins


def main(argv: list[str]) -> None:
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    if argv == ["--build"]:
        requirements = pyproject["build-system"]["requires"]
    else:
        project = pyproject["project"]
        extras = project.get("optional-dependencies", {}).values()
        requirements = project["dependencies"] + [r for extra in extras for r in extra]
    print("\n".join(floors(requirements)))


if __name__ == "__main__":
    main(sys.argv[1:])
