"""Where each value a run used came from: the data-flow half of the compiler.

For a string in a step's input (or the run's answer) the question is what produced it:
  constant   the task prompt, the model's own earlier input, or a stable choice of how
             (a selector, a URL, a UI label): replayed as recorded;
  template   an earlier step's output, found by exact string match against list items
             and object fields (or embedded in a longer string: a relative href behind a
             constant origin, extracted headlines inside an answer): becomes references;
             text several items hold ("Operational"), or a short word an item holds
             ("OK"), reads the item its neighbouring references read ("Web app:
             Operational"), else it is a judgement (`bind`);
  judgement  content that changes between runs, picked or rewritten in a way no rule
             expresses: the small model decides again on replay.

What the model wrote before a call (`model_text`, thinking) is never consulted: "Let me
open the page" is not reasoning about data. The run's answer is a data value with one
more rule: once the run read content (a page, a file, a command's output), an answer
made of the prompt's words may still be the run's verdict on it ("No service is down."),
and is then a judgement (`answer_provenance`).

Picking items from a list is a rule only when the positions explain themselves: the
first, the last, an ordinal the prompt names, or the first k in order (top-k); a task
prompt that asks for a judgement (cheapest, best, most relevant...) makes every pick a
judgement, and using every item of a list is a rule only when its length is fixed. A
single item picked by judgement stays a template whose pointer goes through a *pick*
(compile.py asks the small model for that item's field); other judgements are redone
whole by the small model.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar
from urllib.parse import urljoin

from services.compiler import urlparts
from services.executor import references
from services.executor.references import Encoding, Path
from services.executor.toolkinds import Kind

# Letters and digits of any script (\w without "_", so snake_case splits into words).
_TOKEN = re.compile(r"[^\W_]+")
# Scripts written without spaces between words, where one or two characters are a word.
_DENSE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
# Those, and the scripts of South-East Asia (Thai, Lao, Myanmar, Khmer): a word there runs
# into its neighbours ("で東京の", "서울의", "อากาศกรุงเทพที่") with no space to bound it.
_UNSPACED = re.compile(
    r"[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"
    r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)
# Short words that state how something is: on a page they are what an answer reports.
_SHORT_STATES = frozenset({"ok", "up", "no"})


def tokens(text: str) -> set[str]:
    """Words of 3+ characters (any length in Chinese, Japanese or Korean) and every
    number, casefolded: what content is made of."""
    return {
        t
        for t in _TOKEN.findall(text.casefold())
        if len(t) >= 3 or t.isdecimal() or _DENSE.search(t)
    }


def words(text: str) -> set[str]:
    """Every word and number, casefolded, short ones too: "no", "up" and "ok" are what a
    verdict is made of."""
    return set(_TOKEN.findall(text.casefold()))


def _short_word(text: str) -> bool:
    """A word too short to stand inside a longer value by itself ("OK", "No", "Up"):
    found there, it may be an item's value all the same."""
    return 0 < len(text) <= 2 and text.isalpha()


# --- sources: earlier outputs a value may come from -------------------------------------


@dataclass(frozen=True)
class Source:
    step: int  # position of the step in the trace
    tool: str
    output: Any
    leaves: tuple[tuple[Path, str], ...]
    tokens: frozenset[str]
    reads: bool  # its output is content: a page, a file, a command's output
    numbers: frozenset[str] = frozenset()  # leaves that are a number and nothing else
    # Every path of each leaf text, indexed once: values are looked up, not rescanned.
    paths: Mapping[str, tuple[Path, ...]] = field(default_factory=dict, compare=False)
    shorts: frozenset[str] = frozenset()  # leaves that are a short word, casefolded
    said: frozenset[str] = frozenset()  # `_SHORT_STATES` the content says, in its text

    @classmethod
    def of(cls, step: int, tool: str, output: Any, *, reads: bool) -> Source:
        leaves = tuple(references.leaves(output))
        found: set[str] = set()
        paths: dict[str, list[Path]] = {}
        for path, leaf in leaves:
            if leaf not in paths:
                found |= tokens(leaf)
                paths[leaf] = []
            paths[leaf].append(path)
        numbers = frozenset(t.strip() for t in paths if t.strip().isdecimal())
        shorts = frozenset(t.strip().casefold() for t in paths if _short_word(t.strip()))
        said = {w for t in paths for w in words(t) & _SHORT_STATES} if reads else set()
        return cls(
            step,
            tool,
            output,
            leaves,
            frozenset(found),
            reads,
            numbers,
            {leaf: tuple(found_at) for leaf, found_at in paths.items()},
            shorts,
            frozenset(said),
        )


@dataclass(frozen=True)
class Pointer:
    """A path into the output of the trace step at position `step`; `encoding`: the
    value stands in a URL's path segment or query and is encoded as it is there."""

    step: int
    path: Path
    encoding: Encoding | None = None


@dataclass(frozen=True)
class Template:
    """A string split into literal text and pointers to earlier outputs. `open` holds the
    parts whose text several items of one list hold ("Operational" is the state of three
    components): (the part's index, a pointer into each of those items); the part's
    pointer is the first until `bind` decides which item it is."""

    parts: tuple[str | Pointer, ...]
    open: tuple[tuple[int, tuple[Pointer, ...]], ...] = ()

    @property
    def exact(self) -> bool:
        return len(self.parts) == 1 and isinstance(self.parts[0], Pointer)

    @property
    def pointers(self) -> list[Pointer]:
        return [p for p in self.parts if isinstance(p, Pointer)]

    @property
    def literal(self) -> str:
        return " ".join(p for p in self.parts if isinstance(p, str))

    def with_pointers(self, rewrite: Mapping[Pointer, Pointer]) -> Template:
        return Template(
            tuple(rewrite.get(p, p) if isinstance(p, Pointer) else p for p in self.parts)
        )


ProvenanceKind = Literal["constant", "template", "judgement"]


@dataclass(frozen=True)
class Provenance:
    kind: ProvenanceKind
    why: str
    template: Template | None = None
    sources: tuple[int, ...] = ()  # trace positions whose outputs the value depends on
    choice: bool = False  # a pointer into a list the prompt's alternatives choose from


