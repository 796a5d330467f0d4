"""The dashboard as an engineer reads it, in real Chromium: at a phone's width (390 px) nothing scrolls
the page sideways or is cut off, the charts say their units, and the words say what happened (a study
that kept its baseline, a study that ended, a study that does not exist)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.api.service import TOKENS
from tests.api.test_dashboard import (  # noqa: F401 - fixtures
    ARTIFACTS,
    TIMED_RESULT,
    browser,
    enter_token,
    finished,
)
from tests.api.test_dashboard_quality import plant_done_study

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
WAIT_MS = 15_000

# What a study records when its finalist was confirmed faster but its quality cost was not ruled out,
# so the baseline itself is published (the demo study's outcome, trimmed).
KEPT_BASELINE = {
    "speedup": 1.0, "best_candidate": 8, "baseline_candidate": 1, "chosen_candidate": 1,
    "decision": "what gave a gain was not shown to cost no quality (batch: see the convergence check): "
                "published the baseline (no changes)",
    "finalist": {"ci_low": 1.1449, "ci_high": 1.1923, "speedup": 1.1684, "confidence": 0.95, "rounds": 6,
                 "tuned_samples_per_s": 50696.4, "baseline_samples_per_s": 43409.1, "significant": True, "candidate": 8},
    "ladder": [
        {"step": "precision", "changed": {"precision": [["fp32", "fp32"], ["int8", "int8"]]}, "kept": False,
         "verdict": "no measurable gain", "candidate": 30, "samples_per_s": 41900.3, "previous_samples_per_s": 42682.0,
         "speedup_vs_previous": 0.9814, "ci_low": 0.9232, "ci_high": 1.0432, "rounds": 5, "cumulative": 1.0},
        {"step": "batch", "changed": {"batch": [512, 1024]}, "kept": True, "verdict": "kept", "candidate": 40,
         "samples_per_s": 49888.1, "previous_samples_per_s": 40646.2, "speedup_vs_previous": 1.2279,
         "ci_low": 1.1403, "ci_high": 1.3224, "rounds": 5, "cumulative": 1.2279},
    ],
}  # fmt: skip


def plant_kept_baseline_study(db) -> int:
    return plant_done_study(db, "kept-baseline", KEPT_BASELINE)


@pytest.fixture(scope="module")
def kept(finished):  # noqa: F811
    return plant_kept_baseline_study(finished[0].data_dir / "autotuner.db")


def opened(browser, srv, path: str, viewport: dict, errors: list[str]):  # noqa: F811
    """A page at this width, opened with a read token; its console errors go to `errors`."""
    context = browser.new_context(viewport=viewport, device_scale_factor=1, bypass_csp=True)
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # 401 (before the token) and 404 (a missing study) are expected answers; other console errors are bugs.
    page.on("console", lambda msg: errors.append(msg.text)
            if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)  # fmt: skip
    page.goto(srv.url + path)
    enter_token(page, TOKENS["read"])
    return page


def side_scroll(page) -> list[int]:
    return page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")


def scrolls_sideways(page, selector: str) -> None:
    """A wheel turned sideways over the element's first row scrolls the box it sits in (what is cut off
    can be reached)."""
    row = page.locator(f"{selector} tbody tr").first
    deadline = time.monotonic() + 15
    while True:  # the page's refresh may redraw the row between these two steps: found again
        row.evaluate("(node) => node.scrollIntoView({block: 'center'})")
        if (box := row.bounding_box()) is not None:
            break
        assert time.monotonic() < deadline, f"no row of {selector} on screen"
    page.mouse.move(box["x"] + 20, box["y"] + box["height"] / 2)
    page.mouse.wheel(400, 0)
    page.wait_for_function(
        """(sel) => { for (let n = document.querySelector(sel); n && n !== document.body; n = n.parentElement)
                        if (n.scrollLeft > 0) return true;
                      return false; }""",
        arg=selector, timeout=5_000,
    )  # fmt: skip


@pytest.mark.browser
def test_no_page_scrolls_sideways_at_phone_width(browser, finished):  # noqa: F811
    srv, study, _, _ = finished
    errors: list[str] = []
    for path, ready in (("/", "#studies tbody tr:not(.placeholder)"), ("/configs", ".config-card"),
                        (f"/studies/{study['id']}", "#trials tbody tr[data-trial]")):  # fmt: skip
        page = opened(browser, srv, path, PHONE, errors)
        page.wait_for_selector(ready, timeout=WAIT_MS)
        page.wait_for_function("document.getElementById('live-text').textContent.length > 0", timeout=WAIT_MS)
        width, viewport = side_scroll(page)
        assert width <= viewport, f"{path}: {width} px wide in a {viewport} px window"
        page.close()
    assert errors == []


@pytest.mark.browser
def test_tables_scroll_inside_their_panel_at_phone_width(browser, finished):  # noqa: F811
    srv, study, _, _ = finished
    errors: list[str] = []
    page = opened(browser, srv, "/", PHONE, errors)
    page.wait_for_selector("#studies tbody tr:not(.placeholder)", timeout=WAIT_MS)
    scrolls_sideways(page, "#studies")  # Progress, Best, Speedup, Created were cut off, out of reach

    page = opened(browser, srv, f"/studies/{study['id']}", PHONE, errors)
    page.wait_for_selector("#trials tbody tr[data-trial]", timeout=WAIT_MS)
    # The env column kept a readable width: one line, not a letter a line.
    env = page.locator("#trials tbody tr[data-trial] td.env").first
    line = page.evaluate("parseFloat(getComputedStyle(document.querySelector('#trials td.env')).lineHeight)")
    assert env.bounding_box()["height"] < 2.5 * line + 16
    scrolls_sideways(page, "#trials")

    page = opened(browser, srv, "/configs", PHONE, errors)
    page.wait_for_selector(".config-card .history table", timeout=WAIT_MS)
    scrolls_sideways(page, ".config-card .history table")
    # The copy button does not sit on the first export line.
    button = page.locator(".config-card .copy").bounding_box()
    first = page.evaluate("""() => { const r = document.createRange(); const pre = document.querySelector('.config-card pre');
        r.setStart(pre.firstChild, 0); r.setEnd(pre.firstChild, 10); const b = r.getBoundingClientRect();
        return {x: b.x, y: b.y, width: b.width, height: b.height}; }""")  # fmt: skip
    assert (
        button["y"] + button["height"] <= first["y"]
        or first["y"] + first["height"] <= button["y"]
        or (first["x"] + first["width"] <= button["x"])
    ), (button, first)
    page.screenshot(path=str(ARTIFACTS.joinpath("dashboard-configs-phone.png")), full_page=True)
    assert errors == []


@pytest.mark.browser
def test_a_study_that_kept_its_baseline_says_so(browser, finished, kept):  # noqa: F811
    srv = finished[0]
    errors: list[str] = []
    page = opened(browser, srv, f"/studies/{kept}", DESKTOP, errors)
    page.wait_for_function("document.getElementById('kpi-speedup').textContent !== '—'", timeout=WAIT_MS)
    # 1.00x is what was published, not best / baseline; nothing here was "confirmed".
    assert page.inner_text("#kpi-speedup-label") == "Published speedup"
    assert "baseline was kept" in page.inner_text("#kpi-speedup-sub")
    assert "not confirmed" not in page.inner_text("#panel-outcome")
    assert page.inner_text("#outcome-hint") == "baseline kept"
    assert (
        "The finalist measured 1.17x [1.14-1.19] (95% CI) against the baseline over 6 rounds"
        in page.inner_text("#chart-speedup")
    )
    page.goto(srv.url + "/")
    page.wait_for_selector(f"#studies a[href='/studies/{kept}']", timeout=WAIT_MS)
    row = page.locator("#studies tbody tr", has=page.locator(f"a[href='/studies/{kept}']")).inner_text()
    assert "baseline kept · finalist 1.17x [1.14-1.19] (95% CI) not published" in row
    assert "not confirmed" not in row
    assert errors == []


@pytest.mark.browser
def test_the_ladder_is_readable_at_phone_width(browser, finished, kept):  # noqa: F811
    errors: list[str] = []
    page = opened(browser, finished[0], f"/studies/{kept}", PHONE, errors)
    page.wait_for_selector("#chart-ladder .main-svg", timeout=WAIT_MS)
    sizes = page.evaluate("""() => [...document.querySelectorAll('#chart-ladder .trace text')]
        .filter((t) => t.textContent).map((t) => parseFloat(getComputedStyle(t).fontSize))""")  # fmt: skip
    assert sizes
    assert min(sizes) >= 11, sizes  # the long labels were shrunk to ~5 px
    lines = page.inner_text("#ladder-lines")
    assert "precision 0.98x [0.92-1.04] (dropped)" in lines
    assert "batch 1.23x [1.14-1.32]" in lines
    assert errors == []


@pytest.mark.browser
def test_the_step_breakdown_leaves_its_bars_room_at_phone_width(browser, finished):  # noqa: F811
    errors: list[str] = []
    page = opened(browser, finished[0], f"/studies/{finished[3]}", PHONE, errors)
    page.wait_for_selector("#chart-breakdown .main-svg", timeout=WAIT_MS)
    chart = page.locator("#chart-breakdown").bounding_box()
    plot_area = page.locator("#chart-breakdown .nsewdrag").bounding_box()
    assert plot_area["width"] >= 0.45 * chart["width"], (plot_area, chart)
    assert "(baseline)" in page.text_content("#chart-breakdown .infolayer")  # each bar still says what it is
    pipelines = {c["pipeline"] for c in TIMED_RESULT["candidates"]}
    if len(pipelines) == 1:  # said once, in the hint, not on every label
        (pipeline,) = pipelines
        assert f"pipeline {pipeline} for all" in page.inner_text("#breakdown-hint")
        assert pipeline not in page.text_content("#chart-breakdown .yaxislayer-above")
    assert errors == []


@pytest.mark.browser
def test_charts_say_their_units_and_an_ended_study_promises_nothing(browser, finished):  # noqa: F811
    srv, study, _, _ = finished
    errors: list[str] = []
    page = opened(browser, srv, f"/studies/{study['id']}", DESKTOP, errors)
    page.wait_for_selector("#chart-matrix .main-svg", timeout=WAIT_MS)
    matrix = page.text_content("#chart-matrix")  # SVG text
    assert "samples/s" in matrix  # the colour scale's unit
    assert "batch size" in matrix
    assert "precision fwd/bwd" in matrix
    page.wait_for_function("document.getElementById('chart-importance').textContent.includes('Not available')",
                           timeout=WAIT_MS)  # fmt: skip
    assert "Not available: too few trials to rank knobs" in page.inner_text("#chart-importance")  # no "yet"
    assert errors == []


@pytest.mark.browser
@pytest.mark.parametrize("study", ["999999", "abc"])
def test_a_missing_study_shows_no_empty_panels(browser, finished, study):  # noqa: F811
    # /studies/abc answered the API's JSON 422 before: now the same page, with 404
    assert httpx.get(f"{finished[0].url}/studies/{study}").status_code == (200 if study.isdecimal() else 404)
    errors: list[str] = []
    page = opened(browser, finished[0], f"/studies/{study}", DESKTOP, errors)
    page.wait_for_function(f"document.getElementById('study-name').textContent === 'Study {study} not found'",
                           timeout=WAIT_MS)  # fmt: skip
    assert page.locator(".study-panels").is_hidden()
    text = page.inner_text("main")
    assert "Loading…" not in text
    assert "Failed launches" not in text
    assert errors == []


@pytest.mark.browser
def test_one_study_is_counted_in_the_singular(browser, finished):  # noqa: F811
    srv, study, _, _ = finished
    errors: list[str] = []
    context = browser.new_context(viewport=DESKTOP, device_scale_factor=1, bypass_csp=True)
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    one = srv.client("read").get("/v1/studies", params={"limit": 200}).json()
    one = {**one, "count": 1, "data": [s for s in one["data"] if s["id"] == study["id"]]}
    page.route("**/v1/studies?limit=200", lambda route: route.fulfill(json=one))
    page.goto(srv.url + "/")
    page.wait_for_selector("#studies-summary .stat", timeout=WAIT_MS)
    assert "".join(page.inner_text("#studies-summary .stat >> nth=0").split()) == "1study"
    assert errors == []
