"""Drift fingerprints of what a browser_extract read (contracts.tools.Fingerprint): the
parts computed from the values themselves. Pure.

A value's *shape* keeps what a format change alters and drops what changes with every
edition: "$34.00" and "$129.50" are both "$9", while "34,00 €" is "9 €", "08:15" is
"9:9", "03/04/2025" is "9/9/9" and "64 °F" is "9 °a".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Distinct shapes kept per field: a column of free text with numbers in it (an address)
# could otherwise carry a shape per value.
MAX_SHAPES = 20
# A shape longer than this is cut: beyond it, it tells nothing a shorter one does not.
MAX_SHAPE_CHARS = 60
# A value without a digit: a name, a headline, a word. Its words vary with every
# edition ("Travel Mug", "Harbour council votes on new budget"), so all are one shape.
TEXT_SHAPE = "text"

# A number with its separators: digit runs joined by one `,` `.` or space (a thousands
# or decimal separator in any convention: "1,234.50", "1.234,50", "1 234,50").
_NUMBER = re.compile(r"\d+(?:[.,\u00a0\u202f\u2009 ]\d+)*")
# A run of letters, of any script; then words in a row, which are one "a": a value
# with a number keeps its shape when the words around it change.
_LETTERS = re.compile(r"[^\W\d_]+")
_WORDS = re.compile(r"a(?: a)+")
_SPACES = re.compile(r"\s+")


def value_shape(text: str) -> str:
    """The shape of an extracted value: each number "9", each run of letters "a", other
    characters as they are, spaces collapsed; "text" for a value without a digit, ""
    for a blank one."""
    plain = _SPACES.sub(" ", text).strip()
    if not plain:
        return ""
    if not any(c.isdigit() for c in plain):
        return TEXT_SHAPE
    shape = _LETTERS.sub("a", _NUMBER.sub("9", plain))
    return _WORDS.sub("a", shape)[:MAX_SHAPE_CHARS]


def value_shapes(values: Iterable[object]) -> list[str]:
    """The distinct shapes of the string values, sorted, at most MAX_SHAPES."""
    return sorted({value_shape(v) for v in values if isinstance(v, str)})[:MAX_SHAPES]
