"""The careful tasks (careful.py) in replays: rote's small-model prompts about them
answered from the data each prompt gives, as the full run would answer from the same
data (the policy's item 10). With the page's text among the data, its notes are read
(units, currency, scale, date order, zone, sort order, footnotes, staleness); without
it, the values are read *literally*: by the data's own keys, field names and positions,
with the earlier answer's unit, English numbers, month-first dates and the list in the
order it comes. A pick prompt gives only a list: its pick is always literal.
"""

from __future__ import annotations

import re
from typing import Any

from services.dev.standin.careful import (
    SALE,
    CarefulTask,
    Extreme,
    Lookup,
    Property,
    Ranked,
    best_of,
    clean_key,
)
from services.dev.standin.meaning import (
    GLOSSARY,
    PageContext,
    Quantity,
    comparable,
    field_name,
    find_label,
    label_words,
    literal_context,
    literal_score,
    read_context,
    read_literally,
    read_value,
    stale_answer,
)
from services.dev.standin.reading import collapse, format_list


def _records(data: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    lists = [v for _, v in data if isinstance(v, list) and v and isinstance(v[0], dict)]
    return [r for r in lists[-1] if isinstance(r, dict)] if lists else []


def _text_lists(data: list[tuple[str, Any]]) -> list[list[str]]:
    return [
        [collapse(i) for i in v if isinstance(i, str)]
        for _, v in data
        if isinstance(v, list) and v and isinstance(v[0], str)
    ]


def field_value(record: dict[str, Any], words: str) -> Any:
    """A record's field named by a task's words ("sale price" -> "sale_price")."""
    return record.get(field_name(words), record.get(words))


def key_field(record: dict[str, Any], task: Lookup | Extreme) -> str | None:
    """The field that names a record: the first that is not the value the task asks for."""
    skip = {field_name(task.field), field_name(SALE)}
    return next((k for k in record if k not in skip), None)


def _raw(record: dict[str, Any], field: str) -> str:
    """A record's value for `field`: its sale price when it has one (the struck price is
    no longer the price)."""
    sale = field_value(record, SALE) if field != SALE else None
    return str(sale or field_value(record, field) or "")


def _label(field: str, data: list[tuple[str, Any]], text: str) -> str:
    """The label of `field` with its unit, from a list of labels among the data, else
    from the page's text ("High (°C)"), else the field's own words."""
    for labels in _text_lists(data):
        if (at := find_label(labels, field)) is not None:
            return labels[at]
    names = [field] + [pt for pt, en in GLOSSARY.items() if en == field.lower()]
    pattern = "|".join(re.escape(n) for n in names)
    found = re.search(rf"(?<!\w)(?:{pattern})\s*\(([^)]+)\)", text, re.IGNORECASE)
    return f"{field} ({found.group(1)})" if found else field


def _page_pairs(text: str) -> list[tuple[str, str]]:
    """Labelled values of a page's text: lines that are a label with a unit ("Weight
    (kg)"), paired in order with the lines that are a number (a <dl> alternates them, two
    parallel lists give all labels, then all values)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    labels = [line for line in lines if re.fullmatch(r"[^\d()]+\([^)]+\)", line)]
    values = [line for line in lines if re.fullmatch(r"-?[\d.,]+", line)]
    return list(zip(labels, values, strict=False))


def answer_again(task: CarefulTask, data: list[tuple[str, Any]], example: str) -> str | None:
    """The answer from a replay's data (see the module's docstring); None: the data
    does not hold it."""
    pages = [v for _, v in data if isinstance(v, str)]
    text = pages[-1] if pages else None
    ctx = read_context(text) if text is not None else literal_context(example)
    if ctx.stale:
        return stale_answer(ctx)
    if isinstance(task, Ranked):
        lists = [items for items in _text_lists(data) if len(items) >= task.n]
        return format_list(task.headline(), task.pick(lists[-1], ctx)) if lists else None
    if isinstance(task, Property):
        return _property_again(task, data, text, ctx)
    records = _records(data)
    key = key_field(records[0], task) if records else None
    if key is None:
        return None
    if text is None:
        chosen = pick_literally(task, records, key)
        value = read_literally(_raw(chosen, task.field), ctx) if chosen else ""
    else:
        found = pick_read(task, records, key, _label(task.field, data, text), ctx)
        chosen, value = (found[0], found[1].say()) if found else (None, "")
    if chosen is None:
        return None
    if isinstance(task, Lookup):
        return task.say(value)
    return task.say(clean_key(chosen.get(key)), value)


def _property_again(
    task: Property, data: list[tuple[str, Any]], text: str | None, ctx: PageContext
) -> str | None:
    lists = _text_lists(data)
    pairs = list(zip(lists[-2], lists[-1], strict=False)) if len(lists) >= 2 else []
    if not pairs and text is not None:
        pairs = _page_pairs(text)
    found = [(label, v) for label, v in pairs if label_words(label) == task.field.lower()]
    if not found:
        return None
    label, raw = found[0]
    value = read_value(raw, label, ctx).say() if text is not None else read_literally(raw, ctx)
    return task.say(value)


def pick_read(
    task: Lookup | Extreme,
    records: list[dict[str, Any]],
    key: str,
    label: str,
    ctx: PageContext,
) -> tuple[dict[str, Any], Quantity] | None:
    """The record the task asks for and its value, read with the page's notes (`label`:
    the value's, with its unit); an extreme leaves out entries a footnote excludes."""

    def value(record: dict[str, Any]) -> Quantity:
        return read_value(_raw(record, task.field), label, ctx)

    if isinstance(task, Lookup):
        for record in records:
            if clean_key(record.get(key)).lower() == task.key.lower():
                return record, value(record)
        return None
    ranked = []
    for record in records:
        name = collapse(record.get(key) or "")
        if name and not ctx.unavailable(name):
            read = value(record)
            if (score := comparable(read)) is not None:
                ranked.append((score, clean_key(name), read))
    if not ranked:
        return None
    best = best_of(ranked, task.direction)
    return next(r for r in records if clean_key(r.get(key)) == best[1]), best[2]


def pick_literally(
    task: Lookup | Extreme, records: list[dict[str, Any]], key: str
) -> dict[str, Any] | None:
    """The record the task asks for, by the values as they read (no notes)."""
    if isinstance(task, Lookup):
        for record in records:
            if clean_key(record.get(key)).lower() == task.key.lower():
                return record
        return None
    ranked = []
    for record in records:
        score = literal_score(_raw(record, task.field))
        if score is not None and clean_key(record.get(key)):
            ranked.append((score, clean_key(record.get(key)), Quantity("text", "")))
    if not ranked:
        return None
    best = best_of(ranked, task.direction)
    return next(r for r in records if clean_key(r.get(key)) == best[1])
