"""What the trial refuses up front (exit 2, one line naming the field, before torch is imported) rather
than after start-up, and what it writes: strict JSON, the marker line for every result."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import torch

import trials.spec
from tests.trials.test_launch import SCHEMA, TABLES
from trials.convergence import teacher_samples
from trials.model import make_batches
from trials.result import RESULT_MARKER, write_json_atomic
from trials.spec import SpecError, parse_spec, parse_workload

FP32 = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 8}
DLRM = {"name": "w", "tables": TABLES, "dense": {"in_features": 4, "arch": [16, 40], "over_arch": [8, 1]}}


def spec_with(**fields) -> dict:
    return {"workload": {"name": "w", "tables": TABLES}, "candidates": [FP32], **fields}


def refusal(spec: dict) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    return str(caught.value)


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        (spec_with(seed=2**32), "seed"),  # seed x 1000 + rank: past 2**64, torch.manual_seed overflowed
        (spec_with(seed=2**70), "seed"),
        (spec_with(candidates=[{**FP32, "model_seed": 2**64}]), "candidates[0].model_seed"),
        (spec_with(workload=DLRM, quality={"data_seed": 2**62}), "quality.data_seed"),  # x 7919
    ],
)
def test_a_seed_torch_cannot_take_is_refused_naming_it(spec, where):
    assert refusal(spec) == f"{where}: must be between 0 and 4294967295, got {spec_value(spec, where)}"
    assert parse_spec(spec_with(seed=2**32 - 1)).seed == 2**32 - 1  # the largest runs:
    torch.manual_seed((2**32 - 1) * 1000 + 4095)  # the input batches' seed of a rank
    torch.Generator().manual_seed((2**32 - 1) * 7919 + 1_000_003 + 4095)  # a rank's held-out samples


def spec_value(spec: dict, where: str) -> int:
    if where == "seed":
        return spec["seed"]
    if where == "quality.data_seed":
        return spec["quality"]["data_seed"]
    return spec["candidates"][0]["model_seed"]


@pytest.mark.parametrize("name", ["a.b", ".", "t.0.", " ", "\t"])
def test_a_table_name_torch_refuses_as_a_module_name_is_refused(name):
    tables = [{**TABLES[0], "name": name}]
    message = refusal(spec_with(workload={"name": "w", "tables": tables}))
    assert message.startswith("workload.tables[0].name: must be a non-empty name, not only spaces"), message


@pytest.mark.parametrize("name", ["keys", "training", "forward", "update", "_modules", "__init__", "__x__"])
def test_a_table_name_that_is_an_attribute_of_torchs_module_dict_is_refused(name):
    tables = [{**TABLES[0], "name": name}]
    message = refusal(spec_with(workload={"name": "w", "tables": tables}))
    assert message.startswith(f'workload.tables[0].name: "{name}" is taken'), message


def test_the_names_refused_are_the_module_dicts_attributes_and_those_allowed_build():
    """A torch that adds a method to ModuleDict adds a name a table may not take."""
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    taken = {n for n in dir(torch.nn.ModuleDict()) if n[:2] != "__" or n[-2:] != "__"}
    assert taken == trials.spec.MODULE_DICT_ATTRIBUTES
    # what older versions stored and torch builds: a study of such a workload still resumes
    names = ["user_id", "t-0", "T9", "x" * 200, "1_user", "_ids", "user id", "ids:v2", "café"]
    parse_workload({"name": "w", "tables": [{**TABLES[0], "name": n} for n in names]})
    EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=n, embedding_dim=4, num_embeddings=10, feature_names=[f"f_{n}"]) for n in names],
        device=torch.device("meta"),
    )  # fmt: skip


def test_the_input_cap_counts_what_a_sparse_only_workload_allocates():
    """Without a dense part the batches carry the sparse loss's weights, batch x dim_sum fp32: uncounted,
    a spec within the cap allocated 256 GiB per rank."""
    wide = [
        {"name": f"t{i}", "num_embeddings": 1, "embedding_dim": 4096, "pooling_factor": 1} for i in range(64)
    ]
    message = refusal({"workload": {"name": "w", "tables": wide}, "input_batches": 4,
                       "candidates": [{**FP32, "batch_size": 65536}]})  # fmt: skip
    assert message.startswith("candidates: 4 input batches of 65536 samples"), message
    assert "256.2 GiB per rank" in message


@pytest.mark.parametrize("dense", [False, True])
def test_the_input_cap_counts_every_tensor_of_the_batches(dense):
    workload = DLRM if dense else {"name": "w", "tables": TABLES}
    spec = parse_spec({"workload": workload, "candidates": [FP32], "input_batches": 3})
    batches = make_batches(spec.workload, 8, 3, 0, torch.device("cpu"))
    tensors = [t for b in batches for t in (b.dense_features, b.labels, b.sparse_features.values(),
                                            b.sparse_features.lengths())]  # fmt: skip
    assert spec.input_bytes(8) == sum(t.numel() * t.element_size() for t in tensors)


def test_a_held_out_set_too_small_for_the_ranks_is_refused():
    world_problem = trials.spec.world_problem
    spec = parse_spec({"workload": DLRM, "candidates": [FP32], "quality": {"eval_samples": 127}})
    world_problem(spec, 1)
    with pytest.raises(
        SpecError, match=r"^quality.eval_samples: 127 held-out samples over 2 rank\(s\) are 63"
    ):
        world_problem(spec, 2)
    world_problem(parse_spec({"workload": DLRM, "candidates": [FP32], "quality": {"eval_samples": 128}}), 2)
    world_problem(parse_spec(spec_with()), 4096)  # a timing launch holds no held-out set


def test_one_teacher_sample_is_labelled():
    """A rank's share of one sample: std() of one value is NaN, and Bernoulli(sigmoid(NaN)) raised."""
    workload = parse_workload(DLRM)
    for n in (1, 2):
        assert teacher_samples(workload, n, seed=1).labels.isfinite().all()


