"""Finding a variable: the registry keyed by name, families such as NCCL_IB_*, and did-you-mean."""

from __future__ import annotations

import difflib

from autotuner.envvars.catalog import VARIABLES
from autotuner.envvars.model import UNCOVERED_SUFFIXES, EnvVar

# A prefix entry is named like "NCCL_IB_*": the star keeps it from being mistaken for a real variable.
REGISTRY: dict[str, EnvVar] = {v.name: v for v in VARIABLES}
_PREFIXES = tuple(v for v in VARIABLES if v.prefix)


def lookup(name: str) -> EnvVar | None:
    """The entry for `name`; NCCL_IB_HCA finds the NCCL_IB_* family, NCCL_IB_X_PLUGIN or NCCL_IB_X_FILE
    none (a family's rules are for settings, not for code or files to load). Names are case-sensitive,
    as in env."""
    var = REGISTRY.get(name)
    if var is not None and not var.prefix:
        return var
    family = family_of(name)
    return family if family is not None and not name.upper().endswith(UNCOVERED_SUFFIXES) else None


def family_of(name: str) -> EnvVar | None:
    """The family entry whose stem `name` starts with (NCCL_IB_* for NCCL_IB_HCA), whatever it ends in."""
    for family in _PREFIXES:
        stem = family.name.rstrip("*")
        if name.startswith(stem) and len(name) > len(stem) and "*" not in name:
            return family
    return None


def suggest(name: str) -> str | None:
    """The registered name `name` was most likely meant to be (typo, wrong case), or None."""
    exact = [n for n in REGISTRY if not REGISTRY[n].prefix]
    upper = name.upper()
    if upper in exact:
        return upper
    close = difflib.get_close_matches(upper, exact, n=1, cutoff=0.8)
    return close[0] if close else None
