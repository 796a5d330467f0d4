"""Emulated nodes set some of NCCL's variables themselves (nodes=hostids: sockets over loopback, a
host id per node; nodes=namespaces: the veth): a space that searches one, or fixes it to another
value, would be measured with the emulation's and published with its own. Refused when the study is
created, naming the variables; a space that agrees with the emulation (NCCL_NET=Socket) runs."""

from __future__ import annotations

import pytest

from autotuner.executors import LaunchRequest, LocalExecutor
from autotuner.space import load_space
from autotuner.tuning.settings import StudySettings
from autotuner.tuning.study import StudyError, create_study, pinned_clash
from tests.autotuner.test_driver import RECORDED


def settings(tmp_path, nodes: str, nnodes: int = 2) -> StudySettings:
    return StudySettings(executor="local", executor_options={"nodes": nodes}, nnodes=nnodes, nproc_per_node=1,
                         workdir=str(tmp_path / "runs"))  # fmt: skip


@pytest.mark.parametrize(
    ("nodes", "space", "says"),
    [
        ("hostids", {"fixed_env": {"NCCL_SOCKET_IFNAME": "eth0"}}, "NCCL_SOCKET_IFNAME=lo"),
        ("hostids", {"fixed_env": {"NCCL_NET": "IB"}}, "NCCL_NET=Socket"),
        ("namespaces", {"fixed_env": {"NCCL_SOCKET_IFNAME": "ib0"}}, "NCCL_SOCKET_IFNAME=eth0"),
    ],
)
def test_a_space_at_odds_with_the_emulation_is_refused_naming_the_variables(
    store, tmp_path, nodes, space, says
):
    with pytest.raises(StudyError, match=f"executor local sets {says} itself") as raised:
        create_study(store, cluster="c", workload=RECORDED["workload"], space=space,
                     settings=settings(tmp_path, nodes))  # fmt: skip
    assert raised.value.where == "space"
    assert store.studies() == []


def test_a_space_that_agrees_with_the_emulation_or_runs_on_one_node_is_taken(store, tmp_path):
    agrees = {"env": {"NCCL_NSOCKS_PERTHREAD": [2, 4]}, "fixed_env": {"NCCL_NET": "Socket"}}
    assert create_study(store, cluster="c", workload=RECORDED["workload"], space=agrees,
                        settings=settings(tmp_path, "hostids")).id  # fmt: skip
    one_node = {"fixed_env": {"NCCL_SOCKET_IFNAME": "eth0"}}
    assert create_study(store, cluster="c", workload=RECORDED["workload"], space=one_node,
                        settings=settings(tmp_path, "hostids", nnodes=1)).id  # fmt: skip


def test_what_each_emulation_pins(tmp_path):
    launch = LaunchRequest(name="s1-l1", spec={}, env={}, workdir=tmp_path, nproc_per_node=2, nnodes=2)
    assert LocalExecutor(nodes="hostids", gpus=0).pinned_env(launch)["NCCL_NET"] == "Socket"
    assert "NCCL_P2P_DISABLE" not in LocalExecutor(nodes="hostids", gpus=4).pinned_env(launch)  # a GPU each
    assert LocalExecutor(nodes="hostids", gpus=1).pinned_env(launch)["NCCL_P2P_DISABLE"] == "1"  # shared
    assert LocalExecutor(nodes="namespaces", gpus=0).pinned_env(launch) == {
        "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"
    }  # fmt: skip
    assert LocalExecutor(nodes="ranks", gpus=0).pinned_env(launch) == {}


def test_a_searched_variable_the_executor_sets_is_a_clash_whatever_its_values():
    space = load_space({"env": {"NCCL_NSOCKS_PERTHREAD": [2, 4]}, "fixed_env": {"NCCL_NET": "Socket"}})
    assert (
        pinned_clash(space, {"NCCL_NSOCKS_PERTHREAD": "2", "NCCL_NET": "Socket"}) == "NCCL_NSOCKS_PERTHREAD=2"
    )
