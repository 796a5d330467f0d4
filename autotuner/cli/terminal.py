"""Stored text on the terminal. A stored string may be a trial's (an error, an inert reason, a GPU's
name): printed as rich Text it is never read as markup (a "[/]" in it crashed the print), and its escape
sequences are shown, not obeyed; other Unicode is printed as it is (our own "±")."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.text import Text

from autotuner.text import displayed


def shown(value: object, style: str = "") -> Text:
    return Text(displayed(str(value)), style=style)


def labelled(label: str, value: object, style: str = "red") -> Text:
    """`label` in `style`, then the stored `value` as it is."""
    return Text.assemble((label, style), " ", shown(value))


PIPE_WIDTH = 1000  # wide enough for any row's names, env and figures on one line


def stdout_console() -> Console:
    """stdout's console. A pipe (`| grep`, `| cut`) gets each row on one line: at rich's 80 columns for a
    non-terminal every name was folded (`autotuner studies | grep cpu-box.small.1` found nothing).
    COLUMNS, when set, still decides."""
    if (sys.stdout is not None and sys.stdout.isatty()) or os.environ.get("COLUMNS"):  # None: stdout closed
        return Console()
    return Console(width=PIPE_WIDTH)
