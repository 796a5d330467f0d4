"""Integers as NCCL reads them: C strtoll(s, NULL, 0), and why a text is not the plain decimal it looks like.

NCCL parses every integer variable with strtoll(s, NULL, 0) and ignores what follows the digits: "4MB"
reads as 4, "010" as 8 (octal), "0x10" as 16. Only plain decimal digits mean the same to NCCL and to a
human, so that is the only form the linter accepts, and the message says what NCCL would have read.
"""

from __future__ import annotations

import re

from autotuner.envvars.problems import show_value

_DECIMAL_RE = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_C_SPACE = " \t\n\v\f\r"  # what C's isspace() skips before the number
_INT64 = (-(2**63), 2**63 - 1)


def _strtoll(text: str) -> tuple[int, int]:
    """C strtoll(text, &end, 0): the value and where parsing stopped (0 when no digits were read)."""
    i, n = 0, len(text)
    while i < n and text[i] in _C_SPACE:
        i += 1
    sign = 1
    if i < n and text[i] in "+-":
        sign = -1 if text[i] == "-" else 1
        i += 1
    base = 10
    if text[i : i + 2].lower() == "0x" and i + 2 < n and text[i + 2].lower() in "0123456789abcdef":
        base, i = 16, i + 2
    elif text[i : i + 1] == "0":
        base = 8
    digits = "0123456789abcdef"[:base]
    j = i
    while j < n and text[j].isascii() and text[j].lower() in digits:
        j += 1
    if j == i:
        return 0, 0
    value = sign * int(text[i:j], base)
    return min(max(value, _INT64[0]), _INT64[1]), j


def nccl_int(text: str) -> int:
    """What NCCL reads from `text`: it parses integers with strtoll(s, NULL, 0), ignoring what follows."""
    return _strtoll(text)[0]


def is_decimal(text: str) -> bool:
    """Plain decimal digits with an optional minus: the only form NCCL and a human read the same way."""
    return bool(_DECIMAL_RE.match(text)) and text != "-0"


def not_decimal_message(text: str) -> str:
    """Why `text` is refused as an integer: what NCCL would read from it, and each reason it differs."""
    value, end = _strtoll(text)
    why = []
    stripped = text.lstrip(_C_SPACE)
    body = stripped.lstrip("+-")
    if not stripped:
        why.append("an empty value reads as 0")
    elif end == 0:
        why.append("no leading number at all reads as 0")
    else:
        if stripped != text:
            why.append("leading whitespace is skipped, and a shell or env file may drop it")
        if stripped[0] == "+":
            why.append("a + sign is not needed")
        if body[:2].lower() == "0x":
            why.append("0x means hexadecimal")
        elif len(body) > 1 and body[0] == "0" and body[1].isdigit():
            why.append("a leading 0 means octal")
        if end < len(text):
            why.append(f"the rest, {show_value(text[end:])}, is ignored")
        if text.strip() == "-0":
            why.append("-0 is 0")
    return (
        f"{show_value(text)} is not a plain decimal integer: NCCL parses it with strtoll(s, NULL, 0) and would read "
        f"{value} ({'; '.join(why)}); write the number in decimal digits, e.g. 4194304 for 4 MiB"
    )
