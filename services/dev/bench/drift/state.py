"""A drift site's page state (edition, layout, the silent drifts in force), the drift
kinds with the evidence each leaves on the page, and how a state is written: language,
numbers, dates, times, units, captions, and the page's frame."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from typing import Literal

from services.dev.bench.corpus.site import esc
from services.dev.demo.pages import Rendered

Layout = Literal["v1", "v2"]
LAYOUTS: tuple[Layout, ...] = ("v1", "v2")

# Every silent drift: what changes, and what a careful reader sees of it. Each keeps the
# markup a compiled executor reads (selectors, positions, the page title) matching.
DRIFT_KINDS: dict[str, str] = {
    "columns_reordered": "two value columns trade places; their header labels move with them",
    "unit_changed": "values in another unit (°F -> °C, kg -> lb, l -> fl oz); the label says so",
    "currency_changed": "amounts in EUR instead of USD; the caption and labels say so",
    "sort_reversed": "the list in the opposite order; its caption says which end comes first",
    "date_format": "dates day/month/year instead of month/day/year; a caption and lang say so",
    "thousands": "figures shown in thousands; the caption says so",
    "time_zone": "times in CET (UTC+1) instead of UTC; the caption says so",
    "label_value_swapped": "two labelled values trade places, each label with its value",
    "language": "the page in Portuguese (lang, labels, decimal commas, day-first dates)",
    "stale_copy": "a cached copy: older data, and an 'Updated' date days before today",
    "struck_price": "a price struck through (<s>) and a new 'Sale price' column beside it",
    "discontinued": "the cheapest entry starred, and a footnote saying it is discontinued",
}
STALE_DAYS = 7  # how old a stale copy is
FIRST_DAY = date(2025, 3, 3)  # the day of edition 0
EUR_PER_USD = 0.85


@dataclass(frozen=True)
class PageState:
    edition: int
    layout: Layout = "v1"
    drifts: frozenset[str] = field(default_factory=frozenset)

    def has(self, kind: str) -> bool:
        return kind in self.drifts

    @property
    def data_edition(self) -> int:
        """The edition whose data the page shows: an older one for a stale copy."""
        return self.edition - STALE_DAYS if self.has("stale_copy") else self.edition

    @property
    def lang(self) -> str:
        return "pt" if self.has("language") else "en"

    def drifted(self, *kinds: str) -> PageState:
        return replace(self, drifts=self.drifts | set(kinds))


def day_of(edition: int) -> date:
    return FIRST_DAY + timedelta(days=edition)


# --- words and numbers as a state writes them ------------------------------------------------


def say(state: PageState, en: str, pt: str) -> str:
    return pt if state.lang == "pt" else en


def number(state: PageState, value: float, decimals: int) -> str:
    """1234.5 -> "1,234.50" (en) or "1.234,50" (pt)."""
    text = f"{value:,.{decimals}f}"
    if state.lang == "pt":
        text = text.replace(",", "\0").replace(".", ",").replace("\0", ".")
    return text


def day_first(state: PageState) -> bool:
    return state.has("date_format") or state.lang == "pt"


def written_date(state: PageState, day: date) -> str:
    if day_first(state):
        return f"{day.day:02d}/{day.month:02d}/{day.year}"
    return f"{day.month:02d}/{day.day:02d}/{day.year}"


def written_time(state: PageState, minutes_utc: int) -> str:
    shown = (minutes_utc + (60 if state.has("time_zone") else 0)) % (24 * 60)
    return f"{shown // 60:02d}:{shown % 60:02d}"


def html_lang(state: PageState) -> str:
    if state.lang == "pt":
        return "pt-PT"
    return "en-GB" if state.has("date_format") else "en-US"


# --- the frame ----------------------------------------------------------------------------------


def frame(state: PageState, title: str, body: str, nav: list[tuple[str, str]]) -> bytes:
    """A whole document. The title is the site's name alone, in every state (a compiled
    executor checks it); the "today" line is the site's live frame, never cached."""
    links = " | ".join(f"<a href='{esc(href)}'>{esc(label)}</a>" for href, label in nav)
    today = say(state, "Today is", "Hoje é") + f" {day_of(state.edition).isoformat()}."
    return (
        f"<!doctype html><html lang='{html_lang(state)}'><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title></head><body>"
        f"<nav class='site-nav'>{links}</nav><p class='today'>{esc(today)}</p>{body}"
        "<footer><small>A local site for rote's drift benchmark.</small></footer>"
        "</body></html>"
    ).encode()


def updated_line(state: PageState) -> str:
    stamp = f"{day_of(state.data_edition).isoformat()} 06:00"
    return f"<p class='updated'>{esc(say(state, 'Updated', 'Atualizado'))} {stamp}.</p>"


def caption(*lines: str) -> str:
    return "".join(f"<p class='note'>{esc(line)}</p>" for line in lines if line)


def home_or_missing(
    title: str, path: str, state: PageState, nav: list[tuple[str, str]]
) -> Rendered:
    if path.rstrip("/") == "":
        return 200, frame(state, title, f"<h1>{esc(title)}</h1>", nav)
    return 404, frame(state, title, "<p>Nothing here.</p>", nav)
