"""Adopt a tuned config inside a training script in one line.

The pre-job hook exports the non-NCCL part of a config as AUTOTUNER_* variables; this module turns
them into TorchRec objects. No service dependency (reads the environment only), and torchrec is
imported only when you ask for TorchRec objects.

    from autotuner.job.qcomms import tuned_sharder_kwargs
    sharder = EmbeddingBagCollectionSharder(**tuned_sharder_kwargs(device))

or, piece by piece: `tuned()` (a plain dataclass), `qcomms_config()`, `qcomm_codecs_registry(device)`.

A config that changes the batch may also change the learning rate it was validated with: take both, or
neither (`tuned().lr_scale` multiplies the rate you use at your own batch size):

    t = tuned()
    batch_size, lr = t.batch_size or batch_size, lr * t.lr_scale
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The spec's own lists (standard library only, as this module must stay: a training script imports it).
from autotuner.job.exports import MAX_LR_SCALE, is_lr_scale
from trials.choices import PIPELINES, PRECISIONS


@dataclass(frozen=True)
class Tuned:
    """What the config says beside the NCCL variables; None where it says nothing."""

    fwd_precision: str = "fp32"
    bwd_precision: str = "fp32"
    batch_size: int | None = None
    sharding: str | None = None
    num_threads: int | None = None
    # TorchRec train pipeline the config was measured with ("none": a plain loop); None: unsaid.
    pipeline: str | None = None
    config: str | None = None  # e.g. "cluster/workload/2n/v3", for logs
    # With batch_size: the factor on the job's learning rate the convergence check trained it under.
    lr_scale: float = 1.0

    @property
    def quantized(self) -> bool:
        return (self.fwd_precision, self.bwd_precision) != ("fp32", "fp32")


def tuned(environ: Mapping[str, str] | None = None) -> Tuned:
    """Read AUTOTUNER_* from the environment. Bad values raise ValueError naming the variable."""
    env = os.environ if environ is None else environ

    def precision(name: str) -> str:
        value = env.get(name, "fp32").strip().lower()
        if value not in PRECISIONS:
            raise ValueError(f"{name}={value!r}: expected one of {', '.join(PRECISIONS)}")
        return value

    def positive(name: str) -> int | None:
        value = env.get(name)
        if value is None or value == "":
            return None
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{name}={value!r}: expected a positive integer")
        return int(value)

    def scale(name: str) -> float:
        value = (env.get(name) or "1").strip()
        if not is_lr_scale(value):  # the hook's own rule for what a config may export
            raise ValueError(f"{name}={value!r}: expected a number above 0, at most {MAX_LR_SCALE:g}")
        return float(value)

    pipeline = env.get("AUTOTUNER_PIPELINE") or None
    if pipeline is not None and pipeline not in PIPELINES:
        raise ValueError(f"AUTOTUNER_PIPELINE={pipeline!r}: expected one of {', '.join(PIPELINES)}")
    return Tuned(
        fwd_precision=precision("AUTOTUNER_FWD_PRECISION"),
        bwd_precision=precision("AUTOTUNER_BWD_PRECISION"),
        batch_size=positive("AUTOTUNER_BATCH_SIZE"),
        sharding=env.get("AUTOTUNER_SHARDING") or None,
        num_threads=positive("AUTOTUNER_NUM_THREADS"),
        pipeline=pipeline,
        config=env.get("AUTOTUNER_CONFIG") or None,
        lr_scale=scale("AUTOTUNER_LR_SCALE"),
    )


def qcomms_config(environ: Mapping[str, str] | None = None) -> Any:
    """TorchRec's QCommsConfig for the tuned precisions (fp8 row-wise, as the trial measured it)."""
    from torchrec.distributed.fbgemm_qcomm_codec import CommType, QCommsConfig

    from trials.codecs import ROW_DIM

    t = tuned(environ)
    fp8 = "fp8" in (t.fwd_precision, t.bwd_precision)
    return QCommsConfig(
        forward_precision=CommType(t.fwd_precision),
        backward_precision=CommType(t.bwd_precision),
        fp8_quantize_dim=ROW_DIM if fp8 else None,
    )


def qcomm_codecs_registry(device: Any, environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The codecs registry a sharder takes (None when the config keeps fp32 both ways)."""
    from torchrec.distributed.fbgemm_qcomm_codec import get_qcomm_codecs_registry

    if not tuned(environ).quantized:
        return None
    return get_qcomm_codecs_registry(qcomms_config(environ), device=device)


def tuned_sharder_kwargs(device: Any, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for EmbeddingBagCollectionSharder(...) with the tuned comm precision."""
    return {"qcomm_codecs_registry": qcomm_codecs_registry(device, environ)}
