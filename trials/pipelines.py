"""How a step is driven: a plain loop, or one of TorchRec's train pipelines (the overlap lever).

TorchRec's pipelines overlap a step's stages on CUDA side streams: `sparse_dist` runs the input
all-to-all of batch i+1 during batch i, `semi_sync` also the embedding all-to-all (embeddings one
step stale), `fused_sparse_dist` the embedding lookup beside the previous optimizer step. On CPU
there are no streams: what runs, runs one stage after another, and the stream-only ones are refused
before their first step (TorchRec records their batches on a side stream, which CPU tensors cannot do).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torchrec.distributed.train_pipeline import train_pipelines

# Candidate `pipeline` -> torchrec class (looked up by name: older torchrec lacks some).
TORCHREC_PIPELINES = {
    "base": "TrainPipelineBase",
    "sparse_dist": "TrainPipelineSparseDist",
    "semi_sync": "TrainPipelineSemiSync",
    "fused_sparse_dist": "TrainPipelineFusedSparseDist",
}
CPU_NOTE = "no CUDA streams on this device: pipeline stages run one after another, nothing overlaps"
# Pipelines that record their batches on a side stream (`record_stream`): "unknown parameter type" on CPU.
NEEDS_STREAMS = ("semi_sync", "fused_sparse_dist")
STREAM_DEVICES = ("cuda", "mtia")  # where TorchRec's pipelines make side streams


class PlainLoop:
    """pipeline "none": the loop a job writes by hand (zero_grad, forward, backward, step)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self._model = model
        self._optimizer = optimizer

    def progress(self, batches: Iterator[Any]) -> Any:
        batch = next(batches)
        self._optimizer.zero_grad()
        loss, output = self._model(batch)
        loss.backward()
        self._optimizer.step()
        return output

    def detach(self) -> torch.nn.Module:
        return self._model


def make_pipeline(name: str, model: torch.nn.Module, optimizer: Any, device: torch.device) -> Any:
    """A pipeline of that name over the model; raises RuntimeError naming what is missing."""
    if name == "none":
        return PlainLoop(model, optimizer)
    cls = getattr(train_pipelines, TORCHREC_PIPELINES[name], None)
    if cls is None:
        import torchrec

        version = getattr(torchrec, "__version__", "installed")
        raise RuntimeError(f"pipeline {name}: torchrec {version} has no {TORCHREC_PIPELINES[name]}")
    if name in NEEDS_STREAMS and device.type not in STREAM_DEVICES:
        raise RuntimeError(
            f"pipeline {name} needs CUDA streams and this device is {device.type}"
            " (TorchRec records its batches on a side stream)"
        )
    if name == "semi_sync":
        # From the first batch: the measured steps are semi-synchronous ones, not the sync start-up.
        return cls(model, optimizer, device, start_batch=0)
    return cls(model, optimizer, device)


def release(pipeline: Any) -> None:
    """Give the model back its own forwards, so the next candidate can pipeline it anew."""
    detach = getattr(pipeline, "detach", None)
    if detach is not None:
        detach()


def pipeline_error(name: str, device: torch.device, exc: Exception) -> RuntimeError:
    """A pipeline's first steps failed: say which, and why that is likely on a device without streams."""
    why = ""
    if device.type != "cuda":
        why = f" (on {device.type}: TorchRec pipelines that overlap on side streams need CUDA)"
    return RuntimeError(f"pipeline {name} failed{why}: {type(exc).__name__}: {exc}")
