import pytest
import torch
from fbgemm_gpu.quantize_comm import QuantizedCommCodec as FbgemmCodec
from fbgemm_gpu.split_embedding_configs import SparseType

from trials.codecs import (
    ROW_DIM,
    CpuFp8RowwiseCodec,
    SwitchableCodec,
    effective_precisions,
    hfp8_format,
    make_codec,
    relative_l2_error,
)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def payload():
    return torch.randn(64 * 128, generator=torch.Generator().manual_seed(0)) * 3


# Upper bounds of relative L2 error on Gaussian data: unit roundoff-level for the float formats,
# one scale per 32-value row for int8/fp8.
BOUNDS = {"fp32": 0.0, "fp16": 1e-3, "bf16": 1e-2, "int8": 1e-2, "fp8": 0.05}


@pytest.mark.parametrize("precision", list(BOUNDS))
@pytest.mark.parametrize("is_fwd", [True, False])
def test_error_bounds_and_wire_size(precision, is_fwd, payload):
    codec = make_codec(precision, CPU, is_fwd=is_fwd)
    err = relative_l2_error(codec, payload)
    if precision == "fp32":
        assert err == 0.0
    else:
        assert 0.0 < err <= BOUNDS[precision]
    ctx = codec.create_context()
    encoded = codec.encode(payload, ctx)
    assert encoded.dtype == codec.quantized_dtype
    assert encoded.numel() == codec.calc_quantized_size(payload.numel(), ctx)
    assert encoded.numel() * encoded.element_size() <= payload.numel() * 4


def test_errors_are_ordered_by_precision(payload):
    errs = {p: relative_l2_error(make_codec(p, CPU, True), payload) for p in BOUNDS}
    assert errs["fp32"] < errs["fp16"] < errs["bf16"] < errs["fp8"]
    assert errs["fp16"] < errs["int8"] < errs["fp8"]


def test_cpu_fp8_cuts_bytes_and_handles_zero_rows():
    codec = CpuFp8RowwiseCodec(is_fwd=True)
    x = torch.zeros(4 * ROW_DIM)
    x[ROW_DIM:] = torch.linspace(-100, 100, 3 * ROW_DIM)
    out = codec.decode(codec.encode(x))
    assert torch.equal(out[:ROW_DIM], torch.zeros(ROW_DIM))  # an all-zero row stays exactly zero
    assert torch.allclose(out, x, rtol=0.07, atol=1e-6)
    assert codec.calc_quantized_size(x.numel()) == 4 * (ROW_DIM + 8)  # 3.2x fewer bytes than fp32
    with pytest.raises(ValueError, match="divisible by 32"):
        codec.calc_quantized_size(33)


def fbgemm_fp8_bytes(values: int, row_dim: int = ROW_DIM) -> int:
    """What FBGEMM's own row-wise FP8 codec (the CUDA one) puts on the wire for `values` floats."""
    codec = FbgemmCodec(SparseType.FP8, row_dim=row_dim)
    return codec.calc_quantized_size(values, codec.create_context())


