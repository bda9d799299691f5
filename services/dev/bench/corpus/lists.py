"""The corpus's list sites: lists (unpriced or priced) and detail pages in each layout's
markup, each layout found by a different entry of the stand-in's candidate lists
(services/dev/standin/scripts.py CANDIDATE_SELECTORS and CANDIDATE_RECORDS)."""

from __future__ import annotations

from collections.abc import Callable

from services.dev.bench.corpus.site import (
    Item,
    Layout,
    Site,
    esc,
    not_found,
    page,
    path_parts,
)
from services.dev.demo.pages import Rendered


def top_list(kind: str, items: list[Item], base: str) -> str:
    """An unpriced list in one layout's markup: each kind is found by a different entry
    of the stand-in's CANDIDATE_SELECTORS (noted beside it)."""

    def link(i: Item) -> str:
        return f"<a href='{base}/{i.slug}'>{esc(i.name)}</a>"

    if kind == "headline":  # .headline
        rows = "".join(f"<li><h2 class='headline'>{link(i)}</h2></li>" for i in items)
        return f"<ul class='stories'>{rows}</ul>"
    if kind == "article-title":  # article .title
        rows = "".join(
            f"<article class='card'><h3 class='title'>{link(i)}</h3>"
            "<p class='teaser'>More inside.</p></article>"
            for i in items
        )
        return f"<main>{rows}</main>"
    if kind == "li-item":  # li.item
        rows = "".join(f"<li class='item'>{link(i)}</li>" for i in items)
        return f"<ol class='entries'>{rows}</ol>"
    if kind == "table-name":  # table tbody tr td.name
        rows = "".join(
            f"<tr><td class='name'>{esc(i.name)}</td>"
            f"<td class='more'><a href='{base}/{i.slug}'>details</a></td></tr>"
            for i in items
        )
        head = "<thead><tr><th>Name</th><th>Link</th></tr></thead>"
        return f"<table class='listing'>{head}<tbody>{rows}</tbody></table>"
    if kind == "h2":  # h2 (nothing earlier in the candidate list matches)
        rows = "".join(
            f"<div class='entry'><h2>{link(i)}</h2><p>Posted this week.</p></div>" for i in items
        )
        return f"<div class='board'>{rows}</div>"
    if kind == "h3":  # h3
        rows = "".join(f"<div class='tile'><h3>{link(i)}</h3></div>" for i in items)
        return f"<div class='grid'>{rows}</div>"
    if kind == "p-headline":  # .headline again, on paragraphs: a later redesign
        rows = "".join(f"<p class='headline'>{link(i)}</p>" for i in items)
        return f"<section class='feed'>{rows}</section>"
    raise ValueError(f"unknown list kind {kind!r}")


def _money(value: float, currency: str) -> str:
    return f"{currency}{value:,.2f}"


