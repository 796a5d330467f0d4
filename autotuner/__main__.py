"""`autotuner` entry point. The pre-job hook (`env`, `exec`) runs at every job start, so it is
dispatched before Typer, Rich or SQLAlchemy are imported; everything else goes to the Typer app."""

from __future__ import annotations

import sys

HOOK_COMMANDS = ("env", "exec")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in HOOK_COMMANDS:
        from autotuner.job.hook import main as hook_main

        sys.exit(hook_main(sys.argv[1:]))
    from autotuner.limits import SettingError

    try:
        from autotuner.cli.commands import app
    except SettingError as exc:  # read as the engine is imported (AUTOTUNER_LEASE_S): said, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    app()


if __name__ == "__main__":
    main()