@dataclass
class Context:
    """What is constant for the task: its prompt and the model's own constant inputs."""

    prompt: str
    constants: set[str] = field(default_factory=set)
    constant_tokens: set[str] = field(default_factory=set)
    constant_words: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.prompt_tokens = tokens(self.prompt)
        self.prompt_words = words(self.prompt)

    def add_constant(self, value: str) -> None:
        self.constants.add(value)
        self.constant_tokens |= tokens(value)
        self.constant_words |= words(value)

    @property
    def allowed_tokens(self) -> set[str]:
        return self.prompt_tokens | self.constant_tokens

    @property
    def allowed_words(self) -> set[str]:
        return self.prompt_words | self.constant_words


def _bounded(text: str, start: int, end: int) -> bool:
    """The match does not cut a word in two."""
    before = text[start - 1] if start > 0 else ""
    after = text[end] if end < len(text) else ""
    if text[start].isalnum() and before.isalnum():
        return False
    return not (text[end - 1].isalnum() and after.isalnum())


_JOINER = re.compile(r"[.,:/@-]")


def _edge(text: str, at: int, step: int) -> bool:
    """Does a name end at `at` (looking outwards by `step`, -1 to the left, 1 to the right)?
    Not when a word character goes on, nor a joiner and a word character ("127.0.0.1",
    "Jean-Luc"); in a script without spaces, a neighbour bounds nothing ("で東京の")."""
    near = at - 1 if step < 0 else at
    if near < 0 or near >= len(text):
        return True
    if _UNSPACED.match(text[near]):
        return True
    if text[near].isalnum() or text[near] == "_":
        return False
    beyond = near + step
    return not (
        _JOINER.match(text[near])
        and 0 <= beyond < len(text)
        and (text[beyond].isalnum() or text[beyond] == "_")
    )


def _named(text: str, value: str) -> bool:
    """Does `text` name `value` as a whole: not inside a longer word ("Tom" in "bottom")
    nor a dotted or dashed token ("1" in "127.0.0.1", "Jean" in "Jean-Luc")?"""
    if not value or len(value) > len(text):
        return False
    for match in re.finditer(re.escape(value), text, re.IGNORECASE):
        start, end = match.span()
        if (not value[0].isalnum() or _edge(text, start, -1)) and (
            not value[-1].isalnum() or _edge(text, end, 1)
        ):
            return True
    return False


Record = tuple[int, Path]


def _record(pointer: Pointer) -> Record:
    """The record whose field `pointer` reads, so that one item's fields tell its text
    from another item's: the deepest list item around the field (`groups[0].items[1]`,
    not `groups[0]`), a table row for a cell, a string of a list of strings itself, else
    the object holding the field."""
    path = pointer.path
    if path and isinstance(path[-1], int):
        cell = len(path) >= 2 and isinstance(path[-2], int)
        return pointer.step, path[:-1] if cell else path
    deepest = max((i for i, key in enumerate(path) if isinstance(key, int)), default=None)
    return pointer.step, path[: deepest + 1] if deepest is not None else path[:-1]


def _index(record: Record) -> int | None:
    """The record's position in its list, if it is a list item."""
    path = record[1]
    return path[-1] if path and isinstance(path[-1], int) else None


def _occurrences(source: Source, leaf: str) -> tuple[Pointer, ...]:
    return tuple(Pointer(source.step, path) for path in source.paths.get(leaf, ()))


def _several_records(pointers: Sequence[Pointer]) -> bool:
    """Do these pointers go into two or more records (so which one is meant matters)?"""
    return len({_record(p) for p in pointers}) > 1


def find_exact(value: str, sources: Sequence[Source], ctx: Context) -> Template | None:
    """The latest earlier output holding exactly `value`. A short value ("1", "OK") is
    too common to say where it came from: it is not matched. Where several records hold
    it, the template is open (`Template.open`)."""
    if value in ctx.constants or not _embeddable(value, "data"):
        return None
    for source in reversed(sources):
        found = _occurrences(source, value)
        if found:
            return Template((found[0],), ((0, found),) if _several_records(found) else ())
    return None


def _embeddable(leaf: str, kind: Kind) -> bool:
    """Can this output string stand inside a longer value? Short words would match by
    accident: in text, 3+ characters (2 with a digit); in a URL or command, only
    path- or URL-like strings or long ones."""
    if not any(ch.isalnum() for ch in leaf):
        return False
    if kind == "data":
        return len(leaf) >= 3 or (len(leaf) == 2 and any(ch.isdigit() for ch in leaf))
    return len(leaf) >= 8 or (len(leaf) >= 3 and ("/" in leaf or "?" in leaf))


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
    found: dict[str, tuple[Pointer, ...]] = {}  # every occurrence, in the latest output
    read: set[str] = set()
    short: set[str] = set()
    # The reads holding a text once each, in run order: two pages both saying
    # "Operational" (or two commands "active") are two values the answer shows in turn.
    held: dict[str, list[Pointer]] = {}
    for source in sources:
        if source.reads:
            for leaf, paths in source.paths.items():
                if len(paths) == 1 and leaf != value and leaf in value:
                    held.setdefault(leaf, []).append(Pointer(source.step, paths[0]))
    for source in reversed(sources):
        for leaf in source.paths:
            if leaf in found or leaf == value or leaf in ctx.constants or leaf not in value:
                continue
            if not _embeddable(leaf, kind):
                if kind != "data" or not _short_word(leaf):
                    continue
                short.add(leaf)
            found[leaf] = _occurrences(source, leaf)
            if source.reads:
                read.add(leaf)
    if not found:
        return None
    marked = bytearray(len(value))  # where a numbering mark may stand
    if kind == "data":
        for mark in _marks(value):
            marked[mark.start : mark.end] = b"\x01" * (mark.end - mark.start)
    taken_at = bytearray(len(value))
    taken: list[tuple[int, int, str]] = []
    for leaf in sorted(found, key=lambda s: (s not in read, -len(s), s)):
        number = leaf.strip().isdecimal()
        start = value.find(leaf)
        while start != -1:
            end = start + len(leaf)
            if (
                _bounded(value, start, end)
                and taken_at.find(1, start, end) == -1
                and not (number and marked.find(1, start, end) != -1)
            ):
                taken_at[start:end] = b"\x01" * (end - start)
                taken.append((start, end, leaf))
            start = value.find(leaf, start + 1)
    if not taken:
        return None
    taken.sort()
    parts: list[str | Pointer] = []
    open_parts: list[tuple[int, tuple[Pointer, ...]]] = []
    opened: dict[str, bool] = {}
    # A text the answer shows as often as that many reads hold it: the n-th place shows
    # the n-th read's (not the latest read's every time, which would drop the others).
    times = Counter(leaf for _, _, leaf in taken)
    in_turn = {
        leaf: iter(held[leaf])
        for leaf, n in times.items()
        if n >= 2 and leaf not in short and len(held.get(leaf, ())) == n
    }
    cursor = 0
    for start, end, leaf in taken:
        if start > cursor:
            parts.append(value[cursor:start])
        if leaf in in_turn:
            parts.append(next(in_turn[leaf]))
            cursor = end
            continue
        pointers = found[leaf]
        if leaf not in opened:
            opened[leaf] = leaf in short or _several_records(pointers)
        if opened[leaf]:
            open_parts.append((len(parts), pointers))
        parts.append(pointers[0])
        cursor = end
    if cursor < len(value):
        parts.append(value[cursor:])
    return Template(tuple(parts), tuple(open_parts))


