"""The one rule for every name the product keys things by: cluster, workload, study.

Names end up in URLs, file paths, Slurm job names, export lines (`AUTOTUNER_CONFIG=cluster/workload/...`)
and TaskProlog lines, so they are kept plain: an explicit character set, a length, and a whole-string
match (`fullmatch`: `re.match` with `$` lets a trailing newline through). REST, the CLI and the store
all check with `check_name`; the JSON schema documents `NAME_PATTERN`.

Standard library only: the pre-job hook may import it.
"""

from __future__ import annotations

import re

NAME_MAX_LEN = 128
NAME_RULE = "1-128 characters: letters, digits, '.', '_' or '-', starting with a letter or digit"
# For JSON schemas and pydantic (whose Rust engine reads `$` as the end of the text); code calls
# `is_name`, which matches the whole string whatever the engine.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class BadName(ValueError):
    """A name outside the rule; the message names its kind (cluster, workload, study) and the rule."""

    def __init__(self, kind: str, value: object) -> None:
        super().__init__(f"{kind} name {_shown(value)} is invalid: {NAME_RULE}")
        self.kind = kind


def is_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def check_name(kind: str, value: object) -> str:
    """`value` if it is a valid name, else BadName naming `kind`."""
    if not is_name(value):
        raise BadName(kind, value)
    assert isinstance(value, str)
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
