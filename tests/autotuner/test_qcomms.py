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

from autotuner.job import qcomms
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


@pytest.fixture(autouse=True)
def _nothing_said_yet(monkeypatch):
    """Each test sees its own stderr lines (the module says each one once a process)."""
    monkeypatch.setattr(qcomms, "_said", set(), raising=False)


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


HOSTILE = [("AUTOTUNER_FWD_PRECISION", "fp4"), ("AUTOTUNER_BWD_PRECISION", "int4"), ("AUTOTUNER_BATCH_SIZE", "0"),
           ("AUTOTUNER_BATCH_SIZE", "-8"), ("AUTOTUNER_BATCH_SIZE", "abc"), ("AUTOTUNER_BATCH_SIZE", "\u00b2"),
           ("AUTOTUNER_NUM_THREADS", "two"), ("AUTOTUNER_PIPELINE", "fast"), ("AUTOTUNER_SHARDING", "diagonal"),
           ("AUTOTUNER_LR_SCALE", "0"), ("AUTOTUNER_LR_SCALE", "nan"), ("AUTOTUNER_LR_SCALE", "2x"),
           ("AUTOTUNER_LR_SCALE", "1e9")]  # fmt: skip


@pytest.mark.parametrize(("name", "value"), HOSTILE)
def test_a_bad_value_is_ignored_and_said_never_raised(name, value, capsys):
    """The job side never fails a job: the job's own setting stays, and stderr names what was ignored."""
    partner = {"AUTOTUNER_LR_SCALE": ("AUTOTUNER_BATCH_SIZE", "1024")}.get(name)  # a scale needs a batch
    read = tuned(dict([(name, value), *([partner] if partner else [])]))
    assert read == Tuned()
    said = capsys.readouterr().err
    assert f"nccl-autotuner: ignored {name}={value!r}: expected" in said, said


@pytest.mark.parametrize(("name", "value"), HOSTILE)
def test_strict_raises_naming_the_variable(name, value):
    partner = {"AUTOTUNER_LR_SCALE": ("AUTOTUNER_BATCH_SIZE", "1024")}.get(name)
    with pytest.raises(ValueError, match=f"^{name}="):
        tuned(dict([(name, value), *([partner] if partner else [])]), strict=True)


def test_what_goes_together_is_ignored_together(capsys):
    """A config is validated whole: half a precision pair, or a batch without its learning-rate
    factor (or the factor without its batch), is not a config that was measured."""
    assert tuned({"AUTOTUNER_FWD_PRECISION": "fp4", "AUTOTUNER_BWD_PRECISION": "fp16"}) == Tuned()
    assert tuned({"AUTOTUNER_BATCH_SIZE": "1024", "AUTOTUNER_LR_SCALE": "1e9"}) == Tuned()
    assert tuned({"AUTOTUNER_BATCH_SIZE": "abc", "AUTOTUNER_LR_SCALE": "1.41"}) == Tuned()
    assert (
        tuned({"AUTOTUNER_LR_SCALE": "1.41"}) == Tuned()
    )  # a factor on the job's own batch: never validated
    said = capsys.readouterr().err
    assert "keeping fp32/fp32 comms" in said
    assert "AUTOTUNER_LR_SCALE='1.41': expected only with AUTOTUNER_BATCH_SIZE" in said
    kept = tuned(
        {"AUTOTUNER_BATCH_SIZE": " 1024 ", "AUTOTUNER_LR_SCALE": "1.41", "AUTOTUNER_PIPELINE": "turbo"}
    )
    assert (kept.batch_size, kept.lr_scale, kept.pipeline) == (1024, 1.41, None)  # the rest stays


def test_each_problem_is_said_once_a_process(capsys):
    for _ in range(3):  # qcomm_codecs_registry reads the config twice, a script may read it again
        tuned({"AUTOTUNER_BATCH_SIZE": "abc"})
    assert capsys.readouterr().err.count("ignored AUTOTUNER_BATCH_SIZE") == 1


def test_the_device_may_be_named():
    kwargs = tuned_sharder_kwargs("cpu", env_of("fp16", "fp16"))  # was: 'str' object has no attribute 'type'
    assert (
        kwargs["qcomm_codecs_registry"]["POOLED_EMBEDDINGS_ALL_TO_ALL"].forward.quantized_dtype
        == torch.float16
    )


@pytest.mark.parametrize("bwd", ["fp8", "bf16"])
def test_fp8_runs_on_cpu_with_the_codec_the_trial_measured(bwd):
    """FBGEMM's fp8 kernels are CUDA only ("fp8 is not supported by CPU" at the job's first step):
    off CUDA the registry carries the CPU codec of the same wire format."""
    from trials.codecs import CpuFp8RowwiseCodec

    registry = qcomm_codecs_registry(CPU, env_of("fp8", bwd))
    assert registry is not None
    codec = registry["POOLED_EMBEDDINGS_ALL_TO_ALL"].forward
    assert isinstance(codec, CpuFp8RowwiseCodec)
    embeddings = torch.randn(8, 64)
    ctx = codec.create_context()
    decoded = codec.decode(codec.encode(embeddings, ctx), ctx).reshape(embeddings.shape)
    assert torch.linalg.vector_norm(decoded - embeddings) / torch.linalg.vector_norm(embeddings) < 0.1
    assert (registry["POOLED_EMBEDDINGS_ALL_TO_ALL"].backward.quantized_dtype == torch.uint8) == (
        bwd == "fp8"
    )


