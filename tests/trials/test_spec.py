import copy
import json

import pytest

from trials.spec import SpecError, load_spec, parse_spec

TABLE = {"name": "t0", "num_embeddings": 100, "embedding_dim": 32, "pooling_factor": 2}


def spec(**overrides):
    base = {
        "workload": {"name": "w", "tables": [TABLE], "sharding": "table_wise"},
        "candidates": [{"fwd_precision": "fp16", "bwd_precision": "fp32", "batch_size": 64}],
        "warmup": 2,
        "iterations": 5,
    }
    base.update(overrides)
    return copy.deepcopy(base)


def test_valid_spec_round_trips():
    parsed = parse_spec(spec())
    assert parsed.workload.tables[0].embedding_dim == 32
    assert parsed.candidates[0].fwd_precision == "fp16"
    assert parse_spec(json.loads(parsed.to_json())) == parsed


def test_defaults_fill_optional_fields():
    parsed = parse_spec(
        {
            "workload": {"name": "w", "tables": [TABLE]},
            "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 8}],
        }
    )
    assert (parsed.warmup, parsed.iterations, parsed.device) == (5, 30, "auto")
    assert parsed.workload.sharding == "table_wise"
    assert parsed.sharding_of(parsed.candidates[0]) == "table_wise"


@pytest.mark.parametrize(
    ("mutate", "where", "words"),
    [
        (lambda s: s["workload"].pop("tables"), "workload.tables", "is required"),
        (lambda s: s["workload"].__setitem__("tables", []), "workload.tables", "non-empty"),
        (
            lambda s: s["candidates"][0].__setitem__("batch_size", 0),
            "candidates[0].batch_size",
            "between 1 and",
        ),
        (lambda s: s["candidates"][0].__setitem__("batch_size", 8.0), "candidates[0].batch_size", "integer"),
        (lambda s: s["candidates"][0].__setitem__("batch_size", True), "candidates[0].batch_size", "integer"),
        (
            lambda s: s["candidates"][0].__setitem__("fwd_precision", "fp4"),
            "candidates[0].fwd_precision",
            "one of",
        ),
        (lambda s: s["workload"].__setitem__("sharding", "diagonal"), "workload.sharding", "one of"),
        (
            lambda s: s["workload"]["tables"][0].__setitem__("embedding_dim", -1),
            "workload.tables[0].embedding_dim",
            "between 1 and",
        ),
        (lambda s: s["workload"]["tables"].append(dict(TABLE)), "workload.tables", "more than once"),
        (lambda s: s.__setitem__("candidatez", []), "candidatez", "unknown field"),
        (
            lambda s: s["candidates"][0].__setitem__("NCCL_BUFFSIZE", "1"),
            "candidates[0].NCCL_BUFFSIZE",
            "unknown field",
        ),
        (lambda s: s.__setitem__("candidates", []), "candidates", "non-empty"),
        (lambda s: s.__setitem__("iterations", 0), "iterations", "between 1 and"),
        (
            lambda s: s["workload"]["tables"][0].__setitem__("num_embeddings", 10**10),
            "workload.tables[0]",
            "8 GiB",
        ),
    ],
)
def test_bad_specs_name_the_field(mutate, where, words):
    bad = spec()
    mutate(bad)
    with pytest.raises(SpecError) as err:
        parse_spec(bad)
    assert err.value.where == where
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_non_json_and_nan_are_rejected(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_spec(path)
    path.write_text(json.dumps(spec()).replace('"warmup": 2', '"warmup": NaN'))
    with pytest.raises(SpecError, match="NaN"):
        load_spec(path)
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.json")
