import copy
import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from autotuner.envvars import REGISTRY, check_value
from autotuner.space import (
    MAX_GRID,
    PRESETS,
    InProcPoint,
    IntRange,
    Precision,
    SearchSpace,
    Sharding,
    SpaceError,
    load_space,
    to_env_strings,
)
from trials import choices
from trials.spec import parse_candidate

BASE = {
    "env": {
        "NCCL_NSOCKS_PERTHREAD": [1, 2, 4, 8],
        "NCCL_BUFFSIZE": {"low": 1048576, "high": 16777216, "log": True},
    },
    "fixed_env": {"NCCL_NET": "Socket"},
    "precisions": [["fp32", "fp32"], ["fp16", "fp16"], ["fp8", "bf16"]],
    "batch_sizes": [512, 1024, 2048],
    "sharding": ["table_wise"],
    "num_threads": [None],
    "pipelines": [None],
    "max_quant_error": 0.05,
    "allow_risky": [],
    "allow_batch_change": True,
    "ladder": ["precision", "batch", "pipeline", "env", "sharding", "threads"],
    "max_logloss_delta": 0.002,
    "quality_seeds": 3,
    "lr_scaling": ["none"],
    "quality_data": None,
    "force_inert": [],
}


def space(**overrides):
    data = copy.deepcopy(BASE)
    data.update(copy.deepcopy(overrides))
    return data


def with_env(**env):
    data = space()
    data["env"].update(env)
    return data


def problems_of(source):
    with pytest.raises(SpaceError) as info:
        load_space(source)
    return info.value.problems


def pairs(problems):
    return {(p.variable, p.rule) for p in problems if p.severity == "error"}


def test_the_documented_example_loads():
    s = load_space(BASE)
    assert s.env_dims()["NCCL_NSOCKS_PERTHREAD"] == [1, 2, 4, 8]
    assert s.env_dims()["NCCL_BUFFSIZE"] == IntRange(low=1048576, high=16777216, log=True)
    assert s.fixed_env == {"NCCL_NET": "Socket"}
    assert s.precisions == [("fp32", "fp32"), ("fp16", "fp16"), ("fp8", "bf16")]
    assert s.warnings == []


def test_the_space_takes_its_choices_from_the_trial_spec():
    # one source (trials.choices): the space's types are the spec's, not a copy to keep in step
    assert Precision is choices.Precision
    assert Sharding is choices.Sharding
    schema = SearchSpace.model_json_schema()["properties"]
    assert schema["precisions"]["items"]["prefixItems"][0]["enum"] == list(choices.PRECISIONS)


# --------------------------------------------------------------------------- presets


@pytest.mark.parametrize("name", ["socket", "efa"])
def test_presets_load_clean(name):
    s = load_space(name)
    assert s.warnings == []
    assert s.precisions == [
        ("fp32", "fp32"),
        ("fp16", "fp16"),
        ("bf16", "bf16"),
        ("fp8", "bf16"),
        ("int8", "int8"),
    ]
    assert s.batch_sizes == [512, 1024, 2048]
    assert s.max_quant_error == 0.05
    assert PRESETS[name].parent.name == "presets"
    assert PRESETS[name].suffix == ".yaml"


def test_socket_preset():
    s = load_space("socket")
    assert s.fixed_env == {"NCCL_NET": "Socket"}
    assert {
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_BUFFSIZE",
        "NCCL_P2P_NET_CHUNKSIZE",
    } <= set(s.env)
    assert max(s.env["NCCL_NSOCKS_PERTHREAD"]) * max(s.env["NCCL_SOCKET_NTHREADS"]) <= 64
    grid = s.env_grid()
    assert grid is not None
    assert len(grid) == 4 * 4 * 3 * 3
    assert all(s.check_env(point) == [] for point in grid)