def test_a_result_is_strict_json(tmp_path):
    """json.dumps writes NaN, which no strict parser reads (the AUC of a held-out set of one class)."""
    write_json_atomic(tmp_path / "r.json", {"auc": math.nan, "x": [math.inf, 1.5], "t": (-math.inf,)})
    text = (tmp_path / "r.json").read_text()
    assert json.loads(text, parse_constant=pytest.fail) == {"auc": None, "x": [None, 1.5], "t": [None]}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left


PROBE = (
    "import sys; from trials.run import main; rc = main(['--spec', sys.argv[1], '--out', sys.argv[2]]);"
    "print('torch imported' if 'torch' in sys.modules else 'torch not imported'); sys.exit(rc)"
)


def run_main(tmp_path: Path, spec: dict, out: Path, env: dict[str, str] | None = None):
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "spec.json"), str(out)],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_a_held_out_set_too_small_for_the_launch_fails_fast_with_one_line(tmp_path):
    spec = {"workload": DLRM, "candidates": [FP32], "quality": {"train_samples": 2048, "eval_samples": 4}}
    proc = run_main(tmp_path, spec, tmp_path / "r.json", {"WORLD_SIZE": "2", "RANK": "0"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.strip() == "torch not imported"
    assert proc.stderr.startswith(
        "trials.run: bad spec: quality.eval_samples: 4 held-out samples over 2 rank(s)"
    )
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_out_path_that_cannot_be_written_fails_fast_naming_it(tmp_path):
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "result.json"  # a folder that is a file: not writable, even for root
    proc = run_main(tmp_path, spec_with(), out)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout.strip() == "torch not imported"  # before the imports, the group, the measuring
    assert proc.stderr.startswith(f"trials.run: bad --out on rank 0: cannot write the result to {out}: ")
    proc = run_main(tmp_path, spec_with(), tmp_path)  # a folder
    assert proc.returncode == 2
    assert f"{tmp_path} is a directory" in proc.stderr


@pytest.mark.slow
def test_an_error_result_is_printed_as_the_marker_line_and_matches_the_schema(tmp_path):
    """On Kubernetes the result comes from the pod's log: an error result that was only written to the
    pod's disk was lost, and the launch read as one that left no result."""
    (tmp_path / "spec.json").write_text(json.dumps(spec_with(device="cuda")))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "trials.run", "--spec", str(tmp_path / "spec.json"), "--out", str(tmp_path / "r.json"),
         "--print-result"], capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-2000:]
    printed = [line for line in proc.stdout.splitlines() if line.startswith(f"{RESULT_MARKER} ")]
    assert len(printed) == 1, proc.stdout
    result = json.loads(printed[0].split(" ", 1)[1])
    assert result == json.loads((tmp_path / "r.json").read_text())
    assert result["status"] == "error"
    assert "no GPU is visible" in result["error"]
    jsonschema.validate(result, SCHEMA)
