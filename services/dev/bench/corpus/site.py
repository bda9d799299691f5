"""What every site of the cost benchmark's corpus is made of: the layouts, content
seeded by site, section and edition (the same in every process), a page's frame, and the
interface a site serves its paths through."""

from __future__ import annotations

import hashlib
import html
import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from services.dev.demo.pages import Rendered

Layout = Literal["v1", "v2", "v3"]
LAYOUTS: tuple[Layout, ...] = ("v1", "v2", "v3")


LIST_SIZE = 8


def rng_for(*key: object) -> random.Random:
    # A str seed is hashed with SHA-512: the same content in every process.
    return random.Random(":".join(str(k) for k in key))


def ref_code(*key: object, digits: int = 5) -> str:
    digest = hashlib.sha256(":".join(str(k) for k in key).encode()).hexdigest()
    return str(int(digest[:12], 16) % 10**digits).zfill(digits)


def slugify(text: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def page(title: str, body: str, nav: list[tuple[str, str]] | None = None) -> bytes:
    """A whole document. Navigation is plain links (no list items or headings), so it
    never looks like the content a task reads."""
    links = " | ".join(f"<a href='{esc(href)}'>{esc(label)}</a>" for href, label in nav or [])
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title></head><body>"
        f"<nav class='site-nav'>{links}</nav>{body}"
        "<footer><small>A local site for rote's benchmarks.</small></footer>"
        "</body></html>"
    ).encode()


def not_found() -> Rendered:
    return 404, page("Not found", "<p>Nothing here.</p>")


# --- content ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One entry of a list: a story, a product, a fare. `price` is None for unpriced
    things; `facts` are the "Label: value" lines of its detail page."""

    slug: str
    name: str
    price: float | None = None
    facts: tuple[tuple[str, str], ...] = ()


def pick_names(rng: random.Random, first: list[str], second: list[str], count: int) -> list[str]:
    pairs = [f"{a} {b}" for a in first for b in second]
    return rng.sample(pairs, count)


def priced(
    site: str,
    key: str,
    edition: int,
    catalogue: list[tuple[str, float]],
    facts: Callable[[random.Random, str], tuple[tuple[str, str], ...]],
    count: int = LIST_SIZE,
) -> list[Item]:
    """`count` of the catalogue's items in a per-edition order, prices moved by up to
    +-35 % (so the cheapest changes from edition to edition)."""
    rng = rng_for(site, key, edition)
    chosen = rng.sample(catalogue, count)
    items = []
    for name, base in chosen:
        price = round(base * rng.uniform(0.65, 1.35), 2)
        items.append(Item(slugify(name), name, price, facts(rng, name)))
    return items


# --- the sites ------------------------------------------------------------------------------


class Site(ABC):
    """A site renders any of its paths in a layout and an edition."""

    name: str = ""
    title: str = ""

    @abstractmethod
    def render(
        self, path: str, layout: Layout, edition: int, form: dict[str, str] | None = None
    ) -> Rendered:
        """The page at `path`, in `layout` at `edition` (`form`: a POST's fields)."""

    @abstractmethod
    def paths(self, edition: int) -> list[str]:
        """Every GET page, for checks."""


def path_parts(path: str) -> list[str]:
    return [p for p in urlsplit(path).path.split("/") if p]
