import pytest
import torch

from trials.codecs import (
    ROW_DIM,
    CpuFp8RowwiseCodec,
    SwitchableCodec,
    effective_precisions,
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
    assert codec.calc_quantized_size(x.numel()) == 4 * (ROW_DIM + 4)  # ~3.6x fewer bytes than fp32
    with pytest.raises(ValueError, match="divisible by 32"):
        codec.calc_quantized_size(33)


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
    assert out.dtype == torch.float16 and slot.quantized_dtype == torch.float16
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
