"""The dashboard and the reads at their edges: numbers past int()'s 4,300 digits, HEAD, more studies than
a page, a token no header can carry, studies that ended without a confirmation, and a published
candidate that is not the fastest one measured."""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from datetime import timedelta

import httpx
import pytest

from autotuner.store import Store, utcnow
from autotuner.tuning.lease import owner_id
from tests.api.service import TOKENS
from tests.api.test_dashboard import (  # noqa: F401
    ARTIFACTS,
    browser,
    enter_token,
    open_page,
    study_page,
    wait_for_text,
)
from tests.helpers import LANDSCAPE

PAST_INT_DIGITS = "1" * 5000  # int() of over 4,300 digits raises ValueError
WORKLOAD = json.loads(LANDSCAPE.read_text())["workload"]
STATES = ("running", "confirming", "queued", "done", "failed", "cancelled")


def plant_study(
    srv, name: str, state: str, *, candidates: Sequence[dict] = (), **fields
) -> tuple[int, list[int]]:
    """A study in `state` (never queued: the service's scheduler would run it) with `candidates` (each
    the fields it differs in) measured by one launch; its id and theirs."""
    store = Store(f"sqlite:///{srv.data_dir / 'autotuner.db'}")
    try:
        study = store.create_study(
            name=name, cluster="cpu-box", workload_name="small", workload_spec=WORKLOAD,
            space={"env": {}, "precisions": [["fp32", "fp32"]], "batch_sizes": [64]},
            settings={"executor": "replay", "trials": 4, "nnodes": 1, "nproc_per_node": 2, "sampler": "tpe", "seed": 0},
            state=state,
        )  # fmt: skip
        ids: list[int] = []
        if candidates:
            launch = store.add_launch(study_id=study.id, kind="search", env={}, spec={"candidates": []},
                                      executor="replay")  # fmt: skip
            store.update_launch(launch.id, state="done")
            rows = store.add_candidates([
                {"study_id": study.id, "launch_id": launch.id, "index": i, "kind": "search", "env": {}, "state": "ok",
                 "fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 64, "sharding": "table_wise",
                 "iter_ms": 5.0, **c}
                for i, c in enumerate(candidates)
            ])  # fmt: skip
            ids = [r.id for r in rows]
        if fields:
            store.update_study(study.id, **fields)
        return study.id, ids
    finally:
        store.dispose()


# ---------------------------------------------------------------------------------- without a browser


