"""Table sites: rows of canonical values (°F, USD, UTC minutes, dates), written in a page
state's units, language and order, as a <table> (v1) or a grid of divs (v2, whose
selectors a v1 executor cannot find: a breaking change).

`effective_rows` is the data as it stands in a state (a sale price that replaced a
struck one, an entry discontinued): what the page means, shared by the renderer and
the ground truth (truth.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from services.dev.bench.corpus.site import esc
from services.dev.bench.drift.state import (
    EUR_PER_USD,
    PageState,
    caption,
    frame,
    home_or_missing,
    number,
    say,
    updated_line,
    written_date,
    written_time,
)
from services.dev.demo.pages import Rendered

Kind = Literal["key", "text", "temperature", "price", "figure", "date", "time"]
Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    field: str  # the canonical field ("high")
    en: str  # its label ("High")
    pt: str  # its label in Portuguese ("Máxima")
    kind: Kind = "text"


SALE = Column("sale", "Sale price", "Preço de saldo", "price")


def fahrenheit_to_celsius(value: float) -> float:
    return (value - 32) * 5 / 9


def _currency(state: PageState) -> str:
    return "EUR" if state.has("currency_changed") else "USD"


def label(column: Column, state: PageState) -> str:
    text = say(state, column.en, column.pt)
    if column.kind == "temperature":
        return f"{text} ({'°C' if state.has('unit_changed') else '°F'})"
    if column.kind == "price":
        return f"{text} ({_currency(state)})"
    return text


def cell(column: Column, value: Any, state: PageState) -> str:
    """A canonical value as the state writes it."""
    if value is None or value == "":
        return ""
    if column.kind == "temperature":
        if state.has("unit_changed"):
            return number(state, fahrenheit_to_celsius(value), 1)
        return number(state, value, 0)
    if column.kind in ("price", "figure"):
        amount = value * (EUR_PER_USD if state.has("currency_changed") else 1.0)
        if column.kind == "price":
            return number(state, amount, 2)
        if state.has("thousands"):
            return number(state, round(amount / 1000), 0)
        return number(state, round(amount / 1000) * 1000, 0)
    if column.kind == "date":
        assert isinstance(value, date)
        return written_date(state, value)
    if column.kind == "time":
        return written_time(state, int(value))
    return str(value)


@dataclass(frozen=True)
class TableSite:
    """One page (`path`) holding one table of `rows(edition)`."""

    name: str
    title: str
    path: str
    heading: tuple[str, str]  # (en, pt)
    columns: tuple[Column, ...]
    rows: Callable[[int], list[Row]]
    notes: Callable[[PageState], list[str]]
    swap: tuple[str, str]  # the value columns that trade places (columns_reordered)
    order_by: tuple[str, bool] | None = None  # (field, descending): rows sorted by it
    struck: str | None = None  # the key of the entry a struck_price drift puts on sale

    @property
    def key(self) -> str:
        return self.columns[0].field

    def effective_rows(self, state: PageState) -> list[Row]:
        """The rows as they stand: sorted, a sale price in force, `available` marked."""
        rows = [dict(r, available=True, sale=None) for r in self.rows(state.data_edition)]
        if self.order_by is not None:
            by, descending = self.order_by
            rows.sort(key=lambda r: r[by], reverse=descending)
        if state.has("struck_price") and self.struck is not None:
            others = [r["price"] for r in rows if r[self.key] != self.struck]
            for r in rows:
                if r[self.key] == self.struck:
                    r["sale"] = round(min(others) * 0.8, 2)
        if state.has("discontinued"):
            listed = [r for r in rows if r["sale"] is None]
            min(listed, key=lambda r: r["price"])["available"] = False
        return rows

    def shown_columns(self, state: PageState) -> list[Column]:
        columns = list(self.columns)
        if state.has("columns_reordered"):
            a, b = (next(i for i, c in enumerate(columns) if c.field == f) for f in self.swap)
            columns[a], columns[b] = columns[b], columns[a]
        if state.has("struck_price") and self.struck is not None:
            columns.append(SALE)
        return columns

    def _cells(self, row: Row, columns: list[Column], state: PageState) -> list[str]:
        out = []
        for column in columns:
            text = esc(cell(column, row.get(column.field), state))
            if column.field == self.key and not row["available"]:
                text += "*"
            if column.field == "price" and row.get("sale") is not None:
                text = f"<s class='was'>{text}</s>"
            out.append(text)
        return out

    def _notes(self, state: PageState, rows: list[Row]) -> str:
        lines = self.notes(state)
        if any(not r["available"] for r in rows):
            lines.append(
                say(state, "* Discontinued: no longer sold.", "* Descontinuado: já não se vende.")
            )
        return caption(*lines)

    def table(self, state: PageState) -> str:
        rows = self.effective_rows(state)
        if state.has("sort_reversed"):
            rows = rows[::-1]
        columns = self.shown_columns(state)
        labels = [esc(label(c, state)) for c in columns]
        body = [self._cells(r, columns, state) for r in rows]
        if state.layout == "v1":
            head = "".join(f"<th>{text}</th>" for text in labels)
            trs = "".join(
                "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>" for cells in body
            )
            grid = f"<table class='data'><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>"
        else:
            head = " ".join(f"<span>{text}</span>" for text in labels)
            divs = "".join(
                "<div class='row'>" + " ".join(f"<span>{c}</span>" for c in cells) + "</div>"
                for cells in body
            )
            grid = f"<div class='grid'><div class='head'>{head}</div>{divs}</div>"
        return self._notes(state, rows) + grid

    def render(self, path: str, state: PageState) -> Rendered:
        if path.rstrip("/") != self.path:
            return home_or_missing(self.title, path, state, self.nav())
        heading = f"<h1>{esc(say(state, *self.heading))}</h1>"
        body = heading + self.table(state) + updated_line(state)
        return 200, frame(state, self.title, body, self.nav())

    def nav(self) -> list[tuple[str, str]]:
        return [("/", "Home"), (self.path, self.heading[0])]

    def paths(self) -> list[str]:
        return [self.path]
