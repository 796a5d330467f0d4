import copy
import json

import pytest

from trials.spec import SpecError, TrialSpec, comm_precision_problem, load_spec, parse_spec

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
        (lambda s: s["candidates"][0].__setitem__("batch_size", 8.5), "candidates[0].batch_size", "integer"),
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
        (lambda s: s.__setitem__("extra", {"inject": "boom"}), "extra.inject", "one of hang, crash"),
        (lambda s: s.__setitem__("extra", {"fidelty": True}), "extra.fidelty", "unknown field (allowed: "),
        (lambda s: s.__setitem__("extra", {"damaged_codec": "fp4"}), "extra.damaged_codec", "one of fp32"),
        (lambda s: s.__setitem__("extra", []), "extra", "must be an object"),
        (lambda s: s.__setitem__("device", "gpu"), "device", "one of auto, cpu, cuda"),
        (
            lambda s: s["candidates"][0].__setitem__("lr_scale", 0),
            "candidates[0].lr_scale",
            "> 0 and <= 1024",
        ),
        (
            lambda s: s["workload"].__setitem__("comm_precision", ["fp16"]),
            "workload.comm_precision",
            "[forward, ",
        ),
        (
            lambda s: s["workload"]["tables"][0].__setitem__("name", " "),
            "workload.tables[0].name",
            "non-empty",
        ),
        (lambda s: s["workload"].__setitem__("tables", "t0"), "workload.tables", "non-empty list"),
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


DENSE = {"in_features": 13, "arch": [64, 32], "over_arch": [16, 1]}


def dense_spec(**workload):
    base = spec()
    base["workload"].update({"dense": copy.deepcopy(DENSE), **workload})
    return base


def test_dense_and_optimizer_sections_round_trip_with_their_defaults():
    parsed = parse_spec(dense_spec(optimizer={"dense": "adam", "dense_lr": 0.001}))
    workload = parsed.workload
    assert workload.dense.arch == (64, 32)
    assert workload.dense.interaction == "dot"
    assert (workload.optimizer.embedding, workload.optimizer.dense) == ("exact_adagrad", "adam")
    assert workload.compute_kernel == "fused"  # what jobs run: the optimizer inside the backward
    assert parse_spec(json.loads(parsed.to_json())) == parsed


def test_the_default_pipeline_is_the_jobs_own():
    dense = parse_spec(dense_spec())
    assert dense.pipeline_of(dense.candidates[0]) == "sparse_dist"  # a DLRM job runs TorchRec's pipeline
    sparse = parse_spec(spec())
    assert sparse.pipeline_of(sparse.candidates[0]) == "none"  # the sparse part alone: a plain loop
    chosen = parse_spec(spec(candidates=[{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 8,
                                          "pipeline": "semi_sync"}]))  # fmt: skip
    assert chosen.pipeline_of(chosen.candidates[0]) == "semi_sync"
    assert chosen.candidates[0].label().endswith("semi_sync")


@pytest.mark.parametrize(
    ("workload", "where", "words"),
    [
        ({"dense": {**DENSE, "arch": [64, 16]}}, "workload.dense.arch", "embedding dim 32"),
        ({"dense": {**DENSE, "over_arch": [16, 2]}}, "workload.dense.over_arch", "must be 1"),
        ({"dense": {**DENSE, "interaction": "cross"}}, "workload.dense.interaction", "one of dot, dcn"),
        ({"dense": {**DENSE, "arch": []}}, "workload.dense.arch", "non-empty list"),
        ({"dense": {**DENSE, "arch": [64, 32.5]}}, "workload.dense.arch[1]", "integer"),
        ({"dense": {"arch": [32], "over_arch": [1]}}, "workload.dense.in_features", "is required"),
        ({"dense": {**DENSE, "width": 3}}, "workload.dense.width", "unknown field"),
        ({"optimizer": {"embedding": "adam"}}, "workload.optimizer.embedding", "exact_sgd"),
        ({"optimizer": {"dense": "lamb"}}, "workload.optimizer.dense", "sgd, adagrad, adam"),
        ({"optimizer": {"dense_lr": 0}}, "workload.optimizer.dense_lr", "> 0"),
        ({"optimizer": {"embedding_lr": "0.1"}}, "workload.optimizer.embedding_lr", "number"),
        ({"optimizer": []}, "workload.optimizer", "must be an object"),
        ({"compute_kernel": "quantized"}, "workload.compute_kernel", "fused, dense"),
        (
            {"compute_kernel": "dense", "optimizer": {"embedding": "exact_rowwise_adagrad"}},
            "workload.optimizer.embedding",
            "fused only",
        ),
    ],
)
def test_bad_dense_optimizer_and_kernel_name_the_field(workload, where, words):
    bad = spec()
    bad["workload"].update(workload)
    with pytest.raises(SpecError) as err:
        parse_spec(bad)
    assert err.value.where == where
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_dlrm_needs_one_embedding_dim():
    bad = dense_spec()
    bad["workload"]["tables"].append({**TABLE, "name": "t1", "embedding_dim": 16})
    with pytest.raises(SpecError, match="one embedding_dim") as err:
        parse_spec(bad)
    assert err.value.where == "workload.dense"


