"""The browsing tasks the stand-in scripts (items 1-8 of the policy's vocabulary): each
decides its next turn from the steps of the current browser session alone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from services.dev.standin.conversation import Answer, Decision, Step, ToolCall
from services.dev.standin.reading import (
    cheapest,
    collapse,
    confirmation_line,
    detail_value,
    format_list,
    string_items,
)

# Item selectors tried, in order, for "top N" tasks.
CANDIDATE_SELECTORS: list[str] = [
    ".headline",
    "article .title",
    "li.item",
    "table tbody tr td.name",
    "h2",
    "h3",
    "li",
]

# Row selector and field specs tried, in order, for "cheapest" tasks.
CANDIDATE_RECORDS: list[tuple[str, dict[str, str]]] = [
    (".product", {"name": ".name", "price": ".price"}),
    ("li.item", {"name": ".name", "price": ".price"}),
    ("table tbody tr", {"name": "td.name", "price": "td.price"}),
    ("article", {"name": "h2", "price": ".price"}),
    ("[data-price]", {"name": ".name", "price": "@data-price"}),
]

MAX_EXTRACT_ITEMS = 20
READ_LINES = 20


def open_page(url: str) -> ToolCall:
    return ToolCall("browser_navigate", {"url": url}, preface=f"Let me open {url}.")


_RETRY_PREFACE = "That found nothing usable; let me try another selector."


@dataclass(frozen=True)
class TopN:
    url: str
    n: int
    things: str
    click: str | None = None

    @property
    def tools(self) -> frozenset[str]:
        needed = {"browser_navigate", "browser_extract"}
        if self.click is not None:
            needed.add("browser_click")
        return frozenset(needed)

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return open_page(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        rest = steps[1:]
        if self.click is not None:
            if not rest:
                return ToolCall("browser_click", {"text": self.click})
            if not rest[0].ok:
                return Answer(f"I could not click {self.click!r} on {self.url}: {rest[0].error}")
            rest = rest[1:]
        for probe in rest:
            items = string_items(probe)
            if items is not None and len(items) >= self.n:
                return Answer(format_list(f"Top {self.n} {self.things}:", items[: self.n]))
        tried = {str(probe.input.get("selector")) for probe in rest}
        for selector in CANDIDATE_SELECTORS:
            if selector not in tried:
                preface = _RETRY_PREFACE if rest else None
                return ToolCall("browser_extract", {"selector": selector}, preface=preface)
        return Answer(
            f"I could not find {self.n} {self.things} on {self.url}; I tried the selectors "
            + ", ".join(CANDIDATE_SELECTORS)
            + "."
        )


@dataclass(frozen=True)
class FillForm:
    url: str
    fields: dict[str, str]
    tools: frozenset[str] = frozenset(
        {"browser_navigate", "browser_fill_form", "browser_read_page"}
    )

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return open_page(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        if len(steps) == 1:
            return ToolCall("browser_fill_form", {"fields": dict(self.fields)})
        if not steps[1].ok:
            return Answer(f"I could not fill the form on {self.url}: {steps[1].error}")
        if len(steps) == 2:
            return ToolCall("browser_read_page", {})
        page = steps[2].output if steps[2].ok else ""
        line = confirmation_line(page if isinstance(page, str) else json.dumps(page))
        if line is None:
            return Answer("The form was submitted, but the page shows no confirmation.")
        return Answer(f"Confirmation: {line}")


def _find_cheapest(
    probes: tuple[Step, ...],
) -> tuple[int, dict[str, Any]] | ToolCall | None:
    """The index of the probe that found a priced item and that item; else the next
    probe to make; None when every candidate was tried."""
    for index, probe in enumerate(probes):
        if probe.name != "browser_extract":
            continue
        best = cheapest(probe.output) if probe.ok else None
        if best is not None:
            return index, best
    tried = {str(probe.input.get("selector")) for probe in probes}
    for selector, fields in CANDIDATE_RECORDS:
        if selector not in tried:
            preface = _RETRY_PREFACE if probes else None
            return ToolCall(
                "browser_extract", {"selector": selector, "fields": dict(fields)}, preface=preface
            )
    return None


@dataclass(frozen=True)
class Cheapest:
    url: str
    thing: str
    detail: str | None = None

    @property
    def tools(self) -> frozenset[str]:
        needed = {"browser_navigate", "browser_extract"}
        if self.detail is not None:
            needed |= {"browser_click", "browser_read_page"}
        return frozenset(needed)

    def _not_found(self) -> Answer:
        selectors = ", ".join(selector for selector, _ in CANDIDATE_RECORDS)
        return Answer(
            f"I could not find any priced {self.thing} on {self.url}; I tried {selectors}."
        )

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return open_page(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        found = _find_cheapest(steps[1:])
        if found is None:
            return self._not_found()
        if isinstance(found, ToolCall):
            return found
        index, item = found
        name, price = collapse(item["name"]), collapse(item.get("price"))
        headline = f"Cheapest {self.thing}: {name} at {price}"
        if self.detail is None:
            return Answer(headline)
        after = steps[1 + index + 1 :]
        if not after:
            return ToolCall("browser_click", {"text": name})
        if not after[0].ok:
            return Answer(f"{headline}; I could not open it: {after[0].error}")
        if len(after) == 1:
            return ToolCall("browser_read_page", {})
        page = after[1].output if after[1].ok else ""
        value = detail_value(page if isinstance(page, str) else "", self.detail)
        if value is None:
            return Answer(f"{headline}; I found no {self.detail} on its page.")
        return Answer(f"{headline}; {self.detail}: {value}")


@dataclass(frozen=True)
class Extract:
    url: str
    selector: str
    tools: frozenset[str] = frozenset({"browser_navigate", "browser_extract"})

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return open_page(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        if len(steps) == 1:
            return ToolCall("browser_extract", {"selector": self.selector})
        items = string_items(steps[1])
        if not items:
            return Answer(f"No items match {self.selector} on {self.url}.")
        return Answer(format_list(f"Items matching {self.selector}:", items[:MAX_EXTRACT_ITEMS]))


@dataclass(frozen=True)
class Title:
    url: str
    tools: frozenset[str] = frozenset({"browser_navigate"})

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return open_page(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        output = steps[0].output
        title = output.get("title") if isinstance(output, dict) else None
        return Answer(f"Title: {collapse(title or '')}")


@dataclass(frozen=True)
class ReadPage:
    url: str
    tools: frozenset[str] = frozenset({"browser_navigate", "browser_read_page"})

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return open_page(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        if len(steps) == 1:
            return ToolCall("browser_read_page", {})
        page = steps[1].output if steps[1].ok and isinstance(steps[1].output, str) else ""
        lines = [line.strip() for line in page.splitlines() if line.strip()][:READ_LINES]
        return Answer("\n".join(["The page reads:", *lines]))


BrowsingTask = TopN | FillForm | Cheapest | Extract | Title | ReadPage
