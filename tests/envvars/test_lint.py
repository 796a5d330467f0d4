from pathlib import Path

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from autotuner.envvars import (
    RULES,
    Problem,
    check_value,
    errors,
    format_problems,
    is_decimal,
    lint_env,
    nccl_int,
    parse_assignments,
)
from autotuner.space import lint_space

# What a user would export on an EFA cluster: pass-through settings plus tuned values.
CLEAN_EFA_ENV = {
    "NCCL_NET": "Libfabric",
    "FI_PROVIDER": "efa",
    "FI_EFA_FORK_SAFE": "1",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "NCCL_SOCKET_IFNAME": "^lo,docker",
    "OFI_NCCL_PROTOCOL": "RDMA",
    "NCCL_BUFFSIZE": "8388608",
    "NCCL_P2P_NET_CHUNKSIZE": "524288",
    "NCCL_NCHANNELS_PER_NET_PEER": "4",
    "OFI_NCCL_MIN_STRIPE_SIZE": "131072",
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,ENV,NET",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "NCCL_TOPO_FILE": "/opt/amazon/efa/share/aws-ofi-nccl/xml/p5.48xl-topo.xml",
}


def rules_of(problems, variable=None, severity=None):
    return {
        p.rule
        for p in problems
        if (variable is None or p.variable == variable) and (severity is None or p.severity == severity)
    }


def test_clean_efa_job_env_has_no_problem_at_all():
    # a path on the nodes is pinned only by name, like a correctness risk (issue 21)
    assert lint_env(CLEAN_EFA_ENV, allow_risky=["NCCL_TOPO_FILE"]) == []


def test_a_path_valued_variable_needs_allowing_by_name():
    problems = lint_env({"NCCL_TOPO_FILE": "/tmp/x.xml"})
    assert rules_of(problems, "NCCL_TOPO_FILE") == {"path-value"}
    assert "allow_risky" in problems[0].message


@pytest.mark.parametrize(
    ("text", "reads"),
    [
        ("4194304", 4194304),
        ("4MB", 4),
        ("010", 8),
        ("08", 0),  # octal: 8 is not an octal digit
        ("0x10", 16),
        ("0X1f", 31),
        ("0x", 0),
        (" 4", 4),
        ("\t-12", -12),
        ("+7", 7),
        ("1e6", 1),
        ("4.5", 4),
        ("", 0),
        ("abc", 0),
        ("99999999999999999999999", 2**63 - 1),  # strtoll clamps
        ("-99999999999999999999999", -(2**63)),
    ],
)
def test_nccl_int_reads_like_strtoll(text, reads):
    assert nccl_int(text) == reads


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_decimal_strings_read_back_exactly(n):
    assert is_decimal(str(n))
    assert nccl_int(str(n)) == n


@given(st.text(max_size=12))
def test_any_non_canonical_integer_text_is_rejected(text):
    assume(not is_decimal(text))
    problems = check_value("NCCL_BUFFSIZE", text)
    assert rules_of(problems, "NCCL_BUFFSIZE", "error") & {"not-decimal", "unsafe-value"}


@given(st.from_regex(r"\A[ +0-]?[0-9]{1,9}(MB|K|k|\.0|e6|_000)?\Z"))
def test_number_like_text_is_either_canonical_or_explained(text):
    problems = [p for p in check_value("NCCL_BUFFSIZE", text) if p.rule == "not-decimal"]
    assert bool(problems) == (not is_decimal(text))
    if problems:
        assert f"would read {nccl_int(text)}" in problems[0].message


REFUSALS = yaml.safe_load((Path(__file__).parent / "data" / "value-refusals.yaml").read_text())


@pytest.mark.parametrize(("name", "value", "rule", "words"), [
    tuple("/a" * 200 if v == "__LONG__" else v for v in row) for row in REFUSALS
])  # fmt: skip
def test_check_value_rejects(name, value, rule, words):
    problems = check_value(name, value)
    assert [(p.variable, p.rule, p.severity) for p in problems] == [(name, rule, "error")]
    assert words in problems[0].message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NCCL_BUFFSIZE", "4194304"),
        ("NCCL_BUFFSIZE", 4194304),
        ("NCCL_SOCKET_NTHREADS", "0"),
        ("OFI_NCCL_EAGER_MAX_SIZE", "-1"),
        ("NCCL_PROTO", "simple"),  # NCCL compares protocol names case-insensitively
        ("NCCL_PROTO", "^LL128"),
        ("NCCL_ALGO", "Ring,Tree"),
        ("NCCL_DEBUG_SUBSYS", "^ALLOC,CALL"),
        ("NCCL_NETDEVS_POLICY", "MAX:2"),
        ("NCCL_SOCKET_IFNAME", "=eth0"),
        ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1"),
        ("NCCL_IB_TIMEOUT", 22),
        ("NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p"),
        ("NCCL_NET_GDR_LEVEL", "PHB"),
        ("FI_PROVIDER", "tcp;ofi_rxm"),
    ],
)
def test_check_value_accepts(name, value):
    assert check_value(name, value) == []


