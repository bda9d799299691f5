"""The careful browsing tasks (items 12-15 of the policy's vocabulary): questions whose
answer means something only with the page's notes (a unit, a currency, "in thousands",
the date order, the time zone, the sort order, a footnote). Like a careful large model,
each reads the page before it extracts, finds the column or field by its label, and
states the answer's meaning ("The high for Lisbon: 64 °F"). A page last updated more than a
day before its own "today" is reported as stale, not read as current.

What rote's replay prompts about them are answered with: careful_again.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.dev.standin.conversation import Answer, Decision, Step, ToolCall
from services.dev.standin.meaning import (
    PageContext,
    Quantity,
    comparable,
    field_name,
    find_label,
    order_of,
    read_context,
    read_value,
    stale_answer,
)
from services.dev.standin.reading import collapse, format_list, string_items
from services.dev.standin.scripts import CANDIDATE_SELECTORS, open_page

# How a table-like page is found: its header labels, its rows, and a row's n-th cell.
TABLE_SHAPES: list[tuple[str, str, str]] = [
    ("table thead th", "table tbody tr", "td:nth-child({n})"),
    (".grid .head span", ".grid .row", "span:nth-child({n})"),
]
# How a page of labelled values is found: the labels, then the values, in the same order.
PAIR_SHAPES: list[tuple[str, str]] = [
    ("dl dt", "dl dd"),
    ("ul.keys li", "ul.values li"),
]
_DIRECTIONS = {"highest": "max", "latest": "max", "lowest": "min", "earliest": "min"}
SALE = "sale price"


def _texts(step: Step) -> list[str]:
    items = string_items(step)
    return [collapse(i) for i in items] if items else []


def _records(step: Step) -> list[dict[str, Any]]:
    out = step.output if step.ok and isinstance(step.output, list) else []
    return [r for r in out if isinstance(r, dict)]


def clean_key(value: Any) -> str:
    return collapse(value).rstrip("*").strip()


@dataclass(frozen=True)
class _Read:
    """The opening of every careful task: the page opened and read."""

    ctx: PageContext
    rest: tuple[Step, ...]


def _opening(url: str, steps: tuple[Step, ...]) -> Decision | _Read:
    if not steps:
        return open_page(url)
    if not steps[0].ok:
        return Answer(f"I could not open {url}: {steps[0].error}")
    if len(steps) == 1:
        return ToolCall("browser_read_page", {}, preface="Let me read the page first.")
    text = steps[1].output if steps[1].ok and isinstance(steps[1].output, str) else ""
    ctx = read_context(text)
    if ctx.stale:
        return Answer(stale_answer(ctx))
    return _Read(ctx, steps[2:])


def _probe_labels(
    probes: tuple[Step, ...], selectors: list[str]
) -> tuple[int, list[str]] | ToolCall | None:
    """The shape whose label selector found labels (its index, the labels), else the
    next probe; None when every shape was tried."""
    for probe in probes:
        labels = _texts(probe)
        selector = probe.input.get("selector")
        if len(labels) >= 2 and selector in selectors:
            return selectors.index(str(selector)), labels
    tried = {probe.input.get("selector") for probe in probes}
    for selector in selectors:
        if selector not in tried:
            preface = "That found no labels; let me try another shape." if probes else None
            return ToolCall("browser_extract", {"selector": selector}, preface=preface)
    return None


@dataclass(frozen=True)
class _Table:
    labels: list[str]
    key: str  # the record field of the first column
    rows: list[dict[str, Any]]


def _table(url: str, ctx_rest: tuple[Step, ...], wanted: str) -> Decision | _Table:
    """Find the table, then extract its key column, the `wanted` column and a sale price
    column when the page has one."""
    heads = [head for head, _, _ in TABLE_SHAPES]
    probes = tuple(s for s in ctx_rest if s.input.get("selector") in heads)
    found = _probe_labels(probes, heads)
    if found is None:
        return Answer(f"I could not find a table on {url}.")
    if isinstance(found, ToolCall):
        return found
    shape, labels = found
    column = find_label(labels, wanted)
    if column is None:
        return Answer(f"The table on {url} has no {wanted} column.")
    _, row_selector, cell = TABLE_SHAPES[shape]
    key = field_name(labels[0])
    fields = {key: cell.format(n=1), field_name(wanted): cell.format(n=column + 1)}
    sale = find_label(labels, SALE)
    if sale is not None and wanted != SALE:
        fields[field_name(SALE)] = cell.format(n=sale + 1)
    extracted = [s for s in ctx_rest if s.input.get("selector") == row_selector]
    if not extracted:
        return ToolCall("browser_extract", {"selector": row_selector, "fields": fields})
    return _Table(labels, key, _records(extracted[0]))


def _value(row: dict[str, Any], labels: list[str], wanted: str, ctx: PageContext) -> Quantity:
    """A row's `wanted` value: its sale price when it has one (the struck price is gone)."""
    column, sale_column = find_label(labels, wanted), find_label(labels, SALE)
    assert column is not None
    sale = row.get(field_name(SALE))
    if sale and wanted != SALE and sale_column is not None:
        return read_value(str(sale), labels[sale_column], ctx)
    return read_value(str(row.get(field_name(wanted)) or ""), labels[column], ctx)


