"""A real `autotuner serve` process on a free port, with a temp data dir and known tokens, and what
tests and benchmarks do with one (the fixtures that start one: tests/api/conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.helpers import LANDSCAPE

TOKENS = {"read": "r-token", "write": "w-token", "admin": "a-token"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    data_dir: Path
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    log: Path = field(default_factory=Path)
    args: list[str] = field(default_factory=list)  # of `autotuner serve`
    session: bool = False  # in a process group of its own (signalled whole, as systemd or timeout do)

    def launch(self) -> None:
        """Start `autotuner serve`, not waiting for it."""
        self.log = self.data_dir / f"server-{int(time.time() * 1000)}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "autotuner", "serve", *self.args], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=self.session)  # fmt: skip

    def start(self, timeout_s: float = 120) -> None:
        """Start it and wait until /readyz says ready: a supervisor, its workers and a scheduler, each
        importing the app, took 8 s on a busy 2-core machine (30 s was the deadline)."""
        self.launch()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"server not ready in {timeout_s} s: {self.log.read_text()[-2000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop the supervisor, then wait for its workers to let go of the port (after a SIGKILL they
        follow it through PDEATHSIG, a moment later): a restart must not find the old ones answering."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        host, port = self.url.removeprefix("http://").split(":")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
            except OSError:
                return
            time.sleep(0.05)
        raise RuntimeError(f"port {port} still answers 15 s after the server was stopped")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def connection_owners(self, client_ports: set[int]) -> dict[int, int]:
        """client port -> pid of the server process (a uvicorn worker) holding the accepted end of
        that connection, from /proc (Linux): which worker answers which connection."""
        inodes = {}
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            local, remote, inode = (line.split()[i] for i in (1, 2, 9))
            peer = int(remote.rsplit(":", 1)[1], 16)
            if int(local.rsplit(":", 1)[1], 16) == self.port and peer in client_ports:
                inodes[f"socket:[{inode}]"] = peer
        owners = {}
        for pid in _children(self.proc.pid if self.proc else -1):
            try:
                links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:  # exited meanwhile
                continue
            owners.update({inodes[link]: pid for link in links if link in inodes})
        return owners

    def client(self, scope: str | None = "admin") -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKENS[scope]}"} if scope else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def _children(parent: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        if stat and int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            pids.append(int(entry))
    return pids


def make_server(tmp_path: Path, *, replay_delay_s: float = 0.3, **env_overrides: str) -> Server:
    """A service on a free port (not started). `replay_delay_s`: how long each replay launch "runs"
    (long enough to watch a study progress; 0 where only its end matters)."""
    port = free_port()
    data = tmp_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "AUTOTUNER_DATA_DIR": str(data),
        "AUTOTUNER_PORT": str(port),
        "AUTOTUNER_TOKENS": ",".join(f"{secret}:{scope}" for scope, secret in TOKENS.items()),
        "AUTOTUNER_EXECUTORS": "local,replay",
        "AUTOTUNER_EXECUTOR_OPTIONS": json.dumps(
            {"replay": {"landscape": str(LANDSCAPE), "delay_s": replay_delay_s}}
        ),
        "AUTOTUNER_CACHE_DIR": str(tmp_path / "hook-cache"),
    }
    env.pop("AUTOTUNER_DATABASE_URL", None)
    env.update(env_overrides)
    return Server(url=f"http://127.0.0.1:{port}", data_dir=data, env=env)


def replay_study_body(name: str = "demo", **settings) -> dict:
    """A study on the recorded landscape (fast, deterministic)."""
    recorded = json.loads(LANDSCAPE.read_text())
    return {
        "name": name,
        "cluster": "cpu-box",
        "workload": recorded["workload"],
        "space": {
            "env": {"NCCL_NSOCKS_PERTHREAD": [None, 4]},
            "precisions": [["fp32", "fp32"], ["fp16", "fp16"], ["fp8", "bf16"], ["int8", "int8"]],
            "batch_sizes": [64, 256],
            "allow_batch_change": True,
            # recorded on gloo, where NCCL variables are inert: searched anyway to exercise the search
            "force_inert": ["NCCL_NSOCKS_PERTHREAD"],
        },
        "settings": {
            "executor": "replay",
            "trials": 3,
            "candidates_per_launch": 3,
            "confirm_rounds": 2,
            **settings,
        },
    }


def wait_for_state(
    client: httpx.Client, study_id: int, states: tuple[str, ...], timeout_s: float = 120
) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        study = client.get(f"/v1/studies/{study_id}").json()
        if study["state"] in states:
            return study
        time.sleep(0.2)
    raise AssertionError(f"study {study_id} never reached {states}: {study}")


def served_config(client: httpx.Client, cluster: str = "cpu-box", workload: str = "small") -> httpx.Response:
    """One fetch: a published config is served at once (a miss asks the store), so tests never wait."""
    return client.get(f"/v1/configs/{cluster}/{workload}")


def wait_for_config(client: httpx.Client, cluster: str = "cpu-box", workload: str = "small",
                    timeout_s: float = 10) -> httpx.Response:  # fmt: skip
    """The first 200 within `timeout_s` (bench/serving.py warms up with it); tests use served_config."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = client.get(f"/v1/configs/{cluster}/{workload}")
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        time.sleep(0.1)
