"""What the executors that run a launch script (local, Slurm) share.

The request (the script and where it goes), its `export` lines, the environment it starts in, and the
exit-code file it leaves in the launch directory: how a launch ended is known from that file even
after the process, or the scheduler's memory of the job, is gone.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from autotuner.executors.base import Description, LaunchRequest, LaunchState
from autotuner.executors.files import read_small_text, remove, write_new
from trials.result import ENV_PREFIXES, EXIT_BAD_INPUT, EXIT_CANDIDATE_FAILED, EXIT_LAUNCH_FAILED, EXIT_OK

EXIT_CODE_FILE = "exit_code"


@dataclass(frozen=True)
class ScriptRequest:
    """A launch script and where it goes (the local and Slurm executors' request)."""

    script: str
    script_path: Path

    def write(self, launch: LaunchRequest) -> None:
        """Put the script in place and clear the exit code an earlier try in the same directory left."""
        write_new(self.script_path, self.script)
        remove(launch.workdir / EXIT_CODE_FILE)


def without_comm_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The tuner's environment as a launch inherits it: minus its own NCCL / OFI / FI / TORCH_NCCL
    variables (a launch gets exactly the overrides it asks for, so the baseline means "no overrides",
    not "what we inherited"), and minus its AUTOTUNER_* settings but those a trial reads: the service's
    tokens and its store's URL (with the password) sat in every rank's environment, and in Slurm's."""
    return {
        k: v for k, v in environ.items()
        if not k.startswith(ENV_PREFIXES) and (not k.startswith("AUTOTUNER_") or k.startswith(TRIAL_READS))
    }  # fmt: skip


# The AUTOTUNER_* variables a trial reads: the opt-out of the served config, its own settings, the caps.
TRIAL_READS = ("AUTOTUNER_DISABLE", "AUTOTUNER_TRIAL_", "AUTOTUNER_MAX_")


def exports(env: Mapping[str, str]) -> list[str]:
    """`export NAME=value` lines of a launch script, sorted by name, values quoted for the shell, names
    checked (a resumed launch's env comes back from its stored row, which is not trusted)."""
    for name in env:
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"refusing to export {name!r}: not a variable name")
    return [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a shell can export


def read_exit_code(workdir: Path) -> int | None:
    """The trial's exit code, as the launch script leaves it in `workdir/exit_code` (None: not yet)."""
    text = read_small_text(workdir / EXIT_CODE_FILE)
    return int(text) if text is not None and text.isascii() and text.lstrip("-").isdigit() else None


# Exit codes of a launch script itself, before or around the trial.
EXIT_NO_NETNS = 97  # the local executor could not create the emulated fabric's network namespace
_EXIT_REASONS = {
    EXIT_BAD_INPUT: "bad trial spec (exit code 2)",
    EXIT_LAUNCH_FAILED: "trial launch failed (exit code 3): at start-up, a stalled collective, a dead peer, a "
    "SIGTERM, or a result it could not write (its log says which)",
    EXIT_NO_NETNS: "could not create or shape the network namespace for the emulated fabric (needs root, "
    "iproute2 and tc's tbf)",
}


def describe_exit(code: int) -> Description:
    """How a launch ended, from the trial's exit code (trials.run) or the launch script's."""
    if code in (EXIT_OK, EXIT_CANDIDATE_FAILED):  # some candidates failing is a result: the launch ran
        return Description(LaunchState.SUCCEEDED, code)
    if code in _EXIT_REASONS:
        return Description(LaunchState.FAILED, code, _EXIT_REASONS[code])
    return Description(
        LaunchState.FAILED, code, f"killed by signal {code - 128}" if code > 128 else f"exit code {code}"
    )
