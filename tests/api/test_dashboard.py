"""The dashboard: HTML shells, chart data, and the pages in real headless Chromium against a real server."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store
from autotuner.tuning import insights
from autotuner.tuning.insights import MIN_TRIALS
from tests.api.service import TOKENS, make_server, replay_study_body, wait_for_state
from tests.helpers import LANDSCAPE, REPO, skip_or_fail

CHROMIUM = Path("/usr/bin/chromium")
# How long the page may wait for the study to make progress: the scheduler runs at nice 10, so on a
# loaded machine its launches come slowly (the page's own polling is what is tested, not their pace).
PROGRESS_MS = 120_000
ARTIFACTS = REPO / "test-artifacts"
HOSTILE = '<script>window.__xss = "script"</script><img src=x onerror="window.__xss = \'img\'">'
BIDI = "\u202eevil"  # a right-to-left override: obeyed, "evil" reads "live"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A real server with a finished replay study and a study whose failed launch carries markup."""
    srv = make_server(tmp_path_factory.mktemp("dashboard"), replay_delay_s=0)  # only the study's end is read
    srv.start()
    client = srv.client("write")
    created = client.post("/v1/studies", json=replay_study_body("dash-done"))
    assert created.status_code == 201, created.text
    study = wait_for_state(client, created.json()["id"], ("done", "failed"))
    assert study["state"] == "done", study
    hostile = plant_hostile_study(srv.data_dir / "autotuner.db")
    timed = plant_timed_study(srv.data_dir / "autotuner.db")
    yield srv, study, hostile, timed
    srv.kill(signal.SIGTERM)


TIMED_RESULT = json.loads((REPO / "tests" / "data" / "trial-result-dlrm.json").read_text())


def plant_timed_study(db: Path) -> int:
    """A finished study whose candidates are those of a real trial result of a DLRM (recorded from
    a real 2-rank launch): each carries the breakdown of its training step."""
    store = Store(f"sqlite:///{db}")
    try:
        study = store.create_study(
            name="timed", cluster="cpu-box", workload_name="dlrm-small", workload_spec=TIMED_RESULT["workload"],
            space={"env": {}, "precisions": [["fp32", "fp32"]], "batch_sizes": [64]},
            settings={"executor": "replay", "trials": 1, "nnodes": 1, "nproc_per_node": 2, "sampler": "tpe",
                      "seed": 0},
            state="done",
        )  # fmt: skip
        launch = store.add_launch(
            study_id=study.id, kind="search", env={}, spec={"candidates": []}, executor="local"
        )
        rows = []
        for i, c in enumerate(TIMED_RESULT["candidates"]):
            rows.append({"study_id": study.id, "launch_id": launch.id, "index": i, "kind": "baseline" if i == 0 else "search",
                         "env": {}, "state": "ok", "fwd_precision": c["fwd_precision"], "bwd_precision": c["bwd_precision"],
                         "batch_size": c["batch_size"], "sharding": c["sharding"], "pipeline": c["pipeline"],
                         "samples_per_s": c["samples_per_s"], "iter_ms": c["iter_ms"]["median"], "metrics": c})  # fmt: skip
        store.add_candidates(rows)
        return study.id
    finally:
        store.dispose()


def plant_hostile_study(db: Path) -> int:
    """A failed study whose env value, launch error, log tail and trial error are markup: the way a
    broken NCCL setup or a hostile job would put it into our rows."""
    store = Store(f"sqlite:///{db}")
    try:
        workload = json.loads(LANDSCAPE.read_text())["workload"]
        study = store.create_study(
            name="hostile", cluster="cpu-box", workload_name="small", workload_spec=workload,
            space={"env": {}, "precisions": [["fp32", "fp32"]], "batch_sizes": [64]},
            settings={"executor": "replay", "trials": 1, "nnodes": 1, "nproc_per_node": 2, "sampler": "tpe",
                      "seed": 0},
            state="failed",
        )  # fmt: skip
        candidate = {
            "fwd_precision": "fp32",
            "bwd_precision": "fp32",
            "batch_size": 64,
            "sharding": "table_wise",
        }
        launch = store.add_launch(study_id=study.id, kind="search", env={"NCCL_SOCKET_IFNAME": HOSTILE},
                                  spec={"candidates": [candidate]}, executor="replay")  # fmt: skip
        store.update_launch(launch.id, state="failed", error=f"exit 1: {HOSTILE}",
                            log_tail=f"NCCL WARN bad interface\n{HOSTILE}\n<b>not bold</b>")  # fmt: skip
        store.add_candidates([{**candidate, "study_id": study.id, "launch_id": launch.id, "index": 0,
                               "kind": "search", "env": launch.env, "state": "failed",
                               "error": f"launch failed: {HOSTILE} {BIDI}"}])  # fmt: skip
        store.update_study(study.id, error=f"study failed: {HOSTILE} {BIDI}")
        return study.id
    finally:
        store.dispose()