def test_efa_preset():
    s = load_space("efa")
    assert s.fixed_env == {"NCCL_NET": "Libfabric"}
    assert s.env["OFI_NCCL_PROTOCOL"] == ["SENDRECV", "RDMA"]
    assert {
        "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_NCHANNELS_PER_NET_PEER",
        "NCCL_BUFFSIZE",
        "OFI_NCCL_MIN_STRIPE_SIZE",
    } <= set(s.env)
    grid = s.env_grid()
    assert grid is not None
    assert len(grid) == 2 * 4 * 2 * 4 * 4


def test_preset_with_overrides_replaces_whole_top_level_keys():
    s = load_space({"preset": "efa", "batch_sizes": [4096], "env": {"OFI_NCCL_PROTOCOL": ["RDMA"]}})
    assert s.batch_sizes == [4096]
    assert s.env == {"OFI_NCCL_PROTOCOL": ["RDMA"]}
    assert s.fixed_env == {"NCCL_NET": "Libfabric"}  # kept from the preset
    assert SearchSpace.model_validate({"preset": "socket"}) == load_space("socket")


def test_preset_overrides_are_validated():
    problems = problems_of(
        {"preset": "socket", "env": {"NCCL_NSOCKS_PERTHREAD": [16], "NCCL_SOCKET_NTHREADS": [8]}}
    )
    assert pairs(problems) == {("NCCL_NSOCKS_PERTHREAD", "constraint")}


@pytest.mark.parametrize("name", ["nope", 3, None])
def test_unknown_preset(name):
    (problem,) = problems_of({"preset": name})
    assert (problem.variable, problem.rule) == ("preset", "schema")
    assert "efa, socket" in problem.message


# --------------------------------------------------------------------------- in-process points


def test_inproc_points_order_and_keys():
    s = load_space(
        space(
            precisions=[["fp8", "bf16"], ["fp32", "fp32"]],
            batch_sizes=[2048, 512],
            sharding=["table_wise", "row_wise"],
            num_threads=[None, 4],
        )
    )
    points = s.inproc_points()
    assert len(points) == 16
    assert [p.key() for p in points[:5]] == [
        "fp8/bf16|2048|table_wise|t-",
        "fp8/bf16|2048|table_wise|t4",
        "fp8/bf16|2048|row_wise|t-",
        "fp8/bf16|2048|row_wise|t4",
        "fp8/bf16|512|table_wise|t-",
    ]
    assert points[-1] == InProcPoint("fp32", "fp32", 512, "row_wise", 4)
    assert len({p.key() for p in points}) == 16


def test_candidates_are_valid_trial_candidates():
    point = InProcPoint("fp8", "bf16", 2048, "table_wise", None)
    assert point.to_candidate() == {
        "fwd_precision": "fp8",
        "bwd_precision": "bf16",
        "batch_size": 2048,
        "sharding": "table_wise",
    }
    threaded = InProcPoint("int8", "int8", 512, "row_wise", 8).to_candidate()
    assert threaded["num_threads"] == 8
    assert parse_candidate(threaded, "c").num_threads == 8
    for p in load_space("efa").inproc_points():
        parse_candidate(p.to_candidate(), "c")


def test_defaults_make_a_minimal_space():
    s = load_space({"env": {"NCCL_NSOCKS_PERTHREAD": [1, 2]}})
    assert s.inproc_points() == [InProcPoint("fp32", "fp32", 512, "table_wise", None)]
    assert s.fixed_env == {}
    assert s.allow_risky == []


# --------------------------------------------------------------------------- env points