@pytest.mark.parametrize(
    "name",
    [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "BASH_ENV",
        "ENV",
        "IFS",
        "PS4",
        "PROMPT_COMMAND",
        "BASH_FUNC_ls%%",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_INJECTION64_PATH",
        "MASTER_ADDR",
        "NCCL_NET_PLUGIN",
        "FI_PROVIDER_PATH",
        "ld_preload",
        "A B",
        "X=Y",
        "1ABC",
        "",
        "NCCL_BUFFSIZE\n",
    ],
)
def test_injection_names(name):
    problems = lint_env({name: "1"})
    assert [p.rule for p in problems] == ["injection"]


def test_unknown_variable_suggests_the_right_one():
    (problem,) = lint_env({"NCCL_NSOCK_PERTHREAD": "4"})
    assert (problem.variable, problem.rule) == ("NCCL_NSOCK_PERTHREAD", "unknown-variable")
    assert "did you mean NCCL_NSOCKS_PERTHREAD?" in problem.message
    (problem,) = lint_env({"NCCL_COMPLETELY_MADE_UP": "4"})
    assert problem.rule == "unknown-variable"
    assert "did you mean" not in problem.message


def test_risky_needs_an_explicit_allow():
    assert rules_of(lint_env({"NCCL_PROTO": "LL128"}), "NCCL_PROTO") == {"risky"}
    assert lint_env({"NCCL_PROTO": "LL128"}, allow_risky=["NCCL_PROTO"]) == []
    assert rules_of(lint_env({"NCCL_P2P_LL_THRESHOLD": "0"}, allow_risky=["NCCL_PROTO"])) == {"risky"}


@pytest.mark.parametrize("name", ["OFI_NCCL_GDR_FLUSH_DISABLE", "OFI_NCCL_DISABLE_NATIVE_RDMA_CHECK"])
def test_never_variables_are_refused_even_when_allowed(name):
    problems = lint_env({name: "1"}, allow_risky=[name])
    assert [(p.variable, p.rule) for p in problems] == [(name, "never-tune")]


def test_passthrough_variables_are_fine_in_a_concrete_env():
    assert lint_env({"NCCL_SOCKET_IFNAME": "eth0", "NCCL_NET": "IB", "NCCL_IB_HCA": "mlx5_0"}) == []


def test_socket_constraint_on_a_concrete_env():
    problems = lint_env({"NCCL_NSOCKS_PERTHREAD": "16", "NCCL_SOCKET_NTHREADS": "8"})
    (problem,) = errors(problems)
    assert (problem.variable, problem.rule) == ("NCCL_NSOCKS_PERTHREAD", "constraint")
    assert "16 x 8 = 128" in problem.message
    assert "cut NCCL_NSOCKS_PERTHREAD to 8" in problem.message
    assert lint_env({"NCCL_NSOCKS_PERTHREAD": "8", "NCCL_SOCKET_NTHREADS": "8"}) == []


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"),
        ("NCCL_MIN_P2P_NCHANNELS", "NCCL_MAX_P2P_NCHANNELS"),
        ("OFI_NCCL_RDMA_MIN_POSTED_EAGER_BUFFERS", "OFI_NCCL_RDMA_MAX_POSTED_EAGER_BUFFERS"),
    ],
)
def test_minimum_above_maximum(low, high):
    assert rules_of(errors(lint_env({low: "16", high: "8"}))) == {"constraint"}
    assert errors(lint_env({low: "8", high: "8"})) == []


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "0"}, "NCCL_NSOCKS_PERTHREAD"),
        ({"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_NET": "Libfabric"}, "NCCL_NSOCKS_PERTHREAD"),
        ({"NCCL_SOCKET_NTHREADS": "4", "NCCL_NET": "IB"}, "NCCL_SOCKET_NTHREADS"),
        ({"OFI_NCCL_PROTOCOL": "RDMA", "NCCL_NET": "Socket"}, "OFI_NCCL_PROTOCOL"),
        ({"OFI_NCCL_MIN_STRIPE_SIZE": "65536", "NCCL_NET": "socket"}, "OFI_NCCL_MIN_STRIPE_SIZE"),
        ({"NCCL_IB_TIMEOUT": "22", "NCCL_NET": "Socket"}, "NCCL_IB_TIMEOUT"),
        ({"OFI_NCCL_EAGER_MAX_SIZE": "4096", "OFI_NCCL_PROTOCOL": "SENDRECV"}, "OFI_NCCL_EAGER_MAX_SIZE"),
        ({"NCCL_P2P_NET_CHUNKSIZE": "1048576", "NCCL_BUFFSIZE": "4194304"}, "NCCL_P2P_NET_CHUNKSIZE"),
    ],
)
def test_no_effect_warnings(env, variable):
    problems = lint_env(env)
    assert errors(problems) == []
    assert ("no-effect", "warning") in {(p.rule, p.severity) for p in problems if p.variable == variable}


