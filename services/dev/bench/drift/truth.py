"""Ground truth: what the right answer to a drift task means on a page state, computed
from the site's data (never from its page), in canonical units: °F, USD, kg, l, cm,
minutes after midnight UTC, dates. A stale copy's truth is that the page is stale: its
values are not today's, and an answer must say so rather than report them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Literal

from services.dev.bench.drift.pages import PairsSite, RankedSite
from services.dev.bench.drift.sites import SITES
from services.dev.bench.drift.state import PageState, day_of
from services.dev.bench.drift.tables import Row, TableSite
from services.dev.bench.drift.tasks import DriftTask

ValueKind = Literal["temperature", "money", "weight", "volume", "length", "date", "time", "text"]
_COLUMN_KINDS: dict[str, ValueKind] = {
    "temperature": "temperature", "price": "money", "figure": "money", "date": "date",
    "time": "time", "text": "text", "key": "text",
}  # fmt: skip
_SPEC_KINDS: dict[str, ValueKind] = {"kg": "weight", "l": "volume", "cm": "length"}


@dataclass(frozen=True)
class Value:
    kind: ValueKind
    amount: float | date | str  # canonical: °F, USD, kg, l, cm, UTC minutes, a date, text

    def describe(self) -> str:
        unit = {"temperature": " °F", "money": " USD", "weight": " kg", "volume": " l",
                "length": " cm", "time": " min UTC"}.get(self.kind, "")  # fmt: skip
        return f"{self.amount}{unit}"


@dataclass(frozen=True)
class Truth:
    """`form` is the task's; `stale` overrides it. `keys`: every entry of the page's data
    (an answer naming another one names the wrong entry)."""

    form: str
    value: Value | None = None
    key: str | None = None
    names: tuple[str, ...] = ()
    keys: tuple[str, ...] = field(default_factory=tuple)
    stale: tuple[date, date] | None = None  # (updated, today)

    def describe(self) -> str:
        if self.stale:
            return f"stale: updated {self.stale[0]}, today {self.stale[1]}"
        if self.form == "ranked":
            return " | ".join(self.names)
        head = f"{self.key}: " if self.key else ""
        return head + (self.value.describe() if self.value else "")


def _row_value(site: TableSite, row: Row, wanted: str) -> Value:
    """A row's value as it stands: a sale price replaces the struck one."""
    column = next(c for c in site.columns if c.field == wanted)
    amount = row["sale"] if wanted == "price" and row.get("sale") is not None else row[wanted]
    return Value(_COLUMN_KINDS[column.kind], amount)


def _table_truth(task: DriftTask, site: TableSite, state: PageState) -> Truth:
    rows = site.effective_rows(state)
    keys = tuple(str(r[site.key]) for r in rows)
    if task.form == "lookup":
        row = next(r for r in rows if r[site.key] == task.key)
        return Truth("lookup", _row_value(site, row, task.field), task.key, keys=keys)
    available = [r for r in rows if r["available"]]
    scored = [(_row_value(site, r, task.field), r) for r in available]
    # No ties in the corpus's data: the one entry with the highest (lowest) value.
    highest = task.direction in ("highest", "latest")
    value, best = (max if highest else min)(scored, key=lambda vr: _rank(vr[0]))
    return Truth("extreme", value, str(best[site.key]), keys=keys)


def _rank(value: Value) -> float:
    amount = value.amount
    if isinstance(amount, date):
        return float(amount.toordinal())
    assert isinstance(amount, int | float), value
    return float(amount)


def truth_of(task: DriftTask, state: PageState) -> Truth:
    site = SITES[task.site]
    if state.has("stale_copy"):
        return Truth(task.form, stale=(day_of(state.data_edition), day_of(state.edition)))
    if isinstance(site, TableSite):
        return _table_truth(task, site, state)
    if isinstance(site, PairsSite):
        slug = task.path.rsplit("/", 1)[-1]
        spec = next(s for s in site.specs if s.field == task.field)
        amount = site.values(slug, state.data_edition)[task.field]
        return Truth("property", Value(_SPEC_KINDS[spec.unit], amount))
    assert isinstance(site, RankedSite)
    ranking = site.ranking(task.path)
    assert ranking is not None
    ranked = site.ranked(ranking, state.data_edition)
    # The page's rankings are highest first: "newest", "most read"; "oldest" reads the
    # other end.
    if task.order in ("oldest", "earliest", "least read"):
        ranked = ranked[::-1]
    return Truth("ranked", names=tuple(ranked[: task.n]), keys=tuple(ranked))
