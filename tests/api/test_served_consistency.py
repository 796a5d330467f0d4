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
from tests.api.conftest import TOKENS, make_server
from tests.conftest import REPO, fresh_postgres_database, skip_or_fail

CONNECTIONS = 32
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


async def _fetch_loop(port: int, path: str, log: list[Fetch], stop: asyncio.Event) -> None:
    """One keep-alive connection (so one worker) fetching back to back; plain HTTP/1.1, so the
    client costs little CPU beside the server it measures."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = f"GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKENS['read']}\r\n\r\n".encode()
    try:
        while not stop.is_set():
            started = time.monotonic()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            body = await reader.readexactly(int(_LENGTH.search(head).group(1)))
            status = int(head[9:12])
            state = None
            if status == 200:
                config = json.loads(body)
                state = (config["version"], config["pinned"])
            log.append(Fetch(started, time.monotonic(), status, state))
    finally:
        writer.close()


async def _load_while_writing(
    port: int, writer_cmd: list[str], env: dict[str, str]
) -> tuple[list[Fetch], str]:
    log: list[Fetch] = []
    stop = asyncio.Event()
    loops = [
        asyncio.create_task(_fetch_loop(port, PATHS[1] if i % 4 == 3 else PATHS[0], log, stop))
        for i in range(CONNECTIONS)
    ]
    writer = await asyncio.create_subprocess_exec(*writer_cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
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


def _check(log: list[Fetch], changes: list[dict]) -> None:
    assert len(log) > 1000, f"only {len(log)} fetches: the load did not happen"
    ranks = {tuple(c["expected"]): rank for rank, c in enumerate(c for c in changes if c["expected"])}
    first = changes[0]["returned"]
    t0 = changes[0]["started"]
    odd = [f for f in log if f.status not in (200, 404) or (f.status == 200 and f.state not in ranks)]
    assert not odd, f"answers outside the sequence: {odd[:5]}"
    late_404 = [f for f in log if f.status == 404 and f.started > first]
    assert not late_404, (f"{len(late_404)} 404s after the first publish returned (+{first - t0:.3f} s), "
                          f"first at +{late_404[0].started - t0:.3f} s")  # fmt: skip
    first_200 = min(f.ended for f in log if f.status == 200)
    assert not [f for f in log if f.status == 404 and f.started > first_200]
    _check_monotonic(log, ranks, t0)
    for change in changes:
        if change["expected"] is None:
            continue
        bound = change["returned"] + (0 if change["how"] == "api" else REFRESH_S + SLACK_S)
        stale = [f for f in log if f.started > bound and _rank(f, ranks) < ranks[tuple(change["expected"])]]
        assert not stale, (f"{change['how']} {change['what']} (returned +{change['returned'] - t0:.3f} s): "
                           f"{len(stale)} fetches started after +{bound - t0:.3f} s still saw an older "
                           f"state, first {stale[0]}")  # fmt: skip


def _check_monotonic(log: list[Fetch], ranks: dict, t0: float) -> None:
    """No fetch shows an older state than one that ended before it started: a sweep over start times
    that keeps the newest state among the fetches ended so far."""
    by_end = sorted(log, key=lambda f: f.ended)
    newest, newest_fetch, i = -1, None, 0
    for fetch in sorted(log, key=lambda f: f.started):
        while i < len(by_end) and by_end[i].ended < fetch.started:
            done = by_end[i]
            rank = _rank(done, ranks)
            if rank > newest:
                newest, newest_fetch = rank, done
            i += 1
        assert _rank(fetch, ranks) >= newest, (f"a fetch started at +{fetch.started - t0:.3f} s saw {fetch.state} after one "
                                f"that ended at +{newest_fetch.ended - t0:.3f} s saw {newest_fetch.state}")  # fmt: skip


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


def test_configs_never_404_and_never_go_back_while_another_process_changes_them(tmp_path, db_url):
    server = make_server(tmp_path, AUTOTUNER_DATABASE_URL=db_url, AUTOTUNER_SCHEDULER="0",
                         AUTOTUNER_WORKERS="2", AUTOTUNER_CONFIG_REFRESH_S=str(REFRESH_S))  # fmt: skip
    server.start()
    try:
        cmd = [sys.executable, "-m", "tests.api.config_writer", server.url, TOKENS["admin"], db_url]
        port = int(server.url.rsplit(":", 1)[1])
        log, out = asyncio.run(_load_while_writing(port, cmd, server.env))
    finally:
        server.kill()
    changes = [json.loads(line) for line in out.splitlines()]
    assert [(c["how"], c["what"]) for c in changes] == [(how, what) for how, what, _ in STEPS]
    for change in changes:
        if change["how"] == "api":  # what the API says it serves is what the writer expects
            assert (change["version"], change["pinned"]) == tuple(change["expected"]), change
    _check(log, changes)
