"""Comm codecs: what a precision does to the bytes of an all-to-all, on GPU and on CPU.

TorchRec binds codecs to a sharded module when it is planned. To measure many precisions in one
process without re-planning, every comm op gets a `SwitchableCodec` whose current codec we swap
between candidates. On CUDA the codecs are FBGEMM's (row-wise FP8, fused row-wise INT8, FP16/BF16
with clamping); on CPU FBGEMM's FP8 path does not run, so `CpuFp8RowwiseCodec` stands in and writes
FBGEMM's row-wise FP8 wire format byte for byte (FBGEMM's own CPU reference of the element conversion).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from fbgemm_gpu.quantize_comm import QuantizationContext
from fbgemm_gpu.quantize_comm import QuantizedCommCodec as FbgemmCodec
from fbgemm_gpu.split_embedding_configs import SparseType

# Row length of row-wise FP8 / INT8 quantization: each row of this many values gets one scale.
ROW_DIM = 32

_SPARSE_TYPE = {
    "fp32": SparseType.FP32,
    "fp16": SparseType.FP16,
    "bf16": SparseType.BF16,
    "fp8": SparseType.FP8,
    "int8": SparseType.INT8,
}


def hfp8_format(is_fwd: bool) -> tuple[int, int, float]:
    """(exponent bits, exponent bias, largest value) of FBGEMM's row-wise FP8 ("hfp8", 1 sign bit,
    7 - ebits mantissa bits, the top exponent reserved): 1-4-3 with bias 15 forward, 1-5-2 with bias
    31 backward, so every scaled row lies in [-max_pos, max_pos] with max_pos just under 1."""
    ebits, bias = (4, 15) if is_fwd else (5, 31)
    mbits = 7 - ebits
    return ebits, bias, 2.0 ** ((1 << ebits) - 2 - bias) * (2 - 2.0**-mbits)


def fp8_rowwise_row_bytes(row_dim: int) -> int:
    """Bytes of one quantized row on FBGEMM's wire: the codes padded to 4 bytes, then 2 x fp32
    (the scale and 4 unused bytes), as `QuantizedCommCodec.calc_quantized_size` counts them."""
    return (row_dim + 3) // 4 * 4 + 2 * 4


class CpuFp8RowwiseCodec:
    """FBGEMM's row-wise FP8 comm codec, byte for byte, on CPU.

    FBGEMM's own codec (`FloatToFP8RowwiseQuantized`) runs on CUDA only ("fp8 is not supported by
    CPU"); this one writes the same wire format with FBGEMM's CPU reference of the same element
    conversion (`FloatToHFP8Quantized`, FBGEMM's `float_to_hfp8`). Per row of ROW_DIM values:

        ROW_DIM hfp8 codes (padded to a multiple of 4) | fp32 scale | 4 bytes unused (zero here)

    with scale = max_pos / (1e-20 + max |x|) and code = hfp8(x * scale); decoding divides by the
    scale. A row is 40 bytes for 32 values (1.25 bytes a value; fp32 is 4), so the all-to-all's
    bytes and bandwidth are the ones the CUDA codec puts on the wire.
    """

    EPSILON = 1e-20  # FBGEMM's kEpsilon: an all-zero row gets a finite scale and stays zero

    def __init__(self, is_fwd: bool, row_dim: int = ROW_DIM) -> None:
        self._row_dim = row_dim
        self._ebits, self._bias, self._max_pos = hfp8_format(is_fwd)
        self._row_bytes = fp8_rowwise_row_bytes(row_dim)
        self._scale_at = (row_dim + 3) // 4 * 4

    @property
    def quantized_dtype(self) -> torch.dtype:
        return torch.uint8

    def create_context(self) -> QuantizationContext:
        return QuantizationContext(row_dim=self._row_dim)

    def padded_size(
        self,
        input_tensor: torch.Tensor,
        dim_per_rank: list[int],
        my_rank: int,
        qcomm_ctx: QuantizationContext,
    ) -> tuple[int, int]:
        if input_tensor.ndim == 1:
            return input_tensor.shape[0], 0
        return input_tensor.shape[1], 0

    def calc_quantized_size(self, input_len: int, ctx: QuantizationContext | None = None) -> int:
        if input_len % self._row_dim:
            raise ValueError(
                f"fp8 row-wise codec needs a payload length divisible by {self._row_dim}, "
                f"got {input_len} (use a batch size or embedding dims that are multiples of it)"
            )
        return input_len // self._row_dim * self._row_bytes

    def encode(self, input_tensor: torch.Tensor, ctx: QuantizationContext | None = None) -> torch.Tensor:
        rows = input_tensor.reshape(-1, self._row_dim).float()
        amax = rows.abs().amax(dim=1, keepdim=True)
        # A true fp32 division, as the kernel's (a scalar / tensor in torch is reciprocal x scalar).
        scale = torch.full_like(amax, self._max_pos).div(amax + self.EPSILON)
        codes = torch.ops.fbgemm.FloatToHFP8Quantized(
            (rows * scale).contiguous(), self._ebits, self._bias, self._max_pos
        )
        packed = torch.zeros(rows.shape[0], self._row_bytes, dtype=torch.uint8, device=rows.device)
        packed[:, : self._row_dim] = codes
        packed[:, self._scale_at : self._scale_at + 4] = scale.view(torch.uint8)
        if ctx is not None:
            ctx.row_dim_quant = self._row_bytes  # as FBGEMM's encode records it
        return packed.reshape(-1)

    def decode(self, input_tensor: torch.Tensor, ctx: QuantizationContext | None = None) -> torch.Tensor:
        packed = input_tensor.reshape(-1, self._row_bytes)
        codes = packed[:, : self._row_dim].contiguous()
        scale = packed[:, self._scale_at : self._scale_at + 4].contiguous().view(torch.float32)
        values = torch.ops.fbgemm.HFP8QuantizedToFloat(codes, self._ebits, self._bias)
        return (values / scale).reshape(-1)


def make_codec(precision: str, device: torch.device, is_fwd: bool) -> object:
    """The codec that puts `precision` on the wire for this device."""
    if precision == "fp8":
        if device.type == "cuda":
            # FBGEMM's row-wise FP8 kernels (what TorchRec uses with fp8_quantize_dim set).
            return FbgemmCodec(SparseType.FP8, row_dim=ROW_DIM, is_fwd=is_fwd)
        return CpuFp8RowwiseCodec(is_fwd=is_fwd)
    return FbgemmCodec(_SPARSE_TYPE[precision], is_fwd=is_fwd)


def relative_l2_error(codec: object, x: torch.Tensor) -> float:
    """||decode(encode(x)) - x|| / ||x||: what the codec costs in accuracy on this payload."""
    x = x.detach().reshape(-1).float()
    if x.numel() == 0:
        return 0.0
    ctx = codec.create_context()  # type: ignore[attr-defined]
    y = codec.decode(codec.encode(x, ctx), ctx)  # type: ignore[attr-defined]
    norm = torch.linalg.vector_norm(x)
    if norm == 0:
        return 0.0
    return float(torch.linalg.vector_norm(y.float() - x) / norm)


class SwitchableCodec:
    """A QuantizedCommCodec that forwards to whichever codec the current candidate uses.

    While `capture` is on, the first encode() input is kept (a sample of the real payload) so the
    codec's quantization error can be measured on what actually crosses the wire.
    """

    def __init__(self, codec: object) -> None:
        self.current = codec
        self.capture = False
        self.captured: torch.Tensor | None = None

    @property
    def quantized_dtype(self) -> torch.dtype:
        return self.current.quantized_dtype  # type: ignore[attr-defined]

    def create_context(self) -> QuantizationContext | None:
        return self.current.create_context()  # type: ignore[attr-defined]

    def padded_size(self, *args, **kwargs):  # protocol passthrough
        return self.current.padded_size(*args, **kwargs)  # type: ignore[attr-defined]

    def calc_quantized_size(self, input_len: int, ctx: QuantizationContext | None = None) -> int:
        return self.current.calc_quantized_size(input_len, ctx)  # type: ignore[attr-defined]

    def encode(self, input_tensor: torch.Tensor, ctx: QuantizationContext | None = None) -> torch.Tensor:
        if self.capture and self.captured is None:
            self.captured = input_tensor.detach().clone()
        return self.current.encode(input_tensor, ctx)  # type: ignore[attr-defined]

    def decode(self, input_tensor: torch.Tensor, ctx: QuantizationContext | None = None) -> torch.Tensor:
        return self.current.decode(input_tensor, ctx)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Effective:
    """Precisions that actually run after backend fallbacks, and why they differ."""

    fwd: str
    bwd: str
    note: str = ""


def effective_precisions(fwd: str, bwd: str, backend: str, reduce_scatter: bool) -> Effective:
    """Apply the fallbacks TorchRec applies (get_qcomm_codecs_registry), so results say what ran."""
    fallbacks = []
    if reduce_scatter:  # quantized bytes cannot be summed: TorchRec falls back for reduce-scatter
        fallbacks += [("fwd", "fp8", "fp16", "reduce-scatter"), ("bwd", "fp8", "bf16", "reduce-scatter")]
    if backend == "gloo":
        fallbacks += [("fwd", "bf16", "fp16", "gloo"), ("bwd", "bf16", "fp16", "gloo")]
    ran = {"fwd": fwd, "bwd": bwd}
    notes = []
    for direction, requested, replacement, reason in fallbacks:
        if ran[direction] == requested:
            ran[direction] = replacement
            notes.append(f"{requested} {direction} -> {replacement} on {reason}")
    return Effective(ran["fwd"], ran["bwd"], "; ".join(notes))


class DamagedCodec:
    """A codec that keeps one byte of every fp32 value, the exponent's, and drops the sign: for
    tests of the convergence check, a precision that moves the same bytes and trains badly. Never
    searched; `"extra": {"damaged_codec": PRECISION}` in a spec puts it in that precision's place."""

    quantized_dtype = torch.float32

    def create_context(self) -> QuantizationContext | None:
        return None

    def padded_size(self, input_tensor: torch.Tensor, dim_per_rank: list[int], my_rank: int,
                    qcomm_ctx: QuantizationContext | None) -> tuple[int, int]:  # fmt: skip
        return (input_tensor.shape[0] if input_tensor.ndim == 1 else input_tensor.shape[1]), 0

    def calc_quantized_size(self, input_len: int, ctx: QuantizationContext | None = None) -> int:
        return input_len

    def encode(self, input_tensor: torch.Tensor, ctx: QuantizationContext | None = None) -> torch.Tensor:
        bits = input_tensor.float().contiguous().view(torch.int32)
        return (bits & 0x7F000000).view(torch.float32)

    def decode(self, input_tensor: torch.Tensor, ctx: QuantizationContext | None = None) -> torch.Tensor:
        return input_tensor
