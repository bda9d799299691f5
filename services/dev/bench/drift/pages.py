"""The drift corpus's other page kinds: labelled values (a product's specifications, as
<dl> in v1 and two parallel lists in v2) and ranked lists (stories by time or by reads,
in `.headline` markup in v1 and `li.item` in v2), each written in a page state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.dev.bench.corpus.site import esc
from services.dev.bench.drift.state import (
    PageState,
    caption,
    frame,
    home_or_missing,
    number,
    say,
    updated_line,
)
from services.dev.demo.pages import Rendered

LB_PER_KG = 2.20462
FL_OZ_PER_L = 33.814


@dataclass(frozen=True)
class Spec:
    field: str
    en: str
    pt: str
    unit: str  # canonical: kg, cm, l
    decimals: int


# What a unit_changed drift shows each canonical unit in.
CONVERTED = {"kg": ("lb", LB_PER_KG), "l": ("fl oz", FL_OZ_PER_L)}


def spec_unit(spec: Spec, state: PageState) -> tuple[str, float]:
    if state.has("unit_changed") and spec.unit in CONVERTED:
        return CONVERTED[spec.unit]
    return spec.unit, 1.0


@dataclass(frozen=True)
class PairsSite:
    """Product pages at /specs/<slug>: one labelled value per spec."""

    name: str
    title: str
    products: dict[str, str]  # slug -> name
    specs: tuple[Spec, ...]
    values: Callable[[str, int], dict[str, float]]  # (slug, edition) -> canonical values

    def shown(self, state: PageState) -> list[Spec]:
        """The specs in page order: label_value_swapped trades each pair's places."""
        specs = list(self.specs)
        if state.has("label_value_swapped"):
            for i in range(0, len(specs) - 1, 2):
                specs[i], specs[i + 1] = specs[i + 1], specs[i]
        return specs

    def render(self, path: str, state: PageState) -> Rendered:
        parts = [p for p in path.split("/") if p]
        if len(parts) != 2 or parts[0] != "specs" or parts[1] not in self.products:
            return home_or_missing(self.title, path, state, self.nav())
        values = self.values(parts[1], state.data_edition)
        labels, shown = [], []
        for spec in self.shown(state):
            unit, factor = spec_unit(spec, state)
            labels.append(esc(f"{say(state, spec.en, spec.pt)} ({unit})"))
            shown.append(esc(number(state, values[spec.field] * factor, spec.decimals)))
        if state.layout == "v1":
            pairs = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in zip(labels, shown, strict=True))
            body = f"<dl class='specs'>{pairs}</dl>"
        else:
            keys = "".join(f"<li>{k}</li>" for k in labels)
            vals = "".join(f"<li>{v}</li>" for v in shown)
            body = f"<ul class='keys'>{keys}</ul><ul class='values'>{vals}</ul>"
        heading = f"<h1>{esc(self.products[parts[1]])}</h1>"
        notes = caption(say(state, "Specifications", "Especificações"))
        return 200, frame(
            state, self.title, heading + notes + body + updated_line(state), self.nav()
        )

    def nav(self) -> list[tuple[str, str]]:
        return [("/", "Home")] + [(f"/specs/{slug}", name) for slug, name in self.products.items()]

    def paths(self) -> list[str]:
        return [f"/specs/{slug}" for slug in self.products]


@dataclass(frozen=True)
class Ranking:
    path: str
    heading: str
    by: str  # the story field the list is ranked by, highest first
    first: tuple[str, str]  # the caption, (en, pt), in the page's usual order
    reversed_first: tuple[str, str]  # the caption when the order is reversed


@dataclass(frozen=True)
class RankedSite:
    """Stories ranked on several pages; a story is {"title", "time", "reads"}."""

    name: str
    title: str
    rankings: tuple[Ranking, ...]
    stories: Callable[[int], list[dict[str, Any]]]

    def ranking(self, path: str) -> Ranking | None:
        return next((r for r in self.rankings if r.path == path.rstrip("/")), None)

    def ranked(self, ranking: Ranking, edition: int) -> list[str]:
        """Titles in the ranking's own order (highest first)."""
        ordered = sorted(self.stories(edition), key=lambda s: s[ranking.by], reverse=True)
        return [s["title"] for s in ordered]

    def render(self, path: str, state: PageState) -> Rendered:
        ranking = self.ranking(path)
        if ranking is None:
            return home_or_missing(self.title, path, state, self.nav())
        titles = self.ranked(ranking, state.data_edition)
        note = ranking.first
        if state.has("sort_reversed"):
            titles, note = titles[::-1], ranking.reversed_first
        if state.layout == "v1":
            items = "".join(f"<li><h2 class='headline'>{esc(t)}</h2></li>" for t in titles)
            listing = f"<ol class='stories'>{items}</ol>"
        else:
            items = "".join(f"<li class='item'>{esc(t)}</li>" for t in titles)
            listing = f"<ul class='feed'>{items}</ul>"
        body = f"<h1>{esc(ranking.heading)}</h1>{caption(say(state, *note))}{listing}"
        return 200, frame(state, self.title, body + updated_line(state), self.nav())

    def nav(self) -> list[tuple[str, str]]:
        return [("/", "Home")] + [(r.path, r.heading) for r in self.rankings]

    def paths(self) -> list[str]:
        return [r.path for r in self.rankings]
