"""Text that others wrote, made safe for where it is shown: a terminal, a log line, a comment line.

A trial is user code on the cluster and writes what it likes into its result: escape sequences, which a
terminal obeys (a screen clear, a clipboard write, a hyperlink), a newline, which forges a record in a
log, bidi overrides, which reorder what is read. What it wrote is shown, never obeyed. Standard library
only.
"""

from __future__ import annotations

import unicodedata
from typing import Any


def printable(text: str) -> str:
    """One line of printable ASCII: every other character as its escape (\\x1b, \\u202e)."""
    return "".join(c if " " <= c <= "~" else _escape(c) for c in text)


def shortened(text: str, limit: int) -> str:
    """`text`, cut to at most `limit` characters, the cut said by "..."."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable_lines(text: str) -> str:
    """Printable ASCII that keeps its line breaks: a multi-line message (a traceback) as it reads."""
    return "\n".join(printable(line) for line in text.split("\n"))


def displayed(text: str) -> str:
    """`text` as a terminal may show it without obeying it: line breaks kept, every control, format
    (a bidi override) and line-separator character as its escape, all other Unicode as it is (a "±" of
    our own, a GPU's name in any script)."""
    return "".join(c if c == "\n" or _harmless(c) else _escape(c) for c in text)


def _harmless(c: str) -> bool:
    return not unicodedata.category(c).startswith(("C", "Zl", "Zp"))


def cleaned(value: Any, multiline: frozenset[str] = frozenset(), key: str | None = None) -> Any:
    """`value` (parsed JSON) with every string printable on one line, keys included; the strings under
    a key in `multiline` keep their line breaks."""
    if isinstance(value, str):
        return printable_lines(value) if key in multiline else printable(value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: cleaned(v, multiline, k) for k, v in value.items()}
    if isinstance(value, list):
        return [cleaned(v, multiline, key) for v in value]
    return value


def cleaned_in_place(value: Any, multiline: frozenset[str] = frozenset(), key: str | None = None) -> Any:
    """`cleaned`, done in `value` itself (parsed JSON no one else holds): a copy of a large result held
    it twice in memory."""
    if isinstance(value, str):
        return printable_lines(value) if key in multiline else printable(value)
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, (str, list, dict)):
                value[i] = cleaned_in_place(item, multiline, key)
        return value
    if isinstance(value, dict):
        if any(isinstance(k, str) and printable(k) != k for k in value):  # a key to escape: rebuilt, in order
            return cleaned(value, multiline, key)
        for k, item in value.items():
            if isinstance(item, (str, list, dict)):
                value[k] = cleaned_in_place(item, multiline, k)
        return value
    return value


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
