"""The sbatch_args gate reads an option the way sbatch does (issue 21): getopt_long takes any unique
prefix of a long option as that option, so `--outp=` is --output and must be refused like it."""

from __future__ import annotations

import getopt

import pytest

from autotuner.executors.slurm.options import (
    SBATCH_LONG_OPTIONS,
    SLURM_OWN_ARGS,
    SlurmOptions,
    sbatch_reads_as,
)

ABBREVIATIONS = ["--outp=/tmp/x", "--requ", "--arr=1-1000", "--chd=/", "--exclu", "--ntasks-per-n=2", "--wra=id",
                 "--job-n=x", "--node=4", "--open-m=truncate", "--parsab", "--gpus-per-n=8", "--expo=ALL",
                 "--export-f=/tmp/env", "--get-u", "--no-req", "--tim=5", "--e=/tmp/x", "--o=/tmp/x"]  # fmt: skip
ALLOWED = ["--mem=0", "--reservation=tuning", "--gpus=8", "--exclude=n1", "--time-min=5", "--time-m=5",
           "--nodelist=a,b", "--comment=tuning", "--res=t", "--mem-per-c=2G", "--no-k", "--hint=nomultithread"]  # fmt: skip


def parse(arg: str) -> SlurmOptions:
    return SlurmOptions.parse({"sbatch_args": [arg]})


@pytest.mark.parametrize("arg", ABBREVIATIONS)
def test_an_abbreviation_of_an_option_the_executor_sets_is_refused_as_that_option(arg):
    name = arg.split("=")[0]
    with pytest.raises(ValueError, match="is set by the executor") as caught:
        parse(arg)
    assert f"{name} (sbatch reads it as --" in str(caught.value)


@pytest.mark.parametrize("arg", ALLOWED)
def test_full_names_and_abbreviations_of_other_options_pass(arg):
    assert parse(arg).sbatch_args == (arg,)


def getopt_reads(name: str) -> str | None:
    """What Python's getopt, which matches long options by unique prefix as getopt_long does, reads
    `name` as (None: ambiguous or unknown)."""
    longopts = [o.removeprefix("--") + "=" for o in SBATCH_LONG_OPTIONS]
    try:
        (option, _), *_ = getopt.getopt([f"{name}=x"], "", longopts)[0]
    except getopt.GetoptError:
        return None
    return option


def every_prefix() -> list[str]:
    return sorted({option[:n] for option in SBATCH_LONG_OPTIONS for n in range(3, len(option) + 1)})


def test_the_gate_agrees_with_getopt_on_every_prefix_of_every_option():
    for name in every_prefix():
        read_as = getopt_reads(name)
        refused = bool(sbatch_reads_as(name) & SLURM_OWN_ARGS)
        if read_as is not None:  # getopt takes it as one option: refused exactly when that one is ours
            assert refused == (read_as in SLURM_OWN_ARGS), (name, read_as)
            assert sbatch_reads_as(name) == {read_as}, name
        else:  # ambiguous: sbatch refuses it; the gate refuses it if any reading is ours
            assert len(sbatch_reads_as(name)) > 1, name


def test_an_unknown_option_is_left_to_sbatch():
    assert sbatch_reads_as("--no-such-option") == {"--no-such-option"}
    assert parse("--no-such-option=1").sbatch_args == ("--no-such-option=1",)


@pytest.mark.parametrize(
    ("arg", "shown"),
    [
        ("--dependency=afterok:99999", "--dependency"),
        ("--dependency=singleton", "--dependency"),
        ("--dep=afterany:1", "--dep (sbatch may read it as --dependency)"),
        ("--deadline=now+1hour", "--deadline"),
        ("--dea=2030-01-01T00:00:00", "--dea (sbatch may read it as --deadline)"),
        ("--de=x", "--de (sbatch may read it as --deadline or --dependency)"),  # ambiguous: either refused
        ("-dafterok:99999", "'-dafterok:99999' (-d is --dependency)"),
        ("-d", "'-d' (-d is --dependency)"),
        ("-H", "'-H' (-H is --hold)"),
        ("-bnow+1hour", "'-bnow+1hour' (-b is --begin)"),
    ],
)
def test_an_option_that_holds_the_job_or_drops_it_unrun_is_refused(arg, shown):
    """A job held on a dependency (perhaps for good) or dropped by Slurm at a deadline while still pending
    never runs within the launch's queue time: refused as --begin and --hold are, in the same words."""
    with pytest.raises(ValueError, match="the launch would not run now") as caught:
        parse(arg)
    assert str(caught.value) == (
        f"slurm executor option sbatch_args={[arg]!r}: {shown}: the launch would not run now (nothing "
        "queued, or held, delayed or dropped before it runs)"
    )
