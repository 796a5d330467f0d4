"""Gates on values (issue 21): integer NCCL_IB_* variables are typed as integers, path-valued variables
are pinned only when allowed by name, and one rule decides what a served config may hand a job."""

from __future__ import annotations

import pytest

from autotuner.envvars import is_path_valued, lint_env, lookup, served_problems
from autotuner.space import SpaceError, load_space


@pytest.mark.parametrize(
    ("name", "value"),
    [("NCCL_IB_SL", "0x10"), ("NCCL_IB_SL", "16"), ("NCCL_IB_TIMEOUT", "010"), ("NCCL_IB_TC", "4k"),
     ("NCCL_IB_RETRY_CNT", "8"), ("NCCL_IB_GID_INDEX", "-2"), ("NCCL_IB_QPS_PER_CONNECTION", "0"),
     ("NCCL_IB_QPS_PER_CONNECTION", "129"), ("NCCL_IB_TIMEOUT", "0"), ("NCCL_IB_TC", "-2"), ("NCCL_IB_TC", "256")],
)  # fmt: skip
def test_integer_ib_variables_refuse_what_strtoll_would_misread_or_what_is_out_of_range(name, value):
    assert lookup(name).kind in ("int", "bool")
    problems = lint_env({name: value})
    assert {p.rule for p in problems} & {"not-decimal", "out-of-domain"}, problems


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NCCL_IB_SL", "3"),
        ("NCCL_IB_TIMEOUT", "22"),
        ("NCCL_IB_GID_INDEX", "-1"),
        ("NCCL_IB_SL", "-1"),  # NCCL's own "unset" (src/transport/net_ib/connect.cc)
        ("NCCL_IB_TC", "-1"),
        ("NCCL_IB_HCA", "=mlx5_0:1"),
    ],
)
def test_ib_values_nccl_reads_as_written_pass(name, value):
    assert lint_env({name: value}) == []


@pytest.mark.parametrize("name", ["NCCL_TOPO_FILE", "NCCL_GRAPH_FILE", "NCCL_CONF_FILE", "X_PATH", "Y_DIR"])
def test_path_valued_names(name):
    assert is_path_valued(name)


def test_a_path_in_fixed_env_is_refused_unless_allowed_by_name():
    with pytest.raises(SpaceError) as caught:
        load_space({"fixed_env": {"NCCL_TOPO_FILE": "/tmp/x.xml"}})
    assert [(p.variable, p.rule) for p in caught.value.problems] == [("NCCL_TOPO_FILE", "path-value")]
    space = load_space({"fixed_env": {"NCCL_TOPO_FILE": "/opt/topo.xml"}, "allow_risky": ["NCCL_TOPO_FILE"]})
    assert space.fixed_env == {"NCCL_TOPO_FILE": "/opt/topo.xml"}
    assert space.warnings == []


def test_a_path_the_tuner_never_sets_cannot_be_allowed():
    with pytest.raises(SpaceError, match="never-tune"):
        load_space({"fixed_env": {"NCCL_CONF_FILE": "/tmp/n.conf"}, "allow_risky": ["NCCL_CONF_FILE"]})


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [("LD_PRELOAD", "/x.so", "injection"), ("NCCL_NET_PLUGIN", "x", "injection"), ("PYTHONPATH", "/", "injection"),
     ("BASH_ENV", "/x", "injection"), ("PATH", "/", "injection"), ("A=B", "1", "injection"),
     ("NCCL_SOCKET_IFNAME", "a\nb", "unsafe-value"), ("NCCL_BUFFSIZE", "1\0", "unsafe-value"),
     ("NCCL_TUNER_PLUGIN", "x", "never-tune"), ("NCCL_DEBUG_FILE", "/tmp/x", "never-tune"),
     ("NCCL_NO_SUCH", "1", "unknown-variable"), ("NCCL_BUFFSIZE", "4MB", "not-decimal")],
)  # fmt: skip
def test_what_a_served_config_may_not_hand_a_job(name, value, rule):
    assert [p.rule for p in served_problems(name, value)] == [rule]


@pytest.mark.parametrize(
    ("name", "value"),
    [("NCCL_NSOCKS_PERTHREAD", "4"), ("NCCL_PROTO", "Simple"), ("NCCL_TOPO_FILE", "/opt/topo.xml"),
     ("FI_PROVIDER", "efa"), ("NCCL_IB_SL", "3")],
)  # fmt: skip
def test_what_a_publish_can_carry_passes_the_gate(name, value):
    # a correctness risk or a path is published only when the study allowed it by name; a job may get it
    assert served_problems(name, value) == []


@pytest.mark.parametrize(
    ("name", "rule", "said"),
    [("NCCL_IB_FOO_PLUGIN", "injection", "changes what runs"),
     ("NCCL_SOCKET_X_PLUGIN", "injection", "changes what runs"),
     ("NCCL_IB_X_FILE", "unknown-variable", "NCCL_IB_* covers settings, not paths"),
     ("NCCL_IB_X_PATH", "unknown-variable", "NCCL_IB_* covers settings, not paths"),
     ("NCCL_IB_x_dir", "unknown-variable", "NCCL_IB_* covers settings, not paths")],
)  # fmt: skip
def test_a_family_covers_no_plugin_and_no_path(name, rule, said):
    """NCCL_IB_* passes cluster settings through; a plugin to load or a file to read under its stem is
    not one (README: *_PLUGIN is never served), unless the registry lists it by name."""
    assert lookup(name) is None
    problems = served_problems(name, "/tmp/evil.so")
    assert [p.rule for p in problems] == [rule]
    assert said in problems[0].message
    assert lookup("NCCL_IB_HCA").name == "NCCL_IB_*"  # the family's settings still pass
    assert served_problems("NCCL_IB_HCA", "mlx5_0") == []