# ---------------------------------------------------------------------------------- without a browser


def test_pages_are_served_without_a_token_and_carry_no_data(finished):
    srv, study, _, _ = finished
    for path in ("/", f"/studies/{study['id']}", "/configs"):
        page = httpx.get(srv.url + path)
        assert page.status_code == 200, path
        assert page.headers["content-type"].startswith("text/html")
        assert "/static/app.js" in page.text
        assert study["name"] not in page.text
        assert "cpu-box" not in page.text  # the data comes from /v1
        # Offline clusters: every script and stylesheet is ours.
        assert not re.search(r'(src|href)="(https?:)?//', page.text), path
        # and the browser runs nothing else (the browser tests below run every page under this policy)
        policy = page.headers["content-security-policy"]
        assert "script-src 'self';" in policy, path
        assert "frame-ancestors 'none'" in policy
        assert page.headers["x-content-type-options"] == "nosniff"
    assert '<script src="/static/plotly.min.js?v=' in httpx.get(f"{srv.url}/studies/{study['id']}").text


def test_assets_are_served_locally_with_the_right_types(finished):
    srv, _, _, _ = finished
    plotly = httpx.get(f"{srv.url}/static/plotly.min.js")
    assert plotly.status_code == 200
    assert "javascript" in plotly.headers["content-type"]
    assert len(plotly.content) > 1_000_000
    assert b"plotly.js" in plotly.content[:2000]
    app_js = httpx.get(f"{srv.url}/static/app.js")
    assert app_js.status_code == 200
    assert "javascript" in app_js.headers["content-type"]
    assert "innerHTML" not in app_js.text  # data goes into the page as text only
    assert httpx.get(f"{srv.url}/static/app.css").headers["content-type"].startswith("text/css")
    assert httpx.get(f"{srv.url}/static/nope.js").status_code == 404


def test_insights_need_a_read_token(finished):
    srv, study, _, _ = finished
    path = f"/v1/studies/{study['id']}/insights"
    assert srv.client(None).get(path).status_code == 401
    assert srv.client("read").get(path).status_code == 200


def test_insights_of_a_finished_study(finished):
    srv, study, _, _ = finished
    client = srv.client("read")
    data = client.get(f"/v1/studies/{study['id']}/insights").json()
    trials = client.get(f"/v1/studies/{study['id']}/trials", params={"limit": 1000}).json()["data"]
    searched = [t for t in trials if t["kind"] in ("baseline", "search")]
    history = data["history"]
    assert [p["id"] for p in history] == [t["id"] for t in searched]
    assert history[0]["kind"] == "baseline"
    best = [p["best_so_far"] for p in history if p["best_so_far"] is not None]
    assert best == sorted(best)
    ok = [t["samples_per_s"] for t in searched if t["state"] == "ok"]
    assert best[-1] == pytest.approx(max(ok))

    # a few launches' trials: nothing ranked, and why (the ranking itself: tests/tuning/test_insights.py)
    importance = data["importance"]
    assert importance["params"] == []
    too_few = f"too few trials to rank knobs ({importance['trials']} completed, {MIN_TRIALS} needed)"
    assert importance["reason"] == too_few

    matrix = data["matrix"]
    assert matrix["precisions"][:4] == ["fp32/fp32", "fp16/fp16", "fp8/bf16", "int8/int8"]
    assert matrix["batch_sizes"] == [64, 256]
    cells = {(p, b): matrix["samples_per_s"][i][j]
             for i, p in enumerate(matrix["precisions"]) for j, b in enumerate(matrix["batch_sizes"])}  # fmt: skip
    for t in searched:
        if t["state"] == "ok":
            assert (
                cells[(f"{t['fwd_precision']}/{t['bwd_precision']}", t["batch_size"])] >= t["samples_per_s"]
            )


