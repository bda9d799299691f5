"""Local sites and recurring tasks for the cost benchmark (services/dev/bench/bench_cost.py).

Eight small sites, each rendered in three layouts (v1 -> v2 -> v3) and in numbered
editions. An edition changes the content (new stories, moved prices, fresh reference
numbers), so a replay must read the page again; a layout change is a redesign: the list
a task reads moves to markup that a *different* entry of the stand-in model's candidate
lists finds (services/dev/standin/policy.py CANDIDATE_SELECTORS and CANDIDATE_RECORDS), so
the selector a compiled executor recorded finds nothing any more. Forms keep their
field names through a redesign, page reads use no selector and an extract of a class
every layout keeps still matches: those tasks survive layout changes, as they would on
real sites.

Each task is a prompt in the stand-in's vocabulary with `{url}` for the site's origin.
Every task gets its own `SiteServer` (its own port, layout and edition), so tasks can
run side by side on their own schedules.

    with SiteServer(SITES["gazette"]) as server:
        server.layout, server.edition = "v2", 3
        prompt = TASKS[0].prompt_for(server.url)
"""

from __future__ import annotations

import hashlib
import html
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from services.dev.demo.pages import PageServer, Rendered

Layout = Literal["v1", "v2", "v3"]
LAYOUTS: tuple[Layout, ...] = ("v1", "v2", "v3")


LIST_SIZE = 8


def _rng(*key: object) -> random.Random:
    # A str seed is hashed with SHA-512: the same content in every process.
    return random.Random(":".join(str(k) for k in key))


def _code(*key: object, digits: int = 5) -> str:
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


def _pick_names(rng: random.Random, first: list[str], second: list[str], count: int) -> list[str]:
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
    rng = _rng(site, key, edition)
    chosen = rng.sample(catalogue, count)
    items = []
    for name, base in chosen:
        price = round(base * rng.uniform(0.65, 1.35), 2)
        items.append(Item(slugify(name), name, price, facts(rng, name)))
    return items


# --- the sites ------------------------------------------------------------------------------


class Site:
    """A site renders any of its paths in a layout and an edition."""

    name: str = ""
    title: str = ""

    def render(
        self, path: str, layout: Layout, edition: int, form: dict[str, str] | None = None
    ) -> Rendered:
        raise NotImplementedError

    def paths(self, edition: int) -> list[str]:
        """Every GET page, for checks."""
        raise NotImplementedError


def _parts(path: str) -> list[str]:
    return [p for p in urlsplit(path).path.split("/") if p]


