"""What NCCL reported, read whole: on real INFO logs of the H200 run (NCCL 2.28.9, bench/RESULTS.md) and
on lines in the formats NCCL's source prints for what that run did not show (P2P, SHM, plugins)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trials.nccl_log import crosses_network, parse_nccl_info

DATA = Path(__file__).parent / "data"


def parsed(name: str, **kw):
    return parse_nccl_info((DATA / name).read_text().splitlines(), **kw)


def test_two_emulated_nodes_reach_each_other_through_the_socket_transport():
    found = parsed("nccl-info-h200-2nodes-socket.log")
    assert found["peer_transports"] == {"NET/Socket/0": 4, "NET/Socket/0/Shared": 4}
    assert found["transport_kinds"] == ["NET"]
    assert crosses_network(found) is True
    assert (found["nranks"], found["nnodes"], found["init_complete"]) == (2, 2, 1)
    assert found["nics"] == ["lo:127.0.0.1"]
    assert found["network"] == "Socket"
    assert found["net_plugin"] == "none (NCCL's internal network)"
    assert found["net_plugin_assigned"] == "Socket"


def test_socket_threads_and_sockets_nccl_took():
    found = parsed("nccl-info-h200-2nodes-socket-8x2.log")
    assert (found["socket_nthreads"], found["socket_nsocks_perthread"]) == (2, 8)
    assert found["set_by_environment"]["NCCL_NSOCKS_PERTHREAD"] == "8"


def test_one_node_names_a_network_but_no_peer_crosses_it():
    found = parsed("nccl-info-h200-1node.log")
    assert found["network"] == "Socket"
    assert found["nnodes"] == 1
    assert "transport_kinds" not in found
    assert crosses_network(found) is None  # no peer at all
    assert found["nics"] == ["eth0:192.0.2.2"]


def test_values_from_nccl_conf_are_told_from_the_launchs():
    found = parsed(
        "nccl-info-h200-2nodes-socket.log",
        launch_env={"NCCL_SOCKET_IFNAME": "lo", "NCCL_HOSTID": "x"},
        conf_files={"/etc/nccl.conf": "# site defaults\nNCCL_P2P_DISABLE=1\nNCCL_SHM_DISABLE = 1\n"},
    )
    assert found["env_source"]["NCCL_SOCKET_IFNAME"] == "environment"
    assert found["env_source"]["NCCL_P2P_DISABLE"] == "/etc/nccl.conf"
    assert found["env_source"]["NCCL_SHM_DISABLE"] == "/etc/nccl.conf"
    assert found["env_source"]["NCCL_NVLS_ENABLE"] == "environment (not the launch's)"


LINES = """\
h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v9)
h:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.0
h:1:1 [0] NCCL INFO Using network AWS Libfabric
h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM
h:1:1 [0] NCCL INFO Channel 00 : 2[2] -> 0[0] via SHM/direct/direct
h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.2<0>
"""


def test_multi_word_networks_plugins_and_intra_node_transports():
    found = parse_nccl_info(LINES.splitlines())
    assert found["network"] == "AWS Libfabric"  # was cut to "AWS"
    assert found["net_plugin"] == "AWS Libfabric (v9)"
    assert found["ofi_plugin_version"] == "1.14.0"
    assert found["transport_kinds"] == ["P2P", "SHM"]
    assert crosses_network(found) is False
    assert found["peer_transports"] == {"P2P/CUMEM": 1, "P2P/IPC/read": 1, "SHM/direct/direct": 1}
    assert found["nics"] == ["mlx5_0:1/IB", "mlx5_1:1/IB"]
    assert found["nic_transport"] == "IB"


@pytest.mark.parametrize("line", ["NCCL INFO Channel garbage via", "NCCL INFO Using network ", "no nccl"])
def test_odd_lines_are_ignored(line):
    assert "transport_kinds" not in parse_nccl_info([line])


def test_nccls_warnings_reach_the_launch_log_and_its_routed_file_is_removed(tmp_path):
    import io

    from trials.nccl_log import MAX_WARNINGS, hand_over

    log = tmp_path / "autotuner-nccl-123.log"
    log.write_text(
        "gpu1:123:456 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"
        "gpu1:123:789 [0] NCCL WARN NET/Socket : socket progress error\n"
        "gpu1:123:789 [0] NCCL INFO transport/net.cc:1310 -> 6\n"
    )
    stderr = io.StringIO()
    hand_over(log, stderr)
    assert stderr.getvalue() == "nccl: gpu1:123:789 [0] NCCL WARN NET/Socket : socket progress error\n"
    assert not log.exists()  # one file a process was left in the temporary directory
    log.write_text("".join(f"h:1:2 [0] NCCL WARN retry {i}\n" for i in range(MAX_WARNINGS + 5)))
    flood = io.StringIO()
    hand_over(log, flood)
    lines = flood.getvalue().splitlines()
    assert lines[0].endswith("retry 5")
    assert lines[-2].endswith(f"retry {MAX_WARNINGS + 4}")
    assert lines[-1] == "nccl: (5 earlier warnings not shown)"
    hand_over(None, flood)  # the launcher routed it itself: not ours