def test_env_grid_enumerates_lists_and_stepped_ranges():
    s = load_space(
        {
            "env": {
                "NCCL_NSOCKS_PERTHREAD": [None, 2],
                "NCCL_SOCKET_NTHREADS": {"low": 1, "high": 4, "step": 3},
                "OFI_NCCL_PROTOCOL": ["RDMA"],
            }
        }
    )
    assert s.env_grid() == [
        {"NCCL_SOCKET_NTHREADS": "1", "OFI_NCCL_PROTOCOL": "RDMA"},
        {"NCCL_SOCKET_NTHREADS": "4", "OFI_NCCL_PROTOCOL": "RDMA"},
        {"NCCL_NSOCKS_PERTHREAD": "2", "NCCL_SOCKET_NTHREADS": "1", "OFI_NCCL_PROTOCOL": "RDMA"},
        {"NCCL_NSOCKS_PERTHREAD": "2", "NCCL_SOCKET_NTHREADS": "4", "OFI_NCCL_PROTOCOL": "RDMA"},
    ]


def test_env_grid_is_none_for_a_continuum_or_a_huge_grid():
    assert load_space(BASE).env_grid() is None  # NCCL_BUFFSIZE is a range without a step
    huge = {"NCCL_BUFFSIZE": {"low": 65536, "high": 65536 + MAX_GRID, "step": 1}}
    assert load_space({"env": huge}).env_grid() is None
    assert load_space({"env": {}}).env_grid() == [{}]


def test_env_grid_leaves_out_points_that_break_a_constraint():
    s = load_space({"env": {"NCCL_MIN_CTAS": [1, 8], "NCCL_MAX_CTAS": [4, 16]}})
    assert [(w.variable, w.rule, w.severity) for w in s.warnings] == [
        ("NCCL_MIN_CTAS", "constraint", "warning")
    ]
    grid = s.env_grid()
    assert {"NCCL_MIN_CTAS": "8", "NCCL_MAX_CTAS": "4"} not in grid
    assert len(grid) == 3


def test_to_env_strings():
    assert to_env_strings(
        {"NCCL_BUFFSIZE": 4194304, "NCCL_NSOCKS_PERTHREAD": None, "OFI_NCCL_PROTOCOL": "RDMA"}
    ) == {
        "NCCL_BUFFSIZE": "4194304",
        "OFI_NCCL_PROTOCOL": "RDMA",
    }
    with pytest.raises(ValueError, match="NCCL_PXN_DISABLE"):
        to_env_strings({"NCCL_PXN_DISABLE": True})
    with pytest.raises(ValueError, match="NCCL_BUFFSIZE"):
        to_env_strings({"NCCL_BUFFSIZE": 4.0})


INT_VARS = [v for v in REGISTRY.values() if v.kind in ("int", "bool")]


@given(st.data())
def test_any_in_domain_integer_exports_as_a_valid_value(data):
    var = data.draw(st.sampled_from(INT_VARS))
    n = data.draw(st.integers(var.domain.low, var.domain.high))
    exported = to_env_strings({var.name: n})[var.name]
    assert exported == str(n)
    assert exported.lstrip("-").isdigit()
    assert [p for p in check_value(var.name, exported, var) if p.severity == "error"] == []


def test_check_env_enforces_the_socket_constraint():
    s = load_space("socket")
    (problem,) = s.check_env({"NCCL_NSOCKS_PERTHREAD": "16", "NCCL_SOCKET_NTHREADS": "8"})
    assert (problem.variable, problem.rule) == ("NCCL_NSOCKS_PERTHREAD", "constraint")
    assert s.check_env({"NCCL_NSOCKS_PERTHREAD": "8", "NCCL_SOCKET_NTHREADS": "8"}) == []


def test_check_env_includes_fixed_values():
    s = load_space({"env": {"NCCL_NSOCKS_PERTHREAD": [1, 2, 4]}, "fixed_env": {"NCCL_SOCKET_NTHREADS": 16}})
    assert s.fixed_env == {"NCCL_SOCKET_NTHREADS": "16"}
    assert pairs(s.check_env({"NCCL_NSOCKS_PERTHREAD": "8"})) == {("NCCL_NSOCKS_PERTHREAD", "constraint")}
    assert s.check_env({"NCCL_NSOCKS_PERTHREAD": "4"}) == []


