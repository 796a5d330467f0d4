"""The dashboard's quality line, in real Chromium: the paired CI and verdict of the convergence check,
and the batch step's time to quality beside its throughput gain (issue 24)."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from autotuner.cli.claim_report import claim_text, ladder_table, quality_line
from autotuner.store import Store
from autotuner.tuning.claim import batch_step_to_quality
from autotuner.tuning.outcome import LadderStep, Outcome, Quality
from autotuner.tuning.quality import Variant, batch_gain, judge
from tests.api.test_dashboard import ARTIFACTS, browser, finished, study_page  # noqa: F401 - fixtures
from tests.helpers import LANDSCAPE
from tests.tuning.test_quality_stats import curve

BUDGET = 131072


def evidence_and_ladder() -> tuple[Quality, list[LadderStep]]:
    """What the engine records for a batch change 512 -> 1024 checked under 3 paired seeds."""
    base = [{"logloss": x, "auc": 0.765, "train_samples": BUDGET, "eval_samples": 16384, "model_seed": i}
            for i, x in enumerate((0.5750, 0.5730, 0.5776))]  # fmt: skip
    batch = [{"logloss": b["logloss"] + d, "auc": 0.762, "train_samples": BUDGET, "eval_samples": 16384,
              "model_seed": b["model_seed"], "budget_samples": int(1.5 * BUDGET), "lr_scale": 1.0,
              "curve": curve(needs, BUDGET, 6, b["logloss"])}
             for b, d, needs in zip(base, (0.0075, 0.0008, -0.0026), (1.19, 1.02, 0.95), strict=True)]  # fmt: skip
    ladder = [LadderStep(step="batch", changed={"batch": [512, 1024]}, kept=True, verdict="kept", candidate=1,
                         samples_per_s=26205.0, previous_samples_per_s=19700.0, speedup_vs_previous=1.33,
                         ci_low=1.22, ci_high=1.46, rounds=5, cumulative=1.33)]  # fmt: skip
    variants = [Variant("baseline", None), Variant("tuned", None, True, "none")]
    evidence = judge(
        {"baseline": base, "tuned": batch}, ["batch"], variants, 0.002, batch_gain(ladder), cost_s=34.0
    )
    return evidence, batch_step_to_quality(ladder, evidence)


def plant_done_study(db, name: str, outcome: dict, **settings) -> int:
    """A finished study of the recorded workload whose stored outcome is `outcome` (`settings`: over a
    local study's)."""
    store = Store(f"sqlite:///{db}")
    try:
        study = store.create_study(
            name=name, cluster="cpu-box", workload_name="small",
            workload_spec=json.loads(LANDSCAPE.read_text())["workload"],
            space={"env": {}, "precisions": [["fp32", "fp32"]], "batch_sizes": [64]},
            settings={"executor": "local", "trials": 1, "nnodes": 1, "nproc_per_node": 2, "sampler": "tpe", "seed": 0,
                      **settings},
            state="done",
        )  # fmt: skip
        store.update_study(study.id, outcome=outcome)
        return study.id
    finally:
        store.dispose()


def plant_checked_study(db) -> int:
    quality, ladder = evidence_and_ladder()
    return plant_done_study(
        db, "checked", Outcome(ladder=ladder, quality=quality, decision="see the check").dump()
    )


def test_the_terminal_says_the_interval_the_verdict_and_the_time_to_quality():
    quality, ladder = evidence_and_ladder()
    line = quality_line(quality)
    assert f"costs {quality.delta:+.4f} [{quality.ci_low:+.4f}, {quality.ci_high:+.4f}]" in line
    assert "not resolved at k=3" in line
    assert "3 paired model seeds" in line
    assert "quality launch 34 s" in line
    ttq = ladder[0].time_to_quality
    assert f"{ttq.speedup:.2f}x time to quality [{ttq.ci_low:.2f}-{ttq.ci_high:.2f}]" in line
    assert f"batch: 1.33x samples/s, {1 / ttq.efficiency:.2f}x the samples" in line
    console = Console(width=80, record=True)
    console.print(ladder_table(ladder))
    table = console.export_text()
    row = next(r for r in table.splitlines() if "to quality" in r)  # beside the batch step's own gain
    assert f"{ttq.speedup:.2f}x" in row
    assert f"{ttq.ci_low:.2f}-{ttq.ci_high:.2f}" in row
    assert row.rstrip().endswith("dropped")  # not resolved
    assert f"{1 / ttq.efficiency - 1:+.0%} samples" in row
    assert max(len(r) for r in table.splitlines()) <= 80
    assert "not resolved" in line


@pytest.mark.browser
def test_the_study_page_shows_the_quality_ci_verdict_and_time_to_quality(browser, finished):  # noqa: F811
    srv = finished[0]
    study_id = plant_checked_study(srv.data_dir / "autotuner.db")
    quality, ladder = evidence_and_ladder()
    page, errors = study_page(browser, srv, study_id)
    page.wait_for_function("document.getElementById('ladder-quality').textContent.length > 0", timeout=15_000)
    # the sentences the terminal prints, written once (claim_report) and shown as they are
    assert page.inner_text("#ladder-quality") == quality_line(quality)
    text = page.inner_text("#ladder-quality")
    assert f"(k={quality.k_to_resolve} would resolve it)" in text
    ttq = ladder[0].time_to_quality
    assert f"{ttq.speedup:.2f}x time to quality [{ttq.ci_low:.2f}-{ttq.ci_high:.2f}]" in text
    page.wait_for_selector("#chart-ladder .main-svg", timeout=15_000)
    bars = page.text_content("#chart-ladder .main-svg")  # the bars' labels (SVG text)
    (step,) = claim_text(ladder, quality, None).ladder
    assert step.label == [
        "1.33x [1.22-1.46]",
        f"to quality {ttq.speedup:.2f}x [{ttq.ci_low:.2f}-{ttq.ci_high:.2f}] · not resolved",
    ]
    for line in step.label:
        assert line in bars
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-quality.png"), full_page=True)
    assert errors == []


def env_ladder() -> list[LadderStep]:
    """A ladder whose env was climbed a variable at a time: three env steps, one dropped."""

    def env_step(changed: dict, gain: float | None, cumulative: float) -> LadderStep:
        kept = gain is not None
        return LadderStep(step="env", changed=changed, kept=kept, verdict="kept" if kept else "no measurable gain",
                          candidate=1, samples_per_s=30000.0, previous_samples_per_s=25000.0,
                          speedup_vs_previous=gain or 1.01, ci_low=(gain or 1.01) - 0.05, ci_high=(gain or 1.01) + 0.05,
                          rounds=5, cumulative=cumulative)  # fmt: skip

    return [
        LadderStep(
            step="precision",
            changed={"precision": [["fp32", "fp32"], ["fp16", "fp16"]]},
            kept=True,
            verdict="kept",
            candidate=1,
            samples_per_s=25000.0,
            previous_samples_per_s=20000.0,
            speedup_vs_previous=1.25,
            ci_low=1.2,
            ci_high=1.3,
            rounds=5,
            cumulative=1.25,
        ),  # fmt: skip
        env_step({"NCCL_BUFFSIZE": [None, "16777216"]}, None, 1.25),
        env_step({"NCCL_NSOCKS_PERTHREAD": [None, "8"], "NCCL_SOCKET_NTHREADS": [None, "2"]}, 1.5, 1.875),
        env_step({"NCCL_P2P_NET_CHUNKSIZE": [None, "524288"]}, 1.2, 2.25),
    ]


@pytest.mark.browser
def test_each_env_step_is_its_own_bar_named_by_its_variables(browser, finished):  # noqa: F811
    # The waterfall's bars are categories: three steps all named "env" were drawn as one bar.
    srv = finished[0]
    study_id = plant_done_study(
        srv.data_dir / "autotuner.db", "env-steps", Outcome(ladder=env_ladder()).dump()
    )
    page, errors = study_page(browser, srv, study_id)
    page.wait_for_selector("#chart-ladder .main-svg .xtick", timeout=15_000)
    ticks = page.eval_on_selector_all("#chart-ladder .xtick text", "nodes => nodes.map(n => n.textContent)")
    assert ticks == [
        "baseline",
        "precision",
        "envBUFFSIZE",
        "envNSOCKS_PERTHREAD+SOCKET_NTHREADS",
        "envP2P_NET_CHUNKSIZE",
    ]  # fmt: skip (one line of the SVG's text per tspan)
    bars = page.text_content("#chart-ladder .main-svg")
    for step in claim_text(env_ladder(), None, None).ladder:
        assert step.label[0] in bars
    assert errors == []


@pytest.mark.browser
def test_a_study_that_published_nothing_says_why_not_publish_off(browser, finished):  # noqa: F811
    """An outage keeps the config served before: the page said "nothing (publish off)" for it too."""
    srv = finished[0]
    outage = ("not credited: the ladder's batch step could not be measured (see the launch logs): nothing "
              "published (the config served before, if any, stays)")  # fmt: skip
    for name, publish, said in (("outage", True, "nothing: the config served before, if any, stays"),
                                ("publish-off", False, "nothing (publish off)")):  # fmt: skip
        study_id = plant_done_study(srv.data_dir / "autotuner.db", name, {"decision": outage, "speedup": 1.0},
                                    publish=publish)  # fmt: skip
        page, errors = study_page(browser, srv, study_id)
        page.wait_for_function(
            f"document.getElementById('decision').textContent.includes({said!r})", timeout=15_000
        )
        assert errors == []
        page.close()


KEPT_FINALIST = {"speedup": 7.83, "ci_low": 7.68, "ci_high": 7.98, "confidence": 0.95, "rounds": 3,
                 "tuned_samples_per_s": 78390.0, "baseline_samples_per_s": 10016.7, "significant": True,
                 "candidate": 2}  # fmt: skip


@pytest.mark.browser
def test_a_study_that_kept_the_served_config_never_reads_as_the_baseline_published(browser, finished):  # noqa: F811
    """An outage after a confirmed finalist stores the baseline as chosen and publishes nothing: the page
    said "baseline kept", a 1.00x "published speedup" and "Published trial: the baseline itself"."""
    srv = finished[0]
    db = srv.data_dir / "autotuner.db"
    kept = {"speedup": 1.0, "best_candidate": 2, "baseline_candidate": 1, "chosen_candidate": 1,
            "decision": "not credited: the ladder's precision step could not be measured (see the launch logs): "
                        "nothing published (the config served before, if any, stays)", "finalist": KEPT_FINALIST}  # fmt: skip
    published_baseline = {**kept, "decision": "no measurable gain: published the baseline (no changes)",
                          "published_version": 1}  # fmt: skip
    for name, outcome, value, hint in (("kept-served", kept, "—", "nothing published"),
                                       ("kept-baseline", published_baseline, "1.00x", "baseline kept")):  # fmt: skip
        page, errors = study_page(browser, srv, plant_done_study(db, name, outcome, publish=True))
        page.wait_for_function(
            f"document.getElementById('outcome-hint').textContent === {hint!r}", timeout=15_000
        )
        assert page.text_content("#kpi-speedup") == value
        sub = page.text_content("#kpi-speedup-sub")
        if name == "kept-served":
            assert sub.startswith("nothing published: the config served before, if any, stays"), sub
            assert "finalist 7.83x" in sub, sub
        else:
            assert sub == "the baseline was kept: nothing changed", sub
        assert errors == []
        page.goto(srv.url + "/")  # the studies list (same tab: the token stays)
        cell = page.locator("#studies tbody tr", has_text=name).locator("td").nth(6)
        cell.wait_for(timeout=15_000)
        said = cell.text_content()
        assert ("nothing published · finalist 7.83x" in said) == (name == "kept-served"), said
        assert ("baseline kept" in said) == (name == "kept-baseline"), said
        page.close()


def test_the_page_knows_the_engine_s_words_for_a_study_that_kept_the_served_config():
    from api.dashboard import STATIC
    from autotuner.tuning.confirm import BASELINE_BEST, KEPT_SERVED

    assert f'const KEPT_SERVED = "{KEPT_SERVED}";' in (STATIC / "app.js").read_text()
    # and of one whose search found nothing faster than the baseline ("the finalist was not confirmed
    # faster than the baseline", it said, where no finalist was compared at all)
    assert f'const BASELINE_BEST = "{BASELINE_BEST}";' in (STATIC / "app.js").read_text()


@pytest.mark.browser
def test_a_figure_no_study_measures_is_said_short_not_across_the_page(browser, finished):  # noqa: F811
    """A speedup of 1e300 (a row written by hand) was 301 digits with commas: the page 5,727 px wide."""
    srv = finished[0]
    study_id = plant_done_study(srv.data_dir / "autotuner.db", "huge", {"speedup": 1e300, "ci_low": 1e299,
                                                                        "ci_high": 1e301, "rounds": 3})  # fmt: skip
    page, errors = study_page(browser, srv, study_id)
    page.wait_for_function(
        "document.getElementById('kpi-speedup').textContent === '1.00e+300x'", timeout=15_000
    )
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert errors == []
    page.close()
