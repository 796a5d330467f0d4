"""autotuner.job.qcomms, what a training script imports: it reads back what the hook exports, and the
TorchRec objects it builds are torchrec's own for those precisions (real torchrec and fbgemm, on CPU)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.fbgemm_qcomm_codec import CommType, QCommsConfig, get_qcomm_codecs_registry

from autotuner.job.exports import config_to_dict, render
from autotuner.job.qcomms import (
    PRECISIONS,
    Tuned,
    qcomm_codecs_registry,
    qcomms_config,
    tuned,
    tuned_sharder_kwargs,
)
from trials.codecs import ROW_DIM

CPU = torch.device("cpu")
PAIRS = list(itertools.product(PRECISIONS, PRECISIONS))


def env_of(fwd: str, bwd: str) -> dict[str, str]:
    return {"AUTOTUNER_FWD_PRECISION": fwd, "AUTOTUNER_BWD_PRECISION": bwd}


def exported(fmt: str, **fields: object) -> dict[str, str]:
    """The AUTOTUNER_* a job gets from the hook for a published config with these fields."""
    row = SimpleNamespace(env={"NCCL_NSOCKS_PERTHREAD": "4"}, cluster=SimpleNamespace(name="c"),
                          workload=SimpleNamespace(name="w"), nodes=2, version=3, pinned=False,
                          created_at=SimpleNamespace(isoformat=lambda: "2026-01-01T00:00:00"), evidence={},
                          fingerprint={}, study_id=1, **fields)  # fmt: skip
    lines = render(config_to_dict(row), fmt).splitlines()
    pairs = (line.removeprefix("export ").split("=", 1) for line in lines if line.startswith("export "))
    return {name: value for name, value in pairs if name.startswith("AUTOTUNER_")}


@pytest.mark.parametrize("fmt", ["slurm", "sh"])
def test_what_the_hook_exports_is_read_back(fmt):
    fields = {"fwd_precision": "fp8", "bwd_precision": "bf16", "batch_size": 1024, "sharding": "row_wise",
              "num_threads": 4, "pipeline": "sparse_dist", "lr_scale": 2.0}  # fmt: skip
    read = tuned(exported(fmt, **fields))
    assert read == Tuned(**fields, config="c/w/2n/v3")
    assert read.quantized


def test_a_config_that_says_nothing_keeps_the_jobs_own():
    plain = {"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": None, "sharding": None,
             "num_threads": None, "pipeline": None, "lr_scale": None}  # fmt: skip
    assert tuned(exported("slurm", **plain)) == Tuned(config="c/w/2n/v3")
    assert tuned({}) == Tuned()
    assert not tuned({}).quantized
    assert qcomm_codecs_registry(CPU, {}) is None
    assert tuned_sharder_kwargs(CPU, {}) == {"qcomm_codecs_registry": None}


def test_values_are_read_leniently_where_unambiguous():
    read = tuned({"AUTOTUNER_FWD_PRECISION": " FP16 ", "AUTOTUNER_BATCH_SIZE": "", "AUTOTUNER_PIPELINE": ""})
    assert (read.fwd_precision, read.batch_size, read.pipeline) == ("fp16", None, None)


@pytest.mark.parametrize(
    ("name", "value"),
    [("AUTOTUNER_FWD_PRECISION", "fp4"), ("AUTOTUNER_BWD_PRECISION", "int4"), ("AUTOTUNER_BATCH_SIZE", "0"),
     ("AUTOTUNER_BATCH_SIZE", "-8"), ("AUTOTUNER_NUM_THREADS", "two"), ("AUTOTUNER_PIPELINE", "fast"),
     ("AUTOTUNER_LR_SCALE", "0"), ("AUTOTUNER_LR_SCALE", "nan"), ("AUTOTUNER_LR_SCALE", "2x")],
)  # fmt: skip
def test_a_bad_value_raises_naming_the_variable(name, value):
    with pytest.raises(ValueError, match=f"^{name}="):
        tuned({name: value})


@pytest.mark.parametrize(("fwd", "bwd"), PAIRS)
def test_the_qcomms_config_is_torchrecs_for_those_precisions(fwd, bwd):
    fp8 = "fp8" in (fwd, bwd)  # row-wise fp8, as the trial measured it
    expected = QCommsConfig(forward_precision=CommType(fwd), backward_precision=CommType(bwd),
                            fp8_quantize_dim=ROW_DIM if fp8 else None)  # fmt: skip
    assert qcomms_config(env_of(fwd, bwd)) == expected


@pytest.mark.parametrize(("fwd", "bwd"), [p for p in PAIRS if p != ("fp32", "fp32")])
def test_the_codecs_are_torchrecs_for_that_config(fwd, bwd):
    registry = qcomm_codecs_registry(CPU, env_of(fwd, bwd))
    reference = get_qcomm_codecs_registry(qcomms_config(env_of(fwd, bwd)), device=CPU)
    assert registry is not None
    assert registry.keys() == reference.keys()
    for op, codecs in registry.items():
        want = reference[op]
        assert (codecs.forward.quantized_dtype, codecs.backward.quantized_dtype) == (
            want.forward.quantized_dtype,
            want.backward.quantized_dtype,
        ), op


@pytest.mark.parametrize(("fwd", "dtype"), [("fp16", torch.float16), ("int8", torch.uint8)])
def test_a_sharder_built_from_it_quantizes_the_all_to_all(fwd, dtype):
    sharder = EmbeddingBagCollectionSharder(**tuned_sharder_kwargs(CPU, env_of(fwd, "fp16")))
    codec = sharder.qcomm_codecs_registry["POOLED_EMBEDDINGS_ALL_TO_ALL"].forward
    embeddings = torch.randn(8, 64)
    ctx = codec.create_context()  # int8's row scales travel in it
    encoded = codec.encode(embeddings, ctx)
    assert encoded.dtype == dtype
    decoded = codec.decode(encoded, ctx).reshape(embeddings.shape)  # int8 hands back one flat row
    assert torch.allclose(decoded, embeddings, atol=0.05)


def test_reading_the_config_imports_neither_torch_nor_torchrec():
    code = ("import sys; from autotuner.job.qcomms import tuned; tuned({'AUTOTUNER_FWD_PRECISION': 'fp8'}); "
            "print(sorted(m for m in ('torch', 'torchrec', 'fbgemm_gpu') if m in sys.modules))")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