def test_numbers_past_the_int_digit_limit_are_refused_not_500(module_server):
    srv = module_server
    assert httpx.get(f"{srv.url}/studies/{PAST_INT_DIGITS}").status_code == 404
    assert httpx.get(f"{srv.url}/studies/{'0' * 5000}1").status_code == 200  # leading zeros: still study 1
    # The config fetch's fast path hands it to the route, whose 422 says what it says of any bad nodes.
    path = f"/v1/configs/cpu-box/small?nodes={PAST_INT_DIGITS}"
    anonymous = srv.client(None).get(path)
    assert anonymous.status_code == 422, anonymous.text[:300]
    assert anonymous.json()["detail"][0]["loc"] == ["query", "nodes"]
    assert srv.client("read").get(path).json() == anonymous.json()
    # A Content-Length of 5,000 digits (its value 12) is no byte count: 400, not a 500 nor "too large".
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as conn:
        conn.sendall(b"POST /v1/lint HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                     + b"0" * 4998 + b"12\r\n\r\n{\"env\": {}}\r\n")  # fmt: skip
        answer = conn.recv(200)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    lint = srv.client("read").post("/v1/lint", json={"env": {}})  # a plain length is read as before
    assert lint.status_code == 200, lint.text


def test_pages_and_plotly_answer_head_as_get(module_server):
    srv = module_server
    for path in ("/", "/configs", "/studies/1", "/static/plotly.min.js", "/static/app.js"):
        got, head = httpx.get(srv.url + path), httpx.head(srv.url + path)
        assert head.status_code == got.status_code == 200, path
        assert head.content == b"", path
        assert head.headers["content-type"] == got.headers["content-type"], path
    assert httpx.head(f"{srv.url}/studies/abc").status_code == 404
    schema = httpx.get(f"{srv.url}/openapi.json").json()
    assert not {"/", "/configs", "/studies/{study_id}"} & set(schema["paths"])  # pages stay out of it


# ---------------------------------------------------------------------------------- real Chromium


@pytest.mark.browser
def test_a_token_no_header_can_carry_is_refused_and_the_form_stays(browser, module_server):  # noqa: F811
    srv = module_server
    errors: list[str] = []
    page = open_page(browser, errors)
    page.goto(srv.url + "/")
    page.wait_for_selector("#token-form:not([hidden])", timeout=10_000)
    page.fill("#token-input", TOKENS["read"] + "\u2019")  # a curly apostrophe, pasted from a document
    page.click("#token-form button[type=submit]")
    page.wait_for_selector("#token-error:not([hidden])", timeout=10_000)
    assert "printable ASCII" in page.inner_text("#token-error")
    assert "U+2019" in page.inner_text("#token-error")
    assert page.is_visible("#token-form")
    assert page.evaluate("sessionStorage.getItem('autotuner.token')") is None

    # One stored before (by hand, or an older page): dropped, and the form asks again, no endless retry.
    page.evaluate(f"sessionStorage.setItem('autotuner.token', {json.dumps(TOKENS['read'] + chr(0x2019))})")
    page.reload()
    page.wait_for_selector("#token-error:not([hidden])", timeout=10_000)
    assert "printable ASCII" in page.inner_text("#token-error")
    assert page.is_hidden("#page-error")
    assert page.evaluate("sessionStorage.getItem('autotuner.token')") is None
    enter_token(page, TOKENS["read"])
    page.wait_for_selector("#studies-summary .stat", timeout=10_000)
    assert page.is_visible("#token-change")
    assert errors == []


@pytest.mark.browser
def test_the_studies_list_pages_past_200_and_counts_every_state(browser, module_server):  # noqa: F811
    srv = module_server
    # The oldest are the only cancelled ones: the newest 200 hold none of them.
    for i in range(6):
        plant_study(srv, f"old-cancelled-{i}", "cancelled")
    for i in range(200):
        plant_study(srv, f"newer-{i}", "failed" if i % 4 == 0 else "done")
    client = srv.client("read")
    total = client.get("/v1/studies", params={"limit": 1}).json()["count"]
    counts = {s: client.get("/v1/studies", params={"state": s, "limit": 1}).json()["count"] for s in STATES}
    assert total > 200
    assert counts["cancelled"] >= 6

    errors: list[str] = []
    page = open_page(browser, errors)
    page.goto(srv.url + "/")
    enter_token(page, TOKENS["read"])
    page.wait_for_selector("#studies a.study-name", timeout=15_000)
    # the rows are drawn first, the states' counts after their seven requests (a loaded machine: later)
    page.wait_for_function("document.querySelectorAll('#studies-summary .stat').length > 1", timeout=15_000)
    stats = page.locator("#studies-summary .stat")
    assert stats.first.locator("b").inner_text() == f"{total:,}"
    for state, n in counts.items():  # the API's counts, not those of the page's 200 rows
        shown = stats.filter(has_text=state)
        assert shown.count() == (1 if n else 0), state
        if n:
            assert shown.locator("b").inner_text() == f"{n:,}", state
    assert page.locator("#studies tbody tr").count() == 200
    assert "old-cancelled-0" not in page.inner_text("#studies tbody")
    assert page.inner_text("#studies-range").startswith(f"1–200 of {total:,}")

    page.click("#studies-next")  # the older studies
    page.wait_for_function(
        "document.getElementById('studies-range').textContent.startsWith('201')", timeout=10_000
    )
    assert "old-cancelled-0" in page.inner_text("#studies tbody")
    assert page.locator("#studies tbody tr").count() == min(200, total - 200)
    assert page.is_disabled("#studies-next") == (total <= 400)
    page.click("#studies-prev")
    page.wait_for_function(
        "document.getElementById('studies-range').textContent.startsWith('1–')", timeout=10_000
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#studies-pager").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "dashboard-studies-pager.png"), full_page=False)
    assert errors == []


@pytest.mark.browser
def test_an_ended_study_promises_nothing_more(browser, module_server):  # noqa: F811
    srv = module_server
    cancelled, _ = plant_study(srv, "cancelled-unconfirmed", "cancelled", candidates=[
        {"kind": "baseline", "samples_per_s": 10_000.0}, {"samples_per_s": 56_000.0}])  # fmt: skip
    page, errors = study_page(browser, srv, cancelled)
    page.wait_for_function("document.getElementById('kpi-speedup').textContent === '5.60x'", timeout=15_000)
    panel = page.inner_text("#panel-outcome")
    assert "so far" not in panel
    assert "provisional" not in panel
    assert "The study was cancelled before a finalist was confirmed: nothing was published." in panel
    assert (
        page.inner_text("#chart-ladder")
        == "No ladder: the study was cancelled before the ladder was measured."
    )

    failed, _ = plant_study(srv, "failed-before-any-trial", "failed", error="the launch could not start")
    page.goto(f"{srv.url}/studies/{failed}")
    page.wait_for_function("document.getElementById('study-state').textContent === 'failed'", timeout=15_000)
    page.wait_for_selector("#trials tbody tr.placeholder:not(:has-text('Loading'))", timeout=15_000)
    assert page.inner_text("#trials tbody") == "No trials: the study failed before any was measured."
    assert "yet" not in page.inner_text("#panel-outcome")
    assert page.inner_text("#chart-ladder") == "No ladder: the study failed before the ladder was measured."

    # nothing beat the baseline: no finalist was compared with it at all (it said one was not confirmed)
    from autotuner.tuning.confirm import BASELINE_BEST

    baseline_best, _ = plant_study(srv, "baseline-best", "done", candidates=[
        {"kind": "baseline", "samples_per_s": 27_000.0}, {"samples_per_s": 14_800.0}],
        outcome={"decision": BASELINE_BEST, "published_version": 1})  # fmt: skip
    page.goto(f"{srv.url}/studies/{baseline_best}")
    wait_for_text(page, "chart-ladder", "No ladder")
    assert page.inner_text("#chart-ladder") == (
        "No ladder: no setting measured beat the baseline, so no finalist was compared with it."
    )
    assert errors == []


@pytest.mark.browser
def test_the_fastest_measured_is_not_shown_as_the_published_one(browser, module_server):  # noqa: F811
    srv = module_server
    study_id, (base, fastest, published) = plant_study(srv, "inert-fastest", "done", candidates=[
        {"kind": "baseline", "samples_per_s": 10_000.0},
        # inert where measured: never exported
        {"env": {"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_NET": "Socket"}, "samples_per_s": 56_000.0},
        {"env": {"NCCL_ALGO": "Ring"}, "samples_per_s": 41_000.0},
    ], inert={"NCCL_NET": "no NET transport between ranks of one node"})  # fmt: skip
    store = Store(f"sqlite:///{srv.data_dir / 'autotuner.db'}")
    try:
        store.update_study(study_id, best_candidate_id=fastest, baseline_candidate_id=base, outcome={
            "best_candidate": fastest, "baseline_candidate": base, "chosen_candidate": published,
            "speedup": 4.1, "ci_low": 3.9, "ci_high": 4.3, "rounds": 5, "significant": True,
            "tuned_samples_per_s": 41_000.0, "baseline_samples_per_s": 10_000.0,
            "decision": "published the finalist without its inert NCCL_NSOCKS_PERTHREAD"})  # fmt: skip
    finally:
        store.dispose()
    rest = srv.client("read").get(f"/v1/studies/{study_id}").json()
    assert rest["best"]["id"] == fastest
    assert rest["outcome"]["chosen_candidate"] == published
    assert (rest["published"]["id"], rest["published"]["env"]) == (
        published,
        {"NCCL_ALGO": "Ring"},
    )  # the config's env

    page, errors = study_page(browser, srv, study_id)
    page.wait_for_function("document.getElementById('kpi-speedup').textContent === '4.10x'", timeout=15_000)
    assert page.inner_text("#kpi-best-label") == "Fastest measured (not published)"
    assert page.inner_text("#kpi-best") == "56,000"
    assert "not published" in page.inner_text("#best-env")
    assert "NCCL_NSOCKS_PERTHREAD=4" in page.inner_text("#best-env")
    # an inert variable set in the trial is said apart: it read as part of the env jobs get
    assert page.inner_text("#best-env code") == "NCCL_NSOCKS_PERTHREAD=4"
    assert "also set, inert here (never exported): NCCL_NET=Socket" in page.inner_text("#best-env")
    assert page.inner_text("#kpi-speedup-label") == "Confirmed speedup (published)"
    shown = page.inner_text("#published-env")
    assert shown.startswith("Published trial")
    assert f"{published} (tagged in the trials table)" in shown
    assert "41,000 samples/s" in shown
    assert "NCCL_ALGO=Ring" in shown  # what the jobs get, not only a trial number
    page.wait_for_selector(f"#trials tr[data-trial='{published}'] .tag.published", timeout=10_000)
    assert page.locator(f"#trials tr[data-trial='{fastest}'] .tag.published").count() == 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-fastest-not-published.png"), full_page=False)
    assert errors == []


@pytest.mark.browser
def test_a_queued_launch_says_on_the_study_page_what_it_waits_on(browser, module_server):  # noqa: F811
    """Slurm's reason for a pending launch is shown while the study runs: it read "searching" for as long
    as a job waited on `PartitionNodeLimit`, which it may never get past."""
    srv = module_server
    # held by this live process for an hour: the service's scheduler leaves it alone
    study_id, _ = plant_study(srv, "queued-on-slurm", "running", owner=owner_id(),
                              lease_expires_at=utcnow() + timedelta(hours=1))  # fmt: skip
    store = Store(f"sqlite:///{srv.data_dir / 'autotuner.db'}")
    try:
        launch = store.add_launch(study_id=study_id, kind="baseline", env={}, spec={"candidates": []},
                                  executor="slurm")  # fmt: skip
        store.update_launch(launch.id, state="pending", waiting_on="Slurm PENDING: PartitionNodeLimit")
    finally:
        store.dispose()
    page, errors = study_page(browser, srv, study_id)
    page.wait_for_function("document.getElementById('study-progress-text').textContent.includes('queued:')",
                           timeout=15_000)  # fmt: skip
    assert "launch #1 queued: Slurm PENDING: PartitionNodeLimit" in page.inner_text("#study-progress-text")
    assert errors == []