def _pointer_text(pointer: Pointer, sources: Sequence[Source]) -> str:
    source = next(s for s in sources if s.step == pointer.step)
    return references.stringify(references.lookup(source.output, pointer.path))


def _reads_as_itself(text: str, kind: urlparts.PartKind) -> bool:
    """A value holding escapes ("item%201", an href) went into the URL already encoded:
    encoding it on replay would send another address ("item%25201")."""
    decoded = urlparts.decode(text, kind)
    return decoded is not None and decoded[0] == text


def url_template(
    value: str, sources: Sequence[Source], ctx: Context, template: Template | None
) -> Template | None:
    """`find_template` for a URL. A reference inside one path segment or query part is
    encoded on replay as the part needs (today's "AT&T #1" must not end the query),
    unless the run's value went in already encoded (an href: `_reads_as_itself`); and
    where the run wrote a value encoded ("q=Acme%20Widget" or "q=Acme+Widget"), which
    plain matching cannot see, the parts' decoded text is matched instead and the
    reference encoded the same way."""
    found = urlparts.parts(value)
    if template is not None:
        rewrite: dict[int, Pointer] = {}
        at = 0
        for i, part in enumerate(template.parts):
            text = part if isinstance(part, str) else _pointer_text(part, sources)
            size = len(text)
            if isinstance(part, Pointer):
                inside = [p for p in found if p.start <= at and at + size <= p.end]
                if inside and _reads_as_itself(text, inside[0].kind):
                    raw = value[inside[0].start : inside[0].end]
                    encoding = urlparts.encoding_of(raw, inside[0].kind)
                    rewrite[i] = replace(part, encoding=encoding)
            at += size
        if not rewrite:
            return template
        parts = tuple(rewrite.get(i, p) for i, p in enumerate(template.parts))
        return replace(template, parts=parts)
    out: list[str | Pointer] = []
    opened: list[tuple[int, tuple[Pointer, ...]]] = []
    cursor = 0
    for part in found:
        raw = value[part.start : part.end]
        decoded = urlparts.decode(raw, part.kind)
        if decoded is None or decoded[0] == raw:
            continue  # written as it reads: plain matching already looked at it
        text, starts = decoded
        local = find_exact(text, sources, ctx) or find_template(text, sources, ctx, "url")
        if local is None:
            continue
        encoding = urlparts.encoding_of(raw, part.kind)
        out.append(value[cursor : part.start])
        at = 0  # in the decoded text
        local_open = dict(local.open)
        for i, piece in enumerate(local.parts):
            if isinstance(piece, str):
                out.append(raw[starts[at] : starts[at + len(piece)]])
                at += len(piece)
                continue
            if i in local_open:
                opened.append((len(out), local_open[i]))
            out.append(replace(piece, encoding=encoding))
            at += len(_pointer_text(piece, sources))
        cursor = part.end
    if not out:
        return None
    out.append(value[cursor:])
    merged: list[str | Pointer] = []
    index: dict[int, int] = {}  # position in `out` -> in `merged`
    for n, piece in enumerate(out):
        if isinstance(piece, str):
            if not piece:
                continue
            if merged and isinstance(merged[-1], str):
                merged[-1] += piece
                continue
        index[n] = len(merged)
        merged.append(piece)
    return Template(tuple(merged), tuple((index[n], ptrs) for n, ptrs in opened))


def _link_like(leaf: str) -> bool:
    return (
        1 < len(leaf) <= 2048
        and not any(ch.isspace() for ch in leaf)
        and ("/" in leaf or leaf.startswith(("?", "#")))
    )


def resolved_link(
    value: str, sources: Sequence[Source], ctx: Context, template: Template | None
) -> Pointer | None:
    """A link a read found that, resolved against a page the run was on, is exactly the
    URL `value` while no reference points at a read: `../s/a` behind a page URL cannot
    be written as text around a reference, but the URL is still that link, so it is
    not a constant (nor the page URL plus leftover text)."""
    if template is not None and any(
        s.reads and s.step == p.step for p in template.pointers for s in sources
    ):
        return None
    bases = {c for c in ctx.constants if "://" in c}
    bases |= {leaf for s in sources if not s.reads for _, leaf in s.leaves if "://" in leaf}
    if not bases:
        return None
    for source in reversed(sources):
        if not source.reads:
            continue
        for path, leaf in source.leaves:
            if (
                _link_like(leaf)
                and leaf not in ctx.constants
                and any(urljoin(base, leaf) == value for base in sorted(bases))
            ):
                return Pointer(source.step, path)
    return None


# A mark that may number a line or a list item ("1. ", "2) ", "#3 "): at the start of a
# line, or after a colon, comma or semicolon ("Deals: 1) Alpha, 2) Beta").
_MARK = re.compile(
    r"(?:^|(?<=[:,;]))([ \t]*)(?:(\d{1,6})[.)](?=\s|$)|(#)(\d{1,6})(?!\w))", re.MULTILINE
)
# Where a reference stands in a template's text (`_text`).
_PLACE = "\ufffc"


@dataclass(frozen=True)
class _Mark:
    start: int
    end: int
    number: int
    listed: bool  # a line of a numbered list of two or more lines


