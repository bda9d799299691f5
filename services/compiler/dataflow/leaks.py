"""Content that leaks into a value beside its references: the page's data written as
literal text, which a replay would repeat whatever the page says.

In the answer (or any data value), the text around the references is the run's own
words, unless it holds a word only a read found, a short word an output holds as a value
("OK"), or a number that neither numbers a line ("1. ") nor is the task's count ("Top
3"): then the small model writes the text again (`leaked_content`). In a URL or command,
a name with a digit a read printed inside a longer text (a backup's file name in `ls`, a
version on a page) was copied from there (`taken_from_text`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from services.compiler.dataflow.prompt import PROMPT_URL, numbers
from services.compiler.dataflow.sources import (
    Context,
    Pointer,
    Record,
    Source,
    Template,
    item_index,
    record_of,
)
from services.compiler.dataflow.text import DENSE, TOKEN, Mark, marks

# Where a reference stands in a template's text (`_text`).
_PLACE = "\ufffc"
# Where a clause of an answer starts or ends: a line, a label's colon, a table's cell, a
# sentence.
_CLAUSE = re.compile(r"[\n:;|=]|[.!?](?=\s)")
# Where a URL or a command splits into the names it is made of: "/backups/b-01.tar.gz"
# gives "backups" and "b-01.tar.gz".
_NAME_SPLIT = re.compile(r"[\s'\"`/\\?&=#,;:()<>|\[\]{}*]+")


def leaked_content(
    template: Template, sources: Sequence[Source], ctx: Context
) -> tuple[str, tuple[int, ...]] | None:
    """Does the literal text of a template still carry data? A word that the task prompt
    does not have but an earlier read found on the page, a short word an output holds
    as a value ("OK": `find_template` made those it could references), or a number that
    does not number a line ("1. ") and is neither the prompt's ("top three") nor the
    count of the references ("Top 3" before three), means the text is more than its
    references. A number an output holds as a whole value is data wherever else it
    appears ("first 3", "127.0.0.1"): "(3 left)" is that item's stock; only the task's
    count in the answer's own words ("Top 3 headlines:") is not, unless an item the
    answer reads holds it. Returns why, and every step whose output holds such a word or
    number: the small model must see them to write the text again (a number from
    nowhere, a count or a sum, adds none)."""
    literal = _literal(template, sources)
    allowed = _allowed(template, ctx)
    flagged: dict[str, set[int]] = {}
    for match in TOKEN.finditer(literal):
        token = match.group().casefold()
        if token not in flagged:
            found = _data_in(token, match.span(), literal, sources, allowed)
            if found is not None:
                flagged[token] = found
    if not flagged:
        return None
    token = min(flagged)
    found_in = sorted(flagged[token])
    where = f"from the content of step {found_in[-1]}" if found_in else "from no reference"
    what = f"the number {token}" if token.isdecimal() else repr(token)
    why = f"the text has {what} {where}"
    return why, tuple(sorted({step for steps in flagged.values() for step in steps}))


@dataclass(frozen=True)
class _Allowed:
    """What the text around a template's references may hold without carrying data."""

    tokens: set[str]  # the words of the prompt and of the constant inputs
    counts: set[int]  # the prompt's numbers, and how many references the template has
    stated: set[int]  # the same, without the numbers in the prompt's URLs
    read: set[Record]  # the records the template's references read


def _allowed(template: Template, ctx: Context) -> _Allowed:
    opened = {i for i, _ in template.open}
    anchored = {
        record_of(p)
        for i, p in enumerate(template.parts)
        if isinstance(p, Pointer) and i not in opened
    }
    refs = {len(template.pointers), len(anchored)}
    shared = {id(pointers): pointers for _, pointers in template.open}
    read = anchored | {record_of(p) for pointers in shared.values() for p in pointers}
    return _Allowed(
        tokens=ctx.allowed_tokens,
        counts=numbers(ctx.prompt) | refs,
        stated=numbers(PROMPT_URL.sub(" ", ctx.prompt)) | refs,
        read=read,
    )


def _data_in(
    token: str,
    span: tuple[int, int],
    literal: str,
    sources: Sequence[Source],
    allowed: _Allowed,
) -> set[int] | None:
    """The steps whose output holds the word or number `token` standing in the text at
    `span` (empty only for a number from nowhere), or None when it is no data."""
    if token.isdecimal():
        return _number_found(token, span, literal, sources, allowed)
    if len(token) < 3 and not DENSE.search(token):
        found = {s.step for s in sources if token in s.shorts or token in s.said}
        return found or None  # "is", "of": the model's own phrasing
    if token in allowed.tokens:
        return None
    # A word the task does not have is the model's own phrasing unless a read found it.
    return {s.step for s in sources if s.reads and token in s.tokens} or None


