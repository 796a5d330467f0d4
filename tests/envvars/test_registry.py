import dataclasses

import pytest

from autotuner.envvars import (
    COLLECTIVES,
    KINDS,
    P2P,
    REGISTRY,
    TRANSPORTS,
    Safety,
    check_value,
    lookup,
    suggest,
)

# Every variable named in shared/reference/search-space.md (abbreviations there spelled out).
REFERENCE = """
NCCL_NSOCKS_PERTHREAD NCCL_SOCKET_NTHREADS NCCL_BUFFSIZE NCCL_P2P_NET_CHUNKSIZE NCCL_NCHANNELS_PER_NET_PEER
NCCL_MIN_NCHANNELS NCCL_MAX_NCHANNELS NCCL_MIN_CTAS NCCL_MAX_CTAS NCCL_MIN_P2P_NCHANNELS NCCL_MAX_P2P_NCHANNELS
NCCL_P2P_PXN_LEVEL NCCL_PXN_DISABLE NCCL_CROSS_NIC NCCL_NETDEVS_POLICY NCCL_NET_GDR_LEVEL NCCL_PROTO NCCL_ALGO
NCCL_ALLOC_P2P_NET_LL_BUFFERS NCCL_P2P_LL_THRESHOLD NCCL_SOCKET_IFNAME NCCL_NET NCCL_DEBUG NCCL_DEBUG_SUBSYS
NCCL_NO_CACHE NCCL_CONF_FILE NCCL_NET_FORCE_FLUSH NCCL_TUNER_PLUGIN NCCL_TOPO_FILE
OFI_NCCL_PROTOCOL OFI_NCCL_MIN_STRIPE_SIZE OFI_NCCL_EAGER_MAX_SIZE OFI_NCCL_SCHED_MAX_SMALL_RR_SIZE
OFI_NCCL_RDMA_MIN_POSTED_EAGER_BUFFERS OFI_NCCL_RDMA_MAX_POSTED_EAGER_BUFFERS OFI_NCCL_CQ_READ_COUNT
OFI_NCCL_CQ_SIZE OFI_NCCL_NIC_DUP_CONNS OFI_NCCL_GDR_FLUSH_DISABLE OFI_NCCL_DISABLE_NATIVE_RDMA_CHECK
OFI_NCCL_DISABLE_GDR_REQUIRED_CHECK OFI_NCCL_DISABLE_DMABUF OFI_NCCL_MR_CACHE_DISABLE
FI_PROVIDER FI_EFA_USE_DEVICE_RDMA FI_EFA_FORK_SAFE FI_EFA_USE_HUGE_PAGE
TORCH_NCCL_HIGH_PRIORITY TORCH_NCCL_ENABLE_TIMING TORCH_NCCL_NAN_CHECK TORCH_NCCL_ASYNC_ERROR_HANDLING
TORCH_NCCL_BLOCKING_WAIT
""".split()

VARS = [v for v in REGISTRY.values() if not v.prefix]


@pytest.mark.parametrize("name", REFERENCE)
def test_every_reference_variable_is_registered(name):
    var = lookup(name)
    assert var is not None
    assert var.name == name


@pytest.mark.parametrize("var", REGISTRY.values(), ids=lambda v: v.name)
def test_entries_are_well_formed(var):
    assert var.kind in KINDS
    assert var.transport in TRANSPORTS
    assert var.collectives
    assert set(var.collectives) <= set(P2P + COLLECTIVES)
    assert var.doc
    assert "\n" not in var.doc
    assert len(var.doc) < 160
    assert isinstance(var.safety, Safety)
    if var.kind in ("int", "bool"):
        assert var.domain.low is not None
        assert var.domain.high is not None
        assert var.domain.low <= var.domain.high
    if var.kind in ("enum", "list"):
        assert var.domain.choices
    if var.domain.pow2:
        assert var.kind == "int"
    if var.kind == "bool":
        assert (var.domain.low, var.domain.high) == (0, 1)
    if var.prefix:
        assert var.name.endswith("*")


@pytest.mark.parametrize("var", [v for v in VARS if v.default is not None], ids=lambda v: v.name)
def test_documented_defaults_are_inside_their_own_domain(var):
    assert not check_value(var.name, var.default, var)


