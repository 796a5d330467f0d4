"""The dense model's size cap counts what TorchRec builds, the tables of a workload are bounded, and a
spec nested too deeply is a bad spec (exit 2), not a crash (review of trials/)."""

from __future__ import annotations

import subprocess
import sys
from math import comb
from pathlib import Path

import pytest
import torch

import trials.model
from trials.spec import MAX_DENSE_PARAMETERS, SpecError, TrialSpec, load_spec, parse_spec, parse_workload

REPO = Path(__file__).resolve().parents[2]
FP32 = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 32}


def workload(tables: int, dim: int, dense: dict) -> dict:
    shape = {"num_embeddings": 1, "embedding_dim": dim, "pooling_factor": 1}
    return {"name": "w", "tables": [{"name": f"t{i}", **shape} for i in range(tables)], "dense": dense}


def hostile(interaction: str) -> dict:
    """The reviewer's specs (/tmp/review-trials/hostile_spec.py): ~66k parameters counted, 68 GiB (dcn)
    and 122 GiB (dot) of fp32 built per rank."""
    tables, dim = (64, 4096) if interaction == "dcn" else (1000, 64)
    dense = {"in_features": 1, "arch": [dim], "over_arch": [65536, 1], "interaction": interaction}
    return {"workload": workload(tables, dim, dense), "candidates": [FP32]}


@pytest.mark.parametrize(
    ("interaction", "first_top", "cross"),
    [
        ("dcn", 65 * 4096 * 65536, 3 * (2 * 65 * 4096 * 512 + 65 * 4096)),
        ("dot", (64 + comb(1000, 2) + 1000) * 65536, 0),
    ],
)
def test_a_dense_model_too_large_to_build_is_refused_naming_its_size(interaction, first_top, cross):
    # the bottom MLP (1 -> dim), the top MLP's first layer and its logit, the cross net
    dim = 4096 if interaction == "dcn" else 64
    size = (dim + dim) + (first_top + 65536) + (65536 + 1) + cross
    with pytest.raises(SpecError) as err:
        parse_spec(hostile(interaction))
    tables = 64 if interaction == "dcn" else 1000
    assert str(err.value) == (
        f"workload.dense: a dense model of {size:,} parameters (bottom MLP, {interaction} interaction of "
        f"{tables:,} table(s), top MLP), above {MAX_DENSE_PARAMETERS:,}"
    )


@pytest.mark.parametrize("interaction", ["dot", "dcn"])
@pytest.mark.parametrize("tables", [1, 3, 8])
def test_the_count_is_what_torchrec_builds(interaction, tables):
    """trials.model's DLRM / DLRM_DCN (everything but the embedding tables) has the parameters counted."""
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    dense = {"in_features": 13, "arch": [24, 8], "over_arch": [20, 7, 1], "interaction": interaction}
    spec = parse_workload(workload(tables, 8, dense))
    assert spec.dense is not None
    configs = [EmbeddingBagConfig(name=t.name, embedding_dim=8, num_embeddings=2, feature_names=[f"f_{t.name}"])
               for t in spec.tables]  # fmt: skip
    model = trials.model._dlrm(spec.dense, EmbeddingBagCollection(configs), torch.device("cpu"))
    built = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("sparse_arch."))
    assert spec.dense.parameters(tables) == built
    from trials.spec import DCN_LAYERS, DCN_LOW_RANK

    assert (DCN_LAYERS, DCN_LOW_RANK) == (trials.model.DCN_LAYERS, trials.model.DCN_LOW_RANK)


def test_more_tables_than_a_trial_builds_are_refused_naming_the_count():
    shape = {"num_embeddings": 1, "embedding_dim": 4, "pooling_factor": 1}
    tables = [{"name": f"t{i}", **shape} for i in range(4097)]
    with pytest.raises(SpecError, match=r"^workload\.tables: 4,097 tables, above the 4,096 a trial builds$"):
        parse_spec({"workload": {"name": "w", "tables": tables}, "candidates": [FP32]})
    assert len(parse_workload({"name": "w", "tables": tables[:4096]}).tables) == 4096


@pytest.mark.parametrize("path", sorted((REPO / "trials" / "examples").glob("*.json")))
def test_the_example_specs_still_pass(path):
    assert load_spec(path).workload.dense is not None


def deep_spec(path: Path) -> Path:
    path.write_text('{"workload": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return path


def test_a_spec_nested_too_deeply_is_a_bad_spec(tmp_path):
    with pytest.raises(
        SpecError, match=r"spec\.json: not a spec: JSON nested too deeply \(past Python's recursion"
    ):
        load_spec(deep_spec(tmp_path / "spec.json"))


def test_a_value_nested_too_deeply_to_validate_is_a_bad_spec(monkeypatch):
    def recurse(obj):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(TrialSpec, "model_validate", recurse)
    with pytest.raises(SpecError, match=r"^nested too deeply to validate"):
        parse_spec({"workload": {}})


def test_the_trial_exits_2_on_a_spec_nested_too_deeply(tmp_path):
    """It exited 1 with a traceback and no result: the executor read 'some candidates failed'."""
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "trials.run", "--spec", str(deep_spec(tmp_path / "spec.json")), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "trials.run: bad spec:" in proc.stderr
    assert "JSON nested too deeply" in proc.stderr
    assert not out.exists()  # a bad spec writes no result: the exit code says it


def test_a_spec_that_is_not_utf8_is_a_bad_spec(tmp_path):
    """read_text's UnicodeDecodeError escaped load_spec as well: exit 1, a traceback, no result."""
    path = tmp_path / "spec.json"
    path.write_bytes(b'{"workload": "\xff"}')
    with pytest.raises(
        SpecError, match=r"spec\.json: not valid JSON: not UTF-8 \(byte 14: invalid start byte\)$"
    ):
        load_spec(path)


def test_a_step_whose_activations_grow_past_the_bound_is_refused_naming_the_interaction():
    from trials.spec import MAX_ACTIVATION_BYTES, SpecError, parse_spec

    def spec(tables: int, dim: int, batch: int) -> dict:
        return {"workload": {"name": "w", "dense": {"in_features": 13, "arch": [dim], "over_arch": [1]},
                             "tables": [{"name": f"t{i}", "num_embeddings": 10, "embedding_dim": dim,
                                         "pooling_factor": 1} for i in range(tables)]},
                "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": batch}]}  # fmt: skip

    # 4,000 tiny tables: a dense model of 8M parameters passes its own cap, but the dot interaction
    # keeps 4,001^2 values a sample: 245 GiB a rank at batch 4,096
    with pytest.raises(
        SpecError, match=r"keeps 244\.5 GiB of activations per rank \(the dot interaction of 4,000"
    ):
        parse_spec(spec(4000, 4, 4096))
    assert parse_spec(spec(4000, 4, 256))  # 15 GiB: within
    assert parse_spec(spec(26, 128, 1 << 20))  # a DLRM of 26 tables at the largest batch a trial takes
    assert MAX_ACTIVATION_BYTES == 32 * 1024**3