def test_insights_of_a_missing_or_unsearched_study_are_4xx_or_empty_never_500(finished):
    srv, _, hostile, _ = finished
    client = srv.client("read")
    assert client.get("/v1/studies/999999/insights").status_code == 404
    assert client.get("/v1/studies/0/insights").status_code == 422
    assert client.get("/v1/studies/abc/insights").status_code == 422
    empty = client.get(f"/v1/studies/{hostile}/insights")  # no Optuna study behind it
    assert empty.status_code == 200
    assert empty.json()["importance"] == {"params": [], "reason": "no search trials yet"}
    assert empty.json()["history"][0]["state"] == "failed"


def in_process_app(srv, **settings) -> TestClient:
    """A second app on the server's database (no scheduler): settings and code can be varied in-process."""
    return TestClient(create_app(Settings(data_dir=srv.data_dir, scheduler=False, **settings)))


def test_public_read_opens_the_insights(finished):
    srv, study, _, _ = finished
    with in_process_app(srv, public_read=True) as client:
        assert client.get(f"/v1/studies/{study['id']}/insights").status_code == 200
    with in_process_app(srv, tokens=f"{TOKENS['read']}:read") as client:
        assert client.get(f"/v1/studies/{study['id']}/insights").status_code == 401


def test_importance_that_raises_is_reported_not_a_500(finished, monkeypatch):
    import optuna

    def broken(*args, **kwargs):
        raise RuntimeError("evaluator exploded")

    monkeypatch.setattr(optuna.importance, "get_param_importances", broken)
    monkeypatch.setattr(insights, "MIN_TRIALS", 2)  # this study's few trials are ranked: it is called
    srv, study, _, _ = finished
    with in_process_app(srv, public_read=True) as client:
        response = client.get(f"/v1/studies/{study['id']}/insights")
    assert response.status_code == 200
    assert response.json()["importance"]["params"] == []
    assert "evaluator exploded" in response.json()["importance"]["reason"]
    assert response.json()["history"]


def test_templates_autoescape():
    from api.dashboard import templates

    rendered = templates.env.from_string("{{ value }}").render(value=HOSTILE)
    assert "<script>" not in rendered
    assert "&lt;script&gt;" in rendered
    autoescape = templates.env.autoescape  # a flag, or a function of the template name (newer Starlette)
    assert (autoescape("study.html") if callable(autoescape) else autoescape) is True


