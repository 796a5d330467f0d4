"""Stored text on the terminal. A stored string may be a trial's (an error, an inert reason, a GPU's
name): printed as rich Text it is never read as markup (a "[/]" in it crashed the print), and its escape
sequences are shown, not obeyed; other Unicode is printed as it is (our own "±")."""

from __future__ import annotations

from rich.text import Text

from autotuner.text import displayed


def shown(value: object, style: str = "") -> Text:
    return Text(displayed(str(value)), style=style)


def labelled(label: str, value: object, style: str = "red") -> Text:
    """`label` in `style`, then the stored `value` as it is."""
    return Text.assemble((label, style), " ", shown(value))
