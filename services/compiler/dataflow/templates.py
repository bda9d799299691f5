"""Finding a value in earlier outputs: exactly (`find_exact`), or as literal text around
output strings found inside it (`find_template`).

Matches are whole words, latest output first. A short string would match by accident, so
only strings long enough to say where they came from are looked for (`embeddable`); a
short word an output holds as a value ("OK") is a part all the same, left open until a
neighbouring reference says whose it is (`binding.bind`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.compiler.dataflow.sources import (
    Context,
    Pointer,
    Source,
    Template,
    occurrences,
    several_records,
)
from services.compiler.dataflow.text import bounded, marks, short_word
from services.executor.toolkinds import Kind


def embeddable(leaf: str, kind: Kind) -> bool:
    """Can this output string stand inside a longer value? Short words would match by
    accident: in text, 3+ characters (2 with a digit); in a URL or command, only
    path- or URL-like strings or long ones."""
    if not any(ch.isalnum() for ch in leaf):
        return False
    if kind == "data":
        return len(leaf) >= 3 or (len(leaf) == 2 and any(ch.isdigit() for ch in leaf))
    return len(leaf) >= 8 or (len(leaf) >= 3 and ("/" in leaf or "?" in leaf))


def find_exact(value: str, sources: Sequence[Source], ctx: Context) -> Template | None:
    """The latest earlier output holding exactly `value`. A short value ("1", "OK") is
    too common to say where it came from: it is not matched. Where several records hold
    it, the template is open (`Template.open`)."""
    if value in ctx.constants or not embeddable(value, "data"):
        return None
    for source in reversed(sources):
        found = occurrences(source, value)
        if found:
            return Template((found[0],), ((0, found),) if several_records(found) else ())
    return None


def find_template(
    value: str, sources: Sequence[Source], ctx: Context, kind: Kind = "data"
) -> Template | None:
    """Split `value` into literal text and earlier output strings found inside it
    (whole words only, latest step first). Where matches overlap, what a read found
    wins over what a navigation reported, then the longer one: in `origin/` + `/s/a`
    the page URL `origin/` is longer, but the extracted href is the data the run
    picked, and taking the URL would leave `s/a` a constant. In data, a short word an
    output holds ("OK") is a part too, open until a neighbouring reference says whose it
    is (`bind`); a number where a line's numbering may stand ("1. ") is left to
    `leaked_content`."""
    found = _found_in(value, sources, ctx, kind)
    if not found.at:
        return None
    taken = _take(value, found, kind)
    if not taken:
        return None
    return _assemble(value, taken, found, _held_once(value, sources))


@dataclass
class _Found:
    """The output strings inside a value: every occurrence of each, in the latest output
    holding it (`at`); those a read found (`read`); short words (`short`)."""

    at: dict[str, tuple[Pointer, ...]] = field(default_factory=dict)
    read: set[str] = field(default_factory=set)
    short: set[str] = field(default_factory=set)


def _found_in(value: str, sources: Sequence[Source], ctx: Context, kind: Kind) -> _Found:
    found = _Found()
    for source in reversed(sources):
        for leaf in source.paths:
            if leaf in found.at or leaf == value or leaf in ctx.constants or leaf not in value:
                continue
            if not embeddable(leaf, kind):
                if kind != "data" or not short_word(leaf):
                    continue
                found.short.add(leaf)
            found.at[leaf] = occurrences(source, leaf)
            if source.reads:
                found.read.add(leaf)
    return found


def _held_once(value: str, sources: Sequence[Source]) -> dict[str, list[Pointer]]:
    """The reads holding a text once each, in run order: two pages both saying
    "Operational" (or two commands "active") are two values the answer shows in turn."""
    held: dict[str, list[Pointer]] = {}
    for source in sources:
        if source.reads:
            for leaf, paths in source.paths.items():
                if len(paths) == 1 and leaf != value and leaf in value:
                    held.setdefault(leaf, []).append(Pointer(source.step, paths[0]))
    return held


def _take(value: str, found: _Found, kind: Kind) -> list[tuple[int, int, str]]:
    """Where each found string stands in `value`, as (start, end, string) in order: what
    a read found first, then longer strings first, each place taken once; never a number
    where a numbering mark may stand."""
    marked = bytearray(len(value))  # where a numbering mark may stand
    if kind == "data":
        for mark in marks(value):
            marked[mark.start : mark.end] = b"\x01" * (mark.end - mark.start)
    taken_at = bytearray(len(value))
    taken: list[tuple[int, int, str]] = []
    for leaf in sorted(found.at, key=lambda s: (s not in found.read, -len(s), s)):
        number = leaf.strip().isdecimal()
        start = value.find(leaf)
        while start != -1:
            end = start + len(leaf)
            if (
                bounded(value, start, end)
                and taken_at.find(1, start, end) == -1
                and not (number and marked.find(1, start, end) != -1)
            ):
                taken_at[start:end] = b"\x01" * (end - start)
                taken.append((start, end, leaf))
            start = value.find(leaf, start + 1)
    taken.sort()
    return taken


def _assemble(
    value: str,
    taken: Sequence[tuple[int, int, str]],
    found: _Found,
    held: dict[str, list[Pointer]],
) -> Template:
    """The template: literal text between the taken places, a pointer at each."""
    parts: list[str | Pointer] = []
    open_parts: list[tuple[int, tuple[Pointer, ...]]] = []
    opened: dict[str, bool] = {}
    # A text the answer shows as often as that many reads hold it: the n-th place shows
    # the n-th read's (not the latest read's every time, which would drop the others).
    times = Counter(leaf for _, _, leaf in taken)
    in_turn = {
        leaf: iter(held[leaf])
        for leaf, n in times.items()
        if n >= 2 and leaf not in found.short and len(held.get(leaf, ())) == n
    }
    cursor = 0
    for start, end, leaf in taken:
        if start > cursor:
            parts.append(value[cursor:start])
        if leaf in in_turn:
            parts.append(next(in_turn[leaf]))
            cursor = end
            continue
        pointers = found.at[leaf]
        if leaf not in opened:
            opened[leaf] = leaf in found.short or several_records(pointers)
        if opened[leaf]:
            open_parts.append((len(parts), pointers))
        parts.append(pointers[0])
        cursor = end
    if cursor < len(value):
        parts.append(value[cursor:])
    return Template(tuple(parts), tuple(open_parts))
