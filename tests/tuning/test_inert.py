"""Which knobs can act where launches run, decided by what NCCL reported: the network it chose, the
plugin it loaded, and (refined) whether any peer is reached through its NET transport at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner.tuning.inert import Where, inert_variables, why_inert
from trials.nccl_log import parse_nccl_info

LOGS = Path(__file__).parent.parent / "trials" / "data"
NET_KNOBS = ["NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS"]


def where(log: str) -> Where:
    effective = parse_nccl_info((LOGS / log).read_text().splitlines())
    return Where.of_result({"backend": "nccl", "nccl_effective": effective})


def test_socket_knobs_act_between_two_nodes_on_sockets():
    two = where("nccl-info-h200-2nodes-socket.log")
    assert two.crosses_network is True
    assert two.network == "Socket"
    assert inert_variables(NET_KNOBS, two) == {}


def test_one_node_makes_network_knobs_inert_even_when_nccl_names_a_network():
    one = where("nccl-info-h200-1node.log")
    assert one.network == "Socket"
    assert one.crosses_network is False
    inert = inert_variables(NET_KNOBS, one)
    assert set(inert) == set(NET_KNOBS)
    assert "no peer is reached through it" in inert["NCCL_NSOCKS_PERTHREAD"]


def test_peers_through_p2p_and_shm_only_make_network_knobs_inert_and_say_how_they_are_reached():
    w = Where("nccl", "IB", False, crosses_network=False, peer_transports=("P2P", "SHM"))
    assert "every peer via P2P/SHM" in (why_inert("NCCL_NSOCKS_PERTHREAD", w) or "")
    assert why_inert("NCCL_IB_QPS_PER_CONNECTION", w) is not None
    assert why_inert("NCCL_BUFFSIZE", w) is None  # every transport reads it


@pytest.mark.parametrize("summary", [{"backend": "nccl", "nccl_effective": {"network": "Socket"}}, {}])
def test_an_unknown_transport_decides_nothing(summary):
    assert Where.of_result(summary).crosses_network is None
    assert why_inert("NCCL_NSOCKS_PERTHREAD", Where.of_result(summary)) is None
