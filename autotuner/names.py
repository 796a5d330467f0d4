"""The one rule for every name the product keys things by: cluster, workload, study.

Names end up in URLs, file paths, Slurm job names, export lines (`AUTOTUNER_CONFIG=cluster/workload/...`)
and TaskProlog lines, so they are kept plain: an explicit character set, a length, and a whole-string
match (`fullmatch`: `re.match` with `$` lets a trailing newline through). REST, the CLI and the store
all check with `check_name`; the JSON schema documents `NAME_PATTERN`.

Standard library only: the pre-job hook may import it.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable
from difflib import SequenceMatcher

from autotuner.text import shortened

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
    return shortened(repr(value), 60)


HINT_NAMES = 5  # published names a "not published" answer suggests: a hint, never the whole listing


def published_hint(cluster: str, workload: str, published: Iterable[tuple[str, str]]) -> str:
    """Why (cluster, workload) finds nothing, said against what is published: whether the cluster has any
    config at all, and the few published cluster/workload names closest to the one asked (of the cluster
    asked, when it has any). A typo'd AUTOTUNER_CLUSTER in a hook.env untunes every job that reads it; the answer
    that says "no config published" is where the typo shows. Suggestions only: `autotuner configs` and
    GET /v1/configs (read scope, as the fetch) list everything."""
    pairs = sorted(set(published))
    if not pairs:
        return "none is published yet"
    workloads: dict[str, list[str]] = {}
    for c, w in pairs:
        workloads.setdefault(c, []).append(w)
    # Named cluster by cluster (the asked one, else the closest few), so a 404 compares the asked names
    # with each distinct name once, not with every published pair (seconds of CPU at 10k configs).
    clusters = [cluster] if cluster in workloads else _closest(cluster, list(workloads))
    ranked = [(c, w) for c in clusters for w in _closest(workload, workloads[c])][:HINT_NAMES]
    closest = ", ".join(f"{c}/{w}" for c, w in ranked) + (", ..." if len(pairs) > len(ranked) else "")
    if cluster not in workloads:
        return f"no config is published for cluster {cluster} at all; closest published: {closest}"
    if (cluster, workload) not in pairs:
        return f"cluster {cluster} is known, workload {workload} is not published for it; closest published: {closest}"
    return f"published: {closest}"  # the pair is, at other node counts than asked


def _closest(name: str, names: list[str]) -> list[str]:
    """The HINT_NAMES of `names` most like `name`, the most alike first."""
    return heapq.nsmallest(HINT_NAMES, names, key=lambda x: (-SequenceMatcher(None, name, x).ratio(), x))