# Priced lists in each layout -> a record spec in CANDIDATE_RECORDS finds the entries.
# The name is always a link whose text is exactly the name (the detail step clicks it).
def _priced_list(kind: str, items: list[Item], base: str, currency: str) -> str:
    def link(i: Item) -> str:
        return f"<a href='{base}/{i.slug}'>{esc(i.name)}</a>"

    def money(i: Item) -> str:
        return esc(_money(i.price or 0.0, currency))

    if kind == "product":  # .product {.name, .price}
        rows = "".join(
            f"<div class='product'><span class='name'>{link(i)}</span> "
            f"<span class='price'>{money(i)}</span></div>"
            for i in items
        )
        return f"<section class='catalogue'>{rows}</section>"
    if kind == "li-item":  # li.item {.name, .price}
        rows = "".join(
            f"<li class='item'><span class='name'>{link(i)}</span> "
            f"<span class='price'>{money(i)}</span></li>"
            for i in items
        )
        return f"<ul class='results'>{rows}</ul>"
    if kind == "table":  # table tbody tr {td.name, td.price}
        rows = "".join(
            f"<tr><td class='name'>{link(i)}</td><td class='price'>{money(i)}</td></tr>"
            for i in items
        )
        return (
            "<table class='prices'><thead><tr><th>Name</th><th>Price</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    if kind == "article":  # article {h2, .price}
        rows = "".join(
            f"<article><h2>{link(i)}</h2><p class='price'>{money(i)}</p></article>" for i in items
        )
        return f"<main class='shelf'>{rows}</main>"
    if kind == "data-price":  # [data-price] {.name, @data-price}
        rows = "".join(
            f"<div class='offer' data-price='{(i.price or 0.0):.2f}'><span class='name'>"
            f"{link(i)}</span> <b class='amount'>{money(i)}</b></div>"
            for i in items
        )
        return f"<div class='offers'>{rows}</div>"
    raise ValueError(f"unknown priced list kind {kind!r}")


def _detail(item: Item, layout: Layout, currency: str | None) -> str:
    """A detail page: the name, the price, and one "Label: value" line per fact."""
    price = (
        f"Price: {esc(_money(item.price, currency))}" if item.price is not None and currency else ""
    )
    lines = ([price] if price else []) + [f"{esc(k)}: {esc(v)}" for k, v in item.facts]
    if layout == "v1":
        facts = "".join(f"<p>{line}</p>" for line in lines)
        return f"<h1>{esc(item.name)}</h1>{facts}"
    if layout == "v2":
        facts = "".join(f"<li>{line}</li>" for line in lines)
        return f"<header><h1>{esc(item.name)}</h1></header><ul class='facts'>{facts}</ul>"
    facts = "".join(f"<div class='fact'>{line}</div>" for line in lines)
    return f"<div class='hero'><h1>{esc(item.name)}</h1></div><div class='facts'>{facts}</div>"


class ListSite(Site):
    """A site of named lists (sections) with detail pages. `layouts` maps a layout to
    the list markup kind (of top_list, or of _priced_list when priced)."""

    def __init__(
        self,
        name: str,
        title: str,
        root: str,
        sections: dict[str, str],
        make: Callable[[str, int], list[Item]],
        layouts: dict[Layout, str],
        currency: str | None = None,
        detail_root: str | None = None,
    ) -> None:
        self.name = name
        self.title = title
        self.root = root  # "news": /news is the main list, /news/<section> the others
        self.sections = sections  # slug -> link text ("" for the main list)
        self.make = make
        self.layouts = layouts
        self.currency = currency
        self.detail_root = detail_root or f"{root}/item"

    def nav(self) -> list[tuple[str, str]]:
        links = [("/", "Home")]
        for slug, label in self.sections.items():
            links.append((f"/{self.root}/{slug}" if slug else f"/{self.root}", label or "All"))
        return links

    def items(self, section: str, edition: int) -> list[Item]:
        return self.make(section, edition)

    def render(
        self, path: str, layout: Layout, edition: int, form: dict[str, str] | None = None
    ) -> Rendered:
        parts = path_parts(path)
        if not parts:
            return 200, page(self.title, f"<h1>{esc(self.title)}</h1>", self.nav())
        detail = self.detail_root.split("/")
        if parts[: len(detail)] == detail and len(parts) == len(detail) + 1:
            for section in self.sections:
                for item in self.items(section, edition):
                    if item.slug == parts[-1]:
                        body = _detail(item, layout, self.currency)
                        return 200, page(item.name, body, self.nav())
            return not_found()
        if parts[0] != self.root or len(parts) > 2:
            return not_found()
        section = parts[1] if len(parts) == 2 else ""
        if section not in self.sections:
            return not_found()
        items = self.items(section, edition)
        kind = self.layouts[layout]
        base = "/" + self.detail_root
        if self.currency is None:
            listing = top_list(kind, items, base)
        else:
            listing = _priced_list(kind, items, base, self.currency)
        label = self.sections[section] or self.title
        heading = f"<h1>{esc(label)}</h1><p class='edition'>Updated for edition {edition + 1}.</p>"
        return 200, page(f"{self.title}: {label}", heading + listing, self.nav())

    def paths(self, edition: int) -> list[str]:
        out = ["/"]
        base = "/" + self.detail_root
        for section in self.sections:
            out.append(f"/{self.root}/{section}" if section else f"/{self.root}")
            out += [f"{base}/{item.slug}" for item in self.items(section, edition)]
        return out
