"""A study's search space: env dimensions searched across launches, in-process dimensions inside one.

Public names are re-exported here; the implementations live in the modules: `dims` (a range dimension,
the points), `checks` (the registry checks, SpaceError), `sources` (strict YAML / JSON files, presets),
`model` (SearchSpace, its field types and limits), `loader` (load_space, lint_space), `schema` (a
declared space's JSON schema, for REST). The presets are
`presets/*.yaml`. Imports point one way: this package uses `autotuner.envvars`, never the reverse.
"""

from autotuner.space.checks import FIELDS, SpaceError, allow_risky_problems, schema_problems
from autotuner.space.dims import InProcPoint, IntRange, to_env_strings
from autotuner.space.loader import lint_space, load_space, stored_space
from autotuner.space.model import (
    MAX_BATCH,
    MAX_GRID,
    MAX_THREADS,
    BatchSize,
    EnvDim,
    Pipeline,
    Precision,
    SearchSpace,
    Sharding,
    Threads,
)
from autotuner.space.schema import declaration_schema
from autotuner.space.sources import PRESET_DIR, PRESETS, no_such_source, source_path

__all__ = [
    "FIELDS",
    "MAX_BATCH",
    "MAX_GRID",
    "MAX_THREADS",
    "PRESETS",
    "PRESET_DIR",
    "BatchSize",
    "EnvDim",
    "InProcPoint",
    "IntRange",
    "Pipeline",
    "Precision",
    "SearchSpace",
    "Sharding",
    "SpaceError",
    "Threads",
    "allow_risky_problems",
    "declaration_schema",
    "lint_space",
    "load_space",
    "no_such_source",
    "source_path",
    "stored_space",
    "schema_problems",
    "to_env_strings",
]
