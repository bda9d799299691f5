"""Item 17 of the policy's vocabulary: rote's verification prompt (services/executor/
verification.py), answered as a careful reader would.

For a careful task (careful.py, items 12-15) the reader works out what the task's answer
is from the reads the prompt gives, then compares it with the replay's answer:

- the page's context is read from every read's notes, and any page text, with
  meaning.read_context (today and updated, currency, scale, date order, zone, list order,
  footnotes), in the language of the reads' lang attribute when one is given;
- a stale page's answer is that it is stale, whatever the values;
- records are keyed by the page's labels *now*: a record's field `f` in item `i` means
  what labels[f][i] says (a value whose label is not the one the task asks for is not
  the value asked for); without a label, the header named like the field, else the name;
- a "price" is the sale price when the page shows a sale price column; a page whose
  headers show one the reads do not include cannot support a price;
- an extreme leaves out the entries a footnote excludes; a ranked list is read from the
  end its caption names; a labelled value is found by its label.

The reads not holding what the task asks for is a FAIL too: the reader cannot vouch.
How an answer is compared with the reading: verdicts.py.

Item 18: rote's comparison of a replayed answer with a shadow full run's (`Compare`),
answered SAME when the two are one answer after verdicts.py's normalisation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.dev.standin.careful import (
    SALE,
    CarefulTask,
    Extreme,
    Lookup,
    Property,
    Ranked,
    clean_key,
)
from services.dev.standin.careful_again import pick_read
from services.dev.standin.conversation import Answer, Decision, Step
from services.dev.standin.meaning import (
    PageContext,
    field_name,
    find_label,
    label_words,
    read_context,
    read_value,
    stale_answer,
)
from services.dev.standin.reading import collapse, format_list
from services.dev.standin.verdicts import (
    Reading,
    answer_problem,
    comparison_verdict,
    simple_verdict,
)
from services.executor.verification import COMPARISON_HEAD, PROMPT_HEAD

PASSED = "PASS: read with the page's notes and labels, the page gives this answer."


@dataclass(frozen=True)
class PageRead:
    """One <read> block: a text read (`text`) or an extract's fingerprint and items
    (`items` None when they did not parse, e.g. cut short)."""

    tool: str
    lang: str = ""
    notes: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    labels: dict[str, list[str | None]] = field(default_factory=dict)
    items: list[Any] | None = None
    text: str | None = None


_PROMPT = re.compile(
    re.escape(PROMPT_HEAD) + r".*?^Task: (?P<task>.*?)\n<answer>\n(?P<answer>.*?)\n?</answer>\n"
    r"<changes>\n.*?\n</changes>\n(?P<reads>.*)\nReply with PASS or FAIL",
    re.DOTALL | re.MULTILINE,
)
_READ = re.compile(r"^<read(?P<attrs>[^\n]*)>\n(?P<body>.*?)^</read>$", re.DOTALL | re.MULTILINE)
_TEXT = re.compile(r"\A<text>\n(?P<text>.*)\n</text>\n?\Z", re.DOTALL)
_NOTES = re.compile(r"^<notes>\n(?P<notes>.*?)\n</notes>$", re.DOTALL | re.MULTILINE)
_HEADERS = re.compile(r"^<headers>(?P<headers>.*)</headers>$", re.MULTILINE)
_LABELS = re.compile(r"^<labels>(?P<labels>.*)</labels>$", re.MULTILINE)
_ITEMS = re.compile(r"^<items>\n(?P<items>.*)\n</items>$", re.DOTALL | re.MULTILINE)
_ATTR = re.compile(r'(?P<name>\w+)="(?P<value>[^"]*)"')


def _json(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def parse_read(attrs: str, body: str) -> PageRead:
    found = {m["name"]: m["value"] for m in _ATTR.finditer(attrs)}
    tool, lang = found.get("tool", ""), found.get("lang", "")
    if text := _TEXT.match(body):
        return PageRead(tool, lang, text=text["text"])
    notes = _NOTES.search(body)
    headers = _HEADERS.search(body)
    labels = _json(m["labels"]) if (m := _LABELS.search(body)) else None
    items = _json(m["items"]) if (m := _ITEMS.search(body)) else None
    return PageRead(
        tool,
        lang,
        notes=tuple(notes["notes"].splitlines()) if notes else (),
        headers=tuple(headers["headers"].split(" | ")) if headers else (),
        labels=labels if isinstance(labels, dict) else {},
        items=items if isinstance(items, list) else None,
    )


@dataclass(frozen=True)
class Verify:
    """17. A verification prompt: the task's words, the replay's answer, the reads."""

    task_text: str
    task: CarefulTask | None  # None: not a careful task, checked by the simple rule
    answer: str
    reads: tuple[PageRead, ...]
    tools: frozenset[str] = field(default_factory=frozenset)

    def next(self, steps: tuple[Step, ...]) -> Decision:
        return Answer(verdict(self))


def verification_prompt_of(
    prompt: str, careful: Callable[[str], CarefulTask | None]
) -> Verify | None:
    """The verification prompt's parts; `careful` reads the task's words as a careful
    task (the vocabulary's parser; None for any other task)."""
    found = _PROMPT.search(prompt)
    if found is None:
        return None
    reads = tuple(parse_read(m["attrs"], m["body"]) for m in _READ.finditer(found["reads"]))
    task = found["task"].strip()
    return Verify(task, careful(task), found["answer"], reads)


_COMPARISON = re.compile(
    re.escape(COMPARISON_HEAD) + r".*?<replayed_answer>\n(?P<replayed>.*?)\n</replayed_answer>\n"
    r"<full_answer>\n(?P<full>.*?)\n</full_answer>\n",
    re.DOTALL,
)


@dataclass(frozen=True)
class Compare:
    """18. A comparison prompt: a replay's answer and a shadow full run's."""

    replayed: str
    full: str
    tools: frozenset[str] = field(default_factory=frozenset)

    def next(self, steps: tuple[Step, ...]) -> Decision:
        return Answer(comparison_verdict(self.replayed, self.full))


def comparison_prompt_of(prompt: str) -> Compare | None:
    found = _COMPARISON.search(prompt)
    return None if found is None else Compare(found["replayed"], found["full"])


def verdict(check: Verify) -> str:
    if check.task is None:
        return simple_verdict(check.answer, [_haystack(read) for read in check.reads])
    reading = careful_reading(check.task, check.reads)
    problem = answer_problem(check.task, reading, check.answer)
    return PASSED if problem is None else f"FAIL: {problem}"


def _haystack(read: PageRead) -> str:
    """Everything a read shows, as text: its notes, its page text and its items."""
    parts = [*read.notes, read.text or ""]
    for item in read.items or []:
        values = item.values() if isinstance(item, dict) else [item]
        parts += [str(v) for v in values if v is not None]
    return "\n".join(parts)


# --- the careful reading -----------------------------------------------------------------------


def page_context(reads: tuple[PageRead, ...]) -> PageContext:
    """The page's notes, from every read's notes (once each) and any page text."""
    notes = list(dict.fromkeys(note for read in reads for note in read.notes))
    texts = [read.text for read in reads if read.text is not None]
    langs = {read.lang.split("-")[0].lower() for read in reads if read.lang}
    lang = "pt" if "pt" in langs else "en" if langs else None
    return read_context("\n".join([*notes, *texts]), lang)


def careful_reading(task: CarefulTask, reads: tuple[PageRead, ...]) -> Reading:
    """What the careful task answers from these reads (see the module's docstring)."""
    ctx = page_context(reads)
    if ctx.stale:
        return Reading(stale_answer(ctx), stale=(str(ctx.updated), str(ctx.today)))
    if isinstance(task, Ranked):
        return _ranked(task, reads, ctx)
    if isinstance(task, Property):
        return _property(task, reads, ctx)
    return _table(task, reads, ctx)


def _strings(read: PageRead) -> list[str] | None:
    items = read.items
    if not items or not all(isinstance(i, str) for i in items):
        return None
    return [collapse(i) for i in items]


def _ranked(task: Ranked, reads: tuple[PageRead, ...], ctx: PageContext) -> Reading:
    lists = [s for read in reads if (s := _strings(read)) and len(s) >= task.n]
    if not lists:
        return Reading(None, why=f"the reads hold no list of {task.n} {task.things}")
    picked = task.pick(lists[-1], ctx)
    return Reading(format_list(task.headline(), picked), items=tuple(picked))


def _label_pairs(reads: tuple[PageRead, ...]) -> list[tuple[str, str]]:
    """(label, value) of the labelled values read: by each value's own label, else a
    list of labels read just before a list of values, place by place."""
    for read in reversed(reads):
        values, labels = _strings(read), read.labels.get("")
        if values and labels:
            return [(str(lb), v) for lb, v in zip(labels, values, strict=False) if lb]
    lists = [s for read in reads if (s := _strings(read))]
    return list(zip(lists[-2], lists[-1], strict=False)) if len(lists) >= 2 else []


def _property(task: Property, reads: tuple[PageRead, ...], ctx: PageContext) -> Reading:
    pairs = _label_pairs(reads)
    at = find_label([label for label, _ in pairs], task.field)
    if at is None:
        shown = ", ".join(label for label, _ in pairs) or "none"
        return Reading(None, why=f"no value read is labelled {task.field} (labels: {shown})")
    label, raw = pairs[at]
    value = read_value(raw, label, ctx)
    return Reading(task.say(value.say()), value=value)


@dataclass(frozen=True)
class Rows:
    """An extract's records keyed by the page's labels: field_name(label) -> the value."""

    records: list[dict[str, str]]
    labels: dict[str, str]  # field_name(label) -> the label, with its unit
    moved: dict[str, str]  # a field read under another label: its name -> that label


def _label_at(read: PageRead, name: str, i: int) -> str:
    """The page's label of field `name` in item `i`: past the labelled items, the last
    one's (a column keeps its label); without labels, the header named like the field."""
    labels = [label for label in read.labels.get(name, [])[: i + 1] if label]
    if labels:
        return str(labels[-1])
    at = find_label(list(read.headers), label_words(name).replace("_", " "))
    return read.headers[at] if at is not None else name


def relabel(read: PageRead) -> Rows:
    records: list[dict[str, str]] = []
    labels: dict[str, str] = {}
    moved: dict[str, str] = {}
    for i, item in enumerate(read.items or []):
        if not isinstance(item, dict):
            continue
        record = {}
        for name, raw in item.items():
            label = _label_at(read, name, i)
            key = field_name(label)
            record[key] = "" if raw is None else collapse(raw)
            labels.setdefault(key, label)
            if key != field_name(name):
                moved.setdefault(field_name(name), label)
        records.append(record)
    return Rows(records, labels, moved)


def _missing(task: Lookup | Extreme, read: PageRead, rows: Rows) -> str | None:
    """Why these rows cannot give the task's value (None: they can)."""
    wanted = field_name(task.field)
    if wanted not in rows.labels:
        if wanted in rows.moved:
            return f"the value read as {task.field} is the page's {rows.moved[wanted]!r}"
        return f"the reads hold no {task.field}"
    sale = find_label(list(read.headers), SALE)
    if wanted == "price" and sale is not None and field_name(SALE) not in rows.labels:
        return f"the page has a {read.headers[sale]!r} column the reads do not include"
    return None


def _key(task: Lookup | Extreme, read: PageRead, rows: Rows) -> str | None:
    """The field naming each row: the extreme's thing, else the table's first column,
    else the first field that is not a value the task reads."""
    if isinstance(task, Extreme) and field_name(task.thing) in rows.labels:
        return field_name(task.thing)
    if read.headers and field_name(read.headers[0]) in rows.labels:
        return field_name(read.headers[0])
    values = {field_name(task.field), field_name(SALE)}
    return next((k for k in rows.labels if k not in values), None)


def _table(task: Lookup | Extreme, reads: tuple[PageRead, ...], ctx: PageContext) -> Reading:
    read = next((r for r in reversed(reads) if r.items and isinstance(r.items[0], dict)), None)
    if read is None:
        return Reading(None, why="the reads hold no rows")
    rows = relabel(read)
    if (why := _missing(task, read, rows)) is not None:
        return Reading(None, why=why)
    key = _key(task, read, rows)
    if key is None:
        return Reading(None, why="the reads hold nothing that names their rows")
    records = rows.records
    if field_name(task.field) != "price":  # a sale price replaces a price only
        records = [{k: v for k, v in r.items() if k != field_name(SALE)} for r in records]
    found = pick_read(task, records, key, rows.labels[field_name(task.field)], ctx)
    if found is None:
        what = f"row for {task.key}" if isinstance(task, Lookup) else f"{task.field} to compare"
        return Reading(None, why=f"the reads hold no {what}")
    record, value = found
    if isinstance(task, Lookup):
        return Reading(task.say(value.say()), value=value)
    chosen = clean_key(record.get(key))
    return Reading(task.say(chosen, value.say()), value=value, key=chosen)
