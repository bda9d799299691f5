"""Silent drift: whether a page still means what it meant when an executor recorded its
reads. A browser_extract returns a fingerprint of what gave its values their meaning
(contracts.tools.Fingerprint: the page's language, the notes around what was read, the
headers and labels of each value, strike-through, tag paths, value shapes); the compiler
keeps it on the step; a replay compares the two. Pure.

Data changes between runs and must not count: digits are masked in texts compared, so a
new date or figure in a note is the same note. Meaning changes must: another label over a
column, another unit in a note, a caption that says the list is now oldest first, a page
in another language, a note dated days before the page's "today" (a stale copy).

A value's *shape* keeps what a format change alters and drops what changes with every
edition: "$34.00" and "$129.50" are both "$9", while "34,00 €" is "9 €", "08:15" is
"9:9", "03/04/2025" is "9/9/9" and "64 °F" is "9 °a".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from datetime import date

from contracts.tools import Fingerprint

_DIGITS = re.compile(r"\d+")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# Dates this far apart still read as one edition (a page built over midnight).
SAME_EDITION_DAYS = 1
MAX_REASONS_PER_PART = 3


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
# A sign before a number is part of it (a temperature below zero is the same kind of
# value), unless a letter or digit comes first ("2025-03-05" stays a date).
_NUMBER = re.compile(r"(?:(?<!\w)[-+\u2212])?\d+(?:[.,\u00a0\u202f\u2009 ]\d+)*")
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


def masked(text: str | None) -> str:
    """A text with its figures masked and its spaces collapsed: what it says, not the
    data it shows."""
    return " ".join(_DIGITS.sub("#", text or "").split())


def _dates(notes: list[str]) -> list[date]:
    found = []
    for note in notes:
        for year, month, day in _ISO_DATE.findall(note):
            try:
                found.append(date(int(year), int(month), int(day)))
            except ValueError:
                continue
    return found


def date_spread(notes: list[str]) -> int | None:
    """Days between the oldest and newest date the notes show (None: fewer than two). A
    page whose "updated" line falls days behind its own "today" is a stale copy."""
    found = _dates(notes)
    return (max(found) - min(found)).days if len(found) >= 2 else None


def _notes(recorded: Fingerprint, now: Fingerprint) -> list[str]:
    before = Counter(masked(n) for n in recorded.notes)
    after = Counter(masked(n) for n in now.notes)
    reasons = []
    added = [n for n in now.notes if (after - before)[masked(n)] > 0]
    gone = [n for n in recorded.notes if (before - after)[masked(n)] > 0]
    reasons += [f"a note now reads {n!r}" for n in _first_unique(added)]
    reasons += [f"a note no longer reads {n!r}" for n in _first_unique(gone)]
    was, is_ = date_spread(recorded.notes), date_spread(now.notes)
    if is_ is not None and abs(is_ - (was or 0)) > SAME_EDITION_DAYS:
        reasons.append(f"the page's dates are now {is_} days apart (were {was or 0})")
    return reasons


def _first_unique(texts: list[str]) -> list[str]:
    out: list[str] = []
    for text in texts:
        if masked(text) not in {masked(t) for t in out}:
            out.append(text)
    return out[:MAX_REASONS_PER_PART]


def _labels(recorded: Fingerprint, now: Fingerprint) -> list[str]:
    """A value's label compared item by item (a column's header, a <dt>): the first
    item whose label changed, per field."""
    reasons = []
    for field, was in recorded.labels.items():
        is_ = now.labels.get(field)
        if is_ is None:
            reasons.append(f"{_name(field)} has no label now (was {was[0] if was else None!r})")
            continue
        for position, (before, after) in enumerate(zip(was, is_, strict=False)):
            if masked(before) != masked(after):
                reasons.append(
                    f"{_name(field)}: item {position}'s label was {before!r}, now {after!r}"
                )
                break
    return reasons


def _marks(recorded: Fingerprint, now: Fingerprint) -> list[str]:
    """Strike-through, the element read and the form of the values, per field."""
    reasons = []
    for field, flags in now.struck.items():
        if any(flags) and not any(recorded.struck.get(field, [])):
            reasons.append(f"{_name(field)}: a value is now struck through")
    for field, was_path in recorded.paths.items():
        now_path = now.paths.get(field)
        if now_path is not None and now_path != was_path:
            reasons.append(f"{_name(field)} now reads a {now_path!r} (was {was_path!r})")
    for field, was_shapes in recorded.shapes.items():
        new = sorted(set(now.shapes.get(field, [])) - set(was_shapes))
        if new and was_shapes:
            reasons.append(
                f"{_name(field)}: values now look like {new} (were {sorted(was_shapes)})"
            )
    return reasons


def _name(field: str) -> str:
    return f"field {field!r}" if field else "the value read"


def compare(recorded: Fingerprint, now: Fingerprint) -> list[str]:
    """What differs in meaning between the recorded read and today's, in words; empty:
    the page means what it meant."""
    reasons = []
    if recorded.lang != now.lang and (recorded.lang or now.lang):
        reasons.append(f"the page's language was {recorded.lang!r}, now {now.lang!r}")
    if [masked(h) for h in recorded.headers] != [masked(h) for h in now.headers]:
        reasons.append(f"the headers were {recorded.headers}, now {now.headers}")
    return reasons + _labels(recorded, now) + _notes(recorded, now) + _marks(recorded, now)