def _marks(text: str) -> list[_Mark]:
    """The marks in `text` that may number its lines or items: each starts a line or an
    item that goes on with content ("3." ending "issues: 3." is a value), and the marks
    of one level (the lines at one indentation, or the items of one line) count 1, 2,
    3... in order (a 1 starts a new list)."""
    runs: dict[tuple[str, str | int], list[list[re.Match[str]]]] = {}
    line = 0
    line_at = 0  # where `line` starts
    for match in _MARK.finditer(text):
        line += text.count("\n", line_at, match.start())
        line_at = match.start()
        end = match.end()
        line_end = text.find("\n", end)
        if not text[end : len(text) if line_end == -1 else line_end].strip():
            continue
        starts_line = match.start() == 0 or text[match.start() - 1] == "\n"
        key = ("line", match.group(1)) if starts_line else ("item", line)
        number = int(match.group(2) or match.group(4))
        level = runs.setdefault(key, [])
        if level and number == len(level[-1]) + 1:
            level[-1].append(match)
        elif number == 1:
            level.append([match])
    marks = [
        _Mark(
            match.start(2) if match.group(2) else match.start(3),
            match.end(),
            int(match.group(2) or match.group(4)),
            where == "line" and len(run) >= 2,
        )
        for (where, _), level in runs.items()
        for run in level
        for match in run
    ]
    return sorted(marks, key=lambda m: m.start)


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
) -> list[_Mark]:
    """The marks (`_marks`) that number the answer's lines or items rather than state a
    value: the lines of a numbered list; else a mark whose number no output holds (as a
    value or in its text), or that a reference into the list item it numbers follows
    ("2) " before the second item). "acme/rocket: 1. acme/boots: 2." numbers nothing:
    its 1 is no mark of acme/boots, which is the second item."""
    opened = dict(template.open)
    marks = _marks(text)
    numbering: list[_Mark] = []
    for n, mark in enumerate(marks):
        token = str(mark.number)
        held = any(token in s.numbers or (s.reads and token in s.tokens) for s in sources)
        if mark.listed or not held:
            numbering.append(mark)
            continue
        stop = text.find("\n", mark.end)
        stop = len(text) if stop == -1 else stop
        if n + 1 < len(marks):
            stop = min(stop, marks[n + 1].start)
        place = text.find(_PLACE, mark.end, stop)
        if place == -1:
            continue
        part = at[place]
        pointers = opened.get(part) or (template.parts[part],)
        if any(_index(_record(p)) == mark.number - 1 for p in pointers if isinstance(p, Pointer)):
            numbering.append(mark)
    return numbering


# Where a clause of an answer starts or ends: a line, a label's colon, a table's cell, a
# sentence.
_CLAUSE = re.compile(r"[\n:;|=]|[.!?](?=\s)")


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
    text, at = _text(template)
    form, cursor = [], 0
    for mark in _numbering(text, at, template, sources):
        form += [text[cursor : mark.start], " " * (mark.end - mark.start)]
        cursor = mark.end
    form.append(text[cursor:])
    literal = "".join(form)
    allowed = ctx.allowed_tokens
    opened = {i for i, _ in template.open}
    anchored = {
        _record(p)
        for i, p in enumerate(template.parts)
        if isinstance(p, Pointer) and i not in opened
    }
    counts = numbers(ctx.prompt) | {len(template.pointers), len(anchored)}
    stated = numbers(_PROMPT_URL.sub(" ", ctx.prompt)) | {len(template.pointers), len(anchored)}
    read: set[Record] = set()

    def reads_it(token: str) -> bool:
        """Does a record the template reads hold `token` as a value (or is it unclear)?"""
        if not read:
            read.update(anchored)
            shared = {id(pointers): pointers for _, pointers in template.open}
            read.update(_record(p) for pointers in shared.values() for p in pointers)
        holders = [
            Pointer(s.step, path)
            for s in sources
            if token in s.numbers
            for leaf, paths in s.paths.items()
            if leaf.strip() == token
            for path in paths
        ]
        return not holders or any(_record(p) in read for p in holders)

    flagged: dict[str, set[int]] = {}
    for match in _TOKEN.finditer(literal):
        token = match.group().casefold()
        if token in flagged:
            continue
        if token.isdecimal():
            held = [s.step for s in sources if token in s.numbers]
            count = int(token) if len(token) < 7 else None
            fixed = token in allowed or count in counts
            if (
                held
                and fixed
                and count in stated
                and _own_words(literal, *match.span())
                and not reads_it(token)
            ):
                held = []  # the task's count in the answer's words, not a value
            if fixed and not held:
                continue
            found = {*held, *(s.step for s in sources if s.reads and token in s.tokens)}
        elif len(token) < 3 and not _DENSE.search(token):
            found = {s.step for s in sources if token in s.shorts or token in s.said}
            if not found:
                continue  # "is", "of": the model's own phrasing
        else:
            found = (
                set()
                if token in allowed
                else {s.step for s in sources if s.reads and token in s.tokens}
            )
            if not found:
                continue  # a word of the task's or of the model's own phrasing
        flagged[token] = found
    if not flagged:
        return None
    token = min(flagged)
    found = sorted(flagged[token])
    where = f"from the content of step {found[-1]}" if found else "from no reference"
    number = token.isdecimal()
    what = f"the number {token}" if number else repr(token)
    why = f"the text has {what} {where}"
    return why, tuple(sorted({step for steps in flagged.values() for step in steps}))


# --- alternatives the prompt names ------------------------------------------------------

