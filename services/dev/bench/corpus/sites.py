"""The corpus's seven list sites and their content: news in sections, a shop, a
bookshop, hotels, fares, jobs and events."""

from __future__ import annotations

import random

from services.dev.bench.corpus.lists import ListSite, top_list
from services.dev.bench.corpus.site import (
    LIST_SIZE,
    Item,
    Layout,
    page,
    path_parts,
    pick_names,
    priced,
    rng_for,
    slugify,
)
from services.dev.demo.pages import Rendered

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
    rng = rng_for("gazette", section, edition)
    first, second = {
        "": (_NEWS_SUBJECTS, _NEWS_EVENTS),
        "sports": (_SPORT_TEAMS, _SPORT_EVENTS),
        "business": (_BUSINESS, _BUSINESS_EVENTS),
    }[section]
    names = pick_names(rng, first, second, LIST_SIZE)
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
        rng = rng_for("books", "new", edition)
        names = pick_names(rng, _NEW_FIRST, _NEW_SECOND, 6)
        return [Item(slugify(n), n, None, _book_facts(rng, n)) for n in names]
    return priced("books", section, edition, _BOOKS, _book_facts)


class _Bookshop(ListSite):
    """Priced books and unpriced new arrivals: each list has its own layouts."""

    NEW_LAYOUTS: dict[Layout, str] = {"v1": "h3", "v2": "li-item", "v3": "table-name"}

    def render(
        self, path: str, layout: Layout, edition: int, form: dict[str, str] | None = None
    ) -> Rendered:
        if path_parts(path) == ["books", "new"]:
            items = self.items("new", edition)
            listing = top_list(self.NEW_LAYOUTS[layout], items, "/" + self.detail_root)
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
    rng = rng_for("jobs", section, edition)
    names = pick_names(rng, _JOB_LEVELS, _JOB_ROLES[section], LIST_SIZE)
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
    rng = rng_for("events", section, edition)
    names = pick_names(rng, _EVENT_KINDS, _EVENT_PLACES, LIST_SIZE)
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
