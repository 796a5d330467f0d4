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
    assert "ladder: env kept" in section
    assert "## GPU check" not in render(json.loads(RESULTS_JSON.read_text()))  # only when a report is there
