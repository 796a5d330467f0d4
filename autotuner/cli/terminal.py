"""Stored text on the terminal. A stored string may be a trial's (an error, an inert reason, a GPU's
name): printed as rich Text it is never read as markup (a "[/]" in it crashed the print), and its escape
sequences are shown, not obeyed; other Unicode is printed as it is (our own "±")."""

from __future__ import annotations

import os
import re
import sys

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from autotuner.text import displayed


def shown(value: object, style: str = "") -> Text:
    return Text(displayed(str(value)), style=style)


def labelled(label: str, value: object, style: str = "red") -> Text:
    """`label` in `style`, then the stored `value` as it is."""
    return Text.assemble((label, style), " ", shown(value))


class Name:
    """A stored name in a table cell. In a column narrower than it, it breaks after a space, "-", "_",
    "/", ":" or a "." that no digit follows ("nccl-" / "broke"), never mid-word as rich's fold did
    ("nccl-bro" / "ke"); only a part wider than the column folds. A speedup with its CI breaks so too
    ("3.75x [1.19-" / "11.80]"), never inside a number."""

    def __init__(self, value: object, style: str = "") -> None:
        self.text = shown(value, style)

    def _parts(self, width: int | None = None) -> list[Text]:
        """Its words (split after spaces), each split further where it is wider than `width`."""
        return [piece for word in _split(self.text, r" +(?=.)")
                for piece in ([word] if width and word.cell_len <= width else _split(word, BREAKS))]  # fmt: skip

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max(part.cell_len for part in self._parts())
        return Measurement(widest, self.text.cell_len).with_maximum(options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = [Text()]
        for part in self._parts(options.max_width):
            if lines[-1].plain and lines[-1].cell_len + part.cell_len > options.max_width:
                lines.append(Text())
            lines[-1].append_text(part)
        for line in lines:
            line.rstrip()  # the space it broke after
        yield Text("\n").join(lines)


BREAKS = (
    r"(?:[-_/:]|\.(?!\d))+(?=.)"  # where a name may break: after a "-", "_", "/", ":", a "." before no digit
)


def _split(text: Text, after: str) -> list[Text]:
    cuts = [m.end() for m in re.finditer(after, text.plain)]
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text.plain)], strict=True)]


PIPE_WIDTH = 1000  # wide enough for any row's names, env and figures on one line


def stdout_console() -> Console:
    """stdout's console. A pipe (`| grep`, `| cut`) gets each row on one line: at rich's 80 columns for a
    non-terminal every name was folded (`autotuner studies | grep cpu-box.small.1` found nothing).
    COLUMNS, when set, still decides."""
    if (sys.stdout is not None and sys.stdout.isatty()) or os.environ.get("COLUMNS"):  # None: stdout closed
        return Console()
    return Console(width=PIPE_WIDTH)
