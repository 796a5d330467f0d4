"""What jobs see while configs change: a real `autotuner serve` with 2 workers, 32 connections fetching
as fast as they can, and another process publishing, pinning and rolling back (tests/api/config_writer).

- never a 404 once the config is published (the first publish has returned), so none after a 200;
- monotonic reads: a fetch that starts after another one ended never shows an older state (each
  state the writer makes is new, so an answer names its place in the sequence, rollbacks included);
- a change made through the API is served by every worker when the call returns; one made by
  another process within AUTOTUNER_CONFIG_REFRESH_S (plus SLACK_S for a loaded machine).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from tests.api.config_writer import STEPS
from tests.api.service import TOKENS, Server, make_server
from tests.helpers import REPO, fresh_postgres_database, skip_or_fail

CONNECTIONS = 32
WORKERS = 2
REFRESH_S = 1.0
SLACK_S = 1.0  # a poll thread competing with 32 connections for a loaded CPU may run late
WRITER_DEADLINE_S = 120
PATHS = ["/v1/configs/c/w", "/v1/configs/c/w?nodes=1&via=route"]  # the fast path, and the route
_LENGTH = re.compile(rb"content-length: *(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Fetch:
    started: float
    ended: float
    status: int
    state: tuple[int, bool] | None  # (version, pinned) of a 200


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _roundtrip(conn: Connection, request: bytes) -> tuple[int, bytes]:
    reader, writer = conn
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    return int(head[9:12]), await reader.readexactly(int(_LENGTH.search(head).group(1)))


def _request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKENS['read']}\r\n\r\n".encode()


async def _connections_on_every_worker(
    server: Server, workers: int, deadline_s: float = 60
) -> list[Connection]:
    """CONNECTIONS keep-alive connections, as many on each worker (which one accepts is the kernel's
    choice, and one worker tends to take a whole burst): the skew between workers is what is tested."""
    per_worker = CONNECTIONS // workers
    kept: dict[int, list[Connection]] = {}
    deadline = time.monotonic() + deadline_s
    while sum(len(c) for c in kept.values()) < CONNECTIONS:
        assert time.monotonic() < deadline, f"connections never spread over {workers} workers: {kept.keys()}"
        conn = await asyncio.open_connection("127.0.0.1", server.port)
        await _roundtrip(conn, _request("/healthz"))  # accepted: a worker holds it now
        port = conn[1].get_extra_info("sockname")[1]
        owner = server.connection_owners({port}).get(port)
        if owner is not None and len(kept.setdefault(owner, [])) < per_worker:
            kept[owner].append(conn)
        else:
            conn[1].close()
    return [c for conns in kept.values() for c in conns]


async def _fetch_loop(conn: Connection, path: str, log: list[Fetch], stop: asyncio.Event) -> None:
    """Back to back on one connection (so one worker); plain HTTP/1.1, so the client costs little CPU
    beside the server it measures."""
    request = _request(path)
    try:
        while not stop.is_set():
            started = time.monotonic()
            status, body = await _roundtrip(conn, request)
            config = json.loads(body) if status == 200 else None
            state = (config["version"], config["pinned"]) if config else None
            log.append(Fetch(started, time.monotonic(), status, state))
    finally:
        conn[1].close()


async def _load_while_writing(server: Server, writer_cmd: list[str]) -> tuple[list[Fetch], str]:
    log: list[Fetch] = []
    stop = asyncio.Event()
    conns = await _connections_on_every_worker(server, WORKERS)
    loops = [asyncio.create_task(_fetch_loop(c, PATHS[1] if i % 4 == 3 else PATHS[0], log, stop))
             for i, c in enumerate(conns)]  # fmt: skip
    writer = await asyncio.create_subprocess_exec(*writer_cmd, cwd=REPO, env=server.env, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE)  # fmt: skip
    try:
        out, err = await asyncio.wait_for(writer.communicate(), WRITER_DEADLINE_S)
        assert writer.returncode == 0, err.decode()[-3000:]
        await asyncio.sleep(REFRESH_S + SLACK_S)  # keep reading: the last change must show everywhere
    finally:
        stop.set()
        if writer.returncode is None:
            writer.kill()
        done = await asyncio.wait_for(asyncio.gather(*loops, return_exceptions=True), 30)
    errors = [e for e in done if isinstance(e, BaseException)]
    assert not errors, f"{len(errors)} connections failed, first: {errors[0]!r}"
    return log, out.decode()


def _problems(log: list[Fetch], changes: list[dict]) -> list[str]:
    """Every broken promise, by kind (all of them, so a failure says how the service misbehaved)."""
    ranks = {tuple(c["expected"]): rank for rank, c in enumerate(c for c in changes if c["expected"])}
    t0, published = changes[0]["started"], changes[0]["returned"]
    odd = [f for f in log if f.status not in (200, 404) or (f.status == 200 and f.state not in ranks)]
    problems = [f"{len(odd)} answers outside the sequence, first {odd[0]}"] if odd else []
    first_200 = min((f.ended for f in log if f.status == 200), default=float("inf"))
    for what, since in (("the first 200", first_200), ("the first publish returned", published)):
        late = [f for f in log if f.status == 404 and f.started > since]
        if late:
            problems.append(
                f"{len(late)} 404s after {what} (+{since - t0:.3f} s), first at +{late[0].started - t0:.3f} s"
            )
    back = _went_back(log, ranks)
    if back:
        problems.append(f"{len(back)} fetches saw an older state than one that ended before they started, "
                        f"first at +{back[0][0].started - t0:.3f} s: {back[0][0].state} after {back[0][1].state}")  # fmt: skip
    for change in (c for c in changes if c["expected"]):
        bound = change["returned"] + (0 if change["how"] == "api" else REFRESH_S + SLACK_S)
        stale = [f for f in log if f.started > bound and _rank(f, ranks) < ranks[tuple(change["expected"])]]
        if stale:
            problems.append(f"{change['how']} {change['what']} (returned +{change['returned'] - t0:.3f} s): "
                            f"{len(stale)} fetches started after +{bound - t0:.3f} s saw an older state, "
                            f"first {stale[0].state} at +{stale[0].started - t0:.3f} s")  # fmt: skip
    return problems


def _went_back(log: list[Fetch], ranks: dict) -> list[tuple[Fetch, Fetch]]:
    """(fetch, newer one that ended before it started): a sweep over start times that keeps the
    newest state among the fetches ended so far."""
    by_end = sorted(log, key=lambda f: f.ended)
    newest: Fetch | None = None
    back, i = [], 0
    for fetch in sorted(log, key=lambda f: f.started):
        while i < len(by_end) and by_end[i].ended < fetch.started:
            if newest is None or _rank(by_end[i], ranks) > _rank(newest, ranks):
                newest = by_end[i]
            i += 1
        if newest is not None and _rank(fetch, ranks) < _rank(newest, ranks):
            back.append((fetch, newest))
    return back


def _rank(fetch: Fetch, ranks: dict) -> int:
    return -1 if fetch.state is None else ranks[fetch.state]  # -1: the 404 before the first publish


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'autotuner.db'}"
    base = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
    if not base:
        skip_or_fail("postgres", "no PostgreSQL server (set AUTOTUNER_TEST_POSTGRES_URL; CI starts one)")
    return fresh_postgres_database(base)


@pytest.mark.soak
def test_configs_never_404_and_never_go_back_while_another_process_changes_them(tmp_path, db_url):
    server = make_server(tmp_path, AUTOTUNER_DATABASE_URL=db_url, AUTOTUNER_SCHEDULER="0",
                         AUTOTUNER_WORKERS=str(WORKERS), AUTOTUNER_CONFIG_REFRESH_S=str(REFRESH_S))  # fmt: skip
    server.start()
    try:
        cmd = [sys.executable, "-m", "tests.api.config_writer", server.url, TOKENS["admin"], db_url]
        log, out = asyncio.run(_load_while_writing(server, cmd))
    finally:
        server.kill()
    changes = [json.loads(line) for line in out.splitlines()]
    assert [(c["how"], c["what"]) for c in changes] == [(how, what) for how, what, _ in STEPS]
    for change in changes:
        if change["how"] == "api":  # what the API says it serves is what the writer expects
            assert (change["version"], change["pinned"]) == tuple(change["expected"]), change
    assert len(log) > 1000, f"only {len(log)} fetches: the load did not happen"
    problems = _problems(log, changes)
    assert not problems, "\n".join(problems)