def test_socket_settings_under_the_socket_net_are_effective():
    assert lint_env({"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "2", "NCCL_NET": "Socket"}) == []


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"NCCL_DEBUG": "TRACE"}, "NCCL_DEBUG"),
        ({"NCCL_DEBUG": "trace"}, "NCCL_DEBUG"),
        ({"TORCH_NCCL_ENABLE_TIMING": "1"}, "TORCH_NCCL_ENABLE_TIMING"),
        ({"TORCH_NCCL_NAN_CHECK": "1"}, "TORCH_NCCL_NAN_CHECK"),
    ],
)
def test_debug_while_timing(env, variable):
    assert [(p.variable, p.rule, p.severity) for p in lint_env(env)] == [
        (variable, "debug-while-timing", "warning")
    ]


def test_debug_settings_that_cost_nothing_are_quiet():
    assert (
        lint_env({"NCCL_DEBUG": "INFO", "TORCH_NCCL_ENABLE_TIMING": "0", "TORCH_NCCL_NAN_CHECK": "0"}) == []
    )


def test_not_pow2_and_deprecated_warnings():
    (problem,) = lint_env({"NCCL_NCHANNELS_PER_NET_PEER": "3"})
    assert (problem.rule, problem.severity) == ("not-pow2", "warning")
    assert "up to 4" in problem.message
    (problem,) = lint_env({"NCCL_MAX_NCHANNELS": "16"})
    assert (problem.rule, problem.severity) == (
        "deprecated",
        "warning",
    )
    assert "NCCL_MAX_CTAS" in problem.message


def test_every_problem_is_reported_not_just_the_first():
    problems = lint_env(
        {
            "LD_PRELOAD": "/tmp/x.so",
            "NCCL_BUFFSIZE": "4MB",
            "NCCL_PROTO": "LL128",
            "NCCL_SOCKET_IFNAME": "eth0;id",
            "NCCL_NSOCK_PERTHREAD": "2",
        }
    )
    assert {(p.variable, p.rule) for p in problems} == {
        ("LD_PRELOAD", "injection"),
        ("NCCL_BUFFSIZE", "not-decimal"),
        ("NCCL_PROTO", "risky"),
        ("NCCL_SOCKET_IFNAME", "unsafe-value"),
        ("NCCL_NSOCK_PERTHREAD", "unknown-variable"),
    }
    assert all(p.rule in RULES for p in problems)


def test_messages_never_carry_raw_control_characters():
    problems = lint_env({"NCCL_SOCKET_IFNAME": "a\nb\x1b[31m", "BAD\nNAME": "x"})
    assert problems
    assert all(not any(ord(c) < 32 for c in str(p)) for p in problems)


def test_parse_assignments():
    assert parse_assignments(["A=1", "B==x", "C="]) == {"A": "1", "B": "=x", "C": ""}
    assert parse_assignments([]) == {}


@pytest.mark.parametrize("item", ["NOEQUALS", "=value", ""])
def test_parse_assignments_names_the_malformed_item(item):
    with pytest.raises(ValueError, match="is not KEY=VALUE") as info:
        parse_assignments(["OK=1", item])
    assert repr(item) in str(info.value)


def test_parse_assignments_refuses_a_repeated_name():
    with pytest.raises(ValueError, match="NCCL_BUFFSIZE is given twice"):
        parse_assignments(["NCCL_BUFFSIZE=1", "NCCL_BUFFSIZE=2"])


def test_format_problems_aligns_columns():
    text = format_problems(lint_env({"NCCL_BUFFSIZE": "4MB", "NCCL_NCHANNELS_PER_NET_PEER": "3"}))
    first, second = text.splitlines()
    assert first.startswith("NCCL_BUFFSIZE                not-decimal         '4MB' is not a plain decimal")
    assert second.startswith("NCCL_NCHANNELS_PER_NET_PEER  not-pow2 (warning)  NCCL rounds 3 up to 4")
    assert format_problems([]) == ""


def test_problem_str():
    assert str(Problem("X", "duplicate", "twice")) == "X: twice [duplicate]"
    assert str(Problem("X", "no-effect", "moot", "warning")) == "X: moot [no-effect, warning]"


def test_lint_space_returns_instead_of_raising(tmp_path):
    assert lint_space("socket") == []
    assert lint_space("efa") == []
    problems = lint_space({"env": {"NCCL_BUFFSIZE": ["4MB"]}, "batch_sizes": []})
    assert {(p.variable, p.rule) for p in problems} == {
        ("NCCL_BUFFSIZE", "not-decimal"),
        ("batch_sizes", "empty-dimension"),
    }
    warnings = lint_space({"env": {"NCCL_NCHANNELS_PER_NET_PEER": [1, 3]}})
    assert [(p.rule, p.severity) for p in warnings] == [("not-pow2", "warning")]
    assert [p.rule for p in lint_space(tmp_path / "missing.yaml")] == ["schema"]
