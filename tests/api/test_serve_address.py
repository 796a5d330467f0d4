"""What `autotuner serve` says of an address it cannot listen on, and of a refused option: one line
naming what the user gave, before anything starts (a taken port was said "serving on" first, then
uvicorn's `[Errno 98] Address already in use` without the address; `--port 99999` was named
AUTOTUNER_PORT)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.api.service import make_server


def _serve(server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotuner", "serve", *args], env=server.env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_taken_port_is_one_line_naming_the_address_before_anything_starts(tmp_path, workers):
    server = make_server(tmp_path)
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", server.port))
        taken.listen()
        result = _serve(server, "--workers", workers)
    assert result.returncode == 2, result.stderr  # as other refused settings (was 3)
    assert result.stderr.strip().splitlines() == [
        f"error: cannot listen on http://127.0.0.1:{server.port}: the address is already in use (another "
        "service?): give a free port with --port or AUTOTUNER_PORT"
    ]
    assert not (server.data_dir / "scheduler.pid").exists()  # no scheduler started and left to stop


def test_an_address_not_of_this_host_is_named(tmp_path):
    server = make_server(tmp_path)
    result = _serve(server, "--host", "192.0.2.1")  # TEST-NET-1: never a local address
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: cannot listen on http://192.0.2.1:{server.port}: Cannot assign requested address (set with "
        "--host/AUTOTUNER_HOST and --port/AUTOTUNER_PORT)"
    ]


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--port", "99999"], {}, "error: --port 99999: Input should be less than or equal to 65535"),
        (["--workers", "0"], {}, "error: --workers 0: Input should be greater than or equal to 1"),
        (
            [],
            {"AUTOTUNER_PORT": "99999"},
            "error: AUTOTUNER_PORT: Input should be less than or equal to 65535",
        ),
    ],
)
def test_a_refused_option_is_named_as_the_user_gave_it(tmp_path, args, env, said):
    server = make_server(tmp_path, **env)
    result = _serve(server, *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [said]


def test_a_port_taken_on_ipv4_is_found_for_a_dual_stack_host():
    """Several workers on `::` bind one dual-stack socket (uvicorn sets no IPV6_V6ONLY), which an IPv4
    listener on the port refuses: the probe bound v6-only, passed, and uvicorn then failed after "serving on"."""
    from api.cli import cannot_listen

    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        said = cannot_listen("::", port, workers=2)
    assert said == (f"cannot listen on http://[::]:{port}: the address is already in use (another service?): give "
                    "a free port with --port or AUTOTUNER_PORT")  # fmt: skip
