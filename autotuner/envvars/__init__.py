"""Environment variables: the registry of what NCCL, aws-ofi-nccl, libfabric and PyTorch accept, and the
rules that judge a name, a value and a combination of them.

Public names are re-exported here; the implementations live in the modules:
`model` (an entry's shape), `catalog` (the entries), `registry` (lookup), `problems` (what a rule
reports), `integers` (strtoll), `values` (one name, one value), `relations` (combinations), `lint`
(a concrete env). Nothing here imports the search space: `autotuner.space` builds on this package.
"""

from autotuner.envvars.catalog import VARIABLES
from autotuner.envvars.integers import is_decimal, nccl_int
from autotuner.envvars.lint import lint_env, parse_assignments
from autotuner.envvars.model import (
    COLLECTIVES,
    EVERY_OP,
    KINDS,
    P2P,
    SAFE_CHARS,
    TRANSPORTS,
    Domain,
    EnvVar,
    Safety,
)
from autotuner.envvars.problems import RULES, Problem, Severity, errors, format_problems, show_value
from autotuner.envvars.registry import REGISTRY, lookup, suggest
from autotuner.envvars.relations import (
    ALL_TO_ALL_SHARDING,
    MAX_SOCKETS,
    ORDERED_PAIRS,
    RDMA_ONLY,
    READ_TOGETHER,
    Span,
    acting_with,
    read_together,
    relation_problems,
)
from autotuner.envvars.values import (
    MAX_VALUE_LEN,
    canonical,
    check_name,
    check_value,
    is_path_valued,
    safety_problems,
    served_problems,
)

__all__ = [
    "ALL_TO_ALL_SHARDING",
    "COLLECTIVES",
    "EVERY_OP",
    "KINDS",
    "MAX_SOCKETS",
    "MAX_VALUE_LEN",
    "ORDERED_PAIRS",
    "P2P",
    "RDMA_ONLY",
    "READ_TOGETHER",
    "REGISTRY",
    "RULES",
    "SAFE_CHARS",
    "TRANSPORTS",
    "VARIABLES",
    "Domain",
    "EnvVar",
    "Problem",
    "Safety",
    "Severity",
    "Span",
    "acting_with",
    "canonical",
    "check_name",
    "check_value",
    "errors",
    "format_problems",
    "is_decimal",
    "is_path_valued",
    "lint_env",
    "lookup",
    "nccl_int",
    "parse_assignments",
    "read_together",
    "relation_problems",
    "safety_problems",
    "served_problems",
    "show_value",
    "suggest",
]