# A sentence ends at . ; ! ? followed by a space (not inside a URL) or at a line break.
_SENTENCE = re.compile(r"(?:[^.;!?\n]|[.;!?](?=\S))+")
_PROMPT_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_CONDITION = re.compile(r"\b(?:if|when|whenever|unless|whether)\b", re.IGNORECASE)
_OTHERWISE = re.compile(r"\b(?:otherwise|else|if not)\b", re.IGNORECASE)
# A branch is the value right beside its condition: "yes if ...", "otherwise no",
# "else report ALERT" (at most two words between), not a search term further off.
_BRANCH_BEFORE = re.compile(r"^\W*(?:\w+\W+){0,2}?(?:if|when|whenever|unless)\b", re.I)
_BRANCH_AFTER = re.compile(r"\b(?:otherwise|else|if not)\W+(?:\w+\W+){0,2}$", re.I)
_WORD = r"[\w$\u00a3\u20ac%.+-]+"
_OPTION_AFTER = re.compile(
    rf"^(?P<sep>\s*,\s*(?:(?:and|or)\s+)?|\s+(?:and|or|nor)\s+|\s*/\s*)"
    rf"[\"'\u2018\u201c]?(?P<words>{_WORD}(?:\s+{_WORD}){{0,2}})",
    re.IGNORECASE,
)
_OPTION_BEFORE = re.compile(
    rf"(?P<words>{_WORD}(?:\s+{_WORD}){{0,2}})[\"'\u2019\u201d]?"
    rf"(?P<sep>\s*,\s*(?:(?:and|or)\s+)?|\s+(?:and|or|nor)\s+|\s*/\s*)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Alternatives:
    """How the prompt offers `value` as one option among others, in one sentence."""

    either: tuple[str, ...] = ()  # options joined to it by "or" / "/": a choice by itself
    listed: tuple[str, ...] = ()  # options joined by commas or "and": a choice only
    #                               when a judgement word governs the list ("the cheapest")
    conditional: bool = False  # "yes if ..., otherwise no": a verdict between branches
    judgement: str | None = None  # a judgement word in the same sentence


def _phrases(words: str, *, from_end: bool) -> list[str]:
    """The 1-, 2- and 3-word phrases next to a separator: "cost of Gadget" may be the
    option "Gadget"."""
    parts = words.split()
    picks = [parts[-n:] if from_end else parts[:n] for n in range(1, len(parts) + 1)]
    return [" ".join(p).strip(".\"'") for p in picks]


def alternatives(value: str, prompt: str) -> Alternatives:
    """Every sentence of the prompt that names `value` (as whole words): the options
    written next to it, and whether a condition with an other branch or a judgement word
    governs it."""
    needle = re.compile(rf"(?<!\w){re.escape(value.strip())}(?!\w)", re.IGNORECASE)
    either: list[str] = []
    listed: list[str] = []
    conditional = False
    judgement: str | None = None
    for sentence in _SENTENCE.findall(_PROMPT_URL.sub("<url>", prompt)):
        spans = [m.span() for m in needle.finditer(sentence)]
        if not spans:
            continue
        branches = _CONDITION.search(sentence) and _OTHERWISE.search(sentence)
        judgement = judgement or judgement_word(sentence)
        for start, end in spans:
            if branches and (
                _BRANCH_BEFORE.match(sentence[end:]) or _BRANCH_AFTER.search(sentence[:start])
            ):
                conditional = True
            after = _OPTION_AFTER.match(sentence[end:].lstrip("\"'\u2019\u201d"))
            before = _OPTION_BEFORE.search(sentence[:start].rstrip("\"'\u2018\u201c"))
            for match, from_end in ((after, False), (before, True)):
                if match is None:
                    continue
                joined = "or" in match["sep"].lower() or "/" in match["sep"]
                options = _phrases(match["words"], from_end=from_end)
                (either if joined else listed).extend(options)
    return Alternatives(tuple(either), tuple(listed), conditional, judgement)


def _mentions(text: str, value: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text, re.IGNORECASE) is not None


def _reads_holding(value: str, sources: Sequence[Source]) -> tuple[int, ...]:
    """The reads whose content names `value` (whole words, any case)."""
    return tuple(
        s.step for s in sources if s.reads and any(_mentions(leaf, value) for _, leaf in s.leaves)
    )


def choice(
    value: str, kind: Kind, sources: Sequence[Source], ctx: Context, context_step: int | None
) -> str | None:
    """Why a value the prompt names is a decision the page made, or None when it is a
    fixed value of the task. The prompt must offer it as one option among others: joined
    by "or" to another, a branch of a condition with an else ("yes if ..., otherwise
    no"), or one of a listed few a judgement word chooses from ("of Widget, Gadget and
    Gizmo, the cheapest"). And the run must have read something to decide from: a typed
    or answered verdict ("no", "ALERT") needs only an earlier read; a label to click is
    chosen among what the page showed, so the page must show it and a listed rival too.
    """
    if kind not in ("label", "data"):
        return None  # a URL or a command the prompt writes stays as written
    alts = alternatives(value, ctx.prompt)
    holding = _reads_holding(value, sources)
    if kind == "label" and not holding:
        return None
    if kind == "data" and not holding and context_step is None:
        return None

    def shown(option: str) -> bool:
        return (
            bool(option)
            and option.casefold() != value.casefold()
            and (kind == "data" or bool(_reads_holding(option, sources)))
        )

    if alts.conditional:
        return "one branch of a condition the task sets, decided by the page"
    if any(shown(o) for o in alts.either):
        return "one of the alternatives the task names, decided by the page"
    listed_rivals = [o for o in alts.listed if o.casefold() != value.casefold()]
    if (
        alts.judgement is not None
        and holding
        and any(_reads_holding(o, sources) for o in listed_rivals)
    ):
        return f"the {alts.judgement!r} of the options the task names, decided by the page"
    return None


def provenance(
    value: str,
    kind: Kind,
    sources: Sequence[Source],
    ctx: Context,
    *,
    context_step: int | None = None,
) -> Provenance:
    """Classify one string input value (or the answer, as kind "data").
    `context_step` is the read the small model would look at when the value came from
    nowhere. A template may be open (text several list items hold): `bind` the values of
    one input (or the answer) together before use."""
    if kind == "structure":
        return Provenance("constant", "how, not what")
    if not value.strip():
        return Provenance("constant", "blank")
    if value in ctx.constants:
        return Provenance("constant", "repeats an earlier constant input")
    decided: str | None = None
    if _named(ctx.prompt, value):
        # Named by the prompt is fixed, unless the prompt names it as one option the
        # page decides between: then the data flow below finds where it came from.
        decided = choice(value, kind, sources, ctx, context_step)
        if decided is None:
            return Provenance("constant", "from the task prompt")
    exact = find_exact(value, sources, ctx)
    if exact is not None:
        step = exact.pointers[0].step
        return Provenance(
            "template",
            f"the output of step {step}",
            exact,
            (step,),
            choice=decided is not None,
        )
    template = find_template(value, sources, ctx, kind)
    if kind == "url" or (kind == "generic" and urlparts.looks_like_url(value)):
        template = url_template(value, sources, ctx, template)
    if kind in ("url", "local", "generic"):
        link = resolved_link(value, sources, ctx, template)
        if link is not None:
            return Provenance(
                "judgement",
                f"the link {references.format_path(link.path)} found by step {link.step}",
                sources=(link.step,),
            )
    if template is not None and decided is None:
        steps = tuple(sorted({p.step for p in template.pointers}))
        if kind == "data":
            leak = leaked_content(template, sources, ctx)
            if leak is not None:
                why, leak_steps = leak
                return Provenance("judgement", why, sources=tuple(sorted({*steps, *leak_steps})))
        return Provenance("template", "built from earlier outputs", template, steps)
    if decided is not None:
        holding = _reads_holding(value, sources)
        steps = holding or ((context_step,) if context_step is not None else ())
        return Provenance("judgement", decided, sources=steps)
    if kind != "data":
        taken = _taken_from_text(value, sources, ctx)
        if taken is not None:
            token, steps = taken
            why = f"{token!r} is taken from the text of step {steps[-1]}"
            return Provenance("judgement", why, sources=steps)
        return Provenance("constant", "not found in any earlier output")
    words = tokens(value) - ctx.allowed_tokens
    if not words:
        return Provenance("constant", "made of the task prompt's words")
    if len(value) >= 3:
        containing = tuple(s.step for s in sources if any(value in leaf for _, leaf in s.leaves))
        if containing:
            return Provenance(
                "judgement", f"taken from the text of step {containing[-1]}", sources=containing
            )
    overlapping = tuple(s.step for s in sources if s.reads and words & s.tokens)
    if overlapping:
        return Provenance(
            "judgement",
            f"derived from the content of step {overlapping[-1]}",
            sources=overlapping,
        )
    steps = (context_step,) if context_step is not None else ()
    return Provenance(
        "judgement", "appears in no earlier output nor in the task prompt", sources=steps
    )


# Where a URL or a command splits into the names it is made of: "/backups/b-01.tar.gz"
# gives "backups" and "b-01.tar.gz".
_NAME_SPLIT = re.compile(r"[\s'\"`/\\?&=#,;:()<>|\[\]{}*]+")


def _taken_from_text(
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


# --- text several list items hold: which item a reference reads ----------------------


_Key = TypeVar("_Key", bound=Hashable)


# A line that starts an item of its own: a bullet or a number ("- ", "2. ").
_BULLET = re.compile(r"(?:[-*+\u2022]|\d+[.)]|#\d+)(?:\s|$)")


def _places(template: Template) -> list[tuple[int, int, int]]:
    """Where each part starts: (clause, line, block) of the value, counted from 0. A
    clause ends at a comma, a semicolon, a table's bar, a sentence's end or a line's; a
    block (one item's lines: "Name: API\nState: Operational") ends at a blank line or
    before a line that starts with a bullet or a number."""
    clause = line = block = 0
    content = False  # the line so far holds something
    blank_before = False  # the line before this one was blank
    starting = False  # no content on this line yet, after a line break
    places: list[tuple[int, int, int]] = []
    for part in template.parts:
        if isinstance(part, Pointer):
            if starting:
                block += blank_before
                starting = False
            places.append((clause, line, block))
            content = True
            continue
        places.append((clause, line, block))
        for k, ch in enumerate(part):
            if ch == "\n":
                line += 1
                clause += 1
                blank_before, content, starting = not content, False, True
            elif not ch.isspace():
                if starting:
                    block += blank_before or _BULLET.match(part, k) is not None
                    starting = False
                content = True
                if ch in ",;|" or (ch in ".!?" and part[k + 1 : k + 2].isspace()):
                    clause += 1
    return places


def bind(values: Mapping[_Key, Provenance]) -> dict[_Key, Provenance]:
    """Decide, for every open part (text several records hold: "Operational" is the
    state of items 0, 1 and 3; a short word such as "OK"), which record it reads: the
    record of the nearest reference before it in its clause ("API (Operational), Web app
    (Operational)"), else the one a reference reads in the narrowest of these with one
    holding the text, and whose references account for all its open parts: its line,
    its block ("Name: Web app\nState: Operational"), the whole value; else another value
    of the same input (a form's other field). When none does, or two records there hold
    it, the value is a judgement: the small model reads it again rather than every
    replay reading the first record. `values` are the values of one step's input, or the
    answer alone."""
    anchors: dict[tuple[object, ...], set[Record]] = {}  # by scope: (value, kind, which)
    before: dict[tuple[_Key, int], list[tuple[int, Record]]] = {}  # by clause, in order
    inside: dict[tuple[object, ...], list[int]] = {}  # the open parts' texts, by scope
    places: dict[_Key, list[tuple[int, int, int]]] = {}
    holders: dict[int, dict[Record, Pointer]] = {}  # by id of an open part's pointers
    fields: dict[int, dict[Record, int]] = {}  # how many fields of a record hold it
    for key, prov in values.items():
        if prov.template is None:
            continue
        places[key] = _places(prov.template)
        opened = dict(prov.template.open)
        for i, part in enumerate(prov.template.parts):
            if not isinstance(part, Pointer):
                continue
            clause, line, block = places[key][i]
            scopes = ((key, "line", line), (key, "block", block), (key,))
            pointers = opened.get(i)
            if pointers is None:
                record = _record(part)
                before.setdefault((key, clause), []).append((i, record))
                for scope in scopes:
                    anchors.setdefault(scope, set()).add(record)
                continue
            for scope in scopes:
                inside.setdefault(scope, []).append(id(pointers))
            if id(pointers) not in holders:
                held: dict[Record, Pointer] = {}
                count: dict[Record, int] = {}
                for pointer in pointers:
                    record = _record(pointer)
                    held.setdefault(record, pointer)
                    count[record] = count.get(record, 0) + 1
                holders[id(pointers)], fields[id(pointers)] = held, count
    accounted: dict[tuple[object, ...], bool] = {}

    def accounts(scope: tuple[object, ...]) -> bool:
        """Do the records the scope's references read hold every open part in it, each
        text as many times as it appears? "Up - Gamma, Up - Up" has one "Up" of Gamma's
        and two of an item no reference reads: which is which, none can tell."""
        if scope not in accounted:
            near = anchors.get(scope, set())
            needed: dict[int, int] = {}
            for text in inside.get(scope, ()):
                needed[text] = needed.get(text, 0) + 1
            accounted[scope] = all(
                sum(fields[text].get(r, 0) for r in near) >= n for text, n in needed.items()
            )
        return accounted[scope]

    def choose(key: _Key, i: int, held: Mapping[Record, Pointer]) -> list[Record]:
        clause, line, block = places[key][i]
        earlier = [r for n, r in before.get((key, clause), []) if n < i]
        if earlier and earlier[-1] in held:
            return [earlier[-1]]
        for scope in ((key, "line", line), (key, "block", block), (key,)):
            hits = [r for r in anchors.get(scope, ()) if r in held]
            if hits and accounts(scope):
                return hits
        return sorted(
            {r for k in places if k != key for r in anchors.get((k,), ()) if r in held}, key=repr
        )

    bound: dict[_Key, Provenance] = {}
    for key, prov in values.items():
        template = prov.template
        if template is None or not template.open:
            bound[key] = prov
            continue
        parts = list(template.parts)
        for i, pointers in template.open:
            held = holders[id(pointers)]
            hits = choose(key, i, held)
            if len(hits) != 1:
                paths = ", ".join(references.format_path(r[1]) or "the output" for r in held)
                holds, whose = ("hold", "which one") if len(held) > 1 else ("holds", "whether")
                why = (
                    f"{paths} in the output of step {pointers[0].step} {holds} the text, and "
                    f"no reference beside it says {whose} it is the one read"
                )
                bound[key] = Provenance("judgement", why, sources=prov.sources)
                break
            was = template.parts[i]
            # The item is decided; how the place it stands in encodes it is not.
            encoding = was.encoding if isinstance(was, Pointer) else None
            parts[i] = replace(held[hits[0]], encoding=encoding)
        else:
            bound[key] = replace(prov, template=Template(tuple(parts)))
    return bound


# --- the answer: a verdict on what the run read ----------------------------------------

# A task that asks for a verdict on what the run reads: a condition ("alert me if any
# service is down", "whether"), a check, or a question.
_ASKS_VERDICT = re.compile(
    r"\?|\b(?:if|whether|unless|when|whenever|alert|notify|warn|check|verify|monitor|ensure|"
    r"make sure)\b",
    re.IGNORECASE,
)
# Text the task quotes is a value to use, not a question to the run: the message to type
# ("Is the pool open on Sunday?"), the command to run (`df -h /`).
_QUOTED = re.compile(r"`[^`]*`|\"[^\"]*\"|\u201c[^\u201d]*\u201d")
# Words that state a verdict: the polarity and the state of what was checked.
_VERDICT_WORDS = frozenset(
    {
        *("yes", "no", "not", "none", "nothing", "nobody", "never", "neither", "nor"),
        *("isn", "aren", "wasn", "weren", "doesn", "don", "didn", "hasn", "haven", "cannot"),
        *("ok", "okay", "fine", "good", "bad", "all", "any", "every", "some", "still"),
        *("up", "down", "open", "closed", "above", "below", "over", "under", "within"),
        *("true", "false", "pass", "passed", "passing", "fail", "failed", "failing"),
        *("operational", "available", "unavailable", "online", "offline", "running"),
        *("stopped", "healthy", "unhealthy", "degraded", "outage", "outages", "normal"),
        *("alert", "warning", "error", "errors", "problem", "problems", "issue", "issues"),
    }
)


def asks_verdict(prompt: str) -> str | None:
    """The word by which the task asks for a verdict on what the run reads, or None."""
    match = _ASKS_VERDICT.search(_QUOTED.sub(" ", _PROMPT_URL.sub(" ", prompt)))
    return match.group(0).lower() if match else None


_WEEKDAYS = frozenset(
    {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)


def answer_provenance(
    value: str, sources: Sequence[Source], ctx: Context, content: Sequence[int]
) -> Provenance:
    """Classify the run's answer: a data value (`provenance`), except that once the run
    read content (`content`: the positions of steps whose output is content), an answer
    that looks fixed may be the run's verdict on it. "No service is down." is made of the
    prompt's words ("alert me if any service is down"), yet the page decided it: replayed
    as recorded, every replay would say all is well. So, with content read, an answer is
    constant only when the task asks for no verdict (a condition, a check, a question)
    and every word of it, the short ones too ("no", "up", "ok"), is the task's; a
    template whose own text states a verdict ("Nothing is down: {{...}}") is written
    again; and a verdict is written again from everything the run read (a check of two
    pages is about both)."""
    context_step = content[-1] if content else None
    prov = provenance(value, "data", sources, ctx, context_step=context_step)
    if not content:
        return prov  # nothing read: a fixed confirmation stays fixed
    asked = asks_verdict(ctx.prompt)
    if prov.kind == "constant" and value.strip():
        extra = sorted(words(value) - ctx.allowed_words)
        if asked is not None:
            why = f"a verdict on what the run read (the task asks {asked!r})"
        elif extra:
            why = f"the run's own words ({extra[0]!r}) on what it read"
        else:
            return prov
        return Provenance("judgement", why, sources=tuple(content))
    if prov.kind == "template" and prov.template is not None:
        # "Monday, {{date}}: ...": the weekday the run wrote itself is tomorrow's wrong.
        dated = sorted((words(prov.template.literal) & _WEEKDAYS) - ctx.allowed_words)
        if dated:
            why = f"its text names a weekday ({dated[0]!r}) that changes with the date"
            return Provenance("judgement", why, sources=tuple(sorted({*prov.sources, *content})))
    if asked is None:
        return prov
    if prov.kind == "template" and prov.template is not None:
        said = sorted(words(prov.template.literal) & _VERDICT_WORDS)
        if not said:
            return prov
        why = f"its text states a verdict ({said[0]!r}) on what the run read"
        return Provenance("judgement", why, sources=tuple(sorted({*prov.sources, *content})))
    if prov.kind == "judgement":
        return replace(prov, sources=tuple(sorted({*prov.sources, *content})))
    return prov


# --- picking items from lists -----------------------------------------------------------

_JUDGEMENT = re.compile(
    r"\b(cheap(?:est|er)|pricie(?:st|r)|(?:most|least|less|more) (?:expensive|relevant|"
    r"important|interesting|popular|useful)|lowest|highest|best|worst|largest|smallest|"
    r"biggest|top[- ]rated|highest[- ]rated|compare|decide|choose|pick|whichever|recommend\w*|"
    r"relevant|interesting|important)\b",
    re.IGNORECASE,
)
_ORDINAL_WORDS = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
}
_NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "twelve": 12,
    "twenty": 20,
}
_ORDINAL_FORMS = re.compile(
    r"\b(\d+)(?:st|nd|rd|th)\b|#(\d+)\b|\b(?:item|number|no\.?|entry|result|position)\s*(\d+)\b",
    re.IGNORECASE,
)


def judgement_word(prompt: str) -> str | None:
    match = _JUDGEMENT.search(prompt)
    return match.group(0).lower() if match else None


def ordinals(prompt: str) -> set[int]:
    """1-based positions the prompt names ("the third", "2nd", "#4", "item 5")."""
    found = {n for word, n in _ORDINAL_WORDS.items() if re.search(rf"\b{word}\b", prompt, re.I)}
    for match in _ORDINAL_FORMS.finditer(prompt):
        found.add(int(next(g for g in match.groups() if g)))
    return found


def numbers(prompt: str) -> set[int]:
    found = {int(t) for t in _TOKEN.findall(prompt.casefold()) if t.isdecimal() and len(t) < 7}
    found |= {n for word, n in _NUMBER_WORDS.items() if re.search(rf"\b{word}\b", prompt, re.I)}
    return found


@dataclass(frozen=True)
class ListVerdict:
    """How values picked from one list are replayed: by position (`ok`; `last` means
    refer to the item as [-1]), by a small-model pick of the one item (`pick`: a single
    item chosen by a rule the data cannot express), or not at all (the consumers need
    judgement as a whole)."""

    ok: bool
    why: str = ""
    last: bool = False
    pick: int | None = None  # the index picked last time, when a pick step can redo it
    size: int = 0
    named: str | None = None  # the item's text the prompt names ("Widget"), if so


def list_position(path: Path) -> tuple[Path, int] | None:
    """(the path of the list, the index into it) for the first index in `path`."""
    for i, item in enumerate(path):
        if isinstance(item, int):
            return path[:i], item
    return None


Container = tuple[int, Path]


def judge_lists(
    uses: Iterable[Pointer],
    outputs: Mapping[int, Any],
    prompt: str,
    limits: Mapping[int, int | None],
    chosen: Collection[Container] = (),
) -> dict[Container, ListVerdict]:
    """Decide, for every list some value was picked from, whether the picks follow a
    rule. `uses` are the pointers of every consumer in run order; `limits` the `limit`
    input of the step that produced each output (it fixes the list's length); `chosen`
    the lists a value was chosen from among options the prompt names (a judgement even
    when the prompt has no judgement word: "click Widget or Gadget")."""
    picked: dict[Container, dict[int, None]] = {}  # the indexes in order of first use
    for pointer in uses:
        position = list_position(pointer.path)
        if position is None:
            continue
        prefix, index = position
        picked.setdefault((pointer.step, prefix), {}).setdefault(index, None)
    word = judgement_word(prompt)
    named = ordinals(prompt)
    counts = numbers(prompt)
    verdicts: dict[Container, ListVerdict] = {}
    for container, first_used in picked.items():
        step, prefix = container
        indexes = list(first_used)
        try:
            items = references.lookup(outputs[step], prefix)
        except (KeyError, IndexError, TypeError):
            verdicts[container] = ListVerdict(False, "the list is not in the output")
            continue
        n = len(items)
        if n <= 1:
            verdicts[container] = ListVerdict(True)
        elif word is not None or container in chosen:
            why = (
                f"picked from a list for a task that asks for a judgement ({word!r})"
                if word is not None
                else "picked from a list among options the task names"
            )
            pick = indexes[0] if len(indexes) == 1 else None
            verdicts[container] = ListVerdict(False, why, pick=pick, size=n)
        elif (name := _named_item(prompt, items, indexes)) is not None:
            # "The price of the Widget": the item is chosen by what it is, and where it
            # stands today (first, last) says nothing about where it stands tomorrow.
            pick = indexes[0] if len(indexes) == 1 else None
            why = f"the item the task names ({name!r}), wherever it stands"
            verdicts[container] = ListVerdict(False, why, pick=pick, size=n, named=name)
        elif len(indexes) >= 2 and indexes == list(range(len(indexes))):
            k = len(indexes)
            if k == n and not (limits.get(step) == k or k in counts):
                verdicts[container] = ListVerdict(
                    False, f"uses all {n} items of a list whose length may change"
                )
            else:
                verdicts[container] = ListVerdict(True, f"the first {k} items")
        elif len(indexes) == 1:
            index = indexes[0]
            if index == 0:
                verdicts[container] = ListVerdict(True, "the first item")
            elif index + 1 in named:
                verdicts[container] = ListVerdict(True, f"item {index + 1}, named by the task")
            elif index == n - 1:
                verdicts[container] = ListVerdict(True, "the last item", last=True)
            else:
                verdicts[container] = ListVerdict(
                    False,
                    f"item {index + 1} of {n}, a position no rule explains",
                    pick=index,
                    size=n,
                )
        else:
            verdicts[container] = ListVerdict(
                False, f"picks items {[i + 1 for i in indexes]} in an order no rule explains"
            )
    return verdicts


def _named_item(prompt: str, items: Sequence[Any], indexes: Sequence[int]) -> str | None:
    """A text of a used item the prompt names (whole words, a letter in it, 3+
    characters) and not every item holds: the item is the one the task asks about."""
    texts = [{leaf.strip() for _, leaf in references.leaves(item)} for item in items]
    for index in indexes:
        for text in sorted(texts[index]):
            if (
                len(text) >= 3
                and any(ch.isalpha() for ch in text)
                and not all(text in other for other in texts)
                and _named(prompt, text)
            ):
                return text
    return None


def apply_verdicts(prov: Provenance, verdicts: Mapping[Container, ListVerdict]) -> Provenance:
    """A templated value whose list picks follow no rule (and are not a single pick a
    small-model step can redo) becomes a judgement; a pick of the last item is rewritten
    to index -1."""
    if prov.kind != "template" or prov.template is None:
        return prov
    rewrite: dict[Pointer, Pointer] = {}
    for pointer in prov.template.pointers:
        position = list_position(pointer.path)
        if position is None:
            continue
        prefix, _ = position
        verdict = verdicts.get((pointer.step, prefix))
        if verdict is None:
            continue
        if not verdict.ok and verdict.pick is None:
            return Provenance("judgement", verdict.why, sources=prov.sources)
        if verdict.last:
            rest = pointer.path[len(prefix) + 1 :]
            rewrite[pointer] = replace(pointer, path=(*prefix, -1, *rest))
    if not rewrite:
        return prov
    return replace(prov, template=prov.template.with_pointers(rewrite))