def test_entries_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        REGISTRY["NCCL_BUFFSIZE"].default = "1"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("name", "safety", "passthrough"),
    [
        ("NCCL_NSOCKS_PERTHREAD", Safety.TUNABLE, False),
        ("NCCL_P2P_NET_CHUNKSIZE", Safety.TUNABLE, False),
        ("OFI_NCCL_PROTOCOL", Safety.TUNABLE, False),
        ("NCCL_PROTO", Safety.RISKY, False),
        ("NCCL_ALGO", Safety.RISKY, False),
        ("NCCL_ALLOC_P2P_NET_LL_BUFFERS", Safety.RISKY, False),
        ("NCCL_P2P_LL_THRESHOLD", Safety.RISKY, False),
        ("NCCL_SOCKET_IFNAME", Safety.NEVER, True),
        ("NCCL_NET", Safety.NEVER, True),
        ("FI_PROVIDER", Safety.NEVER, True),
        ("FI_EFA_FORK_SAFE", Safety.NEVER, True),
        ("NCCL_IB_HCA", Safety.NEVER, True),
        ("NCCL_DEBUG", Safety.NEVER, True),
        ("OFI_NCCL_GDR_FLUSH_DISABLE", Safety.NEVER, False),
        ("OFI_NCCL_DISABLE_NATIVE_RDMA_CHECK", Safety.NEVER, False),
        ("NCCL_TUNER_PLUGIN", Safety.NEVER, False),  # loads a library
        ("NCCL_CONF_FILE", Safety.NEVER, False),  # would bypass validation
        ("NCCL_DEBUG_FILE", Safety.NEVER, False),  # a served path would make every job write there
    ],
)
def test_safety_classes(name, safety, passthrough):
    var = lookup(name)
    assert var is not None
    assert (var.safety, var.passthrough) == (safety, passthrough)


def test_transports_and_collectives():
    assert lookup("NCCL_NSOCKS_PERTHREAD").transport == "socket"
    assert lookup("NCCL_SOCKET_NTHREADS").transport == "socket"
    assert {v.transport for v in VARS if v.name.startswith(("OFI_NCCL_", "FI_"))} == {"efa"}
    assert lookup("NCCL_IB_GID_INDEX").transport == "ib"
    # all-to-all is send/recv: algo/proto do not touch it, the P2P chunk does.
    assert "all_to_all" not in lookup("NCCL_PROTO").collectives
    assert "all_to_all" not in lookup("NCCL_ALGO").collectives
    assert set(lookup("NCCL_P2P_NET_CHUNKSIZE").collectives) == {"all_to_all", "send_recv"}
    assert lookup("NCCL_NCHANNELS_PER_NET_PEER").domain.pow2


def test_read_once_versus_per_process_group():
    assert all(v.read_once for v in VARS if v.name.startswith(("NCCL_", "OFI_NCCL_", "FI_")))
    assert not any(v.read_once for v in VARS if v.name.startswith("TORCH_NCCL_"))


def test_negative_sentinel():
    eager = lookup("OFI_NCCL_EAGER_MAX_SIZE").domain
    assert eager.allows_negative
    assert eager.contains(-1)
    assert not eager.contains(-2)
    assert not lookup("NCCL_BUFFSIZE").domain.allows_negative


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NCCL_IB_HCA", "NCCL_IB_*"),
        ("NCCL_IB_TIMEOUT", "NCCL_IB_TIMEOUT"),  # integer-valued members are typed (issue 21)
        ("NCCL_IB_ADDR_RANGE", "NCCL_IB_*"),
        ("NCCL_IB_", None),
        ("NCCL_IB_*", None),
        ("NCCL_BUFFSIZE", "NCCL_BUFFSIZE"),
        ("nccl_buffsize", None),  # environment names are case-sensitive
        ("NCCL_NSOCK_PERTHREAD", None),
        ("LD_PRELOAD", None),
    ],
)
def test_lookup(name, expected):
    var = lookup(name)
    assert (var.name if var else None) == expected


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("NCCL_NSOCK_PERTHREAD", "NCCL_NSOCKS_PERTHREAD"),
        ("NCCL_SOCKETS_NTHREADS", "NCCL_SOCKET_NTHREADS"),
        ("NCCL_BUFSIZE", "NCCL_BUFFSIZE"),
        ("nccl_buffsize", "NCCL_BUFFSIZE"),
        ("OFI_NCCL_PROTOCL", "OFI_NCCL_PROTOCOL"),
        ("SOMETHING_ELSE", None),
        ("LD_PRELOAD", None),
    ],
)
def test_suggest(typo, meant):
    assert suggest(typo) == meant


def test_allowed_describes_the_domain():
    assert lookup("NCCL_NSOCKS_PERTHREAD").allowed() == "a plain decimal integer from 1 to 64"
    assert "power of two" in lookup("NCCL_NCHANNELS_PER_NET_PEER").allowed()
    assert "(or -1)" in lookup("OFI_NCCL_EAGER_MAX_SIZE").allowed()
    assert lookup("OFI_NCCL_PROTOCOL").allowed() == "one of SENDRECV, RDMA"
    assert "^" in lookup("NCCL_PROTO").allowed()
    assert "MAX:N" in lookup("NCCL_NETDEVS_POLICY").allowed()
    assert lookup("NCCL_PXN_DISABLE").allowed() == "0 or 1"
