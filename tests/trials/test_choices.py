"""The values of the spec's fields are written once (trials.choices): the spec, the space, the job-side
helper, the served config's checks and the GPU check read them from there, and no module keeps a copy."""

from __future__ import annotations

import ast
from typing import get_args

from tests.helpers import REPO
from trials import choices

LISTS = {name: set(value) for name, value in vars(choices).items() if name.isupper()}


def _string_sequences(tree: ast.AST) -> list[tuple[int, set[str]]]:
    """Every tuple, list or Literal[...] of three or more strings, with its line."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Tuple | ast.List) or len(node.elts) < 3:
            continue
        strings = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(strings) == len(node.elts):
            found.append((node.lineno, set(strings)))
    return found


def test_no_module_keeps_a_copy_of_a_list_of_choices():
    copies = []
    for package in ("trials", "autotuner", "api", "bench"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == REPO / "trials" / "choices.py":
                continue
            for line, strings in _string_sequences(ast.parse(path.read_text())):
                named = [name for name, values in LISTS.items() if strings == values]
                copies += [f"{path.relative_to(REPO)}:{line} {name}" for name in named]
    assert copies == []


def test_the_walk_would_see_a_copy():
    tree = ast.parse('PRECISIONS = ("fp32", "fp16", "bf16", "fp8", "int8")')
    assert _string_sequences(tree) == [(1, LISTS["PRECISIONS"])]


def test_the_users_read_the_one_source():
    from autotuner.job import exports, qcomms
    from autotuner.space import Pipeline, Precision, Sharding
    from bench import gpu_check
    from trials import spec

    assert qcomms.PRECISIONS is choices.PRECISIONS
    assert qcomms.PIPELINES is choices.PIPELINES
    assert exports.SHARDING_TYPES is choices.SHARDING_TYPES
    assert (Precision, Sharding, Pipeline) == (choices.Precision, choices.Sharding, choices.Pipeline)
    assert gpu_check.PRECISIONS is choices.PRECISIONS
    assert set(gpu_check.OVERLAPPED) <= set(choices.PIPELINES)
    fields = spec.CandidateSpec.model_fields
    assert get_args(fields["fwd_precision"].annotation) == choices.PRECISIONS
    assert spec.WorkloadSpec.model_json_schema()["properties"]["sharding"]["enum"] == list(
        choices.SHARDING_TYPES
    )
