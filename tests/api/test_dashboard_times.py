"""Times on the dashboard name their zone: they were the browser's local time with no zone ("Dec 7,
2026, 08:43 AM"), where the CLI prints UTC, so a publish could not be matched with a UTC log."""

from __future__ import annotations

import re

import pytest

from tests.api.service import TOKENS
from tests.api.test_dashboard import browser, enter_token  # noqa: F401
from tests.api.test_dashboard_edges import plant_study


@pytest.mark.browser
def test_times_say_their_zone_and_their_tooltip_utc(browser, module_server):  # noqa: F811
    srv = module_server
    study, _ = plant_study(srv, "zoned", "done", candidates=[{"kind": "baseline", "samples_per_s": 12_000.0}])
    context = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US",
                                  timezone_id="America/New_York", bypass_csp=True)  # fmt: skip
    page = context.new_page()
    page.goto(f"{srv.url}/studies/{study}")
    enter_token(page, TOKENS["read"])
    page.wait_for_function(
        "document.getElementById('study-meta').textContent.includes('created')", timeout=15_000
    )
    created = page.locator("#study-meta span", has_text="created").inner_text()
    assert re.search(r"\d{2}:\d{2} [AP]M E[SD]T$", created), created  # New York's time, named as such
    page.goto(srv.url + "/")
    cell = (
        page.locator("#studies tbody tr", has=page.locator(f"a[href='/studies/{study}']"))
        .locator("td")
        .nth(7)
    )
    cell.wait_for(timeout=15_000)
    assert re.search(r"E[SD]T$", cell.locator(".sub").inner_text()), cell.inner_text()
    # the tooltip: the instant as the CLI prints it, whatever the browser's zone
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", cell.get_attribute("title")), (
        cell.get_attribute("title")
    )
    context.close()
