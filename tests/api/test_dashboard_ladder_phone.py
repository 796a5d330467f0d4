"""The ladder's step names on a phone: plotly tilts them, and the bottom margin, fixed, cut them
("env NSOC..."); the margin grows to hold them."""

from __future__ import annotations

import pytest

from autotuner.tuning.outcome import Outcome
from tests.api.service import TOKENS
from tests.api.test_dashboard import browser, enter_token  # noqa: F401
from tests.api.test_dashboard_quality import env_ladder, plant_done_study


@pytest.mark.browser
def test_the_ladders_step_names_are_whole_on_a_phone(browser, module_server):  # noqa: F811
    srv = module_server
    study = plant_done_study(
        srv.data_dir / "autotuner.db", "env-steps-phone", Outcome(ladder=env_ladder()).dump()
    )
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, device_scale_factor=1, bypass_csp=True
    )
    page = context.new_page()
    page.goto(f"{srv.url}/studies/{study}")
    enter_token(page, TOKENS["read"])
    page.wait_for_selector("#chart-ladder .main-svg .xtick text", timeout=15_000)
    chart = page.locator("#chart-ladder").bounding_box()
    for tick in page.locator("#chart-ladder .xtick text").all():
        box = tick.bounding_box()
        assert box["y"] + box["height"] <= chart["y"] + chart["height"] + 1, (tick.text_content(), box, chart)
        assert box["x"] >= chart["x"] - 1, (tick.text_content(), box, chart)
    context.close()
