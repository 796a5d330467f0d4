"""Stored text on the terminal. A stored string may be a trial's (an error, an inert reason, a GPU's
name): printed as rich Text it is never read as markup (a "[/]" in it crashed the print), and its escape
sequences are shown, not obeyed."""

from __future__ import annotations

from rich.text import Text

from autotuner.text import for_terminal


def shown(value: object, style: str = "") -> Text:
    return Text(for_terminal(str(value)), style=style)


def labelled(label: str, value: object, style: str = "red") -> Text:
    """`label` in `style`, then the stored `value` as it is."""
    return Text.assemble((label, style), " ", shown(value))
