"""The benchmark report: the README's headline is the committed run's, and splicing keeps the rest."""

import json
from pathlib import Path

import pytest

from bench.report import HEADLINE_END, HEADLINE_START, headline_table, render, splice_headline

ROOT = Path(__file__).resolve().parents[2]
RESULTS = json.loads((ROOT / "bench" / "results.json").read_text())


def test_readme_headline_is_the_committed_run():
    readme = (ROOT / "README.md").read_text()
    block = readme.split(HEADLINE_START, 1)[1].split(HEADLINE_END, 1)[0]
    assert block.strip() == headline_table(RESULTS)
    assert headline_table(RESULTS) in (ROOT / "bench" / "RESULTS.md").read_text()
    from bench.run import gpu_report

    assert render(RESULTS, gpu_report()) == (ROOT / "bench" / "RESULTS.md").read_text()


def test_splice_replaces_only_the_block():
    readme = f"# Title\n\nbefore\n{HEADLINE_START}\nold table\n{HEADLINE_END}\n\nafter\n"
    spliced = splice_headline(readme, RESULTS)
    assert spliced.startswith("# Title\n\nbefore\n")
    assert spliced.endswith(f"{HEADLINE_END}\n\nafter\n")
    assert "old table" not in spliced
    assert headline_table(RESULTS) in spliced
    assert splice_headline(spliced, RESULTS) == spliced


def test_a_readme_without_the_block_is_named():
    with pytest.raises(ValueError, match="bench:headline"):
        splice_headline("# no markers\n", RESULTS)


def test_the_committed_gpu_check_has_its_section_with_the_sweep_the_timing_and_the_study():
    from bench.report import render
    from bench.run import RESULTS_JSON, gpu_report

    gpu = gpu_report()
    assert gpu is not None, "bench/out/gpu-check.json (the H200 run) is committed"
    assert gpu["runs"], "bench/out/gpu-check.json (the H200 run) is committed"
    md = render(json.loads(RESULTS_JSON.read_text()), gpu)
    section = md.split("## GPU check: NCCL in the loop", 1)[1]
    assert "| 8x2 |" in section
    assert "NCCL took threads x sockets" in section
    assert "timed with NCCL's own events on its stream" in section
    assert "a2a / alone" in section
    assert "NCCL_NSOCKS_PERTHREAD" in section
    assert "ladder: env NSOCKS_PERTHREAD+SOCKET_NTHREADS kept" in section
    assert "## GPU check" not in render(json.loads(RESULTS_JSON.read_text()))  # only when a report is there


def test_the_revalidation_section_and_headline_row_show_both_versions():
    def validation(version: int, speedup: float, ci: tuple | None, rounds: int | None, wall_s: float) -> dict:
        low, high = ci or (None, None)
        return {"version": version, "state": "held", "speedup": speedup, "ci_low": low, "ci_high": high,
                "rounds": rounds, "wall_s": wall_s, "launches": 1}  # fmt: skip

    def config(batch: int) -> dict:
        return {"precision": "fp32/fp32", "batch_size": batch, "env": {"NCCL_NSOCKS_PERTHREAD": "4"}}

    section = {"study_s": 120.0, "published": config(512), "finalist": config(1024),
               "published_revalidation": validation(1, 1.0, None, None, 9.0),
               "finalist_revalidation": validation(2, 1.15, (1.06, 1.26), 6, 36.0)}  # fmt: skip
    text = render({"sections": {"revalidate": section}})
    assert "## Re-validation" in text
    assert (
        "| finalist v2 | fp32/fp32, batch 1024, NCCL_NSOCKS_PERTHREAD=4 | 6 | 1.15x [1.06-1.26] | held | 36.0 | 1 |"
        in text
    )
    assert (
        "| published v1 | fp32/fp32, batch 512, NCCL_NSOCKS_PERTHREAD=4 | - | 1.00x | held | 9.0 | 1 |"
        in text
    )
    assert "0.30x the study that found it" in text
    assert (
        "| re-validation of a published finalist (demo, 2 CPU ranks) | 36 s, held | its study 120 s |" in text
    )


def test_the_store_bench_measures_a_page_in_statements_per_page_not_per_study():
    from bench.store_scale import run

    c = run(versions=40, studies=120)
    listing = c["listing"]
    assert listing["page_500_statements"] == listing["page_50_statements"]  # 120 studies read as 50 are
    assert set(c["configs_ratio"]) == {"pin_ms", "unpin_ms", "rollback_ms", "history_page_ms"}
    assert all(v > 0 for v in c["configs_many"].values())
    assert "## The store at scale" in render({"sections": {"store": c}})


def test_a_later_gpu_run_shows_the_all_to_all_bound_jobs_wire_check():
    # the next GPU run's phase b adds the bound job's trial (bench.gpu_check: its wire times are the ones
    # checked); committed as run 4, the section shows it with the job it ran
    import copy

    from bench.report import render
    from bench.run import RESULTS_JSON, gpu_report

    gpu = copy.deepcopy(gpu_report())
    assert gpu is not None
    trial = copy.deepcopy(gpu["runs"][1]["phases"]["b"]["trials"]["default"])
    trial["job"] = "demo-sparse-b16384, batch 16384"
    trial["candidates"][0]["wire_vs_alone"] = 1.07
    gpu["runs"].append({"run": 4, "commit": "abc1234", "phases": {"b": {"trials": {"a2a-bound": trial}}}})
    section = render(json.loads(RESULTS_JSON.read_text()), gpu).split("## GPU check: NCCL in the loop", 1)[1]
    assert "The all-to-all-bound job on 2 nodes (demo-sparse-b16384, batch 16384)" in section
    assert "(run 4, commit abc1234)" in section
    assert "| 1.07x |" in section


def test_the_committed_result_reading_run_refuses_a_file_of_objects_and_parses_at_json_loads_cost():
    """bench/result_parse.py's committed run: a file of empty objects (24x its size as json.loads holds it)
    is refused before parsing; a real result costs what json.loads does (no second copy)."""
    rows = {row["case"]: row for row in RESULTS["sections"]["results"]["rows"]}
    real = rows["a trial's result, 192 ranks, 15 candidates"]
    objects = rows["64 MiB of empty objects ({},{},...)"]
    assert real["outcome"] == "parsed"
    assert real["ratio_vs_json_loads"] < 1.2
    assert objects["outcome"].startswith("refused: ")
    assert objects["parse_result_x"] < 1 < objects["json_loads_x"]
    assert "## Reading a trial's result" in render({"sections": {"results": RESULTS["sections"]["results"]}})