def test_check_env_catches_values_outside_the_registry_domain():
    s = load_space("efa")
    assert pairs(s.check_env({"NCCL_BUFFSIZE": "4MB", "LD_PRELOAD": "/x.so"})) == {
        ("NCCL_BUFFSIZE", "not-decimal"),
        ("LD_PRELOAD", "injection"),
    }


def test_values_are_normalised():
    s = load_space(with_env(NCCL_SOCKET_NTHREADS=["1", 2, None], OFI_NCCL_PROTOCOL=["RDMA"]))
    assert s.env["NCCL_SOCKET_NTHREADS"] == [1, 2, None]
    s = load_space(space(fixed_env={"NCCL_NET": "Socket", "NCCL_SOCKET_NTHREADS": 4}))
    assert s.fixed_env == {"NCCL_NET": "Socket", "NCCL_SOCKET_NTHREADS": "4"}


# --------------------------------------------------------------------------- rejected spaces


@pytest.mark.parametrize(
    ("data", "variable", "rule"),
    [
        (with_env(NCCL_NSOCK_PERTHREAD=[1, 2]), "NCCL_NSOCK_PERTHREAD", "unknown-variable"),
        (with_env(LD_PRELOAD=["/tmp/x.so"]), "LD_PRELOAD", "injection"),
        (with_env(LD_LIBRARY_PATH=["/tmp"]), "LD_LIBRARY_PATH", "injection"),
        (space(fixed_env={"PYTHONPATH": "/tmp"}), "PYTHONPATH", "injection"),
        (space(fixed_env={"BASH_ENV": "/tmp/rc"}), "BASH_ENV", "injection"),
        (space(fixed_env={"IFS": "x"}), "IFS", "injection"),
        (with_env(**{"A B": [1]}), "'A B'", "injection"),
        (with_env(NCCL_NSOCKS_PERTHREAD=[0, 1]), "NCCL_NSOCKS_PERTHREAD", "out-of-domain"),
        (with_env(NCCL_NSOCKS_PERTHREAD=[65]), "NCCL_NSOCKS_PERTHREAD", "out-of-domain"),
        (with_env(NCCL_SOCKET_NTHREADS={"low": 0, "high": 17}), "NCCL_SOCKET_NTHREADS", "out-of-domain"),
        (with_env(OFI_NCCL_PROTOCOL=["TCP"]), "OFI_NCCL_PROTOCOL", "out-of-domain"),
        (with_env(OFI_NCCL_PROTOCOL={"low": 1, "high": 2}), "OFI_NCCL_PROTOCOL", "out-of-domain"),
        (
            with_env(OFI_NCCL_EAGER_MAX_SIZE={"low": -1, "high": 8}),
            "OFI_NCCL_EAGER_MAX_SIZE",
            "out-of-domain",
        ),
        (space(max_quant_error=0), "max_quant_error", "out-of-domain"),
        (space(max_quant_error=1.5), "max_quant_error", "out-of-domain"),
        # read as 1.0, the loosest limit: any quantization error, any quality cost
        (space(max_quant_error=True), "max_quant_error", "schema"),
        (space(max_quant_error="0.5"), "max_quant_error", "schema"),
        (space(max_logloss_delta=True), "max_logloss_delta", "schema"),
        (space(precisions=[["fp4", "fp32"]]), "precisions[0][0]", "out-of-domain"),
        (space(sharding=["diagonal"]), "sharding[0]", "out-of-domain"),
        (space(batch_sizes=[0]), "batch_sizes[0]", "out-of-domain"),
        (space(num_threads=[0]), "num_threads[0]", "out-of-domain"),
        (with_env(NCCL_BUFFSIZE=["4MB"]), "NCCL_BUFFSIZE", "not-decimal"),
        (with_env(NCCL_BUFFSIZE=["0x400000"]), "NCCL_BUFFSIZE", "not-decimal"),
        (with_env(NCCL_BUFFSIZE=["010000000"]), "NCCL_BUFFSIZE", "not-decimal"),
        (with_env(NCCL_BUFFSIZE=[" 4194304"]), "NCCL_BUFFSIZE", "not-decimal"),
        (with_env(NCCL_BUFFSIZE=["1e6"]), "NCCL_BUFFSIZE", "not-decimal"),
        (with_env(NCCL_BUFFSIZE=[4194304.5]), "NCCL_BUFFSIZE", "not-decimal"),
        (with_env(NCCL_PXN_DISABLE=[True, False]), "NCCL_PXN_DISABLE", "not-decimal"),
        (with_env(NCCL_BUFFSIZE=["4194304\n"]), "NCCL_BUFFSIZE", "unsafe-value"),
        (space(fixed_env={"NCCL_NET": "Socket\nLD_PRELOAD=/x.so"}), "NCCL_NET", "unsafe-value"),
        (space(fixed_env={"NCCL_SOCKET_IFNAME": "eth0;reboot"}), "NCCL_SOCKET_IFNAME", "unsafe-value"),
        (space(fixed_env={"NCCL_SOCKET_IFNAME": "eth\x000"}), "NCCL_SOCKET_IFNAME", "unsafe-value"),
        (
            with_env(NCCL_NSOCKS_PERTHREAD=[1, 16], NCCL_SOCKET_NTHREADS=[8]),
            "NCCL_NSOCKS_PERTHREAD",
            "constraint",
        ),
        (
            space(fixed_env={"NCCL_NET": "Socket", "NCCL_SOCKET_NTHREADS": "16"}),
            "NCCL_NSOCKS_PERTHREAD",
            "constraint",
        ),
        (with_env(NCCL_MIN_CTAS=[16], NCCL_MAX_CTAS=[4, 8]), "NCCL_MIN_CTAS", "constraint"),
        (with_env(NCCL_PROTO=["LL", "Simple"]), "NCCL_PROTO", "risky"),
        (space(fixed_env={"NCCL_NET": "Socket", "NCCL_ALGO": "Ring"}), "NCCL_ALGO", "risky"),
        (with_env(NCCL_SOCKET_IFNAME=["eth0", "eth1"]), "NCCL_SOCKET_IFNAME", "never-tune"),
        (with_env(NCCL_NET=["Socket", "IB"]), "NCCL_NET", "never-tune"),
        (with_env(NCCL_IB_HCA=["mlx5_0"]), "NCCL_IB_HCA", "never-tune"),
        (with_env(NCCL_DEBUG=["WARN", "INFO"]), "NCCL_DEBUG", "never-tune"),
        (space(fixed_env={"OFI_NCCL_GDR_FLUSH_DISABLE": "1"}), "OFI_NCCL_GDR_FLUSH_DISABLE", "never-tune"),
        (space(allow_risky=["NCCL_SOCKET_IFNAME"]), "NCCL_SOCKET_IFNAME", "never-tune"),
        (space(allow_risky=["NCCL_PROTOCOL"]), "NCCL_PROTOCOL", "unknown-variable"),
        (with_env(NCCL_BUFFSIZE=[]), "NCCL_BUFFSIZE", "empty-dimension"),
        (with_env(NCCL_BUFFSIZE={"low": 8388608, "high": 4194304}), "NCCL_BUFFSIZE", "empty-dimension"),
        (space(precisions=[]), "precisions", "empty-dimension"),
        (space(batch_sizes=[]), "batch_sizes", "empty-dimension"),
        (space(sharding=[]), "sharding", "empty-dimension"),
        (space(num_threads=[]), "num_threads", "empty-dimension"),
        (space(batch_sizes=[512, 1024, 512]), "batch_sizes", "duplicate"),
        (space(precisions=[["fp16", "fp16"], ["fp16", "fp16"]]), "precisions", "duplicate"),
        (space(num_threads=[None, None]), "num_threads", "duplicate"),
        (with_env(NCCL_SOCKET_NTHREADS=[4, "4"]), "NCCL_SOCKET_NTHREADS", "duplicate"),
        (with_env(NCCL_SOCKET_NTHREADS=[None, None]), "NCCL_SOCKET_NTHREADS", "duplicate"),
        (
            space(fixed_env={"NCCL_NET": "Socket", "NCCL_NSOCKS_PERTHREAD": "2"}),
            "NCCL_NSOCKS_PERTHREAD",
            "duplicate",
        ),
        (space(envs={}), "envs", "schema"),
        (space(batch_sizes="512"), "batch_sizes", "schema"),
        (with_env(NCCL_BUFFSIZE="4194304"), "NCCL_BUFFSIZE", "schema"),
        (with_env(NCCL_BUFFSIZE={"low": 65536, "high": 131072, "step": 0}), "NCCL_BUFFSIZE", "schema"),
        (
            with_env(NCCL_BUFFSIZE={"low": 65536, "high": 131072, "log": True, "step": 2}),
            "NCCL_BUFFSIZE",
            "schema",
        ),
        (with_env(NCCL_BUFFSIZE={"low": 65536, "hi": 131072}), "NCCL_BUFFSIZE", "schema"),
        (with_env(NCCL_SOCKET_NTHREADS={"low": 0, "high": 4, "log": True}), "NCCL_SOCKET_NTHREADS", "schema"),
        (space(fixed_env={"NCCL_NET": None}), "NCCL_NET", "schema"),
    ],
)
def test_bad_spaces_are_rejected_naming_variable_and_rule(data, variable, rule):
    problems = problems_of(data)
    assert (variable, rule) in pairs(problems), problems
    assert all(p.message for p in problems)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["fp8", "RDMA"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
KEYS = st.sampled_from([*BASE, "preset", "other"])
NAMES = st.sampled_from(["NCCL_BUFFSIZE", "OFI_NCCL_PROTOCOL", "NCCL_NET", "NCCL_PROTO", "LD_PRELOAD", "x y"])


@given(
    st.dictionaries(KEYS, JSON, max_size=4),
    st.dictionaries(NAMES, JSON, max_size=3),
    st.dictionaries(NAMES, JSON, max_size=3),
)
def test_any_decoded_input_gives_a_space_or_a_space_error(top, env, fixed):
    # A request body is untrusted: whatever its shape, the answer is a SpaceError (a 4xx), never a crash.
    data = {**top, "env": env, "fixed_env": fixed} if env or fixed else top
    try:
        load_space(data)
    except SpaceError as exc:
        error = exc
    else:
        return
    assert error.problems
    assert all(p.rule and p.message for p in error.problems)


def test_space_constraint_names_the_largest_product():
    (problem,) = problems_of(
        with_env(NCCL_NSOCKS_PERTHREAD=[1, 2, 16], NCCL_SOCKET_NTHREADS={"low": 1, "high": 8})
    )
    assert "16 x 8 = 128" in problem.message
    assert "64" in problem.message


def test_unknown_variable_says_did_you_mean():
    (problem,) = problems_of(with_env(NCCL_NSOCK_PERTHREAD=[1, 2]))
    assert "did you mean NCCL_NSOCKS_PERTHREAD?" in problem.message


def test_messages_say_what_is_allowed():
    (problem,) = problems_of(with_env(NCCL_NSOCKS_PERTHREAD=[128]))
    assert "from 1 to 64" in problem.message
    (problem,) = problems_of(with_env(NCCL_BUFFSIZE=["4MB"]))
    assert "would read 4" in problem.message
    (problem,) = problems_of(with_env(NCCL_SOCKET_IFNAME=["eth0"]))
    assert "fixed_env" in problem.message


def test_risky_variables_pass_when_allowed():
    s = load_space(with_env(NCCL_PROTO=["LL", "Simple"]) | {"allow_risky": ["NCCL_PROTO"]})
    assert s.env["NCCL_PROTO"] == ["LL", "Simple"]
    # NCCL_PROTO does not act on all-to-all: with table-wise sharding only, say so.
    assert ("NCCL_PROTO", "no-effect") in {(w.variable, w.rule) for w in s.warnings}
    s = load_space(with_env(NCCL_PROTO=["LL"]) | {"allow_risky": ["NCCL_PROTO"], "sharding": ["row_wise"]})
    assert s.warnings == []


def test_passthrough_variables_may_be_fixed():
    s = load_space(
        space(fixed_env={"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "=eth0", "FI_EFA_FORK_SAFE": 1})
    )
    assert s.fixed_env["FI_EFA_FORK_SAFE"] == "1"


def test_all_problems_are_reported_at_once():
    data = space(
        env={
            "NCCL_NSOCK_PERTHREAD": [1],
            "NCCL_BUFFSIZE": ["4MB"],
            "LD_PRELOAD": ["x"],
            "NCCL_PROTO": ["LL"],
        },
        batch_sizes=[512, 512],
        precisions=[["fp4", "fp32"]],
        extra_field=1,
    )
    with pytest.raises(SpaceError) as info:
        load_space(data)
    assert pairs(info.value.problems) == {
        ("NCCL_NSOCK_PERTHREAD", "unknown-variable"),
        ("NCCL_BUFFSIZE", "not-decimal"),
        ("LD_PRELOAD", "injection"),
        ("NCCL_PROTO", "risky"),
        ("batch_sizes", "duplicate"),
        ("precisions[0][0]", "out-of-domain"),
        ("extra_field", "schema"),
    }
    lines = str(info.value).splitlines()
    assert len(lines) == len(info.value.problems) == 7
    assert any(line.startswith("NCCL_BUFFSIZE: '4MB' is not a plain decimal") for line in lines)


def test_constructing_an_invalid_space_directly_fails():
    with pytest.raises(ValidationError) as info:
        SearchSpace(env={"NCCL_BUFFSIZE": ["4MB"]})
    assert "NCCL_BUFFSIZE" in str(info.value)
    assert "not-decimal" in str(info.value)
    with pytest.raises(ValidationError):
        SearchSpace.model_validate({"env": {"NCCL_NSOCKS_PERTHREAD": [32], "NCCL_SOCKET_NTHREADS": [4]}})


def test_warnings_do_not_block():
    s = load_space(with_env(NCCL_NCHANNELS_PER_NET_PEER=[1, 3], NCCL_SOCKET_NTHREADS=[0, 2]))
    assert {(w.variable, w.rule) for w in s.warnings} == {
        ("NCCL_NCHANNELS_PER_NET_PEER", "not-pow2"),
        ("NCCL_NSOCKS_PERTHREAD", "no-effect"),
    }
    s = load_space(with_env(NCCL_NCHANNELS_PER_NET_PEER={"low": 1, "high": 16}))
    assert [w.rule for w in s.warnings] == ["not-pow2"]
    s = load_space(space(fixed_env={"NCCL_NET": "Libfabric"}))
    assert ("NCCL_NSOCKS_PERTHREAD", "no-effect") in {(w.variable, w.rule) for w in s.warnings}
    s = load_space(space(fixed_env={"NCCL_NET": "Socket", "NCCL_DEBUG": "TRACE"}))
    assert ("NCCL_DEBUG", "debug-while-timing") in {(w.variable, w.rule) for w in s.warnings}


# --------------------------------------------------------------------------- files


def test_yaml_and_json_files_round_trip(tmp_path):
    expected = load_space(BASE)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "s.yml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "s.json").write_text(json.dumps(BASE))
    for name in ("s.yaml", "s.yml", "s.json"):
        assert load_space(tmp_path / name) == expected
        assert load_space(str(tmp_path / name)) == expected
    dumped = expected.model_dump(mode="json")
    assert load_space(dumped) == expected
    assert load_space(json.loads(json.dumps(dumped))) == expected


@pytest.mark.parametrize("name", ["socket", "efa"])
def test_presets_round_trip_through_a_dump(name):
    s = load_space(name)
    assert load_space(s.model_dump(mode="json")) == s


def test_yaml_numbers_other_than_plain_decimal_stay_text(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("env:\n  NCCL_BUFFSIZE: [010000000, 0x400000, 4_194_304, 4194304]\n")
    problems = problems_of(path)
    assert [p.rule for p in problems] == ["not-decimal"] * 3
    assert "would read 2097152" in problems[0].message  # octal 010000000
    assert "would read 4194304" in problems[1].message
    assert "would read 4" in problems[2].message


def test_a_file_may_name_a_preset(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("preset: efa\nbatch_sizes: [256]\n")
    s = load_space(path)
    assert s.batch_sizes == [256]
    assert s.fixed_env == {"NCCL_NET": "Libfabric"}


ALIAS_BOMB = "batch_sizes: [512, &a [x, x, x], &b [*a, *a, *a], [*b, *b, *b]]\n"


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("s.yaml", "env:\n  NCCL_BUFFSIZE: [1\n", "not valid YAML"),
        ("s.yaml", "batch_sizes: [512]\nbatch_sizes: [1024]\n", "appears twice"),
        ("s.yaml", "- 1\n- 2\n", "must hold a mapping"),
        ("s.json", '{"batch_sizes": [512], "batch_sizes": [1]}', "appears twice"),
        ("s.json", '{"max_quant_error": NaN}', "not valid JSON"),
        ("s.json", "{", "not valid JSON"),
        ("s.toml", "x = 1", "ends in .yaml"),
        # nine levels of aliases would expand to 9^9 values (gigabytes) before a check saw them
        ("s.yaml", ALIAS_BOMB, "aliases (*name) are not allowed"),
        ("s.yaml", "env: {? [a, b] : [1]}\n", "a key must be a plain name"),
        ("s.yaml", "env:\n  <<: {NCCL_BUFFSIZE: [4194304]}\n", "merge keys (<<) are not allowed"),
        ("s.json", '{"env": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
        ("s.yaml", "env: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ],
)
def test_bad_files(tmp_path, name, text, words):
    path = tmp_path / name
    path.write_text(text)
    (problem,) = problems_of(path)
    assert (problem.variable, problem.rule) == (str(path), "schema")
    assert words in problem.message


def test_missing_file_or_preset(tmp_path):
    (problem,) = problems_of(tmp_path / "absent.yaml")
    assert problem.rule == "schema"
    assert "cannot read" in problem.message
    (problem,) = problems_of("no-such-preset")
    assert "presets: efa, socket" in problem.message


def test_json_schema_is_available_for_the_rest_api():
    schema = SearchSpace.model_json_schema()
    assert set(schema["properties"]) == set(BASE)
    assert schema["additionalProperties"] is False


def test_a_value_nested_past_pythons_recursion_limit_is_checked_without_recursing():
    """The duplicate check's key recursed through lists: 900 levels (a request body under 2 KB) was a
    RecursionError, the service's 500. Its key is flat now, made and compared without recursion."""
    from autotuner.space.checks import _hashable, check_declaration

    def deep(depth: int, leaf: object = None) -> list:
        value: list = [leaf]
        for _ in range(depth - 1):
            value = [value]
        return value

    problems, _ = check_declaration({"batch_sizes": [deep(900), deep(900), deep(900, 1)]})
    assert [(p.variable, p.rule) for p in problems if p.rule == "duplicate"] == [("batch_sizes", "duplicate")]
    assert _hashable([["fp16", "bf16"]]) == _hashable([["fp16", "bf16"]]) != _hashable([["fp16"], "bf16"])
    looped: list = [1]
    looped.append(looped)  # YAML's anchors can say so
    assert _hashable(looped) != _hashable([1, [1]])