@dataclass(frozen=True)
class Lookup:
    """12. "Open <URL> and report the <field> for <key>"."""

    url: str
    field: str
    key: str
    tools: frozenset[str] = frozenset({"browser_navigate", "browser_read_page", "browser_extract"})

    def next(self, steps: tuple[Step, ...]) -> Decision:
        opened = _opening(self.url, steps)
        if not isinstance(opened, _Read):
            return opened
        table = _table(self.url, opened.rest, self.field)
        if not isinstance(table, _Table):
            return table
        for row in table.rows:
            if clean_key(row.get(table.key)).lower() == self.key.lower():
                value = _value(row, table.labels, self.field, opened.ctx)
                return Answer(self.say(value.say()))
        return Answer(f"The table on {self.url} has no row for {self.key}.")

    def say(self, value: str) -> str:
        # The task's own words: a capitalised label could pass for a header the page
        # shows, which a compiler would then read from the page.
        return f"The {self.field} for {self.key}: {value}"


@dataclass(frozen=True)
class Extreme:
    """13. "Open <URL> and report the <thing> with the highest|lowest|earliest|latest
    <field>"; entries a footnote marks unavailable are left out."""

    url: str
    thing: str
    direction: str
    field: str
    tools: frozenset[str] = frozenset({"browser_navigate", "browser_read_page", "browser_extract"})

    def say(self, key: str, value: str) -> str:
        return f"The {self.thing} with the {self.direction} {self.field}: {key} ({value})"

    def next(self, steps: tuple[Step, ...]) -> Decision:
        opened = _opening(self.url, steps)
        if not isinstance(opened, _Read):
            return opened
        table = _table(self.url, opened.rest, self.field)
        if not isinstance(table, _Table):
            return table
        ranked = []
        for row in table.rows:
            name = collapse(row.get(table.key) or "")
            if not name or opened.ctx.unavailable(name):
                continue
            value = _value(row, table.labels, self.field, opened.ctx)
            if (score := comparable(value)) is not None:
                ranked.append((score, clean_key(name), value))
        if not ranked:
            return Answer(f"I found no {self.field} to compare on {self.url}.")
        best = best_of(ranked, self.direction)
        return Answer(self.say(best[1], best[2].say()))


def best_of(
    ranked: list[tuple[float, str, Quantity]], direction: str
) -> tuple[float, str, Quantity]:
    """The first entry with the highest (or lowest) score."""
    want_max = _DIRECTIONS[direction] == "max"
    best = ranked[0]
    for entry in ranked[1:]:
        if (entry[0] > best[0]) if want_max else (entry[0] < best[0]):
            best = entry
    return best


@dataclass(frozen=True)
class Property:
    """14. "Open <URL> and report its <field>": a page of labelled values."""

    url: str
    field: str
    tools: frozenset[str] = frozenset({"browser_navigate", "browser_read_page", "browser_extract"})

    def next(self, steps: tuple[Step, ...]) -> Decision:
        opened = _opening(self.url, steps)
        if not isinstance(opened, _Read):
            return opened
        heads = [labels for labels, _ in PAIR_SHAPES]
        probes = tuple(s for s in opened.rest if s.input.get("selector") in heads)
        found = _probe_labels(probes, heads)
        if found is None:
            return Answer(f"I could not find labelled values on {self.url}.")
        if isinstance(found, ToolCall):
            return found
        shape, labels = found
        at = find_label(labels, self.field)
        if at is None:
            return Answer(f"The page {self.url} does not give its {self.field}.")
        values_selector = PAIR_SHAPES[shape][1]
        read = [s for s in opened.rest if s.input.get("selector") == values_selector]
        if not read:
            return ToolCall("browser_extract", {"selector": values_selector})
        values = _texts(read[0])
        if at >= len(values):
            return Answer(f"The page {self.url} gives no value for its {self.field}.")
        value = read_value(values[at], labels[at], opened.ctx)
        return Answer(self.say(value.say()))

    def say(self, value: str) -> str:
        return f"Its {self.field}: {value}"


@dataclass(frozen=True)
class Ranked:
    """15. "Open <URL> and report the <N> newest|latest|oldest|most read|... <things>":
    the page's own order note decides which end of the list they are at."""

    url: str
    n: int
    order: str  # "newest", "most read"
    things: str
    tools: frozenset[str] = frozenset({"browser_navigate", "browser_read_page", "browser_extract"})

    def headline(self) -> str:
        return f"The {self.n} {self.order} {self.things}:"

    def next(self, steps: tuple[Step, ...]) -> Decision:
        opened = _opening(self.url, steps)
        if not isinstance(opened, _Read):
            return opened
        for probe in opened.rest:
            items = _texts(probe)
            if len(items) >= self.n:
                return Answer(format_list(self.headline(), self.pick(items, opened.ctx)))
        tried = {probe.input.get("selector") for probe in opened.rest}
        for selector in CANDIDATE_SELECTORS:
            if selector not in tried:
                return ToolCall("browser_extract", {"selector": selector})
        return Answer(f"I could not find {self.n} {self.things} on {self.url}.")

    def pick(self, items: list[str], ctx: PageContext) -> list[str]:
        wanted = order_of(self.order)
        shown = ctx.order
        if wanted and shown and wanted[0] == shown[0] and wanted[1] != shown[1]:
            items = items[::-1]
        return items[: self.n]


CarefulTask = Lookup | Extreme | Property | Ranked