def test_the_planner_constraints_shard_the_tuned_way(capsys):
    sharder = EmbeddingBagCollectionSharder()
    tables = ["user", "item"]
    table_wise = qcomms.tuned_constraints(tables, sharder, CPU, environ={"AUTOTUNER_SHARDING": "table_wise"})
    assert {name: c.sharding_types for name, c in table_wise.items()} == {
        "user": ["table_wise"],
        "item": ["table_wise"],
    }
    assert (
        qcomms.tuned_constraints(tables, sharder, CPU, environ={}) == {}
    )  # unsaid, no default: the planner's
    own = qcomms.tuned_constraints(tables, sharder, CPU, default="column_wise", environ={})
    assert own["user"].sharding_types == ["column_wise"]
    # TorchRec plans row_wise on CUDA only: on CPU the job's own stays, and it is said.
    cpu = qcomms.tuned_constraints(
        tables, sharder, "cpu", default="table_wise", environ={"AUTOTUNER_SHARDING": "row_wise"}
    )
    assert cpu["item"].sharding_types == ["table_wise"]
    assert "ignored AUTOTUNER_SHARDING='row_wise'" in capsys.readouterr().err
    cuda = qcomms.tuned_constraints(
        tables, sharder, "cuda", default="table_wise", environ={"AUTOTUNER_SHARDING": "row_wise"}
    )
    assert cuda["item"].sharding_types == ["row_wise"]


def test_the_train_pipeline_is_the_one_named(monkeypatch, capsys):
    from torchrec.distributed.train_pipeline import train_pipelines

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def built(environ, default="sparse_dist"):
        return type(
            qcomms.tuned_train_pipeline(model, optimizer, "cpu", default=default, environ=environ)
        ).__name__

    assert built({}) == "TrainPipelineSparseDist"  # the job's own
    assert built({}, default="base") == "TrainPipelineBase"
    assert built({"AUTOTUNER_PIPELINE": "sparse_dist"}, default="none") == "TrainPipelineSparseDist"
    assert built({"AUTOTUNER_PIPELINE": "none"}) == "PlainLoop"
    # measured on GPUs, served to a CPU job: refused before its first step would fail the job
    for stream_only in ("semi_sync", "fused_sparse_dist"):
        assert built({"AUTOTUNER_PIPELINE": stream_only}) == "TrainPipelineSparseDist"
        said = capsys.readouterr().err
        assert f"ignored AUTOTUNER_PIPELINE='{stream_only}'" in said
        assert "needs CUDA streams and this device is cpu" in said
    monkeypatch.delattr(train_pipelines, "TrainPipelineSemiSync")  # an older torchrec
    assert built({"AUTOTUNER_PIPELINE": "semi_sync"}) == "TrainPipelineSparseDist"
    assert "ignored AUTOTUNER_PIPELINE='semi_sync'" in capsys.readouterr().err


def test_a_plain_loop_steps_like_a_pipeline():
    """pipeline "none": progress(batches) runs zero_grad, forward, backward, step, and returns what the
    model returns beside the loss, as TorchRec's pipelines do."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    class Train(torch.nn.Module):
        def forward(self, x):
            loss = model(x).pow(2).mean()
            return loss, (loss.detach(),)

    loop = qcomms.tuned_train_pipeline(Train(), optimizer, CPU, environ={"AUTOTUNER_PIPELINE": "none"})
    first = loop.progress(iter([torch.ones(4, 2)]))[0]
    assert float(loop.progress(iter([torch.ones(4, 2)]))[0]) < float(first)


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


def test_every_learning_rate_factor_the_gate_accepts_is_exported_so_that_it_passes_again():
    """1/1024, the least factor, rendered to 6 digits read 0.000976562: below the bound, so the hook
    dropped it with its batch. Each factor a publish may hold is exported as a value the gate accepts,
    read back as the same factor (to 6 digits, or exactly where those would leave the range)."""
    from autotuner.job.exports import MAX_LR_SCALE, MIN_LR_SCALE, check_exports

    factors = [MIN_LR_SCALE, MIN_LR_SCALE * (1 + 1e-12), 2**-0.5 / 100, 1.0, 2**0.5, 1000.0, MAX_LR_SCALE]
    factors += [float(text) for text in ("0.0009765625", "0.000976563", "1023.9999999", "0.001")]
    for factor in factors:
        assert MIN_LR_SCALE <= factor <= MAX_LR_SCALE  # in range: a publish may hold it
        value = exported("slurm", fwd_precision="fp32", bwd_precision="fp32", batch_size=1024, sharding=None,
                         num_threads=None, pipeline=None, lr_scale=factor)["AUTOTUNER_LR_SCALE"]  # fmt: skip
        assert check_exports({"AUTOTUNER_LR_SCALE": value, "AUTOTUNER_BATCH_SIZE": "1024"})[1] == {}, value
        assert tuned({"AUTOTUNER_BATCH_SIZE": "1024", "AUTOTUNER_LR_SCALE": value}).lr_scale == pytest.approx(
            factor, rel=1e-5
        )
    assert exported("sh", fwd_precision="fp32", bwd_precision="fp32", batch_size=1024, sharding=None,
                    num_threads=None, pipeline=None, lr_scale=MIN_LR_SCALE)["AUTOTUNER_LR_SCALE"] == "0.0009765625"  # fmt: skip
