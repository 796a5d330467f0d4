"""`autotuner` entry point. The pre-job hook (`env`, `exec`) runs at every job start, so it is
dispatched before Typer, Rich or SQLAlchemy are imported; everything else goes to the Typer app."""

from __future__ import annotations

import sys

HOOK_COMMANDS = ("env", "exec")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in HOOK_COMMANDS:
        from autotuner.job.hook import main as hook_main

        sys.exit(hook_main(sys.argv[1:]))
    undecodable = [arg for arg in sys.argv[1:] if not _text(arg)]
    if undecodable:  # a name in bytes that are not UTF-8: refused whole, before it reaches a query
        shown = undecodable[0].encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
        print(f"error: the argument '{shown}' is not UTF-8 text", file=sys.stderr)
        sys.exit(2)
    from autotuner.limits import SettingError

    try:
        from autotuner.cli.commands import app
    except SettingError as exc:  # read as the engine is imported (AUTOTUNER_LEASE_S): said, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        app()
    except Exception as exc:  # a store that stopped answering after it opened: said, not a traceback
        from autotuner.tuning.lease import store_unavailable

        if not store_unavailable(exc):
            raise
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        print(f"error: the store did not answer ({why}): run the command again once it does (a study "
              "resumes where it stopped)", file=sys.stderr)  # fmt: skip
        sys.exit(1)


def _text(arg: str) -> bool:
    try:
        arg.encode("utf-8")  # an undecodable byte of argv is a lone surrogate here
    except UnicodeEncodeError:
        return False
    return True


if __name__ == "__main__":
    main()
