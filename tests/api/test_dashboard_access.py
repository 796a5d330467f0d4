"""The dashboard read without a mouse or good eyes: the faint grey of hints and empty states was 3:1
against its background (WCAG AA asks 4.5:1 of text), the charts had no text alternative, and the
trials table sorted on a click only."""

from __future__ import annotations

import pytest

from tests.api.test_dashboard import browser, study_page  # noqa: F401
from tests.api.test_dashboard_edges import plant_study

# The contrast of an element's text with the first opaque background behind it (WCAG 2's formula).
CONTRAST = """node => {
    const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
    const lum = ([r, g, b]) => [r, g, b].map((c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; })
        .reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
    let back = node;
    while (back && (rgb(getComputedStyle(back).backgroundColor)[3] === 0 || getComputedStyle(back).backgroundColor === 'transparent'))
        back = back.parentElement;
    const [a, b] = [lum(rgb(getComputedStyle(node).color)), lum(rgb(back ? getComputedStyle(back).backgroundColor : 'rgb(255,255,255)'))];
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


@pytest.mark.browser
def test_faint_text_charts_and_sorting_reach_everyone(browser, module_server):  # noqa: F811
    srv = module_server
    study, _ = plant_study(srv, "accessible", "done", candidates=[
        {"kind": "baseline", "samples_per_s": 12_000.0},
        {"samples_per_s": 15_000.0, "batch_size": 128},
        {"samples_per_s": 9_000.0, "batch_size": 256},
    ])  # fmt: skip
    page, errors = study_page(browser, srv, study)
    page.wait_for_selector("#chart-history .main-svg", timeout=15_000)
    page.wait_for_selector("#chart-matrix .main-svg", timeout=15_000)

    faint = ["#chart-breakdown .chart-empty", "#panel-outcome .hint", "#chart-importance .chart-empty", ".footer",
             "#trials th"]  # fmt: skip
    for selector in faint:
        ratio = page.eval_on_selector(selector, CONTRAST)
        assert ratio >= 4.5, (selector, round(ratio, 2))

    # each drawn chart is an image with words; a chart that shows a message is read as that text
    history = page.locator("#chart-history")
    assert history.get_attribute("role") == "img"
    assert "best 15,000 samples/s vs baseline 12,000" in history.get_attribute("aria-label")
    matrix = page.locator("#chart-matrix")
    assert matrix.get_attribute("role") == "img"
    assert "the fastest 15,000 at fp32/fp32 batch 128" in matrix.get_attribute("aria-label")
    assert page.locator("#chart-breakdown").get_attribute("role") is None

    # sorting from the keyboard: the header is reached with Tab and pressed with Enter, then Space
    header = page.locator("#trials th[data-sort=samples_per_s]")
    control = header.locator("button")
    assert control.evaluate("n => n.tabIndex") >= 0
    control.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#trials th[data-sort=samples_per_s][aria-sort=descending]", timeout=10_000)
    page.keyboard.press("Space")
    page.wait_for_selector("#trials th[data-sort=samples_per_s][aria-sort=ascending]", timeout=10_000)
    page.wait_for_function("document.querySelector('#trials tbody tr[data-trial] td:nth-child(9)').textContent === '9,000'",
                           timeout=10_000)  # fmt: skip
    assert not errors, errors
    page.context.close()