def test_a_bad_pipeline_names_the_candidate():
    bad = spec(
        candidates=[{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 8, "pipeline": "async"}]
    )
    with pytest.raises(SpecError, match="none, base, sparse_dist, semi_sync, fused_sparse_dist") as err:
        parse_spec(bad)
    assert err.value.where == "candidates[0].pipeline"


@pytest.mark.parametrize("sharding", ["row_wise", "table_row_wise"])
@pytest.mark.parametrize("pair", [["int8", "int8"], ["int8", "fp16"], ["fp16", "int8"]])
def test_a_job_with_int8_on_a_reduce_scatter_is_refused_with_the_reason(sharding, pair):
    bad = spec()
    bad["workload"].update(sharding=sharding, comm_precision=pair)
    with pytest.raises(SpecError) as err:
        parse_spec(bad)
    assert err.value.where == "workload.comm_precision"
    assert f"int8 comms cannot run with {sharding} sharding" in str(err.value)
    assert "reduce-scatter" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("fwd", "bwd", "sharding", "refused"),
    [
        ("int8", "int8", "row_wise", True),
        ("fp32", "int8", "row_wise", True),  # the backward all-gather: no context there either
        ("int8", "fp32", "table_row_wise", True),
        ("int8", "int8", "table_wise", False),
        ("int8", "int8", "column_wise", False),
        ("fp8", "fp8", "row_wise", False),  # TorchRec swaps fp8 for fp16/bf16 on a reduce-scatter
        ("fp16", "bf16", "table_row_wise", False),
    ],
)
def test_comm_precision_problem_names_int8_on_a_reduce_scatter_only(fwd, bwd, sharding, refused):
    assert bool(comm_precision_problem(fwd, bwd, sharding)) == refused
    # int8 on an all-to-all sharding stays a valid job and a valid candidate
    ok = spec()
    ok["workload"].update(sharding="table_wise", comm_precision=["int8", "int8"])
    assert parse_spec(ok).workload.comm_precision == ("int8", "int8")


def test_extra_switches_are_typed_and_left_out_when_unset():
    parsed = parse_spec(spec(extra={"fidelity": True, "tag": "confirm"}))
    assert parsed.extra.fidelity is True
    assert parsed.extra.inject is None
    assert parsed.to_dict()["extra"] == {"fidelity": True, "tag": "confirm"}
    assert "extra" not in parse_spec(spec()).to_dict()


def test_a_quality_spec_names_its_data_and_needs_a_dense_part():
    with pytest.raises(SpecError, match='quality.data: must be "module:function"'):
        parse_spec(dense_spec() | {"quality": {"data": "no_colon"}})
    with pytest.raises(SpecError, match="quality: a convergence check trains a DLRM"):
        parse_spec(spec(quality={}))


def test_every_model_refuses_unknown_fields_in_its_json_schema():
    """The schema the REST API documents for a workload is the one the trial validates with."""
    schema = TrialSpec.model_json_schema()
    assert schema["additionalProperties"] is False
    assert all(d["additionalProperties"] is False for d in schema["$defs"].values())
    table = schema["$defs"]["TableSpec"]["properties"]
    assert (table["embedding_dim"]["minimum"], table["embedding_dim"]["maximum"]) == (1, 65536)


def test_a_whole_float_is_the_integer_json_schema_says_it_is():
    # JSON has one kind of number: 8.0 is the integer 8 to JSON Schema (what /openapi.json documents
    # for a workload), so the spec reads it as 8; 8.5, "8" and true stay refused
    parsed = parse_spec(
        spec(candidates=[{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 8.0}])
    )
    assert parsed.candidates[0].batch_size == 8
    assert type(parsed.candidates[0].batch_size) is int
    for bad in (8.5, "8", True, float("inf")):
        with pytest.raises(SpecError, match=r"candidates\[0\]\.batch_size: must be an integer"):
            parse_spec(
                spec(candidates=[{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": bad}])
            )