@pytest.mark.parametrize("is_fwd", [True, False])
@pytest.mark.parametrize("values", [ROW_DIM, 64 * 128, 512 * 4 * 32])
def test_cpu_fp8_wire_bytes_are_fbgemms(is_fwd, values):
    codec = CpuFp8RowwiseCodec(is_fwd=is_fwd)
    x = torch.randn(values, generator=torch.Generator().manual_seed(1))
    ctx = codec.create_context()
    encoded = codec.encode(x, ctx)
    expected = values // 32 * 40  # FBGEMM: ceil4(row_dim) codes + 2 x fp32 per row
    assert fbgemm_fp8_bytes(values) == expected
    assert codec.calc_quantized_size(values, ctx) == expected
    assert encoded.dtype == torch.uint8
    assert encoded.numel() * encoded.element_size() == expected
    assert ctx.row_dim_quant == 40  # what FBGEMM's encode records for its decode
    # The CUDA op's own shape function (its meta kernel) agrees: 32 values -> 40 bytes a row.
    meta = torch.ops.fbgemm.FloatToFP8RowwiseQuantized(torch.empty(values // 32, 32, device="meta"), is_fwd)
    assert meta.numel() == expected


@pytest.mark.parametrize("is_fwd", [True, False])
def test_cpu_fp8_row_layout_is_fbgemms(is_fwd):
    """Codes, then the fp32 scale (max_pos / max|x|, a multiplier), then 4 unused bytes."""
    x = torch.randn(8 * ROW_DIM, generator=torch.Generator().manual_seed(2)) * 5
    ebits, bias, max_pos = hfp8_format(is_fwd)
    assert max_pos == (0.9375 if is_fwd else 0.875)
    rows = CpuFp8RowwiseCodec(is_fwd=is_fwd).encode(x).reshape(8, 40)
    scale = rows[:, 32:36].contiguous().view(torch.float32)
    amax = x.reshape(8, 32).abs().amax(dim=1, keepdim=True)
    assert torch.allclose(scale, max_pos / amax, rtol=1e-6)
    codes = torch.ops.fbgemm.FloatToHFP8Quantized(x.reshape(8, 32) * scale, ebits, bias, max_pos)
    assert torch.equal(rows[:, :32], codes)
    assert torch.equal(rows[:, 36:], torch.zeros(8, 4, dtype=torch.uint8))


# Relative L2 error of the row-wise FP8 round trip on the `payload` fixture with the earlier CPU
# codec (torch's float8 e4m3fn / e5m2 with an amax / 448 or / 57344 divisor, 36 bytes a row).
EARLIER_FP8_ERROR = {True: 0.02414, False: 0.04746}


@pytest.mark.parametrize("is_fwd", [True, False])
def test_cpu_fp8_round_trip_error_stays_as_before(is_fwd, payload):
    err = relative_l2_error(CpuFp8RowwiseCodec(is_fwd=is_fwd), payload)
    assert 0.9 * EARLIER_FP8_ERROR[is_fwd] < err <= 1.01 * EARLIER_FP8_ERROR[is_fwd]


# That the CPU codec writes the very bytes of FBGEMM's CUDA kernel is checked where a GPU is:
# `make gpu-check` (bench/gpu_check.py, fp8_bytes_check).


def test_fp8_backward_uses_wider_exponent():
    big = torch.full((ROW_DIM,), 1e-3)
    big[0] = 1e3  # dynamic range of 1e6 in one row: e4m3 flushes the small values, e5m2 keeps them
    fwd = CpuFp8RowwiseCodec(is_fwd=True)
    bwd = CpuFp8RowwiseCodec(is_fwd=False)
    assert (fwd.decode(fwd.encode(big))[1:] == 0).all()
    assert (bwd.decode(bwd.encode(big))[1:] > 0).all()


def test_switchable_codec_captures_first_payload_and_delegates(payload):
    slot = SwitchableCodec(make_codec("fp32", CPU, True))
    slot.capture = True
    slot.current = make_codec("fp16", CPU, True)
    out = slot.encode(payload, slot.create_context())
    slot.encode(payload * 2, slot.create_context())
    assert out.dtype == torch.float16
    assert slot.quantized_dtype == torch.float16
    assert torch.equal(slot.captured, payload)


@pytest.mark.parametrize(
    ("requested", "backend", "rs", "ran"),
    [
        (("bf16", "bf16"), "gloo", False, ("fp16", "fp16")),
        (("bf16", "bf16"), "nccl", False, ("bf16", "bf16")),
        (("fp8", "fp8"), "nccl", True, ("fp16", "bf16")),
        (("fp8", "fp8"), "gloo", True, ("fp16", "fp16")),
        (("fp8", "int8"), "gloo", False, ("fp8", "int8")),
    ],
)
def test_effective_precisions_follow_torchrec_fallbacks(requested, backend, rs, ran):
    eff = effective_precisions(*requested, backend=backend, reduce_scatter=rs)
    assert (eff.fwd, eff.bwd) == ran
    assert bool(eff.note) == (ran != requested)