def _top_list(kind: str, items: list[Item], base: str) -> str:
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
    the list markup kind (of _top_list, or of _priced_list when priced)."""

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
        parts = _parts(path)
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
            listing = _top_list(kind, items, base)
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


# -- the Gazette: news in sections

_NEWS_SUBJECTS = [
    "Harbour council", "Old town bakery", "Riverside school", "Night tram", "City orchestra",
    "Volunteer firefighters", "Botanical garden", "Central library", "Rowing club",
    "Market hall", "Coastal path", "Youth theatre", "Lighthouse museum", "Cycle lane",
]  # fmt: skip
_NEWS_EVENTS = [
    "votes on new budget", "reopens after repairs", "wins national prize", "plans summer fair",
    "hires new director", "marks centenary", "asks residents for ideas", "extends hours",
    "breaks visitor record", "unveils new logo", "signs twin-town deal",
]  # fmt: skip
_SPORT_TEAMS = ["Harbour FC", "Quay Rovers", "Old Town Hockey", "Riverside Netball",
                "Lighthouse Athletics", "Market Street Boxing", "Tram Depot Cricket"]  # fmt: skip
_SPORT_EVENTS = ["win derby", "sign new coach", "top the league", "lose cup final",
                 "open new stadium", "unveil new kit", "draw in late thriller"]  # fmt: skip
_BUSINESS = ["Fish market", "Ferry company", "Brewery", "Shipyard", "Bookshop chain",
             "Tech start-up", "Hotel group", "Bike maker"]  # fmt: skip
_BUSINESS_EVENTS = ["posts record profit", "opens second site", "hires forty staff",
                    "raises fresh capital", "cuts prices", "moves headquarters"]  # fmt: skip


def _stories(section: str, edition: int) -> list[Item]:
    rng = _rng("gazette", section, edition)
    first, second = {
        "": (_NEWS_SUBJECTS, _NEWS_EVENTS),
        "sports": (_SPORT_TEAMS, _SPORT_EVENTS),
        "business": (_BUSINESS, _BUSINESS_EVENTS),
    }[section]
    names = _pick_names(rng, first, second, LIST_SIZE)
    reporters = ["Ana Lima", "Tom Reyes", "Mia Ortiz", "Sam Okafor", "Lea Novak"]
    out = []
    for n, name in enumerate(names, 1):
        facts = (
            ("By", rng.choice(reporters)),
            ("Read time", f"{rng.randint(2, 9)} minutes"),
            ("Summary", f"{name}, as our reporters heard it this week."),
        )
        out.append(Item(f"{section or 'top'}-{n}", name, None, facts))
    return out


GAZETTE = ListSite(
    "gazette",
    "Harbour Gazette",
    "news",
    {"": "Top stories", "sports": "Sports", "business": "Business"},
    _stories,
    {"v1": "headline", "v2": "article-title", "v3": "li-item"},
    detail_root="story",
)

# -- Kitchen: a shop

_KITCHEN = [
    ("Espresso Grinder", 129.0), ("Pour-over Kettle", 54.5), ("Travel Mug", 19.9),
    ("Milk Frother", 34.0), ("Coffee Scale", 42.75), ("Cold Brew Jar", 27.5),
    ("Paper Filters", 6.4), ("Tamper", 22.0), ("Chef Knife", 89.0), ("Cutting Board", 31.0),
    ("Cast Iron Pan", 64.0), ("Salad Spinner", 24.5),
]  # fmt: skip
_MATERIALS = ["steel", "glass", "oak", "ceramic", "bamboo", "copper"]


def _kitchen_facts(rng: random.Random, name: str) -> tuple[tuple[str, str], ...]:
    return (
        ("Material", rng.choice(_MATERIALS)),
        ("Stock", f"{rng.randint(2, 40)} left"),
        ("Ships in", f"{rng.randint(1, 5)} days"),
    )


KITCHEN = ListSite(
    "kitchen",
    "Kitchen Corner",
    "products",
    {"": "All products"},
    lambda section, edition: priced("kitchen", section, edition, _KITCHEN, _kitchen_facts),
    {"v1": "product", "v2": "li-item", "v3": "table"},
    currency="$",
    detail_root="product",
)

# -- Bookshop: priced books, and a list of new arrivals

_BOOKS = [
    ("The Quiet Harbour", 14.0), ("Salt and Stone", 18.5), ("A Map of Tides", 11.9),
    ("Lanterns at Dusk", 16.0), ("The Glass Orchard", 21.0), ("Northern Lines", 9.5),
    ("Paper Boats", 12.75), ("The Last Ferry", 15.5), ("Winter Gardens", 19.0),
    ("Small Hours", 8.9), ("Copper Sky", 13.4), ("The Tin Lighthouse", 17.2),
]  # fmt: skip
_AUTHORS = ["Ines Duarte", "Oskar Lind", "Maya Brooks", "Kenji Sato", "Ruth Adeyemi",
            "Pablo Serra", "Nora Quinn"]  # fmt: skip


def _book_facts(rng: random.Random, name: str) -> tuple[tuple[str, str], ...]:
    return (
        ("Author", rng.choice(_AUTHORS)),
        ("Pages", str(rng.randint(120, 620))),
        ("Format", rng.choice(["paperback", "hardback", "ebook"])),
    )


_NEW_FIRST = ["The Hidden", "A Season of", "Letters from", "The Long", "Songs of", "The Red"]
_NEW_SECOND = ["Coast", "Foxes", "Bridges", "Winter", "Harvest", "Islands", "Clocks", "Rivers"]


def _books(section: str, edition: int) -> list[Item]:
    if section == "new":
        rng = _rng("books", "new", edition)
        names = _pick_names(rng, _NEW_FIRST, _NEW_SECOND, 6)
        return [Item(slugify(n), n, None, _book_facts(rng, n)) for n in names]
    return priced("books", section, edition, _BOOKS, _book_facts)


class _Bookshop(ListSite):
    """Priced books and unpriced new arrivals: each list has its own layouts."""

    NEW_LAYOUTS: dict[Layout, str] = {"v1": "h3", "v2": "li-item", "v3": "table-name"}

    def render(
        self, path: str, layout: Layout, edition: int, form: dict[str, str] | None = None
    ) -> Rendered:
        if _parts(path) == ["books", "new"]:
            items = self.items("new", edition)
            listing = _top_list(self.NEW_LAYOUTS[layout], items, "/" + self.detail_root)
            heading = "<h1>New arrivals</h1><p class='edition'>Fresh this week.</p>"
            return 200, page("Bookshop: New arrivals", heading + listing, self.nav())
        return super().render(path, layout, edition, form)


BOOKSHOP = _Bookshop(
    "bookshop",
    "Bookshop",
    "books",
    {"": "All books", "new": "New arrivals"},
    _books,
    {"v1": "article", "v2": "data-price", "v3": "li-item"},
    currency="£",
    detail_root="book",
)

# -- Stays: hotels by city

_HOTELS = {
    "lisbon": [("Casa Alfama", 95.0), ("Hotel Tejo", 120.0), ("Rossio Rooms", 80.0),
               ("Belem Suites", 140.0), ("Chiado House", 110.0), ("Graca View", 88.0),
               ("Avenida Inn", 99.0), ("Bairro Loft", 105.0), ("Estrela Garden", 92.0)],
    "porto": [("Ribeira Hotel", 90.0), ("Douro Stay", 115.0), ("Bolhao Rooms", 70.0),
              ("Foz Residence", 130.0), ("Aliados Inn", 85.0), ("Cedofeita House", 78.0),
              ("Miragaia Lodge", 98.0), ("Boavista Suites", 125.0), ("Lapa Rooms", 82.0)],
}  # fmt: skip


def _hotel_facts(rng: random.Random, name: str) -> tuple[tuple[str, str], ...]:
    return (
        ("Rating", f"{rng.uniform(6.5, 9.8):.1f}"),
        ("Check-in", f"{rng.choice([14, 15, 16])}:00"),
        ("Breakfast", rng.choice(["included", "extra"])),
    )


STAYS = ListSite(
    "stays",
    "Stays",
    "hotels",
    {"lisbon": "Lisbon", "porto": "Porto"},
    lambda section, edition: priced("stays", section, edition, _HOTELS[section], _hotel_facts),
    {"v1": "table", "v2": "product", "v3": "article"},
    currency="€",
    detail_root="hotel",
)

# -- Fares: flights by route

_FLIGHTS = {
    "lis-mad": [(f"Flight {c}", p) for c, p in [("TP1020", 89.0), ("IB3101", 75.0),
                ("UX1152", 64.0), ("FR7431", 39.0), ("TP1024", 120.0), ("IB3107", 99.0),
                ("U27721", 58.0), ("VY8460", 71.0), ("TP1028", 135.0)]],
    "lis-opo": [(f"Flight {c}", p) for c, p in [("TP1940", 59.0), ("TP1944", 72.0),
                ("FR2123", 29.0), ("TP1946", 88.0), ("NI1230", 45.0), ("TP1950", 95.0),
                ("FR2127", 35.0), ("NI1234", 52.0), ("TP1954", 110.0)]],
}  # fmt: skip


def _fare_facts(rng: random.Random, name: str) -> tuple[tuple[str, str], ...]:
    return (
        ("Departure", f"{rng.randint(6, 21):02d}:{rng.choice(['05', '20', '35', '50'])}"),
        ("Duration", f"{rng.randint(55, 80)} min"),
        ("Bags", rng.choice(["cabin only", "one checked bag"])),
    )


FARES = ListSite(
    "fares",
    "Fares",
    "fares",
    {"lis-mad": "Lisbon to Madrid", "lis-opo": "Lisbon to Porto"},
    lambda section, edition: priced("fares", section, edition, _FLIGHTS[section], _fare_facts),
    {"v1": "li-item", "v2": "data-price", "v3": "product"},
    currency="EUR ",
    detail_root="flight",
)

# -- Jobs board

_JOB_LEVELS = ["Junior", "Senior", "Lead", "Staff", "Principal", "Freelance"]
_JOB_ROLES = {
    "": ["Backend Engineer", "Data Analyst", "Product Designer", "Support Agent",
         "Site Reliability Engineer", "Recruiter", "Copywriter"],
    "design": ["Product Designer", "UX Researcher", "Brand Designer", "Illustrator",
               "Motion Designer"],
    "engineering": ["Backend Engineer", "Frontend Engineer", "Data Engineer",
                    "Mobile Engineer", "Platform Engineer"],
}  # fmt: skip


def _jobs(section: str, edition: int) -> list[Item]:
    rng = _rng("jobs", section, edition)
    names = _pick_names(rng, _JOB_LEVELS, _JOB_ROLES[section], LIST_SIZE)
    out = []
    for name in names:
        facts = (
            ("Location", rng.choice(["Remote", "Lisbon", "Berlin", "Dublin"])),
            ("Salary", f"{rng.randint(35, 120)}k"),
        )
        out.append(Item(slugify(f"{section}-{name}"), name, None, facts))
    return out


JOBS = ListSite(
    "jobs",
    "Harbour Jobs",
    "jobs",
    {"": "All jobs", "design": "Design", "engineering": "Engineering"},
    _jobs,
    {"v1": "table-name", "v2": "h2", "v3": "p-headline"},
    detail_root="job",
)

# -- Events listing

_EVENT_KINDS = ["Jazz night", "Food market", "Poetry reading", "Street race", "Film club",
                "Craft fair", "Choir concert", "Harbour tour", "Chess open"]  # fmt: skip
_EVENT_PLACES = ["at the Quay", "in Market Hall", "at Lighthouse Park", "in the Old Town",
                 "at the Library", "on Tram Square"]  # fmt: skip


def _events(section: str, edition: int) -> list[Item]:
    rng = _rng("events", section, edition)
    names = _pick_names(rng, _EVENT_KINDS, _EVENT_PLACES, LIST_SIZE)
    out = []
    for name in names:
        facts = (("Starts", f"{rng.randint(10, 21)}:00"), ("Entry", rng.choice(["free", "paid"])))
        out.append(Item(slugify(f"{section}-{name}"), name, None, facts))
    return out


EVENTS = ListSite(
    "events",
    "What's on",
    "events",
    {"": "All events", "weekend": "This weekend"},
    _events,
    {"v1": "article-title", "v2": "li-item", "v3": "h3"},
    detail_root="event",
)

# -- Town hall: forms and a status page


@dataclass(frozen=True)
class FormField:
    name: str
    label: str
    kind: Literal["text", "email", "date", "number", "select", "textarea"] = "text"
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class FormSpec:
    slug: str
    title: str
    fields: tuple[FormField, ...]
    confirm: Callable[[dict[str, str], int], str]  # the confirmation line


def _signup_done(form: dict[str, str], edition: int) -> str:
    ref = _code("signup", edition, form.get("email", ""))
    return (
        f"Thank you, {form.get('name', 'friend')}! Your {form.get('plan', 'basic')} plan is "
        f"confirmed, membership number M-{ref}."
    )


def _contact_done(form: dict[str, str], edition: int) -> str:
    ticket = _code("contact", edition, form.get("message", ""), digits=6)
    days = 1 + edition % 4
    return (
        f"Message received, {form.get('name', 'friend')}: ticket #{ticket}, "
        f"we reply within {days} working days."
    )


def _booking_done(form: dict[str, str], edition: int) -> str:
    ref = _code("booking", edition, form.get("date", ""), form.get("guests", ""))
    return (
        f"Booking confirmed for {form.get('guests', '1')} guests on {form.get('date', '?')}, "
        f"{form.get('name', 'friend')}: reference BK-{ref}."
    )


FORMS: dict[str, FormSpec] = {
    "signup": FormSpec(
        "signup",
        "Join the library",
        (
            FormField("name", "Full name"),
            FormField("email", "Email address", "email"),
            FormField("plan", "Plan", "select", ("basic", "pro", "family")),
        ),
        _signup_done,
    ),
    "contact": FormSpec(
        "contact",
        "Write to the town hall",
        (
            FormField("name", "Your name"),
            FormField("email", "Email", "email"),
            FormField("message", "Message", "textarea"),
        ),
        _contact_done,
    ),
    "booking": FormSpec(
        "booking",
        "Book the community room",
        (
            FormField("name", "Name"),
            FormField("date", "Date", "date"),
            FormField("guests", "Guests", "number"),
        ),
        _booking_done,
    ),
}

_SERVICES = ["Water supply", "Waste collection", "Libraries", "Parking permits",
             "Online payments", "Swimming pool", "Bus lanes", "Recycling centre",
             "Marriage registry", "Council tax portal"]  # fmt: skip
_STATES = ["operational", "operational", "operational", "degraded", "under maintenance",
           "closed for the holiday"]  # fmt: skip


def _control(f: FormField, layout: Layout) -> str:
    ident = f"{'f-' if layout == 'v2' else ''}{f.name}"
    hint = f" placeholder='{esc(f.label)}'" if layout == "v3" else ""
    if f.kind == "select":
        options = "".join(f"<option value='{esc(o)}'>{esc(o.title())}</option>" for o in f.options)
        return f"<select name='{f.name}' id='{ident}'>{options}</select>"
    if f.kind == "textarea":
        return f"<textarea name='{f.name}' id='{ident}'{hint}></textarea>"
    return f"<input type='{f.kind}' name='{f.name}' id='{ident}'{hint}>"


def _form_html(spec: FormSpec, layout: Layout) -> str:
    action = f"/{spec.slug}/done"
    if layout == "v1":
        rows = "".join(
            f"<p><label>{esc(f.label)} {_control(f, layout)}</label></p>" for f in spec.fields
        )
        button = "<button type='submit'>Send</button>"
        return f"<form method='post' action='{action}'>{rows}{button}</form>"
    if layout == "v2":
        rows = "".join(
            f"<div class='row'><label for='f-{f.name}'>{esc(f.label)}</label>"
            f"{_control(f, layout)}</div>"
            for f in spec.fields
        )
        return (
            f"<form class='stacked' method='post' action='{action}'>{rows}"
            "<div class='actions'><button type='submit'>Submit</button></div></form>"
        )
    rows = "".join(f"<div class='field'>{_control(f, layout)}</div>" for f in spec.fields)
    return (
        f"<form class='cards' method='post' action='{action}'><fieldset><legend>"
        f"{esc(spec.title)}</legend>{rows}</fieldset>"
        "<input type='submit' value='Continue'></form>"
    )


class TownHall(Site):
    name = "townhall"
    title = "Town Hall"

    def nav(self) -> list[tuple[str, str]]:
        return [("/", "Home"), ("/signup", "Library card"), ("/contact", "Contact"),
                ("/booking", "Room booking"), ("/status", "Service status")]  # fmt: skip

    def status_lines(self, edition: int) -> list[tuple[str, str]]:
        rng = _rng("townhall", "status", edition)
        return [(service, rng.choice(_STATES)) for service in _SERVICES]

    def _status(self, layout: Layout, edition: int) -> bytes:
        lines = self.status_lines(edition)
        head = f"<h1>Service status</h1><p>Checked at {6 + edition % 12:02d}:00 today.</p>"
        if layout == "v1":
            body = "<ul>" + "".join(f"<li>{esc(s)}: {esc(v)}</li>" for s, v in lines) + "</ul>"
        elif layout == "v2":
            rows = "".join(f"<tr><td>{esc(s)}</td><td>{esc(v)}</td></tr>" for s, v in lines)
            head_row = "<thead><tr><th>Service</th><th>State</th></tr></thead>"
            body = f"<table>{head_row}<tbody>{rows}</tbody></table>"
        else:
            body = "".join(f"<div class='svc'><b>{esc(s)}</b> is {esc(v)}</div>" for s, v in lines)
        return page("Service status", head + body, self.nav())

    def render(
        self, path: str, layout: Layout, edition: int, form: dict[str, str] | None = None
    ) -> Rendered:
        parts = _parts(path)
        if not parts:
            return 200, page(self.title, "<h1>Town Hall</h1><p>Services online.</p>", self.nav())
        if parts == ["status"]:
            return 200, self._status(layout, edition)
        spec = FORMS.get(parts[0])
        if spec is None or len(parts) > 2:
            return not_found()
        if len(parts) == 1:
            body = f"<h1>{esc(spec.title)}</h1>{_form_html(spec, layout)}"
            return 200, page(spec.title, body, self.nav())
        if parts[1] != "done":
            return not_found()
        line = spec.confirm({k: v for k, v in (form or {}).items() if v}, edition)
        body = f"<h1>{esc(spec.title)}</h1><p class='outcome'>{esc(line)}</p>"
        return 200, page("Done", body, self.nav())

    def paths(self, edition: int) -> list[str]:
        return ["/", "/status", *(f"/{slug}" for slug in FORMS)]


TOWNHALL = TownHall()

SITES: dict[str, Site] = {
    site.name: site for site in (GAZETTE, KITCHEN, BOOKSHOP, STAYS, FARES, JOBS, EVENTS, TOWNHALL)
}


# --- serving ------------------------------------------------------------------------------


class SiteServer(PageServer):
    """One site on its own port, with its own layout and edition (change them between
    runs: `server.layout = "v2"; server.edition += 1`)."""

    def __init__(
        self, site: Site, *, layout: Layout = "v1", edition: int = 0, host: str = "127.0.0.1"
    ) -> None:
        super().__init__(host=host, name=site.name)
        self.site = site
        self.layout: Layout = layout
        self.edition = edition

    def render(self, path: str, form: dict[str, str] | None = None) -> Rendered:
        return self.site.render(path, self.layout, self.edition, form)


# --- the tasks ------------------------------------------------------------------------------

TaskKind = Literal["list", "click_list", "cheapest", "cheapest_detail", "form", "read", "extract"]


@dataclass(frozen=True)
class CorpusTask:
    """A recurring task: a prompt over one site, and the layouts its site goes through.

    `changes` are the 1-based runs before which the site moves to the next layout of
    `layouts`; `breaks` says whether the redesign is meant to break a replay (the unit
    test checks the markup really does, or really does not)."""

    task_id: str
    kind: TaskKind
    site: str
    prompt: str  # "{url}" is the site's origin
    breaks: bool = True
    layouts: tuple[Layout, ...] = LAYOUTS
    changes: tuple[int, ...] = (4, 8)

    def prompt_for(self, url: str) -> str:
        return self.prompt.format(url=url)

    def layout_at(self, run: int, changes: tuple[int, ...] | None = None) -> Layout:
        """The layout in force for 1-based `run`."""
        moved = sum(1 for before in (self.changes if changes is None else changes) if run >= before)
        return self.layouts[min(moved, len(self.layouts) - 1)]


def _t(task_id: str, kind: TaskKind, site: str, prompt: str, **kw: object) -> CorpusTask:
    return CorpusTask(task_id, kind, site, prompt, **kw)  # type: ignore[arg-type]


ONE_CHANGE = {"layouts": ("v1", "v2"), "changes": (6,)}

TASKS: tuple[CorpusTask, ...] = (
    _t("gazette-top3", "list", "gazette", "Open {url}/news and report the top 3 headlines"),
    _t("gazette-sports", "click_list", "gazette",
       "Open {url}/news, click Sports, and report the top 4 sports headlines"),
    _t("gazette-business", "click_list", "gazette",
       "Open {url}/news, click Business, and report the top 2 business headlines", **ONE_CHANGE),
    _t("gazette-story", "read", "gazette", "Open {url}/story/top-1 and read the page",
       breaks=False),
    _t("kitchen-cheapest", "cheapest", "kitchen",
       "Open {url}/products and report the cheapest product"),
    _t("kitchen-stock", "cheapest_detail", "kitchen",
       "Open {url}/products, open the cheapest product and report its stock"),
    _t("kitchen-prices", "extract", "kitchen", "Open {url}/products and extract `.price`",
       breaks=False),
    _t("books-cheapest", "cheapest", "bookshop", "Open {url}/books and report the cheapest book",
       **ONE_CHANGE),
    _t("books-author", "cheapest_detail", "bookshop",
       "Open {url}/books, open the cheapest book and report its author"),
    _t("books-new", "list", "bookshop", "Open {url}/books/new and report the top 5 titles"),
    _t("stays-lisbon", "cheapest", "stays",
       "Open {url}/hotels/lisbon and report the cheapest hotel"),
    _t("stays-porto-rating", "cheapest_detail", "stays",
       "Open {url}/hotels/porto, open the cheapest hotel and report its rating", **ONE_CHANGE),
    _t("fares-madrid", "cheapest", "fares",
       "Open {url}/fares/lis-mad and report the cheapest fare"),
    _t("fares-porto-departure", "cheapest_detail", "fares",
       "Open {url}/fares/lis-opo, open the cheapest fare and report its departure"),
    _t("jobs-top5", "list", "jobs", "Open {url}/jobs and report the top 5 jobs", **ONE_CHANGE),
    _t("jobs-design", "click_list", "jobs",
       "Open {url}/jobs, click Design, and report the top 3 design jobs"),
    _t("events-top4", "list", "events", "Open {url}/events and report the top 4 events"),
    _t("events-weekend", "click_list", "events",
       "Open {url}/events, click This weekend, and report the top 3 events", **ONE_CHANGE),
    _t("townhall-signup", "form", "townhall",
       "Open {url}/signup, fill the form with name=Ada Lovelace, email=ada@example.com, "
       "plan=pro and report the confirmation", breaks=False),
    _t("townhall-contact", "form", "townhall",
       'Open {url}/contact, fill the form with name=Grace Hopper, email=grace@example.com, '
       'message="Is the pool open on Sunday, and until when?" and report the confirmation',
       breaks=False),
    _t("townhall-booking", "form", "townhall",
       "Open {url}/booking, fill the form with name=Alan Turing, date=2025-07-01, guests=12 "
       "and report the confirmation", breaks=False),
    _t("townhall-status", "read", "townhall", "Open {url}/status and read the page",
       breaks=False),
)  # fmt: skip

TASKS_BY_ID: dict[str, CorpusTask] = {task.task_id: task for task in TASKS}