# ---------------------------------------------------------------------------------- real Chromium


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        skip_or_fail("browser", f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("browser", "the playwright package is not installed")
    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        yield chromium
        chromium.close()


def open_page(browser, errors: list[str], *, csp: bool = False):
    """A page whose errors go to `errors`. The pages' Content-Security-Policy forbids eval, which
    Playwright's wait_for_function needs: bypassed, but by test_the_pages_run_under_their_policy."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, device_scale_factor=1,
                                  permissions=["clipboard-read", "clipboard-write"], bypass_csp=not csp)  # fmt: skip
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # 401 (before the token) and 404 (a missing study) are expected answers; other console errors are bugs.
    page.on("console", lambda msg: errors.append(msg.text)
            if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)  # fmt: skip
    return page


def enter_token(page, token: str) -> None:
    page.wait_for_selector("#token-form:not([hidden])", timeout=10_000)
    page.fill("#token-input", token)
    page.click("#token-form button[type=submit]")
    page.wait_for_selector("#token-form", state="hidden", timeout=10_000)


def study_page(browser, srv, study_id: int):
    """A study's page, opened with a read token; and the list its errors will go to."""
    errors: list[str] = []
    page = open_page(browser, errors)
    page.goto(f"{srv.url}/studies/{study_id}")
    enter_token(page, TOKENS["read"])
    return page, errors


def trial_rows(page) -> int:
    return page.locator("#trials tbody tr[data-trial]").count()


@pytest.mark.browser
def test_study_page_updates_live_while_the_study_runs(browser, tmp_path):
    srv = make_server(tmp_path, AUTOTUNER_EXECUTOR_OPTIONS=json.dumps(
        {"replay": {"landscape": str(LANDSCAPE), "delay_s": 1.0}}))  # fmt: skip
    srv.start()
    errors: list[str] = []
    try:
        client = srv.client("write")
        body = replay_study_body("nsocks-fp8-sweep", trials=8, candidates_per_launch=2, confirm_rounds=2)
        created = client.post("/v1/studies", json=body)
        assert created.status_code == 201, created.text
        study_id = created.json()["id"]

        page = open_page(browser, errors)
        page.goto(f"{srv.url}/studies/{study_id}")
        # No token yet: the reads answer 401 and the page asks for one.
        enter_token(page, TOKENS["read"])
        page.evaluate("window.__sameDocument = true")
        page.wait_for_function("document.querySelectorAll('#trials tbody tr[data-trial]').length > 0",
                               timeout=PROGRESS_MS)  # fmt: skip
        first = trial_rows(page)
        assert client.get(f"/v1/studies/{study_id}").json()["state"] in ("queued", "running", "confirming")
        page.wait_for_function(
            f"document.querySelectorAll('#trials tbody tr[data-trial]').length > {first}", timeout=PROGRESS_MS
        )
        assert page.evaluate("window.__sameDocument") is True  # updated in place, never reloaded
        page.wait_for_selector("#chart-history .main-svg", timeout=20_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-study-running.png"), full_page=True)

        wait_for_state(client, study_id, ("done", "failed"), timeout_s=120)
        page.wait_for_function(
            "document.getElementById('study-state').textContent === 'done'", timeout=15_000
        )
        page.wait_for_selector("#chart-speedup .main-svg", timeout=15_000)
        page.wait_for_selector("#chart-matrix .main-svg", timeout=15_000)
        wait_for_text(page, "chart-importance", "too few trials to rank knobs")  # 8 launches of 2: under 41
        assert page.evaluate("window.__sameDocument") is True
        total = client.get(f"/v1/studies/{study_id}/trials").json()["count"]
        assert trial_rows(page) == min(total, 50)
        assert "Confirmed speedup" in page.inner_text("#panel-outcome")
        assert re.search(r"95% CI \[[\d.,]+-[\d.,]+\]", page.inner_text("#kpi-speedup-sub"))
        page.screenshot(path=str(ARTIFACTS / "dashboard-study.png"), full_page=True)

        check_sorting(page)
        check_studies_list(page, srv, client, study_id)
        check_configs_page(page, srv)
        assert errors == []
    finally:
        srv.kill(signal.SIGTERM)


def check_sorting(page) -> None:
    """Sort by clicking a header: samples/s, highest first."""
    page.click("#trials th[data-sort=samples_per_s]")
    page.wait_for_selector("#trials th[data-sort=samples_per_s][aria-sort=descending]")
    values = [float(v.replace(",", "")) for v in page.locator("#trials tbody tr[data-trial] td:nth-child(9)")
              .all_inner_texts() if v != "—"]  # fmt: skip
    assert len(values) >= 4
    assert values == sorted(values, reverse=True)


def check_studies_list(page, srv, client, study_id: int) -> None:
    """A second study, cancelled at once, so the list shows more than one state."""
    other = client.post("/v1/studies", json=replay_study_body("cancelled-probe", trials=50)).json()
    assert client.post(f"/v1/studies/{other['id']}/cancel").status_code == 200
    page.goto(srv.url + "/")  # same tab: the token stays in sessionStorage
    page.wait_for_selector(f"#studies a[href='/studies/{study_id}']", timeout=10_000)
    row = page.locator("#studies tbody tr", has_text="nsocks-fp8-sweep").inner_text()
    best = client.get(f"/v1/studies/{study_id}").json()["best"]["samples_per_s"]
    assert "done" in row
    assert "8 / 8" in row
    assert f"{best:,.0f}" in row  # thousands separators
    assert "cancelled" in page.locator("#studies tbody tr", has_text="cancelled-probe").inner_text()
    page.screenshot(path=str(ARTIFACTS / "dashboard-studies.png"), full_page=True)


def check_configs_page(page, srv) -> None:
    page.goto(srv.url + "/configs")
    page.wait_for_selector(".config-card pre", timeout=10_000)
    exports = page.inner_text(".config-card pre")
    assert "export AUTOTUNER_CONFIG=cpu-box/small/1n/v1" in exports
    assert page.inner_text("#hook-server") == srv.url  # the address this page was reached at
    assert "version history (1)" in page.inner_text(".config-card").lower()
    page.screenshot(path=str(ARTIFACTS / "dashboard-configs.png"), full_page=True)
    page.click(".config-card .copy")
    page.wait_for_function("document.querySelector('.config-card .copy').textContent !== 'Copy'")
    assert page.inner_text(".config-card .copy") == "Copied"
    assert page.evaluate("navigator.clipboard.readText()").strip() == exports.strip()


@pytest.mark.browser
def test_markup_in_errors_env_and_logs_is_shown_as_text(browser, finished):
    srv, study, hostile, _ = finished
    page, errors = study_page(browser, srv, hostile)
    page.wait_for_selector("#failed-list .failed-launch details", timeout=10_000)
    page.click("#failed-list .failed-launch summary")  # the tail is fetched when it is opened
    wait_for_text(page, "failed-list", "not bold")
    assert HOSTILE in page.inner_text("#failed-list .reason")
    assert HOSTILE in page.inner_text("#failed-list pre.log")
    assert "<b>not bold</b>" in page.inner_text("#failed-list pre.log")
    assert HOSTILE in page.inner_text("#study-error")
    assert "\\u202eevil" in page.inner_text("#study-error")  # the override shown, not obeyed
    page.wait_for_selector("#trials tbody tr.error-row")
    assert HOSTILE in page.inner_text("#trials tbody")  # the env value and the trial's error, as text
    assert "\\u202eevil" in page.inner_text("#trials tbody")
    # No element was made of the markup anywhere (so no onerror can fire later, whatever the timing):
    # the page's own images and scripts all come from /static.
    assert page.locator('img:not([src^="/static/"]), script:not([src^="/static/"]), pre b').count() == 0
    assert page.evaluate("window.__xss") is None
    # Charts guard themselves when there is nothing to draw (they load after the tables: wait for them).
    page.wait_for_function("document.getElementById('chart-importance').textContent.includes('Not available')",
                           timeout=10_000)  # fmt: skip
    # the study has failed: no "yet", it will get no more trials
    assert "Not available: no search trials yet" in page.inner_text("#chart-importance")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-failed.png"), full_page=True)

    page.goto(f"{srv.url}/studies/{study['id']}")
    wait_for_text(page, "chart-importance", "too few trials to rank knobs")
    assert page.locator("#failed-list .failed-launch").count() == 0
    check_many_failed_launches(page, srv, plant_failed_launches(srv.data_dir / "autotuner.db", 45))
    page.goto(f"{srv.url}/studies/999999")
    page.wait_for_function("document.getElementById('study-name').textContent.includes('not found')")
    assert errors == []


def plant_failed_launches(db: Path, failed: int) -> int:
    """A failed study of `failed` failed launches, each with its own 16 KB log tail, and 5 that ran."""
    store = Store(f"sqlite:///{db}")
    try:
        study = store.create_study(
            name="many-failed", cluster="cpu-box", workload_name="small",
            workload_spec=json.loads(LANDSCAPE.read_text())["workload"], space={"env": {}},
            settings={"executor": "replay", "trials": 100, "nnodes": 1, "nproc_per_node": 2, "sampler": "tpe",
                      "seed": 0},
            state="failed",
        )  # fmt: skip
        for i in range(failed + 5):
            launch = store.add_launch(study_id=study.id, kind="search", env={"NCCL_NSOCKS_PERTHREAD": "4"},
                                      spec={"candidates": []}, executor="replay")  # fmt: skip
            if i < failed:
                lines = f"launch {launch.seq}: NCCL WARN connect refused\n" * 500
                tail = lines[-16384:] + f"end of #{launch.seq}"
                store.update_launch(launch.id, state="failed", error=f"exit 1 (#{launch.seq})", log_tail=tail)
            else:
                store.update_launch(launch.id, state="succeeded")
        return study.id
    finally:
        store.dispose()


def check_many_failed_launches(page, srv, study_id: int) -> None:
    """The latest 20 failed launches without their tails; a tail fetched once, when opened; a poll or
    "Show more" that finds the same launches leaves them (an open tail, a selection in it) as they are."""
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/launches" in r.url else None)
    page.goto(f"{srv.url}/studies/{study_id}")
    page.wait_for_selector("#failed-list .failed-launch", timeout=10_000)
    articles = page.locator("#failed-list .failed-launch")
    assert articles.count() == 20
    assert page.inner_text("#failed-count") == "45"
    assert page.inner_text("#failed-rest") == "Showing the latest 20 of 45."
    assert "Launch #45" in articles.first.inner_text()  # the newest first
    assert "end of #" not in page.text_content("#failed-list")  # no tail read yet
    assert all("limit=" in url for url in asked)
    assert not [url for url in asked if re.search(r"/launches/\d+", url)]

    page.evaluate("window.__first = document.querySelector('#failed-list .failed-launch')")
    page.click("#failed-list .failed-launch summary")
    wait_for_text(page, "failed-list", "end of #45")
    assert len(page.text_content("#failed-list .failed-launch pre.log")) == 16384 + len("end of #45")
    # A selection in the open tail, then 20 more: the list grows below it, nothing above is redrawn.
    selected = page.evaluate("""() => { const range = document.createRange();
        range.selectNodeContents(document.querySelector('#failed-list pre.log'));
        getSelection().removeAllRanges(); getSelection().addRange(range); return getSelection().toString(); }""")
    assert selected.endswith("end of #45")
    page.evaluate("document.getElementById('failed-show-more').click()")  # a click would move the selection
    page.wait_for_function("document.querySelectorAll('#failed-list .failed-launch').length === 40")
    assert page.evaluate("document.querySelector('#failed-list .failed-launch') === window.__first")
    assert page.evaluate("document.querySelector('#failed-list details').open") is True
    assert page.evaluate("getSelection().toString()") == selected
    assert page.inner_text("#failed-show-more") == "Show 5 more"
    # the next poll (15 s: the study has ended) reads the same 40: it leaves them as they are
    page.wait_for_event("response", lambda r: "state=failed" in r.url, timeout=PROGRESS_MS)
    page.wait_for_timeout(500)
    assert page.evaluate("document.querySelector('#failed-list .failed-launch') === window.__first")
    assert page.evaluate("getSelection().toString()") == selected
    page.click("#failed-list .failed-launch summary")  # closed and opened again: not fetched again
    page.click("#failed-list .failed-launch summary")
    page.wait_for_timeout(500)
    assert len([url for url in asked if re.search(r"/launches/\d+", url)]) == 1
    page.click("#failed-show-more")
    page.wait_for_function("document.querySelectorAll('#failed-list .failed-launch').length === 45")
    assert page.is_hidden("#failed-more")


def wait_for_text(page, element_id: str, text: str) -> None:
    page.wait_for_function(
        f"document.getElementById({element_id!r}).textContent.includes({text!r})", timeout=15_000
    )


def test_insights_say_where_each_step_goes(finished):
    srv, _, _, timed = finished
    rows = srv.client("read").get(f"/v1/studies/{timed}/insights").json()["breakdown"]
    recorded = TIMED_RESULT["candidates"]
    assert rows[0]["kind"] == "baseline"
    assert rows[0]["compute"] == pytest.approx(recorded[0]["breakdown_ms"]["compute"])
    fastest = sorted(recorded[1:], key=lambda c: -c["samples_per_s"])
    assert [r["samples_per_s"] for r in rows[1:]] == pytest.approx([c["samples_per_s"] for c in fastest])
    assert all({"input_dist", "sparse_comm", "dense_comm", "exposed_comm", "step_ms"} <= set(r) for r in rows)


@pytest.mark.browser
def test_the_step_breakdown_is_drawn_as_stacked_bars(browser, finished):
    page, errors = study_page(browser, finished[0], finished[3])  # the study of the recorded DLRM result
    page.wait_for_selector("#chart-breakdown .main-svg", timeout=15_000)
    # one bar per candidate and part: compute and exposed comm, three candidates
    assert page.locator("#chart-breakdown .barlayer .point").count() == 2 * len(TIMED_RESULT["candidates"])
    legend = page.text_content("#chart-breakdown .legend")  # SVG: text_content, not inner_text
    assert "compute" in legend
    assert "exposed comm" in legend
    assert "(baseline)" in page.text_content("#chart-breakdown .yaxislayer-above")
    assert "sparse_dist" in page.inner_text("#trials tbody")  # the pipeline column
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-breakdown.png"), full_page=True)
    assert errors == []


@pytest.mark.browser
def test_the_pages_run_under_their_policy(browser, finished):
    """Each page under its Content-Security-Policy (script-src 'self'): app.js and plotly draw the
    study (its trials, its charts) with no violation, which Chromium reports as a console error."""
    srv, study, _, _ = finished
    errors: list[str] = []
    page = open_page(browser, errors, csp=True)
    page.goto(f"{srv.url}/studies/{study['id']}")
    enter_token(page, TOKENS["read"])
    page.wait_for_selector("#trials tbody tr[data-trial]", timeout=15_000)
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=15_000)  # plotly drew under the policy
    for path in ("/", "/configs"):
        page.goto(srv.url + path)
        page.wait_for_selector("main", timeout=15_000)
    assert errors == []
    page.close()


@pytest.mark.browser
def test_a_study_whose_runner_stopped_says_so_on_the_list_and_its_page(browser, tmp_path):
    """It read "running" while nothing ran it (a tuner interrupted, no scheduler to take it up)."""
    srv = make_server(tmp_path, AUTOTUNER_SCHEDULER="0")
    srv.start()
    try:
        store = Store(f"sqlite:///{srv.data_dir / 'autotuner.db'}")
        workload = json.loads(LANDSCAPE.read_text())["workload"]
        study = store.create_study(name="orphan", cluster="cpu-box", workload_name="small", workload_spec=workload,
                                   space={"env": {}}, settings={"executor": "replay", "trials": 3},
                                   state="running")  # fmt: skip
        assert store.acquire_study(study.id, "gone-host:1:x", 600)
        store.release_study(study.id, "gone-host:1:x")  # as an interrupted tuner lets go
        store.dispose()
        page, errors = study_page(browser, srv, study.id)
        wait_for_text(page, "study-error", "No runner")
        assert "`autotuner tune --study orphan` resumes it" in page.inner_text("#study-error")
        page.goto(srv.url + "/")
        page.wait_for_selector(f"#studies a[href='/studies/{study.id}']", timeout=10_000)
        row = page.locator("#studies tbody tr", has_text="orphan")
        assert "no runner" in row.inner_text()
        assert errors == []
    finally:
        srv.kill()


def test_the_configs_page_gives_the_hook_command_with_a_server(tmp_path):
    """Without --server (nor AUTOTUNER_SERVER) the hook prints nothing: the page's command did nothing.
    The address is the page's own, filled in by the page (check_configs_page), not the Host header."""
    with TestClient(
        create_app(Settings(data_dir=tmp_path, scheduler=False)), base_url="http://tuner:8000"
    ) as c:
        page = c.get("/configs").text
    assert (
        '<code>autotuner env --server <span id="hook-server">URL</span> --cluster C --workload W</code>'
        in page
    )
    assert "tuner:8000" not in page