def _number_found(
    token: str,
    span: tuple[int, int],
    literal: str,
    sources: Sequence[Source],
    allowed: _Allowed,
) -> set[int] | None:
    """The steps whose output holds the number `token` standing in the text at `span`
    (empty: a number from nowhere), or None when it is no data: the prompt's or the
    references' count that no output holds, or the task's count in the answer's own
    words that no item the template reads holds."""
    held = [s.step for s in sources if token in s.numbers]
    count = int(token) if len(token) < 7 else None
    fixed = token in allowed.tokens or count in allowed.counts
    if (
        held
        and fixed
        and count in allowed.stated
        and _own_words(literal, *span)
        and not _read_value(token, sources, allowed.read)
    ):
        held = []  # the task's count in the answer's words, not a value
    if fixed and not held:
        return None
    return {*held, *(s.step for s in sources if s.reads and token in s.tokens)}


def _read_value(token: str, sources: Sequence[Source], read: set[Record]) -> bool:
    """Does a record the template reads hold `token` as a value (or is it unclear)?"""
    holders = [
        Pointer(s.step, path)
        for s in sources
        if token in s.numbers
        for leaf, paths in s.paths.items()
        if leaf.strip() == token
        for path in paths
    ]
    return not holders or any(record_of(p) in read for p in holders)


def _literal(template: Template, sources: Sequence[Source]) -> str:
    """The template's text with `_PLACE` where each reference stands and the marks that
    number its lines blanked out."""
    text, at = _text(template)
    form, cursor = [], 0
    for mark in _numbering(text, at, template, sources):
        form += [text[cursor : mark.start], " " * (mark.end - mark.start)]
        cursor = mark.end
    form.append(text[cursor:])
    return "".join(form)


def _text(template: Template) -> tuple[str, dict[int, int]]:
    """The template's text with `_PLACE` where each reference stands, and which part
    stands at each `_PLACE`."""
    out: list[str] = []
    at: dict[int, int] = {}
    size = 0
    for i, part in enumerate(template.parts):
        if isinstance(part, Pointer):
            at[size] = i
            part = _PLACE
        out.append(part)
        size += len(part)
    return "".join(out), at


def _numbering(
    text: str, at: Mapping[int, int], template: Template, sources: Sequence[Source]
) -> list[Mark]:
    """The marks (`text.marks`) that number the answer's lines or items rather than
    state a value: the lines of a numbered list; else a mark whose number no output
    holds (as a value or in its text), or that a reference into the list item it numbers
    follows ("2) " before the second item). "acme/rocket: 1. acme/boots: 2." numbers
    nothing: its 1 is no mark of acme/boots, which is the second item."""
    opened = dict(template.open)
    found = marks(text)
    numbering: list[Mark] = []
    for n, mark in enumerate(found):
        token = str(mark.number)
        held = any(token in s.numbers or (s.reads and token in s.tokens) for s in sources)
        if mark.listed or not held:
            numbering.append(mark)
            continue
        stop = text.find("\n", mark.end)
        stop = len(text) if stop == -1 else stop
        if n + 1 < len(found):
            stop = min(stop, found[n + 1].start)
        place = text.find(_PLACE, mark.end, stop)
        if place == -1:
            continue
        part = at[place]
        pointers = opened.get(part) or (template.parts[part],)
        if any(
            item_index(record_of(p)) == mark.number - 1 for p in pointers if isinstance(p, Pointer)
        ):
            numbering.append(mark)
    return numbering


def _own_words(text: str, start: int, end: int) -> bool:
    """Is the number at text[start:end] in the answer's own words ("Top 3 headlines:"),
    not where a value stands: in a clause with a reference, or after a label or in a
    cell ("issues: 3", "| 3 |")?"""
    left = max((m.end() for m in _CLAUSE.finditer(text, 0, start)), default=0)
    right_match = _CLAUSE.search(text, end)
    right = right_match.start() if right_match else len(text)
    clause = text[left:start] + text[end:right]
    opener = text[left - 1] if left else "\n"
    return _PLACE not in clause and opener not in ":|=" and any(ch.isalpha() for ch in clause)


def taken_from_text(
    value: str, sources: Sequence[Source], ctx: Context
) -> tuple[str, tuple[int, ...]] | None:
    """A URL or command that holds a name a read printed inside a longer text (a line
    of `ls`, a version in a page), which no rule can take out of it: the run copied it
    from there, and tomorrow's text names another (the newest backup, the latest
    release). Only a name with a digit, 4+ characters long (a date, a version, an id;
    a bare number of 5+ digits, not a year), that neither the task prompt nor a
    constant input holds: the site's own address or a plain word a page also shows
    ("about") stays a constant."""
    known = [ctx.prompt.casefold(), *(c.casefold() for c in ctx.constants)]
    for token in _NAME_SPLIT.split(value):
        token = token.strip(".-")
        if (
            len(token) < 4
            or not any(ch.isdigit() for ch in token)
            or (token.isdecimal() and len(token) < 5)  # a year, a page number
            or any(token.casefold() in text for text in known)
        ):
            continue
        bounded = re.compile(rf"(?<![\w.-]){re.escape(token)}(?![\w-]|\.\w)")
        steps = tuple(
            s.step for s in sources if s.reads and any(bounded.search(leaf) for _, leaf in s.leaves)
        )
        if steps:
            return token, steps
    return None
